/* tests/fuzz/gen_seeds.c — writes small, valid GGUF seeds for fuzz_gguf into
 * the directory given as argv[1]: files from the writer (every value type,
 * several tensor types, custom alignment) and hand-made ones the writer
 * cannot produce (v2, nested arrays, an unpadded vocabulary).  Built and run
 * by run-fuzz.sh; the committed corpus in tests/fuzz/corpus started as its
 * output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "../gguf/gguf_bytes.h"

static const char *out_dir;

static void path_of(char *p, size_t n, const char *name)
{
    snprintf(p, n, "%s/%s", out_dir, name);
}

static void save(const char *name, const gb *b)
{
    char p[4096];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    if (f == NULL || fwrite(b->p, 1, b->len, f) != b->len || fclose(f) != 0) {
        fprintf(stderr, "gen_seeds: cannot write %s\n", p);
        exit(1);
    }
}

static void check(int rc, si_gguf_writer *w)
{
    if (rc != SI_OK) {
        fprintf(stderr, "gen_seeds: %s\n", si_gguf_writer_error(w));
        exit(1);
    }
}

/* Declares and fills tensors of the given types, one block row each. */
static void tensors(si_gguf_writer *w, const uint32_t *types, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const si_type_traits *t = si_type_get(types[i]);
        char name[32];
        snprintf(name, sizeof name, "blk.%zu.%s", i, t->name);
        int64_t ne[2] = { t->block_elems, i % 2 + 1 };
        check(si_gguf_writer_add_tensor(w, name, types[i], 2, ne), w);
    }
    for (size_t i = 0; i < n; i++) {
        const si_type_traits *t = si_type_get(types[i]);
        size_t nb = (size_t)t->block_bytes * (i % 2 + 1);
        unsigned char buf[1024];
        for (size_t k = 0; k < nb; k++)
            buf[k] = (unsigned char)(k * 13 + i);
        check(si_gguf_writer_write(w, buf, nb), w);
    }
}

static void writer_seeds(void)
{
    char p[4096];
    si_gguf_writer *w;
    si_err err;

    path_of(p, sizeof p, "seed-writer-mixed.gguf");
    if (si_gguf_writer_open(p, &w, &err) != SI_OK) {
        fprintf(stderr, "gen_seeds: %s\n", err.msg);
        exit(1);
    }
    si_gguf_writer_set_str(w, "general.architecture", "qwen35");
    si_gguf_writer_set_u32(w, "qwen35.block_count", 2);
    si_gguf_writer_set_f32(w, "qwen35.rope.freq_base", 1e7f);
    si_gguf_writer_set_u8(w, "a.u8", 1);
    si_gguf_writer_set_i8(w, "a.i8", -1);
    si_gguf_writer_set_u16(w, "a.u16", 2);
    si_gguf_writer_set_i16(w, "a.i16", -2);
    si_gguf_writer_set_i32(w, "a.i32", -3);
    si_gguf_writer_set_u64(w, "a.u64", 4);
    si_gguf_writer_set_i64(w, "a.i64", -4);
    si_gguf_writer_set_f64(w, "a.f64", 0.5);
    si_gguf_writer_set_bool(w, "a.bool", true);
    const int32_t sect[] = { 11, 11, 10, 0 };
    si_gguf_writer_set_arr(w, "qwen35.rope.dimension_sections", SI_GGUF_I32, sect, 4);
    const char *toks[] = { "<s>", "</s>", "a", "b", "ab", "\xe7\xbb\x99" };
    si_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 6);
    const uint8_t flags[] = { 1, 0, 1 };
    check(si_gguf_writer_set_arr(w, "a.bools", SI_GGUF_BOOL, flags, 3), w);
    const uint32_t types[] = { SI_TYPE_F32, SI_TYPE_Q8_0, SI_TYPE_Q4_K };
    tensors(w, types, 3);
    if (si_gguf_writer_close(w, &err) != SI_OK) {
        fprintf(stderr, "gen_seeds: %s\n", err.msg);
        exit(1);
    }

    path_of(p, sizeof p, "seed-writer-align64.gguf");
    if (si_gguf_writer_open(p, &w, &err) != SI_OK)
        exit(1);
    check(si_gguf_writer_set_u32(w, "general.alignment", 64), w);
    const uint32_t types64[] = { SI_TYPE_F16, SI_TYPE_BF16, SI_TYPE_Q6_K };
    tensors(w, types64, 3);
    if (si_gguf_writer_close(w, &err) != SI_OK)
        exit(1);

    path_of(p, sizeof p, "seed-writer-types.gguf");
    if (si_gguf_writer_open(p, &w, &err) != SI_OK)
        exit(1);
    check(si_gguf_writer_set_u32(w, "general.alignment", 16), w);
    const uint32_t many[] = { SI_TYPE_I8, SI_TYPE_I16, SI_TYPE_I32, SI_TYPE_I64, SI_TYPE_F64,
                              SI_TYPE_Q4_0, SI_TYPE_Q4_1, SI_TYPE_Q5_0, SI_TYPE_Q5_1,
                              SI_TYPE_IQ4_NL, SI_TYPE_MXFP4, SI_TYPE_Q2_K };
    tensors(w, many, sizeof many / sizeof many[0]);
    if (si_gguf_writer_close(w, &err) != SI_OK)
        exit(1);
}

static void hand_seeds(void)
{
    gb b = { 0 };
    const uint64_t ne[] = { 8, 2 };

    gb_header(&b, 3, 0, 0);
    save("seed-empty.gguf", &b);
    gb_free(&b);

    gb_header(&b, 2, 1, 1);
    gb_kv_str(&b, "general.name", "v2");
    gb_tensor(&b, "w", 2, ne, SI_TYPE_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    save("seed-v2.gguf", &b);
    gb_free(&b);

    gb_header(&b, 3, 0, 2);                      /* vocabulary: no padding at the end */
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    gb_key(&b, "tokenizer.ggml.tokens", 9);
    gb_u32(&b, 8);
    gb_u64(&b, 5);
    gb_str(&b, "<unk>");
    gb_str(&b, "<s>");
    gb_str(&b, "");
    gb_str(&b, "\xe2\x96\x81the");
    gb_str(&b, "x");
    save("seed-vocab-unpadded.gguf", &b);
    gb_free(&b);

    gb_header(&b, 3, 1, 1);                      /* [[1,2],[["s"]],[]] */
    gb_key(&b, "nested", 9);
    gb_u32(&b, 9);
    gb_u64(&b, 3);
    gb_u32(&b, 4);
    gb_u64(&b, 2);
    gb_u32(&b, 1);
    gb_u32(&b, 2);
    gb_u32(&b, 9);
    gb_u64(&b, 1);
    gb_u32(&b, 8);
    gb_u64(&b, 1);
    gb_str(&b, "s");
    gb_u32(&b, 7);
    gb_u64(&b, 0);
    gb_tensor(&b, "t", 1, ne, SI_TYPE_F16, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 16);
    save("seed-nested.gguf", &b);
    gb_free(&b);

    gb_header(&b, 3, 0, 1);                      /* 8 levels, the deepest allowed */
    gb_key(&b, "deep", 9);
    for (int i = 1; i < 8; i++) {
        gb_u32(&b, 9);
        gb_u64(&b, 1);
    }
    gb_u32(&b, 0);
    gb_u64(&b, 2);
    gb_u8(&b, 1);
    gb_u8(&b, 2);
    save("seed-deep8.gguf", &b);
    gb_free(&b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_seeds DIR\n");
        return 2;
    }
    out_dir = argv[1];
    writer_seeds();
    hand_seeds();
    return 0;
}
