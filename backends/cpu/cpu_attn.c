/* backends/cpu/cpu_attn.c — SI_OP_ATTN: gated full attention with a KV
 * cache (spec qwen35-gguf.md §3.4, §6.12).
 *
 * Three steps:
 *   1. validate every token's (seq, pos) against the cache before anything
 *      is written: pos must equal the sequence's current length (counting
 *      earlier tokens of this batch) and be < n_ctx;
 *   2. in parallel over tokens: RoPE table of the token, k = rope(rms(k)),
 *      and K/V appended to the cache (f32 or f16);
 *   3. in parallel over (token, head): q = rope(rms(q)), causal softmax
 *      attention over cached positions 0..pos of that sequence in f32,
 *      GQA head h -> kv head h / (n_head / n_head_kv), times sigmoid(gate).
 * Cache layout: [layer][seq][ctx][kv_head][head_dim].
 */
#include <math.h>

#include "cpu_internal.h"

typedef struct attn_job {
    const si_op          *op;
    const si_attn_params *p;
    si_kv                *kv;
    si_backend           *b;
    float                *rope;       /* [n][n_rot/2][2]: cos, sin (with YaRN mscale) */
    int64_t               n;
} attn_job;

/* cos/sin of one position for every rotated pair, spec §3.4 step 4 and
 * §6.12 (static YaRN with beta_fast 32, beta_slow 1 when yarn_factor > 0). */
static void rope_table(const si_attn_params *p, int32_t pos, float *cs)
{
    const int half = (int)p->n_rot / 2;
    const double base = p->rope_base, nr = p->n_rot;
    double lo = 0.0, hi = 0.0, mscale = 1.0, factor = p->yarn_factor;
    if (factor > 0.0) {
        const double two_pi = 6.283185307179586;
        double c_fast = nr * log((double)p->yarn_orig_ctx / (two_pi * 32.0)) / (2.0 * log(base));
        double c_slow = nr * log((double)p->yarn_orig_ctx / (two_pi * 1.0)) / (2.0 * log(base));
        lo = floor(c_fast) > 0.0 ? floor(c_fast) : 0.0;
        hi = ceil(c_slow) < nr - 1.0 ? ceil(c_slow) : nr - 1.0;
        mscale = 1.0 + 0.1 * log(factor);
    }
    for (int i = 0; i < half; i++) {
        double theta = (double)pos * pow(base, -2.0 * i / nr);
        if (factor > 0.0) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            double ramp = 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
            theta = (theta / factor) * (1.0 - ramp) + theta * ramp;
        }
        cs[2 * i] = (float)(cos(theta) * mscale);
        cs[2 * i + 1] = (float)(sin(theta) * mscale);
    }
}

/* x (head_dim) <- rope(rms(x) * w): w NULL = no norm. */
static void norm_rope(float *x, const float *w, float eps, const float *cs, int n_rot, int hd)
{
    if (w != NULL) {
        double ss = 0.0;
        for (int i = 0; i < hd; i++)
            ss += (double)x[i] * (double)x[i];
        float sc = (float)(1.0 / sqrt(ss / hd + (double)eps));
        for (int i = 0; i < hd; i++)
            x[i] = x[i] * sc * w[i];
    }
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

static inline size_t kv_index(const si_kv *kv, uint32_t layer, int32_t seq, int32_t pos)
{
    return (((size_t)layer * kv->d.n_seq + (size_t)seq) * kv->d.n_ctx + (size_t)pos) *
           kv->d.n_head_kv * kv->d.head_dim;
}

static void store_row(const si_kv *kv, uint8_t *base, size_t idx, const float *x, int n)
{
    if (kv->type == SI_TYPE_F16) {
        uint16_t *d = (uint16_t *)base + idx;
        for (int i = 0; i < n; i++)
            d[i] = cpu_f32_to_f16(x[i]);
    } else {
        memcpy((float *)base + idx, x, (size_t)n * sizeof(float));
    }
}

/* Step 2: one token's RoPE table, K and V into the cache. */
static void append_task(void *ctx, int64_t t, int tid)
{
    const attn_job *jb = ctx;
    const si_attn_params *p = jb->p;
    const si_op *op = jb->op;
    const int hd = (int)p->head_dim;
    float *cs = jb->rope + (size_t)t * p->n_rot;
    rope_table(p, p->pos[t], cs);
    const float *k = (const float *)(cpu_ptr(op->src[1]) + (uint64_t)t * op->src[1]->nb[1]);
    const float *v = (const float *)(cpu_ptr(op->src[2]) + (uint64_t)t * op->src[2]->nb[1]);
    const float *kw = op->src[4] ? (const float *)cpu_ptr(op->src[4]) : NULL;
    float *tmp = (float *)jb->b->tls[tid].p;
    size_t base = kv_index(jb->kv, p->kv_layer, p->seq[t], p->pos[t]);
    for (uint32_t g = 0; g < p->n_head_kv; g++) {
        memcpy(tmp, k + (size_t)g * hd, (size_t)hd * sizeof(float));
        norm_rope(tmp, kw, p->eps, cs, (int)p->n_rot, hd);
        store_row(jb->kv, jb->kv->k, base + (size_t)g * hd, tmp, hd);
    }
    store_row(jb->kv, jb->kv->v, base, v, hd * (int)p->n_head_kv);
}

static inline const float *load_row(const si_kv *kv, const uint8_t *base, size_t idx, float *tmp, int n,
                                    bool simd)
{
    if (kv->type != SI_TYPE_F16)
        return (const float *)base + idx;
    cpu_decode_f32_simd(SI_TYPE_F16, base + 2 * idx, n, tmp, simd);
    return tmp;
}

/* Step 3: one (token, head). */
static void attend_task(void *ctx, int64_t task, int tid)
{
    const attn_job *jb = ctx;
    const si_attn_params *p = jb->p;
    const si_op *op = jb->op;
    const si_kv *kv = jb->kv;
    const int hd = (int)p->head_dim;
    const int64_t t = task / p->n_head;
    const uint32_t h = (uint32_t)(task % p->n_head), g = h / (p->n_head / p->n_head_kv);
    const int32_t seq = p->seq[t], pos = p->pos[t];
    float *q = (float *)jb->b->tls[tid].p, *acc = q + hd, *tmp = acc + hd, *score = tmp + hd;

    const float *qg = (const float *)(cpu_ptr(op->src[0]) + (uint64_t)t * op->src[0]->nb[1]) + (size_t)h * 2 * hd;
    memcpy(q, qg, (size_t)hd * sizeof(float));
    norm_rope(q, op->src[3] ? (const float *)cpu_ptr(op->src[3]) : NULL, p->eps,
              jb->rope + (size_t)t * p->n_rot, (int)p->n_rot, hd);

    const float scale = 1.0f / sqrtf((float)hd);
    const size_t base = kv_index(kv, p->kv_layer, seq, 0) + (size_t)g * hd;
    const size_t step = (size_t)kv->d.n_head_kv * hd;
    float mx = -INFINITY;
    for (int32_t i = 0; i <= pos; i++) {
        const float *kr = load_row(kv, kv->k, base + (size_t)i * step, tmp, hd, jb->b->simd);
        score[i] = cpu_dot_f32(q, kr, hd, jb->b->simd) * scale;
        mx = score[i] > mx ? score[i] : mx;
    }
    float sum = 0.0f;
    for (int32_t i = 0; i <= pos; i++) {
        score[i] = expf(score[i] - mx);
        sum += score[i];
    }
    for (int d = 0; d < hd; d++)
        acc[d] = 0.0f;
    for (int32_t i = 0; i <= pos; i++) {
        const float *vr = load_row(kv, kv->v, base + (size_t)i * step, tmp, hd, jb->b->simd);
        const float w = score[i];
        for (int d = 0; d < hd; d++)
            acc[d] += w * vr[d];
    }
    const float *gate = qg + hd;
    float *out = (float *)(cpu_ptr(&op->dst) + (uint64_t)t * op->dst.nb[1]) + (size_t)h * hd;
    const float inv = 1.0f / sum;
    for (int d = 0; d < hd; d++)
        out[d] = acc[d] * inv / (1.0f + expf(-gate[d]));
}

int cpu_attn_exec(si_backend *b, const si_op *op, si_err *err)
{
    const si_attn_params *p = &op->p.attn;
    si_kv *kv = p->kv;
    const int64_t n = cpu_ne(op->src[0], 1);
    if (n == 0)
        return SI_OK;
    const uint32_t n_seq = kv->d.n_seq, n_ctx = kv->d.n_ctx;
    uint32_t *len = kv->len + (size_t)p->kv_layer * n_seq;

    size_t ws_bytes = cpu_round((size_t)n_seq * sizeof(uint32_t)) + cpu_round((size_t)n * p->n_rot * sizeof(float));
    void *ws = cpu_work_reserve(b, ws_bytes, err);
    if (ws == NULL)
        return SI_ENOMEM;
    cpu_carve cv = { ws, 0 };
    uint32_t *added = cpu_carve_take(&cv, (size_t)n_seq * sizeof(uint32_t));
    memset(added, 0, (size_t)n_seq * sizeof(uint32_t));
    int32_t max_pos = 0;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = p->seq[t], pos = p->pos[t];
        if (s < 0 || (uint32_t)s >= n_seq)
            return si_err_set(err, SI_ERANGE, "cpu: ATTN: token %lld: seq %d outside [0, %u)", (long long)t, s, n_seq);
        if (pos < 0 || (uint32_t)pos >= n_ctx)
            return si_err_set(err, SI_ERANGE, "cpu: ATTN: seq %d pos %d does not fit n_ctx %u (layer %u)", s, pos,
                              n_ctx, p->kv_layer);
        uint32_t want = len[s] + added[s];
        if ((uint32_t)pos != want)
            return si_err_set(err, SI_EINVAL,
                              "cpu: ATTN: seq %d pos %d, but layer %u holds %u positions: positions must be contiguous",
                              s, pos, p->kv_layer, want);
        added[s]++;
        max_pos = pos > max_pos ? pos : max_pos;
    }
    const size_t hd = p->head_dim;
    int rc = cpu_tls_reserve(b, (3 * hd + (size_t)max_pos + 1) * sizeof(float), err);
    if (rc != SI_OK)
        return rc;
    attn_job jb = { .op = op, .p = p, .kv = kv, .b = b, .n = n };
    jb.rope = cpu_carve_take(&cv, (size_t)n * p->n_rot * sizeof(float));
    cpu_pool_run(b->pool, n, append_task, &jb);
    for (uint32_t s = 0; s < n_seq; s++)
        len[s] += added[s];
    cpu_pool_run(b->pool, n * p->n_head, attend_task, &jb);
    return SI_OK;
}
