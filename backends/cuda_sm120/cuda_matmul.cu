// backends/cuda_sm120/cuda_matmul.cu — MATMUL as a GEMV-style kernel, also
// used for the routed experts of MOE (a weight per column).
//
// One warp per weight row; the lanes walk the row 8 elements at a time
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

template <int T, int NT>
__global__ void __launch_bounds__(32 * MM_WARPS) mm_kernel(cu_mm mm)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + warp;
    if (r >= mm.rows)
        return;
    const int64_t n8 = mm.in / 8;
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
        // the small f32 products of decode (the GDN alpha/beta and MoE
        // router rows, 2048 wide) otherwise wait one round trip per group
#pragma unroll 4
        for (int64_t g = lane; g < n8; g += 32) {
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
        if (cu_is_plain<T>::value) {
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
            const float s = cu_warp_sum(acc[t]);
            if (lane == 0 && t < nt)
                mm.y[(j0 + t) * mm.y_stride + r] = s;
        }
    }
}

template <int T> static cudaError_t mm_launch(const cu_mm *mm, cudaStream_t s)
{
    const int64_t gx = (mm->rows + MM_WARPS - 1) / MM_WARPS;
    const bool one = mm->ncols == 1 || mm->expert != NULL;
    const int nt = one ? 1 : 8;
    int64_t gy = (mm->ncols + nt - 1) / nt;
    if (gy > 65535)
        gy = 65535;   // the kernel loops over the rest
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)gx, (unsigned)gy);
    if (one)
        mm_kernel<T, 1><<<grid, 32 * MM_WARPS, 0, s>>>(*mm);
    else
        mm_kernel<T, 8><<<grid, 32 * MM_WARPS, 0, s>>>(*mm);
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
