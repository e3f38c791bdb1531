/* tests/loader/check_loader.c — the plugin loader against real plugins:
 * the good ones load and work, each bad one is refused with its exact
 * status and a message naming the file and the reason, `required = true`
 * turns each refusal into a start-up failure, and every handle is closed.
 *
 * The plugins are built by tests/loader/local.am (check_LTLIBRARIES); the
 * real .so files are in $SI_TOP_BUILDDIR/tests/loader/plugins/.libs. */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "gguf.h"
#include "host.h"
#include "loader.h"

static char plugdir[PATH_MAX];      /* the test plugins */
static char tmpdir[PATH_MAX];       /* scratch: a text file named .so, GGUFs */
static char notlib[PATH_MAX + 32];  /* tmpdir/not_a_library.so */

typedef struct env {
    si_config   *cfg;
    si_host      host;
    si_registry *reg;
    si_err       err;
    int          rc;
} env;

/* Configuration = [core] plugin_dir = plugdir, then body. */
static void env_cfg(env *e, const char *body)
{
    static char text[16384];
    memset(e, 0, sizeof *e);
    snprintf(text, sizeof text, "[core]\nplugin_dir = %s\n%s", plugdir, body);
    int rc = si_config_load_string(text, "test.ini", &e->cfg, &e->err);
    ck_assert_msg(rc == SI_OK, "config: %s", e->err.msg);
    si_host_init(&e->host, e->cfg);
}

static void env_load(env *e, bool all)
{
    e->err.msg[0] = '\0';
    e->rc = all ? si_registry_load_all(e->cfg, &e->host, &e->reg, &e->err)
                : si_registry_load(e->cfg, &e->host, &e->reg, &e->err);
}

static void env_free(env *e)
{
    si_registry_free(e->reg);
    si_config_free(e->cfg);
    e->reg = NULL;
    e->cfg = NULL;
}

static void plug_path(char *out, size_t n, const char *file)
{
    snprintf(out, n, "%s/%s", plugdir, file);
}

/* Whether the dynamic linker still holds the plugin file open. */
static bool still_loaded(const char *file)
{
    char p[PATH_MAX + 64];
    plug_path(p, sizeof p, file);
    void *h = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return false;
    dlclose(h);                 /* drop the reference NOLOAD just took */
    return true;
}

/* ---- good plugins ---------------------------------------------------------- */

START_TEST(test_good_plugins_load)
{
    env e;
    env_cfg(&e, "[backend.ok_backend]\npath = ok_backend.so\npriority = 7\nrequired = yes\n"
                "[model.ok_model]\npath = ok_model.so\n"
                "[kernel.ok_kernel]\npath = ok_kernel.so\npriority = -3\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    ck_assert_uint_eq(si_registry_count(e.reg), 3);

    static const char *const sections[] = { "backend.ok_backend", "model.ok_model", "kernel.ok_kernel" };
    static const char *const names[] = { "ok_backend", "ok_model", "ok_kernel" };
    static const char *const versions[] = { "1.2.3", "0.0.1", "0.1" };
    static const uint32_t kinds[] = { SI_KIND_BACKEND, SI_KIND_MODEL, SI_KIND_KERNEL };
    static const long prio[] = { 7, 0, -3 };
    for (size_t i = 0; i < 3; i++) {
        const si_plugin_record *r = si_registry_at(e.reg, i);
        char want[PATH_MAX + 64], file[64];
        snprintf(file, sizeof file, "%s.so", names[i]);
        plug_path(want, sizeof want, file);
        ck_assert_str_eq(r->section, sections[i]);
        ck_assert_str_eq(r->name, names[i]);
        ck_assert_uint_eq(r->kind, kinds[i]);
        ck_assert_str_eq(r->path, want);
        ck_assert_int_eq(r->state, SI_PLUGIN_LOADED);
        ck_assert_int_eq(r->status, SI_OK);
        ck_assert_str_eq(r->reason, "");
        ck_assert_int_eq(r->required, i == 0);
        ck_assert_int_eq(r->priority, prio[i]);
        ck_assert_ptr_nonnull(r->desc);
        ck_assert_str_eq(r->desc->name, names[i]);
        ck_assert_str_eq(r->desc->version, versions[i]);
        ck_assert_uint_eq(r->desc->kind, kinds[i]);
        ck_assert_ptr_eq(si_registry_find(e.reg, kinds[i], names[i]), r);
        ck_assert(still_loaded(file));
    }
    ck_assert_ptr_null(si_registry_find(e.reg, SI_KIND_MODEL, "ok_backend"));
    ck_assert_ptr_null(si_registry_find(e.reg, SI_KIND_BACKEND, "nope"));
    ck_assert_ptr_null(si_registry_at(e.reg, 3));
    env_free(&e);
    /* si_registry_free dlclose()d every handle */
    ck_assert(!still_loaded("ok_backend.so"));
    ck_assert(!still_loaded("ok_model.so"));
    ck_assert(!still_loaded("ok_kernel.so"));
}
END_TEST

/* The op table handed out works, and a plugin knob reaches the plugin
 * through host->cfg_get. */
START_TEST(test_backend_ops_usable)
{
    env e;
    env_cfg(&e, "[backend.ok_backend]\npath = ok_backend.so\nmax_bytes = 100\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    const si_plugin_record *r = si_registry_find(e.reg, SI_KIND_BACKEND, "ok_backend");
    ck_assert_ptr_nonnull(r);
    const struct si_backend_ops *o = r->desc->ops;
    si_backend *b = NULL;
    si_err err;
    ck_assert_int_eq(o->open(&e.host, r->section, &b, &err), SI_OK);

    si_buf *buf = NULL, *buf2 = NULL;
    ck_assert_int_eq(o->buf_alloc(b, 64, &buf, &err), SI_OK);
    unsigned char in[64], out[64];
    for (int i = 0; i < 64; i++)
        in[i] = (unsigned char)(i * 7 + 1);
    ck_assert_int_eq(o->upload(b, buf, 0, in, 64, &err), SI_OK);
    memset(out, 0, sizeof out);
    ck_assert_int_eq(o->download(b, out, buf, 16, 48, &err), SI_OK);
    ck_assert_mem_eq(out, in + 16, 48);
    ck_assert_int_eq(o->upload(b, buf, 60, in, 8, &err), SI_ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "beyond buffer of 64"));
    /* 64 + 64 > max_bytes = 100 */
    ck_assert_int_eq(o->buf_alloc(b, 64, &buf2, &err), SI_ENOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "max_bytes 100"));

    si_kv_desc kd = { .size = sizeof kd, .n_layer = 1, .n_head_kv = 1, .head_dim = 4,
                      .n_seq = 2, .n_ctx = 8 };
    si_kv *kv = NULL;
    ck_assert_int_eq(o->kv_create(b, &kd, &kv, &err), SI_OK);
    ck_assert_int_eq(o->kv_seq_reset(b, kv, 1, &err), SI_OK);
    ck_assert_int_eq(o->kv_seq_reset(b, kv, 2, &err), SI_ERANGE);
    o->kv_free(b, kv);

    si_op op;
    memset(&op, 0, sizeof op);
    op.kind = SI_OP_ADD;
    ck_assert(!o->supports(b, &op));
    ck_assert_int_eq(o->exec(b, &op, 1, &err), SI_EUNSUPPORTED);
    o->buf_free(b, buf);
    o->buf_free(b, NULL);
    o->close(b);
    o->close(NULL);

    /* a knob the plugin rejects, set on the command line */
    ck_assert_int_eq(si_config_set(e.cfg, "backend.ok_backend.max_bytes=lots", &err), SI_OK);
    b = NULL;
    ck_assert_int_eq(o->open(&e.host, r->section, &b, &err), SI_EINVAL);
    ck_assert_str_eq(err.msg, "[backend.ok_backend] max_bytes: 'lots' is not a byte count");
    env_free(&e);
}
END_TEST

static void write_gguf(const char *path, const char *arch)
{
    si_gguf_writer *w = NULL;
    si_err err;
    ck_assert_msg(si_gguf_writer_open(path, &w, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(si_gguf_writer_set_str(w, "general.architecture", arch), SI_OK);
    ck_assert_msg(si_gguf_writer_close(w, &err) == SI_OK, "%s", err.msg);
}

/* The model plugin reads GGUF metadata through the host's views. */
START_TEST(test_model_accepts_via_host)
{
    env e;
    env_cfg(&e, "[backend.ok_backend]\npath = ok_backend.so\n[model.ok_model]\npath = ok_model.so\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    const si_plugin_record *mr = si_registry_find(e.reg, SI_KIND_MODEL, "ok_model");
    const si_plugin_record *br = si_registry_find(e.reg, SI_KIND_BACKEND, "ok_backend");
    ck_assert_ptr_nonnull(mr);
    ck_assert_ptr_nonnull(br);
    const struct si_model_ops *mo = mr->desc->ops;

    char good[PATH_MAX + 32], other[PATH_MAX + 32];
    snprintf(good, sizeof good, "%s/testarch.gguf", tmpdir);
    snprintf(other, sizeof other, "%s/llama.gguf", tmpdir);
    write_gguf(good, "testarch");
    write_gguf(other, "llama");
    si_gguf *g1 = NULL, *g2 = NULL;
    si_err err;
    ck_assert_msg(si_gguf_open(good, &g1, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(si_gguf_open(other, &g2, &err) == SI_OK, "%s", err.msg);
    ck_assert(mo->accepts(&e.host, g1));
    ck_assert(!mo->accepts(&e.host, g2));

    si_backend_ref be = { .ops = br->desc->ops, .b = NULL, .name = "ok_backend" };
    si_model *m = NULL;
    ck_assert_int_eq(mo->load(&e.host, g2, &be, 1, 16, &m, &err), SI_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "llama.gguf: general.architecture is not 'testarch'"));
    ck_assert_msg(mo->load(&e.host, g1, &be, 2, 16, &m, &err) == SI_OK, "%s", err.msg);
    si_model_info info;
    mo->info(m, &info);
    ck_assert_str_eq(info.arch, "testarch");
    ck_assert_uint_eq(info.n_seq_max, 2);
    ck_assert_uint_eq(info.n_ctx, 16);
    ck_assert_int_eq(mo->seq_reset(m, 1, &err), SI_OK);
    ck_assert_int_eq(mo->seq_reset(m, 2, &err), SI_ERANGE);
    ck_assert_int_eq(mo->forward(m, NULL, NULL, &err), SI_EUNSUPPORTED);
    mo->unload(m);
    si_gguf_close(g1);
    si_gguf_close(g2);
    env_free(&e);
}
END_TEST

START_TEST(test_kernel_table)
{
    env e;
    env_cfg(&e, "[kernel.ok_kernel]\npath = ok_kernel.so\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    const si_plugin_record *r = si_registry_find(e.reg, SI_KIND_KERNEL, "ok_kernel");
    ck_assert_ptr_nonnull(r);
    const struct si_kernel_ops *k = r->desc->ops;
    ck_assert_str_eq(k->backend, "ok_backend");
    ck_assert_uint_eq(k->op, SI_OP_MATMUL);
    void *st = NULL;
    si_err err;
    ck_assert_int_eq(k->init(&e.host, r->section, NULL, &st, &err), SI_OK);
    si_op op;
    memset(&op, 0, sizeof op);
    op.kind = SI_OP_MATMUL;
    ck_assert(!k->supports(st, &op));
    op.dst.ne[0] = 7;
    ck_assert(k->supports(st, &op));
    ck_assert_int_eq(k->exec(st, &op, &err), SI_OK);
    k->fini(st);
    k->fini(NULL);
    env_free(&e);
}
END_TEST

/* The engine's step after opening a backend: loaded kernels for it are
 * attached, the backend routes the ops they take through them; refusals
 * are skipped unless the kernel is required. */
START_TEST(test_kernel_attach)
{
    env e;
    env_cfg(&e, "[backend.ok_backend]\npath = ok_backend.so\n[kernel.ok_kernel]\npath = ok_kernel.so\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    const si_plugin_record *r = si_registry_find(e.reg, SI_KIND_BACKEND, "ok_backend");
    const struct si_backend_ops *o = r->desc->ops;
    si_backend *b = NULL;
    si_err err;
    size_t n = 99;
    /* a backend of another name is offered nothing */
    ck_assert_int_eq(o->open(&e.host, r->section, &b, &err), SI_OK);
    ck_assert_int_eq(si_registry_attach_kernels(e.reg, &e.host, "other", o, b, &n, &err), SI_OK);
    ck_assert_uint_eq(n, 0);
    si_op op;
    memset(&op, 0, sizeof op);
    op.kind = SI_OP_MATMUL;
    op.dst.ne[0] = 7;
    op.dst.ne[1] = 1;
    ck_assert(!o->supports(b, &op));
    /* attached: the marked op runs through the kernel, others do not */
    ck_assert_int_eq(si_registry_attach_kernels(e.reg, &e.host, "ok_backend", o, b, &n, &err), SI_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert(o->supports(b, &op));
    ck_assert_int_eq(o->exec(b, &op, 1, &err), SI_OK);
    op.dst.ne[1] = 13;
    ck_assert_int_eq(o->exec(b, &op, 1, &err), SI_EINVAL);
    ck_assert_str_eq(err.msg, "ok_kernel: refusing 13 rows");
    op.dst.ne[0] = 8;
    ck_assert(!o->supports(b, &op));
    ck_assert_int_eq(o->exec(b, &op, 1, &err), SI_EUNSUPPORTED);
    o->close(b);   /* calls the kernel's fini */

    /* the backend refuses: skipped, or fatal when the kernel is required */
    ck_assert_int_eq(si_config_set(e.cfg, "backend.ok_backend.kernels=refuse", &err), SI_OK);
    ck_assert_int_eq(o->open(&e.host, r->section, &b, &err), SI_OK);
    ck_assert_int_eq(si_registry_attach_kernels(e.reg, &e.host, "ok_backend", o, b, &n, &err), SI_OK);
    ck_assert_uint_eq(n, 0);
    o->close(b);
    env_free(&e);

    env_cfg(&e, "[backend.ok_backend]\npath = ok_backend.so\nkernels = refuse\n"
                "[kernel.ok_kernel]\npath = ok_kernel.so\nrequired = true\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    r = si_registry_find(e.reg, SI_KIND_BACKEND, "ok_backend");
    ck_assert_int_eq(o->open(&e.host, r->section, &b, &err), SI_OK);
    ck_assert_int_eq(si_registry_attach_kernels(e.reg, &e.host, "ok_backend", o, b, &n, &err), SI_EREFUSED);
    ck_assert_str_eq(err.msg, "[kernel.ok_kernel] is required: ok_backend: kernels = refuse");
    o->close(b);
    env_free(&e);
}
END_TEST

/* ---- every way a plugin is refused ----------------------------------------- */

typedef struct bad_case {
    const char *section;
    const char *path;       /* "@notlib", "@dir", "@long": made at run time */
    int         status;
    const char *fragment;   /* "{DIR}" = plugdir, "{ABI}" = "2.0 vs core 1.0" */
    bool        is_lib;     /* a library that was dlopen()ed, then closed */
} bad_case;

static const bad_case bad[] = {
    { "backend.missing", "missing.so", SI_ENOTFOUND, "missing.so: no such file (looked in {DIR})", false },
    { "backend.not_a_library", "@notlib", SI_EIO, "not_a_library.so: dlopen failed: ", false },
    { "kernel.bad_undef", "bad_undef.so", SI_EIO,
      "undefined symbol: si_test_symbol_nobody_defines (check its dependencies with ldd)", false },
    { "backend.no_symbol", "no_symbol.so", SI_ENOTFOUND, "no_symbol.so: no entry point si_plugin_entry", true },
    { "backend.null_entry", "null_entry.so", SI_EREFUSED,
      "null_entry.so: si_plugin_entry returned NULL: the plugin refused this host", true },
    { "backend.wrong_major", "wrong_major.so", SI_EABI, "wrong_major.so: ABI {ABI}", true },
    { "backend.short_size", "short_size.so", SI_EABI,
      "short_size.so: descriptor too small (8 bytes, need at least", true },
    { "backend.ok_model", "ok_model.so", SI_EINVAL,
      "ok_model.so: is a model plugin (kind 2), configured as [backend.ok_model]", true },
    { "backend.other", "ok_backend.so", SI_EINVAL,
      "ok_backend.so: plugin calls itself 'ok_backend', configured as [backend.other]", true },
    { "model.null_name", "null_name.so", SI_EINVAL, "null_name.so: descriptor field 'name' is NULL", true },
    { "backend.bad_ops_null", "bad_ops_null.so", SI_EINVAL,
      "bad_ops_null.so: descriptor has no op table (ops is NULL)", true },
    { "backend.bad_ops_small", "bad_ops_small.so", SI_EABI,
      "bad_ops_small.so: op table too small (4 bytes, need at least", true },
    { "backend.bad_ops_member", "bad_ops_member.so", SI_EINVAL,
      "bad_ops_member.so: op table has no 'exec' (a required member)", true },
    { "kernel.bad_kernel_op", "bad_kernel_op.so", SI_EUNSUPPORTED,
      "bad_kernel_op.so: kernel replaces op 99, unknown to this core", true },
    { "kernel.probe_refuses", "probe_refuses.so", SI_EREFUSED,
      "probe_refuses.so: probe refused: no device", true },
    { "backend.a_dir", "@dir", SI_EIO, ": not a regular file", false },
    { "backend.too_long", "@long", SI_ERANGE, ": path too long (", false },
};
#define N_BAD (sizeof bad / sizeof bad[0])

static void replace(char *s, size_t n, const char *what, const char *with)
{
    char *p = strstr(s, what);
    if (p == NULL)
        return;
    char tail[1024];
    snprintf(tail, sizeof tail, "%s", p + strlen(what));
    snprintf(p, n - (size_t)(p - s), "%s%s", with, tail);
}

static const char *case_path(const bad_case *c, char *buf, size_t n)
{
    if (strcmp(c->path, "@notlib") == 0)
        return notlib;
    if (strcmp(c->path, "@dir") == 0)
        return tmpdir;
    if (strcmp(c->path, "@long") == 0) {
        /* fits a 4096-byte line, but not PATH_MAX once the dir is prefixed */
        size_t len = 4080 < n - 1 ? 4080 : n - 1;
        memset(buf, 'x', len);
        buf[len] = '\0';
        return buf;
    }
    return c->path;
}

static void case_cfg(env *e, const bad_case *c, bool required)
{
    static char body[8192], pbuf[4096 + 1];
    snprintf(body, sizeof body, "[%s]\npath = %s\nrequired = %s\n", c->section,
             case_path(c, pbuf, sizeof pbuf), required ? "true" : "false");
    env_cfg(e, body);
}

static void case_fragment(const bad_case *c, char *out, size_t n)
{
    char abi[64];
    snprintf(abi, sizeof abi, "%d.0 vs core %d.%d", SI_ABI_MAJOR + 1, SI_ABI_MAJOR, SI_ABI_MINOR);
    snprintf(out, n, "%s", c->fragment);
    replace(out, n, "{DIR}", plugdir);
    replace(out, n, "{ABI}", abi);
}

/* Not required: recorded as refused, skipped, and the load succeeds. */
START_TEST(test_bad_plugin_refused)
{
    const bad_case *c = &bad[_i];
    env e;
    char frag[1024], pbuf[4097];
    case_cfg(&e, c, false);
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "[%s] %s", c->section, e.err.msg);
    ck_assert_uint_eq(si_registry_count(e.reg), 1);
    const si_plugin_record *r = si_registry_at(e.reg, 0);
    ck_assert_str_eq(r->section, c->section);
    ck_assert_int_eq(r->state, SI_PLUGIN_REFUSED);
    ck_assert_msg(r->status == c->status, "[%s] status %d (%s), want %d: %s", c->section,
                  r->status, si_strerror(r->status), c->status, r->reason);
    case_fragment(c, frag, sizeof frag);
    ck_assert_msg(strstr(r->reason, frag) != NULL, "[%s] reason '%s' lacks '%s'", c->section,
                  r->reason, frag);
    /* every reason starts with the file as configured (long ones abridged) */
    const char *cp = case_path(c, pbuf, sizeof pbuf);
    size_t cl = strlen(cp) > 60 ? 60 : strlen(cp);
    ck_assert_msg(strncmp(r->reason, cp, cl) == 0, "[%s] reason '%.80s' does not start with "
                  "the path", c->section, r->reason);
    ck_assert_ptr_null(r->desc);
    ck_assert_ptr_null(si_registry_find(e.reg, r->kind, r->name));
    /* a refused library is closed at once, not at si_registry_free */
    if (c->is_lib)
        ck_assert_msg(!still_loaded(c->path), "%s still loaded", c->path);
    env_free(&e);
}
END_TEST

/* required = true: the same refusal stops start-up with that message. */
START_TEST(test_bad_plugin_required_fails)
{
    const bad_case *c = &bad[_i];
    env e;
    char frag[1024], head[128];
    case_cfg(&e, c, true);
    env_load(&e, false);
    ck_assert_msg(e.rc == c->status, "[%s] rc %d, want %d", c->section, e.rc, c->status);
    ck_assert_ptr_null(e.reg);
    snprintf(head, sizeof head, "[%s] is required: ", c->section);
    ck_assert_msg(strncmp(e.err.msg, head, strlen(head)) == 0, "'%s'", e.err.msg);
    case_fragment(c, frag, sizeof frag);
    ck_assert_msg(strstr(e.err.msg, frag) != NULL, "'%s' lacks '%s'", e.err.msg, frag);
    if (c->is_lib)
        ck_assert(!still_loaded(c->path));
    env_free(&e);
}
END_TEST

START_TEST(test_no_path_configured)
{
    env e;
    si_err err;
    env_cfg(&e, "");
    /* a section created by --set has no path (a file section without one
     * is a configuration error) */
    ck_assert_int_eq(si_config_set(e.cfg, "backend.nopath.priority=3", &err), SI_OK);
    env_load(&e, false);
    ck_assert_int_eq(e.rc, SI_OK);
    const si_plugin_record *r = si_registry_at(e.reg, 0);
    ck_assert_int_eq(r->state, SI_PLUGIN_REFUSED);
    ck_assert_int_eq(r->status, SI_EINVAL);
    ck_assert_str_eq(r->reason, "backend.nopath: no 'path' configured");
    ck_assert_str_eq(r->path, "");
    ck_assert_int_eq(r->priority, 3);
    env_free(&e);
}
END_TEST

/* ---- names, order, disabled, required -------------------------------------- */

START_TEST(test_duplicate_name_across_kinds)
{
    env e;
    env_cfg(&e, "[backend.dup]\npath = dup_backend.so\n[model.dup]\npath = dup_model.so\n");
    env_load(&e, false);
    ck_assert_int_eq(e.rc, SI_OK);
    const si_plugin_record *a = si_registry_at(e.reg, 0), *b = si_registry_at(e.reg, 1);
    ck_assert_int_eq(a->state, SI_PLUGIN_LOADED);
    ck_assert_int_eq(b->state, SI_PLUGIN_REFUSED);
    ck_assert_int_eq(b->status, SI_EINVAL);
    ck_assert_str_eq(b->reason, "dup_model.so: plugin name 'dup' is already loaded by "
                                "[backend.dup] (names are unique across kinds)");
    ck_assert_ptr_eq(si_registry_find(e.reg, SI_KIND_BACKEND, "dup"), a);
    ck_assert_ptr_null(si_registry_find(e.reg, SI_KIND_MODEL, "dup"));
    ck_assert(!still_loaded("dup_model.so"));
    env_free(&e);

    /* the rule is about loaded plugins: with the first disabled, the second loads */
    env_cfg(&e, "[backend.dup]\npath = dup_backend.so\nenabled = off\n"
                "[model.dup]\npath = dup_model.so\n");
    env_load(&e, false);
    ck_assert_int_eq(e.rc, SI_OK);
    ck_assert_int_eq(si_registry_at(e.reg, 0)->state, SI_PLUGIN_DISABLED);
    ck_assert_int_eq(si_registry_at(e.reg, 1)->state, SI_PLUGIN_LOADED);
    ck_assert_ptr_nonnull(si_registry_find(e.reg, SI_KIND_MODEL, "dup"));
    env_free(&e);
}
END_TEST

START_TEST(test_disabled_not_opened)
{
    env e;
    /* a disabled section is never opened: its missing file is no error,
     * even when it is required */
    env_cfg(&e, "[backend.ok_backend]\npath = ok_backend.so\nenabled = false\n"
                "[backend.gone]\npath = gone.so\nenabled = no\nrequired = true\n");
    env_load(&e, false);
    ck_assert_msg(e.rc == SI_OK, "%s", e.err.msg);
    ck_assert_uint_eq(si_registry_count(e.reg), 2);
    for (size_t i = 0; i < 2; i++) {
        const si_plugin_record *r = si_registry_at(e.reg, i);
        ck_assert_int_eq(r->state, SI_PLUGIN_DISABLED);
        ck_assert_int_eq(r->status, SI_OK);
        ck_assert_str_eq(r->reason, "enabled = false");
        ck_assert_ptr_null(r->desc);
    }
    ck_assert(si_registry_at(e.reg, 1)->required);
    ck_assert_ptr_null(si_registry_find(e.reg, SI_KIND_BACKEND, "ok_backend"));
    ck_assert(!still_loaded("ok_backend.so"));
    env_free(&e);

    /* --set turns a plugin off */
    env_cfg(&e, "[kernel.ok_kernel]\npath = ok_kernel.so\n");
    si_err err;
    ck_assert_int_eq(si_config_set(e.cfg, "kernel.ok_kernel.enabled=false", &err), SI_OK);
    env_load(&e, false);
    ck_assert_int_eq(si_registry_at(e.reg, 0)->state, SI_PLUGIN_DISABLED);
    env_free(&e);
}
END_TEST

START_TEST(test_config_order_and_absolute_path)
{
    env e;
    char abs_body[PATH_MAX + 256], p[PATH_MAX + 64];
    plug_path(p, sizeof p, "ok_backend.so");
    snprintf(abs_body, sizeof abs_body,
             "[kernel.ok_kernel]\npath = ok_kernel.so\n[model.absent]\npath = absent.so\n"
             "[model.ok_model]\npath = ok_model.so\n[backend.ok_backend]\npath = %s\n", p);
    /* the absolute path must not depend on plugin_dir: point that elsewhere */
    env_cfg(&e, abs_body);
    si_err err;
    ck_assert_int_eq(si_config_set(e.cfg, "core.plugin_dir=/nonexistent", &err), SI_OK);
    env_load(&e, false);
    ck_assert_int_eq(e.rc, SI_OK);
    static const char *const order[] = { "kernel.ok_kernel", "model.absent", "model.ok_model",
                                         "backend.ok_backend" };
    static const int state[] = { SI_PLUGIN_REFUSED, SI_PLUGIN_REFUSED, SI_PLUGIN_REFUSED,
                                 SI_PLUGIN_LOADED };
    ck_assert_uint_eq(si_registry_count(e.reg), 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_str_eq(si_registry_at(e.reg, i)->section, order[i]);
        ck_assert_int_eq(si_registry_at(e.reg, i)->state, state[i]);
    }
    ck_assert_str_eq(si_registry_at(e.reg, 0)->reason,
                     "ok_kernel.so: no such file (looked in /nonexistent)");
    ck_assert_str_eq(si_registry_at(e.reg, 3)->path, p);
    env_free(&e);
}
END_TEST

START_TEST(test_required_failure_stops_and_closes)
{
    env e;
    const char *body = "[backend.ok_backend]\npath = ok_backend.so\n"
                       "[backend.missing]\npath = missing.so\nrequired = true\n"
                       "[model.ok_model]\npath = ok_model.so\n";
    env_cfg(&e, body);
    env_load(&e, false);
    ck_assert_int_eq(e.rc, SI_ENOTFOUND);
    ck_assert_ptr_null(e.reg);
    char want[PATH_MAX + 128];
    snprintf(want, sizeof want, "[backend.missing] is required: missing.so: no such file "
             "(looked in %s)", plugdir);
    ck_assert_str_eq(e.err.msg, want);
    /* what loaded before the failure was unloaded again; nothing after it ran */
    ck_assert(!still_loaded("ok_backend.so"));
    ck_assert(!still_loaded("ok_model.so"));
    env_free(&e);

    /* the reporting variant goes on and hands out every record */
    env_cfg(&e, body);
    env_load(&e, true);
    ck_assert_int_eq(e.rc, SI_ENOTFOUND);
    ck_assert_str_eq(e.err.msg, want);
    ck_assert_ptr_nonnull(e.reg);
    ck_assert_uint_eq(si_registry_count(e.reg), 3);
    ck_assert_int_eq(si_registry_at(e.reg, 0)->state, SI_PLUGIN_LOADED);
    ck_assert_int_eq(si_registry_at(e.reg, 1)->state, SI_PLUGIN_REFUSED);
    ck_assert_int_eq(si_registry_at(e.reg, 2)->state, SI_PLUGIN_LOADED);
    env_free(&e);
    ck_assert(!still_loaded("ok_model.so"));
}
END_TEST

START_TEST(test_registry_edges)
{
    si_registry *r = (si_registry *)1;
    si_err err;
    si_host h;
    si_host_init(&h, NULL);
    ck_assert_int_eq(si_registry_load(NULL, &h, &r, &err), SI_EINVAL);
    ck_assert_ptr_null(r);
    si_config *c = NULL;
    ck_assert_int_eq(si_config_new(&c, &err), SI_OK);
    ck_assert_int_eq(si_registry_load(c, NULL, &r, &err), SI_EINVAL);
    /* no plugin sections: an empty registry */
    ck_assert_int_eq(si_registry_load(c, &h, &r, &err), SI_OK);
    ck_assert_uint_eq(si_registry_count(r), 0);
    ck_assert_ptr_null(si_registry_at(r, 0));
    si_registry_free(r);
    si_config_free(c);
    si_registry_free(NULL);
    ck_assert_uint_eq(si_registry_count(NULL), 0);
    ck_assert_ptr_null(si_registry_at(NULL, 0));
    ck_assert_ptr_null(si_registry_find(NULL, SI_KIND_BACKEND, "x"));
    ck_assert_str_eq(si_kind_name(SI_KIND_KERNEL), "kernel");
    ck_assert_str_eq(si_kind_name(9), "?");
    ck_assert_str_eq(si_plugin_state_name(SI_PLUGIN_REFUSED), "refused");
    ck_assert_str_eq(si_plugin_state_name(7), "?");
}
END_TEST

static Suite *loader_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("good");
    tcase_add_test(tc, test_good_plugins_load);
    tcase_add_test(tc, test_backend_ops_usable);
    tcase_add_test(tc, test_model_accepts_via_host);
    tcase_add_test(tc, test_kernel_table);
    tcase_add_test(tc, test_kernel_attach);
    suite_add_tcase(s, tc);
    tc = tcase_create("bad");
    tcase_add_loop_test(tc, test_bad_plugin_refused, 0, (int)N_BAD);
    tcase_add_loop_test(tc, test_bad_plugin_required_fails, 0, (int)N_BAD);
    tcase_add_test(tc, test_no_path_configured);
    suite_add_tcase(s, tc);
    tc = tcase_create("registry");
    tcase_add_test(tc, test_duplicate_name_across_kinds);
    tcase_add_test(tc, test_disabled_not_opened);
    tcase_add_test(tc, test_config_order_and_absolute_path);
    tcase_add_test(tc, test_required_failure_stops_and_closes);
    tcase_add_test(tc, test_registry_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    snprintf(plugdir, sizeof plugdir, "%s/tests/loader/plugins/.libs", top ? top : ".");
    struct stat st;
    if (stat(plugdir, &st) != 0) {
        fprintf(stderr, "check_loader: no test plugins in %s (run through make check)\n", plugdir);
        return 99;              /* automake: hard error */
    }
    snprintf(tmpdir, sizeof tmpdir, "%s", "/tmp/si_check_loader.XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("check_loader: mkdtemp");
        return 99;
    }
    snprintf(notlib, sizeof notlib, "%s/not_a_library.so", tmpdir);
    FILE *f = fopen(notlib, "w");
    if (f == NULL || fputs("this is a text file, not an ELF object\n", f) < 0 || fclose(f) != 0) {
        perror("check_loader: not_a_library.so");
        return 99;
    }

    SRunner *sr = srunner_create(loader_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);

    char p[PATH_MAX + 32];
    unlink(notlib);
    snprintf(p, sizeof p, "%s/testarch.gguf", tmpdir);
    unlink(p);
    snprintf(p, sizeof p, "%s/llama.gguf", tmpdir);
    unlink(p);
    rmdir(tmpdir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
