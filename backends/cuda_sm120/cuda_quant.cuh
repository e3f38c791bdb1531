// backends/cuda_sm120/cuda_quant.cuh — device decoding of the weight types
// the CUDA kernels read: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K.
//
// deq8<T>(row, i0, w) decodes the 8 consecutive elements i0..i0+7 of a
// weight row (i0 a multiple of 8; for the block types the 8 elements then
// share one scale).  Block layouts are those of core/quant.c and
// core/quant_k.c (GGUF's):
//   Q8_0  34 B: d f16, int8 qs[32]                      x = q * d
//   Q4_K 144 B: d @0, dmin @2, scales[12] @4, qs[128] @16
//   Q5_K 176 B: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
//   Q6_K 210 B: ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208
// The products are evaluated in the core's order with explicit _rn
// intrinsics so nvcc does not contract them into FMAs: the decoded floats
// are bit-identical to si_dequant's.
#ifndef SI_CUDA_QUANT_CUH
#define SI_CUDA_QUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include <sparkinfer/types.h>

// int32 -> f32 without I2F (a quarter or less of the FP32 rate on sm_90):
// for |v| < 2^22 the float with bits v + CU_I2F_MAGIC is M + v exactly
// (M = 1.5 * 2^23 = CU_I2F_MAGICF), so __int_as_float(v + CU_I2F_MAGIC) -
// CU_I2F_MAGICF is v, as __int2float_rn gives it.  The int8 MMAs add the
// bits for free as their C operand.
#define CU_I2F_MAGIC  0x4B400000
#define CU_I2F_MAGICF 12582912.0f

// Programmatic dependent launch (knob pdl, cuda_launch.cuh): a kernel
// launched with it may be resident while the kernel before it in the
// stream still runs (its launch and set-up hidden in that kernel's tail);
// here it waits for that kernel to complete with its memory visible, then
// lets the next kernel launch in turn.  Every kernel started by cu_launch
// calls this first, before it touches global memory.  A no-op without the
// attribute, and on the host emulation.
__device__ __forceinline__ void cu_pdl_enter()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the L2 for bytes [p, p + n) (the 16-byte units wholly inside it)
// without waiting: a decode GEMV calls it for its weight rows before
// cu_pdl_enter, so they stream in while the kernel before it drains.  A
// prefetch never changes what a later load returns (the L2 is where the
// device's writes meet), so it may precede the wait whatever it reads.
// One thread issues it for a whole run.  A no-op below sm_90 and on the
// host emulation.
__device__ __forceinline__ void cu_prefetch_l2(const void *p, uint64_t n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uintptr_t a = ((uintptr_t)p + 15) & ~(uintptr_t)15, e = ((uintptr_t)p + n) & ~(uintptr_t)15;
    for (uintptr_t o = a; o < e; o += 0x40000000u) {
        const uint32_t k = (uint32_t)(e - o < 0x40000000u ? e - o : 0x40000000u);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(o), "r"(k) : "memory");
    }
#else
    (void)p;
    (void)n;
#endif
}

__device__ __forceinline__ float cu_f16(const uint8_t *p)
{
    unsigned short h = (unsigned short)(p[0] | (p[1] << 8));
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float cu_bf16(const uint8_t *p)
{
    unsigned int b = ((unsigned int)p[0] | ((unsigned int)p[1] << 8)) << 16;
    return __uint_as_float(b);
}

// Raw 16-byte loads of packed quants (the int8 kernels unpack them in
// registers: cu_unpack_* below).
// 16 bytes at p, p only 2-byte aligned: four aligned words from p rounded
// down to 4 plus, when p is not 4-aligned, the half word that completes it
// (always inside the 16 bytes, so nothing past them is read).
__device__ __forceinline__ void cu_ld16_a2(const uint8_t *p, uint32_t v[4])
{
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3) * 8;   // 0 or 16
    uint32_t w0 = __ldg(w), w1 = __ldg(w + 1), w2 = __ldg(w + 2), w3 = __ldg(w + 3);
    uint32_t w4 = sh ? (uint32_t)__ldg((const unsigned short *)(w + 4)) : 0u;
    v[0] = __funnelshift_r(w0, w1, sh);
    v[1] = __funnelshift_r(w1, w2, sh);
    v[2] = __funnelshift_r(w2, w3, sh);
    v[3] = __funnelshift_r(w3, w4, sh);
}

__device__ __forceinline__ void cu_ld16(const void *p, uint32_t v[4])
{
    const uint4 u = __ldg((const uint4 *)p);
    v[0] = u.x;
    v[1] = u.y;
    v[2] = u.z;
    v[3] = u.w;
}

// 6-bit scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12 bytes.
__device__ __forceinline__ void cu_scale_min_k4(const uint8_t *b, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = b[j] & 63;
        *m = b[j + 4] & 63;
    } else {
        *sc = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4);
        *m = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
    }
}

// The same from the header words s0 = scales[0..3], s1 = scales[4..7],
// s2 = scales[8..11] (little endian) in registers: the GEMVs load a
// Q4_K/Q5_K block's 16-byte header (d, dmin, scales) with one vector load.
__device__ __forceinline__ void cu_scale_min_k4w(uint32_t s0, uint32_t s1, uint32_t s2, int j, int &sc, int &m)
{
    if (j < 4) {
        sc = (int)(s0 >> (8 * j)) & 63;
        m = (int)(s1 >> (8 * j)) & 63;
    } else {
        const int b = 8 * (j - 4);
        sc = ((int)(s2 >> b) & 15) | ((int)((s0 >> b) >> 6) & 3) << 4;
        m = ((int)((s2 >> b) >> 4) & 15) | ((int)((s1 >> b) >> 6) & 3) << 4;
    }
}

// ---- int8 unpacking of 16 packed bytes, in registers: one copy for the
// int8 matmuls (they differ in which bytes a thread loads, not in how a
// loaded unit becomes int8): cu_unpack_q45 for GEMM v1 (cuda_mma.cu) and
// GEMV v2 (cuda_gemv.cu), cu_unpack_q6 for GEMV v1/v2 (cuda_mmq.cu,
// cuda_gemv.cu).  The callers' code is byte-identical to the inline loops
// they replace.  Left inline where a helper changes the code: the GEMMs'
// Q6_K loops (they fuse the -32) and GEMM v2's Q4_K/Q5_K loop (ptxas,
// sm_120, then allocates cuda_mma2.cu's kernels differently: other
// spills at BM 64); GEMV v1's Q4_K/Q5_K loads qh between the two steps.
// 4 words each, byte k of word w is value 4w + k.

// Q4_K/Q5_K quants qs: lo = the 16 low nibbles (sub-block 2j), hi = the 16
// high nibbles (sub-block 2j+1), 0..15 per byte; Q5_K adds bit 4 from the
// matching 16 bytes of qh, bit `bit` (= 2j, lo's sub-block) and bit + 1
// (hi's): 0..31.
template <int T>
__device__ __forceinline__ void cu_unpack_q45(const uint32_t q[4], const uint32_t qh[4], int bit, uint32_t lo[4],
                                              uint32_t hi[4])
{
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lo[k] = q[k] & 0x0F0F0F0Fu;
        hi[k] = (q[k] >> 4) & 0x0F0F0F0Fu;
        if (T == SI_TYPE_Q5_K) {
            lo[k] |= ((qh[k] >> bit) & 0x01010101u) << 4;
            hi[k] |= ((qh[k] >> (bit + 1)) & 0x01010101u) << 4;
        }
    }
}

// Q6_K: 16 bytes of ql with the matching 16 of qh, as core's dec_q6_k: a =
// low nibbles with qh bits 2s, b = high nibbles with qh bits 2s+4 (the
// values 64 further); 0..63 per byte (the -32 is the caller's).
__device__ __forceinline__ void cu_unpack_q6(const uint32_t ql[4], const uint32_t qh[4], int s, uint32_t a[4],
                                             uint32_t b[4])
{
#pragma unroll
    for (int j = 0; j < 4; j++) {
        a[j] = (ql[j] & 0x0F0F0F0Fu) | (((qh[j] >> (2 * s)) & 0x03030303u) << 4);
        b[j] = ((ql[j] >> 4) & 0x0F0F0F0Fu) | (((qh[j] >> (2 * s + 4)) & 0x03030303u) << 4);
    }
}

// `case` labels for the int8 matmuls' weight types, returning the int of
// FN<TYPE>(args...) (a cudaError_t):
//   switch (mm->type) { CU_I8_TYPE_CASES(fn, mm, s) default: ...; }
#define CU_I8_TYPE_CASES(FN, ...)                                    \
    case SI_TYPE_Q8_0: return (int)FN<SI_TYPE_Q8_0>(__VA_ARGS__);    \
    case SI_TYPE_Q4_K: return (int)FN<SI_TYPE_Q4_K>(__VA_ARGS__);    \
    case SI_TYPE_Q5_K: return (int)FN<SI_TYPE_Q5_K>(__VA_ARGS__);    \
    case SI_TYPE_Q6_K: return (int)FN<SI_TYPE_Q6_K>(__VA_ARGS__);

template <int T> struct cu_is_plain { static const bool value = false; };
template <> struct cu_is_plain<SI_TYPE_F32> { static const bool value = true; };
template <> struct cu_is_plain<SI_TYPE_F16> { static const bool value = true; };
template <> struct cu_is_plain<SI_TYPE_BF16> { static const bool value = true; };

// One element of a plain (F32/F16/BF16) row: tails of rows whose length is
// not a multiple of 8.
template <int T> __device__ __forceinline__ float cu_deq1(const uint8_t *row, int64_t i)
{
    if (T == SI_TYPE_F32)
        return ((const float *)row)[i];
    if (T == SI_TYPE_F16)
        return cu_f16(row + 2 * i);
    return cu_bf16(row + 2 * i);
}

template <int T> __device__ __forceinline__ void cu_deq8(const uint8_t *row, int64_t i0, float w[8])
{
    if (T == SI_TYPE_F32 || T == SI_TYPE_F16 || T == SI_TYPE_BF16) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            w[j] = cu_deq1<T>(row, i0 + j);
    } else if (T == SI_TYPE_Q8_0) {
        const uint8_t *b = row + (i0 / 32) * 34;
        const float d = cu_f16(b);
        const int8_t *q = (const int8_t *)(b + 2 + (i0 % 32));
#pragma unroll
        for (int j = 0; j < 8; j++)
            w[j] = __fmul_rn((float)q[j], d);
    } else if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int bytes = T == SI_TYPE_Q4_K ? 144 : 176;
        const uint8_t *b = row + (i0 / 256) * bytes;
        const int e = (int)(i0 % 256), g = e / 64, hi = (e % 64) >= 32, l0 = e % 32;
        int sc, m;
        cu_scale_min_k4(b + 4, 2 * g + hi, &sc, &m);
        const float d = __fmul_rn(cu_f16(b), (float)sc), mm = __fmul_rn(cu_f16(b + 2), (float)m);
        const uint8_t *qs = b + (T == SI_TYPE_Q4_K ? 16 : 48) + 32 * g + l0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int q = hi ? (qs[j] >> 4) : (qs[j] & 15);
            if (T == SI_TYPE_Q5_K)
                q |= ((b[16 + l0 + j] >> (2 * g + hi)) & 1) << 4;
            w[j] = __fsub_rn(__fmul_rn(d, (float)q), mm);
        }
    } else {   // Q6_K
        const uint8_t *b = row + (i0 / 256) * 210;
        const int e = (int)(i0 % 256), half = e / 128, h = e % 128, quad = h / 32, l0 = h % 32;
        const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        const int8_t *scs = (const int8_t *)(b + 192 + 8 * half);
        const float d = cu_f16(b + 208);
        const float ds = __fmul_rn(d, (float)scs[l0 / 16 + 2 * quad]);
        const int lo_off = (quad & 1) ? 32 : 0, lo_shift = (quad & 2) ? 4 : 0, hshift = 2 * quad;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int l = l0 + j;
            int q = ((ql[l + lo_off] >> lo_shift) & 15) | (((qh[l] >> hshift) & 3) << 4);
            w[j] = __fmul_rn(ds, (float)(q - 32));
        }
    }
}

// `case` labels for every supported type, returning FN<TYPE>(args...):
//   switch (type) { CU_TYPE_CASES(fn, a, b) default: ...; }
#define CU_TYPE_CASES(FN, ...)                                       \
    case SI_TYPE_F32:  return FN<SI_TYPE_F32>(__VA_ARGS__);          \
    case SI_TYPE_F16:  return FN<SI_TYPE_F16>(__VA_ARGS__);          \
    case SI_TYPE_BF16: return FN<SI_TYPE_BF16>(__VA_ARGS__);         \
    case SI_TYPE_Q8_0: return FN<SI_TYPE_Q8_0>(__VA_ARGS__);         \
    case SI_TYPE_Q4_K: return FN<SI_TYPE_Q4_K>(__VA_ARGS__);         \
    case SI_TYPE_Q5_K: return FN<SI_TYPE_Q5_K>(__VA_ARGS__);         \
    case SI_TYPE_Q6_K: return FN<SI_TYPE_Q6_K>(__VA_ARGS__);

// Elements per block of the supported types (1 for the plain ones).
__host__ __device__ __forceinline__ int cu_type_blk(uint32_t type)
{
    return type == SI_TYPE_Q8_0 ? 32 : (type == SI_TYPE_Q4_K || type == SI_TYPE_Q5_K || type == SI_TYPE_Q6_K) ? 256 : 1;
}

// Block reduction helpers (blockDim.x a multiple of 32, <= 1024).
__device__ __forceinline__ float cu_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double cu_warp_sumd(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block of one double per thread; every thread gets it.
// `red` is __shared__ double[33].  Contains __syncthreads().
__device__ __forceinline__ double cu_block_sumd(double v, double *red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sumd(v);
    __syncthreads();   // red may still be read from a previous call
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < nw ? red[lane] : 0.0;
        s = cu_warp_sumd(s);
        if (lane == 0)
            red[32] = s;
    }
    __syncthreads();
    return red[32];
}

__device__ __forceinline__ float cu_silu(float x) { return x / (1.0f + expf(-x)); }

// Grid of a kernel that runs one warp per block of 32 activations, 8 warps
// (256 threads) a CUDA block, looping over what a capped grid leaves.
static inline unsigned cu_q8_grid(int64_t n_blocks32)
{
    const int64_t blocks = (n_blocks32 + 7) / 8;
    return (unsigned)(blocks > 65535 * 16 ? 65535 * 16 : blocks);
}

// One block of 32 activations to int8, lane l holding element l (the whole
// warp calls it): q[l] = rint(v * (1/d)), *d = max|v| / 127, *sum = the
// block's f32 sum.  The cpu backend's rounding (cpu_quantize_row_q8):
// d = amax / 127, q = round-half-even(x * (1 / d)), every step an IEEE
// f32 op, so both backends make the same int8 activations bit for bit.
// Used by quant_x_kernel (cuda_mmq.cu) and the fused RMSNORM
// (cuda_elem.cu), so a norm that quantises its output gives the same bits.
__device__ __forceinline__ void cu_q8_block32(float v, int lane, int8_t *q, float *d, float *sum)
{
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float dd = __fdiv_rn(amax, 127.0f);
    const float id = dd > 0.0f ? __frcp_rn(dd) : 0.0f;
    int qi = __float2int_rn(__fmul_rn(v, id));
    qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
    q[lane] = (int8_t)qi;
    // The block's f32 sum in the cpu's order (element 0 first), for the
    // Q4_K/Q5_K min terms; a NaN or Inf reaches d through sum - sum.
    float s = 0.0f;
#pragma unroll
    for (int l = 0; l < 32; l++)
        s = __fadd_rn(s, __shfl_sync(0xffffffffu, v, l));
    if (lane == 0) {
        *d = dd + (s - s);
        *sum = s;
    }
}

// Host: whether this device gives a block `bytes` of opt-in shared memory
// (the 128-byte k-tiles of cuda_w8.cu and the MOE plugin's GEMMs, the
// gemv_wide_ring products: sm_90's 227 KB do, sm_120's 99 KB do not).
// Asked once per program.
static inline bool cu_smem_fits(int bytes)
{
    static int optin = -1;   // (the same answer for every caller: a benign race)
    if (optin < 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        optin = v;
    }
    return optin >= bytes;
}

#endif
