/* core/host.h — the si_host table the core lends to plugins. */
#ifndef SI_CORE_HOST_H
#define SI_CORE_HOST_H

#include <sparkinfer/plugin.h>

#include "config.h"

/* Fills *h.  `cfg` is borrowed and must outlive every plugin call; it may be
 * NULL (then cfg_get always returns NULL).  When cfg is given, its [core]
 * log_level becomes the log level (call si_host_set_log_level afterwards to
 * override it, as the CLI's -v does). */
void si_host_init(si_host *h, const si_config *cfg);

/* Minimum level printed by host->log (default SI_LOG_WARN; the CLI raises
 * it with -v).  Process-wide; clamped to SI_LOG_ERROR..SI_LOG_DEBUG. */
void si_host_set_log_level(int level);
int  si_host_log_level(void);

#endif /* SI_CORE_HOST_H */
