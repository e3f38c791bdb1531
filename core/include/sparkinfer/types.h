/* sparkinfer/types.h — tensor element types and read-only GGUF views.
 *
 * These are plain data types shared by the core and every plugin.  They are
 * part of the ABI: enum values are append-only and never renumbered, structs
 * only grow at the end.
 */
#ifndef SPARKINFER_TYPES_H
#define SPARKINFER_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor element types.  The numbers are ggml's type ids exactly, because
 * they are stored in GGUF files; holes are ids ggml retired (4, 5, 31-33,
 * 36-38) which a reader must refuse. */
enum si_type {
    SI_TYPE_F32     = 0,
    SI_TYPE_F16     = 1,
    SI_TYPE_Q4_0    = 2,
    SI_TYPE_Q4_1    = 3,
    SI_TYPE_Q5_0    = 6,
    SI_TYPE_Q5_1    = 7,
    SI_TYPE_Q8_0    = 8,
    SI_TYPE_Q8_1    = 9,
    SI_TYPE_Q2_K    = 10,
    SI_TYPE_Q3_K    = 11,
    SI_TYPE_Q4_K    = 12,
    SI_TYPE_Q5_K    = 13,
    SI_TYPE_Q6_K    = 14,
    SI_TYPE_Q8_K    = 15,
    SI_TYPE_IQ2_XXS = 16,
    SI_TYPE_IQ2_XS  = 17,
    SI_TYPE_IQ3_XXS = 18,
    SI_TYPE_IQ1_S   = 19,
    SI_TYPE_IQ4_NL  = 20,
    SI_TYPE_IQ3_S   = 21,
    SI_TYPE_IQ2_S   = 22,
    SI_TYPE_IQ4_XS  = 23,
    SI_TYPE_I8      = 24,
    SI_TYPE_I16     = 25,
    SI_TYPE_I32     = 26,
    SI_TYPE_I64     = 27,
    SI_TYPE_F64     = 28,
    SI_TYPE_IQ1_M   = 29,
    SI_TYPE_BF16    = 30,
    SI_TYPE_TQ1_0   = 34,
    SI_TYPE_TQ2_0   = 35,
    SI_TYPE_MXFP4   = 39,
    SI_TYPE_COUNT   = 40 /* one past the largest id; not a type */
};

/* GGUF metadata value types, numbered as in the GGUF file format. */
enum si_gguf_vtype {
    SI_GGUF_U8     = 0,
    SI_GGUF_I8     = 1,
    SI_GGUF_U16    = 2,
    SI_GGUF_I16    = 3,
    SI_GGUF_U32    = 4,
    SI_GGUF_I32    = 5,
    SI_GGUF_F32    = 6,
    SI_GGUF_BOOL   = 7,
    SI_GGUF_STRING = 8,
    SI_GGUF_ARRAY  = 9,
    SI_GGUF_U64    = 10,
    SI_GGUF_I64    = 11,
    SI_GGUF_F64    = 12,
    SI_GGUF_VTYPE_COUNT
};

/* A string that is NOT NUL-terminated: GGUF stores length + bytes.  `ptr`
 * points into the mapped file and lives as long as the si_gguf it came from. */
typedef struct si_str {
    const char *ptr;
    uint64_t    len;
} si_str;

/* One metadata value (a key's value or an array element), read-only.
 * Scalars are widened into the union by signedness; `type` says which
 * member is meaningful:
 *   U8/U16/U32/U64/BOOL -> u ; I8/I16/I32/I64 -> i ; F32/F64 -> f ;
 *   STRING -> s ; ARRAY -> arr.
 * For arrays, element i is read with si_host.gguf_arr_get (or the core's
 * si_gguf_arr_get); numeric arrays also expose `arr.data`, a pointer to the
 * packed little-endian elements inside the mapping (NULL for arrays of
 * strings and arrays of arrays). */
typedef struct si_gguf_value {
    uint32_t type;                    /* enum si_gguf_vtype */
    union {
        uint64_t u;
        int64_t  i;
        double   f;
        si_str   s;
        struct {
            uint32_t    type;         /* element type (enum si_gguf_vtype) */
            uint64_t    n;            /* element count                     */
            const void *data;         /* packed numeric elements, or NULL  */
            const void *impl;         /* core-private, do not touch        */
        } arr;
    } v;
} si_gguf_value;

#define SI_MAX_DIMS 4

/* One tensor of a GGUF file, read-only.  `data` points into the core's
 * read-only mapping of the file and stays valid while the si_gguf lives;
 * plugins never write through it and never free it. */
typedef struct si_tensor_info {
    const char *name;                 /* NUL-terminated, owned by the core  */
    uint32_t    type;                 /* enum si_type                        */
    uint32_t    ndim;                 /* 1..SI_MAX_DIMS                      */
    int64_t     ne[SI_MAX_DIMS];      /* elements per dim, ne[0] contiguous; unused dims are 1 */
    uint64_t    offset;               /* offset inside the data section      */
    uint64_t    nbytes;               /* bytes of tensor data                */
    const void *data;                 /* mapped bytes, nbytes long           */
} si_tensor_info;

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_TYPES_H */
