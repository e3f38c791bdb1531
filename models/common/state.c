/* models/common/state.c — per-sequence state and activation scratch.
 *
 * State (spec §4): a KV cache for the full-attention layers only, made by
 * the backend (kv_create), and for every GDN layer one buffer of n_seq
 * slots, each slot holding
 *     conv state  f32 [conv_dim][conv_k - 1]   (raw attn_qkv outputs, oldest first)
 *     SSM state   f32 [Hv][dv][dk]             (key dim contiguous)
 * at byte offset slot * gdn_stride, as si_gdn_params describes.  Both are
 * zero at sequence start; seq_reset zeroes one slot again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hybrid.h"

#define SIH_ALIGN 256u

static uint64_t align_up(uint64_t x)
{
    return (x + SIH_ALIGN - 1) / SIH_ALIGN * SIH_ALIGN;
}

static int zero_slot(si_model *m, uint32_t layer, uint32_t seq, si_err *err)
{
    int rc = m->bops->upload(m->b, m->gdn_state[layer], (uint64_t)seq * m->gdn_stride,
                             m->zeros, m->gdn_stride, err);
    if (rc != SI_OK) {
        char pfx[96];
        snprintf(pfx, sizeof pfx, "zeroing GDN state of sequence %u", seq);
        si_err_prefix(err, pfx);
    }
    return rc;
}

int sih_state_create(si_model *m, si_err *err)
{
    const sih_hparams *hp = &m->hp;
    int rc;

    m->n_past = calloc(m->n_seq, sizeof *m->n_past);
    if (m->n_past == NULL)
        return si_err_set(err, SI_ENOMEM, "out of memory for %u sequences", m->n_seq);

    if (hp->n_full > 0) {
        si_kv_desc d = {
            .size = sizeof d, .n_layer = hp->n_full, .n_head_kv = hp->n_head_kv,
            .head_dim = hp->head_dim, .n_seq = m->n_seq, .n_ctx = m->n_ctx,
        };
        rc = m->bops->kv_create(m->b, &d, &m->kv, err);
        if (rc != SI_OK) {
            si_err_prefix(err, "KV cache");
            return rc;
        }
    }

    m->n_gdn = hp->n_layer - hp->n_full;
    if (m->n_gdn == 0)
        return SI_OK;
    uint64_t conv_bytes = (uint64_t)sih_conv_dim(hp) * (hp->conv_k - 1) * sizeof(float);
    uint64_t ssm_bytes = (uint64_t)hp->n_v_head * hp->d_state * hp->d_state * sizeof(float);
    m->gdn_stride = align_up(conv_bytes + ssm_bytes);
    m->zeros = calloc(1, m->gdn_stride);
    m->gdn_state = calloc(m->n_gdn, sizeof *m->gdn_state);
    if (m->zeros == NULL || m->gdn_state == NULL)
        return si_err_set(err, SI_ENOMEM, "out of memory for GDN state bookkeeping");
    for (uint32_t i = 0; i < m->n_gdn; i++) {
        rc = m->bops->buf_alloc(m->b, m->gdn_stride * m->n_seq, &m->gdn_state[i], err);
        if (rc != SI_OK) {
            si_err_prefix(err, "GDN state");
            return rc;
        }
        for (uint32_t s = 0; s < m->n_seq; s++)
            if ((rc = zero_slot(m, i, s, err)) != SI_OK)
                return rc;
    }
    m->host->log(m->host, SI_LOG_INFO, m->fam->name,
                 "state: KV for %u layers x %u seq x %u ctx; GDN %u layers x %u seq x %.2f MiB",
                 hp->n_full, m->n_seq, m->n_ctx, m->n_gdn, m->n_seq,
                 (double)m->gdn_stride / (1024.0 * 1024.0));
    return SI_OK;
}

void sih_state_free(si_model *m)
{
    if (m->gdn_state != NULL) {
        for (uint32_t i = 0; i < m->n_gdn; i++)
            m->bops->buf_free(m->b, m->gdn_state[i]);
        free(m->gdn_state);
        m->gdn_state = NULL;
    }
    if (m->kv != NULL) {
        m->bops->kv_free(m->b, m->kv);
        m->kv = NULL;
    }
    free(m->zeros);
    m->zeros = NULL;
    free(m->n_past);
    m->n_past = NULL;
}

int sih_state_reset(si_model *m, uint32_t seq, si_err *err)
{
    int rc;
    if (seq >= m->n_seq)
        return si_err_set(err, SI_ERANGE, "sequence %u out of range (%u provisioned)", seq, m->n_seq);
    if (m->kv != NULL) {
        rc = m->bops->kv_seq_reset(m->b, m->kv, seq, err);
        if (rc != SI_OK) {
            si_err_prefix(err, "KV reset");
            return rc;
        }
    }
    for (uint32_t i = 0; i < m->n_gdn; i++)
        if ((rc = zero_slot(m, i, seq, err)) != SI_OK)
            return rc;
    m->n_past[seq] = 0;
    return SI_OK;
}

/* Lays out every activation region for `cap` tokens; returns total bytes. */
static uint64_t layout(const si_model *m, uint32_t cap, sih_scratch *sc)
{
    const sih_hparams *hp = &m->hp;
    uint64_t f = sizeof(float), T = cap, o = 0;
    uint64_t q = (uint64_t)hp->n_head * hp->head_dim, kv = (uint64_t)hp->n_head_kv * hp->head_dim;
    uint64_t F = hp->moe ? 0 : hp->n_ff;   /* the MoE op keeps its own temporaries */
#define REGION(field, elems) (sc->field = o, o = align_up(o + (uint64_t)(elems) * f))
    REGION(x[0], hp->n_embd * T);
    REGION(x[1], hp->n_embd * T);
    REGION(h, hp->n_embd * T);
    REGION(y, hp->n_embd * T);
    REGION(qg, 2 * q * T);
    REGION(k, kv * T);
    REGION(v, kv * T);
    REGION(ao, q * T);
    REGION(u, (uint64_t)sih_conv_dim(hp) * T);
    REGION(z, (uint64_t)hp->d_inner * T);
    REGION(b, (uint64_t)hp->n_v_head * T);
    REGION(a, (uint64_t)hp->n_v_head * T);
    REGION(go, (uint64_t)hp->d_inner * T);
    REGION(fg, F * T);
    REGION(fu, F * T);
    REGION(fa, F * T);
    REGION(ids, T);              /* int32, same size as f32 */
    REGION(oids, T);
    REGION(xo, hp->n_embd * T);
    REGION(xn, hp->n_embd * T);
    REGION(lg, (uint64_t)hp->n_vocab * (cap < SIH_LOGIT_ROWS ? cap : SIH_LOGIT_ROWS));
    REGION(tk, 2u * SI_TOPK_MAX * (cap < SIH_LOGIT_ROWS ? cap : SIH_LOGIT_ROWS));
#undef REGION
    sc->cap = cap;
    sc->bytes = o;
    return o;
}

int sih_scratch_reserve(si_model *m, uint32_t tokens, si_err *err)
{
    if (tokens > m->chunk)
        tokens = m->chunk;
    if (tokens <= m->sc.cap)
        return SI_OK;
    sih_scratch sc;
    memset(&sc, 0, sizeof sc);
    uint64_t bytes = layout(m, tokens, &sc);
    int rc = m->bops->buf_alloc(m->b, bytes, &sc.buf, err);
    if (rc != SI_OK) {
        char pfx[96];
        snprintf(pfx, sizeof pfx, "activation scratch for %u tokens (%" PRIu64 " bytes)", tokens, bytes);
        si_err_prefix(err, pfx);
        return rc;
    }
    sih_scratch_free(m);
    m->sc = sc;
    return SI_OK;
}

void sih_scratch_free(si_model *m)
{
    if (m->sc.buf != NULL)
        m->bops->buf_free(m->b, m->sc.buf);
    memset(&m->sc, 0, sizeof m->sc);
}
