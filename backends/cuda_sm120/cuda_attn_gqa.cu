// backends/cuda_sm120/cuda_attn_gqa.cu — knob attn_gqa = shared: split-K
// decode attention over the dense f16/f32 cache whose K/V tiles come into
// shared memory by cp.async, once per block, for all RB query heads of the
// block's kv head (RB = n_head / n_head_kv when that is 1, 2, 4 or 8; 8
// heads per block when 16 share a kv head: q and the sums of RB heads live
// in registers).  Same grid, split plan, lane layout, online softmax and
// partials as split_kernel (cuda_attn.cu), so combine_kernel and
// split_finish are reused as they are; what differs is how the rows arrive:
//   split_kernel loads U rows per lane into registers, then computes, so a
//   block has only 128 * U * 16 bytes in flight and none while it computes
//   (decode at long context is latency bound, not bandwidth bound);
//   here every thread issues its share of the whole K tile and the whole
//   V tile at once (16 KB each), the scores start when K has landed while
//   V is still in flight, and the next tile's K is issued as soon as the
//   scores are done, so it flies during the softmax and the V pass.
// Tile: `rows` positions (64, 32 or 16: a divisor of SPLIT_TILE, so chunk
// boundaries are tile boundaries) such that one K or V tile is at most
// GQA_STAGE bytes; rows past the context are neither loaded nor read.
// Exact attention; differs from split_kernel only in f32 summation order
// where the tile is smaller than SPLIT_TILE (more, shorter online-softmax
// steps), and not at all where rows = 64.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_attn.cuh"
#include "cuda_launch.cuh"
#include "cuda_ptx.cuh"

#define GQA_STAGE 16384   /* bytes of one K (or V) tile in shared memory */

// Rows [p0, p0 + cnt) of one kv head (row p at byte offset p * stepb from
// src) into dst, rowb bytes each, 16 bytes per copy, spread over the block.
__device__ __forceinline__ void gqa_issue(char *dst, const char *src, uint64_t stepb, int64_t p0, int cnt, int rowb)
{
    const int cpr = rowb >> 4;
    for (int i = threadIdx.x; i < cnt * cpr; i += blockDim.x) {
        const int r = i / cpr, c = i % cpr;
        cp_async16(dst + r * rowb + c * 16, src + (uint64_t)(p0 + r) * stepb + c * 16);
    }
}

// 8 cache elements of a staged row (16 bytes of f16, 32 of f32) as f32.
template <bool F16> __device__ __forceinline__ void smem8(const char *p, float *x)
{
    if (F16) {
        const uint4 r = *(const uint4 *)p;
        const __half2 *h = (const __half2 *)&r;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 f = __half22float2(h[j]);
            x[2 * j] = f.x;
            x[2 * j + 1] = f.y;
        }
    } else {
        const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
        x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
        x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
    }
}

// Block (token t, heads h0..h0+RB of kv head g, split s), as split_kernel.
template <bool F16, int RB>
__global__ void __launch_bounds__(SPLIT_THREADS) split_gqa_kernel(cu_attn a, int32_t chunk, int n_split, int rows)
{
    cu_pdl_enter();
    // q, later the folded sums: [RB][hd] f32; p: [RB][SPLIT_TILE] f32;
    // then the K tile and the V tile: [rows][hd] of the cache's type
    extern __shared__ float sm[];
    __shared__ float m_s[RB], l_s[RB], f_s[RB];
    const int hd = a.head_dim;
    split_blk sb;
    if (!split_where<RB>(a, chunk, sb))
        return;
    const int64_t t = sb.t, c0 = sb.c0, c1 = sb.c1;
    const int h0 = sb.h0, s = sb.s, g = sb.g;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lpr = hd >> 3, ppw = 32 / lpr;
    const int sub = lane / lpr, cl = lane % lpr;
    const int iters = rows / (SPLIT_WARPS * ppw);   // >= 1: the launcher's choice of rows
    const int esz = F16 ? 2 : 4, rowb = hd * esz;
    float *qs = sm, *ps = sm + RB * hd;
    char *kt = (char *)(ps + RB * SPLIT_TILE), *vt = kt + rows * rowb;

    // K and V of the first tile fly while q is normed and roped
    const uint64_t stepb = (uint64_t)a.n_head_kv * rowb;
    const uint64_t rowb0 = (((uint64_t)a.seq[t] * a.n_ctx) * a.n_head_kv + (uint64_t)g) * rowb;
    const char *kg = (const char *)a.kc + rowb0, *vg = (const char *)a.vc + rowb0;
    {
        const int cnt = c1 - c0 < rows ? (int)(c1 - c0) : rows;
        gqa_issue(kt, kg, stepb, c0, cnt, rowb);
        cp_async_commit();
        gqa_issue(vt, vg, stepb, c0, cnt, rowb);
        cp_async_commit();
    }

    float q[RB][8], acc[RB][8];
    const float *qg = split_begin<RB>(a, t, h0, hd, cl, qs, m_s, l_s, q, acc);

    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t p0 = c0; p0 < c1; p0 += rows) {
        const int cnt = c1 - p0 < rows ? (int)(c1 - p0) : rows;
        const int64_t pn = p0 + rows;
        const int cnt_n = pn < c1 ? (c1 - pn < rows ? (int)(c1 - pn) : rows) : 0;
        // in flight: K and V of this tile; land K
        cp_async_wait_group<1>();
        __syncthreads();
        // scores of the tile: ps[r][i] = q_r . k_i * scale
        for (int it = 0; it < iters; it++) {
            const int ii = (it * SPLIT_WARPS + warp) * ppw + sub;
            float kx[8];
            if (ii < cnt)
                smem8<F16>(kt + ii * rowb + cl * 8 * esz, kx);
            else
#pragma unroll
                for (int j = 0; j < 8; j++)
                    kx[j] = 0.0f;
#pragma unroll
            for (int r = 0; r < RB; r++) {
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; j++)
                    d = fmaf(q[r][j], kx[j], d);
                for (int o = lpr >> 1; o > 0; o >>= 1)
                    d += __shfl_xor_sync(0xffffffffu, d, o);
                if (cl == 0 && ii < cnt)
                    ps[r * SPLIT_TILE + ii] = d * scale;
            }
        }
        __syncthreads();   // the K tile is free, the scores complete
        gqa_issue(kt, kg, stepb, pn, cnt_n, rowb);   // nothing past the last tile
        cp_async_commit();
        // online softmax, one warp per head, as split_kernel
        split_softmax_tile<RB, false>(ps, cnt, warp, lane, m_s, l_s, f_s, NULL);
        // in flight: V of this tile, K of the next; land V
        cp_async_wait_group<1>();
        __syncthreads();
        // acc = acc * f + sum_i p_i v_i
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const float f = f_s[r];
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[r][j] *= f;
        }
        for (int it = 0; it < iters; it++) {
            const int ii = (it * SPLIT_WARPS + warp) * ppw + sub;
            if (ii >= cnt)
                continue;
            float vx[8];
            smem8<F16>(vt + ii * rowb + cl * 8 * esz, vx);
#pragma unroll
            for (int r = 0; r < RB; r++) {
                const float p = ps[r * SPLIT_TILE + ii];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[r][j] = fmaf(p, vx[j], acc[r][j]);
            }
        }
        __syncthreads();   // the V tile, ps and f_s are rewritten by the next tile
        gqa_issue(vt, vg, stepb, pn, cnt_n, rowb);
        cp_async_commit();
    }

    split_finish<RB>(a, acc, lpr, warp, sub, cl, qs, hd, m_s, l_s, qg, t, h0, n_split, s);
}

// Positions per staged tile: SPLIT_TILE halved until one K tile fits in
// GQA_STAGE, but never below one pass of the block (SPLIT_WARPS rows per
// lane group: 1024 / hd).
static int gqa_rows(int hd, bool f16)
{
    const int rowb = hd * (f16 ? 2 : 4), least = SPLIT_WARPS * (256 / hd);
    int rows = SPLIT_TILE;
    while (rows > least && rows > 16 && rows * rowb > GQA_STAGE)
        rows >>= 1;
    return rows;
}

template <bool F16>
static void launch(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n, (unsigned)(a->n_head / rb), (unsigned)n_split);
    const int hd = a->head_dim, rows = gqa_rows(hd, F16);
    const size_t smem = ((size_t)rb * hd + (size_t)rb * SPLIT_TILE) * sizeof(float) + 2 * (size_t)rows * hd * (F16 ? 2 : 4);
    // (knob pdl: cu_launch; a failed launch shows in the caller's
    // cudaGetLastError)
    const dim3 blk(SPLIT_THREADS);
    switch (rb) {
    case 8: cu_launch(split_gqa_kernel<F16, 8>, grid, blk, smem, s, *a, chunk, n_split, rows); break;
    case 4: cu_launch(split_gqa_kernel<F16, 4>, grid, blk, smem, s, *a, chunk, n_split, rows); break;
    case 2: cu_launch(split_gqa_kernel<F16, 2>, grid, blk, smem, s, *a, chunk, n_split, rows); break;
    default: cu_launch(split_gqa_kernel<F16, 1>, grid, blk, smem, s, *a, chunk, n_split, rows); break;
    }
}

void cu_launch_split_gqa(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s)
{
    if (a->f16)
        launch<true>(a, rb, chunk, n_split, s);
    else
        launch<false>(a, rb, chunk, n_split, s);
}
