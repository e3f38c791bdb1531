/* backends/cuda_sm120/cuda_ops.c — supports() and exec() of the CUDA
 * backend: the shape/type checks (backends/common, shared with the cpu
 * backend, so both accept exactly the same ops, minus weight types the
 * kernels do not decode and kernel size limits), host-side validation that needs the host arrays (positions,
 * sequence runs), workspace carving, and the launches.  exec never waits
 * for the device: GET_ROWS ids are checked by the kernel (reported at
 * sync), host arrays go up through pinned staging, and the int8 paths
 * (dp4a, mma) quantise each input once per exec (cached until something writes to
 * it).  supports() never touches the device.  The ATTN and GDN ops are in
 * cuda_ops_attn.c, MOE in cuda_ops_moe.c; cuda_ops.h has what they share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

/* ---- tensors ------------------------------------------------------------ */

/* What the shared op checks (backends/common) need to know of this
 * backend's objects.  Device memory is always aligned: no data check. */
static uint64_t oc_buf_size(const si_buf *buf) { return buf->nbytes; }
static const si_kv_desc *oc_kv_desc(const si_kv *kv) { return &kv->d; }

void cu_opcheck_init(si_backend *b)
{
    /* 2-byte types aligned to 2: the kernels load F16/BF16 as halves. */
    b->oc = (si_opcheck){
        .name = CU_NAME, .host = b->host, .type_ok = si_cu_type_ok,
        .buf_size = oc_buf_size, .buf_data = NULL, .buf_writable = NULL, .kv_desc = oc_kv_desc,
        .align_half = true, .max_head_dim = MAX_HEAD_DIM, .max_heads = 65535, .max_conv_k = 64,
    };
}

int cu_h2d(si_backend *b, void *dst, const void *src, size_t n, si_err *err)
{
    /* Staged through pinned memory: a copy from pageable memory may wait
     * for the stream to drain; this one is only enqueued.  The copy is
     * ordered on the stream after earlier kernels.  While a graph is
     * captured, from the graph's own staging, which a replay refills. */
    void *stage = b->capturing ? cu_graph_stage(b, n, err) : cu_pin_reserve(b, n, err);
    if (stage == NULL)
        return SI_ENOMEM;
    memcpy(stage, src, n);
    cudaError_t e = cudaMemcpyAsync(dst, stage, n, cudaMemcpyHostToDevice, b->stream);
    return e == cudaSuccess ? SI_OK : si_err_set(err, SI_EDEVICE, CU_NAME ": upload of op data: %s",
                                                 cudaGetErrorString(e));
}

/* ---- MATMUL --------------------------------------------------------------- */

/* ---- dp4a inputs ------------------------------------------------------------ */

/* Bytes of the quantised copy of ncx columns of `in` activations: int8
 * values, f32 scales, f32 block sums. */
size_t cu_xq_bytes(int64_t in, int64_t ncx)
{
    return rnd((size_t)(in * ncx)) + 2 * rnd((size_t)(in / 32 * ncx) * sizeof(float));
}

/* Where slot `slot` of the scratch (reserved for cu_xq_bytes(in, ncx)) keeps
 * values, scales and sums. */
void cu_xq_parts(si_backend *b, int64_t in, int64_t ncx, int slot, int8_t **q, float **d, float **s)
{
    uint8_t *base = b->xq + (size_t)(slot ^ b->xq_swap) * b->xq_cap;
    *q = (int8_t *)base;
    *d = (float *)(base + rnd((size_t)(in * ncx)));
    *s = (float *)(base + rnd((size_t)(in * ncx)) + rnd((size_t)(in / 32 * ncx) * sizeof(float)));
}

/* Slot 0 now holds the int8 copy of x (enqueued), scales per blk (32:
 * si_cu_quantize_x's, with block sums; 128: si_cu_w8_quantize_x's, for
 * mma_weights = i8): later products of x find it. */
void cu_xq_hold(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int blk)
{
    b->xq_key = x;
    b->xq_blk = blk;
    b->xq_in = in;
    b->xq_ncx = ncx;
    b->xq_stride = x_stride;
    b->xq_lo = (uintptr_t)x;
    b->xq_hi = (uintptr_t)(x + (ncx - 1) * x_stride + in);
}

/* Whether slot 0 holds x: the held input itself, or (per-32 blocks)
 * columns j.. j+ncx of it (*j): the MOE's routed and shared down
 * projections read the two parts of one quantised SwiGLU output.  A
 * column offset keeps the scales 16-byte aligned. */
bool cu_xq_hit(const si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int blk, int64_t *j)
{
    *j = 0;
    if (b->xq_key == NULL || b->xq_in != in || b->xq_stride != x_stride || b->xq_blk != blk)
        return false;
    if ((const void *)x == b->xq_key)
        return ncx == b->xq_ncx || (blk == 32 && ncx < b->xq_ncx);
    if (blk != 32 || x_stride <= 0 || x < (const float *)b->xq_key)
        return false;
    const int64_t off = x - (const float *)b->xq_key;
    *j = off / x_stride;
    return off % x_stride == 0 && *j + ncx <= b->xq_ncx && (*j * (in / 32)) % 4 == 0;
}

/* The int8 copy of x [ncx columns of `in`, x_stride floats apart] in half
 * `slot` of the scratch: values q, scales d per blk (32, with block sums
 * s; or 128, s unused: the per-32 layout has room).  Slot 0 is a cache:
 * the same input again (same device address, shape and blk, nothing
 * written to it since) is not quantised again, so q/k/v/gate projections
 * of one input share it. */
int cu_xq_get(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int slot, int blk,
              int8_t **q, float **d, float **s, si_err *err)
{
    return cu_xq_get_r(b, x, x_stride, in, ncx, slot, blk, q, d, s, NULL, err);
}

/* ---- knob norm_tail = defer ---------------------------------------------
 * mm_norm's deferred form leaves the norm's output d as t = (y + b) * w,
 * its int8 copy in slot 0 as t's, and the scale r in the blocks' sums of
 * squares (b->dn_sums): the products that read the copy next multiply
 * their sums by r (cu_xq_get_r), and anything else that reads d, or
 * writes part of it, first has d and the copy's scales multiplied by r
 * in place (cu_dn_resolve), as does the end of the list. */
static cu_xr dn_xr(const si_backend *b) { return (cu_xr){ b->dn_sums, (int)(b->dn_ne / 32), b->dn_ne, b->dn_eps }; }

int cu_dn_resolve(si_backend *b, si_err *err)
{
    if (!b->dn_on)
        return SI_OK;
    b->dn_on = false;
    int8_t *q;
    float *qd = NULL, *qs = NULL;
    if (b->xq_key == (const void *)b->dn_d)   /* (the copy still in slot 0) */
        cu_xq_parts(b, b->dn_ne, 1, 0, &q, &qd, &qs);
    const cu_xr xr = dn_xr(b);
    return launched(si_cu_xr_resolve(&xr, b->dn_d, qd, qs, b->stream), "RMSNORM (norm_tail = defer, resolve)",
                    err);
}

static bool dn_overlaps(const si_backend *b, uintptr_t lo, uintptr_t hi)
{
    const uintptr_t dlo = (uintptr_t)b->dn_d, dhi = (uintptr_t)(b->dn_d + b->dn_ne);
    return b->dn_on && lo < dhi && dlo < hi;
}

int cu_dn_touch(si_backend *b, const float *x, int64_t n, si_err *err)
{
    return dn_overlaps(b, (uintptr_t)x, (uintptr_t)(x + n)) ? cu_dn_resolve(b, err) : SI_OK;
}

int cu_xq_get_r(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int slot, int blk,
                int8_t **q, float **d, float **s, cu_xr *xr, si_err *err)
{
    const size_t bytes = cu_xq_bytes(in, ncx);
    int rc = cu_xq_reserve(b, bytes, err);
    if (rc != SI_OK)
        return rc;
    int64_t j;
    if (xr != NULL)
        xr->part = NULL;
    if (b->dn_on) {
        /* the pending deferred norm's copy, taken whole by the caller's
         * kernel, or made whole before anything else reads d or it */
        const bool take = xr != NULL && slot == 0 && ncx == 1 && (const void *)x == b->dn_d &&
                          b->xq_key == (const void *)b->dn_d && cu_xq_hit(b, x, x_stride, in, ncx, blk, &j) && j == 0;
        if (take)
            *xr = dn_xr(b);
        else if ((rc = cu_dn_touch(b, x, (ncx - 1) * x_stride + in, err)) != SI_OK)
            return rc;
    }
    if (slot == 0 && cu_xq_hit(b, x, x_stride, in, ncx, blk, &j)) {
        const int64_t nb = in / 32;
        cu_xq_parts(b, in, b->xq_ncx, 0, q, d, s);   /* (the holder's layout) */
        *q += j * in;
        *d += j * nb;
        *s += j * nb;
        return SI_OK;
    }
    cu_xq_parts(b, in, ncx, slot, q, d, s);
    if (slot == 0)
        b->xq_key = NULL;
    rc = launched(blk == 128 ? si_cu_w8_quantize_x(x, x_stride, in, ncx, *q, *d, b->stream)
                             : si_cu_quantize_x(x, x_stride, in, ncx, *q, *d, *s, b->stream),
                  "quantise activations", err);
    if (rc == SI_OK && slot == 0)
        cu_xq_hold(b, x, x_stride, in, ncx, blk);
    return rc;
}

/* mma_weights = i8 (cuda_w8.cu): the weight matrix's int8 copy from the
 * cache (w8_cache), else requantised into the w8 scratch (rewritten by
 * the next product, after this one on the stream); the activations per
 * w8_block through cu_xq_get, so products of one input share them. */
static int mm_run_w8(si_backend *b, const cu_mm *m, int64_t ncx, int slot, si_err *err)
{
    const int g = b->w8_block;
    const int8_t *wq;
    const float *ws;
    int rc = cu_w8_cache_get(b, m, g, &wq, &ws, err);
    if (rc == SI_OK && wq == NULL) {
        const size_t o_ws = ((size_t)(m->rows * m->in) + 255) & ~(size_t)255;
        if ((rc = cu_w8_reserve(b, o_ws + (size_t)(m->rows * (m->in / g)) * 4, err)) != SI_OK)
            return rc;
        wq = (const int8_t *)b->w8;
        ws = (const float *)(b->w8 + o_ws);
        rc = launched(si_cu_w8_weights(m, g, (int8_t *)b->w8, (float *)(b->w8 + o_ws), b->stream),
                      "MATMUL (int8 weights)", err);
    }
    int8_t *q;
    float *d, *s;
    if (rc == SI_OK)
        rc = cu_xq_get(b, m->x, m->x_stride, m->in, ncx, slot, g, &q, &d, &s, err);
    if (rc == SI_OK)
        rc = launched(si_cu_matmul_w8(m, g, wq, ws, q, d, b->stream), "MATMUL (int8 mma, i8 weights)", err);
    return rc;
}

/* The cu_mm fields cu_mm_run sets from the backend's knobs. */
void cu_mm_knobs(const si_backend *b, cu_mm *m)
{
    m->f32_tiled = b->f32_tiled;
    m->block_cols = b->mm_block_cols;
    m->gemv_quad = b->gemv_quad;
    m->gemv_qe = b->gemv_qe;
    m->gemv_qn = b->gemv_qn;
    m->gemv_mma = b->gemv_mma;
    m->gemv_wide_db = b->gemv_wide_db;
    m->gemv_wide_regs = b->gemv_wide_regs;
    m->gemv_wide_split = b->gemv_wide_split;
    m->gemv_wide_ring = b->gemv_wide_ring;
    m->gemv_ring_ks8 = b->gemv_ring_ks8;
    m->gemv_narrow = b->gemv_narrow;
    m->gemv_rg_cols = b->gemv_rg_cols;
    m->gemv_mma_cols = b->gemv_mma_cols;
    m->n_sm = b->n_sm;
    m->gemv_xs = b->gemv_xs;
    m->gemv_warps = b->gemv_warps;
    m->gemv_st = b->gemv_st;
    m->gemv_st6 = b->gemv_st6;
    m->prefetch = b->gemv_prefetch;
    m->w8_ktile = b->w8_ktile;
    m->w8_wgmma = b->w8_wgmma;
    m->w8_wg_pp = b->w8_wg_pp;
}

/* Knob gemv_mma_wide: whether a dense product of 9..32 columns (decode of
 * 9..32 sequences) runs on cuda_gemvx.cu's tensor-core GEMV, one launch
 * for a group (cu_mm.more), instead of the prefill GEMM (prefill_mm = mma;
 * with gemv such products keep the f32 path, the fidelity reference). */
static bool mm_wide(const si_backend *b, const cu_mm *mm)
{
    if (!b->gemv_mma_wide || !b->mm_dp4a || !b->mm_prefill_mma || mm->expert != NULL ||
        mm->ncols <= SI_CU_MMQ_MAX_COLS)
        return false;
    cu_mm m = *mm;
    cu_mm_knobs(b, &m);
    return si_cu_gemvm_ok(&m);
}

/* Knobs gemv_q6r / gemv_q8r: the regrouped copy of each product of m
 * (cuda_regroup.c) into w_rg, where its rows start on groups; the kernels
 * use them only where every product has one (cuda_gemvq.cu rg_ok). */
static const uint8_t *rg_copy(si_backend *b, const cu_mm *m, const uint8_t *w, int64_t rows, uint64_t row_bytes)
{
    const uint64_t grp = si_cu_rg_group(m->type);
    if (grp == 0 || rows <= 0 || m->in % 2048 != 0 || row_bytes % grp != 0)
        return NULL;
    return cu_rg_get(b, m->type, w, cu_weight_span(m->type, m->in, rows, row_bytes));
}

static void rg_copies(si_backend *b, cu_mm *m)
{
    m->w_rg = rg_copy(b, m, m->w, m->rows, m->row_bytes);
    for (int k = 0; k < m->n_more && m->w_rg != NULL; k++)
        m->more[k].w_rg = rg_copy(b, m, m->more[k].w, m->more[k].rows, m->more[k].row_bytes);
}

/* The product through the int8 tensor-core GEMM (knob prefill_mm = mma,
 * dense, more columns than the decode kernels take), else through dp4a
 * (knob gemv: v2 or v1) when the knob and the weight allow it, else the
 * f32 kernel.  Column j reads x column j / x_div (ncx columns).  A stacked
 * second matrix (mm->w2) is one launch on the v2 GEMV, two elsewhere. */
int cu_mm_run(si_backend *b, const cu_mm *mm, int slot, si_err *err)
{
    cu_mm m = *mm;
    cu_mm_knobs(b, &m);
    if (m.rows <= 0 || m.ncols <= 0)
        return launched(si_cu_matmul(&m, b->stream), "MATMUL", err);
    /* knobs gemv_q6r / gemv_q8r: a one-column product's regrouped copies
     * (gemv_regroup_cols: of up to 8 columns; rg_ok says where they serve) */
    if ((m.ncols == 1 || (b->gemv_rg_cols && m.ncols <= 8)) && m.expert == NULL && cu_rg_on(b, m.type))
        rg_copies(b, &m);
    const bool wide = mm_wide(b, &m);
    const bool mma = !wide && b->mm_prefill_mma && m.expert == NULL && m.ncols > SI_CU_MMQ_MAX_COLS && si_cu_mma_ok(&m);
    /* Products of one input (mm_group) are one launch on the v1 GEMV only:
     * anywhere else they run one by one, each a plain cu_mm. */
    /* (float-stored weights, e.g. the MOE router and shared-expert gate,
     * are one launch on the f32 kernel where si_cu_matmul_more_ok) */
    const bool dp4a = b->mm_dp4a && si_cu_mmq_ok(&m);
    const bool f32_more = !wide && !mma && !dp4a && si_cu_matmul_more_ok(&m);
    if (m.n_more > 0 && !f32_more && !wide && (mma || !dp4a || b->gemv_v2)) {
        cu_mm one = m;
        one.n_more = 0;
        int rc = cu_mm_run(b, &one, slot, err);
        for (int k = 0; k < m.n_more && rc == SI_OK; k++) {
            one.w = m.more[k].w;
            one.y = m.more[k].y;
            one.rows = m.more[k].rows;
            one.row_bytes = m.more[k].row_bytes;
            one.y_stride = m.more[k].y_stride;
            rc = cu_mm_run(b, &one, slot, err);
        }
        return rc;
    }
    if (m.w2 != NULL && (mma || !b->mm_dp4a || !b->gemv_v2 || !si_cu_gemv_ok(&m))) {
        cu_mm hi = m;
        m.w2 = NULL;
        m.rows = m.rows_split;
        m.rows_split = 0;
        hi.w = hi.w2;
        hi.w2 = NULL;
        hi.rows -= hi.rows_split;
        hi.y += hi.rows_split;
        hi.rows_split = 0;
        /* (slot 1 is not cached: the second half quantises the same x
         * again into the same place, after the first half on the stream) */
        int rc = cu_mm_run(b, &m, slot, err);
        return rc == SI_OK ? cu_mm_run(b, &hi, slot, err) : rc;
    }
    const int64_t ncx = (m.ncols - 1) / m.x_div + 1;
    if (!wide && !mma && !dp4a) {
        /* (x read as floats: a deferred norm's output made whole first) */
        const int rc = cu_dn_touch(b, m.x, (ncx - 1) * m.x_stride + m.in, err);
        return rc != SI_OK ? rc : launched(si_cu_matmul(&m, b->stream), "MATMUL", err);
    }
    if (mma && b->mm_w8 && si_cu_w8_ok(&m))
        return mm_run_w8(b, &m, ncx, slot, err);
    int8_t *q;
    float *d, *s;
    /* (gemv_quad's one-column forms scale their sums by a deferred norm's
     * scale themselves, knob norm_tail = defer) */
    const bool xr_ok = !wide && !mma && !b->gemv_v2 && m.gemv_quad && si_cu_gemvq_xr_ok(&m);
    int rc = cu_xq_get_r(b, m.x, m.x_stride, m.in, ncx, slot, 32, &q, &d, &s, xr_ok ? &m.xr : NULL, err);
    if (rc != SI_OK)
        return rc;
    if (wide)
        return launched(si_cu_gemvm(&m, q, d, s, b->stream), "MATMUL (int8 mma GEMV)", err);
    if (mma && b->mm_mma_v2)
        return launched(si_cu_matmul_mma2(&m, q, d, s, b->stream), "MATMUL (int8 mma v2)", err);
    if (mma)
        return launched(si_cu_matmul_mma(&m, q, d, s, b->stream), "MATMUL (int8 mma)", err);
    if (!b->gemv_v2)
        return launched(si_cu_matmul_q8_v1(&m, q, d, s, b->stream), "MATMUL (dp4a v1)", err);
    return launched(si_cu_matmul_q8(&m, q, d, s, b->stream), "MATMUL (dp4a)", err);
}

/* ---- MATMUL groups ----------------------------------------------------------
 * Decode runs several products of one input back to back (attention
 * q/k/v, GDN qkv/z/beta/alpha, ffn gate/up).  With knob gemv_fuse (default
 * true) on the v1 GEMV, up to 1 + CU_MM_MORE such MATMULs run as one
 * launch (cu_mm.more): one fill and drain of the GPU instead of one per
 * product, the input quantised once as before.  Each op is checked alone
 * first; a product that cannot join runs alone.  The results are the same
 * bits either way (same kernel, same rows). */

static void t_range(const si_tensor *t, uintptr_t *lo, uintptr_t *hi);

static bool same_tensor(const si_tensor *a, const si_tensor *c)
{
    if (a->buf != c->buf || a->offset != c->offset || a->type != c->type || a->ndim != c->ndim)
        return false;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->ne[i] != c->ne[i] || a->nb[i] != c->nb[i])
            return false;
    return true;
}

static cu_mm matmul_mm(const si_op *op)
{
    const si_tensor *w = op->src[0], *x = op->src[1];
    cu_mm mm = {
        .w = dptr(w), .type = w->type, .in = w->ne[0], .rows = si_oc_ne(w, 1), .row_bytes = row_stride(w),
        .x = (const float *)dptr(x), .x_stride = (int64_t)(row_stride(x) / 4), .x_div = 1,
        .y = (float *)dptr(&op->dst), .y_stride = (int64_t)(row_stride(&op->dst) / 4), .ncols = si_oc_ne(x, 1),
    };
    return mm;
}

/* Whether ops[j] can join the group led by ops[i] (ops i..j-1 joined). */
static bool mm_joins(si_backend *b, const si_op *ops, size_t i, size_t j, bool use_kernel)
{
    const si_op *lead = &ops[i], *op = &ops[j];
    if (op->kind != SI_OP_MATMUL || si_oc_check(&b->oc, op, NULL) != SI_OK ||
        (use_kernel && cu_kernel_for(b, op) != NULL))
        return false;
    if (!same_tensor(op->src[1], lead->src[1]) || op->src[0]->type != lead->src[0]->type ||
        op->src[0]->ne[0] != lead->src[0]->ne[0])
        return false;
    /* no product of the group may write what the group reads */
    uintptr_t xlo, xhi, lo, hi;
    t_range(lead->src[1], &xlo, &xhi);
    for (size_t k = i; k <= j; k++) {
        t_range(&ops[k].dst, &lo, &hi);
        if (lo < xhi && xlo < hi)
            return false;
    }
    cu_mm m = matmul_mm(op);
    return m.rows > 0 && (si_cu_mmq_ok(&m) || mm_wide(b, &m));
}

/* How many ops from ops[i] run as one launch (1: op i alone). */
static size_t cu_mm_group_len(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    const si_op *lead = &ops[i];
    if (!b->gemv_fuse || !b->mm_dp4a || b->gemv_v2 || lead->kind != SI_OP_MATMUL || i + 1 >= n_ops ||
        si_oc_check(&b->oc, lead, NULL) != SI_OK || (use_kernel && cu_kernel_for(b, lead) != NULL))
        return 1;
    cu_mm m = matmul_mm(lead);
    if (m.rows <= 0 || (!mm_wide(b, &m) && (m.ncols > SI_CU_MMQ_MAX_COLS || !si_cu_mmq_ok(&m))))
        return 1;
    size_t n = 1;
    while (n <= CU_MM_MORE && i + n < n_ops && mm_joins(b, ops, i, i + n, use_kernel))
        n++;
    return n;
}

/* Runs ops[0..n) (n from cu_mm_group_len, > 1) as one launch. */
static int cu_mm_group_exec(si_backend *b, const si_op *ops, size_t n, si_err *err)
{
    cu_mm mm = matmul_mm(&ops[0]);
    for (size_t k = 1; k < n; k++) {
        const cu_mm o = matmul_mm(&ops[k]);
        mm.more[k - 1] = (cu_mm_part){ o.w, o.y, o.rows, o.row_bytes, o.y_stride, NULL };
    }
    mm.n_more = (int)(n - 1);
    int rc = cu_mm_run(b, &mm, 0, err);
    for (size_t k = 0; k < n && rc == SI_OK; k++)
        cu_xq_after(b, &ops[k]);
    return rc;
}

/* ---- fused RMSNORM ------------------------------------------------------------
 * Every layer adds its residual (ADD), normalises the sum (RMSNORM), then
 * runs products of the norm's output, which the int8 paths quantise first
 * (quantise activations).  With knob fuse_norm (default true) one kernel
 * does the three (si_cu_norm_fused): the ADD's sum is still stored (the
 * next residual), the norm's output too, and its int8 copy goes to slot 0
 * of the scratch as the cached input of the products after it, which then
 * skip their quantisation.  The same IEEE operations in the same order as
 * the three kernels, so the same bits.  ne0 % 32 == 0 and <= 4096.  The
 * same knob fuses a SWIGLU with the quantisation of its output for the
 * down projection after it (swiglu_q). */

static cu_rows rows_of(const si_tensor *t);

/* Whether the op after a norm writing `y` quantises y into slot 0 first:
 * a MATMUL of y on the int8 paths, or an MOE of y (its router is f32,
 * its gate/up products int8 with x_div = K: the same ncx). */
static bool quantises(si_backend *b, const si_op *next, const si_tensor *y, bool use_kernel)
{
    if (next->kind != SI_OP_MATMUL && next->kind != SI_OP_MOE)
        return false;
    const si_tensor *x = next->kind == SI_OP_MATMUL ? next->src[1] : next->src[0];
    if (!same_tensor(x, y) || si_oc_check(&b->oc, next, NULL) != SI_OK || (use_kernel && cu_kernel_for(b, next) != NULL))
        return false;
    if (next->kind == SI_OP_MOE) {
        si_oc_moe_dims md;
        si_oc_moe_dims_of(next, &md);
        /* (the type and alignment of the routed gate/up: one column) */
        cu_mm g = mm_of(next->src[2], 0, NULL, 0, 1, NULL, 0, 1, md.F, NULL);
        g.expert_bytes = next->src[2]->nb[2];
        return b->mm_dp4a && si_cu_mmq_ok(&g);
    }
    cu_mm m = matmul_mm(next);
    if (mm_wide(b, &m))
        return true;
    if (b->mm_prefill_mma && m.ncols > SI_CU_MMQ_MAX_COLS) {
        /* (mma_weights = i8 quantises its own way; a stacked pair runs
         * as two plain products) */
        cu_mm one = m;
        one.w2 = NULL;
        one.n_more = 0;
        return si_cu_mma_ok(&m) && !(b->mm_w8 && si_cu_w8_ok(&one));
    }
    return b->mm_dp4a && si_cu_mmq_ok(&m);
}

/* ops[i..i+n) as one fused norm: n = 2 (ADD then the RMSNORM of its sum)
 * or 1 (RMSNORM); *quant: the op after quantises the norm's output.
 * 0: none here. */
static size_t norm_fused_len(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel, bool *quant)
{
    *quant = false;
    if (!b->fuse_norm)
        return 0;
    size_t n = 0;
    const si_op *norm = NULL;
    /* (ADD's sources have its shape: si_oc_check) */
    if (ops[i].kind == SI_OP_ADD && i + 1 < n_ops && ops[i + 1].kind == SI_OP_RMSNORM &&
        same_tensor(ops[i + 1].src[0], &ops[i].dst)) {
        n = 2;
        norm = &ops[i + 1];
    } else if (ops[i].kind == SI_OP_RMSNORM) {
        n = 1;
        norm = &ops[i];
    }
    if (norm == NULL)
        return 0;
    for (size_t k = i; k < i + n; k++)
        if (si_oc_check(&b->oc, &ops[k], NULL) != SI_OK || (use_kernel && cu_kernel_for(b, &ops[k]) != NULL))
            return 0;
    if (!si_cu_norm_fuse_ok(norm->dst.ne[0]))
        return 0;
    *quant = i + n < n_ops && b->mm_dp4a && quantises(b, &ops[i + n], &norm->dst, use_kernel);
    /* a lone norm gains only when it also quantises */
    return n == 1 && !*quant ? 0 : n;
}

/* A SWIGLU whose output the next op quantises (the ffn down projection):
 * one kernel computes and quantises it (knob fuse_norm too). */
/* ops[i] runs here (not a kernel plugin) and the op after it quantises its
 * output, rows of a multiple of 32: the op may make that int8 copy itself. */
bool cu_next_quantises(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    const si_op *op = &ops[i];
    return i + 1 < n_ops && op->dst.ne[0] % 32 == 0 && si_oc_check(&b->oc, op, NULL) == SI_OK &&
           !(use_kernel && cu_kernel_for(b, op) != NULL) && quantises(b, &ops[i + 1], &op->dst, use_kernel);
}

static bool swiglu_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    return b->fuse_norm && b->mm_dp4a && ops[i].kind == SI_OP_SWIGLU && cu_next_quantises(b, ops, n_ops, i, use_kernel);
}

/* d = silu(g) * u over nrows rows of ne0, and its int8 copy (per 32) into
 * slot 0, whose held input is dropped first; the caller holds d there
 * (cu_xq_hold) once it knows d's address and stride. */
int cu_swiglu_q_slot0(si_backend *b, const cu_rows *g, const cu_rows *u, const cu_rows *d, int64_t ne0,
                      int64_t nrows, const char *what, si_err *err)
{
    int rc = cu_xq_reserve(b, cu_xq_bytes(ne0, nrows), err);
    if (rc != SI_OK)
        return rc;
    int8_t *q;
    float *qd, *qs;
    cu_xq_parts(b, ne0, nrows, 0, &q, &qd, &qs);
    b->xq_key = NULL;
    return launched(si_cu_swiglu_q(g, u, d, ne0, nrows, q, qd, qs, b->stream), what, err);
}

static int swiglu_q_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_tensor *y = &op->dst;
    const int64_t ne0 = y->ne[0], nrows = si_oc_ne(y, 1) * si_oc_ne(y, 2) * si_oc_ne(y, 3);
    cu_rows g = rows_of(op->src[0]), u = rows_of(op->src[1]), d = rows_of(y);
    int rc = cu_swiglu_q_slot0(b, &g, &u, &d, ne0, nrows, "SWIGLU", err);
    if (rc != SI_OK)
        return rc;
    cu_xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), ne0, nrows, 32);
    return SI_OK;
}

/* ---- knob gemv_glu ----------------------------------------------------------
 * Decode's dense ffn: MATMUL gate and MATMUL up of one input (either order),
 * then SWIGLU(gate, up) whose output the down projection quantises.  One
 * launch (si_cu_gemvq_glu) makes both products, the SwiGLU and its int8
 * copy, where fuse_norm's path runs the products (one launch) then
 * swiglu_q_kernel: the same bits.  The copy is made in slot 1 while the
 * launch reads x's copy from slot 0; the two halves then trade places
 * (xq_swap), so the down projection finds its input cached in slot 0. */


/* The launch of ops[0..3) (SWIGLU at ops[2]): the gate product (the
 * SWIGLU's first operand) with the up rows as more[0]. */
static cu_mm glu_mm(si_backend *b, const si_op *ops)
{
    const bool ab = same_tensor(ops[2].src[0], &ops[0].dst);
    cu_mm mm = matmul_mm(ab ? &ops[0] : &ops[1]);
    const cu_mm o = matmul_mm(ab ? &ops[1] : &ops[0]);
    mm.more[0] = (cu_mm_part){ o.w, o.y, o.rows, o.row_bytes, o.y_stride, NULL };
    mm.n_more = 1;
    cu_mm_knobs(b, &mm);
    return mm;
}

/* ops[i..i+3) as one gemv_glu unit. */
static bool glu_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    if (!cu_glu_on(b) || i + 3 >= n_ops)
        return false;
    const si_op *sw = &ops[i + 2];
    if (ops[i].kind != SI_OP_MATMUL || sw->kind != SI_OP_SWIGLU || si_oc_check(&b->oc, &ops[i], NULL) != SI_OK ||
        (use_kernel && cu_kernel_for(b, &ops[i]) != NULL) || !mm_joins(b, ops, i, i + 1, use_kernel))
        return false;
    /* SWIGLU(one product's output, the other's) */
    const bool ab = same_tensor(sw->src[0], &ops[i].dst) && same_tensor(sw->src[1], &ops[i + 1].dst);
    const bool ba = same_tensor(sw->src[0], &ops[i + 1].dst) && same_tensor(sw->src[1], &ops[i].dst);
    if (!(ab || ba) || !cu_next_quantises(b, ops, n_ops, i + 2, use_kernel))
        return false;
    const cu_mm mm = glu_mm(b, ops + i);
    const cu_glu none = { 0 };
    if (!si_cu_gemvq_glu_ok(&mm, &none) || sw->dst.ne[0] != mm.rows || si_oc_ne(&sw->dst, 1) != 1)
        return false;
    /* the SwiGLU's output: apart from the products' or one of them
     * exactly (a block writes index j of both before it of the output) */
    uintptr_t lo, hi, plo, phi;
    t_range(&sw->dst, &lo, &hi);
    for (int k = 0; k < 2; k++) {
        t_range(&ops[i + k].dst, &plo, &phi);
        if (lo < phi && plo < hi && !same_tensor(&sw->dst, &ops[i + k].dst))
            return false;
    }
    return true;
}

/* The gemv_glu launch of mm (x: ncx columns in mm->x) with gl's outputs
 * and the copy's R rows (F = mm->rows wide) in slot 1, after which the
 * halves trade places and slot 0 holds the copy of gl->d (R rows,
 * gl->d_stride floats apart).  Room for both copies is made first (a
 * larger scratch drops slot 0's), then x's copy is found or made. */
int cu_glu_launch(si_backend *b, const cu_mm *mm, cu_glu *gl, int64_t ncx, int64_t R, const char *what,
                  si_err *err)
{
    const int64_t F = mm->rows, H = mm->in;
    int rc = cu_xq_reserve(b, cu_xq_bytes(F, R) > cu_xq_bytes(H, ncx) ? cu_xq_bytes(F, R) : cu_xq_bytes(H, ncx), err);
    int8_t *q;
    float *qd, *qs;
    cu_mm m = *mm;   /* (one dense column: a deferred norm's scale taken, m.xr) */
    if (rc == SI_OK)
        rc = cu_xq_get_r(b, m.x, m.x_stride, H, ncx, 0, 32, &q, &qd, &qs,
                         m.expert == NULL && ncx == 1 ? &m.xr : NULL, err);
    if (rc != SI_OK)
        return rc;
    cu_xq_parts(b, F, R, 1, &gl->q, &gl->qd, &gl->qs);
    rc = launched(si_cu_gemvq_glu(&m, q, qd, qs, gl, b->stream), what, err);
    if (rc != SI_OK)
        return rc;
    b->xq_swap ^= 1;   /* slot 1's copy becomes slot 0's */
    cu_xq_hold(b, gl->d, gl->d_stride, F, R, 32);
    return SI_OK;
}

static int glu_exec(si_backend *b, const si_op *ops, si_err *err)
{
    const cu_mm mm = glu_mm(b, ops);
    cu_glu gl = { .d = (float *)dptr(&ops[2].dst), .d_stride = (int64_t)(row_stride(&ops[2].dst) / 4) };
    return cu_glu_launch(b, &mm, &gl, 1, 1, "MATMUL+SWIGLU (gemv_glu)", err);
}

static int norm_fused_exec(si_backend *b, const si_op *ops, size_t n, bool quant, si_err *err)
{
    const si_op *norm = &ops[n - 1];
    const si_tensor *y = &norm->dst;
    const int64_t ne0 = y->ne[0], nrows = si_oc_ne(y, 1) * si_oc_ne(y, 2) * si_oc_ne(y, 3);
    cu_norm_fuse f = { 0 };
    cu_rows a = rows_of(norm->src[0]), d = rows_of(y);
    if (n == 2) {
        a = rows_of(ops[0].src[0]);
        f.b = rows_of(ops[0].src[1]);
        f.r = rows_of(&ops[0].dst);
    }
    if (quant) {
        int rc = cu_xq_reserve(b, cu_xq_bytes(ne0, nrows), err);
        if (rc != SI_OK)
            return rc;
        cu_xq_parts(b, ne0, nrows, 0, &f.q, &f.qd, &f.qs);
    }
    int rc = launched(si_cu_norm_fused(&a, (const float *)dptr(norm->src[1]), &d, ne0, nrows, norm->p.norm.eps, &f,
                                       b->norm_v2, b->stream),
                      n == 2 ? "ADD+RMSNORM" : "RMSNORM", err);
    if (rc != SI_OK)
        return rc;
    for (size_t k = 0; k < n; k++)
        cu_xq_after(b, &ops[k]);
    if (quant)
        cu_xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), ne0, nrows, 32);
    return SI_OK;
}

/* ---- knob norm_tail: MATMUL + ADD + RMSNORM as one launch ---------------
 * A decode layer's out-projection (or ffn down) is followed by the
 * residual ADD and the next norm, which fuse_norm already makes one
 * kernel.  With norm_tail that work runs as the product's own tail
 * (cuda_gemvq.cu gq_norm_tail: the launch's last block), one launch
 * boundary less each (~65 a 9b step): the product on gemv_quad's kernels
 * (gemv = v1), one product alone, hidden-size rows rms2_kernel takes.
 * one: one column; true: up to 8; false (the default: no gain measured,
 * cuda_sm120.c).  Same bits as the fused norm after the product
 * (rms2_kernel's arithmetic, cuda_rms.cuh). */

/* ops[0..3) (MATMUL, ADD of its output, RMSNORM of the sum) as one
 * product with its norm tail, the int8 copy (f.q) not yet placed. */
static cu_mm mm_norm_mm(si_backend *b, const si_op *ops)
{
    const si_op *mo = &ops[0], *add = &ops[1], *norm = &ops[2];
    cu_mm m = matmul_mm(mo);
    cu_mm_knobs(b, &m);
    const si_tensor *res = same_tensor(add->src[0], &mo->dst) ? add->src[1] : add->src[0];
    const bool defer = b->norm_tail == 3;
    m.norm = (cu_norm_tail){ .ctr = defer ? NULL : b->norm_ctr,
                             .part = defer ? b->dn_part + (size_t)b->dn_flip * CU_DN_PART : NULL,
                             .w = (const float *)dptr(norm->src[1]), .d = rows_of(&norm->dst),
                             .eps = norm->p.norm.eps, .f = { .b = rows_of(res), .r = rows_of(&add->dst) } };
    /* (defer: a Q6_K / Q8_0 product on its regrouped copy, as cu_mm_run) */
    if (defer && m.ncols == 1 && cu_rg_on(b, m.type))
        rg_copies(b, &m);
    return m;
}

/* Whether ops[i..i+3) run as mm_norm_mm's product; *quant: the op after
 * quantises the norm's output. */
static bool mm_norm_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel, bool *quant)
{
    const bool defer = b->norm_tail == 3;
    if (b->norm_tail == 0 || (defer ? b->dn_part == NULL : b->norm_ctr == NULL) || !b->norm_v2 || b->gemv_v2 ||
        !b->gemv_quad || !b->mm_dp4a || i + 2 >= n_ops)
        return false;
    const si_op *mo = &ops[i], *add = &ops[i + 1];
    if (mo->kind != SI_OP_MATMUL || add->kind != SI_OP_ADD ||
        (!same_tensor(add->src[0], &mo->dst) && !same_tensor(add->src[1], &mo->dst)) ||
        same_tensor(add->src[0], add->src[1]))
        return false;
    if (si_oc_check(&b->oc, mo, NULL) != SI_OK || (use_kernel && cu_kernel_for(b, mo) != NULL) ||
        norm_fused_len(b, ops, n_ops, i + 1, use_kernel, quant) != 2)
        return false;
    const cu_mm m = mm_norm_mm(b, ops + i);
    if (m.ncols > (b->norm_tail == 1 ? SI_CU_MMQ_MAX_COLS : 1) || !si_cu_mmq_ok(&m))
        return false;
    /* (defer: one row, the copy made for a MATMUL after, which takes its
     * scale; an MOE's router reads the norm's output as floats, so a
     * resolve launch would stand where the norm's was) */
    if (defer)
        return *quant && i + 3 < n_ops && ops[i + 3].kind == SI_OP_MATMUL && ops[i + 2].dst.ne[0] == m.rows &&
               si_cu_gemvq_defer_ok(&m);
    return si_cu_gemvq_norm_ok(&m);   /* (the int8 copy's place is aligned: cu_xq_parts) */
}

/* norm_tail = defer: the product reads x's copy from slot 0 while its
 * blocks write the norm's to slot 1 (no block waits for another), then
 * the halves trade places (as gemv_glu's); the norm is pending after. */
static int mm_defer_exec(si_backend *b, const si_op *ops, si_err *err)
{
    cu_mm m = mm_norm_mm(b, ops);
    const si_tensor *y = &ops[2].dst;
    const int64_t H = m.rows;
    const size_t need = cu_xq_bytes(H, 1) > cu_xq_bytes(m.in, 1) ? cu_xq_bytes(H, 1) : cu_xq_bytes(m.in, 1);
    int rc = cu_xq_reserve(b, need, err);
    int8_t *q;
    float *d, *s;
    if (rc == SI_OK)
        rc = cu_xq_get(b, m.x, m.x_stride, m.in, 1, 0, 32, &q, &d, &s, err);
    if (rc != SI_OK)
        return rc;
    cu_xq_parts(b, H, 1, 1, &m.norm.f.q, &m.norm.f.qd, &m.norm.f.qs);
    rc = launched(si_cu_matmul_q8_v1(&m, q, d, s, b->stream), "MATMUL+ADD+RMSNORM (norm_tail = defer)", err);
    if (rc != SI_OK)
        return rc;
    for (size_t k = 0; k < 3; k++)
        cu_xq_after(b, &ops[k]);
    b->xq_swap ^= 1;   /* slot 1's copy becomes slot 0's */
    cu_xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), H, 1, 32);
    b->dn_on = true;
    b->dn_d = (float *)dptr(y);
    b->dn_sums = m.norm.part;
    b->dn_ne = H;
    b->dn_eps = m.norm.eps;
    b->dn_flip ^= 1;
    return SI_OK;
}

static int mm_norm_exec(si_backend *b, const si_op *ops, bool quant, si_err *err)
{
    if (b->norm_tail == 3)
        return mm_defer_exec(b, ops, err);
    cu_mm m = mm_norm_mm(b, ops);
    const si_tensor *y = &ops[2].dst;
    const int64_t ne0 = y->ne[0], nrows = m.ncols;
    /* (the norm's int8 copy goes to slot 0, where x's may be: room for
     * both first, so the slot does not move under the pointers) */
    int rc = quant ? cu_xq_reserve(b, cu_xq_bytes(ne0, nrows), err) : SI_OK;
    int8_t *q;
    float *d, *s;
    if (rc == SI_OK)
        rc = cu_xq_get(b, m.x, m.x_stride, m.in, m.ncols, 0, 32, &q, &d, &s, err);
    if (rc != SI_OK)
        return rc;
    if (quant)
        cu_xq_parts(b, ne0, nrows, 0, &m.norm.f.q, &m.norm.f.qd, &m.norm.f.qs);
    b->xq_key = NULL;
    rc = launched(si_cu_matmul_q8_v1(&m, q, d, s, b->stream), "MATMUL+ADD+RMSNORM", err);
    if (rc != SI_OK)
        return rc;
    for (size_t k = 0; k < 3; k++)
        cu_xq_after(b, &ops[k]);
    if (quant)
        cu_xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), ne0, nrows, 32);
    return SI_OK;
}

static int matmul_exec(si_backend *b, const si_op *op, si_err *err)
{
    cu_mm mm = matmul_mm(op);
    return cu_mm_run(b, &mm, 0, err);
}

/* ---- GET_ROWS, RMSNORM, ADD, MUL, SWIGLU ---------------------------------- */

static cu_rows rows_of(const si_tensor *t)
{
    cu_rows r = { dptr(t), si_oc_ne(t, 1), si_oc_ne(t, 2), t->nb[1], t->nb[2], t->nb[3] };
    if (r.ne1 <= 1)
        r.nb1 = 0;
    if (r.ne2 <= 1)
        r.nb2 = 0;
    if (si_oc_ne(t, 3) <= 1)
        r.nb3 = 0;
    if (r.ne1 < 1)
        r.ne1 = 1;
    if (r.ne2 < 1)
        r.ne2 = 1;
    return r;
}

static int get_rows_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_tensor *tab = op->src[0], *ids = op->src[1];
    const int64_t n = ids->ne[0], n_rows = si_oc_ne(tab, 1);
    if (n == 0)
        return SI_OK;
    /* The ids live on the device: the kernel checks them (a bad id gives a
     * zero row, never a read outside the table) and the first bad one is
     * reported as SI_ERANGE by the next sync/download, as the cpu backend
     * reports it from exec. */
    if (n_rows > 0x7fffffffLL)
        return si_err_set(err, SI_EUNSUPPORTED, CU_NAME ": GET_ROWS: table of %lld rows", (long long)n_rows);
    int rc = launched(si_cu_get_rows(tab->type, dptr(tab), row_stride(tab), n_rows, (const int32_t *)dptr(ids),
                                     ids->nb[0], n, (float *)dptr(&op->dst), op->dst.nb[1], tab->ne[0], b->flag_dev,
                                     b->stream),
                      "GET_ROWS", err);
    if (rc == SI_OK)
        b->flag_pending = true;
    return rc;
}

static int elem_exec(si_backend *b, const si_op *op, si_err *err)
{
    if (op->kind == SI_OP_GET_ROWS)
        return get_rows_exec(b, op, err);
    const si_tensor *d = &op->dst;
    cu_rows a = rows_of(op->src[0]), c = rows_of(op->src[1]), y = rows_of(d);
    int64_t nrows = si_oc_ne(d, 1) * si_oc_ne(d, 2) * si_oc_ne(d, 3);
    return launched(si_cu_elem((int)op->kind, &a, &c, &y, d->ne[0], nrows, op->p.norm.eps, b->norm_v2, b->stream),
                    si_oc_elem_name(op->kind), err);
}

/* ---- dispatch --------------------------------------------------------------- */

typedef struct op_entry {
    int (*exec)(si_backend *b, const si_op *op, si_err *err);
} op_entry;

static int topk_exec(si_backend *b, const si_op *op, si_err *err);   /* at the end of the file */
static int host_ids_exec(si_backend *b, const si_op *op, si_err *err);

static const op_entry op_tab[SI_OP_KIND_COUNT] = {
    [SI_OP_GET_ROWS] = { elem_exec },
    [SI_OP_MATMUL]   = { matmul_exec },
    [SI_OP_RMSNORM]  = { elem_exec },
    [SI_OP_ADD]      = { elem_exec },
    [SI_OP_MUL]      = { elem_exec },
    [SI_OP_SWIGLU]   = { elem_exec },
    [SI_OP_ATTN]     = { cu_attn_exec },
    [SI_OP_GDN]      = { cu_gdn_exec },
    [SI_OP_MOE]      = { cu_moe_exec },
    [SI_OP_TOPK]     = { topk_exec },
    [SI_OP_HOST_IDS] = { host_ids_exec },
};

static const op_entry *find_op(const si_op *op, si_err *err)
{
    if (op->kind >= SI_OP_KIND_COUNT || op_tab[op->kind].exec == NULL) {
        si_err_set(err, SI_EUNSUPPORTED, CU_NAME ": op kind %u is not supported", op->kind);
        return NULL;
    }
    return &op_tab[op->kind];
}

bool cu_supports(const si_backend *b, const si_op *op)
{
    if (b == NULL || op == NULL)
        return false;
    const op_entry *e = find_op(op, NULL);
    /* (HOST_IDS: not with profile = true, whose sync after each exec
     * would wait for a post that comes only after the exec returns) */
    if (op->kind == SI_OP_HOST_IDS && (b->post_ring == NULL || b->prof != NULL))
        return false;
    return e != NULL && si_oc_check(&b->oc, op, NULL) == SI_OK;
}

/* Device bytes [lo, hi) of a valid tensor. */
static void t_range(const si_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    uint32_t blk, bytes;
    si_oc_type_blk(t->type, &blk, &bytes);
    uint64_t ext = blk ? (uint64_t)(t->ne[0] / blk) * bytes : 0;
    for (uint32_t i = 1; i < t->ndim; i++)
        if (t->ne[i] > 1)
            ext += (uint64_t)(t->ne[i] - 1) * t->nb[i];
    *lo = (uintptr_t)dptr(t);
    *hi = *lo + ext;
}

/* Drops the cached quantised input when `op` wrote into its source. */
void cu_xq_after(si_backend *b, const si_op *op)
{
    if (b->xq_key == NULL)
        return;
    uintptr_t lo, hi;
    t_range(&op->dst, &lo, &hi);
    bool hit = lo < b->xq_hi && b->xq_lo < hi;
    if (op->kind == SI_OP_GDN && op->p.gdn.state != NULL) {
        lo = (uintptr_t)op->p.gdn.state->dev;
        hi = lo + op->p.gdn.state->nbytes;
        hit |= lo < b->xq_hi && b->xq_lo < hi;
    }
    if (hit)
        b->xq_key = NULL;
}

int cu_exec_one(si_backend *b, const si_op *op, bool use_kernel, si_err *err)
{
    const op_entry *e = find_op(op, err);
    if (e == NULL)
        return SI_EUNSUPPORTED;
    /* The op's semantics are the same whoever runs it: one shape check. */
    int rc = si_oc_check(&b->oc, op, err);
    if (rc != SI_OK)
        return rc;
    const cu_kernel *k = use_kernel ? cu_kernel_for(b, op) : NULL;
    if (k != NULL) {
        rc = k->ops->exec(k->state, op, err);
        if (rc != SI_OK)
            si_err_prefix(err, k->name);
    } else {
        rc = e->exec(b, op, err);
    }
    if (rc == SI_OK)
        cu_xq_after(b, op);
    return rc;
}

/* What runs from ops[i] as one unit, decided once per unit (the profiler's
 * events and the run both follow it). */
typedef struct cu_unit {
    enum { CU_UNIT_ONE, CU_UNIT_NORM, CU_UNIT_SWIGLU_Q, CU_UNIT_GDN_Q, CU_UNIT_ATTN_Q, CU_UNIT_MM_GROUP, CU_UNIT_MM_NORM,
           CU_UNIT_GLU } kind;
    size_t n;      /* ops it takes                                  */
    bool   quant;  /* CU_UNIT_NORM, CU_UNIT_MM_NORM: also the int8 copy
                    * of the norm's output                          */
} cu_unit;

static cu_unit unit_at(si_backend *b, const si_op *ops, size_t n_ops, size_t i)
{
    cu_unit u = { CU_UNIT_ONE, 1, false };
    if (mm_norm_ok(b, ops, n_ops, i, true, &u.quant))
        u = (cu_unit){ CU_UNIT_MM_NORM, 3, u.quant };
    else if ((u.n = norm_fused_len(b, ops, n_ops, i, true, &u.quant)) > 0)
        u.kind = CU_UNIT_NORM;
    else if (swiglu_q_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_SWIGLU_Q, 1, false };
    else if (cu_gdn_q_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_GDN_Q, 1, false };
    else if (cu_attn_q_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_ATTN_Q, 1, false };
    else if (glu_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_GLU, 3, false };
    else if ((u.n = cu_mm_group_len(b, ops, n_ops, i, true)) > 1)
        u.kind = CU_UNIT_MM_GROUP;
    return u;
}

/* Knob norm_tail = defer, before a unit: the pending norm's output made
 * whole where the unit reads it other than through its products' int8
 * copy (cu_xq_get_r sees to those), or writes part of it; forgotten
 * where the unit writes all of it (its values are dead then). */
static int dn_before(si_backend *b, const si_op *ops, const cu_unit *u, si_err *err)
{
    if (!b->dn_on)
        return SI_OK;
    const bool mm_unit = u->kind == CU_UNIT_ONE || u->kind == CU_UNIT_MM_GROUP || u->kind == CU_UNIT_GLU ||
                         u->kind == CU_UNIT_MM_NORM;
    const uintptr_t dlo = (uintptr_t)b->dn_d, dhi = (uintptr_t)(b->dn_d + b->dn_ne);
    bool reads = false, other = false, covers = false, part = false;
    uintptr_t lo, hi;
    for (size_t k = 0; k < u->n; k++) {
        const si_op *op = &ops[k];
        for (int a = 0; a < SI_OP_MAX_SRC && op->src[a] != NULL; a++) {
            t_range(op->src[a], &lo, &hi);
            if (lo < dhi && dlo < hi) {
                reads = true;
                other |= !mm_unit || op->kind != SI_OP_MATMUL;
            }
        }
        t_range(&op->dst, &lo, &hi);
        if (lo < dhi && dlo < hi) {
            if (lo <= dlo && dhi <= hi)
                covers = true;
            else
                part = true;
        }
    }
    if (part || (reads && (other || covers)))
        return cu_dn_resolve(b, err);
    if (covers)
        b->dn_on = false;
    return SI_OK;
}

static int unit_run(si_backend *b, const si_op *ops, const cu_unit *u, si_err *err)
{
    const int rc = dn_before(b, ops, u, err);
    if (rc != SI_OK)
        return rc;
    switch (u->kind) {
    case CU_UNIT_NORM: return norm_fused_exec(b, ops, u->n, u->quant, err);
    case CU_UNIT_SWIGLU_Q: return swiglu_q_exec(b, ops, err);
    case CU_UNIT_GDN_Q: return cu_gdn_op(b, ops, true, err);
    case CU_UNIT_ATTN_Q: return cu_attn_op(b, ops, true, err);
    case CU_UNIT_MM_GROUP: return cu_mm_group_exec(b, ops, u->n, err);
    case CU_UNIT_MM_NORM: return mm_norm_exec(b, ops, u->quant, err);
    case CU_UNIT_GLU: return glu_exec(b, ops, err);
    default: return cu_exec_one(b, ops, true, err);
    }
}

/* Knob profile_twice's class of a unit (CU_TWICE_OFF: none, never
 * doubled). */
static int twice_class(const si_op *ops, const cu_unit *u)
{
    switch (u->kind) {
    case CU_UNIT_NORM: return CU_TWICE_NORM;
    case CU_UNIT_MM_GROUP: return CU_TWICE_MATMUL;
    case CU_UNIT_GLU: return CU_TWICE_GLU;
    case CU_UNIT_ONE:
        return ops[0].kind == SI_OP_MATMUL ? CU_TWICE_MATMUL : ops[0].kind == SI_OP_MOE ? CU_TWICE_MOE : CU_TWICE_OFF;
    default: return CU_TWICE_OFF;
    }
}

int cu_exec_ops(si_backend *b, const si_op *ops, size_t n_ops, size_t i, size_t *n, si_err *err)
{
    const cu_unit u = unit_at(b, ops, n_ops, i);
    *n = u.n;
    int rc = unit_run(b, ops + i, &u, err);
    if (rc != SI_OK || !b->capturing || b->prof_twice == CU_TWICE_OFF)
        return rc;
    if (b->prof_twice == CU_TWICE_EMPTY) {
        b->n_twice++;
        return launched(si_cu_empty(b->stream), "empty launch (profile_twice)", err);
    }
    if (twice_class(ops + i, &u) == b->prof_twice) {
        b->n_twice++;
        rc = unit_run(b, ops + i, &u, err);
    }
    return rc;
}

static int cu_exec_end(si_backend *b, int rc, si_err *err);

int cu_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    if (n_ops > 0 && (b == NULL || ops == NULL))
        return si_err_set(err, SI_EINVAL, CU_NAME ": exec: NULL argument");
    if (n_ops == 0)
        return SI_OK;
    /* The staging arena is reused once the previous exec's copies left it
     * (already the case after the sync that normally follows an exec). */
    if (b->pin_used > 0) {
        cudaError_t e = cudaEventSynchronize(b->pin_ev);
        if (e != cudaSuccess)
            return si_err_set(err, SI_EDEVICE, CU_NAME ": %s", cudaGetErrorString(e));
        b->pin_used = 0;
    }
    /* Uploads between execs may have changed any input. */
    b->xq_key = NULL;
    b->dn_on = false;
    si_cu_pdl_set(b->pdl);
    int rc = cu_attn_pages_early(b, ops, n_ops, err);
    /* Knob graph: a list seen before runs as one graph launch. */
    if (rc == SI_OK && b->graphs != NULL) {
        const int g = cu_graph_exec(b, ops, n_ops, err);
        if (g != CU_GRAPH_DECLINED)
            return cu_exec_end(b, g, err);
    }
    if (rc == SI_OK)
        rc = cu_up_begin(b, ops, n_ops, err);
    for (size_t i = 0; i < n_ops && rc == SI_OK;) {
        /* (a fused unit's time goes to its last op: the events of the
         * others are recorded back to back before it) */
        const cu_unit u = unit_at(b, ops, n_ops, i);
        for (size_t k = 0; k < u.n; k++)
            cu_prof_before(b, i + k, n_ops, &ops[i + k]);
        rc = unit_run(b, ops + i, &u, err);
        i += u.n;
    }
    if (rc == SI_OK)
        rc = cu_dn_resolve(b, err);   /* (a deferred norm leaves the list whole) */
    cu_up_end(b);
    cu_prof_after(b);
    return cu_exec_end(b, rc, err);
}

/* Marks the end of the exec's copies out of the staging arena. */
static int cu_exec_end(si_backend *b, int rc, si_err *err)
{
    if (b->pin_used > 0) {
        cudaError_t e = cudaEventRecord(b->pin_ev, b->stream);
        if (e != cudaSuccess && rc == SI_OK)
            rc = si_err_set(err, SI_EDEVICE, CU_NAME ": %s", cudaGetErrorString(e));
        if (e != cudaSuccess) {
            cudaStreamSynchronize(b->stream);   /* no event: wait here instead */
            b->pin_used = 0;
        }
    }
    return rc;
}

/* ---- TOPK ------------------------------------------------------------------ */

/* The penalty lists (host arrays) go up through the pinned staging with
 * their offsets rebased to 0; the workspace holds the device copies, the
 * penalised-id bitmap and keys, and the per-slice candidates (cuda_topk.cu). */
static int topk_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_topk_params *p = &op->p.topk;
    const si_tensor *x = op->src[0];
    const int64_t V = x->ne[0], n = si_oc_ne(x, 1);
    if (n == 0)
        return SI_OK;
    if (n > 65535)
        return si_err_set(err, SI_EUNSUPPORTED, CU_NAME ": TOPK: %lld rows in one op (at most 65535)", (long long)n);
    const int k = (int)p->k, slices = si_cu_topk_slices(V, k);
    const bool pen = p->pen_off != NULL;
    const int32_t base = pen ? p->pen_off[0] : 0, np = pen ? p->pen_off[n] - base : 0;
    size_t bytes = rnd((size_t)(n * slices * k) * sizeof(uint64_t));
    if (pen)
        bytes += rnd((size_t)(n + 1) * sizeof(int32_t)) + 2 * rnd((size_t)np * sizeof(int32_t) + 1) +
                 rnd((size_t)np * sizeof(uint64_t) + 1) + rnd((size_t)(n * ((V + 31) / 32)) * sizeof(uint32_t));
    void *ws = cu_ws_reserve(b, bytes, err);
    if (ws == NULL)
        return SI_ENOMEM;
    carve cv = { ws, 0 };
    cu_topk t = {
        .x = (const float *)dptr(x), .x_stride = (int64_t)(row_stride(x) / 4), .V = V, .n = n, .k = k,
        .slices = slices, .dst = (float *)dptr(&op->dst), .dst_stride = (int64_t)(row_stride(&op->dst) / 4),
        .repeat = p->repeat_penalty, .freq = p->frequency_penalty, .presence = p->presence_penalty,
        .cand = take(&cv, (size_t)(n * slices * k) * sizeof(uint64_t)),
    };
    int rc = SI_OK;
    if (pen) {
        int32_t *off = malloc((size_t)(n + 1) * sizeof *off);
        if (off == NULL)
            return si_err_set(err, SI_ENOMEM, "out of host memory");
        for (int64_t r = 0; r <= n; r++)
            off[r] = p->pen_off[r] - base;
        int32_t *d_off = take(&cv, (size_t)(n + 1) * sizeof(int32_t));
        int32_t *d_id = take(&cv, (size_t)np * sizeof(int32_t) + 1);
        int32_t *d_cnt = take(&cv, (size_t)np * sizeof(int32_t) + 1);
        t.pen_key = take(&cv, (size_t)np * sizeof(uint64_t) + 1);
        t.bitmap = take(&cv, (size_t)(n * ((V + 31) / 32)) * sizeof(uint32_t));
        rc = cu_h2d(b, d_off, off, (size_t)(n + 1) * sizeof *off, err);
        free(off);
        if (rc == SI_OK && np > 0)
            rc = cu_h2d(b, d_id, p->pen_id + base, (size_t)np * sizeof(int32_t), err);
        if (rc == SI_OK && np > 0)
            rc = cu_h2d(b, d_cnt, p->pen_count + base, (size_t)np * sizeof(int32_t), err);
        if (rc != SI_OK)
            return rc;
        t.pen_off = d_off;
        t.pen_id = d_id;
        t.pen_cnt = d_cnt;
    }
    return launched(si_cu_topk(&t, b->stream), "TOPK", err);
}

/* ---- HOST_IDS --------------------------------------------------------------- */

static int host_ids_exec(si_backend *b, const si_op *op, si_err *err)
{
    if (b->post_ring == NULL || b->prof != NULL)
        return si_err_set(err, SI_EUNSUPPORTED, CU_NAME ": HOST_IDS: %s",
                          b->post_ring == NULL ? "no mapped memory for the posts" : "not with profile = true");
    const si_tensor *d = &op->dst;
    int rc = launched(si_cu_host_ids(b->post_ring_dev, b->post_ctr, (int32_t *)dptr(d), (int64_t)(d->nb[0] / 4),
                                     (int)d->ne[0], b->stream), "HOST_IDS", err);
    if (rc == SI_OK && !b->capturing)
        b->post_queued++;   /* (a captured one counts when its graph is launched) */
    return rc;
}
