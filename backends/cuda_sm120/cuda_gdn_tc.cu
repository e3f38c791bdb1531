// backends/cuda_sm120/cuda_gdn_tc.cu — the state-dependent part of the
// chunked GDN prefill (knob gdn_tc = true, the default where it fits) on
// the tf32 tensor cores: chunk_kernel's products (cuda_gdn_chunk.cu, whose
// header has the algorithm) on mma.sync m16n8k8, the chunk's inputs
// copied ahead while the previous chunk computes.
//
// Why: chunk_kernel walks a run's chunks one after another, one block per
// (v-head, run, 32 value columns): 128 blocks of 8 warps on an H200 for a
// 32-head model, one per SM.  Each chunk loaded K, Q, V and T'/P from
// global memory with nothing else in flight on the SM and then did ~0.9 M
// f32 FMA: ~37 us a chunk, 1.2 ms per layer per 2048 tokens, 26-30% of
// both presets' prefill (H200 profile at 32k tokens).  Here
//   - every product runs on mma.sync.m16n8k8.tf32 (operands rounded to
//     tf32 with cvt.rna: 10 mantissa bits, sums in f32; the state stays
//     f32 in shared memory and its update C = exp(G_last) S0 is f32);
//   - the inputs of chunk c + 1 are copied with cp.async as soon as those
//     of chunk c are dead (K and the decay factors double-buffered: K is
//     read until the last step), so the copies overlap the math;
//   - the decay factors come from chunk_pre_kernel's record (GDN_TP_REC).
// (Asking chunk c + 2's inputs into the L2 with prefetch.global.L2 while
// chunk c computes made the kernel slower on the H200: 207 -> 235 us per
// 2048 tokens of the 9b under ncu.)
// Per chunk (C = 64 tokens, S0 the block's dk x 32 state slice):
//   1. warps 0-3: R = V - diag(exp G) K S0  -> R (shared)
//      warps 4-7: O = diag(exp G) Q S0      -> registers
//   2. all:       D = T' R                  -> D (shared; T' is lower
//                                              triangular: k-tiles <= row)
//   3. warps 4-7: O += P D -> dst (raw; gnorm_kernel normalises)
//      all:       S = exp(G_last) S0 + Kᵀ diag(W) D
// with one block barrier after 1, 2 and 3.  Accuracy: tf32 rounds each
// operand to 2^-11 relative (bf16, which published chunked kernels use,
// to 2^-8); the emulator and check_cuda_ops hold this path to the f32
// kernel within GDN_TC_TOL.
// Shared memory (floats): K twice, Q ([t][i], row 144, element (t, i) at
// column i ^ 4 (t & 7): conflict-free both as the A operand K S0 reads
// (rows t, columns i) and as the Kᵀ of the state update (rows i, columns
// t)), T' and P ([s][t], row 72), V, R, D ([t][m], row 40), S ([i][m], row
// 40), the decay factors twice: 200 KB at dk = 128, one block an SM
// (sm_90's 227 KB; sm_120's 99 KB does not hold it: gdn_tc_fits).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_gdn.cuh"
#include "cuda_ptx.cuh"

#define TC_CH      GDN_CH   // tokens a chunk
#define TC_DVS     32       // value columns a block
#define TC_THREADS 256
#define TC_LDK     144      // K, Q rows (swizzled: kq_at)
#define TC_LDT     72       // T', P rows
#define TC_LDV     40       // V, R, D, S rows
#define TC_SC      (GDN_TP_REC - GDN_TP_EG)   // decay factors of a chunk

static_assert(TC_CH == 64 && TC_DVS == 32 && TC_THREADS == 256, "the warp tiles below assume these");

// Offsets (floats) into the dynamic shared memory.
#define TC_K0 0
#define TC_K1 (TC_K0 + TC_CH * TC_LDK)
#define TC_Q  (TC_K1 + TC_CH * TC_LDK)
#define TC_T  (TC_Q + TC_CH * TC_LDK)
#define TC_P  (TC_T + TC_CH * TC_LDT)
#define TC_V  (TC_P + TC_CH * TC_LDT)
#define TC_R  (TC_V + TC_CH * TC_LDV)
#define TC_D  (TC_R + TC_CH * TC_LDV)
#define TC_SC0 (TC_D + TC_CH * TC_LDV)
#define TC_S  (TC_SC0 + 2 * TC_SC)   // then dk rows

static size_t tc_smem_bytes(int dk) { return sizeof(float) * ((size_t)TC_S + (size_t)dk * TC_LDV); }

// Element (t, i) of a K or Q tile.
static __device__ __forceinline__ int kq_at(int t, int i) { return t * TC_LDK + (i ^ ((t & 7) << 2)); }

static __device__ __forceinline__ uint32_t tf(float x) { return cvt_tf32(x); }

// ---- the copies of a chunk's inputs (rows past the run: zeros) -----------

// dk columns of y from column col0 for the chunk's tokens into a K/Q tile.
static __device__ void tc_copy_kq(const cu_gdn &g, int64_t tb, int L, int64_t col0, float *X)
{
    const int cpr = g.dk / 4;
    for (int idx = threadIdx.x; idx < TC_CH * cpr; idx += TC_THREADS) {
        const int t = idx / cpr, c = idx - t * cpr;
        float *d = X + kq_at(t, 4 * c);
        if (t < L)
            cp_async16(d, g.y + (tb + t) * g.conv_dim + col0 + 4 * c);
        else
            *(float4 *)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// One [s][t] matrix of the chunk's record (T' or P) into a tile.
static __device__ void tc_copy_mat(const float *src, float *X)
{
    for (int idx = threadIdx.x; idx < TC_CH * TC_CH / 4; idx += TC_THREADS) {
        const int s = idx / (TC_CH / 4), c = idx - s * (TC_CH / 4);
        cp_async16(X + s * TC_LDT + 4 * c, src + s * TC_CH + 4 * c);
    }
}

// The block's 32 value columns of V (zeros past dv).
static __device__ void tc_copy_v(const cu_gdn &g, int64_t tb, int L, int64_t col0, int mb, float *X)
{
    for (int idx = threadIdx.x; idx < TC_CH * TC_DVS / 4; idx += TC_THREADS) {
        const int t = idx / (TC_DVS / 4), c = idx - t * (TC_DVS / 4);
        float *d = X + t * TC_LDV + 4 * c;
        if (t < L && mb + 4 * c < g.dv)
            cp_async16(d, g.y + (tb + t) * g.conv_dim + col0 + 4 * c);
        else
            *(float4 *)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

static __device__ void tc_copy_sc(const float *rec, float *X)
{
    for (int idx = threadIdx.x; idx < TC_SC / 4; idx += TC_THREADS)
        cp_async16(X + 4 * idx, rec + GDN_TP_EG + 4 * idx);
}

// ---- the products -----------------------------------------------------------

// acc[nt] += X[r0.., :dk] S0[:dk, 8 nt..] for the warp's 16 rows (X a K or
// Q tile), nt = 0..3.
static __device__ __forceinline__ void tc_x_s(const float *X, const float *S, int dk, int r0, float (&acc)[4][4])
{
    const int lane = threadIdx.x & 31, gq = lane >> 2, qq = lane & 3;
    for (int k0 = 0; k0 < dk; k0 += 8) {
        const uint32_t a[4] = { tf(X[kq_at(r0 + gq, k0 + qq)]), tf(X[kq_at(r0 + gq + 8, k0 + qq)]),
                                tf(X[kq_at(r0 + gq, k0 + qq + 4)]), tf(X[kq_at(r0 + gq + 8, k0 + qq + 4)]) };
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
            mma_tf32(acc[nt], a, tf(S[(k0 + qq) * TC_LDV + 8 * nt + gq]), tf(S[(k0 + qq + 4) * TC_LDV + 8 * nt + gq]));
    }
}

// acc[n] += M[r0.., :] Y[:, 8 (nt0 + n)..] for n < NT, M a lower-triangular
// [s][t] tile (T' or P: k-tiles past the warp's rows are zero), Y = R or D.
template <int NT>
static __device__ __forceinline__ void tc_tri_y(const float *M, const float *Y, int r0, int nt0, float (&acc)[NT][4])
{
    const int lane = threadIdx.x & 31, gq = lane >> 2, qq = lane & 3;
    for (int k0 = 0; k0 < r0 + 16; k0 += 8) {
        const uint32_t a[4] = { tf(M[(k0 + qq) * TC_LDT + r0 + gq]), tf(M[(k0 + qq) * TC_LDT + r0 + gq + 8]),
                                tf(M[(k0 + qq + 4) * TC_LDT + r0 + gq]), tf(M[(k0 + qq + 4) * TC_LDT + r0 + gq + 8]) };
#pragma unroll
        for (int n = 0; n < NT; n++)
            mma_tf32(acc[n], a, tf(Y[(k0 + qq) * TC_LDV + 8 * (nt0 + n) + gq]),
                     tf(Y[(k0 + qq + 4) * TC_LDV + 8 * (nt0 + n) + gq]));
    }
}

// grid (n_v_head, n_runs, ceil(dv / 32)), TC_THREADS threads.
__global__ void __launch_bounds__(TC_THREADS, 1) chunk_tc_kernel(cu_gdn g)
{
    extern __shared__ __align__(16) float sm[];
    const cu_gdn_run run = g.runs[blockIdx.y];
    if (!cu_gdn_is_chunked(g, run.len))
        return;
    const int j = blockIdx.x, dk = g.dk, dv = g.dv, kh = j % g.n_k_head, mb = blockIdx.z * TC_DVS;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, gq = lane >> 2, qq = lane & 3;
    const int64_t key_dim = (int64_t)g.n_k_head * dk, nch = (run.len + TC_CH - 1) / TC_CH;
    float *Q = sm + TC_Q, *T = sm + TC_T, *P = sm + TC_P, *V = sm + TC_V, *R = sm + TC_R, *D = sm + TC_D,
          *S = sm + TC_S;
    float *Sg = (float *)(g.state + run.state_off) + (int64_t)g.conv_dim * (g.conv_k - 1) + (int64_t)j * dv * dk;

    // The copy groups, in the order the loop below counts on.
    auto rec = [&](int64_t c) { return g.tp + ((size_t)(run.chunk0 + c) * g.n_v_head + j) * GDN_TP_REC; };
    auto tb_of = [&](int64_t c) { return run.t0 + c * TC_CH; };
    auto len_of = [&](int64_t c) { return run.len - c * TC_CH < TC_CH ? (int)(run.len - c * TC_CH) : TC_CH; };
    auto copy_k = [&](int64_t c) {   // K and the decay factors into buffer c & 1
        if (c < nch) {
            tc_copy_kq(g, tb_of(c), len_of(c), key_dim + (int64_t)kh * dk, sm + ((c & 1) ? TC_K1 : TC_K0));
            tc_copy_sc(rec(c), sm + TC_SC0 + (c & 1) * TC_SC);
        }
        cp_async_commit();
    };
    auto copy_qv = [&](int64_t c) {
        if (c < nch) {
            tc_copy_kq(g, tb_of(c), len_of(c), (int64_t)kh * dk, Q);
            tc_copy_v(g, tb_of(c), len_of(c), 2 * key_dim + (int64_t)j * dv + mb, mb, V);
        }
        cp_async_commit();
    };
    auto copy_t = [&](int64_t c) {
        if (c < nch)
            tc_copy_mat(rec(c), T);
        cp_async_commit();
    };
    auto copy_p = [&](int64_t c) {
        if (c < nch)
            tc_copy_mat(rec(c) + TC_CH * TC_CH, P);
        cp_async_commit();
    };

    // State slice in: S[i][m] = s[(mb + m) * dk + i] (zeros past dv).
    for (int idx = tid; idx < TC_DVS * dk; idx += TC_THREADS) {
        const int m = idx / dk, i = idx - m * dk;
        S[i * TC_LDV + m] = mb + m < dv ? Sg[(int64_t)(mb + m) * dk + i] : 0.0f;
    }
    copy_k(0);
    copy_qv(0);
    copy_t(0);
    cp_async_wait_group<1>();   // K, Q, V of chunk 0 (T' may be in flight)
    __syncthreads();
    copy_p(0);

    for (int64_t c = 0; c < nch; c++) {
        // in flight: T'(c), P(c)
        const int L = len_of(c);
        const int64_t tb = tb_of(c);
        const float *K = sm + ((c & 1) ? TC_K1 : TC_K0), *SC = sm + TC_SC0 + (c & 1) * TC_SC;
        const float *EG = SC, *W = SC + TC_CH, eL = SC[2 * TC_CH];
        copy_k(c + 1);

        // ---- 1. K S0 and Q S0 (warps 0-3 and 4-7, 16 rows each).
        float o[4][4] = {};
        {
            const int r0 = 16 * (w & 3);
            float acc[4][4] = {};
            tc_x_s(w < 4 ? K : Q, S, dk, r0, acc);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int t = r0 + gq + 8 * h;
                const float eg = EG[t];
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int m = 8 * nt + 2 * qq + e;
                        if (w < 4)
                            R[t * TC_LDV + m] = V[t * TC_LDV + m] - eg * acc[nt][2 * h + e];
                        else
                            o[nt][2 * h + e] = eg * acc[nt][2 * h + e];
                    }
            }
        }
        cp_async_wait_group<2>();   // T'(c)
        __syncthreads();
        copy_qv(c + 1);

        // ---- 2. D = T' R: warp w rows 16 (w / 2), value tiles 2 (w % 2) + 0, 1.
        {
            float d[2][4] = {};
            const int r0 = 16 * (w >> 1), nt0 = 2 * (w & 1);
            tc_tri_y<2>(T, R, r0, nt0, d);
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    D[(r0 + gq + 8 * (i >> 1)) * TC_LDV + 8 * (nt0 + n) + 2 * qq + (i & 1)] = d[n][i];
        }
        cp_async_wait_group<2>();   // P(c)
        __syncthreads();
        copy_t(c + 1);

        // ---- 3. the outputs (warps 4-7), then the state update (all).
        if (w >= 4) {
            const int r0 = 16 * (w - 4);
            tc_tri_y<4>(P, D, r0, 0, o);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int t = r0 + gq + 8 * (i >> 1);
                if (t >= L)
                    continue;
                float *out = g.dst + (tb + t) * g.dst_stride + (int64_t)j * dv + mb;
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const int m = 8 * nt + 2 * qq + (i & 1);
                    if (mb + m < dv)
                        out[m] = o[nt][i];
                }
            }
        }
        for (int i0 = 16 * w; i0 < dk; i0 += 16 * (TC_THREADS / 32)) {
            float s[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    s[nt][i] = eL * S[(i0 + gq + 8 * (i >> 1)) * TC_LDV + 8 * nt + 2 * qq + (i & 1)];
            for (int k0 = 0; k0 < L; k0 += 8) {
                const uint32_t a[4] = { tf(K[kq_at(k0 + qq, i0 + gq)]), tf(K[kq_at(k0 + qq, i0 + gq + 8)]),
                                        tf(K[kq_at(k0 + qq + 4, i0 + gq)]), tf(K[kq_at(k0 + qq + 4, i0 + gq + 8)]) };
                const float w0 = W[k0 + qq], w1 = W[k0 + qq + 4];
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
                    mma_tf32(s[nt], a, tf(w0 * D[(k0 + qq) * TC_LDV + 8 * nt + gq]),
                             tf(w1 * D[(k0 + qq + 4) * TC_LDV + 8 * nt + gq]));
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    S[(i0 + gq + 8 * (i >> 1)) * TC_LDV + 8 * nt + 2 * qq + (i & 1)] = s[nt][i];
        }
        cp_async_wait_group<1>();   // K(c + 1), Q and V(c + 1)
        __syncthreads();
        copy_p(c + 1);
    }
    cp_async_wait_all();   // (the empty groups past the last chunk)

    // State slice out.
    for (int idx = tid; idx < TC_DVS * dk; idx += TC_THREADS) {
        const int m = idx / dk, i = idx - m * dk;
        if (mb + m < dv)
            Sg[(int64_t)(mb + m) * dk + i] = S[i * TC_LDV + m];
    }
}

// ---- launcher ---------------------------------------------------------------

// Whether g's shapes suit the kernel: dk a multiple of 32 up to 128 (the
// k-steps, the swizzle), whole 16-byte copies (dv and the row strides
// multiples of 4, y 16-byte aligned), and its shared memory on this device.
extern "C" bool si_cu_gdn_tc_ok(const cu_gdn *g)
{
    if (g->dk % 32 != 0 || g->dk > 128 || g->dv % 4 != 0 || g->conv_dim % 4 != 0 || ((uintptr_t)g->y & 15) != 0 ||
        ((uintptr_t)g->tp & 15) != 0)
        return false;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return tc_smem_bytes(g->dk) <= (size_t)optin;
}

extern "C" int si_cu_gdn_chunk_tc(const cu_gdn *g, void *stream)
{
    const size_t smem = tc_smem_bytes(g->dk);
    const cudaError_t e = cudaFuncSetAttribute(chunk_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return (int)e;
    chunk_tc_kernel<<<dim3((unsigned)g->n_v_head, (unsigned)g->n_runs, (unsigned)((g->dv + TC_DVS - 1) / TC_DVS)),
                      TC_THREADS, smem, (cudaStream_t)stream>>>(*g);
    return (int)cudaGetLastError();
}
