// backends/cuda_sm120/cuda_w8wg.cu — the i8 prefill GEMM (cuda_w8.cu's
// scheme: int8 weights and activations, one f32 scale per 128 of a row on
// each side) on Hopper's warpgroup MMA (knob w8_wgmma, default true where
// it runs: an sm_90 device and sm_90a code in the fatbin).
//
// Why: cuda_w8.cu's mma.sync kernel peaks near 360 TOPS on the H200 (ncu),
// a third of what mma.sync can do and a sixth of wgmma's int8 rate; each
// warp there reloads its fragments from shared memory with ldmatrix for
// every 16 mma.  wgmma reads both operands straight from shared memory
// through descriptors and runs asynchronously to the issuing warps, so the
// threads only copy tiles in and scale the sums.  Measured (H200,
// bench_gemm, Q4_K weights, the 9b's shapes at 4096 / 512 columns): 577-607
// / 506-528 TOPS against the mma.sync kernel's 403-409 / 369-384.
//
// Tiling: a block of two consumer warpgroups and one producer warpgroup
// (384 threads) takes 128 weight rows x 128 columns; consumer warpgroup w
// the rows 64 w .. 64 w + 63 against all 128 columns (wgmma.m64n128k32, 64
// int32 sums a thread).  A k-tile is 128 bytes of k, one scale block, one
// 128-byte swizzle row per weight row and per column: WG_STAGES stages of
// [A 16 KB][B 16 KB][scales 1 KB], each 16-byte chunk stored at its
// swizzled place so the descriptors' 128-byte swizzle reads it back
// conflict-free.
// Why a producer and barriers per stage: the first version had every
// thread copy its share of each k-tile and meet at a block barrier per
// k-tile (ncu: tensor pipe 27% busy, the barrier the largest stall, 517
// TOPS at 12288 x 4096 x 4096).  Now the producer warpgroup alone copies
// (cp.async, the stage's "full" mbarrier completing when its copies land)
// and each consumer warp releases a stage (its "empty" mbarrier) once its
// sums are folded: 607 TOPS there.  Both consumer warpgroups still wait on
// the same stage and so tend to multiply and fold at the same time; knob
// w8_wg_pingpong (PP below, the default) makes them take turns: 583 ->
// 604 TOPS at 8192 x 4096 x 4096, 525 -> 553 at 512 columns (H200).
// Per k-tile each warpgroup starts its sums from the bits of M = 1.5 * 2^23
// (cuda_w8.cuh), issues the four k32 steps, waits for them and folds the
// block into its f32 sums exactly as w8_epilogue does (the same two fmaf
// per element, the k blocks in the same order): the result equals
// cuda_w8.cu's bit for bit, which check_cuda_ops and the emulator compare.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_ptx.cuh"
#include "cuda_w8.cuh"
#include "cuda_wg.cuh"   // wg_desc, wg_fold

#define WG_BN      128
#define WG_THREADS 384   // two consumer warpgroups, then the producer warpgroup
#ifndef WG_STAGES
#define WG_STAGES  6
#endif
// stage layout (bytes; every part 1024-aligned, as the swizzle atom must be)
#define WG_A       0
#define WG_B       (W8_BM * 128)
#define WG_SC      (WG_B + WG_BN * 128)
#define WG_STAGE   (WG_SC + 1024)
// the stages' mbarriers (full, then empty) after the stages; + 1 KB: the
// dynamic shared memory is aligned up to 1024 in the kernel
#define WG_BARS    (WG_STAGES * WG_STAGE)
#define WG_SMEM    (WG_BARS + 16 * WG_STAGES + 1024)

// What the producer warpgroup copies: its thread t (0..127) takes 16-byte
// chunk t % 8 of the rows (columns) t / 8 + 16 i, i < 8, of each tile, and
// the scales of row t and column t.  Past the last row (column) the tile
// reads the last one again (computed, never stored): such tiles take the
// clamped path, full ones pointer steps only.
struct wg_src {
    const int8_t *wq, *xq;
    const float  *ws, *xd;
    int64_t       in, r0, c0, rows, ncols, nkt;
};

// Stage st <- k-tile kt.  Swizzled chunk places: row r at r * 128, chunk
// ch at (ch ^ (r % 8)) * 16, and r % 8 = (t / 8) % 8 for every i.
template <bool FULL>
__device__ __forceinline__ void wg_produce(uint8_t *st, const wg_src &p, int64_t kt, int t)
{
    const int ch = t & 7, rl = t >> 3;
    const int dst0 = rl * 128 + ((ch ^ (rl & 7)) << 4);
    const int8_t *a = p.wq + (p.r0 + rl) * p.in + kt * 128 + 16 * ch;
    const int8_t *b = p.xq + (p.c0 + rl) * p.in + kt * 128 + 16 * ch;
    const int64_t step = 16 * p.in;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int8_t *ai = FULL ? a + i * step : p.wq + min(p.r0 + rl + 16 * i, p.rows - 1) * p.in + kt * 128 + 16 * ch;
        const int8_t *bi = FULL ? b + i * step : p.xq + min(p.c0 + rl + 16 * i, p.ncols - 1) * p.in + kt * 128 + 16 * ch;
        cp_async16(st + WG_A + dst0 + 2048 * i, ai);
        cp_async16(st + WG_B + dst0 + 2048 * i, bi);
    }
    const int64_t r = min(p.r0 + t, p.rows - 1), c = min(p.c0 + t, p.ncols - 1);
    cp_async4(st + WG_SC + 4 * t, p.ws + r * p.nkt + kt);
    cp_async4(st + WG_SC + 4 * (W8_BM + t), p.xd + c * p.nkt + kt);
}

// Grid: x = column tiles (fastest: the blocks sharing a weight tile run
// together), y = row tiles.  in % 256 == 0, x_div 1 (si_cu_w8wg_ok).
// PP (knob w8_wg_pingpong): the two consumer warpgroups take turns on the
// tensor cores, each k-tile: warpgroup 0 issues its wgmma once warpgroup
// 1's previous ones completed (named barrier 1), and 1 once 0's did
// (barrier 2), so while one multiplies the other folds.  Without it both
// wait on the same stage and fold at the same time, the tensor cores idle
// meanwhile (ncu of the first version: 27% busy).  Same sums, same bits.
template <bool PP>
__global__ void __launch_bounds__(WG_THREADS, 1)
wg_kernel(cu_mm mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
#if defined(SI_HAVE_WGMMA)
    extern __shared__ __align__(16) uint8_t wg_sm_raw[];
    // (the swizzle is a function of the shared address: stages at 1024)
    uint8_t *sm = wg_sm_raw + ((1024 - (smem_u32(wg_sm_raw) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.y * W8_BM, c0 = (int64_t)blockIdx.x * WG_BN, nkt = mm.in / 128;
    // full[s]: the producer's 128 threads' copies of the stage landed;
    // empty[s]: the 8 consumer warps are done with it
    const uint32_t full = smem_u32(sm + WG_BARS), empty = full + 8 * WG_STAGES;
    const int role = wg_ring_start(full, empty, WG_STAGES);

    if (role == 2) {
        // the producer: k-tile kt into stage kt % WG_STAGES once the
        // consumers released its previous k-tile (phase parity ph ^ 1);
        // its registers handed to the consumers (setmaxnreg)
        wg_regs_dec();
        const wg_src p = { wq, xq, ws, xd, mm.in, r0, c0, mm.rows, mm.ncols, nkt };
        const bool full_tile = r0 + W8_BM <= mm.rows && c0 + WG_BN <= mm.ncols;
        const int t = tid - 256;
        int s = 0;
        uint32_t ph = 0;
        for (int64_t kt = 0; kt < nkt; kt++) {
            if (kt >= WG_STAGES)
                mbar_wait(empty + 8 * s, ph ^ 1);
            uint8_t *st = sm + s * WG_STAGE;
            if (full_tile)
                wg_produce<true>(st, p, kt, t);
            else
                wg_produce<false>(st, p, kt, t);
            cp_async_mbar_arrive(full + 8 * s);   // (when this thread's copies land)
            if (++s == WG_STAGES) {
                s = 0;
                ph ^= 1;
            }
        }
        cp_async_wait_all();
    } else {
        wg_regs_inc();
        // (wg warp-uniform to the compiler, as role: see there)
        const int g = lane >> 2, t4 = lane & 3, wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; i++)
            acc[i] = 0.0f;
        int d[64];
        // this thread's rows of the tile (relative to r0) and first column
        const int row0 = 64 * wg + 16 * (warp & 3) + g, col0 = 2 * t4;
        int s = 0;
        uint32_t ph = 0;
        if (PP && wg == 1)
            named_arrive(1, 256);   // warpgroup 0 goes first
        for (int64_t kt = 0; kt < nkt; kt++) {
            mbar_wait(full + 8 * s, ph);   // k-tile kt is in stage s
            fence_proxy_async();           // (copied through the generic proxy; wgmma reads through the async one)
            const uint8_t *st = sm + s * WG_STAGE;
            const uint64_t da = wg_desc(smem_u32(st + WG_A + 64 * 128 * wg)), db = wg_desc(smem_u32(st + WG_B));
#pragma unroll
            for (int i = 0; i < 64; i++)
                d[i] = CU_I2F_MAGIC;
            if (PP)
                named_sync(1 + wg, 256);   // the other warpgroup's wgmma completed
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wg_mma_s8_n128(d, da + 2 * kk, db + 2 * kk);
            wg_commit();
            wg_wait<0>();
            // (1's last turn is taken by no one: every arrive meets a sync)
            if (PP && !(wg == 1 && kt == nkt - 1))
                named_arrive(2 - wg, 256);
            wg_fold(acc, d, (const float *)(st + WG_SC), row0, col0);
            __syncwarp();   // every lane's reads of the stage are done
            if (lane == 0)
                mbar_arrive(empty + 8 * s);
            if (++s == WG_STAGES) {
                s = 0;
                ph ^= 1;
            }
        }
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = r0 + row0 + 8 * (e >> 1), c = c0 + 8 * j + col0 + (e & 1);
                if (r < mm.rows && c < mm.ncols)
                    mm.y[c * mm.y_stride + r] = acc[4 * j + e];
            }
    }
#endif
}

// Writes 1 where this device runs the sm_90a code (the wgmma kernel is not
// empty), else 0.
__global__ void wg_probe_kernel(int *ok)
{
#if defined(SI_HAVE_WGMMA)
    *ok = 1;
#else
    *ok = 0;
#endif
}

// ---- launchers ----------------------------------------------------------------

// Whether this process's device runs wg_kernel (si_cu_w8wg_init).
static int wg_avail = 0;

extern "C" int si_cu_w8wg_init(bool *avail)
{
    *avail = false;
    int dev = 0, major = 0, ok = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess)
        return (int)e;
    if (major != 9 || !cu_smem_fits(WG_SMEM))
        return 0;
    int *d_ok = NULL;
    if ((e = cudaMalloc((void **)&d_ok, sizeof(int))) != cudaSuccess)
        return (int)e;
    wg_probe_kernel<<<1, 1>>>(d_ok);
    e = cudaMemcpy(&ok, d_ok, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d_ok);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(wg_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(wg_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM);
    if (e != cudaSuccess)
        return (int)e;
    wg_avail = ok == 1;
    *avail = wg_avail != 0;
    return 0;
}

extern "C" bool si_cu_w8wg_ok(const cu_mm *mm)
{
    return wg_avail && mm->w8_wgmma && si_cu_w8_ok(mm) && mm->x_div == 1 && (mm->ncols + WG_BN - 1) / WG_BN <= 0x7fffffffLL;
}

extern "C" int si_cu_matmul_w8wg(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq,
                                 const float *xd, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (!si_cu_w8wg_ok(mm))
        return (int)cudaErrorInvalidValue;
    const int64_t gx = (mm->ncols + WG_BN - 1) / WG_BN, gy = (mm->rows + W8_BM - 1) / W8_BM;
    if (mm->w8_wg_pp)
        wg_kernel<true><<<dim3((unsigned)gx, (unsigned)gy), WG_THREADS, WG_SMEM, (cudaStream_t)stream>>>(*mm, wq, ws, xq,
                                                                                                       xd);
    else
        wg_kernel<false><<<dim3((unsigned)gx, (unsigned)gy), WG_THREADS, WG_SMEM, (cudaStream_t)stream>>>(*mm, wq, ws,
                                                                                                        xq, xd);
    return (int)cudaGetLastError();
}
