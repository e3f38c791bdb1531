/* core/convert/convert.c — output types, GGUF metadata and the streaming
 * tensor writer of the converter; see convert.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "convert.h"
#include "convert_internal.h"
#include "gguf.h"
#include "hf_vocab.h"
#include "quant.h"

/* Elements converted per chunk: a few MB of f32 whatever the tensor size. */
#define CHUNK_ELEMS (1u << 20)

/* ---- modes and types ------------------------------------------------------ */

static const struct { const char *name; uint32_t file_type; } ftypes[SI_CONVERT_FTYPE_COUNT] = {
    [SI_CONVERT_F32]    = { "f32", 0 },    /* LLAMA_FTYPE_ALL_F32        */
    [SI_CONVERT_F16]    = { "f16", 1 },    /* LLAMA_FTYPE_MOSTLY_F16     */
    [SI_CONVERT_BF16]   = { "bf16", 32 },  /* LLAMA_FTYPE_MOSTLY_BF16    */
    [SI_CONVERT_Q8_0]   = { "q8_0", 7 },   /* LLAMA_FTYPE_MOSTLY_Q8_0    */
    [SI_CONVERT_Q4_K_M] = { "q4_k_m", 15 },/* LLAMA_FTYPE_MOSTLY_Q4_K_M  */
};

int si_convert_ftype_from_name(const char *name)
{
    for (int i = 0; name != NULL && i < SI_CONVERT_FTYPE_COUNT; i++)
        if (strcasecmp(name, ftypes[i].name) == 0)
            return i;
    return -1;
}

const char *si_convert_ftype_name(int ftype)
{
    return ftype >= 0 && ftype < SI_CONVERT_FTYPE_COUNT ? ftypes[ftype].name : "?";
}

uint32_t si_convert_ftype_gguf(int ftype)
{
    return ftype >= 0 && ftype < SI_CONVERT_FTYPE_COUNT ? ftypes[ftype].file_type : 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

bool si_convert_use_more_bits(uint32_t i, uint32_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* llama-quantize's Q4_K_M choice before any shape fallback (spec §2.8). */
static uint32_t q4_k_m_rule(const char *name, uint32_t n_layer)
{
    if (strcmp(name, "output.weight") == 0)
        return SI_TYPE_Q6_K;
    unsigned layer;
    if (sscanf(name, "blk.%u.", &layer) != 1)
        return SI_TYPE_Q4_K;   /* token_embd */
    /* attn_v and attn_qkv share one counter; every layer has exactly one
     * of them, so the counter is the layer index.  ffn_down matches
     * ffn_down_exps and ffn_down_shexp too, as in llama.cpp. */
    if (strstr(name, ".attn_v.") != NULL || strstr(name, ".attn_qkv.") != NULL ||
        strstr(name, ".ffn_down") != NULL)
        return si_convert_use_more_bits(layer, n_layer) ? SI_TYPE_Q6_K : SI_TYPE_Q4_K;
    return SI_TYPE_Q4_K;
}

uint32_t si_convert_pick_type(int ftype, const char *name, uint32_t ndim, const int64_t *ne,
                              uint32_t n_layer)
{
    /* Norms, vectors, the conv taps and the routers stay F32 (spec §2.1). */
    if (ndim <= 1 || ends_with(name, "_norm.weight") || strstr(name, "ssm_conv1d") != NULL ||
        ends_with(name, "ffn_gate_inp.weight") || ends_with(name, "ffn_gate_inp_shexp.weight"))
        return SI_TYPE_F32;
    uint32_t t;
    switch (ftype) {
    case SI_CONVERT_F16:    return SI_TYPE_F16;
    case SI_CONVERT_BF16:   return SI_TYPE_BF16;
    case SI_CONVERT_Q8_0:   t = SI_TYPE_Q8_0; break;
    case SI_CONVERT_Q4_K_M: t = q4_k_m_rule(name, n_layer); break;
    default:                return SI_TYPE_F32;
    }
    if ((t == SI_TYPE_Q4_K || t == SI_TYPE_Q6_K) && ne[0] % 256 != 0)
        t = SI_TYPE_Q8_0;
    if (t == SI_TYPE_Q8_0 && ne[0] % 32 != 0)
        t = SI_TYPE_F16;
    return t;
}

/* ---- metadata ---------------------------------------------------------------- */

static int write_arch_keys(si_gguf_writer *w, const char *arch, const si_hf_qwen35 *h)
{
    char k[128];
    int rc = SI_OK;
    /* Keeps the first failure; the writer also remembers its message. */
#define SET(call) do { int r_ = (call); if (rc == SI_OK) rc = r_; } while (0)
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", arch, (s)), k)
    SET(si_gguf_writer_set_u32(w, KEY("block_count"), h->n_layer));
    SET(si_gguf_writer_set_u32(w, KEY("context_length"), h->n_ctx_train));
    SET(si_gguf_writer_set_u32(w, KEY("embedding_length"), h->n_embd));
    if (h->n_ff > 0)
        SET(si_gguf_writer_set_u32(w, KEY("feed_forward_length"), h->n_ff));
    SET(si_gguf_writer_set_u32(w, KEY("attention.head_count"), h->n_head));
    SET(si_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), h->n_head_kv));
    SET(si_gguf_writer_set_u32(w, KEY("attention.key_length"), h->head_dim));
    SET(si_gguf_writer_set_u32(w, KEY("attention.value_length"), h->head_dim));
    SET(si_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), h->rms_eps));
    SET(si_gguf_writer_set_u32(w, KEY("rope.dimension_count"), h->n_rot));
    SET(si_gguf_writer_set_arr(w, KEY("rope.dimension_sections"), SI_GGUF_I32,
                               h->rope_sections, 4));
    SET(si_gguf_writer_set_f32(w, KEY("rope.freq_base"), (float)h->rope_theta));
    if (h->yarn) {
        SET(si_gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn"));
        SET(si_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), h->yarn_factor));
        SET(si_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
                                   h->yarn_orig_ctx));
        if (h->has_beta_fast)
            SET(si_gguf_writer_set_f32(w, KEY("rope.scaling.yarn_beta_fast"), h->yarn_beta_fast));
        if (h->has_beta_slow)
            SET(si_gguf_writer_set_f32(w, KEY("rope.scaling.yarn_beta_slow"), h->yarn_beta_slow));
    }
    if (h->full_interval > 0) {
        SET(si_gguf_writer_set_u32(w, KEY("full_attention_interval"), h->full_interval));
    } else {
        /* No interval describes the pattern: per-layer flags (true = GDN). */
        uint8_t rec[SI_HF_MAX_LAYERS];
        for (uint32_t i = 0; i < h->n_layer; i++)
            rec[i] = !h->is_full[i];
        SET(si_gguf_writer_set_arr(w, KEY("attention.recurrent_layers"), SI_GGUF_BOOL, rec,
                               h->n_layer));
    }
    SET(si_gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), h->conv_kernel));
    SET(si_gguf_writer_set_u32(w, KEY("ssm.state_size"), h->lin_k_dim));
    SET(si_gguf_writer_set_u32(w, KEY("ssm.group_count"), h->lin_k_heads));
    SET(si_gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), h->lin_v_heads));
    SET(si_gguf_writer_set_u32(w, KEY("ssm.inner_size"), h->lin_v_heads * h->lin_v_dim));
    if (h->moe) {
        SET(si_gguf_writer_set_u32(w, KEY("expert_count"), h->n_expert));
        SET(si_gguf_writer_set_u32(w, KEY("expert_used_count"), h->n_expert_used));
        SET(si_gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), h->n_ff_exp));
        SET(si_gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), h->n_ff_shexp));
    }
#undef KEY
#undef SET
    return rc;
}

/* "general.name": the option, else the folder's last component. */
static void model_name(const char *dir, char *out, size_t n)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    size_t m = len - start < n - 1 ? len - start : n - 1;
    memcpy(out, dir + start, m);
    out[m] = '\0';
}

static char *join(const char *dir, const char *name)
{
    size_t ld = strlen(dir), ln = strlen(name);
    char *p = malloc(ld + ln + 2);
    if (p != NULL)
        snprintf(p, ld + ln + 2, "%s%s%s", dir, ld && dir[ld - 1] != '/' ? "/" : "", name);
    return p;
}

static int write_vocab(const si_convert_opts *o, si_gguf_writer *w, uint32_t n_rows,
                       si_convert_stats *st, si_err *err)
{
    char *tj = join(o->hf_dir, "tokenizer.json");
    char *tc = join(o->hf_dir, "tokenizer_config.json");
    if (tj == NULL || tc == NULL) {
        free(tj);
        free(tc);
        return si_err_set(err, SI_ENOMEM, "convert: out of memory");
    }
    si_hf_vocab v;
    int rc = si_hf_vocab_load(tj, access(tc, F_OK) == 0 ? tc : NULL, &v, err);
    if (rc == SI_OK) {
        st->n_vocab_tokenizer = v.n_tokens;
        if (v.n_tokens > n_rows)
            rc = si_err_set(err, SI_EFORMAT, "%s: %" PRIu32 " tokens but the embedding has "
                            "only %" PRIu32 " rows (vocab_size)", tj, v.n_tokens, n_rows);
        else
            rc = si_hf_vocab_pad(&v, n_rows, err);   /* llama.cpp pads to the rows too */
    }
    if (rc == SI_OK)
        rc = si_hf_vocab_write_gguf(&v, w, err);
    si_hf_vocab_free(&v);
    free(tj);
    free(tc);
    return rc;
}

static int write_metadata(const si_convert_opts *o, const cv_plan *p, const char *arch,
                          si_gguf_writer *w, si_convert_stats *st, si_err *err)
{
    char name[256];
    if (o->name != NULL)
        snprintf(name, sizeof name, "%s", o->name);
    else
        model_name(o->hf_dir, name, sizeof name);
    int rc = si_gguf_writer_set_str(w, "general.architecture", arch);
    if (rc == SI_OK)
        rc = si_gguf_writer_set_str(w, "general.name", name);
    if (rc == SI_OK)
        rc = si_gguf_writer_set_u32(w, "general.file_type", si_convert_ftype_gguf(o->ftype));
    if (rc == SI_OK)
        rc = si_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (rc == SI_OK)
        rc = si_gguf_writer_set_u32(w, "general.alignment", SI_GGUF_DEFAULT_ALIGNMENT);
    if (rc != SI_OK || write_arch_keys(w, arch, &p->hp) != SI_OK)
        return si_err_set(err, SI_EIO, "%s: metadata: %s", o->out_path, si_gguf_writer_error(w));
    return write_vocab(o, w, p->n_vocab, st, err);
}

/* ---- tensor data -------------------------------------------------------------- */

/* Converts and writes one tensor in chunks of whole rows. */
static int write_tensor(const cv_plan *p, const cv_tensor *t, si_gguf_writer *w,
                        const char *out_path, si_err *err)
{
    uint64_t ne0 = (uint64_t)t->ne[0], n_rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
    uint64_t per_chunk = ne0 >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / ne0;
    if (per_chunk > n_rows)
        per_chunk = n_rows;
    uint64_t row_bytes = si_type_row_bytes(t->type, (int64_t)ne0);
    float *buf = malloc((size_t)(per_chunk * ne0) * sizeof *buf);          /* [per_chunk][ne0] */
    float *row = t->cols_v ? malloc((size_t)ne0 * sizeof *row) : NULL;    /* [ne0]            */
    void *q = t->type != SI_TYPE_F32 ? malloc((size_t)(per_chunk * row_bytes)) : NULL;
    int rc = SI_OK;
    if (buf == NULL || (t->cols_v && row == NULL) || (t->type != SI_TYPE_F32 && q == NULL))
        rc = si_err_set(err, SI_ENOMEM, "tensor '%s': out of memory for a %" PRIu64
                        "-row chunk", t->name, per_chunk);
    for (uint64_t r0 = 0; rc == SI_OK && r0 < n_rows; r0 += per_chunk) {
        uint64_t nr = n_rows - r0 < per_chunk ? n_rows - r0 : per_chunk;
        for (uint64_t i = 0; rc == SI_OK && i < nr; i++) {
            const si_st_tensor *src;
            uint64_t sr;
            cv_row_source(p, t, r0 + i, &src, &sr);
            float *dst = buf + i * ne0;
            if (si_st_row_len(src) != ne0)   /* the plan's shape checks make this impossible */
                rc = si_err_set(err, SI_EINVAL, "tensor '%s': source '%s' rows have %" PRIu64
                                " elements, expected %" PRIu64 " (internal)", t->name,
                                src->name, si_st_row_len(src), ne0);
            else
                rc = si_st_read_rows(p->st, src, sr, 1, t->cols_v ? row : dst, err);
            if (rc == SI_OK && t->cols_v)
                for (uint64_t c = 0; c < ne0; c++)
                    dst[c] = row[cv_vperm(&p->hp, c, t->col_hs)];
        }
        if (rc != SI_OK)
            break;
        uint64_t n = nr * ne0;
        if (t->elem == CV_ELEM_PLUS1)
            for (uint64_t i = 0; i < n; i++)
                buf[i] = buf[i] + 1.0f;
        else if (t->elem == CV_ELEM_NEG_EXP)
            for (uint64_t i = 0; i < n; i++)
                buf[i] = -expf(buf[i]);
        const void *out = buf;
        if (t->type != SI_TYPE_F32) {
            if ((rc = si_quant(t->type, buf, q, (int64_t)n, err)) != SI_OK) {
                si_err_prefix(err, t->name);
                break;
            }
            out = q;
        }
        if (si_gguf_writer_write(w, out, nr * row_bytes) != SI_OK)
            rc = si_err_set(err, SI_EIO, "%s: tensor '%s': %s", out_path, t->name,
                            si_gguf_writer_error(w));
    }
    free(buf);
    free(row);
    free(q);
    return rc;
}

static bool uses(const cv_tensor *t, const si_st_tensor *src)
{
    if (t->rows != CV_ROWS_PER_EXPERT)
        return t->src == src;
    for (int64_t e = 0; e < t->ne[2]; e++)
        if (t->src_e[e] == src)
            return true;
    return false;
}

/* After tensor i is written its sources' pages are dropped, unless tensor
 * i + 1 reads them too (ffn_up_exps after ffn_gate_exps from gate_up_proj). */
static void release_sources(const cv_plan *p, size_t i)
{
    const cv_tensor *t = &p->t[i], *next = i + 1 < p->n ? &p->t[i + 1] : NULL;
    int64_t n = t->rows == CV_ROWS_PER_EXPERT ? t->ne[2] : 1;
    for (int64_t e = 0; e < n; e++) {
        const si_st_tensor *src = t->rows == CV_ROWS_PER_EXPERT ? t->src_e[e] : t->src;
        if (next == NULL || !uses(next, src))
            si_st_release(p->st, src);
    }
}

/* Source bytes read for t (for progress): its elements at the source's size. */
static uint64_t src_bytes(const cv_tensor *t)
{
    uint64_t n = (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
    return n * (t->src->dtype == SI_ST_F32 ? 4 : 2);
}

static int run(const si_convert_opts *o, const char *part, si_convert_stats *st, si_err *err)
{
    char *cfg_path = join(o->hf_dir, "config.json");
    if (cfg_path == NULL)
        return si_err_set(err, SI_ENOMEM, "convert: out of memory");
    si_hf_qwen35 *hp = malloc(sizeof *hp);
    if (hp == NULL) {
        free(cfg_path);
        return si_err_set(err, SI_ENOMEM, "convert: out of memory");
    }
    int rc = si_hf_qwen35_load(cfg_path, hp, err);
    free(cfg_path);
    si_st_set *set = NULL;
    cv_plan *plan = calloc(1, sizeof *plan);
    si_gguf_writer *w = NULL;
    if (rc == SI_OK && plan == NULL)
        rc = si_err_set(err, SI_ENOMEM, "convert: out of memory");
    if (rc == SI_OK)
        rc = si_st_open_dir(o->hf_dir, &set, err);
    if (rc == SI_OK)
        rc = cv_plan_build(plan, hp, set, err);
    free(hp);
    if (rc != SI_OK)
        goto out;

    const char *arch = plan->hp.moe ? "qwen35moe" : "qwen35";
    snprintf(st->arch, sizeof st->arch, "%s", arch);
    st->n_vocab = plan->n_vocab;
    st->experts_fused = plan->experts_fused;
    uint64_t total_src = 0;
    for (size_t i = 0; i < plan->n; i++) {
        cv_tensor *t = &plan->t[i];
        t->type = si_convert_pick_type(o->ftype, t->name, t->ndim, t->ne, plan->hp.n_layer);
        total_src += src_bytes(t);
    }

    if ((rc = si_gguf_writer_open(part, &w, err)) != SI_OK)
        goto out;
    if ((rc = write_metadata(o, plan, arch, w, st, err)) != SI_OK)
        goto out;
    for (size_t i = 0; i < plan->n; i++) {
        const cv_tensor *t = &plan->t[i];
        if (si_gguf_writer_add_tensor(w, t->name, t->type, t->ndim, t->ne) != SI_OK) {
            rc = si_err_set(err, SI_EIO, "%s: tensor '%s': %s", o->out_path, t->name,
                            si_gguf_writer_error(w));
            goto out;
        }
    }
    uint64_t done_src = 0;
    for (size_t i = 0; i < plan->n; i++) {
        const cv_tensor *t = &plan->t[i];
        if (o->progress != NULL)
            o->progress(o->progress_ud, i, plan->n, t->name, done_src, total_src);
        if ((rc = write_tensor(plan, t, w, o->out_path, err)) != SI_OK)
            goto out;
        uint64_t n_rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
        uint64_t bytes = si_type_row_bytes(t->type, t->ne[0]) * n_rows;
        release_sources(plan, i);
        st->n_tensors++;
        st->n_by_type[t->type]++;
        st->tensor_bytes += bytes;
        done_src += src_bytes(t);
    }
    if (o->progress != NULL)
        o->progress(o->progress_ud, plan->n, plan->n, "", total_src, total_src);
out:
    if (w != NULL) {
        si_err cerr;
        int crc = si_gguf_writer_close(w, &cerr);
        if (rc == SI_OK && crc != SI_OK)
            rc = si_err_set(err, crc, "%s: %s", o->out_path, cerr.msg);
    }
    if (plan != NULL)
        cv_plan_free(plan);
    free(plan);
    si_st_close(set);
    return rc;
}

int si_convert_hf(const si_convert_opts *o, si_convert_stats *stats, si_err *err)
{
    if (o == NULL || o->hf_dir == NULL || o->out_path == NULL)
        return si_err_set(err, SI_EINVAL, "convert: missing input folder or output path");
    if (o->ftype < 0 || o->ftype >= SI_CONVERT_FTYPE_COUNT)
        return si_err_set(err, SI_EINVAL, "convert: unknown output type %d", o->ftype);
    si_convert_stats local;
    si_convert_stats *st = stats != NULL ? stats : &local;
    memset(st, 0, sizeof *st);

    size_t n = strlen(o->out_path) + sizeof ".part";
    char *part = malloc(n);
    if (part == NULL)
        return si_err_set(err, SI_ENOMEM, "convert: out of memory");
    snprintf(part, n, "%s.part", o->out_path);
    int rc = run(o, part, st, err);
    if (rc == SI_OK && rename(part, o->out_path) != 0)
        rc = si_err_set(err, SI_EIO, "%s: cannot rename from %s: %s", o->out_path, part,
                        strerror(errno));
    if (rc != SI_OK)
        unlink(part);   /* never leave a half-written GGUF behind */
    free(part);
    return rc;
}
