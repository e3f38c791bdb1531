// backends/cuda_sm120/cuda_w8.cuh — the device pieces of the prefill GEMM
// v3 (cuda_w8.cu, whose header comment gives the scheme) that the
// moe_grouped_i8 plugin shares: the requantiser of weight rows and
// activation rows to int8 per G-wide block with a 16-significant-bit f32
// scale, and the epilogue that turns a block's int32 sums (carried in a
// float from M = 1.5 * 2^23) into f32.  One copy, so the plugin's experts
// are rounded exactly as the backend's dense weights.  No PTX beyond the
// warp intrinsics: the emulator harnesses build it as host C++.
#ifndef SI_CUDA_W8_CUH
#define SI_CUDA_W8_CUH

#include <stdint.h>

#include "cuda_quant.cuh"

#define W8_BM      128                       // weight rows of a block tile

// ---- requantisation: 128-wide blocks to int8 + one f32 scale ---------------

// The scale of a block whose largest magnitude is amax: amax / 127 rounded
// to 16 significant bits, so -M * s is exact in the epilogue.  q = rint(v
// / s) clamped to +-127 (the rounding can carry amax / s just past 127).
__device__ __forceinline__ float w8_scale(float amax)
{
    const float s = __fdiv_rn(amax, 127.0f);
    return __uint_as_float((__float_as_uint(s) + 0x80u) & ~0xFFu);
}

__device__ __forceinline__ uint32_t w8_pack4(const float *v, float s)
{
    uint32_t r = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(v[j], s)) : 0;
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        r |= (uint32_t)(q & 0xff) << (8 * j);
    }
    return r;
}

// Largest magnitude over the G / 8 lanes of a block (8 values each); a
// NaN or Inf anywhere makes it NaN (the product must not look finite).
template <int G> __device__ __forceinline__ float w8_amax(const float *v, int n)
{
    float a = 0.0f;
    bool bad = false;
    for (int j = 0; j < n; j++) {
        a = fmaxf(a, fabsf(v[j]));
        bad |= !isfinite(v[j]);
    }
#pragma unroll
    for (int o = G / 16; o > 0; o >>= 1)
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    // (the whole warp votes; one block's NaN then poisons the warp's other
    // blocks' scales, which is still a NaN product where one is due)
    return __any_sync(0xffffffffu, bad) ? __int_as_float(0x7fc00000) : a;
}

// A lane's 8 values v, elements i0.. of a row (on: i0 < the row's
// length), to int8 at q + i0, and from the first lane of each G-wide
// block its scale at s[i0 / G].  The whole warp calls it (the block's
// largest magnitude is a shuffle reduction).
template <int G>
__device__ __forceinline__ void w8_store8(const float *v, bool on, int lane, int64_t i0, int8_t *q, float *s)
{
    const float sc = w8_scale(w8_amax<G>(v, 8));
    if (on) {
        *(uint2 *)(q + i0) = make_uint2(w8_pack4(v, sc), w8_pack4(v + 4, sc));
        if (lane % (G / 8) == 0)
            s[i0 / G] = sc;
    }
}

// The rows a requantiser reads: GGUF weight rows (cu_deq8: the cpu's
// dequantisation), or f32 activation columns `stride` floats apart.
template <int T> struct w8_gguf {
    const uint8_t *w;
    uint64_t       row_bytes;
    __device__ __forceinline__ void load(int64_t r, int64_t i0, float v[8]) const
    {
        cu_deq8<T>(w + (uint64_t)r * row_bytes, i0, v);
    }
};

struct w8_f32 {
    const float *x;
    int64_t      stride;
    __device__ __forceinline__ void load(int64_t r, int64_t i0, float v[8]) const
    {
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = x[r * stride + i0 + j];
    }
};

// One warp per 256 values of a row of `in`, 8 consecutive values a lane,
// G / 8 lanes a scale block: int8 at q[r * in + i], scales at s[r * (in /
// G) + i / G].
template <int G, class S>
__device__ __forceinline__ void w8_rows(const S &src, int64_t rows, int64_t in, int8_t *q, float *s)
{
    const int lane = threadIdx.x & 31;
    const int64_t npair = (in + 255) / 256, total = rows * npair;
    for (int64_t p = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; p < total;
         p += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int64_t r = p / npair, i0 = (p % npair) * 256 + 8 * lane;
        const bool on = i0 < in;   // (in % 128 == 0: a half warp is all on or all off)
        float v[8];
        if (on)
            src.load(r, i0, v);
        else
#pragma unroll
            for (int j = 0; j < 8; j++)
                v[j] = 0.0f;
        w8_store8<G>(v, on, lane, i0, q + r * in, s + r * (in / G));
    }
}

template <int G, class S> __global__ void w8_rows_kernel(S src, int64_t rows, int64_t in, int8_t *q, float *s)
{
    w8_rows<G>(src, rows, in, q, s);
}

// ---- the epilogue ------------------------------------------------------------

// The scaled sums into acc: ci = M + the int32 sums of a scale block; sc
// its scales (rows at sc[0..127], columns at sc[128..255]); this lane's
// rows wr + 16 mt + g (+8) and columns wc + 8 nt + 2 t4 (+1).
__device__ __forceinline__ void w8_epilogue(float (&acc)[4][4][4], const int (&ci)[4][4][4], const float *sc, int wr,
                                            int wc, int g, int t4)
{
    float dx[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
        const float2 v = *(const float2 *)(sc + W8_BM + wc + 8 * nt + 2 * t4);
        dx[nt][0] = v.x;
        dx[nt][1] = v.y;
    }
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        const float w0 = sc[wr + 16 * mt + g], w1 = sc[wr + 16 * mt + g + 8];
        const float n0 = -CU_I2F_MAGICF * w0, n1 = -CU_I2F_MAGICF * w1;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float t = fmaf(__int_as_float(ci[mt][nt][e]), e < 2 ? w0 : w1, e < 2 ? n0 : n1);
                acc[mt][nt][e] = fmaf(t, dx[nt][e & 1], acc[mt][nt][e]);
            }
    }
}

#endif
