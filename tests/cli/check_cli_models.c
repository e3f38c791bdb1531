/* tests/cli/check_cli_models.c — runs `sparkinfer mkmodel` and `sparkinfer
 * info` ($SI_TOP_BUILDDIR/sparkinfer) end to end: the files open with the
 * GGUF reader and match their plan (keys, tensor names, types, shapes, data
 * sizes, value scales), generation is deterministic whatever the thread
 * count, `info --json` parses and agrees with the reader, and [runtime]
 * backend / --backend pick the backend. */
#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/mkmodel.h"
#include "gguf.h"
#include "quant.h"

#include "cli_util.h"

/* Same plan mkmodel builds in-process. */
static void plan_for(const char *preset, const char *arch, const char *quant, uint32_t layers,
                     uint32_t rows, si_mk_plan *p)
{
    si_mk_hparams hp;
    si_mk_arch a;
    si_mk_quant q;
    si_err err;
    if (arch)
        ck_assert_int_eq(si_mk_arch_from_name(arch, &a), SI_OK);
    ck_assert_int_eq(si_mk_preset(preset, arch ? &a : NULL, &hp, &err), SI_OK);
    if (quant)
        ck_assert_int_eq(si_mk_quant_from_name(quant, &q), SI_OK);
    else
        q = hp.default_quant;
    if (layers)
        hp.n_layer = layers;
    hp.vocab_rows = rows;
    ck_assert_msg(si_mk_plan_build(&hp, q, p, &err) == SI_OK, "%s", err.msg);
}

static uint32_t get_u32(const si_gguf *g, const char *key)
{
    uint32_t v = 0;
    si_err err;
    ck_assert_msg(si_gguf_get_u32(g, key, &v, &err) == SI_OK, "%s", key);
    return v;
}

/* The file matches the plan: every tensor in order with its type, shape
 * and byte count; values are finite and at the plan's scale. */
static void check_against_plan(const si_gguf *g, const si_mk_plan *p)
{
    ck_assert_uint_eq(si_gguf_n_tensors(g), p->n);
    for (uint32_t i = 0; i < p->n; i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        const si_mk_tensor *w = &p->t[i];
        ck_assert_str_eq(t->name, w->name);
        ck_assert_msg(t->type == w->type, "%s: %s vs %s", t->name, si_type_name(t->type),
                      si_type_name(w->type));
        ck_assert_uint_eq(t->ndim, w->ndim);
        for (int d = 0; d < SI_MAX_DIMS; d++)
            ck_assert_int_eq(t->ne[d], w->ne[d]);
        ck_assert_uint_eq(t->nbytes, w->nbytes);
        ck_assert_uint_eq(t->offset % si_gguf_alignment(g), 0);

        /* dequantise up to 64 rows and look at the values */
        uint64_t rows = t->ne[1] * t->ne[2] < 64 ? (uint64_t)(t->ne[1] * t->ne[2]) : 64;
        size_t n = (size_t)(rows * (uint64_t)t->ne[0]);
        float *x = malloc(n * sizeof *x);
        si_err err;
        ck_assert_msg(si_dequant(t->type, t->data, x, (int64_t)n, &err) == SI_OK, "%s: %s",
                      t->name, err.msg);
        double s = 0, s2 = 0;
        for (size_t k = 0; k < n; k++) {
            ck_assert_msg(isfinite(x[k]), "%s[%zu] not finite", t->name, k);
            s += x[k];
            s2 += (double)x[k] * x[k];
        }
        double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
        if (w->init == SI_MK_INIT_NEG_EXP)
            ck_assert_msg(mean < -0.36 && mean > -2.72, "%s mean %g", t->name, mean);
        else if (w->init == SI_MK_INIT_ONE_PLUS)
            ck_assert_msg(fabs(mean - 1.0) < 0.01, "%s mean %g", t->name, mean);
        else if (n >= 256)
            ck_assert_msg(fabs(sd / w->std - 1.0) < 4.0 * sqrt(0.5 / (double)n) + 0.08,
                          "%s std %g want %g", t->name, sd, (double)w->std);
        free(x);
    }
}

START_TEST(test_tiny_f32)
{
    char out[400];
    cli_path(out, sizeof out, "tiny.gguf");
    char args[600];
    snprintf(args, sizeof args, "mkmodel --preset tiny --arch qwen35 --seed 11 -o '%s'", out);
    ck_assert_int_eq(cli_run(args), 0);
    char *so = cli_slurp("stdout");
    ck_assert_ptr_nonnull(strstr(so, "109 tensors"));
    free(so);

    si_gguf *g;
    si_err err;
    ck_assert_msg(si_gguf_open(out, &g, &err) == SI_OK, "%s", err.msg);
    si_str s;
    ck_assert_int_eq(si_gguf_get_str(g, "general.architecture", &s, &err), SI_OK);
    ck_assert(s.len == 6 && memcmp(s.ptr, "qwen35", 6) == 0);
    ck_assert_int_eq(si_gguf_get_str(g, "general.name", &s, &err), SI_OK);
    ck_assert(s.len == 23 && memcmp(s.ptr, "sparkinfer mkmodel tiny", 23) == 0);
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 0);
    ck_assert_uint_eq(get_u32(g, "general.quantization_version"), 2);
    ck_assert_uint_eq(get_u32(g, "qwen35.block_count"), 8);
    ck_assert_uint_eq(get_u32(g, "qwen35.embedding_length"), 64);
    ck_assert_uint_eq(get_u32(g, "qwen35.feed_forward_length"), 128);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.head_count"), 4);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.head_count_kv"), 2);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.key_length"), 32);
    ck_assert_uint_eq(get_u32(g, "qwen35.rope.dimension_count"), 16);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.group_count"), 2);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.time_step_rank"), 4);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.state_size"), 16);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.inner_size"), 64);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.conv_kernel"), 4);
    ck_assert_uint_eq(get_u32(g, "qwen35.full_attention_interval"), 4);
    float f;
    ck_assert_int_eq(si_gguf_get_f32(g, "qwen35.rope.freq_base", &f, &err), SI_OK);
    ck_assert(f == 1e7f);
    ck_assert_int_eq(si_gguf_get_f32(g, "qwen35.attention.layer_norm_rms_epsilon", &f, &err), SI_OK);
    ck_assert(f == 1e-6f);
    const si_gguf_value *sec = si_gguf_get(g, "qwen35.rope.dimension_sections");
    ck_assert_ptr_nonnull(sec);
    ck_assert_int_eq(sec->v.arr.type, SI_GGUF_I32);
    ck_assert_uint_eq(sec->v.arr.n, 4);
    ck_assert_ptr_null(si_gguf_get(g, "qwen35.expert_count"));
    ck_assert_int_eq(si_gguf_get_str(g, "tokenizer.ggml.pre", &s, &err), SI_OK);
    ck_assert(s.len == 6 && memcmp(s.ptr, "qwen35", 6) == 0);
    const si_gguf_value *tok = si_gguf_get(g, "tokenizer.ggml.tokens");
    ck_assert_ptr_nonnull(tok);
    uint32_t rows = (uint32_t)tok->v.arr.n;   /* tiny: rows = vocabulary size */
    ck_assert_uint_gt(rows, 400);
    ck_assert_int_eq(si_gguf_tensor(g, "token_embd.weight")->ne[1], rows);

    si_mk_plan p;
    plan_for("tiny", "qwen35", NULL, 0, rows, &p);
    check_against_plan(g, &p);
    si_mk_plan_free(&p);
    si_gguf_close(g);
}
END_TEST

START_TEST(test_tiny_moe_q8_0_and_determinism)
{
    char a[400], b[400], c[400], args[1400];
    cli_path(a, sizeof a, "a.gguf");
    cli_path(b, sizeof b, "b.gguf");
    cli_path(c, sizeof c, "c.gguf");
    snprintf(args, sizeof args, "mkmodel --preset tiny --arch qwen35moe --quant q8_0 "
             "--seed 5 --threads 1 -o '%s'", a);
    ck_assert_int_eq(cli_run(args), 0);
    snprintf(args, sizeof args, "mkmodel --preset=tiny --arch=qwen35moe --quant=q8_0 "
             "--seed=5 --threads=3 --output '%s'", b);
    ck_assert_int_eq(cli_run(args), 0);
    snprintf(args, sizeof args, "mkmodel --preset tiny --arch qwen35moe --quant q8_0 "
             "--seed 6 -o '%s'", c);
    ck_assert_int_eq(cli_run(args), 0);
    snprintf(args, sizeof args, "cmp -s '%s' '%s'", a, b);
    ck_assert_msg(system(args) == 0, "same seed, different thread count: files differ");
    snprintf(args, sizeof args, "cmp -s '%s' '%s'", a, c);
    ck_assert_msg(system(args) != 0, "different seeds: files identical");

    si_gguf *g;
    si_err err;
    ck_assert_msg(si_gguf_open(a, &g, &err) == SI_OK, "%s", err.msg);
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 7);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_count"), 8);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_used_count"), 2);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_feed_forward_length"), 32);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_shared_feed_forward_length"), 32);
    ck_assert_ptr_null(si_gguf_get(g, "qwen35moe.feed_forward_length"));
    ck_assert_uint_eq(si_gguf_n_tensors(g), 6 * 19 + 2 * 16 + 3);
    const si_tensor_info *t = si_gguf_tensor(g, "blk.0.ffn_gate_exps.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->ndim, 3);
    ck_assert_int_eq(t->type, SI_TYPE_Q8_0);
    ck_assert_int_eq(si_gguf_tensor(g, "blk.0.ffn_gate_inp.weight")->type, SI_TYPE_F32);
    uint32_t rows = (uint32_t)si_gguf_tensor(g, "output.weight")->ne[1];
    si_mk_plan p;
    plan_for("tiny", "qwen35moe", "q8_0", 0, rows, &p);
    check_against_plan(g, &p);
    si_mk_plan_free(&p);
    si_gguf_close(g);
}
END_TEST

START_TEST(test_9b_cut)
{
    char out[400], args[800];
    cli_path(out, sizeof out, "9b2.gguf");
    snprintf(args, sizeof args, "mkmodel --preset 9b --layers 2 --vocab-size 4096 --seed 1 "
             "-o '%s'", out);
    ck_assert_int_eq(cli_run(args), 0);
    si_gguf *g;
    si_err err;
    ck_assert_msg(si_gguf_open(out, &g, &err) == SI_OK, "%s", err.msg);
    ck_assert_uint_eq(get_u32(g, "qwen35.block_count"), 2);
    ck_assert_uint_eq(get_u32(g, "qwen35.embedding_length"), 4096);
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 15);
    const si_gguf_value *tok = si_gguf_get(g, "tokenizer.ggml.tokens");
    ck_assert_uint_eq(tok->v.arr.n, 4096);
    si_gguf_value e;
    ck_assert_int_eq(si_gguf_arr_get(tok, 4095, &e), SI_OK);
    ck_assert(e.v.s.len == 9 && memcmp(e.v.s.ptr, "[PAD4095]", 9) == 0);
    const si_gguf_value *ty = si_gguf_get(g, "tokenizer.ggml.token_type");
    ck_assert_int_eq(si_gguf_arr_get(ty, 4095, &e), SI_OK);
    ck_assert_int_eq(e.v.i, 5);
    si_mk_plan p;
    plan_for("9b", NULL, NULL, 2, 4096, &p);
    check_against_plan(g, &p);
    ck_assert_int_eq(si_gguf_tensor(g, "blk.1.attn_qkv.weight")->type, SI_TYPE_Q6_K);
    ck_assert_int_eq(si_gguf_tensor(g, "output.weight")->type, SI_TYPE_Q6_K);
    si_mk_plan_free(&p);
    si_gguf_close(g);
}
END_TEST

/* ---- info --json -------------------------------------------------------------------- */

static cJSON *info_json(const char *file)
{
    char args[600];
    snprintf(args, sizeof args, "info --json '%s'", file);
    ck_assert_int_eq(cli_run(args), 0);
    char *text = cli_slurp("stdout");
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "info --json output is not JSON");
    free(text);
    return j;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "%s not a number", key);
    return v->valuedouble;
}

/* The JSON report agrees with the reader on every key and tensor. */
static void check_json_against_reader(const cJSON *j, const si_gguf *g)
{
    ck_assert(num(j, "version") == si_gguf_version(g));
    ck_assert(num(j, "file_size") == (double)si_gguf_file_size(g));
    ck_assert(num(j, "n_kv") == (double)si_gguf_n_kv(g));
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
    ck_assert_int_eq(cJSON_GetArraySize(md), (int)si_gguf_n_kv(g));
    for (uint64_t i = 0; i < si_gguf_n_kv(g); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(md, si_gguf_kv_key(g, i));
        ck_assert_msg(v != NULL, "key %s missing", si_gguf_kv_key(g, i));
        const si_gguf_value *gv = si_gguf_kv_value(g, i);
        if (gv->type == SI_GGUF_ARRAY)
            ck_assert(num(v, "count") == (double)gv->v.arr.n);
        if (gv->type == SI_GGUF_U32)
            ck_assert(num(v, "value") == (double)gv->v.u);
    }
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    ck_assert_int_eq(cJSON_GetArraySize(ts), (int)si_gguf_n_tensors(g));
    double total = 0;
    for (uint64_t i = 0; i < si_gguf_n_tensors(g); i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        const cJSON *o = cJSON_GetArrayItem(ts, (int)i);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring, t->name);
        ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring,
                         si_type_name(t->type));
        ck_assert(num(o, "bytes") == (double)t->nbytes);
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
        ck_assert_int_eq(cJSON_GetArraySize(shape), (int)t->ndim);
        for (uint32_t d = 0; d < t->ndim; d++)
            ck_assert(cJSON_GetArrayItem(shape, (int)d)->valuedouble == (double)t->ne[d]);
        total += (double)t->nbytes;
    }
    ck_assert(num(j, "total_bytes") == total);
    double by_type = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "totals_by_type"))
        by_type += num(it, "bytes");
    ck_assert(by_type == total);
}

START_TEST(test_info_json_models)
{
    char out[400], args[800];
    cli_path(out, sizeof out, "m.gguf");
    snprintf(args, sizeof args, "mkmodel --preset tiny --arch qwen35moe --layers 4 -o '%s'", out);
    ck_assert_int_eq(cli_run(args), 0);
    cJSON *j = info_json(out);
    si_gguf *g;
    si_err err;
    ck_assert_msg(si_gguf_open(out, &g, &err) == SI_OK, "%s", err.msg);
    check_json_against_reader(j, g);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "architecture")->valuestring, "qwen35moe");
    const cJSON *hp = cJSON_GetObjectItemCaseSensitive(j, "hparams");
    ck_assert(num(hp, "n_embd") == 64);
    ck_assert(num(hp, "n_layer") == 4);
    ck_assert(num(hp, "n_expert") == 8);
    ck_assert(num(hp, "n_expert_used") == 2);
    ck_assert(num(hp, "n_ff_exp") == 32);
    ck_assert(num(hp, "ssm_time_step_rank") == 4);
    ck_assert(num(hp, "rope_base") == 1e7);
    ck_assert(num(hp, "rms_eps") == 1e-6);
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(hp, "full_attention_layers");
    ck_assert_int_eq(cJSON_GetArraySize(full), 1);
    ck_assert(cJSON_GetArrayItem(full, 0)->valuedouble == 3);
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(hp, "rope_sections");
    ck_assert_int_eq(cJSON_GetArraySize(sec), 4);
    ck_assert(cJSON_GetArrayItem(sec, 0)->valuedouble == 3);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(md, "tokenizer.ggml.tokens");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(tok, "type")->valuestring, "array");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(tok, "elem_type")->valuestring, "string");
    const cJSON *head = cJSON_GetObjectItemCaseSensitive(tok, "head");
    ck_assert_int_eq(cJSON_GetArraySize(head), 3);
    ck_assert_str_eq(cJSON_GetArrayItem(head, 0)->valuestring, "!");
    ck_assert_str_eq(cJSON_GetArrayItem(head, 1)->valuestring, "\"");
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tok, "truncated")));
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(md, "general.name");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(name, "type")->valuestring, "string");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(name, "value")->valuestring,
                     "sparkinfer mkmodel tiny");
    const cJSON *tot = cJSON_GetObjectItemCaseSensitive(j, "totals_by_type");
    ck_assert(num(cJSON_GetObjectItemCaseSensitive(tot, "f32"), "count") == (double)si_gguf_n_tensors(g));
    si_gguf_close(g);
    cJSON_Delete(j);
}
END_TEST

/* llama-2-tiny-random.gguf: a real third-party file (12 tensors, 18 keys). */
START_TEST(test_info_llama2)
{
    const char *top = getenv("SI_TOP_SRCDIR"), *shared = getenv("SI_SHARED_DATA");
    char path[512];
    snprintf(path, sizeof path, "%s/tests/data/gguf/llama-2-tiny-random.gguf", top ? top : ".");
    if (access(path, R_OK) != 0)
        snprintf(path, sizeof path, "%s/gguf/ollama/llama-2-tiny-random.gguf", shared ? shared : ".");
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "check_cli_models: llama-2-tiny-random.gguf absent, skipped\n");
        return;
    }
    cJSON *j = info_json(path);
    si_gguf *g;
    si_err err;
    ck_assert_msg(si_gguf_open(path, &g, &err) == SI_OK, "%s", err.msg);
    check_json_against_reader(j, g);
    ck_assert(num(j, "n_tensors") == 12);
    ck_assert(num(j, "n_kv") == 18);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "architecture")->valuestring, "llama");
    const cJSON *hp = cJSON_GetObjectItemCaseSensitive(j, "hparams");
    ck_assert(num(hp, "embedding_length") == 8);   /* generic arch: the llama.* keys */
    ck_assert(num(hp, "block_count") == 1);
    ck_assert(num(hp, "vocab_rows") == 32000);
    const cJSON *tot = cJSON_GetObjectItemCaseSensitive(j, "totals_by_type");
    ck_assert(num(cJSON_GetObjectItemCaseSensitive(tot, "f16"), "count") == 9);
    ck_assert(num(cJSON_GetObjectItemCaseSensitive(tot, "f32"), "count") == 3);
    si_gguf_close(g);
    cJSON_Delete(j);
}
END_TEST

/* `sparkinfer run -m model ARGS` exits 0 (ok) or not, with `want` in its
 * stderr; a failed run writes nothing on stdout. */
static void run_expect(const char *model, const char *args, bool ok, const char *want)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "run -v -m '%s' -p hi -n 2 %s", model, args);
    int st = cli_run(cmd);
    ck_assert_msg(ok ? st == 0 : st != 0, "%s: exit %d", args, st);
    char *se = cli_slurp("stderr"), *so = cli_slurp("stdout");
    ck_assert_msg(strstr(se, want) != NULL, "%s: '%s' not in: %s", args, want, se);
    ck_assert_msg(ok || *so == '\0', "%s: failed but printed %s", args, so);
    free(se);
    free(so);
}

/* Which backend runs the model: [runtime] backend names one (an unknown or
 * disabled one is an error naming the key, nothing falls back silently);
 * --backend wins over it; auto takes the best loaded one. */
START_TEST(test_backend_choice)
{
    char out[400], args[900];
    const char *bd = getenv("SI_TOP_BUILDDIR");
    snprintf(args, sizeof args, "%s/sparkinfer-uninstalled.ini", bd && *bd ? bd : ".");
    setenv("SPARKINFER_CONFIG", args, 1);   /* (this test's process: Check forks one a test) */
    cli_path(out, sizeof out, "tiny.gguf");
    snprintf(args, sizeof args, "mkmodel --preset tiny --seed 5 -o '%s'", out);
    ck_assert_int_eq(cli_run(args), 0);

    run_expect(out, "--set runtime.backend=nosuch", false,
               "[runtime] backend: backend 'nosuch' is not in the configuration");
    run_expect(out, "--set runtime.backend=cpu --set backend.cpu.enabled=false", false,
               "[runtime] backend: backend 'cpu' is not loaded: disabled");
    run_expect(out, "--set runtime.backend=cpu", true, "on backend cpu");
    run_expect(out, "--set runtime.backend=nosuch --backend cpu", true, "on backend cpu");
    run_expect(out, "--backend nosuch", false, "--backend: backend 'nosuch' is not in the configuration");
    run_expect(out, "--set runtime.backend=auto", true, "on backend ");
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli_models");
    TCase *tc = tcase_create("mkmodel_info");
    tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_tiny_f32);
    tcase_add_test(tc, test_tiny_moe_q8_0_and_determinism);
    tcase_add_test(tc, test_9b_cut);
    tcase_add_test(tc, test_info_json_models);
    tcase_add_test(tc, test_info_llama2);
    tcase_add_test(tc, test_backend_choice);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cli_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
