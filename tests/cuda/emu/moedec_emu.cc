// tests/cuda/emu/moedec_emu.cc — knob moe_dec_fuse under the host
// emulation: cuda_gemvq.cu's gqe_tail_kernel against the launches it
// replaces in moe_exec, bit for bit:
//   SWIGLU tail: the routed gate/up (gqe_kernel) then swiglu_q_kernel over
//     the routed rows and the shared expert's (here random rows, as the
//     shared gate/up would leave them): the gate/up product, the int8
//     values, scales and block sums;
//   COMBINE tail: the routed down (gqe_kernel on that int8 copy) then
//     combine_kernel with the shared expert's row (random here, as the
//     shared down would leave it) and its gate: the product and the MOE
//     output, strided, the gaps between its rows untouched.
//   one gate/up launch (knob moe_dec_fuse_gu, gqe_gs_kernel): the shared
//     expert's Q8_0 gate/up (stacked, or the up as more[0]) made in the
//     routed one's launch instead of by gs_kernel before it: its products
//     too, then the same int8 copy.
// Each case runs the fused launches twice on poisoned outputs, the second
// time with the blocks in a shuffled order (emu.cc EMU_BLOCK_ORDER): the
// tails must still wait for every block of their group, and every counter
// must be back at 0 after each launch.  Usage: moedec_emu (no arguments;
// run-moedec-emu.sh pastes the kernels in; MOEDEC_MODE=quick: the first
// four cases only).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"

#include MOEDEC_KERNELS

static uint32_t rs = 7;
static uint32_t ru() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }
static float fr() { return (float)(ru() & 0xffffff) / 8388608.0f - 1.0f; }

static int bytes_of(uint32_t t) { return t == SI_TYPE_Q4_K ? 144 : t == SI_TYPE_Q5_K ? 176 : 210; }

static int64_t nonzero(const std::vector<unsigned> &c)
{
    int64_t z = 0;
    for (auto v : c) z += v != 0;
    return z;
}

struct shape {
    int64_t n, E, K, H, F;
    bool shared;
    uint32_t tgu, tdn;
    int rows;      // cu_mm.gemv_rows (1: one row set a lane group)
    int merged;    // 0: the shared rows given; 1: made by gqe_gs_kernel, Q8_0 gate/up stacked; 2: up as more[0]
};

static int one(const shape &c)
{
    const int64_t n = c.n, K = c.K, H = c.H, F = c.F, NK = n * K, nsh = c.shared ? n : 0, nq = NK + nsh, nb = F / 32;
    // h's int8 copy (as the norm leaves it in slot 0)
    std::vector<int8_t> xq((size_t)(n * H));
    std::vector<float> xd((size_t)(n * H / 32)), xs(xd.size());
    for (auto &v : xq) v = (int8_t)((int)(ru() % 255) - 127);
    for (size_t i = 0; i < xd.size(); i++) {
        xd[i] = 0.01f * (1.0f + fr());
        xs[i] = 3.0f * fr();
    }
    std::vector<int32_t> sel((size_t)NK);
    for (auto &s : sel) s = (int32_t)(ru() % (uint32_t)c.E);
    std::vector<float> wts((size_t)NK), gamma((size_t)n), ys((size_t)(n * H)), sh((size_t)(nsh * 2 * F));
    for (auto &v : wts) v = 0.5f * (1.0f + fr());
    for (auto &v : gamma) v = 2.0f * fr();
    for (auto &v : ys) v = fr();
    for (auto &v : sh) v = 4.0f * fr();
    const std::vector<uint8_t> wgu = emu_weights(c.tgu, c.E * 2 * F, H, ru, fr), wdn = emu_weights(c.tdn, c.E * H, F, ru, fr);
    const uint64_t rb_gu = (uint64_t)(H / 256 * bytes_of(c.tgu)), rb_dn = (uint64_t)(F / 256 * bytes_of(c.tdn));
    cu_mm gu = {};
    gu.w = wgu.data(); gu.type = c.tgu; gu.in = H; gu.rows = 2 * F; gu.row_bytes = rb_gu;
    gu.expert_bytes = (uint64_t)(2 * F) * rb_gu; gu.expert = sel.data(); gu.x_div = K; gu.y_stride = 2 * F;
    gu.ncols = NK; gu.gemv_quad = gu.gemv_qe = gu.gemv_xs = true; gu.gemv_rows = c.rows;
    cu_mm dn = {};
    dn.w = wdn.data(); dn.type = c.tdn; dn.in = F; dn.rows = H; dn.row_bytes = rb_dn;
    dn.expert_bytes = (uint64_t)H * rb_dn; dn.expert = sel.data(); dn.x_div = 1; dn.y_stride = H;
    dn.ncols = NK; dn.gemv_quad = dn.gemv_qe = dn.gemv_xs = true; dn.gemv_rows = c.rows;
    const int64_t ds = H + 8;   // the output's rows with gaps
    int bad_host = 0;
    // (merged: the shared expert's Q8_0 gate/up, gate rows then up rows;
    // its products into the rows after the routed ones, as moe_exec's gus)
    const std::vector<uint8_t> wsh = c.merged ? emu_weights(SI_TYPE_Q8_0, 2 * F, H, ru, fr) : std::vector<uint8_t>();
    const uint64_t rb_sh = (uint64_t)(H / 32 * 34);
    auto shared_mm = [&](float *gus) {
        cu_mm m = {};
        m.w = wsh.data(); m.type = SI_TYPE_Q8_0; m.in = H; m.rows = c.merged == 1 ? 2 * F : F; m.row_bytes = rb_sh;
        m.x_div = 1; m.y = gus; m.y_stride = 2 * F; m.ncols = n; m.gemv_quad = m.gemv_st = m.gemv_qn = true;
        if (c.merged == 2) {
            m.more[0] = cu_mm_part{ wsh.data() + F * rb_sh, gus + F, F, rb_sh, 2 * F };
            m.n_more = 1;
        }
        return m;
    };
    const size_t gs_smem = GS_SMEM(H, 2, n);
    // ---- the unfused launches, as moe_exec makes them
    std::vector<float> g1((size_t)(nq * 2 * F)), y1((size_t)(NK * H)), dst1((size_t)(n * ds), -5.0f);
    std::copy(sh.begin(), sh.end(), g1.begin() + NK * 2 * F);
    std::vector<int8_t> q1((size_t)(nq * F));
    std::vector<float> qd1((size_t)(nq * nb)), qs1(qd1.size());
    if (c.merged) {   // the shared gate/up launch (gs_kernel)
        const cu_mm m = shared_mm(g1.data() + NK * 2 * F);
        emu_ptx::smem_bytes = gs_smem;
        bad_host |= !si_cu_gemvq_ok(&m);
        bad_host |= si_cu_gemvq(&m, xq.data(), xd.data(), xs.data(), NULL);
    }
    gu.y = g1.data();
    bad_host |= si_cu_gemvq(&gu, xq.data(), xd.data(), xs.data(), NULL);
    const std::vector<float> prod1(g1.begin(), g1.end());   // (before SwiGLU rewrites the gate half)
    const uint64_t st = (uint64_t)(2 * F) * 4;
    const cu_rows rg = { (uint8_t *)g1.data(), nq, 1, st, 0, 0 }, rup = { (uint8_t *)(g1.data() + F), nq, 1, st, 0, 0 };
    emu_launch(dim3(cu_q8_grid(nq * nb)), dim3(256), 0,
               [&] { swiglu_q_kernel(rg, rup, rg, F, nq, q1.data(), qd1.data(), qs1.data()); });
    dn.y = y1.data();
    bad_host |= si_cu_gemvq(&dn, q1.data(), qd1.data(), qs1.data(), NULL);
    const float *ysp = c.shared ? ys.data() : NULL;
    emu_launch(dim3((unsigned)((n * H + 255) / 256)), dim3(256), 0,
               [&] { combine_kernel(dst1.data(), (uint64_t)ds, y1.data(), wts.data(), ysp, gamma.data(), n, (int)K, H); });
    // ---- fused, twice: blocks in order, then shuffled
    std::vector<unsigned> ctr(2 * 4096, 0);
    int64_t d[6] = { 0, 0, 0, 0, 0, 0 }, left = 0;
    for (int run = 0; run < 2; run++) {
        std::vector<float> g2((size_t)(nq * 2 * F), NAN), y2((size_t)(NK * H), NAN), dst2((size_t)(n * ds), -5.0f);
        if (!c.merged)
            std::copy(sh.begin(), sh.end(), g2.begin() + NK * 2 * F);
        std::vector<int8_t> q2((size_t)(nq * F), (int8_t)0x55);
        std::vector<float> qd2((size_t)(nq * nb), NAN), qs2(qd2.size(), NAN);
        cu_moe_tail tg = {};
        tg.mode = CU_MOE_TAIL_SWIGLU; tg.ctr = ctr.data(); tg.ctr_n = 4096; tg.F = F;
        tg.q = q2.data(); tg.qd = qd2.data(); tg.qs = qs2.data();
        tg.sh = c.shared ? g2.data() + NK * 2 * F : NULL; tg.n_sh = nsh; tg.sh_stride = 2 * F;
        cu_moe_tail tc = {};
        tc.mode = CU_MOE_TAIL_COMBINE; tc.ctr = ctr.data() + 4096; tc.ctr_n = 4096; tc.K = (int)K;
        tc.dst = dst2.data(); tc.ds = (uint64_t)ds; tc.wts = wts.data(); tc.ys = ysp; tc.gamma = gamma.data();
        tc.ys_stride = H;
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "3", 1);
        cu_mm m = gu;
        m.y = g2.data();
        if (c.merged) {
            const cu_mm sm = shared_mm(g2.data() + NK * 2 * F);
            emu_ptx::smem_bytes = std::max(gs_smem, (size_t)H);
            bad_host |= !si_cu_gemvq_gs_ok(&m, &sm, &tg);
            bad_host |= si_cu_gemvq_gs(&m, xq.data(), xd.data(), xs.data(), &sm, &tg, NULL);
            emu_ptx::check_drained();
        } else {
            bad_host |= !si_cu_gemvq_tail_ok(&m, &tg);
            bad_host |= si_cu_gemvq_tail(&m, xq.data(), xd.data(), xs.data(), &tg, NULL);
        }
        left += nonzero(ctr);
        m = dn;
        m.y = y2.data();
        bad_host |= !si_cu_gemvq_tail_ok(&m, &tc);
        bad_host |= si_cu_gemvq_tail(&m, q2.data(), qd2.data(), qs2.data(), &tc, NULL);
        left += nonzero(ctr);
        unsetenv("EMU_BLOCK_ORDER");
        d[0] += ndiff(g2, prod1);
        d[1] += ndiff(q2, q1);
        d[2] += ndiff(qd2, qd1) + ndiff(qs2, qs1);
        d[3] += ndiff(y2, y1);
        d[4] += ndiff(dst2, dst1);
    }
    // (the reference is what it claims: every output written, finite)
    int64_t unset = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < ds; h++) {
            const float v = dst1[(size_t)(t * ds + h)];
            unset += h < H ? !std::isfinite(v) || v == -5.0f : v != -5.0f;
        }
    for (auto v : qd1) unset += !std::isfinite(v);
    const bool ok = !bad_host && unset == 0 && d[0] + d[1] + d[2] + d[3] + d[4] == 0 && left == 0;
    printf("  n %lld K %lld H %lld F %lld%s, %s/%s%s%s: differ gate/up %lld int8 %lld scales %lld down %lld out %lld, "
           "counts left %lld  %s\n",
           (long long)n, (long long)K, (long long)H, (long long)F, c.shared ? " +shared" : "",
           c.tgu == SI_TYPE_Q4_K ? "q4_K" : c.tgu == SI_TYPE_Q5_K ? "q5_K" : "q6_K",
           c.tdn == SI_TYPE_Q4_K ? "q4_K" : c.tdn == SI_TYPE_Q5_K ? "q5_K" : "q6_K", c.rows == 1 ? ", 1 row set" : "",
           c.merged == 1 ? ", one gate/up launch (q8_0 shared stacked)" : c.merged == 2 ? ", one gate/up launch (q8_0 shared, up as more[0])" : "",
           (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], (long long)d[4], (long long)left,
           ok ? "ok" : bad_host ? "FAIL (refused)" : unset ? "FAIL (the reference)" : "FAIL");
    return ok ? 0 : 1;
}

// What si_cu_gemvq_tail_ok refuses (moe_exec then runs unfused).
static int refusals()
{
    alignas(16) static uint8_t w[16];
    static int32_t sel[8];
    static unsigned ctr[128];
    static int8_t q[16];
    static float f[16];
    cu_mm mm = {};
    mm.w = w; mm.type = SI_TYPE_Q4_K; mm.in = 2048; mm.rows = 1024; mm.row_bytes = 1152;
    mm.expert_bytes = 1024 * 1152; mm.expert = sel; mm.x_div = 8; mm.y_stride = 1024; mm.ncols = 8;
    mm.gemv_quad = mm.gemv_qe = true;
    cu_moe_tail t = {};
    t.mode = CU_MOE_TAIL_SWIGLU; t.ctr = ctr; t.ctr_n = 128; t.F = 512; t.q = q; t.qd = f; t.qs = f;
    int bad = !si_cu_gemvq_tail_ok(&mm, &t);
    cu_moe_tail u = t; u.ctr_n = 127;   // 8 x 16 groups: 128 needed
    bad += si_cu_gemvq_tail_ok(&mm, &u);
    u = t; u.ctr = NULL; bad += si_cu_gemvq_tail_ok(&mm, &u);
    u = t; u.F = 496; bad += si_cu_gemvq_tail_ok(&mm, &u);
    cu_mm m = mm; m.rows = 1000; bad += si_cu_gemvq_tail_ok(&m, &t);
    m = mm; m.expert = NULL; bad += si_cu_gemvq_tail_ok(&m, &t);
    m = mm; m.type = SI_TYPE_Q8_0; bad += si_cu_gemvq_tail_ok(&m, &t);
    m = mm; m.gemv_qe = false; bad += si_cu_gemvq_tail_ok(&m, &t);
    cu_moe_tail k = {};
    k.mode = CU_MOE_TAIL_COMBINE; k.ctr = ctr; k.ctr_n = 64; k.K = 8; k.dst = f; k.wts = f;
    m = mm; m.in = 512; m.rows = 2048; m.row_bytes = 352; m.expert_bytes = 2048 * 352; m.x_div = 1;
    bad += !si_cu_gemvq_tail_ok(&m, &k);   // 1 token, 64 row blocks
    cu_moe_tail v = k; v.K = 9; bad += si_cu_gemvq_tail_ok(&m, &v);
    v = k; v.K = 3; bad += si_cu_gemvq_tail_ok(&m, &v);   // 8 columns are not tokens of 3
    v = k; v.ctr_n = 63; bad += si_cu_gemvq_tail_ok(&m, &v);
    v = k; v.ys = f; bad += si_cu_gemvq_tail_ok(&m, &v);   // a shared row without its gate
    v = k; v.mode = 0; bad += si_cu_gemvq_tail_ok(&m, &v);
    bad += si_cu_gemvq_tail(&m, q, f, f, &v, NULL) == 0;
    printf("  refusals (counters, F, rows, no experts, Q8_0, K, no gate, mode): %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main()
{
    const bool quick = getenv("MOEDEC_MODE") != NULL && strcmp(getenv("MOEDEC_MODE"), "quick") == 0;
    int rc = refusals();
    // the 35b-a3b's (hidden 2048, 8 of 256 experts of 512, a shared expert
    // of 512; Q4_K gate/up, Q5_K down; 32 experts stored
    // here, the picks among them): 1 and 8 tokens
    rc |= one({ 1, 32, 8, 2048, 512, true, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 0 });
    rc |= one({ 8, 32, 8, 2048, 512, true, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 0 });
    // knob moe_dec_fuse's one gate/up launch (gqe_gs_kernel): the shared
    // expert's Q8_0 products in it, stacked or as more[0]
    rc |= one({ 1, 32, 8, 2048, 512, true, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 0, 1 });
    rc |= one({ 8, 32, 8, 2048, 512, true, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 0, 2 });
    if (quick) {
        printf(rc ? "FAIL\n" : "OK\n");
        return rc;
    }
    rc |= one({ 2, 32, 8, 2048, 512, false, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 0 });
    rc |= one({ 3, 32, 8, 2048, 512, true, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 1 });   // R = 1: 4 and 16 rows a block
    rc |= one({ 3, 32, 8, 2048, 512, true, SI_TYPE_Q4_K, SI_TYPE_Q5_K, 1, 2 });
    rc |= one({ 2, 8, 4, 4096, 1024, true, SI_TYPE_Q5_K, SI_TYPE_Q4_K, 0, 1 });
    // other widths: 4096 / 1024 (8 and 16 rows a block), K 4 and 6, Q6_K
    // (whose rows of 4 blocks are not 16-byte multiples: gqe_kernel takes
    // it at 8 blocks a row)
    rc |= one({ 3, 8, 4, 4096, 1024, true, SI_TYPE_Q5_K, SI_TYPE_Q4_K, 0 });
    rc |= one({ 1, 16, 6, 2048, 1024, true, SI_TYPE_Q6_K, SI_TYPE_Q5_K, 1 });
    printf(rc ? "FAIL\n" : "OK\n");
    return rc;
}
