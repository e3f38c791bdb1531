// backends/cuda_sm120/cuda_attn_fa.cuh — the pieces of the f16 flash
// attention (attn_prefill = fa) that its tilings share: v1 and v2
// (cuda_attn_fa.cu, mma.sync) and v3 (cuda_attn_fa3.cu, Hopper's wgmma).
// cuda_attn_fa.cu's header comment describes the per-row arithmetic; each
// piece here works on one lane's two rows (rl) in the m16n8 accumulator
// layout that mma.sync and wgmma's m64nN fragments share (element j of
// column group nt at row gid + 8 (j / 2), column 8 nt + 2 tig + j % 2), so
// every tiling does exactly the same arithmetic per row.  Without -rdc
// each translation unit needs its own copy: everything is inline.
// (No PTX here: the wrappers are cuda_ptx.cuh's, or ptx_emu.h's in the
// emulator, included first.)
#ifndef SI_CUDA_ATTN_FA_CUH
#define SI_CUDA_ATTN_FA_CUH

#include <cuda_fp16.h>
#include <math.h>

#include "cuda_attn.cuh"

#define FA_BM        64    /* v1: query rows (tokens) per block: 16 per warp */
#define FA_BN        64    /* key positions per tile                         */
#define FA_THREADS   128
#define FA_MIN_CHUNK 256   /* split: positions per split at least            */
#define FA2_BM       128   /* v2: query rows per block: 16 per warp          */
#define FA2_THREADS  256
#define FA2_SM120_SMEM (99 * 1024)   /* sm_120's opt-in shared memory a block */

// v1: Q, K, V tiles; v2: Q, then two stages of (K, V)
__host__ __device__ static constexpr size_t fa_smem_bytes(int D) { return (size_t)(FA_BM + 2 * FA_BN) * D * 2; }
__host__ __device__ static constexpr size_t fa2_smem_bytes(int D) { return (size_t)(FA2_BM + 4 * FA_BN) * D * 2; }

// Two f32 as f16x2 (lo in the low half: the first element of a fragment pair).
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}

// Element offset of 16-byte chunk c of row r in a swizzled [64][D] f16 tile.
template <int D> __device__ __forceinline__ int fa_sw(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }

// Rows j0..j0+FA_BN of the cache rows at base (step halves apart) into the
// tile by the block's NT threads; rows at or past k_hi are zeros (not
// read: unwritten or past n_ctx).
template <int D, int NT>
__device__ __forceinline__ void fa_load_tile(__half *tile, const __half *base, uint64_t step, int j0, int k_hi)
{
    const int cpr = D / 8;
    for (int i = threadIdx.x; i < FA_BN * cpr; i += NT) {
        const int r = i / cpr, c = i % cpr;
        __half *d = tile + fa_sw<D>(r, c);
        if (j0 + r < k_hi)
            cp_async16(d, base + (uint64_t)(j0 + r) * step + c * 8);
        else
            *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// A set of a tile's rows (up to 128): row r is bit r of lo, or bit r - 64
// of hi.  Two words, not an array: a dynamically indexed array would live
// in local memory.
struct fa_rows {
    uint64_t lo, hi;
    __device__ __forceinline__ bool has(int r) const { return ((r < 64 ? lo >> r : hi >> (r - 64)) & 1) != 0; }
    __device__ __forceinline__ void add(int r)
    {
        if (r < 64)
            lo |= 1ull << r;
        else
            hi |= 1ull << (r - 64);
    }
    __device__ __forceinline__ bool all() const { return (lo & hi) == ~0ull; }
};

// The sequence and position of the tile's tokens t0 + r (-1 past n), by
// the block's NT threads.  Contains __syncthreads().
template <int BM, int NT>
__device__ __forceinline__ void fa_tile_rows(const cu_attn &a, int64_t t0, int32_t *seq_s, int32_t *pos_s)
{
    for (int r = threadIdx.x; r < BM; r += NT) {
        const bool in = t0 + r < a.n;
        seq_s[r] = in ? a.seq[t0 + r] : -1;
        pos_s[r] = in ? a.pos[t0 + r] : -1;
    }
    __syncthreads();
}

// The rows with no position in this split (pos < c0; tokens past n have
// pos -1): done from the start.  Rows BM.. do not exist (done).
template <int BM> __device__ __forceinline__ fa_rows fa_rows_before(const int32_t *pos_s, int c0)
{
    fa_rows d = { 0ull, BM > 64 ? 0ull : ~0ull };
    for (int r = 0; r < BM; r++)
        if (pos_s[r] < c0)
            d.add(r);
    return d;
}

// 1. The warp's 16 q rows (warp * 16 + i, token t0 + row), normed and
// roped in f32 (norm_rope's arithmetic) through the warp's D floats of
// scratch xs, to f16 in the swizzled Q tile; rows in skip are zeros.
// Chunk c (8 halves) of row r goes to element at(r, c) of qs: v1/v2's
// [rows][D] tile (fa_q_sw), v3's 128-byte-swizzled slabs of 64 dims.
template <int D> struct fa_q_sw {
    __device__ __forceinline__ int operator()(int r, int c) const { return fa_sw<D>(r, c); }
};
template <int D, class At = fa_q_sw<D>>
__device__ __forceinline__ void fa_q_rows(const cu_attn &a, __half *qs, float *xs, int64_t t0, int h, const fa_rows &skip,
                                          At at = At())
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int i = 0; i < 16; i++) {
        const int r = warp * 16 + i;
        if (skip.has(r)) {
            for (int c = lane; c < D / 8; c += 32)
                *(uint4 *)(qs + at(r, c)) = make_uint4(0u, 0u, 0u, 0u);
            continue;
        }
        const int64_t t = t0 + r;
        const float *src = a.qg + t * a.qg_stride + (uint64_t)h * 2 * D;
        double ss = 0.0;
        for (int e = lane; e < D; e += 32) {
            const float x = src[e];
            xs[e] = x;
            ss += (double)x * (double)x;
        }
        if (a.q_norm != NULL) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float sc = (float)(1.0 / sqrt(ss / D + (double)a.eps));
            for (int e = lane; e < D; e += 32)
                xs[e] = __fmul_rn(__fmul_rn(xs[e], sc), a.q_norm[e]);
        }
        __syncwarp();
        const int half = a.n_rot / 2;
        const float *cs = a.rope + t * a.n_rot;
        for (int e = lane; e < half; e += 32) {
            const float x0 = xs[e], x1 = xs[e + half], c = cs[2 * e], s = cs[2 * e + 1];
            xs[e] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
            xs[e + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
        }
        __syncwarp();
        for (int c = lane; c < D / 8; c += 32) {
            const float *x = xs + c * 8;
            *(uint4 *)(qs + at(r, c)) =
                make_uint4(pack_h2(x[0], x[1]), pack_h2(x[2], x[3]), pack_h2(x[4], x[5]), pack_h2(x[6], x[7]));
        }
        __syncwarp();   // xs is the next row's
    }
}

// One pass over the split's keys: the rows of one sequence among the
// tile's.  lim: the last key of this lane's two rows (-1: not in the
// pass); wmax, wmin over the warp's rows.
struct fa_pass {
    const __half *kg, *vg;   // the sequence's K, V rows of the kv head
    int k_hi;                // its positions [c0, k_hi)
    int32_t seq;             // the sequence
    int lim[2], wmax, wmin;
};

// The next pass: the sequence of the first row not done, and every row
// not done of that sequence (done from now on).  The same in every thread.
template <int BM, int D>
__device__ __forceinline__ void fa_next_pass(const cu_attn &a, fa_rows &done, const int32_t *seq_s, const int32_t *pos_s,
                                             int c1, int g, const int (&rl)[2], fa_pass &ps)
{
    int r0 = 0;
    while (done.has(r0))
        r0++;
    const int32_t S = seq_s[r0];
    int kmax = -1;
    fa_rows mine = { 0ull, 0ull };
    for (int r = r0; r < BM; r++)
        if (!done.has(r) && seq_s[r] == S) {
            mine.add(r);
            kmax = pos_s[r] > kmax ? pos_s[r] : kmax;
        }
    done.lo |= mine.lo;
    done.hi |= mine.hi;
    ps.k_hi = kmax + 1 < c1 ? kmax + 1 : c1;   // positions [c0, k_hi) of sequence S
    ps.seq = S;
#pragma unroll
    for (int j = 0; j < 2; j++)
        ps.lim[j] = mine.has(rl[j]) ? (pos_s[rl[j]] < ps.k_hi - 1 ? pos_s[rl[j]] : ps.k_hi - 1) : -1;
    int wmax = ps.lim[0] > ps.lim[1] ? ps.lim[0] : ps.lim[1], wmin = ps.lim[0] < ps.lim[1] ? ps.lim[0] : ps.lim[1];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const int x = __shfl_xor_sync(0xffffffffu, wmax, off), y = __shfl_xor_sync(0xffffffffu, wmin, off);
        wmax = x > wmax ? x : wmax;
        wmin = y < wmin ? y : wmin;
    }
    ps.wmax = wmax;
    ps.wmin = wmin;
    const uint64_t at = (((uint64_t)S * a.n_ctx) * a.n_head_kv + (uint64_t)g) * D;
    ps.kg = (const __half *)a.kc + at;
    ps.vg = (const __half *)a.vc + at;
}

// The online-softmax step of the tile at j0: scores in log2 units, keys
// past a row's last masked to -inf, the row maxima m and sums l updated;
// s becomes p = 2^(score - m) and f the factor O is to be scaled by.
__device__ __forceinline__ void fa_softmax(float (&s)[FA_BN / 8][4], float (&m)[2], float (&l)[2], float (&f)[2], int j0,
                                           const fa_pass &ps, int tig, float sl2)
{
    const bool full = j0 + FA_BN - 1 <= ps.wmin;
    float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
    for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float v = s[nt][j] * sl2;
            if (!full && j0 + nt * 8 + 2 * tig + (j & 1) > ps.lim[j >> 1])
                v = -INFINITY;
            s[nt][j] = v;
            mx[j >> 1] = fmaxf(mx[j >> 1], v);
        }
    float base[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const float mn = fmaxf(m[j], quad_max(mx[j]));
        base[j] = mn == -INFINITY ? 0.0f : mn;   // no key yet: keep everything 0
        f[j] = exp2f(m[j] - base[j]);
        m[j] = mn;
        l[j] *= f[j];
    }
#pragma unroll
    for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float p = exp2f(s[nt][j] - base[j >> 1]);
            s[nt][j] = p;
            l[j >> 1] += p;
        }
}

template <int D> __device__ __forceinline__ void fa_rescale(float (&o)[D / 8][4], const float (&f)[2])
{
#pragma unroll
    for (int d = 0; d < D / 8; d++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[d][j] *= f[j >> 1];
}

// 4. The row sums over the quad, then this lane's two rows (rl) of the
// output or of the partials.
template <int D>
__device__ __forceinline__ void fa_store(const cu_attn &a, const float (&o)[D / 8][4], const float (&m)[2], float (&l)[2],
                                         const int32_t *pos_s, const int (&rl)[2], int64_t t0, int h, int c0, int sp,
                                         int n_split)
{
    const int tig = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        l[j] += __shfl_xor_sync(0xffffffffu, l[j], 1);
        l[j] += __shfl_xor_sync(0xffffffffu, l[j], 2);
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int r = rl[j];
        if (pos_s[r] < c0)
            continue;   // no key here (combine reads only splits <= pos / chunk)
        const int64_t t = t0 + r;
        if (n_split == 1) {
            const float inv = 1.0f / l[j];
            const float *gate = a.qg + t * a.qg_stride + (uint64_t)h * 2 * D + D;
            float *out = a.dst + t * a.dst_stride + (uint64_t)h * D;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = d * 8 + 2 * tig + e;
                    out[col] = o[d][2 * j + e] * inv / (1.0f + expf(-gate[col]));
                }
        } else {
            // combine_kernel's layout: acc [n][n_head][n_split][hd], then
            // (m, l) [n][n_head][n_split][2], m in natural-log units
            const uint64_t pb = ((uint64_t)t * a.n_head + h) * n_split + sp;
            float *pacc = a.part + pb * D;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    pacc[d * 8 + 2 * tig + e] = o[d][2 * j + e];
            if (tig == 0) {
                float *pml = a.part + (uint64_t)a.n * a.n_head * n_split * D + 2 * pb;
                pml[0] = m[j] * 0.6931471805599453f;
                pml[1] = l[j];
            }
        }
    }
}

#endif
