// backends/cuda_sm120/cuda_wg.cuh — the device pieces of the i8 GEMMs on
// Hopper's warpgroup MMA that are not PTX: the shared-memory matrix
// descriptor of a 128-byte-swizzled K-major tile and the fold of a k-tile's
// int32 sums into f32.  Shared by the backend's dense GEMM (cuda_w8wg.cu)
// and the moe_grouped_i8 plugin's grouped ones (moe_i8_wg.cu), so both
// read their tiles and round their sums the one way cuda_w8.cuh's
// w8_epilogue does; and the start both warp-specialised kernels share
// (their stage ring's mbarriers and the thread's role).  No PTX here (the
// wrappers are cuda_ptx.cuh's, or ptx_emu.h's in the emulator harnesses,
// included first).
#ifndef SI_CUDA_WG_CUH
#define SI_CUDA_WG_CUH

#include <stdint.h>

#include "cuda_w8.cuh"   // W8_BM, CU_I2F_MAGICF

// The shared-memory matrix descriptor (PTX ISA, wgmma's "matrix
// descriptor") of a K-major operand whose rows are 128 bytes of k, 8 rows a
// 1024-byte swizzle atom (128-byte swizzle: the 16-byte chunk c of row r
// sits at chunk c ^ (r % 8)): start address >> 4 in bits 0-13, the leading
// byte offset (unused by this layout: 1) in 16-29, the stride between
// 8-row groups (1024 >> 4) in 32-45, swizzle mode 1 (128 B) in 62-63.  A
// k32 step further along the rows is + 2 (32 bytes >> 4).  (Plain
// arithmetic, not PTX: the emulator decodes what this encodes.)
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

// The block sums of one k-tile into acc: w8_epilogue's two fmaf per element
// (its ci = d here), scales sc (rows at sc[0..127], columns from
// sc[128]); element 4j + e of d (N of them: an m64nN fragment, N / 4
// columns) at row row0 + 8 (e / 2), column 8 j + col0 + e % 2.
template <int N>
__device__ __forceinline__ void wg_fold(float (&acc)[N], const int (&d)[N], const float *sc, int row0, int col0)
{
    const float w0 = sc[row0], w1 = sc[row0 + 8];
    const float n0 = -CU_I2F_MAGICF * w0, n1 = -CU_I2F_MAGICF * w1;
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        const float2 dx = *(const float2 *)(sc + W8_BM + 8 * j + col0);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float t = fmaf(__int_as_float(d[4 * j + e]), e < 2 ? w0 : w1, e < 2 ? n0 : n1);
            acc[4 * j + e] = fmaf(t, (e & 1) ? dx.y : dx.x, acc[4 * j + e]);
        }
    }
}

#if defined(SI_HAVE_WGMMA)
// The block's start on a ring of `stages` stages that the producer
// warpgroup (threads 256..383) fills and the 8 consumer warps release:
// full[s] (at full + 8 s) completes on the producer's 128 copies, empty[s]
// (at empty + 8 s) on the 8 consumer warps' releases.  Returns the
// thread's role (0, 1: consumer warpgroups; 2: the producer) as a value
// the compiler sees is warp-uniform: a role branch it cannot prove uniform
// serialises the wgmma (ptxas C7520).
__device__ __forceinline__ int wg_ring_start(uint32_t full, uint32_t empty, int stages)
{
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            mbar_init(full + 8 * s, 128);
            mbar_init(empty + 8 * s, 8);
        }
        fence_mbar_init();
    }
    __syncthreads();
    return __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
}
#endif

#endif
