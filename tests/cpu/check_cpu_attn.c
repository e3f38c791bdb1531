/* tests/cpu/check_cpu_attn.c — SI_OP_ATTN of the cpu backend against a
 * double-precision reference written here from spec qwen35-gguf.md §3.4 and
 * §6.12: per-head q/gate split, q/k RMSNorm, NEOX RoPE over n_rot dims
 * (YaRN), KV cache across calls and sequences, GQA, causal softmax,
 * sigmoid gate; plus the cache's error paths.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"

#define MAX_SEQ 4

typedef struct acfg {
    int    nh, nkv, hd, nrot, n_ctx;
    double eps, base, yarn, orig;
} acfg;

/* Reference state: per sequence a double K/V cache [ctx][nkv][hd]. */
typedef struct aref {
    acfg    c;
    double *K[MAX_SEQ], *V[MAX_SEQ];
    int     len[MAX_SEQ];
} aref;

static void aref_init(aref *r, const acfg *c)
{
    memset(r, 0, sizeof *r);
    r->c = *c;
    for (int s = 0; s < MAX_SEQ; s++) {
        r->K[s] = calloc((size_t)c->n_ctx * c->nkv * c->hd, sizeof(double));
        r->V[s] = calloc((size_t)c->n_ctx * c->nkv * c->hd, sizeof(double));
        ck_assert(r->K[s] && r->V[s]);
    }
}

static void aref_free(aref *r)
{
    for (int s = 0; s < MAX_SEQ; s++) {
        free(r->K[s]);
        free(r->V[s]);
    }
}

static void ref_rms(double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        x[i] = x[i] * sc * w[i];
}

/* NEOX rotation of pairs (i, i + nrot/2); YaRN per spec §6.12. */
static void ref_rope(double *x, int pos, const acfg *c)
{
    int half = c->nrot / 2;
    double lo = 0, hi = 0, msc = 1;
    if (c->yarn > 0) {
        double cf = c->nrot * log(c->orig / (2 * M_PI * 32)) / (2 * log(c->base));
        double cs = c->nrot * log(c->orig / (2 * M_PI * 1)) / (2 * log(c->base));
        lo = fmax(0.0, floor(cf));
        hi = fmin(c->nrot - 1.0, ceil(cs));
        msc = 1 + 0.1 * log(c->yarn);
    }
    for (int i = 0; i < half; i++) {
        double th = pos * pow(c->base, -2.0 * i / c->nrot);
        if (c->yarn > 0) {
            double ramp = 1 - fmin(1.0, fmax(0.0, (i - lo) / fmax(0.001, hi - lo)));
            th = th / c->yarn * (1 - ramp) + th * ramp;
        }
        double a = x[i], b = x[i + half];
        x[i] = (a * cos(th) - b * sin(th)) * msc;
        x[i + half] = (b * cos(th) + a * sin(th)) * msc;
    }
}

/* Tokens in batch order: K/V of the whole batch first, then attention. */
static void aref_batch(aref *r, int n, const int32_t *seq, const int32_t *pos, const float *qg, const float *k,
                       const float *v, const float *qn, const float *kn, double *out)
{
    const acfg *c = &r->c;
    const int hd = c->hd, qd = c->nh * hd, kvd = c->nkv * hd;
    for (int t = 0; t < n; t++) {
        int s = seq[t], p = pos[t];
        ck_assert_int_eq(p, r->len[s]);
        for (int g = 0; g < c->nkv; g++) {
            double kk[256];
            for (int i = 0; i < hd; i++)
                kk[i] = k[t * kvd + g * hd + i];
            ref_rms(kk, kn, hd, c->eps);
            ref_rope(kk, p, c);
            for (int i = 0; i < hd; i++) {
                r->K[s][((size_t)p * c->nkv + g) * hd + i] = kk[i];
                r->V[s][((size_t)p * c->nkv + g) * hd + i] = v[t * kvd + g * hd + i];
            }
        }
        r->len[s]++;
    }
    for (int t = 0; t < n; t++) {
        int s = seq[t], p = pos[t];
        for (int h = 0; h < c->nh; h++) {
            int g = h / (c->nh / c->nkv);
            double q[256], sc[512], acc[256] = { 0 }, mx = -INFINITY, sum = 0;
            for (int i = 0; i < hd; i++)
                q[i] = qg[(size_t)t * 2 * qd + (size_t)h * 2 * hd + i];
            ref_rms(q, qn, hd, c->eps);
            ref_rope(q, p, c);
            for (int j = 0; j <= p; j++) {
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += q[i] * r->K[s][((size_t)j * c->nkv + g) * hd + i];
                sc[j] = d / sqrt((double)hd);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= p; j++) {
                sc[j] = exp(sc[j] - mx);
                sum += sc[j];
            }
            for (int j = 0; j <= p; j++)
                for (int i = 0; i < hd; i++)
                    acc[i] += sc[j] / sum * r->V[s][((size_t)j * c->nkv + g) * hd + i];
            for (int i = 0; i < hd; i++) {
                double gate = qg[(size_t)t * 2 * qd + (size_t)h * 2 * hd + hd + i];
                out[(size_t)t * qd + h * hd + i] = acc[i] / (1 + exp(-gate));
            }
        }
    }
}

typedef struct aenv {
    ct_backend c;
    si_kv     *kv;
    acfg       cfg;
    float      qn[256], kn[256];
    si_tensor  tqn, tkn;
} aenv;

static void aenv_open(aenv *e, const char *knobs, const acfg *cfg, int n_seq, int n_layer)
{
    ct_open(&e->c, knobs);
    e->cfg = *cfg;
    si_kv_desc d = { .size = sizeof d, .n_layer = (uint32_t)n_layer, .n_head_kv = (uint32_t)cfg->nkv,
                     .head_dim = (uint32_t)cfg->hd, .n_seq = (uint32_t)n_seq, .n_ctx = (uint32_t)cfg->n_ctx };
    si_err err = { "" };
    ck_assert_msg(e->c.ops->kv_create(e->c.b, &d, &e->kv, &err) == SI_OK, "%s", err.msg);
    ct_fill(e->qn, cfg->hd, 0.5, 1.5);
    ct_fill(e->kn, cfg->hd, 0.5, 1.5);
    e->tqn = ct_f32(&e->c, e->qn, cfg->hd, 1, 0);
    e->tkn = ct_f32(&e->c, e->kn, cfg->hd, 1, 0);
}

static void aenv_close(aenv *e)
{
    e->c.ops->kv_free(e->c.b, e->kv);
    ct_close(&e->c);
}

/* Runs one ATTN op on layer `layer`; out[n][nh*hd]. */
static int aenv_run(aenv *e, int layer, int n, const int32_t *seq, const int32_t *pos, const float *qg,
                    const float *k, const float *v, float *out, si_err *err)
{
    const acfg *c = &e->cfg;
    const int qd = c->nh * c->hd, kvd = c->nkv * c->hd;
    si_tensor tq = ct_f32(&e->c, qg, 2 * qd, n, 2 * qd + 4);
    si_tensor tk = ct_f32(&e->c, k, kvd, n, 0), tv = ct_f32(&e->c, v, kvd, n, kvd + 16);
    si_tensor td = ct_f32(&e->c, NULL, qd, n, 0);
    si_op op = { .kind = SI_OP_ATTN, .dst = td, .src = { &tq, &tk, &tv, &e->tqn, &e->tkn } };
    op.p.attn = (si_attn_params){ .n_head = (uint32_t)c->nh, .n_head_kv = (uint32_t)c->nkv,
                                  .head_dim = (uint32_t)c->hd, .n_rot = (uint32_t)c->nrot, .eps = (float)c->eps,
                                  .rope_base = (float)c->base, .yarn_factor = (float)c->yarn,
                                  .yarn_orig_ctx = (uint32_t)c->orig, .kv = e->kv, .kv_layer = (uint32_t)layer,
                                  .pos = pos, .seq = seq };
    ck_assert(e->c.ops->supports(e->c.b, &op));
    int rc = ct_exec(&e->c, &op, err);
    ct_get(&e->c, &td, out);
    return rc;
}

typedef struct abatch {
    int      n;
    int32_t  seq[64], pos[64];
    float   *qg, *k, *v;
    float   *out;
    double  *want;
} abatch;

static void abatch_make(abatch *b, const acfg *c, int n, const int32_t *seq, const int32_t *pos)
{
    b->n = n;
    memcpy(b->seq, seq, sizeof(int32_t) * n);
    memcpy(b->pos, pos, sizeof(int32_t) * n);
    int qd = c->nh * c->hd, kvd = c->nkv * c->hd;
    b->qg = malloc(sizeof(float) * 2 * qd * n);
    b->k = malloc(sizeof(float) * kvd * n);
    b->v = malloc(sizeof(float) * kvd * n);
    b->out = malloc(sizeof(float) * qd * n);
    b->want = malloc(sizeof(double) * qd * n);
    ck_assert(b->qg && b->k && b->v && b->out && b->want);
    ct_fill(b->qg, 2 * qd * n, -2, 2);
    ct_fill(b->k, kvd * n, -2, 2);
    ct_fill(b->v, kvd * n, -1, 1);
}

static void abatch_free(abatch *b)
{
    free(b->qg);
    free(b->k);
    free(b->v);
    free(b->out);
    free(b->want);
}

/* Runs the batch on the plugin and the reference; compares. */
static void abatch_check(aenv *e, aref *r, abatch *b, int layer, double atol, const char *what)
{
    si_err err = { "" };
    ck_assert_msg(aenv_run(e, layer, b->n, b->seq, b->pos, b->qg, b->k, b->v, b->out, &err) == SI_OK, "%s: %s",
                  what, err.msg);
    aref_batch(r, b->n, b->seq, b->pos, b->qg, b->k, b->v, e->qn, e->kn, b->want);
    ct_expect_close(what, b->out, b->want, NULL, (int64_t)b->n * e->cfg.nh * e->cfg.hd, atol, 1e-4);
}

static void seq_run(int32_t *seq, int32_t *pos, int n, int s, int p0)
{
    for (int i = 0; i < n; i++) {
        seq[i] = s;
        pos[i] = p0 + i;
    }
}

static void multi_seq_case(const char *knobs, const acfg *cfg, double atol)
{
    aenv e;
    aref r;
    aenv_open(&e, knobs, cfg, 3, 2);
    aref_init(&r, cfg);
    int32_t seq[64], pos[64];
    abatch b;
    /* prefill: seq 2 (5 tokens) then seq 0 (3 tokens) in one batch */
    seq_run(seq, pos, 5, 2, 0);
    seq_run(seq + 5, pos + 5, 3, 0, 0);
    abatch_make(&b, cfg, 8, seq, pos);
    abatch_check(&e, &r, &b, 1, atol, "prefill of two sequences");
    abatch_free(&b);
    /* decode both in one batch */
    int32_t s2[2] = { 0, 2 }, p2[2] = { 3, 5 };
    abatch_make(&b, cfg, 2, s2, p2);
    abatch_check(&e, &r, &b, 1, atol, "decode of two sequences");
    abatch_free(&b);
    /* a long prefill of the third sequence, then more of seq 0 */
    seq_run(seq, pos, 20, 1, 0);
    seq_run(seq + 20, pos + 20, 7, 0, 4);
    abatch_make(&b, cfg, 27, seq, pos);
    abatch_check(&e, &r, &b, 1, atol, "second prefill");
    abatch_free(&b);
    aref_free(&r);
    aenv_close(&e);
}

START_TEST(test_attn_gqa_multi_seq)
{
    acfg cfg = { .nh = 4, .nkv = 2, .hd = 32, .nrot = 16, .n_ctx = 40, .eps = 1e-6, .base = 1e4 };
    multi_seq_case("threads=3", &cfg, 2e-5);
    acfg mha = { .nh = 3, .nkv = 3, .hd = 48, .nrot = 48, .n_ctx = 40, .eps = 1e-5, .base = 500 };
    multi_seq_case("threads=2,simd=off", &mha, 2e-5);
    acfg nrope = { .nh = 8, .nkv = 1, .hd = 16, .nrot = 0, .n_ctx = 40, .eps = 1e-6, .base = 1e4 };
    multi_seq_case("threads=1", &nrope, 2e-5);
}
END_TEST

START_TEST(test_attn_yarn)
{
    acfg cfg = { .nh = 4, .nkv = 1, .hd = 64, .nrot = 32, .n_ctx = 40, .eps = 1e-6, .base = 1e4, .yarn = 4,
                 .orig = 64 };
    multi_seq_case("threads=3", &cfg, 2e-5);
}
END_TEST

START_TEST(test_attn_f16_cache)
{
    acfg cfg = { .nh = 4, .nkv = 2, .hd = 32, .nrot = 16, .n_ctx = 40, .eps = 1e-6, .base = 1e4 };
    multi_seq_case("threads=2,kv_type=f16", &cfg, 4e-3);
}
END_TEST

/* Batched prefill of n tokens == n single-token calls. */
START_TEST(test_attn_batch_equals_steps)
{
    acfg cfg = { .nh = 4, .nkv = 2, .hd = 32, .nrot = 32, .n_ctx = 16, .eps = 1e-6, .base = 1e4 };
    const int n = 11, qd = 4 * 32, kvd = 2 * 32;
    aenv e;
    aenv_open(&e, "threads=3", &cfg, 2, 1);
    int32_t seq[11], pos[11];
    seq_run(seq, pos, n, 1, 0);
    abatch b;
    abatch_make(&b, &cfg, n, seq, pos);
    si_err err = { "" };
    ck_assert_msg(aenv_run(&e, 0, n, seq, pos, b.qg, b.k, b.v, b.out, &err) == SI_OK, "%s", err.msg);
    float one[128];
    double want[128];
    for (int t = 0; t < n; t++) {
        int32_t s0 = 0, p0 = t;
        ck_assert_msg(aenv_run(&e, 0, 1, &s0, &p0, b.qg + (size_t)t * 2 * qd, b.k + (size_t)t * kvd,
                               b.v + (size_t)t * kvd, one, &err) == SI_OK, "%s", err.msg);
        for (int i = 0; i < qd; i++)
            want[i] = b.out[(size_t)t * qd + i];
        ct_expect_close("single step vs batch", one, want, NULL, qd, 1e-6, 1e-5);
    }
    abatch_free(&b);
    aenv_close(&e);
}
END_TEST

START_TEST(test_attn_errors)
{
    acfg cfg = { .nh = 2, .nkv = 1, .hd = 16, .nrot = 16, .n_ctx = 4, .eps = 1e-6, .base = 1e4 };
    aenv e;
    aenv_open(&e, "threads=2", &cfg, 2, 1);
    float qg[4 * 64], k[4 * 16], v[4 * 16], out[4 * 32];
    ct_fill(qg, 4 * 64, -1, 1);
    ct_fill(k, 4 * 16, -1, 1);
    ct_fill(v, 4 * 16, -1, 1);
    int32_t seq[4] = { 0, 0, 0, 0 }, pos[4] = { 0, 1, 2, 3 };
    si_err err = { "" };
    ck_assert_int_eq(aenv_run(&e, 0, 4, seq, pos, qg, k, v, out, &err), SI_OK);
    /* the context is full: seq 0 pos 4 */
    int32_t s1 = 0, p1 = 4;
    ck_assert_int_eq(aenv_run(&e, 0, 1, &s1, &p1, qg, k, v, out, &err), SI_ERANGE);
    ck_assert_msg(strstr(err.msg, "seq 0") && strstr(err.msg, "pos 4") && strstr(err.msg, "n_ctx 4"), "%s", err.msg);
    ck_assert(isnan(out[0]));   /* nothing was written */
    /* a batch whose second token overflows leaves no trace of the first */
    int32_t s2[2] = { 1, 1 }, p2[2] = { 0, 1 };
    ck_assert_int_eq(aenv_run(&e, 0, 2, s2, p2, qg, k, v, out, &err), SI_OK);
    int32_t s3[3] = { 1, 1, 1 }, p3[3] = { 2, 3, 4 };
    ck_assert_int_eq(aenv_run(&e, 0, 3, s3, p3, qg, k, v, out, &err), SI_ERANGE);
    ck_assert_msg(strstr(err.msg, "seq 1") && strstr(err.msg, "pos 4"), "%s", err.msg);
    int32_t p4 = 2;
    ck_assert_int_eq(aenv_run(&e, 0, 1, &s2[0], &p4, qg, k, v, out, &err), SI_OK);
    /* gaps and repeats */
    int32_t p5 = 2;
    ck_assert_int_eq(aenv_run(&e, 0, 1, &s2[0], &p5, qg, k, v, out, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "contiguous"), "%s", err.msg);
    int32_t bad_seq = 2, p6 = 0;
    ck_assert_int_eq(aenv_run(&e, 0, 1, &bad_seq, &p6, qg, k, v, out, &err), SI_ERANGE);
    /* reset makes room again */
    ck_assert_int_eq(e.c.ops->kv_seq_reset(e.c.b, e.kv, 0, &err), SI_OK);
    ck_assert_int_eq(aenv_run(&e, 0, 4, seq, pos, qg, k, v, out, &err), SI_OK);
    ck_assert(isfinite(out[0]));
    ck_assert_int_eq(e.c.ops->kv_seq_reset(e.c.b, e.kv, 2, &err), SI_ERANGE);
    /* kv_create validation */
    si_kv *kv2 = NULL;
    si_kv_desc d = { .size = sizeof d, .n_layer = 1, .n_head_kv = 0, .head_dim = 16, .n_seq = 1, .n_ctx = 4 };
    ck_assert_int_eq(e.c.ops->kv_create(e.c.b, &d, &kv2, &err), SI_EINVAL);
    aenv_close(&e);
}
END_TEST

START_TEST(test_attn_supports)
{
    acfg cfg = { .nh = 4, .nkv = 2, .hd = 16, .nrot = 8, .n_ctx = 4, .eps = 1e-6, .base = 1e4 };
    aenv e;
    aenv_open(&e, "threads=1", &cfg, 1, 2);
    float qg[128], k[32];
    ct_fill(qg, 128, -1, 1);
    ct_fill(k, 32, -1, 1);
    si_tensor tq = ct_f32(&e.c, qg, 128, 1, 0), tk = ct_f32(&e.c, k, 32, 1, 0), td = ct_f32(&e.c, NULL, 64, 1, 0);
    int32_t s = 0, p = 0;
    si_op op = { .kind = SI_OP_ATTN, .dst = td, .src = { &tq, &tk, &tk, &e.tqn, &e.tkn } };
    op.p.attn = (si_attn_params){ .n_head = 4, .n_head_kv = 2, .head_dim = 16, .n_rot = 8, .eps = 1e-6f,
                                  .rope_base = 1e4f, .kv = e.kv, .kv_layer = 1, .pos = &p, .seq = &s };
    ck_assert(e.c.ops->supports(e.c.b, &op));
    si_op bad = op;
    bad.p.attn.kv_layer = 2;                 /* beyond the cache's layers */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.attn.n_head_kv = 4;                /* disagrees with the cache and K */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.attn.n_rot = 7;
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.attn.yarn_factor = 4;              /* YaRN without its original context */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.p.attn.kv = NULL;
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    bad = op;
    bad.src[0] = &tk;                        /* QG of the wrong width */
    ck_assert(!e.c.ops->supports(e.c.b, &bad));
    si_err err = { "" };
    ck_assert_int_eq(ct_exec(&e.c, &bad, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "ATTN"), "%s", err.msg);
    aenv_close(&e);
}
END_TEST

static Suite *attn_suite(void)
{
    Suite *s = suite_create("cpu_attn");
    TCase *tc = tcase_create("attn");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_attn_gqa_multi_seq);
    tcase_add_test(tc, test_attn_yarn);
    tcase_add_test(tc, test_attn_f16_cache);
    tcase_add_test(tc, test_attn_batch_equals_steps);
    tcase_add_test(tc, test_attn_errors);
    tcase_add_test(tc, test_attn_supports);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    ct_seed();
    SRunner *sr = srunner_create(attn_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
