/* core/cli/cmd_info.c — `sparkinfer info FILE.gguf [--json]`: header facts,
 * the key hyper-parameters, every metadata key (arrays summarised), the
 * tensor table and totals by type.  --json prints the same as one document.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "gguf.h"
#include "quant.h"

#define CMD "info"
#define ARR_HEAD_STR 3     /* array elements shown: strings */
#define ARR_HEAD_NUM 8     /* numbers */
#define TEXT_STR_MAX 96    /* text mode shortens longer strings */

static const char *const vtype_names[SI_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

static const char *vtype_name(uint32_t t)
{
    return t < SI_GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

static uint64_t arr_head(const si_gguf_value *v)
{
    uint64_t k = v->v.arr.type == SI_GGUF_STRING ? ARR_HEAD_STR : ARR_HEAD_NUM;
    return v->v.arr.n < k ? v->v.arr.n : k;
}

/* Shortest decimal text that reads back as the same float ("1e-06", not
 * "9.99999997e-07"): f32 values are stored widened to double. */
static void float_text(char *buf, size_t n, float f)
{
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f)
            return;
    }
}

static double value_double(const si_gguf_value *v)
{
    if (v->type == SI_GGUF_F32) {
        char buf[32];
        float_text(buf, sizeof buf, (float)v->v.f);
        return strtod(buf, NULL);
    }
    return v->v.f;
}

/* ---- text ----------------------------------------------------------------------- */

static void print_str(FILE *f, si_str s, uint64_t max)
{
    uint64_t n = s.len < max ? s.len : max;
    fputc('"', f);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
    if (n < s.len)
        fprintf(f, "... (%" PRIu64 " bytes)", s.len);
}

static void print_scalar(FILE *f, const si_gguf_value *v, uint64_t str_max)
{
    switch (v->type) {
    case SI_GGUF_U8: case SI_GGUF_U16: case SI_GGUF_U32: case SI_GGUF_U64:
        fprintf(f, "%" PRIu64, v->v.u);
        break;
    case SI_GGUF_I8: case SI_GGUF_I16: case SI_GGUF_I32: case SI_GGUF_I64:
        fprintf(f, "%" PRId64, v->v.i);
        break;
    case SI_GGUF_F32: {
        char buf[32];
        float_text(buf, sizeof buf, (float)v->v.f);
        fputs(buf, f);
        break;
    }
    case SI_GGUF_F64:
        fprintf(f, "%.17g", v->v.f);
        break;
    case SI_GGUF_BOOL:
        fputs(v->v.u ? "true" : "false", f);
        break;
    case SI_GGUF_STRING:
        print_str(f, v->v.s, str_max);
        break;
    default:
        fputs("?", f);
    }
}

static void print_value(FILE *f, const si_gguf_value *v)
{
    if (v->type != SI_GGUF_ARRAY) {
        print_scalar(f, v, TEXT_STR_MAX);
        return;
    }
    fprintf(f, "[%s x %" PRIu64 "]", vtype_name(v->v.arr.type), v->v.arr.n);
    uint64_t k = arr_head(v);
    for (uint64_t i = 0; i < k; i++) {
        si_gguf_value e;
        fputs(i ? ", " : " ", f);
        if (si_gguf_arr_get(v, i, &e) != SI_OK)
            fputs("?", f);
        else if (e.type == SI_GGUF_ARRAY)
            fprintf(f, "[%s x %" PRIu64 "]", vtype_name(e.v.arr.type), e.v.arr.n);
        else
            print_scalar(f, &e, 32);
    }
    if (k < v->v.arr.n)
        fputs(", ...", f);
}

static void format_shape(char *buf, size_t n, const si_tensor_info *t)
{
    int k = snprintf(buf, n, "[");
    for (uint32_t d = 0; d < t->ndim && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, "]");
}

/* ---- hyper-parameters -------------------------------------------------------------- */

/* One "<arch>.<suffix>" value, or NULL. */
static const si_gguf_value *arch_key(const si_gguf *g, const char *arch, const char *suffix)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return si_gguf_get(g, key);
}

static bool arch_u64(const si_gguf *g, const char *arch, const char *suffix, uint64_t *out)
{
    const si_gguf_value *v = arch_key(g, arch, suffix);
    if (v == NULL)
        return false;
    switch (v->type) {
    case SI_GGUF_U8: case SI_GGUF_U16: case SI_GGUF_U32: case SI_GGUF_U64: case SI_GGUF_BOOL:
        *out = v->v.u;
        return true;
    case SI_GGUF_I8: case SI_GGUF_I16: case SI_GGUF_I32: case SI_GGUF_I64:
        if (v->v.i < 0)
            return false;
        *out = (uint64_t)v->v.i;
        return true;
    default:
        return false;
    }
}

/* Whether layer il is a full-attention layer: the explicit
 * attention.recurrent_layers flags when present, else the interval rule. */
static bool layer_is_full(const si_gguf *g, const char *arch, uint64_t il)
{
    const si_gguf_value *rl = arch_key(g, arch, "attention.recurrent_layers");
    si_gguf_value e;
    if (rl != NULL && rl->type == SI_GGUF_ARRAY && il < rl->v.arr.n &&
        si_gguf_arr_get(rl, il, &e) == SI_OK)
        return e.type == SI_GGUF_I8 || e.type == SI_GGUF_I16 || e.type == SI_GGUF_I32 ||
               e.type == SI_GGUF_I64 ? e.v.i == 0 : e.v.u == 0;
    uint64_t k = 4;
    if (!arch_u64(g, arch, "full_attention_interval", &k) || k == 0)
        k = 4;
    return (il + 1) % k == 0;
}

typedef struct hparam {
    const char *json;      /* key in the JSON "hparams" object */
    const char *label;     /* text label */
    const char *suffix;    /* <arch>.<suffix>, or NULL for derived values */
} hparam;

/* The §1.2 keys worth a line of their own, in reading order. */
static const hparam qwen_hparams[] = {
    { "n_embd",          "embedding length (H)",         "embedding_length" },
    { "block_count",     "block_count",                  "block_count" },
    { "nextn_predict_layers", "MTP layers",              "nextn_predict_layers" },
    { "n_head",          "attention heads",              "attention.head_count" },
    { "n_head_kv",       "KV heads",                     "attention.head_count_kv" },
    { "head_dim_k",      "head dim (key)",               "attention.key_length" },
    { "head_dim_v",      "head dim (value)",             "attention.value_length" },
    { "ssm_group_count", "GDN key heads (Hk)",           "ssm.group_count" },
    { "ssm_time_step_rank", "GDN value heads (Hv)",      "ssm.time_step_rank" },
    { "ssm_state_size",  "GDN state size (dk = dv)",     "ssm.state_size" },
    { "ssm_conv_kernel", "GDN conv kernel",              "ssm.conv_kernel" },
    { "ssm_inner_size",  "GDN inner size (Hv dv)",       "ssm.inner_size" },
    { "rope_dim",        "rope dims",                    "rope.dimension_count" },
    { "rope_base",       "rope base",                    "rope.freq_base" },
    { "rope_sections",   "rope sections",                "rope.dimension_sections" },
    { "n_ff",            "dense FFN",                    "feed_forward_length" },
    { "n_expert",        "experts",                      "expert_count" },
    { "n_expert_used",   "experts used",                 "expert_used_count" },
    { "n_ff_exp",        "expert FFN",                   "expert_feed_forward_length" },
    { "n_ff_shexp",      "shared expert FFN",            "expert_shared_feed_forward_length" },
    { "context_length",  "context length",               "context_length" },
    { "rms_eps",         "RMS norm eps",                 "attention.layer_norm_rms_epsilon" },
};

static bool is_qwen_hybrid(const char *arch)
{
    return strcmp(arch, "qwen35") == 0 || strcmp(arch, "qwen35moe") == 0 ||
           strcmp(arch, "qwen3next") == 0;
}

/* Trunk layers = block_count - nextn_predict_layers (MTP blocks excluded). */
static uint64_t trunk_layers(const si_gguf *g, const char *arch)
{
    uint64_t n = 0, nextn = 0;
    arch_u64(g, arch, "block_count", &n);
    arch_u64(g, arch, "nextn_predict_layers", &nextn);
    return nextn < n ? n - nextn : 0;
}

static int64_t vocab_rows(const si_gguf *g)
{
    const si_tensor_info *t = si_gguf_tensor(g, "token_embd.weight");
    if (t != NULL && t->ndim >= 2)
        return t->ne[1];
    const si_gguf_value *tok = si_gguf_get(g, "tokenizer.ggml.tokens");
    return tok != NULL && tok->type == SI_GGUF_ARRAY ? (int64_t)tok->v.arr.n : -1;
}

static void print_hparams_text(const si_gguf *g, const char *arch)
{
    printf("hyper-parameters:\n");
    if (!is_qwen_hybrid(arch)) {
        /* Generic architectures: every <arch>.* key as it is. */
        size_t n = strlen(arch);
        for (uint64_t i = 0; i < si_gguf_n_kv(g); i++) {
            const char *k = si_gguf_kv_key(g, i);
            if (strncmp(k, arch, n) != 0 || k[n] != '.')
                continue;
            printf("  %-34s ", k + n + 1);
            print_value(stdout, si_gguf_kv_value(g, i));
            printf("\n");
        }
        int64_t rows = vocab_rows(g);
        if (rows >= 0)
            printf("  %-34s %" PRId64 "\n", "vocab rows", rows);
        return;
    }
    for (size_t i = 0; i < sizeof qwen_hparams / sizeof qwen_hparams[0]; i++) {
        const si_gguf_value *v = arch_key(g, arch, qwen_hparams[i].suffix);
        if (v == NULL)
            continue;
        printf("  %-34s ", qwen_hparams[i].label);
        print_value(stdout, v);
        printf("\n");
    }
    uint64_t L = trunk_layers(g, arch), n_full = 0;
    printf("  %-34s %" PRIu64 "\n", "layers (block_count - nextn)", L);
    printf("  %-34s ", "full-attention layers");
    for (uint64_t il = 0; il < L; il++)
        n_full += layer_is_full(g, arch, il);
    printf("%" PRIu64 ":", n_full);
    uint64_t shown = 0;
    for (uint64_t il = 0; il < L; il++) {
        if (!layer_is_full(g, arch, il))
            continue;
        if (shown++ == 16) {
            printf(" ...");
            break;
        }
        printf(" %" PRIu64, il);
    }
    printf("\n  %-34s %" PRIu64 "\n", "GDN (linear-attention) layers", L - n_full);
    int64_t rows = vocab_rows(g);
    if (rows >= 0)
        printf("  %-34s %" PRId64 "\n", "vocab rows", rows);
}

/* ---- text report ---------------------------------------------------------------- */

static const char *arch_of(const si_gguf *g, char *buf, size_t n)
{
    const si_gguf_value *a = si_gguf_get(g, "general.architecture");
    if (a == NULL || a->type != SI_GGUF_STRING)
        return NULL;
    snprintf(buf, n, "%.*s", (int)(a->v.s.len < n ? a->v.s.len : n - 1), a->v.s.ptr);
    return buf;
}

static void print_text(const si_gguf *g)
{
    char archbuf[64];
    const char *arch = arch_of(g, archbuf, sizeof archbuf);
    printf("file:         %s\n", si_gguf_path(g));
    printf("format:       GGUF v%" PRIu32 ", alignment %" PRIu32 ", data offset %" PRIu64
           ", file size %" PRIu64 " bytes\n", si_gguf_version(g), si_gguf_alignment(g),
           si_gguf_data_offset(g), si_gguf_file_size(g));
    printf("architecture: %s\n", arch != NULL ? arch : "(none)");
    if (arch != NULL)
        print_hparams_text(g, arch);

    uint64_t nkv = si_gguf_n_kv(g);
    printf("metadata: %" PRIu64 " keys\n", nkv);
    for (uint64_t i = 0; i < nkv; i++) {
        const si_gguf_value *v = si_gguf_kv_value(g, i);
        printf("  %-44s %-6s ", si_gguf_kv_key(g, i), vtype_name(v->type));
        print_value(stdout, v);
        printf("\n");
    }

    uint64_t nt = si_gguf_n_tensors(g), total = 0;
    uint64_t count[SI_TYPE_COUNT] = { 0 }, bytes[SI_TYPE_COUNT] = { 0 };
    printf("tensors: %" PRIu64 "\n", nt);
    if (nt > 0)
        printf("  %5s  %-40s %-7s %-24s %14s %14s\n", "#", "name", "type", "shape", "bytes",
               "offset");
    for (uint64_t i = 0; i < nt; i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        char shape[128];
        format_shape(shape, sizeof shape, t);
        const char *tn = si_type_name(t->type);
        printf("  %5" PRIu64 "  %-40s %-7s %-24s %14" PRIu64 " %14" PRIu64 "\n", i, t->name,
               tn != NULL ? tn : "?", shape, t->nbytes, t->offset);
        if (t->type < SI_TYPE_COUNT) {
            count[t->type]++;
            bytes[t->type] += t->nbytes;
        }
        total += t->nbytes;
    }
    printf("totals by type:\n");
    for (uint32_t ty = 0; ty < SI_TYPE_COUNT; ty++)
        if (count[ty])
            printf("  %-7s %6" PRIu64 " tensors %16" PRIu64 " bytes\n", si_type_name(ty),
                   count[ty], bytes[ty]);
    printf("total: %" PRIu64 " tensors, %" PRIu64 " bytes of tensor data (%.2f MiB), "
           "file %" PRIu64 " bytes\n", nt, total, (double)total / (1024.0 * 1024.0),
           si_gguf_file_size(g));
}

/* ---- JSON ------------------------------------------------------------------------- */

static cJSON *json_u64(uint64_t u)
{
    if (u <= (1ull << 53))
        return cJSON_CreateNumber((double)u);
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, u);
    return cJSON_CreateString(buf);
}

static cJSON *json_i64(int64_t i)
{
    if (i <= (1ll << 53) && i >= -(1ll << 53))
        return cJSON_CreateNumber((double)i);
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, i);
    return cJSON_CreateString(buf);
}

static cJSON *json_str(si_str s)
{
    char *tmp = malloc(s.len + 1);
    if (tmp == NULL)
        return NULL;
    memcpy(tmp, s.ptr, s.len);
    tmp[s.len] = '\0';
    cJSON *j = cJSON_CreateString(tmp);
    free(tmp);
    return j;
}

static cJSON *json_scalar(const si_gguf_value *v)
{
    switch (v->type) {
    case SI_GGUF_U8: case SI_GGUF_U16: case SI_GGUF_U32: case SI_GGUF_U64:
        return json_u64(v->v.u);
    case SI_GGUF_I8: case SI_GGUF_I16: case SI_GGUF_I32: case SI_GGUF_I64:
        return json_i64(v->v.i);
    case SI_GGUF_F32: case SI_GGUF_F64:
        return isfinite(v->v.f) ? cJSON_CreateNumber(value_double(v)) : cJSON_CreateNull();
    case SI_GGUF_BOOL:
        return cJSON_CreateBool(v->v.u != 0);
    case SI_GGUF_STRING:
        return json_str(v->v.s);
    default:
        return cJSON_CreateNull();
    }
}

/* Arrays: {"type":"array","elem_type":T,"count":N,"head":[first few]}. */
static cJSON *json_value(const si_gguf_value *v)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "type", vtype_name(v->type));
    if (v->type != SI_GGUF_ARRAY) {
        cJSON_AddItemToObject(o, "value", json_scalar(v));
        return o;
    }
    cJSON_AddStringToObject(o, "elem_type", vtype_name(v->v.arr.type));
    cJSON_AddItemToObject(o, "count", json_u64(v->v.arr.n));
    cJSON *head = cJSON_AddArrayToObject(o, "head");
    uint64_t k = arr_head(v);
    for (uint64_t i = 0; head != NULL && i < k; i++) {
        si_gguf_value e;
        if (si_gguf_arr_get(v, i, &e) != SI_OK)
            cJSON_AddItemToArray(head, cJSON_CreateNull());
        else if (e.type == SI_GGUF_ARRAY)
            cJSON_AddItemToArray(head, json_value(&e));
        else
            cJSON_AddItemToArray(head, json_scalar(&e));
    }
    cJSON_AddBoolToObject(o, "truncated", k < v->v.arr.n);
    return o;
}

/* hparams: the plain value; short numeric arrays (rope sections, per-layer
 * head counts of small models) as a plain list, others as the summary. */
static cJSON *json_plain(const si_gguf_value *v)
{
    if (v->type != SI_GGUF_ARRAY)
        return json_scalar(v);
    if (v->v.arr.type == SI_GGUF_STRING || v->v.arr.type == SI_GGUF_ARRAY ||
        v->v.arr.n > ARR_HEAD_NUM)
        return json_value(v);
    cJSON *a = cJSON_CreateArray();
    for (uint64_t i = 0; a != NULL && i < v->v.arr.n; i++) {
        si_gguf_value e;
        cJSON_AddItemToArray(a, si_gguf_arr_get(v, i, &e) == SI_OK ? json_scalar(&e)
                                                                  : cJSON_CreateNull());
    }
    return a;
}

static cJSON *json_hparams(const si_gguf *g, const char *arch)
{
    cJSON *h = cJSON_CreateObject();
    if (h == NULL)
        return NULL;
    if (!is_qwen_hybrid(arch)) {
        size_t n = strlen(arch);
        for (uint64_t i = 0; i < si_gguf_n_kv(g); i++) {
            const char *k = si_gguf_kv_key(g, i);
            if (strncmp(k, arch, n) == 0 && k[n] == '.')
                cJSON_AddItemToObject(h, k + n + 1, json_plain(si_gguf_kv_value(g, i)));
        }
    } else {
        for (size_t i = 0; i < sizeof qwen_hparams / sizeof qwen_hparams[0]; i++) {
            const si_gguf_value *v = arch_key(g, arch, qwen_hparams[i].suffix);
            if (v != NULL)
                cJSON_AddItemToObject(h, qwen_hparams[i].json, json_plain(v));
        }
        uint64_t L = trunk_layers(g, arch);
        cJSON_AddItemToObject(h, "n_layer", json_u64(L));
        cJSON *full = cJSON_AddArrayToObject(h, "full_attention_layers");
        for (uint64_t il = 0; full != NULL && il < L; il++)
            if (layer_is_full(g, arch, il))
                cJSON_AddItemToArray(full, json_u64(il));
    }
    int64_t rows = vocab_rows(g);
    if (rows >= 0)
        cJSON_AddItemToObject(h, "vocab_rows", json_i64(rows));
    return h;
}

static int print_json(const si_gguf *g)
{
    cJSON *root = cJSON_CreateObject();
    if (root == NULL)
        return -1;
    char archbuf[64];
    const char *arch = arch_of(g, archbuf, sizeof archbuf);
    cJSON_AddStringToObject(root, "file", si_gguf_path(g));
    cJSON_AddItemToObject(root, "version", json_u64(si_gguf_version(g)));
    cJSON_AddItemToObject(root, "alignment", json_u64(si_gguf_alignment(g)));
    cJSON_AddItemToObject(root, "data_offset", json_u64(si_gguf_data_offset(g)));
    cJSON_AddItemToObject(root, "file_size", json_u64(si_gguf_file_size(g)));
    if (arch != NULL) {
        cJSON_AddStringToObject(root, "architecture", arch);
        cJSON_AddItemToObject(root, "hparams", json_hparams(g, arch));
    } else {
        cJSON_AddNullToObject(root, "architecture");
    }

    cJSON_AddItemToObject(root, "n_kv", json_u64(si_gguf_n_kv(g)));
    cJSON *md = cJSON_AddObjectToObject(root, "metadata");
    for (uint64_t i = 0; md != NULL && i < si_gguf_n_kv(g); i++)
        cJSON_AddItemToObject(md, si_gguf_kv_key(g, i), json_value(si_gguf_kv_value(g, i)));

    uint64_t nt = si_gguf_n_tensors(g), total = 0;
    uint64_t count[SI_TYPE_COUNT] = { 0 }, bytes[SI_TYPE_COUNT] = { 0 };
    cJSON_AddItemToObject(root, "n_tensors", json_u64(nt));
    cJSON *ts = cJSON_AddArrayToObject(root, "tensors");
    for (uint64_t i = 0; ts != NULL && i < nt; i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        cJSON *o = cJSON_CreateObject();
        if (o == NULL)
            break;
        const char *tn = si_type_name(t->type);
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "type", tn != NULL ? tn : "?");
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (uint32_t d = 0; shape != NULL && d < t->ndim; d++)
            cJSON_AddItemToArray(shape, json_i64(t->ne[d]));
        cJSON_AddItemToObject(o, "bytes", json_u64(t->nbytes));
        cJSON_AddItemToObject(o, "offset", json_u64(t->offset));
        cJSON_AddItemToArray(ts, o);
        if (t->type < SI_TYPE_COUNT) {
            count[t->type]++;
            bytes[t->type] += t->nbytes;
        }
        total += t->nbytes;
    }
    cJSON *tot = cJSON_AddObjectToObject(root, "totals_by_type");
    for (uint32_t ty = 0; tot != NULL && ty < SI_TYPE_COUNT; ty++) {
        if (!count[ty])
            continue;
        cJSON *o = cJSON_AddObjectToObject(tot, si_type_name(ty));
        cJSON_AddItemToObject(o, "count", json_u64(count[ty]));
        cJSON_AddItemToObject(o, "bytes", json_u64(bytes[ty]));
    }
    cJSON_AddItemToObject(root, "total_bytes", json_u64(total));

    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (text == NULL)
        return -1;
    fputs(text, stdout);
    fputc('\n', stdout);
    cJSON_free(text);
    return 0;
}

/* ---- command ---------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: sparkinfer info FILE.gguf [--json]\n\n"
               "Prints a GGUF file's format facts, key hyper-parameters, every metadata key\n"
               "(arrays summarised), the tensor table and totals by type.\n"
               "  --json  one JSON document with the same content\n");
}

int si_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return SI_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            si_cli_error(CMD, "unknown option '%s'", argv[i]);
            usage(stderr);
            return SI_EXIT_USAGE;
        } else if (path != NULL) {
            si_cli_error(CMD, "one file at a time ('%s' and '%s')", path, argv[i]);
            return SI_EXIT_USAGE;
        } else {
            path = argv[i];
        }
    }
    if (path == NULL) {
        si_cli_error(CMD, "no file given");
        usage(stderr);
        return SI_EXIT_USAGE;
    }

    si_gguf *g = NULL;
    si_err err = { { 0 } };
    if (si_gguf_open(path, &g, &err) != SI_OK) {
        /* the reader names the file; make sure of it */
        if (strstr(err.msg, path) == NULL)
            si_err_prefix(&err, path);
        si_cli_error(CMD, "%s", err.msg);
        return SI_EXIT_FAIL;
    }
    int rc = 0;
    if (json)
        rc = print_json(g);
    else
        print_text(g);
    si_gguf_close(g);
    if (rc != 0 || fflush(stdout) != 0) {
        si_cli_error(CMD, "%s: cannot write the report", path);
        return SI_EXIT_FAIL;
    }
    return SI_EXIT_OK;
}
