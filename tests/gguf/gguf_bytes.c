/* tests/gguf/gguf_bytes.c — see gguf_bytes.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_bytes.h"

void gb_free(gb *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void gb_bytes(gb *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL) {
            fprintf(stderr, "gguf_bytes: out of memory\n");
            abort();
        }
        b->p = q;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void gb_le(gb *b, uint64_t v, int n)
{
    uint8_t t[8];
    for (int i = 0; i < n; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, t, (size_t)n);
}

void gb_u8(gb *b, uint8_t v)   { gb_le(b, v, 1); }
void gb_u16(gb *b, uint16_t v) { gb_le(b, v, 2); }
void gb_u32(gb *b, uint32_t v) { gb_le(b, v, 4); }
void gb_u64(gb *b, uint64_t v) { gb_le(b, v, 8); }

void gb_zeros(gb *b, size_t n)
{
    while (n-- > 0)
        gb_u8(b, 0);
}

void gb_pad(gb *b, size_t align)
{
    gb_zeros(b, (align - b->len % align) % align);
}

void gb_str(gb *b, const char *s)
{
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_key(gb *b, const char *key, uint32_t vtype)
{
    gb_str(b, key);
    gb_u32(b, vtype);
}

void gb_kv_u32(gb *b, const char *key, uint32_t v)
{
    gb_key(b, key, 4);
    gb_u32(b, v);
}

void gb_kv_str(gb *b, const char *key, const char *v)
{
    gb_key(b, key, 8);
    gb_str(b, v);
}

void gb_tensor(gb *b, const char *name, uint32_t ndim, const uint64_t *ne, uint32_t type,
               uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, ndim);
    for (uint32_t d = 0; d < ndim; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
