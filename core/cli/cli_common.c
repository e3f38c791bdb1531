/* core/cli/cli_common.c — helpers shared by the subcommands: the
 * --config / --set options, loading the configuration they name, error
 * lines and integer parsing. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Value of option `name` at argv[*i]: "--name VALUE" or "--name=VALUE".
 * Returns 0 when argv[*i] is not the option, 1 with *val set (and *i on
 * the last argument used), -1 when the value is missing. */
static int opt_value(const char *name, int argc, char **argv, int *i, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "sparkinfer: %s needs a value\n", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int si_cli_config_opt(si_cli_config_opts *o, int argc, char **argv, int *i)
{
    const char *val = NULL;
    int r = opt_value("--config", argc, argv, i, &val);
    if (r != 0) {
        if (r > 0)
            o->config_path = val;
        return r;
    }
    r = opt_value("--set", argc, argv, i, &val);
    if (r <= 0)
        return r;
    if (o->n_sets >= (int)(sizeof o->sets / sizeof o->sets[0])) {
        fprintf(stderr, "sparkinfer: too many --set options (at most %zu)\n",
                sizeof o->sets / sizeof o->sets[0]);
        return -1;
    }
    o->sets[o->n_sets++] = val;
    return 1;
}

si_config *si_cli_config_load(const si_cli_config_opts *o)
{
    const char *path = si_config_default_path(o->config_path);
    si_config *c = NULL;
    si_err err;
    int rc = si_config_load(path, &c, &err);
    if (rc != SI_OK) {
        const char *hint = "";
        if (rc == SI_ENOTFOUND && o->config_path == NULL) {
            const char *env = getenv(SI_CONFIG_ENV);
            hint = env != NULL && *env != '\0'
                       ? " (named by " SI_CONFIG_ENV ")"
                       : " (the installed default; use --config FILE or " SI_CONFIG_ENV ")";
        }
        fprintf(stderr, "sparkinfer: %s%s\n", err.msg, hint);
        return NULL;
    }
    for (int k = 0; k < o->n_sets; k++) {
        if (si_config_set(c, o->sets[k], &err) != SI_OK) {
            fprintf(stderr, "sparkinfer: %s\n", err.msg);
            si_config_free(c);
            return NULL;
        }
    }
    return c;
}

void si_cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sparkinfer %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool si_cli_parse_long(const char *s, long min, long max, long *out)
{
    if (s == NULL || *s == '\0' || *s == ' ' || *s == '\t')
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}
