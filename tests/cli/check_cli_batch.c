/* tests/cli/check_cli_batch.c — `sparkinfer batch` end to end on tiny
 * generated models of both families (cpu backend): each prompt's text is
 * what `sparkinfer run` gives for it alone (greedy, and sampling with
 * seed + its index), whatever the number of sequences decoding together
 * and however the prompts' prefill is cut into the steps, with decode-step
 * sampling on the backend or on the host; results in
 * input order with their line numbers; how each sequence ends; bad input
 * (a prompt longer than the context, a malformed JSON line, no prompts,
 * bad flags) fails with a message naming it and loses nothing else. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli_util.h"

static const char *prompts[] = { "Hello there", "The quick brown fox", "Once upon a time in a land far away",
                                 "abc", "1 2 3 4", "sparkinfer" };
#define N_PROMPTS 6

static void setup(void)
{
    cli_setup();
    const char *b = getenv("SI_TOP_BUILDDIR");
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/sparkinfer-uninstalled.ini", b && *b ? b : ".");
    setenv("SPARKINFER_CONFIG", cfg, 1);
    char args[1024];
    snprintf(args, sizeof args, "mkmodel --preset tiny --seed 3 -o '%s/dense.gguf'", cli_tmpdir);
    ck_assert_int_eq(cli_run(args), 0);
    snprintf(args, sizeof args, "mkmodel --preset tiny --arch qwen35moe --quant q8_0 --seed 5 -o '%s/moe.gguf'",
             cli_tmpdir);
    ck_assert_int_eq(cli_run(args), 0);
    /* the prompts, a blank line after the second (lines 1, 2, 4, 5, 6, 7) */
    char path[400];
    cli_path(path, sizeof path, "prompts.txt");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < N_PROMPTS; i++)
        fprintf(f, "%s\n%s", prompts[i], i == 1 ? "\n" : "");
    fclose(f);
}

/* The JSON objects of tmp/stdout, one a line; *n of them. */
static cJSON **read_jsonl(int *n)
{
    char *out = cli_slurp("stdout");
    cJSON **v = calloc(64, sizeof *v);
    *n = 0;
    for (char *s = out, *nl; s != NULL && *s != '\0'; s = nl) {
        nl = strchr(s, '\n');
        if (nl != NULL)
            *nl++ = '\0';
        ck_assert_int_lt(*n, 64);
        v[*n] = cJSON_Parse(s);
        ck_assert_msg(v[*n] != NULL, "not JSON: %s", s);
        (*n)++;
    }
    free(out);
    return v;
}

static void free_jsonl(cJSON **v, int n)
{
    for (int i = 0; i < n; i++)
        cJSON_Delete(v[i]);
    free(v);
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    ck_assert_msg(cJSON_IsNumber(x), "no number %s", k);
    return x->valuedouble;
}

/* `batch` over the prompts file with SAMPLING and -np np as JSON lines:
 * every prompt present, in order, with its line, none failed. */
static cJSON **batch_ok(const char *model, const char *sampling, int np, int *n)
{
    char args[1024];
    snprintf(args, sizeof args, "batch -m '%s/%s.gguf' -f '%s/prompts.txt' --jsonl -np %d %s", cli_tmpdir, model,
             cli_tmpdir, np, sampling);
    const int st = cli_run(args);
    char *err = cli_slurp("stderr");
    ck_assert_msg(st == 0, "batch %s -np %d: exit %d: %s", sampling, np, st, err);
    ck_assert_msg(strstr(err, "sparkinfer batch: 6 prompts") != NULL, "no summary: %s", err);
    free(err);
    cJSON **v = read_jsonl(n);
    ck_assert_int_eq(*n, N_PROMPTS);
    static const int lines[N_PROMPTS] = { 1, 2, 4, 5, 6, 7 };
    for (int i = 0; i < N_PROMPTS; i++) {
        ck_assert_int_eq((int)jnum(v[i], "index"), i);
        ck_assert_int_eq((int)jnum(v[i], "line"), lines[i]);
        ck_assert_str_eq(jstr(v[i], "prompt"), prompts[i]);
        ck_assert_msg(jstr(v[i], "text") != NULL && jstr(v[i], "error") == NULL, "prompt %d failed", i);
    }
    return v;
}

/* Each prompt's text equals `run` of it alone with SAMPLING (and, with
 * seeded, --seed seed + index). */
static void same_as_run(const char *model, const char *sampling, long seed, cJSON **v)
{
    for (int i = 0; i < N_PROMPTS; i++) {
        char args[1024], sd[64] = "";
        if (seed >= 0)
            snprintf(sd, sizeof sd, "--seed %ld", seed + i);
        snprintf(args, sizeof args, "run -m '%s/%s.gguf' -p '%s' %s %s", cli_tmpdir, model, prompts[i], sampling, sd);
        ck_assert_int_eq(cli_run(args), 0);
        char *out = cli_slurp("stdout");
        ck_assert_msg(strcmp(out, jstr(v[i], "text")) == 0, "%s prompt %d: run '%s', batch '%s'", model, i, out,
                      jstr(v[i], "text"));
        free(out);
    }
}

static void same_batches(cJSON **a, cJSON **b, const char *what)
{
    for (int i = 0; i < N_PROMPTS; i++) {
        ck_assert_msg(strcmp(jstr(a[i], "text"), jstr(b[i], "text")) == 0, "%s: prompt %d differs", what, i);
        ck_assert_str_eq(jstr(a[i], "finish"), jstr(b[i], "finish"));
    }
}

/* Greedy: one sequence at a time, 2 and 6 together, prompts prefilled in
 * forwards of their own (--prefill-apart) or riding in the decode steps
 * in chunks of a few tokens (-b 5: 5 tokens a step in all), all `run`'s
 * text. */
START_TEST(test_greedy_matches_run)
{
    static const char *models[] = { "dense", "moe" };
    static const char *how[] = { "", "--prefill-apart", "-b 5" };
    static const int nps[] = { 2, 6, 3 };
    for (int m = 0; m < 2; m++) {
        int n1;
        cJSON **a = batch_ok(models[m], "-n 12 --temp 0", 1, &n1);
        same_as_run(models[m], "-n 12 --temp 0", -1, a);
        for (int i = 0; i < N_PROMPTS; i++)
            ck_assert_msg(jnum(a[i], "tokens") <= 12 && jnum(a[i], "prompt_tokens") > 0, "prompt %d counts", i);
        for (int h = 0; h < 3; h++) {
            char sp[128], what[160];
            snprintf(sp, sizeof sp, "-n 12 --temp 0 %s", how[h]);
            snprintf(what, sizeof what, "%s: -np 1 vs %d %s", models[m], nps[h], how[h]);
            int n;
            cJSON **b = batch_ok(models[m], sp, nps[h], &n);
            same_batches(a, b, what);
            free_jsonl(b, n);
        }
        free_jsonl(a, n1);
    }
}
END_TEST

/* Sampling: prompt i draws with seed + i whatever -np, on the backend's
 * top-K (penalties a row) or the full rows. */
START_TEST(test_sampling_seeded)
{
    const char *sp = "-n 10 --temp 0.8 --top-k 5 --repeat-penalty 1.3 --repeat-last-n 8 --seed 11";
    int n1, n4, nh;
    cJSON **a = batch_ok("dense", sp, 1, &n1);
    cJSON **b = batch_ok("dense", sp, 4, &n4);
    char host[512];
    snprintf(host, sizeof host, "%s --set runtime.device_sampling=false", sp);
    cJSON **c = batch_ok("dense", host, 3, &nh);
    same_batches(a, b, "sampling, -np 1 vs 4");
    same_batches(a, c, "sampling, top-K path vs full rows");
    same_as_run("dense", "-n 10 --temp 0.8 --top-k 5 --repeat-penalty 1.3 --repeat-last-n 8", 11, b);
    free_jsonl(a, n1);
    free_jsonl(b, n4);
    free_jsonl(c, nh);
}
END_TEST

/* How sequences end: -n 0 generates nothing; a context of 12 ends each
 * after n_ctx - n_prompt + 1 tokens (the last one sampled, not fed), as
 * `run` does; a prompt longer than the context fails alone. */
START_TEST(test_finish_and_context)
{
    int n;
    cJSON **v = batch_ok("dense", "-n 0 --temp 0", 3, &n);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq((int)jnum(v[i], "tokens"), 0);
        ck_assert_str_eq(jstr(v[i], "finish"), "length");
    }
    free_jsonl(v, n);
    char args[1024];
    snprintf(args, sizeof args, "batch -m '%s/dense.gguf' -f '%s/prompts.txt' --jsonl -np 2 -n 100 --temp 0 -c 12",
             cli_tmpdir, cli_tmpdir);
    ck_assert_int_eq(cli_run(args), 1);
    char *err = cli_slurp("stderr");
    v = read_jsonl(&n);
    ck_assert_int_eq(n, N_PROMPTS);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const char *e = jstr(v[i], "error");
        if (e != NULL) {
            failed++;
            ck_assert_msg(strstr(e, "exceeds the context of 12 tokens") != NULL, "error: %s", e);
            ck_assert_msg(strstr(err, "line") != NULL && strstr(err, "exceeds the context") != NULL, "stderr: %s",
                          err);
            continue;
        }
        const int np = (int)jnum(v[i], "prompt_tokens"), nt = (int)jnum(v[i], "tokens");
        ck_assert_str_eq(jstr(v[i], "finish"), "context");
        ck_assert_msg(nt == 12 - np + 1, "prompt %d: %d + %d tokens in a context of 12", i, np, nt);
    }
    ck_assert_int_eq(failed, 1);   /* (only the 3rd prompt, 19 tokens, is longer than 12) */
    free(err);
    free_jsonl(v, n);
}
END_TEST

START_TEST(test_bad_input)
{
    char args[1024], path[400];
    cli_path(path, sizeof path, "bad.jsonl");
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("\"fine\"\n{\"prompt\": \"also fine\"}\n{\"text\": 3}\n", f);
    fclose(f);
    snprintf(args, sizeof args, "batch -m '%s/dense.gguf' -f '%s' --jsonl-in --jsonl -n 2", cli_tmpdir, path);
    ck_assert_int_eq(cli_run(args), 1);
    char *err = cli_slurp("stderr");
    ck_assert_msg(strstr(err, "bad.jsonl:3:") != NULL && strstr(err, "\"prompt\"") != NULL, "stderr: %s", err);
    free(err);
    /* JSON strings carry newlines */
    f = fopen(path, "w");
    fputs("\"two\\nlines\"\n", f);
    fclose(f);
    ck_assert_int_eq(cli_run(args), 0);
    int n;
    cJSON **v = read_jsonl(&n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(jstr(v[0], "prompt"), "two\nlines");
    free_jsonl(v, n);
    /* only blank lines */
    f = fopen(path, "w");
    fputs("\n\r\n\n", f);
    fclose(f);
    snprintf(args, sizeof args, "batch -m '%s/dense.gguf' -f '%s'", cli_tmpdir, path);
    ck_assert_int_eq(cli_run(args), 1);
    err = cli_slurp("stderr");
    ck_assert_msg(strstr(err, "no prompts") != NULL, "stderr: %s", err);
    free(err);
    /* usage */
    snprintf(args, sizeof args, "batch -m '%s/dense.gguf'", cli_tmpdir);
    ck_assert_int_eq(cli_run(args), 2);
    snprintf(args, sizeof args, "batch -m '%s/dense.gguf' -f '%s' -np 0", cli_tmpdir, path);
    ck_assert_int_eq(cli_run(args), 2);
    err = cli_slurp("stderr");
    ck_assert_msg(strstr(err, "-np '0'") != NULL, "stderr: %s", err);
    free(err);
    snprintf(args, sizeof args, "batch -m '%s/dense.gguf' -f '%s/missing.txt'", cli_tmpdir, cli_tmpdir);
    ck_assert_int_eq(cli_run(args), 1);
    err = cli_slurp("stderr");
    ck_assert_msg(strstr(err, "missing.txt") != NULL, "stderr: %s", err);
    free(err);
    ck_assert_int_eq(cli_run("batch --help"), 0);
}
END_TEST

static Suite *batch_suite(void)
{
    Suite *s = suite_create("cli_batch");
    TCase *tc = tcase_create("batch");
    tcase_add_checked_fixture(tc, setup, cli_teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_greedy_matches_run);
    tcase_add_test(tc, test_sampling_seeded);
    tcase_add_test(tc, test_finish_and_context);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(batch_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
