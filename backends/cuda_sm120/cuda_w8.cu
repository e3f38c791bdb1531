// backends/cuda_sm120/cuda_w8.cu — prefill GEMM v3 (knob mma_weights =
// i8): the weights requantised to plain int8 rows, so the tensor cores
// carry the int32 sums over 128-wide k blocks and the f32 work is one
// epilogue per 128 instead of per 32.
//
// Why: v2 (cuda_mma2.cu) multiplies the GGUF blocks exactly, but every
// 32-wide block needs its own scale terms per output element (3 FFMA for
// Q4_K), ~19 issued instructions per mma.m16n8k32; under ncu on the H200
// it issues on 36% of cycles at 12.5% occupancy and reaches ~150 TOPS.
// Here each weight row is split into 128-wide blocks, each block stored as
// int8 with one f32 scale (max |w| / 127, rounded to 16 significant bits:
// see below), and the activations likewise per (column, 128 block).
//   y[c][r] = sum_kb sw[r][kb] * sx[c][kb] * isum(r, c, kb),
//   isum = sum over the block of q_w * q_x (int32, |isum| <= 128*127*127
//   < 2^22).
// The mma chain of a block starts from C = bits of M = 1.5 * 2^23, so its
// result read as a float is M + isum exactly; with nsw = -M * sw exact
// (sw has <= 16 significant bits), fmaf(M + isum, sw, nsw) is isum * sw
// rounded once, and a second fmaf adds it times sx: 2 FFMA per output
// element per 128 k (v2: 12 per 32 k for Q4_K).
//
// What it costs: a second rounding of the weights.  An int8 step is
// max|w| / 127 of the 128-wide block, against the GGUF step d * sc of each
// 32- (16-) wide sub-block: well below it where the sub-block scales are
// alike, up to about a Q4 step where one sub-block's scale is 1/8 of its
// neighbours'.  Activations: one int8 scale per 128 instead of per 32.
// The exact path is one knob away (mma_weights = gguf).
//
// Scale blocks of G = 128 (knob w8_block = 128, the default) or G = 32
// (w8_block = 32): per 32 the weights keep nearly all of their GGUF
// precision (the int8 step is at most 1/8 of a Q4_K step; Q8_0 blocks are
// requantised onto themselves) and the activations are the dp4a path's
// own (si_cu_quantize_x, the cpu's rounding), at 2 FFMA per element per
// 32: the A/B of speed against precision.
//
// Requantised per call (si_cu_w8_weights: the weight matrix into the
// backend's scratch, about 1.5 bytes read+written per weight, a few % of
// a 2048-column GEMM), not cached: no memory beyond one matrix.
//
// Tiling: 128 x 128 block tile, 8 warps of 64 rows x 32 columns, k-tiles
// of 128 bytes (knob w8_ktile = 128, the default; 64 at w8_block = 32 and
// where the shared memory does not fit) through STAGES cp.async stages.
// 128 halves the block barriers and cp.async waits of 64: H200 prefill at
// 4096 tokens, 9b 17,679 vs 14,619 tok/s, 35b-a3b 19,543 vs 18,801.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_ptx.cuh"
#include "cuda_mma_dec.cuh"
#include "cuda_w8.cuh"   // the requantiser and the epilogue (shared with plugins/moe_grouped_i8)

#define W8_BN      128
#define W8_THREADS 256
#ifndef W8_STAGES
#define W8_STAGES  4
#endif

// One stage of k-tiles of KT bytes (128, knob w8_ktile, or 64):
// the weight tile A[BM][LD], the activation tile B[BN][LD] (rows padded
// by 16 bytes: ldmatrix conflict-free), then per scale block of the stage
// (G = 128: 1 (KT 64: the 128-block's); G = 32: KT / 32) the scales of
// the BM rows and of the BN columns.
template <int KT, int G> struct w8_geom {
    static constexpr int LD = KT + 16;
    static constexpr int A = 0;
    static constexpr int B = W8_BM * LD;
    static constexpr int SC = B + W8_BN * LD;
    static constexpr int SETS = G == 128 ? 1 : KT / 32;   // scale sets a stage
    static constexpr int STAGE = SC + SETS * (W8_BM + W8_BN) * 4;
    static constexpr int SMEM = W8_STAGES * STAGE;
};

// ---- the GEMM -----------------------------------------------------------------

// Stage st <- k-tile kt: thread tid copies 16-byte chunks tid, tid + 256,
// ... of each tile (row idx / (KT / 16), chunk idx % (KT / 16)) and its
// scales: tid < 128 the row tid's, else column tid - 128's, of the stage's
// scale blocks (set j 1 KB after set j - 1).  Rows and columns past the
// end are clamped to the last (computed, never stored).
template <int KT> struct w8_src {
    static constexpr int N = W8_BM * KT / 16 / W8_THREADS;   // chunks a thread a tile
    const int8_t *a[N], *b[N];
    const float  *s;
};

template <int G, int KT>
__device__ __forceinline__ void w8_issue(uint8_t *st, const w8_src<KT> &src, int64_t kt, int tid)
{
    typedef w8_geom<KT, G> M;
#pragma unroll
    for (int i = 0; i < w8_src<KT>::N; i++) {
        const int idx = tid + i * W8_THREADS, row = idx / (KT / 16), ch = idx % (KT / 16);
        cp_async16(st + M::A + row * M::LD + 16 * ch, src.a[i] + kt * KT);
        cp_async16(st + M::B + row * M::LD + 16 * ch, src.b[i] + kt * KT);
    }
    if (G == 128) {
        cp_async4(st + M::SC + 4 * tid, src.s + kt * KT / 128);
    } else {
#pragma unroll
        for (int j = 0; j < KT / 32; j++)
            cp_async4(st + M::SC + 1024 * j + 4 * tid, src.s + (KT / 32) * kt + j);
    }
}

// Grid: x = column tiles (fastest: blocks sharing a weight tile run
// together), y = row tiles.  in % 256 == 0 (si_cu_w8_ok).  A 128-block
// is TPB = 128 / KT k-tiles (an unrolled loop, so the chain start and the
// epilogue are fixed in the code), a k-tile KT / 32 k32 steps.
template <int G, int KT>
__global__ void __launch_bounds__(W8_THREADS, 1)
w8_kernel(cu_mm mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
    typedef w8_geom<KT, G> M;
    constexpr int TPB = 128 / KT, NK = KT / 32;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wr = (warp & 1) * 64, wc = (warp >> 1) * 32;
    // ldmatrix row addresses (cuda_mma2.cu's header): A = (rows +0/+8, k
    // +0/+16), B = (columns +0..7 / +8..15, k +0/+16)
    const int a_off = M::A + (wr + (lane & 7) + ((lane >> 3) & 1) * 8) * M::LD + 16 * (lane >> 4);
    const int b_off = M::B + (wc + (lane & 7) + (lane >> 4) * 8) * M::LD + 16 * ((lane >> 3) & 1);
    const int64_t r0 = (int64_t)blockIdx.y * W8_BM, c0 = (int64_t)blockIdx.x * W8_BN, nkb = mm.in / 128;
    const int64_t nkt = TPB * nkb, nsb = mm.in / G;

    w8_src<KT> src;
#pragma unroll
    for (int i = 0; i < w8_src<KT>::N; i++) {
        const int row = (tid + i * W8_THREADS) / (KT / 16), ch = (tid + i * W8_THREADS) % (KT / 16);
        int64_t r = r0 + row, c = c0 + row;
        r = r < mm.rows ? r : mm.rows - 1;
        c = (c < mm.ncols ? c : mm.ncols - 1) / mm.x_div;
        src.a[i] = wq + r * mm.in + 16 * ch;
        src.b[i] = xq + c * mm.in + 16 * ch;
    }
    {
        int64_t r = r0 + tid, c = c0 + tid - W8_BM;
        r = r < mm.rows ? r : mm.rows - 1;
        c = (c < mm.ncols ? c : mm.ncols - 1) / mm.x_div;
        src.s = tid < W8_BM ? ws + r * nsb : xd + c * nsb;
    }

    float acc[4][4][4];
    cu_mma_acc_zero<4>(acc);
    int ci[4][4][4];

#pragma unroll
    for (int s = 0; s < W8_STAGES - 1; s++) {
        if (s < nkt)
            w8_issue<G, KT>(sm + s * M::STAGE, src, s, tid);
        cp_async_commit();
    }
    for (int64_t kb = 0; kb < nkb; kb++) {
#pragma unroll
        for (int h = 0; h < TPB; h++) {
            const int64_t kt = TPB * kb + h;
            cp_async_wait_group<W8_STAGES - 2>();   // this thread's k-tile kt landed
            // every thread's kt is in; every warp is done with kt - 1,
            // whose stage is refilled next
            __syncthreads();
            const int64_t kn = kt + W8_STAGES - 1;
            if (kn < nkt)
                w8_issue<G, KT>(sm + (kn % W8_STAGES) * M::STAGE, src, kn, tid);
            cp_async_commit();
            const uint8_t *st = sm + (kt % W8_STAGES) * M::STAGE;
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                uint32_t bf[4][2], af[4][4];
                ldsm_b4(bf, st + b_off + 32 * kk, M::LD);
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
                    ldsm_x4(af[mt], st + a_off + mt * 16 * M::LD + 32 * kk);
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
                        if (G == 32 || (h == 0 && kk == 0))
                            mma_k32c(ci[mt][nt], af[mt], bf[nt][0], bf[nt][1], CU_I2F_MAGIC);
                        else
                            mma_k32acc(ci[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                    }
                if (G == 32)
                    w8_epilogue(acc, ci, (const float *)(st + M::SC + 1024 * kk), wr, wc, g, t4);
            }
            if (G == 128 && h == TPB - 1)
                w8_epilogue(acc, ci, (const float *)(st + M::SC), wr, wc, g, t4);
        }
    }
    cp_async_wait_group<0>();
    cu_mma_acc_store<4>(mm, acc, r0, c0, wr, wc, g, t4);
}

// ---- launchers ----------------------------------------------------------------

static unsigned w8_grid(int64_t warps)
{
    const int64_t blocks = (warps + 7) / 8;
    return (unsigned)(blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

template <int T>
static cudaError_t w8_weights_go(const uint8_t *w, uint64_t row_bytes, int64_t rows, int64_t in, int g, int8_t *wq,
                                 float *ws, cudaStream_t s)
{
    const unsigned grid = w8_grid(rows * ((in + 255) / 256));
    const w8_gguf<T> src = { w, row_bytes };
    if (g == 32)
        w8_rows_kernel<32><<<grid, 256, 0, s>>>(src, rows, in, wq, ws);
    else
        w8_rows_kernel<128><<<grid, 256, 0, s>>>(src, rows, in, wq, ws);
    return cudaGetLastError();
}

extern "C" bool si_cu_w8_ok(const cu_mm *mm)
{
    switch (mm->type) {
    case SI_TYPE_Q8_0: case SI_TYPE_Q4_K: case SI_TYPE_Q5_K: case SI_TYPE_Q6_K: break;
    default: return false;
    }
    return mm->in > 0 && mm->in % 256 == 0 && mm->expert == NULL && mm->w2 == NULL && mm->n_more == 0 &&
           mm->x_div >= 1 && (mm->rows + W8_BM - 1) / W8_BM <= 65535;
}

extern "C" int si_cu_w8_weights(const cu_mm *mm, int g, int8_t *wq, float *ws, void *stream)
{
    if (mm->rows <= 0)
        return 0;
    if (!si_cu_w8_ok(mm) || (g != 32 && g != 128))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_Q8_0: return (int)w8_weights_go<SI_TYPE_Q8_0>(mm->w, mm->row_bytes, mm->rows, mm->in, g, wq, ws, s);
    case SI_TYPE_Q4_K: return (int)w8_weights_go<SI_TYPE_Q4_K>(mm->w, mm->row_bytes, mm->rows, mm->in, g, wq, ws, s);
    case SI_TYPE_Q5_K: return (int)w8_weights_go<SI_TYPE_Q5_K>(mm->w, mm->row_bytes, mm->rows, mm->in, g, wq, ws, s);
    case SI_TYPE_Q6_K: return (int)w8_weights_go<SI_TYPE_Q6_K>(mm->w, mm->row_bytes, mm->rows, mm->in, g, wq, ws, s);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int si_cu_w8_quantize_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d,
                                   void *stream)
{
    if (ncx <= 0 || in <= 0)
        return 0;
    if (in % 128 != 0)
        return (int)cudaErrorInvalidValue;
    const w8_f32 src = { x, x_stride };
    w8_rows_kernel<128><<<w8_grid(ncx * ((in + 255) / 256)), 256, 0, (cudaStream_t)stream>>>(src, ncx, in, q, d);
    return (int)cudaGetLastError();
}

template <int G, int KT>
static cudaError_t w8_go(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd,
                         cudaStream_t s)
{
    const int64_t gx = (mm->ncols + W8_BN - 1) / W8_BN, gy = (mm->rows + W8_BM - 1) / W8_BM;
    const int smem = w8_geom<KT, G>::SMEM;
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    cudaError_t e = cudaFuncSetAttribute(w8_kernel<G, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess)
        return e;
    w8_kernel<G, KT><<<dim3((unsigned)gx, (unsigned)gy), W8_THREADS, smem, s>>>(*mm, wq, ws, xq, xd);
    return cudaGetLastError();
}

// KT = 128 only at G = 128 (at G = 32 the scale sets of a stage spill
// registers) and where it fits; else 64.
template <int G>
static cudaError_t w8_pick(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd,
                           cudaStream_t s)
{
    if (G == 128 && mm->w8_ktile == 128 && cu_smem_fits(w8_geom<128, 128>::SMEM))
        return w8_go<128, 128>(mm, wq, ws, xq, xd, s);
    return w8_go<G, 64>(mm, wq, ws, xq, xd, s);
}

extern "C" int si_cu_matmul_w8(const cu_mm *mm, int g, const int8_t *wq, const float *ws, const int8_t *xq,
                               const float *xd, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (!si_cu_w8_ok(mm) || (g != 32 && g != 128))
        return (int)cudaErrorInvalidValue;
    if (g == 128 && si_cu_w8wg_ok(mm))
        return si_cu_matmul_w8wg(mm, wq, ws, xq, xd, stream);
    cudaStream_t s = (cudaStream_t)stream;
    return (int)(g == 32 ? w8_pick<32>(mm, wq, ws, xq, xd, s) : w8_pick<128>(mm, wq, ws, xq, xd, s));
}
