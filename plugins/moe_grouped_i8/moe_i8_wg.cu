// plugins/moe_grouped_i8/moe_i8_wg.cu — the grouped GEMMs of moe_i8_w8.cu
// (knob weights = i8) on Hopper's warpgroup MMA (knob wgmma, default true
// where it runs: an sm_90 device and sm_90a code in the fatbin, which
// mi8_wg_init asks once).  The same int32 sums per 128 block, folded into
// f32 in the same order, the same SwiGLU and scatter: bit for bit
// moe_i8_w8.cu's results (the emulator and check_cuda_moe_plugin compare).
//
// Why: moe_i8_w8.cu's mma.sync kernel is the largest cost of the 35B's MOE
// prefill (about half of it at 4096 tokens, ~130 effective int8 TOPS); the
// backend's dense GEMM went from 404 to 583-604 TOPS moving from mma.sync
// to cuda_w8wg.cu's warp-specialised wgmma, and this is that kernel cut to
// the schedule's tiles:
//   block = 128 weight rows x MWG_BN = 64 token rows (one schedule tile,
//   as moe_i8_w8.cu), 384 threads: two consumer warpgroups, warpgroup w
//   the weight rows 64 w .. 64 w + 63 against the 64 tokens
//   (wgmma.m64n64k32, 32 int32 sums a thread), and one producer
//   warpgroup copying 128-byte k-tiles (one scale block) with cp.async
//   into MWG_STAGES stages, each completing on its "full" mbarrier
//   (cp.async.mbarrier.arrive.noinc) and released by the consumer warps
//   on its "empty" one, swizzled for the descriptors as cuda_w8wg.cu's.
// The B rows are gathered (gate/up: row j of a tile is token row_tok[r0 +
// j] of the quantised h); down reads the tile's own rows of the quantised
// SwiGLU output and scatters its f32 rows to y[row_slot].
//
// gate/up in one GEMM, SwiGLU in registers: a consumer thread's rows of
// its m64 fragment are lane / 4 and lane / 4 + 8 of its warp's 16 (ptx
// ISA: wgmma's D fragment; cuda_ptx.cuh's wg_mma_s8_n64), so each 16 rows
// of the A tile are 8 gate features, then the up features of the same 8:
// tile row 16 m + 8 h + g (m < 8, h < 2, g < 8) is feature f0 + 8 m + g of
// gate (h = 0) or up (h = 1).  A thread then holds g and u of one feature
// for its 16 tokens and stores silu(g) * u (f32; mi8_w8_quantize makes
// the int8 rows after, as for moe_i8_w8.cu).
//
// Why 64 tokens a block, 4 stages, two blocks an SM and a feature loop: a
// group averages n * K / E rows (128 at 4096 tokens of the 35B model),
// padded to whole tiles, and the k-loops are short (gate/up 16 k-tiles at
// H = 2048, down 4 at F = 512), so a block's start and its first loads are
// a large part of its time.  Two blocks an SM (4 stages of 25 KB, 101 KB a
// block; MWG_BLOCKS) hide each other's, where one block of 8 stages waited
// alone (H200, 4096 tokens: down 0.566 ms against 0.347); and a block
// takes several feature blocks of its tile in one stream of k-tiles
// (mwg_fpb: down 0.347 -> 0.253 ms).  Two blocks of 384 threads give a
// thread 80 registers; the producer keeps 48 and the consumers take 96
// (setmaxnreg, inside the block's pool: MWG_REGS_*), which their 32 sums,
// 32 accumulators and the loops fit (ptxas -v: no spills).
// Measured (H200; 35B shapes, E 256, K 8, H 2048, F 512, random routing
// with hot experts; mma.sync -> wgmma, the same bits): 4096 tokens gate/up
// 0.438 -> 0.320 ms, down 0.333 -> 0.253; 16384 tokens 1.415 -> 1.050,
// 1.116 -> 0.864; 512 tokens 0.193 -> 0.157, 0.122 -> 0.102.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_ptx.cuh"
#include "cuda_w8.cuh"   // W8_BM, CU_I2F_MAGIC, cu_smem_fits
#include "cuda_wg.cuh"   // wg_desc, wg_fold

#include "moe_i8.h"

#define MWG_BM      W8_BM       // 128 weight rows: two consumer warpgroups of 64
#define MWG_BN      MI8_W8_BT   // 64 token rows: one schedule tile (wgmma n64)
#define MWG_THREADS 384         // two consumer warpgroups, then the producer warpgroup
#define MWG_FW(GU)  ((GU) ? 64 : MWG_BM)   // features a block's A tile is (gate/up: and their up rows)
#ifndef MWG_BLOCKS
#define MWG_BLOCKS  2           // blocks an SM (the launch bounds)
#endif
#ifndef MWG_STAGES
#define MWG_STAGES  4
#endif
// stage layout (bytes; every part 1024-aligned, as the swizzle atom must
// be): A [128 rows][128], B [64][128], the scales of the k-tile's block
// (A rows at [0, 128), B rows at [128, 192): wg_fold's layout)
#define MWG_A       0
#define MWG_B       (MWG_BM * 128)
#define MWG_SC      (MWG_B + MWG_BN * 128)
#define MWG_STAGE   (MWG_SC + 1024)
// the stages' mbarriers (full, then empty) after the stages; + 1 KB: the
// dynamic shared memory is aligned up to 1024 in the kernel
#define MWG_BARS    (MWG_STAGES * MWG_STAGE)
#define MWG_SMEM    (MWG_BARS + 16 * MWG_STAGES + 1024)

// The block's registers (setmaxnreg): every thread starts with MWG_POOL
// (65536 over the SM's MWG_BLOCKS * 384 threads, in 8s: what ptxas gives
// the kernel under its launch bounds, 80 at two blocks), the producer
// warpgroup gives some back and the consumers take them: an increase
// waits until the block's own pool has them, so the two must fit it or
// the consumers hang (cuda_ptx.cuh's wg_regs_inc says how the dense
// kernel's did).  At two blocks 128 x 48 + 256 x 96 is the pool exactly
// (it ran so on the H200); the producer spills below 48 (ptxas -v).
#define MWG_POOL          ((65536 / (MWG_THREADS * MWG_BLOCKS)) & ~7)
#define MWG_REGS_PRODUCER 48
#define MWG_REGS_CONSUMER (((MWG_POOL * MWG_THREADS - 128 * MWG_REGS_PRODUCER) / 256) & ~7)   // 96 at two blocks
static_assert(128 * MWG_REGS_PRODUCER + 256 * MWG_REGS_CONSUMER <= MWG_THREADS * MWG_POOL &&
                  MWG_REGS_CONSUMER >= MWG_POOL && MWG_REGS_CONSUMER <= 256,
              "setmaxnreg: more than the block's pool");

#if MI8_W8_G != 128 || MWG_BN != 64
#error "the tile below is laid out for 128-wide scale blocks and 64-row token tiles"
#endif
static_assert(MWG_BLOCKS * (MWG_SMEM + 1024) <= 228 * 1024, "MWG_BLOCKS blocks of MWG_STAGES stages exceed an SM");

// ---- the schedule (mi8_sched), read as moe_i8_w8.cu reads it ----------------

// The tile's expert; -1 past the schedule's tiles (the whole block returns).
__device__ __forceinline__ int mwg_expert(const mi8_sched &s, int64_t tile)
{
    if (s.tile_exp == NULL)
        return 0;
    return tile < *s.n_tiles ? s.tile_exp[tile] : -1;
}

// The B row (token) of schedule row r: padding rows of the dense schedule
// read the last token (any valid row; never stored).
__device__ __forceinline__ int64_t mwg_token(const mi8_sched &s, int64_t r)
{
    return s.tile_exp != NULL ? s.row_tok[r] : (r < s.n_rows ? r : s.n_rows - 1);
}

__device__ __forceinline__ int64_t mwg_slot(const mi8_sched &s, int64_t r)
{
    return s.tile_exp != NULL ? s.row_slot[r] : (r < s.n_rows ? r : -1);
}

// The tensor (wa, or wb: the up rows) and its row of A tile row i.  GU:
// the header's interleave, 64 features a block from f0; down: 128
// features a block from f0, clamped to `out` (rows past it computed,
// never stored).
template <bool GU>
__device__ __forceinline__ int64_t mwg_arow(const mi8_q8w &wa, const mi8_q8w &wb, int e, int64_t f0, int i,
                                            int64_t out, bool &up)
{
    up = GU && ((i >> 3) & 1);
    const int64_t f = GU ? f0 + 8 * (i >> 4) + (i & 7) : min(f0 + i, out - 1);
    return e * (up ? wb : wa).expert_rows + f;
}

// ---- the GEMM ---------------------------------------------------------------------

// What producer thread t (0..127) copies of each k-tile: 16-byte chunk
// t % 8 of the A rows t / 8 + 16 i (i < 8) and of the B rows t / 8 + 16 i
// (i < 4), the scale of A row t and (t < 64) of B row t.  Held as row
// numbers, not 12 pointers: the producer gives its registers to the
// consumers.  A row i is tensor row min(a_row + a_step i, a_last) of a:
// mwg_arow of tile rows t / 8 + 16 i, which for one thread are one
// tensor's rows 8 (GU) or 16 apart.
struct mwg_src {
    const int8_t *a, *b;   // A's tensor, the B rows' (both at the thread's chunk, k 0)
    int64_t       a_row, a_step, a_last;
    int32_t       tok[4];  // the B rows (schedule rows < 2^31: mwg_go)
    const float  *sa, *sb;
};

// The B side: the tile's token rows, the same for each feature block.
template <bool GU>
__device__ __forceinline__ void mwg_src_b(mwg_src &p, const int8_t *xq, const float *xs, int64_t in,
                                          const mi8_sched &sc, int64_t r0, int t)
{
    const int ch = t & 7, rl = t >> 3;
    p.b = xq + 16 * ch;
#pragma unroll
    for (int i = 0; i < 4; i++)
        p.tok[i] = (int32_t)(GU ? mwg_token(sc, r0 + rl + 16 * i) : r0 + rl + 16 * i);
    const int64_t c = t < MWG_BN ? (GU ? mwg_token(sc, r0 + t) : r0 + t) : 0;
    p.sb = xs + c * (in / MI8_W8_G);
}

// The A side: the weight rows of the feature block from f0.
template <bool GU>
__device__ __forceinline__ void mwg_src_a(mwg_src &p, const mi8_q8w &wa, const mi8_q8w &wb, int64_t in, int64_t out,
                                          int e, int64_t f0, int t)
{
    const int ch = t & 7, rl = t >> 3;
    bool up;
    p.a_row = mwg_arow<GU>(wa, wb, e, f0, rl, out, up);
    p.a = (up ? wb : wa).q + 16 * ch;
    p.a_step = GU ? 8 : 16;
    p.a_last = GU ? p.a_row + 7 * 8 : mwg_arow<GU>(wa, wb, e, out - 1, 0, out, up);   // (GU: never clamped)
    const int64_t r = mwg_arow<GU>(wa, wb, e, f0, t, out, up);
    p.sa = (up ? wb : wa).s + r * (in / MI8_W8_G);
}

// Stage st <- k-tile kt.  Swizzled chunk places: row r at r * 128, chunk
// ch at (ch ^ (r % 8)) * 16, and r % 8 = (t / 8) % 8 for every i.
__device__ __forceinline__ void mwg_produce(uint8_t *st, const mwg_src &p, int64_t in, int kt, int t)
{
    const int ch = t & 7, rl = t >> 3;
    const int dst0 = rl * 128 + ((ch ^ (rl & 7)) << 4);
#pragma unroll
    for (int i = 0; i < 8; i++)
        cp_async16(st + MWG_A + dst0 + 2048 * i, p.a + min(p.a_row + p.a_step * i, p.a_last) * in + 128 * kt);
#pragma unroll
    for (int i = 0; i < 4; i++)
        cp_async16(st + MWG_B + dst0 + 2048 * i, p.b + (int64_t)p.tok[i] * in + 128 * kt);
    cp_async4(st + MWG_SC + 4 * t, p.sa + kt);
    if (t < MWG_BN)
        cp_async4(st + MWG_SC + 4 * (MWG_BM + t), p.sb + kt);
}

// GU: this thread's feature (rows row0, gate, and row0 + 8, up) for its
// 16 tokens, silu(g) * u as moe_i8_w8.cu forms it.  !GU: its two features'
// rows of the tile's assignments with a slot, scattered.
template <bool GU>
__device__ __forceinline__ void mwg_store(const float (&acc)[32], const mi8_sched &sc, int64_t r0, int64_t f0,
                                          int64_t out, int row0, int col0, float *y)
{
    if (GU) {
        const int64_t f = f0 + 8 * (row0 >> 4) + (row0 & 7);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const float gv = acc[4 * j + c];
                y[(r0 + 8 * j + col0 + c) * out + f] = __fmul_rn(gv / (1.0f + expf(-gv)), acc[4 * j + 2 + c]);
            }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int64_t slot = mwg_slot(sc, r0 + 8 * j + col0 + c);
                if (slot < 0)
                    continue;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t f = f0 + row0 + 8 * h;
                    if (f < out)
                        y[slot * out + f] = acc[4 * j + 2 * h + c];
                }
            }
    }
}

#if defined(SI_HAVE_WGMMA)
// A consumer thread's sums of one feature block into acc: its nkt
// k-tiles from stage s (phase parity ph) on, each stage released once
// every lane of the warp has folded it; s and ph advanced past them.  Per
// k-tile the warpgroup's wgmma start from M = 1.5 * 2^23 (cuda_w8.cuh) and
// wg_fold scales the block's sums as w8_epilogue does.
__device__ __forceinline__ void mwg_consume(float (&acc)[32], const uint8_t *sm, uint32_t full, uint32_t empty,
                                            int nkt, int wg, int lane, int row0, int col0, int &s, uint32_t &ph)
{
    int d[32];
    for (int kt = 0; kt < nkt; kt++) {
        mbar_wait(full + 8 * s, ph);   // k-tile kt is in stage s
        fence_proxy_async();           // (copied through the generic proxy; wgmma reads through the async one)
        const uint8_t *st = sm + s * MWG_STAGE;
        const uint64_t da = wg_desc(smem_u32(st + MWG_A + 64 * 128 * wg)), db = wg_desc(smem_u32(st + MWG_B));
#pragma unroll
        for (int i = 0; i < 32; i++)
            d[i] = CU_I2F_MAGIC;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_mma_s8_n64(d, da + 2 * kk, db + 2 * kk);
        wg_commit();
        wg_wait<0>();
        wg_fold(acc, d, (const float *)(st + MWG_SC), row0, col0);
        __syncwarp();   // every lane's reads of the stage are done
        if (lane == 0)
            mbar_arrive(empty + 8 * s);
        if (++s == MWG_STAGES) {
            s = 0;
            ph ^= 1;
        }
    }
}
#endif

// GU: gate/up (wa, wb) on the tokens' h (xq, xs gathered by row_tok), y =
// the f32 SwiGLU rows [schedule row][out = F].  !GU: down (wa) on the
// tile's own SwiGLU rows, y = [slot][out = H].  Feature blocks of MWG_FW
// features as moe_i8_w8.cu's; a block takes fpb of
// them, fpb * blockIdx.y on, one after the other in one stream of k-tiles
// through the stages (the next one's first k-tiles are copied while this
// one's last are multiplied and stored: a block's start, its barriers and
// the ring's first loads are paid once for all of them).  Grid: x =
// tiles, y = groups of fpb feature blocks.  in % 128 == 0.
template <bool GU>
__global__ void __launch_bounds__(MWG_THREADS, MWG_BLOCKS)
mwg_kernel(mi8_q8w wa, mi8_q8w wb, const int8_t *xq, const float *xs, int64_t in, int64_t out, mi8_sched sc,
           float *y, int fpb)
{
#if defined(SI_HAVE_WGMMA)
    extern __shared__ __align__(16) uint8_t mwg_sm_raw[];
    const int64_t tile = blockIdx.x, r0 = tile * MWG_BN;
    const int e = mwg_expert(sc, tile);
    if (e < 0)
        return;   // the whole block: past the schedule's tiles
    // (the swizzle is a function of the shared address: stages at 1024)
    uint8_t *sm = mwg_sm_raw + ((1024 - (smem_u32(mwg_sm_raw) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // (k-tiles and feature blocks as int: in, out < 2^31 (mwg_go); fewer
    // registers held across the consumers' k-loop)
    const int nkt = (int)(in / 128), fb_all = (int)((out + MWG_FW(GU) - 1) / MWG_FW(GU));
    const int fb0 = (int)blockIdx.y * fpb, fb1 = min(fb0 + fpb, fb_all);
    // full[s]: the producer's 128 threads' copies of the stage landed;
    // empty[s]: the 8 consumer warps are done with it
    const uint32_t full = smem_u32(sm + MWG_BARS), empty = full + 8 * MWG_STAGES;
    const int role = wg_ring_start(full, empty, MWG_STAGES);

    if (role == 2) {
        // the producer: step q (k-tile kt of a feature block) into stage q
        // % MWG_STAGES once the consumers released its previous step
        // (phase parity ph ^ 1)
        wg_regs_dec_to<MWG_REGS_PRODUCER>();
        const int t = tid - 256;
        mwg_src p;
        mwg_src_b<GU>(p, xq, xs, in, sc, r0, t);
        int s = 0;
        uint32_t ph = 0;
        int q = 0;
        for (int fb = fb0; fb < fb1; fb++) {
            mwg_src_a<GU>(p, wa, wb, in, out, e, (int64_t)fb * MWG_FW(GU), t);
            for (int kt = 0; kt < nkt; kt++, q++) {
                if (q >= MWG_STAGES)
                    mbar_wait(empty + 8 * s, ph ^ 1);
                mwg_produce(sm + s * MWG_STAGE, p, in, kt, t);
                cp_async_mbar_arrive(full + 8 * s);   // (when this thread's copies land)
                if (++s == MWG_STAGES) {
                    s = 0;
                    ph ^= 1;
                }
            }
        }
        cp_async_wait_all();
    } else {
        wg_regs_inc_to<MWG_REGS_CONSUMER>();
        // (wg warp-uniform to the compiler, as role: see there)
        const int g = lane >> 2, t4 = lane & 3, wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
        // this thread's rows of the tile (relative to its first) and first column
        const int row0 = 64 * wg + 16 * (warp & 3) + g, col0 = 2 * t4;
        int s = 0;
        uint32_t ph = 0;
        for (int fb = fb0; fb < fb1; fb++) {
            float acc[32];
#pragma unroll
            for (int i = 0; i < 32; i++)
                acc[i] = 0.0f;
            mwg_consume(acc, sm, full, empty, nkt, wg, lane, row0, col0, s, ph);
            // (r0 opaque to the compiler here: else it keeps the store's
            // 16 row addresses, or down's 16 slots, from before the loop,
            // live across the k-loop in registers the consumers lack)
            int64_t rr = r0;
            asm volatile("" : "+l"(rr));
            mwg_store<GU>(acc, sc, rr, (int64_t)fb * MWG_FW(GU), out, row0, col0, y);
        }
    }
#endif
}

// Writes 1 where this device runs the sm_90a code (the GEMM kernels are not
// empty), else 0.
__global__ void mwg_probe_kernel(int *ok)
{
    if (threadIdx.x == 0) {
#if defined(SI_HAVE_WGMMA)
        *ok = 1;
#else
        *ok = 0;
#endif
    }
}

// ---- launchers ------------------------------------------------------------------------

extern "C" int mi8_wg_init(int cc_major, void *stream, int *avail)
{
    *avail = 0;
    if (cc_major != 9 || !cu_smem_fits(MWG_SMEM))
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    int *d_ok = NULL, ok = 0;
    cudaError_t e = cudaMalloc((void **)&d_ok, sizeof(int));
    if (e != cudaSuccess)
        return (int)e;
    mwg_probe_kernel<<<1, 32, 0, st>>>(d_ok);
    e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&ok, d_ok, sizeof(int), cudaMemcpyDeviceToHost, st);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(st);
    cudaFree(d_ok);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(mwg_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, MWG_SMEM);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(mwg_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, MWG_SMEM);
    if (e != cudaSuccess)
        return (int)e;
    *avail = ok == 1;
    return 0;
}

// Feature blocks a block takes (fpb): about MWG_STEPS k-tiles a block
// (H200, 35B shapes, 4096 tokens: down, 4 k-tiles a feature block, 0.347
// ms at one feature block a block, 0.265 at 4, 0.253 at 8, 0.283 at 16),
// but no fewer blocks than 4 an SM (2 waves): a small grid's blocks are
// its parallelism (n_sm 0: no such floor).
#ifndef MWG_STEPS
#define MWG_STEPS 32
#endif
static int64_t mwg_fpb(int64_t tiles, int64_t nfb, int64_t nkt, int n_sm)
{
    int64_t fpb = nkt >= MWG_STEPS ? 1 : MWG_STEPS / nkt;
    fpb = fpb < nfb ? fpb : nfb;
    while (fpb > 1 && tiles * ((nfb + fpb - 1) / fpb) < 2 * MWG_BLOCKS * (int64_t)n_sm)
        fpb /= 2;
    return fpb;
}

template <bool GU>
static int mwg_go(const mi8_q8w &wa, const mi8_q8w &wb, const mi8_q8a &x, int64_t in, int64_t out, const mi8_sched &s,
                  float *y, int n_sm, cudaStream_t st)
{
    const int64_t nfb = (out + MWG_FW(GU) - 1) / MWG_FW(GU), nkt = in / MI8_W8_G;
    if (in <= 0 || in % MI8_W8_G != 0 || (GU && out % 64 != 0) || s.max_tiles <= 0 ||
        s.max_tiles > 0x7fffffffLL / MWG_BN || nfb <= 0 || in > 0x7fffffffLL || out > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    const int64_t fpb = mwg_fpb(s.max_tiles, nfb, nkt, n_sm), gy = (nfb + fpb - 1) / fpb;
    if (gy > 65535)
        return (int)cudaErrorInvalidValue;
    const dim3 grid((unsigned)s.max_tiles, (unsigned)gy);
    mwg_kernel<GU><<<grid, MWG_THREADS, MWG_SMEM, st>>>(wa, wb, x.q, x.s, in, out, s, y, (int)fpb);
    return (int)cudaGetLastError();
}

extern "C" int mi8_wg_gate_up(mi8_q8w gate, mi8_q8w up, mi8_q8a x, int64_t H, int64_t F, mi8_sched s, float *act,
                              int n_sm, void *stream)
{
    return mwg_go<true>(gate, up, x, H, F, s, act, n_sm, (cudaStream_t)stream);
}

extern "C" int mi8_wg_down(mi8_q8w down, mi8_q8a act, int64_t F, int64_t H, mi8_sched s, float *y, int n_sm,
                           void *stream)
{
    return mwg_go<false>(down, down, act, F, H, s, y, n_sm, (cudaStream_t)stream);
}
