/* core/config_keys.c — the key table (core/config_keys.def), the value and
 * name rules derived from it, and the documentation generated from it
 * (si_config_write_defaults, the generated block of conf/sparkinfer.ini). */
#include "config_keys.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

const si_cfg_key si_cfg_keys[] = {
#define SI_CFG_KEY(scope_, key_, type_, dflt_, lo_, hi_, choices_, doc_) \
    { SI_CFG_##scope_, #key_, SI_CFG_##type_, dflt_, lo_, hi_, choices_, doc_ },
#include "config_keys.def"
#undef SI_CFG_KEY
};
const size_t si_cfg_n_keys = sizeof si_cfg_keys / sizeof si_cfg_keys[0];

/* NAME = [a-z0-9_]+, at most SI_CONFIG_MAX_NAME characters. */
bool si_cfg_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > SI_CONFIG_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

bool si_cfg_parse_bool(const char *v, bool *out)
{
    static const char *const t[] = { "true", "yes", "on", "1" };
    static const char *const f[] = { "false", "no", "off", "0" };
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, t[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(v, f[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

bool si_cfg_parse_long(const char *v, long *out)
{
    if (*v == '\0' || isspace((unsigned char)*v))
        return false;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = x;
    return true;
}

bool si_cfg_parse_double(const char *v, double *out)
{
    if (*v == '\0' || isspace((unsigned char)*v))
        return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno != 0 || *end != '\0' || !isfinite(x))
        return false;
    *out = x;
    return true;
}

static bool enum_has(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p != '\0';) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return true;
        p += len + (bar ? 1 : 0);
    }
    return false;
}

/* Optimal-string-alignment distance, for "did you mean" (keys <= 48). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > SI_CONFIG_MAX_NAME || nb > SI_CONFIG_MAX_NAME)
        return SIZE_MAX;
    size_t d[SI_CONFIG_MAX_NAME + 1][SI_CONFIG_MAX_NAME + 1];
    for (size_t i = 0; i <= na; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= na; i++) {
        for (size_t j = 1; j <= nb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[na][nb];
}

/* The key of `scope` nearest to `key`, when it is close enough to be a
 * typo (1 edit for short keys, 2 for keys of 6+ characters). */
const char *si_cfg_key_near(int scope, const char *key)
{
    for (size_t i = 0; i < si_cfg_n_keys; i++) {
        if (si_cfg_keys[i].scope != scope)
            continue;
        size_t allow = strlen(si_cfg_keys[i].key) >= 6 ? 2 : 1;
        if (edit_distance(key, si_cfg_keys[i].key) <= allow)
            return si_cfg_keys[i].key;
    }
    return NULL;
}

const si_cfg_key *si_cfg_key_find(int scope, const char *key)
{
    for (size_t i = 0; i < si_cfg_n_keys; i++)
        if (si_cfg_keys[i].scope == scope && strcmp(si_cfg_keys[i].key, key) == 0)
            return &si_cfg_keys[i];
    return NULL;
}

/* Text of a definition's constraint: "an integer in 0..1024" ... */
void si_cfg_describe(const si_cfg_key *d, char *buf, size_t n)
{
    switch (d->type) {
    case SI_CFG_BOOL:  snprintf(buf, n, "true/false/yes/no/on/off/1/0"); break;
    case SI_CFG_INT:   snprintf(buf, n, "an integer in %.0f..%.0f", d->lo, d->hi); break;
    case SI_CFG_FLOAT: snprintf(buf, n, "a number in %g..%g", d->lo, d->hi); break;
    case SI_CFG_ENUM:  snprintf(buf, n, "one of %s", d->choices); break;
    case SI_CFG_PATH:  snprintf(buf, n, "a path"); break;
    default:      snprintf(buf, n, "auto or a plugin NAME ([a-z0-9_]+)"); break;
    }
}

bool si_cfg_value_ok(const si_cfg_key *d, const char *v)
{
    bool b;
    long l;
    double x;
    switch (d->type) {
    case SI_CFG_BOOL:  return si_cfg_parse_bool(v, &b);
    case SI_CFG_INT:   return si_cfg_parse_long(v, &l) && (double)l >= d->lo && (double)l <= d->hi;
    case SI_CFG_FLOAT: return si_cfg_parse_double(v, &x) && x >= d->lo && x <= d->hi;
    case SI_CFG_ENUM:  return enum_has(d->choices, v);
    case SI_CFG_PATH:  return *v != '\0' && strlen(v) < PATH_MAX;
    default:      return strcmp(v, "auto") == 0 || si_cfg_name_ok(v, strlen(v));
    }
}

/* ---- sections and keys --------------------------------------------------- */

/* Scope of a section name, or -1 with the reason in why. */
int si_cfg_classify_section(const char *name, char *why, size_t n)
{
    static const char *const kinds[] = { "backend", "model", "kernel" };
    if (strcmp(name, "core") == 0)
        return SI_CFG_CORE;
    if (strcmp(name, "runtime") == 0)
        return SI_CFG_RUNTIME;
    for (size_t k = 0; k < 3; k++) {
        size_t kl = strlen(kinds[k]);
        if (strncmp(name, kinds[k], kl) != 0)
            continue;
        if (name[kl] == '\0' || (name[kl] == '.' && name[kl + 1] == '\0')) {
            snprintf(why, n, "section [%s] needs a name: [%s.NAME]", name, kinds[k]);
            return -1;
        }
        if (name[kl] != '.')
            break;
        const char *pn = name + kl + 1;
        if (strlen(pn) > SI_CONFIG_MAX_NAME) {
            snprintf(why, n, "plugin name '%.60s...' in [%s.NAME] is longer than %d characters",
                     pn, kinds[k], SI_CONFIG_MAX_NAME);
            return -1;
        }
        if (!si_cfg_name_ok(pn, strlen(pn))) {
            snprintf(why, n, "bad plugin name '%s' in [%s] (use [a-z0-9_]+)", pn, name);
            return -1;
        }
        return SI_CFG_PLUGIN;
    }
    snprintf(why, n, "unknown section [%.80s] (expected [core], [runtime], [backend.NAME], "
             "[model.NAME] or [kernel.NAME])", name);
    return -1;
}

/* ---- documentation generated from the table ------------------------------ */

/* Writes text as comment lines of at most ~78 columns: the first starts
 * with `first`, the others with `cont`. */
static void write_wrapped(FILE *f, const char *first, const char *cont, const char *text)
{
    for (const char *prefix = first; *text != '\0'; prefix = cont) {
        size_t width = 78 - strlen(prefix), n = strlen(text);
        if (n > width) {
            n = width;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0)
                n = width;
        }
        fprintf(f, "%s%.*s\n", prefix, (int)n, text);
        text += n;
        while (*text == ' ')
            text++;
    }
}

void si_config_write_defaults(FILE *f)
{
    static const char *const heads[] = { "[core]", "[runtime]" };
    char what[128], line[1024];   /* (a key's doc with its values) */
    fprintf(f, "; >>> generated from core/config_keys.def by si_config_write_defaults();\n"
               "; >>> edit the table, not this block (tests/config checks they agree)\n");
    for (int scope = SI_CFG_CORE; scope <= SI_CFG_RUNTIME; scope++) {
        fprintf(f, "%s\n", heads[scope]);
        for (size_t i = 0; i < si_cfg_n_keys; i++) {
            const si_cfg_key *d = &si_cfg_keys[i];
            if (d->scope != scope)
                continue;
            si_cfg_describe(d, what, sizeof what);
            snprintf(line, sizeof line, "%s: %s. Value: %s.", d->key, d->doc, what);
            write_wrapped(f, "; ", "; ", line);
            if (d->dflt != NULL)
                fprintf(f, "%s = %s\n\n", d->key, d->dflt);
            else
                fprintf(f, ";%s =\n\n", d->key);
        }
    }
    write_wrapped(f, "; ", "; ", "Plugin sections [backend.NAME] [model.NAME] [kernel.NAME] are loaded "
                  "in file order. NAME is [a-z0-9_]+ (at most 48 characters), equals the "
                  "plugin's own name and is unique across all kinds. They take:");
    for (size_t i = 0; i < si_cfg_n_keys; i++) {
        const si_cfg_key *d = &si_cfg_keys[i];
        if (d->scope != SI_CFG_PLUGIN)
            continue;
        si_cfg_describe(d, what, sizeof what);
        if (d->dflt != NULL)
            snprintf(line, sizeof line, "%s: %s. Value: %s; default %s.", d->key, d->doc,
                     what, d->dflt);
        else
            snprintf(line, sizeof line, "%s: %s. Value: %s; no default.", d->key, d->doc, what);
        write_wrapped(f, ";   ", ";     ", line);
    }
    write_wrapped(f, "; ", "; ", "Every other key is the plugin's own knob, validated by the plugin; "
                  "a key one or two edits away from the keys above (prioirty) is refused as "
                  "a typo.");
    fprintf(f, "; <<< end of generated block\n");
}
