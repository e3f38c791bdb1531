/* tests/loader/plugins/ok_model.c — a real, minimal model family for the
 * loader tests: accepts() reads general.architecture through the host's
 * GGUF views and takes only "testarch"; load() records the provisioned
 * shape; forward() computes nothing (SI_EUNSUPPORTED).
 * Built twice: as ok_model, and with OK_MODEL_NAME="dup". */
#include <string.h>

#include <sparkinfer/plugin.h>

#ifndef OK_MODEL_NAME
#define OK_MODEL_NAME "ok_model"
#endif

#define ARCH "testarch"

struct si_model {
    const si_host *h;
    uint32_t       n_seq, n_ctx;
};

static bool ok_accepts(const si_host *h, const si_gguf *g)
{
    const si_gguf_value *v = h->gguf_get(g, "general.architecture");
    return v != NULL && v->type == SI_GGUF_STRING && v->v.s.len == strlen(ARCH) &&
           memcmp(v->v.s.ptr, ARCH, strlen(ARCH)) == 0;
}

static int ok_load(const si_host *h, const si_gguf *g, const si_backend_ref *be, uint32_t n_seq,
                   uint32_t n_ctx, si_model **out, si_err *err)
{
    if (!ok_accepts(h, g))
        return si_err_set(err, SI_EINVAL, "%s: general.architecture is not '" ARCH "'",
                          h->gguf_path(g));
    if (be == NULL || be->ops == NULL || n_seq == 0 || n_ctx == 0)
        return si_err_set(err, SI_EINVAL, OK_MODEL_NAME ": load needs a backend, n_seq and n_ctx");
    si_model *m = h->alloc(h, sizeof *m);
    if (m == NULL)
        return si_err_set(err, SI_ENOMEM, OK_MODEL_NAME ": out of memory");
    m->h = h;
    m->n_seq = n_seq;
    m->n_ctx = n_ctx;
    *out = m;
    return SI_OK;
}

static void ok_unload(si_model *m)
{
    if (m != NULL)
        m->h->free(m->h, m);
}

static void ok_info(const si_model *m, si_model_info *out)
{
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    out->arch = ARCH;
    out->n_seq_max = m->n_seq;
    out->n_ctx = m->n_ctx;
}

static int ok_seq_reset(si_model *m, uint32_t seq, si_err *err)
{
    if (seq >= m->n_seq)
        return si_err_set(err, SI_ERANGE, OK_MODEL_NAME ": sequence %u of %u", seq, m->n_seq);
    return SI_OK;
}

static int ok_forward(si_model *m, const si_batch *batch, float *logits, si_err *err)
{
    (void)m;
    (void)batch;
    (void)logits;
    return si_err_set(err, SI_EUNSUPPORTED, OK_MODEL_NAME ": computes nothing");
}

static const struct si_model_ops ok_ops = {
    .size = sizeof(struct si_model_ops),
    .accepts = ok_accepts,
    .load = ok_load,
    .unload = ok_unload,
    .info = ok_info,
    .seq_reset = ok_seq_reset,
    .forward = ok_forward,
};

SI_PLUGIN_DEFINE(SI_KIND_MODEL, OK_MODEL_NAME, "0.0.1", "loader test model family (testarch)",
                 NULL, &ok_ops, NULL)
