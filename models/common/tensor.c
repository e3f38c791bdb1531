/* models/common/tensor.c — small helpers that describe backend memory as
 * si_tensor views (ggml order and strides, see plugin.h). */
#include <stdio.h>
#include <string.h>

#include "hybrid.h"

void sih_tensor_desc(const si_host *h, uint32_t type, uint32_t ndim, const int64_t *ne,
                     si_buf *buf, uint64_t offset, si_tensor *out)
{
    uint32_t be = h->type_block_elems(type);
    uint32_t bb = h->type_block_bytes(type);
    memset(out, 0, sizeof *out);
    out->buf = buf;
    out->offset = offset;
    out->type = type;
    out->ndim = ndim;
    for (uint32_t d = 0; d < SI_MAX_DIMS; d++)
        out->ne[d] = d < ndim ? ne[d] : 1;
    /* nb[0] is the block (or element) size; rows hold ne0/block blocks. */
    out->nb[0] = bb;
    out->nb[1] = be != 0 ? (uint64_t)(out->ne[0] / be) * bb : 0;
    for (uint32_t d = 2; d < SI_MAX_DIMS; d++)
        out->nb[d] = out->nb[d - 1] * (uint64_t)out->ne[d - 1];
}

si_tensor sih_act(si_buf *buf, uint64_t offset, int64_t ne0, int64_t ne1)
{
    si_tensor t;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.offset = offset;
    t.type = SI_TYPE_F32;
    t.ndim = 2;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = t.ne[3] = 1;
    t.nb[0] = sizeof(float);
    t.nb[1] = (uint64_t)ne0 * sizeof(float);
    t.nb[2] = t.nb[3] = t.nb[1] * (uint64_t)ne1;
    return t;
}

si_tensor sih_ids(si_buf *buf, uint64_t offset, int64_t n)
{
    si_tensor t;
    memset(&t, 0, sizeof t);
    t.buf = buf;
    t.offset = offset;
    t.type = SI_TYPE_I32;
    t.ndim = 1;
    t.ne[0] = n;
    t.ne[1] = t.ne[2] = t.ne[3] = 1;
    t.nb[0] = sizeof(int32_t);
    t.nb[1] = t.nb[2] = t.nb[3] = (uint64_t)n * sizeof(int32_t);
    return t;
}

const char *sih_type_str(const si_host *h, uint32_t type, char *tmp, size_t n)
{
    const char *s = h->type_name(type);
    if (s != NULL)
        return s;
    snprintf(tmp, n, "type %u", type);
    return tmp;
}

const char *sih_op_name(uint32_t kind)
{
    switch (kind) {
    case SI_OP_GET_ROWS: return "GET_ROWS";
    case SI_OP_MATMUL:   return "MATMUL";
    case SI_OP_RMSNORM:  return "RMSNORM";
    case SI_OP_ADD:      return "ADD";
    case SI_OP_MUL:      return "MUL";
    case SI_OP_SWIGLU:   return "SWIGLU";
    case SI_OP_ATTN:     return "ATTN";
    case SI_OP_GDN:      return "GDN";
    case SI_OP_MOE:      return "MOE";
    case SI_OP_TOPK:     return "TOPK";
    case SI_OP_HOST_IDS: return "HOST_IDS";
    default:             return "unknown op";
    }
}
