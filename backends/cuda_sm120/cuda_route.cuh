// backends/cuda_sm120/cuda_route.cuh — the MOE router of one token per
// warp (route_token; route_warp_kernel, and rr_kernel's last block in
// cuda_matmul.cu): softmax over E <= 32 * J experts, top-K with
// ties to the lower index (a NaN below every number), weights
// renormalised with the denominator clamped: the cpu backend's choices.
// Device code shared by cuda_moe.cu (decode and the backend's prefill),
// cuda_matmul.cu (knob route_fused) and the moe_grouped_i8 plugin (its
// prefill batches): without -rdc each translation unit compiles its own
// copy of a __global__ template.
#ifndef SI_CUDA_ROUTE_CUH
#define SI_CUDA_ROUTE_CUH

#include <math.h>
#include <stdint.h>

#include "cuda_quant.cuh"   // cu_pdl_enter

// Selection order of (probability v, expert e) as one 64-bit key: larger
// v first, ties (two NaNs too) to the lower index, a NaN below every
// number (the cpu backend's order).  v is in [0, 1] or NaN (a softmax
// output), so its bits order like the values; NaN gets 0 and a number its
// bits + 1 above 32 bits, the index's complement below.  Key 0: nothing
// (taken, or past E).
__device__ __forceinline__ unsigned long long route_key(float v, int e)
{
    const unsigned hi = v != v ? 0u : __float_as_uint(v) + 1u;
    return ((unsigned long long)hi << 32) | (0xffffffffu - (unsigned)e);
}

// J = experts per lane held in registers (E <= 32 * J): the logits are read
// once and each probability computed once.  The K picks are K rounds of a
// warp arg-max over the keys by two __reduce_max_sync (the high words,
// then the low words of the lanes that hold the maximum); each lane keeps
// its own best key and only the lane that lost its pick scans its J again.
// The shuffle tree with a compare per level spent ~12 us per decode token
// at E = 256, K = 8 (one warp, a dependent chain of ~2800 instructions).
//
// route_token: one token's logits l[0..E) -> its K picks s[] and weights
// w[], by the calling warp (all 32 lanes).  CG: the logits were written by
// other blocks of the same launch (rr_kernel, cuda_matmul.cu), so they are
// read from the L2 (ld.global.cg), past this SM's L1 that may hold stale
// lines of the buffer.
template <int J, bool CG>
__device__ __forceinline__ void route_token(const float *l, int E, int K, int32_t *s, float *w)
{
    const int lane = threadIdx.x & 31;
    // Branch-free (selects, not branches around each expert's load and
    // exponential): one warp runs this alone while its block waits, so its
    // dependent chain is the route's time (moe_persist_prof, H100 stop 51,
    // moe_persist's phase 2 at E = 256, K = 8: 3.2 us with a branch around
    // every step and each exponential made twice, 2.5 us so).  A lane's experts
    // past E load expert 0's logit and are then set aside: -inf, weight 0,
    // key 0 (the same bits as skipping them: fmaxf with -inf, a sum plus
    // +0.0f).  Each exponential is computed once, for the sum and the key.
    float v[J], ev[J];
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int e = lane + 32 * j;
        const float *a = l + (e < E ? e : 0);
        const float x = CG ? __ldcg(a) : *a;
        v[j] = e < E ? x : -INFINITY;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < J; j++)
        mx = fmaxf(mx, v[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++) {
        const float t = expf(v[j] - mx);
        ev[j] = lane + 32 * j < E ? t : 0.0f;
        sum += ev[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    unsigned long long key[J], best = 0;
#pragma unroll
    for (int j = 0; j < J; j++) {
        const int e = lane + 32 * j;
        const float pv = ev[j] / sum;
        key[j] = e < E ? route_key(pv, e) : 0ull;
        best = key[j] > best ? key[j] : best;
    }
    float tot = 0.0f;
    for (int k = 0; k < K; k++) {
        const unsigned hi = __reduce_max_sync(0xffffffffu, (unsigned)(best >> 32));
        const unsigned lo = __reduce_max_sync(0xffffffffu, (unsigned)(best >> 32) == hi ? (unsigned)best : 0u);
        // lo == 0: fewer than K experts (only with K > E): index 0, weight 0
        const int bi = lo == 0u ? 0 : (int)(0xffffffffu - lo);
        const float bv = lo == 0u ? 0.0f : hi == 0u ? __uint_as_float(0x7fffffffu) : __uint_as_float(hi - 1u);
        const bool mine = lo != 0u && (bi & 31) == lane;
        best = 0;
#pragma unroll
        for (int j = 0; j < J; j++) {
            key[j] = mine && j == (bi >> 5) ? 0ull : key[j];
            best = key[j] > best ? key[j] : best;
        }
        if (lane == 0) {
            s[k] = bi;
            w[k] = bv;
        }
        tot += bv;
    }
    if (!(tot >= 6.103515625e-5f) && !isnan(tot))
        tot = 6.103515625e-5f;
    __syncwarp();
    for (int k = lane; k < K; k += 32)
        w[k] /= tot;
}

template <int J>
__global__ void route_warp_kernel(const float *logits, int64_t n, int E, int K, int32_t *sel, float *wts)
{
    cu_pdl_enter();
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= n)
        return;
    route_token<J, false>(logits + t * E, E, K, sel + t * K, wts + t * K);
}

#endif
