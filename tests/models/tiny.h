/* tests/models/tiny.h — tiny Qwen3.5 hybrid GGUFs for the model-plugin
 * tests, and an independent double-precision reference forward pass.
 *
 * tiny_write() builds a GGUF with the core's writer from a tiny_cfg, with
 * seeded random but well-scaled weights.  Each tensor's values depend only
 * on the seed and the tensor's name, so variants of a model (tied output,
 * extra MTP block, per-layer head_count_kv ...) share their trunk weights.
 * The cfg fields after `seed` inject faults for the load-error tests.
 *
 * ref_*: a token-by-token forward written straight from
 * spec/qwen35-gguf.md §3-§4 in double precision, reading the GGUF back with
 * the core reader and si_dequant.  It shares no code with the plugins.
 */
#ifndef TESTS_MODELS_TINY_H
#define TESTS_MODELS_TINY_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>
#include <sparkinfer/types.h>

typedef struct tiny_cfg {
    bool     moe;              /* qwen35moe instead of qwen35              */
    uint32_t H, n_layer;       /* embedding, trunk layers                  */
    uint32_t interval;         /* full_attention_interval                  */
    uint32_t n_head, n_head_kv, head_dim, n_rot;
    uint32_t Hk, Hv, d_state, conv_k;
    uint32_t F, V;             /* dense FFN width, vocabulary              */
    uint32_t n_expert, n_used, F_exp, F_sh;
    float    eps, rope_base;
    float    yarn_factor;      /* > 0: rope.scaling.type = yarn            */
    uint32_t yarn_orig_ctx;
    uint32_t seed;
    /* ---- variants and faults ---- */
    uint32_t weight_type;      /* type of every matrix (0 = F32)           */
    bool     tied;             /* no output.weight                         */
    bool     head_kv_array;    /* head_count_kv as a per-layer array       */
    uint32_t nextn;            /* trailing MTP blocks written              */
    bool     dt_no_bias;       /* "ssm_dt" instead of "ssm_dt.bias"        */
    bool     fused_gate_up;    /* ffn_gate_up_exps instead of gate + up    */
    bool     recurrent_array;  /* attention.recurrent_layers instead of interval */
    const char *omit;          /* tensor left out                          */
    const char *grow;          /* tensor whose last dim gets one more      */
    const char *f16;           /* tensor stored as F16                     */
    const char *omit_key;      /* "<arch>." key left out (without prefix)  */
    const char *bad_key;       /* "<arch>." u32 key written as bad_val     */
    uint32_t bad_val;
    const char *arch_override; /* general.architecture written instead     */
} tiny_cfg;

/* Defaults from the task: H 64, 8 layers (2 full attention), heads 4/2 of
 * 32 with rope 16, Hk 2 Hv 4 state 16 conv 4, FFN 96, vocab 128; MoE: 8
 * experts top 2, F 32, shared 32. */
tiny_cfg tiny_default(bool moe);
const char *tiny_arch(const tiny_cfg *c);

/* Writes the GGUF to path; SI_OK or a status with err set. */
int tiny_write(const tiny_cfg *c, const char *path, si_err *err);

/* ---- reference ---- */
typedef struct ref_model ref_model;
typedef struct ref_seq   ref_seq;

int  ref_load(const tiny_cfg *c, const char *path, ref_model **out, si_err *err);
void ref_free(ref_model *m);
ref_seq *ref_seq_new(const ref_model *m, uint32_t n_ctx);
void ref_seq_free(ref_seq *s);
/* Feeds one token at the sequence's next position; logits[V] (double). */
void ref_step(const ref_model *m, ref_seq *s, int32_t token, double *logits);

#endif /* TESTS_MODELS_TINY_H */
