// backends/cuda_sm120/cuda_mma.cu — the prefill MATMUL (more than
// SI_CU_MMQ_MAX_COLS columns, knob prefill_mm = mma) as a GEMM on the int8
// tensor cores: Q4_K, Q5_K, Q6_K, Q8_0 weights times activations quantised
// by si_cu_quantize_x (int8, one f32 scale d and the f32 sum s per 32).
//
// Math (the cpu backend's int8 path, cpu_quant_dot.c, term for term):
//   y[c][r] = sum_b xd[c][b] * dw[r][b] * isum_b(r, c) - sum_b wm[r][b] * xs[c][b]
// over the 32-wide blocks b of the row, isum_b = the exact int32 product of
// the weights' int8 codes and the int8 activations of block b.  Q4_K/Q5_K:
// codes 0..15 / 0..31, dw = d * scale, wm = dmin * min (the min times the
// exact f32 sum of x, as the cpu does; Q6_K and Q8_0 have no min term).
// Q6_K: codes q - 32 (-32..31, exact in int8) but one scale per 16 values,
// so its blocks run as two k16 products whose int32 sums are combined with
// the two int8 scales in int32, then scaled by d.  The only difference from
// the cpu is the f32 summation order.
//
// Tiles: a block of 8 warps computes 128 weight rows x 64 columns, k in
// steps of 256 (one K-quant super-block, or 8 Q8_0 blocks).  Per k-tile the
// packed weights are loaded into registers one tile ahead (during the mma
// of the previous one), unpacked to int8 into shared memory W[128][256]
// with their scales, and the int8 activations X[64][256] come in by
// cp.async, double-buffered.  The weights are decoded on the fly from the
// GGUF blocks rather than repacked at load: an int8 copy would take 1.8x
// (Q4_K) the device memory of the model, and the GEMM reads each weight
// byte once per 64 columns, so decoding is not what bounds it.
// Warp w owns rows 32*(w%4)..+31 and columns 32*(w/4)..+31: 2 x 4 tiles of
// m16n8, f32 accumulators in registers (32 per thread).
//
// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 fragments (PTX ISA,
// "Matrix Fragments for mma.m16n8k32"), g = lane / 4, t = lane % 4, each
// register 4 consecutive k (lowest k in the lowest byte):
//   A 16x32 (weights, row-major):  a0 row g, k 4t..4t+3   a1 row g+8, k 4t..
//                                  a2 row g, k 16+4t..    a3 row g+8, k 16+4t..
//   B 32x8  (activations, "col"):  b0 col g, k 4t..4t+3   b1 col g, k 16+4t..
//   C 16x8  s32:                   c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)
// m16n8k16 (s8) is the first half of that: A {a0, a1}, B {b0}, same C.
// So both operands are read as 32-bit words at [row][k0 + 4t] and
// [row][k0 + 16 + 4t] of row-major int8 tiles; the tiles' rows are padded
// to 272 bytes (68 words), which puts the 32 lanes' words in 32 different
// banks (4g + t mod 32).
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_ptx.cuh"
#include "cuda_mma_dec.cuh"

#define MMA_BM      128                 // weight rows per block
#define MMA_BN      64                  // columns per block
#define MMA_KT      256                 // k per tile
#define MMA_NSUB    (MMA_KT / 32)       // 32-blocks per tile
#define MMA_THREADS 256
#define MMA_LD      (MMA_KT + 16)       // bytes per smem tile row
// Blocks per SM the registers are budgeted for.  At 2 (128 registers)
// ptxas spills 36-116 bytes per thread (the packed tile held one step
// ahead); at 1 it uses 163-205 registers and spills nothing (-Xptxas -v,
// sm_90).  The smem (86 KiB) would allow 2 on sm_90, 1 on sm_120.
#ifndef MMA_MINB
#define MMA_MINB 1
#endif

// Shared memory (bytes): one weight tile and its scales, two activation
// tiles and theirs: 86 KiB, under sm_120's 99 KiB per block.
#define SM_W   0
#define SM_WD  (SM_W + MMA_BM * MMA_LD)            // f32 [8][128]: dw (Q6_K: d)
#define SM_WM  (SM_WD + MMA_NSUB * MMA_BM * 4)     // f32 [8][128]: wm (Q6_K: int scale pair)
#define SM_X   (SM_WM + MMA_NSUB * MMA_BM * 4)     // int8 [2][64][272]
#define SM_XD  (SM_X + 2 * MMA_BN * MMA_LD)        // f32 [2][8][64]
#define SM_XS  (SM_XD + 2 * MMA_NSUB * MMA_BN * 4) // f32 [2][8][64]
#define SM_TOTAL (SM_XS + 2 * MMA_NSUB * MMA_BN * 4)

// int32 -> f32 for |v| < 2^22 with two full-rate ops (cuda_quant.cuh).
__device__ __forceinline__ float i2f_small(int v)
{
    return __int_as_float(v + CU_I2F_MAGIC) - CU_I2F_MAGICF;
}

__device__ __forceinline__ void st16(uint8_t *p, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    *(uint4 *)p = make_uint4(a, b, c, d);
}

// ---- weights: packed tile -> registers -> int8 smem ---------------------
//
// Every type loads one k-tile of 128 rows in "units" of 16 packed bytes:
// thread tid always takes the same unit j of a row (rows tid / U + i * 256/U),
// so a warp reads U consecutive units of 32/U rows.  Rows past the end
// are clamped to the last one (cu_wtile_row, cuda_mma_dec.cuh).

template <int T> struct wraw;

// Q4_K (144 B): unit j = (g, h) is qs[32g + 16h ..]: 16 low nibbles of
// sub-block 2g and 16 high nibbles of 2g+1 (values 16h..16h+15 of each);
// Q5_K (176 B) adds qh[16h ..], bits 2g and 2g+1.  Thread tid < 128 also
// takes the 16-byte header (d, dmin, 12 bytes of 6-bit scales/mins) of
// row tid (read at store time).
template <int T> struct wraw_k45 {
    static const int U = 8, N = MMA_BM * U / MMA_THREADS;   // 4 units per thread
    uint32_t q[N][4], h[T == SI_TYPE_Q5_K ? N : 1][4];

    __device__ __forceinline__ void load(const cu_wtile &t, int64_t kt, int tid)
    {
        const int j = tid % U, g = j >> 1, hh = j & 1;
        const int bytes = T == SI_TYPE_Q4_K ? 144 : 176, qs = T == SI_TYPE_Q4_K ? 16 : 48;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (MMA_THREADS / U)) + kt * bytes;
            cu_ld16(B + qs + 32 * g + 16 * hh, q[i]);
            if (T == SI_TYPE_Q5_K)
                cu_ld16(B + 16 + 16 * hh, h[i]);
        }
    }

    // The row headers are read here, not ahead: 16 bytes per row, L2 hits
    // (their sectors came in with the quants), and the registers are short.
    __device__ __forceinline__ void store(uint8_t *sm, const cu_wtile &t, int64_t kt, int tid) const
    {
        const int j = tid % U, g = j >> 1, hh = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int r = tid / U + i * (MMA_THREADS / U);
            uint32_t lo[4], hi[4];
            cu_unpack_q45<T>(q[i], h[T == SI_TYPE_Q5_K ? i : 0], 2 * g, lo, hi);   // (Q4_K: h unused)
            uint8_t *W = sm + SM_W + r * MMA_LD + 64 * g + 16 * hh;
            st16(W, lo[0], lo[1], lo[2], lo[3]);
            st16(W + 32, hi[0], hi[1], hi[2], hi[3]);
        }
        if (tid < MMA_BM) {
            uint32_t hdr[4];
            cu_ld16(cu_wtile_row(t, tid) + kt * (T == SI_TYPE_Q4_K ? 144 : 176), hdr);
            float d, dmin;
            uint8_t b[12];
            cu_k45_head(hdr, d, dmin, b);
            float *wd = (float *)(sm + SM_WD), *wm = (float *)(sm + SM_WM);
#pragma unroll
            for (int s = 0; s < 8; s++) {
                int sc, m;
                cu_scale_min_k4(b, s, &sc, &m);
                wd[s * MMA_BM + tid] = d * (float)sc;     // the cpu's d16 and m32
                wm[s * MMA_BM + tid] = dmin * (float)m;
            }
        }
    }
};
template <> struct wraw<SI_TYPE_Q4_K> : wraw_k45<SI_TYPE_Q4_K> {};
template <> struct wraw<SI_TYPE_Q5_K> : wraw_k45<SI_TYPE_Q5_K> {};

// Q6_K (210 B, 2-byte aligned): unit j = (half, s, k) is ql[64 half + 32 s
// + 16 k ..] with qh[128 + 32 half + 16 k ..]: values 128 half + 32 s +
// 16 k .. (low nibbles, qh bits 2s) and those 64 further (high nibbles, qh
// bits 2s+4), as the cpu's dec_q6_k.  Header of row tid < 128: the 16 int8
// scales and d.
template <> struct wraw<SI_TYPE_Q6_K> {
    static const int U = 8, N = MMA_BM * U / MMA_THREADS;
    uint32_t ql[N][4], qh[N][4];

    __device__ __forceinline__ void load(const cu_wtile &t, int64_t kt, int tid)
    {
        const int j = tid % U, half = j >> 2, s = (j >> 1) & 1, k = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (MMA_THREADS / U)) + kt * 210;
            cu_ld16_a2(B + 64 * half + 32 * s + 16 * k, ql[i]);
            cu_ld16_a2(B + 128 + 32 * half + 16 * k, qh[i]);
        }
    }

    __device__ __forceinline__ void store(uint8_t *sm, const cu_wtile &t, int64_t kt, int tid) const
    {
        const int j = tid % U, half = j >> 2, s = (j >> 1) & 1, k = j & 1;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int r = tid / U + i * (MMA_THREADS / U);
            uint32_t a[4], b[4];
#pragma unroll
            for (int m = 0; m < 4; m++) {
                a[m] = (ql[i][m] & 0x0F0F0F0Fu) | (((qh[i][m] >> (2 * s)) & 0x03030303u) << 4);
                b[m] = ((ql[i][m] >> 4) & 0x0F0F0F0Fu) | (((qh[i][m] >> (2 * s + 4)) & 0x03030303u) << 4);
                a[m] = __vsub4(a[m], 0x20202020u);   // q - 32 per byte: -32..31
                b[m] = __vsub4(b[m], 0x20202020u);
            }
            uint8_t *W = sm + SM_W + r * MMA_LD + 128 * half + 32 * s + 16 * k;
            st16(W, a[0], a[1], a[2], a[3]);
            st16(W + 64, b[0], b[1], b[2], b[3]);
        }
        if (tid < MMA_BM) {   // header read here, as for Q4_K
            const uint8_t *B = cu_wtile_row(t, tid) + kt * 210;
            uint32_t sc[4];
            cu_ld16_a2(B + 192, sc);
            const float d = __half2float(__ushort_as_half(__ldg((const unsigned short *)(B + 208))));
            float *wd = (float *)(sm + SM_WD);
            int *wm = (int *)(sm + SM_WM);
#pragma unroll
            for (int b = 0; b < 8; b++) {
                // scales 2b and 2b+1 (values 32b..32b+15 and 32b+16..32b+31)
                const int lo = (int)(int8_t)(sc[b / 2] >> (16 * (b % 2)));
                const int hi = (int)(int8_t)(sc[b / 2] >> (16 * (b % 2) + 8));
                wd[b * MMA_BM + tid] = d;
                wm[b * MMA_BM + tid] = (int)(((unsigned)lo & 0xffffu) | ((unsigned)hi << 16));
            }
        }
    }
};

// Q8_0 (34 B, 2-byte aligned): unit j = (block j/2, half j%2) is qs[16 h ..]
// of one block; the h == 0 thread also writes the block's d.  A row's last
// tile may hold fewer than 8 blocks (in % 256 != 0): those units are not
// read (their smem is never used).
template <> struct wraw<SI_TYPE_Q8_0> {
    static const int U = 16, N = MMA_BM * U / MMA_THREADS;   // 8 units per thread
    uint32_t q[N][4];

    __device__ __forceinline__ void load(const cu_wtile &t, int64_t kt, int tid)
    {
        const int j = tid % U, blk = j >> 1, h = j & 1;
        const int64_t b = kt * MMA_NSUB + blk;
        if (b >= t.nb)
            return;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const uint8_t *B = cu_wtile_row(t, tid / U + i * (MMA_THREADS / U)) + b * 34;
            cu_ld16_a2(B + 2 + 16 * h, q[i]);
        }
    }

    // d is read here (same sector as the quants: an L1/L2 hit).
    __device__ __forceinline__ void store(uint8_t *sm, const cu_wtile &t, int64_t kt, int tid) const
    {
        const int j = tid % U, blk = j >> 1, h = j & 1;
        const int64_t b = kt * MMA_NSUB + blk;
        if (b >= t.nb)
            return;
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int r = tid / U + i * (MMA_THREADS / U);
            st16(sm + SM_W + r * MMA_LD + 32 * blk + 16 * h, q[i][0], q[i][1], q[i][2], q[i][3]);
            if (h == 0) {
                const unsigned short dh = __ldg((const unsigned short *)(cu_wtile_row(t, r) + b * 34));
                ((float *)(sm + SM_WD))[blk * MMA_BM + r] = __half2float(__ushort_as_half(dh));
            }
        }
    }
};

// ---- activations: cp.async into X[buf] ----------------------------------

struct xtile {
    const int8_t *xq;
    const float  *xd, *xs;
    int64_t       in, nb, ncols, x_div, c0;
};

// Column c of the tile reads quantised column (c0 + c) / x_div; columns past
// the end are clamped to the last one (computed, never stored).
__device__ __forceinline__ int64_t xcol(const xtile &t, int c)
{
    int64_t j = t.c0 + c;
    j = j < t.ncols ? j : t.ncols - 1;
    return j / t.x_div;
}

template <bool MIN>
__device__ __forceinline__ void x_issue(uint8_t *sm, int buf, const xtile &t, int64_t kt, int tid)
{
    const int64_t k0 = kt * MMA_KT;
    uint8_t *X = sm + SM_X + buf * (MMA_BN * MMA_LD);
#pragma unroll
    for (int i = 0; i < MMA_BN * (MMA_KT / 16) / MMA_THREADS; i++) {   // 4 chunks of 16 B
        const int id = tid + i * MMA_THREADS, c = id / (MMA_KT / 16), ch = id % (MMA_KT / 16);
        if (k0 + 16 * ch < t.in)
            cp_async16(X + c * MMA_LD + 16 * ch, t.xq + xcol(t, c) * t.in + k0 + 16 * ch);
    }
    float *xd = (float *)(sm + SM_XD) + buf * (MMA_NSUB * MMA_BN);
    float *xs = (float *)(sm + SM_XS) + buf * (MMA_NSUB * MMA_BN);
#pragma unroll
    for (int i = 0; i < MMA_BN * MMA_NSUB / MMA_THREADS; i++) {   // 2 scales (and sums)
        const int id = tid + i * MMA_THREADS, c = id / MMA_NSUB, b = id % MMA_NSUB;
        const int64_t gb = kt * MMA_NSUB + b;
        if (gb < t.nb) {
            const int64_t o = xcol(t, c) * t.nb + gb;
            cp_async4(xd + b * MMA_BN + c, t.xd + o);
            if (MIN)
                cp_async4(xs + b * MMA_BN + c, t.xs + o);
        }
    }
}

// ---- the kernel -----------------------------------------------------------

template <int T>
__global__ void __launch_bounds__(MMA_THREADS, MMA_MINB)
mma_kernel(cu_mm mm, const int8_t *xq, const float *xd, const float *xs)
{
    extern __shared__ __align__(16) uint8_t sm[];
    const bool MIN = T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wr = (warp & 3) * 32, wc = (warp >> 2) * 32;   // the warp's rows and columns in the tile
    const int64_t nb = mm.in / 32, nkt = (mm.in + MMA_KT - 1) / MMA_KT;
    const int64_t nct = (mm.ncols + MMA_BN - 1) / MMA_BN;
    const cu_wtile wt = { mm.w, mm.row_bytes, (int64_t)blockIdx.x * MMA_BM, mm.rows, nb };

    for (int64_t ct = blockIdx.y; ct < nct; ct += gridDim.y) {
        const xtile xt = { xq, xd, xs, mm.in, nb, mm.ncols, mm.x_div, ct * MMA_BN };
        float acc[2][4][4];
        cu_mma_acc_zero<2>(acc);

        wraw<T> raw;
        __syncthreads();   // the previous column tile is done with the smem
        raw.load(wt, 0, tid);
        x_issue<MIN>(sm, 0, xt, 0, tid);
        cp_async_commit();
        raw.store(sm, wt, 0, tid);

        for (int64_t kt = 0; kt < nkt; kt++) {
            const int buf = (int)(kt & 1);
            cp_async_wait_all();
            __syncthreads();   // W(kt) stored and X(kt) landed, for every thread
            if (kt + 1 < nkt) {
                x_issue<MIN>(sm, buf ^ 1, xt, kt + 1, tid);   // buf^1 was last read before the last barrier
                cp_async_commit();
                raw.load(wt, kt + 1, tid);                   // lands while the tensor cores work
            }
            const uint8_t *W = sm + SM_W, *X = sm + SM_X + buf * (MMA_BN * MMA_LD);
            const float *swd = (const float *)(sm + SM_WD), *swm = (const float *)(sm + SM_WM);
            const float *sxd = (const float *)(sm + SM_XD) + buf * (MMA_NSUB * MMA_BN);
            const float *sxs = (const float *)(sm + SM_XS) + buf * (MMA_NSUB * MMA_BN);
            const int64_t left = nb - kt * MMA_NSUB;
            const int nsub = left < MMA_NSUB ? (int)left : MMA_NSUB;
#pragma unroll 1
            for (int b = 0; b < nsub; b++) {
                const int k0 = 32 * b + 4 * t4;
                uint32_t bf[4][2];
                float dx[4][2], sx[4][2];
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const uint8_t *xr = X + (wc + nt * 8 + g) * MMA_LD + k0;
                    bf[nt][0] = *(const uint32_t *)xr;
                    bf[nt][1] = *(const uint32_t *)(xr + 16);
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        dx[nt][e] = sxd[b * MMA_BN + wc + nt * 8 + 2 * t4 + e];
                        sx[nt][e] = MIN ? sxs[b * MMA_BN + wc + nt * 8 + 2 * t4 + e] : 0.0f;
                    }
                }
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const int r = wr + mt * 16 + g;
                    const uint8_t *wa = W + r * MMA_LD + k0;
                    uint32_t af[4];
                    af[0] = *(const uint32_t *)wa;
                    af[1] = *(const uint32_t *)(wa + 8 * MMA_LD);
                    af[2] = *(const uint32_t *)(wa + 16);
                    af[3] = *(const uint32_t *)(wa + 8 * MMA_LD + 16);
                    const float dw[2] = { swd[b * MMA_BM + r], swd[b * MMA_BM + r + 8] };
                    float mw[2] = { 0.0f, 0.0f };
                    int sl[2] = { 0, 0 }, sh[2] = { 0, 0 };
                    if (MIN) {
                        mw[0] = swm[b * MMA_BM + r];
                        mw[1] = swm[b * MMA_BM + r + 8];
                    }
                    if (T == SI_TYPE_Q6_K) {
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int p = __float_as_int(swm[b * MMA_BM + r + 8 * e]);
                            sl[e] = (int)(short)(p & 0xffff);
                            sh[e] = p >> 16;
                        }
                    }
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
                        float f[4];
                        if (T == SI_TYPE_Q6_K) {
                            int lo[4], hi[4];
                            mma_k16(lo, af[0], af[1], bf[nt][0]);
                            mma_k16(hi, af[2], af[3], bf[nt][1]);
#pragma unroll
                            for (int e = 0; e < 4; e++)   // |.| < 2^24: exact in f32
                                f[e] = __int2float_rn(lo[e] * sl[e >> 1] + hi[e] * sh[e >> 1]);
                        } else {
                            int c[4];
                            mma_k32(c, af, bf[nt][0], bf[nt][1]);
#pragma unroll
                            for (int e = 0; e < 4; e++)   // |.| <= 32 * 128 * 127 < 2^22
                                f[e] = i2f_small(c[e]);
                        }
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int ri = e >> 1, ci = e & 1;
                            acc[mt][nt][e] = fmaf(f[e], dw[ri] * dx[nt][ci], acc[mt][nt][e]);
                            if (MIN)
                                acc[mt][nt][e] = fmaf(-mw[ri], sx[nt][ci], acc[mt][nt][e]);
                        }
                    }
                }
            }
            if (kt + 1 < nkt) {
                __syncthreads();   // every warp is done reading W(kt)
                raw.store(sm, wt, kt + 1, tid);
            }
        }

        cu_mma_acc_store<2>(mm, acc, wt.r0, xt.c0, wr, wc, g, t4);
    }
}

template <int T> static cudaError_t mma_launch(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs,
                                               cudaStream_t s)
{
    const int64_t gx = (mm->rows + MMA_BM - 1) / MMA_BM;
    int64_t gy = (mm->ncols + MMA_BN - 1) / MMA_BN;
    if (gy > 65535)
        gy = 65535;   // the kernel loops over the rest
    if (gx > 0x7fffffffLL)
        return cudaErrorInvalidValue;
    // Above the 48 KiB default: opt in (per device and function; cheap).
    cudaError_t e = cudaFuncSetAttribute(mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, SM_TOTAL);
    if (e != cudaSuccess)
        return e;
    mma_kernel<T><<<dim3((unsigned)gx, (unsigned)gy), MMA_THREADS, SM_TOTAL, s>>>(*mm, xq, xd, xs);
    return cudaGetLastError();
}

extern "C" bool si_cu_mma_ok(const cu_mm *mm)
{
    uint64_t align;
    switch (mm->type) {
    case SI_TYPE_Q4_K: case SI_TYPE_Q5_K: align = 16; break;   // uint4 loads of whole blocks
    case SI_TYPE_Q8_0: case SI_TYPE_Q6_K: align = 4; break;    // cu_ld16_a2 (2-byte aligned rows)
    default: return false;
    }
    if (mm->expert != NULL || mm->in <= 0 || mm->in % 32 != 0 || (mm->in % 256 != 0 && mm->type != SI_TYPE_Q8_0))
        return false;
    const uint64_t row_al = align == 16 ? 16 : 2;
    return (uintptr_t)mm->w % align == 0 && mm->row_bytes % row_al == 0;
}

extern "C" int si_cu_matmul_mma(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream)
{
    if (mm->rows <= 0 || mm->ncols <= 0)
        return 0;
    if (mm->x_div < 1 || !si_cu_mma_ok(mm))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (mm->type) {
    CU_I8_TYPE_CASES(mma_launch, mm, xq, xd, xs, s)
    default: return (int)cudaErrorInvalidValue;
    }
}
