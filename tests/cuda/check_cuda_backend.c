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

/* Knob upload_staged: small uploads go through the pinned staging arena
 * and are only enqueued (cuda_upload): the source is reusable at return, and copies
 * land in order.  Each upload's source is overwritten right after the
 * call; 3,000 uploads of 1..4096 bytes (several fills of the 1 MiB arena,
 * each forcing its drain), some to overlapping places, one at the 64 KiB
 * edge and one past it, then a 16-byte one between two downloads: the
 * device must hold exactly what a host copy applied in order holds. */
START_TEST(test_small_uploads)
{
    si_err err = { { 0 } };
    si_backend *b = NULL;
    ck_assert_msg(ops()->open(&host, "backend.cuda_staged", &b, &err) == SI_OK, "%s", err.msg);
    const uint64_t n = 1u << 20;
    unsigned char *want = malloc(n), *got = malloc(n), *src = malloc(n);
    ck_assert(want && got && src);
    memset(want, 0, n);
    si_buf *buf = NULL;
    ck_assert_msg(ops()->buf_alloc(b, n, &buf, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->upload(b, buf, 0, want, n, &err) == SI_OK, "%s", err.msg);
    uint32_t r = 12345u;
    for (int i = 0; i < 3002; i++) {
        r = r * 1664525u + 1013904223u;
        uint64_t len = 1 + (r >> 8) % 4096, off = (r >> 4) % (n - 4096);
        if (i == 3000)
            len = 64u << 10, off = 0;   /* the last staged size */
        if (i == 3001)
            len = (64u << 10) + 1, off = 4096;   /* past it: copied from src and waited for */
        for (uint64_t k = 0; k < len; k++)
            src[k] = (unsigned char)(i * 7 + k);
        ck_assert_msg(ops()->upload(b, buf, off, src, len, &err) == SI_OK, "%s", err.msg);
        memcpy(want + off, src, len);
        memset(src, 0xA5, len);   /* the caller reuses its memory at once */
    }
    ck_assert_msg(ops()->download(b, got, buf, 0, n, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(memcmp(want, got, n) == 0, "the device differs from the uploads applied in order");
    const unsigned char sixteen[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
    ck_assert_msg(ops()->upload(b, buf, 100, sixteen, 16, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->download(b, got, buf, 96, 24, &err) == SI_OK, "%s", err.msg);
    ck_assert(memcmp(got, want + 96, 4) == 0 && memcmp(got + 4, sixteen, 16) == 0 &&
              memcmp(got + 20, want + 116, 4) == 0);
    ops()->buf_free(b, buf);
    ops()->close(b);
    free(want);
    free(got);
    free(src);
}
END_TEST

/* Knob download_pinned, both ways: downloads of 1..64 KiB land through
 * the pinned buffer (one sync with the error flag's copy), 64 KiB + 1
 * and more straight into the caller's memory; each checked byte for byte
 * against the uploaded pattern, the bytes around the destination range
 * untouched, a refused range leaving the destination as it was. */
static void small_downloads(const char *section)
{
    si_err err = { { 0 } };
    si_backend *b = NULL;
    ck_assert_msg(ops()->open(&host, section, &b, &err) == SI_OK, "%s: %s", section, err.msg);
    const uint64_t n = 1u << 20;
    unsigned char *src = malloc(n), *got = malloc(n + 2);
    ck_assert(src && got);
    for (uint64_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 29u + (i >> 9));
    si_buf *buf = NULL;
    ck_assert_msg(ops()->buf_alloc(b, n, &buf, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->upload(b, buf, 0, src, n, &err) == SI_OK, "%s", err.msg);
    uint32_t r = 777u;
    for (int i = 0; i < 400; i++) {
        r = r * 1664525u + 1013904223u;
        uint64_t len = 1 + (r >> 8) % 8192, off = (r >> 4) % (n - (128u << 10));
        if (i == 398)
            len = 64u << 10;           /* the largest pinned one */
        if (i == 399)
            len = (64u << 10) + 1;     /* past it: the pageable copy */
        memset(got, 0x5A, len + 2);
        ck_assert_msg(ops()->download(b, got + 1, buf, off, len, &err) == SI_OK, "%s", err.msg);
        ck_assert_msg(memcmp(got + 1, src + off, len) == 0, "%s: download %d (%llu bytes at %llu) differs", section,
                      i, (unsigned long long)len, (unsigned long long)off);
        ck_assert(got[0] == 0x5A && got[len + 1] == 0x5A);
    }
    /* every download_start slot busy: download still copies (pageable) */
    unsigned char early[SI_DOWNLOADS_IN_FLIGHT][64];
    uint32_t ticket[SI_DOWNLOADS_IN_FLIGHT];
    for (int i = 0; i < SI_DOWNLOADS_IN_FLIGHT; i++)
        ck_assert_msg(ops()->download_start(b, early[i], buf, 4096u * (unsigned)i, 64, &ticket[i], &err) == SI_OK,
                      "%s", err.msg);
    memset(got, 0x5A, 4096);
    ck_assert_msg(ops()->download(b, got, buf, 777, 4096, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(memcmp(got, src + 777, 4096) == 0, "%s: download with every slot busy differs", section);
    for (int i = 0; i < SI_DOWNLOADS_IN_FLIGHT; i++) {
        ck_assert_msg(ops()->download_wait(b, ticket[i], &err) == SI_OK, "%s", err.msg);
        ck_assert(memcmp(early[i], src + 4096u * (unsigned)i, 64) == 0);
    }
    memset(got, 0x5A, 16);
    ck_assert_int_eq(ops()->download(b, got, buf, n - 8, 16, &err), SI_ERANGE);
    ck_assert(got[0] == 0x5A && got[15] == 0x5A);
    ops()->buf_free(b, buf);
    ops()->close(b);
    free(src);
    free(got);
}

START_TEST(test_small_downloads)
{
    small_downloads("backend.cuda_sm120");   /* (the default: pinned) */
    small_downloads("backend.cuda_dl_pageable");
}
END_TEST

/* SI_OP_HOST_IDS / post_ids (plugin.h 1.4): an exec of two HOST_IDS ops
 * (strided, then plain) returns at once; each waits on the device for its
 * post, in order; a download after both posts sees the ids where they
 * belong and nothing else touched.  A post with no op waiting is refused
 * and changes nothing; so is a bad count. */
START_TEST(test_host_ids)
{
    si_err err = { { 0 } };
    si_backend *b = NULL;
    ck_assert(SI_HAS_MEMBER(ops(), struct si_backend_ops, post_ids) && ops()->post_ids != NULL);
    si_op probe = { .kind = SI_OP_HOST_IDS };
    ck_assert_msg(ops()->open(&host, "backend.cuda_noids", &b, &err) == SI_OK, "%s", err.msg);
    ck_assert(!ops()->supports(b, &probe));   /* (knob host_ids off: not offered) */
    ops()->close(b);
    ck_assert_msg(ops()->open(&host, "backend.cuda_sm120", &b, &err) == SI_OK, "%s", err.msg);   /* (on) */
    const int32_t ids1[3] = { 11, 12, 13 }, ids2[2] = { 21, 22 };
    ck_assert_int_eq(ops()->post_ids(b, ids1, 3, &err), SI_EINVAL);   /* none waiting */
    si_buf *buf = NULL;
    ck_assert_msg(ops()->buf_alloc(b, 4096, &buf, &err) == SI_OK, "%s", err.msg);
    int32_t want[64], got[64];
    for (int i = 0; i < 64; i++)
        want[i] = -1000 - i;
    ck_assert_msg(ops()->upload(b, buf, 0, want, sizeof want, &err) == SI_OK, "%s", err.msg);
    si_op op[2] = { { .kind = SI_OP_HOST_IDS }, { .kind = SI_OP_HOST_IDS } };
    op[0].dst = (si_tensor){ .buf = buf, .offset = 4 * 4, .type = SI_TYPE_I32, .ndim = 1,
                             .ne = { 3, 1, 1, 1 }, .nb = { 5 * 4, 15 * 4, 15 * 4, 15 * 4 } };
    op[1].dst = (si_tensor){ .buf = buf, .offset = 40 * 4, .type = SI_TYPE_I32, .ndim = 1,
                             .ne = { 2, 1, 1, 1 }, .nb = { 4, 8, 8, 8 } };
    ck_assert(ops()->supports(b, &op[0]) && ops()->supports(b, &op[1]));
    si_op bad = op[1];   /* refused: no ids, 33 ids, a stride of 6 bytes, a src, F32 */
    bad.dst.ne[0] = 0;
    ck_assert(!ops()->supports(b, &bad));
    bad.dst.ne[0] = 33;
    ck_assert(!ops()->supports(b, &bad));
    bad = op[1];
    bad.dst.nb[0] = 6;
    ck_assert(!ops()->supports(b, &bad));
    bad = op[1];
    bad.src[0] = &op[0].dst;
    ck_assert(!ops()->supports(b, &bad));
    bad = op[1];
    bad.dst.type = SI_TYPE_F32;
    ck_assert(!ops()->supports(b, &bad));
    ck_assert_msg(ops()->exec(b, op, 2, &err) == SI_OK, "%s", err.msg);   /* (returns: nothing waits on it) */
    ck_assert_int_eq(ops()->post_ids(b, ids1, 0, &err), SI_EINVAL);
    ck_assert_int_eq(ops()->post_ids(b, ids1, 33, &err), SI_EINVAL);
    ck_assert_msg(ops()->post_ids(b, ids1, 3, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->post_ids(b, ids2, 2, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(ops()->post_ids(b, ids2, 2, &err), SI_EINVAL);   /* both taken */
    ck_assert_msg(ops()->download(b, got, buf, 0, sizeof got, &err) == SI_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++)
        want[4 + 5 * i] = ids1[i];
    want[40] = ids2[0];
    want[41] = ids2[1];
    for (int i = 0; i < 64; i++)
        ck_assert_msg(got[i] == want[i], "word %d: %d, expected %d", i, got[i], want[i]);
    /* again (the ring's next slots), the posts given before the exec
     * is waited for: the device takes them in order */
    const int32_t ids3[3] = { 31, 32, 33 };
    ck_assert_msg(ops()->exec(b, op, 2, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->post_ids(b, ids3, 3, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->post_ids(b, ids1, 2, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(ops()->download(b, got, buf, 0, sizeof got, &err) == SI_OK, "%s", err.msg);
    ck_assert(got[4] == 31 && got[9] == 32 && got[14] == 33 && got[40] == 11 && got[41] == 12);
    ops()->buf_free(b, buf);
    ops()->close(b);
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
    if (si_config_load_string("[backend.bad_device]\npath = x.so\ndevice = banana\n"
                              "[backend.cuda_staged]\npath = x.so\nupload_staged = true\n"
                              "[backend.cuda_dl_pageable]\npath = x.so\ndownload_pinned = false\n"
                              "[backend.cuda_noids]\npath = x.so\nhost_ids = false\n",
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
    tcase_add_test(tc, test_small_uploads);
    tcase_add_test(tc, test_small_downloads);
    tcase_add_test(tc, test_host_ids);
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
