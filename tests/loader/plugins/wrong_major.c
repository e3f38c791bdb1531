/* tests/loader/plugins/wrong_major.c — BAD: a hand-built descriptor that
 * claims ABI major SI_ABI_MAJOR + 1, returned whatever the host says (a
 * plugin built against a future core that forgot to check). */
#include <sparkinfer/plugin.h>

static const si_plugin desc = {
    .abi_major = SI_ABI_MAJOR + 1,
    .abi_minor = 0,
    .size = sizeof(si_plugin),
    .kind = SI_KIND_BACKEND,
    .name = "wrong_major",
    .version = "0",
    .description = "built against ABI major + 1",
};

SI_EXPORT const si_plugin *si_plugin_entry(const si_host *h);
const si_plugin *si_plugin_entry(const si_host *h)
{
    (void)h;
    return &desc;
}
