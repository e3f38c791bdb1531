/* core/loader.h — loads the plugins the configuration names, at start-up.
 *
 * For each [backend.*] [model.*] [kernel.*] section in file order: skip it
 * when enabled = false; otherwise dlopen(RTLD_NOW|RTLD_LOCAL) the path
 * (relative to the plugin dir), find si_plugin_entry, call it, check ABI
 * major, descriptor size, kind against the section, name against the
 * section and against names already loaded, then probe().  Every failure
 * closes the handle and is recorded with the file and the reason; the
 * plugin is skipped unless `required = true`, which makes si_registry_load
 * fail with that message.
 */
#ifndef SI_CORE_LOADER_H
#define SI_CORE_LOADER_H

#include <sparkinfer/plugin.h>

#include "config.h"

enum si_plugin_state {
    SI_PLUGIN_LOADED   = 0,
    SI_PLUGIN_DISABLED = 1,   /* enabled = false in the config */
    SI_PLUGIN_REFUSED  = 2,   /* failed to load, see reason    */
};

typedef struct si_plugin_record {
    const char      *section;    /* "backend.cpu"                          */
    const char      *name;       /* "cpu" (from the section)               */
    uint32_t         kind;       /* enum si_kind expected from the section */
    const char      *path;       /* resolved path ("" when none configured) */
    int              state;      /* enum si_plugin_state                   */
    int              status;     /* SI_OK or the SI_E* of the refusal      */
    const char      *reason;     /* "" when loaded                         */
    bool             required;
    long             priority;
    const si_plugin *desc;       /* NULL unless loaded                     */
} si_plugin_record;

typedef struct si_registry si_registry;

/* Loads every plugin section of cfg.  `host` is lent to the plugins and
 * must outlive the registry.  Fails (nothing loaded, *out NULL) when a
 * `required` plugin cannot be loaded: the status is that plugin's and the
 * message "[section] is required: <reason>". */
int  si_registry_load(const si_config *cfg, const si_host *host,
                      si_registry **out, si_err *err);
/* Like si_registry_load, but attempts and records every section even after
 * a required plugin failed; *out is set unless memory ran out.  Returns the
 * status (and message) of the first required failure, or SI_OK.  For
 * reporting (`sparkinfer plugins`), which shows every record either way. */
int  si_registry_load_all(const si_config *cfg, const si_host *host,
                          si_registry **out, si_err *err);
/* Destroys the registry and dlclose()s in reverse load order.  Every object
 * made by its plugins must have been destroyed first. */
void si_registry_free(si_registry *r);

size_t                  si_registry_count(const si_registry *r);
const si_plugin_record *si_registry_at(const si_registry *r, size_t i);
/* The loaded plugin of that kind and name, or NULL (also for records that
 * are disabled or refused). */
const si_plugin_record *si_registry_find(const si_registry *r, uint32_t kind, const char *name);

/* Offers every loaded kernel plugin whose ops->backend names `backend` to
 * that open backend (ops->attach_kernel with the plugin's section), in
 * config order; *n_attached (may be NULL) counts the ones it took.  A
 * kernel the backend refuses, or a backend without attach_kernel, is
 * logged and skipped — unless its section says required = true: then that
 * failure is returned ("[kernel.X] is required: <reason>").  The backend
 * must be closed before the registry is freed (the kernels' code). */
int  si_registry_attach_kernels(const si_registry *r, const si_host *h, const char *backend,
                                const struct si_backend_ops *ops, si_backend *b, size_t *n_attached,
                                si_err *err);

/* "backend", "model", "kernel" or "?" */
const char *si_kind_name(uint32_t kind);
/* "loaded", "disabled", "refused" or "?" */
const char *si_plugin_state_name(int state);

#endif /* SI_CORE_LOADER_H */
