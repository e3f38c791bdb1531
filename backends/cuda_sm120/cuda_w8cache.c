/* backends/cuda_sm120/cuda_w8cache.c — knob w8_cache: the int8 copies of
 * weight matrices made by mma_weights = i8 (cuda_w8.cu), kept on the
 * device after their first product so later prefill chunks skip the
 * requantisation (bench_gemm on the H200: a 12288 x 4096 Q4_K product at
 * 512 columns takes 178 us on cached int8 weights, 289 us requantising
 * them first).
 *
 * An entry is keyed by the weight's device address and the product's
 * shape; it is dropped when a copy into that memory or its buffer's
 * release could make it stale (cu_w8_cache_drop, from cuda_sm120.c's
 * upload and buf_free).  It is made only while at least a reserve of the
 * device's memory stays free (the KV cache and scratch grow later too);
 * past that, or when cudaMalloc fails, the product requantises into the
 * scratch as without the cache.  During graph capture an entry is used but
 * none is made (no allocation may happen there); dropping one makes the
 * captured graphs stale (ws_gen), as they may read it. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "cuda_internal.h"

typedef struct cu_w8_entry {
    cu_wcopy       c;       /* the weight bytes; mem: int8 rows, then the f32
                             * scales at ws_off */
    uint32_t       type;
    int64_t        rows, in;
    uint64_t       row_bytes;
    int            g;
    size_t         ws_off;
} cu_w8_entry;

struct cu_w8_cache {
    cu_w8_entry *e;
    size_t       n, cap;
    size_t       bytes;     /* device memory held */
    bool         full;      /* the reserve was reached: no more entries */
};

/* Not rows * row_bytes: a one-row weight's cu_mm has row_bytes 0
 * (cuda_ops.c's row_stride), and such an entry was never dropped
 * (check_cuda_ops caught a stale one at the next weight allocated at the
 * same address). */
uint64_t cu_weight_span(uint32_t type, int64_t in, int64_t rows, uint64_t row_bytes)
{
    uint32_t blk = 0, bytes = 0;
    si_oc_type_blk(type, &blk, &bytes);
    const uint64_t row = blk ? (uint64_t)(in / blk) * bytes : 0;
    return (uint64_t)(rows - 1) * row_bytes + row;
}

/* The end of the bytes the product reads: the last row's data. */
static const uint8_t *weight_end(const cu_mm *m)
{
    return m->w + cu_weight_span(m->type, m->in, m->rows, m->row_bytes);
}

static bool same_key(const cu_w8_entry *e, const cu_mm *m, int g)
{
    return e->c.w == m->w && e->type == m->type && e->rows == m->rows && e->in == m->in &&
           e->row_bytes == m->row_bytes && e->g == g;
}

/* Free memory that must remain after an entry: 1/16 of the device, at
 * least 1 GiB. */
bool cu_mem_fits(size_t bytes)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    size_t reserve = total_b / 16;
    if (reserve < ((size_t)1 << 30))
        reserve = (size_t)1 << 30;
    return free_b > reserve && free_b - reserve >= bytes;
}

int cu_w8_cache_get(si_backend *b, const cu_mm *m, int g, const int8_t **wq, const float **ws, si_err *err)
{
    *wq = NULL;
    *ws = NULL;
    if (!b->w8_cache_on)
        return SI_OK;
    struct cu_w8_cache *c = b->w8_cache;
    if (c == NULL) {
        if ((c = calloc(1, sizeof *c)) == NULL)
            return SI_OK;   /* (no host memory: run uncached) */
        b->w8_cache = c;
    }
    for (size_t i = 0; i < c->n; i++)
        if (same_key(&c->e[i], m, g)) {
            *wq = (const int8_t *)c->e[i].c.mem;
            *ws = (const float *)(c->e[i].c.mem + c->e[i].ws_off);
            return SI_OK;
        }
    if (c->full || b->capturing)
        return SI_OK;
    const size_t ws_off = ((size_t)(m->rows * m->in) + 255) & ~(size_t)255;
    const size_t bytes = ws_off + (size_t)(m->rows * (m->in / g)) * 4;
    if (!cu_wcopy_room((void **)&c->e, &c->cap, c->n, sizeof *c->e))
        return SI_OK;
    uint8_t *mem = NULL;
    if (!cu_mem_fits(bytes) || cudaMalloc((void **)&mem, bytes) != cudaSuccess) {
        cudaGetLastError();
        c->full = true;
        b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                     "w8_cache: %zu entries, %.1f MiB; no more (the device's free-memory reserve): later "
                     "products requantise per call", c->n, (double)c->bytes / 1048576.0);
        return SI_OK;
    }
    int rc = si_cu_w8_weights(m, g, (int8_t *)mem, (float *)(mem + ws_off), b->stream);
    if (rc != 0) {
        cudaFree(mem);
        return si_err_set(err, SI_EDEVICE, CU_NAME ": MATMUL (int8 weights, cached): %s", si_cu_errstr(rc));
    }
    cu_w8_entry *e = &c->e[c->n++];
    e->c = (cu_wcopy){ m->w, weight_end(m), mem, bytes };
    e->type = m->type;
    e->rows = m->rows;
    e->in = m->in;
    e->row_bytes = m->row_bytes;
    e->g = g;
    e->ws_off = ws_off;
    c->bytes += bytes;
    *wq = (const int8_t *)mem;
    *ws = (const float *)(mem + ws_off);
    return SI_OK;
}

void cu_w8_cache_drop(si_backend *b, const void *lo, const void *hi)
{
    struct cu_w8_cache *c = b->w8_cache;
    if (c == NULL || c->n == 0)
        return;
    const size_t freed = cu_wcopy_drop(b, c->e, &c->n, sizeof *c->e, lo, hi);
    c->bytes -= freed;
    c->full = c->full && freed == 0;
}

void cu_w8_cache_free(si_backend *b)
{
    struct cu_w8_cache *c = b->w8_cache;
    if (c == NULL)
        return;
    cu_wcopy_free(c->e, c->n, sizeof *c->e);
    free(c);
    b->w8_cache = NULL;
}

/* ---- shared by the caches of weight copies (w8_cache above, the
 * regrouped copies of cuda_regroup.c): arrays of entries of `size` bytes,
 * each beginning with a cu_wcopy. */

bool cu_wcopy_room(void **entries, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    const size_t nc = *cap ? 2 * *cap : 64;
    void *ne = realloc(*entries, nc * size);
    if (ne == NULL)
        return false;
    *entries = ne;
    *cap = nc;
    return true;
}

size_t cu_wcopy_drop(si_backend *b, void *entries, size_t *n, size_t size, const void *lo, const void *hi)
{
    uint8_t *base = entries;
    size_t freed = 0;
    bool synced = false;
    for (size_t i = 0; i < *n;) {
        cu_wcopy *e = (cu_wcopy *)(base + i * size);
        if (e->w < (const uint8_t *)hi && (const uint8_t *)lo < e->w_end) {
            if (!synced && b->stream != NULL)
                cudaStreamSynchronize(b->stream);   /* a product may still read it */
            synced = true;
            b->ws_gen++;   /* (captured graphs may read it) */
            cudaFree(e->mem);
            freed += e->bytes;
            if (i != --*n)
                memcpy(e, base + *n * size, size);
        } else {
            i++;
        }
    }
    return freed;
}

void cu_wcopy_free(void *entries, size_t n, size_t size)
{
    for (size_t i = 0; i < n; i++)
        cudaFree(((cu_wcopy *)((uint8_t *)entries + i * size))->mem);
    free(entries);
}
