/* models/qwen35/qwen35.c — model plugin for the Qwen3.5 dense hybrid
 * (GGUF general.architecture "qwen35": Qwen3.5-0.8B ... 27B, Qwythos-9B).
 * All the work is the shared hybrid code in models/common; this file only
 * says which architecture and FFN kind it serves. */
#include <sparkinfer/plugin.h>

#include "../common/hybrid.h"

static const sih_family qwen35_family = {
    .name = "qwen35",
    .arch = "qwen35",
    .moe = false,
};

static bool qwen35_accepts(const si_host *h, const si_gguf *g)
{
    return sih_accepts(h, g, qwen35_family.arch);
}

static int qwen35_load(const si_host *h, const si_gguf *g, const si_backend_ref *be,
                       uint32_t n_seq, uint32_t n_ctx, si_model **out, si_err *err)
{
    return sih_load(&qwen35_family, h, g, be, n_seq, n_ctx, out, err);
}

static const struct si_model_ops qwen35_ops = {
    .size = sizeof(struct si_model_ops),
    .accepts = qwen35_accepts,
    .load = qwen35_load,
    .unload = sih_unload,
    .info = sih_info,
    .seq_reset = sih_seq_reset,
    .forward = sih_forward,
    .forward_topk = sih_forward_topk,
    .topk_submit = sih_topk_submit,
    .topk_post = sih_topk_post,
    .topk_collect = sih_topk_collect,
};

SI_PLUGIN_DEFINE(SI_KIND_MODEL, "qwen35", "0.1.0",
                 "Qwen3.5 dense hybrid: Gated DeltaNet + gated attention (GGUF arch qwen35)",
                 NULL, &qwen35_ops, NULL)
