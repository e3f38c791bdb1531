/* tests/loader/plugins/null_entry.c — BAD: the entry point refuses every
 * host (returns NULL), as a plugin does when host->abi_major differs. */
#include <sparkinfer/plugin.h>

SI_EXPORT const si_plugin *si_plugin_entry(const si_host *h);
const si_plugin *si_plugin_entry(const si_host *h)
{
    (void)h;
    return NULL;
}
