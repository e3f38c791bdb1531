// backends/cuda_sm120/cuda_attn_ring.cu — knob attn_ring (head_dim 128 or
// 256; the f16 dense cache with attn_mma, or the paged int8 cache):
// split-K decode attention on the f16 tensor cores where each warp
// streams its own positions through its own cp.async ring, with no block
// barrier until the end.  Same grid shape, partials and combine_kernel as
// split_mma_kernel (cuda_attn_mma.cu) and split_i8_kernel
// (cuda_attn_i8.cu); the plan gives it one split per resident block
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
// f16, the rings [W][NS][K, V][16][hd + 8] f16 (int8: [16][hd + 16] int8
// and 16 scales each, plus a warp's f16 V tile).  Two shapes (knob
// attn_ring = true | small): W = 4, NS = 3 (f16: 212 KB at head_dim 256
// and 8 heads, an H200's 227 KB, one block an SM, 8 groups = 135 KB in
// flight) or NS = 4 (int8: 185 KB, 12 groups = 104 KB in flight); W = 2,
// NS = 2 (79 / 64 KB: fits sm_120's 99 KB; true falls back to it there).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_launch.cuh"
#include "cuda_ptx.cuh"

#include "cuda_attn_mma.cuh"

#define RG_G   16             /* positions a group: one m16 tile of S^T; one page of the int8 cache */
#define RG_PRS (RG_G + 8)     /* halves a row of a warp's P (conflict-free B loads) */
#define RG_PAD8 16            /* bytes of padding a staged int8 row (ldmatrix conflict-free) */

// Four int8 in w as two f16x2 (lo: bytes 0, 1; hi: 2, 3), exactly: the
// byte b + 128 under the exponent of 1024 is the f16 1024 + b + 128, and
// 1152 subtracted leaves b (integers below 2048 are exact in f16).
__device__ __forceinline__ void rg_i8x4_h2(uint32_t w, uint32_t &lo, uint32_t &hi)
{
    const uint32_t x = w ^ 0x80808080u;
    const uint32_t l = __byte_perm(x, 0x64646464u, 0x4140), h = __byte_perm(x, 0x64646464u, 0x4342);
    const __half2 k = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480));
    const __half2 rl = __hsub2(*reinterpret_cast<const __half2 *>(&l), k);
    const __half2 rh = __hsub2(*reinterpret_cast<const __half2 *>(&h), k);
    lo = *reinterpret_cast<const uint32_t *>(&rl);
    hi = *reinterpret_cast<const uint32_t *>(&rh);
}

// S^T [16 positions x 8 heads] += K . Q^T over int8 K rows (ldmatrix
// address kb: the I8 layout below), converted to f16 in registers, one
// ldmatrix a 32-wide step of hd.  C as dm_scores': 1, every 16-wide step
// into sc in turn, a chain of KS dependent mma; 2 (knob attn_ring_chains
// = 2), the even and the odd steps into two accumulators added at the
// end, two chains of KS / 2 (another f32 order of the same products).
template <int KS, int C>
__device__ __forceinline__ void rg_scores_i8(uint32_t kb, const uint32_t (&qf)[KS][2], float sc[4])
{
    float s2[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
    for (int kk = 0; kk < KS / 2; kk++) {
        uint32_t r[4], af[4];
        ldsm_x4(r, kb + 32 * kk);
        rg_i8x4_h2(r[0], af[0], af[2]);
        rg_i8x4_h2(r[1], af[1], af[3]);
        mma_f16(sc, af, qf[2 * kk][0], qf[2 * kk][1]);
        rg_i8x4_h2(r[2], af[0], af[2]);
        rg_i8x4_h2(r[3], af[1], af[3]);
        mma_f16(C == 2 ? s2 : sc, af, qf[2 * kk + 1][0], qf[2 * kk + 1][1]);
    }
    if (C == 2)
#pragma unroll
        for (int j = 0; j < 4; j++)
            sc[j] += s2[j];
}

// Bytes of one warp's stage: K and V rows of a group, f16 [16][hd + 8]
// each, or (I8) int8 [16][hd + 16] each then the 16 K and 16 V scales.
__host__ __device__ constexpr int rg_stage_bytes(int hd, bool i8)
{
    return i8 ? 2 * RG_G * (hd + RG_PAD8) + 2 * RG_G * 4 : 2 * RG_G * (hd + DM_PAD) * 2;
}

// Block (token t, heads h0..h0+RB of kv head g, split s), as split_mma_kernel.
// I8: the paged int8 cache (kv_type = i8): a group of 16 positions is one
// page (splits start at multiples of 64), so a group is two contiguous
// runs of 16 * hd bytes (K, V) and 16 scales each.  K's int8 rows are
// read by ldmatrix as they are and converted to f16 in registers: the
// fragment then holds bytes 4qd..4qd+3 of a row where the f16 layout has
// elements 2qd, 2qd+1, 2qd+8, 2qd+9, so Q^T's fragments take q's
// elements in that same order (a permutation of k within each 16-wide
// step: the same dot product).  The K scale multiplies the scores; the V
// scale is folded into p (l takes p unscaled), as split_i8_kernel.  V's
// rows are converted into the warp's f16 tile (rows past the context 0),
// then the P V product is the f16 one.  Knob attn_ring_pages (I8): each
// reads a group's page from the page table as its copies are issued,
// ahead reads the warp's pages ahead (below).
template <int RB, int KS, int W, int NS, bool I8>
__global__ void __launch_bounds__(W * 32) split_ring_kernel(cu_attn a, int32_t chunk, int n_split)
{
    cu_pdl_enter();
    extern __shared__ float sm[];
    __shared__ float m_s[RB], l_s[RB], fw_s[W][RB];
    constexpr int hd = KS * 16, rs = hd + DM_PAD, rs8 = hd + RG_PAD8, sb = rg_stage_bytes(hd, I8);
    constexpr int wb = NS * sb + (I8 ? RG_G * rs * 2 : 0);   // bytes a warp: its ring (+ I8: V's f16 tile)
    dm_blk d;
    if (I8) {   // (the dense addressing is unused: rows come from the page table)
        if (!split_where<RB>(a, chunk, d.b))
            return;
    } else if (!dm_where<RB>(a, chunk, hd, d)) {
        return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, qd = lane & 3;
    float *qs = sm;
    __half *qh = (__half *)(qs + RB * hd), *ph = qh + 8 * rs + warp * 8 * RG_PRS;
    char *rg = (char *)(qh + 8 * rs + W * 8 * RG_PRS), *my = rg + warp * wb;
    const int64_t c0 = d.b.c0, c1 = d.b.c1;
    // this warp's groups: warp, warp + W, .. of the split's ng
    const int ng = (int)((c1 - c0 + RG_G - 1) / RG_G), nk = ng > warp ? (ng - warp + W - 1) / W : 0;
    // attn_ring_pages = ahead: the pages of the warp's groups are read 32
    // groups at a time, lane j holding the page of group 32 c + j (pg_at)
    // while the warp issues chunk c, and that of 32 (c + 1) + j (pg_nx,
    // read meanwhile).  With `each`, every group's issue first waits on two
    // dependent reads (the sequence, then its page: an L2 round trip each),
    // in the warp's chain.
    const bool ahead = I8 && a.ring_ahead;
    const int32_t seq = ahead ? a.seq[d.b.t] : 0;
    int32_t pg_at = 0, pg_nx = 0;
    auto page_of = [&](int k0) {   // the page of the warp's group k0 + lane, 0 past nk
        const int kj = k0 + lane;
        return kj < nk ? kv_page_of(a, seq, c0 + (int64_t)RG_G * (warp + W * kj)) : 0;
    };
    auto issue = [&](int k) {   // the warp's k-th group into stage k % NS (one commit group, maybe empty)
        if (k < nk) {
            const int64_t p0 = c0 + (int64_t)RG_G * (warp + W * k);
            const int cnt = c1 - p0 < RG_G ? (int)(c1 - p0) : RG_G;
            char *st = my + (k % NS) * sb;
            if (I8) {
                uint64_t row;   // the page's slot 0
                if (ahead) {
                    if (k % 32 == 0) {
                        pg_at = k == 0 ? page_of(0) : pg_nx;
                        pg_nx = page_of(k + 32);
                    }
                    row = kv_slot_row(a, __shfl_sync(0xffffffffu, pg_at, k % 32), d.b.g, p0);
                } else {
                    row = kv_page_row(a, a.seq[d.b.t], p0, d.b.g);
                }
                const char *kp = (const char *)a.kc + row * hd, *vp = (const char *)a.vc + row * hd;
                constexpr int cpr = hd / 16;   // 16-byte copies a row
                for (int i = lane; i < cnt * cpr; i += 32) {
                    const int r = i / cpr, c = i % cpr;
                    cp_async16(st + r * rs8 + c * 16, kp + r * hd + c * 16);
                    cp_async16(st + RG_G * rs8 + r * rs8 + c * 16, vp + r * hd + c * 16);
                }
                if (lane < 8)   // the 16 scales of each (past cnt: never used unmasked)
                    cp_async16(st + 2 * RG_G * rs8 + lane * 16, (const char *)(lane < 4 ? a.ks : a.vs) + row * 4 +
                                                                 (lane & 3) * 16);
            } else {
                dm_issue((__half *)st, rs, d.kg, d.stepb, p0, cnt, hd, lane, 32);
                dm_issue((__half *)st + RG_G * rs, rs, d.vg, d.stepb, p0, cnt, hd, lane, 32);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int k = 0; k < NS - 1; k++)
        issue(k);
    uint32_t qf[KS][2];
    const float *qg = dm_q_frags<RB, KS, W * 32>(a, d.b.t, d.b.h0, qs, qh, qf);
    if (I8)   // q's elements in the order of K's int8 fragments (above)
#pragma unroll
        for (int k = 0; k < KS; k++) {
            qf[k][0] = *(const uint32_t *)(qh + gr * rs + 16 * k + 4 * qd);
            qf[k][1] = *(const uint32_t *)(qh + gr * rs + 16 * k + 4 * qd + 2);
        }
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
        char *st = my + (k % NS) * sb;
        const int64_t p0 = c0 + (int64_t)RG_G * (warp + W * k);
        const int cnt = c1 - p0 < RG_G ? (int)(c1 - p0) : RG_G;
        float sc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
        if (I8) {
            // matrices: rows 0-7 / 8-15 (lm & 1) x bytes 0-15 / 16-31 (lm >> 1) of each 32
            const uint32_t kb = smem_u32(st + ((lm & 1) * 8 + lr) * rs8 + (lm >> 1) * 16);
            if (a.ring_chains == 2)
                rg_scores_i8<KS, 2>(kb, qf, sc);
            else
                rg_scores_i8<KS, 1>(kb, qf, sc);
            const float *ksc = (const float *)(st + 2 * RG_G * rs8);
            const float k0 = gr < cnt ? ksc[gr] * scale : 0.0f, k8 = gr + 8 < cnt ? ksc[gr + 8] * scale : 0.0f;
            sc[0] *= k0;
            sc[1] *= k0;
            sc[2] *= k8;
            sc[3] *= k8;
        } else {
            if (a.ring_chains == 2)
                dm_scores<KS, 2>((const __half *)st, rs, qf, sc);
            else
                dm_scores<KS, 1>((const __half *)st, rs, qf, sc);
#pragma unroll
            for (int j = 0; j < 4; j++)
                sc[j] *= scale;
        }
        // sc: positions gr (0, 1) and gr + 8 (2, 3), heads 2qd (0, 2) and
        // 2qd + 1 (1, 3); rows past the context (stale or unwritten) masked
        const float s0 = gr < cnt ? sc[0] : -INFINITY, s1 = gr < cnt ? sc[1] : -INFINITY;
        const float s2 = gr + 8 < cnt ? sc[2] : -INFINITY, s3 = gr + 8 < cnt ? sc[3] : -INFINITY;
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
        // P [head][position] in f16 through the warp's rows (I8: times the
        // V rows' scales; 0 past the context, whatever the scale holds)
        float v0 = 1.0f, v8 = 1.0f;
        if (I8) {
            const float *vsc = (const float *)(st + 2 * RG_G * rs8) + RG_G;
            v0 = gr < cnt ? vsc[gr] : 0.0f;
            v8 = gr + 8 < cnt ? vsc[gr + 8] : 0.0f;
        }
        ph[(2 * qd) * RG_PRS + gr] = __float2half_rn(e0 * v0);
        ph[(2 * qd + 1) * RG_PRS + gr] = __float2half_rn(e1 * v0);
        ph[(2 * qd) * RG_PRS + gr + 8] = __float2half_rn(e2 * v8);
        ph[(2 * qd + 1) * RG_PRS + gr + 8] = __float2half_rn(e3 * v8);
        __half *vt;
        if (I8) {   // V's int8 rows into the warp's f16 tile, 16 bytes a lane at a time
            vt = (__half *)(my + NS * sb);
            const char *v8p = st + RG_G * rs8;
            for (int i = lane; i < RG_G * (hd / 16); i += 32) {
                const int r = i / (hd / 16), c = i % (hd / 16);
                uint4 o0 = make_uint4(0u, 0u, 0u, 0u), o1 = o0;
                if (r < cnt) {
                    const uint4 w = *(const uint4 *)(v8p + r * rs8 + c * 16);
                    rg_i8x4_h2(w.x, o0.x, o0.y);
                    rg_i8x4_h2(w.y, o0.z, o0.w);
                    rg_i8x4_h2(w.z, o1.x, o1.y);
                    rg_i8x4_h2(w.w, o1.z, o1.w);
                }
                *(uint4 *)(vt + r * rs + c * 16) = o0;
                *(uint4 *)(vt + r * rs + c * 16 + 8) = o1;
            }
        } else {
            vt = (__half *)st + RG_G * rs;
            if (cnt < RG_G)   // V rows past the context: 0 (p is 0 there, but 0 * NaN is NaN)
                for (int i = cnt * (hd / 8) + lane; i < RG_G * (hd / 8); i += 32)
                    *(uint4 *)(vt + (i / (hd / 8)) * rs + (i % (hd / 8)) * 8) = make_uint4(0u, 0u, 0u, 0u);
        }
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
        __syncwarp();   // stage k % NS, ph (and V's f16 tile) are rewritten next
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
            const int hh = 2 * qd + (j & 1), dd = 16 * i + gr + (j >> 1) * 8;
            if (hh < RB)
                ow[(warp * RB + hh) * hd + dd] = acc[i][j];
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

// Dynamic shared memory of a block: q f32, q f16 [8][hd + 8], the warps'
// P [8][24] f16, their rings (+ I8: V's f16 tile).  The merge's
// [W][RB][hd + 2] f32 fits in the rings (a stage holds >= 16 x hd x 2
// bytes a warp, RB (hd + 2) x 4 <= 8 (hd + 2) x 4 of it).
static size_t rg_smem(int rb, int hd, int w, int ns, bool i8)
{
    const size_t rs = (size_t)hd + DM_PAD;
    const size_t wb = (size_t)ns * rg_stage_bytes(hd, i8) + (i8 ? RG_G * rs * 2 : 0);
    return (size_t)rb * hd * sizeof(float) + (8 * rs + (size_t)w * 8 * RG_PRS) * sizeof(__half) + (size_t)w * wb;
}

// ---- launchers

// shape 1 (attn_ring = true): 4 warps, 3 stages (f16) or 4 (int8: half
// the bytes a stage), or small's where that does not fit the device's
// shared memory a block (sm_120: 99 KB); 2 (small): 2 warps, 2 stages
#define RG_SHAPES(X) X(4, 3, false) X(4, 4, true) X(2, 2, false) X(2, 2, true)
static void rg_shape(const cu_attn *a, int rb, int *w, int *ns)
{
    const bool big = a->ring == 1 && rg_smem(rb, a->head_dim, 4, a->i8 ? 4 : 3, a->i8) <= (size_t)a->smem_blk;
    *w = big ? 4 : 2;
    *ns = big ? (a->i8 ? 4 : 3) : 2;
}

bool cu_split_ring_ok(const cu_attn *a, int rb)
{
    const int hd = a->head_dim;
    return a->ring > 0 && (a->f16 || a->i8) && (rb == 1 || rb == 2 || rb == 4 || rb == 8) &&
           (hd == 128 || hd == 256) && (a->n_head / a->n_head_kv) % rb == 0 &&
           ((uintptr_t)a->kc | (uintptr_t)a->vc) % 16 == 0 &&
           (!a->i8 || (a->pages != NULL && ((uintptr_t)a->ks | (uintptr_t)a->vs) % 16 == 0)) &&
           cu_split_ring_bps(a, rb) > 0;
}

// Blocks of the ring kernel resident an SM (its shared memory, plus the
// 1 KB the runtime reserves a block), 0 where one does not fit.
int cu_split_ring_bps(const cu_attn *a, int rb)
{
    int w, ns;
    rg_shape(a, rb, &w, &ns);
    const size_t need = rg_smem(rb, a->head_dim, w, ns, a->i8);
    if (need > (size_t)a->smem_blk)
        return 0;
    return (int)((size_t)a->smem_sm / (need + 1024));
}

template <int RB, int KS, int W, int NS, bool I8>
static cudaError_t rg_go(const cu_attn *a, int32_t chunk, int n_split, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n, (unsigned)(a->n_head / RB), (unsigned)n_split);
    return cu_launch(split_ring_kernel<RB, KS, W, NS, I8>, grid, dim3(W * 32), rg_smem(RB, KS * 16, W, NS, I8), s,
                     *a, chunk, n_split);
}

template <int KS, int W, int NS, bool I8>
static cudaError_t rg_rb(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    switch (rb) {
    case 8: return rg_go<8, KS, W, NS, I8>(a, chunk, n_split, s);
    case 4: return rg_go<4, KS, W, NS, I8>(a, chunk, n_split, s);
    case 2: return rg_go<2, KS, W, NS, I8>(a, chunk, n_split, s);
    default: return rg_go<1, KS, W, NS, I8>(a, chunk, n_split, s);
    }
}

cudaError_t cu_launch_split_ring(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    const bool big = a->head_dim == 256;
#define RG_PICK(W_, NS_, I8_)                                                                      \
    if (a->i8 == I8_) {                                                                            \
        int w, ns;                                                                                 \
        rg_shape(a, rb, &w, &ns);                                                                  \
        if (w == W_ && ns == NS_)                                                                  \
            return big ? rg_rb<16, W_, NS_, I8_>(a, rb, chunk, n_split, s)                         \
                       : rg_rb<8, W_, NS_, I8_>(a, rb, chunk, n_split, s);                         \
    }
    RG_SHAPES(RG_PICK)
#undef RG_PICK
    return cudaErrorInvalidValue;
}

// The opt-in shared memory of every instantiation that fits the device's
// per-block limit `blk` (the others are never launched: cu_split_ring_bps
// is 0 for them), set at open: not during a capture.
template <int KS, int W, int NS, bool I8> static cudaError_t rg_attr(int blk)
{
    const int rbs[4] = { 1, 2, 4, 8 };
    void (*k[4])(cu_attn, int32_t, int) = { split_ring_kernel<1, KS, W, NS, I8>, split_ring_kernel<2, KS, W, NS, I8>,
                                            split_ring_kernel<4, KS, W, NS, I8>, split_ring_kernel<8, KS, W, NS, I8> };
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 4 && e == cudaSuccess; i++) {
        const size_t need = rg_smem(rbs[i], KS * 16, W, NS, I8);
        if (need <= (size_t)blk)
            e = cudaFuncSetAttribute(k[i], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need);
    }
    return e;
}

extern "C" int si_cu_attn_ring_init(int blk)
{
    cudaError_t e = cudaSuccess;
#define RG_ATTR(W_, NS_, I8_)               \
    if (e == cudaSuccess)                   \
        e = rg_attr<16, W_, NS_, I8_>(blk); \
    if (e == cudaSuccess)                   \
        e = rg_attr<8, W_, NS_, I8_>(blk);
    RG_SHAPES(RG_ATTR)
#undef RG_ATTR
    return (int)e;
}
