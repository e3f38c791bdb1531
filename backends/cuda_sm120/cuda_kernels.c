/* backends/cuda_sm120/cuda_kernels.c — kernel plugins attached to this
 * backend (attach_kernel) and the si_cuda_ext table lent to them
 * (include/sparkinfer/cuda_ext.h says what a kernel may rely on).
 *
 * One kernel per op kind: the first one attached wins, a second is refused
 * by name (the core attaches in config order, so the config decides).  A
 * kernel sees every op of its kind first (supports()); the ones it
 * declines run the backend's own code, so a disabled or absent kernel
 * leaves exactly the built-in path. */
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

static void *ext_stream(si_backend *b) { return (void *)b->stream; }

static void *ext_dev_ptr(si_backend *b, const si_tensor *t)
{
    (void)b;
    return t == NULL || t->buf == NULL ? NULL : (uint8_t *)t->buf->dev + t->offset;
}

static int ext_exec_builtin(si_backend *b, const si_op *op, si_err *err)
{
    if (b == NULL || op == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": exec_builtin: NULL argument");
    return cu_exec_one(b, op, false, err);
}

static int ext_buf_wrap(si_backend *b, void *dev, uint64_t nbytes, si_buf **out, si_err *err)
{
    (void)b;
    if (dev == NULL || out == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": buf_wrap: NULL argument");
    si_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    buf->dev = dev;
    buf->nbytes = nbytes;
    buf->borrowed = true;
    *out = buf;
    return SI_OK;
}

static void ext_buf_unwrap(si_backend *b, si_buf *buf)
{
    (void)b;
    if (buf != NULL && buf->borrowed)
        free(buf);
}

void cu_kernels_init(si_backend *b, int cc_major, int cc_minor)
{
    b->ext = (si_cuda_ext){
        .size = sizeof(si_cuda_ext), .major = SI_CUDA_EXT_MAJOR, .b = b, .device = b->device,
        .cc_major = cc_major, .cc_minor = cc_minor, .n_sm = b->n_sm,
        .stream = ext_stream, .dev_ptr = ext_dev_ptr, .exec_builtin = ext_exec_builtin,
        .buf_wrap = ext_buf_wrap, .buf_unwrap = ext_buf_unwrap, .attn_prepare = cu_attn_view,
    };
}

int cu_attach_kernel(si_backend *b, const si_plugin *k, const char *section, si_err *err)
{
    if (b == NULL || k == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": attach_kernel: NULL argument");
    const struct si_kernel_ops *ko = k->ops;
    if (k->kind != SI_KIND_KERNEL || ko == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": attach_kernel: '%s' is not a kernel plugin", k->name);
    if (!SI_HAS_MEMBER(ko, struct si_kernel_ops, exec) || ko->init == NULL || ko->supports == NULL ||
        ko->exec == NULL || ko->backend == NULL)
        return si_err_set(err, SI_EABI, CU_NAME ": kernel '%s': op table lacks init/supports/exec", k->name);
    if (strcmp(ko->backend, CU_NAME) != 0)
        return si_err_set(err, SI_EREFUSED, CU_NAME ": kernel '%s' is for backend '%s'", k->name, ko->backend);
    if (ko->op == SI_OP_NONE || ko->op >= SI_OP_KIND_COUNT)
        return si_err_set(err, SI_EREFUSED, CU_NAME ": kernel '%s' replaces op %u, unknown here", k->name, ko->op);
    cu_kernel *slot = &b->kern[ko->op];
    if (slot->ops != NULL)
        return si_err_set(err, SI_EREFUSED, CU_NAME ": kernel '%s': op %u is already replaced by '%s'", k->name,
                          ko->op, slot->name);
    void *state = NULL;
    int rc = ko->init(b->host, section, &b->ext, &state, err);
    if (rc != SI_OK)
        return rc;
    slot->ops = ko;
    slot->state = state;
    slot->name = k->name;
    b->host->log(b->host, SI_LOG_INFO, CU_NAME, "kernel %s attached: replaces op %u where it supports the shape",
                 k->name, ko->op);
    return SI_OK;
}

void cu_kernels_fini(si_backend *b)
{
    for (int i = 0; i < SI_OP_KIND_COUNT; i++) {
        cu_kernel *slot = &b->kern[i];
        if (slot->ops != NULL && slot->ops->fini != NULL)
            slot->ops->fini(slot->state);
        slot->ops = NULL;
        slot->state = NULL;
    }
}

const cu_kernel *cu_kernel_for(const si_backend *b, const si_op *op)
{
    if (op->kind >= SI_OP_KIND_COUNT)
        return NULL;
    const cu_kernel *k = &b->kern[op->kind];
    return k->ops != NULL && k->ops->supports(k->state, op) ? k : NULL;
}
