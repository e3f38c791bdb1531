/* tests/cuda/cuda_test.c — see cuda_test.h. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "host.h"

void *si_ct_open(const char *top, const char *rel, const si_host *h, const si_plugin **out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", top, rel);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        fprintf(stderr, "cannot dlopen %s: %s\n", path, dlerror());
        return NULL;
    }
    si_entry_fn e = (si_entry_fn)(uintptr_t)dlsym(dl, SI_ENTRY_SYMBOL);
    *out = e ? e(h) : NULL;
    if (*out == NULL) {
        fprintf(stderr, "%s: no descriptor\n", path);
        dlclose(dl);
        return NULL;
    }
    return dl;
}

int si_ct_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

bool si_ct_as_cpu(void)
{
    const char *v = getenv("SI_CUDA_TEST_AS_CPU");
    return v != NULL && strcmp(v, "1") == 0;
}

static void kenv_close(si_ct_kenv *e)
{
    void *dl[3] = { e->dl_k, e->dl_cu, e->dl_cpu };
    for (int i = 0; i < 3; i++)
        if (dl[i] != NULL)
            dlclose(dl[i]);
    si_config_free(e->cfg);
    memset(e, 0, sizeof *e);
}

int si_ct_kenv_open(si_ct_kenv *e, si_host *host, const char *text, const char *kernel_rel, si_ct_log_fn log,
                    si_ct_log_fn *log_orig)
{
    memset(e, 0, sizeof *e);
    const char *top = getenv("SI_TOP_BUILDDIR");
    top = top ? top : ".";
    const bool as_cpu = si_ct_as_cpu();
    si_err err = { { 0 } };
    if (si_config_load_string(text, "<test>", &e->cfg, &err) != SI_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    si_host_init(host, e->cfg);
    si_host_set_log_level(SI_LOG_DEBUG);   /* `log` forwards what it wants */
    *log_orig = host->log;
    host->log = log;
    e->dl_cu = si_ct_open(top, as_cpu ? "backends/cpu/.libs/cpu.so" : "backends/cuda_sm120/.libs/cuda_sm120.so", host,
                          &e->p_cu);
    e->dl_cpu = si_ct_open(top, "backends/cpu/.libs/cpu.so", host, &e->p_cpu);
    e->dl_k = si_ct_open(top, kernel_rel, host, &e->p_k);
    if (e->dl_cu == NULL || e->dl_cpu == NULL || e->dl_k == NULL) {
        kenv_close(e);
        return 1;
    }
    if (!as_cpu && e->p_cu->probe && e->p_cu->probe(host, &err) != SI_OK) {
        printf("SKIP: cuda_sm120 probe refused: %s\n", err.msg);
        kenv_close(e);
        return 77;
    }
    return 0;
}

int si_ct_kenv_run(si_ct_kenv *e, Suite *s)
{
    const int failed = si_ct_run(s);
    kenv_close(e);
    return failed ? 1 : 0;
}

void si_ct_model_open(si_ct_model *r, const si_host *h, const si_plugin *backend, const char *section,
                      const si_plugin *model, const si_gguf *g, uint32_t n_seq, uint32_t n_ctx)
{
    si_err err = { { 0 } };
    r->bops = backend->ops;
    r->mops = model->ops;
    r->b = NULL;
    r->m = NULL;
    ck_assert_msg(r->bops->open(h, section, &r->b, &err) == SI_OK, "%s: %s", section, err.msg);
    si_backend_ref ref = { .ops = r->bops, .b = r->b, .name = backend->name };
    ck_assert(r->mops->accepts(h, g));
    ck_assert_msg(r->mops->load(h, g, &ref, n_seq, n_ctx, &r->m, &err) == SI_OK, "load on %s: %s", section,
                  err.msg);
}

void si_ct_model_close(si_ct_model *r)
{
    r->mops->unload(r->m);
    r->bops->close(r->b);
}

int32_t si_ct_tok(uint32_t i, uint32_t salt, uint32_t V)
{
    uint32_t x = (i + 1) * 2654435761u ^ (salt * 40503u);
    x ^= x >> 13;
    return (int32_t)(x % V);
}
