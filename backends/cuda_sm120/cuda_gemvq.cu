// backends/cuda_sm120/cuda_gemvq.cu — the one-column decode GEMV on int8
// activations with four lanes a block (knob gemv_quad, default true):
// Q4_K, Q5_K and Q6_K rows of whole groups of 8 blocks (in % 2048 == 0),
// no experts; Q8_0 rows of in % 2048 == 0 through shared memory (knob
// gemv_staged, below gq_kernel); and the MOE's expert columns of K-quant
// rows of in % 512 == 0 (knob gemv_quad_experts, gqe_kernel).  Everything
// else stays on v1 (cuda_mmq.cu), which calls in here.
//
// Why: v1 (a lane per 16-byte unit, units l, l+32, ... of the row) spent
// ~150 warp instructions per 512 bytes of Q4_K on the H200 (ncu), about
// what the SMs can issue at the HBM's rate: the sub-block index differs
// from lane to lane (the scale decode's branches diverge), the scale bytes
// are loaded one at a time and the index arithmetic is 64-bit.  Here a
// warp takes 8 consecutive blocks of a row per step, lane l the part
// l & 3 of block l >> 2, and that part never changes for the lane:
//  - Q4_K/Q5_K: part g = sub-blocks 2g and 2g+1 (32 bytes of qs, 64
//    weights).  The 16-byte header (d, dmin, 12 scale bytes) is one vector
//    load, the same 16 bytes for the block's four lanes; the 6-bit scales
//    and mins of all 8 sub-blocks are unpacked with word-wide masks and the
//    lane's two picked by a fixed shift (no branch).  Q5_K adds the 32
//    bytes of qh (bits 2g and 2g+1).
//  - Q6_K: part (h, k) = ql bytes 64h + 16k and 64h + 32 + 16k, qh bytes
//    32h + 16k (16 each: 64 weights of four 16-wide sub-blocks, scales
//    8h + k + {0, 2, 4, 6}).  A 210-byte block is 4-byte aligned only at
//    even block indices, and a lane's block parity is fixed: its loads are
//    aligned words shifted by 0 or 16 bits (one funnel shift per word).
// Sums: dp4a per 32 weights (Q4_K/Q5_K, per sub-block) or per 16 (Q6_K,
// with the activations' sum for its -32, exact in integers), scaled in f32
// as v1 does (the weights' scales times the activations' per-32 scale; the
// Q4_K/Q5_K mins against the block's exact f32 sum): the same terms as the
// cpu backend's int8 path, in another f32 order.
// A lane holds the next step's weights while it multiplies the current
// one, and the first step's weights are loaded before the programmatic-
// launch wait (cu_pdl_enter): weights are not written during a decode
// step, so they may stream in while the kernel before this one (the norm
// that produced x) drains; only x waits.
// R rows a warp (2 where a row is a single step: the 35b's 2048-wide rows)
// keep two steps of weights in flight per lane either way.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"
#include "cuda_ptx.cuh"
#include "cuda_rms.cuh"
#include "cuda_parts.cuh"   // gq_find

#define GQ_WARPS 4
// K-quant blocks of 8 warps where mm->gemv_warps == 8 (knob gemv_warps):
// half the blocks, so half the copies of x a product makes (4 KB of x a
// block against 9 KB of weights at 4096-wide Q4_K rows, one row a warp).
#define GQ_WARPS_MAX 8
// x in shared memory (mm->gemv_xs, knob gemv_xsmem) where it is at most
// GQ_XS_MAX bytes: 16 KB a block stays under the default 48 KB and leaves
// an SM room for its resident blocks (sm_120's 100 KB included).
#define GQ_XS_MAX 16384
#define GQ_XSN_MAX 49152
// Columns (decoding sequences) of one launch, knob gemv_quad_cols
#define GQ_COLS_MAX 8

template <int T> struct gq_traits;
template <> struct gq_traits<SI_TYPE_Q4_K> { static const int bytes = 144; };
template <> struct gq_traits<SI_TYPE_Q5_K> { static const int bytes = 176; };
template <> struct gq_traits<SI_TYPE_Q6_K> { static const int bytes = 210; };
template <> struct gq_traits<CU_TYPE_Q6R> { static const int bytes = 210; };   // (Q6_K's blocks, regrouped)
template <> struct gq_traits<CU_TYPE_Q8R> { static const int bytes = 272; };   // (8 Q8_0 blocks, regrouped)

// The weight registers of one lane's part of one block (fields a type
// does not use are dead and vanish).
struct gq_part {
    uint32_t q[8];   // Q4_K/Q5_K: 32 bytes of qs; Q6_K: the two 16-byte ql runs
    uint32_t h[4];   // Q4_K/Q5_K: header; Q6_K: 16 bytes of qh
    uint32_t e[8];   // Q5_K: the block's 32 bytes of qh; Q6_K: e[0..1] scales, e[2] d
};

// Block B of a row, part p of the lane (Q4_K/Q5_K: g = p; Q6_K: h = p >> 1,
// k = p & 1), odd = the block's index is odd (Q6_K's 2-byte offset).
// SM: B is in shared memory (g6_kernel's staged steps), read with plain
// loads (__ldg is for global memory only); the same words either way.
template <int T, bool SM = false> __device__ __forceinline__ void gq_load(const uint8_t *B, int p, int odd, gq_part &w)
{
    if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        cu_ld16(B, w.h);
        const int qs = T == SI_TYPE_Q4_K ? 16 : 48;
        cu_ld16(B + qs + 32 * p, w.q);
        cu_ld16(B + qs + 16 + 32 * p, w.q + 4);
        if (T == SI_TYPE_Q5_K) {
            cu_ld16(B + 16, w.e);
            cu_ld16(B + 32, w.e + 4);
        }
    } else {
        // aligned words from B - 2 * odd; byte o of the block is at o + 2 * odd
        const uint32_t *W = (const uint32_t *)(B - 2 * odd);
        const unsigned sh = 16u * (unsigned)odd;
        const int h = p >> 1, k = p & 1;
        auto ld = [W](int i) { return SM ? W[i] : __ldg(W + i); };
        uint32_t a[5], b[5], c[5];
#pragma unroll
        for (int i = 0; i < 5; i++) {
            a[i] = ld(16 * h + 4 * k + i);
            b[i] = ld(16 * h + 4 * k + 8 + i);
            c[i] = ld(32 + 8 * h + 4 * k + i);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            w.q[i] = __funnelshift_r(a[i], a[i + 1], sh);
            w.q[4 + i] = __funnelshift_r(b[i], b[i + 1], sh);
            w.h[i] = __funnelshift_r(c[i], c[i + 1], sh);
        }
        const uint32_t s0 = ld(48 + 2 * h), s1 = ld(49 + 2 * h), s2 = ld(50 + 2 * h);
        w.e[0] = __funnelshift_r(s0, s1, sh);   // scales 8h .. 8h+3
        w.e[1] = __funnelshift_r(s1, s2, sh);   // scales 8h+4 .. 8h+7
        w.e[2] = ld(52) >> sh;                  // d (low 16 bits)
    }
}

// ---- knobs gemv_q6r / gemv_q8r: rows regrouped (cuda_internal.h) -------
// A Q6_K block is 210 bytes and a Q8_0 block 34, so a row's blocks start
// 2-byte aligned: gq_load reads a Q6_K lane part as 19 4-byte words put
// together by funnel shifts (Q6_K rows streamed ~2.3 TB/s in a 9b decode
// step on the H200, Q4_K's 16-byte loads ~3 TB/s), and Q8_0 went through
// shared memory (gs_kernel's cp.async rings).  The copies keep every byte
// in the same group of a row's 2048 weights (a step of gq_body, at the
// same offset) and only regroup it, so that each lane loads its part with
// aligned 16-byte loads (and one small one), into gq_part words whose
// products are the GGUF rows' kernels' own: the same bits.
//  - CU_TYPE_Q6R, 1680 bytes: the 8 blocks' ql+qh (192 bytes each), then
//    their 16 scale bytes, then their 2-byte d; gq_load's words.
//  - CU_TYPE_Q8R, 2176 bytes: the 64 blocks' qs (32 bytes each), then their
//    2-byte d.  gq_body's "block" bl of a step is 8 Q8_0 blocks (272
//    bytes), so lane l = 4 bl + p takes blocks 2l and 2l + 1 of the step as
//    gs_kernel's lane l does (gs_dot's arithmetic, below in gq_dot).
// B is where gq_body's walk puts block bl of the group (group + bl times
// gq_traits' bytes).
__device__ __forceinline__ void gq_load_r6(const uint8_t *B, int p, int bl, gq_part &w)
{
    const uint8_t *G = B - 210 * bl;
    const int h = p >> 1, k = p & 1;
    const uint8_t *q = G + 192 * bl;
    cu_ld16(q + 64 * h + 16 * k, w.q);        // ql bytes 64h + 16k .. + 15
    cu_ld16(q + 64 * h + 16 * k + 32, w.q + 4);
    cu_ld16(q + 128 + 32 * h + 16 * k, w.h);  // qh bytes 32h + 16k .. + 15
    const uint2 sc = __ldg((const uint2 *)(G + 1536 + 16 * bl + 8 * h));
    w.e[0] = sc.x;   // scales 8h .. 8h+3
    w.e[1] = sc.y;   // scales 8h+4 .. 8h+7
    w.e[2] = __ldg((const unsigned short *)(G + 1664 + 2 * bl));   // d
}

__device__ __forceinline__ void gq_load_r8(const uint8_t *B, int p, int bl, gq_part &w)
{
    const uint8_t *G = B - 272 * bl;
    const int l = 4 * bl + p;
    cu_ld16(G + 64 * l, w.q);        // block 2l's qs
    cu_ld16(G + 64 * l + 16, w.q + 4);
    cu_ld16(G + 64 * l + 32, w.e);   // block 2l + 1's
    cu_ld16(G + 64 * l + 48, w.e + 4);
    w.h[0] = __ldg((const uint32_t *)(G + 2048 + 4 * l));   // their d (low, high half)
}

// The loader of type T for gq_body (bl: the lane's block of the step).
template <int T> __device__ __forceinline__ void gq_ld(const uint8_t *B, int p, int bl, gq_part &w)
{
    if constexpr (T == CU_TYPE_Q6R)
        gq_load_r6(B, p, bl, w);
    else if constexpr (T == CU_TYPE_Q8R)
        gq_load_r8(B, p, bl, w);
    else
        gq_load<T>(B, p, bl & 1, w);
}

// The regrouped copy of type T: byte o of group g of dst from the group's
// GGUF blocks in src (a grid-stride loop over bytes; made once a weight).
template <int T> __global__ void rg_kernel(const uint8_t *src, uint8_t *dst, uint64_t groups)
{
    constexpr int G = T == SI_TYPE_Q6_K ? 1680 : 2176;
    const uint64_t n = groups * G;
    cu_pdl_enter();   // (src may be a launch's output, in the tests)
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t g = i / G;
        const int o = (int)(i - g * G);
        int at;
        if constexpr (T == SI_TYPE_Q6_K) {
            const int bl = o < 1536 ? o / 192 : o < 1664 ? (o - 1536) / 16 : (o - 1664) / 2;
            at = 210 * bl + (o < 1536 ? o % 192 : o < 1664 ? 192 + (o - 1536) % 16 : 208 + (o - 1664) % 2);
        } else {
            at = o < 2048 ? 34 * (o / 32) + 2 + o % 32 : 34 * ((o - 2048) / 2) + (o - 2048) % 2;
        }
        dst[i] = src[g * G + at];
    }
}

__device__ __forceinline__ float gq_h2f(uint32_t v) { return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu))); }

// Q4_K/Q5_K: the 6-bit scales (sc) and mins (mn) of sub-blocks 2g, 2g+1
// from the header's scale words a (bytes 0-3), b (4-7), c (8-11): bytes j
// of a & 63 and b & 63 for j < 4; for j >= 4 the low/high nibble of byte
// j of c with the top two bits of byte j - 4 of a (scale) or b (min).
__device__ __forceinline__ void gq_scales_k4(uint32_t a, uint32_t b, uint32_t c, int g, int &sc0, int &sc1, int &m0,
                                             int &m1)
{
    const uint32_t sc = g < 2 ? a & 0x3F3F3F3Fu : (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t mn = g < 2 ? b & 0x3F3F3F3Fu : ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    const unsigned s = 16u * (unsigned)(g & 1);
    sc0 = (int)((sc >> s) & 0xffu);
    sc1 = (int)((sc >> (s + 8)) & 0xffu);
    m0 = (int)((mn >> s) & 0xffu);
    m1 = (int)((mn >> (s + 8)) & 0xffu);
}

// 16 bytes of x at byte e (a multiple of 16): from global memory, or
// (XS) from the block's copy in shared memory, whose 16-byte unit u sits in
// slot u ^ ((u >> 3) & 7).  Why the swizzle: a lane reads 64 consecutive
// bytes of x, so a warp's 16-byte loads land at a 64-byte stride and two
// lanes share each 128-byte line: 16 wavefronts a load, from L1 or from
// unswizzled shared memory alike (at one row a warp, x's bytes are 1.8x the
// weights': the L1 was the limit, not the HBM).  XORing the unit's column
// in its line with the line's index spreads the 32 lanes over all 8
// columns, 4 each: 4 wavefronts, the least for 512 bytes, for the K-quant
// parts (units 4L + i) and Q6_K's (units 16b + 8h + k + 2j) alike.
__device__ __forceinline__ int gq_swz(int u) { return u ^ ((u >> 3) & 7); }

template <bool XS> __device__ __forceinline__ void gq_x16(const int8_t *xq, const uint4 *xsm, int e, uint32_t v[4])
{
    if (XS) {
        const uint4 r = xsm[gq_swz(e >> 4)];
        v[0] = r.x;
        v[1] = r.y;
        v[2] = r.z;
        v[3] = r.w;
    } else {
        cu_ld16(xq + e, v);
    }
}

// acc += the lane's part of block b (index in the row) against x.
// acc += a lane's two Q8_0 blocks against x at element e: qa and qb the
// qs words of blocks 2l and 2l + 1, d0 and d1 their d (low 16 bits).
// gs_kernel's and the regrouped copy's (CU_TYPE_Q8R) arithmetic, so one
// set of bits.
template <bool XS>
__device__ __forceinline__ float q8_pair_dot(const uint32_t qa[8], const uint32_t qb[8], uint32_t d0, uint32_t d1,
                                             int e, const int8_t *xq, const uint4 *xsm, const float *xd, float acc)
{
    uint32_t xa[8], xb[8];
    gq_x16<XS>(xq, xsm, e, xa);
    gq_x16<XS>(xq, xsm, e + 16, xa + 4);
    gq_x16<XS>(xq, xsm, e + 32, xb);
    gq_x16<XS>(xq, xsm, e + 48, xb + 4);
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        s0 = __dp4a((int)qa[k], (int)xa[k], s0);
        s1 = __dp4a((int)qb[k], (int)xb[k], s1);
    }
    const float2 dx = __ldg((const float2 *)(xd + e / 32));
    acc += (dx.x * gq_h2f(d0)) * (float)s0 + (dx.y * gq_h2f(d1)) * (float)s1;
    return acc;
}

// SD: x's scales and sums (xd, xs) are in shared memory (cuda_pmoe.cuh's
// SwiGLU copy), read with plain loads (__ldg is for global memory only).
template <bool SD, class V> __device__ __forceinline__ V gq_ldx(const float *p)
{
    return SD ? *(const V *)p : __ldg((const V *)p);
}

template <int T, bool XS, bool SD = false>
__device__ __forceinline__ float gq_dot(const gq_part &w, int b, int p, const int8_t *xq, const uint4 *xsm,
                                        const float *xd, const float *xs, float acc)
{
    if constexpr (T == CU_TYPE_Q8R)   // blocks 2l, 2l + 1 of lane l = 4 (b % 8) + p
        return q8_pair_dot<XS>(w.q, w.e, w.h[0], w.h[0] >> 16, 256 * b + 64 * p, xq, xsm, xd, acc);
    if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int e = 256 * b + 64 * p, xb = 8 * b + 2 * p;
        uint32_t xl[8], xh[8];
        gq_x16<XS>(xq, xsm, e, xl);
        gq_x16<XS>(xq, xsm, e + 16, xl + 4);
        gq_x16<XS>(xq, xsm, e + 32, xh);
        gq_x16<XS>(xq, xsm, e + 48, xh + 4);
        const float2 dx = gq_ldx<SD, float2>(xd + xb), sx = gq_ldx<SD, float2>(xs + xb);
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uint32_t lo = w.q[k] & 0x0F0F0F0Fu, hi = (w.q[k] >> 4) & 0x0F0F0F0Fu;
            if (T == SI_TYPE_Q5_K) {
                lo |= ((w.e[k] >> (2 * p)) & 0x01010101u) << 4;
                hi |= ((w.e[k] >> (2 * p + 1)) & 0x01010101u) << 4;
            }
            s0 = __dp4a((int)lo, (int)xl[k], s0);
            s1 = __dp4a((int)hi, (int)xh[k], s1);
        }
        int sc0, sc1, m0, m1;
        gq_scales_k4(w.h[1], w.h[2], w.h[3], p, sc0, sc1, m0, m1);
        const float d = gq_h2f(w.h[0]), dmin = gq_h2f(w.h[0] >> 16);
        acc += dx.x * (d * (float)sc0) * (float)s0 + dx.y * (d * (float)sc1) * (float)s1;
        acc -= (dmin * (float)m0) * sx.x + (dmin * (float)m1) * sx.y;
        return acc;
    } else {
        const int h = p >> 1, k = p & 1, e = 256 * b + 128 * h + 16 * k;
        uint32_t x[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            gq_x16<XS>(xq, xsm, e + 32 * j, x[j]);
        const float4 dx = gq_ldx<SD, float4>(xd + 8 * b + 4 * h);
        int s[4] = { 0, 0, 0, 0 }, sx[4] = { 0, 0, 0, 0 };
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t l0 = w.q[i], l1 = w.q[4 + i], qh = w.h[i];
            const uint32_t a[4] = {
                (l0 & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u),
                (l1 & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u),
                ((l0 >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u),
                ((l1 >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u),
            };
#pragma unroll
            for (int j = 0; j < 4; j++) {
                s[j] = __dp4a((int)a[j], (int)x[j][i], s[j]);
                sx[j] = __dp4a(0x01010101, (int)x[j][i], sx[j]);
            }
        }
        // scales 8h + k + 2j: bytes k, k + 2 of e[0], k, k + 2 of e[1]
        const unsigned o = 8u * (unsigned)k;
        const float d = gq_h2f(w.e[2]);
        const float c0 = (float)(int8_t)(w.e[0] >> o), c1 = (float)(int8_t)(w.e[0] >> (o + 16));
        const float c2 = (float)(int8_t)(w.e[1] >> o), c3 = (float)(int8_t)(w.e[1] >> (o + 16));
        acc += dx.x * (d * c0) * (float)(s[0] - 32 * sx[0]) + dx.y * (d * c1) * (float)(s[1] - 32 * sx[1]) +
               dx.z * (d * c2) * (float)(s[2] - 32 * sx[2]) + dx.w * (d * c3) * (float)(s[3] - 32 * sx[3]);
        return acc;
    }
}

// x's in bytes into the block's swizzled copy (gq_x16).  Every thread of
// the block calls it: rows past the end are computed on the last row.
__device__ __forceinline__ void gq_fill_x(uint4 *xsm, const int8_t *xq, int64_t in)
{
    const int nu = (int)(in >> 4);
    for (int u = (int)threadIdx.x; u < nu; u += (int)blockDim.x)
        xsm[gq_swz(u)] = __ldg((const uint4 *)xq + u);
    __syncthreads();   // x's copy whole before any lane reads it
}

// x's in bytes of each of nt columns (column c at xq + c * in) into the
// block's copy: column c's units from xsm + c * in / 16, each column
// swizzled as gq_fill_x's.  Every thread of the block calls it.
__device__ __forceinline__ void gq_fill_xn(uint4 *xsm, const int8_t *xq, int64_t in, int nt)
{
    const int nu = (int)(in >> 4);
    for (int i = (int)threadIdx.x; i < nt * nu; i += (int)blockDim.x) {
        const int c = i / nu, u = i - c * nu;
        xsm[c * nu + gq_swz(u)] = __ldg((const uint4 *)xq + i);
    }
    __syncthreads();   // x's copy whole before any lane reads it
}

// ---- knob norm_tail: the product's ADD + RMSNORM + int8 copy (mm.norm,
// cuda_internal.h cu_norm_tail) by the launch's last block.  A decode
// norm on its own (rms2_kernel) is a launch of ~5 us alone on the H200 for
// 16 KB of work, one of ~65 a 9b step; here it follows the product's last
// rows without a launch boundary between.  Every block counts itself once
// its rows are stored (made visible device-wide by __threadfence first, as
// rr_kernel does); the block that takes the last ticket reads the rows
// back from the L2 and runs rms2_kernel's arithmetic on them (cuda_rms.cuh,
// the same bits): chunk c of 16 elements on thread c, c + blockDim, ...
// (blockDim a multiple of 32, so a warp's 32 chunks are rms2_kernel's
// warp's).  At a chunk a thread (the defaults) the sum r = y + b stays in
// registers across the barrier; with more chunks than threads it is
// stored and read back (the thread's own stores) for the output pass, so
// that a thread holds one chunk at a time.  The int8 copy goes to slot 0,
// which x's copy may occupy: every block has finished with x by the time
// the last one counts.  The count is put back to 0 for the next launch (after its
// programmatic-launch wait, so after this grid completed).  Measured on
// the H200 it does not pay (cuda_sm120.c, norm_tail: off by default): the
// tail made the 9b's 4096-row product 5.4 us longer alone (ncu), about a
// norm kernel's whole time, and behind the product, where the norm
// kernel's launch overlapped it.
// The tail's other operands asked of the L2 early (before the
// programmatic-launch wait; the L2 is where global memory is coherent, so
// a line fetched before its last write is still current): the norm's
// weight and the residual rows are otherwise HBM round trips on the path
// of the tail, after the last block counts.
__device__ __forceinline__ void gq_norm_prefetch(const cu_mm &mm)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    const cu_norm_tail &nt = mm.norm;
    cu_prefetch_l2(nt.w, (uint64_t)mm.rows * 4);
    if (nt.f.b.p != NULL)
        for (int64_t c = 0; c < mm.ncols; c++)
            cu_prefetch_l2(nt.f.b.p + c * nt.f.b.nb1, (uint64_t)mm.rows * 4);
}

__device__ __forceinline__ void gq_norm_tail(const cu_mm &mm)
{
    __shared__ unsigned ticket;
    __shared__ double red[2][8];
    const cu_norm_tail &nt = mm.norm;
    __threadfence();   // this block's rows visible before it counts
    __syncthreads();
    if (threadIdx.x == 0)
        ticket = atomicAdd(nt.ctr, 1u);
    __syncthreads();
    if (ticket != gridDim.x * gridDim.y - 1)
        return;
    __threadfence();
    const int t = (int)threadIdx.x, nthr = (int)blockDim.x, nch = (int)(mm.rows / RMS2_E);
    const cu_norm_fuse &f = nt.f;
    // (row c of each view at p + c * nb1: si_cu_gemvq_norm_ok checks ne1 >= ncols)
    for (int64_t c = 0; c < mm.ncols; c++) {
        const int par = (int)(c & 1);
        const float *a = mm.y + c * mm.y_stride;
        float *r = f.b.p != NULL ? (float *)(f.r.p + c * f.r.nb1) : NULL;
        const float *b = f.b.p != NULL ? (const float *)(f.b.p + c * f.b.nb1) : NULL;
        float *d = (float *)(nt.d.p + c * nt.d.nb1);
        int8_t *q = f.q != NULL ? f.q + c * mm.rows : NULL;
        float *qd = f.q != NULL ? f.qd + c * (mm.rows / 32) : NULL, *qs = f.q != NULL ? f.qs + c * (mm.rows / 32) : NULL;
        if (nch <= nthr) {
            // a chunk a thread at most (the defaults: 256 threads for the
            // 9b's 4096, 128 for the 35b-a3b's 2048): the sum stays in
            // registers across the barrier (the weight is read after it,
            // from the L2: held across, it took the kernel to 100
            // registers, two blocks of 256 an SM)
            float xv[RMS2_E];
            if (t < nch) {
                rms2_in<true>(a + t * RMS2_E, b ? b + t * RMS2_E : NULL, r ? r + t * RMS2_E : NULL, xv);
                const double sw = rms2_ss(xv);
                if ((t & 31) == 0)
                    red[par][t >> 5] = sw;
            }
            __syncthreads();   // (red[par] is next written two columns on, after the next barrier)
            if (t < nch) {
                float wv[RMS2_E];
                rms2_ld(nt.w + t * RMS2_E, wv);
                rms2_out(xv, wv, rms2_scale(red[par], mm.rows, nt.eps), d + t * RMS2_E, t, q, qd, qs);
            }
            continue;
        }
#pragma unroll 1
        for (int ch = t; ch < nch; ch += nthr) {
            float xv[RMS2_E];
            rms2_in<true>(a + ch * RMS2_E, b ? b + ch * RMS2_E : NULL, r ? r + ch * RMS2_E : NULL, xv);
            const double sw = rms2_ss(xv);
            if ((t & 31) == 0)
                red[par][ch >> 5] = sw;
        }
        __syncthreads();   // (as above)
        const float scale = rms2_scale(red[par], mm.rows, nt.eps);
#pragma unroll 1
        for (int ch = t; ch < nch; ch += nthr) {
            float xv[RMS2_E], wv[RMS2_E];
            if (r != NULL)
                rms2_ld(r + ch * RMS2_E, xv);   // (this thread's own stores)
            else
                rms2_ld<true>(a + ch * RMS2_E, xv);
            rms2_ld(nt.w + ch * RMS2_E, wv);
            rms2_out(xv, wv, scale, d + ch * RMS2_E, ch, q, qd, qs);
        }
    }
    if (t == 0)
        *nt.ctr = 0;
}

// ---- knob norm_tail = defer: the block's own 32 rows of the ADD, the
// norm's weight and the int8 copy (cuda_internal.h cu_xr).  y0: the
// block's first row (a multiple of 32); y[]: its 32 product sums.  Warp
// 0, lane l row y0 + l: x = y + b (rms2_in's sum) stored to r, t = x * w
// stored to d (the output before the scale nobody knows yet), t's block
// of 32 of the copy (cu_q8_block32: quant_x's arithmetic; scaling t by r
// later gives the same int8 values up to rounding), and the sum of x^2
// over the 32 rows in double (the butterfly's order) to part[y0 / 32].
// No count and no last block: each block's work needs only its rows.
__device__ __forceinline__ void gq_norm_defer(const cu_mm &mm, const float *y, int64_t y0)
{
    __syncthreads();   // the block's 32 sums in y[]
    if (threadIdx.x >= 32)
        return;
    const int lane = (int)threadIdx.x;
    const cu_norm_tail &nt = mm.norm;
    const int64_t row = y0 + lane;
    float x = y[lane];
    if (nt.f.b.p != NULL) {
        x = x + ((const float *)nt.f.b.p)[row];
        ((float *)nt.f.r.p)[row] = x;
    }
    const float t = __fmul_rn(x, nt.w[row]);
    ((float *)nt.d.p)[row] = t;
    cu_q8_block32(t, lane, nt.f.q + y0, nt.f.qd + y0 / 32, nt.f.qs + y0 / 32);
    const double ss = cu_warp_sumd((double)x * (double)x);
    if (lane == 0)
        nt.part[y0 / 32] = ss;
}

// Rows past the end are computed on the last row and not stored, so every
// lane takes part in the shuffles.
// XS: x comes into shared memory first (gq_x16; dynamic, nt * mm.in bytes).
// NT > 1: decode of up to NT sequences (mm.ncols <= NT, x_div 1): each
// part's weights, loaded and unpacked once, are dotted with every column's
// x; v1 took these products before, its lanes reading each column's x
// from global memory (16 L1 wavefronts a load, NT times a unit).
// NM: 0 a plain product, 1 with the norm tail (gq_norm_tail), 2 the
// deferred norm's product (gq_norm_defer: R 1, NT 1, 32 warps a block).
// XR (XS, NT 1): x's copy is a deferred norm's, the sums times its scale
// (mm.xr), its parts staged after x's copy in shared memory with it
// (cu_xr_stage) and summed per warp at the end; its own instantiations,
// so the plain forms keep their registers.
template <int T, int R, bool XS, int NT, int NM, bool XR = false>
__device__ __forceinline__ void gq_body(const cu_mm &mm, const int8_t *xq, const float *xd, const float *xs)
{
    extern __shared__ __align__(16) uint4 gq_xsm[];
    __shared__ float gd_y[NM == 2 ? 32 : 1];   // (NM 2: the block's 32 sums)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane & 3, bl = lane >> 2;
    const int nw = (int)(blockDim.x >> 5);   // GQ_WARPS or 8 (gq_warps); 32 at NM 2
    const gq_prod g = gq_find(mm, nw * R);
    const uint8_t *wbase = g.w;
    const int rows = g.rows;
    const uint32_t rb = g.rb;
    float *y = g.y;
    const int r0 = (g.bx * nw + warp) * R, steps = (int)(mm.in / 2048), nb = (int)(mm.in / 32);
    const int nt = NT == 1 ? 1 : (int)mm.ncols;
    const uint8_t *wr[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        wr[i] = wbase + (size_t)(r0 + i < rows ? r0 + i : rows - 1) * rb + (size_t)bl * gq_traits<T>::bytes;
    gq_part cur[R], nxt[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        gq_ld<T>(wr[i], p, bl, cur[i]);
    // (no L2 prefetch of the rest of the rows, knob gemv_prefetch: it cost
    // the 9b's one-column decode 3-5% on the H200, these loads pipelined;
    // on the H100 a sliding window of L2 bulk prefetches 2 / 4 units ahead
    // in gu_kernel cost the 9b 1.5% / 5% at bs 1.  Nor one wave of blocks
    // serving a multi-wave product's blocks in turn, the next one's weights
    // in flight (stop 42's gemv_stride, reverted): H100 ctx 4096 bs 1, graph
    // device time 9b 2,592 vs 2,552 us, 35b-a3b 2,670 vs 2,643, tok/s even:
    // under programmatic launch the next wave's blocks start as the first
    // retire, so the waves were not the gap that ncu's lone kernel showed;
    // nor 3 blocks an SM for the 35b-a3b's Q8R rows two a warp (launch
    // bounds, <= 80 registers, 2 waves of its 772-block GDN qkv/z product
    // instead of 3): graph device time 2,690 vs 2,634-2,644 us, bs 1
    // 361.4 vs 367.2 tok/s.)
    if (NM != 0)
        gq_norm_prefetch(mm);
    cu_pdl_enter();   // (x comes from the kernel before; the weights did not)
    double *xr_sp = (double *)(gq_xsm + (mm.in >> 4));   // (XR: after x's copy)
    if (XR)
        cu_xr_stage(mm.xr, xr_sp);
    if (XS) {
        if (NT == 1)
            gq_fill_x(gq_xsm, xq, mm.in);
        else
            gq_fill_xn(gq_xsm, xq, mm.in, nt);
    }
    float acc[R][NT];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int c = 0; c < NT; c++)
            acc[i][c] = 0.0f;
    for (int st = 0; st < steps; st++) {
        if (st + 1 < steps) {
#pragma unroll
            for (int i = 0; i < R; i++)
                gq_ld<T>(wr[i] + (size_t)(st + 1) * 8 * gq_traits<T>::bytes, p, bl, nxt[i]);
        }
#pragma unroll
        for (int i = 0; i < R; i++) {
#pragma unroll
            for (int c = 0; c < NT; c++)
                if (c < nt)
                    acc[i][c] = gq_dot<T, XS>(cur[i], 8 * st + bl, p, xq + (size_t)c * mm.in,
                                              gq_xsm + (size_t)c * (mm.in >> 4), xd + (size_t)c * nb,
                                              xs + (size_t)c * nb, acc[i][c]);
            cur[i] = nxt[i];
        }
    }
    const float xr = XR ? cu_xr_scale(mm.xr, xr_sp) : 1.0f;   // (staged: gq_fill_x's barrier passed)
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int c = 0; c < NT; c++) {
            if (c >= nt)
                break;
            float s = cu_warp_sum(acc[i][c]);
            if (XR)
                s = __fmul_rn(s, xr);
            if (lane == 0 && r0 + i < rows) {
                y[(size_t)c * g.ys + r0 + i] = s;
                if (NM == 2)
                    gd_y[warp] = s;
            }
        }
    if (NM == 1)
        gq_norm_tail(mm);
    if (NM == 2)
        gq_norm_defer(mm, gd_y, g.bx * 32);
}

template <int T, int R, bool XS, int NT, bool XR = false>
__global__ void __launch_bounds__(32 * GQ_WARPS_MAX) gq_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                                const float *xs)
{
    gq_body<T, R, XS, NT, 0, XR>(mm, xq, xd, xs);
}

// With the norm tail (knob norm_tail).  One row a warp: at most 64
// registers, so that 4 blocks of 8 warps still fit an SM, the 9b's 4096
// rows one wave of 512 blocks (the tail alone took it to 76; the bound on
// gq_kernel itself changed the plain forms' registers too).
template <int T, int R, bool XS, int NT>
__global__ void __launch_bounds__(32 * GQ_WARPS_MAX, R == 1 ? 4 : 1) gqn_kernel(cu_mm mm, const int8_t *xq,
                                                                              const float *xd, const float *xs)
{
    gq_body<T, R, XS, NT, 1>(mm, xq, xd, xs);
}

// With the deferred norm (knob norm_tail = defer): 32 warps a block, a
// row each, so that a block owns a block of 32 of the int8 copy; at most
// 64 registers (the plain form's 4 blocks of 8 warps an SM, as one block
// of 32 warps), the 9b's 4096 rows 128 blocks.
template <int T>
__global__ void __launch_bounds__(1024, 1) gqd_kernel(cu_mm mm, const int8_t *xq, const float *xd, const float *xs)
{
    gq_body<T, 1, true, 1, 2>(mm, xq, xd, xs);
}

// The SwiGLU of one block of 32 (gate and up written by other blocks or
// launches: read from the L2) and its int8 copy, by the calling warp:
// swiglu_q_kernel's arithmetic (the SWIGLU tail of knob moe_dec_fuse
// below; gu_kernel's shared rows the same, stored in place too).
__device__ __forceinline__ void gqe_swiglu32(const float *gate, const float *up, int lane, int8_t *q, float *qd,
                                             float *qs)
{
    const float v = __fmul_rn(cu_silu(__ldcg(gate + lane)), __ldcg(up + lane));
    cu_q8_block32(v, lane, q, qd, qs);
}

// ---- knob gemv_glu: the ffn's gate and up products with their SwiGLU ----
// Decode's dense ffn ran gate/up (one launch of both, cu_mm.more[0] the
// up rows), then swiglu_q_kernel (silu(gate) * up and its int8 copy for
// the down projection), a launch of ~4 us alone on the H200 for 48 KB of
// work, one in each of the 9b's 32 layers.  Here block (b, j) owns outputs
// 32b .. 32b + 31 of column j: warp w the gate and up rows of indices
// 32b + IPW w .. + IPW - 1 (IPW = 32 / W; both rows of one index in flight
// together, the indices one after the other with the next unit's weights
// loaded while the current one is multiplied).  The block's 32 gate and
// up sums meet in shared memory and warp 0 makes their SwiGLU and its
// block of 32 of the int8 copy (swiglu_q_kernel's arithmetic, so its
// bits): no count of finished blocks and no tail after
// the grid, the block's own 32 values are all it needs.  Each row's sum
// is gq_kernel's and gqe_kernel's (the same gq_dot steps in the same
// order, the same 32-lane sum), so the gate and up outputs, the SwiGLU and
// the copy are the unfused launches' bits.  x is read into shared memory
// as their XS forms do (in <= GQ_XS_MAX).
// The MOE's routed experts (mm.expert): column j is expert expert[j] on x
// column j / x_div, as gqe_kernel; picks and the first unit's weights
// before the programmatic-launch wait where mm.expert_early says the
// router completed before this launch started.  The rows blockIdx.y >=
// ncols are the shared expert's (gl.sh: its gate/up, made by the launch
// before): each such block's warp 0 makes one block of 32 of its SwiGLU
// (in place, into the gate half) and of the copy, rows ncols.. of it.
// W = 8 warps for the dense 9b (4096 wide: two steps a row, 8 units a
// warp); 16 for rows of one step (the 35b-a3b's experts), so that a
// warp's two indices are in flight at once.
// Three blocks an SM at W = 8 (<= 85 registers; Q4_K 70, 95 unbounded):
// the 9b's 384 blocks one wave of 396 (two an SM made a second wave of
// 120).  Q5_K stays at two (bounded to three it spilled).
// XR: x's copy a deferred norm's (mm.xr, one dense column), as gq_body's.
template <int T, int W, bool XR = false>
__global__ void __launch_bounds__(32 * W, W == 16 ? 1 : T == SI_TYPE_Q5_K ? 2 : 3)
    gu_kernel(cu_mm mm, const int8_t *xq, const float *xd, const float *xs, cu_glu gl)
{
    constexpr int IPW = 32 / W;   // indices a warp
    extern __shared__ __align__(16) uint4 gq_xsm[];
    __shared__ float sg[32], su[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane & 3, bl = lane >> 2;
    const int64_t b = blockIdx.x, j = blockIdx.y, F = mm.rows, nbf = F / 32;
    if (j >= mm.ncols) {   // (the shared expert's SwiGLU, complete inputs)
        cu_pdl_enter();
        const int64_t t = j - mm.ncols;
        float *gs = gl.sh + t * gl.sh_stride + 32 * b;
        if (warp == 0) {
            const float v = __fmul_rn(cu_silu(__ldcg(gs + lane)), __ldcg(gs + F + lane));
            gs[lane] = v;   // (in place, as moe_swiglu_q leaves it)
            cu_q8_block32(v, lane, gl.q + j * F + 32 * b, gl.qd + j * nbf + b, gl.qs + j * nbf + b);
        }
        return;
    }
    const int j0 = (int)b * 32 + warp * IPW, steps = (int)(mm.in / 2048), units = IPW * steps;
    const int64_t c = j / mm.x_div, nbx = mm.in / 32;
    const uint32_t SB = 8 * gq_traits<T>::bytes;   // bytes of a step of a row
    const bool early = mm.expert == NULL || mm.expert_early;
    if (!early)
        cu_pdl_enter();   // (the picks come from the kernel before)
    const size_t ex = mm.expert != NULL ? (size_t)mm.expert[j] * mm.expert_bytes : 0;
    const uint8_t *wg = mm.w + ex + (size_t)j0 * mm.row_bytes + (size_t)bl * gq_traits<T>::bytes;
    const uint8_t *wu = mm.more[0].w + ex + (size_t)j0 * mm.more[0].row_bytes + (size_t)bl * gq_traits<T>::bytes;
    gq_part cur[2], nxt[2];
    gq_load<T>(wg, p, bl & 1, cur[0]);
    gq_load<T>(wu, p, bl & 1, cur[1]);
    if (early)
        cu_pdl_enter();   // (x comes from the kernel before; the weights did not)
    // (x the copy of a deferred norm's output, one column: its parts
    // staged with x, summed by warp 0 at the end)
    double *xr_sp = (double *)(gq_xsm + (mm.in >> 4));
    if (XR)
        cu_xr_stage(mm.xr, xr_sp);
    gq_fill_x(gq_xsm, xq + c * mm.in, mm.in);
    const float *xdc = xd + c * nbx, *xsc = xs + c * nbx;
    float *yg = mm.y + j * mm.y_stride, *yu = mm.more[0].y + j * mm.more[0].y_stride;
    float ag = 0.0f, au = 0.0f;
    for (int k = 0; k < units; k++) {
        const int i = k / steps, st = k - i * steps;
        if (k + 1 < units) {
            const int i1 = (k + 1) / steps, st1 = k + 1 - i1 * steps;
            gq_load<T>(wg + (size_t)i1 * mm.row_bytes + (size_t)st1 * SB, p, bl & 1, nxt[0]);
            gq_load<T>(wu + (size_t)i1 * mm.more[0].row_bytes + (size_t)st1 * SB, p, bl & 1, nxt[1]);
        }
        ag = gq_dot<T, true>(cur[0], 8 * st + bl, p, NULL, gq_xsm, xdc, xsc, ag);
        au = gq_dot<T, true>(cur[1], 8 * st + bl, p, NULL, gq_xsm, xdc, xsc, au);
        cur[0] = nxt[0];
        cur[1] = nxt[1];
        if (st == steps - 1) {
            const float g = cu_warp_sum(ag), u = cu_warp_sum(au);
            if (lane == 0) {
                sg[warp * IPW + i] = g;
                su[warp * IPW + i] = u;
                if (!XR) {   // (XR: scaled, by warp 0 below)
                    yg[j0 + i] = g;
                    yu[j0 + i] = u;
                }
            }
            ag = au = 0.0f;
        }
    }
    __syncthreads();   // the block's 32 gate and up sums in sg / su
    if (warp == 0) {
        float g = sg[lane], u = su[lane];
        if (XR) {
            const float xr = cu_xr_scale(mm.xr, xr_sp);
            g = __fmul_rn(g, xr);
            u = __fmul_rn(u, xr);
            yg[32 * b + lane] = g;
            yu[32 * b + lane] = u;
        }
        const float v = __fmul_rn(cu_silu(g), u);
        gl.d[j * gl.d_stride + 32 * b + lane] = v;
        cu_q8_block32(v, lane, gl.q + j * F + 32 * b, gl.qd + j * nbf + b, gl.qs + j * nbf + b);
    }
}

// ---- Q8_0: weights staged through shared memory (knob gemv_staged) -----
// A lane takes two 34-byte blocks of a 2048-weight step (bytes 68 l ..
// 68 l + 67 of the step's 2176), 4-byte aligned but at a 68-byte stride:
// straight from global memory each 4-byte load of the warp would touch 17
// lines, and 16-byte loads do not align.  So the warp copies its units
// ((row, step) pairs, row by row) into a ring of P = min(GS_NB, units)
// buffers of its own with 16-byte cp.async, coalesced: the first P units
// go out before the programmatic-launch wait, and each buffer is refilled
// with the unit P ahead as soon as the warp is done with it (bytes in
// flight without registers: the last session's lesson).  A lane reads
// its 17 words from there: word 17 l + j, a bank per lane.  A ring no
// larger than the warp's units keeps the shared memory a block small
// (more resident warps) where rows are a step or two.
#define GS_UNIT 2176   // bytes of a step: 64 Q8_0 blocks, 2048 weights
#define GS_NB 4        // most unit buffers a warp
// x and the rings under the default 48 KB of a block: in <= 12288
#define GS_IN_MAX 12288
__host__ __device__ __forceinline__ int gs_ring(int units) { return units < GS_NB ? units : GS_NB; }
// (nt columns of x, then the rings)
#define GS_SMEM(in, R, nt) ((size_t)(in) * (nt) + (size_t)GQ_WARPS * gs_ring((R) * (int)((in) / 2048)) * GS_UNIT)

// This lane's copies of the oldest unit in flight landed: of the groups
// committed, the nb - 1 after it may still fly (nb is warp-uniform).
__device__ __forceinline__ void gs_wait(int nb)
{
    switch (nb) {
    case 1: cp_async_wait_group<0>(); break;
    case 2: cp_async_wait_group<1>(); break;
    case 3: cp_async_wait_group<2>(); break;
    default: cp_async_wait_group<GS_NB - 1>(); break;
    }
}

// Unit k ((row, step) pair k of the warp, UNIT bytes a step) into ring
// buffer k % nb, or an empty group past the last unit.
template <int UNIT>
__device__ __forceinline__ void gs_issue(uint8_t *ring, int nb, const gq_prod &g, int r0, int steps, int units,
                                         int k, int lane)
{
    if (k < units) {
        const int i = k / steps, st = k - i * steps, row = r0 + i < g.rows ? r0 + i : g.rows - 1;
        const uint8_t *src = g.w + (size_t)row * g.rb + (size_t)st * UNIT;
        uint8_t *dst = ring + (k % nb) * UNIT;
        for (int c = lane; c < UNIT / 16; c += 32)
            cp_async16(dst + 16 * c, src + 16 * c);
    }
    cp_async_commit();   // (empty past the last unit: the group count stays uniform)
}

// The lane's 17 words of unit u (its two blocks).
__device__ __forceinline__ void gs_words(const uint8_t *u, int lane, uint32_t w[17])
{
    const uint32_t *uw = (const uint32_t *)(u + 68 * lane);
#pragma unroll
    for (int j = 0; j < 17; j++)
        w[j] = uw[j];
}

// acc += the lane's two blocks (words w, step st) against x.
__device__ __forceinline__ float gs_dot(const uint32_t w[17], int st, int lane, const uint4 *xsm, const float *xd,
                                        float acc)
{
    // block 2l: d in bytes 0-1, qs in 2..33; block 2l + 1: d in 34-35, qs
    // in 36..67 (words 9..16)
    uint32_t qa[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        qa[k] = __funnelshift_r(w[k], w[k + 1], 16);
    return q8_pair_dot<true>(qa, w + 9, w[0], w[8] >> 16, 2048 * st + 64 * lane, NULL, xsm, xd, acc);
}

// NT > 1: up to NT columns (mm.ncols, x_div 1), as gq_kernel's: each
// unit's words read once for all of them.
template <int R, int NT, bool NORM = false>
__device__ __forceinline__ void gs_body(const cu_mm &mm, const int8_t *xq, const float *xd)
{
    extern __shared__ __align__(16) uint4 gq_xsm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const gq_prod g = gq_find(mm, GQ_WARPS * R);
    const int r0 = (g.bx * GQ_WARPS + warp) * R, steps = (int)(mm.in / 2048), units = R * steps;
    const int nb = gs_ring(units), nt = NT == 1 ? 1 : (int)mm.ncols, nxb = (int)(mm.in / 32);
    // [x: nt * in bytes][the warps' rings]
    uint8_t *ring = (uint8_t *)gq_xsm + (size_t)nt * mm.in + (size_t)warp * nb * GS_UNIT;
    for (int k = 0; k < nb; k++)
        gs_issue<GS_UNIT>(ring, nb, g, r0, steps, units, k, lane);
    if (NORM)
        gq_norm_prefetch(mm);
    cu_pdl_enter();   // (x comes from the kernel before; the weights did not)
    if (NT == 1)
        gq_fill_x(gq_xsm, xq, mm.in);
    else
        gq_fill_xn(gq_xsm, xq, mm.in, nt);
    float acc[NT];
#pragma unroll
    for (int c = 0; c < NT; c++)
        acc[c] = 0.0f;
    for (int k = 0; k < units; k++) {
        gs_wait(nb);
        __syncwarp();   // everyone's copies of unit k landed
        const int i = k / steps, st = k - i * steps;
        uint32_t w[17];
        gs_words(ring + (k % nb) * GS_UNIT, lane, w);
#pragma unroll
        for (int c = 0; c < NT; c++)
            if (c < nt)
                acc[c] = gs_dot(w, st, lane, gq_xsm + (size_t)c * (mm.in >> 4), xd + (size_t)c * nxb, acc[c]);
        if (st == steps - 1) {
#pragma unroll
            for (int c = 0; c < NT; c++) {
                if (c >= nt)
                    break;
                const float s = cu_warp_sum(acc[c]);
                if (lane == 0 && r0 + i < g.rows)
                    g.y[(size_t)c * g.ys + r0 + i] = s;
                acc[c] = 0.0f;
            }
        }
        __syncwarp();   // every lane is done with unit k's buffer
        gs_issue<GS_UNIT>(ring, nb, g, r0, steps, units, k + nb, lane);   // into it
    }
    cp_async_wait_group<0>();   // (only empty groups are left)
    if (NORM)
        gq_norm_tail(mm);
}

template <int R, int NT, bool NORM = false>
__global__ void __launch_bounds__(32 * GQ_WARPS) gs_kernel(cu_mm mm, const int8_t *xq, const float *xd)
{
    gs_body<R, NT, NORM>(mm, xq, xd);
}

// ---- Q6_K: weights staged through shared memory (knob gemv_staged_q6) ---
// gq_kernel's Q6_K part takes 19 4-byte loads and funnel shifts per lane
// and step (a 210-byte block is 2-byte aligned), and at steady state it
// streamed 2,664 GB/s on the H200 where Q4_K's 16-byte loads reach 3,720
// and the staged Q8_0 kernel 3,933 (bench_gemv "one ... steady").  A step
// of 8 blocks is 1680 bytes, 16-byte aligned wherever the row is; so, as
// gs_kernel does for Q8_0, each warp copies its (row, step) units into a
// ring of its own with coalesced 16-byte cp.async (the first ones before
// the programmatic-launch wait), and the lanes read their parts from there
// with gq_load's words and shifts.  Lane, part, step order and sums are
// gq_kernel's at the same R (one column, x in shared memory): the same
// bits.
#define G6_UNIT 1680   // bytes of a step: 8 Q6_K blocks, 2048 weights
#define G6_SMEM(in, R) ((size_t)(in) + (size_t)GQ_WARPS * gs_ring((R) * (int)((in) / 2048)) * G6_UNIT)

template <int R>
__global__ void __launch_bounds__(32 * GQ_WARPS) g6_kernel(cu_mm mm, const int8_t *xq, const float *xd)
{
    extern __shared__ __align__(16) uint4 gq_xsm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane & 3, bl = lane >> 2;
    const gq_prod g = gq_find(mm, GQ_WARPS * R);
    const int r0 = (g.bx * GQ_WARPS + warp) * R, steps = (int)(mm.in / 2048), units = R * steps;
    const int nb = gs_ring(units);
    uint8_t *ring = (uint8_t *)gq_xsm + (size_t)mm.in + (size_t)warp * nb * G6_UNIT;
    for (int k = 0; k < nb; k++)
        gs_issue<G6_UNIT>(ring, nb, g, r0, steps, units, k, lane);
    cu_pdl_enter();   // (x comes from the kernel before; the weights did not)
    gq_fill_x(gq_xsm, xq, mm.in);
    float acc = 0.0f;
    for (int k = 0; k < units; k++) {
        gs_wait(nb);
        __syncwarp();
        const int i = k / steps, st = k - i * steps;
        gq_part w;
        gq_load<SI_TYPE_Q6_K, true>(ring + (k % nb) * G6_UNIT + bl * gq_traits<SI_TYPE_Q6_K>::bytes, p, bl & 1, w);
        acc = gq_dot<SI_TYPE_Q6_K, true>(w, 8 * st + bl, p, NULL, gq_xsm, xd, NULL, acc);
        if (st == steps - 1) {
            const float s = cu_warp_sum(acc);
            if (lane == 0 && r0 + i < g.rows)
                g.y[r0 + i] = s;
            acc = 0.0f;
        }
        __syncwarp();   // every lane is done with unit k's buffer
        gs_issue<G6_UNIT>(ring, nb, g, r0, steps, units, k + nb, lane);
    }
    cp_async_wait_group<0>();
}

// ---- expert columns (knob gemv_quad_experts: the MOE's decode products)
// Column j of the launch (blockIdx.y) multiplies expert mm.expert[j]'s
// rows by x column j / x_div; y[j * y_stride + r].  A step is BS blocks
// of a row (8 where in % 2048 == 0; 2 for the 35b's 512-wide expert down:
// v1 ran it at ~0.8 TB/s, four lanes a 16-byte unit and a 64-bit index per
// unit), the lanes' parts as gq_kernel: lane l takes part l & 3 of block
// (l >> 2) % BS of row (l / 4BS), so a warp holds RPW = 8 / BS rows at
// once and R such sets (2: two steps of weights in flight per lane where
// a row is one step).  x (at most GQ_XS_MAX bytes) comes into the block's
// swizzled copy.  The picks come from the router's kernel: where that is
// the kernel just before (the routed gate/up without a shared expert),
// everything follows the programmatic-launch wait; where another launch
// sits between (mm.expert_early: moe_exec runs the shared expert's gate/up
// first), the router has completed by the time this kernel starts (the
// launch between let it start only after its own wait), so the picks and
// the first step's weights are read before the wait, while the kernel
// before drains.  Same terms as v1; the f32 order of a row's parts differs.
template <int T, int BS, int R>
__device__ __forceinline__ void gqe_body(const cu_mm &mm, const int8_t *xq, const float *xd, const float *xs)
{
    extern __shared__ __align__(16) uint4 gq_xsm[];
    constexpr int LPR = 4 * BS, RPW = 32 / LPR;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane & 3, bl = (lane % LPR) >> 2;
    const gq_prod g = gq_find(mm, GQ_WARPS * RPW * R);
    const int steps = (int)(mm.in / (256 * BS)), nb = (int)(mm.in / 32);
    const int rw = (g.bx * GQ_WARPS + warp) * RPW * R + lane / LPR;   // rows rw + RPW i
    const int64_t j = blockIdx.y, c = j / mm.x_div;
    if (!mm.expert_early)
        cu_pdl_enter();   // (the picks come from the kernel before)
    const uint8_t *wx = g.w + (size_t)mm.expert[j] * mm.expert_bytes;
    const uint8_t *wr[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const int r = rw + RPW * i;
        wr[i] = wx + (size_t)(r < g.rows ? r : g.rows - 1) * g.rb + (size_t)bl * gq_traits<T>::bytes;
    }
    gq_part cur[R], nxt[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        gq_load<T>(wr[i], p, bl & 1, cur[i]);
    if (mm.expert_early)
        cu_pdl_enter();   // (x comes from the kernel before)
    gq_fill_x(gq_xsm, xq + c * mm.in, mm.in);
    const float *xdc = xd + c * nb, *xsc = xs + c * nb;
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        acc[i] = 0.0f;
    for (int st = 0; st < steps; st++) {
        if (st + 1 < steps) {
#pragma unroll
            for (int i = 0; i < R; i++)
                gq_load<T>(wr[i] + (size_t)(st + 1) * BS * gq_traits<T>::bytes, p, bl & 1, nxt[i]);
        }
#pragma unroll
        for (int i = 0; i < R; i++) {
            acc[i] = gq_dot<T, true>(cur[i], BS * st + bl, p, NULL, gq_xsm, xdc, xsc, acc[i]);
            cur[i] = nxt[i];
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        float s = acc[i];
#pragma unroll
        for (int o = LPR / 2; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        const int r = rw + RPW * i;
        if (lane % LPR == 0 && r < g.rows)
            g.y[j * g.ys + r] = s;
    }
}

template <int T, int BS, int R>
__global__ void __launch_bounds__(32 * GQ_WARPS) gqe_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                             const float *xs)
{
    gqe_body<T, BS, R>(mm, xq, xd, xs);
}

// ---- knob moe_dec_fuse: the MOE decode's tails in the expert products
// (cu_moe_tail, cuda_internal.h).  Every block counts itself in its
// group's counter once its rows are stored (made visible device-wide by
// __threadfence first, as rr_kernel does); the block that takes a
// group's last ticket does the group's tail, reading the others' rows
// from the L2 (__ldcg), and puts the counter back to 0, so a captured
// graph replays the launch as is.  Groups, not the whole grid: each tail
// is one small piece (32 values) done in parallel with the rest of the
// launch, where one last block would walk every row in turn at the end.
//  - SWIGLU (the routed gate/up, y [ncols][2F]): a group is 32 gate rows
//    of a column with the 32 up rows F below them, 2 * 32 / RB blocks
//    (RB, a block's rows, divides 32); its tail is swiglu_q_kernel's
//    warp for that block of 32: silu(gate) * up, then cu_q8_block32 into
//    row j of the int8 copy.  The shared expert's rows (tl.sh, made by the
//    launch before, complete once this one passed its wait) are a warp's
//    block of 32 each for the first blocks of the grid, no count needed.
//  - COMBINE (the routed down, column t*K + k, y [ncols][H]): a group is
//    the K columns of token t at one block of rows (K blocks); its tail
//    is combine_kernel's sum for those rows of token t, the k in order,
//    then the shared expert's sigmoid-gated row (tl.ys, the launch
//    before's).
// The counters are only touched after the programmatic-launch wait, so
// the previous launch that used them has completed (and reset them).

// The tail of a block of the routed products (gqe_body done): count the
// block in its group, the group's last block does the group's tail.  SH:
// the shared expert's rows are complete (the launch before made them):
// warps of the first blocks make their SwiGLU, a block of 32 each.
template <int BS, int R, bool SH>
__device__ __forceinline__ void gqe_tail(const cu_mm &mm, const cu_moe_tail &tl)
{
    __shared__ unsigned ticket;
    constexpr int RB = GQ_WARPS * (32 / (4 * BS)) * R;   // rows a block (gqe_go's grid)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, bx = (int)blockIdx.x;
    const int64_t j = blockIdx.y;
    const bool swiglu = tl.mode == CU_MOE_TAIL_SWIGLU;
    const int64_t nbk = tl.F / 32;   // (SWIGLU) blocks of 32 in a row of F
    if (SH && swiglu && tl.sh != NULL) {
        const int64_t u = ((int64_t)blockIdx.y * gridDim.x + bx) * GQ_WARPS + warp;
        if (u < tl.n_sh * nbk) {
            const int64_t t = u / nbk, b = u - t * nbk, r = mm.ncols + t;
            const float *gs = tl.sh + t * tl.sh_stride + 32 * b;
            gqe_swiglu32(gs, gs + tl.F, lane, tl.q + r * tl.F + 32 * b, tl.qd + r * nbk + b, tl.qs + r * nbk + b);
        }
    }
    __threadfence();   // this block's rows visible before it counts
    __syncthreads();
    const int64_t grp = swiglu ? j * nbk + ((int64_t)bx * RB % tl.F) / 32 : (j / tl.K) * gridDim.x + bx;
    const unsigned need = swiglu ? 64 / RB : (unsigned)tl.K;
    if (threadIdx.x == 0)
        ticket = atomicAdd(tl.ctr + grp, 1u);
    __syncthreads();
    if (ticket != need - 1)
        return;
    __threadfence();
    if (swiglu) {
        if (warp == 0) {
            const int64_t b = grp - j * nbk;
            const float *gt = mm.y + j * mm.y_stride + 32 * b;
            gqe_swiglu32(gt, gt + tl.F, lane, tl.q + j * tl.F + 32 * b, tl.qd + j * nbk + b, tl.qs + j * nbk + b);
        }
    } else {
        const int64_t t = j / tl.K, h = (int64_t)bx * RB + threadIdx.x;
        if (threadIdx.x < RB && h < mm.rows) {
            // combine_kernel's arithmetic (K <= CB_K there: every load
            // first, then the adds in k order)
            const float *wt = tl.wts + t * tl.K, *yt = mm.y + t * tl.K * mm.y_stride + h;
            float wv[8], yv[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                wv[k] = k < tl.K ? __ldcg(wt + k) : 0.0f;
                yv[k] = k < tl.K ? __ldcg(yt + k * mm.y_stride) : 0.0f;
            }
            float o = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (k < tl.K)
                    o = __fadd_rn(o, __fmul_rn(wv[k], yv[k]));
            if (tl.ys != NULL) {
                const float gv = __ldcg(tl.gamma + t), sv = __ldcg(tl.ys + t * tl.ys_stride + h);
                const float gm = 1.0f / (1.0f + expf(-gv));
                o = __fadd_rn(o, __fmul_rn(gm, sv));
            }
            tl.dst[t * tl.ds + h] = o;
        }
    }
    if (threadIdx.x == 0)
        tl.ctr[grp] = 0;
}

template <int T, int BS, int R>
__global__ void __launch_bounds__(32 * GQ_WARPS) gqe_tail_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                                  const float *xs, cu_moe_tail tl)
{
    gqe_body<T, BS, R>(mm, xq, xd, xs);
    gqe_tail<BS, R, true>(mm, tl);
}

// The routed gate/up (blockIdx.y < mm.ncols, gqe_tail_kernel's blocks)
// and the shared expert's (blockIdx.y == mm.ncols: gs_kernel's blocks of
// sm, Q8_0, its gate rows then its up rows, into tl.sh) in one launch.
// The shared rows are then counted too: a group is 32 of its gate rows
// and the 32 up rows F below (2 * 32 / (GQ_WARPS * RS) blocks), its tail
// the SwiGLU of those 32 for every token (a warp a token), into rows
// mm.ncols.. of the int8 copy.  Blocks past the shared rows' grid do
// nothing (the launch's x extent is the routed grid's, at least as wide).
// The picks come from the launch just before (the router): the routed
// blocks read them after the wait (mm.expert_early false).
template <int T, int BS, int R, int NT>
__global__ void __launch_bounds__(32 * GQ_WARPS) gqe_gs_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                                const float *xs, cu_mm sm, cu_moe_tail tl)
{
    constexpr int RS = 2, RBS = GQ_WARPS * RS;   // Q8_0 rows a warp, a block
    if (blockIdx.y < mm.ncols) {
        gqe_body<T, BS, R>(mm, xq, xd, xs);
        gqe_tail<BS, R, false>(mm, tl);
        return;
    }
    __shared__ unsigned ticket;
    const int bx = (int)blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if ((int64_t)bx * RBS >= 2 * tl.F)
        return;   // (past the shared rows: counts nowhere)
    gs_body<RS, NT>(sm, xq, xd);
    __threadfence();   // this block's rows visible before it counts
    __syncthreads();
    const int64_t nbk = tl.F / 32, b = ((int64_t)bx * RBS % tl.F) / 32, grp = mm.ncols * nbk + b;
    if (threadIdx.x == 0)
        ticket = atomicAdd(tl.ctr + grp, 1u);
    __syncthreads();
    if (ticket != 64 / RBS - 1)
        return;
    __threadfence();
    for (int64_t t = warp; t < tl.n_sh; t += GQ_WARPS) {
        const float *gs = tl.sh + t * tl.sh_stride + 32 * b;
        const int64_t r = mm.ncols + t;
        gqe_swiglu32(gs, gs + tl.F, lane, tl.q + r * tl.F + 32 * b, tl.qd + r * nbk + b, tl.qs + r * nbk + b);
    }
    if (threadIdx.x == 0)
        tl.ctr[grp] = 0;
}

// Blocks a step of gqe_kernel for rows of `in` weights: 8, 4 or 2 (whole
// steps, and an even block count so a lane's Q6_K block parity is fixed),
// 0 where none fits.
__host__ __device__ __forceinline__ int gqe_bs(int64_t in)
{
    return in % 2048 == 0 ? 8 : in % 1024 == 0 ? 4 : in % 512 == 0 ? 2 : 0;
}

// Q8_0 rows a warp: mm->gemv_rows 1, 2 or 4, else 2.
static inline int gs_rows(const cu_mm *mm)
{
    return mm->gemv_rows == 1 || mm->gemv_rows == 4 ? mm->gemv_rows : 2;
}

static bool gq_part_ok(const uint8_t *w, uint64_t row_bytes, int64_t rows)
{
    return (uintptr_t)w % 16 == 0 && row_bytes % 16 == 0 && rows >= 0 && rows <= 0x7fffffff &&
           (uint64_t)rows * row_bytes < ((uint64_t)1 << 62);
}

// Every product of the launch (mm and its more[], at most CU_MM_MORE)
// 16-byte aligned with whole rows as gq_part_ok says.
static bool gq_parts_ok(const cu_mm *mm)
{
    if (mm->n_more < 0 || mm->n_more > CU_MM_MORE || !gq_part_ok(mm->w, mm->row_bytes, mm->rows))
        return false;
    for (int k = 0; k < mm->n_more; k++)
        if (!gq_part_ok(mm->more[k].w, mm->more[k].row_bytes, mm->more[k].rows))
            return false;
    return true;
}

// The expert columns gqe_kernel takes (mm->gemv_qe): K-quant experts
// whose rows are whole steps, x in shared memory, every expert's and
// row's blocks 16-byte aligned (so a Q6_K block's parity is its index's).
static bool gqe_ok(const cu_mm *mm)
{
    if (mm->type != SI_TYPE_Q4_K && mm->type != SI_TYPE_Q5_K && mm->type != SI_TYPE_Q6_K)
        return false;
    if (!mm->gemv_qe || mm->w2 != NULL || mm->in <= 0 || mm->in > GQ_XS_MAX || gqe_bs(mm->in) == 0 ||
        mm->ncols < 1 || mm->ncols > 65535 || mm->x_div < 1 || mm->expert_bytes % 16 != 0)
        return false;
    return gq_parts_ok(mm);
}

extern "C" bool si_cu_gemvq_ok(const cu_mm *mm)
{
    if (mm->expert != NULL)
        return gqe_ok(mm);
    if (mm->type == SI_TYPE_Q8_0) {
        // (several columns: x and the rings within the default 48 KB)
        if (!mm->gemv_st || mm->in > GS_IN_MAX || mm->in % 2048 != 0 ||
            (mm->ncols > 1 && GS_SMEM(mm->in, gs_rows(mm), mm->ncols) > GQ_XSN_MAX))
            return false;
    } else if (mm->type != SI_TYPE_Q4_K && mm->type != SI_TYPE_Q5_K && mm->type != SI_TYPE_Q6_K) {
        return false;
    }
    // (several columns: K-quants only, knob gemv_quad_cols, x_div 1)
    const bool cols_ok = mm->ncols == 1 || (mm->gemv_qn && mm->ncols >= 2 && mm->ncols <= GQ_COLS_MAX && mm->x_div == 1);
    if (!cols_ok || mm->expert != NULL || mm->w2 != NULL || mm->in <= 0 || mm->in % 2048 != 0 ||
        mm->in > (1 << 24))
        return false;
    return gq_parts_ok(mm);
}

// Rows a warp (R): 2 for Q6_K and where a row is one step (in = 2048),
// else 1 (H200, bench_gemv: Q6_K 248320 x 4096 2849 vs 2352 GB/s at R =
// 1, 4096 x 12288 1665 vs 1516; Q4_K 12288 x 4096 1759 at R = 1);
// mm->gemv_rows 1 or 2 overrides (bench A/B).
static inline int gq_rows(const cu_mm *mm)
{
    if (mm->gemv_rows == 1 || mm->gemv_rows == 2)
        return mm->gemv_rows;
    return mm->type == SI_TYPE_Q6_K || mm->in == 2048 ? 2 : 1;
}


// Expert columns (gqe_kernel): row sets a lane group, mm->gemv_rows 1 or
// 2, else 2.
static inline int gqe_rows(const cu_mm *mm) { return mm->gemv_rows == 1 ? 1 : 2; }

// Warps a block of gq_kernel: 8 where mm->gemv_warps says so, else 4.
static inline int gq_warps(const cu_mm *mm) { return mm->gemv_warps == 8 ? 8 : GQ_WARPS; }

// x in shared memory: one column up to GQ_XS_MAX bytes; several up to
// GQ_XSN_MAX together (the default 48 KB of a block: 8 columns of 4096)
static inline bool gq_xs(const cu_mm *mm)
{
    return mm->gemv_xs && (mm->ncols == 1 ? mm->in <= GQ_XS_MAX : mm->ncols * mm->in <= GQ_XSN_MAX);
}

// Columns a launch of gq_kernel is compiled for: 1, 2, 4 or 8.
static inline int gq_nt(const cu_mm *mm) { return mm->ncols <= 1 ? 1 : mm->ncols <= 2 ? 2 : mm->ncols <= 4 ? 4 : 8; }

// Q6_K staged (g6_kernel): one column, x and the rings within the
// default 48 KB of a block; knob gemv_staged_q6 = large (mm->gemv_st6 2)
// only for products of G6_LARGE weights or more.  Why the split: on the
// H200 the staged rows stream 3,067 GB/s against gq_kernel's 2,669 in a
// long product (the 9b LM head 3,160 vs 2,989), but a decode chain with
// the 9b's Q6_K ffn_down staged ran 2,620 vs 2,769 GB/s and the 9b step
// 1% slower (tests/cuda/bench_gemv.c chain): its 48 KB blocks start
// later behind the kernel before them.
#define G6_LARGE ((int64_t)1 << 28)
static inline bool g6_ok(const cu_mm *mm)
{
    const bool on = mm->gemv_st6 == 1 || (mm->gemv_st6 == 2 && mm->rows * mm->in >= G6_LARGE);
    return mm->type == SI_TYPE_Q6_K && on && mm->ncols == 1 && G6_SMEM(mm->in, gq_rows(mm)) <= 49152;
}

// ---- launchers (tests/cuda/emu/run-mma-emu.sh cuts the file here)

// The grid of R rows a warp over every product of the launch.
static int64_t gq_grid(const cu_mm *mm, int W, int R)
{
    const int64_t rb = (int64_t)W * R;
    int64_t gx = (mm->rows + rb - 1) / rb;
    for (int k = 0; k < mm->n_more; k++)
        gx += (mm->more[k].rows + rb - 1) / rb;
    return gx;
}

// (a norm tail, knob norm_tail: compiled only where x is in shared
// memory, the other forms keep the registers they had)
template <int T, int R, bool XS, int NT = 1>
static cudaError_t gq_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const int W = gq_warps(mm);
    const int64_t gx = gq_grid(mm, W, R);
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    if constexpr (XS) {
        if (mm->norm.ctr != NULL)
            return cu_launch(gqn_kernel<T, R, XS, NT>, dim3((unsigned)gx), dim3(32 * W),
                             (size_t)(mm->in * mm->ncols), s, *mm, xq, xd, xs);
    }
    if (mm->norm.ctr != NULL)
        return cudaErrorInvalidValue;
    if constexpr (XS && NT == 1) {   // (a deferred norm's copy: si_cu_gemvq_xr_ok)
        if (mm->xr.part != NULL)
            return cu_launch(gq_kernel<T, R, XS, NT, true>, dim3((unsigned)gx), dim3(32 * W),
                             (size_t)mm->in + 8 * (size_t)mm->xr.n, s, *mm, xq, xd, xs);
    }
    if (mm->xr.part != NULL)
        return cudaErrorInvalidValue;
    return cu_launch(gq_kernel<T, R, XS, NT>, dim3((unsigned)gx), dim3(32 * W),
                     XS ? (size_t)(mm->in * mm->ncols) : 0, s, *mm, xq, xd, xs);
}

// Several columns: one row a warp (NT sums a row already in flight).
template <int T, int NT>
static cudaError_t gq_cols(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    return gq_xs(mm) ? gq_go<T, 1, true, NT>(mm, xq, xd, xs, s) : gq_go<T, 1, false, NT>(mm, xq, xd, xs, s);
}

template <int R, int NT = 1>
static cudaError_t gs_go(const cu_mm *mm, const int8_t *xq, const float *xd, cudaStream_t s)
{
    const int64_t gx = gq_grid(mm, GQ_WARPS, R);
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    if constexpr (R == 2) {   // (a norm tail: the default rows a warp only)
        if (mm->norm.ctr != NULL)
            return cu_launch(gs_kernel<R, NT, true>, dim3((unsigned)gx), dim3(32 * GQ_WARPS),
                             GS_SMEM(mm->in, R, mm->ncols), s, *mm, xq, xd);
    }
    if (mm->norm.ctr != NULL)
        return cudaErrorInvalidValue;
    return cu_launch(gs_kernel<R, NT>, dim3((unsigned)gx), dim3(32 * GQ_WARPS), GS_SMEM(mm->in, R, mm->ncols), s,
                     *mm, xq, xd);
}

// Q8_0 of several columns: gs_rows' rows a warp, NT columns compiled.
template <int NT>
static cudaError_t gs_cols(const cu_mm *mm, const int8_t *xq, const float *xd, cudaStream_t s)
{
    const int r = gs_rows(mm);
    return r == 4 ? gs_go<4, NT>(mm, xq, xd, s) : r == 1 ? gs_go<1, NT>(mm, xq, xd, s) : gs_go<2, NT>(mm, xq, xd, s);
}

template <int R>
static cudaError_t g6_go(const cu_mm *mm, const int8_t *xq, const float *xd, cudaStream_t s)
{
    const int64_t gx = gq_grid(mm, GQ_WARPS, R);
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    return cu_launch(g6_kernel<R>, dim3((unsigned)gx), dim3(32 * GQ_WARPS), G6_SMEM(mm->in, R), s, *mm, xq, xd);
}

// Knobs gemv_q6r / gemv_q8r: a one-column product of Q6_K / Q8_0 rows with
// their regrouped copies (mm->w_rg and each part's, cuda_regroup.c) on
// gq_kernel<TR>, in g6_kernel's (the LM heads) and gs_kernel's place; the
// rows a lane group by gq_rows (the 16-byte loads of Q4_K).  With knob
// gemv_regroup_cols (mm->gemv_rg_cols) those of 2..8 columns that come
// here too (gemv_quad_cols: below gemv_mma's 4), as gq_cols: a row a warp.
static bool rg_part_ok(const uint8_t *w_rg, uint64_t row_bytes, uint64_t grp)
{
    return w_rg != NULL && (uintptr_t)w_rg % 16 == 0 && row_bytes % grp == 0;
}

static bool rg_ok(const cu_mm *mm)
{
    const uint64_t grp = si_cu_rg_group(mm->type);
    // (more columns: si_cu_gemvq_ok, which every caller passed, took their count)
    if (grp == 0 || (mm->ncols != 1 && !mm->gemv_rg_cols) || mm->norm.ctr != NULL || mm->expert != NULL ||
        mm->w2 != NULL || mm->in % 2048 != 0 || !rg_part_ok(mm->w_rg, mm->row_bytes, grp))
        return false;
    for (int k = 0; k < mm->n_more; k++)
        if (!rg_part_ok(mm->more[k].w_rg, mm->more[k].row_bytes, grp))
            return false;
    return true;
}

template <int TR>
static cudaError_t rg_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    cu_mm m = *mm;
    m.w = mm->w_rg;
    m.type = TR;
    for (int k = 0; k < m.n_more; k++)
        m.more[k].w = m.more[k].w_rg;
    switch (gq_nt(&m)) {
    case 2: return gq_cols<TR, 2>(&m, xq, xd, xs, s);
    case 4: return gq_cols<TR, 4>(&m, xq, xd, xs, s);
    case 8: return gq_cols<TR, 8>(&m, xq, xd, xs, s);
    default: break;
    }
    const int r = gq_rows(&m);
    if (gq_xs(&m))
        return r == 2 ? gq_go<TR, 2, true>(&m, xq, xd, xs, s) : gq_go<TR, 1, true>(&m, xq, xd, xs, s);
    return r == 2 ? gq_go<TR, 2, false>(&m, xq, xd, xs, s) : gq_go<TR, 1, false>(&m, xq, xd, xs, s);
}

extern "C" uint64_t si_cu_rg_group(uint32_t type)
{
    return type == SI_TYPE_Q6_K ? 1680u : type == SI_TYPE_Q8_0 ? 2176u : 0u;
}

extern "C" int si_cu_rg_copy(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t bytes, void *stream)
{
    const uint64_t grp = si_cu_rg_group(type);
    if (grp == 0 || bytes == 0 || bytes % grp != 0 || (uintptr_t)src % 2 != 0 || (uintptr_t)dst % 16 != 0)
        return (int)cudaErrorInvalidValue;
    const uint64_t blocks = (bytes + 255) / 256;
    const dim3 grid((unsigned)(blocks < 65536 ? blocks : 65536));
    cudaStream_t s = (cudaStream_t)stream;
    return (int)(type == SI_TYPE_Q6_K ? cu_launch(rg_kernel<SI_TYPE_Q6_K>, grid, dim3(256), 0, s, src, dst, bytes / grp)
                                      : cu_launch(rg_kernel<SI_TYPE_Q8_0>, grid, dim3(256), 0, s, src, dst, bytes / grp));
}

template <int T>
static cudaError_t gq_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (T == SI_TYPE_Q6_K && rg_ok(mm))
        return rg_launch<CU_TYPE_Q6R>(mm, xq, xd, xs, s);
    if (T == SI_TYPE_Q6_K && g6_ok(mm))
        return gq_rows(mm) == 2 ? g6_go<2>(mm, xq, xd, s) : g6_go<1>(mm, xq, xd, s);
    switch (gq_nt(mm)) {
    case 2: return gq_cols<T, 2>(mm, xq, xd, xs, s);
    case 4: return gq_cols<T, 4>(mm, xq, xd, xs, s);
    case 8: return gq_cols<T, 8>(mm, xq, xd, xs, s);
    default: break;
    }
    const int r = gq_rows(mm);
    if (gq_xs(mm))
        return r == 2 ? gq_go<T, 2, true>(mm, xq, xd, xs, s) : gq_go<T, 1, true>(mm, xq, xd, xs, s);
    return r == 2 ? gq_go<T, 2, false>(mm, xq, xd, xs, s) : gq_go<T, 1, false>(mm, xq, xd, xs, s);
}

template <int T, int BS, int R>
static cudaError_t gqe_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const int64_t gx = gq_grid(mm, GQ_WARPS, (32 / (4 * BS)) * R);
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    return cu_launch(gqe_kernel<T, BS, R>, dim3((unsigned)gx, (unsigned)mm->ncols), dim3(32 * GQ_WARPS),
                     (size_t)mm->in, s, *mm, xq, xd, xs);
}

template <int T, int BS>
static cudaError_t gqe_launch_r(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    return gqe_rows(mm) == 1 ? gqe_go<T, BS, 1>(mm, xq, xd, xs, s) : gqe_go<T, BS, 2>(mm, xq, xd, xs, s);
}

template <int T>
static cudaError_t gqe_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    switch (gqe_bs(mm->in)) {
    case 8: return gqe_launch_r<T, 8>(mm, xq, xd, xs, s);
    case 4: return gqe_launch_r<T, 4>(mm, xq, xd, xs, s);
    default: return gqe_launch_r<T, 2>(mm, xq, xd, xs, s);
    }
}

// Knob moe_dec_fuse: gqe_launch's kernel with a tail (gqe_tail_kernel).
// Rows a block of gqe_go's grid.
static inline int gqe_rb(const cu_mm *mm) { return GQ_WARPS * (32 / (4 * gqe_bs(mm->in))) * gqe_rows(mm); }

extern "C" bool si_cu_gemvq_tail_ok(const cu_mm *mm, const cu_moe_tail *tl)
{
    if (mm->expert == NULL || mm->n_more != 0 || !gqe_ok(mm) || tl->ctr == NULL)
        return false;
    const int64_t rb = gqe_rb(mm), gx = (mm->rows + rb - 1) / rb;
    if (tl->mode == CU_MOE_TAIL_SWIGLU) {
        // (a group's rows whole blocks of the grid: rb divides 32, 32 F)
        if (tl->F <= 0 || tl->F % 32 != 0 || mm->rows != 2 * tl->F || 32 % rb != 0 || tl->q == NULL ||
            tl->qd == NULL || tl->qs == NULL)
            return false;
        if (tl->sh != NULL && (tl->n_sh < 0 || tl->n_sh * (tl->F / 32) > gx * mm->ncols * GQ_WARPS))
            return false;
        return mm->ncols * (tl->F / 32) <= tl->ctr_n;
    }
    if (tl->mode != CU_MOE_TAIL_COMBINE || tl->K < 1 || tl->K > 8 || mm->ncols % tl->K != 0 ||
        tl->dst == NULL || tl->wts == NULL || (tl->ys != NULL && tl->gamma == NULL))
        return false;
    return mm->ncols / tl->K * gx <= tl->ctr_n;
}

template <int T, int BS, int R>
static cudaError_t gqe_tail_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs,
                               const cu_moe_tail *tl, cudaStream_t s)
{
    const int64_t gx = gq_grid(mm, GQ_WARPS, (32 / (4 * BS)) * R);
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    return cu_launch(gqe_tail_kernel<T, BS, R>, dim3((unsigned)gx, (unsigned)mm->ncols), dim3(32 * GQ_WARPS),
                     (size_t)mm->in, s, *mm, xq, xd, xs, *tl);
}

template <int T, int BS>
static cudaError_t gqe_tail_r(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs,
                              const cu_moe_tail *tl, cudaStream_t s)
{
    return gqe_rows(mm) == 1 ? gqe_tail_go<T, BS, 1>(mm, xq, xd, xs, tl, s) : gqe_tail_go<T, BS, 2>(mm, xq, xd, xs, tl, s);
}

template <int T>
static cudaError_t gqe_tail_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs,
                                   const cu_moe_tail *tl, cudaStream_t s)
{
    switch (gqe_bs(mm->in)) {
    case 8: return gqe_tail_r<T, 8>(mm, xq, xd, xs, tl, s);
    case 4: return gqe_tail_r<T, 4>(mm, xq, xd, xs, tl, s);
    default: return gqe_tail_r<T, 2>(mm, xq, xd, xs, tl, s);
    }
}

extern "C" int si_cu_gemvq_tail(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs,
                                const cu_moe_tail *tl, void *stream)
{
    if (!si_cu_gemvq_tail_ok(mm, tl))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_Q4_K: return (int)gqe_tail_launch<SI_TYPE_Q4_K>(mm, xq, xd, xs, tl, s);
    case SI_TYPE_Q5_K: return (int)gqe_tail_launch<SI_TYPE_Q5_K>(mm, xq, xd, xs, tl, s);
    default: return (int)gqe_tail_launch<SI_TYPE_Q6_K>(mm, xq, xd, xs, tl, s);
    }
}

// The routed and the shared gate/up in one launch (gqe_gs_kernel).
extern "C" bool si_cu_gemvq_gs_ok(const cu_mm *mm, const cu_mm *sm, const cu_moe_tail *tl)
{
    if (tl->mode != CU_MOE_TAIL_SWIGLU || tl->sh == NULL || mm->expert_early || !si_cu_gemvq_tail_ok(mm, tl) ||
        gqe_bs(mm->in) != 8)
        return false;
    if (sm->type != SI_TYPE_Q8_0 || sm->expert != NULL || sm->w2 != NULL || sm->x_div != 1 || sm->in != mm->in ||
        sm->ncols != tl->n_sh || sm->ncols < 1 || gs_rows(sm) != 2 || sm->n_more > 1 || !si_cu_gemvq_ok(sm))
        return false;
    // the shared rows: gate then up, F each, where tl->sh says (stacked,
    // or the up as more[0] F floats on)
    const int64_t F = tl->F;
    if (sm->y != tl->sh || sm->y_stride != tl->sh_stride)
        return false;
    if (sm->n_more == 0 ? sm->rows != 2 * F
                        : sm->rows != F || sm->more[0].rows != F || sm->more[0].y != tl->sh + F ||
                              sm->more[0].y_stride != tl->sh_stride)
        return false;
    return (mm->ncols + 1) * (F / 32) <= tl->ctr_n;
}

template <int T, int R, int NT>
static cudaError_t gqe_gs_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_mm *sm,
                             const cu_moe_tail *tl, cudaStream_t s)
{
    const int64_t gx = gq_grid(mm, GQ_WARPS, (32 / (4 * 8)) * R);
    if (gx > 0x7fffffffLL || mm->ncols + 1 > 65535)
        return cudaErrorInvalidValue;
    const size_t gs = GS_SMEM(sm->in, 2, sm->ncols), smem = gs > (size_t)mm->in ? gs : (size_t)mm->in;
    return cu_launch(gqe_gs_kernel<T, 8, R, NT>, dim3((unsigned)gx, (unsigned)(mm->ncols + 1)), dim3(32 * GQ_WARPS),
                     smem, s, *mm, xq, xd, xs, *sm, *tl);
}

template <int T, int R>
static cudaError_t gqe_gs_nt(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_mm *sm,
                             const cu_moe_tail *tl, cudaStream_t s)
{
    switch (gq_nt(sm)) {
    case 2: return gqe_gs_go<T, R, 2>(mm, xq, xd, xs, sm, tl, s);
    case 4: return gqe_gs_go<T, R, 4>(mm, xq, xd, xs, sm, tl, s);
    case 8: return gqe_gs_go<T, R, 8>(mm, xq, xd, xs, sm, tl, s);
    default: return gqe_gs_go<T, R, 1>(mm, xq, xd, xs, sm, tl, s);
    }
}

template <int T>
static cudaError_t gqe_gs_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs,
                                 const cu_mm *sm, const cu_moe_tail *tl, cudaStream_t s)
{
    return gqe_rows(mm) == 1 ? gqe_gs_nt<T, 1>(mm, xq, xd, xs, sm, tl, s) : gqe_gs_nt<T, 2>(mm, xq, xd, xs, sm, tl, s);
}

extern "C" int si_cu_gemvq_gs(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_mm *sm,
                              const cu_moe_tail *tl, void *stream)
{
    if (!si_cu_gemvq_gs_ok(mm, sm, tl))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_Q4_K: return (int)gqe_gs_launch<SI_TYPE_Q4_K>(mm, xq, xd, xs, sm, tl, s);
    case SI_TYPE_Q5_K: return (int)gqe_gs_launch<SI_TYPE_Q5_K>(mm, xq, xd, xs, sm, tl, s);
    default: return (int)gqe_gs_launch<SI_TYPE_Q6_K>(mm, xq, xd, xs, sm, tl, s);
    }
}

static bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

extern "C" bool si_cu_gemvq_norm_ok(const cu_mm *mm)
{
    const cu_norm_tail &nt = mm->norm;
    if (!si_cu_gemvq_ok(mm) || mm->expert != NULL || mm->n_more != 0 || mm->ncols > GQ_COLS_MAX)
        return false;
    if (mm->type == SI_TYPE_Q6_K && g6_ok(mm))   // (g6_kernel has no tail)
        return false;
    if (mm->type == SI_TYPE_Q8_0 ? gs_rows(mm) != 2 : !gq_xs(mm))   // (the forms compiled with one: gq_go, gs_go)
        return false;
    if (mm->rows % 512 != 0 || mm->rows > 4096 || !al16(mm->y) || mm->y_stride % 4 != 0 || !al16(nt.w) ||
        !cu_rows_al16(&nt.d) || nt.d.ne1 < mm->ncols || nt.ctr == NULL)
        return false;
    if (nt.f.b.p != NULL && (!cu_rows_al16(&nt.f.b) || !cu_rows_al16(&nt.f.r) || nt.f.b.ne1 < mm->ncols ||
                             nt.f.r.ne1 < mm->ncols))
        return false;
    return nt.f.q == NULL || (al16(nt.f.q) && al16(nt.f.qd) && al16(nt.f.qs));
}

// Knob norm_tail = defer (gqd_kernel).  Where a Q6_K or Q8_0 product runs
// on its regrouped copy (rg_ok), gq_launch's choice, so the type's
// bytes are those gq_body reads.
extern "C" bool si_cu_gemvq_defer_ok(const cu_mm *mm)
{
    const cu_norm_tail &nt = mm->norm;
    if (nt.part == NULL || nt.ctr != NULL || nt.w == NULL || nt.d.p == NULL || !si_cu_gemvq_ok(mm) ||
        mm->expert != NULL || mm->n_more != 0 || mm->ncols != 1 || mm->w2 != NULL || mm->xr.part != NULL)
        return false;
    if (mm->rows <= 0 || mm->rows % 32 != 0 || mm->rows > 32 * CU_DN_PART || mm->in > GQ_XS_MAX)
        return false;
    if (mm->type == SI_TYPE_Q8_0 || mm->type == SI_TYPE_Q6_K)
        return rg_ok(mm) || (mm->type == SI_TYPE_Q6_K && !g6_ok(mm));
    return true;
}

// The one-column forms si_cu_gemvq gives gq_body (gq_launch, rg_launch):
// not gs_kernel's staged Q8_0, g6_kernel's Q6_K or the experts'.
extern "C" bool si_cu_gemvq_xr_ok(const cu_mm *mm)
{
    if (!si_cu_gemvq_ok(mm) || mm->expert != NULL || mm->ncols != 1 || mm->norm.ctr != NULL || mm->norm.part != NULL ||
        !gq_xs(mm))
        return false;
    if (mm->type == SI_TYPE_Q8_0 || mm->type == SI_TYPE_Q6_K)
        return rg_ok(mm) || (mm->type == SI_TYPE_Q6_K && !g6_ok(mm));
    return true;
}

template <int T>
static cudaError_t gqd_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    return cu_launch(gqd_kernel<T>, dim3((unsigned)(mm->rows / 32)), dim3(1024), (size_t)mm->in, s, *mm, xq, xd, xs);
}

static cudaError_t gqd_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if ((mm->type == SI_TYPE_Q8_0 || mm->type == SI_TYPE_Q6_K) && rg_ok(mm)) {
        cu_mm m = *mm;
        m.w = mm->w_rg;
        if (mm->type == SI_TYPE_Q8_0) {
            m.type = CU_TYPE_Q8R;
            return gqd_go<CU_TYPE_Q8R>(&m, xq, xd, xs, s);
        }
        m.type = CU_TYPE_Q6R;
        return gqd_go<CU_TYPE_Q6R>(&m, xq, xd, xs, s);
    }
    switch (mm->type) {
    case SI_TYPE_Q4_K: return gqd_go<SI_TYPE_Q4_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q5_K: return gqd_go<SI_TYPE_Q5_K>(mm, xq, xd, xs, s);
    default: return gqd_go<SI_TYPE_Q6_K>(mm, xq, xd, xs, s);
    }
}

extern "C" bool si_cu_gemvq_glu_ok(const cu_mm *mm, const cu_glu *gl)
{
    if (mm->type != SI_TYPE_Q4_K && mm->type != SI_TYPE_Q5_K && mm->type != SI_TYPE_Q6_K)
        return false;
    if (mm->n_more != 1 || mm->ncols < 1 || mm->w2 != NULL || mm->norm.ctr != NULL || mm->in <= 0 ||
        mm->in % 2048 != 0 || mm->in > GQ_XS_MAX || mm->x_div < 1)
        return false;
    if (mm->expert == NULL ? mm->ncols != 1 || gl->sh != NULL : mm->expert_bytes % 16 != 0 || mm->xr.part != NULL)
        return false;
    const int64_t n_sh = gl->sh != NULL ? gl->n_sh : 0;
    if (n_sh < 0 || mm->ncols + n_sh > 65535 || (n_sh > 0 && gl->sh_stride < 2 * mm->rows))
        return false;
    if (mm->rows <= 0 || mm->rows % 32 != 0 || mm->more[0].rows != mm->rows || mm->rows / 32 > 0x7fffffffLL)
        return false;
    return gq_parts_ok(mm);
}

template <int T>
static cudaError_t gu_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_glu *gl,
                         cudaStream_t s)
{
    const dim3 grid((unsigned)(mm->rows / 32), (unsigned)(mm->ncols + (gl->sh != NULL ? gl->n_sh : 0)));
    const size_t smem = (size_t)mm->in;
    if (mm->xr.part != NULL)   // (a deferred norm's copy: si_cu_gemvq_glu_ok, one dense column)
        return mm->in == 2048 ? cu_launch(gu_kernel<T, 16, true>, grid, dim3(32 * 16), smem + 8 * mm->xr.n, s, *mm, xq,
                                          xd, xs, *gl)
                              : cu_launch(gu_kernel<T, 8, true>, grid, dim3(32 * 8), smem + 8 * mm->xr.n, s, *mm, xq, xd,
                                          xs, *gl);
    if (mm->in == 2048)
        return cu_launch(gu_kernel<T, 16>, grid, dim3(32 * 16), smem, s, *mm, xq, xd, xs, *gl);
    return cu_launch(gu_kernel<T, 8>, grid, dim3(32 * 8), smem, s, *mm, xq, xd, xs, *gl);
}

extern "C" int si_cu_gemvq_glu(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_glu *gl,
                               void *stream)
{
    if (!si_cu_gemvq_glu_ok(mm, gl))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_Q4_K: return (int)gu_go<SI_TYPE_Q4_K>(mm, xq, xd, xs, gl, s);
    case SI_TYPE_Q5_K: return (int)gu_go<SI_TYPE_Q5_K>(mm, xq, xd, xs, gl, s);
    default: return (int)gu_go<SI_TYPE_Q6_K>(mm, xq, xd, xs, gl, s);
    }
}

extern "C" int si_cu_gemvq(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    if (!si_cu_gemvq_ok(mm) || (mm->norm.ctr != NULL && !si_cu_gemvq_norm_ok(mm)) ||
        (mm->norm.part != NULL && (!si_cu_gemvq_defer_ok(mm) || mm->norm.f.q == NULL)) ||
        (mm->xr.part != NULL && !si_cu_gemvq_xr_ok(mm)))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    if (mm->norm.part != NULL)
        return (int)gqd_launch(mm, xq, xd, xs, s);
    if (mm->expert != NULL) {
        switch (mm->type) {
        case SI_TYPE_Q4_K: return (int)gqe_launch<SI_TYPE_Q4_K>(mm, xq, xd, xs, s);
        case SI_TYPE_Q5_K: return (int)gqe_launch<SI_TYPE_Q5_K>(mm, xq, xd, xs, s);
        default: return (int)gqe_launch<SI_TYPE_Q6_K>(mm, xq, xd, xs, s);
        }
    }
    switch (mm->type) {
    case SI_TYPE_Q8_0: {
        if (rg_ok(mm))
            return (int)rg_launch<CU_TYPE_Q8R>(mm, xq, xd, xs, s);
        switch (gq_nt(mm)) {
        case 2: return (int)gs_cols<2>(mm, xq, xd, s);
        case 4: return (int)gs_cols<4>(mm, xq, xd, s);
        case 8: return (int)gs_cols<8>(mm, xq, xd, s);
        default: return (int)gs_cols<1>(mm, xq, xd, s);
        }
    }
    case SI_TYPE_Q4_K: return (int)gq_launch<SI_TYPE_Q4_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q5_K: return (int)gq_launch<SI_TYPE_Q5_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q6_K: return (int)gq_launch<SI_TYPE_Q6_K>(mm, xq, xd, xs, s);
    default: return (int)cudaErrorInvalidValue;
    }
}

// Knob moe_persist's kernel (cuda_pmoe.cuh) runs this file's device
// functions, so it is part of this translation unit.  Its dynamic shared
// memory comes from here (the emulators' sed lines rewrite this line).
__device__ __forceinline__ uint4 *gq_dyn_smem()
{
    extern __shared__ __align__(16) uint4 gq_xsm[];
    return gq_xsm;
}

#include "cuda_pmoe.cuh"
