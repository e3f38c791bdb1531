/* backends/cpu/cpu_topk.c — TOPK: the k best logits of each row after the
 * sampling penalties (plugin.h, si_topk_params), the reference the device
 * kernels are tested against.
 *
 * Per row: the row is copied into the thread's scratch (the penalties must
 * not touch the logits tensor), NaN becomes -inf, the penalties are
 * applied exactly as core/sample.c applies them, then one pass keeps the k
 * best in a sorted array.  Rows are scanned in id order, so an entry that
 * only ties the current k-th is never better than it (lower id wins):
 * most entries cost one comparison.
 */
#include <math.h>

#include "cpu_internal.h"

typedef struct topk_job {
    const si_op *op;
    si_backend  *b;
} topk_job;

/* One penalty, as core/sample.c's apply_penalties writes it: separate
 * statements of one rounding each (-std=c11 contracts nothing). */
static float penalised(float l, int32_t count, const si_topk_params *p)
{
    if (l == -INFINITY)
        return l;
    if (l <= 0.0f)
        l *= p->repeat_penalty;
    else
        l /= p->repeat_penalty;
    float sub = (float)count * p->frequency_penalty;
    sub += p->presence_penalty;
    l -= sub;
    return isnan(l) ? -INFINITY : l;
}

static void topk_row(const float *x, int64_t V, uint32_t k, float *vals, int32_t *ids)
{
    uint32_t m = 0;
    for (int64_t i = 0; i < V; i++) {
        float v = x[i];
        if (m == k && !(v > vals[k - 1]))
            continue;   /* not better than the k-th (ties: it has the lower id) */
        uint32_t j = m < k ? m++ : k - 1;
        while (j > 0 && v > vals[j - 1]) {   /* equal values keep the earlier (lower) id first */
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = (int32_t)i;
    }
}

static void topk_task(void *ctx, int64_t r, int tid)
{
    topk_job *jb = ctx;
    const si_op *op = jb->op;
    const si_topk_params *p = &op->p.topk;
    const si_tensor *s = op->src[0], *d = &op->dst;
    const int64_t V = s->ne[0];
    const float *x = (const float *)(cpu_ptr(s) + cpu_row_off(s, r));
    float *w = (float *)jb->b->tls[tid].p;
    for (int64_t i = 0; i < V; i++)
        w[i] = isnan(x[i]) ? -INFINITY : x[i];
    if (p->pen_off != NULL)
        for (int32_t j = p->pen_off[r]; j < p->pen_off[r + 1]; j++)
            w[p->pen_id[j]] = penalised(w[p->pen_id[j]], p->pen_count[j], p);
    float *y = (float *)(cpu_ptr(d) + cpu_row_off(d, r));
    float vals[SI_TOPK_MAX];
    int32_t ids[SI_TOPK_MAX];
    topk_row(w, V, p->k, vals, ids);
    memcpy(y, vals, p->k * sizeof *vals);
    memcpy(y + p->k, ids, p->k * sizeof *ids);   /* ids as int32 bit patterns */
}

int cpu_topk_exec(si_backend *b, const si_op *op, si_err *err)
{
    const int64_t n = cpu_ne(op->src[0], 1);
    if (n == 0)
        return SI_OK;
    int rc = cpu_tls_reserve(b, (size_t)op->src[0]->ne[0] * sizeof(float), err);
    if (rc != SI_OK)
        return rc;
    topk_job jb = { .op = op, .b = b };
    cpu_pool_run(b->pool, n, topk_task, &jb);
    return SI_OK;
}
