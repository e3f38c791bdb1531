/* models/qwen36/qwen36.c — model plugin for the Qwen3.5/3.6 MoE hybrid.
 * There is no "qwen36" architecture string: Qwen3.6-35B-A3B and the
 * Qwen3.5 MoE models say general.architecture "qwen35moe" (spec §1.1).
 * All the work is the shared hybrid code in models/common. */
#include <sparkinfer/plugin.h>

#include "../common/hybrid.h"

static const sih_family qwen36_family = {
    .name = "qwen36",
    .arch = "qwen35moe",
    .moe = true,
};

static bool qwen36_accepts(const si_host *h, const si_gguf *g)
{
    return sih_accepts(h, g, qwen36_family.arch);
}

static int qwen36_load(const si_host *h, const si_gguf *g, const si_backend_ref *be,
                       uint32_t n_seq, uint32_t n_ctx, si_model **out, si_err *err)
{
    return sih_load(&qwen36_family, h, g, be, n_seq, n_ctx, out, err);
}

static const struct si_model_ops qwen36_ops = {
    .size = sizeof(struct si_model_ops),
    .accepts = qwen36_accepts,
    .load = qwen36_load,
    .unload = sih_unload,
    .info = sih_info,
    .seq_reset = sih_seq_reset,
    .forward = sih_forward,
    .forward_topk = sih_forward_topk,
    .topk_submit = sih_topk_submit,
    .topk_post = sih_topk_post,
    .topk_collect = sih_topk_collect,
};

SI_PLUGIN_DEFINE(SI_KIND_MODEL, "qwen36", "0.1.0",
                 "Qwen3.5/3.6 MoE hybrid: Gated DeltaNet + gated attention + routed experts "
                 "(GGUF arch qwen35moe)",
                 NULL, &qwen36_ops, NULL)
