/* core/convert/hf_config.h — the hyper-parameters of a Hugging Face Qwen3.5 /
 * Qwen3.5-MoE (Qwen3.6) config.json, as the converter needs them.
 *
 * Accepted classes: Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
 * Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration (or, without
 * "architectures", model_type qwen3_5[_text] / qwen3_5_moe[_text]).  Keys are
 * looked up first in "text_config" (the ConditionalGeneration form) and then
 * at the top level; RoPE keys also inside "rope_parameters" (transformers
 * 5.x) and "rope_scaling" (older configs).  A missing required key is an
 * error that names it.
 */
#ifndef SI_CONVERT_HF_CONFIG_H
#define SI_CONVERT_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>

#define SI_HF_MAX_LAYERS 1024

typedef struct si_hf_qwen35 {
    char     arch_class[64];      /* "Qwen3_5ForCausalLM" or the model_type  */
    bool     moe;                 /* GGUF arch qwen35moe instead of qwen35    */

    uint32_t n_embd;              /* hidden_size                               */
    uint32_t n_layer;             /* num_hidden_layers (trunk; MTP excluded)  */
    uint32_t n_ff;                /* intermediate_size (dense; 0 if absent)   */
    uint32_t n_head, n_head_kv, head_dim;
    float    rms_eps;
    uint32_t n_vocab;             /* vocab_size                                */
    uint32_t n_ctx_train;         /* max_position_embeddings                   */
    int      tie_embeddings;      /* 1, 0, or -1 when the config does not say  */

    double   rope_theta;
    float    partial_rotary;      /* default 0.25 (llama.cpp's default)       */
    uint32_t n_rot;               /* head_dim * partial_rotary                 */
    int32_t  rope_sections[4];    /* mrope_section padded with 0              */
    bool     yarn;
    float    yarn_factor;
    uint32_t yarn_orig_ctx;
    bool     has_beta_fast, has_beta_slow;
    float    yarn_beta_fast, yarn_beta_slow;

    bool     is_full[SI_HF_MAX_LAYERS];   /* layer il is full attention          */
    uint32_t full_interval;       /* N when is_full == ((il+1) % N == 0), else 0 */

    uint32_t conv_kernel;         /* linear_conv_kernel_dim                    */
    uint32_t lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim;

    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;   /* MoE only     */
} si_hf_qwen35;

/* Parses `path` (config.json).  Checks the values for consistency (heads
 * divide, rotary dims even and <= head_dim, v heads a multiple of k heads,
 * top-k <= experts ...). */
int si_hf_qwen35_load(const char *path, si_hf_qwen35 *out, si_err *err);

#endif /* SI_CONVERT_HF_CONFIG_H */
