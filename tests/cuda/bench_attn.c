/* tests/cuda/bench_attn.c — prefill attention of one layer on cuda_sm120,
 * 9b shapes (16 query heads, 4 kv heads, head_dim 256, n_rot 64, f16
 * cache), attn_prefill = fa against = split.  Not a test (noinst; exit 77
 * without a GPU).  For prompt lengths N (default 512 4096 32768):
 *   whole: one ATTN op of N tokens at positions 0..N-1 (rope, append and
 *          the core; the sequence reset before each run);
 *   chunk: the last 512-token op of the prompt, positions N-512..N-1, the
 *          cache already holding 0..N-513 (what one layer call of an
 *          n_batch = 512 prefill costs at the end of the prompt).
 * Prints the best of REPS (default 3) wall times around exec + sync and
 * TFLOPS = 4 * n_head * head_dim * (causal query-key pairs) / t.
 * Usage: SI_TOP_BUILDDIR=build bench_attn [N...]   (SI_BENCH_REPS=k) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sparkinfer/plugin.h>

#include "config.h"
#include "host.h"

#define NH    16
#define NKV   4
#define HD    256
#define NROT  64
#define CHUNK 512

static si_host host;
static const struct si_backend_ops *ops;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const si_err *e)
{
    fprintf(stderr, "bench_attn: %s: %s\n", what, e->msg);
    exit(1);
}

typedef struct tens {
    si_buf   *buf;
    si_tensor t;
} tens;

/* F32 [ne0, ne1] of U(-scale, scale). */
static void tens_rand(si_backend *b, tens *x, int64_t ne0, int64_t ne1, float scale)
{
    si_err err = { { 0 } };
    const uint64_t bytes = (uint64_t)ne0 * ne1 * 4;
    float *f = malloc(bytes);
    if (f == NULL)
        exit(1);
    uint32_t s = 12345u + (uint32_t)ne0;
    for (uint64_t i = 0; i < bytes / 4; i++) {
        s = s * 1664525u + 1013904223u;
        f[i] = scale * ((float)((s >> 8) & 0xffffff) / 8388608.0f - 1.0f);
    }
    if (ops->buf_alloc(b, bytes, &x->buf, &err) != SI_OK || ops->upload(b, x->buf, 0, f, bytes, &err) != SI_OK)
        die("buffer", &err);
    free(f);
    x->t = (si_tensor){ .buf = x->buf, .type = SI_TYPE_F32, .ndim = 2, .ne = { ne0, ne1, 1, 1 },
                        .nb = { 4, 4 * (uint64_t)ne0, 4 * (uint64_t)ne0 * ne1, 4 * (uint64_t)ne0 * ne1 } };
}

/* One op of n tokens at positions p0..p0+n-1 of sequence 0; its wall time. */
static double attn_op(si_backend *b, si_kv *kv, tens *io, int32_t p0, int32_t n, int32_t *pos, int32_t *seq)
{
    si_err err = { { 0 } };
    for (int32_t i = 0; i < n; i++) {
        pos[i] = p0 + i;
        seq[i] = 0;
    }
    si_tensor qg = io[0].t, k = io[1].t, v = io[2].t, y = io[5].t;
    qg.ne[1] = k.ne[1] = v.ne[1] = y.ne[1] = n;
    si_op op = { .kind = SI_OP_ATTN, .dst = y, .src = { &qg, &k, &v, &io[3].t, &io[4].t } };
    op.p.attn = (si_attn_params){ .n_head = NH, .n_head_kv = NKV, .head_dim = HD, .n_rot = NROT, .eps = 1e-6f,
                                  .rope_base = 1e7f, .kv = kv, .kv_layer = 0, .pos = pos, .seq = seq };
    const double t0 = now_s();
    if (ops->exec(b, &op, 1, &err) != SI_OK || (ops->sync != NULL && ops->sync(b, &err) != SI_OK))
        die("exec", &err);
    return now_s() - t0;
}

/* The cache of sequence 0 reset and filled with positions 0..len-1 (untimed). */
static void fill(si_backend *b, si_kv *kv, tens *io, int32_t len, int32_t *pos, int32_t *seq)
{
    si_err err = { { 0 } };
    if (ops->kv_seq_reset(b, kv, 0, &err) != SI_OK)
        die("kv_seq_reset", &err);
    for (int32_t p = 0; p < len; p += CHUNK)
        attn_op(b, kv, io, p, len - p < CHUNK ? len - p : CHUNK, pos, seq);
}

static void run(const char *section, const int32_t *lens, int n_lens, int reps, double (*res)[2])
{
    si_err err = { { 0 } };
    si_backend *b = NULL;
    if (ops->open(&host, section, &b, &err) != SI_OK) {
        fprintf(stderr, "bench_attn: %s: %s\n", section, err.msg);
        exit(77);
    }
    int32_t maxn = 0;
    for (int i = 0; i < n_lens; i++)
        maxn = lens[i] > maxn ? lens[i] : maxn;
    si_kv *kv = NULL;
    si_kv_desc d = { .size = sizeof d, .n_layer = 1, .n_head_kv = NKV, .head_dim = HD, .n_seq = 1,
                     .n_ctx = (uint32_t)maxn };
    if (ops->kv_create(b, &d, &kv, &err) != SI_OK)
        die("kv_create", &err);
    tens io[6];
    tens_rand(b, &io[0], 2 * NH * HD, maxn, 2.0f);
    tens_rand(b, &io[1], NKV * HD, maxn, 2.0f);
    tens_rand(b, &io[2], NKV * HD, maxn, 1.0f);
    tens_rand(b, &io[3], HD, 1, 1.0f);
    tens_rand(b, &io[4], HD, 1, 1.0f);
    tens_rand(b, &io[5], NH * HD, maxn, 0.0f);
    int32_t *pos = malloc((size_t)maxn * 4), *seq = malloc((size_t)maxn * 4);
    if (pos == NULL || seq == NULL)
        exit(1);
    for (int i = 0; i < n_lens; i++) {
        const int32_t n = lens[i];
        double whole = 1e30, chunk = 1e30;
        for (int r = 0; r < reps + 1; r++) {   /* the first run warms up */
            fill(b, kv, io, 0, pos, seq);
            const double t = attn_op(b, kv, io, 0, n, pos, seq);
            whole = r > 0 && t < whole ? t : whole;
        }
        const int32_t c0 = n > CHUNK ? n - CHUNK : 0;
        for (int r = 0; r < reps + 1; r++) {
            fill(b, kv, io, c0, pos, seq);
            const double t = attn_op(b, kv, io, c0, n - c0, pos, seq);
            chunk = r > 0 && t < chunk ? t : chunk;
        }
        res[i][0] = whole;
        res[i][1] = chunk;
    }
    free(pos);
    free(seq);
    for (int i = 0; i < 6; i++)
        ops->buf_free(b, io[i].buf);
    ops->kv_free(b, kv);
    ops->close(b);
}

static double tflops(int64_t p0, int64_t n, double t)
{
    /* pairs: token p attends p + 1 positions */
    const double pairs = (double)n * (double)p0 + (double)n * (double)(n + 1) / 2.0;
    return 4.0 * NH * HD * pairs / t * 1e-12;
}

int main(int argc, char **argv)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    int32_t lens[16] = { 512, 4096, 32768 };
    int n_lens = 3;
    if (argc > 1) {
        n_lens = 0;
        for (int i = 1; i < argc && n_lens < 16; i++)
            if ((lens[n_lens] = atoi(argv[i])) > 0)
                n_lens++;
    }
    const int reps = getenv("SI_BENCH_REPS") ? atoi(getenv("SI_BENCH_REPS")) : 3;
    si_err err = { { 0 } };
    si_config *cfg = NULL;
    if (si_config_load_string("[backend.fa]\npath = cuda_sm120.so\nkv_type = f16\nattn_prefill = fa\n"
                              "[backend.split]\npath = cuda_sm120.so\nkv_type = f16\nattn_prefill = split\n",
                              "<bench>", &cfg, &err) != SI_OK)
        die("config", &err);
    si_host_init(&host, cfg);
    char path[4096];
    snprintf(path, sizeof path, "%s/backends/cuda_sm120/.libs/cuda_sm120.so", top ? top : ".");
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        fprintf(stderr, "bench_attn: cannot dlopen %s: %s (set SI_TOP_BUILDDIR)\n", path, dlerror());
        return 77;
    }
    si_entry_fn e = (si_entry_fn)(uintptr_t)dlsym(dl, SI_ENTRY_SYMBOL);
    const si_plugin *pl = e ? e(&host) : NULL;
    if (pl == NULL || pl->kind != SI_KIND_BACKEND)
        return 77;
    if (pl->probe != NULL && pl->probe(&host, &err) != 0) {
        fprintf(stderr, "bench_attn: SKIP: %s\n", err.msg);
        return 77;
    }
    ops = pl->ops;
    double fa[16][2], sp[16][2];
    run("backend.fa", lens, n_lens, reps, fa);
    run("backend.split", lens, n_lens, reps, sp);
    printf("prefill attention, one layer, 9b shapes (%d/%d heads, hd %d, f16 cache), best of %d\n", NH, NKV, HD, reps);
    printf("%7s %6s %10s %8s %10s %8s %8s\n", "tokens", "op", "fa us", "TFLOPS", "split us", "TFLOPS", "speedup");
    for (int i = 0; i < n_lens; i++)
        for (int c = 0; c < 2; c++) {
            const int64_t n = lens[i], p0 = c == 0 || n <= CHUNK ? 0 : n - CHUNK, cnt = n - p0;
            printf("%7lld %6s %10.1f %8.1f %10.1f %8.1f %7.2fx\n", (long long)n, c == 0 ? "whole" : "chunk",
                   fa[i][c] * 1e6, tflops(p0, cnt, fa[i][c]), sp[i][c] * 1e6, tflops(p0, cnt, sp[i][c]),
                   sp[i][c] / fa[i][c]);
        }
    si_config_free(cfg);
    return 0;
}
