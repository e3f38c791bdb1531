/* tests/gguf/check_gguf.c — the GGUF reader and writer: writer round trip
 * and exact layout, writer errors, typed getters, real files (the copies in
 * tests/data/gguf always, $SI_SHARED_DATA/gguf when present), the fuzz
 * corpus, and the cost of opening a large vocabulary.  Malformed inputs are
 * in check_gguf_bad.c. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_gguf.h"
#include "quant.h"

/* ---- helpers ------------------------------------------------------------------- */

static char *tmp_path(void)
{
    const char *dir = getenv("TMPDIR");
    char *p = malloc(4096);
    ck_assert_ptr_nonnull(p);
    snprintf(p, 4096, "%s/check_gguf-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(p);
    ck_assert_msg(fd >= 0, "mkstemp %s: %s", p, strerror(errno));
    close(fd);
    return p;
}

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

static const char *env_dir(const char *var)
{
    const char *v = getenv(var);
    return v != NULL && *v != '\0' ? v : NULL;
}

static const si_gguf_value *must_get(const si_gguf *g, const char *key, uint32_t type)
{
    const si_gguf_value *v = si_gguf_get(g, key);
    ck_assert_msg(v != NULL, "key %s missing", key);
    ck_assert_msg(v->type == type, "key %s: type %u, want %u", key, v->type, type);
    return v;
}

static uint8_t pattern(size_t t, size_t i) { return (uint8_t)(i * 31 + 7 + t * 101); }

/* ---- writer round trip ---------------------------------------------------------- */

typedef struct rt_tensor {
    const char *name;
    uint32_t    type, ndim;
    int64_t     ne[4];
    uint64_t    nbytes;
} rt_tensor;

static const rt_tensor rt_tensors[] = {
    { "f32",  SI_TYPE_F32,  2, { 5, 3, 1, 1 },     60 },
    { "f16",  SI_TYPE_F16,  3, { 8, 2, 3, 1 },     96 },
    { "q8",   SI_TYPE_Q8_0, 2, { 64, 3, 1, 1 },    2 * 34 * 3 },
    { "q4k",  SI_TYPE_Q4_K, 4, { 256, 2, 1, 2 },   144 * 4 },
};
#define RT_N (sizeof rt_tensors / sizeof rt_tensors[0])

static const uint8_t  a_u8[]  = { 0, 200, 255 };
static const int8_t   a_i8[]  = { -128, 0, 127 };
static const uint16_t a_u16[] = { 1, 65535, 300 };
static const int16_t  a_i16[] = { -32768, 5, 32767 };
static const uint32_t a_u32[] = { 4000000000u, 0, 7 };
static const int32_t  a_i32[] = { INT32_MIN, -1, INT32_MAX };
static const float    a_f32[] = { 1.5f, -0.0f, 3.25e-5f };
static const uint8_t  a_bool[] = { 1, 0, 1 };
static const uint64_t a_u64[] = { UINT64_MAX, 1, 1ull << 40 };
static const int64_t  a_i64[] = { INT64_MIN, -2, INT64_MAX };
static const double   a_f64[] = { -2.5e300, 0.1, 42.0 };

static const struct { const char *key; uint32_t type; const void *data; } rt_arrays[] = {
    { "arr.u8", SI_GGUF_U8, a_u8 },    { "arr.i8", SI_GGUF_I8, a_i8 },
    { "arr.u16", SI_GGUF_U16, a_u16 }, { "arr.i16", SI_GGUF_I16, a_i16 },
    { "arr.u32", SI_GGUF_U32, a_u32 }, { "arr.i32", SI_GGUF_I32, a_i32 },
    { "arr.f32", SI_GGUF_F32, a_f32 }, { "arr.bool", SI_GGUF_BOOL, a_bool },
    { "arr.u64", SI_GGUF_U64, a_u64 }, { "arr.i64", SI_GGUF_I64, a_i64 },
    { "arr.f64", SI_GGUF_F64, a_f64 },
};
#define RT_NARR (sizeof rt_arrays / sizeof rt_arrays[0])

static void write_roundtrip_file(const char *path)
{
    si_gguf_writer *w;
    si_err err;
    ck_assert_int_eq(si_gguf_writer_open(path, &w, &err), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u8(w, "s.u8", 200), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_i8(w, "s.i8", -100), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u16(w, "s.u16", 60000), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_i16(w, "s.i16", -30000), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "s.u32", 4000000000u), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_i32(w, "s.i32", -2000000000), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u64(w, "s.u64", (1ull << 63) + 5), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_i64(w, "s.i64", INT64_MIN + 1), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_f32(w, "s.f32", 1.5f), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_f64(w, "s.f64", -2.25e300), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_bool(w, "s.bool", true), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_str(w, "s.str", "h\xc3\xa9llo"), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "general.alignment", 64), SI_OK);
    for (size_t i = 0; i < RT_NARR; i++)
        ck_assert_int_eq(si_gguf_writer_set_arr(w, rt_arrays[i].key, rt_arrays[i].type,
                                                rt_arrays[i].data, 3), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_arr(w, "arr.empty", SI_GGUF_U32, NULL, 0), SI_OK);
    const char *strs[] = { "a", "", "tokens" };
    ck_assert_int_eq(si_gguf_writer_set_arr_str(w, "arr.str", strs, 3), SI_OK);
    const si_str strn[] = { { "x\0y", 3 }, { NULL, 0 } };
    ck_assert_int_eq(si_gguf_writer_set_arr_strn(w, "arr.strn", strn, 2), SI_OK);

    for (size_t t = 0; t < RT_N; t++)
        ck_assert_int_eq(si_gguf_writer_add_tensor(w, rt_tensors[t].name, rt_tensors[t].type,
                                                   rt_tensors[t].ndim, rt_tensors[t].ne), SI_OK);
    ck_assert_str_eq(si_gguf_writer_error(w), "");

    /* f32 in one call, f16 in three, q8 and q4k together in one. */
    uint8_t buf[1024];
    for (size_t i = 0; i < 60; i++)
        buf[i] = pattern(0, i);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 60), SI_OK);
    for (size_t i = 0; i < 96; i++)
        buf[i] = pattern(1, i);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 10), SI_OK);
    ck_assert_int_eq(si_gguf_writer_write(w, buf + 10, 50), SI_OK);
    ck_assert_int_eq(si_gguf_writer_write(w, buf + 60, 36), SI_OK);
    for (size_t i = 0; i < 204; i++)
        buf[i] = pattern(2, i);
    for (size_t i = 0; i < 576; i++)
        buf[204 + i] = pattern(3, i);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 204 + 576), SI_OK);
    int rc = si_gguf_writer_close(w, &err);
    ck_assert_msg(rc == SI_OK, "close: %s", err.msg);
}

static void check_roundtrip(const si_gguf *g, uint64_t file_size, const uint8_t *base)
{
    ck_assert_uint_eq(si_gguf_version(g), 3);
    ck_assert_uint_eq(si_gguf_alignment(g), 64);
    ck_assert_uint_eq(si_gguf_n_kv(g), 13 + RT_NARR + 3);
    ck_assert_str_eq(si_gguf_kv_key(g, 0), "s.u8");
    ck_assert_str_eq(si_gguf_kv_key(g, 12), "general.alignment");
    ck_assert_str_eq(si_gguf_kv_key(g, 13), "arr.u8");

    ck_assert_uint_eq(must_get(g, "s.u8", SI_GGUF_U8)->v.u, 200);
    ck_assert_int_eq(must_get(g, "s.i8", SI_GGUF_I8)->v.i, -100);
    ck_assert_uint_eq(must_get(g, "s.u16", SI_GGUF_U16)->v.u, 60000);
    ck_assert_int_eq(must_get(g, "s.i16", SI_GGUF_I16)->v.i, -30000);
    ck_assert_uint_eq(must_get(g, "s.u32", SI_GGUF_U32)->v.u, 4000000000u);
    ck_assert_int_eq(must_get(g, "s.i32", SI_GGUF_I32)->v.i, -2000000000);
    ck_assert_uint_eq(must_get(g, "s.u64", SI_GGUF_U64)->v.u, (1ull << 63) + 5);
    ck_assert_int_eq(must_get(g, "s.i64", SI_GGUF_I64)->v.i, INT64_MIN + 1);
    ck_assert(must_get(g, "s.f32", SI_GGUF_F32)->v.f == 1.5);
    ck_assert(must_get(g, "s.f64", SI_GGUF_F64)->v.f == -2.25e300);
    ck_assert_uint_eq(must_get(g, "s.bool", SI_GGUF_BOOL)->v.u, 1);
    const si_gguf_value *s = must_get(g, "s.str", SI_GGUF_STRING);
    ck_assert_uint_eq(s->v.s.len, 6);
    ck_assert_int_eq(memcmp(s->v.s.ptr, "h\xc3\xa9llo", 6), 0);
    ck_assert_uint_eq(must_get(g, "general.alignment", SI_GGUF_U32)->v.u, 64);

    for (size_t i = 0; i < RT_NARR; i++) {
        const si_gguf_value *a = must_get(g, rt_arrays[i].key, SI_GGUF_ARRAY);
        uint32_t t = rt_arrays[i].type;
        ck_assert_uint_eq(a->v.arr.type, t);
        ck_assert_uint_eq(a->v.arr.n, 3);
        size_t esz = t == SI_GGUF_U8 || t == SI_GGUF_I8 || t == SI_GGUF_BOOL ? 1
                   : t == SI_GGUF_U16 || t == SI_GGUF_I16 ? 2
                   : t == SI_GGUF_U64 || t == SI_GGUF_I64 || t == SI_GGUF_F64 ? 8 : 4;
        ck_assert_int_eq(memcmp(a->v.arr.data, rt_arrays[i].data, 3 * esz), 0);
        for (uint64_t k = 0; k < 3; k++) {
            si_gguf_value e;
            ck_assert_int_eq(si_gguf_arr_get(a, k, &e), SI_OK);
            ck_assert_uint_eq(e.type, t);
            switch (t) {
            case SI_GGUF_U8:   ck_assert_uint_eq(e.v.u, a_u8[k]); break;
            case SI_GGUF_I8:   ck_assert_int_eq(e.v.i, a_i8[k]); break;
            case SI_GGUF_U16:  ck_assert_uint_eq(e.v.u, a_u16[k]); break;
            case SI_GGUF_I16:  ck_assert_int_eq(e.v.i, a_i16[k]); break;
            case SI_GGUF_U32:  ck_assert_uint_eq(e.v.u, a_u32[k]); break;
            case SI_GGUF_I32:  ck_assert_int_eq(e.v.i, a_i32[k]); break;
            case SI_GGUF_F32:  ck_assert(e.v.f == a_f32[k] && !signbit(e.v.f) == !signbit(a_f32[k])); break;
            case SI_GGUF_BOOL: ck_assert_uint_eq(e.v.u, a_bool[k]); break;
            case SI_GGUF_U64:  ck_assert_uint_eq(e.v.u, a_u64[k]); break;
            case SI_GGUF_I64:  ck_assert_int_eq(e.v.i, a_i64[k]); break;
            case SI_GGUF_F64:  ck_assert(e.v.f == a_f64[k]); break;
            default:           ck_abort();
            }
        }
        si_gguf_value e;
        ck_assert_int_eq(si_gguf_arr_get(a, 3, &e), SI_ERANGE);
    }
    const si_gguf_value *a = must_get(g, "arr.empty", SI_GGUF_ARRAY);
    ck_assert_uint_eq(a->v.arr.n, 0);
    a = must_get(g, "arr.str", SI_GGUF_ARRAY);
    ck_assert_uint_eq(a->v.arr.type, SI_GGUF_STRING);
    ck_assert_ptr_null(a->v.arr.data);
    const char *want[] = { "a", "", "tokens" };
    for (uint64_t k = 0; k < 3; k++) {
        si_gguf_value e;
        ck_assert_int_eq(si_gguf_arr_get(a, k, &e), SI_OK);
        ck_assert_uint_eq(e.type, SI_GGUF_STRING);
        ck_assert_uint_eq(e.v.s.len, strlen(want[k]));
        ck_assert_int_eq(memcmp(e.v.s.ptr, want[k], e.v.s.len), 0);
    }
    a = must_get(g, "arr.strn", SI_GGUF_ARRAY);
    si_gguf_value e;
    ck_assert_int_eq(si_gguf_arr_get(a, 0, &e), SI_OK);
    ck_assert_uint_eq(e.v.s.len, 3);
    ck_assert_int_eq(memcmp(e.v.s.ptr, "x\0y", 3), 0);
    ck_assert_int_eq(si_gguf_arr_get(a, 1, &e), SI_OK);
    ck_assert_uint_eq(e.v.s.len, 0);

    ck_assert_uint_eq(si_gguf_n_tensors(g), RT_N);
    uint64_t off = 0;
    ck_assert_uint_eq(si_gguf_data_offset(g) % 64, 0);
    for (size_t t = 0; t < RT_N; t++) {
        const si_tensor_info *ti = si_gguf_tensor_at(g, t);
        ck_assert_ptr_eq(si_gguf_tensor(g, rt_tensors[t].name), ti);
        ck_assert_str_eq(ti->name, rt_tensors[t].name);
        ck_assert_uint_eq(ti->type, rt_tensors[t].type);
        ck_assert_uint_eq(ti->ndim, rt_tensors[t].ndim);
        for (int d = 0; d < 4; d++)
            ck_assert_int_eq(ti->ne[d], rt_tensors[t].ne[d]);
        ck_assert_uint_eq(ti->nbytes, rt_tensors[t].nbytes);
        ck_assert_uint_eq(ti->offset, off);
        ck_assert_ptr_eq(ti->data, base + si_gguf_data_offset(g) + off);
        ck_assert_uint_eq((uintptr_t)ti->data % 64, 0);     /* base is page/malloc aligned */
        const uint8_t *d = ti->data;
        for (size_t i = 0; i < ti->nbytes; i++)
            ck_assert_msg(d[i] == pattern(t, i), "tensor %s byte %zu", ti->name, i);
        off += (ti->nbytes + 63) / 64 * 64;
    }
    ck_assert_ptr_null(si_gguf_tensor(g, "nope"));
    ck_assert_ptr_null(si_gguf_tensor_at(g, RT_N));
    /* llama.cpp pads after the last tensor too. */
    ck_assert_uint_eq(file_size, si_gguf_data_offset(g) + off);
    ck_assert_uint_eq(si_gguf_file_size(g), file_size);
}

START_TEST(test_roundtrip)
{
    char *path = tmp_path();
    write_roundtrip_file(path);

    si_gguf *g;
    si_err err;
    int rc = si_gguf_open(path, &g, &err);
    ck_assert_msg(rc == SI_OK, "%s", err.msg);
    ck_assert_str_eq(si_gguf_path(g), path);
    size_t size;
    uint8_t *bytes = read_all(path, &size);
    const si_tensor_info *t0 = si_gguf_tensor_at(g, 0);
    check_roundtrip(g, size, (const uint8_t *)t0->data - si_gguf_data_offset(g));
    si_gguf_close(g);

    /* Same bytes through the memory entry point (malloc is 16-aligned: the
     * 64-byte data alignment is relative to the image start). */
    uint8_t *aligned = NULL;
    ck_assert_int_eq(posix_memalign((void **)&aligned, 64, size), 0);
    memcpy(aligned, bytes, size);
    ck_assert_int_eq(si_gguf_open_memory(aligned, size, "mem", &g, &err), SI_OK);
    check_roundtrip(g, size, aligned);
    si_gguf_close(g);
    LLVMFuzzerTestOneInput(bytes, size);
    free(aligned);
    free(bytes);
    unlink(path);
    free(path);
}
END_TEST

/* The writer's bytes, exactly: llama.cpp's layout. */
START_TEST(test_writer_layout)
{
    char *path = tmp_path();
    si_gguf_writer *w;
    si_err err;
    ck_assert_int_eq(si_gguf_writer_open(path, &w, &err), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "a", 7), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_str(w, "b", "xy"), SI_OK);
    const char *strs[] = { "p", "qr" };
    ck_assert_int_eq(si_gguf_writer_set_arr_str(w, "c", strs, 2), SI_OK);
    const int16_t i16[] = { -2, 3 };
    ck_assert_int_eq(si_gguf_writer_set_arr(w, "d", SI_GGUF_I16, i16, 2), SI_OK);
    const int64_t ne1[] = { 2 }, ne2[] = { 3, 1 };
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 1, ne1), SI_OK);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "u", SI_TYPE_I8, 2, ne2), SI_OK);
    const uint8_t data[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
    ck_assert_int_eq(si_gguf_writer_write(w, data, sizeof data), SI_OK);
    ck_assert_int_eq(si_gguf_writer_close(w, &err), SI_OK);

    gb b = { 0 };
    gb_header(&b, 3, 2, 4);
    gb_kv_u32(&b, "a", 7);
    gb_kv_str(&b, "b", "xy");
    gb_key(&b, "c", SI_GGUF_ARRAY);
    gb_u32(&b, SI_GGUF_STRING);
    gb_u64(&b, 2);
    gb_str(&b, "p");
    gb_str(&b, "qr");
    gb_key(&b, "d", SI_GGUF_ARRAY);
    gb_u32(&b, SI_GGUF_I16);
    gb_u64(&b, 2);
    gb_u16(&b, 0xfffe);
    gb_u16(&b, 3);
    const uint64_t une1[] = { 2 }, une2[] = { 3, 1 };
    gb_tensor(&b, "t", 1, une1, SI_TYPE_F32, 0);
    gb_tensor(&b, "u", 2, une2, SI_TYPE_I8, 32);
    gb_pad(&b, 32);
    gb_bytes(&b, data, 8);
    gb_pad(&b, 32);
    gb_bytes(&b, data + 8, 3);
    gb_pad(&b, 32);

    size_t size;
    uint8_t *got = read_all(path, &size);
    ck_assert_uint_eq(size, b.len);
    for (size_t i = 0; i < size; i++)
        ck_assert_msg(got[i] == b.p[i], "byte %zu: %02x, want %02x", i, got[i], b.p[i]);
    free(got);
    gb_free(&b);

    /* Metadata only: written at close, no data section padding needed. */
    ck_assert_int_eq(si_gguf_writer_open(path, &w, &err), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"), SI_OK);
    ck_assert_int_eq(si_gguf_writer_close(w, &err), SI_OK);
    si_gguf *g;
    ck_assert_int_eq(si_gguf_open(path, &g, &err), SI_OK);
    ck_assert_uint_eq(si_gguf_n_tensors(g), 0);
    ck_assert_uint_eq(si_gguf_n_kv(g), 1);
    ck_assert_uint_eq(si_gguf_data_offset(g), si_gguf_file_size(g));
    si_gguf_close(g);
    unlink(path);
    free(path);
}
END_TEST

/* ---- writer errors ----------------------------------------------------------------- */

static si_gguf_writer *wopen(const char *path)
{
    si_gguf_writer *w;
    si_err err;
    ck_assert_int_eq(si_gguf_writer_open(path, &w, &err), SI_OK);
    return w;
}

/* Asserts the writer's remembered error (unless the error is one that only
 * close can see) and that close reports it. */
static void wclose_fails(si_gguf_writer *w, int code, const char *frag, bool at_close, int line)
{
    const char *m = si_gguf_writer_error(w);
    if (at_close)
        ck_assert_msg(m[0] == '\0', "line %d: early writer error '%s'", line, m);
    else
        ck_assert_msg(strstr(m, frag) != NULL, "line %d: writer error '%s' lacks '%s'", line, m,
                      frag);
    si_err err = { "" };
    int rc = si_gguf_writer_close(w, &err);
    ck_assert_msg(rc == code, "line %d: close %d, want %d (%s)", line, rc, code, err.msg);
    ck_assert_msg(strstr(err.msg, frag) != NULL, "line %d: close message '%s' lacks '%s'", line,
                  err.msg, frag);
}
#define WFAILS(w, code, frag) wclose_fails((w), (code), (frag), false, __LINE__)
#define WFAILS_AT_CLOSE(w, code, frag) wclose_fails((w), (code), (frag), true, __LINE__)

START_TEST(test_writer_errors)
{
    char *path = tmp_path();
    const int64_t ne8[] = { 8 }, ne33[] = { 33 }, ne0[] = { 4, 0 };
    const int64_t ne5[] = { 1, 1, 1, 1, 1 };
    si_gguf_writer *w;

    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "k", 1), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u8(w, "k", 2), SI_EINVAL);
    ck_assert_int_eq(si_gguf_writer_set_u8(w, "other", 2), SI_EINVAL);   /* sticky */
    ck_assert_int_eq(si_gguf_writer_write(w, "x", 1), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "key 'k': duplicate key");

    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "general.alignment", 0), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "general.alignment': 0 is not a nonzero power of two");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "general.alignment", 3), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "3 is not a nonzero power of two");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_set_i32(w, "general.alignment", 32), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "key 'general.alignment': type i32, must be u32");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "general.alignment", 64), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "must be set before the first tensor");

    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", 4, 1, ne8), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "tensor 't': invalid type id 4");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_Q8_0, 1, ne33), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "ne[0] = 33 is not a multiple of the q8_0 block size 32");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 5, ne5), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "5 dimensions (need 1 to 4)");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 0, ne5), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "0 dimensions");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 2, ne0), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "dimension 1 = 0 (must be >= 1)");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F16, 1, ne8), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "tensor 't': duplicate tensor name");

    uint8_t buf[64] = { 0 };
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 33), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "1 bytes of data beyond the last declared tensor");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "a", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "b", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 34), SI_OK);
    WFAILS_AT_CLOSE(w, SI_EINVAL, "tensor 'b': got 2 of 32 bytes of data");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "a", SI_TYPE_F32, 1, ne8), SI_OK);
    WFAILS_AT_CLOSE(w, SI_EINVAL, "tensor 'a': got 0 of 32 bytes");

    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "a", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 4), SI_OK);
    ck_assert_int_eq(si_gguf_writer_set_u32(w, "late", 1), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "key 'late': metadata set after tensor data was written");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "a", SI_TYPE_F32, 1, ne8), SI_OK);
    ck_assert_int_eq(si_gguf_writer_write(w, buf, 4), SI_OK);
    ck_assert_int_eq(si_gguf_writer_add_tensor(w, "b", SI_TYPE_F32, 1, ne8), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "tensor 'b': declared after tensor data was written");

    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_set_arr(w, "s", SI_GGUF_STRING, buf, 1), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "key 's': array element type 8 (string) is not a numeric type");
    w = wopen(path);
    const uint8_t bools[] = { 1, 2 };
    ck_assert_int_eq(si_gguf_writer_set_arr(w, "b", SI_GGUF_BOOL, bools, 2), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "key 'b': bool element 1 is not 0 or 1");
    w = wopen(path);
    ck_assert_int_eq(si_gguf_writer_set_str(w, "s", NULL), SI_EINVAL);
    WFAILS(w, SI_EINVAL, "key 's': NULL string");

    si_err err = { "" };
    struct stat st;
    if (stat("/dev/full", &st) == 0) {             /* a disk that is always full */
        ck_assert_int_eq(si_gguf_writer_open("/dev/full", &w, &err), SI_OK);
        ck_assert_int_eq(si_gguf_writer_set_str(w, "k", "v"), SI_OK);
        ck_assert_int_eq(si_gguf_writer_close(w, &err), SI_EIO);
        ck_assert_ptr_nonnull(strstr(err.msg, "/dev/full: "));
        static uint8_t big[1 << 20];
        const int64_t ne_big[] = { 1 << 20 };
        ck_assert_int_eq(si_gguf_writer_open("/dev/full", &w, &err), SI_OK);
        ck_assert_int_eq(si_gguf_writer_add_tensor(w, "t", SI_TYPE_I8, 1, ne_big), SI_OK);
        ck_assert_int_eq(si_gguf_writer_write(w, big, sizeof big), SI_EIO);
        WFAILS(w, SI_EIO, "/dev/full: write failed");
    }
    ck_assert_int_eq(si_gguf_writer_open("/nonexistent-dir/x.gguf", &w, &err), SI_EIO);
    ck_assert_ptr_null(w);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent-dir/x.gguf: cannot create"));
    ck_assert_int_eq(si_gguf_writer_close(NULL, NULL), SI_OK);
    unlink(path);
    free(path);
}
END_TEST

/* ---- typed getters and odd calls ------------------------------------------------------ */

START_TEST(test_getters)
{
    char *path = tmp_path();
    si_gguf_writer *w = wopen(path);
    si_gguf_writer_set_u8(w, "u8", 5);
    si_gguf_writer_set_i32(w, "neg", -1);
    si_gguf_writer_set_i64(w, "i64", 7);
    si_gguf_writer_set_u64(w, "big", 1ull << 40);
    si_gguf_writer_set_u64(w, "odd", (1ull << 24) + 1);
    si_gguf_writer_set_i64(w, "nexact", -(1ll << 30));
    si_gguf_writer_set_f32(w, "half", 0.5f);
    si_gguf_writer_set_f64(w, "quarter", 0.25);
    si_gguf_writer_set_f64(w, "tenth", 0.1);
    si_gguf_writer_set_f64(w, "huge", 1e300);
    si_gguf_writer_set_str(w, "name", "qwen35");
    si_gguf_writer_set_bool(w, "flag", true);
    si_err err = { "" };
    ck_assert_int_eq(si_gguf_writer_close(w, &err), SI_OK);

    si_gguf *g;
    ck_assert_int_eq(si_gguf_open(path, &g, &err), SI_OK);
    uint32_t u = 0;
    float f = 0;
    si_str s = { 0 };
    ck_assert_int_eq(si_gguf_get_u32(g, "u8", &u, &err), SI_OK);
    ck_assert_uint_eq(u, 5);
    ck_assert_int_eq(si_gguf_get_u32(g, "i64", &u, &err), SI_OK);
    ck_assert_uint_eq(u, 7);
    ck_assert_int_eq(si_gguf_get_u32(g, "neg", &u, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'neg': value -1 does not fit in u32"));
    ck_assert_int_eq(si_gguf_get_u32(g, "big", &u, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "value 1099511627776 does not fit in u32"));
    ck_assert_int_eq(si_gguf_get_u32(g, "name", &u, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'name': type string, expected an integer"));
    ck_assert_int_eq(si_gguf_get_u32(g, "flag", &u, &err), SI_EFORMAT);
    ck_assert_int_eq(si_gguf_get_u32(g, "missing", &u, &err), SI_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'missing' not found"));
    ck_assert_ptr_nonnull(strstr(err.msg, path));

    ck_assert_int_eq(si_gguf_get_f32(g, "half", &f, &err), SI_OK);
    ck_assert(f == 0.5f);
    ck_assert_int_eq(si_gguf_get_f32(g, "quarter", &f, &err), SI_OK);
    ck_assert(f == 0.25f);
    ck_assert_int_eq(si_gguf_get_f32(g, "u8", &f, &err), SI_OK);
    ck_assert(f == 5.0f);
    ck_assert_int_eq(si_gguf_get_f32(g, "nexact", &f, &err), SI_OK);
    ck_assert(f == -1073741824.0f);
    ck_assert_int_eq(si_gguf_get_f32(g, "big", &f, &err), SI_OK);   /* 2^40 is exact */
    ck_assert_int_eq(si_gguf_get_f32(g, "odd", &f, &err), SI_EFORMAT);
    ck_assert_int_eq(si_gguf_get_f32(g, "tenth", &f, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'tenth': f64 value 0.10000000000000001 is not exact"));
    ck_assert_int_eq(si_gguf_get_f32(g, "huge", &f, &err), SI_EFORMAT);
    ck_assert_int_eq(si_gguf_get_f32(g, "name", &f, &err), SI_EFORMAT);
    ck_assert_int_eq(si_gguf_get_f32(g, "missing", &f, &err), SI_ENOTFOUND);

    ck_assert_int_eq(si_gguf_get_str(g, "name", &s, &err), SI_OK);
    ck_assert_uint_eq(s.len, 6);
    ck_assert_int_eq(memcmp(s.ptr, "qwen35", 6), 0);
    ck_assert_int_eq(si_gguf_get_str(g, "u8", &s, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "key 'u8': type u8, expected string"));
    ck_assert_int_eq(si_gguf_get_str(g, "missing", &s, NULL), SI_ENOTFOUND);

    ck_assert_ptr_null(si_gguf_get(g, "missing"));
    ck_assert_ptr_null(si_gguf_kv_key(g, 99));
    ck_assert_ptr_null(si_gguf_kv_value(g, 99));
    ck_assert_ptr_null(si_gguf_get(NULL, "x"));
    ck_assert_uint_eq(si_gguf_n_kv(NULL), 0);
    si_gguf_close(g);
    si_gguf_close(NULL);

    ck_assert_str_eq(si_gguf_vtype_name(SI_GGUF_U32), "u32");
    ck_assert_str_eq(si_gguf_vtype_name(SI_GGUF_ARRAY), "array");
    ck_assert_str_eq(si_gguf_vtype_name(SI_GGUF_F64), "f64");
    ck_assert_str_eq(si_gguf_vtype_name(13), "invalid");

    /* Files that are not there, not regular, or empty. */
    ck_assert_int_eq(si_gguf_open("/nonexistent/m.gguf", &g, &err), SI_EIO);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/m.gguf: cannot open"));
    ck_assert_int_eq(si_gguf_open("/", &g, &err), SI_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
    FILE *fp = fopen(path, "wb");
    fclose(fp);
    ck_assert_int_eq(si_gguf_open(path, &g, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "truncated header (need 24 bytes, have 0)"));
    ck_assert_int_eq(si_gguf_open_memory(NULL, 0, NULL, &g, &err), SI_EFORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "<memory>: offset 0: truncated header"));
    unlink(path);
    free(path);
}
END_TEST

/* ---- real files ------------------------------------------------------------------------ */

/* Opens path with si_gguf_open and (a copy) with si_gguf_open_memory, runs
 * the fuzz walker, and checks the two agree. */
static si_gguf *open_real(const char *path)
{
    si_gguf *g, *m;
    si_err err;
    int rc = si_gguf_open(path, &g, &err);
    ck_assert_msg(rc == SI_OK, "%s", err.msg);
    size_t size;
    uint8_t *bytes = read_all(path, &size);
    ck_assert_int_eq(si_gguf_open_memory(bytes, size, path, &m, &err), SI_OK);
    ck_assert_uint_eq(si_gguf_n_kv(m), si_gguf_n_kv(g));
    ck_assert_uint_eq(si_gguf_n_tensors(m), si_gguf_n_tensors(g));
    ck_assert_uint_eq(si_gguf_data_offset(m), si_gguf_data_offset(g));
    ck_assert_uint_eq(si_gguf_file_size(g), size);
    si_gguf_close(m);
    LLVMFuzzerTestOneInput(bytes, size);
    free(bytes);
    return g;
}

static uint64_t n_tokens(const si_gguf *g)
{
    const si_gguf_value *v = must_get(g, "tokenizer.ggml.tokens", SI_GGUF_ARRAY);
    ck_assert_uint_eq(v->v.arr.type, SI_GGUF_STRING);
    return v->v.arr.n;
}

static void assert_token(const si_gguf *g, uint64_t i, const char *want)
{
    si_gguf_value e;
    ck_assert_int_eq(si_gguf_arr_get(si_gguf_get(g, "tokenizer.ggml.tokens"), i, &e), SI_OK);
    ck_assert_msg(e.v.s.len == strlen(want) && memcmp(e.v.s.ptr, want, e.v.s.len) == 0,
                  "token %" PRIu64 ": '%.*s', want '%s'", i, (int)e.v.s.len, e.v.s.ptr, want);
}

static char *data_path(const char *name)
{
    const char *top = env_dir("SI_TOP_SRCDIR");
    ck_assert_msg(top != NULL, "SI_TOP_SRCDIR is not set (run through make check)");
    char *p = malloc(4096);
    ck_assert_ptr_nonnull(p);
    snprintf(p, 4096, "%s/tests/data/gguf/%s", top, name);
    return p;
}

START_TEST(test_real_llama_tiny)
{
    char *path = data_path("llama-2-tiny-random.gguf");
    si_gguf *g = open_real(path);
    ck_assert_uint_eq(si_gguf_version(g), 3);
    ck_assert_uint_eq(si_gguf_n_kv(g), 18);
    ck_assert_uint_eq(si_gguf_n_tensors(g), 12);
    si_str arch;
    ck_assert_int_eq(si_gguf_get_str(g, "general.architecture", &arch, NULL), SI_OK);
    ck_assert(arch.len == 5 && memcmp(arch.ptr, "llama", 5) == 0);
    uint32_t u;
    ck_assert_int_eq(si_gguf_get_u32(g, "llama.embedding_length", &u, NULL), SI_OK);
    ck_assert_uint_eq(u, 8);
    ck_assert_int_eq(si_gguf_get_u32(g, "llama.block_count", &u, NULL), SI_OK);
    ck_assert_uint_eq(u, 1);
    ck_assert_int_eq(si_gguf_get_u32(g, "llama.attention.head_count", &u, NULL), SI_OK);
    ck_assert_uint_eq(u, 2);
    float eps;
    ck_assert_int_eq(si_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps, NULL), SI_OK);
    ck_assert(eps == 1e-5f);
    ck_assert_uint_eq(n_tokens(g), 32000);
    assert_token(g, 0, "<unk>");
    assert_token(g, 1, "<s>");
    assert_token(g, 2, "</s>");
    assert_token(g, 31999, "\xe7\xbb\x99");
    const si_gguf_value *sc = must_get(g, "tokenizer.ggml.scores", SI_GGUF_ARRAY);
    ck_assert_uint_eq(sc->v.arr.type, SI_GGUF_F32);
    ck_assert_uint_eq(sc->v.arr.n, 32000);

    int n_f16 = 0, n_f32 = 0;
    for (uint64_t i = 0; i < si_gguf_n_tensors(g); i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        n_f16 += t->type == SI_TYPE_F16;
        n_f32 += t->type == SI_TYPE_F32;
        ck_assert_uint_eq((si_gguf_data_offset(g) + t->offset) % si_gguf_alignment(g), 0);
    }
    ck_assert_int_eq(n_f16, 9);
    ck_assert_int_eq(n_f32, 3);
    const si_tensor_info *t = si_gguf_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->type, SI_TYPE_F16);
    ck_assert_uint_eq(t->ndim, 2);
    ck_assert_int_eq(t->ne[0], 8);
    ck_assert_int_eq(t->ne[1], 32000);
    ck_assert_int_eq(t->ne[2], 1);
    ck_assert_int_eq(t->ne[3], 1);
    ck_assert_uint_eq(t->nbytes, 8 * 32000 * 2);
    t = si_gguf_tensor(g, "blk.0.ffn_down.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ne[0], 32);
    ck_assert_int_eq(t->ne[1], 8);
    ck_assert_ptr_nonnull(si_gguf_tensor(g, "output_norm.weight"));

    /* Prefixes of a real file, sampled: all refused cleanly. */
    size_t size;
    uint8_t *bytes = read_all(path, &size);
    for (size_t n = 0; n < size; n += n < 4096 ? 1 : 40961) {
        uint8_t *cut = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(cut);
        memcpy(cut, bytes, n);
        si_gguf *c = NULL;
        si_err err;
        ck_assert_int_eq(si_gguf_open_memory(cut, n, "cut", &c, &err), SI_EFORMAT);
        free(cut);
    }
    free(bytes);
    si_gguf_close(g);
    free(path);
}
END_TEST

START_TEST(test_real_vocab)
{
    static const struct { const char *file; uint64_t n_kv, n_tok; const char *model, *last; } v[] = {
        { "ggml-vocab-gpt-2.gguf", 16, 50257, "gpt2", "<|endoftext|>" },
        { "ggml-vocab-bert-bge.gguf", 20, 30522, "bert", "\xef\xbd\x9e" },
    };
    for (size_t i = 0; i < 2; i++) {
        char *path = data_path(v[i].file);
        si_gguf *g = open_real(path);
        ck_assert_uint_eq(si_gguf_n_tensors(g), 0);
        ck_assert_uint_eq(si_gguf_n_kv(g), v[i].n_kv);
        ck_assert_uint_eq(n_tokens(g), v[i].n_tok);
        ck_assert_uint_eq(si_gguf_data_offset(g), si_gguf_file_size(g));   /* unpadded end */
        si_str m;
        ck_assert_int_eq(si_gguf_get_str(g, "tokenizer.ggml.model", &m, NULL), SI_OK);
        ck_assert(m.len == strlen(v[i].model) && memcmp(m.ptr, v[i].model, m.len) == 0);
        assert_token(g, v[i].n_tok - 1, v[i].last);
        si_gguf_close(g);
        free(path);
    }
}
END_TEST

/* Every GGUF of $SI_SHARED_DATA/gguf, when that folder exists (it does not
 * in a fresh clone; the copies above are tested everywhere). */
START_TEST(test_real_shared)
{
    static const struct { const char *file; uint64_t n_tok; } known[] = {
        { "ggml-vocab-bert-bge.gguf", 30522 },       { "ggml-vocab-deepseek-coder.gguf", 32256 },
        { "ggml-vocab-deepseek-llm.gguf", 102400 },  { "ggml-vocab-falcon.gguf", 65024 },
        { "ggml-vocab-gpt-2.gguf", 50257 },          { "ggml-vocab-llama-spm.gguf", 32000 },
        { "ggml-vocab-mpt.gguf", 50432 },            { "ggml-vocab-phi-3.gguf", 32064 },
        { "ggml-vocab-starcoder.gguf", 49152 },      { "llama-2-tiny-random.gguf", 32000 },
    };
    const char *shared = env_dir("SI_SHARED_DATA");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/gguf", shared ? shared : "/nonexistent");
    struct stat st;
    if (shared == NULL || stat(dir, &st) != 0) {
        printf("check_gguf: %s absent, shared GGUF files not tested\n", dir);
        return;
    }
    static const char *const sub[] = { "llama.cpp-vocab", "ollama" };
    int n_files = 0;
    for (size_t s = 0; s < 2; s++) {
        char sd[4200];
        snprintf(sd, sizeof sd, "%s/%s", dir, sub[s]);
        DIR *d = opendir(sd);
        if (d == NULL)
            continue;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            size_t l = strlen(de->d_name);
            if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0)
                continue;
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", sd, de->d_name);
            si_gguf *g = open_real(path);
            n_files++;
            for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
                if (strcmp(known[k].file, de->d_name) == 0)
                    ck_assert_msg(n_tokens(g) == known[k].n_tok, "%s: %" PRIu64 " tokens",
                                  path, n_tokens(g));
            if (s == 0)
                ck_assert_uint_eq(si_gguf_n_tensors(g), 0);
            si_gguf_close(g);
        }
        closedir(d);
    }
    ck_assert_int_ge(n_files, 10);
}
END_TEST

/* ---- fuzz corpus ------------------------------------------------------------------------ */

START_TEST(test_corpus)
{
    const char *top = env_dir("SI_TOP_SRCDIR");
    ck_assert_msg(top != NULL, "SI_TOP_SRCDIR is not set (run through make check)");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus", top);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int n = 0, ok = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t size;
        uint8_t *bytes = read_all(path, &size);
        LLVMFuzzerTestOneInput(bytes, size);      /* aborts on a broken invariant */
        si_gguf *g;
        if (si_gguf_open_memory(bytes, size, de->d_name, &g, NULL) == SI_OK) {
            ok++;
            si_gguf_close(g);
        }
        free(bytes);
        n++;
    }
    closedir(d);
    printf("check_gguf: corpus: %d files, %d accepted\n", n, ok);
    ck_assert_int_ge(n, 20);
    ck_assert_int_ge(ok, 3);
}
END_TEST

/* ---- speed --------------------------------------------------------------------------------- */

START_TEST(test_big_vocab_speed)
{
    enum { N = 150000 };
    gb b = { 0 };
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_key(&b, "tokenizer.ggml.tokens", SI_GGUF_ARRAY);
    gb_u32(&b, SI_GGUF_STRING);
    gb_u64(&b, N);
    char tok[32];
    for (int i = 0; i < N; i++) {
        snprintf(tok, sizeof tok, "tok%d", i);
        gb_str(&b, tok);
    }
    struct timespec t0, t1;
    si_gguf *g;
    si_err err;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(si_gguf_open_memory(b.p, b.len, "vocab", &g, &err), SI_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("check_gguf: opened a %d-string vocabulary (%zu bytes) in %.2f ms\n", N, b.len, ms);
    ck_assert_msg(ms < 500, "opening took %.1f ms", ms);
    ck_assert_uint_eq(n_tokens(g), N);
    assert_token(g, N - 1, "tok149999");
    assert_token(g, 77777, "tok77777");
    si_gguf_close(g);
    gb_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("writer");
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_writer_layout);
    tcase_add_test(tc, test_writer_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("getters");
    tcase_add_test(tc, test_getters);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, gguf_tcase_malformed());
    suite_add_tcase(s, gguf_tcase_truncated());
    suite_add_tcase(s, gguf_tcase_nested());
    tc = tcase_create("real");
    tcase_add_test(tc, test_real_llama_tiny);
    tcase_add_test(tc, test_real_vocab);
    tcase_add_test(tc, test_real_shared);
    suite_add_tcase(s, tc);
    tc = tcase_create("corpus");
    tcase_add_test(tc, test_corpus);
    suite_add_tcase(s, tc);
    tc = tcase_create("speed");
    tcase_add_test(tc, test_big_vocab_speed);
    suite_add_tcase(s, tc);

    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
