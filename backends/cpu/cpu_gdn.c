/* backends/cpu/cpu_gdn.c — SI_OP_GDN: the Gated DeltaNet mixer core, spec
 * qwen35-gguf.md §3.5 steps 2-9, token by token (the chunked form is the
 * same math, only rounding differs).
 *
 * The batch is cut into runs of consecutive tokens of one slot.
 *   A. in parallel over channel ranges: causal depthwise conv of every run
 *      against its slot's conv state (the last conv_k-1 RAW inputs, oldest
 *      first), SiLU, into a workspace Y[n][conv_dim]; the conv state then
 *      keeps the run's last conv_k-1 raw inputs;
 *   B. in parallel over (run, v-head): per token L2-normalised q and k of
 *      k-head j % Hk (q also times 1/sqrt(dk)), beta = sigmoid(b),
 *      decay = exp(ssm_a * softplus(a + dt_bias)), the delta rule on the
 *      f32 state S (s[m*dk + i] = S[i][m]), output from the updated state,
 *      then RMSNorm over dv with ssm_norm times silu(z).
 * Each state row m (one value dim) is independent inside a token, so the
 * decay, the readout r_m, the update and the output fuse into two passes.
 */
#include <math.h>

#include "cpu_internal.h"

#define CONV_CHANNELS_PER_TASK 256

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

typedef struct gdn_run {
    int64_t t0, len;
    float  *conv;      /* [conv_dim][conv_k-1] */
    float  *ssm;       /* [Hv][dv][dk]         */
} gdn_run;

typedef struct gdn_job {
    const si_op         *op;
    const si_gdn_params *p;
    si_backend          *b;
    const gdn_run       *runs;
    int64_t              n_runs, conv_dim;
    float               *y;           /* [n][conv_dim] conv + SiLU output */
} gdn_job;

/* A. causal conv + SiLU for channels [c0, c1) of every run. */
static void conv_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const gdn_job *jb = ctx;
    const si_op *op = jb->op;
    const int K = (int)jb->p->conv_k, H = K - 1;
    const int64_t c0 = task * CONV_CHANNELS_PER_TASK;
    const int64_t c1 = c0 + CONV_CHANNELS_PER_TASK < jb->conv_dim ? c0 + CONV_CHANNELS_PER_TASK : jb->conv_dim;
    const si_tensor *u = op->src[0], *w = op->src[4];
    float hist[CPU_CONV_K_MAX];
    for (int64_t r = 0; r < jb->n_runs; r++) {
        const gdn_run *run = &jb->runs[r];
        for (int64_t c = c0; c < c1; c++) {
            const float *wc = (const float *)(cpu_ptr(w) + (uint64_t)c * w->nb[1]);
            float *st = run->conv + (size_t)c * H;
            for (int i = 0; i < H; i++)
                hist[i] = st[i];
            for (int64_t t = run->t0; t < run->t0 + run->len; t++) {
                float x = ((const float *)(cpu_ptr(u) + (uint64_t)t * u->nb[1]))[c];
                float acc = wc[H] * x;   /* tap K-1 multiplies the current token */
                for (int i = 0; i < H; i++)
                    acc += wc[i] * hist[i];
                jb->y[(size_t)t * jb->conv_dim + (size_t)c] = silu(acc);
                for (int i = 0; i + 1 < H; i++)
                    hist[i] = hist[i + 1];
                if (H > 0)
                    hist[H - 1] = x;
            }
            for (int i = 0; i < H; i++)
                st[i] = hist[i];
        }
    }
}

/* x * 1/max(||x||, eps) * extra, into dst. */
static void l2norm(const float *x, float *dst, int n, float eps, float extra)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    double nrm = sqrt(ss);
    float sc = (float)(1.0 / (nrm > eps ? nrm : (double)eps)) * extra;
    for (int i = 0; i < n; i++)
        dst[i] = x[i] * sc;
}

/* One state row: row *= alpha; returns sum(row * k), 16 lanes. */
static float decay_dot(float *row, float alpha, const float *k, int n)
{
    float acc[16] = { 0 }, s = 0.0f;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            row[i + l] *= alpha;
            acc[l] += row[i + l] * k[i + l];
        }
    for (; i < n; i++) {
        row[i] *= alpha;
        s += row[i] * k[i];
    }
    for (int l = 0; l < 16; l++)
        s += acc[l];
    return s;
}

/* row += k * delta; returns sum(row * q). */
static float update_dot(float *row, const float *k, float delta, const float *q, int n)
{
    float acc[16] = { 0 }, s = 0.0f;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) {
            row[i + l] += k[i + l] * delta;
            acc[l] += row[i + l] * q[i + l];
        }
    for (; i < n; i++) {
        row[i] += k[i] * delta;
        s += row[i] * q[i];
    }
    for (int l = 0; l < 16; l++)
        s += acc[l];
    return s;
}

/* B. the delta rule and the gated norm for one (run, v-head). */
static void head_task(void *ctx, int64_t task, int tid)
{
    const gdn_job *jb = ctx;
    const si_gdn_params *p = jb->p;
    const si_op *op = jb->op;
    const int dk = (int)p->head_k_dim, dv = (int)p->head_v_dim;
    const int64_t hv = p->n_v_head;
    const gdn_run *run = &jb->runs[task / hv];
    const int64_t j = task % hv, kh = j % p->n_k_head;
    float *qn = (float *)jb->b->tls[tid].p, *kn = qn + dk, *o = kn + dk;
    float *S = run->ssm + (size_t)j * dv * dk;
    const float ssm_a = ((const float *)cpu_ptr(op->src[5]))[j];
    const float dt_b = ((const float *)cpu_ptr(op->src[6]))[j];
    const float *nw = (const float *)cpu_ptr(op->src[7]);
    const float qscale = 1.0f / sqrtf((float)dk);
    const size_t key_dim = (size_t)p->n_k_head * dk;
    for (int64_t t = run->t0; t < run->t0 + run->len; t++) {
        const float *y = jb->y + (size_t)t * jb->conv_dim;
        l2norm(y + (size_t)kh * dk, qn, dk, p->eps, qscale);
        l2norm(y + key_dim + (size_t)kh * dk, kn, dk, p->eps, 1.0f);
        const float *v = y + 2 * key_dim + (size_t)j * dv;
        const float bt = ((const float *)(cpu_ptr(op->src[2]) + (uint64_t)t * op->src[2]->nb[1]))[j];
        const float at = ((const float *)(cpu_ptr(op->src[3]) + (uint64_t)t * op->src[3]->nb[1]))[j];
        const float beta = 1.0f / (1.0f + expf(-bt));
        const float sp_in = at + dt_b;
        const float sp = sp_in > 20.0f ? sp_in : log1pf(expf(sp_in));
        const float alpha = expf(ssm_a * sp);
        double ss = 0.0;
        for (int m = 0; m < dv; m++) {
            float *row = S + (size_t)m * dk;
            float r = decay_dot(row, alpha, kn, dk);
            o[m] = update_dot(row, kn, beta * (v[m] - r), qn, dk);
            ss += (double)o[m] * (double)o[m];
        }
        const float sc = (float)(1.0 / sqrt(ss / dv + (double)p->eps));
        const float *z = (const float *)(cpu_ptr(op->src[1]) + (uint64_t)t * op->src[1]->nb[1]) + (size_t)j * dv;
        float *out = (float *)(cpu_ptr(&op->dst) + (uint64_t)t * op->dst.nb[1]) + (size_t)j * dv;
        for (int m = 0; m < dv; m++)
            out[m] = o[m] * sc * nw[m] * silu(z[m]);
    }
}

int cpu_gdn_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_gdn_params *p = &op->p.gdn;
    const int64_t n = cpu_ne(op->src[0], 1);
    if (n == 0)
        return SI_OK;
    const int64_t conv_dim = op->src[0]->ne[0];
    const uint64_t need = si_oc_gdn_state_bytes(p, conv_dim);
    void *ws = cpu_work_reserve(b, cpu_round((size_t)n * sizeof(gdn_run)) +
                                       cpu_round((size_t)n * (size_t)conv_dim * sizeof(float)), err);
    if (ws == NULL)
        return SI_ENOMEM;
    cpu_carve cv = { ws, 0 };
    gdn_run *runs = cpu_carve_take(&cv, (size_t)n * sizeof(gdn_run));
    int64_t n_runs = 0;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = p->seq[t];
        if (n_runs > 0 && p->seq[runs[n_runs - 1].t0] == s) {
            runs[n_runs - 1].len++;
            continue;
        }
        uint64_t off;
        const int rc = si_oc_gdn_slot("cpu", p, t, s, need, p->state->size, &off, err);
        if (rc != SI_OK)
            return rc;
        for (int64_t r = 0; r < n_runs; r++)
            if (p->seq[runs[r].t0] == s)
                return si_err_set(err, SI_EINVAL, "cpu: GDN: tokens of slot %d are not consecutive (token %lld)", s,
                                  (long long)t);
        runs[n_runs].t0 = t;
        runs[n_runs].len = 1;
        runs[n_runs].conv = (float *)(p->state->data + off);
        runs[n_runs].ssm = runs[n_runs].conv + (size_t)conv_dim * (p->conv_k - 1);
        n_runs++;
    }
    int rc = cpu_tls_reserve(b, (2 * (size_t)p->head_k_dim + p->head_v_dim) * sizeof(float), err);
    if (rc != SI_OK)
        return rc;
    gdn_job jb = { .op = op, .p = p, .b = b, .runs = runs, .n_runs = n_runs, .conv_dim = conv_dim };
    jb.y = cpu_carve_take(&cv, (size_t)n * (size_t)conv_dim * sizeof(float));
    cpu_pool_run(b->pool, (conv_dim + CONV_CHANNELS_PER_TASK - 1) / CONV_CHANNELS_PER_TASK, conv_task, &jb);
    cpu_pool_run(b->pool, n_runs * (int64_t)p->n_v_head, head_task, &jb);
    return SI_OK;
}
