/* core/config_keys.h — the key table of core/config_keys.def and the value
 * rules built on it.  Internal to core/config.c and core/config_keys.c. */
#ifndef SI_CORE_CONFIG_KEYS_H
#define SI_CORE_CONFIG_KEYS_H

#include <stdbool.h>
#include <stddef.h>

/* Where a key lives.  The order is the order of the generated docs. */
enum si_cfg_scope { SI_CFG_CORE, SI_CFG_RUNTIME, SI_CFG_PLUGIN };
/* What a value must look like. */
enum si_cfg_type { SI_CFG_BOOL, SI_CFG_INT, SI_CFG_FLOAT, SI_CFG_ENUM, SI_CFG_PATH, SI_CFG_NAME };

typedef struct si_cfg_key {
    int         scope;          /* enum si_cfg_scope */
    const char *key;
    int         type;           /* enum si_cfg_type  */
    const char *dflt;           /* NULL = unset      */
    double      lo, hi;         /* INT / FLOAT range */
    const char *choices;        /* ENUM: "a|b|c"     */
    const char *doc;
} si_cfg_key;

extern const si_cfg_key si_cfg_keys[];
extern const size_t     si_cfg_n_keys;

/* The definition of key in scope, or NULL. */
const si_cfg_key *si_cfg_key_find(int scope, const char *key);
/* A key of scope close enough to `key` to be its typo, or NULL. */
const char *si_cfg_key_near(int scope, const char *key);
/* Whether v is a valid value of d. */
bool si_cfg_value_ok(const si_cfg_key *d, const char *v);
/* "an integer in 0..1024", "one of f16|int8|f32" ... */
void si_cfg_describe(const si_cfg_key *d, char *buf, size_t n);

/* NAME = [a-z0-9_]+, at most SI_CONFIG_MAX_NAME characters. */
bool si_cfg_name_ok(const char *s, size_t n);
/* Whole-string parsers; false for anything else (no partial numbers). */
bool si_cfg_parse_bool(const char *v, bool *out);
bool si_cfg_parse_long(const char *v, long *out);
bool si_cfg_parse_double(const char *v, double *out);

/* Scope of a section name ([core] [runtime] [kind.NAME]), or -1 with the
 * reason in why. */
int si_cfg_classify_section(const char *name, char *why, size_t n);

#endif /* SI_CORE_CONFIG_KEYS_H */
