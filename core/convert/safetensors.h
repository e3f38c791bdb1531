/* core/convert/safetensors.h — read-only, validated access to Hugging Face
 * safetensors checkpoints (one file, or shards named by an index).
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON mapping
 * each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (plus
 * an optional "__metadata__" object of strings), then the data; offsets are
 * relative to the first byte after the header.  Each file is mapped
 * read-only; opening validates every entry (dtype known, shape sane, byte
 * count = elements x element size, [begin, end) inside the file) so that
 * later reads need no checks.  Tensor shapes are in PyTorch order (shape[0]
 * slowest), the reverse of ggml's ne order.
 */
#ifndef SI_CONVERT_SAFETENSORS_H
#define SI_CONVERT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sparkinfer/status.h>

#define SI_ST_MAX_DIMS 8

/* Element types.  Only F32, F16 and BF16 can be converted; the others are
 * recognised (so their byte counts are validated and the message names
 * them) but refused by si_st_read_rows. */
enum si_st_dtype {
    SI_ST_F32 = 0, SI_ST_F16, SI_ST_BF16,
    SI_ST_F64, SI_ST_I64, SI_ST_I32, SI_ST_I16, SI_ST_I8, SI_ST_U8, SI_ST_BOOL,
    SI_ST_U16, SI_ST_U32, SI_ST_U64, SI_ST_F8_E4M3, SI_ST_F8_E5M2,
    SI_ST_DTYPE_COUNT
};

typedef struct si_st_tensor {
    const char *name;                  /* NUL-terminated, owned by the set    */
    uint32_t    dtype;                 /* enum si_st_dtype                    */
    uint32_t    ndim;                  /* 0 (scalar) .. SI_ST_MAX_DIMS        */
    int64_t     shape[SI_ST_MAX_DIMS]; /* PyTorch order; unused entries 1     */
    uint64_t    n_elem;
    const void *data;                  /* inside the mapping, n_bytes long    */
    uint64_t    n_bytes;
    uint32_t    file;                  /* index for si_st_file_path           */
} si_st_tensor;

typedef struct si_st_set si_st_set;

/* Opens the checkpoint in `dir`: model.safetensors.index.json when present
 * (every shard its weight_map names; every mapped tensor must be in the
 * shard it is mapped to), else model.safetensors, else every *.safetensors
 * file in the folder (sorted by name).  A tensor name in two files is an
 * error. */
int  si_st_open_dir(const char *dir, si_st_set **out, si_err *err);
/* Opens exactly these files (n >= 1). */
int  si_st_open_files(const char *const *paths, size_t n, si_st_set **out, si_err *err);
void si_st_close(si_st_set *s);   /* NULL-safe */

size_t              si_st_count(const si_st_set *s);
/* Tensors sorted by name. */
const si_st_tensor *si_st_at(const si_st_set *s, size_t i);
const si_st_tensor *si_st_find(const si_st_set *s, const char *name);   /* NULL if absent */
const char         *si_st_file_path(const si_st_set *s, uint32_t file);
/* Total bytes of tensor data over all files. */
uint64_t            si_st_data_bytes(const si_st_set *s);

const char *si_st_dtype_name(uint32_t dtype);   /* "BF16"; "?" if invalid */
bool        si_st_dtype_convertible(uint32_t dtype);

/* Converts rows [row0, row0 + n_rows) of `t`, viewed as a matrix of rows of
 * shape[ndim-1] elements, to f32 in dst[n_rows * row_len].  Refuses dtypes
 * other than F32/F16/BF16 and out-of-range rows, naming file and tensor. */
int si_st_read_rows(const si_st_set *s, const si_st_tensor *t, uint64_t row0,
                    uint64_t n_rows, float *dst, si_err *err);

/* Drops the mapped pages of t's data from this process (they are re-read
 * from the file if touched again), so converting a checkpoint larger than
 * memory keeps the resident set near one tensor.  Advisory; never fails. */
void si_st_release(const si_st_set *s, const si_st_tensor *t);

/* Elements per row (shape[ndim-1], 1 for a scalar) and number of rows. */
uint64_t si_st_row_len(const si_st_tensor *t);
uint64_t si_st_n_rows(const si_st_tensor *t);

#endif /* SI_CONVERT_SAFETENSORS_H */
