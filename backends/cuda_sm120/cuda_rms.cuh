// backends/cuda_sm120/cuda_rms.cuh — the arithmetic of knob norm = v2's
// RMSNORM rows (ne0 % 512 == 0, <= 4096, 16-byte aligned), shared by
// cuda_elem.cu's rms2_kernel and by the products that end with their
// output's residual ADD + RMSNORM (knob norm_tail, cuda_gemvq.cu): one
// copy of the operations, so the two give the same bits.
// A chunk is 16 consecutive elements of a row, owned by one thread; the 32
// chunks of one warp (512 elements) sum their squares in a butterfly, and
// the row's sum is those 512-element sums added in order, however many
// chunks a thread takes.
#ifndef SI_CUDA_RMS_CUH
#define SI_CUDA_RMS_CUH
#include <math.h>
#include <stdint.h>
#include "cuda_internal.h"
#include "cuda_quant.cuh"   // cu_warp_sumd

#define RMS2_E 16

// (a row within dim 1, every decode row: no 64-bit division, which is a
// ~100-instruction routine on the GPU and sat on every kernel's critical
// path here, per element in swiglu_q_kernel)
__device__ __forceinline__ float *row_ptr(const cu_rows &t, int64_t r)
{
    if (r < t.ne1)
        return (float *)(t.p + (uint64_t)r * t.nb1);
    int64_t i1 = r % t.ne1, i2 = (r / t.ne1) % t.ne2, i3 = r / (t.ne1 * t.ne2);
    return (float *)(t.p + (uint64_t)i1 * t.nb1 + (uint64_t)i2 * t.nb2 + (uint64_t)i3 * t.nb3);
}

// (host) Every row of the view 16-byte aligned.
static inline bool cu_rows_al16(const cu_rows *t)
{
    return ((uintptr_t)t->p | t->nb1 | t->nb2 | t->nb3) % 16 == 0;
}

// A chunk as four 16-byte loads.  CG: written by other blocks of the same
// launch (norm_tail's product rows): from the L2, past this SM's L1.
template <bool CG = false> __device__ __forceinline__ void rms2_ld(const float *p, float v[RMS2_E])
{
#pragma unroll
    for (int k = 0; k < RMS2_E; k += 4) {
        const float4 t = CG ? __ldcg((const float4 *)(p + k)) : *(const float4 *)(p + k);
        v[k] = t.x;
        v[k + 1] = t.y;
        v[k + 2] = t.z;
        v[k + 3] = t.w;
    }
}

__device__ __forceinline__ void rms2_st(float *p, const float v[RMS2_E])
{
#pragma unroll
    for (int k = 0; k < RMS2_E; k += 4)
        *(float4 *)(p + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
}

// A chunk's input: a's 16 elements, plus b's (b != NULL) stored to r.
template <bool CG = false>
__device__ __forceinline__ void rms2_in(const float *a, const float *b, float *r, float xv[RMS2_E])
{
    rms2_ld<CG>(a, xv);
    if (b == NULL)
        return;
    float bv[RMS2_E];
    rms2_ld(b, bv);
#pragma unroll
    for (int k = 0; k < RMS2_E; k++)
        xv[k] = xv[k] + bv[k];
    rms2_st(r, xv);
}

// The sum of squares of the calling warp's 32 chunks (every lane gets it):
// four double partials a chunk (elements k = j mod 4, in order),
// (p0 + p1) + (p2 + p3), then the butterfly.
__device__ __forceinline__ double rms2_ss(const float v[RMS2_E])
{
    double ps[4] = { 0.0, 0.0, 0.0, 0.0 };
#pragma unroll
    for (int k = 0; k < RMS2_E; k++)
        ps[k & 3] += (double)v[k] * (double)v[k];
    return cu_warp_sumd((ps[0] + ps[1]) + (ps[2] + ps[3]));
}

// The row's scale from its 512-element sums red[0..ne0 / 512), in order.
__device__ __forceinline__ float rms2_scale(const double *red, int64_t ne0, float eps)
{
    double ss = 0.0;
    for (int i = 0; i < (int)(ne0 / 512); i++)
        ss += red[i];
    return (float)(1.0 / sqrt(ss / (double)ne0 + (double)eps));
}

// Knob norm_tail = defer: a deferred norm's scale from its blocks' sums
// of squares (cu_xr), the same in every warp that asks: lane l adds parts
// l, l + 32, ... in order, then the butterfly.  Every lane of the warp
// calls it.  p: the parts, from the L2 (another launch wrote them), or a
// block's copy in shared memory (cu_xr_stage).
__device__ __forceinline__ float cu_xr_scale(const cu_xr &xr, const double *p)
{
    double ss = 0.0;
    for (int i = (int)(threadIdx.x & 31); i < xr.n; i += 32)
        ss += p == xr.part ? __ldcg(p + i) : p[i];
    ss = cu_warp_sumd(ss);
    return (float)(1.0 / sqrt(ss / (double)xr.ne + (double)xr.eps));
}

// The parts into the block's shared memory sp[xr.n], for cu_xr_scale
// after a barrier: issued with the block's copy of x, so that the scale
// costs no round trip, and no registers, across the product's loop.
__device__ __forceinline__ void cu_xr_stage(const cu_xr &xr, double *sp)
{
    for (int i = (int)threadIdx.x; i < xr.n; i += (int)blockDim.x)
        sp[i] = __ldcg(xr.part + i);
}

__device__ __forceinline__ uint32_t rms2_q4(const float *v, float id)
{
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int qi = __float2int_rn(__fmul_rn(v[k], id));
        qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
        word |= ((uint32_t)qi & 0xffu) << (8 * k);
    }
    return word;
}

// Chunk c (16 values yv) of a row to int8: its 16 bytes to *qc (where the
// caller keeps chunk c: the row's q + 16 c, or a swizzled shared copy),
// the block scales and sums to qd, qs (the row's), a block of 32 being
// chunks 2g and 2g + 1 on lanes 2g', 2g' + 1 of one warp: one shuffle for
// its max and one to pass the first half's sum on (the cpu's order:
// element 0 first, as cu_q8_block32, whose 32 serial shuffles a block this
// avoids).  Every lane of the warp calls it (the shuffles).
__device__ __forceinline__ void rms2_q8(const float yv[RMS2_E], int c, uint4 *qc, float *qd, float *qs)
{
    const int lane = threadIdx.x & 31;
    float amax = fabsf(yv[0]), s = 0.0f;   // (NaNs drop out of fmaxf as in cu_q8_block32)
#pragma unroll
    for (int k = 1; k < RMS2_E; k++)
        amax = fmaxf(amax, fabsf(yv[k]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
#pragma unroll
    for (int k = 0; k < RMS2_E; k++)
        s = __fadd_rn(s, yv[k]);
    // the odd lane continues the block's sum from the even lane's
    const float first = __shfl_sync(0xffffffffu, s, lane & ~1);
    if (lane & 1) {
        s = first;
#pragma unroll
        for (int k = 0; k < RMS2_E; k++)
            s = __fadd_rn(s, yv[k]);
    }
    const float dd = __fdiv_rn(amax, 127.0f);
    const float id = dd > 0.0f ? __frcp_rn(dd) : 0.0f;
    uint4 qw;
    qw.x = rms2_q4(yv, id);
    qw.y = rms2_q4(yv + 4, id);
    qw.z = rms2_q4(yv + 8, id);
    qw.w = rms2_q4(yv + 12, id);
    *qc = qw;
    if (lane & 1) {
        qd[c >> 1] = dd + (s - s);
        qs[c >> 1] = s;
    }
}

// Chunk c of a row out: y = x * scale * w into d (the chunk's 16), and
// with q != NULL its int8 copy (rms2_q8).  Every lane of the warp calls it.
__device__ __forceinline__ void rms2_out(const float xv[RMS2_E], const float wv[RMS2_E], float scale, float *d,
                                         int c, int8_t *q, float *qd, float *qs)
{
    float yv[RMS2_E];
#pragma unroll
    for (int k = 0; k < RMS2_E; k++)
        yv[k] = __fmul_rn(__fmul_rn(xv[k], scale), wv[k]);
    rms2_st(d, yv);
    if (q != NULL)
        rms2_q8(yv, c, (uint4 *)(q + (int64_t)c * RMS2_E), qd, qs);
}
#endif
