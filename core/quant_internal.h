/* core/quant_internal.h — private helpers shared by core/quant*.c.
 *
 * The per-type routines work on whole blocks: `nb` blocks of the type's
 * block_elems values.  The dispatcher (si_dequant / si_quant in quant.c)
 * has already checked the type, n and the pointers.
 *
 * Blocks are read and written byte by byte (little-endian, as in GGUF) at
 * the offsets of ggml's block structs, never through struct pointers: a
 * tensor's blocks need not be aligned for their f16/u32 members.
 */
#ifndef SI_CORE_QUANT_INTERNAL_H
#define SI_CORE_QUANT_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

#define SI_QK   32   /* elements per block of the 32-element ("legacy") types */
#define SI_QK_K 256  /* elements per K-quant / IQ4_XS super-block             */

static inline uint16_t si_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t si_rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline void si_wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void si_wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline float si_rdh(const uint8_t *p) { return si_fp16_to_f32(si_rd16(p)); }

/* Round to nearest (ties to even) for |v| < 2^22, the range every quantiser
 * here works in: adding 1.5*2^23 leaves the integer in the low mantissa
 * bits.  No float->int conversion, so no undefined behaviour on odd input. */
static inline int si_nearest_int(float v)
{
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Nearest integer level in [lo, hi]; clamps in float first, so any v
 * (huge, infinite, NaN -> lo) gives a defined, sensible level. */
static inline int si_level(float v, int lo, int hi)
{
    if (!(v > (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return si_nearest_int(v);
}

/* ---- core/fp16.c: rows of n 16-bit codes ----------------------------- */
void si_fp16_row_to_f32(const uint8_t *src, float *dst, int64_t n);
void si_f32_row_to_fp16(const float *src, uint8_t *dst, int64_t n);
void si_bf16_row_to_f32(const uint8_t *src, float *dst, int64_t n);
void si_f32_row_to_bf16(const float *src, uint8_t *dst, int64_t n);

/* ---- core/quant.c: 32-element types --------------------------------- */
void si_dequant_q4_0(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q4_1(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q5_0(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q5_1(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q8_0(const uint8_t *src, float *dst, int64_t nb);
void si_quant_q4_0(const float *src, uint8_t *dst, int64_t nb);
void si_quant_q4_1(const float *src, uint8_t *dst, int64_t nb);
void si_quant_q5_0(const float *src, uint8_t *dst, int64_t nb);
void si_quant_q5_1(const float *src, uint8_t *dst, int64_t nb);
void si_quant_q8_0(const float *src, uint8_t *dst, int64_t nb);

/* ---- core/quant_k.c: K-quants (256-element super-blocks) ------------ */
void si_dequant_q2_k(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q3_k(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q4_k(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q5_k(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_q6_k(const uint8_t *src, float *dst, int64_t nb);
void si_quant_q4_k(const float *src, uint8_t *dst, int64_t nb);
void si_quant_q5_k(const float *src, uint8_t *dst, int64_t nb);
void si_quant_q6_k(const float *src, uint8_t *dst, int64_t nb);

/* ---- core/quant_iq.c: non-linear 4-bit types ------------------------ */
void si_dequant_iq4_nl(const uint8_t *src, float *dst, int64_t nb);
void si_dequant_iq4_xs(const uint8_t *src, float *dst, int64_t nb);

#endif /* SI_CORE_QUANT_INTERNAL_H */
