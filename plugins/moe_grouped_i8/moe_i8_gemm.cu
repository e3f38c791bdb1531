// plugins/moe_grouped_i8/moe_i8_gemm.cu — the grouped int8 GEMMs of the MOE
// on int8 tensor cores (mma.sync m16n8k32 s8.s8 -> s32, inline PTX).
//
// Orientation: A = weight rows (M = output features, 16 per mma), B = the
// tile's 32 token rows (N = 8 per mma), both K-contiguous, so each lane
// reads its fragments straight from global memory in the layout of the PTX
// ISA (m16n8k32 .s8): A regs {row g k 4t.., row g+8 k 4t.., row g k 16+4t..,
// row g+8 k 16+4t..}, B regs {k 4t.., k 16+4t..} of column g, C {row g col
// 2t, 2t+1, row g+8 col 2t, 2t+1}; g = lane/4, t = lane%4.
// K-quant weights are unpacked per 32-wide k step to int8 in registers
// (Q4_K/Q5_K: 0..31 plus a min, Q6_K: -32..31, Q8_0 as stored); after
// each step, in f32 (the cpu backend's int8 path, term for term):
//   acc += dx * (dw * isum) - mw * sx        (dx, sx: the token block's
// scale and exact f32 sum; Q6_K's two 16-wide scales take two mma with the
// other half of A zeroed).  The weights are read once per (tile, feature
// block): tiles of one expert are adjacent in blockIdx.x, so they run
// together and share the weight rows through L2.
//
// gate_up_kernel: warp = 32 features of F (2 m-tiles of gate + the same 2
//   of up) x 32 rows; block = 4 warps = 128 features.  Epilogue: silu(g)*u
//   in registers, then int8 per 32 features (the 32 values of a row are
//   spread over the 8 lanes with the same t: max/sum by shuffles).
// down_kernel: warp = 64 features of H (4 m-tiles) x 32 rows; block = 256.
// The tile's per-row scales (d, s for every k block) sit in shared memory:
// 8 bytes * inner size (<= 46 KiB: MI8_MAX_KIN; + 256 B static <= 48 KiB).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <sparkinfer/types.h>

#include "moe_i8.h"

#define WARPS 4

__device__ __forceinline__ float f16at(const uint8_t *p)
{
    return __half2float(__ushort_as_half(__ldg((const unsigned short *)p)));
}

__device__ __forceinline__ uint32_t ld32(const void *p) { return __ldg((const uint32_t *)p); }

// 4 bytes at a 2-aligned address (Q8_0's 34-byte and Q6_K's 210-byte blocks).
__device__ __forceinline__ uint32_t ld32a2(const uint8_t *p)
{
    const unsigned short *h = (const unsigned short *)p;
    return (uint32_t)__ldg(h) | ((uint32_t)__ldg(h + 1) << 16);
}

// 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block's 12 bytes.
__device__ __forceinline__ void k4_sm(const uint8_t *sc, int j, int &s, int &m)
{
    if (j < 4) {
        s = __ldg(sc + j) & 63;
        m = __ldg(sc + j + 4) & 63;
    } else {
        s = (__ldg(sc + j + 4) & 15) | ((__ldg(sc + j - 4) >> 6) << 4);
        m = (__ldg(sc + j + 4) >> 4) | ((__ldg(sc + j) >> 6) << 4);
    }
}

// What a lane holds of one weight row for k block kb (32 values): lo = the
// 4 int8 at 4t.., hi = at 16+4t..; d0/d1 the scales of values 0..15/16..31;
// m the min (subtracted times the activation block's sum).
struct afrag {
    uint32_t lo, hi;
    float    d0, d1, m;
};

template <int T> __device__ __forceinline__ void dec_a(const uint8_t *row, int kb, int t4, afrag &f)
{
    if (T == SI_TYPE_Q8_0) {
        const uint8_t *B = row + (int64_t)kb * 34;
        f.lo = ld32a2(B + 2 + t4);
        f.hi = ld32a2(B + 18 + t4);
        f.d0 = f.d1 = f16at(B);
        f.m = 0.0f;
    } else if (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K) {
        const int j = kb & 7, c = j >> 1, sh = 4 * (j & 1);
        const uint8_t *B = row + (int64_t)(kb >> 3) * (T == SI_TYPE_Q4_K ? 144 : 176);
        const uint8_t *qs = B + (T == SI_TYPE_Q4_K ? 16 : 48) + 32 * c;
        f.lo = (ld32(qs + t4) >> sh) & 0x0F0F0F0Fu;
        f.hi = (ld32(qs + 16 + t4) >> sh) & 0x0F0F0F0Fu;
        if (T == SI_TYPE_Q5_K) {   // fifth bit: bit j of qh[l]
            f.lo |= ((ld32(B + 16 + t4) >> j) & 0x01010101u) << 4;
            f.hi |= ((ld32(B + 32 + t4) >> j) & 0x01010101u) << 4;
        }
        int s, m;
        k4_sm(B + 4, j, s, m);
        f.d0 = f.d1 = f16at(B) * (float)s;
        f.m = f16at(B + 2) * (float)m;
    } else {   // Q6_K: value 32*quad + l of half h: nibble of ql[32*(quad&1) + l], bits 2*quad of qh[l]
        const int j = kb & 7, half = j >> 2, quad = j & 3;
        const uint8_t *B = row + (int64_t)(kb >> 3) * 210;
        const uint8_t *ql = B + 64 * half + 32 * (quad & 1), *qh = B + 128 + 32 * half;
        const int shl = 4 * (quad >> 1), shh = 2 * quad;
        const uint32_t lo = ((ld32a2(ql + t4) >> shl) & 0x0F0F0F0Fu) | (((ld32a2(qh + t4) >> shh) & 0x03030303u) << 4);
        const uint32_t hi =
            ((ld32a2(ql + 16 + t4) >> shl) & 0x0F0F0F0Fu) | (((ld32a2(qh + 16 + t4) >> shh) & 0x03030303u) << 4);
        f.lo = __vsub4(lo, 0x20202020u);   // bytewise q - 32: 0..63 -> -32..31
        f.hi = __vsub4(hi, 0x20202020u);
        const float d = f16at(B + 208);
        const int8_t *sc = (const int8_t *)(B + 192 + 8 * half + 2 * quad);
        f.d0 = d * (float)__ldg(sc);
        f.d1 = d * (float)__ldg(sc + 1);
        f.m = 0.0f;
    }
}

__device__ __forceinline__ void mma_s8(int c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 32-wide k step of MT m-tiles x 4 n-tiles.  rp[mt][0/1]: weight rows
// g and g+8 of m-tile mt; b: B fragments; dx/sx: scale and sum of this
// lane's C columns 8j+2t+i.
template <int T, int MT>
__device__ __forceinline__ void kstep(const uint8_t *const (&rp)[MT][2], int kb, int t4, const uint32_t (&b)[4][2],
                                      const float (&dx)[4][2], const float (&sx)[4][2], float (&acc)[MT][4][4])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        afrag r0, r1;
        dec_a<T>(rp[mt][0], kb, t4, r0);
        dec_a<T>(rp[mt][1], kb, t4, r1);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (T == SI_TYPE_Q6_K) {
                int c0[4] = { 0, 0, 0, 0 }, c1[4] = { 0, 0, 0, 0 };
                mma_s8(c0, r0.lo, r1.lo, 0u, 0u, b[j][0], b[j][1]);
                mma_s8(c1, 0u, 0u, r0.hi, r1.hi, b[j][0], b[j][1]);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const afrag &r = e < 2 ? r0 : r1;
                    acc[mt][j][e] += dx[j][e & 1] * (r.d0 * (float)c0[e] + r.d1 * (float)c1[e]);
                }
            } else {
                int c[4] = { 0, 0, 0, 0 };
                mma_s8(c, r0.lo, r1.lo, r0.hi, r1.hi, b[j][0], b[j][1]);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const afrag &r = e < 2 ? r0 : r1;
                    acc[mt][j][e] += dx[j][e & 1] * (r.d0 * (float)c[e]) - r.m * sx[j][e & 1];
                }
            }
        }
    }
}

// Row r of the tile: its token (the B row to read) and its assignment.
__device__ __forceinline__ int64_t row_token(const mi8_sched &s, int64_t r)
{
    return s.tile_exp != NULL ? s.row_tok[r] : (r < s.n_rows ? r : 0);
}

__device__ __forceinline__ int64_t row_slot(const mi8_sched &s, int64_t r)
{
    return s.tile_exp != NULL ? s.row_slot[r] : (r < s.n_rows ? r : -1);
}

// Loads the tile's per-row block scales/sums into shared memory:
// sd[kb*32 + c], ss[kb*32 + c] for tile row c.  `tok` says which row of
// `a` tile row c reads.  Contains __syncthreads().
__device__ __forceinline__ void load_scales(const mi8_act &a, const int64_t *tok, int nkb, float *sd, float *ss)
{
    for (int i = threadIdx.x; i < nkb * 32; i += blockDim.x) {
        const int c = i & 31, kb = i >> 5;
        sd[i] = a.d[tok[c] * nkb + kb];
        ss[i] = a.s[tok[c] * nkb + kb];
    }
    __syncthreads();
}

// B fragments and column scales of k block kb.
__device__ __forceinline__ void load_b(const int8_t *const (&bx)[4], const float *sd, const float *ss, int kb, int t,
                                       uint32_t (&b)[4][2], float (&dx)[4][2], float (&sx)[4][2])
{
#pragma unroll
    for (int j = 0; j < 4; j++) {
        b[j][0] = ld32(bx[j] + 32 * kb + 4 * t);
        b[j][1] = ld32(bx[j] + 32 * kb + 16 + 4 * t);
        const float2 d2 = *(const float2 *)(sd + kb * 32 + 8 * j + 2 * t);
        const float2 s2 = *(const float2 *)(ss + kb * 32 + 8 * j + 2 * t);
        dx[j][0] = d2.x;
        dx[j][1] = d2.y;
        sx[j][0] = s2.x;
        sx[j][1] = s2.y;
    }
}

// Tile index -> expert, or -1 for a tile past the schedule's end.
__device__ __forceinline__ int tile_expert(const mi8_sched &s, int64_t tile)
{
    if (s.tile_exp == NULL)
        return 0;
    return tile < *s.n_tiles ? s.tile_exp[tile] : -1;
}

template <int T>
__global__ void __launch_bounds__(32 * WARPS) gate_up_kernel(mi8_w gate, mi8_w up, mi8_act x, int64_t H, int64_t F,
                                                             mi8_sched s, mi8_act act)
{
    extern __shared__ float smem[];
    __shared__ int64_t tok[MI8_BT];
    const int64_t tile = blockIdx.x, r0 = tile * MI8_BT;
    const int e = tile_expert(s, tile);
    if (e < 0)
        return;
    const int nkb = (int)(H / 32);
    float *sd = smem, *ss = smem + nkb * 32;
    if (threadIdx.x < MI8_BT)
        tok[threadIdx.x] = row_token(s, r0 + threadIdx.x);
    __syncthreads();
    load_scales(x, tok, nkb, sd, ss);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t fw = (int64_t)blockIdx.y * (32 * WARPS) + 32 * warp;
    if (fw >= F)
        return;   // F % 32 == 0: a warp has all of its 32 features or none
    const uint8_t *gp[2][2], *upp[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t f = fw + 16 * mt + g + 8 * h;
            gp[mt][h] = gate.w + (uint64_t)e * gate.expert_bytes + (uint64_t)f * gate.row_bytes;
            upp[mt][h] = up.w + (uint64_t)e * up.expert_bytes + (uint64_t)f * up.row_bytes;
        }
    const int8_t *bx[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        bx[j] = x.q + tok[8 * j + g] * H;
    float ag[2][4][4], au[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                ag[mt][j][q] = au[mt][j][q] = 0.0f;
#pragma unroll 1
    for (int kb = 0; kb < nkb; kb++) {
        uint32_t b[4][2];
        float dx[4][2], sx[4][2];
        load_b(bx, sd, ss, kb, t, b, dx, sx);
        kstep<T, 2>(gp, kb, 4 * t, b, dx, sx, ag);
        kstep<T, 2>(upp, kb, 4 * t, b, dx, sx, au);
    }
    // SwiGLU, then int8 per 32 features of each row (cpu_quantize_row_q8).
    const int64_t nfb = F / 32, fb = fw / 32;
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float v[2][2], amax = 0.0f, sum = 0.0f;
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float gv = ag[mt][j][2 * h + i];
                    v[mt][h] = __fmul_rn(gv / (1.0f + expf(-gv)), au[mt][j][2 * h + i]);
                    amax = fmaxf(amax, fabsf(v[mt][h]));
                    sum += v[mt][h];
                }
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {   // the 8 lanes of this column (same t)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            }
            const float d = __fdiv_rn(amax, 127.0f), id = d > 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
            const int64_t r = r0 + 8 * j + 2 * t + i;
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    act.q[r * F + fw + 16 * mt + g + 8 * h] = (int8_t)__float2int_rn(__fmul_rn(v[mt][h], id));
            if (g == 0) {
                act.d[r * nfb + fb] = d + (sum - sum);
                act.s[r * nfb + fb] = sum;
            }
        }
}

template <int T>
__global__ void __launch_bounds__(32 * WARPS) down_kernel(mi8_w down, mi8_act act, int64_t F, int64_t H, mi8_sched s,
                                                          float *y)
{
    extern __shared__ float smem[];
    __shared__ int64_t rows[MI8_BT];
    const int64_t tile = blockIdx.x, r0 = tile * MI8_BT;
    const int e = tile_expert(s, tile);
    if (e < 0)
        return;
    const int nkb = (int)(F / 32);
    float *sd = smem, *ss = smem + nkb * 32;
    if (threadIdx.x < MI8_BT)
        rows[threadIdx.x] = r0 + threadIdx.x;   // act rows are the tile's own rows
    __syncthreads();
    load_scales(act, rows, nkb, sd, ss);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t fw = (int64_t)blockIdx.y * (64 * WARPS) + 64 * warp;
    if (fw >= H)
        return;
    const uint8_t *rp[4][2];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t f = fw + 16 * mt + g + 8 * h;
            f = f < H ? f : H - 1;   // m-tiles past H (H % 64 == 32) compute a copy, never stored
            rp[mt][h] = down.w + (uint64_t)e * down.expert_bytes + (uint64_t)f * down.row_bytes;
        }
    const int8_t *bx[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
        bx[j] = act.q + (r0 + 8 * j + g) * F;
    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[mt][j][q] = 0.0f;
#pragma unroll 1
    for (int kb = 0; kb < nkb; kb++) {
        uint32_t b[4][2];
        float dx[4][2], sx[4][2];
        load_b(bx, sd, ss, kb, t, b, dx, sx);
        kstep<T, 4>(rp, kb, 4 * t, b, dx, sx, acc);
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int64_t slot = row_slot(s, r0 + 8 * j + 2 * t + i);
            if (slot < 0)
                continue;
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t f = fw + 16 * mt + g + 8 * h;
                    if (f < H)
                        y[slot * H + f] = acc[mt][j][2 * h + i];
                }
        }
}

static bool grid_ok(int64_t tiles, int64_t y)
{
    return tiles > 0 && tiles <= 0x7fffffffLL && y > 0 && y <= 65535;
}

template <int T>
static int gate_up_go(const mi8_w &gate, const mi8_w &up, const mi8_act &x, int64_t H, int64_t F, const mi8_sched &s,
                      const mi8_act &act, cudaStream_t st)
{
    const int64_t gy = (F + 32 * WARPS - 1) / (32 * WARPS);
    if (!grid_ok(s.max_tiles, gy))
        return (int)cudaErrorInvalidValue;
    gate_up_kernel<T><<<dim3((unsigned)s.max_tiles, (unsigned)gy), 32 * WARPS, (size_t)H * 8, st>>>(gate, up, x, H, F,
                                                                                                   s, act);
    return (int)cudaGetLastError();
}

template <int T>
static int down_go(const mi8_w &down, const mi8_act &act, int64_t F, int64_t H, const mi8_sched &s, float *y,
                   cudaStream_t st)
{
    const int64_t gy = (H + 64 * WARPS - 1) / (64 * WARPS);
    if (!grid_ok(s.max_tiles, gy))
        return (int)cudaErrorInvalidValue;
    down_kernel<T><<<dim3((unsigned)s.max_tiles, (unsigned)gy), 32 * WARPS, (size_t)F * 8, st>>>(down, act, F, H, s,
                                                                                                y);
    return (int)cudaGetLastError();
}

extern "C" int mi8_gate_up(mi8_w gate, mi8_w up, mi8_act x, int64_t H, int64_t F, mi8_sched s, mi8_act act,
                           void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (gate.type != up.type || H % 32 != 0 || F % 32 != 0 || H > MI8_MAX_KIN)
        return (int)cudaErrorInvalidValue;
    switch (gate.type) {
    case SI_TYPE_Q8_0: return gate_up_go<SI_TYPE_Q8_0>(gate, up, x, H, F, s, act, st);
    case SI_TYPE_Q4_K: return gate_up_go<SI_TYPE_Q4_K>(gate, up, x, H, F, s, act, st);
    case SI_TYPE_Q5_K: return gate_up_go<SI_TYPE_Q5_K>(gate, up, x, H, F, s, act, st);
    case SI_TYPE_Q6_K: return gate_up_go<SI_TYPE_Q6_K>(gate, up, x, H, F, s, act, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int mi8_down(mi8_w down, mi8_act act, int64_t F, int64_t H, mi8_sched s, float *y, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (H % 32 != 0 || F % 32 != 0 || F > MI8_MAX_KIN)
        return (int)cudaErrorInvalidValue;
    switch (down.type) {
    case SI_TYPE_Q8_0: return down_go<SI_TYPE_Q8_0>(down, act, F, H, s, y, st);
    case SI_TYPE_Q4_K: return down_go<SI_TYPE_Q4_K>(down, act, F, H, s, y, st);
    case SI_TYPE_Q5_K: return down_go<SI_TYPE_Q5_K>(down, act, F, H, s, y, st);
    case SI_TYPE_Q6_K: return down_go<SI_TYPE_Q6_K>(down, act, F, H, s, y, st);
    default: return (int)cudaErrorInvalidValue;
    }
}
