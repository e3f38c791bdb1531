/* tests/loader/plugins/no_symbol.c — BAD: a well-formed descriptor, but
 * exported under the wrong name (si_plugin_entry_v0), so the loader finds
 * no entry point.  Linked without the export filter so the typo'd symbol
 * really is exported. */
#include <sparkinfer/plugin.h>

static const si_plugin desc = {
    .abi_major = SI_ABI_MAJOR,
    .abi_minor = SI_ABI_MINOR,
    .size = sizeof(si_plugin),
    .kind = SI_KIND_BACKEND,
    .name = "no_symbol",
    .version = "0",
    .description = "exports the wrong symbol",
};

SI_EXPORT const si_plugin *si_plugin_entry_v0(const si_host *h);
const si_plugin *si_plugin_entry_v0(const si_host *h)
{
    (void)h;
    return &desc;
}
