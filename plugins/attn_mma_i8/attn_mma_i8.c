/* plugins/attn_mma_i8/attn_mma_i8.c — kernel plugin for cuda_sm120:
 * SI_OP_ATTN of prefill batches on int8 tensor cores, reading cuda_sm120's
 * paged int8 KV cache (kv_type = i8) directly (spec qwen35-gguf.md §3.4;
 * the op's ABI comment in plugin.h).
 *
 * The op's front half — q/k RMSNorm, NEOX RoPE, K/V appended (int8, pages
 * reserved) — is the backend's own, through cuda_ext's attn_prepare (ext
 * 1.1), which also gives q normed+roped and where the cache is; the
 * attention core is ami8_attn (ami8_attn.cu says how).  When the cache is
 * not paged int8, attn_prepare does nothing and says so, and the whole op
 * runs through exec_builtin: K/V are appended exactly once either way.
 *
 * supports() declines (the backend's own path runs) below `min_tokens`
 * tokens and for head_dim other than 64/128/256.
 *
 * Knobs, [kernel.attn_mma_i8]: min_tokens (integer >= 1, default 64);
 * tile = v2 | v1 (default v2): v1 = 16 tokens x 1 head a block reading
 * K/V from L2, v2 = 128 tokens x 1 head staging K/V through shared memory
 * with P.V on the int8 tensor cores (ami8_attn.cu; head_dim 64 runs v1).
 * H200, 9b preset, kv_type = i8, same binary: 28,347 vs 17,752 tok/s at a
 * 4096-token prompt, 22,850 vs 20,971 at 512; check_cuda_attn_plugin:v2
 * passes there.
 * Includes only public headers: plugin.h and cuda_sm120's cuda_ext.h. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include <sparkinfer/cuda_ext.h>
#include <sparkinfer/plugin.h>

#include "../common/kernel_knob.h"

#include "ami8.h"

#define AMI8_NAME               "attn_mma_i8"
#define AMI8_MIN_TOKENS_DEFAULT 64

typedef struct ami8_state {
    const si_host     *h;
    const si_cuda_ext *x;
    int64_t            min_tokens;
    int                tile;   /* AMI8_TILE_V1 / AMI8_TILE_V2 */
} ami8_state;


static int ami8_init(const si_host *h, const char *section, const void *backend_api, void **state, si_err *err)
{
    const si_cuda_ext *x = backend_api;
    *state = NULL;
    if (h == NULL || section == NULL)
        return si_err_set(err, SI_EINVAL, AMI8_NAME ": init without host or section");
    int64_t min_tokens;
    int rc = si_kernel_min_tokens(h, AMI8_NAME, section, AMI8_MIN_TOKENS_DEFAULT, &min_tokens, err);
    if (rc != SI_OK)
        return rc;
    /* v2 by default since its GPU test passed and it measured faster */
    static const char *const tiles[] = { "v1", "v2" };
    int tile;
    rc = si_kernel_choice(h, AMI8_NAME, section, "tile", tiles, 2, 1, &tile, err);
    if (rc != SI_OK)
        return rc;
    if (x == NULL || x->major != SI_CUDA_EXT_MAJOR || !SI_HAS_MEMBER(x, si_cuda_ext, attn_prepare))
        return si_err_set(err, SI_EABI,
                          AMI8_NAME ": the backend's cuda_ext table is missing, of major %u (want %d) or older than "
                          "1.1 (no attn_prepare)",
                          x ? x->major : 0u, SI_CUDA_EXT_MAJOR);
    if (x->stream == NULL || x->exec_builtin == NULL || x->dev_ptr == NULL || x->attn_prepare == NULL)
        return si_err_set(err, SI_EABI, AMI8_NAME ": the backend's cuda_ext table lacks a function");
    if (x->cc_major < 8)   /* mma.sync m16n8k32 s8 needs sm_80 or later */
        return si_err_set(err, SI_EUNSUPPORTED, AMI8_NAME ": compute capability %d.%d has no int8 mma.m16n8k32",
                          x->cc_major, x->cc_minor);
    ami8_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return si_err_set(err, SI_ENOMEM, AMI8_NAME ": out of host memory");
    st->h = h;
    st->x = x;
    st->min_tokens = min_tokens;
    st->tile = tile == 1 ? AMI8_TILE_V2 : AMI8_TILE_V1;
    *state = st;
    if (h->log != NULL)
        h->log(h, SI_LOG_INFO, AMI8_NAME,
               "int8 mma attention (tile %s) for batches of >= %lld tokens over the paged int8 cache (kv_type = i8)",
               tiles[tile], (long long)min_tokens);
    return SI_OK;
}

static void ami8_fini(void *state) { free(state); }

static int64_t ne_(const si_tensor *t, int i) { return (uint32_t)i < t->ndim ? t->ne[i] : 1; }

static bool ami8_supports(void *state, const si_op *op)
{
    const ami8_state *st = state;
    if (op->kind != SI_OP_ATTN || op->src[0] == NULL)
        return false;
    const si_attn_params *p = &op->p.attn;
    const int64_t n = ne_(op->src[0], 1);
    /* dst rows of f32 at a float stride: the kernel writes it as the backend does */
    if (n < st->min_tokens || !ami8_hd_ok((int)p->head_dim) || p->n_head_kv == 0 || p->n_head % p->n_head_kv != 0 ||
        op->dst.type != SI_TYPE_F32 || op->dst.nb[1] % 4 != 0 || op->src[0]->nb[1] % 4 != 0)
        return false;
    return true;
}

static int ami8_exec(void *state, const si_op *op, si_err *err)
{
    const ami8_state *st = state;
    const si_cuda_ext *x = st->x;
    si_cuda_attn_view v;
    memset(&v, 0, sizeof v);
    v.size = sizeof v;
    int rc = x->attn_prepare(x->b, op, &v, err);
    if (rc != SI_OK)
        return rc;
    if (!v.paged_i8) {   /* nothing done yet: the backend runs the whole op */
        if (st->h->log != NULL)
            st->h->log(st->h, SI_LOG_DEBUG, AMI8_NAME, "cache not paged int8: the backend's own attention");
        return x->exec_builtin(x->b, op, err);
    }
    if (v.n == 0)
        return SI_OK;
    if (v.page_size != AMI8_PAGE || (int)v.head_dim != (int)op->p.attn.head_dim)
        return si_err_set(err, SI_EABI, AMI8_NAME ": the backend's pages hold %u positions (want %d)", v.page_size,
                          AMI8_PAGE);
    if (st->h->log != NULL)
        st->h->log(st->h, SI_LOG_DEBUG, AMI8_NAME, "int8 mma attention: n %lld heads %u/%u head_dim %u max_len %d",
                   (long long)v.n, v.n_head, v.n_head_kv, v.head_dim, (int)v.max_len);
    const ami8_args a = {
        .q = v.q, .qg = v.qg, .qg_stride = v.qg_stride, .k = v.k, .v = v.v, .ks = v.ks, .vs = v.vs,
        .pages = v.pages, .max_pages = v.max_pages, .n_head = (int)v.n_head, .n_head_kv = (int)v.n_head_kv,
        .hd = (int)v.head_dim, .pos = v.pos, .seq = v.seq, .n = v.n,
        .dst = x->dev_ptr(x->b, &op->dst), .dst_stride = v.n > 1 ? op->dst.nb[1] / 4 : 0,
        .tile = st->tile,
    };
    int e = ami8_attn(&a, x->stream(x->b));
    if (e != 0)
        return si_err_set(err, SI_EDEVICE, AMI8_NAME ": kernel launch failed: %s", cudaGetErrorString((cudaError_t)e));
    return SI_OK;
}

static const struct si_kernel_ops ami8_ops = {
    .size = sizeof(struct si_kernel_ops),
    .backend = "cuda_sm120",
    .op = SI_OP_ATTN,
    .init = ami8_init,
    .fini = ami8_fini,
    .supports = ami8_supports,
    .exec = ami8_exec,
};

SI_PLUGIN_DEFINE(SI_KIND_KERNEL, AMI8_NAME, "0.1.0",
                 "cuda_sm120 ATTN for prefill: int8 mma.sync flash attention over the paged int8 KV cache",
                 NULL, &ami8_ops, NULL)
