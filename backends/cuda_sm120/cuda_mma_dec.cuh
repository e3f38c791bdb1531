// backends/cuda_sm120/cuda_mma_dec.cuh — device pieces shared by the two
// int8 tensor-core GEMMs, v1 (cuda_mma.cu) and v2 (cuda_mma2.cu, knob
// mma_tile).  The two tile and schedule the product differently (the A/B
// pair), but decode the GGUF blocks of a weight tile to int8 and scales,
// and write their accumulators, the same way: that part lives here once.
// No PTX here: tests/cuda/emu/run-mma-emu.sh builds the kernels as host
// C++ with this header as it is (ptx_emu.h stands in for cuda_ptx.cuh).
#ifndef SI_CUDA_MMA_DEC_CUH
#define SI_CUDA_MMA_DEC_CUH

#include "cuda_internal.h"
#include "cuda_quant.cuh"

// The weight rows a block reads: rows r0.. of w (row_bytes apart, rows in
// all, nb 32-blocks per row for Q8_0 row tails).
struct cu_wtile {
    const uint8_t *w;
    uint64_t       row_bytes;
    int64_t        r0, rows, nb;
};

// Row r of the tile; rows past the end are clamped to the last one
// (computed, never stored).
__device__ __forceinline__ const uint8_t *cu_wtile_row(const cu_wtile &t, int r)
{
    int64_t rr = t.r0 + r;
    rr = rr < t.rows ? rr : t.rows - 1;
    return t.w + (uint64_t)rr * t.row_bytes;
}

// The 16-byte header of a Q4_K/Q5_K block, loaded as 4 words: d, dmin and
// the 12 bytes of 6-bit scales/mins (for cu_scale_min_k4).
__device__ __forceinline__ void cu_k45_head(const uint32_t hdr[4], float &d, float &dmin, uint8_t b[12])
{
    d = __half2float(__ushort_as_half((unsigned short)(hdr[0] & 0xffff)));
    dmin = __half2float(__ushort_as_half((unsigned short)(hdr[0] >> 16)));
#pragma unroll
    for (int k = 0; k < 12; k++)
        b[k] = (uint8_t)(hdr[1 + k / 4] >> (8 * (k % 4)));
}

// The B fragments of 4 n8-tiles x k32 from a row-major int8 tile (rows =
// columns of the product, ld bytes apart): two ldmatrix.x4 at row p and
// p + 16 (lane addresses: cuda_mma2.cu's header); bf[nt] = {k 0..15,
// k 16..31}.  (ldsm_x4: cuda_ptx.cuh, or the emulator's ptx_emu.h, is
// included before this header.)
__device__ __forceinline__ void ldsm_b4(uint32_t bf[4][2], const uint8_t *p, int ld)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t r[4];
        ldsm_x4(r, p + h * 16 * ld);
        bf[2 * h][0] = r[0];
        bf[2 * h][1] = r[1];
        bf[2 * h + 1][0] = r[2];
        bf[2 * h + 1][1] = r[3];
    }
}

// A warp's accumulators: MT x 4 tiles of m16n8 (rows wr + 16 mt + g and
// +8, columns wc + 8 nt + 2 t4 and +1 of the block's tile).
template <int MT> __device__ __forceinline__ void cu_mma_acc_zero(float (&acc)[MT][4][4])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] = 0.0f;
}

// Column-major y: lanes with the same t4 write 8 consecutive rows.  r0,
// c0: the block tile's first row and column.
template <int MT>
__device__ __forceinline__ void cu_mma_acc_store(const cu_mm &mm, const float (&acc)[MT][4][4], int64_t r0, int64_t c0,
                                                 int wr, int wc, int g, int t4)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = r0 + wr + mt * 16 + g + 8 * (e >> 1);
                const int64_t c = c0 + wc + nt * 8 + 2 * t4 + (e & 1);
                if (r < mm.rows && c < mm.ncols)
                    mm.y[c * mm.y_stride + r] = acc[mt][nt][e];
            }
}

#endif
