/* tests/tokenizer/check_tokenizer.c — byte-level BPE tokenizer (core/tokenizer.c,
 * core/pretok.c) against real vectors and by construction.
 *
 * Data: the compact Qwen3 vocabulary and the vector files copied under
 * tests/data/tokenizer (so a fresh clone has them).  Cases that need files
 * from $SI_SHARED_DATA only (the original tokenizer.json) or a GGUF reader
 * say so on stdout and pass without checking.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "gguf.h"
#include "tok_testutil.h"
#include "tokenizer.h"

static tu_vocab V;
static si_tokenizer *T35;    /* Qwen3 vocabulary, qwen35 regex, no NFC (llama.cpp vectors) */
static si_tokenizer *T2;     /* Qwen3 vocabulary, qwen2 regex, NFC (the HF tokenizer.json) */

/* ---- helpers ------------------------------------------------------------------ */

static size_t encode(const si_tokenizer *t, const char *s, size_t n, enum si_tok_special sp, int32_t **ids)
{
    size_t cnt = 0;
    si_err err = { { 0 } };
    int rc = si_tokenize(t, s, n, sp, ids, &cnt, &err);
    if (rc != SI_OK)   /* not ck_assert: this runs thousands of times */
        ck_abort_msg("tokenize: %s", err.msg);
    return cnt;
}

static char *decode(const si_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
    char *s = NULL;
    si_err err = { { 0 } };
    if (si_detokenize(t, ids, n, true, &s, len, &err) != SI_OK)
        ck_abort_msg("detokenize: %s", err.msg);
    return s;
}

/* Parses one line of space-separated ids; returns the count. */
static size_t parse_ids(const char *line, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    for (const char *p = line;;) {
        long x = strtol(p, &end, 10);
        if (end == p)
            break;
        ck_assert(n < cap);
        out[n++] = (int32_t)x;
        p = end;
    }
    return n;
}

static char *ids_str(const int32_t *ids, size_t n)
{
    char *s = malloc(n * 12 + 1);
    size_t o = 0;
    s[0] = '\0';
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(s + o, "%s%d", i ? " " : "", ids[i]);
    return s;
}

/* Runs llama.cpp-format vectors (.inp cases split by the separator line,
 * .out one line of ids per case); returns the number that matched. */
static int run_llamacpp_vectors(const si_tokenizer *t, const char *inp_path, const char *out_path,
                                int *n_cases)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *inp = tu_read_file(inp_path, NULL);
    char *out = tu_read_file(out_path, NULL);
    ck_assert_msg(inp && out, "cannot read %s / %s", inp_path, out_path);
    int ok = 0, n = 0;
    char *p = inp, *q = out;
    for (;;) {
        char *e = strstr(p, sep);
        if (e == NULL)
            break;
        char *nl = strchr(q, '\n');
        ck_assert_msg(nl != NULL, "%s: fewer lines than cases", out_path);
        *nl = '\0';
        int32_t want[1024];
        size_t nw = parse_ids(q, want, 1024);
        int32_t *got;
        size_t ng = encode(t, p, (size_t)(e - p), SI_TOK_SPECIAL_USER, &got);
        if (ng == nw && (ng == 0 || memcmp(got, want, ng * sizeof *got) == 0)) {
            ok++;
        } else {
            char *gs = ids_str(got, ng);
            printf("  MISMATCH case %d '%.*s'\n    want %s\n    got  %s\n", n, (int)(e - p), p, q, gs);
            free(gs);
        }
        /* And back: decoding gives the input exactly. */
        size_t dl;
        char *d = decode(t, got, ng, &dl);
        ck_assert_msg(dl == (size_t)(e - p) && memcmp(d, p, dl) == 0, "case %d does not round-trip", n);
        free(d);
        free(got);
        n++;
        p = e + sizeof sep - 1;
        q = nl + 1;
    }
    free(inp);
    free(out);
    *n_cases = n;
    return ok;
}

/* ---- the vocabulary ------------------------------------------------------------ */

START_TEST(test_vocab)
{
    ck_assert_uint_eq(si_tokenizer_n_vocab(T35), 151669);
    ck_assert_int_eq(si_token_lookup(T35, "!"), 0);
    ck_assert_int_eq(si_token_lookup(T35, "Ġ"), 220);
    ck_assert_int_eq(si_token_lookup(T35, "Ċ"), 198);
    ck_assert_int_eq(si_token_lookup(T35, "<|im_end|>"), 151645);
    ck_assert_int_eq(si_token_lookup(T35, "</think>"), 151668);
    ck_assert_int_eq(si_token_lookup(T35, "no such token at all"), -1);
    ck_assert_str_eq(si_token_text(T35, 151644), "<|im_start|>");
    ck_assert_ptr_null(si_token_text(T35, 151669));
    ck_assert_int_eq(si_token_type(T35, 151644), 3);
    ck_assert_int_eq(si_token_type(T35, 151667), 4);
    ck_assert_int_eq(si_token_type(T35, 1000), 1);
    ck_assert_int_eq(si_token_type(T35, -1), 0);
    /* Decoded bytes: 'Ġ' is a space, 'Ċ' a newline, byte 0 is 'Ā'. */
    const char *b;
    size_t n;
    ck_assert_int_eq(si_token_bytes(T35, 220, &b, &n), SI_OK);
    ck_assert(n == 1 && b[0] == ' ');
    ck_assert_int_eq(si_token_bytes(T35, si_token_lookup(T35, "Ā"), &b, &n), SI_OK);
    ck_assert(n == 1 && b[0] == 0);
    ck_assert_int_eq(si_token_bytes(T35, 151645, &b, &n), SI_OK);
    ck_assert(n == 10 && memcmp(b, "<|im_end|>", 10) == 0);
    ck_assert_int_eq(si_token_bytes(T35, 151669, &b, &n), SI_ERANGE);
    ck_assert_int_eq(si_token_bytes(T35, -3, &b, &n), SI_ERANGE);
    /* End of generation: eos, <|endoftext|>, and the FIM pad/repo/file ones. */
    ck_assert(si_token_is_eog(T35, 151645));
    ck_assert(si_token_is_eog(T35, 151643));
    ck_assert(si_token_is_eog(T35, 151662));
    ck_assert(si_token_is_eog(T35, 151663));
    ck_assert(si_token_is_eog(T35, 151664));
    ck_assert(!si_token_is_eog(T35, 151644));
    ck_assert(!si_token_is_eog(T35, 151668));
    ck_assert(!si_token_is_eog(T35, 220));
    ck_assert_int_eq(si_tokenizer_eos(T35), 151645);
    ck_assert_int_eq(si_tokenizer_bos(T35), -1);
    ck_assert_uint_ge(si_tokenizer_max_token_bytes(T35), 128);
}
END_TEST

/* The compact copy rebuilds exactly the original tokenizer.json. */
START_TEST(test_vocab_vs_tokenizer_json)
{
    const char *shared = getenv("SI_SHARED_DATA");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/qwen3/tokenizer.json", shared ? shared : "/nonexistent");
    char *js = tu_read_file(path, NULL);
    if (js == NULL) {
        printf("test_vocab_vs_tokenizer_json: %s not available, not checked\n", path);
        return;
    }
    cJSON *root = cJSON_Parse(js);
    ck_assert_ptr_nonnull(root);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    /* One assertion per loop, not per entry: Check records each one. */
    int nv = 0, bad = -1;
    for (cJSON *e = vocab->child; e; e = e->next, nv++) {
        int id = e->valueint;
        if (id < 0 || (uint32_t)id >= V.n_tokens || strcmp(V.tokens[id], e->string) != 0 ||
            si_token_lookup(T35, e->string) != id)
            bad = bad < 0 ? id : bad;
    }
    ck_assert_msg(bad < 0, "token %d differs from tokenizer.json", bad);
    ck_assert_int_eq(nv, 151643);
    ck_assert_int_eq(cJSON_GetArraySize(merges), (int)V.n_merges);
    int i = 0;
    for (cJSON *m = merges->child; m; m = m->next, i++) {
        char buf[1024];
        if (cJSON_IsString(m))
            snprintf(buf, sizeof buf, "%s", m->valuestring);
        else
            snprintf(buf, sizeof buf, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring,
                     cJSON_GetArrayItem(m, 1)->valuestring);
        if (strcmp(V.merges[i], buf) != 0)
            bad = bad < 0 ? i : bad;
    }
    ck_assert_msg(bad < 0, "merge %d differs from tokenizer.json", bad);
    cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int na = 0;
    for (cJSON *a = added->child; a; a = a->next, na++) {
        int id = cJSON_GetObjectItemCaseSensitive(a, "id")->valueint;
        ck_assert_str_eq(V.tokens[id], cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring);
        ck_assert_int_eq(V.types[id], cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special")) ? 3 : 4);
    }
    ck_assert_int_eq(na, 26);
    cJSON_Delete(root);
    free(js);
}
END_TEST

/* ---- real vectors ------------------------------------------------------------------ */

START_TEST(test_llamacpp_qwen35_vectors)
{
    char inp[4096], out[4096];
    tu_data_path(inp, sizeof inp, "test-vectors/llama.cpp/ggml-vocab-qwen35.gguf.inp");
    tu_data_path(out, sizeof out, "test-vectors/llama.cpp/ggml-vocab-qwen35.gguf.out");
    int n = 0, ok = run_llamacpp_vectors(T35, inp, out, &n);
    printf("llama.cpp qwen35 vectors: %d/%d match\n", ok, n);
    ck_assert_int_eq(n, 50);
    ck_assert_int_eq(ok, n);
}
END_TEST

START_TEST(test_hf_qwen2_vectors)
{
    char path[4096];
    tu_data_path(path, sizeof path, "test-vectors/hf-transformers/qwen-reference-vectors.json");
    char *js = tu_read_file(path, NULL);
    ck_assert_ptr_nonnull(js);
    cJSON *root = cJSON_Parse(js);
    ck_assert_ptr_nonnull(root);
    cJSON *vecs = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "qwen2_vocab"), "vectors");
    int n = 0, ok = 0;
    for (cJSON *v = vecs->child; v; v = v->next, n++) {
        const char *text = cJSON_GetObjectItemCaseSensitive(v, "text")->valuestring;
        cJSON *ids = cJSON_GetObjectItemCaseSensitive(v, "ids");
        cJSON *toks = cJSON_GetObjectItemCaseSensitive(v, "tokens");
        int32_t *got;
        size_t ng = encode(T2, text, strlen(text), SI_TOK_SPECIAL_ALL, &got);
        bool same = (int)ng == cJSON_GetArraySize(ids);
        for (size_t i = 0; same && i < ng; i++)
            same = got[i] == cJSON_GetArrayItem(ids, (int)i)->valueint;
        if (same && toks != NULL)   /* token texts too, where the vector has them */
            for (size_t i = 0; same && i < ng; i++)
                same = strcmp(si_token_text(T2, got[i]), cJSON_GetArrayItem(toks, (int)i)->valuestring) == 0;
        ok += same;
        if (!same)
            printf("  MISMATCH %s\n", cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring);
        free(got);
    }
    int n35 = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "qwen35_vocab"), "vectors"));
    printf("HF qwen2-vocabulary vectors: %d/%d match; %d Qwen3.5-vocabulary vector(s) skipped "
           "(needs the full Qwen3.5 vocabulary)\n", ok, n, n35);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(ok, n);
    cJSON_Delete(root);
    free(js);
}
END_TEST

/* Spec §5.2's examples, and NFC: the HF tokenizer composes "e\u0301" to "é"
 * before splitting; llama.cpp's qwen35 keeps it decomposed. */
START_TEST(test_spec_examples)
{
    static const struct { const char *text; const char *ids; } cases[] = {
        { "ied 4 \xc2\xbd months", "1122 220 19 220 26062 3951" },
        { " ", "220" },
        { "\xc3\x84pfel", "86975 15897 301" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *got;
        size_t n = encode(T35, cases[i].text, strlen(cases[i].text), SI_TOK_SPECIAL_NONE, &got);
        char *s = ids_str(got, n);
        ck_assert_str_eq(s, cases[i].ids);
        free(s);
        free(got);
    }
    int32_t *a, *b;
    size_t na = encode(T2, "caf\x65\xcc\x81", 6, SI_TOK_SPECIAL_NONE, &a);
    size_t nb = encode(T2, "caf\xc3\xa9", 5, SI_TOK_SPECIAL_NONE, &b);
    ck_assert(na == nb && memcmp(a, b, na * sizeof *a) == 0);
    free(a);
    free(b);
    na = encode(T35, "caf\x65\xcc\x81", 6, SI_TOK_SPECIAL_NONE, &a);
    nb = encode(T35, "caf\xc3\xa9", 5, SI_TOK_SPECIAL_NONE, &b);
    ck_assert(na != nb || memcmp(a, b, na * sizeof *a) != 0);
    free(a);
    free(b);
}
END_TEST

/* ---- pre-tokenizer ----------------------------------------------------------------- */

typedef struct pieces {
    const char *text;
    char        out[512];
    size_t      o;
} pieces;

static int piece_cb(void *ctx, size_t start, size_t end)
{
    pieces *p = ctx;
    if (p->o > 0)
        p->out[p->o++] = '|';
    memcpy(p->out + p->o, p->text + start, end - start);
    p->o += end - start;
    p->out[p->o] = '\0';
    return 0;
}

static void check_split(si_pretok_kind kind, const char *text, const char *want)
{
    pieces p = { .text = text };
    p.out[0] = '\0';
    ck_assert_int_eq(si_pretok_split(kind, text, strlen(text), piece_cb, &p), 0);
    ck_assert_msg(strcmp(p.out, want) == 0, "kind %d '%s': got '%s' want '%s'", kind, text, p.out, want);
}

START_TEST(test_pretok_qwen)
{
    for (int k = 0; k < 2; k++) {
        si_pretok_kind kind = k ? SI_PRETOK_QWEN35 : SI_PRETOK_QWEN2;
        check_split(kind, "Hi   Hello", "Hi|  | Hello");
        check_split(kind, "\n\n \n  \n Hello", "\n\n \n  \n| Hello");   /* last newline of the run */
        check_split(kind, "a  \n  b", "a|  \n| | b");
        check_split(kind, "x   ", "x|   ");                                /* \s+(?!\S) at the end */
        check_split(kind, "don't DON'T", "don|'t| DON|'T");
        check_split(kind, "we're they'LL 'sup", "we|'re| they|'LL| '|sup");
        check_split(kind, "'x", "'x");
        check_split(kind, "x1y 123", "x|1|y| |1|2|3");                      /* one digit per word */
        check_split(kind, "!!!\n\nx", "!!!\n\n|x");
        check_split(kind, " \xc2\xa0x", " |\xc2\xa0x");                     /* NBSP is \s and [^\r\n...] */
        check_split(kind, "\r\n\r\n  x", "\r\n\r\n| | x");
        check_split(kind, "?ab", "?ab");
        check_split(kind, "a\t\tb", "a|\t|\tb");
        check_split(kind, "x \ny", "x| \n|y");
        check_split(kind, "x .", "x| .");
        check_split(kind, " \n", " \n");
        check_split(kind, "a\xe2\x80\xa8" "b", "a|\xe2\x80\xa8" "b");       /* U+2028 is \s, not \r\n */
        check_split(kind, "\xf0\x9f\x91\x8d\xf0\x9f\x91\x8d ok", "\xf0\x9f\x91\x8d\xf0\x9f\x91\x8d| ok");
        check_split(kind, "\xff\xfe" "ab", "\xff\xfe|ab");                  /* invalid bytes: symbols */
        check_split(kind, "a\x85" "b", "a|\x85" "b");                       /* lone continuation byte */
        check_split(kind, "1\xe2\x80\x85\xe2\x80\x85", "1|\xe2\x80\x85\xe2\x80\x85");
        check_split(kind, "\xe4\xbd\xa0\xe5\xa5\xbd world", "\xe4\xbd\xa0\xe5\xa5\xbd| world");
        check_split(kind, "", "");
    }
    /* Combining marks: qwen35 joins them to letters, qwen2 treats them as symbols. */
    check_split(SI_PRETOK_QWEN35, "e\xcc\x81t\xcc\x81 x", "e\xcc\x81t\xcc\x81| x");
    check_split(SI_PRETOK_QWEN2, "e\xcc\x81t\xcc\x81 x", "e|\xcc\x81t|\xcc\x81| x");
    check_split(SI_PRETOK_QWEN35, "\xcc\x81", "\xcc\x81");
    check_split(SI_PRETOK_QWEN35, "1\xcc\x81\xcc\x81", "1|\xcc\x81\xcc\x81");
    check_split(SI_PRETOK_QWEN2, " \xcc\x81!", " \xcc\x81!");
    check_split(SI_PRETOK_QWEN35, " \xcc\x81!", " \xcc\x81|!");
}
END_TEST

START_TEST(test_pretok_gpt2)
{
    check_split(SI_PRETOK_GPT2, "Hi   Hello", "Hi|  | Hello");
    check_split(SI_PRETOK_GPT2, "don't DON'T", "don|'t| DON|'|T");      /* case-sensitive */
    check_split(SI_PRETOK_GPT2, "x1y 123 4567", "x|1|y| 123| 4567");
    check_split(SI_PRETOK_GPT2, "!!!\n\nx", "!!!|\n|\n|x");
    check_split(SI_PRETOK_GPT2, "?ab  ", "?|ab|  ");
    check_split(SI_PRETOK_GPT2, "a \n b", "a| \n| b");
    check_split(SI_PRETOK_GPT2, "a\tb", "a|\t|b");
    si_pretok_kind k;
    si_err err = { { 0 } };
    ck_assert_int_eq(si_pretok_from_name("gpt-2", &k, &err), SI_OK);
    ck_assert_int_eq(k, SI_PRETOK_GPT2);
    ck_assert_int_eq(si_pretok_from_name("llama3", &k, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "'llama3'"));
}
END_TEST

/* ---- added tokens ------------------------------------------------------------------ */

START_TEST(test_special)
{
    const char *s = "<|im_start|>user\nhi<think>x</think><|im_end|>";
    int32_t *ids;
    size_t n = encode(T35, s, strlen(s), SI_TOK_SPECIAL_ALL, &ids);
    ck_assert_int_eq(ids[0], 151644);
    ck_assert_int_eq(ids[n - 1], 151645);
    int thinks = 0;
    for (size_t i = 0; i < n; i++)
        thinks += ids[i] == 151667 || ids[i] == 151668;
    ck_assert_int_eq(thinks, 2);
    free(ids);

    /* User mode: only user-defined tokens (<think>) are matched. */
    n = encode(T35, s, strlen(s), SI_TOK_SPECIAL_USER, &ids);
    thinks = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert(ids[i] != 151644 && ids[i] != 151645);
        thinks += ids[i] == 151667 || ids[i] == 151668;
    }
    ck_assert_int_eq(thinks, 2);
    free(ids);

    /* None: all plain text; no added token appears, and it round-trips. */
    n = encode(T35, s, strlen(s), SI_TOK_SPECIAL_NONE, &ids);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_lt(ids[i], 151643);
    size_t dl;
    char *d = decode(T35, ids, n, &dl);
    ck_assert_str_eq(d, s);
    free(d);
    free(ids);

    /* Adjacent, at both ends, partial lookalikes, and longest first. */
    const char *s2 = "<|im_end|><|im_end|><|im_end<|im_end|>";
    n = encode(T35, s2, strlen(s2), SI_TOK_SPECIAL_ALL, &ids);
    ck_assert_int_eq(ids[0], 151645);
    ck_assert_int_eq(ids[1], 151645);
    ck_assert_int_eq(ids[n - 1], 151645);
    for (size_t i = 2; i + 1 < n; i++)
        ck_assert_int_lt(ids[i], 151643);
    d = decode(T35, ids, n, &dl);
    ck_assert_str_eq(d, s2);
    free(d);
    free(ids);

    /* Control tokens are left out of a decode unless asked for. */
    int32_t seq[3] = { 151644, 9707, 151645 };
    char *out = NULL;
    ck_assert_int_eq(si_detokenize(T35, seq, 3, false, &out, &dl, NULL), SI_OK);
    ck_assert_str_eq(out, "Hello");
    free(out);
    ck_assert_int_eq(si_detokenize(T35, seq, 3, true, &out, &dl, NULL), SI_OK);
    ck_assert_str_eq(out, "<|im_start|>Hello<|im_end|>");
    free(out);
    seq[1] = 151669;
    ck_assert_int_eq(si_detokenize(T35, seq, 3, true, &out, &dl, NULL), SI_ERANGE);
}
END_TEST

/* ---- round trips over random text ---------------------------------------------------- */

static uint64_t rng_state = 0x1234567887654321ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Random text from many scripts, whitespace runs, digits, emoji, combining
 * marks, added-token texts and (when allow_invalid) broken UTF-8. */
static size_t random_text(char *buf, size_t cap, bool allow_invalid)
{
    static const unsigned ranges[][2] = {
        { 'a', 'z' }, { 'A', 'Z' }, { '0', '9' }, { '!', '/' }, { 0x00C0, 0x00FF },
        { 0x0300, 0x036F }, { 0x0400, 0x04FF }, { 0x0590, 0x05FF }, { 0x0600, 0x06FF },
        { 0x0900, 0x097F }, { 0x0E00, 0x0E7F }, { 0x1100, 0x11FF }, { 0x3040, 0x30FF },
        { 0x4E00, 0x9FFF }, { 0xAC00, 0xD7A3 }, { 0x1F300, 0x1F6FF }, { 0x1F900, 0x1F9FF },
        { 0x2000, 0x206F }, { 0xFF00, 0xFFEF }, { 0x10000, 0x1007F }, { 0x0660, 0x0669 },
    };
    static const char *const words[] = {
        " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n ", "\xc2\xa0", "\xe3\x80\x80",
        "\xe2\x80\xa8", "\xc2\x85", "'s", "'LL", "\xe2\x80\x8d", "\xef\xb8\x8f",
        "<|im_end|>", "<|im_start|>", "<think>", "</think>", "<|endoftext|>", "<|im_",
    };
    static const char *const broken[] = { "\xff", "\x80", "\xe4\xb8", "\xf0\x9f\x98", "\xc0\xaf", "\xed\xa0\x80" };
    size_t o = 0;
    uint32_t len = 1 + rnd(60);
    for (uint32_t i = 0; i < len && o + 16 < cap; i++) {
        uint32_t r = rnd(100);
        if (r < 60) {
            const unsigned *g = ranges[rnd(sizeof ranges / sizeof ranges[0])];
            o += (size_t)tu_utf8(g[0] + rnd(g[1] - g[0] + 1), buf + o);
        } else if (r < 92 || !allow_invalid) {
            const char *w = words[rnd(sizeof words / sizeof words[0])];
            memcpy(buf + o, w, strlen(w));
            o += strlen(w);
        } else {
            const char *w = broken[rnd(sizeof broken / sizeof broken[0])];
            memcpy(buf + o, w, strlen(w));
            o += strlen(w);
        }
    }
    return o;
}

START_TEST(test_roundtrip_random)
{
    char buf[2048];
    for (int it = 0; it < 3000; it++) {
        size_t n = random_text(buf, sizeof buf, true);
        for (int mode = 0; mode < 3; mode++) {
            int32_t *ids;
            size_t ni = encode(T35, buf, n, (enum si_tok_special)mode, &ids);
            size_t added = 0;
            for (size_t i = 0; i < ni && mode == SI_TOK_SPECIAL_NONE; i++)
                added += ids[i] >= 151643;
            if (added != 0)
                ck_abort_msg("iteration %d: added token from plain text", it);
            size_t dl;
            char *d = decode(T35, ids, ni, &dl);
            if (dl != n || memcmp(d, buf, n) != 0)
                ck_abort_msg("iteration %d mode %d: round trip differs", it, mode);
            free(d);
            free(ids);
        }
    }
}
END_TEST

/* With NFC on, decode(encode(x)) is NFC(x) (for valid UTF-8). */
START_TEST(test_roundtrip_nfc)
{
    char buf[2048];
    for (int it = 0; it < 1000; it++) {
        size_t n = random_text(buf, sizeof buf, false);
        buf[n] = '\0';
        int32_t *ids;
        size_t ni = encode(T2, buf, n, SI_TOK_SPECIAL_NONE, &ids);
        size_t dl;
        char *d = decode(T2, ids, ni, &dl);
        char *want = (char *)utf8proc_NFC((const utf8proc_uint8_t *)buf);
        ck_assert_ptr_nonnull(want);
        if (dl != strlen(want) || memcmp(d, want, dl) != 0)
            ck_abort_msg("iteration %d: decode(encode(x)) != NFC(x)", it);
        free(want);
        free(d);
        free(ids);
    }
}
END_TEST

/* ---- streaming decode ----------------------------------------------------------------- */

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0)
            return false;
        i += (size_t)k;
    }
    return true;
}

START_TEST(test_stream_decode)
{
    /* Emoji and CJK split over several byte-level tokens. */
    const char *s = "\xf0\x9f\xa6\x99 llama \xe7\x9c\x9f\xe8\xb0\x9b \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f!";
    int32_t *ids;
    size_t n = encode(T35, s, strlen(s), SI_TOK_SPECIAL_NONE, &ids);
    size_t split = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b;
        size_t bl;
        si_token_bytes(T35, ids[i], &b, &bl);
        split += !valid_utf8(b, bl);
    }
    ck_assert_uint_gt(split, 0);   /* the case really exercises partial characters */
    si_detok d;
    si_detok_init(&d, T35, false);
    size_t cap = si_tokenizer_max_token_bytes(T35) + 4;
    char *chunk = malloc(cap), acc[256];
    size_t o = 0, cl;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(si_detok_push(&d, ids[i], chunk, cap, &cl, NULL), SI_OK);
        ck_assert(valid_utf8(chunk, cl));
        memcpy(acc + o, chunk, cl);
        o += cl;
    }
    si_detok_flush(&d, chunk, cap, &cl);
    ck_assert_uint_eq(cl, 0);
    ck_assert(o == strlen(s) && memcmp(acc, s, o) == 0);
    free(ids);

    /* Byte by byte: "€" (E2 82 AC) comes out whole with its last byte. */
    si_detok_init(&d, T35, false);
    const char *euro = "\xe2\x82\xac";
    for (int i = 0; i < 3; i++) {
        char sym[8];
        tu_utf8(tu_byte_cp[(unsigned char)euro[i]], sym);
        sym[tu_utf8(tu_byte_cp[(unsigned char)euro[i]], sym)] = '\0';
        ck_assert_int_eq(si_detok_push(&d, si_token_lookup(T35, sym), chunk, cap, &cl, NULL), SI_OK);
        ck_assert_uint_eq(cl, i < 2 ? 0 : 3);
    }
    ck_assert(memcmp(chunk, euro, 3) == 0);

    /* A broken sequence passes through as soon as it is known broken:
     * E2 then 'A' -> "\xe2A"; a dangling lead byte comes out at flush. */
    int32_t e2 = si_token_lookup(T35, "\xc3\xa2");   /* symbol of byte 0xE2 is U+00E2 */
    ck_assert_int_eq(si_detok_push(&d, e2, chunk, cap, &cl, NULL), SI_OK);
    ck_assert_uint_eq(cl, 0);
    ck_assert_int_eq(si_detok_push(&d, si_token_lookup(T35, "A"), chunk, cap, &cl, NULL), SI_OK);
    ck_assert(cl == 2 && memcmp(chunk, "\xe2" "A", 2) == 0);
    ck_assert_int_eq(si_detok_push(&d, e2, chunk, cap, &cl, NULL), SI_OK);
    ck_assert_int_eq(si_detok_push(&d, 151645, chunk, cap, &cl, NULL), SI_OK);   /* control: invisible */
    ck_assert_uint_eq(cl, 0);
    si_detok_flush(&d, chunk, cap, &cl);
    ck_assert(cl == 1 && (unsigned char)chunk[0] == 0xE2);
    /* Overlong / surrogate second bytes are rejected at once. */
    int32_t ed = si_token_lookup(T35, "\xc3\xad");   /* byte 0xED */
    char a0s[8];
    a0s[tu_utf8(tu_byte_cp[0xA0], a0s)] = '\0';
    int32_t a0 = si_token_lookup(T35, a0s);   /* byte 0xA0 */
    si_detok_push(&d, ed, chunk, cap, &cl, NULL);
    ck_assert_int_eq(si_detok_push(&d, a0, chunk, cap, &cl, NULL), SI_OK);
    ck_assert(cl == 2 && memcmp(chunk, "\xed\xa0", 2) == 0);   /* ED A0 would be a surrogate */
    si_detok_flush(&d, chunk, cap, &cl);
    ck_assert_uint_eq(cl, 0);
    /* Too small a buffer and bad ids are refused without consuming. */
    ck_assert_int_eq(si_detok_push(&d, 9707, chunk, 2, &cl, NULL), SI_ERANGE);
    ck_assert_int_eq(si_detok_push(&d, -1, chunk, cap, &cl, NULL), SI_ERANGE);
    free(chunk);
}
END_TEST

/* ---- construction -------------------------------------------------------------------- */

/* Merge rank is the merge's position, never derived from ids: permuting
 * the ids of a vocabulary permutes the output and nothing else. */
START_TEST(test_permuted_ids)
{
    uint32_t n = V.n_tokens;
    uint32_t *perm = malloc(n * sizeof *perm);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = rnd(i + 1), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    char **tok = malloc(n * sizeof *tok);
    int32_t *ty = malloc(n * sizeof *ty);
    for (uint32_t i = 0; i < n; i++) {
        tok[perm[i]] = V.tokens[i];
        ty[perm[i]] = V.types[i];
    }
    si_tok_spec spec = tu_spec(&V, "qwen35", false);
    spec.tokens = (const char *const *)tok;
    spec.token_type = ty;
    spec.eos_id = (int32_t)perm[151645];
    si_tokenizer *tp;
    si_err err;
    ck_assert_msg(si_tokenizer_new(&spec, &tp, &err) == SI_OK, "%s", err.msg);
    char buf[2048];
    for (int it = 0; it < 300; it++) {
        size_t len = random_text(buf, sizeof buf, true);
        int32_t *a, *b;
        size_t na = encode(T35, buf, len, SI_TOK_SPECIAL_ALL, &a);
        size_t nb = encode(tp, buf, len, SI_TOK_SPECIAL_ALL, &b);
        bool same = na == nb;
        for (size_t i = 0; same && i < na; i++)
            same = (int32_t)perm[a[i]] == b[i];
        if (!same)
            ck_abort_msg("iteration %d: permuted vocabulary gives other tokens", it);
        free(a);
        free(b);
    }
    ck_assert(si_token_is_eog(tp, (int32_t)perm[151645]));
    si_tokenizer_free(tp);
    free(tok);
    free(ty);
    free(perm);
}
END_TEST

START_TEST(test_errors)
{
    si_tok_spec spec = tu_spec(&V, "llama-bpe", false);
    si_tokenizer *t = NULL;
    si_err err;
    ck_assert_int_eq(si_tokenizer_new(&spec, &t, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "llama-bpe"));
    ck_assert_ptr_null(t);

    /* Byte symbols only: a merge naming a missing token is refused. */
    const char *toks[257];
    char store[256][5];
    for (int k = 0; k < 256; k++) {
        store[k][tu_utf8(tu_byte_cp[tu_byte_order[k]], store[k])] = '\0';
        toks[k] = store[k];
    }
    toks[256] = "ab";
    const char *merges[2] = { "a b", "ab c" };
    si_tok_spec s2 = { .n_tokens = 257, .tokens = toks, .n_merges = 1, .merges = merges,
                       .pre = "qwen2", .bos_id = -1, .eos_id = -1, .eot_id = -1 };
    ck_assert_int_eq(si_tokenizer_new(&s2, &t, &err), SI_OK);
    int32_t *ids;
    size_t n = encode(t, "abc", 3, SI_TOK_SPECIAL_ALL, &ids);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(ids[0], 256);
    free(ids);
    si_tokenizer_free(t);
    s2.n_merges = 2;
    ck_assert_int_eq(si_tokenizer_new(&s2, &t, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "merge 1"));
    merges[1] = "abc";
    ck_assert_int_eq(si_tokenizer_new(&s2, &t, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "separator"));
    /* A byte symbol missing from the vocabulary. */
    s2.n_merges = 0;
    toks[5] = "zz";
    ck_assert_int_eq(si_tokenizer_new(&s2, &t, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "byte 0x"));
    toks[5] = store[5];
    s2.eos_id = 257;
    ck_assert_int_eq(si_tokenizer_new(&s2, &t, &err), SI_ERANGE);
    s2.eos_id = -1;
    int32_t bad_type[257] = { 0 };
    bad_type[3] = 9;
    s2.token_type = bad_type;
    ck_assert_int_eq(si_tokenizer_new(&s2, &t, &err), SI_EFORMAT);
    ck_assert_int_eq(si_tokenize(T35, "x", 1, (enum si_tok_special)7, &ids, &n, &err), SI_EINVAL);
    /* An empty text gives no ids. */
    ck_assert_int_eq(si_tokenize(T35, "", 0, SI_TOK_SPECIAL_ALL, &ids, &n, &err), SI_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(ids);
}
END_TEST

/* ---- real Qwen3.5 tokens (partial list) --------------------------------------------- */

/* Reads one CSV field (RFC 4180 quoting) at *p into out; returns its length. */
static size_t csv_field(char **p, char *out)
{
    char *s = *p;
    size_t n = 0;
    if (*s == '"') {
        s++;
        for (;;) {
            if (s[0] == '"' && s[1] == '"') {
                out[n++] = '"';
                s += 2;
            } else if (s[0] == '"') {
                s++;
                break;
            } else {
                out[n++] = *s++;
            }
        }
    } else {
        while (*s && *s != ',' && *s != '\r' && *s != '\n')
            out[n++] = *s++;
    }
    if (*s == ',')
        s++;
    *p = s;
    out[n] = '\0';
    return n;
}

/* Real Qwen3.5 ids with their texts placed in a 248320-entry vocabulary:
 * the byte-level form looks up to the real id and decodes back to the text,
 * e.g. id 55036 = 128 spaces, 213283 = "よろしくお願いいたします". */
START_TEST(test_qwen35_partial)
{
    char path[4096];
    tu_data_path(path, sizeof path, "qwen35-partial/tokens_preview.csv");
    char *csv = tu_read_file(path, NULL);
    ck_assert_ptr_nonnull(csv);
    enum { N = 248320 };
    char **tok = calloc(N, sizeof *tok);
    int32_t *ty = calloc(N, sizeof *ty);
    char **txt = calloc(N, sizeof *txt);
    size_t *txt_len = calloc(N, sizeof *txt_len);
    char *p = strchr(csv, '\n') + 1, field[4096], del[64];
    int rows = 0;
    while (*p) {
        csv_field(&p, field);
        long id = strtol(field, NULL, 10);
        size_t n = csv_field(&p, field);
        csv_field(&p, del);
        while (*p == '\r' || *p == '\n')
            p++;
        ck_assert(id >= 256 && id < N && tok[id] == NULL);
        txt[id] = malloc(n + 1);
        memcpy(txt[id], field, n + 1);
        txt_len[id] = n;
        tok[id] = tu_bytelevel(field, n);
        ty[id] = 1;
        rows++;
    }
    ck_assert_int_eq(rows, 12042);
    for (int k = 0; k < 256; k++) {
        char u[5] = { 0 };
        tu_utf8(tu_byte_cp[tu_byte_order[k]], u);
        tok[k] = strdup(u);
        ty[k] = 1;
    }
    for (int i = 0; i < N; i++)
        if (tok[i] == NULL) {
            char hole[32];
            snprintf(hole, sizeof hole, "[PAD%d]", i);
            tok[i] = strdup(hole);
            ty[i] = 5;
        }
    si_tok_spec spec = { .n_tokens = N, .tokens = (const char *const *)tok, .token_type = ty,
                         .pre = "qwen35", .bos_id = -1, .eos_id = -1, .eot_id = -1 };
    si_tokenizer *t;
    si_err err;
    ck_assert_msg(si_tokenizer_new(&spec, &t, &err) == SI_OK, "%s", err.msg);
    int checked = 0;
    for (int i = 256; i < N; i++) {
        if (txt[i] == NULL)
            continue;
        const char *b;
        size_t bl;
        if (si_token_lookup(t, tok[i]) != i || si_token_bytes(t, i, &b, &bl) != SI_OK ||
            bl != txt_len[i] || memcmp(b, txt[i], bl) != 0)
            ck_abort_msg("real Qwen3.5 token %d does not round-trip", i);
        checked++;
    }
    const char *b;
    size_t bl;
    si_token_bytes(t, 55036, &b, &bl);
    ck_assert_uint_eq(bl, 128);
    for (size_t i = 0; i < bl; i++)
        ck_assert_int_eq(b[i], ' ');
    si_token_bytes(t, 213283, &b, &bl);
    ck_assert(bl == strlen("よろしくお願いいたします") && memcmp(b, "よろしくお願いいたします", bl) == 0);
    printf("Qwen3.5 partial token list: %d real tokens decode to their text\n", checked);
    si_tokenizer_free(t);
    for (int i = 0; i < N; i++) {
        free(tok[i]);
        free(txt[i]);
    }
    free(tok);
    free(ty);
    free(txt);
    free(txt_len);
    free(csv);
}
END_TEST

/* ---- GGUF ---------------------------------------------------------------------------- */

START_TEST(test_gguf_gpt2)
{
    char path[4096], inp[4096], out[4096];
    const char *top = getenv("SI_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/data/gguf/ggml-vocab-gpt-2.gguf", top ? top : ".");
    tu_data_path(inp, sizeof inp, "test-vectors/llama.cpp/ggml-vocab-gpt-2.gguf.inp");
    tu_data_path(out, sizeof out, "test-vectors/llama.cpp/ggml-vocab-gpt-2.gguf.out");
    FILE *f = fopen(path, "rb");
    if (f == NULL) {   /* the GGUF belongs to tests/gguf's data */
        printf("test_gguf_gpt2: %s not available, not checked\n", path);
        return;
    }
    fclose(f);
    si_gguf *g = NULL;
    si_err err;
    int rc = si_gguf_open(path, &g, &err);
    ck_assert_msg(rc == SI_OK, "%s", err.msg);
    si_tokenizer *t;
    rc = si_tokenizer_from_gguf(g, &t, &err);
    ck_assert_msg(rc == SI_OK, "%s", err.msg);
    si_gguf_close(g);   /* the tokenizer copied what it needs */
    ck_assert_uint_eq(si_tokenizer_n_vocab(t), 50257);
    ck_assert(si_token_is_eog(t, 50256));
    int n = 0, ok = run_llamacpp_vectors(t, inp, out, &n);
    printf("llama.cpp gpt-2 GGUF vectors: %d/%d match\n", ok, n);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(ok, n);
    si_tokenizer_free(t);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_vocab);
    tcase_add_test(tc, test_vocab_vs_tokenizer_json);
    tcase_add_test(tc, test_llamacpp_qwen35_vectors);
    tcase_add_test(tc, test_hf_qwen2_vectors);
    tcase_add_test(tc, test_spec_examples);
    tcase_add_test(tc, test_pretok_qwen);
    tcase_add_test(tc, test_pretok_gpt2);
    tcase_add_test(tc, test_special);
    tcase_add_test(tc, test_roundtrip_random);
    tcase_add_test(tc, test_roundtrip_nfc);
    tcase_add_test(tc, test_stream_decode);
    tcase_add_test(tc, test_permuted_ids);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_qwen35_partial);
    tcase_add_test(tc, test_gguf_gpt2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    si_err err;
    if (tu_load_qwen3(&V) != 0)
        return 1;
    si_tok_spec s35 = tu_spec(&V, "qwen35", false), s2 = tu_spec(&V, "qwen2", true);
    if (si_tokenizer_new(&s35, &T35, &err) != SI_OK || si_tokenizer_new(&s2, &T2, &err) != SI_OK) {
        fprintf(stderr, "building the Qwen3 tokenizer: %s\n", err.msg);
        return 1;
    }
    SRunner *sr = srunner_create(tokenizer_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    si_tokenizer_free(T35);
    si_tokenizer_free(T2);
    return failed == 0 ? 0 : 1;
}
