// backends/cuda_sm120/cuda_attn_fa.cu — the attention core of SI_OP_ATTN
// for prefill over the dense f16 cache (knob attn_prefill = fa): flash
// attention on the f16 tensor cores (mma.sync m16n8k16, f32 accumulate).
// si_cu_attn (cuda_attn.cu) has run rope_kernel and append_kernel before,
// so every position 0..pos of each token's sequence is in the cache.
//
// Block = (tile of FA_BM = 64 consecutive tokens, query head, split of the
// context), 4 warps of 16 tokens each (the tile is walked last tile first:
// the longest contexts start first).  The block
//   1. normalises and ropes its 64 q rows in f32 exactly as norm_rope does
//      (one warp per row, through a scratch in the still unused V buffer)
//      and stores them as f16 in shared memory;
//   2. streams the K/V rows of the head's kv head in tiles of FA_BN = 64
//      positions through shared memory with cp.async (the V tile loads
//      while S = Q K^T runs, the next K tile while O += P V runs);
//   3. per tile: S on mma.sync (Q and K fragments by ldmatrix), causal mask
//      from the tokens' positions, online softmax in f32 (exp2 of scores
//      pre-scaled by log2(e) / sqrt(hd): the same e^x), P rounded to f16,
//      O += P V on mma.sync (V fragments by ldmatrix.trans), O in f32
//      registers (16 x hd per warp);
//   4. out = O / l * sigmoid(gate), or (split) O, m, l as partials in the
//      layout combine_kernel (cuda_attn.cu) merges.
// Tokens of several sequences in one tile: the tile is processed once per
// distinct sequence among its rows ("segment"), each row's softmax state
// changing only in its own segment's pass (other rows see only masked
// scores).  Key tiles past the segment's last position are never loaded;
// rows past it inside a tile read zeros (the cache there is not written:
// 0 * NaN would poison O).  A warp whose rows all end before a key tile
// skips the tile's math.
// Exact attention (no window, no approximation of the softmax); vs the
// split kernel it rounds q and P to f16 (K/V are f16 in the cache) and
// sums in another order: ~1e-4 relative (tests/cuda/emu/run-fa-emu.sh).
// Shared memory: Q, K, V tiles of 64 x hd f16 (96 KiB at hd 256: two
// blocks per SM on sm_90, one on sm_120), rows swizzled in 16-byte chunks
// (chunk c of row r at c ^ (r & 7)) so ldmatrix reads 8 rows conflict-free.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_attn.cuh"
#include "cuda_ptx.cuh"

#define FA_BM        64    /* query rows (tokens) per block: 16 per warp  */
#define FA_BN        64    /* key positions per tile                      */
#define FA_THREADS   128
#define FA_MIN_CHUNK 256   /* split: positions per split at least         */

static constexpr size_t fa_smem_bytes(int D) { return (size_t)(FA_BM + 2 * FA_BN) * D * 2; }

// Two f32 as f16x2 (lo in the low half: the first element of a fragment pair).
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
}

// Element offset of 16-byte chunk c of row r in a swizzled [64][D] f16 tile.
template <int D> __device__ __forceinline__ int fa_sw(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }

// Rows j0..j0+FA_BN of the cache rows at base (step halves apart) into the
// tile; rows at or past k_hi are zeros (not read: unwritten or past n_ctx).
template <int D>
__device__ __forceinline__ void fa_load_tile(__half *tile, const __half *base, uint64_t step, int j0, int k_hi)
{
    const int cpr = D / 8;
    for (int i = threadIdx.x; i < FA_BN * cpr; i += FA_THREADS) {
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

template <int D>
__global__ void __launch_bounds__(FA_THREADS, 2) fa_kernel(cu_attn a, int32_t chunk, int n_split)
{
    extern __shared__ float sm[];
    __shared__ int32_t seq_s[FA_BM], pos_s[FA_BM];
    __half *qs = (__half *)sm, *ks = qs + FA_BM * D, *vs = ks + FA_BN * D;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int64_t t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FA_BM;
    const int h = blockIdx.y, g = h / (a.n_head / a.n_head_kv), sp = blockIdx.z;
    const int c0 = sp * chunk, c1 = c0 + chunk;   // this split's positions [c0, c1)

    for (int r = threadIdx.x; r < FA_BM; r += FA_THREADS) {
        const bool in = t0 + r < a.n;
        seq_s[r] = in ? a.seq[t0 + r] : -1;
        pos_s[r] = in ? a.pos[t0 + r] : -1;
    }
    __syncthreads();
    // rows with no position in this split are done from the start (tokens
    // past n have pos -1); a block with none left leaves (uniformly)
    uint64_t done = 0;
    for (int r = 0; r < FA_BM; r++)
        if (pos_s[r] < c0)
            done |= 1ull << r;
    if (done == ~0ull)
        return;

    // 1. q rows, normed and roped in f32 (norm_rope's arithmetic), to f16
    float *xs = (float *)vs + warp * D;   // scratch: V is first loaded after the loop's first barrier
    for (int i = 0; i < 16; i++) {
        const int r = warp * 16 + i;
        __half *qrow = qs + r * D;
        if (done >> r & 1) {
            for (int c = lane; c < D / 8; c += 32)
                *(uint4 *)(qrow + ((c ^ (r & 7)) << 3)) = make_uint4(0u, 0u, 0u, 0u);
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
            *(uint4 *)(qrow + ((c ^ (r & 7)) << 3)) =
                make_uint4(pack_h2(x[0], x[1]), pack_h2(x[2], x[3]), pack_h2(x[4], x[5]), pack_h2(x[6], x[7]));
        }
        __syncwarp();   // xs is the next row's
    }

    float o[D / 8][4];
#pragma unroll
    for (int d = 0; d < D / 8; d++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[d][j] = 0.0f;
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
    const int rl[2] = { warp * 16 + gid, warp * 16 + gid + 8 };   // this lane's two rows
    const float sl2 = 1.4426950408889634f / sqrtf((float)D);     // log2(e) / sqrt(hd)
    const uint64_t step = (uint64_t)a.n_head_kv * D;
    // ldmatrix row addresses of this lane (bytes): every fragment row r has
    // r & 7 == lane & 7, so chunk 2k + b sits at 8 * (k & ~3) + sw[k & 3]
    // chunks: Q rows warp*16 + lane%16, chunk + lane/16; K rows + 8*(lane/16)
    // + lane%8, chunk + (lane/8)%2; V rows + 8*((lane/8)%2) + lane%8, chunk
    // + lane/16 (the x4 matrices in the order of the mma operands)
    const int x7 = lane & 7;
    const uint32_t qa0 = smem_u32(qs) + (uint32_t)(warp * 16 + (lane & 15)) * D * 2;
    const uint32_t ka0 = smem_u32(ks) + (uint32_t)(((lane >> 4) << 3) + x7) * D * 2;
    const uint32_t va0 = smem_u32(vs) + (uint32_t)((((lane >> 3) & 1) << 3) + x7) * D * 2;
    uint32_t qsw[4], ksw[4];   // V's chunk offsets are Q's
#pragma unroll
    for (int u = 0; u < 4; u++) {
        qsw[u] = (uint32_t)(((2 * u + (lane >> 4)) ^ x7) << 4);
        ksw[u] = (uint32_t)(((2 * u + ((lane >> 3) & 1)) ^ x7) << 4);
    }

    // 2./3. once per sequence among the rows (one pass for a plain prefill)
    while (done != ~0ull) {
        int r0 = 0;
        while (done >> r0 & 1)
            r0++;
        const int32_t S = seq_s[r0];
        int kmax = -1;
        uint64_t mine = 0;
        for (int r = r0; r < FA_BM; r++)
            if (!(done >> r & 1) && seq_s[r] == S) {
                mine |= 1ull << r;
                kmax = pos_s[r] > kmax ? pos_s[r] : kmax;
            }
        done |= mine;
        const int k_hi = kmax + 1 < c1 ? kmax + 1 : c1;   // positions [c0, k_hi) of sequence S
        // last key of each of this lane's rows (-1: not in this pass)
        int lim[2];
#pragma unroll
        for (int j = 0; j < 2; j++)
            lim[j] = (mine >> rl[j] & 1) ? (pos_s[rl[j]] < k_hi - 1 ? pos_s[rl[j]] : k_hi - 1) : -1;
        int wmax = lim[0] > lim[1] ? lim[0] : lim[1], wmin = lim[0] < lim[1] ? lim[0] : lim[1];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const int x = __shfl_xor_sync(0xffffffffu, wmax, off), y = __shfl_xor_sync(0xffffffffu, wmin, off);
            wmax = x > wmax ? x : wmax;
            wmin = y < wmin ? y : wmin;
        }
        const __half *kg = (const __half *)a.kc + (((uint64_t)S * a.n_ctx) * a.n_head_kv + (uint64_t)g) * D;
        const __half *vg = (const __half *)a.vc + (((uint64_t)S * a.n_ctx) * a.n_head_kv + (uint64_t)g) * D;

        fa_load_tile<D>(ks, kg, step, c0, k_hi);
        cp_async_commit();
        for (int j0 = c0; j0 < k_hi; j0 += FA_BN) {
            cp_async_wait_all();
            __syncthreads();   // K landed; every warp is done with V (and the q scratch)
            fa_load_tile<D>(vs, vg, step, j0, k_hi);
            cp_async_commit();
            const bool active = j0 <= wmax;   // else every row of the warp ends before the tile
            float s[FA_BN / 8][4];
            if (active) {
#pragma unroll
                for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        s[nt][j] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t qa[4];
                    ldsm_x4(qa, qa0 + (kk >> 2) * 128 + qsw[kk & 3]);
#pragma unroll
                    for (int np = 0; np < FA_BN / 16; np++) {
                        uint32_t kb[4];
                        ldsm_x4(kb, ka0 + np * 16 * D * 2 + (kk >> 2) * 128 + ksw[kk & 3]);
                        mma_f16(s[2 * np], qa, kb[0], kb[1]);
                        mma_f16(s[2 * np + 1], qa, kb[2], kb[3]);
                    }
                }
                // scores in log2 units; masked -> -inf
                const bool full = j0 + FA_BN - 1 <= wmin;
                float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
                for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float v = s[nt][j] * sl2;
                        if (!full && j0 + nt * 8 + 2 * tig + (j & 1) > lim[j >> 1])
                            v = -INFINITY;
                        s[nt][j] = v;
                        mx[j >> 1] = fmaxf(mx[j >> 1], v);
                    }
                float base[2], f[2];
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
#pragma unroll
                for (int d = 0; d < D / 8; d++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        o[d][j] *= f[j >> 1];
            }
            cp_async_wait_all();
            __syncthreads();   // V landed; every warp is done with K
            if (j0 + FA_BN < k_hi) {
                fa_load_tile<D>(ks, kg, step, j0 + FA_BN, k_hi);
                cp_async_commit();
            }
            if (active) {
#pragma unroll
                for (int kv = 0; kv < FA_BN / 16; kv++) {
                    const uint32_t pa[4] = { pack_h2(s[2 * kv][0], s[2 * kv][1]), pack_h2(s[2 * kv][2], s[2 * kv][3]),
                                             pack_h2(s[2 * kv + 1][0], s[2 * kv + 1][1]),
                                             pack_h2(s[2 * kv + 1][2], s[2 * kv + 1][3]) };
#pragma unroll
                    for (int dp = 0; dp < D / 16; dp++) {
                        uint32_t vb[4];
                        ldsm_x4_t(vb, va0 + kv * 16 * D * 2 + (dp >> 2) * 128 + qsw[dp & 3]);
                        mma_f16(o[2 * dp], pa, vb[0], vb[1]);
                        mma_f16(o[2 * dp + 1], pa, vb[2], vb[3]);
                    }
                }
            }
        }
    }

    // 4. the row sums over the quad, then the output or the partials
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

// Whether the device lets a block have the kernel's shared memory.
static bool fa_fits(int D)
{
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return fa_smem_bytes(D) + 2 * FA_BM * sizeof(int32_t) <= (size_t)optin;
}

extern "C" bool si_cu_fa_plan(const cu_attn *a, cu_fa_plan *p)
{
    const int D = a->head_dim;
    if (!a->fa || !a->f16 || a->i8 || a->n <= 0 || a->max_len <= 0)
        return false;
    if ((D != 64 && D != 128 && D != 256) || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return false;
    if ((((uintptr_t)a->kc) | ((uintptr_t)a->vc)) % 16 != 0 || !fa_fits(D))
        return false;
    // Fewer blocks than two waves of resident blocks (two per SM): cut the
    // context into splits (merged by combine_kernel) for about four waves,
    // no split shorter than FA_MIN_CHUNK positions.  A 512-token chunk of
    // a long prompt is 8 tiles x 16 heads = 128 blocks: without splits
    // half the SMs' slots would idle through its whole (long) context.
    const int64_t blocks = (a->n + FA_BM - 1) / FA_BM * a->n_head;
    const int64_t slots = 2 * (int64_t)(a->n_sm > 0 ? a->n_sm : 128);
    int64_t ns = blocks >= 2 * slots ? 1 : (4 * slots + blocks - 1) / blocks;
    const int64_t most = ((int64_t)a->max_len + FA_MIN_CHUNK - 1) / FA_MIN_CHUNK;
    ns = ns < most ? ns : most;
    ns = ns < SPLIT_MAX ? ns : SPLIT_MAX;
    int64_t ch = ((int64_t)a->max_len + ns - 1) / ns;
    ch = (ch + FA_BN - 1) / FA_BN * FA_BN;
    p->chunk = (int32_t)ch;
    p->n_split = (int)(((int64_t)a->max_len + ch - 1) / ch);
    return true;
}

template <int D> static int fa_launch(const cu_attn *a, const cu_fa_plan *p, cudaStream_t s)
{
    const size_t smem = fa_smem_bytes(D);
    // Above the 48 KiB default: opt in (per device and function; cheap).
    cudaError_t e = cudaFuncSetAttribute(fa_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return (int)e;
    const dim3 grid((unsigned)((a->n + FA_BM - 1) / FA_BM), (unsigned)a->n_head, (unsigned)p->n_split);
    fa_kernel<D><<<grid, FA_THREADS, smem, s>>>(*a, p->chunk, p->n_split);
    return (int)cudaGetLastError();
}

extern "C" int si_cu_fa(const cu_attn *a, const cu_fa_plan *p, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (p->n_split > 1 && a->part == NULL)
        return (int)cudaErrorInvalidValue;
    switch (a->head_dim) {
    case 64: return fa_launch<64>(a, p, s);
    case 128: return fa_launch<128>(a, p, s);
    case 256: return fa_launch<256>(a, p, s);
    default: return (int)cudaErrorInvalidValue;
    }
}
