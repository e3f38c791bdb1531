// backends/cuda_sm120/cuda_gdn_chunk.cu — SI_OP_GDN prefill (knob
// gdn_prefill = chunked): the same math as cuda_gdn.cu, parallel over
// tokens where the token loop was serial.
//
//   conv_tok_kernel   a thread per channel walking 32 tokens: the causal
//                     conv reads the slot's OLD conv state for the first
//                     conv_k-1 tokens of a run; conv_state_kernel then
//                     (stream order: after every token read it) keeps the
//                     run's last conv_k-1 raw inputs.  At dk = 128 it also
//                     L2-normalises q and k of chunked runs' tokens.
//   qk_norm_kernel    (dk != 128) L2-normalises q (times 1/sqrt(dk)) and k
//                     of every token of a chunked run in place in y.
//   chunk_pre_kernel  what of a chunk does not depend on the state, for
//                     every (chunk, v-head) at once: with G_t the
//                     cumulative log decay inside the chunk (derivation in
//                     tests/cpu/check_gdn_chunk.c, which checks this
//                     algorithm against the recurrence),
//                       A  = strictly-lower(diag(b)(K Kᵀ ⊙ exp(G_t - G_s)))
//                       T' = (I + A)⁻¹ diag(b)   (forward substitution on
//                                                 the identity, a column
//                                                 per 4 lanes)
//                       P  = lower(Q Kᵀ ⊙ exp(G_t - G_s)),
//                     both stored transposed into the workspace g.tp,
//                     with the chunk's decay factors (GDN_TP_REC).
//   chunk_kernel      the state-dependent rest, chunk after chunk:
//                       D  = T' (V - diag(exp G) K S0)
//                       O  = diag(exp G) Q S0 + P D
//                       S  = exp(G_last) S0 + Kᵀ diag(exp(G_last - G_s)) D.
//                     Value columns are independent, so one block handles
//                     one (v-head, run, slice of DVS = 32 value columns): 4
//                     blocks per head at dv = 128, which fills an H200 with
//                     32 heads of one sequence.  The block keeps its state
//                     slice S0 (dk x 32 f32) in shared memory across the
//                     chunks and writes it back at the end; K and Q of the
//                     chunk are stored transposed (reduction index outer)
//                     so the register tiles read them as float4; T' and P
//                     then overwrite Q (95 KB of shared memory at dk = 128:
//                     two blocks per sm_90 SM, and it fits sm_120's 99 KB).
//                     f32 FMA throughout, no tensor cores.
//                     Why two kernels: K Kᵀ and Q Kᵀ were the larger part
//                     of the serial kernel's work (done again by each of a
//                     head's 4 slice blocks) and the substitution a chain
//                     of 64 dependent steps per chunk; both now run with
//                     every chunk of the op in parallel.
//                     Knob gdn_tc (default) replaces this kernel with
//                     cuda_gdn_tc.cu's, the same products on the tf32
//                     tensor cores.
//   gnorm_warp_kernel the gated RMSNorm of the chunked tokens, in place on
//                     the raw outputs chunk_kernel wrote into dst (a warp
//                     per token and head; gnorm_kernel past dv 256).
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_gdn.cuh"

#define CH      GDN_CH        // chunk length (tokens)
#define DVS     32            // value columns per block
#define LDC     (CH + 4)      // row stride of KT/QT/BT: float4-aligned, fewer bank conflicts
#define LDD     (DVS + 4)     // row stride of D: conflict-free forward substitution
#define CTHREADS 256
#define CONV_TT  32           // tokens a conv_tok_kernel block walks
#define CONV_KMAX 8           // conv_k it takes (registers; else conv_kernel)
#define GNORM_WARP_DV 256     // dv gnorm_warp_kernel takes (8 values a lane)

static_assert(CH == 64 && DVS == 32 && CTHREADS == 256, "the tile mappings below assume these");

// ---- conv ---------------------------------------------------------------

// grid (ceil(n / CONV_TT), channel blocks of 128), 128 threads: channel c
// walks CONV_TT consecutive tokens of the batch, the last conv_k - 1 raw
// inputs of its run carried in registers (a run's first tokens take them
// from the slot's OLD state), so each input is read once (one thread per
// (channel, token) re-read conv_k of them and ran 131 k blocks per 2048
// tokens of the 9b: 122 us under ncu).  NORM (si_cu_gdn_conv_norms: dk ==
// 128, one q or k head per channel block): the tokens of chunked runs
// leave already L2-normalised (qk_norm_kernel's cu_l2norm, the same
// reduction and rounding), which saves qk_norm_kernel's pass.
template <bool NORM> __global__ void __launch_bounds__(128) conv_tok_kernel(cu_gdn g)
{
    __shared__ double red[33];
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    const bool live = c < g.conv_dim;
    const int H = g.conv_k - 1;
    const int64_t tb = (int64_t)blockIdx.x * CONV_TT, te = min(g.n, tb + CONV_TT);
    // (NORM: q heads first, then k heads; other channel blocks are v)
    const bool norm = NORM && blockIdx.y < 2u * (unsigned)g.n_k_head;
    const float extra = blockIdx.y < (unsigned)g.n_k_head ? 1.0f / sqrtf((float)g.dk) : 1.0f;
    const float *w = g.conv_w + (live ? c : 0) * g.conv_w_stride;
    int r = cu_gdn_run_of(g.runs, (int)g.n_runs, tb);
    cu_gdn_run run = g.runs[r];
    float win[CONV_KMAX - 1];   // win[j]: the input j - H positions before the token
    bool fresh = true;
    for (int64_t t = tb; t < te; t++) {
        while (t >= run.t0 + run.len)   // (block-uniform)
            run = g.runs[++r], fresh = true;
        const int64_t i = t - run.t0;
        if (fresh && live) {
            const float *st = (const float *)(g.state + run.state_off) + c * H;
#pragma unroll
            for (int j = 0; j < CONV_KMAX - 1; j++)
                if (j < H) {
                    const int64_t p = i - H + j;
                    win[j] = p < 0 ? st[p + H] : g.u[(run.t0 + p) * g.u_stride + c];
                }
        }
        fresh = false;
        float v = 0.0f;
        if (live) {
            const float x = g.u[t * g.u_stride + c];
            float acc = w[H] * x;   // tap K-1 multiplies the current token
#pragma unroll
            for (int j = 0; j < CONV_KMAX - 1; j++)
                if (j < H)
                    acc += w[j] * win[j];
#pragma unroll
            for (int j = 0; j < CONV_KMAX - 1; j++)   // (constant indices: registers)
                if (j < H)
                    win[j] = j + 1 < H ? win[j + 1] : x;
            v = cu_silu(acc);
        }
        if (norm && cu_gdn_is_chunked(g, run.len)) {   // (block-uniform)
            const double ss = cu_block_sumd((double)v * (double)v, red);
            const double nrm = sqrt(ss);
            v = __fmul_rn(v, __fmul_rn((float)(1.0 / (nrm > g.eps ? nrm : (double)g.eps)), extra));
        }
        if (live)
            g.y[t * g.conv_dim + c] = v;
    }
}

// grid (channel blocks of 128, runs): the state keeps the last H raw
// inputs.  Entry j reads old entry len + j (>= j) when it comes from the
// old state, so ascending j is safe in place.
__global__ void conv_state_kernel(cu_gdn g)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= g.conv_dim)
        return;
    const cu_gdn_run run = g.runs[blockIdx.y];
    const int H = g.conv_k - 1;
    float *st = (float *)(g.state + run.state_off) + c * H;
    for (int j = 0; j < H; j++) {
        const int64_t p = run.len - H + j;
        st[j] = p < 0 ? st[p + H] : g.u[(run.t0 + p) * g.u_stride + c];
    }
}

// ---- norms --------------------------------------------------------------

// grid (n tokens, 2 * n_k_head): q heads then k heads, 128 threads.
__global__ void __launch_bounds__(128) qk_norm_kernel(cu_gdn g)
{
    __shared__ double red[33];
    const int64_t t = blockIdx.x;
    const cu_gdn_run run = g.runs[cu_gdn_run_of(g.runs, (int)g.n_runs, t)];
    if (!cu_gdn_is_chunked(g, run.len))
        return;
    const int h = blockIdx.y;   // < n_k_head: q head h; else k head h - n_k_head
    float *x = g.y + t * g.conv_dim + (int64_t)h * g.dk;
    const float extra = h < g.n_k_head ? 1.0f / sqrtf((float)g.dk) : 1.0f;
    cu_l2norm(x, x, g.dk, g.eps, extra, red);
}

// grid (ceil(n * n_v_head / 8)), 256 threads: a warp per (token, v-head),
// dv <= 256 (GNORM_WARP_DV): gnorm_kernel's math with the sum of squares
// over the warp (a block of 128 per pair, three barriers each, took 66 us
// per 2048 tokens of the 9b under ncu).
__global__ void __launch_bounds__(256) gnorm_warp_kernel(cu_gdn g)
{
    const int64_t pair = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (pair >= g.n * g.n_v_head)
        return;
    const int lane = threadIdx.x & 31;
    const int64_t t = pair / g.n_v_head;
    const int j = (int)(pair - t * g.n_v_head), dv = g.dv;
    const cu_gdn_run run = g.runs[cu_gdn_run_of(g.runs, (int)g.n_runs, t)];
    if (!cu_gdn_is_chunked(g, run.len))
        return;
    float *o = g.dst + t * g.dst_stride + (int64_t)j * dv;
    const float *z = g.z + t * g.z_stride + (int64_t)j * dv;
    float ov[GNORM_WARP_DV / 32];
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < GNORM_WARP_DV / 32; k++) {
        const int m = lane + 32 * k;
        ov[k] = m < dv ? o[m] : 0.0f;
        ss += (double)ov[k] * (double)ov[k];
    }
    ss = cu_warp_sumd(ss);
    const float sc = (float)(1.0 / sqrt(ss / dv + (double)g.eps));
#pragma unroll
    for (int k = 0; k < GNORM_WARP_DV / 32; k++) {
        const int m = lane + 32 * k;
        if (m < dv)
            o[m] = __fmul_rn(__fmul_rn(__fmul_rn(ov[k], sc), g.norm_w[m]), cu_silu(z[m]));
    }
}

// grid (n tokens, n_v_head), 128 threads (dv > GNORM_WARP_DV).
__global__ void __launch_bounds__(128) gnorm_kernel(cu_gdn g)
{
    __shared__ double red[33];
    const int64_t t = blockIdx.x;
    const cu_gdn_run run = g.runs[cu_gdn_run_of(g.runs, (int)g.n_runs, t)];
    if (!cu_gdn_is_chunked(g, run.len))
        return;
    const int j = blockIdx.y;
    float *o = g.dst + t * g.dst_stride + (int64_t)j * g.dv;
    cu_gdn_gnorm(o, g.z + t * g.z_stride + (int64_t)j * g.dv, g.norm_w, o, g.dv, g.eps, red);
}

// ---- the chunked delta rule ----------------------------------------------

// Shared memory of chunk_kernel for dk rounded up to 4 (dkp).  QT is dead
// once the products are in registers, so TT and BT then take its place:
// 95 KB at dk = 128, under sm_120's 99 KB per block, and two blocks fit
// an sm_90 SM.
static __host__ __device__ int chunk_u_floats(int dkp)
{
    return dkp * LDC > 2 * CH * LDC ? dkp * LDC : 2 * CH * LDC;
}

static size_t chunk_smem_bytes(int dk)
{
    const int dkp = (dk + 3) & ~3;
    return sizeof(float) * ((size_t)dkp * LDC          // KT        [dkp][LDC]
                            + chunk_u_floats(dkp)      // QT | TT [s][LDC], BT [s][LDC]
                            + (size_t)dkp * DVS        // S         [dkp][DVS]
                            + CH * LDD                 // D         [t][LDD]
                            + 2 * CH);                 // G, W
}

// g of token c0 + t of the run (0 beyond the run: padded rows).
static __device__ __forceinline__ float tok_logdecay(const cu_gdn &g, const cu_gdn_run &run, int64_t c0, int t, int L,
                                                     float ssm_a, float dt_b, int j)
{
    if (t >= L)
        return 0.0f;
    return cu_gdn_logdecay(g.a[(run.t0 + c0 + t) * g.a_stride + j], ssm_a, dt_b);
}

// The run holding chunk c of the op (runs in order, chunk0 rising; a run
// without chunks has its successor's chunk0, so the last run with chunk0
// <= c is the one with chunks).
static __device__ __forceinline__ int chunk_run_of(const cu_gdn_run *runs, int n_runs, int64_t c)
{
    return cu_gdn_run_last<&cu_gdn_run::chunk0>(runs, n_runs, c);
}

// K and Q of chunk c0 of the run transposed into KT/QT (zeros past L and
// past dk), beta into Bt (0 past L) and the cumulative log decay into Gm
// (an inclusive warp scan per 32 tokens; warp 1 adds warp 0's total,
// which it sums itself).  Ends with the block synchronised.
static __device__ __forceinline__ void chunk_load(const cu_gdn &g, const cu_gdn_run &run, int64_t c0, int L, int j,
                                                  int kh, float ssm_a, float dt_b, float *KT, float *QT, float *Gm,
                                                  float *Bt)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, dk = g.dk, dkp = (dk + 3) & ~3;
    const int64_t tb = run.t0 + c0, key_dim = (int64_t)g.n_k_head * dk;
    for (int idx = tid; idx < CH * dkp; idx += CTHREADS) {
        const int t = idx / dkp, i = idx - t * dkp;
        float k = 0.0f, q = 0.0f;
        if (t < L && i < dk) {
            const float *yr = g.y + (tb + t) * g.conv_dim + (int64_t)kh * dk + i;
            q = yr[0];
            k = yr[key_dim];
        }
        KT[i * LDC + t] = k;
        QT[i * LDC + t] = q;
    }
    if (tid < CH) {
        const int t = tid;
        float gv = tok_logdecay(g, run, c0, t, L, ssm_a, dt_b, j);
        if (Bt != NULL)
            Bt[t] = t < L ? cu_gdn_beta(g.b[(tb + t) * g.b_stride + j]) : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            const float up = __shfl_up_sync(0xffffffffu, gv, o);
            if (lane >= o)
                gv += up;
        }
        if (warp == 1)
            gv += cu_warp_sum(tok_logdecay(g, run, c0, lane, L, ssm_a, dt_b, j));
        Gm[t] = gv;
    }
    __syncthreads();
}

// Shared memory of chunk_pre_kernel: KT, QT [dkp][LDC], over which A and
// T [CH][CH + 1] go once the products are in registers; G, beta.  70 KB
// at dk = 128 (sm_120 holds 99 KB a block).
static __host__ __device__ int chunk_pre_u_floats(int dkp)
{
    return 2 * dkp * LDC > 2 * CH * (CH + 1) ? 2 * dkp * LDC : 2 * CH * (CH + 1);
}

static size_t chunk_pre_smem_bytes(int dk)
{
    return sizeof(float) * ((size_t)chunk_pre_u_floats((dk + 3) & ~3) + 2 * CH);
}

// grid (n_chunks, n_v_head), CTHREADS threads: T' and P of one chunk of
// one v-head into g.tp (both transposed: [s][t]).
__global__ void __launch_bounds__(CTHREADS, 2) chunk_pre_kernel(cu_gdn g)
{
    extern __shared__ __align__(16) float sm[];
    const int64_t c = blockIdx.x;
    const int j = blockIdx.y, dk = g.dk, kh = j % g.n_k_head;
    const int dkp = (dk + 3) & ~3;
    const cu_gdn_run run = g.runs[chunk_run_of(g.runs, (int)g.n_runs, c)];
    const int64_t c0 = (c - run.chunk0) * CH;
    const int L = run.len - c0 < CH ? (int)(run.len - c0) : CH;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *KT = sm, *QT = KT + dkp * LDC, *A = sm, *T = A + CH * (CH + 1), *Gm = sm + chunk_pre_u_floats(dkp),
          *Bt = Gm + CH;
    chunk_load(g, run, c0, L, j, kh, g.ssm_a[j], g.dt_bias[j], KT, QT, Gm, Bt);

    // k_t.k_s and q_t.k_s: rows t0..t0+3 against columns s0..s0+3
    const int t0 = 4 * (tid >> 4), s0 = 4 * (tid & 15);
    float kk[4][4] = {}, qk[4][4] = {};
    for (int i = 0; i < dkp; i++) {
        const float4 kt = *(const float4 *)&KT[i * LDC + t0];
        const float4 qt = *(const float4 *)&QT[i * LDC + t0];
        const float4 ks = *(const float4 *)&KT[i * LDC + s0];
        const float ktv[4] = { kt.x, kt.y, kt.z, kt.w }, qtv[4] = { qt.x, qt.y, qt.z, qt.w };
        const float ksv[4] = { ks.x, ks.y, ks.z, ks.w };
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                kk[a][b] = fmaf(ktv[a], ksv[b], kk[a][b]);
                qk[a][b] = fmaf(qtv[a], ksv[b], qk[a][b]);
            }
    }
    __syncthreads();   // every read of KT and QT is done: A and T take their place
    float e[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int t = t0 + a, s = s0 + b;
            e[a][b] = s <= t ? expf(Gm[t] - Gm[s]) : 0.0f;
            A[t * (CH + 1) + s] = s < t ? Bt[t] * e[a][b] * kk[a][b] : 0.0f;
        }
    __syncthreads();

    // T = (I + A)⁻¹: row t of column m is [t == m] - sum_{s<t} A_ts T_sm;
    // column m on the 4 lanes 4 * (m % 8) + sub of warp m / 8, terms s =
    // sub, sub + 4, ... (rows of a column are written and read in one
    // warp).  Rows past L have A = 0: T is the identity there.
    {
        const int m = 8 * warp + (lane >> 2), sub = lane & 3;
        for (int t = 0; t < CH; t++) {
            float p = 0.0f;
            for (int s = m + sub; s < t; s += 4)   // (T_sm = 0 for s < m)
                p = fmaf(A[t * (CH + 1) + s], T[s * (CH + 1) + m], p);
            p += __shfl_xor_sync(0xffffffffu, p, 1);
            p += __shfl_xor_sync(0xffffffffu, p, 2);
            if (sub == 0)
                T[t * (CH + 1) + m] = (t == m ? 1.0f : 0.0f) - p;
            __syncwarp();
        }
    }
    __syncthreads();
    // P over A (read by no one now), then T' = T diag(b) and P out,
    // transposed ([s][t]), each a coalesced 16 KB.
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
            A[(t0 + a) * (CH + 1) + s0 + b] = e[a][b] * qk[a][b];
    __syncthreads();
    float *Tp = g.tp + ((size_t)c * g.n_v_head + j) * GDN_TP_REC, *Pp = Tp + CH * CH;
    for (int idx = tid; idx < CH * CH; idx += CTHREADS) {
        const int s = idx / CH, t = idx - s * CH;
        Tp[idx] = T[t * (CH + 1) + s] * Bt[s];
        Pp[idx] = A[t * (CH + 1) + s];
    }
    // the decay factors chunk_kernel computes from G itself (the same
    // expressions), for cuda_gdn_tc.cu
    if (tid < CH) {
        Tp[GDN_TP_EG + tid] = expf(Gm[tid]);
        Tp[GDN_TP_W + tid] = tid < L ? expf(Gm[L - 1] - Gm[tid]) : 0.0f;
        Tp[GDN_TP_EL + tid] = expf(Gm[L - 1]);
    }
}

// acc[a][b] += sum_{s < s_end} XT[s][t0 + a] * Y[s][m0 + b] (XT: a C x C
// matrix stored transposed with rows LDC apart, Y rows LDD apart): one
// thread's 4 x 2 tile of T' R or P D.
static __device__ __forceinline__ void tile_4x2(const float *XT, const float *Y, int t0, int m0, int s_end,
                                                float (&acc)[4][2])
{
    for (int s = 0; s < s_end; s++) {
        const float4 x = *(const float4 *)&XT[s * LDC + t0];
        const float2 y = *(const float2 *)&Y[s * LDD + m0];
        const float xv[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
        for (int a = 0; a < 4; a++) {
            acc[a][0] = fmaf(xv[a], y.x, acc[a][0]);
            acc[a][1] = fmaf(xv[a], y.y, acc[a][1]);
        }
    }
}

// grid (n_v_head, n_runs, ceil(dv / DVS)), CTHREADS threads.
__global__ void __launch_bounds__(CTHREADS, 2) chunk_kernel(cu_gdn g)
{
    extern __shared__ __align__(16) float sm[];
    const cu_gdn_run run = g.runs[blockIdx.y];
    if (!cu_gdn_is_chunked(g, run.len))
        return;
    const int j = blockIdx.x, dk = g.dk, dv = g.dv, kh = j % g.n_k_head;
    const int dkp = (dk + 3) & ~3;
    const int mb = blockIdx.z * DVS;   // first value column of this block
    const int tid = threadIdx.x;
    float *KT = sm, *QT = KT + dkp * LDC, *TT = QT, *BT = TT + CH * LDC, *S = QT + chunk_u_floats(dkp),
          *D = S + dkp * DVS, *Gm = D + CH * LDD, *W = Gm + CH;
    float *Sg = (float *)(g.state + run.state_off) + (int64_t)g.conv_dim * (g.conv_k - 1) + (int64_t)j * dv * dk;
    const float ssm_a = g.ssm_a[j], dt_b = g.dt_bias[j];
    const int64_t key_dim = (int64_t)g.n_k_head * dk;

    // State slice in: S[i][m] = s[(mb + m) * dk + i] (zeros in the padding).
    for (int idx = tid; idx < DVS * dkp; idx += CTHREADS) {
        const int m = idx / dkp, i = idx - m * dkp;
        S[i * DVS + m] = (i < dk && mb + m < dv) ? Sg[(int64_t)(mb + m) * dk + i] : 0.0f;
    }

    // Tile coordinates.  2a: rows t0..t0+3 against 2 value columns m (K
    // S0, Q S0, later the outputs of 2c and 2d); 2e: 4 rows i x 4 value
    // columns m.
    const int t0 = 4 * (tid >> 4), m0 = 2 * (tid & 15);
    const int u_m0 = 4 * (tid & 7), u_i0 = 4 * (tid >> 3);

    for (int64_t c0 = 0, ci = run.chunk0; c0 < run.len; c0 += CH, ci++) {
        const int L = run.len - c0 < CH ? (int)(run.len - c0) : CH;
        const int64_t tb = run.t0 + c0;   // batch index of the chunk's token 0
        // ---- 1. T' and P of the chunk (chunk_pre_kernel) into registers,
        // into shared memory once QT is dead (the round trip overlaps the
        // pass below); K, Q transposed, the cumulative log decay.
        const float4 *tp4 = (const float4 *)(g.tp + ((size_t)ci * g.n_v_head + j) * GDN_TP_REC);
        float4 tpr[2 * CH * CH / 4 / CTHREADS];
#pragma unroll
        for (int k = 0; k < 2 * CH * CH / 4 / CTHREADS; k++)
            tpr[k] = tp4[tid + k * CTHREADS];
        chunk_load(g, run, c0, L, j, kh, ssm_a, dt_b, KT, QT, Gm, NULL);

        // ---- 2a. in registers, one pass over the key dim: k_t.S0[:,m]
        // and q_t.S0[:,m] (4x2).  Then R = V - diag(exp G) K S0 into D,
        // and the inter-chunk output exp(G) Q S0 stays in registers for 2d.
        float oacc[4][2];
        {
            float rk[4][2] = {}, rq[4][2] = {};
            for (int i = 0; i < dkp; i++) {
                const float4 kt = *(const float4 *)&KT[i * LDC + t0];
                const float4 qt = *(const float4 *)&QT[i * LDC + t0];
                const float2 sv = *(const float2 *)&S[i * DVS + m0];
                const float ktv[4] = { kt.x, kt.y, kt.z, kt.w }, qtv[4] = { qt.x, qt.y, qt.z, qt.w };
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    rk[a][0] = fmaf(ktv[a], sv.x, rk[a][0]);
                    rk[a][1] = fmaf(ktv[a], sv.y, rk[a][1]);
                    rq[a][0] = fmaf(qtv[a], sv.x, rq[a][0]);
                    rq[a][1] = fmaf(qtv[a], sv.y, rq[a][1]);
                }
            }
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const int t = t0 + a;
                const float eg = expf(Gm[t]);
#pragma unroll
                for (int b = 0; b < 2; b++) {
                    const int m = m0 + b;
                    const float v = (t < L && mb + m < dv)
                                        ? g.y[(tb + t) * g.conv_dim + 2 * key_dim + (int64_t)j * dv + mb + m]
                                        : 0.0f;
                    D[t * LDD + m] = v - eg * rk[a][b];
                    oacc[a][b] = eg * rq[a][b];
                }
            }
        }
        if (tid < CH)
            W[tid] = tid < L ? expf(Gm[L - 1] - Gm[tid]) : 0.0f;
        __syncthreads();   // every read of QT is done: TT and BT take its place
#pragma unroll
        for (int k = 0; k < 2 * CH * CH / 4 / CTHREADS; k++) {
            const int e = 4 * (tid + k * CTHREADS), mat = e / (CH * CH), s = (e % (CH * CH)) / CH, t = e % CH;
            *(float4 *)&(mat ? BT : TT)[s * LDC + t] = tpr[k];
        }
        __syncthreads();

        // ---- 2c. D = T' R (T' lower triangular: terms s <= t).
        {
            float d[4][2] = {};
            const int s_end = min(t0 + 4, L);
            tile_4x2(TT, D, t0, m0, s_end, d);
            __syncthreads();   // every read of R is done
#pragma unroll
            for (int a = 0; a < 4; a++)
                *(float2 *)&D[(t0 + a) * LDD + m0] = make_float2(d[a][0], d[a][1]);
        }
        __syncthreads();

        // ---- 2d. outputs O = exp(G) Q S0 + P D (raw; gnorm_kernel
        // normalises them), rows t < L, columns < dv.
        {
            const int s_end = min(t0 + 4, L);
            tile_4x2(BT, D, t0, m0, s_end, oacc);
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const int t = t0 + a;
                if (t >= L)
                    break;
                float *out = g.dst + (tb + t) * g.dst_stride + (int64_t)j * dv + mb;
#pragma unroll
                for (int b = 0; b < 2; b++)
                    if (mb + m0 + b < dv)
                        out[m0 + b] = oacc[a][b];
            }
        }

        // ---- 2e. S = exp(G_last) S0 + Kᵀ diag(W) D (each thread owns its
        // 4x4 elements of S; nothing else reads S until the next chunk).
        {
            const float eL = expf(Gm[L - 1]);
            for (int i0 = u_i0; i0 < dkp; i0 += 4 * (CTHREADS / 8)) {
                float acc[4][4] = {};
                for (int s = 0; s < L; s++) {
                    const float w = W[s];
                    const float4 dd = *(const float4 *)&D[s * LDD + u_m0];
                    const float dv4[4] = { w * dd.x, w * dd.y, w * dd.z, w * dd.w };
#pragma unroll
                    for (int a = 0; a < 4; a++) {
                        const float k = KT[(i0 + a) * LDC + s];
#pragma unroll
                        for (int b = 0; b < 4; b++)
                            acc[a][b] = fmaf(k, dv4[b], acc[a][b]);
                    }
                }
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    float4 *sp = (float4 *)&S[(i0 + a) * DVS + u_m0];
                    float4 s4 = *sp;
                    s4.x = fmaf(eL, s4.x, acc[a][0]);
                    s4.y = fmaf(eL, s4.y, acc[a][1]);
                    s4.z = fmaf(eL, s4.z, acc[a][2]);
                    s4.w = fmaf(eL, s4.w, acc[a][3]);
                    *sp = s4;
                }
            }
        }
        __syncthreads();   // KT/QT (over A, BT)/D/G are rewritten by the next chunk
    }

    // State slice out.
    for (int idx = tid; idx < DVS * dkp; idx += CTHREADS) {
        const int m = idx / dkp, i = idx - m * dkp;
        if (i < dk && mb + m < dv)
            Sg[(int64_t)(mb + m) * dk + i] = S[i * DVS + m];
    }
}

// ---- the chunk plan (host) -------------------------------------------------

extern "C" int64_t si_cu_gdn_plan_chunks(cu_gdn_run *runs, int64_t n_runs, int chunk_min)
{
    int64_t n = 0;
    for (int64_t r = 0; r < n_runs; r++) {
        runs[r].chunk0 = n;
        if (chunk_min > 0 && runs[r].len >= chunk_min)
            n += (runs[r].len + CH - 1) / CH;
    }
    return n;
}

extern "C" size_t si_cu_gdn_tp_bytes(int64_t n_chunks, int n_v_head)
{
    return (size_t)n_chunks * (size_t)n_v_head * GDN_TP_REC * sizeof(float);
}

// ---- launchers -------------------------------------------------------------

extern "C" bool si_cu_gdn_conv_tok_ok(const cu_gdn *g)
{
    return g->max_len > 1 && g->conv_k >= 2 && g->conv_k <= CONV_KMAX;
}

extern "C" bool si_cu_gdn_conv_norms(const cu_gdn *g)
{
    return g->chunk_min > 0 && g->dk == 128 && si_cu_gdn_conv_tok_ok(g);
}

extern "C" int si_cu_gdn_conv_tok(const cu_gdn *g, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned cb = (unsigned)((g->conv_dim + 127) / 128);
    if (g->n > 0x7fffffff || cb > 65535 || !si_cu_gdn_conv_tok_ok(g))
        return (int)cudaErrorInvalidValue;
    const dim3 grid((unsigned)((g->n + CONV_TT - 1) / CONV_TT), cb);
    if (si_cu_gdn_conv_norms(g))
        conv_tok_kernel<true><<<grid, 128, 0, s>>>(*g);
    else
        conv_tok_kernel<false><<<grid, 128, 0, s>>>(*g);
    conv_state_kernel<<<dim3(cb, (unsigned)g->n_runs), 128, 0, s>>>(*g);
    return (int)cudaGetLastError();
}

extern "C" bool si_cu_gdn_chunk_fits(int dk)
{
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return chunk_smem_bytes(dk) <= (size_t)optin && chunk_pre_smem_bytes(dk) <= (size_t)optin;
}

extern "C" int si_cu_gdn_chunk(const cu_gdn *g, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const size_t smem = chunk_smem_bytes(g->dk);
    const unsigned slices = (unsigned)((g->dv + DVS - 1) / DVS);
    const size_t pre = chunk_pre_smem_bytes(g->dk);
    if (g->n > 0x7fffffff || 2 * (int64_t)g->n_k_head > 65535 || g->n_v_head > 65535 || slices > 65535 ||
        g->tp == NULL || g->n_chunks <= 0 || g->n_chunks > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    const bool tc = g->tc && si_cu_gdn_tc_ok(g);
    cudaError_t e = cudaFuncSetAttribute(chunk_pre_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pre);
    if (e == cudaSuccess && !tc)
        e = cudaFuncSetAttribute(chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return (int)e;
    if (!si_cu_gdn_conv_norms(g))   // (else conv_tok_kernel normalised them)
        qk_norm_kernel<<<dim3((unsigned)g->n, 2u * (unsigned)g->n_k_head), 128, 0, s>>>(*g);
    chunk_pre_kernel<<<dim3((unsigned)g->n_chunks, (unsigned)g->n_v_head), CTHREADS, pre, s>>>(*g);
    if (tc) {
        const int rc = si_cu_gdn_chunk_tc(g, stream);
        if (rc != 0)
            return rc;
    } else {
        chunk_kernel<<<dim3((unsigned)g->n_v_head, (unsigned)g->n_runs, slices), CTHREADS, smem, s>>>(*g);
    }
    if (g->dv <= GNORM_WARP_DV)
        gnorm_warp_kernel<<<(unsigned)((g->n * g->n_v_head + 7) / 8), 256, 0, s>>>(*g);
    else
        gnorm_kernel<<<dim3((unsigned)g->n, (unsigned)g->n_v_head), 128, 0, s>>>(*g);
    return (int)cudaGetLastError();
}
