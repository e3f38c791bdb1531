/* core/convert/convert.h — Hugging Face Qwen3.5 / Qwen3.5-MoE checkpoint
 * (safetensors + config.json + tokenizer.json) to GGUF, with llama.cpp's
 * conventions (spec/qwen35-gguf.md §1-§2):
 *
 *   - names and ggml shapes of §2; arch qwen35 or qwen35moe;
 *   - "+1" on every RMSNorm weight except linear_attn.norm, in f32;
 *   - ssm_a = -exp(A_log) in f32; dt_bias -> ssm_dt.bias;
 *   - conv1d [C,1,K] squeezed to ggml [K, C];
 *   - GDN value heads permuted from HF's grouped order to ggml's tiled order
 *     (GGUF v-head j = HF v-head (j % Hk) * R + j / Hk, §2.6) in every
 *     per-v-head tensor;
 *   - MoE experts from the fused transformers 5.x tensors (gate_up_proj
 *     [E, 2F, H], down_proj [E, H, F]) or per-expert tensors;
 *   - vision ("model.visual.*") and MTP ("mtp.*") tensors skipped; any other
 *     tensor the converter does not know is an error.
 *
 * The output is written tensor by tensor in row chunks, so memory stays
 * bounded (a few MB plus the mapped input) whatever the checkpoint size.
 * The file is first written as OUT.part and renamed when complete.
 */
#ifndef SI_CONVERT_CONVERT_H
#define SI_CONVERT_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>
#include <sparkinfer/types.h>

/* Output modes.  Norms, 1-D tensors, ssm_conv1d, ffn_gate_inp and
 * ffn_gate_inp_shexp stay F32 in every mode. */
enum si_convert_ftype {
    SI_CONVERT_F32    = 0,
    SI_CONVERT_F16    = 1,
    SI_CONVERT_BF16   = 2,
    SI_CONVERT_Q8_0   = 3,
    SI_CONVERT_Q4_K_M = 4,
    SI_CONVERT_FTYPE_COUNT
};

/* "f32", "f16", "bf16", "q8_0", "q4_k_m" (case-insensitive); -1 if unknown. */
int         si_convert_ftype_from_name(const char *name);
const char *si_convert_ftype_name(int ftype);
/* llama.cpp's general.file_type (LLAMA_FTYPE_*): 0, 1, 32, 7, 15. */
uint32_t    si_convert_ftype_gguf(int ftype);

/* The GGUF type of one tensor in a mode: the rule of spec §2.8 for Q4_K_M
 * (Q6_K for output.weight, for attn_v/attn_qkv and ffn_down/ffn_down_exps/
 * ffn_down_shexp of layers where use_more_bits(layer, n_layer) holds, else
 * Q4_K), with a fallback when ne[0] is not a multiple of the block: K-quants
 * fall back to Q8_0 (NOT llama.cpp's Q5_0/Q5_1: Q8_0 is exact enough and
 * every backend has it), and Q8_0 falls back to F16 when ne[0] % 32 != 0.
 * `name` is the GGUF name ("blk.3.attn_v.weight"). */
uint32_t si_convert_pick_type(int ftype, const char *name, uint32_t ndim, const int64_t *ne,
                              uint32_t n_layer);
/* use_more_bits of llama.cpp's quantizer: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2. */
bool     si_convert_use_more_bits(uint32_t i, uint32_t n);

/* Called before each tensor (done < total) and once at the end (done ==
 * total); bytes are source bytes. */
typedef void (*si_convert_progress_fn)(void *ud, uint64_t done, uint64_t total,
                                       const char *tensor, uint64_t bytes_done,
                                       uint64_t bytes_total);

typedef struct si_convert_opts {
    const char *hf_dir;        /* folder with config.json, *.safetensors, tokenizer.json */
    const char *out_path;
    int         ftype;         /* enum si_convert_ftype */
    const char *name;          /* general.name; NULL = the folder's base name   */
    si_convert_progress_fn progress;   /* may be NULL */
    void       *progress_ud;
} si_convert_opts;

typedef struct si_convert_stats {
    char     arch[16];                 /* "qwen35" / "qwen35moe"          */
    uint64_t n_tensors;
    uint64_t n_by_type[SI_TYPE_COUNT];
    uint64_t tensor_bytes;             /* tensor data written             */
    uint32_t n_vocab_tokenizer;        /* tokens in tokenizer.json        */
    uint32_t n_vocab;                  /* embedding rows (padded vocab)   */
    bool     experts_fused;            /* MoE: source had gate_up_proj    */
} si_convert_stats;

/* Converts.  On failure nothing is left at out_path (the partial file is
 * removed) and err names the file, tensor and reason.  stats may be NULL. */
int si_convert_hf(const si_convert_opts *o, si_convert_stats *stats, si_err *err);

#endif /* SI_CONVERT_CONVERT_H */
