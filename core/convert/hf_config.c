/* core/convert/hf_config.c — Qwen3.5 config.json reader; see hf_config.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hf_config.h"

/* Where keys are searched: text_config first, then the top level. */
typedef struct cfg {
    const char  *path;
    const cJSON *text;           /* "text_config" or NULL */
    const cJSON *top;
    const cJSON *rope_params;    /* "rope_parameters" (transformers 5.x) or NULL */
    const cJSON *rope_scaling;   /* "rope_scaling" (older form) or NULL          */
    si_err      *err;
} cfg;

static const cJSON *nonnull(const cJSON *v)
{
    return v == NULL || cJSON_IsNull(v) ? NULL : v;
}

static const cJSON *get(const cfg *c, const char *key)
{
    const cJSON *v = NULL;
    if (c->text != NULL)
        v = nonnull(cJSON_GetObjectItemCaseSensitive(c->text, key));
    if (v == NULL)
        v = nonnull(cJSON_GetObjectItemCaseSensitive(c->top, key));
    return v;
}

/* A RoPE key: rope_parameters, then rope_scaling, then the plain key. */
static const cJSON *get_rope(const cfg *c, const char *key)
{
    const cJSON *v = NULL;
    if (c->rope_params != NULL)
        v = nonnull(cJSON_GetObjectItemCaseSensitive(c->rope_params, key));
    if (v == NULL && c->rope_scaling != NULL)
        v = nonnull(cJSON_GetObjectItemCaseSensitive(c->rope_scaling, key));
    if (v == NULL)
        v = get(c, key);
    return v;
}

/* Whole number in [lo, hi]; `required` false leaves *out unchanged when the
 * key is absent. */
static int get_u32(const cfg *c, const char *key, bool required, uint32_t lo, uint32_t hi,
                   uint32_t *out)
{
    const cJSON *v = get(c, key);
    if (v == NULL) {
        if (!required)
            return SI_OK;
        return si_err_set(c->err, SI_ENOTFOUND, "%s: missing required key \"%s\" (looked in "
                          "text_config and at the top level)", c->path, key);
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return si_err_set(c->err, SI_EFORMAT, "%s: \"%s\" must be an integer in [%" PRIu32
                          ", %" PRIu32 "]", c->path, key, lo, hi);
    *out = (uint32_t)d;
    return SI_OK;
}

static int num_of(const cfg *c, const char *key, const cJSON *v, double *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return si_err_set(c->err, SI_EFORMAT, "%s: \"%s\" is not a finite number", c->path, key);
    *out = v->valuedouble;
    return SI_OK;
}

/* ---- layer pattern ------------------------------------------------------- */

static void derive_interval(si_hf_qwen35 *h)
{
    h->full_interval = 0;
    for (uint32_t n = 1; n <= h->n_layer; n++) {
        bool ok = true;
        for (uint32_t il = 0; il < h->n_layer && ok; il++)
            ok = h->is_full[il] == ((il + 1) % n == 0);
        if (ok) {
            h->full_interval = n;
            return;
        }
    }
}

static int load_layer_types(const cfg *c, si_hf_qwen35 *h)
{
    const cJSON *lt = get(c, "layer_types");
    if (lt != NULL) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)h->n_layer)
            return si_err_set(c->err, SI_EFORMAT, "%s: \"layer_types\" must be an array of "
                              "num_hidden_layers (%" PRIu32 ") strings", c->path, h->n_layer);
        const cJSON *it;
        uint32_t il = 0;
        cJSON_ArrayForEach(it, lt) {
            const char *s = cJSON_IsString(it) ? it->valuestring : "";
            if (strcmp(s, "full_attention") == 0)
                h->is_full[il] = true;
            else if (strcmp(s, "linear_attention") == 0)
                h->is_full[il] = false;
            else
                return si_err_set(c->err, SI_EFORMAT, "%s: layer_types[%" PRIu32 "] is not "
                                  "\"full_attention\" or \"linear_attention\"", c->path, il);
            il++;
        }
    } else {
        /* transformers derives layer_types from this interval (default 4). */
        uint32_t n = 4;
        int rc = get_u32(c, "full_attention_interval", false, 1, SI_HF_MAX_LAYERS, &n);
        if (rc != SI_OK)
            return rc;
        for (uint32_t il = 0; il < h->n_layer; il++)
            h->is_full[il] = (il + 1) % n == 0;
    }
    derive_interval(h);
    return SI_OK;
}

/* ---- RoPE ------------------------------------------------------------------ */

static int load_rope(const cfg *c, si_hf_qwen35 *h)
{
    const cJSON *v = get_rope(c, "rope_theta");
    if (v == NULL)
        return si_err_set(c->err, SI_ENOTFOUND, "%s: missing required key \"rope_theta\" "
                          "(looked in rope_parameters, rope_scaling, text_config and the top "
                          "level)", c->path);
    int rc = num_of(c, "rope_theta", v, &h->rope_theta);
    if (rc != SI_OK)
        return rc;
    if (!(h->rope_theta > 1.0))
        return si_err_set(c->err, SI_ERANGE, "%s: rope_theta %g must be > 1", c->path,
                          h->rope_theta);

    double prf = 0.25;   /* llama.cpp's default when the key is absent */
    if ((v = get_rope(c, "partial_rotary_factor")) != NULL &&
        (rc = num_of(c, "partial_rotary_factor", v, &prf)) != SI_OK)
        return rc;
    double rot = prf * h->head_dim;
    h->partial_rotary = (float)prf;
    h->n_rot = (uint32_t)llround(rot);
    if (!(prf > 0 && prf <= 1) || fabs(rot - h->n_rot) > 1e-6 || h->n_rot % 2 != 0)
        return si_err_set(c->err, SI_ERANGE, "%s: head_dim %" PRIu32 " x partial_rotary_factor"
                          " %g = %g rotary dims; need an even whole number in [2, head_dim]",
                          c->path, h->head_dim, prf, rot);

    memset(h->rope_sections, 0, sizeof h->rope_sections);
    const cJSON *ms = get_rope(c, "mrope_section");
    if (ms != NULL) {
        int n = cJSON_IsArray(ms) ? cJSON_GetArraySize(ms) : -1;
        if (n < 1 || n > 4)
            return si_err_set(c->err, SI_EFORMAT, "%s: \"mrope_section\" must be an array of "
                              "1 to 4 integers", c->path);
        const cJSON *it;
        int i = 0;
        long sum = 0;
        cJSON_ArrayForEach(it, ms) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 65536 ||
                it->valuedouble != floor(it->valuedouble))
                return si_err_set(c->err, SI_EFORMAT, "%s: mrope_section[%d] is not a "
                                  "non-negative integer", c->path, i);
            h->rope_sections[i++] = (int32_t)it->valuedouble;
            sum += (long)it->valuedouble;
        }
        if (sum * 2 > (long)h->n_rot)
            return si_err_set(c->err, SI_ERANGE, "%s: mrope_section sums to %ld pairs but "
                              "only %" PRIu32 " rotary dims exist", c->path, sum, h->n_rot);
    } else {
        /* Text-only positions: every section sees the same position, so a
         * single section over all rotary pairs is the same function. */
        h->rope_sections[0] = (int32_t)(h->n_rot / 2);
    }

    /* Scaling type: rope_parameters.rope_type, rope_scaling.{rope_type,type}. */
    const char *type = NULL;
    const cJSON *src[2] = { c->rope_params, c->rope_scaling };
    for (int k = 0; k < 2 && type == NULL; k++) {
        if (src[k] == NULL)
            continue;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(src[k], "rope_type");
        if (!cJSON_IsString(t))
            t = cJSON_GetObjectItemCaseSensitive(src[k], "type");
        if (cJSON_IsString(t))
            type = t->valuestring;
    }
    if (type == NULL || strcmp(type, "default") == 0)
        return SI_OK;
    if (strcmp(type, "yarn") != 0)
        return si_err_set(c->err, SI_EUNSUPPORTED, "%s: RoPE scaling type \"%s\" is not "
                          "supported (default and yarn only)", c->path, type);
    h->yarn = true;
    double d;
    if ((v = get_rope(c, "factor")) == NULL)
        return si_err_set(c->err, SI_ENOTFOUND, "%s: yarn RoPE scaling without \"factor\"",
                          c->path);
    if ((rc = num_of(c, "factor", v, &d)) != SI_OK)
        return rc;
    if (!(d >= 1.0))
        return si_err_set(c->err, SI_ERANGE, "%s: yarn factor %g must be >= 1", c->path, d);
    h->yarn_factor = (float)d;
    h->yarn_orig_ctx = h->n_ctx_train;   /* transformers' fallback */
    if ((v = get_rope(c, "original_max_position_embeddings")) != NULL) {
        if ((rc = num_of(c, "original_max_position_embeddings", v, &d)) != SI_OK)
            return rc;
        if (!(d >= 1 && d <= 4294967295.0) || d != floor(d))
            return si_err_set(c->err, SI_ERANGE, "%s: original_max_position_embeddings "
                              "must be a positive integer", c->path);
        h->yarn_orig_ctx = (uint32_t)d;
    }
    if ((v = get_rope(c, "beta_fast")) != NULL) {
        if ((rc = num_of(c, "beta_fast", v, &d)) != SI_OK)
            return rc;
        h->has_beta_fast = true;
        h->yarn_beta_fast = (float)d;
    }
    if ((v = get_rope(c, "beta_slow")) != NULL) {
        if ((rc = num_of(c, "beta_slow", v, &d)) != SI_OK)
            return rc;
        h->has_beta_slow = true;
        h->yarn_beta_slow = (float)d;
    }
    /* A custom attention factor would change the magnitude scaling; the
     * GGUF keys llama.cpp reads for qwen35 cannot express it faithfully. */
    if (get_rope(c, "attention_factor") != NULL || get_rope(c, "mscale") != NULL)
        return si_err_set(c->err, SI_EUNSUPPORTED, "%s: yarn with a custom attention_factor"
                          " / mscale is not supported", c->path);
    return SI_OK;
}

/* ---- architecture ------------------------------------------------------------ */

static int load_arch(const cfg *c, si_hf_qwen35 *h)
{
    static const struct { const char *name; bool moe; } known[] = {
        { "Qwen3_5ForCausalLM", false },           { "Qwen3_5ForConditionalGeneration", false },
        { "Qwen3_5MoeForCausalLM", true },         { "Qwen3_5MoeForConditionalGeneration", true },
        { "qwen3_5", false },     { "qwen3_5_text", false },
        { "qwen3_5_moe", true },  { "qwen3_5_moe_text", true },
    };
    const char *name = NULL;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c->top, "architectures");
    if (cJSON_IsArray(archs) && cJSON_GetArraySize(archs) > 0) {
        if (!cJSON_IsString(archs->child))
            return si_err_set(c->err, SI_EFORMAT, "%s: \"architectures\"[0] is not a string",
                              c->path);
        name = archs->child->valuestring;
    } else {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c->top, "model_type");
        if (!cJSON_IsString(mt))
            return si_err_set(c->err, SI_ENOTFOUND, "%s: neither \"architectures\" nor "
                              "\"model_type\" says which model this is", c->path);
        name = mt->valuestring;
    }
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(name, known[i].name) == 0) {
            snprintf(h->arch_class, sizeof h->arch_class, "%s", name);
            h->moe = known[i].moe;
            return SI_OK;
        }
    }
    return si_err_set(c->err, SI_EUNSUPPORTED, "%s: model class \"%s\" is not supported "
                      "(Qwen3_5[Moe]ForCausalLM / Qwen3_5[Moe]ForConditionalGeneration)",
                      c->path, name);
}

static int load_moe(const cfg *c, si_hf_qwen35 *h)
{
    int rc;
    if ((rc = get_u32(c, "num_experts", true, 1, 1u << 16, &h->n_expert)) != SI_OK ||
        (rc = get_u32(c, "num_experts_per_tok", true, 1, 1u << 16, &h->n_expert_used)) != SI_OK ||
        (rc = get_u32(c, "moe_intermediate_size", true, 1, 1u << 24, &h->n_ff_exp)) != SI_OK ||
        (rc = get_u32(c, "shared_expert_intermediate_size", true, 1, 1u << 24,
                      &h->n_ff_shexp)) != SI_OK)
        return rc;
    if (h->n_expert_used > h->n_expert)
        return si_err_set(c->err, SI_ERANGE, "%s: num_experts_per_tok %" PRIu32 " > "
                          "num_experts %" PRIu32, c->path, h->n_expert_used, h->n_expert);
    /* Qwen2-MoE style dense layers inside an MoE model: not this family. */
    const cJSON *mlp_only = get(c, "mlp_only_layers");
    if (cJSON_IsArray(mlp_only) && cJSON_GetArraySize(mlp_only) > 0)
        return si_err_set(c->err, SI_EUNSUPPORTED, "%s: \"mlp_only_layers\" is not empty; "
                          "dense layers inside an MoE model are not supported", c->path);
    uint32_t step = 1;
    if ((rc = get_u32(c, "decoder_sparse_step", false, 0, 1u << 16, &step)) != SI_OK)
        return rc;
    if (step > 1)
        return si_err_set(c->err, SI_EUNSUPPORTED, "%s: decoder_sparse_step %" PRIu32
                          " (only every layer MoE is supported)", c->path, step);
    return SI_OK;
}

static int load(const cfg *c, si_hf_qwen35 *h)
{
    int rc;
    if ((rc = load_arch(c, h)) != SI_OK)
        return rc;
    if ((rc = get_u32(c, "hidden_size", true, 1, 1u << 20, &h->n_embd)) != SI_OK ||
        (rc = get_u32(c, "num_hidden_layers", true, 1, SI_HF_MAX_LAYERS, &h->n_layer)) != SI_OK ||
        (rc = get_u32(c, "num_attention_heads", true, 1, 1u << 12, &h->n_head)) != SI_OK ||
        (rc = get_u32(c, "num_key_value_heads", true, 1, 1u << 12, &h->n_head_kv)) != SI_OK ||
        (rc = get_u32(c, "vocab_size", true, 1, 1u << 24, &h->n_vocab)) != SI_OK ||
        (rc = get_u32(c, "max_position_embeddings", true, 1, UINT32_MAX, &h->n_ctx_train))
            != SI_OK ||
        (rc = get_u32(c, "linear_conv_kernel_dim", true, 1, 64, &h->conv_kernel)) != SI_OK ||
        (rc = get_u32(c, "linear_num_key_heads", true, 1, 1u << 12, &h->lin_k_heads)) != SI_OK ||
        (rc = get_u32(c, "linear_num_value_heads", true, 1, 1u << 12, &h->lin_v_heads)) != SI_OK ||
        (rc = get_u32(c, "linear_key_head_dim", true, 1, 1u << 14, &h->lin_k_dim)) != SI_OK ||
        (rc = get_u32(c, "linear_value_head_dim", true, 1, 1u << 14, &h->lin_v_dim)) != SI_OK)
        return rc;
    h->head_dim = h->n_embd / h->n_head;   /* llama.cpp's fallback */
    if ((rc = get_u32(c, "head_dim", false, 1, 1u << 14, &h->head_dim)) != SI_OK ||
        (rc = get_u32(c, "intermediate_size", !h->moe, 1, 1u << 24, &h->n_ff)) != SI_OK)
        return rc;
    if (h->head_dim == 0)
        return si_err_set(c->err, SI_ERANGE, "%s: head_dim is 0", c->path);
    if (h->n_head % h->n_head_kv != 0)
        return si_err_set(c->err, SI_ERANGE, "%s: num_attention_heads %" PRIu32 " is not a "
                          "multiple of num_key_value_heads %" PRIu32, c->path, h->n_head,
                          h->n_head_kv);
    if (h->lin_v_heads % h->lin_k_heads != 0)
        return si_err_set(c->err, SI_ERANGE, "%s: linear_num_value_heads %" PRIu32 " is not "
                          "a multiple of linear_num_key_heads %" PRIu32, c->path,
                          h->lin_v_heads, h->lin_k_heads);

    h->rms_eps = 1e-6f;
    const cJSON *v = get(c, "rms_norm_eps");
    double d;
    if (v != NULL) {
        if ((rc = num_of(c, "rms_norm_eps", v, &d)) != SI_OK)
            return rc;
        if (!(d > 0 && d < 1))
            return si_err_set(c->err, SI_ERANGE, "%s: rms_norm_eps %g outside (0, 1)",
                              c->path, d);
        h->rms_eps = (float)d;
    }
    h->tie_embeddings = -1;
    if ((v = get(c, "tie_word_embeddings")) != NULL) {
        if (!cJSON_IsBool(v))
            return si_err_set(c->err, SI_EFORMAT, "%s: \"tie_word_embeddings\" is not a "
                              "boolean", c->path);
        h->tie_embeddings = cJSON_IsTrue(v) ? 1 : 0;
    }
    if (cJSON_IsTrue(get(c, "attention_bias")))
        return si_err_set(c->err, SI_EUNSUPPORTED, "%s: attention_bias = true is not part of "
                          "the Qwen3.5 architecture this converter knows", c->path);
    if ((rc = load_layer_types(c, h)) != SI_OK || (rc = load_rope(c, h)) != SI_OK)
        return rc;
    return h->moe ? load_moe(c, h) : SI_OK;
}

int si_hf_qwen35_load(const char *path, si_hf_qwen35 *out, si_err *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return si_err_set(err, errno == ENOENT ? SI_ENOTFOUND : SI_EIO, "%s: cannot open: %s",
                          path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc = SI_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= (16u << 20)) {
                rc = si_err_set(err, SI_EFORMAT, "%s: larger than 16 MiB", path);
                break;
            }
            cap = cap ? 2 * cap : 16384;
            char *n = realloc(text, cap + 1);
            if (n == NULL) {
                rc = si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
                break;
            }
            text = n;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (rc == SI_OK && ferror(f))
        rc = si_err_set(err, SI_EIO, "%s: read error", path);
    fclose(f);
    if (rc != SI_OK) {
        free(text);
        return rc;
    }
    text[len] = '\0';
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return si_err_set(err, SI_EFORMAT, "%s: not a JSON object", path);
    }
    cfg c = { .path = path, .top = root, .err = err };
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (cJSON_IsObject(tc))
        c.text = tc;
    const cJSON *rp = get(&c, "rope_parameters");
    const cJSON *rs = get(&c, "rope_scaling");
    c.rope_params = cJSON_IsObject(rp) ? rp : NULL;
    /* transformers 5.x may key rope_parameters by layer type; the rotary
     * layers here are the full-attention ones. */
    const cJSON *rpf = c.rope_params != NULL
        ? cJSON_GetObjectItemCaseSensitive(c.rope_params, "full_attention") : NULL;
    if (cJSON_IsObject(rpf))
        c.rope_params = rpf;
    c.rope_scaling = cJSON_IsObject(rs) ? rs : NULL;
    rc = load(&c, out);
    cJSON_Delete(root);
    return rc;
}
