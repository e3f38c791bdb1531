/* core/cli/cli_model.c — model/sampling options and engine opening shared
 * by run, chat, check, score and bench. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_model.h"
#include "host.h"

void si_cli_model_defaults(si_cli_model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->threads = -1;
}

/* "--name VALUE", "--name=VALUE" or the short form "-x VALUE". */
static int take(const char *lng, const char *shrt, int argc, char **argv, int *i, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);
    if (strncmp(a, lng, n) == 0 && a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (strcmp(a, lng) != 0 && (shrt == NULL || strcmp(a, shrt) != 0))
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "sparkinfer: %s needs a value\n", a);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

static int take_long(const char *cmd, const char *lng, const char *shrt, long min, long max,
                     int argc, char **argv, int *i, long *out)
{
    const char *v = NULL;
    int r = take(lng, shrt, argc, argv, i, &v);
    if (r <= 0)
        return r;
    if (!si_cli_parse_long(v, min, max, out)) {
        si_cli_error(cmd, "%s '%s': expected an integer in [%ld, %ld]", lng, v, min, max);
        return -1;
    }
    return 1;
}

static int take_float(const char *cmd, const char *lng, double min, double max,
                      int argc, char **argv, int *i, float *out)
{
    const char *v = NULL;
    int r = take(lng, NULL, argc, argv, i, &v);
    if (r <= 0)
        return r;
    char *end = NULL;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !(d >= min && d <= max)) {
        si_cli_error(cmd, "%s '%s': expected a number in [%g, %g]", lng, v, min, max);
        return -1;
    }
    *out = (float)d;
    return 1;
}

int si_cli_model_opt(si_cli_model_opts *o, const char *cmd, int argc, char **argv, int *i)
{
    int r = si_cli_config_opt(&o->cfg, argc, argv, i);
    if (r != 0)
        return r;
    const char *a = argv[*i];
    if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
        o->verbose = true;
        return 1;
    }
    if ((r = take("--model", "-m", argc, argv, i, &o->model)) != 0)
        return r;
    if ((r = take("--backend", NULL, argc, argv, i, &o->backend)) != 0)
        return r;
    if ((r = take_long(cmd, "--ctx-size", "-c", 1, 1L << 24, argc, argv, i, &o->n_ctx)) != 0)
        return r;
    if ((r = take_long(cmd, "--batch-size", "-b", 1, 1L << 20, argc, argv, i, &o->n_batch)) != 0)
        return r;
    return take_long(cmd, "--threads", "-t", 0, 4096, argc, argv, i, &o->threads);
}

int si_cli_sampling_opt(si_sampler_params *p, const char *cmd, int argc, char **argv, int *i)
{
    int r;
    long v;
    if ((r = take_float(cmd, "--temp", 0, 100, argc, argv, i, &p->temperature)) != 0)
        return r;
    if ((r = take_float(cmd, "--top-p", 0, 1, argc, argv, i, &p->top_p)) != 0)
        return r;
    if ((r = take_float(cmd, "--min-p", 0, 1, argc, argv, i, &p->min_p)) != 0)
        return r;
    if ((r = take_float(cmd, "--repeat-penalty", 1e-3, 100, argc, argv, i, &p->repeat_penalty)) != 0)
        return r;
    if ((r = take_float(cmd, "--presence-penalty", -100, 100, argc, argv, i, &p->presence_penalty)) != 0)
        return r;
    if ((r = take_float(cmd, "--frequency-penalty", -100, 100, argc, argv, i, &p->frequency_penalty)) != 0)
        return r;
    if ((r = take_long(cmd, "--top-k", NULL, 0, 1L << 30, argc, argv, i, &v)) != 0) {
        if (r > 0)
            p->top_k = (int32_t)v;
        return r;
    }
    if ((r = take_long(cmd, "--repeat-last-n", NULL, 0, SI_SAMPLER_MAX_WINDOW, argc, argv, i, &v)) != 0) {
        if (r > 0)
            p->penalty_last_n = (int32_t)v;
        return r;
    }
    if ((r = take_long(cmd, "--seed", NULL, 0, 0x7fffffffL, argc, argv, i, &v)) != 0) {
        if (r > 0)
            p->seed = (uint64_t)v;
        return r;
    }
    return 0;
}

static bool apply_set(const char *cmd, si_config *cfg, const char *fmt, long v)
{
    char buf[128];
    si_err err = { { 0 } };
    snprintf(buf, sizeof buf, fmt, v);
    if (si_config_set(cfg, buf, &err) != SI_OK) {
        si_cli_error(cmd, "%s", err.msg);
        return false;
    }
    return true;
}

si_engine *si_cli_engine_open(const si_cli_model_opts *o, const char *cmd, si_config **cfg_out)
{
    *cfg_out = NULL;
    if (o->model == NULL) {
        si_cli_error(cmd, "no model given (-m FILE.gguf)");
        return NULL;
    }
    si_config *cfg = si_cli_config_load(&o->cfg);
    if (cfg == NULL)
        return NULL;
    if ((o->threads >= 0 && !apply_set(cmd, cfg, "runtime.threads=%ld", o->threads)) ||
        (o->n_ctx > 0 && !apply_set(cmd, cfg, "runtime.n_ctx=%ld", o->n_ctx)) ||
        (o->n_batch > 0 && !apply_set(cmd, cfg, "runtime.n_batch=%ld", o->n_batch))) {
        si_config_free(cfg);
        return NULL;
    }
    /* Through the config: the engine's host reads [core] log_level when it
     * starts, which would otherwise undo -v. */
    if (o->verbose && !apply_set(cmd, cfg, "core.log_level=info%.0ld", 0)) {
        si_config_free(cfg);
        return NULL;
    }
    si_engine_opts eo = { .cfg = cfg, .model_path = o->model, .backend = o->backend };
    si_engine *e = NULL;
    si_err err = { { 0 } };
    if (si_engine_open(&eo, &e, &err) != SI_OK) {
        si_cli_error(cmd, "%s", err.msg);
        si_config_free(cfg);
        return NULL;
    }
    *cfg_out = cfg;
    return e;
}

uint32_t si_cli_n_batch(const si_cli_model_opts *o, const si_config *cfg)
{
    if (o->n_batch > 0)
        return (uint32_t)o->n_batch;
    return (uint32_t)si_config_get_long(cfg, "runtime", "n_batch", 8192);
}

char *si_cli_read_file(const char *cmd, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        si_cli_error(cmd, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (buf == NULL || bad) {
        free(buf);
        si_cli_error(cmd, "%s: cannot read", path);
        return NULL;
    }
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

bool si_cli_model_set_n_seq(si_cli_model_opts *o, const char *cmd, char *buf, size_t cap, unsigned long n)
{
    if (o->cfg.n_sets >= (int)(sizeof o->cfg.sets / sizeof o->cfg.sets[0])) {
        si_cli_error(cmd, "too many --set options");
        return false;
    }
    snprintf(buf, cap, "runtime.n_seq=%lu", n);
    o->cfg.sets[o->cfg.n_sets++] = buf;
    return true;
}
