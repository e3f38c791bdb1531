// backends/cuda_sm120/cuda_gdn.cu — SI_OP_GDN (spec qwen35-gguf.md §3.5),
// token by token like the cpu backend, in two launches:
//   A. conv_kernel: one thread per (channel, run): causal depthwise conv of
//      the run's raw inputs against the slot's conv state (the last conv_k-1
//      raw inputs, oldest first), SiLU, into the workspace y[n][conv_dim];
//      the state then keeps the run's last conv_k-1 raw inputs;
//   B. delta_kernel: one block per (v-head, run), tokens in order: L2-norm
//      q and k of k-head j % Hk (q times 1/sqrt(dk)), beta, decay, then one
//      warp per state row m (s[m*dk + i] = S[i][m], rows contiguous over the
//      key dim so the lanes read coalesced): decay + readout, update +
//      output; then the gated RMSNorm with silu(z).
// The state stays in the state buffer (f32, plugin.h layout); within a run
// it is hot in L2.
// With gdn_prefill = chunked (cu_gdn.chunk_min > 0) si_cu_gdn sends runs
// of >= chunk_min tokens to the chunked kernels of cuda_gdn_chunk.cu and,
// when some run has more than one token, replaces A by the token-parallel
// conv there; delta_kernel then skips the chunked runs.
// With gdn_dec = fused (cu_gdn.fused) a decode step (every run one token)
// whose shapes si_cu_gdn_fused_ok takes is one launch instead: conv, delta
// rule, gated norm and the int8 copy in cuda_gdn_rows.cu's fused_kernel.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_gdn.cuh"
#include "cuda_launch.cuh"

#define GDN_THREADS 128

__global__ void conv_kernel(cu_gdn g)
{
    cu_pdl_enter();
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= g.conv_dim)
        return;
    const cu_gdn_run run = g.runs[blockIdx.y];
    const int K = g.conv_k, H = K - 1;
    float *st = (float *)(g.state + run.state_off) + c * H;
    const float *w = g.conv_w + c * g.conv_w_stride;
    if (run.len == 1 && K <= GDN_CONV_REG) {
        // Decode (cu_gdn_conv_dec), the shifted state written from
        // registers.
        float sv[GDN_CONV_REG];
        const float x = g.u[run.t0 * g.u_stride + c];
        g.y[run.t0 * g.conv_dim + c] = cu_gdn_conv_dec(w, st, x, K, sv);
#pragma unroll
        for (int j = 0; j < GDN_CONV_REG; j++)
            if (j < H)
                st[j] = j + 1 < H ? sv[j + 1] : x;
        return;
    }
    // Element at run-relative position p (p may be negative: then state).
    for (int64_t i = 0; i < run.len; i++) {
        const float x = g.u[(run.t0 + i) * g.u_stride + c];
        float acc = w[H] * x;   // tap K-1 multiplies the current token
        for (int j = 0; j < H; j++) {
            const int64_t p = i - H + j;
            const float hv = p < 0 ? st[p + H] : g.u[(run.t0 + p) * g.u_stride + c];
            acc += w[j] * hv;
        }
        g.y[(run.t0 + i) * g.conv_dim + c] = cu_silu(acc);
    }
    // New state: the last H raw inputs.  Entry j reads old entry len + j
    // (>= j) when it comes from the old state, so ascending j is safe.
    for (int j = 0; j < H; j++) {
        const int64_t p = run.len - H + j;
        st[j] = p < 0 ? st[p + H] : g.u[(run.t0 + p) * g.u_stride + c];
    }
}

__global__ void __launch_bounds__(GDN_THREADS) delta_kernel(cu_gdn g)
{
    extern __shared__ float sm[];
    __shared__ double red[33];
    const int j = blockIdx.x, dk = g.dk, dv = g.dv;
    const cu_gdn_run run = g.runs[blockIdx.y];
    if (cu_gdn_is_chunked(g, run.len))
        return;   // cuda_gdn_chunk.cu does this run
    const int kh = j % g.n_k_head;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *qn = sm, *kn = qn + dk, *o = kn + dk;   // [dk], [dk], [dv]
    float *S = (float *)(g.state + run.state_off) + (int64_t)g.conv_dim * (g.conv_k - 1) + (int64_t)j * dv * dk;
    const float ssm_a = g.ssm_a[j], dt_b = g.dt_bias[j];
    const float qscale = 1.0f / sqrtf((float)dk);
    const int64_t key_dim = (int64_t)g.n_k_head * dk;
    for (int64_t t = run.t0; t < run.t0 + run.len; t++) {
        const float *y = g.y + t * g.conv_dim;
        cu_l2norm(y + (int64_t)kh * dk, qn, dk, g.eps, qscale, red);
        cu_l2norm(y + key_dim + (int64_t)kh * dk, kn, dk, g.eps, 1.0f, red);
        __syncthreads();
        const float *v = y + 2 * key_dim + (int64_t)j * dv;
        const float bt = g.b[t * g.b_stride + j], at = g.a[t * g.a_stride + j];
        const float beta = cu_gdn_beta(bt);
        const float alpha = expf(cu_gdn_logdecay(at, ssm_a, dt_b));
        for (int m = warp; m < dv; m += nw) {
            float *row = S + (int64_t)m * dk;
            float r = 0.0f;
            for (int i = lane; i < dk; i += 32) {
                const float s = row[i] * alpha;
                row[i] = s;
                r = fmaf(s, kn[i], r);
            }
            r = cu_warp_sum(r);
            const float delta = beta * (v[m] - r);
            float oo = 0.0f;
            for (int i = lane; i < dk; i += 32) {
                const float s = fmaf(kn[i], delta, row[i]);
                row[i] = s;
                oo = fmaf(s, qn[i], oo);
            }
            oo = cu_warp_sum(oo);
            if (lane == 0)
                o[m] = oo;
        }
        __syncthreads();
        cu_gdn_gnorm(o, g.z + t * g.z_stride + (int64_t)j * dv, g.norm_w, g.dst + t * g.dst_stride + (int64_t)j * dv,
                     dv, g.eps, red);
        __syncthreads();   // qn/kn/o are rewritten by the next token
    }
}

static int gdn_chunk_min(const cu_gdn *g);   // (below si_cu_gdn: the emulator cuts there)

extern "C" int si_cu_gdn(const cu_gdn *g, void *stream)
{
    if (g->n <= 0 || g->n_runs <= 0)
        return 0;
    if (g->n_runs > 65535 || g->n_v_head > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    const size_t sm = (2 * (size_t)g->dk + (size_t)g->dv) * sizeof(float);
    if (sm > 48 * 1024)
        return (int)cudaErrorInvalidValue;
    cu_gdn gg = *g;
    gg.chunk_min = gdn_chunk_min(g);
    if (g->q != NULL && !si_cu_gdn_takes_q(g))
        return (int)cudaErrorInvalidValue;   // (only norm_kernel and fused_kernel write the int8 copy)
    int e;
    if (si_cu_gdn_fused_ok(&gg))   // (decode, gdn_dec = fused: one launch)
        return si_cu_gdn_fused(&gg, stream);
    if (g->chunk_min > 0 && si_cu_gdn_conv_tok_ok(g)) {
        if ((e = si_cu_gdn_conv_tok(&gg, stream)) != 0)
            return e;
    } else {
        const cudaError_t ce = cu_launch(conv_kernel, dim3((unsigned)((g->conv_dim + 127) / 128),
                                                           (unsigned)g->n_runs), dim3(128), 0, s, gg);
        if (ce != cudaSuccess)
            return (int)ce;
    }
    // No chunked run: the state-rows kernel (gdn_rows) takes every run.
    if (gg.chunk_min == 0 && gg.rows && si_cu_gdn_rows_ok(&gg)) {
        if ((e = (int)cudaGetLastError()) != 0)
            return e;
        return si_cu_gdn_rows(&gg, stream);
    }
    delta_kernel<<<dim3((unsigned)g->n_v_head, (unsigned)g->n_runs), GDN_THREADS, sm, s>>>(gg);
    if ((e = (int)cudaGetLastError()) != 0)
        return e;
    if (gg.chunk_min > 0)
        return si_cu_gdn_chunk(&gg, stream);
    return 0;
}

// The chunk threshold si_cu_gdn runs g with: 0 (every run token by token)
// where no run reaches it or a dk's chunk tiles do not fit shared memory.
static int gdn_chunk_min(const cu_gdn *g)
{
    return g->chunk_min > 0 && (g->max_len < g->chunk_min || !si_cu_gdn_chunk_fits(g->dk)) ? 0 : g->chunk_min;
}

extern "C" bool si_cu_gdn_takes_q(const cu_gdn *g)
{
    cu_gdn gg = *g;
    gg.chunk_min = gdn_chunk_min(g);
    return (gg.chunk_min == 0 && gg.rows && si_cu_gdn_rows_ok(&gg) && gg.dv % 32 == 0 && gg.dv <= 256) ||
           si_cu_gdn_fused_ok(&gg);
}
