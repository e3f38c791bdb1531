/* core/hf_vocab.c — Hugging Face tokenizer.json reader (byte-level BPE) and
 * its llama.cpp GGUF tokenizer keys; see hf_vocab.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hf_vocab.h"

/* Ids above this are refused: a real vocabulary is < 1M tokens, and the
 * bound keeps a corrupt id from turning into a multi-GB allocation. */
#define MAX_TOKEN_ID (1u << 24)

/* ---- small helpers ------------------------------------------------------ */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static char *pad_name(uint32_t id)
{
    char buf[32];
    snprintf(buf, sizeof buf, "[PAD%" PRIu32 "]", id);
    return dup_str(buf);
}

/* Reads a whole file into a NUL-terminated buffer. */
static int read_file(const char *path, char **out, size_t *len, si_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return si_err_set(err, errno == ENOENT ? SI_ENOTFOUND : SI_EIO,
                          "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return si_err_set(err, SI_EIO, "%s: cannot seek: %s", path, strerror(errno));
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return si_err_set(err, SI_EIO, "%s: cannot size: %s", path, strerror(errno));
    }
    char *buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        fclose(f);
        return si_err_set(err, SI_ENOMEM, "%s: out of memory for %ld bytes", path, size);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    int rerr = ferror(f);
    fclose(f);
    if (got != (size_t)size || rerr) {
        free(buf);
        return si_err_set(err, SI_EIO, "%s: short read (%zu of %ld bytes)", path, got, size);
    }
    buf[size] = '\0';
    *out = buf;
    *len = (size_t)size;
    return SI_OK;
}

static int parse_json_file(const char *path, cJSON **out, si_err *err)
{
    char *text;
    size_t len;
    int rc = read_file(path, &text, &len, err);
    if (rc != SI_OK)
        return rc;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root == NULL) {
        size_t at = end != NULL && end >= text ? (size_t)(end - text) : 0;
        free(text);
        return si_err_set(err, SI_EFORMAT, "%s: invalid JSON near byte %zu", path, at);
    }
    free(text);
    *out = root;
    return SI_OK;
}

/* A JSON number that is a whole id in [0, MAX_TOKEN_ID). */
static bool json_id(const cJSON *n, uint32_t *id)
{
    if (!cJSON_IsNumber(n))
        return false;
    double d = n->valuedouble;
    if (!(d >= 0 && d < (double)MAX_TOKEN_ID) || d != (double)(uint32_t)d)
        return false;
    *id = (uint32_t)d;
    return true;
}

/* ---- pre-tokenizer name -------------------------------------------------- */

/* First Split regex anywhere inside a pre_tokenizer description. */
static const char *find_split_regex(const cJSON *pt)
{
    if (!cJSON_IsObject(pt))
        return NULL;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
    if (cJSON_IsObject(pat)) {
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        if (cJSON_IsString(re))
            return re->valuestring;
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    const cJSON *it;
    cJSON_ArrayForEach(it, seq) {
        const char *r = find_split_regex(it);
        if (r != NULL)
            return r;
    }
    return NULL;
}

/* The llama.cpp pre-tokenizer whose regex the Split pattern matches.  Qwen3.5
 * folds combining marks into letter runs; Qwen2/3 split digits one by one
 * (GPT-4-style tokenizers use \p{N}{1,3}). */
static const char *pre_name(const char *re)
{
    if (re == NULL)
        return "default";
    if (strstr(re, "[\\p{L}\\p{M}]+") != NULL)
        return "qwen35";
    if (strstr(re, "\\p{N}") != NULL && strstr(re, "\\p{N}{1,3}") == NULL &&
        strstr(re, "\\p{L}+") != NULL)
        return "qwen2";
    return "default";
}

/* ---- loading -------------------------------------------------------------- */

static int grow_tokens(si_hf_vocab *v, uint32_t n, si_err *err)
{
    if (n <= v->n_tokens)
        return SI_OK;
    char **t = realloc(v->tokens, (size_t)n * sizeof *t);
    if (t == NULL)
        return si_err_set(err, SI_ENOMEM, "vocabulary: out of memory for %" PRIu32 " tokens", n);
    v->tokens = t;
    int32_t *ty = realloc(v->token_type, (size_t)n * sizeof *ty);
    if (ty == NULL)
        return si_err_set(err, SI_ENOMEM, "vocabulary: out of memory for %" PRIu32 " tokens", n);
    v->token_type = ty;
    for (uint32_t i = v->n_tokens; i < n; i++) {
        t[i] = NULL;
        ty[i] = SI_TOKEN_UNUSED;
    }
    v->n_tokens = n;
    return SI_OK;
}

static int set_token(si_hf_vocab *v, uint32_t id, const char *text, int32_t type, si_err *err)
{
    char *s = dup_str(text);
    if (s == NULL)
        return si_err_set(err, SI_ENOMEM, "vocabulary: out of memory");
    free(v->tokens[id]);
    v->tokens[id] = s;
    v->token_type[id] = type;
    return SI_OK;
}

static int load_merges(const cJSON *merges, const char *path, si_hf_vocab *v, si_err *err)
{
    if (merges == NULL)
        return SI_OK;   /* a BPE model without merges is odd but valid */
    if (!cJSON_IsArray(merges))
        return si_err_set(err, SI_EFORMAT, "%s: model.merges: not an array", path);
    int n = cJSON_GetArraySize(merges);
    v->merges = calloc(n > 0 ? (size_t)n : 1, sizeof *v->merges);
    if (v->merges == NULL)
        return si_err_set(err, SI_ENOMEM, "%s: out of memory for %d merges", path, n);
    const cJSON *m;
    uint32_t i = 0;
    cJSON_ArrayForEach(m, merges) {
        char *s = NULL;
        if (cJSON_IsString(m)) {
            if (strchr(m->valuestring, ' ') == NULL)
                return si_err_set(err, SI_EFORMAT, "%s: model.merges[%" PRIu32 "]: "
                                  "\"%s\" is not \"left right\"", path, i, m->valuestring);
            s = dup_str(m->valuestring);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            const char *a = m->child->valuestring, *b = m->child->next->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            s = malloc(la + lb + 2);
            if (s != NULL) {
                memcpy(s, a, la);
                s[la] = ' ';
                memcpy(s + la + 1, b, lb + 1);
            }
        } else {
            return si_err_set(err, SI_EFORMAT, "%s: model.merges[%" PRIu32 "]: "
                              "neither a string nor a pair of strings", path, i);
        }
        if (s == NULL)
            return si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
        v->merges[i++] = s;
        v->n_merges = i;
    }
    return SI_OK;
}

static int load_tokenizer_json(const cJSON *root, const char *path, si_hf_vocab *v, si_err *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model))
        return si_err_set(err, SI_EFORMAT, "%s: no \"model\" object", path);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE") != 0)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: model.type \"%s\": only BPE is supported",
                          path, type->valuestring);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return si_err_set(err, SI_EFORMAT, "%s: model.vocab: missing or not an object", path);
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added != NULL && !cJSON_IsArray(added) && !cJSON_IsNull(added))
        return si_err_set(err, SI_EFORMAT, "%s: added_tokens: not an array", path);

    /* Pass 1: the largest id decides the table size. */
    uint32_t n = 1, id;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!json_id(it, &id))
            return si_err_set(err, SI_EFORMAT, "%s: model.vocab: token \"%s\": "
                              "id is not an integer in [0, %u)", path, it->string, MAX_TOKEN_ID);
        if (id + 1 > n)
            n = id + 1;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *jid = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!json_id(jid, &id) || !cJSON_IsString(content))
            return si_err_set(err, SI_EFORMAT, "%s: added_tokens: entry without a valid "
                              "\"id\" and \"content\"", path);
        if (id + 1 > n)
            n = id + 1;
    }
    int rc = grow_tokens(v, n, err);
    if (rc != SI_OK)
        return rc;

    /* Pass 2: fill.  Added tokens override a vocab entry with the same id. */
    cJSON_ArrayForEach(it, vocab) {
        id = 0;
        json_id(it, &id);   /* validated in pass 1 */
        if ((rc = set_token(v, id, it->string, SI_TOKEN_NORMAL, err)) != SI_OK)
            return rc;
    }
    cJSON_ArrayForEach(it, added) {
        id = 0;
        json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), &id);
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        rc = set_token(v, id, content, special ? SI_TOKEN_CONTROL : SI_TOKEN_USER_DEFINED, err);
        if (rc != SI_OK)
            return rc;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (v->tokens[i] == NULL) {
            if ((v->tokens[i] = pad_name(i)) == NULL)
                return si_err_set(err, SI_ENOMEM, "vocabulary: out of memory");
            v->token_type[i] = SI_TOKEN_UNUSED;
        }
    }

    if ((rc = load_merges(cJSON_GetObjectItemCaseSensitive(model, "merges"), path, v, err)) != SI_OK)
        return rc;

    v->pre = dup_str(pre_name(find_split_regex(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"))));
    if (v->pre == NULL)
        return si_err_set(err, SI_ENOMEM, "vocabulary: out of memory");
    return SI_OK;
}

/* A tokenizer_config.json special token: "text", {"content": "text"} or null. */
static const char *config_token_text(const cJSON *cfg, const char *key)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(t))
        return t->valuestring;
    if (cJSON_IsObject(t)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, "content");
        if (cJSON_IsString(c))
            return c->valuestring;
    }
    return NULL;
}

static int32_t config_token_id(const si_hf_vocab *v, const cJSON *cfg, const char *key)
{
    const char *text = config_token_text(cfg, key);
    return text != NULL ? si_hf_vocab_find(v, text) : -1;
}

/* The template string: a plain string, or a list of {name, template} where
 * the one named "default" wins (else the first). */
static const char *config_template(const cJSON *cfg)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(t))
        return t->valuestring;
    const char *first = NULL;
    const cJSON *it;
    if (!cJSON_IsArray(t))
        return NULL;
    cJSON_ArrayForEach(it, t) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsString(tpl))
            continue;
        if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
            return tpl->valuestring;
        if (first == NULL)
            first = tpl->valuestring;
    }
    return first;
}

/* chat_template.jinja in the folder of `config_path`, or NULL. */
static char *sibling_template(const char *config_path)
{
    const char *slash = strrchr(config_path, '/');
    size_t dir = slash != NULL ? (size_t)(slash - config_path) + 1 : 0;
    static const char name[] = "chat_template.jinja";
    char *p = malloc(dir + sizeof name);
    if (p == NULL)
        return NULL;
    memcpy(p, config_path, dir);
    memcpy(p + dir, name, sizeof name);
    char *text = NULL;
    size_t len;
    if (read_file(p, &text, &len, NULL) != SI_OK)
        text = NULL;
    free(p);
    return text;
}

static int load_config(const char *path, si_hf_vocab *v, si_err *err)
{
    cJSON *cfg;
    int rc = parse_json_file(path, &cfg, err);
    if (rc != SI_OK)
        return rc;
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return si_err_set(err, SI_EFORMAT, "%s: not a JSON object", path);
    }
    v->bos_id = config_token_id(v, cfg, "bos_token");
    v->eos_id = config_token_id(v, cfg, "eos_token");
    v->pad_id = config_token_id(v, cfg, "pad_token");
    v->add_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token"));
    const char *tpl = config_template(cfg);
    if (tpl != NULL) {
        v->chat_template = dup_str(tpl);
        if (v->chat_template == NULL)
            rc = si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
    } else {
        v->chat_template = sibling_template(path);
    }
    cJSON_Delete(cfg);
    return rc;
}

int si_hf_vocab_load(const char *tokenizer_json, const char *tokenizer_config_json,
                     si_hf_vocab *out, si_err *err)
{
    if (out == NULL || tokenizer_json == NULL)
        return si_err_set(err, SI_EINVAL, "si_hf_vocab_load: NULL argument");
    memset(out, 0, sizeof *out);
    out->bos_id = out->eos_id = out->pad_id = -1;

    cJSON *root;
    int rc = parse_json_file(tokenizer_json, &root, err);
    if (rc != SI_OK)
        return rc;
    if (!cJSON_IsObject(root))
        rc = si_err_set(err, SI_EFORMAT, "%s: not a JSON object", tokenizer_json);
    else
        rc = load_tokenizer_json(root, tokenizer_json, out, err);
    cJSON_Delete(root);
    if (rc == SI_OK && tokenizer_config_json != NULL)
        rc = load_config(tokenizer_config_json, out, err);
    if (rc != SI_OK)
        si_hf_vocab_free(out);
    return rc;
}

/* ---- padding, lookup, free ---------------------------------------------- */

int si_hf_vocab_pad(si_hf_vocab *v, uint32_t n, si_err *err)
{
    if (v == NULL)
        return si_err_set(err, SI_EINVAL, "si_hf_vocab_pad: NULL vocabulary");
    if (n <= v->n_tokens)
        return SI_OK;
    if (n > MAX_TOKEN_ID)
        return si_err_set(err, SI_ERANGE, "vocabulary: cannot pad to %" PRIu32 " tokens "
                          "(limit %u)", n, MAX_TOKEN_ID);
    uint32_t old = v->n_tokens;
    int rc = grow_tokens(v, n, err);
    if (rc != SI_OK)
        return rc;
    for (uint32_t i = old; i < n; i++) {
        if ((v->tokens[i] = pad_name(i)) == NULL) {
            v->n_tokens = i;   /* keep the table consistent for free() */
            return si_err_set(err, SI_ENOMEM, "vocabulary: out of memory");
        }
    }
    return SI_OK;
}

int32_t si_hf_vocab_find(const si_hf_vocab *v, const char *text)
{
    if (v == NULL || text == NULL)
        return -1;
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->tokens[i] != NULL && strcmp(v->tokens[i], text) == 0)
            return (int32_t)i;
    return -1;
}

void si_hf_vocab_free(si_hf_vocab *v)
{
    if (v == NULL)
        return;
    for (uint32_t i = 0; v->tokens != NULL && i < v->n_tokens; i++)
        free(v->tokens[i]);
    for (uint32_t i = 0; v->merges != NULL && i < v->n_merges; i++)
        free(v->merges[i]);
    free(v->tokens);
    free(v->token_type);
    free(v->merges);
    free(v->pre);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->pad_id = -1;
}

/* ---- GGUF keys ------------------------------------------------------------ */

int si_hf_vocab_write_gguf(const si_hf_vocab *v, si_gguf_writer *w, si_err *err)
{
    if (v == NULL || w == NULL || v->n_tokens == 0)
        return si_err_set(err, SI_EINVAL, "si_hf_vocab_write_gguf: empty vocabulary");
    int rc = si_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (rc == SI_OK)
        rc = si_gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre != NULL ? v->pre : "default");
    if (rc == SI_OK)
        rc = si_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens",
                                        (const char *const *)v->tokens, v->n_tokens);
    if (rc == SI_OK)
        rc = si_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SI_GGUF_I32,
                                    v->token_type, v->n_tokens);
    if (rc == SI_OK)
        rc = si_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges",
                                        (const char *const *)v->merges, v->n_merges);
    if (rc == SI_OK && v->bos_id >= 0)
        rc = si_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos_id);
    if (rc == SI_OK && v->eos_id >= 0)
        rc = si_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    if (rc == SI_OK && v->pad_id >= 0)
        rc = si_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad_id);
    if (rc == SI_OK)
        rc = si_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    if (rc == SI_OK && v->chat_template != NULL)
        rc = si_gguf_writer_set_str(w, "tokenizer.chat_template", v->chat_template);
    if (rc != SI_OK) {
        const char *m = si_gguf_writer_error(w);
        return si_err_set(err, rc, "tokenizer keys: %s", m != NULL ? m : si_strerror(rc));
    }
    return SI_OK;
}
