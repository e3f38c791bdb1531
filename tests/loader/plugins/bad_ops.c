/* tests/loader/plugins/bad_ops.c — BAD op tables, one per build:
 *   BAD_OPS_NULL    bad_ops_null:   ops is NULL
 *   BAD_OPS_SMALL   bad_ops_small:  ops->size is 4 (no member fits)
 *   BAD_OPS_MEMBER  bad_ops_member: full size, but the required exec is NULL
 * All are backends whose functions would work: only the table is wrong. */
#include <sparkinfer/plugin.h>

static int b_open(const si_host *h, const char *s, si_backend **out, si_err *err)
{
    (void)h;
    (void)s;
    (void)out;
    return si_err_set(err, SI_EUNSUPPORTED, "never opened");
}
static void b_close(si_backend *b) { (void)b; }
static int b_alloc(si_backend *b, uint64_t n, si_buf **out, si_err *err)
{
    (void)b;
    (void)n;
    (void)out;
    return si_err_set(err, SI_EUNSUPPORTED, "no memory here");
}
static void b_free(si_backend *b, si_buf *buf) { (void)b; (void)buf; }
static int b_copy_in(si_backend *b, si_buf *d, uint64_t o, const void *s, uint64_t n, si_err *e)
{
    (void)b; (void)d; (void)o; (void)s; (void)n;
    return si_err_set(e, SI_EUNSUPPORTED, "no upload");
}
static int b_copy_out(si_backend *b, void *d, si_buf *s, uint64_t o, uint64_t n, si_err *e)
{
    (void)b; (void)d; (void)s; (void)o; (void)n;
    return si_err_set(e, SI_EUNSUPPORTED, "no download");
}
static int b_kv(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *e)
{
    (void)b; (void)d; (void)out;
    return si_err_set(e, SI_EUNSUPPORTED, "no kv");
}
static void b_kv_free(si_backend *b, si_kv *kv) { (void)b; (void)kv; }
static int b_kv_reset(si_backend *b, si_kv *kv, uint32_t s, si_err *e)
{
    (void)b; (void)kv; (void)s;
    return si_err_set(e, SI_EUNSUPPORTED, "no kv");
}
static bool b_supports(const si_backend *b, const si_op *op) { (void)b; (void)op; return false; }
/* unused in the BAD_OPS_MEMBER build, which leaves exec out on purpose */
__attribute__((unused)) static int b_exec(si_backend *b, const si_op *ops, size_t n, si_err *e)
{
    (void)b; (void)ops; (void)n;
    return si_err_set(e, SI_EUNSUPPORTED, "no compute");
}

/* unused in the BAD_OPS_NULL build */
__attribute__((unused)) static const struct si_backend_ops ops = {
#if defined(BAD_OPS_SMALL)
    .size = 4,
#else
    .size = sizeof(struct si_backend_ops),
#endif
    .open = b_open, .close = b_close, .buf_alloc = b_alloc, .buf_free = b_free,
    .upload = b_copy_in, .download = b_copy_out, .kv_create = b_kv, .kv_free = b_kv_free,
    .kv_seq_reset = b_kv_reset, .supports = b_supports,
#if defined(BAD_OPS_MEMBER)
    .exec = NULL,
#else
    .exec = b_exec,
#endif
};

#if defined(BAD_OPS_NULL)
#define NAME "bad_ops_null"
#define OPS NULL
#elif defined(BAD_OPS_SMALL)
#define NAME "bad_ops_small"
#define OPS &ops
#else
#define NAME "bad_ops_member"
#define OPS &ops
#endif

SI_PLUGIN_DEFINE(SI_KIND_BACKEND, NAME, "0", "backend with a broken op table", NULL, OPS, NULL)
