/* tests/cli/check_hf_vocab.c — the tokenizer.json reader (core/hf_vocab.c):
 * hand-made tiny files (tests/data/tokenizer/tiny-bpe*), error paths, the
 * minimal built-in vocabulary, the GGUF keys it writes (read back with the
 * GGUF reader) and, when $SI_SHARED_DATA has it, the real Qwen3 tokenizer. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "hf_vocab.h"

static char tmpdir[256];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/si-hfvocab-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void data_path(char *buf, size_t n, const char *rel)
{
    const char *top = getenv("SI_TOP_SRCDIR");
    snprintf(buf, n, "%s/tests/data/tokenizer/%s", top && *top ? top : ".", rel);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- tiny hand-made files ----------------------------------------------------- */

START_TEST(test_tiny_strings)
{
    char tj[512], cj[512];
    data_path(tj, sizeof tj, "tiny-bpe/tokenizer.json");
    data_path(cj, sizeof cj, "tiny-bpe/tokenizer_config.json");
    si_hf_vocab v;
    si_err err = { { 0 } };
    ck_assert_msg(si_hf_vocab_load(tj, cj, &v, &err) == SI_OK, "%s", err.msg);

    ck_assert_uint_eq(v.n_tokens, 15);              /* max id 14 + 1 */
    ck_assert_str_eq(v.tokens[0], "a");
    ck_assert_str_eq(v.tokens[3], "\xC4\xA0");      /* U+0120 'Ġ' */
    ck_assert_str_eq(v.tokens[5], "\xC4\xA0" "a");
    ck_assert_str_eq(v.tokens[8], "\xC3\x83\xC2\xA9");
    ck_assert_str_eq(v.tokens[9], "[PAD9]");        /* hole */
    ck_assert_int_eq(v.token_type[9], SI_TOKEN_UNUSED);
    ck_assert_int_eq(v.token_type[0], SI_TOKEN_NORMAL);
    ck_assert_int_eq(v.token_type[11], SI_TOKEN_NORMAL);
    ck_assert_str_eq(v.tokens[12], "<|endoftext|>");
    ck_assert_int_eq(v.token_type[12], SI_TOKEN_CONTROL);
    ck_assert_int_eq(v.token_type[13], SI_TOKEN_CONTROL);
    ck_assert_str_eq(v.tokens[14], "<think>");
    ck_assert_int_eq(v.token_type[14], SI_TOKEN_USER_DEFINED);

    ck_assert_uint_eq(v.n_merges, 4);
    ck_assert_str_eq(v.merges[0], "a b");
    ck_assert_str_eq(v.merges[1], "\xC4\xA0 a");
    ck_assert_str_eq(v.merges[3], "\xC4\xA0 \xC4\xA0");

    ck_assert_str_eq(v.pre, "qwen35");
    ck_assert_int_eq(v.bos_id, 12);                 /* {"content": ...} form */
    ck_assert_int_eq(v.eos_id, 13);                 /* plain string form */
    ck_assert_int_eq(v.pad_id, -1);                 /* null */
    ck_assert(v.add_bos);
    ck_assert_ptr_nonnull(v.chat_template);
    ck_assert_ptr_nonnull(strstr(v.chat_template, "<|im_start|>{{ m['role'] }}\n"));
    ck_assert_int_eq(si_hf_vocab_find(&v, "abc"), 6);
    ck_assert_int_eq(si_hf_vocab_find(&v, "zzz"), -1);
    si_hf_vocab_free(&v);
    ck_assert_ptr_null(v.tokens);
    si_hf_vocab_free(&v);   /* twice is harmless */
}
END_TEST

START_TEST(test_tiny_pairs)
{
    char tj[512], cj[512];
    data_path(tj, sizeof tj, "tiny-bpe-pairs/tokenizer.json");
    data_path(cj, sizeof cj, "tiny-bpe-pairs/tokenizer_config.json");
    si_hf_vocab v;
    si_err err = { { 0 } };
    ck_assert_msg(si_hf_vocab_load(tj, cj, &v, &err) == SI_OK, "%s", err.msg);
    ck_assert_uint_eq(v.n_tokens, 7);
    ck_assert_uint_eq(v.n_merges, 3);
    ck_assert_str_eq(v.merges[0], "h i");           /* ["h", "i"] pair form */
    ck_assert_str_eq(v.merges[2], "\xC4\xA0h i");
    ck_assert_str_eq(v.pre, "qwen2");               /* \p{N} without {1,3}, \p{L}+ */
    ck_assert_int_eq(v.bos_id, -1);
    ck_assert_int_eq(v.eos_id, 6);
    ck_assert_int_eq(v.pad_id, 6);
    ck_assert(!v.add_bos);
    /* no chat_template in the config: chat_template.jinja beside it */
    ck_assert_ptr_nonnull(v.chat_template);
    ck_assert_ptr_nonnull(strstr(v.chat_template, "{{ bos_token }}"));
    si_hf_vocab_free(&v);

    /* Without a config: ids unknown, no template. */
    ck_assert_msg(si_hf_vocab_load(tj, NULL, &v, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(v.eos_id, -1);
    ck_assert_ptr_null(v.chat_template);
    si_hf_vocab_free(&v);
}
END_TEST

START_TEST(test_pre_default_and_bad_inputs)
{
    make_tmpdir();
    char p[400];
    si_hf_vocab v;
    si_err err = { { 0 } };

    /* GPT-4 style digits {1,3} and no Split at all: "default" */
    snprintf(p, sizeof p, "%s/gpt4.json", tmpdir);
    write_text(p, "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                  "\"\\\\p{L}+|\\\\p{N}{1,3}\"}},"
                  "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}");
    ck_assert_msg(si_hf_vocab_load(p, NULL, &v, &err) == SI_OK, "%s", err.msg);
    ck_assert_str_eq(v.pre, "default");
    si_hf_vocab_free(&v);
    snprintf(p, sizeof p, "%s/nosplit.json", tmpdir);
    write_text(p, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}");
    ck_assert_msg(si_hf_vocab_load(p, NULL, &v, &err) == SI_OK, "%s", err.msg);
    ck_assert_str_eq(v.pre, "default");
    ck_assert_uint_eq(v.n_merges, 0);
    si_hf_vocab_free(&v);

    /* missing file */
    snprintf(p, sizeof p, "%s/absent.json", tmpdir);
    ck_assert_int_eq(si_hf_vocab_load(p, NULL, &v, &err), SI_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "absent.json"));
    ck_assert_ptr_null(v.tokens);

    /* not JSON */
    snprintf(p, sizeof p, "%s/broken.json", tmpdir);
    write_text(p, "{\"model\": {\"vocab\": {\"a\": 0,");
    ck_assert_int_eq(si_hf_vocab_load(p, NULL, &v, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "broken.json"));

    /* bad ids and shapes */
    static const char *const bad[] = {
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5}}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999}}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":[]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}",
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":{}}}",
        "{\"added_tokens\":[{\"id\":\"x\",\"content\":\"a\"}],"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}",
        "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
        "[1, 2]",
        "{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(p, sizeof p, "%s/bad%zu.json", tmpdir, i);
        write_text(p, bad[i]);
        err.msg[0] = '\0';
        int rc = si_hf_vocab_load(p, NULL, &v, &err);
        ck_assert_msg(rc != SI_OK, "bad case %zu accepted", i);
        ck_assert_msg(strstr(err.msg, p) != NULL, "case %zu: message '%s' lacks the file", i,
                      err.msg);
        ck_assert_ptr_null(v.tokens);
    }

    /* a broken config is an error too, naming the config */
    char tj[512];
    data_path(tj, sizeof tj, "tiny-bpe/tokenizer.json");
    snprintf(p, sizeof p, "%s/cfg.json", tmpdir);
    write_text(p, "{\"bos_token\": ");
    ck_assert_int_eq(si_hf_vocab_load(tj, p, &v, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "cfg.json"));
    ck_assert_ptr_null(v.tokens);
    remove_tmpdir();
}
END_TEST

START_TEST(test_pad)
{
    char tj[512];
    data_path(tj, sizeof tj, "tiny-bpe/tokenizer.json");
    si_hf_vocab v;
    si_err err = { { 0 } };
    ck_assert_msg(si_hf_vocab_load(tj, NULL, &v, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(si_hf_vocab_pad(&v, 10, &err), SI_OK);   /* smaller: no-op */
    ck_assert_uint_eq(v.n_tokens, 15);
    ck_assert_int_eq(si_hf_vocab_pad(&v, 40, &err), SI_OK);
    ck_assert_uint_eq(v.n_tokens, 40);
    ck_assert_str_eq(v.tokens[14], "<think>");
    ck_assert_str_eq(v.tokens[15], "[PAD15]");
    ck_assert_str_eq(v.tokens[39], "[PAD39]");
    ck_assert_int_eq(v.token_type[39], SI_TOKEN_UNUSED);
    ck_assert_int_eq(si_hf_vocab_pad(&v, 1u << 30, &err), SI_ERANGE);
    ck_assert_uint_eq(v.n_tokens, 40);
    si_hf_vocab_free(&v);
}
END_TEST

/* ---- minimal vocabulary ---------------------------------------------------------- */

START_TEST(test_minimal)
{
    si_hf_vocab v;
    si_err err = { { 0 } };
    ck_assert_msg(si_hf_vocab_minimal(&v, &err) == SI_OK, "%s", err.msg);
    /* GPT-2 bytes_to_unicode order, as in Qwen's vocabulary */
    ck_assert_str_eq(v.tokens[0], "!");
    ck_assert_str_eq(v.tokens[93], "~");
    ck_assert_str_eq(v.tokens[94], "\xC2\xA1");        /* byte 0xA1 */
    ck_assert_str_eq(v.tokens[187], "\xC3\xBF");       /* byte 0xFF */
    ck_assert_str_eq(v.tokens[188], "\xC4\x80");       /* byte 0x00 -> U+0100 */
    ck_assert_str_eq(v.tokens[220], "\xC4\xA0");       /* space -> U+0120 */
    ck_assert_str_eq(v.tokens[255], "\xC5\x83");       /* byte 0xAD -> U+0143 */
    ck_assert_uint_ge(v.n_merges, 200);
    ck_assert_uint_le(v.n_merges, 400);
    /* every merge joins two tokens and its result is a token */
    for (uint32_t i = 0; i < v.n_merges; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", v.merges[i]);
        char *sp = strchr(buf, ' ');
        ck_assert_ptr_nonnull(sp);
        *sp = '\0';
        ck_assert_msg(si_hf_vocab_find(&v, buf) >= 0, "merge %u left '%s'", i, buf);
        ck_assert_msg(si_hf_vocab_find(&v, sp + 1) >= 0, "merge %u right '%s'", i, sp + 1);
        char joined[256];
        snprintf(joined, sizeof joined, "%s%s", buf, sp + 1);
        int32_t id = si_hf_vocab_find(&v, joined);
        ck_assert_msg(id >= 256 && (uint32_t)id < 256 + i + 1, "merge %u result '%s' id %d",
                      i, joined, id);
    }
    /* tokens are unique */
    for (uint32_t i = 0; i < v.n_tokens; i++)
        ck_assert_int_eq(si_hf_vocab_find(&v, v.tokens[i]), (int32_t)i);
    ck_assert_str_eq(v.merges[0], "\xC4\xA0 t");       /* " t" is the commonest pair */
    uint32_t n = v.n_tokens;
    ck_assert_str_eq(v.tokens[n - 5], "<|endoftext|>");
    ck_assert_str_eq(v.tokens[n - 4], "<|im_start|>");
    ck_assert_str_eq(v.tokens[n - 3], "<|im_end|>");
    ck_assert_str_eq(v.tokens[n - 2], "<think>");
    ck_assert_str_eq(v.tokens[n - 1], "</think>");
    ck_assert_int_eq(v.token_type[n - 5], SI_TOKEN_CONTROL);
    ck_assert_int_eq(v.token_type[n - 3], SI_TOKEN_CONTROL);
    ck_assert_int_eq(v.token_type[n - 1], SI_TOKEN_USER_DEFINED);
    ck_assert_int_eq(v.token_type[300], SI_TOKEN_NORMAL);
    ck_assert_int_eq(v.bos_id, (int32_t)n - 5);
    ck_assert_int_eq(v.eos_id, (int32_t)n - 3);
    ck_assert_str_eq(v.pre, "qwen35");
    ck_assert(!v.add_bos);
    ck_assert_ptr_nonnull(strstr(v.chat_template, "<|im_start|>"));

    /* deterministic */
    si_hf_vocab w;
    ck_assert_int_eq(si_hf_vocab_minimal(&w, &err), SI_OK);
    ck_assert_uint_eq(w.n_tokens, v.n_tokens);
    ck_assert_uint_eq(w.n_merges, v.n_merges);
    for (uint32_t i = 0; i < v.n_merges; i++)
        ck_assert_str_eq(w.merges[i], v.merges[i]);
    si_hf_vocab_free(&w);
    si_hf_vocab_free(&v);
}
END_TEST

/* ---- GGUF keys --------------------------------------------------------------------- */

static void arr_str_eq(const si_gguf_value *a, uint64_t i, const char *want)
{
    si_gguf_value e;
    ck_assert_int_eq(si_gguf_arr_get(a, i, &e), SI_OK);
    ck_assert_int_eq(e.type, SI_GGUF_STRING);
    ck_assert_msg(e.v.s.len == strlen(want) && memcmp(e.v.s.ptr, want, e.v.s.len) == 0,
                  "element %llu is '%.*s', want '%s'", (unsigned long long)i, (int)e.v.s.len,
                  e.v.s.ptr, want);
}

START_TEST(test_write_gguf)
{
    make_tmpdir();
    char tj[512], cj[512], out[400];
    data_path(tj, sizeof tj, "tiny-bpe/tokenizer.json");
    data_path(cj, sizeof cj, "tiny-bpe/tokenizer_config.json");
    snprintf(out, sizeof out, "%s/vocab.gguf", tmpdir);
    si_hf_vocab v;
    si_err err = { { 0 } };
    ck_assert_msg(si_hf_vocab_load(tj, cj, &v, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(si_hf_vocab_pad(&v, 20, &err), SI_OK);

    si_gguf_writer *w;
    ck_assert_msg(si_gguf_writer_open(out, &w, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(si_gguf_writer_set_str(w, "general.architecture", "qwen35"), SI_OK);
    ck_assert_msg(si_hf_vocab_write_gguf(&v, w, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(si_gguf_writer_close(w, &err) == SI_OK, "%s", err.msg);

    si_gguf *g;
    ck_assert_msg(si_gguf_open(out, &g, &err) == SI_OK, "%s", err.msg);
    si_str s;
    ck_assert_int_eq(si_gguf_get_str(g, "tokenizer.ggml.model", &s, &err), SI_OK);
    ck_assert(s.len == 4 && memcmp(s.ptr, "gpt2", 4) == 0);
    ck_assert_int_eq(si_gguf_get_str(g, "tokenizer.ggml.pre", &s, &err), SI_OK);
    ck_assert(s.len == 6 && memcmp(s.ptr, "qwen35", 6) == 0);
    const si_gguf_value *tok = si_gguf_get(g, "tokenizer.ggml.tokens");
    ck_assert_ptr_nonnull(tok);
    ck_assert_int_eq(tok->type, SI_GGUF_ARRAY);
    ck_assert_int_eq(tok->v.arr.type, SI_GGUF_STRING);
    ck_assert_uint_eq(tok->v.arr.n, 20);
    arr_str_eq(tok, 5, "\xC4\xA0" "a");
    arr_str_eq(tok, 12, "<|endoftext|>");
    arr_str_eq(tok, 19, "[PAD19]");
    const si_gguf_value *ty = si_gguf_get(g, "tokenizer.ggml.token_type");
    ck_assert_ptr_nonnull(ty);
    ck_assert_int_eq(ty->v.arr.type, SI_GGUF_I32);
    ck_assert_uint_eq(ty->v.arr.n, 20);
    const int32_t want_types[20] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 5, 1, 1, 3, 3, 4, 5, 5, 5, 5, 5 };
    for (int i = 0; i < 20; i++) {
        si_gguf_value e;
        ck_assert_int_eq(si_gguf_arr_get(ty, (uint64_t)i, &e), SI_OK);
        ck_assert_int_eq(e.v.i, want_types[i]);
    }
    const si_gguf_value *mg = si_gguf_get(g, "tokenizer.ggml.merges");
    ck_assert_ptr_nonnull(mg);
    ck_assert_uint_eq(mg->v.arr.n, 4);
    arr_str_eq(mg, 2, "ab c");
    uint32_t u;
    ck_assert_int_eq(si_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u, &err), SI_OK);
    ck_assert_uint_eq(u, 12);
    ck_assert_int_eq(si_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u, &err), SI_OK);
    ck_assert_uint_eq(u, 13);
    ck_assert_ptr_null(si_gguf_get(g, "tokenizer.ggml.padding_token_id"));
    const si_gguf_value *ab = si_gguf_get(g, "tokenizer.ggml.add_bos_token");
    ck_assert_ptr_nonnull(ab);
    ck_assert_int_eq(ab->type, SI_GGUF_BOOL);
    ck_assert_uint_eq(ab->v.u, 1);
    ck_assert_int_eq(si_gguf_get_str(g, "tokenizer.chat_template", &s, &err), SI_OK);
    ck_assert_uint_eq(s.len, strlen(v.chat_template));
    si_gguf_close(g);
    si_hf_vocab_free(&v);

    ck_assert_int_eq(si_hf_vocab_write_gguf(&v, NULL, &err), SI_EINVAL);   /* empty */
    remove_tmpdir();
}
END_TEST

/* ---- the real Qwen3 tokenizer (only where the shared data exists) -------------------- */

START_TEST(test_qwen3_real)
{
    const char *shared = getenv("SI_SHARED_DATA");
    char tj[512], cj[512];
    snprintf(tj, sizeof tj, "%s/tokenizer/qwen3/tokenizer.json", shared ? shared : "");
    snprintf(cj, sizeof cj, "%s/tokenizer/qwen3/tokenizer_config.json", shared ? shared : "");
    if (shared == NULL || access(tj, R_OK) != 0) {
        fprintf(stderr, "check_hf_vocab: %s absent, real-tokenizer test skipped\n", tj);
        return;
    }
    si_hf_vocab v;
    si_err err = { { 0 } };
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    ck_assert_msg(si_hf_vocab_load(tj, cj, &v, &err) == SI_OK, "%s", err.msg);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double dt = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    fprintf(stderr, "check_hf_vocab: qwen3 tokenizer.json loaded in %.3f s\n", dt);
    ck_assert_msg(dt < 5.0, "loading took %.2f s", dt);   /* ~0.4 s; slack for sanitizers */

    ck_assert_uint_eq(v.n_tokens, 151669);
    ck_assert_uint_eq(v.n_merges, 151387);
    uint32_t normal = 0, control = 0, user = 0, other = 0;
    for (uint32_t i = 0; i < v.n_tokens; i++) {
        switch (v.token_type[i]) {
        case SI_TOKEN_NORMAL:       normal++; break;
        case SI_TOKEN_CONTROL:      control++; break;
        case SI_TOKEN_USER_DEFINED: user++; break;
        default:                    other++;
        }
    }
    ck_assert_uint_eq(normal, 151643);
    ck_assert_uint_eq(control, 14);
    ck_assert_uint_eq(user, 12);
    ck_assert_uint_eq(other, 0);
    ck_assert_str_eq(v.tokens[0], "!");
    ck_assert_str_eq(v.tokens[220], "\xC4\xA0");
    ck_assert_str_eq(v.tokens[151643], "<|endoftext|>");
    ck_assert_str_eq(v.tokens[151657], "<tool_call>");
    ck_assert_int_eq(v.token_type[151657], SI_TOKEN_USER_DEFINED);
    ck_assert_str_eq(v.tokens[151667], "<think>");
    ck_assert_str_eq(v.tokens[151668], "</think>");
    ck_assert_str_eq(v.merges[0], "\xC4\xA0 \xC4\xA0");
    ck_assert_str_eq(v.merges[2], "i n");
    ck_assert_str_eq(v.pre, "qwen2");
    ck_assert_int_eq(v.bos_id, -1);          /* bos_token is null in the config */
    ck_assert_int_eq(v.eos_id, 151645);
    ck_assert_int_eq(v.pad_id, 151643);
    ck_assert(!v.add_bos);
    ck_assert_ptr_nonnull(v.chat_template);
    ck_assert_ptr_nonnull(strstr(v.chat_template, "<|im_start|>"));
    si_hf_vocab_free(&v);
}
END_TEST

static Suite *hf_vocab_suite(void)
{
    Suite *s = suite_create("hf_vocab");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tiny_strings);
    tcase_add_test(tc, test_tiny_pairs);
    tcase_add_test(tc, test_pre_default_and_bad_inputs);
    tcase_add_test(tc, test_pad);
    tcase_add_test(tc, test_minimal);
    tcase_add_test(tc, test_write_gguf);
    tcase_add_test(tc, test_qwen3_real);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(hf_vocab_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
