/* tests/gguf/gguf_bytes.h — a tiny byte builder for hand-made GGUF images:
 * the tests and the fuzz seed generator use it to produce files the writer
 * would never make (nested arrays, v2, malformed fields).  Aborts on
 * allocation failure: it is test code. */
#ifndef SI_TESTS_GGUF_BYTES_H
#define SI_TESTS_GGUF_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct gb {
    uint8_t *p;
    size_t   len, cap;
} gb;

void gb_free(gb *b);
void gb_bytes(gb *b, const void *p, size_t n);
void gb_u8(gb *b, uint8_t v);
void gb_u16(gb *b, uint16_t v);
void gb_u32(gb *b, uint32_t v);
void gb_u64(gb *b, uint64_t v);
void gb_zeros(gb *b, size_t n);
void gb_pad(gb *b, size_t align);              /* zeros up to a multiple of align */
void gb_str(gb *b, const char *s);             /* u64 length + bytes */

/* "GGUF", version, n_tensors, n_kv. */
void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* Key and value type; the caller appends the value. */
void gb_key(gb *b, const char *key, uint32_t vtype);
void gb_kv_u32(gb *b, const char *key, uint32_t v);
void gb_kv_str(gb *b, const char *key, const char *v);
/* Tensor info: name, ndim, ne[ndim], type, offset. */
void gb_tensor(gb *b, const char *name, uint32_t ndim, const uint64_t *ne, uint32_t type,
               uint64_t offset);

#endif
