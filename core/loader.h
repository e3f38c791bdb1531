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
    const char      *path;       /* resolved path                          */
    int              state;      /* enum si_plugin_state                   */
    int              status;     /* SI_OK or the SI_E* of the refusal      */
    const char      *reason;     /* "" when loaded                         */
    bool             required;
    long             priority;
    const si_plugin *desc;       /* NULL unless loaded                     */
} si_plugin_record;

typedef struct si_registry si_registry;

int  si_registry_load(const si_config *cfg, const si_host *host,
                      si_registry **out, si_err *err);
/* Destroys the registry and dlclose()s in reverse load order.  Every object
 * made by its plugins must have been destroyed first. */
void si_registry_free(si_registry *r);

size_t                  si_registry_count(const si_registry *r);
const si_plugin_record *si_registry_at(const si_registry *r, size_t i);
/* The loaded plugin of that kind and name, or NULL. */
const si_plugin_record *si_registry_find(const si_registry *r, uint32_t kind, const char *name);

#endif /* SI_CORE_LOADER_H */
