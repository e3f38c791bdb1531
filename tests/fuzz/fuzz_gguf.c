/* tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Parses the input with si_gguf_open_memory and, when it is accepted, walks
 * everything the API hands out: every key and value (nested arrays and
 * string arrays through si_gguf_arr_get), every tensor, touching the first
 * and last byte of every string and tensor data range so that ASan sees any
 * view that points outside the input.  It also checks the invariants the
 * reader promises and aborts when one is broken, which the fuzzer reports.
 *
 * check_gguf links this file too and replays tests/fuzz/corpus through it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_internal.h"
#include "quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void expect(int cond)
{
    if (!cond)
        abort();
}

/* A view must lie inside the input image. */
static void touch(const uint8_t *base, size_t size, const void *p, uint64_t n)
{
    const uint8_t *b = p;
    if (n == 0)
        return;
    expect(b >= base && (uint64_t)(b - base) <= size && n <= size - (uint64_t)(b - base));
    sink ^= b[0];
    sink ^= b[n - 1];
}

static void walk_value(const uint8_t *base, size_t size, const si_gguf_value *v, int depth)
{
    expect(v->type < SI_GGUF_VTYPE_COUNT);
    if (v->type == SI_GGUF_STRING) {
        touch(base, size, v->v.s.ptr, v->v.s.len);
        return;
    }
    if (v->type == SI_GGUF_BOOL)
        expect(v->v.u <= 1);
    if (v->type != SI_GGUF_ARRAY)
        return;
    expect(depth <= SI_GGUF_MAX_DEPTH);
    uint32_t esz = si_gguf_scalar_size(v->v.arr.type);
    expect(v->v.arr.type < SI_GGUF_VTYPE_COUNT);
    expect((esz != 0) == (v->v.arr.data != NULL) || v->v.arr.n == 0);
    if (esz != 0)
        touch(base, size, v->v.arr.data, v->v.arr.n * esz);
    si_gguf_value e;
    for (uint64_t i = 0; i < v->v.arr.n; i++) {
        expect(si_gguf_arr_get(v, i, &e) == SI_OK);
        expect(e.type == v->v.arr.type);
        walk_value(base, size, &e, depth + 1);
    }
    expect(si_gguf_arr_get(v, v->v.arr.n, &e) == SI_ERANGE);
}

static void walk(const uint8_t *base, size_t size, const si_gguf *g)
{
    uint64_t al = si_gguf_alignment(g);
    expect(al != 0 && (al & (al - 1)) == 0);
    expect(si_gguf_data_offset(g) <= size && si_gguf_file_size(g) == size);
    for (uint64_t i = 0; i < si_gguf_n_kv(g); i++) {
        const char *key = si_gguf_kv_key(g, i);
        const si_gguf_value *v = si_gguf_kv_value(g, i);
        expect(key != NULL && v != NULL);
        expect(si_gguf_get(g, key) == v);             /* keys are unique */
        walk_value(base, size, v, 1);
        uint32_t u;
        float f;
        si_str s;
        si_err err;
        int rc = si_gguf_get_u32(g, key, &u, &err);
        expect(rc == SI_OK || rc == SI_EFORMAT);
        rc = si_gguf_get_f32(g, key, &f, &err);
        expect(rc == SI_OK || rc == SI_EFORMAT);
        rc = si_gguf_get_str(g, key, &s, &err);
        expect(rc == SI_OK || rc == SI_EFORMAT);
    }
    expect(si_gguf_kv_key(g, si_gguf_n_kv(g)) == NULL);
    for (uint64_t i = 0; i < si_gguf_n_tensors(g); i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        expect(t != NULL && si_gguf_tensor(g, t->name) == t);
        expect(t->ndim >= 1 && t->ndim <= SI_MAX_DIMS && si_type_valid(t->type));
        uint64_t rows = 1;
        for (int d = 0; d < SI_MAX_DIMS; d++) {
            expect(t->ne[d] >= 1 && (d < (int)t->ndim || t->ne[d] == 1));
            if (d > 0)
                rows *= (uint64_t)t->ne[d];
        }
        expect(t->nbytes == si_type_row_bytes(t->type, t->ne[0]) * rows);
        expect(t->offset % al == 0);
        expect((uint64_t)((const uint8_t *)t->data - base) == si_gguf_data_offset(g) + t->offset);
        touch(base, size, t->data, t->nbytes);
    }
    expect(si_gguf_tensor_at(g, si_gguf_n_tensors(g)) == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    si_gguf *g = NULL;
    si_err err;
    err.msg[0] = '\0';
    int rc = si_gguf_open_memory(data, size, "fuzz.gguf", &g, &err);
    if (rc != SI_OK) {
        /* Every refusal says something, on one line, starting with the name. */
        expect(g == NULL && rc < 0);
        expect(strncmp(err.msg, "fuzz.gguf: ", 11) == 0 && strchr(err.msg, '\n') == NULL);
        return 0;
    }
    walk(data, size, g);
    si_gguf_close(g);
    return 0;
}
