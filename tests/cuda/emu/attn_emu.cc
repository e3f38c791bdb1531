// tests/cuda/emu/attn_emu.cc — SI_OP_ATTN of cuda_sm120 (si_cu_attn with
// its real dispatch: rope, append, split_kernel / split_i8_kernel /
// attend_kernel, combine) under the host emulation, against a double
// precision reference written from the cpu backend's formulas (cpu_attn.c)
// and the paged layout of cuda_kv.c's comment — not from the kernels.
//   op 1: every sequence's prefill (lengths from the command line) in one
//         op, tokens of the sequences one after the other;
//   op 2: one decoding token per sequence, in reverse sequence order.
// Each op also runs si_cu_attn_front (cuda_ext's attn_prepare for a kernel
// plugin) and checks its normed+roped q against the reference's.
// i8: pages are handed out in a random order (not 0, 1, 2...), unowned
// table entries are -1 (a read through one faults), unwritten scales are
// NaN and the output and partials are NaN-poisoned; after each op every
// cached row is compared with an independent quantisation of the same k/v
// (scale exact, int8 exact), and the output with attention over the
// dequantised rows (tight) and over the f32 rows (the int8 error, loose).
// SPLIT 2 (attn_gqa = shared, f16/f32): split_gqa_kernel (cuda_attn_gqa.cu)
// against the reference as above, and every attended op run a second time
// with the per-head split_kernel (attn_gqa = per_head) on the same cache:
// the two outputs must agree within the same tolerance (bit-identical is
// not required: the staged tile may be shorter than 64 positions).
// SPLIT 3 (f16): attn_gqa = shared with attn_mma, split_mma_kernel
// (cuda_attn_mma.cu) on the emulated tensor cores, checked likewise to
// 1e-3 of max |out| (its q and p are rounded to f16).
// SPLIT 4 / 5 (f16): that with attn_ring = true / small, split_ring_kernel
// (cuda_attn_ring.cu; head_dim 128 and 256, else split_mma_kernel runs),
// checked as SPLIT 3.  Where the ring runs, each op also runs with knob
// attn_ring_chains = 2 (within SPLIT 3's bound of the first run) and,
// over the int8 pages, attn_ring_pages = ahead (its bits) on the same cache.
// The split cores cut each token's own context (knob attn_split_len =
// context, split_chunk), or with EMU_SPLIT_BUCKET set the planned max_len.
// Usage: attn_emu KV SPLIT HD NH NKV NROT NSM PF LEN...
//   KV i8|f16|f32, SPLIT 1 = attn split, 2 = split with attn_gqa = shared,
//   3 = that with attn_mma, 4 / 5 = that with attn_ring = true / small
//   (else simple), NSM multiprocessors
//   (sizes the split grid: small = many splits), PF 0 = the prefill op runs
//   append (rope table, K/V) only (long contexts: its attention is not checked).
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_internal.h"
#include "ptx_emu.h"
__global__ void append_kernel(cu_attn a);
extern "C" int si_cu_attn_front(const cu_attn *a, float *q, void *stream);
static uint32_t rs = 12345;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }
static uint32_t ri(uint32_t n) { rs = rs * 1664525u + 1013904223u; return (rs >> 8) % n; }

struct cfg { int i8, f16, split, hd, nh, nkv, nrot, nsm, pf; };
static cfg C;
static int n_seq, n_ctx, max_pages, n_pages;
static std::vector<int32_t> table;                   // [n_seq][max_pages], -1 = none
static std::vector<int> seq_pages;
static std::vector<int32_t> free_pages;
static std::vector<int8_t> kpool, vpool;
static std::vector<float> kscale, vscale, kdense, vdense;
static std::vector<_Float16> kh, vh;
// reference rows: [seq][pos][g][hd], f32 after norm/rope (k) and as given (v)
static std::vector<float> kref, vref, kdq, vdq;
static std::vector<float> qnw, knw;

static size_t ridx(int s, int p, int g) { return (((size_t)s * n_ctx + p) * C.nkv + g) * C.hd; }

static void ref_rope(int pos, double *cs)
{
    const int half = C.nrot / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)pos * pow(1e7, -2.0 * i / C.nrot);
        cs[2 * i] = (float)cos(th);
        cs[2 * i + 1] = (float)sin(th);
    }
}
static void ref_norm_rope(float *x, const float *w, int pos)
{
    const int hd = C.hd;
    double ss = 0;
    for (int i = 0; i < hd; i++) ss += (double)x[i] * x[i];
    float sc = (float)(1.0 / sqrt(ss / hd + 1e-6));
    for (int i = 0; i < hd; i++) { float t = x[i] * sc; x[i] = t * w[i]; }
    std::vector<double> cs(C.nrot + 2);
    ref_rope(pos, cs.data());
    const int half = C.nrot / 2;
    for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half], c = (float)cs[2 * i], s = (float)cs[2 * i + 1];
        float a = x0 * c, b = x1 * s; x[i] = a - b;
        float d = x1 * c, e = x0 * s; x[i + half] = d + e;
    }
}
// independent quantiser: scale = max|x| / 127, q = rint(x / scale)
static void ref_quant(const float *x, int8_t *q, float *scale)
{
    float m = 0;
    for (int i = 0; i < C.hd; i++) m = std::max(m, std::fabs(x[i]));
    *scale = m / 127.0f;
    for (int i = 0; i < C.hd; i++) {
        float r = m > 0 ? rintf(x[i] * (127.0f / m)) : 0.0f;
        q[i] = (int8_t)std::max(-127.0f, std::min(127.0f, r));
    }
}
static size_t page_row(int s, int p, int g)
{
    int32_t pg = table[(size_t)s * max_pages + p / 16];
    if (pg < 0) { fprintf(stderr, "attn_emu: seq %d pos %d has no page\n", s, p); exit(2); }
    return ((size_t)pg * C.nkv + g) * 16 + p % 16;
}

// one ATTN op: tokens (seq[t], pos[t]); returns 0 when it matched
static int run_op(const std::vector<int32_t> &seq, const std::vector<int32_t> &pos, bool attend, const char *what)
{
    const int n = (int)seq.size(), hd = C.hd, nh = C.nh, nkv = C.nkv;
    const size_t qs = (size_t)nh * 2 * hd + 5, ks = (size_t)nkv * hd + 3, ds = (size_t)nh * hd + 7;
    std::vector<float> qg(n * qs), k(n * ks), v(n * ks), dst(n * ds, NAN), rope(n * C.nrot + 1, NAN);
    std::vector<float> dst_ph(n * ds, NAN);   // SPLIT 2: the per-head split kernel's output
    // the ring's knobs attn_ring_pages = ahead (int8), attn_ring_chains = 2
    std::vector<float> dst_ah(n * ds, NAN), dst_c2(n * ds, NAN);
    for (auto &x : qg) x = 2 * fr();
    for (auto &x : k) x = 2 * fr();
    for (auto &x : v) x = fr();
    // a few rows with one big element: the int8 scale is then set by it
    for (int t = 0; t < n; t += 7) k[t * ks + (t % hd)] = 9.0f, v[t * ks + (t * 3 % hd)] = -5.0f;
    // pages for the new positions (cu_kv_pages_reserve's job on the host)
    if (C.i8)
        for (int t = 0; t < n; t++) {
            int need = pos[t] / 16 + 1;
            while (seq_pages[seq[t]] < need) {
                int j = (int)ri((uint32_t)free_pages.size());
                table[(size_t)seq[t] * max_pages + seq_pages[seq[t]]++] = free_pages[j];
                free_pages.erase(free_pages.begin() + j);
            }
        }
    cu_attn a = {};
    a.qg = qg.data(); a.k = k.data(); a.v = v.data();
    a.qg_stride = qs; a.k_stride = ks; a.v_stride = ks; a.dst_stride = ds;
    a.q_norm = qnw.data(); a.k_norm = knw.data(); a.dst = dst.data();
    a.n_head = nh; a.n_head_kv = nkv; a.head_dim = hd; a.n_rot = C.nrot;
    a.eps = 1e-6f; a.rope_base = 1e7f; a.yarn_factor = 0; a.yarn_orig_ctx = 0;
    a.n = n; a.pos = pos.data(); a.seq = seq.data(); a.rope = rope.data();
    a.n_ctx = (uint32_t)n_ctx; a.f16 = C.f16; a.i8 = C.i8;
    if (C.i8) {
        a.kc = kpool.data(); a.vc = vpool.data(); a.ks = kscale.data(); a.vs = vscale.data();
        a.pages = table.data(); a.max_pages = (uint32_t)max_pages;
    } else if (C.f16) {
        a.kc = kh.data(); a.vc = vh.data();
    } else {
        a.kc = kdense.data(); a.vc = vdense.data();
    }
    // cu_attn_prepare
    int32_t ml = 0;
    for (int t = 0; t < n; t++) ml = std::max(ml, pos[t] + 1);
    a.split = C.split != 0; a.gqa_shared = C.split >= 2; a.dec_mma = C.split >= 3;
    a.n_sm = C.nsm; a.max_len = si_cu_attn_bucket(ml);   // as cu_attn_prepare
    // knob attn_split_len: context (the default) or, with EMU_SPLIT_BUCKET, bucket
    a.split_ctx = getenv("EMU_SPLIT_BUCKET") == NULL;
    // an H200's shared memory, or (EMU_SMEM_OPTIN=101376) sm_120's: 99 KB a block, 100 an SM
    a.ring = C.split == 4 ? 1 : C.split == 5 ? 2 : 0;
    a.ring_ahead = false;
    a.ring_chains = 1;
    a.smem_blk = getenv("EMU_SMEM_OPTIN") ? atoi(getenv("EMU_SMEM_OPTIN")) : 232448;
    a.smem_sm = a.smem_blk < 232448 ? 102400 : 233472;
    // the second core each op runs on the same cache: per_head for the
    // dense cache with attn_gqa = shared, split_i8_kernel for the int8 one
    // with attn_ring; it plans its own splits (attn_ring plans fewer)
    const int ring = a.ring;
    const bool has_alt = C.i8 ? ring != 0 : a.gqa_shared;
    const bool rings = ring != 0 && (hd == 128 || hd == 256);   // (f16: SPLIT 4, 5 set gqa_shared, dec_mma)
    auto alt = [&](bool on) { if (C.i8) a.ring = on ? 0 : ring; else a.gqa_shared = !on; };
    size_t pb = si_cu_attn_part_bytes(&a), pb_all = pb;
    if (has_alt) {
        alt(true);
        pb_all = std::max(pb, si_cu_attn_part_bytes(&a));
        alt(false);
    }
    std::vector<float> part(pb_all / 4 + 1, NAN);
    a.part = pb_all ? part.data() : nullptr;
    if (C.i8 && ring && (hd == 128 || hd == 256)) {   // split_ring_kernel over pages: q f32; q f16 of 8 rows; per warp P [8][24] f16, NS stages of int8 K, V [16][hd + 16] and their 16 + 16 scales, V's f16 tile [16][hd + 8]
        const int r = nh / nkv, rb = r % 8 == 0 ? 8 : r % 4 == 0 ? 4 : r % 2 == 0 ? 2 : 1;
        auto need = [&](size_t w, size_t ns) {
            return (size_t)rb * hd * 4 + (8 * (size_t)(hd + 8) + w * 8 * 24) * 2 +
                   w * (ns * (32 * (size_t)(hd + 16) + 128) + 32 * (size_t)(hd + 8));
        };
        // (true takes small's shape where its own exceeds the block's limit)
        emu_ptx::smem_bytes = ring == 1 && need(4, 4) <= (size_t)a.smem_blk ? need(4, 4) : need(2, 2);
    }
    if (a.gqa_shared) {
        // split_gqa_kernel's shared memory as cuda_attn_gqa.cu's comment
        // gives it: q [rb][hd] and p [rb][64] f32, then a K and a V tile of
        // `rows` positions, the most of 64/32/16 whose K tile is <= 16 KB
        // (but >= 1024 / hd rows); the cp.asyncs must land inside it
        const int r = nh / nkv, rb = r % 8 == 0 ? 8 : r % 4 == 0 ? 4 : r % 2 == 0 ? 2 : 1;
        const int rowb = hd * (C.f16 ? 2 : 4);
        int rows = 64;
        while (rows > 16 && rows > 1024 / hd && rows * rowb > 16384) rows /= 2;
        emu_ptx::smem_bytes = (size_t)(rb * hd + rb * 64) * 4 + 2 * (size_t)rows * rowb;
        if (a.dec_mma)   // split_mma_kernel (cuda_attn_mma.cu): q, p f32; q, p f16 of 8 rows; K and V of 64 rows, rows padded by 8 halves
            emu_ptx::smem_bytes = (size_t)(rb * hd + rb * 64) * 4 + (8 * (size_t)(hd + 8) + 8 * 72 + 128 * (size_t)(hd + 8)) * 2;
        if (a.ring && (hd == 128 || hd == 256)) {   // split_ring_kernel: q f32; q f16 of 8 rows; per warp P [8][24] f16 and NS stages of K, V [16][hd + 8]
            auto need = [&](size_t w, size_t ns) {
                return (size_t)rb * hd * 4 + (8 * (size_t)(hd + 8) + w * 8 * 24 + w * ns * 32 * (size_t)(hd + 8)) * 2;
            };
            emu_ptx::smem_bytes = a.ring == 1 && need(4, 3) <= (size_t)a.smem_blk ? need(4, 3) : need(2, 2);
        }
    }
    // knob fuse_attn_q: where the core ends with combine_kernel, its int8
    // copy of dst (poisoned first), checked below against quant_x's
    // arithmetic over dst as written
    const size_t W = (size_t)nh * hd;
    std::vector<int8_t> q8(attend ? (size_t)n * W : 0, 0x55);
    std::vector<float> q8d(q8.size() / 32, NAN), q8s(q8.size() / 32, NAN);
    const bool takes_q = attend && si_cu_attn_takes_q(&a);
    if (takes_q) { a.q8 = q8.data(); a.q8d = q8d.data(); a.q8s = q8s.data(); }
    if (attend) {
        int rc = si_cu_attn(&a, nullptr);
        a.q8 = nullptr; a.q8d = a.q8s = nullptr;   // (the second core below makes none)
        if (rc != 0) { printf("  %s: si_cu_attn returned %d\n", what, rc); return 1; }
        if (has_alt) {   // the second core on the same cache (re-appends the same rows)
            alt(true);
            a.dst = dst_ph.data();
            rc = si_cu_attn(&a, nullptr);
            alt(false);
            a.dst = dst.data();
            if (rc != 0) { printf("  %s: si_cu_attn (second core) returned %d\n", what, rc); return 1; }
        }
        for (int v = C.i8 ? 0 : 1; rings && v < 2; v++) {   // the ring's knobs, on the same cache
            a.ring_ahead = v == 0;
            a.ring_chains = v == 1 ? 2 : 1;
            a.dst = (v == 0 ? dst_ah : dst_c2).data();
            rc = si_cu_attn(&a, nullptr);
            a.ring_ahead = false;
            a.ring_chains = 1;
            a.dst = dst.data();
            if (rc != 0) { printf("  %s: si_cu_attn (attn_ring_%s) returned %d\n", what, v ? "chains" : "pages", rc); return 1; }
        }
    } else {
        emu_launch(dim3(n, nkv), dim3(128), (hd + C.nrot) * 4, [&] { append_kernel(a); });
    }
    // the front half alone, as cuda_ext's attn_prepare runs it for a kernel
    // plugin: rope and append again (they rewrite the same rows with the
    // same values: the cache check below still holds) and q normed+roped
    // into [n][nh][hd]
    {
        std::vector<float> qo((size_t)n * nh * hd, NAN);
        int rc = si_cu_attn_front(&a, qo.data(), nullptr);
        if (rc != 0) { printf("  %s: si_cu_attn_front returned %d\n", what, rc); return 1; }
        double qd = 0, qm = 0;
        for (int t = 0; t < n; t++)
            for (int h = 0; h < nh; h++) {
                std::vector<float> q(&qg[t * qs + (size_t)h * 2 * hd], &qg[t * qs + (size_t)h * 2 * hd] + hd);
                ref_norm_rope(q.data(), qnw.data(), pos[t]);
                for (int i = 0; i < hd; i++) {
                    const float got = qo[((size_t)t * nh + h) * hd + i];
                    qd = std::isfinite(got) ? std::max(qd, (double)std::fabs(got - q[i])) : INFINITY;
                    qm = std::max(qm, (double)std::fabs(q[i]));
                }
            }
        const bool qok = qd <= 1e-5 * qm;
        printf("  %s: front half (q normed+roped for a kernel plugin): max |q - ref| %.3g of max %.3g: %s\n", what, qd,
               qm, qok ? "ok" : "FAIL");
        if (!qok) return 1;
    }
    // reference rows of the new positions
    for (int t = 0; t < n; t++)
        for (int g = 0; g < nkv; g++) {
            float *kr = &kref[ridx(seq[t], pos[t], g)], *vr = &vref[ridx(seq[t], pos[t], g)];
            memcpy(kr, &k[t * ks + g * hd], hd * 4);
            ref_norm_rope(kr, knw.data(), pos[t]);
            memcpy(vr, &v[t * ks + g * hd], hd * 4);
            float *kd = &kdq[ridx(seq[t], pos[t], g)], *vd = &vdq[ridx(seq[t], pos[t], g)];
            if (C.i8) {
                std::vector<int8_t> q(hd);
                float sc;
                ref_quant(kr, q.data(), &sc);
                for (int i = 0; i < hd; i++) kd[i] = q[i] * sc;
                ref_quant(vr, q.data(), &sc);
                for (int i = 0; i < hd; i++) vd[i] = q[i] * sc;
            } else if (C.f16) {
                for (int i = 0; i < hd; i++) kd[i] = (float)(_Float16)kr[i], vd[i] = (float)(_Float16)vr[i];
            } else {
                memcpy(kd, kr, hd * 4); memcpy(vd, vr, hd * 4);
            }
        }
    int bad = 0;
    // the cache itself: every row of every token of this op where the layout says
    long cmis = 0, smis = 0;
    for (int t = 0; t < n; t++)
        for (int g = 0; g < nkv; g++) {
            const float *kr = &kref[ridx(seq[t], pos[t], g)], *vr = &vref[ridx(seq[t], pos[t], g)];
            if (C.i8) {
                size_t row = page_row(seq[t], pos[t], g);
                std::vector<int8_t> q(hd);
                float sc;
                for (int kv = 0; kv < 2; kv++) {
                    ref_quant(kv ? vr : kr, q.data(), &sc);
                    const int8_t *got = (kv ? vpool : kpool).data() + row * hd;
                    float gs = (kv ? vscale : kscale)[row];
                    if (!(gs == sc)) { if (smis++ < 3) printf("  %s: seq %d pos %d g %d %c scale %g, want %g\n", what, seq[t], pos[t], g, kv ? 'v' : 'k', gs, sc); }
                    for (int i = 0; i < hd; i++)
                        if (got[i] != q[i] && cmis++ < 3)
                            printf("  %s: seq %d pos %d g %d %c[%d] = %d, want %d\n", what, seq[t], pos[t], g, kv ? 'v' : 'k', i, got[i], q[i]);
                }
            } else {
                size_t i0 = (((size_t)seq[t] * n_ctx + pos[t]) * nkv + g) * hd;
                for (int i = 0; i < hd; i++) {
                    float gk = C.f16 ? (float)kh[i0 + i] : kdense[i0 + i], gv = C.f16 ? (float)vh[i0 + i] : vdense[i0 + i];
                    float wk = kdq[ridx(seq[t], pos[t], g) + i], wv = vdq[ridx(seq[t], pos[t], g) + i];
                    if (!(gk == wk) || !(gv == wv)) { if (cmis++ < 3) printf("  %s: dense row seq %d pos %d g %d [%d]: k %g/%g v %g/%g\n", what, seq[t], pos[t], g, i, gk, wk, gv, wv); }
                }
            }
        }
    if (cmis || smis) { printf("  %s: cache rows: %ld element and %ld scale mismatches\n", what, cmis, smis); bad = 1; }
    if (!attend) { printf("  %s: %d tokens appended, cache rows exact\n", what, n); return bad; }
    // attention reference (double) over the stored (dequantised) rows and over the f32 rows
    double md = 0, mq = 0, mx = 0;
    int nan = 0, at_t = -1, at_h = -1;
    std::vector<double> sc(n_ctx), acc(hd), sc2(n_ctx), acc2(hd);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            const int g = h / (nh / nkv);
            std::vector<float> q(&qg[t * qs + (size_t)h * 2 * hd], &qg[t * qs + (size_t)h * 2 * hd] + hd);
            ref_norm_rope(q.data(), qnw.data(), pos[t]);
            for (int pass = 0; pass < 2; pass++) {
                const std::vector<float> &K = pass ? kref : kdq, &V = pass ? vref : vdq;
                double m = -1e300, l = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++) d += (double)q[i] * K[ridx(seq[t], p, g) + i];
                    sc[p] = d / sqrt((double)hd);
                    m = std::max(m, sc[p]);
                }
                for (int i = 0; i < hd; i++) acc[i] = 0;
                for (int p = 0; p <= pos[t]; p++) {
                    double e = exp(sc[p] - m);
                    l += e;
                    for (int i = 0; i < hd; i++) acc[i] += e * V[ridx(seq[t], p, g) + i];
                }
                for (int i = 0; i < hd; i++) {
                    double gate = qg[t * qs + (size_t)h * 2 * hd + hd + i];
                    double want = acc[i] / l / (1.0 + exp(-gate));
                    float got = dst[t * ds + (size_t)h * hd + i];
                    if (!std::isfinite(got)) { if (nan++ < 3) printf("  %s: token %d head %d [%d] = %g\n", what, t, h, i, got); continue; }
                    double d = std::fabs(got - want);
                    if (pass == 0) { if (d > md) { md = d; at_t = t; at_h = h; } mx = std::max(mx, std::fabs(want)); }
                    else mq = std::max(mq, d);
                }
            }
        }
    // (SPLIT 3: q and p rounded to f16 for the tensor cores, as the
    // flash-attention prefill: 1e-3 of max |out|, fa_emu.cc's bound)
    const double tol = C.split >= 3 ? 1e-3 : 2e-5;
    bool ok = nan == 0 && md <= tol * mx && (!C.i8 || mq <= 0.05 * mx);
    if (has_alt) {   // shared (or mma, or ring) vs per_head; int8: ring vs split_i8_kernel
        double pd = 0;
        long same = 0, all = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < nh * hd; i++) {
                const float x = dst[t * ds + i], y = dst_ph[t * ds + i];
                pd = std::isfinite(x) && std::isfinite(y) ? std::max(pd, (double)std::fabs(x - y)) : INFINITY;
                same += x == y;
                all++;
            }
        const bool pok = pd <= tol * mx;
        const char *core = C.i8 ? (ring == 2 ? "attn_ring small vs split_i8" : "attn_ring vs split_i8")
                         : C.split == 4 ? "attn_gqa shared + attn_ring vs per_head"
                         : C.split == 5 ? "attn_gqa shared + attn_ring small vs per_head"
                         : C.split == 3 ? "attn_gqa shared + attn_mma vs per_head" : "attn_gqa shared vs per_head";
        printf("  %s: %s: max |diff| %.3g = %.3g of max, %ld of %ld bit-identical: %s\n", what, core, pd, pd / mx,
               same, all, pok ? "ok" : "FAIL");
        ok = ok && pok;
    }
    if (rings && attend) {   // pages = ahead bit for bit (int8), chains = 2 within the bound
        double d2 = 0;
        long same = 0, all = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < nh * hd; i++) {
                const float x = dst[t * ds + i], ya = dst_ah[t * ds + i], y2 = dst_c2[t * ds + i];
                same += memcmp(&x, &ya, sizeof x) == 0;
                d2 = std::isfinite(x) && std::isfinite(y2) ? std::max(d2, (double)std::fabs(x - y2)) : INFINITY;
                all++;
            }
        const bool vok = (!C.i8 || same == all) && d2 <= tol * mx;
        if (C.i8)
            printf("  %s: attn_ring_pages ahead vs each: %ld of %ld bit-identical\n", what, same, all);
        printf("  %s: attn_ring_chains 2 vs 1: max |diff| %.3g = %.3g of max: %s\n", what, d2, d2 / mx,
               vok ? "ok" : "FAIL");
        ok = ok && vok;
    }
    if (takes_q) {   // cu_q8_block32 over each 32 of dst: scale amax / 127, rint, clamp, the sum in order
        long qmis = 0;
        for (int t = 0; t < n; t++)
            for (size_t b0 = 0; b0 < W; b0 += 32) {
                const float *v = &dst[t * ds + b0];
                float amax = 0.0f, sum = 0.0f;
                for (int l = 0; l < 32; l++) { amax = std::max(amax, std::fabs(v[l])); sum = sum + v[l]; }
                const float dd = amax / 127.0f, id = dd > 0.0f ? 1.0f / dd : 0.0f;
                const size_t bi = (t * W + b0) / 32;
                bool eq = q8d[bi] == dd + (sum - sum) && q8s[bi] == sum;
                for (int l = 0; l < 32; l++) {
                    const int qi = std::min(127, std::max(-127, (int)std::nearbyint(v[l] * id)));
                    eq = eq && q8[t * W + b0 + l] == qi;
                }
                if (!eq && qmis++ < 3)
                    printf("  %s: fuse_attn_q copy of token %d block %zu: d %g / %g, sum %g / %g, q[0] %d\n", what, t,
                           b0 / 32, q8d[bi], dd, q8s[bi], sum, q8[t * W + b0]);
            }
        printf("  %s: fuse_attn_q int8 copy of the output (combine_kernel): %ld of %zu blocks differ: %s\n", what,
               qmis, (size_t)n * W / 32, qmis ? "FAIL" : "ok");
        ok = ok && qmis == 0;
    }
    const int nsp = pb ? (int)(pb / ((size_t)n * nh * (hd + 2) * 4)) : 1;
    printf("  %s: %d tokens, %d splits, max |out - ref(stored rows)| %.3g = %.3g of max %.3g (token %d head %d); vs f32 rows %.3g; %d non-finite: %s\n",
           what, n, nsp, md, md / mx, mx, at_t, at_h, mq, nan, ok ? "ok" : "FAIL");
    return bad || !ok;
}

int main(int argc, char **argv)
{
    if (argc < 10) { fprintf(stderr, "usage: attn_emu KV SPLIT HD NH NKV NROT NSM PF LEN...\n"); return 2; }
    C.i8 = !strcmp(argv[1], "i8"); C.f16 = !strcmp(argv[1], "f16");
    C.split = atoi(argv[2]); C.hd = atoi(argv[3]); C.nh = atoi(argv[4]); C.nkv = atoi(argv[5]);
    C.nrot = atoi(argv[6]); C.nsm = atoi(argv[7]); C.pf = atoi(argv[8]);
    std::vector<int> lens;
    for (int i = 9; i < argc; i++) lens.push_back(atoi(argv[i]));
    n_seq = (int)lens.size() + 1;   // one sequence never used
    int ml = 0;
    for (int l : lens) ml = std::max(ml, l);
    n_ctx = ml + 1 + 37;
    max_pages = (n_ctx + 15) / 16;
    n_pages = n_seq * max_pages;
    printf("attn_emu %s split %d hd %d heads %d/%d n_rot %d n_sm %d prefill%s", argv[1], C.split, C.hd, C.nh, C.nkv,
           C.nrot, C.nsm, C.pf ? "" : " (append only)");
    for (int l : lens) printf(" %d", l);
    printf("\n");
    const size_t rows = (size_t)n_seq * n_ctx * C.nkv * C.hd;
    kref.assign(rows, NAN); vref = kref; kdq = kref; vdq = kref;
    qnw.resize(C.hd); knw.resize(C.hd);
    for (auto &x : qnw) x = 1 + 0.3f * fr();
    for (auto &x : knw) x = 1 + 0.3f * fr();
    if (C.i8) {
        table.assign((size_t)n_seq * max_pages, -1);
        seq_pages.assign(n_seq, 0);
        for (int i = 0; i < n_pages; i++) free_pages.push_back(i);
        kpool.assign((size_t)n_pages * C.nkv * 16 * C.hd, 0x55); vpool = kpool;
        kscale.assign((size_t)n_pages * C.nkv * 16, NAN); vscale = kscale;
    } else if (C.f16) {
        kh.assign(rows, (_Float16)NAN); vh = kh;
    } else {
        kdense.assign(rows, NAN); vdense = kdense;
    }
    std::vector<int32_t> seq, pos;
    for (size_t s = 0; s < lens.size(); s++)
        for (int p = 0; p < lens[s]; p++) seq.push_back((int32_t)s), pos.push_back(p);
    int rc = run_op(seq, pos, C.pf != 0, "prefill");
    seq.clear(); pos.clear();
    for (size_t s = lens.size(); s-- > 0;) seq.push_back((int32_t)s), pos.push_back(lens[s]);
    rc |= run_op(seq, pos, true, "decode");
    printf("  %s\n", rc ? "FAIL" : "OK");
    return rc;
}
