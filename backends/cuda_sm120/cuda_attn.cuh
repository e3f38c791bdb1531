// backends/cuda_sm120/cuda_attn.cuh — device pieces shared by the two
// attention translation units: cuda_attn.cu (RoPE, K/V append, dense-cache
// attention, the split combine) and cuda_attn_i8.cu (split-K attention
// over the paged int8 cache).  Without -rdc every TU needs its own copy of
// a __device__ function, hence `static` here.
#ifndef SI_CUDA_ATTN_CUH
#define SI_CUDA_ATTN_CUH

#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

#define SPLIT_THREADS 128
#define SPLIT_WARPS   (SPLIT_THREADS / 32)
#define SPLIT_TILE    64     /* positions per online-softmax step: 2 per lane; 4 KV pages */
#define SPLIT_MAX     1024   /* splits per (token, head): combine's shared w  */

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// x (shared, head_dim) <- rope(rms(x) * w) by one warp (w NULL: no
// norm).  The sum of squares in double as the cpu backend.  Up to 256
// elements and 128 rotated pairs (every model here) the weight's and the
// rope table's values are loaded into registers before the sum, so their
// round trips overlap it instead of following it; longer rows loop.
static __device__ void warp_norm_rope(float *x, const float *w, const cu_attn &a, const float *cs)
{
    const int hd = a.head_dim, lane = threadIdx.x & 31, half = a.n_rot / 2;
    if (hd > 256) {
        if (w != NULL) {
            double ss = 0.0;
            for (int i = lane; i < hd; i += 32)
                ss += (double)x[i] * (double)x[i];
            const float sc = (float)(1.0 / sqrt(cu_warp_sumd(ss) / hd + (double)a.eps));
            for (int i = lane; i < hd; i += 32)
                x[i] = __fmul_rn(__fmul_rn(x[i], sc), w[i]);
            __syncwarp();
        }
        for (int i = lane; i < half; i += 32) {
            const float x0 = x[i], x1 = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
            x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            x[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
        }
        __syncwarp();
        return;
    }
    float wv[8], cv[4], sv[4];
#pragma unroll
    for (int j = 0; j < 8; j++)
        wv[j] = w != NULL && lane + 32 * j < hd ? w[lane + 32 * j] : 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int i = lane + 32 * j;
        cv[j] = i < half ? cs[2 * i] : 0.0f;
        sv[j] = i < half ? cs[2 * i + 1] : 0.0f;
    }
    if (w != NULL) {
        double ss = 0.0;
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (lane + 32 * j < hd)
                ss += (double)x[lane + 32 * j] * (double)x[lane + 32 * j];
        const float sc = (float)(1.0 / sqrt(cu_warp_sumd(ss) / hd + (double)a.eps));
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (lane + 32 * j < hd)
                x[lane + 32 * j] = __fmul_rn(__fmul_rn(x[lane + 32 * j], sc), wv[j]);
        __syncwarp();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int i = lane + 32 * j;
        if (i < half) {
            const float x0 = x[i], x1 = x[i + half];
            x[i] = __fsub_rn(__fmul_rn(x0, cv[j]), __fmul_rn(x1, sv[j]));
            x[i + half] = __fadd_rn(__fmul_rn(x1, cv[j]), __fmul_rn(x0, sv[j]));
        }
    }
    __syncwarp();
}

// Rows x, x + hd, .. (shared, `rows` of them) normed and roped, one warp
// per row (the rows of a block's query heads used to go one after the
// other through block-wide reductions: ~20-30 us per decode attention).
// Contains __syncthreads().
static __device__ void norm_rope_rows(float *x, int rows, const float *w, const cu_attn &a, const float *cs)
{
    for (int r = threadIdx.x >> 5; r < rows; r += blockDim.x >> 5)
        warp_norm_rope(x + (int64_t)r * a.head_dim, w, a, cs);
    __syncthreads();
}

// Paged int8 cache of one layer: row (page pg, kv head g, slot pos % 16)
// of K or V is hd int8 at element offset row * hd, its scale at
// ks/vs[row]; kv_page_of reads pg from the sequence's page table.
static __device__ __forceinline__ int32_t kv_page_of(const cu_attn &a, int32_t seq, int64_t pos)
{
    return a.pages[(uint64_t)seq * a.max_pages + (uint64_t)(pos / SI_KV_PAGE)];
}
static __device__ __forceinline__ uint64_t kv_slot_row(const cu_attn &a, int32_t pg, int g, int64_t pos)
{
    return ((uint64_t)pg * a.n_head_kv + (uint64_t)g) * SI_KV_PAGE + (uint64_t)(pos % SI_KV_PAGE);
}
static __device__ __forceinline__ uint64_t kv_page_row(const cu_attn &a, int32_t seq, int64_t pos, int g)
{
    return kv_slot_row(a, kv_page_of(a, seq, pos), g, pos);
}

// Launches the split kernel over the paged int8 cache (cuda_attn_i8.cu):
// grid (n, n_head / rb, n_split), partials in a->part as the dense split's.
void cu_launch_split_i8(const cu_attn *a, int rb, int32_t chunk, int n_split, size_t smem, cudaStream_t s);
// Launches the dense-cache split kernel that stages K/V tiles in shared
// memory by cp.async (knob attn_gqa = shared, cuda_attn_gqa.cu): the same
// grid, plan and partials as split_kernel.
void cu_launch_split_gqa(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s);
// The f16 tensor-core split kernel (knob attn_mma, cuda_attn_mma.cu): the
// same grid, plan and partials; cu_split_mma_ok says whether it takes the
// cache (f16 dense, head_dim 64/128/256, 16-byte aligned) and rb.
bool cu_split_mma_ok(const cu_attn *a, int rb);
cudaError_t cu_launch_split_mma(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s);
// Knob attn_ring (cuda_attn_ring.cu): the same for the kernel whose warps
// each stream their positions through a cp.async ring; cu_split_ring_bps
// is how many of its blocks an SM holds (0: its shape does not fit).
bool cu_split_ring_ok(const cu_attn *a, int rb);
int  cu_split_ring_bps(const cu_attn *a, int rb);
cudaError_t cu_launch_split_ring(const cu_attn *a, int rb, int32_t chunk, int n_split, cudaStream_t s);


// The block's place in the split grid: token t, query heads h0.. (RB of
// them) of kv head g, split s over positions [c0, c1).  False where the
// split lies beyond the token's context (the block has nothing to do:
// combine reads only splits <= pos / chunk).  chunk: split_chunk's.
struct split_blk {
    int64_t t, c0, c1;
    int     h0, s, g;
};
// Positions a split of token t covers: the plan's chunk, or, where the
// launch passes chunk 0 (knob attn_split_len = context), the token's own
// context cut into n_split parts of a multiple of SPLIT_TILE each, so that
// chunk * n_split >= pos + 1 (the splits past pos / chunk are empty).  The
// plan's chunk cuts max_len, a bucket of up to 1/8 more than the longest
// context (si_cu_attn_bucket), in whole tiles: at ctx 4096 the 9b's
// bucket of 4608 left 96 blocks of 132 SMs, ~85 of them with positions.
static __device__ __forceinline__ int64_t split_chunk(const cu_attn &a, int64_t t, int32_t chunk, int n_split)
{
    if (chunk > 0)
        return chunk;
    const int64_t per = ((int64_t)a.pos[t] + n_split) / n_split;   // ceil((pos + 1) / n_split)
    return (per + SPLIT_TILE - 1) / SPLIT_TILE * SPLIT_TILE;
}

// (the launch's grid z is its n_split)
template <int RB> static __device__ __forceinline__ bool split_where(const cu_attn &a, int32_t chunk, split_blk &b)
{
    b.t = blockIdx.x;
    b.h0 = blockIdx.y * RB;
    b.s = blockIdx.z;
    b.g = b.h0 / (a.n_head / a.n_head_kv);
    const int64_t pos = a.pos[b.t], ch = split_chunk(a, b.t, chunk, (int)gridDim.z);
    b.c0 = (int64_t)b.s * ch;
    b.c1 = b.c0 + ch < pos + 1 ? b.c0 + ch : pos + 1;
    return b.c0 <= pos;
}

// The start of the split kernels (dense, paged int8, GQA-staged): the
// block's RB query rows (heads h0.., token t) into shared memory `qs`, the
// online-softmax state reset, q-norm + RoPE in place, then each lane's 8
// query values (columns cl*8..) and zeroed accumulators in registers.
// Contains __syncthreads().  Returns the block's first q/gate row (the
// gate split_finish reads).
template <int RB>
static __device__ __forceinline__ const float *split_begin(const cu_attn &a, int64_t t, int h0, int hd, int cl, float *qs,
                                                   float *m_s, float *l_s, float (&q)[RB][8], float (&acc)[RB][8])
{
    const float *qg = a.qg + t * a.qg_stride + (uint64_t)h0 * 2 * hd;
    for (int i = threadIdx.x; i < RB * hd; i += blockDim.x)
        qs[i] = qg[(uint64_t)(i / hd) * 2 * hd + i % hd];
    if (threadIdx.x < RB) {
        m_s[threadIdx.x] = -INFINITY;
        l_s[threadIdx.x] = 0.0f;
    }
    __syncthreads();
    norm_rope_rows(qs, RB, a.q_norm, a, a.rope + t * a.n_rot);
#pragma unroll
    for (int r = 0; r < RB; r++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            q[r][j] = qs[r * hd + cl * 8 + j];
            acc[r][j] = 0.0f;
        }
    return qg;
}

// The end of both split kernels (dense and paged int8): fold the lanes'
// accumulators of each row (the sub-rows of each warp, then the warps in
// order, into `fold`), then either the gated output (n_split = 1) or this
// split's partial sums and (m, l) for combine_kernel.
// One tile's online-softmax step, one warp per head: the scores
// ps[r][0..cnt) (SPLIT_TILE apart) become p = e^(score - m_new), 0 past
// cnt so the V pass needs no guard on p; m_s, l_s and f_s (the factor the
// accumulators are rescaled by) are updated.  VS (the paged int8 cache):
// l takes p, ps keeps p * vs[i] (the V rows' scales) for the V pass.  The
// caller synchronises the block before and after.
template <int RB, bool VS>
static __device__ __forceinline__ void split_softmax_tile(float *ps, int cnt, int warp, int lane, float *m_s, float *l_s,
                                                          float *f_s, const float *vs)
{
    for (int r = warp; r < RB; r += SPLIT_WARPS) {
        float *pr = ps + r * SPLIT_TILE;
        const float v0 = lane < cnt ? pr[lane] : -INFINITY;
        const float v1 = lane + 32 < cnt ? pr[lane + 32] : -INFINITY;
        const float mo = m_s[r], mn = fmaxf(mo, warp_max(fmaxf(v0, v1)));
        const float f = mo == -INFINITY ? 0.0f : expf(mo - mn);
        const float e0 = lane < cnt ? expf(v0 - mn) : 0.0f;
        const float e1 = lane + 32 < cnt ? expf(v1 - mn) : 0.0f;
        if (VS) {
            pr[lane] = lane < cnt ? e0 * vs[lane] : 0.0f;
            pr[lane + 32] = lane + 32 < cnt ? e1 * vs[lane + 32] : 0.0f;
        } else {
            pr[lane] = e0;
            pr[lane + 32] = e1;
        }
        const float sum = cu_warp_sum(e0 + e1);
        if (lane == 0) {
            m_s[r] = mn;
            l_s[r] = l_s[r] * f + sum;
            f_s[r] = f;
        }
    }
}

// The block's output rows fold [RB][hd] (f32, complete; a block barrier
// before) either gated into dst (n_split = 1) or as this split's partial
// sums and (m, l) for combine_kernel: the end of every split kernel.
template <int RB>
static __device__ __forceinline__ void split_store(const cu_attn &a, const float *fold, int hd, const float *m_s,
                                                   const float *l_s, const float *qg, int64_t t, int h0, int n_split,
                                                   int s)
{
    if (n_split == 1) {
        float *out = a.dst + t * a.dst_stride + (uint64_t)h0 * hd;
        for (int i = threadIdx.x; i < RB * hd; i += blockDim.x) {
            const int r = i / hd, e = i % hd;
            const float inv = 1.0f / l_s[r];
            out[i] = fold[i] * inv / (1.0f + expf(-qg[(uint64_t)r * 2 * hd + hd + e]));
        }
        return;
    }
    // partials: acc [n][n_head][n_split][hd], then (m, l) [n][n_head][n_split][2]
    const uint64_t pb = ((uint64_t)t * a.n_head + h0) * n_split + s;
    float *pacc = a.part, *pml = a.part + (uint64_t)a.n * a.n_head * n_split * hd;
    for (int i = threadIdx.x; i < RB * hd; i += blockDim.x) {
        const int r = i / hd, e = i % hd;
        pacc[(pb + (uint64_t)r * n_split) * hd + e] = fold[i];
    }
    if (threadIdx.x < RB) {
        pml[2 * (pb + (uint64_t)threadIdx.x * n_split)] = m_s[threadIdx.x];
        pml[2 * (pb + (uint64_t)threadIdx.x * n_split) + 1] = l_s[threadIdx.x];
    }
}

template <int RB>
static __device__ __forceinline__ void split_finish(const cu_attn &a, float (&acc)[RB][8], int lpr, int warp, int sub,
                                                    int cl, float *fold, int hd, const float *m_s, const float *l_s,
                                                    const float *qg, int64_t t, int h0, int n_split, int s)
{
    // the sub-rows of each warp, then the warps in order, into fold
    for (int o = lpr; o < 32; o <<= 1)
#pragma unroll
        for (int r = 0; r < RB; r++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);
    for (int w = 0; w < SPLIT_WARPS; w++) {
        if (warp == w && sub == 0)
#pragma unroll
            for (int r = 0; r < RB; r++)
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float *d = fold + r * hd + cl * 8 + j;
                    *d = w == 0 ? acc[r][j] : *d + acc[r][j];
                }
        __syncthreads();
    }
    split_store<RB>(a, fold, hd, m_s, l_s, qg, t, h0, n_split, s);
}

#endif
