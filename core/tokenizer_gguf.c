/* core/tokenizer_gguf.c — builds a tokenizer from a GGUF's tokenizer.ggml.* keys
 * (llama.cpp's layout), through the public si_tokenizer_new.  Strings are
 * borrowed from the mapping for the build only: the tokenizer copies them.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

/* Reads an array of strings into pointer + length arrays (borrowing the
 * mapping).  A missing key gives n = 0 when optional. */
static int gguf_strings(const si_gguf *g, const char *key, bool required, uint32_t *n,
                        const char ***strs, uint32_t **lens, si_err *err)
{
    *n = 0;
    *strs = NULL;
    *lens = NULL;
    const si_gguf_value *v = si_gguf_get(g, key);
    if (v == NULL)
        return required ? si_err_set(err, SI_ENOTFOUND, "%s: missing", key) : SI_OK;
    if (v->type != SI_GGUF_ARRAY || v->v.arr.type != SI_GGUF_STRING)
        return si_err_set(err, SI_EFORMAT, "%s: not an array of strings", key);
    if (v->v.arr.n > INT32_MAX)
        return si_err_set(err, SI_ERANGE, "%s: %llu entries is too many", key,
                          (unsigned long long)v->v.arr.n);
    uint32_t cnt = (uint32_t)v->v.arr.n;
    *strs = malloc((cnt ? cnt : 1) * sizeof **strs);
    *lens = malloc((cnt ? cnt : 1) * sizeof **lens);
    if (*strs == NULL || *lens == NULL)
        return si_err_set(err, SI_ENOMEM, "%s: out of memory", key);
    for (uint32_t i = 0; i < cnt; i++) {
        si_gguf_value e;
        int rc = si_gguf_arr_get(v, i, &e);
        if (rc != SI_OK || e.type != SI_GGUF_STRING || e.v.s.len >= UINT32_MAX)
            return si_err_set(err, SI_EFORMAT, "%s[%u]: unreadable string", key, i);
        (*strs)[i] = e.v.s.ptr;
        (*lens)[i] = (uint32_t)e.v.s.len;
    }
    *n = cnt;
    return SI_OK;
}

static int gguf_id(const si_gguf *g, const char *key, int32_t *out, si_err *err)
{
    *out = -1;
    const si_gguf_value *v = si_gguf_get(g, key);
    if (v == NULL)
        return SI_OK;
    if (v->type == SI_GGUF_U8 || v->type == SI_GGUF_U16 || v->type == SI_GGUF_U32 || v->type == SI_GGUF_U64) {
        if (v->v.u <= INT32_MAX)
            *out = (int32_t)v->v.u;
        else if (v->v.u != UINT32_MAX && v->v.u != UINT64_MAX)   /* "none" markers */
            return si_err_set(err, SI_ERANGE, "%s: %llu out of range", key, (unsigned long long)v->v.u);
        return SI_OK;
    }
    if (v->type == SI_GGUF_I8 || v->type == SI_GGUF_I16 || v->type == SI_GGUF_I32 || v->type == SI_GGUF_I64) {
        if (v->v.i < -1 || v->v.i > INT32_MAX)
            return si_err_set(err, SI_ERANGE, "%s: %lld out of range", key, (long long)v->v.i);
        *out = (int32_t)v->v.i;
        return SI_OK;
    }
    return si_err_set(err, SI_EFORMAT, "%s: not an integer", key);
}

static int gguf_string(const si_gguf *g, const char *key, char *buf, size_t cap, si_err *err)
{
    const si_gguf_value *v = si_gguf_get(g, key);
    if (v == NULL)
        return si_err_set(err, SI_ENOTFOUND, "%s: missing", key);
    if (v->type != SI_GGUF_STRING)
        return si_err_set(err, SI_EFORMAT, "%s: not a string", key);
    size_t n = v->v.s.len < cap - 1 ? (size_t)v->v.s.len : cap - 1;
    memcpy(buf, v->v.s.ptr, n);
    buf[n] = '\0';
    return SI_OK;
}

int si_tokenizer_from_gguf(const si_gguf *g, si_tokenizer **out, si_err *err)
{
    *out = NULL;
    char model[64], pre[64];
    int rc = gguf_string(g, "tokenizer.ggml.model", model, sizeof model, err);
    if (rc != SI_OK)
        return rc;
    if (strcmp(model, "gpt2") != 0)
        return si_err_set(err, SI_EUNSUPPORTED,
                          "tokenizer.ggml.model: '%s' is not supported (only byte-level BPE 'gpt2')", model);
    if ((rc = gguf_string(g, "tokenizer.ggml.pre", pre, sizeof pre, err)) != SI_OK)
        return rc;

    si_tok_spec spec = { .pre = pre };
    const char **tokens = NULL, **merges = NULL;
    uint32_t *tok_len = NULL, *merge_len = NULL;
    int32_t *types = NULL;
    rc = gguf_strings(g, "tokenizer.ggml.tokens", true, &spec.n_tokens, &tokens, &tok_len, err);
    if (rc == SI_OK)
        rc = gguf_strings(g, "tokenizer.ggml.merges", true, &spec.n_merges, &merges, &merge_len, err);
    const si_gguf_value *tv = si_gguf_get(g, "tokenizer.ggml.token_type");
    if (rc == SI_OK && tv != NULL) {
        if (tv->type != SI_GGUF_ARRAY || tv->v.arr.n != spec.n_tokens)
            rc = si_err_set(err, SI_EFORMAT, "tokenizer.ggml.token_type: not an array of %u entries",
                            spec.n_tokens);
        else if ((types = malloc(spec.n_tokens * sizeof *types)) == NULL)
            rc = si_err_set(err, SI_ENOMEM, "tokenizer.ggml.token_type: out of memory");
        for (uint32_t i = 0; rc == SI_OK && i < spec.n_tokens; i++) {
            si_gguf_value e;
            if (si_gguf_arr_get(tv, i, &e) != SI_OK)
                rc = si_err_set(err, SI_EFORMAT, "tokenizer.ggml.token_type[%u]: unreadable", i);
            else if (e.type == SI_GGUF_I8 || e.type == SI_GGUF_I16 || e.type == SI_GGUF_I32 || e.type == SI_GGUF_I64)
                types[i] = (e.v.i >= 0 && e.v.i <= 6) ? (int32_t)e.v.i : -1;
            else if (e.type == SI_GGUF_U8 || e.type == SI_GGUF_U16 || e.type == SI_GGUF_U32 || e.type == SI_GGUF_U64)
                types[i] = e.v.u <= 6 ? (int32_t)e.v.u : -1;
            else
                rc = si_err_set(err, SI_EFORMAT, "tokenizer.ggml.token_type: not integers");
        }
    }
    if (rc == SI_OK) rc = gguf_id(g, "tokenizer.ggml.bos_token_id", &spec.bos_id, err);
    if (rc == SI_OK) rc = gguf_id(g, "tokenizer.ggml.eos_token_id", &spec.eos_id, err);
    if (rc == SI_OK) rc = gguf_id(g, "tokenizer.ggml.eot_token_id", &spec.eot_id, err);
    if (rc == SI_OK) {
        /* An id beyond the vocabulary would be refused: drop it instead, as
         * some converters write placeholder ids. */
        if (spec.bos_id >= (int32_t)spec.n_tokens) spec.bos_id = -1;
        if (spec.eos_id >= (int32_t)spec.n_tokens) spec.eos_id = -1;
        if (spec.eot_id >= (int32_t)spec.n_tokens) spec.eot_id = -1;
        spec.tokens = tokens;
        spec.token_len = tok_len;
        spec.token_type = types;
        spec.merges = merges;
        spec.merge_len = merge_len;
        spec.nfc = false;
        rc = si_tokenizer_new(&spec, out, err);
    }
    free(tokens);
    free(tok_len);
    free(merges);
    free(merge_len);
    free(types);
    return rc;
}
