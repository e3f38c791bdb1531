/* backends/cuda_sm120/cuda_ops_moe.c — exec() of MOE ops: the router and
 * top-K, the routed and shared experts' products on the decode and prefill
 * paths and their knobs (moe_dec_fuse, moe_overlap, moe_sdc, gemv_glu),
 * the combine.  Split from cuda_ops.c, whose helpers it shares through
 * cuda_ops.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

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
        return cu_mm_run(b, &mm, 0, err);
    }
    if (up.type == mm.type && up.row_bytes == mm.row_bytes && up.expert_bytes == mm.expert_bytes) {
        if (!b->gemv_v2 && b->gemv_fuse) {   /* v1: up as a second product of the launch */
            mm.more[0] = (cu_mm_part){ up.w, up.y, up.rows, up.row_bytes, up.y_stride, NULL };
            mm.n_more = 1;
            return cu_mm_run(b, &mm, 0, err);
        }
        mm.w2 = up.w;
        mm.rows_split = rows;
        mm.rows = 2 * rows;
        return cu_mm_run(b, &mm, 0, err);
    }
    int rc = cu_mm_run(b, &mm, 0, err);
    return rc == SI_OK ? cu_mm_run(b, &up, 0, err) : rc;
}

/* gu [rows][2F] (gate, up): the gate half <- silu(gate) * up and its int8
 * copy into slot 0, held as the quantised input gu (stride 2F, F wide):
 * swiglu_q_kernel, the same bits as the SwiGLU and quantiser kernels. */
static int moe_swiglu_q(si_backend *b, float *gu, int64_t F, int64_t rows, si_err *err)
{
    const uint64_t st = (uint64_t)(2 * F) * sizeof(float);
    const cu_rows g = { (uint8_t *)gu, rows, 1, st, 0, 0 }, u = { (uint8_t *)(gu + F), rows, 1, st, 0, 0 };
    const int rc = cu_swiglu_q_slot0(b, &g, &u, &g, F, rows, "MOE", err);
    if (rc == SI_OK)
        cu_xq_hold(b, gu, 2 * F, F, rows, 32);
    return rc;
}

/* Knob gemv_glu on the MOE's decode (the in-line path): the routed
 * gate/up (gu [NK][2F]) with the SwiGLU of every column into its gate
 * half and the int8 copy, and the shared expert's rows (gu's rows NK..,
 * made by the launch before: expert_early) likewise, in one launch
 * (si_cu_gemvq_glu), where gate_up_run then moe_swiglu_q ran two: the
 * same bits.  The copy is made in slot 1 (the launch reads h's from slot
 * 0), then the halves trade places (cu_glu_launch) and slot 0 holds it as
 * moe_swiglu_q leaves it.  False: the caller runs the two launches.
 * (Called where fuse_q holds: fuse_norm and the int8 path.) */
static bool moe_glu_plan(si_backend *b, const si_op *op, const si_oc_moe_dims *d, const float *h, int64_t hs,
                         bool early, float *gu, const int32_t *sel, cu_mm *mm, cu_glu *gl)
{
    const si_tensor *const *W = op->src;
    const int64_t n = d->n, K = d->K, F = d->F, NK = n * K;
    if (!cu_glu_on(b) || F % 32 != 0 || (d->shared && (d->Fs != F || !early)))
        return false;
    *mm = mm_of(W[2], 0, h, hs, K, gu, 2 * F, NK, F, sel);
    const cu_mm up = mm_of(d->fused ? W[2] : W[3], d->fused ? (uint64_t)F : 0, h, hs, K, gu + F, 2 * F, NK, F, sel);
    if (up.type != mm->type || up.expert_bytes != mm->expert_bytes)
        return false;
    mm->more[0] = (cu_mm_part){ up.w, up.y, up.rows, up.row_bytes, up.y_stride, NULL };
    mm->n_more = 1;
    mm->expert_early = early;
    cu_mm_knobs(b, mm);
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
 * float-stored weights of <= 8 columns, which cu_mm_run gives the f32 kernel
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
    m.prefetch = b->gemv_prefetch;   /* (as cu_mm_run sets them) */
    m.block_cols = b->mm_block_cols;
    const bool fused = batch_knob_on(b->route_fused, mm->ncols);
    if (fused && b->route_ctr != NULL && si_cu_router_route_ok(&m, K))
        return launched(si_cu_router_route(&m, K, sel, wts, b->route_ctr, b->stream), "MOE (router)", err);
    const int rc = cu_mm_run(b, mm, 0, err);
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
 * products (gemv_quad_experts' kernel, the shared down on cu_mm_run's dp4a
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

/* cu_mm_run's dp4a GEMV on an int8 copy of x the caller made (q, d, s): a
 * plain product of at most SI_CU_MMQ_MAX_COLS columns (no tensor-core
 * GEMM then, no stacked or extra matrices), mm's knobs set (cu_mm_knobs). */
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
    /* (the shared down reads rows NK.. of the copy: 16-byte aligned scales, as cu_xq_hit asks) */
    if ((NK * nb) % 4 != 0)
        return false;
    const si_tensor *const *W = op->src;
    const float *h = (const float *)dptr(W[0]);
    const int64_t hs = (int64_t)(row_stride(W[0]) / 4);
    const int64_t nq = NK + (d->shared ? n : 0);   /* rows of the copy (cu_xq_parts' layout) */
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
    fz->gu.expert_early = b->expert_early && d->shared;   /* (as cu_moe_exec's `early`) */
    cu_mm_knobs(b, &fz->gu);
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
        cu_mm_knobs(b, &sg);
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
    cu_mm_knobs(b, &fz->dn);
    fz->t_dn = (cu_moe_tail){ .mode = CU_MOE_TAIL_COMBINE, .ctr = b->moe_ctr + CU_MOE_CTR, .ctr_n = CU_MOE_CTR,
                              .K = (int)K, .dst = (float *)dptr(&op->dst), .ds = row_stride(&op->dst) / 4,
                              .wts = wts, .ys = d->shared ? ys : NULL, .gamma = d->shared ? gamma : NULL,
                              .ys_stride = H };
    if (!si_cu_mmq_ok(&fz->dn) || !si_cu_gemvq_tail_ok(&fz->dn, &fz->t_dn))
        return false;
    if (d->shared) {
        fz->sd = mm_of(W[8], 0, gu + NK * 2 * F, 2 * F, 1, ys, H, n, H, NULL);
        cu_mm_knobs(b, &fz->sd);
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
    int rc = gate_with_router ? SI_OK : cu_mm_run(b, &mm, 0, err);
    if (rc == SI_OK)
        rc = gate_up_run(b, W[6], 0, W[7], 0, h, hs, 1, gus, d->n, d->Fs, NULL, false, err);
    return rc;
}

/* Steps 2..5 of cu_moe_exec fused (the router has run): see moe_fz. */
static int moe_fused(si_backend *b, const si_op *op, const si_oc_moe_dims *d, bool gate_with_router, float *gus,
                     float *gamma, const moe_fz *fz, si_err *err)
{
    const int64_t NK = d->n * d->K, nb = d->F / 32;
    int rc = SI_OK;
    if (d->shared && fz->one_gu) {
        if (!gate_with_router) {   /* (the shared gate row alone, as moe_shared_gu) */
            const si_tensor *const *W = op->src;
            const cu_mm g = mm_of(W[5], 0, fz->gu.x, fz->gu.x_stride, 1, gamma, 1, d->n, 1, NULL);
            rc = cu_mm_run(b, &g, 0, err);
        }
    } else if (d->shared) {
        rc = moe_shared_gu(b, op, d, gate_with_router, gus, gamma, err);
    }
    int8_t *q;
    float *qd, *qs;
    /* h's int8 copy: slot 0 holds it (the norm's, or the shared gate/up's) */
    if (rc == SI_OK)
        rc = cu_xq_get(b, fz->gu.x, fz->gu.x_stride, fz->gu.in, d->n, 0, 32, &q, &qd, &qs, err);
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
    /* (the shared rows' scales in slot 1 16-byte aligned, as cu_xq_hit asks) */
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
    const size_t need = cu_xq_bytes(F, NK + n) > cu_xq_bytes(H, n) ? cu_xq_bytes(F, NK + n) : cu_xq_bytes(H, n);
    int rc = cu_xq_reserve(b, need, err);
    int8_t *q, *q1;
    float *qd, *qs, *qd1, *qs1;
    if (rc == SI_OK)
        rc = cu_xq_get(b, h, hs, H, n, 0, 32, &q, &qd, &qs, err);
    if (rc != SI_OK)
        return rc;
    cu_xq_parts(b, F, NK + n, 1, &q1, &qd1, &qs1);
    cu_mm sd = mm_of(W[8], 0, gus, 2 * F, 1, ys, H, n, H, NULL);
    cu_mm dn = mm_of(W[4], 0, gu, 2 * F, 1, y, H, NK, H, sel);
    cu_mm_knobs(b, &sd);
    cu_mm_knobs(b, &dn);
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
    cu_mm_knobs(b, &sd);
    int64_t j;
    if (!si_cu_moe_sdc_ok(&sd, (int)d->K) || !cu_xq_hit(b, sd.x, sd.x_stride, sd.in, 1, 32, &j))
        return SI_OK;
    int8_t *q;
    float *qd, *qs;
    int rc = cu_xq_get(b, sd.x, sd.x_stride, sd.in, 1, 0, 32, &q, &qd, &qs, err);   /* (a hit: no launch) */
    if (rc == SI_OK)
        rc = launched(si_cu_moe_sdc(&sd, q, qd, qs, (float *)dptr(&op->dst), y, wts, gamma, (int)d->K, b->stream),
                      "MOE (shared down + combine)", err);
    *done = rc == SI_OK;
    return rc;
}

/* Knob moe_persist (default true): a one-token MOE with a shared expert
 * as wide as the routed ones, on the int8 in-line path, in one cooperative
 * launch (cuda_pmoe.cuh) instead of the six of the path below (router product,
 * route, shared gate/up, routed gate/up + SwiGLU, routed down, shared
 * down + combine): the same bits.  Where the kernel does not take the
 * shapes or types (si_cu_moe_persist_ok) the path below runs.  The shared
 * gate/up rows are read from their regrouped copies where the products
 * would (gemv_q8r), so the copies are made once either way.  *done: it
 * ran. */
static int moe_persist(si_backend *b, const si_op *op, const si_oc_moe_dims *d, float *logits, int32_t *sel,
                       float *wts, float *gu, float *gamma, bool *done, si_err *err)
{
    *done = false;
    if (!b->moe_persist || b->pm_bar == NULL || b->n_sm < 1 || d->n != 1 || !d->shared || d->Fs != d->F ||
        !b->fuse_norm || !b->mm_dp4a || b->gemv_v2 || !cu_glu_on(b) || !b->gemv_qe || !b->gemv_st)
        return SI_OK;
    const si_tensor *const *W = op->src;
    if (W[1]->type != SI_TYPE_F32 || W[5]->type != SI_TYPE_F32 || W[5]->ne[0] != d->H || W[6]->type != SI_TYPE_Q8_0 ||
        W[7]->type != SI_TYPE_Q8_0 || W[8]->type != SI_TYPE_Q8_0 || W[7]->nb[1] != W[6]->nb[1])
        return SI_OK;
    const int64_t F = d->F, H = d->H;
    const float *h = (const float *)dptr(W[0]);
    const int64_t hs = (int64_t)(row_stride(W[0]) / 4);
    const cu_mm g = mm_of(W[2], 0, h, hs, 1, gu, 2 * F, 1, F, sel);
    const cu_mm u = mm_of(d->fused ? W[2] : W[3], d->fused ? (uint64_t)F : 0, h, hs, 1, gu + F, 2 * F, 1, F, sel);
    const cu_mm dn = mm_of(W[4], 0, gu, 2 * F, 1, (float *)dptr(&op->dst), H, 1, H, sel);
    if (u.type != g.type || u.row_bytes != g.row_bytes || u.expert_bytes != g.expert_bytes)
        return SI_OK;
    cu_pmoe p = {
        .h = h, .wr = (const float *)dptr(W[1]), .wsg = (const float *)dptr(W[5]),
        .wr_stride = (int64_t)(W[1]->nb[1] / 4), .wg = g.w, .wu = u.w, .gu_rb = g.row_bytes, .gu_eb = g.expert_bytes,
        .wd = dn.w, .wd_rb = dn.row_bytes, .wd_eb = dn.expert_bytes, .sg = dptr(W[6]), .su = dptr(W[7]),
        .s_rb = W[6]->nb[1], .sd = dptr(W[8]), .sd_rb = W[8]->nb[1], .logits = logits, .gamma = gamma,
        .wts = wts, .gu = gu, .dst = (float *)dptr(&op->dst), .sel = sel, .bar = b->pm_bar, .prof = b->pm_prof,
        .H = (int)H,
        .F = (int)F, .E = (int)d->E, .K = (int)d->K, .t_gu = g.type, .t_dn = dn.type,
    };
    if (W[1]->nb[1] % 4 != 0)
        return SI_OK;
    /* (the regrouped copies, as cu_mm_run's rg_copies would take them) */
    const uint64_t span = cu_weight_span(SI_TYPE_Q8_0, H, F, p.s_rb);
    const uint8_t *rg = cu_rg_get(b, SI_TYPE_Q8_0, p.sg, span), *ru = rg ? cu_rg_get(b, SI_TYPE_Q8_0, p.su, span) : NULL;
    if (rg != NULL && ru != NULL && p.s_rb % si_cu_rg_group(SI_TYPE_Q8_0) == 0) {
        p.sg = rg;
        p.su = ru;
        p.s_rg = true;
    }
    if (!si_cu_moe_persist_ok(&p))
        return SI_OK;
    int8_t *q;
    float *qd, *qs;
    int rc = cu_xq_get(b, h, hs, H, 1, 0, 32, &q, &qd, &qs, err);   /* (slot 0: the norm's copy) */
    if (rc != SI_OK)
        return rc;
    p.xq = q;
    p.xd = qd;
    p.xs = qs;
    const int e = si_cu_moe_persist(&p, b->n_sm, b->stream);
    if (e == (int)cudaErrorCooperativeLaunchTooLarge || e == (int)cudaErrorNotSupported) {
        /* The driver would not have every block resident at once (another
         * process's kernels under MPS, an SM limit): the six launches run,
         * now and for the rest of the open. */
        cudaGetLastError();
        b->moe_persist = false;
        b->graph_retry = true;   /* (a capture this failed is tried again) */
        b->host->log(b->host, SI_LOG_WARN, CU_NAME, "moe_persist: the cooperative launch of %d blocks was refused "
                     "(%s); the MOE runs as six launches", b->n_sm, si_cu_errstr(e));
        return SI_OK;
    }
    rc = launched(e, "MOE (persistent, one launch)", err);
    *done = rc == SI_OK;
    if (*done && !b->pm_said) {   /* (once an open: tests see that it ran) */
        b->pm_said = true;
        b->host->log(b->host, SI_LOG_DEBUG, CU_NAME, "moe_persist: a one-token MOE in one launch of %d blocks",
                     b->n_sm);
    }
    return rc;
}

void cu_pm_prof_log(si_backend *b)
{
    static const char *const part[CU_PM_PROF_N - 1] = { "wait for the launch before", "router + shared gate/up",
                                                         "barrier 1", "route + h's copy", "routed gate/up",
                                                         "barrier 2", "SwiGLU copy", "downs + combine" };
    unsigned long long c[CU_PM_PROF_N];
    int khz = 0;
    if (b->pm_prof == NULL || b->stream == NULL || cudaStreamSynchronize(b->stream) != cudaSuccess ||
        cudaMemcpy(c, b->pm_prof, sizeof c, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, b->device) != cudaSuccess || khz <= 0) {
        cudaGetLastError();
        return;
    }
    const double n = (double)c[CU_PM_PROF_N - 1];
    if (n == 0)
        return;
    char line[512];
    int at = snprintf(line, sizeof line, "moe_persist_prof: %.0f block runs, us a block at %d MHz:", n, khz / 1000);
    double tot = 0;
    for (int i = 0; i < CU_PM_PROF_N - 1 && at > 0 && (size_t)at < sizeof line; i++) {
        const double us = (double)c[i] / n / (khz * 1e-3);
        tot += us;
        at += snprintf(line + at, sizeof line - (size_t)at, " %s %.2f;", part[i], us);
    }
    b->host->log(b->host, SI_LOG_INFO, CU_NAME, "%s total %.2f", line, tot);
}

int cu_moe_exec(si_backend *b, const si_op *op, si_err *err)
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
    const size_t q_bytes = try_fuse ? cu_xq_bytes(F, NK + (d.shared ? n : 0)) : 0;
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
    bool persisted = false;
    const int rp = d.shared ? moe_persist(b, op, &d, logits, sel, wts, gu, gamma, &persisted, err) : SI_OK;
    if (rp != SI_OK || persisted)
        return rp;
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
            rc = cu_glu_launch(b, &gmm, &gl, n, NK + (d.shared ? n : 0), "MOE (gate/up + SwiGLU, gemv_glu)", err);
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
        rc = cu_mm_run(b, &mm, dslot, err);
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
            rc = cu_mm_run(b, &mm, one_act ? dslot : 1, err);
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
