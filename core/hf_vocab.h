/* core/hf_vocab.h — reads a Hugging Face tokenizer.json (+ tokenizer_config.json)
 * byte-level BPE vocabulary and writes it as llama.cpp's tokenizer.* GGUF keys.
 *
 * Shared by `sparkinfer mkmodel --vocab`, the converter and tests.  Tokens are
 * kept exactly as tokenizer.json stores them (GPT-2 byte-to-unicode form, so
 * "Ġ" for a leading space); nothing is decoded or normalised here.
 */
#ifndef SI_CORE_HF_VOCAB_H
#define SI_CORE_HF_VOCAB_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>

#include "gguf.h"

/* llama.cpp token types (tokenizer.ggml.token_type values). */
enum {
    SI_TOKEN_NORMAL       = 1,
    SI_TOKEN_UNKNOWN      = 2,
    SI_TOKEN_CONTROL      = 3,  /* special added tokens   */
    SI_TOKEN_USER_DEFINED = 4,  /* non-special added ones */
    SI_TOKEN_UNUSED       = 5,  /* holes and padding rows */
};

typedef struct si_hf_vocab {
    uint32_t  n_tokens;      /* = max id + 1 over model.vocab and added_tokens, at least 1 */
    char    **tokens;        /* [n_tokens] NUL-terminated UTF-8 as stored in tokenizer.json
                                (GPT-2 byte-to-unicode form); holes are "[PAD<id>]" */
    int32_t  *token_type;    /* [n_tokens] SI_TOKEN_* */
    uint32_t  n_merges;
    char    **merges;        /* [n_merges] "left right" */
    int32_t   bos_id, eos_id, pad_id;   /* -1 when unknown */
    bool      add_bos;
    char     *pre;           /* "qwen35", "qwen2" or "default" (from the Split regex) */
    char     *chat_template; /* from tokenizer_config.json (or chat_template.jinja beside it), or NULL */
} si_hf_vocab;

/* Loads tokenizer.json and, when tokenizer_config_json is not NULL, the
 * special-token ids, add_bos_token and chat_template from it.  When the config
 * has no chat_template, a "chat_template.jinja" in the same folder is used if
 * present (newer Hugging Face repositories ship the template that way).
 * On failure *out is left zeroed. */
int  si_hf_vocab_load(const char *tokenizer_json, const char *tokenizer_config_json,
                      si_hf_vocab *out, si_err *err);

/* Pads tokens with "[PAD<id>]" unused entries up to n (no-op if already >= n). */
int  si_hf_vocab_pad(si_hf_vocab *v, uint32_t n, si_err *err);

/* Writes the llama.cpp tokenizer keys: tokenizer.ggml.model="gpt2", .pre,
 * .tokens, .token_type, .merges, .bos_token_id, .eos_token_id (each when
 * >= 0), .padding_token_id (when >= 0), .add_bos_token, and
 * tokenizer.chat_template (when present). */
int  si_hf_vocab_write_gguf(const si_hf_vocab *v, si_gguf_writer *w, si_err *err);

/* A minimal byte-level vocabulary for synthetic models: the 256 byte symbols
 * in GPT-2 bytes_to_unicode order (ids 0..255), a few hundred merges learnt
 * by BPE training on a short built-in English text (each merge adds its
 * merged string as the next token, unless an earlier merge already spelled
 * it), then <|endoftext|>, <|im_start|>, <|im_end|> (control) and <think>,
 * </think> (user-defined).  bos = pad = <|endoftext|>, eos = <|im_end|>,
 * pre = "qwen35", and a small ChatML chat template. */
int  si_hf_vocab_minimal(si_hf_vocab *out, si_err *err);

/* Id of the token whose text is exactly `text`, or -1. Linear search. */
int32_t si_hf_vocab_find(const si_hf_vocab *v, const char *text);

void si_hf_vocab_free(si_hf_vocab *v);   /* NULL-safe; leaves *v zeroed */

#endif /* SI_CORE_HF_VOCAB_H */
