/* tests/loader/check_host.c — the si_host table lent to plugins: every
 * member present and wired to the core, configuration lookups, memory,
 * type traits and the log line format and level filter. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "gguf.h"
#include "host.h"
#include "quant.h"

START_TEST(test_every_member_filled)
{
    si_host h;
    memset(&h, 0xa5, sizeof h);     /* no member may keep garbage */
    si_host_init(&h, NULL);
    ck_assert_uint_eq(h.abi_major, SI_ABI_MAJOR);
    ck_assert_uint_eq(h.abi_minor, SI_ABI_MINOR);
    ck_assert_uint_eq(h.size, sizeof(si_host));
    ck_assert_ptr_null(h.core);
    ck_assert_ptr_nonnull(h.log);
    ck_assert_ptr_nonnull(h.alloc);
    ck_assert_ptr_nonnull(h.free);
    ck_assert_ptr_nonnull(h.cfg_get);
    ck_assert_ptr_nonnull(h.type_block_elems);
    ck_assert_ptr_nonnull(h.type_block_bytes);
    /* the GGUF views and quant routines are the core's own functions */
    ck_assert(h.gguf_path == si_gguf_path);
    ck_assert(h.gguf_get == si_gguf_get);
    ck_assert(h.gguf_arr_get == si_gguf_arr_get);
    ck_assert(h.gguf_n_tensors == si_gguf_n_tensors);
    ck_assert(h.gguf_tensor_at == si_gguf_tensor_at);
    ck_assert(h.gguf_tensor == si_gguf_tensor);
    ck_assert(h.type_name == si_type_name);
    ck_assert(h.dequant == si_dequant);
    ck_assert(h.quant == si_quant);
    ck_assert(SI_HAS_MEMBER(&h, si_host, quant));
}
END_TEST

START_TEST(test_cfg_get)
{
    si_config *c = NULL;
    si_err err;
    const char *ini = "[runtime]\nthreads = 3\n[backend.x]\npath = x.so\ndevice = 1\n";
    ck_assert_int_eq(si_config_load_string(ini, "h.ini", &c, &err), SI_OK);
    ck_assert_int_eq(si_config_set(c, "backend.x.device=2", &err), SI_OK);
    si_host h;
    si_host_init(&h, c);
    ck_assert_ptr_eq(h.core, c);
    ck_assert_str_eq(h.cfg_get(&h, "runtime", "threads"), "3");
    ck_assert_str_eq(h.cfg_get(&h, "runtime", "kv_type"), "auto");     /* documented default */
    ck_assert_str_eq(h.cfg_get(&h, "backend.x", "device"), "2");      /* knob after --set */
    ck_assert_str_eq(h.cfg_get(&h, "backend.x", "enabled"), "true");
    ck_assert_ptr_null(h.cfg_get(&h, "backend.x", "nothing"));
    ck_assert_ptr_null(h.cfg_get(&h, "backend.y", "path"));
    ck_assert_ptr_null(h.cfg_get(&h, NULL, "path"));
    si_host n;
    si_host_init(&n, NULL);
    ck_assert_ptr_null(n.cfg_get(&n, "runtime", "threads"));
    si_config_free(c);
}
END_TEST

START_TEST(test_alloc_free)
{
    si_host h;
    si_host_init(&h, NULL);
    unsigned char *p = h.alloc(&h, 1000);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, 1000);
    h.free(&h, p);
    void *z = h.alloc(&h, 0);
    ck_assert_ptr_nonnull(z);
    h.free(&h, z);
    h.free(&h, NULL);
}
END_TEST

START_TEST(test_type_traits)
{
    si_host h;
    si_host_init(&h, NULL);
    ck_assert_uint_eq(h.type_block_elems(SI_TYPE_F32), 1);
    ck_assert_uint_eq(h.type_block_bytes(SI_TYPE_F32), 4);
    ck_assert_uint_eq(h.type_block_elems(SI_TYPE_Q8_0), 32);
    ck_assert_uint_eq(h.type_block_bytes(SI_TYPE_Q8_0), 34);
    ck_assert_uint_eq(h.type_block_elems(SI_TYPE_Q4_K), 256);
    ck_assert_uint_eq(h.type_block_bytes(SI_TYPE_Q4_K), 144);
    ck_assert_str_eq(h.type_name(SI_TYPE_Q4_K), "q4_K");
    /* retired ids and ids past the end are unknown */
    ck_assert_uint_eq(h.type_block_elems(4), 0);
    ck_assert_uint_eq(h.type_block_bytes(4), 0);
    ck_assert_uint_eq(h.type_block_elems(SI_TYPE_COUNT), 0);
    ck_assert_ptr_null(h.type_name(4));
}
END_TEST

/* Runs fn with stderr sent to a file; returns what was written. */
static char *capture_stderr(void (*fn)(const si_host *), const si_host *h)
{
    char path[] = "/tmp/si_check_host.XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(fd, 2), 2);
    fn(h);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    static char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    close(fd);
    unlink(path);
    return buf;
}

static void log_some(const si_host *h)
{
    si_host_set_log_level(SI_LOG_WARN);
    h->log(h, SI_LOG_ERROR, "cpu", "bad %d", 1);
    h->log(h, SI_LOG_WARN, "cpu", "careful\n");       /* one trailing newline is dropped */
    h->log(h, SI_LOG_INFO, "cpu", "hidden");
    h->log(h, SI_LOG_DEBUG, "cpu", "hidden");
    si_host_set_log_level(SI_LOG_DEBUG);
    h->log(h, SI_LOG_DEBUG, "qwen35", "seen %s", "now");
    h->log(h, SI_LOG_INFO, NULL, "no name");
}

START_TEST(test_log_format_and_filter)
{
    si_host h;
    si_host_init(&h, NULL);
    const char *out = capture_stderr(log_some, &h);
    ck_assert_str_eq(out, "sparkinfer[cpu]: error: bad 1\n"
                          "sparkinfer[cpu]: warning: careful\n"
                          "sparkinfer[qwen35]: debug: seen now\n"
                          "sparkinfer[?]: info: no name\n");
}
END_TEST

START_TEST(test_log_level_from_config)
{
    si_config *c = NULL;
    si_err err;
    ck_assert_int_eq(si_config_load_string("[core]\nlog_level = debug\n", "l.ini", &c, &err), SI_OK);
    si_host h;
    si_host_set_log_level(SI_LOG_ERROR);
    si_host_init(&h, c);
    ck_assert_int_eq(si_host_log_level(), SI_LOG_DEBUG);
    ck_assert_int_eq(si_config_set(c, "core.log_level=error", &err), SI_OK);
    si_host_init(&h, c);
    ck_assert_int_eq(si_host_log_level(), SI_LOG_ERROR);
    si_config_free(c);
    /* the default, when nothing is configured, is warn */
    ck_assert_int_eq(si_config_new(&c, &err), SI_OK);
    si_host_init(&h, c);
    ck_assert_int_eq(si_host_log_level(), SI_LOG_WARN);
    si_host_set_log_level(99);
    ck_assert_int_eq(si_host_log_level(), SI_LOG_DEBUG);
    si_host_set_log_level(-5);
    ck_assert_int_eq(si_host_log_level(), SI_LOG_ERROR);
    si_config_free(c);
}
END_TEST

static Suite *host_suite(void)
{
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_every_member_filled);
    tcase_add_test(tc, test_cfg_get);
    tcase_add_test(tc, test_alloc_free);
    tcase_add_test(tc, test_type_traits);
    tcase_add_test(tc, test_log_format_and_filter);
    tcase_add_test(tc, test_log_level_from_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(host_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
