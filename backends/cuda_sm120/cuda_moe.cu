// backends/cuda_sm120/cuda_moe.cu — the MOE pieces that are not products
// (those go through si_cu_matmul with a weight per column):
//   route_warp_kernel: one warp per token (E <= 1024), the token's logits in
//                   registers: max and sum of the
//                   softmax by warp reductions, then K rounds of a warp
//                   arg-max over the experts not yet taken (ties to the
//                   lower index, like the cpu backend), weights
//                   renormalised (denominator clamped).  One thread per
//                   token (route_kernel, kept for E > 1024) spent ~0.3 ms
//                   per layer at E = 256, K = 8 in decode: a single thread
//                   walking 16k compares through memory;
//   swiglu_kernel:  silu(gate) * up over expert rows;
//   combine_kernel: dst[t] = sum_k w[t][k] * y[t][k] (k in order) plus
//                   sigmoid(gamma[t]) * shared[t]; no atomics, so results
//                   do not depend on scheduling.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"
#include "cuda_route.cuh"
#include "cuda_combine.cuh"

__global__ void route_kernel(float *logits, int64_t n, int E, int K, int32_t *sel, float *wts)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    float *l = logits + t * E;
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) {
        l[e] = expf(l[e] - mx);
        sum += l[e];
    }
    for (int e = 0; e < E; e++)
        l[e] /= sum;
    int32_t *s = sel + t * K;
    float *w = wts + t * K, tot = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int q = 0; q < k; q++)
                taken |= s[q] == e;
            if (!taken && (best < 0 || l[e] > l[best]))
                best = e;
        }
        if (best < 0)
            best = 0;   // only with NaN logits; keeps the index in range
        s[k] = best;
        w[k] = l[best];
        tot += w[k];
    }
    if (!(tot >= 6.103515625e-5f) && !isnan(tot))
        tot = 6.103515625e-5f;
    for (int k = 0; k < K; k++)
        w[k] /= tot;
}

__global__ void swiglu_kernel(float *g, uint64_t gs, const float *u, uint64_t us, int64_t rows, int64_t F)
{
    cu_pdl_enter();
    const int64_t total = rows * F;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / F, i = idx % F;
        g[r * gs + i] = __fmul_rn(cu_silu(g[r * gs + i]), u[r * us + i]);
    }
}

// (K <= CB_K: all of a thread's weights and expert values are loaded
// before the first add, where the loop over a runtime K waited one round
// trip per pick: ~7 us per decode token at K = 8, 294 us of a 35b-a3b
// step on the H200 (ncu); the same adds in the same order either way)
__global__ void combine_kernel(float *dst, uint64_t ds, const float *y, const float *wts, const float *ys,
                               const float *gamma, int64_t n, int K, int64_t H)
{
    cu_pdl_enter();
    const int64_t total = n * H;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        // (32-bit division where it fits: the 64-bit one is a long routine)
        const int64_t t = total <= 0x7fffffff ? (int)idx / (int)H : idx / H, h = idx - t * H;
        const float *wt = wts + t * K, *yt = y + t * K * H + h;
        const float gv = ys != NULL ? gamma[t] : 0.0f, sv = ys != NULL ? ys[t * H + h] : 0.0f;
        float o = 0.0f;
        if (K <= CB_K) {
            float wv[CB_K], yv[CB_K];
#pragma unroll
            for (int k = 0; k < CB_K; k++) {
                wv[k] = k < K ? wt[k] : 0.0f;
                yv[k] = k < K ? yt[k * H] : 0.0f;
            }
            o = cb_sum(wv, yv, K, ys != NULL, ys != NULL ? cb_gate(gv) : 0.0f, sv);
        } else {
            for (int k = 0; k < K; k++)
                o = __fadd_rn(o, __fmul_rn(wt[k], yt[k * H]));
            if (ys != NULL)
                o = cb_shared(o, cb_gate(gv), sv);
        }
        dst[t * ds + h] = o;
    }
}

static unsigned blocks_for(int64_t total)
{
    int64_t b = (total + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

extern "C" int si_cu_moe_route(const float *logits, int64_t n, int E, int K, int32_t *sel, float *wts,
                               void *stream)
{
    if (n <= 0)
        return 0;
    if (E <= 1024) {   // at most 32 keys per lane
        const int64_t blocks = (n + 3) / 4;
        const unsigned g = (unsigned)(blocks < 0x7fffffff ? blocks : 0x7fffffff);
        cudaStream_t s = (cudaStream_t)stream;
        if (E <= 256)
            cu_launch(route_warp_kernel<8>, dim3(g), dim3(128), 0, s, logits, n, E, K, sel, wts);
        else
            cu_launch(route_warp_kernel<32>, dim3(g), dim3(128), 0, s, logits, n, E, K, sel, wts);
    } else {
        route_kernel<<<(unsigned)((n + 127) / 128), 128, 0, (cudaStream_t)stream>>>((float *)logits, n, E, K, sel,
                                                                                  wts);
    }
    return (int)cudaGetLastError();
}

extern "C" int si_cu_swiglu_rows(float *g, uint64_t g_stride, const float *u, uint64_t u_stride, int64_t rows,
                                 int64_t F, void *stream)
{
    if (rows <= 0 || F <= 0)
        return 0;
    return (int)cu_launch(swiglu_kernel, dim3(blocks_for(rows * F)), dim3(256), 0, (cudaStream_t)stream, g, g_stride, u,
                          u_stride, rows, F);
}

extern "C" int si_cu_moe_combine(float *dst, uint64_t dst_stride, const float *y, const float *wts,
                                 const float *ys, const float *gamma, int64_t n, int K, int64_t H, void *stream)
{
    if (n <= 0 || H <= 0)
        return 0;
    return (int)cu_launch(combine_kernel, dim3(blocks_for(n * H)), dim3(256), 0, (cudaStream_t)stream, dst, dst_stride, y,
                          wts, ys, gamma, n, K, H);
}
