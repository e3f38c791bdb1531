/* tests/models/tiny_gguf.c — writes tiny qwen35 / qwen35moe GGUFs with the
 * metadata keys and tensor names of spec §1-§2, for the model-plugin tests. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "tiny.h"

tiny_cfg tiny_default(bool moe)
{
    tiny_cfg c = {
        .moe = moe, .H = 64, .n_layer = 8, .interval = 4,
        .n_head = 4, .n_head_kv = 2, .head_dim = 32, .n_rot = 16,
        .Hk = 2, .Hv = 4, .d_state = 16, .conv_k = 4,
        .F = 96, .V = 128,
        .n_expert = moe ? 8 : 0, .n_used = moe ? 2 : 0, .F_exp = moe ? 32 : 0, .F_sh = moe ? 32 : 0,
        .eps = 1e-6f, .rope_base = 10000000.0f,
        .seed = 1234,
    };
    return c;
}

const char *tiny_arch(const tiny_cfg *c)
{
    return c->moe ? "qwen35moe" : "qwen35";
}

/* How a tensor's values are drawn. */
enum gen {
    G_MAT,      /* U(-1,1) * sqrt(3 / in): unit-variance outputs      */
    G_EMB,      /* U(-1,1)                                             */
    G_NORM,     /* 1 + 0.2 U(-1,1) (GGUF norms already hold 1 + w)     */
    G_SSM_A,    /* -exp(U(-1, 0.5))                                    */
    G_SMALL,    /* 0.5 U(-1,1): dt bias, conv taps, shared gate        */
    G_ROUTER,   /* 3 U(-1,1) / sqrt(in): clearly separated experts     */
};

typedef struct tt {
    char     name[96];
    uint32_t ndim;
    int64_t  ne[3];
    int      gen;
    uint32_t type;
    float   *data;
} tt;

typedef struct builder {
    const tiny_cfg *c;
    tt             *t;
    size_t          n, cap;
    int             rc;
} builder;

static uint64_t hash_name(const char *s, uint32_t seed)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h ? h : 1;
}

static double urand(uint64_t *st)   /* xorshift64*, uniform in (-1, 1) */
{
    *st ^= *st >> 12;
    *st ^= *st << 25;
    *st ^= *st >> 27;
    uint64_t r = *st * 2685821657736338717ull;
    return ((double)(r >> 11) / 9007199254740992.0) * 2.0 - 1.0;
}

static void add(builder *b, int gen, bool matrix, const char *name, uint32_t ndim,
                int64_t ne0, int64_t ne1, int64_t ne2)
{
    const tiny_cfg *c = b->c;
    if (b->rc != SI_OK || (c->omit != NULL && strcmp(c->omit, name) == 0))
        return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 128;
        tt *p = realloc(b->t, cap * sizeof *p);
        if (p == NULL) {
            b->rc = SI_ENOMEM;
            return;
        }
        b->t = p;
        b->cap = cap;
    }
    tt *t = &b->t[b->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    if (c->grow != NULL && strcmp(c->grow, name) == 0)
        t->ne[ndim - 1]++;
    t->gen = gen;
    t->type = matrix && c->weight_type != 0 ? c->weight_type : SI_TYPE_F32;
    if (c->f16 != NULL && strcmp(c->f16, name) == 0)
        t->type = SI_TYPE_F16;

    int64_t n = t->ne[0] * (ndim > 1 ? t->ne[1] : 1) * (ndim > 2 ? t->ne[2] : 1);
    t->data = malloc((size_t)n * sizeof(float));
    if (t->data == NULL) {
        b->rc = SI_ENOMEM;
        return;
    }
    uint64_t st = hash_name(name, c->seed);
    double in = (double)t->ne[0];
    for (int64_t i = 0; i < n; i++) {
        double u = urand(&st), v;
        switch (gen) {
        case G_MAT:    v = u * sqrt(3.0 / in); break;
        case G_EMB:    v = u; break;
        case G_NORM:   v = 1.0 + 0.2 * u; break;
        case G_SSM_A:  v = -exp(0.75 * u - 0.25); break;
        case G_ROUTER: v = 3.0 * u / sqrt(in); break;
        default:       v = 0.5 * u; break;
        }
        t->data[i] = (float)v;
    }
    b->n++;
}

#define MAT(name, ...)  add(b, G_MAT, true, name, __VA_ARGS__)

static void block_tensors(builder *b, uint32_t il, bool full)
{
    const tiny_cfg *c = b->c;
    int64_t H = c->H, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    int64_t vd = (int64_t)c->Hv * c->d_state, cd = 2 * (int64_t)c->Hk * c->d_state + vd;
    char n[96];
#define N(s) (snprintf(n, sizeof n, "blk.%u." s, il), n)
    add(b, G_NORM, false, N("attn_norm.weight"), 1, H, 1, 1);
    add(b, G_NORM, false, N("post_attention_norm.weight"), 1, H, 1, 1);
    if (full) {
        MAT(N("attn_q.weight"), 2, H, 2 * q, 1);
        MAT(N("attn_k.weight"), 2, H, kv, 1);
        MAT(N("attn_v.weight"), 2, H, kv, 1);
        MAT(N("attn_output.weight"), 2, q, H, 1);
        add(b, G_NORM, false, N("attn_q_norm.weight"), 1, c->head_dim, 1, 1);
        add(b, G_NORM, false, N("attn_k_norm.weight"), 1, c->head_dim, 1, 1);
    } else {
        MAT(N("attn_qkv.weight"), 2, H, cd, 1);
        MAT(N("attn_gate.weight"), 2, H, vd, 1);
        MAT(N("ssm_beta.weight"), 2, H, c->Hv, 1);
        MAT(N("ssm_alpha.weight"), 2, H, c->Hv, 1);
        add(b, G_SMALL, false, N("ssm_conv1d.weight"), 2, c->conv_k, cd, 1);
        add(b, G_SMALL, false, c->dt_no_bias ? N("ssm_dt") : N("ssm_dt.bias"), 1, c->Hv, 1, 1);
        add(b, G_SSM_A, false, N("ssm_a"), 1, c->Hv, 1, 1);
        add(b, G_NORM, false, N("ssm_norm.weight"), 1, c->d_state, 1, 1);
        MAT(N("ssm_out.weight"), 2, vd, H, 1);
    }
    if (!c->moe) {
        MAT(N("ffn_gate.weight"), 2, H, c->F, 1);
        MAT(N("ffn_up.weight"), 2, H, c->F, 1);
        MAT(N("ffn_down.weight"), 2, c->F, H, 1);
        return;
    }
    add(b, G_ROUTER, false, N("ffn_gate_inp.weight"), 2, H, c->n_expert, 1);
    if (c->fused_gate_up) {
        MAT(N("ffn_gate_up_exps.weight"), 3, H, 2 * (int64_t)c->F_exp, c->n_expert);
    } else {
        MAT(N("ffn_gate_exps.weight"), 3, H, c->F_exp, c->n_expert);
        MAT(N("ffn_up_exps.weight"), 3, H, c->F_exp, c->n_expert);
    }
    MAT(N("ffn_down_exps.weight"), 3, c->F_exp, H, c->n_expert);
    add(b, G_SMALL, false, N("ffn_gate_inp_shexp.weight"), 1, H, 1, 1);
    MAT(N("ffn_gate_shexp.weight"), 2, H, c->F_sh, 1);
    MAT(N("ffn_up_shexp.weight"), 2, H, c->F_sh, 1);
    MAT(N("ffn_down_shexp.weight"), 2, c->F_sh, H, 1);
#undef N
}

static bool is_full(const tiny_cfg *c, uint32_t il)
{
    return (il + 1) % c->interval == 0;
}

static void all_tensors(builder *b)
{
    const tiny_cfg *c = b->c;
    add(b, G_EMB, true, "token_embd.weight", 2, c->H, c->V, 1);
    add(b, G_NORM, false, "output_norm.weight", 1, c->H, 1, 1);
    if (!c->tied)
        MAT("output.weight", 2, c->H, c->V, 1);
    for (uint32_t il = 0; il < c->n_layer; il++)
        block_tensors(b, il, is_full(c, il));
    /* MTP blocks: a full-attention block plus the nextn tensors (spec §2.9);
     * never part of the trunk. */
    for (uint32_t k = 0; k < c->nextn; k++) {
        uint32_t il = c->n_layer + k;
        char n[96];
        block_tensors(b, il, true);
        snprintf(n, sizeof n, "blk.%u.nextn.eh_proj.weight", il);
        MAT(n, 2, 2 * (int64_t)c->H, c->H, 1);
        snprintf(n, sizeof n, "blk.%u.nextn.enorm.weight", il);
        add(b, G_NORM, false, n, 1, c->H, 1, 1);
        snprintf(n, sizeof n, "blk.%u.nextn.hnorm.weight", il);
        add(b, G_NORM, false, n, 1, c->H, 1, 1);
        snprintf(n, sizeof n, "blk.%u.nextn.shared_head_norm.weight", il);
        add(b, G_NORM, false, n, 1, c->H, 1, 1);
    }
}

typedef struct kw {
    si_gguf_writer *w;
    const tiny_cfg *c;
    char            key[128];
} kw;

static const char *full_key(kw *k, const char *key)
{
    snprintf(k->key, sizeof k->key, "%s.%s", tiny_arch(k->c), key);
    return k->key;
}

static bool skipped(const kw *k, const char *key)
{
    return k->c->omit_key != NULL && strcmp(k->c->omit_key, key) == 0;
}

static void put_u32(kw *k, const char *key, uint32_t v)
{
    if (skipped(k, key))
        return;
    if (k->c->bad_key != NULL && strcmp(k->c->bad_key, key) == 0)
        v = k->c->bad_val;
    si_gguf_writer_set_u32(k->w, full_key(k, key), v);
}

static void put_f32(kw *k, const char *key, float v)
{
    if (!skipped(k, key))
        si_gguf_writer_set_f32(k->w, full_key(k, key), v);
}

static void metadata(kw *k)
{
    const tiny_cfg *c = k->c;
    uint32_t n_block = c->n_layer + c->nextn;
    si_gguf_writer_set_str(k->w, "general.architecture",
                           c->arch_override != NULL ? c->arch_override : tiny_arch(c));
    si_gguf_writer_set_str(k->w, "general.name", "sparkinfer-test-tiny");
    put_u32(k, "block_count", n_block);
    if (c->nextn)
        put_u32(k, "nextn_predict_layers", c->nextn);
    put_u32(k, "context_length", 4096);
    put_u32(k, "embedding_length", c->H);
    if (c->moe) {
        put_u32(k, "expert_count", c->n_expert);
        put_u32(k, "expert_used_count", c->n_used);
        put_u32(k, "expert_feed_forward_length", c->F_exp);
        put_u32(k, "expert_shared_feed_forward_length", c->F_sh);
    } else {
        put_u32(k, "feed_forward_length", c->F);
    }
    put_u32(k, "attention.head_count", c->n_head);
    if (c->head_kv_array) {
        uint32_t arr[64];
        for (uint32_t il = 0; il < n_block && il < 64; il++)
            arr[il] = il >= c->n_layer || is_full(c, il) ? c->n_head_kv : 0;
        si_gguf_writer_set_arr(k->w, full_key(k, "attention.head_count_kv"), SI_GGUF_U32, arr, n_block);
    } else {
        put_u32(k, "attention.head_count_kv", c->n_head_kv);
    }
    put_u32(k, "attention.key_length", c->head_dim);
    put_u32(k, "attention.value_length", c->head_dim);
    put_f32(k, "attention.layer_norm_rms_epsilon", c->eps);
    put_u32(k, "rope.dimension_count", c->n_rot);
    put_f32(k, "rope.freq_base", c->rope_base);
    int32_t sections[4] = { 11, 11, 10, 0 };
    si_gguf_writer_set_arr(k->w, full_key(k, "rope.dimension_sections"), SI_GGUF_I32, sections, 4);
    if (c->yarn_factor > 0.0f) {
        si_gguf_writer_set_str(k->w, full_key(k, "rope.scaling.type"), "yarn");
        put_f32(k, "rope.scaling.factor", c->yarn_factor);
        put_u32(k, "rope.scaling.original_context_length", c->yarn_orig_ctx);
    }
    if (c->recurrent_array) {
        uint8_t arr[64];
        for (uint32_t il = 0; il < n_block && il < 64; il++)
            arr[il] = il < c->n_layer && !is_full(c, il);
        si_gguf_writer_set_arr(k->w, full_key(k, "attention.recurrent_layers"), SI_GGUF_BOOL, arr, n_block);
    } else {
        put_u32(k, "full_attention_interval", c->interval);
    }
    put_u32(k, "ssm.conv_kernel", c->conv_k);
    put_u32(k, "ssm.state_size", c->d_state);
    put_u32(k, "ssm.group_count", c->Hk);
    put_u32(k, "ssm.time_step_rank", c->Hv);
    put_u32(k, "ssm.inner_size", c->Hv * c->d_state);
}

/* Converts one tensor to its file type and streams it. */
static int write_data(si_gguf_writer *w, const tt *t, si_err *err)
{
    int64_t n = t->ne[0] * (t->ndim > 1 ? t->ne[1] : 1) * (t->ndim > 2 ? t->ne[2] : 1);
    if (t->type == SI_TYPE_F32) {
        if (si_gguf_writer_write(w, t->data, (uint64_t)n * sizeof(float)) != SI_OK)
            return si_err_set(err, SI_EIO, "%s: %s", t->name, si_gguf_writer_error(w));
        return SI_OK;
    }
    uint64_t bytes = si_type_row_bytes(t->type, n);
    void *q = malloc(bytes ? bytes : 1);
    if (q == NULL)
        return si_err_set(err, SI_ENOMEM, "out of memory");
    int rc = si_quant(t->type, t->data, q, n, err);
    if (rc == SI_OK && si_gguf_writer_write(w, q, bytes) != SI_OK)
        rc = si_err_set(err, SI_EIO, "%s: %s", t->name, si_gguf_writer_error(w));
    free(q);
    return rc;
}

int tiny_write(const tiny_cfg *c, const char *path, si_err *err)
{
    builder b = { .c = c, .rc = SI_OK };
    si_gguf_writer *w = NULL;
    int rc;

    all_tensors(&b);
    if (b.rc != SI_OK) {
        rc = si_err_set(err, b.rc, "tiny model: out of memory");
        goto done;
    }
    if ((rc = si_gguf_writer_open(path, &w, err)) != SI_OK)
        goto done;
    kw k = { .w = w, .c = c };
    metadata(&k);
    for (size_t i = 0; i < b.n; i++)
        si_gguf_writer_add_tensor(w, b.t[i].name, b.t[i].type, b.t[i].ndim, b.t[i].ne);
    if (si_gguf_writer_error(w)[0] != '\0') {   /* "" while no setter failed */
        rc = si_err_set(err, SI_EFORMAT, "tiny model: %s", si_gguf_writer_error(w));
        goto done;
    }
    for (size_t i = 0; i < b.n && rc == SI_OK; i++)
        rc = write_data(w, &b.t[i], err);
done:
    if (w != NULL) {
        si_err e2;
        int rc2 = si_gguf_writer_close(w, &e2);
        if (rc == SI_OK && rc2 != SI_OK) {
            rc = rc2;
            if (err != NULL)
                *err = e2;
        }
    }
    for (size_t i = 0; i < b.n; i++)
        free(b.t[i].data);
    free(b.t);
    return rc;
}
