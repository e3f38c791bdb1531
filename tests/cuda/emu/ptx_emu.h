// tests/cuda/emu/ptx_emu.h — host emulation of the inline PTX the int8
// GEMM (cuda_mma.cu) and the f16 flash attention (cuda_attn_fa.cu) use,
// written from the PTX ISA's own tables (9.7.14.5.9 "Matrix Fragments for
// mma.m16n8k16 with integer type", 9.7.14.5.10 "Matrix Fragments for
// mma.m16n8k32", 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with
// floating point type", 9.7.14.5.15 ldmatrix, 9.7.9.25 cp.async), NOT from
// the kernels' comments, so a wrong layout assumption there shows as a
// mismatch.
// The functions stand in for the kernel's PTX wrappers (same names and
// operands as their asm: C = 0 in, D out; the *c ones take a C value for
// all four elements); run-mma-emu.sh cuts the wrappers.
//
// mma.sync: every lane scatters its A and B registers into the warp's full
// 16xK and Kx8 matrices at the (row, col) the ISA gives for each element,
// the warp meets (all 32 lanes: checked, every element written exactly
// once), each lane computes its four D elements, int32 wrapping.
// cp.async: the copy is queued per thread and the destination poisoned
// (0x7f) at issue; the data lands at the thread's cp.async.wait_all, or at
// the cp.async.wait_group N that leaves its commit group no longer among
// the N most recent (9.7.9.25.3.2): the latest the ISA allows, so reading
// it before the wait + barrier shows.
// ldmatrix.m8n8.x4.b16 (9.7.14.5.15): every lane gives one row address
// (lanes 8j..8j+7: the 8 rows of matrix j, 16-byte aligned, in shared
// memory); register j of lane l is matrix j, row l / 4, 32-bit word l % 4.
#pragma once
#include "cuda_runtime.h"

namespace emu_ptx {
struct warp_mat { int8_t A[16][32], B[32][8]; unsigned char na[16][32], nb[32][8]; };
inline warp_mat wm[32];
inline const char *mma_name(int k) { return k == 32 ? "mma.m16n8k32.s8" : "mma.m16n8k16.s8"; }

// a: K/8 registers, b: K/16 registers (4 s8 each, element i in byte i % 4)
inline void mma_s8(int K, int d[4], const uint32_t *a, const uint32_t *b, int c0 = 0, const int *cin = nullptr)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int gid = lane >> 2, tig = lane % 4;
    warp_mat &M = wm[w];
    for (int i = 0; i < K / 2; i++) {   // A: 16*K/32 = K/2 elements per lane
        int row, col;
        if (K == 32) {
            row = ((i < 4) || (i >= 8 && i < 12)) ? gid : gid + 8;
            col = i < 8 ? tig * 4 + (i & 3) : tig * 4 + (i & 3) + 16;
        } else {
            row = i < 4 ? gid : gid + 8;
            col = tig * 4 + (i & 3);
        }
        M.A[row][col] = (int8_t)(a[i / 4] >> (8 * (i % 4)));
        M.na[row][col]++;
    }
    for (int i = 0; i < K / 4; i++) {   // B: K*8/32 = K/4 elements per lane
        int row;
        if (K == 32)
            row = i < 4 ? tig * 4 + (i & 3) : tig * 4 + (i & 3) + 16;
        else
            row = tig * 4 + i;
        M.B[row][gid] = (int8_t)(b[i / 4] >> (8 * (i % 4)));
        M.nb[row][gid]++;
    }
    __syncwarp();
    if (lane == 0) {
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 32; k++)
                if (M.na[r][k] != (k < K)) { fprintf(stderr, "emu: %s: warp %d: A[%d][%d] given %d times (a lane missing or diverged?)\n", mma_name(K), w, r, k, M.na[r][k]); abort(); }
        for (int k = 0; k < 32; k++)
            for (int c = 0; c < 8; c++)
                if (M.nb[k][c] != (k < K)) { fprintf(stderr, "emu: %s: warp %d: B[%d][%d] given %d times\n", mma_name(K), w, k, c, M.nb[k][c]); abort(); }
    }
    for (int i = 0; i < 4; i++) {       // D (C = c0): row gid / gid+8, col 2*tig + (i & 1)
        const int row = i < 2 ? gid : gid + 8, col = tig * 2 + (i & 1);
        uint32_t s = (uint32_t)(cin ? cin[i] : c0);   // C: c0 for every element, or cin; int32 wraps
        for (int k = 0; k < K; k++)
            s += (uint32_t)((int)M.A[row][k] * (int)M.B[k][col]);
        d[i] = (int)s;
    }
    __syncwarp();
    if (lane == 0) {
        memset(M.na, 0, sizeof M.na);
        memset(M.nb, 0, sizeof M.nb);
        memset(M.A, 0x55, sizeof M.A);
        memset(M.B, 0x55, sizeof M.B);
    }
    __syncwarp();
}

// What the float mma emulations end with, once the warp's lanes have put
// their A (16 x K) and B (K x 8) elements into M: each element given
// exactly once, then D = C + A B (products exact in double, the sum
// rounded once), the counts cleared for the next call.
template <int K, class Mat> inline void mma_float_tail(Mat &M, float c[4], const char *name)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int gid = lane >> 2, tig = lane % 4;
    __syncwarp();
    if (lane == 0) {
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < K; k++)
                if (M.na[r][k] != 1) { fprintf(stderr, "emu: %s: warp %d: A[%d][%d] given %d times\n", name, w, r, k, M.na[r][k]); abort(); }
        for (int k = 0; k < K; k++)
            for (int n = 0; n < 8; n++)
                if (M.nb[k][n] != 1) { fprintf(stderr, "emu: %s: warp %d: B[%d][%d] given %d times\n", name, w, k, n, M.nb[k][n]); abort(); }
    }
    float d[4];
    for (int i = 0; i < 4; i++) {
        const int row = gid + (i >= 2 ? 8 : 0), col = tig * 2 + (i & 1);
        double s = c[i];
        for (int k = 0; k < K; k++)
            s += (double)M.A[row][k] * (double)M.B[k][col];
        d[i] = (float)s;
    }
    __syncwarp();
    if (lane == 0) {
        memset(M.na, 0, sizeof M.na);
        memset(M.nb, 0, sizeof M.nb);
    }
    __syncwarp();
    for (int i = 0; i < 4; i++) c[i] = d[i];
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, C = D = c: A four
// f16x2 registers, B two (the lower-indexed element in the low half).
// Element i of A (0..7): row gid (+8 for i = 2,3,6,7), col 2*tig + (i & 1)
// (+8 for i >= 4); of B (0..3): row 2*tig + (i & 1) (+8 for i >= 2), col
// gid; of C/D (0..3): row gid (+8 for i >= 2), col 2*tig + (i & 1).  The
// f16 products are exact in f32; the sum is taken in double and rounded
// once (the hardware's order and rounding of the sum are unspecified).

inline size_t smem_bytes;   // set by the test before a launch

struct warp_mat16 { float A[16][16], B[16][8]; unsigned char na[16][16], nb[16][8]; };
inline warp_mat16 wh[32];
inline float half_of(uint32_t r, int hi) { _Float16 f; const uint16_t u = (uint16_t)(r >> (16 * hi)); memcpy(&f, &u, 2); return (float)f; }
inline void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int gid = lane >> 2, tig = lane % 4;
    warp_mat16 &M = wh[w];
    for (int i = 0; i < 8; i++) {
        const int row = gid + (((i >> 1) & 1) ? 8 : 0), col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        M.A[row][col] = half_of(a[i / 2], i & 1);
        M.na[row][col]++;
    }
    for (int i = 0; i < 4; i++) {
        const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
        M.B[row][gid] = half_of(i < 2 ? b0 : b1, i & 1);
        M.nb[row][gid]++;
    }
    mma_float_tail<16>(M, c, "mma.m16n8k16.f16");
}

// cvt.rna.tf32.f32: to 10 mantissa bits, nearest, ties away from zero (the
// magnitude's bits rounded at bit 13; NaN and infinity kept).
inline uint32_t cvt_tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u)
        u += 0x1000u;
    return u & 0xffffe000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, C = D = c: A four
// registers, B two.  Element i of A (0..3): row gid (+8 for i = 1, 3), col
// tig (+4 for i >= 2); of B (0..1): row tig (+4 for i = 1), col gid; C/D
// as m16n8k16.  The hardware reads 19 bits of each operand (the low 13
// are dropped); products are exact in double here and the sum rounded
// once.
struct warp_mat8 { float A[16][8], B[8][8]; unsigned char na[16][8], nb[8][8]; };
inline warp_mat8 wt[32];
inline float tf32_val(uint32_t r) { r &= 0xffffe000u; float f; memcpy(&f, &r, 4); return f; }
inline void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int gid = lane >> 2, tig = lane % 4;
    warp_mat8 &M = wt[w];
    for (int i = 0; i < 4; i++) {
        const int row = gid + ((i & 1) ? 8 : 0), col = tig + (i >= 2 ? 4 : 0);
        M.A[row][col] = tf32_val(a[i]);
        M.na[row][col]++;
    }
    for (int i = 0; i < 2; i++) {
        M.B[tig + 4 * i][gid] = tf32_val(i ? b1 : b0);
        M.nb[tig + 4 * i][gid]++;
    }
    mma_float_tail<8>(M, c, "mma.m16n8k8.tf32");
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i..8i+7 give the
// 16-byte row addresses of matrix i (row j from lane 8i+j); register i of a
// lane gets matrix i's row lane/4, elements 2*(lane%4) and +1 (the first in
// the low half), or with .trans the elements (row 2*(lane%4) and +1, col
// lane/4).  Addresses are offsets into the dynamic shared memory here
// (smem_u32 below), checked for alignment and bounds.
inline uint32_t ldsm_addr[32][32];
inline void ldsm(uint32_t r[4], uint32_t s, bool trans)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    if (s % 16 || s + 16 > smem_bytes) { fprintf(stderr, "emu: ldmatrix: lane %d row address %u (of %zu B shared) not 16-aligned or outside\n", lane, s, smem_bytes); abort(); }
    ldsm_addr[w][lane] = s;
    __syncwarp();
    const unsigned char *b = (const unsigned char *)emu::dyn_smem();
    for (int i = 0; i < 4; i++) {
        if (!trans) {
            memcpy(&r[i], b + ldsm_addr[w][8 * i + lane / 4] + 4 * (lane % 4), 4);
        } else {
            uint16_t lo, hi;
            memcpy(&lo, b + ldsm_addr[w][8 * i + 2 * (lane % 4)] + 2 * (lane / 4), 2);
            memcpy(&hi, b + ldsm_addr[w][8 * i + 2 * (lane % 4) + 1] + 2 * (lane / 4), 2);
            r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
    __syncwarp();
}

struct pend { void *dst; unsigned char data[16]; int n; unsigned group; };
inline std::vector<pend> q[1024];
inline unsigned committed[1024];   // commit groups closed so far, per thread

inline void cp_async(int n, const char *what, void *smem, const void *g)
{
    if ((uintptr_t)smem % n) { fprintf(stderr, "emu: %s: shared address %p not %d-aligned\n", what, smem, n); abort(); }
    const char *s0 = (const char *)emu::dyn_smem();
    if ((const char *)smem < s0 || (const char *)smem + n > s0 + smem_bytes) {
        fprintf(stderr, "emu: %s: shared address outside the dynamic shared memory (+%td of %zu)\n", what, (const char *)smem - s0, smem_bytes);
        abort();
    }
    emu::gread(g, (size_t)n, (size_t)n, what);
    pend p;
    p.dst = smem; p.n = n; p.group = committed[threadIdx.x];
    memcpy(p.data, g, (size_t)n);
    memset(smem, 0x7f, (size_t)n);
    q[threadIdx.x].push_back(p);
}
// cp.async.cg.shared.global [dst], [src], 16, 0 (src-size 0: the 16
// bytes are zero-filled, nothing is read): queued like any copy
inline void cp_async_zero(void *smem)
{
    const char *s0 = (const char *)emu::dyn_smem();
    if ((uintptr_t)smem % 16 || (const char *)smem < s0 || (const char *)smem + 16 > s0 + smem_bytes) {
        fprintf(stderr, "emu: cp.async 16 (src-size 0): shared address +%td not 16-aligned in the %zu B\n", (const char *)smem - s0, smem_bytes);
        abort();
    }
    pend p;
    p.dst = smem; p.n = 16; p.group = committed[threadIdx.x];
    memset(p.data, 0, 16);
    memset(smem, 0x7f, 16);
    q[threadIdx.x].push_back(p);
}
inline void wait_all()
{
    for (auto &p : q[threadIdx.x]) memcpy(p.dst, p.data, (size_t)p.n);
    q[threadIdx.x].clear();
}
inline void commit() { committed[threadIdx.x]++; }
// lands the copies of every group but the n most recently committed (and
// not those issued after the last commit)
inline void wait_group(unsigned n)
{
    auto &v = q[threadIdx.x];
    const unsigned c = committed[threadIdx.x];
    std::vector<pend> keep;
    for (auto &p : v) {
        if (p.group + n < c) memcpy(p.dst, p.data, (size_t)p.n);
        else keep.push_back(p);
    }
    v.swap(keep);
}
inline const void *ldsm_tbl[32][32];
inline void ldsm_x4(uint32_t r[4], const void *smem)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const char *s0 = (const char *)emu::dyn_smem();
    if ((uintptr_t)smem % 16 || (const char *)smem < s0 || (const char *)smem + 16 > s0 + smem_bytes) {
        fprintf(stderr, "emu: ldmatrix: lane %d row address %p not 16-aligned in the dynamic shared memory\n", lane, smem);
        abort();
    }
    ldsm_tbl[w][lane] = smem;
    __syncwarp();
    for (int j = 0; j < 4; j++)
        memcpy(&r[j], (const char *)ldsm_tbl[w][8 * j + lane / 4] + 4 * (lane % 4), 4);
    __syncwarp();
}
inline void check_drained()
{
    for (int t = 0; t < 1024; t++)
        if (!q[t].empty()) { fprintf(stderr, "emu: thread %d exited with %zu cp.async copies not waited for\n", t, q[t].size()); abort(); }
}
}

// The kernel's wrapper names (their asm operands: D = {c}, A = {a...}, B = {b...}, C = 0).
static inline void mma_k32(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{ const uint32_t b[2] = { b0, b1 }; emu_ptx::mma_s8(32, c, a, b); }
static inline void mma_k16(int c[4], uint32_t a0, uint32_t a1, uint32_t b0)
{ const uint32_t a[2] = { a0, a1 }, b[1] = { b0 }; emu_ptx::mma_s8(16, c, a, b); }
// C = {c0, c0, c0, c0} (cuda_mma2.cu)
static inline void mma_k32c(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, int c0)
{ const uint32_t b[2] = { b0, b1 }; emu_ptx::mma_s8(32, d, a, b, c0); }
// C = D (cuda_w8.cu: the sums carried over k-steps)
static inline void mma_k32acc(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{ const uint32_t b[2] = { b0, b1 }; const int c[4] = { d[0], d[1], d[2], d[3] }; emu_ptx::mma_s8(32, d, a, b, 0, c); }
static inline void mma_k16c(int d[4], uint32_t a0, uint32_t a1, uint32_t b0, int c0)
{ const uint32_t a[2] = { a0, a1 }, b[1] = { b0 }; emu_ptx::mma_s8(16, d, a, b, c0); }
static inline void cp_async16(void *smem, const void *g) { emu_ptx::cp_async(16, "cp.async.cg 16", smem, g); }
static inline void cp_async8(void *smem, const void *g) { emu_ptx::cp_async(8, "cp.async.ca 8", smem, g); }
static inline void cp_async4(void *smem, const void *g) { emu_ptx::cp_async(4, "cp.async.ca 4", smem, g); }
// prefetch.global.L2: no effect on data; the address must be in a buffer
static inline void prefetch_l2(const void *g) { emu::gread(g, 1, 1, "prefetch.global.L2"); }
// cuda_attn_fa3.cu's: src-size 16, or 0 (zeros, no read) where !valid
static inline void cp_async16_zf(void *smem, const void *g, bool valid)
{ if (valid) emu_ptx::cp_async(16, "cp.async.cg 16", smem, g); else emu_ptx::cp_async_zero(smem); }
static inline void cp_async_commit() { emu_ptx::commit(); }
static inline void cp_async_wait_all() { emu_ptx::wait_all(); }
// cuda_attn_fa.cu's wrappers
static inline void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { emu_ptx::mma_f16(c, a, b0, b1); }
// cuda_gdn_tc.cu's
static inline void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { emu_ptx::mma_tf32(c, a, b0, b1); }
static inline uint32_t cvt_tf32(float x) { return emu_ptx::cvt_tf32(x); }
static inline uint32_t smem_u32(const void *p) { return (uint32_t)((const char *)p - (const char *)emu::dyn_smem()); }
static inline void ldsm_x4(uint32_t r[4], uint32_t s) { emu_ptx::ldsm(r, s, false); }
static inline void ldsm_x4_t(uint32_t r[4], uint32_t s) { emu_ptx::ldsm(r, s, true); }
template <int N> static inline void cp_async_wait_group() { emu_ptx::wait_group((unsigned)N); }
static inline void ldsm_x4(uint32_t r[4], const void *smem) { emu_ptx::ldsm_x4(r, smem); }

// ---- wgmma (PTX ISA 9.7.15: "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate"; 9.7.15.5.1 the shared-memory matrix descriptor;
// 9.7.15.5 the register fragment of D for .m64nNk32 with .s32) -----------
// wgmma.mma_async.m64n128k32.s32.s8.s8 (and m64n64k32: the first 64 columns
// of the same fragment) with both operands in shared memory,
// K-major, 128-byte swizzle: element (row, k) of an operand lies at byte
// a = start + (row / 8) * SBO + (row % 8) * 128 + k with the bits 4-6 of a
// XORed by its bits 7-9 (the 128-byte swizzle pattern, on the shared
// address itself).  The product is asynchronous: here a thread's issue is
// queued with its commit group and computed when wgmma.wait_group lets
// the group complete (the latest the ISA allows), so shared memory
// rewritten before the wait, or accumulators read before it, show; and a
// wait that has a group to complete first lets the block's other threads
// run (as a spinning mbarrier wait does), so what they do meanwhile (a
// producer refilling a stage released before every lane's reads) shows.  D
// element 4j + e of lane l in warp w % 4 of the warpgroup: row 16 (w % 4)
// + l / 4 + 8 (e / 2), column 8 j + 2 (l % 4) + e % 2; int32 wrapping.
#define SI_HAVE_WGMMA 1
namespace emu_ptx {
struct wg_pend { int *d; uint64_t da, db; unsigned group; int n; };
inline std::vector<wg_pend> wgq[1024];
inline unsigned wg_committed[1024];
inline int8_t wg_elem(uint64_t desc, int row, int k, const char *what)
{
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0 || sbo != 1024) {
        fprintf(stderr, "emu: wgmma: %s descriptor %016llx: not 128-byte swizzle, base offset 0, SBO 1024\n", what, (unsigned long long)desc);
        abort();
    }
    uint32_t a = start + (uint32_t)(row / 8) * sbo + (uint32_t)(row % 8) * 128 + (uint32_t)k;
    a ^= ((a >> 7) & 7) << 4;
    if (a >= smem_bytes) { fprintf(stderr, "emu: wgmma: %s element (%d, %d) at %u outside the %zu B of shared memory\n", what, row, k, a, smem_bytes); abort(); }
    return ((const int8_t *)emu::dyn_smem())[a];
}
// (m64nNk32, N = p.n: the lane's two rows of A and N / 4 columns of B read
// once, at the wait, then the N / 2 sums)
inline void wg_apply(const wg_pend &p)
{
    const int lane = (int)(threadIdx.x & 31), wq = (int)((threadIdx.x >> 5) & 3);
    int8_t a[2][32], b[16][2][32];   // (N <= 128)
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 32; k++) a[h][k] = wg_elem(p.da, 16 * wq + lane / 4 + 8 * h, k, "A");
    for (int j = 0; j < p.n / 8; j++)
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 32; k++) b[j][c][k] = wg_elem(p.db, 8 * j + 2 * (lane % 4) + c, k, "B");
    for (int j = 0; j < p.n / 8; j++)
        for (int e = 0; e < 4; e++) {
            int64_t s = 0;
            for (int k = 0; k < 32; k++) s += (int64_t)a[e / 2][k] * b[j][e % 2][k];
            p.d[4 * j + e] = (int)((uint32_t)p.d[4 * j + e] + (uint32_t)s);
        }
}
inline void wg_mma(int *d, uint64_t da, uint64_t db, int n) { wgq[threadIdx.x].push_back({ d, da, db, wg_committed[threadIdx.x], n }); }
inline void wg_commit() { wg_committed[threadIdx.x]++; }

// ---- wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16 (cuda_attn_fa3.cu),
// from the ISA (9.7.15.5.1.1 register fragments; 9.7.15.5.1.2 shared
// memory matrix layout and its strides; 9.7.15.5.1.2.x the matrix
// descriptor).  Descriptor: start address >> 4 in bits 0-13, leading
// dimension byte offset (LBO) >> 4 in 16-29, stride dimension byte offset
// (SBO) >> 4 in 32-45, base offset in 49-51, swizzle mode in 62-63 (1:
// 128-byte); the other bits are zero.  Only the 128-byte swizzle with base
// offset 0 is emulated (anything else aborts): its swizzle atom is 8 rows
// of 128 bytes, 1024 bytes, the 16-byte chunk of bits 4-6 of an address
// XORed with the row of bits 7-9 (on the shared address itself), so the
// start must lie in an atom's first row.
//   K-major (A; B with imm-trans-b 0): row mn of the operand (M or N) is
//     128 bytes of K in an atom row; 8 rows an atom, the next 8 rows SBO
//     bytes on; LBO unused with swizzling; the k16 slice (32 bytes) must
//     lie inside the row (a k step moves the start by 32 bytes).
//   MN-major (B with imm-trans-b 1, allowed for f16): an atom row is 64
//     elements of N (128 bytes) at one k; 8 k an atom; the next 8 k SBO
//     bytes on ("stride dimension byte offset"), the next 64 of N LBO bytes
//     on ("leading dimension byte offset": for swizzled MN-major layouts
//     the stride from one (swizzle-bytes / 16) group of 16-byte rows of N
//     to the next); the start must be an atom row's first byte.
// A from registers (the RS form): a warp of the warpgroup holds the 16
// rows 16 (warp % 4) .. + 15 as mma.m16n8k16's A fragment (four f16x2:
// element i of 8 at row lane / 4 + 8 ((i / 2) % 2), column 2 (lane % 4) +
// i % 2 + 8 (i / 4)); the warp meets at the issue (.sync.aligned: every
// lane must come, each element given once) and each lane keeps its two
// rows.  D (f32): element 4 j + e at row 16 (warp % 4) + lane / 4 + 8 (e /
// 2), column 8 j + 2 (lane % 4) + e % 2.  As the s8 ones, the product is
// computed at the wgmma.wait_group that completes its group (shared
// memory read then); the sum is taken in double and rounded once.
struct wg16_pend { float *d; int n; uint64_t da, db; bool a_reg, tb; unsigned group; float a[2][16]; };
inline std::vector<wg16_pend> wg16q[1024];
struct wg16_warp { float A[16][16]; unsigned char na[16][16]; };
inline wg16_warp wg16w[32];
inline float wg16_elem(uint64_t desc, int mn, int k, bool mn_major, const char *what)
{
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4,
                   sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    const bool reserved = (desc & ((3ull << 14) | (3ull << 30) | (7ull << 46) | (0x3FFull << 52))) != 0;
    if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0 || reserved || ((start >> 7) & 7) != 0 || sbo == 0 || sbo % 1024) {
        fprintf(stderr, "emu: wgmma f16: %s descriptor %016llx: not a 128-byte swizzle with base offset 0, a start in an atom's first row and SBO a multiple of 1024\n", what, (unsigned long long)desc);
        abort();
    }
    uint32_t a;
    if (!mn_major) {
        if ((start & 127) + 32 > 128) { fprintf(stderr, "emu: wgmma f16: %s descriptor %016llx: the k16 slice crosses its 128-byte row\n", what, (unsigned long long)desc); abort(); }
        a = start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128 + (uint32_t)k * 2;
    } else {
        if ((start & 127) != 0 || lbo == 0 || lbo % 1024) { fprintf(stderr, "emu: wgmma f16: %s N-major descriptor %016llx: start not an atom row's first byte, or LBO not a multiple of 1024\n", what, (unsigned long long)desc); abort(); }
        a = start + (uint32_t)(mn / 64) * lbo + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128 + (uint32_t)(mn % 64) * 2;
    }
    a ^= ((a >> 7) & 7) << 4;
    if (a + 2 > smem_bytes) { fprintf(stderr, "emu: wgmma f16: %s element (%d, %d) at %u outside the %zu B of shared memory\n", what, mn, k, a, smem_bytes); abort(); }
    _Float16 h;
    memcpy(&h, (const char *)emu::dyn_smem() + a, 2);
    return (float)h;
}
inline void wg16_mma(float *d, int n, uint64_t da, const uint32_t *areg, uint64_t db, bool tb)
{
    const int lane = (int)(threadIdx.x & 31), w = (int)(threadIdx.x >> 5);
    const int gid = lane >> 2, tig = lane % 4;
    wg16_pend p;
    p.d = d; p.n = n; p.da = da; p.db = db; p.a_reg = areg != nullptr; p.tb = tb; p.group = wg_committed[threadIdx.x];
    if (areg) {
        wg16_warp &M = wg16w[w];
        for (int i = 0; i < 8; i++) {
            const int row = gid + (((i >> 1) & 1) ? 8 : 0), col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
            M.A[row][col] = half_of(areg[i / 2], i & 1);
            M.na[row][col]++;
        }
        __syncwarp();
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                if (M.na[r][c] != 1) { fprintf(stderr, "emu: wgmma f16 (A from registers): warp %d: A[%d][%d] given %d times (a lane missing or diverged?)\n", w, r, c, M.na[r][c]); abort(); }
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 16; k++) p.a[h][k] = M.A[gid + 8 * h][k];
        __syncwarp();
        if (lane == 0) memset(M.na, 0, sizeof M.na);
        __syncwarp();
    }
    wg16q[threadIdx.x].push_back(p);
}
inline void wg16_apply(wg16_pend &p)
{
    const int lane = (int)(threadIdx.x & 31), wq = (int)((threadIdx.x >> 5) & 3);
    const int gid = lane >> 2, tig = lane % 4;
    if (!p.a_reg)
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 16; k++) p.a[h][k] = wg16_elem(p.da, 16 * wq + gid + 8 * h, k, false, "A");
    for (int j = 0; j < p.n / 8; j++)
        for (int c = 0; c < 2; c++) {
            float b[16];
            for (int k = 0; k < 16; k++) b[k] = wg16_elem(p.db, 8 * j + 2 * tig + c, k, p.tb, "B");
            for (int h = 0; h < 2; h++) {
                double s = p.d[4 * j + 2 * h + c];
                for (int k = 0; k < 16; k++) s += (double)p.a[h][k] * (double)b[k];
                p.d[4 * j + 2 * h + c] = (float)s;
            }
        }
}
inline void wg_wait(unsigned n)
{
    if (!wgq[threadIdx.x].empty() || !wg16q[threadIdx.x].empty())
        emu::spin();
    auto &v = wgq[threadIdx.x];
    std::vector<wg_pend> keep;
    for (auto &p : v) {
        if (p.group + n < wg_committed[threadIdx.x]) wg_apply(p);
        else keep.push_back(p);
    }
    v.swap(keep);
    auto &v16 = wg16q[threadIdx.x];
    std::vector<wg16_pend> keep16;
    for (auto &p : v16) {
        if (p.group + n < wg_committed[threadIdx.x]) wg16_apply(p);
        else keep16.push_back(p);
    }
    v16.swap(keep16);
}
inline void wg_check_drained()
{
    for (int t = 0; t < 1024; t++)
        if (!wgq[t].empty() || !wg16q[t].empty()) { fprintf(stderr, "emu: thread %d exited with %zu wgmma not waited for\n", t, wgq[t].size() + wg16q[t].size()); abort(); }
}
}
// mbarriers (PTX ISA 9.7.13.15): the 8 bytes in shared memory hold the
// emulator's state (expected count, pending count, phase parity); a wait
// spins, letting the block's other threads run, and gives up (a deadlock)
// after EMU_MBAR_SPINS rounds.  cp.async.mbarrier.arrive.noinc lands the
// thread's copies issued so far and arrives (the earliest the ISA allows).
namespace emu_ptx {
struct mbar { uint32_t expected; uint32_t pending : 31, phase : 1; };
inline mbar *mbar_at(uint32_t s, const char *what)
{
    if (s % 8 || s + 8 > smem_bytes) { fprintf(stderr, "emu: %s: mbarrier address %u not 8-aligned in the %zu B of shared memory\n", what, s, smem_bytes); abort(); }
    return (mbar *)((char *)emu::dyn_smem() + s);
}
inline void mbar_arrive(uint32_t s, const char *what)
{
    mbar *m = mbar_at(s, what);
    if (m->expected == 0 || m->expected > 1024) { fprintf(stderr, "emu: %s: mbarrier at %u not initialised\n", what, s); abort(); }
    if (--m->pending == 0) { m->phase ^= 1; m->pending = m->expected; }
}
}
static inline void mbar_init(uint32_t s, unsigned count)
{ emu_ptx::mbar *m = emu_ptx::mbar_at(s, "mbarrier.init"); m->expected = count; m->pending = count; m->phase = 0; }
static inline void fence_mbar_init() {}
static inline void mbar_arrive(uint32_t s) { emu_ptx::mbar_arrive(s, "mbarrier.arrive"); }
static inline void mbar_wait(uint32_t s, uint32_t parity)
{
    for (long n = 0; emu_ptx::mbar_at(s, "mbarrier.try_wait")->phase == (parity & 1); n++) {
        if (n > 1000000) { fprintf(stderr, "emu: mbarrier.try_wait.parity %u at %u: never completes (thread %u)\n", parity, s, threadIdx.x); abort(); }
        emu::spin();
    }
}
static inline void cp_async_mbar_arrive(uint32_t s) { emu_ptx::wait_all(); emu_ptx::mbar_arrive(s, "cp.async.mbarrier.arrive.noinc"); }
// bar.sync / bar.arrive on named barriers 1..15 (9.7.13.1): a barrier
// completes when n threads have arrived (the syncing ones included), and
// its syncing threads go on; a sync that never completes aborts.
namespace emu_ptx {
struct nbar { int arrived; unsigned gen; };
inline nbar nbars[16];
inline void nb_arrive(int id, int n, const char *what)
{
    if (id < 1 || id > 15 || n % 32 || n < 32 || n > (int)(blockDim.x * blockDim.y * blockDim.z)) {
        fprintf(stderr, "emu: %s %d, %d: bad barrier or count\n", what, id, n);
        abort();
    }
    if (++nbars[id].arrived == n) { nbars[id].arrived = 0; nbars[id].gen++; }
}
}
static inline void named_arrive(int id, int n) { emu_ptx::nb_arrive(id, n, "bar.arrive"); }
static inline void named_sync(int id, int n)
{
    const unsigned g = emu_ptx::nbars[id & 15].gen;
    emu_ptx::nb_arrive(id, n, "bar.sync");
    for (long k = 0; emu_ptx::nbars[id].gen == g; k++) {
        if (k > 1000000) { fprintf(stderr, "emu: bar.sync %d, %d: never completes (thread %u)\n", id, n, threadIdx.x); abort(); }
        emu::spin();
    }
}
static inline void wg_regs_dec() {}
static inline void wg_regs_inc() {}
template <int N> static inline void wg_regs_dec_to() {}
template <int N> static inline void wg_regs_inc_to() {}
static inline void wg_fence() {}
static inline void fence_proxy_async() {}
static inline void wg_commit() { emu_ptx::wg_commit(); }
template <int N> static inline void wg_wait() { emu_ptx::wg_wait((unsigned)N); }
static inline void wg_mma_s8_n128(int (&d)[64], uint64_t da, uint64_t db) { emu_ptx::wg_mma(d, da, db, 128); }
static inline void wg_mma_s8_n64(int (&d)[32], uint64_t da, uint64_t db) { emu_ptx::wg_mma(d, da, db, 64); }
// cuda_attn_fa3.cu's (f16, f32 accumulate; d[j][e] = element 4 j + e)
static inline void wg_mma_f16_n64(float (&d)[8][4], uint64_t da, uint64_t db) { emu_ptx::wg16_mma(&d[0][0], 64, da, nullptr, db, false); }
template <int TB> static inline void wg_mma_f16_n128_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) { emu_ptx::wg16_mma(&d[0][0], 128, 0, a, db, TB != 0); }
template <int TB> static inline void wg_mma_f16_n256_rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t db) { emu_ptx::wg16_mma(&d[0][0], 256, 0, a, db, TB != 0); }
template <int N> static inline void wg_fence_acc(float (&)[N][4]) {}
// cuda_attn_fa3.cu's overlap: P's registers kept live across a wgmma (no
// code on the host: the A operand was copied at the issue)
template <int N> static inline void wg_fence_areg(uint32_t (&)[N][4]) {}

// mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 with C = D (the P.V of
// plugins/attn_mma_i8's v2): the .u8 A fragment has the .s8 one's layout
// (PTX ISA 9.7.14.5.10: one table for .u8/.s8), so it is emulated through
// mma_s8: a u8 element x is (x - 128) + 128, x - 128 being x's byte with
// its top bit flipped read as s8; D += A' B + 128 (1 B), A' = the flipped
// bytes, 1 = all-ones bytes (each product checked element by element).
static inline void mma_k32_u8acc(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    const uint32_t b[2] = { b0, b1 }, af[4] = { a[0] ^ 0x80808080u, a[1] ^ 0x80808080u, a[2] ^ 0x80808080u, a[3] ^ 0x80808080u };
    const uint32_t ones[4] = { 0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u };
    int x[4], y[4];
    emu_ptx::mma_s8(32, x, af, b);
    emu_ptx::mma_s8(32, y, ones, b);
    for (int i = 0; i < 4; i++) d[i] = (int)((uint32_t)d[i] + (uint32_t)x[i] + 128u * (uint32_t)y[i]);
}
