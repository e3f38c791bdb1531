/* core/generate.h — prompt processing and token generation for one
 * sequence of an engine: chunked batched prefill, then one token per step,
 * sampling on the host.  The CLI's run/chat and later the server use it.
 * Decode steps sample from the backend's top-K of the logits row
 * (si_engine_forward_topk, si_sampler_sample_topk) when the sampler's
 * settings allow it exactly and the backend has the op: only K values and
 * ids cross to the host instead of the whole row; same tokens. */
#ifndef SI_CORE_GENERATE_H
#define SI_CORE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "sample.h"
#include "tokenizer.h"

typedef struct si_gen_stats {
    uint32_t n_prompt, n_gen;
    double   prompt_s, gen_s;       /* wall seconds of prefill and of decoding */
    bool     stopped_eog;           /* ended on an end-of-generation token     */
    bool     stopped;               /* ended on a token: end of generation or
                                     * the callback                            */
    bool     stop_fed;              /* that token is in the sequence too       */
    int32_t  last;                  /* the last token generated; -1: none      */
} si_gen_stats;

/* Called with every generated token, before it is fed back.  Return
 * non-zero to stop. */
typedef int (*si_gen_token_cb)(void *ctx, int32_t id);

typedef struct si_gen_opts {
    uint32_t seq;                  /* sequence slot                          */
    uint32_t pos0;                 /* position of prompt[0] (0 = fresh)      */
    uint32_t n_batch;              /* prefill chunk, tokens; 0 = 512          */
    int32_t  n_predict;            /* < 0: until EOG or the context is full  */
    bool     stop_at_eog;
    /* Decode steps download every logits row even where the backend could
     * pick the token (SI_OP_TOPK); otherwise [runtime] device_sampling
     * decides.  The tokens are the same either way. */
    bool     full_logits;
    /* Decode without penalties from the backend's top-K may queue each
     * step before the previous one's token is read (greedy: fed on the
     * backend) or drawn (sampled: posted, si_engine_topk_post) ([runtime]
     * decode_ahead, si_engine_decode_ahead).  The tokens are the same; a run that stops
     * on a token (end of generation, the callback) may then have fed it
     * already (stats->stop_fed; *pos_out counts it). */
    bool     ahead;
    /* The token a run stops on is fed too whichever way it ran (unless the
     * context is full): the sequence then holds every generated token,
     * the same with or without ahead (chat goes on from it). */
    bool     feed_stop;
} si_gen_opts;

/* Feeds prompt[0, n_prompt) then samples up to n_predict tokens with s.
 * The prompt and each generated token are passed to si_sampler_accept.
 * *pos_out (may be NULL) receives the position after the last token fed.
 * A prompt that does not fit the context (pos0 + n_prompt > n_ctx) is
 * refused with SI_ERANGE before anything runs. */
int si_generate(si_engine *e, const si_tokenizer *tok, si_sampler *s, const si_gen_opts *o,
                const int32_t *prompt, uint32_t n_prompt, si_gen_token_cb cb, void *ctx,
                uint32_t *pos_out, si_gen_stats *stats, si_err *err);

/* Runs tokens [0, n) of one sequence through the model in chunks of
 * n_batch starting at pos0; writes the logits of tokens whose want[i] is
 * set (all when want is NULL) in order into logits (caller-owned,
 * count * n_vocab floats); no logits at all when logits is NULL. */
int si_prefill(si_engine *e, uint32_t seq, uint32_t pos0, const int32_t *tokens, uint32_t n,
               uint32_t n_batch, const uint8_t *want, float *logits, si_err *err);

double si_now_seconds(void);

#endif /* SI_CORE_GENERATE_H */
