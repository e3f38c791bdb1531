/* tests/cuda/cuda_test.h — what the GPU test programs that load several
 * plugins share: opening a plugin of the build tree and running a suite
 * in-process. */
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

#endif
