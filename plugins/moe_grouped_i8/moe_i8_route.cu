// plugins/moe_grouped_i8/moe_i8_route.cu — everything of the grouped MOE
// that is not a GEMM:
//   route_warp_kernel (cuda_sm120's cuda_route.cuh, the backend's own
//                    router): one warp per token, the cpu backend's order:
//                    softmax in f32, top-k with ties to the lower index,
//                    weights renormalised (denominator clamped).  The
//                    plugin's one-thread-per-token router took 0.62 ms a
//                    2048-token batch on the H200 (ncu), a fifth of the op;
//   schedule_kernel: ONE block builds the expert -> tile schedule on the
//                    device (counts, prefix sums over tiles, tile list,
//                    per-row token/assignment), so nothing goes to the host;
//   quant_kernel:    int8 per 32 with the cpu backend's exact rounding;
//   combine_kernel:  dst[t] = sum_k w[t][k] * y[t*K+k] (k in order) plus
//                    sigmoid(gamma[t]) * ys[t]; no atomics.
// Row order inside an expert's group comes from shared-memory atomics and
// may change from run to run; no result depends on it (every row of a
// GEMM tile is computed on its own, with a fixed k order).
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_route.cuh"   // route_warp_kernel (backend device header)
#include "moe_i8.h"

__global__ void __launch_bounds__(1024) schedule_kernel(const int32_t *sel, int64_t NK, int E, int K,
                                                        int bt, int32_t *n_tiles, int32_t *tile_exp,
                                                        int32_t *row_tok, int32_t *row_slot)
{
    __shared__ int cnt[MI8_MAX_E], first[MI8_MAX_E], fill[MI8_MAX_E];
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        cnt[e] = 0;
        fill[e] = 0;
    }
    __syncthreads();
    for (int64_t a = threadIdx.x; a < NK; a += blockDim.x)
        atomicAdd(&cnt[sel[a]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        // E <= 1024 sums: a serial scan is cheaper than a tree at this size
        int tiles = 0;
        for (int e = 0; e < E; e++) {
            first[e] = tiles;
            tiles += (cnt[e] + bt - 1) / bt;
        }
        *n_tiles = tiles;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const int nt = (cnt[e] + bt - 1) / bt;
        for (int i = 0; i < nt; i++)
            tile_exp[first[e] + i] = e;
        // padding rows read any valid token and are never stored; spread
        // over the tokens, as a small batch's tiles are mostly padding and
        // thousands of blocks reading one token row hammer one L2 slice
        for (int r = cnt[e]; r < nt * bt; r++) {
            row_tok[(int64_t)first[e] * bt + r] = (int32_t)(((int64_t)first[e] * bt + r) % (NK / K));
            row_slot[(int64_t)first[e] * bt + r] = -1;
        }
    }
    for (int64_t a = threadIdx.x; a < NK; a += blockDim.x) {
        const int e = sel[a];
        const int64_t r = (int64_t)first[e] * bt + atomicAdd(&fill[e], 1);
        row_tok[r] = (int32_t)(a / K);
        row_slot[r] = (int32_t)a;
    }
}

// One warp per block of 32 values: d = amax / 127, q = rint(x * (1/d)) with
// ties to even (the cpu's cpu_quantize_row_q8 exactly: same d, same
// reciprocal, same product), s = the f32 sum (NaN/Inf kept in d, as there).
__global__ void quant_kernel(const float *x, int64_t stride, int64_t n, int64_t in, int8_t *q, float *d, float *s)
{
    const int64_t nb = in / 32, total = n * nb;
    const int lane = threadIdx.x & 31;
    for (int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; blk < total;
         blk += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int64_t r = blk / nb, i = (blk % nb) * 32 + lane;
        const float v = x[r * stride + i];
        float amax = fabsf(v), sum = v;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        }
        const float dd = __fdiv_rn(amax, 127.0f), id = dd > 0.0f ? __fdiv_rn(1.0f, dd) : 0.0f;
        q[r * in + i] = (int8_t)__float2int_rn(__fmul_rn(v, id));
        if (lane == 0) {
            d[blk] = dd + (sum - sum);
            s[blk] = sum;
        }
    }
}

__global__ void combine_kernel(float *dst, int64_t ds, const float *y, const float *wts, const float *ys,
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

static unsigned grid_for(int64_t threads, int64_t per_block)
{
    int64_t b = (threads + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);   // kernels loop over the rest
}

extern "C" int mi8_route(float *logits, int64_t n, int E, int K, int32_t *sel, float *wts, void *stream)
{
    if (n <= 0)
        return 0;
    if (E > MI8_MAX_E)
        return (int)cudaErrorInvalidValue;   // (supports() declines such a model first)
    const int64_t blocks = (n + 3) / 4;     // 4 warps a block, one per token (no grid loop)
    if (blocks > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    const unsigned g = (unsigned)blocks;
    if (E <= 256)
        route_warp_kernel<8><<<g, 128, 0, (cudaStream_t)stream>>>(logits, n, E, K, sel, wts);
    else
        route_warp_kernel<32><<<g, 128, 0, (cudaStream_t)stream>>>(logits, n, E, K, sel, wts);
    return (int)cudaGetLastError();
}

extern "C" int mi8_schedule(const int32_t *sel, int64_t n, int E, int K, int bt, int32_t *n_tiles,
                            int32_t *tile_exp, int32_t *row_tok, int32_t *row_slot, int64_t max_tiles, void *stream)
{
    (void)max_tiles;   // the caller sized the arrays for n*K/BT + E tiles, the most there can be
    if (E > MI8_MAX_E || E <= 0 || bt <= 0)
        return (int)cudaErrorInvalidValue;
    schedule_kernel<<<1, 1024, 0, (cudaStream_t)stream>>>(sel, n * K, E, K, bt, n_tiles, tile_exp, row_tok,
                                                          row_slot);
    return (int)cudaGetLastError();
}

extern "C" int mi8_quantize(const float *x, int64_t stride, int64_t n, int64_t in, mi8_act a, void *stream)
{
    if (n <= 0)
        return 0;
    if (in % 32 != 0)
        return (int)cudaErrorInvalidValue;
    quant_kernel<<<grid_for(n * (in / 32) * 32, 256), 256, 0, (cudaStream_t)stream>>>(x, stride, n, in, a.q, a.d, a.s);
    return (int)cudaGetLastError();
}

extern "C" int mi8_combine(float *dst, int64_t dst_stride, const float *y, const float *wts, const float *ys,
                           const float *gamma, int64_t n, int K, int64_t H, void *stream)
{
    if (n <= 0 || H <= 0)
        return 0;
    combine_kernel<<<grid_for(n * H, 256), 256, 0, (cudaStream_t)stream>>>(dst, dst_stride, y, wts, ys, gamma, n, K, H);
    return (int)cudaGetLastError();
}
