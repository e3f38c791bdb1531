/* tests/convert/check_convert.c — `sparkinfer convert` on synthetic Hugging
 * Face checkpoints written by synth_hf.c: every transform against values
 * computed here by hand (+1 norms, -exp(A_log), the tiled v-head order,
 * conv squeeze, expert split), metadata and tokenizer keys, output types of
 * each mode, equivalence of the checkpoint layouts (dtypes, shards,
 * ConditionalGeneration, fused/per-expert MoE), and the error paths. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/convert.h"
#include "convert/safetensors.h"
#include "gguf.h"
#include "quant.h"
#include "synth_hf.h"

/* After the project headers: with POSIX 2008 <sys/wait.h> pulls in
 * <signal.h>, whose `si_status` macro (a siginfo_t member) would rewrite
 * status.h's `enum si_status`. */
#include <sys/wait.h>

/* GGUF v-head j holds HF v-head (j % Hk) * R + j / Hk; for Hk = 2, R = 3,
 * worked out by hand: j 0..5 <- 0, 3, 1, 4, 2, 5. */
static const int VHEAD[S_HV] = { 0, 3, 1, 4, 2, 5 };

static char g_tmp[256];


static void setup(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/si-convert-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
}

static void teardown(void)
{
    synth_rm_rf(g_tmp);
}

static char *path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
    return buf[k];
}

static bool exists(const char *p)
{
    return access(p, F_OK) == 0;
}

/* Writes checkpoint `sub` and converts it to `out` (name "synth"). */
static int convert(const char *sub, const synth_cfg *c, int ftype, const char *out,
                   si_convert_stats *st, si_err *err)
{
    ck_assert_msg(synth_write(path(sub), c), "writing the synthetic checkpoint %s", sub);
    si_convert_opts o = { .hf_dir = path(sub), .out_path = path(out), .ftype = ftype,
                          .name = "synth" };
    return si_convert_hf(&o, st, err);
}

static si_gguf *convert_ok(const char *sub, const synth_cfg *c, int ftype, const char *out,
                           si_convert_stats *st)
{
    si_err err = { "" };
    int rc = convert(sub, c, ftype, out, st, &err);
    ck_assert_msg(rc == SI_OK, "convert %s: %s", sub, err.msg);
    char part[600];
    snprintf(part, sizeof part, "%s.part", path(out));
    ck_assert_msg(!exists(part), "%s left behind", part);
    si_gguf *g = NULL;
    rc = si_gguf_open(path(out), &g, &err);
    ck_assert_msg(rc == SI_OK, "reading back %s: %s", out, err.msg);
    return g;
}

/* ---- reading the output ------------------------------------------------------ */

static const si_tensor_info *tensor(const si_gguf *g, const char *name, uint32_t type,
                                    uint32_t ndim, int64_t ne0, int64_t ne1, int64_t ne2)
{
    const si_tensor_info *t = si_gguf_tensor(g, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    ck_assert_msg(t->type == type, "%s: type %s, expected %s", name, si_type_name(t->type),
                  si_type_name(type));
    ck_assert_msg(t->ndim == ndim, "%s: %u dims, expected %u", name, t->ndim, ndim);
    ck_assert_msg(t->ne[0] == ne0 && (ndim < 2 || t->ne[1] == ne1) && (ndim < 3 || t->ne[2] == ne2),
                  "%s: shape [%lld, %lld, %lld]", name, (long long)t->ne[0],
                  (long long)t->ne[1], (long long)t->ne[2]);
    return t;
}

static float at(const si_tensor_info *t, uint64_t i)
{
    float v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}

/* F32 tensor `gguf` equal to HF tensor `hf` element for element (+ add). */
static void check_ident(const si_gguf *g, const char *gguf, const char *hf, uint32_t ndim,
                        int64_t ne0, int64_t ne1, int64_t ne2, float add)
{
    const si_tensor_info *t = tensor(g, gguf, SI_TYPE_F32, ndim, ne0, ne1, ne2);
    uint64_t n = (uint64_t)ne0 * (uint64_t)(ndim > 1 ? ne1 : 1) * (uint64_t)(ndim > 2 ? ne2 : 1);
    for (uint64_t i = 0; i < n; i++)
        ck_assert_msg(at(t, i) == synth_value(hf, i) + add, "%s[%llu] = %g, expected %g",
                      gguf, (unsigned long long)i, at(t, i), synth_value(hf, i) + add);
}

static uint32_t get_u32(const si_gguf *g, const char *key)
{
    uint32_t v = 0;
    si_err err;
    ck_assert_msg(si_gguf_get_u32(g, key, &v, &err) == SI_OK, "%s: %s", key, err.msg);
    return v;
}

static void check_str(const si_gguf *g, const char *key, const char *want)
{
    si_str s;
    si_err err;
    ck_assert_msg(si_gguf_get_str(g, key, &s, &err) == SI_OK, "%s: %s", key, err.msg);
    ck_assert_msg(s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0,
                  "%s = '%.*s', expected '%s'", key, (int)s.len, s.ptr, want);
}

static void arr_elem(const si_gguf *g, const char *key, uint64_t i, si_gguf_value *e)
{
    const si_gguf_value *v = si_gguf_get(g, key);
    ck_assert_msg(v != NULL && v->type == SI_GGUF_ARRAY, "%s missing or not an array", key);
    ck_assert_int_eq(si_gguf_arr_get(v, i, e), SI_OK);
}

static void check_arr_str(const si_gguf *g, const char *key, uint64_t i, const char *want)
{
    si_gguf_value e;
    arr_elem(g, key, i, &e);
    ck_assert_msg(e.type == SI_GGUF_STRING && e.v.s.len == strlen(want) &&
                  memcmp(e.v.s.ptr, want, e.v.s.len) == 0, "%s[%llu] != '%s'", key,
                  (unsigned long long)i, want);
}

static char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void check_same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(path(a), &na), *y = slurp(path(b), &nb);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s and %s differ (%zu vs %zu bytes)",
                  a, b, na, nb);
    free(x);
    free(y);
}

/* ---- rules ------------------------------------------------------------------------ */

START_TEST(test_use_more_bits)
{
    /* Spec §2.8: for n = 32 the Q6_K layers are exactly these. */
    static const int want[] = { 0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31 };
    size_t k = 0;
    for (uint32_t i = 0; i < 32; i++) {
        bool expect = k < sizeof want / sizeof want[0] && want[k] == (int)i;
        k += expect;
        ck_assert_msg(si_convert_use_more_bits(i, 32) == expect, "layer %u", i);
    }
    /* n = 4 (the synthetic models): n/8 = 0, 7n/8 = 3 -> layers 2 and 3. */
    ck_assert(!si_convert_use_more_bits(0, 4) && !si_convert_use_more_bits(1, 4));
    ck_assert(si_convert_use_more_bits(2, 4) && si_convert_use_more_bits(3, 4));
}
END_TEST

START_TEST(test_pick_type)
{
    const int64_t big[2] = { 4096, 4096 }, odd[2] = { 64, 64 }, tiny[2] = { 24, 8 };
    const int Q = SI_CONVERT_Q4_K_M;
    ck_assert_uint_eq(si_convert_pick_type(Q, "output.weight", 2, big, 32), SI_TYPE_Q6_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "token_embd.weight", 2, big, 32), SI_TYPE_Q4_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.6.attn_qkv.weight", 2, big, 32), SI_TYPE_Q6_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.7.attn_v.weight", 2, big, 32), SI_TYPE_Q4_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.3.attn_v.weight", 2, big, 32), SI_TYPE_Q6_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.4.ffn_down.weight", 2, big, 32), SI_TYPE_Q4_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.9.ffn_down_exps.weight", 3, big, 32),
                      SI_TYPE_Q6_K);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.9.ssm_out.weight", 2, big, 32), SI_TYPE_Q4_K);
    /* Fallbacks: rows not a multiple of 256 -> Q8_0; of 32 -> F16. */
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.3.attn_v.weight", 2, odd, 32), SI_TYPE_Q8_0);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.4.attn_gate.weight", 2, tiny, 32), SI_TYPE_F16);
    ck_assert_uint_eq(si_convert_pick_type(SI_CONVERT_Q8_0, "blk.4.attn_gate.weight", 2, tiny, 32),
                      SI_TYPE_F16);
    /* Always F32. */
    static const char *const f32[] = { "blk.0.attn_norm.weight", "blk.0.ssm_norm.weight",
        "blk.0.ssm_conv1d.weight", "blk.0.ffn_gate_inp.weight", "output_norm.weight",
        "blk.0.ffn_gate_inp_shexp.weight" };
    for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++)
        for (int m = 0; m < SI_CONVERT_FTYPE_COUNT; m++)
            ck_assert_msg(si_convert_pick_type(m, f32[i], 2, big, 32) == SI_TYPE_F32, "%s %d",
                          f32[i], m);
    ck_assert_uint_eq(si_convert_pick_type(Q, "blk.0.ssm_a", 1, big, 32), SI_TYPE_F32);
    ck_assert_uint_eq(si_convert_pick_type(SI_CONVERT_BF16, "blk.0.attn_q.weight", 2, odd, 32),
                      SI_TYPE_BF16);
    ck_assert_uint_eq(si_convert_pick_type(SI_CONVERT_F16, "blk.0.attn_q.weight", 2, tiny, 32),
                      SI_TYPE_F16);
    ck_assert_int_eq(si_convert_ftype_from_name("Q4_K_M"), SI_CONVERT_Q4_K_M);
    ck_assert_int_eq(si_convert_ftype_from_name("q5_k"), -1);
    ck_assert_uint_eq(si_convert_ftype_gguf(SI_CONVERT_BF16), 32);
    ck_assert_uint_eq(si_convert_ftype_gguf(SI_CONVERT_Q4_K_M), 15);
}
END_TEST

/* ---- the dense model, f32 -------------------------------------------------------------- */

static void check_gdn_layer(const si_gguf *g, int il)
{
    char gn[96], hn[128];
#define G(s) (snprintf(gn, sizeof gn, "blk.%d." s, il), gn)
#define H(s) (snprintf(hn, sizeof hn, "layers.%d.linear_attn." s, il), hn)
    const si_tensor_info *t = tensor(g, G("attn_qkv.weight"), SI_TYPE_F32, 2, S_H, S_CDIM, 1);
    H("in_proj_qkv.weight");
    for (int r = 0; r < S_CDIM; r++) {
        int v = r - S_QK;
        int src = r < S_QK ? r : S_QK + VHEAD[v / S_DV] * S_DV + v % S_DV;
        for (int h = 0; h < S_H; h++)
            ck_assert_msg(at(t, (uint64_t)r * S_H + h) == synth_value(hn, (uint64_t)src * S_H + h),
                          "%s row %d col %d (source row %d)", gn, r, h, src);
    }
    t = tensor(g, G("attn_gate.weight"), SI_TYPE_F32, 2, S_H, S_HV * S_DV, 1);
    H("in_proj_z.weight");
    for (int r = 0; r < S_HV * S_DV; r++)
        for (int h = 0; h < S_H; h++)
            ck_assert(at(t, (uint64_t)r * S_H + h) ==
                      synth_value(hn, (uint64_t)(VHEAD[r / S_DV] * S_DV + r % S_DV) * S_H + h));
    static const char *const ba[2][2] = { { "ssm_beta.weight", "in_proj_b.weight" },
                                          { "ssm_alpha.weight", "in_proj_a.weight" } };
    for (int k = 0; k < 2; k++) {
        snprintf(gn, sizeof gn, "blk.%d.%s", il, ba[k][0]);
        snprintf(hn, sizeof hn, "layers.%d.linear_attn.%s", il, ba[k][1]);
        t = tensor(g, gn, SI_TYPE_F32, 2, S_H, S_HV, 1);
        for (int j = 0; j < S_HV; j++)
            for (int h = 0; h < S_H; h++)
                ck_assert_msg(at(t, (uint64_t)j * S_H + h) ==
                              synth_value(hn, (uint64_t)VHEAD[j] * S_H + h), "%s head %d", gn, j);
    }
    /* conv1d [C, 1, K] -> [K, C]: row c = the K taps of channel c. */
    t = tensor(g, G("ssm_conv1d.weight"), SI_TYPE_F32, 2, S_CONV, S_CDIM, 1);
    H("conv1d.weight");
    for (int c = 0; c < S_CDIM; c++) {
        int v = c - S_QK;
        int src = c < S_QK ? c : S_QK + VHEAD[v / S_DV] * S_DV + v % S_DV;
        for (int k = 0; k < S_CONV; k++)
            ck_assert_msg(at(t, (uint64_t)c * S_CONV + k) ==
                          synth_value(hn, (uint64_t)src * S_CONV + k),
                          "conv channel %d tap %d", c, k);
    }
    t = tensor(g, G("ssm_dt.bias"), SI_TYPE_F32, 1, S_HV, 1, 1);
    H("dt_bias");
    for (int j = 0; j < S_HV; j++)
        ck_assert(at(t, (uint64_t)j) == synth_value(hn, (uint64_t)VHEAD[j]));
    t = tensor(g, G("ssm_a"), SI_TYPE_F32, 1, S_HV, 1, 1);
    H("A_log");
    for (int j = 0; j < S_HV; j++) {
        ck_assert(at(t, (uint64_t)j) == -expf(synth_value(hn, (uint64_t)VHEAD[j])));
        ck_assert(at(t, (uint64_t)j) < 0);
    }
    check_ident(g, G("ssm_norm.weight"), H("norm.weight"), 1, S_DV, 1, 1, 0.0f);  /* no +1 */
    t = tensor(g, G("ssm_out.weight"), SI_TYPE_F32, 2, S_HV * S_DV, S_H, 1);
    H("out_proj.weight");
    for (int o = 0; o < S_H; o++)
        for (int c = 0; c < S_HV * S_DV; c++)
            ck_assert_msg(at(t, (uint64_t)o * S_HV * S_DV + c) ==
                          synth_value(hn, (uint64_t)o * S_HV * S_DV +
                                      (uint64_t)(VHEAD[c / S_DV] * S_DV + c % S_DV)),
                          "ssm_out row %d col %d", o, c);
    ck_assert_ptr_null(si_gguf_tensor(g, G("attn_q.weight")));
#undef G
#undef H
}

static void check_attn_layer(const si_gguf *g, int il)
{
    char gn[96], hn[128];
#define G(s) (snprintf(gn, sizeof gn, "blk.%d." s, il), gn)
#define H(s) (snprintf(hn, sizeof hn, "layers.%d.self_attn." s, il), hn)
    check_ident(g, G("attn_q.weight"), H("q_proj.weight"), 2, S_H, 2 * S_NH * S_HD, 1, 0.0f);
    check_ident(g, G("attn_k.weight"), H("k_proj.weight"), 2, S_H, S_NKV * S_HD, 1, 0.0f);
    check_ident(g, G("attn_v.weight"), H("v_proj.weight"), 2, S_H, S_NKV * S_HD, 1, 0.0f);
    check_ident(g, G("attn_output.weight"), H("o_proj.weight"), 2, S_NH * S_HD, S_H, 1, 0.0f);
    check_ident(g, G("attn_q_norm.weight"), H("q_norm.weight"), 1, S_HD, 1, 1, 1.0f);
    check_ident(g, G("attn_k_norm.weight"), H("k_norm.weight"), 1, S_HD, 1, 1, 1.0f);
    ck_assert_ptr_null(si_gguf_tensor(g, G("attn_qkv.weight")));
#undef G
#undef H
}

static void check_dense_metadata(const si_gguf *g)
{
    check_str(g, "general.architecture", "qwen35");
    check_str(g, "general.name", "synth");
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 0);
    ck_assert_uint_eq(get_u32(g, "general.quantization_version"), 2);
    ck_assert_uint_eq(get_u32(g, "general.alignment"), 32);
    ck_assert_uint_eq(get_u32(g, "qwen35.block_count"), S_L);
    ck_assert_uint_eq(get_u32(g, "qwen35.context_length"), 4096);
    ck_assert_uint_eq(get_u32(g, "qwen35.embedding_length"), S_H);
    ck_assert_uint_eq(get_u32(g, "qwen35.feed_forward_length"), S_F);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.head_count"), S_NH);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.head_count_kv"), S_NKV);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.key_length"), S_HD);
    ck_assert_uint_eq(get_u32(g, "qwen35.attention.value_length"), S_HD);
    ck_assert_uint_eq(get_u32(g, "qwen35.rope.dimension_count"), S_HD / 4);
    ck_assert_uint_eq(get_u32(g, "qwen35.full_attention_interval"), 2);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.conv_kernel"), S_CONV);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.state_size"), S_DK);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.group_count"), S_HK);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.time_step_rank"), S_HV);
    ck_assert_uint_eq(get_u32(g, "qwen35.ssm.inner_size"), S_HV * S_DV);
    float f;
    si_err err;
    ck_assert_int_eq(si_gguf_get_f32(g, "qwen35.rope.freq_base", &f, &err), SI_OK);
    ck_assert(f == 1e7f);
    ck_assert_int_eq(si_gguf_get_f32(g, "qwen35.attention.layer_norm_rms_epsilon", &f, &err),
                     SI_OK);
    ck_assert(f == 1e-6f);
    static const int32_t sections[4] = { 1, 1, 0, 0 };
    const si_gguf_value *v = si_gguf_get(g, "qwen35.rope.dimension_sections");
    ck_assert(v != NULL && v->type == SI_GGUF_ARRAY && v->v.arr.type == SI_GGUF_I32 &&
              v->v.arr.n == 4);
    for (int i = 0; i < 4; i++) {
        si_gguf_value e;
        arr_elem(g, "qwen35.rope.dimension_sections", (uint64_t)i, &e);
        ck_assert_int_eq(e.v.i, sections[i]);
    }
    ck_assert_ptr_null(si_gguf_get(g, "qwen35.expert_count"));
    ck_assert_ptr_null(si_gguf_get(g, "qwen35.rope.scaling.type"));
    ck_assert_ptr_null(si_gguf_get(g, "qwen35.attention.recurrent_layers"));

    /* Tokenizer: 264 tokens padded to the 300 embedding rows. */
    check_str(g, "tokenizer.ggml.model", "gpt2");
    check_str(g, "tokenizer.ggml.pre", "qwen35");
    v = si_gguf_get(g, "tokenizer.ggml.tokens");
    ck_assert(v != NULL && v->v.arr.n == S_V);
    check_arr_str(g, "tokenizer.ggml.tokens", 5, "t5");
    check_arr_str(g, "tokenizer.ggml.tokens", 262, "<|im_end|>");
    check_arr_str(g, "tokenizer.ggml.tokens", 299, "[PAD299]");
    check_arr_str(g, "tokenizer.ggml.merges", 1, "t3 t4");
    si_gguf_value e;
    arr_elem(g, "tokenizer.ggml.token_type", 260, &e);
    ck_assert_int_eq(e.v.i, 3);   /* control */
    arr_elem(g, "tokenizer.ggml.token_type", 263, &e);
    ck_assert_int_eq(e.v.i, 4);   /* user-defined */
    arr_elem(g, "tokenizer.ggml.token_type", 299, &e);
    ck_assert_int_eq(e.v.i, 5);   /* unused padding */
    ck_assert_uint_eq(get_u32(g, "tokenizer.ggml.eos_token_id"), 262);
    ck_assert_uint_eq(get_u32(g, "tokenizer.ggml.padding_token_id"), 260);
    ck_assert_ptr_nonnull(si_gguf_get(g, "tokenizer.chat_template"));
    const si_gguf_value *ab = si_gguf_get(g, "tokenizer.ggml.add_bos_token");
    ck_assert(ab != NULL && ab->type == SI_GGUF_BOOL && ab->v.u == 0);
}

START_TEST(test_dense_f32)
{
    synth_cfg c = { .dtype = SI_ST_F32, .shards = 1 };
    si_convert_stats st;
    si_gguf *g = convert_ok("hf", &c, SI_CONVERT_F32, "out.gguf", &st);
    ck_assert_str_eq(st.arch, "qwen35");
    ck_assert_uint_eq(st.n_vocab, S_V);
    ck_assert_uint_eq(st.n_vocab_tokenizer, S_NTOK);
    /* 3 globals + 2 GDN layers x 14 + 2 attention layers x 11. */
    ck_assert_uint_eq(si_gguf_n_tensors(g), 3 + 2 * 14 + 2 * 11);
    ck_assert_uint_eq(st.n_tensors, si_gguf_n_tensors(g));
    check_dense_metadata(g);
    check_ident(g, "token_embd.weight", "embed_tokens.weight", 2, S_H, S_V, 1, 0.0f);
    check_ident(g, "output_norm.weight", "norm.weight", 1, S_H, 1, 1, 1.0f);
    check_ident(g, "output.weight", "lm_head.weight", 2, S_H, S_V, 1, 0.0f);
    for (int il = 0; il < S_L; il++) {
        char gn[96], hn[128];
        snprintf(gn, sizeof gn, "blk.%d.attn_norm.weight", il);
        snprintf(hn, sizeof hn, "layers.%d.input_layernorm.weight", il);
        check_ident(g, gn, hn, 1, S_H, 1, 1, 1.0f);
        snprintf(gn, sizeof gn, "blk.%d.post_attention_norm.weight", il);
        snprintf(hn, sizeof hn, "layers.%d.post_attention_layernorm.weight", il);
        check_ident(g, gn, hn, 1, S_H, 1, 1, 1.0f);
        if (synth_is_full(&c, il))
            check_attn_layer(g, il);
        else
            check_gdn_layer(g, il);
        snprintf(gn, sizeof gn, "blk.%d.ffn_gate.weight", il);
        snprintf(hn, sizeof hn, "layers.%d.mlp.gate_proj.weight", il);
        check_ident(g, gn, hn, 2, S_H, S_F, 1, 0.0f);
        snprintf(gn, sizeof gn, "blk.%d.ffn_up.weight", il);
        snprintf(hn, sizeof hn, "layers.%d.mlp.up_proj.weight", il);
        check_ident(g, gn, hn, 2, S_H, S_F, 1, 0.0f);
        snprintf(gn, sizeof gn, "blk.%d.ffn_down.weight", il);
        snprintf(hn, sizeof hn, "layers.%d.mlp.down_proj.weight", il);
        check_ident(g, gn, hn, 2, S_F, S_H, 1, 0.0f);
    }
    si_gguf_close(g);
}
END_TEST

/* BF16 and F16 sources (values exact in both), two shards with an index,
 * and the ConditionalGeneration layout (prefix model.language_model.,
 * text_config, vision and MTP tensors) all give the same bytes. */
START_TEST(test_layouts_identical)
{
    synth_cfg c = { .dtype = SI_ST_F32, .shards = 1 };
    si_gguf_close(convert_ok("ref", &c, SI_CONVERT_F32, "ref.gguf", NULL));
    c.dtype = SI_ST_BF16;
    si_gguf_close(convert_ok("bf16", &c, SI_CONVERT_F32, "bf16.gguf", NULL));
    check_same_file("ref.gguf", "bf16.gguf");
    c.dtype = SI_ST_F16;
    si_gguf_close(convert_ok("f16", &c, SI_CONVERT_F32, "f16.gguf", NULL));
    check_same_file("ref.gguf", "f16.gguf");
    c.dtype = SI_ST_F32;
    c.shards = 2;
    si_gguf_close(convert_ok("sharded", &c, SI_CONVERT_F32, "sharded.gguf", NULL));
    check_same_file("ref.gguf", "sharded.gguf");
    c.shards = 1;
    c.cond_gen = true;
    si_gguf_close(convert_ok("condgen", &c, SI_CONVERT_F32, "condgen.gguf", NULL));
    check_same_file("ref.gguf", "condgen.gguf");
}
END_TEST

START_TEST(test_tied_irregular_yarn)
{
    synth_cfg c = { .dtype = SI_ST_F32, .shards = 1, .tie = true, .irregular = true,
                    .yarn = true };
    si_gguf *g = convert_ok("hf", &c, SI_CONVERT_F32, "out.gguf", NULL);
    ck_assert_ptr_null(si_gguf_tensor(g, "output.weight"));
    ck_assert_uint_eq(si_gguf_n_tensors(g), 2 + 2 * 14 + 2 * 11);
    /* linear, full, full, linear: no interval describes it. */
    ck_assert_ptr_null(si_gguf_get(g, "qwen35.full_attention_interval"));
    static const bool rec[S_L] = { true, false, false, true };
    for (int il = 0; il < S_L; il++) {
        si_gguf_value e;
        arr_elem(g, "qwen35.attention.recurrent_layers", (uint64_t)il, &e);
        ck_assert_int_eq(e.type, SI_GGUF_BOOL);
        ck_assert_int_eq((int)e.v.u, rec[il]);
    }
    check_attn_layer(g, 2);
    check_gdn_layer(g, 3);
    check_str(g, "qwen35.rope.scaling.type", "yarn");
    float f;
    si_err err;
    ck_assert_int_eq(si_gguf_get_f32(g, "qwen35.rope.scaling.factor", &f, &err), SI_OK);
    ck_assert(f == 4.0f);
    ck_assert_uint_eq(get_u32(g, "qwen35.rope.scaling.original_context_length"), 1024);
    si_gguf_close(g);
}
END_TEST

/* ---- MoE ------------------------------------------------------------------------- */

static void check_moe_layer(const si_gguf *g, int il)
{
    char gn[96], hn[128];
#define G(s) (snprintf(gn, sizeof gn, "blk.%d." s, il), gn)
#define H(s) (snprintf(hn, sizeof hn, "layers.%d.mlp." s, il), hn)
    check_ident(g, G("ffn_gate_inp.weight"), H("gate.weight"), 2, S_H, S_E, 1, 0.0f);
    const si_tensor_info *gate =
        tensor(g, G("ffn_gate_exps.weight"), SI_TYPE_F32, 3, S_H, S_FE, S_E);
    const si_tensor_info *up = tensor(g, G("ffn_up_exps.weight"), SI_TYPE_F32, 3, S_H, S_FE, S_E);
    H("experts.gate_up_proj");
    for (int e = 0; e < S_E; e++)
        for (int i = 0; i < S_FE; i++)
            for (int h = 0; h < S_H; h++) {
                uint64_t o = ((uint64_t)e * S_FE + i) * S_H + h;
                ck_assert(at(gate, o) == synth_value(hn, ((uint64_t)e * 2 * S_FE + i) * S_H + h));
                ck_assert(at(up, o) ==
                          synth_value(hn, ((uint64_t)e * 2 * S_FE + S_FE + i) * S_H + h));
            }
    check_ident(g, G("ffn_down_exps.weight"), H("experts.down_proj"), 3, S_FE, S_H, S_E, 0.0f);
    check_ident(g, G("ffn_gate_inp_shexp.weight"), H("shared_expert_gate.weight"), 1, S_H, 1, 1,
                0.0f);
    check_ident(g, G("ffn_gate_shexp.weight"), H("shared_expert.gate_proj.weight"), 2, S_H, S_FS,
                1, 0.0f);
    check_ident(g, G("ffn_up_shexp.weight"), H("shared_expert.up_proj.weight"), 2, S_H, S_FS, 1,
                0.0f);
    check_ident(g, G("ffn_down_shexp.weight"), H("shared_expert.down_proj.weight"), 2, S_FS, S_H,
                1, 0.0f);
    ck_assert_ptr_null(si_gguf_tensor(g, G("ffn_gate.weight")));
#undef G
#undef H
}

START_TEST(test_moe)
{
    synth_cfg c = { .moe = true, .experts = SYNTH_FUSED, .dtype = SI_ST_F32, .shards = 1 };
    si_convert_stats st;
    si_gguf *g = convert_ok("fused", &c, SI_CONVERT_F32, "fused.gguf", &st);
    ck_assert_str_eq(st.arch, "qwen35moe");
    ck_assert(st.experts_fused);
    check_str(g, "general.architecture", "qwen35moe");
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_count"), S_E);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_used_count"), S_TOPK);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_feed_forward_length"), S_FE);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.expert_shared_feed_forward_length"), S_FS);
    ck_assert_uint_eq(get_u32(g, "qwen35moe.ssm.time_step_rank"), S_HV);
    ck_assert_ptr_null(si_gguf_get(g, "qwen35moe.feed_forward_length"));
    /* 3 globals + GDN 2 x (2 + 9 + 8) + attention 2 x (2 + 6 + 8). */
    ck_assert_uint_eq(si_gguf_n_tensors(g), 3 + 2 * 19 + 2 * 16);
    for (int il = 0; il < S_L; il++)
        check_moe_layer(g, il);
    check_gdn_layer(g, 0);
    check_attn_layer(g, 3);
    si_gguf_close(g);

    /* Per-expert tensors carry the same values: same bytes out. */
    c.experts = SYNTH_PER_EXPERT;
    g = convert_ok("split", &c, SI_CONVERT_F32, "split.gguf", &st);
    ck_assert(!st.experts_fused);
    si_gguf_close(g);
    check_same_file("fused.gguf", "split.gguf");
    c.cond_gen = true;
    c.shards = 2;
    c.dtype = SI_ST_BF16;
    si_gguf_close(convert_ok("split2", &c, SI_CONVERT_F32, "split2.gguf", NULL));
    check_same_file("fused.gguf", "split2.gguf");
}
END_TEST

/* ---- quantised modes --------------------------------------------------------------- */

/* Max |q - ref| over a tensor, dequantising q. */
static double max_err(const si_gguf *q, const si_gguf *ref, const char *name)
{
    const si_tensor_info *a = si_gguf_tensor(q, name), *b = si_gguf_tensor(ref, name);
    ck_assert(a != NULL && b != NULL && b->type == SI_TYPE_F32);
    uint64_t n = b->nbytes / 4;
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    si_err err;
    ck_assert_int_eq(si_dequant(a->type, a->data, x, (int64_t)n, &err), SI_OK);
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i] - at(b, i)));
    free(x);
    return m;
}

static void check_types(const si_gguf *g, const char *const (*want)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const si_tensor_info *t = si_gguf_tensor(g, want[i][0]);
        ck_assert_msg(t != NULL, "%s missing", want[i][0]);
        ck_assert_msg(strcmp(si_type_name(t->type), want[i][1]) == 0, "%s: %s, expected %s",
                      want[i][0], si_type_name(t->type), want[i][1]);
    }
}

START_TEST(test_q4_k_m)
{
    synth_cfg c = { .dtype = SI_ST_BF16, .shards = 1 };
    si_gguf *ref = convert_ok("hf", &c, SI_CONVERT_F32, "f32.gguf", NULL);
    char hf[512], qp[512];   /* path() reuses its buffers: keep copies */
    snprintf(hf, sizeof hf, "%s", path("hf"));
    snprintf(qp, sizeof qp, "%s", path("q.gguf"));
    si_convert_opts o = { .hf_dir = hf, .out_path = qp, .ftype = SI_CONVERT_Q4_K_M,
                          .name = "synth" };
    si_err err;
    ck_assert_msg(si_convert_hf(&o, NULL, &err) == SI_OK, "%s", err.msg);
    si_gguf *g;
    ck_assert_int_eq(si_gguf_open(qp, &g, &err), SI_OK);
    ck_assert_uint_eq(get_u32(g, "general.file_type"), 15);
    /* ne[0] = 32 or 64 -> Q8_0 fallback; ssm_out ne[0] = 24 -> F16;
     * ffn_down ne[0] = 256 keeps the rule: use_more_bits(l, 4) at l = 2, 3. */
    static const char *const want[][2] = {
        { "token_embd.weight", "q8_0" },      { "output.weight", "q8_0" },
        { "output_norm.weight", "f32" },      { "blk.0.attn_norm.weight", "f32" },
        { "blk.0.attn_qkv.weight", "q8_0" },  { "blk.0.attn_gate.weight", "q8_0" },
        { "blk.0.ssm_conv1d.weight", "f32" }, { "blk.0.ssm_a", "f32" },
        { "blk.0.ssm_dt.bias", "f32" },       { "blk.0.ssm_norm.weight", "f32" },
        { "blk.0.ssm_out.weight", "f16" },    { "blk.1.attn_output.weight", "q8_0" },
        { "blk.1.attn_q_norm.weight", "f32" },{ "blk.0.ffn_gate.weight", "q8_0" },
        { "blk.0.ffn_down.weight", "q4_K" },  { "blk.1.ffn_down.weight", "q4_K" },
        { "blk.2.ffn_down.weight", "q6_K" },  { "blk.3.ffn_down.weight", "q6_K" },
    };
    check_types(g, want, sizeof want / sizeof want[0]);
    /* Values: |w| <= 2; Q4_K steps are about range/15, Q6_K range/63. */
    ck_assert(max_err(g, ref, "blk.0.ffn_down.weight") < 0.2);
    ck_assert(max_err(g, ref, "blk.2.ffn_down.weight") < 0.05);
    ck_assert(max_err(g, ref, "blk.0.attn_qkv.weight") < 0.01);
    ck_assert(max_err(g, ref, "blk.0.ssm_out.weight") < 1e-3);
    ck_assert(max_err(g, ref, "blk.0.ssm_a") == 0);
    si_gguf_close(g);

    static const struct { int mode; const char *q, *ssm_out; uint32_t ft; } modes[] = {
        { SI_CONVERT_Q8_0, "q8_0", "f16", 7 },
        { SI_CONVERT_BF16, "bf16", "bf16", 32 },
        { SI_CONVERT_F16, "f16", "f16", 1 },
    };
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        o.ftype = modes[m].mode;
        ck_assert_msg(si_convert_hf(&o, NULL, &err) == SI_OK, "%s", err.msg);
        ck_assert_int_eq(si_gguf_open(qp, &g, &err), SI_OK);
        ck_assert_uint_eq(get_u32(g, "general.file_type"), modes[m].ft);
        const char *const w2[][2] = {
            { "token_embd.weight", modes[m].q }, { "blk.2.ffn_down.weight", modes[m].q },
            { "blk.0.ssm_out.weight", modes[m].ssm_out }, { "blk.0.ssm_conv1d.weight", "f32" },
            { "blk.3.attn_k_norm.weight", "f32" },
        };
        check_types(g, w2, sizeof w2 / sizeof w2[0]);
        /* The values are k/64 with |k| <= 127: exact in bf16 and f16. */
        double tol = modes[m].mode == SI_CONVERT_Q8_0 ? 0.01 : 0.0;
        ck_assert(max_err(g, ref, "blk.2.ffn_down.weight") <= tol);
        ck_assert(max_err(g, ref, "blk.1.attn_q.weight") <= tol);
        si_gguf_close(g);
    }
    si_gguf_close(ref);
}
END_TEST

START_TEST(test_moe_q4_k_m)
{
    synth_cfg c = { .moe = true, .dtype = SI_ST_F32, .shards = 1 };
    si_gguf *g = convert_ok("hf", &c, SI_CONVERT_Q4_K_M, "q.gguf", NULL);
    static const char *const want[][2] = {
        { "blk.0.ffn_gate_inp.weight", "f32" },       { "blk.0.ffn_gate_inp_shexp.weight", "f32" },
        { "blk.0.ffn_gate_exps.weight", "q8_0" },     { "blk.0.ffn_down_exps.weight", "f16" },
        { "blk.0.ffn_down_shexp.weight", "f16" },     { "blk.0.ffn_up_shexp.weight", "q8_0" },
    };
    check_types(g, want, sizeof want / sizeof want[0]);
    si_gguf_close(g);
}
END_TEST

/* ---- errors -------------------------------------------------------------------------- */

static void expect_fail(const synth_cfg *c, const char *sub, const char *needle1,
                        const char *needle2)
{
    si_err err = { "" };
    int rc = convert(sub, c, SI_CONVERT_F32, "bad.gguf", NULL, &err);
    ck_assert_msg(rc != SI_OK, "%s: conversion should fail", sub);
    ck_assert_msg(strstr(err.msg, needle1) != NULL, "%s: '%s' lacks '%s'", sub, err.msg, needle1);
    ck_assert_msg(needle2 == NULL || strstr(err.msg, needle2) != NULL, "%s: '%s' lacks '%s'",
                  sub, err.msg, needle2);
    ck_assert_msg(!exists(path("bad.gguf")) && !exists(path("bad.gguf.part")),
                  "%s: a failed conversion left a file behind", sub);
}

START_TEST(test_config_errors)
{
    static const char *const keys[] = { "linear_num_value_heads", "hidden_size", "rope_theta",
        "num_key_value_heads", "vocab_size", "intermediate_size", "linear_conv_kernel_dim" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        synth_cfg c = { .dtype = SI_ST_F32, .shards = 1, .drop_key = keys[i] };
        char sub[64];
        snprintf(sub, sizeof sub, "nokey%zu", i);
        expect_fail(&c, sub, keys[i], "config.json");
    }
    synth_cfg m = { .moe = true, .dtype = SI_ST_F32, .shards = 1,
                    .drop_key = "shared_expert_intermediate_size" };
    expect_fail(&m, "nokey_moe", "shared_expert_intermediate_size", "missing");
    synth_cfg a = { .dtype = SI_ST_F32, .shards = 1, .drop_key = "architectures" };
    /* model_type qwen3_5_text still identifies the model. */
    si_gguf_close(convert_ok("noarch", &a, SI_CONVERT_F32, "ok.gguf", NULL));
}
END_TEST

START_TEST(test_tensor_errors)
{
    synth_cfg c = { .dtype = SI_ST_F32, .shards = 1,
                    .drop_tensor = "layers.2.linear_attn.in_proj_z.weight" };
    expect_fail(&c, "missing", "missing tensor", "model.layers.2.linear_attn.in_proj_z.weight");
    synth_cfg s = { .dtype = SI_ST_F32, .shards = 1,
                    .bad_shape = "layers.1.self_attn.k_proj.weight" };
    expect_fail(&s, "shape", "model.layers.1.self_attn.k_proj.weight",
                "shape [3, 5], expected [32, 32]");
    synth_cfg d = { .dtype = SI_ST_F32, .shards = 1, .bad_dtype = "layers.0.linear_attn.A_log" };
    expect_fail(&d, "dtype", "model.layers.0.linear_attn.A_log", "dtype I64");
    synth_cfg x = { .dtype = SI_ST_F32, .shards = 1, .extra_tensor = "layers.0.mlp.bias" };
    expect_fail(&x, "extra", "model.layers.0.mlp.bias", "not part of");
    synth_cfg lm = { .dtype = SI_ST_F32, .shards = 2, .drop_tensor = "lm_head.weight" };
    expect_fail(&lm, "nolm", "lm_head.weight", "tie_word_embeddings");
    synth_cfg e = { .moe = true, .experts = SYNTH_PER_EXPERT, .dtype = SI_ST_F32, .shards = 1,
                    .drop_tensor = "layers.3.mlp.experts.2.up_proj.weight" };
    expect_fail(&e, "noexpert", "model.layers.3.mlp.experts.2.up_proj.weight", "missing");
}
END_TEST

/* ---- the safetensors reader ------------------------------------------------------------- */

static void expect_st_fail(const char *file, const char *needle)
{
    si_st_set *s = NULL;
    si_err err = { "" };
    const char *p = path(file);
    ck_assert_int_ne(si_st_open_files(&p, 1, &s, &err), SI_OK);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, needle) != NULL && strstr(err.msg, file) != NULL,
                  "'%s' lacks '%s' or the file name", err.msg, needle);
}

START_TEST(test_safetensors_errors)
{
    /* Truncated: shorter than the 8-byte length. */
    FILE *f = fopen(path("short.safetensors"), "wb");
    ck_assert_ptr_nonnull(f);
    fwrite("abcde", 1, 5, f);
    fclose(f);
    expect_st_fail("short.safetensors", "too short");
    /* Header length beyond the file. */
    f = fopen(path("hlen.safetensors"), "wb");
    const uint8_t len8[8] = { 0x00, 0x10, 0, 0, 0, 0, 0, 0 };
    fwrite(len8, 1, 8, f);
    fwrite("{}", 1, 2, f);
    fclose(f);
    expect_st_fail("hlen.safetensors", "runs past the end");
    ck_assert(synth_write_single(path("off.safetensors"), NULL, NULL, NULL, 8,
                                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
                                 "\"data_offsets\":[0,16]}}"));
    expect_st_fail("off.safetensors", "beyond the end of the data section");
    ck_assert(synth_write_single(path("dt.safetensors"), "w", "Q9", "[2]", 8, NULL));
    expect_st_fail("dt.safetensors", "unknown dtype \"Q9\"");
    ck_assert(synth_write_single(path("span.safetensors"), "w", "F16", "[3]", 8, NULL));
    expect_st_fail("span.safetensors", "need 6");
    ck_assert(synth_write_single(path("json.safetensors"), NULL, NULL, NULL, 0, "{\"w\": [1,"));
    expect_st_fail("json.safetensors", "not valid JSON");
    ck_assert(synth_write_single(path("neg.safetensors"), "w", "F32", "[-1]", 0, NULL));
    expect_st_fail("neg.safetensors", "shape[0]");
    ck_assert(synth_write_single(path("offs.safetensors"), NULL, NULL, NULL, 8,
                                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                                 "\"data_offsets\":[8,4]}}"));
    expect_st_fail("offs.safetensors", "end before begin");

    /* Recognised but unconvertible dtypes are refused when read. */
    ck_assert(synth_write_single(path("i64.safetensors"), "w", "I64", "[2, 1]", 16, NULL));
    si_st_set *s;
    si_err err;
    const char *p = path("i64.safetensors");
    ck_assert_int_eq(si_st_open_files(&p, 1, &s, &err), SI_OK);
    float out[2];
    ck_assert_int_eq(si_st_read_rows(s, si_st_find(s, "w"), 0, 1, out, &err), SI_EUNSUPPORTED);
    ck_assert(strstr(err.msg, "dtype I64") != NULL);
    ck_assert_int_eq(si_st_read_rows(s, si_st_find(s, "w"), 1, 2, out, &err), SI_EUNSUPPORTED);
    si_st_close(s);

    /* An index that maps a tensor to the wrong shard. */
    synth_cfg c = { .dtype = SI_ST_F32, .shards = 2 };
    ck_assert(synth_write(path("idx"), &c));
    char *ip = path("idx/model.safetensors.index.json");
    size_t n;
    char *text = slurp(ip, &n);
    char *hit = strstr(text, "\"model.embed_tokens.weight\":\"model-00001");
    ck_assert_ptr_nonnull(hit);
    hit[strlen("\"model.embed_tokens.weight\":\"model-0000")] = '2';
    f = fopen(ip, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
    free(text);
    ck_assert_int_ne(si_st_open_dir(path("idx"), &s, &err), SI_OK);
    ck_assert_msg(strstr(err.msg, "model.embed_tokens.weight") && strstr(err.msg, "another shard"),
                  "%s", err.msg);
    ck_assert_int_ne(si_st_open_dir(path("nowhere"), &s, &err), SI_OK);
}
END_TEST

START_TEST(test_safetensors_read)
{
    synth_cfg c = { .dtype = SI_ST_BF16, .shards = 1 };
    ck_assert(synth_write(path("hf"), &c));
    si_st_set *s;
    si_err err;
    ck_assert_msg(si_st_open_dir(path("hf"), &s, &err) == SI_OK, "%s", err.msg);
    const si_st_tensor *t = si_st_find(s, "model.layers.0.linear_attn.conv1d.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->dtype, SI_ST_BF16);
    ck_assert_uint_eq(t->ndim, 3);
    ck_assert(t->shape[0] == S_CDIM && t->shape[1] == 1 && t->shape[2] == S_CONV);
    ck_assert_uint_eq(si_st_row_len(t), S_CONV);
    ck_assert_uint_eq(si_st_n_rows(t), S_CDIM);
    float row[2 * S_CONV];
    ck_assert_int_eq(si_st_read_rows(s, t, 7, 2, row, &err), SI_OK);
    for (int i = 0; i < 2 * S_CONV; i++)
        ck_assert(row[i] ==
                  synth_value("layers.0.linear_attn.conv1d.weight", 7 * S_CONV + (uint64_t)i));
    ck_assert_int_eq(si_st_read_rows(s, t, S_CDIM - 1, 2, row, &err), SI_ERANGE);
    ck_assert_ptr_null(si_st_find(s, "model.nothing"));
    for (size_t i = 1; i < si_st_count(s); i++)
        ck_assert(strcmp(si_st_at(s, i - 1)->name, si_st_at(s, i)->name) < 0);
    si_st_close(s);
}
END_TEST

/* ---- the command ------------------------------------------------------------------------ */

static int run_cli(const char *args, const char *out_file)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s/sparkinfer' convert %s >'%s' 2>&1", top, args, out_file);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_cli)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/sparkinfer", top != NULL ? top : ".");
    if (top == NULL || access(bin, X_OK) != 0) {
        fprintf(stderr, "test_cli: %s not built; skipped\n", bin);
        return;
    }
    synth_cfg c = { .moe = true, .dtype = SI_ST_BF16, .shards = 1 };
    ck_assert(synth_write(path("hf"), &c));
    char args[1024], log[1024];
    snprintf(log, sizeof log, "%s", path("log.txt"));
    snprintf(args, sizeof args, "'%s' -o '%s' --type q8_0", path("hf"), path("o.gguf"));
    ck_assert_int_eq(run_cli(args, log), 0);
    size_t n;
    char *text = slurp(log, &n);
    ck_assert_msg(strstr(text, "qwen35moe") && strstr(text, "q8_0") && strstr(text, "fused"),
                  "%s", text);
    free(text);
    ck_assert(exists(path("o.gguf")));
    ck_assert_int_eq(run_cli("", log), 2);
    snprintf(args, sizeof args, "'%s' -o '%s' --type q5_k", path("hf"), path("o.gguf"));
    ck_assert_int_eq(run_cli(args, log), 2);
    snprintf(args, sizeof args, "'%s' -o '%s'", path("nothere"), path("o2.gguf"));
    ck_assert_int_eq(run_cli(args, log), 1);
    text = slurp(log, &n);
    ck_assert_msg(strstr(text, "sparkinfer convert:") && strstr(text, "config.json"), "%s", text);
    free(text);
    ck_assert(!exists(path("o2.gguf")));
    ck_assert_int_eq(run_cli("--help", log), 0);
}
END_TEST

static Suite *convert_suite(void)
{
    Suite *s = suite_create("convert");
    TCase *t = tcase_create("rules");
    tcase_add_test(t, test_use_more_bits);
    tcase_add_test(t, test_pick_type);
    suite_add_tcase(s, t);
    t = tcase_create("convert");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_dense_f32);
    tcase_add_test(t, test_layouts_identical);
    tcase_add_test(t, test_tied_irregular_yarn);
    tcase_add_test(t, test_moe);
    tcase_add_test(t, test_q4_k_m);
    tcase_add_test(t, test_moe_q4_k_m);
    tcase_add_test(t, test_config_errors);
    tcase_add_test(t, test_tensor_errors);
    tcase_add_test(t, test_safetensors_errors);
    tcase_add_test(t, test_safetensors_read);
    tcase_add_test(t, test_cli);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(convert_suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
