// plugins/attn_mma_i8/ami8_attn.cu — prefill attention on int8 tensor
// cores straight from cuda_sm120's paged int8 KV cache (the front half —
// norms, RoPE, K/V append — is the backend's, through attn_prepare).
//
// Two kernels, picked by the plugin's knob tile (ami8_args.tile): v1 (the
// default, described here) and v2 (128-token tiles with K/V staged through
// shared memory and P.V on the tensor cores: its comment further down).
//
// v1: one block of 4 warps per (tile of 16 consecutive tokens, query head):
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

// ==== v2 (knob tile = v2): 128 tokens x 1 query head a block ============
// Why: v1 re-reads the whole causal context of its kv head from L2/HBM for
// every 16 rows; at a 32k prompt that traffic is the prefill.  v2 stages
// each chunk of 64 positions (4 pages) of K and V once into shared memory
// for 128 rows (8 warps x 16), so a K/V byte serves 8x the rows, and does
// P.V on the int8 tensor cores too.
//   - grid (head, tile): heads fastest, so the n_head/n_head_kv blocks of
//     one kv head and tile run side by side and share the chunks in L2;
//     the last tile (the longest context) first, so the short ones fill
//     the tail;
//   - K/V chunks by cp.async, two stages: chunk i+1 is in flight while i
//     is computed; the page table and the per-row scales of a chunk are
//     the same cp.async groups (scales 16 per page, contiguous);
//   - S = Q K^T on mma m16n8k32 s8 (q int8 per (token, head) as v1, from
//     shared memory: 32 KiB of registers would not fit next to O at hd
//     256), times q_scale * k_scale * log2(e) / sqrt(hd): the online
//     softmax is in base 2 (exp2f), as cuda_attn_fa.cu's;
//   - P V on mma m16n8k32 u8 x s8: p = exp2(s - m) * v_scale (>= 0, the V
//     scale folded in) quantised to u8 per (row, chunk): scale = max/255,
//     p_u8 = rint(p / scale), so the largest weight of a row's chunk is
//     exact and the rounding of any weight is <= max/510; the int32 sums
//     (exact) are folded into f32 O once per chunk, times the row's scale;
//     l sums the f32 weights (before rounding, without the V scale);
//   - the mma's k index (the chunk's positions) is free to permute as long
//     as A and B agree: A is built from S's accumulator fragments as they
//     lie (lane (g, t) holds positions 8j + 2t, 8j + 2t + 1 of n-tile j),
//     a0 = the positions of n-tiles 4kk, 4kk+1, a2 those of 4kk+2, 4kk+3,
//     so no shuffle; B (V^T: 4 positions of one V column a register) is
//     read as 4 words of 4 rows x 4 columns and transposed in registers
//     by byte permutes (int8 has no ldmatrix.trans); the 4 words give one
//     register for each of 4 n-tiles, so an n-tile's 8 columns are not
//     consecutive: n-tile j of a 32-column block holds columns 4n + j
//     (n = the mma's column 0..7), and O is written back accordingly;
//   - shared memory rows are XOR-swizzled at 16 bytes (no padding: at hd
//     256 the 97 KiB must fit sm_120's 99 KiB): Q and K segment c of row r
//     at c ^ (r & 7) (the 8 rows of an A / B fragment load hit 8 different
//     segments), V at c ^ (2 * ((r >> 1) & 3)) (the rows 2t + {0,1,8,9} of
//     the B gather of lanes t = 0..3 hit 4 different segment pairs);
//     hd >= 128 for that (8 segments a row): hd 64 runs v1;
//   - a tile with rows of several sequences walks each one's context in
//     turn (the list is built in the prologue); a warp whose 16 rows have
//     nothing at or after the chunk (causal, or another sequence) skips
//     its mma work but keeps the barriers;
//   - pages past a sequence's length are not read: their stage slots keep
//     the previous chunk's bytes, masked by selection (S = -inf, p = 0),
//     and an int8 product of a 0 weight is exactly 0, so stale data and
//     the NaN scales past a context never reach O.
#define AMI8_V2_THREADS 256
#define AMI8_V2_WARPS   8
#define AMI8_V2_ROWS    128
#define AMI8_V2_CHUNK   64   /* positions a stage: 4 pages */
#define AMI8_LOG2E      1.4426950408889634f

// ---- PTX wrappers (v2; run-attnmma-emu.sh cuts these and uses ptx_emu.h's)
static __device__ __forceinline__ void cp_async16(void *smem, const void *g)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> static __device__ __forceinline__ void cp_async_wait_group()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// D += A (u8, 16x32) B (s8, 32x8): the P.V product
static __device__ __forceinline__ void mma_k32_u8acc(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// a shared-memory word, volatile: ptxas otherwise hoists the K and V
// loads of every unrolled step ahead and, next to O's 128 registers at hd
// 256, spills
static __device__ __forceinline__ uint32_t lds32(const void *p)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"((uint32_t)__cvta_generic_to_shared(p)) : "memory");
    return v;
}
// ---- end of PTX wrappers

// shared memory layout (bytes): Q [128][HD] | K [2][64][HD] | V [2][64][HD]
// | k scales [2][64] f32 | v scales [2][64] f32
static constexpr size_t ami8_v2_smem(int hd) { return (size_t)hd * (AMI8_V2_ROWS + 4 * AMI8_V2_CHUNK) + 4 * AMI8_V2_CHUNK * 4; }
// byte b of row r (rows of HD bytes): Q and K, and V (see above)
template <int HD> static __device__ __forceinline__ int ami8_sw_qk(int r, int b) { return r * HD + ((((b >> 4) ^ (r & 7)) << 4) | (b & 15)); }
template <int HD> static __device__ __forceinline__ int ami8_sw_v(int r, int b) { return r * HD + ((((b >> 4) ^ (((r >> 1) & 3) << 1)) << 4) | (b & 15)); }

// int32 -> f32 for |x| < 2^22 without I2F (a quarter-rate conversion; the
// folds convert one value per 16x8x32 / 32 MACs): 1.5 * 2^23 + x is an f32
// whose mantissa is x, exact; the FADD takes 1.5 * 2^23 off, exact too.
// The sums here stay below 2^22: S <= 127 * 127 * 256, P.V <= 255 * 127 * 64.
static __device__ __forceinline__ float ami8_i2f(int x) { return __int_as_float(x + 0x4B400000) - 12582912.0f; }
// rint(x) for 0 <= x < 2^22: the FFMA's one rounding to an integer ulp
static __device__ __forceinline__ int ami8_rint(float x, float mul) { return __float_as_int(fmaf(x, mul, 12582912.0f)) - 0x4B400000; }

// 4 words w[i] (row i, bytes = columns 0..3) -> r[j] (column j, byte i = row i)
static __device__ __forceinline__ void ami8_t4x4(const uint32_t w[4], uint32_t r[4])
{
    const uint32_t t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[2], w[3], 0x5140);
    const uint32_t t2 = __byte_perm(w[0], w[1], 0x7362), t3 = __byte_perm(w[2], w[3], 0x7362);
    r[0] = __byte_perm(t0, t1, 0x5410);
    r[1] = __byte_perm(t0, t1, 0x7632);
    r[2] = __byte_perm(t2, t3, 0x5410);
    r[3] = __byte_perm(t2, t3, 0x7632);
}

template <int HD>
__global__ void __launch_bounds__(AMI8_V2_THREADS, 1) ami8_v2_kernel(ami8_args a)
{
    constexpr int KS = HD / 32;   // k-steps of S; also the 32-column blocks of O
    constexpr int QB = 0, KB = AMI8_V2_ROWS * HD, VB = KB + 2 * AMI8_V2_CHUNK * HD, SB = VB + 2 * AMI8_V2_CHUNK * HD;
    extern __shared__ __align__(16) uint8_t ami8_sm[];
    __shared__ int32_t dseq_s[AMI8_V2_ROWS], dlen_s[AMI8_V2_ROWS];
    __shared__ int nd_s;
    int8_t *const q_s = (int8_t *)ami8_sm + QB;
    float *const sc_s = (float *)(ami8_sm + SB);   // [st][64] k scales, then [st][64] v scales at +128

    const int tid = (int)threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int h = (int)blockIdx.x, g = h / (a.n_head / a.n_head_kv);
    const int64_t t0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * AMI8_V2_ROWS;   // longest contexts first

    // 1. this lane's two rows (gid, gid + 8 of the warp's 16); padding rows
    //    past n: sequence -1, never attend, never written
    const int r0 = 16 * warp + gid;
    int32_t pos0 = -1, seq0 = -1, pos1 = -1, seq1 = -1;
    if (t0 + r0 < a.n) { pos0 = a.pos[t0 + r0]; seq0 = a.seq[t0 + r0]; }
    if (t0 + r0 + 8 < a.n) { pos1 = a.pos[t0 + r0 + 8]; seq1 = a.seq[t0 + r0 + 8]; }

    // 2. q rows to int8 (v1's rule), one warp per row; lane owns elements
    //    4 lane + 128 j .. + 3 (one word of the swizzled row)
    float qsc0 = 0.0f, qsc1 = 0.0f;
    const float inv_sqrt = AMI8_LOG2E / sqrtf((float)HD);
    for (int rr = 0; rr < 16; rr++) {
        const int r = 16 * warp + rr;
        const int64_t t = t0 + r;
        const float *qr = a.q + ((uint64_t)(t < a.n ? t : 0) * a.n_head + h) * HD;
        float x[HD / 32], m = 0.0f;
#pragma unroll
        for (int j = 0; j < HD / 128; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                x[4 * j + i] = t < a.n ? qr[128 * j + 4 * lane + i] : 0.0f;
                m = fmaxf(m, fabsf(x[4 * j + i]));
            }
        m = ami8_warp_max(m);
        const float inv = m > 0.0f ? 127.0f / m : 0.0f;
#pragma unroll
        for (int j = 0; j < HD / 128; j++) {
            uint32_t w = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float v = fminf(fmaxf(rintf(x[4 * j + i] * inv), -127.0f), 127.0f);
                w |= (uint32_t)(uint8_t)(int8_t)v << (8 * i);
            }
            *(uint32_t *)(q_s + ami8_sw_qk<HD>(r, 128 * j + 4 * lane)) = w;
        }
        const float sc = m / 127.0f * inv_sqrt;
        if (rr == gid) qsc0 = sc;
        if (rr == gid + 8) qsc1 = sc;
    }

    // 3. the tile's sequences and their context lengths (max pos + 1), in
    //    order of first appearance; scratch in V stage 1 (not yet in use)
    {
        int32_t *sq = (int32_t *)(ami8_sm + VB + AMI8_V2_CHUNK * HD), *ps = sq + AMI8_V2_ROWS, *fl = ps + AMI8_V2_ROWS;
        int32_t s = -1, len = 0;
        bool first = false;
        if (tid < AMI8_V2_ROWS) {
            const int64_t t = t0 + tid;
            sq[tid] = t < a.n ? a.seq[t] : -1;
            ps[tid] = t < a.n ? a.pos[t] : -1;
        }
        __syncthreads();
        if (tid < AMI8_V2_ROWS) {
            s = sq[tid];
            first = s >= 0;
            for (int j = 0; j < tid && first; j++)
                first = sq[j] != s;
            if (first)
                for (int j = tid; j < AMI8_V2_ROWS; j++)
                    if (sq[j] == s && ps[j] + 1 > len)
                        len = ps[j] + 1;
            fl[tid] = first;
        }
        __syncthreads();
        if (tid < AMI8_V2_ROWS) {
            int idx = 0;
            for (int j = 0; j < tid; j++)
                idx += fl[j];
            if (first) {
                dseq_s[idx] = s;
                dlen_s[idx] = len;
            }
            if (tid == AMI8_V2_ROWS - 1)
                nd_s = idx + first;
        }
        __syncthreads();
    }
    const int nd = nd_s;

    // stage loads: thread tid copies page tid / 64 of the chunk (K and V:
    // 16 rows x HD bytes each), the first 8 threads of a page its scales
    const int lp = tid >> 6, lj = tid & 63;
    auto load = [&](int st, int32_t seq, int32_t len, int32_t c0) {
        const int32_t p0 = c0 + AMI8_PAGE * lp;
        if (p0 >= len)
            return;
        const int64_t pg = __ldg(a.pages + (uint64_t)seq * a.max_pages + p0 / AMI8_PAGE);
        const uint64_t row = ((uint64_t)pg * a.n_head_kv + g) * AMI8_PAGE;
        const int8_t *kg = a.k + row * HD, *vg = a.v + row * HD;
        uint8_t *ks = ami8_sm + KB + st * AMI8_V2_CHUNK * HD, *vs = ami8_sm + VB + st * AMI8_V2_CHUNK * HD;
#pragma unroll
        for (int e = lj; e < HD; e += 64) {   // HD segments of 16 B a page
            const int r = AMI8_PAGE * lp + e / (HD / 16), b = 16 * (e % (HD / 16));
            cp_async16(ks + ami8_sw_qk<HD>(r, b), kg + 16 * e);
            cp_async16(vs + ami8_sw_v<HD>(r, b), vg + 16 * e);
        }
        if (lj < 4)
            cp_async16(sc_s + st * AMI8_V2_CHUNK + AMI8_PAGE * lp + 4 * lj, a.ks + row + 4 * lj);
        else if (lj < 8)
            cp_async16(sc_s + 2 * AMI8_V2_CHUNK + st * AMI8_V2_CHUNK + AMI8_PAGE * lp + 4 * (lj - 4), a.vs + row + 4 * (lj - 4));
    };

    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[j][i] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;   // l: this lane's part of the row sum

    int d = 0, st = 0;
    int32_t c0 = 0, seq = nd > 0 ? dseq_s[0] : -1, len = nd > 0 ? dlen_s[0] : 0;
    if (nd > 0)
        load(0, seq, len, 0);
    cp_async_commit();
    while (d < nd) {
        // the next chunk (of this sequence, or the next one's first) into
        // the other stage, in flight during this one
        int d2 = d;
        int32_t c2 = c0 + AMI8_V2_CHUNK;
        if (c2 >= len) {
            d2 = d + 1;
            c2 = 0;
        }
        if (d2 < nd)
            load(st ^ 1, dseq_s[d2], dlen_s[d2], c2);
        cp_async_commit();
        cp_async_wait_group<1>();
        __syncthreads();   // stage st landed for every thread's copies

        const bool act = __any_sync(0xffffffffu, (seq0 == seq && pos0 >= c0) || (seq1 == seq && pos1 >= c0));
        if (act) {
            const int8_t *ks = (const int8_t *)ami8_sm + KB + st * AMI8_V2_CHUNK * HD;
            const uint8_t *vsm = ami8_sm + VB + st * AMI8_V2_CHUNK * HD;
            const float *ksc = sc_s + st * AMI8_V2_CHUNK, *vsc = sc_s + 2 * AMI8_V2_CHUNK + st * AMI8_V2_CHUNK;
            // (a) S: 16 rows x 64 positions, n-tile nt = positions 8 nt..+7;
            //     B (k, n) = K[8 nt + n][k]: b0 = K row gid, bytes 4 tig..+3
            int c[8][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    c[nt][i] = 0;
            // (not unrolled: the K loads of all k-steps hoisted next to
            // O's 128 registers at hd 256 spill)
#pragma unroll 1
            for (int kq = 0; kq < KS; kq++) {
                uint32_t af[4];
                af[0] = lds32(q_s + ami8_sw_qk<HD>(r0, 32 * kq + 4 * tig));
                af[1] = lds32(q_s + ami8_sw_qk<HD>(r0 + 8, 32 * kq + 4 * tig));
                af[2] = lds32(q_s + ami8_sw_qk<HD>(r0, 32 * kq + 16 + 4 * tig));
                af[3] = lds32(q_s + ami8_sw_qk<HD>(r0 + 8, 32 * kq + 16 + 4 * tig));
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    const uint32_t b0 = lds32(ks + ami8_sw_qk<HD>(8 * nt + gid, 32 * kq + 4 * tig));
                    const uint32_t b1 = lds32(ks + ami8_sw_qk<HD>(8 * nt + gid, 32 * kq + 16 + 4 * tig));
                    mma_s8(c[nt], af, b0, b1);
                }
            }
            // (b) scale, mask (selection: NaN scales past a context never
            //     enter), row maxima over the 4 lanes of a row
            float s[8][4], mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int col = 8 * nt + 2 * tig + (i & 1);
                    const int32_t p = c0 + col;
                    const bool ok = i < 2 ? (seq0 == seq && p <= pos0) : (seq1 == seq && p <= pos1);
                    s[nt][i] = ok ? ami8_i2f(c[nt][i]) * (i < 2 ? qsc0 : qsc1) * ksc[col] : -INFINITY;
                    if (i < 2) mx0 = fmaxf(mx0, s[nt][i]);
                    else mx1 = fmaxf(mx1, s[nt][i]);
                }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
            // a row with nothing yet (mn -inf) keeps f = 1 on its zeros and
            // subtracts 0, so -inf - -inf never happens
            const float f0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), f1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
            const float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;
            m0 = mn0;
            m1 = mn1;
            // (c) weights: l takes e, P takes e * v_scale (0 by selection
            //     where e is 0); per-row chunk maximum for the u8 scale
            float px0 = 0.0f, px1 = 0.0f, e0 = 0.0f, e1 = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int col = 8 * nt + 2 * tig + (i & 1);
                    const float e = exp2f(s[nt][i] - (i < 2 ? b0 : b1));
                    const float p = e == 0.0f ? 0.0f : e * vsc[col];
                    s[nt][i] = p;
                    if (i < 2) { e0 += e; px0 = fmaxf(px0, p); }
                    else { e1 += e; px1 = fmaxf(px1, p); }
                }
            l0 = l0 * f0 + e0;
            l1 = l1 * f1 + e1;
            px0 = fmaxf(px0, __shfl_xor_sync(0xffffffffu, px0, 1));
            px1 = fmaxf(px1, __shfl_xor_sync(0xffffffffu, px1, 1));
            px0 = fmaxf(px0, __shfl_xor_sync(0xffffffffu, px0, 2));
            px1 = fmaxf(px1, __shfl_xor_sync(0xffffffffu, px1, 2));
            const float pi0 = px0 > 0.0f ? 255.0f / px0 : 0.0f, pi1 = px1 > 0.0f ? 255.0f / px1 : 0.0f;
            const float ps0 = px0 / 255.0f, ps1 = px1 / 255.0f;
            // (d) P to u8 as A fragments: k-step kk, a0 = row gid, the
            //     positions (2 tig, 2 tig + 1) of n-tiles 4 kk and 4 kk + 1;
            //     a1 the same of row gid + 8; a2, a3 n-tiles 4 kk + 2, + 3
            uint32_t pa[2][4];
#pragma unroll
            for (int kk = 0; kk < 2; kk++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++)
#pragma unroll
                    for (int hi = 0; hi < 2; hi++) {
                        uint32_t w = 0;
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const float p = s[4 * kk + 2 * hi + (i >> 1)][2 * hr + (i & 1)];
                            const int u = ami8_rint(p, hr ? pi1 : pi0);
                            w |= (uint32_t)(u < 255 ? u : 255) << (8 * i);
                        }
                        pa[kk][2 * hi + hr] = w;
                    }
            // (e) O = O * f + P V: for 32 columns at a time, lane (g, t)
            //     gathers V rows 2t + {0, 1, 8, 9} (+ 16) of the k-step at
            //     columns 4g..4g+3 and transposes them into n-tiles 0..3
#pragma unroll
            for (int cb = 0; cb < KS; cb++) {
                int ci[4][4];
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        ci[j][i] = 0;
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    uint32_t w[4], x[4], bl[4], bh[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int rv = 32 * kk + 2 * tig + (i & 1) + 8 * (i >> 1);
                        w[i] = lds32(vsm + ami8_sw_v<HD>(rv, 32 * cb + 4 * gid));
                        x[i] = lds32(vsm + ami8_sw_v<HD>(rv + 16, 32 * cb + 4 * gid));
                    }
                    ami8_t4x4(w, bl);
                    ami8_t4x4(x, bh);
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        mma_k32_u8acc(ci[j], pa[kk], bl[j], bh[j]);
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    o[4 * cb + j][0] = fmaf(o[4 * cb + j][0], f0, ami8_i2f(ci[j][0]) * ps0);
                    o[4 * cb + j][1] = fmaf(o[4 * cb + j][1], f0, ami8_i2f(ci[j][1]) * ps0);
                    o[4 * cb + j][2] = fmaf(o[4 * cb + j][2], f1, ami8_i2f(ci[j][2]) * ps1);
                    o[4 * cb + j][3] = fmaf(o[4 * cb + j][3], f1, ami8_i2f(ci[j][3]) * ps1);
                }
            }
        }
        __syncthreads();   // stage st is read: the next iteration's load may refill it
        d = d2;
        c0 = c2;
        if (d < nd) {
            seq = dseq_s[d];
            len = dlen_s[d];
        }
        st ^= 1;
    }

    // 4. out = O / l * sigmoid(gate); element i of n-tile 4 cb + j is row
    //    gid (+ 8 for i >= 2), column 32 cb + 4 (2 tig + (i & 1)) + j
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int64_t t = t0 + r0 + 8 * hr;
        if (t >= a.n)
            continue;
        const float inv = 1.0f / (hr ? l1 : l0);
        const float *gate = a.qg + (uint64_t)t * a.qg_stride + (uint64_t)(2 * h + 1) * HD;
        float *out = a.dst + (uint64_t)t * a.dst_stride + (uint64_t)h * HD;
#pragma unroll
        for (int cb = 0; cb < KS; cb++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int col = 32 * cb + 4 * (2 * tig + e) + j;
                    out[col] = o[4 * cb + j][2 * hr + e] * inv / (1.0f + expf(-gate[col]));
                }
    }
    cp_async_wait_group<0>();   // only empty groups can be left; drained all the same
}

extern "C" int ami8_hd_ok(int hd) { return hd == 64 || hd == 128 || hd == 256; }

template <int HD> static int ami8_v2_launch(const ami8_args *a, cudaStream_t s)
{
    const size_t smem = ami8_v2_smem(HD);
    // above the 48 KiB default: opt in (per device and function; cheap)
    cudaError_t e = cudaFuncSetAttribute(ami8_v2_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return (int)e;
    const dim3 grid((unsigned)a->n_head, (unsigned)((a->n + AMI8_V2_ROWS - 1) / AMI8_V2_ROWS));
    ami8_v2_kernel<HD><<<grid, AMI8_V2_THREADS, smem, s>>>(*a);
    return (int)cudaGetLastError();
}

extern "C" int ami8_attn(const ami8_args *a, void *stream)
{
    if (a->n <= 0)
        return 0;
    if (!ami8_hd_ok(a->hd) || a->n_head_kv <= 0 || a->n_head % a->n_head_kv != 0 || a->n_head > 65535 ||
        (a->n + AMI8_ROWS - 1) / AMI8_ROWS > 0x7fffffffLL)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    // v2 where it is built for: hd 128/256 (8 swizzle segments a row),
    // a tile count within gridDim.y, and the pool and scales 16-byte aligned
    // for cp.async (cuda_sm120's are: whole allocations, layers at multiples
    // of 16 rows; anything else would fault, so it runs v1)
    const bool al = (((uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->ks | (uintptr_t)a->vs) & 15) == 0;
    if (a->tile == AMI8_TILE_V2 && a->hd >= 128 && al && (a->n + AMI8_V2_ROWS - 1) / AMI8_V2_ROWS <= 65535)
        return a->hd == 128 ? ami8_v2_launch<128>(a, s) : ami8_v2_launch<256>(a, s);
    const dim3 grid((unsigned)((a->n + AMI8_ROWS - 1) / AMI8_ROWS), (unsigned)a->n_head);
    switch (a->hd) {
    case 64: ami8_kernel<64><<<grid, AMI8_THREADS, 0, s>>>(*a); break;
    case 128: ami8_kernel<128><<<grid, AMI8_THREADS, 0, s>>>(*a); break;
    default: ami8_kernel<256><<<grid, AMI8_THREADS, 0, s>>>(*a); break;
    }
    return (int)cudaGetLastError();
}
