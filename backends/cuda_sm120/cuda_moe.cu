// backends/cuda_sm120/cuda_moe.cu — the MOE pieces that are not products
// (those go through si_cu_matmul with a weight per column):
//   route_kernel:   one thread per token, the cpu backend's order exactly:
//                   softmax in f32, top-k with ties to the lower index,
//                   weights renormalised (denominator clamped);
//   swiglu_kernel:  silu(gate) * up over expert rows;
//   combine_kernel: dst[t] = sum_k w[t][k] * y[t][k] (k in order) plus
//                   sigmoid(gamma[t]) * shared[t]; no atomics, so results
//                   do not depend on scheduling.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

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
    const int64_t total = rows * F;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / F, i = idx % F;
        g[r * gs + i] = __fmul_rn(cu_silu(g[r * gs + i]), u[r * us + i]);
    }
}

__global__ void combine_kernel(float *dst, uint64_t ds, const float *y, const float *wts, const float *ys,
                               const float *gamma, int64_t n, int K, int64_t H)
{
    const int64_t total = n * H;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = idx / H, h = idx % H;
        float o = 0.0f;
        for (int k = 0; k < K; k++)
            o = __fadd_rn(o, __fmul_rn(wts[t * K + k], y[(t * K + k) * H + h]));
        if (ys != NULL) {
            const float gm = 1.0f / (1.0f + expf(-gamma[t]));
            o = __fadd_rn(o, __fmul_rn(gm, ys[t * H + h]));
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
    route_kernel<<<(unsigned)((n + 127) / 128), 128, 0, (cudaStream_t)stream>>>((float *)logits, n, E, K, sel,
                                                                              wts);
    return (int)cudaGetLastError();
}

extern "C" int si_cu_swiglu_rows(float *g, uint64_t g_stride, const float *u, uint64_t u_stride, int64_t rows,
                                 int64_t F, void *stream)
{
    if (rows <= 0 || F <= 0)
        return 0;
    swiglu_kernel<<<blocks_for(rows * F), 256, 0, (cudaStream_t)stream>>>(g, g_stride, u, u_stride, rows, F);
    return (int)cudaGetLastError();
}

extern "C" int si_cu_moe_combine(float *dst, uint64_t dst_stride, const float *y, const float *wts,
                                 const float *ys, const float *gamma, int64_t n, int K, int64_t H, void *stream)
{
    if (n <= 0 || H <= 0)
        return 0;
    combine_kernel<<<blocks_for(n * H), 256, 0, (cudaStream_t)stream>>>(dst, dst_stride, y, wts, ys, gamma, n, K,
                                                                        H);
    return (int)cudaGetLastError();
}
