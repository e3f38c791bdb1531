/* tests/loader/plugins/ok_kernel.c — a real, minimal kernel plugin for the
 * loader tests: extends backend "ok_backend", replaces SI_OP_MATMUL where
 * dst.ne[0] == 7 (a marker the tests set).  Built three times:
 *   ok_kernel
 *   probe_refuses  (OK_KERNEL_REFUSE: probe() says SI_EREFUSED "no device")
 *   bad_kernel_op  (OK_KERNEL_OP=99: an op this core does not know) */
#include <sparkinfer/plugin.h>

#ifndef OK_KERNEL_NAME
#define OK_KERNEL_NAME "ok_kernel"
#endif
#ifndef OK_KERNEL_OP
#define OK_KERNEL_OP SI_OP_MATMUL
#endif

typedef struct state {
    const si_host *h;
    unsigned long  calls;
} state;

static int k_init(const si_host *h, const char *section, const void *backend_api, void **out,
                  si_err *err)
{
    (void)section;
    (void)backend_api;
    state *s = h->alloc(h, sizeof *s);
    if (s == NULL)
        return si_err_set(err, SI_ENOMEM, OK_KERNEL_NAME ": out of memory");
    s->h = h;
    s->calls = 0;
    *out = s;
    return SI_OK;
}

static void k_fini(void *p)
{
    state *s = p;
    if (s != NULL)
        s->h->free(s->h, s);
}

static bool k_supports(void *p, const si_op *op)
{
    (void)p;
    return op->dst.ne[0] == 7;
}

/* The shape it takes fails on purpose when dst.ne[1] == 13, so the tests
 * see a kernel's error reach the caller. */
static int k_exec(void *p, const si_op *op, si_err *err)
{
    ((state *)p)->calls++;
    if (op->dst.ne[1] == 13)
        return si_err_set(err, SI_EINVAL, OK_KERNEL_NAME ": refusing 13 rows");
    return SI_OK;
}

#ifdef OK_KERNEL_REFUSE
static int k_probe(const si_host *h, si_err *err)
{
    (void)h;
    return si_err_set(err, SI_EREFUSED, "no device");
}
#define K_PROBE k_probe
#else
#define K_PROBE NULL
#endif

static const struct si_kernel_ops k_ops = {
    .size = sizeof(struct si_kernel_ops),
    .backend = "ok_backend",
    .op = OK_KERNEL_OP,
    .init = k_init,
    .fini = k_fini,
    .supports = k_supports,
    .exec = k_exec,
};

SI_PLUGIN_DEFINE(SI_KIND_KERNEL, OK_KERNEL_NAME, "0.1", "loader test kernel (matmul for ok_backend)",
                 K_PROBE, &k_ops, NULL)
