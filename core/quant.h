/* core/quant.h — tensor element types: traits, reference dequantisation and
 * quantisation, bit-compatible with ggml's block layouts.
 *
 * These are REFERENCE implementations: clear, scalar and exact.  Backends
 * carry their own fast kernels and test against these.
 */
#ifndef SI_CORE_QUANT_H
#define SI_CORE_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>
#include <sparkinfer/types.h>

typedef struct si_type_traits {
    const char *name;          /* ggml's spelling: "f32", "q4_K", "iq4_xs" ... */
    uint32_t    block_elems;   /* elements per block (1 for plain types)       */
    uint32_t    block_bytes;   /* bytes per block                              */
    bool        has_dequant;   /* si_dequant supports it                       */
    bool        has_quant;     /* si_quant supports it                         */
} si_type_traits;

/* NULL for an id that is not a valid ggml type (including retired ids). */
const si_type_traits *si_type_get(uint32_t type);
bool        si_type_valid(uint32_t type);
const char *si_type_name(uint32_t type);                 /* NULL if invalid */
/* Type id from a name ("q8_0", case-insensitive); -1 if unknown. */
int         si_type_from_name(const char *name);
/* Bytes of a row of n elements; 0 if the type is invalid or n is not a
 * multiple of the block size.  (Overflow-safe for n < 2^62.) */
uint64_t    si_type_row_bytes(uint32_t type, int64_t n);

/* n must be a multiple of the type's block size. */
int si_dequant(uint32_t type, const void *src, float *dst, int64_t n, si_err *err);
int si_quant(uint32_t type, const float *src, void *dst, int64_t n, si_err *err);

/* Scalar half-precision conversions (round to nearest even). */
float    si_fp16_to_f32(uint16_t h);
uint16_t si_f32_to_fp16(float f);
float    si_bf16_to_f32(uint16_t h);
uint16_t si_f32_to_bf16(float f);

#endif /* SI_CORE_QUANT_H */
