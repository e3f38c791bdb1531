/* sparkinfer/cuda_ext.h — what the cuda_sm120 backend lends to a kernel
 * plugin (SI_KIND_KERNEL whose ops->backend is "cuda_sm120"): the
 * `backend_api` argument of si_kernel_ops.init points to one si_cuda_ext.
 *
 * A kernel plugin replaces one op kind.  For every op of that kind the
 * backend asks the kernel's supports(); when it says yes the kernel's exec
 * runs instead of the backend's own code, otherwise the backend's own code
 * runs (so `enabled = false` in [kernel.NAME], or a kernel that declines a
 * shape, gives exactly the built-in path).
 *
 * Rules for the kernel (plugin.h's rules hold too):
 * - It enqueues its work on stream(b) and never synchronises it inside
 *   exec: the backend's exec is asynchronous; the core syncs later.
 * - Tensors given to it are device memory of this backend: dev_ptr() gives
 *   their address.  Memory it needs it allocates itself (cudaMalloc on
 *   `device` after cudaSetDevice(device) in init), frees in fini, and must
 *   not free while work that uses it may still run (cudaStreamSynchronize
 *   on stream(b) before freeing or growing a buffer).
 * - exec_builtin runs an op with the backend's own implementation: for
 *   falling back, or for sub-steps the kernel does not replace.  Such ops
 *   may point into the kernel's own memory through buf_wrap()ped buffers.
 * - The table and `b` are valid from init until fini returns.
 *
 * Versioning: SI_CUDA_EXT_MAJOR must match; members are only appended and
 * a kernel checks `size` (SI_HAS_MEMBER) before using a later member. */
#ifndef SPARKINFER_CUDA_EXT_H
#define SPARKINFER_CUDA_EXT_H

#include <sparkinfer/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SI_CUDA_EXT_MAJOR 1

/* What attn_prepare (since ext 1.1) hands a kernel plugin replacing
 * SI_OP_ATTN: the op's front half is done on the stream (q/k RMSNorm, NEOX
 * RoPE, K/V appended to the cache with its pages reserved and the layer's
 * lengths advanced) and this says where everything is.  The caller owns
 * the struct and sets `size` = sizeof(si_cuda_attn_view) before the call;
 * every pointer is device memory the backend owns.  Tokens t in [0, n):
 *   q       f32 [n][n_head][head_dim], normed and roped: the backend's
 *           workspace, valid until the next op of the backend runs (the
 *           plugin must not call exec_builtin before its kernel is queued);
 *   qg      the op's src[0]: the gate of (t, h) is head_dim floats at
 *           qg + t*qg_stride + (2h + 1)*head_dim; out = attn * sigmoid(gate);
 *   k, v    this layer's int8 pools [page][n_head_kv][page_size][head_dim],
 *   ks, vs  their f32 scales [page][n_head_kv][page_size] (x = int * scale);
 *   pages   int32 [n_seq][max_pages]: position p of sequence s lives in page
 *           pages[s*max_pages + p/page_size], slot p % page_size; only
 *           entries p/page_size <= the sequence's last position are valid;
 *   pos/seq int32 [n] (device copies of the op's arrays), max_len =
 *           max(pos) + 1.
 * paged_i8 = 0: the cache is not paged int8; then NOTHING was done (no
 * append) and the plugin runs the whole op through exec_builtin. */
typedef struct si_cuda_attn_view {
    uint32_t       size;                /* set by the caller                  */
    int            paged_i8;
    int64_t        n;
    const float   *q;
    const float   *qg;
    uint64_t       qg_stride;           /* floats between tokens (0 if n = 1) */
    const int8_t  *k, *v;
    const float   *ks, *vs;
    const int32_t *pages;
    uint32_t       max_pages, page_size;
    uint32_t       n_head, n_head_kv, head_dim;
    const int32_t *pos, *seq;
    int32_t        max_len;
} si_cuda_attn_view;

typedef struct si_cuda_ext {
    uint32_t    size;                   /* sizeof(si_cuda_ext)                */
    uint32_t    major;                  /* SI_CUDA_EXT_MAJOR                  */
    si_backend *b;                      /* pass to every function below       */
    int         device;                 /* CUDA device ordinal                */
    int         cc_major, cc_minor;     /* compute capability                 */
    int         n_sm;                   /* multiprocessors                    */
    /* The cudaStream_t (as void *) every op of an exec runs on, in order. */
    void *(*stream)(si_backend *b);
    /* Device address of t's first element (t->buf + t->offset). */
    void *(*dev_ptr)(si_backend *b, const si_tensor *t);
    /* The backend's own implementation of one op (never the kernel's). */
    int   (*exec_builtin)(si_backend *b, const si_op *op, si_err *err);
    /* An si_buf over device memory the kernel owns, for tensors of ops
     * passed to exec_builtin; unwrap() before freeing that memory. */
    int   (*buf_wrap)(si_backend *b, void *dev, uint64_t nbytes, si_buf **out, si_err *err);
    void  (*buf_unwrap)(si_backend *b, si_buf *buf);
    /* since ext 1.1: the front half of an SI_OP_ATTN op and the view of
     * it (si_cuda_attn_view above); SI_OK with view->paged_i8 = 0 and
     * nothing done when the cache is not paged int8. */
    int   (*attn_prepare)(si_backend *b, const si_op *op, si_cuda_attn_view *view, si_err *err);
    /* new members are appended here, and only here */
} si_cuda_ext;

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_CUDA_EXT_H */
