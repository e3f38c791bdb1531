/* tests/tokenizer/check_sample_topk.c — the sampler's top-K path
 * (si_sampler_sample_topk) against si_sampler_sample on the full row: the
 * same token and the same random state, call after call, over random rows
 * (ties, NaN, -inf, rows with fewer finite logits than K), seeds and
 * parameter sets, penalties included.  The top-K input is made here by a
 * brute-force reference of SI_OP_TOPK (penalties, full sort), written from
 * plugin.h independently of the backends.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

typedef struct ent {
    float   v;
    int32_t id;
} ent;

static int ent_cmp(const void *a, const void *b)
{
    const ent *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* SI_OP_TOPK on one row, the plain way. */
static void ref_topk(const float *row, uint32_t V, const int32_t *pid, const int32_t *pcnt, uint32_t np,
                     const float pen[3], uint32_t k, float *vals, int32_t *ids)
{
    ent *e = malloc(V * sizeof *e);
    for (uint32_t i = 0; i < V; i++)
        e[i] = (ent){ isnan(row[i]) ? -INFINITY : row[i], (int32_t)i };
    for (uint32_t j = 0; j < np; j++) {
        float l = e[pid[j]].v;
        if (l == -INFINITY)
            continue;
        l = l <= 0.0f ? l * pen[0] : l / pen[0];
        float sub = (float)pcnt[j] * pen[1];
        sub = sub + pen[2];
        l = l - sub;
        e[pid[j]].v = isnan(l) ? -INFINITY : l;
    }
    qsort(e, V, sizeof *e, ent_cmp);
    for (uint32_t i = 0; i < k; i++) {
        vals[i] = e[i].v;
        ids[i] = e[i].id;
    }
    free(e);
}

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) * (1.0 / 9007199254740992.0);
}

/* A row: `style` 0 smooth, 1 coarse (many ties), 2 mostly -inf/NaN. */
static void rand_row(float *l, uint32_t V, int style)
{
    for (uint32_t i = 0; i < V; i++) {
        double u = urand();
        float x = (float)(urand() * 12.0 - 6.0);
        if (style == 1)
            x = floorf(x * 2.0f) * 0.5f;
        if (style == 2 && u < 0.9)
            x = urand() < 0.5 ? -INFINITY : NAN;
        else if (u < 0.02)
            x = NAN;
        else if (u < 0.04)
            x = -INFINITY;
        l[i] = x;
    }
}

/* Runs `steps` draws with both paths on the same rows; returns mismatches. */
static int compare(const si_sampler_params *p, uint32_t V, int style, int steps)
{
    si_sampler *a = NULL, *b = NULL;
    si_err err;
    ck_assert_msg(si_sampler_new(p, V, &a, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(si_sampler_new(p, V, &b, &err) == SI_OK, "%s", err.msg);
    uint32_t k = si_sampler_topk_k(b, 1u << 30);
    ck_assert_uint_ge(k, 1);
    ck_assert_uint_le(k, V);
    uint32_t cap = si_sampler_penalty_cap(b);
    int32_t *pid = malloc((cap + 1) * sizeof *pid), *pcnt = malloc((cap + 1) * sizeof *pcnt);
    float *row = malloc(V * sizeof *row), *vals = malloc(k * sizeof *vals);
    int32_t *ids = malloc(k * sizeof *ids);
    int bad = 0;
    for (int t = 0; t < 8; t++) {   /* a prompt for the penalty window */
        int32_t id = (int32_t)(urand() * V);
        si_sampler_accept(a, id);
        si_sampler_accept(b, id);
    }
    for (int step = 0; step < steps; step++) {
        rand_row(row, V, style);
        float pen[3];
        uint32_t np = si_sampler_penalties(b, pid, pcnt, pen);
        ck_assert_uint_le(np, cap);
        ref_topk(row, V, pid, pcnt, np, pen, k, vals, ids);
        int32_t ta = -1, tb = -1;
        si_err ea, eb;
        int ra = si_sampler_sample(a, row, &ta, &ea);
        int rb = si_sampler_sample_topk(b, vals, ids, k, &tb, &eb);
        if (ra != rb || ta != tb) {
            if (bad++ < 5)
                fprintf(stderr, "V %u style %d step %d k %u (T %g top_k %d top_p %g min_p %g pen %g/%g/%g): "
                        "full %d -> %d, top-K %d -> %d (%s)\n", V, style, step, k, (double)p->temperature,
                        p->top_k, (double)p->top_p, (double)p->min_p, (double)p->repeat_penalty,
                        (double)p->frequency_penalty, (double)p->presence_penalty, ra, ta, rb, tb,
                        rb != SI_OK ? eb.msg : "");
        }
        if (ra == SI_OK) {
            si_sampler_accept(a, ta);
            si_sampler_accept(b, ta);
        }
    }
    free(row);
    free(vals);
    free(ids);
    free(pid);
    free(pcnt);
    si_sampler_free(a);
    si_sampler_free(b);
    return bad;
}

START_TEST(test_topk_equals_full)
{
    static const float temps[] = { 0.0f, 0.7f, 1.0f, 1.6f };
    static const int32_t topks[] = { 0, 1, 2, 5, 20, 64 };
    static const float topps[] = { 1.0f, 0.9f, 0.4f };
    static const float minps[] = { 0.0f, 0.05f };
    static const uint32_t vocabs[] = { 7, 60, 1500 };
    int bad = 0, runs = 0;
    uint64_t seed = 1;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++)
        for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
            for (size_t ki = 0; ki < sizeof topks / sizeof *topks; ki++)
                for (size_t pi = 0; pi < sizeof topps / sizeof *topps; pi++)
                    for (size_t mi = 0; mi < sizeof minps / sizeof *minps; mi++)
                        for (int pen = 0; pen < 2; pen++)
                            for (int style = 0; style < 3; style++) {
                                si_sampler_params p;
                                si_sampler_default_params(&p);
                                p.temperature = temps[ti];
                                p.top_k = topks[ki];
                                p.top_p = topps[pi];
                                p.min_p = minps[mi];
                                p.seed = seed++;
                                if (pen) {
                                    p.repeat_penalty = 1.3f;
                                    p.frequency_penalty = 0.25f;
                                    p.presence_penalty = 0.5f;
                                    p.penalty_last_n = 16;
                                }
                                bad += compare(&p, vocabs[vi], style, 12);
                                runs++;
                            }
    ck_assert_msg(bad == 0, "%d mismatches over %d parameter sets", bad, runs);
}
END_TEST

/* The K each setting needs, and the refusal below it. */
START_TEST(test_topk_k)
{
    si_sampler_params p;
    si_sampler_default_params(&p);
    si_sampler *s = NULL;
    si_err err;
    p.temperature = 0.0f;
    ck_assert_int_eq(si_sampler_new(&p, 1000, &s, &err), SI_OK);
    ck_assert_uint_eq(si_sampler_topk_k(s, 256), 1);
    si_sampler_free(s);
    p.temperature = 1.0f;
    p.top_k = 20;
    ck_assert_int_eq(si_sampler_new(&p, 1000, &s, &err), SI_OK);
    ck_assert_uint_eq(si_sampler_topk_k(s, 256), 21);
    ck_assert_uint_eq(si_sampler_topk_k(s, 20), 0);
    /* K = top_k with every entry finite cannot tell the order: refused. */
    float v[20];
    int32_t id[20], out;
    for (int i = 0; i < 20; i++) {
        v[i] = (float)(20 - i);
        id[i] = i;
    }
    ck_assert_int_eq(si_sampler_sample_topk(s, v, id, 20, &out, &err), SI_EUNSUPPORTED);
    v[19] = -INFINITY;   /* now all finite ones are known */
    ck_assert_int_eq(si_sampler_sample_topk(s, v, id, 20, &out, &err), SI_OK);
    for (int i = 0; i < 20; i++)
        v[i] = -INFINITY;
    ck_assert_int_eq(si_sampler_sample_topk(s, v, id, 20, &out, &err), SI_EINVAL);
    si_sampler_free(s);
    p.top_k = 0;   /* top-p alone needs the whole row */
    ck_assert_int_eq(si_sampler_new(&p, 1000, &s, &err), SI_OK);
    ck_assert_uint_eq(si_sampler_topk_k(s, 256), 0);
    ck_assert_uint_eq(si_sampler_topk_k(s, 1000), 1000);
    si_sampler_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sample_topk");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_topk_equals_full);
    tcase_add_test(tc, test_topk_k);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
