// backends/cuda_sm120/cuda_gemvm.cuh — what the int8 tensor-core decode
// products share: gm_kernel (2..8 columns, cuda_gemvm.cu) and gx_kernel
// (9..32 columns, cuda_gemvx.cu): the weights' loads and unpacking, x's
// operands, the MMA steps and the stores.
//
// Knob gemv_mma: the dense decode products of 2..8 columns (decode of 2..8
// sequences) on the int8 tensor cores: Q4_K, Q5_K, Q6_K and Q8_0 rows, in
// % 256 == 0; with knob gemv_mma_wide also those of 9..32 columns.
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
#ifndef SI_CUDA_GEMVM_CUH
#define SI_CUDA_GEMVM_CUH

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
// SH: p is in shared memory (knob gemv_wide_ring), a plain load.
template <bool SH, class U> __device__ __forceinline__ U gm_g(const U *p)
{
    if constexpr (SH)
        return *p;
    else
        return __ldg(p);
}

template <bool SH = false> __device__ __forceinline__ uint32_t gm_ld4(const uint8_t *p)
{
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
    if ((a & 2) == 0)
        return gm_g<SH>(w);
    const uint32_t hi = (uint32_t)gm_g<SH>((const unsigned short *)(w + 1));
    return __funnelshift_r(gm_g<SH>(w), hi, 16);
}

// 8 bytes at p, p 4-byte aligned (K-quant qs/qh: 16-byte aligned blocks)
// or 2-byte aligned (Q8_0's quants after the f16 scale).
template <bool SH = false> __device__ __forceinline__ uint2 gm_ld8(const uint8_t *p)
{
    if (((uintptr_t)p & 3) == 0)
        return make_uint2(gm_g<SH>((const uint32_t *)p), gm_g<SH>((const uint32_t *)(p + 4)));
    const uint32_t lo = (uint32_t)gm_g<SH>((const unsigned short *)p);
    const uint32_t mid = gm_g<SH>((const uint32_t *)(p + 2));
    const uint32_t hi = (uint32_t)gm_g<SH>((const unsigned short *)(p + 6));
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

// The step's weights of the R tiles (B0, B1 at the step; SH: in shared memory).
template <int T, int R, bool SH = false>
__device__ __forceinline__ void gm_load(const gm_rows (&rw)[R], int t, gm_w<T, R> &w)
{
#pragma unroll
    for (int i = 0; i < R; i++) {
        const uint8_t *B0 = rw[i].B0, *B1 = rw[i].B1;
        if constexpr (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
            const int QS = T == SI_TYPE_Q4_K ? 16 : 48;
            w.h0[i] = gm_g<SH>((const uint4 *)B0);
            w.h1[i] = gm_g<SH>((const uint4 *)B1);
#pragma unroll
            for (int c = 0; c < 4; c++) {
                w.q0[i][c] = gm_ld8<SH>(B0 + QS + 32 * c + 8 * t);
                w.q1[i][c] = gm_ld8<SH>(B1 + QS + 32 * c + 8 * t);
            }
            if constexpr (T == SI_TYPE_Q5_K) {
                w.qh0[i] = gm_ld8<SH>(B0 + 16 + 8 * t);
                w.qh1[i] = gm_ld8<SH>(B1 + 16 + 8 * t);
            }
        } else if constexpr (T == SI_TYPE_Q6_K) {
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    w.l0[i][hf][k] = gm_ld4<SH>(B0 + 64 * hf + 16 * k + 4 * t);
                    w.l1[i][hf][k] = gm_ld4<SH>(B1 + 64 * hf + 16 * k + 4 * t);
                }
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    w.h0[i][hf][k] = gm_ld4<SH>(B0 + 128 + 32 * hf + 16 * k + 4 * t);
                    w.h1[i][hf][k] = gm_ld4<SH>(B1 + 128 + 32 * hf + 16 * k + 4 * t);
                    w.sc0[i][hf][k] = gm_ld4<SH>(B0 + 192 + 8 * hf + 4 * k);
                    w.sc1[i][hf][k] = gm_ld4<SH>(B1 + 192 + 8 * hf + 4 * k);
                }
            }
            w.d[i] = (uint32_t)gm_g<SH>((const unsigned short *)(B0 + 208)) |
                     ((uint32_t)gm_g<SH>((const unsigned short *)(B1 + 208)) << 16);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                w.w0[i][j] = gm_ld8<SH>(B0 + 34 * j + 2 + 8 * t);
                w.w1[i][j] = gm_ld8<SH>(B1 + 34 * j + 2 + 8 * t);
                w.d[i][j] = (uint32_t)gm_g<SH>((const unsigned short *)(B0 + 34 * j)) |
                            ((uint32_t)gm_g<SH>((const unsigned short *)(B1 + 34 * j)) << 16);
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

// Products of GM_TALL rows or more are LM heads (their own row tiles).
#define GM_TALL 65536

// Blocks of `rows` rows over mm's parts (gq_find's walk); 0: too many.
static inline unsigned gm_blocks(const cu_mm *mm, int rows)
{
    int64_t blocks = (mm->rows + rows - 1) / rows;
    for (int k = 0; k < mm->n_more; k++)
        blocks += (mm->more[k].rows + rows - 1) / rows;
    return blocks > 0x7fffffffLL ? 0u : (unsigned)blocks;
}

// 9..32 columns (cuda_gemvx.cu): mm taken by si_cu_gemvm_ok, x aligned
// for 16-byte copies (si_cu_gemvm checks both).
extern "C" int si_cu_gemvx(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s);
extern "C" bool si_cu_gemvx_narrow_ok(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs);

#endif
