// tests/cuda/emu/gdn_emu.cc — the GDN kernels of cuda_sm120 under the host
// emulation: gdn_prefill = seq (conv_kernel + delta_kernel, the path proven
// on the GPU) against gdn_prefill = chunked (conv_tok/conv_state +
// delta_kernel for the short runs + qk_norm + chunk_pre_kernel +
// chunk_kernel + gnorm), same
// random inputs, from a random state; outputs and state within 1e-4 of
// max |seq|; and with knob gdn_tc (chunk_tc_kernel for chunk_kernel, the
// tf32 tensor cores) within TC_TOL where its shapes allow (dk % 32 == 0,
// dk <= 128, dv % 4 == 0).  pipeline() mirrors si_cu_gdn's dispatch (keep
// in step).  Mode `dec`: decode steps, the fused kernel (gdn_dec = fused,
// one cluster launch; cluster_emu.h) bit for bit against the split path.
// Usage: gdn_emu HK HV DK DV LEN...   (one run per LEN, in order)
//        gdn_emu dec HK HV DK DV NSEQ STEPS   (decode: knob gdn_dec = fused
//        against the split path, see decode_main)
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "ptx_emu.h"   // (its cp.async bounds: smem_bytes)
#include "cluster_emu.h"
__global__ void conv_kernel(cu_gdn g);
__global__ void delta_kernel(cu_gdn g);
template <bool NORM> __global__ void conv_tok_kernel(cu_gdn g);
__global__ void conv_state_kernel(cu_gdn g);
__global__ void qk_norm_kernel(cu_gdn g);
__global__ void chunk_pre_kernel(cu_gdn g);
__global__ void chunk_kernel(cu_gdn g);
__global__ void chunk_tc_kernel(cu_gdn g);
__global__ void gnorm_kernel(cu_gdn g);
__global__ void gnorm_warp_kernel(cu_gdn g);
__global__ void rows_kernel(cu_gdn g);
__global__ void norm_kernel(cu_gdn g);
void emu_gf_run(cu_gdn g);   // fused_kernel<N> for g.dk, as si_cu_gdn_fused picks it
size_t emu_gf_smem_floats(int dk, int C, int K);
int emu_gf_threads();
int emu_gf_rows();
size_t emu_chunk_smem(int dk);
size_t emu_chunk_pre_smem(int dk);
size_t emu_tc_smem(int dk);
// tf32 operands (2^-11 relative each) against the f32 kernel's 1e-4
#define TC_TOL 2e-3
static uint32_t rs = 99;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }
static std::vector<float> rnd(size_t n, float s) { std::vector<float> v(n); for (auto &x : v) x = s * fr(); return v; }
#define L(k, gr, bl, sm) emu_launch(gr, bl, sm, [&] { k(g); })
static void pipeline(cu_gdn g, bool chunked, bool tc = false)
{
    unsigned cb = (unsigned)((g.conv_dim + 127) / 128);
    g.chunk_min = chunked ? 32 : 0;
    // (si_cu_gdn_conv_norms: conv_tok_kernel also normalises q and k at dk 128)
    const bool norms = chunked && g.max_len > 1 && g.max_len >= 32 && g.dk == 128;
    if (chunked && g.max_len > 1) {
        if (norms)
            L(conv_tok_kernel<true>, dim3((unsigned)(g.n + 31) / 32, cb), dim3(128), 0);
        else
            L(conv_tok_kernel<false>, dim3((unsigned)(g.n + 31) / 32, cb), dim3(128), 0);
        L(conv_state_kernel, dim3(cb, (unsigned)g.n_runs), dim3(128), 0);
    }
    else L(conv_kernel, dim3(cb, (unsigned)g.n_runs), dim3(128), 0);
    L(delta_kernel, dim3(g.n_v_head, (unsigned)g.n_runs), dim3(128), (2 * g.dk + g.dv) * 4);
    if (chunked && g.max_len >= 32) {
        if (!norms)
            L(qk_norm_kernel, dim3((unsigned)g.n, 2 * g.n_k_head), dim3(128), 0);
        L(chunk_pre_kernel, dim3((unsigned)g.n_chunks, g.n_v_head), dim3(256), emu_chunk_pre_smem(g.dk));
        emu_ptx::smem_bytes = emu_tc_smem(g.dk);
        if (tc)
            L(chunk_tc_kernel, dim3(g.n_v_head, (unsigned)g.n_runs, (g.dv + 31) / 32), dim3(256), emu_tc_smem(g.dk));
        else
            L(chunk_kernel, dim3(g.n_v_head, (unsigned)g.n_runs, (g.dv + 31) / 32), dim3(256), emu_chunk_smem(g.dk));
        if (g.dv <= 256)   // (si_cu_gdn_chunk's choice)
            L(gnorm_warp_kernel, dim3((unsigned)((g.n * g.n_v_head + 7) / 8)), dim3(256), 0);
        else
            L(gnorm_kernel, dim3((unsigned)g.n, g.n_v_head), dim3(128), 0);
    }
}
// gdn_rows = true (cuda_gdn_rows.cu): conv, then the state-rows kernel and
// the norm; si_cu_gdn takes it when no run is chunked.
static void pipeline_rows(cu_gdn g)
{
    unsigned cb = (unsigned)((g.conv_dim + 127) / 128);
    L(conv_kernel, dim3(cb, (unsigned)g.n_runs), dim3(128), 0);
    L(rows_kernel, dim3((unsigned)(g.n_v_head * (g.dv / 16)), (unsigned)g.n_runs), dim3(128), 0);
    L(norm_kernel, dim3((unsigned)((g.n * g.n_v_head + 3) / 4)), dim3(128), 0);
}
// gdn_dec = fused (cuda_gdn_rows.cu fused_kernel): a cluster of C blocks
// per (k-head, run), each cluster one emulated block (cluster_emu.h).
static void pipeline_fused(cu_gdn g, int order)
{
    cl_emu::order = order;
    cl_emu::blk = -1;
    const int C = g.n_v_head / g.n_k_head * g.dv / emu_gf_rows();
    cl_emu::threads = emu_gf_threads();
    cl_emu::cluster = C;
    cl_emu::stride = (emu_gf_smem_floats(g.dk, C, g.conv_k) + 63) & ~(size_t)63;
    L(emu_gf_run, dim3((unsigned)g.n_k_head, (unsigned)g.n_runs), dim3((unsigned)(C * cl_emu::threads)),
      C * cl_emu::stride * sizeof(float));
}
static double cmp(const std::vector<float> &a, const std::vector<float> &b, const char *what)
{
    double mx = 0, md = 0; size_t at = 0;
    for (size_t i = 0; i < a.size(); i++) {
        if (!std::isfinite(a[i]) || !std::isfinite(b[i])) { printf("%s: non-finite at %zu: %g %g\n", what, i, a[i], b[i]); return 1e9; }
        mx = std::max(mx, (double)std::fabs(a[i]));
        double d = std::fabs((double)a[i] - b[i]); if (d > md) { md = d; at = i; }
    }
    printf("  %-6s max |new - seq| %.3g = %.3g of max %.3g (at %zu)\n", what, md, md / mx, mx, at);
    return md / mx;
}
// Decode steps: NSEQ sequences (slots) of one token each per step, STEPS
// steps in a row (the conv state's shift feeds the next step), the slots
// in a different order each step.  Three copies of the state and outputs:
// the split path (conv_kernel + rows_kernel + norm_kernel with the int8
// copy), the fused kernel (with the int8 copy; its blocks skewed in
// cluster_emu.h's orders, one a step in turn), and the reference
// (conv_kernel + delta_kernel, the path proven on the GPU).  Fused against
// split: every bit of output, state and int8 copy; against the
// reference: 1e-4 of max |ref|.  Outputs and int8 copies poisoned before
// each step.
static int decode_main(int hk, int hv, int dk, int dv, int nseq, int steps)
{
    const int K = 4;
    const int64_t cd = 2 * hk * dk + hv * dv;
    const size_t slot = (size_t)cd * (K - 1) + (size_t)hv * dv * dk;   // floats per slot
    const size_t words = (64 + nseq * (slot * 4 + 16)) / 4 + 1;
    auto cw = rnd(cd * K, 0.7f);
    std::vector<float> sa(hv), dtb(hv), nw(dv);
    for (int i = 0; i < hv; i++) { sa[i] = -0.2f - 0.5f * (i % 4); dtb[i] = 0.3f * fr(); }
    for (auto &x : nw) x = 1 + 0.2f * fr();
    const std::vector<float> st0 = rnd(words, 0.5f);
    std::vector<float> st[3] = { st0, st0, st0 };
    const int64_t W = (int64_t)hv * dv;
    bool ok = true;
    printf("decode: hk %d hv %d dk %d dv %d, %d sequences x %d steps (cluster of %d blocks)\n", hk, hv, dk, dv, nseq,
           steps, hv / hk * dv / emu_gf_rows());
    for (int step = 0; step < steps; step++) {
        const int n = nseq;
        std::vector<cu_gdn_run> runs;
        for (int r = 0; r < n; r++) {
            const int s = ((step & 1) ? nseq - 1 - r : r + step) % nseq;   // (rotated, reversed on odd steps)
            runs.push_back({ r, 1, (uint64_t)(64 + s * (slot * 4 + 16)) });
        }
        auto u = rnd(n * cd, 2), z = rnd(n * W, 2), b = rnd(n * hv, 2), a = rnd(n * hv, 2);
        std::vector<float> dst[3], y(n * cd), qd[3], qs[3];
        std::vector<int8_t> q8[3];
        for (int c = 0; c < 3; c++) {
            dst[c].assign(n * W, NAN);
            q8[c].assign(n * W, 0x55);
            qd[c].assign(n * W / 32, NAN);
            qs[c] = qd[c];
            cu_gdn g = {};
            g.u = u.data(); g.z = z.data(); g.b = b.data(); g.a = a.data();
            g.u_stride = cd; g.z_stride = W; g.b_stride = hv; g.a_stride = hv; g.dst_stride = W;
            g.conv_w = cw.data(); g.conv_w_stride = K; g.ssm_a = sa.data(); g.dt_bias = dtb.data(); g.norm_w = nw.data();
            g.dst = dst[c].data(); g.state = (uint8_t *)st[c].data(); g.runs = runs.data(); g.n_runs = n; g.n = n;
            g.conv_dim = cd; g.n_k_head = hk; g.n_v_head = hv; g.dk = dk; g.dv = dv; g.conv_k = K; g.eps = 1e-6f;
            g.y = y.data(); g.max_len = 1; g.fused = c == 1;
            if (c < 2) { g.q = q8[c].data(); g.qd = qd[c].data(); g.qs = qs[c].data(); }
            std::fill(y.begin(), y.end(), NAN);
            if (c == 0)
                pipeline_rows(g);
            else if (c == 1)
                pipeline_fused(g, step % 3);   // (the cluster's blocks in step, skewed up, down)
            else
                pipeline(g, false);
        }
        printf(" step %d:\n", step);
        const bool bits = memcmp(dst[1].data(), dst[0].data(), dst[0].size() * 4) == 0 &&
                          memcmp(st[1].data(), st[0].data(), st[0].size() * 4) == 0 &&
                          memcmp(q8[1].data(), q8[0].data(), q8[0].size()) == 0 &&
                          memcmp(qd[1].data(), qd[0].data(), qd[0].size() * 4) == 0 &&
                          memcmp(qs[1].data(), qs[0].data(), qs[0].size() * 4) == 0;
        if (!bits) {
            int64_t nd = 0, ns = 0, nq = 0;
            for (size_t i = 0; i < dst[0].size(); i++) nd += memcmp(&dst[1][i], &dst[0][i], 4) != 0;
            for (size_t i = 0; i < st[0].size(); i++) ns += memcmp(&st[1][i], &st[0][i], 4) != 0;
            for (size_t i = 0; i < q8[0].size(); i++) nq += q8[1][i] != q8[0][i];
            for (size_t i = 0; i < qd[0].size(); i++) nq += memcmp(&qd[1][i], &qd[0][i], 4) != 0 || memcmp(&qs[1][i], &qs[0][i], 4) != 0;
            printf("  FAIL fused vs split: %lld outputs, %lld state words, %lld int8 values/scales differ\n",
                   (long long)nd, (long long)ns, (long long)nq);
            ok = false;
        } else
            printf("  fused vs split: output, state, int8 copy bit for bit\n");
        const double e1 = cmp(dst[1], dst[2], "output"), e2 = cmp(st[1], st[2], "state");
        if (!(e1 <= 1e-4 && e2 <= 1e-4)) { printf("  FAIL fused vs reference\n"); ok = false; }
    }
    printf("  %s\n", ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
int main(int argc, char **argv)
{
    if (argc == 8 && strcmp(argv[1], "dec") == 0)
        return decode_main(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]));
    int hk = atoi(argv[1]), hv = atoi(argv[2]), dk = atoi(argv[3]), dv = atoi(argv[4]);
    std::vector<int> lens; for (int i = 5; i < argc; i++) lens.push_back(atoi(argv[i]));
    const int K = 4, nr = (int)lens.size();
    int64_t cd = 2 * hk * dk + hv * dv, n = 0;
    std::vector<cu_gdn_run> runs;
    size_t slot = (size_t)cd * (K - 1) + (size_t)hv * dv * dk;   // floats per slot
    int64_t maxl = 0;
    for (int r = 0; r < nr; r++) { runs.push_back({ n, lens[r], (uint64_t)(64 + r * (slot * 4 + 16)) }); n += lens[r]; maxl = std::max<int64_t>(maxl, lens[r]); }
    auto u = rnd(n * cd, 2), z = rnd(n * hv * dv, 2), b = rnd(n * hv, 2), a = rnd(n * hv, 2), cw = rnd(cd * K, 0.7f);
    std::vector<float> sa(hv), dtb(hv), nw(dv);
    for (int i = 0; i < hv; i++) { sa[i] = -0.2f - 0.5f * (i % 4); dtb[i] = 0.3f * fr(); }
    for (auto &x : nw) x = 1 + 0.2f * fr();
    std::vector<float> st0 = rnd((64 + nr * (slot * 4 + 16)) / 4 + 1, 0.5f);
    const bool rows_ok = dk % 32 == 0 && dk / 32 <= 8 && dv % 16 == 0;
    const bool tc_ok = dk % 32 == 0 && dk <= 128 && dv % 4 == 0;
    std::vector<float> st[4], dst[4], y(n * cd), tp;
    // the rows path's int8 copy of its output (cu_gdn.q, dv % 32 == 0):
    // poisoned, then checked against the quantiser's operations on dst
    const bool qk = rows_ok && dv % 32 == 0;
    std::vector<int8_t> q8((size_t)(n * hv * dv), 0x55);
    std::vector<float> qd((size_t)(n * hv * dv / 32), NAN), qs = qd;
    for (int c = 0; c < 4; c++) {
        if ((c == 2 && !rows_ok) || (c == 3 && !tc_ok))
            continue;
        st[c] = st0; dst[c].assign(n * hv * dv, NAN);
        cu_gdn g = {};
        g.u = u.data(); g.z = z.data(); g.b = b.data(); g.a = a.data();
        g.u_stride = cd; g.z_stride = hv * dv; g.b_stride = hv; g.a_stride = hv; g.dst_stride = hv * dv;
        g.conv_w = cw.data(); g.conv_w_stride = K; g.ssm_a = sa.data(); g.dt_bias = dtb.data(); g.norm_w = nw.data();
        g.dst = dst[c].data(); g.state = (uint8_t *)st[c].data(); g.runs = runs.data(); g.n_runs = nr; g.n = n;
        g.conv_dim = cd; g.n_k_head = hk; g.n_v_head = hv; g.dk = dk; g.dv = dv; g.conv_k = K; g.eps = 1e-6f;
        g.y = y.data(); g.max_len = maxl;
        // (as gdn_exec: the chunks numbered, their matrices' workspace
        // poisoned, so a chunk the pre kernel skips shows)
        g.n_chunks = si_cu_gdn_plan_chunks(runs.data(), nr, c == 1 || c == 3 ? 32 : 0);
        tp.assign(si_cu_gdn_tp_bytes(g.n_chunks, hv) / 4 + 1, NAN);
        g.tp = tp.data();
        if (c == 2 && qk) { g.q = q8.data(); g.qd = qd.data(); g.qs = qs.data(); }
        if (c == 2)
            pipeline_rows(g);
        else
            pipeline(g, c == 1 || c == 3, c == 3);
    }
    printf("hk %d hv %d dk %d dv %d runs", hk, hv, dk, dv); for (int l : lens) printf(" %d", l); printf("\n");
    printf("  chunked:\n");
    double e1 = cmp(dst[1], dst[0], "output"), e2 = cmp(st[1], st[0], "state");
    bool ok = e1 <= 1e-4 && e2 <= 1e-4;
    if (tc_ok) {
        printf("  chunked, tf32 tensor cores (gdn_tc):\n");
        double e5 = cmp(dst[3], dst[0], "output"), e6 = cmp(st[3], st[0], "state");
        ok = ok && e5 <= TC_TOL && e6 <= TC_TOL;
    }
    if (rows_ok) {
        printf("  rows:\n");
        double e3 = cmp(dst[2], dst[0], "output"), e4 = cmp(st[2], st[0], "state");
        ok = ok && e3 <= 1e-4 && e4 <= 1e-4;
    }
    if (qk) {
        // cu_q8_block32's IEEE steps on the host: d = amax / 127, q =
        // rint(v * (1 / d)) clamped to +-127, the block's sum in order
        int64_t bad = 0;
        for (size_t bk = 0; bk < qd.size(); bk++) {
            const float *v = &dst[2][bk * 32];
            float amax = 0.0f, s = 0.0f;
            for (int l = 0; l < 32; l++) { amax = std::max(amax, std::fabs(v[l])); s += v[l]; }
            const float dd = amax / 127.0f, id = dd > 0.0f ? 1.0f / dd : 0.0f;
            for (int l = 0; l < 32; l++) {
                int qi = (int)std::nearbyint(v[l] * id);
                qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
                bad += q8[bk * 32 + l] != (int8_t)qi;
            }
            bad += memcmp(&qd[bk], &dd, 4) != 0 || memcmp(&qs[bk], &s, 4) != 0;
        }
        printf("  int8 copy of the rows output: %lld values or scales differ from the quantiser's\n", (long long)bad);
        ok = ok && bad == 0;
    }
    printf("  %s\n", ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
