// backends/cuda_sm120/cuda_attn.cuh — device pieces shared by the two
// attention translation units: cuda_attn.cu (RoPE, K/V append, dense-cache
// attention, the split combine) and cuda_attn_i8.cu (split-K attention
// over the paged int8 cache).  Without -rdc every TU needs its own copy of
// a __device__ function, hence `static` here.
#ifndef SI_CUDA_ATTN_CUH
#define SI_CUDA_ATTN_CUH

#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

#define SPLIT_THREADS 128
#define SPLIT_WARPS   (SPLIT_THREADS / 32)
#define SPLIT_TILE    64     /* positions per online-softmax step: 2 per lane; 4 KV pages */
#define SPLIT_MAX     1024   /* splits per (token, head): combine's shared w  */

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// x (shared, head_dim) <- rope(rms(x) * w) for the block; w NULL = no norm.
static __device__ void norm_rope(float *x, const float *w, const cu_attn &a, const float *cs, double *red)
{
    const int hd = a.head_dim;
    if (w != NULL) {
        double ss = 0.0;
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            ss += (double)x[i] * (double)x[i];
        ss = cu_block_sumd(ss, red);
        const float sc = (float)(1.0 / sqrt(ss / hd + (double)a.eps));
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            x[i] = __fmul_rn(__fmul_rn(x[i], sc), w[i]);
        __syncthreads();
    }
    const int half = a.n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float x0 = x[i], x1 = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
        x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        x[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
    __syncthreads();
}

// Paged int8 cache of one layer: row (page, kv head g, slot) of K or V is
// hd int8 at element offset row * hd, its scale at ks/vs[row].
static __device__ __forceinline__ uint64_t kv_page_row(const cu_attn &a, int32_t seq, int64_t pos, int g)
{
    const int32_t pg = a.pages[(uint64_t)seq * a.max_pages + (uint64_t)(pos / SI_KV_PAGE)];
    return ((uint64_t)pg * a.n_head_kv + (uint64_t)g) * SI_KV_PAGE + (uint64_t)(pos % SI_KV_PAGE);
}

// Launches the split kernel over the paged int8 cache (cuda_attn_i8.cu):
// grid (n, n_head / rb, n_split), partials in a->part as the dense split's.
void cu_launch_split_i8(const cu_attn *a, int rb, int32_t chunk, int n_split, size_t smem, cudaStream_t s);

#endif
