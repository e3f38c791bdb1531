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
