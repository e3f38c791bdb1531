/* core/loader.c — start-up plugin loading: dlopen, entry, descriptor
 * checks, probe; one record per configured plugin section.
 *
 * Order for each enabled section (config file order):
 *   resolve path -> stat -> dlopen(RTLD_NOW|RTLD_LOCAL) -> dlsym(entry) ->
 *   entry(host) -> ABI major -> descriptor size -> kind -> strings ->
 *   name vs section -> name vs loaded -> op table -> probe().
 * Everything in the descriptor and the op table is checked before any
 * plugin function other than the entry is called, so a malformed plugin
 * is refused instead of crashing us (a plugin that crashes inside its own
 * code cannot be survived in-process; that is out of our hands).  Every
 * failure closes the handle at once.
 */
#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct si_registry {
    si_plugin_record *rec;
    void            **handle;   /* parallel to rec; NULL unless loaded */
    size_t            n, cap;
};

const char *si_kind_name(uint32_t kind)
{
    switch (kind) {
    case SI_KIND_BACKEND: return "backend";
    case SI_KIND_MODEL:   return "model";
    case SI_KIND_KERNEL:  return "kernel";
    default:              return "?";
    }
}

const char *si_plugin_state_name(int state)
{
    switch (state) {
    case SI_PLUGIN_LOADED:   return "loaded";
    case SI_PLUGIN_DISABLED: return "disabled";
    case SI_PLUGIN_REFUSED:  return "refused";
    default:                 return "?";
    }
}

/* Kind of a section name ("backend.cpu"), 0 for [core] / [runtime]. */
static uint32_t section_kind(const char *section, const char **name)
{
    static const struct { const char *prefix; uint32_t kind; } k[] = {
        { "backend.", SI_KIND_BACKEND }, { "model.", SI_KIND_MODEL }, { "kernel.", SI_KIND_KERNEL },
    };
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(k[i].prefix);
        if (strncmp(section, k[i].prefix, n) == 0) {
            *name = section + n;
            return k[i].kind;
        }
    }
    return 0;
}

static char *dup_s(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

/* ---- descriptor and op-table checks (nothing of the plugin is called) --- */

static bool name_ok(const char *s)
{
    size_t n = strnlen(s, SI_CONFIG_MAX_NAME + 1);
    if (n == 0 || n > SI_CONFIG_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

#define OPS_MIN(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define NEED(ops, member)                                                            \
    do {                                                                             \
        if ((ops)->member == NULL) {                                                 \
            snprintf(why, n, "op table has no '%s' (a required member)", #member);  \
            return SI_EINVAL;                                                        \
        }                                                                            \
    } while (0)

/* The op table of a descriptor whose kind is already checked. */
static int check_ops(const si_plugin *d, char *why, size_t n)
{
    if (d->ops == NULL) {
        snprintf(why, n, "descriptor has no op table (ops is NULL)");
        return SI_EINVAL;
    }
    uint32_t size = *(const uint32_t *)d->ops;   /* every table starts with its size */
    size_t need = d->kind == SI_KIND_BACKEND ? OPS_MIN(struct si_backend_ops, exec)
                : d->kind == SI_KIND_MODEL   ? OPS_MIN(struct si_model_ops, forward)
                                             : OPS_MIN(struct si_kernel_ops, exec);
    if (size < need) {
        snprintf(why, n, "op table too small (%u bytes, need at least %zu for the required "
                 "members of ABI %d.0)", size, need, SI_ABI_MAJOR);
        return SI_EABI;
    }
    if (d->kind == SI_KIND_BACKEND) {
        const struct si_backend_ops *o = d->ops;
        NEED(o, open);
        NEED(o, close);
        NEED(o, buf_alloc);
        NEED(o, buf_free);
        NEED(o, upload);
        NEED(o, download);
        NEED(o, kv_create);
        NEED(o, kv_free);
        NEED(o, kv_seq_reset);
        NEED(o, supports);
        NEED(o, exec);
    } else if (d->kind == SI_KIND_MODEL) {
        const struct si_model_ops *o = d->ops;
        NEED(o, accepts);
        NEED(o, load);
        NEED(o, unload);
        NEED(o, info);
        NEED(o, seq_reset);
        NEED(o, forward);
    } else {
        const struct si_kernel_ops *o = d->ops;
        if (o->backend == NULL || !name_ok(o->backend)) {
            snprintf(why, n, "kernel op table names no valid backend");
            return SI_EINVAL;
        }
        if (o->op == SI_OP_NONE || o->op >= SI_OP_KIND_COUNT) {
            snprintf(why, n, "kernel replaces op %u, unknown to this core (ABI %d.%d)", o->op,
                     SI_ABI_MAJOR, SI_ABI_MINOR);
            return SI_EUNSUPPORTED;
        }
        NEED(o, init);
        NEED(o, fini);
        NEED(o, supports);
        NEED(o, exec);
    }
    return SI_OK;
}

/* Checks a descriptor against its section and the plugins already loaded. */
static int check_desc(const si_registry *r, const si_plugin *d, const char *section,
                      uint32_t kind, const char *name, char *why, size_t n)
{
    /* only the first 8 bytes are known to exist until size is checked */
    if (d->abi_major != SI_ABI_MAJOR) {
        snprintf(why, n, "ABI %u.%u vs core %d.%d (rebuild the plugin against this core)",
                 d->abi_major, d->abi_minor, SI_ABI_MAJOR, SI_ABI_MINOR);
        return SI_EABI;
    }
    size_t need = offsetof(si_plugin, ops) + sizeof d->ops;
    if (d->size < need) {
        snprintf(why, n, "descriptor too small (%u bytes, need at least %zu)", d->size, need);
        return SI_EABI;
    }
    if (d->kind != kind) {
        snprintf(why, n, "is a %s plugin (kind %u), configured as [%s]",
                 si_kind_name(d->kind), d->kind, section);
        return SI_EINVAL;
    }
    if (d->name == NULL || d->version == NULL || d->description == NULL) {
        snprintf(why, n, "descriptor field '%s' is NULL",
                 d->name == NULL ? "name" : d->version == NULL ? "version" : "description");
        return SI_EINVAL;
    }
    if (strncmp(d->name, name, SI_CONFIG_MAX_NAME + 1) != 0) {
        snprintf(why, n, "plugin calls itself '%.*s', configured as [%s] (the section NAME "
                 "must be the plugin's name)", SI_CONFIG_MAX_NAME, d->name, section);
        return SI_EINVAL;
    }
    for (size_t i = 0; i < r->n; i++) {
        const si_plugin_record *o = &r->rec[i];
        if (o->state == SI_PLUGIN_LOADED && strcmp(o->desc->name, d->name) == 0) {
            snprintf(why, n, "plugin name '%s' is already loaded by [%s] (names are unique "
                     "across kinds)", d->name, o->section);
            return SI_EINVAL;
        }
    }
    return check_ops(d, why, n);
}

/* ---- one section --------------------------------------------------------- */

/* Records a refusal: "<file as configured>: <why>".  A very long file
 * name is shown as its start and end, so the reason stays readable and
 * fits an si_err. */
static int refuse(si_plugin_record *rec, int status, const char *file, const char *why)
{
    size_t fl = strlen(file), n = fl + strlen(why) + 3;
    char *reason = malloc(n);
    if (reason == NULL)
        return SI_ENOMEM;
    if (fl > 160)
        snprintf(reason, n, "%.80s...%s: %s", file, file + fl - 60, why);
    else
        snprintf(reason, n, "%s: %s", file, why);
    rec->state = SI_PLUGIN_REFUSED;
    rec->status = status;
    rec->reason = reason;
    return SI_OK;
}

/* Fills rec (whose section, name, kind, required and priority are set) and
 * returns SI_OK, or SI_ENOMEM when even the record could not be made. */
static int load_one(si_registry *r, const si_config *cfg, const si_host *host,
                    si_plugin_record *rec, void **handle)
{
    char why[SI_ERR_MSG_MAX];
    const char *cpath = si_config_get(cfg, rec->section, "path");
    bool enabled = si_config_get_bool(cfg, rec->section, "enabled", true);
    const char *dir = si_config_plugin_dir(cfg);

    /* path: relative to the plugin directory unless absolute */
    char full[PATH_MAX];
    int len = 0;
    if (cpath != NULL && cpath[0] != '\0')
        len = cpath[0] == '/' ? snprintf(full, sizeof full, "%s", cpath)
                              : snprintf(full, sizeof full, "%s/%s", dir, cpath);
    else
        full[0] = '\0';
    bool too_long = len < 0 || (size_t)len >= sizeof full;
    if ((rec->path = dup_s(too_long ? cpath : full)) == NULL)
        return SI_ENOMEM;

    if (!enabled) {
        rec->state = SI_PLUGIN_DISABLED;
        rec->status = SI_OK;
        return (rec->reason = dup_s("enabled = false")) ? SI_OK : SI_ENOMEM;
    }
    if (cpath == NULL || cpath[0] == '\0')
        return refuse(rec, SI_EINVAL, rec->section, "no 'path' configured");
    if (too_long) {
        snprintf(why, sizeof why, "path too long (%zu bytes with the plugin dir, limit %d)",
                 strlen(dir) + 1 + strlen(cpath), PATH_MAX - 1);
        return refuse(rec, SI_ERANGE, cpath, why);
    }

    struct stat st;
    if (stat(full, &st) != 0) {
        if (errno == ENOENT && cpath[0] != '/')
            snprintf(why, sizeof why, "no such file (looked in %.400s)", dir);
        else if (errno == ENOENT)
            snprintf(why, sizeof why, "no such file");
        else
            snprintf(why, sizeof why, "cannot access %.300s: %s", full, strerror(errno));
        return refuse(rec, errno == ENOENT ? SI_ENOTFOUND : SI_EIO, cpath, why);
    }
    if (!S_ISREG(st.st_mode))
        return refuse(rec, SI_EIO, cpath, "not a regular file");

    dlerror();
    void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        bool deps = e != NULL && (strstr(e, "undefined symbol") != NULL ||
                                  strstr(e, "cannot open shared object") != NULL);
        snprintf(why, sizeof why, "dlopen failed: %.400s%s", e ? e : "unknown error",
                 deps ? " (check its dependencies with ldd)" : "");
        return refuse(rec, SI_EIO, cpath, why);
    }
    dlerror();
    void *sym = dlsym(h, SI_ENTRY_SYMBOL);
    if (sym == NULL) {
        dlclose(h);
        return refuse(rec, SI_ENOTFOUND, cpath, "no entry point " SI_ENTRY_SYMBOL
                      " (not a sparkinfer plugin?)");
    }
    si_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);     /* object -> function pointer, POSIX-style */
    const si_plugin *d = entry(host);
    if (d == NULL) {
        dlclose(h);
        snprintf(why, sizeof why, SI_ENTRY_SYMBOL " returned NULL: the plugin refused this "
                 "host (core ABI %d.%d)", SI_ABI_MAJOR, SI_ABI_MINOR);
        return refuse(rec, SI_EREFUSED, cpath, why);
    }
    int rc = check_desc(r, d, rec->section, rec->kind, rec->name, why, sizeof why);
    if (rc == SI_OK && d->probe != NULL) {
        si_err perr;
        perr.msg[0] = '\0';
        int pr = d->probe(host, &perr);
        if (pr != SI_OK) {
            perr.msg[sizeof perr.msg - 1] = '\0';
            rc = pr < 0 ? pr : SI_EREFUSED;
            snprintf(why, sizeof why, "probe refused: %.400s",
                     perr.msg[0] ? perr.msg : si_strerror(pr));
        }
    }
    if (rc != SI_OK) {
        dlclose(h);
        return refuse(rec, rc, cpath, why);
    }
    rec->state = SI_PLUGIN_LOADED;
    rec->status = SI_OK;
    rec->desc = d;
    *handle = h;
    return (rec->reason = dup_s("")) ? SI_OK : SI_ENOMEM;
}

static void free_record(si_plugin_record *rec)
{
    free((char *)rec->section);
    free((char *)rec->path);
    free((char *)rec->reason);
}

void si_registry_free(si_registry *r)
{
    if (r == NULL)
        return;
    for (size_t i = r->n; i-- > 0;) {
        if (r->handle[i] != NULL)
            dlclose(r->handle[i]);
        free_record(&r->rec[i]);
    }
    free(r->rec);
    free(r->handle);
    free(r);
}

static int load(const si_config *cfg, const si_host *host, bool stop_on_required,
                si_registry **out, si_err *err)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || cfg == NULL || host == NULL)
        return si_err_set(err, SI_EINVAL, "si_registry_load: NULL argument");
    size_t ns = si_config_n_sections(cfg);
    si_registry *r = calloc(1, sizeof *r);
    if (r == NULL || (r->rec = calloc(ns ? ns : 1, sizeof *r->rec)) == NULL ||
        (r->handle = calloc(ns ? ns : 1, sizeof *r->handle)) == NULL) {
        si_registry_free(r);
        return si_err_set(err, SI_ENOMEM, "out of memory loading plugins");
    }
    int first = SI_OK;
    for (size_t i = 0; i < ns; i++) {
        const char *section = si_config_section_name(cfg, i), *name = NULL;
        uint32_t kind = section_kind(section, &name);
        if (kind == 0)
            continue;
        si_plugin_record *rec = &r->rec[r->n];
        memset(rec, 0, sizeof *rec);
        if ((rec->section = dup_s(section)) == NULL) {
            si_registry_free(r);
            return si_err_set(err, SI_ENOMEM, "out of memory loading plugins");
        }
        rec->name = rec->section + (name - section);
        rec->kind = kind;
        rec->required = si_config_get_bool(cfg, section, "required", false);
        rec->priority = si_config_get_long(cfg, section, "priority", 0);
        int rc = load_one(r, cfg, host, rec, &r->handle[r->n]);
        r->n++;                 /* the record owns what load_one allocated */
        if (rc != SI_OK) {
            si_registry_free(r);
            return si_err_set(err, SI_ENOMEM, "out of memory loading plugins");
        }
        if (host->log != NULL) {
            if (rec->state == SI_PLUGIN_LOADED)
                host->log(host, SI_LOG_DEBUG, "loader", "[%s] loaded %s %s from %s", section,
                          rec->desc->name, rec->desc->version, rec->path);
            else if (rec->state == SI_PLUGIN_REFUSED)
                host->log(host, SI_LOG_INFO, "loader",
                          "[%s] refused: %s", section, rec->reason);
        }
        if (rec->state == SI_PLUGIN_REFUSED && rec->required && first == SI_OK) {
            first = rec->status;
            si_err_set(err, first, "[%s] is required: %s", section, rec->reason);
            if (stop_on_required) {
                si_registry_free(r);
                return first;
            }
        }
    }
    *out = r;
    return first;
}

int si_registry_load(const si_config *cfg, const si_host *host, si_registry **out, si_err *err)
{
    return load(cfg, host, true, out, err);
}

int si_registry_load_all(const si_config *cfg, const si_host *host, si_registry **out,
                         si_err *err)
{
    return load(cfg, host, false, out, err);
}

size_t si_registry_count(const si_registry *r)
{
    return r ? r->n : 0;
}

const si_plugin_record *si_registry_at(const si_registry *r, size_t i)
{
    return r != NULL && i < r->n ? &r->rec[i] : NULL;
}

const si_plugin_record *si_registry_find(const si_registry *r, uint32_t kind, const char *name)
{
    if (r == NULL || name == NULL)
        return NULL;
    for (size_t i = 0; i < r->n; i++) {
        const si_plugin_record *rec = &r->rec[i];
        if (rec->state == SI_PLUGIN_LOADED && rec->kind == kind && strcmp(rec->name, name) == 0)
            return rec;
    }
    return NULL;
}
