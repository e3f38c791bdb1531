/* backends/common/si_kvknob.c — see si_kvknob.h. */
#include <string.h>

#include "si_kvknob.h"

/* 0 and *type set, or -1 for a spelling that names no KV type. */
static int parse(const char *v, uint32_t *type)
{
    if (strcmp(v, "f32") == 0)
        *type = SI_TYPE_F32;
    else if (strcmp(v, "f16") == 0)
        *type = SI_TYPE_F16;
    else if (strcmp(v, "int8") == 0 || strcmp(v, "i8") == 0)
        *type = SI_TYPE_I8;
    else
        return -1;
    return 0;
}

static bool supported(const si_kvknob *k, uint32_t type)
{
    return type == SI_TYPE_F32 || (type == SI_TYPE_F16 && k->has_f16) || (type == SI_TYPE_I8 && k->has_i8);
}

const char *si_kvknob_name(uint32_t type)
{
    return type == SI_TYPE_F32 ? "f32" : type == SI_TYPE_F16 ? "f16" : type == SI_TYPE_I8 ? "int8" : "?";
}

int si_kvknob_resolve(const si_host *h, const char *section, const si_kvknob *k, uint32_t *out, si_err *err)
{
    *out = k->dflt;
    const char *v = h->cfg_get(h, section, "kv_type");
    uint32_t t;
    if (v != NULL) {
        if (parse(v, &t) != 0 || !supported(k, t))
            return si_err_set(err, SI_EINVAL, "[%s] kv_type = '%s': expected one of f32%s%s", section, v,
                              k->has_f16 ? "|f16" : "", k->has_i8 ? "|int8" : "");
        *out = t;
        return SI_OK;
    }
    v = h->cfg_get(h, "runtime", "kv_type");
    if (v == NULL || strcmp(v, "auto") == 0)
        return SI_OK;
    if (parse(v, &t) != 0)   /* the core validated it: a newer spelling */
        return si_err_set(err, SI_EINVAL, "[runtime] kv_type = '%s': not a KV type %s knows", v, k->name);
    if (!supported(k, t)) {
        if (h->log != NULL)
            h->log(h, SI_LOG_WARN, k->name, "[runtime] kv_type = %s: this backend has no %s KV cache; using %s",
                   v, v, si_kvknob_name(k->fallback));
        t = k->fallback;
    }
    *out = t;
    return SI_OK;
}
