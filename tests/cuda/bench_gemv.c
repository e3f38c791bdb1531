/* tests/cuda/bench_gemv.c — GPU microbenchmark of the dp4a decode GEMV
 * (cuda_sm120: si_cu_matmul_q8 = v2, cuda_gemv.cu; si_cu_matmul_q8_v1 =
 * v1, cuda_mmq.cu), linked straight against the kernels' objects (no
 * plugin).  Not a test: built with the cuda tests, run by hand on the GPU:
 *
 *   make tests/cuda/bench_gemv && tests/cuda/bench_gemv [reps]
 *
 * Per case (the 9b and 35b-a3b decode shapes, each type, ncols 1, 2, 8):
 * v2 as the backend runs it and v1, then, for picking v2's defaults, the
 * GB/s of v2 kept off its staged path ("direct": the same as v2 where
 * rows are not whole stages) and, at one column, with 1 and 4 rows a lane
 * group ("R=1", "R=4"; v2 takes 1 for small products); the median of `reps` (default 25, >= 20) timed launches after 3 warm-up
 * ones, each launch timed alone with CUDA events after a 256 MiB memset
 * that flushes the 50 MB L2, so the weights always come from HBM; GB/s is
 * weight bytes over that time.  Then the MoE decode products of 35b-a3b
 * (1 token, 8 of 256 experts, Q4_K 2048->512 gate and up, 512->2048 down,
 * plus the shared expert): v1 as moe_exec ran them (gate and up apart),
 * v2 as it runs them now (gate+up stacked in one launch), launches back to
 * back between two events.  Each case also checks v2 against v1 (same
 * integer terms: they differ by f32 summation order only).  v1 is also
 * timed with 2 and 8 units a lane in flight (U=2, U=8; default 4) and, for
 * Q4_K, with 32-byte units ("wide", cu_mm.gemv_wide), and for Q4_K/Q5_K
 * with a warp's lanes on one sub-block pair ("ordered", cu_mm.gemv_order,
 * checked against v1).  Last,
 * decode's products of one input (ffn gate+up, GDN qkv/z/beta/alpha,
 * attention q/k/v) as one v1 launch (cu_mm.more, knob gemv_fuse) against
 * one launch each, which must give the same bits.
 * Exits 77 without a usable GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <sparkinfer/types.h>

#include "cuda_internal.h"

#define BENCH_NAME "bench_gemv"
#include "bench_util.h"

#define FLUSH_BYTES ((size_t)256 << 20)

static int g_reps = 25;
static void *g_flush;
static cudaEvent_t g_e0, g_e1;



static const char *tname(uint32_t t)
{
    return t == SI_TYPE_Q4_K ? "Q4_K" : t == SI_TYPE_Q5_K ? "Q5_K" : t == SI_TYPE_Q6_K ? "Q6_K" : "Q8_0";
}

/* f16 bits of a small positive or negative scale (|v| in [2^-10, 2^-7)). */
static uint16_t small_f16(void) { return (uint16_t)(((r32() & 1) << 15) | ((5 + (r32() % 3)) << 10) | (r32() & 0x3ff)); }

/* n rows of random quants with sane f16 scales (no Inf/NaN), on the device. */
static uint8_t *make_weights(uint32_t t, int64_t in, int64_t rows)
{
    const int64_t rb = bench_row_bytes(t, in), bb = t == SI_TYPE_Q8_0 ? 34 : bench_row_bytes(t, 256);
    const size_t n = (size_t)(rb * rows);
    uint8_t *h = malloc(n), *d = NULL;
    if (h == NULL) {
        fprintf(stderr, "bench_gemv: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t v = r32() ^ (r32() << 16);
        memcpy(h + i, &v, 4);
    }
    for (size_t b = 0; b < n / (size_t)bb; b++) {
        uint8_t *B = h + b * bb;
        uint16_t s0 = small_f16(), s1 = small_f16();
        if (t == SI_TYPE_Q6_K) {
            memcpy(B + 208, &s0, 2);
        } else {
            memcpy(B, &s0, 2);
            if (t != SI_TYPE_Q8_0)
                memcpy(B + 2, &s1, 2);
        }
    }
    CK(cudaMalloc((void **)&d, n));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* Quantised activations of ncx columns of `in`. */
typedef struct xq_set {
    int8_t *q;
    float  *d, *s, *x;
} xq_set;

static xq_set make_x(int64_t in, int64_t ncx)
{
    xq_set r;
    float *h = malloc((size_t)(in * ncx) * sizeof(float));
    for (int64_t i = 0; i < in * ncx; i++)
        h[i] = (float)((int)(r32() % 2001) - 1000) / 1000.0f;
    CK(cudaMalloc((void **)&r.x, (size_t)(in * ncx) * sizeof(float)));
    CK(cudaMalloc((void **)&r.q, (size_t)(in * ncx)));
    CK(cudaMalloc((void **)&r.d, (size_t)(in / 32 * ncx) * sizeof(float)));
    CK(cudaMalloc((void **)&r.s, (size_t)(in / 32 * ncx) * sizeof(float)));
    CK(cudaMemcpy(r.x, h, (size_t)(in * ncx) * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    CK((cudaError_t)si_cu_quantize_x(r.x, in, in, ncx, r.q, r.d, r.s, NULL));
    CK(cudaDeviceSynchronize());
    return r;
}

static void free_x(xq_set *x)
{
    cudaFree(x->x);
    cudaFree(x->q);
    cudaFree(x->d);
    cudaFree(x->s);
}

/* One timed run: the products of `run` (v: 1 or 2) between two events. */
typedef void (*run_fn)(void *ctx, int v);

static float time_median(run_fn run, void *ctx, int v)
{
    float *ms = malloc((size_t)g_reps * sizeof(float));
    for (int i = 0; i < 3; i++)
        run(ctx, v);
    for (int i = 0; i < g_reps; i++) {
        CK(cudaMemsetAsync(g_flush, i & 0xff, FLUSH_BYTES, NULL));
        CK(cudaEventRecord(g_e0, NULL));
        run(ctx, v);
        CK(cudaEventRecord(g_e1, NULL));
        CK(cudaEventSynchronize(g_e1));
        CK(cudaEventElapsedTime(&ms[i], g_e0, g_e1));
    }
    qsort(ms, (size_t)g_reps, sizeof(float), bench_cmpf);
    float m = ms[g_reps / 2];
    free(ms);
    return m * 1000.0f;   /* us */
}

typedef struct dense_ctx {
    cu_mm   mm;
    xq_set *x;
} dense_ctx;

/* v: 1 = v1, 2 = v2 as the backend runs it, 3 = v2 kept off its staged
 * path, 4/5 = v2 with 1/4 rows a lane group (one column), 6/7 = v1 with
 * 2/8 units a lane in flight (one column; v1's default is 4), 8 = v1 with
 * Q4_K's 32-byte units (one column), 9 = v1 with a warp's lanes on one
 * sub-block pair (Q4_K/Q5_K, one column: cu_mm.gemv_order), 10/11/12 =
 * v1 handing one-column K-quant rows to cuda_gemvq.cu (knob gemv_quad:
 * its own choice of rows a warp, 1, 2), 13/14/15 = the same with x in
 * shared memory (knob gemv_xsmem), 16 = Q8_0's staged kernel (knob
 * gemv_staged; 10/11/12 its default rows a warp, 1, 2) at 4 rows a warp */
static void run_dense(void *p, int v)
{
    dense_ctx *c = p;
    c->mm.gemv_direct = v == 3;
    c->mm.gemv_rows = v == 4 || v == 11 || v == 14 ? 1 : v == 5 || v == 16 ? 4 : v == 12 || v == 15 ? 2 : 0;
    c->mm.gemv_quad = v >= 10;
    c->mm.gemv_xs = v >= 13;
    c->mm.gemv_st = v >= 10;
    c->mm.gemv_unroll = v == 6 ? 2 : v == 7 ? 8 : 0;
    c->mm.gemv_wide = v == 8;
    c->mm.gemv_order = v == 9;
    int e = v >= 2 && v <= 5 ? si_cu_matmul_q8(&c->mm, c->x->q, c->x->d, c->x->s, NULL)
                   : si_cu_matmul_q8_v1(&c->mm, c->x->q, c->x->d, c->x->s, NULL);
    CK((cudaError_t)e);
}

/* max |a - b| / max |b| over n floats on the device. */
static double rel_diff(const float *da, const float *db, size_t n)
{
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    CK(cudaMemcpy(a, da, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b, db, n * sizeof(float), cudaMemcpyDeviceToHost));
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md || d != d ? d : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    free(a);
    free(b);
    return mb > 0 ? md / mb : md;
}

static int g_bad;

static void bench_dense(const char *what, uint32_t t, int64_t rows, int64_t in)
{
    uint8_t *w = make_weights(t, in, rows);
    const double gb = (double)bench_row_bytes(t, in) * (double)rows / 1e9;
    const int ncs[] = { 1, 2, 8 };
    for (int k = 0; k < 3; k++) {
        const int64_t nc = ncs[k];
        xq_set x = make_x(in, nc);
        float *y1, *y2;
        CK(cudaMalloc((void **)&y1, (size_t)(rows * nc) * sizeof(float)));
        CK(cudaMalloc((void **)&y2, (size_t)(rows * nc) * sizeof(float)));
        dense_ctx c = { .x = &x };
        c.mm = (cu_mm){ .w = w, .type = t, .in = in, .rows = rows, .row_bytes = (uint64_t)bench_row_bytes(t, in),
                        .x_div = 1, .x_stride = in, .y = y1, .y_stride = rows, .ncols = nc };
        const float us1 = time_median(run_dense, &c, 1);
        const float u2 = nc == 1 ? time_median(run_dense, &c, 6) : 0.0f;
        const float u8 = nc == 1 ? time_median(run_dense, &c, 7) : 0.0f;
        const float uw = nc == 1 && t == SI_TYPE_Q4_K ? time_median(run_dense, &c, 8) : 0.0f;
        c.mm.y = y2;
        /* (the ordered units, checked against v1 like v2's variants) */
        double rd = 0;
        float uo = 0.0f;
        if (nc == 1 && (t == SI_TYPE_Q4_K || t == SI_TYPE_Q5_K)) {
            uo = time_median(run_dense, &c, 9);
            CK(cudaDeviceSynchronize());
            rd = rel_diff(y2, y1, (size_t)(rows * nc));
        }
        /* cuda_gemvq.cu (checked against v1: another f32 order) */
        float uq[6] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
        cu_mm qm = c.mm;
        qm.gemv_quad = true;
        qm.gemv_st = true;
        /* (Q8_0: default, 1, 2, 4 rows a warp; x is always in shared memory) */
        static const int vk[] = { 10, 11, 12, 13, 14, 15 }, v8[] = { 10, 11, 12, 16 };
        const int nq = t == SI_TYPE_Q8_0 ? 4 : 6;
        if (nc == 1 && si_cu_gemvq_ok(&qm))
            for (int k2 = 0; k2 < nq; k2++) {
                uq[k2] = time_median(run_dense, &c, t == SI_TYPE_Q8_0 ? v8[k2] : vk[k2]);
                CK(cudaDeviceSynchronize());
                rd = fmax(rd, rel_diff(y2, y1, (size_t)(rows * nc)));
            }
        /* the variants of v2 (checked against v1 one by one), then v2 as
         * the backend runs it, last, so y2 holds its result */
        static const int vs[] = { 3, 4, 5, 2 };
        static const char *const vn[] = { "direct", "R=1", "R=4", "v2" };
        float us[4];
        for (int k2 = 0; k2 < 4; k2++) {
            us[k2] = nc == 1 || vs[k2] < 4 ? time_median(run_dense, &c, vs[k2]) : 0.0f;
            CK(cudaDeviceSynchronize());
            rd = fmax(rd, rel_diff(y2, y1, (size_t)(rows * nc)));
        }
        const bool ok = rd < 1e-4;
        g_bad += !ok;
        printf("%-4s rows %6lld in %5lld ncols %lld: v2 %8.2f us %5.0f GB/s | v1 %8.2f us %5.0f GB/s | v2/v1 x%.2f |",
               tname(t), (long long)rows, (long long)in, (long long)nc, us[3], gb / (us[3] * 1e-6), us1,
               gb / (us1 * 1e-6), us1 / us[3]);
        for (int k2 = 0; k2 < 3; k2++)
            if (us[k2] > 0)
                printf(" %s %.0f", vn[k2], gb / (us[k2] * 1e-6));
        if (u2 > 0)
            printf(" GB/s | v1 U=2 %.0f U=8 %.0f", gb / (u2 * 1e-6), gb / (u8 * 1e-6));
        if (uw > 0)
            printf(" wide %.0f", gb / (uw * 1e-6));
        if (uo > 0)
            printf(" ordered %.0f", gb / (uo * 1e-6));
        if (uq[0] > 0 && t == SI_TYPE_Q8_0)
            printf(" GB/s | staged %.2f us %.0f (R=1 %.0f R=2 %.0f R=4 %.0f)", uq[0], gb / (uq[0] * 1e-6),
                   gb / (uq[1] * 1e-6), gb / (uq[2] * 1e-6), gb / (uq[3] * 1e-6));
        else if (uq[0] > 0)
            printf(" GB/s | quad %.2f us %.0f (R=1 %.0f R=2 %.0f) xsmem %.2f us %.0f (R=1 %.0f R=2 %.0f)", uq[0],
                   gb / (uq[0] * 1e-6), gb / (uq[1] * 1e-6), gb / (uq[2] * 1e-6), uq[3], gb / (uq[3] * 1e-6),
                   gb / (uq[4] * 1e-6), gb / (uq[5] * 1e-6));
        printf(" GB/s  (%s; %.1f MB; v2-v1 %.1e%s)\n", what, gb * 1e3, rd, ok ? "" : " MISMATCH");
        fflush(stdout);
        cudaFree(y1);
        cudaFree(y2);
        free_x(&x);
    }
    cudaFree(w);
}

/* ---- products of one input: one v1 launch (cu_mm.more) vs one each ---- */
typedef struct group_ctx {
    cu_mm   all;      /* part 0 + more                                   */
    xq_set *x;
} group_ctx;

static void run_group(void *p, int v)
{
    group_ctx *c = p;
    c->all.gemv_quad = v >= 3;
    c->all.gemv_xs = v == 4;   /* (4: quad with x in shared memory) */
    c->all.gemv_st = v >= 3;   /* (Q8_0: 3 and 4 are both the staged kernel) */
    if (v >= 2) {
        CK((cudaError_t)si_cu_matmul_q8_v1(&c->all, c->x->q, c->x->d, c->x->s, NULL));
        return;
    }
    cu_mm one = c->all;
    one.n_more = 0;
    CK((cudaError_t)si_cu_matmul_q8_v1(&one, c->x->q, c->x->d, c->x->s, NULL));
    for (int k = 0; k < c->all.n_more; k++) {
        one.w = c->all.more[k].w;
        one.y = c->all.more[k].y;
        one.rows = c->all.more[k].rows;
        one.row_bytes = c->all.more[k].row_bytes;
        one.y_stride = c->all.more[k].y_stride;
        CK((cudaError_t)si_cu_matmul_q8_v1(&one, c->x->q, c->x->d, c->x->s, NULL));
    }
}

/* rows[0..n) products of `in` of type t, one column. */
static void bench_group(const char *what, uint32_t t, int64_t in, const int64_t *rows, int n)
{
    const int64_t rb = bench_row_bytes(t, in);
    int64_t tot = 0;
    uint8_t *w[1 + CU_MM_MORE];
    for (int k = 0; k < n; k++) {
        w[k] = make_weights(t, in, rows[k]);
        tot += rows[k];
    }
    xq_set x = make_x(in, 1);
    float *y1, *y2;
    CK(cudaMalloc((void **)&y1, (size_t)tot * sizeof(float)));
    CK(cudaMalloc((void **)&y2, (size_t)tot * sizeof(float)));
    group_ctx c = { .x = &x };
    c.all = (cu_mm){ .w = w[0], .type = t, .in = in, .rows = rows[0], .row_bytes = (uint64_t)rb, .x_div = 1,
                     .x_stride = in, .y = y1, .y_stride = rows[0], .ncols = 1, .n_more = n - 1 };
    for (int k = 1, off = (int)rows[0]; k < n; off += (int)rows[k], k++)
        c.all.more[k - 1] = (cu_mm_part){ w[k], y1 + off, rows[k], (uint64_t)rb, rows[k], NULL };
    const float us1 = time_median(run_group, &c, 1);
    CK(cudaMemcpy(y2, y1, (size_t)tot * sizeof(float), cudaMemcpyDeviceToDevice));
    CK(cudaMemset(y1, 0, (size_t)tot * sizeof(float)));
    const float us2 = time_median(run_group, &c, 2);
    CK(cudaDeviceSynchronize());
    const double rd = rel_diff(y1, y2, (size_t)tot);
    bool ok = rd == 0.0;   /* same kernel, same rows: the same bits */
    /* one launch through cuda_gemvq.cu (another f32 order than v1) */
    c.all.gemv_quad = true;
    c.all.gemv_st = true;
    const bool qok = si_cu_gemvq_ok(&c.all);
    c.all.gemv_quad = false;
    c.all.gemv_st = false;
    float us3 = 0.0f, us4 = 0.0f;
    if (qok) {
        us3 = time_median(run_group, &c, 3);
        CK(cudaDeviceSynchronize());
        ok = ok && rel_diff(y1, y2, (size_t)tot) < 1e-4;
        us4 = time_median(run_group, &c, 4);
        CK(cudaDeviceSynchronize());
        ok = ok && rel_diff(y1, y2, (size_t)tot) < 1e-4;
    }
    g_bad += !ok;
    const double gb = (double)rb * (double)tot / 1e9;
    printf("group %-34s %d x %s in %5lld: one launch %7.2f us %5.0f GB/s | %d launches %7.2f us %5.0f GB/s | x%.2f",
           what, n, tname(t), (long long)in, us2, gb / (us2 * 1e-6), n, us1, gb / (us1 * 1e-6), us1 / us2);
    if (us3 > 0)
        printf(" | quad one launch %7.2f us %5.0f GB/s, xsmem %7.2f us %5.0f GB/s", us3, gb / (us3 * 1e-6), us4,
               gb / (us4 * 1e-6));
    printf("%s\n", ok ? "" : " MISMATCH");
    fflush(stdout);
    for (int k = 0; k < n; k++)
        cudaFree(w[k]);
    cudaFree(y1);
    cudaFree(y2);
    free_x(&x);
}

/* ---- MoE decode (35b-a3b: H 2048, 256 experts, 8 used, F = Fs = 512) ---- */
typedef struct moe_ctx {
    cu_mm   gate, up, down, sgate, sup, sdown;
    xq_set *h, *g, *gs;
} moe_ctx;

static void mm_pair(const cu_mm *a, const cu_mm *b, const xq_set *x, int v)
{
    if (v == 2) {   /* stacked: one launch, as moe_exec's gate_up_run */
        cu_mm m = *a;
        m.w2 = b->w;
        m.rows_split = a->rows;
        m.rows = a->rows + b->rows;
        CK((cudaError_t)si_cu_matmul_q8(&m, x->q, x->d, x->s, NULL));
    } else {
        CK((cudaError_t)si_cu_matmul_q8_v1(a, x->q, x->d, x->s, NULL));
        CK((cudaError_t)si_cu_matmul_q8_v1(b, x->q, x->d, x->s, NULL));
    }
}

static void run_moe(void *p, int v)
{
    moe_ctx *c = p;
    mm_pair(&c->gate, &c->up, c->h, v);
    mm_pair(&c->sgate, &c->sup, c->h, v);
    /* (the down inputs are fixed quantised columns here: the SwiGLU and
     * the quantisation between are not what is measured) */
    int (*f)(const cu_mm *, const int8_t *, const float *, const float *, void *) =
        v == 2 ? si_cu_matmul_q8 : si_cu_matmul_q8_v1;
    CK((cudaError_t)f(&c->down, c->g->q, c->g->d, c->g->s, NULL));
    CK((cudaError_t)f(&c->sdown, c->gs->q, c->gs->d, c->gs->s, NULL));
}

static void bench_moe(void)
{
    const int64_t H = 2048, E = 256, K = 8, F = 512;
    const uint32_t t = SI_TYPE_Q4_K;
    const int64_t rb_up = bench_row_bytes(t, H), rb_dn = bench_row_bytes(t, F);
    uint8_t *wg = make_weights(t, H, E * F), *wu = make_weights(t, H, E * F), *wd = make_weights(t, F, E * H);
    uint8_t *sg = make_weights(t, H, F), *su = make_weights(t, H, F), *sd = make_weights(t, F, H);
    int32_t sel[8], *dsel;
    for (int k = 0; k < K; k++) {
        int32_t e;
        bool dup;
        do {
            e = (int32_t)(r32() % (uint32_t)E);
            dup = false;
            for (int j = 0; j < k; j++)
                dup |= sel[j] == e;
        } while (dup);
        sel[k] = e;
    }
    CK(cudaMalloc((void **)&dsel, sizeof sel));
    CK(cudaMemcpy(dsel, sel, sizeof sel, cudaMemcpyHostToDevice));
    xq_set h = make_x(H, 1), g = make_x(F, K), gs = make_x(F, 1);
    float *gu, *sgu, *y, *ys;
    CK(cudaMalloc((void **)&gu, (size_t)(K * 2 * F) * sizeof(float)));
    CK(cudaMalloc((void **)&sgu, (size_t)(2 * F) * sizeof(float)));
    CK(cudaMalloc((void **)&y, (size_t)(K * H) * sizeof(float)));
    CK(cudaMalloc((void **)&ys, (size_t)H * sizeof(float)));
    moe_ctx c = { .h = &h, .g = &g, .gs = &gs };
    const cu_mm base_up = { .type = t, .in = H, .rows = F, .row_bytes = (uint64_t)rb_up, .x_div = K,
                            .expert = dsel, .expert_bytes = (uint64_t)(rb_up * F), .y_stride = 2 * F, .ncols = K };
    c.gate = base_up;
    c.gate.w = wg;
    c.gate.y = gu;
    c.up = base_up;
    c.up.w = wu;
    c.up.y = gu + F;
    c.down = (cu_mm){ .w = wd, .type = t, .in = F, .rows = H, .row_bytes = (uint64_t)rb_dn, .x_div = 1,
                      .expert = dsel, .expert_bytes = (uint64_t)(rb_dn * H), .y = y, .y_stride = H, .ncols = K };
    c.sgate = (cu_mm){ .w = sg, .type = t, .in = H, .rows = F, .row_bytes = (uint64_t)rb_up, .x_div = 1,
                       .y = sgu, .y_stride = 2 * F, .ncols = 1 };
    c.sup = c.sgate;
    c.sup.w = su;
    c.sup.y = sgu + F;
    c.sdown = (cu_mm){ .w = sd, .type = t, .in = F, .rows = H, .row_bytes = (uint64_t)rb_dn, .x_div = 1,
                       .y = ys, .y_stride = H, .ncols = 1 };
    const double gb = ((double)K * (2 * F * rb_up + H * rb_dn) + 2 * F * rb_up + H * rb_dn) / 1e9;
    const float us1 = time_median(run_moe, &c, 1);
    float *ref = NULL;
    CK(cudaMalloc((void **)&ref, (size_t)(K * 2 * F) * sizeof(float)));
    CK(cudaMemcpy(ref, gu, (size_t)(K * 2 * F) * sizeof(float), cudaMemcpyDeviceToDevice));
    const float us2 = time_median(run_moe, &c, 2);
    CK(cudaDeviceSynchronize());
    const double rd = rel_diff(gu, ref, (size_t)(K * 2 * F));
    const bool ok = rd < 1e-4;
    g_bad += !ok;
    printf("MoE decode 35b-a3b (Q4_K, 8 of 256 experts + shared, 1 token): v2 %.2f us (4 launches) %.0f GB/s | "
           "v1 %.2f us (6 launches) %.0f GB/s | x%.2f  (%.1f MB; gate/up v2-v1 %.1e%s)\n",
           us2, gb / (us2 * 1e-6), us1, gb / (us1 * 1e-6), us1 / us2, gb * 1e3, rd, ok ? "" : " MISMATCH");
    cudaFree(ref);
    cudaFree(gu);
    cudaFree(sgu);
    cudaFree(y);
    cudaFree(ys);
    cudaFree(dsel);
    free_x(&h);
    free_x(&g);
    free_x(&gs);
    cudaFree(wg);
    cudaFree(wu);
    cudaFree(wd);
    cudaFree(sg);
    cudaFree(su);
    cudaFree(sd);
}

/* ---- decode-like chains under a captured graph -------------------------
 * Where a decode step's product time goes: `layers` layers of two products
 * each (A: a fused pair of rows ra0 + ra1 over `in_a`, then B: rows rb over
 * in_b = ra0), every weight its own memory (the chain is larger than the
 * L2, as a step's weights are), optionally with an activation quantiser
 * launch after each product (decode's norm / SwiGLU kernels sit there).
 * Captured once into a graph and replayed; each replay timed alone, the
 * median of g_reps.  Modes: graph with programmatic launch (the backend's
 * default), graph without it, plain stream launches.  Against it, one
 * launch of the same bytes per type ("one"), the kernel's steady state.
 * Weights and x never change: the figures are timing only. */
typedef struct chain_ctx {
    cu_mm        *mm;     /* 2 * layers products                      */
    int           n;
    xq_set       *xa, *xb;
    bool          quant;
    cudaStream_t  st;
} chain_ctx;

static void chain_launches(const chain_ctx *c)
{
    for (int i = 0; i < c->n; i++) {
        const xq_set *x = i % 2 == 0 ? c->xa : c->xb;
        CK((cudaError_t)si_cu_matmul_q8_v1(&c->mm[i], x->q, x->d, x->s, c->st));
        if (c->quant) {
            /* (the next product's input: a quantiser launch, as decode's
             * norm or SwiGLU; it reads this product's output) */
            const xq_set *nx = i % 2 == 0 ? c->xb : c->xa;
            const int64_t in = i % 2 == 0 ? c->mm[i + 1].in : c->mm[(i + 1) % c->n].in;
            CK((cudaError_t)si_cu_quantize_x(c->mm[i].y, in, in, 1, nx->q, nx->d, nx->s, c->st));
        }
    }
}

static float chain_time(chain_ctx *c, int mode)
{
    si_cu_pdl_set(mode == 0);
    cudaGraphExec_t ge = NULL;
    if (mode <= 1) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
        chain_launches(c);
        CK(cudaStreamEndCapture(c->st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphDestroy(g));
    }
    float *ms = malloc((size_t)g_reps * sizeof(float));
    for (int i = 0; i < 3 + g_reps; i++) {
        CK(cudaEventRecord(g_e0, c->st));
        if (ge != NULL)
            CK(cudaGraphLaunch(ge, c->st));
        else
            chain_launches(c);
        CK(cudaEventRecord(g_e1, c->st));
        CK(cudaEventSynchronize(g_e1));
        if (i >= 3)
            CK(cudaEventElapsedTime(&ms[i - 3], g_e0, g_e1));
    }
    if (ge != NULL)
        CK(cudaGraphExecDestroy(ge));
    si_cu_pdl_set(true);
    qsort(ms, (size_t)g_reps, sizeof(float), bench_cmpf);
    const float m = ms[g_reps / 2];
    free(ms);
    return m * 1000.0f;
}

static int g_st6 = 1;   /* knob gemv_staged_q6 in chain_mm's products: 1 true, 0 false */

static cu_mm chain_mm(uint32_t t, int64_t in, int64_t rows, const uint8_t *w, float *y)
{
    return (cu_mm){ .w = w, .type = t, .in = in, .rows = rows, .row_bytes = (uint64_t)bench_row_bytes(t, in),
                    .x_div = 1, .x_stride = in, .y = y, .y_stride = rows, .ncols = 1, .gemv_quad = true,
                    .gemv_qn = true, .gemv_xs = true, .gemv_warps = 8, .gemv_st = true,
                    .gemv_st6 = g_st6 };
}

static void bench_chain(const char *what, uint32_t ta, int64_t in_a, int64_t ra0, int64_t ra1, uint32_t tb,
                        int64_t rb, int layers)
{
    const int n = 2 * layers;
    cu_mm *mm = calloc((size_t)n, sizeof *mm);
    uint8_t **w = calloc((size_t)(3 * layers), sizeof *w);
    float *y;
    const int64_t ymax = ra0 + ra1 > rb ? ra0 + ra1 : rb;
    CK(cudaMalloc((void **)&y, (size_t)(n * ymax) * sizeof(float)));
    CK(cudaMemset(y, 0, (size_t)(n * ymax) * sizeof(float)));
    double bytes = 0;
    for (int l = 0; l < layers; l++) {
        w[3 * l] = make_weights(ta, in_a, ra0);
        cu_mm a = chain_mm(ta, in_a, ra0, w[3 * l], y + (size_t)(2 * l) * ymax);
        if (ra1 > 0) {
            w[3 * l + 1] = make_weights(ta, in_a, ra1);
            a.n_more = 1;
            a.more[0] = (cu_mm_part){ w[3 * l + 1], a.y + ra0, ra1, a.row_bytes, ra1, NULL };
        }
        w[3 * l + 2] = make_weights(tb, ra0, rb);
        mm[2 * l] = a;
        mm[2 * l + 1] = chain_mm(tb, ra0, rb, w[3 * l + 2], y + (size_t)(2 * l + 1) * ymax);
        bytes += (double)bench_row_bytes(ta, in_a) * (double)(ra0 + ra1) + (double)bench_row_bytes(tb, ra0) * rb;
    }
    xq_set xa = make_x(in_a, 1), xb = make_x(ra0, 1);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    chain_ctx c = { .mm = mm, .n = n, .xa = &xa, .xb = &xb, .st = st };
    printf("chain %-22s %2d x (%s %lld+%lld x %lld, %s %lld x %lld), %.0f MB:", what, layers, tname(ta),
           (long long)ra0, (long long)ra1, (long long)in_a, tname(tb), (long long)rb, (long long)ra0, bytes / 1e6);
    static const char *mname[] = { "graph+pdl", "graph", "stream" };
    for (int q = 0; q < 2; q++) {
        c.quant = q == 1;
        for (int mode = 0; mode < 3; mode++) {
            const float us = chain_time(&c, mode);
            printf(" | %s%s %.1f us %.0f GB/s", mname[mode], q ? "+q" : "", us, bytes / (us * 1e-6) / 1e9);
        }
    }
    printf(" | at 4.3 TB/s %.1f us\n", bytes / 4.3e12 * 1e6);
    fflush(stdout);
    CK(cudaStreamDestroy(st));
    for (int i = 0; i < 3 * layers; i++)
        if (w[i] != NULL)
            cudaFree(w[i]);
    free(w);
    free(mm);
    cudaFree(y);
    free_x(&xa);
    free_x(&xb);
}

/* One launch of `rows` rows, the L2 flushed before it (time_median): the
 * kernel's steady state at a large size, its ramp and tail at a small one. */
static void run_one(void *p, int v)
{
    (void)v;
    const chain_ctx *c = p;
    CK((cudaError_t)si_cu_matmul_q8_v1(c->mm, c->xa->q, c->xa->d, c->xa->s, NULL));
}

static void bench_one(const char *what, uint32_t t, int64_t in, int64_t rows)
{
    uint8_t *w = make_weights(t, in, rows);
    float *y;
    CK(cudaMalloc((void **)&y, (size_t)rows * sizeof(float)));
    xq_set x = make_x(in, 1);
    cu_mm m = chain_mm(t, in, rows, w, y);
    chain_ctx c = { .mm = &m, .n = 1, .xa = &x, .xb = &x };
    const float us = time_median(run_one, &c, 0);
    const char *same = "";
    if (t == SI_TYPE_Q6_K) {   /* g6_kernel and gq_kernel: the same bits */
        float *y2;
        CK(cudaMalloc((void **)&y2, (size_t)rows * sizeof(float)));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y2, y, (size_t)rows * sizeof(float), cudaMemcpyDeviceToDevice));
        m.gemv_st6 = !m.gemv_st6;
        run_one(&c, 0);
        CK(cudaDeviceSynchronize());
        const bool ok = rel_diff(y, y2, (size_t)rows) == 0.0;
        g_bad += !ok;
        same = ok ? " (same bits with gemv_staged_q6 flipped)" : " MISMATCH with gemv_staged_q6 flipped";
        cudaFree(y2);
    }
    const double bytes = (double)bench_row_bytes(t, in) * (double)rows;
    printf("one   %-22s %s%s %lld x %lld, %.0f MB: %.1f us %.0f GB/s%s\n", what, tname(t),
           t == SI_TYPE_Q6_K && !g_st6 ? " (gemv_staged_q6 off)" : "", (long long)rows, (long long)in, bytes / 1e6,
           us, bytes / (us * 1e-6) / 1e9, same);
    fflush(stdout);
    cudaFree(w);
    cudaFree(y);
    free_x(&x);
}

/* Knob gemv_mma: one dense product of 2, 4 and 8 columns on the dp4a
 * kernels (gemv_mma off: gq_kernel for K-quants, v1 for Q8_0) and on
 * cuda_gemvm.cu with 1 and 2 row tiles a warp (cu_mm.gemv_rows), L2
 * flushed before each launch; GB/s is weight bytes over the time.
 * (argument 2 "cols": only these) */
static void bench_cols(const char *what, uint32_t t, int64_t in, int64_t rows)
{
    uint8_t *w = make_weights(t, in, rows);
    float *y;
    CK(cudaMalloc((void **)&y, (size_t)(rows * 8) * sizeof(float)));
    const double bytes = (double)bench_row_bytes(t, in) * (double)rows;
    printf("cols  %-18s %s %lld x %lld, %.0f MB:", what, tname(t), (long long)rows, (long long)in, bytes / 1e6);
    static const int ncs[] = { 2, 4, 8 };
    for (int k = 0; k < 3; k++) {
        xq_set x = make_x(in, ncs[k]);
        cu_mm m = chain_mm(t, in, rows, w, y);
        m.ncols = ncs[k];
        chain_ctx c = { .mm = &m, .n = 1, .xa = &x, .xb = &x };
        printf(" | n%d", ncs[k]);
        for (int v = 0; v < 3; v++) {
            m.gemv_mma = v > 0;
            m.gemv_rows = v;
            const float us = time_median(run_one, &c, 0);
            printf(" %s %.1f us %.0f", v == 0 ? "dp4a" : v == 1 ? "R1" : "R2", us,
                   bytes / (us * 1e-6) / 1e9);
        }
        free_x(&x);
    }
    printf(" GB/s\n");
    fflush(stdout);
    cudaFree(w);
    cudaFree(y);
}

/* Knob gemv_mma_wide: one dense product of 8, 16, 24 and 32 columns on
 * the prefill GEMM (mma_tile v2 on the GGUF weights, exact) and on
 * cuda_gemvm.cu (8 columns: gm_kernel; more: gx_kernel with its row tiles
 * a block by the rows, then 2 and 8: cu_mm.gemv_rows), L2 flushed
 * before each launch; GB/s is weight bytes over the time; "d" the largest
 * relative difference of the GEMV's results from the GEMM's (another f32
 * order).  (argument 2 "wide") */
static void run_wide(void *p, int v)
{
    const chain_ctx *c = p;
    if (v == 0)
        CK((cudaError_t)si_cu_matmul_mma2(c->mm, c->xa->q, c->xa->d, c->xa->s, NULL));
    else
        CK((cudaError_t)si_cu_gemvm(c->mm, c->xa->q, c->xa->d, c->xa->s, NULL));
}

static void bench_wide(const char *what, uint32_t t, int64_t in, int64_t rows)
{
    uint8_t *w = make_weights(t, in, rows);
    float *y, *y0;
    CK(cudaMalloc((void **)&y, (size_t)(rows * 32) * sizeof(float)));
    CK(cudaMalloc((void **)&y0, (size_t)(rows * 32) * sizeof(float)));
    const double bytes = (double)bench_row_bytes(t, in) * (double)rows;
    printf("wide  %-18s %s %lld x %lld, %.0f MB:", what, tname(t), (long long)rows, (long long)in, bytes / 1e6);
    static const int ncs[] = { 8, 16, 24, 32 };
    for (int k = 0; k < 4; k++) {
        xq_set x = make_x(in, ncs[k]);
        cu_mm m = chain_mm(t, in, rows, w, y);
        m.ncols = ncs[k];
        m.gemv_mma = true;
        chain_ctx c = { .mm = &m, .n = 1, .xa = &x, .xb = &x };
        printf(" | n%d", ncs[k]);
        double d = 0.0;
        static const char *const arm[] = { "gemm", "gm", "rt2", "rt8" };
        for (int v = 0; v < (ncs[k] > 8 ? 4 : 2); v++) {
            m.gemv_rows = v < 2 ? 0 : v == 2 ? 2 : 8;
            if (v == 0 && !si_cu_mma_ok(&m)) {
                printf(" gemm -");
                continue;
            }
            const float us = time_median(run_wide, &c, v);
            printf(" %s %.1f us %.0f", arm[v], us, bytes / (us * 1e-6) / 1e9);
            CK(cudaDeviceSynchronize());
            if (v == 0)
                CK(cudaMemcpy(y0, y, (size_t)(rows * ncs[k]) * sizeof(float), cudaMemcpyDeviceToDevice));
            else if (si_cu_mma_ok(&m))
                d = fmax(d, rel_diff(y, y0, (size_t)(rows * ncs[k])));
        }
        printf(" d %.1e", d);
        free_x(&x);
    }
    printf(" GB/s\n");
    fflush(stdout);
    cudaFree(w);
    cudaFree(y);
    cudaFree(y0);
}

int main(int argc, char **argv)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no usable CUDA device\n");
        return 77;
    }
    if (argc > 1 && atoi(argv[1]) >= 1)
        g_reps = atoi(argv[1]);
    const bool chain_only = argc > 2 && strcmp(argv[2], "chain") == 0;
    struct cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("bench_gemv: %s, %d SMs, L2 %d MB; median of %d launches (3 warm-up), L2 flushed before each\n", p.name,
           p.multiProcessorCount, p.l2CacheSize >> 20, g_reps);
    CK(cudaMalloc(&g_flush, FLUSH_BYTES));
    CK(cudaEventCreate(&g_e0));
    CK(cudaEventCreate(&g_e1));
    /* the tensor-core GEMVs at the models' decode shapes (argument 2
     * "cols": 2..8 columns against dp4a; "wide": 8..32 against the GEMM) */
    const bool wide = argc > 2 && strcmp(argv[2], "wide") == 0;
    if (wide || (argc > 2 && strcmp(argv[2], "cols") == 0)) {
        static const struct {
            const char *what;
            uint32_t    t;
            int64_t     in, rows;
        } sh[] = {
            { "9b ffn gate", SI_TYPE_Q4_K, 4096, 12288 },    { "9b ffn down", SI_TYPE_Q4_K, 12288, 4096 },
            { "9b ffn down", SI_TYPE_Q6_K, 12288, 4096 },    { "9b attn 4096", SI_TYPE_Q4_K, 4096, 4096 },
            { "9b gdn qkv", SI_TYPE_Q5_K, 4096, 8192 },      { "9b output", SI_TYPE_Q6_K, 4096, 248320 },
            { "35b gdn qkv+z", SI_TYPE_Q8_0, 2048, 12352 },  { "35b gdn out", SI_TYPE_Q8_0, 4096, 2048 },
            { "35b output", SI_TYPE_Q6_K, 2048, 248320 },
        };
        for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++)
            (wide ? bench_wide : bench_cols)(sh[i].what, sh[i].t, sh[i].in, sh[i].rows);
        return g_bad ? 1 : 0;
    }
    /* decode-like chains (argument 2 "chain": only these) */
    bench_chain("9b ffn, Q4_K down", SI_TYPE_Q4_K, 4096, 12288, 12288, SI_TYPE_Q4_K, 4096, 8);
    bench_chain("9b ffn, Q6_K down", SI_TYPE_Q4_K, 4096, 12288, 12288, SI_TYPE_Q6_K, 4096, 8);
    g_st6 = 0;
    bench_chain("9b ffn, Q6_K dn, st6 off", SI_TYPE_Q4_K, 4096, 12288, 12288, SI_TYPE_Q6_K, 4096, 8);
    g_st6 = 1;
    /* single products: the Q6_K ones with gemv_staged_q6 off, then (the
     * output matrices) on; then each type's steady state and a layer's */
    static const struct {
        const char *what;
        uint32_t    t;
        int64_t     in, rows;
        int         st6;
    } one[] = {
        { "Q6_K steady", SI_TYPE_Q6_K, 12288, 32768, 0 },      { "Q6_K 41 MB", SI_TYPE_Q6_K, 12288, 4096, 0 },
        { "Q6_K 9b output", SI_TYPE_Q6_K, 4096, 248320, 0 },   { "Q6_K 35b output", SI_TYPE_Q6_K, 2048, 248320, 0 },
        { "Q6_K 9b output", SI_TYPE_Q6_K, 4096, 248320, 1 },   { "Q6_K 35b output", SI_TYPE_Q6_K, 2048, 248320, 1 },
        { "Q4_K steady", SI_TYPE_Q4_K, 4096, 196608, 1 },      { "Q4_K 28 MB", SI_TYPE_Q4_K, 4096, 12288, 1 },
        { "Q6_K steady", SI_TYPE_Q6_K, 12288, 32768, 1 },      { "Q6_K 41 MB", SI_TYPE_Q6_K, 12288, 4096, 1 },
        { "Q8_0 steady", SI_TYPE_Q8_0, 2048, 196608, 1 },      { "Q8_0 17 MB", SI_TYPE_Q8_0, 2048, 8192, 1 },
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++) {
        g_st6 = one[i].st6;
        bench_one(one[i].what, one[i].t, one[i].in, one[i].rows);
    }
    g_st6 = 1;
    bench_chain("9b attn q+g / o", SI_TYPE_Q4_K, 4096, 8192, 0, SI_TYPE_Q4_K, 4096, 16);
    bench_chain("35b gdn qkv+z / out", SI_TYPE_Q8_0, 2048, 8192, 4096, SI_TYPE_Q8_0, 2048, 16);
    if (chain_only)
        return g_bad ? 1 : 0;
    /* 9b: n_embd 4096, n_ff 12288, output 248320 x 4096 */
    bench_dense("9b ffn gate/up", SI_TYPE_Q4_K, 12288, 4096);
    bench_dense("9b ffn down", SI_TYPE_Q4_K, 4096, 12288);
    bench_dense("9b output", SI_TYPE_Q6_K, 248320, 4096);
    bench_dense("9b ffn gate/up", SI_TYPE_Q5_K, 12288, 4096);
    bench_dense("9b ffn down", SI_TYPE_Q6_K, 4096, 12288);
    bench_dense("9b-shaped", SI_TYPE_Q8_0, 12288, 4096);
    bench_dense("9b attn/gdn 4096x4096", SI_TYPE_Q4_K, 4096, 4096);
    /* 35b-a3b: n_embd 2048, Q8_0 attention/GDN projections, output */
    bench_dense("35b attn q+gate", SI_TYPE_Q8_0, 8192, 2048);
    bench_dense("35b attn out", SI_TYPE_Q8_0, 2048, 4096);
    bench_dense("35b attn k/v", SI_TYPE_Q8_0, 512, 2048);
    bench_dense("35b output", SI_TYPE_Q6_K, 248320, 2048);
    bench_moe();
    /* decode's products of one input (knob gemv_fuse) */
    const int64_t ffn9[] = { 12288, 12288 }, gdn9[] = { 8192, 4096, 32, 32 }, att9[] = { 8192, 1024, 1024 };
    const int64_t att35[] = { 8192, 512, 512 }, gdn35[] = { 8192, 4096 };
    bench_group("9b ffn gate+up", SI_TYPE_Q4_K, 4096, ffn9, 2);
    bench_group("9b GDN qkv+z+beta+alpha", SI_TYPE_Q4_K, 4096, gdn9, 4);
    bench_group("9b attn q+gate, k, v", SI_TYPE_Q4_K, 4096, att9, 3);
    bench_group("35b attn q+gate, k, v", SI_TYPE_Q8_0, 2048, att35, 3);
    bench_group("35b GDN qkv+z", SI_TYPE_Q8_0, 2048, gdn35, 2);
    printf("bench_gemv: %s\n", g_bad ? "v2 and v1 DISAGREE somewhere (see MISMATCH)" : "v2 agrees with v1 everywhere");
    cudaFree(g_flush);
    return g_bad ? 1 : 0;
}
