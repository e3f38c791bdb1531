/* tests/cuda/cuda_test.h — what the GPU test programs that load several
 * plugins share: opening a plugin of the build tree, the kernel-plugin
 * tests' set-up, loading a model on a backend, deterministic token ids,
 * and running a suite in-process. */
#ifndef SI_TESTS_CUDA_TEST_H
#define SI_TESTS_CUDA_TEST_H

#include <check.h>
#include <stdbool.h>

#include <sparkinfer/plugin.h>

#include "config.h"

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

/* What a kernel-plugin test (check_cuda_moe_plugin, check_cuda_attn_plugin)
 * runs against: the backend under test (cuda_sm120, or with
 * SI_CUDA_TEST_AS_CPU=1 the cpu backend standing in: si_ct_as_cpu), the
 * cpu backend as the reference, and the kernel plugin. */
typedef void (*si_ct_log_fn)(const si_host *h, int level, const char *who, const char *fmt, ...);
typedef struct si_ct_kenv {
    si_config       *cfg;
    void            *dl_cu, *dl_cpu, *dl_k;
    const si_plugin *p_cu, *p_cpu, *p_k;
} si_ct_kenv;

bool si_ct_as_cpu(void);
/* Loads the config `text` into a fresh *host with DEBUG logging sent to
 * `log` (*log_orig: the host's own, for `log` to forward to), then opens
 * the three plugins (the kernel at kernel_rel, relative to
 * SI_TOP_BUILDDIR).  0: ready; 77: the cuda probe refused the machine
 * (printed "SKIP: ...", everything closed); 1: a failure (printed). */
int si_ct_kenv_open(si_ct_kenv *e, si_host *host, const char *text, const char *kernel_rel, si_ct_log_fn log,
                    si_ct_log_fn *log_orig);
/* Runs `s` (si_ct_run), then closes what si_ct_kenv_open opened; the
 * process exit status. */
int si_ct_kenv_run(si_ct_kenv *e, Suite *s);

/* A token id in [0, V) that depends only on (i, salt): both sides of a
 * comparison see the same prompt. */
int32_t si_ct_tok(uint32_t i, uint32_t salt, uint32_t V);

#endif
