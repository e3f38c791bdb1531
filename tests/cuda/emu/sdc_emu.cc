// tests/cuda/emu/sdc_emu.cc — knob moe_sdc under the host emulation:
// cuda_mmq.cu's sdc_kernel (one token's MOE combine with the shared
// expert's down product in its launch) against the two launches it
// replaces, si_cu_matmul_q8_v1 for the shared down (mmq_kernel, as
// mm_run runs it) then combine_kernel's arithmetic (cuda_combine.cuh):
// the output bit for bit.  Shared downs of Q8_0, Q4_K, Q5_K and Q6_K rows
// whose widths give 4, 8, 16 and 32 lanes a row; row counts off the
// block's; K 8 and fewer picks.  The output is poisoned before each run.
// Usage: sdc_emu (no arguments; run-sdc-emu.sh pastes cuda_mmq.cu in).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "emu_util.h"
#include "cuda_combine.cuh"

#include SDC_MMQ   // cuda_mmq.cu, its launches through emu_launch_s

// (cuda_gemvq.cu and cuda_gemvm.cu are not pasted in: the products here
// never go there)
extern "C" bool si_cu_gemvm_ok(const cu_mm *) { return false; }
extern "C" int si_cu_gemvm(const cu_mm *, const int8_t *, const float *, const float *, void *) { return -1; }
extern "C" bool si_cu_gemvq_ok(const cu_mm *) { return false; }
extern "C" int si_cu_gemvq(const cu_mm *, const int8_t *, const float *, const float *, void *) { return -1; }

static uint32_t rs = 11;
static uint32_t ru() { rs = rs * 1664525u + 1013904223u; return rs >> 8; }
static float fr() { return (float)(ru() & 0xffffff) / 8388608.0f - 1.0f; }

static int one(uint32_t type, int64_t F, int64_t H, int K)
{
    std::vector<uint8_t> w = emu_weights(type, H, F, ru, fr);
    const int64_t rb = (int64_t)w.size() / H;
    std::vector<float> x((size_t)F), y((size_t)(K * H)), wts((size_t)K), gamma(1, 0.7f * fr());
    for (auto &v : x) v = fr();
    for (auto &v : y) v = fr();
    for (auto &v : wts) v = 0.5f * (1.0f + fr());
    std::vector<int8_t> q((size_t)F);
    std::vector<float> qd((size_t)(F / 32)), qs((size_t)(F / 32));
    int rc = si_cu_quantize_x(x.data(), F, F, 1, q.data(), qd.data(), qs.data(), NULL);
    cu_mm sd = {};
    sd.w = w.data(); sd.type = type; sd.in = F; sd.rows = H; sd.row_bytes = (uint64_t)rb;
    sd.x = x.data(); sd.x_stride = F; sd.x_div = 1; sd.ncols = 1; sd.y_stride = H;
    // the two launches: the shared down into ys, then the combine
    // (got: 64 guard elements past the rows, which nothing may write)
    std::vector<float> ys((size_t)H, NAN), ref((size_t)H, NAN), got((size_t)(H + 64), NAN);
    cu_mm m = sd;
    m.y = ys.data();
    rc |= si_cu_matmul_q8_v1(&m, q.data(), qd.data(), qs.data(), NULL);
    const float gm = cb_gate(gamma[0]);
    for (int64_t r = 0; r < H; r++) {
        float wv[CB_K], yv[CB_K];
        for (int k = 0; k < CB_K; k++) {
            wv[k] = k < K ? wts[(size_t)k] : 0.0f;
            yv[k] = k < K ? y[(size_t)(k * H + r)] : 0.0f;
        }
        ref[(size_t)r] = cb_sum(wv, yv, K, true, gm, ys[(size_t)r]);
    }
    const bool ok_in = si_cu_moe_sdc_ok(&sd, K);
    rc |= si_cu_moe_sdc(&sd, q.data(), qd.data(), qs.data(), got.data(), y.data(), wts.data(), gamma.data(), K, NULL);
    const std::vector<float> rows(got.begin(), got.begin() + H);
    int64_t past = 0;
    for (int64_t i = H; i < H + 64; i++)
        past += !std::isnan(got[(size_t)i]);
    const int64_t bad = ndiff(ref, rows);
    const bool ok = rc == 0 && ok_in && bad == 0 && past == 0;
    printf("  %s F %lld H %lld K %d: %lld of %lld outputs differ, %lld written past them%s  %s\n",
           type == SI_TYPE_Q8_0 ? "q8_0" : type == SI_TYPE_Q4_K ? "q4_K" : type == SI_TYPE_Q5_K ? "q5_K" : "q6_K",
           (long long)F, (long long)H, K, (long long)bad, (long long)H, (long long)past, ok_in ? "" : " (refused)",
           ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

int main()
{
    int rc = 0;
    rc |= one(SI_TYPE_Q8_0, 512, 2048, 8);    // the 35b-a3b's: 8 lanes a row
    rc |= one(SI_TYPE_Q4_K, 512, 2048, 8);    // 4 lanes
    rc |= one(SI_TYPE_Q6_K, 512, 2045, 8);    // 4 lanes, rows off the block's 16
    rc |= one(SI_TYPE_Q5_K, 1024, 1000, 6);   // 8 lanes, fewer picks
    rc |= one(SI_TYPE_Q8_0, 1024, 513, 1);    // 16 lanes, one pick
    rc |= one(SI_TYPE_Q8_0, 2048, 2048, 8);   // 32 lanes
    printf("%s\n", rc ? "FAIL" : "OK");
    return rc;
}
