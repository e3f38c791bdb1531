/* tests/cli/check_mkmodel.c — mkmodel's plans against the spec's tensor
 * tables (qwen35-gguf.md §2.2-§2.8), the quant rules, and the seeded data
 * generators (statistics of synthesised quant blocks, determinism). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/mkmodel.h"
#include "quant.h"

enum { F32 = SI_TYPE_F32, F16 = SI_TYPE_F16, Q8_0 = SI_TYPE_Q8_0, Q4_K = SI_TYPE_Q4_K,
       Q5_K = SI_TYPE_Q5_K, Q6_K = SI_TYPE_Q6_K };

static void plan_for(const char *preset, const char *arch, const char *quant, uint32_t layers,
                     uint32_t rows, si_mk_plan *p)
{
    si_mk_hparams hp;
    si_mk_arch a;
    si_mk_quant q;
    si_err err = { { 0 } };
    if (arch != NULL)
        ck_assert_int_eq(si_mk_arch_from_name(arch, &a), SI_OK);
    ck_assert_msg(si_mk_preset(preset, arch ? &a : NULL, &hp, &err) == SI_OK, "%s", err.msg);
    if (quant != NULL)
        ck_assert_int_eq(si_mk_quant_from_name(quant, &q), SI_OK);
    else
        q = hp.default_quant;
    if (layers)
        hp.n_layer = layers;
    if (rows)
        hp.vocab_rows = rows;
    ck_assert_msg(si_mk_plan_build(&hp, q, p, &err) == SI_OK, "%s", err.msg);
}

/* Tensor `name` exists with this type and shape (ne2 = 0: 2-D, ne1 = 0: 1-D). */
static void expect(const si_mk_plan *p, const char *name, uint32_t type,
                   int64_t ne0, int64_t ne1, int64_t ne2)
{
    const si_mk_tensor *t = si_mk_plan_find(p, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    ck_assert_msg(t->type == type, "%s: type %s, want %s", name, si_type_name(t->type),
                  si_type_name(type));
    uint32_t ndim = ne2 ? 3 : ne1 ? 2 : 1;
    ck_assert_msg(t->ndim == ndim, "%s: ndim %u, want %u", name, t->ndim, ndim);
    ck_assert_msg(t->ne[0] == ne0 && t->ne[1] == (ne1 ? ne1 : 1) && t->ne[2] == (ne2 ? ne2 : 1),
                  "%s: shape [%lld, %lld, %lld]", name, (long long)t->ne[0],
                  (long long)t->ne[1], (long long)t->ne[2]);
    uint64_t n = (uint64_t)ne0 * (uint64_t)(ne1 ? ne1 : 1) * (uint64_t)(ne2 ? ne2 : 1);
    ck_assert_uint_eq(t->nbytes, n / si_type_get(type)->block_elems * si_type_get(type)->block_bytes);
}

static void expect_blk(const si_mk_plan *p, unsigned il, const char *suffix, uint32_t type,
                       int64_t ne0, int64_t ne1, int64_t ne2)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%u.%s", il, suffix);
    expect(p, name, type, ne0, ne1, ne2);
}

static bool in_set(unsigned v, const unsigned *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == v)
            return true;
    return false;
}

/* Spec §2.8, n = 32 */
static const unsigned qkv_q6[] = { 0, 1, 2, 6, 9, 12, 18, 21, 24, 28, 29, 30 };
static const unsigned v_q6[] = { 3, 15, 27, 31 };
static const unsigned down_q6[] = { 0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31 };
#define N_OF(a) (sizeof a / sizeof a[0])

START_TEST(test_use_more_bits)
{
    for (unsigned i = 0; i < 32; i++)
        ck_assert_msg(si_mk_use_more_bits(i, 32) == in_set(i, down_q6, N_OF(down_q6)),
                      "layer %u", i);
}
END_TEST

START_TEST(test_plan_9b)
{
    si_mk_plan p;
    plan_for("9b", NULL, NULL, 0, 0, &p);
    ck_assert_int_eq(p.quant, SI_MK_Q_Q4_K_M);
    ck_assert_uint_eq(p.n, 24 * 14 + 8 * 11 + 3);    /* 427 */
    expect(&p, "token_embd.weight", Q4_K, 4096, 248320, 0);
    expect(&p, "output_norm.weight", F32, 4096, 0, 0);
    expect(&p, "output.weight", Q6_K, 4096, 248320, 0);
    ck_assert_str_eq(p.t[0].name, "token_embd.weight");
    ck_assert_str_eq(p.t[p.n - 1].name, "output.weight");

    for (unsigned il = 0; il < 32; il++) {
        bool full = il % 4 == 3;
        expect_blk(&p, il, "attn_norm.weight", F32, 4096, 0, 0);
        expect_blk(&p, il, "post_attention_norm.weight", F32, 4096, 0, 0);
        if (full) {
            expect_blk(&p, il, "attn_q.weight", Q4_K, 4096, 8192, 0);
            expect_blk(&p, il, "attn_k.weight", Q4_K, 4096, 1024, 0);
            expect_blk(&p, il, "attn_v.weight", in_set(il, v_q6, N_OF(v_q6)) ? Q6_K : Q4_K,
                       4096, 1024, 0);
            expect_blk(&p, il, "attn_output.weight", Q4_K, 4096, 4096, 0);
            expect_blk(&p, il, "attn_q_norm.weight", F32, 256, 0, 0);
            expect_blk(&p, il, "attn_k_norm.weight", F32, 256, 0, 0);
        } else {
            expect_blk(&p, il, "attn_qkv.weight", in_set(il, qkv_q6, N_OF(qkv_q6)) ? Q6_K : Q4_K,
                       4096, 8192, 0);
            expect_blk(&p, il, "attn_gate.weight", Q4_K, 4096, 4096, 0);
            expect_blk(&p, il, "ssm_beta.weight", Q4_K, 4096, 32, 0);
            expect_blk(&p, il, "ssm_alpha.weight", Q4_K, 4096, 32, 0);
            expect_blk(&p, il, "ssm_conv1d.weight", F32, 4, 8192, 0);
            expect_blk(&p, il, "ssm_dt.bias", F32, 32, 0, 0);
            expect_blk(&p, il, "ssm_a", F32, 32, 0, 0);
            expect_blk(&p, il, "ssm_norm.weight", F32, 128, 0, 0);
            expect_blk(&p, il, "ssm_out.weight", Q4_K, 4096, 4096, 0);
        }
        expect_blk(&p, il, "ffn_gate.weight", Q4_K, 4096, 12288, 0);
        expect_blk(&p, il, "ffn_up.weight", Q4_K, 4096, 12288, 0);
        expect_blk(&p, il, "ffn_down.weight", in_set(il, down_q6, N_OF(down_q6)) ? Q6_K : Q4_K,
                   12288, 4096, 0);
    }
    ck_assert_ptr_null(si_mk_plan_find(&p, "blk.3.attn_qkv.weight"));
    ck_assert_ptr_null(si_mk_plan_find(&p, "blk.0.attn_q.weight"));
    ck_assert_ptr_null(si_mk_plan_find(&p, "blk.32.attn_norm.weight"));

    /* counts by type and total: 16 Q6_K ffn_down + 12 qkv + 4 v + output */
    uint32_t n6 = 0, n4 = 0, n32 = 0;
    uint64_t sum = 0;
    for (uint32_t i = 0; i < p.n; i++) {
        n6 += p.t[i].type == Q6_K;
        n4 += p.t[i].type == Q4_K;
        n32 += p.t[i].type == F32;
        sum += p.t[i].nbytes;
    }
    ck_assert_uint_eq(n6, 16 + 12 + 4 + 1);
    ck_assert_uint_eq(n32, 24 * 6 + 8 * 4 + 1);       /* 177 */
    ck_assert_uint_eq(n4, p.n - n6 - n32);
    ck_assert_uint_eq(sum, p.total_bytes);
    /* Qwythos-9B Q4_K_M is ~5.6 GB */
    ck_assert_msg(p.total_bytes > 5400000000ull && p.total_bytes < 5800000000ull,
                  "total %llu", (unsigned long long)p.total_bytes);
    ck_assert_uint_eq(si_mk_file_type(p.quant), 15);
    si_mk_plan_free(&p);
}
END_TEST

START_TEST(test_plan_35b)
{
    si_mk_plan p;
    plan_for("35b-a3b", NULL, NULL, 0, 0, &p);
    ck_assert_int_eq(p.quant, SI_MK_Q_UD_Q4_K_M);
    ck_assert_int_eq(p.hp.arch, SI_MK_QWEN35MOE);
    ck_assert_uint_eq(p.n, 733);                      /* 30*19 + 10*16 + 3, spec §2.2 */
    expect(&p, "token_embd.weight", Q4_K, 2048, 248320, 0);
    expect(&p, "output.weight", Q6_K, 2048, 248320, 0);
    for (unsigned il = 0; il < 40; il++) {
        if (il % 4 == 3) {
            expect_blk(&p, il, "attn_q.weight", Q8_0, 2048, 8192, 0);
            expect_blk(&p, il, "attn_k.weight", Q8_0, 2048, 512, 0);
            expect_blk(&p, il, "attn_v.weight", Q8_0, 2048, 512, 0);
            expect_blk(&p, il, "attn_output.weight", Q8_0, 4096, 2048, 0);
            expect_blk(&p, il, "attn_q_norm.weight", F32, 256, 0, 0);
            expect_blk(&p, il, "attn_k_norm.weight", F32, 256, 0, 0);
        } else {
            expect_blk(&p, il, "attn_qkv.weight", Q8_0, 2048, 8192, 0);
            expect_blk(&p, il, "attn_gate.weight", Q8_0, 2048, 4096, 0);
            expect_blk(&p, il, "ssm_beta.weight", Q8_0, 2048, 32, 0);
            expect_blk(&p, il, "ssm_alpha.weight", Q8_0, 2048, 32, 0);
            expect_blk(&p, il, "ssm_conv1d.weight", F32, 4, 8192, 0);
            expect_blk(&p, il, "ssm_dt.bias", F32, 32, 0, 0);
            expect_blk(&p, il, "ssm_a", F32, 32, 0, 0);
            expect_blk(&p, il, "ssm_norm.weight", F32, 128, 0, 0);
            expect_blk(&p, il, "ssm_out.weight", Q8_0, 4096, 2048, 0);
        }
        expect_blk(&p, il, "ffn_gate_inp.weight", F32, 2048, 256, 0);
        expect_blk(&p, il, "ffn_gate_exps.weight", Q4_K, 2048, 512, 256);
        expect_blk(&p, il, "ffn_up_exps.weight", Q4_K, 2048, 512, 256);
        expect_blk(&p, il, "ffn_down_exps.weight", Q5_K, 512, 2048, 256);
        expect_blk(&p, il, "ffn_gate_inp_shexp.weight", F32, 2048, 0, 0);
        expect_blk(&p, il, "ffn_gate_shexp.weight", Q8_0, 2048, 512, 0);
        expect_blk(&p, il, "ffn_up_shexp.weight", Q8_0, 2048, 512, 0);
        expect_blk(&p, il, "ffn_down_shexp.weight", Q8_0, 512, 2048, 0);
    }
    ck_assert_ptr_null(si_mk_plan_find(&p, "blk.0.ffn_gate.weight"));
    uint32_t n32 = 0;
    for (uint32_t i = 0; i < p.n; i++)
        n32 += p.t[i].type == F32;
    ck_assert_uint_eq(n32, 301);                      /* 30*8 + 10*6 + 1, spec §2.7 */
    /* Qwen3.6-35B-A3B UD-Q4_K_M is ~22 GB */
    ck_assert_msg(p.total_bytes > 20000000000ull && p.total_bytes < 23000000000ull,
                  "total %llu", (unsigned long long)p.total_bytes);
    si_mk_plan_free(&p);

    /* The standard Q4_K_M rule on the MoE arch: every ffn_down* follows use_more_bits */
    plan_for("35b-a3b", NULL, "q4_k_m", 0, 0, &p);
    expect_blk(&p, 0, "ffn_down_exps.weight", Q6_K, 512, 2048, 256);
    expect_blk(&p, 4, "ffn_down_exps.weight", Q6_K, 512, 2048, 256);   /* 4 < 40/8 */
    expect_blk(&p, 6, "ffn_down_exps.weight", Q4_K, 512, 2048, 256);
    expect_blk(&p, 8, "ffn_down_shexp.weight", Q4_K, 512, 2048, 0);    /* (8-5)%3 == 0 */
    expect_blk(&p, 10, "ffn_down_shexp.weight", Q6_K, 512, 2048, 0);   /* (10-5)%3 == 2 */
    expect_blk(&p, 0, "ffn_gate_inp.weight", F32, 2048, 256, 0);
    expect_blk(&p, 3, "attn_v.weight", Q6_K, 2048, 512, 0);   /* 3 < 40/8 */
    expect_blk(&p, 7, "attn_v.weight", Q6_K, 2048, 512, 0);   /* (7-5)%3 == 2 */
    expect_blk(&p, 11, "attn_v.weight", Q4_K, 2048, 512, 0);
    si_mk_plan_free(&p);
}
END_TEST

START_TEST(test_layers_override)
{
    si_mk_plan p;
    plan_for("9b", NULL, NULL, 8, 4096, &p);
    ck_assert_uint_eq(p.hp.n_layer, 8);
    ck_assert_uint_eq(p.n, 6 * 14 + 2 * 11 + 3);
    expect(&p, "token_embd.weight", Q4_K, 4096, 4096, 0);
    /* use_more_bits(i, 8) = {0, 3, 6, 7} */
    static const uint32_t want_qkv[8] = { Q6_K, Q4_K, Q4_K, 0, Q4_K, Q4_K, Q6_K, 0 };
    for (unsigned il = 0; il < 8; il++) {
        bool more = il == 0 || il == 3 || il == 6 || il == 7;
        if (il % 4 == 3)
            expect_blk(&p, il, "attn_v.weight", more ? Q6_K : Q4_K, 4096, 1024, 0);
        else
            expect_blk(&p, il, "attn_qkv.weight", want_qkv[il], 4096, 8192, 0);
        expect_blk(&p, il, "ffn_down.weight", more ? Q6_K : Q4_K, 12288, 4096, 0);
    }
    ck_assert_ptr_null(si_mk_plan_find(&p, "blk.8.attn_norm.weight"));
    si_mk_plan_free(&p);
}
END_TEST

START_TEST(test_quant_modes)
{
    static const struct { const char *q; uint32_t type; } modes[] = {
        { "f32", F32 }, { "f16", F16 }, { "q8_0", Q8_0 },
    };
    for (size_t m = 0; m < 3; m++) {
        si_mk_plan p;
        plan_for("35b-a3b", NULL, modes[m].q, 4, 0, &p);
        for (uint32_t i = 0; i < p.n; i++) {
            const si_mk_tensor *t = &p.t[i];
            bool keep_f32 = t->ndim == 1 || strstr(t->name, "norm") || strstr(t->name, "ssm_conv1d") ||
                            strstr(t->name, "ffn_gate_inp");
            ck_assert_msg(t->type == (keep_f32 ? F32 : modes[m].type), "%s %s: %s", modes[m].q,
                          t->name, si_type_name(t->type));
        }
        ck_assert_uint_eq(si_mk_file_type(p.quant), m == 0 ? 0 : m == 1 ? 1 : 7);
        si_mk_plan_free(&p);
    }
}
END_TEST

START_TEST(test_tiny_and_fallback)
{
    si_mk_plan p;
    plan_for("tiny", NULL, NULL, 0, 500, &p);
    ck_assert_int_eq(p.quant, SI_MK_Q_F32);
    ck_assert_uint_eq(p.n, 6 * 14 + 2 * 11 + 3);
    expect(&p, "token_embd.weight", F32, 64, 500, 0);
    expect_blk(&p, 0, "attn_qkv.weight", F32, 64, 2 * 2 * 16 + 4 * 16, 0);
    expect_blk(&p, 3, "attn_q.weight", F32, 64, 2 * 4 * 32, 0);
    expect_blk(&p, 3, "attn_output.weight", F32, 4 * 32, 64, 0);
    expect_blk(&p, 0, "ssm_conv1d.weight", F32, 4, 128, 0);
    ck_assert_uint_eq(p.hp.rope_dim, 16);
    si_mk_plan_free(&p);

    /* K-quants on ne[0] = 64 or 32 fall back to Q8_0 */
    plan_for("tiny", "qwen35moe", "q4_k_m", 4, 500, &p);
    ck_assert_uint_eq(p.n, 3 * 19 + 1 * 16 + 3);
    for (uint32_t i = 0; i < p.n; i++)
        ck_assert_msg(p.t[i].type == F32 || p.t[i].type == Q8_0, "%s: %s", p.t[i].name,
                      si_type_name(p.t[i].type));
    expect_blk(&p, 0, "ffn_down_exps.weight", Q8_0, 32, 64, 8);
    expect_blk(&p, 0, "ffn_gate_inp.weight", F32, 64, 8, 0);
    si_mk_plan_free(&p);

    /* arch / preset / quant names */
    si_mk_hparams hp;
    si_mk_arch a = SI_MK_QWEN35MOE;
    si_err err;
    ck_assert_int_eq(si_mk_preset("9b", &a, &hp, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "qwen35"));
    ck_assert_int_eq(si_mk_preset("70b", NULL, &hp, &err), SI_EINVAL);
    ck_assert_int_eq(si_mk_arch_from_name("llama", &a), SI_EINVAL);
    si_mk_quant q;
    ck_assert_int_eq(si_mk_quant_from_name("q4_0", &q), SI_EINVAL);
    ck_assert_int_eq(si_mk_quant_from_name("ud-q4_k_m", &q), SI_OK);
    ck_assert_int_eq(q, SI_MK_Q_UD_Q4_K_M);

    hp.n_layer = 0;
    ck_assert_int_eq(si_mk_preset("tiny", NULL, &hp, &err), SI_OK);
    hp.n_layer = 0;
    hp.vocab_rows = 10;
    ck_assert_int_eq(si_mk_plan_build(&hp, SI_MK_Q_F32, &p, &err), SI_ERANGE);
    hp.n_layer = 2;
    hp.vocab_rows = 0;
    ck_assert_int_eq(si_mk_plan_build(&hp, SI_MK_Q_F32, &p, &err), SI_ERANGE);
}
END_TEST

/* ---- data ---------------------------------------------------------------------------- */

static void stats(const float *x, size_t n, double *mean, double *std)
{
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert(isfinite(x[i]));
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
}

START_TEST(test_synth_stats)
{
    static const uint32_t types[] = { Q8_0, Q4_K, Q5_K, Q6_K };
    const float stdv[] = { 0.02f, 0.0011f };   /* the second is in fp16's subnormal range for d */
    for (size_t k = 0; k < 4; k++) {
        for (size_t s = 0; s < 2; s++) {
            const si_type_traits *tr = si_type_get(types[k]);
            const uint64_t nb = 2048;
            const size_t n = (size_t)(nb * tr->block_elems);
            uint8_t *blk = malloc(nb * tr->block_bytes);
            uint8_t *blk2 = malloc(nb * tr->block_bytes);
            float *x = malloc(n * sizeof *x);
            si_err err = { { 0 } };
            ck_assert_int_eq(si_mk_synth_blocks(types[k], stdv[s], 99, blk, nb, &err), SI_OK);
            ck_assert_msg(si_dequant(types[k], blk, x, (int64_t)n, &err) == SI_OK, "%s", err.msg);
            double mean, sd;
            stats(x, n, &mean, &sd);
            ck_assert_msg(fabs(sd / stdv[s] - 1.0) < 0.06, "%s std %g want %g",
                          tr->name, sd, (double)stdv[s]);
            ck_assert_msg(fabs(mean) < 0.05 * stdv[s], "%s mean %g", tr->name, mean);
            /* deterministic per seed, different across seeds */
            ck_assert_int_eq(si_mk_synth_blocks(types[k], stdv[s], 99, blk2, nb, &err), SI_OK);
            ck_assert_int_eq(memcmp(blk, blk2, nb * tr->block_bytes), 0);
            ck_assert_int_eq(si_mk_synth_blocks(types[k], stdv[s], 100, blk2, nb, &err), SI_OK);
            ck_assert_int_ne(memcmp(blk, blk2, nb * tr->block_bytes), 0);
            free(blk);
            free(blk2);
            free(x);
        }
    }
    si_err err;
    uint8_t b[64];
    ck_assert_int_eq(si_mk_synth_blocks(SI_TYPE_Q4_0, 1.0f, 1, b, 1, &err), SI_EUNSUPPORTED);
}
END_TEST

/* Filling rows [0, n) at once equals filling them in two calls, and the
 * dequantised values follow each tensor's distribution. */
START_TEST(test_fill_rows)
{
    si_mk_plan p;
    plan_for("9b", NULL, NULL, 4, 1024, &p);
    static const char *const names[] = {
        "token_embd.weight",        /* Q4_K, 4M elements: float path + si_quant */
        "blk.0.attn_qkv.weight",    /* Q6_K, synthesised */
        "blk.0.ssm_alpha.weight",   /* Q4_K small: si_quant */
        "blk.0.ssm_conv1d.weight",  /* F32 N(0, 0.3) */
        "blk.0.attn_norm.weight",   /* F32 1 + N(0, 0.02) */
        "blk.0.ssm_a",              /* F32 -exp(U(-1, 1)) */
        "blk.3.attn_v.weight",      /* Q6_K small */
    };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const si_mk_tensor *t = si_mk_plan_find(&p, names[k]);
        ck_assert_ptr_nonnull(t);
        uint32_t ti = (uint32_t)(t - p.t);
        uint64_t rows = t->rows < 64 ? t->rows : 64;
        uint8_t *a = malloc(rows * t->row_bytes), *b = malloc(rows * t->row_bytes);
        float *scratch = malloc(rows * (uint64_t)t->ne[0] * sizeof(float));
        float *x = malloc(rows * (uint64_t)t->ne[0] * sizeof(float));
        si_err err = { { 0 } };
        ck_assert_msg(si_mk_fill_rows(t, ti, 5, 0, rows, a, scratch, &err) == SI_OK, "%s", err.msg);
        uint64_t half = rows / 2;
        ck_assert_int_eq(si_mk_fill_rows(t, ti, 5, 0, half, b, scratch, &err), SI_OK);
        ck_assert_int_eq(si_mk_fill_rows(t, ti, 5, half, rows - half, b + half * t->row_bytes,
                                         scratch, &err), SI_OK);
        ck_assert_msg(memcmp(a, b, rows * t->row_bytes) == 0, "%s: split differs", t->name);
        ck_assert_int_eq(si_mk_fill_rows(t, ti, 6, 0, rows, b, scratch, &err), SI_OK);
        ck_assert_msg(memcmp(a, b, rows * t->row_bytes) != 0, "%s: seed ignored", t->name);

        const size_t n = (size_t)(rows * (uint64_t)t->ne[0]);
        ck_assert_int_eq(si_dequant(t->type, a, x, (int64_t)n, &err), SI_OK);
        double mean, sd;
        stats(x, n, &mean, &sd);
        if (t->init == SI_MK_INIT_NEG_EXP) {
            for (size_t i = 0; i < n; i++)
                ck_assert(x[i] <= -0.36f && x[i] >= -2.72f);
        } else {
            /* 4 sigma of the sample statistics, plus 5% for quantisation */
            double want_mean = t->init == SI_MK_INIT_ONE_PLUS ? 1.0 : 0.0;
            ck_assert_msg(fabs(mean - want_mean) < 4.0 * t->std / sqrt((double)n),
                          "%s mean %g", t->name, mean);
            double tol = 4.0 * sqrt(0.5 / (double)n) + 0.05;
            ck_assert_msg(fabs(sd / t->std - 1.0) < tol, "%s std %g want %g", t->name, sd,
                          (double)t->std);
        }
        free(a);
        free(b);
        free(scratch);
        free(x);
    }
    si_mk_plan_free(&p);
}
END_TEST

static Suite *mkmodel_suite(void)
{
    Suite *s = suite_create("mkmodel");
    TCase *tc = tcase_create("plans");
    tcase_add_test(tc, test_use_more_bits);
    tcase_add_test(tc, test_plan_9b);
    tcase_add_test(tc, test_plan_35b);
    tcase_add_test(tc, test_layers_override);
    tcase_add_test(tc, test_quant_modes);
    tcase_add_test(tc, test_tiny_and_fallback);
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("data");
    tcase_set_timeout(td, 300);
    tcase_add_test(td, test_synth_stats);
    tcase_add_test(td, test_fill_rows);
    suite_add_tcase(s, td);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mkmodel_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
