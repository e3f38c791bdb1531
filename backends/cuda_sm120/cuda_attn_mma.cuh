// backends/cuda_sm120/cuda_attn_mma.cuh — device pieces shared by the two
// f16 tensor-core decode attention cores over the dense f16 cache:
// split_mma_kernel (cuda_attn_mma.cu, block-wide 64-position tiles) and
// split_ring_kernel (cuda_attn_ring.cu, a cp.async ring per warp).  Both
// take the block's query heads as the B operand of S^T = K Q^T, so both
// build Q^T's fragments the same way, and both stage K/V rows into padded
// shared rows the same way.  No PTX here and no cuda_ptx.cuh include: the
// including .cu has it (tests/cuda/emu swaps it for ptx_emu.h).
#ifndef SI_CUDA_ATTN_MMA_CUH
#define SI_CUDA_ATTN_MMA_CUH

#include <cuda_fp16.h>

#include "cuda_attn.cuh"

#define DM_PAD 8   /* halves of padding a staged row: fragment loads conflict-free */

// Rows [p0, p0 + cnt) of one kv head (row p at byte offset p * stepb from
// src) into the padded tile dst (rs halves a row), 16 bytes per copy, by
// the threads i0, i0 + step, .. (a block: threadIdx.x, blockDim.x; a
// warp: its lane, 32).
__device__ __forceinline__ void dm_issue(__half *dst, int rs, const char *src, uint64_t stepb, int64_t p0, int cnt,
                                         int hd, int i0, int step)
{
    const int cpr = hd >> 3;
    for (int i = i0; i < cnt * cpr; i += step) {
        const int r = i / cpr, c = i % cpr;
        cp_async16(dst + r * rs + c * 8, src + (uint64_t)(p0 + r) * stepb + c * 16);
    }
}

// S^T [16 positions x 8 heads] += K [16 x hd] . Q^T by one warp: K's 16
// f16 rows from k16 (rs halves apart) as A fragments by ldmatrix (lane l
// gives row l & 7 of matrix l >> 3: rows 8 (lm & 1).., dims 8 (lm >> 1)..
// of each 16-wide step), Q^T's from qf (dm_q_frags).  sc: positions gr,
// gr + 8 (0, 1 / 2, 3) of heads 2qd, 2qd + 1 (0, 2 / 1, 3).  C = 1: the
// KS steps into sc in turn, one chain of KS dependent mma; C = 2 (knob
// attn_ring_chains = 2, the ring kernel): the even and the odd steps into
// two accumulators added at the end (another f32 order).
template <int KS, int C = 1>
__device__ __forceinline__ void dm_scores(const __half *k16, int rs, const uint32_t (&qf)[KS][2], float sc[4])
{
    const int lane = threadIdx.x & 31, lm = lane >> 3, lr = lane & 7;
    const uint32_t kb = smem_u32(k16 + ((lm & 1) * 8 + lr) * rs + (lm >> 1) * 8);
    float s2[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
    for (int k = 0; k < KS; k++) {
        uint32_t af[4];
        ldsm_x4(af, kb + 32 * k);
        mma_f16(C == 2 && (k & 1) ? s2 : sc, af, qf[k][0], qf[k][1]);
    }
    if (C == 2)
#pragma unroll
        for (int j = 0; j < 4; j++)
            sc[j] += s2[j];
}

// The block's place (split_where) and its kv head's K and V rows in the
// dense cache: row p at kg/vg + p * stepb.  False: nothing to do.
struct dm_blk {
    split_blk   b;
    const char *kg, *vg;
    uint64_t    stepb;
};
template <int RB> static __device__ __forceinline__ bool dm_where(const cu_attn &a, int32_t chunk, int hd, dm_blk &d)
{
    if (!split_where<RB>(a, chunk, d.b))
        return false;
    const uint64_t rowb = (uint64_t)hd * 2;
    const uint64_t row0 = (((uint64_t)a.seq[d.b.t] * a.n_ctx) * a.n_head_kv + (uint64_t)d.b.g) * rowb;
    d.stepb = (uint64_t)a.n_head_kv * rowb;
    d.kg = (const char *)a.kc + row0;
    d.vg = (const char *)a.vc + row0;
    return true;
}

// The block's RB query rows (token t, heads h0..) loaded into qs [RB][hd]
// f32, normed and roped there (f32, as every core), rounded into qh [8][rs]
// f16 (rows RB..7 zero: padded heads score 0 and are never stored), and
// Q^T's B fragments into qf: head gr = lane / 4, dims 16k + 2 (lane % 4)
// (+1) and + 8.  All loads of q go out before the first store.  Contains
// __syncthreads().  Returns the block's first q/gate row.  NT: the
// block's threads.
template <int RB, int KS, int NT>
static __device__ __forceinline__ const float *dm_q_frags(const cu_attn &a, int64_t t, int h0, float *qs, __half *qh,
                                                          uint32_t (&qf)[KS][2])
{
    constexpr int hd = KS * 16, rs = hd + DM_PAD;
    const float *qg = a.qg + t * a.qg_stride + (uint64_t)h0 * 2 * hd;
    {
        constexpr int PER = (RB * hd + NT - 1) / NT;
        float qv[PER];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = threadIdx.x + k * NT;   // index in [RB][hd]
            if (i < RB * hd)
                qv[k] = qg[(uint64_t)(i / hd) * 2 * hd + i % hd];
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = threadIdx.x + k * NT;
            if (i < RB * hd)
                qs[i] = qv[k];
        }
    }
    for (int i = threadIdx.x; i < (8 - RB) * rs; i += blockDim.x)
        qh[RB * rs + i] = __float2half_rn(0.0f);
    __syncthreads();
    norm_rope_rows(qs, RB, a.q_norm, a, a.rope + t * a.n_rot);
    for (int i = threadIdx.x; i < RB * hd; i += blockDim.x)
        qh[(i / hd) * rs + i % hd] = __float2half_rn(qs[i]);
    __syncthreads();
    const int lane = threadIdx.x & 31, gr = lane >> 2, qd = lane & 3;
#pragma unroll
    for (int k = 0; k < KS; k++) {
        qf[k][0] = *(const uint32_t *)(qh + gr * rs + 16 * k + 2 * qd);
        qf[k][1] = *(const uint32_t *)(qh + gr * rs + 16 * k + 8 + 2 * qd);
    }
    return qg;
}

#endif
