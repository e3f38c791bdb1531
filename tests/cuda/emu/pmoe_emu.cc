// tests/cuda/emu/pmoe_emu.cc — knob moe_persist under the host emulation:
// cuda_pmoe.cuh's three phases (pm_router, pm_gate_up, pm_down: the one
// launch's work between its grid-wide barriers, run here as three
// launches, the blocks in order and shuffled) against what the six
// launches of the in-line path compute, bit for bit: the router's logits
// and shared gate (a host replica of mm_kernel<F32, 1, 4>'s order), the
// picks and weights (route_warp_kernel), the SwiGLU values of the raw
// gate/up sums of the routed experts (gu_kernel, si_cu_gemvq_glu) and of
// the shared expert (gs_kernel on Q8_0 rows, gq_kernel on their regrouped
// copy), and the
// output: the routed downs (gqe_kernel, si_cu_gemvq with experts) on
// gu_kernel's SwiGLU copy, the shared down (a host replica of
// mmq_kernel<Q8_0, 1, U, false, 8>'s units and shuffles) and the combine
// (cb_sum).  Grids of 132 blocks (an H100's SMs) and of 5 (many rows a
// block).  Then the shapes si_cu_moe_persist_ok refuses.
// Usage: pmoe_emu (no arguments; run-pmoe-emu.sh pastes the kernels in).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"

#include PMOE_KERNELS

static uint32_t rs = 41;
static uint32_t ru() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }
static float fr() { return (float)(ru() & 0xffffff) / 8388608.0f - 1.0f; }

static int bytes_of(uint32_t t) { return t == SI_TYPE_Q4_K ? 144 : t == SI_TYPE_Q5_K ? 176 : t == SI_TYPE_Q6_K ? 210 : 34; }
static const char *tname(uint32_t t) { return t == SI_TYPE_Q4_K ? "q4_K" : t == SI_TYPE_Q5_K ? "q5_K" : "q6_K"; }

// v[0..n) summed as n lanes' xor shuffles (cu_warp_sum at n = 32, the
// 8-lane row reductions at 8): lane 0's value.
static float xor_sum(std::vector<float> v)
{
    const size_t n = v.size();
    for (size_t o = n / 2; o > 0; o >>= 1) {
        std::vector<float> t(n);
        for (size_t l = 0; l < n; l++)
            t[l] = v[l] + v[l ^ o];
        v = t;
    }
    return v[0];
}

// The S rows' SwiGLU values of gu ([S][2F]): made here from the raw gate
// and up halves (the in-line path's sums; swiglu_q_kernel's arithmetic),
// or as the one launch leaves them (silu(gate) * up in the gate half).
static std::vector<float> swiglu_of(const std::vector<float> &gu, int64_t S, int64_t F, bool raw)
{
    std::vector<float> y((size_t)(S * F));
    for (int64_t k = 0; k < S; k++)
        for (int64_t i = 0; i < F; i++) {
            const float g = gu[(size_t)(k * 2 * F + i)];
            y[(size_t)(k * F + i)] = raw ? __fmul_rn(cu_silu(g), gu[(size_t)(k * 2 * F + F + i)]) : g;
        }
    return y;
}

static float f16_at(const uint8_t *p)
{
    _Float16 h;
    memcpy(&h, p, 2);
    return (float)h;
}

// mm_kernel<F32, 1, 4> (a block a row): warp w takes 8-float groups
// 32 w + lane, + 128, ..., fmaf in order; the warps' sums added in order.
static float router_row(const float *w, const float *x, int64_t H)
{
    float t = 0.0f;
    for (int wp = 0; wp < 4; wp++) {
        std::vector<float> lanes(32, 0.0f);
        for (int l = 0; l < 32; l++)
            for (int64_t g = 32 * wp + l; g < H / 8; g += 128)
                for (int j = 0; j < 8; j++)
                    lanes[(size_t)l] = fmaf(w[8 * g + j], x[8 * g + j], lanes[(size_t)l]);
        t += xor_sum(lanes);
    }
    return t;
}

// mmq_kernel<Q8_0, 1, U, false, 8>'s row: lane sl takes units sl, sl + 8,
// ... (16 weights a unit), acc += (d_w * d_x) * dot; 8-lane xor shuffles.
static float q8_row_l8(const uint8_t *row, const int8_t *q, const float *qd, int64_t F)
{
    std::vector<float> lanes(8, 0.0f);
    for (int sl = 0; sl < 8; sl++)
        for (int64_t v = sl; v < F / 16; v += 8) {
            const int64_t blk = v >> 1, hh = v & 1;
            const uint8_t *B = row + blk * 34;
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += (int)(int8_t)B[2 + 16 * hh + i] * (int)q[blk * 32 + 16 * hh + i];
            lanes[(size_t)sl] += f16_at(B) * qd[blk] * (float)s;
        }
    return xor_sum(lanes);
}

struct xcopy {
    std::vector<int8_t> q;
    std::vector<float>  d, s;
};

static int one(uint32_t tg, uint32_t td, bool rg, int grid)
{
    const int64_t H = 2048, F = 512, E = 256, nb = F / 32;
    const int K = 8, S = K + 1;
    const int64_t grb = H / 256 * bytes_of(tg), drb = F / 256 * bytes_of(td), srb = H / 32 * 34, sdrb = F / 32 * 34;
    // h (the router's floats) and an int8 copy (random: the products take it as given)
    std::vector<float> h((size_t)H);
    for (auto &v : h) v = 2.0f * fr();
    xcopy x{ std::vector<int8_t>((size_t)H), std::vector<float>((size_t)(H / 32)), std::vector<float>((size_t)(H / 32)) };
    for (auto &v : x.q) v = (int8_t)((int)(ru() % 255) - 127);
    for (size_t i = 0; i < x.d.size(); i++) {
        x.d[i] = 0.01f * (1.0f + fr());
        x.s[i] = 3.0f * fr();
    }
    std::vector<float> wr((size_t)(E * H)), wsg((size_t)H);
    for (auto &v : wr) v = 0.05f * fr();
    for (auto &v : wsg) v = 0.05f * fr();
    const std::vector<uint8_t> wg = emu_weights(tg, E * F, H, ru, fr), wu = emu_weights(tg, E * F, H, ru, fr);
    const std::vector<uint8_t> wd = emu_weights(td, E * H, F, ru, fr);
    const std::vector<uint8_t> sg = emu_weights(SI_TYPE_Q8_0, F, H, ru, fr), su = emu_weights(SI_TYPE_Q8_0, F, H, ru, fr);
    const std::vector<uint8_t> sd = emu_weights(SI_TYPE_Q8_0, H, F, ru, fr);
    std::vector<uint8_t> sg_rg(sg.size()), su_rg(su.size());
    int bad_host = 0;
    if (rg) {
        bad_host |= si_cu_rg_copy(SI_TYPE_Q8_0, sg.data(), sg_rg.data(), sg.size(), NULL);
        bad_host |= si_cu_rg_copy(SI_TYPE_Q8_0, su.data(), su_rg.data(), su.size(), NULL);
    }
    // ---- the in-line path's values
    std::vector<float> lg1((size_t)E);
    for (int64_t r = 0; r < E; r++)
        lg1[(size_t)r] = router_row(wr.data() + r * H, h.data(), H);
    const float gm1 = router_row(wsg.data(), h.data(), H);
    std::vector<int32_t> sel1((size_t)K, -1);
    std::vector<float> wts1((size_t)K, -7.0f);
    emu_launch(dim3(1), dim3(32), 0, [&] { route_warp_kernel<8>(lg1.data(), 1, (int)E, K, sel1.data(), wts1.data()); });
    std::vector<float> gu1((size_t)(S * 2 * F), -7.0f);
    cu_mm sm = {};   // the shared gate rows, up rows as more[0]
    sm.w = sg.data(); sm.type = SI_TYPE_Q8_0; sm.in = H; sm.rows = F; sm.row_bytes = (uint64_t)srb;
    sm.x_div = 1; sm.y = gu1.data() + K * 2 * F; sm.y_stride = 2 * F; sm.ncols = 1;
    sm.gemv_quad = sm.gemv_xs = sm.gemv_st = true;
    sm.n_more = 1;
    sm.more[0] = cu_mm_part{ su.data(), gu1.data() + K * 2 * F + F, F, (uint64_t)srb, 2 * F, NULL };
    if (rg) {
        sm.w_rg = sg_rg.data();
        sm.more[0].w_rg = su_rg.data();
    }
    emu_ptx::smem_bytes = GS_SMEM(H, 4, 1);   // (x and the largest rings gs_kernel takes)
    bad_host |= si_cu_gemvq(&sm, x.q.data(), x.d.data(), x.s.data(), NULL) ? 2 : 0;
    emu_ptx::smem_bytes = (size_t)H;
    cu_mm gm = {};   // the routed gate rows, up rows as more[0] (gemv_glu's launch)
    gm.w = wg.data(); gm.type = tg; gm.in = H; gm.rows = F; gm.row_bytes = (uint64_t)grb;
    gm.x_div = K; gm.y = gu1.data(); gm.y_stride = 2 * F; gm.ncols = K; gm.expert = sel1.data();
    gm.expert_bytes = (uint64_t)(F * grb); gm.gemv_quad = gm.gemv_xs = gm.gemv_qe = true;
    gm.n_more = 1;
    gm.more[0] = cu_mm_part{ wu.data(), gu1.data() + F, F, (uint64_t)grb, 2 * F, NULL };
    const std::vector<float> gus = std::vector<float>(gu1.begin() + K * 2 * F, gu1.end());   // (raw: the glu rewrites them)
    std::vector<float> sw((size_t)(S * 2 * F), -7.0f);
    std::vector<int8_t> q((size_t)(S * F), 0);
    std::vector<float> qd((size_t)(S * nb), -7.0f), qs(qd.size(), -7.0f);
    const cu_glu gl = { sw.data(), 2 * F, q.data(), qd.data(), qs.data(), gu1.data() + K * 2 * F, 1, 2 * F };
    bad_host |= !si_cu_gemvq_glu_ok(&gm, &gl) ? 4 : 0;
    bad_host |= si_cu_gemvq_glu(&gm, x.q.data(), x.d.data(), x.s.data(), &gl, NULL) ? 8 : 0;
    std::copy(gus.begin(), gus.end(), gu1.begin() + K * 2 * F);
    std::vector<float> y((size_t)(K * H), -7.0f);
    cu_mm dm = {};   // the routed downs on the copy's rows 0..K
    dm.w = wd.data(); dm.type = td; dm.in = F; dm.rows = H; dm.row_bytes = (uint64_t)drb; dm.x_div = 1;
    dm.y = y.data(); dm.y_stride = H; dm.ncols = K; dm.expert = sel1.data(); dm.expert_bytes = (uint64_t)(H * drb);
    dm.gemv_quad = dm.gemv_xs = dm.gemv_qe = true;
    emu_ptx::smem_bytes = (size_t)F;
    bad_host |= si_cu_gemvq(&dm, q.data(), qd.data(), qs.data(), NULL) ? 16 : 0;
    std::vector<float> dst1((size_t)H);
    for (int64_t r = 0; r < H; r++) {
        const float sv = q8_row_l8(sd.data() + r * sdrb, q.data() + K * F, qd.data() + K * nb, F);
        float wv[CB_K], yv[CB_K];
        for (int k = 0; k < CB_K; k++) {
            wv[k] = k < K ? wts1[(size_t)k] : 0.0f;
            yv[k] = k < K ? y[(size_t)(k * H + r)] : 0.0f;
        }
        dst1[(size_t)r] = cb_sum(wv, yv, K, true, cb_gate(gm1), sv);
    }
    // ---- the three phases, blocks in order then shuffled
    int64_t d[5] = { 0, 0, 0, 0, 0 };
    for (int run = 0; run < 2; run++) {
        std::vector<float> lg2((size_t)E, -7.0f), wts2((size_t)K, -7.0f), gu2((size_t)(S * 2 * F), -7.0f);
        std::vector<float> dst2((size_t)H, -7.0f), gm2(1, -7.0f);
        std::vector<int32_t> sel2((size_t)K, -1);
        unsigned bar = 0;
        cu_pmoe p = {};
        p.h = h.data(); p.xq = x.q.data(); p.xd = x.d.data(); p.xs = x.s.data();
        p.wr = wr.data(); p.wsg = wsg.data(); p.wr_stride = H;
        p.wg = wg.data(); p.wu = wu.data(); p.gu_rb = (uint64_t)grb; p.gu_eb = (uint64_t)(F * grb);
        p.wd = wd.data(); p.wd_rb = (uint64_t)drb; p.wd_eb = (uint64_t)(H * drb);
        p.sg = rg ? sg_rg.data() : sg.data(); p.su = rg ? su_rg.data() : su.data(); p.s_rb = (uint64_t)srb; p.s_rg = rg;
        p.sd = sd.data(); p.sd_rb = (uint64_t)sdrb;
        p.logits = lg2.data(); p.gamma = gm2.data(); p.wts = wts2.data(); p.gu = gu2.data(); p.dst = dst2.data();
        p.sel = sel2.data(); p.bar = &bar;
        p.H = (int)H; p.F = (int)F; p.E = (int)E; p.K = K; p.t_gu = tg; p.t_dn = td;
        bad_host |= !si_cu_moe_persist_ok(&p) ? 32 : 0;
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "5", 1);
        emu_ptx::smem_bytes = pm_smem((int)H, K);
        emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_router(p); });
        switch (tg) {
        case SI_TYPE_Q4_K: emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_gate_up<SI_TYPE_Q4_K>(p); }); break;
        case SI_TYPE_Q5_K: emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_gate_up<SI_TYPE_Q5_K>(p); }); break;
        default: emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_gate_up<SI_TYPE_Q6_K>(p); }); break;
        }
        switch (td) {
        case SI_TYPE_Q4_K: emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_down<SI_TYPE_Q4_K>(p); }); break;
        case SI_TYPE_Q5_K: emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_down<SI_TYPE_Q5_K>(p); }); break;
        default: emu_launch(dim3((unsigned)grid), dim3(32 * PM_WARPS), pm_smem((int)H, K), [&] { pm_down<SI_TYPE_Q6_K>(p); }); break;
        }
        unsetenv("EMU_BLOCK_ORDER");
        d[0] += ndiff(lg2, lg1) + (memcmp(&gm2[0], &gm1, 4) != 0);
        d[1] += ndiff(sel2, sel1) + ndiff(wts2, wts1);
        d[2] += ndiff(swiglu_of(gu2, S, F, false), swiglu_of(gu1, S, F, true));
        d[3] += ndiff(dst2, dst1);
        d[4] += bar != 0;   // (the phases alone touch no barrier)
    }
    int64_t unset = 0;   // (the reference is what it claims: every value finite, written)
    for (float v : dst1)
        unset += !std::isfinite(v) || v == -7.0f;
    for (float v : gu1)
        unset += !std::isfinite(v) || v == -7.0f;
    const bool ok = !bad_host && unset == 0 && d[0] + d[1] + d[2] + d[3] + d[4] == 0;
    if (bad_host) printf("  (host code %d)\n", bad_host);
    printf("  gate/up %s, down %s, shared q8_0%s, grid %d: differ logits %lld picks %lld gate/up %lld out %lld  %s\n",
           tname(tg), tname(td), rg ? " regrouped" : "", grid, (long long)d[0], (long long)d[1], (long long)d[2],
           (long long)d[3], ok ? "ok" : bad_host ? "FAIL (refused)" : unset ? "FAIL (the reference)" : "FAIL");
    return ok ? 0 : 1;
}

// What si_cu_moe_persist_ok refuses (cuda_ops_moe.c then runs the six launches).
static int refusals()
{
    alignas(16) static uint8_t w[64];
    alignas(16) static float f[64];
    static int32_t e[8];
    static unsigned bar;
    cu_pmoe p = {};
    p.h = f; p.wr = f; p.wsg = f; p.wr_stride = 2048; p.wg = w; p.wu = w; p.gu_rb = 1152; p.gu_eb = 512 * 1152;
    p.wd = w; p.wd_rb = 352; p.wd_eb = 2048 * 352; p.sg = w; p.su = w; p.s_rb = 2176; p.sd = w; p.sd_rb = 544;
    p.logits = f; p.gamma = f; p.wts = f; p.gu = f; p.dst = f; p.sel = e; p.bar = &bar;
    p.H = 2048; p.F = 512; p.E = 256; p.K = 8; p.t_gu = SI_TYPE_Q4_K; p.t_dn = SI_TYPE_Q5_K;
    int bad = !si_cu_moe_persist_ok(&p);
    cu_pmoe m = p; m.F = 1024; bad += si_cu_moe_persist_ok(&m);                   // (the downs' lanes: 512)
    m = p; m.H = 3072; bad += si_cu_moe_persist_ok(&m);                            // H % 2048
    m = p; m.H = 18432; bad += si_cu_moe_persist_ok(&m);                           // x > 16 KB
    m = p; m.E = 257; bad += si_cu_moe_persist_ok(&m);                             // route_token<8>
    m = p; m.K = 9; bad += si_cu_moe_persist_ok(&m);
    m = p; m.K = 0; bad += si_cu_moe_persist_ok(&m);
    m = p; m.t_gu = SI_TYPE_Q8_0; bad += si_cu_moe_persist_ok(&m);
    m = p; m.t_dn = SI_TYPE_F32; bad += si_cu_moe_persist_ok(&m);
    m = p; m.wg = w + 4; bad += si_cu_moe_persist_ok(&m);                          // unaligned rows
    m = p; m.wd_eb += 4; bad += si_cu_moe_persist_ok(&m);
    m = p; m.wr_stride = 2046; bad += si_cu_moe_persist_ok(&m);
    m = p; m.s_rg = true; m.sg = w + 4; bad += si_cu_moe_persist_ok(&m);           // regrouped: 16-byte rows
    m = p; m.sd = w + 1; bad += si_cu_moe_persist_ok(&m);
    m = p; m.bar = NULL; bad += si_cu_moe_persist_ok(&m);
    bad += si_cu_moe_persist(&p, 132, NULL) == 0;                                  // no x copy given
    printf("  refusals: %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main()
{
    int bad = 0;
    bad += one(SI_TYPE_Q4_K, SI_TYPE_Q5_K, false, 132);
    bad += one(SI_TYPE_Q4_K, SI_TYPE_Q5_K, true, 5);
    bad += one(SI_TYPE_Q5_K, SI_TYPE_Q4_K, true, 132);
    bad += one(SI_TYPE_Q6_K, SI_TYPE_Q4_K, false, 7);
    bad += refusals();
    printf("pmoe_emu: %s\n", bad ? "FAIL" : "all ok");
    return bad ? 1 : 0;
}
