/* models/common/forward.c — one forward step as a list of backend ops.
 *
 * Spec §3.3, per chunk of T tokens (tokens of one sequence consecutive):
 *     x   = GET_ROWS(token_embd, ids)                         [H, T]
 *     per layer:
 *       h = RMSNORM(x, attn_norm)
 *       full:  qg,k,v = MATMUL(attn_q|attn_k|attn_v, h); o = ATTN(...)
 *              y = MATMUL(attn_output, o)
 *       GDN:   u,z,b,a = MATMUL(attn_qkv|attn_gate|ssm_beta|ssm_alpha, h)
 *              o = GDN(...); y = MATMUL(ssm_out, o)
 *       x = x + y; h = RMSNORM(x, post_attention_norm)
 *       dense: y = MATMUL(ffn_down, SWIGLU(MATMUL(ffn_gate,h), MATMUL(ffn_up,h)))
 *       MoE:   y = MOE(h, ...)
 *       x = x + y
 *     rows = GET_ROWS(x, wanted); logits = MATMUL(output, RMSNORM(rows, output_norm))
 *     (forward_topk: then TOPK(logits), and only that result is downloaded)
 * No op writes a tensor it reads (the residual ping-pongs between two
 * regions), so a backend need not support aliasing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hybrid.h"

#define OPS_PER_LAYER 14u   /* norm + 6 (GDN) + add + norm + 4 (dense) + add */
#define HEAD_OPS      5u    /* HOST_IDS + GET_ROWS + RMSNORM + MATMUL + TOPK (forward_step) */
#define STEP_IDS      64u   /* forward_step: ids + wanted rows in one upload up to this */

size_t sih_plan_max_ops(const si_model *m)
{
    return 1 + (size_t)m->hp.n_layer * OPS_PER_LAYER + HEAD_OPS;
}

void sih_acts_init(const si_model *m, uint32_t n, sih_acts *t)
{
    const sih_hparams *hp = &m->hp;
    const sih_scratch *sc = &m->sc;
    si_buf *B = sc->buf;
    int64_t H = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim;
    int64_t kv = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->moe ? 0 : hp->n_ff;
    t->x[0] = sih_act(B, sc->x[0], H, n);
    t->x[1] = sih_act(B, sc->x[1], H, n);
    t->h = sih_act(B, sc->h, H, n);
    t->y = sih_act(B, sc->y, H, n);
    t->qg = sih_act(B, sc->qg, 2 * q, n);
    t->k = sih_act(B, sc->k, kv, n);
    t->v = sih_act(B, sc->v, kv, n);
    t->ao = sih_act(B, sc->ao, q, n);
    t->u = sih_act(B, sc->u, sih_conv_dim(hp), n);
    t->z = sih_act(B, sc->z, hp->d_inner, n);
    t->b = sih_act(B, sc->b, hp->n_v_head, n);
    t->a = sih_act(B, sc->a, hp->n_v_head, n);
    t->go = sih_act(B, sc->go, hp->d_inner, n);
    t->fg = sih_act(B, sc->fg, F, n);
    t->fu = sih_act(B, sc->fu, F, n);
    t->fa = sih_act(B, sc->fa, F, n);
    t->ids = sih_ids(B, sc->ids, n);
}

/* An op appender: every op records the layer it belongs to. */
typedef struct plan {
    si_op   *ops;
    int32_t *layer;
    size_t   n;
    int32_t  cur;
} plan;

static si_op *emit(plan *p, uint32_t kind, const si_tensor *dst)
{
    si_op *op = &p->ops[p->n];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->dst = *dst;
    p->layer[p->n] = p->cur;
    p->n++;
    return op;
}

static const si_tensor *opt(const si_tensor *w)
{
    return w->buf != NULL ? w : NULL;
}

static void matmul(plan *p, const si_tensor *dst, const si_tensor *w, const si_tensor *x)
{
    si_op *op = emit(p, SI_OP_MATMUL, dst);
    op->src[0] = w;
    op->src[1] = x;
}

static void rmsnorm(plan *p, const si_tensor *dst, const si_tensor *x, const si_tensor *w, float eps)
{
    si_op *op = emit(p, SI_OP_RMSNORM, dst);
    op->src[0] = x;
    op->src[1] = w;
    op->p.norm.eps = eps;
}

static void add(plan *p, const si_tensor *dst, const si_tensor *a, const si_tensor *b)
{
    si_op *op = emit(p, SI_OP_ADD, dst);
    op->src[0] = a;
    op->src[1] = b;
}

static void attention(plan *p, const si_model *m, const sih_layer *ly, const sih_acts *t,
                      const int32_t *pos, const int32_t *seq)
{
    const sih_hparams *hp = &m->hp;
    matmul(p, &t->qg, &ly->wq, &t->h);
    matmul(p, &t->k, &ly->wk, &t->h);
    matmul(p, &t->v, &ly->wv, &t->h);
    si_op *op = emit(p, SI_OP_ATTN, &t->ao);
    op->src[0] = &t->qg;
    op->src[1] = &t->k;
    op->src[2] = &t->v;
    op->src[3] = &ly->q_norm;
    op->src[4] = &ly->k_norm;
    op->p.attn = (si_attn_params){
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
        .n_rot = hp->n_rot, .eps = hp->eps, .rope_base = hp->rope_base,
        .yarn_factor = hp->yarn_factor, .yarn_orig_ctx = hp->yarn_orig_ctx,
        .kv = m->kv, .kv_layer = ly->kv_layer, .pos = pos, .seq = seq,
    };
    matmul(p, &t->y, &ly->wo, &t->ao);
}

static void gated_delta_net(plan *p, const si_model *m, const sih_layer *ly, const sih_acts *t,
                            const int32_t *seq)
{
    const sih_hparams *hp = &m->hp;
    matmul(p, &t->u, &ly->wqkv, &t->h);
    matmul(p, &t->z, &ly->wgate, &t->h);
    matmul(p, &t->b, &ly->wbeta, &t->h);
    matmul(p, &t->a, &ly->walpha, &t->h);
    si_op *op = emit(p, SI_OP_GDN, &t->go);
    op->src[0] = &t->u;
    op->src[1] = &t->z;
    op->src[2] = &t->b;
    op->src[3] = &t->a;
    op->src[4] = &ly->conv;
    op->src[5] = &ly->ssm_a;
    op->src[6] = &ly->ssm_dt;
    op->src[7] = &ly->ssm_norm;
    op->p.gdn = (si_gdn_params){
        .n_k_head = hp->n_k_head, .n_v_head = hp->n_v_head, .head_k_dim = hp->d_state,
        .head_v_dim = hp->d_state, .conv_k = hp->conv_k, .eps = hp->eps,
        .state = m->gdn_state[ly->gdn_index], .state_offset = 0,
        .state_stride = m->gdn_stride, .seq = seq,
    };
    matmul(p, &t->y, &ly->ssm_out, &t->go);
}

static void ffn(plan *p, const si_model *m, const sih_layer *ly, const sih_acts *t)
{
    if (!m->hp.moe) {
        matmul(p, &t->fg, &ly->ffn_gate, &t->h);
        matmul(p, &t->fu, &ly->ffn_up, &t->h);
        si_op *op = emit(p, SI_OP_SWIGLU, &t->fa);
        op->src[0] = &t->fg;
        op->src[1] = &t->fu;
        matmul(p, &t->y, &ly->ffn_down, &t->fa);
        return;
    }
    si_op *op = emit(p, SI_OP_MOE, &t->y);
    op->src[0] = &t->h;
    op->src[1] = &ly->router;
    op->src[2] = &ly->gate_exps;          /* fused gate_up when up_exps is absent */
    op->src[3] = opt(&ly->up_exps);
    op->src[4] = &ly->down_exps;
    op->src[5] = opt(&ly->shexp_gate_inp);
    op->src[6] = opt(&ly->gate_shexp);
    op->src[7] = opt(&ly->up_shexp);
    op->src[8] = opt(&ly->down_shexp);
    op->p.moe = (si_moe_params){ .n_expert = m->hp.n_expert, .n_used = m->hp.n_expert_used };
}

size_t sih_plan_trunk(si_model *m, const sih_acts *t, const int32_t *pos,
                      const int32_t *seq, int *x_final)
{
    plan p = { .ops = m->ops, .layer = m->op_layer, .n = 0, .cur = -1 };
    int cur = 0;
    si_op *op = emit(&p, SI_OP_GET_ROWS, &t->x[cur]);
    op->src[0] = &m->tok_embd;
    op->src[1] = &t->ids;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const sih_layer *ly = &m->layers[il];
        p.cur = (int32_t)il;
        rmsnorm(&p, &t->h, &t->x[cur], &ly->attn_norm, m->hp.eps);
        if (ly->full)
            attention(&p, m, ly, t, pos, seq);
        else
            gated_delta_net(&p, m, ly, t, seq);
        add(&p, &t->x[cur ^ 1], &t->x[cur], &t->y);
        cur ^= 1;
        rmsnorm(&p, &t->h, &t->x[cur], &ly->post_norm, m->hp.eps);
        ffn(&p, m, ly, t);
        add(&p, &t->x[cur ^ 1], &t->x[cur], &t->y);
        cur ^= 1;
    }
    *x_final = cur;
    return p.n;
}

/* The weight of a refused MATMUL / GET_ROWS (src[0]), whose type is the
 * likely reason, for the message; NULL for other ops or activations. */
static const char *weight_of(const si_model *m, const si_op *op, uint32_t *type)
{
    const si_tensor *s = op->src[0];
    if ((op->kind != SI_OP_MATMUL && op->kind != SI_OP_GET_ROWS) || s == NULL)
        return NULL;
    *type = s->type;
    if (s == &m->output && m->tied)
        return "token_embd.weight (tied output)";
    for (size_t w = 0; w < m->n_weights; w++)
        if (m->weights[w].dst == s)
            return m->weights[w].ti->name;
    return NULL;
}

int sih_plan_check(const si_model *m, const si_op *ops, const int32_t *op_layer,
                   size_t n_ops, uint32_t n_tok, si_err *err)
{
    for (size_t i = 0; i < n_ops; i++) {
        if (m->bops->supports(m->b, &ops[i]))
            continue;
        char where[48] = "the output head", tn[32];
        if (op_layer != NULL && op_layer[i] >= 0)
            snprintf(where, sizeof where, "layer %d", (int)op_layer[i]);
        else if (op_layer != NULL && op_layer[i] == -1)
            snprintf(where, sizeof where, "the embedding");   /* (HEAD_LAYER: the output head) */
        uint32_t type = 0;
        const char *w = weight_of(m, &ops[i], &type);
        if (w != NULL)
            return si_err_set(err, SI_EUNSUPPORTED,
                              "backend '%s' refuses op %s of %s (%u tokens) with weight %s of type %s",
                              m->be_name, sih_op_name(ops[i].kind), where, n_tok, w,
                              sih_type_str(m->host, type, tn, sizeof tn));
        return si_err_set(err, SI_EUNSUPPORTED, "backend '%s' refuses op %s of %s (%u tokens)",
                          m->be_name, sih_op_name(ops[i].kind), where, n_tok);
    }
    return SI_OK;
}

/* The op_layer of the output head's ops where they follow the trunk in
 * one list (forward_step); -1 is the embedding's. */
#define HEAD_LAYER (-2)

/* The output head for `n_out` gathered rows, appended to p: GET_ROWS +
 * RMSNORM. */
static void plan_head(plan *p, const si_model *m, const si_tensor *x, const si_tensor *oids,
                      const si_tensor *xo, const si_tensor *xn)
{
    si_op *op = emit(p, SI_OP_GET_ROWS, xo);
    op->src[0] = x;
    op->src[1] = oids;
    rmsnorm(p, xn, xo, &m->out_norm, m->hp.eps);
}

int sih_plan_validate(si_model *m, si_err *err)
{
    static const int32_t zero = 0;
    sih_acts t;
    int xf, rc;
    sih_acts_init(m, 1, &t);
    size_t n = sih_plan_trunk(m, &t, &zero, &zero, &xf);
    if ((rc = sih_plan_check(m, m->ops, m->op_layer, n, 1, err)) != SI_OK)
        return rc;
    si_tensor oids = sih_ids(m->sc.buf, m->sc.oids, 1);
    si_tensor xo = sih_act(m->sc.buf, m->sc.xo, m->hp.n_embd, 1);
    si_tensor xn = sih_act(m->sc.buf, m->sc.xn, m->hp.n_embd, 1);
    plan ph = { .ops = m->ops, .layer = m->op_layer, .n = 0, .cur = -1 };
    plan_head(&ph, m, &t.x[xf], &oids, &xo, &xn);
    n = ph.n;
    si_tensor lg = sih_act(m->sc.buf, m->sc.lg, m->hp.n_vocab, 1);
    plan p = { .ops = m->ops + n, .layer = m->op_layer + n, .n = 0, .cur = -1 };
    matmul(&p, &lg, &m->output, &xn);
    if ((rc = sih_plan_check(m, m->ops, NULL, n + 1, 1, err)) != SI_OK)
        return rc;
    /* TOPK is optional (forward_topk): a backend without it keeps the
     * full-logits path. */
    si_tensor tk = sih_act(m->sc.buf, m->sc.tk, 2, 1);
    si_op *op = emit(&p, SI_OP_TOPK, &tk);
    op->src[0] = &lg;
    op->p.topk = (si_topk_params){ .k = 1, .repeat_penalty = 1.0f };
    m->has_topk = m->bops->supports(m->b, op);
    /* SI_OP_HOST_IDS and post_ids: a posted step is queued before its
     * token is known; without them it runs at the post (sih_topk_post). */
    const struct si_backend_ops *b = m->bops;
    si_op hi = { .kind = SI_OP_HOST_IDS, .dst = sih_ids(m->sc.buf, m->sc.ids, 1) };
    m->has_post = SI_HAS_MEMBER(b, struct si_backend_ops, post_ids) && b->post_ids != NULL && b->supports(m->b, &hi);
    return SI_OK;
}

/* Tokens in range, sequences provisioned and consecutive, positions
 * continuing each sequence exactly: the recurrent state cannot skip or
 * rewind, so anything else would silently compute garbage. */
static int check_batch(si_model *m, const si_batch *bt, const void *logits, si_err *err)
{
    if (bt->tokens == NULL || bt->pos == NULL || bt->seq == NULL)
        return si_err_set(err, SI_EINVAL, "batch of %u tokens without tokens/pos/seq arrays", bt->n);
    uint32_t n_want = 0;
    int64_t expect = 0;
    memset(m->seen, 0, m->n_seq);
    for (uint32_t i = 0; i < bt->n; i++) {
        int32_t tok = bt->tokens[i], s = bt->seq[i], pos = bt->pos[i];
        if (tok < 0 || (uint32_t)tok >= m->hp.n_vocab)
            return si_err_set(err, SI_ERANGE, "batch token %u: id %d outside the vocabulary [0, %u)",
                              i, tok, m->hp.n_vocab);
        if (s < 0 || (uint32_t)s >= m->n_seq)
            return si_err_set(err, SI_ERANGE, "batch token %u: sequence %d outside [0, %u)",
                              i, s, m->n_seq);
        if (i == 0 || s != bt->seq[i - 1]) {
            if (m->seen[s])
                return si_err_set(err, SI_EINVAL,
                                  "batch token %u: sequence %d appears again after another sequence "
                                  "(tokens of one sequence must be consecutive)", i, s);
            if (m->n_past[s] == UINT32_MAX)
                return si_err_set(err, SI_EINVAL,
                                  "sequence %d: state undefined after a failed forward; reset it first", s);
            m->seen[s] = 1;
            expect = m->n_past[s];
        }
        if (pos != expect)
            return si_err_set(err, SI_EINVAL,
                              "batch token %u: sequence %d at position %d but %" PRId64 " expected "
                              "(positions continue the sequence, one by one)", i, s, pos, expect);
        if ((uint32_t)pos >= m->n_ctx)
            return si_err_set(err, SI_ERANGE, "batch token %u: sequence %d position %d beyond the "
                              "context of %u tokens", i, s, pos, m->n_ctx);
        expect++;
        n_want += bt->want_logits != NULL && bt->want_logits[i] != 0;
    }
    if (n_want > 0 && logits == NULL)
        return si_err_set(err, SI_EINVAL, "batch asks for %u logits but the logits buffer is NULL", n_want);
    return SI_OK;
}

static int run(si_model *m, const si_op *ops, size_t n, si_err *err)
{
    int rc = m->bops->exec(m->b, ops, n, err);
    if (rc == SI_OK && m->bops->sync != NULL)
        rc = m->bops->sync(m->b, err);
    return rc;
}

/* run() without the sync, for a list whose results a download (ordered
 * after it, synchronous, reporting what the exec left) fetches next: one
 * wait for the GPU a decode step instead of two. */
static int run_then_fetch(si_model *m, const si_op *ops, size_t n, si_err *err)
{
    return m->bops->exec(m->b, ops, n, err);
}

/* Where the wanted rows go: full logits, or (tp != NULL) the TOPK result
 * of each row as vals/ids; `row` counts the rows written so far. */
typedef struct sih_out {
    float                *logits;
    const si_topk_params *tp;
    float                *vals;
    int32_t              *ids;
    uint32_t              row;
    /* topk_submit: its rows fetched by download_start into the queue's
     * next entry; token i at row i's TOPK id slot (feed: left there by
     * the previous submit, else uploaded there). */
    bool                  ahead, feed;
    bool                  post;   /* its tokens from a HOST_IDS op (the backend's post_ids) */
} sih_out;

/* Appends TOPK over the c logit rows in `lg` (o's parameters) to p. */
static void plan_topk(plan *p, const si_model *m, const si_tensor *lg, uint32_t c, const sih_out *o,
                      si_tensor *tk)
{
    *tk = sih_act(m->sc.buf, m->sc.tk, 2 * (int64_t)o->tp->k, c);
    si_op *op = emit(p, SI_OP_TOPK, tk);
    op->src[0] = lg;
    op->p.topk = *o->tp;
    if (o->tp->pen_off != NULL)
        op->p.topk.pen_off = o->tp->pen_off + o->row;   /* absolute offsets: a slice is a pointer */
}

/* Copies the TOPK results of c rows out (rows o->row on). */
static int topk_fetch(si_model *m, uint32_t c, sih_out *o, si_err *err)
{
    /* The c rows (k values, then k ids, each) lie back to back: one
     * download, one wait for the GPU (a round trip each row before: at
     * bs 8, eight a step). */
    const uint32_t k = o->tp->k;
    const float *row = m->tk_host;
    int rc = m->bops->download(m->b, m->tk_host, m->sc.buf, m->sc.tk, (uint64_t)c * 2 * k * sizeof(float), err);
    if (rc != SI_OK)
        return rc;
    for (uint32_t r = 0; r < c; r++, o->row++, row += 2 * k) {
        memcpy(o->vals + (size_t)o->row * k, row, k * sizeof(float));
        memcpy(o->ids + (size_t)o->row * k, row + k, k * sizeof(int32_t));
    }
    return SI_OK;
}

/* topk_submit's fetch: the step's n rows into the queue's next entry,
 * not waited for where the backend can (download_start). */
static int ahead_fetch(si_model *m, const sih_out *o, uint32_t n, si_err *err)
{
    const uint32_t k = o->tp->k, at = (m->ahead.head + m->ahead.n) % SI_SUBMITS_IN_FLIGHT;
    const uint64_t bytes = (uint64_t)n * 2 * k * sizeof(float);
    sih_queued *q = &m->ahead.q[at];
    const struct si_backend_ops *b = m->bops;
    q->k = k;
    q->n = n;
    q->owed = o->post;
    q->async = SI_HAS_MEMBER(b, struct si_backend_ops, download_wait) && b->download_start != NULL &&
               b->download_wait != NULL;
    int rc = q->async ? b->download_start(m->b, q->row, m->sc.buf, m->sc.tk, bytes, &q->ticket, err)
                      : b->download(m->b, q->row, m->sc.buf, m->sc.tk, bytes, err);
    if (rc == SI_OK)
        m->ahead.n++;
    return rc;
}

/* Runs TOPK on c logit rows in `lg` and copies the result out (rows r of
 * the step's wanted rows from o->row on). */
static int chunk_topk(si_model *m, const si_tensor *lg, uint32_t c, sih_out *o, si_err *err)
{
    plan p = { .ops = m->ops, .layer = m->op_layer, .n = 0, .cur = -1 };
    si_tensor tk;
    plan_topk(&p, m, lg, c, o, &tk);
    int rc;
    if ((rc = sih_plan_check(m, m->ops, NULL, 1, c, err)) != SI_OK || (rc = run(m, m->ops, 1, err)) != SI_OK)
        return rc;
    return topk_fetch(m, c, o, err);
}

/* Logits (or their top-K) of the wanted rows of one chunk, SIH_LOGIT_ROWS
 * at a time. */
static int chunk_logits(si_model *m, const si_tensor *x, uint32_t n_out, sih_out *o, si_err *err)
{
    const sih_scratch *sc = &m->sc;
    int64_t H = m->hp.n_embd, V = m->hp.n_vocab;
    si_tensor oids = sih_ids(sc->buf, sc->oids, n_out);
    si_tensor xo = sih_act(sc->buf, sc->xo, H, n_out);
    si_tensor xn = sih_act(sc->buf, sc->xn, H, n_out);
    int rc = m->bops->upload(m->b, sc->buf, sc->oids, m->oids, (uint64_t)n_out * sizeof(int32_t), err);
    if (rc != SI_OK)
        return rc;
    plan ph = { .ops = m->ops, .layer = m->op_layer, .n = 0, .cur = -1 };
    plan_head(&ph, m, x, &oids, &xo, &xn);
    size_t n = ph.n;
    if ((rc = sih_plan_check(m, m->ops, NULL, n, n_out, err)) != SI_OK ||
        (rc = run(m, m->ops, n, err)) != SI_OK)
        return rc;
    for (uint32_t r0 = 0; r0 < n_out; r0 += SIH_LOGIT_ROWS) {
        uint32_t c = n_out - r0 < SIH_LOGIT_ROWS ? n_out - r0 : SIH_LOGIT_ROWS;
        si_tensor xv = sih_act(sc->buf, sc->xn + (uint64_t)r0 * H * sizeof(float), H, c);
        si_tensor lg = sih_act(sc->buf, sc->lg, V, c);
        plan p = { .ops = m->ops, .layer = m->op_layer, .n = 0, .cur = -1 };
        matmul(&p, &lg, &m->output, &xv);
        if ((rc = sih_plan_check(m, m->ops, NULL, 1, c, err)) != SI_OK ||
            (rc = run(m, m->ops, 1, err)) != SI_OK)
            return rc;
        if (o->tp != NULL)
            rc = chunk_topk(m, &lg, c, o, err);
        else {
            rc = m->bops->download(m->b, o->logits + (size_t)o->row * V, sc->buf, sc->lg,
                                   (uint64_t)c * V * sizeof(float), err);
            o->row += c;
        }
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}

/* The tokens of [t0, t0 + T) that want logits, as indices within the
 * chunk, into m->oids; returns their count. */
static uint32_t wanted_rows(si_model *m, const si_batch *bt, uint32_t t0, uint32_t T)
{
    uint32_t n_out = 0;
    for (uint32_t i = 0; i < T; i++)
        if (bt->want_logits != NULL && bt->want_logits[t0 + i])
            m->oids[n_out++] = (int32_t)i;
    return n_out;
}

/* A batch of one chunk wanting 1..SIH_LOGIT_ROWS rows (every decode
 * step): the trunk, the output head, the LM head and, for forward_topk
 * without penalties, TOPK as one exec — one graph and one sync where the
 * chunk path makes four execs, each ended by a sync (the GPU idle while
 * the host plans and launches the next).  The same ops on the same
 * tensors in the same order.  (TOPK with penalties stays an exec of its
 * own: its per-step lists keep a list from being graphed.) */
static int forward_step(si_model *m, const si_batch *bt, uint32_t n_out, sih_out *o, bool *touched, si_err *err)
{
    const sih_scratch *sc = &m->sc;
    sih_acts t;
    int xf;
    sih_acts_init(m, bt->n, &t);
    /* A decode step's ids and wanted rows go up as one upload (each is a
     * round trip the GPU idles through): the rows right after the ids,
     * in the ids region, where it has room. */
    int32_t both[STEP_IDS];
    uint64_t oids_at = sc->oids;
    int rc;
    if (o->ahead) {
        /* Token i is read where TOPK puts the best id of row i (strided
         * ids), so a fed step is the same list as the first, and one
         * graph.  A first step puts its tokens there itself (the rest of
         * the rows, which TOPK rewrites, as zeros). */
        const uint64_t id_at = sc->tk + (uint64_t)o->tp->k * sizeof(float), row = 2 * (uint64_t)o->tp->k;
        t.ids = sih_ids(sc->buf, id_at, bt->n);
        t.ids.nb[0] = row * sizeof(int32_t);
        rc = SI_OK;
        if (!o->feed && !o->post) {   /* (a fed or posted step finds both as the previous left them) */
            int32_t *up = (int32_t *)m->tk_host;
            const uint64_t words = (bt->n - 1) * row + 1;
            memset(up, 0, words * sizeof *up);
            for (uint32_t i = 0; i < bt->n; i++)
                up[i * row] = bt->tokens[i];
            rc = m->bops->upload(m->b, sc->buf, id_at, up, words * sizeof *up, err);
            if (rc == SI_OK)
                rc = m->bops->upload(m->b, sc->buf, sc->oids, m->oids, n_out * sizeof(int32_t), err);
        }
    } else if (bt->n + n_out <= STEP_IDS && bt->n + n_out <= sc->cap) {
        memcpy(both, bt->tokens, bt->n * sizeof(int32_t));
        memcpy(both + bt->n, m->oids, n_out * sizeof(int32_t));
        oids_at = sc->ids + (uint64_t)bt->n * sizeof(int32_t);
        rc = m->bops->upload(m->b, sc->buf, sc->ids, both, (uint64_t)(bt->n + n_out) * sizeof(int32_t), err);
    } else {
        rc = m->bops->upload(m->b, sc->buf, sc->ids, bt->tokens, (uint64_t)bt->n * sizeof(int32_t), err);
        if (rc == SI_OK)
            rc = m->bops->upload(m->b, sc->buf, sc->oids, m->oids, (uint64_t)n_out * sizeof(int32_t), err);
    }
    if (rc != SI_OK)
        return rc;
    plan p = { .ops = m->ops, .layer = m->op_layer, .n = 0, .cur = HEAD_LAYER };
    p.n = sih_plan_trunk(m, &t, bt->pos, bt->seq, &xf);
    if (o->post) {   /* the tokens, posted by the host, first */
        memmove(m->ops + 1, m->ops, p.n * sizeof *m->ops);
        memmove(m->op_layer + 1, m->op_layer, p.n * sizeof *m->op_layer);
        m->ops[0] = (si_op){ .kind = SI_OP_HOST_IDS, .dst = t.ids };
        m->op_layer[0] = HEAD_LAYER;
        p.n++;
    }
    si_tensor oids = sih_ids(sc->buf, oids_at, n_out);
    si_tensor xo = sih_act(sc->buf, sc->xo, m->hp.n_embd, n_out);
    si_tensor xn = sih_act(sc->buf, sc->xn, m->hp.n_embd, n_out);
    si_tensor lg = sih_act(sc->buf, sc->lg, m->hp.n_vocab, n_out), tk;
    plan_head(&p, m, &t.x[xf], &oids, &xo, &xn);
    matmul(&p, &lg, &m->output, &xn);
    const bool topk_in = o->tp != NULL && o->tp->pen_off == NULL;
    if (topk_in)
        plan_topk(&p, m, &lg, n_out, o, &tk);
    const uint32_t k = topk_in ? o->tp->k : 0;
    if (m->step_ok.n_ops != p.n || m->step_ok.n_tok != bt->n || m->step_ok.n_out != n_out || m->step_ok.k != k ||
        m->step_ok.buf != sc->buf || m->step_ok.ahead != o->ahead || m->step_ok.post != o->post) {
        if ((rc = sih_plan_check(m, m->ops, m->op_layer, p.n, bt->n, err)) != SI_OK)
            return rc;
        m->step_ok.n_tok = bt->n;
        m->step_ok.n_out = n_out;
        m->step_ok.k = k;
        m->step_ok.n_ops = p.n;
        m->step_ok.buf = sc->buf;
        m->step_ok.ahead = o->ahead;
        m->step_ok.post = o->post;
    }
    *touched = true;
    if ((rc = (topk_in ? run_then_fetch : run)(m, m->ops, p.n, err)) != SI_OK)
        return rc;
    if (o->ahead)
        return ahead_fetch(m, o, n_out, err);
    if (topk_in)
        return topk_fetch(m, n_out, o, err);
    if (o->tp != NULL)
        return chunk_topk(m, &lg, n_out, o, err);
    rc = m->bops->download(m->b, o->logits + (size_t)o->row * m->hp.n_vocab, sc->buf, sc->lg,
                           (uint64_t)n_out * m->hp.n_vocab * sizeof(float), err);
    o->row += n_out;
    return rc;
}

static int forward_chunks(si_model *m, const si_batch *bt, sih_out *o, bool *touched, si_err *err)
{
    if (bt->n <= m->sc.cap) {
        const uint32_t n_out = wanted_rows(m, bt, 0, bt->n);
        if (n_out >= 1 && n_out <= SIH_LOGIT_ROWS)
            return forward_step(m, bt, n_out, o, touched, err);
    }
    for (uint32_t t0 = 0; t0 < bt->n; t0 += m->sc.cap) {
        uint32_t T = bt->n - t0 < m->sc.cap ? bt->n - t0 : m->sc.cap;
        sih_acts t;
        int xf, rc;
        sih_acts_init(m, T, &t);
        rc = m->bops->upload(m->b, m->sc.buf, m->sc.ids, bt->tokens + t0,
                             (uint64_t)T * sizeof(int32_t), err);
        if (rc != SI_OK)
            return rc;
        size_t n = sih_plan_trunk(m, &t, bt->pos + t0, bt->seq + t0, &xf);
        if ((rc = sih_plan_check(m, m->ops, m->op_layer, n, T, err)) != SI_OK)
            return rc;
        *touched = true;
        if ((rc = run(m, m->ops, n, err)) != SI_OK)
            return rc;
        const uint32_t n_out = wanted_rows(m, bt, t0, T);
        if (n_out > 0 && (rc = chunk_logits(m, &t.x[xf], n_out, o, err)) != SI_OK)
            return rc;
    }
    return SI_OK;
}

/* A checked batch through the trunk (forward_chunks, or for a submit
 * forward_step), then each sequence's length. */
static int forward_body(si_model *m, const si_batch *bt, const si_batch *checked, sih_out *o, si_err *err)
{
    const void *dst = o->ahead ? (const void *)m->tk_host   /* (the queue's rows) */
                    : o->tp != NULL ? (const void *)o->vals : (const void *)o->logits;
    if (o->tp != NULL && o->ids == NULL && !o->ahead)
        dst = NULL;
    int rc = check_batch(m, checked, dst, err);
    if (rc != SI_OK)
        return rc;
    if ((rc = sih_scratch_reserve(m, bt->n, err)) != SI_OK)
        return rc;
    bool touched = false;
    rc = o->ahead ? forward_step(m, bt, wanted_rows(m, bt, 0, bt->n), o, &touched, err)
                  : forward_chunks(m, bt, o, &touched, err);
    if (rc != SI_OK && !touched)
        return rc;
    for (uint32_t i = 0; i < bt->n; i++) {
        uint32_t s = (uint32_t)bt->seq[i];
        /* A step that failed after running ops may have advanced some
         * layers' state but not others: the sequences of the batch are
         * unusable until seq_reset. */
        m->n_past[s] = rc == SI_OK ? (uint32_t)bt->pos[i] + 1 : UINT32_MAX;
    }
    return rc;
}

static int forward_any(si_model *m, const si_batch *bt, sih_out *o, si_err *err)
{
    if (bt == NULL)
        return si_err_set(err, SI_EINVAL, "forward: NULL batch");
    if (bt->n == 0)
        return SI_OK;
    if (m->ahead.n > 0 || m->ahead.post.pending)
        return si_err_set(err, SI_EINVAL, "forward: %u submitted steps not collected", m->ahead.n + m->ahead.post.pending);
    m->ahead.feed_ok = false;   /* (this exec overwrites what a fed step reads) */
    return forward_body(m, bt, bt, o, err);
}

int sih_forward(si_model *m, const si_batch *bt, float *logits, si_err *err)
{
    sih_out o = { .logits = logits };
    return forward_any(m, bt, &o, err);
}

/* k in range and the backend's TOPK asked for it now: refusing after the
 * trunk ran would leave the sequences unusable. */
static int topk_ok(const si_model *m, const si_topk_params *tp, const char *what, si_err *err)
{
    uint32_t kmax = m->hp.n_vocab < SI_TOPK_MAX ? m->hp.n_vocab : SI_TOPK_MAX;
    if (tp->k < 1 || tp->k > kmax)
        return si_err_set(err, SI_EINVAL, "%s: k %u outside [1, %u]", what, tp->k, kmax);
    si_tensor lg = sih_act(m->sc.buf, m->sc.lg, m->hp.n_vocab, 1);
    si_tensor tk = sih_act(m->sc.buf, m->sc.tk, 2 * (int64_t)tp->k, 1);
    si_op probe = { .kind = SI_OP_TOPK, .dst = tk, .src = { &lg } };
    probe.p.topk = (si_topk_params){ .k = tp->k, .repeat_penalty = 1.0f };
    if (!m->bops->supports(m->b, &probe))
        return si_err_set(err, SI_EUNSUPPORTED, "backend '%s' refuses TOPK with k %u: use the full logits",
                          m->be_name, tp->k);
    return SI_OK;
}

int sih_forward_topk(si_model *m, const si_batch *bt, const si_topk_params *tp, float *vals, int32_t *ids,
                     si_err *err)
{
    if (tp == NULL)
        return si_err_set(err, SI_EINVAL, "forward_topk: NULL parameters");
    if (!m->has_topk)
        return si_err_set(err, SI_EUNSUPPORTED, "backend '%s' has no TOPK op: use the full logits", m->be_name);
    int rc = topk_ok(m, tp, "forward_topk", err);
    if (rc != SI_OK)
        return rc;
    sih_out o = { .tp = tp, .vals = vals, .ids = ids };
    return forward_any(m, bt, &o, err);
}

/* Decode ahead (plugin.h 1.3, 1.4).  A submit is forward_step's list
 * with token i read at TOPK's id slot of row i (strided ids) and the rows
 * fetched by download_start into the queue; the next submit may feed on
 * them because nothing else ran in between (feed_ok; the same n, so the
 * scratch did not move) and the backend orders the fetch's copy before
 * the next list overwrites the slots.  A posted step is the fed step's
 * list with a HOST_IDS op first, writing the posted tokens there. */
int sih_topk_submit(si_model *m, const si_batch *bt, const si_topk_params *tp, uint32_t flags, si_err *err)
{
    if (bt == NULL || tp == NULL)
        return si_err_set(err, SI_EINVAL, "topk_submit: NULL argument");
    if (!m->has_topk)
        return si_err_set(err, SI_EUNSUPPORTED, "backend '%s' has no TOPK op: use the full logits", m->be_name);
    if (bt->n < 1 || bt->n > SI_SUBMIT_MAX_ROWS || bt->n > m->sc.cap || bt->want_logits == NULL ||
        bt->pos == NULL || bt->seq == NULL)
        return si_err_set(err, SI_EINVAL, "topk_submit: a decode step of 1..%d sequences (got %u tokens)",
                          SI_SUBMIT_MAX_ROWS, bt->n);
    for (uint32_t i = 0; i < bt->n; i++)
        if (bt->want_logits[i] == 0 || (i > 0 && bt->seq[i] == bt->seq[i - 1]))
            return si_err_set(err, SI_EINVAL, "topk_submit: token %u %s", i,
                              bt->want_logits[i] == 0 ? "wants no logits" : "is a second token of its sequence");
    if (tp->pen_off != NULL)
        return si_err_set(err, SI_EINVAL, "topk_submit: penalties need the tokens before the step (use forward_topk)");
    if ((flags & ~(SI_SUBMIT_FEED | SI_SUBMIT_POST)) != 0 || flags == (SI_SUBMIT_FEED | SI_SUBMIT_POST))
        return si_err_set(err, SI_EINVAL, "topk_submit: flags 0x%x (FEED or POST, not both)", flags);
    const bool feed = (flags & SI_SUBMIT_FEED) != 0, post = (flags & SI_SUBMIT_POST) != 0;
    if (m->ahead.post.pending)
        return si_err_set(err, SI_EINVAL, "topk_submit: the step before waits for its tokens (topk_post first)");
    if (m->ahead.n == SI_SUBMITS_IN_FLIGHT)
        return si_err_set(err, SI_EINVAL, "topk_submit: %d steps queued already (collect one first)",
                          SI_SUBMITS_IN_FLIGHT);
    if ((feed || post) && (!m->ahead.feed_ok || m->ahead.k != tp->k || m->ahead.n_seq != bt->n ||
                           memcmp(m->ahead.seq, bt->seq, bt->n * sizeof *bt->seq) != 0))
        return si_err_set(err, SI_EINVAL, "topk_submit: a %s step follows a submit of the same sequences and k "
                          "with nothing run between", feed ? "fed" : "posted");
    if (!feed && !post && bt->tokens == NULL)
        return si_err_set(err, SI_EINVAL, "topk_submit: no token");
    int rc = topk_ok(m, tp, "topk_submit", err);
    if (rc != SI_OK)
        return rc;
    /* A fed token is the device's own TOPK id, in [0, V) by the op's
     * definition, a posted one is checked at the post: the check sees a
     * stand-in. */
    static const int32_t stand_in[SI_SUBMIT_MAX_ROWS];
    si_batch checked = *bt;
    if (feed || post)
        checked.tokens = stand_in;
    if (post && !m->has_post) {   /* deferred: checked now, run at the post */
        if ((rc = check_batch(m, &checked, m->tk_host, err)) != SI_OK)
            return rc;
        m->ahead.post.pending = m->ahead.post.deferred = true;
        m->ahead.post.k = tp->k;
        memcpy(m->ahead.post.pos, bt->pos, bt->n * sizeof *bt->pos);
        return SI_OK;
    }
    m->ahead.feed_ok = false;
    sih_out o = { .tp = tp, .ahead = true, .feed = feed, .post = post };
    rc = forward_body(m, bt, &checked, &o, err);
    if (rc == SI_OK) {
        m->ahead.feed_ok = true;
        m->ahead.k = tp->k;
        m->ahead.n_seq = bt->n;
        memcpy(m->ahead.seq, bt->seq, bt->n * sizeof *bt->seq);
        m->ahead.post.pending = post;
        m->ahead.post.deferred = false;
    } else if (post) {   /* (a HOST_IDS op queued before the failure let go; none: refused, nothing changes) */
        si_err scratch = { { 0 } };
        m->bops->post_ids(m->b, stand_in, bt->n, &scratch);
    }
    return rc;
}

int sih_topk_post(si_model *m, const int32_t *tokens, uint32_t n, si_err *err)
{
    if (tokens == NULL)
        return si_err_set(err, SI_EINVAL, "topk_post: NULL tokens");
    if (!m->ahead.post.pending)
        return si_err_set(err, SI_EINVAL, "topk_post: no submitted step waits for tokens");
    if (n != m->ahead.n_seq)
        return si_err_set(err, SI_EINVAL, "topk_post: %u tokens for a step of %u sequences", n, m->ahead.n_seq);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->hp.n_vocab)
            return si_err_set(err, SI_ERANGE, "topk_post: token %u: id %d outside the vocabulary [0, %u)", i,
                              tokens[i], m->hp.n_vocab);
    m->ahead.post.pending = false;
    if (m->ahead.post.deferred) {
        uint8_t want[SI_SUBMIT_MAX_ROWS];
        memset(want, 1, sizeof want);
        const si_topk_params tp = { .k = m->ahead.post.k, .repeat_penalty = 1.0f };
        const si_batch bt = { .n = n, .tokens = tokens, .pos = m->ahead.post.pos, .seq = m->ahead.seq,
                              .want_logits = want };
        sih_out o = { .tp = &tp, .ahead = true };
        m->ahead.feed_ok = false;
        int rc = forward_body(m, &bt, &bt, &o, err);
        m->ahead.feed_ok = rc == SI_OK;
        return rc;
    }
    const uint32_t last = (m->ahead.head + m->ahead.n - 1) % SI_SUBMITS_IN_FLIGHT;
    m->ahead.q[last].owed = false;
    return m->bops->post_ids(m->b, tokens, n, err);
}

int sih_topk_collect(si_model *m, float *vals, int32_t *ids, si_err *err)
{
    if (vals == NULL || ids == NULL)
        return si_err_set(err, SI_EINVAL, "topk_collect: NULL argument");
    if (m->ahead.n == 0)
        return si_err_set(err, SI_EINVAL, "topk_collect: no submitted step%s",
                          m->ahead.post.pending ? " run (the last waits for topk_post)" : "");
    sih_queued *q = &m->ahead.q[m->ahead.head];
    if (q->owed)   /* (its wait would never end) */
        return si_err_set(err, SI_EINVAL, "topk_collect: the oldest step waits for its tokens (topk_post first)");
    m->ahead.head = (m->ahead.head + 1) % SI_SUBMITS_IN_FLIGHT;
    m->ahead.n--;
    int rc = q->async ? m->bops->download_wait(m->b, q->ticket, err) : SI_OK;
    if (rc != SI_OK) {
        /* (what failed ran in that step or one before: the sequence of
         * the queue is unusable, as after a failed forward) */
        m->ahead.feed_ok = false;
        for (uint32_t i = 0; i < m->ahead.n_seq; i++)
            if (m->ahead.seq[i] >= 0 && (uint32_t)m->ahead.seq[i] < m->n_seq)
                m->n_past[m->ahead.seq[i]] = UINT32_MAX;
        return rc;
    }
    for (uint32_t r = 0; r < q->n; r++) {
        const float *row = q->row + (size_t)r * 2 * q->k;
        memcpy(vals + (size_t)r * q->k, row, q->k * sizeof(float));
        memcpy(ids + (size_t)r * q->k, row + q->k, q->k * sizeof(int32_t));
    }
    return SI_OK;
}
