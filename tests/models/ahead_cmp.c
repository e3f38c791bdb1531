/* tests/models/ahead_cmp.c — see ahead_cmp.h. */
#include <check.h>
#include <string.h>

#include "ahead_cmp.h"

uint32_t si_ahead_compare(const struct si_model_ops *mops, si_model *a, si_model *b, int32_t seq, int32_t pos0,
                          int32_t tok0, uint32_t steps, uint32_t k)
{
    ck_assert(k >= 1 && k <= 16 && steps >= 2);
    const si_topk_params tp = { .k = k, .repeat_penalty = 1.0f };
    const uint8_t want = 1;
    si_err err = { { 0 } };
    float va[16], vb[16];
    int32_t ia[16], ib[16];
    int32_t ta = tok0, pa = pos0, pb = pos0, tb = tok0;
    si_batch ba = { .n = 1, .tokens = &ta, .pos = &pa, .seq = &seq, .want_logits = &want };
    si_batch bb = { .n = 1, .tokens = &tb, .pos = &pb, .seq = &seq, .want_logits = &want };
    ck_assert_msg(mops->topk_submit(b, &bb, &tp, 0, &err) == SI_OK, "first submit: %s", err.msg);
    uint32_t changes = 0;
    int32_t last = -1;
    for (uint32_t s = 0; s < steps; s++) {
        if (s + 1 < steps) {
            pb++;
            tb = -1;   /* (not read: the token is the step before's pick) */
            ck_assert_msg(mops->topk_submit(b, &bb, &tp, SI_SUBMIT_FEED, &err) == SI_OK, "submit %u: %s", s + 1,
                          err.msg);
        }
        ck_assert_msg(mops->forward_topk(a, &ba, &tp, va, ia, &err) == SI_OK, "forward_topk %u: %s", s, err.msg);
        ck_assert_msg(mops->topk_collect(b, vb, ib, &err) == SI_OK, "collect %u: %s", s, err.msg);
        ck_assert_msg(memcmp(va, vb, k * sizeof *va) == 0 && memcmp(ia, ib, k * sizeof *ia) == 0,
                      "step %u (position %d): one at a time %g/%d, ahead %g/%d", s, pa, (double)va[0], ia[0],
                      (double)vb[0], ib[0]);
        changes += s > 0 && ia[0] != last;
        last = ia[0];
        ta = ia[0];
        pa++;
    }
    return changes;
}
