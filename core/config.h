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
#include <stdio.h>

#include <sparkinfer/status.h>

#define SI_CONFIG_MAX_LINE 4096   /* bytes, without the line break          */
#define SI_CONFIG_MAX_NAME 48     /* plugin NAME in [kind.NAME], and keys    */
#define SI_CONFIG_ENV "SPARKINFER_CONFIG"

typedef struct si_config si_config;

/* Parses a file.  err gets every bad line, "file:line: reason", joined by
 * "; " as far as the buffer holds (inih keeps going after an error).
 * Returns SI_EFORMAT for bad content, SI_ENOTFOUND / SI_EIO when the file
 * cannot be read.  Sets inih's process-wide parser globals: load
 * configurations at start-up, from one thread. */
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

/* Value or NULL.  Borrowed: valid until si_config_free (or until the same
 * key is set again).  Keys of core/config_keys.def fall back to their
 * documented default when unset ([core] and [runtime] always; plugin keys
 * when the section exists). */
const char *si_config_get(const si_config *c, const char *section, const char *key);
/* Parsed forms; dflt when unset or (for knobs the core does not validate)
 * unparsable. */
bool        si_config_get_bool(const si_config *c, const char *section, const char *key, bool dflt);
long        si_config_get_long(const si_config *c, const char *section, const char *key, long dflt);
double      si_config_get_double(const si_config *c, const char *section, const char *key, double dflt);

size_t      si_config_n_sections(const si_config *c);
const char *si_config_section_name(const si_config *c, size_t i);   /* "backend.cpu" */
/* File name the configuration came from ("<string>" or the path). */
const char *si_config_source(const si_config *c);
/* Directory relative plugin paths are resolved against: [core] plugin_dir,
 * or the compiled-in SI_PLUGINDIR. */
const char *si_config_plugin_dir(const si_config *c);

/* The file a program should read: cli_path when not NULL, else
 * $SPARKINFER_CONFIG when set and non-empty, else the installed
 * SI_SYSCONFDIR/sparkinfer.ini.  Borrowed (argument, environment or static). */
const char *si_config_default_path(const char *cli_path);

/* Writes the documented [core] and [runtime] sections with every default,
 * and the plugin keys as comments, all generated from core/config_keys.def.
 * conf/sparkinfer.ini carries this text verbatim between its "generated"
 * markers. */
void si_config_write_defaults(FILE *f);

#endif /* SI_CORE_CONFIG_H */
