// backends/cuda_sm120/cuda_attn_i8.cu — split-K attention (flash-decoding)
// over the paged int8 KV cache (kv_type = i8).  Same scheme and the same
// partials as the dense split_kernel in cuda_attn.cu (whose combine_kernel
// merges them); what differs is where a row lives and what it holds:
//   - position p of the token's sequence is row (page, g, p % 16) with
//     page = pages[seq][p / 16]; a 64-position tile is 4 pages, so the
//     tile's row offsets and scales are looked up once per tile into
//     shared memory by threads 0..63;
//   - K/V rows are int8 with one f32 scale each.  Scores are q . k_int in
//     f32 (q stays f32: no second rounding, the cache's own error is all
//     there is; decode is bound by the int8 bytes, not by these FMAs)
//     times k_scale / sqrt(hd), applied once per row after the dot.  The
//     V scale is folded into the softmax weight (p_i * v_scale_i) after
//     the row sum l took the unscaled p_i, so the V loop is the dense
//     one's on int-valued floats.
// Lane layout as in the dense kernel: 8 elements (8 bytes of int8) per
// lane, lpr = hd/8 lanes per row, so one warp-wide load covers 256
// contiguous bytes of the page (a page's 16 rows of one kv head are
// contiguous: 16 * hd bytes).  The raw 8 bytes are kept in registers
// (2 words) and converted when used, so more rows can be in flight per
// lane than with f16 at the same register count.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_attn.cuh"

// 8 int8 packed in r as floats.
static __device__ __forceinline__ void unpack8(uint2 r, float *x)
{
#pragma unroll
    for (int j = 0; j < 4; j++) {
        x[j] = (float)(int8_t)(r.x >> (8 * j));
        x[4 + j] = (float)(int8_t)(r.y >> (8 * j));
    }
}

template <int RB>
__global__ void __launch_bounds__(SPLIT_THREADS) split_i8_kernel(cu_attn a, int32_t chunk, int n_split)
{
    extern __shared__ float sm[];   // q, later the folded sums: [RB][hd]; p: [RB][SPLIT_TILE]
    __shared__ float m_s[RB], l_s[RB], f_s[RB];
    __shared__ uint64_t row_s[SPLIT_TILE];          // byte offset of each row of the tile
    __shared__ float sk_s[SPLIT_TILE], sv_s[SPLIT_TILE];
    const int U = RB >= 8 ? 4 : 8;  // rows loaded ahead per lane (8 bytes each)
    const int hd = a.head_dim;
    split_blk sb;
    if (!split_where<RB>(a, chunk, sb))
        return;
    const int64_t t = sb.t, c0 = sb.c0, c1 = sb.c1;
    const int h0 = sb.h0, s = sb.s, g = sb.g;
    const int32_t seq = a.seq[t];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lpr = hd >> 3, ppw = 32 / lpr;
    const int sub = lane / lpr, cl = lane % lpr;
    const int iters = SPLIT_TILE / (SPLIT_WARPS * ppw);
    float *qs = sm, *ps = sm + RB * hd;
    const int8_t *kc = (const int8_t *)a.kc + cl * 8, *vc = (const int8_t *)a.vc + cl * 8;

    float q[RB][8], acc[RB][8];
    const float *qg = split_begin<RB>(a, t, h0, hd, cl, qs, m_s, l_s, q, acc);

    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t p0 = c0; p0 < c1; p0 += SPLIT_TILE) {
        const int cnt = c1 - p0 < SPLIT_TILE ? (int)(c1 - p0) : SPLIT_TILE;
        // page lookup of the tile's rows (the previous tile's readers are
        // past the __syncthreads that ends it)
        if (threadIdx.x < cnt) {
            const uint64_t row = kv_page_row(a, seq, p0 + threadIdx.x, g);
            row_s[threadIdx.x] = row * (uint64_t)hd;
            sk_s[threadIdx.x] = a.ks[row] * scale;
            sv_s[threadIdx.x] = a.vs[row];
        }
        __syncthreads();
        // scores of the tile: ps[r][i] = q_r . k_i * k_scale_i / sqrt(hd)
        for (int it0 = 0; it0 < iters; it0 += U) {
            uint2 kr[U];
            int ii[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                ii[u] = ((it0 + u) * SPLIT_WARPS + warp) * ppw + sub;   // >= SPLIT_TILE past iters
                kr[u] = ii[u] < cnt ? __ldg((const uint2 *)(kc + row_s[ii[u]])) : make_uint2(0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                float kx[8];
                unpack8(kr[u], kx);
#pragma unroll
                for (int r = 0; r < RB; r++) {
                    float d = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        d = fmaf(q[r][j], kx[j], d);
                    for (int o = lpr >> 1; o > 0; o >>= 1)
                        d += __shfl_xor_sync(0xffffffffu, d, o);
                    if (cl == 0 && ii[u] < cnt)
                        ps[r * SPLIT_TILE + ii[u]] = d * sk_s[ii[u]];
                }
            }
        }
        __syncthreads();
        // online softmax, one warp per head: l takes p = e^(score - m_new),
        // ps keeps p * v_scale for the V pass; rows past cnt get 0
        split_softmax_tile<RB, true>(ps, cnt, warp, lane, m_s, l_s, f_s, sv_s);
        __syncthreads();
        // acc = acc * f + sum_i (p_i v_scale_i) v_int_i
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const float f = f_s[r];
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[r][j] *= f;
        }
        for (int it0 = 0; it0 < iters; it0 += U) {
            uint2 vr[U];
            int ii[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                ii[u] = ((it0 + u) * SPLIT_WARPS + warp) * ppw + sub;
                vr[u] = ii[u] < cnt ? __ldg((const uint2 *)(vc + row_s[ii[u]])) : make_uint2(0u, 0u);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (ii[u] >= cnt)
                    continue;
                float vx[8];
                unpack8(vr[u], vx);
#pragma unroll
                for (int r = 0; r < RB; r++) {
                    const float p = ps[r * SPLIT_TILE + ii[u]];
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[r][j] = fmaf(p, vx[j], acc[r][j]);
                }
            }
        }
        __syncthreads();   // ps, f_s, row_s and the scales are rewritten by the next tile
    }

    split_finish<RB>(a, acc, lpr, warp, sub, cl, qs, hd, m_s, l_s, qg, t, h0, n_split, s);
}

void cu_launch_split_i8(const cu_attn *a, int rb, int32_t chunk, int n_split, size_t smem, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n, (unsigned)(a->n_head / rb), (unsigned)n_split);
    switch (rb) {
    case 8: split_i8_kernel<8><<<grid, SPLIT_THREADS, smem, s>>>(*a, chunk, n_split); break;
    case 4: split_i8_kernel<4><<<grid, SPLIT_THREADS, smem, s>>>(*a, chunk, n_split); break;
    case 2: split_i8_kernel<2><<<grid, SPLIT_THREADS, smem, s>>>(*a, chunk, n_split); break;
    default: split_i8_kernel<1><<<grid, SPLIT_THREADS, smem, s>>>(*a, chunk, n_split); break;
    }
}
