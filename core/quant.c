/* core/quant.c — si_dequant / si_quant dispatch, the plain types (F32, F16,
 * BF16) and the 32-element "legacy" block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
 *
 * Block layouts (ggml's structs, little-endian, no padding; d/m are f16):
 *   Q4_0 (18 B): d, qs[16]          x = (q - 8) * d
 *   Q4_1 (20 B): d, m, qs[16]       x = q * d + m
 *   Q5_0 (22 B): d, qh[4], qs[16]   x = (q - 16) * d, q 5 bits
 *   Q5_1 (24 B): d, m, qh[4], qs[16] x = q * d + m,  q 5 bits
 *   Q8_0 (34 B): d, int8 qs[32]     x = q * d
 * 4-bit values: byte j holds element j in its low nibble and element j+16
 * in its high nibble.  Q5: qh is a little-endian u32 whose bit i is bit 4
 * of element i.
 *
 * The quantisers follow ggml's reference rules (so files we write look like
 * llama-quantize's): symmetric types map the signed value of largest
 * magnitude to the most negative level, Q4_1/Q5_1 span [min, max], Q8_0
 * uses d = max|x| / 127 and rounds half away from zero.
 *
 * si_quant takes any float for F32/F16/BF16 (NaN and inf included); the
 * block types take finite values within +-65504, the range their f16
 * scales can carry (anything else is refused, naming the element).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "quant_internal.h"

/* ---- dequantisation ---------------------------------------------------- */

void si_dequant_q4_0(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 18, dst += SI_QK) {
        const float d = si_rdh(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; j++) {
            dst[j]      = (float)((qs[j] & 0x0f) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

void si_dequant_q4_1(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 20, dst += SI_QK) {
        const float d = si_rdh(src), m = si_rdh(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; j++) {
            dst[j]      = (float)(qs[j] & 0x0f) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

void si_dequant_q5_0(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 22, dst += SI_QK) {
        const float d = si_rdh(src);
        const uint32_t qh = si_rd32(src + 2);
        const uint8_t *qs = src + 6;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j]      = (float)(lo - 16) * d;
            dst[j + 16] = (float)(hi - 16) * d;
        }
    }
}

void si_dequant_q5_1(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 24, dst += SI_QK) {
        const float d = si_rdh(src), m = si_rdh(src + 2);
        const uint32_t qh = si_rd32(src + 4);
        const uint8_t *qs = src + 8;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
            int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j]      = (float)lo * d + m;
            dst[j + 16] = (float)hi * d + m;
        }
    }
}

void si_dequant_q8_0(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 34, dst += SI_QK) {
        const float d = si_rdh(src);
        for (int j = 0; j < SI_QK; j++)
            dst[j] = (float)(int8_t)src[2 + j] * d;
    }
}

/* ---- quantisation ------------------------------------------------------ */

/* Truncates v to an integer level in [0, hi].  Inputs are finite (the
 * dispatcher refuses others), but a subnormal block maximum can still make
 * 1/d infinite; clamping in float first keeps the cast defined. */
static inline int level(float v, int hi)
{
    if (!(v >= 0.0f))
        return 0;
    if (v >= (float)hi)
        return hi;
    return (int)v;
}

/* Signed value of largest magnitude in x[0..n). */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max  = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < n; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *mn = lo;
    *mx = hi;
}

void si_quant_q4_0(const float *src, uint8_t *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += SI_QK, dst += 18) {
        const float d  = signed_absmax(src, SI_QK) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        si_wr16(dst, si_f32_to_fp16(d));
        for (int j = 0; j < 16; j++) {
            int lo = level(src[j] * id + 8.5f, 15);
            int hi = level(src[j + 16] * id + 8.5f, 15);
            dst[2 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

void si_quant_q4_1(const float *src, uint8_t *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += SI_QK, dst += 20) {
        float mn, mx;
        min_max(src, SI_QK, &mn, &mx);
        const float d  = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        si_wr16(dst, si_f32_to_fp16(d));
        si_wr16(dst + 2, si_f32_to_fp16(mn));
        for (int j = 0; j < 16; j++) {
            int lo = level((src[j] - mn) * id + 0.5f, 15);
            int hi = level((src[j + 16] - mn) * id + 0.5f, 15);
            dst[4 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Shared tail of Q5_0/Q5_1: 5-bit levels q[32] -> qh (u32) + qs[16]. */
static void pack_q5(const int *q, uint8_t *qh_out, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)(q[j] >> 4) << j;
        qh |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    si_wr32(qh_out, qh);
}

void si_quant_q5_0(const float *src, uint8_t *dst, int64_t nb)
{
    int q[SI_QK];
    for (int64_t b = 0; b < nb; b++, src += SI_QK, dst += 22) {
        const float d  = signed_absmax(src, SI_QK) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        si_wr16(dst, si_f32_to_fp16(d));
        for (int j = 0; j < SI_QK; j++)
            q[j] = level(src[j] * id + 16.5f, 31);
        pack_q5(q, dst + 2, dst + 6);
    }
}

void si_quant_q5_1(const float *src, uint8_t *dst, int64_t nb)
{
    int q[SI_QK];
    for (int64_t b = 0; b < nb; b++, src += SI_QK, dst += 24) {
        float mn, mx;
        min_max(src, SI_QK, &mn, &mx);
        const float d  = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        si_wr16(dst, si_f32_to_fp16(d));
        si_wr16(dst + 2, si_f32_to_fp16(mn));
        for (int j = 0; j < SI_QK; j++)
            q[j] = level((src[j] - mn) * id + 0.5f, 31);
        pack_q5(q, dst + 4, dst + 8);
    }
}

void si_quant_q8_0(const float *src, uint8_t *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += SI_QK, dst += 34) {
        float amax = 0.0f;
        for (int j = 0; j < SI_QK; j++) {
            float a = fabsf(src[j]);
            amax = a > amax ? a : amax;
        }
        const float d  = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        si_wr16(dst, si_f32_to_fp16(d));
        for (int j = 0; j < SI_QK; j++) {
            float v = src[j] * id;
            /* |v| <= 127 up to rounding; the clamp also covers id = inf
             * from a subnormal amax (v = inf, or NaN for 0 * inf). */
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            v = v == v ? v : 0.0f;
            /* round half away from zero (roundf), without the libm call:
             * truncate, then step by the exact remainder. */
            int   t  = (int)v;
            float fr = v - (float)t;
            t += (fr >= 0.5f) - (fr <= -0.5f);
            dst[2 + j] = (uint8_t)(int8_t)t;
        }
    }
}

/* ---- dispatch ---------------------------------------------------------- */

/* Checks the type, the direction, n and the pointers; on success stores the
 * number of blocks in *nb. */
static int check_args(const char *what, uint32_t type, bool want_quant,
                      const void *src, const void *dst, int64_t n, int64_t *nb,
                      si_err *err)
{
    const si_type_traits *t = si_type_get(type);
    if (t == NULL)
        return si_err_set(err, SI_EINVAL, "%s: type id %" PRIu32 " (n = %" PRId64
                          "): not a valid ggml type", what, type, n);
    if (!(want_quant ? t->has_quant : t->has_dequant))
        return si_err_set(err, SI_EUNSUPPORTED, "%s %s (n = %" PRId64 "): no reference "
                          "%s for this type", what, t->name, n,
                          want_quant ? "quantisation" : "dequantisation");
    if (n < 0 || n % t->block_elems != 0)
        return si_err_set(err, SI_EINVAL, "%s %s: n = %" PRId64 " is not a non-negative "
                          "multiple of the block size %" PRIu32, what, t->name, n,
                          t->block_elems);
    if (n > 0 && (src == NULL || dst == NULL))
        return si_err_set(err, SI_EINVAL, "%s %s (n = %" PRId64 "): NULL %s buffer",
                          what, t->name, n, src == NULL ? "source" : "destination");
    *nb = n / t->block_elems;
    return SI_OK;
}

int si_dequant(uint32_t type, const void *src, float *dst, int64_t n, si_err *err)
{
    int64_t nb;
    int rc = check_args("dequant", type, false, src, dst, n, &nb, err);
    if (rc != SI_OK || n == 0)
        return rc;
    const uint8_t *s = src;
    switch (type) {
    case SI_TYPE_F32:
        memcpy(dst, s, (size_t)n * sizeof(float));
        break;
    case SI_TYPE_F16:    si_fp16_row_to_f32(s, dst, n); break;
    case SI_TYPE_BF16:   si_bf16_row_to_f32(s, dst, n); break;
    case SI_TYPE_Q4_0:   si_dequant_q4_0(s, dst, nb);   break;
    case SI_TYPE_Q4_1:   si_dequant_q4_1(s, dst, nb);   break;
    case SI_TYPE_Q5_0:   si_dequant_q5_0(s, dst, nb);   break;
    case SI_TYPE_Q5_1:   si_dequant_q5_1(s, dst, nb);   break;
    case SI_TYPE_Q8_0:   si_dequant_q8_0(s, dst, nb);   break;
    case SI_TYPE_Q2_K:   si_dequant_q2_k(s, dst, nb);   break;
    case SI_TYPE_Q3_K:   si_dequant_q3_k(s, dst, nb);   break;
    case SI_TYPE_Q4_K:   si_dequant_q4_k(s, dst, nb);   break;
    case SI_TYPE_Q5_K:   si_dequant_q5_k(s, dst, nb);   break;
    case SI_TYPE_Q6_K:   si_dequant_q6_k(s, dst, nb);   break;
    case SI_TYPE_IQ4_NL: si_dequant_iq4_nl(s, dst, nb); break;
    case SI_TYPE_IQ4_XS: si_dequant_iq4_xs(s, dst, nb); break;
    default:
        /* The type table promises a routine this switch lacks. */
        return si_err_set(err, SI_EUNSUPPORTED, "dequant %s (n = %" PRId64 "): "
                          "no routine", si_type_name(type), n);
    }
    return SI_OK;
}

/* Largest magnitude si_quant accepts for the block types: the f16 range.
 * Their block scales and minimums are f16, so a block whose values reach
 * beyond it would get an infinite scale (Q4_1/Q5_1 cannot even store a
 * minimum below -65504); every type holds everything within it. */
#define QUANT_MAX_ABS 65504.0f

/* Index of the first element that is NaN, infinite or beyond
 * QUANT_MAX_ABS, or -1. */
static int64_t first_out_of_range(const float *x, int64_t n)
{
    const int64_t chunk = 1024;
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        int64_t i1  = i0 + chunk < n ? i0 + chunk : n;
        int     bad = 0;
        for (int64_t i = i0; i < i1; i++)        /* branch-free, vectorises */
            bad |= !(fabsf(x[i]) <= QUANT_MAX_ABS);
        if (bad)
            for (int64_t i = i0; i < i1; i++)
                if (!(fabsf(x[i]) <= QUANT_MAX_ABS))
                    return i;
    }
    return -1;
}

int si_quant(uint32_t type, const float *src, void *dst, int64_t n, si_err *err)
{
    int64_t nb;
    int rc = check_args("quant", type, true, src, dst, n, &nb, err);
    if (rc != SI_OK || n == 0)
        return rc;
    uint8_t *d = dst;
    switch (type) {
    case SI_TYPE_F32:
        memcpy(d, src, (size_t)n * sizeof(float));
        return SI_OK;
    case SI_TYPE_F16:
        si_f32_row_to_fp16(src, d, n);
        return SI_OK;
    case SI_TYPE_BF16:
        si_f32_row_to_bf16(src, d, n);
        return SI_OK;
    default:
        break;
    }

    int64_t bad = first_out_of_range(src, n);
    if (bad >= 0)
        return si_err_set(err, isfinite(src[bad]) ? SI_ERANGE : SI_EINVAL,
                          "quant %s (n = %" PRId64 "): element %" PRId64 " is %g; block "
                          "types hold finite values within +-65504 (f16 scales)",
                          si_type_name(type), n, bad, (double)src[bad]);
    switch (type) {
    case SI_TYPE_Q4_0: si_quant_q4_0(src, d, nb); break;
    case SI_TYPE_Q4_1: si_quant_q4_1(src, d, nb); break;
    case SI_TYPE_Q5_0: si_quant_q5_0(src, d, nb); break;
    case SI_TYPE_Q5_1: si_quant_q5_1(src, d, nb); break;
    case SI_TYPE_Q8_0: si_quant_q8_0(src, d, nb); break;
    case SI_TYPE_Q4_K: si_quant_q4_k(src, d, nb); break;
    case SI_TYPE_Q5_K: si_quant_q5_k(src, d, nb); break;
    case SI_TYPE_Q6_K: si_quant_q6_k(src, d, nb); break;
    default:
        return si_err_set(err, SI_EUNSUPPORTED, "quant %s (n = %" PRId64 "): no routine",
                          si_type_name(type), n);
    }
    return SI_OK;
}
