/* tests/tokenizer/check_sample.c — the sampler (core/sample.c): each stage's
 * semantics on small hand-made logits, reproducibility, the draw's
 * distribution, and the fast paths against a plain full-sort reference on a
 * Qwen3.5-sized vocabulary.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

static si_sampler_params plain(void)
{
    si_sampler_params p;
    si_sampler_default_params(&p);
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    return p;
}

static si_sampler *mk(const si_sampler_params *p, uint32_t n)
{
    si_sampler *s = NULL;
    si_err err;
    ck_assert_msg(si_sampler_new(p, n, &s, &err) == SI_OK, "%s", err.msg);
    return s;
}

static int32_t draw(si_sampler *s, const float *l)
{
    int32_t id = -1;
    si_err err;
    ck_assert_msg(si_sampler_sample(s, l, &id, &err) == SI_OK, "%s", err.msg);
    return id;
}

/* Logits whose softmax is exactly probs. */
static void logits_of(const double *probs, float *l, int n)
{
    for (int i = 0; i < n; i++)
        l[i] = (float)log(probs[i]);
}

START_TEST(test_greedy)
{
    si_sampler_params p = plain();
    p.temperature = 0.0f;
    si_sampler *s = mk(&p, 6);
    float l[6] = { 0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.9f };
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(draw(s, l), 1);   /* tie between 1 and 3: lowest id */
    float pr[6];
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    ck_assert(pr[1] == 1.0f && pr[0] == 0.0f && pr[3] == 0.0f);
    float bad[6] = { -INFINITY, NAN, -INFINITY, -INFINITY, -INFINITY, NAN };
    int32_t id;
    si_err err;
    ck_assert_int_eq(si_sampler_sample(s, bad, &id, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "finite"));
    si_sampler_free(s);
}
END_TEST

START_TEST(test_top_k)
{
    float l[8] = { 1.0f, 4.0f, 0.5f, 3.0f, 2.0f, -1.0f, 3.5f, 0.0f };
    si_sampler_params p = plain();
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 50; seed++) {   /* top-k 1 is greedy */
        p.seed = seed;
        si_sampler *s = mk(&p, 8);
        ck_assert_int_eq(draw(s, l), 1);
        si_sampler_free(s);
    }
    p.top_k = 3;
    si_sampler *s = mk(&p, 8);
    float pr[8];
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    double z = exp(4.0) + exp(3.5) + exp(3.0);
    ck_assert_double_eq_tol(pr[1], exp(4.0) / z, 1e-6);
    ck_assert_double_eq_tol(pr[6], exp(3.5) / z, 1e-6);
    ck_assert_double_eq_tol(pr[3], exp(3.0) / z, 1e-6);
    for (int i = 0; i < 8; i++)
        if (i != 1 && i != 6 && i != 3)
            ck_assert(pr[i] == 0.0f);
    int seen[8] = { 0 };
    for (int i = 0; i < 3000; i++)
        seen[draw(s, l)]++;
    ck_assert(seen[1] > 0 && seen[6] > 0 && seen[3] > 0);
    ck_assert_int_eq(seen[1] + seen[6] + seen[3], 3000);
    si_sampler_free(s);
    p.top_k = 100;   /* larger than the vocabulary: off */
    s = mk(&p, 8);
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    for (int i = 0; i < 8; i++)
        ck_assert(pr[i] > 0.0f);
    si_sampler_free(s);
}
END_TEST

START_TEST(test_top_p)
{
    const double probs[5] = { 0.05, 0.5, 0.15, 0.3, 0.0001 };
    float l[5], pr[5];
    logits_of(probs, l, 5);
    si_sampler_params p = plain();
    static const struct { float p; int keep[5]; } cases[] = {
        { 0.40f, { 0, 1, 0, 0, 0 } },   /* 0.5 alone reaches it */
        { 0.75f, { 0, 1, 0, 1, 0 } },   /* 0.5 + 0.3 */
        { 0.85f, { 0, 1, 1, 1, 0 } },   /* + 0.15 */
        { 0.99f, { 1, 1, 1, 1, 0 } },
        { 0.0f,  { 0, 1, 0, 0, 0 } },   /* always at least one */
    };
    for (int k = 0; k < 2; k++) {   /* alone (heap path) and after top-k (sorted path) */
        p.top_k = k ? 4 : 0;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            p.top_p = cases[c].p;
            si_sampler *s = mk(&p, 5);
            ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
            double kept = 0.0;
            for (int i = 0; i < 5; i++)
                kept += cases[c].keep[i] ? probs[i] : 0.0;
            for (int i = 0; i < 5; i++) {
                if (cases[c].keep[i])
                    ck_assert_double_eq_tol(pr[i], probs[i] / kept, 1e-5);
                else
                    ck_assert_msg(pr[i] == 0.0f, "top_p %g: token %d kept", (double)cases[c].p, i);
            }
            si_sampler_free(s);
        }
    }
}
END_TEST

START_TEST(test_min_p)
{
    const double probs[4] = { 0.5, 0.3, 0.15, 0.05 };
    float l[4], pr[4];
    logits_of(probs, l, 4);
    si_sampler_params p = plain();
    p.min_p = 0.35f;   /* threshold 0.175 */
    si_sampler *s = mk(&p, 4);
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    ck_assert(pr[0] > 0 && pr[1] > 0 && pr[2] == 0 && pr[3] == 0);
    ck_assert_double_eq_tol(pr[0], 0.5 / 0.8, 1e-6);
    si_sampler_free(s);
    p.min_p = 0.25f;   /* threshold 0.125 */
    s = mk(&p, 4);
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    ck_assert(pr[0] > 0 && pr[1] > 0 && pr[2] > 0 && pr[3] == 0);
    si_sampler_free(s);
    p.min_p = 1.0f;    /* only the maximum */
    s = mk(&p, 4);
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    ck_assert(pr[0] == 1.0f);
    si_sampler_free(s);
}
END_TEST

/* Temperature divides the logits after the filters. */
START_TEST(test_temperature)
{
    float l[3] = { 1.0f, 2.0f, 0.0f }, pr[3];
    si_sampler_params p = plain();
    p.temperature = 0.5f;
    si_sampler *s = mk(&p, 3);
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    double z = exp(2.0) + exp(4.0) + 1.0;
    ck_assert_double_eq_tol(pr[0], exp(2.0) / z, 1e-6);
    ck_assert_double_eq_tol(pr[1], exp(4.0) / z, 1e-6);
    si_sampler_free(s);
    /* min-p sees the untempered distribution (llama.cpp order): with
     * min_p 0.3, token 0 (p ratio e^-1 = 0.37) survives although at
     * temperature 0.5 its ratio would be e^-2 = 0.14. */
    p.min_p = 0.3f;
    s = mk(&p, 3);
    ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
    ck_assert(pr[0] > 0.0f && pr[2] == 0.0f);
    si_sampler_free(s);
}
END_TEST

START_TEST(test_penalties)
{
    si_sampler_params p = plain();
    p.temperature = 0.0f;
    p.penalty_last_n = 8;

    /* Repetition divides a positive logit ... */
    float l1[4] = { 2.0f, 1.9f, -1.0f, -1.1f };
    p.repeat_penalty = 1.2f;
    si_sampler *s = mk(&p, 4);
    ck_assert_int_eq(draw(s, l1), 0);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l1), 1);    /* 2 / 1.2 = 1.67 < 1.9 */
    si_sampler_free(s);
    /* ... and multiplies a negative one. */
    float l2[3] = { -1.0f, -1.1f, -5.0f };
    p.repeat_penalty = 1.5f;
    s = mk(&p, 3);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l2), 1);    /* -1 * 1.5 = -1.5 < -1.1 */
    si_sampler_free(s);
    float l3[3] = { -1.0f, -1.6f, -5.0f };
    s = mk(&p, 3);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l3), 0);    /* -1.5 > -1.6 */
    si_sampler_free(s);

    /* Presence counts once, frequency per occurrence. */
    float l4[2] = { 2.0f, 1.5f };
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.3f;
    s = mk(&p, 2);
    si_sampler_accept(s, 0);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l4), 0);    /* 2 - 0.3 = 1.7 */
    si_sampler_free(s);
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.3f;
    s = mk(&p, 2);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l4), 0);    /* 2 - 0.3 = 1.7 */
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l4), 1);    /* 2 - 0.6 = 1.4 */
    si_sampler_free(s);

    /* Exact values through the distribution: all three at once. */
    p.temperature = 1.0f;
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    float l5[3] = { 3.0f, -1.0f, 0.0f }, pr[3];
    s = mk(&p, 3);
    si_sampler_accept(s, 0);
    si_sampler_accept(s, 1);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(si_sampler_dist(s, l5, pr, NULL), SI_OK);
    double a = 3.0 / 2 - 2 * 0.25 - 0.5, b = -1.0 * 2 - 0.25 - 0.5, c = 0.0;
    double z = exp(a) + exp(b) + exp(c);
    ck_assert_double_eq_tol(pr[0], exp(a) / z, 1e-6);
    ck_assert_double_eq_tol(pr[1], exp(b) / z, 1e-6);
    ck_assert_double_eq_tol(pr[2], exp(c) / z, 1e-6);
    si_sampler_free(s);

    /* The window forgets: last_n 2, token 0 pushed out by 5 and 6. */
    p.temperature = 0.0f;
    p.repeat_penalty = 10.0f;
    p.presence_penalty = p.frequency_penalty = 0.0f;
    p.penalty_last_n = 2;
    float l6[8] = { 2.0f, 1.0f, 0, 0, 0, 0, 0, 0 };
    s = mk(&p, 8);
    si_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l6), 1);
    si_sampler_accept(s, 5);
    ck_assert_int_eq(draw(s, l6), 1);
    si_sampler_accept(s, 6);
    ck_assert_int_eq(draw(s, l6), 0);
    /* Reset empties the window; accept checks the id. */
    si_sampler_accept(s, 0);
    si_sampler_reset(s);
    ck_assert_int_eq(draw(s, l6), 0);
    ck_assert_int_eq(si_sampler_accept(s, 8), SI_ERANGE);
    ck_assert_int_eq(si_sampler_accept(s, -1), SI_ERANGE);
    si_sampler_free(s);
}
END_TEST

START_TEST(test_seed)
{
    float l[16];
    for (int i = 0; i < 16; i++)
        l[i] = (float)(i % 5) * 0.3f;
    si_sampler_params p = plain();
    p.seed = 42;
    si_sampler *a = mk(&p, 16), *b = mk(&p, 16);
    p.seed = 43;
    si_sampler *c = mk(&p, 16);
    int32_t first[500];
    int differ = 0;
    for (int i = 0; i < 500; i++) {
        first[i] = draw(a, l);
        ck_assert_int_eq(first[i], draw(b, l));
        differ += first[i] != draw(c, l);
    }
    ck_assert_int_gt(differ, 250);   /* independent streams disagree most of the time */
    si_sampler_reset(a);             /* reset restarts the same sequence */
    for (int i = 0; i < 500; i++)
        ck_assert_int_eq(draw(a, l), first[i]);
    si_sampler_free(a);
    si_sampler_free(b);
    si_sampler_free(c);
}
END_TEST

/* Empirical frequencies match softmax(l / T): chi-square over 8 bins with
 * 7 degrees of freedom; 30 is beyond the 99.99th percentile (fixed seeds,
 * so this is deterministic, not flaky). */
START_TEST(test_frequencies)
{
    float l[8] = { 0.0f, 0.5f, 1.0f, 1.5f, -0.5f, 2.0f, 0.25f, -1.0f };
    const float temps[3] = { 0.7f, 1.0f, 1.8f };
    for (int t = 0; t < 3; t++) {
        si_sampler_params p = plain();
        p.temperature = temps[t];
        p.seed = 1000 + (uint64_t)t;
        si_sampler *s = mk(&p, 8);
        double w[8], z = 0.0;
        for (int i = 0; i < 8; i++)
            z += w[i] = exp(l[i] / temps[t]);
        int cnt[8] = { 0 }, fails = 0;
        const int N = 40000;
        for (int i = 0; i < N; i++) {
            int32_t id = -1;
            fails += si_sampler_sample(s, l, &id, NULL) != SI_OK || id < 0 || id >= 8;
            cnt[id >= 0 && id < 8 ? id : 0]++;
        }
        ck_assert_int_eq(fails, 0);
        double chi2 = 0.0;
        for (int i = 0; i < 8; i++) {
            double e = N * w[i] / z;
            chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
        }
        ck_assert_msg(chi2 < 30.0, "T %g: chi-square %g", (double)temps[t], chi2);
        si_sampler_free(s);
    }
}
END_TEST

/* ---- a full-sort reference on a big vocabulary ---------------------------- */

typedef struct ref_c {
    float l;
    int   id;
} ref_c;

static int ref_cmp(const void *pa, const void *pb)
{
    const ref_c *a = pa, *b = pb;
    if (a->l != b->l)
        return a->l > b->l ? -1 : 1;
    return a->id - b->id;
}

static void reference(const float *l, int n, int k, float top_p, float min_p, float temp, double *out)
{
    ref_c *c = malloc((size_t)n * sizeof *c);
    for (int i = 0; i < n; i++)
        c[i] = (ref_c){ l[i], i };
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    int m = (k > 0 && k < n) ? k : n;
    double z = 0.0;
    for (int i = 0; i < m; i++)
        z += exp((double)c[i].l - c[0].l);
    if (top_p < 1.0f) {
        double cum = 0.0;
        int j = 0;
        while (j < m) {
            cum += exp((double)c[j].l - c[0].l) / z;
            j++;
            if (cum >= top_p)
                break;
        }
        m = j;
    }
    if (min_p > 0.0f) {
        int j = 0;
        while (j < m && c[j].l >= c[0].l + logf(min_p))
            j++;
        m = j;
    }
    memset(out, 0, (size_t)n * sizeof *out);
    z = 0.0;
    for (int i = 0; i < m; i++)
        z += exp(((double)c[i].l - c[0].l) / temp);
    for (int i = 0; i < m; i++)
        out[c[i].id] = exp(((double)c[i].l - c[0].l) / temp) / z;
    free(c);
}

START_TEST(test_big_vocab)
{
    enum { N = 248320 };
    float *l = malloc(N * sizeof *l), *pr = malloc(N * sizeof *pr);
    double *ref = malloc(N * sizeof *ref);
    uint64_t x = 99;
    for (int i = 0; i < N; i++) {   /* a peaked, logit-like spread with ties */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(x >> 11) / 9007199254740992.0;
        l[i] = (float)(12.0 * pow(u, 8.0)) - 4.0f;
        if (i % 1000 == 0)
            l[i] = l[i - (i > 0)];
    }
    static const struct { int k; float p, mp, t; } cases[] = {
        { 20, 0.95f, 0.0f, 1.0f },   /* the recommended Qwen setting */
        { 0, 0.9f, 0.0f, 0.7f },     /* top-p alone: the heap path */
        { 0, 0.5f, 0.05f, 1.0f },
        { 0, 1.0f, 0.1f, 1.3f },     /* min-p alone, unsorted */
        { 40, 1.0f, 0.0f, 0.8f },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        si_sampler_params p = plain();
        p.top_k = cases[c].k;
        p.top_p = cases[c].p;
        p.min_p = cases[c].mp;
        p.temperature = cases[c].t;
        si_sampler *s = mk(&p, N);
        ck_assert_int_eq(si_sampler_dist(s, l, pr, NULL), SI_OK);
        reference(l, N, cases[c].k, cases[c].p, cases[c].mp, cases[c].t, ref);
        /* Compared without an assertion per token (Check records each). */
        int kept = 0, bad = -1;
        for (int i = 0; i < N; i++) {
            if ((pr[i] > 0.0f) != (ref[i] > 0.0) || fabs(pr[i] - ref[i]) > 1e-5)
                bad = bad < 0 ? i : bad;
            kept += pr[i] > 0.0f;
        }
        ck_assert_msg(bad < 0, "case %zu: token %d: %g vs reference %g", c, bad,
                      bad < 0 ? 0.0 : (double)pr[bad], bad < 0 ? 0.0 : ref[bad]);
        ck_assert_int_gt(kept, 1);
        for (int i = 0; i < 200; i++) {
            int32_t id = draw(s, l);
            ck_assert(ref[id] > 0.0);
        }
        si_sampler_free(s);
    }
    free(l);
    free(pr);
    free(ref);
}
END_TEST

START_TEST(test_params)
{
    si_sampler_params p = plain();
    si_sampler *s;
    si_err err;
    ck_assert_int_eq(si_sampler_new(&p, 0, &s, &err), SI_EINVAL);
    p.top_p = 1.5f;
    ck_assert_int_eq(si_sampler_new(&p, 10, &s, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "top_p"));
    p = plain();
    p.min_p = -0.1f;
    ck_assert_int_eq(si_sampler_new(&p, 10, &s, &err), SI_EINVAL);
    p = plain();
    p.repeat_penalty = 0.0f;
    ck_assert_int_eq(si_sampler_new(&p, 10, &s, &err), SI_EINVAL);
    p = plain();
    p.temperature = INFINITY;
    ck_assert_int_eq(si_sampler_new(&p, 10, &s, &err), SI_EINVAL);
    p = plain();
    p.penalty_last_n = -1;
    ck_assert_int_eq(si_sampler_new(&p, 10, &s, &err), SI_EINVAL);
    si_sampler_default_params(&p);
    ck_assert(p.temperature == 1.0f && p.top_k == 20 && p.top_p == 0.95f);
}
END_TEST

static Suite *sample_suite(void)
{
    Suite *s = suite_create("sample");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_greedy);
    tcase_add_test(tc, test_top_k);
    tcase_add_test(tc, test_top_p);
    tcase_add_test(tc, test_min_p);
    tcase_add_test(tc, test_temperature);
    tcase_add_test(tc, test_penalties);
    tcase_add_test(tc, test_seed);
    tcase_add_test(tc, test_frequencies);
    tcase_add_test(tc, test_big_vocab);
    tcase_add_test(tc, test_params);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sample_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
