// backends/cuda_sm120/cuda_elem.cu — GET_ROWS, RMSNORM, ADD, MUL, SWIGLU.
// F32 rows of up to 4 dims with contiguous ne0 and any row strides (the
// same views the cpu backend accepts); an element is read before it is
// written by the same thread, so dst may alias a source.
#include <cuda_runtime.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"
#include "cuda_rms.cuh"   // row_ptr, rms2_*

template <int T>
__global__ void get_rows_kernel(const uint8_t *table, uint64_t row_bytes, int64_t n_rows, const int32_t *ids,
                                uint64_t ids_stride, int64_t n, float *dst, uint64_t dst_stride, int64_t ne0,
                                unsigned *flag)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int32_t id = *(const int32_t *)((const uint8_t *)ids + (uint64_t)i * ids_stride);
        float *y = (float *)((uint8_t *)dst + (uint64_t)i * dst_stride);
        if (id < 0 || id >= n_rows) {
            // Reported at the next sync; the row is zeroed so nothing reads
            // outside the table and later ops see finite values.
            if (threadIdx.x == 0 && atomicCAS(flag, 0u, 1u) == 0u) {
                flag[1] = (unsigned)id;
                flag[2] = (unsigned)i;
                flag[3] = (unsigned)n_rows;
            }
            for (int64_t e = threadIdx.x; e < ne0; e += blockDim.x)
                y[e] = 0.0f;
            continue;
        }
        const uint8_t *src = table + (uint64_t)id * row_bytes;
        const int64_t n8 = ne0 / 8;
        for (int64_t g = threadIdx.x; g < n8; g += blockDim.x) {
            float w[8];
            cu_deq8<T>(src, g * 8, w);
#pragma unroll
            for (int j = 0; j < 8; j++)
                y[g * 8 + j] = w[j];
        }
        if (cu_is_plain<T>::value)
            for (int64_t e = n8 * 8 + threadIdx.x; e < ne0; e += blockDim.x)
                y[e] = cu_deq1<T>(src, e);
    }
}

template <int T>
static cudaError_t get_rows_launch(const uint8_t *table, uint64_t row_bytes, int64_t n_rows, const int32_t *ids,
                                   uint64_t ids_stride, int64_t n, float *dst, uint64_t dst_stride, int64_t ne0,
                                   unsigned *flag, cudaStream_t s)
{
    unsigned grid = (unsigned)(n < 65535 ? n : 65535);
    get_rows_kernel<T><<<grid, 128, 0, s>>>(table, row_bytes, n_rows, ids, ids_stride, n, dst, dst_stride, ne0, flag);
    return cudaGetLastError();
}

extern "C" int si_cu_get_rows(uint32_t type, const uint8_t *table, uint64_t row_bytes, int64_t n_rows,
                              const int32_t *ids, uint64_t ids_stride, int64_t n, float *dst, uint64_t dst_stride,
                              int64_t ne0, unsigned *flag, void *stream)
{
    if (n <= 0 || ne0 <= 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    switch (type) {
        CU_TYPE_CASES(get_rows_launch, table, row_bytes, n_rows, ids, ids_stride, n, dst, dst_stride, ne0, flag, s)
    default:
        return (int)cudaErrorInvalidValue;
    }
}

// One block per row; the sum of squares in double like the cpu backend,
// y = (x * scale) * w without contraction.  A row of up to RMS_REG *
// blockDim elements is held in registers: all of its loads (and the
// weight's) are issued at once, where a loop over memory waited for one
// round trip per element (~15 us per decode norm on the H200, the largest
// small kernel of a token).  Each thread sums its elements in the same
// order either way, so both paths give the same bits.
// Fused forms (register path only; cuda_ops.c norm_fused): with f.b.p,
// x = a + b first (the residual ADD before the norm, IEEE add as ADD's
// kernel) and x stored to f.r; with f.q, y also quantised to int8 blocks
// of 32 (norm_quant_row: the operations of quant_x_kernel, column = row of
// the norm), the input of the products after the norm; ne0 % 32 == 0 and
// blockDim 256 there.
#define RMS_REG 16
// The int8 copy of a normed row held in shared memory (ys, element i at
// i + i/32: the 32 elements of a block in 32 banks): thread t takes whole
// blocks t, t + blockDim, ... (scale, sum in the cpu's order: the same
// operations as cu_q8_block32, without its 32-step shuffle chain per
// block that a warp would repeat for each of its 16 blocks), then every
// thread rounds its elements.  Ends with the block synchronised.
__device__ void norm_quant_row(float *ys, float *ids, int64_t ne0, int8_t *q, float *qd, float *qs)
{
    __syncthreads();   // ys complete
    for (int64_t bk = threadIdx.x; bk < ne0 / 32; bk += blockDim.x) {
        const float *v = ys + bk * 33;
        float amax = fabsf(v[0]), sum = 0.0f;   // (NaNs drop out of fmaxf as in the shuffles)
#pragma unroll
        for (int l = 0; l < 32; l++) {
            amax = fmaxf(amax, fabsf(v[l]));
            sum = __fadd_rn(sum, v[l]);
        }
        const float dd = __fdiv_rn(amax, 127.0f);
        ids[bk] = dd > 0.0f ? __frcp_rn(dd) : 0.0f;
        qd[bk] = dd + (sum - sum);
        qs[bk] = sum;
    }
    __syncthreads();   // ids complete
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        int qi = __float2int_rn(__fmul_rn(ys[i + (i >> 5)], ids[i >> 5]));
        q[i] = (int8_t)(qi > 127 ? 127 : qi < -127 ? -127 : qi);
    }
    __syncthreads();   // ys and ids free for the next row
}

__global__ void rmsnorm_kernel(cu_rows a, const float *w, cu_rows d, int64_t ne0, int64_t nrows, float eps,
                               cu_norm_fuse f)
{
    cu_pdl_enter();
    __shared__ double red[33];
    __shared__ float ys[RMS_REG * 256 / 32 * 33], ids[RMS_REG * 256 / 32];
    const bool reg = ne0 <= (int64_t)RMS_REG * blockDim.x;
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        const float *x = row_ptr(a, r);
        float *y = row_ptr(d, r);
        double ss = 0.0;
        float xv[RMS_REG], wv[RMS_REG];
        if (reg) {
            // (the weight's loads go out with the row's: their round trip
            // overlaps the sum of squares instead of following it)
#pragma unroll
            for (int k = 0; k < RMS_REG; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                xv[k] = i < ne0 ? x[i] : 0.0f;
                wv[k] = i < ne0 ? __ldg(w + i) : 0.0f;
            }
            if (f.b.p != NULL) {
                // All of b's loads go out before the first store of the
                // sum: xr may alias xb as far as the compiler knows, so a
                // load after a store waited for it, one round trip per
                // element (~12 us per fused decode norm on the H200).
                const float *xb = row_ptr(f.b, r);
                float *xr = row_ptr(f.r, r);
                float bv[RMS_REG];
#pragma unroll
                for (int k = 0; k < RMS_REG; k++) {
                    const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                    bv[k] = i < ne0 ? xb[i] : 0.0f;
                }
#pragma unroll
                for (int k = 0; k < RMS_REG; k++) {
                    const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                    if (i < ne0) {
                        xv[k] = xv[k] + bv[k];
                        xr[i] = xv[k];
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < RMS_REG; k++)
                if (threadIdx.x + (int64_t)k * blockDim.x < ne0)
                    ss += (double)xv[k] * (double)xv[k];
        } else {
#pragma unroll 8
            for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
                ss += (double)x[i] * (double)x[i];
        }
        ss = cu_block_sumd(ss, red);
        const float scale = (float)(1.0 / sqrt(ss / (double)ne0 + (double)eps));
        if (reg) {
#pragma unroll
            for (int k = 0; k < RMS_REG; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < ne0) {
                    const float v = __fmul_rn(__fmul_rn(xv[k], scale), wv[k]);
                    y[i] = v;
                    if (f.q != NULL)
                        ys[i + (i >> 5)] = v;
                }
            }
            if (f.q != NULL)
                norm_quant_row(ys, ids, ne0, f.q + r * ne0, f.qd + r * (ne0 / 32), f.qs + r * (ne0 / 32));
        } else {
            for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x)
                y[i] = __fmul_rn(__fmul_rn(x[i], scale), w[i]);
        }
        __syncthreads();   // in place: no thread of the next row reads before all wrote
    }
}

// Knob norm = v2 (default): rows of ne0 % 512 == 0, ne0 <= 4096, every
// row and the weight 16-byte aligned.  ncu on the H200 put rmsnorm_kernel
// at ~8,500 cycles of one SM a decode norm (5.3-5.9 us; ~65 a 9b step,
// ~80 a 35b-a3b step): ~1,400 instructions a warp issued one every ~6
// cycles, a dependent chain (64-bit index arithmetic per element, the
// 32-step serial block sum by only 4 of 8 warps, three barriers).  Here
// thread t owns the 16 consecutive elements 16t .. 16t+15 (blockDim =
// ne0 / 16): four 16-byte loads of each operand, the weight's before the
// programmatic-launch wait (a norm weight is never written in a step);
// a block of 32 is lanes 2g and 2g+1, so the int8 copy needs one shuffle
// for its max and one to pass the first half's sum on (the cpu's order:
// element 0 first, as cu_q8_block32), its 32 values stored as two 16-byte
// words.  The sum of squares: four double partials per thread (elements
// k = j mod 4, in order), (p0 + p1) + (p2 + p3), the warps' butterfly,
// then every thread adds the warps' sums in order: one barrier a row.
// Another order than rmsnorm_kernel's, so other bits (both within the
// cpu's tolerance); the plain RMSNORM of these rows takes this kernel too,
// so fuse_norm's fused and split forms still give the same bits.
// (cuda_rms.cuh holds the arithmetic, shared with knob norm_tail)
__global__ void rms2_kernel(cu_rows a, const float *w, cu_rows d, int64_t ne0, int64_t nrows, float eps,
                            cu_norm_fuse f)
{
    __shared__ double red[2][8];
    const int t = (int)threadIdx.x, warp = t >> 5;
    const int e0 = RMS2_E * t;
    float wv[RMS2_E];
    rms2_ld(w + e0, wv);
    cu_pdl_enter();
    int par = 0;
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x, par ^= 1) {
        float xv[RMS2_E];
        if (f.b.p != NULL)
            rms2_in(row_ptr(a, r) + e0, row_ptr(f.b, r) + e0, row_ptr(f.r, r) + e0, xv);
        else
            rms2_in(row_ptr(a, r) + e0, NULL, NULL, xv);
        const double sw = rms2_ss(xv);
        if ((t & 31) == 0)
            red[par][warp] = sw;
        __syncthreads();   // (red[par] is next written two rows on, after the next row's barrier)
        const float scale = rms2_scale(red[par], ne0, eps);
        if (f.q != NULL)
            rms2_out(xv, wv, scale, row_ptr(d, r) + e0, t, f.q + r * ne0, f.qd + r * (ne0 / 32), f.qs + r * (ne0 / 32));
        else
            rms2_out(xv, wv, scale, row_ptr(d, r) + e0, t, NULL, NULL, NULL);
    }
}

// Whether rms2_kernel takes these rows (knob norm = v2).
static bool rms2_ok(const cu_rows *a, const float *w, const cu_rows *d, int64_t ne0, const cu_norm_fuse &f)
{
    if (ne0 % 512 != 0 || ne0 > 4096 || (uintptr_t)w % 16 != 0 || !cu_rows_al16(a) || !cu_rows_al16(d))
        return false;
    if (f.b.p != NULL && (!cu_rows_al16(&f.b) || !cu_rows_al16(&f.r)))
        return false;
    return f.q == NULL || (uintptr_t)f.q % 16 == 0;
}

// The RMSNORM launch of si_cu_elem and si_cu_norm_fused: a block a row,
// on rms2_kernel where norm_v2 and the rows allow it.
static cudaError_t norm_launch(const cu_rows *a, const float *w, const cu_rows *d, int64_t ne0, int64_t nrows,
                               float eps, const cu_norm_fuse &f, bool norm_v2, cudaStream_t s)
{
    const unsigned grid = (unsigned)(nrows < 65535 ? nrows : 65535);
    if (norm_v2 && rms2_ok(a, w, d, ne0, f))
        return cu_launch(rms2_kernel, dim3(grid), dim3((unsigned)(ne0 / RMS2_E)), 0, s, *a, w, *d, ne0, nrows, eps, f);
    return cu_launch(rmsnorm_kernel, dim3(grid), dim3(256), 0, s, *a, w, *d, ne0, nrows, eps, f);
}

// Knob norm_tail = defer: a deferred norm's row made whole for a reader
// that cannot take its scale (cuda_internal.h si_cu_xr_resolve); one
// block, the scale found once.
__global__ void xr_resolve_kernel(cu_xr xr, float *d, float *qd, float *qs)
{
    __shared__ float sc;
    cu_pdl_enter();
    if (threadIdx.x < 32) {
        const float r = cu_xr_scale(xr, xr.part);
        if (threadIdx.x == 0)
            sc = r;
    }
    __syncthreads();
    const float r = sc;
    for (int64_t i = threadIdx.x; i < xr.ne; i += blockDim.x)
        d[i] = __fmul_rn(d[i], r);
    if (qd != NULL)
        for (int64_t g = threadIdx.x; g < xr.ne / 32; g += blockDim.x) {
            qd[g] = __fmul_rn(qd[g], r);
            qs[g] = __fmul_rn(qs[g], r);
        }
}

extern "C" int si_cu_xr_resolve(const cu_xr *xr, float *d, float *qd, float *qs, void *stream)
{
    if (xr->part == NULL || xr->n <= 0 || xr->ne <= 0 || d == NULL || (qd != NULL && qs == NULL))
        return (int)cudaErrorInvalidValue;
    return (int)cu_launch(xr_resolve_kernel, dim3(1), dim3(256), 0, (cudaStream_t)stream, *xr, d, qd, qs);
}

__device__ __forceinline__ float binary_op(int op, float x, float y)
{
    if (op == 4)
        return x + y;
    if (op == 5)
        return x * y;
    return __fmul_rn(cu_silu(x), y);
}

// Rows on blockIdx.y, V consecutive elements a thread (V = 4: float4,
// every row 16-byte aligned): each row's pointers are found once, not per
// element (the flat index used to cost several 64-bit divisions per
// element: prefill's SWIGLU ran at ~1.5 TB/s).
template <int V>
__global__ void binary_kernel(int op, cu_rows a, cu_rows b, cu_rows d, int64_t ne0, int64_t nrows)
{
    cu_pdl_enter();
    for (int64_t r = blockIdx.y; r < nrows; r += gridDim.y) {
        const float *x = row_ptr(a, r), *y = row_ptr(b, r);
        float *o = row_ptr(d, r);
        for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V; i < ne0;
             i += (int64_t)gridDim.x * blockDim.x * V) {
            if (V == 4) {
                const float4 xv = *(const float4 *)(x + i), yv = *(const float4 *)(y + i);
                *(float4 *)(o + i) = make_float4(binary_op(op, xv.x, yv.x), binary_op(op, xv.y, yv.y),
                                                 binary_op(op, xv.z, yv.z), binary_op(op, xv.w, yv.w));
            } else {
                o[i] = binary_op(op, x[i], y[i]);
            }
        }
    }
}

// Knob profile_twice = empty (a measurement): a launch that does nothing
// but take its place in the chain of dependent launches (the wait for
// the kernel before, then letting the next one start).
__global__ void empty_kernel() { cu_pdl_enter(); }

extern "C" int si_cu_empty(void *stream)
{
    return (int)cu_launch(empty_kernel, dim3(1), dim3(32), 0, (cudaStream_t)stream);
}

extern "C" int si_cu_elem(int op, const cu_rows *a, const cu_rows *b, const cu_rows *d, int64_t ne0,
                          int64_t nrows, float eps, bool norm_v2, void *stream)
{
    if (nrows <= 0 || ne0 <= 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (op == 3) {
        const cu_norm_fuse none = {};
        cudaError_t e = norm_launch(a, (const float *)b->p, d, ne0, nrows, eps, none, norm_v2, s);
        if (e != cudaSuccess)
            return (int)e;
    } else {
        const bool v4 = ne0 % 4 == 0 && cu_rows_al16(a) && cu_rows_al16(b) && cu_rows_al16(d);
        const int64_t per = 256 * (v4 ? 4 : 1), gx = (ne0 + per - 1) / per;
        const dim3 grid((unsigned)(gx < 1024 ? gx : 1024), (unsigned)(nrows < 65535 ? nrows : 65535));
        cudaError_t e = v4 ? cu_launch(binary_kernel<4>, grid, dim3(256), 0, s, op, *a, *b, *d, ne0, nrows)
                           : cu_launch(binary_kernel<1>, grid, dim3(256), 0, s, op, *a, *b, *d, ne0, nrows);
        if (e != cudaSuccess)
            return (int)e;
    }
    return (int)cudaGetLastError();
}

// SWIGLU whose output the next product quantises: one warp per block of
// 32 outputs, silu(g) * u as binary_kernel computes it, stored, then
// quantised as quant_x_kernel would (cu_q8_block32).
__global__ void swiglu_q_kernel(cu_rows g, cu_rows u, cu_rows d, int64_t ne0, int64_t nrows, int8_t *q, float *qd,
                                float *qs)
{
    cu_pdl_enter();
    const int64_t nb = ne0 / 32, total = nrows * nb;
    const int lane = threadIdx.x & 31;
    for (int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; blk < total;
         blk += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        // (32-bit division where it fits: see row_ptr)
        const int64_t r = total <= 0x7fffffff ? (int)blk / (int)nb : blk / nb;
        const int64_t i = (blk - r * nb) * 32 + lane;
        const float v = __fmul_rn(cu_silu(row_ptr(g, r)[i]), row_ptr(u, r)[i]);
        row_ptr(d, r)[i] = v;
        cu_q8_block32(v, lane, q + r * ne0 + i - lane, qd + r * nb + i / 32, qs + r * nb + i / 32);
    }
}

extern "C" int si_cu_swiglu_q(const cu_rows *g, const cu_rows *u, const cu_rows *d, int64_t ne0, int64_t nrows,
                              int8_t *q, float *qd, float *qs, void *stream)
{
    if (nrows <= 0 || ne0 <= 0)
        return 0;
    if (ne0 % 32 != 0)
        return (int)cudaErrorInvalidValue;
    return (int)cu_launch(swiglu_q_kernel, dim3(cu_q8_grid(nrows * (ne0 / 32))), dim3(256), 0, (cudaStream_t)stream, *g,
                          *u, *d, ne0, nrows, q, qd, qs);
}

extern "C" bool si_cu_norm_fuse_ok(int64_t ne0)
{
    return ne0 > 0 && ne0 % 32 == 0 && ne0 <= (int64_t)RMS_REG * 256;
}

extern "C" int si_cu_norm_fused(const cu_rows *a, const float *w, const cu_rows *d, int64_t ne0, int64_t nrows,
                                float eps, const cu_norm_fuse *f, bool norm_v2, void *stream)
{
    if (nrows <= 0 || ne0 <= 0)
        return 0;
    if (!si_cu_norm_fuse_ok(ne0))
        return (int)cudaErrorInvalidValue;
    return (int)norm_launch(a, w, d, ne0, nrows, eps, *f, norm_v2, (cudaStream_t)stream);
}

extern "C" const char *si_cu_errstr(int e)
{
    return cudaGetErrorString((cudaError_t)e);
}
