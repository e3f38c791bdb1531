/* core/pretok.c — the BPE pre-tokenizers as hand-written matchers.
 *
 * Each pre-tokenizer is a split regex used with find-all semantics: at a
 * position, the alternatives are tried in order and the first that matches
 * wins (leftmost-first, as PCRE and Oniguruma do); quantifiers are greedy
 * and give characters back when the rest of the alternative needs them.
 * The three regexes (spec §5.2 and llama.cpp's gpt2 one):
 *
 *  qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}
 *          | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 *  qwen35: as qwen2 but [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ and
 *           ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*  (combining marks join letters)
 *  gpt2:   's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+
 *          | \s+(?!\S) | \s+
 *
 * Rather than running a regex engine, every alternative is resolved by
 * forward scanning; the comments at each step say which backtracking
 * outcome the scan reproduces.  No allocation, one pass, O(n).
 *
 * (?i:...) is applied to ASCII letters only, as llama.cpp rewrites it
 * ('[sS]'); Oniguruma's full case folding would also let U+017F (long s)
 * match 's'.  \s is the Unicode White_Space property: categories Zs, Zl,
 * Zp plus U+0009..U+000D and U+0085.
 */
#include <string.h>

#include <utf8proc.h>

#include "tokenizer.h"

enum {
    C_L  = 1u,   /* \p{L}                      */
    C_N  = 2u,   /* \p{N}                      */
    C_M  = 4u,   /* \p{M}                      */
    C_WS = 8u,   /* \s                         */
    C_NL = 16u,  /* \r or \n                   */
};

static unsigned cls_cp(int32_t cp)
{
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
            return C_L;
        if (cp >= '0' && cp <= '9')
            return C_N;
        if (cp == '\n' || cp == '\r')
            return C_WS | C_NL;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
            return C_WS;
        return 0;
    }
    if (cp == 0x85)
        return C_WS;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return C_L;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return C_M;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return C_N;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return C_WS;
    default:
        return 0;
    }
}

typedef struct scan {
    const unsigned char *s;
    size_t               n;
    unsigned             lm;     /* classes of the letter runs: L, or L|M (qwen35) */
    unsigned             other;  /* classes excluded from "other" runs (besides \s) */
} scan;

/* Class of the character at pos (pos < n) and its byte length.  An invalid
 * UTF-8 byte is one character of class 0 (like U+FFFD, a symbol). */
static unsigned char_at(const scan *sc, size_t pos, size_t *clen)
{
    unsigned char b = sc->s[pos];
    if (b < 0x80) {
        *clen = 1;
        return cls_cp(b);
    }
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(sc->s + pos, (utf8proc_ssize_t)(sc->n - pos), &cp);
    if (k <= 0) {
        *clen = 1;
        return 0;
    }
    *clen = (size_t)k;
    return cls_cp(cp);
}

/* End of the run of characters whose class intersects `want`, from pos. */
static size_t run_of(const scan *sc, size_t pos, unsigned want)
{
    while (pos < sc->n) {
        size_t k;
        if (!(char_at(sc, pos, &k) & want))
            break;
        pos += k;
    }
    return pos;
}

/* End of the run of "other" characters: not \s and not in sc->other. */
static size_t run_other(const scan *sc, size_t pos)
{
    while (pos < sc->n) {
        size_t k;
        if (char_at(sc, pos, &k) & (C_WS | sc->other))
            break;
        pos += k;
    }
    return pos;
}

static int lower_ascii(int c)
{
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* 's 't 're 've 'm 'll 'd at pos; returns the end or 0 (no match). */
static size_t contraction(const scan *sc, size_t pos, bool icase)
{
    if (sc->s[pos] != '\'' || pos + 1 >= sc->n)
        return 0;
    int a = sc->s[pos + 1];
    int b = pos + 2 < sc->n ? sc->s[pos + 2] : 0;
    if (icase) {
        a = lower_ascii(a);
        b = lower_ascii(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return pos + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return pos + 3;
    return 0;
}

/* The three whitespace alternatives at pos, where a \s character starts.
 * with_newline_alt: qwen's \s*[\r\n]+ comes first. */
static size_t whitespace(const scan *sc, size_t pos, bool with_newline_alt)
{
    /* Scan the whole \s run once, remembering where its last character
     * starts and where its last \r or \n ends. */
    size_t end = pos, last_start = pos, nl_end = 0, count = 0;
    while (end < sc->n) {
        size_t k;
        unsigned c = char_at(sc, end, &k);
        if (!(c & C_WS))
            break;
        last_start = end;
        end += k;
        if (c & C_NL)
            nl_end = end;
        count++;
    }
    /* \s*[\r\n]+ : \s* first takes the whole run, then gives characters back
     * until [\r\n]+ can match; that happens at the LAST \r or \n of the run,
     * and [\r\n]+ then stops right after it (the next character, if still in
     * the run, is not \r\n). */
    if (with_newline_alt && nl_end != 0)
        return nl_end;
    /* \s+(?!\S) : the whole run at end of text; before a non-space, the run
     * minus its last character (which then starts the next word), if that
     * leaves at least one. */
    if (end == sc->n)
        return end;
    if (count >= 2)
        return last_start;
    /* \s+ */
    return end;
}

static size_t match_qwen(const scan *sc, size_t pos)
{
    size_t k0;
    unsigned c0 = char_at(sc, pos, &k0);

    size_t e = contraction(sc, pos, true);
    if (e)
        return e;

    /* [^\r\n\p{L}\p{N}]?[LM]+ : if c0 is a letter (or, for qwen35, a mark,
     * which the optional class also accepts) the result is the letter run
     * from pos either way; otherwise the optional class takes c0 when the
     * next character starts a letter run. */
    if (c0 & sc->lm)
        return run_of(sc, pos, sc->lm);
    if (!(c0 & (C_NL | C_L | C_N)) && pos + k0 < sc->n) {
        size_t k1;
        if (char_at(sc, pos + k0, &k1) & sc->lm)
            return run_of(sc, pos + k0 + k1, sc->lm);
    }

    /* \p{N} : one digit per word. */
    if (c0 & C_N)
        return pos + k0;

    /*  ?[^\s...]+[\r\n]* : the optional space only helps when an "other"
     * character follows it; backing off leaves ' ' which is \s, no match. */
    size_t p = pos;
    if (sc->s[pos] == ' ' && pos + 1 < sc->n) {
        size_t k1;
        if (!(char_at(sc, pos + 1, &k1) & (C_WS | sc->other)))
            p = pos + 1;
    }
    if (p != pos || !(c0 & (C_WS | sc->other))) {
        e = run_other(sc, p);
        while (e < sc->n && (sc->s[e] == '\r' || sc->s[e] == '\n'))
            e++;
        return e;
    }

    if (c0 & C_WS)
        return whitespace(sc, pos, true);
    return pos + k0;   /* unreachable: every class is covered above */
}

static size_t match_gpt2(const scan *sc, size_t pos)
{
    size_t k0;
    unsigned c0 = char_at(sc, pos, &k0);

    size_t e = contraction(sc, pos, false);
    if (e)
        return e;

    /* ' ?X+' for X = letters, digits, others, in that order: the optional
     * space is taken when an X follows it. */
    unsigned c1 = 0;
    size_t k1 = 0;
    bool sp = sc->s[pos] == ' ' && pos + 1 < sc->n;
    if (sp)
        c1 = char_at(sc, pos + 1, &k1);
    if (c0 & C_L)
        return run_of(sc, pos, C_L);
    if (sp && (c1 & C_L))
        return run_of(sc, pos + 1, C_L);
    if (c0 & C_N)
        return run_of(sc, pos, C_N);
    if (sp && (c1 & C_N))
        return run_of(sc, pos + 1, C_N);
    if (!(c0 & (C_WS | C_L | C_N)))
        return run_other(sc, pos);
    if (sp && !(c1 & (C_WS | C_L | C_N)))
        return run_other(sc, pos + 1);

    return whitespace(sc, pos, false);
}

int si_pretok_from_name(const char *name, si_pretok_kind *out, si_err *err)
{
    if (name == NULL)
        return si_err_set(err, SI_EUNSUPPORTED, "tokenizer: no pre-tokenizer given");
    if (strcmp(name, "qwen2") == 0)
        *out = SI_PRETOK_QWEN2;
    else if (strcmp(name, "qwen35") == 0)
        *out = SI_PRETOK_QWEN35;
    else if (strcmp(name, "gpt2") == 0 || strcmp(name, "gpt-2") == 0)
        *out = SI_PRETOK_GPT2;
    else
        return si_err_set(err, SI_EUNSUPPORTED,
                          "tokenizer: pre-tokenizer '%s' is not supported "
                          "(supported: qwen2, qwen35, gpt2)", name);
    return SI_OK;
}

int si_pretok_split(si_pretok_kind kind, const char *text, size_t len,
                    si_pretok_cb cb, void *ctx)
{
    scan sc = { .s = (const unsigned char *)text, .n = len };
    switch (kind) {
    case SI_PRETOK_QWEN2:  sc.lm = C_L;       sc.other = C_L | C_N;       break;
    case SI_PRETOK_QWEN35: sc.lm = C_L | C_M; sc.other = C_L | C_M | C_N; break;
    case SI_PRETOK_GPT2:   sc.lm = C_L;       sc.other = C_L | C_N;       break;
    default:
        return SI_EINVAL;
    }
    size_t pos = 0;
    while (pos < len) {
        size_t end = kind == SI_PRETOK_GPT2 ? match_gpt2(&sc, pos) : match_qwen(&sc, pos);
        int rc = cb(ctx, pos, end);
        if (rc != 0)
            return rc;
        pos = end;
    }
    return SI_OK;
}
