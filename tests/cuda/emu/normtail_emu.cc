// tests/cuda/emu/normtail_emu.cc — knob norm_tail under the host
// emulation: cuda_gemvq.cu's products with their norm tail (mm.norm: the
// launch's last block adds the residual to the product's rows, normalises
// the sum and makes its int8 copy) against the two launches it replaces,
// the plain product (si_cu_gemvq) then rms2_kernel (cuda_elem.cu, the
// fused ADD + RMSNORM + int8 copy): the product, the sum, the norm's
// output, the int8 values, scales and block sums bit for bit.  Each case
// runs the fused launch twice on poisoned outputs, the second time with
// the blocks in a shuffled order (emu.cc EMU_BLOCK_ORDER): the tail must
// wait for every block, and the count must be back at 0 after each launch.
// Usage: normtail_emu (no arguments; run-normtail-emu.sh pastes the
// kernels in).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"

#include NORMTAIL_KERNELS

static uint32_t rs = 11;
static uint32_t ru() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }
static float fr() { return (float)(ru() & 0xffffff) / 8388608.0f - 1.0f; }

static int bytes_of(uint32_t t) { return t == SI_TYPE_Q4_K ? 144 : t == SI_TYPE_Q6_K ? 210 : 34; }
static int qk_of(uint32_t t) { return t == SI_TYPE_Q8_0 ? 32 : 256; }

struct shape {
    uint32_t t;
    int64_t rows, in, n;   // rows = the norm's width; n columns (tokens)
    int warps;             // cu_mm.gemv_warps
    bool add, quant;
};

static const char *tname(uint32_t t) { return t == SI_TYPE_Q4_K ? "q4_K" : t == SI_TYPE_Q6_K ? "q6_K" : "q8_0"; }

static int one(const shape &c)
{
    const int64_t H = c.rows, n = c.n, nb = H / 32, ys = H + 4, rs_ = H + 12;   // (strided rows)
    std::vector<int8_t> xq((size_t)(n * c.in));
    std::vector<float> xd((size_t)(n * c.in / 32)), xs(xd.size());
    for (auto &v : xq) v = (int8_t)((int)(ru() % 255) - 127);
    for (size_t i = 0; i < xd.size(); i++) {
        xd[i] = 0.01f * (1.0f + fr());
        xs[i] = 3.0f * fr();
    }
    std::vector<float> res((size_t)(n * rs_)), nw((size_t)H);
    for (auto &v : res) v = 2.0f * fr();
    for (auto &v : nw) v = 1.0f + 0.5f * fr();
    const std::vector<uint8_t> w = emu_weights(c.t, H, c.in, ru, fr);
    cu_mm mm = {};
    mm.w = w.data(); mm.type = c.t; mm.in = c.in; mm.rows = H; mm.row_bytes = (uint64_t)(c.in / qk_of(c.t) * bytes_of(c.t));
    mm.x_div = 1; mm.y_stride = ys; mm.ncols = n;
    mm.gemv_quad = mm.gemv_xs = mm.gemv_st = mm.gemv_qn = true;
    mm.gemv_warps = c.warps;
    mm.gemv_st6 = 0;
    emu_ptx::smem_bytes = c.t == SI_TYPE_Q8_0 ? GS_SMEM(c.in, 2, n) : (size_t)(c.in * n);
    const float eps = 1e-6f;
    auto rows = [&](float *p, int64_t stride) { return cu_rows{ (uint8_t *)p, n, 1, (uint64_t)stride * 4, 0, 0 }; };
    int bad_host = 0;
    // ---- the two launches: the product, then rms2_kernel
    std::vector<float> y1((size_t)(n * ys), -7.0f), r1((size_t)(n * rs_), -7.0f), d1(r1.size(), -7.0f);
    std::vector<int8_t> q1((size_t)(n * H), 0);
    std::vector<float> qd1((size_t)(n * nb), -7.0f), qs1(qd1.size(), -7.0f);
    mm.y = y1.data();
    bad_host |= si_cu_gemvq(&mm, xq.data(), xd.data(), xs.data(), NULL);
    cu_norm_fuse f1 = {};
    if (c.add) {
        f1.b = rows(res.data(), rs_);
        f1.r = rows(r1.data(), rs_);
    }
    if (c.quant) {
        f1.q = q1.data(); f1.qd = qd1.data(); f1.qs = qs1.data();
    }
    const cu_rows a1 = rows(y1.data(), ys), dr1 = rows(d1.data(), rs_);
    emu_launch(dim3((unsigned)n), dim3((unsigned)(H / RMS2_E)), 0,
               [&] { rms2_kernel(a1, nw.data(), dr1, H, n, eps, f1); });
    // ---- fused, twice: blocks in order, then shuffled
    unsigned ctr = 0;
    int64_t d[6] = { 0, 0, 0, 0, 0, 0 }, left = 0;
    for (int run = 0; run < 2; run++) {
        std::vector<float> y2((size_t)(n * ys), -7.0f), r2((size_t)(n * rs_), -7.0f), d2(r2.size(), -7.0f);
        std::vector<int8_t> q2((size_t)(n * H), 0);
        std::vector<float> qd2((size_t)(n * nb), -7.0f), qs2(qd2.size(), -7.0f);
        cu_mm m = mm;
        m.y = y2.data();
        m.norm.ctr = &ctr;
        m.norm.w = nw.data();
        m.norm.d = rows(d2.data(), rs_);
        m.norm.eps = eps;
        if (c.add) {
            m.norm.f.b = rows(res.data(), rs_);
            m.norm.f.r = rows(r2.data(), rs_);
        }
        if (c.quant) {
            m.norm.f.q = q2.data(); m.norm.f.qd = qd2.data(); m.norm.f.qs = qs2.data();
        }
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "5", 1);
        bad_host |= !si_cu_gemvq_norm_ok(&m);
        bad_host |= si_cu_gemvq(&m, xq.data(), xd.data(), xs.data(), NULL);
        unsetenv("EMU_BLOCK_ORDER");
        left += ctr != 0;
        d[0] += ndiff(y2, y1);
        d[1] += ndiff(r2, r1);
        d[2] += ndiff(d2, d1);
        d[3] += ndiff(q2, q1);
        d[4] += ndiff(qd2, qd1) + ndiff(qs2, qs1);
    }
    // (the reference is what it claims: the norm's rows written, finite)
    int64_t unset = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++)
            unset += !std::isfinite(d1[(size_t)(t * rs_ + h)]) || d1[(size_t)(t * rs_ + h)] == -7.0f;
    const bool ok = !bad_host && unset == 0 && d[0] + d[1] + d[2] + d[3] + d[4] == 0 && left == 0;
    printf("  %s rows %lld in %lld n %lld, %d warps%s%s: differ product %lld sum %lld norm %lld int8 %lld "
           "scales %lld, count left %lld  %s\n",
           tname(c.t), (long long)H, (long long)c.in, (long long)n, c.warps, c.add ? ", +residual" : "",
           c.quant ? ", int8 copy" : "", (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3],
           (long long)d[4], (long long)left, ok ? "ok" : bad_host ? "FAIL (refused)" : unset ? "FAIL (the reference)" : "FAIL");
    return ok ? 0 : 1;
}

// ---- knob norm_tail = defer (gqd_kernel: 32 rows a block, gq_norm_defer)
// The host's cu_xr_scale: lane l adds parts l, l + 32, ... in order, then
// cu_warp_sumd's butterfly (xor 16, 8, 4, 2, 1).
static float xr_scale_host(const std::vector<double> &part, int64_t ne, float eps)
{
    double v[32] = { 0 }, w[32];
    for (size_t i = 0; i < part.size(); i++)
        v[i % 32] += part[i];
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < 32; l++)
            w[l] = v[l] + v[l ^ o];
        memcpy(v, w, sizeof v);
    }
    return (float)(1.0 / sqrt(v[0] / (double)ne + (double)eps));
}

// The deferred product against the plain product then rms2_kernel: the
// product and the sum bit for bit, d = sum * w bit for bit, the int8 copy
// that of d (cu_q8_block32's arithmetic, done here), each block's sum of
// squares, and d times the scale from those sums within 1e-6 of
// rms2_kernel's output (another order of the sum of squares).  Then the
// readers: a Q4_K product of the copy taking the scale (cu_mm.xr) against
// the same product of the copy with its scales multiplied first (within
// 1e-6 of its largest output), and
// xr_resolve_kernel (d and the scales times the scale, in place).  Twice,
// the second time with the blocks shuffled.  rg: the weights' regrouped
// copy (gemv_q6r / gemv_q8r) made first.
static int defer_one(uint32_t t, int64_t H, int64_t in, bool add, bool rg)
{
    const int64_t nb = H / 32;
    const float eps = 1e-6f;
    std::vector<int8_t> xq((size_t)in);
    std::vector<float> xd((size_t)(in / 32)), xs(xd.size());
    for (auto &v : xq) v = (int8_t)((int)(ru() % 255) - 127);
    for (size_t i = 0; i < xd.size(); i++) {
        xd[i] = 0.01f * (1.0f + fr());
        xs[i] = 3.0f * fr();
    }
    std::vector<float> res((size_t)H), nw((size_t)H);
    for (auto &v : res) v = 2.0f * fr();
    for (auto &v : nw) v = 1.0f + 0.5f * fr();
    const std::vector<uint8_t> w = emu_weights(t, H, in, ru, fr);
    std::vector<uint8_t> wrg;
    cu_mm mm = {};
    mm.w = w.data(); mm.type = t; mm.in = in; mm.rows = H; mm.row_bytes = (uint64_t)(in / qk_of(t) * bytes_of(t));
    mm.x_div = 1; mm.y_stride = H; mm.ncols = 1;
    mm.gemv_quad = mm.gemv_xs = mm.gemv_st = mm.gemv_qn = true;
    mm.gemv_warps = 8;
    mm.gemv_st6 = 0;
    int bad_host = 0;
    if (rg) {
        wrg.assign(w.size(), 0);
        bad_host |= si_cu_rg_copy(t, w.data(), wrg.data(), w.size(), NULL);
        mm.w_rg = wrg.data();
    }
    auto rows1 = [&](float *p) { return cu_rows{ (uint8_t *)p, 1, 1, (uint64_t)H * 4, 0, 0 }; };
    // ---- the reference: the plain product, then rms2_kernel
    std::vector<float> y1((size_t)H, -7.0f), r1((size_t)H, -7.0f), d1((size_t)H, -7.0f);
    mm.y = y1.data();
    emu_ptx::smem_bytes = t == SI_TYPE_Q8_0 && !rg ? GS_SMEM(in, 2, 1) : (size_t)in;
    bad_host |= si_cu_gemvq(&mm, xq.data(), xd.data(), xs.data(), NULL);
    cu_norm_fuse f1 = {};
    if (add) {
        f1.b = rows1(res.data());
        f1.r = rows1(r1.data());
    }
    const cu_rows a1 = rows1(y1.data()), dr1 = rows1(d1.data());
    emu_launch(dim3(1), dim3((unsigned)(H / RMS2_E)), 0, [&] { rms2_kernel(a1, nw.data(), dr1, H, 1, eps, f1); });
    const std::vector<float> &x1 = add ? r1 : y1;
    // the reader: 96 rows of Q4_K over the H values
    const std::vector<uint8_t> w2 = emu_weights(SI_TYPE_Q4_K, 96, H, ru, fr);
    int64_t d[9] = { 0 };
    double worst = 0.0, worst_rd = 0.0;
    for (int run = 0; run < 2; run++) {
        std::vector<float> y2((size_t)H, -7.0f), r2((size_t)H, -7.0f), d2((size_t)H, -7.0f);
        std::vector<int8_t> q2((size_t)H, 0);
        std::vector<float> qd2((size_t)nb, -7.0f), qs2((size_t)nb, -7.0f);
        std::vector<double> part((size_t)nb, -7.0);
        cu_mm m = mm;
        m.y = y2.data();
        m.norm.part = part.data();
        m.norm.w = nw.data();
        m.norm.d = rows1(d2.data());
        m.norm.eps = eps;
        if (add) {
            m.norm.f.b = rows1(res.data());
            m.norm.f.r = rows1(r2.data());
        }
        m.norm.f.q = q2.data(); m.norm.f.qd = qd2.data(); m.norm.f.qs = qs2.data();
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "3", 1);
        emu_ptx::smem_bytes = (size_t)in;
        bad_host |= !si_cu_gemvq_defer_ok(&m);
        bad_host |= si_cu_gemvq(&m, xq.data(), xd.data(), xs.data(), NULL);
        unsetenv("EMU_BLOCK_ORDER");
        d[0] += ndiff(y2, y1);
        if (add)
            d[1] += ndiff(r2, r1);
        for (int64_t i = 0; i < H; i++) {
            const float tv = x1[(size_t)i] * nw[(size_t)i];
            d[2] += memcmp(&tv, &d2[(size_t)i], 4) != 0;
        }
        // the copy: cu_q8_block32 of d2's blocks of 32
        for (int64_t g = 0; g < nb; g++) {
            const float *v = &d2[(size_t)(32 * g)];
            float amax = 0.0f, sum = 0.0f;
            for (int l = 0; l < 32; l++)
                amax = fmaxf(amax, fabsf(v[l]));
            const float dd = amax / 127.0f, id = dd > 0.0f ? 1.0f / dd : 0.0f;
            for (int l = 0; l < 32; l++) {
                int qi = (int)nearbyintf(v[l] * id);
                qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
                d[3] += q2[(size_t)(32 * g + l)] != (int8_t)qi;
                sum += v[l];
            }
            d[4] += qd2[(size_t)g] != dd || qs2[(size_t)g] != sum;
            double ss = 0.0;
            for (int l = 0; l < 32; l++)
                ss += (double)x1[(size_t)(32 * g + l)] * (double)x1[(size_t)(32 * g + l)];
            d[5] += !(fabs(part[(size_t)g] - ss) <= 1e-12 * ss);
        }
        const float r = xr_scale_host(part, H, eps);
        for (int64_t i = 0; i < H; i++) {
            const double e = fabs((double)(d2[(size_t)i] * r) - (double)d1[(size_t)i]);
            worst = e / (fabs((double)d1[(size_t)i]) + 1e-3) > worst ? e / (fabs((double)d1[(size_t)i]) + 1e-3) : worst;
        }
        // the reader with the scale against the reader of the scaled copy
        cu_mm c = {};
        c.w = w2.data(); c.type = SI_TYPE_Q4_K; c.in = H; c.rows = 96; c.row_bytes = (uint64_t)(H / 256 * 144);
        c.x_div = 1; c.y_stride = 96; c.ncols = 1;
        c.gemv_quad = c.gemv_xs = true;
        c.gemv_warps = 8;
        std::vector<float> y3(96, -7.0f), y4(96, -7.0f), qd4(qd2), qs4(qs2);
        for (int64_t g = 0; g < nb; g++) {
            qd4[(size_t)g] = qd2[(size_t)g] * r;
            qs4[(size_t)g] = qs2[(size_t)g] * r;
        }
        c.y = y4.data();
        emu_ptx::smem_bytes = (size_t)H;
        bad_host |= si_cu_gemvq(&c, q2.data(), qd4.data(), qs4.data(), NULL);
        c.y = y3.data();
        c.xr = cu_xr{ part.data(), (int)nb, H, eps };
        bad_host |= !si_cu_gemvq_xr_ok(&c);
        emu_ptx::smem_bytes = (size_t)H + 8 * (size_t)nb;
        bad_host |= si_cu_gemvq(&c, q2.data(), qd2.data(), qs2.data(), NULL);
        double ymax = 0.0;
        for (int i = 0; i < 96; i++)
            ymax = fabs((double)y4[i]) > ymax ? fabs((double)y4[i]) : ymax;
        for (int i = 0; i < 96; i++) {
            const double e = fabs((double)y3[i] - (double)y4[i]) / (ymax + 1e-30);
            worst_rd = e > worst_rd ? e : worst_rd;
        }
        // xr_resolve_kernel: d and the copy's scales times r, in place
        std::vector<float> d5(d2), qd5(qd2), qs5(qs2);
        const cu_xr xr = c.xr;
        emu_launch(dim3(1), dim3(256), 0, [&] { xr_resolve_kernel(xr, d5.data(), qd5.data(), qs5.data()); });
        for (int64_t i = 0; i < H; i++)
            d[7] += d5[(size_t)i] != d2[(size_t)i] * r;
        for (int64_t g = 0; g < nb; g++)
            d[8] += qd5[(size_t)g] != qd4[(size_t)g] || qs5[(size_t)g] != qs4[(size_t)g];
    }
    const bool ok = !bad_host && d[0] + d[1] + d[2] + d[3] + d[4] + d[5] + d[7] + d[8] == 0 && worst <= 1e-6 &&
                    worst_rd <= 1e-6;
    printf("  defer %s%s rows %lld in %lld%s: differ product %lld sum %lld t %lld int8 %lld scales %lld squares %lld "
           "resolved %lld/%lld; norm within %.2g, reader within %.2g  %s\n",
           tname(t), rg ? " (regrouped)" : "", (long long)H, (long long)in, add ? ", +residual" : "", (long long)d[0],
           (long long)d[1], (long long)d[2], (long long)d[3], (long long)d[4], (long long)d[5], (long long)d[7],
           (long long)d[8], worst, worst_rd, ok ? "ok" : bad_host ? "FAIL (refused)" : "FAIL");
    return ok ? 0 : 1;
}

// What si_cu_gemvq_norm_ok refuses (cuda_ops.c then runs the norm after).
static int refusals()
{
    alignas(16) static uint8_t w[16];
    alignas(16) static float f[64];
    alignas(16) static int8_t q[64];
    static unsigned ctr;
    cu_mm mm = {};
    mm.w = w; mm.type = SI_TYPE_Q4_K; mm.in = 4096; mm.rows = 4096; mm.row_bytes = 2304; mm.x_div = 1;
    mm.y = f; mm.y_stride = 4096; mm.ncols = 1; mm.gemv_quad = mm.gemv_xs = true;
    mm.norm.ctr = &ctr; mm.norm.w = f; mm.norm.d = cu_rows{ (uint8_t *)f, 2, 1, 16384, 0, 0 };
    mm.norm.f.b = mm.norm.f.r = mm.norm.d;
    mm.norm.f.q = q; mm.norm.f.qd = f; mm.norm.f.qs = f;
    int bad = !si_cu_gemvq_norm_ok(&mm);
    cu_mm m = mm; m.rows = 4000; bad += si_cu_gemvq_norm_ok(&m);   // not % 512
    m = mm; m.rows = 8192; bad += si_cu_gemvq_norm_ok(&m);          // wider than 4096
    m = mm; m.norm.ctr = NULL; bad += si_cu_gemvq_norm_ok(&m);
    m = mm; m.norm.w = f + 1; bad += si_cu_gemvq_norm_ok(&m);       // unaligned weight
    m = mm; m.norm.d.nb1 = 16388; bad += si_cu_gemvq_norm_ok(&m);   // unaligned rows
    m = mm; m.y_stride = 4097; bad += si_cu_gemvq_norm_ok(&m);
    m = mm; m.norm.f.qd = f + 1; bad += si_cu_gemvq_norm_ok(&m);
    m = mm; m.n_more = 1; m.more[0] = cu_mm_part{ w, f, 512, 2304, 512 }; bad += si_cu_gemvq_norm_ok(&m);
    m = mm; m.type = SI_TYPE_Q6_K; m.row_bytes = 3360; m.gemv_st6 = 1; bad += si_cu_gemvq_norm_ok(&m);   // g6_kernel
    m = mm; m.ncols = 9; bad += si_cu_gemvq_norm_ok(&m);
    m = mm; m.ncols = 2; m.gemv_qn = true; bad += !si_cu_gemvq_norm_ok(&m);   // (ne1 >= 2 below)
    m.norm.d.ne1 = 1; bad += si_cu_gemvq_norm_ok(&m);                      // a view of fewer rows
    m = mm; m.gemv_xs = false; bad += si_cu_gemvq_norm_ok(&m);              // x from global memory
    m = mm; m.type = SI_TYPE_Q8_0; m.row_bytes = 4352; m.gemv_st = true; bad += !si_cu_gemvq_norm_ok(&m);
    m.gemv_rows = 1; bad += si_cu_gemvq_norm_ok(&m);                       // gs_kernel at 1 row a warp
    m = mm; m.rows = 4000; bad += si_cu_gemvq(&m, q, f, f, NULL) == 0;
    // norm_tail = defer (si_cu_gemvq_defer_ok) and its readers (si_cu_gemvq_xr_ok)
    static double part[8];
    cu_mm dm = mm;
    dm.norm.ctr = NULL; dm.norm.part = part;
    bad += !si_cu_gemvq_defer_ok(&dm);
    m = dm; m.rows = 4016; bad += si_cu_gemvq_defer_ok(&m);                 // not whole blocks of 32
    m = dm; m.ncols = 2; m.gemv_qn = true; bad += si_cu_gemvq_defer_ok(&m); // columns
    m = dm; m.norm.ctr = &ctr; bad += si_cu_gemvq_defer_ok(&m);             // a tail as well
    m = dm; m.n_more = 1; m.more[0] = cu_mm_part{ w, f, 512, 2304, 512 }; bad += si_cu_gemvq_defer_ok(&m);
    m = dm; m.type = SI_TYPE_Q8_0; m.row_bytes = 4352; m.gemv_st = true; bad += si_cu_gemvq_defer_ok(&m);   // not regrouped
    m = dm; m.type = SI_TYPE_Q6_K; m.row_bytes = 3360; m.gemv_st6 = 1; bad += si_cu_gemvq_defer_ok(&m);    // g6_kernel
    m = dm; m.rows = 4016; bad += si_cu_gemvq(&m, q, f, f, NULL) == 0;
    cu_mm xm = mm;
    xm.norm.ctr = NULL; xm.xr = cu_xr{ part, 8, 256, 1e-6f };
    bad += !si_cu_gemvq_xr_ok(&xm);
    m = xm; m.gemv_xs = false; bad += si_cu_gemvq_xr_ok(&m);                // x from global memory
    m = xm; m.ncols = 2; m.gemv_qn = true; bad += si_cu_gemvq_xr_ok(&m);
    m = xm; m.type = SI_TYPE_Q8_0; m.row_bytes = 4352; m.gemv_st = true; bad += si_cu_gemvq_xr_ok(&m);      // gs_kernel
    m = xm; m.ncols = 2; m.gemv_qn = true; bad += si_cu_gemvq(&m, q, f, f, NULL) == 0;
    printf("  refusals (rows, counter, alignment, more[], g6_kernel, columns, views, x, rows a warp; defer, its readers): %s\n",
           bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main()
{
    int rc = refusals();
    // the 9b's out-projection / ffn down (4096 wide; in 2048 here), one
    // token and a few; the 35b-a3b's Q8_0 out-projection (2048 wide)
    rc |= one({ SI_TYPE_Q4_K, 4096, 2048, 1, 4, true, true });
    rc |= one({ SI_TYPE_Q4_K, 4096, 2048, 3, 4, true, true });
    rc |= one({ SI_TYPE_Q6_K, 4096, 2048, 1, 4, true, true });
    rc |= one({ SI_TYPE_Q8_0, 2048, 2048, 1, 4, true, true });
    rc |= one({ SI_TYPE_Q8_0, 2048, 2048, 2, 4, true, true });
    // 8 warps a block (knob gemv_warps: fewer chunks than threads), no
    // residual, no int8 copy
    rc |= one({ SI_TYPE_Q4_K, 2048, 4096, 1, 8, true, true });
    rc |= one({ SI_TYPE_Q4_K, 4096, 2048, 1, 8, true, true });   // the 9b default: a chunk a thread
    rc |= one({ SI_TYPE_Q4_K, 512, 2048, 2, 4, false, false });
    rc |= one({ SI_TYPE_Q6_K, 1024, 2048, 5, 4, true, false });
    // norm_tail = defer: the 9b's out-projection and ffn down (Q6_K on the
    // GGUF rows and on the regrouped copy), the 35b-a3b's Q8_0 one
    // (regrouped), no residual
    rc |= defer_one(SI_TYPE_Q4_K, 4096, 2048, true, false);
    rc |= defer_one(SI_TYPE_Q6_K, 4096, 2048, true, false);
    rc |= defer_one(SI_TYPE_Q6_K, 2048, 4096, true, true);
    rc |= defer_one(SI_TYPE_Q8_0, 2048, 2048, true, true);
    rc |= defer_one(SI_TYPE_Q4_K, 2048, 2048, false, false);
    printf(rc ? "FAIL\n" : "OK\n");
    return rc;
}
