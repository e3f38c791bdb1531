/* tests/install/example_plugin.c — an out-of-tree plugin, built against an
 * INSTALLED sparkinfer with nothing but `pkg-config --cflags sparkinfer`.
 * It is a model-family plugin for a made-up architecture "example": it
 * recognises files whose general.architecture is "example" and refuses to
 * load anything (it has no weights to run).  Its job is to prove the
 * installed headers and the .pc file are enough to build a loadable .so. */
#include <string.h>

#include <sparkinfer/plugin.h>

static bool example_accepts(const si_host *h, const si_gguf *g)
{
    const si_gguf_value *v = h->gguf_get(g, "general.architecture");
    return v != NULL && v->type == SI_GGUF_STRING && v->v.s.len == 7 &&
           memcmp(v->v.s.ptr, "example", 7) == 0;
}

static int example_load(const si_host *h, const si_gguf *g, const si_backend_ref *be,
                        uint32_t n_seq, uint32_t n_ctx, si_model **out, si_err *err)
{
    (void)h; (void)g; (void)be; (void)n_seq; (void)n_ctx; (void)out;
    return si_err_set(err, SI_EUNSUPPORTED, "example: this plugin only demonstrates packaging");
}

static void example_unload(si_model *m) { (void)m; }
static void example_info(const si_model *m, si_model_info *out) { (void)m; (void)out; }
static int example_seq_reset(si_model *m, uint32_t s, si_err *e) { (void)m; (void)s; (void)e; return SI_OK; }
static int example_forward(si_model *m, const si_batch *b, float *l, si_err *e)
{
    (void)m; (void)b; (void)l;
    return si_err_set(e, SI_EUNSUPPORTED, "example: no forward");
}

static const struct si_model_ops example_ops = {
    .size = sizeof(struct si_model_ops),
    .accepts = example_accepts,
    .load = example_load,
    .unload = example_unload,
    .info = example_info,
    .seq_reset = example_seq_reset,
    .forward = example_forward,
};

SI_PLUGIN_DEFINE(SI_KIND_MODEL, "example", "1.0.0", "out-of-tree packaging example",
                 NULL, &example_ops, NULL)
