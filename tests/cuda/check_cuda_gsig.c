/* tests/cuda/check_cuda_gsig.c — the host-only half of cuda_sm120's graph
 * replay (backends/cuda_sm120/cuda_gsig.c, compiled in; no GPU, built
 * with or without CUDA): exec signatures see everything a captured graph
 * bakes in and nothing a replay restages; the graph cache finds by full
 * compare, evicts the least recently used entry and drops payloads on
 * invalidation; the attention length bucket. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gsig.h"
#include "cuda_internal.h"

/* The backend's buffer type is its own; the signature only asks for it
 * through the callback. */
struct si_buf {
    void    *dev;
    uint64_t nbytes;
};

static void buf_id(const si_buf *b, uint64_t *dev, uint64_t *nbytes)
{
    *dev = (uint64_t)(uintptr_t)b->dev;
    *nbytes = b->nbytes;
}

static si_buf buf_a = { (void *)0x10000, 1 << 20 }, buf_b = { (void *)0x20000, 1 << 20 };

static si_tensor act(si_buf *b, uint64_t off, int64_t ne0, int64_t ne1)
{
    si_tensor t = { .buf = b, .offset = off, .type = SI_TYPE_F32, .ndim = 2 };
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 4;
    t.nb[1] = (uint64_t)ne0 * 4;
    t.nb[2] = t.nb[3] = t.nb[1] * (uint64_t)ne1;
    return t;
}

static si_tensor t_in, t_k, t_v;
static int32_t pos1[2] = { 5, 9 }, seq1[2] = { 0, 1 }, pos2[2] = { 6, 10 }, seq2[2] = { 0, 1 };

static si_op attn_op(const int32_t *pos, const int32_t *seq)
{
    t_in = act(&buf_a, 0, 64, 2);
    t_k = act(&buf_a, 4096, 16, 2);
    t_v = act(&buf_a, 8192, 16, 2);
    si_op op = { .kind = SI_OP_ATTN };
    op.dst = act(&buf_b, 0, 32, 2);
    op.src[0] = &t_in;
    op.src[1] = &t_k;
    op.src[2] = &t_v;
    op.p.attn = (si_attn_params){ .n_head = 2, .n_head_kv = 1, .head_dim = 16, .n_rot = 16, .eps = 1e-6f,
                                  .rope_base = 1e6f, .kv = (si_kv *)0x777, .kv_layer = 3, .pos = pos, .seq = seq };
    return op;
}

static void sig_of(cu_gsig *s, const si_op *ops, size_t n)
{
    cu_gsig_reset(s);
    for (size_t i = 0; i < n; i++)
        cu_gsig_op(s, &ops[i], buf_id);
}

static bool same(const cu_gsig *a, const cu_gsig *b)
{
    return a->n == b->n && memcmp(a->w, b->w, a->n * sizeof *a->w) == 0 && cu_gsig_hash(a) == cu_gsig_hash(b);
}

START_TEST(test_sig_ignores_host_arrays)
{
    cu_gsig a = { 0 }, b = { 0 };
    si_op o1 = attn_op(pos1, seq1), o2 = attn_op(pos2, seq2);
    sig_of(&a, &o1, 1);
    sig_of(&b, &o2, 1);
    ck_assert(!a.oom && a.n > 0);
    ck_assert_msg(same(&a, &b), "pos/seq contents or addresses must not change the signature");
    /* ... but whether they are given does (the checks refuse NULL). */
    o2.p.attn.pos = NULL;
    sig_of(&b, &o2, 1);
    ck_assert(!same(&a, &b));
    cu_gsig_free(&a);
    cu_gsig_free(&b);
}
END_TEST

/* Every static field a kernel argument comes from changes the signature. */
START_TEST(test_sig_sees_static_fields)
{
    cu_gsig a = { 0 }, b = { 0 };
    si_op base = attn_op(pos1, seq1);
    sig_of(&a, &base, 1);
    for (int k = 0; k < 10; k++) {
        si_op o = attn_op(pos1, seq1);
        si_buf other = buf_a;
        switch (k) {
        case 0: o.dst.ne[1] = 3; break;
        case 1: o.dst.offset += 256; break;
        case 2: o.dst.buf = &buf_a; break;                  /* other device address */
        case 3: other.nbytes = 4096; t_k.buf = &other; break;   /* same address, other buffer size */
        case 4: o.p.attn.eps = 1e-5f; break;
        case 5: o.p.attn.kv_layer = 4; break;
        case 6: o.p.attn.kv = (si_kv *)0x778; break;
        case 7: o.src[3] = &t_k; break;                     /* q_norm given */
        case 8: t_v.nb[1] += 4; break;
        case 9: o.kind = SI_OP_MATMUL; break;
        }
        sig_of(&b, &o, 1);
        ck_assert_msg(!same(&a, &b), "field %d left the signature unchanged", k);
    }
    /* GDN and MOE parameters. */
    si_op g = { .kind = SI_OP_GDN };
    g.dst = act(&buf_b, 0, 32, 1);
    g.src[0] = &t_in;
    g.p.gdn = (si_gdn_params){ .n_k_head = 1, .n_v_head = 2, .head_k_dim = 16, .head_v_dim = 16, .conv_k = 4,
                               .eps = 1e-6f, .state = &buf_b, .state_offset = 0, .state_stride = 4096, .seq = seq1 };
    sig_of(&a, &g, 1);
    si_op g2 = g;
    g2.p.gdn.state_offset = 64;
    sig_of(&b, &g2, 1);
    ck_assert(!same(&a, &b));
    g2 = g;
    g2.p.gdn.seq = seq2;   /* restaged per step: same */
    sig_of(&b, &g2, 1);
    ck_assert(same(&a, &b));
    si_op m = { .kind = SI_OP_MOE }, m2;
    m.dst = act(&buf_b, 0, 32, 1);
    m.p.moe = (si_moe_params){ .n_expert = 8, .n_used = 2 };
    m2 = m;
    m2.p.moe.n_used = 3;
    sig_of(&a, &m, 1);
    sig_of(&b, &m2, 1);
    ck_assert(!same(&a, &b));
    /* The order of ops is part of it. */
    si_op two[2] = { attn_op(pos1, seq1), m }, owt[2] = { m, attn_op(pos1, seq1) };
    sig_of(&a, two, 2);
    sig_of(&b, owt, 2);
    ck_assert(!same(&a, &b));
    cu_gsig_free(&a);
    cu_gsig_free(&b);
}
END_TEST

static int dropped[64];

static void drop(void *ctx, void *payload)
{
    (void)ctx;
    dropped[(int)(intptr_t)payload]++;
}

static void sig_n(cu_gsig *s, uint64_t v)
{
    cu_gsig_reset(s);
    for (int i = 0; i < 100; i++)
        cu_gsig_put(s, i == 50 ? v : (uint64_t)i);
}

START_TEST(test_cache_find_add)
{
    cu_gcache c = { .drop = drop };
    cu_gsig s = { 0 };
    memset(dropped, 0, sizeof dropped);
    sig_n(&s, 1);
    ck_assert_ptr_null(cu_gcache_find(&c, &s));
    cu_gentry *e = cu_gcache_add(&c, &s);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->state, CU_G_SEEN);
    ck_assert_ptr_eq(cu_gcache_find(&c, &s), e);
    sig_n(&s, 2);   /* one word differs */
    ck_assert_ptr_null(cu_gcache_find(&c, &s));
    cu_gsig_put(&s, 0);   /* a longer list with a common prefix */
    ck_assert_ptr_null(cu_gcache_find(&c, &s));
    /* Equal hash but other words never match: forge the stored hash. */
    sig_n(&s, 3);
    cu_gentry *f = cu_gcache_add(&c, &s);
    sig_n(&s, 4);
    f->hash = cu_gsig_hash(&s);
    ck_assert_ptr_null(cu_gcache_find(&c, &s));
    cu_gcache_clear(&c);
    ck_assert_uint_eq(c.n, 0);
    cu_gsig_free(&s);
}
END_TEST

START_TEST(test_cache_lru_evicts)
{
    cu_gcache c = { .drop = drop };
    cu_gsig s = { 0 };
    memset(dropped, 0, sizeof dropped);
    for (int i = 1; i <= CU_GCACHE_MAX; i++) {
        sig_n(&s, (uint64_t)i);
        cu_gentry *e = cu_gcache_add(&c, &s);
        ck_assert_ptr_nonnull(e);
        e->payload = (void *)(intptr_t)i;
        e->state = CU_G_READY;
    }
    sig_n(&s, 1);   /* 1 is used again: 2 is now the oldest */
    ck_assert_ptr_nonnull(cu_gcache_find(&c, &s));
    sig_n(&s, 100);
    cu_gentry *e = cu_gcache_add(&c, &s);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->state, CU_G_SEEN);
    ck_assert_ptr_null(e->payload);
    ck_assert_int_eq(dropped[2], 1);
    for (int i = 1; i <= CU_GCACHE_MAX; i++)
        if (i != 2)
            ck_assert_int_eq(dropped[i], 0);
    sig_n(&s, 2);
    ck_assert_ptr_null(cu_gcache_find(&c, &s));
    sig_n(&s, 1);
    ck_assert_ptr_nonnull(cu_gcache_find(&c, &s));
    sig_n(&s, 3);
    ck_assert_ptr_nonnull(cu_gcache_find(&c, &s));
    ck_assert_uint_eq(c.n, CU_GCACHE_MAX);
    cu_gcache_clear(&c);
    for (int i = 1; i <= CU_GCACHE_MAX; i++)
        ck_assert_int_eq(dropped[i], 1);
    cu_gsig_free(&s);
}
END_TEST

/* A cache holding a READY entry (key 1, payload 1) and a NEVER one (key 2,
 * `fails` failed captures), the drop counts cleared. */
static void ready_and_never(cu_gcache *c, cu_gsig *s, unsigned fails, cu_gentry **r, cu_gentry **nv)
{
    memset(dropped, 0, sizeof dropped);
    sig_n(s, 1);
    *r = cu_gcache_add(c, s);
    (*r)->payload = (void *)(intptr_t)1;
    (*r)->state = CU_G_READY;
    sig_n(s, 2);
    *nv = cu_gcache_add(c, s);
    (*nv)->state = CU_G_NEVER;
    (*nv)->fails = fails;
}

START_TEST(test_cache_invalidate)
{
    cu_gcache c = { .drop = drop };
    cu_gsig s = { 0 };
    cu_gentry *r, *nv;
    ready_and_never(&c, &s, 0, &r, &nv);
    cu_gcache_invalidate(&c);
    ck_assert_int_eq(dropped[1], 1);
    ck_assert_ptr_null(r->payload);
    ck_assert_int_eq(r->state, CU_G_SEEN);
    ck_assert_int_eq(nv->state, CU_G_NEVER);
    sig_n(&s, 1);
    ck_assert_ptr_eq(cu_gcache_find(&c, &s), r);   /* the key stays */
    cu_gcache_clear(&c);
    ck_assert_int_eq(dropped[1], 1);   /* not twice */
    cu_gsig_free(&s);
}
END_TEST

/* A list whose capture failed for good is tried again after the backend's
 * path changed (moe_persist turning itself off); other entries keep their
 * state and payload. */
START_TEST(test_cache_retry)
{
    cu_gcache c = { .drop = drop };
    cu_gsig s = { 0 };
    cu_gentry *r, *nv;
    ready_and_never(&c, &s, 3, &r, &nv);
    sig_n(&s, 3);
    cu_gentry *seen = cu_gcache_add(&c, &s);
    cu_gcache_retry(&c);
    ck_assert_int_eq(nv->state, CU_G_SEEN);
    ck_assert_uint_eq(nv->fails, 0);
    ck_assert_int_eq(r->state, CU_G_READY);
    ck_assert_ptr_eq(r->payload, (void *)(intptr_t)1);
    ck_assert_int_eq(seen->state, CU_G_SEEN);
    ck_assert_int_eq(dropped[1], 0);
    sig_n(&s, 2);
    ck_assert_ptr_eq(cu_gcache_find(&c, &s), nv);
    cu_gcache_clear(&c);
    cu_gsig_free(&s);
}
END_TEST

START_TEST(test_attn_bucket)
{
    ck_assert_int_eq(si_cu_attn_bucket(0), 0);
    ck_assert_int_eq(si_cu_attn_bucket(1), 256);
    ck_assert_int_eq(si_cu_attn_bucket(256), 256);
    ck_assert_int_eq(si_cu_attn_bucket(257), 512);
    ck_assert_int_eq(si_cu_attn_bucket(4096), 4096);
    ck_assert_int_eq(si_cu_attn_bucket(4097), 4608);
    ck_assert_int_eq(si_cu_attn_bucket(40000), 40960);
    ck_assert_int_eq(si_cu_attn_bucket(0x7fffffff), 0x7fffffff);
    int32_t prev = 0, changes = 0, bad = 0;
    for (int32_t len = 1; len <= 1 << 20; len++) {   /* plain checks: ck_assert is slow in a loop */
        const int32_t b = si_cu_attn_bucket(len);
        bad += b < len || b < prev || !(b - len < 256 || b - len < len / 8);
        changes += b != prev;
        prev = b;
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(changes, 16 + 8 * 8);   /* 256-steps to 4096, then 8 per doubling */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_gsig");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sig_ignores_host_arrays);
    tcase_add_test(tc, test_sig_sees_static_fields);
    tcase_add_test(tc, test_cache_find_add);
    tcase_add_test(tc, test_cache_lru_evicts);
    tcase_add_test(tc, test_cache_invalidate);
    tcase_add_test(tc, test_cache_retry);
    tcase_add_test(tc, test_attn_bucket);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
