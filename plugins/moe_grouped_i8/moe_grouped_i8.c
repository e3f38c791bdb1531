/* plugins/moe_grouped_i8/moe_grouped_i8.c — kernel plugin for cuda_sm120:
 * SI_OP_MOE of prefill batches as grouped int8 GEMMs (spec qwen35-gguf.md
 * §3.7; the op's ABI comment in plugin.h).
 *
 * cuda_sm120's own MOE runs every (token, expert) column as its own GEMV,
 * so an expert's weights are streamed once per token that picked it.  Here
 * the batch's assignments are grouped by expert on the device and each
 * expert's weights are read once per 32-row tile:
 *   1. router logits: the backend's own MATMUL (exec_builtin) into our
 *      workspace; softmax / top-k / renormalise: mi8_route;
 *   2. mi8_schedule: counts, tile prefix sums, tile list, row -> (token,
 *      assignment), padded to MI8_BT rows per expert, all on the device;
 *   3. h -> int8 once (the routed and the shared gate/up read it);
 *   4. gate/up on int8 tensor cores with SwiGLU in the epilogue, the
 *      SwiGLU rows to int8, down into one f32 row per assignment;
 *   5. mi8_combine: dst[t] = sum_k w * y (k in order) + shared;
 *   6. shared expert: its gate_inp through exec_builtin, its FFN through
 *      the same GEMM kernels with a dense schedule (every token, expert 0).
 * Two GEMM paths (knob weights):
 *   i8 (default): cuda_sm120's w8 scheme (moe_i8_w8.cu): the experts'
 *     weights requantised once to int8 per (row, 128) with cuda_w8.cuh's
 *     rounding, kept in plugin-owned device memory keyed by the weight's
 *     device pointer (wq_get below) while at least 1/16 of the device
 *     memory (and >= 1 GiB) stays free, else requantised per call into the
 *     workspace; activations per (row, 128); 128 x 64 tiles.  A second
 *     rounding of the weights (cuda_w8.cu's header says how much).  Shapes
 *     with H, F or the shared F not multiples of 128 take the gguf path.
 *   gguf: the exact path (moe_i8_gemm.cu): the GGUF blocks decoded in the
 *     GEMM, activations per 32 with the cpu backend's rounding, the scale
 *     terms per 32 in f32: the cpu backend's int8 product term for term.
 * supports() declines (the backend's own path runs) below `min_tokens`
 * tokens, for weight types other than Q8_0/Q4_K/Q5_K/Q6_K and for shapes
 * the kernels do not tile.
 *
 * Knobs, [kernel.moe_grouped_i8]: min_tokens (integer >= 1, default 33);
 * weights = i8 | gguf (default i8); ktile = 128 | 64 (default 128): the
 * i8 GEMMs' k bytes a cp.async stage (64 has twice the block barriers;
 * same bits; 128 falls back to 64 where a block's shared memory does not
 * hold it, e.g. sm_120); wgmma = true | false (default true): the i8
 * GEMMs on Hopper's warpgroup MMA (moe_i8_wg.cu, a producer warpgroup and
 * two consumer warpgroups, 128-byte k-tiles whatever ktile says) where
 * they run: an sm_90 device and sm_90a code in the fatbin (mi8_wg_init
 * asks once, at init; elsewhere the mma.sync kernels run, silently).  The
 * same bits as the mma.sync kernels (moe_i8_w8.cu), which false runs.
 * Includes public headers (plugin.h, cuda_sm120's cuda_ext.h) and, in
 * moe_i8_w8.cu and moe_i8_wg.cu only, cuda_sm120's device headers of the
 * w8 scheme. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <sparkinfer/cuda_ext.h>
#include <sparkinfer/plugin.h>

#include "../common/kernel_knob.h"

#include "moe_i8.h"

#define MI8_NAME      "moe_grouped_i8"
#define MI8_ALIGN     256
/* (H200, Qwen3.6-35B-A3B-shape decode at ctx 4096, the backend's own
 * MOE against this plugin's: 16 tokens 1,381.0 tok/s vs 911.5, 32
 * tokens 1,778.3 vs 1,412.2, 64 tokens 1,740.9 vs 1,827.8: batches of up
 * to 32 stay there) */
#define MI8_MIN_TOKENS_DEFAULT 33
#define MI8_GIB       ((size_t)1 << 30)

enum { MI8_WEIGHTS_I8, MI8_WEIGHTS_GGUF };
static const char *const mi8_weights_names[] = { "i8", "gguf" };
static const char *const mi8_ktile_names[] = { "128", "64" };
static const char *const mi8_bool_names[] = { "true", "false" };

/* An expert tensor requantised to int8 per (row, 128) (weights = i8): q
 * [n_exp * rows][in], then s [n_exp * rows][in / 128], then 3 words of
 * fingerprint (mi8_w8_weights), one allocation.  Keyed by the GGUF
 * weight's device pointer and shape; the fingerprint catches other bytes
 * loaded at that address later. */
typedef struct mi8_wq {
    const void *key;
    uint32_t    type;
    int64_t     in, rows, n_exp;
    void       *mem;
} mi8_wq;

typedef struct mi8_state {
    const si_host     *h;
    const si_cuda_ext *x;
    int64_t            min_tokens;
    int                weights;     /* MI8_WEIGHTS_*                       */
    int                kt;          /* knob ktile: the w8 GEMMs' k bytes a
                                     * stage, 128 or 64                    */
    bool               wg;          /* knob wgmma, and the device runs it:
                                     * the w8 GEMMs of moe_i8_wg.cu        */
    void              *ws;          /* device workspace, grown on demand   */
    size_t             ws_bytes;
    si_buf            *ws_buf;      /* ws wrapped for exec_builtin's ops   */
    mi8_wq            *wq;          /* the int8 copies kept (weights = i8) */
    size_t             n_wq, cap_wq;
    size_t             wq_bytes;    /* their device memory                 */
    bool               wq_full;     /* a copy did not fit (logged once)    */
} mi8_state;

/* ---- init / fini ---------------------------------------------------------- */

static int mi8_init(const si_host *h, const char *section, const void *backend_api, void **state, si_err *err)
{
    const si_cuda_ext *x = backend_api;
    *state = NULL;
    if (h == NULL || section == NULL)
        return si_err_set(err, SI_EINVAL, MI8_NAME ": init without host or section");
    /* the knobs first: a bad value is reported whatever the backend */
    int64_t min_tokens;
    int rc = si_kernel_min_tokens(h, MI8_NAME, section, MI8_MIN_TOKENS_DEFAULT, &min_tokens, err);
    if (rc != SI_OK)
        return rc;
    int weights;
    rc = si_kernel_choice(h, MI8_NAME, section, "weights", mi8_weights_names, 2, MI8_WEIGHTS_I8, &weights, err);
    if (rc != SI_OK)
        return rc;
    int ktile;
    rc = si_kernel_choice(h, MI8_NAME, section, "ktile", mi8_ktile_names, 2, 0, &ktile, err);
    if (rc != SI_OK)
        return rc;
    int wgmma;
    rc = si_kernel_choice(h, MI8_NAME, section, "wgmma", mi8_bool_names, 2, 0, &wgmma, err);
    if (rc != SI_OK)
        return rc;
    if (x == NULL || x->major != SI_CUDA_EXT_MAJOR || !SI_HAS_MEMBER(x, si_cuda_ext, buf_unwrap))
        return si_err_set(err, SI_EABI, MI8_NAME ": the backend's cuda_ext table is missing or of major %u (want %d)",
                          x ? x->major : 0u, SI_CUDA_EXT_MAJOR);
    if (x->stream == NULL || x->dev_ptr == NULL || x->exec_builtin == NULL || x->buf_wrap == NULL ||
        x->buf_unwrap == NULL)
        return si_err_set(err, SI_EABI, MI8_NAME ": the backend's cuda_ext table lacks a function");
    if (x->cc_major < 8)   /* mma.sync m16n8k32 s8 needs sm_80 or later */
        return si_err_set(err, SI_EUNSUPPORTED, MI8_NAME ": compute capability %d.%d has no int8 mma.m16n8k32",
                          x->cc_major, x->cc_minor);
    cudaError_t e = cudaSetDevice(x->device);
    if (e != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, MI8_NAME ": cudaSetDevice(%d): %s", x->device, cudaGetErrorString(e));
    mi8_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return si_err_set(err, SI_ENOMEM, MI8_NAME ": out of host memory");
    st->h = h;
    st->x = x;
    st->min_tokens = min_tokens;
    st->weights = weights;
    st->kt = ktile == 0 ? 128 : 64;
    int wg_avail = 0;
    if (weights == MI8_WEIGHTS_I8 && wgmma == 0 &&
        (e = (cudaError_t)mi8_wg_init(x->cc_major, x->stream(x->b), &wg_avail)) != cudaSuccess) {
        cudaGetLastError();   /* (not the next op's error) */
        if (h->log != NULL)
            h->log(h, SI_LOG_WARN, MI8_NAME, "wgmma: %s; using the mma.sync GEMMs", cudaGetErrorString(e));
    }
    st->wg = wg_avail != 0;
    *state = st;
    const char *wg_is = st->wg                      ? "true"
                        : wgmma != 0                ? "false"
                        : weights != MI8_WEIGHTS_I8 ? "true (unused: weights = gguf)"
                                                    : "true (not run here: no sm_90 device or no sm_90a code)";
    if (h->log != NULL)
        h->log(h, SI_LOG_INFO, MI8_NAME,
               "grouped int8 MOE for batches of >= %lld tokens, weights %s, ktile %s, wgmma %s", (long long)min_tokens,
               mi8_weights_names[weights], mi8_ktile_names[ktile], wg_is);
    return SI_OK;
}

static void ws_release(mi8_state *st)
{
    if (st->ws == NULL)
        return;
    /* work queued on the stream may still read the workspace */
    cudaStreamSynchronize((cudaStream_t)st->x->stream(st->x->b));
    if (st->ws_buf != NULL)
        st->x->buf_unwrap(st->x->b, st->ws_buf);
    cudaFree(st->ws);
    st->ws = NULL;
    st->ws_buf = NULL;
    st->ws_bytes = 0;
}

static void wq_release(mi8_state *st)
{
    if (st->n_wq > 0)   /* a requantisation may still be queued */
        cudaStreamSynchronize((cudaStream_t)st->x->stream(st->x->b));
    for (size_t i = 0; i < st->n_wq; i++)
        cudaFree(st->wq[i].mem);
    free(st->wq);
    st->wq = NULL;
    st->n_wq = st->cap_wq = 0;
    st->wq_bytes = 0;
}

static void mi8_fini(void *state)
{
    mi8_state *st = state;
    if (st == NULL)
        return;
    ws_release(st);
    wq_release(st);
    free(st);
}

static int ws_reserve(mi8_state *st, size_t bytes, si_err *err)
{
    if (bytes <= st->ws_bytes)
        return SI_OK;
    ws_release(st);
    size_t want = bytes + bytes / 4;   /* headroom: fewer regrowths while batch sizes vary */
    cudaError_t e = cudaMalloc(&st->ws, want);
    if (e != cudaSuccess) {
        cudaGetLastError();   /* or the next op's launch check reports this failure as its own */
        st->ws = NULL;
        return si_err_set(err, SI_ENOMEM, MI8_NAME ": cudaMalloc of %zu bytes: %s", want, cudaGetErrorString(e));
    }
    int rc = st->x->buf_wrap(st->x->b, st->ws, want, &st->ws_buf, err);
    if (rc != SI_OK) {
        cudaFree(st->ws);
        st->ws = NULL;
        return rc;
    }
    st->ws_bytes = want;
    return SI_OK;
}

/* ---- supports --------------------------------------------------------------- */

static int64_t ne_(const si_tensor *t, int i) { return (uint32_t)i < t->ndim ? t->ne[i] : 1; }

static bool wtype_ok(uint32_t type, uint32_t *blk, uint32_t *bytes, uint64_t *align)
{
    switch (type) {
    case SI_TYPE_Q8_0: *blk = 32;  *bytes = 34;  *align = 2; return true;
    case SI_TYPE_Q4_K: *blk = 256; *bytes = 144; *align = 4; return true;
    case SI_TYPE_Q5_K: *blk = 256; *bytes = 176; *align = 4; return true;
    case SI_TYPE_Q6_K: *blk = 256; *bytes = 210; *align = 2; return true;
    default: return false;
    }
}

/* A weight [in, out, ne2] of a type the GEMMs decode, with rows and
 * experts at the alignment their loads need; in within the smem budget. */
static bool weight_ok(const mi8_state *st, const si_tensor *t, int64_t in, int64_t out, int64_t ne2)
{
    uint32_t blk, bytes;
    uint64_t al;
    if (t == NULL || !wtype_ok(t->type, &blk, &bytes, &al))
        return false;
    if (ne_(t, 0) != in || ne_(t, 1) != out || ne_(t, 2) != ne2 || ne_(t, 3) != 1)
        return false;
    if (in % blk != 0 || in % 32 != 0 || in > MI8_MAX_KIN)
        return false;
    const uint64_t row = (uint64_t)(in / blk) * bytes;
    if (t->nb[1] < row || t->nb[1] % al != 0 || (ne2 > 1 && (t->nb[2] < t->nb[1] * (uint64_t)out || t->nb[2] % al != 0)))
        return false;
    return (uintptr_t)st->x->dev_ptr(st->x->b, t) % al == 0;
}

static bool f32_ok(const si_tensor *t, int64_t ne0, int64_t ne1)
{
    return t != NULL && t->type == SI_TYPE_F32 && ne_(t, 0) == ne0 && ne_(t, 1) == ne1 && ne_(t, 2) == 1 &&
           ne_(t, 3) == 1 && t->nb[0] == 4 && (ne1 == 1 || (t->nb[1] >= 4 * (uint64_t)ne0 && t->nb[1] % 4 == 0));
}

typedef struct mi8_dims {
    int64_t n, H, E, K, F, Fs;
    bool    fused, shared;
} mi8_dims;

static void dims_of(const si_op *op, mi8_dims *d)
{
    d->n = ne_(op->src[0], 1);
    d->H = op->src[0]->ne[0];
    d->E = op->p.moe.n_expert;
    d->K = op->p.moe.n_used;
    d->fused = op->src[3] == NULL;
    d->F = d->fused ? ne_(op->src[2], 1) / 2 : ne_(op->src[2], 1);
    d->shared = op->src[5] != NULL;
    d->Fs = d->shared && op->src[6] != NULL ? ne_(op->src[6], 1) : 0;
}

static bool mi8_supports(void *state, const si_op *op)
{
    const mi8_state *st = state;
    if (st == NULL || op == NULL || op->kind != SI_OP_MOE || op->src[0] == NULL || op->src[1] == NULL ||
        op->src[2] == NULL || op->src[4] == NULL)
        return false;
    mi8_dims d;
    dims_of(op, &d);
    const si_tensor *const *s = op->src;
    if (d.n < st->min_tokens || d.E < 1 || d.E > MI8_MAX_E || d.K < 1 || d.K > d.E || d.F < 32)
        return false;
    if (!f32_ok(s[0], d.H, d.n) || !f32_ok(&op->dst, d.H, d.n) || ne_(s[1], 0) != d.H || ne_(s[1], 1) != d.E)
        return false;
    if (d.fused ? (ne_(s[2], 1) % 2 != 0 || !weight_ok(st, s[2], d.H, 2 * d.F, d.E))
                : (!weight_ok(st, s[2], d.H, d.F, d.E) || !weight_ok(st, s[3], d.H, d.F, d.E) || s[3]->type != s[2]->type))
        return false;
    if (!weight_ok(st, s[4], d.F, d.H, d.E))
        return false;
    if (!d.shared)
        return s[6] == NULL && s[7] == NULL && s[8] == NULL;
    return ne_(s[5], 0) == d.H && ne_(s[5], 1) == 1 && d.Fs >= 32 && weight_ok(st, s[6], d.H, d.Fs, 1) &&
           weight_ok(st, s[7], d.H, d.Fs, 1) && s[7]->type == s[6]->type && weight_ok(st, s[8], d.Fs, d.H, 1);
}

/* ---- exec ------------------------------------------------------------------- */

typedef struct carve {
    size_t used;
} carve;

static size_t take(carve *c, size_t bytes)
{
    size_t at = c->used;
    c->used += (bytes + MI8_ALIGN - 1) & ~(size_t)(MI8_ALIGN - 1);
    return at;
}

/* An F32 [ne0, ne1] tensor at byte `off` of the workspace. */
static si_tensor ws_f32(const mi8_state *st, size_t off, int64_t ne0, int64_t ne1)
{
    const uint64_t r = 4 * (uint64_t)ne0;
    si_tensor t = { .buf = st->ws_buf, .offset = off, .type = SI_TYPE_F32, .ndim = 2, .ne = { ne0, ne1, 1, 1 },
                    .nb = { 4, r, r * (uint64_t)ne1, r * (uint64_t)ne1 } };
    return t;
}

static mi8_w weight(const mi8_state *st, const si_tensor *t, uint64_t first_row)
{
    mi8_w w = { (const uint8_t *)st->x->dev_ptr(st->x->b, t) + first_row * t->nb[1], t->type, t->nb[1],
                ne_(t, 2) > 1 ? t->nb[2] : 0 };
    return w;
}

static int launched(int e, const char *what, si_err *err)
{
    if (e == 0)
        return SI_OK;
    return si_err_set(err, SI_EDEVICE, MI8_NAME ": MOE: %s: launch failed: %s", what, cudaGetErrorString((cudaError_t)e));
}

/* Activation block carved at `off`: q [rows][in], d and s [rows][in/32]. */
typedef struct act_off {
    size_t q, d, s;
} act_off;

static act_off take_act(carve *c, int64_t rows, int64_t in)
{
    act_off a = { take(c, (size_t)(rows * in)), take(c, (size_t)(rows * (in / 32)) * 4),
                  take(c, (size_t)(rows * (in / 32)) * 4) };
    return a;
}

static mi8_act act_at(const mi8_state *st, act_off a)
{
    uint8_t *base = st->ws;
    mi8_act r = { (int8_t *)(base + a.q), (float *)(base + a.d), (float *)(base + a.s) };
    return r;
}

/* ---- weights = i8: the experts' int8 copies ---------------------------------- */

/* One weight tensor of the op as the w8 GEMMs read it: n_exp experts of
 * `rows` rows, `in` wide; q, s once made (cached or in the workspace at
 * `scratch`). */
typedef struct wq_ref {
    const si_tensor *t;
    int64_t          in, rows, n_exp;
    int8_t          *q;
    float           *s;
    size_t           scratch;
} wq_ref;

/* Bytes of an int8 copy with its fingerprint; *s_off: where its scales
 * start (the fingerprint follows them). */
static size_t wq_size(int64_t n_exp, int64_t rows, int64_t in, size_t *s_off)
{
    *s_off = ((size_t)(n_exp * rows * in) + MI8_ALIGN - 1) & ~(size_t)(MI8_ALIGN - 1);
    return *s_off + (size_t)(n_exp * rows * (in / MI8_W8_G)) * 4 + 3 * 4;
}

static uint32_t *wq_point(wq_ref *r, void *mem)
{
    size_t so;
    const size_t end = wq_size(r->n_exp, r->rows, r->in, &so);
    r->q = mem;
    r->s = (float *)((uint8_t *)mem + so);
    return (uint32_t *)((uint8_t *)mem + end - 3 * 4);
}

/* r's copy from the cache, or made into it now (enqueued on the stream,
 * before the GEMMs that read it) when it fits with max(1/16 of the device
 * memory, 1 GiB) left free: the KV cache and the other buffers of a long
 * run must not be starved by a cache that only saves time.  Otherwise r->q
 * stays NULL and the caller requantises into its workspace (correct,
 * slower).  A kept copy is checked against its weight's bytes at every use
 * (mi8_w8_weights with the fingerprint: made again if they changed).
 * Errors only for a failed launch. */
static int wq_get(mi8_state *st, wq_ref *r, void *stream, si_err *err)
{
    const void *key = st->x->dev_ptr(st->x->b, r->t);
    r->q = NULL;
    r->s = NULL;
    for (size_t i = 0; i < st->n_wq; i++) {
        mi8_wq *e = &st->wq[i];
        if (e->key != key)
            continue;
        if (e->type == r->t->type && e->in == r->in && e->rows == r->rows && e->n_exp == r->n_exp) {
            uint32_t *fp = wq_point(r, e->mem);
            return launched(mi8_w8_weights(weight(st, r->t, 0), r->n_exp, r->rows, r->in, r->q, r->s, fp, stream),
                            "check expert weights", err);
        }
        /* another tensor at that address now (weights freed and reused):
         * the copy is stale */
        size_t so;
        cudaStreamSynchronize((cudaStream_t)stream);
        cudaFree(e->mem);
        st->wq_bytes -= wq_size(e->n_exp, e->rows, e->in, &so);
        *e = st->wq[--st->n_wq];
        break;
    }
    size_t so, fr = 0, total = 0;
    const size_t bytes = wq_size(r->n_exp, r->rows, r->in, &so);
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        cudaGetLastError();
        return SI_OK;
    }
    const size_t keep = total / 16 > MI8_GIB ? total / 16 : MI8_GIB;
    void *mem = NULL;
    if (fr < keep || fr - keep < bytes || (st->n_wq == st->cap_wq && st->cap_wq > SIZE_MAX / 2 / sizeof *st->wq)) {
        if (!st->wq_full && st->h->log != NULL)
            st->h->log(st->h, SI_LOG_INFO, MI8_NAME,
                       "int8 expert weights: %.2f GiB kept; a copy of %.2f GiB does not fit (free %.2f GiB, reserve "
                       "%.2f GiB): requantised per call from here on",
                       (double)st->wq_bytes / MI8_GIB, (double)bytes / MI8_GIB, (double)fr / MI8_GIB,
                       (double)keep / MI8_GIB);
        st->wq_full = true;
        return SI_OK;
    }
    if (st->n_wq == st->cap_wq) {
        const size_t cap = st->cap_wq ? 2 * st->cap_wq : 64;
        mi8_wq *w = realloc(st->wq, cap * sizeof *w);
        if (w == NULL)
            return SI_OK;
        st->wq = w;
        st->cap_wq = cap;
    }
    if (cudaMalloc(&mem, bytes) != cudaSuccess) {
        cudaGetLastError();   /* not this op's error: it runs from the workspace */
        return SI_OK;
    }
    uint32_t *fp = wq_point(r, mem);
    int e = (int)cudaMemsetAsync(fp, 0, 3 * 4, (cudaStream_t)stream);
    if (e == 0)
        e = mi8_w8_weights(weight(st, r->t, 0), r->n_exp, r->rows, r->in, r->q, r->s, fp, stream);
    if (e != 0) {
        cudaFree(mem);
        r->q = NULL;
        return launched(e, "requantise expert weights", err);
    }
    st->wq[st->n_wq++] = (mi8_wq){ key, r->t->type, r->in, r->rows, r->n_exp, mem };
    st->wq_bytes += bytes;
    return SI_OK;
}

static mi8_q8w q8w_of(const wq_ref *r, int64_t first_row)
{
    mi8_q8w w = { r->q + first_row * r->in, r->s + first_row * (r->in / MI8_W8_G), r->rows };
    return w;
}

/* int8 rows [rows][in] and their scales, carved at `off`. */
typedef struct a8_off {
    size_t q, s;
} a8_off;

static a8_off take_a8(carve *c, int64_t rows, int64_t in)
{
    a8_off a = { take(c, (size_t)(rows * in)), take(c, (size_t)(rows * (in / MI8_W8_G)) * 4) };
    return a;
}

static mi8_q8a a8_at(const mi8_state *st, a8_off a)
{
    uint8_t *base = st->ws;
    mi8_q8a r = { (int8_t *)(base + a.q), (float *)(base + a.s) };
    return r;
}

/* The i8 path's two GEMMs: on wgmma (moe_i8_wg.cu) where init found it
 * runs and knob wgmma wants it, else mma.sync (moe_i8_w8.cu, knob ktile);
 * the same bits either way. */
static int gemm_gate_up(const mi8_state *st, mi8_q8w gate, mi8_q8w up, mi8_q8a x, int64_t H, int64_t F, mi8_sched s,
                        float *act, void *stream)
{
    if (st->wg)
        return mi8_wg_gate_up(gate, up, x, H, F, s, act, st->x->n_sm, stream);
    return mi8_w8_gate_up(gate, up, x, H, F, s, act, st->kt, stream);
}

static int gemm_down(const mi8_state *st, mi8_q8w down, mi8_q8a act, int64_t F, int64_t H, mi8_sched s, float *y,
                     void *stream)
{
    if (st->wg)
        return mi8_wg_down(down, act, F, H, s, y, st->x->n_sm, stream);
    return mi8_w8_down(down, act, F, H, s, y, st->kt, stream);
}

/* ---- exec ------------------------------------------------------------------- */

/* Where the GEMM path keeps its activations in the workspace. */
typedef struct path_off {
    act_off h, act, sh;               /* gguf: per-32 activations             */
    a8_off  h8, act8, sh8;            /* i8: per-128 activations              */
    size_t  act_f, sh_f;              /* i8: the f32 SwiGLU rows              */
} path_off;

static int mi8_exec(void *state, const si_op *op, si_err *err)
{
    mi8_state *st = state;
    if (!mi8_supports(state, op))
        return si_err_set(err, SI_EUNSUPPORTED, MI8_NAME ": MOE: op not supported (supports() said no)");
    const si_cuda_ext *x = st->x;
    mi8_dims d;
    dims_of(op, &d);
    const int64_t n = d.n, H = d.H, E = d.E, K = d.K, F = d.F, Fs = d.Fs, NK = n * K;
    const bool i8 = st->weights == MI8_WEIGHTS_I8 && H % MI8_W8_G == 0 && F % MI8_W8_G == 0 &&
                    (!d.shared || Fs % MI8_W8_G == 0);
    const int64_t bt = i8 ? MI8_W8_BT : MI8_BT;
    /* Tiles: sum_e ceil(cnt_e / BT) <= NK / BT + (number of non-empty experts). */
    const int64_t max_tiles = NK / bt + (E < NK ? E : NK) + 1, max_rows = max_tiles * bt;
    const int64_t n_tiles_dense = (n + bt - 1) / bt, dense_rows = n_tiles_dense * bt;
    void *s = x->stream(x->b);
    const si_tensor *const *W = op->src;
    int rc;

    /* i8: the int8 copies first (made now where they fit): the workspace
     * holds the ones that do not */
    wq_ref wr[6];
    int nw = 0;
    if (i8) {
        wr[nw++] = (wq_ref){ .t = W[2], .in = H, .rows = d.fused ? 2 * F : F, .n_exp = E };
        if (!d.fused)
            wr[nw++] = (wq_ref){ .t = W[3], .in = H, .rows = F, .n_exp = E };
        wr[nw++] = (wq_ref){ .t = W[4], .in = F, .rows = H, .n_exp = E };
        if (d.shared) {
            wr[nw++] = (wq_ref){ .t = W[6], .in = H, .rows = Fs, .n_exp = 1 };
            wr[nw++] = (wq_ref){ .t = W[7], .in = H, .rows = Fs, .n_exp = 1 };
            wr[nw++] = (wq_ref){ .t = W[8], .in = Fs, .rows = H, .n_exp = 1 };
        }
        for (int i = 0; i < nw; i++)
            if ((rc = wq_get(st, &wr[i], s, err)) != SI_OK)
                return rc;
    }

    carve cv = { 0 };
    const size_t o_logits = take(&cv, (size_t)(n * E) * 4), o_sel = take(&cv, (size_t)NK * 4),
                 o_wts = take(&cv, (size_t)NK * 4), o_ntiles = take(&cv, 4),
                 o_texp = take(&cv, (size_t)max_tiles * 4), o_rtok = take(&cv, (size_t)max_rows * 4),
                 o_rslot = take(&cv, (size_t)max_rows * 4), o_y = take(&cv, (size_t)(NK * H) * 4);
    path_off po;
    memset(&po, 0, sizeof po);
    if (i8) {
        po.h8 = take_a8(&cv, n, H);
        po.act_f = take(&cv, (size_t)(max_rows * F) * 4);
        po.act8 = take_a8(&cv, max_rows, F);
    } else {
        po.h = take_act(&cv, n, H);
        po.act = take_act(&cv, max_rows, F);
    }
    size_t o_gamma = 0, o_ys = 0;
    if (d.shared) {
        o_gamma = take(&cv, (size_t)n * 4);
        o_ys = take(&cv, (size_t)(n * H) * 4);
        if (i8) {
            po.sh_f = take(&cv, (size_t)(dense_rows * Fs) * 4);
            po.sh8 = take_a8(&cv, dense_rows, Fs);
        } else {
            po.sh = take_act(&cv, dense_rows, Fs);
        }
    }
    for (int i = 0; i < nw; i++)
        if (wr[i].q == NULL) {
            size_t so;
            wr[i].scratch = take(&cv, wq_size(wr[i].n_exp, wr[i].rows, wr[i].in, &so));
        }
    if ((rc = ws_reserve(st, cv.used, err)) != SI_OK)
        return rc;
    if (st->h->log != NULL)
        st->h->log(st->h, SI_LOG_DEBUG, MI8_NAME, "grouped int8 MOE: n %lld E %lld K %lld H %lld F %lld%s%s [%s]%s",
                   (long long)n, (long long)E, (long long)K, (long long)H, (long long)F, d.fused ? " fused" : "",
                   d.shared ? " shared" : "", i8 ? "i8" : "gguf", i8 && st->wg ? " on wgmma" : "");
    uint8_t *ws = st->ws;
    const float *h = x->dev_ptr(x->b, W[0]);
    const int64_t hs = n > 1 ? (int64_t)(W[0]->nb[1] / 4) : H;

    /* 1. router (the backend's MATMUL for whatever type it is), top-k */
    si_op mm = { .kind = SI_OP_MATMUL };
    mm.dst = ws_f32(st, o_logits, E, n);
    mm.src[0] = W[1];
    mm.src[1] = W[0];
    if ((rc = x->exec_builtin(x->b, &mm, err)) != SI_OK)
        return rc;
    float *logits = (float *)(ws + o_logits), *wts = (float *)(ws + o_wts);
    int32_t *sel = (int32_t *)(ws + o_sel);
    if ((rc = launched(mi8_route(logits, n, (int)E, (int)K, sel, wts, s), "route", err)) != SI_OK)
        return rc;
    /* 2. expert -> tile schedule */
    mi8_sched sch = { (int32_t *)(ws + o_ntiles), (int32_t *)(ws + o_texp), (int32_t *)(ws + o_rtok),
                      (int32_t *)(ws + o_rslot), max_tiles, 0 };
    if ((rc = launched(mi8_schedule(sel, n, (int)E, (int)K, (int)bt, (int32_t *)sch.n_tiles,
                                    (int32_t *)sch.tile_exp, (int32_t *)sch.row_tok, (int32_t *)sch.row_slot,
                                    max_tiles, s),
                       "schedule", err)) != SI_OK)
        return rc;
    const mi8_sched dense = { NULL, NULL, NULL, NULL, n_tiles_dense, n };
    float *y = (float *)(ws + o_y), *gamma = NULL, *ys = NULL;
    if (d.shared) {   /* the shared expert's gate through the backend */
        mm.dst = ws_f32(st, o_gamma, 1, n);
        mm.src[0] = W[5];
        mm.src[1] = W[0];
        if ((rc = x->exec_builtin(x->b, &mm, err)) != SI_OK)
            return rc;
        gamma = (float *)(ws + o_gamma);
        ys = (float *)(ws + o_ys);
    }
    if (i8) {
        /* the copies that did not fit the cache: requantised into the workspace */
        for (int i = 0; i < nw; i++)
            if (wr[i].q == NULL) {
                wq_point(&wr[i], ws + wr[i].scratch);
                if ((rc = launched(mi8_w8_weights(weight(st, wr[i].t, 0), wr[i].n_exp, wr[i].rows, wr[i].in, wr[i].q,
                                                  wr[i].s, NULL, s),
                                   "requantise expert weights", err)) != SI_OK)
                    return rc;
            }
        /* 3. h to int8 per 128 once */
        const mi8_q8a hq = a8_at(st, po.h8), act8 = a8_at(st, po.act8);
        float *act = (float *)(ws + po.act_f);
        if ((rc = launched(mi8_w8_quantize(h, hs, n, H, NULL, hq, s), "quantize", err)) != SI_OK)
            return rc;
        /* 4. routed experts: gate/up (+ SwiGLU), its rows to int8, down */
        const wq_ref *gw = &wr[0], *uw = d.fused ? &wr[0] : &wr[1], *dw = &wr[d.fused ? 1 : 2];
        if ((rc = launched(gemm_gate_up(st, q8w_of(gw, 0), q8w_of(uw, d.fused ? F : 0), hq, H, F, sch, act, s),
                           "gate_up", err)) != SI_OK ||
            (rc = launched(mi8_w8_quantize(act, F, max_rows, F, sch.n_tiles, act8, s), "quantize act", err)) != SI_OK ||
            (rc = launched(gemm_down(st, q8w_of(dw, 0), act8, F, H, sch, y, s), "down", err)) != SI_OK)
            return rc;
        /* 6. shared expert on the same kernels, dense schedule */
        if (d.shared) {
            const wq_ref *sw = &wr[nw - 3];
            const mi8_q8a sh8 = a8_at(st, po.sh8);
            float *sact = (float *)(ws + po.sh_f);
            if ((rc = launched(gemm_gate_up(st, q8w_of(&sw[0], 0), q8w_of(&sw[1], 0), hq, H, Fs, dense, sact, s),
                               "shared gate_up", err)) != SI_OK ||
                (rc = launched(mi8_w8_quantize(sact, Fs, dense_rows, Fs, NULL, sh8, s), "shared quantize act", err)) !=
                    SI_OK ||
                (rc = launched(gemm_down(st, q8w_of(&sw[2], 0), sh8, Fs, H, dense, ys, s), "shared down", err)) !=
                    SI_OK)
                return rc;
        }
    } else {
        /* 3. h to int8 per 32 once (the cpu backend's rounding exactly) */
        const mi8_act hq = act_at(st, po.h), act = act_at(st, po.act);
        if ((rc = launched(mi8_quantize(h, hs, n, H, hq, s), "quantize", err)) != SI_OK)
            return rc;
        /* 4. routed experts */
        const mi8_w gate = weight(st, W[2], 0), up = d.fused ? weight(st, W[2], (uint64_t)F) : weight(st, W[3], 0);
        if ((rc = launched(mi8_gate_up(gate, up, hq, H, F, sch, act, s), "gate_up", err)) != SI_OK ||
            (rc = launched(mi8_down(weight(st, W[4], 0), act, F, H, sch, y, s), "down", err)) != SI_OK)
            return rc;
        /* 6. shared expert: the same GEMM kernels, dense schedule */
        if (d.shared) {
            const mi8_act sa = act_at(st, po.sh);
            if ((rc = launched(mi8_gate_up(weight(st, W[6], 0), weight(st, W[7], 0), hq, H, Fs, dense, sa, s),
                               "shared gate_up", err)) != SI_OK ||
                (rc = launched(mi8_down(weight(st, W[8], 0), sa, Fs, H, dense, ys, s), "shared down", err)) != SI_OK)
                return rc;
        }
    }
    /* 5. weighted sum in a fixed order */
    const int64_t ds = n > 1 ? (int64_t)(op->dst.nb[1] / 4) : H;
    return launched(mi8_combine(x->dev_ptr(x->b, &op->dst), ds, y, wts, ys, gamma, n, (int)K, H, s), "combine", err);
}

static const struct si_kernel_ops mi8_ops = {
    .size = sizeof(struct si_kernel_ops),
    .backend = "cuda_sm120",
    .op = SI_OP_MOE,
    .init = mi8_init,
    .fini = mi8_fini,
    .supports = mi8_supports,
    .exec = mi8_exec,
};

SI_PLUGIN_DEFINE(SI_KIND_KERNEL, MI8_NAME, "0.1.0",
                 "cuda_sm120 MOE for prefill: experts grouped per batch, int8 tensor-core GEMMs (w8 or GGUF blocks)",
                 NULL, &mi8_ops, NULL)
