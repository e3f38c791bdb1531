/* backends/cuda_sm120/cuda_ops.c — supports() and exec() of the CUDA
 * backend: the shape/type checks (backends/common, shared with the cpu
 * backend, so both accept exactly the same ops, minus weight types the
 * kernels do not decode and kernel size limits), host-side validation that needs the host arrays (positions,
 * sequence runs), workspace carving, and the launches.  exec never waits
 * for the device: GET_ROWS ids are checked by the kernel (reported at
 * sync), host arrays go up through pinned staging, and the int8 paths
 * (dp4a, mma) quantise each input once per exec (cached until something writes to
 * it).  supports() never touches the device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_internal.h"

#define WS_ALIGN 256
#define MAX_HEAD_DIM 4096   /* shared-memory budget of the ATTN/GDN kernels */

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

static uint8_t *dptr(const si_tensor *t) { return (uint8_t *)t->buf->dev + t->offset; }

static uint64_t row_stride(const si_tensor *t) { return si_oc_ne(t, 1) > 1 ? t->nb[1] : 0; }

static int launched(int e, const char *op, si_err *err)
{
    if (e == 0)
        return SI_OK;
    return si_err_set(err, SI_EDEVICE, CU_NAME ": %s: kernel launch failed: %s", op, si_cu_errstr(e));
}

/* Bump allocator over the workspace. */
typedef struct carve {
    uint8_t *p;
    size_t   used;
} carve;

static size_t rnd(size_t n) { return (n + WS_ALIGN - 1) & ~(size_t)(WS_ALIGN - 1); }

static void *take(carve *c, size_t bytes)
{
    void *r = c->p + c->used;
    c->used += rnd(bytes);
    return r;
}

static int h2d(si_backend *b, void *dst, const void *src, size_t n, si_err *err)
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
static size_t xq_bytes(int64_t in, int64_t ncx)
{
    return rnd((size_t)(in * ncx)) + 2 * rnd((size_t)(in / 32 * ncx) * sizeof(float));
}

/* Where slot `slot` of the scratch (reserved for xq_bytes(in, ncx)) keeps
 * values, scales and sums. */
static void xq_parts(si_backend *b, int64_t in, int64_t ncx, int slot, int8_t **q, float **d, float **s)
{
    uint8_t *base = b->xq + (size_t)(slot ^ b->xq_swap) * b->xq_cap;
    *q = (int8_t *)base;
    *d = (float *)(base + rnd((size_t)(in * ncx)));
    *s = (float *)(base + rnd((size_t)(in * ncx)) + rnd((size_t)(in / 32 * ncx) * sizeof(float)));
}

/* Slot 0 now holds the int8 copy of x (enqueued), scales per blk (32:
 * si_cu_quantize_x's, with block sums; 128: si_cu_w8_quantize_x's, for
 * mma_weights = i8): later products of x find it. */
static void xq_hold(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int blk)
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
static bool xq_hit(const si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int blk, int64_t *j)
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
static int xq_get(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int slot, int blk,
                  int8_t **q, float **d, float **s, si_err *err)
{
    const size_t bytes = xq_bytes(in, ncx);
    int rc = cu_xq_reserve(b, bytes, err);
    if (rc != SI_OK)
        return rc;
    int64_t j;
    if (slot == 0 && xq_hit(b, x, x_stride, in, ncx, blk, &j)) {
        const int64_t nb = in / 32;
        xq_parts(b, in, b->xq_ncx, 0, q, d, s);   /* (the holder's layout) */
        *q += j * in;
        *d += j * nb;
        *s += j * nb;
        return SI_OK;
    }
    xq_parts(b, in, ncx, slot, q, d, s);
    if (slot == 0)
        b->xq_key = NULL;
    rc = launched(blk == 128 ? si_cu_w8_quantize_x(x, x_stride, in, ncx, *q, *d, b->stream)
                             : si_cu_quantize_x(x, x_stride, in, ncx, *q, *d, *s, b->stream),
                  "quantise activations", err);
    if (rc == SI_OK && slot == 0)
        xq_hold(b, x, x_stride, in, ncx, blk);
    return rc;
}

/* mma_weights = i8 (cuda_w8.cu): the weight matrix's int8 copy from the
 * cache (w8_cache), else requantised into the w8 scratch (rewritten by
 * the next product, after this one on the stream); the activations per
 * w8_block through xq_get, so products of one input share them. */
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
        rc = xq_get(b, m->x, m->x_stride, m->in, ncx, slot, g, &q, &d, &s, err);
    if (rc == SI_OK)
        rc = launched(si_cu_matmul_w8(m, g, wq, ws, q, d, b->stream), "MATMUL (int8 mma, i8 weights)", err);
    return rc;
}

/* The cu_mm fields mm_run sets from the backend's knobs. */
static void mm_knobs(const si_backend *b, cu_mm *m)
{
    m->f32_tiled = b->f32_tiled;
    m->gemv_quad = b->gemv_quad;
    m->gemv_qe = b->gemv_qe;
    m->gemv_qn = b->gemv_qn;
    m->gemv_mma = b->gemv_mma;
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
 * 9..32 sequences) runs on cuda_gemvm.cu's tensor-core GEMV, one launch
 * for a group (cu_mm.more), instead of the prefill GEMM (prefill_mm = mma;
 * with gemv such products keep the f32 path, the fidelity reference). */
static bool mm_wide(const si_backend *b, const cu_mm *mm)
{
    if (!b->gemv_mma_wide || !b->mm_dp4a || !b->mm_prefill_mma || mm->expert != NULL ||
        mm->ncols <= SI_CU_MMQ_MAX_COLS)
        return false;
    cu_mm m = *mm;
    mm_knobs(b, &m);
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
static int mm_run(si_backend *b, const cu_mm *mm, int slot, si_err *err)
{
    cu_mm m = *mm;
    mm_knobs(b, &m);
    if (m.rows <= 0 || m.ncols <= 0)
        return launched(si_cu_matmul(&m, b->stream), "MATMUL", err);
    /* knobs gemv_q6r / gemv_q8r: a one-column product's regrouped copies */
    if (m.ncols == 1 && m.expert == NULL && cu_rg_on(b, m.type))
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
        int rc = mm_run(b, &one, slot, err);
        for (int k = 0; k < m.n_more && rc == SI_OK; k++) {
            one.w = m.more[k].w;
            one.y = m.more[k].y;
            one.rows = m.more[k].rows;
            one.row_bytes = m.more[k].row_bytes;
            one.y_stride = m.more[k].y_stride;
            rc = mm_run(b, &one, slot, err);
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
        int rc = mm_run(b, &m, slot, err);
        return rc == SI_OK ? mm_run(b, &hi, slot, err) : rc;
    }
    if (!wide && !mma && !dp4a)
        return launched(si_cu_matmul(&m, b->stream), "MATMUL", err);
    const int64_t ncx = (m.ncols - 1) / m.x_div + 1;
    if (mma && b->mm_w8 && si_cu_w8_ok(&m))
        return mm_run_w8(b, &m, ncx, slot, err);
    int8_t *q;
    float *d, *s;
    int rc = xq_get(b, m.x, m.x_stride, m.in, ncx, slot, 32, &q, &d, &s, err);
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
static void xq_after(si_backend *b, const si_op *op);

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
    int rc = mm_run(b, &mm, 0, err);
    for (size_t k = 0; k < n && rc == SI_OK; k++)
        xq_after(b, &ops[k]);
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
static cu_mm mm_of(const si_tensor *w, uint64_t first_row, const float *x, int64_t x_stride, int64_t x_div,
                   float *y, int64_t y_stride, int64_t ncols, int64_t rows, const int32_t *expert);

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
static bool next_quantises(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    const si_op *op = &ops[i];
    return i + 1 < n_ops && op->dst.ne[0] % 32 == 0 && si_oc_check(&b->oc, op, NULL) == SI_OK &&
           !(use_kernel && cu_kernel_for(b, op) != NULL) && quantises(b, &ops[i + 1], &op->dst, use_kernel);
}

static bool swiglu_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    return b->fuse_norm && b->mm_dp4a && ops[i].kind == SI_OP_SWIGLU && next_quantises(b, ops, n_ops, i, use_kernel);
}

/* d = silu(g) * u over nrows rows of ne0, and its int8 copy (per 32) into
 * slot 0, whose held input is dropped first; the caller holds d there
 * (xq_hold) once it knows d's address and stride. */
static int swiglu_q_slot0(si_backend *b, const cu_rows *g, const cu_rows *u, const cu_rows *d, int64_t ne0,
                          int64_t nrows, const char *what, si_err *err)
{
    int rc = cu_xq_reserve(b, xq_bytes(ne0, nrows), err);
    if (rc != SI_OK)
        return rc;
    int8_t *q;
    float *qd, *qs;
    xq_parts(b, ne0, nrows, 0, &q, &qd, &qs);
    b->xq_key = NULL;
    return launched(si_cu_swiglu_q(g, u, d, ne0, nrows, q, qd, qs, b->stream), what, err);
}

static int swiglu_q_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_tensor *y = &op->dst;
    const int64_t ne0 = y->ne[0], nrows = si_oc_ne(y, 1) * si_oc_ne(y, 2) * si_oc_ne(y, 3);
    cu_rows g = rows_of(op->src[0]), u = rows_of(op->src[1]), d = rows_of(y);
    int rc = swiglu_q_slot0(b, &g, &u, &d, ne0, nrows, "SWIGLU", err);
    if (rc != SI_OK)
        return rc;
    xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), ne0, nrows, 32);
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

/* The knobs gemv_glu needs (its kernel is gemv_quad's, on v1's int8 path). */
static bool glu_on(const si_backend *b) { return b->gemv_glu && b->mm_dp4a && !b->gemv_v2 && b->gemv_quad; }

/* The launch of ops[0..3) (SWIGLU at ops[2]): the gate product (the
 * SWIGLU's first operand) with the up rows as more[0]. */
static cu_mm glu_mm(si_backend *b, const si_op *ops)
{
    const bool ab = same_tensor(ops[2].src[0], &ops[0].dst);
    cu_mm mm = matmul_mm(ab ? &ops[0] : &ops[1]);
    const cu_mm o = matmul_mm(ab ? &ops[1] : &ops[0]);
    mm.more[0] = (cu_mm_part){ o.w, o.y, o.rows, o.row_bytes, o.y_stride, NULL };
    mm.n_more = 1;
    mm_knobs(b, &mm);
    return mm;
}

/* ops[i..i+3) as one gemv_glu unit. */
static bool glu_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    if (!glu_on(b) || i + 3 >= n_ops)
        return false;
    const si_op *sw = &ops[i + 2];
    if (ops[i].kind != SI_OP_MATMUL || sw->kind != SI_OP_SWIGLU || si_oc_check(&b->oc, &ops[i], NULL) != SI_OK ||
        (use_kernel && cu_kernel_for(b, &ops[i]) != NULL) || !mm_joins(b, ops, i, i + 1, use_kernel))
        return false;
    /* SWIGLU(one product's output, the other's) */
    const bool ab = same_tensor(sw->src[0], &ops[i].dst) && same_tensor(sw->src[1], &ops[i + 1].dst);
    const bool ba = same_tensor(sw->src[0], &ops[i + 1].dst) && same_tensor(sw->src[1], &ops[i].dst);
    if (!(ab || ba) || !next_quantises(b, ops, n_ops, i + 2, use_kernel))
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
static int glu_launch(si_backend *b, const cu_mm *mm, cu_glu *gl, int64_t ncx, int64_t R, const char *what,
                      si_err *err)
{
    const int64_t F = mm->rows, H = mm->in;
    int rc = cu_xq_reserve(b, xq_bytes(F, R) > xq_bytes(H, ncx) ? xq_bytes(F, R) : xq_bytes(H, ncx), err);
    int8_t *q;
    float *qd, *qs;
    if (rc == SI_OK)
        rc = xq_get(b, mm->x, mm->x_stride, H, ncx, 0, 32, &q, &qd, &qs, err);
    if (rc != SI_OK)
        return rc;
    xq_parts(b, F, R, 1, &gl->q, &gl->qd, &gl->qs);
    rc = launched(si_cu_gemvq_glu(mm, q, qd, qs, gl, b->stream), what, err);
    if (rc != SI_OK)
        return rc;
    b->xq_swap ^= 1;   /* slot 1's copy becomes slot 0's */
    xq_hold(b, gl->d, gl->d_stride, F, R, 32);
    return SI_OK;
}

static int glu_exec(si_backend *b, const si_op *ops, si_err *err)
{
    const cu_mm mm = glu_mm(b, ops);
    cu_glu gl = { .d = (float *)dptr(&ops[2].dst), .d_stride = (int64_t)(row_stride(&ops[2].dst) / 4) };
    return glu_launch(b, &mm, &gl, 1, 1, "MATMUL+SWIGLU (gemv_glu)", err);
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
        int rc = cu_xq_reserve(b, xq_bytes(ne0, nrows), err);
        if (rc != SI_OK)
            return rc;
        xq_parts(b, ne0, nrows, 0, &f.q, &f.qd, &f.qs);
    }
    int rc = launched(si_cu_norm_fused(&a, (const float *)dptr(norm->src[1]), &d, ne0, nrows, norm->p.norm.eps, &f,
                                       b->norm_v2, b->stream),
                      n == 2 ? "ADD+RMSNORM" : "RMSNORM", err);
    if (rc != SI_OK)
        return rc;
    for (size_t k = 0; k < n; k++)
        xq_after(b, &ops[k]);
    if (quant)
        xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), ne0, nrows, 32);
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
    mm_knobs(b, &m);
    const si_tensor *res = same_tensor(add->src[0], &mo->dst) ? add->src[1] : add->src[0];
    m.norm = (cu_norm_tail){ .ctr = b->norm_ctr, .w = (const float *)dptr(norm->src[1]), .d = rows_of(&norm->dst),
                             .eps = norm->p.norm.eps, .f = { .b = rows_of(res), .r = rows_of(&add->dst) } };
    return m;
}

/* Whether ops[i..i+3) run as mm_norm_mm's product; *quant: the op after
 * quantises the norm's output. */
static bool mm_norm_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel, bool *quant)
{
    if (b->norm_tail == 0 || b->norm_ctr == NULL || !b->norm_v2 || b->gemv_v2 || !b->gemv_quad || !b->mm_dp4a ||
        i + 2 >= n_ops)
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
    if (m.ncols > (b->norm_tail == 2 ? 1 : SI_CU_MMQ_MAX_COLS) || !si_cu_mmq_ok(&m))
        return false;
    return si_cu_gemvq_norm_ok(&m);   /* (the int8 copy's place is aligned: xq_parts) */
}

static int mm_norm_exec(si_backend *b, const si_op *ops, bool quant, si_err *err)
{
    cu_mm m = mm_norm_mm(b, ops);
    const si_tensor *y = &ops[2].dst;
    const int64_t ne0 = y->ne[0], nrows = m.ncols;
    /* (the norm's int8 copy goes to slot 0, where x's may be: room for
     * both first, so the slot does not move under the pointers) */
    int rc = quant ? cu_xq_reserve(b, xq_bytes(ne0, nrows), err) : SI_OK;
    int8_t *q;
    float *d, *s;
    if (rc == SI_OK)
        rc = xq_get(b, m.x, m.x_stride, m.in, m.ncols, 0, 32, &q, &d, &s, err);
    if (rc != SI_OK)
        return rc;
    if (quant)
        xq_parts(b, ne0, nrows, 0, &m.norm.f.q, &m.norm.f.qd, &m.norm.f.qs);
    b->xq_key = NULL;
    rc = launched(si_cu_matmul_q8_v1(&m, q, d, s, b->stream), "MATMUL+ADD+RMSNORM", err);
    if (rc != SI_OK)
        return rc;
    for (size_t k = 0; k < 3; k++)
        xq_after(b, &ops[k]);
    if (quant)
        xq_hold(b, (const float *)dptr(y), (int64_t)(row_stride(y) / 4), ne0, nrows, 32);
    return SI_OK;
}

static int matmul_exec(si_backend *b, const si_op *op, si_err *err)
{
    cu_mm mm = matmul_mm(op);
    return mm_run(b, &mm, 0, err);
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

/* ---- ATTN ----------------------------------------------------------------- */

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
static int attn_pages_early(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
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

/* The front half of an ATTN op shared by attn_exec and attn_prepare (a
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
     * normally attn_pages_early took them already). */
    if (rc == SI_OK && kv->i8)
        rc = cu_kv_pages_reserve(b, kv, len, added, p->kv_layer, err);
    if (rc != SI_OK)
        return rc;
    size_t q_bytes = q_out != NULL ? rnd((size_t)n * p->n_head * p->head_dim * sizeof(float)) : 0;
    size_t bytes = 2 * rnd((size_t)n * sizeof(int32_t)) + rnd((size_t)n * (p->n_rot + 1) * sizeof(float)) + q_bytes;
    void *ws = cu_ws_reserve(b, bytes, err);
    if (ws == NULL)
        return SI_ENOMEM;
    carve cv = { ws, 0 };
    int32_t *d_pos = take(&cv, (size_t)n * sizeof(int32_t));
    int32_t *d_seq = take(&cv, (size_t)n * sizeof(int32_t));
    float *rope = take(&cv, (size_t)n * (p->n_rot + 1) * sizeof(float));
    if (q_out != NULL)
        *q_out = take(&cv, q_bytes);
    if ((rc = h2d(b, d_pos, p->pos, (size_t)n * sizeof(int32_t), err)) != SI_OK ||
        (rc = h2d(b, d_seq, p->seq, (size_t)n * sizeof(int32_t), err)) != SI_OK)
        return rc;
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

/* quant: the op after quantises dst (attn_q_ok); where the core ends with
 * combine_kernel that kernel makes the int8 copy into slot 0, which then
 * holds dst (xq_after first, as cu_exec_one would). */
static int attn_run(si_backend *b, const si_op *op, bool quant, si_err *err)
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
    if (q && (rc = cu_xq_reserve(b, xq_bytes(W, n), err)) == SI_OK) {
        xq_parts(b, W, n, 0, &a.q8, &a.q8d, &a.q8s);
        b->xq_key = NULL;
    }
    if (rc == SI_OK)
        rc = launched(si_cu_attn(&a, b->stream), "ATTN", err);
    if (rc == SI_OK)
        attn_commit(op, added);
    if (rc == SI_OK && quant) {
        xq_after(b, op);
        if (q)
            xq_hold(b, a.dst, (int64_t)(row_stride(&op->dst) / 4), W, n, 32);
    }
    free(added);
    return rc;
}

static int attn_exec(si_backend *b, const si_op *op, si_err *err)
{
    return attn_run(b, op, false, err);
}

/* cuda_ext's attn_prepare (since ext 1.1): the front half of attn_exec for a
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
        uint64_t off = p->state_offset + (uint64_t)(s < 0 ? 0 : s) * p->state_stride;
        if (s < 0 || (p->state_stride > 0 && (uint64_t)s > (UINT64_MAX - p->state_offset) / p->state_stride) ||
            off > p->state->nbytes || need > p->state->nbytes - off)
            return si_err_set(err, SI_ERANGE, CU_NAME ": GDN: token %lld: slot %d's state lies outside the %llu-byte state buffer",
                              (long long)t, s, (unsigned long long)p->state->nbytes);
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

/* quant: the op after quantises dst (gdn_q_ok); where the op runs on
 * norm_kernel (decode) that kernel writes the int8 copy into slot 0,
 * which then holds dst (xq_after first, as cu_exec_one would). */
static int gdn_run(si_backend *b, const si_op *op, bool quant, si_err *err)
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
    const int chunk_min = b->gdn_chunked ? SI_CU_GDN_CHUNK_MIN : 0;
    size_t tp_bytes = 0;
    if (rc == SI_OK) {
        /* (the chunked runs' per-chunk matrices and decay factors: 33 KB a
         * chunk and v-head) */
        n_chunks = si_cu_gdn_plan_chunks(runs, n_runs, chunk_min);
        tp_bytes = si_cu_gdn_tp_bytes(n_chunks, (int)p->n_v_head);
        ws = cu_ws_reserve(b, rnd((size_t)n_runs * sizeof *runs) + rnd((size_t)n * (size_t)conv_dim * sizeof(float)) +
                                  rnd(tp_bytes), err);
        if (ws == NULL)
            rc = SI_ENOMEM;
    }
    if (rc != SI_OK) {
        free(runs);
        return rc;
    }
    carve cv = { ws, 0 };
    cu_gdn_run *d_runs = take(&cv, (size_t)n_runs * sizeof *runs);
    float *y = take(&cv, (size_t)n * (size_t)conv_dim * sizeof(float));
    float *tp = n_chunks > 0 ? take(&cv, tp_bytes) : NULL;
    rc = h2d(b, d_runs, runs, (size_t)n_runs * sizeof *runs, err);
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
        .state = (uint8_t *)p->state->dev, .runs = d_runs, .n_runs = n_runs, .n = n, .conv_dim = conv_dim,
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
        if ((rc = cu_xq_reserve(b, xq_bytes(W, n), err)) != SI_OK)
            return rc;
        xq_parts(b, W, n, 0, &g.q, &g.qd, &g.qs);
        b->xq_key = NULL;
    }
    rc = launched(si_cu_gdn(&g, b->stream), "GDN", err);
    if (rc == SI_OK && quant) {
        xq_after(b, op);
        if (q)
            xq_hold(b, g.dst, (int64_t)(row_stride(&op->dst) / 4), W, n, 32);
    }
    return rc;
}

static int gdn_exec(si_backend *b, const si_op *op, si_err *err)
{
    return gdn_run(b, op, false, err);
}

/* A GDN whose output the next op quantises (the out projection): its
 * norm kernel also makes the int8 copy where it runs (knob fuse_norm).
 * With gdn_dec = fused always: there the fused decode kernel makes the
 * copy of its own 32 rows a block in parallel, so the launch quant_x would
 * cost is saved at no serial cost (unlike norm_kernel, whose warp does a
 * head's blocks in turn: why fuse_gdn_q alone is off by default). */
static bool gdn_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    return b->fuse_norm && (b->fuse_gdn_q || b->gdn_fused) && b->mm_dp4a && ops[i].kind == SI_OP_GDN &&
           next_quantises(b, ops, n_ops, i, use_kernel);
}

/* Knob fuse_attn_q: an ATTN whose output the next op quantises (the out
 * projection): combine_kernel makes the int8 copy of its head's 8 blocks
 * of 32, a warp each (quant_x's bits), where the core splits the context
 * (attn_run); one launch fewer an attention layer. */
static bool attn_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel)
{
    return b->fuse_attn_q && b->fuse_norm && b->mm_dp4a && ops[i].kind == SI_OP_ATTN &&
           next_quantises(b, ops, n_ops, i, use_kernel);
}

/* ---- MOE ------------------------------------------------------------------ */

static cu_mm mm_of(const si_tensor *w, uint64_t first_row, const float *x, int64_t x_stride, int64_t x_div,
                   float *y, int64_t y_stride, int64_t ncols, int64_t rows, const int32_t *expert)
{
    cu_mm mm = {
        .w = dptr(w) + first_row * w->nb[1], .type = w->type, .in = w->ne[0], .rows = rows,
        .row_bytes = w->nb[1], .expert_bytes = expert ? w->nb[2] : 0, .expert = expert,
        .x = x, .x_stride = x_stride, .x_div = x_div, .y = y, .y_stride = y_stride, .ncols = ncols,
    };
    return mm;
}

/* Gate and up projections of the same input into gu [ncols][2*rows] (gate
 * in the first `rows` of each column, up in the rest): one launch when the
 * two matrices can be stacked (same type and strides: cu_mm.w2 on the v2
 * GEMV, cu_mm.more on v1), else two. */
static int gate_up_run(si_backend *b, const si_tensor *wg, uint64_t g_row, const si_tensor *wu, uint64_t u_row,
                       const float *x, int64_t x_stride, int64_t x_div, float *gu, int64_t ncols, int64_t rows,
                       const int32_t *expert, bool early, si_err *err)
{
    cu_mm mm = mm_of(wg, g_row, x, x_stride, x_div, gu, 2 * rows, ncols, rows, expert);
    cu_mm up = mm_of(wu, u_row, x, x_stride, x_div, gu + rows, 2 * rows, ncols, rows, expert);
    mm.expert_early = up.expert_early = early;
    if (up.w == mm.w + (uint64_t)rows * mm.row_bytes && up.type == mm.type && up.row_bytes == mm.row_bytes &&
        up.expert_bytes == mm.expert_bytes) {
        mm.rows = 2 * rows;   /* fused gate_up: already one matrix */
        return mm_run(b, &mm, 0, err);
    }
    if (up.type == mm.type && up.row_bytes == mm.row_bytes && up.expert_bytes == mm.expert_bytes) {
        if (!b->gemv_v2 && b->gemv_fuse) {   /* v1: up as a second product of the launch */
            mm.more[0] = (cu_mm_part){ up.w, up.y, up.rows, up.row_bytes, up.y_stride, NULL };
            mm.n_more = 1;
            return mm_run(b, &mm, 0, err);
        }
        mm.w2 = up.w;
        mm.rows_split = rows;
        mm.rows = 2 * rows;
        return mm_run(b, &mm, 0, err);
    }
    int rc = mm_run(b, &mm, 0, err);
    return rc == SI_OK ? mm_run(b, &up, 0, err) : rc;
}

/* gu [rows][2F] (gate, up): the gate half <- silu(gate) * up and its int8
 * copy into slot 0, held as the quantised input gu (stride 2F, F wide):
 * swiglu_q_kernel, the same bits as the SwiGLU and quantiser kernels. */
static int moe_swiglu_q(si_backend *b, float *gu, int64_t F, int64_t rows, si_err *err)
{
    const uint64_t st = (uint64_t)(2 * F) * sizeof(float);
    const cu_rows g = { (uint8_t *)gu, rows, 1, st, 0, 0 }, u = { (uint8_t *)(gu + F), rows, 1, st, 0, 0 };
    const int rc = swiglu_q_slot0(b, &g, &u, &g, F, rows, "MOE", err);
    if (rc == SI_OK)
        xq_hold(b, gu, 2 * F, F, rows, 32);
    return rc;
}

/* Knob gemv_glu on the MOE's decode (the in-line path): the routed
 * gate/up (gu [NK][2F]) with the SwiGLU of every column into its gate
 * half and the int8 copy, and the shared expert's rows (gu's rows NK..,
 * made by the launch before: expert_early) likewise, in one launch
 * (si_cu_gemvq_glu), where gate_up_run then moe_swiglu_q ran two: the
 * same bits.  The copy is made in slot 1 (the launch reads h's from slot
 * 0), then the halves trade places (glu_launch) and slot 0 holds it as
 * moe_swiglu_q leaves it.  False: the caller runs the two launches.
 * (Called where fuse_q holds: fuse_norm and the int8 path.) */
static bool moe_glu_plan(si_backend *b, const si_op *op, const si_oc_moe_dims *d, const float *h, int64_t hs,
                         bool early, float *gu, const int32_t *sel, cu_mm *mm, cu_glu *gl)
{
    const si_tensor *const *W = op->src;
    const int64_t n = d->n, K = d->K, F = d->F, NK = n * K;
    if (!glu_on(b) || F % 32 != 0 || (d->shared && (d->Fs != F || !early)))
        return false;
    *mm = mm_of(W[2], 0, h, hs, K, gu, 2 * F, NK, F, sel);
    const cu_mm up = mm_of(d->fused ? W[2] : W[3], d->fused ? (uint64_t)F : 0, h, hs, K, gu + F, 2 * F, NK, F, sel);
    if (up.type != mm->type || up.expert_bytes != mm->expert_bytes)
        return false;
    mm->more[0] = (cu_mm_part){ up.w, up.y, up.rows, up.row_bytes, up.y_stride, NULL };
    mm->n_more = 1;
    mm->expert_early = early;
    mm_knobs(b, mm);
    *gl = (cu_glu){ .d = gu, .d_stride = 2 * F };
    if (d->shared)
        *gl = (cu_glu){ .d = gu, .d_stride = 2 * F, .sh = gu + NK * 2 * F, .n_sh = n, .sh_stride = 2 * F };
    return si_cu_gemvq_glu_ok(mm, gl);
}

/* A knob of false | true | batch (0, 1, 2: moe_overlap, route_fused) for
 * a decode of n tokens: batch is on at 2 tokens or more. */
static bool batch_knob_on(int knob, int64_t n) { return knob == 1 || (knob == 2 && n >= 2); }

/* The router's product mm (logits mm->y [ncols][E], E = mm->rows; with
 * mm->more[] the shared gate) and the top-K into sel/wts: with knob
 * route_fused one launch (rr_kernel, cuda_matmul.cu) where it takes the
 * product (route_fused = batch: 2..8 tokens only), the same bits as the
 * two launches otherwise.  It takes
 * float-stored weights of <= 8 columns, which mm_run gives the f32 kernel
 * (no int8 path reads them, and f32_gemm = tiled starts at 64 columns).
 * Tried and not kept: at one token, no route launch at all, the routed
 * gate/up and down each running route_token on the logits before their
 * programmatic-launch wait (the shared gate/up's launch between them and
 * the router's); same bits, but H200 35b-a3b ctx 4096 bs 1 fell from
 * 355 to 336 tok/s (graph 2,576 -> 2,758 us a step): the down's blocks
 * that start only as the gate/up's leave route after them, in the chain. */
static int moe_router(si_backend *b, const cu_mm *mm, int K, int32_t *sel, float *wts, si_err *err)
{
    cu_mm m = *mm;
    m.prefetch = b->gemv_prefetch;   /* (as mm_run sets it) */
    const bool fused = batch_knob_on(b->route_fused, mm->ncols);
    if (fused && b->route_ctr != NULL && si_cu_router_route_ok(&m, K))
        return launched(si_cu_router_route(&m, K, sel, wts, b->route_ctr, b->stream), "MOE (router)", err);
    const int rc = mm_run(b, mm, 0, err);
    if (rc != SI_OK)
        return rc;
    return launched(si_cu_moe_route(mm->y, mm->ncols, (int)mm->rows, K, sel, wts, b->stream), "MOE", err);
}

/* ---- knob moe_dec_fuse ------------------------------------------------------
 * Decode of up to 8 tokens in 5 launches a layer instead of 7: the router
 * (rr_kernel), the shared expert's gate/up, the routed gate/up whose
 * blocks also make the SwiGLU of every row (routed and shared) and its
 * int8 copy (swiglu_q_kernel's work), the shared down, the routed down
 * whose blocks also make the combine (combine_kernel's).  With knob
 * moe_dec_fuse_gu (default true; a Q8_0 shared expert on gemv_staged's
 * kernel) the shared gate/up runs in the routed gate/up's launch
 * (gqe_gs_kernel): 4 launches.  Each tail is
 * done by the block that finishes a group of rows last (cuda_gemvq.cu,
 * gqe_tail_kernel), so the launch they replace, its ramp and its DRAM
 * round trip are gone, and the bits are the unfused path's: the same
 * products (gemv_quad_experts' kernel, the shared down on mm_run's dp4a
 * kernel), the same arithmetic in the tails.
 * Two changes of order against the unfused path, both safe:
 *  - the shared expert's gate/up always runs first, so the routed
 *    gate/up (the later launch) finds the shared rows complete after its
 *    programmatic-launch wait and does their SwiGLU too;
 *  - the shared down runs before the routed down, so the routed down's
 *    combine finds the shared rows complete after its wait.
 * The SwiGLU's int8 copy goes to this op's workspace, not to slot 0 of
 * the activations' scratch: slot 0 holds h's copy, which blocks of the
 * routed gate/up that have not started yet still read while the first
 * groups' tails run.  The downs read it from there (mm_run_q).
 * Counters (b->moe_ctr): CU_MOE_CTR words for the gate/up's groups, as
 * many for the down's, zeroed once at open.  A launch touches its site's
 * words only after its programmatic-launch wait, when every launch before
 * it on the stream has completed (each waited for the one before), the
 * previous layer's launch of the same site included, which left them at
 * 0; the next launch's part before its wait (weights, and the picks with
 * expert_early) touches none.  So one array a site serves every layer and
 * a graph replays as captured. */
typedef struct moe_fz {
    cu_mm       gu, dn, sd;    /* routed gate/up, routed down, shared down */
    cu_mm       sgu;           /* one_gu: the shared gate/up in gu's launch */
    bool        one_gu;
    cu_moe_tail t_gu, t_dn;
    int8_t     *q;             /* the SwiGLU's int8 copy: [NK + n][F]      */
    float      *qd, *qs;
} moe_fz;

/* mm_run's dp4a GEMV on an int8 copy of x the caller made (q, d, s): a
 * plain product of at most SI_CU_MMQ_MAX_COLS columns (no tensor-core
 * GEMM then, no stacked or extra matrices), mm's knobs set (mm_knobs). */
static bool mm_q_ok(const si_backend *b, const cu_mm *mm)
{
    return b->mm_dp4a && mm->n_more == 0 && mm->w2 == NULL && mm->ncols <= SI_CU_MMQ_MAX_COLS && mm->rows > 0 &&
           si_cu_mmq_ok(mm);
}

static int mm_run_q(si_backend *b, const cu_mm *mm, const int8_t *q, const float *d, const float *s, si_err *err)
{
    if (!b->gemv_v2)
        return launched(si_cu_matmul_q8_v1(mm, q, d, s, b->stream), "MOE (dp4a v1)", err);
    return launched(si_cu_matmul_q8(mm, q, d, s, b->stream), "MOE (dp4a)", err);
}

/* Whether this MOE runs fused, and its products and tails (fz).  Where
 * anything would run on another kernel than gemv_quad_experts' (or the
 * shared down off the dp4a GEMV), the unfused path runs instead. */
static bool moe_fuse_plan(si_backend *b, const si_op *op, const si_oc_moe_dims *d, float *gu, float *y,
                          int32_t *sel, const float *wts, float *ys, const float *gamma, void *qbuf, moe_fz *fz)
{
    const int64_t n = d->n, H = d->H, K = d->K, F = d->F, NK = n * K, nb = F / 32;
    if (!b->moe_dec_fuse || b->moe_ctr == NULL || qbuf == NULL || n < 1 || n > SI_CU_MMQ_MAX_COLS || K > 8 ||
        F % 32 != 0 || !b->fuse_norm || !b->mm_dp4a || b->gemv_v2 || !b->gemv_quad || (d->shared && d->Fs != F))
        return false;
    /* (the shared down reads rows NK.. of the copy: 16-byte aligned scales, as xq_hit asks) */
    if ((NK * nb) % 4 != 0)
        return false;
    const si_tensor *const *W = op->src;
    const float *h = (const float *)dptr(W[0]);
    const int64_t hs = (int64_t)(row_stride(W[0]) / 4);
    const int64_t nq = NK + (d->shared ? n : 0);   /* rows of the copy (xq_parts' layout) */
    fz->q = (int8_t *)qbuf;
    fz->qd = (float *)((uint8_t *)qbuf + rnd((size_t)(F * nq)));
    fz->qs = (float *)((uint8_t *)fz->qd + rnd((size_t)(nb * nq) * sizeof(float)));
    /* the routed gate/up: one matrix of 2F rows an expert (gate_up_run's
     * first case), else the unfused path */
    fz->gu = mm_of(W[2], 0, h, hs, K, gu, 2 * F, NK, F, sel);
    const cu_mm up = mm_of(d->fused ? W[2] : W[3], d->fused ? (uint64_t)F : 0, h, hs, K, gu + F, 2 * F, NK, F, sel);
    if (up.w != fz->gu.w + (uint64_t)F * fz->gu.row_bytes || up.type != fz->gu.type ||
        up.row_bytes != fz->gu.row_bytes || up.expert_bytes != fz->gu.expert_bytes)
        return false;
    fz->gu.rows = 2 * F;
    fz->gu.expert_early = b->expert_early && d->shared;   /* (as moe_exec's `early`) */
    mm_knobs(b, &fz->gu);
    fz->t_gu = (cu_moe_tail){ .mode = CU_MOE_TAIL_SWIGLU, .ctr = b->moe_ctr, .ctr_n = CU_MOE_CTR, .F = F,
                              .q = fz->q, .qd = fz->qd, .qs = fz->qs, .sh = d->shared ? gu + NK * 2 * F : NULL,
                              .n_sh = d->shared ? n : 0, .sh_stride = 2 * F };
    if (!si_cu_mmq_ok(&fz->gu) || !si_cu_gemvq_tail_ok(&fz->gu, &fz->t_gu))
        return false;
    /* knob moe_dec_fuse_gu: the shared gate/up in the same launch, as
     * gate_up_run would run it alone (stacked, or the up as more[0] on
     * v1 with gemv_fuse) on gemv_staged's kernel; the picks are then read
     * after the wait (the router's is the launch before) */
    fz->one_gu = false;
    if (b->moe_dec_fuse_gu && d->shared) {
        cu_mm sg = mm_of(W[6], 0, h, hs, 1, gu + NK * 2 * F, 2 * F, n, F, NULL);
        const cu_mm su = mm_of(W[7], 0, h, hs, 1, gu + NK * 2 * F + F, 2 * F, n, F, NULL);
        const bool alike = su.type == sg.type && su.row_bytes == sg.row_bytes;
        if (alike && su.w == sg.w + (uint64_t)F * sg.row_bytes) {
            sg.rows = 2 * F;
        } else if (alike && b->gemv_fuse) {
            sg.more[0] = (cu_mm_part){ su.w, su.y, F, su.row_bytes, su.y_stride, NULL };
            sg.n_more = 1;
        }
        mm_knobs(b, &sg);
        cu_mm g1 = fz->gu;
        g1.expert_early = false;
        if ((sg.rows == 2 * F || sg.n_more == 1) && si_cu_mmq_ok(&sg) && si_cu_gemvq_gs_ok(&g1, &sg, &fz->t_gu)) {
            fz->sgu = sg;
            fz->gu = g1;
            fz->one_gu = true;
        }
    }
    fz->dn = mm_of(W[4], 0, gu, 2 * F, 1, y, H, NK, H, sel);
    fz->dn.expert_early = b->expert_early;
    mm_knobs(b, &fz->dn);
    fz->t_dn = (cu_moe_tail){ .mode = CU_MOE_TAIL_COMBINE, .ctr = b->moe_ctr + CU_MOE_CTR, .ctr_n = CU_MOE_CTR,
                              .K = (int)K, .dst = (float *)dptr(&op->dst), .ds = row_stride(&op->dst) / 4,
                              .wts = wts, .ys = d->shared ? ys : NULL, .gamma = d->shared ? gamma : NULL,
                              .ys_stride = H };
    if (!si_cu_mmq_ok(&fz->dn) || !si_cu_gemvq_tail_ok(&fz->dn, &fz->t_dn))
        return false;
    if (d->shared) {
        fz->sd = mm_of(W[8], 0, gu + NK * 2 * F, 2 * F, 1, ys, H, n, H, NULL);
        mm_knobs(b, &fz->sd);
        if (!mm_q_ok(b, &fz->sd))
            return false;
    }
    return true;
}

/* The shared expert's gate (where the router's launch did not take it)
 * and gate/up of h into gus [n][2Fs]. */
static int moe_shared_gu(si_backend *b, const si_op *op, const si_oc_moe_dims *d, bool gate_with_router, float *gus,
                         float *gamma, si_err *err)
{
    const si_tensor *const *W = op->src;
    const float *h = (const float *)dptr(W[0]);
    const int64_t hs = (int64_t)(row_stride(W[0]) / 4);
    cu_mm mm = mm_of(W[5], 0, h, hs, 1, gamma, 1, d->n, 1, NULL);
    int rc = gate_with_router ? SI_OK : mm_run(b, &mm, 0, err);
    if (rc == SI_OK)
        rc = gate_up_run(b, W[6], 0, W[7], 0, h, hs, 1, gus, d->n, d->Fs, NULL, false, err);
    return rc;
}

/* Steps 2..5 of moe_exec fused (the router has run): see moe_fz. */
static int moe_fused(si_backend *b, const si_op *op, const si_oc_moe_dims *d, bool gate_with_router, float *gus,
                     float *gamma, const moe_fz *fz, si_err *err)
{
    const int64_t NK = d->n * d->K, nb = d->F / 32;
    int rc = SI_OK;
    if (d->shared && fz->one_gu) {
        if (!gate_with_router) {   /* (the shared gate row alone, as moe_shared_gu) */
            const si_tensor *const *W = op->src;
            const cu_mm g = mm_of(W[5], 0, fz->gu.x, fz->gu.x_stride, 1, gamma, 1, d->n, 1, NULL);
            rc = mm_run(b, &g, 0, err);
        }
    } else if (d->shared) {
        rc = moe_shared_gu(b, op, d, gate_with_router, gus, gamma, err);
    }
    int8_t *q;
    float *qd, *qs;
    /* h's int8 copy: slot 0 holds it (the norm's, or the shared gate/up's) */
    if (rc == SI_OK)
        rc = xq_get(b, fz->gu.x, fz->gu.x_stride, fz->gu.in, d->n, 0, 32, &q, &qd, &qs, err);
    if (rc == SI_OK && fz->one_gu)
        rc = launched(si_cu_gemvq_gs(&fz->gu, q, qd, qs, &fz->sgu, &fz->t_gu, b->stream),
                      "MOE (routed and shared gate/up, SwiGLU)", err);
    else if (rc == SI_OK)
        rc = launched(si_cu_gemvq_tail(&fz->gu, q, qd, qs, &fz->t_gu, b->stream), "MOE (gate/up, SwiGLU)", err);
    if (rc == SI_OK && d->shared)
        rc = mm_run_q(b, &fz->sd, fz->q + NK * d->F, fz->qd + NK * nb, fz->qs + NK * nb, err);
    if (rc == SI_OK)
        rc = launched(si_cu_gemvq_tail(&fz->dn, fz->q, fz->qd, fz->qs, &fz->t_dn, b->stream), "MOE (down, combine)",
                      err);
    return rc;
}

/* Knob moe_overlap (batch, the default: 2..8 tokens; true: any count): a
 * decode MOE whose shared expert has the routed experts' width runs the
 * shared expert's launches (gate/up, SwiGLU + int8 copy, down) on
 * b->side, forked from the stream before the
 * router and joined back before the combine, so they run beside the
 * router and the routed products instead of in line with them (each of
 * these small launches leaves most of the GPU idle; issue 5 asks for the
 * shared expert overlapped with the routed ones).  Neither branch writes
 * what the other reads: both read h's int8 copy in slot 0 (made before the
 * fork), the two SwiGLU copies go to disjoint rows of slot 1 (routed rows
 * 0..NK, shared NK..NK+n), gu/gus and y/ys are apart, and gamma (the
 * shared gate row) comes from the router's launch on the main stream.  The
 * same kernels on the same values as the in-line path: the same bits.
 * The routed gate/up now follows the router directly, so it reads its
 * picks after its programmatic-launch wait (expert_early off for it). */
static bool moe_overlap_ok(const si_backend *b, const si_oc_moe_dims *d, bool one_act, bool fuse_q)
{
    const bool on = batch_knob_on(b->moe_overlap, d->n);
    /* (the shared rows' scales in slot 1 16-byte aligned, as xq_hit asks) */
    return on && d->shared && one_act && fuse_q && d->n <= SI_CU_MMQ_MAX_COLS && !b->gemv_v2 &&
           ((d->n * d->K) * (d->F / 32)) % 4 == 0;
}

/* SwiGLU of `rows` rows of gu [rows][2F] (gate, up) into the gate half,
 * with its int8 copy at q/qd/qs: swiglu_q_kernel. */
static int moe_swiglu_to(si_backend *b, float *gu, int64_t F, int64_t rows, int8_t *q, float *qd, float *qs,
                         const char *what, si_err *err)
{
    const uint64_t st = (uint64_t)(2 * F) * sizeof(float);
    const cu_rows g = { (uint8_t *)gu, rows, 1, st, 0, 0 }, u = { (uint8_t *)(gu + F), rows, 1, st, 0, 0 };
    return launched(si_cu_swiglu_q(&g, &u, &g, F, rows, q, qd, qs, b->stream), what, err);
}

static int moe_overlapped(si_backend *b, const si_op *op, const si_oc_moe_dims *d, const cu_mm *router,
                          bool gate_with_router, float *gu, float *y, int32_t *sel, float *wts, float *ys,
                          float *gamma, si_err *err)
{
    const si_tensor *const *W = op->src;
    const int64_t n = d->n, K = d->K, F = d->F, H = d->H, NK = n * K, nb = F / 32;
    const float *h = router->x;
    const int64_t hs = router->x_stride;
    float *gus = gu + NK * 2 * F;
    /* room first (a larger scratch drops slot 0's copy), then h's copy */
    const size_t need = xq_bytes(F, NK + n) > xq_bytes(H, n) ? xq_bytes(F, NK + n) : xq_bytes(H, n);
    int rc = cu_xq_reserve(b, need, err);
    int8_t *q, *q1;
    float *qd, *qs, *qd1, *qs1;
    if (rc == SI_OK)
        rc = xq_get(b, h, hs, H, n, 0, 32, &q, &qd, &qs, err);
    if (rc != SI_OK)
        return rc;
    xq_parts(b, F, NK + n, 1, &q1, &qd1, &qs1);
    cu_mm sd = mm_of(W[8], 0, gus, 2 * F, 1, ys, H, n, H, NULL);
    cu_mm dn = mm_of(W[4], 0, gu, 2 * F, 1, y, H, NK, H, sel);
    mm_knobs(b, &sd);
    mm_knobs(b, &dn);
    dn.expert_early = b->expert_early;   /* (gate/up and SwiGLU launches between it and the router) */
    cudaStream_t main_s = b->stream;
    rc = launched(cudaEventRecord(b->ev_fork, main_s), "MOE (fork)", err);
    if (rc == SI_OK)
        rc = launched(cudaStreamWaitEvent(b->side, b->ev_fork, 0), "MOE (fork)", err);
    if (rc != SI_OK)
        return rc;
    /* the shared expert, on the side stream */
    b->stream = b->side;
    rc = moe_shared_gu(b, op, d, gate_with_router, gus, gamma, err);
    if (rc == SI_OK)
        rc = moe_swiglu_to(b, gus, F, n, q1 + NK * F, qd1 + NK * nb, qs1 + NK * nb, "MOE (shared SwiGLU)", err);
    if (rc == SI_OK)
        rc = mm_run_q(b, &sd, q1 + NK * F, qd1 + NK * nb, qs1 + NK * nb, err);
    b->stream = main_s;
    /* (recorded and waited for whatever happened: a capture must join) */
    int rj = launched(cudaEventRecord(b->ev_join, b->side), "MOE (join)", err);
    /* the router and the routed experts, on the main stream */
    if (rc == SI_OK)
        rc = moe_router(b, router, (int)K, sel, wts, err);
    if (rc == SI_OK)
        rc = gate_up_run(b, W[2], 0, d->fused ? W[2] : W[3], d->fused ? (uint64_t)F : 0, h, hs, K, gu, NK, F, sel,
                         false, err);
    if (rc == SI_OK)
        rc = moe_swiglu_to(b, gu, F, NK, q1, qd1, qs1, "MOE (SwiGLU)", err);
    if (rc == SI_OK)
        rc = mm_run_q(b, &dn, q1, qd1, qs1, err);
    if (rj == SI_OK)
        rj = launched(cudaStreamWaitEvent(main_s, b->ev_join, 0), "MOE (join)", err);
    if (rc == SI_OK)
        rc = rj;
    if (rc == SI_OK)
        rc = launched(si_cu_moe_combine((float *)dptr(&op->dst), row_stride(&op->dst) / 4, y, wts, ys, gamma, n,
                                        (int)K, H, main_s),
                      "MOE", err);
    return rc;
}

/* Knob moe_sdc (default true): a one-token MOE on the int8 in-line path
 * whose shared expert's down product runs on v1's plain mmq_kernel makes
 * it in the combine's launch instead (cuda_mmq.cu sdc_kernel), before that
 * launch's programmatic-launch wait: the shared down was a link of its
 * own in the chain of dependent launches though it needs nothing of the
 * routed down's (H200 35b-a3b: -16 us a step of 2,600).  Its input, the
 * shared rows' int8 SwiGLU copy, must be held in slot 0, made by the
 * launch that made the routed rows' (two launches back: the routed down
 * between).  Same bits.  *done: it ran (else the caller runs the shared
 * down and the combine). */
static int moe_sdc(si_backend *b, const si_op *op, const si_oc_moe_dims *d, const float *gus, const float *y,
                   const float *wts, const float *gamma, bool *done, si_err *err)
{
    *done = false;
    if (!b->moe_sdc || d->n != 1 || !b->mm_dp4a || b->gemv_v2)
        return SI_OK;
    cu_mm sd = mm_of(op->src[8], 0, gus, 2 * d->Fs, 1, NULL, d->H, 1, d->H, NULL);
    mm_knobs(b, &sd);
    int64_t j;
    if (!si_cu_moe_sdc_ok(&sd, (int)d->K) || !xq_hit(b, sd.x, sd.x_stride, sd.in, 1, 32, &j))
        return SI_OK;
    int8_t *q;
    float *qd, *qs;
    int rc = xq_get(b, sd.x, sd.x_stride, sd.in, 1, 0, 32, &q, &qd, &qs, err);   /* (a hit: no launch) */
    if (rc == SI_OK)
        rc = launched(si_cu_moe_sdc(&sd, q, qd, qs, (float *)dptr(&op->dst), y, wts, gamma, (int)d->K, b->stream),
                      "MOE (shared down + combine)", err);
    *done = rc == SI_OK;
    return rc;
}

static int moe_exec(si_backend *b, const si_op *op, si_err *err)
{
    si_oc_moe_dims d;
    si_oc_moe_dims_of(op, &d);
    const int64_t n = d.n, H = d.H, E = d.E, K = d.K, F = d.F, Fs = d.Fs, NK = n * K;
    if (n == 0)
        return SI_OK;
    const size_t f = sizeof(float);
    const size_t gu_n = (size_t)(NK * 2 * F + (d.shared ? n * 2 * Fs : 0));
    size_t bytes = rnd((size_t)(n * E) * f) + rnd((size_t)NK * sizeof(int32_t)) + rnd((size_t)NK * f) +
                   rnd(gu_n * f) + rnd((size_t)(NK * H) * f);
    if (d.shared)
        bytes += rnd((size_t)(n * H) * f) + rnd((size_t)n * f);
    /* (knob moe_dec_fuse: room for the SwiGLU's int8 copy, moe_fz) */
    const bool try_fuse = b->moe_dec_fuse && n <= SI_CU_MMQ_MAX_COLS;
    const size_t q_bytes = try_fuse ? xq_bytes(F, NK + (d.shared ? n : 0)) : 0;
    bytes += q_bytes;
    void *ws = cu_ws_reserve(b, bytes, err);
    if (ws == NULL)
        return SI_ENOMEM;
    carve cv = { ws, 0 };
    float *logits = take(&cv, (size_t)(n * E) * f);
    int32_t *sel = take(&cv, (size_t)NK * sizeof(int32_t));
    float *wts = take(&cv, (size_t)NK * f);
    /* gate and up side by side per column ([NK][2F], then the shared
     * expert's [n][2Fs] right after): one launch makes both, SwiGLU leaves
     * the product in the gate half, which the down projection reads with
     * stride 2F (one SwiGLU launch for both when F == Fs). */
    float *gu = take(&cv, gu_n * f);
    float *y = take(&cv, (size_t)(NK * H) * f);
    float *gus = NULL, *ys = NULL, *gamma = NULL;
    if (d.shared) {
        gus = gu + NK * 2 * F;
        ys = take(&cv, (size_t)(n * H) * f);
        gamma = take(&cv, (size_t)n * f);
    }
    void *qbuf = q_bytes > 0 ? take(&cv, q_bytes) : NULL;
    moe_fz fz;
    const bool fuse = try_fuse && moe_fuse_plan(b, op, &d, gu, y, sel, wts, ys, gamma, qbuf, &fz);
    const si_tensor *const *W = op->src;
    const float *h = (const float *)dptr(W[0]);
    const int64_t hs = (int64_t)(row_stride(W[0]) / 4);
    void *s = b->stream;
    /* 1. router and top-k (h is quantised once, in slot 0, for the router,
     * the routed gate/up and the shared expert's gate/up) */
    cu_mm mm = mm_of(W[1], 0, h, hs, 1, logits, E, n, E, NULL);
    /* the shared expert's gate (one row of the same input) in the router's
     * launch where both are stored alike (knob gemv_fuse) */
    const bool gate_with_router = d.shared && b->gemv_fuse && W[5]->type == W[1]->type && W[5]->ne[0] == H &&
                                  W[5]->nb[1] == W[1]->nb[1];
    if (gate_with_router) {
        mm.more[0] = (cu_mm_part){ dptr(W[5]), gamma, 1, W[5]->nb[1], 1, NULL };
        mm.n_more = 1;
    }
    const bool one_act = d.shared && Fs == F;
    const bool fuse_q = b->fuse_norm && b->mm_dp4a && F % 32 == 0;
    if (!fuse && moe_overlap_ok(b, &d, one_act, fuse_q))
        return moe_overlapped(b, op, &d, &mm, gate_with_router, gu, y, sel, wts, ys, gamma, err);
    int rc = moe_router(b, &mm, (int)K, sel, wts, err);
    if (fuse) {
        if (rc == SI_OK)
            rc = moe_fused(b, op, &d, gate_with_router, gus, gamma, &fz, err);
        b->xq_key = NULL;   /* (as below: the unfused path rewrote slot 0) */
        return rc;
    }
    /* 2. the shared expert's products of h (slot 0 holds it), with knob
     * expert_early before the routed ones: with a launch between the
     * router's and theirs, the routed products may read their picks
     * before the programmatic-launch wait (cu_mm.expert_early; a gate/up
     * of Fs >= 1 rows and n >= 1 columns launches at least once).  With
     * route_fused the picks come from the router's own launch, written
     * by its last block before that grid completes; every block of the
     * launch between lets the next launch start only after its wait for
     * that completion (cu_pdl_enter: the wait, then launch_dependents), so
     * the routed product still reads finished picks.  (The shared gate
     * row taken in that launch, gamma, is read only by the combine.) */
    const bool early = b->expert_early && d.shared && Fs > 0;
    cu_mm gmm;
    cu_glu gl;
    const bool glu = fuse_q && moe_glu_plan(b, op, &d, h, hs, early, gu, sel, &gmm, &gl);
    for (int pass = 0; pass < 2 && rc == SI_OK; pass++) {
        if (pass == (early ? 0 : 1)) {
            if (d.shared)
                rc = moe_shared_gu(b, op, &d, gate_with_router, gus, gamma, err);
        } else if (glu) {
            /* (3 and the SwiGLU of 4) */
            rc = glu_launch(b, &gmm, &gl, n, NK + (d.shared ? n : 0), "MOE (gate/up + SwiGLU, gemv_glu)", err);
        } else {
            /* 3. routed experts: column a = t*K + k uses expert sel[a] and token a/K */
            rc = gate_up_run(b, W[2], 0, d.fused ? W[2] : W[3], d.fused ? (uint64_t)F : 0, h, hs, K, gu, NK, F, sel,
                             early, err);
        }
    }
    /* 4. down projections.  Their inputs are scratch: slot 1, or with
     * knob fuse_norm on the int8 paths one kernel computes the SwiGLU
     * and its int8 copy into slot 0 for both downs (h's copy there is
     * done with: the gate/up products are enqueued). */
    const int dslot = fuse_q ? 0 : 1;
    if (rc == SI_OK && !glu)
        rc = fuse_q ? moe_swiglu_q(b, gu, F, one_act ? NK + n : NK, err)
                    : launched(si_cu_swiglu_rows(gu, (uint64_t)(2 * F), gu + F, (uint64_t)(2 * F),
                                                 one_act ? NK + n : NK, F, s),
                               "MOE", err);
    if (rc == SI_OK) {
        mm = mm_of(W[4], 0, gu, 2 * F, 1, y, H, NK, H, sel);
        mm.expert_early = b->expert_early;   /* (the gate/up and SwiGLU launches between) */
        rc = mm_run(b, &mm, dslot, err);
    }
    /* (knob moe_sdc: the shared down in the combine's launch, 4 + 5) */
    bool sdc = false;
    if (rc == SI_OK && d.shared && one_act && fuse_q)
        rc = moe_sdc(b, op, &d, gus, y, wts, gamma, &sdc, err);
    if (rc == SI_OK && d.shared && !sdc) {
        if (!one_act)
            rc = launched(si_cu_swiglu_rows(gus, (uint64_t)(2 * Fs), gus + Fs, (uint64_t)(2 * Fs), n, Fs, s), "MOE",
                          err);
        if (rc == SI_OK) {
            mm = mm_of(W[8], 0, gus, 2 * Fs, 1, ys, H, n, H, NULL);
            rc = mm_run(b, &mm, one_act ? dslot : 1, err);
        }
    }
    if (fuse_q)
        b->xq_key = NULL;   /* gu is workspace: later ops may rewrite it unseen */
    /* 5. combine */
    if (rc == SI_OK && !sdc)
        rc = launched(si_cu_moe_combine((float *)dptr(&op->dst), row_stride(&op->dst) / 4, y, wts, ys, gamma, n,
                                        (int)K, H, s),
                      "MOE", err);
    return rc;
}

/* ---- dispatch --------------------------------------------------------------- */

typedef struct op_entry {
    int (*exec)(si_backend *b, const si_op *op, si_err *err);
} op_entry;

static int topk_exec(si_backend *b, const si_op *op, si_err *err);   /* at the end of the file */

static const op_entry op_tab[SI_OP_KIND_COUNT] = {
    [SI_OP_GET_ROWS] = { elem_exec },
    [SI_OP_MATMUL]   = { matmul_exec },
    [SI_OP_RMSNORM]  = { elem_exec },
    [SI_OP_ADD]      = { elem_exec },
    [SI_OP_MUL]      = { elem_exec },
    [SI_OP_SWIGLU]   = { elem_exec },
    [SI_OP_ATTN]     = { attn_exec },
    [SI_OP_GDN]      = { gdn_exec },
    [SI_OP_MOE]      = { moe_exec },
    [SI_OP_TOPK]     = { topk_exec },
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
static void xq_after(si_backend *b, const si_op *op)
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
        xq_after(b, op);
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
    else if (gdn_q_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_GDN_Q, 1, false };
    else if (attn_q_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_ATTN_Q, 1, false };
    else if (glu_ok(b, ops, n_ops, i, true))
        u = (cu_unit){ CU_UNIT_GLU, 3, false };
    else if ((u.n = cu_mm_group_len(b, ops, n_ops, i, true)) > 1)
        u.kind = CU_UNIT_MM_GROUP;
    return u;
}

static int unit_run(si_backend *b, const si_op *ops, const cu_unit *u, si_err *err)
{
    switch (u->kind) {
    case CU_UNIT_NORM: return norm_fused_exec(b, ops, u->n, u->quant, err);
    case CU_UNIT_SWIGLU_Q: return swiglu_q_exec(b, ops, err);
    case CU_UNIT_GDN_Q: return gdn_run(b, ops, true, err);
    case CU_UNIT_ATTN_Q: return attn_run(b, ops, true, err);
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
    si_cu_pdl_set(b->pdl);
    int rc = attn_pages_early(b, ops, n_ops, err);
    /* Knob graph: a list seen before runs as one graph launch. */
    if (rc == SI_OK && b->graphs != NULL) {
        const int g = cu_graph_exec(b, ops, n_ops, err);
        if (g != CU_GRAPH_DECLINED)
            return cu_exec_end(b, g, err);
    }
    for (size_t i = 0; i < n_ops && rc == SI_OK;) {
        /* (a fused unit's time goes to its last op: the events of the
         * others are recorded back to back before it) */
        const cu_unit u = unit_at(b, ops, n_ops, i);
        for (size_t k = 0; k < u.n; k++)
            cu_prof_before(b, i + k, n_ops, &ops[i + k]);
        rc = unit_run(b, ops + i, &u, err);
        i += u.n;
    }
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
        rc = h2d(b, d_off, off, (size_t)(n + 1) * sizeof *off, err);
        free(off);
        if (rc == SI_OK && np > 0)
            rc = h2d(b, d_id, p->pen_id + base, (size_t)np * sizeof(int32_t), err);
        if (rc == SI_OK && np > 0)
            rc = h2d(b, d_cnt, p->pen_count + base, (size_t)np * sizeof(int32_t), err);
        if (rc != SI_OK)
            return rc;
        t.pen_off = d_off;
        t.pen_id = d_id;
        t.pen_cnt = d_cnt;
    }
    return launched(si_cu_topk(&t, b->stream), "TOPK", err);
}
