/* tests/loader/plugins/ok_backend.c — a real, minimal backend for the
 * loader tests: buffers in host memory, upload/download with bounds
 * checks, a KV object that only remembers its shape; it computes nothing
 * (supports() is false for every op, exec() answers SI_EUNSUPPORTED).
 *
 * Knob: max_bytes = N  — buf_alloc refuses to hold more than N bytes in
 * total (lets the tests see a plugin knob travel through host->cfg_get).
 * Knob: kernels = refuse — attach_kernel answers SI_EREFUSED.
 * attach_kernel keeps one kernel plugin: ops of its kind that it supports
 * run through it (the only ops this backend "computes"). 
 * Built twice: as ok_backend, and with OK_BACKEND_NAME="dup" for the
 * duplicate-name test. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sparkinfer/plugin.h>

#ifndef OK_BACKEND_NAME
#define OK_BACKEND_NAME "ok_backend"
#endif

struct si_backend {
    const si_host *h;
    uint64_t       max_bytes;
    uint64_t       used;
    bool           refuse_kernels;
    const struct si_kernel_ops *kops;   /* the attached kernel, or NULL */
    void          *kstate;
};

struct si_buf {
    uint64_t       n;
    unsigned char *p;           /* [n] bytes from host->alloc */
};

struct si_kv {
    si_kv_desc d;
};

static int ok_open(const si_host *h, const char *section, si_backend **out, si_err *err)
{
    uint64_t max = UINT64_MAX;
    const char *v = h->cfg_get(h, section, "max_bytes");
    if (v != NULL) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0' || v[0] == '-')
            return si_err_set(err, SI_EINVAL, "[%s] max_bytes: '%s' is not a byte count",
                              section, v);
        max = x;
    }
    si_backend *b = h->alloc(h, sizeof *b);
    if (b == NULL)
        return si_err_set(err, SI_ENOMEM, OK_BACKEND_NAME ": out of memory");
    b->h = h;
    b->max_bytes = max;
    b->used = 0;
    const char *kv = h->cfg_get(h, section, "kernels");
    b->refuse_kernels = kv != NULL && strcmp(kv, "refuse") == 0;
    b->kops = NULL;
    b->kstate = NULL;
    *out = b;
    return SI_OK;
}

static void ok_close(si_backend *b)
{
    if (b == NULL)
        return;
    if (b->kops != NULL && b->kops->fini != NULL)
        b->kops->fini(b->kstate);
    b->h->free(b->h, b);
}

static int ok_buf_alloc(si_backend *b, uint64_t nbytes, si_buf **out, si_err *err)
{
    if (nbytes > b->max_bytes - b->used)
        return si_err_set(err, SI_ENOMEM, OK_BACKEND_NAME ": %llu bytes would pass max_bytes %llu",
                          (unsigned long long)nbytes, (unsigned long long)b->max_bytes);
    if (nbytes > SIZE_MAX)
        return si_err_set(err, SI_ENOMEM, OK_BACKEND_NAME ": %llu bytes do not fit in memory",
                          (unsigned long long)nbytes);
    si_buf *buf = b->h->alloc(b->h, sizeof *buf);
    unsigned char *p = buf ? b->h->alloc(b->h, (size_t)nbytes) : NULL;
    if (p == NULL) {
        b->h->free(b->h, buf);
        return si_err_set(err, SI_ENOMEM, OK_BACKEND_NAME ": out of memory");
    }
    buf->n = nbytes;
    buf->p = p;
    b->used += nbytes;
    *out = buf;
    return SI_OK;
}

static void ok_buf_free(si_backend *b, si_buf *buf)
{
    if (buf == NULL)
        return;
    b->used -= buf->n;
    b->h->free(b->h, buf->p);
    b->h->free(b->h, buf);
}

static bool in_bounds(const si_buf *buf, uint64_t off, uint64_t n)
{
    return off <= buf->n && n <= buf->n - off;
}

static int ok_upload(si_backend *b, si_buf *dst, uint64_t off, const void *src, uint64_t n,
                     si_err *err)
{
    (void)b;
    if (!in_bounds(dst, off, n))
        return si_err_set(err, SI_ERANGE, OK_BACKEND_NAME ": upload [%llu, +%llu) beyond buffer of %llu",
                          (unsigned long long)off, (unsigned long long)n,
                          (unsigned long long)dst->n);
    memcpy(dst->p + off, src, (size_t)n);
    return SI_OK;
}

static int ok_download(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n,
                       si_err *err)
{
    (void)b;
    if (!in_bounds(src, off, n))
        return si_err_set(err, SI_ERANGE, OK_BACKEND_NAME ": download [%llu, +%llu) beyond buffer of %llu",
                          (unsigned long long)off, (unsigned long long)n,
                          (unsigned long long)src->n);
    memcpy(dst, src->p + off, (size_t)n);
    return SI_OK;
}

static int ok_kv_create(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err)
{
    if (d == NULL || d->size < sizeof *d || d->n_seq == 0)
        return si_err_set(err, SI_EINVAL, OK_BACKEND_NAME ": bad KV descriptor");
    si_kv *kv = b->h->alloc(b->h, sizeof *kv);
    if (kv == NULL)
        return si_err_set(err, SI_ENOMEM, OK_BACKEND_NAME ": out of memory");
    kv->d = *d;
    *out = kv;
    return SI_OK;
}

static void ok_kv_free(si_backend *b, si_kv *kv)
{
    if (kv != NULL)
        b->h->free(b->h, kv);
}

static int ok_kv_seq_reset(si_backend *b, si_kv *kv, uint32_t seq, si_err *err)
{
    (void)b;
    if (seq >= kv->d.n_seq)
        return si_err_set(err, SI_ERANGE, OK_BACKEND_NAME ": sequence %u of %u", seq, kv->d.n_seq);
    return SI_OK;
}

static bool kernel_takes(const si_backend *b, const si_op *op)
{
    return b->kops != NULL && op->kind == b->kops->op && b->kops->supports(b->kstate, op);
}

static bool ok_supports(const si_backend *b, const si_op *op)
{
    return kernel_takes(b, op);
}

static int ok_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    for (size_t i = 0; i < n_ops; i++) {
        if (!kernel_takes(b, &ops[i]))
            return si_err_set(err, SI_EUNSUPPORTED, OK_BACKEND_NAME ": computes nothing (op %u)",
                              ops[i].kind);
        int rc = b->kops->exec(b->kstate, &ops[i], err);
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}

static int ok_attach_kernel(si_backend *b, const si_plugin *k, const char *section, si_err *err)
{
    if (b->refuse_kernels)
        return si_err_set(err, SI_EREFUSED, OK_BACKEND_NAME ": kernels = refuse");
    if (b->kops != NULL)
        return si_err_set(err, SI_EREFUSED, OK_BACKEND_NAME ": already has a kernel");
    const struct si_kernel_ops *ko = k->ops;
    void *state = NULL;
    int rc = ko->init(b->h, section, NULL, &state, err);
    if (rc != SI_OK)
        return rc;
    b->kops = ko;
    b->kstate = state;
    return SI_OK;
}

static const struct si_backend_ops ok_ops = {
    .size = sizeof(struct si_backend_ops),
    .open = ok_open,
    .close = ok_close,
    .buf_alloc = ok_buf_alloc,
    .buf_free = ok_buf_free,
    .upload = ok_upload,
    .download = ok_download,
    .kv_create = ok_kv_create,
    .kv_free = ok_kv_free,
    .kv_seq_reset = ok_kv_seq_reset,
    .supports = ok_supports,
    .exec = ok_exec,
    .attach_kernel = ok_attach_kernel,
};

SI_PLUGIN_DEFINE(SI_KIND_BACKEND, OK_BACKEND_NAME, "1.2.3",
                 "loader test backend: host memory, no compute", NULL, &ok_ops, NULL)
