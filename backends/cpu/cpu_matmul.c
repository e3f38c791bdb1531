/* backends/cpu/cpu_matmul.c — MATMUL, and the matmul core that MOE reuses.
 *
 * dst[out, n] = W[in, out] x X[in, n].  Work is split into tasks of
 * (weight rows) x (tokens): each weight row is decoded once per task into
 * thread scratch and dotted with every token of the task, so a batch
 * streams the weights once and the decode cost is shared by its tokens.
 *
 * Paths (cpu_internal.h, enum cpu_path):
 *   fast Q8   activations quantised once per op to int8 blocks of 32,
 *             integer dots per block (Q4_0..Q8_0, Q4_K, Q5_K, Q6_K)
 *   fast F32  own f32 decode (F16, BF16; F32 read in place) + f32 dot
 *   HOST      f32 row from host->dequant (Q2_K, Q3_K, IQ4_NL, IQ4_XS)
 *   ref       (matmul = ref) every type through host->dequant (F32 in
 *             place), f32 activations, double accumulation: the
 *             reference the fast path is tested against.
 */
#include <stdlib.h>

#include "cpu_internal.h"

#define TOK_TILE 64   /* tokens per task: their int8 activations stay in L2 */

void cpu_mm_setup(const si_backend *b, cpu_mm *mm)
{
    mm->ref = b->mm_ref;
    mm->path = b->mm_ref ? (mm->w.type == SI_TYPE_F32 ? CPU_PATH_F32 : CPU_PATH_HOST)
                         : cpu_type_path(mm->w.type);
    mm->host = b->host;
    mm->simd = b->simd;
    mm->packed = b->packed;
}

size_t cpu_mm_tls_bytes(const cpu_mm *mm)
{
    if (mm->path == CPU_PATH_Q8)
        return cpu_row8_bytes(mm->w.in);
    return cpu_round((size_t)mm->w.in * sizeof(float));
}

static double dot_ref(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

void cpu_mm_range(const cpu_mm *mm, int64_t r0, int64_t r1, int64_t j0, int64_t j1, void *tls)
{
    const int64_t in = mm->w.in;
    /* fewer than 4 tokens (decode): straight from the packed rows where
     * that gives the same bits (cpu_dot_packed) */
    if (mm->path == CPU_PATH_Q8 && j1 - j0 < 4 && cpu_dot_packed_ok(mm->w.type, mm->packed)) {
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *src = mm->w.data + (uint64_t)r * mm->w.row_bytes;
            for (int64_t j = j0; j < j1; j++) {
                int64_t xr = mm->x_idx ? mm->x_idx[j] : j;
                int64_t yr = mm->y_idx ? mm->y_idx[j] : j;
                mm->y[(size_t)yr * mm->y_stride + (size_t)r] = cpu_dot_packed(mm->w.type, src, &mm->xq, xr, in);
            }
        }
        return;
    }
    if (mm->path == CPU_PATH_Q8) {
        cpu_row8 row;
        cpu_row8_carve(&row, tls, in);
        for (int64_t r = r0; r < r1; r++) {
            cpu_decode_row8(mm->w.type, mm->w.data + (uint64_t)r * mm->w.row_bytes, in, &row, mm->simd);
            int64_t j = j0;
            for (; j + 4 <= j1; j += 4) {
                int64_t xr[4];
                float o[4];
                for (int t = 0; t < 4; t++)
                    xr[t] = mm->x_idx ? mm->x_idx[j + t] : j + t;
                cpu_dot_row8_x4(&row, &mm->xq, xr, in, mm->simd, o);
                for (int t = 0; t < 4; t++) {
                    int64_t yr = mm->y_idx ? mm->y_idx[j + t] : j + t;
                    mm->y[(size_t)yr * mm->y_stride + (size_t)r] = o[t];
                }
            }
            for (; j < j1; j++) {
                int64_t xr = mm->x_idx ? mm->x_idx[j] : j;
                int64_t yr = mm->y_idx ? mm->y_idx[j] : j;
                mm->y[(size_t)yr * mm->y_stride + (size_t)r] = cpu_dot_row8(&row, &mm->xq, xr, in, mm->simd);
            }
        }
        return;
    }
    float *wf = tls;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *src = mm->w.data + (uint64_t)r * mm->w.row_bytes;
        const float *w = wf;
        if (mm->w.type == SI_TYPE_F32) {
            w = (const float *)src;   /* GGUF data is at least 4-byte aligned */
        } else if (mm->path == CPU_PATH_F32) {
            cpu_decode_f32_simd(mm->w.type, src, in, wf, mm->simd);
        } else {
            int rc = mm->host->dequant(mm->w.type, src, wf, in, NULL);
            if (rc != SI_OK) {
                atomic_store(mm->fail, rc);
                return;
            }
        }
        for (int64_t j = j0; j < j1; j++) {
            int64_t xr = mm->x_idx ? mm->x_idx[j] : j;
            int64_t yr = mm->y_idx ? mm->y_idx[j] : j;
            const float *x = mm->x + (size_t)xr * mm->x_stride;
            mm->y[(size_t)yr * mm->y_stride + (size_t)r] =
                mm->ref ? (float)dot_ref(w, x, in) : cpu_dot_f32(w, x, in, mm->simd);
        }
    }
}

typedef struct mm_job {
    const cpu_mm *mm;
    si_backend   *b;
    int64_t       n, row_chunk, n_row_chunks, tok_chunk;
} mm_job;

static void mm_task(void *ctx, int64_t task, int tid)
{
    const mm_job *jb = ctx;
    int64_t rc = task % jb->n_row_chunks, tc = task / jb->n_row_chunks;
    int64_t r0 = rc * jb->row_chunk, r1 = r0 + jb->row_chunk;
    int64_t j0 = tc * jb->tok_chunk, j1 = j0 + jb->tok_chunk;
    if (r1 > jb->mm->w.rows)
        r1 = jb->mm->w.rows;
    if (j1 > jb->n)
        j1 = jb->n;
    cpu_mm_range(jb->mm, r0, r1, j0, j1, jb->b->tls[tid].p);
}

int cpu_mm_run(si_backend *b, const cpu_mm *mm_in, int64_t n, si_err *err)
{
    if (n <= 0 || mm_in->w.rows <= 0)
        return SI_OK;
    int rc = cpu_tls_reserve(b, cpu_mm_tls_bytes(mm_in), err);
    if (rc != SI_OK)
        return rc;
    atomic_int fail;
    atomic_init(&fail, SI_OK);
    cpu_mm mm = *mm_in;
    mm.fail = &fail;
    mm_job jb = { .mm = &mm, .b = b, .n = n };
    jb.tok_chunk = n < TOK_TILE ? n : TOK_TILE;
    int64_t n_tok_chunks = (n + jb.tok_chunk - 1) / jb.tok_chunk;
    /* About four tasks per thread for balance, at least 4 rows each. */
    int64_t want = 4 * (int64_t)b->n_threads;
    int64_t per = (mm.w.rows * n_tok_chunks + want - 1) / want;
    jb.row_chunk = per < 4 ? 4 : per;
    jb.n_row_chunks = (mm.w.rows + jb.row_chunk - 1) / jb.row_chunk;
    cpu_pool_run(b->pool, jb.n_row_chunks * n_tok_chunks, mm_task, &jb);
    if (atomic_load(&fail) != SI_OK)
        return si_err_set(err, atomic_load(&fail), "cpu: MATMUL: host dequant of a %s weight row failed",
                          cpu_type_name(b, mm.w.type));
    return SI_OK;
}

typedef struct q8_job {
    const float  *x;
    size_t        stride;
    const cpu_q8 *q;
} q8_job;

static void q8_task(void *ctx, int64_t j, int tid)
{
    (void)tid;
    const q8_job *jb = ctx;
    cpu_quantize_row_q8(jb->x + (size_t)j * jb->stride, jb->q->in, jb->q, j);
}

void cpu_quantize_rows(si_backend *b, const float *x, size_t stride, int64_t n, const cpu_q8 *q)
{
    q8_job jb = { x, stride, q };
    cpu_pool_run(b->pool, n, q8_task, &jb);
}

/* ---- SI_OP_MATMUL ------------------------------------------------------- */

int cpu_matmul_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_tensor *w = op->src[0], *x = op->src[1];
    const int64_t in = w->ne[0], n = cpu_ne(x, 1);
    cpu_mm mm = {
        .w = { cpu_ptr(w), w->type, in, cpu_ne(w, 1), cpu_ne(w, 1) > 1 ? w->nb[1] : 0 },
        .x = (const float *)cpu_ptr(x),
        .x_stride = n > 1 ? x->nb[1] / sizeof(float) : 0,
        .y = (float *)cpu_ptr(&op->dst),
        .y_stride = n > 1 ? op->dst.nb[1] / sizeof(float) : 0,
    };
    cpu_mm_setup(b, &mm);
    if (mm.path == CPU_PATH_Q8) {
        void *ws = cpu_work_reserve(b, cpu_q8_bytes(in, n), err);
        if (ws == NULL)
            return SI_ENOMEM;
        cpu_q8_carve(&mm.xq, ws, in, n);
        cpu_quantize_rows(b, mm.x, mm.x_stride, n, &mm.xq);
    }
    return cpu_mm_run(b, &mm, n, err);
}
