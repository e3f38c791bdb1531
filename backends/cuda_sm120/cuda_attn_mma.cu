// backends/cuda_sm120/cuda_attn_mma.cu — knob attn_mma = true (with
// attn_gqa = shared, the f16 dense cache, head_dim a multiple of 16 up to
// 256): split-K decode attention whose two products run on the f16 tensor
// cores (mma.sync m16n8k16, f32 accumulate).  Same grid, split plan,
// online softmax and partials as split_gqa_kernel (cuda_attn_gqa.cu), so
// combine_kernel and split_store are shared.
// Why: split_gqa_kernel spreads one position's dot product over the 32
// lanes of a warp and reduces it with 5 shuffles per (position, head):
// ~6,000 dependent instructions a warp for one 64-position tile of the
// 35b-a3b's 8 heads, so one block took ~25 us at any context (ncu, H200)
// and at 32k the 9b's layer ran at 1.3 TB/s, issue-bound.  Here the block's
// RB query heads (those of one kv head, padded to the mma's 8 columns) are
// the B operand of both products:
//   S^T [16 positions x 8 heads] = K [16 x hd] . Q^T [hd x 8]   (a warp per
//        16 positions of the 64-position tile; Q's fragments held in
//        registers for the whole split);
//   O^T [hd x 8] += V^T [hd x 64] . P^T [64 x 8]   (a warp per hd/4 rows of
//        O^T, V^T's fragments by ldmatrix.trans).
// q (normed and roped in f32 as everywhere) and the softmax weights p are
// rounded to f16 for the tensor cores (K and V are f16 in the cache): the
// attention is still exact over every position, with f16 products and f32
// sums, like the flash-attention prefill (cuda_attn_fa.cu).
// Tiles: 64 positions of K and of V staged by cp.async, rows padded by 16
// bytes (fragment loads conflict-free), the next tile's K in flight during
// the softmax and the P V product, as split_gqa_kernel; V rows past the
// context are zeroed (0 * garbage would be NaN in the product).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_launch.cuh"
#include "cuda_ptx.cuh"

#include "cuda_attn_mma.cuh"

#define DM_T 64   /* positions a tile (SPLIT_TILE): 16 a warp in S */

// Block (token t, heads h0..h0+RB of kv head g, split s), as split_gqa_kernel.
// KS = hd / 16 k-steps of S (Q's fragments in registers); hd is KS * 16.
template <int RB, int KS>
__global__ void __launch_bounds__(SPLIT_THREADS) split_mma_kernel(cu_attn a, int32_t chunk, int n_split)
{
    cu_pdl_enter();
    // [qs: RB][hd] f32 (q, later the outputs) | [ps: RB][DM_T] f32 |
    // [qh: 8][rs] f16 | [ph: 8][DM_T + DM_PAD] f16 | K tile | V tile
    extern __shared__ float sm[];
    __shared__ float m_s[RB], l_s[RB], f_s[RB];
    constexpr int hd = KS * 16, rs = hd + DM_PAD, prs = DM_T + DM_PAD;
    constexpr int MT = KS / 4 > 0 ? KS / 4 : 1;   // 16-row tiles of O^T a warp
    dm_blk d;
    if (!dm_where<RB>(a, chunk, hd, d))
        return;
    const int64_t t = d.b.t, c0 = d.b.c0, c1 = d.b.c1;
    const int h0 = d.b.h0, s = d.b.s;
    const char *kg = d.kg, *vg = d.vg;
    const uint64_t stepb = d.stepb;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, qd = lane & 3;
    float *qs = sm, *ps = sm + RB * hd;
    __half *qh = (__half *)(ps + RB * DM_T), *ph = qh + 8 * rs, *kt = ph + 8 * prs, *vt = kt + DM_T * rs;
    {
        const int cnt = c1 - c0 < DM_T ? (int)(c1 - c0) : DM_T;
        dm_issue(kt, rs, kg, stepb, c0, cnt, hd, threadIdx.x, blockDim.x);
        cp_async_commit();
        dm_issue(vt, rs, vg, stepb, c0, cnt, hd, threadIdx.x, blockDim.x);
        cp_async_commit();
    }
    if (threadIdx.x < RB) {
        m_s[threadIdx.x] = -INFINITY;
        l_s[threadIdx.x] = 0.0f;
    }
    // padded heads: zero rows of P, so their columns stay 0
    for (int i = threadIdx.x; i < (8 - RB) * prs; i += blockDim.x)
        ph[RB * prs + i] = __float2half_rn(0.0f);
    uint32_t qf[KS][2];
    const float *qg = dm_q_frags<RB, KS, SPLIT_THREADS>(a, t, h0, qs, qh, qf);
    float acc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    // ldmatrix row addresses: lane l gives row l & 7 of matrix l >> 3
    const int lm = lane >> 3, lr = lane & 7;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t p0 = c0; p0 < c1; p0 += DM_T) {
        const int cnt = c1 - p0 < DM_T ? (int)(c1 - p0) : DM_T;
        const int64_t pn = p0 + DM_T;
        const int cnt_n = pn < c1 ? (c1 - pn < DM_T ? (int)(c1 - pn) : DM_T) : 0;
        // in flight: K and V of this tile; land K
        cp_async_wait_group<1>();
        __syncthreads();
        // S^T of positions 16 warp .. +15 (none past the context)
        if (16 * warp < cnt) {
            float sc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
            dm_scores<KS>(kt + 16 * warp * rs, rs, qf, sc);
            // c0/c1: position 16 warp + gr, heads 2qd, 2qd + 1; c2/c3: + 8
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int hh = 2 * qd + (j & 1), pp = 16 * warp + gr + (j >> 1) * 8;
                if (hh < RB)
                    ps[hh * DM_T + pp] = sc[j] * scale;
            }
        }
        __syncthreads();   // the K tile is free, the scores complete
        dm_issue(kt, rs, kg, stepb, pn, cnt_n, hd, threadIdx.x, blockDim.x);   // nothing past the last tile
        cp_async_commit();
        split_softmax_tile<RB, false>(ps, cnt, warp, lane, m_s, l_s, f_s, NULL);
        // in flight: V of this tile, K of the next; land V
        cp_async_wait_group<1>();
        __syncthreads();   // p and f_s complete, V landed
        for (int i = threadIdx.x; i < RB * DM_T; i += blockDim.x)
            ph[(i / DM_T) * prs + i % DM_T] = __float2half_rn(ps[i]);
        for (int i = cnt * hd + threadIdx.x; i < DM_T * hd; i += blockDim.x)
            vt[(i / hd) * rs + i % hd] = __float2half_rn(0.0f);
        __syncthreads();
        // O^T rows (dims) 16 (warp + 4 i) .. +15, heads 2qd, 2qd + 1
        const float f0 = 2 * qd < RB ? f_s[2 * qd] : 1.0f, f1 = 2 * qd + 1 < RB ? f_s[2 * qd + 1] : 1.0f;
        const int ksteps = (cnt + 15) >> 4;
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const int m0 = 16 * (warp + 4 * i);
            if (m0 >= hd)
                break;
            acc[i][0] *= f0;
            acc[i][1] *= f1;
            acc[i][2] *= f0;
            acc[i][3] *= f1;
            // V^T's fragment by ldmatrix.trans: matrix j = rows (positions)
            // 8 (j >> 1) .., columns (dims) m0 + 8 (j & 1)
            const uint32_t vb = smem_u32(vt + ((lm >> 1) * 8 + lr) * rs + m0 + (lm & 1) * 8);
            for (int kk = 0; kk < ksteps; kk++) {
                uint32_t af[4];
                ldsm_x4_t(af, vb + kk * 16 * rs * 2);
                const uint32_t b0 = *(const uint32_t *)(ph + gr * prs + 16 * kk + 2 * qd);
                const uint32_t b1 = *(const uint32_t *)(ph + gr * prs + 16 * kk + 8 + 2 * qd);
                mma_f16(acc[i], af, b0, b1);
            }
        }
        __syncthreads();   // the V tile, ph and f_s are rewritten by the next tile
        dm_issue(vt, rs, vg, stepb, pn, cnt_n, hd, threadIdx.x, blockDim.x);
        cp_async_commit();
    }
    // the outputs into qs as [RB][hd] (each (head, dim) is one lane's)
#pragma unroll
    for (int i = 0; i < MT; i++) {
        const int m0 = 16 * (warp + 4 * i);
        if (m0 >= hd)
            break;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int hh = 2 * qd + (j & 1), d = m0 + gr + (j >> 1) * 8;
            if (hh < RB)
                qs[hh * hd + d] = acc[i][j];
        }
    }
    __syncthreads();
    split_store<RB>(a, qs, hd, m_s, l_s, qg, t, h0, n_split, s);
}

// Dynamic shared memory of a block.
static size_t dm_smem(int rb, int hd)
{
    const size_t rs = (size_t)hd + DM_PAD;
    return ((size_t)rb * hd + (size_t)rb * DM_T) * sizeof(float) +
           (8 * rs + 8 * (size_t)(DM_T + DM_PAD) + 2 * (size_t)DM_T * rs) * sizeof(__half);
}

// ---- launchers (tests/cuda/emu cuts the file here)

bool cu_split_mma_ok(const cu_attn *a, int rb)
{
    const int hd = a->head_dim;
    return a->f16 && !a->i8 && (rb == 1 || rb == 2 || rb == 4 || rb == 8) && (hd == 64 || hd == 128 || hd == 256) &&
           (a->n_head / a->n_head_kv) % rb == 0 && ((uintptr_t)a->kc | (uintptr_t)a->vc) % 16 == 0;
}

template <int RB, int KS>
static cudaError_t dm_go(const cu_attn *a, int32_t chunk, int n_split, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n, (unsigned)(a->n_head / RB), (unsigned)n_split);
    return cu_launch(split_mma_kernel<RB, KS>, grid, dim3(SPLIT_THREADS), dm_smem(RB, KS * 16), s, *a, chunk,
                     n_split);
}

// The opt-in shared memory (up to 83 KB at head_dim 256) of each
// instantiation, set at open (si_cu_attn_mma_init): not during a capture.
template <int KS> static cudaError_t dm_attr_ks()
{
    cudaError_t e = cudaSuccess;
    const int rbs[4] = { 1, 2, 4, 8 };
    void (*k[4])(cu_attn, int32_t, int) = { split_mma_kernel<1, KS>, split_mma_kernel<2, KS>, split_mma_kernel<4, KS>,
                                            split_mma_kernel<8, KS> };
    for (int i = 0; i < 4 && e == cudaSuccess; i++)
        e = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dm_smem(rbs[i], KS * 16));
    return e;
}

extern "C" int si_cu_attn_mma_init(void)
{
    cudaError_t e = dm_attr_ks<16>();
    if (e == cudaSuccess)
        e = dm_attr_ks<8>();
    if (e == cudaSuccess)
        e = dm_attr_ks<4>();
    return (int)e;
}

template <int KS>
static cudaError_t dm_rb(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    switch (rb) {
    case 8: return dm_go<8, KS>(a, chunk, n_split, s);
    case 4: return dm_go<4, KS>(a, chunk, n_split, s);
    case 2: return dm_go<2, KS>(a, chunk, n_split, s);
    default: return dm_go<1, KS>(a, chunk, n_split, s);
    }
}

cudaError_t cu_launch_split_mma(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    switch (a->head_dim) {
    case 256: return dm_rb<16>(a, rb, chunk, n_split, s);
    case 128: return dm_rb<8>(a, rb, chunk, n_split, s);
    default: return dm_rb<4>(a, rb, chunk, n_split, s);
    }
}
