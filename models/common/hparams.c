/* models/common/hparams.c — hyper-parameters of a Qwen3.5 hybrid GGUF.
 *
 * Every key lives under "<arch>." (spec §1.2).  Integer keys accept any
 * integer GGUF type whose value fits; float keys accept f32/f64 or an
 * integer.  After reading, the values are cross-checked against each other
 * so that a contradiction is reported by key name before any tensor is
 * looked at.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hybrid.h"

typedef struct kctx {
    const si_host *h;
    const si_gguf *g;
    const char    *arch;
    si_err        *err;
} kctx;

static const si_gguf_value *kget(const kctx *c, const char *key, char *full, size_t n)
{
    snprintf(full, n, "%s.%s", c->arch, key);
    return c->h->gguf_get(c->g, full);
}

static bool is_int_vtype(uint32_t t)
{
    switch (t) {
    case SI_GGUF_U8: case SI_GGUF_U16: case SI_GGUF_U32: case SI_GGUF_U64:
    case SI_GGUF_I8: case SI_GGUF_I16: case SI_GGUF_I32: case SI_GGUF_I64:
        return true;
    default:
        return false;
    }
}

static bool is_uint_vtype(uint32_t t)
{
    return t == SI_GGUF_U8 || t == SI_GGUF_U16 || t == SI_GGUF_U32 || t == SI_GGUF_U64;
}

static const char *vtype_str(uint32_t t)
{
    static const char *const names[] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
        "string", "array", "u64", "i64", "f64",
    };
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown type";
}

/* An integer (or, for per-layer flag arrays, bool) value as uint32; `what`
 * names it in messages. */
static int val_u32(const kctx *c, const si_gguf_value *v, const char *what, uint32_t *out)
{
    if (v->type == SI_GGUF_BOOL) {
        *out = v->v.u != 0;
        return SI_OK;
    }
    if (!is_int_vtype(v->type))
        return si_err_set(c->err, SI_EFORMAT, "%s: type %s but an integer expected",
                          what, vtype_str(v->type));
    if (is_uint_vtype(v->type)) {
        if (v->v.u > UINT32_MAX)
            return si_err_set(c->err, SI_ERANGE, "%s: value %" PRIu64 " too large", what, v->v.u);
        *out = (uint32_t)v->v.u;
    } else {
        if (v->v.i < 0 || v->v.i > (int64_t)UINT32_MAX)
            return si_err_set(c->err, SI_ERANGE, "%s: value %" PRId64 " out of range", what, v->v.i);
        *out = (uint32_t)v->v.i;
    }
    return SI_OK;
}

/* "<arch>.<key>" as uint32.  Absent: SI_ENOTFOUND with a message when
 * required, otherwise *out = def and SI_OK. */
static int get_u32(const kctx *c, const char *key, bool required, uint32_t def, uint32_t *out)
{
    char full[160];
    const si_gguf_value *v = kget(c, key, full, sizeof full);
    if (v == NULL) {
        if (required)
            return si_err_set(c->err, SI_ENOTFOUND, "%s: required key missing", full);
        *out = def;
        return SI_OK;
    }
    if (v->type == SI_GGUF_ARRAY || v->type == SI_GGUF_BOOL)
        return si_err_set(c->err, SI_EFORMAT, "%s: %s but a scalar integer expected",
                          full, vtype_str(v->type));
    return val_u32(c, v, full, out);
}

static int get_f32(const kctx *c, const char *key, bool required, float def, float *out)
{
    char full[160];
    const si_gguf_value *v = kget(c, key, full, sizeof full);
    if (v == NULL) {
        if (required)
            return si_err_set(c->err, SI_ENOTFOUND, "%s: required key missing", full);
        *out = def;
        return SI_OK;
    }
    if (v->type == SI_GGUF_F32 || v->type == SI_GGUF_F64) {
        *out = (float)v->v.f;
    } else if (is_uint_vtype(v->type)) {
        *out = (float)v->v.u;
    } else if (is_int_vtype(v->type)) {
        *out = (float)v->v.i;
    } else {
        return si_err_set(c->err, SI_EFORMAT, "%s: type %s but a number expected",
                          full, vtype_str(v->type));
    }
    if (!isfinite(*out))
        return si_err_set(c->err, SI_ERANGE, "%s: value is not finite", full);
    return SI_OK;
}

/* Per-layer values of an array key (integers or bools); n must be the
 * block count or the trunk length. */
static int get_layer_array(const kctx *c, const si_gguf_value *v, const char *full,
                           const sih_hparams *hp, uint32_t *vals)
{
    if (v->v.arr.n != hp->n_block && v->v.arr.n != hp->n_layer)
        return si_err_set(c->err, SI_EFORMAT,
                          "%s: array of %" PRIu64 " entries but block_count %u (or trunk %u) expected",
                          full, v->v.arr.n, hp->n_block, hp->n_layer);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        si_gguf_value e;
        char what[200];
        snprintf(what, sizeof what, "%s[%u]", full, il);
        if (c->h->gguf_arr_get(v, il, &e) != SI_OK)
            return si_err_set(c->err, SI_EFORMAT, "%s: unreadable element", what);
        int rc = val_u32(c, &e, what, &vals[il]);
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}

/* Which trunk layers are full attention: attention.recurrent_layers when
 * present, otherwise every full_attention_interval-th layer (default 4). */
static int read_layer_kinds(const kctx *c, sih_hparams *hp, uint32_t *tmp)
{
    char full[160];
    const si_gguf_value *v = kget(c, "attention.recurrent_layers", full, sizeof full);
    if (v != NULL) {
        if (v->type != SI_GGUF_ARRAY)
            return si_err_set(c->err, SI_EFORMAT, "%s: %s but a per-layer array expected",
                              full, vtype_str(v->type));
        int rc = get_layer_array(c, v, full, hp, tmp);
        if (rc != SI_OK)
            return rc;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            hp->is_full[il] = tmp[il] == 0;
    } else {
        uint32_t interval;
        int rc = get_u32(c, "full_attention_interval", false, 4, &interval);
        if (rc != SI_OK)
            return rc;
        if (interval == 0)
            return si_err_set(c->err, SI_ERANGE, "%s.full_attention_interval: must be >= 1", c->arch);
        for (uint32_t il = 0; il < hp->n_layer; il++)
            hp->is_full[il] = (il + 1) % interval == 0;
    }
    hp->n_full = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        hp->n_full += hp->is_full[il];
    return SI_OK;
}

/* attention.head_count_kv: a scalar, or (Ollama exports) one entry per
 * layer with 0 on recurrent layers.  Every full-attention layer must then
 * carry the same non-zero count, since one KV cache serves them all. */
static int read_head_count_kv(const kctx *c, sih_hparams *hp, uint32_t *tmp)
{
    char full[160];
    const si_gguf_value *v = kget(c, "attention.head_count_kv", full, sizeof full);
    if (v == NULL)
        return si_err_set(c->err, SI_ENOTFOUND, "%s: required key missing", full);
    if (v->type != SI_GGUF_ARRAY) {
        int rc = val_u32(c, v, full, &hp->n_head_kv);
        if (rc != SI_OK)
            return rc;
        if (hp->n_head_kv == 0 && hp->n_full > 0)
            return si_err_set(c->err, SI_ERANGE, "%s: 0 but the model has %u full-attention layers",
                              full, hp->n_full);
        return SI_OK;
    }
    int rc = get_layer_array(c, v, full, hp, tmp);
    if (rc != SI_OK)
        return rc;
    hp->n_head_kv = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (!hp->is_full[il])
            continue;       /* recurrent layers own no KV heads; value unused */
        if (tmp[il] == 0)
            return si_err_set(c->err, SI_ERANGE, "%s[%u] = 0 but layer %u is full attention",
                              full, il, il);
        if (hp->n_head_kv != 0 && tmp[il] != hp->n_head_kv)
            return si_err_set(c->err, SI_EUNSUPPORTED,
                              "%s[%u] = %u but earlier full-attention layers have %u "
                              "(one KV head count for all layers is required)",
                              full, il, tmp[il], hp->n_head_kv);
        hp->n_head_kv = tmp[il];
    }
    return SI_OK;
}

/* rope.scaling.*: "yarn" enables static YaRN (spec §6.12); none/absent
 * means plain RoPE; any other scaling is refused rather than ignored. */
static int read_rope_scaling(const kctx *c, sih_hparams *hp)
{
    char full[160];
    const si_gguf_value *v = kget(c, "rope.scaling.type", full, sizeof full);
    hp->yarn_factor = 0.0f;
    hp->yarn_orig_ctx = 0;
    if (v == NULL)
        return SI_OK;
    if (v->type != SI_GGUF_STRING)
        return si_err_set(c->err, SI_EFORMAT, "%s: type %s but a string expected",
                          full, vtype_str(v->type));
    const char *s = v->v.s.ptr;
    size_t n = (size_t)v->v.s.len;
    if ((n == 4 && memcmp(s, "none", 4) == 0) || n == 0)
        return SI_OK;
    if (!(n == 4 && memcmp(s, "yarn", 4) == 0))
        return si_err_set(c->err, SI_EUNSUPPORTED, "%s: '%.*s' not supported (only yarn or none)",
                          full, (int)(n > 64 ? 64 : n), s);
    int rc = get_f32(c, "rope.scaling.factor", true, 0.0f, &hp->yarn_factor);
    if (rc != SI_OK)
        return rc;
    if (!(hp->yarn_factor > 0.0f))
        return si_err_set(c->err, SI_ERANGE, "%s.rope.scaling.factor: %g but > 0 required with yarn",
                          c->arch, (double)hp->yarn_factor);
    /* llama.cpp falls back to the training context for n_ctx_orig. */
    rc = get_u32(c, "rope.scaling.original_context_length", false, hp->n_ctx_train,
                 &hp->yarn_orig_ctx);
    if (rc != SI_OK)
        return rc;
    if (hp->yarn_orig_ctx == 0)
        return si_err_set(c->err, SI_ENOTFOUND,
                          "%s.rope.scaling.original_context_length: missing (and no context_length) "
                          "but required with yarn", c->arch);
    return SI_OK;
}

static int read_ffn(const kctx *c, sih_hparams *hp)
{
    int rc;
    if (!hp->moe)
        return get_u32(c, "feed_forward_length", true, 0, &hp->n_ff);
    if ((rc = get_u32(c, "expert_count", true, 0, &hp->n_expert)) != SI_OK ||
        (rc = get_u32(c, "expert_used_count", true, 0, &hp->n_expert_used)) != SI_OK ||
        (rc = get_u32(c, "feed_forward_length", false, 0, &hp->n_ff)) != SI_OK ||
        (rc = get_u32(c, "expert_shared_feed_forward_length", false, 0, &hp->n_ff_shexp)) != SI_OK)
        return rc;
    if (hp->n_expert == 0 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
        return si_err_set(c->err, SI_ERANGE,
                          "%s.expert_used_count %u / expert_count %u: need 1 <= used <= count",
                          c->arch, hp->n_expert_used, hp->n_expert);
    /* llama.cpp: n_ff_exp falls back to n_ff / n_expert_used. */
    uint32_t fallback = hp->n_ff / hp->n_expert_used;
    rc = get_u32(c, "expert_feed_forward_length", fallback == 0, fallback, &hp->n_ff_exp);
    if (rc != SI_OK)
        return rc;
    if (hp->n_ff_exp == 0)
        return si_err_set(c->err, SI_ERANGE, "%s.expert_feed_forward_length: must be > 0", c->arch);
    return SI_OK;
}

/* Values that must agree with each other (spec §1.2, §1.3). */
static int cross_check(const kctx *c, const sih_hparams *hp)
{
    const char *a = c->arch;
    if (hp->n_embd == 0)
        return si_err_set(c->err, SI_ERANGE, "%s.embedding_length: must be > 0", a);
    if (hp->n_full > 0) {
        if (hp->n_head == 0 || hp->head_dim == 0)
            return si_err_set(c->err, SI_ERANGE, "%s.attention.head_count %u / key_length %u: must be > 0",
                              a, hp->n_head, hp->head_dim);
        if (hp->n_head % hp->n_head_kv != 0)
            return si_err_set(c->err, SI_ERANGE,
                              "%s.attention.head_count %u is not a multiple of head_count_kv %u",
                              a, hp->n_head, hp->n_head_kv);
        if (hp->n_rot == 0 || hp->n_rot % 2 != 0 || hp->n_rot > hp->head_dim)
            return si_err_set(c->err, SI_ERANGE,
                              "%s.rope.dimension_count %u: must be even and in [2, key_length %u]",
                              a, hp->n_rot, hp->head_dim);
        if (!(hp->rope_base > 0.0f))
            return si_err_set(c->err, SI_ERANGE, "%s.rope.freq_base %g: must be > 0",
                              a, (double)hp->rope_base);
    }
    if (hp->n_full < hp->n_layer) {
        if (hp->n_k_head == 0 || hp->n_v_head == 0 || hp->d_state == 0)
            return si_err_set(c->err, SI_ERANGE,
                              "%s.ssm.group_count %u / time_step_rank %u / state_size %u: must be > 0",
                              a, hp->n_k_head, hp->n_v_head, hp->d_state);
        if ((uint64_t)hp->d_inner != (uint64_t)hp->n_v_head * hp->d_state)
            return si_err_set(c->err, SI_EFORMAT,
                              "%s.ssm.inner_size %u but time_step_rank %u * state_size %u = %" PRIu64,
                              a, hp->d_inner, hp->n_v_head, hp->d_state,
                              (uint64_t)hp->n_v_head * hp->d_state);
        if (hp->n_v_head % hp->n_k_head != 0)
            return si_err_set(c->err, SI_EFORMAT,
                              "%s.ssm.time_step_rank %u is not a multiple of group_count %u",
                              a, hp->n_v_head, hp->n_k_head);
        if (hp->conv_k < 1 || hp->conv_k > 64)
            return si_err_set(c->err, SI_ERANGE, "%s.ssm.conv_kernel %u: must be in [1, 64]",
                              a, hp->conv_k);
    }
    if (!(hp->eps > 0.0f))
        return si_err_set(c->err, SI_ERANGE, "%s.attention.layer_norm_rms_epsilon %g: must be > 0",
                          a, (double)hp->eps);
    return SI_OK;
}

int sih_hparams_read(const si_host *h, const si_gguf *g, const char *arch, bool moe,
                     sih_hparams *hp, si_err *err)
{
    kctx c = { .h = h, .g = g, .arch = arch, .err = err };
    uint32_t *tmp = NULL;
    int rc;

    memset(hp, 0, sizeof *hp);
    hp->moe = moe;
    if ((rc = get_u32(&c, "block_count", true, 0, &hp->n_block)) != SI_OK ||
        (rc = get_u32(&c, "nextn_predict_layers", false, 0, &hp->n_nextn)) != SI_OK)
        return rc;
    if (hp->n_nextn >= hp->n_block)
        return si_err_set(err, SI_ERANGE,
                          "%s.nextn_predict_layers %u leaves no trunk layer (block_count %u)",
                          arch, hp->n_nextn, hp->n_block);
    hp->n_layer = hp->n_block - hp->n_nextn;

    hp->is_full = calloc(hp->n_layer, 1);
    tmp = calloc(hp->n_layer, sizeof *tmp);
    if (hp->is_full == NULL || tmp == NULL) {
        rc = si_err_set(err, SI_ENOMEM, "%s: out of memory for %u layers", arch, hp->n_layer);
        goto fail;
    }
    if ((rc = get_u32(&c, "embedding_length", true, 0, &hp->n_embd)) != SI_OK ||
        (rc = get_u32(&c, "context_length", false, 0, &hp->n_ctx_train)) != SI_OK ||
        (rc = read_layer_kinds(&c, hp, tmp)) != SI_OK ||
        (rc = read_ffn(&c, hp)) != SI_OK ||
        (rc = get_f32(&c, "attention.layer_norm_rms_epsilon", true, 0.0f, &hp->eps)) != SI_OK)
        goto fail;

    if (hp->n_full > 0) {
        uint32_t vlen;
        if ((rc = get_u32(&c, "attention.head_count", true, 0, &hp->n_head)) != SI_OK ||
            (rc = read_head_count_kv(&c, hp, tmp)) != SI_OK ||
            (rc = get_u32(&c, "attention.key_length", true, 0, &hp->head_dim)) != SI_OK ||
            (rc = get_u32(&c, "attention.value_length", false, hp->head_dim, &vlen)) != SI_OK ||
            (rc = get_u32(&c, "rope.dimension_count", false, hp->head_dim, &hp->n_rot)) != SI_OK ||
            (rc = get_f32(&c, "rope.freq_base", false, 10000.0f, &hp->rope_base)) != SI_OK ||
            (rc = read_rope_scaling(&c, hp)) != SI_OK)
            goto fail;
        if (vlen != hp->head_dim) {
            rc = si_err_set(err, SI_EFORMAT,
                            "%s.attention.value_length %u differs from key_length %u (must be equal)",
                            arch, vlen, hp->head_dim);
            goto fail;
        }
    }
    if (hp->n_full < hp->n_layer) {
        if ((rc = get_u32(&c, "ssm.conv_kernel", true, 0, &hp->conv_k)) != SI_OK ||
            (rc = get_u32(&c, "ssm.state_size", true, 0, &hp->d_state)) != SI_OK ||
            (rc = get_u32(&c, "ssm.group_count", true, 0, &hp->n_k_head)) != SI_OK ||
            (rc = get_u32(&c, "ssm.time_step_rank", true, 0, &hp->n_v_head)) != SI_OK ||
            (rc = get_u32(&c, "ssm.inner_size", true, 0, &hp->d_inner)) != SI_OK)
            goto fail;
    }
    if ((rc = cross_check(&c, hp)) != SI_OK)
        goto fail;
    free(tmp);
    return SI_OK;

fail:
    free(tmp);
    sih_hparams_free(hp);
    return rc;
}

void sih_hparams_free(sih_hparams *hp)
{
    free(hp->is_full);
    hp->is_full = NULL;
}
