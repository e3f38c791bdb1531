/* tests/convert/synth_hf.c — synthetic Hugging Face checkpoints; see synth_hf.h. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/safetensors.h"
#include "quant.h"
#include "synth_hf.h"

/* ---- a growing string ------------------------------------------------------- */

typedef struct sb {
    char  *s;
    size_t len, cap;
    bool   oom;
} sb;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_printf(sb *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s != NULL && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *ns = realloc(b->s, cap);
        if (ns == NULL) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
}

static bool write_text(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static bool mkdir_p(const char *dir)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return false;
            *p = '/';
        }
    }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

/* ---- values ------------------------------------------------------------------- */

float synth_value(const char *name, uint64_t i)
{
    uint64_t h = 1469598103934665603ull;            /* FNV-1a of the name */
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    uint64_t z = h + (i + 1) * 0x9E3779B97F4A7C15ull;   /* splitmix64 step */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((int)(z % 255) - 127) / 64.0f;
}

bool synth_is_full(const synth_cfg *c, int il)
{
    static const bool regular[S_L] = { false, true, false, true };
    static const bool irregular[S_L] = { false, true, true, false };
    return c->irregular ? irregular[il] : regular[il];
}

/* ---- tensor list ----------------------------------------------------------------- */

enum vkind { V_PLAIN, V_EXP_GATE, V_EXP_UP, V_EXP_DOWN };

typedef struct stensor {
    char     name[160];      /* as written                               */
    char     vname[160];     /* name the values are keyed on             */
    int      vkind, expert;
    int      ndim;
    int64_t  shape[3];
    uint64_t n;
    const char *dtype;
    uint32_t esize;
} stensor;

typedef struct slist {
    stensor t[256];
    int     n;
    const synth_cfg *c;
    const char *prefix;
} slist;

static const char *dtype_name(int dtype)
{
    return dtype == SI_ST_F16 ? "F16" : dtype == SI_ST_BF16 ? "BF16" : "F32";
}

/* Adds `rel` (name without the model prefix, or with it when global). */
static void add(slist *l, bool prefixed, const char *rel, int ndim, int64_t a, int64_t b,
                int64_t c3)
{
    const synth_cfg *c = l->c;
    if (c->drop_tensor != NULL && strcmp(c->drop_tensor, rel) == 0)
        return;
    stensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s%s", prefixed ? l->prefix : "", rel);
    snprintf(t->vname, sizeof t->vname, "%s", rel);
    t->ndim = ndim;
    t->shape[0] = a, t->shape[1] = b, t->shape[2] = c3;
    t->dtype = dtype_name(c->dtype);
    t->esize = c->dtype == SI_ST_F32 ? 4 : 2;
    if (c->bad_shape != NULL && strcmp(c->bad_shape, rel) == 0) {
        t->ndim = 2, t->shape[0] = 3, t->shape[1] = 5;
    }
    if (c->bad_dtype != NULL && strcmp(c->bad_dtype, rel) == 0)
        t->dtype = "I64", t->esize = 8;
    t->n = 1;
    for (int i = 0; i < t->ndim; i++)
        t->n *= (uint64_t)t->shape[i];
}

static void add_layer(slist *l, int il)
{
    const synth_cfg *c = l->c;
    char n[160];
#define L(fmt) (snprintf(n, sizeof n, "layers.%d." fmt, il), n)
    add(l, true, L("input_layernorm.weight"), 1, S_H, 0, 0);
    add(l, true, L("post_attention_layernorm.weight"), 1, S_H, 0, 0);
    if (synth_is_full(c, il)) {
        add(l, true, L("self_attn.q_proj.weight"), 2, 2 * S_NH * S_HD, S_H, 0);
        add(l, true, L("self_attn.k_proj.weight"), 2, S_NKV * S_HD, S_H, 0);
        add(l, true, L("self_attn.v_proj.weight"), 2, S_NKV * S_HD, S_H, 0);
        add(l, true, L("self_attn.o_proj.weight"), 2, S_H, S_NH * S_HD, 0);
        add(l, true, L("self_attn.q_norm.weight"), 1, S_HD, 0, 0);
        add(l, true, L("self_attn.k_norm.weight"), 1, S_HD, 0, 0);
    } else {
        add(l, true, L("linear_attn.in_proj_qkv.weight"), 2, S_CDIM, S_H, 0);
        add(l, true, L("linear_attn.in_proj_z.weight"), 2, S_HV * S_DV, S_H, 0);
        add(l, true, L("linear_attn.in_proj_b.weight"), 2, S_HV, S_H, 0);
        add(l, true, L("linear_attn.in_proj_a.weight"), 2, S_HV, S_H, 0);
        add(l, true, L("linear_attn.conv1d.weight"), 3, S_CDIM, 1, S_CONV);
        add(l, true, L("linear_attn.dt_bias"), 1, S_HV, 0, 0);
        add(l, true, L("linear_attn.A_log"), 1, S_HV, 0, 0);
        add(l, true, L("linear_attn.norm.weight"), 1, S_DV, 0, 0);
        add(l, true, L("linear_attn.out_proj.weight"), 2, S_H, S_HV * S_DV, 0);
    }
    if (!c->moe) {
        add(l, true, L("mlp.gate_proj.weight"), 2, S_F, S_H, 0);
        add(l, true, L("mlp.up_proj.weight"), 2, S_F, S_H, 0);
        add(l, true, L("mlp.down_proj.weight"), 2, S_H, S_F, 0);
        return;
    }
    add(l, true, L("mlp.gate.weight"), 2, S_E, S_H, 0);
    if (c->experts == SYNTH_FUSED) {
        add(l, true, L("mlp.experts.gate_up_proj"), 3, S_E, 2 * S_FE, S_H);
        add(l, true, L("mlp.experts.down_proj"), 3, S_E, S_H, S_FE);
    } else {
        /* Same values as the fused form, keyed on the fused names. */
        char gu[160], dn[160];
        snprintf(gu, sizeof gu, "layers.%d.mlp.experts.gate_up_proj", il);
        snprintf(dn, sizeof dn, "layers.%d.mlp.experts.down_proj", il);
        static const char *const proj[3] = { "gate_proj", "up_proj", "down_proj" };
        for (int e = 0; e < S_E; e++) {
            for (int k = 0; k < 3; k++) {
                char rel[160];
                snprintf(rel, sizeof rel, "layers.%d.mlp.experts.%d.%s.weight", il, e, proj[k]);
                int before = l->n;
                if (k < 2)
                    add(l, true, rel, 2, S_FE, S_H, 0);
                else
                    add(l, true, rel, 2, S_H, S_FE, 0);
                if (l->n == before)
                    continue;
                stensor *t = &l->t[l->n - 1];
                snprintf(t->vname, sizeof t->vname, "%s", k < 2 ? gu : dn);
                t->vkind = k == 0 ? V_EXP_GATE : k == 1 ? V_EXP_UP : V_EXP_DOWN;
                t->expert = e;
            }
        }
    }
    add(l, true, L("mlp.shared_expert_gate.weight"), 2, 1, S_H, 0);
    add(l, true, L("mlp.shared_expert.gate_proj.weight"), 2, S_FS, S_H, 0);
    add(l, true, L("mlp.shared_expert.up_proj.weight"), 2, S_FS, S_H, 0);
    add(l, true, L("mlp.shared_expert.down_proj.weight"), 2, S_H, S_FS, 0);
#undef L
}

static void build_list(slist *l, const synth_cfg *c)
{
    l->n = 0;
    l->c = c;
    l->prefix = c->cond_gen ? "model.language_model." : "model.";
    add(l, true, "embed_tokens.weight", 2, S_V, S_H, 0);
    for (int il = 0; il < S_L; il++)
        add_layer(l, il);
    add(l, true, "norm.weight", 1, S_H, 0, 0);
    if (!c->tie)
        add(l, false, "lm_head.weight", 2, S_V, S_H, 0);
    if (c->cond_gen) {
        add(l, false, "model.visual.blocks.0.attn.qkv.weight", 2, 8, 8, 0);
        add(l, false, "mtp.fc.weight", 2, 8, 8, 0);
    }
    if (c->extra_tensor != NULL)
        add(l, true, c->extra_tensor, 2, 2, 2, 0);
}

static float value_of(const stensor *t, uint64_t i)
{
    uint64_t row, col;
    switch (t->vkind) {
    case V_EXP_GATE:   /* [FE, H] of expert e = gate_up_proj[e, i, :] */
        row = i / S_H, col = i % S_H;
        return synth_value(t->vname, ((uint64_t)t->expert * 2 * S_FE + row) * S_H + col);
    case V_EXP_UP:
        row = i / S_H, col = i % S_H;
        return synth_value(t->vname, ((uint64_t)t->expert * 2 * S_FE + S_FE + row) * S_H + col);
    case V_EXP_DOWN:   /* [H, FE] of expert e = down_proj[e, :, :] */
        return synth_value(t->vname, (uint64_t)t->expert * S_H * S_FE + i);
    default:
        return synth_value(t->vname, i);
    }
}

/* ---- safetensors files -------------------------------------------------------------- */

static void put_elem(uint8_t *p, const stensor *t, float v)
{
    if (t->esize == 8) {               /* I64: any bytes will do */
        int64_t x = (int64_t)(v * 64);
        for (int b = 0; b < 8; b++)
            p[b] = (uint8_t)((uint64_t)x >> (8 * b));
    } else if (t->esize == 4) {
        uint32_t u;
        memcpy(&u, &v, 4);
        for (int b = 0; b < 4; b++)
            p[b] = (uint8_t)(u >> (8 * b));
    } else {
        uint16_t h = strcmp(t->dtype, "F16") == 0 ? si_f32_to_fp16(v) : si_f32_to_bf16(v);
        p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
    }
}

/* Writes the tensors t[k] with k % n_files == which. */
static bool write_st(const char *path, const slist *l, int which, int n_files)
{
    sb h = { 0 };
    sb_printf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int k = 0; k < l->n; k++) {
        if (k % n_files != which)
            continue;
        const stensor *t = &l->t[k];
        sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, t->dtype);
        for (int d = 0; d < t->ndim; d++)
            sb_printf(&h, "%s%" PRId64, d ? "," : "", t->shape[d]);
        uint64_t nb = t->n * t->esize;
        sb_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + nb);
        off += nb;
    }
    sb_printf(&h, "}");
    while (!h.oom && h.len % 8 != 0)   /* the format pads the header with spaces */
        sb_printf(&h, " ");
    if (h.oom) {
        free(h.s);
        return false;
    }
    FILE *f = fopen(path, "wb");
    bool ok = f != NULL;
    uint8_t len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (uint8_t)((uint64_t)h.len >> (8 * b));
    ok = ok && fwrite(len8, 1, 8, f) == 8 && fwrite(h.s, 1, h.len, f) == h.len;
    for (int k = 0; ok && k < l->n; k++) {
        if (k % n_files != which)
            continue;
        const stensor *t = &l->t[k];
        uint8_t *buf = malloc(t->n * t->esize);
        ok = buf != NULL;
        for (uint64_t i = 0; ok && i < t->n; i++)
            put_elem(buf + i * t->esize, t, value_of(t, i));
        ok = ok && fwrite(buf, t->esize, t->n, f) == t->n;
        free(buf);
    }
    if (f != NULL && fclose(f) != 0)
        ok = false;
    free(h.s);
    return ok;
}

static bool write_index(const char *dir, const slist *l)
{
    sb s = { 0 };
    sb_printf(&s, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
    for (int k = 0; k < l->n; k++)
        sb_printf(&s, "%s\"%s\":\"model-%05d-of-00002.safetensors\"", k ? "," : "",
                  l->t[k].name, k % 2 + 1);
    sb_printf(&s, "}}\n");
    bool ok = !s.oom && write_text(dir, "model.safetensors.index.json", s.s);
    free(s.s);
    return ok;
}

/* ---- config and tokenizer ------------------------------------------------------------- */

static void key(sb *b, const synth_cfg *c, bool *first, const char *k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static void key(sb *b, const synth_cfg *c, bool *first, const char *k, const char *fmt, ...)
{
    if (c->drop_key != NULL && strcmp(c->drop_key, k) == 0)
        return;
    char val[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof val, fmt, ap);
    va_end(ap);
    sb_printf(b, "%s\n  \"%s\": %s", *first ? "" : ",", k, val);
    *first = false;
}

static void text_keys(sb *b, const synth_cfg *c, bool *first)
{
    key(b, c, first, "model_type", "\"%s\"", c->moe ? "qwen3_5_moe_text" : "qwen3_5_text");
    key(b, c, first, "hidden_size", "%d", S_H);
    key(b, c, first, "num_hidden_layers", "%d", S_L);
    if (!c->moe)
        key(b, c, first, "intermediate_size", "%d", S_F);
    key(b, c, first, "num_attention_heads", "%d", S_NH);
    key(b, c, first, "num_key_value_heads", "%d", S_NKV);
    key(b, c, first, "head_dim", "%d", S_HD);
    key(b, c, first, "rms_norm_eps", "1e-06");
    key(b, c, first, "vocab_size", "%d", S_V);
    key(b, c, first, "max_position_embeddings", "4096");
    key(b, c, first, "tie_word_embeddings", "%s", c->tie ? "true" : "false");
    key(b, c, first, "hidden_act", "\"silu\"");
    key(b, c, first, "attention_bias", "false");
    sb rp = { 0 };
    bool rf = true;
    key(&rp, c, &rf, "rope_type", "\"%s\"", c->yarn ? "yarn" : "default");
    key(&rp, c, &rf, "rope_theta", "10000000.0");
    key(&rp, c, &rf, "partial_rotary_factor", "0.25");
    key(&rp, c, &rf, "mrope_section", "[1, 1, 0]");
    key(&rp, c, &rf, "mrope_interleaved", "true");
    if (c->yarn) {
        key(&rp, c, &rf, "factor", "4.0");
        key(&rp, c, &rf, "original_max_position_embeddings", "1024");
    }
    key(b, c, first, "rope_parameters", "{%s}", rp.s != NULL ? rp.s : "");
    free(rp.s);
    sb lt = { 0 };
    for (int il = 0; il < S_L; il++)
        sb_printf(&lt, "%s\"%s\"", il ? ", " : "",
                  synth_is_full(c, il) ? "full_attention" : "linear_attention");
    key(b, c, first, "layer_types", "[%s]", lt.s);
    free(lt.s);
    key(b, c, first, "linear_conv_kernel_dim", "%d", S_CONV);
    key(b, c, first, "linear_key_head_dim", "%d", S_DK);
    key(b, c, first, "linear_value_head_dim", "%d", S_DV);
    key(b, c, first, "linear_num_key_heads", "%d", S_HK);
    key(b, c, first, "linear_num_value_heads", "%d", S_HV);
    if (c->moe) {
        key(b, c, first, "num_experts", "%d", S_E);
        key(b, c, first, "num_experts_per_tok", "%d", S_TOPK);
        key(b, c, first, "moe_intermediate_size", "%d", S_FE);
        key(b, c, first, "shared_expert_intermediate_size", "%d", S_FS);
    }
}

static bool write_config(const char *dir, const synth_cfg *c)
{
    sb b = { 0 };
    bool first = true;
    const char *cls = c->moe ? (c->cond_gen ? "Qwen3_5MoeForConditionalGeneration"
                                            : "Qwen3_5MoeForCausalLM")
                             : (c->cond_gen ? "Qwen3_5ForConditionalGeneration"
                                            : "Qwen3_5ForCausalLM");
    sb_printf(&b, "{");
    key(&b, c, &first, "architectures", "[\"%s\"]", cls);
    if (c->cond_gen) {
        sb t = { 0 };
        bool tf = true;
        text_keys(&t, c, &tf);
        key(&b, c, &first, "model_type", "\"%s\"", c->moe ? "qwen3_5_moe" : "qwen3_5");
        key(&b, c, &first, "tie_word_embeddings", "%s", c->tie ? "true" : "false");
        sb_printf(&b, ",\n  \"text_config\": {%s}", t.s);
        sb_printf(&b, ",\n  \"vision_config\": {\"depth\": 1, \"hidden_size\": 8}");
        free(t.s);
    } else {
        text_keys(&b, c, &first);
    }
    sb_printf(&b, "\n}\n");
    bool ok = !b.oom && write_text(dir, "config.json", b.s);
    free(b.s);
    return ok;
}

/* A tiny BPE tokenizer.json: tokens "t0".."t259", 4 merges, 4 added tokens
 * (ids 260..263), the Qwen3.5 Split regex. */
static bool write_tokenizer(const char *dir)
{
    sb b = { 0 };
    sb_printf(&b, "{\"version\":\"1.0\",\"added_tokens\":["
              "{\"id\":260,\"content\":\"<|endoftext|>\",\"special\":true},"
              "{\"id\":261,\"content\":\"<|im_start|>\",\"special\":true},"
              "{\"id\":262,\"content\":\"<|im_end|>\",\"special\":true},"
              "{\"id\":263,\"content\":\"<think>\",\"special\":false}],"
              "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
              "\"pattern\":{\"Regex\":\"(?i:'s|'t)|"
              "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|"
              "\\\\p{N}\"},\"behavior\":\"Isolated\"}]},"
              "\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int i = 0; i < 260; i++)
        sb_printf(&b, "%s\"t%d\":%d", i ? "," : "", i, i);
    sb_printf(&b, "},\"merges\":[\"t1 t2\",\"t3 t4\",\"t5 t6\",\"t7 t8\"]}}\n");
    bool ok = !b.oom && write_text(dir, "tokenizer.json", b.s);
    free(b.s);
    ok = ok && write_text(dir, "tokenizer_config.json",
                          "{\"add_bos_token\": false, \"bos_token\": null,\n"
                          " \"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\",\n"
                          " \"chat_template\": "
                          "\"{% for m in messages %}{{ m.content }}{% endfor %}\"}\n");
    return ok;
}

bool synth_write(const char *dir, const synth_cfg *c)
{
    if (!mkdir_p(dir))
        return false;
    slist *l = malloc(sizeof *l);
    if (l == NULL)
        return false;
    build_list(l, c);
    bool ok = write_config(dir, c) && write_tokenizer(dir);
    char path[1024];
    if (ok && c->shards >= 2) {
        for (int k = 0; ok && k < 2; k++) {
            snprintf(path, sizeof path, "%s/model-%05d-of-00002.safetensors", dir, k + 1);
            ok = write_st(path, l, k, 2);
        }
        ok = ok && write_index(dir, l);
    } else if (ok) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ok = write_st(path, l, 0, 1);
    }
    free(l);
    return ok;
}

bool synth_write_single(const char *path, const char *name, const char *dtype,
                        const char *shape_json, uint64_t data_bytes, const char *raw_header)
{
    sb h = { 0 };
    if (raw_header != NULL)
        sb_printf(&h, "%s", raw_header);
    else
        sb_printf(&h, "{\"%s\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[0,%" PRIu64
                  "]}}", name, dtype, shape_json, data_bytes);
    if (h.oom)
        return false;
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        free(h.s);
        return false;
    }
    uint8_t len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (uint8_t)((uint64_t)h.len >> (8 * b));
    bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(h.s, 1, h.len, f) == h.len;
    for (uint64_t i = 0; ok && i < data_bytes; i++)
        ok = fputc(0, f) != EOF;
    ok = fclose(f) == 0 && ok;
    free(h.s);
    return ok;
}

/* Removes a tree made by the test (no symlinks are followed). */
void synth_rm_rf(const char *p)
{
    struct stat st;
    if (lstat(p, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", p, de->d_name);
            synth_rm_rf(sub);
        }
        if (d != NULL)
            closedir(d);
    }
    remove(p);
}
