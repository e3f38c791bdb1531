/* tests/cuda/check_cuda_ops.c — every op of the cuda_sm120 backend against
 * the cpu backend (the reference implementation), on the same inputs.
 *
 * Both plugins are dlopen()ed from the build tree.  The cpu backend runs
 * with matmul = ref (f32 weights, double accumulation) and an f32 KV cache;
 * cuda_sm120 with its f32-accumulating kernels and an f32 KV cache (a
 * second pair of backends compares the f16 caches).  Every output is
 * poisoned with NaN on both sides before each run, so an element the
 * kernel forgot fails; NaN never passes.  Tolerance: max |gpu - cpu| <=
 * tol * max |cpu| over the tensor (1e-4 for f32 math, 1e-3 where weights
 * are quantised or decoded from f16/bf16, and looser only where stated).
 * These exact comparisons run cuda_sm120 with matmul = f32 and
 * prefill_mm = gemv; the dp4a path (int8 activations) has its own cases
 * with the tolerance its rounding needs (see DP4A_TOL), and the int8
 * tensor-core GEMM (prefill_mm = mma) is compared with the cpu backend's
 * own int8 path, which quantises the activations bit for bit the same way
 * (see MMA_TOL).
 *
 * Exits 77 (SKIP) when the cuda_sm120 probe refuses the machine.  Runs
 * with CK_NOFORK: a CUDA context does not survive fork(). */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sparkinfer/plugin.h>

#include "config.h"
#include "host.h"

static void *dl_cpu, *dl_cu;
static const si_plugin *p_cpu, *p_cu;
static si_config *cfg;
static si_host host;
/* SI_CUDA_TEST_AS_CPU=1 loads cpu.so in place of cuda_sm120.so: a check of
 * this test's own logic on machines without a GPU (cpu against cpu must
 * pass); the assertions about cuda-only behaviour are then skipped. */
static bool as_cpu;

/* ---- a pair of backends and tensors mirrored on both ------------------- */

typedef struct pair {
    const struct si_backend_ops *co, *go;
    si_backend *cb, *gb;
} pair;

static void pair_open(pair *p, const char *cpu_sec, const char *cu_sec)
{
    si_err err = { { 0 } };
    p->co = p_cpu->ops;
    p->go = p_cu->ops;
    ck_assert_msg(p->co->open(&host, cpu_sec, &p->cb, &err) == SI_OK, "cpu open: %s", err.msg);
    ck_assert_msg(p->go->open(&host, cu_sec, &p->gb, &err) == SI_OK, "cuda open: %s", err.msg);
}

/* Two cuda_sm120 instances (knob A/B on the GPU; no cpu reference). */
static void pair_open_cu2(pair *p, const char *ref_sec, const char *cu_sec)
{
    si_err err = { { 0 } };
    p->co = p_cu->ops;
    p->go = p_cu->ops;
    ck_assert_msg(p->co->open(&host, ref_sec, &p->cb, &err) == SI_OK, "cuda open %s: %s", ref_sec, err.msg);
    ck_assert_msg(p->go->open(&host, cu_sec, &p->gb, &err) == SI_OK, "cuda open %s: %s", cu_sec, err.msg);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void pair_close(pair *p)
{
    p->co->close(p->cb);
    p->go->close(p->gb);
}

typedef struct dt {
    si_buf   *cbuf, *gbuf;
    si_tensor c, g;
    uint64_t  bytes;
} dt;

static uint32_t rng_state = 12345u;

static float frand(void)   /* U(-1, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static uint64_t row_bytes(uint32_t type, int64_t ne0)
{
    return (uint64_t)(ne0 / host.type_block_elems(type)) * host.type_block_bytes(type);
}

/* A tensor of `type` [ne0, ne1, ne2] whose bytes are `data` (NULL = NaN
 * poison for an F32 output), allocated and uploaded on both backends. */
static void dt_make(pair *p, dt *t, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, const void *data)
{
    si_err err = { { 0 } };
    memset(t, 0, sizeof *t);
    uint64_t rb = row_bytes(type, ne0);
    t->bytes = rb * (uint64_t)ne1 * (uint64_t)ne2;
    ck_assert_msg(p->co->buf_alloc(p->cb, t->bytes, &t->cbuf, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->buf_alloc(p->gb, t->bytes, &t->gbuf, &err) == SI_OK, "%s", err.msg);
    void *tmp = NULL;
    if (data == NULL) {
        tmp = malloc(t->bytes);
        ck_assert_ptr_nonnull(tmp);
        float *f = tmp;
        for (uint64_t i = 0; i < t->bytes / 4; i++)
            f[i] = NAN;
        data = tmp;
    }
    ck_assert_msg(p->co->upload(p->cb, t->cbuf, 0, data, t->bytes, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->upload(p->gb, t->gbuf, 0, data, t->bytes, &err) == SI_OK, "%s", err.msg);
    free(tmp);
    si_tensor v = { .type = type, .ndim = ne2 > 1 ? 3 : 2, .ne = { ne0, ne1, ne2, 1 },
                    .nb = { host.type_block_bytes(type), rb, rb * (uint64_t)ne1, rb * (uint64_t)ne1 * (uint64_t)ne2 } };
    t->c = v;
    t->c.buf = t->cbuf;
    t->g = v;
    t->g.buf = t->gbuf;
}

/* Random values quantised to `type` (scale times U(-1,1)). */
static void dt_rand(pair *p, dt *t, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, float scale)
{
    int64_t n = ne0 * ne1 * ne2;
    ck_assert_msg(ne0 % host.type_block_elems(type) == 0, "test bug: ne0 %lld vs block of %s", (long long)ne0,
                  host.type_name(type));
    float *f = malloc((size_t)n * sizeof *f);
    ck_assert_ptr_nonnull(f);
    for (int64_t i = 0; i < n; i++)
        f[i] = scale * frand();
    void *q = malloc(row_bytes(type, ne0) * (size_t)(ne1 * ne2) + 1);
    ck_assert_ptr_nonnull(q);
    si_err err = { { 0 } };
    ck_assert_msg(host.quant(type, f, q, n, &err) == SI_OK, "quant: %s", err.msg);
    dt_make(p, t, type, ne0, ne1, ne2, q);
    free(q);
    free(f);
}

/* Random BYTES in a block type's layout, for the knob A/Bs at 35b widths
 * that compare two GPU runs bit for bit (~0.8 G weights a pair: the
 * quantizer took minutes): every byte random except each block's f16
 * scales, set to finite values in [2^-11, 2^-10) (weights up to ~1).  Only
 * the types those tests name (the scale offsets are the GGUF layouts). */
static void dt_rand_raw(pair *p, dt *t, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2)
{
    int o[2];   /* byte offsets of the block's f16 scales (-1: none) */
    switch (type) {
    case SI_TYPE_Q4_K:
    case SI_TYPE_Q5_K: o[0] = 0, o[1] = 2; break;
    case SI_TYPE_Q6_K: o[0] = 208, o[1] = -1; break;
    case SI_TYPE_Q8_0: o[0] = 0, o[1] = -1; break;
    default: ck_abort_msg("test bug: dt_rand_raw takes no %s", host.type_name(type)); return;
    }
    const size_t bb = host.type_block_bytes(type), nb = row_bytes(type, ne0) / bb * (size_t)(ne1 * ne2);
    uint8_t *q = malloc(nb * bb);
    ck_assert_ptr_nonnull(q);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ rng_state;
    for (size_t i = 0; i < nb * bb; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;   /* xorshift64 */
        memcpy(q + i, &x, nb * bb - i < 8 ? nb * bb - i : 8);
    }
    rng_state = (uint32_t)x;
    for (size_t b = 0; b < nb; b++) {
        for (int k = 0; k < 2 && o[k] >= 0; k++) {
            uint8_t *B = q + b * bb + o[k];
            const uint16_t h = (uint16_t)(0x1000u | (B[0] | (B[1] << 8)) >> 6);
            memcpy(B, &h, 2);
        }
    }
    dt_make(p, t, type, ne0, ne1, ne2, q);
    free(q);
}

static void dt_free(pair *p, dt *t)
{
    p->co->buf_free(p->cb, t->cbuf);
    p->go->buf_free(p->gb, t->gbuf);
}

/* Downloads both copies (floats) and checks max |g - c| <= tol * max(max
 * |c|, floor); with `print`, says the error even when it passes.  (floor:
 * the typical size of an output where a few outputs may all sit near 0.) */
static void dt_compare_fl(pair *p, const dt *t, double tol, double floor, const char *what, bool print)
{
    si_err err = { { 0 } };
    size_t n = (size_t)(t->bytes / 4);
    float *c = malloc(t->bytes), *g = malloc(t->bytes);
    ck_assert(c != NULL && g != NULL);
    ck_assert_msg(p->co->download(p->cb, c, t->cbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->download(p->gb, g, t->gbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    double mx = 0.0, md = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(c[i]), "%s: cpu value %zu is %g", what, i, (double)c[i]);
        ck_assert_msg(isfinite(g[i]), "%s: cuda value %zu is %g (cpu %g)", what, i, (double)g[i], (double)c[i]);
        mx = fmax(mx, fabs(c[i]));
        double d = fabs((double)g[i] - (double)c[i]);
        if (d > md) {
            md = d;
            at = i;
        }
    }
    if (print)
        printf("%s: max |cuda - cpu| %.3g = %.3g of max |cpu| %.3g (tol %g)\n", what, md, md / fmax(mx, 1e-30), mx,
               tol);
    ck_assert_msg(md <= tol * fmax(fmax(mx, floor), 1e-30),
                  "%s: max |diff| %g at %zu (cpu %g, cuda %g), max |cpu| %g, floor %g, tol %g", what, md, at,
                  (double)c[at], (double)g[at], mx, floor, tol);
    free(c);
    free(g);
}

static void dt_compare_ex(pair *p, const dt *t, double tol, const char *what, bool print)
{
    dt_compare_fl(p, t, tol, 0.0, what, print);
}

static void dt_compare(pair *p, const dt *t, double tol, const char *what)
{
    dt_compare_ex(p, t, tol, what, false);
}

/* dp4a path: the activations are rounded to int8 per 32 (step max|x|/127),
 * a relative error of ~0.4% RMS per element of these U(-1,1) inputs,
 * independent across elements; a dot keeps about that relative error, up
 * to ~1% where Q4_K/Q5_K's min offsets make the terms cancel (the cpu
 * backend's int8 path measures 1.0-1.1% on these cases).  So: ||diff|| /
 * ||cpu|| <= 2e-2 and max |diff| <= 3e-2 max |cpu| (a wrong scale,
 * sub-block or column would be off by O(1)). */
#define DP4A_TOL 3e-2
#define DP4A_RMS 2e-2

static void dt_compare_rms(pair *p, const dt *t, double tol, const char *what)
{
    si_err err = { { 0 } };
    size_t n = (size_t)(t->bytes / 4);
    float *c = malloc(t->bytes), *g = malloc(t->bytes);
    ck_assert(c != NULL && g != NULL);
    ck_assert_msg(p->co->download(p->cb, c, t->cbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->download(p->gb, g, t->gbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    double ss = 0.0, sd = 0.0;
    for (size_t i = 0; i < n; i++) {
        ss += (double)c[i] * c[i];
        sd += ((double)g[i] - c[i]) * ((double)g[i] - c[i]);
    }
    free(c);
    free(g);
    ck_assert_msg(sqrt(sd) <= tol * fmax(sqrt(ss), 1e-30), "%s: relative RMS error %g > %g", what,
                  sqrt(sd / fmax(ss, 1e-300)), tol);
    dt_compare(p, t, tol * (DP4A_TOL / DP4A_RMS), what);
}

/* Runs one op on both backends: `op` holds cpu tensors in c, the cuda ones
 * are made by swapping every dt's view.  Returns both statuses. */
typedef struct opdt {
    si_op op;
    dt   *dst;
    dt   *src[SI_OP_MAX_SRC];
} opdt;

static void run_both(pair *p, opdt *o, int *rc_c, int *rc_g, si_err *ec, si_err *eg)
{
    si_op c = o->op, g = o->op;
    c.dst = o->dst->c;
    g.dst = o->dst->g;
    for (int i = 0; i < SI_OP_MAX_SRC; i++) {
        c.src[i] = o->src[i] ? &o->src[i]->c : NULL;
        g.src[i] = o->src[i] ? &o->src[i]->g : NULL;
    }
    ck_assert_msg(p->co->supports(p->cb, &c), "cpu refuses op %u", c.kind);
    ck_assert_msg(p->go->supports(p->gb, &g), "cuda refuses op %u", g.kind);
    *rc_c = p->co->exec(p->cb, &c, 1, ec);
    *rc_g = p->go->exec(p->gb, &g, 1, eg);
    if (*rc_g == SI_OK && p->go->sync != NULL)
        *rc_g = p->go->sync(p->gb, eg);
}

static void run_ok(pair *p, opdt *o)
{
    si_err ec = { { 0 } }, eg = { { 0 } };
    int rc, rg;
    run_both(p, o, &rc, &rg, &ec, &eg);
    ck_assert_msg(rc == SI_OK, "cpu: %s", ec.msg);
    ck_assert_msg(rg == SI_OK, "cuda: %s", eg.msg);
}

static const uint32_t wtypes[] = { SI_TYPE_F32, SI_TYPE_F16, SI_TYPE_BF16, SI_TYPE_Q8_0,
                                   SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K };
#define N_WTYPES (sizeof wtypes / sizeof wtypes[0])

static double wtol(uint32_t type) { return type == SI_TYPE_F32 ? 1e-4 : 1e-3; }

/* ---- MATMUL ----------------------------------------------------------------- */

static void matmul_case_tol(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n, bool dp4a)
{
    dt w, x, y;
    dt_rand(p, &w, type, in, out, 1, 1.0f);
    dt_rand(p, &x, SI_TYPE_F32, in, n, 1, 1.0f);
    dt_make(p, &y, SI_TYPE_F32, out, n, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_MATMUL }, .dst = &y, .src = { &w, &x } };
    run_ok(p, &o);
    char what[96];
    snprintf(what, sizeof what, "MATMUL%s %s in %lld out %lld n %lld", dp4a ? " dp4a" : "", host.type_name(type),
             (long long)in, (long long)out, (long long)n);
    if (dp4a)   /* two int8 roundings in series: h, then the SwiGLU output */
        dt_compare_rms(p, &y, 2 * DP4A_RMS, what);
    else
        dt_compare(p, &y, wtol(type), what);
    dt_free(p, &w);
    dt_free(p, &x);
    dt_free(p, &y);
}

static void matmul_case(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n)
{
    matmul_case_tol(p, type, in, out, n, false);
}

/* matmul = dp4a: every column count of the decode kernel (1, 2, 3..4,
 * 5..8), one past it (f32 fallback), a long row (the lanes' loop), and
 * the plain types (always f32). */
START_TEST(test_matmul_dp4a)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_dp4a");
    static const int64_t ns[] = { 1, 2, 3, 8, 9 };
    for (size_t t = 0; t < N_WTYPES; t++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            matmul_case_tol(&p, wtypes[t], 512, 67, ns[k], true);
        matmul_case_tol(&p, wtypes[t], 4096, 33, 1, true);
        matmul_case_tol(&p, wtypes[t], 4096, 33, 8, true);   /* (gemv_quad_cols) */
    }
    pair_close(&p);
}
END_TEST

START_TEST(test_matmul)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    static const int64_t ns[] = { 1, 3, 37 };
    for (size_t t = 0; t < N_WTYPES; t++)
        for (size_t k = 0; k < 3; k++)
            matmul_case(&p, wtypes[t], 512, 67, ns[k]);
    /* rows not a multiple of 8 (plain types' tail path), and a 1-row weight */
    matmul_case(&p, SI_TYPE_F32, 100, 5, 3);
    matmul_case(&p, SI_TYPE_F16, 37, 9, 2);
    matmul_case(&p, SI_TYPE_F32, 256, 1, 4);
    if (as_cpu) {
        pair_close(&p);
        return;
    }
    /* a weight type the kernels do not decode is refused, not faked */
    dt w, x, y;
    dt_rand(&p, &w, SI_TYPE_Q4_0, 64, 4, 1, 1.0f);
    dt_rand(&p, &x, SI_TYPE_F32, 64, 1, 1, 1.0f);
    dt_make(&p, &y, SI_TYPE_F32, 4, 1, 1, NULL);
    si_op op = { .kind = SI_OP_MATMUL, .dst = y.g, .src = { &w.g, &x.g } };
    ck_assert(!p.go->supports(p.gb, &op));
    si_err err = { { 0 } };
    ck_assert_int_eq(p.go->exec(p.gb, &op, 1, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "q4_0"));
    /* a shape mismatch is SI_EINVAL with the shapes in the message */
    si_op bad = { .kind = SI_OP_MATMUL, .dst = x.g, .src = { &w.g, &x.g } };
    ck_assert(!p.go->supports(p.gb, &bad));
    dt_free(&p, &w);
    dt_free(&p, &x);
    dt_free(&p, &y);
    pair_close(&p);
}
END_TEST

/* ---- GET_ROWS, RMSNORM, ADD, MUL, SWIGLU ------------------------------------ */

START_TEST(test_get_rows)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    const int32_t ids[] = { 3, 0, 39, 3, 17 }, bad_ids[] = { 1, 40 };
    for (size_t t = 0; t < N_WTYPES; t++) {
        dt tab, id, y;
        dt_rand(&p, &tab, wtypes[t], 512, 40, 1, 2.0f);
        dt_make(&p, &id, SI_TYPE_I32, 5, 1, 1, ids);
        id.c.ndim = id.g.ndim = 1;
        dt_make(&p, &y, SI_TYPE_F32, 512, 5, 1, NULL);
        opdt o = { .op = { .kind = SI_OP_GET_ROWS }, .dst = &y, .src = { &tab, &id } };
        run_ok(&p, &o);
        char what[64];
        snprintf(what, sizeof what, "GET_ROWS %s", host.type_name(wtypes[t]));
        dt_compare(&p, &y, 0.0, what);   /* decoding is exact */
        dt_free(&p, &id);
        dt_free(&p, &y);
        /* an id outside the table: SI_ERANGE on both */
        dt_make(&p, &id, SI_TYPE_I32, 2, 1, 1, bad_ids);
        id.c.ndim = id.g.ndim = 1;
        dt_make(&p, &y, SI_TYPE_F32, 512, 2, 1, NULL);
        opdt ob = { .op = { .kind = SI_OP_GET_ROWS }, .dst = &y, .src = { &tab, &id } };
        si_err ec = { { 0 } }, eg = { { 0 } };
        int rc, rg;
        run_both(&p, &ob, &rc, &rg, &ec, &eg);
        ck_assert_int_eq(rc, SI_ERANGE);
        ck_assert_int_eq(rg, SI_ERANGE);
        ck_assert_ptr_nonnull(strstr(eg.msg, "40"));
        dt_free(&p, &id);
        dt_free(&p, &y);
        dt_free(&p, &tab);
    }
    pair_close(&p);
}
END_TEST

START_TEST(test_elementwise)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    /* RMSNORM over rows of 64, and per head (3-D [32, 4, 3], weight [32]) */
    dt x, w, y;
    dt_rand(&p, &x, SI_TYPE_F32, 64, 7, 1, 3.0f);
    dt_rand(&p, &w, SI_TYPE_F32, 64, 1, 1, 1.0f);
    dt_make(&p, &y, SI_TYPE_F32, 64, 7, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_RMSNORM, .p.norm.eps = 1e-6f }, .dst = &y, .src = { &x, &w } };
    run_ok(&p, &o);
    dt_compare(&p, &y, 1e-6, "RMSNORM [64, 7]");
    dt_free(&p, &x);
    dt_free(&p, &w);
    dt_free(&p, &y);
    dt_rand(&p, &x, SI_TYPE_F32, 32, 4, 3, 3.0f);
    dt_rand(&p, &w, SI_TYPE_F32, 32, 1, 1, 1.0f);
    dt_make(&p, &y, SI_TYPE_F32, 32, 4, 3, NULL);
    o = (opdt){ .op = { .kind = SI_OP_RMSNORM, .p.norm.eps = 1e-6f }, .dst = &y, .src = { &x, &w } };
    run_ok(&p, &o);
    dt_compare(&p, &y, 1e-6, "RMSNORM per head [32, 4, 3]");
    dt_free(&p, &x);
    dt_free(&p, &w);
    dt_free(&p, &y);
    /* ADD, MUL, SWIGLU on [100, 7] */
    static const uint32_t kinds[] = { SI_OP_ADD, SI_OP_MUL, SI_OP_SWIGLU };
    static const char *names[] = { "ADD", "MUL", "SWIGLU" };
    for (int k = 0; k < 3; k++) {
        dt a, b;
        dt_rand(&p, &a, SI_TYPE_F32, 100, 7, 1, 4.0f);
        dt_rand(&p, &b, SI_TYPE_F32, 100, 7, 1, 4.0f);
        dt_make(&p, &y, SI_TYPE_F32, 100, 7, 1, NULL);
        o = (opdt){ .op = { .kind = kinds[k] }, .dst = &y, .src = { &a, &b } };
        run_ok(&p, &o);
        dt_compare(&p, &y, 1e-6, names[k]);
        dt_free(&p, &a);
        dt_free(&p, &b);
        dt_free(&p, &y);
    }
    pair_close(&p);
}
END_TEST

/* ops kinds[0..n) (src[i], dst[i]; eps 1e-6 for a norm) as one exec on
 * each side of p, each followed by a sync: both must succeed. */
#define LIST_MAX 4
static void list_exec(pair *p, int n, const uint32_t *kinds, const dt *const (*src)[2], const dt *const *dst,
                      const char *label)
{
    si_op c[LIST_MAX], g[LIST_MAX];
    ck_assert(n <= LIST_MAX);
    memset(c, 0, sizeof c);
    for (int i = 0; i < n; i++) {
        c[i].kind = kinds[i];
        c[i].p.norm.eps = 1e-6f;   /* (read by RMSNORM only) */
        g[i] = c[i];
        for (int k = 0; k < 2; k++) {
            c[i].src[k] = &src[i][k]->c;
            g[i].src[k] = &src[i][k]->g;
        }
        c[i].dst = dst[i]->c;
        g[i].dst = dst[i]->g;
    }
    si_err ec = { { 0 } }, eg = { { 0 } };
    int rc = p->co->exec(p->cb, c, (size_t)n, &ec);
    if (rc == SI_OK && p->co->sync != NULL)
        rc = p->co->sync(p->cb, &ec);
    int rg = p->go->exec(p->gb, g, (size_t)n, &eg);
    if (rg == SI_OK && p->go->sync != NULL)
        rg = p->go->sync(p->gb, &eg);
    ck_assert_msg(rc == SI_OK, "%s, reference side: %s", label, ec.msg);
    ck_assert_msg(rg == SI_OK, "%s: %s", label, eg.msg);
}

/* ADD (h = a + b) -> RMSNORM (y = norm(h) * w) -> MATMUL (out = W y), one
 * exec on each side of p: the decode layer's residual, norm and the product
 * that quantises the norm's output (fuse_norm's one kernel where the
 * section fuses).  tol < 0: the two sides are expected bit-identical (two
 * cuda sections); else h exact, y within tol and out within the dp4a
 * tolerance of a cpu reference. */
static void norm_list_case(pair *p, uint32_t wt, int64_t ne0, int64_t n, double tol, const char *label)
{
    dt a, b, w, h, y, W, out;
    dt_rand(p, &a, SI_TYPE_F32, ne0, n, 1, 3.0f);
    dt_rand(p, &b, SI_TYPE_F32, ne0, n, 1, 1.0f);
    dt_rand(p, &w, SI_TYPE_F32, ne0, 1, 1, 1.0f);
    dt_make(p, &h, SI_TYPE_F32, ne0, n, 1, NULL);
    dt_make(p, &y, SI_TYPE_F32, ne0, n, 1, NULL);
    dt_rand(p, &W, wt, ne0, 96, 1, 1.0f);
    dt_make(p, &out, SI_TYPE_F32, 96, n, 1, NULL);
    const dt *const src[3][2] = { { &a, &b }, { &h, &w }, { &W, &y } }, *const dst[3] = { &h, &y, &out };
    const uint32_t kinds[3] = { SI_OP_ADD, SI_OP_RMSNORM, SI_OP_MATMUL };
    list_exec(p, 3, kinds, src, dst, label);
    char what[160];
    snprintf(what, sizeof what, "ADD+RMSNORM+MATMUL %s %s ne0 %lld n %lld: sum", label, host.type_name(wt),
             (long long)ne0, (long long)n);
    dt_compare(p, &h, 0.0, what);
    snprintf(what, sizeof what, "ADD+RMSNORM+MATMUL %s %s ne0 %lld n %lld: norm", label, host.type_name(wt),
             (long long)ne0, (long long)n);
    dt_compare(p, &y, tol < 0 ? 0.0 : tol, what);
    snprintf(what, sizeof what, "ADD+RMSNORM+MATMUL %s %s ne0 %lld n %lld: product", label, host.type_name(wt),
             (long long)ne0, (long long)n);
    if (tol < 0)
        dt_compare(p, &out, 0.0, what);
    else
        dt_compare_rms(p, &out, DP4A_RMS, what);
    const dt *all[] = { &a, &b, &w, &h, &y, &W, &out };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_free(p, (dt *)all[i]);
}

/* MATMUL (y = Wo x) -> ADD (h = y + r, or r + y with swap) -> RMSNORM
 * (z = norm(h) * w) -> MATMUL (out = W2 z), one exec on each side of p:
 * a decode layer's out-projection or ffn down, the residual, the next
 * norm and the product after it (knob norm_tail: the first product's
 * launch does the ADD, the norm and the int8 copy).  tol < 0: the two
 * sides bit-identical (two cuda sections); else every output within the
 * dp4a tolerance of the cpu's int8 path. */
static void mm_norm_list_case_w2(pair *p, uint32_t wt, int64_t in, int64_t H, int64_t n, bool swap, uint32_t w2t,
                                 double tol, const char *label)
{
    dt x, Wo, y, r, h, w, z, W2, out;
    dt_rand(p, &x, SI_TYPE_F32, in, n, 1, 1.0f);
    dt_rand(p, &Wo, wt, in, H, 1, 1.0f);
    dt_make(p, &y, SI_TYPE_F32, H, n, 1, NULL);
    dt_rand(p, &r, SI_TYPE_F32, H, n, 1, 3.0f);
    dt_make(p, &h, SI_TYPE_F32, H, n, 1, NULL);
    dt_rand(p, &w, SI_TYPE_F32, H, 1, 1, 1.0f);
    dt_make(p, &z, SI_TYPE_F32, H, n, 1, NULL);
    dt_rand(p, &W2, w2t, H, 96, 1, 1.0f);
    dt_make(p, &out, SI_TYPE_F32, 96, n, 1, NULL);
    const dt *const src[4][2] = { { &Wo, &x }, { swap ? &r : &y, swap ? &y : &r }, { &h, &w }, { &W2, &z } };
    const dt *const dst[4] = { &y, &h, &z, &out };
    const uint32_t kinds[4] = { SI_OP_MATMUL, SI_OP_ADD, SI_OP_RMSNORM, SI_OP_MATMUL };
    /* twice on each side: the second exec finds the count of finished
     * blocks back at 0 (else its tail never runs and z stays stale) */
    for (int rep = 0; rep < 2; rep++) {
        list_exec(p, 4, kinds, src, dst, label);
        static const char *names[4] = { "product", "sum", "norm", "next product" };
        for (int i = 0; i < 4; i++) {
            char what[200];
            snprintf(what, sizeof what, "MATMUL+ADD+RMSNORM+MATMUL %s %s in %lld H %lld n %lld%s (exec %d): %s", label,
                     host.type_name(wt), (long long)in, (long long)H, (long long)n, swap ? " r + y" : "", rep + 1,
                     names[i]);
            if (tol < 0)
                dt_compare(p, dst[i], 0.0, what);
            else
                dt_compare_rms(p, dst[i], DP4A_RMS, what);
        }
        if (rep == 0) {   /* (new inputs for the second exec: a stale z shows) */
            dt_free(p, &x);
            dt_rand(p, &x, SI_TYPE_F32, in, n, 1, 1.0f);
        }
    }
    const dt *all[] = { &x, &Wo, &y, &r, &h, &w, &z, &W2, &out };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_free(p, (dt *)all[i]);
}

static void mm_norm_list_case(pair *p, uint32_t wt, int64_t in, int64_t H, int64_t n, bool swap, double tol,
                              const char *label)
{
    mm_norm_list_case_w2(p, wt, in, H, n, swap, SI_TYPE_Q4_K, tol, label);
}

/* Knob norm_tail (true: up to 8 columns; default false) on the 9b's out-projection
 * (Q4_K 4096 -> 4096) and ffn down (Q6_K 12288 -> 4096), the 35b-a3b's
 * Q8_0 out-projection (4096 -> 2048), one token and a few, the ADD's
 * operands either way round: against the cpu, and against norm_tail =
 * false (the product, then fuse_norm's kernel) bit for bit.  A width the
 * tail does not take (1280) runs unfused, the same values. */
START_TEST(test_norm_tail)
{
    static const struct { uint32_t t; int64_t in, H, n; bool swap; } cs[] = {
        { SI_TYPE_Q4_K, 4096, 4096, 1, false }, { SI_TYPE_Q4_K, 4096, 4096, 3, true },
        { SI_TYPE_Q6_K, 12288, 4096, 1, false }, { SI_TYPE_Q8_0, 4096, 2048, 1, true },
        { SI_TYPE_Q8_0, 2048, 2048, 8, false }, { SI_TYPE_Q5_K, 2048, 1280, 2, false },
    };
    const size_t n_cs = sizeof cs / sizeof cs[0];
    pair p;
    pair_open(&p, "backend.cpu_fast", "backend.cuda_ntail");
    for (size_t k = 0; k < n_cs; k++)
        mm_norm_list_case(&p, cs[k].t, cs[k].in, cs[k].H, cs[k].n, cs[k].swap, 1.0, "norm_tail vs cpu");
    pair_close(&p);
    if (as_cpu)
        return;
    pair_open_cu2(&p, "backend.cuda_ntail_off", "backend.cuda_ntail");
    for (size_t k = 0; k < n_cs; k++)
        mm_norm_list_case(&p, cs[k].t, cs[k].in, cs[k].H, cs[k].n, cs[k].swap, -1, "norm_tail vs false");
    pair_close(&p);
    /* norm_tail = defer (one column: the product's blocks each do their
     * 32 rows, the norm's scale taken by the next product, or applied in
     * place for a reader that cannot, here a float-stored W2, and at the
     * list's end for the norm's output): against the cpu's int8 path, the
     * deferred copy rounding its own way.  Several columns, or a width
     * of no whole 32-row blocks, run as false. */
    static const struct { uint32_t t; int64_t in, H, n; bool swap; uint32_t w2; } ds[] = {
        { SI_TYPE_Q4_K, 4096, 4096, 1, false, SI_TYPE_Q4_K }, { SI_TYPE_Q6_K, 12288, 4096, 1, true, SI_TYPE_Q6_K },
        { SI_TYPE_Q8_0, 4096, 2048, 1, false, SI_TYPE_Q8_0 }, { SI_TYPE_Q5_K, 2048, 1280, 1, false, SI_TYPE_F32 },
        { SI_TYPE_Q4_K, 4096, 4096, 1, true, SI_TYPE_F32 }, { SI_TYPE_Q4_K, 4096, 4096, 3, false, SI_TYPE_Q4_K },
        { SI_TYPE_Q5_K, 2048, 1296, 1, false, SI_TYPE_F32 },
    };
    pair_open(&p, "backend.cpu_fast", "backend.cuda_ndefer");
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; k++)
        mm_norm_list_case_w2(&p, ds[k].t, ds[k].in, ds[k].H, ds[k].n, ds[k].swap, ds[k].w2, 1.0, "norm_tail = defer vs cpu");
    pair_close(&p);
    /* a value that is none of false | true | one | defer: refused, named */
    si_backend *b = NULL;
    si_err err = { { 0 } };
    ck_assert_int_eq(((const struct si_backend_ops *)p_cu->ops)->open(&host, "backend.cuda_ntail_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "norm_tail") != NULL && strstr(err.msg, "'two'") != NULL, "message: %s", err.msg);
}
END_TEST

/* MATMUL gate (g = Wg x) and MATMUL up (u = Wu x), in that order or up
 * first, -> SWIGLU (s = silu(g) * u) -> MATMUL down (out = Wd s), one exec
 * on each side of p: a decode layer's dense ffn (knob gemv_glu: the two
 * products, the SwiGLU and its int8 copy in one launch).  Twice, new x
 * the second time.  tol < 0: the two sides bit-identical (two cuda
 * sections); else every output within the dp4a tolerance of the cpu. */
static void glu_list_case(pair *p, uint32_t wt, uint32_t dt_, int64_t H, int64_t F, int64_t n, bool up_first,
                          double tol, const char *label)
{
    dt x, Wg, Wu, g, u, sw, Wd, out;
    dt_rand(p, &x, SI_TYPE_F32, H, n, 1, 1.0f);
    dt_rand(p, &Wg, wt, H, F, 1, 1.0f);
    dt_rand(p, &Wu, wt, H, F, 1, 1.0f);
    dt_make(p, &g, SI_TYPE_F32, F, n, 1, NULL);
    dt_make(p, &u, SI_TYPE_F32, F, n, 1, NULL);
    dt_make(p, &sw, SI_TYPE_F32, F, n, 1, NULL);
    dt_rand(p, &Wd, dt_, F, 256, 1, 1.0f);
    dt_make(p, &out, SI_TYPE_F32, 256, n, 1, NULL);
    const dt *const pg[2] = { &Wg, &x }, *const pu[2] = { &Wu, &x };
    const dt *const src[4][2] = { { up_first ? pu[0] : pg[0], &x }, { up_first ? pg[0] : pu[0], &x },
                                  { &g, &u }, { &Wd, &sw } };
    const dt *const dst[4] = { up_first ? &u : &g, up_first ? &g : &u, &sw, &out };
    const uint32_t kinds[4] = { SI_OP_MATMUL, SI_OP_MATMUL, SI_OP_SWIGLU, SI_OP_MATMUL };
    for (int rep = 0; rep < 2; rep++) {
        list_exec(p, 4, kinds, src, dst, label);
        static const char *names[4] = { "first product", "second product", "swiglu", "down" };
        for (int i = 0; i < 4; i++) {
            char what[200];
            snprintf(what, sizeof what, "MATMUL x2+SWIGLU+MATMUL %s %s/%s H %lld F %lld n %lld%s (exec %d): %s",
                     label, host.type_name(wt), host.type_name(dt_), (long long)H, (long long)F, (long long)n,
                     up_first ? " up first" : "", rep + 1, names[i]);
            if (tol < 0)
                dt_compare(p, dst[i], 0.0, what);
            else
                dt_compare_rms(p, dst[i], DP4A_RMS, what);
        }
        if (rep == 0) {   /* (new inputs for the second exec: a stale copy shows) */
            dt_free(p, &x);
            dt_rand(p, &x, SI_TYPE_F32, H, n, 1, 1.0f);
        }
    }
    const dt *all[] = { &x, &Wg, &Wu, &g, &u, &sw, &Wd, &out };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dt_free(p, (dt *)all[i]);
}

/* Knob gemv_glu (default true) on the 9b's ffn (Q4_K 4096 -> 12288 gate
 * and up, Q6_K down), Q5_K and Q6_K gate/up of 2048 -> 512, up first;
 * against the cpu and against gemv_glu = false bit for bit.  Shapes it
 * does not take run as before, the same values: two columns, and
 * 1280-wide rows (in % 2048 != 0).  A value other than true | false is
 * refused, named. */
START_TEST(test_gemv_glu)
{
    static const struct { uint32_t wt, dt_; int64_t H, F, n; bool up_first; } cs[] = {
        { SI_TYPE_Q4_K, SI_TYPE_Q6_K, 4096, 12288, 1, false }, { SI_TYPE_Q5_K, SI_TYPE_Q4_K, 2048, 512, 1, true },
        { SI_TYPE_Q6_K, SI_TYPE_Q8_0, 2048, 512, 1, false },   { SI_TYPE_Q4_K, SI_TYPE_Q4_K, 4096, 1024, 2, false },
        { SI_TYPE_Q4_K, SI_TYPE_Q4_K, 1280, 512, 1, false },
    };
    const size_t n_cs = sizeof cs / sizeof cs[0];
    pair p;
    pair_open(&p, "backend.cpu_fast", "backend.cuda_glu");
    for (size_t k = 0; k < n_cs; k++)
        glu_list_case(&p, cs[k].wt, cs[k].dt_, cs[k].H, cs[k].F, cs[k].n, cs[k].up_first, 1.0, "gemv_glu vs cpu");
    pair_close(&p);
    if (as_cpu)
        return;
    pair_open_cu2(&p, "backend.cuda_glu_off", "backend.cuda_glu");
    for (size_t k = 0; k < n_cs; k++)
        glu_list_case(&p, cs[k].wt, cs[k].dt_, cs[k].H, cs[k].F, cs[k].n, cs[k].up_first, -1, "gemv_glu vs false");
    pair_close(&p);
    si_backend *b = NULL;
    si_err err = { { 0 } };
    ck_assert_int_eq(((const struct si_backend_ops *)p_cu->ops)->open(&host, "backend.cuda_glu_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gemv_glu") != NULL && strstr(err.msg, "'maybe'") != NULL, "message: %s", err.msg);
}
END_TEST

/* Knob norm: v2 (rms2_kernel, the default) and v1 on the rows v2 takes
 * (the 9b's 4096 and the 35b-a3b's 2048, one row as in decode and a few):
 * the plain RMSNORM and the fused ADD + RMSNORM + int8 copy against the
 * cpu, and fuse_norm's fused form against its split form (ADD, RMSNORM and
 * the product's own quantisation) bit for bit under each. */
START_TEST(test_norm_v2)
{
    static const int64_t shapes[][2] = { { 4096, 1 }, { 4096, 3 }, { 2048, 1 }, { 2048, 5 }, { 512, 2 } };
    static const char *secs[][2] = { { "backend.cuda_nrm2", "backend.cuda_nrm2_split" },
                                     { "backend.cuda_nrm1", "backend.cuda_nrm1_split" } };
    for (int v = 0; v < 2; v++) {
        pair p;
        pair_open(&p, "backend.cpu_fast", secs[v][0]);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            dt x, w, y;
            dt_rand(&p, &x, SI_TYPE_F32, shapes[k][0], shapes[k][1], 1, 3.0f);
            dt_rand(&p, &w, SI_TYPE_F32, shapes[k][0], 1, 1, 1.0f);
            dt_make(&p, &y, SI_TYPE_F32, shapes[k][0], shapes[k][1], 1, NULL);
            opdt o = { .op = { .kind = SI_OP_RMSNORM, .p.norm.eps = 1e-6f }, .dst = &y, .src = { &x, &w } };
            run_ok(&p, &o);
            char what[96];
            snprintf(what, sizeof what, "RMSNORM norm = v%d [%lld, %lld]", 2 - v, (long long)shapes[k][0],
                     (long long)shapes[k][1]);
            dt_compare(&p, &y, 1e-6, what);
            dt_free(&p, &x);
            dt_free(&p, &w);
            dt_free(&p, &y);
            norm_list_case(&p, SI_TYPE_Q4_K, shapes[k][0], shapes[k][1], 1e-6, v ? "v1 vs cpu" : "v2 vs cpu");
        }
        pair_close(&p);
        if (as_cpu)
            continue;
        pair_open_cu2(&p, secs[v][1], secs[v][0]);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            norm_list_case(&p, SI_TYPE_Q4_K, shapes[k][0], shapes[k][1], -1, v ? "v1 fused vs split" : "v2 fused vs split");
            norm_list_case(&p, SI_TYPE_Q8_0, shapes[k][0], shapes[k][1], -1, v ? "v1 fused vs split" : "v2 fused vs split");
        }
        pair_close(&p);
    }
}
END_TEST

/* ---- ATTN ----------------------------------------------------------------- */

typedef struct attn_env {
    pair  p;
    si_kv *ckv, *gkv;
    dt     qn, kn;
    uint32_t nh, nkv, hd, n_rot;
    float  yarn;
    bool   i8;      /* cuda side has the int8 cache: I8_TOL/I8_RMS, errors printed */
} attn_env;

/* The rest of an attn_env once its pair is open: the shape, both caches,
 * the q/k norm weights. */
static void attn_init(attn_env *a, float yarn, uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t n_ctx, uint32_t n_seq)
{
    si_err err = { { 0 } };
    a->nh = nh;
    a->nkv = nkv;
    a->hd = hd;
    a->n_rot = hd / 2;
    a->yarn = yarn;
    a->i8 = false;
    si_kv_desc d = { .size = sizeof d, .n_layer = 2, .n_head_kv = a->nkv, .head_dim = a->hd, .n_seq = n_seq,
                     .n_ctx = n_ctx };
    ck_assert_msg(a->p.co->kv_create(a->p.cb, &d, &a->ckv, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(a->p.go->kv_create(a->p.gb, &d, &a->gkv, &err) == SI_OK, "%s", err.msg);
    dt_rand(&a->p, &a->qn, SI_TYPE_F32, a->hd, 1, 1, 1.0f);
    dt_rand(&a->p, &a->kn, SI_TYPE_F32, a->hd, 1, 1, 1.0f);
}

static void attn_open_seqs(attn_env *a, const char *cpu_sec, const char *cu_sec, float yarn, uint32_t nh,
                           uint32_t nkv, uint32_t hd, uint32_t n_ctx, uint32_t n_seq)
{
    pair_open(&a->p, cpu_sec, cu_sec);
    attn_init(a, yarn, nh, nkv, hd, n_ctx, n_seq);
}

static void attn_open_shape(attn_env *a, const char *cpu_sec, const char *cu_sec, float yarn, uint32_t nh,
                            uint32_t nkv, uint32_t hd, uint32_t n_ctx)
{
    attn_open_seqs(a, cpu_sec, cu_sec, yarn, nh, nkv, hd, n_ctx, 2);
}

static void attn_open(attn_env *a, const char *cpu_sec, const char *cu_sec, float yarn)
{
    attn_open_shape(a, cpu_sec, cu_sec, yarn, 4, 2, 64, 256);
}

static void attn_close(attn_env *a)
{
    dt_free(&a->p, &a->qn);
    dt_free(&a->p, &a->kn);
    a->p.co->kv_free(a->p.cb, a->ckv);
    a->p.go->kv_free(a->p.gb, a->gkv);
    pair_close(&a->p);
}

/* int8 K/V (kv_type = i8) against the cpu's f32 cache: each K and V
 * element is off by up to scale/2 = max|row|/254, independently; a C
 * model of exactly these inputs (q/k RMS-normed with U(-1,1) weights, V
 * U(-1,1), gate) puts the output error at 0.4-0.6% of max |out| for
 * contexts 1..1000 and head_dim 64..256.  Gates: max |diff| <= 2e-2 max
 * |cpu| and RMS(diff) <= 1e-2 RMS(cpu) (a wrong scale, slot or page is
 * O(1) at short contexts; the RMS gate catches a wrong page at long
 * ones).  Both errors are printed for every step. */
#define I8_TOL 2e-2
#define I8_RMS 1e-2

static void i8_compare(pair *p, const dt *t, uint32_t n, const int32_t *pos)
{
    si_err err = { { 0 } };
    size_t cnt = (size_t)(t->bytes / 4);
    float *c = malloc(t->bytes), *g = malloc(t->bytes);
    ck_assert(c != NULL && g != NULL);
    ck_assert_msg(p->co->download(p->cb, c, t->cbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->download(p->gb, g, t->gbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    double mx = 0.0, md = 0.0, ss = 0.0, sd = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < cnt; i++) {
        ck_assert_msg(isfinite(c[i]), "ATTN i8: cpu value %zu is %g", i, (double)c[i]);
        ck_assert_msg(isfinite(g[i]), "ATTN i8: cuda value %zu is %g (cpu %g)", i, (double)g[i], (double)c[i]);
        const double d = fabs((double)g[i] - (double)c[i]);
        mx = fmax(mx, fabs(c[i]));
        ss += (double)c[i] * c[i];
        sd += d * d;
        if (d > md) {
            md = d;
            at = i;
        }
    }
    int32_t lo = pos[0], hi = pos[0];
    for (uint32_t i = 1; i < n; i++) {
        lo = pos[i] < lo ? pos[i] : lo;
        hi = pos[i] > hi ? pos[i] : hi;
    }
    const double rel = md / fmax(mx, 1e-30), rms = sqrt(sd / fmax(ss, 1e-300));
    printf("  ATTN i8: %3u tokens, contexts %4d..%4d: max|diff| %.3g = %.2e of max|cpu| %.3g, rms %.2e\n", n,
           (int)lo + 1, (int)hi + 1, md, rel, mx, rms);
    ck_assert_msg(rel <= I8_TOL, "ATTN i8: max |diff| %g at %zu (cpu %g, cuda %g) = %g of max |cpu| %g > %g", md, at,
                  (double)c[at], (double)g[at], rel, mx, I8_TOL);
    ck_assert_msg(rms <= I8_RMS, "ATTN i8: relative RMS error %g > %g", rms, I8_RMS);
    free(c);
    free(g);
}

/* One ATTN op of n tokens on layer 1 on both backends (gpu_only: on the
 * cuda side only, whose error is then copied to *gerr); both must return
 * `expect`, and on SI_OK the outputs must agree. */
static void attn_run(attn_env *a, uint32_t n, const int32_t *pos, const int32_t *seq, double tol, int expect,
                     bool gpu_only, si_err *gerr)
{
    dt qg, k, v, y;
    dt_rand(&a->p, &qg, SI_TYPE_F32, 2 * a->nh * a->hd, n, 1, 2.0f);
    dt_rand(&a->p, &k, SI_TYPE_F32, a->nkv * a->hd, n, 1, 2.0f);
    dt_rand(&a->p, &v, SI_TYPE_F32, a->nkv * a->hd, n, 1, 1.0f);
    dt_make(&a->p, &y, SI_TYPE_F32, a->nh * a->hd, n, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_ATTN }, .dst = &y, .src = { &qg, &k, &v, &a->qn, &a->kn } };
    o.op.p.attn = (si_attn_params){ .n_head = a->nh, .n_head_kv = a->nkv, .head_dim = a->hd, .n_rot = a->n_rot,
                                    .eps = 1e-6f, .rope_base = 1e7f, .yarn_factor = a->yarn,
                                    .yarn_orig_ctx = a->yarn > 0 ? 64 : 0, .kv_layer = 1, .pos = pos, .seq = seq };
    si_op c = o.op, g = o.op;
    c.p.attn.kv = a->ckv;
    g.p.attn.kv = a->gkv;
    c.dst = y.c;
    g.dst = y.g;
    for (int i = 0; i < 5; i++) {
        c.src[i] = &o.src[i]->c;
        g.src[i] = &o.src[i]->g;
    }
    ck_assert(a->p.co->supports(a->p.cb, &c));
    ck_assert(a->p.go->supports(a->p.gb, &g));
    si_err ec = { { 0 } }, eg = { { 0 } };
    int rc = gpu_only ? expect : a->p.co->exec(a->p.cb, &c, 1, &ec);
    /* gpu_only: an ADD into a poisoned z runs first in the same exec; when
     * the exec fails it must have run nothing (z still all NaN). */
    dt z;
    si_op ops[2] = { { .kind = SI_OP_ADD }, g };
    if (gpu_only) {
        dt_make(&a->p, &z, SI_TYPE_F32, 2 * a->nh * a->hd, n, 1, NULL);
        ops[0].src[0] = &qg.g;
        ops[0].src[1] = &qg.g;
        ops[0].dst = z.g;
    }
    int rg = a->p.go->exec(a->p.gb, gpu_only ? ops : &g, gpu_only ? 2 : 1, &eg);
    if (rg == SI_OK && a->p.go->sync != NULL)
        rg = a->p.go->sync(a->p.gb, &eg);
    if (gerr != NULL)
        *gerr = eg;
    if (gpu_only) {
        si_err e2 = { { 0 } };
        float *zh = malloc(z.bytes);
        ck_assert_ptr_nonnull(zh);
        ck_assert_msg(a->p.go->download(a->p.gb, zh, z.gbuf, 0, z.bytes, &e2) == SI_OK, "%s", e2.msg);
        size_t done = 0;
        for (size_t i = 0; i < z.bytes / 4; i++)
            done += !isnan(zh[i]);
        ck_assert_msg(rg == SI_OK || done == 0, "the failed exec ran its first op (%zu values written)", done);
        free(zh);
        dt_free(&a->p, &z);
    }
    ck_assert_msg(rc == expect, "cpu: %d %s", rc, ec.msg);
    ck_assert_msg(rg == expect, "cuda: %d %s", rg, eg.msg);
    if (gpu_only)
        ;
    else if (expect == SI_OK && a->i8)
        i8_compare(&a->p, &y, n, pos);
    else if (expect == SI_OK)
        dt_compare(&a->p, &y, tol, "ATTN");
    dt_free(&a->p, &qg);
    dt_free(&a->p, &k);
    dt_free(&a->p, &v);
    dt_free(&a->p, &y);
}

static void attn_step(attn_env *a, uint32_t n, const int32_t *pos, const int32_t *seq, double tol, int expect)
{
    attn_run(a, n, pos, seq, tol, expect, false, NULL);
}

static void attn_sequence(attn_env *a, double tol)
{
    int32_t pos[260], seq[260];
    /* prefill: seq 0 five tokens, seq 1 three tokens, one batch */
    for (int i = 0; i < 8; i++) {
        seq[i] = i < 5 ? 0 : 1;
        pos[i] = i < 5 ? i : i - 5;
    }
    attn_step(a, 8, pos, seq, tol, SI_OK);
    /* decode: one token each */
    pos[0] = 5; seq[0] = 0;
    pos[1] = 3; seq[1] = 1;
    attn_step(a, 2, pos, seq, tol, SI_OK);
    /* seq 1 alone, 200 tokens: crosses the kernel's 128-position chunks */
    for (int i = 0; i < 200; i++) {
        seq[i] = 1;
        pos[i] = 4 + i;
    }
    attn_step(a, 200, pos, seq, tol, SI_OK);
    /* non-contiguous position: SI_EINVAL on both, nothing written */
    pos[0] = 9; seq[0] = 0;
    attn_step(a, 1, pos, seq, tol, SI_EINVAL);
    /* fill seq 1 to the capacity (256), then one more: SI_ERANGE */
    for (int i = 0; i < 52; i++) {
        seq[i] = 1;
        pos[i] = 204 + i;
    }
    attn_step(a, 52, pos, seq, tol, SI_OK);
    pos[0] = 256; seq[0] = 1;
    attn_step(a, 1, pos, seq, tol, SI_ERANGE);
    /* seq_reset forgets seq 1 only */
    si_err err = { { 0 } };
    ck_assert(a->p.co->kv_seq_reset(a->p.cb, a->ckv, 1, &err) == SI_OK);
    ck_assert(a->p.go->kv_seq_reset(a->p.gb, a->gkv, 1, &err) == SI_OK);
    pos[0] = 6; seq[0] = 0;
    pos[1] = 0; seq[1] = 1;
    attn_step(a, 2, pos, seq, tol, SI_OK);
}

START_TEST(test_attn_f32)
{
    attn_env a;
    attn_open(&a, "backend.cpu", "backend.cuda_sm120", 0.0f);
    attn_sequence(&a, 1e-4);
    attn_close(&a);
}
END_TEST

START_TEST(test_attn_yarn)
{
    attn_env a;
    attn_open(&a, "backend.cpu", "backend.cuda_sm120", 4.0f);
    attn_sequence(&a, 1e-4);
    attn_close(&a);
}
END_TEST

START_TEST(test_attn_f16_cache)
{
    attn_env a;
    attn_open(&a, "backend.cpu16", "backend.cuda16", 0.0f);
    /* both round K/V to f16 the same way (round to nearest even) */
    attn_sequence(&a, 1e-3);
    attn_close(&a);
}
END_TEST

/* Long context (n_ctx 2048): the split path with many splits per token
 * (on any GPU: the split count grows until ~4 blocks per multiprocessor
 * exist, in chunks of 64 positions), against the cpu and, for A/B, the
 * same sequence on the simple kernel (attn = simple).  Prefill batches of
 * 512 (one split each), a 40-token batch at 1536..1575 (several splits,
 * causal within the batch), a two-sequence decode with one sequence far
 * shorter than the other (its later splits are empty), then decoding
 * seq 0 alone through 1576..1601 (the last chunk partial, full, and of one
 * position: 1600 = 25 * 64). */
static void attn_long_steps(attn_env *a, double tol)
{
    int32_t pos[512], seq[512];
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < 512; i++) {
            seq[i] = 0;
            pos[i] = b * 512 + i;
        }
        attn_step(a, 512, pos, seq, tol, SI_OK);
    }
    for (int i = 0; i < 300; i++) {
        seq[i] = 1;
        pos[i] = i;
    }
    attn_step(a, 300, pos, seq, tol, SI_OK);
    for (int i = 0; i < 40; i++) {
        seq[i] = 0;
        pos[i] = 1536 + i;
    }
    attn_step(a, 40, pos, seq, tol, SI_OK);
    pos[0] = 300; seq[0] = 1;
    pos[1] = 1576; seq[1] = 0;
    attn_step(a, 2, pos, seq, tol, SI_OK);
    for (int32_t p = 1577; p <= 1601; p++) {
        pos[0] = p;
        seq[0] = 0;
        attn_step(a, 1, pos, seq, tol, SI_OK);
    }
}

static void attn_long_kv(const char *cpu_sec, const char *cu_sec, uint32_t nh, uint32_t nkv, uint32_t hd, double tol,
                         bool i8)
{
    attn_env a;
    /* own random stream: the later tests see the inputs they saw before */
    const uint32_t rng_saved = rng_state;
    rng_state = 777u;
    attn_open_shape(&a, cpu_sec, cu_sec, 0.0f, nh, nkv, hd, 2048);
    a.i8 = i8;
    attn_long_steps(&a, tol);
    attn_close(&a);
    rng_state = rng_saved;
}

static void attn_long(const char *cpu_sec, const char *cu_sec, uint32_t nh, uint32_t nkv, uint32_t hd, double tol)
{
    attn_long_kv(cpu_sec, cu_sec, nh, nkv, hd, tol, false);
}

/* 35B-like: head_dim 256, f16 cache, 8 query heads per kv head.  The
 * prefill batches take the flash-attention core (attn_prefill = fa, the
 * default: q and P in f16, ~3e-4 of max |out|; the 40-token batch at 1536
 * with its context cut into splits), decode the split core. */
START_TEST(test_attn_long_split)
{
    attn_long("backend.cpu16", "backend.cuda16", 8, 1, 256, 1e-3);
}
END_TEST

/* The same with attn_prefill = split and attn_gqa = per_head: the
 * per-head split core (K/V rows through registers) for every batch. */
START_TEST(test_attn_long_split_nofa)
{
    attn_long("backend.cpu16", "backend.cuda16_split", 8, 1, 256, 1e-3);
}
END_TEST

/* The split plan at other attn_split_blocks values: the 40-token batch
 * of attn_long_steps (attn_prefill = split) is cut into 3 chunks of 448
 * positions at 1 block a multiprocessor of a 132-SM H200, into 64-position
 * chunks at 32 (7 at the default 2); each against the cpu. */
START_TEST(test_attn_split_blocks)
{
    attn_long("backend.cpu16", "backend.cuda16_split_sb1", 8, 1, 256, 1e-3);
    attn_long("backend.cpu16", "backend.cuda16_split_sb32", 8, 1, 256, 1e-3);
}
END_TEST

/* 9B-like for the flash-attention core: 16 query heads on 4 kv heads. */
START_TEST(test_attn_long_fa_9b)
{
    attn_long("backend.cpu16", "backend.cuda16", 16, 4, 256, 1e-3);
}
END_TEST

/* attn_fa_tile = v3 (the default; v2 where it cannot run) against v1
 * (cuda16_fa1), both on the GPU: the long-context steps 9B-like (16 query heads on 4) and 35B-like
 * (16 on 2), then a 200-token batch of two sequences in turns of 20 tokens
 * (every 128-token tile of v2 holds both: two passes).  Per row the two
 * take the same key tiles, fragments and order, so the same bits where
 * their plans cut the context alike; else combine's order and P's f16
 * rounding against other split maxima (the emulator sees ~2e-4 of max
 * |out|): 1e-3, what either keeps to the cpu. */
static void attn_fa_tiles_sec(const char *ref_sec, const char *cu_sec, uint32_t nh, uint32_t nkv, uint32_t hd)
{
    attn_env a;
    int32_t pos[200], seq[200];
    const uint32_t rng_saved = rng_state;
    rng_state = 778u;
    pair_open_cu2(&a.p, ref_sec, cu_sec);
    attn_init(&a, 0.0f, nh, nkv, hd, 2048, 2);
    attn_long_steps(&a, 1e-3);
    /* seq 0 goes on at 1602, seq 1 at 301 */
    for (int i = 0; i < 200; i++) {
        seq[i] = (i / 20) % 2;
        pos[i] = (seq[i] ? 301 : 1602) + (i / 40) * 20 + i % 20;
    }
    attn_step(&a, 200, pos, seq, 1e-3, SI_OK);
    attn_close(&a);
    rng_state = rng_saved;
}

static void attn_fa_tiles(uint32_t nh, uint32_t nkv)
{
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa1", nh, nkv, 256);
}

START_TEST(test_attn_fa_tiles)
{
    attn_fa_tiles(16, 4);
    attn_fa_tiles(16, 2);
}
END_TEST

/* attn_fa_tile = v3 (the default: wgmma, cuda_attn_fa3.cu) against v2
 * (cuda16_fa2), the same steps: the same plans (tiles, splits, passes of
 * several sequences, partials), per row the same f16 q and P, but the
 * tensor cores' own summation order: 1e-3 of max |out|, what either keeps
 * to the cpu (the emulator, whose sums agree, sees the same bits).  hd 256
 * (9B-like, 35B-like) and 128.  Where the device or fatbin has no sm_90a
 * code v3 falls back to v2 (the backend says so at open): then v2 twice.
 * (test_attn_fa_tiles: the default against v1.) */
START_TEST(test_attn_fa3)
{
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa2", 16, 4, 256);
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa2", 16, 2, 256);
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa2", 8, 2, 128);
}
END_TEST

/* attn_fa3_overlap: the default (true: each warpgroup's softmax run while
 * the tile before's P V is on the tensor cores) against cuda16_fa3ov
 * (false: every product waited for), the same steps and shapes: v3's
 * per-row arithmetic in v3's order, so the same bits but for the tensor
 * cores' own summation order (the emulator sees the same bits): 1e-3 of
 * max |out|, test_attn_fa3's bound.  Where v3 does not run, v2 twice. */
START_TEST(test_attn_fa3_overlap)
{
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa3ov", 16, 4, 256);
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa3ov", 16, 2, 256);
    attn_fa_tiles_sec("backend.cuda16", "backend.cuda16_fa3ov", 8, 2, 128);
}
END_TEST

START_TEST(test_attn_long_simple)
{
    attn_long("backend.cpu16", "backend.cuda16_simple", 8, 1, 256, 1e-3);
}
END_TEST

/* attn_gqa = shared (cuda_attn_gqa.cu: K/V tiles staged by cp.async for
 * all query heads of a kv head), attn_prefill = split so every batch, not
 * only decode, takes it: the short sequence (error paths, seq_reset), then
 * the long-context steps (many splits, a sequence whose later splits are
 * empty) 35B-like (8 heads per kv head, f16, 32-position tiles), 9B-like
 * (16 on 4), and on the f32 cache (3 per kv head: one head per block;
 * 16-position tiles at head_dim 256). */
START_TEST(test_attn_gqa_shared)
{
    attn_env a;
    attn_open(&a, "backend.cpu16", "backend.cuda16_gqa", 0.0f);
    attn_sequence(&a, 1e-3);
    attn_close(&a);
}
END_TEST

START_TEST(test_attn_long_gqa_35b)
{
    attn_long("backend.cpu16", "backend.cuda16_gqa", 8, 1, 256, 1e-3);
}
END_TEST

START_TEST(test_attn_long_gqa_9b)
{
    attn_long("backend.cpu16", "backend.cuda16_gqa", 16, 4, 256, 1e-3);
}
END_TEST

/* attn_ring (cuda_attn_ring.cu) = true (4 warps, 3 stages where the
 * device's shared memory holds it) and small (2 warps, 2 stages: what
 * fits sm_120), both families' shapes and head_dim 128, each against the
 * cpu backend; cuda16_gqa (attn_ring = false: split_mma_kernel) is what the
 * sections above run. */
START_TEST(test_attn_long_ring)
{
    static const char *const secs[] = { "backend.cuda16_ring", "backend.cuda16_ring_small" };
    for (int i = 0; i < 2; i++) {
        attn_long("backend.cpu16", secs[i], 8, 1, 256, 1e-3);
        attn_long("backend.cpu16", secs[i], 16, 4, 256, 1e-3);
        attn_long("backend.cpu16", secs[i], 8, 2, 128, 1e-3);
    }
    attn_long("backend.cpu16", "backend.cuda16_gqa", 8, 2, 128, 1e-3);
}
END_TEST

/* attn_gqa = shared without attn_mma (split_gqa_kernel: the f16 cache's
 * core before the tensor-core one, kept as its A/B), both families' shapes */
START_TEST(test_attn_long_gqa_fma)
{
    attn_long("backend.cpu16", "backend.cuda16_gqa_fma", 8, 1, 256, 1e-3);
    attn_long("backend.cpu16", "backend.cuda16_gqa_fma", 16, 4, 256, 1e-3);
}
END_TEST

START_TEST(test_attn_long_gqa_f32)
{
    attn_long("backend.cpu", "backend.cuda_gqa32", 6, 2, 128, 1e-4);
    attn_long("backend.cpu", "backend.cuda_gqa32", 4, 2, 256, 1e-4);
}
END_TEST

/* f32 cache, head_dim 128, 3 query heads per kv head (one head per block). */
START_TEST(test_attn_long_f32)
{
    attn_long("backend.cpu", "backend.cuda_sm120", 6, 2, 128, 1e-4);
}
END_TEST

START_TEST(test_kv_too_big)
{
    if (as_cpu)
        return;
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    si_kv_desc d = { .size = sizeof d, .n_layer = 64, .n_head_kv = 64, .head_dim = 256, .n_seq = 256,
                     .n_ctx = 1u << 20 };
    si_kv *kv = NULL;
    si_err err = { { 0 } };
    ck_assert_int_eq(p.go->kv_create(p.gb, &d, &kv, &err), SI_ENOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "free"));
    ck_assert_ptr_null(kv);
    pair_close(&p);
}
END_TEST

/* ---- ATTN over the paged int8 cache (kv_type = i8) ------------------------ */

/* Three sequences through page boundaries (pages of 16 positions):
 * contexts 1, 15, 16, 17, 18, 100, 1000, 1001 with prefill batches that
 * interleave sequences and decode steps of several sequences at once;
 * then seq 1 is reset, its two pages go to seq 2 (the free list is a
 * stack) and seq 1 starts over in fresh pages.  cpu: f32 cache (exact);
 * cuda: int8 K/V, I8_TOL/I8_RMS.  9B-like grouping: 4 query heads per kv
 * head, head_dim 128.  cu_sec: the backend section (test_attn_i8_ring
 * runs the same steps with attn_ring). */
static void attn_i8_pages(const char *cu_sec)
{
    attn_env a;
    int32_t pos[512], seq[512];
    const uint32_t rng_saved = rng_state;
    rng_state = 4242u;
    printf(" ATTN i8 (%s), 3 sequences through page boundaries (reset and reuse at the end):\n", cu_sec);
    attn_open_seqs(&a, "backend.cpu", cu_sec, 0.0f, 8, 2, 128, 1024, 3);
    a.i8 = true;
    /* prefill, round robin: seq 0 one token, seq 1 15, seq 2 17 */
    uint32_t n = 0;
    for (int i = 0; i < 17; i++)
        for (int s = 0; s < 3; s++)
            if (i < (s == 0 ? 1 : s == 1 ? 15 : 17)) {
                seq[n] = s;
                pos[n++] = i;
            }
    attn_step(&a, n, pos, seq, 0, SI_OK);
    /* decode all three: contexts 2, 16 (seq 1's first page full), 18 */
    pos[0] = 1;  seq[0] = 0;
    pos[1] = 15; seq[1] = 1;
    pos[2] = 17; seq[2] = 2;
    attn_step(&a, 3, pos, seq, 0, SI_OK);
    /* seq 1 into its second page (context 17), seq 0 context 3 */
    pos[0] = 16; seq[0] = 1;
    pos[1] = 2;  seq[1] = 0;
    attn_step(&a, 2, pos, seq, 0, SI_OK);
    /* seq 2 to context 100 */
    for (int i = 0; i < 82; i++) {
        seq[i] = 2;
        pos[i] = 18 + i;
    }
    attn_step(&a, 82, pos, seq, 0, SI_OK);
    /* seq 0 to context 999 in two prefill batches */
    for (int b = 0; b < 2; b++) {
        const int cnt = b == 0 ? 512 : 484;
        for (int i = 0; i < cnt; i++) {
            seq[i] = 0;
            pos[i] = 3 + b * 512 + i;
        }
        attn_step(&a, (uint32_t)cnt, pos, seq, 0, SI_OK);
    }
    /* decode: seq 0 at context 1000 with the others, then 1001 alone */
    pos[0] = 999; seq[0] = 0;
    pos[1] = 17;  seq[1] = 1;
    pos[2] = 100; seq[2] = 2;
    attn_step(&a, 3, pos, seq, 0, SI_OK);
    pos[0] = 1000; seq[0] = 0;
    attn_step(&a, 1, pos, seq, 0, SI_OK);
    /* reset seq 1: its pages go back; seq 2 grows into two new pages
     * (101..140 reaches page 8), then seq 1 starts over with seq 0 */
    si_err err = { { 0 } };
    ck_assert(a.p.co->kv_seq_reset(a.p.cb, a.ckv, 1, &err) == SI_OK);
    ck_assert_msg(a.p.go->kv_seq_reset(a.p.gb, a.gkv, 1, &err) == SI_OK, "%s", err.msg);
    for (int i = 0; i < 40; i++) {
        seq[i] = 2;
        pos[i] = 101 + i;
    }
    attn_step(&a, 40, pos, seq, 0, SI_OK);
    for (int i = 0; i < 20; i++) {
        seq[i] = 1;
        pos[i] = i;
    }
    seq[20] = 0;
    pos[20] = 1001;
    attn_step(&a, 21, pos, seq, 0, SI_OK);
    pos[0] = 20;  seq[0] = 1;
    pos[1] = 141; seq[1] = 2;
    pos[2] = 1002; seq[2] = 0;
    attn_step(&a, 3, pos, seq, 0, SI_OK);
    attn_close(&a);
    rng_state = rng_saved;
}

START_TEST(test_attn_i8_pages)
{
    attn_i8_pages("backend.cuda_i8");
}
END_TEST

/* c[0] / g[0] (the op under test, output y of W rows and n columns) and
 * the out projection of y (dp4a: quantised; c[1] / g[1] filled here) in
 * one exec on each side of p, two cuda_sm120 sections: y and the product
 * compared bit for bit (outputs poisoned).  `what` names the op, `label`
 * the A/B. */
static void op_then_product(pair *p, si_op c[2], si_op g[2], const dt *y, int64_t W, uint32_t n, const char *what,
                            const char *label)
{
    dt w, out;
    dt_rand(p, &w, SI_TYPE_Q4_K, W, 96, 1, 1.0f);
    dt_make(p, &out, SI_TYPE_F32, 96, n, 1, NULL);
    c[1] = (si_op){ .kind = SI_OP_MATMUL, .src = { &w.c, &y->c }, .dst = out.c };
    g[1] = (si_op){ .kind = SI_OP_MATMUL, .src = { &w.g, &y->g }, .dst = out.g };
    si_err ec = { { 0 } }, eg = { { 0 } };
    int rc = p->co->exec(p->cb, c, 2, &ec);
    if (rc == SI_OK && p->co->sync != NULL)   /* (as_cpu: the cpu has none) */
        rc = p->co->sync(p->cb, &ec);
    int rg = p->go->exec(p->gb, g, 2, &eg);
    if (rg == SI_OK && p->go->sync != NULL)
        rg = p->go->sync(p->gb, &eg);
    ck_assert_msg(rc == SI_OK, "%s, reference side: %s", label, ec.msg);
    ck_assert_msg(rg == SI_OK, "%s: %s", label, eg.msg);
    char m[160];
    snprintf(m, sizeof m, "%s + MATMUL %s, n %u: %s output", what, label, n, what);
    dt_compare(p, y, 0.0, m);
    snprintf(m, sizeof m, "%s + MATMUL %s, n %u: product", what, label, n);
    dt_compare(p, &out, 0.0, m);
    dt_free(p, &w);
    dt_free(p, &out);
}

/* An ATTN (tokens pos/seq, layer 1) and the out projection of its output
 * on both sides of a->p (op_then_product). */
static void attn_q_exec(attn_env *a, uint32_t n, const int32_t *pos, const int32_t *seq, const char *label)
{
    const int64_t W = (int64_t)a->nh * a->hd;
    dt qg, k, v, y;
    dt_rand(&a->p, &qg, SI_TYPE_F32, 2 * W, n, 1, 2.0f);
    dt_rand(&a->p, &k, SI_TYPE_F32, a->nkv * a->hd, n, 1, 2.0f);
    dt_rand(&a->p, &v, SI_TYPE_F32, a->nkv * a->hd, n, 1, 1.0f);
    dt_make(&a->p, &y, SI_TYPE_F32, W, n, 1, NULL);
    const dt *src[5] = { &qg, &k, &v, &a->qn, &a->kn };
    si_op c[2] = { { .kind = SI_OP_ATTN } }, g[2];
    c[0].p.attn = (si_attn_params){ .n_head = a->nh, .n_head_kv = a->nkv, .head_dim = a->hd, .n_rot = a->n_rot,
                                    .eps = 1e-6f, .rope_base = 1e7f, .kv_layer = 1, .pos = pos, .seq = seq };
    g[0] = c[0];
    c[0].p.attn.kv = a->ckv;
    g[0].p.attn.kv = a->gkv;
    for (int i = 0; i < 5; i++) {
        c[0].src[i] = &src[i]->c;
        g[0].src[i] = &src[i]->g;
    }
    c[0].dst = y.c;
    g[0].dst = y.g;
    op_then_product(&a->p, c, g, &y, W, n, "ATTN", label);
    dt_free(&a->p, &qg);
    dt_free(&a->p, &k);
    dt_free(&a->p, &v);
    dt_free(&a->p, &y);
}

/* Knob fuse_attn_q: an ATTN and the out projection of its output in one
 * exec (combine_kernel writes the int8 copy the dp4a product reads, where
 * the core splits the context) against the same two ops with the product
 * quantising its input itself (fuse_attn_q = false): the same bits, output
 * and product.  The 9b's attention (16 heads of 256 on 4 kv heads) and
 * the 35b-a3b's (on 2), f16 and int8 caches: a 300-token prefill of each
 * of 2 sequences (flash attention or the split core; combined where in
 * splits), then decode steps of both at growing contexts (the split cores,
 * always combined). */
START_TEST(test_attn_q_fused)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const struct {
        const char *off, *on;
        uint32_t nkv;
    } v[] = { { "backend.cuda16_aq_off", "backend.cuda16_aq", 4 }, { "backend.cuda16_aq_off", "backend.cuda16_aq", 2 },
              { "backend.cuda_i8_aq_off", "backend.cuda_i8_aq", 4 } };
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        attn_env a;
        memset(&a, 0, sizeof a);
        pair_open_cu2(&a.p, v[k].off, v[k].on);
        attn_init(&a, 0.0f, 16, v[k].nkv, 256, 2048, 2);
        int32_t pos[600], seq[600];
        for (int i = 0; i < 600; i++) {
            seq[i] = i < 300 ? 0 : 1;
            pos[i] = i % 300;
        }
        attn_q_exec(&a, 600, pos, seq, "fuse_attn_q prefill");
        for (int step = 0; step < 6; step++) {
            pos[0] = 300 + step;
            seq[0] = 0;
            pos[1] = 300 + step;
            seq[1] = 1;
            attn_q_exec(&a, 2, pos, seq, "fuse_attn_q decode");
        }
        pos[0] = 306;
        seq[0] = 1;
        attn_q_exec(&a, 1, pos, seq, "fuse_attn_q decode, one sequence");
        attn_close(&a);
    }
}
END_TEST

/* attn_ring over the paged int8 cache (cuda_attn_ring.cu: int8 K/V
 * converted to f16 for the tensor cores, q and p rounded to f16): the
 * page-boundary steps above, then the long contexts of both families'
 * groupings and head_dim 128, true and small, each against the cpu
 * backend's f32 cache within the int8 bounds. */
START_TEST(test_attn_i8_ring)
{
    attn_i8_pages("backend.cuda_i8_ring");
    static const char *const secs[] = { "backend.cuda_i8_ring", "backend.cuda_i8_ring_small" };
    for (int i = 0; i < 2; i++) {
        attn_long_kv("backend.cpu", secs[i], 8, 1, 256, 0, true);
        attn_long_kv("backend.cpu", secs[i], 16, 4, 256, 0, true);
        attn_long_kv("backend.cpu", secs[i], 8, 2, 128, 0, true);
    }
}
END_TEST

/* attn_split_len = bucket (the default, context, runs in every other
 * attention test): the splits cut the planned max_len, not each token's
 * context; the int8 ring (35B-like and 9B-like), the f16 ring and the
 * per-head split kernel, each against the cpu backend. */
START_TEST(test_attn_split_len)
{
    attn_long_kv("backend.cpu", "backend.cuda_i8_ring_bucket", 8, 1, 256, 0, true);
    attn_long_kv("backend.cpu", "backend.cuda_i8_ring_bucket", 16, 4, 256, 0, true);
    attn_long("backend.cpu16", "backend.cuda16_ring_bucket", 16, 4, 256, 1e-3);
    attn_long("backend.cpu16", "backend.cuda16_split_bucket", 8, 1, 256, 1e-3);
}
END_TEST

/* attn_ring_pages = ahead (the default) against each, both on the GPU:
 * the same bits, 9B-like and 35B-like; then attn_ring_chains = 1 (one
 * score chain; the default 2 sums two: another f32 order) as
 * test_attn_i8_ring against the cpu, true and small, and over the f16
 * cache as test_attn_long_ring.  (A warp
 * crosses ahead's 32-group chunks only past ~270k positions here;
 * tests/cuda/emu runs that on one multiprocessor.) */
START_TEST(test_attn_ring_knobs)
{
    static const uint32_t shapes[2][2] = { { 16, 4 }, { 8, 1 } };
    for (int i = 0; i < 2; i++) {
        attn_env a;
        const uint32_t rng_saved = rng_state;
        rng_state = 779u;
        printf(" ATTN i8 attn_ring_pages ahead vs each, %u heads on %u:\n", shapes[i][0], shapes[i][1]);
        pair_open_cu2(&a.p, "backend.cuda_i8_ring_each", "backend.cuda_i8_ring_ahead");
        attn_init(&a, 0.0f, shapes[i][0], shapes[i][1], 256, 2048, 2);
        attn_long_steps(&a, 0.0);
        attn_close(&a);
        rng_state = rng_saved;
    }
    attn_i8_pages("backend.cuda_i8_ring_ch1");
    static const char *const secs[] = { "backend.cuda_i8_ring_ch1", "backend.cuda_i8_ring_ch1_small" };
    for (int i = 0; i < 2; i++) {
        attn_long_kv("backend.cpu", secs[i], 8, 1, 256, 0, true);
        attn_long_kv("backend.cpu", secs[i], 16, 4, 256, 0, true);
    }
    attn_long("backend.cpu16", "backend.cuda16_ring_ch1", 8, 1, 256, 1e-3);
    attn_long("backend.cpu16", "backend.cuda16_ring_ch1", 16, 4, 256, 1e-3);
}
END_TEST

/* 35B-like (head_dim 256, 8 query heads per kv head), long context with
 * many splits: the same steps as the f16/f32 long tests, split and
 * unsplit (attn = simple runs the int8 kernel with one split). */
START_TEST(test_attn_i8_long_split)
{
    printf(" ATTN i8, long context, split:\n");
    attn_long_kv("backend.cpu", "backend.cuda_i8", 8, 1, 256, 0, true);
}
END_TEST

START_TEST(test_attn_i8_long_simple)
{
    printf(" ATTN i8, long context, attn = simple (one split):\n");
    attn_long_kv("backend.cpu", "backend.cuda_i8_simple", 8, 1, 256, 0, true);
}
END_TEST

/* A pool of 4 pages (kv_pages = 4) for 2 sequences: a batch that needs a
 * page when none is free fails as a whole with SI_ENOMEM naming sequence,
 * position and pool; nothing of it is written (seq 0's token of that
 * batch then runs alone at the same position), and after a reset the
 * pages serve the other sequence.  The failing steps run on the cuda side
 * only (the cpu cache is not paged), so both caches stay in step; with
 * SI_CUDA_TEST_AS_CPU they are skipped. */
START_TEST(test_attn_i8_pool)
{
    attn_env a;
    int32_t pos[64], seq[64];
    si_err err = { { 0 } };
    const uint32_t rng_saved = rng_state;
    rng_state = 99u;
    printf(" ATTN i8, pool of 4 pages:\n");
    if (!as_cpu) {
        si_backend *bad = NULL;
        const struct si_backend_ops *ops = p_cu->ops;
        ck_assert_int_eq(ops->open(&host, "backend.cuda_badpages", &bad, &err), SI_EINVAL);
        ck_assert_msg(strstr(err.msg, "kv_pages") != NULL, "%s", err.msg);
    }
    attn_open_seqs(&a, "backend.cpu", "backend.cuda_i8_small", 0.0f, 4, 2, 64, 256, 2);
    a.i8 = true;
    for (int i = 0; i < 50; i++) {   /* seq 0: 40 positions (3 pages), seq 1: 10 (1 page) */
        seq[i] = i < 40 ? 0 : 1;
        pos[i] = i < 40 ? i : i - 40;
    }
    attn_step(&a, 50, pos, seq, 0, SI_OK);
    for (int i = 0; i < 6; i++) {    /* seq 1 to 16 positions: still its first page */
        seq[i] = 1;
        pos[i] = 10 + i;
    }
    attn_step(&a, 6, pos, seq, 0, SI_OK);
    if (!as_cpu) {
        pos[0] = 40; seq[0] = 0;      /* fits in seq 0's third page */
        pos[1] = 16; seq[1] = 1;      /* needs a fifth page */
        attn_run(&a, 2, pos, seq, 0, SI_ENOMEM, true, &err);
        printf("  pool exhausted as expected: %s\n", err.msg);
        ck_assert_msg(strstr(err.msg, "seq 1 ") != NULL && strstr(err.msg, "position 16 ") != NULL &&
                      strstr(err.msg, "pool's 4 pages") != NULL, "unclear message: %s", err.msg);
    }
    pos[0] = 40; seq[0] = 0;
    attn_step(&a, 1, pos, seq, 0, SI_OK);
    ck_assert(a.p.co->kv_seq_reset(a.p.cb, a.ckv, 0, &err) == SI_OK);
    ck_assert_msg(a.p.go->kv_seq_reset(a.p.gb, a.gkv, 0, &err) == SI_OK, "%s", err.msg);
    pos[0] = 16; seq[0] = 1;
    attn_step(&a, 1, pos, seq, 0, SI_OK);
    for (int i = 0; i < 30; i++) {   /* seq 0 anew: 2 pages; the pool is full again */
        seq[i] = 0;
        pos[i] = i;
    }
    attn_step(&a, 30, pos, seq, 0, SI_OK);
    pos[0] = 30; seq[0] = 0;
    pos[1] = 17; seq[1] = 1;
    attn_step(&a, 2, pos, seq, 0, SI_OK);
    pos[0] = 31; seq[0] = 0;
    attn_step(&a, 1, pos, seq, 0, SI_OK);
    if (!as_cpu) {
        pos[0] = 32; seq[0] = 0;
        attn_run(&a, 1, pos, seq, 0, SI_ENOMEM, true, &err);
        ck_assert_msg(strstr(err.msg, "seq 0 ") != NULL && strstr(err.msg, "position 32 ") != NULL, "%s", err.msg);
        /* and the other sequence still runs */
        pos[0] = 18; seq[0] = 1;
        attn_step(&a, 1, pos, seq, 0, SI_OK);
    }
    attn_close(&a);
    rng_state = rng_saved;
}
END_TEST

/* ---- GDN ------------------------------------------------------------------ */

typedef struct gdn_env {
    pair     p;
    uint32_t hk, hv, dk, dv, ck;
    int64_t  conv_dim;
    dt       conv, ssm_a, dtb, nw, state;
    uint64_t off, stride;
    const char *name;          /* for the messages */
    bool     print;            /* print the max errors */
    double   tol;              /* of output and state; 0: 1e-4 */
    double   ms_ref, ms_cu;    /* wall time of the last gdn_step, each side */
} gdn_env;

/* gdn_tc (the default where its shapes and shared memory allow: dk a
 * multiple of 32 up to 128): operands rounded to tf32, 2^-11 relative;
 * the host emulation of the kernel measures 3-5e-4 of max |ref| on these
 * cases (tests/cuda/emu/run-gdn-emu.sh), the H200 4.2e-4 (4096 tokens)
 * and 5.6e-4 (the 500-token batch) */
#define GDN_TC_TOL 2e-3

/* n_slots slots after a 64-byte offset, 16 spare bytes per slot; random
 * initial state, so reading the layout wrong shows. */
static void gdn_open_shape(gdn_env *e, const char *cu_sec, uint32_t hk, uint32_t hv, uint32_t dk, uint32_t dv,
                           int n_slots)
{
    if (e->p.cb == NULL)
        pair_open(&e->p, "backend.cpu", cu_sec);
    e->name = cu_sec;
    e->print = false;
    e->hk = hk;
    e->hv = hv;
    e->dk = dk;
    e->dv = dv;
    e->ck = 4;
    e->conv_dim = 2 * (int64_t)e->hk * e->dk + (int64_t)e->hv * e->dv;
    dt_rand(&e->p, &e->conv, SI_TYPE_F32, e->ck, e->conv_dim, 1, 0.7f);
    /* ssm_a negative, dt bias small, norm weight around 1 */
    float *a = malloc(hv * sizeof *a), *b = malloc(hv * sizeof *b), *nw = malloc(dv * sizeof *nw);
    ck_assert(a != NULL && b != NULL && nw != NULL);
    for (uint32_t i = 0; i < hv; i++) {
        a[i] = -0.2f - 0.5f * (float)(i % 4);
        b[i] = 0.3f * frand();
    }
    for (uint32_t i = 0; i < dv; i++)
        nw[i] = 1.0f + 0.2f * frand();
    dt_make(&e->p, &e->ssm_a, SI_TYPE_F32, hv, 1, 1, a);
    dt_make(&e->p, &e->dtb, SI_TYPE_F32, hv, 1, 1, b);
    dt_make(&e->p, &e->nw, SI_TYPE_F32, dv, 1, 1, nw);
    free(a);
    free(b);
    free(nw);
    uint64_t need = ((uint64_t)e->conv_dim * (e->ck - 1) + (uint64_t)e->hv * e->dv * e->dk) * 4;
    e->off = 64;
    e->stride = need + 16;
    int64_t words = (int64_t)((e->off + (uint64_t)n_slots * e->stride) / 4);
    dt_rand(&e->p, &e->state, SI_TYPE_F32, words, 1, 1, 0.5f);
}

static void gdn_close(gdn_env *e)
{
    dt_free(&e->p, &e->conv);
    dt_free(&e->p, &e->ssm_a);
    dt_free(&e->p, &e->dtb);
    dt_free(&e->p, &e->nw);
    dt_free(&e->p, &e->state);
    pair_close(&e->p);
}

static void gdn_step(gdn_env *e, uint32_t n, const int32_t *seq, int expect)
{
    dt u, z, b, a, y;
    dt_rand(&e->p, &u, SI_TYPE_F32, e->conv_dim, n, 1, 2.0f);
    dt_rand(&e->p, &z, SI_TYPE_F32, (int64_t)e->hv * e->dv, n, 1, 2.0f);
    dt_rand(&e->p, &b, SI_TYPE_F32, e->hv, n, 1, 2.0f);
    dt_rand(&e->p, &a, SI_TYPE_F32, e->hv, n, 1, 2.0f);
    dt_make(&e->p, &y, SI_TYPE_F32, (int64_t)e->hv * e->dv, n, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_GDN }, .dst = &y,
               .src = { &u, &z, &b, &a, &e->conv, &e->ssm_a, &e->dtb, &e->nw } };
    si_op c = o.op, g = o.op;
    si_gdn_params gp = { .n_k_head = e->hk, .n_v_head = e->hv, .head_k_dim = e->dk, .head_v_dim = e->dv,
                         .conv_k = e->ck, .eps = 1e-6f, .state_offset = e->off, .state_stride = e->stride,
                         .seq = seq };
    c.p.gdn = gp;
    g.p.gdn = gp;
    c.p.gdn.state = e->state.cbuf;
    g.p.gdn.state = e->state.gbuf;
    c.dst = y.c;
    g.dst = y.g;
    for (int i = 0; i < 8; i++) {
        c.src[i] = &o.src[i]->c;
        g.src[i] = &o.src[i]->g;
    }
    ck_assert(e->p.co->supports(e->p.cb, &c));
    ck_assert(e->p.go->supports(e->p.gb, &g));
    si_err ec = { { 0 } }, eg = { { 0 } };
    double t0 = now_ms();
    int rc = e->p.co->exec(e->p.cb, &c, 1, &ec);
    if (rc == SI_OK && e->p.co->sync != NULL)
        rc = e->p.co->sync(e->p.cb, &ec);
    double t1 = now_ms();
    int rg = e->p.go->exec(e->p.gb, &g, 1, &eg);
    if (rg == SI_OK && e->p.go->sync != NULL)
        rg = e->p.go->sync(e->p.gb, &eg);
    double t2 = now_ms();
    e->ms_ref = t1 - t0;
    e->ms_cu = t2 - t1;
    ck_assert_msg(rc == expect, "ref: %d %s", rc, ec.msg);
    ck_assert_msg(rg == expect, "cuda: %d %s", rg, eg.msg);
    if (expect == SI_OK) {
        char what[160];
        snprintf(what, sizeof what, "GDN output [%s dk %u dv %u n %u]", e->name, e->dk, e->dv, n);
        const double tol = e->tol > 0.0 ? e->tol : 1e-4;
        dt_compare_ex(&e->p, &y, tol, what, e->print);
        snprintf(what, sizeof what, "GDN state  [%s dk %u dv %u n %u]", e->name, e->dk, e->dv, n);
        dt_compare_ex(&e->p, &e->state, tol, what, e->print);
    }
    dt_free(&e->p, &u);
    dt_free(&e->p, &z);
    dt_free(&e->p, &b);
    dt_free(&e->p, &a);
    dt_free(&e->p, &y);
}

/* Both delta-rule kernels (gdn_rows = true: state rows in registers;
 * false: one block per head), at a small odd shape and at the real head
 * size (dk = dv = 128). */
static const struct {
    const char *sec;
    uint32_t    dk, dv;
} gdn_shapes[] = {
    { "backend.cuda_sm120", 32, 48 },
    { "backend.cuda_sm120", 128, 128 },
    { "backend.cuda_gdn_block", 32, 48 },
    { "backend.cuda_gdn_block", 128, 128 },
};

START_TEST(test_gdn)
{
    gdn_env e;
    memset(&e, 0, sizeof e);
    gdn_open_shape(&e, gdn_shapes[_i].sec, 2, 4, gdn_shapes[_i].dk, gdn_shapes[_i].dv, 2);
    int32_t seq[16];
    for (int i = 0; i < 10; i++)
        seq[i] = i < 6 ? 0 : 1;                 /* multi-token, both slots */
    gdn_step(&e, 10, seq, SI_OK);
    seq[0] = 1;
    seq[1] = 0;                                 /* one token each, other order */
    gdn_step(&e, 2, seq, SI_OK);
    seq[0] = seq[1] = 1;                        /* two tokens (< conv_k - 1 + 1) */
    gdn_step(&e, 2, seq, SI_OK);
    seq[0] = 0;
    gdn_step(&e, 1, seq, SI_OK);                /* single token */
    seq[0] = 0; seq[1] = 1; seq[2] = 0;         /* slot 0 not consecutive */
    gdn_step(&e, 3, seq, SI_EINVAL);
    seq[0] = 2;                                 /* a slot outside the buffer */
    gdn_step(&e, 1, seq, SI_ERANGE);
    gdn_close(&e);
}
END_TEST

/* A GDN (tokens seq[0..n)) and the out projection of its output on both
 * sides of e->p (op_then_product); the state compared bit for bit too. */
static void gdn_q_exec(gdn_env *e, uint32_t n, const int32_t *seq, const char *label)
{
    const int64_t W = (int64_t)e->hv * e->dv;
    dt u, z, b, a, y;
    dt_rand(&e->p, &u, SI_TYPE_F32, e->conv_dim, n, 1, 2.0f);
    dt_rand(&e->p, &z, SI_TYPE_F32, W, n, 1, 2.0f);
    dt_rand(&e->p, &b, SI_TYPE_F32, e->hv, n, 1, 2.0f);
    dt_rand(&e->p, &a, SI_TYPE_F32, e->hv, n, 1, 2.0f);
    dt_make(&e->p, &y, SI_TYPE_F32, W, n, 1, NULL);
    const dt *src[8] = { &u, &z, &b, &a, &e->conv, &e->ssm_a, &e->dtb, &e->nw };
    si_op c[2] = { { .kind = SI_OP_GDN } }, g[2];
    c[0].p.gdn = (si_gdn_params){ .n_k_head = e->hk, .n_v_head = e->hv, .head_k_dim = e->dk, .head_v_dim = e->dv,
                                  .conv_k = e->ck, .eps = 1e-6f, .state_offset = e->off, .state_stride = e->stride,
                                  .seq = seq };
    g[0] = c[0];
    c[0].p.gdn.state = e->state.cbuf;
    g[0].p.gdn.state = e->state.gbuf;
    for (int i = 0; i < 8; i++) {
        c[0].src[i] = &src[i]->c;
        g[0].src[i] = &src[i]->g;
    }
    c[0].dst = y.c;
    g[0].dst = y.g;
    op_then_product(&e->p, c, g, &y, W, n, "GDN", label);
    char what[128];
    snprintf(what, sizeof what, "GDN + MATMUL %s, n %u: state", label, n);
    dt_compare(&e->p, &e->state, 0.0, what);
    dt_free(&e->p, &u);
    dt_free(&e->p, &z);
    dt_free(&e->p, &b);
    dt_free(&e->p, &a);
    dt_free(&e->p, &y);
}

/* A GDN and the out projection of its output in one exec (knob
 * fuse_gdn_q: on the state-rows path the norm kernel writes the int8 copy
 * the dp4a product reads) against the same two ops with the product
 * quantising its input itself: the same bits, GDN output, state and
 * product, for 1, 3 and 8 tokens. */
START_TEST(test_gdn_q_fused)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    gdn_env e;
    memset(&e, 0, sizeof e);
    pair_open_cu2(&e.p, "backend.cuda_gdnq_off", "backend.cuda_gdnq_on");
    gdn_open_shape(&e, "gdn_q", 2, 4, 128, 128, 8);
    static const uint32_t ns[] = { 1, 3, 8 };
    for (size_t k = 0; k < 3; k++) {
        int32_t seq[8];
        for (uint32_t i = 0; i < ns[k]; i++)
            seq[i] = (int32_t)i;   /* one token a sequence: decode */
        gdn_q_exec(&e, ns[k], seq, "fuse_gdn_q");
    }
    gdn_close(&e);
}
END_TEST

/* Knob gdn_dec = fused (the decode step as one launch of thread-block
 * clusters, cuda_gdn_rows.cu fused_kernel) against split (conv, rows and
 * norm kernels, quant_x in the product): bit for bit, GDN output, state
 * and the out projection (which reads the fused kernel's int8 copy), over
 * 8 steps in a row (the conv state's shift feeds the next) of 1..8
 * sequences in changing slot order, one step with a 2-token run (max_len
 * 2: the fused side falls back to split); shapes: the 9b/35b heads (2
 * v-heads a k-head: clusters of 8 blocks), 1 v-head a k-head (clusters of
 * 4), dk = dv = 64, and 8 v-heads of 64 on one k-head (512 rows: more
 * than a cluster of 8 blocks holds, so split on both sides).  Then the
 * fused side against the cpu over decode steps (tol 1e-4, as test_gdn). */
START_TEST(test_gdn_dec_fused)
{
    static const struct {
        uint32_t hk, hv, dk, dv;
    } shapes[] = { { 2, 4, 128, 128 }, { 4, 4, 128, 128 }, { 2, 4, 64, 64 }, { 1, 8, 32, 64 } };
    static const uint32_t ns[] = { 1, 3, 8, 8, 2, 5, 8, 4 };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        gdn_env e;
        memset(&e, 0, sizeof e);
        pair_open_cu2(&e.p, "backend.cuda_gdn_split", "backend.cuda_gdn_fused");
        gdn_open_shape(&e, "gdn_dec", shapes[k].hk, shapes[k].hv, shapes[k].dk, shapes[k].dv, 8);
        for (uint32_t step = 0; step < sizeof ns / sizeof ns[0]; step++) {
            int32_t seq[8];
            const uint32_t n = ns[step];
            for (uint32_t i = 0; i < n; i++)   /* distinct slots, rotated / reversed by step */
                seq[i] = (int32_t)((step & 1 ? 7 - i : i + step) % 8);
            if (step == 4)
                seq[1] = seq[0];               /* one run of 2 tokens: split on both sides */
            gdn_q_exec(&e, n, seq, "gdn_dec = fused vs split");
        }
        gdn_close(&e);
    }
    gdn_env e;
    memset(&e, 0, sizeof e);
    gdn_open_shape(&e, "backend.cuda_gdn_fused", 2, 4, 128, 128, 8);
    for (uint32_t step = 0; step < 6; step++) {
        int32_t seq[8];
        const uint32_t n = step % 3 == 0 ? 1 : step % 3 == 1 ? 8 : 3;
        for (uint32_t i = 0; i < n; i++)
            seq[i] = (int32_t)((step & 1 ? 7 - i : i + step) % 8);
        gdn_step(&e, n, seq, SI_OK);
    }
    gdn_close(&e);
}
END_TEST

/* Knob gdn_early (default true: fused_kernel's state rows loaded before
 * the programmatic-launch wait) against the fused kernel without it
 * (cuda_gdn_fused: gdn_early = false): bit for bit,
 * GDN output, state and the out projection, over decode steps of 1..8
 * sequences on the 9b/35b heads.  (The early loads read only what earlier
 * launches wrote; the whole-model checks run it behind real products.) */
START_TEST(test_gdn_dec_early)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const uint32_t ns[] = { 1, 3, 8, 8, 5, 1 };
    gdn_env e;
    memset(&e, 0, sizeof e);
    pair_open_cu2(&e.p, "backend.cuda_gdn_fused", "backend.cuda_gdn_early");
    gdn_open_shape(&e, "gdn_early", 2, 4, 128, 128, 8);
    for (uint32_t step = 0; step < sizeof ns / sizeof ns[0]; step++) {
        int32_t seq[8];
        for (uint32_t i = 0; i < ns[step]; i++)
            seq[i] = (int32_t)((step & 1 ? 7 - i : i + step) % 8);
        gdn_q_exec(&e, ns[step], seq, "gdn_early vs fused");
    }
    gdn_close(&e);
}
END_TEST

/* Prefill-sized runs: the chunked path (runs >= 32 tokens, chunks of 64)
 * and the token-by-token one against the cpu backend, from a random
 * (non-zero) state: runs of 1, 70, 129, 300 tokens (chunk boundaries, a
 * partial last chunk, a short run beside long ones in one batch), then a
 * second batch continuing from the state the first left (64: exactly one
 * chunk; 33: one chunk just over the threshold; 31: just under it).
 * Shapes: the real head dims (dk = dv = 128) and an awkward one (dk 30:
 * padded to 32 in the tiles; dv 40: a partial slice of value columns;
 * 6 v-heads on 2 k-heads).  tol: of output and state (0: 1e-4). */
static void gdn_prefill_case(const char *cu_sec, uint32_t hk, uint32_t hv, uint32_t dk, uint32_t dv, double tol)
{
    /* own seed: the later tests keep the inputs they had before this case */
    const uint32_t saved_rng = rng_state;
    rng_state = 4242u + dk;
    gdn_env e;
    memset(&e, 0, sizeof e);
    gdn_open_shape(&e, cu_sec, hk, hv, dk, dv, 4);
    e.print = true;
    e.tol = tol;
    static const int len1[4] = { 1, 70, 129, 300 }, slot2[4] = { 3, 2, 0, 1 }, len2[4] = { 64, 33, 31, 1 };
    int32_t *seq = malloc(600 * sizeof *seq);
    ck_assert_ptr_nonnull(seq);
    uint32_t n = 0;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < len1[r]; i++)
            seq[n++] = r;
    gdn_step(&e, n, seq, SI_OK);
    n = 0;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < len2[r]; i++)
            seq[n++] = slot2[r];
    gdn_step(&e, n, seq, SI_OK);
    free(seq);
    gdn_close(&e);
    rng_state = saved_rng;
}

START_TEST(test_gdn_prefill_chunked)
{
    /* (dk 128: gdn_tc's tensor cores on sm_90; dk 30: the f32 kernel) */
    gdn_prefill_case("backend.cuda_sm120", 2, 4, 128, 128, GDN_TC_TOL);
    gdn_prefill_case("backend.cuda_sm120", 2, 6, 30, 40, 0.0);
    gdn_prefill_case("backend.cuda_gdn_f32", 2, 4, 128, 128, 0.0);
}
END_TEST

START_TEST(test_gdn_prefill_seq)
{
    gdn_prefill_case("backend.cuda_gdn_seq", 2, 4, 128, 128, 0.0);
    gdn_prefill_case("backend.cuda_gdn_seq", 2, 6, 30, 40, 0.0);
}
END_TEST

/* The 9b GDN shape (16 k-heads, 32 v-heads, dk = dv = 128), one sequence
 * of 4096 tokens, twice (the second from the state the first left):
 * gdn_prefill = chunked against seq on the GPU (the cpu reference would
 * take seconds here; the cases above hold both against it), with the
 * tensor cores (gdn_tc, within GDN_TC_TOL) and without (within 1e-4),
 * and the wall time of each (exec + sync; the first round includes
 * workspace growth).  A report, not an assertion about speed. */
START_TEST(test_gdn_prefill_9b_timing)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const struct { const char *sec, *name; double tol; } sides[] = {
        { "backend.cuda_sm120", "gdn_tc = true", GDN_TC_TOL },
        { "backend.cuda_gdn_f32", "gdn_tc = false", 0.0 },
    };
    for (size_t k = 0; k < sizeof sides / sizeof sides[0]; k++) {
        const uint32_t saved_rng = rng_state;
        rng_state = 9090u;
        gdn_env e;
        memset(&e, 0, sizeof e);
        pair_open_cu2(&e.p, "backend.cuda_gdn_seq", sides[k].sec);
        gdn_open_shape(&e, sides[k].name, 16, 32, 128, 128, 1);
        e.print = true;
        e.tol = sides[k].tol;
        enum { N = 4096 };
        int32_t *seq = calloc(N, sizeof *seq);
        ck_assert_ptr_nonnull(seq);
        for (int round = 0; round < 2; round++) {
            gdn_step(&e, N, seq, SI_OK);
            printf("GDN 9b shape, %d tokens, round %d: seq %.2f ms, chunked (%s) %.2f ms (%.1fx)\n", N, round,
                   e.ms_ref, sides[k].name, e.ms_cu, e.ms_ref / fmax(e.ms_cu, 1e-9));
        }
        free(seq);
        gdn_close(&e);
        rng_state = saved_rng;
    }
}
END_TEST

/* An unknown gdn_prefill, gemv_staged_q6, attn_ring, attn_ring_pages,
 * attn_ring_chains, attn_split_blocks, attn_split_len (and the other knobs below, among
 * them mm_block_cols) value is refused at open, naming key and value. */
START_TEST(test_gdn_prefill_knob)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob */
    si_backend *b = NULL;
    si_err err = { { 0 } };
    const struct si_backend_ops *ops = p_cu->ops;
    ck_assert_int_eq(ops->open(&host, "backend.cuda_gdn_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gdn_prefill") != NULL && strstr(err.msg, "fast") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_st6_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gemv_staged_q6") != NULL && strstr(err.msg, "'some'") != NULL, "message: %s",
                  err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_ovl_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "moe_overlap") != NULL && strstr(err.msg, "'often'") != NULL, "message: %s",
                  err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_prof_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "profile") != NULL && strstr(err.msg, "'often'") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_ring_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "attn_ring") != NULL && strstr(err.msg, "'big'") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_ringp_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "attn_ring_pages") != NULL && strstr(err.msg, "'soon'") != NULL, "message: %s",
                  err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_ringc_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "attn_ring_chains") != NULL && strstr(err.msg, "'3'") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_wregs_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gemv_wide_regs") != NULL && strstr(err.msg, "'many'") != NULL, "message: %s",
                  err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_wring_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gemv_wide_ring") != NULL && strstr(err.msg, "'q8'") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_narrow_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gemv_narrow") != NULL && strstr(err.msg, "'q8'") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_mcols_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "gemv_mma_cols") != NULL && strstr(err.msg, "9") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_slen_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "attn_split_len") != NULL && strstr(err.msg, "'soon'") != NULL, "message: %s",
                  err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_sb_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "mm_block_cols") != NULL && strstr(err.msg, "'1'") != NULL, "message: %s", err.msg);
    ck_assert_int_eq(ops->open(&host, "backend.cuda_pm_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "moe_persist") != NULL && strstr(err.msg, "'yes'") != NULL, "message: %s", err.msg);
    static const char *const sb_bad[] = { "backend.cuda_sb_bad0", "backend.cuda_sb_bad33", "backend.cuda_sb_badx" };
    static const char *const sb_val[] = { "'0'", "'33'", "'2x'" };
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ops->open(&host, sb_bad[i], &b, &err), SI_EINVAL);
        ck_assert_msg(strstr(err.msg, "attn_split_blocks") != NULL && strstr(err.msg, sb_val[i]) != NULL,
                      "message: %s", err.msg);
    }
}
END_TEST

/* ---- MOE ------------------------------------------------------------------ */

/* Experts and top-k of the MOE cases (test_moe_route widens them); the
 * shared expert as wide as the routed ones (test_moe_fs_same; as in
 * Qwen3.6-35B-A3B: one SwiGLU launch serves both). */
static int64_t moe_E = 8, moe_K = 2;
static bool moe_fs_same, moe_exact;

/* The shared expert's four weights of a MOE case (gate row, gate, up,
 * down), made together, freed together. */
static void moe_shared_free(pair *p, dt *sgi, dt *sg, dt *su, dt *sd)
{
    dt_free(p, sgi);
    dt_free(p, sg);
    dt_free(p, su);
    dt_free(p, sd);
}

static void moe_case_tol(pair *p, uint32_t wt, bool fused, bool shared, int64_t n, int64_t H, int64_t F, bool dp4a)
{
    const int64_t E = moe_E, K = moe_K, Fs = moe_fs_same ? F : 2 * F;   /* (default) a width unlike F, whole blocks */
    dt h, router, gate, up, down, sgi, sg, su, sd, y;
    dt_rand(p, &h, SI_TYPE_F32, H, n, 1, 1.0f);
    dt_rand(p, &router, SI_TYPE_F32, H, E, 1, 1.0f);   /* well separated router logits */
    dt_rand(p, &gate, wt, H, fused ? 2 * F : F, E, 0.3f);
    if (!fused)
        dt_rand(p, &up, wt, H, F, E, 0.3f);
    dt_rand(p, &down, wt, F, H, E, 0.3f);
    if (shared) {
        dt_rand(p, &sgi, SI_TYPE_F32, H, 1, 1, 0.3f);
        dt_rand(p, &sg, wt, H, Fs, 1, 0.3f);
        dt_rand(p, &su, wt, H, Fs, 1, 0.3f);
        dt_rand(p, &sd, wt, Fs, H, 1, 0.3f);
    }
    dt_make(p, &y, SI_TYPE_F32, H, n, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_MOE, .p.moe = { .n_expert = (uint32_t)E, .n_used = (uint32_t)K } }, .dst = &y,
               .src = { &h, &router, &gate, fused ? NULL : &up, &down, shared ? &sgi : NULL, shared ? &sg : NULL,
                        shared ? &su : NULL, shared ? &sd : NULL } };
    run_ok(p, &o);
    char what[96];
    snprintf(what, sizeof what, "MOE%s %s%s%s n %lld", dp4a ? " dp4a" : "", host.type_name(wt), fused ? " fused" : "",
             shared ? " shared" : "", (long long)n);
    if (dp4a)   /* two int8 roundings in series: h, then the SwiGLU output */
        dt_compare_rms(p, &y, 2 * DP4A_RMS, what);
    else
        dt_compare(p, &y, moe_exact ? 0.0 : wtol(wt), what);
    dt_free(p, &h);
    dt_free(p, &router);
    dt_free(p, &gate);
    if (!fused)
        dt_free(p, &up);
    dt_free(p, &down);
    if (shared)
        moe_shared_free(p, &sgi, &sg, &su, &sd);
    dt_free(p, &y);
}

static void moe_case(pair *p, uint32_t wt, bool fused, bool shared, int64_t n, int64_t H, int64_t F)
{
    moe_case_tol(p, wt, fused, shared, n, H, F, false);
}

/* The expert products through dp4a (one column per token and expert, any
 * count), the shared expert's products too (n <= 8), and the f32 router. */
START_TEST(test_moe_dp4a)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_dp4a");
    static const int64_t ns[] = { 1, 33 };
    for (int k = 0; k < 2; k++) {
        moe_case_tol(&p, SI_TYPE_Q8_0, true, true, ns[k], 64, 32, true);
        moe_case_tol(&p, SI_TYPE_Q4_K, false, true, ns[k], 256, 256, true);
        moe_case_tol(&p, SI_TYPE_Q5_K, true, false, ns[k], 256, 256, true);
        moe_case_tol(&p, SI_TYPE_Q6_K, false, true, ns[k], 256, 256, true);
    }
    pair_close(&p);
}
END_TEST

/* gemv = v1 (the default decode GEMV) against the cpu, as
 * test_matmul_dp4a and test_moe_dp4a hold v2 (named in cuda_dp4a); then v2 against
 * v1 on the GPU: the same integer terms, only the f32 summation order may
 * differ (rows of a non-power-of-two count of < 32 units: in 768, Q8_0 in
 * 96/352), so 1e-5 for MATMUL (1e-3 for MOE, whose SwiGLU output is
 * quantised again: one int8 rounding may flip). */
START_TEST(test_gemv_v1)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_dp4a_v1");
    static const int64_t ns[] = { 1, 2, 3, 8 };
    for (size_t t = 0; t < N_WTYPES; t++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            matmul_case_tol(&p, wtypes[t], 512, 67, ns[k], true);
        matmul_case_tol(&p, wtypes[t], 4096, 33, 1, true);
    }
    moe_case_tol(&p, SI_TYPE_Q4_K, false, true, 1, 256, 256, true);
    moe_case_tol(&p, SI_TYPE_Q6_K, true, true, 33, 256, 256, true);
    pair_close(&p);
}
END_TEST

static void matmul_ab_tol(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n, double tol)
{
    dt w, x, y;
    dt_rand(p, &w, type, in, out, 1, 1.0f);
    dt_rand(p, &x, SI_TYPE_F32, in, n, 1, 1.0f);
    dt_make(p, &y, SI_TYPE_F32, out, n, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_MATMUL }, .dst = &y, .src = { &w, &x } };
    run_ok(p, &o);
    char what[96];
    snprintf(what, sizeof what, "MATMUL gemv A/B %s in %lld out %lld n %lld", host.type_name(type),
             (long long)in, (long long)out, (long long)n);
    /* two f32 orders of the same terms: their difference scales with the
     * terms (|w x| ~ 1/3 here, in of them), not with an output that may
     * sit near 0 by cancellation (one row: max |y| is that one output;
     * a 6144-wide row once gave 0.397 against a typical 26) */
    dt_compare_fl(p, &y, tol, sqrt((double)in) / 3.0, what, false);
    dt_free(p, &w);
    dt_free(p, &x);
    dt_free(p, &y);
}

static void matmul_ab(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n)
{
    matmul_ab_tol(p, type, in, out, n, 1e-5);
}

/* The decode expert products on cuda_gemvq.cu (gemv_quad_experts, the
 * default in cuda_dp4a_v1) at Qwen3.6-35B-A3B's widths (gate/up 2048 -> 512:
 * 8 blocks a step; down 512 -> 2048: 2) and at 1024 (4), top-8 of 16:
 * against the cpu's int8 path, and against v1's own expert units
 * (cuda_v1_noquad; another f32 order, so MOE's 1e-3 of test_gemv_v1). */
START_TEST(test_moe_quad_experts)
{
    moe_E = 16;
    moe_K = 8;
    moe_fs_same = true;
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_dp4a_v1");
    moe_case_tol(&p, SI_TYPE_Q4_K, false, true, 1, 2048, 512, true);
    moe_case_tol(&p, SI_TYPE_Q5_K, true, true, 3, 1024, 512, true);
    pair_close(&p);
    if (!as_cpu) {
        static const uint32_t kq[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K };
        static const int64_t ns[] = { 1, 8 };
        pair_open_cu2(&p, "backend.cuda_v1_noquad", "backend.cuda_dp4a_v1");
        for (size_t t = 0; t < 3; t++)
            for (size_t k = 0; k < 2; k++)
                /* (Q6_K rows of 512 are not 16-byte aligned: v1 there) */
                moe_case_tol(&p, kq[t], k == 1, true, ns[k], 2048, kq[t] == SI_TYPE_Q6_K ? 2048 : 512, false);
        pair_close(&p);
        /* the picks and first weights read before the programmatic-launch
         * wait (expert_early, the default) against routed-first: the same
         * kernels' sums, the same bits (MOE's own tolerance is then 0) */
        pair_open_cu2(&p, "backend.cuda_v1_late", "backend.cuda_dp4a_v1");
        moe_exact = true;
        for (size_t k = 0; k < 2; k++)
            moe_case_tol(&p, SI_TYPE_Q4_K, k == 1, true, ns[k], 2048, 512, false);
        moe_exact = false;
        pair_close(&p);
    }
    moe_E = 8;
    moe_K = 2;
    moe_fs_same = false;
}
END_TEST

/* A cuda_sm120 knob's A/B on the decode MOE, bit for bit, at
 * Qwen3.6-35B-A3B's shapes (E 256, K 8, H 2048, F = Fs 512; Q4_K gate/up
 * experts as one matrix, `dtype` down experts, an F32 shared gate row
 * stored as the router, shared expert of `stype`) for each token count of
 * ns[]; the weights made once. */
/* (tol 0: bit for bit; knobs that change an f32 order compare within tol) */
static void moe_ab_35b_tol(const char *ref_sec, const char *sec, uint32_t dtype, uint32_t stype, const int64_t *ns,
                           size_t n_ns, const char *label, double tol)
{
    const int64_t E = 256, K = 8, H = 2048, F = 512;
    pair p;
    pair_open_cu2(&p, ref_sec, sec);
    dt router, gate, down, sgi, sg, su, sd;
    dt_rand(&p, &router, SI_TYPE_F32, H, E, 1, 1.0f);
    dt_rand_raw(&p, &gate, SI_TYPE_Q4_K, H, 2 * F, E);   /* gate and up as one matrix */
    dt_rand_raw(&p, &down, dtype, F, H, E);
    dt_rand(&p, &sgi, SI_TYPE_F32, H, 1, 1, 0.3f);   /* (stored as the router: in its launch) */
    dt_rand_raw(&p, &sg, stype, H, F, 1);
    dt_rand_raw(&p, &su, stype, H, F, 1);
    dt_rand_raw(&p, &sd, stype, F, H, 1);
    for (size_t k = 0; k < n_ns; k++) {
        dt h, y;
        dt_rand(&p, &h, SI_TYPE_F32, H, ns[k], 1, 1.0f);
        dt_make(&p, &y, SI_TYPE_F32, H, ns[k], 1, NULL);
        opdt o = { .op = { .kind = SI_OP_MOE, .p.moe = { .n_expert = (uint32_t)E, .n_used = (uint32_t)K } },
                   .dst = &y, .src = { &h, &router, &gate, NULL, &down, &sgi, &sg, &su, &sd } };
        run_ok(&p, &o);
        char what[128];
        snprintf(what, sizeof what, "MOE %s A/B, 35b shapes, shared %s, n %lld (run %zu)", label,
                 host.type_name(stype), (long long)ns[k], k);
        dt_compare(&p, &y, tol, what);
        dt_free(&p, &h);
        dt_free(&p, &y);
    }
    dt_free(&p, &router);
    dt_free(&p, &gate);
    dt_free(&p, &down);
    moe_shared_free(&p, &sgi, &sg, &su, &sd);
    pair_close(&p);
}

static void moe_ab_35b(const char *ref_sec, const char *sec, uint32_t dtype, uint32_t stype, const int64_t *ns,
                       size_t n_ns, const char *label)
{
    moe_ab_35b_tol(ref_sec, sec, dtype, stype, ns, n_ns, label, 0.0);
}

/* Knob moe_overlap: the decode MOE's shared expert on the side stream
 * beside the router and routed experts (cuda_ops_moe.c moe_overlapped)
 * against the in-line launches (cuda_v1_noovl): a Q8_0 shared expert (the
 * UD-Q4_K_M file's) with moe_overlap = true (the fork at one token too),
 * a Q4_K one with the default (batch: in line at one token), Q5_K down
 * experts, for 1, 3, 8 tokens and 1 again. */
START_TEST(test_moe_overlap)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const int64_t ns[] = { 1, 3, 8, 1 };
    moe_ab_35b("backend.cuda_v1_noovl", "backend.cuda_v1_ovl", SI_TYPE_Q5_K, SI_TYPE_Q8_0, ns, 4, "moe_overlap");
    moe_ab_35b("backend.cuda_v1_noovl", "backend.cuda_dp4a_v1", SI_TYPE_Q5_K, SI_TYPE_Q4_K, ns, 4, "moe_overlap");
}
END_TEST

/* Knob gemv_glu on the MOE decode: the routed gate/up with the SwiGLU of
 * every column and of the shared expert's rows in one launch, against
 * gemv_glu = false (the gate/up then swiglu_q_kernel), bit for bit, for 1
 * token (taken), 3 (taken: any column count) and 1 again; a Q8_0 shared
 * expert and a Q4_K one. */
START_TEST(test_gemv_glu_moe)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const int64_t ns[] = { 1, 3, 1 };
    moe_ab_35b("backend.cuda_glu_off", "backend.cuda_glu", SI_TYPE_Q5_K, SI_TYPE_Q8_0, ns, 3, "gemv_glu");
    moe_ab_35b("backend.cuda_glu_off", "backend.cuda_glu", SI_TYPE_Q4_K, SI_TYPE_Q4_K, ns, 3, "gemv_glu");
}
END_TEST

/* Knob gemv_mma (default true, in cuda_dp4a_v1): the dense products of
 * 2..8 columns on mma.sync int8 (cuda_gemvm.cu) against the cpu's int8
 * path at the models' widths, then against the dp4a kernels they replace
 * (gemv_mma = false: gemv_quad_cols' gq_kernel for K-quants, v1's units
 * for Q8_0): the same integer terms in another f32 order (1e-5 of the
 * terms' scale, as test_gemv_ab).  4..8 columns (it takes no fewer), rows
 * off the block's 16, several waves, two row tiles a warp (>= 65536
 * rows), 16384-wide rows.  Knob gemv_mma_wide (default true, with
 * prefill_mm = mma): 9..32 columns (2 and 4 column tiles of 8, the last
 * one partly past ncols) against the cpu's int8 path (MMA_TOL, as the
 * GEMM), then against the exact prefill GEMM they replace (gemv_mma =
 * false takes both knobs' products off; mma_weights = gguf). */
static void matmul_mma_case(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n);

/* A knob of the 9..32-column products that changes their f32 order (sec)
 * against ref, the first nt of Q4_K, Q5_K, Q6_K, Q8_0: 12288 wide x
 * tall_rows x 32 columns, 4096 x 45 x 9, 1280 x 300 x 20 (5 steps). */
static void wide_order_ab(const char *ref, const char *sec, size_t nt, int64_t tall_rows)
{
    static const uint32_t kt[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_Q8_0 };
    pair p;
    pair_open_cu2(&p, ref, sec);
    for (size_t t = 0; t < nt; t++) {
        matmul_ab(&p, kt[t], 12288, tall_rows, 32);
        matmul_ab(&p, kt[t], 4096, 45, 9);
        matmul_ab(&p, kt[t], 1280, 300, 20);
    }
    pair_close(&p);
}

START_TEST(test_gemv_mma)
{
    static const uint32_t kt[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_Q8_0 };
    static const int64_t ncs[] = { 4, 5, 6, 8 }, wide[] = { 9, 16, 21, 32 };
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_dp4a_v1");
    for (size_t t = 0; t < 4; t++)
        for (size_t k = 0; k < 4; k++)
            matmul_case_tol(&p, kt[t], k & 1 ? 2048 : 4096, 77, ncs[k], true);
    pair_close(&p);
    pair_open(&p, "backend.cpu_fast", "backend.cuda_mma");
    for (size_t t = 0; t < 4; t++)
        for (size_t k = 0; k < 4; k++)
            matmul_mma_case(&p, kt[t], k & 1 ? 4096 : 2048, 45, wide[k]);
    pair_close(&p);
    if (as_cpu)
        return;   /* (the A/B needs the knob) */
    pair_open_cu2(&p, "backend.cuda_gmm_off", "backend.cuda_dp4a_v1");
    for (size_t t = 0; t < 4; t++) {
        for (size_t k = 0; k < 4; k++)
            matmul_ab(&p, kt[t], 4096, 45, ncs[k]);
        matmul_ab(&p, kt[t], 12288, 45, 8);
        matmul_ab(&p, kt[t], 2048, 9001, 4);
        matmul_ab(&p, kt[t], 256, 17, 4);
        matmul_ab(&p, kt[t], 16384, 13, 8);
        matmul_ab(&p, kt[t], 2048, 70001, 5);   /* (two row tiles a warp: >= 65536 rows) */
        matmul_ab(&p, kt[t], 4096, 33, 3);      /* (fewer than 4 columns: dp4a both sides) */
    }
    pair_close(&p);
    pair_open_cu2(&p, "backend.cuda_gmm_off", "backend.cuda_mma");
    for (size_t t = 0; t < 4; t++) {
        for (size_t k = 0; k < 4; k++)
            matmul_ab(&p, kt[t], 4096, 45, wide[k]);
        matmul_ab(&p, kt[t], 12288, 4099, 32);
        matmul_ab(&p, kt[t], 2048, 70001, 24);  /* (8 row tiles a block: >= 65536 rows) */
        matmul_ab(&p, kt[t], 16384, 13, 16);
    }
    pair_close(&p);
    /* Against gx_kernel at RT 2 (cuda_mma_gx: gemv_wide_ring = false), at
     * tolerance 0:
     * gemv_wide_db: x staged a round ahead, the same arithmetic in the
     * same order: the same bits, 2 and 4 column tiles, row tiles by the
     * rows, a partial last round, LM-head-tall;
     * gemv_wide_regs = capped, small: the same kernel under another
     * register cap than the default full: the same bits; small takes full
     * below n_sm blocks (4099 rows: 129 blocks) and capped above (70001
     * rows, one type: the shapes are sized for a test of ~2 minutes);
     * gemv_wide_ring = true (gemv_wide_ring_ks8 = false): gw_kernel at
     * KS 4 (the weights by cp.async through shared memory, the same
     * arithmetic as gx_kernel at RT 2), Q8_0 too: the same bits. */
    static const char *const arms[] = { "backend.cuda_mma_db", "backend.cuda_mma_capped", "backend.cuda_mma_small",
                                        "backend.cuda_mma_ring" };
    for (int a = 0; a < 4; a++) {
        pair_open_cu2(&p, "backend.cuda_mma_gx", arms[a]);
        for (size_t t = 0; t < 4; t++) {
            if (a == 3) {
                matmul_ab_tol(&p, kt[t], 2048, 4500, 32, 0.0);
                matmul_ab_tol(&p, kt[t], 1280, 9000, 20, 0.0);
                continue;
            }
            for (size_t k = 0; k < 4; k++)
                matmul_ab_tol(&p, kt[t], 4096, 45, wide[k], 0.0);
            matmul_ab_tol(&p, kt[t], 4096, 4099, 32, 0.0);
            matmul_ab_tol(&p, kt[t], 1280, 300, 20, 0.0);
            if (t == 0)
                matmul_ab_tol(&p, kt[t], 2048, 70001, 24, 0.0);
        }
        pair_close(&p);
    }
    /* gemv_wide_ring = kquant at KS 4 only (gemv_wide_ring_ks8 = false:
     * gw_kernel at KS 4 for the K-quants) against gx_kernel: the same
     * bits, at a launch of few blocks (45 rows) and of more blocks than
     * multiprocessors (4500 rows) */
    pair_open_cu2(&p, "backend.cuda_mma_gx", "backend.cuda_mma_ks4");
    for (size_t t = 0; t < 3; t++) {
        matmul_ab_tol(&p, kt[t], 4096, 45, 9, 0.0);
        matmul_ab_tol(&p, kt[t], 2048, 4500, 32, 0.0);
    }
    pair_close(&p);
    /* The default (gemv_wide_ring_ks8 = true): the K-quants' launches of
     * no more blocks than multiprocessors at KS 8 (16 warps, 8 k-groups:
     * 45 rows, 4099 rows of 12288, 1280 wide) against gx_kernel: another
     * f32 order, the tolerance of the other orders */
    wide_order_ab("backend.cuda_mma_gx", "backend.cuda_mma", 3, 4099);
    /* gemv_narrow = wide: 2..8 columns on the 9..32 path's kernels (one
     * column tile; the ring at KS 8 for 45 and 4099 rows, KS 4 for 9001,
     * gx_kernel for Q8_0) against gm_kernel (gm): another f32 order */
    pair_open_cu2(&p, "backend.cuda_mma_gm", "backend.cuda_mma_narrow");
    for (size_t t = 0; t < 4; t++) {
        matmul_ab(&p, kt[t], 4096, 45, 8);
        matmul_ab(&p, kt[t], 12288, 4099, 2 + 2 * (int64_t)t);
        matmul_ab(&p, kt[t], 2048, 9001, 5);
        matmul_ab(&p, kt[t], 1280, 300, 3);
    }
    pair_close(&p);
    /* The default (kquant): the K-quants' as wide, Q8_0's as gm, bit for
     * bit; an LM-head-tall product stays on gm_kernel */
    pair_open_cu2(&p, "backend.cuda_mma_narrow", "backend.cuda_mma");
    for (size_t t = 0; t < 3; t++)
        matmul_ab_tol(&p, kt[t], 4096, 45, 6, 0.0);
    pair_close(&p);
    pair_open_cu2(&p, "backend.cuda_mma_gm", "backend.cuda_mma");
    matmul_ab_tol(&p, SI_TYPE_Q8_0, 4096, 45, 6, 0.0);
    matmul_ab_tol(&p, SI_TYPE_Q4_K, 256, 65600, 4, 0.0);
    pair_close(&p);
    /* gemv_mma_cols = 2: 2..3 columns on gemv_mma's kernels (the narrow
     * path for the K-quants, gm_kernel for Q8_0 where the staged kernel
     * does not take it: 12288 wide at 3 columns) against gemv_quad_cols'
     * dp4a (the default): another f32 order */
    pair_open_cu2(&p, "backend.cuda_mma", "backend.cuda_mma_c2");
    for (size_t t = 0; t < 4; t++) {
        matmul_ab(&p, kt[t], 4096, 45, 2);
        matmul_ab(&p, kt[t], 12288, 4099, 3);
    }
    pair_close(&p);
    /* gemv_wide_split: 128 rows a block, the steps over clusters of 4
     * (12288 wide at 4096 rows: 32 row blocks; 4096 wide at 45 rows) and
     * 2 (1280 wide: 5 steps, 2 and 3 a block); another f32 order: the
     * tolerance of the other orders */
    wide_order_ab("backend.cuda_mma", "backend.cuda_mma_split", 4, 4096);
}
END_TEST

/* Knobs gemv_q6r and gemv_q8r (default true): one-column Q6_K and Q8_0
 * products on the weights' regrouped copies (CU_TYPE_Q6R / Q8R,
 * cuda_regroup.c) against the GGUF rows (both knobs false), bit for bit:
 * the 9b's widths (4096, 12288), the 35b-a3b's (2048: two rows a lane
 * group), a 20480-wide row (x from global memory), rows off the block's,
 * an LM-head-sized Q6_K product (>= 2^28 weights: g6_kernel's on the other
 * side), and widths the copies do not take (2560; Q8_0 past 12288 goes to
 * v1 on both sides).  Each case's weights are new buffers, often at the
 * address of the case before's: a copy not dropped with its weights would
 * be read stale. */
START_TEST(test_gemv_regroup)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    pair p;
    pair_open_cu2(&p, "backend.cuda_rg_off", "backend.cuda_rg");
    static const int64_t ins[] = { 4096, 12288, 2048, 20480, 2560, 4096 }, outs[] = { 45, 33, 77, 13, 19, 45 };
    for (size_t k = 0; k < 6; k++) {
        matmul_ab_tol(&p, SI_TYPE_Q6_K, ins[k], outs[k], 1, 0.0);
        matmul_ab_tol(&p, SI_TYPE_Q8_0, ins[k], outs[k], 1, 0.0);
    }
    matmul_ab_tol(&p, SI_TYPE_Q6_K, 4096, 65600, 1, 0.0);
    matmul_ab_tol(&p, SI_TYPE_Q8_0, 2048, 12352, 1, 0.0);
    pair_close(&p);
    /* gemv_regroup_cols: the copies for 2..8 columns (gemv_mma off on both
     * sides, so that gq_kernel takes them all) against the GGUF rows
     * (gq_kernel's Q6_K columns, gs_kernel's Q8_0): the same sums a
     * column, the same bits; an LM-head-sized Q6_K product at 2 */
    pair_open_cu2(&p, "backend.cuda_rgc_off", "backend.cuda_rgc");
    static const int64_t ncs[] = { 2, 3, 5, 8 };
    for (size_t k = 0; k < 4; k++) {
        matmul_ab_tol(&p, SI_TYPE_Q6_K, 4096, 45, ncs[k], 0.0);
        matmul_ab_tol(&p, SI_TYPE_Q8_0, 2048, 77, ncs[k], 0.0);
    }
    matmul_ab_tol(&p, SI_TYPE_Q6_K, 12288, 33, 3, 0.0);
    matmul_ab_tol(&p, SI_TYPE_Q8_0, 4096, 4099, 2, 0.0);
    matmul_ab_tol(&p, SI_TYPE_Q6_K, 4096, 65600, 2, 0.0);
    pair_close(&p);
}
END_TEST

/* The device's free bytes, from the message of an impossible allocation's
 * refusal (cuda_sm120.c buf_alloc names them). */
static unsigned long long dev_free_bytes(pair *p)
{
    si_err err = { { 0 } };
    si_buf *blk = NULL;
    ck_assert_int_eq(p->go->buf_alloc(p->gb, (uint64_t)1 << 50, &blk, &err), SI_ENOMEM);
    const char *fp = strstr(err.msg, "bytes (");
    unsigned long long free_b = 0;
    ck_assert_msg(fp != NULL && sscanf(fp, "bytes (%llu free", &free_b) == 1, "message: %s", err.msg);
    return free_b;
}

/* The KV cache before the weight copies (cu_kv_create, cu_wcache_yield):
 * a Q6_K product makes its regrouped copy (41 MB), the device is then
 * filled to ~24 MiB free, and a 32 MiB KV cache must still be created
 * (the copy gives its memory back); the product then reads the GGUF rows,
 * the same bits as with the knob off.  A cache larger than free memory
 * and the copies together is still SI_ENOMEM.  Once the cache is freed,
 * products make their copies again. */
START_TEST(test_kv_yields_copies)
{
    if (as_cpu)
        return;   /* device memory */
    pair p;
    pair_open_cu2(&p, "backend.cuda_rg_off", "backend.cuda_rg");
    dt w, x, y;
    dt_rand(&p, &w, SI_TYPE_Q6_K, 4096, 12288, 1, 1.0f);
    dt_rand(&p, &x, SI_TYPE_F32, 4096, 1, 1, 1.0f);
    dt_make(&p, &y, SI_TYPE_F32, 12288, 1, 1, NULL);
    opdt o = { .op = { .kind = SI_OP_MATMUL }, .dst = &y, .src = { &w, &x } };
    run_ok(&p, &o);   /* the copy of w is made here */
    si_err err = { { 0 } };
    si_buf *blk = NULL;
    const unsigned long long free_b = dev_free_bytes(&p);
    const unsigned long long mib = 1ull << 20, leave = 24 * mib;
    ck_assert(free_b > leave + 64 * mib);
    ck_assert_msg(p.go->buf_alloc(p.gb, (free_b - leave) / (2 * mib) * (2 * mib), &blk, &err) == SI_OK, "%s",
                  err.msg);
    si_kv_desc big = { .size = sizeof big, .n_layer = 1, .n_head_kv = 1, .head_dim = 128, .n_seq = 1,
                       .n_ctx = 1u << 20 };   /* 1 GiB of f32 K/V: more than free memory and the copy */
    si_kv *kv = NULL;
    ck_assert_int_eq(p.go->kv_create(p.gb, &big, &kv, &err), SI_ENOMEM);
    ck_assert_ptr_null(kv);
    si_kv_desc d = big;
    d.n_ctx = 32768;   /* 32 MiB: fits only without the copy */
    ck_assert_msg(p.go->kv_create(p.gb, &d, &kv, &err) == SI_OK, "%s", err.msg);
    p.go->buf_free(p.gb, blk);
    run_ok(&p, &o);
    dt_compare_fl(&p, &y, 0.0, sqrt(4096.0) / 3.0, "MATMUL Q6_K after the KV cache took the copy's memory", false);
    /* with the cache gone the copies are made again (cu_kv_free reopens
     * them): the next product takes the copy's ~41 MB back */
    p.go->kv_free(p.gb, kv);
    const unsigned long long before = dev_free_bytes(&p);
    run_ok(&p, &o);
    const unsigned long long after = dev_free_bytes(&p);
    ck_assert_msg(after + 40 * mib <= before, "no copy after kv_free: %llu -> %llu bytes free", before, after);
    dt_compare_fl(&p, &y, 0.0, sqrt(4096.0) / 3.0, "MATMUL Q6_K on the copy made again", false);
    dt_free(&p, &w);
    dt_free(&p, &x);
    dt_free(&p, &y);
    pair_close(&p);
}
END_TEST

/* Knob moe_sdc: one token's combine with the shared expert's down product
 * in its launch (cuda_mmq.cu sdc_kernel, before the programmatic-launch
 * wait) against the two launches (moe_sdc = false), bit for bit, at
 * Qwen3.6-35B-A3B's MOE: a Q8_0 shared expert (8 lanes a 512-wide row), a
 * Q4_K one (4 lanes) and a Q6_K one; 1 token, 3 (not taken: the same
 * values), 1 again. */
START_TEST(test_moe_sdc)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const int64_t ns[] = { 1, 3, 1 };
    moe_ab_35b("backend.cuda_sdc_off", "backend.cuda_sdc", SI_TYPE_Q5_K, SI_TYPE_Q8_0, ns, 3, "moe_sdc");
    moe_ab_35b("backend.cuda_sdc_off", "backend.cuda_sdc", SI_TYPE_Q4_K, SI_TYPE_Q4_K, ns, 2, "moe_sdc");
    moe_ab_35b("backend.cuda_sdc_off", "backend.cuda_sdc", SI_TYPE_Q5_K, SI_TYPE_Q6_K, ns, 1, "moe_sdc");
}
END_TEST

/* Knob moe_persist: one token's MOE in one launch (cuda_pmoe.cuh: the
 * router, top-K + gate/up, SwiGLU + downs + combine, apart by grid-wide
 * barriers) against the six launches (moe_persist = false), bit for bit, at
 * Qwen3.6-35B-A3B's MOE: Q5_K (UD-Q4_K_M's) and Q4_K down experts with a
 * Q8_0 shared expert (taken: the backend's log line says so, once an
 * open), then Q6_K downs (512-wide rows of 420 bytes, which the expert
 * GEMV does not take either: not taken, the six launches); 1 token, 3
 * (not taken), 1 again (each launch must leave its barrier word as it
 * found it, or the next would not wait or never end).  (Each pair of
 * opens uploads ~0.5 GB of random expert bytes: seconds.) */
static int pm_said;
static void pm_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    (void)h;
    (void)level;
    (void)who;
    if (strstr(fmt, "moe_persist") != NULL)
        pm_said++;
}

START_TEST(test_moe_persist)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const int64_t ns[] = { 1, 3, 1 };
    void (*keep)(const si_host *, int, const char *, const char *, ...) = host.log;
    host.log = pm_log;
    pm_said = 0;
    moe_ab_35b("backend.cuda_pm_off", "backend.cuda_pm", SI_TYPE_Q5_K, SI_TYPE_Q8_0, ns, 3, "moe_persist");
    const int q5 = pm_said;
    moe_ab_35b("backend.cuda_pm_off", "backend.cuda_pm", SI_TYPE_Q4_K, SI_TYPE_Q8_0, ns, 1, "moe_persist");
    const int q8 = pm_said;
    moe_ab_35b("backend.cuda_pm_off", "backend.cuda_pm", SI_TYPE_Q6_K, SI_TYPE_Q8_0, ns, 1, "moe_persist");
    host.log = keep;
    ck_assert_msg(q5 == 1 && q8 == 2 && pm_said == 2, "moe_persist ran in %d / %d / %d of 1 / 2 / 3 opens", q5, q8,
                  pm_said);
}
END_TEST

/* Knob moe_persist_prof (measurement): the same bits with the blocks'
 * clock counters on, and at close one line of their means, with the
 * launches it counted (3: one a run) and a positive total. */
static int pmp_said;
static char pmp_line[600];
static void pmp_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    (void)h;
    (void)level;
    (void)who;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (strstr(msg, "moe_persist_prof:") != NULL) {
        pmp_said++;
        snprintf(pmp_line, sizeof pmp_line, "%s", msg);
    }
}

START_TEST(test_moe_persist_prof)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob */
    static const int64_t ns[] = { 1, 1, 1 };
    void (*keep)(const si_host *, int, const char *, const char *, ...) = host.log;
    host.log = pmp_log;
    pmp_said = 0;
    pmp_line[0] = '\0';
    moe_ab_35b("backend.cuda_pm_off", "backend.cuda_pm_prof", SI_TYPE_Q5_K, SI_TYPE_Q8_0, ns, 3, "moe_persist_prof");
    host.log = keep;
    double runs = 0, total = 0;
    const char *t = strstr(pmp_line, " total ");
    ck_assert_msg(pmp_said == 1 && sscanf(pmp_line, "moe_persist_prof: %lf block runs", &runs) == 1 && t != NULL &&
                      sscanf(t, " total %lf", &total) == 1,
                  "%d lines, last '%s'", pmp_said, pmp_line);
    ck_assert_msg(runs > 0 && (long long)runs % 3 == 0 && total > 0, "%s", pmp_line);
}
END_TEST

/* Knob route_fused: the MOE decode router's product, shared gate row and
 * top-K in one launch (cuda_matmul.cu rr_kernel) against the two launches
 * (cuda_v1_rr_off), bit for bit, at Qwen3.6-35B-A3B's MOE
 * (gemv_quad_experts reads the picks before its programmatic-launch wait,
 * expert_early) for 1 and 8 tokens, then 1 again (each launch must leave
 * its block count at 0 for the next): route_fused = true (fused at every
 * batch), then the default batch (fused at 8 tokens, not at 1). */
START_TEST(test_moe_route_fused)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const int64_t ns[] = { 1, 8, 1 };
    moe_ab_35b("backend.cuda_v1_rr_off", "backend.cuda_v1_rr_on", SI_TYPE_Q4_K, SI_TYPE_Q4_K, ns, 3, "route_fused");
    moe_ab_35b("backend.cuda_v1_rr_off", "backend.cuda_dp4a_v1", SI_TYPE_Q4_K, SI_TYPE_Q4_K, ns, 3, "route_fused = batch");
    /* a value outside false | true | batch: refused at open, named */
    si_backend *b = NULL;
    si_err err = { { 0 } };
    ck_assert_int_eq(((const struct si_backend_ops *)p_cu->ops)->open(&host, "backend.cuda_rr_bad", &b, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "route_fused") != NULL && strstr(err.msg, "'often'") != NULL, "message: %s",
                  err.msg);
}
END_TEST

/* Knob mm_block_cols: the router product of 2..8 tokens (fused with its
 * top-K at the default route_fused = batch, and as two launches) a block a
 * row from 2 columns (cuda_v1_sb2) and from the default 4 against a warp a
 * row (cuda_v1_sb_off, 9): another f32 order of the logits, so within 1e-5
 * (a pick flipped by it would be far outside), for 1, 2, 8 tokens and 1
 * again (a bad value: test_gdn_prefill_knob). */
START_TEST(test_moe_block_cols)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    static const int64_t ns[] = { 1, 2, 8, 1 };
    moe_ab_35b_tol("backend.cuda_v1_sb_off", "backend.cuda_v1_sb2", SI_TYPE_Q4_K, SI_TYPE_Q4_K, ns, 4,
                   "mm_block_cols = 2", 1e-5);
    moe_ab_35b_tol("backend.cuda_v1_sb_off", "backend.cuda_dp4a_v1", SI_TYPE_Q4_K, SI_TYPE_Q4_K, ns, 4,
                   "mm_block_cols", 1e-5);
    moe_ab_35b_tol("backend.cuda_v1_sb_off", "backend.cuda_v1_rr_off", SI_TYPE_Q5_K, SI_TYPE_Q8_0, ns, 4,
                   "mm_block_cols (route_fused = false)", 1e-5);
}
END_TEST

/* Knob moe_dec_fuse: the MOE decode's SwiGLU and combine as tails of the
 * routed gate/up and down (cuda_gemvq.cu gqe_tail_kernel; with
 * moe_dec_fuse_gu, the default, the shared gate/up in the routed one's
 * launch, gqe_gs_kernel; cuda_moe_fuse5 holds it off) at
 * Qwen3.6-35B-A3B's MOE (E 256, K 8, H 2048, F = Fs 512; Q4_K gate/up as
 * one matrix, Q5_K down, the shared expert Q8_0 with its F32 gate row, as
 * UD-Q4_K_M stores them): against the unfused launches (cuda_dp4a_v1), bit
 * for bit, over decode steps of 1, 8, 3, 1, 8 tokens with the weights made
 * once (every launch must leave its group counters at 0 for the next), and
 * 2 tokens without the shared expert; then against the cpu backend within
 * the int8 MOE's tolerance (test_moe_dp4a's).  Where the fused path does
 * not run, the bits are the unfused path's anyway: ncu / the launch count
 * shows it ran (5 launches a layer, no swiglu_q_kernel or combine_kernel). */
static void moe_dec_fuse_steps(pair *p, const int64_t *ns, size_t n_ns, bool shared, bool exact)
{
    const int64_t E = 256, K = 8, H = 2048, F = 512;
    dt router, gate, down, sgi, sg, su, sd;
    dt_rand(p, &router, SI_TYPE_F32, H, E, 1, 1.0f);
    dt_rand(p, &gate, SI_TYPE_Q4_K, H, 2 * F, E, 0.3f);   /* gate and up as one matrix */
    dt_rand(p, &down, SI_TYPE_Q5_K, F, H, E, 0.3f);
    if (shared) {
        dt_rand(p, &sgi, SI_TYPE_F32, H, 1, 1, 0.3f);
        dt_rand(p, &sg, SI_TYPE_Q8_0, H, F, 1, 0.3f);
        dt_rand(p, &su, SI_TYPE_Q8_0, H, F, 1, 0.3f);
        dt_rand(p, &sd, SI_TYPE_Q8_0, F, H, 1, 0.3f);
    }
    for (size_t k = 0; k < n_ns; k++) {
        dt h, y;
        dt_rand(p, &h, SI_TYPE_F32, H, ns[k], 1, 1.0f);
        dt_make(p, &y, SI_TYPE_F32, H, ns[k], 1, NULL);
        opdt o = { .op = { .kind = SI_OP_MOE, .p.moe = { .n_expert = (uint32_t)E, .n_used = (uint32_t)K } },
                   .dst = &y,
                   .src = { &h, &router, &gate, NULL, &down, shared ? &sgi : NULL, shared ? &sg : NULL,
                            shared ? &su : NULL, shared ? &sd : NULL } };
        run_ok(p, &o);
        char what[112];
        snprintf(what, sizeof what, "MOE moe_dec_fuse %s, 35b shapes%s, n %lld (step %zu)",
                 exact ? "vs unfused" : "vs cpu", shared ? "" : " (no shared expert)", (long long)ns[k], k);
        if (exact)
            dt_compare(p, &y, 0.0, what);
        else   /* two int8 roundings in series: h, then the SwiGLU output */
            dt_compare_rms(p, &y, 2 * DP4A_RMS, what);
        dt_free(p, &h);
        dt_free(p, &y);
    }
    dt_free(p, &router);
    dt_free(p, &gate);
    dt_free(p, &down);
    if (shared)
        moe_shared_free(p, &sgi, &sg, &su, &sd);
}

START_TEST(test_moe_dec_fuse)
{
    static const int64_t steps[] = { 1, 8, 3, 1, 8 }, two[] = { 2 }, ref[] = { 1, 8 };
    pair p;
    pair_open_cu2(&p, "backend.cuda_dp4a_v1", "backend.cuda_moe_fuse");
    moe_dec_fuse_steps(&p, steps, sizeof steps / sizeof steps[0], true, true);
    moe_dec_fuse_steps(&p, two, 1, false, true);
    pair_close(&p);
    /* (moe_dec_fuse_gu = false: the shared gate/up in its own launch) */
    pair_open_cu2(&p, "backend.cuda_dp4a_v1", "backend.cuda_moe_fuse5");
    moe_dec_fuse_steps(&p, steps, sizeof steps / sizeof steps[0], true, true);
    pair_close(&p);
    pair_open(&p, "backend.cpu", "backend.cuda_moe_fuse");
    moe_dec_fuse_steps(&p, ref, sizeof ref / sizeof ref[0], true, false);
    pair_close(&p);
}
END_TEST

START_TEST(test_moe_fs_same)
{
    moe_fs_same = true;
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_dp4a");
    for (int fused = 0; fused < 2; fused++) {
        moe_case_tol(&p, SI_TYPE_Q4_K, fused, true, 1, 256, 256, true);
        moe_case_tol(&p, SI_TYPE_Q8_0, fused, true, 5, 256, 64, true);
        moe_case_tol(&p, SI_TYPE_Q6_K, fused, true, 33, 256, 256, true);
    }
    pair_close(&p);
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    moe_case(&p, SI_TYPE_F32, false, true, 3, 64, 32);
    moe_case(&p, SI_TYPE_Q4_K, true, true, 1, 256, 256);
    pair_close(&p);
    moe_fs_same = false;
}
END_TEST

/* cuda_gemvq.cu's K-quant kernel under section `sec` against the default
 * (backend.cuda_dp4a_v1): the same bits at n one-column (in, rows) shapes. */
static void quad_exact_ab(const char *sec, const char *base, const int64_t (*shapes)[2], int n)
{
    static const uint32_t kq[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K };
    pair p;
    pair_open_cu2(&p, sec, base);
    for (size_t t = 0; t < 3; t++)
        for (int i = 0; i < n; i++)
            matmul_ab_tol(&p, kq[t], shapes[i][0], shapes[i][1], 1, 0.0);
    pair_close(&p);
}

START_TEST(test_gemv_ab)
{
    if (as_cpu)
        return;   /* a cuda_sm120 knob A/B */
    pair p;
    /* gemv_quad (cuda_gemvq.cu, in the v1 section) against v1's own units:
     * every type it takes, 1..6 steps a row, odd row counts */
    pair_open_cu2(&p, "backend.cuda_v1_noquad", "backend.cuda_dp4a_v1");
    /* (Q8_0: the staged kernel, gemv_staged; 12288 its widest rows) */
    static const uint32_t kt[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_Q8_0 };
    for (size_t t = 0; t < 4; t++) {
        matmul_ab(&p, kt[t], 2048, 77, 1);
        matmul_ab(&p, kt[t], 4096, 45, 1);
        matmul_ab(&p, kt[t], 12288, 9, 1);
        matmul_ab(&p, kt[t], 6144, 1, 1);
        /* (more rows than the device holds warps: several waves) */
        matmul_ab(&p, kt[t], 4096, 9001, 1);
        matmul_ab(&p, kt[t], 2048, 20003, 1);
        /* 2..8 columns (gemv_quad_cols: K-quants; Q8_0 stays on v1 either
         * way): x in shared memory, and past its 48 KB (12288 x 8) */
        static const int64_t ncs[] = { 2, 3, 5, 8 };
        for (size_t k = 0; k < 4; k++)
            matmul_ab(&p, kt[t], 4096, 77, ncs[k]);
        matmul_ab(&p, kt[t], 12288, 45, 8);
        matmul_ab(&p, kt[t], 2048, 9001, 4);
    }
    pair_close(&p);
    /* x from global memory (gemv_xsmem = false) against the default swizzled
     * copy in shared memory: the same loads' values, so the same bits;
     * 16384 the largest in on shared memory, 18432 past it */
    static const int64_t xs_shapes[][2] = { { 2048, 77 }, { 4096, 9001 }, { 12288, 45 }, { 16384, 13 }, { 18432, 5 } };
    quad_exact_ab("backend.cuda_quad_noxs", "backend.cuda_dp4a_v1", xs_shapes, 5);
    /* 4 warps a block (gemv_warps = 4) against the default 8: the same
     * rows' sums, same bits */
    quad_exact_ab("backend.cuda_quad_w4", "backend.cuda_dp4a_v1", xs_shapes, 3);
    /* Q6_K through gq_kernel (gemv_staged_q6 = false) against the staged
     * g6_kernel at every size (true): the same parts and order, the same
     * bits; 1..10 steps a row (20480 the widest it takes, 22528 past it
     * on both sides), rows in several waves, a row count off the blocks' */
    static const int64_t st6_shapes[][2] = { { 2048, 77 },    { 4096, 50001 }, { 12288, 45 },
                                             { 12288, 4099 }, { 20480, 13 },   { 22528, 5 } };
    quad_exact_ab("backend.cuda_quad_nost6", "backend.cuda_quad_st6", st6_shapes, 6);
    /* the default (large) stages a product of 2^28 weights or more, an
     * LM head's 4096 x 65537 here, and leaves one just under alone */
    static const int64_t big6_shapes[][2] = { { 4096, 65537 }, { 4096, 65535 } };
    quad_exact_ab("backend.cuda_quad_nost6", "backend.cuda_dp4a_v1", big6_shapes, 2);
    /* the i8 GEMM's 64-byte k-tiles (w8_ktile = 64) against the default
     * 128: the same bits, every type, tails of rows, columns and k */
    pair_open_cu2(&p, "backend.cuda_w8", "backend.cuda_w8_kt64");
    static const uint32_t w8t[] = { SI_TYPE_Q8_0, SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K };
    for (size_t t = 0; t < 4; t++) {
        matmul_ab(&p, w8t[t], 256, 130, 70);
        matmul_ab(&p, w8t[t], 2048, 272, 515);
    }
    pair_close(&p);
    /* the i8 GEMM on wgmma (cuda_w8wg.cu, the default where the device runs
     * it) against the mma.sync kernel (w8_wgmma = false): the same int32
     * sums and epilogue, so the same bits; tails of rows and columns, one
     * k-tile to 32 (past the ring of stages), x_div-free columns past 512 */
    pair_open_cu2(&p, "backend.cuda_w8", "backend.cuda_w8_mmasync");
    for (size_t t = 0; t < 4; t++) {
        matmul_ab_tol(&p, w8t[t], 256, 130, 70, 0.0);
        matmul_ab_tol(&p, w8t[t], 2048, 272, 515, 0.0);
        matmul_ab_tol(&p, w8t[t], 4096, 1000, 300, 0.0);
    }
    pair_close(&p);
    /* the warpgroups multiplying together (w8_wg_pingpong = false; the
     * default takes turns): the same sums again */
    pair_open_cu2(&p, "backend.cuda_w8_nopp", "backend.cuda_w8_mmasync");
    for (size_t t = 0; t < 4; t++) {
        matmul_ab_tol(&p, w8t[t], 2048, 272, 515, 0.0);
        matmul_ab_tol(&p, w8t[t], 4096, 130, 1, 0.0);
    }
    pair_close(&p);
    pair_open_cu2(&p, "backend.cuda_dp4a_v1", "backend.cuda_dp4a");
    static const uint32_t qt[] = { SI_TYPE_Q8_0, SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K };
    static const int64_t ns[] = { 1, 2, 4, 5, 8 }, ins[] = { 256, 512, 768, 2048, 4096 };
    for (size_t t = 0; t < 4; t++) {
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
            for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
                matmul_ab(&p, qt[t], ins[i], 77, ns[k]);
        matmul_ab(&p, qt[t], 352 - (qt[t] == SI_TYPE_Q8_0 ? 0 : 96), 45, 3);
        for (int fused = 0; fused < 2; fused++) {
            moe_case_tol(&p, qt[t], fused, true, 1, 256, 256, false);
            moe_case_tol(&p, qt[t], fused, fused, 5, 512, 768, false);
        }
    }
    pair_close(&p);
}
END_TEST

/* The router at real widths (256 experts, top-8, as Qwen3.6-35B-A3B; and
 * widths that are not a multiple of the warp): the decode path's warp
 * top-k must pick the cpu backend's experts, in its order. */
START_TEST(test_moe_route)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    static const int64_t Es[] = { 256, 40, 3 }, Ks[] = { 8, 5, 3 }, ns[] = { 1, 7 };
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            moe_E = Es[i];
            moe_K = Ks[i];
            moe_case(&p, SI_TYPE_F32, true, true, ns[k], 64, 32);
        }
    moe_E = 8;
    moe_K = 2;
    pair_close(&p);
}
END_TEST

/* ---- MATMUL: int8 tensor-core GEMM (prefill_mm = mma) ---------------------
 * Against the cpu backend's default int8 path: both quantise x the same way
 * (int8 per 32, scale max|x|/127, f32 block sums for the Q4_K/Q5_K mins) and
 * sum the same exact int32 block products, so only the f32 summation order
 * differs: max |diff| <= MMA_TOL max |cpu|.  A wrong fragment, scale, min,
 * sub-block or tail is off by O(1e-1) or more. */
#define MMA_TOL 2e-3

/* max |g - c| / max |c| of an F32 tensor (NaN on either side fails). */
static double dt_relerr(pair *p, const dt *t, const char *what)
{
    si_err err = { { 0 } };
    size_t n = (size_t)(t->bytes / 4);
    float *c = malloc(t->bytes), *g = malloc(t->bytes);
    ck_assert(c != NULL && g != NULL);
    ck_assert_msg(p->co->download(p->cb, c, t->cbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->download(p->gb, g, t->gbuf, 0, t->bytes, &err) == SI_OK, "%s", err.msg);
    double mx = 0.0, md = 0.0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(c[i]), "%s: cpu value %zu is %g", what, i, (double)c[i]);
        ck_assert_msg(isfinite(g[i]), "%s: cuda value %zu is %g (cpu %g)", what, i, (double)g[i], (double)c[i]);
        mx = fmax(mx, fabs(c[i]));
        md = fmax(md, fabs((double)g[i] - (double)c[i]));
    }
    free(c);
    free(g);
    return md / fmax(mx, 1e-30);
}

/* mma_weights = i8 (cuda_w8.cu) against the cpu's f32 reference: the
 * weights rounded a second time (int8 per 128 of a row) and the
 * activations per 128 instead of 32, so the bound is the requantisation
 * error of random GGUF blocks (their sub-block scales spread over the
 * whole 6-bit range, worse than real weights'): W8_TOL.  A wrong
 * fragment, scale or tail is off by O(1e-1) or more. */
#define W8_TOL 3e-2
/* w8_block = 32: the weights' second rounding is at most 1/8 of a Q4_K
 * step, the activations are the dp4a path's: close to the int8 path's own
 * error against f32. */
#define W8_32_TOL 1e-2

/* runs > 1: the op again on the same tensors (w8_cache: the second run
 * reads the int8 weights cached by the first) with fresh activations. */
static void matmul_mma_case_runs(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n, double tol, int runs)
{
    dt w, x, y;
    dt_rand(p, &w, type, in, out, 1, 1.0f);
    dt_make(p, &y, SI_TYPE_F32, out, n, 1, NULL);
    for (int k = 0; k < runs; k++) {
        dt_rand(p, &x, SI_TYPE_F32, in, n, 1, 1.0f);
        opdt o = { .op = { .kind = SI_OP_MATMUL }, .dst = &y, .src = { &w, &x } };
        run_ok(p, &o);
        char what[96];
        snprintf(what, sizeof what, "MATMUL mma %s in %lld out %lld n %lld%s", host.type_name(type), (long long)in,
                 (long long)out, (long long)n, k > 0 ? " again" : "");
        double e = dt_relerr(p, &y, what);
        printf("  %-44s max |diff| / max |cpu| = %.3g\n", what, e);
        ck_assert_msg(e <= tol, "%s: max |diff| %g of max |cpu| > %g", what, e, tol);
        if (k + 1 < runs)
            dt_free(p, &x);
    }
    dt_free(p, &w);
    dt_free(p, &x);
    dt_free(p, &y);
}

static void matmul_mma_case_tol(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n, double tol)
{
    matmul_mma_case_runs(p, type, in, out, n, tol, 1);
}

static void matmul_mma_case(pair *p, uint32_t type, int64_t in, int64_t out, int64_t n)
{
    matmul_mma_case_tol(p, type, in, out, n, MMA_TOL);
}

/* Both tilings (mma_tile = v2, v1; mma_weights = gguf): every int8 weight type, row tails (1,
 * 77: not a multiple of the 128-row tile; 272 = 2 tiles + 16), one and
 * eight k-tiles, column tails (9, 129, 515) and a whole 64-column tile; a
 * Q8_0 row of 11 blocks (a partial k-tile); 4100 x 515 products (v2's
 * 128-row tiles); then the gemv A/B path (prefill_mm = gemv, f32 GEMV against the
 * cpu's f32 reference) and a MOE whose shared expert runs through the GEMM. */
START_TEST(test_matmul_mma)
{
    static const uint32_t types[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_Q8_0 };
    static const int64_t rows[] = { 1, 77, 272 }, ins[] = { 256, 2048 }, ns[] = { 9, 64, 129, 515 };
    static const char *const mmas[] = { "backend.cuda_mma", "backend.cuda_mma1" };   /* mma_tile = v2, v1 */
    pair p;
    for (size_t v = 0; v < 2; v++) {
        pair_open(&p, "backend.cpu_fast", mmas[v]);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
                for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
                    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
                        matmul_mma_case(&p, types[t], ins[i], rows[r], ns[k]);
        matmul_mma_case(&p, SI_TYPE_Q8_0, 352, 130, 70);
        /* enough blocks for v2's 128-row tiles (the small ones above run
         * its 64-row variant) */
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            matmul_mma_case(&p, types[t], 512, 4100, 515);
        pair_close(&p);
    }

    /* mma_weights = i8 (the default; w8_block 128 and 32) against f32:
     * a row and a 128-row tile tail, one and 8 stages of k, a column and
     * a 128-column tile tail; 4100 x 515 (many tiles) at 128 (the cpu's
     * f32 references are most of this program's time on the GPU machine) */
    /* (cuda_w8_nc: the same without w8_cache, every product requantising
     * its weights into the scratch) */
    static const char *const w8s[] = { "backend.cuda_w8_nc", "backend.cuda_w8", "backend.cuda_w8_32" };
    static const int64_t w8_rows[] = { 1, 272 }, w8_ns[] = { 9, 515 };
    for (size_t v = 0; v < 3; v++) {
        /* (as_cpu: the sections are the stand-in cpu's own int8 path, per
         * 32 but not this scheme: up to ~1.8e-2 on one-row products) */
        const double tol = v < 2 || as_cpu ? W8_TOL : W8_32_TOL;
        pair_open(&p, "backend.cpu", w8s[v]);
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            for (size_t r = 0; r < 2; r++)
                for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
                    for (size_t k = 0; k < 2; k++)
                        matmul_mma_case_tol(&p, types[t], ins[i], w8_rows[r], w8_ns[k], tol);
            if (v == 1)   /* (twice: the second from the w8_cache) */
                matmul_mma_case_runs(&p, types[t], 512, 4100, 515, tol, 2);
        }
        pair_close(&p);
    }

    pair_open(&p, "backend.cpu", "backend.cuda_gemv");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        matmul_case(&p, types[t], 512, 67, 9);
        matmul_case(&p, types[t], 256, 130, 70);
    }
    pair_close(&p);

    pair_open(&p, "backend.cpu", "backend.cuda_mma");
    moe_case_tol(&p, SI_TYPE_Q4_K, false, true, 33, 256, 256, true);
    moe_case_tol(&p, SI_TYPE_Q6_K, true, true, 33, 256, 256, true);
    pair_close(&p);

    /* f32_gemm = tiled (cuda_matmul.cu mm_tiled_kernel): float-stored
     * weights, >= 128 rows over >= 64 columns, row / column / k tails;
     * fewer rows (33) keep the GEMV-style kernel; a MOE of 70 tokens with
     * 256 experts (its router product goes through the tiles) */
    static const uint32_t ftypes[] = { SI_TYPE_F32, SI_TYPE_F16, SI_TYPE_BF16 };
    pair_open(&p, "backend.cpu", "backend.cuda_f32t");
    for (size_t t = 0; t < sizeof ftypes / sizeof ftypes[0]; t++) {
        matmul_case(&p, ftypes[t], 264, 130, 130);
        matmul_case(&p, ftypes[t], 2048, 256, 515);
        matmul_case(&p, ftypes[t], 40, 193, 65);
    }
    matmul_case(&p, SI_TYPE_F32, 32, 128, 64);
    matmul_case(&p, SI_TYPE_F32, 264, 33, 130);
    const int64_t e_was = moe_E;
    moe_E = 256;
    moe_case_tol(&p, SI_TYPE_Q4_K, false, true, 70, 256, 256, true);
    moe_E = e_was;
    pair_close(&p);
}
END_TEST

START_TEST(test_moe)
{
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    static const int64_t ns[] = { 1, 33 };
    for (int k = 0; k < 2; k++) {
        moe_case(&p, SI_TYPE_F32, false, true, ns[k], 64, 32);
        moe_case(&p, SI_TYPE_F32, true, true, ns[k], 64, 32);
        moe_case(&p, SI_TYPE_F32, false, false, ns[k], 64, 32);
        moe_case(&p, SI_TYPE_Q8_0, true, true, ns[k], 64, 32);
        moe_case(&p, SI_TYPE_Q4_K, false, true, ns[k], 256, 256);
        moe_case(&p, SI_TYPE_Q5_K, true, false, ns[k], 256, 256);
        moe_case(&p, SI_TYPE_Q6_K, false, true, ns[k], 256, 256);
    }
    pair_close(&p);
}
END_TEST

/* ---- TOPK --------------------------------------------------------------------
 * Bit for bit the cpu backend's result (values and ids), with and without
 * penalties, on rows with ties, NaN, -inf, signed zeros; then the decode
 * cost it replaces: TOPK + a 2k-float download against downloading the
 * whole 248,320-float row (printed, not asserted). */

static void topk_row_fill(float *x, int64_t V, int style)
{
    for (int64_t i = 0; i < V; i++) {
        float u = 0.5f * (frand() + 1.0f), v = 8.0f * frand();
        if (style == 1)
            v = floorf(v);
        else if (style == 2 && u < 0.95f)
            v = u < 0.5f ? -INFINITY : NAN;
        else if (style == 3)
            v = u < 0.3f ? 0.0f : u < 0.6f ? -0.0f : -1.0f;
        else if (u > 0.99f)
            v = NAN;
        x[i] = v;
    }
}

static void topk_case(pair *p, int64_t V, int64_t n, uint32_t k, int style, bool pen)
{
    float *x = malloc((size_t)(V * n) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (int64_t r = 0; r < n; r++)
        topk_row_fill(x + r * V, V, style);
    static int32_t off[65], pid[64 * 40], pcnt[64 * 40];
    int32_t np = 0;
    ck_assert(n <= 64);
    for (int64_t r = 0; r < n; r++) {
        off[r] = np;
        for (int i = 0; pen && i < 40 && i < V; i++) {
            int32_t id = (int32_t)(((int64_t)i * 7919 + r * 13) % V);
            bool dup = false;
            for (int32_t j = off[r]; j < np; j++)
                dup |= pid[j] == id;
            if (!dup) {
                pid[np] = id;
                pcnt[np++] = 1 + i % 4;
            }
        }
    }
    off[n] = np;
    dt src, dst;
    dt_make(p, &src, SI_TYPE_F32, V, n, 1, x);
    dt_make(p, &dst, SI_TYPE_F32, 2 * (int64_t)k, n, 1, NULL);
    opdt o = { .dst = &dst, .src = { &src } };
    o.op.kind = SI_OP_TOPK;
    o.op.p.topk = (si_topk_params){ .k = k, .repeat_penalty = 1.3f, .frequency_penalty = 0.3f,
                                    .presence_penalty = 0.7f, .pen_off = pen ? off : NULL, .pen_id = pid,
                                    .pen_count = pcnt };
    run_ok(p, &o);
    si_err err = { { 0 } };
    float *c = malloc(dst.bytes), *g = malloc(dst.bytes);
    ck_assert(c != NULL && g != NULL);
    ck_assert_msg(p->co->download(p->cb, c, dst.cbuf, 0, dst.bytes, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(p->go->download(p->gb, g, dst.gbuf, 0, dst.bytes, &err) == SI_OK, "%s", err.msg);
    for (int64_t i = 0; i < 2 * (int64_t)k * n; i++) {
        int32_t ci, gi;
        memcpy(&ci, &c[i], 4);
        memcpy(&gi, &g[i], 4);
        ck_assert_msg(ci == gi, "TOPK V %lld n %lld k %u style %d pen %d: word %lld: cuda %08x, cpu %08x",
                      (long long)V, (long long)n, k, style, pen, (long long)i, (unsigned)gi, (unsigned)ci);
    }
    free(c);
    free(g);
    free(x);
    dt_free(p, &src);
    dt_free(p, &dst);
}

/* Milliseconds per decode step of one row: TOPK(k) then the 2k download,
 * or (k = 0) the whole row's download. */
static double topk_step_ms(pair *p, dt *src, dt *dst, uint32_t k, float *hbuf)
{
    si_err err = { { 0 } };
    si_op op = { .kind = SI_OP_TOPK, .dst = dst->g, .src = { &src->g } };
    op.p.topk = (si_topk_params){ .k = k ? k : 1, .repeat_penalty = 1.0f };
    op.dst.ne[0] = 2 * (int64_t)op.p.topk.k;
    enum { REPS = 200 };
    double t0 = 0;
    for (int i = 0; i < REPS + 10; i++) {
        if (i == 10)
            t0 = now_ms();
        if (k > 0) {
            ck_assert_msg(p->go->exec(p->gb, &op, 1, &err) == SI_OK, "%s", err.msg);
            ck_assert_msg(p->go->download(p->gb, hbuf, dst->gbuf, 0, 2 * k * sizeof(float), &err) == SI_OK, "%s",
                          err.msg);
        } else {
            ck_assert_msg(p->go->download(p->gb, hbuf, src->gbuf, 0, src->bytes, &err) == SI_OK, "%s", err.msg);
        }
    }
    return (now_ms() - t0) / REPS;
}

START_TEST(test_topk)
{
    const uint32_t saved_rng = rng_state;
    rng_state = 4242u;
    pair p;
    pair_open(&p, "backend.cpu", "backend.cuda_sm120");
    static const int64_t vs[] = { 5, 1000, 248320 };
    static const uint32_t ks[] = { 1, 2, 21, 256 };
    for (size_t v = 0; v < 3; v++)
        for (size_t k = 0; k < 4; k++) {
            if ((int64_t)ks[k] > vs[v])
                continue;
            for (int style = 0; style < 4; style++)
                for (int pen = 0; pen < 2; pen++)
                    topk_case(&p, vs[v], vs[v] > 100000 ? (style == 0 ? 4 : 1) : 3, ks[k], style, pen);
        }
    topk_case(&p, 248320, 33, 21, 0, true);   /* a batch over SIH_LOGIT_ROWS */
    if (!as_cpu) {
        dt src, dst;
        float *x = malloc(248320 * sizeof *x), *hbuf = malloc(248320 * sizeof *hbuf);
        ck_assert(x != NULL && hbuf != NULL);
        topk_row_fill(x, 248320, 0);
        dt_make(&p, &src, SI_TYPE_F32, 248320, 1, 1, x);
        dt_make(&p, &dst, SI_TYPE_F32, 2 * 256, 1, 1, NULL);
        double full = topk_step_ms(&p, &src, &dst, 0, hbuf);
        printf("TOPK decode step, V 248320, one row: full row download %.4f ms", full);
        static const uint32_t tk[] = { 1, 21, 41, 256 };
        for (size_t i = 0; i < 4; i++)
            printf("; k %u: %.4f ms", tk[i], topk_step_ms(&p, &src, &dst, tk[i], hbuf));
        printf("\n");
        free(x);
        free(hbuf);
        dt_free(&p, &src);
        dt_free(&p, &dst);
    }
    pair_close(&p);
    rng_state = saved_rng;
}
END_TEST

/* The test configuration, one section at a time: cfg_sec appends
 * "[backend.NAME]", "path = PATH" and its pieces (each "key = value\n"
 * lines, or ""; NULL ends them) to t->p.  Past t->cap nothing more is
 * written and len keeps counting, so len >= cap says it was cut. */
typedef struct cfg_text {
    char  *p;
    size_t len, cap;
} cfg_text;

static void cfg_put(cfg_text *t, const char *s)
{
    const size_t n = strlen(s);
    if (t->len + n < t->cap)
        memcpy(t->p + t->len, s, n + 1);
    t->len += n;
}

static void cfg_sec(cfg_text *t, const char *name, const char *path, ...)
{
    cfg_put(t, "[backend.");
    cfg_put(t, name);
    cfg_put(t, "]\npath = ");
    cfg_put(t, path);
    cfg_put(t, "\n");
    va_list ap;
    va_start(ap, path);
    for (const char *s = va_arg(ap, const char *); s != NULL; s = va_arg(ap, const char *))
        cfg_put(t, s);
    va_end(ap);
}

/* A case of one test (CK_RUN_CASE=name runs it alone), 600 s allowed. */
static void single_case(Suite *s, const char *name, const TTest *t)
{
    TCase *c = tcase_create(name);
    tcase_set_timeout(c, 600);
    tcase_add_test(c, t);
    suite_add_tcase(s, c);
}

int main(void)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    char path[4096];
    si_err err = { { 0 } };
    as_cpu = getenv("SI_CUDA_TEST_AS_CPU") != NULL && strcmp(getenv("SI_CUDA_TEST_AS_CPU"), "1") == 0;
    /* (as_cpu: the stand-in cpu backend runs the reference path too) */
    /* (as_cpu: cuda_dp4a becomes the cpu's own int8 path, the analogue) */
    const char *cu_extra = as_cpu ? "matmul = ref\nthreads = 2\n" : "matmul = f32\nprefill_mm = gemv\n";
    const char *dp_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v2\n";
    const char *v1_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\n";
    /* (as_cpu: cuda_mma becomes the cpu's default int8 path, which it
     * must equal; cuda_gemv the cpu's f32 reference) */
    const char *mma_extra = as_cpu ? "threads = 2\n" : "mma_weights = gguf\n";
    const char *mma1_extra = as_cpu ? "threads = 2\n" : "mma_tile = v1\nmma_weights = gguf\n";
    const char *w8_extra = as_cpu ? "threads = 2\n" : "mma_weights = i8\nw8_block = 128\n";
    const char *w8_32_extra = as_cpu ? "threads = 2\n" : "mma_weights = i8\nw8_block = 32\n";
    const char *gemv_extra = as_cpu ? "matmul = ref\nthreads = 2\n" : "prefill_mm = gemv\nf32_gemm = gemv\n";
    const char *f32t_extra = as_cpu ? "threads = 2\n" : "f32_gemm = tiled\n";
    /* (the v1 GEMV on its own units: gemv_quad = true hands it
     * cuda_gemvq.cu's products in the other v1 sections) */
    const char *noquad_extra =
        as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\ngemv_quad = false\ngemv_mma = false\n";
    /* (cuda_gemvq.cu with x from global memory: gemv_xsmem = false) */
    const char *noxs_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\ngemv_xsmem = false\n";
    const char *w4w_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\ngemv_warps = 4\n";
    const char *nost6_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\ngemv_staged_q6 = false\n";
    const char *st6_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\ngemv_staged_q6 = true\n";
    /* (gdn_dec = split: fuse_gdn_q acts on the split path; the default
     * fused kernel makes the int8 copy itself) */
    const char *gq_on = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\nfuse_gdn_q = true\ngdn_dec = split\n";
    const char *gq_off = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\nfuse_gdn_q = false\ngdn_dec = split\n";
    /* (MOE decode with the routed products first: expert_early = false) */
    const char *late_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\nexpert_early = false\n";
    /* (knob moe_dec_fuse: test_moe_dec_fuse; as_cpu: the cpu against
     * itself, which at least runs the test's steps) */
    const char *mdf_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\nmoe_dec_fuse = true\n";
    const char *mdf5_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngemv = v1\nmoe_dec_fuse = true\n"
                                                       "moe_dec_fuse_gu = false\n";
    /* (as_cpu: the i8 sections become the cpu's f32 cache; the pool
     * limit kv_pages, which the cpu does not have, is then not tested) */
    const char *i8_kv = as_cpu ? "kv_type = f32\n" : "kv_type = i8\n";
    const char *i8_pages = as_cpu ? "" : "kv_pages = 4\n";
    /* (knob fuse_attn_q on the int8 products: test_attn_q_fused) */
    const char *aq_on = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\nfuse_attn_q = true\n";
    const char *aq_off = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\nfuse_attn_q = false\n";
    /* (as_cpu: the cpu stand-in has no gdn_prefill knob) */
    const char *seq_extra = as_cpu ? "" : "gdn_prefill = seq\n";
    /* (as_cpu: nor an attn_prefill knob) */
    const char *nofa = as_cpu ? "" : "attn_prefill = split\n";
    /* (nor attn_fa_tile) */
    const char *fa1 = as_cpu ? "" : "attn_fa_tile = v1\n";
    const char *fa2 = as_cpu ? "" : "attn_fa_tile = v2\n";
    /* (nor attn_gqa) */
    const char *gqa = as_cpu ? "" : "attn_gqa = shared\nattn_prefill = split\n";
    /* (attn_ring's default is true: cuda16_gqa and cuda_i8 keep
     * split_mma_kernel and split_i8_kernel tested) */
    const char *ring_off = as_cpu ? "" : "attn_ring = false\n";
    /* (the default is shared: cuda16_split keeps the per-head core tested) */
    const char *perhead = as_cpu ? "" : "attn_gqa = per_head\n";
    /* (gdn_dec = split | fused; as_cpu: the cpu against itself, which at
     * least runs test_gdn_dec_fused's steps) */
    const char *gdn_split = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngdn_dec = split\n";
    const char *gdn_fused = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\ngdn_dec = fused\n";
    /* (the int8 products whose input the fused norm quantises) */
    const char *dq_extra = as_cpu ? "threads = 2\n" : "matmul = dp4a\nprefill_mm = gemv\n";
    char text[24576];
    cfg_text ct = { text, 0, sizeof text };
    cfg_sec(&ct, "cuda_i8", "cuda_sm120.so", i8_kv, cu_extra, ring_off, NULL);
    cfg_sec(&ct, "cuda_i8_simple", "cuda_sm120.so", "attn = simple\n", i8_kv, cu_extra, NULL);
    cfg_sec(&ct, "cuda_i8_small", "cuda_sm120.so", i8_kv, i8_pages, cu_extra, NULL);
    cfg_sec(&ct, "cuda_badpages", "cuda_sm120.so", "kv_type = i8\nkv_pages = 0\n", NULL);
    /* the references on every core: on the GPU machine they are
     * most of this program's time */
    cfg_sec(&ct, "cpu", "cpu.so", "matmul = ref\nkv_type = f32\nthreads = 0\n", NULL);
    cfg_sec(&ct, "cpu16", "cpu.so", "matmul = ref\nkv_type = f16\nthreads = 0\n", NULL);
    cfg_sec(&ct, "cuda_sm120", "cuda_sm120.so", "kv_type = f32\n", cu_extra, NULL);
    cfg_sec(&ct, "cuda16", "cuda_sm120.so", "kv_type = f16\n", cu_extra, NULL);
    cfg_sec(&ct, "cuda16_fa1", "cuda_sm120.so", "kv_type = f16\n", cu_extra, fa1, NULL);
    cfg_sec(&ct, "cuda16_fa2", "cuda_sm120.so", "kv_type = f16\n", cu_extra, fa2, NULL);
    cfg_sec(&ct, "cuda16_simple", "cuda_sm120.so", "kv_type = f16\nattn = simple\n", cu_extra, nofa, NULL);
    cfg_sec(&ct, "cuda16_split", "cuda_sm120.so", "kv_type = f16\n", cu_extra, nofa, perhead, NULL);
    /* (attn_split_blocks: test_attn_split_blocks) */
    cfg_sec(&ct, "cuda16_split_sb1", "cuda_sm120.so", "kv_type = f16\n", as_cpu ? "" : "attn_split_blocks = 1\n",
            cu_extra, nofa, perhead, NULL);
    cfg_sec(&ct, "cuda16_split_sb32", "cuda_sm120.so", "kv_type = f16\n", as_cpu ? "" : "attn_split_blocks = 32\n",
            cu_extra, nofa, perhead, NULL);
    cfg_sec(&ct, "cuda_dp4a", "cuda_sm120.so", "kv_type = f32\n", dp_extra, NULL);
    cfg_sec(&ct, "cuda_gdn_block", "cuda_sm120.so", "kv_type = f32\n", cu_extra, as_cpu ? "" : "gdn_rows = false\n",
            NULL);
    cfg_sec(&ct, "cpu_fast", "cpu.so", "kv_type = f32\nthreads = 0\n", NULL);
    cfg_sec(&ct, "cuda_mma", "cuda_sm120.so", "kv_type = f32\n", mma_extra, NULL);
    /* (gemv_wide_db = true, gemv_wide_regs = capped | small, gemv_wide_split, gemv_wide_ring:
     * test_gemv_mma) */
    /* the 2..32-column knob A/Bs of test_gemv_mma: mma_extra and one knob's lines each */
    static const char *const mma_arms[][2] = {
        { "cuda_mma_db", "gemv_wide_db = true\ngemv_wide_ring = false\n" },
        { "cuda_mma_capped", "gemv_wide_regs = capped\ngemv_wide_ring = false\n" },
        { "cuda_mma_small", "gemv_wide_regs = small\ngemv_wide_ring = false\n" },
        { "cuda_mma_split", "gemv_wide_split = true\n" },
        { "cuda_mma_ring", "gemv_wide_ring = true\ngemv_wide_ring_ks8 = false\n" },
        { "cuda_mma_gx", "gemv_wide_ring = false\n" },
        { "cuda_mma_ks4", "gemv_wide_ring_ks8 = false\n" },
        { "cuda_mma_narrow", "gemv_narrow = wide\n" },
        { "cuda_mma_gm", "gemv_narrow = gm\n" },
        { "cuda_mma_c2", "gemv_mma_cols = 2\n" },
    };
    for (size_t i = 0; i < sizeof mma_arms / sizeof mma_arms[0]; i++)
        cfg_sec(&ct, mma_arms[i][0], "cuda_sm120.so", "kv_type = f32\n", mma_extra, as_cpu ? "" : mma_arms[i][1], NULL);
    cfg_sec(&ct, "cuda_wregs_bad", "cuda_sm120.so", "gemv_wide_regs = many\n", NULL);
    cfg_sec(&ct, "cuda_wring_bad", "cuda_sm120.so", "gemv_wide_ring = q8\n", NULL);
    cfg_sec(&ct, "cuda_narrow_bad", "cuda_sm120.so", "gemv_narrow = q8\n", NULL);
    cfg_sec(&ct, "cuda_mcols_bad", "cuda_sm120.so", "gemv_mma_cols = 9\n", NULL);
    cfg_sec(&ct, "cuda_mma1", "cuda_sm120.so", "kv_type = f32\n", mma1_extra, NULL);
    cfg_sec(&ct, "cuda_gemv", "cuda_sm120.so", "kv_type = f32\n", gemv_extra, NULL);
    cfg_sec(&ct, "cuda_gdn_seq", "cuda_sm120.so", "kv_type = f32\n", cu_extra, seq_extra, NULL);
    cfg_sec(&ct, "cuda_gdn_bad", "cuda_sm120.so", "gdn_prefill = fast\n", NULL);
    cfg_sec(&ct, "cuda_st6_bad", "cuda_sm120.so", "gemv_staged_q6 = some\n", NULL);
    cfg_sec(&ct, "cuda_prof_bad", "cuda_sm120.so", "profile = often\n", NULL);
    cfg_sec(&ct, "cuda_ovl_bad", "cuda_sm120.so", "moe_overlap = often\n", NULL);
    cfg_sec(&ct, "cuda_sb_bad0", "cuda_sm120.so", "attn_split_blocks = 0\n", NULL);
    cfg_sec(&ct, "cuda_sb_bad33", "cuda_sm120.so", "attn_split_blocks = 33\n", NULL);
    cfg_sec(&ct, "cuda_sb_badx", "cuda_sm120.so", "attn_split_blocks = 2x\n", NULL);
    cfg_sec(&ct, "cuda_dp4a_v1", "cuda_sm120.so", "kv_type = f32\n", v1_extra, NULL);
    cfg_sec(&ct, "cuda16_gqa", "cuda_sm120.so", "kv_type = f16\n", cu_extra, gqa, ring_off, NULL);
    cfg_sec(&ct, "cuda_gqa32", "cuda_sm120.so", "kv_type = f32\n", cu_extra, gqa, NULL);
    cfg_sec(&ct, "cuda_w8", "cuda_sm120.so", "kv_type = f32\n", w8_extra, NULL);
    cfg_sec(&ct, "cuda_w8_32", "cuda_sm120.so", "kv_type = f32\n", w8_32_extra, NULL);
    cfg_sec(&ct, "cuda_f32t", "cuda_sm120.so", "kv_type = f32\n", f32t_extra, NULL);
    cfg_sec(&ct, "cuda_v1_noquad", "cuda_sm120.so", "kv_type = f32\n", noquad_extra, NULL);
    cfg_sec(&ct, "cuda_w8_nc", "cuda_sm120.so", "kv_type = f32\n", w8_extra, as_cpu ? "" : "w8_cache = false\n", NULL);
    cfg_sec(&ct, "cuda_w8_kt64", "cuda_sm120.so", "kv_type = f32\n", w8_extra, as_cpu ? "" : "w8_ktile = 64\n", NULL);
    cfg_sec(&ct, "cuda_quad_noxs", "cuda_sm120.so", "kv_type = f32\n", noxs_extra, NULL);
    cfg_sec(&ct, "cuda_quad_w4", "cuda_sm120.so", "kv_type = f32\n", w4w_extra, NULL);
    cfg_sec(&ct, "cuda_quad_nost6", "cuda_sm120.so", "kv_type = f32\n", nost6_extra, NULL);
    cfg_sec(&ct, "cuda_quad_st6", "cuda_sm120.so", "kv_type = f32\n", st6_extra, NULL);
    cfg_sec(&ct, "cuda_gdnq_on", "cuda_sm120.so", "kv_type = f32\n", gq_on, NULL);
    cfg_sec(&ct, "cuda_gdnq_off", "cuda_sm120.so", "kv_type = f32\n", gq_off, NULL);
    cfg_sec(&ct, "cuda_v1_late", "cuda_sm120.so", "kv_type = f32\n", late_extra, NULL);
    /* (route_fused = false | true: opened only on the GPU) */
    cfg_sec(&ct, "cuda_v1_rr_off", "cuda_sm120.so",
            "kv_type = f32\nmatmul = dp4a\nprefill_mm = gemv\ngemv = v1\nroute_fused = false\n", NULL);
    cfg_sec(&ct, "cuda_v1_rr_on", "cuda_sm120.so",
            "kv_type = f32\nmatmul = dp4a\nprefill_mm = gemv\ngemv = v1\nroute_fused = true\n", NULL);
    cfg_sec(&ct, "cuda_rr_bad", "cuda_sm120.so", "route_fused = often\n", NULL);
    cfg_sec(&ct, "cuda_v1_sb_off", "cuda_sm120.so",
            "kv_type = f32\nmatmul = dp4a\nprefill_mm = gemv\ngemv = v1\nmm_block_cols = 9\n", NULL);
    cfg_sec(&ct, "cuda_v1_sb2", "cuda_sm120.so",
            "kv_type = f32\nmatmul = dp4a\nprefill_mm = gemv\ngemv = v1\nmm_block_cols = 2\n", NULL);
    cfg_sec(&ct, "cuda_sb_bad", "cuda_sm120.so", "mm_block_cols = 1\n", NULL);
    cfg_sec(&ct, "cuda_pm_bad", "cuda_sm120.so", "moe_persist = yes\n", NULL);
    cfg_sec(&ct, "cuda16_gqa_fma", "cuda_sm120.so", "kv_type = f16\n", cu_extra, gqa,
            as_cpu ? "" : "attn_mma = false\n", NULL);
    cfg_sec(&ct, "cuda_w8_mmasync", "cuda_sm120.so", "kv_type = f32\n", w8_extra, as_cpu ? "" : "w8_wgmma = false\n",
            NULL);
    cfg_sec(&ct, "cuda_w8_nopp", "cuda_sm120.so", "kv_type = f32\n", w8_extra,
            as_cpu ? "" : "w8_wg_pingpong = false\n", NULL);
    cfg_sec(&ct, "cuda_gdn_f32", "cuda_sm120.so", "kv_type = f32\n", cu_extra, as_cpu ? "" : "gdn_tc = false\n", NULL);
    /* (gdn_dec: test_gdn_dec_fused) */
    cfg_sec(&ct, "cuda_gdn_split", "cuda_sm120.so", "kv_type = f32\n", gdn_split, NULL);
    cfg_sec(&ct, "cuda_gdn_fused", "cuda_sm120.so", "kv_type = f32\n", gdn_fused, as_cpu ? "" : "gdn_early = false\n",
            NULL);
    cfg_sec(&ct, "cuda_gdn_early", "cuda_sm120.so", "kv_type = f32\n", gdn_fused, as_cpu ? "" : "gdn_early = true\n",
            NULL);
    /* (attn_fa3_overlap: test_attn_fa3_overlap) */
    cfg_sec(&ct, "cuda16_fa3ov", "cuda_sm120.so", "kv_type = f16\n", cu_extra,
            as_cpu ? "" : "attn_fa3_overlap = false\n", NULL);
    /* (moe_dec_fuse: test_moe_dec_fuse) */
    cfg_sec(&ct, "cuda_moe_fuse", "cuda_sm120.so", "kv_type = f32\n", mdf_extra, NULL);
    cfg_sec(&ct, "cuda_moe_fuse5", "cuda_sm120.so", "kv_type = f32\n", mdf5_extra, NULL);
    cfg_sec(&ct, "cuda_v1_noovl", "cuda_sm120.so", "kv_type = f32\n", v1_extra, as_cpu ? "" : "moe_overlap = false\n",
            NULL);
    cfg_sec(&ct, "cuda_v1_ovl", "cuda_sm120.so", "kv_type = f32\n", v1_extra, as_cpu ? "" : "moe_overlap = true\n",
            NULL);
    /* (norm = v2 | v1, each fused and split: test_norm_v2) */
    cfg_sec(&ct, "cuda_nrm2", "cuda_sm120.so", "kv_type = f32\n", dq_extra, NULL);
    cfg_sec(&ct, "cuda_nrm2_split", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "fuse_norm = false\n",
            NULL);
    cfg_sec(&ct, "cuda_nrm1", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "norm = v1\n", NULL);
    cfg_sec(&ct, "cuda_nrm1_split", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "norm = v1\n",
            as_cpu ? "" : "fuse_norm = false\n", NULL);
    /* (norm_tail = true | false: test_norm_tail) */
    cfg_sec(&ct, "cuda_ntail", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "norm_tail = true\n", NULL);
    cfg_sec(&ct, "cuda_ntail_off", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "norm_tail = false\n",
            NULL);
    cfg_sec(&ct, "cuda_ntail_bad", "cuda_sm120.so", "norm_tail = two\n", NULL);
    cfg_sec(&ct, "cuda_ndefer", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "norm_tail = defer\n", NULL);
    /* (gemv_glu = true | false: test_gemv_glu) */
    cfg_sec(&ct, "cuda_glu", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "gemv_glu = true\n", NULL);
    cfg_sec(&ct, "cuda_glu_off", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "gemv_glu = false\n",
            NULL);
    cfg_sec(&ct, "cuda_glu_bad", "cuda_sm120.so", "gemv_glu = maybe\n", NULL);
    /* (moe_sdc = true | false: test_moe_sdc) */
    cfg_sec(&ct, "cuda_sdc", "cuda_sm120.so", "kv_type = f32\n", dq_extra, NULL);
    cfg_sec(&ct, "cuda_sdc_off", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "moe_sdc = false\n", NULL);
    cfg_sec(&ct, "cuda_pm", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "moe_persist = true\n", NULL);
    cfg_sec(&ct, "cuda_pm_off", "cuda_sm120.so", "kv_type = f32\n", dq_extra, as_cpu ? "" : "moe_persist = false\n", NULL);
    cfg_sec(&ct, "cuda_pm_prof", "cuda_sm120.so", "kv_type = f32\n", dq_extra,
            as_cpu ? "" : "moe_persist = true\nmoe_persist_prof = true\n", NULL);
    /* (gemv_q6r, gemv_q8r = true | false: test_gemv_regroup) */
    cfg_sec(&ct, "cuda_rg", "cuda_sm120.so", "kv_type = f32\n", as_cpu ? "" : "matmul = dp4a\n", NULL);
    cfg_sec(&ct, "cuda_rg_off", "cuda_sm120.so", "kv_type = f32\n",
            as_cpu ? "" : "matmul = dp4a\ngemv_q6r = false\ngemv_q8r = false\n", NULL);
    cfg_sec(&ct, "cuda_rgc", "cuda_sm120.so", "kv_type = f32\n",
            as_cpu ? "" : "matmul = dp4a\ngemv_mma = false\ngemv_regroup_cols = true\n", NULL);
    cfg_sec(&ct, "cuda_rgc_off", "cuda_sm120.so", "kv_type = f32\n",
            as_cpu ? "" : "matmul = dp4a\ngemv_mma = false\ngemv_q6r = false\ngemv_q8r = false\n", NULL);
    /* (gemv_mma = false: test_gemv_mma; prefill_mm = mma on the
     * GGUF weights: 9..32 columns on the exact int8 GEMM) */
    cfg_sec(&ct, "cuda_gmm_off", "cuda_sm120.so", "kv_type = f32\n",
            as_cpu ? "threads = 2\n" : "matmul = dp4a\ngemv = v1\n",
            as_cpu ? "" : "gemv_mma = false\nmma_weights = gguf\n", NULL);
    /* (attn_ring = true | small: test_attn_long_ring; true is
     * the default, so cuda16_gqa and cuda_i8 set it false and
     * run split_mma_kernel and split_i8_kernel) */
    cfg_sec(&ct, "cuda16_ring", "cuda_sm120.so", "kv_type = f16\n", cu_extra, gqa, as_cpu ? "" : "attn_ring = true\n",
            NULL);
    cfg_sec(&ct, "cuda16_ring_small", "cuda_sm120.so", "kv_type = f16\n", cu_extra, gqa,
            as_cpu ? "" : "attn_ring = small\n", NULL);
    cfg_sec(&ct, "cuda_ring_bad", "cuda_sm120.so", "attn_ring = big\n", NULL);
    cfg_sec(&ct, "cuda_ringp_bad", "cuda_sm120.so", "attn_ring_pages = soon\n", NULL);
    cfg_sec(&ct, "cuda_ringc_bad", "cuda_sm120.so", "attn_ring_chains = 3\n", NULL);
    cfg_sec(&ct, "cuda_i8_ring", "cuda_sm120.so", i8_kv, cu_extra, as_cpu ? "" : "attn_ring = true\n", NULL);
    cfg_sec(&ct, "cuda_i8_ring_small", "cuda_sm120.so", i8_kv, cu_extra, as_cpu ? "" : "attn_ring = small\n", NULL);
    /* (fuse_attn_q = true | false: test_attn_q_fused) */
    cfg_sec(&ct, "cuda16_aq", "cuda_sm120.so", "kv_type = f16\n", aq_on, NULL);
    cfg_sec(&ct, "cuda16_aq_off", "cuda_sm120.so", "kv_type = f16\n", aq_off, NULL);
    cfg_sec(&ct, "cuda_i8_aq", "cuda_sm120.so", i8_kv, aq_on, NULL);
    cfg_sec(&ct, "cuda_i8_aq_off", "cuda_sm120.so", i8_kv, aq_off, NULL);
    /* (attn_ring_pages = each, attn_ring_chains = 1, the arms that are
     * not the defaults: test_attn_ring_knobs) */
    cfg_sec(&ct, "cuda_i8_ring_ahead", "cuda_sm120.so", i8_kv, cu_extra,
            as_cpu ? "" : "attn_ring = true\nattn_ring_pages = ahead\n", NULL);
    cfg_sec(&ct, "cuda_i8_ring_each", "cuda_sm120.so", i8_kv, cu_extra,
            as_cpu ? "" : "attn_ring = true\nattn_ring_pages = each\n", NULL);
    cfg_sec(&ct, "cuda_i8_ring_ch1", "cuda_sm120.so", i8_kv, cu_extra,
            as_cpu ? "" : "attn_ring = true\nattn_ring_chains = 1\n", NULL);
    cfg_sec(&ct, "cuda_i8_ring_ch1_small", "cuda_sm120.so", i8_kv, cu_extra,
            as_cpu ? "" : "attn_ring = small\nattn_ring_chains = 1\n", NULL);
    cfg_sec(&ct, "cuda16_ring_ch1", "cuda_sm120.so", "kv_type = f16\n", cu_extra, gqa,
            as_cpu ? "" : "attn_ring = true\nattn_ring_chains = 1\n", NULL);
    /* (attn_split_len = bucket: test_attn_split_len) */
    const char *bucket = as_cpu ? "" : "attn_split_len = bucket\n";
    cfg_sec(&ct, "cuda_i8_ring_bucket", "cuda_sm120.so", i8_kv, cu_extra, bucket, NULL);
    cfg_sec(&ct, "cuda16_ring_bucket", "cuda_sm120.so", "kv_type = f16\n", cu_extra, gqa, bucket, NULL);
    cfg_sec(&ct, "cuda16_split_bucket", "cuda_sm120.so", "kv_type = f16\n", cu_extra, nofa, perhead, bucket, NULL);
    cfg_sec(&ct, "cuda_slen_bad", "cuda_sm120.so", "attn_split_len = soon\n", NULL);
    if (ct.len >= ct.cap) {
        fprintf(stderr, "config text truncated (%zu bytes)\n", ct.len);
        return 1;
    }
    if (si_config_load_string(text, "<test>", &cfg, &err) != SI_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    si_host_init(&host, cfg);
    if (as_cpu)
        snprintf(path, sizeof path, "%s/backends/cpu/.libs/cpu.so", top ? top : ".");
    else
        snprintf(path, sizeof path, "%s/backends/cuda_sm120/.libs/cuda_sm120.so", top ? top : ".");
    dl_cu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl_cu == NULL) {
        fprintf(stderr, "cannot dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    snprintf(path, sizeof path, "%s/backends/cpu/.libs/cpu.so", top ? top : ".");
    dl_cpu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl_cpu == NULL) {
        fprintf(stderr, "cannot dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    si_entry_fn e_cu = (si_entry_fn)(uintptr_t)dlsym(dl_cu, SI_ENTRY_SYMBOL);
    si_entry_fn e_cpu = (si_entry_fn)(uintptr_t)dlsym(dl_cpu, SI_ENTRY_SYMBOL);
    p_cu = e_cu ? e_cu(&host) : NULL;
    p_cpu = e_cpu ? e_cpu(&host) : NULL;
    if (p_cu == NULL || p_cpu == NULL) {
        fprintf(stderr, "no descriptor\n");
        return 1;
    }
    if (!as_cpu && p_cu->probe && p_cu->probe(&host, &err) != SI_OK) {
        printf("SKIP: cuda_sm120 probe refused: %s\n", err.msg);
        dlclose(dl_cu);
        dlclose(dl_cpu);
        si_config_free(cfg);
        return 77;
    }
    /* Four test cases, so the GPU session can run each under its own time
     * limit (CK_RUN_CASE=attn etc.; the cpu's f32 references make the
     * whole program longer than one step's limit there).  The inputs are
     * fresh random draws either way (one generator, in run order). */
    Suite *s = suite_create("cuda_ops");
    TCase *tm = tcase_create("matmul"), *ta = tcase_create("attn"), *tg = tcase_create("gdn"),
          *tx = tcase_create("moe");
    /* (the wgmma flash attention's own case, so a GPU run can take it
     * without the rest of attn: CK_RUN_CASE=attn_fa3) */
    TCase *tf = tcase_create("attn_fa3");
    /* (likewise the fused GDN decode step's: CK_RUN_CASE=gdn_dec) */
    TCase *td = tcase_create("gdn_dec");
    tcase_set_timeout(tm, 600);
    tcase_set_timeout(ta, 600);
    tcase_set_timeout(tg, 600);
    tcase_set_timeout(tx, 600);
    tcase_set_timeout(tf, 600);
    tcase_add_test(tf, test_attn_fa3);
    tcase_add_test(tf, test_attn_fa3_overlap);
    tcase_set_timeout(td, 600);
    tcase_add_test(td, test_gdn_dec_fused);
    /* (its own case: a few seconds, where gdn_dec takes minutes) */
    single_case(s, "gdn_early", test_gdn_dec_early);
    /* (knob moe_dec_fuse's A/B and cpu check: CK_RUN_CASE=moe_dec_fuse) */
    single_case(s, "moe_dec_fuse", test_moe_dec_fuse);
    tcase_add_test(tm, test_matmul);
    tcase_add_test(tm, test_matmul_dp4a);
    tcase_add_test(tm, test_get_rows);
    tcase_add_test(tm, test_elementwise);
    /* (knobs moe_overlap and norm: cases of their own, seconds each) */
    single_case(s, "moe_overlap", test_moe_overlap);
    single_case(s, "norm", test_norm_v2);
    single_case(s, "norm_tail", test_norm_tail);
    single_case(s, "gemv_glu", test_gemv_glu);
    single_case(s, "gemv_glu_moe", test_gemv_glu_moe);
    single_case(s, "moe_sdc", test_moe_sdc);
    single_case(s, "moe_persist", test_moe_persist);
    single_case(s, "moe_persist_prof", test_moe_persist_prof);
    single_case(s, "gemv_regroup", test_gemv_regroup);
    single_case(s, "attn_ring", test_attn_long_ring);
    single_case(s, "attn_i8_ring", test_attn_i8_ring);
    single_case(s, "attn_ring_knobs", test_attn_ring_knobs);
    single_case(s, "attn_split_len", test_attn_split_len);
    single_case(s, "kv_yield", test_kv_yields_copies);
    single_case(s, "attn_q", test_attn_q_fused);
    single_case(s, "gemv_mma", test_gemv_mma);
    tcase_add_test(ta, test_attn_f32);
    tcase_add_test(ta, test_attn_yarn);
    tcase_add_test(ta, test_attn_f16_cache);
    tcase_add_test(ta, test_attn_long_split);
    tcase_add_test(ta, test_attn_long_split_nofa);
    tcase_add_test(ta, test_attn_split_blocks);
    tcase_add_test(ta, test_attn_long_fa_9b);
    tcase_add_test(ta, test_attn_fa_tiles);
    tcase_add_test(ta, test_attn_long_simple);
    tcase_add_test(ta, test_attn_long_f32);
    tcase_add_test(ta, test_attn_gqa_shared);
    tcase_add_test(ta, test_attn_long_gqa_35b);
    tcase_add_test(ta, test_attn_long_gqa_9b);
    tcase_add_test(ta, test_attn_long_gqa_f32);
    tcase_add_test(ta, test_attn_long_gqa_fma);
    tcase_add_test(ta, test_kv_too_big);
    tcase_add_loop_test(tg, test_gdn, 0, (int)(sizeof gdn_shapes / sizeof gdn_shapes[0]));
    tcase_add_test(ta, test_attn_i8_pages);
    tcase_add_test(ta, test_attn_i8_long_split);
    tcase_add_test(ta, test_attn_i8_long_simple);
    tcase_add_test(ta, test_attn_i8_pool);
    tcase_add_test(tg, test_gdn_q_fused);
    tcase_add_test(tg, test_gdn_prefill_chunked);
    tcase_add_test(tg, test_gdn_prefill_seq);
    tcase_add_test(tg, test_gdn_prefill_knob);
    tcase_add_test(tg, test_gdn_prefill_9b_timing);
    tcase_add_test(tx, test_moe);
    tcase_add_test(tx, test_moe_dp4a);
    tcase_add_test(tm, test_matmul_mma);
    tcase_add_test(tx, test_moe_route);   /* the cases above keep their random draws */
    tcase_add_test(tm, test_gemv_v1);
    tcase_add_test(tm, test_gemv_ab);
    tcase_add_test(tx, test_moe_fs_same);
    tcase_add_test(tx, test_moe_quad_experts);   /* (after the cases above: their draws unchanged) */
    tcase_add_test(tx, test_moe_route_fused);    /* (last of moe: the draws above unchanged) */
    tcase_add_test(tx, test_moe_block_cols);
    tcase_add_test(tm, test_topk);        /* its own draws (rng saved and restored) */
    suite_add_tcase(s, tm);
    suite_add_tcase(s, ta);
    suite_add_tcase(s, tg);
    suite_add_tcase(s, tx);
    suite_add_tcase(s, tf);
    suite_add_tcase(s, td);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    dlclose(dl_cu);
    dlclose(dl_cpu);
    si_config_free(cfg);
    return failed ? 1 : 0;
}
