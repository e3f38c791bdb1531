/* core/convert/convert_plan.c — which Hugging Face tensor becomes which GGUF
 * tensor, with which shape check and transform (spec §2.2-§2.7). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert_internal.h"

/* ---- v-head permutation (spec §2.6) ----------------------------------------- */

uint64_t cv_vperm(const si_hf_qwen35 *hp, uint64_t idx, uint32_t hs)
{
    /* llama.cpp reshapes HF's [Hk, R, hs] head block to [R, Hk, hs]: GGUF
     * head j = r * Hk + g holds HF head g * R + r. */
    uint64_t hk = hp->lin_k_heads, r = hp->lin_v_heads / hp->lin_k_heads;
    uint64_t j = idx / hs, w = idx % hs;
    uint64_t hf = (j % hk) * r + j / hk;
    return hf * hs + w;
}

void cv_row_source(const cv_plan *p, const cv_tensor *t, uint64_t r,
                   const si_st_tensor **src, uint64_t *src_row)
{
    *src = t->src;
    switch (t->rows) {
    case CV_ROWS_QKV:
        *src_row = r < t->qk_rows ? r : t->qk_rows + cv_vperm(&p->hp, r - t->qk_rows, t->row_hs);
        return;
    case CV_ROWS_VHEADS:
        *src_row = cv_vperm(&p->hp, r, t->row_hs);
        return;
    case CV_ROWS_FUSED_GATE:
        *src_row = (r / t->n_ff) * 2 * t->n_ff + r % t->n_ff;
        return;
    case CV_ROWS_FUSED_UP:
        *src_row = (r / t->n_ff) * 2 * t->n_ff + t->n_ff + r % t->n_ff;
        return;
    case CV_ROWS_PER_EXPERT: {
        uint64_t per = (uint64_t)t->ne[1];
        *src = t->src_e[r / per];
        *src_row = r % per;
        return;
    }
    default:
        *src_row = r;
        return;
    }
}

/* ---- building ------------------------------------------------------------------- */

static int add(cv_plan *p, cv_tensor **out, si_err *err)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        cv_tensor *n = realloc(p->t, cap * sizeof *n);
        if (n == NULL)
            return si_err_set(err, SI_ENOMEM, "convert: out of memory for the tensor plan");
        p->t = n;
        p->cap = cap;
    }
    *out = &p->t[p->n++];
    memset(*out, 0, sizeof **out);
    return SI_OK;
}

static void shape_str(char *buf, size_t n, uint32_t ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

static void mark_used(cv_plan *p, const si_st_tensor *t)
{
    p->used[(size_t)(t - si_st_at(p->st, 0))] = true;
}

/* Finds `name` and checks its PyTorch shape; an alternative shape (alt_ndim
 * > 0) is also accepted (conv1d [C,1,K] or [C,K]). */
static int find(cv_plan *p, const char *name, uint32_t ndim, const int64_t *shape,
                uint32_t alt_ndim, const int64_t *alt, const si_st_tensor **out, si_err *err)
{
    const si_st_tensor *t = si_st_find(p->st, name);
    if (t == NULL)
        return si_err_set(err, SI_ENOTFOUND, "missing tensor '%s' (%s needs it)", name,
                          p->hp.arch_class);
    bool ok = t->ndim == ndim && memcmp(t->shape, shape, ndim * sizeof *shape) == 0;
    if (!ok && alt_ndim > 0)
        ok = t->ndim == alt_ndim && memcmp(t->shape, alt, alt_ndim * sizeof *alt) == 0;
    if (!ok) {
        char got[96], want[96];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(want, sizeof want, ndim, shape);
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': shape %s, expected %s from "
                          "config.json", si_st_file_path(p->st, t->file), name, got, want);
    }
    if (!si_st_dtype_convertible(t->dtype))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: tensor '%s': dtype %s is not supported "
                          "(F32, F16 and BF16 only)", si_st_file_path(p->st, t->file), name,
                          si_st_dtype_name(t->dtype));
    mark_used(p, t);
    *out = t;
    return SI_OK;
}

/* One GGUF tensor fed by one HF tensor whose shape is the reverse of ne
 * (or `hf_shape` when given). */
static int simple(cv_plan *p, int layer, const char *gguf, const char *hf, uint32_t ndim,
                  int64_t ne0, int64_t ne1, int64_t ne2, uint8_t elem, cv_tensor **out,
                  si_err *err)
{
    char gname[64], hname[256];
    if (layer >= 0) {
        snprintf(gname, sizeof gname, "blk.%d.%s", layer, gguf);
        snprintf(hname, sizeof hname, "%slayers.%d.%s", p->prefix, layer, hf);
    } else {
        snprintf(gname, sizeof gname, "%s", gguf);
        snprintf(hname, sizeof hname, "%s", hf);
    }
    int64_t ne[3] = { ne0, ne1, ne2 }, shape[3];
    for (uint32_t i = 0; i < ndim; i++)
        shape[i] = ne[ndim - 1 - i];
    const si_st_tensor *src;
    cv_tensor *t;
    int rc = find(p, hname, ndim, shape, 0, NULL, &src, err);
    if (rc == SI_OK)
        rc = add(p, &t, err);
    if (rc != SI_OK)
        return rc;
    snprintf(t->name, sizeof t->name, "%s", gname);
    t->layer = layer;
    t->ndim = ndim;
    t->ne[0] = ne0;
    t->ne[1] = ndim > 1 ? ne1 : 1;
    t->ne[2] = ndim > 2 ? ne2 : 1;
    t->elem = elem;
    t->src = src;
    if (out != NULL)
        *out = t;
    return SI_OK;
}

static int attn_layer(cv_plan *p, int il, si_err *err)
{
    const si_hf_qwen35 *h = &p->hp;
    int64_t H = h->n_embd, hd = h->head_dim;
    int64_t q = (int64_t)h->n_head * hd, kv = (int64_t)h->n_head_kv * hd;
    int rc;
    if ((rc = simple(p, il, "attn_q.weight", "self_attn.q_proj.weight", 2, H, 2 * q, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "attn_k.weight", "self_attn.k_proj.weight", 2, H, kv, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "attn_v.weight", "self_attn.v_proj.weight", 2, H, kv, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "attn_output.weight", "self_attn.o_proj.weight", 2, q, H, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "attn_q_norm.weight", "self_attn.q_norm.weight", 1, hd, 1, 1,
                     CV_ELEM_PLUS1, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "attn_k_norm.weight", "self_attn.k_norm.weight", 1, hd, 1, 1,
                     CV_ELEM_PLUS1, NULL, err)) != SI_OK)
        return rc;
    return SI_OK;
}

static int gdn_layer(cv_plan *p, int il, si_err *err)
{
    const si_hf_qwen35 *h = &p->hp;
    int64_t H = h->n_embd, hv = h->lin_v_heads, dv = h->lin_v_dim;
    int64_t qk = 2 * (int64_t)h->lin_k_heads * h->lin_k_dim, vd = hv * dv, C = qk + vd;
    int64_t K = h->conv_kernel;
    cv_tensor *t;
    int rc;
    if ((rc = simple(p, il, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", 2, H, C, 1,
                     CV_ELEM_COPY, &t, err)) != SI_OK)
        return rc;
    t->rows = CV_ROWS_QKV, t->qk_rows = (uint64_t)qk, t->row_hs = (uint32_t)dv;
    if ((rc = simple(p, il, "attn_gate.weight", "linear_attn.in_proj_z.weight", 2, H, vd, 1,
                     CV_ELEM_COPY, &t, err)) != SI_OK)
        return rc;
    t->rows = CV_ROWS_VHEADS, t->row_hs = (uint32_t)dv;
    if ((rc = simple(p, il, "ssm_beta.weight", "linear_attn.in_proj_b.weight", 2, H, hv, 1,
                     CV_ELEM_COPY, &t, err)) != SI_OK)
        return rc;
    t->rows = CV_ROWS_VHEADS, t->row_hs = 1;
    if ((rc = simple(p, il, "ssm_alpha.weight", "linear_attn.in_proj_a.weight", 2, H, hv, 1,
                     CV_ELEM_COPY, &t, err)) != SI_OK)
        return rc;
    t->rows = CV_ROWS_VHEADS, t->row_hs = 1;

    /* conv1d: HF [C, 1, K] (or already squeezed [C, K]) -> ggml [K, C]. */
    char hname[256];
    snprintf(hname, sizeof hname, "%slayers.%d.linear_attn.conv1d.weight", p->prefix, il);
    const int64_t s3[3] = { C, 1, K }, s2[2] = { C, K };
    const si_st_tensor *src;
    if ((rc = find(p, hname, 3, s3, 2, s2, &src, err)) != SI_OK || (rc = add(p, &t, err)) != SI_OK)
        return rc;
    snprintf(t->name, sizeof t->name, "blk.%d.ssm_conv1d.weight", il);
    t->layer = il, t->ndim = 2, t->ne[0] = K, t->ne[1] = C, t->ne[2] = 1;
    t->src = src, t->rows = CV_ROWS_QKV, t->qk_rows = (uint64_t)qk, t->row_hs = (uint32_t)dv;

    if ((rc = simple(p, il, "ssm_dt.bias", "linear_attn.dt_bias", 1, hv, 1, 1, CV_ELEM_COPY,
                     &t, err)) != SI_OK)
        return rc;
    t->cols_v = true, t->col_hs = 1;
    if ((rc = simple(p, il, "ssm_a", "linear_attn.A_log", 1, hv, 1, 1, CV_ELEM_NEG_EXP,
                     &t, err)) != SI_OK)
        return rc;
    t->cols_v = true, t->col_hs = 1;
    /* The gated norm multiplies by its weight directly: no +1 (spec §3.2). */
    if ((rc = simple(p, il, "ssm_norm.weight", "linear_attn.norm.weight", 1, dv, 1, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK)
        return rc;
    if ((rc = simple(p, il, "ssm_out.weight", "linear_attn.out_proj.weight", 2, vd, H, 1,
                     CV_ELEM_COPY, &t, err)) != SI_OK)
        return rc;
    t->cols_v = true, t->col_hs = (uint32_t)dv;
    return SI_OK;
}

static int dense_ffn(cv_plan *p, int il, si_err *err)
{
    int64_t H = p->hp.n_embd, F = p->hp.n_ff;
    int rc;
    if ((rc = simple(p, il, "ffn_gate.weight", "mlp.gate_proj.weight", 2, H, F, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "ffn_up.weight", "mlp.up_proj.weight", 2, H, F, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "ffn_down.weight", "mlp.down_proj.weight", 2, F, H, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK)
        return rc;
    return SI_OK;
}

/* Per-expert sources: mlp.experts.<e>.<proj>.weight, shape [rows, cols]. */
static int per_expert(cv_plan *p, int il, const char *gguf, const char *proj, int64_t rows,
                      int64_t cols, si_err *err)
{
    uint32_t E = p->hp.n_expert;
    if (p->pool_n + E > p->pool_cap) {
        /* The pool is sized once for all layers in cv_plan_build. */
        return si_err_set(err, SI_EINVAL, "convert: expert pool exhausted (internal)");
    }
    const si_st_tensor **srcs = &p->pool[p->pool_n];
    const int64_t shape[2] = { rows, cols };
    int rc;
    for (uint32_t e = 0; e < E; e++) {
        char hname[256];
        snprintf(hname, sizeof hname, "%slayers.%d.mlp.experts.%" PRIu32 ".%s.weight",
                 p->prefix, il, e, proj);
        if ((rc = find(p, hname, 2, shape, 0, NULL, &srcs[e], err)) != SI_OK)
            return rc;
    }
    p->pool_n += E;
    cv_tensor *t;
    if ((rc = add(p, &t, err)) != SI_OK)
        return rc;
    snprintf(t->name, sizeof t->name, "blk.%d.%s", il, gguf);
    t->layer = il, t->ndim = 3, t->ne[0] = cols, t->ne[1] = rows, t->ne[2] = E;
    t->rows = CV_ROWS_PER_EXPERT, t->src = srcs[0], t->src_e = srcs;
    return SI_OK;
}

static int moe_ffn(cv_plan *p, int il, si_err *err)
{
    const si_hf_qwen35 *h = &p->hp;
    int64_t H = h->n_embd, F = h->n_ff_exp, E = h->n_expert, Fs = h->n_ff_shexp;
    cv_tensor *t;
    int rc;
    if ((rc = simple(p, il, "ffn_gate_inp.weight", "mlp.gate.weight", 2, H, E, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK)
        return rc;

    char fused[256], split_gate[256], first[256];
    snprintf(fused, sizeof fused, "%slayers.%d.mlp.experts.gate_up_proj", p->prefix, il);
    snprintf(split_gate, sizeof split_gate, "%slayers.%d.mlp.experts.gate_proj", p->prefix, il);
    snprintf(first, sizeof first, "%slayers.%d.mlp.experts.0.gate_proj.weight", p->prefix, il);
    if (si_st_find(p->st, fused) != NULL) {
        /* transformers 5.x: gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F]. */
        p->experts_fused = true;
        const si_st_tensor *src;
        const int64_t s[3] = { E, 2 * F, H };
        if ((rc = find(p, fused, 3, s, 0, NULL, &src, err)) != SI_OK)
            return rc;
        for (int k = 0; k < 2; k++) {
            if ((rc = add(p, &t, err)) != SI_OK)
                return rc;
            snprintf(t->name, sizeof t->name, "blk.%d.%s", il,
                     k == 0 ? "ffn_gate_exps.weight" : "ffn_up_exps.weight");
            t->layer = il, t->ndim = 3, t->ne[0] = H, t->ne[1] = F, t->ne[2] = E;
            t->src = src, t->n_ff = (uint64_t)F;
            t->rows = k == 0 ? CV_ROWS_FUSED_GATE : CV_ROWS_FUSED_UP;
        }
        if ((rc = simple(p, il, "ffn_down_exps.weight", "mlp.experts.down_proj", 3, F, H, E,
                         CV_ELEM_COPY, NULL, err)) != SI_OK)
            return rc;
    } else if (si_st_find(p->st, split_gate) != NULL) {
        /* Stacked but unfused: gate_proj / up_proj [E, F, H], down_proj [E, H, F]. */
        if ((rc = simple(p, il, "ffn_gate_exps.weight", "mlp.experts.gate_proj", 3, H, F, E,
                         CV_ELEM_COPY, NULL, err)) != SI_OK ||
            (rc = simple(p, il, "ffn_up_exps.weight", "mlp.experts.up_proj", 3, H, F, E,
                         CV_ELEM_COPY, NULL, err)) != SI_OK ||
            (rc = simple(p, il, "ffn_down_exps.weight", "mlp.experts.down_proj", 3, F, H, E,
                         CV_ELEM_COPY, NULL, err)) != SI_OK)
            return rc;
    } else if (si_st_find(p->st, first) != NULL) {
        if ((rc = per_expert(p, il, "ffn_gate_exps.weight", "gate_proj", F, H, err)) != SI_OK ||
            (rc = per_expert(p, il, "ffn_up_exps.weight", "up_proj", F, H, err)) != SI_OK ||
            (rc = per_expert(p, il, "ffn_down_exps.weight", "down_proj", H, F, err)) != SI_OK)
            return rc;
    } else {
        return si_err_set(err, SI_ENOTFOUND, "missing experts of layer %d: neither '%s' "
                          "(fused) nor '%s' (per expert)", il, fused, first);
    }

    /* shared_expert_gate is Linear(H, 1): [1, H] -> 1-D [H]. */
    char hname[256];
    snprintf(hname, sizeof hname, "%slayers.%d.mlp.shared_expert_gate.weight", p->prefix, il);
    const int64_t sg[2] = { 1, H }, sg1[1] = { H };
    const si_st_tensor *src;
    if ((rc = find(p, hname, 2, sg, 1, sg1, &src, err)) != SI_OK || (rc = add(p, &t, err)) != SI_OK)
        return rc;
    snprintf(t->name, sizeof t->name, "blk.%d.ffn_gate_inp_shexp.weight", il);
    t->layer = il, t->ndim = 1, t->ne[0] = H, t->ne[1] = 1, t->ne[2] = 1, t->src = src;

    if ((rc = simple(p, il, "ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", 2,
                     H, Fs, 1, CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", 2,
                     H, Fs, 1, CV_ELEM_COPY, NULL, err)) != SI_OK ||
        (rc = simple(p, il, "ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", 2,
                     Fs, H, 1, CV_ELEM_COPY, NULL, err)) != SI_OK)
        return rc;
    return SI_OK;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Tensors that are not part of the text model: vision tower and MTP head. */
static bool skipped(const cv_plan *p, const char *name)
{
    static const char *const skip[] = { "model.visual.", "visual.", "mtp.", "model.mtp." };
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (starts_with(name, skip[i]))
            return true;
    char lm_mtp[64];
    snprintf(lm_mtp, sizeof lm_mtp, "%smtp.", p->prefix);
    return starts_with(name, lm_mtp);
}

static int globals_and_layers(cv_plan *p, si_err *err)
{
    const si_hf_qwen35 *h = &p->hp;
    char hname[256];
    int rc;
    snprintf(hname, sizeof hname, "%sembed_tokens.weight", p->prefix);
    if ((rc = simple(p, -1, "token_embd.weight", hname, 2, h->n_embd, h->n_vocab, 1,
                     CV_ELEM_COPY, NULL, err)) != SI_OK)
        return rc;
    for (uint32_t il = 0; il < h->n_layer; il++) {
        int l = (int)il;
        if ((rc = simple(p, l, "attn_norm.weight", "input_layernorm.weight", 1, h->n_embd, 1, 1,
                         CV_ELEM_PLUS1, NULL, err)) != SI_OK ||
            (rc = simple(p, l, "post_attention_norm.weight", "post_attention_layernorm.weight",
                         1, h->n_embd, 1, 1, CV_ELEM_PLUS1, NULL, err)) != SI_OK)
            return rc;
        rc = h->is_full[il] ? attn_layer(p, l, err) : gdn_layer(p, l, err);
        if (rc == SI_OK)
            rc = h->moe ? moe_ffn(p, l, err) : dense_ffn(p, l, err);
        if (rc != SI_OK)
            return rc;
    }
    snprintf(hname, sizeof hname, "%snorm.weight", p->prefix);
    if ((rc = simple(p, -1, "output_norm.weight", hname, 1, h->n_embd, 1, 1, CV_ELEM_PLUS1,
                     NULL, err)) != SI_OK)
        return rc;

    /* LM head: tie_word_embeddings decides; without the key, the presence
     * of lm_head.weight does. */
    const si_st_tensor *lm = si_st_find(p->st, "lm_head.weight");
    bool tied = h->tie_embeddings == 1 || (h->tie_embeddings < 0 && lm == NULL);
    if (tied) {
        if (lm != NULL)
            mark_used(p, lm);   /* a tied copy: HF ignores it too */
        return SI_OK;
    }
    if (lm == NULL)
        return si_err_set(err, SI_ENOTFOUND, "missing tensor 'lm_head.weight' "
                          "(tie_word_embeddings is false)");
    return simple(p, -1, "output.weight", "lm_head.weight", 2, h->n_embd, h->n_vocab, 1,
                  CV_ELEM_COPY, NULL, err);
}

int cv_plan_build(cv_plan *p, const si_hf_qwen35 *hp, const si_st_set *st, si_err *err)
{
    memset(p, 0, sizeof *p);
    p->hp = *hp;
    p->st = st;
    p->n_vocab = hp->n_vocab;
    size_t n_src = si_st_count(st);
    p->used = calloc(n_src ? n_src : 1, sizeof *p->used);
    p->pool_cap = hp->moe ? (size_t)hp->n_layer * 3 * hp->n_expert : 0;
    p->pool = calloc(p->pool_cap ? p->pool_cap : 1, sizeof *p->pool);
    if (p->used == NULL || p->pool == NULL) {
        cv_plan_free(p);
        return si_err_set(err, SI_ENOMEM, "convert: out of memory");
    }

    if (si_st_find(st, "model.language_model.embed_tokens.weight") != NULL)
        p->prefix = "model.language_model.";
    else if (si_st_find(st, "model.embed_tokens.weight") != NULL)
        p->prefix = "model.";
    else {
        cv_plan_free(p);
        return si_err_set(err, SI_ENOTFOUND, "missing tensor 'model.embed_tokens.weight' "
                          "(or 'model.language_model.embed_tokens.weight'): not a Qwen3.5 "
                          "text checkpoint");
    }

    int rc = globals_and_layers(p, err);
    for (size_t i = 0; rc == SI_OK && i < n_src; i++) {
        const si_st_tensor *t = si_st_at(st, i);
        if (p->used[i] || skipped(p, t->name))
            continue;
        rc = si_err_set(err, SI_EUNSUPPORTED, "%s: tensor '%s' is not part of the %s text "
                        "model this converter knows (refusing rather than dropping it)",
                        si_st_file_path(st, t->file), t->name, hp->arch_class);
    }
    if (rc != SI_OK)
        cv_plan_free(p);
    return rc;
}

void cv_plan_free(cv_plan *p)
{
    if (p == NULL)
        return;
    free(p->t);
    free(p->pool);
    free(p->used);
    memset(p, 0, sizeof *p);
}
