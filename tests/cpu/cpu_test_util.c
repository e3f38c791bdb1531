/* tests/cpu/cpu_test_util.c — see cpu_test_util.h. */
#include "cpu_test_util.h"

#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant.h"

/* ---- the host table ------------------------------------------------------- */

static void h_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    ct_backend *c = h->core;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_log, sizeof c->last_log, fmt, ap);
    va_end(ap);
    if (level <= SI_LOG_WARN || getenv("CT_VERBOSE") != NULL)
        fprintf(stderr, "[%s] %s\n", who, c->last_log);
}

static void *h_alloc(const si_host *h, size_t n) { (void)h; return malloc(n); }
static void  h_free(const si_host *h, void *p) { (void)h; free(p); }

static const char *h_cfg_get(const si_host *h, const char *section, const char *key)
{
    const ct_backend *c = h->core;
    for (int i = 0; i < c->n_knobs; i++)
        if (strcmp(c->knob_sec[i], section) == 0 && strcmp(c->knob_key[i], key) == 0)
            return c->knob_val[i];
    return NULL;
}

static const char *h_gguf_path(const si_gguf *g) { (void)g; return NULL; }
static const si_gguf_value *h_gguf_get(const si_gguf *g, const char *k) { (void)g; (void)k; return NULL; }
static int h_gguf_arr_get(const si_gguf_value *a, uint64_t i, si_gguf_value *o)
{
    (void)a; (void)i; (void)o;
    return SI_ERANGE;
}
static uint64_t h_gguf_n_tensors(const si_gguf *g) { (void)g; return 0; }
static const si_tensor_info *h_gguf_tensor_at(const si_gguf *g, uint64_t i) { (void)g; (void)i; return NULL; }
static const si_tensor_info *h_gguf_tensor(const si_gguf *g, const char *n) { (void)g; (void)n; return NULL; }

static uint32_t h_blk_elems(uint32_t t) { const si_type_traits *tr = si_type_get(t); return tr ? tr->block_elems : 0; }
static uint32_t h_blk_bytes(uint32_t t) { const si_type_traits *tr = si_type_get(t); return tr ? tr->block_bytes : 0; }

void ct_load(ct_backend *c)
{
    memset(c, 0, sizeof *c);
    const char *top = getenv("SI_TOP_BUILDDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/backends/cpu/.libs/cpu.so", top ? top : ".");
    c->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(c->dl != NULL, "dlopen %s: %s", path, dlerror());
    si_entry_fn entry;
    *(void **)&entry = dlsym(c->dl, SI_ENTRY_SYMBOL);
    ck_assert_msg(entry != NULL, "no %s in %s", SI_ENTRY_SYMBOL, path);
    si_host *h = &c->host;
    h->abi_major = SI_ABI_MAJOR;
    h->abi_minor = SI_ABI_MINOR;
    h->size = sizeof *h;
    h->core = c;
    h->log = h_log;
    h->alloc = h_alloc;
    h->free = h_free;
    h->cfg_get = h_cfg_get;
    h->gguf_path = h_gguf_path;
    h->gguf_get = h_gguf_get;
    h->gguf_arr_get = h_gguf_arr_get;
    h->gguf_n_tensors = h_gguf_n_tensors;
    h->gguf_tensor_at = h_gguf_tensor_at;
    h->gguf_tensor = h_gguf_tensor;
    h->type_block_elems = h_blk_elems;
    h->type_block_bytes = h_blk_bytes;
    h->type_name = si_type_name;
    h->dequant = si_dequant;
    h->quant = si_quant;
    c->plugin = entry(h);
    ck_assert_ptr_nonnull(c->plugin);
    ck_assert_uint_eq(c->plugin->kind, SI_KIND_BACKEND);
    ck_assert_str_eq(c->plugin->name, "cpu");
    c->ops = c->plugin->ops;
}

void ct_knob(ct_backend *c, const char *section, const char *key, const char *value)
{
    ck_assert_int_lt(c->n_knobs, CT_MAX_KNOBS);
    snprintf(c->knob_sec[c->n_knobs], sizeof c->knob_sec[0], "%s", section);
    snprintf(c->knob_key[c->n_knobs], sizeof c->knob_key[0], "%s", key);
    snprintf(c->knob_val[c->n_knobs], sizeof c->knob_val[0], "%s", value);
    c->n_knobs++;
}

int ct_try_open(ct_backend *c, si_err *err)
{
    return c->ops->open(&c->host, "backend.cpu", &c->b, err);
}

void ct_open(ct_backend *c, const char *knobs)
{
    ct_load(c);
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", knobs ? knobs : "");
    for (char *save = NULL, *kv = strtok_r(tmp, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        ck_assert_ptr_nonnull(eq);
        *eq = '\0';
        ct_knob(c, "backend.cpu", kv, eq + 1);
    }
    si_err err = { "" };
    int rc = ct_try_open(c, &err);
    ck_assert_msg(rc == SI_OK, "open: %s", err.msg);
}

void ct_close(ct_backend *c)
{
    for (int i = 0; i < c->n_bufs; i++)
        c->ops->buf_free(c->b, c->bufs[i]);
    c->n_bufs = 0;
    if (c->b != NULL)
        c->ops->close(c->b);
    c->b = NULL;
    for (int i = 0; i < c->n_blobs; i++)
        free(c->blobs[i]);
    c->n_blobs = 0;
    if (c->dl != NULL)
        dlclose(c->dl);
    c->dl = NULL;
}

/* ---- random ---------------------------------------------------------------- */

static uint64_t rng_state;

uint64_t ct_seed(void)
{
    static uint64_t seed;
    if (seed == 0) {
        const char *s = getenv("SI_TEST_SEED");
        seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
        if (seed == 0)
            seed = 1;
        fprintf(stderr, "cpu tests: SI_TEST_SEED=%llu\n", (unsigned long long)seed);
        rng_state = seed;
    }
    return seed;
}

static uint64_t rng_next(void)
{
    ct_seed();
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ct_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next() >> 11) / 9007199254740992.0);
}

void ct_fill(float *x, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)ct_uniform(lo, hi);
}

/* ---- tensors ------------------------------------------------------------- */

static si_buf *new_buf(ct_backend *c, uint64_t bytes)
{
    si_buf *buf = NULL;
    si_err err = { "" };
    int rc = c->ops->buf_alloc(c->b, bytes, &buf, &err);
    ck_assert_msg(rc == SI_OK, "buf_alloc: %s", err.msg);
    ck_assert_int_lt(c->n_bufs, (int)(sizeof c->bufs / sizeof c->bufs[0]));
    c->bufs[c->n_bufs++] = buf;
    return buf;
}

si_tensor ct_f32(ct_backend *c, const float *data, int64_t ne0, int64_t ne1, int64_t stride)
{
    if (stride == 0)
        stride = ne0;
    si_tensor t = { 0 };
    t.type = SI_TYPE_F32;
    t.ndim = 2;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = t.ne[3] = 1;
    t.nb[0] = sizeof(float);
    t.nb[1] = (uint64_t)stride * sizeof(float);
    t.nb[2] = t.nb[3] = t.nb[1] * (uint64_t)ne1;
    /* A leading pad makes offsets non-zero, as for views into a big buffer. */
    t.offset = 64;
    uint64_t bytes = t.offset + t.nb[2] + 64;
    t.buf = new_buf(c, bytes);
    float *tmp = malloc(bytes);
    ck_assert_ptr_nonnull(tmp);
    for (uint64_t i = 0; i < bytes / sizeof(float); i++)
        tmp[i] = NAN;
    if (data != NULL)
        for (int64_t r = 0; r < ne1; r++)
            memcpy((uint8_t *)tmp + t.offset + (uint64_t)r * t.nb[1], data + r * ne0, (size_t)ne0 * sizeof(float));
    si_err err = { "" };
    ck_assert_msg(c->ops->upload(c->b, t.buf, 0, tmp, bytes, &err) == SI_OK, "upload: %s", err.msg);
    free(tmp);
    return t;
}

void ct_poison(ct_backend *c, const si_tensor *t)
{
    uint64_t bytes = t->nb[1] * (uint64_t)t->ne[1];
    float *tmp = malloc(bytes);
    ck_assert_ptr_nonnull(tmp);
    for (uint64_t i = 0; i < bytes / sizeof(float); i++)
        tmp[i] = NAN;
    si_err err = { "" };
    ck_assert_msg(c->ops->upload(c->b, t->buf, t->offset, tmp, bytes, &err) == SI_OK, "poison: %s", err.msg);
    free(tmp);
}

void ct_get(ct_backend *c, const si_tensor *t, float *out)
{
    si_err err = { "" };
    for (int64_t r = 0; r < t->ne[1]; r++)
        ck_assert_msg(c->ops->download(c->b, out + r * t->ne[0], t->buf, t->offset + (uint64_t)r * t->nb[1],
                                       (uint64_t)t->ne[0] * sizeof(float), &err) == SI_OK,
                      "download: %s", err.msg);
}

si_tensor ct_i32(ct_backend *c, const int32_t *ids, int64_t n)
{
    si_tensor t = { 0 };
    t.type = SI_TYPE_I32;
    t.ndim = 1;
    t.ne[0] = n;
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 4;
    t.nb[1] = t.nb[2] = t.nb[3] = (uint64_t)n * 4;
    t.buf = new_buf(c, (uint64_t)n * 4);
    si_err err = { "" };
    ck_assert(c->ops->upload(c->b, t.buf, 0, ids, (uint64_t)n * 4, &err) == SI_OK);
    return t;
}

static void wr_f16(uint8_t *p, float v)
{
    uint16_t h = si_f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random but valid blocks for types the core cannot quantise: random
 * bits everywhere, then sane f16 scales where the format keeps them. */
static void random_blocks(uint32_t type, uint8_t *dst, uint64_t nblocks, uint32_t bbytes)
{
    for (uint64_t i = 0; i < nblocks * bbytes; i++)
        dst[i] = (uint8_t)(ct_uniform(0, 256));
    for (uint64_t b = 0; b < nblocks; b++) {
        uint8_t *x = dst + b * bbytes;
        switch (type) {
        case SI_TYPE_Q2_K: wr_f16(x + 80, (float)ct_uniform(0.002, 0.02)); wr_f16(x + 82, (float)ct_uniform(0.0, 0.01)); break;
        case SI_TYPE_Q3_K: wr_f16(x + 108, (float)ct_uniform(0.002, 0.02)); break;
        case SI_TYPE_IQ4_NL: wr_f16(x, (float)ct_uniform(0.001, 0.01)); break;
        case SI_TYPE_IQ4_XS: wr_f16(x, (float)ct_uniform(0.0002, 0.001)); break;
        default: ck_abort_msg("no random block recipe for type %u", type);
        }
    }
}

uint8_t *ct_wbytes(uint32_t type, const float *src, int64_t n, float *deq)
{
    const si_type_traits *tr = si_type_get(type);
    ck_assert_ptr_nonnull(tr);
    uint64_t bytes = si_type_row_bytes(type, n);
    ck_assert_uint_gt(bytes, 0);
    uint8_t *data = malloc(bytes);
    ck_assert_ptr_nonnull(data);
    si_err err = { "" };
    if (tr->has_quant)
        ck_assert_msg(si_quant(type, src, data, n, &err) == SI_OK, "si_quant %s: %s", tr->name, err.msg);
    else
        random_blocks(type, data, (uint64_t)n / tr->block_elems, tr->block_bytes);
    if (deq != NULL)
        ck_assert_msg(si_dequant(type, data, deq, n, &err) == SI_OK, "si_dequant %s: %s", tr->name, err.msg);
    return data;
}

si_tensor ct_wload(ct_backend *c, uint32_t type, const uint8_t *bytes, int64_t ne0, int64_t ne1, int64_t ne2)
{
    si_tensor_info ti = { .name = "test.weight", .type = type, .ndim = ne2 > 1 ? 3 : 2,
                          .ne = { ne0, ne1, ne2, 1 },
                          .nbytes = si_type_row_bytes(type, ne0) * (uint64_t)(ne1 * ne2), .data = bytes };
    si_tensor t;
    si_err err = { "" };
    int rc = c->ops->weight_load(c->b, &ti, &t, &err);
    ck_assert_msg(rc == SI_OK, "weight_load %s: %s", si_type_name(type), err.msg);
    ck_assert_int_lt(c->n_bufs, (int)(sizeof c->bufs / sizeof c->bufs[0]));
    c->bufs[c->n_bufs++] = t.buf;
    return t;
}

si_tensor ct_wupload(ct_backend *c, uint32_t type, const uint8_t *bytes, int64_t ne0, int64_t ne1, uint64_t row_pad)
{
    const si_type_traits *tr = si_type_get(type);
    uint64_t row = si_type_row_bytes(type, ne0), stride = row + row_pad;
    si_tensor t = { 0 };
    t.type = type;
    t.ndim = 2;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = t.ne[3] = 1;
    t.nb[0] = tr->block_bytes;
    t.nb[1] = stride;
    t.nb[2] = t.nb[3] = stride * (uint64_t)ne1;
    t.offset = 128;
    t.buf = new_buf(c, t.offset + t.nb[2]);
    si_err err = { "" };
    for (int64_t r = 0; r < ne1; r++)
        ck_assert(c->ops->upload(c->b, t.buf, t.offset + (uint64_t)r * stride, bytes + (uint64_t)r * row, row, &err) == SI_OK);
    return t;
}

si_tensor ct_weight(ct_backend *c, uint32_t type, const float *src, int64_t ne0, int64_t ne1, int64_t ne2, float *deq)
{
    uint8_t *bytes = ct_wbytes(type, src, ne0 * ne1 * ne2, deq);
    ck_assert_int_lt(c->n_blobs, (int)(sizeof c->blobs / sizeof c->blobs[0]));
    c->blobs[c->n_blobs++] = bytes;
    return ct_wload(c, type, bytes, ne0, ne1, ne2);
}

int ct_exec(ct_backend *c, const si_op *op, si_err *err)
{
    return c->ops->exec(c->b, op, 1, err);
}

void ct_expect_close(const char *what, const float *got, const double *want, const double *tol, int64_t n,
                     double atol, double rtol)
{
    int64_t worst = -1;
    double worst_ex = 0.0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double t = tol ? tol[i] : atol + rtol * fabs(want[i]);
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= t)) {   /* NaN fails here */
            bad++;
            double ex = isnan(e) ? INFINITY : e / (t > 0 ? t : 1e-300);
            if (worst < 0 || ex > worst_ex) {
                worst = i;
                worst_ex = ex;
            }
        }
    }
    ck_assert_msg(bad == 0, "%s: %lld of %lld values out of tolerance; worst [%lld] got %.9g want %.9g tol %.3g (seed %llu)",
                  what, (long long)bad, (long long)n, (long long)worst, (double)got[worst], want[worst],
                  tol ? tol[worst] : atol + rtol * fabs(want[worst]), (unsigned long long)ct_seed());
}
