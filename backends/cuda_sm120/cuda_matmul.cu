// backends/cuda_sm120/cuda_matmul.cu — MATMUL as a GEMV-style kernel, also
// used for the routed experts of MOE (a weight per column).
//
// One warp per weight row (a block per row for small one-column products);
// the lanes walk the row 8 elements at a time
// (lane l takes elements 8l.., 8l+256.., so the activation reads of a warp
// are contiguous), decode them in registers and accumulate in f32 against
// up to NT activation columns, then reduce with warp shuffles.  Decoded
// weights are reused for the NT columns of a pass; NT = 1 serves decode and
// the expert products (whose columns have different weights).
// Correct for any column count; large batches re-read the weights once per
// NT columns (a tiled tensor-core kernel is the follow-up).
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

#define MM_WARPS 4

// KS = 1: one warp per row, MM_WARPS rows a block.  KS = MM_WARPS: a
// block per row, warp w taking groups w, w + MM_WARPS, ... of it (one
// column, no experts: the small decode products, router 2048 -> 256 and
// GDN alpha/beta 2048 -> 32, whose rows alone leave most of the GPU idle
// and each warp a long chain of loads); the warps' sums are added in
// order through shared memory.
template <int T, int NT, int KS>
__global__ void __launch_bounds__(32 * MM_WARPS) mm_kernel(cu_mm mm)
{
    __shared__ float part[MM_WARPS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r = KS == 1 ? (int64_t)blockIdx.x * MM_WARPS + warp : (int64_t)blockIdx.x;
    if (r >= mm.rows)
        return;
    const int64_t n8 = mm.in / 8;
    const int64_t g0 = KS == 1 ? lane : (int64_t)warp * 32 + lane;
    for (int64_t j0 = (int64_t)blockIdx.y * NT; j0 < mm.ncols; j0 += (int64_t)gridDim.y * NT) {
        const int nt = mm.ncols - j0 < NT ? (int)(mm.ncols - j0) : NT;
        const uint8_t *w = mm.w + (uint64_t)r * mm.row_bytes;
        if (mm.expert != NULL)
            w += (uint64_t)mm.expert[j0] * mm.expert_bytes;
        const float *xs[NT];
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            xs[t] = mm.x + ((j0 + (t < nt ? t : 0)) / mm.x_div) * mm.x_stride;
            acc[t] = 0.0f;
        }
        // unrolled so that several groups' loads are in flight per lane:
        // the small f32 products of decode otherwise wait one round trip
        // per group
#pragma unroll 4
        for (int64_t g = g0; g < n8; g += 32 * KS) {
            float wv[8];
            cu_deq8<T>(w, g * 8, wv);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < nt) {
                    const float *xp = xs[t] + g * 8;
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[t] = fmaf(wv[j], xp[j], acc[t]);
                }
            }
        }
        if (cu_is_plain<T>::value && (KS == 1 || warp == 0)) {
            for (int64_t i = n8 * 8 + lane; i < mm.in; i += 32) {
                const float wi = cu_deq1<T>(w, i);
#pragma unroll
                for (int t = 0; t < NT; t++)
                    if (t < nt)
                        acc[t] = fmaf(wi, xs[t][i], acc[t]);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = cu_warp_sum(acc[t]);
            if (KS > 1) {   // (NT = 1 here: one column)
                if (lane == 0)
                    part[warp] = s;
                __syncthreads();
                s = 0.0f;
#pragma unroll
                for (int k = 0; k < KS; k++)
                    s += part[k];
            }
            if (lane == 0 && t < nt && (KS == 1 || warp == 0))
                mm.y[(j0 + t) * mm.y_stride + r] = s;
        }
    }
}

// A block per row below this many rows (one column, no experts).
#define MM_SMALL_ROWS 2048

template <int T> static cudaError_t mm_launch(const cu_mm *mm, cudaStream_t s)
{
    const bool one = mm->ncols == 1 || mm->expert != NULL;
    const bool small = mm->ncols == 1 && mm->expert == NULL && mm->rows <= MM_SMALL_ROWS;
    const int64_t gx = small ? mm->rows : (mm->rows + MM_WARPS - 1) / MM_WARPS;
    const int nt = one ? 1 : 8;
    int64_t gy = (mm->ncols + nt - 1) / nt;
    if (gy > 65535)
        gy = 65535;   // the kernel loops over the rest
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)gx, (unsigned)gy);
    if (small)
        mm_kernel<T, 1, MM_WARPS><<<grid, 32 * MM_WARPS, 0, s>>>(*mm);
    else if (one)
        mm_kernel<T, 1, 1><<<grid, 32 * MM_WARPS, 0, s>>>(*mm);
    else
        mm_kernel<T, 8, 1><<<grid, 32 * MM_WARPS, 0, s>>>(*mm);
    return cudaGetLastError();
}

extern "C" bool si_cu_type_ok(uint32_t type)
{
    switch (type) {
    case SI_TYPE_F32: case SI_TYPE_F16: case SI_TYPE_BF16: case SI_TYPE_Q8_0:
    case SI_TYPE_Q4_K: case SI_TYPE_Q5_K: case SI_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

extern "C" int si_cu_matmul(const cu_mm *mm, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (mm->x_div < 1)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
        CU_TYPE_CASES(mm_launch, mm, s)
    default:
        return (int)cudaErrorInvalidValue;
    }
}
