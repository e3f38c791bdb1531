/* backends/cuda_sm120/cuda_q6r.c — knob gemv_q6r: the regrouped copies
 * (CU_TYPE_Q6R, cuda_internal.h) of Q6_K weights that one-column decode
 * products read on gq_kernel (cuda_gemvq.cu), whose lanes then load
 * aligned 16-byte units instead of 2-byte-aligned blocks.
 *
 * A copy is made of a whole dense Q6_K weight when it is loaded
 * (cuda_weight_load), or on a product's first use of weights that have
 * none (outside graph capture: no allocation may happen there), while a
 * reserve of the device's memory stays free (cu_mem_fits); otherwise the
 * product reads the Q6_K rows, the same bits.  Regrouping keeps each
 * 1680-byte group of 8 blocks at its offset, so the copy of a weight
 * serves any of its rows: an entry covers [w, w_end) and answers every
 * range inside it that starts on a group.  Entries go when a copy into
 * their memory or its release could make them stale (cu_q6r_drop, from
 * the upload and buf_free), and then captured graphs that may read them
 * are stale too (ws_gen). */
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "cuda_internal.h"

#define Q6R_GROUP 1680   /* bytes of 8 Q6_K blocks */

typedef struct cu_q6r_entry {
    const uint8_t *w, *w_end;   /* the Q6_K bytes it was made from */
    uint8_t       *mem;         /* device: the regrouped copy */
} cu_q6r_entry;

struct cu_q6r_cache {
    cu_q6r_entry *e;
    size_t        n, cap;
    size_t        bytes;   /* device memory held */
    bool          full;    /* the reserve was reached: no more entries */
};

const uint8_t *cu_q6r_get(si_backend *b, const uint8_t *w, uint64_t bytes)
{
    if (!b->gemv_q6r || w == NULL || bytes == 0 || bytes % Q6R_GROUP != 0)
        return NULL;
    struct cu_q6r_cache *c = b->q6r;
    if (c == NULL) {
        if ((c = calloc(1, sizeof *c)) == NULL)
            return NULL;   /* (no host memory: the Q6_K rows) */
        b->q6r = c;
    }
    for (size_t i = 0; i < c->n; i++) {
        const cu_q6r_entry *e = &c->e[i];
        if (w >= e->w && w + bytes <= e->w_end && (uint64_t)(w - e->w) % Q6R_GROUP == 0)
            return e->mem + (w - e->w);
    }
    if (c->full || b->capturing || (uintptr_t)w % 2 != 0)
        return NULL;
    if (c->n == c->cap) {
        const size_t cap = c->cap ? 2 * c->cap : 64;
        cu_q6r_entry *ne = realloc(c->e, cap * sizeof *ne);
        if (ne == NULL)
            return NULL;
        c->e = ne;
        c->cap = cap;
    }
    uint8_t *mem = NULL;
    if (!cu_mem_fits(bytes) || cudaMalloc((void **)&mem, bytes) != cudaSuccess) {
        cudaGetLastError();
        c->full = true;
        b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                     "gemv_q6r: %zu copies, %.1f MiB; no more (the device's free-memory reserve): later "
                     "Q6_K products read the Q6_K rows", c->n, (double)c->bytes / 1048576.0);
        return NULL;
    }
    if (si_cu_q6r_copy(w, mem, bytes, b->stream) != 0) {
        cudaGetLastError();
        cudaFree(mem);
        return NULL;   /* (the product reads the Q6_K rows) */
    }
    c->e[c->n++] = (cu_q6r_entry){ w, w + bytes, mem };
    c->bytes += bytes;
    return mem;
}

void cu_q6r_drop(si_backend *b, const void *lo, const void *hi)
{
    struct cu_q6r_cache *c = b->q6r;
    if (c == NULL || c->n == 0)
        return;
    bool synced = false;
    for (size_t i = 0; i < c->n;) {
        cu_q6r_entry *e = &c->e[i];
        if (e->w < (const uint8_t *)hi && (const uint8_t *)lo < e->w_end) {
            if (!synced && b->stream != NULL)
                cudaStreamSynchronize(b->stream);   /* a product may still read it */
            synced = true;
            b->ws_gen++;
            cudaFree(e->mem);
            c->bytes -= (size_t)(e->w_end - e->w);
            c->e[i] = c->e[--c->n];
            c->full = false;
        } else {
            i++;
        }
    }
}

void cu_q6r_free(si_backend *b)
{
    struct cu_q6r_cache *c = b->q6r;
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++)
        cudaFree(c->e[i].mem);
    free(c->e);
    free(c);
    b->q6r = NULL;
}
