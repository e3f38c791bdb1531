/* tests/gguf/check_gguf_bad.c — the reader against hand-made images:
 * malformed fields (exact status and message), truncation at every byte,
 * and nested arrays.  Images are built with gguf_bytes.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_gguf.h"

#define U64MAX UINT64_MAX
#define SI_GGUF_MAX_DEPTH_TEST 8   /* the documented nesting limit */

void gguf_expect_refused(const gb *b, int code, const char *frag, int line)
{
    uint8_t *copy = malloc(b->len ? b->len : 1);
    ck_assert_ptr_nonnull(copy);
    if (b->len)
        memcpy(copy, b->p, b->len);
    si_gguf *g = (si_gguf *)0x1;
    si_err err = { "" };
    int rc = si_gguf_open_memory(copy, b->len, "bad.gguf", &g, &err);
    ck_assert_msg(rc == code, "line %d: status %d (%s), want %d; message: %s", line, rc,
                  si_strerror(rc), code, err.msg);
    ck_assert_msg(g == NULL, "line %d: *out not NULL after a refusal", line);
    ck_assert_msg(strncmp(err.msg, "bad.gguf: ", 10) == 0, "line %d: message '%s' does not start"
                  " with the file name", line, err.msg);
    ck_assert_msg(strstr(err.msg, frag) != NULL, "line %d: message '%s' lacks '%s'", line,
                  err.msg, frag);
    /* Also without an si_err: same status, no crash. */
    ck_assert_int_eq(si_gguf_open_memory(copy, b->len, "bad.gguf", &g, NULL), code);
    free(copy);
}

void gguf_expect_accepted(const gb *b, si_gguf **out, void **copy_out, int line)
{
    uint8_t *copy = malloc(b->len ? b->len : 1);
    ck_assert_ptr_nonnull(copy);
    if (b->len)
        memcpy(copy, b->p, b->len);
    si_gguf *g = NULL;
    si_err err = { "" };
    int rc = si_gguf_open_memory(copy, b->len, "ok.gguf", &g, &err);
    ck_assert_msg(rc == SI_OK, "line %d: refused: %s", line, err.msg);
    LLVMFuzzerTestOneInput(copy, b->len);
    if (out != NULL) {
        *out = g;
        *copy_out = copy;
    } else {
        si_gguf_close(g);
        free(copy);
    }
}

/* One key and one tensor info, padding, then `data` bytes of tensor data. */
static void one_tensor(gb *b, uint32_t ndim, const uint64_t *ne, uint32_t type, uint64_t off,
                       size_t data)
{
    gb_free(b);
    gb_header(b, 3, 1, 1);
    gb_kv_str(b, "general.name", "t");
    gb_tensor(b, "w", ndim, ne, type, off);
    gb_pad(b, 32);
    gb_zeros(b, data);
}

/* ---- header ---------------------------------------------------------------- */

START_TEST(test_header)
{
    gb b = { 0 };
    gb_bytes(&b, "GGUF\3\0\0\0\0\0", 10);
    REFUSED(&b, SI_EFORMAT, "bad.gguf: offset 0: truncated header (need 24 bytes, have 10)");
    gb_free(&b);
    REFUSED(&b, SI_EFORMAT, "truncated header (need 24 bytes, have 0)");
    gb_bytes(&b, "GGU", 3);
    REFUSED(&b, SI_EFORMAT, "truncated header");

    gb_free(&b);
    gb_header(&b, 3, 0, 0);
    b.p[3] = 'X';
    REFUSED(&b, SI_EFORMAT, "not a GGUF file (magic 'GGUX'");
    b.p[0] = 0x00;
    REFUSED(&b, SI_EFORMAT, "not a GGUF file (magic '?GUX'");

    static const struct { uint32_t v; int code; const char *frag; } vers[] = {
        { 1, SI_EUNSUPPORTED, "GGUF version 1 is not supported (need version 2 or 3)" },
        { 4, SI_EUNSUPPORTED, "unsupported GGUF version 4 (need 2 or 3)" },
        { 0, SI_EFORMAT, "invalid GGUF version 0" },
        { 0xffffffffu, SI_EUNSUPPORTED, "unsupported GGUF version 4294967295" },
        { 0x03000000u, SI_EUNSUPPORTED, "big-endian GGUF is not supported (version field reads"
                                         " 0x03000000, i.e. version 3 byte-swapped)" },
        { 0x02000000u, SI_EUNSUPPORTED, "big-endian GGUF" },
    };
    for (size_t i = 0; i < sizeof vers / sizeof vers[0]; i++) {
        gb_free(&b);
        gb_header(&b, vers[i].v, 0, 0);
        REFUSED(&b, vers[i].code, vers[i].frag);
    }

    gb_free(&b);
    gb_header(&b, 3, 0, 1ull << 63);
    REFUSED(&b, SI_EFORMAT, "header: key count 9223372036854775808 exceeds what the remaining 0"
            " bytes can hold");
    gb_free(&b);
    gb_header(&b, 3, U64MAX, 0);
    gb_zeros(&b, 100);
    REFUSED(&b, SI_EFORMAT, "header: tensor count 18446744073709551615 exceeds");
    gb_free(&b);
    gb_header(&b, 3, 3, 3);                    /* each fits alone, not both */
    gb_zeros(&b, 100);
    REFUSED(&b, SI_EFORMAT, "header: 3 keys and 3 tensors cannot fit in the remaining 100 bytes");

    /* The smallest valid files: v3 and v2, nothing in them. */
    gb_free(&b);
    gb_header(&b, 3, 0, 0);
    ACCEPTED(&b, NULL, NULL);
    gb_free(&b);
    gb_header(&b, 2, 0, 0);
    ACCEPTED(&b, NULL, NULL);
    gb_free(&b);
}
END_TEST

/* ---- metadata -------------------------------------------------------------- */

START_TEST(test_kv)
{
    gb b = { 0 };

    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.name", 8);
    gb_u64(&b, U64MAX);
    REFUSED(&b, SI_EFORMAT, "bad.gguf: key #0 'general.name': string length 18446744073709551615"
            " exceeds remaining 0 bytes");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.name", 8);
    gb_u64(&b, 1234567);
    gb_zeros(&b, 40);
    REFUSED(&b, SI_EFORMAT, "key #0 'general.name': string length 1234567 exceeds remaining 40 bytes");

    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, U64MAX);
    gb_zeros(&b, 8);
    REFUSED(&b, SI_EFORMAT, "key #0: key length 18446744073709551615 exceeds remaining 8 bytes");

    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 70000);
    gb_bytes(&b, "k", 1);
    for (int i = 1; i < 70000; i++)
        gb_u8(&b, 'k');
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    REFUSED(&b, SI_EFORMAT, "key #0: key length 70000 exceeds the limit of 65535 bytes");

    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_u32(&b, 4);
    gb_u32(&b, 1);
    REFUSED(&b, SI_EFORMAT, "key #0: key contains a NUL byte");

    static const uint32_t bad_types[] = { 13, 99, 0xffffffffu };
    for (size_t i = 0; i < 3; i++) {
        char frag[64];
        gb_free(&b);
        gb_header(&b, 3, 0, 1);
        gb_key(&b, "x.y", bad_types[i]);
        gb_zeros(&b, 16);
        snprintf(frag, sizeof frag, "key #0 'x.y': value type %" PRIu32 " is invalid", bad_types[i]);
        REFUSED(&b, SI_EFORMAT, frag);
    }

    gb_free(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "a", 1);
    gb_key(&b, "b", 9);
    gb_u32(&b, 13);
    gb_u64(&b, 0);
    REFUSED(&b, SI_EFORMAT, "key #1 'b': array element type 13 is invalid");

    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "arr", 9);
    gb_u32(&b, 4);
    gb_u64(&b, 1ull << 62);
    gb_zeros(&b, 64);
    REFUSED(&b, SI_EFORMAT, "key #0 'arr': array count 4611686018427387904 of u32 exceeds remaining"
            " 64 bytes");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "arr", 9);
    gb_u32(&b, 12);
    gb_u64(&b, U64MAX);
    REFUSED(&b, SI_EFORMAT, "array count 18446744073709551615 of f64 exceeds remaining 0 bytes");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "tok", 9);
    gb_u32(&b, 8);
    gb_u64(&b, 1000000);                      /* 1M strings claimed, 40 bytes there */
    gb_zeros(&b, 40);
    REFUSED(&b, SI_EFORMAT, "array count 1000000 of string exceeds remaining 40 bytes (at least 8");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "tok", 9);
    gb_u32(&b, 8);
    gb_u64(&b, 3);
    gb_str(&b, "a");
    gb_u64(&b, U64MAX);
    gb_zeros(&b, 16);
    REFUSED(&b, SI_EFORMAT, "key #0 'tok': array element 1: string length 18446744073709551615"
            " exceeds remaining 16 bytes");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "nest", 9);
    gb_u32(&b, 9);
    gb_u64(&b, 1ull << 40);
    gb_zeros(&b, 24);
    REFUSED(&b, SI_EFORMAT, "array count 1099511627776 of array exceeds remaining 24 bytes");

    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "flag", 7);
    gb_u8(&b, 2);
    REFUSED(&b, SI_EFORMAT, "key #0 'flag': bool value 2 is not 0 or 1");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "flags", 9);
    gb_u32(&b, 7);
    gb_u64(&b, 3);
    gb_bytes(&b, "\1\0\7", 3);
    REFUSED(&b, SI_EFORMAT, "key #0 'flags': array element 2: bool value 7 is not 0 or 1");

    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "v", 10);
    gb_u32(&b, 5);
    REFUSED(&b, SI_EFORMAT, "key #0 'v': offset 37: truncated value (need 8 bytes, have 4)");

    gb_free(&b);
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "a", 1);
    gb_kv_str(&b, "general.name", "x");
    gb_kv_u32(&b, "a", 2);
    REFUSED(&b, SI_EFORMAT, "key #2 'a': duplicate key (first at key #0)");

    /* Control bytes in a key are shown as '?', long keys cut with "...". */
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "bad\nkey", 20);
    REFUSED(&b, SI_EFORMAT, "key #0 'bad?key': value type 20");
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "0123456789012345678901234567890123456789012345678901234567890123456789", 20);
    REFUSED(&b, SI_EFORMAT, "key #0 '012345678901234567890123456789012345678901234567...': value");

    static const struct { uint32_t vt; uint64_t v; const char *frag; } al[] = {
        { 4, 0, "key 'general.alignment': alignment 0 is not a nonzero power of two" },
        { 4, 3, "key 'general.alignment': alignment 3 is not a nonzero power of two" },
        { 4, 96, "alignment 96 is not" },
        { 5, 32, "key 'general.alignment': type i32, expected u32" },
        { 10, 32, "key 'general.alignment': type u64, expected u32" },
    };
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        gb_free(&b);
        gb_header(&b, 3, 0, 1);
        gb_key(&b, "general.alignment", al[i].vt);
        if (al[i].vt == 4 || al[i].vt == 5)
            gb_u32(&b, (uint32_t)al[i].v);
        else
            gb_u64(&b, al[i].v);
        REFUSED(&b, SI_EFORMAT, al[i].frag);
    }
    gb_free(&b);
}
END_TEST

/* ---- tensor infos and placement -------------------------------------------- */

START_TEST(test_tensors)
{
    gb b = { 0 };
    const uint64_t n8[] = { 8 }, n33[] = { 33 }, n2x0[] = { 2, 0 };
    const uint64_t huge[] = { 1ull << 32, 1ull << 32 };
    const uint64_t big0[] = { 1ull << 63 };
    const uint64_t f64big[] = { 1ull << 62 };
    const uint64_t five[] = { 1, 1, 1, 1, 1 };

    one_tensor(&b, 1, n8, 0, 0, 32);
    ACCEPTED(&b, NULL, NULL);                   /* the baseline is fine */

    one_tensor(&b, 5, five, 0, 0, 32);
    REFUSED(&b, SI_EFORMAT, "tensor #0 'w': 5 dimensions (need 1 to 4)");
    one_tensor(&b, 0, five, 0, 0, 32);
    REFUSED(&b, SI_EFORMAT, "tensor #0 'w': 0 dimensions");
    one_tensor(&b, 2, n2x0, 0, 0, 32);
    REFUSED(&b, SI_EFORMAT, "tensor #0 'w': dimension 1 is zero");
    one_tensor(&b, 2, huge, 0, 0, 32);
    REFUSED(&b, SI_EFORMAT, "tensor #0 'w': element count overflows at dimension 1");
    one_tensor(&b, 1, big0, 0, 0, 32);
    REFUSED(&b, SI_EFORMAT, "dimension 0 = 9223372036854775808 exceeds 2^63-1");
    one_tensor(&b, 1, f64big, 28, 0, 32);
    REFUSED(&b, SI_EFORMAT, "data size of 4611686018427387904 f64 elements overflows");

    static const uint32_t bad_types[] = { 4, 5, 31, 40, 1000 };
    for (size_t i = 0; i < 5; i++) {
        char frag[64];
        one_tensor(&b, 1, n8, bad_types[i], 0, 32);
        snprintf(frag, sizeof frag, "tensor #0 'w': invalid type id %" PRIu32, bad_types[i]);
        REFUSED(&b, SI_EFORMAT, frag);
    }
    one_tensor(&b, 1, n33, 8, 0, 64);
    REFUSED(&b, SI_EFORMAT, "ne[0] = 33 is not a multiple of the q8_0 block size 32");
    one_tensor(&b, 1, n8, 12, 0, 64);
    REFUSED(&b, SI_EFORMAT, "ne[0] = 8 is not a multiple of the q4_K block size 256");
    one_tensor(&b, 1, n8, 0, 16, 64);
    REFUSED(&b, SI_EFORMAT, "tensor #0 'w': data offset 16 is not a multiple of the alignment 32");

    /* Data beyond the end: exact message. */
    one_tensor(&b, 1, n8, 0, 0, 31);
    size_t data_off = b.len - 31;
    char msg[200];
    snprintf(msg, sizeof msg, "bad.gguf: tensor 'w': data [%zu, %zu) beyond end of file (size %zu)",
             data_off, data_off + 32, b.len);
    REFUSED(&b, SI_EFORMAT, msg);
    one_tensor(&b, 1, n8, 0, U64MAX - 31, 64);
    REFUSED(&b, SI_EFORMAT, "tensor 'w': data offset 18446744073709551584 + 32 bytes beyond end");
    one_tensor(&b, 1, n8, 0, 1ull << 40, 64);
    REFUSED(&b, SI_EFORMAT, "beyond end of file");

    /* Padding before the data section missing while tensors exist. */
    gb_free(&b);
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "w", 1, n8, 0, 0);
    REFUSED(&b, SI_EFORMAT, "truncated padding before the data section");

    /* Tensor name problems. */
    gb_free(&b);
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, n8, 0, 0);
    gb_tensor(&b, "a", 1, n8, 0, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    REFUSED(&b, SI_EFORMAT, "tensor #1 'a': duplicate tensor name (first at tensor #0)");
    gb_free(&b);
    gb_header(&b, 3, 1, 0);
    gb_u64(&b, 2);
    gb_bytes(&b, "w\0", 2);
    gb_u32(&b, 1);
    gb_u64(&b, 8);
    gb_u32(&b, 0);
    gb_u64(&b, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 32);
    REFUSED(&b, SI_EFORMAT, "tensor #0: tensor name contains a NUL byte");

    /* Overlap: a = [0, 64), b = [32, 64) of the data section. */
    const uint64_t n16[] = { 16 };
    gb_free(&b);
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, n16, 0, 0);
    gb_tensor(&b, "b", 1, n8, 0, 32);
    gb_pad(&b, 32);
    data_off = b.len;
    gb_zeros(&b, 64);
    snprintf(msg, sizeof msg, "bad.gguf: tensor 'b': data [%zu, %zu) overlaps tensor 'a' data"
             " [%zu, %zu)", data_off + 32, data_off + 64, data_off, data_off + 64);
    REFUSED(&b, SI_EFORMAT, msg);
    /* Same offset twice, declared in the other order. */
    gb_free(&b);
    gb_header(&b, 3, 3, 0);
    gb_tensor(&b, "c", 1, n8, 0, 64);
    gb_tensor(&b, "a", 1, n8, 0, 0);
    gb_tensor(&b, "b", 1, n8, 0, 64);
    gb_pad(&b, 32);
    gb_zeros(&b, 96);
    REFUSED(&b, SI_EFORMAT, "overlaps tensor");
    /* Touching is fine; a gap is fine. */
    gb_free(&b);
    gb_header(&b, 3, 3, 0);
    gb_tensor(&b, "c", 1, n8, 0, 128);
    gb_tensor(&b, "a", 1, n8, 0, 0);
    gb_tensor(&b, "b", 1, n8, 0, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 160);
    ACCEPTED(&b, NULL, NULL);

    /* Custom alignment applies to offsets and to the data section start. */
    gb_free(&b);
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 256);
    gb_tensor(&b, "w", 1, n8, 0, 32);
    gb_pad(&b, 256);
    gb_zeros(&b, 64);
    REFUSED(&b, SI_EFORMAT, "data offset 32 is not a multiple of the alignment 256");
    gb_free(&b);
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 256);
    gb_tensor(&b, "w", 1, n8, 0, 256);
    gb_pad(&b, 256);
    size_t start = b.len;
    gb_zeros(&b, 288);
    si_gguf *g;
    void *copy;
    ACCEPTED(&b, &g, &copy);
    ck_assert_uint_eq(si_gguf_alignment(g), 256);
    ck_assert_uint_eq(si_gguf_data_offset(g), start);
    ck_assert_uint_eq(start % 256, 0);
    ck_assert_ptr_eq(si_gguf_tensor(g, "w")->data, (uint8_t *)copy + start + 256);
    si_gguf_close(g);
    free(copy);
    gb_free(&b);
}
END_TEST

/* ---- truncation ------------------------------------------------------------ */

/* A small file with every section: scalars, a string, numeric, string and
 * nested arrays, two tensors, and no bytes after the last tensor's data, so
 * every shorter prefix is invalid. */
static void small_file(gb *b, size_t *kv_end, size_t *info_end, size_t *data_off)
{
    const uint64_t ne_a[] = { 4, 2 }, ne_b[] = { 32 };
    gb_header(b, 3, 2, 5);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "llama.block_count", 1);
    gb_key(b, "tokenizer.ggml.tokens", 9);
    gb_u32(b, 8);
    gb_u64(b, 3);
    gb_str(b, "<s>");
    gb_str(b, "");
    gb_str(b, "hello");
    gb_key(b, "scores", 9);
    gb_u32(b, 6);
    gb_u64(b, 2);
    gb_u32(b, 0x3f800000);
    gb_u32(b, 0x40000000);
    gb_key(b, "nested", 9);
    gb_u32(b, 9);
    gb_u64(b, 2);
    gb_u32(b, 0);
    gb_u64(b, 1);
    gb_u8(b, 7);
    gb_u32(b, 8);
    gb_u64(b, 1);
    gb_str(b, "x");
    *kv_end = b->len;
    gb_tensor(b, "a", 2, ne_a, 1, 0);       /* f16: 16 bytes */
    gb_tensor(b, "b", 1, ne_b, 8, 32);      /* q8_0: 34 bytes */
    *info_end = b->len;
    gb_pad(b, 32);
    *data_off = b->len;
    for (int i = 0; i < 66; i++)
        gb_u8(b, (uint8_t)(i * 7 + 1));
}

START_TEST(test_every_prefix)
{
    gb b = { 0 };
    size_t kv_end, info_end, data_off;
    small_file(&b, &kv_end, &info_end, &data_off);
    ACCEPTED(&b, NULL, NULL);

    size_t full = b.len;
    for (size_t n = 0; n < full; n++) {
        b.len = n;
        uint8_t *copy = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, b.p, n);
        si_gguf *g = NULL;
        si_err err = { "" };
        int rc = si_gguf_open_memory(copy, n, "cut.gguf", &g, &err);
        ck_assert_msg(rc == SI_EFORMAT, "prefix %zu of %zu: status %d (%s)", n, full, rc, err.msg);
        ck_assert_msg(g == NULL && strncmp(err.msg, "cut.gguf: ", 10) == 0 &&
                      strlen(err.msg) > 12, "prefix %zu: message '%s'", n, err.msg);
        LLVMFuzzerTestOneInput(copy, n);
        free(copy);
    }
    /* What each section boundary says. */
    b.len = 20;
    REFUSED(&b, SI_EFORMAT, "offset 0: truncated header (need 24 bytes, have 20)");
    b.len = 24;
    REFUSED(&b, SI_EFORMAT, "header: key count 5 exceeds what the remaining 0 bytes can hold");
    b.len = 152;                                   /* counts no longer fit */
    REFUSED(&b, SI_EFORMAT, "header: 5 keys and 2 tensors cannot fit in the remaining 128 bytes");
    b.len = 170;                                   /* 3 tokens no longer fit */
    REFUSED(&b, SI_EFORMAT, "key #2 'tokenizer.ggml.tokens': array count 3 of string exceeds"
            " remaining 23 bytes (at least 8 per element)");
    b.len = 176;                                   /* inside the third token */
    REFUSED(&b, SI_EFORMAT, "key #2 'tokenizer.ggml.tokens': array element 2: string length 5"
            " exceeds remaining 2 bytes");
    b.len = kv_end;
    REFUSED(&b, SI_EFORMAT, "2 tensor infos cannot fit in the remaining 0 bytes");
    b.len = kv_end + 41 + 25 + 5;                  /* inside b's offset */
    REFUSED(&b, SI_EFORMAT, "tensor #1 'b': offset");
    REFUSED(&b, SI_EFORMAT, "truncated data offset (need 8 bytes, have 5)");
    ck_assert_uint_ne(info_end % 32, 0);
    b.len = info_end;
    REFUSED(&b, SI_EFORMAT, "truncated padding before the data section");
    b.len = data_off;
    REFUSED(&b, SI_EFORMAT, "tensor 'a': data [");
    b.len = full - 1;
    REFUSED(&b, SI_EFORMAT, "tensor 'b': data [");
    gb_free(&b);
}
END_TEST

/* A vocabulary-only file may end right after its metadata, unpadded. */
START_TEST(test_vocab_only)
{
    gb b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2!");
    ck_assert_uint_ne(b.len % 32, 0);
    si_gguf *g;
    void *copy;
    ACCEPTED(&b, &g, &copy);
    ck_assert_uint_eq(si_gguf_n_tensors(g), 0);
    ck_assert_uint_eq(si_gguf_data_offset(g), b.len);
    si_gguf_close(g);
    free(copy);
    gb_pad(&b, 32);
    ACCEPTED(&b, &g, &copy);
    ck_assert_uint_eq(si_gguf_data_offset(g), b.len);
    si_gguf_close(g);
    free(copy);
    gb_free(&b);
}
END_TEST

/* ---- nested arrays ----------------------------------------------------------- */

/* `levels` arrays, each holding one array, the innermost one u8 {42}. */
static void deep_array(gb *b, int levels)
{
    gb_header(b, 3, 0, 1);
    gb_key(b, "deep", 9);
    for (int i = 1; i < levels; i++) {
        gb_u32(b, 9);
        gb_u64(b, 1);
    }
    gb_u32(b, 0);
    gb_u64(b, 1);
    gb_u8(b, 42);
}

START_TEST(test_nested)
{
    gb b = { 0 };
    gb_header(&b, 3, 0, 2);
    gb_key(&b, "nest.u32", 9);                 /* [[1, 2, 3], [], [["x"]]]: mixed kids */
    gb_u32(&b, 9);
    gb_u64(&b, 3);
    gb_u32(&b, 4);
    gb_u64(&b, 3);
    gb_u32(&b, 1);
    gb_u32(&b, 2);
    gb_u32(&b, 3);
    gb_u32(&b, 4);
    gb_u64(&b, 0);
    gb_u32(&b, 9);
    gb_u64(&b, 1);
    gb_u32(&b, 8);
    gb_u64(&b, 1);
    gb_str(&b, "x");
    gb_key(&b, "nest.str", 9);                 /* [["ab", "c"]] */
    gb_u32(&b, 9);
    gb_u64(&b, 1);
    gb_u32(&b, 8);
    gb_u64(&b, 2);
    gb_str(&b, "ab");
    gb_str(&b, "c");

    si_gguf *g;
    void *copy;
    ACCEPTED(&b, &g, &copy);
    const si_gguf_value *v = si_gguf_get(g, "nest.u32");
    ck_assert_ptr_nonnull(v);
    ck_assert_uint_eq(v->type, SI_GGUF_ARRAY);
    ck_assert_uint_eq(v->v.arr.type, SI_GGUF_ARRAY);
    ck_assert_uint_eq(v->v.arr.n, 3);
    ck_assert_ptr_null(v->v.arr.data);
    si_gguf_value k0, k1, k2, e;
    ck_assert_int_eq(si_gguf_arr_get(v, 0, &k0), SI_OK);
    ck_assert_int_eq(si_gguf_arr_get(v, 1, &k1), SI_OK);
    ck_assert_int_eq(si_gguf_arr_get(v, 2, &k2), SI_OK);
    ck_assert_int_eq(si_gguf_arr_get(v, 3, &e), SI_ERANGE);
    ck_assert_uint_eq(k0.type, SI_GGUF_ARRAY);
    ck_assert_uint_eq(k0.v.arr.type, SI_GGUF_U32);
    ck_assert_uint_eq(k0.v.arr.n, 3);
    ck_assert_ptr_nonnull(k0.v.arr.data);
    for (uint64_t i = 0; i < 3; i++) {
        ck_assert_int_eq(si_gguf_arr_get(&k0, i, &e), SI_OK);
        ck_assert_uint_eq(e.type, SI_GGUF_U32);
        ck_assert_uint_eq(e.v.u, i + 1);
    }
    ck_assert_uint_eq(k1.v.arr.n, 0);
    ck_assert_int_eq(si_gguf_arr_get(&k1, 0, &e), SI_ERANGE);
    ck_assert_uint_eq(k2.v.arr.type, SI_GGUF_ARRAY);
    si_gguf_value inner;
    ck_assert_int_eq(si_gguf_arr_get(&k2, 0, &inner), SI_OK);
    ck_assert_int_eq(si_gguf_arr_get(&inner, 0, &e), SI_OK);
    ck_assert_uint_eq(e.type, SI_GGUF_STRING);
    ck_assert_uint_eq(e.v.s.len, 1);
    ck_assert_int_eq(e.v.s.ptr[0], 'x');

    v = si_gguf_get(g, "nest.str");
    ck_assert_int_eq(si_gguf_arr_get(v, 0, &k0), SI_OK);
    ck_assert_uint_eq(k0.v.arr.type, SI_GGUF_STRING);
    ck_assert_int_eq(si_gguf_arr_get(&k0, 1, &e), SI_OK);
    ck_assert_uint_eq(e.v.s.len, 1);
    ck_assert_int_eq(memcmp(e.v.s.ptr, "c", 1), 0);
    ck_assert_int_eq(si_gguf_arr_get(&k0, 0, &e), SI_OK);
    ck_assert_int_eq(memcmp(e.v.s.ptr, "ab", 2), 0);
    /* Not an array / NULL: refused, no crash. */
    ck_assert_int_eq(si_gguf_arr_get(&e, 0, &k1), SI_EINVAL);
    ck_assert_int_eq(si_gguf_arr_get(NULL, 0, &k1), SI_EINVAL);
    si_gguf_close(g);
    free(copy);

    /* Depth: 8 levels accepted, 9 refused. */
    gb_free(&b);
    deep_array(&b, SI_GGUF_MAX_DEPTH_TEST);
    ACCEPTED(&b, &g, &copy);
    v = si_gguf_get(g, "deep");
    si_gguf_value cur = *v;
    for (int i = 1; i < SI_GGUF_MAX_DEPTH_TEST; i++) {
        ck_assert_uint_eq(cur.v.arr.type, SI_GGUF_ARRAY);
        ck_assert_int_eq(si_gguf_arr_get(&cur, 0, &e), SI_OK);
        cur = e;
    }
    ck_assert_uint_eq(cur.v.arr.type, SI_GGUF_U8);
    ck_assert_int_eq(si_gguf_arr_get(&cur, 0, &e), SI_OK);
    ck_assert_uint_eq(e.v.u, 42);
    si_gguf_close(g);
    free(copy);
    gb_free(&b);
    deep_array(&b, SI_GGUF_MAX_DEPTH_TEST + 1);
    REFUSED(&b, SI_EFORMAT, "key #0 'deep': arrays nested deeper than 8 levels");
    gb_free(&b);
    deep_array(&b, 1000);
    REFUSED(&b, SI_EFORMAT, "arrays nested deeper than 8 levels");
    gb_free(&b);
}
END_TEST

TCase *gguf_tcase_malformed(void)
{
    TCase *tc = tcase_create("malformed");
    tcase_add_test(tc, test_header);
    tcase_add_test(tc, test_kv);
    tcase_add_test(tc, test_tensors);
    return tc;
}

TCase *gguf_tcase_truncated(void)
{
    TCase *tc = tcase_create("truncated");
    tcase_add_test(tc, test_every_prefix);
    tcase_add_test(tc, test_vocab_only);
    return tc;
}

TCase *gguf_tcase_nested(void)
{
    TCase *tc = tcase_create("nested");
    tcase_add_test(tc, test_nested);
    return tc;
}
