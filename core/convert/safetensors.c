/* core/convert/safetensors.c — safetensors reader; see safetensors.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "quant.h"
#include "safetensors.h"

/* A header is JSON text; real ones are well under 10 MB even for 1000s of
 * tensors.  The bound keeps a corrupt length from becoming a huge parse. */
#define MAX_HEADER_BYTES (256ull << 20)
/* Largest accepted dimension and element count (far above any model, far
 * below where uint64 byte arithmetic could overflow). */
#define MAX_DIM  (1ll << 40)
#define MAX_ELEM (1ull << 50)

typedef struct st_file {
    char    *path;
    void    *map;          /* whole file, PROT_READ; NULL for an empty file */
    uint64_t size;
} st_file;

struct si_st_set {
    st_file      *files;
    uint32_t      n_files;
    si_st_tensor *tensors;   /* sorted by name */
    size_t        n_tensors;
    size_t        cap_tensors;
    uint64_t      data_bytes;
};

static const struct { const char *name; uint32_t size; } dtypes[SI_ST_DTYPE_COUNT] = {
    [SI_ST_F32]     = { "F32", 4 },     [SI_ST_F16]     = { "F16", 2 },
    [SI_ST_BF16]    = { "BF16", 2 },    [SI_ST_F64]     = { "F64", 8 },
    [SI_ST_I64]     = { "I64", 8 },     [SI_ST_I32]     = { "I32", 4 },
    [SI_ST_I16]     = { "I16", 2 },     [SI_ST_I8]      = { "I8", 1 },
    [SI_ST_U8]      = { "U8", 1 },      [SI_ST_BOOL]    = { "BOOL", 1 },
    [SI_ST_U16]     = { "U16", 2 },     [SI_ST_U32]     = { "U32", 4 },
    [SI_ST_U64]     = { "U64", 8 },     [SI_ST_F8_E4M3] = { "F8_E4M3", 1 },
    [SI_ST_F8_E5M2] = { "F8_E5M2", 1 },
};

const char *si_st_dtype_name(uint32_t dtype)
{
    return dtype < SI_ST_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

bool si_st_dtype_convertible(uint32_t dtype)
{
    return dtype == SI_ST_F32 || dtype == SI_ST_F16 || dtype == SI_ST_BF16;
}

static int dtype_from_name(const char *s)
{
    for (int i = 0; i < SI_ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0)
            return i;
    return -1;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static char *join_path(const char *dir, const char *name)
{
    size_t ld = strlen(dir), ln = strlen(name);
    char *p = malloc(ld + ln + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, dir, ld);
    size_t o = ld;
    if (ld > 0 && dir[ld - 1] != '/')
        p[o++] = '/';
    memcpy(p + o, name, ln + 1);
    return p;
}

/* ---- one file -------------------------------------------------------------- */

static int map_file(st_file *f, si_err *err)
{
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return si_err_set(err, errno == ENOENT ? SI_ENOTFOUND : SI_EIO,
                          "%s: cannot open: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return si_err_set(err, SI_EIO, "%s: cannot stat: %s", f->path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return si_err_set(err, SI_EIO, "%s: not a regular file", f->path);
    }
    f->size = (uint64_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return si_err_set(err, SI_EIO, "%s: cannot map %" PRIu64 " bytes: %s",
                              f->path, f->size, strerror(e));
        }
        f->map = m;
    }
    close(fd);   /* the mapping keeps the file */
    return SI_OK;
}

/* A JSON number that is a whole value in [0, max]. */
static bool json_u64(const cJSON *n, uint64_t max, uint64_t *out)
{
    if (!cJSON_IsNumber(n))
        return false;
    double d = n->valuedouble;
    if (!(d >= 0) || d > (double)max || d != (double)(uint64_t)d)
        return false;
    *out = (uint64_t)d;
    return true;
}

static int push_tensor(si_st_set *s, const si_st_tensor *t, si_err *err)
{
    if (s->n_tensors == s->cap_tensors) {
        size_t cap = s->cap_tensors ? 2 * s->cap_tensors : 256;
        si_st_tensor *n = realloc(s->tensors, cap * sizeof *n);
        if (n == NULL)
            return si_err_set(err, SI_ENOMEM, "safetensors: out of memory for %zu tensors", cap);
        s->tensors = n;
        s->cap_tensors = cap;
    }
    s->tensors[s->n_tensors++] = *t;
    return SI_OK;
}

/* Validates one header entry and appends it. */
static int parse_entry(si_st_set *s, uint32_t fi, const cJSON *e, const uint8_t *data,
                       uint64_t data_size, si_err *err)
{
    const char *path = s->files[fi].path, *name = e->string;
    if (!cJSON_IsObject(e))
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': header entry is not an object",
                          path, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd))
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': no \"dtype\" string", path, name);
    int dt = dtype_from_name(jd->valuestring);
    if (dt < 0)
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': unknown dtype \"%s\"",
                          path, name, jd->valuestring);
    if (!cJSON_IsArray(js))
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': no \"shape\" array", path, name);
    si_st_tensor t = { .dtype = (uint32_t)dt, .file = fi };
    int nd = cJSON_GetArraySize(js);
    if (nd > SI_ST_MAX_DIMS)
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': %d dimensions (at most %d)",
                          path, name, nd, SI_ST_MAX_DIMS);
    t.ndim = (uint32_t)nd;
    for (int i = 0; i < SI_ST_MAX_DIMS; i++)
        t.shape[i] = 1;
    uint64_t n_elem = 1;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, js) {
        uint64_t d;
        if (!json_u64(it, (uint64_t)MAX_DIM, &d))
            return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': shape[%d] is not an "
                              "integer in [0, 2^40]", path, name, i);
        t.shape[i++] = (int64_t)d;
        if (d != 0 && n_elem > MAX_ELEM / d)
            return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': more than 2^50 elements",
                              path, name);
        n_elem *= d;
    }
    uint64_t begin, end;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
        !json_u64(jo->child, UINT64_MAX >> 11, &begin) ||
        !json_u64(jo->child->next, UINT64_MAX >> 11, &end))
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': \"data_offsets\" is not "
                          "[begin, end] of non-negative integers", path, name);
    if (end < begin)
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': data_offsets [%" PRIu64
                          ", %" PRIu64 ") end before begin", path, name, begin, end);
    if (end > data_size)
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': data [%" PRIu64 ", %" PRIu64
                          ") beyond the end of the data section (%" PRIu64 " bytes)",
                          path, name, begin, end, data_size);
    uint64_t want = n_elem * dtypes[dt].size;
    if (end - begin != want)
        return si_err_set(err, SI_EFORMAT, "%s: tensor '%s': data_offsets span %" PRIu64
                          " bytes but %s x %" PRIu64 " elements need %" PRIu64,
                          path, name, end - begin, dtypes[dt].name, n_elem, want);
    t.n_elem = n_elem;
    t.n_bytes = want;
    t.data = data + begin;
    if ((t.name = dup_str(name)) == NULL)
        return si_err_set(err, SI_ENOMEM, "safetensors: out of memory");
    int rc = push_tensor(s, &t, err);
    if (rc != SI_OK)
        free((char *)t.name);
    else
        s->data_bytes += want;
    return rc;
}

static int parse_file(si_st_set *s, uint32_t fi, si_err *err)
{
    st_file *f = &s->files[fi];
    int rc = map_file(f, err);
    if (rc != SI_OK)
        return rc;
    if (f->size < 8)
        return si_err_set(err, SI_EFORMAT, "%s: file is %" PRIu64 " bytes, too short for "
                          "the 8-byte header length", f->path, f->size);
    const uint8_t *b = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    if (hlen > f->size - 8)
        return si_err_set(err, SI_EFORMAT, "%s: header length %" PRIu64 " runs past the "
                          "end of the file (size %" PRIu64 ")", f->path, hlen, f->size);
    if (hlen > MAX_HEADER_BYTES)
        return si_err_set(err, SI_EFORMAT, "%s: header length %" PRIu64 " exceeds the "
                          "%llu-byte limit", f->path, hlen, MAX_HEADER_BYTES);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)b + 8, (size_t)hlen, &end, 0);
    if (root == NULL) {
        size_t at = end != NULL ? (size_t)(end - ((const char *)b + 8)) : 0;
        return si_err_set(err, SI_EFORMAT, "%s: header is not valid JSON (near byte %zu "
                          "of %" PRIu64 ")", f->path, at, hlen);
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return si_err_set(err, SI_EFORMAT, "%s: header is not a JSON object", f->path);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (e->string != NULL && strcmp(e->string, "__metadata__") == 0)
            continue;   /* free-form strings (e.g. "format": "pt") */
        if ((rc = parse_entry(s, fi, e, b + 8 + hlen, f->size - 8 - hlen, err)) != SI_OK)
            break;
    }
    cJSON_Delete(root);
    return rc;
}

/* ---- the set ---------------------------------------------------------------- */

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const si_st_tensor *)a)->name, ((const si_st_tensor *)b)->name);
}

static int add_file(si_st_set *s, const char *path, si_err *err)
{
    st_file *n = realloc(s->files, (s->n_files + 1) * sizeof *n);
    if (n == NULL)
        return si_err_set(err, SI_ENOMEM, "safetensors: out of memory");
    s->files = n;
    st_file *f = &s->files[s->n_files];
    memset(f, 0, sizeof *f);
    if ((f->path = dup_str(path)) == NULL)
        return si_err_set(err, SI_ENOMEM, "safetensors: out of memory");
    s->n_files++;
    return parse_file(s, s->n_files - 1, err);
}

/* Sorts the table and refuses a name that occurs twice. */
static int finish(si_st_set *s, si_err *err)
{
    if (s->n_tensors > 1)
        qsort(s->tensors, s->n_tensors, sizeof *s->tensors, cmp_tensor);
    for (size_t i = 1; i < s->n_tensors; i++) {
        const si_st_tensor *a = &s->tensors[i - 1], *b = &s->tensors[i];
        if (strcmp(a->name, b->name) == 0)
            return si_err_set(err, SI_EFORMAT, "tensor '%s' appears twice (in %s and %s)",
                              a->name, s->files[a->file].path, s->files[b->file].path);
    }
    return SI_OK;
}

int si_st_open_files(const char *const *paths, size_t n, si_st_set **out, si_err *err)
{
    *out = NULL;
    if (paths == NULL || n == 0)
        return si_err_set(err, SI_EINVAL, "safetensors: no files to open");
    si_st_set *s = calloc(1, sizeof *s);
    if (s == NULL)
        return si_err_set(err, SI_ENOMEM, "safetensors: out of memory");
    int rc = SI_OK;
    for (size_t i = 0; i < n && rc == SI_OK; i++)
        rc = add_file(s, paths[i], err);
    if (rc == SI_OK)
        rc = finish(s, err);
    if (rc != SI_OK) {
        si_st_close(s);
        return rc;
    }
    *out = s;
    return SI_OK;
}

static int read_text(const char *path, char **out, si_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return si_err_set(err, errno == ENOENT ? SI_ENOTFOUND : SI_EIO,
                          "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (cap - len < 65536) {
            if (cap > (256u << 20)) {
                free(buf);
                fclose(f);
                return si_err_set(err, SI_EFORMAT, "%s: larger than 256 MiB", path);
            }
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, cap + 1);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                return si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return si_err_set(err, SI_EIO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    return SI_OK;
}

/* Sharded form: the index's weight_map decides the files, and each mapped
 * tensor must be found in its file. */
static int open_index(const char *dir, const char *index_path, si_st_set **out, si_err *err)
{
    char *text;
    int rc = read_text(index_path, &text, err);
    if (rc != SI_OK)
        return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (root == NULL)
        return si_err_set(err, SI_EFORMAT, "%s: not valid JSON", index_path);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    char **names = NULL, **paths = NULL;
    size_t n = 0;
    if (!cJSON_IsObject(wm) || wm->child == NULL) {
        rc = si_err_set(err, SI_EFORMAT, "%s: no \"weight_map\" object (or it is empty)",
                        index_path);
        goto done;
    }
    int n_map = cJSON_GetArraySize(wm);
    names = calloc((size_t)n_map, sizeof *names);
    paths = calloc((size_t)n_map, sizeof *paths);
    if (names == NULL || paths == NULL) {
        rc = si_err_set(err, SI_ENOMEM, "%s: out of memory", index_path);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || e->valuestring[0] == '\0') {
            rc = si_err_set(err, SI_EFORMAT, "%s: weight_map['%s'] is not a file name",
                            index_path, e->string);
            goto done;
        }
        const char *fn = e->valuestring;
        if (fn[0] == '/' || strstr(fn, "..") != NULL) {
            rc = si_err_set(err, SI_EFORMAT, "%s: weight_map['%s'] = \"%s\": shard names "
                            "must be relative and stay inside the folder", index_path,
                            e->string, fn);
            goto done;
        }
        size_t k = 0;
        while (k < n && strcmp(names[k], fn) != 0)
            k++;
        if (k == n) {
            names[n] = (char *)fn;   /* borrowed from the JSON tree */
            if ((paths[n] = join_path(dir, fn)) == NULL) {
                rc = si_err_set(err, SI_ENOMEM, "%s: out of memory", index_path);
                goto done;
            }
            n++;
        }
    }
    si_st_set *s;
    if ((rc = si_st_open_files((const char *const *)paths, n, &s, err)) != SI_OK)
        goto done;
    cJSON_ArrayForEach(e, wm) {
        /* Files were opened in `names` order, so a tensor's file index is
         * the position of its shard name there. */
        uint32_t k = 0;
        while (k < n && strcmp(names[k], e->valuestring) != 0)
            k++;
        const si_st_tensor *t = si_st_find(s, e->string);
        if (t == NULL || t->file != k) {
            rc = si_err_set(err, SI_EFORMAT, "%s: weight_map puts '%s' in %s, but %s",
                            index_path, e->string, e->valuestring,
                            t == NULL ? "no shard contains it" : "it is in another shard");
            si_st_close(s);
            goto done;
        }
    }
    *out = s;
done:
    for (size_t k = 0; paths != NULL && k < n; k++)
        free(paths[k]);
    free(paths);
    free(names);
    cJSON_Delete(root);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* No index, no model.safetensors: every *.safetensors file, sorted. */
static int open_glob(const char *dir, si_st_set **out, si_err *err)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return si_err_set(err, errno == ENOENT ? SI_ENOTFOUND : SI_EIO,
                          "%s: cannot open folder: %s", dir, strerror(errno));
    char **paths = NULL;
    size_t n = 0, cap = 0;
    int rc = SI_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **np = realloc(paths, cap * sizeof *np);
            if (np == NULL) {
                rc = si_err_set(err, SI_ENOMEM, "%s: out of memory", dir);
                break;
            }
            paths = np;
        }
        if ((paths[n] = join_path(dir, de->d_name)) == NULL) {
            rc = si_err_set(err, SI_ENOMEM, "%s: out of memory", dir);
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == SI_OK && n == 0)
        rc = si_err_set(err, SI_ENOTFOUND, "%s: no model.safetensors.index.json, "
                        "model.safetensors or other *.safetensors file", dir);
    if (rc == SI_OK) {
        qsort(paths, n, sizeof *paths, cmp_str);
        rc = si_st_open_files((const char *const *)paths, n, out, err);
    }
    for (size_t k = 0; k < n; k++)
        free(paths[k]);
    free(paths);
    return rc;
}

int si_st_open_dir(const char *dir, si_st_set **out, si_err *err)
{
    *out = NULL;
    char *index = join_path(dir, "model.safetensors.index.json");
    char *single = join_path(dir, "model.safetensors");
    int rc;
    if (index == NULL || single == NULL)
        rc = si_err_set(err, SI_ENOMEM, "safetensors: out of memory");
    else if (access(index, F_OK) == 0)
        rc = open_index(dir, index, out, err);
    else if (access(single, F_OK) == 0)
        rc = si_st_open_files((const char *const *)&single, 1, out, err);
    else
        rc = open_glob(dir, out, err);
    free(index);
    free(single);
    return rc;
}

void si_st_close(si_st_set *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n_tensors; i++)
        free((char *)s->tensors[i].name);
    for (uint32_t i = 0; i < s->n_files; i++) {
        if (s->files[i].map != NULL)
            munmap(s->files[i].map, (size_t)s->files[i].size);
        free(s->files[i].path);
    }
    free(s->tensors);
    free(s->files);
    free(s);
}

/* ---- access ------------------------------------------------------------------ */

size_t si_st_count(const si_st_set *s) { return s->n_tensors; }
uint64_t si_st_data_bytes(const si_st_set *s) { return s->data_bytes; }

const si_st_tensor *si_st_at(const si_st_set *s, size_t i)
{
    return i < s->n_tensors ? &s->tensors[i] : NULL;
}

const si_st_tensor *si_st_find(const si_st_set *s, const char *name)
{
    si_st_tensor key = { .name = name };
    return s->n_tensors ? bsearch(&key, s->tensors, s->n_tensors, sizeof key, cmp_tensor)
                        : NULL;
}

const char *si_st_file_path(const si_st_set *s, uint32_t file)
{
    return file < s->n_files ? s->files[file].path : "?";
}

void si_st_release(const si_st_set *s, const si_st_tensor *t)
{
    const st_file *f = t->file < s->n_files ? &s->files[t->file] : NULL;
    if (f == NULL || f->map == NULL || t->n_bytes == 0)
        return;
    /* Whole pages inside [data, data + n_bytes) only: neighbours keep theirs. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)t->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->n_bytes) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

uint64_t si_st_row_len(const si_st_tensor *t)
{
    return t->ndim == 0 ? 1 : (uint64_t)t->shape[t->ndim - 1];
}

uint64_t si_st_n_rows(const si_st_tensor *t)
{
    uint64_t len = si_st_row_len(t);
    return len == 0 ? 0 : t->n_elem / len;
}

int si_st_read_rows(const si_st_set *s, const si_st_tensor *t, uint64_t row0,
                    uint64_t n_rows, float *dst, si_err *err)
{
    const char *path = si_st_file_path(s, t->file);
    if (!si_st_dtype_convertible(t->dtype))
        return si_err_set(err, SI_EUNSUPPORTED, "%s: tensor '%s': dtype %s cannot be "
                          "converted (F32, F16 and BF16 only)", path, t->name,
                          si_st_dtype_name(t->dtype));
    uint64_t len = si_st_row_len(t), rows = si_st_n_rows(t);
    if (row0 > rows || n_rows > rows - row0)
        return si_err_set(err, SI_ERANGE, "%s: tensor '%s': rows [%" PRIu64 ", %" PRIu64
                          ") outside its %" PRIu64 " rows", path, t->name, row0,
                          row0 + n_rows, rows);
    uint64_t n = n_rows * len;
    uint32_t es = dtypes[t->dtype].size;
    const uint8_t *p = (const uint8_t *)t->data + row0 * len * es;
    switch (t->dtype) {
    case SI_ST_F32:
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
                         (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            memcpy(&dst[i], &u, sizeof u);
        }
        break;
    case SI_ST_F16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = si_fp16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    default: /* SI_ST_BF16 */
        for (uint64_t i = 0; i < n; i++)
            dst[i] = si_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    }
    return SI_OK;
}
