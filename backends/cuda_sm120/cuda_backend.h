/* backends/cuda_sm120/cuda_backend.h — the plugin's objects, shared by the
 * C files (cuda_sm120.c: objects and memory; cuda_ops.c: supports/exec).
 * Nothing here is visible outside the .so (-fvisibility=hidden). */
#ifndef SI_CUDA_BACKEND_H
#define SI_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <sparkinfer/cuda_ext.h>
#include <sparkinfer/plugin.h>

#include "../common/si_opcheck.h"

#define CU_NAME "cuda_sm120"
/* knob moe_dec_fuse: counters a tail site (cu_moe_tail.ctr_n); a decode
 * of 8 tokens at the 35b-a3b's shapes needs 1024 (gate/up) and 512 */
#define CU_MOE_CTR 4096

/* A kernel plugin attached for one op kind (cuda_kernels.c). */
/* Per-step uploads of an op list, on the host (cuda_h2d.c): each piece
 * rounded to CU_STAGE_ALIGN bytes, the alignment of the pinned staging. */
#define CU_STAGE_ALIGN 16
static inline size_t cu_stage_rnd(size_t n) { return (n + CU_STAGE_ALIGN - 1) & ~(size_t)(CU_STAGE_ALIGN - 1); }
typedef struct cu_upbuf {
    uint8_t *host;                  /* owned (realloc)                      */
    size_t   cap, used;
} cu_upbuf;

typedef struct cu_kernel {
    const struct si_kernel_ops *ops;   /* NULL: the op runs built-in code   */
    void                       *state;
    const char                 *name;  /* the plugin's (static in its .so)  */
} cu_kernel;

/* Knob profile_twice's values, in the order of its value list
 * (cuda_sm120.c): the class of captured units run twice, or EMPTY (an
 * empty launch after every unit). */
enum cu_twice { CU_TWICE_OFF, CU_TWICE_NORM, CU_TWICE_MATMUL, CU_TWICE_GLU, CU_TWICE_MOE, CU_TWICE_EMPTY };

/* The caches of weight copies (w8_cache, cuda_w8cache.c; the regrouped
 * copies of gemv_q6r/q8r, cuda_regroup.c): a device copy `mem` (`bytes`,
 * owned by the cache) of the weight bytes [w, w_end) begins each entry;
 * the entries (esize bytes each, a cache's own struct) live in e[0..n).
 * Functions: cu_wcache_* below. */
typedef struct cu_wcopy {
    const uint8_t *w, *w_end;
    uint8_t       *mem;
    size_t         bytes;
} cu_wcopy;
typedef struct cu_wcache {
    void  *e;
    size_t n, cap, esize;
    size_t bytes;   /* device memory held */
    bool   full;    /* no more entries: the free-memory reserve was reached,
                     * or the KV cache took the room back (cu_wcache_yield);
                     * cleared when memory is freed (a drop, cu_kv_free) */
} cu_wcache;

struct si_backend {
    const si_host *host;
    int            device;
    char           device_name[256];
    cudaStream_t   stream;          /* every op of exec runs on it, in order */
    /* knob moe_overlap (cuda_ops_moe.c moe_overlapped): a second stream that a
     * decode MOE forks its shared expert onto (ev_fork recorded on stream)
     * and joins back (ev_join) before its combine; NULL: no overlap */
    cudaStream_t   side;
    cudaEvent_t    ev_fork, ev_join;
    int            moe_overlap;     /* 0 false, 1 true, 2 batch (>= 2 tokens) */
    uint32_t       kv_type;         /* SI_TYPE_F16 (default), F32 or I8 (paged) */
    uint32_t       kv_pages;        /* knob kv_pages: pool pages (0 = default) */
    void          *ws;              /* device workspace of the running op    */
    size_t         ws_size;
    bool           mm_dp4a;         /* knob matmul = dp4a (else f32)         */
    bool           mm_prefill_mma;  /* knob prefill_mm = mma (else gemv)     */
    bool           gemv_v2;         /* knob gemv = v2 (else v1, cuda_mmq.cu) */
    bool           gemv_fuse;       /* knob gemv_fuse: MATMULs of one input in one v1 launch */
    bool           fuse_norm;       /* knob fuse_norm: ADD+RMSNORM(+int8 copy) in one kernel */
    bool           norm_v2;         /* knob norm = v2 (cuda_elem.cu rms2_kernel) */
    int            norm_tail;       /* knob norm_tail: 0 false, 1 true (<= 8
                                     * columns), 2 one, 3 defer (cuda_ops.c
                                     * mm_norm)                             */
    unsigned      *norm_ctr;        /* norm_tail: blocks done (device, 0
                                     * between launches)                    */
    double        *dn_part;         /* norm_tail = defer: two arrays of
                                     * CU_DN_PART blocks' sums (device),
                                     * used in turn                         */
    int            dn_flip;
    /* norm_tail = defer: the last deferred norm's output, whose values
     * (dn_d[0..dn_ne)) still want the scale of the blocks' sums at
     * dn_sums (cu_xr's fields) while dn_on (cuda_ops.c cu_dn_*); the int8
     * copy of it is slot 0's while xq_key == dn_d. */
    bool           dn_on;
    const double  *dn_sums;
    int64_t        dn_ne;
    float          dn_eps;
    float         *dn_d;
    bool           fuse_gdn_q;      /* knob fuse_gdn_q: GDN's norm kernel makes the int8 copy */
    bool           fuse_attn_q;     /* knob fuse_attn_q: ATTN's combine makes the int8 copy */
    bool           gemv_glu;        /* knob gemv_glu: ffn gate/up + SwiGLU + int8 copy in one launch */
    bool           mm_mma_v2;       /* knob mma_tile = v2 (else v1)          */
    bool           mm_w8;           /* knob mma_weights = i8 (else gguf)     */
    bool           f32_tiled;       /* knob f32_gemm = tiled (else gemv)     */
    int            mm_block_cols;   /* knob mm_block_cols (cuda_matmul.cu)   */
    bool           gemv_quad;       /* knob gemv_quad (cuda_gemvq.cu)        */
    bool           gemv_qe;         /* knob gemv_quad_experts (cuda_gemvq.cu) */
    bool           gemv_qn;         /* knob gemv_quad_cols (cuda_gemvq.cu)   */
    bool           gemv_mma;        /* knob gemv_mma (cuda_gemvm.cu)         */
    bool           gemv_mma_wide;   /* knob gemv_mma_wide: 9..32 columns too */
    bool           gemv_wide_db;    /* knob gemv_wide_db: gx_kernel's x staged a round ahead */
    int            gemv_wide_regs;  /* knob gemv_wide_regs: 0 capped, 1 small, 2 full */
    bool           gemv_wide_split; /* knob gemv_wide_split */
    int            gemv_wide_ring;  /* knob gemv_wide_ring: 0 false, 1 true, 2 kquant */
    bool           gemv_ring_ks8;   /* knob gemv_wide_ring_ks8 */
    int            gemv_narrow;     /* knob gemv_narrow: 0 gm, 1 wide, 2 kquant */
    bool           gemv_rg_cols;    /* knob gemv_regroup_cols */
    int            gemv_mma_cols;   /* knob gemv_mma_cols: 2..8 */
    bool           expert_early;    /* knob expert_early (moe_exec's order)  */
    int            route_fused;     /* knob route_fused (moe_exec's router):
                                     * 0 false, 1 true, 2 batch (2..8 tokens) */
    unsigned      *route_ctr;       /* route_fused: blocks done (device, 0
                                     * between launches)                    */
    bool           moe_dec_fuse;    /* knob moe_dec_fuse (moe_exec's tails)  */
    bool           moe_dec_fuse_gu; /* knob moe_dec_fuse_gu (one gate/up)    */
    bool           moe_sdc;         /* knob moe_sdc (shared down + combine)  */
    bool           moe_persist;     /* knob moe_persist (one-launch MOE)     */
    unsigned      *pm_bar;          /* moe_persist: its grid barrier word
                                     * (device, 0; each launch leaves it so) */
    unsigned long long *pm_prof;    /* knob moe_persist_prof: CU_PM_PROF_N
                                     * device counters, or NULL              */
    bool           pm_said;         /* moe_persist: its first run logged     */
    bool           graph_retry;     /* a knob turned itself off: captures
                                     * that failed are tried again (next exec) */
    unsigned      *moe_ctr;         /* moe_dec_fuse: 2 * CU_MOE_CTR groups'
                                     * counts (device, 0 between launches)  */
    bool           gemv_xs;         /* knob gemv_xsmem (cuda_gemvq.cu)       */
    int            gemv_warps;      /* knob gemv_warps (cuda_gemvq.cu): 4, 8 */
    bool           gemv_st;         /* knob gemv_staged (cuda_gemvq.cu)      */
    int            gemv_st6;        /* knob gemv_staged_q6 (cuda_gemvq.cu):
                                     * 0 false, 1 true, 2 large           */
    bool           gemv_prefetch;   /* knob gemv_prefetch (cu_prefetch_l2)   */
    int            w8_ktile;        /* knob w8_ktile: 64 or 128 (cuda_w8.cu) */
    bool           w8_wgmma;        /* knob w8_wgmma (cuda_w8wg.cu)          */
    bool           w8_wg_pp;        /* knob w8_wg_pingpong (cuda_w8wg.cu)    */
    int            w8_block;        /* knob w8_block: 128 or 32              */
    bool           attn_split;      /* knob attn = split (else simple)       */
    bool           attn_fa;         /* knob attn_prefill = fa (else split)   */
    int            attn_fa_tile;    /* knob attn_fa_tile: 1, 2, 3 (v1..v3)   */
    bool           attn_fa3_ov;     /* knob attn_fa3_overlap (cuda_attn_fa3.cu) */
    bool           attn_gqa;        /* knob attn_gqa = shared (else per_head) */
    bool           attn_mma;        /* knob attn_mma (cuda_attn_mma.cu)      */
    int            attn_ring;       /* knob attn_ring: 0, 1, 2 (cuda_attn_ring.cu) */
    bool           attn_ring_ahead; /* knob attn_ring_pages = ahead          */
    int            attn_ring_chains; /* knob attn_ring_chains: 1 or 2        */
    bool           upload_staged;   /* knob upload_staged (cuda_upload)      */
    bool           download_pinned; /* knob download_pinned (cuda_download)  */
    /* Knob h2d_early (cuda_h2d.c): the exec's ATTN/GDN uploads, copied
     * once before its first op into up_dev (owned, grown after a sync);
     * op up_ops[i]'s at up_dev + up_off[i] (SIZE_MAX: it copies its own).
     * up_ops is NULL outside cu_up_begin .. cu_up_end. */
    bool           h2d_early;
    cu_upbuf       up;
    uint8_t       *up_dev;
    size_t         up_dev_cap;
    const si_op   *up_ops;
    size_t         up_n;
    size_t        *up_off;
    size_t         up_off_cap;
    int            smem_blk, smem_sm; /* opt-in shared memory a block / an SM */
    bool           gdn_rows;        /* knob gdn_rows (cuda_gdn_rows.cu)      */
    bool           gdn_chunked;     /* knob gdn_prefill = chunked (else seq) */
    bool           gdn_tc;          /* knob gdn_tc (cuda_gdn_tc.cu)          */
    bool           gdn_fused;       /* knob gdn_dec = fused (cuda_gdn_rows.cu
                                     * fused_kernel; false without clusters) */
    bool           gdn_early;       /* knob gdn_early (cuda_gdn_rows.cu fused_kernel) */
    int            n_sm;            /* multiprocessors of the device         */
    int            attn_split_bps;  /* knob attn_split_blocks (cuda_attn.cu) */
    bool           attn_split_ctx;  /* knob attn_split_len = context        */
    /* ATTN split partials (device), grown on demand after a stream sync. */
    float         *attn_part;
    size_t         attn_part_cap;
    /* GET_ROWS id errors: device words [set, id, index, n_rows] written by
     * the kernel, read back (into flag_host, pinned) at sync/download. */
    unsigned      *flag_dev;
    unsigned      *flag_host;
    bool           flag_pending;    /* a GET_ROWS ran since the last check   */
    /* download_start's copies in flight (cuda_sm120.c): pinned landing
     * space (SI_DOWNLOAD_START_MAX bytes and the error flag's 4 words
     * each, allocated at the first start; download_pinned's downloads
     * use them too), an event after each copy; a ticket is the slot's
     * index and its generation. */
    struct cu_dl_slot {
        uint8_t    *host;
        unsigned   *flag;
        cudaEvent_t ev;
        void       *dst;
        uint64_t    n;
        uint32_t    gen;
        bool        busy, flagged;
    } dl[SI_DOWNLOADS_IN_FLIGHT];
    uint8_t       *dl_pin;
    /* SI_OP_HOST_IDS (cuda_ops.c, si_cu_host_ids): the ring of posts,
     * mapped (host and device views), the device's count of posts taken,
     * and the host's counts: ops queued (op by op, or in a launched graph)
     * and posts given; post_ids refuses a post no queued op would take. */
    struct cu_post_slot *post_ring, *post_ring_dev;
    unsigned      *post_ctr;
    uint64_t       post_queued, post_given;
    /* Pinned staging for the small per-op uploads (positions, sequence
     * runs) and small upload() calls between execs: from pinned memory
     * cudaMemcpyAsync never waits for the stream.  Bump-allocated; pin_ev
     * marks the last copy out of it, and the next exec waits on it before
     * starting over. */
    uint8_t       *pin;
    size_t         pin_cap, pin_used;
    cudaEvent_t    pin_ev;
    /* Quantised activations of the int8 paths (device): two halves of
     * xq_cap bytes each; half 0 caches the quantised copy of one input
     * (xq_key..: device range [xq_lo, xq_hi) it was made from, valid until
     * an op writes into that range or the exec ends), half 1 is scratch. */
    uint8_t       *xq;
    size_t         xq_cap;
    int            xq_swap;         /* 1: the halves trade places (slot s is
                                     * half s ^ 1; cu_xq_parts)             */
    const void    *xq_key;
    int64_t        xq_in, xq_ncx, xq_stride;
    int            xq_blk;          /* its scale block: 32 or 128 (i8 GEMM)  */
    uintptr_t      xq_lo, xq_hi;
    /* mma_weights = i8: one weight matrix requantised to int8 (cuda_w8.cu;
     * when w8_cache has none), rewritten by every such product; its
     * activations go through xq like the dp4a path's. */
    uint8_t       *w8;
    size_t         w8_cap;
    /* knob w8_cache (cuda_w8cache.c): int8 weights kept after first use */
    bool           w8_cache_on;
    bool           pdl;             /* knob pdl (cuda_launch.cuh)            */
    cu_wcache      w8c;             /* its entries (cuda_w8cache.c)          */
    bool           gemv_q6r;        /* knob gemv_q6r (cuda_regroup.c)        */
    bool           gemv_q8r;        /* knob gemv_q8r (cuda_regroup.c)        */
    cu_wcache      rg;              /* the regrouped copies (cuda_regroup.c) */
    si_opcheck     oc;              /* the shared op checks, set up by open() */
    struct cu_prof *prof;           /* knob profile = true (cuda_prof.c)     */
    /* Knob graph = true (cuda_graph.c): the cache of captured op lists
     * (NULL when off).  ws_gen counts reallocations of ws, xq and
     * attn_part: a graph captured under another generation is stale.
     * While `capturing`, the ops' h2d staging comes from the graph's own
     * pinned buffer (cap_stage) and nothing may sync the stream: a
     * workspace that would have to grow fails the op (cap_grow set). */
    struct cu_graphs *graphs;
    uint64_t       ws_gen;
    bool           capturing;
    int            prof_twice;      /* knob profile_twice: a cu_twice
                                     * (cu_exec_ops)                        */
    size_t         n_twice;         /* units doubled in the capture under way */
    bool           cap_grow;
    uint8_t       *cap_stage;
    size_t         cap_stage_cap, cap_stage_used;
    si_cuda_ext    ext;             /* lent to kernel plugins                */
    cu_kernel      kern[SI_OP_KIND_COUNT];
};

struct si_buf {
    void    *dev;
    uint64_t nbytes;
    bool     borrowed;              /* buf_wrap()ped kernel memory: not ours */
};

/* The KV cache (cuda_kv.c says how the paged form works). */
struct si_kv {
    si_kv_desc d;
    bool       f16;
    bool       i8;                  /* paged int8 (kv_type = i8)             */
    uint32_t   elem;                /* bytes per element                     */
    /* K and V, dense: [layer][seq][ctx][kv_head][head_dim];
     * i8: int8 [layer][page][kv_head][SI_KV_PAGE][head_dim] */
    uint8_t   *k, *v;
    uint64_t   layer_bytes;         /* bytes of one layer of K (or V)        */
    uint32_t  *len;                 /* host [layer][seq]: positions filled   */
    /* i8 only: */
    float     *ks, *vs;             /* device [layer][page][kv_head][SI_KV_PAGE] */
    uint64_t   layer_scales;        /* scales of one layer of K (or V)       */
    uint32_t   n_pages;             /* pool size, pages per layer            */
    uint32_t   max_pages;           /* per sequence: ceil(n_ctx / SI_KV_PAGE) */
    int32_t   *table;               /* device [n_seq][max_pages] page ids    */
    int32_t   *table_host;          /* its host mirror                       */
    uint32_t  *seq_pages;           /* host [n_seq]: pages owned (a prefix of the row) */
    int32_t   *free_list;           /* host stack of free page ids           */
    uint32_t   n_free;
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
int  cu_w8_reserve(si_backend *b, size_t bytes, si_err *err);
struct cu_mm;   /* cuda_internal.h */
/* The cached int8 copy of m's weights at scale block g (made now on a
 * miss, when memory allows): *wq, *ws on the device, or both NULL (not
 * cached: requantise into the scratch).  Errors only for a failed
 * launch. */
int  cu_w8_cache_get(si_backend *b, const struct cu_mm *m, int g, const int8_t **wq, const float **ws, si_err *err);
/* A cache of weight copies (cu_wcache above; cuda_w8cache.c):
 * cu_wcache_mem allocates a new copy's `bytes` where the free-memory
 * reserve allows (1/16 of the device, at least 1 GiB, left for the KV
 * cache and scratch), else closes the cache (full) with one log
 * line naming `knob` and what products do `after`, and returns NULL;
 * cu_wcache_add makes room for one more entry of esize bytes and returns
 * it, its cu_wcopy set from `c` (the caller fills the rest), NULL without
 * host memory (the caller frees c.mem); cu_wcache_drop frees the entries
 * overlapping device memory [lo, hi) (the stream synced first, captured
 * graphs made stale: ws_gen); cu_wcache_yield frees every entry and takes
 * no more (the KV cache needs the room), returning the bytes freed;
 * cu_wcache_free releases it all at close. */
uint8_t *cu_wcache_mem(si_backend *b, cu_wcache *c, size_t bytes, const char *knob, const char *after);
void  *cu_wcache_add(cu_wcache *c, size_t esize, cu_wcopy copy);
void   cu_wcache_drop(si_backend *b, cu_wcache *c, const void *lo, const void *hi);
size_t cu_wcache_yield(si_backend *b, cu_wcache *c);
void   cu_wcache_free(cu_wcache *c);
/* The bytes a product reads of weights of `rows` rows (`in` elements of
 * `type` each, `row_bytes` apart): from row 0 to the end of the last row's
 * data (cuda_w8cache.c). */
uint64_t cu_weight_span(uint32_t type, int64_t in, int64_t rows, uint64_t row_bytes);
/* Knobs gemv_q6r / gemv_q8r (cuda_regroup.c): whether the knob of `type`
 * is on; the regrouped copy (CU_TYPE_Q6R / CU_TYPE_Q8R) of the bytes
 * [w, w + bytes) of a Q6_K / Q8_0 weight, a whole number of groups starting
 * on one: device memory the cache owns (valid until cu_wcache_drop of its
 * range), made now on a miss where the knob, memory and capture allow, or
 * NULL (read the GGUF rows). */
bool cu_rg_on(const si_backend *b, uint32_t type);
const uint8_t *cu_rg_get(si_backend *b, uint32_t type, const uint8_t *w, uint64_t bytes);
/* Completes `a` for the attention core (knob, SM count, longest context
 * from the host positions pos[0..a->n)) and points a->part at a large
 * enough split workspace; SI_ENOMEM/SI_EDEVICE with err set otherwise. */
struct cu_attn;
int  cu_attn_prepare(si_backend *b, struct cu_attn *a, const int32_t *pos, si_err *err);
/* SI_ERANGE with the message of the first bad GET_ROWS id since the last
 * check (the stream must be synchronised), else SI_OK. */
int  cu_flag_check(si_backend *b, si_err *err);

/* Knob profile = true (cuda_prof.c): device time per kind of op, logged at
 * close.  before() is called before op i of an exec of n_ops, after() once
 * the exec has enqueued its ops (it waits for them).  No-ops when off. */
typedef struct cu_prof cu_prof;
int  cu_prof_open(si_backend *b, si_err *err);
void cu_prof_before(si_backend *b, size_t i, size_t n_ops, const si_op *op);
void cu_prof_after(si_backend *b);
void cu_prof_close(si_backend *b);
/* knob moe_persist_prof: logs the counters' means (INFO), at close */
void cu_pm_prof_log(si_backend *b);

/* CUDA graphs (cuda_graph.c).  cu_graph_exec runs a whole exec (after its
 * pages were reserved) as a graph: SI_OK or an error when it did,
 * CU_GRAPH_DECLINED when the caller must run it op by op.
 * cu_graph_stage: h2d staging while capturing. */
typedef struct cu_graphs cu_graphs;
#define CU_GRAPH_DECLINED 1
int   cu_graph_open(si_backend *b, bool timing, si_err *err);
void  cu_graph_close(si_backend *b);
int   cu_graph_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);
void *cu_graph_stage(si_backend *b, size_t bytes, si_err *err);
/* Per-step uploads (cuda_h2d.c).  cu_up_op appends op's (ATTN: pos then
 * seq, n int32 each; GDN: its sequence runs with their first chunks for
 * chunk_min, n_runs/max_len set): 1, 0 where op has none (not ATTN/GDN,
 * no tokens), -1 where it cannot (NULL arrays, invalid runs, no memory;
 * nothing appended).  cu_up_begin (knob h2d_early; a no-op when off)
 * enqueues one copy of the whole list's before its first op;
 * cu_up_dev: op's uploads on the device, or NULL where op must copy its
 * own; cu_up_end forgets the list. */
void cu_upbuf_free(cu_upbuf *u);
/* Grows a scratch buffer of the device (*p, *cap bytes) to hold `bytes`
 * (half as much again, so a slowly growing need does not reallocate each
 * time), after the stream drains: kernels of earlier ops may still read
 * the old one; captured graphs go stale (ws_gen).  Fails (and flags
 * cap_grow) while a graph is being captured.  (cuda_sm120.c) */
int  cu_scratch_grow(si_backend *b, uint8_t **p, size_t *cap, size_t bytes, const char *what, si_err *err);
int  cu_up_op(cu_upbuf *u, const si_op *op, int chunk_min, int64_t *n_runs, int64_t *max_len);
int  cu_up_chunk_min(const si_backend *b);   /* a GDN op's chunk_min (knob gdn_prefill) */
int  cu_up_begin(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);
void cu_up_end(si_backend *b);
const uint8_t *cu_up_dev(const si_backend *b, const si_op *op);
/* Host side of the ATTN ops of a list (cuda_ops_attn.c): checks every op's
 * positions and advances the KV lengths as attn_exec does (all or
 * nothing: on an error nothing stays advanced); `checked`: the ops passed
 * si_oc_check already.  cu_attn_uncommit takes back the advance of the
 * ATTN ops among ops[0, upto). */
int   cu_attn_commit_all(si_backend *b, const si_op *ops, size_t n_ops, bool checked, si_err *err);
void  cu_attn_uncommit(const si_op *ops, size_t n_ops, size_t upto);
/* The sequence runs of a GDN op (n > 0 tokens; runs has room for n),
 * with the checks gdn_exec makes. */
struct cu_gdn_run;
int   cu_gdn_runs(const si_op *op, struct cu_gdn_run *runs, int64_t *n_runs, int64_t *max_len, si_err *err);

/* Kernel plugins (cuda_kernels.c).  init() fills b->ext (after device,
 * stream and n_sm are set); fini() calls every kernel's fini (the stream
 * must be idle).  cu_kernel_for: the attached kernel that takes `op`, or
 * NULL for the built-in code. */
void cu_kernels_init(si_backend *b, int cc_major, int cc_minor);
int  cu_attach_kernel(si_backend *b, const si_plugin *k, const char *section, si_err *err);
void cu_kernels_fini(si_backend *b);
const cu_kernel *cu_kernel_for(const si_backend *b, const si_op *op);
/* One op: checks, then the attached kernel when `use_kernel` and it takes
 * the op, else the built-in code; then the bookkeeping every op needs. */
int  cu_exec_one(si_backend *b, const si_op *op, bool use_kernel, si_err *err);
/* Runs ops [i, i + *n) as one unit: a fused ADD+RMSNORM(+int8
 * quantisation) or SWIGLU+int8 (knob fuse_norm), a group of MATMULs of one
 * input (knob gemv_fuse), or op i alone; what graph capture runs (the
 * op-by-op loop in cuda_ops.c decides the unit the same way). */
int  cu_exec_ops(si_backend *b, const si_op *ops, size_t n_ops, size_t i, size_t *n, si_err *err);
/* Knob norm_tail = defer: a pending deferred norm's output made whole (a
 * no-op when none is), as the end of every list does (cuda_ops.c). */
int  cu_dn_resolve(si_backend *b, si_err *err);
/* cuda_ext's attn_prepare (cuda_ops_attn.c). */
int  cu_attn_view(si_backend *b, const si_op *op, si_cuda_attn_view *view, si_err *err);

/* KV cache (cuda_kv.c): the ops of the table, and, for the paged cache,
 * the pages an ATTN op needs: every sequence s must own the pages of
 * positions < len[s] + added[s] (len: the op's layer's host lengths).
 * Takes them from the free list and enqueues the page-table update on the
 * stream; all or nothing: SI_ENOMEM naming the sequence, position and
 * pool when the pool cannot serve the whole op. */
int  cu_kv_create(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err);
void cu_kv_free(si_backend *b, si_kv *kv);
int  cu_kv_seq_reset(si_backend *b, si_kv *kv, uint32_t seq, si_err *err);
int  cu_kv_pages_reserve(si_backend *b, si_kv *kv, const uint32_t *len, const uint32_t *added, uint32_t layer,
                         si_err *err);

/* Fills b->oc: this backend's side of the shared op checks. */
void cu_opcheck_init(si_backend *b);
bool cu_supports(const si_backend *b, const si_op *op);
int  cu_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);

#endif
