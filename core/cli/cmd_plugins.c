/* core/cli/cmd_plugins.c — `sparkinfer plugins`: loads the configured
 * plugins exactly as every other command would, and shows what loaded,
 * what was disabled and what was refused, and why. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "host.h"
#include "loader.h"

#ifndef SI_SYSCONFDIR
#define SI_SYSCONFDIR "/usr/local/etc/sparkinfer"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sparkinfer plugins [--config FILE] [--set section.key=value]... [--json] [-v]\n"
            "\n"
            "Loads every plugin section of the configuration in file order and prints, for\n"
            "each: section, state (loaded / disabled / refused), version, priority, whether\n"
            "it is required, its path, and its description or the reason it was refused.\n"
            "\n"
            "  --config FILE   configuration to read (default: $%s, else the installed\n"
            "                  %s)\n"
            "  --set S.K=V     override one key, e.g. --set kernel.attn_mma_i8.enabled=false\n"
            "  --json          one JSON document instead of the table\n"
            "  -v              log plugin loading on stderr (repeat for more)\n"
            "\n"
            "Exit status: 0, or 1 when a plugin marked required = true was refused.\n",
            SI_CONFIG_ENV, SI_SYSCONFDIR "/sparkinfer.ini");
}

/* Writes s as a JSON string (quotes included). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void print_json(FILE *f, const si_config *cfg, const si_registry *r)
{
    fputs("{\"config\":", f);
    json_str(f, si_config_source(cfg));
    fputs(",\"plugin_dir\":", f);
    json_str(f, si_config_plugin_dir(cfg));
    fputs(",\"plugins\":[", f);
    for (size_t i = 0; i < si_registry_count(r); i++) {
        const si_plugin_record *p = si_registry_at(r, i);
        fputs(i ? ",{" : "{", f);
        fputs("\"section\":", f);
        json_str(f, p->section);
        fputs(",\"kind\":", f);
        json_str(f, si_kind_name(p->kind));
        fputs(",\"name\":", f);
        json_str(f, p->name);
        fputs(",\"version\":", f);
        if (p->desc != NULL)
            json_str(f, p->desc->version);
        else
            fputs("null", f);
        fputs(",\"path\":", f);
        json_str(f, p->path);
        fputs(",\"state\":", f);
        json_str(f, si_plugin_state_name(p->state));
        fprintf(f, ",\"status\":%d,\"reason\":", p->status);
        json_str(f, p->reason);
        fputs(",\"description\":", f);
        if (p->desc != NULL)
            json_str(f, p->desc->description);
        else
            fputs("null", f);
        fprintf(f, ",\"priority\":%ld,\"required\":%s}", p->priority,
                p->required ? "true" : "false");
    }
    fputs("]}\n", f);
}

static void print_table(FILE *f, const si_config *cfg, const si_registry *r)
{
    size_t n = si_registry_count(r), counts[3] = { 0, 0, 0 };
    int w = 7;
    for (size_t i = 0; i < n; i++) {
        int len = (int)strlen(si_registry_at(r, i)->section);
        if (len > w)
            w = len;
    }
    fprintf(f, "config:     %s\nplugin dir: %s\n\n", si_config_source(cfg),
            si_config_plugin_dir(cfg));
    fprintf(f, "%-*s  %-8s  %-10s  %8s  %-8s  %s\n", w, "SECTION", "STATE", "VERSION",
            "PRIORITY", "REQUIRED", "PATH");
    for (size_t i = 0; i < n; i++) {
        const si_plugin_record *p = si_registry_at(r, i);
        if (p->state >= 0 && p->state <= 2)
            counts[p->state]++;
        fprintf(f, "%-*s  %-8s  %-10s  %8ld  %-8s  %s\n", w, p->section,
                si_plugin_state_name(p->state), p->desc ? p->desc->version : "-", p->priority,
                p->required ? "yes" : "no", p->path[0] ? p->path : "-");
        if (p->state == SI_PLUGIN_LOADED)
            fprintf(f, "%*s  %s\n", w, "", p->desc->description);
        else
            fprintf(f, "%*s  %s: %s\n", w, "", si_plugin_state_name(p->state), p->reason);
    }
    fprintf(f, "\n%zu loaded, %zu disabled, %zu refused\n", counts[SI_PLUGIN_LOADED],
            counts[SI_PLUGIN_DISABLED], counts[SI_PLUGIN_REFUSED]);
}

int si_cmd_plugins(int argc, char **argv)
{
    si_cli_config_opts opts = { 0 };
    bool json = false;
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        int r = si_cli_config_opt(&opts, argc, argv, &i);
        if (r < 0)
            return SI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) {
            verbose++;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return SI_EXIT_OK;
        } else {
            si_cli_error("plugins", "unknown option '%s' (try --help)", argv[i]);
            return SI_EXIT_USAGE;
        }
    }

    si_config *cfg = si_cli_config_load(&opts);
    if (cfg == NULL)
        return SI_EXIT_FAIL;
    si_host host;
    si_host_init(&host, cfg);
    if (verbose > 0)
        si_host_set_log_level(si_host_log_level() + verbose);

    si_registry *reg = NULL;
    si_err err;
    int rc = si_registry_load_all(cfg, &host, &reg, &err);
    if (reg == NULL) {
        si_cli_error("plugins", "%s", err.msg);
        si_config_free(cfg);
        return SI_EXIT_FAIL;
    }
    if (json)
        print_json(stdout, cfg, reg);
    else
        print_table(stdout, cfg, reg);
    if (rc != SI_OK)
        si_cli_error("plugins", "%s", err.msg);
    si_registry_free(reg);
    si_config_free(cfg);
    return rc == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}
