/* backends/cpu/cpu_elem.c — the small ops: GET_ROWS, RMSNORM, ADD, MUL,
 * SWIGLU.  F32 activations of up to 4 dims with contiguous rows (ne0) and
 * any row strides; dst may alias a source (each element is read before it
 * is written, row by row).
 */
#include <math.h>

#include "cpu_internal.h"

#define ELEMS_PER_TASK 16384   /* below this a parallel run costs more than it saves */

static const char *op_name(uint32_t kind)
{
    switch (kind) {
    case SI_OP_GET_ROWS: return "GET_ROWS";
    case SI_OP_RMSNORM:  return "RMSNORM";
    case SI_OP_ADD:      return "ADD";
    case SI_OP_MUL:      return "MUL";
    case SI_OP_SWIGLU:   return "SWIGLU";
    default:             return "?";
    }
}

static bool same_shape(const si_tensor *a, const si_tensor *b)
{
    for (int i = 0; i < SI_MAX_DIMS; i++)
        if (cpu_ne(a, i) != cpu_ne(b, i))
            return false;
    return true;
}

static int want_f32_nd(const si_backend *b, const si_tensor *t, const si_tensor *like, const char *op,
                       const char *what, si_err *err)
{
    if (t == NULL)
        return si_err_set(err, SI_EINVAL, "cpu: %s: %s is required", op, what);
    if (t->type != SI_TYPE_F32)
        return si_err_set(err, SI_EUNSUPPORTED, "cpu: %s: %s must be F32, not %s", op, what,
                          cpu_type_name(b, t->type));
    const char *why = cpu_tensor_check(b, t);
    if (why != NULL)
        return si_err_set(err, SI_EINVAL, "cpu: %s: %s: %s", op, what, why);
    if (like != NULL && !same_shape(t, like))
        return si_err_set(err, SI_EINVAL, "cpu: %s: %s is [%lld, %lld, %lld, %lld], src[0] is [%lld, %lld, %lld, %lld]",
                          op, what, (long long)t->ne[0], (long long)cpu_ne(t, 1), (long long)cpu_ne(t, 2),
                          (long long)cpu_ne(t, 3), (long long)like->ne[0], (long long)cpu_ne(like, 1),
                          (long long)cpu_ne(like, 2), (long long)cpu_ne(like, 3));
    return SI_OK;
}

int cpu_elem_check(const si_backend *b, const si_op *op, si_err *err)
{
    const char *name = op_name(op->kind);
    const si_tensor *s0 = op->src[0], *s1 = op->src[1];
    int rc;
    if (op->kind == SI_OP_GET_ROWS) {
        if (s0 == NULL || s1 == NULL)
            return si_err_set(err, SI_EINVAL, "cpu: GET_ROWS: src[0] (table) and src[1] (ids) are required");
        if (!cpu_type_supported(s0->type))
            return si_err_set(err, SI_EUNSUPPORTED, "cpu: GET_ROWS: table type %s (%u) is not supported",
                              cpu_type_name(b, s0->type), s0->type);
        const char *why = cpu_tensor_check(b, s0);
        if (why != NULL)
            return si_err_set(err, SI_EINVAL, "cpu: GET_ROWS: table: %s", why);
        if (cpu_ne(s0, 2) != 1 || cpu_ne(s0, 3) != 1)
            return si_err_set(err, SI_EUNSUPPORTED, "cpu: GET_ROWS: table must be 2-D");
        if (s1->type != SI_TYPE_I32)
            return si_err_set(err, SI_EUNSUPPORTED, "cpu: GET_ROWS: ids must be I32, not %s",
                              cpu_type_name(b, s1->type));
        if ((why = cpu_tensor_check(b, s1)) != NULL)
            return si_err_set(err, SI_EINVAL, "cpu: GET_ROWS: ids: %s", why);
        if (cpu_ne(s1, 1) != 1 || cpu_ne(s1, 2) != 1 || cpu_ne(s1, 3) != 1)
            return si_err_set(err, SI_EUNSUPPORTED, "cpu: GET_ROWS: ids must be 1-D [n]");
        return cpu_want_f32(b, &op->dst, s0->ne[0], s1->ne[0], name, "dst", err);
    }
    if ((rc = want_f32_nd(b, s0, NULL, name, "src[0]", err)) != SI_OK)
        return rc;
    if (op->kind == SI_OP_RMSNORM) {
        if ((rc = cpu_want_f32(b, s1, s0->ne[0], 1, name, "src[1] (weight)", err)) != SI_OK)
            return rc;
        if (!(op->p.norm.eps >= 0.0f) || !isfinite(op->p.norm.eps))
            return si_err_set(err, SI_EINVAL, "cpu: RMSNORM: eps %g must be finite and >= 0", (double)op->p.norm.eps);
    } else if ((rc = want_f32_nd(b, s1, s0, name, "src[1]", err)) != SI_OK) {
        return rc;
    }
    return want_f32_nd(b, &op->dst, s0, name, "dst", err);
}

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
