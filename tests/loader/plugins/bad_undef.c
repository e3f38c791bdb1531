/* tests/loader/plugins/bad_undef.c — BAD: depends on a function no library
 * defines, so dlopen(RTLD_NOW) fails with "undefined symbol" before any of
 * its code runs.  (Linked without -no-undefined checks on purpose.) */
#include <sparkinfer/plugin.h>

int si_test_symbol_nobody_defines(void);

static int probe(const si_host *h, si_err *err)
{
    (void)h;
    return si_test_symbol_nobody_defines() ? si_err_set(err, SI_EREFUSED, "never") : SI_OK;
}

static const struct si_kernel_ops ops = { .size = sizeof ops };

SI_PLUGIN_DEFINE(SI_KIND_KERNEL, "bad_undef", "0", "needs an undefined symbol", probe, &ops, NULL)
