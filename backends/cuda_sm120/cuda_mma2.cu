// backends/cuda_sm120/cuda_mma2.cu — the prefill int8 tensor-core GEMM,
// second tiling (knob mma_tile = v2, the default; cuda_mma.cu is v1).
// Same product and the same exact int32 block terms as v1 (see the math
// there): y[c][r] = sum_b xd[c][b] * dw[r][b] * isum_b(r, c)
//                   - sum_b wm[r][b] * xs[c][b].
//
// Why v1 is slow: per 32-wide block every output element pays its own f32
// work (int -> f32, dw * dx, the fma, the min's fma), about 5 issue slots
// per 32 MACs, so the SM's instruction issue, not the tensor cores, bounds
// it; Q6_K adds an I2F (1/8 of the FP32 rate on sm_90).  v2 cuts that:
//   - round(isum * dw) in ONE fma, exactly: with M = 1.5 * 2^23 the float
//     with bits isum + 0x4B400000 is M + isum exactly (|isum| < 2^22; the
//     mma adds 0x4B400000 for free as its C operand), and
//     fmaf(M + isum, dw, -M * dw) rounds the exact isum * dw once (-M * dw
//     is exact: dw has <= 19 significant bits here).  Then fmaf(., dx, acc)
//     and, for Q4_K/Q5_K, fmaf(-wm, xs, acc): 3 FFMA per element and
//     block, 2 for Q8_0; Q6_K does it per 16-half (its two k16 sums, no
//     I2F): 4.
//     The only change from the cpu's f32 evaluation is where the products
//     round (dx * (dw * isum) vs round(dw * isum) * dx) and the summation
//     order; the integer terms are the same.
//   - 128 x 128 tiles (8 warps of 64 x 32; 64 x 128 when 128-row tiles
//     would leave SMs idle): the weights are decoded once per 128 columns.
//   - one barrier per k-tile: the decoded weight tile is double-buffered
//     (the raw blocks of tile k+2 are in registers while tile k computes,
//     decoded into the free buffer before it; tile k+4 is prefetched into
//     L2), the activations come by cp.async through XS stages.
//   - fragments by ldmatrix (rows padded to 144 bytes: conflict-free), the
//     per-row and per-column scales stored permuted so each lane reads its
//     own 2 rows x MT and 8 columns with 64/128-bit loads.
// K-tile: 128 (half a K-quant super-block, 4 Q8_0 blocks), so two X stages
// and both weight buffers fit sm_120's 99 KiB per block.
//
// Fragment layouts: see cuda_mma.cu.  ldmatrix.x4: lanes 8j..8j+7 give the
// row addresses of 8x16-byte matrix j; register j of lane l is matrix j,
// row l / 4, bytes 4 (l % 4)..+3: for a row-major int8 tile that is the
// mma A/B word at [row][k0 + 4t].
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_ptx.cuh"
#include "cuda_mma_dec.cuh"

#define M2_BN      128                 // columns per block
#define M2_KT      128                 // k per tile
#define M2_NSUB    (M2_KT / 32)        // 32-blocks per tile
#define M2_THREADS 256
#define M2_LD      (M2_KT + 16)        // bytes per smem tile row (36 words: ldmatrix conflict-free)
#ifndef M2_XS
#define M2_XS 2                        // activation stages (3 would not fit sm_120 at BM 128)
#endif
#ifndef M2_PF
#define M2_PF 4                        // weight k-tiles prefetched into L2 ahead
#endif

// Shared memory (bytes) for BM weight rows: the decoded weight tiles W[2]
// and their scales WS[2] (f32 [NSUB][4][BM], rows permuted), the
// activation stages X[XS] and their scales XC[XS] (f32 [NSUB][2][BN],
// columns permuted).
template <int BM> struct m2_smem {
    static const int W = 0;
    static const int WS = W + 2 * BM * M2_LD;
    static const int X = WS + 2 * M2_NSUB * 4 * BM * 4;
    static const int XC = X + M2_XS * M2_BN * M2_LD;
    static const int TOTAL = XC + M2_XS * M2_NSUB * 2 * M2_BN * 4;
};


// round(isum * dw) (see the header) from mi = isum + CU_I2F_MAGIC (the mma
// adds it: its C operand), nmdw = -M * dw.
__device__ __forceinline__ float m2_scale(int mi, float dw, float nmdw)
{
    return fmaf(__int_as_float(mi), dw, nmdw);
}

__device__ __forceinline__ void m2_st16(uint8_t *p, const uint32_t v[4])
{
    *(uint4 *)p = make_uint4(v[0], v[1], v[2], v[3]);
}

// Where the scales of row r (0..BM-1) sit: warp row half, then lane g,
// then (mt, e) so lane g reads its 2 * MT rows as float2 per mt.
template <int BM> __device__ __forceinline__ int m2_rperm(int r)
{
    const int half = BM / 2, MT = BM / 32;
    const int wh = r / half, rl = r % half, mt = rl >> 4, e = (rl >> 3) & 1, g = rl & 7;
    return wh * half + g * (2 * MT) + mt * 2 + e;
}

// ... and of column c (0..127): warp column quarter, lane t, (nt, e).
__device__ __forceinline__ int m2_cperm(int c)
{
    const int wn = c >> 5, cl = c & 31, nt = cl >> 3, t = (cl >> 1) & 3, e = cl & 1;
    return wn * 32 + t * 8 + nt * 2 + e;
}

// ---- weights: raw blocks -> registers -> int8 smem -----------------------
//
// load(kt) fetches the packed bytes of k-tile kt for the BM rows into
// registers (thread tid always takes unit tid % U of rows tid / U + i *
// 256 / U); store(kt) unpacks them to int8 W[row][k] and writes the row
// scales: q 0: dw, 1: -M dw, 2: -wm (Q6_K: 0/1 dw and -M dw of the low
// 16, 2/3 of the high 16).  Rows past the end are clamped to the last one
// (cu_wtile_row, cuda_mma_dec.cuh).

template <int BM> __device__ __forceinline__ void m2_ws(float *ws, int b, int q, int r, float v)
{
    ws[(b * 4 + q) * BM + m2_rperm<BM>(r)] = v;
}

template <int T, int BM> struct m2_raw;

// Q4_K/Q5_K, tile kt = half h of super-block kt / 2: unit j = (g, hh) is
// qs[32 G + 16 hh ..], G = 2 h + g: 16 low nibbles of sub-block 2G (local
// block 2g) and 16 high nibbles of 2G+1; Q5_K adds qh[16 hh ..], bits 2G
// and 2G+1.  The 16-byte header (d, dmin, scales) of row tid % BM, for
// its HB blocks of the tile from (tid / BM) * HB on (every thread takes a
// share: warps stay in step to the next barrier).
template <int T, int BM> struct m2_raw_k45 {
    static const int U = 4, N = BM * U / M2_THREADS, BYTES = T == SI_TYPE_Q4_K ? 144 : 176;
    static const int HB = M2_NSUB * BM / M2_THREADS;
    static const int QS = T == SI_TYPE_Q4_K ? 16 : 48;
    uint32_t q[N][4], h[T == SI_TYPE_Q5_K ? N : 1][4], hdr[4];

    __device__ __forceinline__ void load(const cu_wtile &t, int64_t kt, int tid)
    {
        const int j = tid % U, G = 2 * (int)(kt & 1) + (j >> 1), hh = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (M2_THREADS / U)) + (kt >> 1) * BYTES;
            cu_ld16(B + QS + 32 * G + 16 * hh, q[i]);
            if (T == SI_TYPE_Q5_K)
                cu_ld16(B + 16 + 16 * hh, h[i]);
        }
        cu_ld16(cu_wtile_row(t, tid % BM) + (kt >> 1) * BYTES, hdr);
    }

    // the bytes load(kt) will read, into L2 (the header shares a line)
    __device__ __forceinline__ void prefetch(const cu_wtile &t, int64_t kt, int tid) const
    {
        const int j = tid % U, G = 2 * (int)(kt & 1) + (j >> 1), hh = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (M2_THREADS / U)) + (kt >> 1) * BYTES;
            prefetch_l2(B + QS + 32 * G + 16 * hh);
            if (T == SI_TYPE_Q5_K && j < 2)
                prefetch_l2(B + 16 + 16 * hh);
        }
    }

    __device__ __forceinline__ void store(uint8_t *W, float *ws, int64_t kt, int tid) const
    {
        const int j = tid % U, g = j >> 1, G = 2 * (int)(kt & 1) + g, hh = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int r = tid / U + i * (M2_THREADS / U);
            uint32_t lo[4], hi[4];
            // (inline, not cu_unpack_q45: through the helper ptxas allocates
            // the Q5_K kernels differently on sm_120: more spills at BM 64)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                lo[k] = q[i][k] & 0x0F0F0F0Fu;
                hi[k] = (q[i][k] >> 4) & 0x0F0F0F0Fu;
                if (T == SI_TYPE_Q5_K) {
                    lo[k] |= ((h[i][k] >> (2 * G)) & 0x01010101u) << 4;
                    hi[k] |= ((h[i][k] >> (2 * G + 1)) & 0x01010101u) << 4;
                }
            }
            m2_st16(W + r * M2_LD + 64 * g + 16 * hh, lo);
            m2_st16(W + r * M2_LD + 64 * g + 32 + 16 * hh, hi);
        }
        {
            float d, dmin;
            uint8_t b[12];
            cu_k45_head(hdr, d, dmin, b);
            const int r = tid % BM, grp = tid / BM;
#pragma unroll
            for (int lb = 0; lb < M2_NSUB; lb++) {
                if (lb / HB != grp)
                    continue;
                int sc, m;   // constant indices into b: registers, not local memory
                if (kt & 1)
                    cu_scale_min_k4(b, 4 + lb, &sc, &m);
                else
                    cu_scale_min_k4(b, lb, &sc, &m);
                const float dw = d * (float)sc;   // the cpu's d16 and m32
                m2_ws<BM>(ws, lb, 0, r, dw);
                m2_ws<BM>(ws, lb, 1, r, -CU_I2F_MAGICF * dw);
                m2_ws<BM>(ws, lb, 2, r, -(dmin * (float)m));
            }
        }
    }
};
template <int BM> struct m2_raw<SI_TYPE_Q4_K, BM> : m2_raw_k45<SI_TYPE_Q4_K, BM> {};
template <int BM> struct m2_raw<SI_TYPE_Q5_K, BM> : m2_raw_k45<SI_TYPE_Q5_K, BM> {};

// Q6_K (210 B, 2-byte aligned), tile kt = half h: unit j = (s, k) is
// ql[64 h + 32 s + 16 k ..] with qh[128 + 32 h + 16 k ..]: local values
// 32 s + 16 k .. (low nibbles, qh bits 2s) and 64 + 32 s + 16 k ..
// (high nibbles, qh bits 2s+4), as the cpu's dec_q6_k.  Row tid % BM:
// d and the 8 int8 scales of this half; its HB blocks from (tid / BM) *
// HB on, as for Q4_K.
template <int BM> struct m2_raw<SI_TYPE_Q6_K, BM> {
    static const int U = 4, N = BM * U / M2_THREADS, HB = M2_NSUB * BM / M2_THREADS;
    uint32_t ql[N][4], qh[N][4], sc[2];
    unsigned short dh;

    __device__ __forceinline__ void load(const cu_wtile &t, int64_t kt, int tid)
    {
        const int j = tid % U, s = j >> 1, k = j & 1, h = (int)(kt & 1);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (M2_THREADS / U)) + (kt >> 1) * 210;
            cu_ld16_a2(B + 64 * h + 32 * s + 16 * k, ql[i]);
            cu_ld16_a2(B + 128 + 32 * h + 16 * k, qh[i]);
        }
        {
            const unsigned short *p =
                (const unsigned short *)(cu_wtile_row(t, tid % BM) + (kt >> 1) * 210 + 192 + 8 * h);
            sc[0] = (uint32_t)__ldg(p) | ((uint32_t)__ldg(p + 1) << 16);
            sc[1] = (uint32_t)__ldg(p + 2) | ((uint32_t)__ldg(p + 3) << 16);
            dh = __ldg(p + 8 - 4 * h);   // byte 208 of the block
        }
    }

    __device__ __forceinline__ void prefetch(const cu_wtile &t, int64_t kt, int tid) const
    {
        const int j = tid % U, s = j >> 1, k = j & 1, h = (int)(kt & 1);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (M2_THREADS / U)) + (kt >> 1) * 210;
            prefetch_l2(B + 64 * h + 32 * s + 16 * k);
            prefetch_l2(B + 128 + 32 * h + 16 * k);
            if (j == 0)
                prefetch_l2(B + 192 + 8 * h);
        }
    }

    __device__ __forceinline__ void store(uint8_t *W, float *ws, int64_t kt, int tid) const
    {
        const int j = tid % U, s = j >> 1, k = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int r = tid / U + i * (M2_THREADS / U);
            uint32_t a[4], b[4];
            // (inline, as in cuda_mma.cu: cu_unpack_q6 then the -32 changes
            // the code; ptxas, sm_120, allocates the Q6_K kernel differently)
#pragma unroll
            for (int m = 0; m < 4; m++) {
                a[m] = (ql[i][m] & 0x0F0F0F0Fu) | (((qh[i][m] >> (2 * s)) & 0x03030303u) << 4);
                b[m] = ((ql[i][m] >> 4) & 0x0F0F0F0Fu) | (((qh[i][m] >> (2 * s + 4)) & 0x03030303u) << 4);
                a[m] = __vsub4(a[m], 0x20202020u);   // q - 32 per byte: -32..31
                b[m] = __vsub4(b[m], 0x20202020u);
            }
            m2_st16(W + r * M2_LD + 32 * s + 16 * k, a);
            m2_st16(W + r * M2_LD + 64 + 32 * s + 16 * k, b);
        }
        {
            const float d = __half2float(__ushort_as_half(dh));
            const int r = tid % BM, grp = tid / BM;
#pragma unroll
            for (int lb = 0; lb < M2_NSUB; lb++) {   // scales 2lb, 2lb+1 of this half
                if (lb / HB != grp)
                    continue;
                const float lo = d * (float)(int8_t)(sc[lb / 2] >> (16 * (lb % 2)));
                const float hi = d * (float)(int8_t)(sc[lb / 2] >> (16 * (lb % 2) + 8));
                m2_ws<BM>(ws, lb, 0, r, lo);
                m2_ws<BM>(ws, lb, 1, r, -CU_I2F_MAGICF * lo);
                m2_ws<BM>(ws, lb, 2, r, hi);
                m2_ws<BM>(ws, lb, 3, r, -CU_I2F_MAGICF * hi);
            }
        }
    }
};

// Q8_0 (34 B, 2-byte aligned), tile kt = blocks 4 kt ..: unit j = (block
// j / 2, half j % 2) is qs[16 half ..]; the half-0 thread takes d.  Blocks
// past the row's end (in % 128 != 0) are not read; their smem is never
// used.
template <int BM> struct m2_raw<SI_TYPE_Q8_0, BM> {
    static const int U = 8, N = BM * U / M2_THREADS;
    uint32_t q[N][4];
    unsigned short dh[N];

    __device__ __forceinline__ void load(const cu_wtile &t, int64_t kt, int tid)
    {
        const int j = tid % U, blk = j >> 1, h = j & 1;
        const int64_t b = kt * M2_NSUB + blk;
        if (b >= t.nb)
            return;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (M2_THREADS / U)) + b * 34;
            cu_ld16_a2(B + 2 + 16 * h, q[i]);
            if (h == 0)
                dh[i] = __ldg((const unsigned short *)B);
        }
    }

    __device__ __forceinline__ void prefetch(const cu_wtile &t, int64_t kt, int tid) const
    {
        const int j = tid % U, blk = j >> 1, h = j & 1;
        const int64_t b = kt * M2_NSUB + blk;
        if (b >= t.nb)
            return;
#pragma unroll
        for (int i = 0; i < N; i++)
            prefetch_l2(cu_wtile_row(t, tid / U + i * (M2_THREADS / U)) + b * 34 + 2 + 16 * h);
    }

    __device__ __forceinline__ void store(uint8_t *W, float *ws, int64_t kt, int tid, int64_t nb) const
    {
        const int j = tid % U, blk = j >> 1, h = j & 1;
        if (kt * M2_NSUB + blk >= nb)
            return;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int r = tid / U + i * (M2_THREADS / U);
            m2_st16(W + r * M2_LD + 32 * blk + 16 * h, q[i]);
            if (h == 0) {
                const float d = __half2float(__ushort_as_half(dh[i]));
                m2_ws<BM>(ws, blk, 0, r, d);
                m2_ws<BM>(ws, blk, 1, r, -CU_I2F_MAGICF * d);
            }
        }
    }
};

template <int T, int BM>
__device__ __forceinline__ void m2_store(const m2_raw<T, BM> &raw, uint8_t *W, float *ws, int64_t kt, int tid,
                                         int64_t nb)
{
    if constexpr (T == SI_TYPE_Q8_0)
        raw.store(W, ws, kt, tid, nb);
    else
        raw.store(W, ws, kt, tid);
}

// ---- activations: cp.async into stage s -----------------------------------

// Thread tid copies, per k-tile, the 16-byte chunks tid % 8 of tile
// columns tid / 8 + 32 i (i < 4) and the scales (and sums) of blocks
// tid / 128 + 2 i (i < 2) of column tid % 128.  Column c of the tile reads
// quantised column (c0 + c) / x_div; columns past the end are clamped to
// the last one (computed, never stored).  The source pointers are made
// once: the divisions by x_div are 64-bit.
struct m2_xsrc {
    static const int NC = M2_BN * (M2_KT / 16) / M2_THREADS, NS = M2_BN * M2_NSUB / M2_THREADS;
    const int8_t *q[NC];
    const float  *d, *s;
    int           ch;

    __device__ __forceinline__ void init(const int8_t *xq, const float *xd, const float *xs, int64_t in, int64_t ncols,
                                         int64_t x_div, int64_t c0, int tid)
    {
        ch = tid % (M2_KT / 16);
#pragma unroll
        for (int i = 0; i < NC; i++) {
            int64_t j = c0 + tid / (M2_KT / 16) + i * (M2_THREADS / (M2_KT / 16));
            j = j < ncols ? j : ncols - 1;
            q[i] = xq + (j / x_div) * in + 16 * ch;
        }
        int64_t j = c0 + tid % M2_BN;
        j = j < ncols ? j : ncols - 1;
        d = xd + (j / x_div) * (in / 32);
        s = xs + (j / x_div) * (in / 32);
    }
};

template <bool MIN>
__device__ __forceinline__ void m2_x_issue(uint8_t *X, float *xc, const m2_xsrc &x, int64_t in, int64_t kt, int tid)
{
    const int64_t k0 = kt * M2_KT;
    if (k0 + 16 * x.ch < in) {
#pragma unroll
        for (int i = 0; i < m2_xsrc::NC; i++)
            cp_async16(X + (tid / (M2_KT / 16) + i * (M2_THREADS / (M2_KT / 16))) * M2_LD + 16 * x.ch, x.q[i] + k0);
    }
    const int c = tid % M2_BN;
#pragma unroll
    for (int i = 0; i < m2_xsrc::NS; i++) {
        const int b = tid / M2_BN + i * (M2_THREADS / M2_BN);
        const int64_t gb = kt * M2_NSUB + b;
        if (gb < in / 32) {
            cp_async4(xc + (b * 2) * M2_BN + m2_cperm(c), x.d + gb);
            if (MIN)
                cp_async4(xc + (b * 2 + 1) * M2_BN + m2_cperm(c), x.s + gb);
        }
    }
}

// One 32-wide block b of the k-tile for this warp: fragments, scales,
// MT x NT mma and the scaled terms into acc.
template <int T, int BM>
__device__ __forceinline__ void m2_block(float (&acc)[BM / 32][4][4], const uint8_t *W, const uint8_t *X, const float *ws,
                                         const float *xc, int b, int a_off, int b_off, int wr, int wc, int g, int t4)
{
    const bool MIN = T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K;
    const int MT = BM / 32, NT = 4;
    uint32_t bf[NT][2];
    ldsm_b4(bf, X + b_off + 32 * b, M2_LD);
    float dx[NT][2], sx[NT][2];
    {
        const float4 *p = (const float4 *)(xc + (2 * b) * M2_BN + wc + 8 * t4);
        const float4 u0 = p[0], u1 = p[1];
        dx[0][0] = u0.x; dx[0][1] = u0.y; dx[1][0] = u0.z; dx[1][1] = u0.w;
        dx[2][0] = u1.x; dx[2][1] = u1.y; dx[3][0] = u1.z; dx[3][1] = u1.w;
        if (MIN) {
            const float4 *q = (const float4 *)(xc + (2 * b + 1) * M2_BN + wc + 8 * t4);
            const float4 v0 = q[0], v1 = q[1];
            sx[0][0] = v0.x; sx[0][1] = v0.y; sx[1][0] = v0.z; sx[1][1] = v0.w;
            sx[2][0] = v1.x; sx[2][1] = v1.y; sx[3][0] = v1.z; sx[3][1] = v1.w;
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        uint32_t af[4];
        ldsm_x4(af, W + a_off + mt * 16 * M2_LD + 32 * b);
        // this lane's rows g and g+8 of m-tile mt: float2 per scale
        const int ro = wr + g * (2 * MT) + 2 * mt;
        const float2 s0 = *(const float2 *)(ws + (b * 4 + 0) * BM + ro);
        const float2 s1 = *(const float2 *)(ws + (b * 4 + 1) * BM + ro);
        float2 s2 = make_float2(0.0f, 0.0f), s3 = s2;
        if (MIN || T == SI_TYPE_Q6_K)
            s2 = *(const float2 *)(ws + (b * 4 + 2) * BM + ro);
        if (T == SI_TYPE_Q6_K)
            s3 = *(const float2 *)(ws + (b * 4 + 3) * BM + ro);
        const float dw[2] = { s0.x, s0.y }, nm[2] = { s1.x, s1.y };
        const float q2[2] = { s2.x, s2.y }, q3[2] = { s3.x, s3.y };
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            if (T == SI_TYPE_Q6_K) {
                int lo[4], hi[4];
                mma_k16c(lo, af[0], af[1], bf[nt][0], CU_I2F_MAGIC);
                mma_k16c(hi, af[2], af[3], bf[nt][1], CU_I2F_MAGIC);
#pragma unroll
                for (int e = 0; e < 4; e++) {   // |lo|, |hi| <= 16 * 32 * 127 < 2^22
                    const int ri = e >> 1, ci = e & 1;
                    acc[mt][nt][e] = fmaf(m2_scale(lo[e], dw[ri], nm[ri]), dx[nt][ci], acc[mt][nt][e]);
                    acc[mt][nt][e] = fmaf(m2_scale(hi[e], q2[ri], q3[ri]), dx[nt][ci], acc[mt][nt][e]);
                }
            } else {
                int c[4];
                mma_k32c(c, af, bf[nt][0], bf[nt][1], CU_I2F_MAGIC);
#pragma unroll
                for (int e = 0; e < 4; e++) {   // |c| <= 32 * 31 * 127 < 2^22 (Q8_0: 32 * 128 * 127)
                    const int ri = e >> 1, ci = e & 1;
                    acc[mt][nt][e] = fmaf(m2_scale(c[e], dw[ri], nm[ri]), dx[nt][ci], acc[mt][nt][e]);
                    if (MIN)
                        acc[mt][nt][e] = fmaf(q2[ri], sx[nt][ci], acc[mt][nt][e]);
                }
            }
        }
    }
}

// ---- the kernel -------------------------------------------------------------
//
// Grid: x = column tiles (fastest: the blocks sharing a weight tile run
// together, so it comes from DRAM about once), y = row tiles.

template <int T, int BM>
__global__ void __launch_bounds__(M2_THREADS, BM == 64 ? 2 : 1)
mma2_kernel(cu_mm mm, const int8_t *xq, const float *xd, const float *xs)
{
    typedef m2_smem<BM> L;
    extern __shared__ __align__(16) uint8_t sm[];
    const bool MIN = T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K;
    const int MT = BM / 32, NT = 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wh = warp & 1, wn = warp >> 1;                 // warp's row half, column quarter
    const int wr = wh * (BM / 2), wc = wn * 32;
    // ldmatrix row addresses of this lane (see the header): A = matrices
    // (rows +0/+8, k +0/+16), B = (columns +0..7 / +8..15, k +0/+16)
    const int a_off = (wr + (lane & 7) + ((lane >> 3) & 1) * 8) * M2_LD + 16 * (lane >> 4);
    const int b_off = (wc + (lane & 7) + (lane >> 4) * 8) * M2_LD + 16 * ((lane >> 3) & 1);
    const int64_t nb = mm.in / 32, nkt = (mm.in + M2_KT - 1) / M2_KT;
    const cu_wtile wt = { mm.w, mm.row_bytes, (int64_t)blockIdx.y * BM, mm.rows, nb };
    const int64_t c0 = (int64_t)blockIdx.x * M2_BN;
    m2_xsrc xsrc;
    xsrc.init(xq, xd, xs, mm.in, mm.ncols, mm.x_div, c0, tid);
    uint8_t *const W0 = sm + L::W, *const X0 = sm + L::X;
    float *const WS0 = (float *)(sm + L::WS), *const XC0 = (float *)(sm + L::XC);
    const int WSZ = M2_NSUB * 4 * BM, XCZ = M2_NSUB * 2 * M2_BN;   // floats per scale buffer

    float acc[MT][NT][4];
    cu_mma_acc_zero<MT>(acc);

    // Prologue: X stages 0..XS-2 in flight (one commit group each, empty
    // ones too, so group counting stays uniform), W(0) decoded, W(1) in
    // registers.
#pragma unroll
    for (int s = 0; s < M2_XS - 1; s++) {
        if (s < nkt)
            m2_x_issue<MIN>(X0 + s * (M2_BN * M2_LD), XC0 + s * XCZ, xsrc, mm.in, s, tid);
        cp_async_commit();
    }
    m2_raw<T, BM> raw;
    raw.load(wt, 0, tid);
    m2_store<T, BM>(raw, W0, WS0, 0, tid, nb);
    if (nkt > 1)
        raw.load(wt, 1, tid);

    for (int64_t kt = 0; kt < nkt; kt++) {
        const int xs_ = (int)(kt % M2_XS), wb = (int)(kt & 1);
        cp_async_wait_group<M2_XS - 2>();   // this thread's X(kt) landed
        // Every thread's X(kt) and W(kt) are in; every warp is done with
        // tile kt-1, whose X stage and W buffer are refilled next.
        __syncthreads();
        const int64_t kn = kt + M2_XS - 1;
        if (kn < nkt)
            m2_x_issue<MIN>(X0 + (kn % M2_XS) * (M2_BN * M2_LD), XC0 + (kn % M2_XS) * XCZ, xsrc, mm.in, kn, tid);
        cp_async_commit();
        if (kt + 1 < nkt) {
            m2_store<T, BM>(raw, W0 + (wb ^ 1) * (BM * M2_LD), WS0 + (wb ^ 1) * WSZ, kt + 1, tid, nb);
            if (kt + 2 < nkt)
                raw.load(wt, kt + 2, tid);   // lands while the tensor cores work
        }
        // The registers hold one tile ahead, about one tile's compute time:
        // short of DRAM latency under load, so M2_PF tiles ahead go to L2.
        if (kt + M2_PF < nkt)
            raw.prefetch(wt, kt + M2_PF, tid);

        const uint8_t *W = W0 + wb * (BM * M2_LD), *X = X0 + xs_ * (M2_BN * M2_LD);
        const float *ws = WS0 + wb * WSZ, *xc = XC0 + xs_ * XCZ;
        const int64_t left = nb - kt * M2_NSUB;
        const int nsub = left < M2_NSUB ? (int)left : M2_NSUB;
        // (Q6_K, with twice the row scales, spills when all 4 are unrolled)
        if constexpr (T == SI_TYPE_Q6_K) {
#pragma unroll 1
            for (int b = 0; b < M2_NSUB; b++)
                m2_block<T, BM>(acc, W, X, ws, xc, b, a_off, b_off, wr, wc, g, t4);
        } else {
#pragma unroll
            for (int b = 0; b < M2_NSUB; b++) {
                if (b >= nsub)   // Q8_0 row tails only
                    break;
                m2_block<T, BM>(acc, W, X, ws, xc, b, a_off, b_off, wr, wc, g, t4);
            }
        }
    }

    cu_mma_acc_store<MT>(mm, acc, wt.r0, c0, wr, wc, g, t4);
}

// ---- launchers ---------------------------------------------------------

template <int T, int BM>
static cudaError_t mma2_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const int64_t gx = (mm->ncols + M2_BN - 1) / M2_BN, gy = (mm->rows + BM - 1) / BM;
    if (gx > 0x7fffffffLL || gy > 65535)
        return cudaErrorInvalidValue;
    const int bytes = m2_smem<BM>::TOTAL;
    // Above the 48 KiB default: opt in (per device and function; cheap).
    cudaError_t e = cudaFuncSetAttribute(mma2_kernel<T, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess)
        return e;
    // All of L1 that can be shared memory: two 64-row blocks per SM need
    // 140 KiB (the weights stream past L1 anyway).
    e = cudaFuncSetAttribute(mma2_kernel<T, BM>, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess)
        return e;
    mma2_kernel<T, BM><<<dim3((unsigned)gx, (unsigned)gy), M2_THREADS, bytes, s>>>(*mm, xq, xd, xs);
    return cudaGetLastError();
}

// bm 0: 128-row tiles unless they would leave a quarter of the SMs
// without a block (k/v projections, small models): then 64-row ones (two
// blocks per SM on sm_90: 128 registers, 70 KiB).
template <int T>
static cudaError_t mma2_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, int bm,
                               cudaStream_t s)
{
    static int n_sm = 0;   // of the current device; a benign race (same value)
    if (n_sm == 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0)
            n_sm = v;
        else
            n_sm = 1;
    }
    const int64_t blocks128 = ((mm->ncols + M2_BN - 1) / M2_BN) * ((mm->rows + 127) / 128);
    if (bm == 64 || (bm == 0 && blocks128 * 4 < (int64_t)n_sm * 3))
        return mma2_go<T, 64>(mm, xq, xd, xs, s);
    return mma2_go<T, 128>(mm, xq, xd, xs, s);
}

extern "C" int si_cu_matmul_mma2_bm(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, int bm,
                                    void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (mm->x_div < 1 || !si_cu_mma_ok(mm) || (bm != 0 && bm != 64 && bm != 128))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    CU_I8_TYPE_CASES(mma2_launch, mm, xq, xd, xs, bm, s)
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int si_cu_matmul_mma2(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    return si_cu_matmul_mma2_bm(mm, xq, xd, xs, 0, stream);
}
