/* tests/cpu/bench_cpu.c — throughput of the cpu backend's hot ops (not a
 * test: built by `make check`, run by hand).
 *
 *   bench_cpu [threads]     (plugin: $SI_TOP_BUILDDIR/backends/cpu/.libs/cpu.so,
 *                            or $SI_CPU_PLUGIN)
 *
 * 1. MATMUL 4096 x 4096 for several weight types: n = 1 (matvec, reported
 *    as GB/s of weights streamed) and n = 64 (GFLOP/s).
 * 2. MOE prefill on a synthetic 35B-A3B-like layer (H 2048, 256 experts,
 *    top 8, F 512, Q4_K gate/up, Q5_K down, Q8_0 shared expert of 512,
 *    F32 router), batch 128: tokens/s with moe = grouped and per_token.
 * Weights are random valid blocks (quantising 400 MB with the reference
 * quantiser would take minutes); values do not matter for speed.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sparkinfer/plugin.h>

#include "quant.h"

static const char *knob_threads, *knob_moe;

static void h_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    (void)h;
    if (level > SI_LOG_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%s] ", who);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *h_cfg_get(const si_host *h, const char *section, const char *key)
{
    (void)h;
    if (strcmp(section, "backend.cpu") != 0)
        return NULL;
    if (strcmp(key, "threads") == 0)
        return knob_threads;
    if (strcmp(key, "moe") == 0)
        return knob_moe;
    return NULL;
}

static uint32_t h_blk_elems(uint32_t t) { const si_type_traits *tr = si_type_get(t); return tr ? tr->block_elems : 0; }
static uint32_t h_blk_bytes(uint32_t t) { const si_type_traits *tr = si_type_get(t); return tr ? tr->block_bytes : 0; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

/* Random blocks with small finite f16 scales where each format keeps them. */
static uint8_t *random_weight(uint32_t type, int64_t n, uint64_t *bytes_out)
{
    const si_type_traits *tr = si_type_get(type);
    uint64_t nb = (uint64_t)n / tr->block_elems, bytes = nb * tr->block_bytes;
    uint8_t *p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "out of memory (%llu bytes)\n", (unsigned long long)bytes);
        exit(1);
    }
    for (uint64_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rnd();
    uint16_t small = si_f32_to_fp16(0.01f);
    for (uint64_t b = 0; b < nb; b++) {
        uint8_t *x = p + b * tr->block_bytes;
        int off[2] = { -1, -1 };
        switch (type) {
        case SI_TYPE_Q8_0: case SI_TYPE_Q4_0: off[0] = 0; break;
        case SI_TYPE_Q4_K: case SI_TYPE_Q5_K: off[0] = 0; off[1] = 2; break;
        case SI_TYPE_Q6_K: off[0] = 208; break;
        default: break;
        }
        for (int k = 0; k < 2; k++)
            if (off[k] >= 0)
                memcpy(x + off[k], &small, 2);
    }
    if (type == SI_TYPE_F16 || type == SI_TYPE_BF16)
        for (uint64_t i = 0; i < (uint64_t)n; i++) {
            uint16_t v = type == SI_TYPE_F16 ? si_f32_to_fp16(((float)(rnd() % 2001) - 1000) * 1e-4f)
                                             : si_f32_to_bf16(((float)(rnd() % 2001) - 1000) * 1e-4f);
            memcpy(p + 2 * i, &v, 2);
        }
    *bytes_out = bytes;
    return p;
}

typedef struct bench {
    void                        *dl;
    const struct si_backend_ops *ops;
    si_host                      host;
    si_backend                  *b;
} bench;

static void die(const char *what, const si_err *err)
{
    fprintf(stderr, "%s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static void bench_open(bench *bn)
{
    char path[4096];
    const char *p = getenv("SI_CPU_PLUGIN");
    if (p == NULL) {
        const char *top = getenv("SI_TOP_BUILDDIR");
        snprintf(path, sizeof path, "%s/backends/cpu/.libs/cpu.so", top ? top : ".");
        p = path;
    }
    bn->dl = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (bn->dl == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", p, dlerror());
        exit(1);
    }
    si_entry_fn entry;
    *(void **)&entry = dlsym(bn->dl, SI_ENTRY_SYMBOL);
    si_host *h = &bn->host;
    memset(h, 0, sizeof *h);
    h->abi_major = SI_ABI_MAJOR;
    h->abi_minor = SI_ABI_MINOR;
    h->size = sizeof *h;
    h->log = h_log;
    h->cfg_get = h_cfg_get;
    h->type_block_elems = h_blk_elems;
    h->type_block_bytes = h_blk_bytes;
    h->type_name = si_type_name;
    h->dequant = si_dequant;
    h->quant = si_quant;
    const si_plugin *pl = entry ? entry(h) : NULL;
    if (pl == NULL)
        die("no plugin descriptor", NULL);
    bn->ops = pl->ops;
    si_err err = { "" };
    if (bn->ops->open(h, "backend.cpu", &bn->b, &err) != SI_OK)
        die("open", &err);
}

static void bench_close(bench *bn)
{
    bn->ops->close(bn->b);
    dlclose(bn->dl);
}

static si_tensor f32_tensor(bench *bn, int64_t ne0, int64_t ne1, const float *data)
{
    si_tensor t = { .type = SI_TYPE_F32, .ndim = 2, .ne = { ne0, ne1, 1, 1 } };
    t.nb[0] = 4;
    t.nb[1] = (uint64_t)ne0 * 4;
    t.nb[2] = t.nb[3] = t.nb[1] * (uint64_t)ne1;
    si_err err = { "" };
    if (bn->ops->buf_alloc(bn->b, t.nb[2], &t.buf, &err) != SI_OK)
        die("buf_alloc", &err);
    if (data != NULL && bn->ops->upload(bn->b, t.buf, 0, data, t.nb[2], &err) != SI_OK)
        die("upload", &err);
    return t;
}

static si_tensor weight(bench *bn, uint32_t type, const uint8_t *bytes, uint64_t nbytes, int64_t ne0, int64_t ne1,
                        int64_t ne2)
{
    si_tensor_info ti = { .name = "bench", .type = type, .ndim = ne2 > 1 ? 3 : 2, .ne = { ne0, ne1, ne2, 1 },
                          .nbytes = nbytes, .data = bytes };
    si_tensor t;
    si_err err = { "" };
    if (bn->ops->weight_load(bn->b, &ti, &t, &err) != SI_OK)
        die("weight_load", &err);
    return t;
}

static double run_op(bench *bn, const si_op *op, int min_reps, double min_s)
{
    si_err err = { "" };
    if (bn->ops->exec(bn->b, op, 1, &err) != SI_OK)   /* warm-up */
        die("exec", &err);
    int reps = 0;
    double t0 = now(), t;
    do {
        if (bn->ops->exec(bn->b, op, 1, &err) != SI_OK)
            die("exec", &err);
        reps++;
        t = now() - t0;
    } while (reps < min_reps || t < min_s);
    return t / reps;
}

static void bench_matmul(void)
{
    static const uint32_t types[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_Q8_0, SI_TYPE_F16 };
    const int64_t in = 4096, out = 4096;
    bench bn;
    bench_open(&bn);
    float *x = malloc(sizeof(float) * in * 64);
    for (int64_t i = 0; i < in * 64; i++)
        x[i] = ((float)(rnd() % 2001) - 1000) * 1e-3f;
    si_tensor x1 = f32_tensor(&bn, in, 1, x), x64 = f32_tensor(&bn, in, 64, x);
    si_tensor y1 = f32_tensor(&bn, out, 1, NULL), y64 = f32_tensor(&bn, out, 64, NULL);
    printf("MATMUL %lld x %lld (threads %s)\n", (long long)in, (long long)out, knob_threads ? knob_threads : "all");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint64_t nbytes;
        uint8_t *wb = random_weight(types[k], in * out, &nbytes);
        si_tensor w = weight(&bn, types[k], wb, nbytes, in, out, 1);
        si_op op1 = { .kind = SI_OP_MATMUL, .dst = y1, .src = { &w, &x1 } };
        si_op op64 = { .kind = SI_OP_MATMUL, .dst = y64, .src = { &w, &x64 } };
        double t1 = run_op(&bn, &op1, 20, 0.5), t64 = run_op(&bn, &op64, 3, 0.5);
        printf("  %-5s n=1 : %8.3f ms  %7.2f GB/s weights  %7.2f GFLOP/s | n=64: %8.2f ms  %7.1f GFLOP/s  %6.2f GB/s\n",
               si_type_name(types[k]), t1 * 1e3, (double)nbytes / t1 * 1e-9, 2.0 * in * out / t1 * 1e-9, t64 * 1e3,
               2.0 * in * out * 64 / t64 * 1e-9, (double)nbytes / t64 * 1e-9);
        bn.ops->buf_free(bn.b, w.buf);
        free(wb);
    }
    bn.ops->buf_free(bn.b, x1.buf);
    bn.ops->buf_free(bn.b, x64.buf);
    bn.ops->buf_free(bn.b, y1.buf);
    bn.ops->buf_free(bn.b, y64.buf);
    free(x);
    bench_close(&bn);
}

static void bench_moe(int n)
{
    const int64_t H = 2048, E = 256, K = 8, F = 512, Fs = 512;
    uint64_t b_router = (uint64_t)(H * E) * 4, b_gate, b_up, b_down, b_gi = (uint64_t)H * 4, b_sg, b_su, b_sd;
    float *router = malloc(b_router), *gi = malloc(b_gi);
    for (int64_t i = 0; i < H * E; i++)
        router[i] = ((float)(rnd() % 2001) - 1000) * 1e-4f;
    for (int64_t i = 0; i < H; i++)
        gi[i] = ((float)(rnd() % 2001) - 1000) * 1e-4f;
    uint8_t *gate = random_weight(SI_TYPE_Q4_K, H * F * E, &b_gate);
    uint8_t *up = random_weight(SI_TYPE_Q4_K, H * F * E, &b_up);
    uint8_t *down = random_weight(SI_TYPE_Q5_K, F * H * E, &b_down);
    uint8_t *sg = random_weight(SI_TYPE_Q8_0, H * Fs, &b_sg), *su = random_weight(SI_TYPE_Q8_0, H * Fs, &b_su);
    uint8_t *sd = random_weight(SI_TYPE_Q8_0, Fs * H, &b_sd);
    float *h = malloc(sizeof(float) * H * n);
    for (int64_t i = 0; i < H * n; i++)
        h[i] = ((float)(rnd() % 2001) - 1000) * 1e-3f;
    printf("MOE H %lld, %lld experts top %lld, F %lld, Q4_K gate/up, Q5_K down, Q8_0 shared; batch %d\n",
           (long long)H, (long long)E, (long long)K, (long long)F, n);
    static const char *modes[] = { "grouped", "per_token" };
    for (int m = 0; m < 2; m++) {
        knob_moe = modes[m];
        bench bn;
        bench_open(&bn);
        si_tensor t[9];
        t[0] = f32_tensor(&bn, H, n, h);
        t[1] = weight(&bn, SI_TYPE_F32, (const uint8_t *)router, b_router, H, E, 1);
        t[2] = weight(&bn, SI_TYPE_Q4_K, gate, b_gate, H, F, E);
        t[3] = weight(&bn, SI_TYPE_Q4_K, up, b_up, H, F, E);
        t[4] = weight(&bn, SI_TYPE_Q5_K, down, b_down, F, H, E);
        t[5] = weight(&bn, SI_TYPE_F32, (const uint8_t *)gi, b_gi, H, 1, 1);
        t[6] = weight(&bn, SI_TYPE_Q8_0, sg, b_sg, H, Fs, 1);
        t[7] = weight(&bn, SI_TYPE_Q8_0, su, b_su, H, Fs, 1);
        t[8] = weight(&bn, SI_TYPE_Q8_0, sd, b_sd, Fs, H, 1);
        si_tensor dst = f32_tensor(&bn, H, n, NULL);
        si_op op = { .kind = SI_OP_MOE, .dst = dst, .p.moe = { (uint32_t)E, (uint32_t)K } };
        for (int i = 0; i < 9; i++)
            op.src[i] = &t[i];
        double tm = run_op(&bn, &op, 2, 1.0);
        printf("  %-9s: %8.1f ms per batch  %8.1f tok/s\n", modes[m], tm * 1e3, n / tm);
        for (int i = 0; i < 9; i++)
            bn.ops->buf_free(bn.b, t[i].buf);
        bn.ops->buf_free(bn.b, dst.buf);
        bench_close(&bn);
    }
    knob_moe = NULL;
    free(router);
    free(gi);
    free(gate);
    free(up);
    free(down);
    free(sg);
    free(su);
    free(sd);
    free(h);
}

int main(int argc, char **argv)
{
    knob_threads = argc > 1 ? argv[1] : NULL;
    const char *what = argc > 2 ? argv[2] : "all";
    if (strcmp(what, "all") == 0 || strcmp(what, "matmul") == 0)
        bench_matmul();
    if (strcmp(what, "all") == 0 || strcmp(what, "moe") == 0)
        bench_moe(argc > 3 ? atoi(argv[3]) : 128);
    return 0;
}
