/* core/gguf.c — GGUF v2/v3 reader: maps the file and validates all of it
 * before handing anything out, so the accessors need no further checks.
 *
 * Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 * n_kv × (string key, u32 vtype, value), n_tensors × (string name, u32 n_dims,
 * u64 ne[n_dims], u32 type, u64 offset), padding to general.alignment, data.
 * A string is u64 length + bytes; an array is u32 element vtype + u64 count +
 * elements (which may be strings or, recursively, arrays).
 *
 * Every count and length is compared with the bytes that remain BEFORE it is
 * used or anything is allocated for it, with checks written so that they
 * cannot overflow.  Allocations are at most proportional to the file size.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_internal.h"
#include "quant.h"

#define HEADER_BYTES     24u  /* magic, version, n_tensors, n_kv             */
#define MIN_KV_BYTES     13u  /* key length, value type and a 1-byte value   */
#define MIN_TENSOR_BYTES 32u  /* name length, n_dims, ne[0], type, offset    */
#define MIN_STR_BYTES     8u  /* an empty string: its length field           */
#define MIN_ARR_BYTES    12u  /* an empty array: element type and count      */
#define NAME_SHOW        48   /* bytes of a key or tensor name quoted in messages */

/* Parsed array: what si_gguf_value.v.arr.impl points to. */
typedef struct gg_arr gg_arr;
struct gg_arr {
    uint32_t       type;      /* element vtype                                   */
    uint64_t       n;
    const uint8_t *data;      /* first element, inside the image                 */
    uint64_t      *offs;      /* STRING: offset of element i's length from data  */
    gg_arr        *kids;      /* ARRAY: the n nested arrays                      */
};

typedef struct gg_kv {
    char          *key;       /* NUL-terminated copy */
    size_t         len;
    si_gguf_value  val;
} gg_kv;

struct si_gguf {
    char           *path;     /* as given; used in messages */
    const uint8_t  *base;
    uint64_t        size;
    void           *map;      /* non-NULL when we own an mmap of map_len bytes */
    size_t          map_len;
    uint32_t        version;
    uint32_t        alignment;
    uint64_t        data_offset;
    uint64_t        n_kv;
    gg_kv          *kv;
    uint64_t        n_tensors;
    si_tensor_info *tensors;  /* names are NUL-terminated copies we own */
    si_gguf_keyset  kv_index;
    si_gguf_keyset  t_index;
};

/* ---- hash index (declared in gguf_internal.h) ---------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;           /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static void keyset_put(si_gguf_keyslot *slot, size_t cap, si_gguf_keyslot s)
{
    size_t i = (size_t)hash_bytes(s.key, s.len) & (cap - 1);
    while (slot[i].key != NULL)
        i = (i + 1) & (cap - 1);
    slot[i] = s;
}

static int keyset_grow(si_gguf_keyset *ks)
{
    if (ks->cap > SIZE_MAX / 2 / sizeof(si_gguf_keyslot))
        return SI_ENOMEM;
    size_t ncap = ks->cap ? ks->cap * 2 : 16;
    si_gguf_keyslot *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL)
        return SI_ENOMEM;
    for (size_t i = 0; i < ks->cap; i++)
        if (ks->slot[i].key != NULL)
            keyset_put(ns, ncap, ks->slot[i]);
    free(ks->slot);
    ks->slot = ns;
    ks->cap = ncap;
    return SI_OK;
}

int si_gguf_keyset_add(si_gguf_keyset *ks, const char *key, size_t len, size_t val,
                       size_t *dup)
{
    size_t old;
    if (si_gguf_keyset_find(ks, key, len, &old)) {
        if (dup != NULL)
            *dup = old;
        return SI_EINVAL;
    }
    if ((ks->count + 1) * 2 > ks->cap) {        /* keep the load at most 1/2 */
        int rc = keyset_grow(ks);
        if (rc != SI_OK)
            return rc;
    }
    keyset_put(ks->slot, ks->cap, (si_gguf_keyslot){ key, len, val });
    ks->count++;
    return SI_OK;
}

bool si_gguf_keyset_find(const si_gguf_keyset *ks, const char *key, size_t len, size_t *val)
{
    if (ks->cap == 0)
        return false;
    size_t i = (size_t)hash_bytes(key, len) & (ks->cap - 1);
    while (ks->slot[i].key != NULL) {
        if (ks->slot[i].len == len && memcmp(ks->slot[i].key, key, len) == 0) {
            *val = ks->slot[i].val;
            return true;
        }
        i = (i + 1) & (ks->cap - 1);
    }
    return false;
}

void si_gguf_keyset_free(si_gguf_keyset *ks)
{
    free(ks->slot);
    ks->slot = NULL;
    ks->cap = ks->count = 0;
}

/* ---- the cursor and its error messages ----------------------------------- */

typedef struct rd {
    const uint8_t *p;
    uint64_t       size;
    uint64_t       pos;
    const char    *name;      /* file name for messages */
    si_err        *err;
    char           item[128]; /* what is being parsed, e.g. "key #5 'general.name'" */
} rd;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(rd *r, int code, const char *fmt, ...)
{
    if (r->err == NULL)
        return code;
    char reason[SI_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (r->item[0] != '\0')
        si_err_set(r->err, code, "%s: %s: %.300s", r->name, r->item, reason);
    else
        si_err_set(r->err, code, "%s: %.400s", r->name, reason);
    return code;
}

/* Names come from the file: show at most NAME_SHOW bytes, control bytes as
 * '?', so a message stays one readable line.  q holds NAME_SHOW + 4 bytes. */
static void quote(char *q, const char *s, size_t len)
{
    size_t n = len < NAME_SHOW ? len : NAME_SHOW;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        q[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (len > NAME_SHOW)
        memcpy(q + n, "...", 4);
    else
        q[n] = '\0';
}

/* idx UINT64_MAX: no index in the item. */
static void set_item(rd *r, const char *kind, uint64_t idx, const char *s, size_t len)
{
    char q[NAME_SHOW + 4];
    quote(q, s, len);
    if (idx == UINT64_MAX)
        snprintf(r->item, sizeof r->item, "%s '%s'", kind, q);
    else
        snprintf(r->item, sizeof r->item, "%s #%" PRIu64 " '%s'", kind, idx, q);
}

static uint64_t remaining(const rd *r) { return r->size - r->pos; }

static int need(rd *r, uint64_t n, const char *what)
{
    uint64_t have = remaining(r);
    if (have >= n)
        return SI_OK;
    return fail(r, SI_EFORMAT, "offset %" PRIu64 ": truncated %s (need %" PRIu64
                " bytes, have %" PRIu64 ")", r->pos, what, n, have);
}

static int rd_u32(rd *r, const char *what, uint32_t *v)
{
    int rc = need(r, 4, what);
    if (rc == SI_OK) {
        *v = si_le32(r->p + r->pos);
        r->pos += 4;
    }
    return rc;
}

static int rd_u64(rd *r, const char *what, uint64_t *v)
{
    int rc = need(r, 8, what);
    if (rc == SI_OK) {
        *v = si_le64(r->p + r->pos);
        r->pos += 8;
    }
    return rc;
}

/* A length-prefixed string, checked against the bytes that remain. */
static int rd_str(rd *r, const char *what, const uint8_t **ptr, uint64_t *len)
{
    char lw[48];
    snprintf(lw, sizeof lw, "%s length", what);
    int rc = rd_u64(r, lw, len);
    if (rc != SI_OK)
        return rc;
    if (*len > remaining(r))
        return fail(r, SI_EFORMAT, "%s length %" PRIu64 " exceeds remaining %" PRIu64 " bytes",
                    what, *len, remaining(r));
    *ptr = r->p + r->pos;
    r->pos += *len;
    return SI_OK;
}

/* A key or tensor name: bounded length, no NUL inside, copied with a NUL. */
static int rd_name(rd *r, const char *what, char **out, size_t *out_len)
{
    const uint8_t *s;
    uint64_t len;
    int rc = rd_str(r, what, &s, &len);
    if (rc != SI_OK)
        return rc;
    if (len > SI_GGUF_MAX_NAME)
        return fail(r, SI_EFORMAT, "%s length %" PRIu64 " exceeds the limit of %u bytes",
                    what, len, SI_GGUF_MAX_NAME);
    if (len > 0 && memchr(s, 0, (size_t)len) != NULL)
        return fail(r, SI_EFORMAT, "%s contains a NUL byte", what);
    char *c = malloc((size_t)len + 1);
    if (c == NULL)
        return fail(r, SI_ENOMEM, "out of memory");
    if (len > 0)
        memcpy(c, s, (size_t)len);
    c[len] = '\0';
    *out = c;
    *out_len = (size_t)len;
    return SI_OK;
}

/* ---- values ---------------------------------------------------------------- */

static void decode_scalar(uint32_t type, const uint8_t *b, si_gguf_value *v)
{
    uint32_t u32;
    uint64_t u64;
    float f;
    double d;

    v->type = type;
    switch (type) {
    case SI_GGUF_U8:   v->v.u = b[0]; break;
    case SI_GGUF_BOOL: v->v.u = b[0]; break;
    case SI_GGUF_I8:   v->v.i = (int8_t)b[0]; break;
    case SI_GGUF_U16:  v->v.u = si_le16(b); break;
    case SI_GGUF_I16:  v->v.i = (int16_t)si_le16(b); break;
    case SI_GGUF_U32:  v->v.u = si_le32(b); break;
    case SI_GGUF_I32:  v->v.i = (int32_t)si_le32(b); break;
    case SI_GGUF_U64:  v->v.u = si_le64(b); break;
    case SI_GGUF_I64:  v->v.i = (int64_t)si_le64(b); break;
    case SI_GGUF_F32:
        u32 = si_le32(b);
        memcpy(&f, &u32, sizeof f);
        v->v.f = f;
        break;
    case SI_GGUF_F64:
        u64 = si_le64(b);
        memcpy(&d, &u64, sizeof d);
        v->v.f = d;
        break;
    default:
        break;
    }
}

static void arr_value(const gg_arr *a, si_gguf_value *v)
{
    v->type = SI_GGUF_ARRAY;
    v->v.arr.type = a->type;
    v->v.arr.n = a->n;
    v->v.arr.data = si_gguf_scalar_size(a->type) ? a->data : NULL;
    v->v.arr.impl = a;
}

static void free_arr(gg_arr *a)
{
    if (a == NULL)
        return;
    if (a->kids != NULL) {
        for (uint64_t i = 0; i < a->n; i++)
            free_arr(&a->kids[i]);
        free(a->kids);
    }
    free(a->offs);
}

static int parse_array(rd *r, gg_arr *a, int depth)
{
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(r, "array element type", &et);
    if (rc != SI_OK)
        return rc;
    if (et >= SI_GGUF_VTYPE_COUNT)
        return fail(r, SI_EFORMAT, "array element type %" PRIu32 " is invalid", et);
    if (et == SI_GGUF_ARRAY && depth >= SI_GGUF_MAX_DEPTH)
        return fail(r, SI_EFORMAT, "arrays nested deeper than %d levels", SI_GGUF_MAX_DEPTH);
    if ((rc = rd_u64(r, "array count", &n)) != SI_OK)
        return rc;

    uint32_t esz = si_gguf_scalar_size(et);
    uint64_t min = esz ? esz : et == SI_GGUF_STRING ? MIN_STR_BYTES : MIN_ARR_BYTES;
    if (n > remaining(r) / min)
        return fail(r, SI_EFORMAT, "array count %" PRIu64 " of %s exceeds remaining %" PRIu64
                    " bytes (at least %" PRIu64 " per element)", n,
                    si_gguf_vtype_name(et), remaining(r), min);
    a->type = et;
    a->n = n;
    a->data = r->p + r->pos;

    if (esz != 0) {
        if (et == SI_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (a->data[i] > 1)
                    return fail(r, SI_EFORMAT, "array element %" PRIu64 ": bool value %u is not 0 or 1",
                                i, a->data[i]);
        r->pos += n * esz;
        return SI_OK;
    }
    if (n == 0)
        return SI_OK;
    /* n <= remaining / min, so these allocations are bounded by the file size. */
    if (et == SI_GGUF_STRING) {
        a->offs = malloc((size_t)n * sizeof *a->offs);
        if (a->offs == NULL)
            return fail(r, SI_ENOMEM, "out of memory for %" PRIu64 " strings", n);
        /* The hot loop of a vocabulary (150k+ strings): no formatting here. */
        uint64_t start = r->pos;
        for (uint64_t i = 0; i < n; i++) {
            a->offs[i] = r->pos - start;
            if (remaining(r) < 8)
                return fail(r, SI_EFORMAT, "array element %" PRIu64 ": offset %" PRIu64
                            ": truncated string length (need 8 bytes, have %" PRIu64 ")",
                            i, r->pos, remaining(r));
            uint64_t len = si_le64(r->p + r->pos);
            r->pos += 8;
            if (len > remaining(r))
                return fail(r, SI_EFORMAT, "array element %" PRIu64 ": string length %" PRIu64
                            " exceeds remaining %" PRIu64 " bytes", i, len, remaining(r));
            r->pos += len;
        }
        return SI_OK;
    }
    a->kids = calloc((size_t)n, sizeof *a->kids);   /* zeroed: free_arr-safe */
    if (a->kids == NULL)
        return fail(r, SI_ENOMEM, "out of memory for %" PRIu64 " nested arrays", n);
    for (uint64_t i = 0; i < n; i++)
        if ((rc = parse_array(r, &a->kids[i], depth + 1)) != SI_OK)
            return rc;
    return SI_OK;
}

static int parse_value(rd *r, uint32_t type, si_gguf_value *v)
{
    v->type = type;
    if (type == SI_GGUF_STRING) {
        const uint8_t *s;
        uint64_t len;
        int rc = rd_str(r, "string", &s, &len);
        v->v.s.ptr = (const char *)s;
        v->v.s.len = len;
        return rc;
    }
    if (type == SI_GGUF_ARRAY) {
        gg_arr *a = calloc(1, sizeof *a);
        if (a == NULL)
            return fail(r, SI_ENOMEM, "out of memory");
        v->v.arr.impl = a;                 /* owned from here, even on failure */
        int rc = parse_array(r, a, 1);
        arr_value(a, v);
        return rc;
    }
    int rc = need(r, si_gguf_scalar_size(type), "value");
    if (rc != SI_OK)
        return rc;
    decode_scalar(type, r->p + r->pos, v);
    r->pos += si_gguf_scalar_size(type);
    if (type == SI_GGUF_BOOL && v->v.u > 1)
        return fail(r, SI_EFORMAT, "bool value %" PRIu64 " is not 0 or 1", v->v.u);
    return SI_OK;
}

/* ---- sections ---------------------------------------------------------- */

static int parse_header(rd *r, si_gguf *g)
{
    if (r->size < 8 || memcmp(r->p, SI_GGUF_MAGIC, 4) != 0) {
        if (r->size < 4 || memcmp(r->p, SI_GGUF_MAGIC, 4) == 0)
            return fail(r, SI_EFORMAT, "offset 0: truncated header (need %u bytes, have %" PRIu64 ")",
                        HEADER_BYTES, r->size);
        char m[5];
        for (int i = 0; i < 4; i++)
            m[i] = (r->p[i] >= 0x20 && r->p[i] < 0x7f) ? (char)r->p[i] : '?';
        m[4] = '\0';
        return fail(r, SI_EFORMAT, "not a GGUF file (magic '%s', expected 'GGUF')", m);
    }
    uint32_t v = si_le32(r->p + 4);
    uint32_t swapped = (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
    if (v == 1)
        return fail(r, SI_EUNSUPPORTED, "GGUF version 1 is not supported (need version 2 or 3)");
    if (v != 2 && v != 3) {
        if (v != 0 && (v & 0xffffu) == 0)
            return fail(r, SI_EUNSUPPORTED, "big-endian GGUF is not supported (version field reads"
                        " 0x%08" PRIx32 ", i.e. version %" PRIu32 " byte-swapped)", v, swapped);
        if (v == 0)
            return fail(r, SI_EFORMAT, "invalid GGUF version 0");
        return fail(r, SI_EUNSUPPORTED, "unsupported GGUF version %" PRIu32 " (need 2 or 3)", v);
    }
    g->version = v;
    if (r->size < HEADER_BYTES)
        return fail(r, SI_EFORMAT, "offset 0: truncated header (need %u bytes, have %" PRIu64 ")",
                    HEADER_BYTES, r->size);
    g->n_tensors = si_le64(r->p + 8);
    g->n_kv = si_le64(r->p + 16);
    r->pos = HEADER_BYTES;

    /* Bound both counts by what the rest of the file could hold before any
     * allocation depends on them. */
    uint64_t rem = remaining(r);
    if (g->n_kv > rem / MIN_KV_BYTES)
        return fail(r, SI_EFORMAT, "header: key count %" PRIu64 " exceeds what the remaining %"
                    PRIu64 " bytes can hold (at least %u bytes per key)", g->n_kv, rem, MIN_KV_BYTES);
    if (g->n_tensors > rem / MIN_TENSOR_BYTES)
        return fail(r, SI_EFORMAT, "header: tensor count %" PRIu64 " exceeds what the remaining %"
                    PRIu64 " bytes can hold (at least %u bytes per tensor)", g->n_tensors, rem,
                    MIN_TENSOR_BYTES);
    if (g->n_kv * MIN_KV_BYTES + g->n_tensors * MIN_TENSOR_BYTES > rem)
        return fail(r, SI_EFORMAT, "header: %" PRIu64 " keys and %" PRIu64 " tensors cannot fit in"
                    " the remaining %" PRIu64 " bytes", g->n_kv, g->n_tensors, rem);
    return SI_OK;
}

static int parse_kvs(rd *r, si_gguf *g)
{
    if (g->n_kv == 0)
        return SI_OK;
    g->kv = calloc((size_t)g->n_kv, sizeof *g->kv);   /* n_kv bounded by the file size */
    if (g->kv == NULL)
        return fail(r, SI_ENOMEM, "out of memory for %" PRIu64 " keys", g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gg_kv *kv = &g->kv[i];
        snprintf(r->item, sizeof r->item, "key #%" PRIu64, i);
        int rc = rd_name(r, "key", &kv->key, &kv->len);
        if (rc != SI_OK)
            return rc;
        set_item(r, "key", i, kv->key, kv->len);
        size_t dup;
        rc = si_gguf_keyset_add(&g->kv_index, kv->key, kv->len, (size_t)i, &dup);
        if (rc == SI_EINVAL)
            return fail(r, SI_EFORMAT, "duplicate key (first at key #%zu)", dup);
        if (rc != SI_OK)
            return fail(r, SI_ENOMEM, "out of memory");
        uint32_t type;
        if ((rc = rd_u32(r, "value type", &type)) != SI_OK)
            return rc;
        if (type >= SI_GGUF_VTYPE_COUNT)
            return fail(r, SI_EFORMAT, "value type %" PRIu32 " is invalid", type);
        if ((rc = parse_value(r, type, &kv->val)) != SI_OK)
            return rc;
    }
    r->item[0] = '\0';
    return SI_OK;
}

static int parse_alignment(rd *r, si_gguf *g)
{
    g->alignment = SI_GGUF_DEFAULT_ALIGNMENT;
    const si_gguf_value *v = si_gguf_get(g, "general.alignment");
    if (v == NULL)
        return SI_OK;
    snprintf(r->item, sizeof r->item, "key 'general.alignment'");
    if (v->type != SI_GGUF_U32)
        return fail(r, SI_EFORMAT, "type %s, expected u32", si_gguf_vtype_name(v->type));
    if (v->v.u == 0 || (v->v.u & (v->v.u - 1)) != 0)
        return fail(r, SI_EFORMAT, "alignment %" PRIu64 " is not a nonzero power of two", v->v.u);
    g->alignment = (uint32_t)v->v.u;
    r->item[0] = '\0';
    return SI_OK;
}

static int parse_tensor_info(rd *r, si_gguf *g, uint64_t i)
{
    si_tensor_info *t = &g->tensors[i];
    char *name;
    size_t len;
    snprintf(r->item, sizeof r->item, "tensor #%" PRIu64, i);
    int rc = rd_name(r, "tensor name", &name, &len);
    if (rc != SI_OK)
        return rc;
    t->name = name;
    set_item(r, "tensor", i, name, len);
    size_t dup;
    rc = si_gguf_keyset_add(&g->t_index, name, len, (size_t)i, &dup);
    if (rc == SI_EINVAL)
        return fail(r, SI_EFORMAT, "duplicate tensor name (first at tensor #%zu)", dup);
    if (rc != SI_OK)
        return fail(r, SI_ENOMEM, "out of memory");

    uint32_t nd;
    if ((rc = rd_u32(r, "dimension count", &nd)) != SI_OK)
        return rc;
    if (nd < 1 || nd > SI_MAX_DIMS)
        return fail(r, SI_EFORMAT, "%" PRIu32 " dimensions (need 1 to %d)", nd, SI_MAX_DIMS);
    t->ndim = nd;
    for (int d = 0; d < SI_MAX_DIMS; d++)
        t->ne[d] = 1;
    uint64_t nel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if ((rc = rd_u64(r, "dimension", &ne)) != SI_OK)
            return rc;
        if (ne == 0)
            return fail(r, SI_EFORMAT, "dimension %" PRIu32 " is zero", d);
        if (ne > (uint64_t)INT64_MAX)
            return fail(r, SI_EFORMAT, "dimension %" PRIu32 " = %" PRIu64 " exceeds 2^63-1", d, ne);
        if (nel > (uint64_t)INT64_MAX / ne)
            return fail(r, SI_EFORMAT, "element count overflows at dimension %" PRIu32
                        " = %" PRIu64, d, ne);
        nel *= ne;
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if ((rc = rd_u32(r, "tensor type", &type)) != SI_OK)
        return rc;
    const si_type_traits *tt = si_type_get(type);
    if (tt == NULL)
        return fail(r, SI_EFORMAT, "invalid type id %" PRIu32, type);
    t->type = type;
    if ((uint64_t)t->ne[0] % tt->block_elems != 0)
        return fail(r, SI_EFORMAT, "ne[0] = %" PRId64 " is not a multiple of the %s block size %"
                    PRIu32, t->ne[0], tt->name, tt->block_elems);
    uint64_t row = si_type_row_bytes(type, t->ne[0]);
    uint64_t rows = nel / (uint64_t)t->ne[0];
    if (row == 0 || row > UINT64_MAX / rows)
        return fail(r, SI_EFORMAT, "data size of %" PRIu64 " %s elements overflows", nel, tt->name);
    t->nbytes = row * rows;
    if ((rc = rd_u64(r, "data offset", &t->offset)) != SI_OK)
        return rc;
    if (t->offset % g->alignment != 0)
        return fail(r, SI_EFORMAT, "data offset %" PRIu64 " is not a multiple of the alignment %"
                    PRIu32, t->offset, g->alignment);
    return SI_OK;
}

typedef struct span {
    uint64_t off, end;
    size_t   idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

static int place_tensors(rd *r, si_gguf *g)
{
    uint64_t avail = g->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        si_tensor_info *t = &g->tensors[i];
        if (t->offset <= avail && t->nbytes <= avail - t->offset)
            continue;
        set_item(r, "tensor", UINT64_MAX, t->name, strlen(t->name));
        if (t->offset <= UINT64_MAX - g->data_offset &&
            t->nbytes <= UINT64_MAX - g->data_offset - t->offset)
            return fail(r, SI_EFORMAT, "data [%" PRIu64 ", %" PRIu64 ") beyond end of file (size %"
                        PRIu64 ")", g->data_offset + t->offset,
                        g->data_offset + t->offset + t->nbytes, g->size);
        return fail(r, SI_EFORMAT, "data offset %" PRIu64 " + %" PRIu64 " bytes beyond end of file"
                    " (size %" PRIu64 ")", t->offset, t->nbytes, g->size);
    }
    if (g->n_tensors == 0)
        return SI_OK;

    /* Sorted by offset, each tensor must end before the next one starts. */
    span *s = malloc((size_t)g->n_tensors * sizeof *s);
    if (s == NULL)
        return fail(r, SI_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        s[i] = (span){ g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].nbytes, (size_t)i };
    qsort(s, (size_t)g->n_tensors, sizeof *s, span_cmp);
    for (uint64_t k = 1; k < g->n_tensors; k++) {
        if (s[k].off >= s[k - 1].end)
            continue;
        const si_tensor_info *a = &g->tensors[s[k - 1].idx], *b = &g->tensors[s[k].idx];
        set_item(r, "tensor", UINT64_MAX, b->name, strlen(b->name));
        char other[NAME_SHOW + 4];
        quote(other, a->name, strlen(a->name));
        int rc = fail(r, SI_EFORMAT, "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' data [%"
                      PRIu64 ", %" PRIu64 ")", g->data_offset + s[k].off, g->data_offset + s[k].end,
                      other, g->data_offset + s[k - 1].off, g->data_offset + s[k - 1].end);
        free(s);
        return rc;
    }
    free(s);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        g->tensors[i].data = g->base + g->data_offset + g->tensors[i].offset;
    return SI_OK;
}

static int parse(rd *r, si_gguf *g)
{
    int rc;
    if ((rc = parse_header(r, g)) != SI_OK || (rc = parse_kvs(r, g)) != SI_OK ||
        (rc = parse_alignment(r, g)) != SI_OK)
        return rc;

    if (g->n_tensors > 0) {
        if (g->n_tensors > remaining(r) / MIN_TENSOR_BYTES)
            return fail(r, SI_EFORMAT, "offset %" PRIu64 ": %" PRIu64 " tensor infos cannot fit in"
                        " the remaining %" PRIu64 " bytes", r->pos, g->n_tensors, remaining(r));
        g->tensors = calloc((size_t)g->n_tensors, sizeof *g->tensors);
        if (g->tensors == NULL)
            return fail(r, SI_ENOMEM, "out of memory for %" PRIu64 " tensors", g->n_tensors);
        for (uint64_t i = 0; i < g->n_tensors; i++)
            if ((rc = parse_tensor_info(r, g, i)) != SI_OK)
                return rc;
        r->item[0] = '\0';
    }

    /* The data section starts at the end of the tensor infos rounded up to
     * the alignment.  Files without tensors (vocabularies) may stop right
     * after the metadata, without that padding. */
    uint64_t pad = (g->alignment - r->pos % g->alignment) % g->alignment;
    if (pad > remaining(r)) {
        if (g->n_tensors > 0)
            return fail(r, SI_EFORMAT, "offset %" PRIu64 ": truncated padding before the data"
                        " section (need %" PRIu64 " bytes, have %" PRIu64 ")", r->pos, pad,
                        remaining(r));
        pad = remaining(r);
    }
    g->data_offset = r->pos + pad;
    return place_tensors(r, g);
}

/* ---- open / close ---------------------------------------------------------- */

/* Takes ownership of `map` (may be NULL), also on failure. */
static int open_image(const uint8_t *p, uint64_t size, const char *name, void *map,
                      size_t map_len, si_gguf **out, si_err *err)
{
    si_gguf *g = calloc(1, sizeof *g);
    char *path = strdup(name);
    if (g == NULL || path == NULL) {
        free(g);
        free(path);
        if (map != NULL)
            munmap(map, map_len);
        return si_err_set(err, SI_ENOMEM, "%s: out of memory", name);
    }
    g->path = path;
    g->base = p;
    g->size = size;
    g->map = map;
    g->map_len = map_len;
    rd r = { .p = p, .size = size, .pos = 0, .name = g->path, .err = err, .item = "" };
    int rc = parse(&r, g);
    if (rc != SI_OK) {
        si_gguf_close(g);
        return rc;
    }
    *out = g;
    return SI_OK;
}

int si_gguf_open_memory(const void *data, size_t size, const char *name, si_gguf **out,
                        si_err *err)
{
    static const uint8_t empty[1];
    if (out == NULL)
        return si_err_set(err, SI_EINVAL, "si_gguf_open_memory: NULL output");
    *out = NULL;
    if (name == NULL)
        name = "<memory>";
    if (data == NULL && size > 0)
        return si_err_set(err, SI_EINVAL, "%s: NULL data", name);
    return open_image(data ? data : empty, size, name, NULL, 0, out, err);
}

int si_gguf_open(const char *path, si_gguf **out, si_err *err)
{
    static const uint8_t empty[1];
    if (out == NULL || path == NULL)
        return si_err_set(err, SI_EINVAL, "si_gguf_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return si_err_set(err, SI_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return si_err_set(err, SI_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return si_err_set(err, SI_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return si_err_set(err, SI_EUNSUPPORTED, "%s: file too large to map (%" PRIu64 " bytes)",
                          path, (uint64_t)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {                    /* mmap refuses length 0; parse says "truncated" */
        close(fd);
        return open_image(empty, 0, path, NULL, 0, out, err);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return si_err_set(err, SI_EIO, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    return open_image(map, size, path, map, size, out, err);
}

void si_gguf_close(si_gguf *g)
{
    if (g == NULL)
        return;
    if (g->kv != NULL) {
        for (uint64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            if (g->kv[i].val.type == SI_GGUF_ARRAY && g->kv[i].val.v.arr.impl != NULL) {
                gg_arr *a = (gg_arr *)g->kv[i].val.v.arr.impl;
                free_arr(a);
                free(a);
            }
        }
        free(g->kv);
    }
    if (g->tensors != NULL) {
        for (uint64_t i = 0; i < g->n_tensors; i++)
            free((char *)g->tensors[i].name);
        free(g->tensors);
    }
    si_gguf_keyset_free(&g->kv_index);
    si_gguf_keyset_free(&g->t_index);
    if (g->map != NULL)
        munmap(g->map, g->map_len);
    free(g->path);
    free(g);
}

/* ---- accessors ------------------------------------------------------------- */

const char *si_gguf_path(const si_gguf *g)       { return g ? g->path : NULL; }
uint32_t    si_gguf_version(const si_gguf *g)    { return g ? g->version : 0; }
uint32_t    si_gguf_alignment(const si_gguf *g)  { return g ? g->alignment : 0; }
uint64_t    si_gguf_file_size(const si_gguf *g)  { return g ? g->size : 0; }
uint64_t    si_gguf_data_offset(const si_gguf *g){ return g ? g->data_offset : 0; }
uint64_t    si_gguf_n_kv(const si_gguf *g)       { return g ? g->n_kv : 0; }
uint64_t    si_gguf_n_tensors(const si_gguf *g)  { return g ? g->n_tensors : 0; }

const char *si_gguf_kv_key(const si_gguf *g, uint64_t i)
{
    return g != NULL && i < g->n_kv ? g->kv[i].key : NULL;
}

const si_gguf_value *si_gguf_kv_value(const si_gguf *g, uint64_t i)
{
    return g != NULL && i < g->n_kv ? &g->kv[i].val : NULL;
}

const si_gguf_value *si_gguf_get(const si_gguf *g, const char *key)
{
    size_t i;
    if (g == NULL || key == NULL || !si_gguf_keyset_find(&g->kv_index, key, strlen(key), &i))
        return NULL;
    return &g->kv[i].val;
}

int si_gguf_arr_get(const si_gguf_value *arr, uint64_t i, si_gguf_value *out)
{
    if (arr == NULL || out == NULL || arr->type != SI_GGUF_ARRAY || arr->v.arr.impl == NULL)
        return SI_EINVAL;
    const gg_arr *a = arr->v.arr.impl;     /* trust the parsed node, not the copy */
    if (i >= a->n)
        return SI_ERANGE;
    memset(out, 0, sizeof *out);
    if (a->type == SI_GGUF_STRING) {
        const uint8_t *b = a->data + a->offs[i];
        out->type = SI_GGUF_STRING;
        out->v.s.len = si_le64(b);
        out->v.s.ptr = (const char *)b + 8;
    } else if (a->type == SI_GGUF_ARRAY) {
        arr_value(&a->kids[i], out);
    } else {
        decode_scalar(a->type, a->data + i * si_gguf_scalar_size(a->type), out);
    }
    return SI_OK;
}

const si_tensor_info *si_gguf_tensor_at(const si_gguf *g, uint64_t i)
{
    return g != NULL && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const si_tensor_info *si_gguf_tensor(const si_gguf *g, const char *name)
{
    size_t i;
    if (g == NULL || name == NULL || !si_gguf_keyset_find(&g->t_index, name, strlen(name), &i))
        return NULL;
    return &g->tensors[i];
}

const char *si_gguf_vtype_name(uint32_t vtype)
{
    static const char *const names[SI_GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
        "u64", "i64", "f64",
    };
    return vtype < SI_GGUF_VTYPE_COUNT ? names[vtype] : "invalid";
}

/* ---- typed getters ----------------------------------------------------------- */

static const si_gguf_value *lookup(const si_gguf *g, const char *key, si_err *err, int *rc)
{
    if (g == NULL || key == NULL) {
        *rc = si_err_set(err, SI_EINVAL, "si_gguf_get: NULL argument");
        return NULL;
    }
    const si_gguf_value *v = si_gguf_get(g, key);
    *rc = v ? SI_OK : si_err_set(err, SI_ENOTFOUND, "%s: key '%s' not found", g->path, key);
    return v;
}

static bool is_unsigned(uint32_t t)
{
    return t == SI_GGUF_U8 || t == SI_GGUF_U16 || t == SI_GGUF_U32 || t == SI_GGUF_U64;
}

static bool is_signed(uint32_t t)
{
    return t == SI_GGUF_I8 || t == SI_GGUF_I16 || t == SI_GGUF_I32 || t == SI_GGUF_I64;
}

int si_gguf_get_u32(const si_gguf *g, const char *key, uint32_t *out, si_err *err)
{
    int rc;
    const si_gguf_value *v = lookup(g, key, err, &rc);
    if (v == NULL)
        return rc;
    if (is_unsigned(v->type)) {
        if (v->v.u > UINT32_MAX)
            return si_err_set(err, SI_EFORMAT, "%s: key '%s': value %" PRIu64 " does not fit in u32",
                              g->path, key, v->v.u);
        *out = (uint32_t)v->v.u;
        return SI_OK;
    }
    if (is_signed(v->type)) {
        if (v->v.i < 0 || v->v.i > (int64_t)UINT32_MAX)
            return si_err_set(err, SI_EFORMAT, "%s: key '%s': value %" PRId64 " does not fit in u32",
                              g->path, key, v->v.i);
        *out = (uint32_t)v->v.i;
        return SI_OK;
    }
    return si_err_set(err, SI_EFORMAT, "%s: key '%s': type %s, expected an integer", g->path, key,
                      si_gguf_vtype_name(v->type));
}

/* Whether an integer of magnitude m is exact in a float (24-bit mantissa). */
static bool exact_in_float(uint64_t m)
{
    while (m != 0 && (m & 1) == 0)
        m >>= 1;
    return m < (1u << 24);
}

int si_gguf_get_f32(const si_gguf *g, const char *key, float *out, si_err *err)
{
    int rc;
    const si_gguf_value *v = lookup(g, key, err, &rc);
    if (v == NULL)
        return rc;
    switch (v->type) {
    case SI_GGUF_F32:
        *out = (float)v->v.f;
        return SI_OK;
    case SI_GGUF_F64:
        if (isnan(v->v.f) || isinf(v->v.f) ||
            (fabs(v->v.f) <= FLT_MAX && (double)(float)v->v.f == v->v.f)) {
            *out = (float)v->v.f;
            return SI_OK;
        }
        return si_err_set(err, SI_EFORMAT, "%s: key '%s': f64 value %.17g is not exact in f32",
                          g->path, key, v->v.f);
    default:
        break;
    }
    if (is_unsigned(v->type) && exact_in_float(v->v.u)) {
        *out = (float)v->v.u;
        return SI_OK;
    }
    if (is_signed(v->type)) {
        uint64_t m = v->v.i < 0 ? 0 - (uint64_t)v->v.i : (uint64_t)v->v.i;
        if (exact_in_float(m)) {
            *out = (float)v->v.i;
            return SI_OK;
        }
    }
    if (is_unsigned(v->type) || is_signed(v->type))
        return si_err_set(err, SI_EFORMAT, "%s: key '%s': integer value is not exact in f32",
                          g->path, key);
    return si_err_set(err, SI_EFORMAT, "%s: key '%s': type %s, expected a number", g->path, key,
                      si_gguf_vtype_name(v->type));
}

int si_gguf_get_str(const si_gguf *g, const char *key, si_str *out, si_err *err)
{
    int rc;
    const si_gguf_value *v = lookup(g, key, err, &rc);
    if (v == NULL)
        return rc;
    if (v->type != SI_GGUF_STRING)
        return si_err_set(err, SI_EFORMAT, "%s: key '%s': type %s, expected string", g->path, key,
                          si_gguf_vtype_name(v->type));
    *out = v->v.s;
    return SI_OK;
}
