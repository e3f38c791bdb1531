/* core/engine.h — one loaded model ready to run: the configuration's
 * plugins, an open backend, a GGUF and the model plugin that accepted it.
 *
 * Backend choice: the backend named in opts, else the one [runtime] backend
 * names (error if it is not loaded, naming which of the two asked), or
 * else (neither, or backend = auto) every LOADED backend in descending
 * `priority` (config order breaks ties) until one opens.  Model choice: the first loaded model plugin whose
 * accepts() takes the file's general.architecture; none → an error that
 * names the architecture and the model plugins that were asked.
 */
#ifndef SI_CORE_ENGINE_H
#define SI_CORE_ENGINE_H

#include <sparkinfer/plugin.h>

#include "config.h"
#include "loader.h"

typedef struct si_engine si_engine;

typedef struct si_engine_opts {
    const si_config *cfg;          /* borrowed; must outlive the engine        */
    const char      *model_path;   /* GGUF file                                 */
    const char      *backend;      /* NULL = [runtime] backend (auto: by priority) */
    uint32_t         n_seq;        /* 0 = [runtime] n_seq                       */
    uint32_t         n_ctx;        /* 0 = [runtime] n_ctx                       */
} si_engine_opts;

int  si_engine_open(const si_engine_opts *o, si_engine **out, si_err *err);
void si_engine_close(si_engine *e);

const si_host       *si_engine_host(const si_engine *e);
const si_gguf       *si_engine_gguf(const si_engine *e);
const si_registry   *si_engine_registry(const si_engine *e);
const char          *si_engine_backend_name(const si_engine *e);
const char          *si_engine_model_plugin(const si_engine *e);
void                 si_engine_info(const si_engine *e, si_model_info *out);

int si_engine_forward(si_engine *e, const si_batch *b, float *logits, si_err *err);
int si_engine_seq_reset(si_engine *e, uint32_t seq, si_err *err);

/* si_engine_forward, except that the wanted rows' logits go through the
 * backend's SI_OP_TOPK (tp: k, penalties; plugin.h) and only the k best
 * values and ids of each row come back: vals[count*k], ids[count*k].
 * SI_EUNSUPPORTED, before anything runs, when the model plugin or the
 * backend lacks it: then use si_engine_forward. */
int si_engine_forward_topk(si_engine *e, const si_batch *b, const si_topk_params *tp, float *vals,
                           int32_t *ids, si_err *err);
/* Decode ahead (the model's topk_submit / topk_collect, plugin.h 1.3): the
 * most sequences a queued step may have: 0 when the model plugin lacks
 * them or [runtime] decode_ahead = false, 1 for true, SI_SUBMIT_MAX_ROWS
 * for batch; the two calls are the plugin's (SI_EUNSUPPORTED when it
 * lacks them). */
uint32_t si_engine_decode_ahead(const si_engine *e);
int  si_engine_topk_submit(si_engine *e, const si_batch *b, const si_topk_params *tp, uint32_t flags,
                           si_err *err);
int  si_engine_topk_collect(si_engine *e, float *vals, int32_t *ids, si_err *err);
/* Whether the model plugin takes SI_SUBMIT_POST submits (plugin.h 1.4),
 * and the post that gives such a step its tokens (SI_EUNSUPPORTED when
 * it does not). */
bool si_engine_topk_can_post(const si_engine *e);
int  si_engine_topk_post(si_engine *e, const int32_t *tokens, uint32_t n, si_err *err);
/* The post a queued SI_SUBMIT_POST step is owed, made whatever happened
 * before it (rc: the caller's status so far), since the step would wait
 * on it for ever: returns rc when that failed (err kept), else the post's
 * status. */
int  si_engine_topk_post_owed(si_engine *e, const int32_t *tokens, uint32_t n, int rc, si_err *err);
/* Collects (and drops) the n steps still queued after a run stopped or
 * failed (rc: the caller's status so far), so the model is left with
 * none; vals / ids are scratch of one collect's size.  Every step is
 * collected; returns rc when that failed (err kept), else the first
 * collect's failure. */
int  si_engine_topk_drain(si_engine *e, uint32_t n, float *vals, int32_t *ids, int rc, si_err *err);
/* Whether the runtime may sample on the backend ([runtime] device_sampling). */
bool si_engine_device_sampling(const si_engine *e);

#endif /* SI_CORE_ENGINE_H */
