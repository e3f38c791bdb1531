/* backends/cuda_sm120/cuda_w8cache.c — knob w8_cache: the int8 copies of
 * weight matrices made by mma_weights = i8 (cuda_w8.cu), kept on the
 * device after their first product so later prefill chunks skip the
 * requantisation (bench_gemm on the H200: a 12288 x 4096 Q4_K product at
 * 512 columns takes 178 us on cached int8 weights, 289 us requantising
 * them first).
 *
 * An entry is keyed by the weight's device address and the product's
 * shape; it is dropped when a copy into that memory or its buffer's
 * release could make it stale (cu_wcache_drop, from cuda_sm120.c's
 * upload and buf_free), and all are when the KV cache needs their room
 * (cu_wcache_yield, cu_kv_create).  It is made only while at least a reserve of the
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

/* Not rows * row_bytes: a one-row weight's cu_mm has row_bytes 0
 * (cuda_ops.h's row_stride), and such an entry was never dropped
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
static bool cu_mem_fits(size_t bytes)
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
    cu_wcache *c = &b->w8c;
    const cu_w8_entry *es = c->e;
    for (size_t i = 0; i < c->n; i++)
        if (same_key(&es[i], m, g)) {
            *wq = (const int8_t *)es[i].c.mem;
            *ws = (const float *)(es[i].c.mem + es[i].ws_off);
            return SI_OK;
        }
    if (c->full || b->capturing)
        return SI_OK;
    const size_t ws_off = ((size_t)(m->rows * m->in) + 255) & ~(size_t)255;
    const size_t bytes = ws_off + (size_t)(m->rows * (m->in / g)) * 4;
    uint8_t *mem = cu_wcache_mem(b, c, bytes, "w8_cache", "products requantise per call");
    if (mem == NULL)
        return SI_OK;
    int rc = si_cu_w8_weights(m, g, (int8_t *)mem, (float *)(mem + ws_off), b->stream);
    if (rc != 0) {
        cudaFree(mem);
        return si_err_set(err, SI_EDEVICE, CU_NAME ": MATMUL (int8 weights, cached): %s", si_cu_errstr(rc));
    }
    cu_w8_entry *e = cu_wcache_add(c, sizeof *e, (cu_wcopy){ m->w, weight_end(m), mem, bytes });
    if (e == NULL) {
        cudaFree(mem);   /* (no host memory: this product requantises) */
        return SI_OK;
    }
    e->type = m->type;
    e->rows = m->rows;
    e->in = m->in;
    e->row_bytes = m->row_bytes;
    e->g = g;
    e->ws_off = ws_off;
    *wq = (const int8_t *)mem;
    *ws = (const float *)(mem + ws_off);
    return SI_OK;
}

/* ---- shared by the caches of weight copies (w8_cache above, the
 * regrouped copies of cuda_regroup.c) */

uint8_t *cu_wcache_mem(si_backend *b, cu_wcache *c, size_t bytes, const char *knob, const char *after)
{
    uint8_t *mem = NULL;
    if (cu_mem_fits(bytes) && cudaMalloc((void **)&mem, bytes) == cudaSuccess)
        return mem;
    cudaGetLastError();
    c->full = true;
    b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                 "%s: %zu copies, %.1f MiB; no more (the device's free-memory reserve): later %s", knob, c->n,
                 (double)c->bytes / 1048576.0, after);
    return NULL;
}

void *cu_wcache_add(cu_wcache *c, size_t esize, cu_wcopy copy)
{
    if (c->n == c->cap) {
        const size_t nc = c->cap ? 2 * c->cap : 64;
        void *ne = realloc(c->e, nc * esize);
        if (ne == NULL)
            return NULL;
        c->e = ne;
        c->cap = nc;
    }
    c->esize = esize;
    uint8_t *e = (uint8_t *)c->e + c->n++ * esize;
    memset(e, 0, esize);
    *(cu_wcopy *)e = copy;
    c->bytes += copy.bytes;
    return e;
}

void cu_wcache_drop(si_backend *b, cu_wcache *c, const void *lo, const void *hi)
{
    size_t freed = 0;
    bool synced = false;
    for (size_t i = 0; i < c->n;) {
        cu_wcopy *e = (cu_wcopy *)((uint8_t *)c->e + i * c->esize);
        if (e->w < (const uint8_t *)hi && (const uint8_t *)lo < e->w_end) {
            if (!synced && b->stream != NULL)
                cudaStreamSynchronize(b->stream);   /* a product may still read it */
            synced = true;
            b->ws_gen++;   /* (captured graphs may read it) */
            cudaFree(e->mem);
            freed += e->bytes;
            if (i != --c->n)
                memcpy(e, (uint8_t *)c->e + c->n * c->esize, c->esize);
        } else {
            i++;
        }
    }
    c->bytes -= freed;
    c->full = c->full && freed == 0;   /* (room again for later copies) */
}

size_t cu_wcache_yield(si_backend *b, cu_wcache *c)
{
    const size_t held = c->bytes;
    cu_wcache_drop(b, c, (const void *)0, (const void *)UINTPTR_MAX);
    c->full = true;
    return held;
}

void cu_wcache_free(cu_wcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        cudaFree(((cu_wcopy *)((uint8_t *)c->e + i * c->esize))->mem);
    free(c->e);
    *c = (cu_wcache){ 0 };
}
