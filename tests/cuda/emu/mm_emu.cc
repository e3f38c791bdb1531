// tests/cuda/emu/mm_emu.cc — cuda_matmul.cu's tiled f32 GEMM
// (mm_tiled_kernel, knob f32_gemm = tiled) under the host emulation,
// against each output summed on the host in the kernel's order (fmaf over
// k from 0: bit for bit) and within f32 rounding of a double reference;
// F32/F16/BF16 weights, row/column/k tails, x_div, a y with gaps between
// its columns (nothing stored there), and the GEMV-style mm_kernel<T, 8,
// 1> it replaces within the same f32 bound; mm_kernel<T, 8, MM_WARPS>
// (knob mm_block_cols) within it too.
// Usage: mm_emu (no arguments; run-mm-emu.sh pastes the kernels in).
#include "cuda_runtime.h"
#include "cuda_internal.h"

#include MM_KERNELS   // cuda_matmul.cu up to its launchers

static uint32_t rs = 11;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }

// a stored weight element and its value
static void put(uint32_t type, uint8_t *row, int64_t i, float v, float *val)
{
    if (type == SI_TYPE_F32) {
        memcpy(row + 4 * i, &v, 4);
        *val = v;
    } else if (type == SI_TYPE_F16) {
        const _Float16 h = (_Float16)v;
        memcpy(row + 2 * i, &h, 2);
        *val = (float)h;
    } else {   // BF16: the top half of the float (truncated: a valid bf16)
        uint32_t u;
        memcpy(&u, &v, 4);
        const uint16_t b = (uint16_t)(u >> 16);
        memcpy(row + 2 * i, &b, 2);
        u = (uint32_t)b << 16;
        memcpy(val, &u, 4);
    }
}

// rows x in random weights of the type (w: stored, rb bytes a row) and
// their values (wv)
static void rand_rows(uint32_t type, int64_t rows, int64_t in, int64_t rb, std::vector<uint8_t> &w,
                      std::vector<float> &wv)
{
    w.assign((size_t)(rows * rb), 0);
    wv.assign((size_t)(rows * in), 0.0f);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < in; i++)
            put(type, w.data() + r * rb, i, fr(), &wv[(size_t)(r * in + i)]);
}

static int one(uint32_t type, int64_t rows, int64_t in, int64_t ncols, int64_t x_div)
{
    const int64_t esz = type == SI_TYPE_F32 ? 4 : 2, rb = in * esz, ncx = (ncols - 1) / x_div + 1;
    const int64_t xs = in + 3, ys = rows + 5;   // gaps after each x and y column
    std::vector<uint8_t> w;
    std::vector<float> wv, x((size_t)(ncx * xs)), y((size_t)(ncols * ys), NAN), y2 = y;
    rand_rows(type, rows, in, rb, w, wv);
    for (auto &v : x) v = fr();
    cu_mm mm = {};
    mm.w = w.data(); mm.type = type; mm.in = in; mm.rows = rows; mm.row_bytes = (uint64_t)rb;
    mm.x = x.data(); mm.x_stride = xs; mm.x_div = x_div; mm.y = y.data(); mm.y_stride = ys; mm.ncols = ncols;
    mm.f32_tiled = true;
    const dim3 grid((unsigned)((ncols + MMT_BN - 1) / MMT_BN), (unsigned)((rows + MMT_BM - 1) / MMT_BM));
    emu_launch(grid, dim3(256), 0, [&] {
        if (type == SI_TYPE_F32) mm_tiled_kernel<SI_TYPE_F32>(mm);
        else if (type == SI_TYPE_F16) mm_tiled_kernel<SI_TYPE_F16>(mm);
        else mm_tiled_kernel<SI_TYPE_BF16>(mm);
    });
    cu_mm m2 = mm;
    m2.y = y2.data();
    emu_launch(dim3((unsigned)((rows + MM_WARPS - 1) / MM_WARPS), (unsigned)((ncols + 7) / 8)), dim3(32 * MM_WARPS), 0, [&] {
        if (type == SI_TYPE_F32) mm_kernel<SI_TYPE_F32, 8, 1>(m2);
        else if (type == SI_TYPE_F16) mm_kernel<SI_TYPE_F16, 8, 1>(m2);
        else mm_kernel<SI_TYPE_BF16, 8, 1>(m2);
    });
    int64_t notbit = 0, gap = 0;
    double worst = 0, worst2 = 0;
    for (int64_t c = 0; c < ncols; c++) {
        const float *xc = &x[(size_t)((c / x_div) * xs)];
        for (int64_t r = 0; r < ys; r++) {
            const float got = y[(size_t)(c * ys + r)];
            if (r >= rows) {   // a gap: must stay untouched
                gap += got == got;
                continue;
            }
            float seq = 0.0f;
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < in; k++) {
                const float a = wv[(size_t)(r * in + k)];
                seq = fmaf(a, xc[k], seq);
                ref += (double)a * xc[k];
                mag += fabs((double)a * xc[k]);
            }
            notbit += memcmp(&got, &seq, 4) != 0;
            const double bound = (double)(in + 2) * 6e-8 * mag + 1e-30;
            worst = std::max(worst, fabs(got - ref) / bound);
            worst2 = std::max(worst2, fabs(y2[(size_t)(c * ys + r)] - ref) / bound);
        }
    }
    const bool ok = notbit == 0 && gap == 0 && worst <= 1.0 && worst2 <= 1.0;
    printf("  %s rows %lld in %lld ncols %lld x_div %lld: %lld not bit-exact, %lld gap writes, err %.3g / %.3g (gemv) of the f32 bound  %s\n",
           type == SI_TYPE_F32 ? "f32" : type == SI_TYPE_F16 ? "f16" : "bf16", (long long)rows, (long long)in,
           (long long)ncols, (long long)x_div, (long long)notbit, (long long)gap, worst, worst2, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// The one-column kernel of a block a row (mm_kernel<T, 1, MM_WARPS>) with
// a second product of the same x in its launch (cu_mm.more: decode's MOE
// router and shared-expert gate): each product's rows the same bits as
// the kernel gives it alone, within the f32 bound of a double reference.
template <int T> static void run_rows(const cu_mm &m, unsigned blocks)
{
    emu_launch(dim3(blocks), dim3(32 * MM_WARPS), 0, [&] { mm_kernel<T, 1, MM_WARPS>(m); });
}

static int more_case(uint32_t type, int64_t rows0, int64_t rows1, int64_t in)
{
    const int64_t esz = type == SI_TYPE_F32 ? 4 : 2, rb = in * esz;
    std::vector<uint8_t> w;
    std::vector<float> wv, x((size_t)in);
    rand_rows(type, rows0 + rows1, in, rb, w, wv);
    for (auto &v : x) v = fr();
    std::vector<float> y0((size_t)rows0, NAN), y1((size_t)rows1, NAN), a0 = y0, a1 = y1;
    cu_mm mm = {};
    mm.w = w.data(); mm.type = type; mm.in = in; mm.rows = rows0; mm.row_bytes = (uint64_t)rb;
    mm.x = x.data(); mm.x_stride = in; mm.x_div = 1; mm.y = y0.data(); mm.y_stride = 1; mm.ncols = 1;
    mm.more[0] = cu_mm_part{ w.data() + rows0 * rb, y1.data(), rows1, (uint64_t)rb, 1 };
    mm.n_more = 1;
    const bool ok_host = si_cu_matmul_more_ok(&mm);
    auto run = [&](const cu_mm &m, unsigned blocks) {
        if (type == SI_TYPE_F32) run_rows<SI_TYPE_F32>(m, blocks);
        else if (type == SI_TYPE_F16) run_rows<SI_TYPE_F16>(m, blocks);
        else run_rows<SI_TYPE_BF16>(m, blocks);
    };
    run(mm, (unsigned)(rows0 + rows1));
    cu_mm m0 = mm, m1 = mm;
    m0.n_more = 0; m0.y = a0.data();
    m1.n_more = 0; m1.w = mm.more[0].w; m1.rows = rows1; m1.y = a1.data();
    run(m0, (unsigned)rows0);
    run(m1, (unsigned)rows1);
    // x 16-byte aligned (mm_body's two 16-byte loads a group) and x one
    // float past it (scalar loads): the same bits
    std::vector<float> xoff((size_t)in + 1), b0((size_t)rows0, NAN);
    memcpy(xoff.data() + 1, x.data(), (size_t)in * 4);
    cu_mm mo = m0;
    mo.x = xoff.data() + 1;
    mo.y = b0.data();
    run(mo, (unsigned)rows0);
    int64_t notbit = memcmp(b0.data(), a0.data(), (size_t)rows0 * 4) != 0;
    double worst = 0;
    for (int64_t r = 0; r < rows0 + rows1; r++) {
        const float got = r < rows0 ? y0[(size_t)r] : y1[(size_t)(r - rows0)];
        const float alone = r < rows0 ? a0[(size_t)r] : a1[(size_t)(r - rows0)];
        notbit += memcmp(&got, &alone, 4) != 0;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < in; k++) {
            ref += (double)wv[(size_t)(r * in + k)] * x[(size_t)k];
            mag += fabs((double)wv[(size_t)(r * in + k)] * x[(size_t)k]);
        }
        worst = std::max(worst, fabs(got - ref) / ((double)(in + 2) * 6e-8 * mag + 1e-30));
    }
    const bool ok = ok_host && notbit == 0 && worst <= 1.0;
    printf("  more: %s rows %lld + %lld in %lld: %lld differ from one launch each (or x misaligned), err %.3g of the f32 bound  %s\n",
           type == SI_TYPE_F32 ? "f32" : type == SI_TYPE_F16 ? "f16" : "bf16", (long long)rows0, (long long)rows1,
           (long long)in, (long long)notbit, worst, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// Knob mm_block_cols: mm_kernel<T, 8, MM_WARPS> (2..8 columns a block a
// row, the warps' sums added in warp order through shared memory), also
// past 8 columns (a second column tile: the shared sums rewritten) and
// with x one float off 16 bytes (scalar loads): within the f32 bound of a
// double reference, every output written, y's gaps untouched, and the
// misaligned x the same bits.
static int block_case(uint32_t type, int64_t rows, int64_t in, int64_t ncols)
{
    const int64_t esz = type == SI_TYPE_F32 ? 4 : 2, rb = in * esz, xs = in + 5, ys = rows + 3;
    std::vector<uint8_t> w;
    std::vector<float> wv, x((size_t)(ncols * xs + 1)), y((size_t)(ncols * ys), NAN), y2 = y;
    rand_rows(type, rows, in, rb, w, wv);
    for (auto &v : x) v = fr();
    cu_mm mm = {};
    mm.w = w.data(); mm.type = type; mm.in = in; mm.rows = rows; mm.row_bytes = (uint64_t)rb;
    mm.x = x.data(); mm.x_stride = xs; mm.x_div = 1; mm.y = y.data(); mm.y_stride = ys; mm.ncols = ncols;
    mm.block_cols = 2;
    auto run = [&](const cu_mm &m) {
        emu_launch(dim3((unsigned)rows, (unsigned)((ncols + 7) / 8)), dim3(32 * MM_WARPS), 0, [&] {
            if (type == SI_TYPE_F32) mm_kernel<SI_TYPE_F32, 8, MM_WARPS>(m);
            else if (type == SI_TYPE_F16) mm_kernel<SI_TYPE_F16, 8, MM_WARPS>(m);
            else mm_kernel<SI_TYPE_BF16, 8, MM_WARPS>(m);
        });
    };
    run(mm);
    // the same x one float further (xs + 5 floats a column: never 16-byte
    // aligned then) must give the same bits
    std::vector<float> xo((size_t)(ncols * xs + 1));
    memcpy(xo.data() + 1, x.data(), (size_t)(ncols * xs) * 4);
    cu_mm mo = mm;
    mo.x = xo.data() + 1;
    mo.y = y2.data();
    run(mo);
    int64_t notbit = 0, gap = 0, unset = 0;
    double worst = 0;
    for (int64_t c = 0; c < ncols; c++)
        for (int64_t r = 0; r < ys; r++) {
            const float got = y[(size_t)(c * ys + r)];
            notbit += memcmp(&got, &y2[(size_t)(c * ys + r)], 4) != 0;
            if (r >= rows) {
                gap += got == got;
                continue;
            }
            unset += got != got;
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < in; k++) {
                ref += (double)wv[(size_t)(r * in + k)] * x[(size_t)(c * xs + k)];
                mag += fabs((double)wv[(size_t)(r * in + k)] * x[(size_t)(c * xs + k)]);
            }
            worst = std::max(worst, fabs(got - ref) / ((double)(in + 2) * 6e-8 * mag + 1e-30));
        }
    const bool ok = notbit == 0 && gap == 0 && unset == 0 && worst <= 1.0;
    printf("  block a row: %s rows %lld in %lld ncols %lld: %lld differ with x misaligned, %lld unset, %lld gap writes, err %.3g of the f32 bound  %s\n",
           type == SI_TYPE_F32 ? "f32" : type == SI_TYPE_F16 ? "f16" : "bf16", (long long)rows, (long long)in,
           (long long)ncols, (long long)notbit, (long long)unset, (long long)gap, worst, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

int main()
{
    int rc = 0;
    rc |= one(SI_TYPE_F32, 70, 264, 130, 1);    // row, column and k tails
    rc |= one(SI_TYPE_F32, 64, 32, 64, 1);      // exactly one tile
    rc |= one(SI_TYPE_F16, 256, 512, 64, 1);
    rc |= one(SI_TYPE_BF16, 33, 40, 65, 2);     // x_div 2, k tail of 8
    rc |= one(SI_TYPE_F32, 5, 12, 70, 3);       // in < 8 per loader group tail
    rc |= more_case(SI_TYPE_F32, 256, 1, 2048);   // the 35b's router and shared-expert gate
    rc |= more_case(SI_TYPE_BF16, 7, 3, 264);
    rc |= block_case(SI_TYPE_F32, 256, 2048, 8);   // the 35b's router at 8 tokens
    rc |= block_case(SI_TYPE_F32, 32, 2048, 2);
    rc |= block_case(SI_TYPE_F16, 5, 1004, 3);     // a k tail (in % 8), rows < warps
    rc |= block_case(SI_TYPE_BF16, 9, 264, 13);    // two column tiles
    printf(rc ? "FAIL\n" : "OK\n");
    return rc;
}
