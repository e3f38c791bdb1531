// tests/cuda/emu/w8_emu.cc — the prefill GEMM v3 of cuda_sm120
// (cuda_w8.cu: weights and activations requantised to int8 per G-wide
// block, one f32 scale each; EMU_G=128, the default, or 32) under the
// host emulation, with the PTX of ptx_emu.h.  Checked:
//   w8_rows_kernel<G> on weights: every int8 weight and scale bit for bit
//     against ref_quant below (written from the header's definition, not
//     from the kernel) over core's si_dequant of the row; random GGUF
//     bytes with sane f16 scales, one all-zero 128-block (s = 0, q = 0);
//   w8_rows_kernel<128> on activations: the same, columns x_stride apart
//     (the padding NaN: reading it shows), a column of exact .5 ties
//     (s = 1), a zero block, an outlier block;
//   both at the launcher's grid and at a 1-block grid-stride one;
//   (G = 32 takes the dp4a quantiser's activations, cuda_mmq.cu, checked
//   by run-mma-emu.sh: made here by quant_dp4a, whose scales are NOT
//   rounded to 16 bits, as that one's are not)
//   w8_kernel<G> on what those made: y against the f64 sum over blocks of
//     sw*sx*isum (isum exact), within 1e-5 of the column's largest |ref|
//     (the f32 epilogue's rounding); and against core's dequantised
//     weights times the raw f32 x, within 2e-2 of the largest |ref| (the
//     requantisation error: printed);
//   y poisoned with a NaN of a payload the kernel cannot make: every
//     element of rows < ROWS, columns < NCOLS must be written (and finite),
//     the y_stride padding and everything around untouched.
// EMU_NAN=1: one activation of the last quantised column NaN: every output
//   of the columns reading it must be NaN (w8_amax's warp vote; a NaN must not
//   vanish into q = 0), the rest as above.
// Usage: w8_emu TYPE ROWS IN NCOLS [X_DIV [X_PAD [Y_PAD]]]  (TYPE q4_k
//   q5_k q6_k q8_0; column j of y reads quantised column j / X_DIV;
//   x_stride = IN + X_PAD, y_stride = ROWS + Y_PAD)
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "ptx_emu.h"
#include <sparkinfer/status.h>
#include <sparkinfer/types.h>
extern "C" {
int si_dequant(uint32_t type, const void *src, float *dst, int64_t n, si_err *err);
uint16_t si_f32_to_fp16(float f);
}
size_t emu_w8_smem(int g, int kt);
void emu_w8_weights(uint32_t type, int g, const uint8_t *w, uint64_t row_bytes, int64_t rows, int64_t in, int8_t *wq, float *ws, unsigned blocks);
void emu_w8_quant_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d, unsigned blocks);
void emu_w8(const cu_mm *mm, int g, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd);
size_t emu_wg_smem();
void emu_w8wg(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd);

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t r32() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float fr() { return (float)(r32() & 0xffffff) / 8388608.0f - 1.0f; }   // [-1, 1)
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static const uint32_t POISON = 0x7fc0deadu;   // a NaN no kernel arithmetic makes (its NaNs are 0x7fc00000)

static uint16_t rnd_f16(float lo, float hi)   // random sign, |v| in [lo, hi)
{
    float v = lo + (hi - lo) * (0.5f + 0.5f * fr());
    if (r32() & 1) v = -v;
    return si_f32_to_fp16(v);
}

// G-wide blocks of v[0, in): amax = max |v|; s = amax / 127 (the f32
// quotient) rounded to 16 significant bits, halves away from zero (bits +
// 0x80, low 8 bits cleared); q = rint(v / s) (f32 quotient, ties to even),
// clamped to +-127, 0 where s is 0.  A non-finite value anywhere in a
// 256-wide span (one warp of the kernels) makes all its blocks' scales
// NaN and their q 0: the product must then be NaN.
static void ref_quant(const float *v, int64_t in, int G, int8_t *q, float *s)
{
    for (int64_t b = 0; b < in / G; b++) {
        bool bad = false;
        for (int64_t i = (b * G / 256) * 256; i < std::min((b * G / 256) * 256 + 256, in); i++) bad |= !std::isfinite(v[i]);
        float amax = 0.0f;
        for (int64_t i = G * b; i < G * b + G; i++) amax = std::max(amax, std::fabs(v[i]));
        const float sc = bad ? from_bits(0x7fc00000u) : from_bits((bits(amax / 127.0f) + 0x80u) & ~0xffu);
        s[b] = sc;
        for (int64_t i = G * b; i < G * b + G; i++) {
            const float t = sc > 0.0f ? nearbyintf(v[i] / sc) : 0.0f;
            q[i] = (int8_t)(t > 127.0f ? 127 : t < -127.0f ? -127 : (int)t);
        }
    }
}

// per 32 as the dp4a quantiser (cpu_quantize_row_q8's rounding): d =
// amax / 127 as it is, q = rint(v / d); a non-finite value makes d NaN
static void quant_dp4a(const float *v, int64_t in, int8_t *q, float *d)
{
    for (int64_t b = 0; b < in / 32; b++) {
        float amax = 0.0f;
        bool bad = false;
        for (int64_t i = 32 * b; i < 32 * b + 32; i++) { amax = std::max(amax, std::fabs(v[i])); bad |= !std::isfinite(v[i]); }
        d[b] = bad ? NAN : amax / 127.0f;
        for (int64_t i = 32 * b; i < 32 * b + 32; i++) q[i] = (int8_t)(d[b] > 0.0f ? (int)nearbyintf(v[i] / d[b]) : 0);
    }
}

// n rows of `in` quantised by the kernel (q, s) against the reference (rq, rs_)
static int64_t cmp_quant(const char *what, unsigned grid, const int8_t *q, const float *s, const int8_t *rq, const float *rs_,
                         int64_t n, int64_t in, int G)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n * in; i++)
        if (q[i] != rq[i] && bad++ < 3) printf("  %s (grid %u): q[row %ld][%ld] = %d, ref %d\n", what, grid, (long)(i / in), (long)(i % in), q[i], rq[i]);
    for (int64_t i = 0; i < n * (in / G); i++)
        if (bits(s[i]) != bits(rs_[i]) && bad++ < 6)
            printf("  %s (grid %u): scale[row %ld][block %ld] = %.9g (%08x), ref %.9g (%08x)\n", what, grid, (long)(i / (in / G)),
                   (long)(i % (in / G)), s[i], bits(s[i]), rs_[i], bits(rs_[i]));
    if (bad) printf("  %s (grid %u): %ld mismatches\n", what, grid, (long)bad);
    return bad;
}

// the launchers' grid (w8_grid): 8 warps a block, one warp per 256 values
static unsigned grid_of(int64_t warps) { const int64_t b = (warps + 7) / 8; return (unsigned)(b > 65535 * 16 ? 65535 * 16 : b); }

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: w8_emu TYPE ROWS IN NCOLS [X_DIV [X_PAD [Y_PAD]]]\n"); return 2; }
    const char *tn = argv[1];
    const uint32_t type = !strcmp(tn, "q4_k") ? SI_TYPE_Q4_K : !strcmp(tn, "q5_k") ? SI_TYPE_Q5_K :
                          !strcmp(tn, "q6_k") ? SI_TYPE_Q6_K : !strcmp(tn, "q8_0") ? SI_TYPE_Q8_0 : 0;
    const int64_t rows = atoll(argv[2]), in = atoll(argv[3]), ncols = atoll(argv[4]);
    const int64_t x_div = argc > 5 ? atoll(argv[5]) : 1, x_pad = argc > 6 ? atoll(argv[6]) : 0, y_pad = argc > 7 ? atoll(argv[7]) : 0;
    const bool nan_x = getenv("EMU_NAN") != NULL;
    const int G = getenv("EMU_G") ? atoi(getenv("EMU_G")) : 128;
    // (si_cu_w8_ok: in % 256)
    if (!type || rows < 1 || ncols < 1 || in < 256 || in % 256 || x_div < 1 || (G != 32 && G != 128)) { fprintf(stderr, "w8_emu: bad case\n"); return 2; }
    rs ^= (uint64_t)type * 1000003u + (uint64_t)rows * 7919u + (uint64_t)in * 31u + (uint64_t)ncols + (uint64_t)x_div * 131u;
    const int64_t blk = type == SI_TYPE_Q8_0 ? 32 : 256, bbytes = type == SI_TYPE_Q8_0 ? 34 : type == SI_TYPE_Q4_K ? 144 : type == SI_TYPE_Q5_K ? 176 : 210;
    const int64_t row_bytes = in / blk * bbytes, nsb = in / G, ncx = (ncols - 1) / x_div + 1;
    const int64_t x_stride = in + x_pad, y_stride = rows + y_pad;
    printf("%s G %d rows %ld in %ld ncols %ld x_div %ld x_stride %ld y_stride %ld%s%s\n", tn, G, (long)rows, (long)in, (long)ncols,
           (long)x_div, (long)x_stride, (long)y_stride, nan_x ? " NaN in x" : "", getenv("EMU_DRIFT") ? " (warps drift)" : "");

    // weights: random bytes, then sane f16 scales (as mma_emu.cc); row
    // min(1, rows-1) starts with a 128-block of zeros (every scale 0)
    std::vector<uint8_t> wbuf(rows * row_bytes + 64);
    uint8_t *w = wbuf.data() + (16 - ((uintptr_t)wbuf.data() & 15)) % 16;   // 16-aligned, as cudaMalloc
    for (int64_t i = 0; i < rows * row_bytes; i++) w[i] = (uint8_t)r32();
    const int64_t zrow = rows > 1 ? 1 : 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < in / blk; b++) {
            uint8_t *B = w + r * row_bytes + b * bbytes;
            const bool zero = r == zrow && b * blk < 128;
            uint16_t h;
            switch (type) {
            case SI_TYPE_Q8_0: h = zero ? 0 : rnd_f16(1e-3f, 1e-2f); memcpy(B, &h, 2); break;
            case SI_TYPE_Q6_K: h = zero ? 0 : rnd_f16(1e-4f, 1e-3f); memcpy(B + 208, &h, 2); break;
            default:
                h = zero ? 0 : rnd_f16(1e-3f, 1e-2f); memcpy(B, &h, 2);
                h = zero ? 0 : rnd_f16(1e-3f, 1e-2f); memcpy(B + 2, &h, 2);
            }
        }
    std::vector<float> wf(rows * in);
    si_err err;
    for (int64_t r = 0; r < rows; r++)
        if (si_dequant(type, w + r * row_bytes, wf.data() + r * in, in, &err) != SI_OK) { printf("si_dequant failed\n"); return 2; }

    // (a) the weights
    std::vector<int8_t> rwq(rows * in), wq(rows * in);
    std::vector<float> rws(rows * nsb), ws(rows * nsb);
    for (int64_t r = 0; r < rows; r++) ref_quant(wf.data() + r * in, in, G, rwq.data() + r * in, rws.data() + r * nsb);
    int64_t bad = 0;
    for (unsigned grid : { grid_of(rows * (in / 256)), 1u }) {
        std::fill(wq.begin(), wq.end(), (int8_t)0x55);
        std::fill(ws.begin(), ws.end(), from_bits(POISON));
        emu::granges = {};
        emu_w8_weights(type, G, w, (uint64_t)row_bytes, rows, in, wq.data(), ws.data(), grid);
        bad += cmp_quant("weights", grid, wq.data(), ws.data(), rwq.data(), rws.data(), rows, in, G);
    }

    // (b) the activations [ncx][x_stride], the padding NaN: random, one
    // column of exact .5 ties (127 first in each block: s = 1), a zero
    // block, an outlier block
    std::vector<float> x(ncx * x_stride, NAN);
    for (int64_t c = 0; c < ncx; c++)
        for (int64_t i = 0; i < in; i++) x[c * x_stride + i] = fr() * (0.5f + 0.5f * fr());
    if (ncx > 1)
        for (int64_t i = 0; i < in; i++) x[x_stride + i] = i % 128 == 0 ? 127.0f : (float)((int)(r32() % 254) - 127) + 0.5f * (float)(i % 2);
    if (ncx > 2) { for (int i = 128; i < 256; i++) x[2 * x_stride + i] = 0.0f; x[2 * x_stride + 40] = 300.0f; }
    const int64_t nan_col = nan_x ? ncx - 1 : -1;
    if (nan_x) x[nan_col * x_stride + in / 2 + 3] = NAN;
    std::vector<int8_t> rxq(ncx * in), xq(ncx * in);
    std::vector<float> rxd(ncx * nsb), xd(ncx * nsb);
    for (int64_t c = 0; c < ncx; c++)
        if (G == 128) ref_quant(x.data() + c * x_stride, in, G, rxq.data() + c * in, rxd.data() + c * nsb);
        else quant_dp4a(x.data() + c * x_stride, in, xq.data() + c * in, xd.data() + c * nsb);
    for (unsigned grid : { grid_of(ncx * (in / 256)), 1u }) {
        if (G != 128) break;
        std::fill(xq.begin(), xq.end(), (int8_t)0x55);
        std::fill(xd.begin(), xd.end(), from_bits(POISON));
        emu::granges = {};
        emu_w8_quant_x(x.data(), x_stride, in, ncx, xq.data(), xd.data(), grid);
        bad += cmp_quant("activations", grid, xq.data(), xd.data(), rxq.data(), rxd.data(), ncx, in, G);
    }
    if (bad) { printf("  FAIL (requantisation)\n"); return 1; }

    // (c) the GEMM on what the kernels made (= the references, checked
    // above; G = 32: on quant_dp4a's activations)
    std::vector<double> ref(ncols * rows), refB(ncols * rows);
    for (int64_t c = 0; c < ncols; c++) {
        const int64_t j = c / x_div;
        for (int64_t r = 0; r < rows; r++) {
            double acc = 0, accB = 0;
            for (int64_t kb = 0; kb < nsb; kb++) {
                int64_t isum = 0;
                for (int64_t i = G * kb; i < G * kb + G; i++) {
                    isum += (int64_t)wq[r * in + i] * xq[j * in + i];
                    accB += (double)wf[r * in + i] * x[j * x_stride + i];
                }
                acc += (double)ws[r * nsb + kb] * (double)xd[j * nsb + kb] * (double)isum;
            }
            ref[c * rows + r] = acc; refB[c * rows + r] = accB;
        }
    }
    std::vector<float> ybuf(ncols * y_stride + 64, from_bits(POISON));
    float *y = ybuf.data() + 32;
    cu_mm mm = {};
    mm.w = w; mm.type = type; mm.in = in; mm.rows = rows; mm.row_bytes = (uint64_t)row_bytes;
    mm.x_stride = x_stride; mm.x_div = x_div; mm.y = y; mm.y_stride = y_stride; mm.ncols = ncols;
    mm.w8_ktile = getenv("EMU_KT") ? atoi(getenv("EMU_KT")) : 64;   // knob w8_ktile
    emu::granges = { { wq.data(), wq.data() + wq.size(), "wq" }, { ws.data(), ws.data() + ws.size(), "ws" },
                     { xq.data(), xq.data() + xq.size(), "xq" }, { xd.data(), xd.data() + xd.size(), "xd" } };
    emu_ptx::smem_bytes = emu_w8_smem(G, mm.w8_ktile);
    emu_w8(&mm, G, wq.data(), ws.data(), xq.data(), xd.data());
    emu_ptx::check_drained();

    // largest |ref| of each column (the int8 path) and of all (the dequant one)
    std::vector<double> cmax(ncols, 1e-30);
    double bmax = 1e-30;
    for (int64_t k = 0; k < ncols * rows; k++) {
        if (k / rows / x_div == nan_col) continue;   // (the NaN column's are NaN)
        cmax[k / rows] = std::max(cmax[k / rows], fabs(ref[k]));
        bmax = std::max(bmax, fabs(refB[k]));
    }
    double eI = 0, eB = 0; int64_t at = -1, nout = 0, nunw = 0, nnf = 0, nnan = 0;
    for (int64_t i = 0; i < (int64_t)ybuf.size(); i++) {
        const int64_t o = i - 32;
        const bool inside = o >= 0 && o < ncols * y_stride && o % y_stride < rows;
        if (!inside) { if (bits(ybuf[i]) != POISON && nout++ < 3) printf("  y: wrote outside the output at offset %ld\n", (long)o); continue; }
        const int64_t c = o / y_stride, r = o % y_stride, k = c * rows + r;
        const double v = y[o];
        if (bits(y[o]) == POISON) { if (nunw++ < 3) printf("  y[col %ld][row %ld] not written\n", (long)c, (long)r); continue; }
        if (c / x_div == nan_col) { if (!std::isnan(v) && nnan++ < 3) printf("  y[col %ld][row %ld] = %g: the NaN in x vanished\n", (long)c, (long)r, v); continue; }
        if (!std::isfinite(v)) { if (nnf++ < 3) printf("  y[col %ld][row %ld] = %g\n", (long)c, (long)r, v); continue; }
        const double e = fabs(v - ref[k]) / cmax[c];
        if (e > eI) { eI = e; at = k; }
        eB = std::max(eB, fabs(v - refB[k]) / bmax);
    }
    const bool ok = nout == 0 && nunw == 0 && nnf == 0 && nnan == 0 && eI <= 1e-5 && eB <= 2e-2;
    printf("  max |gpu - f64 int8 sum| %.3g of the column's max |ref| (at col %ld row %ld: %.9g vs %.9g); "
           "|gpu - dequant.x| %.3g of max |ref| (the requantisation)%s\n", eI, at < 0 ? -1L : (long)(at / rows),
           at < 0 ? -1L : (long)(at % rows), at < 0 ? 0.0 : (double)y[(at / rows) * y_stride + at % rows], at < 0 ? 0.0 : ref[at], eB,
           nout || nunw || nnf || nnan ? " (bad outputs)" : "");
    printf("  %s\n", ok ? "OK" : "FAIL");
    if (!ok || !getenv("EMU_WG") || G != 128)
        return ok ? 0 : 1;
    if (x_div != 1) {   // (si_cu_w8wg_ok: the wgmma kernel reads column j of x for column j)
        printf("  wgmma kernel: not run at x_div %ld\n", (long)x_div);
        return 0;
    }

    // (d) EMU_WG=1: cuda_w8wg.cu's wgmma kernel on the same int8 operands
    // must write exactly the mma.sync kernel's y (checked above), bit for
    // bit, and nothing else (the same poison around)
    std::vector<float> ybuf2(ybuf.size(), from_bits(POISON));
    mm.y = ybuf2.data() + 32;
    mm.w8_wg_pp = getenv("EMU_WG_PP") != NULL;   // (knob w8_wg_pingpong)
    emu_ptx::smem_bytes = emu_wg_smem();
    emu_w8wg(&mm, wq.data(), ws.data(), xq.data(), xd.data());
    emu_ptx::check_drained();
    emu_ptx::wg_check_drained();
    int64_t ndiff = 0;
    for (int64_t i = 0; i < (int64_t)ybuf.size(); i++)
        if (bits(ybuf2[i]) != bits(ybuf[i]) && ndiff++ < 3)
            printf("  wgmma: offset %ld: %.9g (%08x), mma.sync %.9g (%08x)\n", (long)(i - 32), ybuf2[i], bits(ybuf2[i]),
                   ybuf[i], bits(ybuf[i]));
    printf("  wgmma kernel%s: %ld elements differ from the mma.sync kernel's\n  %s\n", mm.w8_wg_pp ? " (ping-pong)" : "",
           (long)ndiff, ndiff ? "FAIL" : "OK");
    return ndiff ? 1 : 0;
}
