/* tests/models/ref_forward.c — independent double-precision reference of
 * the Qwen3.5 hybrid forward pass, token by token, written from
 * spec/qwen35-gguf.md §3 (layer loop, gated attention, Gated DeltaNet,
 * dense and MoE FFN) and §4 (state).  Weights come from the GGUF through
 * the core reader and si_dequant; hyper-parameters from the tiny_cfg that
 * wrote the file.  Clarity over speed: every formula is the spec's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "tiny.h"

typedef struct ref_layer {
    bool    full;
    double *attn_norm, *post_norm;                         /* [H] */
    double *wq, *wk, *wv, *wo, *q_norm, *k_norm;           /* attention */
    double *wqkv, *wgate, *wbeta, *walpha, *conv;          /* GDN */
    double *ssm_a, *ssm_dt, *ssm_norm, *ssm_out;
    double *ffn_gate, *ffn_up, *ffn_down;                  /* dense */
    double *router, *gate_exps, *up_exps, *down_exps;      /* MoE: [E][F][H], [E][H][F] */
    double *sh_inp, *sh_gate, *sh_up, *sh_down;
} ref_layer;

struct ref_model {
    tiny_cfg   c;
    double    *embd, *out_norm, *output;                   /* output may alias embd */
    ref_layer *L;
    double   **owned;
    size_t     n_owned;
};

struct ref_seq {
    uint32_t  n_layer;        /* entries of the arrays below */
    uint32_t  n_ctx, n_past;
    double  **kc, **vc;       /* full layers: [n_ctx][nkv*hd] */
    double  **conv;           /* GDN layers: [conv_dim][conv_k-1], oldest first */
    double  **S;              /* GDN layers: [Hv][dk][dv], S[i][m] key-major as in the spec */
};

/* ---- loading ---- */

static double *owned_alloc(ref_model *m, size_t n);

static double *load_t(ref_model *m, const si_gguf *g, const char *name, si_err *err)
{
    const si_tensor_info *ti = si_gguf_tensor(g, name);
    if (ti == NULL) {
        si_err_set(err, SI_ENOTFOUND, "reference: %s missing", name);
        return NULL;
    }
    int64_t n = 1;
    for (uint32_t d = 0; d < ti->ndim; d++)
        n *= ti->ne[d];
    float *f = malloc((size_t)n * sizeof *f);
    double *out = owned_alloc(m, (size_t)n);
    if (f == NULL || out == NULL) {
        free(f);
        si_err_set(err, SI_ENOMEM, "reference: out of memory");
        return NULL;
    }
    if (si_dequant(ti->type, ti->data, f, n, err) != SI_OK) {
        free(f);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = f[i];
    free(f);
    return out;
}

static double *owned_alloc(ref_model *m, size_t n)
{
    double **owned = realloc(m->owned, (m->n_owned + 1) * sizeof *owned);
    if (owned == NULL)
        return NULL;
    m->owned = owned;
    double *p = malloc(n * sizeof *p);
    if (p != NULL)
        m->owned[m->n_owned++] = p;
    return p;
}

#define LOAD(dst, ...) do {                                   \
        snprintf(n, sizeof n, __VA_ARGS__);                   \
        if (((dst) = load_t(m, g, n, err)) == NULL)          \
            return SI_ENOTFOUND;                              \
    } while (0)

static int load_layer(ref_model *m, const si_gguf *g, uint32_t il, si_err *err)
{
    const tiny_cfg *c = &m->c;
    ref_layer *l = &m->L[il];
    char n[96];
    l->full = (il + 1) % c->interval == 0;
    LOAD(l->attn_norm, "blk.%u.attn_norm.weight", il);
    LOAD(l->post_norm, "blk.%u.post_attention_norm.weight", il);
    if (l->full) {
        LOAD(l->wq, "blk.%u.attn_q.weight", il);
        LOAD(l->wk, "blk.%u.attn_k.weight", il);
        LOAD(l->wv, "blk.%u.attn_v.weight", il);
        LOAD(l->wo, "blk.%u.attn_output.weight", il);
        LOAD(l->q_norm, "blk.%u.attn_q_norm.weight", il);
        LOAD(l->k_norm, "blk.%u.attn_k_norm.weight", il);
    } else {
        LOAD(l->wqkv, "blk.%u.attn_qkv.weight", il);
        LOAD(l->wgate, "blk.%u.attn_gate.weight", il);
        LOAD(l->wbeta, "blk.%u.ssm_beta.weight", il);
        LOAD(l->walpha, "blk.%u.ssm_alpha.weight", il);
        LOAD(l->conv, "blk.%u.ssm_conv1d.weight", il);
        LOAD(l->ssm_dt, c->dt_no_bias ? "blk.%u.ssm_dt" : "blk.%u.ssm_dt.bias", il);
        LOAD(l->ssm_a, "blk.%u.ssm_a", il);
        LOAD(l->ssm_norm, "blk.%u.ssm_norm.weight", il);
        LOAD(l->ssm_out, "blk.%u.ssm_out.weight", il);
    }
    if (!c->moe) {
        LOAD(l->ffn_gate, "blk.%u.ffn_gate.weight", il);
        LOAD(l->ffn_up, "blk.%u.ffn_up.weight", il);
        LOAD(l->ffn_down, "blk.%u.ffn_down.weight", il);
        return SI_OK;
    }
    LOAD(l->router, "blk.%u.ffn_gate_inp.weight", il);
    if (c->fused_gate_up) {
        /* [H, 2F, E]: per expert, F gate rows then F up rows (spec §2.7). */
        double *gu;
        LOAD(gu, "blk.%u.ffn_gate_up_exps.weight", il);
        size_t slab = (size_t)c->F_exp * c->H, E = c->n_expert;
        if ((l->gate_exps = owned_alloc(m, slab * E)) == NULL ||
            (l->up_exps = owned_alloc(m, slab * E)) == NULL)
            return si_err_set(err, SI_ENOMEM, "reference: out of memory");
        for (size_t e = 0; e < E; e++) {
            memcpy(l->gate_exps + e * slab, gu + e * 2 * slab, slab * sizeof *gu);
            memcpy(l->up_exps + e * slab, gu + e * 2 * slab + slab, slab * sizeof *gu);
        }
    } else {
        LOAD(l->gate_exps, "blk.%u.ffn_gate_exps.weight", il);
        LOAD(l->up_exps, "blk.%u.ffn_up_exps.weight", il);
    }
    LOAD(l->down_exps, "blk.%u.ffn_down_exps.weight", il);
    LOAD(l->sh_inp, "blk.%u.ffn_gate_inp_shexp.weight", il);
    LOAD(l->sh_gate, "blk.%u.ffn_gate_shexp.weight", il);
    LOAD(l->sh_up, "blk.%u.ffn_up_shexp.weight", il);
    LOAD(l->sh_down, "blk.%u.ffn_down_shexp.weight", il);
    return SI_OK;
}

int ref_load(const tiny_cfg *c, const char *path, ref_model **out, si_err *err)
{
    si_gguf *g = NULL;
    int rc = si_gguf_open(path, &g, err);
    if (rc != SI_OK)
        return rc;
    ref_model *m = calloc(1, sizeof *m);
    if (m == NULL || (m->L = calloc(c->n_layer, sizeof *m->L)) == NULL) {
        free(m);
        si_gguf_close(g);
        return si_err_set(err, SI_ENOMEM, "reference: out of memory");
    }
    m->c = *c;
    char n[96];
    rc = SI_ENOTFOUND;
    if ((m->embd = load_t(m, g, "token_embd.weight", err)) == NULL ||
        (m->out_norm = load_t(m, g, "output_norm.weight", err)) == NULL)
        goto done;
    snprintf(n, sizeof n, "output.weight");
    m->output = c->tied ? m->embd : load_t(m, g, n, err);
    if (m->output == NULL)
        goto done;
    for (uint32_t il = 0; il < c->n_layer; il++)
        if ((rc = load_layer(m, g, il, err)) != SI_OK)
            goto done;
    rc = SI_OK;
done:
    si_gguf_close(g);
    if (rc != SI_OK) {
        ref_free(m);
        return rc;
    }
    *out = m;
    return SI_OK;
}

void ref_free(ref_model *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->L);
    free(m);
}

static uint32_t conv_dim(const tiny_cfg *c)
{
    return 2 * c->Hk * c->d_state + c->Hv * c->d_state;
}

ref_seq *ref_seq_new(const ref_model *m, uint32_t n_ctx)
{
    const tiny_cfg *c = &m->c;
    ref_seq *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->n_ctx = n_ctx;
    s->kc = calloc(c->n_layer, sizeof *s->kc);
    s->vc = calloc(c->n_layer, sizeof *s->vc);
    s->conv = calloc(c->n_layer, sizeof *s->conv);
    s->S = calloc(c->n_layer, sizeof *s->S);
    if (s->kc == NULL || s->vc == NULL || s->conv == NULL || s->S == NULL) {
        ref_seq_free(s);
        return NULL;
    }
    s->n_layer = c->n_layer;
    for (uint32_t il = 0; il < c->n_layer; il++) {
        size_t kv = (size_t)n_ctx * c->n_head_kv * c->head_dim;
        bool ok = m->L[il].full
                ? (s->kc[il] = calloc(kv, sizeof(double))) && (s->vc[il] = calloc(kv, sizeof(double)))
                : (s->conv[il] = calloc((size_t)conv_dim(c) * (c->conv_k - 1) + 1, sizeof(double))) &&
                  (s->S[il] = calloc((size_t)c->Hv * c->d_state * c->d_state, sizeof(double)));
        if (!ok) {
            ref_seq_free(s);
            return NULL;
        }
    }
    return s;
}

void ref_seq_free(ref_seq *s)
{
    if (s == NULL)
        return;
    for (uint32_t il = 0; il < s->n_layer; il++) {
        free(s->kc[il]);
        free(s->vc[il]);
        free(s->conv[il]);
        free(s->S[il]);
    }
    free(s->kc);
    free(s->vc);
    free(s->conv);
    free(s->S);
    free(s);
}

/* ---- math (spec §3) ---- */

/* y[out] = W x, W stored [in, out]: row o holds `in` values (spec §2.1). */
static void matvec(double *y, const double *W, const double *x, uint32_t in, uint32_t out)
{
    for (uint32_t o = 0; o < out; o++) {
        double s = 0;
        for (uint32_t i = 0; i < in; i++)
            s += W[(size_t)o * in + i] * x[i];
        y[o] = s;
    }
}

/* rms(v, w) = v / sqrt(mean(v^2) + eps) * w  (spec §3 notation) */
static void rms(double *y, const double *x, const double *w, uint32_t n, double eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++)
        y[i] = x[i] * sc * w[i];
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu(double x) { return x * sigmoid(x); }
static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

/* NEOX RoPE over the first n_rot dims, with static YaRN (spec §3.4, §6.12). */
static void rope(double *x, const tiny_cfg *c, uint32_t pos)
{
    uint32_t half = c->n_rot / 2;
    double base = c->rope_base, factor = c->yarn_factor, mscale = 1.0, lo = 0, hi = 0;
    if (factor > 0) {
        double orig = c->yarn_orig_ctx;
#define CORR(r) (c->n_rot * log(orig / (2.0 * M_PI * (r))) / (2.0 * log(base)))
        lo = floor(CORR(32.0));
        hi = ceil(CORR(1.0));
#undef CORR
        if (lo < 0) lo = 0;
        if (hi > c->n_rot - 1) hi = c->n_rot - 1;
        mscale = 1.0 + 0.1 * log(factor);
    }
    for (uint32_t i = 0; i < half; i++) {
        double th = pos * pow(base, -2.0 * i / c->n_rot);
        if (factor > 0) {
            double d = hi - lo > 0.001 ? hi - lo : 0.001;
            double y = (i - lo) / d;
            double ramp = 1.0 - (y < 0 ? 0 : y > 1 ? 1 : y);
            th = th / factor * (1.0 - ramp) + th * ramp;
        }
        double cs = cos(th) * mscale, sn = sin(th) * mscale;
        double a = x[i], b = x[i + half];
        x[i] = a * cs - b * sn;
        x[i + half] = b * cs + a * sn;
    }
}

static void attention(const ref_model *m, const ref_layer *l, ref_seq *s, uint32_t il,
                      const double *h, double *out)
{
    const tiny_cfg *c = &m->c;
    uint32_t hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv, H = c->H, pos = s->n_past;
    double *qg = malloc(sizeof(double) * 2 * nh * hd), *o = malloc(sizeof(double) * nh * hd);
    double *sc = malloc(sizeof(double) * (pos + 1));
    double *k = s->kc[il] + (size_t)pos * nkv * hd, *v = s->vc[il] + (size_t)pos * nkv * hd;
    matvec(qg, l->wq, h, H, 2 * nh * hd);
    matvec(k, l->wk, h, H, nkv * hd);
    matvec(v, l->wv, h, H, nkv * hd);
    for (uint32_t g = 0; g < nkv; g++) {
        rms(k + g * hd, k + g * hd, l->k_norm, hd, c->eps);
        rope(k + g * hd, c, pos);
    }
    for (uint32_t hh = 0; hh < nh; hh++) {
        double *q = qg + (size_t)hh * 2 * hd, *gate = q + hd;    /* per-head interleave */
        rms(q, q, l->q_norm, hd, c->eps);
        rope(q, c, pos);
        uint32_t g = hh / (nh / nkv);                              /* grouped GQA */
        double mx = -INFINITY, sum = 0;
        for (uint32_t t = 0; t <= pos; t++) {
            const double *kt = s->kc[il] + (size_t)t * nkv * hd + g * hd;
            double d = 0;
            for (uint32_t i = 0; i < hd; i++)
                d += q[i] * kt[i];
            sc[t] = d / sqrt((double)hd);
            mx = sc[t] > mx ? sc[t] : mx;
        }
        for (uint32_t t = 0; t <= pos; t++)
            sum += (sc[t] = exp(sc[t] - mx));
        for (uint32_t i = 0; i < hd; i++) {
            double acc = 0;
            for (uint32_t t = 0; t <= pos; t++)
                acc += sc[t] * s->vc[il][(size_t)t * nkv * hd + g * hd + i];
            o[hh * hd + i] = acc / sum * sigmoid(gate[i]);
        }
    }
    matvec(out, l->wo, o, nh * hd, H);
    free(qg);
    free(o);
    free(sc);
}

static void gdn(const ref_model *m, const ref_layer *l, ref_seq *s, uint32_t il,
                const double *h, double *out)
{
    const tiny_cfg *c = &m->c;
    uint32_t H = c->H, Hk = c->Hk, Hv = c->Hv, dk = c->d_state, K = c->conv_k;
    uint32_t kd = Hk * dk, vd = Hv * dk, cd = conv_dim(c);
    double *u = malloc(sizeof(double) * cd), *y = malloc(sizeof(double) * cd);
    double *z = malloc(sizeof(double) * vd), *b = malloc(sizeof(double) * Hv);
    double *a = malloc(sizeof(double) * Hv), *o = malloc(sizeof(double) * vd);
    double *st = s->conv[il];
    matvec(u, l->wqkv, h, H, cd);
    matvec(z, l->wgate, h, H, vd);
    matvec(b, l->wbeta, h, H, Hv);
    matvec(a, l->walpha, h, H, Hv);
    /* Causal depthwise conv: tap K-1 multiplies the current input; the
     * state holds the K-1 previous raw inputs, oldest first; then SiLU. */
    for (uint32_t ch = 0; ch < cd; ch++) {
        double acc = l->conv[(size_t)ch * K + K - 1] * u[ch];
        for (uint32_t i = 0; i + 1 < K; i++)
            acc += l->conv[(size_t)ch * K + i] * st[(size_t)ch * (K - 1) + i];
        for (uint32_t i = 0; i + 2 < K; i++)
            st[(size_t)ch * (K - 1) + i] = st[(size_t)ch * (K - 1) + i + 1];
        if (K > 1)
            st[(size_t)ch * (K - 1) + K - 2] = u[ch];
        y[ch] = silu(acc);
    }
    double *q = y, *k = y + kd, *v = y + 2 * kd;
    for (uint32_t hh = 0; hh < Hk; hh++) {
        double nq = 0, nk = 0;
        for (uint32_t i = 0; i < dk; i++) {
            nq += q[hh * dk + i] * q[hh * dk + i];
            nk += k[hh * dk + i] * k[hh * dk + i];
        }
        nq = fmax(sqrt(nq), c->eps);
        nk = fmax(sqrt(nk), c->eps);
        for (uint32_t i = 0; i < dk; i++) {
            q[hh * dk + i] /= nq * sqrt((double)dk);    /* L2 norm, then 1/sqrt(dk) */
            k[hh * dk + i] /= nk;
        }
    }
    for (uint32_t j = 0; j < Hv; j++) {
        uint32_t kh = j % Hk;                              /* tiled v-heads */
        const double *qj = q + kh * dk, *kj = k + kh * dk, *vj = v + j * dk;
        double beta = sigmoid(b[j]);
        double alpha = exp(l->ssm_a[j] * softplus(a[j] + l->ssm_dt[j]));
        double *S = s->S[il] + (size_t)j * dk * dk;        /* S[i*dk + mm]: i key, mm value */
        for (uint32_t x = 0; x < dk * dk; x++)
            S[x] *= alpha;
        for (uint32_t mm = 0; mm < dk; mm++) {
            double r = 0;
            for (uint32_t i = 0; i < dk; i++)
                r += S[i * dk + mm] * kj[i];
            double delta = beta * (vj[mm] - r);
            for (uint32_t i = 0; i < dk; i++)
                S[i * dk + mm] += kj[i] * delta;
        }
        for (uint32_t mm = 0; mm < dk; mm++) {
            double r = 0;
            for (uint32_t i = 0; i < dk; i++)
                r += S[i * dk + mm] * qj[i];
            o[j * dk + mm] = r;
        }
        rms(o + j * dk, o + j * dk, l->ssm_norm, dk, c->eps);
        for (uint32_t mm = 0; mm < dk; mm++)
            o[j * dk + mm] *= silu(z[j * dk + mm]);
    }
    matvec(out, l->ssm_out, o, vd, H);
    free(u); free(y); free(z); free(b); free(a); free(o);
}

/* SwiGLU FFN with weights gate/up [H,F] and down [F,H]; out += w * FFN(h). */
static void swiglu_ffn(double *out, double w, const double *gate, const double *up,
                       const double *down, const double *h, uint32_t H, uint32_t F)
{
    double *g = malloc(sizeof(double) * F), *u = malloc(sizeof(double) * F);
    double *y = malloc(sizeof(double) * H);
    matvec(g, gate, h, H, F);
    matvec(u, up, h, H, F);
    for (uint32_t i = 0; i < F; i++)
        g[i] = silu(g[i]) * u[i];
    matvec(y, down, g, F, H);
    for (uint32_t i = 0; i < H; i++)
        out[i] += w * y[i];
    free(g); free(u); free(y);
}

static void moe(const ref_model *m, const ref_layer *l, const double *h, double *out)
{
    const tiny_cfg *c = &m->c;
    uint32_t H = c->H, E = c->n_expert, F = c->F_exp;
    double p[64], mx = -INFINITY, sum = 0, wsum = 0;
    int sel[64];
    matvec(p, l->router, h, H, E);
    for (uint32_t e = 0; e < E; e++)
        mx = p[e] > mx ? p[e] : mx;
    for (uint32_t e = 0; e < E; e++)
        sum += (p[e] = exp(p[e] - mx));
    for (uint32_t e = 0; e < E; e++)
        p[e] /= sum;                                   /* softmax over all experts */
    bool used[64] = { false };
    for (uint32_t k = 0; k < c->n_used; k++) {         /* top-k by probability */
        int best = -1;
        for (uint32_t e = 0; e < E; e++)
            if (!used[e] && (best < 0 || p[e] > p[best]))
                best = (int)e;
        used[best] = true;
        sel[k] = best;
        wsum += p[best];
    }
    memset(out, 0, sizeof(double) * H);
    for (uint32_t k = 0; k < c->n_used; k++) {         /* renormalised weights */
        size_t e = (size_t)sel[k];
        swiglu_ffn(out, p[e] / wsum, l->gate_exps + e * F * H, l->up_exps + e * F * H,
                   l->down_exps + e * H * F, h, H, F);
    }
    double d = 0;
    for (uint32_t i = 0; i < H; i++)
        d += l->sh_inp[i] * h[i];
    swiglu_ffn(out, sigmoid(d), l->sh_gate, l->sh_up, l->sh_down, h, H, c->F_sh);
}

void ref_step(const ref_model *m, ref_seq *s, int32_t token, double *logits)
{
    const tiny_cfg *c = &m->c;
    uint32_t H = c->H;
    double *x = malloc(sizeof(double) * H), *h = malloc(sizeof(double) * H);
    double *y = malloc(sizeof(double) * H);
    memcpy(x, m->embd + (size_t)token * H, sizeof(double) * H);
    for (uint32_t il = 0; il < c->n_layer; il++) {
        const ref_layer *l = &m->L[il];
        rms(h, x, l->attn_norm, H, c->eps);
        if (l->full)
            attention(m, l, s, il, h, y);
        else
            gdn(m, l, s, il, h, y);
        for (uint32_t i = 0; i < H; i++)
            x[i] += y[i];
        rms(h, x, l->post_norm, H, c->eps);
        if (c->moe) {
            moe(m, l, h, y);
        } else {
            memset(y, 0, sizeof(double) * H);
            swiglu_ffn(y, 1.0, l->ffn_gate, l->ffn_up, l->ffn_down, h, H, c->F);
        }
        for (uint32_t i = 0; i < H; i++)
            x[i] += y[i];
    }
    rms(h, x, m->out_norm, H, c->eps);
    matvec(logits, m->output, h, H, c->V);
    s->n_past++;
    free(x); free(h); free(y);
}
