// tests/cuda/emu/rrf_emu.cc — knob route_fused under the host emulation:
// cuda_matmul.cu's rr_kernel (the MOE decode router's product, the shared
// gate row, then the top-K by the block that finishes last) against the
// two launches it replaces, si_cu_matmul (mm_kernel, as mm_run runs it)
// then route_warp_kernel: logits, gate, picks and weights bit for bit.
// Each case runs the fused launch twice on poisoned outputs, the second
// time with the blocks in a shuffled order (emu.cc EMU_BLOCK_ORDER): the
// routing must then still wait for every block, and the count of finished
// blocks must be back at 0 after each launch.
// Usage: rrf_emu (no arguments; run-rrf-emu.sh pastes cuda_matmul.cu in).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"

#include RRF_MATMUL   // cuda_matmul.cu, its launches through emu_launch_s

static uint32_t rs = 5;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }

// v stored as a weight element of the type
static void put(uint32_t type, uint8_t *row, int64_t i, float v)
{
    if (type == SI_TYPE_F32) {
        memcpy(row + 4 * i, &v, 4);
    } else if (type == SI_TYPE_F16) {
        const _Float16 h = (_Float16)v;
        memcpy(row + 2 * i, &h, 2);
    } else {   // BF16: the top half of the float
        uint32_t u;
        memcpy(&u, &v, 4);
        const uint16_t b = (uint16_t)(u >> 16);
        memcpy(row + 2 * i, &b, 2);
    }
}

enum { PLAIN = 0, TIES = 1, NAN_H = 2 };

struct outs {
    std::vector<float> logits, gamma, wts;
    std::vector<int32_t> sel;
    void poison(int64_t n, int64_t E, int K)
    {
        logits.assign((size_t)(n * E), NAN);
        gamma.assign((size_t)n, -3e38f);   // (no gate value: |gate| is small or NaN)
        wts.assign((size_t)(n * K), NAN);
        sel.assign((size_t)(n * K), -7);
    }
};

static int one(uint32_t type, int64_t n, int64_t E, int K, int64_t H, bool gate, int mode, bool blk = false)
{
    const int64_t esz = type == SI_TYPE_F32 ? 4 : 2, rb = H * esz, hs = H + 4;   // gaps between h's columns
    std::vector<uint8_t> w((size_t)((E + 1) * rb));   // the router's rows, then the gate row
    std::vector<float> h((size_t)(n * hs), 1e30f), common((size_t)H);
    for (auto &c : common) c = fr();
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < H; i++)
            h[(size_t)(t * hs + i)] = 0.5f * common[(size_t)i] + 0.5f * fr();
    for (int64_t r = 0; r <= E; r++)
        for (int64_t i = 0; i < H; i++)
            put(type, w.data() + r * rb, i, fr() * 0.05f);
    if (mode == TIES)   // equal rows along h's common part: tied logits, among the largest of every token
        for (int64_t r : { (int64_t)3, E / 2, E / 2 + 1, E - 1 })
            for (int64_t i = 0; i < H; i++)
                put(type, w.data() + r * rb, i, 0.02f * common[(size_t)i]);
    if (mode == NAN_H)   // token 0 all NaN logits (its picks: NaN's order)
        h[17] = NAN;
    cu_mm mm = {};
    mm.w = w.data(); mm.type = type; mm.in = H; mm.rows = E; mm.row_bytes = (uint64_t)rb;
    mm.x = h.data(); mm.x_stride = hs; mm.x_div = 1; mm.y_stride = E; mm.ncols = n;
    mm.prefetch = true;
    mm.block_cols = blk ? 2 : 0;   // (knob mm_block_cols: both sides)
    outs ref, got;
    ref.poison(n, E, K);
    // the two launches, as moe_exec's mm_run and si_cu_moe_route make them
    cu_mm m = mm;
    m.y = ref.logits.data();
    if (gate) {
        m.more[0] = cu_mm_part{ w.data() + E * rb, ref.gamma.data(), 1, (uint64_t)rb, 1 };
        m.n_more = 1;
    }
    int bad_host = 0;
    if (m.n_more > 0 && !si_cu_matmul_more_ok(&m)) {   // (mm_run: one launch each)
        cu_mm g = m;
        m.n_more = 0;
        g.n_more = 0; g.w = m.more[0].w; g.y = m.more[0].y; g.rows = 1; g.y_stride = 1;
        bad_host |= si_cu_matmul(&m, NULL) | si_cu_matmul(&g, NULL);
    } else {
        bad_host |= si_cu_matmul(&m, NULL);
    }
    const dim3 rg((unsigned)((n + 3) / 4));
    if (E <= 256)
        emu_launch(rg, dim3(128), 0, [&] { route_warp_kernel<8>(ref.logits.data(), n, (int)E, K, ref.sel.data(), ref.wts.data()); });
    else
        emu_launch(rg, dim3(128), 0, [&] { route_warp_kernel<32>(ref.logits.data(), n, (int)E, K, ref.sel.data(), ref.wts.data()); });
    // the fused launch, twice: blocks in order, then shuffled
    unsigned done = 0;
    int64_t d[4] = { 0, 0, 0, 0 };
    unsigned left = 0;
    for (int run = 0; run < 2; run++) {
        got.poison(n, E, K);
        m = mm;
        m.y = got.logits.data();
        if (gate) {
            m.more[0] = cu_mm_part{ w.data() + E * rb, got.gamma.data(), 1, (uint64_t)rb, 1 };
            m.n_more = 1;
        }
        if (run == 1)
            setenv("EMU_BLOCK_ORDER", "3", 1);
        bad_host |= !si_cu_router_route_ok(&m, K);
        bad_host |= si_cu_router_route(&m, K, got.sel.data(), got.wts.data(), &done, NULL);
        unsetenv("EMU_BLOCK_ORDER");
        d[0] += ndiff(got.logits, ref.logits);
        d[1] += gate ? ndiff(got.gamma, ref.gamma) : 0;
        d[2] += ndiff(got.sel, ref.sel);
        d[3] += ndiff(got.wts, ref.wts);
        left |= done;
    }
    // (the reference itself: every token routed, the gate written)
    int unset = 0;
    for (auto s : ref.sel) unset += s < 0 || s >= E;
    if (gate)
        for (auto g : ref.gamma) unset += g == -3e38f;
    // (and the cases are what they claim: every token picks all four
    // tied experts; token 0's weights are NaN)
    for (int64_t t = 0; t < n && mode == TIES; t++) {
        int tied = 0;
        for (int k = 0; k < K; k++) {
            const int32_t e = ref.sel[(size_t)(t * K + k)];
            tied += e == 3 || e == E / 2 || e == E / 2 + 1 || e == E - 1;
        }
        unset += tied != 4;
    }
    if (mode == NAN_H)
        unset += !std::isnan(ref.wts[0]);
    const bool ok = !bad_host && unset == 0 && d[0] + d[1] + d[2] + d[3] == 0 && left == 0;
    printf("  %s n %lld E %lld K %d H %lld%s%s%s: differ logits %lld gate %lld sel %lld wts %lld, count left %u  %s\n",
           type == SI_TYPE_F32 ? "f32" : type == SI_TYPE_F16 ? "f16" : "bf16", (long long)n, (long long)E, K,
           (long long)H, gate ? " +gate" : "", blk ? " block a row" : "", mode == TIES ? " ties" : mode == NAN_H ? " NaN in h" : "",
           (long long)d[0], (long long)d[1], (long long)d[2], (long long)d[3], left,
           ok ? "ok" : bad_host ? "FAIL (refused)" : unset ? "FAIL (the reference)" : "FAIL");
    return ok ? 0 : 1;
}

// What the launcher refuses (moe_exec then runs the two launches).
static int refusals()
{
    static uint8_t w[16];
    static float x[16], y[16];
    cu_mm mm = {};
    mm.w = w; mm.type = SI_TYPE_F32; mm.in = 4; mm.rows = 2; mm.row_bytes = 16;
    mm.x = x; mm.x_stride = 4; mm.x_div = 1; mm.y = y; mm.y_stride = 2; mm.ncols = 1;
    int bad = !si_cu_router_route_ok(&mm, 1);
    cu_mm m = mm; m.ncols = 9; bad += si_cu_router_route_ok(&m, 1);
    m = mm; m.rows = 1025; m.y_stride = 1025; bad += si_cu_router_route_ok(&m, 1);
    m = mm; m.type = SI_TYPE_Q8_0; bad += si_cu_router_route_ok(&m, 1);
    m = mm; m.y_stride = 3; bad += si_cu_router_route_ok(&m, 1);
    bad += si_cu_router_route_ok(&mm, 0);
    bad += si_cu_router_route(&mm, 1, NULL, NULL, NULL, NULL) == 0;
    printf("  refusals (9 columns, E 1025, Q8_0, y_stride, K 0, no count): %s\n", bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main()
{
    int rc = refusals();
    // the 35b-a3b's router (E 256, K 8, H 2048) with and without the shared gate
    for (int64_t n : { 1, 2, 8 }) {
        rc |= one(SI_TYPE_F32, n, 256, 8, 2048, true, PLAIN);
        rc |= one(SI_TYPE_F32, n, 256, 8, 2048, false, PLAIN);
    }
    rc |= one(SI_TYPE_F32, 1, 128, 4, 2048, true, PLAIN);
    rc |= one(SI_TYPE_F32, 2, 128, 4, 2048, false, PLAIN);
    rc |= one(SI_TYPE_F32, 1, 512, 8, 1024, true, PLAIN);     // 32 keys a lane
    rc |= one(SI_TYPE_F32, 8, 512, 8, 1024, true, PLAIN);
    rc |= one(SI_TYPE_F32, 5, 100, 6, 1004, true, PLAIN);     // rows past E in the last block, k tail
    rc |= one(SI_TYPE_F16, 1, 256, 8, 2048, true, PLAIN);
    rc |= one(SI_TYPE_BF16, 3, 256, 8, 512, true, PLAIN);
    rc |= one(SI_TYPE_F32, 1, 256, 8, 2048, true, TIES);
    rc |= one(SI_TYPE_F32, 8, 256, 8, 2048, true, TIES);
    rc |= one(SI_TYPE_F32, 1, 256, 8, 2048, true, NAN_H);
    rc |= one(SI_TYPE_F32, 8, 256, 8, 2048, true, NAN_H);
    // knob mm_block_cols = 2: 2..8 tokens a block a row (rr_kernel<T, 8, MM_WARPS>)
    for (int64_t n : { 2, 8 }) {
        rc |= one(SI_TYPE_F32, n, 256, 8, 2048, true, PLAIN, true);
        rc |= one(SI_TYPE_F32, n, 256, 8, 2048, false, PLAIN, true);
    }
    rc |= one(SI_TYPE_F32, 5, 100, 6, 1004, true, PLAIN, true);
    rc |= one(SI_TYPE_BF16, 3, 256, 8, 512, true, PLAIN, true);
    rc |= one(SI_TYPE_F32, 8, 256, 8, 2048, true, TIES, true);
    rc |= one(SI_TYPE_F32, 8, 256, 8, 2048, true, NAN_H, true);
    rc |= one(SI_TYPE_F32, 1, 256, 8, 2048, true, PLAIN, true);   // (one column: unchanged)
    printf(rc ? "FAIL\n" : "OK\n");
    return rc;
}
