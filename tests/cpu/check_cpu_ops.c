/* tests/cpu/check_cpu_ops.c — the cpu backend plugin: descriptor, knobs,
 * buffers, zero-copy weights, supports(), MATMUL for every weight type
 * (fast int8 path, portable kernels, f32 reference path), GET_ROWS,
 * RMSNORM, ADD, MUL, SWIGLU.  Expected values are naive double sums over
 * the core's dequantised weights; outputs are NaN-poisoned before each run.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_test_util.h"
#include "quant.h"

/* ---- descriptor, knobs ---------------------------------------------------- */

START_TEST(test_descriptor)
{
    ct_backend c;
    ct_load(&c);
    ck_assert_uint_eq(c.plugin->abi_major, SI_ABI_MAJOR);
    ck_assert_ptr_nonnull(c.plugin->description);
    si_err err = { "" };
    ck_assert(c.plugin->probe == NULL || c.plugin->probe(&c.host, &err) == SI_OK);
    ck_assert_uint_ge(c.ops->size, sizeof(struct si_backend_ops));
    /* Refuses a host of another major. */
    si_host other = c.host;
    other.abi_major = SI_ABI_MAJOR + 1;
    si_entry_fn entry;
    *(void **)&entry = dlsym(c.dl, SI_ENTRY_SYMBOL);
    ck_assert_ptr_null(entry(&other));
    /* A host table too short for the services the plugin uses. */
    si_host small = c.host;
    small.size = 24;
    si_backend *be = NULL;
    ck_assert_int_eq(c.ops->open(&small, "backend.cpu", &be, &err), SI_EABI);
    ct_close(&c);
}
END_TEST

START_TEST(test_knobs)
{
    static const char *bad[][2] = {
        { "matmul", "fastest" }, { "moe", "grouped " }, { "kv_type", "q8_0" },
        { "threads", "-1" },     { "threads", "many" }, { "simd", "avx9" },
        { "packed", "yes" },
        { "kv_type", "int8" },   /* no int8 cache here: strict in the own section */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_backend c;
        ct_load(&c);
        ct_knob(&c, "backend.cpu", bad[i][0], bad[i][1]);
        si_err err = { "" };
        ck_assert_int_eq(ct_try_open(&c, &err), SI_EINVAL);
        ck_assert_msg(strstr(err.msg, bad[i][0]) && strstr(err.msg, bad[i][1]), "message '%s'", err.msg);
        ct_close(&c);
    }
    /* threads falls back to [runtime]; the backend's own key wins. */
    ct_backend c;
    ct_load(&c);
    ct_knob(&c, "runtime", "threads", "3");
    si_err err = { "" };
    ck_assert_int_eq(ct_try_open(&c, &err), SI_OK);
    ck_assert_msg(strstr(c.last_log, "3 threads") != NULL, "log '%s'", c.last_log);
    ct_close(&c);
    ct_load(&c);
    ct_knob(&c, "runtime", "threads", "3");
    ct_knob(&c, "backend.cpu", "threads", "2");
    ct_knob(&c, "backend.cpu", "matmul", "ref");
    ck_assert_int_eq(ct_try_open(&c, &err), SI_OK);
    ck_assert_msg(strstr(c.last_log, "2 threads, matmul ref") != NULL, "log '%s'", c.last_log);
    ct_close(&c);
}
END_TEST

/* kv_type: the own section, else [runtime] kv_type (auto = f32 here; int8,
 * which the cpu lacks, becomes f16 with a warning), else f32. */
START_TEST(test_kv_type_knob)
{
    static const char *cases[][3] = {   /* runtime, backend.cpu, expected kv */
        { NULL, NULL, "kv f32" },      { "auto", NULL, "kv f32" },  { "f16", NULL, "kv f16" },
        { "f32", NULL, "kv f32" },     { "int8", NULL, "kv f16" },  { "f16", "f32", "kv f32" },
        { "int8", "f32", "kv f32" },   { "auto", "f16", "kv f16" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_backend c;
        ct_load(&c);
        if (cases[i][0] != NULL)
            ct_knob(&c, "runtime", "kv_type", cases[i][0]);
        if (cases[i][1] != NULL)
            ct_knob(&c, "backend.cpu", "kv_type", cases[i][1]);
        si_err err = { "" };
        ck_assert_int_eq(ct_try_open(&c, &err), SI_OK);
        ck_assert_msg(strstr(c.last_log, cases[i][2]) != NULL, "case %zu: log '%s'", i, c.last_log);
        ct_close(&c);
    }
}
END_TEST

/* ---- buffers and weights ------------------------------------------------ */

START_TEST(test_buffers)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    si_buf *buf = NULL;
    si_err err = { "" };
    ck_assert_int_eq(c.ops->buf_alloc(c.b, 1000, &buf, &err), SI_OK);
    uint8_t in[1000], out[1000];
    for (int i = 0; i < 1000; i++)
        in[i] = (uint8_t)(i * 7);
    ck_assert_int_eq(c.ops->upload(c.b, buf, 0, in, 1000, &err), SI_OK);
    memset(out, 0, sizeof out);
    ck_assert_int_eq(c.ops->download(c.b, out, buf, 10, 990, &err), SI_OK);
    ck_assert(memcmp(out, in + 10, 990) == 0);
    ck_assert_int_eq(c.ops->upload(c.b, buf, 999, in, 2, &err), SI_ERANGE);
    ck_assert_int_eq(c.ops->download(c.b, out, buf, 1001, 0, &err), SI_ERANGE);
    ck_assert_int_eq(c.ops->download(c.b, out, buf, UINT64_MAX, 2, &err), SI_ERANGE);
    c.ops->buf_free(c.b, buf);
    c.ops->buf_free(c.b, NULL);
    c.ops->kv_free(c.b, NULL);
    ct_close(&c);
}
END_TEST

/* weight_load keeps a pointer to the GGUF bytes: no copy is made, so a
 * change of the bytes shows in the next op; the view refuses upload. */
START_TEST(test_weight_zero_copy)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    float table[4 * 32];
    ct_fill(table, 4 * 32, -1, 1);
    uint8_t *bytes = ct_wbytes(SI_TYPE_F32, table, 4 * 32, NULL);
    si_tensor w = ct_wload(&c, SI_TYPE_F32, bytes, 32, 4, 1);
    ck_assert_uint_eq(w.nb[0], 4);
    ck_assert_uint_eq(w.nb[1], 128);
    int32_t ids[1] = { 2 };
    si_tensor id = ct_i32(&c, ids, 1);
    si_tensor dst = ct_f32(&c, NULL, 32, 1, 0);
    si_op op = { .kind = SI_OP_GET_ROWS, .dst = dst, .src = { &w, &id } };
    si_err err = { "" };
    float got[32];
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_OK);
    ct_get(&c, &dst, got);
    ck_assert(memcmp(got, table + 64, sizeof got) == 0);
    ((float *)bytes)[64] = 12345.0f;
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_OK);
    ct_get(&c, &dst, got);
    ck_assert_float_eq(got[0], 12345.0f);
    ck_assert_int_eq(c.ops->upload(c.b, w.buf, 0, table, 4, &err), SI_EINVAL);
    /* Bad weights are refused with the tensor's name. */
    si_tensor_info ti = { .name = "blk.0.bad", .type = SI_TYPE_Q4_K, .ndim = 2, .ne = { 100, 2, 1, 1 },
                          .nbytes = 288, .data = bytes };
    si_tensor t;
    ck_assert_int_eq(c.ops->weight_load(c.b, &ti, &t, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "blk.0.bad") != NULL, "%s", err.msg);
    ti.type = SI_TYPE_IQ2_XXS;
    ti.ne[0] = 256;
    ck_assert_int_eq(c.ops->weight_load(c.b, &ti, &t, &err), SI_EUNSUPPORTED);
    ti.type = SI_TYPE_F32;
    ti.ne[0] = 32;
    ti.nbytes = 100;
    ck_assert_int_eq(c.ops->weight_load(c.b, &ti, &t, &err), SI_EINVAL);
    ct_close(&c);
    free(bytes);
}
END_TEST

/* ---- MATMUL --------------------------------------------------------------- */

static const uint32_t mm_types[] = {
    SI_TYPE_F32,  SI_TYPE_F16,  SI_TYPE_BF16, SI_TYPE_Q4_0, SI_TYPE_Q4_1,   SI_TYPE_Q5_0,  SI_TYPE_Q5_1, SI_TYPE_Q8_0,
    SI_TYPE_Q2_K, SI_TYPE_Q3_K, SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_IQ4_NL, SI_TYPE_IQ4_XS,
};
#define N_MM_TYPES (int)(sizeof mm_types / sizeof mm_types[0])

/* Types whose fast path quantises the activations to int8 blocks of 32. */
static bool int8_path(uint32_t t)
{
    return t == SI_TYPE_Q4_0 || t == SI_TYPE_Q4_1 || t == SI_TYPE_Q5_0 || t == SI_TYPE_Q5_1 || t == SI_TYPE_Q8_0 ||
           t == SI_TYPE_Q4_K || t == SI_TYPE_Q5_K || t == SI_TYPE_Q6_K;
}

/* want[j][r] = sum_i w[r][i] x[j][i] in double, and the tolerance: for the
 * int8 path the rounding of x to steps of amax/127 moves each product by
 * at most |w| * amax/254 (summed per block), plus float rounding. */
static void mm_reference(const float *w, const float *x, int64_t in, int64_t out, int64_t n, bool q8, bool ref,
                         double *want, double *tol)
{
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < out; r++) {
            double s = 0.0, mag = 0.0, qerr = 0.0;
            for (int64_t b = 0; b < in; b += 32) {
                double amax = 0.0, wsum = 0.0;
                for (int64_t i = b; i < b + 32 && i < in; i++) {
                    double wv = w[r * in + i], xv = x[j * in + i];
                    s += wv * xv;
                    mag += fabs(wv * xv);
                    amax = fabs(xv) > amax ? fabs(xv) : amax;
                    wsum += fabs(wv);
                }
                qerr += wsum * amax / 254.0;
            }
            want[j * out + r] = s;
            tol[j * out + r] = (ref ? 1e-6 : 2e-5) * mag + (q8 && !ref ? 1.001 * qerr : 0.0) + 1e-30;
        }
}

/* Activations the int8 path represents exactly: per block of 32 a power of
 * two step and integers in [-127, 127] with one of them +-127, so the
 * block scale amax/127 is the step itself.  With these the fast path must
 * match the double reference to float rounding: no decode error hides
 * behind the activation-rounding tolerance. */
static void exact_q8_rows(float *x, int64_t in, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        for (int64_t b = 0; b < in; b += 32) {
            float step = ldexpf(1.0f, -(int)ct_uniform(0, 12));
            int64_t top = b + (int64_t)ct_uniform(0, 32);
            for (int64_t i = b; i < b + 32 && i < in; i++) {
                int k = i == top ? (ct_uniform(0, 1) < 0.5 ? -127 : 127) : (int)floor(ct_uniform(-127, 128));
                x[j * in + i] = (float)k * step;
            }
        }
}

static void matmul_case(uint32_t type, const char *knobs, int64_t in, int64_t out, int64_t n, bool strided)
{
    ct_backend c;
    char kn[128];
    snprintf(kn, sizeof kn, "%s", knobs);
    char *ex = strstr(kn, ",exact");
    if (ex != NULL)
        *ex = '\0';
    ct_open(&c, kn);
    const bool ref = strstr(knobs, "matmul=ref") != NULL;
    float *wsrc = malloc(sizeof(float) * (size_t)(in * out)), *wdeq = malloc(sizeof(float) * (size_t)(in * out));
    float *x = malloc(sizeof(float) * (size_t)(in * n)), *got = malloc(sizeof(float) * (size_t)(out * n));
    double *want = malloc(sizeof(double) * (size_t)(out * n)), *tol = malloc(sizeof(double) * (size_t)(out * n));
    ck_assert(wsrc && wdeq && x && got && want && tol);
    ct_fill(wsrc, in * out, -1, 1);
    const bool exact = strstr(knobs, "exact") != NULL;
    if (exact) {
        exact_q8_rows(x, in, n);
    } else {
        ct_fill(x, in * n, -1, 1);
        /* Rows of very different magnitudes, as in real activations. */
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < in; i++)
                x[j * in + i] *= (float)(j % 3 == 0 ? 1.0 : j % 3 == 1 ? 1e-3 : 50.0);
    }
    uint8_t *bytes = ct_wbytes(type, wsrc, in * out, wdeq);
    si_tensor w = strided ? ct_wupload(&c, type, bytes, in, out, 64) : ct_wload(&c, type, bytes, in, out, 1);
    si_tensor xt = ct_f32(&c, x, in, n, strided ? in + 8 : 0);
    si_tensor dst = ct_f32(&c, NULL, out, n, strided ? out + 3 : 0);
    si_op op = { .kind = SI_OP_MATMUL, .dst = dst, .src = { &w, &xt } };
    ck_assert(c.ops->supports(c.b, &op));
    si_err err = { "" };
    ct_poison(&c, &dst);
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    ct_get(&c, &dst, got);
    mm_reference(wdeq, x, in, out, n, int8_path(type) && !exact, ref, want, tol);
    char what[128];
    snprintf(what, sizeof what, "MATMUL %s [%lld x %lld] n=%lld %s%s", si_type_name(type), (long long)in,
             (long long)out, (long long)n, knobs, strided ? " strided" : "");
    ct_expect_close(what, got, want, tol, out * n, 0, 0);
    ct_close(&c);
    free(bytes);
    free(wsrc);
    free(wdeq);
    free(x);
    free(got);
    free(want);
    free(tol);
}

START_TEST(test_matmul_fast)
{
    uint32_t t = mm_types[_i];
    matmul_case(t, "threads=3", 512, 37, 1, false);
    matmul_case(t, "threads=3", 512, 37, 5, true);
    matmul_case(t, "threads=2", 256, 19, 67, false);
    matmul_case(t, "threads=3,exact", 512, 29, 1, false);
    matmul_case(t, "threads=2,exact", 256, 17, 70, true);
}
END_TEST

START_TEST(test_matmul_portable)
{
    uint32_t t = mm_types[_i];
    matmul_case(t, "threads=2,simd=off", 512, 21, 3, false);
    matmul_case(t, "threads=1,simd=off", 256, 9, 66, true);
    matmul_case(t, "threads=2,simd=off,exact", 512, 21, 3, true);
}
END_TEST

START_TEST(test_matmul_ref)
{
    uint32_t t = mm_types[_i];
    matmul_case(t, "threads=3,matmul=ref", 512, 23, 4, true);
    matmul_case(t, "threads=1,matmul=ref", 256, 7, 1, false);
}
END_TEST

/* F32 weights take any ne0; the int8 path its block multiple only. */
START_TEST(test_matmul_odd_width)
{
    matmul_case(SI_TYPE_F32, "threads=2", 45, 13, 7, true);
    matmul_case(SI_TYPE_F16, "threads=2", 33, 5, 2, false);
    matmul_case(SI_TYPE_Q8_0, "threads=2", 96, 17, 3, true);
}
END_TEST

/* A token's result does not depend on the batch it came in (same kernels,
 * same order): n = 9 in one op equals nine ops of one token, bit for bit.
 * One token reads the packed rows (cpu_dot_packed: Q4_K, Q5_K, Q6_K, Q8_0,
 * with AVX2), nine the decoded ones: the same bits too.  Q8_0 also at an
 * odd number of blocks (96: the last block's own step). */
START_TEST(test_matmul_batch_invariant)
{
    static const uint32_t types[] = { SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K, SI_TYPE_Q8_0,
                                      SI_TYPE_F16,  SI_TYPE_IQ4_XS, SI_TYPE_Q8_0 };
    const size_t nt = sizeof types / sizeof types[0];
    for (size_t k = 0; k < nt; k++) {
        ct_backend c;
        ct_open(&c, "threads=3");
        const int64_t in = k == nt - 1 ? 96 : 512, out = 13, n = 9;
        float wsrc[512 * 13], x[512 * 9], all[13 * 9], one[13];
        ct_fill(wsrc, in * out, -1, 1);
        ct_fill(x, in * n, -1, 1);
        si_tensor w = ct_weight(&c, types[k], wsrc, in, out, 1, NULL);
        si_tensor xt = ct_f32(&c, x, in, n, 0), dst = ct_f32(&c, NULL, out, n, 0);
        si_op op = { .kind = SI_OP_MATMUL, .dst = dst, .src = { &w, &xt } };
        si_err err = { "" };
        ck_assert_int_eq(ct_exec(&c, &op, &err), SI_OK);
        ct_get(&c, &dst, all);
        for (int64_t j = 0; j < n; j++) {
            si_tensor x1 = ct_f32(&c, x + j * in, in, 1, 0), d1 = ct_f32(&c, NULL, out, 1, 0);
            si_op o1 = { .kind = SI_OP_MATMUL, .dst = d1, .src = { &w, &x1 } };
            ck_assert_int_eq(ct_exec(&c, &o1, &err), SI_OK);
            ct_get(&c, &d1, one);
            ck_assert_msg(memcmp(one, all + j * out, sizeof one) == 0, "%s: token %lld differs alone",
                          si_type_name(types[k]), (long long)j);
        }
        ct_close(&c);
    }
}
END_TEST

/* A NaN in one token's input reaches all of that token's outputs only. */
START_TEST(test_matmul_nan)
{
    static const uint32_t types[] = { SI_TYPE_Q4_K, SI_TYPE_Q8_0, SI_TYPE_F16, SI_TYPE_Q3_K };
    for (size_t k = 0; k < 4; k++) {
        ct_backend c;
        ct_open(&c, "threads=2");
        const int64_t in = 256, out = 8, n = 3;
        float wsrc[256 * 8], x[256 * 3], got[8 * 3];
        ct_fill(wsrc, in * out, -1, 1);
        ct_fill(x, in * n, -1, 1);
        x[in + 77] = NAN;
        si_tensor w = ct_weight(&c, types[k], wsrc, in, out, 1, NULL);
        si_tensor xt = ct_f32(&c, x, in, n, 0), dst = ct_f32(&c, NULL, out, n, 0);
        si_op op = { .kind = SI_OP_MATMUL, .dst = dst, .src = { &w, &xt } };
        si_err err = { "" };
        ck_assert_int_eq(ct_exec(&c, &op, &err), SI_OK);
        ct_get(&c, &dst, got);
        for (int64_t r = 0; r < out; r++) {
            ck_assert_msg(isfinite(got[r]) && isfinite(got[2 * out + r]), "%s", si_type_name(types[k]));
            ck_assert_msg(isnan(got[out + r]), "%s: NaN input gave %g", si_type_name(types[k]), got[out + r]);
        }
        ct_close(&c);
    }
}
END_TEST

/* ---- supports() and refusals ---------------------------------------------- */

START_TEST(test_supports)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    float wsrc[256 * 4], x[256 * 2];
    ct_fill(wsrc, 256 * 4, -1, 1);
    ct_fill(x, 256 * 2, -1, 1);
    si_tensor w = ct_weight(&c, SI_TYPE_Q4_K, wsrc, 256, 4, 1, NULL);
    si_tensor xt = ct_f32(&c, x, 256, 2, 0), dst = ct_f32(&c, NULL, 4, 2, 0);
    si_op op = { .kind = SI_OP_MATMUL, .dst = dst, .src = { &w, &xt } };
    si_err err = { "" };
    ck_assert(c.ops->supports(c.b, &op));

    si_op bad = op;                              /* an unsupported weight type */
    si_tensor w2 = w;
    w2.type = SI_TYPE_IQ2_XXS;
    w2.nb[0] = 66;
    bad.src[0] = &w2;
    ck_assert(!c.ops->supports(c.b, &bad));
    ck_assert_int_eq(ct_exec(&c, &bad, &err), SI_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "MATMUL") && strstr(err.msg, "iq2_xxs"), "%s", err.msg);

    si_tensor x2 = xt;                           /* F16 activations */
    x2.type = SI_TYPE_F16;
    x2.nb[0] = 2;
    bad = op;
    bad.src[1] = &x2;
    ck_assert(!c.ops->supports(c.b, &bad));
    ck_assert_int_eq(ct_exec(&c, &bad, &err), SI_EUNSUPPORTED);

    si_tensor d2 = dst;                          /* wrong dst shape */
    d2.ne[0] = 5;
    bad = op;
    bad.dst = d2;
    ck_assert(!c.ops->supports(c.b, &bad));
    ck_assert_int_eq(ct_exec(&c, &bad, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "MATMUL") && strstr(err.msg, "dst"), "%s", err.msg);

    si_tensor x3 = xt;                           /* beyond its buffer */
    x3.ne[1] = 200;
    d2 = dst;
    d2.ne[1] = 200;
    bad = op;
    bad.src[1] = &x3;
    ck_assert(!c.ops->supports(c.b, &bad));

    si_tensor w3 = w;                            /* 3-D weight */
    w3.ndim = 3;
    w3.ne[1] = 2;
    w3.ne[2] = 2;
    w3.nb[2] = 2 * w.nb[1];
    bad = op;
    bad.src[0] = &w3;
    ck_assert(!c.ops->supports(c.b, &bad));

    bad = op;                                    /* missing source */
    bad.src[1] = NULL;
    ck_assert(!c.ops->supports(c.b, &bad));
    ck_assert_int_eq(ct_exec(&c, &bad, &err), SI_EINVAL);

    bad = op;                                    /* unknown op kinds */
    bad.kind = SI_OP_KIND_COUNT;
    ck_assert(!c.ops->supports(c.b, &bad));
    ck_assert_int_eq(ct_exec(&c, &bad, &err), SI_EUNSUPPORTED);
    bad.kind = SI_OP_NONE;
    ck_assert(!c.ops->supports(c.b, &bad));

    si_op rms = { .kind = SI_OP_RMSNORM, .dst = dst, .src = { &dst, &xt }, .p.norm.eps = 1e-6f };
    ck_assert(!c.ops->supports(c.b, &rms));   /* weight length != ne0 */
    ct_close(&c);
}
END_TEST

/* ---- elementwise ----------------------------------------------------------- */

static double silu_d(double v) { return v / (1.0 + exp(-v)); }

static void elem_case(uint32_t kind, bool in_place)
{
    ct_backend c;
    ct_open(&c, "threads=3");
    const int64_t ne0 = 300, ne1 = 77;   /* 23100 values: a parallel run */
    float *a = malloc(sizeof(float) * ne0 * ne1), *bv = malloc(sizeof(float) * ne0 * ne1);
    float *got = malloc(sizeof(float) * ne0 * ne1);
    double *want = malloc(sizeof(double) * ne0 * ne1);
    ck_assert(a && bv && got && want);
    ct_fill(a, ne0 * ne1, -8, 8);
    ct_fill(bv, ne0 * ne1, -3, 3);
    si_tensor ta = ct_f32(&c, a, ne0, ne1, ne0 + 5);
    si_tensor tb = kind == SI_OP_RMSNORM ? ct_f32(&c, bv, ne0, 1, 0) : ct_f32(&c, bv, ne0, ne1, 0);
    si_tensor td = in_place ? ta : ct_f32(&c, NULL, ne0, ne1, ne0 + 1);
    si_op op = { .kind = kind, .dst = td, .src = { &ta, &tb }, .p.norm.eps = 1e-5f };
    if (!in_place)
        ct_poison(&c, &td);
    si_err err = { "" };
    ck_assert(c.ops->supports(c.b, &op));
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    ct_get(&c, &td, got);
    for (int64_t r = 0; r < ne1; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < ne0; i++)
            ss += (double)a[r * ne0 + i] * a[r * ne0 + i];
        for (int64_t i = 0; i < ne0; i++) {
            double x = a[r * ne0 + i], y = bv[(kind == SI_OP_RMSNORM ? 0 : r) * ne0 + i], v;
            switch (kind) {
            case SI_OP_RMSNORM: v = x / sqrt(ss / ne0 + 1e-5) * y; break;
            case SI_OP_ADD: v = x + y; break;
            case SI_OP_MUL: v = x * y; break;
            default: v = silu_d(x) * y; break;
            }
            want[r * ne0 + i] = v;
        }
    }
    ct_expect_close("elementwise", got, want, NULL, ne0 * ne1, 1e-6, 2e-6);
    ct_close(&c);
    free(a);
    free(bv);
    free(got);
    free(want);
}

START_TEST(test_elementwise)
{
    static const uint32_t kinds[] = { SI_OP_RMSNORM, SI_OP_ADD, SI_OP_MUL, SI_OP_SWIGLU };
    for (int k = 0; k < 4; k++) {
        elem_case(kinds[k], false);
        elem_case(kinds[k], true);
    }
}
END_TEST

/* RMSNORM over rows of a 3-D tensor (e.g. per-head norms). */
START_TEST(test_rmsnorm_3d)
{
    ct_backend c;
    ct_open(&c, "threads=2");
    float x[16 * 3 * 5], w[16], got[16 * 15];
    double want[16 * 15];
    ct_fill(x, 240, -2, 2);
    ct_fill(w, 16, 0.5, 1.5);
    si_tensor tx = ct_f32(&c, x, 16, 15, 0), tw = ct_f32(&c, w, 16, 1, 0), td = ct_f32(&c, NULL, 16, 15, 0);
    tx.ndim = td.ndim = 3;
    tx.ne[1] = td.ne[1] = 3;
    tx.ne[2] = td.ne[2] = 5;
    tx.nb[2] = td.nb[2] = 3 * tx.nb[1];
    si_op op = { .kind = SI_OP_RMSNORM, .dst = td, .src = { &tx, &tw }, .p.norm.eps = 1e-6f };
    si_err err = { "" };
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    td.ndim = 2;
    td.ne[1] = 15;
    td.ne[2] = 1;
    ct_get(&c, &td, got);
    for (int r = 0; r < 15; r++) {
        double ss = 0;
        for (int i = 0; i < 16; i++)
            ss += (double)x[r * 16 + i] * x[r * 16 + i];
        for (int i = 0; i < 16; i++)
            want[r * 16 + i] = x[r * 16 + i] / sqrt(ss / 16 + 1e-6) * w[i];
    }
    ct_expect_close("rmsnorm 3-D", got, want, NULL, 240, 1e-6, 2e-6);
    ct_close(&c);
}
END_TEST

START_TEST(test_get_rows)
{
    uint32_t type = mm_types[_i];
    ct_backend c;
    ct_open(&c, "threads=2");
    const int64_t H = 256, V = 11, n = 6;
    float src[256 * 11], deq[256 * 11], got[256 * 6];
    double want[256 * 6];
    ct_fill(src, H * V, -2, 2);
    si_tensor w = ct_weight(&c, type, src, H, V, 1, deq);
    int32_t ids[6] = { 3, 0, 10, 3, 7, 10 };
    si_tensor ti = ct_i32(&c, ids, n), dst = ct_f32(&c, NULL, H, n, H + 4);
    si_op op = { .kind = SI_OP_GET_ROWS, .dst = dst, .src = { &w, &ti } };
    si_err err = { "" };
    ck_assert(c.ops->supports(c.b, &op));
    ct_poison(&c, &dst);
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    ct_get(&c, &dst, got);
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < H; i++)
            want[j * H + i] = deq[ids[j] * H + i];
    ct_expect_close(si_type_name(type), got, want, NULL, H * n, 0, 1e-6);
    /* Strided ids (ABI 1.3: a column of a table, as TOPK's best ids are
     * read): every third of 16 words, the same rows; a stride that is not
     * a multiple of 4, or that runs past the buffer, is refused. */
    int32_t col[16];
    for (int i = 0; i < 16; i++)
        col[i] = -1;
    for (int64_t j = 0; j < n; j++)
        col[3 * j] = ids[j];
    si_tensor tcol = ct_i32(&c, col, 16);
    tcol.ne[0] = n;
    tcol.nb[0] = 3 * sizeof(int32_t);
    op.src[1] = &tcol;
    ck_assert(c.ops->supports(c.b, &op));
    ct_poison(&c, &dst);
    ck_assert_msg(ct_exec(&c, &op, &err) == SI_OK, "%s", err.msg);
    ct_get(&c, &dst, got);
    ct_expect_close("strided ids", got, want, NULL, H * n, 0, 1e-6);
    tcol.nb[0] = 6;
    ck_assert(!c.ops->supports(c.b, &op));
    tcol.nb[0] = 4 * sizeof(int32_t);   /* 5 * 16 bytes + 4 > 64 */
    ck_assert(!c.ops->supports(c.b, &op));
    op.src[1] = &ti;
    ids[4] = 11;
    si_tensor bad_ids = ct_i32(&c, ids, n);
    op.src[1] = &bad_ids;
    ck_assert_int_eq(ct_exec(&c, &op, &err), SI_ERANGE);
    ck_assert_msg(strstr(err.msg, "GET_ROWS") && strstr(err.msg, "11"), "%s", err.msg);
    ct_close(&c);
}
END_TEST

static Suite *cpu_ops_suite(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("plugin");
    tcase_add_test(tc, test_descriptor);
    tcase_add_test(tc, test_knobs);
    tcase_add_test(tc, test_kv_type_knob);
    tcase_add_test(tc, test_buffers);
    tcase_add_test(tc, test_weight_zero_copy);
    tcase_add_test(tc, test_supports);
    suite_add_tcase(s, tc);
    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matmul_fast, 0, N_MM_TYPES);
    tcase_add_loop_test(tc, test_matmul_portable, 0, N_MM_TYPES);
    tcase_add_loop_test(tc, test_matmul_ref, 0, N_MM_TYPES);
    tcase_add_test(tc, test_matmul_odd_width);
    tcase_add_test(tc, test_matmul_nan);
    tcase_add_test(tc, test_matmul_batch_invariant);
    suite_add_tcase(s, tc);
    tc = tcase_create("elementwise");
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_rmsnorm_3d);
    tcase_add_loop_test(tc, test_get_rows, 0, N_MM_TYPES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    ct_seed();
    SRunner *sr = srunner_create(cpu_ops_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
