// backends/cuda_sm120/cuda_gemvm.cu — knob gemv_mma: the dense decode
// products of 2..8 columns (decode of 2..8 sequences) on the int8 tensor
// cores: Q4_K, Q5_K, Q6_K and Q8_0 rows, in % 256 == 0; with knob
// gemv_mma_wide also those of 9..32 columns (gx_kernel, further down).
//
// Why: at 8 columns the dp4a GEMVs (cuda_gemvq.cu, cuda_mmq.cu) make 8 dot
// products of every unpacked weight and are bound by instructions, not by
// the weight bytes (H200, 9b decode at bs 8: a Q4_K product 29.6 us
// against 7.7 at one column, the step ~4x the bs-1 one for the same
// weights).  mma.sync m16n8k32.s8 multiplies 16 rows x 32 weights by 8
// columns in one instruction: a weight is unpacked once for every column.
//
// Layout.  A block of GM_WARPS warps owns R tiles of 16 rows (the MMA's
// M) of one product (R = 2 for the LM heads, else 1: gm_r); its warps take
// the rows' 256-weight steps (one K-quant block, 8 Q8_0 blocks) round
// robin and add their partial sums through shared memory at the end, in
// warp order.  The MMA's N is the 8 columns: lanes of columns past ncols
// read the last column and their sums are not stored.  Lane (g = lane / 4, t = lane
// % 4) holds rows g and g + 8 and columns 2t and 2t + 1 of a tile's result
// (the m16n8 accumulator layout).  Which products come here (4..8
// columns, measured) is cuda_mmq.cu's mma_pick.
// Which weight a k-slot of the MMA holds is free while A and B agree: lane
// t takes weights 8t..8t+7 of a 32-weight sub-block as k-slots 4t..4t+3
// and 16+4t..16+4t+3, so its A bytes are one 8-byte load a row and its B
// bytes one 8-byte load of x a column.
// Scales, per 32-weight sub-block (the activations' block of 32: scale dx,
// exact f32 sum xs, as si_cu_quantize_x makes them), on the exact int32
// sums S of the MMA (as floats without a conversion: gm_mma32):
//   Q4_K/Q5_K  acc += (dx * (d * sc)) * S - (dmin * m) * xs
//   Q8_0       acc += (dx * d) * S
//   Q6_K       a scale a 16 weights: two k16 MMAs a sub-block, their sums
//              combined in integers (sc_a S_a + sc_b S_b, exact), then
//              acc += (dx * d) * that; the -32 offset is in the int8
//              operand (q - 32 fits).
// The same integer terms as the dp4a paths and the cpu backend's int8
// matmul, in another f32 order: the same tolerance.
// The rows' bytes are asked of the L2 before the programmatic-launch wait
// (weights are never written during a step); x and its scales after it.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"
#include "cuda_ptx.cuh"
#include "cuda_parts.cuh"   // gq_find

#define GM_WARPS 8
#define GM_COLS 32   // 4 column tiles of 8
#define GM_IN_MAX 65536

template <int T> struct gm_traits;
template <> struct gm_traits<SI_TYPE_Q4_K> { static const int bytes = 144; };
template <> struct gm_traits<SI_TYPE_Q5_K> { static const int bytes = 176; };
template <> struct gm_traits<SI_TYPE_Q6_K> { static const int bytes = 210; };
template <> struct gm_traits<SI_TYPE_Q8_0> { static const int bytes = 8 * 34; };   // a step: 8 blocks

// 4 bytes at p, p 2-byte aligned: the aligned word below p and, when p is
// not 4-aligned, the half word after it (never past p + 4).
__device__ __forceinline__ uint32_t gm_ld4(const uint8_t *p)
{
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
    if ((a & 2) == 0)
        return __ldg(w);
    const uint32_t hi = (uint32_t)__ldg((const unsigned short *)(w + 1));
    return __funnelshift_r(__ldg(w), hi, 16);
}

// 8 bytes at p, p 4-byte aligned (K-quant qs/qh: 16-byte aligned blocks)
// or 2-byte aligned (Q8_0's quants after the f16 scale).
__device__ __forceinline__ uint2 gm_ld8(const uint8_t *p)
{
    if (((uintptr_t)p & 3) == 0)
        return make_uint2(__ldg((const uint32_t *)p), __ldg((const uint32_t *)(p + 4)));
    const uint32_t lo = (uint32_t)__ldg((const unsigned short *)p);
    const uint32_t mid = __ldg((const uint32_t *)(p + 2));
    const uint32_t hi = (uint32_t)__ldg((const unsigned short *)(p + 6));
    return make_uint2(lo | (mid << 16), (mid >> 16) | (hi << 16));
}

// Where a lane's x is: its columns' offsets (elements of xq; blocks of 32
// of xd / xs), made once per lane.  Column tile n: the B operand of column
// 8n + g (elements 8t.. of a sub-block), the scales of columns 8n + 2t and
// 8n + 2t + 1.  A column past ncols reads column ncols - 1 instead: result
// column c depends only on B's column c and column c's scales, and columns
// past ncols are never stored, so nothing needs zeroing.
template <int NT> struct gm_xp {
    int q[NT], d0[NT], d1[NT];
    int t4;   // 4t (Q6_K's k16 B operands are at 4t and 16 + 4t)
};

template <int NT> __device__ __forceinline__ gm_xp<NT> gm_xptr(int64_t in, int nc, int g, int t)
{
    gm_xp<NT> o;
    const int nb = (int)(in / 32);
    o.t4 = 4 * t;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int cg = min(8 * n + g, nc - 1), c0 = min(8 * n + 2 * t, nc - 1), c1 = min(8 * n + 2 * t + 1, nc - 1);
        o.q[n] = cg * (int)in + 8 * t;
        o.d0[n] = c0 * nb;
        o.d1[n] = c1 * nb;
    }
    return o;
}

// What a lane needs of x for one 32-weight sub-block in each of its NT
// column tiles: B (8 bytes), the two columns' scales dx and (SUMS) sums xs.
template <int NT> struct gm_xb {
    uint2  b[NT];
    float2 dx[NT], xs[NT];
};

// x of a step read from global memory (gm_kernel): sub-block j of step blk.
template <int NT> struct gm_xg {
    const int8_t *xq;
    const float *xd, *xs;
    gm_xp<NT> o;
    int blk;
    template <bool SUMS> __device__ __forceinline__ gm_xb<NT> x(int j) const
    {
        const int b = 8 * blk + j;
        gm_xb<NT> r;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            r.b[n] = __ldg((const uint2 *)(xq + o.q[n] + 32 * b));
            r.dx[n] = make_float2(__ldg(xd + o.d0[n] + b), __ldg(xd + o.d1[n] + b));
            r.xs[n] = SUMS ? make_float2(__ldg(xs + o.d0[n] + b), __ldg(xs + o.d1[n] + b)) : make_float2(0.0f, 0.0f);
        }
        return r;
    }
    // Q6_K's k16 B operand: elements 16 h + 4t.. of sub-block j, tile n
    // (o.q is at 8t)
    __device__ __forceinline__ uint32_t b16(int j, int n, int h) const
    {
        return __ldg((const uint32_t *)(xq + (o.q[n] - o.t4) + 32 * (8 * blk + j) + 16 * h));
    }
};

// The four accumulators of a k32 (or combined) sub-block in column tile
// n: rows g (c0, c1) and g + 8 (c2, c3) at columns 8n + 2t, 8n + 2t + 1.
// w0/w1: the rows' scales; m0/m1 their mins (K-quants; 0 otherwise).
// c: the int32 sums as floats (exact: |c| < 2^24).
template <int NT>
__device__ __forceinline__ void gm_acc(float acc[4], const float c[4], float w0, float w1, float m0, float m1,
                                       const gm_xb<NT> &x, int n)
{
    acc[0] += (x.dx[n].x * w0) * c[0] - m0 * x.xs[n].x;
    acc[1] += (x.dx[n].y * w0) * c[1] - m0 * x.xs[n].y;
    acc[2] += (x.dx[n].x * w1) * c[2] - m1 * x.xs[n].x;
    acc[3] += (x.dx[n].y * w1) * c[3] - m1 * x.xs[n].y;
}

// An MMA whose int32 sums come back as exact floats without a conversion
// instruction (at 4 column tiles I2F would bound the kernel): the MMA adds
// CU_I2F_MAGIC to each sum (|S| < 2^22), one FADD takes M off
// (cuda_quant.cuh).
__device__ __forceinline__ void gm_mma32(float c[4], const uint32_t a[4], uint2 b)
{
    int s[4];
    mma_k32c(s, a, b.x, b.y, CU_I2F_MAGIC);
#pragma unroll
    for (int k = 0; k < 4; k++)
        c[k] = __int_as_float(s[k]) - CU_I2F_MAGICF;
}

// A row tile's two rows (g, g + 8) as a lane sees them.
struct gm_rows {
    const uint8_t *B0, *B1;
};

// A step's weights in a lane's registers (R row tiles): what gm_load
// fills and gm_mul consumes, so a warp loads its next step while it
// multiplies the current one (and its first before the programmatic-
// launch wait: weights are never written during a step).
template <int T, int R> struct gm_w;
template <int R> struct gm_w<SI_TYPE_Q4_K, R> {
    uint4 h0[R], h1[R];          // d, dmin, 12 scale bytes
    uint2 q0[R][4], q1[R][4];    // bytes 8t.. of each 32-byte chunk of qs
};
template <int R> struct gm_w<SI_TYPE_Q5_K, R> {
    uint4 h0[R], h1[R];
    uint2 q0[R][4], q1[R][4], qh0[R], qh1[R];
};
template <int R> struct gm_w<SI_TYPE_Q6_K, R> {
    uint32_t l0[R][2][4], l1[R][2][4], h0[R][2][2], h1[R][2][2], sc0[R][2][2], sc1[R][2][2];   // [half]
    uint32_t d[R];               // the two rows' f16 scales
};
template <int R> struct gm_w<SI_TYPE_Q8_0, R> {
    uint2    w0[R][8], w1[R][8]; // bytes 8t.. of each block's 32 quants
    uint32_t d[R][8];            // the two rows' f16 scales
};

// The step's weights of the R tiles (B0, B1 at the step).
template <int T, int R>
__device__ __forceinline__ void gm_load(const gm_rows (&rw)[R], int t, gm_w<T, R> &w)
{
#pragma unroll
    for (int i = 0; i < R; i++) {
        const uint8_t *B0 = rw[i].B0, *B1 = rw[i].B1;
        if constexpr (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
            const int QS = T == SI_TYPE_Q4_K ? 16 : 48;
            w.h0[i] = __ldg((const uint4 *)B0);
            w.h1[i] = __ldg((const uint4 *)B1);
#pragma unroll
            for (int c = 0; c < 4; c++) {
                w.q0[i][c] = gm_ld8(B0 + QS + 32 * c + 8 * t);
                w.q1[i][c] = gm_ld8(B1 + QS + 32 * c + 8 * t);
            }
            if constexpr (T == SI_TYPE_Q5_K) {
                w.qh0[i] = gm_ld8(B0 + 16 + 8 * t);
                w.qh1[i] = gm_ld8(B1 + 16 + 8 * t);
            }
        } else if constexpr (T == SI_TYPE_Q6_K) {
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    w.l0[i][hf][k] = gm_ld4(B0 + 64 * hf + 16 * k + 4 * t);
                    w.l1[i][hf][k] = gm_ld4(B1 + 64 * hf + 16 * k + 4 * t);
                }
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    w.h0[i][hf][k] = gm_ld4(B0 + 128 + 32 * hf + 16 * k + 4 * t);
                    w.h1[i][hf][k] = gm_ld4(B1 + 128 + 32 * hf + 16 * k + 4 * t);
                    w.sc0[i][hf][k] = gm_ld4(B0 + 192 + 8 * hf + 4 * k);
                    w.sc1[i][hf][k] = gm_ld4(B1 + 192 + 8 * hf + 4 * k);
                }
            }
            w.d[i] = (uint32_t)__ldg((const unsigned short *)(B0 + 208)) |
                     ((uint32_t)__ldg((const unsigned short *)(B1 + 208)) << 16);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                w.w0[i][j] = gm_ld8(B0 + 34 * j + 2 + 8 * t);
                w.w1[i][j] = gm_ld8(B1 + 34 * j + 2 + 8 * t);
                w.d[i][j] = (uint32_t)__ldg((const unsigned short *)(B0 + 34 * j)) |
                            ((uint32_t)__ldg((const unsigned short *)(B1 + 34 * j)) << 16);
            }
        }
    }
}

__device__ __forceinline__ float gm_h(uint32_t v, int hi)
{
    return __half2float(__ushort_as_half((unsigned short)(hi ? v >> 16 : v & 0xffff)));
}

// Q6_K's int8 weights (q - 32) of 4 consecutive elements of one 32-wide
// group: ql word (low or high nibbles), qh word (the group's 2 bits).
__device__ __forceinline__ uint32_t gm_q6(uint32_t ql, uint32_t qh, int nib, int hs)
{
    const uint32_t v = ((ql >> nib) & 0x0F0F0F0Fu) | (((qh >> hs) & 0x03030303u) << 4);
    // v - 32 in each byte (v in 0..63): with bit 7 set first no byte
    // borrows from the next; flipping it back gives the int8 v - 32
    return ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
}

__device__ __forceinline__ int gm_sc6(const uint32_t sc[2], int i) { return (int)(int8_t)(sc[i >> 2] >> (8 * (i & 3))); }

// The step (block blk of the rows: 256 weights, x's sub-blocks 8 blk..)
// of the R row tiles and NT column tiles into acc.  Each sub-block's x is
// loaded once for the R row tiles, each tile's int8 weights made once for
// the NT column tiles.
//  - Q4_K/Q5_K: sub-block j (chunk j / 2, nibble j & 1; Q5_K's fifth bit
//    j of qh), one k32 MMA a tile pair.
//  - Q8_0: block j of the step, one k32 MMA.
//  - Q6_K: per half hf (128 weights) and group G (32 weights: ql bytes
//    0..31 or 32..63, low or high nibbles, qh bits 2G), two k16 MMAs
//    (elements 0..15 and 16..31 of the group, a scale each); lane t takes
//    elements 4t..4t+3 of each 16 (the k16 A layout: rows g and g + 8 at
//    k-slots 4t..4t+3; B: k-slots 4t..4t+3 of column g).
template <int T, int R, int NT, class XS>
__device__ __forceinline__ void gm_mul(const gm_w<T, R> &w, const XS &xp, float (&acc)[R][NT][4])
{
    if constexpr (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const gm_xb<NT> x = xp.template x<true>(j);
            const int c = j >> 1, sh = 4 * (j & 1);
#pragma unroll
            for (int i = 0; i < R; i++) {
                uint32_t a[4];
                a[0] = (w.q0[i][c].x >> sh) & 0x0F0F0F0Fu;
                a[1] = (w.q1[i][c].x >> sh) & 0x0F0F0F0Fu;
                a[2] = (w.q0[i][c].y >> sh) & 0x0F0F0F0Fu;
                a[3] = (w.q1[i][c].y >> sh) & 0x0F0F0F0Fu;
                if constexpr (T == SI_TYPE_Q5_K) {
                    a[0] |= ((w.qh0[i].x >> j) & 0x01010101u) << 4;
                    a[1] |= ((w.qh1[i].x >> j) & 0x01010101u) << 4;
                    a[2] |= ((w.qh0[i].y >> j) & 0x01010101u) << 4;
                    a[3] |= ((w.qh1[i].y >> j) & 0x01010101u) << 4;
                }
                int sc0, m0, sc1, m1;
                cu_scale_min_k4w(w.h0[i].y, w.h0[i].z, w.h0[i].w, j, sc0, m0);
                cu_scale_min_k4w(w.h1[i].y, w.h1[i].z, w.h1[i].w, j, sc1, m1);
                const float w0 = gm_h(w.h0[i].x, 0) * (float)sc0, w1 = gm_h(w.h1[i].x, 0) * (float)sc1;
                const float n0 = gm_h(w.h0[i].x, 1) * (float)m0, n1 = gm_h(w.h1[i].x, 1) * (float)m1;
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    float s[4];
                    gm_mma32(s, a, x.b[n]);
                    gm_acc<NT>(acc[i][n], s, w0, w1, n0, n1, x, n);
                }
            }
        }
    } else if constexpr (T == SI_TYPE_Q6_K) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
#pragma unroll
            for (int G = 0; G < 4; G++) {
                const int nib = 4 * (G >> 1), hs = 2 * G, wq = 2 * (G & 1);
                const int sb = 4 * hf + G;   // its sub-block of 32 in the step (x's block)
                const gm_xb<NT> x = xp.template x<false>(sb);
                // the B operands of the two 16s: x's elements 4t.. and 16 + 4t..
                uint32_t b0[NT], b1[NT];
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    b0[n] = xp.b16(sb, n, 0);
                    b1[n] = xp.b16(sb, n, 1);
                }
#pragma unroll
                for (int i = 0; i < R; i++) {
                    const uint32_t a0 = gm_q6(w.l0[i][hf][wq], w.h0[i][hf][0], nib, hs);
                    const uint32_t a1 = gm_q6(w.l1[i][hf][wq], w.h1[i][hf][0], nib, hs);
                    const uint32_t a2 = gm_q6(w.l0[i][hf][wq + 1], w.h0[i][hf][1], nib, hs);
                    const uint32_t a3 = gm_q6(w.l1[i][hf][wq + 1], w.h1[i][hf][1], nib, hs);
                    // the scales of the two 16s: int8 bytes 2G and 2G + 1 of
                    // the half's 8 (the cpu's sc[is + 2G], is = 0, 1)
                    const int s0a = gm_sc6(w.sc0[i][hf], 2 * G), s0b = gm_sc6(w.sc0[i][hf], 2 * G + 1);
                    const int s1a = gm_sc6(w.sc1[i][hf], 2 * G), s1b = gm_sc6(w.sc1[i][hf], 2 * G + 1);
#pragma unroll
                    for (int n = 0; n < NT; n++) {
                        int sa[4], sb2[4];
                        mma_k16(sa, a0, a1, b0[n]);
                        mma_k16(sb2, a2, a3, b1[n]);
                        const float s[4] = { (float)(s0a * sa[0] + s0b * sb2[0]), (float)(s0a * sa[1] + s0b * sb2[1]),
                                             (float)(s1a * sa[2] + s1b * sb2[2]), (float)(s1a * sa[3] + s1b * sb2[3]) };
                        gm_acc<NT>(acc[i][n], s, gm_h(w.d[i], 0), gm_h(w.d[i], 1), 0.0f, 0.0f, x, n);
                    }
                }
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const gm_xb<NT> x = xp.template x<false>(j);
#pragma unroll
            for (int i = 0; i < R; i++) {
                const uint32_t a[4] = { w.w0[i][j].x, w.w1[i][j].x, w.w0[i][j].y, w.w1[i][j].y };
                const float w0 = gm_h(w.d[i][j], 0), w1 = gm_h(w.d[i][j], 1);
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    float s[4];
                    gm_mma32(s, a, x.b[n]);
                    gm_acc<NT>(acc[i][n], s, w0, w1, 0.0f, 0.0f, x, n);
                }
            }
        }
    }
}

// The tiles' rows at the warp's next step.
template <int T, int R> __device__ __forceinline__ void gm_next(gm_rows (&rw)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++) {
        rw[i].B0 += GM_WARPS * gm_traits<T>::bytes;
        rw[i].B1 += GM_WARPS * gm_traits<T>::bytes;
    }
}

// A tile's four sums (rows r0 + g and r0 + g + 8, columns c0 + 2t and
// c0 + 2t + 1: the m16n8 accumulator layout) into y; rows past the part's
// and columns past ncols are not stored.
__device__ __forceinline__ void gm_store(const gq_prod &p, int64_t r0, int c0, int g, int t, int nc,
                                         const float sum[4])
{
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int64_t r = r0 + g + 8 * (k >> 1);
        const int c = c0 + 2 * t + (k & 1);
        if (r < p.rows && c < nc)
            p.y[c * p.ys + r] = sum[k];
    }
}

// A block: GM_WARPS warps on R row tiles of 16 (16 R rows) and one column
// tile of 8, the warps taking the rows' steps round robin (a warp's first
// step loaded before the programmatic-launch wait); with DB each warp
// holds its next step's weights while it multiplies the current one.  The
// partial sums are added through shared memory in warp order, tile i's
// by warp i.  MB: the blocks an SM the registers are capped for.
template <int T, int R, bool DB, int MB>
__global__ void __launch_bounds__(32 * GM_WARPS, MB) gm_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                               const float *xs)
{
    constexpr int NT = 1;
    __shared__ float red[GM_WARPS][R * NT][4][32];
    const int warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const int g = lane >> 2, t = lane & 3, nc = (int)mm.ncols;
    const gq_prod p = gq_find(mm, 16 * R);
    const int64_t r_lo = p.bx * 16 * R, steps = mm.in / 256;
    if (mm.prefetch && warp == 0)
        for (int r = lane; r < 16 * R; r += 32)
            if (r_lo + r < p.rows)
                cu_prefetch_l2(p.w + (uint64_t)(r_lo + r) * p.rb, p.rb);
    // rows past the end are computed on the last row, never stored
    gm_rows rw[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int64_t a = r_lo + 16 * i + g, b = a + 8;
        rw[i].B0 = p.w + (uint64_t)(a < p.rows ? a : p.rows - 1) * p.rb + warp * gm_traits<T>::bytes;
        rw[i].B1 = p.w + (uint64_t)(b < p.rows ? b : p.rows - 1) * p.rb + warp * gm_traits<T>::bytes;
    }
    const gm_xp<NT> o = gm_xptr<NT>(mm.in, nc, g, t);
    gm_w<T, R> cur;
    if (warp < steps)
        gm_load<T, R>(rw, t, cur);
    cu_pdl_enter();
    float acc[R][NT][4] = {};
    for (int64_t st = warp; st < steps; st += GM_WARPS) {
        if constexpr (DB) {
            gm_w<T, R> nxt;
            if (st + GM_WARPS < steps) {
                gm_next<T, R>(rw);
                gm_load<T, R>(rw, t, nxt);
            }
            gm_mul<T, R, NT>(cur, gm_xg<NT>{ xq, xd, xs, o, (int)st }, acc);
            cur = nxt;
        } else {
            if (st != warp) {
                gm_next<T, R>(rw);
                gm_load<T, R>(rw, t, cur);
            }
            gm_mul<T, R, NT>(cur, gm_xg<NT>{ xq, xd, xs, o, (int)st }, acc);
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                red[warp][i * NT + n][k][lane] = acc[i][n][k];
    __syncthreads();
    if (warp >= R * NT)
        return;
    const int i = warp / NT, n = warp % NT;
    float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int w = 0; w < GM_WARPS; w++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            sum[k] += red[w][warp][k][lane];
    gm_store(p, r_lo + 16 * i, 8 * n, g, t, nc, sum);
}

// ---- 9..32 columns (knob gemv_mma_wide): x staged in shared memory
// Why not gm_kernel with more column tiles: its warps read x from the L2
// a sub-block at a time, a column's scale and sum each a 32-byte sector
// for 4 bytes, for 16 rows: at 32 columns ~10x the weights' bytes of L2
// traffic (H200, bench_gemv wide: the 9b's Q4_K 12288 x 4096 at 32
// columns 72 us, 392 GB/s; 37 us at 8).
// Here a block's GX_WARPS warps are RT row tiles of 16 x KS k-groups
// (RT KS = 8): each round the block stages KS steps of x (256 elements
// of every column, int8, and their scales and sums) in shared memory by
// cp.async, whole sectors, then warp (rt, kg) multiplies row tile rt's
// weights of step round KS + kg by it.  So a block reads x once for
// 16 RT rows, and a warp's x comes from shared memory (no L2 round trip
// a sub-block).  The weights go straight to registers as in gm_kernel,
// the next round's loaded before this one's multiply (the first before
// the programmatic-launch wait).  The k-groups' sums are added through
// shared memory in k-group order.
#define GX_WARPS 8
#define GX_CL_MAX 4   // blocks a cluster (knob gemv_wide_split)

// ---- cluster primitives (run-gmm-emu.sh puts cluster_emu.h here): gx_kernel's
// blocks alone or as clusters along x (knob gemv_wide_split)
#include "cuda_cluster.cuh"
// ---- end of the cluster primitives
#define GX_ROW 288   // a column's 256 int8 of a step, padded: the B reads conflict-free

template <int NT, int KS> struct gx_smem {
    int8_t q[KS][8 * NT][GX_ROW];
    float  d[KS][8 * NT][8], s[KS][8 * NT][8];   // [column][sub-block]
};

// x of a step from gx_smem, k-group kg.
template <int NT, int KS> struct gm_xs {
    const gx_smem<NT, KS> *S;
    int kg, g, t;
    template <bool SUMS> __device__ __forceinline__ gm_xb<NT> x(int j) const
    {
        gm_xb<NT> r;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int c0 = 8 * n + 2 * t;
            r.b[n] = *(const uint2 *)&S->q[kg][8 * n + g][32 * j + 8 * t];
            r.dx[n] = make_float2(S->d[kg][c0][j], S->d[kg][c0 + 1][j]);
            r.xs[n] = SUMS ? make_float2(S->s[kg][c0][j], S->s[kg][c0 + 1][j]) : make_float2(0.0f, 0.0f);
        }
        return r;
    }
    __device__ __forceinline__ uint32_t b16(int j, int n, int h) const
    {
        return *(const uint32_t *)&S->q[kg][8 * n + g][32 * j + 16 * h + 4 * t];
    }
};

// Round it's KS steps of x into S (every thread; one cp.async group): the
// block's steps s0.. (n of them).  A column past ncols stages column
// ncols - 1 and a k-group past the steps the last step: both are computed
// and never stored.
template <int NT, int KS, bool SUMS>
__device__ __forceinline__ void gx_stage(gx_smem<NT, KS> &S, const int8_t *xq, const float *xd, const float *xs,
                                         int64_t in, int nc, int it, int s0, int n, int tid)
{
    constexpr int NC = 8 * NT;
    const int64_t nb = in / 32;
    for (int i = tid; i < KS * NC * 16; i += 32 * GX_WARPS) {
        const int k = i / (NC * 16), c = i / 16 % NC, q = i % 16;
        const int64_t st = s0 + min(it * KS + k, n - 1), cc = min(c, nc - 1);
        cp_async16(&S.q[k][c][16 * q], xq + cc * in + st * 256 + 16 * q);
    }
    constexpr int P = SUMS ? 4 : 2;   // 16-byte pieces a column: the step's 8 scales (and 8 sums)
    for (int i = tid; i < KS * NC * P; i += 32 * GX_WARPS) {
        const int k = i / (NC * P), c = i / P % NC, u = i % P;
        const int64_t st = s0 + min(it * KS + k, n - 1), cc = min(c, nc - 1), o = cc * nb + st * 8 + 4 * (u & 1);
        if (u < 2)
            cp_async16(&S.d[k][c][4 * (u & 1)], xd + o);
        else
            cp_async16(&S.s[k][c][4 * (u & 1)], xs + o);
    }
    cp_async_commit();
}

// The block's shared memory: the staged x (DB: two rounds' buffers), then
// the k-groups' sums and (a cluster) the block's sums for the others.
template <int NT, int RT, int CL> struct gx_sums {
    float red[GX_WARPS / RT][RT][NT][4][32];
    float part[CL > 1 ? RT * NT : 1][4][32];
};
template <int NT, int RT, bool DB, int CL> union gx_union {
    gx_smem<NT, GX_WARPS / RT> S[DB ? 2 : 1];
    gx_sums<NT, RT, CL> r;
};

// DB (knob gemv_wide_db): round it + 1's x is staged into the other
// buffer before round it is multiplied, so its L2 round trip overlaps the
// multiply instead of preceding it (the weights' next round is already
// held in registers the same way).  The same arithmetic in the same
// order: the same bits as without it.
// MB: the blocks an SM the registers are capped for (knob gemv_wide_regs:
// 2 caps them at 128 and ptxas spills at 4 column tiles; 1 leaves ~170-254).
// CL (knob gemv_wide_split): the blocks of a cluster, which split the
// rows' steps in CL contiguous ranges (rank r: steps r S / CL ..); each
// block adds its k-groups' sums as without a cluster, then block r stores
// units r GX_WARPS + warp, CL GX_WARPS apart, adding the CL blocks' sums
// of the unit in rank order (distributed shared memory): the result does
// not depend on which block finishes first.  Why: a product of few rows
// (the 9b's ffn_down, 4096 rows at RT 8: 32 blocks) otherwise leaves most
// multiprocessors idle, and a smaller RT stages the same x for fewer rows.
template <int T, int NT, int RT, bool DB, int MB, int CL>
__global__ void __launch_bounds__(32 * GX_WARPS, MB) gx_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                               const float *xs)
{
    constexpr int KS = GX_WARPS / RT;
    constexpr bool SUMS = T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K;
    const int rank = cl_rank();   // (first: the emulation's block skew holds a block here)
    gx_union<NT, RT, DB, CL> &u = *(gx_union<NT, RT, DB, CL> *)cl_smem();   // gx_go's bytes
    const int tid = cl_tid(), warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3, nc = (int)mm.ncols, rt = warp % RT, kg = warp / RT;
    const gq_prod p = gq_find_at(mm, 16 * RT, cl_cluster());
    const int64_t r_lo = p.bx * 16 * RT;
    const int all = (int)(mm.in / 256), s0 = rank * all / CL;
    const int steps = (rank + 1) * all / CL - s0, rounds = (steps + KS - 1) / KS;
    constexpr int WB = gm_traits<T>::bytes;
    if (mm.prefetch && warp == 0)
        for (int r = lane; r < 16 * RT; r += 32)
            if (r_lo + r < p.rows)
                cu_prefetch_l2(p.w + (uint64_t)(r_lo + r) * p.rb + (uint64_t)s0 * WB, (uint64_t)steps * WB);
    // rows past the end are computed on the last row, never stored
    gm_rows rw[1];
    {
        const int64_t a = r_lo + 16 * rt + g, b = a + 8;
        rw[0].B0 = p.w + (uint64_t)(a < p.rows ? a : p.rows - 1) * p.rb + (uint64_t)(s0 + kg) * WB;
        rw[0].B1 = p.w + (uint64_t)(b < p.rows ? b : p.rows - 1) * p.rb + (uint64_t)(s0 + kg) * WB;
    }
    gm_w<T, 1> cur;
    if (kg < steps)
        gm_load<T, 1>(rw, t, cur);
    cu_pdl_enter();
    float acc[1][NT][4] = {};
    if (DB && rounds > 0)
        gx_stage<NT, KS, SUMS>(u.S[0], xq, xd, xs, mm.in, nc, 0, s0, steps, tid);
    for (int it = 0; it < rounds; it++) {
        gx_smem<NT, KS> &S = u.S[DB ? it & 1 : 0];
        const bool ahead = DB && it + 1 < rounds;
        if (!DB)
            gx_stage<NT, KS, SUMS>(S, xq, xd, xs, mm.in, nc, it, s0, steps, tid);
        else if (ahead)   // (the other buffer: its last readers passed the barrier below)
            gx_stage<NT, KS, SUMS>(u.S[(it + 1) & 1], xq, xd, xs, mm.in, nc, it + 1, s0, steps, tid);
        const bool live = it * KS + kg < steps, more = (it + 1) * KS + kg < steps;
        gm_w<T, 1> nxt;
        if (more) {
            rw[0].B0 += (uint64_t)KS * WB;
            rw[0].B1 += (uint64_t)KS * WB;
            gm_load<T, 1>(rw, t, nxt);
        }
        if (ahead)
            cp_async_wait_group<1>();   // this round's group; the next may still fly
        else
            cp_async_wait_all();
        cl_sync();
        if (live)
            gm_mul<T, 1, NT>(cur, gm_xs<NT, KS>{ &S, kg, g, t }, acc);
        cl_sync();   // (S is restaged, then reused for the sums)
        if (more)
            cur = nxt;
    }
    float (&red)[KS][RT][NT][4][32] = u.r.red;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            red[kg][rt][n][k][lane] = acc[0][n][k];
    cl_sync();
    for (int q = warp; q < RT * NT; q += GX_WARPS) {
        const int i = q / NT, n = q % NT;
        float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
        for (int k2 = 0; k2 < KS; k2++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                sum[k] += red[k2][i][n][k][lane];
        if (CL == 1)
            gm_store(p, r_lo + 16 * i, 8 * n, g, t, nc, sum);
        else
#pragma unroll
            for (int k = 0; k < 4; k++)
                u.r.part[q][k][lane] = sum[k];
    }
    if constexpr (CL > 1) {
        cl_cluster_sync();   // every block's part written
        for (int q = rank * GX_WARPS + warp; q < RT * NT; q += CL * GX_WARPS) {
            const int i = q / NT, n = q % NT;
            float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
            for (int r = 0; r < CL; r++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    sum[k] += cl_remote(&u.r.part[q][k][lane], r);
            gm_store(p, r_lo + 16 * i, 8 * n, g, t, nc, sum);
        }
        cl_cluster_sync();   // no block leaves while another reads its part
    }
}

static bool gm_part_ok(const uint8_t *w, uint64_t row_bytes, int64_t rows)
{
    // (gq_find's 32-bit rows and row bytes)
    return (uintptr_t)w % 16 == 0 && row_bytes % 16 == 0 && row_bytes <= 0xffffffffu && rows > 0 &&
           rows <= 0x7fffffff && (uint64_t)rows * row_bytes < ((uint64_t)1 << 62);
}

extern "C" bool si_cu_gemvm_ok(const cu_mm *mm)
{
    if (mm->type != SI_TYPE_Q4_K && mm->type != SI_TYPE_Q5_K && mm->type != SI_TYPE_Q6_K && mm->type != SI_TYPE_Q8_0)
        return false;
    if (!mm->gemv_mma || mm->expert != NULL || mm->w2 != NULL || mm->norm.ctr != NULL || mm->x_div != 1 ||
        mm->ncols < 2 || mm->ncols > GM_COLS || mm->in <= 0 || mm->in % 256 != 0 || mm->in > GM_IN_MAX)
        return false;
    // (Q8_0: row_bytes in % 256 == 0 is 272 a step, so 16-byte rows)
    if (mm->n_more < 0 || mm->n_more > CU_MM_MORE || !gm_part_ok(mm->w, mm->row_bytes, mm->rows))
        return false;
    for (int k = 0; k < mm->n_more; k++)
        if (!gm_part_ok(mm->more[k].w, mm->more[k].row_bytes, mm->more[k].rows))
            return false;
    return true;
}

// ---- launcher (tests/cuda/emu/run-gmm-emu.sh takes the file whole)

// Row tiles of 16 a warp: mm->gemv_rows 1 or 2 (bench A/B), else 2
// for products of GM_TALL rows or more (the LM heads), 1 below.  H200,
// bench_gemv cols (alone, L2 flushed): 9b Q4_K 12288 x 4096 at 8 columns
// 29.1 us at R 1, 37.3 at 2, 35.6 at 4; the 9b's Q6_K 248320 x 4096 537.3
// at R 1, 484.5 at 2 (4 tiles spilled registers: 661.5).
#define GM_TALL 65536
static inline int gm_r(const cu_mm *mm)
{
    if (mm->gemv_rows == 1 || mm->gemv_rows == 2)
        return mm->gemv_rows;
    return mm->rows >= GM_TALL ? 2 : 1;
}

// Blocks of `rows` rows over mm's parts (gq_find's walk); 0: too many.
static unsigned gm_blocks(const cu_mm *mm, int rows)
{
    int64_t blocks = (mm->rows + rows - 1) / rows;
    for (int k = 0; k < mm->n_more; k++)
        blocks += (mm->more[k].rows + rows - 1) / rows;
    return blocks > 0x7fffffffLL ? 0u : (unsigned)blocks;
}

template <int T, int R, bool DB, int MB>
static cudaError_t gm_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const unsigned blocks = gm_blocks(mm, 16 * R);
    if (blocks == 0)
        return cudaErrorInvalidValue;
    return cu_launch(gm_kernel<T, R, DB, MB>, dim3(blocks), dim3(32 * GM_WARPS), 0, s, *mm, xq, xd, xs);
}

// 9..32 columns: gx_kernel with 2 or 4 column tiles; RT row tiles a block
// (mm->gemv_rows 2 or 8: bench A/B), else 8 for the LM heads (GM_TALL
// rows or more), 2 below.  H200, bench_gemv wide (alone, L2 flushed), 32
// columns: the 9b's Q4_K 12288 x 4096 57.7 us at RT 2, 61.7 at 4, 83.6 at
// 8; its Q6_K 248320 x 4096 903 at 2, 857 at 8.
// DB past 48 KiB (4 column tiles at RT 2: 88 KiB) opts in to more shared
// memory, per device and function: once for the device last set (a graph
// captures a step's launches on its second run, so the first, eager one
// sets it outside any capture); two blocks an SM still fit.
// CL > 1: clusters of CL blocks along x (cu_launch_cluster), CL blocks a
// row block.
template <int T, int NT, int RT, bool DB, int MB, int CL>
static cudaError_t gx_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const unsigned blocks = gm_blocks(mm, 16 * RT);
    if (blocks == 0 || blocks > 0x7fffffffu / CL)
        return cudaErrorInvalidValue;
    constexpr size_t smem = sizeof(gx_union<NT, RT, DB, CL>);
    static_assert(DB || smem <= 48 * 1024, "no opt-in shared memory without DB");
    static_assert(2 * smem <= 227 * 1024, "two blocks an SM");
    static_assert(CL == 1 || smem <= 48 * 1024, "a cluster's blocks without the opt-in");
    if (smem > 48 * 1024) {
        static int set_on = -1;   // the device the attribute was last set on
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess && dev != set_on)
            e = cudaFuncSetAttribute(gx_kernel<T, NT, RT, DB, MB, CL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem);
        if (e != cudaSuccess)
            return e;
        set_on = dev;
    }
    return cu_launch_cluster(gx_kernel<T, NT, RT, DB, MB, CL>, dim3(blocks * CL), dim3(32 * GX_WARPS), smem, s, CL,
                             *mm, xq, xd, xs);
}

// Knob gemv_wide_regs: one block an SM (the registers uncapped) always
// (full) or where the launch has no more than n_sm blocks (small).
static bool gx_full(const cu_mm *mm, unsigned blocks)
{
    return mm->gemv_wide_regs == 2 || (mm->gemv_wide_regs == 1 && mm->n_sm > 0 && blocks <= (unsigned)mm->n_sm);
}

// Knobs gemv_wide_db, then gemv_wide_regs (not combined: DB keeps the
// two-blocks cap, its 88 KiB of shared memory a block being sized for it).
template <int T, int NT, int RT>
static cudaError_t gx_db(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->gemv_wide_db)
        return gx_go<T, NT, RT, true, 2, 1>(mm, xq, xd, xs, s);
    return gx_full(mm, gm_blocks(mm, 16 * RT)) ? gx_go<T, NT, RT, false, 1, 1>(mm, xq, xd, xs, s)
                                                : gx_go<T, NT, RT, false, 2, 1>(mm, xq, xd, xs, s);
}

// The cluster a row block takes with knob gemv_wide_split: the fewest
// blocks (1, 2, 4) that give the launch two blocks a multiprocessor
// (n_sm; 132 where unknown), each block at least two of the rows' steps.
static int gx_split(const cu_mm *mm, unsigned blocks)
{
    const int64_t want = 2 * (int64_t)(mm->n_sm > 0 ? mm->n_sm : 132), steps = mm->in / 256;
    int cl = 1;
    while (cl < GX_CL_MAX && (int64_t)blocks * cl < want && 2 * (2 * cl) <= steps)
        cl *= 2;
    return cl;
}

// Knob gemv_wide_split: RT 8 (x staged once for 128 rows), x a round
// ahead (DB: at RT 8 two rounds' buffers are 22 KiB), the steps split
// over a cluster where the row blocks are few.
template <int T, int NT, int MB>
static cudaError_t gx_split_go(const cu_mm *mm, int cl, const int8_t *xq, const float *xd, const float *xs,
                               cudaStream_t s)
{
    if (cl == 4)
        return gx_go<T, NT, 8, true, MB, 4>(mm, xq, xd, xs, s);
    if (cl == 2)
        return gx_go<T, NT, 8, true, MB, 2>(mm, xq, xd, xs, s);
    return gx_go<T, NT, 8, true, MB, 1>(mm, xq, xd, xs, s);
}

template <int T, int NT>
static cudaError_t gx_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->gemv_wide_split) {
        const unsigned blocks = gm_blocks(mm, 16 * 8);
        const int cl = gx_split(mm, blocks);
        return gx_full(mm, blocks * (unsigned)cl) ? gx_split_go<T, NT, 1>(mm, cl, xq, xd, xs, s)
                                                  : gx_split_go<T, NT, 2>(mm, cl, xq, xd, xs, s);
    }
    if (mm->gemv_rows == 2 || mm->gemv_rows == 8)
        return mm->gemv_rows == 2 ? gx_db<T, NT, 2>(mm, xq, xd, xs, s) : gx_db<T, NT, 8>(mm, xq, xd, xs, s);
    int64_t rows = mm->rows;
    for (int k = 0; k < mm->n_more; k++)
        rows += mm->more[k].rows;
    return rows >= GM_TALL ? gx_db<T, NT, 8>(mm, xq, xd, xs, s) : gx_db<T, NT, 2>(mm, xq, xd, xs, s);
}

// Up to 8 columns gm_kernel; 9..16 gx_kernel with 2 column tiles, 17..32
// with 4.  gm_kernel's registers are capped for 3 blocks an SM at one row
// tile (2 at two, or holding the next step): its x loads, unpredicated,
// would otherwise be hoisted to ~150-215 registers (1 block an SM).
template <int T>
static cudaError_t gm_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->ncols > 16)
        return gx_launch<T, 4>(mm, xq, xd, xs, s);
    if (mm->ncols > 8)
        return gx_launch<T, 2>(mm, xq, xd, xs, s);
    // (the next step held only for Q8_0, one tile: H200, bench_gemv cols,
    // 35b 2048 x 4096 at 8 columns 13.0 vs 16.4 us; the K-quants lost with
    // it, e.g. the 9b's Q6_K 4096 x 12288 at 4 columns 41.8 vs 35.1 us: the
    // second step's registers crowd out the x loads hoisted ahead)
    if (gm_r(mm) == 2)
        return gm_go<T, 2, false, 2>(mm, xq, xd, xs, s);
    if constexpr (T == SI_TYPE_Q8_0)
        return gm_go<T, 1, true, 2>(mm, xq, xd, xs, s);
    else
        return gm_go<T, 1, false, 3>(mm, xq, xd, xs, s);
}

extern "C" int si_cu_gemvm(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    if (!si_cu_gemvm_ok(mm))
        return (int)cudaErrorInvalidValue;
    // (gm_kernel reads x 8 bytes and a scale 4 at a time; gx_kernel
    // stages both by 16-byte cp.async)
    const uintptr_t aq = mm->ncols > 8 ? 16 : 8, as = mm->ncols > 8 ? 16 : 4;
    if ((uintptr_t)xq % aq != 0 || (uintptr_t)xd % as != 0 || (uintptr_t)xs % as != 0)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_Q4_K: return (int)gm_launch<SI_TYPE_Q4_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q5_K: return (int)gm_launch<SI_TYPE_Q5_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q6_K: return (int)gm_launch<SI_TYPE_Q6_K>(mm, xq, xd, xs, s);
    default: return (int)gm_launch<SI_TYPE_Q8_0>(mm, xq, xd, xs, s);
    }
}
