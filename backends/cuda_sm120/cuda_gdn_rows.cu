// backends/cuda_sm120/cuda_gdn_rows.cu — the gated delta rule spread over
// the rows of the state (knob gdn_rows = true, the default): the decode
// path and short runs.
//
// Row m of a head's state S (key dim contiguous: s[m*dk + i]) evolves on
// its own once q, k, beta and the decay of the token are known:
//   s_m <- s_m * alpha;  r = s_m . k;  s_m <- s_m + k * beta (v_m - r);
//   o_m = s_m . q
// so the rows of all heads are cut into blocks of GR_ROWS rows (one warp
// per GR_ROWS / 4 rows), each block walks the run's tokens in order and
// keeps its rows in registers between tokens (read once, written once per
// run).  Each warp normalises q and k itself from the conv output (lane l
// holds elements l, l+32, ... — the same ones it holds of every row), so
// no shared memory and no block barrier is needed.  The gated RMSNorm
// couples all dv rows of a head, so it is a second kernel (norm_kernel,
// one warp per (token, head)) over the pre-norm outputs written to dst.
// The previous kernel (delta_kernel: one block per head, state re-read
// from L2 for every token by 4 warps in turn) kept only n_v_head blocks of
// the GPU busy at decode.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"
#include "cuda_launch.cuh"

#define GR_ROWS     16              // state rows per block
#define GR_WARPS    4
#define GR_ROWS_W   (GR_ROWS / GR_WARPS)
#define GR_MAX_EL   8               // dk / 32 <= 8: dk <= 256

// x[l + 32*e] of a dk-vector scaled to unit L2 norm (double sums, like the
// cpu backend) times `extra`; every lane gets its elements in out[].
__device__ __forceinline__ void warp_l2norm(const float *x, int el, float eps, float extra, float out[GR_MAX_EL])
{
    const int lane = threadIdx.x & 31;
    double ss = 0.0;
#pragma unroll
    for (int e = 0; e < GR_MAX_EL; e++) {
        out[e] = e < el ? x[lane + 32 * e] : 0.0f;
        ss += (double)out[e] * (double)out[e];
    }
    ss = cu_warp_sumd(ss);
    const double nrm = sqrt(ss);
    const float sc = __fmul_rn((float)(1.0 / (nrm > eps ? nrm : (double)eps)), extra);
#pragma unroll
    for (int e = 0; e < GR_MAX_EL; e++)
        out[e] = __fmul_rn(out[e], sc);
}

__global__ void __launch_bounds__(32 * GR_WARPS) rows_kernel(cu_gdn g)
{
    cu_pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int dk = g.dk, dv = g.dv, el = dk / 32;
    const int blocks_per_head = dv / GR_ROWS;
    const int j = blockIdx.x / blocks_per_head;                    // v-head
    const int m0 = (blockIdx.x % blocks_per_head) * GR_ROWS + warp * GR_ROWS_W;
    const cu_gdn_run run = g.runs[blockIdx.y];
    const int kh = j % g.n_k_head;
    float *S = (float *)(g.state + run.state_off) + (int64_t)g.conv_dim * (g.conv_k - 1) + (int64_t)j * dv * dk;
    float s[GR_ROWS_W][GR_MAX_EL];
#pragma unroll
    for (int r = 0; r < GR_ROWS_W; r++)
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++)
            s[r][e] = e < el ? S[(int64_t)(m0 + r) * dk + lane + 32 * e] : 0.0f;
    const float ssm_a = g.ssm_a[j], dt_b = g.dt_bias[j];
    const float qscale = 1.0f / sqrtf((float)dk);
    const int64_t key_dim = (int64_t)g.n_k_head * dk;
    for (int64_t t = run.t0; t < run.t0 + run.len; t++) {
        const float *y = g.y + t * g.conv_dim;
        float q[GR_MAX_EL], k[GR_MAX_EL];
        warp_l2norm(y + (int64_t)kh * dk, el, g.eps, qscale, q);
        warp_l2norm(y + key_dim + (int64_t)kh * dk, el, g.eps, 1.0f, k);
        // v of the warp's rows loaded here, not between the stores to
        // out below (which the compiler must assume may alias v: each
        // load would wait for the previous row's round trip)
        float vr[GR_ROWS_W];
#pragma unroll
        for (int r = 0; r < GR_ROWS_W; r++)
            vr[r] = y[2 * key_dim + (int64_t)j * dv + m0 + r];
        const float bt = g.b[t * g.b_stride + j], at = g.a[t * g.a_stride + j];
        const float beta = 1.0f / (1.0f + expf(-bt));
        const float sp_in = at + dt_b;
        const float sp = sp_in > 20.0f ? sp_in : log1pf(expf(sp_in));
        const float alpha = expf(ssm_a * sp);
        float *out = g.dst + t * g.dst_stride + (int64_t)j * dv;
#pragma unroll
        for (int r = 0; r < GR_ROWS_W; r++) {
            float rk = 0.0f;
#pragma unroll
            for (int e = 0; e < GR_MAX_EL; e++) {
                s[r][e] *= alpha;
                rk = fmaf(s[r][e], k[e], rk);
            }
            rk = cu_warp_sum(rk);
            const float delta = beta * (vr[r] - rk);
            float o = 0.0f;
#pragma unroll
            for (int e = 0; e < GR_MAX_EL; e++) {
                s[r][e] = fmaf(k[e], delta, s[r][e]);
                o = fmaf(s[r][e], q[e], o);
            }
            o = cu_warp_sum(o);
            if (lane == 0)
                out[m0 + r] = o;   // pre-norm; norm_kernel finishes it
        }
    }
#pragma unroll
    for (int r = 0; r < GR_ROWS_W; r++)
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++)
            if (e < el)
                S[(int64_t)(m0 + r) * dk + lane + 32 * e] = s[r][e];
}

// dst[t][head] = rmsnorm(o) * norm_w * silu(z), in place over the pre-norm
// outputs; one warp per (token, head).  With g.q (dv % 32 == 0, <= 256:
// si_cu_gdn_takes_q) also the int8 copy of those outputs for the out
// projection after the op, per 32 as quant_x_kernel makes it (the same
// cu_q8_block32 over the same values: the same bits), one launch fewer.
__global__ void norm_kernel(cu_gdn g)
{
    cu_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= g.n * g.n_v_head)
        return;
    const int64_t t = w / g.n_v_head;
    const int j = (int)(w % g.n_v_head), dv = g.dv;
    float *o = g.dst + t * g.dst_stride + (int64_t)j * dv;
    const float *z = g.z + t * g.z_stride + (int64_t)j * dv;
    // Up to 256 elements a head (every model here) o, z and the weight are
    // all loaded before the first store: o may alias them as far as the
    // compiler knows, so a load after a store waited for it.
    if (dv <= 32 * GR_MAX_EL) {
        float ov[GR_MAX_EL], zv[GR_MAX_EL], wv[GR_MAX_EL];
        double ss = 0.0;
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++) {
            const int m = lane + 32 * e;
            ov[e] = m < dv ? o[m] : 0.0f;
            zv[e] = m < dv ? z[m] : 0.0f;
            wv[e] = m < dv ? g.norm_w[m] : 0.0f;
        }
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++)
            if (lane + 32 * e < dv)
                ss += (double)ov[e] * (double)ov[e];
        ss = cu_warp_sumd(ss);
        const float sc = (float)(1.0 / sqrt(ss / dv + (double)g.eps));
        const int64_t qi = t * (int64_t)g.n_v_head * dv + (int64_t)j * dv;   // (q's row is n_v_head * dv)
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++)
            if (lane + 32 * e < dv) {
                const float v = __fmul_rn(__fmul_rn(__fmul_rn(ov[e], sc), wv[e]), cu_silu(zv[e]));
                o[lane + 32 * e] = v;
                if (g.q != NULL)   // (dv % 32 == 0: the whole warp is here)
                    cu_q8_block32(v, lane, g.q + qi + 32 * e, g.qd + qi / 32 + e, g.qs + qi / 32 + e);
            }
        return;
    }
    double ss = 0.0;
    for (int m = lane; m < dv; m += 32)
        ss += (double)o[m] * (double)o[m];
    ss = cu_warp_sumd(ss);
    const float sc = (float)(1.0 / sqrt(ss / dv + (double)g.eps));
    for (int m = lane; m < dv; m += 32)
        o[m] = __fmul_rn(__fmul_rn(__fmul_rn(o[m], sc), g.norm_w[m]), cu_silu(z[m]));
}

// dst gets pre-norm values before norm_kernel reads z: they must not share
// memory (the per-head kernel read z and wrote dst element by element).
extern "C" bool si_cu_gdn_rows_ok(const cu_gdn *g)
{
    if (g->dk % 32 != 0 || g->dk / 32 > GR_MAX_EL || g->dv % GR_ROWS != 0 || g->dv <= 0)
        return false;
    const int64_t w = (int64_t)g->n_v_head * g->dv;
    const uintptr_t d0 = (uintptr_t)g->dst, d1 = (uintptr_t)(g->dst + (g->n - 1) * g->dst_stride + w);
    const uintptr_t z0 = (uintptr_t)g->z, z1 = (uintptr_t)(g->z + (g->n - 1) * g->z_stride + w);
    return d1 <= z0 || z1 <= d0;
}

// The delta rule and the norm, after conv_kernel filled g->y.
extern "C" int si_cu_gdn_rows(const cu_gdn *g, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const int64_t blocks = (int64_t)g->n_v_head * (g->dv / GR_ROWS);
    if (blocks > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    cudaError_t e = cu_launch(rows_kernel, dim3((unsigned)blocks, (unsigned)g->n_runs), dim3(32 * GR_WARPS), 0, s, *g);
    if (e != cudaSuccess)
        return (int)e;
    const int64_t warps = g->n * g->n_v_head, nb = (warps + 3) / 4;
    if (nb > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    e = cu_launch(norm_kernel, dim3((unsigned)nb), dim3(128), 0, s, *g);
    if (e != cudaSuccess)
        return (int)e;
    return (int)cudaGetLastError();
}
