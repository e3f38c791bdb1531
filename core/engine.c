/* core/engine.c — ties the registry, a backend and a model plugin together
 * for one GGUF.  See engine.h for the selection rules. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "gguf.h"
#include "host.h"

struct si_engine {
    si_host              host;
    const si_config     *cfg;
    si_registry         *reg;
    si_gguf             *gguf;
    si_backend_ref       be;
    const si_plugin     *model_plugin;
    si_model            *model;
};

static const struct si_model_ops *model_ops(const si_engine *e)
{
    return (const struct si_model_ops *)e->model_plugin->ops;
}

/* Loaded backends sorted by descending priority, stable in config order. */
static size_t sorted_backends(const si_registry *r, const si_plugin_record **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < si_registry_count(r) && n < cap; i++) {
        const si_plugin_record *rec = si_registry_at(r, i);
        if (rec->state != SI_PLUGIN_LOADED || rec->kind != SI_KIND_BACKEND)
            continue;
        size_t j = n++;
        while (j > 0 && out[j - 1]->priority < rec->priority) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = rec;
    }
    return n;
}

/* want: the backend asked for by name (NULL: any, by priority); from: who
 * asked, for the errors ("--backend", "[runtime] backend"). */
static int open_backend(si_engine *e, const char *want, const char *from, si_err *err)
{
    const si_plugin_record *cands[64];
    size_t n = sorted_backends(e->reg, cands, 64);
    char tried[SI_ERR_MSG_MAX] = "";
    size_t used = 0;

    for (size_t i = 0; i < n; i++) {
        if (want != NULL && strcmp(cands[i]->name, want) != 0)
            continue;
        const struct si_backend_ops *ops = cands[i]->desc->ops;
        si_err berr = { { 0 } };
        si_backend *b = NULL;
        if (ops->open(&e->host, cands[i]->section, &b, &berr) == SI_OK) {
            e->be.ops = ops;
            e->be.b = b;
            e->be.name = cands[i]->name;
            /* Kernels before the model: its weights and first ops may
             * already run through them. */
            return si_registry_attach_kernels(e->reg, &e->host, e->be.name, ops, b, NULL, err);
        }
        e->host.log(&e->host, SI_LOG_WARN, "core", "backend %s: open failed: %s",
                    cands[i]->name, berr.msg);
        int w = snprintf(tried + used, sizeof tried - used, "%s%s: %s", used ? "; " : "",
                         cands[i]->name, berr.msg);
        if (w > 0 && (size_t)w < sizeof tried - used)
            used += (size_t)w;
    }
    if (want != NULL && used == 0) {
        const si_plugin_record *rec = NULL;
        for (size_t i = 0; i < si_registry_count(e->reg); i++)
            if (strcmp(si_registry_at(e->reg, i)->name, want) == 0)
                rec = si_registry_at(e->reg, i);
        if (rec == NULL)
            return si_err_set(err, SI_ENOTFOUND, "%s: backend '%s' is not in the configuration (%s)",
                              from, want, si_config_source(e->cfg));
        return si_err_set(err, SI_ENOTFOUND, "%s: backend '%s' is not loaded: %s", from, want,
                          rec->state == SI_PLUGIN_DISABLED ? "disabled in the configuration"
                                                           : rec->reason);
    }
    if (used == 0)
        return si_err_set(err, SI_ENOTFOUND, "no backend plugin is loaded (see `sparkinfer plugins`)");
    return si_err_set(err, SI_EDEVICE, "no backend could be opened: %s", tried);
}

static int find_model(si_engine *e, si_err *err)
{
    char asked[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < si_registry_count(e->reg); i++) {
        const si_plugin_record *rec = si_registry_at(e->reg, i);
        if (rec->state != SI_PLUGIN_LOADED || rec->kind != SI_KIND_MODEL)
            continue;
        const struct si_model_ops *ops = rec->desc->ops;
        if (ops->accepts(&e->host, e->gguf)) {
            e->model_plugin = rec->desc;
            return SI_OK;
        }
        int w = snprintf(asked + used, sizeof asked - used, "%s%s", used ? ", " : "", rec->name);
        if (w > 0 && (size_t)w < sizeof asked - used)
            used += (size_t)w;
    }
    si_str arch = { "?", 1 };
    si_gguf_get_str(e->gguf, "general.architecture", &arch, NULL);
    return si_err_set(err, SI_EUNSUPPORTED,
                      "%s: no loaded model plugin accepts architecture '%.*s' (asked: %s)",
                      si_gguf_path(e->gguf), (int)arch.len, arch.ptr, used ? asked : "none");
}

int si_engine_open(const si_engine_opts *o, si_engine **out, si_err *err)
{
    *out = NULL;
    si_engine *e = calloc(1, sizeof *e);
    if (e == NULL)
        return si_err_set(err, SI_ENOMEM, "out of memory");
    e->cfg = o->cfg;
    si_host_init(&e->host, o->cfg);

    int rc = si_registry_load(o->cfg, &e->host, &e->reg, err);
    if (rc == SI_OK)
        rc = si_gguf_open(o->model_path, &e->gguf, err);
    if (rc == SI_OK)
        rc = find_model(e, err);
    if (rc == SI_OK) {
        /* the caller's choice (the CLI's --backend) wins over the
         * configuration's [runtime] backend; auto there means any */
        const char *want = o->backend, *from = "--backend";
        if (want == NULL) {
            want = si_config_get(o->cfg, "runtime", "backend");
            from = "[runtime] backend";
            if (want != NULL && strcmp(want, "auto") == 0)
                want = NULL;
        }
        rc = open_backend(e, want, from, err);
    }
    if (rc == SI_OK) {
        long n_seq = o->n_seq ? (long)o->n_seq : si_config_get_long(o->cfg, "runtime", "n_seq", 1);
        long n_ctx = o->n_ctx ? (long)o->n_ctx : si_config_get_long(o->cfg, "runtime", "n_ctx", 4096);
        rc = model_ops(e)->load(&e->host, e->gguf, &e->be, (uint32_t)n_seq, (uint32_t)n_ctx,
                                &e->model, err);
        if (rc != SI_OK)
            si_err_prefix(err, e->model_plugin->name);
    }
    if (rc != SI_OK) {
        si_engine_close(e);
        return rc;
    }
    *out = e;
    return SI_OK;
}

void si_engine_close(si_engine *e)
{
    if (e == NULL)
        return;
    /* Objects first, then the libraries that made them (loader.h). */
    if (e->model != NULL)
        model_ops(e)->unload(e->model);
    if (e->be.b != NULL)
        e->be.ops->close(e->be.b);
    si_gguf_close(e->gguf);
    si_registry_free(e->reg);
    free(e);
}

const si_host     *si_engine_host(const si_engine *e) { return &e->host; }
const si_gguf     *si_engine_gguf(const si_engine *e) { return e->gguf; }
const si_registry *si_engine_registry(const si_engine *e) { return e->reg; }
const char        *si_engine_backend_name(const si_engine *e) { return e->be.name; }
const char        *si_engine_model_plugin(const si_engine *e) { return e->model_plugin->name; }

void si_engine_info(const si_engine *e, si_model_info *out)
{
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    model_ops(e)->info(e->model, out);
}

int si_engine_forward(si_engine *e, const si_batch *b, float *logits, si_err *err)
{
    return model_ops(e)->forward(e->model, b, logits, err);
}

int si_engine_forward_topk(si_engine *e, const si_batch *b, const si_topk_params *tp, float *vals,
                           int32_t *ids, si_err *err)
{
    const struct si_model_ops *ops = model_ops(e);
    if (!SI_HAS_MEMBER(ops, struct si_model_ops, forward_topk) || ops->forward_topk == NULL)
        return si_err_set(err, SI_EUNSUPPORTED, "model plugin '%s' has no forward_topk (ABI < 1.2)",
                          e->model_plugin->name);
    return ops->forward_topk(e->model, b, tp, vals, ids, err);
}

static bool has_ahead(const struct si_model_ops *ops)
{
    return SI_HAS_MEMBER(ops, struct si_model_ops, topk_collect) && ops->topk_submit != NULL &&
           ops->topk_collect != NULL;
}

uint32_t si_engine_decode_ahead(const si_engine *e)
{
    const char *v = si_config_get(e->cfg, "runtime", "decode_ahead");
    if (!has_ahead(model_ops(e)) || (v != NULL && strcmp(v, "false") == 0))
        return 0;
    return v != NULL && strcmp(v, "batch") == 0 ? SI_SUBMIT_MAX_ROWS : 1;
}

int si_engine_topk_submit(si_engine *e, const si_batch *b, const si_topk_params *tp, uint32_t flags, si_err *err)
{
    if (!has_ahead(model_ops(e)))
        return si_err_set(err, SI_EUNSUPPORTED, "model plugin '%s' has no topk_submit (ABI < 1.3)",
                          e->model_plugin->name);
    return model_ops(e)->topk_submit(e->model, b, tp, flags, err);
}

int si_engine_topk_collect(si_engine *e, float *vals, int32_t *ids, si_err *err)
{
    if (!has_ahead(model_ops(e)))
        return si_err_set(err, SI_EUNSUPPORTED, "model plugin '%s' has no topk_collect (ABI < 1.3)",
                          e->model_plugin->name);
    return model_ops(e)->topk_collect(e->model, vals, ids, err);
}

bool si_engine_topk_can_post(const si_engine *e)
{
    const struct si_model_ops *ops = model_ops(e);
    return has_ahead(ops) && SI_HAS_MEMBER(ops, struct si_model_ops, topk_post) && ops->topk_post != NULL;
}

int si_engine_topk_post(si_engine *e, const int32_t *tokens, uint32_t n, si_err *err)
{
    if (!si_engine_topk_can_post(e))
        return si_err_set(err, SI_EUNSUPPORTED, "model plugin '%s' has no topk_post (ABI < 1.4)",
                          e->model_plugin->name);
    return model_ops(e)->topk_post(e->model, tokens, n, err);
}

int si_engine_topk_post_owed(si_engine *e, const int32_t *tokens, uint32_t n, int rc, si_err *err)
{
    si_err scratch = { { 0 } };
    const int r = si_engine_topk_post(e, tokens, n, rc == SI_OK ? err : &scratch);
    return rc != SI_OK ? rc : r;
}

int si_engine_topk_drain(si_engine *e, uint32_t n, float *vals, int32_t *ids, int rc, si_err *err)
{
    for (; n > 0; n--) {
        si_err scratch = { { 0 } };
        const int r = si_engine_topk_collect(e, vals, ids, &scratch);
        if (rc == SI_OK && r != SI_OK) {
            rc = r;
            *err = scratch;
        }
    }
    return rc;
}

bool si_engine_device_sampling(const si_engine *e)
{
    return si_config_get_bool(e->cfg, "runtime", "device_sampling", true);
}

int si_engine_seq_reset(si_engine *e, uint32_t seq, si_err *err)
{
    return model_ops(e)->seq_reset(e->model, seq, err);
}
