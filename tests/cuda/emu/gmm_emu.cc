// tests/cuda/emu/gmm_emu.cc — knobs gemv_mma and gemv_mma_wide under the
// host emulation: cuda_gemvm.cu's gm_kernel and cuda_gemvx.cu's gx_kernel (dense products
// of 2..8 and 9..32 columns on mma.sync int8, ptx_emu.h's mma and
// cp.async) against the dp4a GEMV v1 (cuda_mmq.cu's mmq_kernel, by chunks
// of 8 columns: the same integer terms, another f32 order) on the same
// quantised x.  Q4_K, Q5_K, Q6_K and Q8_0 rows; row counts
// off the block's 16; products with more[] parts in one launch; the
// outputs poisoned, with guard rows past each column that nothing may
// write; every global read checked against the buffers (emu::granges).
// Then the refusals (one column, x_div 2, in % 256, experts).
// Usage: gmm_emu (no arguments; run-gmm-emu.sh pastes the kernels in).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"
#include <cmath>

#include GMM_KERNELS   // cuda_mmq.cu, cuda_gemvm.cu and .cuh, cuda_gemvx.cu, launches through cu_launch

// (cuda_gemvq.cu is not pasted in: the reference runs v1's own kernel)
extern "C" bool si_cu_gemvq_ok(const cu_mm *) { return false; }
extern "C" int si_cu_gemvq(const cu_mm *, const int8_t *, const float *, const float *, void *) { return -1; }

static uint32_t rs = 7;
static uint32_t ru() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }
static float fr() { return (float)(ru() & 0xffffff) / 8388608.0f - 1.0f; }
static const char *tname(uint32_t t)
{
    return t == SI_TYPE_Q8_0 ? "q8_0" : t == SI_TYPE_Q4_K ? "q4_K" : t == SI_TYPE_Q5_K ? "q5_K" : "q6_K";
}

#define GUARD 8

// One launch: parts of rows[0..np) rows each (stored one after another),
// nc columns of width in.
static int one(uint32_t type, int64_t in, int nc, const std::vector<int64_t> &rows, int R = 0, bool db = false,
               int regs = 0, int n_sm = 0, bool split = false, int order = 0, bool ring = false, int pad = 0,
               bool narrow = false)
{
    const int np = (int)rows.size();
    std::vector<std::vector<uint8_t>> w(np);
    for (int k = 0; k < np; k++) {
        w[k] = emu_weights(type, rows[k], in, ru, fr);
        if (pad > 0) {   // rows pad bytes apart more than their bytes (a padded stride)
            const size_t rb = w[k].size() / (size_t)rows[k];
            std::vector<uint8_t> v((rb + (size_t)pad) * (size_t)rows[k], 0x5a);
            for (int64_t r = 0; r < rows[k]; r++)
                std::copy(w[k].begin() + (ptrdiff_t)(r * rb), w[k].begin() + (ptrdiff_t)((r + 1) * rb),
                          v.begin() + (ptrdiff_t)(r * (rb + pad)));
            w[k].swap(v);
        }
    }
    std::vector<float> x((size_t)(in * nc));
    for (auto &v : x) v = fr();
    std::vector<int8_t> q((size_t)(in * nc));
    std::vector<float> qd((size_t)(in / 32 * nc)), qs((size_t)(in / 32 * nc));
    emu::granges.clear();
    int rc = si_cu_quantize_x(x.data(), in, in, nc, q.data(), qd.data(), qs.data(), NULL);
    // y of part k: nc columns of rows[k] + GUARD floats (the guard: NaN after)
    std::vector<std::vector<float>> ref(np), got(np);
    cu_mm mm = {};
    mm.type = type; mm.in = in; mm.x = x.data(); mm.x_stride = in; mm.x_div = 1; mm.ncols = nc;
    for (int k = 0; k < np; k++) {
        const int64_t ys = rows[k] + GUARD;
        ref[k].assign((size_t)(ys * nc), NAN);
        got[k].assign((size_t)(ys * nc), NAN);
    }
    auto fill = [&](cu_mm &m, std::vector<std::vector<float>> &y) {
        m.w = w[0].data(); m.rows = rows[0]; m.row_bytes = (uint64_t)(w[0].size() / rows[0]);
        m.y = y[0].data(); m.y_stride = rows[0] + GUARD;
        m.n_more = np - 1;
        for (int k = 1; k < np; k++)
            m.more[k - 1] = (cu_mm_part){ w[k].data(), y[k].data(), rows[k], (uint64_t)(w[k].size() / rows[k]),
                                          rows[k] + GUARD };
    };
    // (v1 takes up to 8 columns: wider products by chunks of 8 columns,
    // x and y offset to the chunk's first)
    for (int c0 = 0; c0 < nc; c0 += 8) {
        cu_mm r = mm;
        fill(r, ref);
        r.ncols = nc - c0 < 8 ? nc - c0 : 8;
        r.y += c0 * r.y_stride;
        for (int k = 0; k < r.n_more; k++)
            r.more[k].y += c0 * r.more[k].y_stride;
        const int64_t nb = in / 32;
        rc |= si_cu_matmul_q8_v1(&r, q.data() + c0 * in, qd.data() + c0 * nb, qs.data() + c0 * nb, NULL);
    }
    cu_mm g = mm;
    fill(g, got);
    g.gemv_mma = true;
    g.gemv_rows = R;
    g.gemv_wide_db = db;
    g.gemv_wide_regs = regs;
    g.n_sm = n_sm;
    g.gemv_wide_split = split;
    g.gemv_wide_ring = ring;
    g.gemv_ring_ks8 = ring && n_sm > 1;   // (n_sm 1: KS 4 with the knob off)
    g.gemv_narrow = narrow ? 1 : 0;
    // (cp.async's bound: an sm_90's opt-in with DB, else the 48 KiB
    // gx_kernel's launch stays under; a cluster's blocks, 48 KiB each,
    // are one emulated block)
    emu_ptx::smem_bytes = split ? GX_CL_MAX * 48 * 1024 : db || ring ? 232448 : 48 * 1024;
    cl_emu::order = order;
    const bool ok_in = si_cu_gemvm_ok(&g);
    for (int k = 0; k < np; k++)
        emu::granges.push_back({ w[k].data(), w[k].data() + w[k].size(), "w" });
    emu::granges.push_back({ q.data(), q.data() + q.size(), "xq" });
    emu::granges.push_back({ qd.data(), qd.data() + qd.size(), "xd" });
    emu::granges.push_back({ qs.data(), qs.data() + qs.size(), "xs" });
    rc |= si_cu_gemvm(&g, q.data(), qd.data(), qs.data(), NULL);
    emu::granges.clear();
    int64_t bad = 0, past = 0, n = 0;
    double worst = 0.0;
    for (int k = 0; k < np; k++) {
        const int64_t ys = rows[k] + GUARD;
        for (int c = 0; c < nc; c++) {
            double mx = 0.0;
            for (int64_t i = 0; i < rows[k]; i++)
                mx = std::fmax(mx, std::fabs((double)ref[k][(size_t)(c * ys + i)]));
            for (int64_t i = 0; i < ys; i++) {
                const float a = ref[k][(size_t)(c * ys + i)], b = got[k][(size_t)(c * ys + i)];
                if (i >= rows[k]) {
                    past += !std::isnan(b);
                    continue;
                }
                n++;
                const double e = std::fabs((double)a - (double)b) / (mx > 0.0 ? mx : 1.0);
                worst = std::fmax(worst, std::isnan(e) ? 1e30 : e);
                bad += !(e <= 2e-5);
            }
        }
    }
    const bool ok = rc == 0 && ok_in && bad == 0 && past == 0;
    char how[48] = "";
    if (ring)
        snprintf(how, sizeof how, " (KS %d)",
                 type != SI_TYPE_Q8_0 && g.gemv_ring_ks8 && gm_blocks(&g, 32) <= (unsigned)n_sm ? 8 : 4);
    if (split)
        snprintf(how, sizeof how, " split (cluster %d%s)", gx_split(&g, gm_blocks(&g, 16 * 8)),
                 order == 1 ? ", rank order" : order == 2 ? ", reverse" : "");
    printf("  %s in %lld cols %d parts %d (rows %lld..) R %d%s%s%s%s: %lld of %lld outputs off (worst %.2g of max), %lld past%s  %s\n",
           tname(type), (long long)in, nc, np, (long long)rows[0], R, db ? " db" : "", narrow ? " narrow" : "",
           ring ? " ring" : "", how, (long long)bad, (long long)n,
           worst, (long long)past, ok_in ? "" : " (refused)", ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// What si_cu_gemvm_ok must refuse.
static int refusals()
{
    std::vector<uint8_t> w = emu_weights(SI_TYPE_Q4_K, 16, 512, ru, fr);
    cu_mm m = {};
    m.w = w.data(); m.type = SI_TYPE_Q4_K; m.in = 512; m.rows = 16; m.row_bytes = w.size() / 16;
    m.x_div = 1; m.ncols = 4; m.gemv_mma = true;
    int rc = si_cu_gemvm_ok(&m) ? 0 : 1;   // (taken)
    cu_mm a = m; a.gemv_mma = false; rc |= si_cu_gemvm_ok(&a);
    a = m; a.ncols = 1; rc |= si_cu_gemvm_ok(&a);
    a = m; a.ncols = 33; rc |= si_cu_gemvm_ok(&a);
    a = m; a.x_div = 2; rc |= si_cu_gemvm_ok(&a);
    a = m; a.in = 384; rc |= si_cu_gemvm_ok(&a);
    const int32_t e[4] = { 0, 0, 0, 0 };
    a = m; a.expert = e; rc |= si_cu_gemvm_ok(&a);
    a = m; a.type = SI_TYPE_F16; rc |= si_cu_gemvm_ok(&a);
    // x the kernels cannot load (launched: nothing may run, an error back)
    alignas(16) static int8_t xq[512 * 16];
    alignas(16) static float xd[16 * 16], xs[16 * 16];
    float y[16 * 16];
    a = m; a.y = y; a.y_stride = 16;
    rc |= si_cu_gemvm(&a, xq + 4, xd, xs, NULL) == 0;        // 8 bytes at a time
    a.ncols = 12;
    rc |= si_cu_gemvm(&a, xq + 8, xd, xs, NULL) == 0;        // gx_kernel: 16-byte cp.async
    rc |= si_cu_gemvm(&a, xq, xd + 2, xs, NULL) == 0;
    rc |= si_cu_gemvm(&a, xq, xd, xs + 1, NULL) == 0;
    printf("  refusals (knob off, 1 and 33 columns, x_div 2, in %% 256, experts, f16, misaligned x): %s\n",
           rc ? "FAIL" : "ok");
    return rc;
}

int main()
{
    int rc = 0;
    // (cp.async's bound; the launch's own bytes are guarded by emu.cc)
    emu_ptx::smem_bytes = 48 * 1024;
    // R: row tiles of 16 a warp (cu_mm.gemv_rows; 0: the default)
    rc |= one(SI_TYPE_Q4_K, 4096, 8, { 64 });              // the 9b's: 8 sequences
    rc |= one(SI_TYPE_Q4_K, 2048, 3, { 37, 16, 100 }, 1);  // three parts, rows off 16
    rc |= one(SI_TYPE_Q4_K, 2048, 7, { 37, 16, 100 }, 2);
    rc |= one(SI_TYPE_Q5_K, 1024, 5, { 40 }, 1);
    rc |= one(SI_TYPE_Q5_K, 1024, 4, { 70 }, 2);
    rc |= one(SI_TYPE_Q6_K, 4096, 8, { 33 });              // odd blocks: 2-byte aligned loads
    rc |= one(SI_TYPE_Q6_K, 2048, 2, { 16, 7 }, 1);
    rc |= one(SI_TYPE_Q6_K, 2048, 6, { 80, 7 }, 2);
    rc |= one(SI_TYPE_Q8_0, 2048, 8, { 48, 24 });          // the 35b's dense
    rc |= one(SI_TYPE_Q8_0, 256, 6, { 17 }, 1);
    rc |= one(SI_TYPE_Q8_0, 512, 3, { 90 }, 2);
    rc |= one(SI_TYPE_Q4_K, 256, 2, { 5 }, 1);             // fewer steps than warps
    rc |= one(SI_TYPE_Q5_K, 12288, 4, { 20 });             // 6 steps a warp (the next one held)
    rc |= one(SI_TYPE_Q8_0, 12288, 5, { 9 });              // (Q8_0 holds the next step)
    rc |= one(SI_TYPE_Q6_K, 12288, 3, { 9 }, 2);
    // knob gemv_mma_wide: gx_kernel, 2 and 4 column tiles; R: its row
    // tiles a block (2, 8; 0: by the rows)
    rc |= one(SI_TYPE_Q4_K, 4096, 32, { 64 });
    rc |= one(SI_TYPE_Q4_K, 2048, 13, { 37, 16, 100 }, 8);
    rc |= one(SI_TYPE_Q5_K, 1024, 16, { 40 }, 8);
    rc |= one(SI_TYPE_Q5_K, 2048, 27, { 21, 5 }, 2);
    rc |= one(SI_TYPE_Q6_K, 4096, 32, { 33 }, 2);
    rc |= one(SI_TYPE_Q6_K, 2048, 9, { 16, 7 }, 8);
    rc |= one(SI_TYPE_Q8_0, 2048, 24, { 48, 24 }, 8);
    rc |= one(SI_TYPE_Q8_0, 12288, 17, { 9 }, 2);
    rc |= one(SI_TYPE_Q4_K, 256, 31, { 5 }, 8);          // fewer steps than k-groups
    rc |= one(SI_TYPE_Q4_K, 1280, 20, { 70 }, 2);        // 5 steps: a round part past them
    rc |= one(SI_TYPE_Q4_K, 512, 9, { 67 });               // 2 steps, 4 k-groups
    rc |= one(SI_TYPE_Q8_0, 512, 12, { 67 });
    // knob gemv_wide_db: the same cases with x staged a round ahead (the
    // copies land at the latest wait the ISA allows: ptx_emu.h)
    rc |= one(SI_TYPE_Q4_K, 4096, 32, { 64 }, 0, true);
    rc |= one(SI_TYPE_Q4_K, 2048, 13, { 37, 16, 100 }, 8, true);
    rc |= one(SI_TYPE_Q5_K, 2048, 27, { 21, 5 }, 2, true);
    rc |= one(SI_TYPE_Q6_K, 4096, 32, { 33 }, 2, true);
    rc |= one(SI_TYPE_Q6_K, 2048, 9, { 16, 7 }, 8, true);
    rc |= one(SI_TYPE_Q8_0, 12288, 17, { 9 }, 2, true);
    rc |= one(SI_TYPE_Q4_K, 256, 31, { 5 }, 8, true);     // one round: nothing staged ahead
    rc |= one(SI_TYPE_Q4_K, 1280, 20, { 70 }, 2, true);   // 2 rounds, the second partial
    rc |= one(SI_TYPE_Q8_0, 512, 12, { 67 }, 0, true);
    // knob gemv_wide_regs (the register cap is the compiler's business;
    // here the launcher's choice: full, and small on either side of n_sm)
    rc |= one(SI_TYPE_Q4_K, 4096, 32, { 64 }, 0, false, 2);
    rc |= one(SI_TYPE_Q6_K, 2048, 9, { 16, 7 }, 8, false, 1, 132);
    rc |= one(SI_TYPE_Q5_K, 2048, 27, { 21, 5 }, 2, false, 1, 1);
    // knob gemv_wide_split: 128 rows a block, x a round ahead, clusters
    // of 4 (16 steps over 1 row block; 8 steps over 3 blocks of parts),
    // 2 (5 steps: 2 and 3 a block; n_sm 1 wants only 2 blocks) and none
    // (2 steps); the cluster's blocks skewed either way (a block that
    // read another's sums before the cluster barrier reads poison)
    rc |= one(SI_TYPE_Q4_K, 4096, 32, { 40 }, 0, false, 0, 0, true);
    rc |= one(SI_TYPE_Q4_K, 2048, 13, { 37, 16, 100 }, 0, false, 0, 0, true, 1);
    rc |= one(SI_TYPE_Q6_K, 2048, 9, { 16, 7 }, 0, false, 0, 0, true, 2);
    rc |= one(SI_TYPE_Q5_K, 1280, 20, { 70 }, 0, false, 0, 0, true);
    rc |= one(SI_TYPE_Q8_0, 512, 12, { 67 }, 0, false, 0, 0, true);
    rc |= one(SI_TYPE_Q8_0, 4096, 24, { 150 }, 0, false, 2, 0, true, 1);
    rc |= one(SI_TYPE_Q4_K, 4096, 32, { 64 }, 0, false, 0, 1, true, 2);
    // knob gemv_wide_ring: the weights' rounds through shared memory (4
    // steps a round: 16, 2 of 5 with a short last, one, 2 of 2; Q6_K's
    // 8-byte pieces; parts)
    rc |= one(SI_TYPE_Q4_K, 4096, 32, { 64 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q4_K, 2048, 13, { 37, 16, 100 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q5_K, 1280, 20, { 70 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q4_K, 256, 31, { 5 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q6_K, 4096, 32, { 33 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q6_K, 2048, 9, { 16, 7 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q8_0, 512, 12, { 67 }, 0, false, 0, 0, false, 0, true);
    rc |= one(SI_TYPE_Q8_0, 4096, 24, { 150, 9 }, 0, false, 0, 0, false, 0, true);
    // ... at KS 8 (16 warps; knob gemv_wide_ring_ks8, on here where n_sm
    // > 1) where the blocks are no more than n_sm: one round of 8 steps
    // over parts, 5 steps (3 k-groups idle), 3 rounds, Q6_K's 1680-byte
    // rounds; n_sm 1 keeps KS 4 (knob off; Q8_0 always does)
    rc |= one(SI_TYPE_Q4_K, 2048, 13, { 37, 16, 100 }, 0, false, 0, 132, false, 0, true);
    rc |= one(SI_TYPE_Q5_K, 1280, 20, { 70 }, 0, false, 0, 132, false, 0, true);
    rc |= one(SI_TYPE_Q4_K, 6144, 32, { 40 }, 0, false, 0, 132, false, 0, true);
    rc |= one(SI_TYPE_Q6_K, 4096, 9, { 33 }, 0, false, 0, 132, false, 0, true);
    rc |= one(SI_TYPE_Q4_K, 4096, 16, { 64 }, 0, false, 0, 1, false, 0, true);
    rc |= one(SI_TYPE_Q8_0, 4096, 24, { 70 }, 0, false, 0, 132, false, 0, true);
    // padded row strides: Q6_K rows of 210 and 1050 bytes in 224 and 1056
    // (a last round that is not whole 8- or 16-byte pieces), Q4_K's 16 more
    rc |= one(SI_TYPE_Q6_K, 256, 9, { 1, 40 }, 0, false, 0, 0, false, 0, true, 14);
    rc |= one(SI_TYPE_Q6_K, 256, 9, { 40 }, 0, false, 0, 132, false, 0, true, 14);
    rc |= one(SI_TYPE_Q6_K, 1280, 20, { 33 }, 0, false, 0, 0, false, 0, true, 6);
    rc |= one(SI_TYPE_Q6_K, 1280, 20, { 33 }, 0, false, 0, 132, false, 0, true, 6);
    rc |= one(SI_TYPE_Q4_K, 768, 12, { 50 }, 0, false, 0, 0, false, 0, true, 16);
    // knob gemv_narrow = wide: 2..8 columns on those kernels, one column
    // tile: the ring at KS 8 (n_sm 132) and 4 (parts; n_sm 1), Q6_K's
    // padded rows, gx_kernel full (regs 2) and capped (Q8_0, and the ring
    // off); gemv_rows = 2 keeps gm_kernel
    rc |= one(SI_TYPE_Q4_K, 4096, 8, { 64 }, 0, false, 0, 132, false, 0, true, 0, true);
    rc |= one(SI_TYPE_Q4_K, 2048, 3, { 37, 16, 100 }, 0, false, 0, 1, false, 0, true, 0, true);
    rc |= one(SI_TYPE_Q5_K, 1280, 2, { 70 }, 0, false, 0, 132, false, 0, true, 0, true);
    rc |= one(SI_TYPE_Q6_K, 4096, 5, { 33 }, 0, false, 0, 132, false, 0, true, 0, true);
    rc |= one(SI_TYPE_Q6_K, 256, 7, { 40 }, 0, false, 0, 0, false, 0, true, 14, true);
    rc |= one(SI_TYPE_Q8_0, 2048, 8, { 48, 24 }, 0, false, 2, 0, false, 0, true, 0, true);
    rc |= one(SI_TYPE_Q8_0, 512, 6, { 67 }, 0, false, 0, 0, false, 0, false, 0, true);
    rc |= one(SI_TYPE_Q4_K, 1024, 4, { 40 }, 0, false, 0, 0, false, 0, false, 0, true);
    rc |= one(SI_TYPE_Q4_K, 2048, 5, { 37, 16 }, 2, false, 0, 0, false, 0, true, 0, true);
    rc |= refusals();
    printf("%s\n", rc ? "FAIL" : "OK");
    return rc;
}
