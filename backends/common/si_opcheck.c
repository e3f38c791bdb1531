/* backends/common/si_opcheck.c — argument checks of the si_ops, shared by
 * the backend plugins (see si_opcheck.h).  The rules are those of
 * plugin.h: F32 activations with contiguous rows (ne0) and any row
 * strides, weights of the types the backend reads, shapes that agree with
 * the op parameters. */
#include <math.h>

#include "si_opcheck.h"

/* ---- types -------------------------------------------------------------- */

typedef struct oc_blk {
    uint32_t blk, bytes;
} oc_blk;

/* GGUF block facts of the types the backends read. */
static const oc_blk blk_tab[SI_TYPE_COUNT] = {
    [SI_TYPE_F32]    = { 1, 4 },
    [SI_TYPE_F16]    = { 1, 2 },
    [SI_TYPE_BF16]   = { 1, 2 },
    [SI_TYPE_I32]    = { 1, 4 },
    [SI_TYPE_Q4_0]   = { 32, 18 },
    [SI_TYPE_Q4_1]   = { 32, 20 },
    [SI_TYPE_Q5_0]   = { 32, 22 },
    [SI_TYPE_Q5_1]   = { 32, 24 },
    [SI_TYPE_Q8_0]   = { 32, 34 },
    [SI_TYPE_Q2_K]   = { 256, 84 },
    [SI_TYPE_Q3_K]   = { 256, 110 },
    [SI_TYPE_Q4_K]   = { 256, 144 },
    [SI_TYPE_Q5_K]   = { 256, 176 },
    [SI_TYPE_Q6_K]   = { 256, 210 },
    [SI_TYPE_IQ4_NL] = { 32, 18 },
    [SI_TYPE_IQ4_XS] = { 256, 136 },
};

bool si_oc_type_blk(uint32_t type, uint32_t *blk, uint32_t *bytes)
{
    *blk = type < SI_TYPE_COUNT ? blk_tab[type].blk : 0;
    *bytes = type < SI_TYPE_COUNT ? blk_tab[type].bytes : 0;
    return *blk != 0;
}

const char *si_oc_type_name(const si_opcheck *c, uint32_t type)
{
    const char *n = (c->host != NULL && c->host->type_name != NULL) ? c->host->type_name(type) : NULL;
    return n != NULL ? n : "unknown type";
}

const char *si_oc_elem_name(uint32_t kind)
{
    switch (kind) {
    case SI_OP_GET_ROWS: return "GET_ROWS";
    case SI_OP_RMSNORM:  return "RMSNORM";
    case SI_OP_ADD:      return "ADD";
    case SI_OP_MUL:      return "MUL";
    case SI_OP_SWIGLU:   return "SWIGLU";
    default:             return "?";
    }
}

/* ---- tensors ------------------------------------------------------------ */

const char *si_oc_tensor_check(const si_opcheck *c, const si_tensor *t)
{
    if (t->buf == NULL)
        return "no buffer";
    if (t->ndim < 1 || t->ndim > SI_MAX_DIMS)
        return "ndim must be 1..4";
    uint32_t blk = 0, bytes = 0;
    if (t->type == SI_TYPE_I32 || c->type_ok(t->type))
        si_oc_type_blk(t->type, &blk, &bytes);
    if (blk == 0)
        return "unsupported element type";
    if (t->ne[0] % blk != 0)
        return "ne0 is not a multiple of the type's block";
    if (t->nb[0] != bytes)
        return "nb0 is not the element/block size (ne0 must be contiguous)";
    /* 4-byte types need 4-byte alignment everywhere; with align_half,
     * 2-byte types need 2 (the device kernels load them as halves). */
    uint64_t align = bytes >= 4 && blk == 1 ? 4 : (c->align_half && blk == 1 ? bytes : 1);
    uint64_t extent = 0, min_stride = (uint64_t)(t->ne[0] / blk) * bytes;
    bool empty = false;
    for (uint32_t i = 0; i < t->ndim; i++) {
        if (t->ne[i] < 0)
            return "negative ne";
        if (t->ne[i] == 0)
            empty = true;
        if (i > 0 && t->ne[i] > 1) {
            if (t->nb[i] < min_stride)
                return "strides overlap (nb[i] < nb[i-1]*ne[i-1])";
            if (t->nb[i] % align != 0)
                return "stride not a multiple of the element size";
            if (t->nb[i] > UINT64_MAX / (uint64_t)t->ne[i])
                return "stride overflow";
            extent += (uint64_t)(t->ne[i] - 1) * t->nb[i];
        }
        if (i > 0)
            min_stride = t->ne[i] > 1 ? t->nb[i] * (uint64_t)t->ne[i] : min_stride;
    }
    if (t->offset % align != 0)
        return "offset not a multiple of the element size";
    if (c->buf_data != NULL && (uintptr_t)c->buf_data(t->buf) % align != 0)
        return "buffer data not aligned for the element type";
    const uint64_t size = c->buf_size(t->buf);
    if (empty)
        return t->offset <= size ? NULL : "offset beyond the buffer";
    extent += (uint64_t)(t->ne[0] / blk) * bytes;
    if (t->offset > size || extent > size - t->offset)
        return "extends beyond its buffer";
    return NULL;
}

/* Type, layout and presence of an F32 tensor; the shape is the caller's. */
static int want_f32_any(const si_opcheck *c, const si_tensor *t, const char *op, const char *what, si_err *err)
{
    if (t == NULL)
        return si_err_set(err, SI_EINVAL, "%s: %s: %s is required", c->name, op, what);
    if (t->type != SI_TYPE_F32)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: %s: %s must be F32, not %s", c->name, op, what,
                          si_oc_type_name(c, t->type));
    const char *why = si_oc_tensor_check(c, t);
    if (why != NULL)
        return si_err_set(err, SI_EINVAL, "%s: %s: %s: %s", c->name, op, what, why);
    return SI_OK;
}

int si_oc_want_f32(const si_opcheck *c, const si_tensor *t, int64_t ne0, int64_t ne1, const char *op,
                   const char *what, si_err *err)
{
    int rc = want_f32_any(c, t, op, what, err);
    if (rc != SI_OK)
        return rc;
    if (t->ne[0] != ne0 || si_oc_ne(t, 1) != ne1 || si_oc_ne(t, 2) != 1 || si_oc_ne(t, 3) != 1)
        return si_err_set(err, SI_EINVAL, "%s: %s: %s is [%lld, %lld, %lld, %lld], expected [%lld, %lld]", c->name,
                          op, what, (long long)t->ne[0], (long long)si_oc_ne(t, 1), (long long)si_oc_ne(t, 2),
                          (long long)si_oc_ne(t, 3), (long long)ne0, (long long)ne1);
    return SI_OK;
}

static bool same_shape(const si_tensor *a, const si_tensor *b)
{
    for (int i = 0; i < SI_MAX_DIMS; i++)
        if (si_oc_ne(a, i) != si_oc_ne(b, i))
            return false;
    return true;
}

/* An F32 tensor of up to 4 dims; of the shape of `like` unless NULL. */
static int want_f32_nd(const si_opcheck *c, const si_tensor *t, const si_tensor *like, const char *op,
                       const char *what, si_err *err)
{
    int rc = want_f32_any(c, t, op, what, err);
    if (rc != SI_OK)
        return rc;
    if (like != NULL && !same_shape(t, like))
        return si_err_set(err, SI_EINVAL,
                          "%s: %s: %s is [%lld, %lld, %lld, %lld], src[0] is [%lld, %lld, %lld, %lld]", c->name, op,
                          what, (long long)t->ne[0], (long long)si_oc_ne(t, 1), (long long)si_oc_ne(t, 2),
                          (long long)si_oc_ne(t, 3), (long long)like->ne[0], (long long)si_oc_ne(like, 1),
                          (long long)si_oc_ne(like, 2), (long long)si_oc_ne(like, 3));
    return SI_OK;
}

int si_oc_want_weight(const si_opcheck *c, const si_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2,
                      const char *op, const char *what, si_err *err)
{
    if (t == NULL)
        return si_err_set(err, SI_EINVAL, "%s: %s: %s is required", c->name, op, what);
    if (!c->type_ok(t->type))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: %s: %s: type %s (%u) is not supported", c->name, op, what,
                          si_oc_type_name(c, t->type), t->type);
    const char *why = si_oc_tensor_check(c, t);
    if (why != NULL)
        return si_err_set(err, SI_EINVAL, "%s: %s: %s: %s", c->name, op, what, why);
    if (t->ne[0] != ne0 || si_oc_ne(t, 1) != ne1 || si_oc_ne(t, 2) != ne2 || si_oc_ne(t, 3) != 1)
        return si_err_set(err, SI_EINVAL, "%s: %s: %s is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]",
                          c->name, op, what, (long long)t->ne[0], (long long)si_oc_ne(t, 1),
                          (long long)si_oc_ne(t, 2), (long long)si_oc_ne(t, 3), (long long)ne0, (long long)ne1,
                          (long long)ne2);
    return SI_OK;
}

/* ---- MATMUL --------------------------------------------------------------- */

int si_oc_matmul(const si_opcheck *c, const si_op *op, si_err *err)
{
    const si_tensor *w = op->src[0], *x = op->src[1];
    if (w == NULL || x == NULL)
        return si_err_set(err, SI_EINVAL, "%s: MATMUL: src[0] (weight) and src[1] (input) are required", c->name);
    if (!c->type_ok(w->type))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: MATMUL: weight type %s (%u) is not supported", c->name,
                          si_oc_type_name(c, w->type), w->type);
    const char *why = si_oc_tensor_check(c, w);
    if (why != NULL)
        return si_err_set(err, SI_EINVAL, "%s: MATMUL: weight: %s", c->name, why);
    if (si_oc_ne(w, 2) != 1 || si_oc_ne(w, 3) != 1)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: MATMUL: weight must be 2-D (ne2 = %lld)", c->name,
                          (long long)si_oc_ne(w, 2));
    int64_t in = w->ne[0], out = si_oc_ne(w, 1), n = si_oc_ne(x, 1);
    int rc = si_oc_want_f32(c, x, in, n, "MATMUL", "src[1] (input)", err);
    return rc != SI_OK ? rc : si_oc_want_f32(c, &op->dst, out, n, "MATMUL", "dst", err);
}

/* ---- GET_ROWS, RMSNORM, ADD, MUL, SWIGLU ---------------------------------- */

/* I32 ids [n], 1-D; strided (since 1.3: a column of a table, TOPK's best
 * ids) checked as the column they are: [1, n] with that row stride. */
static int ids_column(const si_opcheck *c, const si_tensor *t, const char *op, const char *what, si_err *err)
{
    if (t->type != SI_TYPE_I32)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: %s: %s must be I32, not %s", c->name, op, what,
                          si_oc_type_name(c, t->type));
    if (si_oc_ne(t, 1) != 1 || si_oc_ne(t, 2) != 1 || si_oc_ne(t, 3) != 1)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: %s: %s must be 1-D [n]", c->name, op, what);
    si_tensor col = *t;
    if (t->nb[0] != sizeof(int32_t)) {
        if (t->nb[0] % sizeof(int32_t) != 0 || t->nb[0] == 0)
            return si_err_set(err, SI_EINVAL, "%s: %s: %s stride %llu is not a multiple of 4", c->name, op, what,
                              (unsigned long long)t->nb[0]);
        col.ndim = 2;
        col.ne[0] = 1;
        col.ne[1] = t->ne[0];
        col.nb[0] = sizeof(int32_t);
        col.nb[1] = t->nb[0];
    }
    const char *why = si_oc_tensor_check(c, &col);
    return why == NULL ? SI_OK : si_err_set(err, SI_EINVAL, "%s: %s: %s: %s", c->name, op, what, why);
}

static int get_rows(const si_opcheck *c, const si_op *op, si_err *err)
{
    const si_tensor *s0 = op->src[0], *s1 = op->src[1];
    if (s0 == NULL || s1 == NULL)
        return si_err_set(err, SI_EINVAL, "%s: GET_ROWS: src[0] (table) and src[1] (ids) are required", c->name);
    if (!c->type_ok(s0->type))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: GET_ROWS: table type %s (%u) is not supported", c->name,
                          si_oc_type_name(c, s0->type), s0->type);
    const char *why = si_oc_tensor_check(c, s0);
    if (why != NULL)
        return si_err_set(err, SI_EINVAL, "%s: GET_ROWS: table: %s", c->name, why);
    if (si_oc_ne(s0, 2) != 1 || si_oc_ne(s0, 3) != 1)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: GET_ROWS: table must be 2-D", c->name);
    int rc = ids_column(c, s1, "GET_ROWS", "ids", err);
    if (rc != SI_OK)
        return rc;
    return si_oc_want_f32(c, &op->dst, s0->ne[0], s1->ne[0], "GET_ROWS", "dst", err);
}

int si_oc_elem(const si_opcheck *c, const si_op *op, si_err *err)
{
    if (op->kind == SI_OP_GET_ROWS)
        return get_rows(c, op, err);
    const char *name = si_oc_elem_name(op->kind);
    const si_tensor *s0 = op->src[0], *s1 = op->src[1];
    int rc;
    if ((rc = want_f32_nd(c, s0, NULL, name, "src[0]", err)) != SI_OK)
        return rc;
    if (op->kind == SI_OP_RMSNORM) {
        if ((rc = si_oc_want_f32(c, s1, s0->ne[0], 1, name, "src[1] (weight)", err)) != SI_OK)
            return rc;
        if (!(op->p.norm.eps >= 0.0f) || !isfinite(op->p.norm.eps))
            return si_err_set(err, SI_EINVAL, "%s: RMSNORM: eps %g must be finite and >= 0", c->name,
                              (double)op->p.norm.eps);
    } else if ((rc = want_f32_nd(c, s1, s0, name, "src[1]", err)) != SI_OK) {
        return rc;
    }
    return want_f32_nd(c, &op->dst, s0, name, "dst", err);
}

/* ---- ATTN ----------------------------------------------------------------- */

int si_oc_attn(const si_opcheck *c, const si_op *op, si_err *err)
{
    const si_attn_params *p = &op->p.attn;
    if (p->n_head == 0 || p->n_head_kv == 0 || p->head_dim == 0 || p->n_head % p->n_head_kv != 0)
        return si_err_set(err, SI_EINVAL, "%s: ATTN: n_head %u must be a positive multiple of n_head_kv %u (head_dim %u)",
                          c->name, p->n_head, p->n_head_kv, p->head_dim);
    if (c->max_head_dim > 0 && (p->head_dim > c->max_head_dim || p->n_head > c->max_heads))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: ATTN: head_dim %u > %u or n_head %u > %u", c->name, p->head_dim,
                          c->max_head_dim, p->n_head, c->max_heads);
    if (p->n_rot % 2 != 0 || p->n_rot > p->head_dim)
        return si_err_set(err, SI_EINVAL, "%s: ATTN: n_rot %u must be even and <= head_dim %u", c->name, p->n_rot,
                          p->head_dim);
    if (p->n_rot > 0 && !(p->rope_base > 0.0f && isfinite(p->rope_base)))
        return si_err_set(err, SI_EINVAL, "%s: ATTN: rope_base %g must be > 0", c->name, (double)p->rope_base);
    if (!(p->yarn_factor >= 0.0f) || !isfinite(p->yarn_factor) || (p->yarn_factor > 0.0f && p->yarn_orig_ctx == 0))
        return si_err_set(err, SI_EINVAL, "%s: ATTN: yarn_factor %g needs yarn_orig_ctx > 0 (is %u)", c->name,
                          (double)p->yarn_factor, p->yarn_orig_ctx);
    if (!(p->eps >= 0.0f) || !isfinite(p->eps))
        return si_err_set(err, SI_EINVAL, "%s: ATTN: eps %g must be finite and >= 0", c->name, (double)p->eps);
    if (p->kv == NULL)
        return si_err_set(err, SI_EINVAL, "%s: ATTN: no KV cache", c->name);
    const si_kv_desc *kv = c->kv_desc(p->kv);
    if (kv->n_head_kv != p->n_head_kv || kv->head_dim != p->head_dim || p->kv_layer >= kv->n_layer)
        return si_err_set(err, SI_EINVAL,
                          "%s: ATTN: op wants layer %u, %u kv heads x %u; the cache has %u layers, %u kv heads x %u",
                          c->name, p->kv_layer, p->n_head_kv, p->head_dim, kv->n_layer, kv->n_head_kv, kv->head_dim);
    if (op->src[0] == NULL)
        return si_err_set(err, SI_EINVAL, "%s: ATTN: src[0] (QG) is required", c->name);
    const int64_t n = si_oc_ne(op->src[0], 1), hd = p->head_dim;
    const int64_t q_dim = (int64_t)p->n_head * hd, kv_dim = (int64_t)p->n_head_kv * hd;
    int rc;
    if ((rc = si_oc_want_f32(c, op->src[0], 2 * q_dim, n, "ATTN", "src[0] (QG)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[1], kv_dim, n, "ATTN", "src[1] (K)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[2], kv_dim, n, "ATTN", "src[2] (V)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, &op->dst, q_dim, n, "ATTN", "dst", err)) != SI_OK)
        return rc;
    /* The norms may be absent (a model without q/k norms). */
    if (op->src[3] != NULL && (rc = si_oc_want_f32(c, op->src[3], hd, 1, "ATTN", "src[3] (q_norm)", err)) != SI_OK)
        return rc;
    if (op->src[4] != NULL && (rc = si_oc_want_f32(c, op->src[4], hd, 1, "ATTN", "src[4] (k_norm)", err)) != SI_OK)
        return rc;
    if (n > 0 && (p->pos == NULL || p->seq == NULL))
        return si_err_set(err, SI_EINVAL, "%s: ATTN: pos and seq arrays are required", c->name);
    return SI_OK;
}

/* ---- GDN ------------------------------------------------------------------ */

uint64_t si_oc_gdn_state_bytes(const si_gdn_params *p, int64_t conv_dim)
{
    return ((uint64_t)conv_dim * (p->conv_k - 1) + (uint64_t)p->n_v_head * p->head_v_dim * p->head_k_dim) *
           sizeof(float);
}

int si_oc_gdn_slot(const char *name, const si_gdn_params *p, int64_t t, int32_t s, uint64_t need,
                   uint64_t state_bytes, uint64_t *off, si_err *err)
{
    *off = p->state_offset + (uint64_t)(s < 0 ? 0 : s) * p->state_stride;
    if (s < 0 || (p->state_stride > 0 && (uint64_t)s > (UINT64_MAX - p->state_offset) / p->state_stride) ||
        *off > state_bytes || need > state_bytes - *off)
        return si_err_set(err, SI_ERANGE, "%s: GDN: token %lld: slot %d's state lies outside the %llu-byte state buffer",
                          name, (long long)t, s, (unsigned long long)state_bytes);
    return SI_OK;
}

int si_oc_gdn(const si_opcheck *c, const si_op *op, si_err *err)
{
    const si_gdn_params *p = &op->p.gdn;
    if (p->n_k_head == 0 || p->n_v_head == 0 || p->head_k_dim == 0 || p->head_v_dim == 0 || p->conv_k == 0)
        return si_err_set(err, SI_EINVAL, "%s: GDN: head counts, head dims and conv_k must be > 0", c->name);
    if (p->conv_k > c->max_conv_k)
        return si_err_set(err, SI_EUNSUPPORTED, "%s: GDN: conv_k %u > %u", c->name, p->conv_k, c->max_conv_k);
    if (c->max_head_dim > 0 &&
        (p->head_k_dim > c->max_head_dim || p->head_v_dim > c->max_head_dim || p->n_v_head > c->max_heads))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: GDN: head dims %u/%u > %u or %u v-heads", c->name,
                          p->head_k_dim, p->head_v_dim, c->max_head_dim, p->n_v_head);
    if (!(p->eps >= 0.0f) || !isfinite(p->eps))
        return si_err_set(err, SI_EINVAL, "%s: GDN: eps %g must be finite and >= 0", c->name, (double)p->eps);
    if (op->src[0] == NULL)
        return si_err_set(err, SI_EINVAL, "%s: GDN: src[0] (u) is required", c->name);
    const int64_t n = si_oc_ne(op->src[0], 1), hv = p->n_v_head;
    const int64_t vdim = hv * p->head_v_dim, conv_dim = 2 * (int64_t)p->n_k_head * p->head_k_dim + vdim;
    int rc;
    if ((rc = si_oc_want_f32(c, op->src[0], conv_dim, n, "GDN", "src[0] (u)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[1], vdim, n, "GDN", "src[1] (z)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[2], hv, n, "GDN", "src[2] (b)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[3], hv, n, "GDN", "src[3] (a)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[4], p->conv_k, conv_dim, "GDN", "src[4] (conv taps)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[5], hv, 1, "GDN", "src[5] (ssm_a)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[6], hv, 1, "GDN", "src[6] (dt bias)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, op->src[7], p->head_v_dim, 1, "GDN", "src[7] (ssm_norm)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, &op->dst, vdim, n, "GDN", "dst", err)) != SI_OK)
        return rc;
    const si_buf *st = p->state;
    if (st == NULL || (c->buf_writable != NULL && !c->buf_writable(st)))
        return si_err_set(err, SI_EINVAL, "%s: GDN: state must be a writable backend buffer", c->name);
    uint64_t need = si_oc_gdn_state_bytes(p, conv_dim);
    if (p->state_stride < need && n > 0)
        return si_err_set(err, SI_EINVAL, "%s: GDN: state_stride %llu < %llu bytes per slot", c->name,
                          (unsigned long long)p->state_stride, (unsigned long long)need);
    if (p->state_offset % sizeof(float) != 0 || p->state_stride % sizeof(float) != 0)
        return si_err_set(err, SI_EINVAL, "%s: GDN: state_offset and state_stride must be multiples of 4", c->name);
    if (n > 0 && p->seq == NULL)
        return si_err_set(err, SI_EINVAL, "%s: GDN: the seq array is required", c->name);
    return SI_OK;
}

/* ---- MOE ------------------------------------------------------------------ */

void si_oc_moe_dims_of(const si_op *op, si_oc_moe_dims *d)
{
    d->n = si_oc_ne(op->src[0], 1);
    d->H = op->src[0]->ne[0];
    d->E = op->p.moe.n_expert;
    d->K = op->p.moe.n_used;
    d->fused = op->src[3] == NULL;
    d->F = op->src[2] ? (d->fused ? si_oc_ne(op->src[2], 1) / 2 : si_oc_ne(op->src[2], 1)) : 0;
    d->shared = op->src[5] != NULL;
    d->Fs = d->shared && op->src[6] ? si_oc_ne(op->src[6], 1) : 0;
}

int si_oc_moe(const si_opcheck *c, const si_op *op, si_err *err)
{
    const si_moe_params *p = &op->p.moe;
    if (p->n_expert == 0 || p->n_used == 0 || p->n_used > p->n_expert)
        return si_err_set(err, SI_EINVAL, "%s: MOE: n_used %u must be in 1..n_expert (%u)", c->name, p->n_used,
                          p->n_expert);
    if (op->src[0] == NULL || op->src[2] == NULL)
        return si_err_set(err, SI_EINVAL, "%s: MOE: src[0] (h) and src[2] (gate) are required", c->name);
    si_oc_moe_dims d;
    si_oc_moe_dims_of(op, &d);
    const si_tensor *const *s = op->src;
    int rc;
    if ((rc = si_oc_want_f32(c, s[0], d.H, d.n, "MOE", "src[0] (h)", err)) != SI_OK ||
        (rc = si_oc_want_f32(c, &op->dst, d.H, d.n, "MOE", "dst", err)) != SI_OK ||
        (rc = si_oc_want_weight(c, s[1], d.H, d.E, 1, "MOE", "src[1] (router)", err)) != SI_OK)
        return rc;
    if (d.fused && si_oc_ne(s[2], 1) % 2 != 0)
        return si_err_set(err, SI_EINVAL, "%s: MOE: fused gate_up has an odd row count %lld", c->name,
                          (long long)si_oc_ne(s[2], 1));
    if (d.F <= 0)
        return si_err_set(err, SI_EINVAL, "%s: MOE: expert width is 0", c->name);
    if ((rc = si_oc_want_weight(c, s[2], d.H, d.fused ? 2 * d.F : d.F, d.E, "MOE",
                                d.fused ? "src[2] (gate_up_exps)" : "src[2] (gate_exps)", err)) != SI_OK ||
        (!d.fused && (rc = si_oc_want_weight(c, s[3], d.H, d.F, d.E, "MOE", "src[3] (up_exps)", err)) != SI_OK) ||
        (rc = si_oc_want_weight(c, s[4], d.F, d.H, d.E, "MOE", "src[4] (down_exps)", err)) != SI_OK)
        return rc;
    if (!d.shared) {
        if (s[6] != NULL || s[7] != NULL || s[8] != NULL)
            return si_err_set(err, SI_EUNSUPPORTED, "%s: MOE: shared expert tensors without src[5] (gate_inp_shexp)",
                              c->name);
        return SI_OK;
    }
    if (s[6] == NULL || d.Fs <= 0)
        return si_err_set(err, SI_EINVAL, "%s: MOE: src[6] (gate_shexp) is required with src[5]", c->name);
    if ((rc = si_oc_want_weight(c, s[5], d.H, 1, 1, "MOE", "src[5] (gate_inp_shexp)", err)) != SI_OK ||
        (rc = si_oc_want_weight(c, s[6], d.H, d.Fs, 1, "MOE", "src[6] (gate_shexp)", err)) != SI_OK ||
        (rc = si_oc_want_weight(c, s[7], d.H, d.Fs, 1, "MOE", "src[7] (up_shexp)", err)) != SI_OK ||
        (rc = si_oc_want_weight(c, s[8], d.Fs, d.H, 1, "MOE", "src[8] (down_shexp)", err)) != SI_OK)
        return rc;
    return SI_OK;
}

/* ---- TOPK ------------------------------------------------------------------ */

/* The parameters share the op's union with the others: they must not make
 * it (and si_op) larger than ABI 1.1 had it. */
_Static_assert(sizeof(si_topk_params) <= sizeof(si_attn_params), "si_topk_params grows si_op");

int si_oc_topk(const si_opcheck *c, const si_op *op, si_err *err)
{
    const si_topk_params *p = &op->p.topk;
    const si_tensor *x = op->src[0];
    for (int i = 1; i < SI_OP_MAX_SRC; i++)
        if (op->src[i] != NULL)
            return si_err_set(err, SI_EINVAL, "%s: TOPK: src[%d] must be NULL", c->name, i);
    if (x == NULL)
        return si_err_set(err, SI_EINVAL, "%s: TOPK: src[0] (logits) is NULL", c->name);
    const int64_t V = x->ne[0], n = si_oc_ne(x, 1);
    int rc = si_oc_want_f32(c, x, V, n, "TOPK", "src[0] (logits)", err);
    if (rc != SI_OK)
        return rc;
    if (V < 1 || V > INT32_MAX)
        return si_err_set(err, SI_EINVAL, "%s: TOPK: %lld logits per row", c->name, (long long)V);
    if (p->k < 1 || p->k > SI_TOPK_MAX || (int64_t)p->k > V)
        return si_err_set(err, SI_EINVAL, "%s: TOPK: k %u outside [1, %lld]", c->name, p->k,
                          (long long)(V < SI_TOPK_MAX ? V : SI_TOPK_MAX));
    if ((rc = si_oc_want_f32(c, &op->dst, 2 * (int64_t)p->k, n, "TOPK", "dst", err)) != SI_OK)
        return rc;
    if (p->pen_off == NULL)
        return SI_OK;
    if (p->pen_id == NULL || p->pen_count == NULL)
        return si_err_set(err, SI_EINVAL, "%s: TOPK: pen_off without pen_id / pen_count", c->name);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty) || !isfinite(p->frequency_penalty) ||
        !isfinite(p->presence_penalty))
        return si_err_set(err, SI_EINVAL, "%s: TOPK: penalties %g/%g/%g (repeat must be > 0, all finite)",
                          c->name, (double)p->repeat_penalty, (double)p->frequency_penalty,
                          (double)p->presence_penalty);
    if (p->pen_off[0] < 0)
        return si_err_set(err, SI_EINVAL, "%s: TOPK: pen_off[0] = %d", c->name, p->pen_off[0]);
    for (int64_t r = 0; r < n; r++) {
        if (p->pen_off[r + 1] < p->pen_off[r])
            return si_err_set(err, SI_EINVAL, "%s: TOPK: pen_off decreases at row %lld", c->name, (long long)r);
        for (int32_t j = p->pen_off[r]; j < p->pen_off[r + 1]; j++)
            if (p->pen_id[j] < 0 || p->pen_id[j] >= V || p->pen_count[j] < 0)
                return si_err_set(err, SI_ERANGE, "%s: TOPK: row %lld: penalty id %d (count %d) outside [0, %lld)",
                                  c->name, (long long)r, p->pen_id[j], p->pen_count[j], (long long)V);
    }
    return SI_OK;
}

/* ---- by kind -------------------------------------------------------------- */

int si_oc_check(const si_opcheck *c, const si_op *op, si_err *err)
{
    switch (op->kind) {
    case SI_OP_GET_ROWS:
    case SI_OP_RMSNORM:
    case SI_OP_ADD:
    case SI_OP_MUL:
    case SI_OP_SWIGLU: return si_oc_elem(c, op, err);
    case SI_OP_MATMUL: return si_oc_matmul(c, op, err);
    case SI_OP_ATTN:   return si_oc_attn(c, op, err);
    case SI_OP_GDN:    return si_oc_gdn(c, op, err);
    case SI_OP_MOE:    return si_oc_moe(c, op, err);
    case SI_OP_TOPK:   return si_oc_topk(c, op, err);
    case SI_OP_HOST_IDS: {
        if (op->src[0] != NULL)
            return si_err_set(err, SI_EINVAL, "%s: HOST_IDS takes no src", c->name);
        int rc = ids_column(c, &op->dst, "HOST_IDS", "dst", err);
        if (rc == SI_OK && (op->dst.ne[0] < 1 || op->dst.ne[0] > SI_SUBMIT_MAX_ROWS))
            rc = si_err_set(err, SI_EINVAL, "%s: HOST_IDS: %lld ids (1..%d)", c->name, (long long)op->dst.ne[0],
                            SI_SUBMIT_MAX_ROWS);
        return rc;
    }
    default:
        return si_err_set(err, SI_EUNSUPPORTED, "%s: op kind %u is not supported", c->name, op->kind);
    }
}
