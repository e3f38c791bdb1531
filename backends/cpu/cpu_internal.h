/* backends/cpu/cpu_internal.h — private declarations shared by the files of
 * the cpu backend plugin.  Nothing here is visible outside cpu.so (the
 * plugin is built with -fvisibility=hidden and exports si_plugin_entry only).
 *
 * Layout of the plugin, one concern per file:
 *   cpu.c           descriptor, open/close, knobs, supports/exec dispatch
 *   cpu_buf.c       buffers (owned or borrowed GGUF views), weight_load, KV cache
 *   cpu_threads.c   the persistent thread pool, per-thread scratch, workspace
 *   cpu_quant_dot.c weight-row decoding, activation quantisation, dot kernels
 *   cpu_matmul.c    MATMUL (fast int8 path and f32 reference path)
 *   cpu_elem.c      GET_ROWS, RMSNORM, ADD, MUL, SWIGLU
 *   cpu_attn.c      ATTN (norms, RoPE/YaRN, KV append, causal GQA softmax)
 *   cpu_gdn.c       GDN (conv, L2 norms, gated delta rule, gated RMSNorm)
 *   cpu_moe.c       MOE (router, top-k, expert-grouped SwiGLU, shared expert)
 *   cpu_topk.c      TOPK (sampling penalties, the k best logits of a row)
 */
#ifndef SI_CPU_INTERNAL_H
#define SI_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <sparkinfer/plugin.h>

#include "../common/si_opcheck.h"

#define CPU_NAME  "cpu"
#define CPU_ALIGN 64
#define CPU_CONV_K_MAX 64   /* GDN conv taps: the conv history lives on the stack */

/* ---- objects --------------------------------------------------------- */

struct si_buf {
    uint8_t *data;
    uint64_t size;
    bool     borrowed;      /* a read-only view of mapped GGUF data: never written or freed */
};

struct si_kv {
    si_kv_desc d;
    uint32_t   type;        /* SI_TYPE_F32 or SI_TYPE_F16 */
    uint32_t   elem;        /* bytes per element */
    /* K and V: [layer][seq][ctx][kv_head][head_dim] */
    uint8_t   *k, *v;
    uint32_t  *len;         /* [layer][seq]: positions filled */
};

typedef struct cpu_pool cpu_pool;

/* Per-thread scratch: grown on the calling thread before a parallel run,
 * then used by worker `tid` only. */
typedef struct cpu_tls {
    uint8_t *p;
    size_t   size;
} cpu_tls;

struct si_backend {
    const si_host *host;
    int            n_threads;
    bool           mm_ref;          /* matmul = ref: f32 reference path for every type */
    bool           moe_per_token;   /* moe = per_token: no grouping by expert          */
    bool           simd;            /* simd = auto and the CPU has AVX2+FMA+F16C       */
    bool           packed;          /* packed = true (and simd): cpu_dot_packed        */
    uint32_t       kv_type;         /* SI_TYPE_F32 / SI_TYPE_F16                       */
    cpu_pool      *pool;
    cpu_tls       *tls;             /* [n_threads] */
    uint8_t       *work;            /* op workspace shared by all threads */
    size_t         work_size;
    si_opcheck     oc;              /* the shared op checks, set up by open()      */
};

/* ---- thread pool and memory (cpu_threads.c) ------------------------- */

typedef void (*cpu_task_fn)(void *ctx, int64_t task, int tid);

int  cpu_pool_create(int n_threads, cpu_pool **out, si_err *err);
void cpu_pool_destroy(cpu_pool *p);
/* Runs fn(ctx, i, tid) for every i in [0, n_tasks) on the pool's threads
 * (the caller is thread 0) and returns when all are done. */
void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *ctx);
int  cpu_online_cores(void);

/* Makes every thread's scratch at least `bytes` long. */
int   cpu_tls_reserve(si_backend *b, size_t bytes, si_err *err);
/* Makes the shared workspace at least `bytes` long; returns it or NULL. */
void *cpu_work_reserve(si_backend *b, size_t bytes, si_err *err);
void *cpu_aligned_alloc(size_t bytes);

/* Bump allocator over a reserved region (sizes rounded up to CPU_ALIGN). */
typedef struct cpu_carve {
    uint8_t *p;
    size_t   used;
} cpu_carve;

static inline size_t cpu_round(size_t n) { return (n + CPU_ALIGN - 1) & ~(size_t)(CPU_ALIGN - 1); }

static inline void *cpu_carve_take(cpu_carve *c, size_t bytes)
{
    void *r = c->p + c->used;
    c->used += cpu_round(bytes);
    return r;
}

/* ---- tensors ------------------------------------------------------------ */

static inline uint8_t *cpu_ptr(const si_tensor *t) { return t->buf->data + t->offset; }

/* Dimensions past ndim count as 1. */
static inline int64_t cpu_ne(const si_tensor *t, int i) { return si_oc_ne(t, i); }

/* True for an F32 tensor whose rows (ne0) are contiguous. */
bool cpu_is_f32_rows(const si_tensor *t);
/* Rows of a tensor of at most 4 dims, as a flat count; byte offset of row r. */
int64_t  cpu_nrows(const si_tensor *t);
uint64_t cpu_row_off(const si_tensor *t, int64_t r);

/* ---- half precision (own, round to nearest even) ---------------------- */

static inline float cpu_f16_to_f32(uint16_t h)
{
    /* Shift exponent+mantissa into f32 position and rescale by 2^112: this
     * maps normals and subnormals exactly; Inf/NaN get their exponent set. */
    uint32_t t = ((uint32_t)(h & 0x7fffu)) << 13;
    float f;
    memcpy(&f, &t, sizeof f);
    f *= 0x1p112f;
    uint32_t r;
    memcpy(&r, &f, sizeof r);
    if ((h & 0x7c00u) == 0x7c00u)
        r = 0x7f800000u | t;
    r |= ((uint32_t)(h & 0x8000u)) << 16;
    memcpy(&f, &r, sizeof f);
    return f;
}

static inline uint16_t cpu_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                         /* Inf or NaN (keep NaN quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u)                         /* rounds to >= 65520: Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                        /* below the f16 normal range */
        /* Adding 0.5 lets the FPU round the subnormal to nearest even. */
        float a, s = 0.5f;
        memcpy(&a, &ax, sizeof a);
        a += s;
        uint32_t r;
        memcpy(&r, &a, sizeof r);
        return (uint16_t)(sign | (r - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + odd;                       /* rebias exponent (-112<<23) and round */
    return (uint16_t)(sign | (ax >> 13));
}

static inline float cpu_bf16_to_f32(uint16_t h)
{
    uint32_t t = (uint32_t)h << 16;
    float f;
    memcpy(&f, &t, sizeof f);
    return f;
}

static inline uint16_t cpu_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
static inline void cpu_k4_scale_min(const uint8_t *sc, int j, int *s, int *m)
{
    if (j < 4) {
        *s = sc[j] & 63;
        *m = sc[j + 4] & 63;
    } else {
        *s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
        *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

/* ---- weight rows and dot kernels (cpu_quant_dot.c) -------------------- */

/* How MATMUL reads a weight type. */
enum cpu_path {
    CPU_PATH_NONE = 0,  /* not supported                                        */
    CPU_PATH_Q8,        /* decode row to int8 + scales, int8 x int8 dots        */
    CPU_PATH_F32,       /* decode row to f32 (own decoder: F32, F16, BF16)      */
    CPU_PATH_HOST,      /* decode row to f32 through host->dequant             */
};

/* Path of `type` in fast mode; CPU_PATH_NONE if unsupported. */
int  cpu_type_path(uint32_t type);
bool cpu_type_supported(uint32_t type);
/* Elements and bytes per block (1/elem size for plain types); 0 if unknown. */
uint32_t cpu_type_blk(uint32_t type);
uint32_t cpu_type_blk_bytes(uint32_t type);
const char *cpu_type_name(const si_backend *b, uint32_t type);

/* A weight row decoded for the int8 path: `in` int8 values, a scale per 16
 * values and (types with a min/offset term) a value per 32 that is
 * subtracted times the activation block sum:
 *   w[i] = d16[i/16] * q[i] - m32[i/32].
 * The has_min formats (Q4_1, Q5_1, Q4_K, Q5_K) all store q in 0..31, which
 * the AVX2 kernel relies on (unsigned x signed byte products). */
typedef struct cpu_row8 {
    int8_t *q;
    float  *d16;
    float  *m32;
    bool    has_min;
} cpu_row8;

/* Activation rows quantised to blocks of 32: x[i] ~= d[i/32] * q[i]; s is the
 * exact f32 sum of each block's x (for the min term). Row j of `in`
 * values starts at q + j*in, d + j*in/32, s + j*in/32. */
typedef struct cpu_q8 {
    int8_t *q;
    float  *d;
    float  *s;
    int64_t in;
} cpu_q8;

size_t cpu_row8_bytes(int64_t in);
void   cpu_row8_carve(cpu_row8 *r, void *mem, int64_t in);
void   cpu_decode_row8(uint32_t type, const uint8_t *src, int64_t in, cpu_row8 *r, bool simd);
/* Own f32 decode of F32/F16/BF16 and of every CPU_PATH_Q8 type. */
void   cpu_decode_f32(uint32_t type, const uint8_t *src, int64_t in, float *dst);
/* Any supported type: own decoder or host->dequant. */
int    cpu_row_to_f32(const si_host *h, uint32_t type, const uint8_t *src, int64_t in, float *dst, si_err *err);

size_t cpu_q8_bytes(int64_t in, int64_t rows);
void   cpu_q8_carve(cpu_q8 *q, void *mem, int64_t in, int64_t rows);
void   cpu_quantize_row_q8(const float *x, int64_t in, const cpu_q8 *q, int64_t row);

/* `simd` selects the AVX2 kernels (only ever true where the CPU has them). */
float  cpu_dot_row8(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in, bool simd);
float  cpu_dot_f32(const float *a, const float *b, int64_t n, bool simd);
/* Four activation rows at once: out[t] = w . a[rows[t]]. */
void   cpu_dot_row8_x4(const cpu_row8 *w, const cpu_q8 *a, const int64_t rows[4], int64_t in, bool simd,
                       float out[4]);
/* cpu_decode_f32 with the F16C conversion when simd. */
void   cpu_decode_f32_simd(uint32_t type, const uint8_t *src, int64_t in, float *dst, bool simd);
/* One token straight from a packed weight row (decode: no decoded row
 * written and read back): the same bits as cpu_decode_row8 then
 * cpu_dot_row8 with simd.  Only where cpu_dot_packed_ok (AVX2; Q4_K, Q5_K,
 * Q6_K, Q8_0). */
bool   cpu_dot_packed_ok(uint32_t type, bool packed);   /* (packed: the backend's knob, false without AVX2) */
float  cpu_dot_packed(uint32_t type, const uint8_t *src, const cpu_q8 *a, int64_t row, int64_t in);
/* Whether this CPU can run the AVX2/FMA kernels. */
bool   cpu_have_simd(void);

/* ---- matmul core, shared by MATMUL, MOE (cpu_matmul.c) --------------- */

typedef struct cpu_wview {
    const uint8_t *data;
    uint32_t       type;
    int64_t        in, rows;
    uint64_t       row_bytes;     /* stride between rows */
} cpu_wview;

/* y[yrow(j)][r] = W[r] . x[xrow(j)] for weight rows r and activation
 * rows j; xrow/yrow map through x_idx/y_idx when not NULL. */
typedef struct cpu_mm {
    cpu_wview      w;
    int            path;          /* enum cpu_path; CPU_PATH_HOST also serves matmul = ref */
    bool           ref;           /* f32 reference: double accumulation */
    bool           simd;
    bool           packed;        /* knob packed: fewer than 4 tokens via cpu_dot_packed */
    const float   *x;             /* f32 activations (paths F32/HOST) */
    size_t         x_stride;      /* floats */
    cpu_q8         xq;            /* int8 activations (path Q8)      */
    const int32_t *x_idx;
    float         *y;
    size_t         y_stride;      /* floats */
    const int32_t *y_idx;
    const si_host *host;
    atomic_int    *fail;          /* set to a status on a host->dequant error */
} cpu_mm;

/* Fills path/ref from the weight type and the backend mode. */
void   cpu_mm_setup(const si_backend *b, cpu_mm *mm);
size_t cpu_mm_tls_bytes(const cpu_mm *mm);
/* Weight rows [r0, r1) x activation rows [j0, j1). */
void   cpu_mm_range(const cpu_mm *mm, int64_t r0, int64_t r1, int64_t j0, int64_t j1, void *tls);
/* Whole product for activation rows [0, n), in parallel (TLS reserved). */
int    cpu_mm_run(si_backend *b, const cpu_mm *mm, int64_t n, si_err *err);
/* Quantises n f32 rows (stride floats) into q8 in parallel. */
void   cpu_quantize_rows(si_backend *b, const float *x, size_t stride, int64_t n, const cpu_q8 *q);

/* ---- ops ---------------------------------------------------------------- */

/* exec of each op; the op has passed si_oc_check(&b->oc) (backends/common,
 * shared with the other backends: supports() and exec() run it). */
int cpu_matmul_exec(si_backend *b, const si_op *op, si_err *err);
int cpu_elem_exec(si_backend *b, const si_op *op, si_err *err);
int cpu_attn_exec(si_backend *b, const si_op *op, si_err *err);
int cpu_gdn_exec(si_backend *b, const si_op *op, si_err *err);
int cpu_moe_exec(si_backend *b, const si_op *op, si_err *err);
int cpu_topk_exec(si_backend *b, const si_op *op, si_err *err);

/* Buffers and the KV cache (cpu_buf.c). */
int  cpu_buf_alloc(si_backend *b, uint64_t nbytes, si_buf **out, si_err *err);
void cpu_buf_free(si_backend *b, si_buf *buf);
int  cpu_upload(si_backend *b, si_buf *dst, uint64_t off, const void *src, uint64_t n, si_err *err);
int  cpu_download(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, si_err *err);
int  cpu_weight_load(si_backend *b, const si_tensor_info *w, si_tensor *out, si_err *err);
int  cpu_kv_create(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err);
void cpu_kv_free(si_backend *b, si_kv *kv);
int  cpu_kv_seq_reset(si_backend *b, si_kv *kv, uint32_t seq, si_err *err);
/* Fills b->oc: this backend's side of the shared op checks. */
void cpu_opcheck_init(si_backend *b);

#endif /* SI_CPU_INTERNAL_H */
