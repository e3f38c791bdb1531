/* backends/cpu/cpu_elem.c — the small ops: GET_ROWS, RMSNORM, ADD, MUL,
 * SWIGLU.  F32 activations of up to 4 dims with contiguous rows (ne0) and
 * any row strides; dst may alias a source (each element is read before it
 * is written, row by row).
 */
#include <math.h>

#include "cpu_internal.h"

#define ELEMS_PER_TASK 16384   /* below this a parallel run costs more than it saves */

typedef struct elem_job {
    const si_host   *host;
    const si_op     *op;
    int64_t          rows, rows_per_task;
    atomic_int       fail;
} elem_job;

static void rmsnorm_row(const float *x, const float *w, float *y, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * scale * w[i];
}

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

static void elem_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    elem_job *jb = ctx;
    const si_op *op = jb->op;
    const si_tensor *s0 = op->src[0], *s1 = op->src[1], *d = &op->dst;
    int64_t r0 = task * jb->rows_per_task, r1 = r0 + jb->rows_per_task;
    if (r1 > jb->rows)
        r1 = jb->rows;
    const int64_t n = d->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        float *y = (float *)(cpu_ptr(d) + cpu_row_off(d, r));
        if (op->kind == SI_OP_GET_ROWS) {
            int32_t id;
            memcpy(&id, cpu_ptr(s1) + (uint64_t)r * s1->nb[0], sizeof id);
            const uint8_t *src = cpu_ptr(s0) + (uint64_t)id * (cpu_ne(s0, 1) > 1 ? s0->nb[1] : 0);
            int rc = cpu_row_to_f32(jb->host, s0->type, src, n, y, NULL);
            if (rc != SI_OK)
                atomic_store(&jb->fail, rc);
            continue;
        }
        const float *a = (const float *)(cpu_ptr(s0) + cpu_row_off(s0, r));
        if (op->kind == SI_OP_RMSNORM) {
            rmsnorm_row(a, (const float *)cpu_ptr(s1), y, n, op->p.norm.eps);
            continue;
        }
        const float *b = (const float *)(cpu_ptr(s1) + cpu_row_off(s1, r));
        switch (op->kind) {
        case SI_OP_ADD:
            for (int64_t i = 0; i < n; i++)
                y[i] = a[i] + b[i];
            break;
        case SI_OP_MUL:
            for (int64_t i = 0; i < n; i++)
                y[i] = a[i] * b[i];
            break;
        default: /* SWIGLU */
            for (int64_t i = 0; i < n; i++)
                y[i] = silu(a[i]) * b[i];
            break;
        }
    }
}

int cpu_elem_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_tensor *d = &op->dst;
    if (op->kind == SI_OP_GET_ROWS) {
        const si_tensor *ids = op->src[1];
        int64_t n_rows = cpu_ne(op->src[0], 1);
        for (int64_t i = 0; i < ids->ne[0]; i++) {
            int32_t id;
            memcpy(&id, cpu_ptr(ids) + (uint64_t)i * ids->nb[0], sizeof id);
            if (id < 0 || id >= n_rows)
                return si_err_set(err, SI_ERANGE, "cpu: GET_ROWS: id %d at index %lld outside [0, %lld)", id,
                                  (long long)i, (long long)n_rows);
        }
    }
    elem_job jb = { .host = b->host, .op = op, .rows = cpu_nrows(d) };
    atomic_init(&jb.fail, SI_OK);
    if (jb.rows == 0 || d->ne[0] == 0)
        return SI_OK;
    int64_t per = ELEMS_PER_TASK / d->ne[0];
    jb.rows_per_task = per < 1 ? 1 : per;
    cpu_pool_run(b->pool, (jb.rows + jb.rows_per_task - 1) / jb.rows_per_task, elem_task, &jb);
    if (atomic_load(&jb.fail) != SI_OK)
        return si_err_set(err, atomic_load(&jb.fail), "cpu: GET_ROWS: host dequant of a %s row failed",
                          cpu_type_name(b, op->src[0]->type));
    return SI_OK;
}
