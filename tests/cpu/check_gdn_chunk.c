/* tests/cpu/check_gdn_chunk.c — the chunked form of the gated delta rule
 * (the algorithm of cuda_sm120's chunked GDN prefill, cuda_gdn_chunk.cu)
 * against the plain token recurrence of spec qwen35-gguf.md §3.5 step 8,
 * on the CPU: random normalised q/k, v, beta, log-decays g, many lengths
 * (one token, a partial chunk, exactly one chunk, one past it, several
 * chunks with a partial last one), from a random initial state.  Outputs
 * and the final state must agree to ~1e-5 of max |ref|.  No plugin, no GPU.
 *
 * Derivation (S is dk x dv, S[i][m]; one v-head; tokens t of one chunk
 * numbered 0..L-1; S0 the state entering the chunk):
 *   recurrence  S_t = a_t S_{t-1} + k_t D_tᵀ,
 *               D_t = b_t (v_t - a_t S_{t-1}ᵀ k_t)        ("pseudo-value")
 *               o_t = S_tᵀ q_t
 *   (this is S ← aS; r = Sᵀk; D = b(v - r); S ← S + k Dᵀ).
 *   With cumulative log decays G_t = g_0 + ... + g_t (a_t = exp g_t, summed
 *   in log space inside the chunk so every ratio exp(G_t - G_s), s <= t, is
 *   <= 1 and computed without overflow), unrolling gives
 *               S_t = exp(G_t) S0 + sum_{s<=t} exp(G_t - G_s) k_s D_sᵀ.
 *   Substituting S_{t-1} into D_t (a_t S_{t-1} has the same form with the
 *   sum over s < t):
 *       D_t + b_t sum_{s<t} exp(G_t - G_s) (k_t.k_s) D_s
 *           = b_t (v_t - exp(G_t) S0ᵀ k_t),
 *   i.e. (I + A) D = R with A = strictly-lower(diag(b) (K Kᵀ ⊙ E)),
 *   E_ts = exp(G_t - G_s), R = diag(b) (V - diag(exp G) K S0): a unit
 *   lower-triangular C x C system, solved by forward substitution, one
 *   independent solve per value column m (so dv can be split freely).
 *   Then
 *       o_t  = exp(G_t) S0ᵀ q_t + sum_{s<=t} exp(G_t - G_s) (q_t.k_s) D_s
 *              (inter-chunk part from the incoming state + causal intra part)
 *       S_L-1 = exp(G_L-1) S0 + sum_s exp(G_L-1 - G_s) k_s D_sᵀ.
 *   A partial last chunk is the same with L < C (the kernel pads with
 *   b = 0, g = 0, k = q = 0 rows, which give D = 0 and change nothing).
 *   All arithmetic f32 like the kernel; the state is carried in f32.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CH 64   /* chunk length, as in the CUDA kernel */

static uint32_t rng = 777u;

static float frand(void)   /* U(-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* Inputs of one v-head over n tokens: q, k [n][dk] (L2-normalised, q also
 * scaled by 1/sqrt(dk)), v [n][dv], beta and log-decay g [n]. */
typedef struct gin {
    int    n, dk, dv;
    float *q, *k, *v, *beta, *g;
} gin;

/* The reference: token by token, S[i][m] at S[i*dv + m]. */
static void seq_ref(const gin *x, float *S, float *o)
{
    const int dk = x->dk, dv = x->dv;
    for (int t = 0; t < x->n; t++) {
        const float *q = x->q + (size_t)t * dk, *k = x->k + (size_t)t * dk, *v = x->v + (size_t)t * dv;
        const float a = expf(x->g[t]);
        for (int m = 0; m < dv; m++) {
            float r = 0.0f;
            for (int i = 0; i < dk; i++) {
                S[i * dv + m] *= a;
                r += S[i * dv + m] * k[i];
            }
            const float d = x->beta[t] * (v[m] - r);
            float oo = 0.0f;
            for (int i = 0; i < dk; i++) {
                S[i * dv + m] += k[i] * d;
                oo += S[i * dv + m] * q[i];
            }
            o[(size_t)t * dv + m] = oo;
        }
    }
}

/* The chunked form (see the derivation above). */
static void chunked(const gin *x, float *S, float *o)
{
    const int dk = x->dk, dv = x->dv;
    float G[CH], A[CH][CH], P[CH][CH];
    float *D = malloc(sizeof(float) * CH * (size_t)dv);
    ck_assert_ptr_nonnull(D);
    for (int c0 = 0; c0 < x->n; c0 += CH) {
        const int L = x->n - c0 < CH ? x->n - c0 : CH;
        const float *K = x->k + (size_t)c0 * dk, *Q = x->q + (size_t)c0 * dk, *V = x->v + (size_t)c0 * dv;
        const float *b = x->beta + c0;
        float acc = 0.0f;
        for (int t = 0; t < L; t++)
            G[t] = acc += x->g[c0 + t];
        /* A_ts = b_t E_ts k_t.k_s (s < t);  P_ts = E_ts q_t.k_s (s <= t) */
        for (int t = 0; t < L; t++)
            for (int s = 0; s <= t; s++) {
                float kk = 0.0f, qk = 0.0f;
                for (int i = 0; i < dk; i++) {
                    kk += K[t * dk + i] * K[s * dk + i];
                    qk += Q[t * dk + i] * K[s * dk + i];
                }
                const float e = expf(G[t] - G[s]);
                A[t][s] = s < t ? b[t] * e * kk : 0.0f;
                P[t][s] = e * qk;
            }
        for (int m = 0; m < dv; m++) {
            /* R, then forward substitution in place: D_t = R_t - sum A_ts D_s */
            for (int t = 0; t < L; t++) {
                float ks = 0.0f;
                for (int i = 0; i < dk; i++)
                    ks += K[t * dk + i] * S[i * dv + m];
                float d = b[t] * (V[t * dv + m] - expf(G[t]) * ks);
                for (int s = 0; s < t; s++)
                    d -= A[t][s] * D[s * dv + m];
                D[t * dv + m] = d;
            }
            for (int t = 0; t < L; t++) {
                float qs = 0.0f, in = 0.0f;
                for (int i = 0; i < dk; i++)
                    qs += Q[t * dk + i] * S[i * dv + m];
                for (int s = 0; s <= t; s++)
                    in += P[t][s] * D[s * dv + m];
                o[(size_t)(c0 + t) * dv + m] = expf(G[t]) * qs + in;
            }
            const float eL = expf(G[L - 1]);
            for (int i = 0; i < dk; i++) {
                float u = 0.0f;
                for (int s = 0; s < L; s++)
                    u += K[s * dk + i] * (expf(G[L - 1] - G[s]) * D[s * dv + m]);
                S[i * dv + m] = eL * S[i * dv + m] + u;
            }
        }
    }
    free(D);
}

static void unit(float *x, int n, float scale)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    const float sc = (float)(scale / sqrt(ss > 1e-12 ? ss : 1e-12));
    for (int i = 0; i < n; i++)
        x[i] *= sc;
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, size_t n)
{
    double mx = 0.0, md = 0.0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(a[i]), "value %zu is %g", i, (double)a[i]);
        mx = fmax(mx, fabs(b[i]));
        md = fmax(md, fabs((double)a[i] - b[i]));
    }
    return md / fmax(mx, 1e-30);
}

/* gmax: the log decays are U(gmax, 0) (gmax = -8 makes some chunks decay
 * to nothing: exp(G) underflows and the state is forgotten). */
static void one_case(int n, int dk, int dv, float gmax)
{
    gin x = { .n = n, .dk = dk, .dv = dv };
    x.q = malloc(sizeof(float) * (size_t)n * dk);
    x.k = malloc(sizeof(float) * (size_t)n * dk);
    x.v = malloc(sizeof(float) * (size_t)n * dv);
    x.beta = malloc(sizeof(float) * (size_t)n);
    x.g = malloc(sizeof(float) * (size_t)n);
    float *s_ref = malloc(sizeof(float) * (size_t)dk * dv), *s_ch = malloc(sizeof(float) * (size_t)dk * dv);
    float *o_ref = malloc(sizeof(float) * (size_t)n * dv), *o_ch = malloc(sizeof(float) * (size_t)n * dv);
    ck_assert(x.q && x.k && x.v && x.beta && x.g && s_ref && s_ch && o_ref && o_ch);
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < dk; i++) {
            x.q[(size_t)t * dk + i] = frand();
            x.k[(size_t)t * dk + i] = frand();
        }
        unit(x.q + (size_t)t * dk, dk, 1.0f / sqrtf((float)dk));
        unit(x.k + (size_t)t * dk, dk, 1.0f);
        for (int m = 0; m < dv; m++)
            x.v[(size_t)t * dv + m] = 2.0f * frand();
        x.beta[t] = 1.0f / (1.0f + expf(-2.0f * frand()));
        x.g[t] = gmax * 0.5f * (frand() + 1.0f);
    }
    for (int i = 0; i < dk * dv; i++)
        s_ref[i] = s_ch[i] = 0.5f * frand();
    seq_ref(&x, s_ref, o_ref);
    chunked(&x, s_ch, o_ch);
    const double eo = rel_err(o_ch, o_ref, (size_t)n * dv), es = rel_err(s_ch, s_ref, (size_t)dk * dv);
    printf("chunked GDN n %4d dk %3d dv %3d g in [%g, 0]: output rel err %.2e, state rel err %.2e\n", n, dk, dv,
           (double)gmax, eo, es);
    ck_assert_msg(eo <= 1e-5, "n %d: output rel err %g", n, eo);
    ck_assert_msg(es <= 1e-5, "n %d: state rel err %g", n, es);
    free(x.q);
    free(x.k);
    free(x.v);
    free(x.beta);
    free(x.g);
    free(s_ref);
    free(s_ch);
    free(o_ref);
    free(o_ch);
}

static const int lens[] = { 1, 5, 63, 64, 65, 200, 257 };

START_TEST(test_chunked_vs_seq)
{
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        one_case(lens[i], 32, 48, -0.5f);
        one_case(lens[i], 128, 128, -0.1f);
    }
}
END_TEST

/* Strong decay: chunk decay factors underflow, ratios stay finite. */
START_TEST(test_chunked_strong_decay)
{
    one_case(200, 30, 40, -8.0f);
    one_case(129, 64, 32, -2.0f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gdn_chunk");
    TCase *tc = tcase_create("math");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_chunked_vs_seq);
    tcase_add_test(tc, test_chunked_strong_decay);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
