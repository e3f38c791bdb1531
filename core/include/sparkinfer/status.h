/* sparkinfer/status.h — status codes and the caller-owned error buffer.
 *
 * Every fallible call in sparkinfer, in the core and across the plugin ABI,
 * returns an int: SI_OK (0) or one of the negative SI_E* codes below, and
 * writes a one-line human message into an si_err the CALLER owns.  No heap
 * memory ever crosses the boundary for an error.  Passing a NULL si_err is
 * allowed everywhere: the message is then dropped, the code still returned.
 *
 * Values are append-only: they are part of the ABI and are never renumbered.
 */
#ifndef SPARKINFER_STATUS_H
#define SPARKINFER_STATUS_H

#include <stdarg.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum si_status_code {
    SI_OK           = 0,
    SI_EINVAL       = -1,  /* bad argument or bad input data               */
    SI_ENOMEM       = -2,  /* allocation failed (host or device)           */
    SI_EUNSUPPORTED = -3,  /* valid request this build/device cannot serve */
    SI_EDEVICE      = -4,  /* device runtime error                         */
    SI_EIO          = -5,  /* file system error                            */
    SI_EABI         = -6,  /* plugin ABI mismatch                          */
    SI_EFORMAT      = -7,  /* malformed file (GGUF, INI, JSON ...)         */
    SI_ENOTFOUND    = -8,  /* named thing does not exist                   */
    SI_ERANGE       = -9,  /* value out of the accepted range              */
    SI_EREFUSED     = -10, /* a plugin declined (probe, accepts, supports) */
};

#define SI_ERR_MSG_MAX 512

/* Caller-owned message buffer.  Callees write it with si_err_set(); callers
 * read .msg after a non-zero status.  Always NUL-terminated once written. */
typedef struct si_err {
    char msg[SI_ERR_MSG_MAX];
} si_err;

/* Writes a formatted message into err (if not NULL) and returns code, so a
 * callee can write `return si_err_set(err, SI_EINVAL, "...", ...);`.
 * Defined inline so plugins get it without linking anything from the core. */
static inline int si_err_vset(si_err *err, int code, const char *fmt, va_list ap)
{
    if (err != NULL)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return code;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int si_err_set(si_err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    si_err_vset(err, code, fmt, ap);
    va_end(ap);
    return code;
}

/* Prefixes the existing message with "prefix: ", keeping the old text.  Used
 * by the core to add context (file name, plugin name) as errors travel up. */
static inline void si_err_prefix(si_err *err, const char *prefix)
{
    if (err == NULL || prefix == NULL)
        return;
    /* Shift the old text right (truncating its tail) and write the prefix
     * in front: no temporary, no format-truncation surprises. */
    size_t cap = sizeof err->msg, plen = 0, mlen = 0;
    while (prefix[plen] != '\0')
        plen++;
    while (mlen < cap && err->msg[mlen] != '\0')
        mlen++;
    if (plen + 2 >= cap)
        plen = cap - 3;
    if (mlen > cap - 1 - plen - 2)
        mlen = cap - 1 - plen - 2;
    for (size_t i = mlen; i-- > 0;)
        err->msg[plen + 2 + i] = err->msg[i];
    for (size_t i = 0; i < plen; i++)
        err->msg[i] = prefix[i];
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + mlen] = '\0';
}

/* Short, static name of a status code ("invalid argument" ...). */
static inline const char *si_strerror(int status)
{
    switch (status) {
    case SI_OK:           return "ok";
    case SI_EINVAL:       return "invalid argument";
    case SI_ENOMEM:       return "out of memory";
    case SI_EUNSUPPORTED: return "unsupported";
    case SI_EDEVICE:      return "device error";
    case SI_EIO:          return "i/o error";
    case SI_EABI:         return "ABI mismatch";
    case SI_EFORMAT:      return "malformed input";
    case SI_ENOTFOUND:    return "not found";
    case SI_ERANGE:       return "out of range";
    case SI_EREFUSED:     return "refused";
    default:              return "unknown error";
    }
}

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_STATUS_H */
