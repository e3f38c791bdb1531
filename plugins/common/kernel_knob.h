/* plugins/common/kernel_knob.h — knob parsing shared by the kernel plugins
 * of this tree (header-only: each plugin is its own .so). */
#ifndef SI_PLUGINS_KERNEL_KNOB_H
#define SI_PLUGINS_KERNEL_KNOB_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sparkinfer/plugin.h>

/* [section] min_tokens: the smallest batch (tokens) the kernel takes, an
 * integer in 1..2^31-1; `dflt` when the key is absent.  A bad value is
 * SI_EINVAL naming the plugin, section, key and value. */
static inline int si_kernel_min_tokens(const si_host *h, const char *plugin, const char *section, int64_t dflt,
                                       int64_t *out, si_err *err)
{
    const char *v = h->cfg_get != NULL ? h->cfg_get(h, section, "min_tokens") : NULL;
    *out = dflt;
    if (v == NULL)
        return SI_OK;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || n < 1 || n > 0x7fffffffLL)
        return si_err_set(err, SI_EINVAL, "%s: [%s] min_tokens = '%s': expected an integer from 1 to 2147483647",
                          plugin, section, v);
    *out = n;
    return SI_OK;
}

/* [section] `key`: one of the n words names[0..n-1] (exact match); *out
 * its index, `dflt` when the key is absent.  A bad value is SI_EINVAL
 * naming the plugin, section, key, value and the words allowed. */
static inline int si_kernel_choice(const si_host *h, const char *plugin, const char *section, const char *key,
                                   const char *const *names, int n, int dflt, int *out, si_err *err)
{
    const char *v = h->cfg_get != NULL ? h->cfg_get(h, section, key) : NULL;
    *out = dflt;
    if (v == NULL)
        return SI_OK;
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) {
            *out = i;
            return SI_OK;
        }
    char allowed[128];
    size_t at = 0;
    allowed[0] = '\0';
    for (int i = 0; i < n && at < sizeof allowed; i++)
        at += (size_t)snprintf(allowed + at, sizeof allowed - at, "%s%s", i ? " | " : "", names[i]);
    return si_err_set(err, SI_EINVAL, "%s: [%s] %s = '%s': expected %s", plugin, section, key, v, allowed);
}

#endif
