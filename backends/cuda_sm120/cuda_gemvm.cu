// backends/cuda_sm120/cuda_gemvm.cu — knob gemv_mma: the dense decode
// products of 2..8 columns (decode of 2..8 sequences) on the int8 tensor
// cores: Q4_K, Q5_K, Q6_K and Q8_0 rows, in % 256 == 0.
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
// give zeros and their sums are not stored.  Lane (g = lane / 4, t = lane
// % 4) holds rows g and g + 8 and columns 2t and 2t + 1 of a tile's result
// (the m16n8 accumulator layout).  Which products come here (4..8
// columns, measured) is cuda_mmq.cu's mma_pick.
// Which weight a k-slot of the MMA holds is free while A and B agree: lane
// t takes weights 8t..8t+7 of a 32-weight sub-block as k-slots 4t..4t+3
// and 16+4t..16+4t+3, so its A bytes are one 8-byte load a row and its B
// bytes one 8-byte load of x a column.
// Scales, per 32-weight sub-block (the activations' block of 32: scale dx,
// exact f32 sum xs, as si_cu_quantize_x makes them), on the exact int32
// sums S of the MMA:
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
#define GM_COLS 8
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

// What a lane needs of x for one 32-weight sub-block b (elements 32b..):
// the B operand of column g (its elements 8t..8t+7; zeros past ncols) and
// the scales and sums of columns 2t and 2t + 1 (zeros past ncols).
struct gm_xb {
    uint2  b;
    float2 dx, xs;
};

template <bool SUMS>
__device__ __forceinline__ gm_xb gm_x(const int8_t *xq, const float *xd, const float *xs, int64_t in, int nc,
                                      int64_t b, int g, int t)
{
    const int64_t nb = in / 32;
    gm_xb r;
    r.b = g < nc ? __ldg((const uint2 *)(xq + (int64_t)g * in + 32 * b + 8 * t)) : make_uint2(0u, 0u);
    const int c0 = 2 * t, c1 = 2 * t + 1;
    r.dx = make_float2(c0 < nc ? __ldg(xd + c0 * nb + b) : 0.0f, c1 < nc ? __ldg(xd + c1 * nb + b) : 0.0f);
    r.xs = make_float2(0.0f, 0.0f);
    if (SUMS)
        r.xs = make_float2(c0 < nc ? __ldg(xs + c0 * nb + b) : 0.0f, c1 < nc ? __ldg(xs + c1 * nb + b) : 0.0f);
    return r;
}

// The four accumulators of a k32 (or combined) sub-block: rows g (c0, c1)
// and g + 8 (c2, c3) at columns 2t, 2t + 1.  w0/w1: the rows' scales;
// m0/m1 their mins (K-quants; 0 otherwise).
__device__ __forceinline__ void gm_acc(float acc[4], const int c[4], float w0, float w1, float m0, float m1,
                                       const gm_xb &x)
{
    acc[0] += (x.dx.x * w0) * (float)c[0] - m0 * x.xs.x;
    acc[1] += (x.dx.y * w0) * (float)c[1] - m0 * x.xs.y;
    acc[2] += (x.dx.x * w1) * (float)c[2] - m1 * x.xs.x;
    acc[3] += (x.dx.y * w1) * (float)c[3] - m1 * x.xs.y;
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
// of the R tiles into acc.  Each sub-block's x is loaded once for the R
// tiles.
//  - Q4_K/Q5_K: sub-block j (chunk j / 2, nibble j & 1; Q5_K's fifth bit
//    j of qh), one k32 MMA a tile.
//  - Q8_0: block j of the step, one k32 MMA.
//  - Q6_K: per half hf (128 weights) and group G (32 weights: ql bytes
//    0..31 or 32..63, low or high nibbles, qh bits 2G), two k16 MMAs
//    (elements 0..15 and 16..31 of the group, a scale each); lane t takes
//    elements 4t..4t+3 of each 16 (the k16 A layout: rows g and g + 8 at
//    k-slots 4t..4t+3; B: k-slots 4t..4t+3 of column g).
template <int T, int R>
__device__ __forceinline__ void gm_mul(const gm_w<T, R> &w, const int8_t *xq, const float *xd, const float *xs,
                                       int64_t in, int nc, int64_t blk, int g, int t, float (&acc)[R][4])
{
    if constexpr (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const gm_xb x = gm_x<true>(xq, xd, xs, in, nc, 8 * blk + j, g, t);
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
                int s[4];
                mma_k32(s, a, x.b.x, x.b.y);
                int sc0, m0, sc1, m1;
                cu_scale_min_k4w(w.h0[i].y, w.h0[i].z, w.h0[i].w, j, sc0, m0);
                cu_scale_min_k4w(w.h1[i].y, w.h1[i].z, w.h1[i].w, j, sc1, m1);
                gm_acc(acc[i], s, gm_h(w.h0[i].x, 0) * (float)sc0, gm_h(w.h1[i].x, 0) * (float)sc1,
                       gm_h(w.h0[i].x, 1) * (float)m0, gm_h(w.h1[i].x, 1) * (float)m1, x);
            }
        }
    } else if constexpr (T == SI_TYPE_Q6_K) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
#pragma unroll
            for (int G = 0; G < 4; G++) {
                const int nib = 4 * (G >> 1), hs = 2 * G, wq = 2 * (G & 1);
                const int64_t sb = 8 * blk + 4 * hf + G;   // its sub-block of 32 (x's block)
                const gm_xb x = gm_x<false>(xq, xd, nullptr, in, nc, sb, g, t);
                // the B operands of the two 16s: x's elements 4t.. and 16 + 4t..
                const uint32_t b0 = g < nc ? __ldg((const uint32_t *)(xq + (int64_t)g * in + 32 * sb + 4 * t)) : 0u;
                const uint32_t b1 =
                    g < nc ? __ldg((const uint32_t *)(xq + (int64_t)g * in + 32 * sb + 16 + 4 * t)) : 0u;
#pragma unroll
                for (int i = 0; i < R; i++) {
                    int sa[4], sb2[4];
                    mma_k16(sa, gm_q6(w.l0[i][hf][wq], w.h0[i][hf][0], nib, hs),
                            gm_q6(w.l1[i][hf][wq], w.h1[i][hf][0], nib, hs), b0);
                    mma_k16(sb2, gm_q6(w.l0[i][hf][wq + 1], w.h0[i][hf][1], nib, hs),
                            gm_q6(w.l1[i][hf][wq + 1], w.h1[i][hf][1], nib, hs), b1);
                    // the scales of the two 16s: int8 bytes 2G and 2G + 1 of
                    // the half's 8 (the cpu's sc[is + 2G], is = 0, 1)
                    const int s0a = gm_sc6(w.sc0[i][hf], 2 * G), s0b = gm_sc6(w.sc0[i][hf], 2 * G + 1);
                    const int s1a = gm_sc6(w.sc1[i][hf], 2 * G), s1b = gm_sc6(w.sc1[i][hf], 2 * G + 1);
                    const int s[4] = { s0a * sa[0] + s0b * sb2[0], s0a * sa[1] + s0b * sb2[1],
                                       s1a * sa[2] + s1b * sb2[2], s1a * sa[3] + s1b * sb2[3] };
                    gm_acc(acc[i], s, gm_h(w.d[i], 0), gm_h(w.d[i], 1), 0.0f, 0.0f, x);
                }
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const gm_xb x = gm_x<false>(xq, xd, nullptr, in, nc, 8 * blk + j, g, t);
#pragma unroll
            for (int i = 0; i < R; i++) {
                const uint32_t a[4] = { w.w0[i][j].x, w.w1[i][j].x, w.w0[i][j].y, w.w1[i][j].y };
                int s[4];
                mma_k32(s, a, x.b.x, x.b.y);
                gm_acc(acc[i], s, gm_h(w.d[i][j], 0), gm_h(w.d[i][j], 1), 0.0f, 0.0f, x);
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

// A block: GM_WARPS warps on R row tiles of 16 (16 R rows), the warps
// taking the rows' steps round robin (a warp's first step loaded before
// the programmatic-launch wait); with DB each warp holds its next step's
// weights while it multiplies the current one.  The partial sums are added
// through shared memory in warp order, tile i's by warp i.
template <int T, int R, bool DB>
__global__ void __launch_bounds__(32 * GM_WARPS) gm_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                           const float *xs)
{
    __shared__ float red[GM_WARPS][R][4][32];
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
    gm_w<T, R> cur;
    if (warp < steps)
        gm_load<T, R>(rw, t, cur);
    cu_pdl_enter();
    float acc[R][4] = {};
    for (int64_t st = warp; st < steps; st += GM_WARPS) {
        if constexpr (DB) {
            gm_w<T, R> nxt;
            if (st + GM_WARPS < steps) {
                gm_next<T, R>(rw);
                gm_load<T, R>(rw, t, nxt);
            }
            gm_mul<T, R>(cur, xq, xd, xs, mm.in, nc, st, g, t, acc);
            cur = nxt;
        } else {
            if (st != warp) {
                gm_next<T, R>(rw);
                gm_load<T, R>(rw, t, cur);
            }
            gm_mul<T, R>(cur, xq, xd, xs, mm.in, nc, st, g, t, acc);
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            red[warp][i][k][lane] = acc[i][k];
    __syncthreads();
    if (warp >= R)
        return;
    float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int w = 0; w < GM_WARPS; w++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            sum[k] += red[w][warp][k][lane];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int64_t r = r_lo + 16 * warp + g + 8 * (k >> 1);
        const int c = 2 * t + (k & 1);
        if (r < p.rows && c < nc)
            p.y[c * p.ys + r] = sum[k];
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

template <int T, int R, bool DB>
static cudaError_t gm_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    int64_t blocks = (mm->rows + 16 * R - 1) / (16 * R);
    for (int k = 0; k < mm->n_more; k++)
        blocks += (mm->more[k].rows + 16 * R - 1) / (16 * R);
    if (blocks > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    return cu_launch(gm_kernel<T, R, DB>, dim3((unsigned)blocks), dim3(32 * GM_WARPS), 0, s, *mm, xq, xd, xs);
}

template <int T>
static cudaError_t gm_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    // (the next step held only for Q8_0, one tile: H200, bench_gemv cols,
    // 35b 2048 x 4096 at 8 columns 13.0 vs 16.4 us; the K-quants lost with
    // it, e.g. the 9b's Q6_K 4096 x 12288 at 4 columns 41.8 vs 35.1 us: the
    // second step's registers crowd out the x loads hoisted ahead)
    if (gm_r(mm) == 2)
        return gm_go<T, 2, false>(mm, xq, xd, xs, s);
    if constexpr (T == SI_TYPE_Q8_0)
        return gm_go<T, 1, true>(mm, xq, xd, xs, s);
    else
        return gm_go<T, 1, false>(mm, xq, xd, xs, s);
}

extern "C" int si_cu_gemvm(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    if (!si_cu_gemvm_ok(mm))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_Q4_K: return (int)gm_launch<SI_TYPE_Q4_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q5_K: return (int)gm_launch<SI_TYPE_Q5_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q6_K: return (int)gm_launch<SI_TYPE_Q6_K>(mm, xq, xd, xs, s);
    default: return (int)gm_launch<SI_TYPE_Q8_0>(mm, xq, xd, xs, s);
    }
}
