/* backends/cuda_sm120/cuda_ops_attn.c — exec() of ATTN and GDN ops: host
 * checks of positions and sequence runs, the KV pages, the launches (and
 * cuda_ext's attn_prepare / attn_view for kernel plugins).  Split from
 * cuda_ops.c, whose helpers it shares through cuda_ops.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

/* Every position of an ATTN op must be the next free one of its sequence
 * in the op's layer and fit the cache: checked before anything is written.
 * Counts the new positions of each sequence into added[n_seq] (zeroed). */
static int attn_positions(const si_attn_params *p, const si_kv *kv, int64_t n, uint32_t *added, si_err *err)
{
    const uint32_t n_seq = kv->d.n_seq, n_ctx = kv->d.n_ctx;
    const uint32_t *len = kv->len + (size_t)p->kv_layer * n_seq;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = p->seq[t], pos = p->pos[t];
        if (s < 0 || (uint32_t)s >= n_seq)
            return si_err_set(err, SI_ERANGE, CU_NAME ": ATTN: token %lld: seq %d outside [0, %u)", (long long)t, s,
                              n_seq);
        if (pos < 0 || (uint32_t)pos >= n_ctx)
            return si_err_set(err, SI_ERANGE, CU_NAME ": ATTN: seq %d pos %d does not fit n_ctx %u (layer %u)", s,
                              pos, n_ctx, p->kv_layer);
        if ((uint32_t)pos != len[s] + added[s])
            return si_err_set(err, SI_EINVAL,
                              CU_NAME ": ATTN: seq %d pos %d, but layer %u holds %u positions: positions must be contiguous",
                              s, pos, p->kv_layer, len[s] + added[s]);
        added[s]++;
    }
    return SI_OK;
}

/* Paged cache: the pages every ATTN op of the exec needs are taken before
 * anything of the exec is enqueued, so a full pool fails the whole exec
 * with nothing run (no layer of a forward half done); each op's own
 * reserve then finds its pages in place.  An op that is invalid is left
 * to its own checks, which report it. */
int cu_attn_pages_early(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    for (size_t i = 0; i < n_ops; i++) {
        const si_op *op = &ops[i];
        if (op->kind != SI_OP_ATTN || op->p.attn.kv == NULL || !op->p.attn.kv->i8 ||
            si_oc_check(&b->oc, op, NULL) != SI_OK)
            continue;
        const si_attn_params *p = &op->p.attn;
        uint32_t *added = calloc(p->kv->d.n_seq, sizeof *added);
        if (added == NULL)
            return si_err_set(err, SI_ENOMEM, "out of host memory");
        int rc = SI_OK;
        if (attn_positions(p, p->kv, si_oc_ne(op->src[0], 1), added, NULL) == SI_OK)
            rc = cu_kv_pages_reserve(b, p->kv, p->kv->len + (size_t)p->kv_layer * p->kv->d.n_seq, added,
                                     p->kv_layer, err);
        free(added);
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}

/* The front half of an ATTN op shared by cu_attn_exec and attn_prepare (a
 * kernel plugin's entry): checks the positions, takes the pages of the new
 * ones (paged cache), uploads pos/seq into the workspace (and, q_out != NULL,
 * carves the f32 [n][n_head][head_dim] buffer for the normed+roped queries
 * after them) and fills `a`.  added[n_seq] (zeroed) gets the new positions
 * of each sequence; the caller adds them to len once its kernels are
 * enqueued.  n > 0. */
static int attn_front(si_backend *b, const si_op *op, uint32_t *added, cu_attn *a, float **q_out, si_err *err)
{
    const si_attn_params *p = &op->p.attn;
    si_kv *kv = p->kv;
    const int64_t n = si_oc_ne(op->src[0], 1);
    uint32_t *len = kv->len + (size_t)p->kv_layer * kv->d.n_seq;
    int rc = attn_positions(p, kv, n, added, err);
    /* Paged cache: the pages of the new positions (may refuse the op;
     * normally cu_attn_pages_early took them already). */
    if (rc == SI_OK && kv->i8)
        rc = cu_kv_pages_reserve(b, kv, len, added, p->kv_layer, err);
    if (rc != SI_OK)
        return rc;
    /* pos and seq: copied before the exec's first op (knob h2d_early:
     * cu_up_op's layout), or here into the workspace */
    const uint8_t *up = cu_up_dev(b, op);
    const size_t ps_bytes = (size_t)n * sizeof(int32_t);
    size_t q_bytes = q_out != NULL ? rnd((size_t)n * p->n_head * p->head_dim * sizeof(float)) : 0;
    size_t bytes = (up ? 0 : 2 * rnd(ps_bytes)) + rnd((size_t)n * (p->n_rot + 1) * sizeof(float)) + q_bytes;
    void *ws = cu_ws_reserve(b, bytes, err);
    if (ws == NULL)
        return SI_ENOMEM;
    carve cv = { ws, 0 };
    const int32_t *d_pos, *d_seq;
    if (up != NULL) {
        d_pos = (const int32_t *)up;
        d_seq = (const int32_t *)(up + cu_stage_rnd(ps_bytes));
    } else {
        int32_t *pos = take(&cv, ps_bytes), *seq = take(&cv, ps_bytes);
        if ((rc = cu_h2d(b, pos, p->pos, ps_bytes, err)) != SI_OK || (rc = cu_h2d(b, seq, p->seq, ps_bytes, err)) != SI_OK)
            return rc;
        d_pos = pos;
        d_seq = seq;
    }
    float *rope = take(&cv, (size_t)n * (p->n_rot + 1) * sizeof(float));
    if (q_out != NULL)
        *q_out = take(&cv, q_bytes);
    const si_tensor *qg = op->src[0], *k = op->src[1], *v = op->src[2];
    *a = (cu_attn){
        .qg = (const float *)dptr(qg), .k = (const float *)dptr(k), .v = (const float *)dptr(v),
        .qg_stride = row_stride(qg) / 4, .k_stride = row_stride(k) / 4, .v_stride = row_stride(v) / 4,
        .dst_stride = row_stride(&op->dst) / 4,
        .q_norm = op->src[3] ? (const float *)dptr(op->src[3]) : NULL,
        .k_norm = op->src[4] ? (const float *)dptr(op->src[4]) : NULL,
        .dst = (float *)dptr(&op->dst),
        .n_head = (int)p->n_head, .n_head_kv = (int)p->n_head_kv, .head_dim = (int)p->head_dim,
        .n_rot = (int)p->n_rot, .eps = p->eps, .rope_base = p->rope_base, .yarn_factor = p->yarn_factor,
        .yarn_orig_ctx = p->yarn_orig_ctx, .n = n, .pos = d_pos, .seq = d_seq, .rope = rope,
        .kc = kv->k + (uint64_t)p->kv_layer * kv->layer_bytes, .vc = kv->v + (uint64_t)p->kv_layer * kv->layer_bytes,
        .f16 = kv->f16, .n_ctx = kv->d.n_ctx,
        .i8 = kv->i8, .pages = kv->table, .max_pages = kv->max_pages,
        .ks = kv->i8 ? kv->ks + (uint64_t)p->kv_layer * kv->layer_scales : NULL,
        .vs = kv->i8 ? kv->vs + (uint64_t)p->kv_layer * kv->layer_scales : NULL,
    };
    return SI_OK;
}

static void attn_commit(const si_op *op, const uint32_t *added)
{
    const si_attn_params *p = &op->p.attn;
    uint32_t *len = p->kv->len + (size_t)p->kv_layer * p->kv->d.n_seq;
    for (uint32_t s = 0; s < p->kv->d.n_seq; s++)
        len[s] += added[s];
}

/* The tokens of each sequence taken back from the op's layer. */
static void attn_uncommit_op(const si_op *op)
{
    const si_attn_params *p = &op->p.attn;
    uint32_t *len = p->kv->len + (size_t)p->kv_layer * p->kv->d.n_seq;
    const int64_t n = si_oc_ne(op->src[0], 1);
    for (int64_t t = 0; t < n; t++)
        len[p->seq[t]]--;
}

static bool attn_has_tokens(const si_op *op)
{
    return op->kind == SI_OP_ATTN && op->src[0] != NULL && si_oc_ne(op->src[0], 1) > 0;
}

void cu_attn_uncommit(const si_op *ops, size_t n_ops, size_t upto)
{
    for (size_t i = 0; i < upto && i < n_ops; i++)
        if (attn_has_tokens(&ops[i]))
            attn_uncommit_op(&ops[i]);
}

int cu_attn_commit_all(si_backend *b, const si_op *ops, size_t n_ops, bool checked, si_err *err)
{
    uint32_t small[64];
    uint32_t *added = small;
    size_t cap = sizeof small / sizeof small[0];
    int rc = SI_OK;
    size_t i = 0;
    for (; i < n_ops && rc == SI_OK; i++) {
        const si_op *op = &ops[i];
        if (!attn_has_tokens(op))
            continue;
        if (!checked && (rc = si_oc_check(&b->oc, op, err)) != SI_OK)
            break;
        const uint32_t n_seq = op->p.attn.kv->d.n_seq;
        if (n_seq > cap) {
            uint32_t *a = realloc(added == small ? NULL : added, n_seq * sizeof *a);
            if (a == NULL) {
                rc = si_err_set(err, SI_ENOMEM, "out of host memory");
                break;
            }
            added = a;
            cap = n_seq;
        }
        memset(added, 0, n_seq * sizeof *added);
        if ((rc = attn_positions(&op->p.attn, op->p.attn.kv, si_oc_ne(op->src[0], 1), added, err)) != SI_OK)
            break;
        attn_commit(op, added);
    }
    if (added != small)
        free(added);
    if (rc != SI_OK)
        cu_attn_uncommit(ops, n_ops, i);   /* ops[i] itself did not commit */
    return rc;
}

/* quant: the op after quantises dst (cu_attn_q_ok); where the core ends with
 * combine_kernel that kernel makes the int8 copy into slot 0, which then
 * holds dst (cu_xq_after first, as cu_exec_one would). */
int cu_attn_op(si_backend *b, const si_op *op, bool quant, si_err *err)
{
    const si_attn_params *p = &op->p.attn;
    const int64_t n = si_oc_ne(op->src[0], 1), W = op->dst.ne[0];
    if (n == 0)
        return SI_OK;
    uint32_t *added = calloc(p->kv->d.n_seq, sizeof *added);
    if (added == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    cu_attn a;
    int rc = attn_front(b, op, added, &a, NULL, err);
    if (rc == SI_OK)
        rc = cu_attn_prepare(b, &a, p->pos, err);
    const bool q = rc == SI_OK && quant && W == (int64_t)a.n_head * a.head_dim && si_cu_attn_takes_q(&a);
    if (q && (rc = cu_xq_reserve(b, cu_xq_bytes(W, n), err)) == SI_OK) {
        cu_xq_parts(b, W, n, 0, &a.q8, &a.q8d, &a.q8s);
        b->xq_key = NULL;
    }
    if (rc == SI_OK)
        rc = launched(si_cu_attn(&a, b->stream), "ATTN", err);
    if (rc == SI_OK)
        attn_commit(op, added);
    if (rc == SI_OK && quant) {
        cu_xq_after(b, op);
        if (q)
            cu_xq_hold(b, a.dst, (int64_t)(row_stride(&op->dst) / 4), W, n, 32);
    }
    free(added);
    return rc;
}

int cu_attn_exec(si_backend *b, const si_op *op, si_err *err)
{
    return cu_attn_op(b, op, false, err);
}

/* cuda_ext's attn_prepare (since ext 1.1): the front half of cu_attn_exec for a
 * kernel plugin — q/k norm, RoPE, K/V appended (same kernels, same page
 * reservation), q normed+roped into the workspace — and the view of it.  A
 * cache that is not paged int8 gets view->paged_i8 = 0 and NOTHING is done,
 * so the plugin's fallback (exec_builtin) appends exactly once. */
int cu_attn_view(si_backend *b, const si_op *op, si_cuda_attn_view *view, si_err *err)
{
    if (b == NULL || op == NULL || view == NULL || view->size < sizeof *view)
        return si_err_set(err, SI_EINVAL, CU_NAME ": attn_prepare: NULL argument or view of an older size");
    if (op->kind != SI_OP_ATTN)
        return si_err_set(err, SI_EINVAL, CU_NAME ": attn_prepare: op kind %u is not ATTN", op->kind);
    int rc = si_oc_check(&b->oc, op, err);
    if (rc != SI_OK)
        return rc;
    const si_attn_params *p = &op->p.attn;
    const int64_t n = si_oc_ne(op->src[0], 1);
    const uint32_t size = view->size;
    memset(view, 0, sizeof *view);
    view->size = size;
    view->n = n;
    if (!p->kv->i8 || n == 0)
        return SI_OK;
    uint32_t *added = calloc(p->kv->d.n_seq, sizeof *added);
    if (added == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    cu_attn a;
    float *q = NULL;
    rc = attn_front(b, op, added, &a, &q, err);
    if (rc == SI_OK)
        rc = launched(si_cu_attn_front(&a, q, b->stream), "ATTN front", err);
    if (rc == SI_OK)
        attn_commit(op, added);
    free(added);
    if (rc != SI_OK)
        return rc;
    int32_t max_len = 0;
    for (int64_t t = 0; t < n; t++)
        if (p->pos[t] >= max_len)
            max_len = p->pos[t] + 1;
    view->paged_i8 = 1;
    view->q = q;
    view->qg = a.qg;
    view->qg_stride = a.qg_stride;
    view->k = (const int8_t *)a.kc;
    view->v = (const int8_t *)a.vc;
    view->ks = a.ks;
    view->vs = a.vs;
    view->pages = a.pages;
    view->max_pages = a.max_pages;
    view->page_size = SI_KV_PAGE;
    view->n_head = p->n_head;
    view->n_head_kv = p->n_head_kv;
    view->head_dim = p->head_dim;
    view->pos = a.pos;
    view->seq = a.seq;
    view->max_len = max_len;
    return SI_OK;
}

/* ---- GDN ------------------------------------------------------------------ */

int cu_gdn_runs(const si_op *op, cu_gdn_run *runs, int64_t *n_runs_out, int64_t *max_len_out, si_err *err)
{
    const si_gdn_params *p = &op->p.gdn;
    const int64_t n = si_oc_ne(op->src[0], 1);
    const int64_t conv_dim = op->src[0]->ne[0];
    const uint64_t need = si_oc_gdn_state_bytes(p, conv_dim);
    int64_t n_runs = 0;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = p->seq[t];
        if (n_runs > 0 && p->seq[runs[n_runs - 1].t0] == s) {
            runs[n_runs - 1].len++;
            continue;
        }
        uint64_t off;
        const int rc = si_oc_gdn_slot(CU_NAME, p, t, s, need, p->state->nbytes, &off, err);
        if (rc != SI_OK)
            return rc;
        for (int64_t r = 0; r < n_runs; r++)
            if (p->seq[runs[r].t0] == s)
                return si_err_set(err, SI_EINVAL, CU_NAME ": GDN: tokens of slot %d are not consecutive (token %lld)", s,
                                  (long long)t);
        runs[n_runs].t0 = t;
        runs[n_runs].len = 1;
        runs[n_runs].state_off = off;
        n_runs++;
    }
    int64_t max_len = 0;
    for (int64_t r = 0; r < n_runs; r++)
        max_len = runs[r].len > max_len ? runs[r].len : max_len;
    if (n_runs > 65535)
        return si_err_set(err, SI_EUNSUPPORTED, CU_NAME ": GDN: %lld sequences in one op (at most 65535)",
                          (long long)n_runs);
    *n_runs_out = n_runs;
    *max_len_out = max_len;
    return SI_OK;
}

/* quant: the op after quantises dst (cu_gdn_q_ok); where the op runs on
 * norm_kernel (decode) that kernel writes the int8 copy into slot 0,
 * which then holds dst (cu_xq_after first, as cu_exec_one would). */
int cu_gdn_op(si_backend *b, const si_op *op, bool quant, si_err *err)
{
    const si_gdn_params *p = &op->p.gdn;
    const int64_t n = si_oc_ne(op->src[0], 1);
    if (n == 0)
        return SI_OK;
    const int64_t conv_dim = op->src[0]->ne[0];
    cu_gdn_run *runs = malloc((size_t)n * sizeof *runs);
    if (runs == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    int64_t n_runs = 0, max_len = 0, n_chunks = 0;
    int rc = cu_gdn_runs(op, runs, &n_runs, &max_len, err);
    void *ws = NULL;
    const int chunk_min = cu_up_chunk_min(b);
    size_t tp_bytes = 0;
    /* the runs: copied before the exec's first op (knob h2d_early), or
     * here into the workspace */
    const cu_gdn_run *up = (const cu_gdn_run *)cu_up_dev(b, op);
    if (rc == SI_OK) {
        /* (the chunked runs' per-chunk matrices and decay factors: 33 KB a
         * chunk and v-head) */
        n_chunks = si_cu_gdn_plan_chunks(runs, n_runs, chunk_min);
        tp_bytes = si_cu_gdn_tp_bytes(n_chunks, (int)p->n_v_head);
        ws = cu_ws_reserve(b, (up ? 0 : rnd((size_t)n_runs * sizeof *runs)) +
                                  rnd((size_t)n * (size_t)conv_dim * sizeof(float)) + rnd(tp_bytes), err);
        if (ws == NULL)
            rc = SI_ENOMEM;
    }
    if (rc != SI_OK) {
        free(runs);
        return rc;
    }
    carve cv = { ws, 0 };
    cu_gdn_run *d_runs = up ? NULL : take(&cv, (size_t)n_runs * sizeof *runs);
    float *y = take(&cv, (size_t)n * (size_t)conv_dim * sizeof(float));
    float *tp = n_chunks > 0 ? take(&cv, tp_bytes) : NULL;
    if (up == NULL)
        rc = cu_h2d(b, d_runs, runs, (size_t)n_runs * sizeof *runs, err);
    free(runs);
    if (rc != SI_OK)
        return rc;
    const si_tensor *const *s = op->src;
    cu_gdn g = {
        .u = (const float *)dptr(s[0]), .z = (const float *)dptr(s[1]), .b = (const float *)dptr(s[2]),
        .a = (const float *)dptr(s[3]),
        .u_stride = row_stride(s[0]) / 4, .z_stride = row_stride(s[1]) / 4, .b_stride = row_stride(s[2]) / 4,
        .a_stride = row_stride(s[3]) / 4, .dst_stride = row_stride(&op->dst) / 4,
        .conv_w = (const float *)dptr(s[4]), .conv_w_stride = row_stride(s[4]) / 4,
        .ssm_a = (const float *)dptr(s[5]), .dt_bias = (const float *)dptr(s[6]),
        .norm_w = (const float *)dptr(s[7]), .dst = (float *)dptr(&op->dst),
        .state = (uint8_t *)p->state->dev, .runs = up ? up : d_runs, .n_runs = n_runs, .n = n, .conv_dim = conv_dim,
        .n_k_head = (int)p->n_k_head, .n_v_head = (int)p->n_v_head, .dk = (int)p->head_k_dim,
        .dv = (int)p->head_v_dim, .conv_k = (int)p->conv_k, .eps = p->eps, .y = y, .rows = b->gdn_rows,
        .chunk_min = chunk_min, .max_len = max_len, .tp = tp, .n_chunks = n_chunks, .tc = b->gdn_tc,
        .fused = b->gdn_fused, .early = b->gdn_early,
    };
    const int64_t W = op->dst.ne[0];
    /* (gdn_dec = fused without fuse_gdn_q: only the fused kernel makes the
     * copy; where it does not run, quant_x in the product as before) */
    const bool q = quant && W == (int64_t)g.n_v_head * g.dv &&
                   (b->fuse_gdn_q ? si_cu_gdn_takes_q(&g) : si_cu_gdn_fused_ok(&g));
    if (q) {
        if ((rc = cu_xq_reserve(b, cu_xq_bytes(W, n), err)) != SI_OK)
            return rc;
        cu_xq_parts(b, W, n, 0, &g.q, &g.qd, &g.qs);
        b->xq_key = NULL;
    }
    rc = launched(si_cu_gdn(&g, b->stream), "GDN", err);
    if (rc == SI_OK && quant) {
        cu_xq_after(b, op);
        if (q)
            cu_xq_hold(b, g.dst, (int64_t)(row_stride(&op->dst) / 4), W, n, 32);
    }
    return rc;
}

int cu_gdn_exec(si_backend *b, const si_op *op, si_err *err)
{
    return cu_gdn_op(b, op, false, err);
}

/* A GDN whose output the next op quantises (the out projection): its
 * norm kernel also makes the int8 copy where it runs (knob fuse_norm).
 * With gdn_dec = fused always: there the fused decode kernel makes the
 * copy of its own 32 rows a block in parallel, so the launch quant_x would
 * cost is saved at no serial cost (unlike norm_kernel, whose warp does a
 * head's blocks in turn: why fuse_gdn_q alone is off by default). */
bool cu_gdn_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    return b->fuse_norm && (b->fuse_gdn_q || b->gdn_fused) && b->mm_dp4a && ops[i].kind == SI_OP_GDN &&
           cu_next_quantises(b, ops, n_ops, i, use_kernel);
}

/* Knob fuse_attn_q: an ATTN whose output the next op quantises (the out
 * projection): combine_kernel makes the int8 copy of its head's 8 blocks
 * of 32, a warp each (quant_x's bits), where the core splits the context
 * (cu_attn_op); one launch fewer an attention layer. */
bool cu_attn_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    return b->fuse_attn_q && b->fuse_norm && b->mm_dp4a && ops[i].kind == SI_OP_ATTN &&
           cu_next_quantises(b, ops, n_ops, i, use_kernel);
}
