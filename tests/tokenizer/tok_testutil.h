/* tests/tokenizer/tok_testutil.h — shared by the tokenizer tests and the
 * benchmark: file reading and the Qwen3 vocabulary from the compact copy in
 * tests/data/tokenizer/qwen3 (see tests/tokenizer/mkdata.py).
 *
 * Header-only (static functions) so each program stays one source file.
 */
#ifndef SI_TESTS_TOK_TESTUTIL_H
#define SI_TESTS_TOK_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

/* $SI_TOP_SRCDIR/tests/data/tokenizer/<rel> (or ./tests/data/... unset). */
static inline void tu_data_path(char *buf, size_t cap, const char *rel)
{
    const char *top = getenv("SI_TOP_SRCDIR");
    snprintf(buf, cap, "%s/tests/data/tokenizer/%s", top ? top : ".", rel);
}

/* Whole file into a NUL-terminated malloc'd buffer; NULL when unreadable. */
static inline char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (buf == NULL)
            break;
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        cap *= 2;
        char *p = realloc(buf, cap);
        if (p == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        if (len != NULL)
            *len = n;
    }
    return buf;
}

/* UTF-8 of code point cp into out (>= 5 bytes); returns the length. */
static inline int tu_utf8(unsigned cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2 bytes_to_unicode written the way the original defines it: the
 * byte list bs (printable ranges first, then the rest in order) paired with
 * code points cs (the printable ones themselves, then 256, 257, ...).
 * tu_byte_order[k] is the byte of id k in the Qwen vocabulary, and
 * tu_byte_cp[b] the code point of byte b. */
static unsigned tu_byte_order[256], tu_byte_cp[256];

static inline void tu_init_bytes(void)
{
    int k = 0, extra = 0;
    for (unsigned b = 0x21; b <= 0x7E; b++) tu_byte_order[k++] = b;
    for (unsigned b = 0xA1; b <= 0xAC; b++) tu_byte_order[k++] = b;
    for (unsigned b = 0xAE; b <= 0xFF; b++) tu_byte_order[k++] = b;
    for (int i = 0; i < k; i++)
        tu_byte_cp[tu_byte_order[i]] = tu_byte_order[i];
    for (unsigned b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (!printable) {
            tu_byte_order[k++] = b;
            tu_byte_cp[b] = 256 + (unsigned)extra++;
        }
    }
}

/* Byte-level form of raw bytes (each byte -> its symbol's UTF-8). */
static inline char *tu_bytelevel(const char *s, size_t n)
{
    char *out = malloc(n * 2 + 1);
    size_t o = 0;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        o += (size_t)tu_utf8(tu_byte_cp[(unsigned char)s[i]], out + o);
    out[o] = '\0';
    return out;
}

/* The Qwen3 vocabulary (151643 BPE tokens + 26 added) as a spec, built from
 * merges.txt and added_tokens.tsv.  Everything stays allocated for the
 * program's life (the tests fork per case). */
typedef struct tu_vocab {
    uint32_t  n_tokens, n_merges;
    char    **tokens;
    int32_t  *types;
    char    **merges;
} tu_vocab;

static inline int tu_load_qwen3(tu_vocab *v)
{
    char path[4096];
    tu_init_bytes();
    tu_data_path(path, sizeof path, "qwen3/merges.txt");
    char *mt = tu_read_file(path, NULL);
    tu_data_path(path, sizeof path, "qwen3/added_tokens.tsv");
    char *at = tu_read_file(path, NULL);
    if (mt == NULL || at == NULL) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    uint32_t nm = 0;
    for (char *p = mt; *p; p++)
        nm += *p == '\n';
    v->n_merges = nm;
    v->merges = malloc(nm * sizeof *v->merges);
    uint32_t max_id = 255 + nm;
    for (char *p = at; *p;) {
        unsigned long id = strtoul(p, &p, 10);
        if (id > max_id)
            max_id = (uint32_t)id;
        p = strchr(p, '\n');
        p = p ? p + 1 : at + strlen(at);
    }
    v->n_tokens = max_id + 1;
    v->tokens = calloc(v->n_tokens, sizeof *v->tokens);
    v->types = calloc(v->n_tokens, sizeof *v->types);
    for (unsigned k = 0; k < 256; k++) {
        char u[5] = { 0 };
        tu_utf8(tu_byte_cp[tu_byte_order[k]], u);
        v->tokens[k] = strdup(u);
        v->types[k] = 1;
    }
    char *p = mt;
    for (uint32_t i = 0; i < nm; i++) {
        char *nl = strchr(p, '\n');
        *nl = '\0';
        v->merges[i] = p;
        char *sp = strchr(p + 1, ' ');
        size_t a = (size_t)(sp - p), b = strlen(sp + 1);
        char *tok = malloc(a + b + 1);
        memcpy(tok, p, a);
        memcpy(tok + a, sp + 1, b + 1);
        v->tokens[256 + i] = tok;
        v->types[256 + i] = 1;
        p = nl + 1;
    }
    for (char *q = at; *q;) {
        char *nl = strchr(q, '\n');
        if (nl)
            *nl = '\0';
        unsigned long id = strtoul(q, &q, 10);
        long type = strtol(q + 1, &q, 10);
        v->tokens[id] = strdup(q + 1);
        v->types[id] = (int32_t)type;
        q = nl ? nl + 1 : q + strlen(q);
    }
    for (uint32_t i = 0; i < v->n_tokens; i++)
        if (v->tokens[i] == NULL) {
            char hole[32];
            snprintf(hole, sizeof hole, "[PAD%u]", i);
            v->tokens[i] = strdup(hole);
            v->types[i] = 5;
        }
    free(at);
    return 0;
}

static inline void tu_free_vocab(tu_vocab *v)
{
    for (uint32_t i = 0; i < v->n_tokens; i++)
        free(v->tokens[i]);
    if (v->n_merges > 0)
        free(v->merges[0]);   /* the merges.txt buffer the merges point into */
    free(v->tokens);
    free(v->types);
    free(v->merges);
}

static inline si_tok_spec tu_spec(const tu_vocab *v, const char *pre, bool nfc)
{
    si_tok_spec s = {
        .n_tokens = v->n_tokens, .tokens = (const char *const *)v->tokens,
        .token_type = v->types, .n_merges = v->n_merges,
        .merges = (const char *const *)v->merges, .pre = pre,
        .bos_id = -1, .eos_id = 151645, .eot_id = -1, .nfc = nfc,
    };
    return s;
}

#endif /* SI_TESTS_TOK_TESTUTIL_H */
