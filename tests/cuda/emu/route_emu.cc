// tests/cuda/emu/route_emu.cc — cuda_moe.cu's warp router (one warp per
// token, its logits in registers: softmax by warp reductions, K rounds of a warp arg-max) against
// the thread-per-token router it replaced for E <= 1024, under the host
// emulation: same experts in the same order, weights within 1e-6; ties
// and NaN logits included.  Usage: route_emu (no arguments).
#include "cuda_runtime.h"
#include "cuda_internal.h"
__global__ void route_kernel(float *logits, int64_t n, int E, int K, int32_t *sel, float *wts);
template <int J>
__global__ void route_warp_kernel(const float *logits, int64_t n, int E, int K, int32_t *sel, float *wts);
static uint32_t rs = 7;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }
static int one(int n, int E, int K, int mode)
{
    std::vector<float> l(n * E), l2;
    for (auto &x : l) x = 3.0f * fr();
    if (mode == 1)   // ties: a few equal maxima per token
        for (int t = 0; t < n; t++) for (int e = 0; e < E; e += 7) l[t * E + e] = 5.0f;
    if (mode == 2)   // a NaN logit in every token
        for (int t = 0; t < n; t++) l[t * E + (t * 13) % E] = NAN;
    l2 = l;
    std::vector<int32_t> s1(n * K, -7), s2(n * K, -7);
    std::vector<float> w1(n * K, NAN), w2(n * K, NAN);
    emu_launch(dim3((n + 127) / 128), dim3(128), 0, [&] { route_kernel(l.data(), n, E, K, s1.data(), w1.data()); });
    // the register width the launcher picks (8 experts a lane up to E = 256)
    if (E <= 256)
        emu_launch(dim3((n + 3) / 4), dim3(128), 0, [&] { route_warp_kernel<8>(l2.data(), n, E, K, s2.data(), w2.data()); });
    else
        emu_launch(dim3((n + 3) / 4), dim3(128), 0, [&] { route_warp_kernel<32>(l2.data(), n, E, K, s2.data(), w2.data()); });
    int bad = 0;
    double md = 0;
    for (int i = 0; i < n * K; i++) {
        if (s1[i] != s2[i]) bad++;
        if (mode != 2) md = std::max(md, (double)std::fabs(w1[i] - w2[i]));
    }
    printf("  n %d E %d K %d %s: %d selections differ, max |dw| %.3g  %s\n", n, E, K,
           mode == 0 ? "random" : mode == 1 ? "ties" : "NaN", bad, md, bad == 0 && md <= 1e-6 ? "ok" : "FAIL");
    return bad == 0 && md <= 1e-6 ? 0 : 1;
}
int main()
{
    int rc = 0;
    rc |= one(1, 256, 8, 0);
    rc |= one(7, 256, 8, 0);
    rc |= one(5, 40, 5, 0);
    rc |= one(3, 3, 3, 0);
    rc |= one(9, 1024, 8, 0);
    rc |= one(2, 300, 8, 0);
    rc |= one(3, 300, 6, 2);
    rc |= one(6, 256, 8, 1);
    rc |= one(4, 64, 4, 2);
    printf("%s\n", rc ? "FAIL" : "OK");
    return rc;
}
