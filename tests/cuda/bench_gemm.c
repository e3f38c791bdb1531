/* tests/cuda/bench_gemm.c — microbenchmark of the prefill int8 GEMM
 * (cuda_mma.cu = mma_tile v1, cuda_mma2.cu = v2) at the 9b preset's
 * shapes: per (type, rows, in, columns) the median of --reps timed runs
 * (CUDA events around the GEMM alone, after warm-up; L2 flushed before
 * each run, as a prefill step finds the weights in DRAM), printed with
 * 2 rows in cols / t as TOPS, and v2's max |v2 - v1| / max |v1| (the two
 * tilings sum the same int32 terms: ~1e-6; a broken kernel: O(1); above
 * 1e-4 it prints BAD and the exit status is 1).
 * Rows: v1 (mma_tile = v1), v2 (the launcher's row tile), v2/64 and
 * v2/128 (the row tile forced: whether the launcher picks well), w8 (v3,
 * mma_weights = i8: the GEMM alone on weights requantised beforehand) and
 * w8+q (what a product costs there: weights and activations requantised,
 * then the GEMM), w8/32 and w8/32+q the same with scales per 32
 * (w8_block = 32; the activations of si_cu_quantize_x), w8wg the w8
 * GEMM on wgmma (cuda_w8wg.cu; only where the device runs it), w8wg/pp
 * with its warpgroups taking turns (knob w8_wg_pingpong).  w8 is not the same sum (a second rounding of the
 * weights, activations per 128): its "vs v1" is that error, BAD above
 * 3e-2.
 * Random weight bytes with sane f16 scales, random activations quantised
 * by si_cu_quantize_x.  Exits 77 without a usable GPU.
 * Usage: bench_gemm [--reps N] [--cols N,N,..] [--only q4_k|q5_k|q6_k|q8_0] */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sparkinfer/types.h>

#include "cuda_internal.h"

#define BENCH_NAME "bench_gemm"
#include "bench_util.h"


/* f16 bits of a random sign and magnitude 2^(e-15) * 1.m, e in [lo, hi] */
static uint16_t rnd_f16(int lo, int hi)
{
    const uint32_t e = (uint32_t)(lo + (int)(r32() % (uint32_t)(hi - lo + 1)));
    return (uint16_t)(((r32() & 1) << 15) | (e << 10) | (r32() & 0x3ff));
}


typedef struct {
    uint32_t    type;
    const char *name;
    int64_t     in, rows;
    const char *what;
} shape;

/* the 9b preset (core/cli/mkmodel_presets.c): n_embd 4096, n_ff 12288 */
static const shape shapes[] = {
    { SI_TYPE_Q4_K, "q4_k", 4096, 12288, "ffn_gate/up" },
    { SI_TYPE_Q4_K, "q4_k", 12288, 4096, "ffn_down" },
    { SI_TYPE_Q4_K, "q4_k", 4096, 8192, "attn_q+gate, ssm qkv" },
    { SI_TYPE_Q4_K, "q4_k", 4096, 4096, "attn_output, ssm_out" },
    { SI_TYPE_Q6_K, "q6_k", 12288, 4096, "ffn_down (q6_k layers)" },
    { SI_TYPE_Q6_K, "q6_k", 4096, 12288, "q6_k at gate/up shape" },
    { SI_TYPE_Q5_K, "q5_k", 4096, 12288, "q5_k at gate/up shape" },
    { SI_TYPE_Q8_0, "q8_0", 4096, 1024, "attn_k/v" },
    { SI_TYPE_Q8_0, "q8_0", 4096, 12288, "q8_0 at gate/up shape" },
};

int main(int argc, char **argv)
{
    int reps = 15;
    int64_t cols[8] = { 512, 4096 };
    int ncol = 2;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--cols") && i + 1 < argc) {
            ncol = 0;
            for (char *p = argv[++i]; *p && ncol < 8; p += strcspn(p, ","), p += *p == ',')
                cols[ncol++] = atoll(p);
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_gemm [--reps N] [--cols N,N,..] [--only q4_k|q5_k|q6_k|q8_0]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    int status = 0;   /* 1 when a v2 result is off v1's (see the header) */
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("bench_gemm: no CUDA device: SKIP\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 && prop.major != 12) {
        printf("bench_gemm: sm_%d%d is not a target of this build: SKIP\n", prop.major, prop.minor);
        return 77;
    }
    bool wg = false;   /* (the wgmma GEMM: where the device and the fatbin run it) */
    CK(si_cu_w8wg_init(&wg));
    printf("bench_gemm: %s, sm_%d%d, %d SMs; median of %d runs, L2 flushed before each; wgmma %s\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, reps, wg ? "yes" : "no");
    printf("%-5s %6s %6s %5s  %-6s %9s %7s  %-8s %s\n", "type", "rows", "in", "cols", "mma", "us", "TOPS", "vs v1",
           "(shape)");

    int64_t maxc = 0, maxin = 0, maxrows = 0;
    for (int i = 0; i < ncol; i++)
        maxc = cols[i] > maxc ? cols[i] : maxc;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        maxin = shapes[s].in > maxin ? shapes[s].in : maxin;
        maxrows = shapes[s].rows > maxrows ? shapes[s].rows : maxrows;
    }
    /* activations: random f32 [maxc][maxin], quantised per shape's `in` */
    float *x;
    int8_t *xq;
    float *xd, *xsum, *y1, *y2, *ws8, *xd8;
    int8_t *wq8, *xq8;
    const size_t flush_bytes = (size_t)256 << 20;
    void *flush;
    CK(cudaMalloc((void **)&x, (size_t)(maxc * maxin) * 4));
    CK(cudaMalloc((void **)&xq, (size_t)(maxc * maxin)));
    CK(cudaMalloc((void **)&xd, (size_t)(maxc * maxin / 32) * 4));
    CK(cudaMalloc((void **)&xsum, (size_t)(maxc * maxin / 32) * 4));
    CK(cudaMalloc((void **)&y1, (size_t)(maxc * maxrows) * 4));
    CK(cudaMalloc((void **)&y2, (size_t)(maxc * maxrows) * 4));
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaMalloc((void **)&wq8, (size_t)(maxrows * maxin)));
    CK(cudaMalloc((void **)&ws8, (size_t)(maxrows * maxin / 32) * 4));
    CK(cudaMalloc((void **)&xq8, (size_t)(maxc * maxin)));
    CK(cudaMalloc((void **)&xd8, (size_t)(maxc * maxin / 32) * 4));
    {
        float *hx = malloc((size_t)(maxc * maxin) * 4);
        if (hx == NULL)
            return 1;
        for (int64_t i = 0; i < maxc * maxin; i++)
            hx[i] = ((float)(r32() & 0xffffff) / 8388608.0f - 1.0f) * 2.0f;
        CK(cudaMemcpy(x, hx, (size_t)(maxc * maxin) * 4, cudaMemcpyHostToDevice));
        free(hx);
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ts = malloc(sizeof(float) * (size_t)reps);
    float *h1 = malloc((size_t)(maxc * maxrows) * 4), *h2 = malloc((size_t)(maxc * maxrows) * 4);
    if (ts == NULL || h1 == NULL || h2 == NULL)
        return 1;

    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *sh = &shapes[s];
        if (only != NULL && strcmp(only, sh->name) != 0)
            continue;
        const int bb = bench_blk_bytes(sh->type), be = sh->type == SI_TYPE_Q8_0 ? 32 : 256;
        const uint64_t row_bytes = (uint64_t)(sh->in / be) * (uint64_t)bb;
        const size_t wbytes = (size_t)row_bytes * (size_t)sh->rows;
        uint8_t *hw = malloc(wbytes), *w;
        if (hw == NULL)
            return 1;
        for (size_t i = 0; i < wbytes; i++)
            hw[i] = (uint8_t)r32();
        for (size_t o = 0; o < wbytes; o += (size_t)bb) {   /* sane scales (~1e-3..1e-2) */
            uint16_t h;
            switch (sh->type) {
            case SI_TYPE_Q8_0: h = rnd_f16(5, 8); memcpy(hw + o, &h, 2); break;
            case SI_TYPE_Q6_K: h = rnd_f16(2, 5); memcpy(hw + o + 208, &h, 2); break;
            default:
                h = rnd_f16(5, 8); memcpy(hw + o, &h, 2);
                h = rnd_f16(5, 8); memcpy(hw + o + 2, &h, 2);
            }
        }
        CK(cudaMalloc((void **)&w, wbytes));
        CK(cudaMemcpy(w, hw, wbytes, cudaMemcpyHostToDevice));
        free(hw);
        for (int ci = 0; ci < ncol; ci++) {
            const int64_t n = cols[ci];
            int rc = si_cu_quantize_x(x, sh->in, sh->in, n, xq, xd, xsum, NULL);
            if (rc != 0) {
                fprintf(stderr, "bench_gemm: si_cu_quantize_x: %s\n", cudaGetErrorString((cudaError_t)rc));
                return 1;
            }
            cu_mm mm;
            memset(&mm, 0, sizeof mm);
            mm.w = w;
            mm.type = sh->type;
            mm.in = sh->in;
            mm.rows = sh->rows;
            mm.row_bytes = row_bytes;
            mm.x = x;
            mm.x_stride = sh->in;
            mm.x_div = 1;
            mm.y_stride = sh->rows;
            mm.ncols = n;
            if (!si_cu_mma_ok(&mm)) {
                fprintf(stderr, "bench_gemm: si_cu_mma_ok refuses %s %lld x %lld\n", sh->name, (long long)sh->rows,
                        (long long)sh->in);
                return 1;
            }
            static const char *const vname[] = { "v1", "v2", "v2/64", "v2/128", "w8", "w8+q", "w8/32", "w8/32+q", "w8wg", "w8wg/pp" };
            static const int vbm[] = { 0, 0, 64, 128, 0, 0, 0, 0, 0, 0 };
            const bool w8 = si_cu_w8_ok(&mm);
            mm.w8_ktile = 128;   /* as the backend runs it (knob w8_ktile) */
            for (int v = 0; v < (w8 ? (wg ? 10 : 8) : 4); v++) {
                const int g = v == 6 || v == 7 ? 32 : 128;
                mm.w8_wgmma = v >= 8;   /* (w8 rows: the mma.sync kernel) */
                mm.w8_wg_pp = v == 9;
                if ((v == 4 || v == 6 || v == 8 || v == 9) &&
                    ((rc = si_cu_w8_weights(&mm, g, wq8, ws8, NULL)) != 0 ||
                     (rc = g == 32 ? si_cu_quantize_x(x, sh->in, sh->in, n, xq8, xd8, xsum, NULL)
                                   : si_cu_w8_quantize_x(x, sh->in, sh->in, n, xq8, xd8, NULL)) != 0)) {
                    fprintf(stderr, "bench_gemm: w8 requantisation: %s\n", cudaGetErrorString((cudaError_t)rc));
                    return 1;
                }
                mm.y = v == 0 ? y1 : y2;
                for (int r = -3; r < reps; r++) {   /* 3 warm-up runs */
                    CK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, NULL));
                    CK(cudaEventRecord(e0, NULL));
                    if ((v == 5 || v == 7) && (rc = si_cu_w8_weights(&mm, g, wq8, ws8, NULL)) == 0)
                        rc = g == 32 ? si_cu_quantize_x(x, sh->in, sh->in, n, xq8, xd8, xsum, NULL)
                                     : si_cu_w8_quantize_x(x, sh->in, sh->in, n, xq8, xd8, NULL);
                    if (v >= 4 && rc == 0)
                        rc = si_cu_matmul_w8(&mm, g, wq8, ws8, xq8, xd8, NULL);
                    else if (v < 4)
                        rc = v == 0 ? si_cu_matmul_mma(&mm, xq, xd, xsum, NULL)
                                    : si_cu_matmul_mma2_bm(&mm, xq, xd, xsum, vbm[v], NULL);
                    if (rc != 0) {
                        fprintf(stderr, "bench_gemm: %s %s: %s\n", vname[v], sh->name, cudaGetErrorString((cudaError_t)rc));
                        return 1;
                    }
                    CK(cudaEventRecord(e1, NULL));
                    CK(cudaEventSynchronize(e1));
                    if (r >= 0)
                        CK(cudaEventElapsedTime(&ts[r], e0, e1));
                }
                qsort(ts, (size_t)reps, sizeof ts[0], bench_cmpf);
                const double us = 1e3 * (double)ts[reps / 2];
                const double tops = 2.0 * (double)sh->rows * (double)sh->in * (double)n / (us * 1e-6) / 1e12;
                char cmp[32] = "";
                if (v > 0) {
                    const size_t ny = (size_t)(n * sh->rows);
                    CK(cudaMemcpy(h1, y1, ny * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(h2, y2, ny * 4, cudaMemcpyDeviceToHost));
                    double mx = 0.0, md = 0.0;
                    for (size_t i = 0; i < ny; i++) {
                        mx = fmax(mx, fabs((double)h1[i]));
                        md = isfinite(h2[i]) ? fmax(md, fabs((double)h2[i] - (double)h1[i])) : INFINITY;
                        if (isinf(md))
                            break;
                    }
                    const double rel = md / fmax(mx, 1e-30);
                    const double tol = v >= 4 ? 3e-2 : 1e-4;
                    snprintf(cmp, sizeof cmp, "%.2g%s", rel, rel <= tol ? "" : " BAD");
                    if (!(rel <= tol))
                        status = 1;
                }
                printf("%-5s %6lld %6lld %5lld  %-6s %9.1f %7.1f  %-8s %s\n", sh->name, (long long)sh->rows,
                       (long long)sh->in, (long long)n, vname[v], us, tops, cmp, sh->what);
                fflush(stdout);
            }
        }
        CK(cudaFree(w));
    }
    free(ts);
    free(h1);
    free(h2);
    if (status != 0)
        printf("bench_gemm: v2 (w8) differs from v1 by more than 1e-4 (3e-2) of max |y| somewhere (BAD above)\n");
    return status;
}
