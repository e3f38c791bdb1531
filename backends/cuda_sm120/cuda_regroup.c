/* backends/cuda_sm120/cuda_regroup.c — knobs gemv_q6r and gemv_q8r: the
 * regrouped copies (CU_TYPE_Q6R, CU_TYPE_Q8R, cuda_internal.h) of Q6_K and
 * Q8_0 weights that one-column decode products read on gq_kernel
 * (cuda_gemvq.cu), whose lanes then load aligned 16-byte units instead of
 * 2-byte-aligned blocks.
 *
 * A copy is made of a whole dense weight when it is loaded
 * (cuda_weight_load), or on a product's first use of weights that have
 * none (outside graph capture: no allocation may happen there), while a
 * reserve of the device's memory stays free (cu_wcache_mem); otherwise the
 * product reads the GGUF rows, the same bits.  Regrouping keeps each group
 * (si_cu_rg_group: a 2048-weight step of a row) at its offset, so the copy
 * of a weight serves any of its rows: an entry covers [w, w_end) and
 * answers every range of its type inside it that starts on a group.
 * Entries go when a copy into their memory or its release could make them
 * stale (cu_wcache_drop, from the upload and buf_free), and then captured
 * graphs that may read them are stale too (ws_gen); all go when the KV
 * cache needs their room (cu_wcache_yield, cu_kv_create). */
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"
#include "cuda_internal.h"

typedef struct cu_rg_entry {
    cu_wcopy c;      /* the GGUF bytes; mem: the regrouped copy */
    uint32_t type;   /* their type: SI_TYPE_Q6_K or SI_TYPE_Q8_0 */
} cu_rg_entry;

bool cu_rg_on(const si_backend *b, uint32_t type)
{
    return type == SI_TYPE_Q6_K ? b->gemv_q6r : type == SI_TYPE_Q8_0 ? b->gemv_q8r : false;
}

const uint8_t *cu_rg_get(si_backend *b, uint32_t type, const uint8_t *w, uint64_t bytes)
{
    const uint64_t grp = si_cu_rg_group(type);
    if (!cu_rg_on(b, type) || grp == 0 || w == NULL || bytes == 0 || bytes % grp != 0)
        return NULL;
    cu_wcache *c = &b->rg;
    const cu_rg_entry *es = c->e;
    for (size_t i = 0; i < c->n; i++) {
        const cu_rg_entry *e = &es[i];
        if (e->type == type && w >= e->c.w && w + bytes <= e->c.w_end && (uint64_t)(w - e->c.w) % grp == 0)
            return e->c.mem + (w - e->c.w);
    }
    if (c->full || b->capturing || (uintptr_t)w % 2 != 0)
        return NULL;
    uint8_t *mem = cu_wcache_mem(b, c, bytes, "gemv_q6r/q8r", "products read the GGUF rows");
    if (mem == NULL)
        return NULL;
    if (si_cu_rg_copy(type, w, mem, bytes, b->stream) != 0) {
        cudaGetLastError();
        cudaFree(mem);
        return NULL;   /* (the product reads the GGUF rows) */
    }
    cu_rg_entry *e = cu_wcache_add(c, sizeof *e, (cu_wcopy){ w, w + bytes, mem, bytes });
    if (e == NULL) {
        cudaFree(mem);
        return NULL;   /* (no host memory: the GGUF rows) */
    }
    e->type = type;
    return mem;
}
