/* core/host.c — the si_host table lent to every plugin: logging, memory,
 * configuration lookups, GGUF views and the reference quant routines.
 *
 * Most members are the core functions themselves (their prototypes match
 * the table's, so the compiler checks the ABI here); the rest are thin
 * wrappers that find the configuration through h->core.
 */
#include "host.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "quant.h"

/* Written at start-up (config, -v), read by every log call, from any
 * thread: relaxed atomics are enough (a stale read only means one message
 * more or less while the level changes). */
static atomic_int log_level = SI_LOG_WARN;

static const char *const level_names[] = { "error", "warning", "info", "debug" };

void si_host_set_log_level(int level)
{
    if (level < SI_LOG_ERROR)
        level = SI_LOG_ERROR;
    if (level > SI_LOG_DEBUG)
        level = SI_LOG_DEBUG;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int si_host_log_level(void)
{
    return atomic_load_explicit(&log_level, memory_order_relaxed);
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void host_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    (void)h;
    if (level > si_host_log_level() || fmt == NULL)
        return;
    if (level < SI_LOG_ERROR)
        level = SI_LOG_ERROR;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')   /* we add exactly one */
        msg[--n] = '\0';
    /* one fprintf call: stdio locks the stream, so lines never interleave */
    fprintf(stderr, "sparkinfer[%s]: %s: %s\n", who ? who : "?", level_names[level], msg);
}

static void *host_alloc(const si_host *h, size_t n)
{
    (void)h;
    return malloc(n ? n : 1);
}

static void host_free(const si_host *h, void *p)
{
    (void)h;
    free(p);
}

static const char *host_cfg_get(const si_host *h, const char *section, const char *key)
{
    if (h == NULL || h->core == NULL)
        return NULL;
    return si_config_get((const si_config *)h->core, section, key);
}

static uint32_t host_block_elems(uint32_t type)
{
    const si_type_traits *t = si_type_get(type);
    return t ? t->block_elems : 0;
}

static uint32_t host_block_bytes(uint32_t type)
{
    const si_type_traits *t = si_type_get(type);
    return t ? t->block_bytes : 0;
}

/* Draws "\rloading X: 42% (1.9 / 4.6 GiB)" on a terminal, at most ~10
 * times a second; nothing at all when stderr is not a terminal. */
static void host_progress(const si_host *h, const char *what, uint64_t done, uint64_t total)
{
    (void)h;
    static int tty = -1;
    static double last;
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    if (!tty || total == 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    bool end = done >= total;
    if (!end && now - last < 0.1)
        return;
    last = now;
    fprintf(stderr, "\rloading %s: %3.0f%% (%.2f / %.2f GiB)%s", what ? what : "",
            100.0 * (double)done / (double)total, (double)done / 1073741824.0,
            (double)total / 1073741824.0, end ? "\n" : "");
    fflush(stderr);
}

void si_host_init(si_host *h, const si_config *cfg)
{
    memset(h, 0, sizeof *h);
    h->abi_major = SI_ABI_MAJOR;
    h->abi_minor = SI_ABI_MINOR;
    h->size = sizeof *h;
    h->core = (void *)cfg;      /* read-only through host_cfg_get */
    h->log = host_log;
    h->alloc = host_alloc;
    h->free = host_free;
    h->cfg_get = host_cfg_get;
    h->gguf_path = si_gguf_path;
    h->gguf_get = si_gguf_get;
    h->gguf_arr_get = si_gguf_arr_get;
    h->gguf_n_tensors = si_gguf_n_tensors;
    h->gguf_tensor_at = si_gguf_tensor_at;
    h->gguf_tensor = si_gguf_tensor;
    h->type_block_elems = host_block_elems;
    h->type_block_bytes = host_block_bytes;
    h->type_name = si_type_name;
    h->dequant = si_dequant;
    h->quant = si_quant;
    h->progress = host_progress;

    if (cfg != NULL) {
        static const char *const names[] = { "error", "warn", "info", "debug" };
        const char *lv = si_config_get(cfg, "core", "log_level");
        for (int i = 0; lv != NULL && i < 4; i++)
            if (strcmp(lv, names[i]) == 0)
                si_host_set_log_level(i);
    }
}
