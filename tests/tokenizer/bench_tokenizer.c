/* tests/tokenizer/bench_tokenizer.c — encode/decode throughput of the byte-level
 * BPE tokenizer on the Qwen3 vocabulary (not a test; run by hand):
 *
 *   SI_TOP_SRCDIR=<src> tests/tokenizer/bench_tokenizer [FILE...]
 *
 * Without files it uses the English prose of $SI_SHARED_DATA/../DESIGN.md and
 * ../spec/qwen35-gguf.md.  The text is repeated up to at least 8 MB and
 * encoded in one call and in 4 KiB slices; the best of 3 runs is reported.
 * Times are process CPU time, so a busy machine skews them less than wall
 * time would.
 */
#include <time.h>

#include "tok_testutil.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    char *text = NULL;
    size_t len = 0;
    char defaults[2][4096];
    const char *shared = getenv("SI_SHARED_DATA");
    snprintf(defaults[0], sizeof defaults[0], "%s/../DESIGN.md", shared ? shared : ".");
    snprintf(defaults[1], sizeof defaults[1], "%s/../spec/qwen35-gguf.md", shared ? shared : ".");
    int nf = argc > 1 ? argc - 1 : 2;
    for (int i = 0; i < nf; i++) {
        const char *path = argc > 1 ? argv[i + 1] : defaults[i];
        size_t n;
        char *s = tu_read_file(path, &n);
        if (s == NULL) {
            fprintf(stderr, "bench_tokenizer: cannot read %s\n", path);
            return 1;
        }
        text = realloc(text, len + n + 1);
        memcpy(text + len, s, n + 1);
        len += n;
        free(s);
    }
    if (len == 0)
        return 1;
    size_t unit = len;
    while (len < (8u << 20)) {
        text = realloc(text, len + unit + 1);
        memcpy(text + len, text, unit);
        len += unit;
    }

    tu_vocab v;
    if (tu_load_qwen3(&v) != 0)
        return 1;
    si_tok_spec spec = tu_spec(&v, "qwen35", false);
    si_tokenizer *t;
    si_err err;
    double t0 = now();
    if (si_tokenizer_new(&spec, &t, &err) != SI_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    printf("build: %.1f ms (%u tokens, %u merges)\n", (now() - t0) * 1e3, v.n_tokens, v.n_merges);

    double best_whole = 1e9, best_slices = 1e9, best_dec = 1e9;
    size_t n_ids = 0;
    for (int rep = 0; rep < 3; rep++) {
        si_tok_vec vec = { 0 };
        t0 = now();
        if (si_tokenize_append(t, text, len, SI_TOK_SPECIAL_ALL, &vec, &err) != SI_OK)
            return 1;
        double dt = now() - t0;
        best_whole = dt < best_whole ? dt : best_whole;
        n_ids = vec.n;

        vec.n = 0;
        t0 = now();
        for (size_t off = 0; off < len; off += 4096) {
            size_t n = len - off < 4096 ? len - off : 4096;
            if (si_tokenize_append(t, text + off, n, SI_TOK_SPECIAL_ALL, &vec, &err) != SI_OK)
                return 1;
        }
        dt = now() - t0;
        best_slices = dt < best_slices ? dt : best_slices;

        char *out;
        size_t out_len;
        t0 = now();
        if (si_detokenize(t, vec.ids, vec.n, true, &out, &out_len, &err) != SI_OK)
            return 1;
        dt = now() - t0;
        best_dec = dt < best_dec ? dt : best_dec;
        free(out);
        free(vec.ids);
    }
    double mb = (double)len / 1e6;
    printf("text: %.2f MB, %zu tokens (%.2f bytes/token)\n", mb, n_ids, (double)len / (double)n_ids);
    printf("encode, one call:    %.2f MB/s\n", mb / best_whole);
    printf("encode, 4 KiB calls: %.2f MB/s\n", mb / best_slices);
    printf("decode:              %.1f MB/s\n", mb / best_dec);
    si_tokenizer_free(t);
    free(text);
    return 0;
}
