// backends/cuda_sm120/cuda_gemvm.cu — knob gemv_mma: the dense decode
// products of 2..8 columns (decode of 2..8 sequences) on the int8 tensor
// cores (gm_kernel; why and how: cuda_gemvm.cuh), and the entry of
// those of 2..32 columns (9..32: cuda_gemvx.cu, knob gemv_mma_wide; 2..8
// there too with knob gemv_narrow, the K-quants' by default).
#include "cuda_gemvm.cuh"

// The tiles' rows at the warp's next step.
template <int T, int R> __device__ __forceinline__ void gm_next(gm_rows (&rw)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++) {
        rw[i].B0 += GM_WARPS * gm_traits<T>::bytes;
        rw[i].B1 += GM_WARPS * gm_traits<T>::bytes;
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
static inline int gm_r(const cu_mm *mm)
{
    if (mm->gemv_rows == 1 || mm->gemv_rows == 2)
        return mm->gemv_rows;
    return mm->rows >= GM_TALL ? 2 : 1;
}

template <int T, int R, bool DB, int MB>
static cudaError_t gm_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const unsigned blocks = gm_blocks(mm, 16 * R);
    if (blocks == 0)
        return cudaErrorInvalidValue;
    return cu_launch(gm_kernel<T, R, DB, MB>, dim3(blocks), dim3(32 * GM_WARPS), 0, s, *mm, xq, xd, xs);
}

// Up to 8 columns gm_kernel; 9..16 gx_kernel with 2 column tiles, 17..32
// with 4.  gm_kernel's registers are capped for 3 blocks an SM at one row
// tile (2 at two, or holding the next step): its x loads, unpredicated,
// would otherwise be hoisted to ~150-215 registers (1 block an SM).
template <int T>
static cudaError_t gm_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->ncols > 8 || si_cu_gemvx_narrow_ok(mm, xq, xd, xs))
        return (cudaError_t)si_cu_gemvx(mm, xq, xd, xs, s);
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
