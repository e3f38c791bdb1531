/* tests/cpu/check_cpu_gdn.c — SI_OP_GDN of the cpu backend against a
 * double-precision token loop written here from spec qwen35-gguf.md §3.5
 * steps 2-9 and §4: conv state of raw inputs, SiLU, L2 norms, the gated
 * delta rule on S[i][m] stored s[m*dk + i], v-head j -> k-head j % Hk,
 * gated RMSNorm.  Checks outputs AND the state left in the buffer.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"

typedef struct gcfg {
    int    hk, hv, dk, dv, K;
    double eps;
} gcfg;

static int conv_dim(const gcfg *c) { return 2 * c->hk * c->dk + c->hv * c->dv; }
/* floats per slot: conv state then SSM state */
static int64_t state_floats(const gcfg *c)
{
    return (int64_t)conv_dim(c) * (c->K - 1) + (int64_t)c->hv * c->dv * c->dk;
}

/* Weights shared by all tokens. */
typedef struct gw {
    float *conv;            /* [conv_dim][K] */
    float  ssm_a[64], dt[64], norm[256];
} gw;

/* One token of input. */
typedef struct gtok {
    const float *u, *z, *b, *a;
} gtok;

static double sig(double x) { return 1 / (1 + exp(-x)); }
static double silu_d(double x) { return x * sig(x); }

/* st: a slot's state in the plugin's layout, in double. */
static void ref_token(const gcfg *c, const gw *w, double *st, gtok in, double *out)
{
    const int cd = conv_dim(c), H = c->K - 1, kd = c->hk * c->dk;
    double *hist = st, *S = st + (size_t)cd * H;
    double *y = malloc(sizeof(double) * cd);
    ck_assert_ptr_nonnull(y);
    for (int ch = 0; ch < cd; ch++) {
        double acc = w->conv[ch * c->K + H] * in.u[ch];
        for (int i = 0; i < H; i++)
            acc += w->conv[ch * c->K + i] * hist[ch * H + i];
        for (int i = 0; i + 1 < H; i++)
            hist[ch * H + i] = hist[ch * H + i + 1];
        if (H > 0)
            hist[ch * H + H - 1] = in.u[ch];
        y[ch] = silu_d(acc);
    }
    for (int j = 0; j < c->hv; j++) {
        int kh = j % c->hk;
        double q[256], k[256], nq = 0, nk = 0, o[256], ss = 0;
        for (int i = 0; i < c->dk; i++) {
            q[i] = y[kh * c->dk + i];
            k[i] = y[kd + kh * c->dk + i];
            nq += q[i] * q[i];
            nk += k[i] * k[i];
        }
        nq = fmax(sqrt(nq), c->eps);
        nk = fmax(sqrt(nk), c->eps);
        for (int i = 0; i < c->dk; i++) {
            q[i] = q[i] / nq / sqrt((double)c->dk);
            k[i] /= nk;
        }
        double beta = sig(in.b[j]);
        double x = in.a[j] + w->dt[j];
        double sp = x > 20 ? x : log(1 + exp(x));
        double alpha = exp(w->ssm_a[j] * sp);
        double *Sj = S + (size_t)j * c->dv * c->dk;   /* Sj[m*dk + i] = S[i][m] */
        for (int m = 0; m < c->dv; m++) {
            double r = 0;
            for (int i = 0; i < c->dk; i++) {
                Sj[m * c->dk + i] *= alpha;
                r += Sj[m * c->dk + i] * k[i];
            }
            double delta = beta * (y[2 * kd + j * c->dv + m] - r);
            o[m] = 0;
            for (int i = 0; i < c->dk; i++) {
                Sj[m * c->dk + i] += k[i] * delta;
                o[m] += Sj[m * c->dk + i] * q[i];
            }
            ss += o[m] * o[m];
        }
        double sc = 1 / sqrt(ss / c->dv + c->eps);
        for (int m = 0; m < c->dv; m++)
            out[j * c->dv + m] = o[m] * sc * w->norm[m] * silu_d(in.z[j * c->dv + m]);
    }
    free(y);
}

typedef struct genv {
    ct_backend c;
    gcfg       cfg;
    gw         w;
    si_tensor  tconv, ta, tdt, tnorm;
    si_buf    *state;
    uint64_t   off, stride;
} genv;

static void genv_open(genv *e, const char *knobs, const gcfg *cfg, int n_slots, uint64_t off, uint64_t pad)
{
    ct_open(&e->c, knobs);
    e->cfg = *cfg;
    const int cd = conv_dim(cfg);
    e->w.conv = malloc(sizeof(float) * cd * cfg->K);
    ck_assert_ptr_nonnull(e->w.conv);
    ct_fill(e->w.conv, (int64_t)cd * cfg->K, -0.6, 0.6);
    for (int j = 0; j < cfg->hv; j++) {
        e->w.ssm_a[j] = -(float)exp(ct_uniform(-2, 1));
        e->w.dt[j] = (float)ct_uniform(-1, 1);
    }
    ct_fill(e->w.norm, cfg->dv, 0.5, 1.5);
    e->tconv = ct_f32(&e->c, e->w.conv, cfg->K, cd, 0);
    e->ta = ct_f32(&e->c, e->w.ssm_a, cfg->hv, 1, 0);
    e->tdt = ct_f32(&e->c, e->w.dt, cfg->hv, 1, 0);
    e->tnorm = ct_f32(&e->c, e->w.norm, cfg->dv, 1, 0);
    e->off = off;
    e->stride = (uint64_t)state_floats(cfg) * 4 + pad;
    si_err err = { "" };
    ck_assert(e->c.ops->buf_alloc(e->c.b, off + e->stride * (uint64_t)n_slots, &e->state, &err) == SI_OK);
    /* zero every slot */
    uint8_t *zero = calloc(1, off + e->stride * (uint64_t)n_slots);
    ck_assert(e->c.ops->upload(e->c.b, e->state, 0, zero, off + e->stride * (uint64_t)n_slots, &err) == SI_OK);
    free(zero);
}

static void genv_close(genv *e)
{
    e->c.ops->buf_free(e->c.b, e->state);
    free(e->w.conv);
    ct_close(&e->c);
}

static void state_set(genv *e, int slot, const double *st)
{
    int64_t n = state_floats(&e->cfg);
    float *f = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)st[i];
    si_err err = { "" };
    ck_assert(e->c.ops->upload(e->c.b, e->state, e->off + e->stride * (uint64_t)slot, f, (uint64_t)n * 4, &err) == SI_OK);
    free(f);
}

static void state_get(genv *e, int slot, float *f)
{
    si_err err = { "" };
    ck_assert(e->c.ops->download(e->c.b, f, e->state, e->off + e->stride * (uint64_t)slot,
                                 (uint64_t)state_floats(&e->cfg) * 4, &err) == SI_OK);
}

/* Inputs of n tokens. */
typedef struct gbatch {
    int    n;
    float *u, *z, *b, *a;
} gbatch;

static void gbatch_make(gbatch *g, const gcfg *c, int n)
{
    g->n = n;
    int cd = conv_dim(c), vd = c->hv * c->dv;
    g->u = malloc(sizeof(float) * cd * n);
    g->z = malloc(sizeof(float) * vd * n);
    g->b = malloc(sizeof(float) * c->hv * n);
    g->a = malloc(sizeof(float) * c->hv * n);
    ck_assert(g->u && g->z && g->b && g->a);
    ct_fill(g->u, (int64_t)cd * n, -1.5, 1.5);
    ct_fill(g->z, (int64_t)vd * n, -2, 2);
    ct_fill(g->b, (int64_t)c->hv * n, -3, 3);
    ct_fill(g->a, (int64_t)c->hv * n, -3, 3);
    g->a[0] = 25.0f;   /* past the softplus threshold */
}

static void gbatch_free(gbatch *g)
{
    free(g->u);
    free(g->z);
    free(g->b);
    free(g->a);
}

static gtok gtok_at(const gbatch *g, const gcfg *c, int t)
{
    return (gtok){ g->u + (size_t)t * conv_dim(c), g->z + (size_t)t * c->hv * c->dv, g->b + (size_t)t * c->hv,
                   g->a + (size_t)t * c->hv };
}

/* Runs tokens [t0, t0+n) of g with slots seq[]; out[n][hv*dv]. */
static int genv_run(genv *e, const gbatch *g, int t0, int n, const int32_t *seq, float *out, si_err *err)
{
    const gcfg *c = &e->cfg;
    int cd = conv_dim(c), vd = c->hv * c->dv;
    si_tensor tu = ct_f32(&e->c, g->u + (size_t)t0 * cd, cd, n, cd + 3);
    si_tensor tz = ct_f32(&e->c, g->z + (size_t)t0 * vd, vd, n, 0);
    si_tensor tb = ct_f32(&e->c, g->b + (size_t)t0 * c->hv, c->hv, n, 0);
    si_tensor ta = ct_f32(&e->c, g->a + (size_t)t0 * c->hv, c->hv, n, c->hv + 1);
    si_tensor td = ct_f32(&e->c, NULL, vd, n, vd + 2);
    si_op op = { .kind = SI_OP_GDN, .dst = td,
                 .src = { &tu, &tz, &tb, &ta, &e->tconv, &e->ta, &e->tdt, &e->tnorm } };
    op.p.gdn = (si_gdn_params){ .n_k_head = (uint32_t)c->hk, .n_v_head = (uint32_t)c->hv,
                                .head_k_dim = (uint32_t)c->dk, .head_v_dim = (uint32_t)c->dv,
                                .conv_k = (uint32_t)c->K, .eps = (float)c->eps, .state = e->state,
                                .state_offset = e->off, .state_stride = e->stride, .seq = seq };
    ck_assert(e->c.ops->supports(e->c.b, &op));
    int rc = ct_exec(&e->c, &op, err);
    ct_get(&e->c, &td, out);
    return rc;
}

static double *ref_state_new(const gcfg *c, bool random)
{
    int64_t n = state_floats(c);
    double *st = calloc((size_t)n, sizeof(double));
    ck_assert_ptr_nonnull(st);
    if (random)
        for (int64_t i = 0; i < n; i++)
            st[i] = (float)ct_uniform(-0.5, 0.5);   /* representable in f32 */
    return st;
}

static void expect_state(genv *e, int slot, const double *st, const char *what)
{
    int64_t n = state_floats(&e->cfg);
    float *f = malloc(sizeof(float) * n);
    state_get(e, slot, f);
    ct_expect_close(what, f, st, NULL, n, 2e-5, 1e-4);
    free(f);
}

/* Slot 0 starts from a random state; two calls carry it. */
static void reference_case(const char *knobs, const gcfg *cfg)
{
    genv e;
    genv_open(&e, knobs, cfg, 1, 0, 0);
    double *st = ref_state_new(cfg, true);
    state_set(&e, 0, st);
    gbatch g;
    gbatch_make(&g, cfg, 10);
    const int vd = cfg->hv * cfg->dv;
    float *out = malloc(sizeof(float) * vd * 10);
    double *want = malloc(sizeof(double) * vd * 10);
    int32_t seq[10] = { 0 };
    si_err err = { "" };
    ck_assert_msg(genv_run(&e, &g, 0, 7, seq, out, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(genv_run(&e, &g, 7, 3, seq, out + (size_t)7 * vd, &err) == SI_OK, "%s", err.msg);
    for (int t = 0; t < 10; t++)
        ref_token(cfg, &e.w, st, gtok_at(&g, cfg, t), want + (size_t)t * vd);
    ct_expect_close("GDN output vs reference", out, want, NULL, (int64_t)vd * 10, 1e-4, 1e-4);
    expect_state(&e, 0, st, "GDN state vs reference");
    free(out);
    free(want);
    free(st);
    gbatch_free(&g);
    genv_close(&e);
}

START_TEST(test_gdn_reference)
{
    gcfg small = { .hk = 2, .hv = 4, .dk = 16, .dv = 8, .K = 4, .eps = 1e-6 };
    reference_case("threads=3", &small);
    reference_case("threads=1,simd=off", &small);
    gcfg big = { .hk = 4, .hv = 8, .dk = 32, .dv = 24, .K = 4, .eps = 1e-6 };
    reference_case("threads=2", &big);
    gcfg k2 = { .hk = 3, .hv = 3, .dk = 8, .dv = 8, .K = 2, .eps = 1e-5 };
    reference_case("threads=2", &k2);
    gcfg k1 = { .hk = 1, .hv = 2, .dk = 8, .dv = 4, .K = 1, .eps = 1e-6 };
    reference_case("threads=2", &k1);
}
END_TEST

/* A batch of n tokens == n single-token calls (on another slot). */
START_TEST(test_gdn_batch_equals_steps)
{
    gcfg cfg = { .hk = 2, .hv = 6, .dk = 16, .dv = 16, .K = 4, .eps = 1e-6 };
    genv e;
    genv_open(&e, "threads=3", &cfg, 2, 0, 0);
    gbatch g;
    gbatch_make(&g, &cfg, 9);
    const int vd = cfg.hv * cfg.dv;
    float out[9 * 96], one[96];
    double want[96];
    int32_t s0[9] = { 0 }, s1 = 1;
    si_err err = { "" };
    ck_assert_int_eq(genv_run(&e, &g, 0, 9, s0, out, &err), SI_OK);
    for (int t = 0; t < 9; t++) {
        ck_assert_int_eq(genv_run(&e, &g, t, 1, &s1, one, &err), SI_OK);
        for (int i = 0; i < vd; i++)
            want[i] = out[t * vd + i];
        ct_expect_close("GDN single step vs batch", one, want, NULL, vd, 1e-6, 1e-5);
    }
    int64_t n = state_floats(&cfg);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    double *da = malloc(sizeof(double) * n);
    state_get(&e, 0, a);
    state_get(&e, 1, b);
    for (int64_t i = 0; i < n; i++)
        da[i] = a[i];
    ct_expect_close("GDN state after batch vs steps", b, da, NULL, n, 1e-6, 1e-5);
    free(a);
    free(b);
    free(da);
    gbatch_free(&g);
    genv_close(&e);
}
END_TEST

/* Two sequences in one batch, slots out of order, state at an offset with
 * padded slots; then a second batch in the other order. */
START_TEST(test_gdn_two_sequences)
{
    gcfg cfg = { .hk = 2, .hv = 4, .dk = 16, .dv = 8, .K = 4, .eps = 1e-6 };
    genv e;
    genv_open(&e, "threads=2", &cfg, 3, 256, 192);
    double *st0 = ref_state_new(&cfg, false), *st2 = ref_state_new(&cfg, false);
    gbatch g;
    gbatch_make(&g, &cfg, 10);
    const int vd = cfg.hv * cfg.dv;
    float out[10 * 32];
    double want[10 * 32];
    int32_t seq[10] = { 2, 2, 2, 0, 0, 0, 0, 0, 2, 2 };
    si_err err = { "" };
    ck_assert_msg(genv_run(&e, &g, 0, 7, seq, out, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(genv_run(&e, &g, 7, 3, seq + 7, out + 7 * vd, &err) == SI_OK, "%s", err.msg);
    for (int t = 0; t < 10; t++)
        ref_token(&cfg, &e.w, seq[t] == 0 ? st0 : st2, gtok_at(&g, &cfg, t), want + t * vd);
    ct_expect_close("GDN two sequences", out, want, NULL, 10 * vd, 1e-4, 1e-4);
    expect_state(&e, 0, st0, "GDN state of slot 0");
    expect_state(&e, 2, st2, "GDN state of slot 2");
    double *st1 = ref_state_new(&cfg, false);   /* slot 1 untouched */
    expect_state(&e, 1, st1, "GDN state of slot 1");
    free(st0);
    free(st1);
    free(st2);
    gbatch_free(&g);
    genv_close(&e);
}
END_TEST

START_TEST(test_gdn_errors)
{
    gcfg cfg = { .hk = 1, .hv = 2, .dk = 8, .dv = 8, .K = 4, .eps = 1e-6 };
    genv e;
    genv_open(&e, "threads=2", &cfg, 2, 0, 0);
    gbatch g;
    gbatch_make(&g, &cfg, 3);
    float out[3 * 16];
    si_err err = { "" };
    int32_t split[3] = { 0, 1, 0 };
    ck_assert_int_eq(genv_run(&e, &g, 0, 3, split, out, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "GDN") && strstr(err.msg, "consecutive"), "%s", err.msg);
    int32_t beyond[3] = { 0, 2, 2 };
    ck_assert_int_eq(genv_run(&e, &g, 0, 3, beyond, out, &err), SI_ERANGE);
    ck_assert_msg(strstr(err.msg, "slot 2"), "%s", err.msg);
    int32_t neg = -1;
    ck_assert_int_eq(genv_run(&e, &g, 0, 1, &neg, out, &err), SI_ERANGE);
    ck_assert(isnan(out[0]));

    /* supports(): shapes and the state buffer */
    const int cd = conv_dim(&cfg);
    si_tensor tu = ct_f32(&e.c, g.u, cd, 1, 0), tz = ct_f32(&e.c, g.z, 16, 1, 0);
    si_tensor tb = ct_f32(&e.c, g.b, 2, 1, 0), td = ct_f32(&e.c, NULL, 16, 1, 0);
    int32_t s = 0;
    si_op op = { .kind = SI_OP_GDN, .dst = td, .src = { &tu, &tz, &tb, &tb, &e.tconv, &e.ta, &e.tdt, &e.tnorm } };
    op.p.gdn = (si_gdn_params){ .n_k_head = 1, .n_v_head = 2, .head_k_dim = 8, .head_v_dim = 8, .conv_k = 4,
                                .eps = 1e-6f, .state = e.state, .state_offset = 0, .state_stride = e.stride,
                                .seq = &s };
    ck_assert(e.c.ops->supports(e.c.b, &op));
    si_op bad = op;
    bad.p.gdn.state_stride = e.stride - 4;
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.gdn.state = NULL;
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.gdn.conv_k = 3;                     /* taps tensor has 4 */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.gdn.n_k_head = 2;                   /* u too narrow for it */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.src[7] = &e.ta;                       /* ssm_norm of the wrong length */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    ck_assert_int_eq(ct_exec(&e.c, &bad, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "GDN") && strstr(err.msg, "ssm_norm"), "%s", err.msg);
    /* a read-only weight view cannot hold state */
    float wsrc[64];
    ct_fill(wsrc, 64, -1, 1);
    si_tensor w = ct_weight(&e.c, SI_TYPE_F32, wsrc, 64, 1, 1, NULL);
    bad = op;
    bad.p.gdn.state = w.buf;
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    gbatch_free(&g);
    genv_close(&e);
}
END_TEST

static Suite *gdn_suite(void)
{
    Suite *s = suite_create("cpu_gdn");
    TCase *tc = tcase_create("gdn");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gdn_reference);
    tcase_add_test(tc, test_gdn_batch_equals_steps);
    tcase_add_test(tc, test_gdn_two_sequences);
    tcase_add_test(tc, test_gdn_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    ct_seed();
    SRunner *sr = srunner_create(gdn_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
