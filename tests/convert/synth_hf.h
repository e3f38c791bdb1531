/* tests/convert/synth_hf.h — writes small synthetic Hugging Face Qwen3.5 /
 * Qwen3.5-MoE checkpoints (config.json, safetensors, tokenizer files) with
 * known values, plus deliberate defects, for the converter tests. */
#ifndef SI_TESTS_SYNTH_HF_H
#define SI_TESTS_SYNTH_HF_H

#include <stdbool.h>
#include <stdint.h>

/* Fixed dimensions of every synthetic model. */
enum {
    S_H = 32,        /* hidden_size                                            */
    S_L = 4,         /* layers: linear, full, linear, full (interval 2)        */
    S_NH = 4,        /* attention heads                                        */
    S_NKV = 2,       /* KV heads                                               */
    S_HD = 16,       /* head_dim; partial_rotary_factor 0.25 -> 4 rotary dims  */
    S_HK = 2,        /* linear_num_key_heads                                   */
    S_HV = 6,        /* linear_num_value_heads (R = 3)                         */
    S_DK = 4,        /* linear_key_head_dim                                    */
    S_DV = 4,        /* linear_value_head_dim                                  */
    S_CONV = 4,      /* linear_conv_kernel_dim                                 */
    S_F = 256,       /* dense intermediate_size (ffn_down rows: K-quant able)  */
    S_V = 300,       /* vocab_size (embedding rows); the tokenizer has 264     */
    S_NTOK = 264,
    S_E = 4,         /* experts                                                */
    S_TOPK = 2,
    S_FE = 8,        /* moe_intermediate_size                                  */
    S_FS = 16,       /* shared_expert_intermediate_size                        */
};
#define S_QK   (2 * S_HK * S_DK)         /* q and k channels of in_proj_qkv   */
#define S_CDIM (S_QK + S_HV * S_DV)      /* conv channels                     */

enum synth_experts { SYNTH_FUSED = 0, SYNTH_PER_EXPERT = 1 };

typedef struct synth_cfg {
    bool        moe;
    int         experts;        /* enum synth_experts (MoE only)                  */
    bool        cond_gen;       /* ...ForConditionalGeneration layout + vision/MTP */
    bool        tie;            /* tie_word_embeddings true, no lm_head           */
    int         dtype;          /* SI_ST_F32, SI_ST_F16 or SI_ST_BF16             */
    int         shards;         /* 1: model.safetensors; 2: index + two shards    */
    bool        irregular;      /* layer_types linear, full, full, linear         */
    bool        yarn;           /* rope_parameters with yarn factor 4             */
    const char *drop_tensor;    /* HF name (without prefix) not written           */
    const char *extra_tensor;   /* extra HF tensor [2, 2] written                 */
    const char *drop_key;       /* config key not written                         */
    const char *bad_shape;      /* HF name (without prefix) written as [3, 5]     */
    const char *bad_dtype;      /* HF name (without prefix) written as I64        */
} synth_cfg;

/* Creates `dir` (mkdir -p) and writes the checkpoint; false on I/O error. */
bool  synth_write(const char *dir, const synth_cfg *c);
/* Value of element i of the tensor with full HF name `name` (exactly
 * representable in bf16 and f16: k/64 with |k| <= 127). */
float synth_value(const char *name, uint64_t i);
/* Layer il is full attention in this configuration. */
bool  synth_is_full(const synth_cfg *c, int il);
/* Writes one safetensors file with a single F32 tensor of n values (for
 * reader tests); `raw_header` replaces the generated header when not NULL. */
bool  synth_write_single(const char *path, const char *name, const char *dtype,
                         const char *shape_json, uint64_t data_bytes, const char *raw_header);

/* Removes a directory tree made by a test (no symlinks are followed). */
void synth_rm_rf(const char *p);

#endif /* SI_TESTS_SYNTH_HF_H */
