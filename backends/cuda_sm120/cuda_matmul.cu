// backends/cuda_sm120/cuda_matmul.cu — MATMUL as a GEMV-style kernel, also
// used for the routed experts of MOE (a weight per column).
//
// One warp per weight row (a block per row for small one-column products);
// the lanes walk the row 8 elements at a time
// (lane l takes elements 8l.., 8l+256.., so the activation reads of a warp
// are contiguous), decode them in registers and accumulate in f32 against
// up to NT activation columns, then reduce with warp shuffles.  Decoded
// weights are reused for the NT columns of a pass; NT = 1 serves decode and
// the expert products (whose columns have different weights).
// Correct for any column count; large batches re-read the weights once per
// NT columns (the quantised types go to the int8 GEMMs there; the float
// types to mm_tiled_kernel with knob f32_gemm = tiled).  rr_kernel (knob
// route_fused): decode's MOE router product and its top-K in one launch.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"
#include "cuda_route.cuh"

#define MM_WARPS 4

// KS = 1: one warp per row, MM_WARPS rows a block.  KS = MM_WARPS: a
// block per row, warp w taking groups w, w + MM_WARPS, ... of it (one
// column, no experts: the small decode products, router 2048 -> 256 and
// GDN alpha/beta 2048 -> 32, whose rows alone leave most of the GPU idle
// and each warp a long chain of loads); the warps' sums are added in
// order through shared memory.  KS > 1 also takes products of the same
// input in one launch (cu_mm.more: the blocks past product 0's rows are
// rows of more[0], then more[1], ...; decode's MOE router and shared-expert
// gate): one fill and drain of the GPU for both.
// mm_body is the kernel's body with bx for blockIdx.x (rr_kernel below
// runs it too, so its logits are these bits).  mm is a reference to the
// calling kernel's own parameter, rewritten in place for more[]: taken by
// value, nvcc copied the 288 bytes another way than mm_kernel always did.
// The product of a launch (mm, then its more[] parts) that unit u falls
// in, D rows a unit: mm rewritten to that part, u made relative to it.
template <int D> __device__ __forceinline__ void mm_part(cu_mm &mm, int64_t &u)
{
    for (int k = 0; k < mm.n_more && u >= (mm.rows + D - 1) / D; k++) {
        u -= (mm.rows + D - 1) / D;
        mm.w = mm.more[k].w;
        mm.y = mm.more[k].y;
        mm.rows = mm.more[k].rows;
        mm.row_bytes = mm.more[k].row_bytes;
        mm.y_stride = mm.more[k].y_stride;
    }
}

// A group's 8 activations: two 16-byte loads where x and its column
// stride are 16-byte aligned (x4; the router's 2048-wide x took 16 scalar
// loads a lane, ncu's LG-throttle stall in rr_kernel), else one by one.
// The same values either way, so the same bits.
__device__ __forceinline__ void mm_x8(const float *p, bool x4, float v[8])
{
    if (x4) {
        const float4 a = ((const float4 *)p)[0], c = ((const float4 *)p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = p[j];
    }
}

template <int T, int NT, int KS>
__device__ __forceinline__ void mm_body(cu_mm &mm, int64_t bx)
{
    __shared__ float part[MM_WARPS][NT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t r = KS == 1 ? bx * MM_WARPS + warp : bx;
    if (KS > 1)
        mm_part<1>(mm, r);   // (a block a row)
    // (dense: the row asked of the L2 before the programmatic-launch wait)
    if (mm.prefetch && mm.expert == NULL && blockIdx.y == 0 && lane == 0 && (KS == 1 || warp == 0) && r < mm.rows)
        cu_prefetch_l2(mm.w + (uint64_t)r * mm.row_bytes, mm.row_bytes);
    cu_pdl_enter();
    if (r >= mm.rows)
        return;
    const int64_t n8 = mm.in / 8;
    const int64_t g0 = KS == 1 ? lane : (int64_t)warp * 32 + lane;
    const bool x4 = ((uintptr_t)mm.x | (uint64_t)mm.x_stride * 4) % 16 == 0;
    for (int64_t j0 = (int64_t)blockIdx.y * NT; j0 < mm.ncols; j0 += (int64_t)gridDim.y * NT) {
        const int nt = mm.ncols - j0 < NT ? (int)(mm.ncols - j0) : NT;
        const uint8_t *w = mm.w + (uint64_t)r * mm.row_bytes;
        if (mm.expert != NULL)
            w += (uint64_t)mm.expert[j0] * mm.expert_bytes;
        const float *xs[NT];
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            xs[t] = mm.x + ((j0 + (t < nt ? t : 0)) / mm.x_div) * mm.x_stride;
            acc[t] = 0.0f;
        }
        // unrolled so that several groups' loads are in flight per lane:
        // the small f32 products of decode otherwise wait one round trip
        // per group
#pragma unroll 4
        for (int64_t g = g0; g < n8; g += 32 * KS) {
            float wv[8];
            cu_deq8<T>(w, g * 8, wv);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < nt) {
                    float xv[8];
                    mm_x8(xs[t] + g * 8, x4, xv);
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[t] = fmaf(wv[j], xv[j], acc[t]);
                }
            }
        }
        if (cu_is_plain<T>::value && (KS == 1 || warp == 0)) {
            for (int64_t i = n8 * 8 + lane; i < mm.in; i += 32) {
                const float wi = cu_deq1<T>(w, i);
#pragma unroll
                for (int t = 0; t < NT; t++)
                    if (t < nt)
                        acc[t] = fmaf(wi, xs[t][i], acc[t]);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float s = cu_warp_sum(acc[t]);
            if (KS > 1 && lane == 0)
                part[warp][t] = s;
            else if (KS == 1 && lane == 0 && t < nt)
                mm.y[(j0 + t) * mm.y_stride + r] = s;
        }
        if (KS > 1) {
            // the warps' sums in warp order (lane t of warp 0: column t)
            __syncthreads();
            if (warp == 0 && lane < nt) {
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < KS; k++)
                    s += part[k][lane];
                mm.y[(j0 + lane) * mm.y_stride + r] = s;
            }
            __syncthreads();   // part is rewritten by the next column tile
        }
    }
}

template <int T, int NT, int KS>
__global__ void __launch_bounds__(32 * MM_WARPS) mm_kernel(cu_mm mm)
{
    mm_body<T, NT, KS>(mm, blockIdx.x);
}

// Knob route_fused: the MOE decode router.  The product logits[t][E] (and
// mm.more[]: the shared expert's gate row) as mm_launch runs it, KS =
// MM_WARPS for one token and NT = 8, KS = 1 for 2..8, so every value is
// the unfused launch's; then the block that finishes last routes all the
// tokens (route_token, a warp a token).  Two launches of a few us each
// became one: at ~3 ms a decode step of 40 layers, the launch latency of
// such small kernels is what they cost.  The last block is found by a
// count of finished blocks (*done): each block's stores are made visible
// device-wide (__threadfence) before its thread 0 counts it, so the block
// that takes the last ticket sees every logit; it reads them from the L2
// (route_token's CG loads).  It sets *done back to 0: the count is
// allocated once (zeroed) and a captured graph replays the launch as is.
// The next launch counts only after its cu_pdl_enter, that is after this
// grid completed with its memory visible.  Nothing spins on other blocks,
// so blocks need not be resident together (the next kernel may take SMs
// early under programmatic launch).
template <int T, int NT, int KS, int J>
__global__ void __launch_bounds__(32 * MM_WARPS) rr_kernel(cu_mm mm, int K, int32_t *sel, float *wts, unsigned *done)
{
    __shared__ unsigned ticket;
    const float *logits = mm.y;
    const int E = (int)mm.rows;
    const int64_t n = mm.ncols;
    int64_t bx = blockIdx.x;
    if (KS == 1) {
        // (mm_body takes more[] only with KS > 1: here the blocks past
        // product 0's take them, ceil(rows / MM_WARPS) blocks a part, each
        // row by one warp as mm_kernel<T, 8, 1> would on its own)
        mm_part<MM_WARPS>(mm, bx);
        mm.n_more = 0;
    }
    mm_body<T, NT, KS>(mm, bx);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        ticket = atomicAdd(done, 1u);
    __syncthreads();
    if (ticket != gridDim.x * gridDim.y - 1)
        return;
    __threadfence();
    for (int64_t t = threadIdx.x >> 5; t < n; t += MM_WARPS)
        route_token<J, true>(logits + t * E, E, K, sel + t * K, wts + t * K);
    if (threadIdx.x == 0)
        *done = 0;
}

// Knob f32_gemm = tiled: products of weights stored as floats (F32, F16,
// BF16: the MOE router, the GDN alpha/beta projections) over a prefill
// batch.  mm_kernel<T, 8, 1> re-reads each weight row once per 8 columns
// and a 2048-token router product (256 x 2048 F32) took 1.19 ms on the
// H200 (ncu), more than the grouped expert GEMMs of the same MOE op.
// Here a block computes a 64 x 64 tile of y (64 weight rows x 64 columns)
// in f32: 32-wide k-tiles of both operands staged in shared memory (k
// major), each thread 4 x 4 outputs, every product a plain fmaf in k
// order (so a column's value does not depend on the tiling).  Rows and
// columns past the ends are clamped on load and not stored; the k tail
// is zero-filled.
#define MMT_BM 64
#define MMT_BN 64
#define MMT_BK 32
#define MMT_LD 68              // floats a staged k row: 16-byte aligned
#define MMT_MIN_COLS 64
// Fewer rows (GDN alpha/beta: 32) leave most of the GPU without a tile
// (one tile row, ncols / 64 blocks each walking all of k), where the
// GEMV-style kernel spreads a block per 4 rows x 8 columns.
#define MMT_MIN_ROWS 128

template <int T>
__global__ void __launch_bounds__(256) mm_tiled_kernel(cu_mm mm)
{
    __align__(16) __shared__ float ws[MMT_BK][MMT_LD];
    __align__(16) __shared__ float xs[MMT_BK][MMT_LD];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int64_t r0 = (int64_t)blockIdx.y * MMT_BM, c0 = (int64_t)blockIdx.x * MMT_BN;
    // loader: row / column lr of the tile, k elements lk .. lk + 7
    const int lr = tid >> 2, lk = (tid & 3) * 8;
    const int64_t wr = r0 + lr < mm.rows ? r0 + lr : mm.rows - 1;
    const int64_t xc = c0 + lr < mm.ncols ? c0 + lr : mm.ncols - 1;
    const uint8_t *wrow = mm.w + (uint64_t)wr * mm.row_bytes;
    const float *xcol = mm.x + (xc / mm.x_div) * mm.x_stride;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < mm.in; k0 += MMT_BK) {
        const int64_t k = k0 + lk;
        float wv[8], xv[8];
        if (k + 8 <= mm.in) {
            cu_deq8<T>(wrow, k, wv);
#pragma unroll
            for (int j = 0; j < 8; j++)
                xv[j] = xcol[k + j];
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                wv[j] = k + j < mm.in ? cu_deq1<T>(wrow, k + j) : 0.0f;
                xv[j] = k + j < mm.in ? xcol[k + j] : 0.0f;
            }
        }
        __syncthreads();   // every thread is done with the previous tile
#pragma unroll
        for (int j = 0; j < 8; j++) {
            ws[lk + j][lr] = wv[j];
            xs[lk + j][lr] = xv[j];
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < MMT_BK; kk++) {
            const float4 a = *(const float4 *)&ws[kk][4 * ty], b = *(const float4 *)&xs[kk][4 * tx];
            const float av[4] = { a.x, a.y, a.z, a.w }, bv[4] = { b.x, b.y, b.z, b.w };
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = r0 + 4 * ty + i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t c = c0 + 4 * tx + j;
            if (r < mm.rows && c < mm.ncols)
                mm.y[c * mm.y_stride + r] = acc[i][j];
        }
    }
}

// A block per row below this many rows (one column, no experts).
#define MM_SMALL_ROWS 2048

static inline bool mm_small(const cu_mm *mm)
{
    return mm->ncols == 1 && mm->expert == NULL && mm->rows <= MM_SMALL_ROWS;
}

// Knob mm_block_cols: a small product (rows <= MM_SMALL_ROWS, no
// experts, no more[] parts) of block_cols..8 columns a block a row as
// well, the row's groups split over the block's warps (mm_kernel<T, 8,
// MM_WARPS>): the MOE router (256 x 2048 floats) at 8 tokens took 65
// blocks of one warp a row (rr_kernel 30.7 us alone, H100 ncu; 20.0 us a
// block a row).  Another f32 order than a warp a row.
static inline bool mm_block_rows(const cu_mm *mm)
{
    return mm->block_cols >= 2 && mm->ncols >= mm->block_cols && mm->ncols <= 8;
}

static inline bool mm_small_block(const cu_mm *mm)
{
    return mm_block_rows(mm) && mm->expert == NULL && mm->rows <= MM_SMALL_ROWS && mm->n_more == 0;
}

// Whether si_cu_matmul takes mm's more[] products in its launch: float-
// stored weights of the small one-column kind (a block a row), each part.
extern "C" bool si_cu_matmul_more_ok(const cu_mm *mm)
{
    if (mm->type != SI_TYPE_F32 && mm->type != SI_TYPE_F16 && mm->type != SI_TYPE_BF16)
        return false;
    if (mm->n_more < 1 || mm->n_more > CU_MM_MORE || mm->w2 != NULL || !mm_small(mm) || mm->rows < 1)
        return false;
    for (int k = 0; k < mm->n_more; k++)
        if (mm->more[k].rows < 1 || mm->more[k].rows > MM_SMALL_ROWS)
            return false;
    return true;
}

template <int T> static cudaError_t mm_launch(const cu_mm *mm, cudaStream_t s)
{
    const bool one = mm->ncols == 1 || mm->expert != NULL;
    const bool small = mm_small(mm);
    if (mm->n_more != 0 && !si_cu_matmul_more_ok(mm))
        return cudaErrorInvalidValue;   // (the caller runs such products one by one)
    int64_t gx = small ? mm->rows : (mm->rows + MM_WARPS - 1) / MM_WARPS;
    for (int k = 0; k < mm->n_more; k++)
        gx += mm->more[k].rows;
    const int nt = one ? 1 : 8;
    int64_t gy = (mm->ncols + nt - 1) / nt;
    if (gy > 65535)
        gy = 65535;   // the kernel loops over the rest
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    if constexpr (cu_is_plain<T>::value) {
        if (mm->f32_tiled && mm->expert == NULL && mm->ncols >= MMT_MIN_COLS && mm->rows >= MMT_MIN_ROWS) {
            const int64_t tx = (mm->ncols + MMT_BN - 1) / MMT_BN, ty = (mm->rows + MMT_BM - 1) / MMT_BM;
            if (tx <= 0x7fffffffLL && ty <= 65535) {
                mm_tiled_kernel<T><<<dim3((unsigned)tx, (unsigned)ty), 256, 0, s>>>(*mm);
                return cudaGetLastError();
            }
        }
    }
    // (programmatic dependent launch, knob pdl: the router and shared-gate
    // products of decode)
    dim3 grid((unsigned)gx, (unsigned)gy);
    if (small)
        return cu_launch(mm_kernel<T, 1, MM_WARPS>, grid, dim3(32 * MM_WARPS), 0, s, *mm);
    if constexpr (cu_is_plain<T>::value) {
        if (mm_small_block(mm))
            return cu_launch(mm_kernel<T, 8, MM_WARPS>, dim3((unsigned)mm->rows, (unsigned)gy), dim3(32 * MM_WARPS), 0,
                             s, *mm);
    }
    if (one)
        return cu_launch(mm_kernel<T, 1, 1>, grid, dim3(32 * MM_WARPS), 0, s, *mm);
    return cu_launch(mm_kernel<T, 8, 1>, grid, dim3(32 * MM_WARPS), 0, s, *mm);
}

extern "C" bool si_cu_type_ok(uint32_t type)
{
    switch (type) {
    case SI_TYPE_F32: case SI_TYPE_F16: case SI_TYPE_BF16: case SI_TYPE_Q8_0:
    case SI_TYPE_Q4_K: case SI_TYPE_Q5_K: case SI_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

extern "C" int si_cu_matmul(const cu_mm *mm, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (mm->x_div < 1)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
        CU_TYPE_CASES(mm_launch, mm, s)
    default:
        return (int)cudaErrorInvalidValue;
    }
}

// Knob route_fused (rr_kernel): decode's router products, float-stored
// weights; more[] parts as mm_launch takes them for one column.
#define RR_MAX_COLS 8
#define RR_MAX_E 1024   // route_token's 32 keys a lane

extern "C" bool si_cu_router_route_ok(const cu_mm *mm, int K)
{
    if (mm->type != SI_TYPE_F32 && mm->type != SI_TYPE_F16 && mm->type != SI_TYPE_BF16)
        return false;
    if (mm->ncols < 1 || mm->ncols > RR_MAX_COLS || mm->expert != NULL || mm->w2 != NULL || mm->x_div != 1)
        return false;
    if (mm->rows < 1 || mm->rows > RR_MAX_E || mm->y_stride != mm->rows || K < 1)
        return false;
    if (mm->n_more < 0 || mm->n_more > CU_MM_MORE || (mm->ncols == 1 && mm->n_more > 0 && !si_cu_matmul_more_ok(mm)))
        return false;
    for (int k = 0; k < mm->n_more; k++)
        if (mm->more[k].rows < 1 || mm->more[k].rows > MM_SMALL_ROWS)
            return false;
    return true;
}

template <int T, int J>
static cudaError_t rr_launch(const cu_mm *mm, int K, int32_t *sel, float *wts, unsigned *done, cudaStream_t s)
{
    // (the grid of mm_launch's small path for one column, of its NT = 8
    // path for more, plus the blocks of the more[] parts)
    // (knob mm_block_cols: more columns a block a row too, as mm_launch)
    const bool one = mm->ncols == 1, blk = one || mm_block_rows(mm);
    int64_t gx = blk ? mm->rows : (mm->rows + MM_WARPS - 1) / MM_WARPS;
    for (int k = 0; k < mm->n_more; k++)
        gx += blk ? mm->more[k].rows : (mm->more[k].rows + MM_WARPS - 1) / MM_WARPS;
    if (one)
        return cu_launch(rr_kernel<T, 1, MM_WARPS, J>, dim3((unsigned)gx), dim3(32 * MM_WARPS), 0, s, *mm, K, sel,
                         wts, done);
    if (blk)
        return cu_launch(rr_kernel<T, 8, MM_WARPS, J>, dim3((unsigned)gx), dim3(32 * MM_WARPS), 0, s, *mm, K, sel,
                         wts, done);
    return cu_launch(rr_kernel<T, 8, 1, J>, dim3((unsigned)gx), dim3(32 * MM_WARPS), 0, s, *mm, K, sel, wts, done);
}

template <int T>
static cudaError_t rr_launch_t(const cu_mm *mm, int K, int32_t *sel, float *wts, unsigned *done, cudaStream_t s)
{
    return mm->rows <= 256 ? rr_launch<T, 8>(mm, K, sel, wts, done, s) : rr_launch<T, 32>(mm, K, sel, wts, done, s);
}

extern "C" int si_cu_router_route(const cu_mm *mm, int K, int32_t *sel, float *wts, unsigned *done, void *stream)
{
    if (done == NULL || !si_cu_router_route_ok(mm, K))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    case SI_TYPE_F32: return (int)rr_launch_t<SI_TYPE_F32>(mm, K, sel, wts, done, s);
    case SI_TYPE_F16: return (int)rr_launch_t<SI_TYPE_F16>(mm, K, sel, wts, done, s);
    case SI_TYPE_BF16: return (int)rr_launch_t<SI_TYPE_BF16>(mm, K, sel, wts, done, s);
    default: return (int)cudaErrorInvalidValue;
    }
}
