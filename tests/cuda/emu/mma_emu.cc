// tests/cuda/emu/mma_emu.cc — the int8 matmuls of cuda_sm120 (the
// prefill GEMMs v1 cuda_mma.cu and v2 cuda_mma2.cu, the decode GEMVs v1
// cuda_mmq.cu and v2 cuda_gemv.cu: EMU_KERNEL below) and their activation
// quantiser (cuda_mmq.cu, quant_x_kernel) under the host emulation, with
// the PTX of ptx_emu.h.
//   quantiser: q, d, s bit for bit against the cpu backend's
//     cpu_quantize_row_q8 (random columns, a column of exact .5 ties, a
//     zero block), at the launcher's grid and at a 1-block grid-stride one;
//   GEMM: against (a) the cpu backend's int8 dot (cpu_decode_row8 +
//     cpu_dot_row8, simd off) and its f64 evaluation, within 2e-5 of the
//     sum of |terms|, and (b) core si_dequant weights times the f32
//     activations in f64, within the int8 rounding bound of x;
//     random weight bytes (every code, scale and min), random f16 scales;
//     y poisoned (NaN), y_stride > rows: padding and rows/cols past the
//     end must stay NaN.
// Usage: mma_emu TYPE ROWS IN NCOLS [X_DIV [GY]]  (TYPE q4_k q5_k q6_k q8_0;
//   GY: blocks along the columns, default the launcher's: fewer exercise
//   the kernel's loop over column tiles)
// EMU_KERNEL unset (or mma): the GEMM v1 (cuda_mma.cu).
// EMU_KERNEL=dp4a: the decode GEMV v1 (cuda_mmq.cu); EMU_KERNEL=gemv: v2
// (cuda_gemv.cu).  For those, EMU_EXPERTS=E gives every column its own
// expert (random of E; the MOE products) and EMU_STACK=1 stacks a second
// matrix (another allocation) under rows [rows/2, rows) through cu_mm.w2
// (v2 only), as moe_exec's gate+up launch does; EMU_DIRECT=1 keeps v2 off
// its staged path (cu_mm.gemv_direct), EMU_ROWS=1|4 sets its rows per
// lane group at one column (cu_mm.gemv_rows; small cases pick 1 by size).
// EMU_KERNEL=mma2: the prefill GEMM v2 (cuda_mma2.cu) with EMU_BM=128
// (default) or 64 row tiles (GY ignored).
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include "ptx_emu.h"
#include <sparkinfer/status.h>
#include <sparkinfer/types.h>
// The cpu backend's int8 path and core's reference decoders (C; their
// headers are not C++: declared here as in cpu_internal.h and quant.h).
extern "C" {
typedef struct cpu_row8 { int8_t *q; float *d16; float *m32; bool has_min; } cpu_row8;
typedef struct cpu_q8 { int8_t *q; float *d; float *s; int64_t in; } cpu_q8;
void cpu_decode_row8(uint32_t type, const uint8_t *src, int64_t in, cpu_row8 *r, bool simd);
void cpu_quantize_row_q8(const float *x, int64_t in, const cpu_q8 *q, int64_t row);
float cpu_dot_row8(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in, bool simd);
int si_dequant(uint32_t type, const void *src, float *dst, int64_t n, si_err *err);
uint16_t si_f32_to_fp16(float f);
}
size_t emu_mma_smem();
void emu_mma(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy);
size_t emu_mma2_smem(int bm);
void emu_mma2(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, int bm);
void emu_mmq(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs);
void emu_gemv(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy);
void emu_quant_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d, float *s, unsigned blocks);

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint32_t r32() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static float fr() { return (float)(r32() & 0xffffff) / 8388608.0f - 1.0f; }   // [-1, 1)

static bool check_quant(const std::vector<float> &x, int64_t in, int64_t ncx)
{
    const int64_t nb = in / 32;
    cpu_q8 ref;
    std::vector<int8_t> rq(in * ncx);
    std::vector<float> rd(nb * ncx), rsum(nb * ncx);
    ref.q = rq.data(); ref.d = rd.data(); ref.s = rsum.data(); ref.in = in;
    for (int64_t c = 0; c < ncx; c++)
        cpu_quantize_row_q8(x.data() + c * in, in, &ref, c);
    int64_t blocks = (ncx * nb + 7) / 8;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    bool ok = true;
    for (unsigned grid : { (unsigned)blocks, 1u }) {
        std::vector<int8_t> q(in * ncx, 99);
        std::vector<float> d(nb * ncx, NAN), s(nb * ncx, NAN);
        emu::granges = { { x.data(), x.data() + x.size(), "x" } };
        emu_quant_x(x.data(), in, in, ncx, q.data(), d.data(), s.data(), grid);
        int64_t bad = 0;
        for (int64_t i = 0; i < in * ncx; i++)
            if (q[i] != rq[i]) { if (bad++ < 3) printf("  quant (grid %u): q[%ld] = %d, cpu %d (x %.9g, d %.9g)\n", grid, (long)i, q[i], rq[i], x[i], rd[i / 32]); }
        for (int64_t i = 0; i < nb * ncx; i++)
            if (memcmp(&d[i], &rd[i], 4) || memcmp(&s[i], &rsum[i], 4)) { if (bad++ < 6) printf("  quant (grid %u): block %ld: d %.9g s %.9g, cpu %.9g %.9g\n", grid, (long)i, d[i], s[i], rd[i], rsum[i]); }
        if (bad) { printf("  quant (grid %u): %ld mismatches\n", grid, (long)bad); ok = false; }
    }
    return ok;
}

static uint16_t rnd_f16(float lo, float hi)   // random sign, |v| in [lo, hi)
{
    float v = lo + (hi - lo) * (0.5f + 0.5f * fr());
    if (r32() & 1) v = -v;
    return si_f32_to_fp16(v);
}

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: mma_emu TYPE ROWS IN NCOLS [X_DIV [GY]]\n"); return 2; }
    const char *tn = argv[1];
    const uint32_t type = !strcmp(tn, "q4_k") ? SI_TYPE_Q4_K : !strcmp(tn, "q5_k") ? SI_TYPE_Q5_K :
                          !strcmp(tn, "q6_k") ? SI_TYPE_Q6_K : !strcmp(tn, "q8_0") ? SI_TYPE_Q8_0 : 0;
    const int64_t rows = atoll(argv[2]), in = atoll(argv[3]), ncols = atoll(argv[4]);
    const int64_t x_div = argc > 5 ? atoll(argv[5]) : 1;
    if (!type) { fprintf(stderr, "mma_emu: type %s\n", tn); return 2; }
    rs ^= (uint64_t)type * 1000003u + (uint64_t)rows * 7919u + (uint64_t)in * 31u + (uint64_t)ncols;
    const int64_t blk = type == SI_TYPE_Q8_0 ? 32 : 256, bbytes = type == SI_TYPE_Q8_0 ? 34 : type == SI_TYPE_Q4_K ? 144 : type == SI_TYPE_Q5_K ? 176 : 210;
    const int64_t nbw = in / blk, row_bytes = nbw * bbytes, nb = in / 32;
    const int64_t ncx = (ncols - 1) / x_div + 1;
    printf("%s rows %ld in %ld ncols %ld x_div %ld", tn, (long)rows, (long)in, (long)ncols, (long)x_div);

    const char *ek = getenv("EMU_KERNEL");
    const bool dp4a = ek != NULL && !strcmp(ek, "dp4a"), gemv = ek != NULL && !strcmp(ek, "gemv");
    const bool mma2 = ek != NULL && !strcmp(ek, "mma2");
    const int bm = getenv("EMU_BM") != NULL ? atoi(getenv("EMU_BM")) : 128;
    const int64_t n_exp = getenv("EMU_EXPERTS") ? atoll(getenv("EMU_EXPERTS")) : 0;
    const bool stack = getenv("EMU_STACK") != NULL && atoi(getenv("EMU_STACK")) != 0;
    const int64_t split = stack ? rows / 2 : rows;   // rows of the first matrix
    // expert stride: the matrix plus 16 bytes (strides need not be tight)
    const int64_t ebytes = n_exp > 0 ? split * row_bytes + 16 : 0, nmat = n_exp > 0 ? n_exp : 1;
    const int64_t wbytes = n_exp > 0 ? nmat * ebytes : split * row_bytes;
    const int64_t w2bytes = stack ? (n_exp > 0 ? nmat * ebytes : (rows - split) * row_bytes) : 0;
    if (n_exp > 0) printf(" experts %ld", (long)n_exp);
    if (stack) printf(" stacked at row %ld", (long)split);

    // weights: random bytes, then sane f16 scales where the format has them
    std::vector<uint8_t> wbuf(wbytes + 64), w2buf(w2bytes + 64);
    uint8_t *w = wbuf.data() + (16 - ((uintptr_t)wbuf.data() & 15)) % 16;   // 16-aligned, as cudaMalloc
    uint8_t *w2 = stack ? w2buf.data() + (16 - ((uintptr_t)w2buf.data() & 15)) % 16 : NULL;
    for (int64_t i = 0; i < wbytes; i++) w[i] = (uint8_t)r32();
    for (int64_t i = 0; i < w2bytes; i++) w2[i] = (uint8_t)r32();
    // row r of expert e (the stacked matrix below row `split`)
    auto wrow = [&](int64_t e, int64_t r) -> uint8_t * {
        return r < split ? w + e * ebytes + r * row_bytes : w2 + e * ebytes + (r - split) * row_bytes;
    };
    std::vector<int32_t> expert(ncols, 0);
    for (auto &e : expert) e = n_exp > 0 ? (int32_t)(r32() % (uint32_t)n_exp) : 0;
    for (int64_t e = 0; e < nmat; e++)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < nbw; b++) {
            uint8_t *B = wrow(e, r) + b * bbytes;
            uint16_t h;
            switch (type) {
            case SI_TYPE_Q8_0: h = rnd_f16(1e-3f, 1e-2f); memcpy(B, &h, 2); break;
            case SI_TYPE_Q6_K: h = rnd_f16(1e-4f, 1e-3f); memcpy(B + 208, &h, 2); break;
            default:
                h = rnd_f16(1e-3f, 1e-2f); memcpy(B, &h, 2);
                h = rnd_f16(1e-3f, 1e-2f); memcpy(B + 2, &h, 2);
            }
        }
    // activations [ncx][in]: random, one column of exact .5 ties, a zero block, an outlier block
    std::vector<float> x(ncx * in);
    for (auto &v : x) v = fr() * (0.5f + 0.5f * fr());
    if (ncx > 1)
        for (int64_t i = 0; i < in; i++) x[in + i] = (i % 32 == 0) ? 127.0f : (float)((int)(r32() % 254) - 127) + 0.5f * (float)(i % 2);
    if (ncx > 2) { for (int i = 0; i < 32; i++) x[2 * in + i] = 0.0f; x[2 * in + 40] = 300.0f; }

    if (!check_quant(x, in, ncx)) { printf("  FAIL (quantiser)\n"); return 1; }
    std::vector<int8_t> xq(ncx * in);
    std::vector<float> xd(ncx * nb), xs(ncx * nb);
    cpu_q8 q8 = { xq.data(), xd.data(), xs.data(), in };
    for (int64_t c = 0; c < ncx; c++)
        cpu_quantize_row_q8(x.data() + c * in, in, &q8, c);

    // references per (column, row)
    std::vector<double> ref64(ncols * rows), scale(ncols * rows), refB(ncols * rows), boundB(ncols * rows);
    std::vector<float> refcpu(ncols * rows);
    {
        std::vector<int8_t> q(in);
        std::vector<float> d16(in / 16), m32(in / 32), wf(in);
        cpu_row8 r8 = { q.data(), d16.data(), m32.data(), false };
        si_err err;
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < ncols; c++) {
                const int64_t j = c / x_div;
                if (c == 0 || n_exp > 0) {
                    const uint8_t *wr = wrow(expert[c], r);
                    cpu_decode_row8(type, wr, in, &r8, false);
                    if (si_dequant(type, wr, wf.data(), in, &err) != SI_OK) { printf("si_dequant failed\n"); return 2; }
                }
                refcpu[c * rows + r] = cpu_dot_row8(&r8, &q8, j, in, false);
                double acc = 0, sc = 0, accB = 0, bB = 0;
                for (int64_t b = 0; b < nb; b++) {
                    double s0 = 0, s1 = 0, a0 = 0, a1 = 0;
                    for (int l = 0; l < 32; l++) {
                        const double p = (double)q[32 * b + l] * xq[j * in + 32 * b + l];
                        (l < 16 ? s0 : s1) += p;
                        (l < 16 ? a0 : a1) += fabs(p);
                    }
                    const double dx = xd[j * nb + b], m = r8.has_min ? m32[b] : 0.0;
                    acc += dx * (d16[2 * b] * s0 + d16[2 * b + 1] * s1) - m * xs[j * nb + b];
                    sc += fabs(dx) * (fabs(d16[2 * b]) * a0 + fabs(d16[2 * b + 1]) * a1) + fabs(m * xs[j * nb + b]);
                    for (int l = 0; l < 32; l++) {
                        accB += (double)wf[32 * b + l] * x[j * in + 32 * b + l];
                        bB += 0.5 * fabs((double)wf[32 * b + l] + m) * dx;   // |x - dx*xq| <= dx/2
                    }
                }
                ref64[c * rows + r] = acc; scale[c * rows + r] = sc; refB[c * rows + r] = accB; boundB[c * rows + r] = bB * 1.0001 + 1e-5 * sc;
            }
        }
    }

    // the kernel
    const int64_t y_stride = rows + 5;
    std::vector<float> ybuf(ncols * y_stride + 64, NAN);
    float *y = ybuf.data() + 32;
    cu_mm mm = {};
    mm.w = w; mm.type = type; mm.in = in; mm.rows = rows; mm.row_bytes = (uint64_t)row_bytes;
    mm.x_stride = in; mm.x_div = x_div; mm.y = y; mm.y_stride = y_stride; mm.ncols = ncols;
    std::vector<int32_t> expert_dev(expert);
    if (n_exp > 0) { mm.expert = expert_dev.data(); mm.expert_bytes = (uint64_t)ebytes; }
    if (stack) { mm.w2 = w2; mm.rows_split = split; }
    mm.gemv_direct = getenv("EMU_DIRECT") != NULL;   // v2 without its staged path
    mm.gemv_rows = getenv("EMU_ROWS") ? atoi(getenv("EMU_ROWS")) : 0;   // v2, one column: 1 or 4 rows a group
    mm.gemv_unroll = getenv("EMU_UNROLL") ? atoi(getenv("EMU_UNROLL")) : 0;   // v1, one column: 2/4/8 units a lane
    mm.gemv_wide = getenv("EMU_WIDE") != NULL;   // v1, Q4_K, one column: 32-byte units
    mm.gemv_order = getenv("EMU_ORDER") != NULL; // v1, Q4_K/Q5_K, one column: lanes share the sub-block
    mm.gemv_quad = getenv("EMU_QUAD") != NULL;   // v1, one column, in % 2048 == 0: cuda_gemvq.cu
    mm.gemv_qn = getenv("EMU_NOQN") == NULL;     // cuda_gemvq.cu takes 2..8 dense columns (the default)
    mm.gemv_qe = getenv("EMU_NOQE") == NULL;     // cuda_gemvq.cu takes expert columns (the default)
    mm.expert_early = getenv("EMU_EARLY") != NULL;   // gqe_kernel: picks read before the (no-op here) wait
    mm.gemv_xs = getenv("EMU_NOXS") == NULL;     // cuda_gemvq.cu: x from shared memory (the default)
    mm.gemv_st = getenv("EMU_NOST") == NULL;     // cuda_gemvq.cu takes Q8_0 (the default)
    mm.gemv_st6 = getenv("EMU_NOST6") == NULL ? 1 : 0;   // Q6_K staged at every size (g6_kernel; knob value true)
    mm.gemv_warps = getenv("EMU_WARPS") ? atoi(getenv("EMU_WARPS")) : 0;   // cuda_gemvq.cu: 8 warps a block
    // v1: the rows as 2..4 products of one launch (cu_mm.more), part k
    // rows [o_k, o_k+1) of the same matrix writing its own rows of y, so
    // the references below hold unchanged; odd sizes, one of 1 row
    const int parts = getenv("EMU_PARTS") ? atoi(getenv("EMU_PARTS")) : 1;
    if (dp4a && parts > 1 && parts <= 1 + CU_MM_MORE && rows >= parts) {
        int64_t cut[1 + CU_MM_MORE + 1];
        cut[0] = 0;
        cut[parts] = rows;
        for (int k = 1; k < parts; k++)
            cut[k] = 1 + (rows - 1) * (k - 1) / (parts - 1);
        for (int k = 2; k < parts; k++)
            if (cut[k] <= cut[k - 1]) cut[k] = cut[k - 1] + 1;
        mm.rows = cut[1];
        for (int k = 1; k < parts; k++)
            mm.more[k - 1] = { w + cut[k] * row_bytes, y + cut[k], cut[k + 1] - cut[k], (uint64_t)row_bytes, y_stride };
        mm.n_more = parts - 1;
        printf("  %d products of rows", parts);
        for (int k = 0; k < parts; k++) printf(" %ld", (long)(cut[k + 1] - cut[k]));
        printf("\n");
    }
    const bool ok_kernel = gemv ? si_cu_gemv_ok(&mm) : dp4a ? si_cu_mmq_ok(&mm) && !stack : si_cu_mma_ok(&mm) && !stack && n_exp == 0;
    if (!ok_kernel) { printf("  %s refuses it\n", gemv ? "si_cu_gemv_ok" : dp4a ? "si_cu_mmq_ok" : "si_cu_mma_ok"); return 2; }
    unsigned gy = (unsigned)((ncols + 63) / 64);
    if (gemv) gy = 0;   // the launcher's
    if (argc > 6) gy = (unsigned)atoi(argv[6]);
    printf(" gy %u\n", gy);
    emu::granges = { { w, w + wbytes, "w" }, { xq.data(), xq.data() + xq.size(), "xq" },
                     { xd.data(), xd.data() + xd.size(), "xd" }, { xs.data(), xs.data() + xs.size(), "xs" },
                     { expert_dev.data(), expert_dev.data() + expert_dev.size(), "expert" } };
    if (stack) emu::granges.push_back({ w2, w2 + w2bytes, "w2" });
    emu_ptx::smem_bytes = mma2 ? emu_mma2_smem(bm) : emu_mma_smem();
    if (gemv) {
        printf("  (GEMV v2)\n");
        emu_gemv(&mm, xq.data(), xd.data(), xs.data(), gy);
    } else if (dp4a) {
        printf("  (dp4a GEMV)\n");
        emu_mmq(&mm, xq.data(), xd.data(), xs.data());
    } else if (mma2) {
        printf("  (mma v2, %d-row tiles)\n", bm);
        emu_mma2(&mm, xq.data(), xd.data(), xs.data(), bm);
    } else {
        emu_mma(&mm, xq.data(), xd.data(), xs.data(), gy);
    }
    emu_ptx::check_drained();

    double eA = 0, eC = 0, eB = 0; int64_t at = -1, bad = 0, nan = 0;
    for (int64_t i = 0; i < (int64_t)ybuf.size(); i++) {
        const int64_t o = i - 32;
        const bool inside = o >= 0 && o < ncols * y_stride && o % y_stride < rows;
        if (!inside) { if (!std::isnan(ybuf[i])) { if (bad++ < 3) printf("  y: wrote outside the output at offset %ld\n", (long)o); } continue; }
        const int64_t c = o / y_stride, r = o % y_stride, k = c * rows + r;
        const double v = y[o];
        if (!std::isfinite(v)) { if (nan++ < 3) printf("  y[col %ld][row %ld] = %g\n", (long)c, (long)r, v); continue; }
        const double s = scale[k] > 0 ? scale[k] : 1e-30;
        const double ea = fabs(v - ref64[k]) / s, ec = fabs((double)refcpu[k] - ref64[k]) / s;
        if (ea > eA) { eA = ea; at = k; }
        eC = std::max(eC, ec);
        const double eb = fabs(v - refB[k]) / boundB[k];
        eB = std::max(eB, eb);
    }
    const bool ok = bad == 0 && nan == 0 && eA <= 2e-5 && eB <= 1.0;
    printf("  max |gpu - f64 int8 path| %.3g of sum|terms| (at col %ld row %ld: %.8g vs %.8g; cpu backend's own: %.3g); "
           "|gpu - f64 dequant.x| %.3g of the x-rounding bound%s\n", eA, at < 0 ? -1L : (long)(at / rows), at < 0 ? -1L : (long)(at % rows),
           at < 0 ? 0.0 : (double)y[(at / rows) * y_stride + at % rows], at < 0 ? 0.0 : ref64[at], eC, eB,
           bad || nan ? " (bad outputs)" : "");
    printf("  %s\n", ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
