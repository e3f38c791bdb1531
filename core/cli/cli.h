/* core/cli/cli.h — the `sparkinfer` subcommands.
 *
 * Each subcommand is `int si_cmd_NAME(int argc, char **argv)` with argv[0]
 * the subcommand name.  It prints its results on stdout, errors on stderr
 * (one line naming the thing and the reason) and returns the process exit
 * status: 0 success, 1 failure, 2 bad usage.  `--help` prints usage on
 * stdout and returns 0.
 */
#ifndef SI_CLI_H
#define SI_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "config.h"

#define SI_EXIT_OK    0
#define SI_EXIT_FAIL  1
#define SI_EXIT_USAGE 2

int si_cmd_info(int argc, char **argv);
int si_cmd_plugins(int argc, char **argv);
int si_cmd_mkmodel(int argc, char **argv);
int si_cmd_convert(int argc, char **argv);
int si_cmd_run(int argc, char **argv);
int si_cmd_chat(int argc, char **argv);
int si_cmd_batch(int argc, char **argv);
int si_cmd_tokenize(int argc, char **argv);
int si_cmd_check(int argc, char **argv);
int si_cmd_score(int argc, char **argv);
int si_cmd_bench(int argc, char **argv);

/* ---- shared helpers (cli_common.c) ---- */

/* Configuration options every plugin-using command accepts:
 *   --config FILE, --set section.key=value (repeatable).
 * si_cli_config_opt() consumes argv[*i] (and its value) when it is one of
 * them and returns 1; 0 when it is not; -1 (message printed) on misuse. */
typedef struct si_cli_config_opts {
    const char *config_path;     /* NULL = SPARKINFER_CONFIG or the default */
    const char *sets[64];
    int         n_sets;
} si_cli_config_opts;

int si_cli_config_opt(si_cli_config_opts *o, int argc, char **argv, int *i);

/* Loads the configuration the options name (file, then SPARKINFER_CONFIG,
 * then the installed default) and applies the --set overrides.  On error
 * prints "sparkinfer: <message>" and returns NULL. */
si_config *si_cli_config_load(const si_cli_config_opts *o);

/* Prints "sparkinfer CMD: <formatted>" on stderr. */
void si_cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Parses a whole decimal integer in [min, max]; false (nothing printed) if
 * the text is not one. */
bool si_cli_parse_long(const char *s, long min, long max, long *out);

#endif /* SI_CLI_H */
