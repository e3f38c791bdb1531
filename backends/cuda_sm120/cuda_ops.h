/* backends/cuda_sm120/cuda_ops.h — what the three files of the backend's
 * exec() share: cuda_ops.c (tensors, the dp4a input cache, MATMUL and its
 * groups, the fused norm / SwiGLU / gemv_glu forms, elementwise ops,
 * dispatch, TOPK), cuda_ops_attn.c (ATTN, GDN) and cuda_ops_moe.c (MOE).
 * Internal to the plugin; every pointer is borrowed for the call. */
#ifndef SI_CUDA_OPS_H
#define SI_CUDA_OPS_H

#include "cuda_backend.h"
#include "cuda_internal.h"

#define WS_ALIGN 256
#define MAX_HEAD_DIM 4096   /* shared-memory budget of the ATTN/GDN kernels */

static inline uint8_t *dptr(const si_tensor *t) { return (uint8_t *)t->buf->dev + t->offset; }

static inline uint64_t row_stride(const si_tensor *t) { return si_oc_ne(t, 1) > 1 ? t->nb[1] : 0; }

static inline int launched(int e, const char *op, si_err *err)
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

static inline size_t rnd(size_t n) { return (n + WS_ALIGN - 1) & ~(size_t)(WS_ALIGN - 1); }

static inline void *take(carve *c, size_t bytes)
{
    void *r = c->p + c->used;
    c->used += rnd(bytes);
    return r;
}

/* The knobs gemv_glu needs (its kernel is gemv_quad's, on v1's int8 path). */
static inline bool cu_glu_on(const si_backend *b) { return b->gemv_glu && b->mm_dp4a && !b->gemv_v2 && b->gemv_quad; }

/* A product of w (rows from first_row) for cu_mm_run: expert, when set,
 * picks each column's matrix of a 3-d w. */
static inline cu_mm mm_of(const si_tensor *w, uint64_t first_row, const float *x, int64_t x_stride, int64_t x_div,
                          float *y, int64_t y_stride, int64_t ncols, int64_t rows, const int32_t *expert)
{
    cu_mm mm = {
        .w = dptr(w) + first_row * w->nb[1], .type = w->type, .in = w->ne[0], .rows = rows,
        .row_bytes = w->nb[1], .expert_bytes = expert ? w->nb[2] : 0, .expert = expert,
        .x = x, .x_stride = x_stride, .x_div = x_div, .y = y, .y_stride = y_stride, .ncols = ncols,
    };
    return mm;
}

/* ---- cuda_ops.c ------------------------------------------------------------ */

/* Copies n host bytes to dst on the stream through pinned staging (the
 * graph's own while capturing): only enqueued, src may be reused at once. */
int cu_h2d(si_backend *b, void *dst, const void *src, size_t n, si_err *err);

/* The int8 copies of decode inputs (dp4a, mma): bytes of one slot for ncx
 * columns of `in` values; where slot `slot` keeps its q, d and s; marking
 * x's copy (blk-wide blocks) as the one slot 0 holds; whether slot 0
 * holds x's (its column offset in *j); and the copy made or found. */
size_t cu_xq_bytes(int64_t in, int64_t ncx);
void   cu_xq_parts(si_backend *b, int64_t in, int64_t ncx, int slot, int8_t **q, float **d, float **s);
void   cu_xq_hold(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int blk);
bool   cu_xq_hit(const si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int blk, int64_t *j);
int    cu_xq_get(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int slot, int blk,
                 int8_t **q, float **d, float **s, si_err *err);
/* cu_xq_get for a product whose kernel takes cu_mm.xr (xr != NULL): where
 * slot 0 holds the copy of the pending deferred norm's output (knob
 * norm_tail = defer), *xr gets its scale instead of the values being
 * made whole first (cu_dn_resolve). */
int    cu_xq_get_r(si_backend *b, const float *x, int64_t x_stride, int64_t in, int64_t ncx, int slot, int blk,
                   int8_t **q, float **d, float **s, cu_xr *xr, si_err *err);
/* Knob norm_tail = defer: the pending deferred norm's output made whole
 * (si_cu_xr_resolve, cuda_backend.h cu_dn_resolve) if x[0..n) floats
 * overlaps it. */
int    cu_dn_touch(si_backend *b, const float *x, int64_t n, si_err *err);
/* Drops slot 0's copy when `op` wrote into its source. */
void   cu_xq_after(si_backend *b, const si_op *op);

/* The cu_mm fields the knobs set; the product launched (int8 input in
 * `slot` where an int8 path takes it). */
void cu_mm_knobs(const si_backend *b, cu_mm *m);
int  cu_mm_run(si_backend *b, const cu_mm *mm, int slot, si_err *err);

/* Whether the op after ops[i] quantises its output into slot 0 first
 * (knob fuse_norm's forms). */
bool cu_next_quantises(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel);
/* SWIGLU of g and u into d with its int8 copy in slot 0. */
int  cu_swiglu_q_slot0(si_backend *b, const cu_rows *g, const cu_rows *u, const cu_rows *d, int64_t ne0,
                       int64_t nrows, const char *what, si_err *err);
/* gemv_glu's launch: mm's gate and up rows, their SwiGLU and its int8 copy
 * (gl), for ncx columns of R rows each. */
int  cu_glu_launch(si_backend *b, const cu_mm *mm, cu_glu *gl, int64_t ncx, int64_t R, const char *what,
                   si_err *err);

/* ---- cuda_ops_attn.c --------------------------------------------------------- */

/* The KV pages every ATTN op of ops[0..n_ops) needs, reserved before the
 * first launch. */
int  cu_attn_pages_early(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);
/* One ATTN / GDN op; quant: also the int8 copy of its output for the
 * product after it (fuse_attn_q, fuse_gdn_q: cu_attn_q_ok, cu_gdn_q_ok). */
int  cu_attn_op(si_backend *b, const si_op *op, bool quant, si_err *err);
int  cu_attn_exec(si_backend *b, const si_op *op, si_err *err);
int  cu_gdn_op(si_backend *b, const si_op *op, bool quant, si_err *err);
int  cu_gdn_exec(si_backend *b, const si_op *op, si_err *err);
bool cu_gdn_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel);
bool cu_attn_q_ok(si_backend *b, const si_op *ops, size_t n_ops, size_t i, bool use_kernel);

/* ---- cuda_ops_moe.c ---------------------------------------------------------- */

int cu_moe_exec(si_backend *b, const si_op *op, si_err *err);

#endif
