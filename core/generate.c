/* core/generate.c — chunked prefill and the sampling loop (generate.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "generate.h"

double si_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int si_prefill(si_engine *e, uint32_t seq, uint32_t pos0, const int32_t *tokens, uint32_t n,
               uint32_t n_batch, const uint8_t *want, float *logits, si_err *err)
{
    si_model_info info;
    si_engine_info(e, &info);
    if (n_batch == 0)
        n_batch = 512;
    if ((uint64_t)pos0 + n > info.n_ctx)
        return si_err_set(err, SI_ERANGE,
                          "%u tokens at position %u do not fit the context of %u tokens (raise [runtime] n_ctx)",
                          n, pos0, info.n_ctx);
    int32_t *pos = malloc(sizeof *pos * n_batch);
    int32_t *sq = malloc(sizeof *sq * n_batch);
    uint8_t *w = malloc(n_batch);
    if (pos == NULL || sq == NULL || w == NULL) {
        free(pos); free(sq); free(w);
        return si_err_set(err, SI_ENOMEM, "out of memory");
    }
    int rc = SI_OK;
    float *out = logits;
    for (uint32_t done = 0; done < n && rc == SI_OK;) {
        uint32_t m = n - done < n_batch ? n - done : n_batch;
        uint32_t n_want = 0;
        for (uint32_t i = 0; i < m; i++) {
            pos[i] = (int32_t)(pos0 + done + i);
            sq[i] = (int32_t)seq;
            w[i] = logits == NULL ? 0 : want ? want[done + i] : 1;
            n_want += w[i] != 0;
        }
        si_batch b = { .n = m, .tokens = tokens + done, .pos = pos, .seq = sq, .want_logits = w };
        rc = si_engine_forward(e, &b, out, err);
        if (out != NULL)
            out += (size_t)n_want * info.n_vocab;
        done += m;
    }
    free(pos);
    free(sq);
    free(w);
    return rc;
}

/* The top-K decode path: buffers sized once, and whether the last forward
 * left its result in vals/ids (true) or in the full logits row. */
typedef struct topk_path {
    uint32_t k;              /* 0: full logits */
    float   *vals;
    int32_t *ids, *pen_id, *pen_count;
    bool     have;
} topk_path;

static void topk_path_init(si_engine *e, si_sampler *s, const si_gen_opts *o, topk_path *t)
{
    memset(t, 0, sizeof *t);
    const si_host *h = si_engine_host(e);
    if (o->full_logits || !si_engine_device_sampling(e)) {
        h->log(h, SI_LOG_INFO, "core", "decode: full logits rows (device sampling off)");
        return;
    }
    t->k = si_sampler_topk_k(s, SI_TOPK_MAX);
    uint32_t cap = si_sampler_penalty_cap(s);
    if (t->k == 0) {
        h->log(h, SI_LOG_INFO, "core", "decode: full logits rows (the sampling settings need more than "
               "the top %d)", SI_TOPK_MAX);
        return;
    }
    h->log(h, SI_LOG_INFO, "core", "decode: sampling from the backend's top %u", t->k);
    t->vals = malloc(sizeof *t->vals * t->k);
    t->ids = malloc(sizeof *t->ids * t->k);
    t->pen_id = malloc(sizeof *t->pen_id * (cap + 1));
    t->pen_count = malloc(sizeof *t->pen_count * (cap + 1));
    if (t->vals == NULL || t->ids == NULL || t->pen_id == NULL || t->pen_count == NULL)
        t->k = 0;   /* out of memory for the fast path: the full one still works */
}

static void topk_path_free(topk_path *t)
{
    free(t->vals);
    free(t->ids);
    free(t->pen_id);
    free(t->pen_count);
}

/* One decode forward of token *id: through TOPK when the path is on (the
 * penalty window is the one the next draw sees: the token was accepted
 * already), else the full row; a backend without TOPK turns the path off
 * for good (it refuses before running anything). */
static int decode_forward(si_engine *e, si_sampler *s, topk_path *t, const si_batch *b, float *logits,
                          si_err *err)
{
    if (t->k > 0) {
        float pen[3];
        int32_t off[2] = { 0, 0 };
        off[1] = (int32_t)si_sampler_penalties(s, t->pen_id, t->pen_count, pen);
        si_topk_params tp = {
            .k = t->k, .repeat_penalty = pen[0], .frequency_penalty = pen[1], .presence_penalty = pen[2],
            .pen_off = off[1] > 0 ? off : NULL, .pen_id = t->pen_id, .pen_count = t->pen_count,
        };
        int rc = si_engine_forward_topk(e, b, &tp, t->vals, t->ids, err);
        if (rc != SI_EUNSUPPORTED) {
            t->have = rc == SI_OK;
            return rc;
        }
        const si_host *h = si_engine_host(e);
        h->log(h, SI_LOG_INFO, "core", "decode: full logits rows: %s", err != NULL ? err->msg : "no TOPK");
        t->k = 0;
    }
    t->have = false;
    return si_engine_forward(e, b, logits, err);
}

/* The decode step of token id at *pos (then advanced). */
static int forward_one(si_engine *e, si_sampler *s, topk_path *t, const si_gen_opts *o, int32_t id, uint32_t *pos,
                       float *logits, si_err *err)
{
    int32_t p = (int32_t)*pos, sq = (int32_t)o->seq;
    uint8_t w1 = 1;
    si_batch b = { .n = 1, .tokens = &id, .pos = &p, .seq = &sq, .want_logits = &w1 };
    int rc = decode_forward(e, s, t, &b, logits, err);
    (*pos)++;
    return rc;
}

/* What the decode loop does with a token just picked: count it, stop on
 * end of generation or at the callback's word (true), else go on. */
static bool took_token(const si_tokenizer *tok, si_sampler *s, const si_gen_opts *o, si_gen_token_cb cb, void *ctx,
                       int32_t id, si_gen_stats *stats)
{
    si_sampler_accept(s, id);
    stats->n_gen++;
    stats->last = id;
    if (o->stop_at_eog && tok != NULL && si_token_is_eog(tok, id))
        stats->stopped_eog = true;
    stats->stopped = stats->stopped_eog || (cb != NULL && cb(ctx, id) != 0);
    return stats->stopped;
}

/* Decode ahead (si_gen_opts.ahead; no penalties): while the step that
 * makes pick j runs, the step that feeds pick j is queued behind it, so
 * the GPU does not idle while the host reads a pick, samples, and plans
 * and launches the next step.  Greedy (k 1): the queued step takes pick j
 * on the backend, from the first step's TOPK slot (SI_SUBMIT_FEED).
 * Sampled (k > 1, post): it waits on the backend for the token the host
 * draws from step j's top-K and posts (SI_SUBMIT_POST), so only the read,
 * the draw and the post stand between two steps.  The steps and picks
 * are the loop's in si_generate, except that a pick the run stops on (end
 * of generation, the callback) was fed by one step more (stats->stop_fed),
 * which is collected and dropped.  *pos: the position after the last
 * token fed.  SI_EUNSUPPORTED when the model or backend refuses the first
 * submit (before anything ran): the first pick was taken, not fed
 * (*unfed). */
static int generate_ahead(si_engine *e, const si_tokenizer *tok, si_sampler *s, const si_gen_opts *o, uint32_t k,
                          uint32_t n_ctx, int32_t id, si_gen_token_cb cb, void *ctx, uint32_t *pos,
                          si_gen_stats *stats, int32_t *unfed, si_err *err)
{
    const si_topk_params tp = { .k = k, .repeat_penalty = 1.0f };
    const uint32_t next = k == 1 ? SI_SUBMIT_FEED : SI_SUBMIT_POST;
    const int32_t sq = (int32_t)o->seq;
    const uint8_t w1 = 1;
    float vals[SI_TOPK_MAX];
    int32_t ids[SI_TOPK_MAX];
    uint32_t queued = 0;
    bool owed = false;   /* a posted step waits for its token */
    int rc = SI_OK;
    if (took_token(tok, s, o, cb, ctx, id, stats) || *pos >= n_ctx)
        return SI_OK;
    int32_t p = (int32_t)*pos;
    si_batch b = { .n = 1, .tokens = &id, .pos = &p, .seq = &sq, .want_logits = &w1 };
    rc = si_engine_topk_submit(e, &b, &tp, 0, err);
    if (rc == SI_EUNSUPPORTED) {   /* (refused before running: the caller feeds it its way) */
        *unfed = id;
        return rc;
    }
    queued += rc == SI_OK;
    *pos += rc == SI_OK;
    while (rc == SI_OK && queued > 0) {
        /* the oldest queued step makes the next pick, if one is wanted;
         * the step feeding that pick is queued before it is read */
        if (o->n_predict >= 0 && stats->n_gen >= (uint32_t)o->n_predict)
            break;
        bool fed = false;   /* (the step feeding this pick queued) */
        if (*pos < n_ctx) {
            p = (int32_t)*pos;
            rc = si_engine_topk_submit(e, &b, &tp, next, err);
            if (rc != SI_OK)
                break;
            queued++;
            (*pos)++;
            fed = true;
            owed = next == SI_SUBMIT_POST;
        }
        rc = si_engine_topk_collect(e, vals, ids, err);
        queued--;
        if (rc == SI_OK)
            rc = si_sampler_sample_topk(s, vals, ids, k, &id, err);
        if (owed) {   /* (whatever happened: the queued step must not wait on) */
            const int32_t give = rc == SI_OK ? id : 0;
            rc = si_engine_topk_post_owed(e, &give, 1, rc, err);
            owed = false;
        }
        if (rc != SI_OK || took_token(tok, s, o, cb, ctx, id, stats)) {
            stats->stop_fed = fed;
            break;
        }
    }
    /* steps still queued (a stop, an error): collected, their picks dropped */
    return si_engine_topk_drain(e, queued, vals, ids, rc, err);
}

int si_generate(si_engine *e, const si_tokenizer *tok, si_sampler *s, const si_gen_opts *o,
                const int32_t *prompt, uint32_t n_prompt, si_gen_token_cb cb, void *ctx,
                uint32_t *pos_out, si_gen_stats *stats, si_err *err)
{
    si_model_info info;
    si_engine_info(e, &info);
    memset(stats, 0, sizeof *stats);
    stats->last = -1;
    if (n_prompt == 0)
        return si_err_set(err, SI_EINVAL, "empty prompt");
    if ((uint64_t)o->pos0 + n_prompt > info.n_ctx)
        return si_err_set(err, SI_ERANGE,
                          "prompt of %u tokens at position %u exceeds the context of %u tokens (raise [runtime] n_ctx or shorten the prompt)",
                          n_prompt, o->pos0, info.n_ctx);
    float *logits = malloc(sizeof(float) * info.n_vocab);
    uint8_t *want = calloc(n_prompt, 1);
    if (logits == NULL || want == NULL) {
        free(logits);
        free(want);
        return si_err_set(err, SI_ENOMEM, "out of memory for %u logits", info.n_vocab);
    }
    want[n_prompt - 1] = 1;
    for (uint32_t i = 0; i < n_prompt; i++)
        si_sampler_accept(s, prompt[i]);

    double t0 = si_now_seconds();
    int rc = si_prefill(e, o->seq, o->pos0, prompt, n_prompt, o->n_batch, want, logits, err);
    stats->prompt_s = si_now_seconds() - t0;
    stats->n_prompt = n_prompt;
    uint32_t pos = o->pos0 + n_prompt;

    topk_path tk;
    topk_path_init(e, s, o, &tk);
    t0 = si_now_seconds();
    const bool ahead = rc == SI_OK && o->ahead && tk.k >= 1 && si_sampler_penalty_cap(s) == 0 &&
                       si_engine_decode_ahead(e) >= 1 && o->n_predict != 0 &&
                       (tk.k == 1 || si_engine_topk_can_post(e));
    bool ahead_done = false;
    if (ahead) {
        const si_host *h = si_engine_host(e);
        int32_t id = -1, unfed = -1;
        rc = si_sampler_sample(s, logits, &id, err);
        if (rc == SI_OK)
            rc = generate_ahead(e, tok, s, o, tk.k, info.n_ctx, id, cb, ctx, &pos, stats, &unfed, err);
        ahead_done = rc != SI_EUNSUPPORTED;
        if (ahead_done) {
            h->log(h, SI_LOG_INFO, "core", "decode: ahead (each step queued before the previous pick is read)");
        } else {
            h->log(h, SI_LOG_INFO, "core", "decode: one step at a time: %s", err != NULL ? err->msg : "");
            rc = forward_one(e, s, &tk, o, unfed, &pos, logits, err);
        }
    }
    while (rc == SI_OK && !ahead_done) {
        if (o->n_predict >= 0 && stats->n_gen >= (uint32_t)o->n_predict)
            break;
        int32_t id = -1;
        rc = tk.have ? si_sampler_sample_topk(s, tk.vals, tk.ids, tk.k, &id, err)
                     : si_sampler_sample(s, logits, &id, err);
        if (rc != SI_OK)
            break;
        if (took_token(tok, s, o, cb, ctx, id, stats))
            break;
        if (pos >= info.n_ctx)
            break;   /* context full: stop cleanly, the text so far stands */
        rc = forward_one(e, s, &tk, o, id, &pos, logits, err);
    }
    /* feed_stop: the token it stopped on, where no step ahead fed it */
    if (rc == SI_OK && o->feed_stop && stats->stopped && !stats->stop_fed && pos < info.n_ctx) {
        rc = forward_one(e, s, &tk, o, stats->last, &pos, logits, err);
        stats->stop_fed = rc == SI_OK;
    }
    stats->gen_s = si_now_seconds() - t0;
    topk_path_free(&tk);
    if (pos_out != NULL)
        *pos_out = pos;
    free(logits);
    free(want);
    return rc;
}
