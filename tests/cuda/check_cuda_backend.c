/* tests/cuda/check_cuda_backend.c — the cuda_sm120 plugin on a real GPU.
 * Exits 77 (automake SKIP) when the plugin's probe refuses this machine
 * (no driver, no device, or an unsupported compute capability), so CI
 * without a GPU skips and the H200 runs it for real. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <sparkinfer/plugin.h>

#include "host.h"

static void *handle;
static const si_plugin *desc;
static si_host host;

static const struct si_backend_ops *ops(void) { return desc->ops; }

START_TEST(test_roundtrip)
{
    si_err err = { { 0 } };
    si_backend *b = NULL;
    ck_assert_msg(ops()->open(&host, "backend.cuda_sm120", &b, &err) == SI_OK, "%s", err.msg);

    /* 64 MiB: larger than L2, several pages of every allocator. */
    const uint64_t n = 64u << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    ck_assert(src && dst);
    for (uint64_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 131u + 7u);
    memset(dst, 0xEE, n);

    si_buf *buf = NULL;
    ck_assert_msg(ops()->buf_alloc(b, n, &buf, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->upload(b, buf, 0, src, n, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->download(b, dst, buf, 0, n, &err) == SI_OK, "%s", err.msg);
    ck_assert(memcmp(src, dst, n) == 0);

    /* Out-of-range copies are refused, not performed. */
    ck_assert_int_eq(ops()->download(b, dst, buf, n - 4, 8, &err), SI_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "outside"));

    /* A compute op it cannot do is refused by supports(), never faked. */
    si_op op = { .kind = SI_OP_MATMUL };
    ck_assert(!ops()->supports(b, &op));

    ops()->buf_free(b, buf);
    ops()->close(b);
    free(src);
    free(dst);
}
END_TEST

START_TEST(test_bad_device_knob)
{
    si_err err = { { 0 } };
    si_backend *b = NULL;
    ck_assert_int_eq(ops()->open(&host, "backend.bad_device", &b, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "device"));
}
END_TEST

int main(void)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/backends/cuda_sm120/.libs/cuda_sm120.so", top ? top : ".");
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "cannot dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    si_config *cfg = NULL;
    si_err err = { { 0 } };
    if (si_config_load_string("[backend.bad_device]\npath = x.so\ndevice = banana\n",
                              "<test>", &cfg, &err) != SI_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    si_host_init(&host, cfg);
    si_entry_fn entry = (si_entry_fn)dlsym(handle, SI_ENTRY_SYMBOL);
    desc = entry ? entry(&host) : NULL;
    if (desc == NULL) {
        fprintf(stderr, "no descriptor\n");
        return 1;
    }
    if (desc->probe && desc->probe(&host, &err) != SI_OK) {
        printf("SKIP: cuda_sm120 probe refused: %s\n", err.msg);
        si_config_free(cfg);
        dlclose(handle);
        return 77;
    }
    Suite *s = suite_create("cuda_sm120");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_bad_device_knob);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* A CUDA context made in a parent does not survive fork: run in-process. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    si_config_free(cfg);
    dlclose(handle);
    return failed ? 1 : 0;
}
