/* backends/common/si_opcheck.h — the backend-independent validation of
 * si_op arguments (plugin.h semantics), shared by the cpu and cuda_sm120
 * backend plugins so that both accept exactly the same ops with the same
 * messages.  A libtool convenience library linked into each plugin; it
 * uses nothing from the core (si_err_set is inline in status.h).
 *
 * What differs between backends is described by an si_opcheck: the name
 * that prefixes every message ("cpu: GDN: ..."), the weight types the
 * kernels read, how to read the (opaque, per-backend) si_buf, and a few
 * kernel limits.  Every check returns SI_OK, or SI_EUNSUPPORTED / SI_EINVAL
 * with the reason in err (err may be NULL: supports()).
 */
#ifndef SI_OPCHECK_H
#define SI_OPCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/plugin.h>

typedef struct si_opcheck {
    const char    *name;                          /* message prefix, e.g. "cpu"           */
    const si_host *host;                          /* for type names; may be NULL          */
    bool     (*type_ok)(uint32_t type);           /* weight/table types the kernels read  */
    uint64_t (*buf_size)(const si_buf *buf);      /* bytes of the buffer                  */
    /* Host address of the buffer's data, whose alignment is checked like
     * the offsets; NULL: not checked (device memory is always aligned). */
    const void *(*buf_data)(const si_buf *buf);
    /* The descriptor the KV cache was created with (si_kv is opaque). */
    const si_kv_desc *(*kv_desc)(const si_kv *kv);
    /* Whether GDN may write its state into the buffer; NULL: every one. */
    bool     (*buf_writable)(const si_buf *buf);
    bool      align_half;    /* 2-byte plain types: offsets/strides multiples of 2 too */
    uint32_t  max_head_dim;  /* ATTN head_dim, GDN head dims; 0: no limit              */
    uint32_t  max_heads;     /* ATTN n_head, GDN n_v_head (with max_head_dim)          */
    uint32_t  max_conv_k;    /* GDN conv_k                                              */
} si_opcheck;

/* Dimensions past ndim count as 1. */
static inline int64_t si_oc_ne(const si_tensor *t, int i) { return (uint32_t)i < t->ndim ? t->ne[i] : 1; }

/* Elements and bytes per block of the GGUF types either backend reads
 * (I32 included); false (both 0) for the others. */
bool si_oc_type_blk(uint32_t type, uint32_t *blk, uint32_t *bytes);
/* The host's name of `type`, or "unknown type". */
const char *si_oc_type_name(const si_opcheck *c, uint32_t type);
/* Name of an elementwise op kind (GET_ROWS, RMSNORM, ADD, MUL, SWIGLU). */
const char *si_oc_elem_name(uint32_t kind);

/* NULL when the tensor lies inside its buffer with sane strides for its
 * type (I32 or one of type_ok), else a static reason. */
const char *si_oc_tensor_check(const si_opcheck *c, const si_tensor *t);
/* `t` is a valid F32 tensor of exactly [ne0, ne1] (further dims 1) with
 * contiguous rows.  Messages read "NAME: OP: WHAT ...". */
int si_oc_want_f32(const si_opcheck *c, const si_tensor *t, int64_t ne0, int64_t ne1, const char *op,
                   const char *what, si_err *err);
/* A weight of a type_ok type, of shape [ne0, ne1, ne2]. */
int si_oc_want_weight(const si_opcheck *c, const si_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2,
                      const char *op, const char *what, si_err *err);

/* Sizes of a MOE op, shared by its check and the backends' exec. */
typedef struct si_oc_moe_dims {
    int64_t n, H, E, K, F, Fs;
    bool    fused, shared;
} si_oc_moe_dims;

void si_oc_moe_dims_of(const si_op *op, si_oc_moe_dims *d);
/* Bytes of one GDN state slot: conv history then the f32 delta-rule state. */
uint64_t si_oc_gdn_state_bytes(const si_gdn_params *p, int64_t conv_dim);
/* The byte offset of slot s's state (token t's) in a GDN op's state
 * buffer of state_bytes into *off; SI_ERANGE, named `name: GDN: token t`,
 * where the slot's `need` bytes do not lie inside it (or s < 0). */
int si_oc_gdn_slot(const char *name, const si_gdn_params *p, int64_t t, int32_t s, uint64_t need,
                   uint64_t state_bytes, uint64_t *off, si_err *err);

/* The op checks, by kind. */
int si_oc_matmul(const si_opcheck *c, const si_op *op, si_err *err);
int si_oc_elem(const si_opcheck *c, const si_op *op, si_err *err);
int si_oc_attn(const si_opcheck *c, const si_op *op, si_err *err);
int si_oc_gdn(const si_opcheck *c, const si_op *op, si_err *err);
int si_oc_moe(const si_opcheck *c, const si_op *op, si_err *err);
/* TOPK, host arrays included (penalty ids in range, pen_off ascending). */
int si_oc_topk(const si_opcheck *c, const si_op *op, si_err *err);
/* The check of op->kind; SI_EUNSUPPORTED for a kind without one. */
int si_oc_check(const si_opcheck *c, const si_op *op, si_err *err);

#endif /* SI_OPCHECK_H */
