/* tests/models/ahead_cmp.h — decode ahead (si_model_ops.topk_submit /
 * topk_collect / topk_post) against forward_topk one step at a time, on
 * any backend:
 * check_models (cpu) and check_cuda_graph (cuda_sm120, where the copies
 * are truly in flight and the steps are graph replays). */
#ifndef SI_TESTS_AHEAD_CMP_H
#define SI_TESTS_AHEAD_CMP_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/plugin.h>

/* Two models of the same file, the n (<= 8) sequences seq[] of both at
 * positions pos0[] (the same tokens behind them): `a` decodes `steps`
 * steps of all of them with forward_topk (k, no penalties), feeding each
 * sequence its pick ids[i*k]; `b` the same steps with topk_submit, the
 * first with tokens tok0[], every later one queued before the previous
 * is collected: SI_SUBMIT_FEED (post false), or SI_SUBMIT_POST with the
 * pick posted after the collect (post true; then a sequence's pick is the
 * id at (step + i) % k of its row, a stand-in for a draw that is not
 * always the best).  Every value and id of every step must be the same
 * bits (ck_assert).  Returns how many picks changed from one step to the
 * next (a test that feeds nothing would see the same pick throughout). */
uint32_t si_ahead_compare(const struct si_model_ops *mops, si_model *a, si_model *b, uint32_t n, const int32_t *seq,
                          const int32_t *pos0, const int32_t *tok0, uint32_t steps, uint32_t k, bool post);

#endif
