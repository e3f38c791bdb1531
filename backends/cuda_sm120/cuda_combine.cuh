// backends/cuda_sm120/cuda_combine.cuh — the MOE combine's arithmetic of
// one output element, shared by cuda_moe.cu's combine_kernel and
// cuda_mmq.cu's sdc_kernel (knob moe_sdc): one copy of the
// operations, so the two give the same bits.
#ifndef SI_CUDA_COMBINE_CUH
#define SI_CUDA_COMBINE_CUH
#include <math.h>

// Picks a thread holds at once (K <= CB_K: all loaded before the first add)
#define CB_K 8

// The shared expert's gate: sigmoid(gamma[t]).
__device__ __forceinline__ float cb_gate(float gv) { return 1.0f / (1.0f + expf(-gv)); }

// The routed sum o plus the shared expert's value sv gated by gm.
__device__ __forceinline__ float cb_shared(float o, float gm, float sv) { return __fadd_rn(o, __fmul_rn(gm, sv)); }

// One output element from its K weights and expert values (K <= CB_K, in
// pick order) and, with sh, the shared expert's value sv gated by gm.
__device__ __forceinline__ float cb_sum(const float wv[CB_K], const float yv[CB_K], int K, bool sh, float gm,
                                        float sv)
{
    float o = 0.0f;
#pragma unroll
    for (int k = 0; k < CB_K; k++)
        if (k < K)
            o = __fadd_rn(o, __fmul_rn(wv[k], yv[k]));
    return sh ? cb_shared(o, gm, sv) : o;
}
#endif
