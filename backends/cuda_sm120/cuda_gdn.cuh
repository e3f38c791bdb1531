// backends/cuda_sm120/cuda_gdn.cuh — device helpers shared by the two GDN
// paths (cuda_gdn.cu: token by token; cuda_gdn_chunk.cu: chunked prefill),
// so that both compute the gates and norms with the same rounding as the
// cpu backend (double sums, f32 scales).
#ifndef SI_CUDA_GDN_CUH
#define SI_CUDA_GDN_CUH

#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

// The chunked prefill (cuda_gdn_chunk.cu, cuda_gdn_tc.cu): chunks of
// GDN_CH tokens; chunk_pre_kernel leaves one record of GDN_TP_REC floats
// per (chunk, v-head) in cu_gdn.tp: T' and P (both [s][t], GDN_CH^2
// each), then exp(G_t) (GDN_CH), the state weights exp(G_last - G_s)
// (0 past the chunk's end; GDN_CH) and exp(G_last) (padded to GDN_CH).
#define GDN_CH     64
#define GDN_TP_EG  (2 * GDN_CH * GDN_CH)
#define GDN_TP_W   (GDN_TP_EG + GDN_CH)
#define GDN_TP_EL  (GDN_TP_W + GDN_CH)
#define GDN_TP_REC (GDN_TP_EL + GDN_CH)

// dst[0..n) = x * (1 / max(||x||, eps)) * extra, for the block (dst may
// be x: each thread rewrites only what it read, after the reduction).
static __device__ __forceinline__ void cu_l2norm(const float *x, float *dst, int n, float eps, float extra,
                                                 double *red)
{
    double ss = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += (double)x[i] * (double)x[i];
    ss = cu_block_sumd(ss, red);
    const double nrm = sqrt(ss);
    const float sc = __fmul_rn((float)(1.0 / (nrm > eps ? nrm : (double)eps)), extra);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = __fmul_rn(x[i], sc);
}

// beta = sigmoid(b); log decay g = ssm_a * softplus(a + dt_bias) (spec
// §3.5 step 7; the decay is exp(g)).
static __device__ __forceinline__ float cu_gdn_beta(float bt) { return 1.0f / (1.0f + expf(-bt)); }

static __device__ __forceinline__ float cu_gdn_logdecay(float at, float ssm_a, float dt_b)
{
    const float sp_in = at + dt_b;
    const float sp = sp_in > 20.0f ? sp_in : log1pf(expf(sp_in));
    return ssm_a * sp;
}

// Gated RMSNorm of one head's output o[0..dv) (block-wide): out[m] =
// o[m] / rms(o) * norm_w[m] * silu(z[m]).  out may be o.
static __device__ __forceinline__ void cu_gdn_gnorm(const float *o, const float *z, const float *norm_w,
                                                    float *out, int dv, float eps, double *red)
{
    double ss = 0.0;
    for (int m = threadIdx.x; m < dv; m += blockDim.x)
        ss += (double)o[m] * (double)o[m];
    ss = cu_block_sumd(ss, red);
    const float sc = (float)(1.0 / sqrt(ss / dv + (double)eps));
    for (int m = threadIdx.x; m < dv; m += blockDim.x)
        out[m] = __fmul_rn(__fmul_rn(__fmul_rn(o[m], sc), norm_w[m]), cu_silu(z[m]));
}

// Conv taps held in registers at decode (conv_k <= GDN_CONV_REG).
#define GDN_CONV_REG 8

// One channel's causal depthwise conv at decode (a run of one token):
// silu(w[K-1] * x + sum_j<K-1 w[j] * st[j]), with the channel's old state
// st[0..K-1) (oldest first) left in sv[] for the shift.  conv_kernel
// (cuda_gdn.cu) and the fused decode kernel (cuda_gdn_rows.cu) both call
// it, so their conv outputs are the same bits.  Weights, state and input
// loaded at once, then the sum: a loop that read state entries after
// writing others would be a round trip each.
static __device__ __forceinline__ void cu_gdn_conv_load(const float *w, const float *st, int K,
                                                        float wv[GDN_CONV_REG], float sv[GDN_CONV_REG])
{
    const int H = K - 1;
#pragma unroll
    for (int j = 0; j < GDN_CONV_REG; j++) {
        wv[j] = j < K ? w[j] : 0.0f;
        sv[j] = j < H ? st[j] : 0.0f;
    }
}

static __device__ __forceinline__ float cu_gdn_conv_sum(const float wv[GDN_CONV_REG], const float sv[GDN_CONV_REG],
                                                       float x, int K)
{
    const int H = K - 1;
    float wh = 0.0f;   // w[H] without a dynamic index into registers
#pragma unroll
    for (int j = 0; j < GDN_CONV_REG; j++)
        wh = j == H ? wv[j] : wh;
    float acc = wh * x;
#pragma unroll
    for (int j = 0; j < GDN_CONV_REG; j++)
        if (j < H)
            acc += wv[j] * sv[j];
    return cu_silu(acc);
}

// (the two halves above: the fused decode kernel issues every channel's
// loads before the first sum)
static __device__ __forceinline__ float cu_gdn_conv_dec(const float *w, const float *st, float x, int K,
                                                        float sv[GDN_CONV_REG])
{
    float wv[GDN_CONV_REG];
    cu_gdn_conv_load(w, st, K, wv, sv);
    return cu_gdn_conv_sum(wv, sv, x, K);
}

// The last run whose field F (t0 or chunk0, rising with the index) is <= v.
template <int64_t cu_gdn_run::*F>
static __device__ __forceinline__ int cu_gdn_run_last(const cu_gdn_run *runs, int n_runs, int64_t v)
{
    int lo = 0, hi = n_runs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (runs[mid].*F <= v)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Index of the run holding token t (runs are in token order, t0 rising).
static __device__ __forceinline__ int cu_gdn_run_of(const cu_gdn_run *runs, int n_runs, int64_t t)
{
    return cu_gdn_run_last<&cu_gdn_run::t0>(runs, n_runs, t);
}

// Whether a run goes to the chunked delta kernel (else delta_kernel).
static __device__ __forceinline__ bool cu_gdn_is_chunked(const cu_gdn &g, int64_t len)
{
    return g.chunk_min > 0 && len >= g.chunk_min;
}

#endif
