/* backends/cuda_sm120/cuda_h2d.c — the per-step uploads of an op list (ATTN
 * positions and sequences, GDN sequence runs) and knob h2d_early.
 *
 * Each ATTN and GDN op needs a few host numbers on the device every step.
 * Op by op they were copied where the op ran: two copies an ATTN op, one a
 * GDN op, so a captured 9b decode step held 40 memcpy nodes between its
 * kernels (50 for the 35b-a3b).  A copy node in a chain of kernels is a
 * full dependency: the kernel after it cannot start early (programmatic
 * launch), and the copy's own round trip sits on the critical path.
 *
 * With h2d_early (default true) cu_exec makes them one copy before the
 * first op: cu_up_begin lays every op's uploads out in op order (the
 * layout the graph's staging has always had: cu_up_op, which the graph's
 * scan uses too), copies them into b->up_dev, and the ops take their
 * device pointers from there (cu_up_dev).  The same numbers reach the
 * same kernels: the same bits.  false: each op copies its own, as
 * before (A/B). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

void cu_upbuf_free(cu_upbuf *u)
{
    free(u->host);
    *u = (cu_upbuf){ 0 };
}

/* Room for `bytes` more; NULL when out of host memory. */
static uint8_t *up_take(cu_upbuf *u, size_t bytes)
{
    const size_t need = cu_stage_rnd(bytes);
    if (need > u->cap - u->used) {
        size_t cap = u->cap ? u->cap : 4096;
        while (cap - u->used < need)
            cap *= 2;
        uint8_t *h = realloc(u->host, cap);
        if (h == NULL)
            return NULL;
        u->host = h;
        u->cap = cap;
    }
    return u->host + u->used;
}

int cu_up_op(cu_upbuf *u, const si_op *op, int chunk_min, int64_t *n_runs, int64_t *max_len)
{
    if ((op->kind != SI_OP_ATTN && op->kind != SI_OP_GDN) || op->src[0] == NULL)
        return 0;
    const int64_t n = si_oc_ne(op->src[0], 1);
    if (n <= 0)
        return 0;
    if (op->kind == SI_OP_ATTN) {
        const si_attn_params *p = &op->p.attn;
        if (p->pos == NULL || p->seq == NULL || n > 0x7fffffffLL)
            return -1;
        const size_t bytes = (size_t)n * sizeof(int32_t);
        uint8_t *h = up_take(u, 2 * cu_stage_rnd(bytes));
        if (h == NULL)
            return -1;
        memcpy(h, p->pos, bytes);
        memcpy(h + cu_stage_rnd(bytes), p->seq, bytes);
        u->used += 2 * cu_stage_rnd(bytes);
        return 1;
    }
    if (op->p.gdn.seq == NULL || op->p.gdn.state == NULL)
        return -1;
    cu_gdn_run *runs = (cu_gdn_run *)up_take(u, (size_t)n * sizeof *runs);
    if (runs == NULL || cu_gdn_runs(op, runs, n_runs, max_len, NULL) != SI_OK)
        return -1;
    /* (each run's first chunk, as the op sets it before its own copy) */
    si_cu_gdn_plan_chunks(runs, *n_runs, chunk_min);
    u->used += cu_stage_rnd((size_t)*n_runs * sizeof *runs);
    return 1;
}

int cu_up_chunk_min(const si_backend *b)
{
    return b->gdn_chunked ? SI_CU_GDN_CHUNK_MIN : 0;
}

int cu_up_begin(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    b->up_ops = NULL;
    b->up_n = 0;
    if (!b->h2d_early || n_ops == 0)
        return SI_OK;
    if (n_ops > b->up_off_cap) {
        size_t *o = realloc(b->up_off, n_ops * sizeof *o);
        if (o == NULL)
            return si_err_set(err, SI_ENOMEM, "out of host memory");
        b->up_off = o;
        b->up_off_cap = n_ops;
    }
    cu_upbuf *u = &b->up;
    u->used = 0;
    const int chunk_min = cu_up_chunk_min(b);
    for (size_t i = 0; i < n_ops; i++) {
        int64_t n_runs, max_len;
        const size_t at = u->used;
        /* (an op whose numbers are not taken here, invalid ones among
         * them, copies its own and reports what is wrong itself) */
        b->up_off[i] = cu_up_op(u, &ops[i], chunk_min, &n_runs, &max_len) > 0 ? at : SIZE_MAX;
    }
    if (u->used == 0)
        return SI_OK;
    /* (grown op by op: refused while a graph is captured, whose list then
     * runs op by op once and grows it) */
    int rc = u->used <= b->up_dev_cap
                 ? SI_OK
                 : cu_scratch_grow(b, &b->up_dev, &b->up_dev_cap, u->used, "the step's uploads", err);
    if (rc == SI_OK)
        rc = cu_h2d(b, b->up_dev, u->host, u->used, err);
    if (rc != SI_OK)
        return rc;
    b->up_ops = ops;
    b->up_n = n_ops;
    return SI_OK;
}

void cu_up_end(si_backend *b)
{
    b->up_ops = NULL;
    b->up_n = 0;
}

const uint8_t *cu_up_dev(const si_backend *b, const si_op *op)
{
    /* (op may be a kernel plugin's copy, outside the list: NULL) */
    const uintptr_t at = (uintptr_t)op, lo = (uintptr_t)b->up_ops;
    if (b->up_ops == NULL || at < lo || at >= lo + b->up_n * sizeof *op || (at - lo) % sizeof *op != 0)
        return NULL;
    const size_t off = b->up_off[(at - lo) / sizeof *op];
    return off == SIZE_MAX ? NULL : b->up_dev + off;
}
