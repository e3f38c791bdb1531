/* models/common/model.c — the model-op entry points both plugins share:
 * accepts, load (hparams -> tensors -> state -> dry plan), unload, info,
 * seq_reset.  Forward lives in forward.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hybrid.h"

bool sih_accepts(const si_host *h, const si_gguf *g, const char *arch)
{
    const si_gguf_value *v = h->gguf_get(g, "general.architecture");
    if (v == NULL || v->type != SI_GGUF_STRING)
        return false;
    size_t n = strlen(arch);
    return v->v.s.len == n && memcmp(v->v.s.ptr, arch, n) == 0;
}

int sih_load(const sih_family *fam, const si_host *h, const si_gguf *g,
             const si_backend_ref *be, uint32_t n_seq, uint32_t n_ctx,
             si_model **out, si_err *err)
{
    int rc;
    *out = NULL;
    if (be == NULL || be->ops == NULL || be->b == NULL)
        return si_err_set(err, SI_EINVAL, "%s: no backend given", fam->name);
    if (n_seq == 0 || n_ctx == 0)
        return si_err_set(err, SI_EINVAL, "%s: n_seq %u and n_ctx %u must both be > 0",
                          fam->name, n_seq, n_ctx);
    if (n_ctx > (uint32_t)INT32_MAX)
        return si_err_set(err, SI_ERANGE, "%s: n_ctx %u too large", fam->name, n_ctx);
    if (!sih_accepts(h, g, fam->arch))
        return si_err_set(err, SI_EREFUSED, "%s: general.architecture is not '%s'",
                          fam->name, fam->arch);

    si_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return si_err_set(err, SI_ENOMEM, "%s: out of memory", fam->name);
    m->host = h;
    m->fam = fam;
    m->bops = be->ops;
    m->b = be->b;
    snprintf(m->be_name, sizeof m->be_name, "%s", be->name != NULL ? be->name : "?");
    m->n_seq = n_seq;
    m->n_ctx = n_ctx;
    m->chunk = SIH_DEFAULT_CHUNK;
    /* The prefill chunk is the runtime's n_batch (the core validates it). */
    const char *nb = h->cfg_get(h, "runtime", "n_batch");
    if (nb != NULL) {
        char *end;
        unsigned long v = strtoul(nb, &end, 10);
        if (*end == '\0' && v >= 1 && v <= 65536)
            m->chunk = (uint32_t)v;
    }

    if ((rc = sih_hparams_read(h, g, fam->arch, fam->moe, &m->hp, err)) != SI_OK)
        goto fail;
    if (m->hp.n_ctx_train != 0 && n_ctx > m->hp.n_ctx_train)
        h->log(h, SI_LOG_WARN, fam->name, "n_ctx %u exceeds the training context %u",
               n_ctx, m->hp.n_ctx_train);
    if ((rc = sih_weights_load(m, g, err)) != SI_OK ||
        (rc = sih_state_create(m, err)) != SI_OK)
        goto fail;

    m->ops = calloc(sih_plan_max_ops(m), sizeof *m->ops);
    m->op_layer = calloc(sih_plan_max_ops(m), sizeof *m->op_layer);
    m->seen = calloc(n_seq, 1);
    m->oids = calloc(m->chunk, sizeof *m->oids);
    /* (topk_fetch's rows, then each queue entry's) */
    m->tk_host = malloc(sizeof *m->tk_host * (SIH_LOGIT_ROWS + SI_SUBMITS_IN_FLIGHT * SI_SUBMIT_MAX_ROWS) * 2 *
                        SI_TOPK_MAX);
    for (int i = 0; m->tk_host != NULL && i < SI_SUBMITS_IN_FLIGHT; i++)
        m->ahead.q[i].row = m->tk_host + (size_t)(SIH_LOGIT_ROWS + i * SI_SUBMIT_MAX_ROWS) * 2 * SI_TOPK_MAX;
    if (m->ops == NULL || m->op_layer == NULL || m->seen == NULL || m->oids == NULL || m->tk_host == NULL) {
        rc = si_err_set(err, SI_ENOMEM, "%s: out of memory for the op list", fam->name);
        goto fail;
    }
    /* Every op of a step is put to the backend once now, so an op or type
     * it lacks is reported at load, naming the layer. */
    if ((rc = sih_scratch_reserve(m, 1, err)) != SI_OK ||
        (rc = sih_plan_validate(m, err)) != SI_OK)
        goto fail;

    h->log(h, SI_LOG_INFO, fam->name,
           "%s: %u trunk layers (%u full attention, %u GDN)%s, H %u, vocab %u, %s FFN",
           fam->arch, m->hp.n_layer, m->hp.n_full, m->hp.n_layer - m->hp.n_full,
           m->hp.n_nextn ? " + MTP skipped" : "", m->hp.n_embd, m->hp.n_vocab,
           m->hp.moe ? "MoE" : "dense");
    *out = m;
    return SI_OK;

fail:
    sih_unload(m);
    return rc;
}

void sih_unload(si_model *m)
{
    if (m == NULL)
        return;
    /* a queued HOST_IDS op released (its step's result unread), so the
     * backend's close does not wait for it to give up */
    if (m->ahead.post.pending && !m->ahead.post.deferred) {
        static const int32_t zeros[SI_SUBMIT_MAX_ROWS];
        si_err scratch = { { 0 } };
        m->bops->post_ids(m->b, zeros, m->ahead.n_seq, &scratch);
    }
    sih_scratch_free(m);
    sih_state_free(m);
    sih_weights_free(m);
    sih_hparams_free(&m->hp);
    free(m->ops);
    free(m->op_layer);
    free(m->seen);
    free(m->oids);
    free(m->tk_host);
    free(m);
}

void sih_info(const si_model *m, si_model_info *out)
{
    si_model_info info = {
        .size = sizeof info,
        .arch = m->fam->arch,
        .n_vocab = m->hp.n_vocab,
        .n_embd = m->hp.n_embd,
        .n_layer = m->hp.n_layer,
        .n_ctx_train = m->hp.n_ctx_train,
        .n_seq_max = m->n_seq,
        .n_ctx = m->n_ctx,
    };
    /* .size tells a newer core which members this plugin filled. */
    *out = info;
}

int sih_seq_reset(si_model *m, uint32_t seq, si_err *err)
{
    if (m->ahead.n > 0 || m->ahead.post.pending)
        return si_err_set(err, SI_EINVAL, "seq_reset: %u submitted steps not collected",
                          m->ahead.n + m->ahead.post.pending);
    m->ahead.feed_ok = false;
    return sih_state_reset(m, seq, err);
}
