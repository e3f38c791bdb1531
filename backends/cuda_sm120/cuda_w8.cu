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
// of 64 bytes through STAGES cp.async stages (rows padded to 80 bytes:
// ldmatrix conflict-free); the k-tiles of one 128 block are an unrolled
// pair, so the chain start and the epilogue are fixed in the code.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_ptx.cuh"
#include "cuda_mma_dec.cuh"
#include "cuda_w8.cuh"   // the requantiser and the epilogue (shared with plugins/moe_grouped_i8)

#define W8_BN      128
#define W8_KT      64                        // k bytes per stage
#define W8_LD      80                        // smem bytes per tile row
#define W8_THREADS 256
#ifndef W8_STAGES
#define W8_STAGES  4
#endif

// One stage: the weight tile A[BM][LD], the activation tile B[BN][LD],
// then per scale block of the stage (G = 128: 1, the 128-block's; G = 32:
// 2) the scales of the BM rows and of the BN columns.
#define W8_A      0
#define W8_B      (W8_BM * W8_LD)
#define W8_SC     (W8_B + W8_BN * W8_LD)
#define W8_STAGE  (W8_SC + 2 * (W8_BM + W8_BN) * 4)
#define W8_SMEM   (W8_STAGES * W8_STAGE)

// ---- the GEMM -----------------------------------------------------------------

// Stage st <- k-tile kt: thread tid copies 16-byte chunks tid and tid +
// 256 of each tile (row idx / 4, chunk idx % 4) and its scales: tid < 128
// the row tid's, else column tid - 128's, of 128-block kt / 2 (G = 128)
// or of 32-blocks 2 kt and 2 kt + 1 (G = 32).  Rows and columns past the
// end are clamped to the last (computed, never stored).
struct w8_src {
    const int8_t *a[2], *b[2];
    const float  *s;
};

template <int G> __device__ __forceinline__ void w8_issue(uint8_t *st, const w8_src &src, int64_t kt, int tid)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int idx = tid + i * W8_THREADS, row = idx >> 2, ch = idx & 3;
        cp_async16(st + W8_A + row * W8_LD + 16 * ch, src.a[i] + kt * W8_KT);
        cp_async16(st + W8_B + row * W8_LD + 16 * ch, src.b[i] + kt * W8_KT);
    }
    // set j at W8_SC + j * 1 KB: rows' then columns' (tid 128.. land there)
    if (G == 128) {
        cp_async4(st + W8_SC + 4 * tid, src.s + (kt >> 1));
    } else {
        cp_async4(st + W8_SC + 4 * tid, src.s + 2 * kt);
        cp_async4(st + W8_SC + 1024 + 4 * tid, src.s + 2 * kt + 1);
    }
}

// Grid: x = column tiles (fastest: blocks sharing a weight tile run
// together), y = row tiles.  in % 256 == 0 (si_cu_w8_ok).
template <int G>
__global__ void __launch_bounds__(W8_THREADS, 1)
w8_kernel(cu_mm mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wr = (warp & 1) * 64, wc = (warp >> 1) * 32;
    // ldmatrix row addresses (cuda_mma2.cu's header): A = (rows +0/+8, k
    // +0/+16), B = (columns +0..7 / +8..15, k +0/+16)
    const int a_off = W8_A + (wr + (lane & 7) + ((lane >> 3) & 1) * 8) * W8_LD + 16 * (lane >> 4);
    const int b_off = W8_B + (wc + (lane & 7) + (lane >> 4) * 8) * W8_LD + 16 * ((lane >> 3) & 1);
    const int64_t r0 = (int64_t)blockIdx.y * W8_BM, c0 = (int64_t)blockIdx.x * W8_BN, nkb = mm.in / 128;
    const int64_t nkt = 2 * nkb, nsb = mm.in / G;

    w8_src src;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = (tid + i * W8_THREADS) >> 2, ch = (tid + i * W8_THREADS) & 3;
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
            w8_issue<G>(sm + s * W8_STAGE, src, s, tid);
        cp_async_commit();
    }
    for (int64_t kb = 0; kb < nkb; kb++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t kt = 2 * kb + h;
            cp_async_wait_group<W8_STAGES - 2>();   // this thread's k-tile kt landed
            // every thread's kt is in; every warp is done with kt - 1,
            // whose stage is refilled next
            __syncthreads();
            const int64_t kn = kt + W8_STAGES - 1;
            if (kn < nkt)
                w8_issue<G>(sm + (kn % W8_STAGES) * W8_STAGE, src, kn, tid);
            cp_async_commit();
            const uint8_t *st = sm + (kt % W8_STAGES) * W8_STAGE;
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t bf[4][2], af[4][4];
                ldsm_b4(bf, st + b_off + 32 * kk, W8_LD);
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
                    ldsm_x4(af[mt], st + a_off + mt * 16 * W8_LD + 32 * kk);
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
                        if (G == 32 || (h == 0 && kk == 0))
                            mma_k32c(ci[mt][nt], af[mt], bf[nt][0], bf[nt][1], W8_MAGIC);
                        else
                            mma_k32acc(ci[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                    }
                if (G == 32)
                    w8_epilogue(acc, ci, (const float *)(st + W8_SC + 1024 * kk), wr, wc, g, t4);
            }
            if (G == 128 && h == 1)
                w8_epilogue(acc, ci, (const float *)(st + W8_SC), wr, wc, g, t4);
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

template <int G>
static cudaError_t w8_go(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd,
                         cudaStream_t s)
{
    const int64_t gx = (mm->ncols + W8_BN - 1) / W8_BN, gy = (mm->rows + W8_BM - 1) / W8_BM;
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    cudaError_t e = cudaFuncSetAttribute(w8_kernel<G>, cudaFuncAttributeMaxDynamicSharedMemorySize, W8_SMEM);
    if (e != cudaSuccess)
        return e;
    w8_kernel<G><<<dim3((unsigned)gx, (unsigned)gy), W8_THREADS, W8_SMEM, s>>>(*mm, wq, ws, xq, xd);
    return cudaGetLastError();
}

extern "C" int si_cu_matmul_w8(const cu_mm *mm, int g, const int8_t *wq, const float *ws, const int8_t *xq,
                               const float *xd, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (!si_cu_w8_ok(mm) || (g != 32 && g != 128))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    return (int)(g == 32 ? w8_go<32>(mm, wq, ws, xq, xd, s) : w8_go<128>(mm, wq, ws, xq, xd, s));
}
