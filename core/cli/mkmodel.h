/* core/cli/mkmodel.h — `sparkinfer mkmodel`: synthetic GGUF files with the
 * exact layout of real Qwen3.5/3.6 models (spec qwen35-gguf.md §1-§2).
 *
 *   mkmodel_presets.c  presets, the per-tensor quant rules, the tensor plan
 *                      and the general.* / <arch>.* metadata
 *   mkmodel_synth.c    seeded random tensor data (floats, or quant blocks
 *                      synthesised directly for big quantised tensors)
 *   cmd_mkmodel.c      options, --plan output, multi-threaded streaming write
 */
#ifndef SI_CLI_MKMODEL_H
#define SI_CLI_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>
#include <sparkinfer/types.h>

#include "gguf.h"

typedef enum si_mk_arch {
    SI_MK_QWEN35 = 0,      /* dense hybrid (Qwen3.5-9B, Qwythos-9B) */
    SI_MK_QWEN35MOE = 1,   /* MoE hybrid (Qwen3.6-35B-A3B)          */
} si_mk_arch;

typedef enum si_mk_quant {
    SI_MK_Q_F32 = 0,
    SI_MK_Q_F16,
    SI_MK_Q_Q8_0,
    SI_MK_Q_Q4_K_M,        /* llama-quantize's standard Q4_K_M rule (spec §2.8) */
    SI_MK_Q_UD_Q4_K_M,     /* Unsloth's dynamic mix of the 35B-A3B upload    */
} si_mk_quant;

typedef struct si_mk_hparams {
    const char *preset;          /* "tiny", "9b", "35b-a3b" */
    si_mk_arch  arch;
    si_mk_quant default_quant;
    uint32_t n_embd;             /* H */
    uint32_t n_layer;            /* block_count (no MTP block is generated) */
    uint32_t n_ff;               /* dense FFN width (qwen35) */
    uint32_t n_head, n_head_kv, head_dim;
    uint32_t ssm_group;          /* Hk: GDN key heads   (ssm.group_count)    */
    uint32_t ssm_dt_rank;        /* Hv: GDN value heads (ssm.time_step_rank) */
    uint32_t ssm_state;          /* dk = dv             (ssm.state_size)     */
    uint32_t ssm_conv;           /* conv kernel width                        */
    uint32_t rope_dim;
    float    rope_base;
    int32_t  rope_sections[4];
    uint32_t ctx;
    uint32_t vocab_rows;         /* token_embd / output ne[1]; 0 = vocabulary size */
    uint32_t full_attn_interval;
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;   /* qwen35moe */
    float    eps;
} si_mk_hparams;

/* How a tensor's values are drawn (all seeded, see mkmodel_synth.c). */
typedef enum si_mk_init {
    SI_MK_INIT_NORMAL = 0,   /* N(0, std)              linear weights, embeddings, conv, dt bias */
    SI_MK_INIT_ONE_PLUS,     /* 1 + N(0, std)          norm weights (GGUF stores 1 + w)          */
    SI_MK_INIT_NEG_EXP,      /* -exp(U(-1, 1))         ssm_a = -exp(A_log)                       */
} si_mk_init;

typedef struct si_mk_tensor {
    char     name[64];
    uint32_t type;               /* enum si_type */
    uint32_t ndim;
    int64_t  ne[SI_MAX_DIMS];    /* ne[0] contiguous; unused dims are 1 */
    uint32_t init;               /* si_mk_init */
    float    std;
    uint64_t rows;               /* ne[1]*ne[2]*ne[3] */
    uint64_t row_bytes;          /* bytes of one ne[0] row in `type` */
    uint64_t nbytes;             /* rows * row_bytes */
    bool     synth;              /* quant blocks synthesised directly (no float pass) */
} si_mk_tensor;

typedef struct si_mk_plan {
    si_mk_hparams hp;
    si_mk_quant   quant;
    si_mk_tensor *t;             /* [n] in file order */
    uint32_t      n;
    uint64_t      total_bytes;   /* tensor data, without alignment padding */
} si_mk_plan;

/* Quantised tensors with more elements than this get their blocks
 * synthesised directly; smaller ones are drawn as floats and go through
 * the reference quantiser (si_quant). */
#define SI_MK_SYNTH_MIN_ELEMS (1ull << 22)

/* ---- mkmodel_presets.c ---- */
int         si_mk_arch_from_name(const char *s, si_mk_arch *out);    /* SI_OK or SI_EINVAL */
int         si_mk_quant_from_name(const char *s, si_mk_quant *out);
const char *si_mk_arch_name(si_mk_arch a);
const char *si_mk_quant_name(si_mk_quant q);
/* Fills *hp for preset `name` (tiny, 9b, 35b-a3b).  `arch` may be NULL: the
 * preset's own arch (qwen35 for tiny).  A 9b/35b-a3b preset with the other
 * arch is refused. */
int  si_mk_preset(const char *name, const si_mk_arch *arch, si_mk_hparams *hp, si_err *err);
/* llama.cpp's use_more_bits(i, n): the layers Q4_K_M gives Q6_K. */
bool si_mk_use_more_bits(uint32_t i, uint32_t n);
bool si_mk_is_full_attn(const si_mk_hparams *hp, uint32_t il);
/* llama_ftype stored in general.file_type. */
uint32_t si_mk_file_type(si_mk_quant q);
/* Builds the tensor list.  hp->vocab_rows must be set (> 0). */
int  si_mk_plan_build(const si_mk_hparams *hp, si_mk_quant q, si_mk_plan *out, si_err *err);
void si_mk_plan_free(si_mk_plan *p);
const si_mk_tensor *si_mk_plan_find(const si_mk_plan *p, const char *name);
/* general.* and <arch>.* keys (the tokenizer keys come from si_hf_vocab). */
int  si_mk_write_metadata(const si_mk_plan *p, si_gguf_writer *w, si_err *err);

/* ---- mkmodel_synth.c ---- */
/* Fills rows [row0, row0 + nrows) of tensor `t` (index `ti` in its plan)
 * into dst (nrows * t->row_bytes bytes).  The values depend only on (seed,
 * ti, row), never on how the rows are split into calls or threads.
 * `scratch` holds nrows * ne[0] floats when !t->synth and the type is not
 * F32; otherwise it may be NULL. */
int  si_mk_fill_rows(const si_mk_tensor *t, uint32_t ti, uint64_t seed,
                     uint64_t row0, uint64_t nrows, void *dst, float *scratch, si_err *err);
/* Synthesises n_blocks valid blocks of `type` (Q8_0, Q4_K, Q5_K, Q6_K) whose
 * dequantised values have mean ~0 and standard deviation ~std. */
int  si_mk_synth_blocks(uint32_t type, float std, uint64_t rng_seed, void *dst,
                        uint64_t n_blocks, si_err *err);

#endif /* SI_CLI_MKMODEL_H */
