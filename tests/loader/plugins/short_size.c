/* tests/loader/plugins/short_size.c — BAD: the right ABI major but a
 * descriptor whose size says 8 bytes, i.e. only the version header; the
 * loader must not read kind, name or ops. */
#include <sparkinfer/plugin.h>

static const si_plugin desc = {
    .abi_major = SI_ABI_MAJOR,
    .abi_minor = SI_ABI_MINOR,
    .size = 8,
    .kind = SI_KIND_BACKEND,
    .name = "short_size",
};

SI_EXPORT const si_plugin *si_plugin_entry(const si_host *h);
const si_plugin *si_plugin_entry(const si_host *h)
{
    (void)h;
    return &desc;
}
