// backends/cuda_sm120/cuda_attn.cu — SI_OP_ATTN on the device (spec
// qwen35-gguf.md §3.4, §6.12), in three launches on the op's stream:
//   1. rope_kernel:   per token, cos/sin of every rotated pair in double
//                     (static YaRN when yarn_factor > 0), the cpu formula;
//   2. append_kernel: per (token, kv head) k = rope(rms(k) * k_norm) and v
//                     written to the cache at (seq, pos) as f16 or f32;
//   3. attend_kernel: per (token, head) q = rope(rms(q) * q_norm), causal
//                     softmax over positions 0..pos of the token's sequence
//                     with an online (chunked) softmax in f32, GQA, scale
//                     1/sqrt(hd), output times sigmoid(gate).
// The host has already checked that every position is the next free one of
// its sequence and < n_ctx, so (2) never writes outside the cache and (3)
// reads only filled rows (positions of earlier tokens of the same batch are
// appended by (2) before (3) runs).
// Cache layout of one layer: [seq][ctx][kv_head][head_dim].
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_internal.h"
#include "cuda_quant.cuh"

#define ATTN_THREADS 128
#define ATTN_CHUNK   128   /* positions scored per online-softmax step */

__global__ void rope_kernel(cu_attn a)
{
    const int64_t t = blockIdx.x;
    const int half = a.n_rot / 2;
    const double base = a.rope_base, nr = a.n_rot, factor = a.yarn_factor;
    double lo = 0.0, hi = 0.0, mscale = 1.0;
    if (factor > 0.0) {
        const double two_pi = 6.283185307179586;
        double c_fast = nr * log((double)a.yarn_orig_ctx / (two_pi * 32.0)) / (2.0 * log(base));
        double c_slow = nr * log((double)a.yarn_orig_ctx / (two_pi * 1.0)) / (2.0 * log(base));
        lo = floor(c_fast) > 0.0 ? floor(c_fast) : 0.0;
        hi = ceil(c_slow) < nr - 1.0 ? ceil(c_slow) : nr - 1.0;
        mscale = 1.0 + 0.1 * log(factor);
    }
    const int32_t pos = a.pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double theta = (double)pos * pow(base, -2.0 * i / nr);
        if (factor > 0.0) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            double ramp = 1.0 - (y < 0.0 ? 0.0 : y > 1.0 ? 1.0 : y);
            theta = (theta / factor) * (1.0 - ramp) + theta * ramp;
        }
        a.rope[t * a.n_rot + 2 * i] = (float)(cos(theta) * mscale);
        a.rope[t * a.n_rot + 2 * i + 1] = (float)(sin(theta) * mscale);
    }
}

// x (shared, head_dim) <- rope(rms(x) * w) for the block; w NULL = no norm.
__device__ void norm_rope(float *x, const float *w, const cu_attn &a, const float *cs, double *red)
{
    const int hd = a.head_dim;
    if (w != NULL) {
        double ss = 0.0;
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            ss += (double)x[i] * (double)x[i];
        ss = cu_block_sumd(ss, red);
        const float sc = (float)(1.0 / sqrt(ss / hd + (double)a.eps));
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            x[i] = __fmul_rn(__fmul_rn(x[i], sc), w[i]);
        __syncthreads();
    }
    const int half = a.n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float x0 = x[i], x1 = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
        x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        x[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    }
    __syncthreads();
}

__device__ __forceinline__ uint64_t kv_row(const cu_attn &a, int32_t seq, int32_t pos, int g)
{
    return (((uint64_t)seq * a.n_ctx + (uint64_t)pos) * a.n_head_kv + (uint64_t)g) * a.head_dim;
}

__global__ void __launch_bounds__(ATTN_THREADS) append_kernel(cu_attn a)
{
    extern __shared__ float sm[];
    __shared__ double red[33];
    const int64_t t = blockIdx.x;
    const int g = blockIdx.y, hd = a.head_dim;
    float *x = sm;
    const float *k = a.k + t * a.k_stride + (uint64_t)g * hd;
    const float *v = a.v + t * a.v_stride + (uint64_t)g * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        x[i] = k[i];
    __syncthreads();
    norm_rope(x, a.k_norm, a, a.rope + t * a.n_rot, red);
    const uint64_t idx = kv_row(a, a.seq[t], a.pos[t], g);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        if (a.f16) {
            ((__half *)a.kc)[idx + i] = __float2half_rn(x[i]);
            ((__half *)a.vc)[idx + i] = __float2half_rn(v[i]);
        } else {
            ((float *)a.kc)[idx + i] = x[i];
            ((float *)a.vc)[idx + i] = v[i];
        }
    }
}

__device__ __forceinline__ float kv_load(const void *base, uint64_t i, bool f16)
{
    return f16 ? __half2float(((const __half *)base)[i]) : ((const float *)base)[i];
}

__global__ void __launch_bounds__(ATTN_THREADS) attend_kernel(cu_attn a)
{
    extern __shared__ float sm[];
    __shared__ double red[33];
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, hd = a.head_dim;
    const int g = h / (a.n_head / a.n_head_kv);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *q = sm, *acc = sm + hd, *sc = acc + hd;   // [hd], [hd], [ATTN_CHUNK]
    const float *qg = a.qg + t * a.qg_stride + (uint64_t)h * 2 * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        q[i] = qg[i];
        acc[i] = 0.0f;
    }
    __syncthreads();
    norm_rope(q, a.q_norm, a, a.rope + t * a.n_rot, red);

    const float scale = 1.0f / sqrtf((float)hd);
    const int32_t seq = a.seq[t], pos = a.pos[t];
    const uint64_t step = (uint64_t)a.n_head_kv * hd;
    const uint64_t base = kv_row(a, seq, 0, g);
    float m = -INFINITY, l = 0.0f;
    for (int32_t c0 = 0; c0 <= pos; c0 += ATTN_CHUNK) {
        const int cnt = pos + 1 - c0 < ATTN_CHUNK ? pos + 1 - c0 : ATTN_CHUNK;
        for (int i = warp; i < cnt; i += nw) {
            const uint64_t row = base + (uint64_t)(c0 + i) * step;
            float d = 0.0f;
            for (int e = lane; e < hd; e += 32)
                d = fmaf(q[e], kv_load(a.kc, row + e, a.f16), d);
            d = cu_warp_sum(d);
            if (lane == 0)
                sc[i] = d * scale;
        }
        __syncthreads();
        float cm = m;
        for (int i = 0; i < cnt; i++)
            cm = fmaxf(cm, sc[i]);
        const float factor = expf(m - cm);   // 0 on the first chunk (m = -inf)
        __syncthreads();                       // every thread has read sc before it changes
        for (int i = threadIdx.x; i < cnt; i += blockDim.x)
            sc[i] = expf(sc[i] - cm);
        __syncthreads();
        float csum = 0.0f;
        for (int i = 0; i < cnt; i++)
            csum += sc[i];
        l = l * factor + csum;
        for (int e = threadIdx.x; e < hd; e += blockDim.x) {
            float s = acc[e] * factor;
            for (int i = 0; i < cnt; i++)
                s = fmaf(sc[i], kv_load(a.vc, base + (uint64_t)(c0 + i) * step + e, a.f16), s);
            acc[e] = s;
        }
        m = cm;
        __syncthreads();
    }
    const float *gate = qg + hd;
    float *out = a.dst + t * a.dst_stride + (uint64_t)h * hd;
    const float inv = 1.0f / l;
    for (int e = threadIdx.x; e < hd; e += blockDim.x)
        out[e] = acc[e] * inv / (1.0f + expf(-gate[e]));
}

extern "C" int si_cu_attn(const cu_attn *a, void *stream)
{
    if (a->n <= 0)
        return 0;
    if (a->n > 0x7fffffffLL || a->n_head > 65535 || a->n_head_kv > 65535)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned n = (unsigned)a->n;
    size_t sm_app = (size_t)a->head_dim * sizeof(float);
    size_t sm_att = (2 * (size_t)a->head_dim + ATTN_CHUNK) * sizeof(float);
    if (sm_att > 48 * 1024)
        return (int)cudaErrorInvalidValue;   // head_dim > ~6000: refused by the checker first
    if (a->n_rot > 0)
        rope_kernel<<<n, 64, 0, s>>>(*a);
    append_kernel<<<dim3(n, (unsigned)a->n_head_kv), ATTN_THREADS, sm_app, s>>>(*a);
    attend_kernel<<<dim3(n, (unsigned)a->n_head), ATTN_THREADS, sm_att, s>>>(*a);
    return (int)cudaGetLastError();
}
