/* tests/config/check_config.c — the INI configuration: every error path
 * with its file:line message, the inih traps (long lines, multi-line
 * continuation, section truncation), --set overrides, defaults from the
 * key table, plugin knobs, the config-file precedence, the shipped
 * conf/sparkinfer.ini, and the CLI helpers of core/cli/cli_common.c. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "config.h"

#ifndef SI_SYSCONFDIR
#error "SI_SYSCONFDIR comes from AM_CPPFLAGS"
#endif
#ifndef SI_PLUGINDIR
#error "SI_PLUGINDIR comes from AM_CPPFLAGS"
#endif

static char tmpdir[PATH_MAX];

static int load(const char *text, si_config **c, si_err *err)
{
    *c = NULL;
    err->msg[0] = '\0';
    return si_config_load_string(text, "t.ini", c, err);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- every error, with its exact message ---------------------------------- */

typedef struct bad_ini {
    const char *text;
    const char *msg;        /* the whole message, or a part when it ends in '*' */
} bad_ini;

#define NAME49 "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghi"

static const bad_ini bad[] = {
    { "[foo]\n", "t.ini:1: unknown section [foo] (expected [core], [runtime], [backend.NAME], "
                 "[model.NAME] or [kernel.NAME])" },
    { "[ core ]\n", "t.ini:1: unknown section [ core ]*" },
    { "[core.x]\n", "t.ini:1: unknown section [core.x]*" },
    { "[backend]\n", "t.ini:1: section [backend] needs a name: [backend.NAME]" },
    { "[model.]\n", "t.ini:1: section [model.] needs a name: [model.NAME]" },
    { "[kernel.Attn]\n", "t.ini:1: bad plugin name 'Attn' in [kernel.Attn] (use [a-z0-9_]+)" },
    { "[backend.a b]\npath = x\n", "t.ini:1: bad plugin name 'a b' in [backend.a b] (use [a-z0-9_]+)" },
    { "[backend." NAME49 "]\npath = x.so\n",
      "t.ini:1: plugin name '" NAME49 "...' in [backend.NAME] is longer than 48 characters" },
    { "[runtime\n", "t.ini:1: missing ']' in section header" },
    { "[runtime] x\n", "t.ini:1: text after ']' in section header" },
    { "[runtime]\n[core]\n[runtime]\n", "t.ini:3: duplicate section [runtime] (first at line 1)" },
    { "threads = 4\n", "t.ini:1: key 'threads' outside any section" },
    { "[runtime]\nthreads\n", "t.ini:2: missing '=' (expected key = value)" },
    { "[runtime]\nthreads: 4\n", "t.ini:2: missing '=' (expected key = value)" },
    { "[runtime]\nthreads ; = 4\n", "t.ini:2: missing '=' (expected key = value)" },
    { "[runtime]\n = 4\n", "t.ini:2: missing key before '='" },
    { "[runtime]\nThreads = 4\n",
      "t.ini:2: bad key name 'Threads' in [runtime] (use [a-z0-9_]+, at most 48 characters)" },
    { "[runtime]\nthread = 4\n", "t.ini:2: unknown key 'thread' in [runtime] (did you mean 'threads'?)" },
    { "[core]\nfoo = 1\n", "t.ini:2: unknown key 'foo' in [core]" },
    { "[backend.cuda_sm120]\npath = a.so\nprioirty = 5\n",
      "t.ini:3: unknown key 'prioirty' in [backend.cuda_sm120] (did you mean 'priority'?)" },
    { "[model.q]\npath = a.so\nrequire = yes\n",
      "t.ini:3: unknown key 'require' in [model.q] (did you mean 'required'?)" },
    { "[backend.a]\npath = a.so\nenabled = maybe\n",
      "t.ini:3: bad value 'maybe' for 'enabled' in [backend.a] (expected true/false/yes/no/on/off/1/0)" },
    { "[backend.a]\npath = a.so\nrequired = 2\n", "t.ini:3: bad value '2' for 'required'*" },
    { "[backend.a]\npath = a.so\npriority = high\n",
      "t.ini:3: bad value 'high' for 'priority' in [backend.a] (expected an integer in -1000000..1000000)" },
    { "[backend.a]\npath = a.so\npriority = 1000001\n", "t.ini:3: bad value '1000001' for 'priority'*" },
    { "[runtime]\nthreads = -1\n",
      "t.ini:2: bad value '-1' for 'threads' in [runtime] (expected an integer in 0..1024)" },
    { "[runtime]\nn_ctx = 0\n",
      "t.ini:2: bad value '0' for 'n_ctx' in [runtime] (expected an integer in 1..1048576)" },
    { "[runtime]\nn_seq = 4x\n", "t.ini:2: bad value '4x' for 'n_seq'*" },
    { "[runtime]\nn_seq = 0x10\n", "t.ini:2: bad value '0x10' for 'n_seq'*" },
    { "[runtime]\nn_batch = 99999999999999999999999\n",
      "t.ini:2: bad value '99999999999999999999999' for 'n_batch'*" },
    { "[runtime]\nkv_type = q8\n",
      "t.ini:2: bad value 'q8' for 'kv_type' in [runtime] (expected one of auto|f16|int8|f32)" },
    { "[runtime]\nkv_type = F16\n", "t.ini:2: bad value 'F16' for 'kv_type'*" },
    { "[core]\nlog_level = loud\n",
      "t.ini:2: bad value 'loud' for 'log_level' in [core] (expected one of error|warn|info|debug)" },
    { "[runtime]\ntemp = hot\n",
      "t.ini:2: bad value 'hot' for 'temp' in [runtime] (expected a number in 0..100)" },
    { "[runtime]\ntemp = nan\n", "t.ini:2: bad value 'nan' for 'temp'*" },
    { "[runtime]\ntop_p = 1.5\n", "t.ini:2: bad value '1.5' for 'top_p' in [runtime] (expected a number in 0..1)" },
    { "[runtime]\nbackend = CUDA\n",
      "t.ini:2: bad value 'CUDA' for 'backend' in [runtime] (expected auto or a plugin NAME ([a-z0-9_]+))" },
    { "[runtime]\nseed =\n",
      "t.ini:2: empty value for 'seed' in [runtime] (expected an integer in -1..4294967295)" },
    { "[runtime]\nseed = 4294967296\n", "t.ini:2: bad value '4294967296' for 'seed'*" },
    { "[backend.a]\npath =\n", "t.ini:2: empty value for 'path' in [backend.a] (expected a path)*" },
    { "[backend.a]\npath = a.so\npath = b.so\n",
      "t.ini:3: duplicate key 'path' in [backend.a] (first at line 2)" },
    { "[backend.a]\npath = a.so\ndevice = 1\ndevice = 2\n",
      "t.ini:4: duplicate key 'device' in [backend.a] (first at line 3)" },
    { "[backend.a]\n", "t.ini:1: [backend.a] has no 'path' (required when enabled)" },
    { "[runtime]\n[kernel.k]\nenabled = true\n", "t.ini:2: [kernel.k] has no 'path' (required when enabled)" },
    /* multi-line mode is off: an indented line never continues a value */
    { "[backend.a]\npath = a.so\n  b.so\n", "t.ini:3: missing '=' (expected key = value)" },
    { "[backend.a]\npath = a.so\n\tb.so = x\n", "t.ini:3: bad key name 'b.so'*" },
};
#define N_BAD (sizeof bad / sizeof bad[0])

START_TEST(test_bad_config)
{
    const bad_ini *b = &bad[_i];
    si_config *c;
    si_err err;
    int rc = load(b->text, &c, &err);
    ck_assert_msg(rc == SI_EFORMAT, "'%s': rc %d", b->text, rc);
    ck_assert_ptr_null(c);
    size_t n = strlen(b->msg);
    if (b->msg[n - 1] == '*')
        ck_assert_msg(strncmp(err.msg, b->msg, n - 1) == 0, "got '%s', want '%s'", err.msg, b->msg);
    else
        ck_assert_str_eq(err.msg, b->msg);
}
END_TEST

START_TEST(test_all_errors_reported)
{
    si_config *c;
    si_err err;
    const char *text = "[runtime]\n"
                       "threads = many\n"
                       "n_ctx = 128\n"
                       "bogus = 1\n"
                       "[backend.cpu]\n"
                       "path = cpu.so\n"
                       "prioirty = 3\n"
                       "[backend.cpu]\n"
                       "path = other.so\n";
    ck_assert_int_eq(load(text, &c, &err), SI_EFORMAT);
    ck_assert_str_eq(err.msg,
                     "t.ini:2: bad value 'many' for 'threads' in [runtime] (expected an integer "
                     "in 0..1024); t.ini:4: unknown key 'bogus' in [runtime]; t.ini:7: unknown "
                     "key 'prioirty' in [backend.cpu] (did you mean 'priority'?); t.ini:8: "
                     "duplicate section [backend.cpu] (first at line 5)");

    /* more errors than the buffer holds: cut, marked with "..." */
    char big[8192] = "[runtime]\n";
    for (int i = 0; i < 60; i++)
        strcat(big, "nope = 1\n");
    ck_assert_int_eq(load(big, &c, &err), SI_EFORMAT);
    ck_assert_uint_eq(strlen(err.msg), SI_ERR_MSG_MAX - 1);
    ck_assert_str_eq(err.msg + SI_ERR_MSG_MAX - 4, "...");
    const char *head = "t.ini:2: unknown key 'nope' in [runtime]; t.ini:3: ";
    ck_assert(strncmp(err.msg, head, strlen(head)) == 0);
}
END_TEST

/* ---- the inih traps -------------------------------------------------------- */

START_TEST(test_long_lines)
{
    si_config *c;
    si_err err;
    static char text[3 * SI_CONFIG_MAX_LINE];
    char val[SI_CONFIG_MAX_LINE + 8];

    /* 300 bytes: past libinih's default 200, read whole (not split) */
    memset(val, 'a', 293);
    val[293] = '\0';
    snprintf(text, sizeof text, "[backend.a]\npath = %s\npriority = 4\n", val);
    ck_assert_uint_eq(strlen("path = ") + strlen(val), 300);
    ck_assert_msg(load(text, &c, &err) == SI_OK, "%s", err.msg);
    ck_assert_str_eq(si_config_get(c, "backend.a", "path"), val);
    ck_assert_str_eq(si_config_get(c, "backend.a", "priority"), "4");
    si_config_free(c);

    /* exactly SI_CONFIG_MAX_LINE bytes (plus CRLF): accepted */
    size_t vlen = SI_CONFIG_MAX_LINE - strlen("path = ");
    memset(val, 'b', vlen);
    val[vlen] = '\0';
    snprintf(text, sizeof text, "[backend.a]\r\npath = %s\r\n", val);
    ck_assert_msg(load(text, &c, &err) == SI_OK, "%s", err.msg);
    ck_assert_uint_eq(strlen(si_config_get(c, "backend.a", "path")), vlen);
    si_config_free(c);

    /* one byte more: rejected with file:line, and the rest of the line is
     * not taken as a new line (the tail here would parse as a key) */
    memset(val, 'c', vlen + 1);
    val[vlen + 1] = '\0';
    memcpy(val + vlen - 12, " ; x = 1 ", 9);
    snprintf(text, sizeof text, "[backend.a]\npath = %s\nbad line\n", val);
    ck_assert_int_eq(load(text, &c, &err), SI_EFORMAT);
    ck_assert_str_eq(err.msg, "t.ini:2: line longer than 4096 bytes; t.ini:3: missing '=' "
                              "(expected key = value); t.ini:1: [backend.a] has no 'path' "
                              "(required when enabled)");
}
END_TEST

START_TEST(test_indented_lines_are_plain_lines)
{
    si_config *c;
    si_err err;
    ck_assert_int_eq(load("[backend.a]\npath = a.so\n    priority = 5\n\tmode = x\n", &c, &err),
                     SI_OK);
    ck_assert_str_eq(si_config_get(c, "backend.a", "path"), "a.so");
    ck_assert_str_eq(si_config_get(c, "backend.a", "priority"), "5");
    ck_assert_str_eq(si_config_get(c, "backend.a", "mode"), "x");
    si_config_free(c);
}
END_TEST

/* A 48-character plugin name is kept whole (libinih cuts sections at 49). */
START_TEST(test_long_section_name_kept)
{
    const char *name = "kernel.abcdefghijabcdefghijabcdefghijabcdefghijabcdefgh";
    char text[256];
    snprintf(text, sizeof text, "[%s]\npath = k.so\n", name);
    si_config *c;
    si_err err;
    ck_assert_msg(load(text, &c, &err) == SI_OK, "%s", err.msg);
    ck_assert_str_eq(si_config_section_name(c, 0), name);
    ck_assert_str_eq(si_config_get(c, name, "path"), "k.so");
    si_config_free(c);
}
END_TEST

START_TEST(test_bom_crlf_comments)
{
    si_config *c;
    si_err err;
    const char *text = "\xEF\xBB\xBF[runtime]\r\n"
                       "threads = 2 ; two\r\n"
                       "# a comment\r\n"
                       "  ; an indented comment\r\n"
                       "\r\n"
                       "[backend.a]   ; trailing comment\r\n"
                       "path = a;b.so\r\n"
                       "note = x # not a comment\r\n";
    ck_assert_msg(load(text, &c, &err) == SI_OK, "%s", err.msg);
    ck_assert_str_eq(si_config_get(c, "runtime", "threads"), "2");
    ck_assert_str_eq(si_config_get(c, "backend.a", "path"), "a;b.so");
    ck_assert_str_eq(si_config_get(c, "backend.a", "note"), "x # not a comment");
    si_config_free(c);
}
END_TEST

/* ---- values, defaults, knobs ---------------------------------------------- */

START_TEST(test_defaults_from_table)
{
    si_config *c;
    si_err err;
    ck_assert_int_eq(si_config_new(&c, &err), SI_OK);
    ck_assert_uint_eq(si_config_n_sections(c), 0);
    ck_assert_str_eq(si_config_source(c), "<empty>");
    ck_assert_str_eq(si_config_get(c, "runtime", "n_ctx"), "4096");
    ck_assert_int_eq(si_config_get_long(c, "runtime", "n_ctx", -1), 4096);
    ck_assert_int_eq(si_config_get_long(c, "runtime", "threads", -1), 0);
    ck_assert_int_eq(si_config_get_long(c, "runtime", "seed", 7), -1);
    ck_assert_double_eq_tol(si_config_get_double(c, "runtime", "temp", -1), 1.0, 1e-12);
    ck_assert_int_eq(si_config_get_long(c, "runtime", "top_k", -1), 20);
    ck_assert_str_eq(si_config_get(c, "runtime", "kv_type"), "auto");
    ck_assert_str_eq(si_config_get(c, "runtime", "backend"), "auto");
    ck_assert_str_eq(si_config_get(c, "core", "log_level"), "warn");
    ck_assert_ptr_null(si_config_get(c, "core", "plugin_dir"));
    ck_assert_str_eq(si_config_plugin_dir(c), SI_PLUGINDIR);
    ck_assert_ptr_null(si_config_get(c, "runtime", "nope"));
    ck_assert_ptr_null(si_config_get(c, "backend.x", "enabled"));     /* no such section */
    ck_assert_ptr_null(si_config_get(c, "nonsense", "x"));
    ck_assert_int_eq(si_config_get_long(c, "backend.x", "priority", 42), 42);
    si_config_free(c);
    si_config_free(NULL);
    ck_assert_ptr_null(si_config_get(NULL, "runtime", "n_ctx"));
    ck_assert_uint_eq(si_config_n_sections(NULL), 0);
    ck_assert_ptr_null(si_config_section_name(NULL, 0));

    /* plugin keys default once the section exists */
    ck_assert_int_eq(load("[model.m]\npath = m.so\n", &c, &err), SI_OK);
    ck_assert_str_eq(si_config_get(c, "model.m", "enabled"), "true");
    ck_assert_str_eq(si_config_get(c, "model.m", "required"), "false");
    ck_assert_int_eq(si_config_get_long(c, "model.m", "priority", 9), 0);
    ck_assert(si_config_get_bool(c, "model.m", "enabled", false));
    ck_assert_ptr_null(si_config_section_name(c, 1));
    si_config_free(c);
}
END_TEST

START_TEST(test_values_parse)
{
    static const char *const t[] = { "true", "YES", "on", "1" };
    static const char *const f[] = { "False", "no", "OFF", "0" };
    for (int i = 0; i < 4; i++) {
        char text[128];
        si_config *c;
        si_err err;
        snprintf(text, sizeof text, "[backend.a]\npath = a.so\nenabled = %s\nrequired = %s\n",
                 f[i], t[i]);
        ck_assert_msg(load(text, &c, &err) == SI_OK, "%s", err.msg);
        ck_assert(!si_config_get_bool(c, "backend.a", "enabled", true));
        ck_assert(si_config_get_bool(c, "backend.a", "required", false));
        si_config_free(c);
    }
    si_config *c;
    si_err err;
    ck_assert_int_eq(load("[runtime]\nthreads = 1024\nn_ctx = 1\nseed = 4294967295\ntemp = 0\n"
                          "top_p = 1\nkv_type = int8\nbackend = cuda_sm120\nn_predict = -1\n",
                          &c, &err), SI_OK);
    ck_assert_int_eq(si_config_get_long(c, "runtime", "threads", 0), 1024);
    ck_assert_int_eq(si_config_get_long(c, "runtime", "seed", 0), 4294967295L);
    ck_assert_double_eq(si_config_get_double(c, "runtime", "temp", 1), 0);
    ck_assert_str_eq(si_config_get(c, "runtime", "backend"), "cuda_sm120");
    si_config_free(c);
}
END_TEST

/* Keys the core does not own are the plugin's knobs: stored verbatim. */
START_TEST(test_plugin_knobs)
{
    si_config *c;
    si_err err;
    ck_assert_int_eq(load("[backend.x]\npath = x.so\ndevice = 3\nmode = fast lane ; comment\n"
                          "list = a, b\nprio = 5\n", &c, &err), SI_OK);
    ck_assert_str_eq(si_config_get(c, "backend.x", "device"), "3");
    ck_assert_int_eq(si_config_get_long(c, "backend.x", "device", 0), 3);
    ck_assert_str_eq(si_config_get(c, "backend.x", "mode"), "fast lane");
    ck_assert(si_config_get_bool(c, "backend.x", "mode", true));     /* unparsable: dflt */
    ck_assert_str_eq(si_config_get(c, "backend.x", "list"), "a, b");
    ck_assert_str_eq(si_config_get(c, "backend.x", "prio"), "5");    /* far from 'priority' */
    ck_assert_ptr_null(si_config_get(c, "backend.x", "missing"));
    si_config_free(c);
}
END_TEST

/* ---- overrides ------------------------------------------------------------- */

START_TEST(test_set_overrides)
{
    si_config *c;
    si_err err;
    ck_assert_int_eq(load("[runtime]\nthreads = 2\n[kernel.attn_mma_i8]\npath = attn_mma_i8.so\n"
                          "enabled = true\n", &c, &err), SI_OK);
    ck_assert_int_eq(si_config_set(c, "kernel.attn_mma_i8.enabled=false", &err), SI_OK);
    ck_assert(!si_config_get_bool(c, "kernel.attn_mma_i8", "enabled", true));
    ck_assert_int_eq(si_config_set(c, "runtime.threads = 8 ", &err), SI_OK);
    ck_assert_str_eq(si_config_get(c, "runtime", "threads"), "8");
    ck_assert_int_eq(si_config_set(c, "runtime.threads=9", &err), SI_OK);   /* again */
    ck_assert_str_eq(si_config_get(c, "runtime", "threads"), "9");
    /* the key is after the LAST dot before '='; dots after '=' are value */
    ck_assert_int_eq(si_config_set(c, "backend.new.path=/a/b.c/d.so", &err), SI_OK);
    ck_assert_uint_eq(si_config_n_sections(c), 3);
    ck_assert_str_eq(si_config_section_name(c, 2), "backend.new");
    ck_assert_str_eq(si_config_get(c, "backend.new", "path"), "/a/b.c/d.so");
    ck_assert_int_eq(si_config_set(c, "backend.new.device=2", &err), SI_OK);   /* a knob */
    ck_assert_str_eq(si_config_get(c, "backend.new", "device"), "2");
    ck_assert_int_eq(si_config_set(c, "core.log_level=debug", &err), SI_OK);
    ck_assert_str_eq(si_config_get(c, "core", "log_level"), "debug");
    ck_assert_int_eq(si_config_set(c, "runtime.seed=", &err), SI_EINVAL);
    si_config_free(c);
}
END_TEST

typedef struct bad_set {
    const char *assign;
    const char *msg;
} bad_set;

static const bad_set bad_sets[] = {
    { "runtime.threads=lots", "--set runtime.threads=lots: bad value 'lots' for 'threads' in "
                              "[runtime] (expected an integer in 0..1024)" },
    { "foo.bar=1", "--set foo.bar=1: unknown section [foo] (expected [core], [runtime], "
                   "[backend.NAME], [model.NAME] or [kernel.NAME])" },
    { "threads=4", "--set threads=4: expected section.key=value" },
    { "runtime.threads", "--set runtime.threads: expected section.key=value" },
    { "runtime.=4", "--set runtime.=4: expected section.key=value" },
    { ".x=1", "--set .x=1: expected section.key=value" },
    { "runtime.thread=4", "--set runtime.thread=4: unknown key 'thread' in [runtime] (did you "
                          "mean 'threads'?)" },
    { "backend.Bad.path=x", "--set backend.Bad.path=x: bad plugin name 'Bad' in [backend.Bad] "
                            "(use [a-z0-9_]+)" },
    { "backend.y.prioirty=3", "--set backend.y.prioirty=3: unknown key 'prioirty' in "
                              "[backend.y] (did you mean 'priority'?)" },
    { "kernel.k.enabled=maybe", "--set kernel.k.enabled=maybe: bad value 'maybe' for 'enabled' "
                                "in [kernel.k] (expected true/false/yes/no/on/off/1/0)" },
    { "model.m.Path=x", "--set model.m.Path=x: bad key name 'Path' in [model.m] (use "
                        "[a-z0-9_]+, at most 48 characters)" },
};
#define N_BAD_SETS (sizeof bad_sets / sizeof bad_sets[0])

START_TEST(test_set_errors)
{
    const bad_set *b = &bad_sets[_i];
    si_config *c;
    si_err err;
    ck_assert_int_eq(load("[runtime]\nthreads = 2\n", &c, &err), SI_OK);
    ck_assert_int_eq(si_config_set(c, b->assign, &err), SI_EINVAL);
    ck_assert_str_eq(err.msg, b->msg);
    /* a failed --set changes nothing, and leaves no new section behind */
    ck_assert_uint_eq(si_config_n_sections(c), 1);
    ck_assert_str_eq(si_config_get(c, "runtime", "threads"), "2");
    si_config_free(c);
}
END_TEST

/* ---- files, plugin_dir, precedence ----------------------------------------- */

START_TEST(test_file_loading)
{
    char path[PATH_MAX + 32], sub[PATH_MAX + 32];
    si_config *c;
    si_err err;

    snprintf(path, sizeof path, "%s/none.ini", tmpdir);
    ck_assert_int_eq(si_config_load(path, &c, &err), SI_ENOTFOUND);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.msg, "none.ini: cannot open: No such file or directory"));
    ck_assert_int_eq(si_config_load(tmpdir, &c, &err), SI_EIO);
    ck_assert_ptr_nonnull(strstr(err.msg, ": cannot read: Is a directory"));

    /* messages carry the path as given; a NUL byte is an error, not an end */
    snprintf(path, sizeof path, "%s/nul.ini", tmpdir);
    write_file(path, "[runtime]\nthreads = 1\0\nn_ctx = x\n", 33);
    ck_assert_int_eq(si_config_load(path, &c, &err), SI_EFORMAT);
    char want[2 * PATH_MAX + 256];
    snprintf(want, sizeof want, "%s:2: NUL byte in line; %s:3: bad value 'x' for 'n_ctx' in "
             "[runtime] (expected an integer in 1..1048576)", path, path);
    ck_assert_str_eq(err.msg, want);
    unlink(path);

    /* a relative plugin_dir is relative to the file's directory */
    snprintf(sub, sizeof sub, "%s/etc", tmpdir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(path, sizeof path, "%s/etc/s.ini", tmpdir);
    write_file(path, "[core]\nplugin_dir = ../lib\n", 27);
    ck_assert_int_eq(si_config_load(path, &c, &err), SI_OK);
    snprintf(want, sizeof want, "%s/etc/../lib", tmpdir);
    ck_assert_str_eq(si_config_plugin_dir(c), want);
    ck_assert_str_eq(si_config_source(c), path);
    /* from --set it is taken as given */
    ck_assert_int_eq(si_config_set(c, "core.plugin_dir=rel/dir", &err), SI_OK);
    ck_assert_str_eq(si_config_plugin_dir(c), "rel/dir");
    si_config_free(c);
    write_file(path, "[core]\nplugin_dir = /opt/x\n", 27);
    ck_assert_int_eq(si_config_load(path, &c, &err), SI_OK);
    ck_assert_str_eq(si_config_plugin_dir(c), "/opt/x");
    si_config_free(c);
    unlink(path);
    rmdir(sub);
    /* from a string there is no directory: as given */
    ck_assert_int_eq(load("[core]\nplugin_dir = lib\n", &c, &err), SI_OK);
    ck_assert_str_eq(si_config_plugin_dir(c), "lib");
    si_config_free(c);
}
END_TEST

START_TEST(test_default_path_precedence)
{
    unsetenv(SI_CONFIG_ENV);
    ck_assert_str_eq(si_config_default_path(NULL), SI_SYSCONFDIR "/sparkinfer.ini");
    setenv(SI_CONFIG_ENV, "", 1);
    ck_assert_str_eq(si_config_default_path(NULL), SI_SYSCONFDIR "/sparkinfer.ini");
    setenv(SI_CONFIG_ENV, "/env.ini", 1);
    ck_assert_str_eq(si_config_default_path(NULL), "/env.ini");
    ck_assert_str_eq(si_config_default_path("/cli.ini"), "/cli.ini");
    unsetenv(SI_CONFIG_ENV);
}
END_TEST

/* ---- the shipped configuration --------------------------------------------- */

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

START_TEST(test_shipped_conf)
{
    const char *src = getenv("SI_TOP_SRCDIR");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/conf/sparkinfer.ini", src ? src : ".");
    si_config *c;
    si_err err;
    ck_assert_msg(si_config_load(path, &c, &err) == SI_OK, "%s", err.msg);
    static const char *const order[] = {
        "core", "runtime", "backend.cuda_sm120", "backend.cpu", "model.qwen35", "model.qwen36",
        "kernel.attn_mma_i8", "kernel.moe_grouped_i8",
    };
    ck_assert_uint_eq(si_config_n_sections(c), 8);
    for (size_t i = 0; i < 8; i++)
        ck_assert_str_eq(si_config_section_name(c, i), order[i]);
    ck_assert_str_eq(si_config_get(c, "backend.cuda_sm120", "path"), "cuda_sm120.so");
    ck_assert_int_eq(si_config_get_long(c, "backend.cuda_sm120", "priority", 0), 100);
    ck_assert(!si_config_get_bool(c, "backend.cuda_sm120", "required", true));
    ck_assert_int_eq(si_config_get_long(c, "backend.cpu", "priority", 0), 10);
    ck_assert_str_eq(si_config_get(c, "model.qwen36", "path"), "qwen36.so");
    ck_assert(si_config_get_bool(c, "kernel.moe_grouped_i8", "enabled", false));
    ck_assert_str_eq(si_config_plugin_dir(c), SI_PLUGINDIR);     /* commented out */
    for (size_t i = 0; i < si_config_n_sections(c); i++)
        ck_assert(!si_config_get_bool(c, si_config_section_name(c, i), "required", false));
    si_config_free(c);
}
END_TEST

/* The documented keys in conf/sparkinfer.ini are exactly the generated text. */
START_TEST(test_shipped_conf_matches_table)
{
    const char *src = getenv("SI_TOP_SRCDIR");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/conf/sparkinfer.ini", src ? src : ".");
    const char *conf = read_all(path);
    const char *begin = strstr(conf, "; >>> generated");
    const char *endm = "; <<< end of generated block\n";
    const char *end = strstr(conf, endm);
    ck_assert_msg(begin != NULL && end != NULL && end > begin, "markers missing in %s", path);
    size_t n = (size_t)(end - begin) + strlen(endm);

    char *gen = NULL;
    size_t glen = 0;
    FILE *f = open_memstream(&gen, &glen);
    ck_assert_ptr_nonnull(f);
    si_config_write_defaults(f);
    fclose(f);
    ck_assert_msg(glen == n && memcmp(gen, begin, n) == 0,
                  "conf/sparkinfer.ini's generated block differs from si_config_write_defaults()");
    /* and the generated text parses, with every default valid */
    si_config *c;
    si_err err;
    ck_assert_msg(load(gen, &c, &err) == SI_OK, "%s", err.msg);
    ck_assert_uint_eq(si_config_n_sections(c), 2);
    si_config_free(c);
    free(gen);
}
END_TEST

/* ---- CLI helpers (core/cli/cli_common.c) ----------------------------------- */

START_TEST(test_cli_config_opt)
{
    char *argv[] = { "plugins", "--config", "a.ini", "--set", "x.y=1", "--set=z.w=2",
                     "--config=b.ini", "--json", "--settings", "--set", NULL };
    int argc = 10;
    si_cli_config_opts o = { 0 };
    int got[16], ng = 0;
    for (int i = 1; i < argc; i++) {
        int at = i;
        got[ng++] = si_cli_config_opt(&o, argc, argv, &i);
        if (got[ng - 1] <= 0)
            ck_assert_int_eq(i, at);
    }
    ck_assert_int_eq(ng, 7);
    static const int want[] = { 1, 1, 1, 1, 0, 0, -1 };
    for (int k = 0; k < ng; k++)
        ck_assert_int_eq(got[k], want[k]);
    ck_assert_str_eq(o.config_path, "b.ini");
    ck_assert_int_eq(o.n_sets, 2);
    ck_assert_str_eq(o.sets[0], "x.y=1");
    ck_assert_str_eq(o.sets[1], "z.w=2");

    si_cli_config_opts full = { 0 };
    char *one[] = { "x", "--set", "a.b=1" };
    for (int k = 0; k < 64; k++) {
        int i = 1;
        ck_assert_int_eq(si_cli_config_opt(&full, 3, one, &i), 1);
        ck_assert_int_eq(i, 2);
    }
    int i = 1;
    ck_assert_int_eq(si_cli_config_opt(&full, 3, one, &i), -1);
}
END_TEST

START_TEST(test_cli_config_load)
{
    char a[PATH_MAX + 32], b[PATH_MAX + 32];
    snprintf(a, sizeof a, "%s/a.ini", tmpdir);
    snprintf(b, sizeof b, "%s/b.ini", tmpdir);
    write_file(a, "[runtime]\nthreads = 2\n", 22);
    write_file(b, "[runtime]\nthreads = 3\n", 22);
    setenv(SI_CONFIG_ENV, b, 1);

    si_cli_config_opts o = { .config_path = a };
    si_config *c = si_cli_config_load(&o);              /* --config beats the env */
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(si_config_get(c, "runtime", "threads"), "2");
    si_config_free(c);

    o.config_path = NULL;                               /* then the env */
    o.sets[o.n_sets++] = "runtime.threads=5";           /* and --set on top */
    o.sets[o.n_sets++] = "model.m.path=m.so";
    c = si_cli_config_load(&o);
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(si_config_source(c), b);
    ck_assert_str_eq(si_config_get(c, "runtime", "threads"), "5");
    ck_assert_str_eq(si_config_get(c, "model.m", "path"), "m.so");
    si_config_free(c);

    o.sets[o.n_sets++] = "runtime.threads=lots";        /* a bad --set fails the load */
    ck_assert_ptr_null(si_cli_config_load(&o));
    o.n_sets = 0;
    setenv(SI_CONFIG_ENV, "/nonexistent/x.ini", 1);
    ck_assert_ptr_null(si_cli_config_load(&o));
    unsetenv(SI_CONFIG_ENV);
    unlink(a);
    unlink(b);
}
END_TEST

START_TEST(test_cli_parse_long)
{
    long v = 0;
    ck_assert(si_cli_parse_long("42", 0, 100, &v));
    ck_assert_int_eq(v, 42);
    ck_assert(si_cli_parse_long("-3", -5, 5, &v));
    ck_assert_int_eq(v, -3);
    v = 7;
    ck_assert(!si_cli_parse_long("4x", 0, 100, &v));
    ck_assert(!si_cli_parse_long("", 0, 100, &v));
    ck_assert(!si_cli_parse_long(" 4", 0, 100, &v));
    ck_assert(!si_cli_parse_long("101", 0, 100, &v));
    ck_assert(!si_cli_parse_long("-1", 0, 100, &v));
    ck_assert(!si_cli_parse_long("99999999999999999999", 0, LONG_MAX, &v));
    ck_assert(!si_cli_parse_long(NULL, 0, 100, &v));
    ck_assert_int_eq(v, 7);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_bad_config, 0, (int)N_BAD);
    tcase_add_test(tc, test_all_errors_reported);
    suite_add_tcase(s, tc);
    tc = tcase_create("inih");
    tcase_add_test(tc, test_long_lines);
    tcase_add_test(tc, test_indented_lines_are_plain_lines);
    tcase_add_test(tc, test_long_section_name_kept);
    tcase_add_test(tc, test_bom_crlf_comments);
    suite_add_tcase(s, tc);
    tc = tcase_create("values");
    tcase_add_test(tc, test_defaults_from_table);
    tcase_add_test(tc, test_values_parse);
    tcase_add_test(tc, test_plugin_knobs);
    tcase_add_test(tc, test_set_overrides);
    tcase_add_loop_test(tc, test_set_errors, 0, (int)N_BAD_SETS);
    suite_add_tcase(s, tc);
    tc = tcase_create("files");
    tcase_add_test(tc, test_file_loading);
    tcase_add_test(tc, test_default_path_precedence);
    tcase_add_test(tc, test_shipped_conf);
    tcase_add_test(tc, test_shipped_conf_matches_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("cli");
    tcase_add_test(tc, test_cli_config_opt);
    tcase_add_test(tc, test_cli_config_load);
    tcase_add_test(tc, test_cli_parse_long);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s", "/tmp/si_check_config.XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("check_config: mkdtemp");
        return 99;
    }
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rmdir(tmpdir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
