// backends/cuda_sm120/cuda_attn_fa.cu — the attention core of SI_OP_ATTN
// for prefill over the dense f16 cache (knob attn_prefill = fa): flash
// attention on the f16 tensor cores (mma.sync m16n8k16, f32 accumulate).
// si_cu_attn (cuda_attn.cu) has run append_kernel (rope table, K/V) before,
// so every position 0..pos of each token's sequence is in the cache.
// Two tilings of the same per-row arithmetic (knob attn_fa_tile: v2, the
// default, and v1, kept for A/B); both are built from the pieces in
// cuda_attn_fa.cuh and below.  v3 (cuda_attn_fa3.cu) puts v2's tiles on
// Hopper's wgmma, with the same pieces; si_cu_fa_plan below picks.
//
// v1 (fa_kernel): block = (tile of FA_BM = 64 consecutive tokens, query
// head, split of the context), 4 warps of 16 tokens each (the tile is
// walked last tile first: the longest contexts start first).  The block
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
// Shared memory: Q, K, V tiles of 64 x hd f16 (96 KiB at hd 256: two
// blocks per SM on sm_90, one on sm_120).
//
// v2 (fa2_kernel): block = (query head, tile of FA2_BM = 128 tokens,
// split), 8 warps of 16 tokens, one block per SM; steps 1, 3 and 4 as v1
// (each warp's rows, fragments and arithmetic are v1's); step 2 keeps two
// stages of (K, V) in shared memory: the next tile's K and V load while
// the whole of this tile's S, softmax and P V run, one block barrier a
// tile (v1: two), and the first tile loads while the q rows are made.
// Q 64 KiB + 2 x 64 KiB at hd 256 = 192 KiB: sm_90's 227 KiB hold it,
// sm_120's 99 KiB do not (hd 256 runs v1 there; hd <= 128 fits).  Why it
// is faster on the H200 (v1 measured: 9b's 8 layers at a 32k prompt in
// ubatches of 2048, 371 ms, ~190 TFLOPS against ~660 for mma.sync):
//   - L2 -> SM bytes.  A K/V tile (64 positions, 64 KiB at hd 256) feeds
//     the rows of one block: 64 in v1, 128 here, so every K/V byte is
//     read half as often.  Per layer at 32k (sum over 64-token tiles of
//     their context, ~8.4 M tile-positions, x 16 heads x 1 KiB) v1 moves
//     ~137 GB through the L2, ~3 TB/s at 46 ms a layer (the K/V of a
//     layer, 128 MiB at 32k for 9b, is more than the 50 MB L2: misses go
//     to HBM too); v2 moves ~69 GB.  (Serving the 4 or 8 query heads of
//     a kv head in one block instead saves exactly as much per row: what
//     counts is rows per resident K/V tile, and the registers cap those
//     at 8 warps x 16 rows a SM with O (16 x 256 f32 = 128 registers a
//     thread) in registers.  128 tokens of one head keep any group size
//     and the GQA heads' blocks adjacent in the grid, so the L2 still
//     serves a kv head's tiles to its query heads.)
//   - Latency.  v1's loads hide behind half a tile's math (S or P V) and
//     each barrier stalls a block's 4 warps at the slowest; with two
//     blocks a SM that was 8 warps behind 4 barriers a tile.  v2: 8 warps
//     behind one barrier a tile, the loads (64 KiB a tile: 8 + 8 cp.async
//     of 16 bytes a thread) behind a whole tile's math, ~2048 mma.sync
//     (~3300 cycles at the practical peak: 21 bytes a cycle a SM).
//   - No splits at ubatch size.  v1 (two blocks a SM) cut 2048 tokens x
//     16 heads = 512 blocks into 3 splits (partials: 2048 x 16 x 3 x
//     1 KiB = 100 MB written and read back by combine_kernel a layer);
//     v2's 256 blocks fill 132 SMs in 2 waves (97%) unsplit (fa_splits2).
//   - Launch order: the head is the fastest grid index, then the tile,
//     longest first, so every head's longest tiles start first (longest
//     processing time first across the whole grid; v1 walks one head's
//     tiles at a time) and the query heads of one kv head run together.
//   - O's rescale (128 multiplies a thread a tile) is skipped where no
//     row maximum of the lane moved (exact: the factor is 1); at long
//     contexts the maxima rarely move.
//   Unchanged: the shared-memory reads per mma (a warp's 16 rows: 144
//   ldmatrix.x4 for 256 mma.sync a tile), ~4600 cycles of the 128 B a
//   cycle a SM per tile, which is the next bound (~65% of the mma.sync
//   peak; warps of 32 rows would halve it but need O's columns split
//   over two warps at hd 256).  Estimate: 1.3-1.6x on the long-prompt
//   ATTN pre (the L2 bytes halved, the split traffic gone), not measured.
// Ops of at most FA_BM tokens run v1 (a v2 block would hold a SM with
// half its warps idle).
//
// Both: tokens of several sequences in one tile: the tile is processed
// once per distinct sequence among its rows ("pass"), each row's softmax
// state changing only in its own pass (other rows see only masked
// scores).  Key tiles past the pass's last position are never loaded;
// rows past it inside a tile read zeros (the cache there is not written:
// 0 * NaN would poison O).  A warp whose rows all end before a key tile
// skips the tile's math.
// Exact attention (no window, no approximation of the softmax); vs the
// split kernel it rounds q and P to f16 (K/V are f16 in the cache) and
// sums in another order: ~1e-4 relative (tests/cuda/emu/run-fa-emu.sh).
// v1 and v2 give the same bits where their split counts agree (the same
// tiles, fragments and order per row); otherwise combine's f32 order.
// Rows are swizzled in 16-byte chunks (chunk c of row r at c ^ (r & 7))
// so ldmatrix reads 8 rows conflict-free.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_attn.cuh"
#include "cuda_ptx.cuh"
#include "cuda_attn_fa.cuh"   // the pieces v1, v2 and v3 (cuda_attn_fa3.cu) share

// ldmatrix row addresses of this lane (bytes) into the Q tile and the K, V
// tiles at ks, vs (v2: stage 0's): every fragment row r has r & 7 == lane
// & 7, so chunk 2k + b sits at 8 * (k & ~3) + sw[k & 3] chunks: Q rows
// warp*16 + lane%16, chunk + lane/16; K rows + 8*(lane/16) + lane%8, chunk
// + (lane/8)%2; V rows + 8*((lane/8)%2) + lane%8, chunk + lane/16 (the x4
// matrices in the order of the mma operands).
struct fa_lane {
    uint32_t qa0, ka0, va0;
    uint32_t qsw[4], ksw[4];   // V's chunk offsets are Q's
};
template <int D> __device__ __forceinline__ fa_lane fa_lane_at(const __half *qs, const __half *ks, const __half *vs)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, x7 = lane & 7;
    fa_lane L;
    L.qa0 = smem_u32(qs) + (uint32_t)(warp * 16 + (lane & 15)) * D * 2;
    L.ka0 = smem_u32(ks) + (uint32_t)(((lane >> 4) << 3) + x7) * D * 2;
    L.va0 = smem_u32(vs) + (uint32_t)((((lane >> 3) & 1) << 3) + x7) * D * 2;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        L.qsw[u] = (uint32_t)(((2 * u + (lane >> 4)) ^ x7) << 4);
        L.ksw[u] = (uint32_t)(((2 * u + ((lane >> 3) & 1)) ^ x7) << 4);
    }
    return L;
}

// S = Q K^T of the warp's 16 rows and the tile's FA_BN keys (K at ka0).
template <int D>
__device__ __forceinline__ void fa_scores(float (&s)[FA_BN / 8][4], const fa_lane &L, uint32_t ka0)
{
#pragma unroll
    for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            s[nt][j] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t qa[4];
        ldsm_x4(qa, L.qa0 + (kk >> 2) * 128 + L.qsw[kk & 3]);
#pragma unroll
        for (int np = 0; np < FA_BN / 16; np++) {
            uint32_t kb[4];
            ldsm_x4(kb, ka0 + np * 16 * D * 2 + (kk >> 2) * 128 + L.ksw[kk & 3]);
            mma_f16(s[2 * np], qa, kb[0], kb[1]);
            mma_f16(s[2 * np + 1], qa, kb[2], kb[3]);
        }
    }
}

// O += P V over the tile's keys (V at va0; P from s, rounded to f16).
template <int D>
__device__ __forceinline__ void fa_pv(float (&o)[D / 8][4], const float (&s)[FA_BN / 8][4], const fa_lane &L, uint32_t va0)
{
#pragma unroll
    for (int kv = 0; kv < FA_BN / 16; kv++) {
        const uint32_t pa[4] = { pack_h2(s[2 * kv][0], s[2 * kv][1]), pack_h2(s[2 * kv][2], s[2 * kv][3]),
                                 pack_h2(s[2 * kv + 1][0], s[2 * kv + 1][1]),
                                 pack_h2(s[2 * kv + 1][2], s[2 * kv + 1][3]) };
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t vb[4];
            ldsm_x4_t(vb, va0 + kv * 16 * D * 2 + (dp >> 2) * 128 + L.qsw[dp & 3]);
            mma_f16(o[2 * dp], pa, vb[0], vb[1]);
            mma_f16(o[2 * dp + 1], pa, vb[2], vb[3]);
        }
    }
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

    fa_tile_rows<FA_BM, FA_THREADS>(a, t0, seq_s, pos_s);
    // a block with no row left leaves (uniformly)
    fa_rows done = fa_rows_before<FA_BM>(pos_s, c0);
    if (done.all())
        return;
    // 1. scratch: V is first loaded after the loop's first barrier
    fa_q_rows<D>(a, qs, (float *)vs + warp * D, t0, h, done);

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
    const fa_lane L = fa_lane_at<D>(qs, ks, vs);

    // 2./3. once per sequence among the rows (one pass for a plain prefill)
    while (!done.all()) {
        fa_pass ps;
        fa_next_pass<FA_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
        fa_load_tile<D, FA_THREADS>(ks, ps.kg, step, c0, ps.k_hi);
        cp_async_commit();
        for (int j0 = c0; j0 < ps.k_hi; j0 += FA_BN) {
            cp_async_wait_all();
            __syncthreads();   // K landed; every warp is done with V (and the q scratch)
            fa_load_tile<D, FA_THREADS>(vs, ps.vg, step, j0, ps.k_hi);
            cp_async_commit();
            const bool active = j0 <= ps.wmax;   // else every row of the warp ends before the tile
            float s[FA_BN / 8][4];
            if (active) {
                float f[2];
                fa_scores<D>(s, L, L.ka0);
                fa_softmax(s, m, l, f, j0, ps, tig, sl2);
                fa_rescale<D>(o, f);
            }
            cp_async_wait_all();
            __syncthreads();   // V landed; every warp is done with K
            if (j0 + FA_BN < ps.k_hi) {
                fa_load_tile<D, FA_THREADS>(ks, ps.kg, step, j0 + FA_BN, ps.k_hi);
                cp_async_commit();
            }
            if (active)
                fa_pv<D>(o, s, L, L.va0);
        }
    }

    fa_store<D>(a, o, m, l, pos_s, rl, t0, h, c0, sp, n_split);
}

// v2's stage st (0 or 1) of (K, V) at kv: the tile of the pass at j0,
// one commit group.
template <int D>
__device__ __forceinline__ void fa2_load_stage(__half *kv, int st, const fa_pass &ps, uint64_t step, int j0)
{
    __half *k = kv + st * 2 * FA_BN * D;
    fa_load_tile<D, FA2_THREADS>(k, ps.kg, step, j0, ps.k_hi);
    fa_load_tile<D, FA2_THREADS>(k + FA_BN * D, ps.vg, step, j0, ps.k_hi);
    cp_async_commit();
}

template <int D>
__global__ void __launch_bounds__(FA2_THREADS, 1) fa2_kernel(cu_attn a, int32_t chunk, int n_split)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
    // sm_120's 99 KiB of shared memory a block never hold v2 at hd 256
    // (si_cu_fa_plan runs v1 there): no code for it in that pass, whose
    // register allocation at the 255 limit would spill
    if (fa2_smem_bytes(D) > FA2_SM120_SMEM)
        return;
#endif
    extern __shared__ float sm[];
    __shared__ int32_t seq_s[FA2_BM], pos_s[FA2_BM];
    __half *qs = (__half *)sm, *kv = qs + FA2_BM * D;   // stage st: K at kv + 2 st FA_BN D, V after it
    const uint32_t stage_bytes = 2 * FA_BN * D * 2;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int64_t t0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * FA2_BM;
    const int h = blockIdx.x, g = h / (a.n_head / a.n_head_kv), sp = blockIdx.z;
    const int c0 = sp * chunk, c1 = c0 + chunk;   // this split's positions [c0, c1)

    fa_tile_rows<FA2_BM, FA2_THREADS>(a, t0, seq_s, pos_s);
    const fa_rows skip = fa_rows_before<FA2_BM>(pos_s, c0);
    if (skip.all())
        return;
    fa_rows done = skip;
    const int rl[2] = { warp * 16 + gid, warp * 16 + gid + 8 };   // this lane's two rows
    const uint64_t step = (uint64_t)a.n_head_kv * D;
    // The first pass's first tile loads while the q rows are made.  The
    // stage the next tile goes to alternates across passes too, so a
    // pass's first tile never lands where warps may still read the last
    // tile of the pass before.
    fa_pass ps;
    fa_next_pass<FA2_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
    int st = 0;
    fa2_load_stage<D>(kv, st, ps, step, c0);
    // 1. scratch: stage 1's V, first loaded after the loop's first barrier
    fa_q_rows<D>(a, qs, (float *)(kv + 3 * FA_BN * D) + warp * D, t0, h, skip);

    float o[D / 8][4];
#pragma unroll
    for (int d = 0; d < D / 8; d++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[d][j] = 0.0f;
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
    const float sl2 = 1.4426950408889634f / sqrtf((float)D);   // log2(e) / sqrt(hd)
    const fa_lane L = fa_lane_at<D>(qs, kv, kv + FA_BN * D);

    // 2./3. once per sequence among the rows (one pass for a plain prefill)
    for (;;) {
        for (int j0 = c0; j0 < ps.k_hi; j0 += FA_BN, st ^= 1) {
            cp_async_wait_all();
            __syncthreads();   // the tile landed in stage st; every warp is done with stage st ^ 1 (and the q scratch)
            if (j0 + FA_BN < ps.k_hi)
                fa2_load_stage<D>(kv, st ^ 1, ps, step, j0 + FA_BN);
            if (j0 <= ps.wmax) {   // else every row of the warp ends before the tile
                const uint32_t so = st * stage_bytes;
                float s[FA_BN / 8][4], f[2];
                fa_scores<D>(s, L, L.ka0 + so);
                fa_softmax(s, m, l, f, j0, ps, tig, sl2);
                if (f[0] != 1.0f || f[1] != 1.0f)   // a row maximum moved (O * 1 is O)
                    fa_rescale<D>(o, f);
                fa_pv<D>(o, s, L, L.va0 + so);
            }
        }
        if (done.all())
            break;
        fa_next_pass<FA2_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
        fa2_load_stage<D>(kv, st, ps, step, c0);
    }

    fa_store<D>(a, o, m, l, pos_s, rl, t0, h, c0, sp, n_split);
}

// Whether the device lets a block have `bytes` of shared memory.
static bool fa_fits(size_t bytes)
{
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return bytes <= (size_t)optin;
}

// v1: fewer blocks than two waves of resident blocks (two per SM): cut the
// context into splits (merged by combine_kernel) for about four waves.  A
// 512-token chunk of a long prompt is 8 tiles x 16 heads = 128 blocks:
// without splits half the SMs' slots would idle through its whole (long)
// context.
static int64_t fa_splits1(int64_t blocks, int64_t n_sm)
{
    const int64_t slots = 2 * n_sm;
    return blocks >= 2 * slots ? 1 : (4 * slots + blocks - 1) / blocks;
}

// v2 (one block per SM): a block's time is mostly its keys, so a split
// only adds partials, their combine and another q prologue; the fewest
// splits (up to `most`) that make at least one full wave whose last wave
// is at least 7/8 full.  A 2048-token ubatch x 16 heads = 256 blocks on
// 132 SMs: 2 waves, 97%, unsplit; 140 blocks: 5 splits (88%).
static int64_t fa_splits2(int64_t blocks, int64_t n_sm, int64_t most)
{
    for (int64_t ns = 1; ns < most; ns++) {
        const int64_t b = blocks * ns, waves = (b + n_sm - 1) / n_sm;
        if (b >= n_sm && 8 * b >= 7 * waves * n_sm)
            return ns;
    }
    return most;
}

extern "C" bool si_cu_fa_plan(const cu_attn *a, cu_fa_plan *p)
{
    const int D = a->head_dim;
    if (!a->fa || !a->f16 || a->i8 || a->n <= 0 || a->max_len <= 0)
        return false;
    if ((D != 64 && D != 128 && D != 256) || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0)
        return false;
    if ((((uintptr_t)a->kc) | ((uintptr_t)a->vc)) % 16 != 0 ||
        !fa_fits(fa_smem_bytes(D) + 2 * FA_BM * sizeof(int32_t)))
        return false;
    // v2 where it fits; an op of at most FA_BM tokens keeps v1 (a v2 block
    // would hold a SM with at most half its warps busy); the grid's y
    // (tiles of v2) is at most 65535.  v3 (cuda_attn_fa3.cu) where v2 runs
    // and it does too: knob v3 (which cuda_sm120.c keeps only where
    // si_cu_fa3_init found the sm_90a code runs), hd 128 or 256, its
    // shared memory; the same tiles and splits as v2.
    const int64_t tiles2 = (a->n + FA2_BM - 1) / FA2_BM;
    p->tile = a->fa_tile >= 2 && a->n > FA_BM && tiles2 <= 65535 &&
                      fa_fits(fa2_smem_bytes(D) + 2 * FA2_BM * sizeof(int32_t))
                  ? 2
                  : 1;
    if (p->tile == 2 && a->fa_tile == 3 && (D == 128 || D == 256) &&
        fa_fits(si_cu_fa3_smem(D) + 2 * FA2_BM * sizeof(int32_t)))
        p->tile = 3;
    const int64_t n_sm = a->n_sm > 0 ? a->n_sm : 128;
    const int64_t most = ((int64_t)a->max_len + FA_MIN_CHUNK - 1) / FA_MIN_CHUNK;   // no split shorter than FA_MIN_CHUNK
    int64_t ns = p->tile >= 2 ? fa_splits2(tiles2 * a->n_head, n_sm, most < SPLIT_MAX ? most : SPLIT_MAX)
                              : fa_splits1((a->n + FA_BM - 1) / FA_BM * a->n_head, n_sm);
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

// v2's grid: the head fastest, then the tile (the last first), the split.
template <int D> static int fa2_launch(const cu_attn *a, const cu_fa_plan *p, cudaStream_t s)
{
    const size_t smem = fa2_smem_bytes(D);
    cudaError_t e = cudaFuncSetAttribute(fa2_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return (int)e;
    const dim3 grid((unsigned)a->n_head, (unsigned)((a->n + FA2_BM - 1) / FA2_BM), (unsigned)p->n_split);
    fa2_kernel<D><<<grid, FA2_THREADS, smem, s>>>(*a, p->chunk, p->n_split);
    return (int)cudaGetLastError();
}

extern "C" int si_cu_fa(const cu_attn *a, const cu_fa_plan *p, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (p->n_split > 1 && a->part == NULL)
        return (int)cudaErrorInvalidValue;
    if (p->tile == 3)
        return si_cu_fa3(a, p, stream);
    const bool v2 = p->tile == 2;
    switch (a->head_dim) {
    case 64: return v2 ? fa2_launch<64>(a, p, s) : fa_launch<64>(a, p, s);
    case 128: return v2 ? fa2_launch<128>(a, p, s) : fa_launch<128>(a, p, s);
    case 256: return v2 ? fa2_launch<256>(a, p, s) : fa_launch<256>(a, p, s);
    default: return (int)cudaErrorInvalidValue;
    }
}
