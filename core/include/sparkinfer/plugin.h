/* sparkinfer/plugin.h — THE contract between the sparkinfer core and every
 * plugin (.so).  Plugins include only public sparkinfer headers and link
 * nothing from the core: every service they need is lent through si_host.
 *
 * ---- Versioning -----------------------------------------------------------
 * SI_ABI_MAJOR must match exactly; a plugin built against another major is
 * refused with both numbers in the message.  Within a major, every struct and
 * op table below only GROWS AT THE END (each new member is tagged "since 1.N")
 * and carries its own `size`; before touching a member the reader checks
 * `size >= offsetof(member) + sizeof member` (SI_HAS_MEMBER) and treats a
 * missing member as NULL, i.e. "default / not provided".  Enum values are
 * append-only and never renumbered.
 *
 * ---- Ownership ------------------------------------------------------------
 * 1. Whoever creates an object destroys it through the same table:
 *    open/close, buf_alloc/buf_free, kv_create/kv_free, load/unload,
 *    init/fini.  Every destroy function accepts NULL.
 * 2. Descriptor strings and op tables are static storage inside the .so and
 *    stay valid until the core dlclose()s it, which happens only at shutdown
 *    after every object made by that plugin has been destroyed.
 * 3. Pointers passed INTO a call are borrowed for that call only; copy what
 *    you keep.  The exceptions are si_host and si_gguf, which outlive every
 *    object created while they were lent.
 * 4. Memory the core will free must come from host->alloc.  A plugin never
 *    frees core memory.
 * 5. GGUF tensor data is mapped read-only by the core and lent as
 *    si_tensor_info views; plugins copy weights only to upload them.
 * 6. Calls on one si_backend / si_model / kernel state are serialised by the
 *    core.  Plugins keep no mutable globals: state lives in their objects.
 *
 * ---- Errors ---------------------------------------------------------------
 * Fallible calls return SI_OK or a negative SI_E* (status.h) and write one
 * line into the caller's si_err.  Plugins never print, exit or abort on bad
 * input; diagnostics go through host->log.
 */
#ifndef SPARKINFER_PLUGIN_H
#define SPARKINFER_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sparkinfer/status.h>
#include <sparkinfer/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SI_ABI_MAJOR 1   /* exact match required; bump on any incompatible change */
#define SI_ABI_MINOR 4   /* bump when a member is appended to any table below     */
#define SI_ENTRY_SYMBOL "si_plugin_entry"

#if defined(__GNUC__)
#define SI_EXPORT __attribute__((visibility("default")))
#else
#define SI_EXPORT
#endif

/* True when a struct that starts with `uint32_t size` (or the descriptor)
 * is large enough to hold `member`. */
#define SI_HAS_MEMBER(ptr, type, member) \
    ((ptr) != NULL && (ptr)->size >= offsetof(type, member) + sizeof((ptr)->member))

typedef struct si_host        si_host;
typedef struct si_plugin      si_plugin;
typedef struct si_gguf        si_gguf;     /* opaque: a parsed, mapped GGUF (core) */
typedef struct si_backend     si_backend;  /* opaque: made by backend ops->open    */
typedef struct si_buf         si_buf;      /* opaque: backend memory               */
typedef struct si_kv          si_kv;       /* opaque: backend KV cache             */
typedef struct si_model       si_model;    /* opaque: made by model ops->load      */

enum si_kind {
    SI_KIND_BACKEND = 1,
    SI_KIND_MODEL   = 2,
    SI_KIND_KERNEL  = 3,
};

enum si_log_level {
    SI_LOG_ERROR = 0,
    SI_LOG_WARN  = 1,
    SI_LOG_INFO  = 2,
    SI_LOG_DEBUG = 3,
};

/* ===================================================================== */
/* Host services (lent by the core; valid for the whole process life).    */
/* ===================================================================== */
struct si_host {
    uint16_t abi_major;                 /* = the core's SI_ABI_MAJOR */
    uint16_t abi_minor;                 /* = the core's SI_ABI_MINOR */
    uint32_t size;                      /* sizeof(struct si_host) in the core */
    void    *core;                      /* core-private; pass the host back, never touch */

    /* Logging.  `who` is the plugin name.  Thread-safe. */
    void (*log)(const si_host *h, int level, const char *who, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 4, 5)))
#endif
        ;

    /* Memory the core may free later (e.g. strings handed back). */
    void *(*alloc)(const si_host *h, size_t n);
    void  (*free)(const si_host *h, void *p);

    /* Configuration value of `section.key` after --set / environment
     * overrides, or NULL when unset.  Borrowed: valid until shutdown. */
    const char *(*cfg_get)(const si_host *h, const char *section, const char *key);

    /* ---- GGUF views (all borrowed; valid while the si_gguf lives) ---- */
    const char           *(*gguf_path)(const si_gguf *g);
    /* NULL when the key is absent. */
    const si_gguf_value  *(*gguf_get)(const si_gguf *g, const char *key);
    /* Element i of an ARRAY value; SI_ERANGE when i >= n. */
    int                   (*gguf_arr_get)(const si_gguf_value *arr, uint64_t i, si_gguf_value *out);
    uint64_t              (*gguf_n_tensors)(const si_gguf *g);
    const si_tensor_info *(*gguf_tensor_at)(const si_gguf *g, uint64_t i);
    /* NULL when no tensor has that name. */
    const si_tensor_info *(*gguf_tensor)(const si_gguf *g, const char *name);

    /* ---- Quant formats (the core's reference implementation) ---- */
    /* Elements per block and bytes per block; 0 for an unknown type. */
    uint32_t (*type_block_elems)(uint32_t type);
    uint32_t (*type_block_bytes)(uint32_t type);
    const char *(*type_name)(uint32_t type);           /* "q4_K", or NULL */
    /* Reference dequantisation of n elements (n a multiple of the block). */
    int (*dequant)(uint32_t type, const void *src, float *dst, int64_t n, si_err *err);
    /* Reference quantisation; SI_EUNSUPPORTED for types without one. */
    int (*quant)(uint32_t type, const float *src, void *dst, int64_t n, si_err *err);

    /* since 1.1 — Progress of long work (weight upload): `done` of `total`
     * units (bytes) of `what`.  The core draws it on a terminal and stays
     * silent otherwise.  Call with done == total once at the end.  Check
     * SI_HAS_MEMBER(h, si_host, progress) before use. */
    void (*progress)(const si_host *h, const char *what, uint64_t done, uint64_t total);
    /* new members are appended here, and only here */
};

/* ===================================================================== */
/* The descriptor: the one thing a plugin exports.                        */
/* ===================================================================== */
struct si_plugin {
    uint16_t    abi_major;              /* SI_ABI_MAJOR at the plugin's build  */
    uint16_t    abi_minor;              /* SI_ABI_MINOR at the plugin's build  */
    uint32_t    size;                   /* sizeof(struct si_plugin) there      */
    uint32_t    kind;                   /* enum si_kind                        */
    const char *name;                   /* equals the config section's NAME    */
    const char *version;                /* plugin's own version, for humans    */
    const char *description;            /* one line, for `sparkinfer plugins`  */
    /* Optional (NULL = always usable).  "Can I run on this machine?"  Cheap:
     * no allocation, no lasting device context.  Returns 0 when usable,
     * otherwise a negative status with the reason in err. */
    int         (*probe)(const si_host *h, si_err *err);
    /* const struct si_backend_ops / si_model_ops / si_kernel_ops by kind. */
    const void *ops;
    /* Optional escape hatch: a named extension table, or NULL. */
    const void *(*get_ext)(const char *name);
};

/* The entry point.  Returns the static descriptor, or NULL if the plugin
 * refuses this host (e.g. host->abi_major differs). */
typedef const si_plugin *(*si_entry_fn)(const si_host *h);

/* A plugin source ends with exactly one of these.  It fills every version
 * field from this header, so they cannot be forgotten or wrong. */
#define SI_PLUGIN_DEFINE(kind_, name_, version_, description_, probe_, ops_, get_ext_) \
    static const si_plugin si_plugin_desc_ = {                                     \
        .abi_major = SI_ABI_MAJOR,                                                 \
        .abi_minor = SI_ABI_MINOR,                                                 \
        .size = sizeof(si_plugin),                                                 \
        .kind = (kind_),                                                           \
        .name = (name_),                                                           \
        .version = (version_),                                                     \
        .description = (description_),                                            \
        .probe = (probe_),                                                         \
        .ops = (ops_),                                                             \
        .get_ext = (get_ext_),                                                     \
    };                                                                             \
    SI_EXPORT const si_plugin *si_plugin_entry(const si_host *h);                  \
    const si_plugin *si_plugin_entry(const si_host *h)                             \
    {                                                                              \
        return (h != NULL && h->abi_major == SI_ABI_MAJOR) ? &si_plugin_desc_     \
                                                           : NULL;                 \
    }

/* ===================================================================== */
/* Backend: memory, weights, KV cache and the compute op set.             */
/* ===================================================================== */

/* A view of backend memory.  ne[0] is contiguous; nb[] are byte strides
 * (nb[0] = element or block size).  For block-quantised types ne[0] is a
 * multiple of the block and nb[1] is the row size in bytes. */
typedef struct si_tensor {
    si_buf  *buf;
    uint64_t offset;                    /* bytes into buf                  */
    uint32_t type;                      /* enum si_type                    */
    uint32_t ndim;
    int64_t  ne[SI_MAX_DIMS];
    uint64_t nb[SI_MAX_DIMS];
} si_tensor;

/* Operation kinds.  Append-only.  Shapes use ggml order [ne0, ne1, ...];
 * "n" is the number of tokens in the batch; activations are F32 unless
 * said otherwise. */
enum si_op_kind {
    SI_OP_NONE     = 0,
    SI_OP_GET_ROWS = 1,  /* dst[H,n] = rows src[1](I32 ids [n]) of src[0] (weight [H,V], any type);
                          * since 1.3 the ids' nb[0] may be any multiple of 4 (strided ids)      */
    SI_OP_MATMUL   = 2,  /* dst[out,n] = src[0](weight [in,out], any type) x src[1][in,n]          */
    SI_OP_RMSNORM  = 3,  /* dst = rms(src[0] rows of ne0) * src[1][ne0]; p.norm.eps               */
    SI_OP_ADD      = 4,  /* dst = src[0] + src[1] (same shape)                                     */
    SI_OP_MUL      = 5,  /* dst = src[0] * src[1] (same shape)                                     */
    SI_OP_SWIGLU   = 6,  /* dst = silu(src[0]) * src[1] (same shape)                               */
    SI_OP_ATTN     = 7,  /* gated full attention, see si_attn_params                              */
    SI_OP_GDN      = 8,  /* gated delta net mixer core, see si_gdn_params                         */
    SI_OP_MOE      = 9,  /* routed + shared-expert FFN, see si_moe_params                         */
    SI_OP_TOPK     = 10, /* since 1.2: the K best logits of each row, see si_topk_params          */
    SI_OP_HOST_IDS = 11, /* since 1.4: dst (I32 [n], nb[0] any multiple of 4) = the ids the host
                          * posts (post_ids) after the exec is queued; no src                  */
    SI_OP_KIND_COUNT
};

/* KV cache shape requested by a model (one per loaded model). */
typedef struct si_kv_desc {
    uint32_t size;                      /* sizeof(si_kv_desc) */
    uint32_t n_layer;                   /* layers that own KV (full attention only) */
    uint32_t n_head_kv;
    uint32_t head_dim;
    uint32_t n_seq;                     /* sequence slots                           */
    uint32_t n_ctx;                     /* tokens per sequence                      */
} si_kv_desc;

/* SI_OP_ATTN — for each token t (sequence seq[t], position pos[t]):
 *   src[0] QG [2*n_head*head_dim, n], per head h: query then output gate
 *   src[1] K  [n_head_kv*head_dim, n]     src[2] V [n_head_kv*head_dim, n]
 *   src[3] q_norm [head_dim]              src[4] k_norm [head_dim]
 *   q/k RMSNorm per head, NEOX RoPE over the first n_rot dims (YaRN when
 *   yarn_factor > 0), K/V appended to layer `kv_layer` of `kv`, causal
 *   attention over the sequence's cache (GQA: head h reads KV head
 *   h / (n_head/n_head_kv)), scale 1/sqrt(head_dim), output * sigmoid(gate).
 *   dst [n_head*head_dim, n].  pos and seq are host arrays of n entries. */
typedef struct si_attn_params {
    uint32_t n_head, n_head_kv, head_dim, n_rot;
    float    eps, rope_base;
    float    yarn_factor;               /* 0 = no YaRN                       */
    uint32_t yarn_orig_ctx;
    si_kv   *kv;
    uint32_t kv_layer;
    const int32_t *pos;
    const int32_t *seq;
} si_attn_params;

/* SI_OP_GDN — Gated DeltaNet core for n tokens; tokens of one sequence are
 * consecutive and in order.
 *   src[0] u [2*Hk*dk + Hv*dv, n] (attn_qkv output)   src[1] z [Hv*dv, n]
 *   src[2] b [Hv, n]   src[3] a [Hv, n]   src[4] conv taps [conv_k, conv_dim]
 *   src[5] ssm_a [Hv]  src[6] dt bias [Hv]            src[7] ssm_norm [dv]
 *   dst [Hv*dv, n] = gated RMSNorm output (input of ssm_out).
 * `state` holds, per slot s, at byte offset s*state_stride: the conv state
 * f32 [conv_dim][conv_k-1] (oldest first) then the SSM state f32
 * [Hv][dv][dk] (llama.cpp layout, key dim contiguous).  v-head j uses
 * q/k head j % Hk. */
typedef struct si_gdn_params {
    uint32_t n_k_head, n_v_head, head_k_dim, head_v_dim, conv_k;
    float    eps;
    si_buf  *state;
    uint64_t state_offset;              /* of slot 0 inside `state`          */
    uint64_t state_stride;              /* bytes per slot                    */
    const int32_t *seq;                 /* host array: slot of each token    */
} si_gdn_params;

/* SI_OP_MOE — softmax router over n_expert, top-n_used, renormalised,
 * SwiGLU experts, plus the sigmoid-gated shared expert:
 *   src[0] h [H, n]   src[1] router [H, E]
 *   src[2] gate_exps [H, F, E] (or fused gate_up [H, 2F, E] with src[3] NULL)
 *   src[3] up_exps [H, F, E]   src[4] down_exps [F, H, E]
 *   src[5] shexp gate_inp [H] (may be NULL with no shared expert)
 *   src[6] gate_shexp [H, Fs]  src[7] up_shexp [H, Fs]  src[8] down_shexp [Fs, H]
 *   dst [H, n]. */
typedef struct si_moe_params {
    uint32_t n_expert, n_used;
} si_moe_params;

typedef struct si_norm_params {
    float eps;
} si_norm_params;

/* SI_OP_TOPK (since 1.2) — sampling on the device: per row r of src[0]
 * (F32 logits [V, n]), the k best entries after the penalties, so that
 * only 2*k numbers per row cross to the host.
 *   1. NaN counts as -inf.
 *   2. Penalties (core/sample.h stage 1, bit-exact): for each pair j in
 *      [pen_off[r], pen_off[r+1]), the logit l of id pen_id[j] with count
 *      c = pen_count[j], unless it is -inf, becomes
 *        l = l <= 0 ? l * repeat_penalty : l / repeat_penalty;
 *        l = l - ((float)c * frequency_penalty + presence_penalty);
 *      each an IEEE f32 operation rounded to nearest (no fused multiply-
 *      add); a NaN result counts as -inf.  The ids of one row are
 *      distinct and in [0, V).  pen_off NULL: no penalties.
 *   3. Order: larger value first, the lower id on ties (-inf entries
 *      too, so every row has exactly k well-defined entries).
 *   dst F32 [2*k, n]: row r holds the k values best first, then their
 *   k ids as int32 bit patterns.  1 <= k <= min(V, SI_TOPK_MAX).
 *   pen_off (n+1 entries, absolute indices into pen_id/pen_count), pen_id
 *   and pen_count are host arrays, like the ATTN positions. */
#define SI_TOPK_MAX 256

typedef struct si_topk_params {
    uint32_t       k;
    float          repeat_penalty, frequency_penalty, presence_penalty;
    const int32_t *pen_off;
    const int32_t *pen_id;
    const int32_t *pen_count;
} si_topk_params;

#define SI_OP_MAX_SRC 10

typedef struct si_op {
    uint32_t         kind;              /* enum si_op_kind */
    si_tensor        dst;
    const si_tensor *src[SI_OP_MAX_SRC];/* unused entries NULL */
    union {
        si_norm_params norm;
        si_attn_params attn;
        si_gdn_params  gdn;
        si_moe_params  moe;
        si_topk_params topk;            /* since 1.2; no larger than attn  */
    } p;
} si_op;

struct si_backend_ops {
    uint32_t size;                      /* sizeof(struct si_backend_ops) */
    /* Required.  `section` is "backend.NAME"; read knobs via host->cfg_get. */
    int  (*open)(const si_host *h, const char *section, si_backend **out, si_err *err);
    void (*close)(si_backend *b);
    /* Required.  Memory of nbytes; contents undefined. */
    int  (*buf_alloc)(si_backend *b, uint64_t nbytes, si_buf **out, si_err *err);
    void (*buf_free)(si_backend *b, si_buf *buf);
    /* Required.  Host <-> backend copies; synchronous on return, and
     * ordered after every op exec'd before them: a download sees their
     * results (no sync needed between) and reports what failed in them. */
    int  (*upload)(si_backend *b, si_buf *dst, uint64_t off, const void *src, uint64_t n, si_err *err);
    int  (*download)(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, si_err *err);
    /* Optional (NULL = buf_alloc + upload of the raw GGUF bytes).  Uploads a
     * weight in its GGUF type; the backend may repack it and describes the
     * result in *out, whose buffer the caller frees with buf_free. */
    int  (*weight_load)(si_backend *b, const si_tensor_info *w, si_tensor *out, si_err *err);
    /* Required.  KV cache for the full-attention layers of one model. */
    int  (*kv_create)(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err);
    void (*kv_free)(si_backend *b, si_kv *kv);
    /* Required.  Forget sequence `seq` (its length becomes 0). */
    int  (*kv_seq_reset)(si_backend *b, si_kv *kv, uint32_t seq, si_err *err);
    /* Required.  Whether exec can run this op with these shapes/types. */
    bool (*supports)(const si_backend *b, const si_op *op);
    /* Required.  Runs ops in order; results visible after sync. */
    int  (*exec)(si_backend *b, const si_op *ops, size_t n_ops, si_err *err);
    /* Optional (NULL = exec is synchronous). */
    int  (*sync)(si_backend *b, si_err *err);
    /* Optional (NULL = the backend takes no kernel plugins).  Offers a loaded
     * kernel plugin; SI_EREFUSED when it does not fit this backend. */
    int  (*attach_kernel)(si_backend *b, const si_plugin *kernel, const char *section, si_err *err);
    /* since 1.3 — Optional (both or neither; NULL: download only).  A
     * download that does not wait: download_start enqueues the copy of
     * [off, off + n) of src (n <= SI_DOWNLOAD_START_MAX), ordered as
     * download is, and returns; the bytes are in dst once
     * download_wait(ticket) has returned SI_OK, which also reports what
     * failed in the ops before the copy.  dst stays the caller's and must
     * stay valid, unread, until then.  At most SI_DOWNLOADS_IN_FLIGHT
     * copies started and not waited for (one more: SI_EINVAL, nothing
     * enqueued); each ticket is waited for once, in any order. */
    int  (*download_start)(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, uint32_t *ticket,
                           si_err *err);
    int  (*download_wait)(si_backend *b, uint32_t ticket, si_err *err);
    /* since 1.4 — Optional (NULL: the backend runs no SI_OP_HOST_IDS).
     * Ids given after the list that reads them was queued: each
     * SI_OP_HOST_IDS, in exec order, waits on the device for the next
     * post and writes its ids (n of them, as its dst holds, at most
     * SI_SUBMIT_MAX_ROWS) to dst; the ops after it wait for it, so a
     * decode step may be queued before its token is drawn.  The caller
     * posts once for each such op it queued, never more: a post with no
     * op queued to take it is SI_EINVAL (nothing changes).  An op that
     * waits unposted for seconds gives up, writing -1s (GET_ROWS then
     * reports a bad id) rather than hold the device. */
    int  (*post_ids)(si_backend *b, const int32_t *ids, uint32_t n, si_err *err);
    /* new members are appended here, and only here */
};
#define SI_DOWNLOAD_START_MAX  ((uint64_t)64 << 10)
#define SI_DOWNLOADS_IN_FLIGHT 4

/* ===================================================================== */
/* Model family                                                           */
/* ===================================================================== */

/* A backend as lent to a model: its ops table and the open instance. */
typedef struct si_backend_ref {
    const struct si_backend_ops *ops;
    si_backend                  *b;
    const char                  *name;
} si_backend_ref;

typedef struct si_model_info {
    uint32_t size;                      /* sizeof(si_model_info) */
    const char *arch;                   /* "qwen35" ... static or model-owned */
    uint32_t n_vocab, n_embd, n_layer, n_ctx_train;
    uint32_t n_seq_max, n_ctx;          /* what load() provisioned           */
} si_model_info;

/* One forward step: n tokens from one or more sequences.  Tokens of one
 * sequence are consecutive, in position order.  want_logits[i] != 0 asks for
 * token i's logits; they are written in batch order to `logits`
 * (count(want_logits) * n_vocab floats, caller-owned). */
typedef struct si_batch {
    uint32_t       n;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    const uint8_t *want_logits;
} si_batch;

struct si_model_ops {
    uint32_t size;                      /* sizeof(struct si_model_ops) */
    /* Required.  Cheap: looks at general.architecture only. */
    bool (*accepts)(const si_host *h, const si_gguf *g);
    /* Required.  Validates metadata and tensors with precise messages,
     * uploads weights through `be`, provisions n_seq sequences of n_ctx. */
    int  (*load)(const si_host *h, const si_gguf *g, const si_backend_ref *be,
                 uint32_t n_seq, uint32_t n_ctx, si_model **out, si_err *err);
    void (*unload)(si_model *m);
    /* Required. */
    void (*info)(const si_model *m, si_model_info *out);
    /* Required.  Resets one sequence's KV and recurrent state. */
    int  (*seq_reset)(si_model *m, uint32_t seq, si_err *err);
    /* Required. */
    int  (*forward)(si_model *m, const si_batch *batch, float *logits, si_err *err);
    /* since 1.2 — Optional (NULL, or SI_EUNSUPPORTED when the backend has
     * no SI_OP_TOPK: use forward).  forward, except that each wanted row's
     * logits go through SI_OP_TOPK on the backend (tp: k and the penalty
     * parameters; tp->pen_off indexes the WANTED rows, in batch order) and
     * only the result is copied back: vals[count*k] best first, ids[count*k].
     * Check SI_HAS_MEMBER(ops, struct si_model_ops, forward_topk) before use. */
    int  (*forward_topk)(si_model *m, const si_batch *batch, const si_topk_params *tp,
                         float *vals, int32_t *ids, si_err *err);
    /* since 1.3 — Optional (NULL: forward_topk only).  Decode ahead: the
     * host queues the next step before it has read this one's result.
     * topk_submit is forward_topk for a decode step: a batch of one token
     * per sequence (at most SI_SUBMIT_MAX_ROWS), each wanting its logits,
     * tp without penalties, returning once the step is queued;
     * topk_collect gives the oldest queued step's vals[n*k] and ids[n*k]
     * (the same numbers forward_topk gives).  flags SI_SUBMIT_FEED: token
     * i is the best id (ids[i*k]) of the step submitted just before, with
     * the same sequences in the same order and the same k, taken where it
     * is made: the host need not know it (batch->tokens is not read).  At most
     * SI_SUBMITS_IN_FLIGHT steps queued; forward, forward_topk and
     * seq_reset refuse (SI_EINVAL) while any is.  A failed submit or
     * collect leaves the sequence as a failed forward does. */
    int  (*topk_submit)(si_model *m, const si_batch *batch, const si_topk_params *tp, uint32_t flags,
                        si_err *err);
    int  (*topk_collect)(si_model *m, float *vals, int32_t *ids, si_err *err);
    /* since 1.4 — Optional (NULL: no SI_SUBMIT_POST).  A submit with
     * flags SI_SUBMIT_POST (the same sequences and k as the submit just
     * before, as FEED) takes its tokens from the next topk_post (n of
     * them, in [0, vocabulary)), which may come after the previous step
     * is collected: the host draws step t's token from step t's top-K
     * (any sampling) while step t+1 is queued behind the wait for it.
     * The step's own collect comes after its post.  Where the backend
     * has no post_ids the step runs at the post instead (the same
     * numbers, later). */
    int  (*topk_post)(si_model *m, const int32_t *tokens, uint32_t n, si_err *err);
    /* new members are appended here, and only here */
};

#define SI_SUBMIT_FEED       1u
#define SI_SUBMIT_POST       2u
#define SI_SUBMITS_IN_FLIGHT 2
#define SI_SUBMIT_MAX_ROWS   32

/* ===================================================================== */
/* Kernel plugin: replaces one op of one backend.                         */
/* ===================================================================== */
struct si_kernel_ops {
    uint32_t    size;                   /* sizeof(struct si_kernel_ops) */
    const char *backend;                /* name of the backend it extends */
    uint32_t    op;                     /* enum si_op_kind it replaces     */
    /* Required.  `backend_api` is the backend's extension table (from its
     * get_ext), through which the kernel reaches device memory/streams. */
    int  (*init)(const si_host *h, const char *section, const void *backend_api,
                 void **state, si_err *err);
    void (*fini)(void *state);
    /* Required.  False keeps the backend's own implementation for this op. */
    bool (*supports)(void *state, const si_op *op);
    int  (*exec)(void *state, const si_op *op, si_err *err);
    /* new members are appended here, and only here */
};

#ifdef __cplusplus
}
#endif
#endif /* SPARKINFER_PLUGIN_H */
