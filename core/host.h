/* core/host.h — the si_host table the core lends to plugins. */
#ifndef SI_CORE_HOST_H
#define SI_CORE_HOST_H

#include <sparkinfer/plugin.h>

#include "config.h"

/* Fills *h.  `cfg` is borrowed and must outlive every plugin call; it may be
 * NULL (then cfg_get always returns NULL). */
void si_host_init(si_host *h, const si_config *cfg);

/* Minimum level printed by host->log (default SI_LOG_WARN; the CLI raises
 * it with -v). */
void si_host_set_log_level(int level);

#endif /* SI_CORE_HOST_H */
