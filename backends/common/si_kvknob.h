/* backends/common/si_kvknob.h — which element type a backend gives the
 * KV cache, from the configuration, decided the same way by every backend:
 *
 *   1. the backend's own section:  [backend.NAME] kv_type = ...   (strict:
 *      a value this backend cannot keep is an error naming the section);
 *   2. else [runtime] kv_type, unless it is "auto" (or unset).  A type the
 *      backend does not implement is not an error there — the runtime key
 *      is meant for whichever backend ends up running — but a WARN line
 *      saying what is used instead (the backend's `fallback`);
 *   3. else the backend's own default.
 *
 * Spellings: f32, f16, and int8 (or i8) for the paged int8 cache.
 */
#ifndef SI_KVKNOB_H
#define SI_KVKNOB_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/plugin.h>

typedef struct si_kvknob {
    const char *name;          /* backend name, prefixes the WARN line    */
    uint32_t    dflt;          /* SI_TYPE_F32, SI_TYPE_F16 or SI_TYPE_I8   */
    uint32_t    fallback;      /* used for a [runtime] type not supported  */
    bool        has_f16, has_i8;
} si_kvknob;

/* *out = the SI_TYPE_* to use.  SI_EINVAL (naming the section and key) for
 * a bad or unsupported value in the backend's own section. */
int si_kvknob_resolve(const si_host *h, const char *section, const si_kvknob *k, uint32_t *out, si_err *err);

/* "f32", "f16", "int8" or "?". */
const char *si_kvknob_name(uint32_t type);

#endif /* SI_KVKNOB_H */
