/* backends/cpu/cpu_moe.c — SI_OP_MOE: routed SwiGLU experts plus the
 * sigmoid-gated shared expert (spec qwen35-gguf.md §3.7, §6.9).
 *
 *   1. router logits = router x h (any weight type), per token softmax over
 *      all experts in f32, top-k (ties: lower index), weights renormalised
 *      with the denominator clamped to >= 6.103515625e-5;
 *   2. the batch's (token, k) assignments are GROUPED by expert: every
 *      expert's gate/up/down rows are decoded once per batch and dotted
 *      with all of its tokens (moe = per_token makes each assignment its own
 *      group instead, which streams the weights once per assignment: the
 *      A/B baseline);
 *   3. gate/up over the group's rows -> silu(gate) * up -> down, each
 *      assignment's result in its own row of a workspace;
 *   4. shared expert over all tokens, gamma = sigmoid(gate_inp . h);
 *   5. dst[t] = sum_k w[t][k] * routed[t][k] + gamma[t] * shared[t], summed
 *      in a fixed order (no atomics: results do not depend on scheduling).
 * Activations are quantised to int8 once per op (h once, the SwiGLU
 * outputs once) when a weight's fast path needs it.
 */
#include <math.h>

#include "cpu_internal.h"

typedef struct moe_job {
    const si_op *op;
    si_backend  *b;
    si_oc_moe_dims d;
    /* routing */
    float       *logits;        /* [n][E]  */
    int32_t     *sel;           /* [n][K]  */
    float       *wts;           /* [n][K]  */
    /* groups: entries [g_off[g], g_off[g] + g_cnt[g]) of tok/slot */
    int32_t     *tok, *slot;    /* [n*K]   */
    int32_t     *g_exp, *g_off, *g_cnt;
    int64_t      n_groups, chunk1, n_chunk1, chunk3, n_chunk3;
    /* expert weights and activations */
    cpu_mm       gate, up, down;  /* templates: data of expert 0, no rows yet */
    uint64_t     gate_es, up_es, down_es;   /* bytes per expert */
    float       *g, *u, *y;     /* [n*K][F], [n*K][F], [n*K][H] */
    cpu_q8       aq;            /* act rows (down input) when down is int8 */
    /* shared expert */
    float       *gs, *us, *ys, *gamma;
    cpu_q8       asq;
    atomic_int   fail;
} moe_job;

static void route_task(void *ctx, int64_t t, int tid)
{
    (void)tid;
    moe_job *jb = ctx;
    const int64_t E = jb->d.E, K = jb->d.K;
    float *l = jb->logits + (size_t)t * E;
    float mx = -INFINITY, sum = 0.0f;
    for (int64_t e = 0; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (int64_t e = 0; e < E; e++) {
        l[e] = expf(l[e] - mx);
        sum += l[e];
    }
    for (int64_t e = 0; e < E; e++)
        l[e] /= sum;
    int32_t *sel = jb->sel + (size_t)t * K;
    float *w = jb->wts + (size_t)t * K, tot = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t j = 0; j < k; j++)
                taken |= sel[j] == e;
            if (!taken && (best < 0 || l[e] > l[best]))
                best = e;
        }
        sel[k] = (int32_t)best;
        w[k] = l[best];
        tot += w[k];
    }
    if (!(tot >= 6.103515625e-5f) && !isnan(tot))
        tot = 6.103515625e-5f;
    for (int64_t k = 0; k < K; k++)
        w[k] /= tot;
}

/* The weight view of expert e, rows [r0, r1) of group g. */
static void run_group(const moe_job *jb, const cpu_mm *tmpl, uint64_t es, int64_t g, int64_t r0, int64_t r1,
                      const int32_t *x_idx, void *tls)
{
    cpu_mm mm = *tmpl;
    mm.w.data += (uint64_t)jb->g_exp[g] * es;
    mm.x_idx = x_idx + jb->g_off[g];
    mm.y_idx = jb->slot + jb->g_off[g];
    cpu_mm_range(&mm, r0, r1, 0, jb->g_cnt[g], tls);
}

static void gate_up_task(void *ctx, int64_t task, int tid)
{
    moe_job *jb = ctx;
    int64_t g = task / jb->n_chunk1, r0 = (task % jb->n_chunk1) * jb->chunk1;
    int64_t r1 = r0 + jb->chunk1 < jb->d.F ? r0 + jb->chunk1 : jb->d.F;
    void *tls = jb->b->tls[tid].p;
    run_group(jb, &jb->gate, jb->gate_es, g, r0, r1, jb->tok, tls);
    run_group(jb, &jb->up, jb->up_es, g, r0, r1, jb->tok, tls);
}

static void down_task(void *ctx, int64_t task, int tid)
{
    moe_job *jb = ctx;
    int64_t g = task / jb->n_chunk3, r0 = (task % jb->n_chunk3) * jb->chunk3;
    int64_t r1 = r0 + jb->chunk3 < jb->d.H ? r0 + jb->chunk3 : jb->d.H;
    run_group(jb, &jb->down, jb->down_es, g, r0, r1, jb->slot, jb->b->tls[tid].p);
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

/* act = silu(g) * u in place in g, then int8 rows when down needs them. */
typedef struct act_job {
    float        *g;
    const float  *u;
    int64_t       F;
    const cpu_q8 *q;   /* NULL: down reads f32 */
} act_job;

static void act_task(void *ctx, int64_t r, int tid)
{
    (void)tid;
    const act_job *jb = ctx;
    float *g = jb->g + (size_t)r * jb->F;
    const float *u = jb->u + (size_t)r * jb->F;
    for (int64_t i = 0; i < jb->F; i++)
        g[i] = silu(g[i]) * u[i];
    if (jb->q != NULL)
        cpu_quantize_row_q8(g, jb->F, jb->q, r);
}

static void combine_task(void *ctx, int64_t t, int tid)
{
    (void)tid;
    moe_job *jb = ctx;
    const int64_t H = jb->d.H, K = jb->d.K;
    float *out = (float *)(cpu_ptr(&jb->op->dst) + (uint64_t)t * jb->op->dst.nb[1]);
    for (int64_t h = 0; h < H; h++)
        out[h] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        const float w = jb->wts[t * K + k], *y = jb->y + (size_t)(t * K + k) * H;
        for (int64_t h = 0; h < H; h++)
            out[h] += w * y[h];
    }
    if (jb->d.shared) {
        const float gm = 1.0f / (1.0f + expf(-jb->gamma[t])), *y = jb->ys + (size_t)t * H;
        for (int64_t h = 0; h < H; h++)
            out[h] += gm * y[h];
    }
}

static void mm_template(si_backend *b, cpu_mm *mm, const si_tensor *w, int64_t rows, uint64_t first_row,
                        const float *x, size_t x_stride, const cpu_q8 *xq, float *y, size_t y_stride)
{
    memset(mm, 0, sizeof *mm);
    mm->w.data = cpu_ptr(w) + first_row * w->nb[1];
    mm->w.type = w->type;
    mm->w.in = w->ne[0];
    mm->w.rows = rows;
    mm->w.row_bytes = w->nb[1];
    cpu_mm_setup(b, mm);
    mm->x = x;
    mm->x_stride = x_stride;
    if (xq != NULL)
        mm->xq = *xq;
    mm->y = y;
    mm->y_stride = y_stride;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Shared expert over all tokens: ys[n][H], gamma[n] (pre-sigmoid). */
static int shared_expert(moe_job *jb, const cpu_q8 *hq, si_err *err)
{
    si_backend *b = jb->b;
    const si_op *op = jb->op;
    const si_oc_moe_dims *d = &jb->d;
    const float *h = (const float *)cpu_ptr(op->src[0]);
    const size_t hs = d->n > 1 ? op->src[0]->nb[1] / sizeof(float) : 0;
    cpu_mm mm;
    int rc;
    mm_template(b, &mm, op->src[5], 1, 0, h, hs, hq, jb->gamma, 1);
    if ((rc = cpu_mm_run(b, &mm, d->n, err)) != SI_OK)
        return rc;
    mm_template(b, &mm, op->src[6], d->Fs, 0, h, hs, hq, jb->gs, (size_t)d->Fs);
    if ((rc = cpu_mm_run(b, &mm, d->n, err)) != SI_OK)
        return rc;
    mm_template(b, &mm, op->src[7], d->Fs, 0, h, hs, hq, jb->us, (size_t)d->Fs);
    if ((rc = cpu_mm_run(b, &mm, d->n, err)) != SI_OK)
        return rc;
    mm_template(b, &mm, op->src[8], d->H, 0, jb->gs, (size_t)d->Fs, &jb->asq, jb->ys, (size_t)d->H);
    act_job aj = { jb->gs, jb->us, d->Fs, mm.path == CPU_PATH_Q8 ? &jb->asq : NULL };
    cpu_pool_run(b->pool, d->n, act_task, &aj);
    return cpu_mm_run(b, &mm, d->n, err);
}

int cpu_moe_exec(si_backend *b, const si_op *op, si_err *err)
{
    moe_job job = { .op = op, .b = b };
    moe_job *jb = &job;
    si_oc_moe_dims_of(op, &jb->d);
    const si_oc_moe_dims *d = &jb->d;
    const int64_t n = d->n, H = d->H, E = d->E, K = d->K, F = d->F, NK = n * K;
    if (n == 0)
        return SI_OK;
    atomic_init(&jb->fail, SI_OK);
    const si_tensor *W[9];
    for (int i = 0; i < 9; i++)
        W[i] = op->src[i];
    /* int8 rows of h when a weight that reads h (router, gate, up, the
     * shared gate_inp/gate/up) takes the int8 path */
    static const int reads_h[] = { 1, 2, 3, 5, 6, 7 };
    bool need_hq = false;
    for (size_t i = 0; i < sizeof reads_h / sizeof reads_h[0]; i++) {
        const si_tensor *t = W[reads_h[i]];
        if (t != NULL && !b->mm_ref && cpu_type_path(t->type) == CPU_PATH_Q8)
            need_hq = true;
    }
    const bool down_q8 = !b->mm_ref && cpu_type_path(W[4]->type) == CPU_PATH_Q8;
    const bool sdown_q8 = d->shared && !b->mm_ref && cpu_type_path(W[8]->type) == CPU_PATH_Q8;

    size_t f = sizeof(float), i32 = sizeof(int32_t);
    size_t bytes = cpu_round((size_t)(n * E) * f) + cpu_round((size_t)NK * f) + 6 * cpu_round((size_t)NK * i32) +
                   2 * cpu_round((size_t)NK * (size_t)F * f) + cpu_round((size_t)NK * (size_t)H * f) +
                   cpu_round((size_t)E * i32) +
                   (need_hq ? cpu_q8_bytes(H, n) : 0) + (down_q8 ? cpu_q8_bytes(F, NK) : 0);
    if (d->shared)
        bytes += 2 * cpu_round((size_t)(n * d->Fs) * f) + cpu_round((size_t)(n * H) * f) + cpu_round((size_t)n * f) +
                 (sdown_q8 ? cpu_q8_bytes(d->Fs, n) : 0);
    void *ws = cpu_work_reserve(b, bytes, err);
    if (ws == NULL)
        return SI_ENOMEM;
    cpu_carve cv = { ws, 0 };
    jb->logits = cpu_carve_take(&cv, (size_t)(n * E) * f);
    jb->wts = cpu_carve_take(&cv, (size_t)NK * f);
    jb->sel = cpu_carve_take(&cv, (size_t)NK * i32);
    jb->tok = cpu_carve_take(&cv, (size_t)NK * i32);
    jb->slot = cpu_carve_take(&cv, (size_t)NK * i32);
    jb->g_exp = cpu_carve_take(&cv, (size_t)NK * i32);
    jb->g_off = cpu_carve_take(&cv, (size_t)NK * i32);
    jb->g_cnt = cpu_carve_take(&cv, (size_t)NK * i32);
    jb->g = cpu_carve_take(&cv, (size_t)NK * (size_t)F * f);
    jb->u = cpu_carve_take(&cv, (size_t)NK * (size_t)F * f);
    jb->y = cpu_carve_take(&cv, (size_t)NK * (size_t)H * f);
    int32_t *cnt = cpu_carve_take(&cv, (size_t)E * i32);   /* per expert: count, then group */
    cpu_q8 hq = { 0 };
    if (need_hq)
        cpu_q8_carve(&hq, cpu_carve_take(&cv, cpu_q8_bytes(H, n)), H, n);
    if (down_q8)
        cpu_q8_carve(&jb->aq, cpu_carve_take(&cv, cpu_q8_bytes(F, NK)), F, NK);
    if (d->shared) {
        jb->gs = cpu_carve_take(&cv, (size_t)(n * d->Fs) * f);
        jb->us = cpu_carve_take(&cv, (size_t)(n * d->Fs) * f);
        jb->ys = cpu_carve_take(&cv, (size_t)(n * H) * f);
        jb->gamma = cpu_carve_take(&cv, (size_t)n * f);
        if (sdown_q8)
            cpu_q8_carve(&jb->asq, cpu_carve_take(&cv, cpu_q8_bytes(d->Fs, n)), d->Fs, n);
    }

    /* 1. router and top-k */
    const float *h = (const float *)cpu_ptr(W[0]);
    const size_t hs = n > 1 ? W[0]->nb[1] / f : 0;
    if (need_hq)
        cpu_quantize_rows(b, h, hs, n, &hq);
    cpu_mm mm;
    mm_template(b, &mm, W[1], E, 0, h, hs, &hq, jb->logits, (size_t)E);
    int rc = cpu_mm_run(b, &mm, n, err);
    if (rc != SI_OK)
        return rc;
    cpu_pool_run(b->pool, n, route_task, jb);

    /* 2. groups */
    if (b->moe_per_token) {
        for (int64_t a = 0; a < NK; a++) {
            jb->tok[a] = (int32_t)(a / K);
            jb->slot[a] = (int32_t)a;
            jb->g_exp[a] = jb->sel[a];
            jb->g_off[a] = (int32_t)a;
            jb->g_cnt[a] = 1;
        }
        jb->n_groups = NK;
    } else {
        /* Counting sort by expert, stable in token order. */
        memset(cnt, 0, (size_t)E * i32);
        for (int64_t a = 0; a < NK; a++)
            cnt[jb->sel[a]]++;
        int64_t G = 0, off = 0;
        for (int64_t e = 0; e < E; e++) {
            if (cnt[e] == 0)
                continue;
            jb->g_exp[G] = (int32_t)e;
            jb->g_off[G] = (int32_t)off;
            jb->g_cnt[G] = 0;
            off += cnt[e];
            cnt[e] = (int32_t)G++;      /* now: group of expert e */
        }
        for (int64_t a = 0; a < NK; a++) {
            int32_t g = cnt[jb->sel[a]];
            int32_t at = jb->g_off[g] + jb->g_cnt[g]++;
            jb->tok[at] = (int32_t)(a / K);
            jb->slot[at] = (int32_t)a;
        }
        jb->n_groups = G;
    }

    /* 3. routed experts */
    const uint64_t F_rows = (uint64_t)F;
    mm_template(b, &jb->gate, W[2], F, 0, h, hs, &hq, jb->g, (size_t)F);
    mm_template(b, &jb->up, d->fused ? W[2] : W[3], F, d->fused ? F_rows : 0, h, hs, &hq, jb->u, (size_t)F);
    mm_template(b, &jb->down, W[4], H, 0, jb->g, (size_t)F, &jb->aq, jb->y, (size_t)H);
    jb->gate_es = W[2]->nb[2];
    jb->up_es = d->fused ? W[2]->nb[2] : W[3]->nb[2];
    jb->down_es = W[4]->nb[2];
    atomic_int *fail = &jb->fail;
    jb->gate.fail = jb->up.fail = jb->down.fail = fail;
    size_t tls = max_sz(cpu_mm_tls_bytes(&jb->gate), max_sz(cpu_mm_tls_bytes(&jb->up), cpu_mm_tls_bytes(&jb->down)));
    if ((rc = cpu_tls_reserve(b, tls, err)) != SI_OK)
        return rc;
    /* Row chunks: about four tasks per thread overall, at least 8 rows. */
    int64_t want = 4 * (int64_t)b->n_threads;
    int64_t nc = (want + jb->n_groups - 1) / jb->n_groups;
    jb->chunk1 = (F + nc - 1) / nc < 8 ? 8 : (F + nc - 1) / nc;
    jb->n_chunk1 = (F + jb->chunk1 - 1) / jb->chunk1;
    jb->chunk3 = (H + nc - 1) / nc < 8 ? 8 : (H + nc - 1) / nc;
    jb->n_chunk3 = (H + jb->chunk3 - 1) / jb->chunk3;
    cpu_pool_run(b->pool, jb->n_groups * jb->n_chunk1, gate_up_task, jb);
    act_job aj = { jb->g, jb->u, F, down_q8 ? &jb->aq : NULL };
    cpu_pool_run(b->pool, NK, act_task, &aj);
    cpu_pool_run(b->pool, jb->n_groups * jb->n_chunk3, down_task, jb);
    if (atomic_load(fail) != SI_OK)
        return si_err_set(err, atomic_load(fail), "cpu: MOE: host dequant of an expert weight row failed");

    /* 4. shared expert, 5. combine */
    if (d->shared && (rc = shared_expert(jb, &hq, err)) != SI_OK)
        return rc;
    cpu_pool_run(b->pool, n, combine_task, jb);
    return SI_OK;
}
