/* core/fp16.c — scalar IEEE binary16 and bfloat16 conversions.
 *
 * Both directions are exact bit manipulations, independent of the host's
 * rounding mode and of any F16C/AVX512-BF16 instructions, so every backend
 * can test its fast conversions against these.
 *
 * float -> half rounds to nearest, ties to even, produces subnormals,
 * overflows to infinity (at 65520, the midpoint between 65504 and 2^16) and
 * turns a NaN into a quiet NaN that keeps its sign and the top 10 mantissa
 * bits (quiet bit forced, as x86's vcvtps2ph does), so a half NaN survives
 * half -> float -> half (a signalling one comes back quiet).
 *
 * float -> bfloat16 rounds to nearest, ties to even, on the upper 16 bits;
 * a NaN keeps its sign and top payload bits and is forced quiet (bit 6 of
 * the bfloat16), so truncation can never turn it into an infinity.
 */
#include <string.h>

#include "quant_internal.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1fu;
    uint32_t man  = h & 0x3ffu;

    if (exp == 0x1f)                    /* inf / nan: keep the payload  */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float. */
        float v = (float)man * 0x1p-24f;
        return bits_f32(sign | f32_bits(v));
    }
    /* normal: rebias the exponent from 15 to 127 (+112). */
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t float_to_half(float f)
{
    uint32_t x    = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax   = x & 0x7fffffffu;

    if (ax > 0x7f800000u)               /* nan: quiet, keep top payload */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u)              /* >= 65520 (or inf): infinity  */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {             /* below 2^-14: half subnormal  */
        if (ax <= 0x33000000u)          /* <= 2^-25: ties to even -> 0  */
            return sign;
        /* value = m * 2^(e-150); in units of 2^-24 that is m >> (126-e). */
        uint32_t e     = ax >> 23;
        uint32_t m     = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;      /* 14..24 */
        uint32_t q     = m >> shift;
        uint32_t rem   = m & ((1u << shift) - 1u);
        uint32_t half  = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;                        /* may carry into 0x400: fine   */
        return (uint16_t)(sign | q);
    }
    /* normal: drop 13 mantissa bits, rebias the exponent (-112).  A
     * mantissa carry propagates into the exponent, which is correct. */
    uint32_t h   = (ax >> 13) - (112u << 10);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static inline float bf16_to_float(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static inline uint16_t float_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    /* Add just under half an ulp, plus one when the kept part is odd:
     * ties go to even, and a carry rounds up into the exponent (the
     * largest floats correctly become infinity). */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- public scalar API -------------------------------------------------- */

float    si_fp16_to_f32(uint16_t h) { return half_to_float(h); }
uint16_t si_f32_to_fp16(float f)    { return float_to_half(f); }
float    si_bf16_to_f32(uint16_t h) { return bf16_to_float(h); }
uint16_t si_f32_to_bf16(float f)    { return float_to_bf16(f); }

/* ---- rows (little-endian 16-bit codes), for si_dequant / si_quant ------- */

void si_fp16_row_to_f32(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = half_to_float(si_rd16(src + 2 * i));
}

void si_f32_row_to_fp16(const float *src, uint8_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        si_wr16(dst + 2 * i, float_to_half(src[i]));
}

void si_bf16_row_to_f32(const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(si_rd16(src + 2 * i));
}

void si_f32_row_to_bf16(const float *src, uint8_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        si_wr16(dst + 2 * i, float_to_bf16(src[i]));
}
