/* models/common/weights.c — validation and upload of the trunk weights.
 *
 * Two passes.  The first checks EVERY tensor the trunk needs (presence,
 * exact shape from the hyper-parameters per spec §2.2-§2.7, F32 where the
 * spec demands it, a type id the host knows) without moving a byte; the
 * second uploads.  A bad file therefore fails in milliseconds with one
 * precise message, before gigabytes move.  Whether the backend runs each
 * weight's type is asked after upload (sih_plan_validate), on the real,
 * possibly repacked tensors: a supports() query on a tensor with no memory
 * behind it is not something the ABI promises a backend can answer.
 * Tensors of MTP blocks (blk.L and up) and any tensor the trunk does not
 * use are ignored.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hybrid.h"

/* The role of a tensor.  Only W_F32 constrains the type here; the other
 * roles take any type and name what the backend will be asked to do. */
enum wcls {
    W_MAT,   /* matrix fed to MATMUL                                    */
    W_EXP,   /* 3-D expert stack [in, out, E] fed to MOE                */
    W_EMB,   /* token embedding: GET_ROWS and, when tied, MATMUL        */
    W_F32,   /* norm / ssm vector / conv taps: must be F32              */
};

typedef struct vctx {
    si_model      *m;
    const si_gguf *g;
    sih_weight    *list;
    size_t         n, cap;
    char           role[96];     /* what needs the tensor, for messages */
    si_err        *err;
} vctx;

static void fmt_shape(char *out, size_t n, uint32_t ndim, const int64_t *ne)
{
    size_t o = 0;
    o += (size_t)snprintf(out + o, n - o, "[");
    for (uint32_t d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(out + o, n - o, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (o < n)
        snprintf(out + o, n - o, "]");
}

/* Looks up `name`, checks it against the expected shape (trailing 1s are
 * ignored, as GGUF may store [H] as [H, 1]) and class, and queues it for
 * upload into *dst.  `why` explains the expected dims in hparam terms.
 * Absent + optional: returns SI_ENOTFOUND without touching err. */
#if defined(__GNUC__)
__attribute__((format(printf, 8, 9)))
#endif
static int want(vctx *v, const char *name, bool optional, int cls, si_tensor *dst,
                uint32_t ndim, const int64_t *exp, const char *why, ...)
{
    const si_host *h = v->m->host;
    const si_tensor_info *ti = h->gguf_tensor(v->g, name);
    if (ti == NULL) {
        if (optional)
            return SI_ENOTFOUND;
        return si_err_set(v->err, SI_ENOTFOUND, "%s: tensor missing (required by %s)", name, v->role);
    }

    int64_t e[SI_MAX_DIMS] = { 1, 1, 1, 1 }, s[SI_MAX_DIMS] = { 1, 1, 1, 1 };
    for (uint32_t d = 0; d < ndim; d++)
        e[d] = exp[d];
    for (uint32_t d = 0; d < ti->ndim && d < SI_MAX_DIMS; d++)
        s[d] = ti->ne[d];
    if (memcmp(e, s, sizeof e) != 0) {
        char got[96], wanted[96], expl[200];
        va_list ap;
        va_start(ap, why);
        vsnprintf(expl, sizeof expl, why, ap);
        va_end(ap);
        fmt_shape(got, sizeof got, ti->ndim, ti->ne);
        fmt_shape(wanted, sizeof wanted, ndim, exp);
        return si_err_set(v->err, SI_EFORMAT, "%s: shape %s but %s expected (%s)",
                          name, got, wanted, expl);
    }

    char tn[32];
    if (cls == W_F32) {
        if (ti->type != SI_TYPE_F32)
            return si_err_set(v->err, SI_EFORMAT, "%s: type %s but f32 required",
                              name, sih_type_str(h, ti->type, tn, sizeof tn));
    } else if (h->type_block_bytes(ti->type) == 0) {
        /* Whether the backend multiplies this type is asked after upload
         * (sih_plan_validate), with the real, possibly repacked tensor. */
        return si_err_set(v->err, SI_EUNSUPPORTED, "%s: %s unknown to this build",
                          name, sih_type_str(h, ti->type, tn, sizeof tn));
    }

    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        sih_weight *p = realloc(v->list, cap * sizeof *p);
        if (p == NULL)
            return si_err_set(v->err, SI_ENOMEM, "out of memory validating tensors");
        v->list = p;
        v->cap = cap;
    }
    v->list[v->n].ti = ti;
    v->list[v->n].dst = dst;
    v->n++;
    return SI_OK;
}

#define NE(...) ((const int64_t[]){ __VA_ARGS__ })
/* "<prefix><suffix>" in the caller's buffer n (prefix p = "blk.N."). */
#define T(suffix) (snprintf(n, sizeof n, "%s" suffix, p), n)

static int check_attention(vctx *v, const char *p, sih_layer *ly)
{
    const sih_hparams *hp = &v->m->hp;
    int64_t H = hp->n_embd, hd = hp->head_dim;
    int64_t q = (int64_t)hp->n_head * hd, kv = (int64_t)hp->n_head_kv * hd;
    char n[96];
    int rc;
    if ((rc = want(v, T("attn_q.weight"), false, W_MAT, &ly->wq, 2, NE(H, 2 * q),
                   "embedding_length %" PRId64 ", 2 * head_count %u * key_length %u",
                   H, hp->n_head, hp->head_dim)) != SI_OK ||
        (rc = want(v, T("attn_k.weight"), false, W_MAT, &ly->wk, 2, NE(H, kv),
                   "embedding_length %" PRId64 ", head_count_kv %u * key_length %u",
                   H, hp->n_head_kv, hp->head_dim)) != SI_OK ||
        (rc = want(v, T("attn_v.weight"), false, W_MAT, &ly->wv, 2, NE(H, kv),
                   "embedding_length %" PRId64 ", head_count_kv %u * value_length %u",
                   H, hp->n_head_kv, hp->head_dim)) != SI_OK ||
        (rc = want(v, T("attn_output.weight"), false, W_MAT, &ly->wo, 2, NE(q, H),
                   "head_count %u * value_length %u, embedding_length %" PRId64,
                   hp->n_head, hp->head_dim, H)) != SI_OK ||
        (rc = want(v, T("attn_q_norm.weight"), false, W_F32, &ly->q_norm, 1, NE(hd),
                   "key_length %u", hp->head_dim)) != SI_OK ||
        (rc = want(v, T("attn_k_norm.weight"), false, W_F32, &ly->k_norm, 1, NE(hd),
                   "key_length %u", hp->head_dim)) != SI_OK)
        return rc;
    return SI_OK;
}

static int check_gdn(vctx *v, const char *p, sih_layer *ly)
{
    const sih_hparams *hp = &v->m->hp;
    int64_t H = hp->n_embd, Hv = hp->n_v_head, dv = hp->d_state;
    int64_t vd = hp->d_inner, cd = sih_conv_dim(hp);
    char n[96];
    int rc;
    if ((rc = want(v, T("attn_qkv.weight"), false, W_MAT, &ly->wqkv, 2, NE(H, cd),
                   "embedding_length %" PRId64 ", 2 * group_count %u * state_size %u + inner_size %u",
                   H, hp->n_k_head, hp->d_state, hp->d_inner)) != SI_OK ||
        (rc = want(v, T("attn_gate.weight"), false, W_MAT, &ly->wgate, 2, NE(H, vd),
                   "embedding_length %" PRId64 ", inner_size %u", H, hp->d_inner)) != SI_OK ||
        (rc = want(v, T("ssm_beta.weight"), false, W_MAT, &ly->wbeta, 2, NE(H, Hv),
                   "embedding_length %" PRId64 ", time_step_rank %u", H, hp->n_v_head)) != SI_OK ||
        (rc = want(v, T("ssm_alpha.weight"), false, W_MAT, &ly->walpha, 2, NE(H, Hv),
                   "embedding_length %" PRId64 ", time_step_rank %u", H, hp->n_v_head)) != SI_OK ||
        (rc = want(v, T("ssm_conv1d.weight"), false, W_F32, &ly->conv, 2, NE(hp->conv_k, cd),
                   "conv_kernel %u, 2 * group_count %u * state_size %u + inner_size %u",
                   hp->conv_k, hp->n_k_head, hp->d_state, hp->d_inner)) != SI_OK ||
        (rc = want(v, T("ssm_a"), false, W_F32, &ly->ssm_a, 1, NE(Hv),
                   "time_step_rank %u", hp->n_v_head)) != SI_OK)
        return rc;
    /* llama.cpp names the dt bias "ssm_dt.bias"; Ollama exports "ssm_dt". */
    rc = want(v, T("ssm_dt.bias"), true, W_F32, &ly->ssm_dt, 1, NE(Hv),
              "time_step_rank %u", hp->n_v_head);
    if (rc == SI_ENOTFOUND) {
        rc = want(v, T("ssm_dt"), true, W_F32, &ly->ssm_dt, 1, NE(Hv),
                  "time_step_rank %u", hp->n_v_head);
        if (rc == SI_ENOTFOUND)
            return si_err_set(v->err, SI_ENOTFOUND, "%sssm_dt.bias: tensor missing (nor %sssm_dt; "
                              "required by %s)", p, p, v->role);
    }
    if (rc != SI_OK ||
        (rc = want(v, T("ssm_norm.weight"), false, W_F32, &ly->ssm_norm, 1, NE(dv),
                   "state_size %u", hp->d_state)) != SI_OK ||
        (rc = want(v, T("ssm_out.weight"), false, W_MAT, &ly->ssm_out, 2, NE(vd, H),
                   "inner_size %u, embedding_length %" PRId64, hp->d_inner, H)) != SI_OK)
        return rc;
    return SI_OK;
}

static int check_dense_ffn(vctx *v, const char *p, sih_layer *ly)
{
    const sih_hparams *hp = &v->m->hp;
    int64_t H = hp->n_embd, F = hp->n_ff;
    char n[96];
    int rc;
    if ((rc = want(v, T("ffn_gate.weight"), false, W_MAT, &ly->ffn_gate, 2, NE(H, F),
                   "embedding_length %" PRId64 ", feed_forward_length %" PRId64, H, F)) != SI_OK ||
        (rc = want(v, T("ffn_up.weight"), false, W_MAT, &ly->ffn_up, 2, NE(H, F),
                   "embedding_length %" PRId64 ", feed_forward_length %" PRId64, H, F)) != SI_OK ||
        (rc = want(v, T("ffn_down.weight"), false, W_MAT, &ly->ffn_down, 2, NE(F, H),
                   "feed_forward_length %" PRId64 ", embedding_length %" PRId64, F, H)) != SI_OK)
        return rc;
    return SI_OK;
}

static int check_shared_expert(vctx *v, const char *p, sih_layer *ly)
{
    sih_hparams *hp = &v->m->hp;
    const si_host *h = v->m->host;
    int64_t H = hp->n_embd;
    char n[96];
    int rc;
    static const char *const names[] = {
        "ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight",
        "ffn_up_shexp.weight", "ffn_down_shexp.weight",
    };
    int present = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(n, sizeof n, "%s%s", p, names[i]);
        present += h->gguf_tensor(v->g, n) != NULL;
    }
    if (present == 0)
        return SI_OK;    /* no shared expert in this layer */
    if (hp->n_ff_shexp == 0) {
        /* No expert_shared_feed_forward_length key: the tensor defines it,
         * and every later layer must agree. */
        const si_tensor_info *ti = h->gguf_tensor(v->g, T("ffn_gate_shexp.weight"));
        if (ti != NULL && ti->ndim >= 2 && ti->ne[1] > 0 && ti->ne[1] <= UINT32_MAX)
            hp->n_ff_shexp = (uint32_t)ti->ne[1];
    }
    int64_t Fs = hp->n_ff_shexp;
    snprintf(v->role + strlen(v->role), sizeof v->role - strlen(v->role), " (shared expert)");
    if ((rc = want(v, T("ffn_gate_inp_shexp.weight"), false, W_F32, &ly->shexp_gate_inp, 1, NE(H),
                   "embedding_length %" PRId64, H)) != SI_OK ||
        (rc = want(v, T("ffn_gate_shexp.weight"), false, W_MAT, &ly->gate_shexp, 2, NE(H, Fs),
                   "embedding_length %" PRId64 ", expert_shared_feed_forward_length %" PRId64,
                   H, Fs)) != SI_OK ||
        (rc = want(v, T("ffn_up_shexp.weight"), false, W_MAT, &ly->up_shexp, 2, NE(H, Fs),
                   "embedding_length %" PRId64 ", expert_shared_feed_forward_length %" PRId64,
                   H, Fs)) != SI_OK ||
        (rc = want(v, T("ffn_down_shexp.weight"), false, W_MAT, &ly->down_shexp, 2, NE(Fs, H),
                   "expert_shared_feed_forward_length %" PRId64 ", embedding_length %" PRId64,
                   Fs, H)) != SI_OK)
        return rc;
    return SI_OK;
}

static int check_moe_ffn(vctx *v, const char *p, sih_layer *ly)
{
    const sih_hparams *hp = &v->m->hp;
    int64_t H = hp->n_embd, Fe = hp->n_ff_exp, E = hp->n_expert;
    char n[96];
    int rc;
    if ((rc = want(v, T("ffn_gate_inp.weight"), false, W_MAT, &ly->router, 2, NE(H, E),
                   "embedding_length %" PRId64 ", expert_count %" PRId64, H, E)) != SI_OK)
        return rc;
    rc = want(v, T("ffn_gate_exps.weight"), true, W_EXP, &ly->gate_exps, 3, NE(H, Fe, E),
              "embedding_length %" PRId64 ", expert_feed_forward_length %" PRId64
              ", expert_count %" PRId64, H, Fe, E);
    if (rc == SI_OK) {
        rc = want(v, T("ffn_up_exps.weight"), false, W_EXP, &ly->up_exps, 3, NE(H, Fe, E),
                  "embedding_length %" PRId64 ", expert_feed_forward_length %" PRId64
                  ", expert_count %" PRId64, H, Fe, E);
    } else if (rc == SI_ENOTFOUND) {
        /* Files made with the merge option carry gate and up fused, gate
         * rows first (spec §2.7). */
        rc = want(v, T("ffn_gate_up_exps.weight"), true, W_EXP, &ly->gate_exps, 3,
                  NE(H, 2 * Fe, E), "embedding_length %" PRId64
                  ", 2 * expert_feed_forward_length %" PRId64 ", expert_count %" PRId64, H, Fe, E);
        if (rc == SI_ENOTFOUND)
            return si_err_set(v->err, SI_ENOTFOUND,
                              "%sffn_gate_exps.weight: tensor missing (nor fused %sffn_gate_up_exps.weight; "
                              "required by %s)", p, p, v->role);
    }
    if (rc != SI_OK ||
        (rc = want(v, T("ffn_down_exps.weight"), false, W_EXP, &ly->down_exps, 3, NE(Fe, H, E),
                   "expert_feed_forward_length %" PRId64 ", embedding_length %" PRId64
                   ", expert_count %" PRId64, Fe, H, E)) != SI_OK)
        return rc;
    return check_shared_expert(v, p, ly);
}

static int check_globals(vctx *v)
{
    si_model *m = v->m;
    sih_hparams *hp = &m->hp;
    const si_host *h = m->host;
    int64_t H = hp->n_embd;
    int rc;

    snprintf(v->role, sizeof v->role, "the model");
    const si_tensor_info *te = h->gguf_tensor(v->g, "token_embd.weight");
    if (te == NULL)
        return si_err_set(v->err, SI_ENOTFOUND, "token_embd.weight: tensor missing (required by the model)");
    if (te->ndim != 2 || te->ne[1] < 1 || te->ne[1] > INT32_MAX)
        return si_err_set(v->err, SI_EFORMAT, "token_embd.weight: %u-D with %" PRId64
                          " rows but [embedding_length, n_vocab < 2^31] expected", te->ndim, te->ne[1]);
    hp->n_vocab = (uint32_t)te->ne[1];
    int64_t V = hp->n_vocab;

    char key[96];
    snprintf(key, sizeof key, "%s.vocab_size", m->fam->arch);
    const si_gguf_value *vs = h->gguf_get(v->g, key);
    if (vs != NULL && (vs->type == SI_GGUF_U32 || vs->type == SI_GGUF_U64) && vs->v.u != (uint64_t)V)
        return si_err_set(v->err, SI_EFORMAT, "%s = %" PRIu64 " but token_embd.weight has %" PRId64 " rows",
                          key, vs->v.u, V);

    if ((rc = want(v, "token_embd.weight", false, W_EMB, &m->tok_embd, 2, NE(H, V),
                   "embedding_length %" PRId64 ", n_vocab %" PRId64, H, V)) != SI_OK ||
        (rc = want(v, "output_norm.weight", false, W_F32, &m->out_norm, 1, NE(H),
                   "embedding_length %" PRId64, H)) != SI_OK)
        return rc;
    rc = want(v, "output.weight", true, W_MAT, &m->output, 2, NE(H, V),
              "embedding_length %" PRId64 ", n_vocab %" PRId64 " (token_embd rows)", H, V);
    m->tied = rc == SI_ENOTFOUND;
    return m->tied ? SI_OK : rc;
}

static int check_all(vctx *v)
{
    si_model *m = v->m;
    const sih_hparams *hp = &m->hp;
    int rc = check_globals(v);
    if (rc != SI_OK)
        return rc;
    uint32_t n_kv = 0, n_gdn = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        sih_layer *ly = &m->layers[il];
        char p[32], n[96];
        snprintf(p, sizeof p, "blk.%u.", il);
        ly->full = hp->is_full[il] != 0;
        snprintf(v->role, sizeof v->role, "%s layer %u", ly->full ? "full-attention" : "GDN", il);
        if (ly->full)
            ly->kv_layer = n_kv++;
        else
            ly->gdn_index = n_gdn++;
        if ((rc = want(v, T("attn_norm.weight"), false, W_F32, &ly->attn_norm, 1, NE(hp->n_embd),
                       "embedding_length %u", hp->n_embd)) != SI_OK ||
            (rc = want(v, T("post_attention_norm.weight"), false, W_F32, &ly->post_norm, 1,
                       NE(hp->n_embd), "embedding_length %u", hp->n_embd)) != SI_OK)
            return rc;
        rc = ly->full ? check_attention(v, p, ly) : check_gdn(v, p, ly);
        if (rc != SI_OK)
            return rc;
        snprintf(v->role, sizeof v->role, "layer %u (%s FFN)", il, hp->moe ? "MoE" : "dense");
        rc = hp->moe ? check_moe_ffn(v, p, ly) : check_dense_ffn(v, p, ly);
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}
#undef T

/* Uploads one weight in its GGUF type: through weight_load (the backend
 * may repack and describes the result) or raw bytes into a new buffer. */
static int upload_one(si_model *m, const si_tensor_info *ti, si_tensor *dst, si_err *err)
{
    int rc;
    if (m->bops->weight_load != NULL) {
        rc = m->bops->weight_load(m->b, ti, dst, err);
        if (rc != SI_OK) {
            si_err_prefix(err, ti->name);
            return rc;
        }
    } else {
        si_buf *buf = NULL;
        rc = m->bops->buf_alloc(m->b, ti->nbytes, &buf, err);
        if (rc == SI_OK) {
            rc = m->bops->upload(m->b, buf, 0, ti->data, ti->nbytes, err);
            if (rc != SI_OK)
                m->bops->buf_free(m->b, buf);
        }
        if (rc != SI_OK) {
            si_err_prefix(err, ti->name);
            return rc;
        }
        sih_tensor_desc(m->host, ti->type, ti->ndim, ti->ne, buf, 0, dst);
    }
    m->owned[m->n_owned++] = dst->buf;
    return SI_OK;
}

int sih_weights_load(si_model *m, const si_gguf *g, si_err *err)
{
    vctx v = { .m = m, .g = g, .err = err };
    int rc;

    m->layers = calloc(m->hp.n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return si_err_set(err, SI_ENOMEM, "out of memory for %u layers", m->hp.n_layer);
    rc = check_all(&v);
    if (rc != SI_OK)
        goto done;

    m->weights = v.list;          /* kept: names weights in later messages */
    m->n_weights = v.n;
    v.list = NULL;
    m->owned = calloc(v.n, sizeof *m->owned);
    if (m->owned == NULL) {
        rc = si_err_set(err, SI_ENOMEM, "out of memory for %zu weight buffers", v.n);
        goto done;
    }
    m->cap_owned = (uint32_t)v.n;
    uint64_t bytes = 0, total = 0;
    for (size_t i = 0; i < v.n; i++)
        total += m->weights[i].ti->nbytes;
    bool progress = SI_HAS_MEMBER(m->host, si_host, progress) && m->host->progress != NULL;
    const char *what = m->host->gguf_path(g);
    for (size_t i = 0; i < v.n; i++) {
        rc = upload_one(m, m->weights[i].ti, m->weights[i].dst, err);
        if (rc != SI_OK)
            goto done;
        bytes += m->weights[i].ti->nbytes;
        if (progress)
            m->host->progress(m->host, what, bytes, total);
    }
    if (m->tied)
        m->output = m->tok_embd;   /* same buffer; owned once */
    m->host->log(m->host, SI_LOG_INFO, m->fam->name, "uploaded %zu tensors (%.1f MiB)%s",
                 v.n, (double)bytes / (1024.0 * 1024.0), m->tied ? ", output tied to token_embd" : "");
done:
    free(v.list);
    return rc;
}

void sih_weights_free(si_model *m)
{
    for (uint32_t i = 0; i < m->n_owned; i++)
        m->bops->buf_free(m->b, m->owned[i]);
    free(m->owned);
    m->owned = NULL;
    m->n_owned = m->cap_owned = 0;
    free(m->layers);
    m->layers = NULL;
    free(m->weights);
    m->weights = NULL;
    m->n_weights = 0;
}
