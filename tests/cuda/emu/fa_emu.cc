// tests/cuda/emu/fa_emu.cc — the flash-attention core of SI_OP_ATTN
// (cuda_attn_fa.cu, attn_prefill = fa) through si_cu_attn's real dispatch
// (rope, append, fa_kernel, combine_kernel when split) under the host
// emulation, against a double-precision reference written from the cpu
// backend's formulas (cpu_attn.c), not from the kernel:
//   the f16 cache already holds PRIOR positions of each sequence (random
//   rows: a cached prefix), the op appends NEW tokens per sequence and
//   attends; out[t][h] = sum_p softmax_p(q . k_p / sqrt(hd)) v_p *
//   sigmoid(gate) over positions 0..pos[t] of the token's sequence, q =
//   rope(rms(q) * q_norm) rounded to f16 (what the kernel feeds the tensor
//   cores), K/V the f16 rows the cache holds after the op.
// The remaining difference is the kernel's f16 rounding of the softmax
// weights and its f32 sums: checked <= 1e-3 of max |out|.  The output and
// the split partials are NaN-poisoned, unwritten cache rows are NaN (a
// read of one past a sequence's end would show).
// Usage: fa_emu HD NH NKV NROT NSM ORDER PRIOR:NEW...
//   NSM multiprocessors (sizes the split: small = many splits), ORDER 0 =
//   each sequence's tokens together, k > 0 = round robin over the
//   sequences k tokens at a time (tiles holding several sequences).
//   EMU_FA_TILE=v1|v2|v3 (default v2): the knob attn_fa_tile; the plan may
//   still take v1 (an op of <= 64 tokens, or EMU_SMEM_OPTIN too small for
//   v2) or v2 (v3 at hd 64); the kernel that ran is printed, and
//   EMU_FA_EXPECT=v1|v2|v3 makes any other one a failure.  An op that ran
//   v2 runs v1 too (compared), and at hd 128 / 256 v3 too (the v3 kernel,
//   cuda_attn_fa3.cu, on ptx_emu.h's f16 wgmma): against the reference
//   and against v2; EMU_FA_TILE=v3 runs v3 first, then v2.  Every op
//   that ran v3 runs it again with the knob attn_fa3_overlap (the softmax
//   overlapping the tile before's P V): against the reference and against
//   v3's bits (the same per-row arithmetic in the same order).
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_internal.h"
#include "ptx_emu.h"
static uint32_t rs = 4321;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }

static int hd, nh, nkv, nrot, n_ctx;
static std::vector<float> qnw, knw;

static void ref_norm_rope(float *x, const float *w, int pos)
{
    double ss = 0;
    for (int i = 0; i < hd; i++) ss += (double)x[i] * x[i];
    const float sc = (float)(1.0 / sqrt(ss / hd + 1e-6));
    for (int i = 0; i < hd; i++) { float t = x[i] * sc; x[i] = t * w[i]; }
    const int half = nrot / 2;
    for (int i = 0; i < half; i++) {
        const double th = (double)pos * pow(1e7, -2.0 * i / nrot);
        const float c = (float)cos(th), s = (float)sin(th);
        const float x0 = x[i], x1 = x[i + half];
        float a = x0 * c, b = x1 * s; x[i] = a - b;
        float d = x1 * c, e = x0 * s; x[i + half] = d + e;
    }
}

// One si_cu_attn of the op (rope, append, the fa core, combine) with the
// knob attn_fa_tile = v2 or v1, into out (NaN-poisoned first, as are the
// partials); the plan in fp.  0, or 1 after saying why.
static int run_op(cu_attn a, int tile, std::vector<float> &out, cu_fa_plan &fp, const char *expect)
{
    std::fill(out.begin(), out.end(), NAN);
    a.dst = out.data();
    a.fa_tile = tile;
    if (!si_cu_fa_plan(&a, &fp)) { printf("  si_cu_fa_plan refused the op: FAIL\n"); return 1; }
    if (expect != nullptr && strcmp(expect, fp.tile == 3 ? "v3" : fp.tile == 2 ? "v2" : "v1") != 0) {
        printf("  the plan took fa v%d, not %s: FAIL\n", fp.tile, expect);
        return 1;
    }
    const size_t pb = si_cu_attn_part_bytes(&a);
    std::vector<float> part(pb / 4 + 1, NAN);
    a.part = pb ? part.data() : nullptr;
    // the kernel's dynamic shared memory: v1 Q, K, V tiles of 64 rows; v2
    // Q of 128 rows and two stages of K, V; v3 cuda_attn_fa3.cu's
    emu_ptx::smem_bytes = fp.tile == 3 ? si_cu_fa3_smem(hd) : (size_t)(fp.tile == 2 ? 128 + 4 * 64 : 3 * 64) * hd * 2;
    const int rc = si_cu_attn(&a, nullptr);
    emu_ptx::check_drained();
    emu_ptx::wg_check_drained();
    if (rc != 0) { printf("  si_cu_attn returned %d: FAIL\n", rc); return 1; }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 8) { fprintf(stderr, "usage: fa_emu HD NH NKV NROT NSM ORDER PRIOR:NEW...\n"); return 2; }
    hd = atoi(argv[1]); nh = atoi(argv[2]); nkv = atoi(argv[3]); nrot = atoi(argv[4]);
    const int nsm = atoi(argv[5]), order = atoi(argv[6]);
    std::vector<int> prior, nnew;
    for (int i = 7; i < argc; i++) {
        int p = 0, q = 0;
        if (sscanf(argv[i], "%d:%d", &p, &q) != 2) { fprintf(stderr, "fa_emu: '%s': expected PRIOR:NEW\n", argv[i]); return 2; }
        prior.push_back(p); nnew.push_back(q);
    }
    const int ns = (int)prior.size() + 1;   // one sequence never used
    int ml = 0;
    for (size_t s = 0; s < prior.size(); s++) ml = std::max(ml, prior[s] + nnew[s]);
    n_ctx = ml + 5;
    printf("fa_emu hd %d heads %d/%d n_rot %d n_sm %d order %d:", hd, nh, nkv, nrot, nsm, order);
    for (size_t s = 0; s < prior.size(); s++) printf(" %d:%d", prior[s], nnew[s]);
    printf("\n");
    qnw.resize(hd); knw.resize(hd);
    for (auto &x : qnw) x = 1 + 0.3f * fr();
    for (auto &x : knw) x = 1 + 0.3f * fr();
    const size_t rows = (size_t)ns * n_ctx * nkv * hd;
    std::vector<_Float16> kh(rows, (_Float16)NAN), vh(rows, (_Float16)NAN);
    for (size_t s = 0; s < prior.size(); s++)
        for (int p = 0; p < prior[s]; p++)
            for (int g = 0; g < nkv; g++)
                for (int i = 0; i < hd; i++) {
                    const size_t at = (((size_t)s * n_ctx + p) * nkv + g) * hd + i;
                    kh[at] = (_Float16)(1.5f * fr());
                    vh[at] = (_Float16)fr();
                }
    // the op's tokens
    std::vector<int32_t> seq, pos;
    if (order <= 0) {
        for (size_t s = 0; s < prior.size(); s++)
            for (int p = 0; p < nnew[s]; p++) seq.push_back((int32_t)s), pos.push_back(prior[s] + p);
    } else {
        std::vector<int> next(prior.size(), 0);
        for (bool any = true; any;) {
            any = false;
            for (size_t s = 0; s < prior.size(); s++)
                for (int k = 0; k < order && next[s] < nnew[s]; k++, any = true)
                    seq.push_back((int32_t)s), pos.push_back(prior[s] + next[s]++);
        }
    }
    const int n = (int)seq.size();
    const size_t qs = (size_t)nh * 2 * hd + 5, ks = (size_t)nkv * hd + 3, ds = (size_t)nh * hd + 7;
    std::vector<float> qg(n * qs), k(n * ks), v(n * ks), dst(n * ds, NAN), rope(n * nrot + 1, NAN);
    for (auto &x : qg) x = 2 * fr();
    for (auto &x : k) x = 2 * fr();
    for (auto &x : v) x = fr();
    cu_attn a = {};
    a.qg = qg.data(); a.k = k.data(); a.v = v.data();
    a.qg_stride = qs; a.k_stride = ks; a.v_stride = ks; a.dst_stride = ds;
    a.q_norm = qnw.data(); a.k_norm = knw.data(); a.dst = dst.data();
    a.n_head = nh; a.n_head_kv = nkv; a.head_dim = hd; a.n_rot = nrot;
    a.eps = 1e-6f; a.rope_base = 1e7f;
    a.n = n; a.pos = pos.data(); a.seq = seq.data(); a.rope = rope.data();
    a.n_ctx = (uint32_t)n_ctx; a.f16 = true; a.kc = kh.data(); a.vc = vh.data();
    a.split = true; a.fa = true; a.n_sm = nsm; a.max_len = ml;
    const char *tile = getenv("EMU_FA_TILE");
    const int want = tile == nullptr ? 2 : strcmp(tile, "v1") == 0 ? 1 : strcmp(tile, "v3") == 0 ? 3 : 2;
    cu_fa_plan fp;
    emu::granges = { { kh.data(), kh.data() + rows, "k cache" }, { vh.data(), vh.data() + rows, "v cache" } };
    if (run_op(a, want, dst, fp, getenv("EMU_FA_EXPECT")) != 0) return 1;

    // the reference (q rounded to f16: the check; f32 q: reported)
    std::vector<double> ref(dst.size(), NAN), refq(dst.size(), NAN);
    double mx = 0;
    std::vector<double> sc(n_ctx), acc(hd);
    std::vector<float> qr(hd);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            const int g = h / (nh / nkv);
            const float *qrow = &qg[t * qs + (size_t)h * 2 * hd];
            std::vector<float> q(qrow, qrow + hd);
            ref_norm_rope(q.data(), qnw.data(), pos[t]);
            for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < hd; i++) qr[i] = pass ? q[i] : (float)(_Float16)q[i];
                double m = -1e300, l = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += (double)qr[i] * (double)kh[(((size_t)seq[t] * n_ctx + p) * nkv + g) * hd + i];
                    sc[p] = d / sqrt((double)hd);
                    m = std::max(m, sc[p]);
                }
                for (int i = 0; i < hd; i++) acc[i] = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    const double e = exp(sc[p] - m);
                    l += e;
                    for (int i = 0; i < hd; i++) acc[i] += e * (double)vh[(((size_t)seq[t] * n_ctx + p) * nkv + g) * hd + i];
                }
                for (int i = 0; i < hd; i++) {
                    const double gate = qrow[hd + i], want_v = acc[i] / l / (1.0 + exp(-gate));
                    (pass ? refq : ref)[t * ds + (size_t)h * hd + i] = want_v;
                    if (pass == 0) mx = std::max(mx, std::fabs(want_v));
                }
            }
        }
    // out against the reference: <= 1e-3 of max |out|, every value finite
    auto check = [&](const std::vector<float> &out, const cu_fa_plan &p) {
        double md = 0, mdq = 0;
        int nan = 0, at_t = -1, at_h = -1;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < nh * hd; i++) {
                const size_t at = t * ds + i;
                const float got = out[at];
                if (!std::isfinite(got)) { if (nan++ < 3) printf("  token %d head %d [%d] = %g\n", t, i / hd, i % hd, got); continue; }
                const double d = std::fabs(got - ref[at]);
                if (d > md) { md = d; at_t = t; at_h = i / hd; }
                mdq = std::max(mdq, std::fabs(got - refq[at]));
            }
        const bool ok = nan == 0 && md <= 1e-3 * mx;
        printf("  fa v%d, %d tokens, %d splits of %d: max |out - ref| %.3g = %.2e of max %.3g (token %d head %d); vs f32 q %.2e; %d non-finite: %s\n",
               p.tile, n, p.n_split, p.chunk, md, md / mx, mx, at_t, at_h, mdq / mx, nan, ok ? "ok" : "FAIL");
        return ok;
    };
    // the largest difference of two outputs (and how many values differ)
    auto differ = [&](const std::vector<float> &x, const std::vector<float> &y, size_t &nd) {
        double d = 0;
        nd = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < nh * hd; i++) {
                const float u = x[t * ds + i], v = y[t * ds + i];
                nd += memcmp(&u, &v, sizeof u) != 0;
                d = std::max(d, (double)std::fabs(u - v));
            }
        return d;
    };
    bool ok = check(dst, fp);
    if (fp.tile == 1)
        return ok ? 0 : 1;
    if (fp.tile == 2) {
        // v2 against v1 on the same op (the cache rows it appends are the
        // same): per row the same key tiles, fragments and order, so the
        // same bits where both cut the context alike; else combine's f32
        // order and the f16 P of other split maxima, within the 5e-4 of
        // max |out| that both keep to the reference by
        std::vector<float> dst1(dst.size());
        cu_fa_plan fp1;
        if (run_op(a, 1, dst1, fp1, "v1") != 0) return 1;
        size_t nd;
        const double d1 = differ(dst, dst1, nd);
        const bool same = fp1.n_split == fp.n_split && fp1.chunk == fp.chunk;
        const bool ok1 = same ? nd == 0 : d1 <= 5e-4 * mx;
        printf("  vs fa v1 (%d splits of %d): %zu values differ, max %.2e of max |out|: %s\n", fp1.n_split, fp1.chunk, nd,
               d1 / mx, ok1 ? "ok" : same ? "FAIL (same splits: bits must agree)" : "FAIL");
        ok = ok && ok1;
    }
    if (hd != 128 && hd != 256)
        return ok ? 0 : 1;
    // v3 on every op v2 runs at hd 128 / 256 (the plan must take it on the
    // default sm_90 shared memory; with EMU_SMEM_OPTIN it may not fit), and
    // v2 on every op v3 runs (EMU_FA_TILE=v3): each against the reference,
    // and against each other: the same splits, per row the same f16 q and
    // P, and here the same sums (the emulator takes every k16 step of
    // mma.sync and of wgmma alike: exact products, the sum rounded once),
    // so the same bits.  (On the GPU the tensor cores' summation orders
    // differ: check_cuda_ops compares v3 and v2 within 1e-3.)
    std::vector<float> dst3(dst.size());
    cu_fa_plan fp3;
    const int other = fp.tile == 2 ? 3 : 2;
    const bool must = getenv("EMU_SMEM_OPTIN") == nullptr;
    if (run_op(a, other, dst3, fp3, !must ? nullptr : other == 3 ? "v3" : "v2") != 0) return 1;
    if (fp3.tile != other) {
        printf("  v3: the plan took fa v%d (v3 does not fit here)\n", fp3.tile);
        return ok ? 0 : 1;
    }
    const bool ok3 = check(dst3, fp3);
    size_t nd;
    const double d3 = differ(dst, dst3, nd);
    const bool ok32 = fp3.n_split == fp.n_split && fp3.chunk == fp.chunk && nd == 0;
    printf("  v3 vs v2 (%d splits of %d): %zu values differ, max %.2e of max |out|: %s\n", fp3.n_split, fp3.chunk, nd,
           d3 / mx, ok32 ? "ok" : "FAIL (the emulator's sums agree: bits must)");
    // v3 again with attn_fa3_overlap: per row v3's products, softmax and
    // rescale in v3's order (only when each is issued and waited for
    // moves), so v3's bits; its own K / V release order and parities are
    // what the reference and the bits check (a stage read after its
    // refill, or S read before its wait, shows)
    const std::vector<float> &out3 = fp.tile == 3 ? dst : dst3;
    cu_attn ao = a;
    ao.fa3_overlap = true;
    std::vector<float> dsto(dst.size());
    cu_fa_plan fpo;
    if (run_op(ao, 3, dsto, fpo, "v3") != 0) return 1;
    printf("  attn_fa3_overlap:\n");
    const bool oko = check(dsto, fpo);
    const double dov = differ(out3, dsto, nd);
    const cu_fa_plan &p3 = fp.tile == 3 ? fp : fp3;
    const bool oko3 = fpo.n_split == p3.n_split && fpo.chunk == p3.chunk && nd == 0;
    printf("  overlap vs v3 (%d splits of %d): %zu values differ, max %.2e of max |out|: %s\n", fpo.n_split, fpo.chunk,
           nd, dov / mx, oko3 ? "ok" : "FAIL (same arithmetic, same order: bits must agree)");
    return ok && ok3 && ok32 && oko && oko3 ? 0 : 1;
}
