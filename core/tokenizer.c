/* core/tokenizer.c — byte-level BPE: vocabulary tables, encoding, decoding.
 *
 * Tables built once by si_tokenizer_new (then read-only):
 *   - token text arena + open-addressing hash text -> id (first id wins);
 *   - decoded-bytes arena (what each token means as raw bytes);
 *   - merge table (left id, right id) -> (rank, result id), rank being the
 *     merge's position in the list: the vocabulary ids themselves carry no
 *     order (a Qwen3 fact "id = 256 + rank" is not assumed);
 *   - byte_id[256]: the token of each byte's GPT-2 symbol;
 *   - the added tokens, bucketed by first byte, longest first.
 * Encoding a word: its bytes become byte tokens, then the lowest-ranked
 * adjacent pair is merged until none is in the table, using a binary heap
 * of candidate pairs with lazy invalidation (O(n log n) per word; long
 * runs of spaces or digits-free text stay fast).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "hf_vocab.h"   /* SI_TOKEN_* */
#include "tokenizer.h"

typedef struct merge_slot {
    uint64_t key;        /* left << 32 | right; EMPTY_KEY when free */
    uint32_t rank;
    int32_t  result;
} merge_slot;

#define EMPTY_KEY UINT64_MAX

typedef struct added_tok {
    int32_t  id;
    uint32_t len;
    uint8_t  type;
} added_tok;

#define MAX_EOG 16

struct si_tokenizer {
    uint32_t n_tokens;
    char     *text;          /* arena: token texts, each NUL-terminated */
    size_t   *text_off;      /* [n_tokens] */
    uint32_t *text_len;      /* [n_tokens] */
    char     *bytes;         /* arena: decoded bytes */
    size_t   *bytes_off;     /* [n_tokens] */
    uint32_t *bytes_len;     /* [n_tokens] */
    uint8_t  *type;          /* [n_tokens] SI_TOKEN_* (0..6) */
    size_t    max_bytes;

    int32_t  *tok_hash;      /* [tok_mask + 1] ids, -1 free */
    uint64_t  tok_mask;
    merge_slot *merge;       /* [merge_mask + 1] */
    uint64_t  merge_mask;

    int32_t   byte_id[256];
    si_pretok_kind pre;
    bool      nfc;
    int32_t   bos, eos, eot;

    added_tok *specials;      /* sorted: first byte, then length descending, then id */
    uint32_t  n_specials;
    uint32_t  spec_lo[257];  /* specials starting with byte b: [spec_lo[b], spec_lo[b+1]) */

    int32_t   eog[MAX_EOG];
    uint32_t  n_eog;
};

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------
 * Printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to
 * themselves; the other 68 bytes map, in increasing order, to U+0100.. */

static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

static uint32_t byte_to_cp(unsigned b)
{
    if (byte_is_printable(b))
        return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        k += !byte_is_printable(x);
    return 0x100 + k;
}

/* Inverse: -1 for a code point that is no byte's symbol. */
static int cp_to_byte(int32_t cp)
{
    if (cp < 0 || cp > 0x143)
        return -1;
    if (cp < 0x100)
        return byte_is_printable((unsigned)cp) ? cp : -1;
    uint32_t k = (uint32_t)cp - 0x100;
    for (unsigned b = 0; b < 256; b++)
        if (!byte_is_printable(b) && k-- == 0)
            return (int)b;
    return -1;
}

/* ---- hashing ---------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key *= 0x9E3779B97F4A7C15ull;
    return key ^ (key >> 31);
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

int32_t si_token_lookup_n(const si_tokenizer *t, const char *text, size_t len)
{
    uint64_t i = hash_bytes(text, len) & t->tok_mask;
    for (;; i = (i + 1) & t->tok_mask) {
        int32_t id = t->tok_hash[i];
        if (id < 0)
            return -1;
        if (t->text_len[id] == len && memcmp(t->text + t->text_off[id], text, len) == 0)
            return id;
    }
}

int32_t si_token_lookup(const si_tokenizer *t, const char *text)
{
    return si_token_lookup_n(t, text, strlen(text));
}

static const merge_slot *merge_find(const si_tokenizer *t, int32_t l, int32_t r)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint64_t i = hash_pair(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *s = &t->merge[i];
        if (s->key == key)
            return s;
        if (s->key == EMPTY_KEY)
            return NULL;
    }
}

/* ---- building ----------------------------------------------------------------- */

void si_tokenizer_free(si_tokenizer *t)
{
    if (t == NULL)
        return;
    free(t->text);
    free(t->text_off);
    free(t->text_len);
    free(t->bytes);
    free(t->bytes_off);
    free(t->bytes_len);
    free(t->type);
    free(t->tok_hash);
    free(t->merge);
    free(t->specials);
    free(t);
}

static int build_texts(si_tokenizer *t, const si_tok_spec *spec, si_err *err)
{
    size_t total = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        if (spec->tokens[i] == NULL)
            return si_err_set(err, SI_EINVAL, "tokenizer: token %u has no text", i);
        size_t n = spec->token_len ? spec->token_len[i] : strlen(spec->tokens[i]);
        if (n >= UINT32_MAX || total > SIZE_MAX - n - 1)
            return si_err_set(err, SI_ERANGE, "tokenizer: token %u: text too long", i);
        t->text_len[i] = (uint32_t)n;
        total += n + 1;
    }
    t->text = malloc(total);
    if (t->text == NULL)
        return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory for %zu bytes of token text", total);
    size_t off = 0;
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        t->text_off[i] = off;
        memcpy(t->text + off, spec->tokens[i], t->text_len[i]);
        off += t->text_len[i];
        t->text[off++] = '\0';
        int32_t ty = spec->token_type ? spec->token_type[i] : SI_TOKEN_NORMAL;
        if (ty < 0 || ty > 6)
            return si_err_set(err, SI_EFORMAT, "tokenizer: token %u ('%s'): bad token type %d",
                              i, t->text + t->text_off[i], ty);
        t->type[i] = (uint8_t)ty;
    }

    t->tok_mask = pow2_at_least((uint64_t)t->n_tokens * 2) - 1;
    t->tok_hash = malloc((t->tok_mask + 1) * sizeof *t->tok_hash);
    if (t->tok_hash == NULL)
        return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory for the token table");
    memset(t->tok_hash, 0xff, (t->tok_mask + 1) * sizeof *t->tok_hash);
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        const char *s = t->text + t->text_off[id];
        uint64_t h = hash_bytes(s, t->text_len[id]) & t->tok_mask;
        for (;; h = (h + 1) & t->tok_mask) {
            int32_t o = t->tok_hash[h];
            if (o < 0) {
                t->tok_hash[h] = (int32_t)id;
                break;
            }
            if (t->text_len[o] == t->text_len[id] && memcmp(t->text + t->text_off[o], s, t->text_len[id]) == 0)
                break;   /* duplicate text: the lower id stays */
        }
    }
    return SI_OK;
}

static int build_bytes(si_tokenizer *t, si_err *err)
{
    for (unsigned b = 0; b < 256; b++) {
        utf8proc_uint8_t u[4];
        utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)byte_to_cp(b), u);
        t->byte_id[b] = si_token_lookup_n(t, (const char *)u, (size_t)k);
        if (t->byte_id[b] < 0)
            return si_err_set(err, SI_EFORMAT,
                              "tokenizer: byte 0x%02x (symbol '%.*s') is not in the vocabulary",
                              b, (int)k, (const char *)u);
    }
    /* Decoded bytes are never longer than the text (every symbol is 1-2
     * UTF-8 bytes for 1 byte), so the text arena size bounds the arena. */
    size_t cap = t->text_off[t->n_tokens - 1] + t->text_len[t->n_tokens - 1] + 1;
    t->bytes = malloc(cap);
    if (t->bytes == NULL)
        return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory for decoded tokens");
    size_t off = 0;
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        const char *s = t->text + t->text_off[id];
        size_t n = t->text_len[id];
        t->bytes_off[id] = off;
        uint8_t ty = t->type[id];
        if (ty == SI_TOKEN_CONTROL || ty == SI_TOKEN_USER_DEFINED || ty == SI_TOKEN_UNKNOWN) {
            memcpy(t->bytes + off, s, n);   /* added tokens are stored as plain text */
            off += n;
        } else {
            for (size_t i = 0; i < n;) {
                utf8proc_int32_t cp;
                utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                                      (utf8proc_ssize_t)(n - i), &cp);
                int b = k > 0 ? cp_to_byte(cp) : -1;
                if (b >= 0) {
                    t->bytes[off++] = (char)b;
                    i += (size_t)k;
                } else {
                    /* Not a byte symbol: a non-byte-level token; its text is
                     * what it means. */
                    size_t m = k > 0 ? (size_t)k : 1;
                    memcpy(t->bytes + off, s + i, m);
                    off += m;
                    i += m;
                }
            }
        }
        t->bytes_len[id] = (uint32_t)(off - t->bytes_off[id]);
        if (t->bytes_len[id] > t->max_bytes)
            t->max_bytes = t->bytes_len[id];
    }
    return SI_OK;
}

static int build_merges(si_tokenizer *t, const si_tok_spec *spec, si_err *err)
{
    t->merge_mask = pow2_at_least((uint64_t)spec->n_merges * 2 + 1) - 1;
    t->merge = malloc((t->merge_mask + 1) * sizeof *t->merge);
    if (t->merge == NULL)
        return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory for %u merges", spec->n_merges);
    for (uint64_t i = 0; i <= t->merge_mask; i++)
        t->merge[i].key = EMPTY_KEY;

    char *cat = NULL;
    size_t cat_cap = 0;
    int rc = SI_OK;
    for (uint32_t r = 0; r < spec->n_merges && rc == SI_OK; r++) {
        const char *m = spec->merges[r];
        if (m == NULL) {
            rc = si_err_set(err, SI_EINVAL, "tokenizer: merge %u has no text", r);
            break;
        }
        size_t n = spec->merge_len ? spec->merge_len[r] : strlen(m);
        /* The separator is the first space after the first byte (a byte-level
         * token never holds a space: it is 'Ġ'). */
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (sp == NULL) {
            rc = si_err_set(err, SI_EFORMAT, "tokenizer: merge %u '%.*s': no space separator",
                            r, (int)(n > 64 ? 64 : n), m);
            break;
        }
        size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        int32_t l = si_token_lookup_n(t, m, nl);
        int32_t rt = si_token_lookup_n(t, sp + 1, nr);
        if (nl + nr > cat_cap) {
            free(cat);
            cat_cap = nl + nr + 64;
            cat = malloc(cat_cap);
            if (cat == NULL) {
                rc = si_err_set(err, SI_ENOMEM, "tokenizer: out of memory");
                break;
            }
        }
        memcpy(cat, m, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t res = si_token_lookup_n(t, cat, nl + nr);
        if (l < 0 || rt < 0 || res < 0) {
            rc = si_err_set(err, SI_EFORMAT, "tokenizer: merge %u '%.*s': %s is not a token", r,
                            (int)(n > 64 ? 64 : n), m,
                            l < 0 ? "the left part" : rt < 0 ? "the right part" : "the result");
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)rt;
        for (uint64_t i = hash_pair(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
            merge_slot *s = &t->merge[i];
            if (s->key == key)
                break;   /* a repeated merge keeps its first (better) rank */
            if (s->key == EMPTY_KEY) {
                s->key = key;
                s->rank = r;
                s->result = res;
                break;
            }
        }
    }
    free(cat);
    return rc;
}

static int cmp_special(const void *pa, const void *pb, const si_tokenizer *t)
{
    const added_tok *a = pa, *b = pb;
    unsigned char fa = (unsigned char)t->text[t->text_off[a->id]];
    unsigned char fb = (unsigned char)t->text[t->text_off[b->id]];
    if (fa != fb)
        return fa < fb ? -1 : 1;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* qsort has no context argument: a small insertion sort into place keeps
 * this free of globals (added tokens number in the tens to hundreds). */
static void sort_specials(si_tokenizer *t)
{
    for (uint32_t i = 1; i < t->n_specials; i++) {
        added_tok x = t->specials[i];
        uint32_t j = i;
        while (j > 0 && cmp_special(&t->specials[j - 1], &x, t) > 0) {
            t->specials[j] = t->specials[j - 1];
            j--;
        }
        t->specials[j] = x;
    }
}

static int build_specials(si_tokenizer *t, si_err *err)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        uint8_t ty = t->type[id];
        if ((ty == SI_TOKEN_CONTROL || ty == SI_TOKEN_USER_DEFINED || ty == SI_TOKEN_UNKNOWN) &&
            t->text_len[id] > 0)
            n++;
    }
    if (n > 0) {
        t->specials = malloc(n * sizeof *t->specials);
        if (t->specials == NULL)
            return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory");
    }
    for (uint32_t id = 0; id < t->n_tokens; id++) {
        uint8_t ty = t->type[id];
        if ((ty == SI_TOKEN_CONTROL || ty == SI_TOKEN_USER_DEFINED || ty == SI_TOKEN_UNKNOWN) &&
            t->text_len[id] > 0)
            t->specials[t->n_specials++] = (added_tok){ (int32_t)id, t->text_len[id], ty };
    }
    sort_specials(t);
    uint32_t j = 0;
    for (unsigned b = 0; b <= 256; b++) {
        while (j < t->n_specials && (unsigned char)t->text[t->text_off[t->specials[j].id]] < b)
            j++;
        t->spec_lo[b] = j;
    }
    t->spec_lo[256] = t->n_specials;
    return SI_OK;
}

static void add_eog(si_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens || t->n_eog == MAX_EOG)
        return;
    for (uint32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    t->eog[t->n_eog++] = id;
}

static void build_eog(si_tokenizer *t)
{
    static const char *const names[] = {
        "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
        "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    };
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        add_eog(t, si_token_lookup(t, names[i]));
}

int si_tokenizer_new(const si_tok_spec *spec, si_tokenizer **out, si_err *err)
{
    *out = NULL;
    if (spec == NULL || spec->n_tokens == 0 || spec->tokens == NULL ||
        (spec->n_merges > 0 && spec->merges == NULL))
        return si_err_set(err, SI_EINVAL, "tokenizer: empty vocabulary");
    if (spec->n_tokens > INT32_MAX)
        return si_err_set(err, SI_ERANGE, "tokenizer: %u tokens is too many", spec->n_tokens);
    const int32_t ids[3] = { spec->bos_id, spec->eos_id, spec->eot_id };
    static const char *const id_names[3] = { "bos", "eos", "eot" };
    for (int i = 0; i < 3; i++)
        if (ids[i] < -1 || (ids[i] >= 0 && (uint32_t)ids[i] >= spec->n_tokens))
            return si_err_set(err, SI_ERANGE, "tokenizer: %s id %d outside the %u tokens",
                              id_names[i], ids[i], spec->n_tokens);
    si_pretok_kind pre;
    int rc = si_pretok_from_name(spec->pre, &pre, err);
    if (rc != SI_OK)
        return rc;

    si_tokenizer *t = calloc(1, sizeof *t);
    if (t == NULL)
        return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory");
    t->n_tokens = spec->n_tokens;
    t->pre = pre;
    t->nfc = spec->nfc;
    t->bos = spec->bos_id;
    t->eos = spec->eos_id;
    t->eot = spec->eot_id;
    size_t n = spec->n_tokens;
    t->text_off = malloc(n * sizeof *t->text_off);
    t->text_len = malloc(n * sizeof *t->text_len);
    t->bytes_off = malloc(n * sizeof *t->bytes_off);
    t->bytes_len = malloc(n * sizeof *t->bytes_len);
    t->type = malloc(n);
    if (!t->text_off || !t->text_len || !t->bytes_off || !t->bytes_len || !t->type) {
        si_tokenizer_free(t);
        return si_err_set(err, SI_ENOMEM, "tokenizer: out of memory for %u tokens", spec->n_tokens);
    }
    if ((rc = build_texts(t, spec, err)) != SI_OK || (rc = build_bytes(t, err)) != SI_OK ||
        (rc = build_merges(t, spec, err)) != SI_OK || (rc = build_specials(t, err)) != SI_OK) {
        si_tokenizer_free(t);
        return rc;
    }
    build_eog(t);
    *out = t;
    return SI_OK;
}

/* ---- accessors --------------------------------------------------------------- */

uint32_t si_tokenizer_n_vocab(const si_tokenizer *t) { return t->n_tokens; }
int32_t  si_tokenizer_bos(const si_tokenizer *t) { return t->bos; }
int32_t  si_tokenizer_eos(const si_tokenizer *t) { return t->eos; }
size_t   si_tokenizer_max_token_bytes(const si_tokenizer *t) { return t->max_bytes; }

int si_token_bytes(const si_tokenizer *t, int32_t id, const char **bytes, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return SI_ERANGE;
    *bytes = t->bytes + t->bytes_off[id];
    *len = t->bytes_len[id];
    return SI_OK;
}

const char *si_token_text(const si_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return NULL;
    return t->text + t->text_off[id];
}

int32_t si_token_type(const si_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return 0;
    return t->type[id];
}

bool si_token_is_eog(const si_tokenizer *t, int32_t id)
{
    for (uint32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

/* ---- encoding ------------------------------------------------------------------ */

static int vec_push(si_tok_vec *v, int32_t id)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (p == NULL)
            return SI_ENOMEM;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return SI_OK;
}

typedef struct pair_ent {
    uint32_t rank;
    int32_t  pos;        /* the left symbol (an index into the word's bytes) */
    int32_t  lid, rid;   /* the ids it was made from: stale when they changed */
    int32_t  res;
} pair_ent;

/* Per-call scratch (si_tokenize may run on several threads at once). */
typedef struct enc {
    const si_tokenizer *t;
    si_tok_vec         *v;
    const char         *base;
    int32_t            *id, *next, *prev;  /* [cap_sym] one symbol per word byte */
    size_t              cap_sym;
    pair_ent           *heap;              /* [cap_heap] */
    size_t              n_heap, cap_heap;
} enc;

static bool ent_less(const pair_ent *a, const pair_ent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(enc *e, pair_ent x)
{
    if (e->n_heap == e->cap_heap) {
        size_t cap = e->cap_heap ? e->cap_heap * 2 : 256;
        pair_ent *p = realloc(e->heap, cap * sizeof *p);
        if (p == NULL)
            return SI_ENOMEM;
        e->heap = p;
        e->cap_heap = cap;
    }
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!ent_less(&x, &e->heap[up]))
            break;
        e->heap[i] = e->heap[up];
        i = up;
    }
    e->heap[i] = x;
    return SI_OK;
}

static pair_ent heap_pop(enc *e)
{
    pair_ent top = e->heap[0];
    pair_ent x = e->heap[--e->n_heap];
    size_t i = 0, n = e->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ent_less(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!ent_less(&e->heap[c], &x))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n > 0)
        e->heap[i] = x;
    return top;
}

static int try_pair(enc *e, int32_t l, int32_t r)
{
    const merge_slot *m = merge_find(e->t, e->id[l], e->id[r]);
    if (m == NULL)
        return SI_OK;
    return heap_push(e, (pair_ent){ m->rank, l, e->id[l], e->id[r], m->result });
}

static int bpe_word(enc *e, const unsigned char *w, size_t n)
{
    const si_tokenizer *t = e->t;
    if (n == 1)
        return vec_push(e->v, t->byte_id[w[0]]);
    if (n > INT32_MAX)
        return SI_ERANGE;
    if (n > e->cap_sym) {
        size_t cap = n < 256 ? 256 : n;
        free(e->id);
        free(e->next);
        free(e->prev);
        e->id = malloc(cap * sizeof *e->id);
        e->next = malloc(cap * sizeof *e->next);
        e->prev = malloc(cap * sizeof *e->prev);
        e->cap_sym = cap;
        if (!e->id || !e->next || !e->prev) {
            e->cap_sym = 0;
            return SI_ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        e->id[i] = t->byte_id[w[i]];
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    e->n_heap = 0;
    int rc;
    for (size_t i = 0; i + 1 < n; i++)
        if ((rc = try_pair(e, (int32_t)i, (int32_t)i + 1)) != SI_OK)
            return rc;
    while (e->n_heap > 0) {
        pair_ent x = heap_pop(e);
        int32_t l = x.pos;
        int32_t r = e->next[l];
        /* Stale unless both symbols still hold the ids the pair was made
         * from: a symbol's id only changes by growing, so equal ids mean
         * untouched symbols (dead ones hold -1). */
        if (e->id[l] != x.lid || r < 0 || e->id[r] != x.rid)
            continue;
        e->id[l] = x.res;
        e->id[r] = -1;
        int32_t nr = e->next[r];
        e->next[l] = nr;
        if (nr >= 0)
            e->prev[nr] = l;
        if (e->prev[l] >= 0 && (rc = try_pair(e, e->prev[l], l)) != SI_OK)
            return rc;
        if (nr >= 0 && (rc = try_pair(e, l, nr)) != SI_OK)
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = e->next[i])
        if ((rc = vec_push(e->v, e->id[i])) != SI_OK)
            return rc;
    return SI_OK;
}

static int word_cb(void *ctx, size_t start, size_t end)
{
    enc *e = ctx;
    return bpe_word(e, (const unsigned char *)e->base + start, end - start);
}

/* NFC of s[0, n) into a fresh buffer; invalid UTF-8 bytes are copied as
 * they are (utf8proc refuses a string holding any, so each maximal valid
 * run is normalised on its own). */
static int nfc(const char *s, size_t n, char **out, size_t *out_n)
{
    char *buf = malloc(n * 3 + 16);   /* NFC grows UTF-8 by at most 3x */
    if (buf == NULL)
        return SI_ENOMEM;
    size_t o = 0, i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + j,
                                                  (utf8proc_ssize_t)(n - j), &cp);
            if (k <= 0)
                break;
            j += (size_t)k;
        }
        if (j > i) {
            utf8proc_uint8_t *d = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(j - i),
                                              &d, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0 || (size_t)m > n * 3 + 16 - o) {
                free(d);
                free(buf);
                return m == UTF8PROC_ERROR_NOMEM ? SI_ENOMEM : SI_EINVAL;
            }
            memcpy(buf + o, d, (size_t)m);
            o += (size_t)m;
            free(d);
        }
        if (j < n)
            buf[o++] = s[j++];   /* one invalid byte */
        i = j;
    }
    *out = buf;
    *out_n = o;
    return SI_OK;
}

static int encode_fragment(enc *e, const char *s, size_t n)
{
    if (n == 0)
        return SI_OK;
    char *norm = NULL;
    if (e->t->nfc) {
        bool ascii = true;
        for (size_t i = 0; i < n && ascii; i++)
            ascii = (unsigned char)s[i] < 0x80;
        if (!ascii) {   /* ASCII is already NFC */
            int rc = nfc(s, n, &norm, &n);
            if (rc != SI_OK)
                return rc;
            s = norm;
        }
    }
    e->base = s;
    int rc = si_pretok_split(e->t->pre, s, n, word_cb, e);
    free(norm);
    return rc;
}

static bool special_allowed(uint8_t type, enum si_tok_special mode)
{
    if (mode == SI_TOK_SPECIAL_ALL)
        return true;
    return mode == SI_TOK_SPECIAL_USER && type == SI_TOKEN_USER_DEFINED;
}

int si_tokenize_append(const si_tokenizer *t, const char *text, size_t len,
                       enum si_tok_special special, si_tok_vec *v, si_err *err)
{
    if (text == NULL && len > 0)
        return si_err_set(err, SI_EINVAL, "tokenize: NULL text");
    if (special != SI_TOK_SPECIAL_NONE && special != SI_TOK_SPECIAL_ALL &&
        special != SI_TOK_SPECIAL_USER)
        return si_err_set(err, SI_EINVAL, "tokenize: bad special-token mode %d", (int)special);
    if (len == 0)
        return SI_OK;
    enc e = { .t = t, .v = v };
    size_t n0 = v->n, frag = 0, i = 0;
    int rc = SI_OK;
    /* Added tokens are cut out of the raw text first (they are never
     * normalised), leftmost first, the longest one at a position. */
    while (i < len && special != SI_TOK_SPECIAL_NONE) {
        unsigned char b = (unsigned char)text[i];
        int32_t hit = -1;
        uint32_t hit_len = 0;
        for (uint32_t k = t->spec_lo[b]; k < t->spec_lo[b + 1]; k++) {
            const added_tok *sp = &t->specials[k];
            if (sp->len <= len - i && special_allowed(sp->type, special) &&
                memcmp(t->text + t->text_off[sp->id], text + i, sp->len) == 0) {
                hit = sp->id;
                hit_len = sp->len;
                break;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        if ((rc = encode_fragment(&e, text + frag, i - frag)) != SI_OK ||
            (rc = vec_push(v, hit)) != SI_OK)
            break;
        i += hit_len;
        frag = i;
    }
    if (rc == SI_OK)
        rc = encode_fragment(&e, text + frag, len - frag);
    free(e.id);
    free(e.next);
    free(e.prev);
    free(e.heap);
    if (rc != SI_OK) {
        v->n = n0;
        if (rc == SI_ENOMEM)
            return si_err_set(err, rc, "tokenize: out of memory (%zu bytes of text)", len);
        return si_err_set(err, rc, "tokenize: %s", rc == SI_ERANGE ? "word too long" : "cannot normalise text");
    }
    return SI_OK;
}

int si_tokenize(const si_tokenizer *t, const char *text, size_t len,
                enum si_tok_special special, int32_t **ids, size_t *n_ids, si_err *err)
{
    si_tok_vec v = { 0 };
    *ids = NULL;
    *n_ids = 0;
    int rc = si_tokenize_append(t, text, len, special, &v, err);
    if (rc != SI_OK) {
        free(v.ids);
        return rc;
    }
    if (v.n == 0) {
        free(v.ids);
        v.ids = NULL;
    }
    *ids = v.ids;
    *n_ids = v.n;
    return SI_OK;
}

/* ---- decoding ------------------------------------------------------------------ */

static bool skipped(const si_tokenizer *t, int32_t id, bool render_special)
{
    return !render_special && (t->type[id] == SI_TOKEN_CONTROL || t->type[id] == SI_TOKEN_UNKNOWN);
}

int si_detokenize(const si_tokenizer *t, const int32_t *ids, size_t n, bool render_special,
                  char **out, size_t *out_len, si_err *err)
{
    *out = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= t->n_tokens)
            return si_err_set(err, SI_ERANGE, "detokenize: id %d at %zu outside the %u tokens",
                              ids[i], i, t->n_tokens);
        if (!skipped(t, ids[i], render_special))
            total += t->bytes_len[ids[i]];
    }
    char *s = malloc(total + 1);
    if (s == NULL)
        return si_err_set(err, SI_ENOMEM, "detokenize: out of memory for %zu bytes", total);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skipped(t, ids[i], render_special))
            continue;
        memcpy(s + o, t->bytes + t->bytes_off[ids[i]], t->bytes_len[ids[i]]);
        o += t->bytes_len[ids[i]];
    }
    s[o] = '\0';
    *out = s;
    if (out_len != NULL)
        *out_len = o;
    return SI_OK;
}

void si_detok_init(si_detok *d, const si_tokenizer *t, bool render_special)
{
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->render_special = render_special;
}

/* Length of the UTF-8 sequence a lead byte starts: 1 for ASCII, 2..4, or 0
 * for a byte that cannot start one (continuation, C0, C1, F5..FF). */
static unsigned utf8_seq_len(unsigned char b)
{
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Whether b may be byte number idx (1..3) of a sequence led by `lead`:
 * the second byte's range excludes overlongs, surrogates and > U+10FFFF. */
static bool utf8_cont_ok(unsigned char lead, unsigned idx, unsigned char b)
{
    unsigned char lo = 0x80, hi = 0xBF;
    if (idx == 1) {
        if (lead == 0xE0) lo = 0xA0;
        else if (lead == 0xED) hi = 0x9F;
        else if (lead == 0xF0) lo = 0x90;
        else if (lead == 0xF4) hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

int si_detok_push(si_detok *d, int32_t id, char *out, size_t cap, size_t *len, si_err *err)
{
    const si_tokenizer *t = d->tok;
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_tokens)
        return si_err_set(err, SI_ERANGE, "detokenize: id %d outside the %u tokens", id, t->n_tokens);
    if (skipped(t, id, d->render_special))
        return SI_OK;
    const unsigned char *s = (const unsigned char *)t->bytes + t->bytes_off[id];
    size_t n = t->bytes_len[id];
    if (n + d->n_pend > cap)
        return si_err_set(err, SI_ERANGE, "detokenize: token %d needs %zu bytes of output, have %zu",
                          id, n + d->n_pend, cap);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = s[i];
        if (d->n_pend > 0) {
            if (utf8_cont_ok(d->pend[0], d->n_pend, b)) {
                d->pend[d->n_pend++] = b;
                if (d->n_pend == utf8_seq_len(d->pend[0])) {
                    memcpy(out + o, d->pend, d->n_pend);
                    o += d->n_pend;
                    d->n_pend = 0;
                }
                continue;
            }
            /* Broken sequence: pass it through as it is, then treat b anew. */
            memcpy(out + o, d->pend, d->n_pend);
            o += d->n_pend;
            d->n_pend = 0;
        }
        if (utf8_seq_len(b) >= 2) {
            d->pend[0] = b;
            d->n_pend = 1;
        } else {
            out[o++] = (char)b;   /* ASCII, or a byte no sequence can start */
        }
    }
    *len = o;
    return SI_OK;
}

void si_detok_flush(si_detok *d, char *out, size_t cap, size_t *len)
{
    size_t n = d->n_pend <= cap ? d->n_pend : cap;
    memcpy(out, d->pend, n);
    *len = n;
    d->n_pend = 0;
}
