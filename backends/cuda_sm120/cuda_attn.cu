// backends/cuda_sm120/cuda_attn.cu — SI_OP_ATTN on the device (spec
// qwen35-gguf.md §3.4, §6.12), launched on the op's stream:
//   1. append_kernel: per (token, kv head) the token's rope table (cos/sin
//                     of every rotated pair in double, static YaRN when
//                     yarn_factor > 0, the cpu formula; kv head 0 stores it
//                     for step 2's q), k = rope(rms(k) * k_norm) and v
//                     written to the cache at (seq, pos) as f16 or f32, or,
//                     for the paged int8 cache, quantised per (token, kv
//                     head): scale = max|x| / 127, x_i = rint(x_i / scale)
//                     (k and v each), into the slot of the page that the
//                     host assigned to the position;
//   2. the attention core, q = rope(rms(q) * q_norm), causal softmax over
//      positions 0..pos of the token's sequence in f32, GQA, scale
//      1/sqrt(hd), output times sigmoid(gate), one of:
//      split (knob attn = split, the default): split_kernel per (token,
//        group of RB query heads sharing one kv head, split of the
//        context), so each K/V row is read once for the RB heads, with
//        16-byte loads; the context is cut into n_split chunks so that the
//        grid fills the GPU even for one decoding token (flash-decoding).
//        Each split keeps an online softmax (max m, sum l, weighted V) and
//        either writes the output itself (n_split = 1) or its partial
//        (m, l, acc) to a workspace that combine_kernel merges
//        (out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s);
//        over the paged int8 cache the same scheme runs split_i8_kernel
//        (cuda_attn_i8.cu), always (attn = simple there means n_split = 1);
//        with knob attn_gqa = shared the dense cache runs split_gqa_kernel
//        (cuda_attn_gqa.cu) instead: the same plan and partials, the K/V
//        tiles staged in shared memory by cp.async (more bytes in flight);
//        and with knob attn_mma too, over the f16 cache, split_mma_kernel
//        (cuda_attn_mma.cu): both products on the f16 tensor cores;
//      simple (attn = simple, or head_dim not in 16..256 a power of two):
//        attend_kernel per (token, head), one serial online softmax over
//        the whole context in chunks of 128;
//      fa (knob attn_prefill = fa, the f16 dense cache, ops of many
//        tokens per sequence: a->fa, si_cu_fa_plan): flash attention on
//        the f16 tensor cores (cuda_attn_fa.cu), its splits (if any)
//        merged by combine_kernel.
//   All are exact attention over every cached position; split and simple
//   differ from each other (and from the cpu) only in f32 summation order
//   (and, for int8, in the rounding of the stored K/V); fa also rounds q
//   and the softmax weights to f16 for the tensor cores.
// The host has already checked that every position is the next free one of
// its sequence and < n_ctx, and (int8) that its page is in the page table,
// so (1) never writes outside the cache and (2) reads only filled rows
// (positions of earlier tokens of the same batch are appended by (1)
// before (2) runs).
// Dense cache layout of one layer: [seq][ctx][kv_head][head_dim].
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_attn.cuh"
#include "cuda_launch.cuh"

#define ATTN_THREADS 128
#define ATTN_CHUNK   128   /* positions scored per online-softmax step */

// The rope table of token t (cos, sin of every rotated pair, in double,
// the cpu formula) into cs[0..n_rot), the block's threads in turn.
__device__ void rope_table(const cu_attn &a, int64_t t, float *cs)
{
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
        cs[2 * i] = (float)(cos(theta) * mscale);
        cs[2 * i + 1] = (float)(sin(theta) * mscale);
    }
}

__device__ __forceinline__ uint64_t kv_row(const cu_attn &a, int32_t seq, int32_t pos, int g)
{
    return (((uint64_t)seq * a.n_ctx + (uint64_t)pos) * a.n_head_kv + (uint64_t)g) * a.head_dim;
}

// max(a, b) that keeps a NaN (fmaxf drops it): a NaN in a K/V row must
// reach the output as it does through the f16/f32 caches.
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

// Stores x[0..hd) (shared, read by every thread) as int8 at q with the
// scale max|x| / 127 at *scale; an all-zero row gets scale 0 (rint(0 *
// 0) = 0).  `redf` is __shared__ float[33].  Contains __syncthreads().
__device__ void quant_row(const float *x, int hd, int8_t *q, float *scale, float *redf)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float m = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        m = nan_max(m, fabsf(x[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
    __syncthreads();   // redf may still be read from a previous call
    if (lane == 0)
        redf[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = 0.0f;
        for (int w = 0; w < nw; w++)
            r = nan_max(r, redf[w]);
        redf[32] = r;
        *scale = r / 127.0f;
    }
    __syncthreads();
    const float amax = redf[32];
    const float inv = amax > 0.0f ? 127.0f / amax : (amax == 0.0f ? 0.0f : amax);   // NaN stays NaN
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        const float r = rintf(x[i] * inv);   // |r| <= 127 up to rounding of inv: clamp
        q[i] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
    }
}

__global__ void __launch_bounds__(ATTN_THREADS) append_kernel(cu_attn a)
{
    extern __shared__ float sm[];
    __shared__ float redf[33];
    const int64_t t = blockIdx.x;
    const int g = blockIdx.y, hd = a.head_dim;
    float *x = sm, *cs = sm + hd;   // k's row, then the token's rope table
    // The table (f64 trigonometry: a long chain) before the programmatic-
    // launch wait, while the product before this kernel drains: it reads
    // only the positions, which a copy wrote before that product started
    // (the exec's first, or the one just before this launch).
    rope_table(a, t, cs);
    cu_pdl_enter();
    const float *k = a.k + t * a.k_stride + (uint64_t)g * hd;
    const float *v = a.v + t * a.v_stride + (uint64_t)g * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        x[i] = k[i];
    __syncthreads();
    // (kv head 0's block also stores the table for the attention core's q,
    // which runs after this kernel: one launch fewer than a table kernel)
    for (int i = threadIdx.x; g == 0 && i < a.n_rot; i += blockDim.x)
        a.rope[t * a.n_rot + i] = cs[i];
    norm_rope_rows(x, 1, a.k_norm, a, cs);
    if (a.i8) {
        const uint64_t row = kv_page_row(a, a.seq[t], a.pos[t], g);
        quant_row(x, hd, (int8_t *)a.kc + row * hd, a.ks + row, redf);
        __syncthreads();   // every thread is done with k in x
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            x[i] = v[i];
        __syncthreads();
        quant_row(x, hd, (int8_t *)a.vc + row * hd, a.vs + row, redf);
        return;
    }
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
    norm_rope_rows(q, 1, a.q_norm, a, a.rope + t * a.n_rot);

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

/* ---- split-K attention (flash-decoding) -------------------------------- */

// combine_kernel: a thread an output element at head_dim 256 (128 made two
// chains of a split's loads a thread)
#define COMB_THREADS  256
// Splits whose partial sums combine_kernel loads before folding them (in
// order): a split's value is an L2 round trip; one at a time they were
// the kernel's time at 64 splits (ctx 4096)
#define COMB_BATCH    16

// x[0..8) <- the 8 cache elements at base[i..i+8): one 16-byte load of f16,
// two of f32 (i is a multiple of 8 and the row 16-byte aligned).
template <bool F16> __device__ __forceinline__ void load8(const void *base, uint64_t i, float *x)
{
    if (F16) {
        const uint4 r = __ldg((const uint4 *)((const __half *)base + i));
        const __half2 *h = (const __half2 *)&r;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 f = __half22float2(h[j]);
            x[2 * j] = f.x;
            x[2 * j + 1] = f.y;
        }
    } else {
        const float4 a = __ldg((const float4 *)((const float *)base + i));
        const float4 b = __ldg((const float4 *)((const float *)base + i) + 1);
        x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
        x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
    }
}

// Block (token t, heads h0..h0+RB of one kv head g, split s): positions
// [s*chunk, min((s+1)*chunk, pos+1)).  Lane layout: a K/V row of hd
// elements is read by lpr = hd/8 lanes (8 elements, 16 bytes of f16,
// each), so a warp covers ppw = 32/lpr rows at once; row i of a tile goes
// to warp (i / ppw) % SPLIT_WARPS, sub-row i % ppw.  Every lane keeps q and
// the weighted-V sums of its 8 columns for all RB heads in registers; the
// sub-rows and warps are folded at the end, in a fixed order.
template <bool F16, int RB>
__global__ void __launch_bounds__(SPLIT_THREADS) split_kernel(cu_attn a, int32_t chunk, int n_split)
{
    extern __shared__ float sm[];   // q, later the folded sums: [RB][hd]; p: [RB][SPLIT_TILE]
    __shared__ float m_s[RB], l_s[RB], f_s[RB];
    const int U = RB >= 8 ? 2 : 4;  // rows loaded ahead per lane (bytes in flight vs registers)
    const int hd = a.head_dim;
    split_blk sb;
    if (!split_where<RB>(a, chunk, sb))
        return;
    const int64_t t = sb.t, c0 = sb.c0, c1 = sb.c1;
    const int h0 = sb.h0, s = sb.s, g = sb.g;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lpr = hd >> 3, ppw = 32 / lpr;
    const int sub = lane / lpr, cl = lane % lpr;
    const int iters = SPLIT_TILE / (SPLIT_WARPS * ppw);
    float *qs = sm, *ps = sm + RB * hd;

    float q[RB][8], acc[RB][8];
    const float *qg = split_begin<RB>(a, t, h0, hd, cl, qs, m_s, l_s, q, acc);

    const float scale = 1.0f / sqrtf((float)hd);
    const uint64_t step = (uint64_t)a.n_head_kv * hd;
    const uint64_t base = kv_row(a, a.seq[t], 0, g) + (uint64_t)cl * 8;
    for (int64_t p0 = c0; p0 < c1; p0 += SPLIT_TILE) {
        const int cnt = c1 - p0 < SPLIT_TILE ? (int)(c1 - p0) : SPLIT_TILE;
        // scores of the tile: ps[r][i] = q_r . k_i * scale
        for (int it0 = 0; it0 < iters; it0 += U) {
            float kx[U][8];
            int ii[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                ii[u] = ((it0 + u) * SPLIT_WARPS + warp) * ppw + sub;   // >= SPLIT_TILE past iters
                if (ii[u] < cnt)
                    load8<F16>(a.kc, base + (uint64_t)(p0 + ii[u]) * step, kx[u]);
                else
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        kx[u][j] = 0.0f;
            }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < RB; r++) {
                    float d = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        d = fmaf(q[r][j], kx[u][j], d);
                    for (int o = lpr >> 1; o > 0; o >>= 1)
                        d += __shfl_xor_sync(0xffffffffu, d, o);
                    if (cl == 0 && ii[u] < cnt)
                        ps[r * SPLIT_TILE + ii[u]] = d * scale;
                }
        }
        __syncthreads();
        // online softmax, one warp per head: p = e^(score - m_new); rows
        // past cnt get p = 0 so the V pass needs no guard on p
        split_softmax_tile<RB, false>(ps, cnt, warp, lane, m_s, l_s, f_s, NULL);
        __syncthreads();
        // acc = acc * f + sum_i p_i v_i
#pragma unroll
        for (int r = 0; r < RB; r++) {
            const float f = f_s[r];
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[r][j] *= f;
        }
        for (int it0 = 0; it0 < iters; it0 += U) {
            float vx[U][8];
            int ii[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                ii[u] = ((it0 + u) * SPLIT_WARPS + warp) * ppw + sub;
                if (ii[u] < cnt)
                    load8<F16>(a.vc, base + (uint64_t)(p0 + ii[u]) * step, vx[u]);
                else
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        vx[u][j] = 0.0f;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (ii[u] >= cnt)
                    continue;
#pragma unroll
                for (int r = 0; r < RB; r++) {
                    const float p = ps[r * SPLIT_TILE + ii[u]];
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        acc[r][j] = fmaf(p, vx[u][j], acc[r][j]);
                }
            }
        }
        __syncthreads();   // ps and f_s are rewritten by the next tile
    }

    split_finish<RB>(a, acc, lpr, warp, sub, cl, qs, hd, m_s, l_s, qg, t, h0, n_split, s);
}

// Block (token t, head h): merges the splits 0..pos/chunk of the head.
__global__ void __launch_bounds__(COMB_THREADS) combine_kernel(cu_attn a, int32_t chunk, int n_split)
{
    cu_pdl_enter();
    __shared__ float w_s[SPLIT_MAX];
    __shared__ float inv_s;
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, hd = a.head_dim;
    const int lane = threadIdx.x & 31;
    // <= n_split: pos < max_len <= chunk * n_split (split_chunk: pos < chunk * n_split)
    const int ns = (int)(a.pos[t] / split_chunk(a, t, chunk, n_split)) + 1;
    const uint64_t pb = ((uint64_t)t * a.n_head + h) * n_split;
    const float *pacc = a.part + pb * hd;
    const float *pml = a.part + (uint64_t)a.n * a.n_head * n_split * hd + 2 * pb;
    if (threadIdx.x < 32) {
        float mx = -INFINITY;
        for (int s = lane; s < ns; s += 32)
            mx = fmaxf(mx, pml[2 * s]);
        mx = warp_max(mx);
        float l = 0.0f;
        for (int s = lane; s < ns; s += 32) {
            const float m = pml[2 * s];
            const float w = m == -INFINITY ? 0.0f : expf(m - mx);
            w_s[s] = w;
            l = fmaf(w, pml[2 * s + 1], l);
        }
        l = cu_warp_sum(l);
        if (lane == 0)
            inv_s = 1.0f / l;
    }
    __syncthreads();
    const float inv = inv_s;
    const float *gate = a.qg + t * a.qg_stride + (uint64_t)h * 2 * hd + hd;
    float *out = a.dst + t * a.dst_stride + (uint64_t)h * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.0f;
        int s = 0;
        for (; s + COMB_BATCH <= ns; s += COMB_BATCH) {
            float v[COMB_BATCH];
#pragma unroll
            for (int k = 0; k < COMB_BATCH; k++)
                v[k] = pacc[(uint64_t)(s + k) * hd + e];
#pragma unroll
            for (int k = 0; k < COMB_BATCH; k++)   // (the splits in order: the same sums)
                acc = fmaf(w_s[s + k], v[k], acc);
        }
        for (; s < ns; s++)
            acc = fmaf(w_s[s], pacc[(uint64_t)s * hd + e], acc);
        const float o = acc * inv / (1.0f + expf(-gate[e]));
        out[e] = o;
        if (a.q8 != NULL) {   // (knob fuse_attn_q: a warp's 32 elements are one block of the copy)
            const uint64_t i = ((uint64_t)t * a.n_head + h) * hd + e;
            cu_q8_block32(o, lane, a.q8 + (i - lane), a.q8d + i / 32, a.q8s + i / 32);
        }
    }
}

typedef struct split_plan {
    int     rb;        /* query heads per block (divides n_head / n_head_kv) */
    int     n_split;   /* chunks of the longest context                      */
    int32_t chunk;     /* positions per chunk, a multiple of SPLIT_TILE; 0:
                        * each token's own (split_chunk, knob
                        * attn_split_len = context)                        */
} split_plan;

// Whether knob attn_ring's kernel is the split core (cuda_attn_ring.cu):
// over the paged int8 cache, or the f16 dense one with attn_gqa = shared
// and attn_mma (the core it replaces).
static bool ring_runs(const cu_attn *a, int rb)
{
    return (a->i8 || (a->gqa_shared && a->dec_mma)) && cu_split_ring_ok(a, rb);
}

// Whether the split path runs this op, and its shape: enough splits that
// about attn_split_blocks (a->split_bps, 4 when unset) blocks per
// multiprocessor exist, none shorter than one tile.  The ring kernel
// (knob attn_ring) plans as many blocks as the SMs hold at once instead:
// its warps keep their own loads in flight, so a second wave would only
// add a block's start-up and merge.
// The paged int8 cache has no other kernel: with attn = simple it runs
// unsplit (one block per token and head group over the whole context).
static bool plan_split(const cu_attn *a, split_plan *pl)
{
    const int hd = a->head_dim, R = a->n_head / a->n_head_kv;
    if ((!a->split && !a->i8) || a->max_len <= 0)
        return false;
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128 && hd != 256)
        return false;
    if ((((uintptr_t)a->kc) | ((uintptr_t)a->vc)) % 16 != 0)
        return false;
    pl->rb = R % 8 == 0 ? 8 : R % 4 == 0 ? 4 : R % 2 == 0 ? 2 : 1;
    const int64_t blocks = a->n * (a->n_head / pl->rb);
    const int bps = ring_runs(a, pl->rb) ? cu_split_ring_bps(a, pl->rb) : a->split_bps > 0 ? a->split_bps : 4;
    const int64_t target = (int64_t)bps * (a->n_sm > 0 ? a->n_sm : 128);
    // (knob attn_split_len = context: at most target blocks, one wave of
    // equal splits; rounding up made a second wave of full-length splits:
    // the 9b at bs 8, 32k, 5 splits x 32 = 160 blocks for 132 SMs ran
    // 8% slower than the bucket's plan, whose last split was short)
    int64_t ns = blocks >= target || !a->split ? 1 : a->split_ctx ? target / blocks : (target + blocks - 1) / blocks;
    const int64_t most = ((int64_t)a->max_len + SPLIT_TILE - 1) / SPLIT_TILE;
    ns = ns < most ? ns : most;
    ns = ns < SPLIT_MAX ? ns : SPLIT_MAX;
    if (a->split_ctx) {   // knob attn_split_len = context: the kernels cut each token's own context (split_chunk)
        pl->chunk = 0;
        pl->n_split = (int)ns;
        return true;
    }
    int64_t ch = ((int64_t)a->max_len + ns - 1) / ns;
    ch = (ch + SPLIT_TILE - 1) / SPLIT_TILE * SPLIT_TILE;
    pl->chunk = (int32_t)ch;
    pl->n_split = (int)(((int64_t)a->max_len + ch - 1) / ch);
    return true;
}

extern "C" size_t si_cu_attn_part_bytes(const cu_attn *a)
{
    split_plan pl;
    cu_fa_plan fp;
    if (a->n > 0 && si_cu_fa_plan(a, &fp))
        return fp.n_split == 1 ? 0 : (size_t)a->n * a->n_head * fp.n_split * ((size_t)a->head_dim + 2) * sizeof(float);
    if (a->n <= 0 || !plan_split(a, &pl) || pl.n_split == 1)
        return 0;
    return (size_t)a->n * a->n_head * pl.n_split * ((size_t)a->head_dim + 2) * sizeof(float);
}

template <bool F16>
static void launch_split(const cu_attn *a, const split_plan *pl, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n, (unsigned)(a->n_head / pl->rb), (unsigned)pl->n_split);
    const size_t smem = ((size_t)pl->rb * a->head_dim + (size_t)pl->rb * SPLIT_TILE) * sizeof(float);
    switch (pl->rb) {
    case 8: split_kernel<F16, 8><<<grid, SPLIT_THREADS, smem, s>>>(*a, pl->chunk, pl->n_split); break;
    case 4: split_kernel<F16, 4><<<grid, SPLIT_THREADS, smem, s>>>(*a, pl->chunk, pl->n_split); break;
    case 2: split_kernel<F16, 2><<<grid, SPLIT_THREADS, smem, s>>>(*a, pl->chunk, pl->n_split); break;
    default: split_kernel<F16, 1><<<grid, SPLIT_THREADS, smem, s>>>(*a, pl->chunk, pl->n_split); break;
    }
}

// q of (token, head) normed and roped into q [n][n_head][hd], the cores'
// own norm_rope, for a kernel plugin's attention (si_cu_attn_front).
__global__ void __launch_bounds__(ATTN_THREADS) qprep_kernel(cu_attn a, float *q)
{
    extern __shared__ float sm[];
    const int64_t t = blockIdx.x;
    const int h = blockIdx.y, hd = a.head_dim;
    const float *src = a.qg + t * a.qg_stride + (uint64_t)h * 2 * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        sm[i] = src[i];
    __syncthreads();
    norm_rope_rows(sm, 1, a.q_norm, a, a.rope + t * a.n_rot);
    float *out = q + ((uint64_t)t * a.n_head + h) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        out[i] = sm[i];
}

extern "C" int si_cu_attn_front(const cu_attn *a, float *q, void *stream)
{
    if (a->n <= 0)
        return 0;
    if (a->n > 0x7fffffffLL || a->n_head > 65535 || a->n_head_kv > 65535 || q == NULL ||
        (a->i8 && (a->pages == NULL || a->ks == NULL || a->vs == NULL)))
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned n = (unsigned)a->n;
    const size_t sm_row = (size_t)a->head_dim * sizeof(float);
    append_kernel<<<dim3(n, (unsigned)a->n_head_kv), ATTN_THREADS, sm_row + (size_t)a->n_rot * sizeof(float), s>>>(*a);
    qprep_kernel<<<dim3(n, (unsigned)a->n_head), ATTN_THREADS, sm_row, s>>>(*a, q);
    return (int)cudaGetLastError();
}

extern "C" bool si_cu_attn_takes_q(const cu_attn *a)
{
    if (a->n <= 0 || a->head_dim % 32 != 0 || a->n > 0x7fffffffLL || a->n_head > 65535 || a->n_head_kv > 65535)
        return false;
    cu_fa_plan fp;
    if (si_cu_fa_plan(a, &fp))
        return fp.n_split > 1;
    split_plan pl;
    return plan_split(a, &pl) && pl.n_split > 1;
}

extern "C" int si_cu_attn(const cu_attn *a, void *stream)
{
    if (a->n <= 0)
        return 0;
    if (a->n > 0x7fffffffLL || a->n_head > 65535 || a->n_head_kv > 65535)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned n = (unsigned)a->n;
    size_t sm_app = ((size_t)a->head_dim + (size_t)a->n_rot) * sizeof(float);
    size_t sm_att = (2 * (size_t)a->head_dim + ATTN_CHUNK) * sizeof(float);
    if (sm_att > 48 * 1024)
        return (int)cudaErrorInvalidValue;   // head_dim > ~6000: refused by the checker first
    cu_fa_plan fp;
    if (si_cu_fa_plan(a, &fp)) {
        if (fp.n_split > 1 && a->part == NULL)
            return (int)cudaErrorInvalidValue;   // si_cu_attn_part_bytes() said it needs a workspace
        append_kernel<<<dim3(n, (unsigned)a->n_head_kv), ATTN_THREADS, sm_app, s>>>(*a);
        int rc = si_cu_fa(a, &fp, s);
        if (rc != 0)
            return rc;
        if (fp.n_split > 1)
            combine_kernel<<<dim3(n, (unsigned)a->n_head), COMB_THREADS, 0, s>>>(*a, fp.chunk, fp.n_split);
        return (int)cudaGetLastError();
    }
    split_plan pl;
    const bool split = plan_split(a, &pl);
    if (a->i8 && (!split || a->pages == NULL || a->ks == NULL || a->vs == NULL))
        return (int)cudaErrorInvalidValue;   // head_dim outside 16..256: refused by kv_create first
    if (split && pl.n_split > 1 && a->part == NULL)
        return (int)cudaErrorInvalidValue;   // si_cu_attn_part_bytes() said it needs a workspace
    // (decode's path: its launches through cu_launch, knob pdl; a failed
    // launch shows in cudaGetLastError below)
    cu_launch(append_kernel, dim3(n, (unsigned)a->n_head_kv), dim3(ATTN_THREADS), sm_app, s, *a);
    if (!split) {
        attend_kernel<<<dim3(n, (unsigned)a->n_head), ATTN_THREADS, sm_att, s>>>(*a);
    } else {
        if (ring_runs(a, pl.rb))
            cu_launch_split_ring(a, pl.rb, pl.chunk, pl.n_split, s);
        else if (a->i8)
            cu_launch_split_i8(a, pl.rb, pl.chunk, pl.n_split,
                               ((size_t)pl.rb * a->head_dim + (size_t)pl.rb * SPLIT_TILE) * sizeof(float), s);
        else if (a->gqa_shared && a->dec_mma && cu_split_mma_ok(a, pl.rb))
            cu_launch_split_mma(a, pl.rb, pl.chunk, pl.n_split, s);
        else if (a->gqa_shared)
            cu_launch_split_gqa(a, pl.rb, pl.chunk, pl.n_split, s);
        else if (a->f16)
            launch_split<true>(a, &pl, s);
        else
            launch_split<false>(a, &pl, s);
        if (pl.n_split > 1)
            cu_launch(combine_kernel, dim3(n, (unsigned)a->n_head), dim3(COMB_THREADS), 0, s, *a, pl.chunk, pl.n_split);
    }
    return (int)cudaGetLastError();
}
