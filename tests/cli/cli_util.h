/* tests/cli/cli_util.h — running the built `sparkinfer` from a Check test:
 * a private temporary directory a test (the fixture), the command's
 * stdout and stderr captured there. */
#ifndef SI_TESTS_CLI_UTIL_H
#define SI_TESTS_CLI_UTIL_H

#include <stddef.h>

extern char cli_tmpdir[256];

/* Fixture: makes cli_tmpdir and finds $SI_TOP_BUILDDIR/sparkinfer;
 * removes the directory. */
void cli_setup(void);
void cli_teardown(void);
/* Runs `sparkinfer ARGS > tmp/stdout 2> tmp/stderr`; the exit status. */
int cli_run(const char *args);
/* The whole of file tmp/NAME (free()). */
char *cli_slurp(const char *name);
/* tmp/NAME into buf. */
void cli_path(char *buf, size_t n, const char *name);

#endif
