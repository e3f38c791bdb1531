// backends/cuda_sm120/cuda_gemvx.cu — knob gemv_mma_wide: the dense
// decode products of 9..32 columns (decode of 9..32 sequences) on the
// int8 tensor cores, gx_kernel: cuda_gemvm.cuh's MMA steps with x staged
// in shared memory (and with knob gemv_narrow those of 2..8 columns, one
// column tile).  si_cu_gemvm (cuda_gemvm.cu) hands them here.
#include "cuda_gemvm.cuh"

// ---- 9..32 columns (knob gemv_mma_wide): x staged in shared memory
// Why not gm_kernel with more column tiles: its warps read x from the L2
// a sub-block at a time, a column's scale and sum each a 32-byte sector
// for 4 bytes, for 16 rows: at 32 columns ~10x the weights' bytes of L2
// traffic (H200, bench_gemv wide: the 9b's Q4_K 12288 x 4096 at 32
// columns 72 us, 392 GB/s; 37 us at 8).
// Here a block's GX_WARPS warps are RT row tiles of 16 x KS k-groups
// (RT KS = 8): each round the block stages KS steps of x (256 elements
// of every column, int8, and their scales and sums) in shared memory by
// cp.async, whole sectors, then warp (rt, kg) multiplies row tile rt's
// weights of step round KS + kg by it.  So a block reads x once for
// 16 RT rows, and a warp's x comes from shared memory (no L2 round trip
// a sub-block).  The weights go straight to registers as in gm_kernel,
// the next round's loaded before this one's multiply (the first before
// the programmatic-launch wait).  The k-groups' sums are added through
// shared memory in k-group order.
#define GX_WARPS 8
#define GX_CL_MAX 4   // blocks a cluster (knob gemv_wide_split)

// gx_kernel's blocks alone or as clusters along x (knob gemv_wide_split)
#include "cuda_cluster.cuh"   // (cl_*: run-gmm-emu.sh puts cluster_emu.h here)
#define GX_ROW 288   // a column's 256 int8 of a step, padded: the B reads conflict-free

template <int NT, int KS> struct gx_smem {
    int8_t q[KS][8 * NT][GX_ROW];
    float  d[KS][8 * NT][8], s[KS][8 * NT][8];   // [column][sub-block]
};

// x of a step from gx_smem, k-group kg.
template <int NT, int KS> struct gm_xs {
    const gx_smem<NT, KS> *S;
    int kg, g, t;
    template <bool SUMS> __device__ __forceinline__ gm_xb<NT> x(int j) const
    {
        gm_xb<NT> r;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            const int c0 = 8 * n + 2 * t;
            r.b[n] = *(const uint2 *)&S->q[kg][8 * n + g][32 * j + 8 * t];
            r.dx[n] = make_float2(S->d[kg][c0][j], S->d[kg][c0 + 1][j]);
            r.xs[n] = SUMS ? make_float2(S->s[kg][c0][j], S->s[kg][c0 + 1][j]) : make_float2(0.0f, 0.0f);
        }
        return r;
    }
    __device__ __forceinline__ uint32_t b16(int j, int n, int h) const
    {
        return *(const uint32_t *)&S->q[kg][8 * n + g][32 * j + 16 * h + 4 * t];
    }
};

// Round it's KS steps of x into S (every thread; one cp.async group): the
// block's steps s0.. (n of them).  A column past ncols stages column
// ncols - 1 and a k-group past the steps the last step: both are computed
// and never stored.
template <int NT, int KS, bool SUMS, int TH = 32 * GX_WARPS>   // TH: the block's threads
__device__ __forceinline__ void gx_stage(gx_smem<NT, KS> &S, const int8_t *xq, const float *xd, const float *xs,
                                         int64_t in, int nc, int it, int s0, int n, int tid)
{
    constexpr int NC = 8 * NT;
    const int64_t nb = in / 32;
    for (int i = tid; i < KS * NC * 16; i += TH) {
        const int k = i / (NC * 16), c = i / 16 % NC, q = i % 16;
        const int64_t st = s0 + min(it * KS + k, n - 1), cc = min(c, nc - 1);
        cp_async16(&S.q[k][c][16 * q], xq + cc * in + st * 256 + 16 * q);
    }
    constexpr int P = SUMS ? 4 : 2;   // 16-byte pieces a column: the step's 8 scales (and 8 sums)
    for (int i = tid; i < KS * NC * P; i += TH) {
        const int k = i / (NC * P), c = i / P % NC, u = i % P;
        const int64_t st = s0 + min(it * KS + k, n - 1), cc = min(c, nc - 1), o = cc * nb + st * 8 + 4 * (u & 1);
        if (u < 2)
            cp_async16(&S.d[k][c][4 * (u & 1)], xd + o);
        else
            cp_async16(&S.s[k][c][4 * (u & 1)], xs + o);
    }
    cp_async_commit();
}

// The block's shared memory: the staged x (DB: two rounds' buffers), then
// the k-groups' sums and (a cluster) the block's sums for the others.
template <int NT, int RT, int CL, int KS = GX_WARPS / RT> struct gx_sums {   // KS: the k-groups
    float red[KS][RT][NT][4][32];
    float part[CL > 1 ? RT * NT : 1][4][32];
};
// One warp asks the L2 for the block's rows r_lo.. (n of them, those in
// the part): bytes from `from` of each row.
__device__ __forceinline__ void gx_prefetch(const gq_prod &p, int64_t r_lo, int n, uint64_t from, uint64_t bytes,
                                            int lane)
{
    for (int r = lane; r < n; r += 32)
        if (r_lo + r < p.rows)
            cu_prefetch_l2(p.w + (uint64_t)(r_lo + r) * p.rb + from, bytes);
}

// A warp's sums into the block's (k-group kg, row tile rt), then the block barrier.
template <int NT, int RT, int CL, int KS>
__device__ __forceinline__ void gx_fold(gx_sums<NT, RT, CL, KS> &r, const float (&acc)[1][NT][4], int kg, int rt,
                                        int lane)
{
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            r.red[kg][rt][n][k][lane] = acc[0][n][k];
    cl_sync();
}

// Row tile i's sums of column tile n (a lane's four), the k-groups added in order.
template <int NT, int RT, int CL, int KS>
__device__ __forceinline__ void gx_sum(const gx_sums<NT, RT, CL, KS> &r, int i, int n, int lane, float sum[4])
{
#pragma unroll
    for (int k = 0; k < 4; k++)
        sum[k] = 0.0f;
    for (int k2 = 0; k2 < KS; k2++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            sum[k] += r.red[k2][i][n][k][lane];
}

template <int NT, int RT, bool DB, int CL> union gx_union {
    gx_smem<NT, GX_WARPS / RT> S[DB ? 2 : 1];
    gx_sums<NT, RT, CL> r;
};

// DB (knob gemv_wide_db): round it + 1's x is staged into the other
// buffer before round it is multiplied, so its L2 round trip overlaps the
// multiply instead of preceding it (the weights' next round is already
// held in registers the same way).  The same arithmetic in the same
// order: the same bits as without it.
// MB: the blocks an SM the registers are capped for (knob gemv_wide_regs:
// 2 caps them at 128 and ptxas spills at 4 column tiles; 1 leaves ~170-254).
// CL (knob gemv_wide_split): the blocks of a cluster, which split the
// rows' steps in CL contiguous ranges (rank r: steps r S / CL ..); each
// block adds its k-groups' sums as without a cluster, then block r stores
// units r GX_WARPS + warp, CL GX_WARPS apart, adding the CL blocks' sums
// of the unit in rank order (distributed shared memory): the result does
// not depend on which block finishes first.  Why: a product of few rows
// (the 9b's ffn_down, 4096 rows at RT 8: 32 blocks) otherwise leaves most
// multiprocessors idle, and a smaller RT stages the same x for fewer rows.
template <int T, int NT, int RT, bool DB, int MB, int CL>
__global__ void __launch_bounds__(32 * GX_WARPS, MB) gx_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                               const float *xs)
{
    constexpr int KS = GX_WARPS / RT;
    constexpr bool SUMS = T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K;
    const int rank = cl_rank();   // (first: the emulation's block skew holds a block here)
    gx_union<NT, RT, DB, CL> &u = *(gx_union<NT, RT, DB, CL> *)cl_smem();   // gx_go's bytes
    const int tid = cl_tid(), warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3, nc = (int)mm.ncols, rt = warp % RT, kg = warp / RT;
    const gq_prod p = gq_find_at(mm, 16 * RT, cl_cluster());
    const int64_t r_lo = p.bx * 16 * RT;
    const int all = (int)(mm.in / 256), s0 = rank * all / CL;
    const int steps = (rank + 1) * all / CL - s0, rounds = (steps + KS - 1) / KS;
    constexpr int WB = gm_traits<T>::bytes;
    if (mm.prefetch && warp == 0)
        gx_prefetch(p, r_lo, 16 * RT, (uint64_t)s0 * WB, (uint64_t)steps * WB, lane);
    // rows past the end are computed on the last row, never stored
    gm_rows rw[1];
    {
        const int64_t a = r_lo + 16 * rt + g, b = a + 8;
        rw[0].B0 = p.w + (uint64_t)(a < p.rows ? a : p.rows - 1) * p.rb + (uint64_t)(s0 + kg) * WB;
        rw[0].B1 = p.w + (uint64_t)(b < p.rows ? b : p.rows - 1) * p.rb + (uint64_t)(s0 + kg) * WB;
    }
    gm_w<T, 1> cur;
    if (kg < steps)
        gm_load<T, 1>(rw, t, cur);
    cu_pdl_enter();
    float acc[1][NT][4] = {};
    if (DB && rounds > 0)
        gx_stage<NT, KS, SUMS>(u.S[0], xq, xd, xs, mm.in, nc, 0, s0, steps, tid);
    for (int it = 0; it < rounds; it++) {
        gx_smem<NT, KS> &S = u.S[DB ? it & 1 : 0];
        const bool ahead = DB && it + 1 < rounds;
        if (!DB)
            gx_stage<NT, KS, SUMS>(S, xq, xd, xs, mm.in, nc, it, s0, steps, tid);
        else if (ahead)   // (the other buffer: its last readers passed the barrier below)
            gx_stage<NT, KS, SUMS>(u.S[(it + 1) & 1], xq, xd, xs, mm.in, nc, it + 1, s0, steps, tid);
        const bool live = it * KS + kg < steps, more = (it + 1) * KS + kg < steps;
        gm_w<T, 1> nxt;
        if (more) {
            rw[0].B0 += (uint64_t)KS * WB;
            rw[0].B1 += (uint64_t)KS * WB;
            gm_load<T, 1>(rw, t, nxt);
        }
        if (ahead)
            cp_async_wait_group<1>();   // this round's group; the next may still fly
        else
            cp_async_wait_all();
        cl_sync();
        if (live)
            gm_mul<T, 1, NT>(cur, gm_xs<NT, KS>{ &S, kg, g, t }, acc);
        cl_sync();   // (S is restaged, then reused for the sums)
        if (more)
            cur = nxt;
    }
    gx_fold<NT, RT>(u.r, acc, kg, rt, lane);
    for (int q = warp; q < RT * NT; q += GX_WARPS) {
        const int i = q / NT, n = q % NT;
        float sum[4];
        gx_sum<NT, RT>(u.r, i, n, lane, sum);
        if (CL == 1)
            gm_store(p, r_lo + 16 * i, 8 * n, g, t, nc, sum);
        else
#pragma unroll
            for (int k = 0; k < 4; k++)
                u.r.part[q][k][lane] = sum[k];
    }
    if constexpr (CL > 1) {
        cl_cluster_sync();   // every block's part written
        for (int q = rank * GX_WARPS + warp; q < RT * NT; q += CL * GX_WARPS) {
            const int i = q / NT, n = q % NT;
            float sum[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
            for (int r = 0; r < CL; r++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    sum[k] += cl_remote(&u.r.part[q][k][lane], r);
            gm_store(p, r_lo + 16 * i, 8 * n, g, t, nc, sum);
        }
        cl_cluster_sync();   // no block leaves while another reads its part
    }
}

// ---- knob gemv_wide_ring: the weights through shared memory
// Why: gx_kernel holds a step's weights twice in registers (the step it
// multiplies and the next, loaded a round ahead): with x's operands and
// the sums ~250 registers a thread at 4 column tiles, so one block (8
// warps) an SM, and ncu (H100, 9b bs 32) finds its warps stalled on those
// loads (long scoreboard 0.9-2.7 cycles an issue) and on every other
// latency with two warps a scheduler to switch between.  gw_kernel
// copies its rows' next round of weights (KS steps of 32 rows) into a
// second shared buffer by cp.async while it multiplies this round's, and
// a warp reads its step from there just before multiplying it: no
// registers hold weights in flight, 128 registers a thread.
//  - KS 4 (8 warps, two blocks an SM): the same arithmetic in the same
//    order as gx_kernel at RT 2 (gm_mul, gx_fold, gx_sum): the same bits.
//  - KS 8 (16 warps, one block an SM; knob gemv_wide_ring_ks8) where the
//    launch has no more blocks than multiprocessors (the 9b's 4096-row
//    products at 32 rows a block: 128), which at KS 4 leave 8 warps an
//    SM whatever the registers; 8 k-groups: another f32 order.
// It takes the products gx_kernel runs at RT 2 (not the LM heads', nor
// gemv_rows' A/B).
#define GW_RT 2

// A ring row's bytes: a round's (span) rounded to 16; Q6_K's an odd
// number of 16 (a load's 8 rows x 16 bytes in distinct banks), Q4_K's
// and Q5_K's 32 or 96 past 128 (8 rows x 32 bytes in two wavefronts);
// Q8_0's not padded (two blocks an SM of 1088-byte rows just fit).
constexpr int gw_pad(int T, int span)
{
    int s = (span + 15) / 16 * 16;
    if (T == SI_TYPE_Q8_0)
        return s;
    while (T == SI_TYPE_Q6_K ? (s / 16) % 2 == 0 : (s % 128 != 32 && s % 128 != 96))
        s += 16;
    return s;
}

// A ring row: one row's bytes of a round (KS steps), in pieces of cp
// bytes (Q6_K's 840 bytes at KS 4 are 8-byte pieces).
template <int T, int KS> struct gw_row {
    static constexpr int span = KS * gm_traits<T>::bytes;
    static constexpr int cp = span % 16 == 0 ? 16 : 8;
    static constexpr int stride = gw_pad(T, span);
};
template <int T, int NT, int KS> struct gw_stage {
    gx_smem<NT, KS> S;
    uint8_t w[2][16 * GW_RT][gw_row<T, KS>::stride];
};
template <int T, int NT, int KS> union gw_union {
    gw_stage<T, NT, KS> st;
    gx_sums<NT, GW_RT, 1, KS> r;
};

// Round it's weights of the block's 32 rows (a row past the part's: its
// last) into W, one cp.async group.  Rows start on 16 bytes and their
// strides are 16 n (si_cu_gemvm_ok), so a round starts on a piece (Q6_K:
// 840 bytes a round at KS 4) and the last round's bytes, rounded up to a
// piece, stay within the row's stride (a Q6_K row of 256 weights: 210
// bytes in a 224-byte stride).
template <int T, int KS>
__device__ __forceinline__ void gw_stage_w(uint8_t (*W)[gw_row<T, KS>::stride], const gq_prod &p, int64_t r_lo,
                                           int it, int steps, int tid)
{
    constexpr int CP = gw_row<T, KS>::cp, WB = gm_traits<T>::bytes;
    const int st = it * KS, n = (min(KS, steps - st) * WB + CP - 1) / CP;   // pieces a row
    for (int i = tid; i < 16 * GW_RT * n; i += 32 * GW_RT * KS) {
        const int r = i / n, k = i % n;
        const int64_t row = r_lo + r < p.rows ? r_lo + r : p.rows - 1;
        const uint8_t *src = p.w + (uint64_t)row * p.rb + (uint64_t)st * WB + (uint64_t)k * CP;
        if constexpr (CP == 16)
            cp_async16(&W[r][k * CP], src);
        else
            cp_async8(&W[r][k * CP], src);
    }
    cp_async_commit();
}

// Groups in flight: W(0) before the loop; each round x(it), then W(it + 1)
// where there is one, and the wait leaves only W(it + 1) flying.
template <int T, int NT, int KS>
__global__ void __launch_bounds__(32 * GW_RT * KS, 8 / KS) gw_kernel(cu_mm mm, const int8_t *xq, const float *xd,
                                                                    const float *xs)
{
    constexpr int RT = GW_RT, TH = 32 * RT * KS, WB = gm_traits<T>::bytes, WS = gw_row<T, KS>::stride;
    constexpr bool SUMS = T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K;
    gw_union<T, NT, KS> &u = *(gw_union<T, NT, KS> *)cl_smem();   // gw_go's bytes
    const int tid = cl_tid(), warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3, nc = (int)mm.ncols, rt = warp % RT, kg = warp / RT;
    const gq_prod p = gq_find_at(mm, 16 * RT, cl_cluster());
    const int64_t r_lo = p.bx * 16 * RT;
    const int steps = (int)(mm.in / 256), rounds = (steps + KS - 1) / KS;
    if (mm.prefetch && warp == 0)
        gx_prefetch(p, r_lo, 16 * RT, 0, (uint64_t)steps * WB, lane);
    gw_stage_w<T, KS>(u.st.w[0], p, r_lo, 0, steps, tid);   // (weights are never written during a step)
    cu_pdl_enter();
    float acc[1][NT][4] = {};
    for (int it = 0; it < rounds; it++) {
        gx_stage<NT, KS, SUMS, TH>(u.st.S, xq, xd, xs, mm.in, nc, it, 0, steps, tid);
        const bool ahead = it + 1 < rounds;
        if (ahead) {   // (the other buffer: its last readers passed the barrier below)
            gw_stage_w<T, KS>(u.st.w[(it + 1) & 1], p, r_lo, it + 1, steps, tid);
            cp_async_wait_group<1>();
        } else {
            cp_async_wait_all();
        }
        cl_sync();
        if (it * KS + kg < steps) {
            const uint8_t *B0 = &u.st.w[it & 1][16 * rt + g][kg * WB];
            const gm_rows rw[1] = { { B0, B0 + 8 * WS } };
            gm_w<T, 1> cur;
            gm_load<T, 1, true>(rw, t, cur);
            gm_mul<T, 1, NT>(cur, gm_xs<NT, KS>{ &u.st.S, kg, g, t }, acc);
        }
        cl_sync();   // (S and this buffer are restaged, then reused for the sums)
    }
    gx_fold(u.r, acc, kg, rt, lane);
    for (int q = warp; q < RT * NT; q += RT * KS) {
        float sum[4];
        gx_sum(u.r, q / NT, q % NT, lane, sum);
        gm_store(p, r_lo + 16 * (q / NT), 8 * (q % NT), g, t, nc, sum);
    }
}

// ---- launcher (tests/cuda/emu/run-gmm-emu.sh takes the file whole)

// 9..32 columns: gx_kernel with 2 or 4 column tiles; RT row tiles a block
// (mm->gemv_rows 2 or 8: bench A/B), else 8 for the LM heads (GM_TALL
// rows or more), 2 below.  H200, bench_gemv wide (alone, L2 flushed), 32
// columns: the 9b's Q4_K 12288 x 4096 57.7 us at RT 2, 61.7 at 4, 83.6 at
// 8; its Q6_K 248320 x 4096 903 at 2, 857 at 8.
// DB past 48 KiB (4 column tiles at RT 2: 88 KiB) opts in to more shared
// memory, per device and function: once for the device last set (a graph
// captures a step's launches on its second run, so the first, eager one
// sets it outside any capture); two blocks an SM still fit.
// CL > 1: clusters of CL blocks along x (cu_launch_cluster), CL blocks a
// row block.
// More than 48 KiB of shared memory a block: the kernel's opt-in, once
// for the device last set (set_on: the kernel's own).
template <class K> static cudaError_t gx_optin(K kernel, size_t smem, int &set_on)
{
    if (smem <= 48 * 1024)
        return cudaSuccess;
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess && dev != set_on)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess)
        set_on = dev;
    return e;
}

template <int T, int NT, int RT, bool DB, int MB, int CL>
static cudaError_t gx_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const unsigned blocks = gm_blocks(mm, 16 * RT);
    if (blocks == 0 || blocks > 0x7fffffffu / CL)
        return cudaErrorInvalidValue;
    constexpr size_t smem = sizeof(gx_union<NT, RT, DB, CL>);
    static_assert(DB || smem <= 48 * 1024, "no opt-in shared memory without DB");
    static_assert(2 * smem <= 227 * 1024, "two blocks an SM");
    static_assert(CL == 1 || smem <= 48 * 1024, "a cluster's blocks without the opt-in");
    static int set_on = -1;   // the device the opt-in was last set on
    const cudaError_t e = gx_optin(gx_kernel<T, NT, RT, DB, MB, CL>, smem, set_on);
    if (e != cudaSuccess)
        return e;
    return cu_launch_cluster(gx_kernel<T, NT, RT, DB, MB, CL>, dim3(blocks * CL), dim3(32 * GX_WARPS), smem, s, CL,
                             *mm, xq, xd, xs);
}

// Knob gemv_wide_ring: gw_kernel at KS 4, or with gemv_wide_ring_ks8 at
// KS 8 where the launch's blocks are no more than the multiprocessors
// (K-quants: Q8_0's rows of a round, 2176 bytes, leave no room for x).
// Q8_0 rows are 1088 bytes a round at KS 4 (114 KiB of shared memory at 4
// column tiles, two blocks an SM just fit), and its products measured no
// faster: kquant leaves them on gx_kernel.
template <int T, int NT, int KS>
static cudaError_t gw_go(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    const unsigned blocks = gm_blocks(mm, 16 * GW_RT);
    if (blocks == 0)
        return cudaErrorInvalidValue;
    constexpr size_t smem = sizeof(gw_union<T, NT, KS>);
    static_assert((8 / KS) * smem <= 227 * 1024, "the blocks an SM the registers are capped for");
    static int set_on = -1;
    const cudaError_t e = gx_optin(gw_kernel<T, NT, KS>, smem, set_on);
    if (e != cudaSuccess)
        return e;
    return cu_launch_cluster(gw_kernel<T, NT, KS>, dim3(blocks), dim3(32 * GW_RT * KS), smem, s, 1, *mm, xq, xd, xs);
}

// Whether gemv_wide_ring takes the type, where two of gw_kernel's blocks
// fit an SM's shared memory, what it is for: sm_90's 227 KiB; sm_120's 99
// KiB hold one, gx_kernel there.
template <int T, int NT> static bool gw_takes(const cu_mm *mm)
{
    return (mm->gemv_wide_ring == 1 || (mm->gemv_wide_ring == 2 && T != SI_TYPE_Q8_0)) &&
           cu_smem_fits(2 * (int)sizeof(gw_union<T, NT, 4>));
}

template <int T, int NT>
static cudaError_t gw_ks(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if constexpr (T != SI_TYPE_Q8_0)
        if (mm->gemv_ring_ks8 && mm->n_sm > 0 && gm_blocks(mm, 16 * GW_RT) <= (unsigned)mm->n_sm &&
            cu_smem_fits((int)sizeof(gw_union<T, NT, 8>)))
            return gw_go<T, NT, 8>(mm, xq, xd, xs, s);
    return gw_go<T, NT, 4>(mm, xq, xd, xs, s);
}

// Knob gemv_wide_regs: one block an SM (the registers uncapped) always
// (full) or where the launch has no more than n_sm blocks (small).
static bool gx_full(const cu_mm *mm, unsigned blocks)
{
    return mm->gemv_wide_regs == 2 || (mm->gemv_wide_regs == 1 && mm->n_sm > 0 && blocks <= (unsigned)mm->n_sm);
}

// Knob gemv_wide_regs: gx_kernel without DB, full or capped registers.
template <int T, int NT, int RT>
static cudaError_t gx_regs(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    return gx_full(mm, gm_blocks(mm, 16 * RT)) ? gx_go<T, NT, RT, false, 1, 1>(mm, xq, xd, xs, s)
                                                : gx_go<T, NT, RT, false, 2, 1>(mm, xq, xd, xs, s);
}

// Knobs gemv_wide_db, then gemv_wide_regs (not combined: DB keeps the
// two-blocks cap, its 88 KiB of shared memory a block being sized for it).
template <int T, int NT, int RT>
static cudaError_t gx_db(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->gemv_wide_db)
        return gx_go<T, NT, RT, true, 2, 1>(mm, xq, xd, xs, s);
    return gx_regs<T, NT, RT>(mm, xq, xd, xs, s);
}

// The cluster a row block takes with knob gemv_wide_split: the fewest
// blocks (1, 2, 4) that give the launch two blocks a multiprocessor
// (n_sm; 132 where unknown), each block at least two of the rows' steps.
static int gx_split(const cu_mm *mm, unsigned blocks)
{
    const int64_t want = 2 * (int64_t)(mm->n_sm > 0 ? mm->n_sm : 132), steps = mm->in / 256;
    int cl = 1;
    while (cl < GX_CL_MAX && (int64_t)blocks * cl < want && 2 * (2 * cl) <= steps)
        cl *= 2;
    return cl;
}

// Knob gemv_wide_split: RT 8 (x staged once for 128 rows), x a round
// ahead (DB: at RT 8 two rounds' buffers are 22 KiB), the steps split
// over a cluster where the row blocks are few.
template <int T, int NT, int MB>
static cudaError_t gx_split_go(const cu_mm *mm, int cl, const int8_t *xq, const float *xd, const float *xs,
                               cudaStream_t s)
{
    if (cl == 4)
        return gx_go<T, NT, 8, true, MB, 4>(mm, xq, xd, xs, s);
    if (cl == 2)
        return gx_go<T, NT, 8, true, MB, 2>(mm, xq, xd, xs, s);
    return gx_go<T, NT, 8, true, MB, 1>(mm, xq, xd, xs, s);
}

template <int T, int NT>
static cudaError_t gx_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->gemv_wide_split) {
        const unsigned blocks = gm_blocks(mm, 16 * 8);
        const int cl = gx_split(mm, blocks);
        return gx_full(mm, blocks * (unsigned)cl) ? gx_split_go<T, NT, 1>(mm, cl, xq, xd, xs, s)
                                                  : gx_split_go<T, NT, 2>(mm, cl, xq, xd, xs, s);
    }
    if (mm->gemv_rows == 2 || mm->gemv_rows == 8)
        return mm->gemv_rows == 2 ? gx_db<T, NT, 2>(mm, xq, xd, xs, s) : gx_db<T, NT, 8>(mm, xq, xd, xs, s);
    int64_t rows = mm->rows;
    for (int k = 0; k < mm->n_more; k++)
        rows += mm->more[k].rows;
    if (rows >= GM_TALL)
        return gx_db<T, NT, 8>(mm, xq, xd, xs, s);
    return gw_takes<T, NT>(mm) ? gw_ks<T, NT>(mm, xq, xd, xs, s) : gx_db<T, NT, 2>(mm, xq, xd, xs, s);
}

// Knob gemv_narrow (wide, kquant): the 2..8-column products gemv_mma
// takes (from 4 columns: cuda_mmq.cu mma_pick), one column tile, on the kernels
// the launcher above gives 9..32 at RT 2 (gw_kernel where gemv_wide_ring
// takes the type, else gx_kernel full or capped).  gm_kernel keeps the LM
// heads and the A/B knobs' variants (si_cu_gemvx_narrow_ok), so neither
// DB nor split is compiled for one column tile.
template <int T>
static cudaError_t gx_narrow(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    return gw_takes<T, 1>(mm) ? gw_ks<T, 1>(mm, xq, xd, xs, s) : gx_regs<T, 1, 2>(mm, xq, xd, xs, s);
}

// Up to 8 columns (gemv_narrow) one column tile, up to 16 2, else 4.
template <int T>
static cudaError_t gx_cols(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    if (mm->ncols <= 8)
        return gx_narrow<T>(mm, xq, xd, xs, s);
    return mm->ncols > 16 ? gx_launch<T, 4>(mm, xq, xd, xs, s) : gx_launch<T, 2>(mm, xq, xd, xs, s);
}

// Whether gemv_narrow sends this 2..8-column product here: not the LM
// heads (gm_kernel's 2 row tiles a warp), nor under the 9..32 path's A/B
// knobs (gemv_rows, gemv_wide_db, gemv_wide_split), and x on 16 bytes
// (gx_stage's cp.async).
extern "C" bool si_cu_gemvx_narrow_ok(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    if (mm->gemv_narrow == 0 || (mm->gemv_narrow == 2 && mm->type == SI_TYPE_Q8_0) || mm->ncols > 8 ||
        mm->gemv_rows != 0 || mm->gemv_wide_db || mm->gemv_wide_split)
        return false;
    int64_t rows = mm->rows;
    for (int k = 0; k < mm->n_more; k++)
        rows += mm->more[k].rows;
    return rows < GM_TALL && (uintptr_t)xq % 16 == 0 && (uintptr_t)xd % 16 == 0 && (uintptr_t)xs % 16 == 0;
}

extern "C" int si_cu_gemvx(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, cudaStream_t s)
{
    switch (mm->type) {
    case SI_TYPE_Q4_K: return (int)gx_cols<SI_TYPE_Q4_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q5_K: return (int)gx_cols<SI_TYPE_Q5_K>(mm, xq, xd, xs, s);
    case SI_TYPE_Q6_K: return (int)gx_cols<SI_TYPE_Q6_K>(mm, xq, xd, xs, s);
    default: return (int)gx_cols<SI_TYPE_Q8_0>(mm, xq, xd, xs, s);
    }
}
