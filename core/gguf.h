/* core/gguf.h — GGUF v2/v3 reader (mmap, fully validated) and streaming writer.
 *
 * Reader: si_gguf_open() maps the file read-only and validates EVERYTHING
 * before returning: every count, length, offset and dimension against the
 * file size with overflow-safe arithmetic, type ids, duplicate keys and
 * tensor names, alignment, tensor data inside the data section and not
 * overlapping.  A rejection writes "<file>: <item>: <reason>" into err.
 * After a successful open, every accessor is safe without further checks.
 *
 * Writer: si_gguf_writer collects metadata and tensor infos, then streams
 * tensor data in declaration order, so multi-GB files need bounded memory.
 * Its output follows llama.cpp's layout: header, KVs, tensor infos, padding
 * to general.alignment (default 32), data with each tensor padded to the
 * alignment.
 */
#ifndef SI_CORE_GGUF_H
#define SI_CORE_GGUF_H

#include <sparkinfer/status.h>
#include <sparkinfer/types.h>
#include <sparkinfer/plugin.h>   /* si_gguf typedef */

#define SI_GGUF_DEFAULT_ALIGNMENT 32u

/* ---- reader ------------------------------------------------------------ */

/* Opens and validates `path`.  On success *out owns the mapping; close with
 * si_gguf_close (NULL-safe). */
int  si_gguf_open(const char *path, si_gguf **out, si_err *err);
/* Same, over a caller-owned memory image (used by the fuzzer and tests);
 * `name` is used in messages.  The bytes must outlive the si_gguf. */
int  si_gguf_open_memory(const void *data, size_t size, const char *name,
                         si_gguf **out, si_err *err);
void si_gguf_close(si_gguf *g);

const char *si_gguf_path(const si_gguf *g);
uint32_t    si_gguf_version(const si_gguf *g);
uint32_t    si_gguf_alignment(const si_gguf *g);
uint64_t    si_gguf_file_size(const si_gguf *g);
uint64_t    si_gguf_data_offset(const si_gguf *g);   /* start of the data section */

uint64_t             si_gguf_n_kv(const si_gguf *g);
const char          *si_gguf_kv_key(const si_gguf *g, uint64_t i);    /* NUL-terminated */
const si_gguf_value *si_gguf_kv_value(const si_gguf *g, uint64_t i);
const si_gguf_value *si_gguf_get(const si_gguf *g, const char *key);   /* NULL if absent */
int                  si_gguf_arr_get(const si_gguf_value *arr, uint64_t i, si_gguf_value *out);

uint64_t              si_gguf_n_tensors(const si_gguf *g);
const si_tensor_info *si_gguf_tensor_at(const si_gguf *g, uint64_t i);
const si_tensor_info *si_gguf_tensor(const si_gguf *g, const char *name);

/* Typed conveniences: return SI_ENOTFOUND when absent, SI_EFORMAT (with a
 * message naming the key) when the stored type cannot convert losslessly. */
int si_gguf_get_u32(const si_gguf *g, const char *key, uint32_t *out, si_err *err);
int si_gguf_get_f32(const si_gguf *g, const char *key, float *out, si_err *err);
int si_gguf_get_str(const si_gguf *g, const char *key, si_str *out, si_err *err);

const char *si_gguf_vtype_name(uint32_t vtype);        /* "u32", "array" ... */

/* ---- writer ------------------------------------------------------------ */

typedef struct si_gguf_writer si_gguf_writer;

/* Creates `path` (truncating).  version is 3 unless you need 2. */
int  si_gguf_writer_open(const char *path, si_gguf_writer **out, si_err *err);
/* Abandons or finishes: si_gguf_writer_close returns the first error of the
 * whole write (e.g. a short write) and always frees the writer. */
int  si_gguf_writer_close(si_gguf_writer *w, si_err *err);

/* Metadata, in the order they will appear.  Keys must be unique.
 * Setting "general.alignment" (u32, power of two) changes the alignment. */
int si_gguf_writer_set_u8  (si_gguf_writer *w, const char *key, uint8_t v);
int si_gguf_writer_set_i8  (si_gguf_writer *w, const char *key, int8_t v);
int si_gguf_writer_set_u16 (si_gguf_writer *w, const char *key, uint16_t v);
int si_gguf_writer_set_i16 (si_gguf_writer *w, const char *key, int16_t v);
int si_gguf_writer_set_u32 (si_gguf_writer *w, const char *key, uint32_t v);
int si_gguf_writer_set_i32 (si_gguf_writer *w, const char *key, int32_t v);
int si_gguf_writer_set_u64 (si_gguf_writer *w, const char *key, uint64_t v);
int si_gguf_writer_set_i64 (si_gguf_writer *w, const char *key, int64_t v);
int si_gguf_writer_set_f32 (si_gguf_writer *w, const char *key, float v);
int si_gguf_writer_set_f64 (si_gguf_writer *w, const char *key, double v);
int si_gguf_writer_set_bool(si_gguf_writer *w, const char *key, bool v);
int si_gguf_writer_set_str (si_gguf_writer *w, const char *key, const char *v);
/* Numeric array: `elem_type` a scalar vtype, `data` packed little-endian. */
int si_gguf_writer_set_arr (si_gguf_writer *w, const char *key, uint32_t elem_type,
                            const void *data, uint64_t n);
/* Array of strings (copied). */
int si_gguf_writer_set_arr_str(si_gguf_writer *w, const char *key,
                               const char *const *strs, uint64_t n);
/* Array of strings given with explicit lengths (for vocabularies). */
int si_gguf_writer_set_arr_strn(si_gguf_writer *w, const char *key,
                                const si_str *strs, uint64_t n);

/* Declares a tensor; all tensors must be declared before the first data
 * write.  ne[0] must be a multiple of the type's block size. */
int si_gguf_writer_add_tensor(si_gguf_writer *w, const char *name, uint32_t type,
                              uint32_t ndim, const int64_t *ne);
/* Appends bytes of tensor data.  Tensors are filled in declaration order;
 * a tensor may be written in several calls; the writer inserts alignment
 * padding between tensors itself and checks each tensor's byte count. */
int si_gguf_writer_write(si_gguf_writer *w, const void *data, uint64_t n);

/* Message of the first failure, for the int-returning setters above (which
 * return a status and remember the first error). */
const char *si_gguf_writer_error(const si_gguf_writer *w);

#endif /* SI_CORE_GGUF_H */
