// backends/cuda_sm120/cuda_gemv.cu — the decode GEMV on int8 activations,
// v2 (knob gemv = v2, the default; v1 is cuda_mmq.cu's mmq_kernel):
// Q8_0, Q4_K, Q5_K, Q6_K weights, <= 8 columns or per-column experts.
//
// Same units and the same exact integer terms as v1 (see cuda_mmq.cu: a
// unit is 16 bytes of packed quants, 32 weights of a K-type or 16 of Q8_0;
// dp4a sums per 16 weights; Q4_K/Q5_K mins against the exact f32 block sum,
// once per 32-block; Q6_K's -32 in integers), so the cpu backend's int8
// path is matched up to f32 summation order.  What changes is how the
// memory system is kept busy, since a decode GEMV is a pure weight stream:
//  - a group of G lanes (32, or 16/8 when a row has fewer units, as the
//    512-wide expert down projections) walks a row, lane l of the group
//    taking units l, l+G, ...; the unit's position inside its block is then
//    fixed per lane, so its scales are decoded from registers without any
//    per-unit index arithmetic;
//  - each group handles R rows at once (4 at one column, or 1 where 4
//    would leave too few warps to fill the GPU; 2/1 at more columns; see
//    gv_rows, gv_rows1): the activations
//    of a unit are loaded once for R rows, and R independent weight loads
//    are issued back to back;
//  - rows of whole stages (in % 2048; Q8_0 in % 512; 16-byte aligned
//    rows) go through shared
//    memory: a stage of 8 blocks per row (Q8_0 16) is copied with
//    coalesced 16-byte loads while the previous one is multiplied
//    (gv_staged), so a full stage of R rows is in flight per warp, and
//    Q8_0/Q6_K's 2-byte aligned blocks cost no scattered 4-byte loads;
//  - other rows load unit by unit (gv_direct), the next unit's weights
//    before the current one is multiplied;
//  - Q4_K/Q5_K read their 16-byte block header (d, dmin, 12 scale bytes)
//    with one vector load (shared by the 8 lanes of a block) instead of
//    byte loads.
// Rows past the end are computed on the last row (in bounds) and not
// stored; no lane leaves early, so the shuffles always see the full warp.
//
// Two weight matrices of the same type and strides may be stacked in one
// launch (cu_mm.w2/rows_split: an expert's gate and up projections share
// their input), which saves moe_exec two launches per op.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

#define GEMV_WARPS 4

// The registers of one unit of one row (fields a type does not use are
// dead and vanish).
struct gv_unit {
    uint32_t q[4];   // packed quants (Q6_K: ql)
    uint32_t h[4];   // Q4_K/Q5_K: block header; Q6_K: qh
    uint32_t x[4];   // Q5_K: qh
    uint32_t s;      // Q8_0/Q6_K: f16 d (low 16 bits); Q6_K: its two int8 scales above
};

template <int T> struct gv_traits;
template <> struct gv_traits<SI_TYPE_Q8_0> { static const int per_unit = 16, bytes = 34, units = 2; };
template <> struct gv_traits<SI_TYPE_Q4_K> { static const int per_unit = 32, bytes = 144, units = 8; };
template <> struct gv_traits<SI_TYPE_Q5_K> { static const int per_unit = 32, bytes = 176, units = 8; };
template <> struct gv_traits<SI_TYPE_Q6_K> { static const int per_unit = 32, bytes = 210, units = 8; };

__device__ __forceinline__ float gv_h2f(uint32_t v)
{
    return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu)));
}

// 16 bytes at a 2-byte aligned shared-memory address (as cu_ld16_a2).
__device__ __forceinline__ void gv_lds16_a2(const uint8_t *p, uint32_t v[4])
{
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3) * 8;
    const uint32_t w4 = sh ? (uint32_t)*(const unsigned short *)(w + 4) : 0u;
    v[0] = __funnelshift_r(w[0], w[1], sh);
    v[1] = __funnelshift_r(w[1], w[2], sh);
    v[2] = __funnelshift_r(w[2], w[3], sh);
    v[3] = __funnelshift_r(w[3], w4, sh);
}

// Unit i of the block at B in shared memory (the staged path; the block
// is 16-byte aligned for Q4_K/Q5_K, 2-byte for Q8_0/Q6_K).
template <int T> __device__ __forceinline__ void gv_load_smem(const uint8_t *B, int i, gv_unit &w)
{
    if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int g = i >> 1, h = i & 1;
        const uint4 hd = *(const uint4 *)B;
        const uint4 qv = *(const uint4 *)(B + (T == SI_TYPE_Q4_K ? 16 : 48) + 32 * g + 16 * h);
        w.h[0] = hd.x; w.h[1] = hd.y; w.h[2] = hd.z; w.h[3] = hd.w;
        w.q[0] = qv.x; w.q[1] = qv.y; w.q[2] = qv.z; w.q[3] = qv.w;
        if (T == SI_TYPE_Q5_K) {
            const uint4 xv = *(const uint4 *)(B + 16 + 16 * h);
            w.x[0] = xv.x; w.x[1] = xv.y; w.x[2] = xv.z; w.x[3] = xv.w;
        }
    } else if (T == SI_TYPE_Q8_0) {
        gv_lds16_a2(B + 2 + 16 * i, w.q);
        w.s = *(const unsigned short *)B;
    } else {
        const int half = i >> 2, s = (i >> 1) & 1, k = i & 1;
        gv_lds16_a2(B + 64 * half + 32 * s + 16 * k, w.q);
        gv_lds16_a2(B + 128 + 32 * half + 16 * k, w.h);
        const uint8_t *scs = B + 192 + 8 * half;
        w.s = (uint32_t)*(const unsigned short *)(B + 208) | ((uint32_t)scs[k + 2 * s] << 16) |
              ((uint32_t)scs[k + 2 * (s + 2)] << 24);
    }
}

// Loads unit u of the row at `row` (i = u % units-per-block, fixed per lane).
template <int T> __device__ __forceinline__ void gv_load(const uint8_t *row, int64_t u, int i, gv_unit &w)
{
    const int64_t blk = u / gv_traits<T>::units;
    const uint8_t *B = row + blk * gv_traits<T>::bytes;
    if (T == SI_TYPE_Q8_0) {
        cu_ld16_a2(B + 2 + 16 * i, w.q);
        w.s = __ldg((const unsigned short *)B);
    } else if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int g = i >> 1, h = i & 1;
        cu_ld16(B, w.h);
        cu_ld16(B + (T == SI_TYPE_Q4_K ? 16 : 48) + 32 * g + 16 * h, w.q);
        if (T == SI_TYPE_Q5_K)
            cu_ld16(B + 16 + 16 * h, w.x);
    } else {   // Q6_K: 2-byte aligned blocks
        const int half = i >> 2, s = (i >> 1) & 1, k = i & 1;
        cu_ld16_a2(B + 64 * half + 32 * s + 16 * k, w.q);
        cu_ld16_a2(B + 128 + 32 * half + 16 * k, w.h);
        const uint8_t *scs = B + 192 + 8 * half;
        w.s = (uint32_t)__ldg((const unsigned short *)(B + 208)) |
              ((uint32_t)__ldg(scs + k + 2 * s) << 16) | ((uint32_t)__ldg(scs + k + 2 * (s + 2)) << 24);
    }
}

// sum_k dp4a(a[k], x[k]) over 16 bytes (and sum_k dp4a(1, x[k]) for Q6_K).
__device__ __forceinline__ int gv_dot(const uint32_t a[4], const uint32_t x[4])
{
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; k++)
        s = __dp4a((int)a[k], (int)x[k], s);
    return s;
}

__device__ __forceinline__ int gv_xsum(const uint32_t x[4])
{
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; k++)
        s = __dp4a(0x01010101, (int)x[k], s);
    return s;
}

// Adds unit u (position i in its block) of one row against NT columns.
template <int T, int NT>
__device__ __forceinline__ void gv_mul(const gv_unit &w, int64_t u, int i, const int8_t *const xq[NT],
                                       const float *const xd[NT], const float *const xs[NT], int nt, float acc[NT])
{
    if (T == SI_TYPE_Q8_0) {
        const int64_t blk = u >> 1, e0 = blk * 32 + 16 * i;
        const float dw = gv_h2f(w.s);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                uint32_t xv[4];
                cu_ld16(xq[t] + e0, xv);
                acc[t] += dw * __ldg(xd[t] + blk) * (float)gv_dot(w.q, xv);
            }
        }
    } else if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int64_t blk = u >> 3;
        const int g = i >> 1, h = i & 1;
        uint32_t lo[4], hi[4];
        cu_unpack_q45<T>(w.q, w.x, 2 * g, lo, hi);
        const float d = gv_h2f(w.h[0]), dmin = gv_h2f(w.h[0] >> 16);
        int sc0, m0, sc1, m1;
        cu_scale_min_k4w(w.h[1], w.h[2], w.h[3], 2 * g, sc0, m0);
        cu_scale_min_k4w(w.h[1], w.h[2], w.h[3], 2 * g + 1, sc1, m1);
        const float d0 = d * (float)sc0, d1 = d * (float)sc1, mm0 = dmin * (float)m0, mm1 = dmin * (float)m1;
        const int64_t e0 = blk * 256 + 64 * g + 16 * h, xb = blk * 8 + 2 * g;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                uint32_t xl[4], xh[4];
                cu_ld16(xq[t] + e0, xl);
                cu_ld16(xq[t] + e0 + 32, xh);
                const float2 dx = __ldg((const float2 *)(xd[t] + xb));
                acc[t] += dx.x * d0 * (float)gv_dot(lo, xl) + dx.y * d1 * (float)gv_dot(hi, xh);
                if (h == 0) {
                    const float2 sx = __ldg((const float2 *)(xs[t] + xb));
                    acc[t] -= mm0 * sx.x + mm1 * sx.y;
                }
            }
        }
    } else {   // Q6_K
        const int64_t blk = u >> 3;
        const int half = i >> 2, s = (i >> 1) & 1, k = i & 1;
        uint32_t qa[4], qb[4];
        cu_unpack_q6(w.q, w.h, s, qa, qb);
        const float d = gv_h2f(w.s);
        const float da = d * (float)(int8_t)(w.s >> 16), db = d * (float)(int8_t)(w.s >> 24);
        const int64_t ea = blk * 256 + 128 * half + 32 * s + 16 * k, eb = ea + 64;
        const int64_t xa = blk * 8 + 4 * half + s, xb2 = xa + 2;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                uint32_t x1[4], x2[4];
                cu_ld16(xq[t] + ea, x1);
                cu_ld16(xq[t] + eb, x2);
                const int sa = gv_dot(qa, x1) - 32 * gv_xsum(x1), sb = gv_dot(qb, x2) - 32 * gv_xsum(x2);
                acc[t] += __ldg(xd[t] + xa) * da * (float)sa + __ldg(xd[t] + xb2) * db * (float)sb;
            }
        }
    }
}

// Row r of the (possibly stacked) matrix for expert e.
__device__ __forceinline__ const uint8_t *gv_row(const cu_mm &mm, int64_t r, int64_t e)
{
    const uint8_t *base = mm.w;
    if (mm.w2 != NULL && r >= mm.rows_split) {
        base = mm.w2;
        r -= mm.rows_split;
    }
    return base + (uint64_t)r * mm.row_bytes + (uint64_t)e * mm.expert_bytes;
}

// The staged path.  Q8_0/Q6_K blocks (34/210 bytes) are only 2-byte
// aligned: unit by unit they take five 4-byte loads each, and the L1
// lookups of those scattered words, not DRAM, would set the pace; and a
// unit-by-unit prefetch keeps only one unit per row in flight.  So the
// warp copies a stage of SB blocks per row (whole 16-byte words: rows
// 16-aligned; Q8_0 544 bytes, Q4_K 1152, Q5_K 1408, Q6_K 1680) with
// coalesced 16-byte loads into its shared memory, and the lanes decode
// their units from there while the next stage's loads (R rows' worth) are
// in flight, in fewer registers than two units per row.  A lane takes
// units l, l+32, ... in the same order as the direct path (same sums, bit
// for bit).
template <int T> struct gv_stage {
    static const int SB = T == SI_TYPE_Q8_0 ? 16 : 8;                        // blocks per row and stage
    static const int BYTES = SB * gv_traits<T>::bytes, N16 = BYTES / 16;
    static const int NV = (N16 + 31) / 32;                                   // 16-byte words per lane
    static const int UPL = SB * gv_traits<T>::units / 32;                    // units per lane: 1 / 2
    static const int ELEMS = SB * (T == SI_TYPE_Q8_0 ? 32 : 256);            // row elements per stage
};

template <int T, int NT, int R>
__device__ __forceinline__ void gv_staged(const uint8_t *const w[R], int64_t in, int lane, const int8_t *const xqs[NT],
                                          const float *const xds[NT], const float *const xss[NT], int nt,
                                          float acc[R][NT])
{
    typedef gv_stage<T> S;
    __shared__ uint4 sm[GEMV_WARPS][R][S::N16];   // uint4: 16-byte aligned rows
    uint4(*mine)[S::N16] = sm[threadIdx.x >> 5];
    const int i = lane % gv_traits<T>::units;
    const int64_t stages = in / S::ELEMS;
    uint4 cur[R][S::NV];
#pragma unroll
    for (int q = 0; q < R; q++)
#pragma unroll
        for (int v = 0; v < S::NV; v++)
            if (lane + 32 * v < S::N16)
                cur[q][v] = __ldg((const uint4 *)w[q] + lane + 32 * v);
    for (int64_t st = 0; st < stages; st++) {
        __syncwarp();   // every lane is done with the previous stage
#pragma unroll
        for (int q = 0; q < R; q++)
#pragma unroll
            for (int v = 0; v < S::NV; v++)
                if (lane + 32 * v < S::N16)
                    mine[q][lane + 32 * v] = cur[q][v];
        __syncwarp();
        if (st + 1 < stages) {
#pragma unroll
            for (int q = 0; q < R; q++)
#pragma unroll
                for (int v = 0; v < S::NV; v++)
                    if (lane + 32 * v < S::N16)
                        cur[q][v] = __ldg((const uint4 *)(w[q] + (st + 1) * S::BYTES) + lane + 32 * v);
        }
#pragma unroll
        for (int m = 0; m < S::UPL; m++) {
            const int su = 32 * m + lane;   // unit inside the stage
            const int64_t u = st * (32 * S::UPL) + su;
#pragma unroll
            for (int q = 0; q < R; q++) {
                gv_unit wu;
                gv_load_smem<T>((const uint8_t *)mine[q] + (su / gv_traits<T>::units) * gv_traits<T>::bytes, i, wu);
                gv_mul<T, NT>(wu, u, i, xqs, xds, xss, nt, acc[q]);
            }
        }
    }
}

// The direct path: lane l of a group of G takes units l, l+G, ... of its
// R rows, loading the next unit's weights before multiplying the current.
template <int T, int NT, int R>
__device__ __forceinline__ void gv_direct(const uint8_t *const w[R], int64_t units, int l, int G,
                                          const int8_t *const xqs[NT], const float *const xds[NT],
                                          const float *const xss[NT], int nt, float acc[R][NT])
{
    // G is a multiple of the units per block: a lane's position in the
    // block stays the same along the row.
    const int i = l % gv_traits<T>::units;
    gv_unit cur[R];
    if (l < units) {
#pragma unroll
        for (int q = 0; q < R; q++)
            gv_load<T>(w[q], l, i, cur[q]);
    }
    for (int64_t u = l; u < units; u += G) {
        // the next unit's loads go out before this one is multiplied
        gv_unit nxt[R];
        const bool more = u + G < units;
        if (more) {
#pragma unroll
            for (int q = 0; q < R; q++)
                gv_load<T>(w[q], u + G, i, nxt[q]);
        }
#pragma unroll
        for (int q = 0; q < R; q++)
            gv_mul<T, NT>(cur[q], u, i, xqs, xds, xss, nt, acc[q]);
        if (more) {
#pragma unroll
            for (int q = 0; q < R; q++)
                cur[q] = nxt[q];
        }
    }
}

// Groups of G = 1 << lg lanes; a warp holds 32 / G groups, each R rows.
// Column j reads quantised column j / x_div.  ST: the staged path (G = 32).
template <int T, int NT, int R, bool ST>
__global__ void __launch_bounds__(32 * GEMV_WARPS, ST ? 2 : 3) gemv_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                                  const float *xs, int lg)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = 1 << lg, S = 32 >> lg, l = lane & (G - 1), slot = lane >> lg;
    const int64_t units = mm.in / gv_traits<T>::per_unit, nb = mm.in / 32;
    const int64_t r0 = ((int64_t)blockIdx.x * GEMV_WARPS + warp) * R * S + slot;
    for (int64_t j0 = (int64_t)blockIdx.y * NT; j0 < mm.ncols; j0 += (int64_t)gridDim.y * NT) {
        const int nt = mm.ncols - j0 < NT ? (int)(mm.ncols - j0) : NT;
        const int64_t e = mm.expert != NULL ? mm.expert[j0] : 0;
        const uint8_t *w[R];
#pragma unroll
        for (int q = 0; q < R; q++) {
            const int64_t r = r0 + (int64_t)q * S;
            w[q] = gv_row(mm, r < mm.rows ? r : mm.rows - 1, e);
        }
        const int8_t *xqs[NT];
        const float *xds[NT], *xss[NT];
        float acc[R][NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int64_t c = (j0 + (t < nt ? t : 0)) / mm.x_div;
            xqs[t] = xq + c * mm.in;
            xds[t] = xd + c * nb;
            xss[t] = xs + c * nb;
#pragma unroll
            for (int q = 0; q < R; q++)
                acc[q][t] = 0.0f;
        }
        if constexpr (ST)
            gv_staged<T, NT, R>(w, mm.in, lane, xqs, xds, xss, nt, acc);
        else
            gv_direct<T, NT, R>(w, units, l, G, xqs, xds, xss, nt, acc);
#pragma unroll
        for (int q = 0; q < R; q++) {
            const int64_t r = r0 + (int64_t)q * S;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float v = acc[q][t];
                for (int o = G >> 1; o > 0; o >>= 1)
                    v += __shfl_xor_sync(0xffffffffu, v, o);
                if (l == 0 && t < nt && r < mm.rows)
                    mm.y[(j0 + t) * mm.y_stride + r] = v;
            }
        }
    }
}

// Rows per group by columns: fewer when each unit feeds more columns (the
// accumulators and activations then take the registers).
template <int NT> struct gv_rows { static const int R = NT == 1 ? 4 : NT == 2 ? 2 : NT == 4 ? 2 : 1; };

// One column, small products (a 512-row k/v projection, the expert down
// projections of a few tokens): 4 rows a group would leave too few warps
// to fill the GPU (about 16 per SM on 132 SMs), so 1 row a group there.
// cu_mm.gemv_rows (1 or 4) forces either (bench A/B).
#define GV_MIN_WARPS 1024

// Whether the staged path takes the product: whole stages per row, every
// row start 16-byte aligned (and the bench's A/B switch off).
static bool gv_staged_ok(const cu_mm *mm)
{
    const int64_t elems = mm->type == SI_TYPE_Q8_0 ? gv_stage<SI_TYPE_Q8_0>::ELEMS   // 512
                                                   : gv_stage<SI_TYPE_Q4_K>::ELEMS;  // 2048, every K-type
    return !mm->gemv_direct && mm->in % elems == 0 && (uintptr_t)mm->w % 16 == 0 && mm->row_bytes % 16 == 0 &&
           mm->expert_bytes % 16 == 0 && (mm->w2 == NULL || (uintptr_t)mm->w2 % 16 == 0);
}

// log2 of the lanes per row: 32, or fewer when a row has fewer units
// (never below one block's units, so a lane's position in the block stays
// fixed).
static int gv_lanes_log2(const cu_mm *mm)
{
    const int64_t units = mm->in / (mm->type == SI_TYPE_Q8_0 ? 16 : 32);
    const int lo = mm->type == SI_TYPE_Q8_0 ? 1 : 3;
    int lg = 5;
    while (lg > lo && ((int64_t)1 << lg) > units)
        lg--;
    return lg;
}

// Blocks along the rows and the columns for R rows a group.
static void gv_grid(const cu_mm *mm, int NT, int R, int lg, int64_t *gx, int64_t *gy)
{
    const int64_t per_block = (int64_t)GEMV_WARPS * R * (32 >> lg);
    *gx = (mm->rows + per_block - 1) / per_block;
    *gy = (mm->ncols + NT - 1) / NT;
    if (*gy > 65535)
        *gy = 65535;   // the kernel loops over the rest
}

// Rows a group for one column: 4, or 1 for small products (GV_MIN_WARPS).
static int gv_rows1(const cu_mm *mm, int lg)
{
    if (mm->gemv_rows == 1 || mm->gemv_rows == 4)
        return mm->gemv_rows;
    int64_t gx, gy;
    gv_grid(mm, 1, 4, lg, &gx, &gy);
    return gx * gy * GEMV_WARPS < GV_MIN_WARPS ? 1 : 4;
}

// ---- launchers (tests/cuda/emu/run-mma-emu.sh cuts from here to gemv_ok)
template <int T, int NT, int R>
static cudaError_t gemv_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const int lg = gv_lanes_log2(mm);
    int64_t gx, gy;
    gv_grid(mm, NT, R, lg, &gx, &gy);
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const dim3 grid((unsigned)gx, (unsigned)gy);
    if (gv_staged_ok(mm))
        gemv_kernel<T, NT, R, true><<<grid, 32 * GEMV_WARPS, 0, s>>>(*mm, xq, xd, xs, lg);
    else
        gemv_kernel<T, NT, R, false><<<grid, 32 * GEMV_WARPS, 0, s>>>(*mm, xq, xd, xs, lg);
    return cudaGetLastError();
}

template <int T>
static cudaError_t gemv_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->expert != NULL || mm->ncols == 1)
        return gv_rows1(mm, gv_lanes_log2(mm)) == 1 ? gemv_go<T, 1, 1>(mm, xq, xd, xs, s)
                                                     : gemv_go<T, 1, gv_rows<1>::R>(mm, xq, xd, xs, s);
    if (mm->ncols == 2)
        return gemv_go<T, 2, gv_rows<2>::R>(mm, xq, xd, xs, s);
    if (mm->ncols <= 4)
        return gemv_go<T, 4, gv_rows<4>::R>(mm, xq, xd, xs, s);
    return gemv_go<T, 8, gv_rows<8>::R>(mm, xq, xd, xs, s);
}

extern "C" bool si_cu_gemv_ok(const cu_mm *mm)
{
    if (!si_cu_mmq_ok(mm))
        return false;
    if (mm->w2 == NULL)
        return true;
    const uint64_t align = mm->type == SI_TYPE_Q4_K || mm->type == SI_TYPE_Q5_K ? 16 : 4;
    return (uintptr_t)mm->w2 % align == 0 && mm->rows_split > 0 && mm->rows_split < mm->rows;
}

extern "C" int si_cu_matmul_q8(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (mm->x_div < 1 || !si_cu_gemv_ok(mm) || mm->norm.ctr != NULL)   // (a norm tail: cuda_gemvq.cu only)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    CU_I8_TYPE_CASES(gemv_launch, mm, xq, xd, xs, s)
    default: return (int)cudaErrorInvalidValue;
    }
}
