/* core/tokenizer.h — byte-level BPE tokenizer (GPT-2 / Qwen family).
 *
 * Text -> ids:  1. added tokens (control and user-defined) are cut out as
 *                  whole strings, leftmost first, longest first at a position;
 *               2. each remaining fragment is NFC-normalised when asked;
 *               3. the pre-tokenizer splits it into words (core/pretok.c,
 *                  an exact hand-written matcher for the split regexes);
 *               4. each word's bytes become GPT-2 byte symbols and are
 *                  merged pair by pair, lowest merge rank first (rank = the
 *                  merge's POSITION in the merges list; ties: leftmost).
 * Ids -> text:  each token's bytes (byte-level decoded, precomputed at load);
 *               the streaming si_detok never emits half a UTF-8 character.
 *
 * Token types are llama.cpp's (SI_TOKEN_* in core/hf_vocab.h): 1 normal,
 * 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
 *
 * A built si_tokenizer is immutable: every function taking a const
 * si_tokenizer * may run concurrently from several threads.
 */
#ifndef SI_CORE_TOKENIZER_H
#define SI_CORE_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sparkinfer/plugin.h>   /* si_gguf typedef */
#include <sparkinfer/status.h>

typedef struct si_tokenizer si_tokenizer;

/* Everything here is borrowed during si_tokenizer_new only (it copies). */
typedef struct si_tok_spec {
    uint32_t           n_tokens;
    const char *const *tokens;      /* [n_tokens] token text as stored (GPT-2 byte-to-unicode form) */
    const uint32_t    *token_len;   /* [n_tokens] byte lengths, or NULL: NUL-terminated */
    const int32_t     *token_type;  /* [n_tokens] SI_TOKEN_*, or NULL: all normal */
    uint32_t           n_merges;
    const char *const *merges;      /* [n_merges] "left right"; rank = index */
    const uint32_t    *merge_len;   /* [n_merges] byte lengths, or NULL: NUL-terminated */
    const char        *pre;         /* pre-tokenizer: "qwen2", "qwen35", "gpt2"/"gpt-2" */
    int32_t            bos_id;      /* -1: none */
    int32_t            eos_id;      /* -1: none */
    int32_t            eot_id;      /* -1: none (end of turn, also end-of-generation) */
    bool               nfc;         /* NFC-normalise text fragments before splitting */
} si_tok_spec;

/* Validates and builds.  Rejects (SI_EFORMAT, naming the item) a merge
 * whose halves or result are not tokens, a byte symbol missing from the
 * vocabulary, ids out of range; an unknown `pre` is SI_EUNSUPPORTED naming
 * it.  Duplicate token texts are allowed: lookups give the lowest id. */
int  si_tokenizer_new(const si_tok_spec *spec, si_tokenizer **out, si_err *err);

/* From a GGUF's tokenizer.ggml.* keys: model (must be "gpt2"), pre, tokens,
 * token_type, merges, bos/eos/eot_token_id.  No NFC (llama.cpp applies
 * none).  Copies everything: the si_gguf may be closed afterwards. */
int  si_tokenizer_from_gguf(const si_gguf *g, si_tokenizer **out, si_err *err);

void si_tokenizer_free(si_tokenizer *t);   /* NULL-safe */

uint32_t si_tokenizer_n_vocab(const si_tokenizer *t);
int32_t  si_tokenizer_bos(const si_tokenizer *t);   /* -1: none */
int32_t  si_tokenizer_eos(const si_tokenizer *t);   /* -1: none */
/* Longest decoded token in bytes: a buffer of this size + 4 always holds
 * what one si_detok_push can emit. */
size_t   si_tokenizer_max_token_bytes(const si_tokenizer *t);

/* ---- encoding ------------------------------------------------------------ */

/* What counts as an added token while encoding.  The values 0 and 1 are
 * `false` and `true` of a "parse special" flag. */
enum si_tok_special {
    SI_TOK_SPECIAL_NONE = 0,  /* all text is plain text (user input)                 */
    SI_TOK_SPECIAL_ALL  = 1,  /* control (and unknown) + user-defined tokens matched  */
    SI_TOK_SPECIAL_USER = 2,  /* only user-defined ones: llama.cpp's and HF's
                                 behaviour with parse_special = false                 */
};

/* A growable id vector the caller owns (zero-initialise; free(ids)). */
typedef struct si_tok_vec {
    int32_t *ids;
    size_t   n, cap;
} si_tok_vec;

/* Appends the ids of text[0, len) to v.  Any bytes are accepted: invalid
 * UTF-8 bytes are kept (each is its own byte symbol), so decoding the
 * result gives back exactly the input (NFC aside).  No BOS/EOS is added. */
int  si_tokenize_append(const si_tokenizer *t, const char *text, size_t len,
                        enum si_tok_special special, si_tok_vec *v, si_err *err);
/* Same, into a fresh array *ids (caller free()s; NULL when *n_ids is 0). */
int  si_tokenize(const si_tokenizer *t, const char *text, size_t len,
                 enum si_tok_special special, int32_t **ids, size_t *n_ids, si_err *err);

/* Id of the token whose stored text is exactly text[0, len), or -1. */
int32_t si_token_lookup_n(const si_tokenizer *t, const char *text, size_t len);
int32_t si_token_lookup(const si_tokenizer *t, const char *text);   /* NUL-terminated */

/* ---- decoding ------------------------------------------------------------ */

/* The raw bytes of one token (byte-level decoded; control and user-defined
 * tokens give their text).  Borrowed, valid while t lives, not
 * NUL-terminated.  SI_ERANGE for a bad id. */
int  si_token_bytes(const si_tokenizer *t, int32_t id, const char **bytes, size_t *len);
/* The token text as stored (e.g. "Ġthe"), NUL-terminated; NULL for a bad id. */
const char *si_token_text(const si_tokenizer *t, int32_t id);
int32_t     si_token_type(const si_tokenizer *t, int32_t id);   /* 0 for a bad id */
/* End of generation: eos, eot, and the tokens named <|endoftext|>,
 * <|im_end|>, <|eot_id|>, <|end|>, <end_of_turn>, <|fim_pad|>,
 * <|repo_name|>, <|file_sep|> when the vocabulary has them. */
bool si_token_is_eog(const si_tokenizer *t, int32_t id);

/* Whole-sequence decode into a fresh NUL-terminated buffer (free()).
 * Control tokens are written only when render_special. */
int  si_detokenize(const si_tokenizer *t, const int32_t *ids, size_t n, bool render_special,
                   char **out, size_t *out_len, si_err *err);

/* Streaming decode.  Bytes of a UTF-8 character split across tokens are held
 * back until the character is complete; a sequence that turns out invalid is
 * passed through unchanged as soon as that is known; flush emits what is
 * left.  So the concatenated output equals si_detokenize's. */
typedef struct si_detok {
    const si_tokenizer *tok;
    bool                render_special;
    unsigned char       pend[4];   /* a started, still valid UTF-8 sequence */
    unsigned            n_pend;
} si_detok;

void si_detok_init(si_detok *d, const si_tokenizer *t, bool render_special);
/* Writes the complete text that `id` finishes into out (not NUL-terminated)
 * and its length into *len.  SI_ERANGE for a bad id or when cap is too small
 * for this token (nothing is consumed then); a cap of
 * si_tokenizer_max_token_bytes() + 4 always suffices. */
int  si_detok_push(si_detok *d, int32_t id, char *out, size_t cap, size_t *len, si_err *err);
/* Emits the held-back bytes (at most 3; cap >= 4 always suffices). */
void si_detok_flush(si_detok *d, char *out, size_t cap, size_t *len);

/* ---- pre-tokenizer (core/pretok.c; public for tests) --------------------- */

typedef enum si_pretok_kind {
    SI_PRETOK_GPT2   = 1,
    SI_PRETOK_QWEN2  = 2,
    SI_PRETOK_QWEN35 = 3,
} si_pretok_kind;

/* "gpt2"/"gpt-2", "qwen2", "qwen35" -> kind; SI_EUNSUPPORTED otherwise. */
int  si_pretok_from_name(const char *name, si_pretok_kind *out, si_err *err);

/* Called once per word [start, end) (byte offsets, start < end, in order,
 * covering the whole text).  A non-zero return stops the split and is
 * returned by si_pretok_split. */
typedef int (*si_pretok_cb)(void *ctx, size_t start, size_t end);

/* Splits like the kind's regex with find-all semantics (PCRE/Oniguruma
 * leftmost-first alternation, greedy quantifiers with backtracking).  An
 * invalid UTF-8 byte counts as one "other symbol" character (like U+FFFD). */
int  si_pretok_split(si_pretok_kind kind, const char *text, size_t len,
                     si_pretok_cb cb, void *ctx);

#endif /* SI_CORE_TOKENIZER_H */
