// backends/cuda_sm120/cuda_attn_ring.cu — knob attn_ring (with attn_mma,
// the f16 dense cache, head_dim 128 or 256): split-K decode attention on
// the f16 tensor cores where each warp streams its own positions through
// its own cp.async ring, with no block barrier until the end.  Same grid
// shape, partials and combine_kernel as split_mma_kernel
// (cuda_attn_mma.cu); the plan gives it one split per resident block
// (cu_split_ring_bps).
// Why: split_mma_kernel moves one 64-position K tile and one V tile per
// block, and its four warps meet at five block barriers a tile (scores,
// softmax, p to f16, P V, the next issue).  At most one tile of K or V is
// in flight a block; at 32k the 9b's layer ran at 3.0 TB/s with 2 blocks
// an SM and 0.38 eligible warps a scheduler (ncu, H200), bound by the
// wait for each tile rather than by bandwidth.  Here a warp owns groups
// of 16 positions (group j of the block's split goes to warp j % W) and
// keeps NS - 1 groups' K and V in flight while it works on one:
//   S^T [16 positions x 8 heads] = K [16 x hd] . Q^T   (Q^T's fragments
//        in registers, as split_mma_kernel);
//   online softmax in registers: lane (gr, qd) holds positions gr, gr + 8
//        of heads 2qd, 2qd + 1; max by 3 shuffles; its share of l kept per
//        lane and summed once at the end (the rescale factor is the same
//        on every lane of a head);
//   O^T [hd x 8] += V^T [hd x 16] . P^T [16 x 8]   (all hd rows in one
//        warp's accumulators; P goes through 384 bytes of the warp's own
//        shared memory to become the B operand).
// At the end the W warps' (m, l, O) are merged through shared memory into
// the block's partial (the same online-softmax merge as combine_kernel).
// q and p are rounded to f16 for the products, f32 sums, as
// split_mma_kernel: exact attention over every position.
// Shared memory a block: q f32 [RB][hd], q f16 [8][hd + 8], P [W][8][24]
// f16, the rings [W][NS][K, V][16][hd + 8] f16.  Two shapes (knob
// attn_ring = true | small): W = 4, NS = 3 (212 KB at head_dim 256 and 8
// heads: an H200's 227 KB, one block an SM, 8 groups = 135 KB in flight);
// W = 2, NS = 2 (79 KB: fits sm_120's 99 KB).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_launch.cuh"
#include "cuda_ptx.cuh"

#include "cuda_attn_mma.cuh"

#define RG_G   16             /* positions a group: one m16 tile of S^T */
#define RG_PRS (RG_G + 8)     /* halves a row of a warp's P (conflict-free B loads) */

// Block (token t, heads h0..h0+RB of kv head g, split s), as split_mma_kernel.
template <int RB, int KS, int W, int NS>
__global__ void __launch_bounds__(W * 32) split_ring_kernel(cu_attn a, int32_t chunk, int n_split)
{
    cu_pdl_enter();
    extern __shared__ float sm[];
    __shared__ float m_s[RB], l_s[RB], fw_s[W][RB];
    constexpr int hd = KS * 16, rs = hd + DM_PAD, ring = NS * 2 * RG_G * rs;   // halves a warp's ring
    dm_blk d;
    if (!dm_where<RB>(a, chunk, hd, d))
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, qd = lane & 3;
    float *qs = sm;
    __half *qh = (__half *)(qs + RB * hd), *ph = qh + 8 * rs + warp * 8 * RG_PRS;
    __half *rg = qh + 8 * rs + W * 8 * RG_PRS, *my = rg + warp * ring;
    const int64_t c0 = d.b.c0, c1 = d.b.c1;
    // this warp's groups: warp, warp + W, .. of the split's ng
    const int ng = (int)((c1 - c0 + RG_G - 1) / RG_G), nk = ng > warp ? (ng - warp + W - 1) / W : 0;
    auto issue = [&](int k) {   // the warp's k-th group into stage k % NS (one commit group, maybe empty)
        if (k < nk) {
            const int64_t p0 = c0 + (int64_t)RG_G * (warp + W * k);
            const int cnt = c1 - p0 < RG_G ? (int)(c1 - p0) : RG_G;
            __half *kt = my + (k % NS) * 2 * RG_G * rs;
            dm_issue(kt, rs, d.kg, d.stepb, p0, cnt, hd, lane, 32);
            dm_issue(kt + RG_G * rs, rs, d.vg, d.stepb, p0, cnt, hd, lane, 32);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < NS - 1; k++)
        issue(k);
    uint32_t qf[KS][2];
    const float *qg = dm_q_frags<RB, KS, W * 32>(a, d.b.t, d.b.h0, qs, qh, qf);
    float acc[KS][4];
#pragma unroll
    for (int i = 0; i < KS; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    // heads 2qd (m0, l0) and 2qd + 1 (m1, l1); l is this lane's share
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int lm = lane >> 3, lr = lane & 7;   // ldmatrix: lane gives row lr of matrix lm
    const float scale = 1.0f / sqrtf((float)hd);
    for (int k = 0; k < nk; k++) {
        issue(k + NS - 1);   // into the stage consumed at k - 1
        cp_async_wait_group<NS - 1>();
        __syncwarp();        // every lane's copies of group k landed
        __half *kt = my + (k % NS) * 2 * RG_G * rs, *vt = kt + RG_G * rs;
        const int64_t p0 = c0 + (int64_t)RG_G * (warp + W * k);
        const int cnt = c1 - p0 < RG_G ? (int)(c1 - p0) : RG_G;
        float sc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
        const uint32_t kb = smem_u32(kt + ((lm & 1) * 8 + lr) * rs + (lm >> 1) * 8);
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t af[4];
            ldsm_x4(af, kb + 32 * kk);
            mma_f16(sc, af, qf[kk][0], qf[kk][1]);
        }
        // sc: positions gr (0, 1) and gr + 8 (2, 3), heads 2qd (0, 2) and
        // 2qd + 1 (1, 3); rows past the context (stale or unwritten) masked
        const float s0 = gr < cnt ? sc[0] * scale : -INFINITY, s1 = gr < cnt ? sc[1] * scale : -INFINITY;
        const float s2 = gr + 8 < cnt ? sc[2] * scale : -INFINITY, s3 = gr + 8 < cnt ? sc[3] * scale : -INFINITY;
        float x0 = fmaxf(s0, s2), x1 = fmaxf(s1, s3);
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
        }
        // position 0 of the group is always in the context: x0, x1 finite
        const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
        const float f0 = expf(m0 - n0), f1 = expf(m1 - n1);   // 0 on the first group (m = -inf)
        const float e0 = expf(s0 - n0), e1 = expf(s1 - n1), e2 = expf(s2 - n0), e3 = expf(s3 - n1);
        l0 = l0 * f0 + (e0 + e2);
        l1 = l1 * f1 + (e1 + e3);
        m0 = n0;
        m1 = n1;
        // P [head][position] in f16 through the warp's rows
        ph[(2 * qd) * RG_PRS + gr] = __float2half_rn(e0);
        ph[(2 * qd + 1) * RG_PRS + gr] = __float2half_rn(e1);
        ph[(2 * qd) * RG_PRS + gr + 8] = __float2half_rn(e2);
        ph[(2 * qd + 1) * RG_PRS + gr + 8] = __float2half_rn(e3);
        if (cnt < RG_G)   // V rows past the context: 0 (p is 0 there, but 0 * NaN is NaN)
            for (int i = cnt * (hd / 8) + lane; i < RG_G * (hd / 8); i += 32)
                *(uint4 *)(vt + (i / (hd / 8)) * rs + (i % (hd / 8)) * 8) = make_uint4(0u, 0u, 0u, 0u);
        __syncwarp();
        const uint32_t b0 = *(const uint32_t *)(ph + gr * RG_PRS + 2 * qd);
        const uint32_t b1 = *(const uint32_t *)(ph + gr * RG_PRS + 8 + 2 * qd);
        // V^T's fragments by ldmatrix.trans: matrix lm = positions
        // 8 (lm >> 1) .., dims 16 i + 8 (lm & 1) ..
        const uint32_t vb = smem_u32(vt + ((lm >> 1) * 8 + lr) * rs + (lm & 1) * 8);
#pragma unroll
        for (int i = 0; i < KS; i++) {
            acc[i][0] *= f0;
            acc[i][1] *= f1;
            acc[i][2] *= f0;
            acc[i][3] *= f1;
            uint32_t af[4];
            ldsm_x4_t(af, vb + 32 * i);
            mma_f16(acc[i], af, b0, b1);
        }
        __syncwarp();   // stage k % NS and ph are rewritten next
    }
    // merge the warps: O, then (m, l), of each into the ring space
    cp_async_wait_group<0>();
    for (int o = 4; o < 32; o <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, o);
        l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    }
    __syncthreads();   // every warp is done with its ring
    float *ow = (float *)rg, *mlw = ow + W * RB * hd;   // [W][RB][hd], [W][RB][2]
#pragma unroll
    for (int i = 0; i < KS; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int hh = 2 * qd + (j & 1), d = 16 * i + gr + (j >> 1) * 8;
            if (hh < RB)
                ow[(warp * RB + hh) * hd + d] = acc[i][j];
        }
    if (gr == 0) {
        if (2 * qd < RB) {
            mlw[(warp * RB + 2 * qd) * 2] = m0;
            mlw[(warp * RB + 2 * qd) * 2 + 1] = l0;
        }
        if (2 * qd + 1 < RB) {
            mlw[(warp * RB + 2 * qd + 1) * 2] = m1;
            mlw[(warp * RB + 2 * qd + 1) * 2 + 1] = l1;
        }
    }
    __syncthreads();
    if (threadIdx.x < RB) {   // a warp without groups has m = -inf, l = 0, O = 0: factor 0
        const int r = threadIdx.x;
        float mx = -INFINITY, l = 0.0f;
        for (int w = 0; w < W; w++)
            mx = fmaxf(mx, mlw[(w * RB + r) * 2]);
        for (int w = 0; w < W; w++) {
            const float f = expf(mlw[(w * RB + r) * 2] - mx);
            fw_s[w][r] = f;
            l += f * mlw[(w * RB + r) * 2 + 1];
        }
        m_s[r] = mx;
        l_s[r] = l;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < RB * hd; i += blockDim.x) {
        const int r = i / hd;
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++)
            o = fmaf(fw_s[w][r], ow[w * RB * hd + i], o);
        qs[i] = o;
    }
    __syncthreads();
    split_store<RB>(a, qs, hd, m_s, l_s, qg, d.b.t, d.b.h0, n_split, d.b.s);
}

// Dynamic shared memory of a block (the merge's [W][RB][hd + 2] f32 fits
// in the rings: NS * 2 * 16 * (hd + 8) halves a warp >= 2 * RB * hd floats).
static size_t rg_smem(int rb, int hd, int w, int ns)
{
    const size_t rs = (size_t)hd + DM_PAD;
    return (size_t)rb * hd * sizeof(float) +
           (8 * rs + (size_t)w * 8 * RG_PRS + (size_t)w * ns * 2 * RG_G * rs) * sizeof(__half);
}

// ---- launchers

// shape 1 (attn_ring = true): 4 warps, 3 stages; 2 (small): 2 warps, 2 stages
static void rg_shape(int shape, int *w, int *ns)
{
    *w = shape == 2 ? 2 : 4;
    *ns = shape == 2 ? 2 : 3;
}

bool cu_split_ring_ok(const cu_attn *a, int rb)
{
    const int hd = a->head_dim;
    return a->ring > 0 && a->f16 && !a->i8 && (rb == 1 || rb == 2 || rb == 4 || rb == 8) && (hd == 128 || hd == 256) &&
           (a->n_head / a->n_head_kv) % rb == 0 && ((uintptr_t)a->kc | (uintptr_t)a->vc) % 16 == 0 &&
           cu_split_ring_bps(a, rb) > 0;
}

// Blocks of the ring kernel resident an SM (its shared memory, plus the
// 1 KB the runtime reserves a block), 0 where one does not fit.
int cu_split_ring_bps(const cu_attn *a, int rb)
{
    int w, ns;
    rg_shape(a->ring, &w, &ns);
    const size_t need = rg_smem(rb, a->head_dim, w, ns);
    if (need > (size_t)a->smem_blk)
        return 0;
    return (int)((size_t)a->smem_sm / (need + 1024));
}

template <int RB, int KS, int W, int NS>
static cudaError_t rg_go(const cu_attn *a, int32_t chunk, int n_split, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n, (unsigned)(a->n_head / RB), (unsigned)n_split);
    return cu_launch(split_ring_kernel<RB, KS, W, NS>, grid, dim3(W * 32), rg_smem(RB, KS * 16, W, NS), s, *a, chunk,
                     n_split);
}

template <int KS, int W, int NS> static cudaError_t rg_rb(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    switch (rb) {
    case 8: return rg_go<8, KS, W, NS>(a, chunk, n_split, s);
    case 4: return rg_go<4, KS, W, NS>(a, chunk, n_split, s);
    case 2: return rg_go<2, KS, W, NS>(a, chunk, n_split, s);
    default: return rg_go<1, KS, W, NS>(a, chunk, n_split, s);
    }
}

cudaError_t cu_launch_split_ring(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    if (a->ring == 2)
        return a->head_dim == 256 ? rg_rb<16, 2, 2>(a, rb, chunk, n_split, s) : rg_rb<8, 2, 2>(a, rb, chunk, n_split, s);
    return a->head_dim == 256 ? rg_rb<16, 4, 3>(a, rb, chunk, n_split, s) : rg_rb<8, 4, 3>(a, rb, chunk, n_split, s);
}

// The opt-in shared memory of every instantiation that fits the device's
// per-block limit `blk` (the others are never launched: cu_split_ring_bps
// is 0 for them), set at open: not during a capture.
template <int KS, int W, int NS> static cudaError_t rg_attr(int blk)
{
    const int rbs[4] = { 1, 2, 4, 8 };
    void (*k[4])(cu_attn, int32_t, int) = { split_ring_kernel<1, KS, W, NS>, split_ring_kernel<2, KS, W, NS>,
                                            split_ring_kernel<4, KS, W, NS>, split_ring_kernel<8, KS, W, NS> };
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 4 && e == cudaSuccess; i++) {
        const size_t need = rg_smem(rbs[i], KS * 16, W, NS);
        if (need <= (size_t)blk)
            e = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need);
    }
    return e;
}

extern "C" int si_cu_attn_ring_init(int blk)
{
    cudaError_t e = rg_attr<16, 4, 3>(blk);
    if (e == cudaSuccess)
        e = rg_attr<8, 4, 3>(blk);
    if (e == cudaSuccess)
        e = rg_attr<16, 2, 2>(blk);
    if (e == cudaSuccess)
        e = rg_attr<8, 2, 2>(blk);
    return (int)e;
}
