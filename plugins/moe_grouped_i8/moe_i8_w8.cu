// plugins/moe_grouped_i8/moe_i8_w8.cu — the grouped GEMMs of the MOE on
// cuda_sm120's "w8" scheme (knob weights = i8, the default).
//
// Why: the GGUF path (moe_i8_gemm.cu) decodes the weight blocks from
// global memory in every tile and spends f32 scale work after every k32
// step; on the H200 it reaches ~23 int8 TOPS.  The backend's dense
// prefill GEMM (cuda_w8.cu, whose header gives the scheme and its
// rounding) reaches ~300 on weights requantised once to int8 per (row,
// 128) and activations per (row, 128): the int32 sums of a 128 block are
// carried by the tensor cores, the f32 work is 2 FFMA per 128.  Here the
// same requantiser (cuda_w8.cuh, bit for bit the backend's) makes int8
// copies of the experts (kept by moe_grouped_i8.c), and the GEMM is the
// backend's tile adapted to groups:
//   block = 128 weight rows x MW_BN = 64 token rows (one schedule tile),
//   4 warps of 64 x 32 (the backend's warp tile, so its epilogue
//   w8_epilogue is shared as is), k-tiles of 128 bytes (knob ktile; 64
//   the A/B and where the shared memory does not fit) through a 4-stage
//   cp.async ring, rows padded by 16 bytes (ldmatrix conflict-free),
//   mma.sync m16n8k32 chains from C = bits of 1.5 * 2^23 per 128 block.
// 64 token rows, not the backend's 128: an expert's group averages n*K/E
// rows (16 at a 512-token chunk of the 35B model, 128 at 4096), and the
// padding of each group to a whole tile is computed for nothing.
// The B rows are gathered: row j of a gate/up tile is token row_tok[r0 +
// j] of the quantised h (each row its own cp.async source); down reads the
// tile's own rows of the quantised SwiGLU output.
//
// gate/up in one GEMM: the A tile's rows 0..31 are gate features f0..f0+31
// and rows 32..63 up features f0..f0+31 (64..127: the next 32 of each), so
// a warp holds gate in m-tiles 0, 1 and up of the same features in 2, 3,
// and the epilogue forms silu(g) * u in registers (f32 out: one scale per
// 128 features spans two blocks, so mw_quant_kernel quantises it after).
// down: f32 rows scattered to y[row_slot], padding rows skipped.
#include <cuda_runtime.h>
#include <math.h>

#include <sparkinfer/types.h>

#include "cuda_ptx.cuh"
#include "cuda_mma_dec.cuh"   // ldsm_b4, cu_mma_acc_zero
#include "cuda_w8.cuh"        // the requantiser, w8_epilogue, W8_BM, CU_I2F_MAGIC

#include "moe_i8.h"

#define MW_BM      W8_BM                     // 128 weight rows
#define MW_BN      MI8_W8_BT                 // 64 token rows: one schedule tile
#define MW_THREADS 128
#define MW_STAGES  4
// One stage of k-tiles of KT bytes (128, knob ktile, the default; or 64):
// A[BM][LD], B[BN][LD] (rows padded by 16 bytes: ldmatrix conflict-free),
// the scales of the 128-block: rows at [0, BM), columns at [BM, BM + BN)
// (w8_epilogue's layout).  KT 128: 113.7 KB a block, two blocks an sm_90
// SM; 64: 63 KB (sm_120's 99 KB a block hold only that).
template <int KT> struct mw_geom {
    static constexpr int LD = KT + 16;
    static constexpr int A = 0;
    static constexpr int B = MW_BM * LD;
    static constexpr int SC = B + MW_BN * LD;
    static constexpr int STAGE = SC + (MW_BM + MW_BN) * 4;
    static constexpr int SMEM = MW_STAGES * STAGE;   // needs the opt-in attribute
};

#if MI8_W8_G != 128 || MW_BN != 64
#error "the tile below is laid out for 128-wide scale blocks and 64-row token tiles"
#endif

// ---- requantisers -----------------------------------------------------------------

// Row r of an expert tensor: expert r / rows, row r % rows.
template <int T> struct mw_gguf {
    const uint8_t *w;
    uint64_t       row_bytes, expert_bytes;
    int64_t        rows;
    __device__ __forceinline__ void load(int64_t r, int64_t i0, float v[8]) const
    {
        cu_deq8<T>(w + (uint64_t)(r / rows) * expert_bytes + (uint64_t)(r % rows) * row_bytes, i0, v);
    }
};

// A kept copy is made again when its GGUF bytes changed under the same
// device address (the weights freed and others of the same shape loaded
// there): the plugin sees no upload or free, so before each use one block
// hashes MW_FP_SAMPLES 4-byte samples spread over the tensor (each mixed
// with its index, summed: order-free) and compares with the hash the copy
// was made from: fp[0] that hash, fp[1] = 1 once made, fp[2] = 1: make it
// (again).  A change that misses every sample goes unnoticed: weights are
// not edited in place, they are replaced as a whole.
#define MW_FP_SAMPLES 2048
#define MW_FP_THREADS 512   // 4 samples a thread, loads issued together: one DRAM latency, not several
__global__ void __launch_bounds__(MW_FP_THREADS) mw_fp_kernel(const uint8_t *w, uint64_t row_bytes,
                                                              uint64_t expert_bytes, int64_t rows, int64_t n_rows,
                                                              uint32_t *fp)
{
    __shared__ uint32_t part[MW_FP_THREADS / 32];
    uint32_t v[MW_FP_SAMPLES / MW_FP_THREADS], h = 0;
#pragma unroll
    for (int j = 0; j < MW_FP_SAMPLES / MW_FP_THREADS; j++) {
        const int i = (int)threadIdx.x + j * MW_FP_THREADS;
        const uint64_t k = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
        const int64_t r = (int64_t)((k >> 24) % (uint64_t)n_rows);
        const uint8_t *p = w + (uint64_t)(r / rows) * expert_bytes + (uint64_t)(r % rows) * row_bytes +
                           (k >> 5) % (row_bytes - 3);
        v[j] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
#pragma unroll
    for (int j = 0; j < MW_FP_SAMPLES / MW_FP_THREADS; j++) {
        const uint32_t x = (v[j] ^ ((threadIdx.x + j * MW_FP_THREADS) * 0x85EBCA6Bu)) * 0xC2B2AE35u;
        h += x ^ (x >> 16);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        h += __shfl_xor_sync(0xffffffffu, h, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = h;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int j = 1; j < MW_FP_THREADS / 32; j++)
            h += part[j];
        fp[2] = !(fp[1] == 1u && fp[0] == h);
        fp[0] = h;
        fp[1] = 1u;
    }
}

// The weight requantiser, skipped when *make == 0 (a kept copy that is
// still good; make NULL: always).
template <class S>
__global__ void mw_weights_kernel(S src, int64_t rows, int64_t in, int8_t *q, float *s, const uint32_t *make)
{
    if (make != NULL && *make == 0u)
        return;
    w8_rows<MI8_W8_G>(src, rows, in, q, s);
}

// Activations: rows < *n_tiles tiles only (when given): the SwiGLU buffer
// is sized for the most tiles there can be, the schedule says how many
// there are.
__global__ void mw_quant_kernel(w8_f32 src, int64_t rows, int64_t in, const int32_t *n_tiles, int8_t *q, float *s)
{
    if (n_tiles != NULL) {
        const int64_t r = (int64_t)*n_tiles * MW_BN;
        rows = r < rows ? r : rows;
    }
    w8_rows<MI8_W8_G>(src, rows, in, q, s);
}

// ---- the GEMM -----------------------------------------------------------------------

// What thread tid copies per k-tile: 16-byte chunks tid + 128 i of the A
// tile (i < NA) and of the B tile (i < NB), row idx / (KT / 16), chunk idx
// % (KT / 16); the scale of A row tid and, tid < BN, of B row tid.
template <int KT> struct mw_src {
    static constexpr int NA = MW_BM * KT / 16 / MW_THREADS, NB = MW_BN * KT / 16 / MW_THREADS;
    const int8_t *a[NA], *b[NB];
    const float  *sa, *sb;
};

template <int KT> __device__ __forceinline__ void mw_issue(uint8_t *st, const mw_src<KT> &src, int64_t kt, int tid)
{
    typedef mw_geom<KT> M;
    constexpr int CH = KT / 16;
#pragma unroll
    for (int i = 0; i < mw_src<KT>::NA; i++) {
        const int idx = tid + i * MW_THREADS;
        cp_async16(st + M::A + (idx / CH) * M::LD + 16 * (idx % CH), src.a[i] + kt * KT);
    }
#pragma unroll
    for (int i = 0; i < mw_src<KT>::NB; i++) {
        const int idx = tid + i * MW_THREADS;
        cp_async16(st + M::B + (idx / CH) * M::LD + 16 * (idx % CH), src.b[i] + kt * KT);
    }
    cp_async4(st + M::SC + 4 * tid, src.sa + kt * KT / 128);
    if (tid < MW_BN)
        cp_async4(st + M::SC + 4 * (MW_BM + tid), src.sb + kt * KT / 128);
}

__device__ __forceinline__ int mw_expert(const mi8_sched &s, int64_t tile)
{
    if (s.tile_exp == NULL)
        return 0;
    return tile < *s.n_tiles ? s.tile_exp[tile] : -1;
}

// The B row (token) of schedule row r: padding rows of the dense schedule
// read the last token (any valid row; never stored).
__device__ __forceinline__ int64_t mw_token(const mi8_sched &s, int64_t r)
{
    return s.tile_exp != NULL ? s.row_tok[r] : (r < s.n_rows ? r : s.n_rows - 1);
}

__device__ __forceinline__ int64_t mw_slot(const mi8_sched &s, int64_t r)
{
    return s.tile_exp != NULL ? s.row_slot[r] : (r < s.n_rows ? r : -1);
}

// The weight row (index into q / s of its mi8_q8w) of A tile row i.
// gate/up (GU): f0 = the block's first feature, 64 per block, rows paired
// as the header says; down: 128 features per block, clamped to `out`.
template <bool GU>
__device__ __forceinline__ int64_t mw_arow(const mi8_q8w &wa, const mi8_q8w &wb, int e, int64_t f0, int i,
                                           int64_t out, const int8_t *&q, const float *&s)
{
    if (GU) {
        const int j = i & 63;
        const mi8_q8w &w = j < 32 ? wa : wb;
        q = w.q;
        s = w.s;
        return e * w.expert_rows + f0 + 32 * (i >> 6) + (j & 31);
    }
    const int64_t f = f0 + i < out ? f0 + i : out - 1;
    q = wa.q;
    s = wa.s;
    return e * wa.expert_rows + f;
}

// GU: gate/up (wa, wb) on the tokens' h (xq, xs gathered by row_tok), y =
// the f32 SwiGLU rows [schedule row][out = F].  !GU: down (wa) on the
// tile's own SwiGLU rows, y = [slot][out = H].  Grid: x = tiles, y =
// feature blocks (GU: 64 features, else 128).  in % 128 == 0.
template <bool GU, int KT>
__global__ void __launch_bounds__(MW_THREADS)
mw_kernel(mi8_q8w wa, mi8_q8w wb, const int8_t *xq, const float *xs, int64_t in, int64_t out, mi8_sched sc, float *y)
{
    typedef mw_geom<KT> M;
    constexpr int TPB = 128 / KT, NK = KT / 32, CH = KT / 16;   // k-tiles a 128-block, k32 steps a k-tile
    extern __shared__ __align__(16) uint8_t sm[];
    const int64_t tile = blockIdx.x, r0 = tile * MW_BN;
    const int e = mw_expert(sc, tile);
    if (e < 0)
        return;   // the whole block: past the schedule's tiles
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wr = (warp & 1) * 64, wc = (warp >> 1) * 32;
    // ldmatrix row addresses: cuda_w8.cu's (A = rows +0/+8, k +0/+16; B =
    // columns +0..7 / +8..15, k +0/+16)
    const int a_off = M::A + (wr + (lane & 7) + ((lane >> 3) & 1) * 8) * M::LD + 16 * (lane >> 4);
    const int b_off = M::B + (wc + (lane & 7) + (lane >> 4) * 8) * M::LD + 16 * ((lane >> 3) & 1);
    const int64_t f0 = (int64_t)blockIdx.y * (GU ? 64 : MW_BM), nkb = in / MI8_W8_G, nkt = TPB * nkb;

    mw_src<KT> src;
#pragma unroll
    for (int i = 0; i < mw_src<KT>::NA; i++) {
        const int idx = tid + i * MW_THREADS;
        const int8_t *q;
        const float *s;
        const int64_t r = mw_arow<GU>(wa, wb, e, f0, idx / CH, out, q, s);
        src.a[i] = q + r * in + 16 * (idx % CH);
    }
#pragma unroll
    for (int i = 0; i < mw_src<KT>::NB; i++) {
        const int idx = tid + i * MW_THREADS;
        const int64_t r = GU ? mw_token(sc, r0 + idx / CH) : r0 + idx / CH;
        src.b[i] = xq + r * in + 16 * (idx % CH);
    }
    {
        const int8_t *q;
        const float *s;
        const int64_t r = mw_arow<GU>(wa, wb, e, f0, tid, out, q, s);
        src.sa = s + r * nkb;
        const int64_t c = tid < MW_BN ? (GU ? mw_token(sc, r0 + tid) : r0 + tid) : 0;
        src.sb = xs + c * nkb;
    }

    float acc[4][4][4];
    cu_mma_acc_zero<4>(acc);
    int ci[4][4][4];
#pragma unroll
    for (int s = 0; s < MW_STAGES - 1; s++) {
        if (s < nkt)
            mw_issue<KT>(sm + s * M::STAGE, src, s, tid);
        cp_async_commit();
    }
    for (int64_t kb = 0; kb < nkb; kb++) {
#pragma unroll
        for (int h = 0; h < TPB; h++) {
            const int64_t kt = TPB * kb + h;
            cp_async_wait_group<MW_STAGES - 2>();   // this thread's k-tile kt landed
            // every thread's kt is in; every warp is done with kt - 1,
            // whose stage is refilled next
            __syncthreads();
            const int64_t kn = kt + MW_STAGES - 1;
            if (kn < nkt)
                mw_issue<KT>(sm + (kn % MW_STAGES) * M::STAGE, src, kn, tid);
            cp_async_commit();
            const uint8_t *st = sm + (kt % MW_STAGES) * M::STAGE;
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                uint32_t bf[4][2], af[4][4];
                ldsm_b4(bf, st + b_off + 32 * kk, M::LD);
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
                    ldsm_x4(af[mt], st + a_off + mt * 16 * M::LD + 32 * kk);
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
                        if (h == 0 && kk == 0)
                            mma_k32c(ci[mt][nt], af[mt], bf[nt][0], bf[nt][1], CU_I2F_MAGIC);
                        else
                            mma_k32acc(ci[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
                    }
            }
            if (h == TPB - 1)
                w8_epilogue(acc, ci, (const float *)(st + M::SC), wr, wc, g, t4);
        }
    }
    cp_async_wait_group<0>();

    // this lane's tile columns wc + 8 nt + 2 t4 (+1), rows wr + 16 mt + g (+8)
    if (GU) {
        // m-tiles 0, 1: gate of features f0 + wr / 2 + 16 mt + g (+8); 2, 3: up
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e2 = 0; e2 < 4; e2++) {
                float *yr = y + (r0 + wc + 8 * nt + 2 * t4 + (e2 & 1)) * out + f0 + wr / 2 + g + 8 * (e2 >> 1);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const float gv = acc[mt][nt][e2];
                    yr[16 * mt] = __fmul_rn(gv / (1.0f + expf(-gv)), acc[mt + 2][nt][e2]);
                }
            }
    } else {
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int64_t slot = mw_slot(sc, r0 + wc + 8 * nt + 2 * t4 + i);
                if (slot < 0)
                    continue;
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int64_t f = f0 + wr + 16 * mt + g + 8 * hh;
                        if (f < out)
                            y[slot * out + f] = acc[mt][nt][2 * hh + i];
                    }
            }
    }
}

// ---- launchers ------------------------------------------------------------------------

// 8 warps a block (cuda_w8.cu's w8_grid), at most `cap` blocks: the kernels
// loop.  The weights' cap (1024 blocks: a full wave of warps on the H200)
// keeps a skipped requantisation (a kept copy still good) a launch of a
// thousand empty blocks, not of millions.
static unsigned mw_grid(int64_t warps, int64_t cap)
{
    const int64_t blocks = (warps + 7) / 8;
    return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

template <int T>
static int mw_weights_go(const mi8_w &w, int64_t n_exp, int64_t rows, int64_t in, int8_t *q, float *s, uint32_t *fp,
                         cudaStream_t st)
{
    if (fp != NULL)
        mw_fp_kernel<<<1, MW_FP_THREADS, 0, st>>>(w.w, w.row_bytes, w.expert_bytes, rows, n_exp * rows, fp);
    const mw_gguf<T> src = { w.w, w.row_bytes, w.expert_bytes, rows };
    const uint32_t *make = fp != NULL ? fp + 2 : NULL;
    mw_weights_kernel<<<mw_grid(n_exp * rows * ((in + 255) / 256), 1024), 256, 0, st>>>(src, n_exp * rows, in, q, s,
                                                                                       make);
    return (int)cudaGetLastError();
}

extern "C" int mi8_w8_weights(mi8_w w, int64_t n_exp, int64_t rows, int64_t in, int8_t *q, float *s, uint32_t *fp,
                              void *stream)
{
    if (n_exp <= 0 || rows <= 0)
        return 0;
    if (in <= 0 || in % MI8_W8_G != 0 || w.row_bytes < 4)
        return (int)cudaErrorInvalidValue;
    cudaStream_t st = (cudaStream_t)stream;
    switch (w.type) {
    case SI_TYPE_Q8_0: return mw_weights_go<SI_TYPE_Q8_0>(w, n_exp, rows, in, q, s, fp, st);
    case SI_TYPE_Q4_K: return mw_weights_go<SI_TYPE_Q4_K>(w, n_exp, rows, in, q, s, fp, st);
    case SI_TYPE_Q5_K: return mw_weights_go<SI_TYPE_Q5_K>(w, n_exp, rows, in, q, s, fp, st);
    case SI_TYPE_Q6_K: return mw_weights_go<SI_TYPE_Q6_K>(w, n_exp, rows, in, q, s, fp, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int mi8_w8_quantize(const float *x, int64_t stride, int64_t n, int64_t in, const int32_t *n_tiles,
                               mi8_q8a a, void *stream)
{
    if (n <= 0)
        return 0;
    if (in <= 0 || in % MI8_W8_G != 0)
        return (int)cudaErrorInvalidValue;
    const w8_f32 src = { x, stride };
    mw_quant_kernel<<<mw_grid(n * ((in + 255) / 256), 65535 * 16), 256, 0, (cudaStream_t)stream>>>(src, n, in, n_tiles, a.q, a.s);
    return (int)cudaGetLastError();
}

template <bool GU, int KT>
static int mw_go_kt(const mi8_q8w &wa, const mi8_q8w &wb, const mi8_q8a &x, int64_t in, int64_t out,
                    const mi8_sched &s, float *y, cudaStream_t st)
{
    const int64_t gy = GU ? out / 64 : (out + MW_BM - 1) / MW_BM;
    if (in <= 0 || in % MI8_W8_G != 0 || (GU && out % 64 != 0) || s.max_tiles <= 0 || s.max_tiles > 0x7fffffffLL ||
        gy <= 0 || gy > 65535)
        return (int)cudaErrorInvalidValue;
    cudaError_t e = cudaFuncSetAttribute(mw_kernel<GU, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         mw_geom<KT>::SMEM);
    if (e != cudaSuccess)
        return (int)e;
    mw_kernel<GU, KT><<<dim3((unsigned)s.max_tiles, (unsigned)gy), MW_THREADS, mw_geom<KT>::SMEM, st>>>(
        wa, wb, x.q, x.s, in, out, s, y);
    return (int)cudaGetLastError();
}

// kt 128 where it fits, else 64.
template <bool GU>
static int mw_go(const mi8_q8w &wa, const mi8_q8w &wb, const mi8_q8a &x, int64_t in, int64_t out, const mi8_sched &s,
                 float *y, int kt, cudaStream_t st)
{
    if (kt == 128 && cu_smem_fits(mw_geom<128>::SMEM))
        return mw_go_kt<GU, 128>(wa, wb, x, in, out, s, y, st);
    return mw_go_kt<GU, 64>(wa, wb, x, in, out, s, y, st);
}

extern "C" int mi8_w8_gate_up(mi8_q8w gate, mi8_q8w up, mi8_q8a x, int64_t H, int64_t F, mi8_sched s, float *act,
                              int kt, void *stream)
{
    return mw_go<true>(gate, up, x, H, F, s, act, kt, (cudaStream_t)stream);
}

extern "C" int mi8_w8_down(mi8_q8w down, mi8_q8a act, int64_t F, int64_t H, mi8_sched s, float *y, int kt,
                           void *stream)
{
    return mw_go<false>(down, down, act, F, H, s, y, kt, (cudaStream_t)stream);
}
