// backends/cuda_sm120/cuda_attn_fa3.cu — v3 of the flash-attention prefill
// core (knob attn_fa_tile = v3; cuda_attn_fa.cu has v1, v2, the plan and
// the per-row arithmetic): the same rows, passes, splits and partials as
// v2, with the products on Hopper's warpgroup MMA (wgmma, sm_90a code
// only: SI_HAVE_WGMMA; si_cu_fa_plan takes v2 wherever v3 cannot run).
//
// Why: v2's next bound is shared-memory bandwidth.  Each of its warps (16
// rows) reloads the K and V fragments of a tile by ldmatrix (144
// ldmatrix.x4 per 256 mma.sync), so every K/V byte crosses the shared
// memory port 8 times a tile; ~65% of the mma.sync peak at best, and
// mma.sync itself is ~2/3 of the f16 dense peak (989 TFLOPS) that only
// wgmma reaches.  A warpgroup's wgmma reads its B operand (K for S = Q K^T,
// V for O += P V) once for 64 rows, straight from shared memory through a
// descriptor, and A either from shared memory (Q) or from registers (P:
// the softmax of S, already in the lanes that hold S: the m64nN
// accumulator fragment of 4 columns a lane is, per 16 columns, exactly the
// m16n8k16 A fragment wgmma takes from registers).
//
// Block = (query head, tile of FA3_BM = 128 tokens, split), the grid,
// plan and launch order of v2 (head fastest, last tile first), 384
// threads in three warpgroups:
//   WG2, the producer (setmaxnreg down to FA3_REGS_P): streams the K and
//     V tiles (64 positions each) of every pass through a two-stage ring,
//     cp.async 16-byte copies (rows past the pass's last position
//     zero-filled by the copy itself: src-size 0), each stage's "full"
//     mbarrier completing when its 128 threads' copies land, refilling a
//     stage once its "empty" mbarrier says the 8 consumer warps are done;
//   WG0 and WG1, the consumers (setmaxnreg up to FA3_REGS_C), rows 64 w ..
//     64 w + 63: make their q rows exactly as v2 (fa_q_rows: norm and rope
//     in f32, then f16), then per tile S = Q K^T (D / 16 wgmma
//     m64n64k16, A and B K-major), v2's online softmax on the S fragment
//     (fa_softmax: the same scale, masks and f16 P), O's rescale skipped
//     where no maximum moved, O += P V (4 wgmma m64nDk16, A = P from
//     registers, B = V N-major through the transpose bit), and at the end
//     v2's store (fa_store: out, or the split partials of combine_kernel).
// Registers: O 64 x D f32 = D / 2 a thread (128 at hd 256), S 32, P 16.
// Shared memory (hd 256): Q 64 KiB + 2 stages x (K 32 + V 32) KiB + the q
// rows' f32 scratch 8 KiB + the ring's mbarriers (fa3_geom).
// Layouts (PTX ISA 9.7.15.5.1.2, "Shared Memory Matrix Layout", 128-byte
// swizzle: the swizzle atom is 8 rows of 128 bytes, 1024-aligned, 16-byte
// chunk c of row r at c ^ (r % 8)).  Q, K and V are all stored alike:
// slabs of 64 dims (128 bytes a row), one row per token / position, slab
// after slab.  For S, Q (M x K) and K (N x K) are K-major, the canonical
// layout cuda_wg.cuh's wg_desc describes (SBO 1024: the next 8 rows; LBO
// unused); a k16 step is + 32 bytes in a row, every 4 steps the next slab.
// For O += P V, B = V is K (positions) x N (dims) with N contiguous:
// N-major, imm-trans-b = 1 (allowed for f16), whose 128-byte-swizzle atom
// is 8 K rows of 64 N elements; per the ISA's stride table ("Leading
// dimension byte offset", MN-major, swizzled: the stride from one atom's
// (swizzle-bytes / 16) 16-byte rows of N to the next, i.e. the next 64
// dims: a slab, 8 KiB; "Stride dimension byte offset", MN-major: the next
// 8 rows of K, 1024 bytes) fa3_desc_mn; a k16 step (16 positions) is +
// 2048 bytes.  tests/cuda/emu/ptx_emu.h decodes the descriptors from the
// ISA's text, not from this comment.
// A warpgroup whose rows all end before a tile (causal) skips its products
// as v2's warps do (but still takes and releases the stage); wgmma is
// warpgroup-wide, so the test is the warpgroup's last key (fa3_wg_last),
// made warp-uniform by a shuffle (a branch the compiler cannot prove
// uniform around wgmma serialises it: ptxas C7520).
// Knob attn_fa3_overlap (fa3_kernel<D, true>, default on: H200 9b 32k prompt +0.5%): each
// warpgroup's softmax of a tile runs while the tile before's P V is on
// the tensor cores (the overlap's pieces below say how; v3's bits in the
// emulator).  Not done (next steps if the GPU says so): the two consumer
// warpgroups taking turns on the tensor cores (w8wg's ping-pong), TMA.
// Numerics: per row the products and sums differ from v2's only in the
// tensor cores' summation order; the emulator checks v3 against the
// double reference (1e-3 of max |out|) and against v2.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_attn.cuh"
#include "cuda_ptx.cuh"
#include "cuda_attn_fa.cuh"
#include "cuda_wg.cuh"   // wg_desc, wg_ring_start

#define FA3_BM      128   /* query rows (tokens) per block: 64 per consumer warpgroup */
#define FA3_THREADS 384   /* two consumer warpgroups, then the producer               */
// setmaxnreg: the block's pool is 384 x 168 (65536 / 384 rounded down to
// 8, __launch_bounds__(384, 1)); the producer's copy loop needs few
#define FA3_REGS_P  24
#define FA3_REGS_C  240
static_assert(128 * FA3_REGS_P + 256 * FA3_REGS_C <= 384 * 168, "setmaxnreg: more than the block's pool");

// Shared memory (bytes from the 1024-aligned base): Q as D / 64 slabs of
// [128 rows][128 B]; two stages of (K, V), each D / 64 slabs of [64
// rows][128 B]; the consumer warps' q-row scratch (8 x D f32); the ring's
// mbarriers: full[2] then empty[2] (v3), or full K[2], V[2] then empty
// K[2], V[2] (the overlap: its K and V released apart).  + 1 KiB: the base
// is aligned up in the kernel.
template <int D> struct fa3_geom {
    static constexpr uint32_t SLAB_Q = FA3_BM * 128, SLAB_T = FA_BN * 128;
    static constexpr uint32_t KV = (D / 64) * SLAB_Q;
    static constexpr uint32_t V = (D / 64) * SLAB_T;   // V after K in a stage
    static constexpr uint32_t STAGE = 2 * V;
    static constexpr uint32_t XS = KV + 2 * STAGE;
    static constexpr uint32_t BARS = XS + 8 * D * 4;
    static constexpr uint32_t SMEM = BARS + 64 + 1024;
};

// Element offset of chunk c (8 halves) of q row r in the slabs (fa_q_rows).
template <int D> struct fa3_q_at {
    __device__ __forceinline__ int operator()(int r, int c) const
    {
        return ((c >> 3) * fa3_geom<D>::SLAB_Q + r * 128 + (((c & 7) ^ (r & 7)) << 4)) >> 1;
    }
};

// ---- PTX wrappers (sm_90a; tests/cuda/emu/ptx_emu.h has the host ones) ----
// 16 bytes global -> shared, or with valid false 16 zero bytes and no read
// (src-size 0); completes like any cp.async (cp_async_mbar_arrive).
__device__ __forceinline__ void cp_async16_zf(void *smem, const void *g, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(g), "r"(valid ? 16 : 0) : "memory");
}
#if defined(SI_HAVE_WGMMA)

// The accumulators d are in flight between a wgmma and its wait: this
// keeps the compiler from moving their reads and writes across (no code).
template <int N> __device__ __forceinline__ void wg_fence_acc(float (&d)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[i][e])::"memory");
}

// P's registers (the A operand from registers) are read by a wgmma until
// its wait: this keeps them live, and unchanged, until there (no code).
template <int N> __device__ __forceinline__ void wg_fence_areg(uint32_t (&a)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+r"(a[i][e])::"memory");
}

// D[64 x 64] += A[64 x 16] B[64 x 16]^T, f16 x f16 -> f32 (S = Q K^T): A
// (Q) and B (K) both K-major from descriptors (imm-trans-a = imm-trans-b
// = 0), scale-d 1 (D accumulates), scale-a = scale-b = 1.  d[j][e]: row 16
// (warp % 4) + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2.
__device__ __forceinline__ void wg_mma_f16_n64(float (&d)[8][4], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                   "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
                   "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                   "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db));
}

// D[64 x 128] += A[64 x 16] B[16 x 128], f16 x f16 -> f32 (O += P V): A (P)
// from registers (a: the mma.m16n8k16 A fragment of the warp's 16 rows),
// B (V) from a descriptor, K-major (TB, imm-trans-b, 0) or N-major (1,
// allowed for f16); d as wg_mma_f16_n64's.
template <int TB>
__device__ __forceinline__ void wg_mma_f16_n128_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, 1, 1, 1, %69;"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                   "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
                   "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                   "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
                   "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
                   "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                   "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));
}

// D[64 x 256] += A[64 x 16] B[16 x 256], f16 x f16 -> f32 (O += P V): A (P)
// from registers (a: the mma.m16n8k16 A fragment of the warp's 16 rows),
// B (V) from a descriptor, K-major (TB, imm-trans-b, 0) or N-major (1,
// allowed for f16); d as wg_mma_f16_n64's.
template <int TB>
__device__ __forceinline__ void wg_mma_f16_n256_rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, 1, 1, 1, %133;"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                   "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                   "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
                   "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                   "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
                   "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
                   "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]),
                   "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]),
                   "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]),
                   "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), "+f"(d[16][0]), "+f"(d[16][1]),
                   "+f"(d[16][2]), "+f"(d[16][3]), "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]),
                   "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), "+f"(d[19][0]), "+f"(d[19][1]),
                   "+f"(d[19][2]), "+f"(d[19][3]), "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]),
                   "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), "+f"(d[22][0]), "+f"(d[22][1]),
                   "+f"(d[22][2]), "+f"(d[22][3]), "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]),
                   "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), "+f"(d[25][0]), "+f"(d[25][1]),
                   "+f"(d[25][2]), "+f"(d[25][3]), "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]),
                   "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), "+f"(d[28][0]), "+f"(d[28][1]),
                   "+f"(d[28][2]), "+f"(d[28][3]), "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]),
                   "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), "+f"(d[31][0]), "+f"(d[31][1]),
                   "+f"(d[31][2]), "+f"(d[31][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));
}
#endif
// ---- end of PTX wrappers ----

// The shared-memory matrix descriptor of V's N-major tile at saddr (see
// the header comment): start >> 4 in bits 0-13, the leading byte offset
// (the next 64 dims: a slab) >> 4 in 16-29, the stride byte offset (the
// next 8 positions: 1024) >> 4 in 32-45, 128-byte swizzle (1) in 62-63.
__device__ __forceinline__ uint64_t fa3_desc_mn(uint32_t saddr)
{
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((FA_BN * 128) >> 4) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

// The producer's share (thread t of 128) of one tile: the pass's rows j0
// .. j0 + 63 of the cache at base (step halves apart) into the slabs at
// dst, 16-byte chunk c of row r at its swizzled place; rows at or past
// k_hi zero-filled (never read: unwritten, or another split's).  Thread t
// takes chunk t % (D / 8) of every (128 / (D / 8))-th row, so a warp reads
// whole rows (coalesced).  Not unrolled: the producer has few registers.
template <int D>
__device__ __forceinline__ void fa3_load_tile(uint8_t *dst, const __half *base, uint64_t step, int j0, int k_hi, int t)
{
    constexpr int CPR = D / 8, RSTEP = 128 / CPR;
    const int c = t % CPR;
    uint8_t *d = dst + (c >> 3) * fa3_geom<D>::SLAB_T;
    const __half *g = base + (uint64_t)j0 * step + c * 8;
#pragma unroll 1
    for (int r = t / CPR; r < FA_BN; r += RSTEP) {
        const bool in = j0 + r < k_hi;
        cp_async16_zf(d + r * 128 + (((c & 7) ^ (r & 7)) << 4), in ? g + (uint64_t)r * step : base, in);
    }
}

// The last key any row of consumer warpgroup wg needs in the pass (-1:
// none), the same in every lane (a shuffle: see the header comment).  The
// pass's rows are those of its sequence with a position in this split
// (fa_next_pass takes all of them at once).
__device__ __forceinline__ int fa3_wg_last(const fa_pass &ps, const int32_t *seq_s, const int32_t *pos_s, int wg, int c0)
{
    int mx = -1;
    for (int r = 64 * wg; r < 64 * wg + 64; r++)
        if (seq_s[r] == ps.seq && pos_s[r] >= c0 && pos_s[r] > mx)
            mx = pos_s[r];
    mx = mx < ps.k_hi - 1 ? mx : ps.k_hi - 1;
    return __shfl_sync(0xffffffffu, mx, 0);
}

// O += P V for consumer warpgroup rows: P (the lane's S fragment, now
// probabilities) rounded to f16 as the m16n8k16 A fragment of each 16
// keys (v2's fa_pv packing), V N-major from descriptor dv (+ 2048 bytes a
// k16 step).  Issues, commits and waits.
#if defined(SI_HAVE_WGMMA)
template <int D> __device__ __forceinline__ void fa3_pv(float (&o)[D / 8][4], const float (&s)[FA_BN / 8][4], uint64_t dv)
{
    uint32_t pa[FA_BN / 16][4];
#pragma unroll
    for (int kv = 0; kv < FA_BN / 16; kv++) {
        pa[kv][0] = pack_h2(s[2 * kv][0], s[2 * kv][1]);
        pa[kv][1] = pack_h2(s[2 * kv][2], s[2 * kv][3]);
        pa[kv][2] = pack_h2(s[2 * kv + 1][0], s[2 * kv + 1][1]);
        pa[kv][3] = pack_h2(s[2 * kv + 1][2], s[2 * kv + 1][3]);
    }
    wg_fence_acc(o);
    wg_fence();
#pragma unroll
    for (int kv = 0; kv < FA_BN / 16; kv++) {
        if constexpr (D == 256)
            wg_mma_f16_n256_rs<1>(o, pa[kv], dv + kv * (2048 >> 4));   // V N-major
        else
            wg_mma_f16_n128_rs<1>(o, pa[kv], dv + kv * (2048 >> 4));
    }
    wg_commit();
    wg_wait<0>();
    wg_fence_acc(o);
}

// ---- the overlap (knob attn_fa3_overlap; fa3_kernel<D, true>) ----
// Plain v3 leaves the tensor cores idle while a warpgroup does its
// softmax (every product waited for before the next step), and the
// softmax units idle while it waits.  The overlap keeps one product in
// flight across the softmax: per tile j a warpgroup issues S(j) = Q K(j)^T
// and then O += P(j-1) V(j-1) (the tile before's, P kept in registers as
// f16), waits for S(j) only (wait_group 1: the older group), releases
// K(j), runs the softmax of S(j) while P(j-1) V(j-1) runs, then waits for
// that (wait_group 0), releases V(j-1), rescales O and packs P(j).  The
// rows' arithmetic is v3's in v3's order (O scaled by tile j's factor
// after tile j-1's P V and before tile j's), so the same bits.  Registers:
// O (D / 2), S 32 and P 16 a thread (no second S: ~176 at hd 256 of
// FA3_REGS_C).  K(j) and V(j-1) are read at once, so the ring releases K
// and V apart (full / empty K[2], V[2]; the stages and their 192 KiB as
// v3's): K(j+2) may land as soon as S(j) completed, V(j+1) once P(j-1)
// V(j-1) did, so the producer stays a tile ahead (one ring of K + V per
// tile would free a stage only after P V, a tile late).  Tile n of the
// block (counted over passes) is in stage n % 2, its phase parity n / 2 %
// 2, on both sides.

// A warp's release of a stage's K or V (the empty barrier counts the 8
// consumer warps), once every lane's wgmma reading it completed.
__device__ __forceinline__ void fa3_release(uint32_t bar)
{
    __syncwarp();
    if ((threadIdx.x & 31) == 0)
        mbar_arrive(bar);
}

// P(j) as the m16n8k16 A fragments of its 16-key steps (fa3_pv's packing).
__device__ __forceinline__ void fa3_pack_p(uint32_t (&pa)[FA_BN / 16][4], const float (&s)[FA_BN / 8][4])
{
#pragma unroll
    for (int kv = 0; kv < FA_BN / 16; kv++) {
        pa[kv][0] = pack_h2(s[2 * kv][0], s[2 * kv][1]);
        pa[kv][1] = pack_h2(s[2 * kv][2], s[2 * kv][3]);
        pa[kv][2] = pack_h2(s[2 * kv + 1][0], s[2 * kv + 1][1]);
        pa[kv][3] = pack_h2(s[2 * kv + 1][2], s[2 * kv + 1][3]);
    }
}

// Issues S = Q K^T (as v3's loop in fa3_kernel: a k16 step is + 32 bytes
// along the row, a slab every 4; fenced, committed and waited for by the
// caller).
template <int D> __device__ __forceinline__ void fa3_s_issue(float (&s)[FA_BN / 8][4], uint64_t dq, uint64_t dk)
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        wg_mma_f16_n64(s, dq + (((kk >> 2) * fa3_geom<D>::SLAB_Q + (kk & 3) * 32) >> 4),
                       dk + (((kk >> 2) * fa3_geom<D>::SLAB_T + (kk & 3) * 32) >> 4));
}

// Issues O += P V (V N-major from dv; fenced, committed and waited for by
// the caller).
template <int D>
__device__ __forceinline__ void fa3_pv_issue(float (&o)[D / 8][4], const uint32_t (&pa)[FA_BN / 16][4], uint64_t dv)
{
#pragma unroll
    for (int kv = 0; kv < FA_BN / 16; kv++) {
        if constexpr (D == 256)
            wg_mma_f16_n256_rs<1>(o, pa[kv], dv + kv * (2048 >> 4));
        else
            wg_mma_f16_n128_rs<1>(o, pa[kv], dv + kv * (2048 >> 4));
    }
}

// The pending P V of tile n alone (a pass's last tile, or before tiles
// the warpgroup skips): waits for its V, issues, waits, releases V.
template <int D>
__device__ __forceinline__ void fa3_pv_flush(float (&o)[D / 8][4], uint32_t (&pa)[FA_BN / 16][4], uint32_t v0,
                                             uint32_t full_v, uint32_t empty_v, int n)
{
    const int st = n & 1;
    mbar_wait(full_v + 8 * st, (uint32_t)(n >> 1) & 1);
    fence_proxy_async();
    wg_fence_acc(o);
    wg_fence();
    fa3_pv_issue<D>(o, pa, fa3_desc_mn(v0 + st * fa3_geom<D>::STAGE));
    wg_commit();
    wg_wait<0>();
    wg_fence_acc(o);
    wg_fence_areg(pa);
    fa3_release(empty_v + 8 * st);
}
#endif
// ---- end of the overlap's pieces ----

template <int D, bool OV>
__global__ void __launch_bounds__(FA3_THREADS, 1) fa3_kernel(cu_attn a, int32_t chunk, int n_split)
{
#if defined(SI_HAVE_WGMMA)
    using G = fa3_geom<D>;
    extern __shared__ __align__(16) uint8_t fa3_sm_raw[];
    // (the swizzle is a function of the shared address: slabs at 1024)
    uint8_t *sm = fa3_sm_raw + ((1024 - (smem_u32(fa3_sm_raw) & 1023)) & 1023);
    __shared__ int32_t seq_s[FA3_BM], pos_s[FA3_BM];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
    const int64_t t0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * FA3_BM;
    const int h = blockIdx.x, g = h / (a.n_head / a.n_head_kv), sp = blockIdx.z;
    const int c0 = sp * chunk, c1 = c0 + chunk;   // this split's positions [c0, c1)

    fa_tile_rows<FA3_BM, FA3_THREADS>(a, t0, seq_s, pos_s);
    const fa_rows skip = fa_rows_before<FA3_BM>(pos_s, c0);
    if (skip.all())
        return;
    fa_rows done = skip;
    // this lane's two rows (the producer's are dummies: its lim is unused)
    const int rl[2] = { (warp & 7) * 16 + gid, (warp & 7) * 16 + gid + 8 };
    const uint64_t step = (uint64_t)a.n_head_kv * D;
    const uint32_t full = smem_u32(sm + G::BARS), empty = full + (OV ? 32 : 16);
    fa_pass ps;
    fa_next_pass<FA3_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
    // (the overlap: full K[2] at full, V[2] at full + 16; empty likewise)
    const int role = wg_ring_start(full, empty, OV ? 4 : 2);
    // Both sides walk the same passes and tiles; tile i of the block goes
    // to stage i % 2 (phase parity ph flips every second tile), across
    // passes too.
    int st = 0;
    uint32_t ph = 0;

    if (role == 2 && OV) {
        // the overlap's producer: K, then V of each tile, each into its
        // stage once that stage's K (or V) two tiles before is released
        wg_regs_dec_to<FA3_REGS_P>();
        const int t = threadIdx.x - 256;
        int n = 0;
        for (;;) {
            for (int j0 = c0; j0 < ps.k_hi; j0 += FA_BN, n++) {
                const int s2 = n & 1;
                const uint32_t par = (uint32_t)(n >> 1) & 1;
                uint8_t *k = sm + G::KV + s2 * G::STAGE;
                if (n >= 2)
                    mbar_wait(empty + 8 * s2, par ^ 1);
                fa3_load_tile<D>(k, ps.kg, step, j0, ps.k_hi, t);
                cp_async_mbar_arrive(full + 8 * s2);
                if (n >= 2)
                    mbar_wait(empty + 16 + 8 * s2, par ^ 1);
                fa3_load_tile<D>(k + G::V, ps.vg, step, j0, ps.k_hi, t);
                cp_async_mbar_arrive(full + 16 + 8 * s2);
            }
            if (done.all())
                break;
            fa_next_pass<FA3_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
        }
        cp_async_wait_all();
        return;
    }
    if (role == 2) {
        wg_regs_dec_to<FA3_REGS_P>();
        const int t = threadIdx.x - 256;
        int n = 0;
        for (;;) {
            for (int j0 = c0; j0 < ps.k_hi; j0 += FA_BN, n++) {
                if (n >= 2)
                    mbar_wait(empty + 8 * st, ph ^ 1);   // the consumers released its tile before
                uint8_t *k = sm + G::KV + st * G::STAGE;
                fa3_load_tile<D>(k, ps.kg, step, j0, ps.k_hi, t);
                fa3_load_tile<D>(k + G::V, ps.vg, step, j0, ps.k_hi, t);
                cp_async_mbar_arrive(full + 8 * st);   // (when this thread's copies land)
                ph ^= st;
                st ^= 1;
            }
            if (done.all())
                break;
            fa_next_pass<FA3_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
        }
        cp_async_wait_all();
        return;
    }

    wg_regs_inc_to<FA3_REGS_C>();
    const int wg = role;
    // 1. the warp's 16 q rows into the slabs; the warpgroup's 64 rows
    // written (and made visible to the async proxy) before its wgmma
    fa_q_rows<D>(a, (__half *)sm, (float *)(sm + G::XS) + warp * D, t0, h, skip, fa3_q_at<D>());
    fence_proxy_async();
    named_sync(1 + wg, 128);

    float o[D / 8][4];
#pragma unroll
    for (int d = 0; d < D / 8; d++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[d][j] = 0.0f;
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
    const float sl2 = 1.4426950408889634f / sqrtf((float)D);   // log2(e) / sqrt(hd)
    const uint64_t dq = wg_desc(smem_u32(sm) + wg * 64 * 128);
    const uint32_t kv0 = smem_u32(sm + G::KV);

    // 2./3. once per sequence among the rows (one pass for a plain prefill)
    // (v3's loop first, then the overlap's: run-fa-emu.sh's v3 plants edit
    // the first match)
    if constexpr (!OV)
    for (;;) {
        const int k_hi = __shfl_sync(0xffffffffu, ps.k_hi, 0), last = fa3_wg_last(ps, seq_s, pos_s, wg, c0);
        for (int j0 = c0; j0 < k_hi; j0 += FA_BN) {
            mbar_wait(full + 8 * st, ph);   // the tile is in stage st
            fence_proxy_async();            // (copied through the generic proxy; wgmma reads through the async one)
            if (j0 <= last) {               // else every row of the warpgroup ends before the tile
                const uint32_t ks = kv0 + st * G::STAGE;
                const uint64_t dk = wg_desc(ks), dv = fa3_desc_mn(ks + G::V);
                float s[FA_BN / 8][4], f[2];
#pragma unroll
                for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        s[nt][j] = 0.0f;
                wg_fence_acc(s);
                wg_fence();
                // k16 step kk: + 32 bytes along the row, a slab every 4
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++)
                    wg_mma_f16_n64(s, dq + (((kk >> 2) * G::SLAB_Q + (kk & 3) * 32) >> 4),
                                   dk + (((kk >> 2) * G::SLAB_T + (kk & 3) * 32) >> 4));
                wg_commit();
                wg_wait<0>();
                wg_fence_acc(s);
                fa_softmax(s, m, l, f, j0, ps, tig, sl2);
                if (f[0] != 1.0f || f[1] != 1.0f)   // a row maximum moved (O * 1 is O)
                    fa_rescale<D>(o, f);
                fa3_pv<D>(o, s, dv);
            }
            __syncwarp();   // every lane's wgmma of the stage completed
            if (lane == 0)
                mbar_arrive(empty + 8 * st);
            ph ^= st;
            st ^= 1;
        }
        if (done.all())
            break;
        fa_next_pass<FA3_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
    }
    else {
        // the overlap (see its pieces above); tile n of the block, pend:
        // P of tile n - 1 in pa, its P V not issued yet (warp-uniform)
        const uint32_t full_k = full, full_v = full + 16, empty_k = empty, empty_v = empty + 16;
        int n = 0;
        for (;;) {
            const int k_hi = __shfl_sync(0xffffffffu, ps.k_hi, 0), last = fa3_wg_last(ps, seq_s, pos_s, wg, c0);
            uint32_t pa[FA_BN / 16][4];
            bool pend = false;
            for (int j0 = c0; j0 < k_hi; j0 += FA_BN, n++) {
                const int sk = n & 1;
                const uint32_t par = (uint32_t)(n >> 1) & 1, ks = kv0 + sk * G::STAGE;
                mbar_wait(full_k + 8 * sk, par);   // K(n) is in stage sk
                if (j0 <= last) {
                    if (pend)   // V(n - 1), in the other stage
                        mbar_wait(full_v + 8 * (sk ^ 1), (uint32_t)((n - 1) >> 1) & 1);
                    fence_proxy_async();
                    const uint64_t dk = wg_desc(ks);
                    float s[FA_BN / 8][4], f[2];
#pragma unroll
                    for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            s[nt][j] = 0.0f;
                    wg_fence_acc(s);
                    wg_fence_acc(o);
                    // (each way whole in its branch: ptxas cannot tell that
                    // a second `if (pend)` takes the first's way, and
                    // would see O read while P V may be in flight, C7514,
                    // nor a fence before the branch as the P V's: C7519)
                    if (pend) {
                        const uint64_t dv = fa3_desc_mn(kv0 + (sk ^ 1) * G::STAGE + G::V);
                        wg_fence();
                        fa3_s_issue<D>(s, dq, dk);
                        wg_commit();   // group: S(n)
                        fa3_pv_issue<D>(o, pa, dv);
                        wg_commit();   // group: P(n-1) V(n-1), after S(n)
                        wg_wait<1>();  // S(n) done, P V may run on
                        wg_fence_acc(s);
                        fa3_release(empty_k + 8 * sk);   // K(n) read
                        fa_softmax(s, m, l, f, j0, ps, tig, sl2);
                        wg_wait<0>();
                        wg_fence_acc(o);
                        wg_fence_areg(pa);
                        fa3_release(empty_v + 8 * (sk ^ 1));   // V(n - 1) read
                    } else {
                        wg_fence();
                        fa3_s_issue<D>(s, dq, dk);
                        wg_commit();
                        wg_wait<0>();
                        wg_fence_acc(s);
                        fa3_release(empty_k + 8 * sk);
                        fa_softmax(s, m, l, f, j0, ps, tig, sl2);
                    }
                    if (f[0] != 1.0f || f[1] != 1.0f)   // a row maximum moved (O * 1 is O)
                        fa_rescale<D>(o, f);
                    fa3_pack_p(pa, s);
                    pend = true;
                } else {
                    // every row of the warpgroup ends before the tile (and
                    // every later one): the pending P V first (its V stage
                    // is the next tile's), then K(n) and V(n) released
                    // once landed (a release before would count towards
                    // the stage's fill before)
                    if (pend)
                        fa3_pv_flush<D>(o, pa, kv0 + G::V, full_v, empty_v, n - 1);
                    pend = false;
                    fa3_release(empty_k + 8 * sk);
                    mbar_wait(full_v + 8 * sk, par);
                    fa3_release(empty_v + 8 * sk);
                }
            }
            if (pend)   // the pass's last tile
                fa3_pv_flush<D>(o, pa, kv0 + G::V, full_v, empty_v, n - 1);
            if (done.all())
                break;
            fa_next_pass<FA3_BM, D>(a, done, seq_s, pos_s, c1, g, rl, ps);
        }
    }

    fa_store<D>(a, o, m, l, pos_s, rl, t0, h, c0, sp, n_split);
#endif
}

// ---- launchers ---------------------------------------------------------------

extern "C" size_t si_cu_fa3_smem(int head_dim)
{
    return head_dim == 256 ? fa3_geom<256>::SMEM : head_dim == 128 ? fa3_geom<128>::SMEM : 0;
}

// ---- device probe (not in the emulator) ----
// Writes 1 where this device runs the sm_90a code (fa3_kernel is not
// empty), else 0.
__global__ void fa3_probe_kernel(int *ok)
{
#if defined(SI_HAVE_WGMMA)
    *ok = 1;
#else
    *ok = 0;
#endif
}


// Whether this device runs fa3_kernel: an sm_90 whose fatbin has the
// sm_90a code, and the shared memory for hd 256.  At open, outside any
// graph capture (a probe launch and a copy).
extern "C" int si_cu_fa3_init(bool *avail)
{
    *avail = false;
    int dev = 0, major = 0, optin = 0, ok = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e != cudaSuccess)
        return (int)e;
    if (major != 9 || (size_t)optin < fa3_geom<256>::SMEM + 2 * FA3_BM * sizeof(int32_t))
        return 0;
    int *d_ok = NULL;
    if ((e = cudaMalloc((void **)&d_ok, sizeof(int))) != cudaSuccess)
        return (int)e;
    fa3_probe_kernel<<<1, 1>>>(d_ok);
    e = cudaMemcpy(&ok, d_ok, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d_ok);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(fa3_kernel<256, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa3_geom<256>::SMEM);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(fa3_kernel<128, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa3_geom<128>::SMEM);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(fa3_kernel<256, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa3_geom<256>::SMEM);
    if (e == cudaSuccess && ok == 1)
        e = cudaFuncSetAttribute(fa3_kernel<128, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa3_geom<128>::SMEM);
    if (e != cudaSuccess)
        return (int)e;
    *avail = ok == 1;
    return 0;
}
// ---- end of device probe ----

// v2's grid: the head fastest, then the tile (the last first), the split;
// OV: the overlap (knob attn_fa3_overlap: a->fa3_overlap).
template <int D, bool OV> static int fa3_launch(const cu_attn *a, const cu_fa_plan *p, cudaStream_t s)
{
    const dim3 grid((unsigned)a->n_head, (unsigned)((a->n + FA3_BM - 1) / FA3_BM), (unsigned)p->n_split);
    fa3_kernel<D, OV><<<grid, FA3_THREADS, fa3_geom<D>::SMEM, s>>>(*a, p->chunk, p->n_split);
    return (int)cudaGetLastError();
}

extern "C" int si_cu_fa3(const cu_attn *a, const cu_fa_plan *p, void *stream)
{
    switch (a->head_dim) {
    case 128: return a->fa3_overlap ? fa3_launch<128, true>(a, p, (cudaStream_t)stream) : fa3_launch<128, false>(a, p, (cudaStream_t)stream);
    case 256: return a->fa3_overlap ? fa3_launch<256, true>(a, p, (cudaStream_t)stream) : fa3_launch<256, false>(a, p, (cudaStream_t)stream);
    default: return (int)cudaErrorInvalidValue;
    }
}
