/* tests/quant/check_quant.c — Check suite "quant": the reference quant
 * formats of core/quant*.c and core/fp16.c.
 *
 *  fp16/bf16   exact encodings, ties-to-even, subnormals, inf/nan, and
 *              exhaustive round trips of all 65536 codes
 *  known       (known_blocks.c) one block per dequantisable type built
 *              byte by byte; expected floats worked out by hand
 *  roundtrip   error bounds per type over Gaussian and uniform data, the
 *              ordering Q8_0 < Q6_K < Q5_K < Q4_K, scale invariance
 *  dispatch    argument errors and their messages
 *  gguf        every F16 tensor of llama-2-tiny-random.gguf: dequant equals
 *              a hand-written half decoder, F16 re-encoding is bit-exact,
 *              Q8_0 re-quantisation stays within its error bound
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "quant_test.h"

/* ---- helpers ------------------------------------------------------------ */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Independent half decoder (double arithmetic, no bit tricks), used as
 * the reference for si_fp16_to_f32. */
static double half_ref(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v;
    if (exp == 31)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)man, -24);
    else
        v = ldexp((double)(man + 1024), exp - 25);
    return sign ? -v : v;
}

static uint64_t rng_state;

static double rng_u01(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * 0x1p-53;
}

static double rng_gauss(void)
{
    double u = rng_u01(), v = rng_u01();
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- fp16 / bf16 ---------------------------------------------------------- */

START_TEST(test_fp16_exact)
{
    ck_assert_uint_eq(si_f32_to_fp16(1.0f), 0x3C00);
    ck_assert_uint_eq(si_f32_to_fp16(-2.0f), 0xC000);
    ck_assert_uint_eq(si_f32_to_fp16(0.5f), 0x3800);
    ck_assert_uint_eq(si_f32_to_fp16(0.0f), 0x0000);
    ck_assert_uint_eq(si_f32_to_fp16(-0.0f), 0x8000);
    ck_assert_uint_eq(si_f32_to_fp16(65504.0f), 0x7BFF);            /* largest finite */
    ck_assert_uint_eq(si_f32_to_fp16(-65504.0f), 0xFBFF);
    ck_assert_uint_eq(si_f32_to_fp16(0x1p-14f), 0x0400);            /* smallest normal */
    ck_assert_uint_eq(si_f32_to_fp16(0x1p-24f), 0x0001);            /* smallest subnormal */
    ck_assert_uint_eq(si_f32_to_fp16(0x3FFp-24f), 0x03FF);          /* largest subnormal */
    ck_assert_uint_eq(si_f32_to_fp16(0.333333343f), 0x3555);

    /* Ties to even.  Half ulp of [1,2) is 2^-11. */
    ck_assert_uint_eq(si_f32_to_fp16(1.0f + 0x1p-11f), 0x3C00);     /* tie -> even 0x3C00 */
    ck_assert_uint_eq(si_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie, 0x3C01 odd -> up */
    ck_assert_uint_eq(si_f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01); /* above tie */
    ck_assert_uint_eq(si_f32_to_fp16(2049.0f), 0x6800);             /* 2048|2050: tie -> 2048 */
    ck_assert_uint_eq(si_f32_to_fp16(2051.0f), 0x6802);             /* 2050|2052: tie -> 2052 */
    /* Subnormal ties: units of 2^-24. */
    ck_assert_uint_eq(si_f32_to_fp16(0x1p-25f), 0x0000);            /* 0.5 unit -> 0 */
    ck_assert_uint_eq(si_f32_to_fp16(bitsf(0x33000001u)), 0x0001);  /* just above 0.5 unit */
    ck_assert_uint_eq(si_f32_to_fp16(3 * 0x1p-25f), 0x0002);        /* 1.5 units -> 2 */
    ck_assert_uint_eq(si_f32_to_fp16(5 * 0x1p-25f), 0x0002);        /* 2.5 units -> 2 */
    ck_assert_uint_eq(si_f32_to_fp16(0x1p-30f), 0x0000);
    ck_assert_uint_eq(si_f32_to_fp16(-0x1p-30f), 0x8000);
    /* 0x3FF.8 units rounds up into the smallest normal. */
    ck_assert_uint_eq(si_f32_to_fp16(0x7FFp-25f), 0x0400);
    /* Overflow: 65520 is the midpoint of 65504 and 2^16 -> infinity. */
    ck_assert_uint_eq(si_f32_to_fp16(65519.996f), 0x7BFF);
    ck_assert_uint_eq(si_f32_to_fp16(65520.0f), 0x7C00);
    ck_assert_uint_eq(si_f32_to_fp16(1e10f), 0x7C00);
    ck_assert_uint_eq(si_f32_to_fp16(INFINITY), 0x7C00);
    ck_assert_uint_eq(si_f32_to_fp16(-INFINITY), 0xFC00);
    /* NaN: quiet, sign and top payload kept. */
    uint16_t hn = si_f32_to_fp16(NAN);
    ck_assert_uint_eq(hn & 0x7E00, 0x7E00);
    ck_assert_uint_eq(si_f32_to_fp16(bitsf(0xFFC00000u)), 0xFE00);
    ck_assert_uint_eq(si_f32_to_fp16(bitsf(0x7F802000u)), 0x7E01);   /* signalling -> quiet */

    /* half -> float */
    ck_assert(si_fp16_to_f32(0x3C00) == 1.0f);
    ck_assert(si_fp16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(si_fp16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(si_fp16_to_f32(0x03FF) == 0x3FFp-24f);
    ck_assert(si_fp16_to_f32(0x0400) == 0x1p-14f);
    ck_assert(si_fp16_to_f32(0xC000) == -2.0f);
    ck_assert_uint_eq(fbits(si_fp16_to_f32(0x8000)), 0x80000000u);
    ck_assert_uint_eq(fbits(si_fp16_to_f32(0x8001)), fbits(-0x1p-24f));
    ck_assert(isinf(si_fp16_to_f32(0x7C00)) && si_fp16_to_f32(0x7C00) > 0);
    ck_assert(isinf(si_fp16_to_f32(0xFC00)) && si_fp16_to_f32(0xFC00) < 0);
    ck_assert_uint_eq(fbits(si_fp16_to_f32(0x7E00)), 0x7FC00000u);
    ck_assert_uint_eq(fbits(si_fp16_to_f32(0x7C01)), 0x7F802000u);    /* payload kept */
}
END_TEST

START_TEST(test_fp16_exhaustive)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = si_fp16_to_f32((uint16_t)h);
        double r = half_ref((uint16_t)h);
        if (isnan(r)) {
            REQUIRE(isnan(f), "0x%04x: not NaN", h);
            uint16_t back = si_f32_to_fp16(f);
            /* same sign and payload, quiet bit forced */
            REQUIRE(back == (h | 0x0200), "NaN 0x%04x -> 0x%04x", h, back);
            continue;
        }
        REQUIRE((double)f == r && !signbit(f) == !signbit(r), "0x%04x -> %.9g", h, f);
        REQUIRE(si_f32_to_fp16(f) == h, "0x%04x round trip", h);
    }
}
END_TEST

/* Random floats in and around the half range: the encoding must be the
 * nearest half, ties to the even code. */
START_TEST(test_fp16_rounding_random)
{
    rng_state = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 200000; i++) {
        /* exponents 2^-26 .. 2^16, random mantissa and sign */
        uint32_t e = 101 + (uint32_t)(rng_u01() * 42.0);
        uint32_t u = (e << 23) | (uint32_t)(rng_u01() * 8388608.0) |
                     (rng_u01() < 0.5 ? 0x80000000u : 0);
        float f = bitsf(u);
        uint16_t h = si_f32_to_fp16(f);
        double a = fabs((double)f);
        double v = fabs(half_ref(h));
        if (a >= 65520.0) {
            REQUIRE((h & 0x7FFF) == 0x7C00, "%.9g -> 0x%04x, want inf", f, h);
            continue;
        }
        REQUIRE((h & 0x8000) == ((u >> 16) & 0x8000), "sign of %.9g", f);
        uint16_t mag = h & 0x7FFF;
        double below = mag > 0 ? fabs(half_ref((uint16_t)(mag - 1))) : -1.0;
        double above = fabs(half_ref((uint16_t)(mag + 1)));
        double err = fabs(a - v);
        REQUIRE(err <= fabs(a - above) && (below < 0 || err <= fabs(a - below)),
                      "%.9g -> 0x%04x is not nearest", f, h);
        if ((below >= 0 && err == fabs(a - below)) || err == fabs(a - above))
            REQUIRE((mag & 1) == 0, "%.9g -> 0x%04x: tie not to even", f, h);
    }
}
END_TEST

START_TEST(test_bf16)
{
    ck_assert_uint_eq(si_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(si_f32_to_bf16(-2.0f), 0xC000);
    ck_assert_uint_eq(si_f32_to_bf16(0.0f), 0x0000);
    ck_assert_uint_eq(si_f32_to_bf16(-0.0f), 0x8000);
    /* ties to even on the dropped 16 bits */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x3F808000u)), 0x3F80);  /* tie, even stays */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x3F818000u)), 0x3F82);  /* tie, odd rounds up */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x3F808001u)), 0x3F81);  /* above tie */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x3F807FFFu)), 0x3F80);  /* below tie */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x3FFF8000u)), 0x4000);  /* carry into exponent */
    /* subnormals are kept, not flushed */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x00010000u)), 0x0001);
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x00018000u)), 0x0002);
    /* infinities and overflow */
    ck_assert_uint_eq(si_f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(si_f32_to_bf16(-INFINITY), 0xFF80);
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x7F7FFFFFu)), 0x7F80);  /* FLT_MAX rounds to inf */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x7F7F7FFFu)), 0x7F7F);
    /* NaN stays NaN and becomes quiet, even when the payload is only in
     * the dropped bits (plain truncation would give infinity). */
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x7F800001u)), 0x7FC0);
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0xFF800001u)), 0xFFC0);
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x7FC00000u)), 0x7FC0);
    ck_assert_uint_eq(si_f32_to_bf16(bitsf(0x7FA50000u)), 0x7FE5);

    ck_assert(si_bf16_to_f32(0x3F80) == 1.0f);
    ck_assert(si_bf16_to_f32(0x4049) == 3.140625f);
    ck_assert(isinf(si_bf16_to_f32(0xFF80)));
    ck_assert(isnan(si_bf16_to_f32(0x7FC1)));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = si_bf16_to_f32((uint16_t)h);
        REQUIRE(fbits(f) == h << 16, "bf16 0x%04x -> 0x%08x", h, fbits(f));
        uint16_t back = si_f32_to_bf16(f);
        REQUIRE(back == (isnan(f) ? (h | 0x40) : h), "bf16 0x%04x -> 0x%04x", h, back);
    }
}
END_TEST

/* ---- round trips ------------------------------------------------------------ */

#define RT_N (256 * 512)

typedef struct {
    uint32_t type;
    double   bound_gauss;   /* relative RMSE bounds (measured * ~1.2) */
    double   bound_unif;
} rt_bound_t;

/* Measured (rel. RMSE = RMSE / std of the data, RT_N values, seeds below):
 *             gauss    uniform
 *   f16     0.000208  0.000185      bf16   0.00166   0.00148
 *   q8_0    0.00535   0.00376       q6_K   0.0177    0.0132
 *   q5_K    0.0362    0.0278        q4_K   0.0718    0.0552
 *   q5_1    0.0378    0.0294        q5_0   0.0427    0.0312
 *   q4_1    0.0782    0.0607        q4_0   0.0859    0.0650
 * Bits decide the order: 8-bit < 6-bit < 5-bit < 4-bit, each step about
 * halving the error; K-quants beat the legacy types of the same width
 * thanks to the fitted scales/mins. */
static const rt_bound_t rt_bounds[] = {
    { SI_TYPE_F32,  0.0,    0.0    },
    { SI_TYPE_F16,  0.00025, 0.00023 },
    { SI_TYPE_BF16, 0.0020, 0.0018 },
    { SI_TYPE_Q8_0, 0.0065, 0.0046 },
    { SI_TYPE_Q6_K, 0.0213, 0.0159 },
    { SI_TYPE_Q5_K, 0.0435, 0.0334 },
    { SI_TYPE_Q4_K, 0.0862, 0.0663 },
    { SI_TYPE_Q5_1, 0.0454, 0.0353 },
    { SI_TYPE_Q5_0, 0.0513, 0.0375 },
    { SI_TYPE_Q4_1, 0.0939, 0.0729 },
    { SI_TYPE_Q4_0, 0.1031, 0.0780 },
};

static void fill(float *x, int64_t n, int uniform, uint64_t seed, float scale)
{
    rng_state = seed;
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * (float)(uniform ? 2.0 * rng_u01() - 1.0 : rng_gauss());
}

/* Quantises x with `type`, dequantises, returns RMSE / std(x). */
static double rel_rmse(uint32_t type, const float *x, float *y, int64_t n)
{
    uint64_t bytes = si_type_row_bytes(type, n);
    ck_assert_uint_gt(bytes, 0);
    void *q = malloc(bytes);
    ck_assert_ptr_nonnull(q);
    si_err err;
    int rc = si_quant(type, x, q, n, &err);
    ck_assert_msg(rc == SI_OK, "quant %s: %s", si_type_name(type), err.msg);
    rc = si_dequant(type, q, y, n, &err);
    ck_assert_msg(rc == SI_OK, "dequant %s: %s", si_type_name(type), err.msg);
    free(q);
    double mean = 0, var = 0, se = 0;
    for (int64_t i = 0; i < n; i++)
        mean += x[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        var += (x[i] - mean) * (x[i] - mean);
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    }
    return sqrt(se / var);
}

static double find_err(const double *errs, uint32_t type)
{
    for (size_t k = 0; k < sizeof rt_bounds / sizeof *rt_bounds; k++)
        if (rt_bounds[k].type == type)
            return errs[k];
    ck_abort_msg("no bound for type %u", type);
    return 0;
}

START_TEST(test_roundtrip_bounds)
{
    const int uniform = _i;          /* loop test: 0 Gaussian, 1 uniform */
    float *x = malloc(RT_N * sizeof *x), *y = malloc(RT_N * sizeof *y);
    ck_assert(x != NULL && y != NULL);
    fill(x, RT_N, uniform, uniform ? 0x5DEECE66Dull : 0x2545F4914F6CDD1Dull, 1.0f);
    double errs[sizeof rt_bounds / sizeof *rt_bounds];
    for (size_t k = 0; k < sizeof rt_bounds / sizeof *rt_bounds; k++) {
        const rt_bound_t *b = &rt_bounds[k];
        errs[k] = rel_rmse(b->type, x, y, RT_N);
        double bound = uniform ? b->bound_unif : b->bound_gauss;
        ck_assert_msg(errs[k] <= bound, "%s %s: relative RMSE %.6f > bound %.6f",
                      uniform ? "uniform" : "gauss", si_type_name(b->type), errs[k], bound);
        if (b->type != SI_TYPE_F32)   /* a lossy type must actually lose something */
            ck_assert_msg(errs[k] > 0, "%s: no error at all?", si_type_name(b->type));
    }
    const double e8 = find_err(errs, SI_TYPE_Q8_0), e6 = find_err(errs, SI_TYPE_Q6_K);
    const double e5 = find_err(errs, SI_TYPE_Q5_K), e4 = find_err(errs, SI_TYPE_Q4_K);
    ck_assert_msg(e8 < e6 && e6 < e5 && e5 < e4, "order q8_0 %.5f q6_K %.5f q5_K %.5f q4_K %.5f",
                  e8, e6, e5, e4);
    ck_assert_msg(e4 < find_err(errs, SI_TYPE_Q4_0), "q4_K not better than q4_0");
    ck_assert_msg(e4 < find_err(errs, SI_TYPE_Q4_1), "q4_K not better than q4_1");
    ck_assert_msg(e6 < find_err(errs, SI_TYPE_Q5_1), "q6_K not better than q5_1");
    ck_assert_msg(find_err(errs, SI_TYPE_F16) < e8, "f16 not better than q8_0");
    free(x);
    free(y);
}
END_TEST

/* Q8_0 element-wise: |x - y| <= d/2 (rounding) + 127*d*2^-11 (the f16
 * rounding of d), d = max|block| / 127. */
START_TEST(test_roundtrip_q8_0_elementwise)
{
    enum { N = 32 * 1024 };
    static float x[N], y[N];
    static uint8_t q[N / 32 * 34];
    fill(x, N, 0, 42, 3.0f);
    ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, x, q, N, NULL), SI_OK);
    ck_assert_int_eq(si_dequant(SI_TYPE_Q8_0, q, y, N, NULL), SI_OK);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const double d = amax / 127.0;
        for (int j = 0; j < 32; j++) {
            double e = fabs((double)x[32 * b + j] - y[32 * b + j]);
            REQUIRE(e <= d * (0.5 + 127.0 / 2048.0) + 1e-12, "block %d elem %d: err %g d %g",
                          b, j, e, d);
        }
    }
}
END_TEST

/* The relative error does not depend on the data's scale (within the
 * range of the f16 block scales). */
START_TEST(test_roundtrip_scale_invariance)
{
    static const uint32_t types[] = { SI_TYPE_Q8_0, SI_TYPE_Q4_K, SI_TYPE_Q5_K, SI_TYPE_Q6_K,
                                      SI_TYPE_Q4_0, SI_TYPE_Q5_1 };
    enum { N = 256 * 64 };
    static float x[N], y[N];
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        fill(x, N, 0, 7, 1.0f);
        double e1 = rel_rmse(types[k], x, y, N);
        fill(x, N, 0, 7, 1000.0f);
        double ebig = rel_rmse(types[k], x, y, N);
        fill(x, N, 0, 7, 0.01f);
        double esmall = rel_rmse(types[k], x, y, N);
        ck_assert_msg(fabs(ebig - e1) < 0.05 * e1 && fabs(esmall - e1) < 0.05 * e1,
                      "%s: rel RMSE %.5f (x1) %.5f (x1000) %.5f (x0.01)",
                      si_type_name(types[k]), e1, ebig, esmall);
    }
}
END_TEST

/* Zeros stay exact zeros in every type; an outlier survives; the extremes
 * of the accepted range (+-65504) survive. */
START_TEST(test_roundtrip_special_blocks)
{
    float x[512], y[512];
    uint8_t q[2048];
    for (uint32_t t = 0; t < SI_TYPE_COUNT; t++) {
        const si_type_traits *tr = si_type_get(t);
        if (tr == NULL || !tr->has_quant)
            continue;
        memset(x, 0, sizeof x);
        ck_assert_int_eq(si_quant(t, x, q, 512, NULL), SI_OK);
        ck_assert_int_eq(si_dequant(t, q, y, 512, NULL), SI_OK);
        for (int i = 0; i < 512; i++)
            REQUIRE(y[i] == 0.0f, "%s: zero -> %g", tr->name, y[i]);
        /* one large value among small ones: it must survive to 2% */
        for (int i = 0; i < 512; i++)
            x[i] = 0.01f * (float)((i * 37) % 11 - 5);
        x[300] = -50.0f;
        ck_assert_int_eq(si_quant(t, x, q, 512, NULL), SI_OK);
        ck_assert_int_eq(si_dequant(t, q, y, 512, NULL), SI_OK);
        ck_assert_msg(fabsf(y[300] + 50.0f) <= 1.0f, "%s: outlier -50 -> %g", tr->name, y[300]);
        /* the edges of the accepted range: +-65504 come back finite and
         * within one step of the coarsest type (Q4_0: d = 65504/8, and
         * when -65504 takes level -8, +65504 only reaches level 7) */
        for (int i = 0; i < 512; i++)
            x[i] = 65504.0f * (float)((i * 7) % 13 - 6) / 6.0f;
        ck_assert_int_eq(si_quant(t, x, q, 512, NULL), SI_OK);
        ck_assert_int_eq(si_dequant(t, q, y, 512, NULL), SI_OK);
        for (int i = 0; i < 512; i++)
            REQUIRE(isfinite(y[i]) && fabsf(y[i] - x[i]) <= 1.01f * 65504.0f / 8.0f,
                          "%s: %g -> %g", tr->name, x[i], y[i]);
    }
}
END_TEST

/* Re-quantising dequantised Q8_0 / Q4_0 data reproduces the same bytes:
 * the block maximum is on the grid, so d and every level come back. */
START_TEST(test_roundtrip_idempotent)
{
    static const uint32_t types[] = { SI_TYPE_Q8_0, SI_TYPE_Q4_0, SI_TYPE_Q5_0 };
    enum { N = 32 * 512 };
    static float x[N], y[N];
    static uint8_t q1[N / 32 * 34], q2[N / 32 * 34];
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        uint64_t bytes = si_type_row_bytes(types[k], N);
        fill(x, N, 0, 99, 1.0f);
        ck_assert_int_eq(si_quant(types[k], x, q1, N, NULL), SI_OK);
        ck_assert_int_eq(si_dequant(types[k], q1, y, N, NULL), SI_OK);
        ck_assert_int_eq(si_quant(types[k], y, q2, N, NULL), SI_OK);
        ck_assert_msg(memcmp(q1, q2, bytes) == 0, "%s: not idempotent", si_type_name(types[k]));
    }
}
END_TEST

/* ---- dispatcher --------------------------------------------------------------- */

START_TEST(test_dispatch_errors)
{
    float x[512] = { 0 }, y[512];
    uint8_t q[2048] = { 0 };
    si_err err;

    /* n not a multiple of the block size: names type and n */
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(si_dequant(SI_TYPE_Q4_K, q, y, 100, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "q4_K"));
    ck_assert_ptr_nonnull(strstr(err.msg, "100"));
    ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, x, q, 33, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "q8_0"));
    ck_assert_ptr_nonnull(strstr(err.msg, "33"));
    ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, x, q, -32, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "-32"));

    /* a valid type without the direction */
    ck_assert_int_eq(si_quant(SI_TYPE_Q2_K, x, q, 256, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "q2_K"));
    ck_assert_ptr_nonnull(strstr(err.msg, "256"));
    ck_assert_int_eq(si_quant(SI_TYPE_IQ4_XS, x, q, 256, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "iq4_xs"));
    ck_assert_int_eq(si_dequant(SI_TYPE_Q8_1, q, y, 32, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "q8_1"));
    ck_assert_int_eq(si_dequant(SI_TYPE_I32, q, y, 4, &err), SI_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "i32"));

    /* invalid ids: retired holes and out of range */
    static const uint32_t bad[] = { 4, 5, 31, 36, 38, SI_TYPE_COUNT, 1000, UINT32_MAX };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char id[16];
        snprintf(id, sizeof id, "%u", bad[k]);
        ck_assert_int_eq(si_dequant(bad[k], q, y, 32, &err), SI_EINVAL);
        ck_assert_msg(strstr(err.msg, id) != NULL, "message '%s' lacks id %s", err.msg, id);
        ck_assert_int_eq(si_quant(bad[k], x, q, 32, &err), SI_EINVAL);
        ck_assert_msg(strstr(err.msg, id) != NULL, "message '%s' lacks id %s", err.msg, id);
    }

    /* NULL buffers: refused when n > 0, fine for n == 0; err may be NULL */
    ck_assert_int_eq(si_dequant(SI_TYPE_Q8_0, NULL, y, 32, &err), SI_EINVAL);
    ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, x, NULL, 32, NULL), SI_EINVAL);
    ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, NULL, NULL, 0, NULL), SI_OK);
    ck_assert_int_eq(si_dequant(SI_TYPE_Q4_K, NULL, NULL, 0, &err), SI_OK);

    /* non-finite input: refused by block types, kept by float types */
    x[40] = NAN;
    ck_assert_int_eq(si_quant(SI_TYPE_Q4_K, x, q, 256, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "q4_K"));
    ck_assert_ptr_nonnull(strstr(err.msg, "element 40"));
    x[40] = 0;
    x[300] = -INFINITY;
    ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, x, q, 512, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "element 300"));
    /* beyond the f16 range that block scales carry: SI_ERANGE */
    x[300] = 0;
    x[77] = 65520.0f;
    ck_assert_int_eq(si_quant(SI_TYPE_Q6_K, x, q, 256, &err), SI_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "element 77"));
    ck_assert_ptr_nonnull(strstr(err.msg, "q6_K"));
    x[77] = -65504.0f;
    ck_assert_int_eq(si_quant(SI_TYPE_Q6_K, x, q, 256, &err), SI_OK);
    x[77] = 0;
    x[300] = -INFINITY;
    x[40] = NAN;
    ck_assert_int_eq(si_quant(SI_TYPE_F16, x, q, 512, &err), SI_OK);
    ck_assert_int_eq(si_dequant(SI_TYPE_F16, q, y, 512, &err), SI_OK);
    ck_assert(isnan(y[40]) && isinf(y[300]) && y[300] < 0);
    ck_assert_int_eq(si_quant(SI_TYPE_BF16, x, q, 512, &err), SI_OK);
    ck_assert_int_eq(si_dequant(SI_TYPE_BF16, q, y, 512, &err), SI_OK);
    ck_assert(isnan(y[40]) && isinf(y[300]) && y[300] < 0);
}
END_TEST

/* Every id: the directions the type table promises work, the others are
 * refused with SI_EUNSUPPORTED (or SI_EINVAL for invalid ids). */
START_TEST(test_dispatch_table)
{
    float x[512], y[512];
    uint8_t q[4096];
    memset(q, 0, sizeof q);
    fill(x, 512, 0, 3, 1.0f);
    int n_deq = 0, n_q = 0;
    for (uint32_t t = 0; t < SI_TYPE_COUNT + 2; t++) {
        const si_type_traits *tr = si_type_get(t);
        si_err err;
        int rd = si_dequant(t, q, y, 256, &err);
        int rq = si_quant(t, x, q, 256, &err);
        if (tr == NULL) {
            ck_assert_int_eq(rd, SI_EINVAL);
            ck_assert_int_eq(rq, SI_EINVAL);
            continue;
        }
        ck_assert_int_eq(rd, tr->has_dequant ? SI_OK : SI_EUNSUPPORTED);
        ck_assert_int_eq(rq, tr->has_quant ? SI_OK : SI_EUNSUPPORTED);
        n_deq += tr->has_dequant;
        n_q += tr->has_quant;
        if (tr->has_quant)
            ck_assert_msg(tr->has_dequant, "%s: quant without dequant", tr->name);
    }
    ck_assert_int_eq(n_deq, 15);   /* F32 F16 BF16 Q8_0 Q4_0/1 Q5_0/1 Q2..6_K IQ4_NL/XS */
    ck_assert_int_eq(n_q, 11);
}
END_TEST

/* ---- real file: llama-2-tiny-random.gguf ------------------------------------ */

static int file_exists(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

static void tiny_gguf_path(char *buf, size_t size)
{
    const char *top = getenv("SI_TOP_SRCDIR"), *shared = getenv("SI_SHARED_DATA");
    if (top) {
        snprintf(buf, size, "%s/tests/data/gguf/llama-2-tiny-random.gguf", top);
        if (file_exists(buf))
            return;
    }
    if (shared) {
        snprintf(buf, size, "%s/gguf/ollama/llama-2-tiny-random.gguf", shared);
        if (file_exists(buf))
            return;
    }
    ck_abort_msg("llama-2-tiny-random.gguf not found (SI_TOP_SRCDIR=%s, SI_SHARED_DATA=%s)",
                 top ? top : "(unset)", shared ? shared : "(unset)");
}

START_TEST(test_gguf_f16_tensors)
{
    char path[4096];
    tiny_gguf_path(path, sizeof path);
    si_gguf *g = NULL;
    si_err err;
    int rc = si_gguf_open(path, &g, &err);
    ck_assert_msg(rc == SI_OK, "%s", err.msg);

    int n_f16 = 0;
    int64_t n_values = 0;
    for (uint64_t i = 0; i < si_gguf_n_tensors(g); i++) {
        const si_tensor_info *ti = si_gguf_tensor_at(g, i);
        ck_assert_ptr_nonnull(ti);
        if (ti->type != SI_TYPE_F16)
            continue;
        int64_t n = 1;
        for (uint32_t d = 0; d < ti->ndim; d++)
            n *= ti->ne[d];
        ck_assert_uint_eq(ti->nbytes, (uint64_t)n * 2);
        n_f16++;
        n_values += n;

        const uint8_t *raw = ti->data;
        float *y = malloc((size_t)n * sizeof *y);
        uint8_t *re = malloc((size_t)n * 2);
        ck_assert(y != NULL && re != NULL);
        rc = si_dequant(SI_TYPE_F16, raw, y, n, &err);
        ck_assert_msg(rc == SI_OK, "%s: %s", ti->name, err.msg);
        for (int64_t k = 0; k < n; k++) {
            uint16_t h = (uint16_t)(raw[2 * k] | (raw[2 * k + 1] << 8));
            REQUIRE(isfinite(y[k]), "%s[%lld] not finite", ti->name, (long long)k);
            REQUIRE((double)y[k] == half_ref(h), "%s[%lld]: 0x%04x -> %.9g, want %.9g",
                          ti->name, (long long)k, h, y[k], half_ref(h));
        }
        /* back to F16: the very same bytes */
        rc = si_quant(SI_TYPE_F16, y, re, n, &err);
        ck_assert_msg(rc == SI_OK, "%s: %s", ti->name, err.msg);
        ck_assert_msg(memcmp(re, raw, (size_t)n * 2) == 0, "%s: F16 re-encoding differs",
                      ti->name);

        /* to Q8_0 (flat: every total here is a multiple of 32) */
        if (n % 32 == 0) {
            uint8_t *q = malloc((size_t)(n / 32) * 34);
            float *z = malloc((size_t)n * sizeof *z);
            ck_assert(q != NULL && z != NULL);
            ck_assert_int_eq(si_quant(SI_TYPE_Q8_0, y, q, n, &err), SI_OK);
            ck_assert_int_eq(si_dequant(SI_TYPE_Q8_0, q, z, n, &err), SI_OK);
            double se = 0, ss = 0;
            for (int64_t k = 0; k < n; k++) {
                se += ((double)y[k] - z[k]) * ((double)y[k] - z[k]);
                ss += (double)y[k] * y[k];
            }
            ck_assert_msg(ss > 0, "%s: all zero", ti->name);
            /* relative to the RMS of the data; Q8_0 on Gaussian data is 0.0054 */
            ck_assert_msg(sqrt(se / ss) < 0.01, "%s: Q8_0 relative error %.5f", ti->name,
                          sqrt(se / ss));
            free(q);
            free(z);
        }
        free(y);
        free(re);
    }
    /* token_embd, 7 layer matrices, output: 9 F16 tensors, 513,024 values */
    ck_assert_int_eq(n_f16, 9);
    ck_assert_int_eq(n_values, 2 * 8 * 32000 + 4 * 64 + 3 * 256);
    si_gguf_close(g);
}
END_TEST

/* ---- suite -------------------------------------------------------------------- */

static Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");

    TCase *tc = tcase_create("fp16");
    tcase_add_test(tc, test_fp16_exact);
    tcase_add_test(tc, test_fp16_exhaustive);
    tcase_add_test(tc, test_fp16_rounding_random);
    tcase_add_test(tc, test_bf16);
    suite_add_tcase(s, tc);

    suite_add_tcase(s, quant_known_tcase());

    tc = tcase_create("roundtrip");
    tcase_add_loop_test(tc, test_roundtrip_bounds, 0, 2);
    tcase_add_test(tc, test_roundtrip_q8_0_elementwise);
    tcase_add_test(tc, test_roundtrip_scale_invariance);
    tcase_add_test(tc, test_roundtrip_special_blocks);
    tcase_add_test(tc, test_roundtrip_idempotent);
    suite_add_tcase(s, tc);

    tc = tcase_create("dispatch");
    tcase_add_test(tc, test_dispatch_errors);
    tcase_add_test(tc, test_dispatch_table);
    suite_add_tcase(s, tc);

    tc = tcase_create("gguf");
    tcase_add_test(tc, test_gguf_f16_tensors);
    suite_add_tcase(s, tc);

    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(quant_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
