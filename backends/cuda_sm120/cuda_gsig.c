/* backends/cuda_sm120/cuda_gsig.c — exec signatures and the graph cache
 * (cuda_gsig.h says what they hold). */
#include <stdlib.h>
#include <string.h>

#include "cuda_gsig.h"

void cu_gsig_reset(cu_gsig *s)
{
    s->n = 0;
    s->oom = false;
}

void cu_gsig_free(cu_gsig *s)
{
    free(s->w);
    memset(s, 0, sizeof *s);
}

/* Room for `more` words; false (and oom set) when the array cannot grow. */
static bool reserve(cu_gsig *s, size_t more)
{
    if (s->cap - s->n >= more)
        return true;
    size_t cap = s->cap ? 2 * s->cap : 4096;
    while (cap - s->n < more)
        cap *= 2;
    uint64_t *w = realloc(s->w, cap * sizeof *w);
    if (w == NULL) {
        s->oom = true;
        return false;
    }
    s->w = w;
    s->cap = cap;
    return true;
}

void cu_gsig_put(cu_gsig *s, uint64_t v)
{
    if (reserve(s, 1))
        s->w[s->n++] = v;
}

static uint64_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#define TENSOR_WORDS (4 + 2 * SI_MAX_DIMS)

/* A tensor's words into w[0, TENSOR_WORDS) (cu_gsig_op reserved them: a
 * decode step's list is ~20k words, put one by one they were a third of
 * the host's time before the graph launch). */
static void put_tensor(uint64_t *w, const si_tensor *t, cu_gsig_buf_fn buf_id)
{
    uint64_t dev = 0, nbytes = 0;
    if (t->buf != NULL)
        buf_id(t->buf, &dev, &nbytes);
    w[0] = dev;
    w[1] = nbytes;
    w[2] = t->offset;
    w[3] = (uint64_t)t->type << 32 | t->ndim;
    /* All dims: the checks read ne/nb beyond ndim too (as 1 / unused). */
    for (int i = 0; i < SI_MAX_DIMS; i++) {
        w[4 + 2 * i] = (uint64_t)t->ne[i];
        w[5 + 2 * i] = t->nb[i];
    }
}

void cu_gsig_op(cu_gsig *s, const si_op *op, cu_gsig_buf_fn buf_id)
{
    uint64_t present = 0;
    for (int i = 0; i < SI_OP_MAX_SRC; i++)
        present |= (uint64_t)(op->src[i] != NULL) << i;
    if (!reserve(s, 1 + (1 + SI_OP_MAX_SRC) * TENSOR_WORDS))
        return;
    s->w[s->n++] = (uint64_t)op->kind << 32 | present;
    put_tensor(s->w + s->n, &op->dst, buf_id);
    s->n += TENSOR_WORDS;
    for (int i = 0; i < SI_OP_MAX_SRC; i++)
        if (op->src[i] != NULL) {
            put_tensor(s->w + s->n, op->src[i], buf_id);
            s->n += TENSOR_WORDS;
        }
    switch (op->kind) {
    case SI_OP_ATTN: {
        const si_attn_params *p = &op->p.attn;
        cu_gsig_put(s, (uint64_t)p->n_head << 32 | p->n_head_kv);
        cu_gsig_put(s, (uint64_t)p->head_dim << 32 | p->n_rot);
        cu_gsig_put(s, fbits(p->eps) << 32 | fbits(p->rope_base));
        cu_gsig_put(s, fbits(p->yarn_factor) << 32 | p->yarn_orig_ctx);
        cu_gsig_put(s, (uint64_t)(uintptr_t)p->kv);
        cu_gsig_put(s, (uint64_t)p->kv_layer << 2 | (uint64_t)(p->pos != NULL) << 1 | (p->seq != NULL));
        break;
    }
    case SI_OP_GDN: {
        const si_gdn_params *p = &op->p.gdn;
        uint64_t dev = 0, nbytes = 0;
        if (p->state != NULL)
            buf_id(p->state, &dev, &nbytes);
        cu_gsig_put(s, (uint64_t)p->n_k_head << 32 | p->n_v_head);
        cu_gsig_put(s, (uint64_t)p->head_k_dim << 32 | p->head_v_dim);
        cu_gsig_put(s, (uint64_t)p->conv_k << 32 | fbits(p->eps));
        cu_gsig_put(s, dev);
        cu_gsig_put(s, nbytes);
        cu_gsig_put(s, p->state_offset);
        cu_gsig_put(s, p->state_stride);
        cu_gsig_put(s, p->seq != NULL);
        break;
    }
    case SI_OP_MOE:
        cu_gsig_put(s, (uint64_t)op->p.moe.n_expert << 32 | op->p.moe.n_used);
        break;
    case SI_OP_TOPK: {
        const si_topk_params *p = &op->p.topk;
        cu_gsig_put(s, (uint64_t)p->k << 1 | (p->pen_off != NULL));
        cu_gsig_put(s, fbits(p->repeat_penalty) << 32 | fbits(p->frequency_penalty));
        cu_gsig_put(s, fbits(p->presence_penalty));
        break;
    }
    default:   /* GET_ROWS, MATMUL and the elementwise ops: eps (0 if unused) */
        cu_gsig_put(s, fbits(op->p.norm.eps));
        break;
    }
}

uint64_t cu_gsig_hash(const cu_gsig *s)
{
    /* FNV-1a over the words in four interleaved lanes (one multiply chain
     * was ~1 ns a word, ~20 us a decode step's list), folded, then one
     * avalanche: cheap and plenty for a key that is always confirmed by a
     * full compare. */
    uint64_t l[4] = { 0xcbf29ce484222325ull ^ s->n, 0x84222325cbf29ce4ull, 0x9e3779b97f4a7c15ull,
                      0xbf58476d1ce4e5b9ull };
    size_t i = 0;
    for (; i + 4 <= s->n; i += 4)
        for (int k = 0; k < 4; k++)
            l[k] = (l[k] ^ s->w[i + k]) * 0x100000001b3ull;
    for (; i < s->n; i++)
        l[0] = (l[0] ^ s->w[i]) * 0x100000001b3ull;
    uint64_t h = l[0];
    for (int k = 1; k < 4; k++)
        h = (h ^ l[k]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

cu_gentry *cu_gcache_find(cu_gcache *c, const cu_gsig *s)
{
    const uint64_t h = cu_gsig_hash(s);
    for (size_t i = 0; i < c->n; i++) {
        cu_gentry *e = &c->e[i];
        if (e->hash == h && e->n == s->n && memcmp(e->w, s->w, s->n * sizeof *s->w) == 0) {
            e->tick = ++c->tick;
            return e;
        }
    }
    return NULL;
}

static void entry_drop(cu_gcache *c, cu_gentry *e)
{
    if (e->payload != NULL && c->drop != NULL)
        c->drop(c->ctx, e->payload);
    e->payload = NULL;
}

cu_gentry *cu_gcache_add(cu_gcache *c, const cu_gsig *s)
{
    uint64_t *w = malloc((s->n ? s->n : 1) * sizeof *w);
    if (w == NULL)
        return NULL;
    memcpy(w, s->w, s->n * sizeof *w);
    cu_gentry *e;
    if (c->n < CU_GCACHE_MAX) {
        e = &c->e[c->n++];
    } else {
        e = &c->e[0];
        for (size_t i = 1; i < c->n; i++)
            if (c->e[i].tick < e->tick)
                e = &c->e[i];
        entry_drop(c, e);
        free(e->w);
    }
    *e = (cu_gentry){ .hash = cu_gsig_hash(s), .w = w, .n = s->n, .tick = ++c->tick, .state = CU_G_SEEN };
    return e;
}

void cu_gcache_invalidate(cu_gcache *c)
{
    for (size_t i = 0; i < c->n; i++) {
        entry_drop(c, &c->e[i]);
        if (c->e[i].state == CU_G_READY)
            c->e[i].state = CU_G_SEEN;
    }
}

void cu_gcache_retry(cu_gcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].state == CU_G_NEVER) {
            c->e[i].state = CU_G_SEEN;
            c->e[i].fails = 0;
        }
}

void cu_gcache_clear(cu_gcache *c)
{
    for (size_t i = 0; i < c->n; i++) {
        entry_drop(c, &c->e[i]);
        free(c->e[i].w);
    }
    memset(c->e, 0, sizeof c->e);
    c->n = 0;
}
