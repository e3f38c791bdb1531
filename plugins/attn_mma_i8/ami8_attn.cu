// plugins/attn_mma_i8/ami8_attn.cu — prefill attention on int8 tensor
// cores straight from cuda_sm120's paged int8 KV cache (the front half —
// norms, RoPE, K/V append — is the backend's, through attn_prepare).
//
// One block of 4 warps per (tile of 16 consecutive tokens, query head):
//   - the tile's q rows (f32, normed+roped) are quantised per (token, head)
//     like the cache rows: scale = max|q| / 127, q_i = rint(q_i / scale);
//     they are the A operand of mma.sync.m16n8k32 s8 (16 rows = the M),
//     loaded into registers once;
//   - the context is walked in chunks of 64 positions = 4 pages, one page
//     (16 K rows, contiguous 16*hd bytes) per warp: S = Q.K^T on two n8
//     tiles, K read from the pool as the .col B operand directly (4 bytes
//     of one K row = 4 consecutive k of one column), times q_scale *
//     k_scale / sqrt(hd) in f32; causal mask (position <= the token's own,
//     same sequence);
//   - online softmax in f32 per row (max m, sum l), the V scale folded into
//     the weights (p * v_scale) after l took p, as cuda_sm120's own i8 core;
//   - P.V in f32 FMAs from the chunk's V rows staged in shared memory as
//     int8 (each thread owns hd/8 columns of one row): the weights are not
//     rounded again (the simplest correct form; an int8 P.V mma would need
//     V transposed in shared memory and P requantised per row);
//   - out = acc / l * sigmoid(gate), written as the backend writes it.
// A tile whose 16 tokens belong to several sequences walks each sequence's
// context in turn (rows of the other sequences masked), so no host-side
// tile list is needed; tokens of one sequence are normally consecutive and
// only tiles at a sequence boundary pay twice.  Pages past a sequence's
// last position are never looked up; rows past it inside the last page
// are read (they are in the pool) but masked, and their weights are 0 by
// selection, never by multiplication, so stale NaN scales cannot leak.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "ami8.h"

#define AMI8_THREADS 128
#define AMI8_WARPS   4
#define AMI8_ROWS    16   /* tokens per block: the mma's M            */
#define AMI8_CHUNK   64   /* positions per online-softmax step: 4 pages */
#define AMI8_PS      (AMI8_CHUNK + 1)   /* p_s row stride: rows in different banks */

static __device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ float ami8_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float ami8_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int HD>
__global__ void __launch_bounds__(AMI8_THREADS) ami8_kernel(ami8_args a)
{
    constexpr int QS = HD + 16;   // int8 q row stride: rows gid, gid+1 land 4 banks apart
    constexpr int KS = HD / 32;   // mma k-steps over head_dim
    constexpr int NW = HD / 32;   // 4-column words per thread in P.V
    __align__(16) __shared__ int8_t q_s[AMI8_ROWS * QS];
    __align__(16) __shared__ int8_t v_s[AMI8_CHUNK * HD];
    __shared__ float p_s[AMI8_ROWS * AMI8_PS];
    __shared__ float qsc_s[AMI8_ROWS], m_s[AMI8_ROWS], l_s[AMI8_ROWS], f_s[AMI8_ROWS];
    __shared__ int32_t rpos_s[AMI8_ROWS], rseq_s[AMI8_ROWS], dseq_s[AMI8_ROWS], dlen_s[AMI8_ROWS];
    __shared__ int nd_s;
    __shared__ int64_t row_s[AMI8_CHUNK];   // pool row of each position of the chunk, -1 past the context
    __shared__ float sk_s[AMI8_CHUNK], sv_s[AMI8_CHUNK];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int64_t t0 = (int64_t)blockIdx.x * AMI8_ROWS;
    const int h = blockIdx.y, g = h / (a.n_head / a.n_head_kv);
    const float inv_sqrt = 1.0f / sqrtf((float)HD);

    // 1. the tile's rows (padding rows past n: seq -1, never attend) and q
    //    to int8, one warp per row
    if (threadIdx.x < AMI8_ROWS) {
        const int64_t t = t0 + threadIdx.x;
        rpos_s[threadIdx.x] = t < a.n ? a.pos[t] : -1;
        rseq_s[threadIdx.x] = t < a.n ? a.seq[t] : -1;
        m_s[threadIdx.x] = -INFINITY;
        l_s[threadIdx.x] = 0.0f;
    }
    for (int r = warp; r < AMI8_ROWS; r += AMI8_WARPS) {
        const int64_t t = t0 + r;
        const float *qr = a.q + ((uint64_t)(t < a.n ? t : 0) * a.n_head + h) * HD;
        float x[HD / 32], m = 0.0f;
#pragma unroll
        for (int j = 0; j < HD / 32; j++) {
            x[j] = t < a.n ? qr[lane + 32 * j] : 0.0f;
            m = fmaxf(m, fabsf(x[j]));
        }
        m = ami8_warp_max(m);
        const float inv = m > 0.0f ? 127.0f / m : 0.0f;
#pragma unroll
        for (int j = 0; j < HD / 32; j++) {
            const float v = rintf(x[j] * inv);   // |v| <= 127 up to the rounding of inv
            q_s[r * QS + lane + 32 * j] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
        if (lane == 0)
            qsc_s[r] = m / 127.0f * inv_sqrt;
    }
    __syncthreads();
    // the tile's sequences and, per sequence, its context (max pos + 1)
    if (threadIdx.x == 0) {
        int nd = 0;
        for (int r = 0; r < AMI8_ROWS; r++) {
            const int32_t s = rseq_s[r];
            if (s < 0)
                continue;
            int d = 0;
            while (d < nd && dseq_s[d] != s)
                d++;
            if (d == nd) {
                dseq_s[nd] = s;
                dlen_s[nd++] = 0;
            }
            if (rpos_s[r] + 1 > dlen_s[d])
                dlen_s[d] = rpos_s[r] + 1;
        }
        nd_s = nd;
    }
    // A fragments (PTX ISA m16n8k32 .s8): a0 row gid, k 4tig..+3; a1 row
    // gid+8; a2/a3 the same rows at k + 16
    uint32_t af[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        const int8_t *q0 = q_s + ks * 32 + 4 * tig;
        af[ks][0] = *(const uint32_t *)(q0 + gid * QS);
        af[ks][1] = *(const uint32_t *)(q0 + (gid + 8) * QS);
        af[ks][2] = *(const uint32_t *)(q0 + gid * QS + 16);
        af[ks][3] = *(const uint32_t *)(q0 + (gid + 8) * QS + 16);
    }
    __syncthreads();

    // P.V ownership: row pr, columns 32*w + 4*cg + (0..3) for w < NW (the 8
    // column groups of a warp read 8 consecutive banks of a V row)
    const int pr = threadIdx.x >> 3, cg = threadIdx.x & 7;
    float acc[NW][4];
#pragma unroll
    for (int w = 0; w < NW; w++)
#pragma unroll
        for (int b = 0; b < 4; b++)
            acc[w][b] = 0.0f;

    const int nd = nd_s;
    for (int d = 0; d < nd; d++) {
        const int32_t seq = dseq_s[d], len = dlen_s[d];
        const int32_t *prow = a.pages + (uint64_t)seq * a.max_pages;
        for (int32_t c0 = 0; c0 < len; c0 += AMI8_CHUNK) {
            // (a) pool rows and scales of the chunk's positions
            if (threadIdx.x < AMI8_CHUNK) {
                const int32_t p = c0 + (int32_t)threadIdx.x;
                int64_t row = -1;
                float sk = 0.0f, sv = 0.0f;
                if (p < len) {
                    const int64_t pg = __ldg(prow + p / AMI8_PAGE);
                    row = (pg * a.n_head_kv + g) * AMI8_PAGE + p % AMI8_PAGE;
                    sk = __ldg(a.ks + row);
                    sv = __ldg(a.vs + row);
                }
                row_s[threadIdx.x] = row;
                sk_s[threadIdx.x] = sk;
                sv_s[threadIdx.x] = sv;
            }
            __syncthreads();
            // (b) scores, one page per warp: n8 tile nt covers keys nt*8..+7;
            //     B element (k, n) = K[key n][k]: b0 = K row gid, bytes 4tig..+3
            if (c0 + 16 * warp < len) {
                const int8_t *kp = a.k + row_s[16 * warp] * HD + 4 * tig;
                int c[2][4] = { { 0, 0, 0, 0 }, { 0, 0, 0, 0 } };
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const int8_t *kr = kp + (nt * 8 + gid) * HD;
#pragma unroll
                    for (int ks = 0; ks < KS; ks++) {
                        const uint32_t b0 = __ldg((const uint32_t *)(kr + ks * 32));
                        const uint32_t b1 = __ldg((const uint32_t *)(kr + ks * 32 + 16));
                        mma_s8(c[nt], af[ks], b0, b1);
                    }
                }
                // D: c0,c1 row gid, keys 2tig, 2tig+1; c2,c3 row gid+8
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int r = gid + (i >= 2 ? 8 : 0), col = 16 * warp + nt * 8 + 2 * tig + (i & 1);
                        const int32_t p = c0 + col;
                        const bool ok = p < len && rseq_s[r] == seq && p <= rpos_s[r];
                        p_s[r * AMI8_PS + col] = ok ? (float)c[nt][i] * qsc_s[r] * sk_s[col] : -INFINITY;
                    }
            } else {
                for (int i = lane; i < AMI8_ROWS * 16; i += 32)
                    p_s[(i >> 4) * AMI8_PS + 16 * warp + (i & 15)] = -INFINITY;
            }
            // (c) V rows of the chunk into shared memory (zeros past the context)
            for (int e = threadIdx.x; e < AMI8_CHUNK * HD / 16; e += AMI8_THREADS) {
                const int i = e / (HD / 16), c16 = e % (HD / 16);
                const int64_t row = row_s[i];
                uint4 v = make_uint4(0u, 0u, 0u, 0u);
                if (row >= 0)
                    v = __ldg((const uint4 *)(a.v + row * HD) + c16);
                ((uint4 *)v_s)[e] = v;
            }
            __syncthreads();
            // (d) online softmax, one warp per row, 2 positions per lane;
            //     masked entries get weight 0 by selection
            for (int r = warp; r < AMI8_ROWS; r += AMI8_WARPS) {
                float *prr = p_s + r * AMI8_PS;
                const float v0 = prr[lane], v1 = prr[lane + 32];
                const float mo = m_s[r], mn = fmaxf(mo, ami8_warp_max(fmaxf(v0, v1)));
                // mo = -inf: nothing accumulated yet (acc, l are 0)
                const float f = mo == -INFINITY ? 0.0f : expf(mo - mn);
                const float e0 = v0 == -INFINITY ? 0.0f : expf(v0 - mn);
                const float e1 = v1 == -INFINITY ? 0.0f : expf(v1 - mn);
                prr[lane] = e0 == 0.0f ? 0.0f : e0 * sv_s[lane];
                prr[lane + 32] = e1 == 0.0f ? 0.0f : e1 * sv_s[lane + 32];
                const float sum = ami8_warp_sum(e0 + e1);
                if (lane == 0) {
                    m_s[r] = mn;
                    l_s[r] = l_s[r] * f + sum;
                    f_s[r] = f;
                }
            }
            __syncthreads();
            // (e) acc = acc * f + sum_i (p_i v_scale_i) v_int_i
            {
                const float f = f_s[pr];
#pragma unroll
                for (int w = 0; w < NW; w++)
#pragma unroll
                    for (int b = 0; b < 4; b++)
                        acc[w][b] *= f;
                const float *pp = p_s + pr * AMI8_PS;
                for (int i = 0; i < AMI8_CHUNK; i++) {
                    const float p = pp[i];
                    const uint32_t *vr = (const uint32_t *)(v_s + i * HD) + cg;
#pragma unroll
                    for (int w = 0; w < NW; w++) {
                        const uint32_t vw = vr[8 * w];
#pragma unroll
                        for (int b = 0; b < 4; b++)
                            acc[w][b] = fmaf(p, (float)(int8_t)(vw >> (8 * b)), acc[w][b]);
                    }
                }
            }
            __syncthreads();   // p_s, v_s, row_s and the scales are rewritten by the next chunk
        }
    }

    const int64_t t = t0 + pr;
    if (t >= a.n)
        return;
    const float inv = 1.0f / l_s[pr];
    const float *gate = a.qg + (uint64_t)t * a.qg_stride + (uint64_t)(2 * h + 1) * HD;
    float *out = a.dst + (uint64_t)t * a.dst_stride + (uint64_t)h * HD;
#pragma unroll
    for (int w = 0; w < NW; w++)
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int col = 32 * w + 4 * cg + b;
            out[col] = acc[w][b] * inv / (1.0f + expf(-gate[col]));
        }
}

extern "C" int ami8_hd_ok(int hd) { return hd == 64 || hd == 128 || hd == 256; }

extern "C" int ami8_attn(const ami8_args *a, void *stream)
{
    if (a->n <= 0)
        return 0;
    if (!ami8_hd_ok(a->hd) || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0 || a->n_head > 65535 ||
        (a->n + AMI8_ROWS - 1) / AMI8_ROWS > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const dim3 grid((unsigned)((a->n + AMI8_ROWS - 1) / AMI8_ROWS), (unsigned)a->n_head);
    switch (a->hd) {
    case 64: ami8_kernel<64><<<grid, AMI8_THREADS, 0, s>>>(*a); break;
    case 128: ami8_kernel<128><<<grid, AMI8_THREADS, 0, s>>>(*a); break;
    default: ami8_kernel<256><<<grid, AMI8_THREADS, 0, s>>>(*a); break;
    }
    return (int)cudaGetLastError();
}
