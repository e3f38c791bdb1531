/* tests/cli/cli_util.c — see cli_util.h. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

/* After the project headers: <signal.h> (pulled in by <sys/wait.h>) defines
 * a macro named si_status, which would rewrite status.h's enum si_status. */
#include <sys/wait.h>

char cli_tmpdir[256];
static char bin[512];

void cli_setup(void)
{
    const char *b = getenv("SI_TOP_BUILDDIR");
    snprintf(bin, sizeof bin, "%s/sparkinfer", b && *b ? b : ".");
    const char *base = getenv("TMPDIR");
    snprintf(cli_tmpdir, sizeof cli_tmpdir, "%s/si-cli-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(cli_tmpdir));
}

void cli_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cli_tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", cli_tmpdir);
}

int cli_run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s/stdout' 2> '%s/stderr'", bin, args, cli_tmpdir, cli_tmpdir);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st), "cannot run: %s", cmd);
    return WEXITSTATUS(st);
}

char *cli_slurp(const char *name)
{
    char path[400];
    cli_path(path, sizeof path, name);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

void cli_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", cli_tmpdir, name);
}
