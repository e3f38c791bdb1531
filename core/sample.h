/* core/sample.h — choosing the next token from a logits vector.
 *
 * The stages run in llama.cpp's default order, each on what the previous
 * one left:
 *   1. penalties over the last penalty_last_n accepted tokens (llama.cpp
 *      semantics, once per distinct token in the window, count = its
 *      occurrences there):
 *        repetition: logit > 0 ? logit / repeat_penalty : logit * repeat_penalty
 *        then        logit -= count * frequency_penalty + presence_penalty
 *   2. temperature <= 0: greedy, the largest logit (lowest id on ties); done.
 *   3. top-k: keep the k largest logits.
 *   4. top-p: keep the smallest set of the largest that holds at least p of
 *      the probability (softmax over what is left, before temperature).
 *   5. min-p: keep tokens whose probability is >= min_p x the largest one.
 *   6. temperature: logits / temperature, softmax, one draw.
 * Note that top-p and min-p see the untempered distribution, as in
 * llama.cpp (Hugging Face applies the temperature first).
 *
 * Cost per token is O(n_vocab) plus O(n log k) for top-k; top-p without
 * top-k pops a heap only until the mass is reached, never sorting the whole
 * vocabulary.  The sampler owns its random state (xoshiro256**): same seed
 * and same calls, same tokens.  One sampler per sequence; not thread-safe.
 */
#ifndef SI_CORE_SAMPLE_H
#define SI_CORE_SAMPLE_H

#include <stdint.h>

#include <sparkinfer/status.h>

typedef struct si_sampler_params {
    float    temperature;        /* <= 0: greedy                       */
    int32_t  top_k;              /* <= 0: off                          */
    float    top_p;              /* [0, 1]; 1: off                     */
    float    min_p;              /* [0, 1]; 0: off                     */
    float    repeat_penalty;     /* > 0; 1: off                        */
    float    presence_penalty;   /* 0: off                             */
    float    frequency_penalty;  /* 0: off                             */
    int32_t  penalty_last_n;     /* window of accepted tokens; 0: off  */
    uint64_t seed;
} si_sampler_params;

#define SI_SAMPLER_MAX_WINDOW (1 << 20)

/* Qwen3.5/3.6 recommendation (spec §5.4): temperature 1.0, top_k 20,
 * top_p 0.95; min_p 0, penalties off (window 64 when turned on), seed 0. */
void si_sampler_default_params(si_sampler_params *p);

typedef struct si_sampler si_sampler;

/* SI_EINVAL naming the parameter for out-of-range values. */
int  si_sampler_new(const si_sampler_params *p, uint32_t n_vocab, si_sampler **out, si_err *err);
void si_sampler_free(si_sampler *s);   /* NULL-safe */

/* Draws a token from logits[n_vocab] (not modified; NaN counts as -inf).
 * Does not add it to the penalty window: call si_sampler_accept.
 * SI_EINVAL when no logit is finite. */
int  si_sampler_sample(si_sampler *s, const float *logits, int32_t *out, si_err *err);

/* The distribution si_sampler_sample draws from, written to probs[n_vocab]
 * (0 for removed tokens; greedy gives 1 at the argmax).  No random draw. */
int  si_sampler_dist(si_sampler *s, const float *logits, float *probs, si_err *err);

/* Adds a token (prompt or generated) to the penalty window.  SI_ERANGE for
 * an id outside the vocabulary. */
int  si_sampler_accept(si_sampler *s, int32_t id);

/* ---- The top-K path: sampling from a device-side SI_OP_TOPK -------------
 * The backend applies the penalties and keeps the K best logits of the
 * row (best first, lower id on ties); the host gets only those.  With the
 * K below, si_sampler_sample_topk returns exactly the token, and advances
 * the random state exactly as, si_sampler_sample on the full row would. */

/* The K to ask for: 1 when greedy, top_k + 1 with top_k on (the extra one
 * tells whether more than top_k logits are finite), otherwise the whole
 * vocabulary; 0 when that exceeds max_k (use the full row instead). */
uint32_t si_sampler_topk_k(const si_sampler *s, uint32_t max_k);

/* Most penalty pairs si_sampler_penalties writes (0 with penalties off). */
uint32_t si_sampler_penalty_cap(const si_sampler *s);

/* The penalty window now, as distinct ids and their counts (the op's
 * pen_id / pen_count; si_sampler_penalty_cap entries each), and pen =
 * {repeat, frequency, presence}.  Returns the pair count. */
uint32_t si_sampler_penalties(si_sampler *s, int32_t *ids, int32_t *counts, float pen[3]);

/* Draws from vals[k] / ids[k], the penalised top-K of one row (NaN as -inf).
 * SI_EUNSUPPORTED when k cannot decide it (k below si_sampler_topk_k's),
 * SI_EINVAL when no logit is finite. */
int  si_sampler_sample_topk(si_sampler *s, const float *vals, const int32_t *ids, uint32_t k, int32_t *out,
                            si_err *err);

/* Empties the window and restarts the random sequence from the seed. */
void si_sampler_reset(si_sampler *s);

#endif /* SI_CORE_SAMPLE_H */
