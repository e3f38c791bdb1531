// tests/cuda/emu/glu_emu.cc — knob gemv_glu under the host emulation:
// cuda_gemvq.cu's gu_kernel (the ffn's gate and up products, their SwiGLU
// and its int8 copy in one launch) against the two launches it replaces,
// the products (si_cu_gemvq, gate rows then more[0] the up rows) then
// swiglu_q_kernel (cuda_elem.cu): the gate and up outputs, the SwiGLU and
// the int8 values, scales and block sums bit for bit, with the blocks in
// order and shuffled (emu.cc EMU_BLOCK_ORDER), outputs poisoned; the
// same for the MOE's routed experts with the shared expert's rows, against
// gqe_kernel then swiglu_q_kernel.  Then the shapes si_cu_gemvq_glu_ok
// refuses.
// Usage: glu_emu (no arguments; run-glu-emu.sh pastes the kernels in).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"

#include GLU_KERNELS

static uint32_t rs = 29;
static uint32_t ru() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }
static float fr() { return (float)(ru() & 0xffffff) / 8388608.0f - 1.0f; }

static int bytes_of(uint32_t t) { return t == SI_TYPE_Q4_K ? 144 : t == SI_TYPE_Q5_K ? 176 : 210; }
static const char *tname(uint32_t t) { return t == SI_TYPE_Q4_K ? "q4_K" : t == SI_TYPE_Q5_K ? "q5_K" : "q6_K"; }

// ncx columns of `in` random int8 activations with sane per-32 scales
// and block sums (what si_cu_quantize_x would hand the products).
struct xcopy {
    std::vector<int8_t> q;
    std::vector<float>  d, s;
};
static xcopy rand_x(int64_t in, int64_t ncx)
{
    xcopy x{ std::vector<int8_t>((size_t)(ncx * in)), std::vector<float>((size_t)(ncx * in / 32)), {} };
    x.s.resize(x.d.size());
    for (auto &v : x.q) v = (int8_t)((int)(ru() % 255) - 127);
    for (size_t i = 0; i < x.d.size(); i++) {
        x.d[i] = 0.01f * (1.0f + fr());
        x.s[i] = 3.0f * fr();
    }
    return x;
}

static int one(uint32_t t, int64_t F, int64_t in)
{
    const int64_t nb = F / 32, rb = in / 256 * bytes_of(t);
    const xcopy x = rand_x(in, 1);
    const std::vector<int8_t> &xq = x.q;
    const std::vector<float> &xd = x.d, &xs = x.s;
    const std::vector<uint8_t> wg = emu_weights(t, F, in, ru, fr), wu = emu_weights(t, F, in, ru, fr);
    cu_mm mm = {};
    mm.w = wg.data(); mm.type = t; mm.in = in; mm.rows = F; mm.row_bytes = (uint64_t)rb;
    mm.x_div = 1; mm.y_stride = F; mm.ncols = 1;
    mm.gemv_quad = mm.gemv_xs = true;
    mm.gemv_warps = 8;
    mm.n_more = 1;
    emu_ptx::smem_bytes = (size_t)in;
    int bad_host = 0;
    // ---- the two launches: the products (gate rows, then up rows), then swiglu_q_kernel
    std::vector<float> g1((size_t)F, -7.0f), u1((size_t)F, -7.0f), d1((size_t)F, -7.0f);
    std::vector<int8_t> q1((size_t)F, 0);
    std::vector<float> qd1((size_t)nb, -7.0f), qs1(qd1.size(), -7.0f);
    mm.y = g1.data();
    mm.more[0] = cu_mm_part{ wu.data(), u1.data(), F, (uint64_t)rb, F };
    bad_host |= si_cu_gemvq(&mm, xq.data(), xd.data(), xs.data(), NULL);
    auto row = [&](float *p) { return cu_rows{ (uint8_t *)p, 1, 1, (uint64_t)F * 4, 0, 0 }; };
    const cu_rows gr = row(g1.data()), ur = row(u1.data()), dr = row(d1.data());
    emu_launch(dim3((unsigned)cu_q8_grid(nb)), dim3(256), 0,
               [&] { swiglu_q_kernel(gr, ur, dr, F, 1, q1.data(), qd1.data(), qs1.data()); });
    // ---- one launch, twice: blocks in order, then shuffled
    int64_t d[5] = { 0, 0, 0, 0, 0 };
    for (int run = 0; run < 2; run++) {
        std::vector<float> g2((size_t)F, -7.0f), u2((size_t)F, -7.0f), d2((size_t)F, -7.0f);
        std::vector<int8_t> q2((size_t)F, 0);
        std::vector<float> qd2((size_t)nb, -7.0f), qs2(qd2.size(), -7.0f);
        cu_mm m = mm;
        m.y = g2.data();
        m.more[0].y = u2.data();
        const cu_glu gl = { d2.data(), 0, q2.data(), qd2.data(), qs2.data(), NULL, 0, 0 };
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "7", 1);
        bad_host |= !si_cu_gemvq_glu_ok(&m, &gl);
        bad_host |= si_cu_gemvq_glu(&m, xq.data(), xd.data(), xs.data(), &gl, NULL);
        unsetenv("EMU_BLOCK_ORDER");
        d[0] += ndiff(g2, g1);
        d[1] += ndiff(u2, u1);
        d[2] += ndiff(d2, d1);
        d[3] += ndiff(q2, q1);
        d[4] += ndiff(qd2, qd1) + ndiff(qs2, qs1);
    }
    // (the reference is what it claims: every SwiGLU value written, finite)
    int64_t unset = 0;
    for (int64_t j = 0; j < F; j++)
        unset += !std::isfinite(d1[(size_t)j]) || d1[(size_t)j] == -7.0f;
    const bool ok = !bad_host && unset == 0 && d[0] + d[1] + d[2] + d[3] + d[4] == 0;
    printf("  %s F %lld in %lld: differ gate %lld up %lld swiglu %lld int8 %lld scales %lld  %s\n", tname(t),
           (long long)F, (long long)in, (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3],
           (long long)d[4], ok ? "ok" : bad_host ? "FAIL (refused)" : unset ? "FAIL (the reference)" : "FAIL");
    return ok ? 0 : 1;
}

// The MOE's routed experts (K picks of E for each of n tokens, columns
// t*K + k on x column t) with the shared expert's n rows (gate/up made
// before, rows NK.. of gu [NK + n][2F]): against gqe_kernel (si_cu_gemvq
// with experts) then swiglu_q_kernel over all NK + n rows, in place into
// the gate halves as moe_swiglu_q runs it.  early: the picks read before
// the programmatic-launch wait (mm.expert_early).
static int experts(uint32_t t, int64_t F, int64_t in, int64_t E, int K, int64_t n, bool early)
{
    const int64_t NK = n * K, R = NK + n, nb = F / 32, rb = in / 256 * bytes_of(t), nbx = in / 32;
    const xcopy x = rand_x(in, n);
    const std::vector<int8_t> &xq = x.q;
    const std::vector<float> &xd = x.d, &xs = x.s;
    const std::vector<uint8_t> wg = emu_weights(t, E * F, in, ru, fr), wu = emu_weights(t, E * F, in, ru, fr);
    std::vector<int32_t> sel((size_t)NK);
    for (auto &v : sel) v = (int32_t)(ru() % (uint32_t)E);
    std::vector<float> gu0((size_t)(R * 2 * F), -7.0f);   // shared rows: the launch before's
    for (int64_t i = NK * 2 * F; i < R * 2 * F; i++)
        gu0[(size_t)i] = 4.0f * fr();
    cu_mm mm = {};
    mm.w = wg.data(); mm.type = t; mm.in = in; mm.rows = F; mm.row_bytes = (uint64_t)rb;
    mm.x_div = K; mm.y_stride = 2 * F; mm.ncols = NK; mm.expert = sel.data(); mm.expert_bytes = (uint64_t)(F * rb);
    mm.expert_early = early;
    mm.gemv_quad = mm.gemv_xs = mm.gemv_qe = true;
    mm.n_more = 1;
    emu_ptx::smem_bytes = (size_t)in;
    int bad_host = 0;
    // ---- the products, then swiglu_q_kernel over every row
    std::vector<float> gu1 = gu0;
    std::vector<int8_t> q1((size_t)(R * F), 0);
    std::vector<float> qd1((size_t)(R * nb), -7.0f), qs1(qd1.size(), -7.0f);
    mm.y = gu1.data();
    mm.more[0] = cu_mm_part{ wu.data(), gu1.data() + F, F, (uint64_t)rb, 2 * F };
    bad_host |= si_cu_gemvq(&mm, xq.data(), xd.data(), xs.data(), NULL);
    const cu_rows gr = { (uint8_t *)gu1.data(), R, 1, (uint64_t)(2 * F) * 4, 0, 0 };
    const cu_rows ur = { (uint8_t *)(gu1.data() + F), R, 1, (uint64_t)(2 * F) * 4, 0, 0 };
    emu_launch(dim3((unsigned)cu_q8_grid(R * nb)), dim3(256), 0,
               [&] { swiglu_q_kernel(gr, ur, gr, F, R, q1.data(), qd1.data(), qs1.data()); });
    // ---- one launch, twice: blocks in order, then shuffled
    int64_t d[3] = { 0, 0, 0 };
    for (int run = 0; run < 2; run++) {
        std::vector<float> gu2 = gu0;
        std::vector<int8_t> q2((size_t)(R * F), 0);
        std::vector<float> qd2((size_t)(R * nb), -7.0f), qs2(qd2.size(), -7.0f);
        cu_mm m = mm;
        m.y = gu2.data();
        m.more[0].y = gu2.data() + F;
        const cu_glu gl = { gu2.data(), 2 * F, q2.data(), qd2.data(), qs2.data(), gu2.data() + NK * 2 * F, n, 2 * F };
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "3", 1);
        bad_host |= !si_cu_gemvq_glu_ok(&m, &gl);
        bad_host |= si_cu_gemvq_glu(&m, xq.data(), xd.data(), xs.data(), &gl, NULL);
        unsetenv("EMU_BLOCK_ORDER");
        d[0] += ndiff(gu2, gu1);
        d[1] += ndiff(q2, q1);
        d[2] += ndiff(qd2, qd1) + ndiff(qs2, qs1);
    }
    int64_t unset = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < 2 * F; i++)
            unset += !std::isfinite(gu1[(size_t)(r * 2 * F + i)]) || gu1[(size_t)(r * 2 * F + i)] == -7.0f;
    const bool ok = !bad_host && unset == 0 && d[0] + d[1] + d[2] == 0;
    printf("  experts %s F %lld in %lld, %d of %lld, %lld token(s)%s: differ gate/up/swiglu %lld int8 %lld scales %lld  %s\n",
           tname(t), (long long)F, (long long)in, K, (long long)E, (long long)n, early ? ", picks early" : "",
           (long long)d[0], (long long)d[1], (long long)d[2],
           ok ? "ok" : bad_host ? "FAIL (refused)" : unset ? "FAIL (the reference)" : "FAIL");
    return ok ? 0 : 1;
}

// What si_cu_gemvq_glu_ok refuses (cuda_ops.c then runs the products and
// the SwiGLU apart).
static int refusals()
{
    alignas(16) static uint8_t w[16];
    alignas(16) static float f[64];
    static int32_t e[8];
    static unsigned ctr;
    cu_mm mm = {};
    mm.w = w; mm.type = SI_TYPE_Q4_K; mm.in = 4096; mm.rows = 12288; mm.row_bytes = 2304; mm.x_div = 1;
    mm.y = f; mm.y_stride = 12288; mm.ncols = 1; mm.gemv_quad = mm.gemv_xs = true;
    mm.n_more = 1; mm.more[0] = cu_mm_part{ w, f, 12288, 2304, 12288 };
    const cu_glu gl = { f, 0, (int8_t *)w, f, f, NULL, 0, 0 };
    cu_glu sh = gl; sh.sh = f; sh.n_sh = 1; sh.sh_stride = 2 * 512;
    int bad = !si_cu_gemvq_glu_ok(&mm, &gl);
    cu_mm m = mm; m.rows = 12280; m.more[0].rows = 12280; bad += si_cu_gemvq_glu_ok(&m, &gl);   // not % 32
    m = mm; m.more[0].rows = 11264; bad += si_cu_gemvq_glu_ok(&m, &gl);                      // up of another height
    m = mm; m.n_more = 0; bad += si_cu_gemvq_glu_ok(&m, &gl);
    m = mm; m.n_more = 2; m.more[1] = m.more[0]; bad += si_cu_gemvq_glu_ok(&m, &gl);
    m = mm; m.ncols = 2; m.gemv_qn = true; bad += si_cu_gemvq_glu_ok(&m, &gl);                // dense: one column
    m = mm; bad += si_cu_gemvq_glu_ok(&m, &sh);                                                // dense: no shared rows
    m = mm; m.in = 1280; m.row_bytes = 720; m.more[0].row_bytes = 720; bad += si_cu_gemvq_glu_ok(&m, &gl);   // in % 2048
    m = mm; m.in = 18432; m.row_bytes = 10368; m.more[0].row_bytes = 10368; bad += si_cu_gemvq_glu_ok(&m, &gl);   // x > 16 KB
    m = mm; m.type = SI_TYPE_Q8_0; m.row_bytes = 4352; m.more[0].row_bytes = 4352; bad += si_cu_gemvq_glu_ok(&m, &gl);
    m = mm; m.more[0].w = w + 4; bad += si_cu_gemvq_glu_ok(&m, &gl);                          // unaligned rows
    m = mm; m.norm.ctr = &ctr; bad += si_cu_gemvq_glu_ok(&m, &gl);
    // experts: many columns and shared rows; unaligned experts refused
    cu_mm x = mm; x.in = 2048; x.row_bytes = x.more[0].row_bytes = 1152; x.rows = x.more[0].rows = 512;
    x.expert = e; x.expert_bytes = 512 * 1152; x.ncols = 8; x.x_div = 8;
    bad += !si_cu_gemvq_glu_ok(&x, &gl) || !si_cu_gemvq_glu_ok(&x, &sh);
    m = x; m.expert_bytes += 4; bad += si_cu_gemvq_glu_ok(&m, &gl);
    cu_glu s2 = sh; s2.sh_stride = 512; bad += si_cu_gemvq_glu_ok(&x, &s2);                   // shared rows overlap
    m = mm; m.rows = 12280; bad += si_cu_gemvq_glu(&m, (int8_t *)w, f, f, &gl, NULL) == 0;
    printf("  refusals (rows, heights, parts, columns, shared rows, width, type, alignment, a norm tail, experts): %s\n",
           bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main()
{
    int rc = refusals();
    // the 9b's ffn gate/up (4096 wide; fewer rows here), two steps a row;
    // a row of one step (2048: the 35b-a3b's width), Q5_K and Q6_K
    rc |= one(SI_TYPE_Q4_K, 1024, 4096);
    rc |= one(SI_TYPE_Q4_K, 256, 2048);
    rc |= one(SI_TYPE_Q5_K, 512, 2048);
    rc |= one(SI_TYPE_Q6_K, 512, 4096);
    rc |= one(SI_TYPE_Q6_K, 96, 6144);   // three steps, three blocks
    // the 35b-a3b's routed gate/up (8 of 256 there; F 512, 2048 wide) with
    // its shared expert's rows, one token and three; two steps a row
    rc |= experts(SI_TYPE_Q4_K, 512, 2048, 16, 8, 1, true);
    rc |= experts(SI_TYPE_Q5_K, 256, 2048, 8, 4, 3, false);
    rc |= experts(SI_TYPE_Q6_K, 64, 4096, 4, 2, 2, true);
    printf(rc ? "FAIL\n" : "OK\n");
    return rc;
}
