/* backends/cuda_sm120/cuda_backend.h — the plugin's objects, shared by the
 * C files (cuda_sm120.c: objects and memory; cuda_ops.c: supports/exec).
 * Nothing here is visible outside the .so (-fvisibility=hidden). */
#ifndef SI_CUDA_BACKEND_H
#define SI_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <sparkinfer/plugin.h>

#include "../common/si_opcheck.h"

#define CU_NAME "cuda_sm120"

struct si_backend {
    const si_host *host;
    int            device;
    char           device_name[256];
    cudaStream_t   stream;          /* every op of exec runs on it, in order */
    uint32_t       kv_type;         /* SI_TYPE_F16 (default) or SI_TYPE_F32  */
    void          *ws;              /* device workspace of the running op    */
    size_t         ws_size;
    bool           mm_dp4a;         /* knob matmul = dp4a (else f32)         */
    bool           attn_split;      /* knob attn = split (else simple)       */
    bool           gdn_chunked;     /* knob gdn_prefill = chunked (else seq) */
    int            n_sm;            /* multiprocessors of the device         */
    /* ATTN split partials (device), grown on demand after a stream sync. */
    float         *attn_part;
    size_t         attn_part_cap;
    /* GET_ROWS id errors: device words [set, id, index, n_rows] written by
     * the kernel, read back (into flag_host, pinned) at sync/download. */
    unsigned      *flag_dev;
    unsigned      *flag_host;
    bool           flag_pending;    /* a GET_ROWS ran since the last check   */
    /* Pinned staging for the small per-op uploads (positions, sequence
     * runs): from pinned memory cudaMemcpyAsync never waits for the stream.
     * Bump-allocated within an exec; pin_ev marks the last copy out of it. */
    uint8_t       *pin;
    size_t         pin_cap, pin_used;
    cudaEvent_t    pin_ev;
    /* Quantised activations of the dp4a path (device): two halves of
     * xq_cap bytes each; half 0 caches the quantised copy of one input
     * (xq_key..: device range [xq_lo, xq_hi) it was made from, valid until
     * an op writes into that range or the exec ends), half 1 is scratch. */
    uint8_t       *xq;
    size_t         xq_cap;
    const void    *xq_key;
    int64_t        xq_in, xq_ncx, xq_stride;
    uintptr_t      xq_lo, xq_hi;
    si_opcheck     oc;              /* the shared op checks, set up by open() */
};

struct si_buf {
    void    *dev;
    uint64_t nbytes;
};

struct si_kv {
    si_kv_desc d;
    bool       f16;
    uint32_t   elem;                /* bytes per element                     */
    /* K and V: [layer][seq][ctx][kv_head][head_dim] */
    uint8_t   *k, *v;
    uint64_t   layer_bytes;         /* bytes of one layer of K (or V)        */
    uint32_t  *len;                 /* host [layer][seq]: positions filled   */
};

/* Device workspace of at least `bytes` (grown after a stream sync); NULL
 * with err set when it cannot be had.  Valid until the next call. */
void *cu_ws_reserve(si_backend *b, size_t bytes, si_err *err);
/* Pinned host staging of `bytes` for one upload of this exec; NULL with err
 * set when it cannot be had. */
void *cu_pin_reserve(si_backend *b, size_t bytes, si_err *err);
/* Device scratch for quantised activations: both halves >= bytes (grown
 * after a stream sync, which drops the cached copy). */
int  cu_xq_reserve(si_backend *b, size_t bytes, si_err *err);
/* Completes `a` for the attention core (knob, SM count, longest context
 * from the host positions pos[0..a->n)) and points a->part at a large
 * enough split workspace; SI_ENOMEM/SI_EDEVICE with err set otherwise. */
struct cu_attn;
int  cu_attn_prepare(si_backend *b, struct cu_attn *a, const int32_t *pos, si_err *err);
/* SI_ERANGE with the message of the first bad GET_ROWS id since the last
 * check (the stream must be synchronised), else SI_OK. */
int  cu_flag_check(si_backend *b, si_err *err);

/* Fills b->oc: this backend's side of the shared op checks. */
void cu_opcheck_init(si_backend *b);
bool cu_supports(const si_backend *b, const si_op *op);
int  cu_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);

#endif
