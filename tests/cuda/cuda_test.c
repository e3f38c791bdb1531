/* tests/cuda/cuda_test.c — see cuda_test.h. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_test.h"

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
