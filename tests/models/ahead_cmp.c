/* tests/models/ahead_cmp.c — see ahead_cmp.h. */
#include <check.h>
#include <string.h>

#include "ahead_cmp.h"

#define MAX_N 8
#define MAX_K 16

uint32_t si_ahead_compare(const struct si_model_ops *mops, si_model *a, si_model *b, uint32_t n, const int32_t *seq,
                          const int32_t *pos0, const int32_t *tok0, uint32_t steps, uint32_t k, bool post)
{
    ck_assert(n >= 1 && n <= MAX_N && k >= 1 && k <= MAX_K && steps >= 2);
    ck_assert(!post || SI_HAS_MEMBER(mops, struct si_model_ops, topk_post));
    const uint32_t next = post ? SI_SUBMIT_POST : SI_SUBMIT_FEED;
    const si_topk_params tp = { .k = k, .repeat_penalty = 1.0f };
    uint8_t want[MAX_N];
    int32_t ta[MAX_N], tb[MAX_N], pa[MAX_N], pb[MAX_N], last[MAX_N];
    float va[MAX_N * MAX_K], vb[MAX_N * MAX_K];
    int32_t ia[MAX_N * MAX_K], ib[MAX_N * MAX_K];
    for (uint32_t i = 0; i < n; i++) {
        want[i] = 1;
        ta[i] = tb[i] = tok0[i];
        pa[i] = pb[i] = pos0[i];
        last[i] = -1;
    }
    si_err err = { { 0 } };
    si_batch ba = { .n = n, .tokens = ta, .pos = pa, .seq = seq, .want_logits = want };
    si_batch bb = { .n = n, .tokens = tb, .pos = pb, .seq = seq, .want_logits = want };
    ck_assert_msg(mops->topk_submit(b, &bb, &tp, 0, &err) == SI_OK, "first submit: %s", err.msg);
    uint32_t changes = 0;
    for (uint32_t s = 0; s < steps; s++) {
        if (s + 1 < steps) {
            for (uint32_t i = 0; i < n; i++) {
                pb[i]++;
                tb[i] = -1;   /* (not read: the token is the step before's pick) */
            }
            ck_assert_msg(mops->topk_submit(b, &bb, &tp, next, &err) == SI_OK, "submit %u: %s", s + 1, err.msg);
        }
        ck_assert_msg(mops->forward_topk(a, &ba, &tp, va, ia, &err) == SI_OK, "forward_topk %u: %s", s, err.msg);
        ck_assert_msg(mops->topk_collect(b, vb, ib, &err) == SI_OK, "collect %u: %s", s, err.msg);
        ck_assert_msg(memcmp(va, vb, n * k * sizeof *va) == 0 && memcmp(ia, ib, n * k * sizeof *ia) == 0,
                      "step %u (sequence %d at %d): one at a time %g/%d, ahead %g/%d", s, seq[0], pa[0],
                      (double)va[0], ia[0], (double)vb[0], ib[0]);
        int32_t pick[MAX_N];
        for (uint32_t i = 0; i < n; i++) {
            pick[i] = ia[i * k + (post ? (s + i) % k : 0)];
            changes += s > 0 && pick[i] != last[i];
            last[i] = ta[i] = pick[i];
            pa[i]++;
        }
        if (post && s + 1 < steps)
            ck_assert_msg(mops->topk_post(b, pick, n, &err) == SI_OK, "post %u: %s", s + 1, err.msg);
    }
    return changes;
}
