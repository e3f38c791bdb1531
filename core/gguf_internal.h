/* core/gguf_internal.h — pieces shared by the GGUF reader (gguf.c) and
 * writer (gguf_write.c): little-endian byte access and a string-keyed hash
 * index used to refuse duplicate keys and tensor names in O(1) each.
 * Core-private; never installed. */
#ifndef SI_CORE_GGUF_INTERNAL_H
#define SI_CORE_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SI_GGUF_MAGIC      "GGUF"
#define SI_GGUF_MAX_NAME   65535u   /* longest key or tensor name accepted */
#define SI_GGUF_MAX_DEPTH  8        /* deepest array-of-arrays nesting     */

/* GGUF is little-endian on disk; decode byte by byte so the code does not
 * depend on the host's byte order or on unaligned loads. */
static inline uint16_t si_le16(const uint8_t *b)
{
    return (uint16_t)(b[0] | (uint16_t)b[1] << 8);
}

static inline uint32_t si_le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t si_le64(const uint8_t *b)
{
    return (uint64_t)si_le32(b) | (uint64_t)si_le32(b + 4) << 32;
}

static inline void si_put_le32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline void si_put_le64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

/* Bytes of one element of a scalar value type; 0 for STRING, ARRAY and
 * invalid ids. */
static inline uint32_t si_gguf_scalar_size(uint32_t vtype)
{
    static const uint8_t sz[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    return vtype < 13 ? sz[vtype] : 0;
}

/* Open-addressing hash index from a byte string to a size_t.  It stores
 * pointers to the caller's strings, which must stay put while indexed.
 * Grows by doubling, so memory follows the number of entries actually
 * inserted, never a count read from a file. */
typedef struct si_gguf_keyslot {
    const char *key;          /* NULL = empty slot */
    size_t      len;
    size_t      val;
} si_gguf_keyslot;

typedef struct si_gguf_keyset {
    si_gguf_keyslot *slot;
    size_t           cap;     /* 0 or a power of two */
    size_t           count;
} si_gguf_keyset;

/* SI_OK; SI_ENOMEM; or SI_EINVAL when `key` is already present, with its
 * value in *dup (dup may be NULL). */
int  si_gguf_keyset_add(si_gguf_keyset *ks, const char *key, size_t len, size_t val,
                        size_t *dup);
bool si_gguf_keyset_find(const si_gguf_keyset *ks, const char *key, size_t len,
                         size_t *val);
void si_gguf_keyset_free(si_gguf_keyset *ks);

#endif /* SI_CORE_GGUF_INTERNAL_H */
