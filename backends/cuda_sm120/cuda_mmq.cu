// backends/cuda_sm120/cuda_mmq.cu — the decode GEMV on int8 activations
// (knob matmul = dp4a), v1 (knob gemv = v1; the default v2 is
// cuda_gemv.cu): Q8_0, Q4_K, Q5_K, Q6_K weights.
//
// quant_x_kernel: every 32 consecutive activations of a column become
//   int8 q = rint(x * (1/d)), d = max|x| / 127 (one f32 scale per 32, and
//   the block's f32 sum), rounded exactly as the cpu backend does it.
// mmq_kernel: one warp per weight row.  A row is cut into "units" of 16
//   bytes of packed quants (Q4_K/Q5_K/Q6_K: 8 units per 256-element block,
//   32 weights each; Q8_0: 2 units per block, 16 weights each); lane l
//   takes units l, l+32, ..., so a warp reads consecutive 16-byte chunks of
//   the row.  Each unit is unpacked to int8 lanes and multiplied against the
//   int8 activations with __dp4a (int32 sums per 16 weights, exact); the
//   block scales/mins and the activation scales are applied in f32, the
//   way the cpu backend's int8 path does it (bit-identical inputs, the same
//   terms, only the f32 summation order differs):
//     sum_i w_i x_i = dx * dw * sum_i q_i xq_i - mw * sum_i x_i
//   with Q4_K/Q5_K's min mw against the block's exact f32 sum (added once
//   per 32-block, by the unit holding its first half); Q6_K's -32 offset is
//   exact in integers (sum (q-32) xq = sum q xq - 32 sum xq).
//   Then a warp-shuffle reduce.  Up to NT activation columns share each
//   decoded unit (decode with bs <= 8); expert products run NT = 1 with the
//   expert picked per column, as in cuda_matmul.cu.  A lane's units go U
//   at a time (U = 4 at one column), so U loads are in flight per lane.
//   Up to 1 + CU_MM_MORE products of the same input (the q/k/v, GDN
//   qkv/z/beta/alpha and ffn gate/up projections of decode) run as one
//   launch: their row blocks follow each other in the grid, so the GPU
//   fills and drains once instead of per product.
// The error against f32 activations is that of the int8 rounding of x:
// about 0.3% of |x|·|w| per dot, far below the weights' own quantisation.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"
#include "cuda_combine.cuh"

// knob pdl (cuda_internal.h): here, with the most-launched decode kernel
static bool pdl_on;
extern "C" void si_cu_pdl_set(bool on) { pdl_on = on; }
extern "C" bool si_cu_pdl_get(void) { return pdl_on; }

#define MMQ_WARPS 4
#define MMQ_UNROLL 4   // units a lane loads at once, one column (bench_gemv: U=2/4/8)

__global__ void quant_x_kernel(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d,
                               float *sum)
{
    cu_pdl_enter();
    const int64_t nb = in / 32, total = ncx * nb;
    const int lane = threadIdx.x & 31;
    for (int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; blk < total;
         blk += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        // (32-bit division where it fits: the 64-bit one is a long routine)
        const int64_t c = total <= 0x7fffffff ? (int)blk / (int)nb : blk / nb, i = (blk - c * nb) * 32 + lane;
        cu_q8_block32(x[c * x_stride + i], lane, q + c * in + i - lane, d + c * nb + i / 32, sum + c * nb + i / 32);
    }
}

__device__ __forceinline__ float h2f(const uint8_t *p)
{
    return __half2float(__ushort_as_half(__ldg((const unsigned short *)p)));
}

// sum_k dp4a(a[k], x[k]) over 16 bytes.
__device__ __forceinline__ void dot16(const uint32_t a[4], const uint32_t x[4], int &s)
{
#pragma unroll
    for (int k = 0; k < 4; k++)
        s = __dp4a((int)a[k], (int)x[k], s);
}

// The same and sum_k dp4a(1, x[k]) (Q6_K's -32 offset).  Only where the
// sum is used: the compiler keeps a dp4a whose result is dead (8 wasted
// of 16 per unit in the Q4_K/Q5_K/Q8_0 loops before).
__device__ __forceinline__ void dot16x(const uint32_t a[4], const uint32_t x[4], int &s, int &sx)
{
#pragma unroll
    for (int k = 0; k < 4; k++) {
        s = __dp4a((int)a[k], (int)x[k], s);
        sx = __dp4a(0x01010101, (int)x[k], sx);
    }
}

template <int T> struct mmq_traits;
template <> struct mmq_traits<SI_TYPE_Q8_0> { static const int units_per_elem_div = 16; };
template <> struct mmq_traits<SI_TYPE_Q4_K> { static const int units_per_elem_div = 32; };
template <> struct mmq_traits<SI_TYPE_Q5_K> { static const int units_per_elem_div = 32; };
template <> struct mmq_traits<SI_TYPE_Q6_K> { static const int units_per_elem_div = 32; };

// Adds unit u of weight row `row` against NT quantised columns to acc.
// xq[t]: int8 [in] of column t; xd[t]: its scales [in/32].
template <int T, int NT>
__device__ __forceinline__ void mmq_unit(const uint8_t *row, int64_t u, const int8_t *const xq[NT],
                                         const float *const xd[NT], const float *const xs[NT], int nt,
                                         float acc[NT])
{
    if (T == SI_TYPE_Q8_0) {
        const int64_t blk = u >> 1;
        const int h = (int)(u & 1);
        const uint8_t *B = row + blk * 34;
        uint32_t v[4];
        cu_ld16_a2(B + 2 + 16 * h, v);
        const float dw = h2f(B);
        const int64_t e0 = blk * 32 + 16 * h;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                uint32_t xv[4];
                cu_ld16(xq[t] + e0, xv);
                int s = 0;
                dot16(v, xv, s);
                acc[t] += dw * __ldg(xd[t] + blk) * (float)s;
            }
        }
    } else if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int64_t blk = u >> 3;
        const int i = (int)(u & 7), g = i >> 1, h = i & 1;
        const uint8_t *B = row + blk * (T == SI_TYPE_Q4_K ? 144 : 176);
        uint32_t v[4], lo[4], hi[4];
        cu_ld16(B + (T == SI_TYPE_Q4_K ? 16 : 48) + 32 * g + 16 * h, v);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            lo[k] = v[k] & 0x0F0F0F0Fu;
            hi[k] = (v[k] >> 4) & 0x0F0F0F0Fu;
        }
        if (T == SI_TYPE_Q5_K) {
            uint32_t qh[4];
            cu_ld16(B + 16 + 16 * h, qh);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                lo[k] |= ((qh[k] >> (2 * g)) & 0x01010101u) << 4;
                hi[k] |= ((qh[k] >> (2 * g + 1)) & 0x01010101u) << 4;
            }
        }
        // Several columns: the 16-byte header (d, dmin, 12 scale bytes) in
        // one vector load, shared by the block's 8 lanes (H200, 9b decode
        // at bs 8: 640 vs 568 tok/s).  One column keeps the word and byte
        // loads, which measured faster there (Q4_K 12288x4096: 1455 vs
        // 1166 GB/s; fewer registers).  Same values either way.
        float d, dmin;
        int sc0, m0, sc1, m1;
        if (NT > 1) {
            uint32_t hd[4];
            cu_ld16(B, hd);
            d = __half2float(__ushort_as_half((unsigned short)(hd[0] & 0xffff)));
            dmin = __half2float(__ushort_as_half((unsigned short)(hd[0] >> 16)));
            cu_scale_min_k4w(hd[1], hd[2], hd[3], 2 * g, sc0, m0);
            cu_scale_min_k4w(hd[1], hd[2], hd[3], 2 * g + 1, sc1, m1);
        } else {
            const uint32_t dm = __ldg((const uint32_t *)B);
            d = __half2float(__ushort_as_half((unsigned short)(dm & 0xffff)));
            dmin = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
            cu_scale_min_k4(B + 4, 2 * g, &sc0, &m0);
            cu_scale_min_k4(B + 4, 2 * g + 1, &sc1, &m1);
        }
        const float d0 = d * (float)sc0, d1 = d * (float)sc1, mm0 = dmin * (float)m0, mm1 = dmin * (float)m1;
        const int64_t e0 = blk * 256 + 64 * g + 16 * h, xb = blk * 8 + 2 * g;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                uint32_t xl[4], xh[4];
                cu_ld16(xq[t] + e0, xl);
                cu_ld16(xq[t] + e0 + 32, xh);
                int s0 = 0, s1 = 0;
                dot16(lo, xl, s0);
                dot16(hi, xh, s1);
                acc[t] += __ldg(xd[t] + xb) * d0 * (float)s0 + __ldg(xd[t] + xb + 1) * d1 * (float)s1;
                if (h == 0)
                    acc[t] -= mm0 * __ldg(xs[t] + xb) + mm1 * __ldg(xs[t] + xb + 1);
            }
        }
    } else {   // Q6_K
        const int64_t blk = u >> 3;
        const int i = (int)(u & 7), half = i >> 2, s = (i >> 1) & 1, k = i & 1;
        const uint8_t *B = row + blk * 210;
        uint32_t v[4], hv[4], qa[4], qb[4];
        cu_ld16_a2(B + 64 * half + 32 * s + 16 * k, v);
        cu_ld16_a2(B + 128 + 32 * half + 16 * k, hv);
        cu_unpack_q6(v, hv, s, qa, qb);
        const int8_t *scs = (const int8_t *)(B + 192 + 8 * half);
        const float d = h2f(B + 208);
        const float da = d * (float)scs[k + 2 * s], db = d * (float)scs[k + 2 * (s + 2)];
        const int64_t ea = blk * 256 + 128 * half + 32 * s + 16 * k, eb = ea + 64;
        const int64_t xa = blk * 8 + 4 * half + s, xb2 = xa + 2;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < nt) {
                uint32_t x1[4], x2[4];
                cu_ld16(xq[t] + ea, x1);
                cu_ld16(xq[t] + eb, x2);
                int sa = 0, sxa = 0, sb = 0, sxb = 0;
                dot16x(qa, x1, sa, sxa);
                dot16x(qb, x2, sb, sxb);
                acc[t] += __ldg(xd[t] + xa) * da * (float)(sa - 32 * sxa) +
                          __ldg(xd[t] + xb2) * db * (float)(sb - 32 * sxb);
            }
        }
    }
}

// A wide Q4_K unit (cu_mm.gemv_wide, bench A/B only): 32 bytes of packed
// quants, the 64 weights of sub-blocks 2g and 2g+1 of block u / 4, against
// NT columns: one scale decode per 32 bytes instead of per 16, the
// activation scales and sums as float2 loads.  The same integer sums per
// 32 weights; the f32 terms are added per 32 weights instead of per 16
// (a different order than the 16-byte units, within the int8 path's
// tolerance).
template <int NT>
__device__ __forceinline__ void mmq_unit_q4w(const uint8_t *row, int64_t u, const int8_t *const xq[NT],
                                             const float *const xd[NT], const float *const xs[NT], int nt,
                                             float acc[NT])
{
    const int64_t blk = u >> 2;
    const int g = (int)(u & 3);
    const uint8_t *B = row + blk * 144;
    uint32_t v[8], lo[8], hi[8];
    cu_ld16(B + 16 + 32 * g, v);
    cu_ld16(B + 32 + 32 * g, v + 4);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        lo[k] = v[k] & 0x0F0F0F0Fu;
        hi[k] = (v[k] >> 4) & 0x0F0F0F0Fu;
    }
    const uint32_t dm = __ldg((const uint32_t *)B);
    const float d = __half2float(__ushort_as_half((unsigned short)(dm & 0xffff)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(dm >> 16)));
    int sc0, m0, sc1, m1;
    cu_scale_min_k4(B + 4, 2 * g, &sc0, &m0);
    cu_scale_min_k4(B + 4, 2 * g + 1, &sc1, &m1);
    const float d0 = d * (float)sc0, d1 = d * (float)sc1, mm0 = dmin * (float)m0, mm1 = dmin * (float)m1;
    const int64_t e0 = blk * 256 + 64 * g, xb = blk * 8 + 2 * g;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < nt) {
            uint32_t xl[8], xh[8];
            cu_ld16(xq[t] + e0, xl);
            cu_ld16(xq[t] + e0 + 16, xl + 4);
            cu_ld16(xq[t] + e0 + 32, xh);
            cu_ld16(xq[t] + e0 + 48, xh + 4);
            int s0 = 0, s1 = 0;
            dot16(lo, xl, s0);
            dot16(lo + 4, xl + 4, s0);
            dot16(hi, xh, s1);
            dot16(hi + 4, xh + 4, s1);
            const float2 xdv = __ldg((const float2 *)(xd[t] + xb)), xsv = __ldg((const float2 *)(xs[t] + xb));
            acc[t] += xdv.x * d0 * (float)s0 + xdv.y * d1 * (float)s1;
            acc[t] -= mm0 * xsv.x + mm1 * xsv.y;
        }
    }
}

// Lanes per weight row at one column (L of mmq_kernel): a row of fewer
// than 4 * 32 units leaves lanes idle or with one unit each, and the
// warp's fixed work (pointers, expert lookup, the shuffle reduction)
// outweighs its loads: the 35b's expert GEMVs (512- and 2048-wide rows)
// issued ~370 instructions per 350-byte row.  So narrow rows share a warp,
// L lanes each, >= 4 units a lane where the row has them.
static inline __host__ __device__ int mmq_row_lanes(int64_t units)
{
    return units >= 128 ? 32 : units >= 64 ? 16 : units >= 32 ? 8 : 4;
}

// Column j of the product reads quantised column j / x_div.  U units of
// a lane are in one unrolled step, so their loads are in flight together.
// L lanes per row (32 / L rows a warp, L < 32 only at NT = 1): the lanes
// of a row reduce among themselves (the same shuffle order as
// cu_warp_sum at L = 32, so the same bits there).
// Blocks past product 0's rows belong to mm.more[0..n_more) in order
// (one launch for the products of one input; uniform per block); with
// per-column experts every product steps by the same expert_bytes (an
// expert's gate and up).
// O (cu_mm.gemv_order, Q4_K/Q5_K at one column, 32 lanes; bench A/B):
// unit ordinal v = lane + 32 k is mapped so that all lanes of an
// iteration hold the same sub-block pair g of 16 different super-blocks
// (v >> 7: a group of 16 blocks; g = (v >> 5) & 3; block 16 * group +
// (v & 31) / 2, half v & 1).  The unit's scale decode (cu_scale_min_k4's
// j < 4 branch) is then the same for the whole warp instead of divergent,
// and a warp's load is 16 runs of 32 contiguous bytes.  The same terms
// per unit; the f32 order of a lane's units differs.
// Dense products (no experts, whose picks come from the kernel before)
// ask the L2 for the block's weight rows first, then wait (cu_pdl_enter).
template <int T, int NT, int U, bool W = false, int L = 32, bool O = false>
__global__ void __launch_bounds__(32 * MMQ_WARPS) mmq_kernel(cu_mm mm, const int8_t *xq, const float *xd, const float *xs)
{
    constexpr int RB = MMQ_WARPS * (32 / L);   // rows a block
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sl = lane % L;
    int64_t bx = blockIdx.x, rows = mm.rows, ys = mm.y_stride;
    int64_t nbk = (rows + RB - 1) / RB;
    const uint8_t *wbase = mm.w;
    uint64_t rb = mm.row_bytes;
    float *y = mm.y;
    for (int k = 0; k < mm.n_more && bx >= nbk; k++) {
        bx -= nbk;
        wbase = mm.more[k].w;
        y = mm.more[k].y;
        rows = mm.more[k].rows;
        rb = mm.more[k].row_bytes;
        ys = mm.more[k].y_stride;
        nbk = (rows + RB - 1) / RB;
    }
    const int64_t r = (bx * MMQ_WARPS + warp) * (32 / L) + lane / L;
    if (mm.prefetch && mm.expert == NULL && blockIdx.y == 0 && sl == 0 && r < rows)
        cu_prefetch_l2(wbase + (uint64_t)r * rb, rb);
    cu_pdl_enter();
    if (L == 32 && r >= rows)
        return;
    // (L < 32: a lane past the rows still takes part in its warp's shuffles)
    const bool live = r < rows;
    const int64_t units = W ? mm.in / 64 : mm.in / mmq_traits<T>::units_per_elem_div, nb = mm.in / 32;
    for (int64_t j0 = (int64_t)blockIdx.y * NT; j0 < mm.ncols; j0 += (int64_t)gridDim.y * NT) {
        const int nt = mm.ncols - j0 < NT ? (int)(mm.ncols - j0) : NT;
        const uint8_t *w = wbase + (uint64_t)(live ? r : 0) * rb;
        if (mm.expert != NULL)
            w += (uint64_t)mm.expert[j0] * mm.expert_bytes;
        const int8_t *xqs[NT];
        const float *xds[NT], *xss[NT];
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int64_t c = (j0 + (t < nt ? t : 0)) / mm.x_div;
            xqs[t] = xq + c * mm.in;
            xds[t] = xd + c * nb;
            xss[t] = xs + c * nb;
            acc[t] = 0.0f;
        }
        // (O: whole groups of 16 blocks; units of a missing block skipped)
        const int64_t uend = O ? (units / 8 + 15) / 16 * 128 : units;
#pragma unroll U
        for (int64_t v = live ? sl : uend; v < uend; v += L) {
            int64_t u = v;
            if (O) {
                const int64_t vv = v & 127;
                u = (((v >> 7) << 4) + ((vv & 31) >> 1)) * 8 + (((vv >> 5) & 3) << 1) + (vv & 1);
                if (u >= units)
                    continue;
            }
            if (W)
                mmq_unit_q4w<NT>(w, u, xqs, xds, xss, nt, acc);
            else
                mmq_unit<T, NT>(w, u, xqs, xds, xss, nt, acc);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = acc[t];
#pragma unroll
            for (int o = L / 2; o > 0; o >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, o);
            if (sl == 0 && live && t < nt)
                y[(j0 + t) * ys + r] = s;
        }
    }
}

template <int T, int NT, int U, bool W = false, int L = 32, bool O = false>
static cudaError_t mmq_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const int64_t rb = MMQ_WARPS * (32 / L);
    int64_t gx = (mm->rows + rb - 1) / rb;
    for (int k = 0; k < mm->n_more; k++)
        gx += (mm->more[k].rows + rb - 1) / rb;
    int64_t gy = (mm->ncols + NT - 1) / NT;
    if (gy > 65535)
        gy = 65535;   // the kernel loops over the rest
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    return cu_launch(mmq_kernel<T, NT, U, W, L, O>, dim3((unsigned)gx, (unsigned)gy), dim3(32 * MMQ_WARPS), 0, s, *mm, xq, xd, xs);
}

// Lanes a row of mmq_kernel at one column: mmq_row_lanes of the row's
// units, 32 where mm->gemv_unroll asks for its U (bench A/B).
template <int T> static inline int mmq_lanes1(const cu_mm *mm)
{
    return mm->gemv_unroll > 0 ? 32 : mmq_row_lanes(mm->in / mmq_traits<T>::units_per_elem_div);
}

// One column: U = mm->gemv_unroll (bench A/B), else MMQ_UNROLL.
template <int T>
static cudaError_t mmq_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (T == SI_TYPE_Q4_K && mm->gemv_wide && mm->ncols == 1)   // (bench A/B only)
        return mmq_go<SI_TYPE_Q4_K, 1, 2, true>(mm, xq, xd, xs, s);
    if constexpr (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {   // (bench A/B only)
        if (mm->gemv_order && mm->ncols == 1 && mm->expert == NULL)
            return mmq_go<T, 1, MMQ_UNROLL, false, 32, true>(mm, xq, xd, xs, s);
    }
    if (mm->expert != NULL || mm->ncols == 1) {
        switch (mmq_lanes1<T>(mm)) {
        case 4: return mmq_go<T, 1, MMQ_UNROLL, false, 4>(mm, xq, xd, xs, s);
        case 8: return mmq_go<T, 1, MMQ_UNROLL, false, 8>(mm, xq, xd, xs, s);
        case 16: return mmq_go<T, 1, MMQ_UNROLL, false, 16>(mm, xq, xd, xs, s);
        default: break;
        }
        const int u = mm->gemv_unroll > 0 ? mm->gemv_unroll : MMQ_UNROLL;
        return u >= 8 ? mmq_go<T, 1, 8>(mm, xq, xd, xs, s)
             : u >= 4 ? mmq_go<T, 1, 4>(mm, xq, xd, xs, s)
                      : mmq_go<T, 1, 2>(mm, xq, xd, xs, s);
    }
    if (mm->ncols == 2)
        return mmq_go<T, 2, 2>(mm, xq, xd, xs, s);
    if (mm->ncols <= 4)
        return mmq_go<T, 4, 2>(mm, xq, xd, xs, s);
    return mmq_go<T, 8, 2>(mm, xq, xd, xs, s);
}

// ---- knob moe_sdc: the MOE's combine with its shared expert's
// down product, one token.  The shared down (H rows of F, one column) ran
// as an mmq_kernel launch between the routed down and the combine: a
// link of its own in the chain of dependent launches, though it needs
// nothing the routed down makes.  Here the combine's launch makes
// it: row r by L lanes exactly as mmq_kernel<T, 1, U, false, L> (the same
// units in the same order, the same shuffle reduction: its bits), and all
// of that BEFORE the programmatic-launch wait, since its input (the
// shared rows' int8 SwiGLU copy) comes from the launch two before this
// one, which completed before the launch before (the routed down) let
// this one start (cu_pdl_enter: the wait, then launch_dependents); the
// weights are not written in a step.  After the wait, the row's lane 0
// adds the routed experts' values and the gated shared value as
// combine_kernel does (cuda_combine.cuh), so the output's bits are the
// three launches'.
template <int T, int L>
__global__ void __launch_bounds__(32 * MMQ_WARPS) sdc_kernel(cu_mm sd, const int8_t *xq, const float *xd,
                                                              const float *xs, float *dst, const float *y,
                                                              const float *wts, const float *gamma, int K)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sl = lane % L;
    const int64_t r = ((int64_t)blockIdx.x * MMQ_WARPS + warp) * (32 / L) + lane / L;
    const bool live = r < sd.rows;   // (a lane past the rows still takes part in the shuffles)
    const int64_t units = sd.in / mmq_traits<T>::units_per_elem_div;
    const uint8_t *w = sd.w + (uint64_t)(live ? r : 0) * sd.row_bytes;
    const int8_t *const xqs[1] = { xq };
    const float *const xds[1] = { xd }, *const xss[1] = { xs };
    float acc[1] = { 0.0f };
    constexpr int U = MMQ_UNROLL;   // (a pragma does not expand macros)
#pragma unroll U
    for (int64_t v = live ? sl : units; v < units; v += L)
        mmq_unit<T, 1>(w, v, xqs, xds, xss, 1, acc);
    float s = acc[0];
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    cu_pdl_enter();   // (the routed experts' values come from the launch before)
    if (sl != 0 || !live)
        return;
    float wv[CB_K], yv[CB_K];
#pragma unroll
    for (int k = 0; k < CB_K; k++) {
        wv[k] = k < K ? wts[k] : 0.0f;
        yv[k] = k < K ? y[k * sd.rows + r] : 0.0f;
    }
    dst[r] = cb_sum(wv, yv, K, true, cb_gate(gamma[0]), s);
}

// Whether mmq_launch runs a one-column product of mm as the plain
// mmq_kernel<T, 1, MMQ_UNROLL, false, mmq_lanes1<T>(mm)> (the bench's
// A/B flags choose other forms).
static bool sdc_plain(const cu_mm *mm)
{
    return mm->gemv_unroll <= 0 && !mm->gemv_wide && !mm->gemv_order && mm->x_div == 1;
}

extern "C" bool si_cu_moe_sdc_ok(const cu_mm *sd, int K)
{
    return K >= 1 && K <= CB_K && sd->ncols == 1 && sd->expert == NULL && sd->n_more == 0 && sd->w2 == NULL &&
           sd->norm.ctr == NULL && sd->rows > 0 && si_cu_mmq_ok(sd) && sdc_plain(sd) &&
           !(sd->gemv_quad && si_cu_gemvq_ok(sd));
}

template <int T>
static cudaError_t sdc_go(const cu_mm *sd, const int8_t *xq, const float *xd, const float *xs, float *dst,
                          const float *y, const float *wts, const float *gamma, int K, cudaStream_t s)
{
    const int L = mmq_lanes1<T>(sd);
    const int64_t rb = MMQ_WARPS * (32 / L), gx = (sd->rows + rb - 1) / rb;
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    const dim3 g((unsigned)gx), b(32 * MMQ_WARPS);
    switch (L) {
    case 4: return cu_launch(sdc_kernel<T, 4>, g, b, 0, s, *sd, xq, xd, xs, dst, y, wts, gamma, K);
    case 8: return cu_launch(sdc_kernel<T, 8>, g, b, 0, s, *sd, xq, xd, xs, dst, y, wts, gamma, K);
    case 16: return cu_launch(sdc_kernel<T, 16>, g, b, 0, s, *sd, xq, xd, xs, dst, y, wts, gamma, K);
    default: return cu_launch(sdc_kernel<T, 32>, g, b, 0, s, *sd, xq, xd, xs, dst, y, wts, gamma, K);
    }
}

extern "C" int si_cu_moe_sdc(const cu_mm *sd, const int8_t *xq, const float *xd, const float *xs, float *dst,
                             const float *y, const float *wts, const float *gamma, int K, void *stream)
{
    if (!si_cu_moe_sdc_ok(sd, K))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (sd->type) {
    CU_I8_TYPE_CASES(sdc_go, sd, xq, xd, xs, dst, y, wts, gamma, K, s)
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" bool si_cu_mmq_ok(const cu_mm *mm)
{
    uint64_t align;
    switch (mm->type) {
    case SI_TYPE_Q4_K: case SI_TYPE_Q5_K: align = 16; break;   // uint4 loads of whole blocks
    case SI_TYPE_Q8_0: case SI_TYPE_Q6_K: align = 4; break;    // ld16_a2 from a 4-aligned start
    default: return false;
    }
    if (mm->in <= 0 || (mm->in % 256 != 0 && mm->type != SI_TYPE_Q8_0))
        return false;
    if (mm->in % 32 != 0 || (mm->expert == NULL && mm->ncols > SI_CU_MMQ_MAX_COLS))
        return false;
    const uint64_t row_al = align == 16 ? 16 : 2;   // rows and experts keep every unit's alignment
    if (mm->n_more < 0 || mm->n_more > CU_MM_MORE)
        return false;
    for (int k = 0; k < mm->n_more; k++)
        if ((uintptr_t)mm->more[k].w % align != 0 || mm->more[k].row_bytes % row_al != 0 || mm->more[k].rows < 0)
            return false;
    return (uintptr_t)mm->w % align == 0 && mm->row_bytes % row_al == 0 && mm->expert_bytes % row_al == 0;
}

extern "C" int si_cu_quantize_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d,
                                float *sum, void *stream)
{
    if (ncx <= 0 || in <= 0)
        return 0;
    if (in % 32 != 0)
        return (int)cudaErrorInvalidValue;
    return (int)cu_launch(quant_x_kernel, dim3(cu_q8_grid(ncx * (in / 32))), dim3(256), 0, (cudaStream_t)stream, x,
                          x_stride, in, ncx, q, d, sum);
}

// Knob gemv_mma: the products cuda_gemvm.cu takes where it measured
// faster than the dp4a kernels (H200, bench_gemv cols, alone, L2 flushed):
// from 4 columns (9b Q4_K 12288 x 4096: 25.2 vs 29.1 us at 4, 29.1 vs 49.0
// at 8; at 2 the dp4a kernel's 18.7 beat 25.3), and Q8_0 only where
// gemv_staged's kernel does not take it (35b 12352 x 2048: staged 20.5 vs
// 29-30 us at 4 columns, even at 8; 2048 x 4096 at 4: v1's 30.8 vs 15.2).
// Knob gemv_mma_cols moves the 4 (0: 4).
static bool mma_pick(const cu_mm *mm)
{
    if (!mm->gemv_mma || mm->ncols < (mm->gemv_mma_cols > 0 ? mm->gemv_mma_cols : 4) || !si_cu_gemvm_ok(mm))
        return false;
    return mm->type != SI_TYPE_Q8_0 || !(mm->gemv_quad && si_cu_gemvq_ok(mm));
}

extern "C" int si_cu_matmul_q8_v1(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (mm->x_div < 1 || !si_cu_mmq_ok(mm))
        return (int)cudaErrorInvalidValue;
    if (mma_pick(mm))   // (knob gemv_mma: cuda_gemvm.cu)
        return si_cu_gemvm(mm, xq, xd, xs, stream);
    if ((mm->gemv_quad && si_cu_gemvq_ok(mm)) || mm->norm.ctr != NULL ||   // (knob gemv_quad: cuda_gemvq.cu;
        mm->norm.part != NULL || mm->xr.part != NULL)                        //  a norm tail or a deferred
        return si_cu_gemvq(mm, xq, xd, xs, stream);                          //  norm: there or refused)
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    CU_I8_TYPE_CASES(mmq_launch, mm, xq, xd, xs, s)
    default: return (int)cudaErrorInvalidValue;
    }
}
