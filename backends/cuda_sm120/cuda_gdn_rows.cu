// backends/cuda_sm120/cuda_gdn_rows.cu — the gated delta rule spread over
// the rows of the state (knob gdn_rows = true, the default): the decode
// path and short runs.
//
// Row m of a head's state S (key dim contiguous: s[m*dk + i]) evolves on
// its own once q, k, beta and the decay of the token are known:
//   s_m <- s_m * alpha;  r = s_m . k;  s_m <- s_m + k * beta (v_m - r);
//   o_m = s_m . q
// so the rows of all heads are cut into blocks of GR_ROWS rows (one warp
// per GR_ROWS / 4 rows), each block walks the run's tokens in order and
// keeps its rows in registers between tokens (read once, written once per
// run).  Each warp normalises q and k itself from the conv output (lane l
// holds elements l, l+32, ... — the same ones it holds of every row), so
// no shared memory and no block barrier is needed.  The gated RMSNorm
// couples all dv rows of a head, so it is a second kernel (norm_kernel,
// one warp per (token, head)) over the pre-norm outputs written to dst.
// The previous kernel (delta_kernel: one block per head, state re-read
// from L2 for every token by 4 warps in turn) kept only n_v_head blocks of
// the GPU busy at decode.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_gdn.cuh"
#include "cuda_launch.cuh"

#define GR_ROWS     16              // state rows per block
#define GR_WARPS    4
#define GR_ROWS_W   (GR_ROWS / GR_WARPS)
#define GR_MAX_EL   8               // dk / 32 <= 8: dk <= 256

// x[l + 32*e] of a dk-vector scaled to unit L2 norm (double sums, like the
// cpu backend) times `extra`; every lane gets its elements in out[].
// (N: the register array's width, >= el)
template <int N = GR_MAX_EL>
__device__ __forceinline__ void warp_l2norm(const float *x, int el, float eps, float extra, float out[N])
{
    const int lane = threadIdx.x & 31;
    double ss = 0.0;
#pragma unroll
    for (int e = 0; e < N; e++) {
        out[e] = e < el ? x[lane + 32 * e] : 0.0f;
        ss += (double)out[e] * (double)out[e];
    }
    ss = cu_warp_sumd(ss);
    const double nrm = sqrt(ss);
    const float sc = __fmul_rn((float)(1.0 / (nrm > eps ? nrm : (double)eps)), extra);
#pragma unroll
    for (int e = 0; e < N; e++)
        out[e] = __fmul_rn(out[e], sc);
}

// The gates of token t, v-head j: beta = sigmoid(b), the decay alpha =
// exp(ssm_a * softplus(a + dt_bias)).
// (gr_gates_of: from the four values, loaded earlier by the caller)
__device__ __forceinline__ void gr_gates_of(float bt, float at, float dtb, float sa, float &beta, float &alpha)
{
    beta = 1.0f / (1.0f + expf(-bt));
    const float sp_in = at + dtb;
    const float sp = sp_in > 20.0f ? sp_in : log1pf(expf(sp_in));
    alpha = expf(sa * sp);
}

__device__ __forceinline__ void gr_gates(const cu_gdn &g, int64_t t, int j, float &beta, float &alpha)
{
    gr_gates_of(g.b[t * g.b_stride + j], g.a[t * g.a_stride + j], g.dt_bias[j], g.ssm_a[j], beta, alpha);
}

// One state row (lane l holding elements l, l+32, ...) through one token:
// decay, readout r = s.k, s += k * beta (v - r); returns the warp's o =
// s.q (every lane).  rows_kernel and fused_kernel share it: the same bits.
// (N: the arrays' width; entries past dk / 32 are zeros, which leave the
// sums as they are, so any N >= dk / 32 gives the same bits)
template <int N = GR_MAX_EL>
__device__ __forceinline__ float gr_row(float s[N], const float q[N], const float k[N], float alpha, float beta,
                                        float v)
{
    float rk = 0.0f;
#pragma unroll
    for (int e = 0; e < N; e++) {
        s[e] *= alpha;
        rk = fmaf(s[e], k[e], rk);
    }
    rk = cu_warp_sum(rk);
    const float delta = beta * (v - rk);
    float o = 0.0f;
#pragma unroll
    for (int e = 0; e < N; e++) {
        s[e] = fmaf(k[e], delta, s[e]);
        o = fmaf(s[e], q[e], o);
    }
    return cu_warp_sum(o);
}

// A warp's R consecutive state rows from m (row m at S + m * dk; lane l
// holding elements l, l+32, ... as gr_row wants them; entries past el =
// dk / 32 zero) into registers, and back.  rows_kernel and fused_kernel.
template <int R, int N>
__device__ __forceinline__ void gr_rows_load(float (&s)[R][N], const float *S, int m, int dk, int el)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < N; e++)
            s[r][e] = e < el ? S[(int64_t)(m + r) * dk + lane + 32 * e] : 0.0f;
}

template <int R, int N>
__device__ __forceinline__ void gr_rows_store(const float (&s)[R][N], float *S, int m, int dk, int el)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < N; e++)
            if (e < el)
                S[(int64_t)(m + r) * dk + lane + 32 * e] = s[r][e];
}

__global__ void __launch_bounds__(32 * GR_WARPS) rows_kernel(cu_gdn g)
{
    cu_pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int dk = g.dk, dv = g.dv, el = dk / 32;
    const int blocks_per_head = dv / GR_ROWS;
    const int j = blockIdx.x / blocks_per_head;                    // v-head
    const int m0 = (blockIdx.x % blocks_per_head) * GR_ROWS + warp * GR_ROWS_W;
    const cu_gdn_run run = g.runs[blockIdx.y];
    const int kh = j % g.n_k_head;
    float *S = (float *)(g.state + run.state_off) + (int64_t)g.conv_dim * (g.conv_k - 1) + (int64_t)j * dv * dk;
    float s[GR_ROWS_W][GR_MAX_EL];
    gr_rows_load(s, S, m0, dk, el);
    const float qscale = 1.0f / sqrtf((float)dk);
    const int64_t key_dim = (int64_t)g.n_k_head * dk;
    for (int64_t t = run.t0; t < run.t0 + run.len; t++) {
        const float *y = g.y + t * g.conv_dim;
        float q[GR_MAX_EL], k[GR_MAX_EL];
        warp_l2norm(y + (int64_t)kh * dk, el, g.eps, qscale, q);
        warp_l2norm(y + key_dim + (int64_t)kh * dk, el, g.eps, 1.0f, k);
        // v of the warp's rows loaded here, not between the stores to
        // out below (which the compiler must assume may alias v: each
        // load would wait for the previous row's round trip)
        float vr[GR_ROWS_W];
#pragma unroll
        for (int r = 0; r < GR_ROWS_W; r++)
            vr[r] = y[2 * key_dim + (int64_t)j * dv + m0 + r];
        float beta, alpha;
        gr_gates(g, t, j, beta, alpha);
        float *out = g.dst + t * g.dst_stride + (int64_t)j * dv;
#pragma unroll
        for (int r = 0; r < GR_ROWS_W; r++) {
            const float o = gr_row(s[r], q, k, alpha, beta, vr[r]);
            if (lane == 0)
                out[m0 + r] = o;   // pre-norm; norm_kernel finishes it
        }
    }
    gr_rows_store(s, S, m0, dk, el);
}

// dst[t][head] = rmsnorm(o) * norm_w * silu(z), in place over the pre-norm
// outputs; one warp per (token, head).  With g.q (dv % 32 == 0, <= 256:
// si_cu_gdn_takes_q) also the int8 copy of those outputs for the out
// projection after the op, per 32 as quant_x_kernel makes it (the same
// cu_q8_block32 over the same values: the same bits), one launch fewer.
__global__ void norm_kernel(cu_gdn g)
{
    cu_pdl_enter();
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= g.n * g.n_v_head)
        return;
    const int64_t t = w / g.n_v_head;
    const int j = (int)(w % g.n_v_head), dv = g.dv;
    float *o = g.dst + t * g.dst_stride + (int64_t)j * dv;
    const float *z = g.z + t * g.z_stride + (int64_t)j * dv;
    // Up to 256 elements a head (every model here) o, z and the weight are
    // all loaded before the first store: o may alias them as far as the
    // compiler knows, so a load after a store waited for it.
    if (dv <= 32 * GR_MAX_EL) {
        float ov[GR_MAX_EL], zv[GR_MAX_EL], wv[GR_MAX_EL];
        double ss = 0.0;
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++) {
            const int m = lane + 32 * e;
            ov[e] = m < dv ? o[m] : 0.0f;
            zv[e] = m < dv ? z[m] : 0.0f;
            wv[e] = m < dv ? g.norm_w[m] : 0.0f;
        }
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++)
            if (lane + 32 * e < dv)
                ss += (double)ov[e] * (double)ov[e];
        ss = cu_warp_sumd(ss);
        const float sc = (float)(1.0 / sqrt(ss / dv + (double)g.eps));
        const int64_t qi = t * (int64_t)g.n_v_head * dv + (int64_t)j * dv;   // (q's row is n_v_head * dv)
#pragma unroll
        for (int e = 0; e < GR_MAX_EL; e++)
            if (lane + 32 * e < dv) {
                const float v = __fmul_rn(__fmul_rn(__fmul_rn(ov[e], sc), wv[e]), cu_silu(zv[e]));
                o[lane + 32 * e] = v;
                if (g.q != NULL)   // (dv % 32 == 0: the whole warp is here)
                    cu_q8_block32(v, lane, g.q + qi + 32 * e, g.qd + qi / 32 + e, g.qs + qi / 32 + e);
            }
        return;
    }
    double ss = 0.0;
    for (int m = lane; m < dv; m += 32)
        ss += (double)o[m] * (double)o[m];
    ss = cu_warp_sumd(ss);
    const float sc = (float)(1.0 / sqrt(ss / dv + (double)g.eps));
    for (int m = lane; m < dv; m += 32)
        o[m] = __fmul_rn(__fmul_rn(__fmul_rn(o[m], sc), g.norm_w[m]), cu_silu(z[m]));
}

// ---- the fused decode step (knob gdn_dec = fused) -------------------------
//
// At decode (every run one token) conv_kernel, rows_kernel, norm_kernel and
// the out projection's quant_x are four launches of a few microseconds of
// work each, and each launch costs its ramp and drain.  fused_kernel does
// all of it in one: a thread-block cluster (sm_90+) per (k-head, run), its
// blocks the state rows of the v-heads tiled onto that k-head (v-head j
// uses k-head j % Hk: j = kh, kh + Hk, ...), GF_ROWS rows a block, so a
// cluster holds R * dv rows in R * dv / GF_ROWS <= 8 blocks (the 9b and
// 35b: 2 x 128 rows, 8 blocks, 128 clusters per sequence).  Each block
//  1. asks for its state rows (registers, as rows_kernel) first, so the
//     kernel's bulk of bytes is in flight during the conv;
//  2. convolves the k-head's 2 dk q/k channels (every block all of them:
//     256 channels of 4 taps cost less than a barrier and a copy through
//     distributed shared memory) and the v channels of its own rows, with
//     conv_kernel's arithmetic (cu_gdn_conv_dec);
//  3. L2-normalises q and k per warp and runs the delta rule on its rows
//     (warp_l2norm, gr_gates, gr_row: rows_kernel's code), the pre-norm
//     outputs into its shared memory;
//  4. cluster barrier; then warp 0 reads the head's dv pre-norm outputs
//     from the head's dv / 32 blocks through distributed shared memory and
//     makes norm_kernel's sum of squares in norm_kernel's order (lane l
//     sums o[l], o[l+32], ... in double, then the warp): the gated norm of
//     its 32 rows and their int8 block (cu_q8_block32: quant_x's bits);
//  5. cluster barrier again before leaving: a block's shared memory must
//     outlive the other blocks' reads of it.
// The conv state: a v channel belongs to one block, which shifts it right
// after reading it.  A q/k channel's old state is read by every block of
// the cluster in step 2, so none may shift it before all have read it: the
// shift waits for the barrier of step 4 (each block's reads are done
// before it arrives; nothing reads the conv state after it), and each q/k
// channel is shifted by exactly one block (rank r: channels [r, r+1) *
// 2 dk / C of the k-head's q/k channels), from the values its own step 2
// kept in shared memory.  A shift before the barrier lets a slower block
// convolve with the shifted state; shares that overlap leave a channel
// unshifted (run-gdn-emu.sh plants both, and a norm or barrier missing).
// Same bits as the split path (conv_kernel + rows_kernel + norm_kernel +
// quant_x) by construction: the same functions over the same values in
// the same order; only the q/k conv is computed 8 times (same result).
// (fused_kernel<4> drops rows_kernel's zero padding past dk / 32 = 4
// elements: adding those zeros changes no sum, at most the sign of an
// exact zero.)
// 128 threads, 8 rows a warp: 8 blocks a cluster then fit the host
// emulation's 1024-thread block (cluster_emu.h), and the rows of a warp
// are twice rows_kernel's, so each warp has more loads in flight.

#define GF_THREADS     128                          // threads a block
#define GF_ROWS        32                           // state rows a block
#define GF_ROWS_W      (GF_ROWS / (GF_THREADS / 32)) // rows a warp
#define GF_MAX_CLUSTER 8                            // the portable cluster size

// fused_kernel's N for dk (si_cu_gdn_fused_ok: dk a multiple of 32 up to
// 32 * GR_MAX_EL).
static inline int gf_width(int dk) { return dk == 4 * 32 ? 4 : GR_MAX_EL; }

// Shared memory of a block (floats): the q/k conv outputs [2 dk], the v
// conv outputs and pre-norm outputs of its rows [GF_ROWS] each, and the
// shifted conv state of its share of the q/k channels [2 dk / C][K - 1].
static inline size_t gf_smem_floats(int dk, int C, int K)
{
    return 2 * (size_t)dk + 2 * GF_ROWS + (size_t)(2 * dk / C) * (K - 1);
}

#include "cuda_cluster.cuh"   // (cl_*: run-gdn-emu.sh puts cluster_emu.h here)

// N: the width of a lane's share of a state row, q and k (dk / 32; at
// dk = 128, every model here, 4 exactly: half the registers of the
// generic GR_MAX_EL).
// EARLY (knob gdn_early): the block's state rows are loaded before the
// programmatic-launch wait, so their DRAM round trip (16 KB a block)
// overlaps the drain of the product before this kernel instead of
// following it.  Safe: the state of a (slot, layer) is written only by
// this op, and the launch that wrote it last (an earlier step or chunk)
// is complete once the kernel before this one has passed its own wait,
// which it did before letting this one launch (cu_pdl_enter); the run
// descriptors come by a copy, which the launch fully waits for.  Every
// input the kernel before writes (u, z, b, a) is read after the wait.
// The conv channel of the block's i-th: the k-head's q channels [0, dk),
// its k channels [dk, 2 dk), then the block's own v rows.
__device__ __forceinline__ int64_t gf_channel(const cu_gdn &g, int i, int kh, int j, int m0, int nqk)
{
    const int dk = g.dk;
    const int64_t key_dim = (int64_t)g.n_k_head * dk;
    return i < dk ? (int64_t)kh * dk + i
         : i < nqk ? key_dim + (int64_t)kh * dk + (i - dk)
                   : 2 * key_dim + (int64_t)j * g.dv + m0 + (i - nqk);
}

template <int N, bool EARLY>
__global__ void __launch_bounds__(GF_THREADS) fused_kernel(cu_gdn g)
{
    if (!EARLY)
        cu_pdl_enter();
    float *sm = cl_smem();
    const int tid = cl_tid(), warp = tid >> 5, lane = tid & 31, rank = cl_rank();
    const int dk = g.dk, dv = g.dv, el = N < GR_MAX_EL ? N : dk / 32, K = g.conv_k, H = K - 1;
    const int C = g.n_v_head / g.n_k_head * dv / GF_ROWS;   // blocks a cluster
    const int kh = cl_cluster() % g.n_k_head;                // the cluster's k-head
    const int jl = rank * GF_ROWS / dv, m0 = rank * GF_ROWS % dv;
    const int j = kh + jl * g.n_k_head;                      // the block's v-head
    const cu_gdn_run run = g.runs[blockIdx.y];
    const int64_t t = run.t0, key_dim = (int64_t)g.n_k_head * dk;
    float *cs = (float *)(g.state + run.state_off);          // conv state [conv_dim][H]
    float *S = cs + g.conv_dim * H + (int64_t)j * dv * dk;
    const int mw = m0 + warp * GF_ROWS_W;                    // the warp's first row
    float s[GF_ROWS_W][N];
    gr_rows_load(s, S, mw, dk, el);
    if (EARLY)
        cu_pdl_enter();
    float *qk = sm, *vc = qk + 2 * dk, *os = vc + GF_ROWS, *nst = os + GF_ROWS;
    const int nqk = 2 * dk, part = nqk / C, p0 = rank * part;
    // Every channel's input, weights and state, and the gates' operands,
    // are loaded before the first sum: in one loop the state stores of a
    // channel ordered the next channel's loads after them (one DRAM round
    // trip a channel, as far as the compiler knew they could alias).
    constexpr int IT = (2 * 32 * N + GF_ROWS + GF_THREADS - 1) / GF_THREADS;   // channels a thread
    float xin[IT], wv[IT][GDN_CONV_REG], sv[IT][GDN_CONV_REG];
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = tid + it * GF_THREADS;
        if (i < nqk + GF_ROWS) {
            const int64_t c = gf_channel(g, i, kh, j, m0, nqk);
            xin[it] = g.u[t * g.u_stride + c];
            cu_gdn_conv_load(g.conv_w + c * g.conv_w_stride, cs + c * H, K, wv[it], sv[it]);
        }
    }
    const float g_b = g.b[t * g.b_stride + j], g_a = g.a[t * g.a_stride + j], g_dt = g.dt_bias[j], g_sa = g.ssm_a[j];
    // (warp 0's operands of the norm, read while the rest runs)
    const int64_t zo = t * (int64_t)g.z_stride + (int64_t)j * dv + m0 + lane;
    const float zv = warp == 0 ? g.z[zo] : 0.0f, nw = warp == 0 ? g.norm_w[m0 + lane] : 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = tid + it * GF_THREADS;
        if (i >= nqk + GF_ROWS)
            continue;
        float *st = cs + gf_channel(g, i, kh, j, m0, nqk) * H;
        const float x = xin[it];
        const float yv = cu_gdn_conv_sum(wv[it], sv[it], x, K);
        if (i >= nqk) {
            vc[i - nqk] = yv;
#pragma unroll
            for (int e = 0; e < GDN_CONV_REG; e++)
                if (e < H)
                    st[e] = e + 1 < H ? sv[it][e + 1] : x;   // (the block's own channel)
        } else {
            qk[i] = yv;
            if ((unsigned)(i - p0) < (unsigned)part)
#pragma unroll
                for (int e = 0; e < GDN_CONV_REG; e++)
                    if (e < H)
                        nst[(i - p0) * H + e] = e + 1 < H ? sv[it][e + 1] : x;
        }
    }
    cl_sync();
    float q[N], k[N];
    warp_l2norm<N>(qk, el, g.eps, 1.0f / sqrtf((float)dk), q);
    warp_l2norm<N>(qk + dk, el, g.eps, 1.0f, k);
    float beta, alpha;
    gr_gates_of(g_b, g_a, g_dt, g_sa, beta, alpha);
#pragma unroll
    for (int r = 0; r < GF_ROWS_W; r++) {
        const float o = gr_row<N>(s[r], q, k, alpha, beta, vc[warp * GF_ROWS_W + r]);
        if (lane == 0)
            os[warp * GF_ROWS_W + r] = o;
    }
    gr_rows_store(s, S, mw, dk, el);
    cl_cluster_sync();   // every block's os written, its conv reads done
    for (int e = tid; e < part * H; e += GF_THREADS) {
        const int i = p0 + e / H;
        const int64_t c = i < dk ? (int64_t)kh * dk + i : key_dim + (int64_t)kh * dk + (i - dk);
        cs[c * H + e % H] = nst[e];
    }
    if (warp == 0) {
        // norm_kernel's sum: lane l adds o[l + 32 b] for b = 0, 1, ... (the
        // head's blocks in rank order), then the warp
        const int per = dv / GF_ROWS, r0 = jl * per;
        double ss = 0.0;
        for (int b = 0; b < per; b++) {
            const float ov = cl_remote(os + lane, r0 + b);
            ss += (double)ov * (double)ov;
        }
        ss = cu_warp_sumd(ss);
        const float sc = (float)(1.0 / sqrt(ss / dv + (double)g.eps));
        const float v = __fmul_rn(__fmul_rn(__fmul_rn(os[lane], sc), nw), cu_silu(zv));
        g.dst[t * (int64_t)g.dst_stride + (int64_t)j * dv + m0 + lane] = v;
        if (g.q != NULL) {   // (q's row is n_v_head * dv; the block of 32 is the block's rows)
            const int64_t qi = t * (int64_t)g.n_v_head * dv + (int64_t)j * dv + m0;
            cu_q8_block32(v, lane, g.q + qi, g.qd + qi / 32, g.qs + qi / 32);
        }
    }
    cl_cluster_sync();   // no block leaves while another reads its os
}

// dst gets pre-norm values before norm_kernel reads z: they must not share
// memory (the per-head kernel read z and wrote dst element by element).
extern "C" bool si_cu_gdn_rows_ok(const cu_gdn *g)
{
    if (g->dk % 32 != 0 || g->dk / 32 > GR_MAX_EL || g->dv % GR_ROWS != 0 || g->dv <= 0)
        return false;
    const int64_t w = (int64_t)g->n_v_head * g->dv;
    const uintptr_t d0 = (uintptr_t)g->dst, d1 = (uintptr_t)(g->dst + (g->n - 1) * g->dst_stride + w);
    const uintptr_t z0 = (uintptr_t)g->z, z1 = (uintptr_t)(g->z + (g->n - 1) * g->z_stride + w);
    return d1 <= z0 || z1 <= d0;
}

// The delta rule and the norm, after conv_kernel filled g->y.
extern "C" int si_cu_gdn_rows(const cu_gdn *g, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const int64_t blocks = (int64_t)g->n_v_head * (g->dv / GR_ROWS);
    if (blocks > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    cudaError_t e = cu_launch(rows_kernel, dim3((unsigned)blocks, (unsigned)g->n_runs), dim3(32 * GR_WARPS), 0, s, *g);
    if (e != cudaSuccess)
        return (int)e;
    const int64_t warps = g->n * g->n_v_head, nb = (warps + 3) / 4;
    if (nb > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    e = cu_launch(norm_kernel, dim3((unsigned)nb), dim3(128), 0, s, *g);
    if (e != cudaSuccess)
        return (int)e;
    return (int)cudaGetLastError();
}

// Whether si_cu_gdn runs g as fused_kernel: knob gdn_dec = fused, every
// run one token, dk a multiple of 32 up to 256, dv a multiple of 32 with
// the v-heads of a k-head <= 8 blocks (a portable cluster), conv_k 2..8,
// dst and z apart (as gdn_rows).
extern "C" bool si_cu_gdn_fused_ok(const cu_gdn *g)
{
    if (!g->fused || g->max_len != 1 || g->n_k_head <= 0 || g->n_v_head % g->n_k_head != 0)
        return false;
    if (g->dk % 32 != 0 || g->dk / 32 > GR_MAX_EL || g->dv % GF_ROWS != 0 || g->conv_k < 2 ||
        g->conv_k > GDN_CONV_REG)
        return false;
    const int64_t rows = (int64_t)(g->n_v_head / g->n_k_head) * g->dv;
    return rows <= GF_ROWS * GF_MAX_CLUSTER && si_cu_gdn_rows_ok(g);
}

// One launch: clusters of C blocks along x (Hk of them), a run each along
// y, with the programmatic-launch attribute as cu_launch gives it.
extern "C" int si_cu_gdn_fused(const cu_gdn *g, void *stream)
{
    const int C = g->n_v_head / g->n_k_head * g->dv / GF_ROWS;
    void (*k)(cu_gdn) = gf_width(g->dk) == 4 ? (g->early ? fused_kernel<4, true> : fused_kernel<4, false>)
                                             : (g->early ? fused_kernel<GR_MAX_EL, true> : fused_kernel<GR_MAX_EL, false>);
    cudaError_t e = cu_launch_cluster(k, dim3((unsigned)(g->n_k_head * C), (unsigned)g->n_runs), dim3(GF_THREADS),
                                      gf_smem_floats(g->dk, C, g->conv_k) * sizeof(float), (cudaStream_t)stream, C, *g);
    if (e != cudaSuccess)
        return (int)e;
    return (int)cudaGetLastError();
}
