/* core/config.h — the INI configuration (conf/sparkinfer.ini), read with inih.
 *
 * Sections: [core] [runtime] [backend.NAME] [model.NAME] [kernel.NAME].
 * Plugin sections take `path enabled required priority` plus the plugin's
 * own knobs (any other key; the plugin validates those itself).  The core
 * validates the keys of [core] and [runtime] and the four plugin keys.
 * Unknown sections or keys, bad values, duplicate sections or keys and
 * lines longer than SI_CONFIG_MAX_LINE are errors that name file:line.
 * Sections keep file order (the plugin load order).
 */
#ifndef SI_CORE_CONFIG_H
#define SI_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <sparkinfer/status.h>

#define SI_CONFIG_MAX_LINE 4096

typedef struct si_config si_config;

/* Parses a file.  err gets every bad line, "file:line: reason", joined by
 * "; " as far as the buffer holds (inih keeps going after an error). */
int  si_config_load(const char *path, si_config **out, si_err *err);
/* Parses text; `name` stands for the file name in messages. */
int  si_config_load_string(const char *text, const char *name, si_config **out, si_err *err);
/* An empty configuration (no plugins). */
int  si_config_new(si_config **out, si_err *err);
void si_config_free(si_config *c);

/* Applies "section.key=value" (the section may itself contain dots; the key
 * is the part after the last dot before '=').  Creates the section when it
 * is a valid section name.  Validated like a file line. */
int  si_config_set(si_config *c, const char *assignment, si_err *err);

/* Value or NULL.  Borrowed: valid until si_config_free. */
const char *si_config_get(const si_config *c, const char *section, const char *key);
bool        si_config_get_bool(const si_config *c, const char *section, const char *key, bool dflt);
long        si_config_get_long(const si_config *c, const char *section, const char *key, long dflt);

size_t      si_config_n_sections(const si_config *c);
const char *si_config_section_name(const si_config *c, size_t i);   /* "backend.cpu" */
/* File name the configuration came from ("<string>" or the path). */
const char *si_config_source(const si_config *c);
/* Directory relative plugin paths are resolved against: [core] plugin_dir,
 * or the compiled-in SI_PLUGINDIR. */
const char *si_config_plugin_dir(const si_config *c);

#endif /* SI_CORE_CONFIG_H */
