/* tests/cpu/check_cpu_topk.c — the cpu backend's SI_OP_TOPK against a
 * brute-force reference (NaN as -inf, the penalties, a full sort by value
 * then id), bit for bit: values and ids.  Rows with ties, NaN, -inf and
 * fewer finite logits than k; strided rows; per-row penalty lists; the
 * argument checks.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"

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

static void ref_row(const float *row, int64_t V, const si_topk_params *p, int64_t r, float *vals, int32_t *ids)
{
    ent *e = malloc((size_t)V * sizeof *e);
    for (int64_t i = 0; i < V; i++)
        e[i] = (ent){ isnan(row[i]) ? -INFINITY : row[i], (int32_t)i };
    if (p->pen_off != NULL)
        for (int32_t j = p->pen_off[r]; j < p->pen_off[r + 1]; j++) {
            float l = e[p->pen_id[j]].v;
            if (l == -INFINITY)
                continue;
            l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
            float sub = (float)p->pen_count[j] * p->frequency_penalty;
            sub = sub + p->presence_penalty;
            l = l - sub;
            e[p->pen_id[j]].v = isnan(l) ? -INFINITY : l;
        }
    qsort(e, (size_t)V, sizeof *e, ent_cmp);
    for (uint32_t i = 0; i < p->k; i++) {
        vals[i] = e[i].v;
        ids[i] = e[i].id;
    }
    free(e);
}

/* style 0 smooth, 1 coarse ties, 2 mostly -inf/NaN */
static void fill_row(float *x, int64_t V, int style)
{
    for (int64_t i = 0; i < V; i++) {
        double u = ct_uniform(0, 1);
        float v = (float)ct_uniform(-8, 8);
        if (style == 1)
            v = floorf(v);
        if (style == 2 && u < 0.95)
            v = u < 0.5 ? -INFINITY : NAN;
        else if (u < 0.01)
            v = NAN;
        x[i] = v;
    }
}

static void topk_case(ct_backend *c, int64_t V, int64_t n, uint32_t k, int style, bool pen, int64_t pad)
{
    float *x = malloc((size_t)(V * n) * sizeof *x);
    for (int64_t r = 0; r < n; r++)
        fill_row(x + r * V, V, style);
    int32_t *off = calloc((size_t)n + 1, sizeof *off), *pid = malloc(64 * (size_t)n * sizeof *pid);
    int32_t *pcnt = malloc(64 * (size_t)n * sizeof *pcnt);
    int32_t np = 0;
    for (int64_t r = 0; r < n && pen; r++) {
        off[r] = np;
        int m = (int)ct_uniform(0, V < 40 ? (double)V : 40.0);
        for (int i = 0; i < m; i++) {   /* distinct ids: a stride through the row */
            pid[np] = (int32_t)((i * 7919 + r * 13) % V);
            bool dup = false;
            for (int32_t j = off[r]; j < np; j++)
                dup |= pid[j] == pid[np];
            if (dup)
                continue;
            pcnt[np++] = 1 + (int32_t)ct_uniform(0, 5);
        }
    }
    off[n] = np;
    si_tensor src = ct_f32(c, x, V, n, V + pad), dst = ct_f32(c, NULL, 2 * (int64_t)k, n, 2 * (int64_t)k + pad);
    si_op op = { .kind = SI_OP_TOPK, .dst = dst, .src = { &src } };
    op.p.topk = (si_topk_params){ .k = k, .repeat_penalty = 1.3f, .frequency_penalty = 0.3f,
                                  .presence_penalty = 0.7f, .pen_off = pen ? off : NULL, .pen_id = pid,
                                  .pen_count = pcnt };
    si_err err = { "" };
    ck_assert(c->ops->supports(c->b, &op));
    ct_poison(c, &dst);
    ck_assert_msg(ct_exec(c, &op, &err) == SI_OK, "%s", err.msg);
    float *got = malloc((size_t)(2 * k * n) * sizeof *got), *wv = malloc(k * sizeof *wv);
    int32_t *wi = malloc(k * sizeof *wi);
    ct_get(c, &dst, got);
    for (int64_t r = 0; r < n; r++) {
        ref_row(x + r * V, V, &op.p.topk, r, wv, wi);
        const float *g = got + r * 2 * k;
        for (uint32_t i = 0; i < k; i++) {
            int32_t gid;
            memcpy(&gid, &g[k + i], sizeof gid);
            ck_assert_msg(gid == wi[i] && memcmp(&g[i], &wv[i], sizeof(float)) == 0,
                          "V %lld k %u style %d pen %d row %lld entry %u: got (%g, %d), want (%g, %d)",
                          (long long)V, k, style, pen, (long long)r, i, (double)g[i], gid, (double)wv[i], wi[i]);
        }
    }
    free(x);
    free(off);
    free(pid);
    free(pcnt);
    free(got);
    free(wv);
    free(wi);
}

START_TEST(test_topk)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    static const int64_t vs[] = { 1, 7, 300, 5000 };
    static const uint32_t ks[] = { 1, 2, 21, 256 };
    for (size_t vi = 0; vi < 4; vi++)
        for (size_t ki = 0; ki < 4; ki++) {
            if ((int64_t)ks[ki] > vs[vi])
                continue;
            for (int style = 0; style < 3; style++)
                for (int pen = 0; pen < 2; pen++)
                    topk_case(&c, vs[vi], 3, ks[ki], style, pen, style);
        }
    ct_close(&c);
}
END_TEST

/* A Qwen3.5-sized row, batch of decode rows. */
START_TEST(test_topk_big)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    topk_case(&c, 248320, 4, 21, 0, true, 0);
    topk_case(&c, 248320, 2, 1, 1, false, 0);
    ct_close(&c);
}
END_TEST

START_TEST(test_topk_checks)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    float x[10 * 2];
    ct_fill(x, 20, -1, 1);
    si_tensor src = ct_f32(&c, x, 10, 2, 0), dst = ct_f32(&c, NULL, 8, 2, 0);
    int32_t off[3] = { 0, 1, 2 }, pid[2] = { 3, 10 }, pcnt[2] = { 1, 1 };
    si_op op = { .kind = SI_OP_TOPK, .dst = dst, .src = { &src } };
    op.p.topk = (si_topk_params){ .k = 4, .repeat_penalty = 1.0f };
    si_err err = { "" };
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    op.p.topk.k = 3;   /* dst is [8, 2], not [6, 2] */
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_EINVAL);
    ck_assert(!c.ops->supports(c.b, &op));
    op.p.topk.k = 0;
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_EINVAL);
    si_tensor big = ct_f32(&c, NULL, 2 * 11, 2, 0);
    op.dst = big;
    op.p.topk.k = 11;  /* more than V */
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_EINVAL);
    op.dst = dst;
    op.p.topk.k = 4;
    op.p.topk.pen_off = off;
    op.p.topk.pen_id = pid;
    op.p.topk.pen_count = pcnt;
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_ERANGE);   /* id 10 of V 10 */
    ck_assert_msg(strstr(err.msg, "TOPK") != NULL, "%s", err.msg);
    pid[1] = 9;
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    op.p.topk.repeat_penalty = 0.0f;
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_EINVAL);
    ct_close(&c);
}
END_TEST

int main(void)
{
    ct_seed();
    Suite *s = suite_create("cpu_topk");
    TCase *tc = tcase_create("topk");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_topk);
    tcase_add_test(tc, test_topk_big);
    tcase_add_test(tc, test_topk_checks);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
