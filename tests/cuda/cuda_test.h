/* tests/cuda/cuda_test.h — what the GPU test programs that load several
 * plugins share: opening a plugin of the build tree, loading a model on a
 * backend, deterministic token ids, and running a suite in-process. */
#ifndef SI_TESTS_CUDA_TEST_H
#define SI_TESTS_CUDA_TEST_H

#include <check.h>

#include <sparkinfer/plugin.h>

/* dlopen()s top/rel (RTLD_NOW | RTLD_LOCAL) and calls its entry with `h`;
 * the handle (dlclose it) with *out set, or NULL after printing why. */
void *si_ct_open(const char *top, const char *rel, const si_host *h, const si_plugin **out);

/* Runs every test of `s` in this process — a CUDA context does not
 * survive fork() — and frees it; the number of failed tests. */
int si_ct_run(Suite *s);

/* One model loaded on one backend (opened from `section` of h's config). */
typedef struct si_ct_model {
    const struct si_backend_ops *bops;
    si_backend                  *b;
    const struct si_model_ops   *mops;
    si_model                    *m;
} si_ct_model;

/* Opens the backend and loads the model with n_seq sequences of n_ctx
 * tokens; a failure fails the running test, naming the section. */
void si_ct_model_open(si_ct_model *r, const si_host *h, const si_plugin *backend, const char *section,
                      const si_plugin *model, const si_gguf *g, uint32_t n_seq, uint32_t n_ctx);
void si_ct_model_close(si_ct_model *r);

/* A token id in [0, V) that depends only on (i, salt): both sides of a
 * comparison see the same prompt. */
int32_t si_ct_tok(uint32_t i, uint32_t salt, uint32_t V);

#endif
