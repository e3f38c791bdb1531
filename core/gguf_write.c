/* core/gguf_write.c — streaming GGUF v3 writer.
 *
 * Metadata is serialised into memory as it is set (it is small next to the
 * weights: a vocabulary is a few MB); tensor infos are kept as a list with
 * their data offsets fixed at declaration.  The header, metadata and infos
 * go to the file when the first data byte is written (or at close), then
 * tensor data is passed straight through to the FILE, so a multi-GB file
 * needs memory only for its metadata.
 *
 * Output layout (llama.cpp's): "GGUF", u32 3, u64 n_tensors, u64 n_kv, KVs,
 * tensor infos, zero padding to the alignment, then each tensor's data
 * followed by zero padding to the alignment.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "gguf_internal.h"
#include "quant.h"

typedef struct wtensor {
    char     *name;
    uint32_t  type;
    uint32_t  ndim;
    uint64_t  ne[SI_MAX_DIMS];
    uint64_t  offset;             /* inside the data section, aligned */
    uint64_t  nbytes;
} wtensor;

struct si_gguf_writer {
    FILE          *f;
    char          *path;
    int            status;        /* first error, sticky */
    char           msg[SI_ERR_MSG_MAX];

    uint8_t       *meta;          /* serialised KVs */
    size_t         meta_len, meta_cap;
    uint64_t       n_kv;
    char         **keys;          /* copies, indexed by `key_index` */
    size_t         keys_cap;
    si_gguf_keyset key_index;

    wtensor       *t;
    size_t         n_t, t_cap;
    si_gguf_keyset name_index;

    uint32_t       alignment;
    uint64_t       data_size;     /* data section size so far, incl. padding */
    bool           started;       /* header written; data flowing          */
    size_t         cur;           /* tensor receiving data                 */
    uint64_t       cur_done;      /* its bytes received so far             */
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int wfail(si_gguf_writer *w, int code, const char *fmt, ...)
{
    if (w->status != SI_OK)
        return w->status;
    char reason[SI_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(w->msg, sizeof w->msg, "%s: %.400s", w->path, reason);
    w->status = code;
    return code;
}

static uint64_t align_up(uint64_t x, uint32_t a) { return x + (a - x % a) % a; }

/* ---- file output ------------------------------------------------------------ */

static int out(si_gguf_writer *w, const void *p, size_t n)
{
    if (n > 0 && fwrite(p, 1, n, w->f) != n)
        return wfail(w, SI_EIO, "write failed: %s", strerror(errno));
    return SI_OK;
}

static int out_zeros(si_gguf_writer *w, uint64_t n)
{
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        int rc = out(w, zeros, k);
        if (rc != SI_OK)
            return rc;
        n -= k;
    }
    return SI_OK;
}

static int out_u32(si_gguf_writer *w, uint32_t v)
{
    uint8_t b[4];
    si_put_le32(b, v);
    return out(w, b, 4);
}

static int out_u64(si_gguf_writer *w, uint64_t v)
{
    uint8_t b[8];
    si_put_le64(b, v);
    return out(w, b, 8);
}

/* Header, metadata, tensor infos and the padding up to the data section. */
static int write_header(si_gguf_writer *w)
{
    w->started = true;
    uint64_t pos = 24 + w->meta_len;
    if (out(w, SI_GGUF_MAGIC, 4) || out_u32(w, 3) || out_u64(w, w->n_t) || out_u64(w, w->n_kv) ||
        out(w, w->meta, w->meta_len))
        return w->status;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        size_t len = strlen(t->name);
        if (out_u64(w, len) || out(w, t->name, len) || out_u32(w, t->ndim))
            return w->status;
        for (uint32_t d = 0; d < t->ndim; d++)
            if (out_u64(w, t->ne[d]))
                return w->status;
        if (out_u32(w, t->type) || out_u64(w, t->offset))
            return w->status;
        pos += 8 + len + 4 + 8 * (uint64_t)t->ndim + 4 + 8;
    }
    return out_zeros(w, align_up(pos, w->alignment) - pos);
}

/* ---- metadata ----------------------------------------------------------------- */

static int meta_put(si_gguf_writer *w, const void *p, size_t n)
{
    if (n > SIZE_MAX - w->meta_len)
        return wfail(w, SI_ENOMEM, "metadata too large");
    if (w->meta_len + n > w->meta_cap) {
        size_t cap = w->meta_cap ? w->meta_cap : 4096;
        while (cap < w->meta_len + n)
            cap = cap > SIZE_MAX / 2 ? w->meta_len + n : cap * 2;
        uint8_t *m = realloc(w->meta, cap);
        if (m == NULL)
            return wfail(w, SI_ENOMEM, "out of memory for metadata (%zu bytes)", cap);
        w->meta = m;
        w->meta_cap = cap;
    }
    if (n > 0)
        memcpy(w->meta + w->meta_len, p, n);
    w->meta_len += n;
    return SI_OK;
}

static int meta_u32(si_gguf_writer *w, uint32_t v)
{
    uint8_t b[4];
    si_put_le32(b, v);
    return meta_put(w, b, 4);
}

static int meta_u64(si_gguf_writer *w, uint64_t v)
{
    uint8_t b[8];
    si_put_le64(b, v);
    return meta_put(w, b, 8);
}

static int meta_str(si_gguf_writer *w, const char *s, uint64_t len)
{
    if (len > SIZE_MAX)
        return wfail(w, SI_ENOMEM, "string too large");
    int rc = meta_u64(w, len);
    return rc ? rc : meta_put(w, s, (size_t)len);
}

/* Checks the key, records it, and serialises the key and the value type.
 * The caller then appends the value. */
static int begin_kv(si_gguf_writer *w, const char *key, uint32_t vtype)
{
    if (w->status != SI_OK)
        return w->status;
    if (w->started)
        return wfail(w, SI_EINVAL, "key '%.100s': metadata set after tensor data was written",
                     key ? key : "(null)");
    if (key == NULL)
        return wfail(w, SI_EINVAL, "NULL key");
    size_t len = strlen(key);
    if (len > SI_GGUF_MAX_NAME)
        return wfail(w, SI_EINVAL, "key '%.60s...': length %zu exceeds %u", key, len,
                     SI_GGUF_MAX_NAME);
    /* The reader insists on this type; refuse to write a file it rejects. */
    if (vtype != SI_GGUF_U32 && strcmp(key, "general.alignment") == 0)
        return wfail(w, SI_EINVAL, "key 'general.alignment': type %s, must be u32",
                     si_gguf_vtype_name(vtype));
    if (w->n_kv == w->keys_cap) {
        size_t cap = w->keys_cap ? w->keys_cap * 2 : 32;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (k == NULL)
            return wfail(w, SI_ENOMEM, "out of memory");
        w->keys = k;
        w->keys_cap = cap;
    }
    char *copy = strdup(key);
    if (copy == NULL)
        return wfail(w, SI_ENOMEM, "out of memory");
    int rc = si_gguf_keyset_add(&w->key_index, copy, len, (size_t)w->n_kv, NULL);
    if (rc != SI_OK) {
        free(copy);
        return rc == SI_EINVAL ? wfail(w, SI_EINVAL, "key '%.100s': duplicate key", key)
                               : wfail(w, SI_ENOMEM, "out of memory");
    }
    w->keys[w->n_kv++] = copy;
    if (meta_str(w, key, len) || meta_u32(w, vtype))
        return w->status;
    return SI_OK;
}

static int set_scalar(si_gguf_writer *w, const char *key, uint32_t vtype, uint64_t bits)
{
    if (w == NULL)
        return SI_EINVAL;
    int rc = begin_kv(w, key, vtype);
    if (rc != SI_OK)
        return rc;
    uint8_t b[8];
    si_put_le64(b, bits);
    return meta_put(w, b, si_gguf_scalar_size(vtype));
}

int si_gguf_writer_set_u8(si_gguf_writer *w, const char *key, uint8_t v)
{
    return set_scalar(w, key, SI_GGUF_U8, v);
}

int si_gguf_writer_set_i8(si_gguf_writer *w, const char *key, int8_t v)
{
    return set_scalar(w, key, SI_GGUF_I8, (uint64_t)(int64_t)v);
}

int si_gguf_writer_set_u16(si_gguf_writer *w, const char *key, uint16_t v)
{
    return set_scalar(w, key, SI_GGUF_U16, v);
}

int si_gguf_writer_set_i16(si_gguf_writer *w, const char *key, int16_t v)
{
    return set_scalar(w, key, SI_GGUF_I16, (uint64_t)(int64_t)v);
}

int si_gguf_writer_set_u32(si_gguf_writer *w, const char *key, uint32_t v)
{
    if (w != NULL && w->status == SI_OK && key != NULL && strcmp(key, "general.alignment") == 0) {
        if (v == 0 || (v & (v - 1)) != 0)
            return wfail(w, SI_EINVAL, "key 'general.alignment': %" PRIu32
                         " is not a nonzero power of two", v);
        if (w->n_t > 0)
            return wfail(w, SI_EINVAL, "key 'general.alignment': must be set before the first"
                         " tensor is declared");
        int rc = set_scalar(w, key, SI_GGUF_U32, v);
        if (rc == SI_OK)
            w->alignment = v;
        return rc;
    }
    return set_scalar(w, key, SI_GGUF_U32, v);
}

int si_gguf_writer_set_i32(si_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, SI_GGUF_I32, (uint64_t)(int64_t)v);
}

int si_gguf_writer_set_u64(si_gguf_writer *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, SI_GGUF_U64, v);
}

int si_gguf_writer_set_i64(si_gguf_writer *w, const char *key, int64_t v)
{
    return set_scalar(w, key, SI_GGUF_I64, (uint64_t)v);
}

int si_gguf_writer_set_f32(si_gguf_writer *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, SI_GGUF_F32, bits);
}

int si_gguf_writer_set_f64(si_gguf_writer *w, const char *key, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, SI_GGUF_F64, bits);
}

int si_gguf_writer_set_bool(si_gguf_writer *w, const char *key, bool v)
{
    return set_scalar(w, key, SI_GGUF_BOOL, v ? 1 : 0);
}

int si_gguf_writer_set_str(si_gguf_writer *w, const char *key, const char *v)
{
    if (w == NULL)
        return SI_EINVAL;
    if (v == NULL)
        return wfail(w, SI_EINVAL, "key '%.100s': NULL string", key ? key : "(null)");
    int rc = set_scalar(w, key, SI_GGUF_STRING, 0);   /* a STRING has no scalar bytes */
    return rc ? rc : meta_str(w, v, strlen(v));
}

int si_gguf_writer_set_arr(si_gguf_writer *w, const char *key, uint32_t elem_type,
                           const void *data, uint64_t n)
{
    if (w == NULL)
        return SI_EINVAL;
    uint32_t esz = si_gguf_scalar_size(elem_type);
    if (w->status == SI_OK && esz == 0)
        return wfail(w, SI_EINVAL, "key '%.100s': array element type %" PRIu32 " (%s) is not a"
                     " numeric type", key ? key : "(null)", elem_type, si_gguf_vtype_name(elem_type));
    if (w->status == SI_OK && data == NULL && n > 0)
        return wfail(w, SI_EINVAL, "key '%.100s': NULL array data", key ? key : "(null)");
    if (w->status == SI_OK && n > SIZE_MAX / esz)
        return wfail(w, SI_ENOMEM, "key '%.100s': array of %" PRIu64 " elements too large",
                     key ? key : "(null)", n);
    if (w->status == SI_OK && elem_type == SI_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return wfail(w, SI_EINVAL, "key '%.100s': bool element %" PRIu64 " is not 0 or 1",
                             key ? key : "(null)", i);
    int rc = begin_kv(w, key, SI_GGUF_ARRAY);
    if (rc || (rc = meta_u32(w, elem_type)) || (rc = meta_u64(w, n)))
        return rc;
    return meta_put(w, data, (size_t)(n * esz));
}

/* Either strs (NUL-terminated) or strn (explicit lengths) is used. */
static int set_arr_strings(si_gguf_writer *w, const char *key, const char *const *strs,
                           const si_str *strn, uint64_t n)
{
    if (w == NULL)
        return SI_EINVAL;
    if (w->status == SI_OK && strs == NULL && strn == NULL && n > 0)
        return wfail(w, SI_EINVAL, "key '%.100s': NULL string array", key ? key : "(null)");
    for (uint64_t i = 0; w->status == SI_OK && i < n; i++)
        if (strs ? strs[i] == NULL : strn[i].ptr == NULL && strn[i].len > 0)
            return wfail(w, SI_EINVAL, "key '%.100s': string %" PRIu64 " is NULL",
                         key ? key : "(null)", i);
    int rc = begin_kv(w, key, SI_GGUF_ARRAY);
    if (rc || (rc = meta_u32(w, SI_GGUF_STRING)) || (rc = meta_u64(w, n)))
        return rc;
    for (uint64_t i = 0; i < n; i++) {
        rc = strs ? meta_str(w, strs[i], strlen(strs[i])) : meta_str(w, strn[i].ptr, strn[i].len);
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}

int si_gguf_writer_set_arr_str(si_gguf_writer *w, const char *key,
                               const char *const *strs, uint64_t n)
{
    return set_arr_strings(w, key, strs, NULL, n);
}

int si_gguf_writer_set_arr_strn(si_gguf_writer *w, const char *key,
                                const si_str *strs, uint64_t n)
{
    return set_arr_strings(w, key, NULL, strs, n);
}

/* ---- tensors ------------------------------------------------------------------ */

int si_gguf_writer_add_tensor(si_gguf_writer *w, const char *name, uint32_t type,
                              uint32_t ndim, const int64_t *ne)
{
    if (w == NULL)
        return SI_EINVAL;
    if (w->status != SI_OK)
        return w->status;
    if (name == NULL)
        return wfail(w, SI_EINVAL, "NULL tensor name");
    const char *n = name;
    if (strlen(name) > SI_GGUF_MAX_NAME)
        return wfail(w, SI_EINVAL, "tensor '%.60s...': name longer than %u bytes", n,
                     SI_GGUF_MAX_NAME);
    if (w->started)
        return wfail(w, SI_EINVAL, "tensor '%.100s': declared after tensor data was written", n);
    const si_type_traits *tt = si_type_get(type);
    if (tt == NULL)
        return wfail(w, SI_EINVAL, "tensor '%.100s': invalid type id %" PRIu32, n, type);
    if (ndim < 1 || ndim > SI_MAX_DIMS || ne == NULL)
        return wfail(w, SI_EINVAL, "tensor '%.100s': %" PRIu32 " dimensions (need 1 to %d)", n,
                     ndim, SI_MAX_DIMS);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (ne[d] < 1)
            return wfail(w, SI_EINVAL, "tensor '%.100s': dimension %" PRIu32 " = %" PRId64
                         " (must be >= 1)", n, d, ne[d]);
        if (nel > (uint64_t)INT64_MAX / (uint64_t)ne[d])
            return wfail(w, SI_EINVAL, "tensor '%.100s': element count overflows", n);
        nel *= (uint64_t)ne[d];
    }
    if ((uint64_t)ne[0] % tt->block_elems != 0)
        return wfail(w, SI_EINVAL, "tensor '%.100s': ne[0] = %" PRId64 " is not a multiple of the"
                     " %s block size %" PRIu32, n, ne[0], tt->name, tt->block_elems);
    uint64_t row = si_type_row_bytes(type, ne[0]), rows = nel / (uint64_t)ne[0];
    if (row == 0 || row > UINT64_MAX / rows)
        return wfail(w, SI_EINVAL, "tensor '%.100s': data size overflows", n);
    uint64_t nbytes = row * rows;
    uint64_t padded = align_up(nbytes, w->alignment);
    if (padded < nbytes || padded > UINT64_MAX - w->data_size)
        return wfail(w, SI_EINVAL, "tensor '%.100s': data section size overflows", n);

    if (w->n_t == w->t_cap) {
        size_t cap = w->t_cap ? w->t_cap * 2 : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (t == NULL)
            return wfail(w, SI_ENOMEM, "out of memory");
        w->t = t;
        w->t_cap = cap;
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return wfail(w, SI_ENOMEM, "out of memory");
    int rc = si_gguf_keyset_add(&w->name_index, copy, strlen(copy), w->n_t, NULL);
    if (rc != SI_OK) {
        free(copy);
        return rc == SI_EINVAL ? wfail(w, SI_EINVAL, "tensor '%.100s': duplicate tensor name", n)
                               : wfail(w, SI_ENOMEM, "out of memory");
    }
    wtensor *t = &w->t[w->n_t++];
    *t = (wtensor){ .name = copy, .type = type, .ndim = ndim, .offset = w->data_size,
                    .nbytes = nbytes };
    for (uint32_t d = 0; d < ndim; d++)
        t->ne[d] = (uint64_t)ne[d];
    w->data_size += padded;
    return SI_OK;
}

int si_gguf_writer_write(si_gguf_writer *w, const void *data, uint64_t n)
{
    if (w == NULL)
        return SI_EINVAL;
    if (w->status != SI_OK)
        return w->status;
    if (data == NULL && n > 0)
        return wfail(w, SI_EINVAL, "NULL tensor data");
    if (!w->started && write_header(w) != SI_OK)
        return w->status;
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur >= w->n_t)
            return wfail(w, SI_EINVAL, "%" PRIu64 " bytes of data beyond the last declared tensor", n);
        wtensor *t = &w->t[w->cur];
        uint64_t k = t->nbytes - w->cur_done;
        if (k > n)
            k = n;
        if (out(w, p, (size_t)k) != SI_OK)
            return w->status;
        p += k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {       /* tensor complete: pad to the next */
            if (out_zeros(w, align_up(t->nbytes, w->alignment) - t->nbytes) != SI_OK)
                return w->status;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return SI_OK;
}

/* ---- open / close ------------------------------------------------------------- */

int si_gguf_writer_open(const char *path, si_gguf_writer **out_w, si_err *err)
{
    if (path == NULL || out_w == NULL)
        return si_err_set(err, SI_EINVAL, "si_gguf_writer_open: NULL argument");
    *out_w = NULL;
    si_gguf_writer *w = calloc(1, sizeof *w);
    if (w == NULL || (w->path = strdup(path)) == NULL) {
        free(w);
        return si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
    }
    w->f = fopen(path, "wb");
    if (w->f == NULL) {
        int rc = si_err_set(err, SI_EIO, "%s: cannot create: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return rc;
    }
    w->alignment = SI_GGUF_DEFAULT_ALIGNMENT;
    *out_w = w;
    return SI_OK;
}

const char *si_gguf_writer_error(const si_gguf_writer *w)
{
    if (w == NULL)
        return "no writer";
    return w->status != SI_OK ? w->msg : "";
}

int si_gguf_writer_close(si_gguf_writer *w, si_err *err)
{
    if (w == NULL)
        return SI_OK;
    if (w->status == SI_OK && !w->started)
        write_header(w);
    if (w->status == SI_OK && w->cur < w->n_t)
        wfail(w, SI_EINVAL, "tensor '%.100s': got %" PRIu64 " of %" PRIu64 " bytes of data",
              w->t[w->cur].name, w->cur_done, w->t[w->cur].nbytes);
    if (fclose(w->f) != 0)
        wfail(w, SI_EIO, "close failed: %s", strerror(errno));
    int rc = w->status;
    if (rc != SI_OK)
        si_err_set(err, rc, "%s", w->msg);
    for (uint64_t i = 0; i < w->n_kv; i++)
        free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->meta);
    si_gguf_keyset_free(&w->key_index);
    si_gguf_keyset_free(&w->name_index);
    free(w->path);
    free(w);
    return rc;
}
