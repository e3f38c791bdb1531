/* backends/cpu/cpu_buf.c — host-memory buffers, zero-copy weights, the KV
 * cache and the tensor sanity checks every op uses.
 *
 * Weights are not copied: weight_load returns a "borrowed" buffer that
 * points at the core's read-only mapping of the GGUF (si_tensor_info.data,
 * valid while the si_gguf lives, which outlives the model).  A borrowed
 * buffer refuses upload (the mapping is read-only) and buf_free releases
 * only the small descriptor.
 */
#include <stdlib.h>

#include "cpu_internal.h"

int cpu_buf_alloc(si_backend *b, uint64_t nbytes, si_buf **out, si_err *err)
{
    (void)b;
    if (nbytes > (uint64_t)SIZE_MAX - CPU_ALIGN)
        return si_err_set(err, SI_ENOMEM, "cpu: buffer of %llu bytes is too large", (unsigned long long)nbytes);
    si_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return si_err_set(err, SI_ENOMEM, "cpu: out of memory");
    buf->data = cpu_aligned_alloc((size_t)nbytes);
    if (buf->data == NULL) {
        free(buf);
        return si_err_set(err, SI_ENOMEM, "cpu: cannot allocate %llu bytes", (unsigned long long)nbytes);
    }
    buf->size = nbytes;
    *out = buf;
    return SI_OK;
}

void cpu_buf_free(si_backend *b, si_buf *buf)
{
    (void)b;
    if (buf == NULL)
        return;
    if (!buf->borrowed)
        free(buf->data);
    free(buf);
}

static int check_range(const si_buf *buf, uint64_t off, uint64_t n, const char *what, si_err *err)
{
    if (buf == NULL)
        return si_err_set(err, SI_EINVAL, "cpu: %s: no buffer", what);
    if (off > buf->size || n > buf->size - off)
        return si_err_set(err, SI_ERANGE, "cpu: %s [%llu, +%llu) outside a %llu-byte buffer", what,
                          (unsigned long long)off, (unsigned long long)n, (unsigned long long)buf->size);
    return SI_OK;
}

int cpu_upload(si_backend *b, si_buf *dst, uint64_t off, const void *src, uint64_t n, si_err *err)
{
    (void)b;
    int rc = check_range(dst, off, n, "upload", err);
    if (rc != SI_OK)
        return rc;
    if (dst->borrowed)
        return si_err_set(err, SI_EINVAL, "cpu: upload into a read-only view of GGUF weight data");
    if (n > 0)
        memcpy(dst->data + off, src, (size_t)n);
    return SI_OK;
}

int cpu_download(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, si_err *err)
{
    (void)b;
    int rc = check_range(src, off, n, "download", err);
    if (rc != SI_OK)
        return rc;
    if (n > 0)
        memcpy(dst, src->data + off, (size_t)n);
    return SI_OK;
}

int cpu_weight_load(si_backend *b, const si_tensor_info *w, si_tensor *out, si_err *err)
{
    if (w == NULL || out == NULL)
        return si_err_set(err, SI_EINVAL, "cpu: weight_load: NULL argument");
    const char *name = w->name != NULL ? w->name : "?";
    if (!cpu_type_supported(w->type))
        return si_err_set(err, SI_EUNSUPPORTED, "cpu: tensor '%s': type %s (%u) is not supported", name,
                          cpu_type_name(b, w->type), w->type);
    if (w->ndim < 1 || w->ndim > SI_MAX_DIMS)
        return si_err_set(err, SI_EINVAL, "cpu: tensor '%s': %u dims", name, w->ndim);
    uint32_t blk = cpu_type_blk(w->type), bytes = cpu_type_blk_bytes(w->type);
    if (w->ne[0] <= 0 || w->ne[0] % blk != 0)
        return si_err_set(err, SI_EINVAL, "cpu: tensor '%s': ne0 = %lld is not a multiple of the %s block (%u)",
                          name, (long long)w->ne[0], cpu_type_name(b, w->type), blk);
    memset(out, 0, sizeof *out);
    out->type = w->type;
    out->ndim = w->ndim;
    out->nb[0] = bytes;
    uint64_t total = (uint64_t)(w->ne[0] / blk) * bytes;
    out->ne[0] = w->ne[0];
    for (int i = 1; i < SI_MAX_DIMS; i++) {
        int64_t ne = (uint32_t)i < w->ndim ? w->ne[i] : 1;
        if (ne <= 0 || total > UINT64_MAX / (uint64_t)ne)
            return si_err_set(err, SI_EINVAL, "cpu: tensor '%s': bad ne%d = %lld", name, i, (long long)ne);
        out->ne[i] = ne;
        out->nb[i] = total;
        total *= (uint64_t)ne;
    }
    if (total != w->nbytes)
        return si_err_set(err, SI_EINVAL, "cpu: tensor '%s': %llu bytes of data, shape needs %llu", name,
                          (unsigned long long)w->nbytes, (unsigned long long)total);
    if (w->data == NULL)
        return si_err_set(err, SI_EINVAL, "cpu: tensor '%s': no data", name);
    si_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return si_err_set(err, SI_ENOMEM, "cpu: out of memory");
    buf->data = (uint8_t *)(uintptr_t)w->data;   /* read-only: never written, see upload */
    buf->size = w->nbytes;
    buf->borrowed = true;
    out->buf = buf;
    out->offset = 0;
    return SI_OK;
}

/* ---- KV cache ----------------------------------------------------------- */

int cpu_kv_create(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err)
{
    if (d == NULL || !SI_HAS_MEMBER(d, si_kv_desc, n_ctx))
        return si_err_set(err, SI_EINVAL, "cpu: kv_create: descriptor missing or too small");
    if (d->n_layer == 0 || d->n_head_kv == 0 || d->head_dim == 0 || d->n_seq == 0 || d->n_ctx == 0)
        return si_err_set(err, SI_EINVAL,
                          "cpu: kv_create: every size must be > 0 (layers %u, kv heads %u, head_dim %u, seqs %u, ctx %u)",
                          d->n_layer, d->n_head_kv, d->head_dim, d->n_seq, d->n_ctx);
    si_kv *kv = calloc(1, sizeof *kv);
    if (kv == NULL)
        return si_err_set(err, SI_ENOMEM, "cpu: out of memory");
    kv->d = *d;
    kv->d.size = sizeof kv->d;
    kv->type = b->kv_type;
    kv->elem = b->kv_type == SI_TYPE_F16 ? 2 : 4;
    /* The product of five u32 fits a double exactly enough to test overflow. */
    double dbytes = (double)d->n_layer * d->n_seq * d->n_ctx * d->n_head_kv * d->head_dim * kv->elem;
    if (dbytes > (double)(SIZE_MAX / 4)) {
        free(kv);
        return si_err_set(err, SI_ENOMEM, "cpu: kv_create: %.0f bytes per K/V is too large", dbytes);
    }
    size_t bytes = (size_t)dbytes;
    kv->k = cpu_aligned_alloc(bytes);
    kv->v = cpu_aligned_alloc(bytes);
    kv->len = calloc((size_t)d->n_layer * d->n_seq, sizeof *kv->len);
    if (kv->k == NULL || kv->v == NULL || kv->len == NULL) {
        cpu_kv_free(b, kv);
        return si_err_set(err, SI_ENOMEM, "cpu: kv_create: cannot allocate 2 x %zu bytes (%u layers, %u seqs, %u ctx)",
                          bytes, d->n_layer, d->n_seq, d->n_ctx);
    }
    b->host->log(b->host, SI_LOG_INFO, CPU_NAME, "KV cache: %u layers x %u seqs x %u ctx, %s, %.1f MiB",
                 d->n_layer, d->n_seq, d->n_ctx, kv->type == SI_TYPE_F16 ? "f16" : "f32",
                 2.0 * (double)bytes / (1024.0 * 1024.0));
    *out = kv;
    return SI_OK;
}

void cpu_kv_free(si_backend *b, si_kv *kv)
{
    (void)b;
    if (kv == NULL)
        return;
    free(kv->k);
    free(kv->v);
    free(kv->len);
    free(kv);
}

int cpu_kv_seq_reset(si_backend *b, si_kv *kv, uint32_t seq, si_err *err)
{
    (void)b;
    if (kv == NULL)
        return si_err_set(err, SI_EINVAL, "cpu: kv_seq_reset: no KV cache");
    if (seq >= kv->d.n_seq)
        return si_err_set(err, SI_ERANGE, "cpu: kv_seq_reset: seq %u >= n_seq %u", seq, kv->d.n_seq);
    for (uint32_t l = 0; l < kv->d.n_layer; l++)
        kv->len[(size_t)l * kv->d.n_seq + seq] = 0;
    return SI_OK;
}

/* ---- tensor checks ------------------------------------------------------ */

/* What the shared op checks (backends/common) need to know of this
 * backend's objects. */
static uint64_t oc_buf_size(const si_buf *buf) { return buf->size; }
static const void *oc_buf_data(const si_buf *buf) { return buf->data; }
static bool oc_buf_writable(const si_buf *buf) { return !buf->borrowed; }
static const si_kv_desc *oc_kv_desc(const si_kv *kv) { return &kv->d; }

void cpu_opcheck_init(si_backend *b)
{
    b->oc = (si_opcheck){
        .name = CPU_NAME, .host = b->host, .type_ok = cpu_type_supported,
        .buf_size = oc_buf_size, .buf_data = oc_buf_data, .buf_writable = oc_buf_writable, .kv_desc = oc_kv_desc,
        .align_half = false, .max_head_dim = 0, .max_heads = 0, .max_conv_k = CPU_CONV_K_MAX,
    };
}

bool cpu_is_f32_rows(const si_tensor *t)
{
    return t->type == SI_TYPE_F32 && t->nb[0] == sizeof(float);
}

int64_t cpu_nrows(const si_tensor *t)
{
    return cpu_ne(t, 1) * cpu_ne(t, 2) * cpu_ne(t, 3);
}

uint64_t cpu_row_off(const si_tensor *t, int64_t r)
{
    int64_t n1 = cpu_ne(t, 1), n2 = cpu_ne(t, 2);
    int64_t i1 = r % n1, i2 = (r / n1) % n2, i3 = r / (n1 * n2);
    uint64_t off = 0;
    if (i1)
        off += (uint64_t)i1 * t->nb[1];
    if (i2)
        off += (uint64_t)i2 * t->nb[2];
    if (i3)
        off += (uint64_t)i3 * t->nb[3];
    return off;
}

