/* tests/models/check_models.c — the qwen35 and qwen36 model plugins, loaded
 * with dlopen like the core does, running on the real cpu backend plugin.
 *
 *  - logits of tiny qwen35 / qwen35moe GGUFs against the independent
 *    double-precision reference (ref_forward.c): relative error <= 1e-4
 *    and identical top-1 at every position;
 *  - batched prefill vs token by token, two sequences interleaved in one
 *    batch vs each alone, seq_reset, chunked batches, bad batches;
 *  - every load error path, and the accepted variants (per-layer
 *    head_count_kv, MTP block, tied output, "ssm_dt", fused gate_up,
 *    attention.recurrent_layers).
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sparkinfer/plugin.h>

#include "config.h"
#include "gguf.h"
#include "host.h"
#include "ahead_cmp.h"
#include "tiny.h"

#define REL_TOL 1e-4

/* ---- environment: host, cpu backend, both model plugins ---- */

typedef struct env {
    si_config       *cfg;
    si_host          host;
    void            *dl[3];
    const si_plugin *cpu, *q35, *q36;
    si_backend      *b;
    si_backend_ref   be;
    char             path[64];      /* the tiny GGUF of this test */
    si_gguf         *g;
    si_model        *m;
    const struct si_model_ops *mops;
} env;

static const si_plugin *open_plugin(env *e, int slot, const char *rel)
{
    const char *top = getenv("SI_TOP_BUILDDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", top != NULL ? top : ".", rel);
    e->dl[slot] = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(e->dl[slot] != NULL, "dlopen %s: %s", path, dlerror());
    si_entry_fn entry = (si_entry_fn)(uintptr_t)dlsym(e->dl[slot], SI_ENTRY_SYMBOL);
    ck_assert_msg(entry != NULL, "%s: no %s", path, SI_ENTRY_SYMBOL);
    const si_plugin *p = entry(&e->host);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* `sets` are extra "section.key=value" overrides, NULL-terminated. */
static void env_open(env *e, const char *const *sets)
{
    si_err err;
    memset(e, 0, sizeof *e);
    ck_assert_int_eq(si_config_new(&e->cfg, &err), SI_OK);
    /* f32 KV so the reference comparison measures the math, not f16. */
    ck_assert_msg(si_config_set(e->cfg, "runtime.kv_type=f32", &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(si_config_set(e->cfg, "runtime.threads=2", &err) == SI_OK, "%s", err.msg);
    for (int i = 0; sets != NULL && sets[i] != NULL; i++)
        ck_assert_msg(si_config_set(e->cfg, sets[i], &err) == SI_OK, "%s", err.msg);
    si_host_init(&e->host, e->cfg);
    e->cpu = open_plugin(e, 0, "backends/cpu/.libs/cpu.so");
    e->q35 = open_plugin(e, 1, "models/qwen35/.libs/qwen35.so");
    e->q36 = open_plugin(e, 2, "models/qwen36/.libs/qwen36.so");
    ck_assert_int_eq(e->q35->kind, SI_KIND_MODEL);
    ck_assert_str_eq(e->q35->name, "qwen35");
    ck_assert_str_eq(e->q36->name, "qwen36");
    ck_assert_ptr_null(e->q35->probe);
    const struct si_backend_ops *bops = e->cpu->ops;
    ck_assert_msg(bops->open(&e->host, "backend.cpu", &e->b, &err) == SI_OK, "%s", err.msg);
    e->be = (si_backend_ref){ .ops = bops, .b = e->b, .name = "cpu" };
    snprintf(e->path, sizeof e->path, "/tmp/si-models-XXXXXX");
    int fd = mkstemp(e->path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static void env_close(env *e)
{
    if (e->m != NULL)
        e->mops->unload(e->m);
    si_gguf_close(e->g);
    if (e->b != NULL)
        ((const struct si_backend_ops *)e->cpu->ops)->close(e->b);
    unlink(e->path);
    for (int i = 0; i < 3; i++)
        if (e->dl[i] != NULL)
            dlclose(e->dl[i]);
    si_config_free(e->cfg);
}

/* Writes the tiny GGUF of c and loads it through the plugin serving its
 * arch; returns the load status with the message in err. */
static int try_load(env *e, const tiny_cfg *c, uint32_t n_seq, uint32_t n_ctx, si_err *err)
{
    ck_assert_msg(tiny_write(c, e->path, err) == SI_OK, "tiny_write: %s", err->msg);
    ck_assert_msg(si_gguf_open(e->path, &e->g, err) == SI_OK, "gguf: %s", err->msg);
    const si_plugin *p = c->moe ? e->q36 : e->q35;
    const si_plugin *other = c->moe ? e->q35 : e->q36;
    e->mops = p->ops;
    const struct si_model_ops *oops = other->ops;
    ck_assert(oops->accepts(&e->host, e->g) == false);   /* the other family says no */
    if (c->arch_override == NULL)
        ck_assert(e->mops->accepts(&e->host, e->g));
    err->msg[0] = '\0';
    return e->mops->load(&e->host, e->g, &e->be, n_seq, n_ctx, &e->m, err);
}

static void load_ok(env *e, const tiny_cfg *c, uint32_t n_seq, uint32_t n_ctx)
{
    si_err err;
    int rc = try_load(e, c, n_seq, n_ctx, &err);
    ck_assert_msg(rc == SI_OK, "load: %s (%d)", err.msg, rc);
    ck_assert_ptr_nonnull(e->m);
}

/* A cpu backend that refuses some ops, to test how the plugins report a
 * backend's refusal: refuse_kind (any op of that kind) or refuse_type (a
 * MATMUL whose weight has that type).  Test-only globals. */
static bool (*real_supports)(const si_backend *, const si_op *);
static int (*real_exec)(si_backend *, const si_op *, size_t, si_err *);
static uint32_t refuse_kind, refuse_type = UINT32_MAX;
static int64_t refuse_over_tokens = INT64_MAX;   /* refuse ops of more tokens */
static bool fail_exec;                            /* exec fails once ops ran */
static size_t supports_calls;                     /* picky_supports calls made */
static struct si_backend_ops picky_ops;
static int (*real_download)(si_backend *, void *, si_buf *, uint64_t, uint64_t, si_err *);

static bool picky_supports(const si_backend *b, const si_op *op)
{
    supports_calls++;
    if (op->kind == refuse_kind || op->dst.ne[1] > refuse_over_tokens)
        return false;
    if (op->kind == SI_OP_MATMUL && op->src[0] != NULL && op->src[0]->type == refuse_type)
        return false;
    return real_supports(b, op);
}

static int picky_exec(si_backend *b, const si_op *ops, size_t n, si_err *err)
{
    int rc = real_exec(b, ops, n, err);
    if (rc == SI_OK && fail_exec)
        rc = si_err_set(err, SI_EDEVICE, "injected device failure");
    return rc;
}

static void make_picky(env *e, uint32_t kind, uint32_t type)
{
    picky_ops = *e->be.ops;
    real_supports = picky_ops.supports;
    real_exec = picky_ops.exec;
    picky_ops.supports = picky_supports;
    picky_ops.exec = picky_exec;
    refuse_kind = kind;
    refuse_type = type;
    e->be.ops = &picky_ops;
}

/* Expects load to fail with `code` and a message containing `needle`. */
static void load_fails_on(const tiny_cfg *c, uint32_t refuse_k, uint32_t refuse_t, int code,
                          const char *needle)
{
    env e;
    si_err err;
    env_open(&e, NULL);
    if (refuse_k != SI_OP_NONE || refuse_t != UINT32_MAX)
        make_picky(&e, refuse_k, refuse_t);
    int rc = try_load(&e, c, 1, 64, &err);
    ck_assert_msg(rc == code, "load returned %d, %d expected (%s)", rc, code, err.msg);
    ck_assert_ptr_null(e.m);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
    printf("  load error as expected: %s\n", err.msg);
    env_close(&e);
}

static void load_fails(const tiny_cfg *c, int code, const char *needle)
{
    load_fails_on(c, SI_OP_NONE, UINT32_MAX, code, needle);
}

static int32_t tok_at(uint32_t i, uint32_t salt, uint32_t V)
{
    uint32_t x = (i + 1) * 2654435761u ^ (salt * 40503u);
    x ^= x >> 13;
    return (int32_t)(x % V);
}

/* One forward of n tokens of sequence `seq` from position pos0; logits of
 * every token into out[n*V] (or none when out is NULL). */
static int fwd_seq(env *e, uint32_t seq, uint32_t pos0, const int32_t *toks, uint32_t n,
                   float *out, si_err *err)
{
    int32_t *pos = malloc(n * sizeof *pos), *sq = malloc(n * sizeof *sq);
    uint8_t *want = malloc(n);
    ck_assert(pos && sq && want);
    for (uint32_t i = 0; i < n; i++) {
        pos[i] = (int32_t)(pos0 + i);
        sq[i] = (int32_t)seq;
        want[i] = out != NULL;
    }
    si_batch bt = { .n = n, .tokens = toks, .pos = pos, .seq = sq, .want_logits = want };
    int rc = e->mops->forward(e->m, &bt, out, err);
    free(pos);
    free(sq);
    free(want);
    return rc;
}

typedef struct cmp {
    double max_rel, max_abs;
    uint32_t top1_diff;
} cmp;

static int argmax_f(const float *x, uint32_t n)
{
    int b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = (int)i;
    return b;
}

static int argmax_d(const double *x, uint32_t n)
{
    int b = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = (int)i;
    return b;
}

/* Relative error of a position: max |got - ref| / max |ref|. */
static void cmp_ref(cmp *c, const float *got, const double *ref, uint32_t V)
{
    double num = 0, den = 0;
    for (uint32_t i = 0; i < V; i++) {
        double d = fabs((double)got[i] - ref[i]);
        num = d > num ? d : num;
        den = fabs(ref[i]) > den ? fabs(ref[i]) : den;
    }
    double rel = num / (den > 1e-30 ? den : 1e-30);
    c->max_rel = rel > c->max_rel ? rel : c->max_rel;
    c->max_abs = num > c->max_abs ? num : c->max_abs;
    c->top1_diff += argmax_f(got, V) != argmax_d(ref, V);
}

static void cmp_f(cmp *c, const float *a, const float *b, uint32_t V)
{
    for (uint32_t i = 0; i < V; i++) {
        double d = fabs((double)a[i] - b[i]);
        c->max_abs = d > c->max_abs ? d : c->max_abs;
    }
    c->top1_diff += argmax_f(a, V) != argmax_f(b, V);
}

/* Loads c, feeds n tokens of one sequence in one batch (all logits) and
 * compares every position with the reference. */
static void check_against_reference(const tiny_cfg *c, const char *what, uint32_t n,
                                    const char *const *sets)
{
    env e;
    si_err err;
    env_open(&e, sets);
    load_ok(&e, c, 1, 256);
    ref_model *rm = NULL;
    ck_assert_msg(ref_load(c, e.path, &rm, &err) == SI_OK, "reference: %s", err.msg);
    ref_seq *rs = ref_seq_new(rm, 256);
    ck_assert_ptr_nonnull(rs);

    int32_t *toks = malloc(n * sizeof *toks);
    float *lg = malloc((size_t)n * c->V * sizeof *lg);
    double *rl = malloc(c->V * sizeof *rl);
    ck_assert(toks && lg && rl);
    for (uint32_t i = 0; i < n; i++)
        toks[i] = tok_at(i, 7, c->V);
    int rc = fwd_seq(&e, 0, 0, toks, n, lg, &err);
    ck_assert_msg(rc == SI_OK, "forward: %s", err.msg);
    cmp r = { 0 };
    for (uint32_t i = 0; i < n; i++) {
        ref_step(rm, rs, toks[i], rl);
        cmp_ref(&r, lg + (size_t)i * c->V, rl, c->V);
    }
    printf("  %-34s %3u positions: max rel err %.2e, max abs err %.2e, top-1 mismatches %u\n",
           what, n, r.max_rel, r.max_abs, r.top1_diff);
    ck_assert_msg(r.max_rel <= REL_TOL, "%s: max rel err %g > %g", what, r.max_rel, REL_TOL);
    ck_assert_msg(r.top1_diff == 0, "%s: top-1 differs at %u positions", what, r.top1_diff);

    si_model_info info = { .size = sizeof info };
    e.mops->info(e.m, &info);
    ck_assert_str_eq(info.arch, tiny_arch(c));
    ck_assert_uint_eq(info.n_layer, c->n_layer);
    ck_assert_uint_eq(info.n_vocab, c->V);
    ck_assert_uint_eq(info.n_embd, c->H);
    ck_assert_uint_eq(info.n_seq_max, 1);
    ck_assert_uint_eq(info.n_ctx, 256);

    free(toks);
    free(lg);
    free(rl);
    ref_seq_free(rs);
    ref_free(rm);
    env_close(&e);
}

/* ---- logits against the reference ---- */

START_TEST(test_dense_reference)
{
    tiny_cfg c = tiny_default(false);
    /* 40 > 32 wanted rows: the output head runs in two logit chunks. */
    check_against_reference(&c, "qwen35 tiny", 40, NULL);
}
END_TEST

START_TEST(test_moe_reference)
{
    tiny_cfg c = tiny_default(true);
    check_against_reference(&c, "qwen35moe tiny", 40, NULL);
}
END_TEST

START_TEST(test_moe_fused_gate_up)
{
    tiny_cfg c = tiny_default(true);
    c.fused_gate_up = true;
    check_against_reference(&c, "qwen35moe fused gate_up", 16, NULL);
}
END_TEST

START_TEST(test_yarn_reference)
{
    tiny_cfg c = tiny_default(false);
    c.rope_base = 10000.0f;
    c.yarn_factor = 4.0f;
    c.yarn_orig_ctx = 32;
    check_against_reference(&c, "qwen35 YaRN x4", 40, NULL);
}
END_TEST

START_TEST(test_chunked_batch)
{
    /* n_batch 7: a 30-token batch runs in 5 chunks; the recurrent state and
     * the KV cache carry across them. */
    static const char *const sets[] = { "runtime.n_batch=7", NULL };
    tiny_cfg c = tiny_default(_i == 1);
    check_against_reference(&c, _i ? "qwen35moe n_batch 7" : "qwen35 n_batch 7", 30, sets);
}
END_TEST

/* ---- variants that must load and compute the same function ---- */

START_TEST(test_variants)
{
    tiny_cfg c = tiny_default(false);
    const char *what = "";
    switch (_i) {
    case 0: c.head_kv_array = true; what = "per-layer head_count_kv"; break;
    case 1: c.nextn = 1; what = "nextn 1 + MTP block skipped"; break;
    case 2: c.tied = true; what = "tied output"; break;
    case 3: c.dt_no_bias = true; what = "ssm_dt without .bias"; break;
    case 4: c.recurrent_array = true; what = "attention.recurrent_layers"; break;
    case 5: c = tiny_default(true); c.nextn = 1; c.head_kv_array = true; c.tied = true;
            what = "moe: MTP + kv array + tied"; break;
    default: ck_abort();
    }
    check_against_reference(&c, what, 12, NULL);
}
END_TEST

/* ---- batching and sequences ---- */

START_TEST(test_batch_vs_stepwise)
{
    env e;
    si_err err;
    tiny_cfg c = tiny_default(_i == 1);
    const uint32_t n = 24, V = c.V;
    env_open(&e, NULL);
    load_ok(&e, &c, 2, 64);
    int32_t toks[24];
    float *a = malloc((size_t)n * V * sizeof *a), *b = malloc((size_t)n * V * sizeof *b);
    ck_assert(a && b);
    for (uint32_t i = 0; i < n; i++)
        toks[i] = tok_at(i, 3, V);
    ck_assert_msg(fwd_seq(&e, 0, 0, toks, n, a, &err) == SI_OK, "%s", err.msg);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(fwd_seq(&e, 1, i, toks + i, 1, b + (size_t)i * V, &err) == SI_OK, "%s", err.msg);
    cmp r = { 0 };
    for (uint32_t i = 0; i < n; i++)
        cmp_f(&r, a + (size_t)i * V, b + (size_t)i * V, V);
    printf("  %s batched prefill vs token by token: max abs diff %.2e, top-1 mismatches %u\n",
           _i ? "qwen35moe" : "qwen35", r.max_abs, r.top1_diff);
    ck_assert_uint_eq(r.top1_diff, 0);
    ck_assert_msg(r.max_abs < 1e-4, "max abs diff %g", r.max_abs);
    free(a);
    free(b);
    env_close(&e);
}
END_TEST

/* Sequences A and B interleaved across three batches (A then B, B then A,
 * then one decode token each) must equal each sequence run alone after a
 * seq_reset, and a reset sequence must reproduce its first run. */
START_TEST(test_two_sequences)
{
    env e;
    si_err err;
    tiny_cfg c = tiny_default(_i == 1);
    const uint32_t V = c.V, nA = 13, nB = 10;
    env_open(&e, NULL);
    load_ok(&e, &c, 2, 64);
    int32_t A[13], B[10];
    for (uint32_t i = 0; i < nA; i++)
        A[i] = tok_at(i, 11, V);
    for (uint32_t i = 0; i < nB; i++)
        B[i] = tok_at(i, 12, V);
    float *la = calloc((size_t)nA * V, sizeof *la), *lb = calloc((size_t)nB * V, sizeof *lb);
    float *sa = calloc((size_t)nA * V, sizeof *sa), *sb = calloc((size_t)nB * V, sizeof *sb);
    float *out = calloc((size_t)(nA + nB) * V, sizeof *out);
    ck_assert(la && lb && sa && sb && out);

    /* batch 1: A[0..5) seq 0, B[0..4) seq 1 ; batch 2: B[4..9), A[5..12) ;
     * batch 3: A[12], B[9] */
    struct { uint32_t s, from, to; } parts[3][2] = {
        { { 0, 0, 5 }, { 1, 0, 4 } },
        { { 1, 4, 9 }, { 0, 5, 12 } },
        { { 0, 12, 13 }, { 1, 9, 10 } },
    };
    for (int k = 0; k < 3; k++) {
        int32_t tk[32], ps[32], sq[32];
        uint8_t want[32];
        uint32_t n = 0;
        for (int j = 0; j < 2; j++)
            for (uint32_t i = parts[k][j].from; i < parts[k][j].to; i++, n++) {
                tk[n] = parts[k][j].s == 0 ? A[i] : B[i];
                ps[n] = (int32_t)i;
                sq[n] = (int32_t)parts[k][j].s;
                want[n] = 1;
            }
        si_batch bt = { .n = n, .tokens = tk, .pos = ps, .seq = sq, .want_logits = want };
        ck_assert_msg(e.mops->forward(e.m, &bt, out, &err) == SI_OK, "batch %d: %s", k, err.msg);
        for (uint32_t r = 0; r < n; r++)
            memcpy((sq[r] == 0 ? la : lb) + (size_t)ps[r] * V, out + (size_t)r * V, V * sizeof(float));
    }

    ck_assert_int_eq(e.mops->seq_reset(e.m, 0, &err), SI_OK);
    ck_assert_int_eq(e.mops->seq_reset(e.m, 1, &err), SI_OK);
    ck_assert_msg(fwd_seq(&e, 1, 0, B, nB, sb, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(fwd_seq(&e, 0, 0, A, nA, sa, &err) == SI_OK, "%s", err.msg);
    cmp r = { 0 };
    for (uint32_t i = 0; i < nA; i++)
        cmp_f(&r, la + (size_t)i * V, sa + (size_t)i * V, V);
    for (uint32_t i = 0; i < nB; i++)
        cmp_f(&r, lb + (size_t)i * V, sb + (size_t)i * V, V);
    printf("  %s two sequences interleaved vs alone: max abs diff %.2e, top-1 mismatches %u\n",
           _i ? "qwen35moe" : "qwen35", r.max_abs, r.top1_diff);
    ck_assert_uint_eq(r.top1_diff, 0);
    ck_assert_msg(r.max_abs < 1e-4, "max abs diff %g", r.max_abs);

    /* Reset A once more: the same prompt reproduces the same logits. */
    ck_assert_int_eq(e.mops->seq_reset(e.m, 0, &err), SI_OK);
    ck_assert_msg(fwd_seq(&e, 0, 0, A, nA, la, &err) == SI_OK, "%s", err.msg);
    cmp r2 = { 0 };
    for (uint32_t i = 0; i < nA; i++)
        cmp_f(&r2, la + (size_t)i * V, sa + (size_t)i * V, V);
    ck_assert_msg(r2.max_abs < 1e-6, "after seq_reset: max abs diff %g", r2.max_abs);
    ck_assert_int_eq(e.mops->seq_reset(e.m, 2, &err), SI_ERANGE);

    free(la); free(lb); free(sa); free(sb); free(out);
    env_close(&e);
}
END_TEST

START_TEST(test_bad_batches)
{
    env e;
    si_err err;
    tiny_cfg c = tiny_default(false);
    env_open(&e, NULL);
    load_ok(&e, &c, 2, 16);
    int32_t tk[4] = { 1, 2, 3, 4 }, ps[4], sq[4];
    uint8_t want[4] = { 1, 1, 1, 1 };
    float out[4 * 128];
    si_batch bt = { .n = 4, .tokens = tk, .pos = ps, .seq = sq, .want_logits = want };

    /* sequence 0, 1, 0: not consecutive */
    int32_t s1[4] = { 0, 1, 0, 1 }, p1[4] = { 0, 0, 1, 1 };
    memcpy(sq, s1, sizeof sq);
    memcpy(ps, p1, sizeof ps);
    ck_assert_int_eq(e.mops->forward(e.m, &bt, out, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "consecutive") != NULL, "%s", err.msg);
    /* a gap in positions */
    int32_t s2[4] = { 0, 0, 0, 0 }, p2[4] = { 0, 1, 3, 4 };
    memcpy(sq, s2, sizeof sq);
    memcpy(ps, p2, sizeof ps);
    ck_assert_int_eq(e.mops->forward(e.m, &bt, out, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "position 3 but 2 expected") != NULL, "%s", err.msg);
    /* a token outside the vocabulary, a sequence not provisioned */
    int32_t p3[4] = { 0, 1, 2, 3 };
    memcpy(ps, p3, sizeof ps);
    tk[2] = 128;
    ck_assert_int_eq(e.mops->forward(e.m, &bt, out, &err), SI_ERANGE);
    tk[2] = 3;
    sq[0] = sq[1] = sq[2] = sq[3] = 2;
    ck_assert_int_eq(e.mops->forward(e.m, &bt, out, &err), SI_ERANGE);
    /* logits wanted but no buffer */
    memcpy(sq, s2, sizeof sq);
    ck_assert_int_eq(e.mops->forward(e.m, &bt, NULL, &err), SI_EINVAL);
    /* rejected batches left the state alone: position 0 still comes next,
     * and the context limit is enforced */
    ck_assert_msg(e.mops->forward(e.m, &bt, out, &err) == SI_OK, "%s", err.msg);
    int32_t big[16];
    for (int i = 0; i < 16; i++)
        big[i] = i;
    ck_assert_int_eq(fwd_seq(&e, 0, 4, big, 13, NULL, &err), SI_ERANGE);
    ck_assert_msg(strstr(err.msg, "beyond the context") != NULL, "%s", err.msg);
    ck_assert_msg(fwd_seq(&e, 0, 4, big, 12, NULL, &err) == SI_OK, "%s", err.msg);
    env_close(&e);
}
END_TEST

/* A backend that refuses a batch shape at forward time: the refusal is
 * reported before any op runs, so the sequence stays usable.  A failure
 * while ops run leaves the sequence undefined until seq_reset. */
START_TEST(test_forward_failures)
{
    env e;
    si_err err;
    tiny_cfg c = tiny_default(false);
    int32_t toks[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
    float lg[8 * 128];
    env_open(&e, NULL);
    make_picky(&e, SI_OP_NONE, UINT32_MAX);
    refuse_over_tokens = 4;
    load_ok(&e, &c, 1, 32);
    ck_assert_int_eq(fwd_seq(&e, 0, 0, toks, 8, lg, &err), SI_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "backend 'cpu' refuses op GET_ROWS of the embedding (8 tokens)") != NULL,
                  "%s", err.msg);
    ck_assert_msg(fwd_seq(&e, 0, 0, toks, 4, lg, &err) == SI_OK, "%s", err.msg);

    fail_exec = true;
    ck_assert_int_eq(fwd_seq(&e, 0, 4, toks + 4, 2, lg, &err), SI_EDEVICE);
    fail_exec = false;
    ck_assert_int_eq(fwd_seq(&e, 0, 6, toks + 6, 1, lg, &err), SI_EINVAL);
    ck_assert_msg(strstr(err.msg, "reset it first") != NULL, "%s", err.msg);
    ck_assert_int_eq(e.mops->seq_reset(e.m, 0, &err), SI_OK);
    ck_assert_msg(fwd_seq(&e, 0, 0, toks, 2, lg, &err) == SI_OK, "%s", err.msg);
    env_close(&e);
}
END_TEST

/* A step whose shape (tokens, wanted rows, op count) equals the last one
 * that passed the plan check is not checked again (si_model.step_ok);
 * any other shape is, so a refusal of it is still reported before any op
 * runs.  The logits are the same either way. */
START_TEST(test_step_check_once)
{
    env e;
    si_err err;
    tiny_cfg c = tiny_default(true);
    int32_t toks[4] = { 5, 6, 7, 8 };
    float lg[4 * 128], lg2[4 * 128];
    env_open(&e, NULL);
    make_picky(&e, SI_OP_NONE, UINT32_MAX);
    refuse_over_tokens = INT64_MAX;
    load_ok(&e, &c, 2, 32);
    /* (4 tokens first: the scratch, whose growth is checked on its own,
     * then has room for every step below) */
    ck_assert_msg(fwd_seq(&e, 1, 0, toks, 4, lg, &err) == SI_OK, "%s", err.msg);
    ck_assert_int_eq(e.mops->seq_reset(e.m, 1, &err), SI_OK);
    size_t before = supports_calls;
    ck_assert_msg(fwd_seq(&e, 0, 0, toks, 1, lg, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(supports_calls > before, "the first step was not checked");
    before = supports_calls;
    ck_assert_msg(fwd_seq(&e, 0, 1, toks + 1, 1, lg, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(fwd_seq(&e, 1, 0, toks + 1, 1, lg2, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(supports_calls == before, "a step of the same shape was checked again (%zu calls)",
                  supports_calls - before);
    ck_assert_msg(fwd_seq(&e, 0, 2, toks + 2, 2, lg, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(supports_calls > before, "a 2-token step was not checked");
    /* a refusal of another shape is reported, nothing run, and the
     * sequence goes on: 2 then 3 tokens of which the last wants its row
     * (the same ops and row count: only the token count differs) */
    const int32_t pos3[3] = { 4, 5, 6 }, seq3[3] = { 0, 0, 0 };
    const uint8_t want2[2] = { 0, 1 }, want3[3] = { 0, 0, 1 };
    si_batch b2 = { .n = 2, .tokens = toks, .pos = pos3, .seq = seq3, .want_logits = want2 };
    ck_assert_msg(e.mops->forward(e.m, &b2, lg, &err) == SI_OK, "%s", err.msg);
    refuse_over_tokens = 2;
    const int32_t pos3b[3] = { 6, 7, 8 };
    si_batch b3 = { .n = 3, .tokens = toks, .pos = pos3b, .seq = seq3, .want_logits = want3 };
    ck_assert_int_eq(e.mops->forward(e.m, &b3, lg, &err), SI_EUNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "refuses op") != NULL && strstr(err.msg, "(3 tokens)") != NULL, "%s", err.msg);
    ck_assert_msg(fwd_seq(&e, 0, 6, toks, 2, lg, &err) == SI_OK, "%s", err.msg);
    /* 2 tokens, the last wanted (checked), then both wanted: the same
     * token count, another row count, checked again */
    refuse_over_tokens = INT64_MAX;
    const int32_t pos8[2] = { 8, 9 }, pos10[2] = { 10, 11 };
    si_batch b2b = { .n = 2, .tokens = toks, .pos = pos8, .seq = seq3, .want_logits = want2 };
    ck_assert_msg(e.mops->forward(e.m, &b2b, lg, &err) == SI_OK, "%s", err.msg);
    before = supports_calls;
    const uint8_t want_both[2] = { 1, 1 };
    si_batch b2c = { .n = 2, .tokens = toks, .pos = pos10, .seq = seq3, .want_logits = want_both };
    ck_assert_msg(e.mops->forward(e.m, &b2c, lg, &err) == SI_OK, "%s", err.msg);
    ck_assert_msg(supports_calls > before, "2 wanted rows after 1 were not checked");
    /* the same token at the same place gives the same logits checked or not */
    ck_assert_int_eq(e.mops->seq_reset(e.m, 1, &err), SI_OK);
    ck_assert_msg(fwd_seq(&e, 1, 0, toks + 1, 1, lg, &err) == SI_OK, "%s", err.msg);
    ck_assert(memcmp(lg, lg2, sizeof(float) * c.V) == 0);
    refuse_over_tokens = INT64_MAX;
    env_close(&e);
}
END_TEST

/* ---- load errors ---- */

START_TEST(test_err_missing_tensor)
{
    tiny_cfg c = tiny_default(false);
    c.omit = "blk.3.attn_k.weight";
    load_fails(&c, SI_ENOTFOUND, "blk.3.attn_k.weight: tensor missing (required by full-attention layer 3)");
    c.omit = "blk.0.ssm_a";
    load_fails(&c, SI_ENOTFOUND, "blk.0.ssm_a: tensor missing (required by GDN layer 0)");
    c.omit = "output_norm.weight";
    load_fails(&c, SI_ENOTFOUND, "output_norm.weight: tensor missing");
    c = tiny_default(true);
    c.omit = "blk.5.ffn_down_exps.weight";
    load_fails(&c, SI_ENOTFOUND, "blk.5.ffn_down_exps.weight: tensor missing (required by layer 5 (MoE FFN))");
    c.omit = "blk.2.ffn_up_shexp.weight";
    load_fails(&c, SI_ENOTFOUND, "blk.2.ffn_up_shexp.weight: tensor missing");
    c.omit = "blk.1.ssm_dt.bias";
    load_fails(&c, SI_ENOTFOUND, "blk.1.ssm_dt.bias: tensor missing (nor blk.1.ssm_dt");
}
END_TEST

START_TEST(test_err_wrong_shape)
{
    tiny_cfg c = tiny_default(false);
    c.grow = "blk.3.attn_q.weight";
    load_fails(&c, SI_EFORMAT, "blk.3.attn_q.weight: shape [64, 257] but [64, 256] expected "
                               "(embedding_length 64, 2 * head_count 4 * key_length 32)");
    c.grow = "blk.0.ssm_conv1d.weight";
    load_fails(&c, SI_EFORMAT, "blk.0.ssm_conv1d.weight: shape [4, 129] but [4, 128] expected "
                               "(conv_kernel 4, 2 * group_count 2 * state_size 16 + inner_size 64)");
    c.grow = "token_embd.weight";   /* 129 rows: output.weight disagrees */
    load_fails(&c, SI_EFORMAT, "output.weight: shape [64, 128] but [64, 129] expected");
    c = tiny_default(true);
    c.grow = "blk.4.ffn_gate_exps.weight";
    load_fails(&c, SI_EFORMAT, "blk.4.ffn_gate_exps.weight: shape [64, 32, 9] but [64, 32, 8] expected");
}
END_TEST

START_TEST(test_err_wrong_type)
{
    tiny_cfg c = tiny_default(false);
    c.f16 = "blk.1.attn_norm.weight";
    load_fails(&c, SI_EFORMAT, "blk.1.attn_norm.weight: type f16 but f32 required");
    c.f16 = "blk.2.ssm_conv1d.weight";
    load_fails(&c, SI_EFORMAT, "blk.2.ssm_conv1d.weight: type f16 but f32 required");
    c.f16 = "blk.3.attn_k_norm.weight";
    load_fails(&c, SI_EFORMAT, "blk.3.attn_k_norm.weight: type f16 but f32 required");
}
END_TEST

START_TEST(test_err_metadata)
{
    tiny_cfg c = tiny_default(false);
    c.bad_key = "ssm.inner_size";
    c.bad_val = 60;
    load_fails(&c, SI_EFORMAT, "qwen35.ssm.inner_size 60 but time_step_rank 4 * state_size 16 = 64");
    c.bad_key = "attention.head_count";
    c.bad_val = 8;   /* contradicts attn_q's rows */
    load_fails(&c, SI_EFORMAT, "blk.3.attn_q.weight: shape [64, 256] but [64, 512] expected "
                               "(embedding_length 64, 2 * head_count 8 * key_length 32)");
    c.bad_key = "attention.value_length";
    c.bad_val = 16;
    load_fails(&c, SI_EFORMAT, "qwen35.attention.value_length 16 differs from key_length 32");
    c.bad_key = "ssm.group_count";
    c.bad_val = 3;
    load_fails(&c, SI_EFORMAT, "qwen35.ssm.time_step_rank 4 is not a multiple of group_count 3");
    c.bad_key = "block_count";
    c.bad_val = 9;   /* claims a 9th layer that is not in the file */
    load_fails(&c, SI_ENOTFOUND, "blk.8.attn_norm.weight: tensor missing");
    c.bad_key = NULL;
    c.omit_key = "ssm.conv_kernel";
    load_fails(&c, SI_ENOTFOUND, "qwen35.ssm.conv_kernel: required key missing");
    c = tiny_default(true);
    c.bad_key = "expert_used_count";
    c.bad_val = 9;
    load_fails(&c, SI_ERANGE, "qwen35moe.expert_used_count 9 / expert_count 8");
    c.bad_key = NULL;
    c.arch_override = "qwen3next";
    load_fails(&c, SI_EREFUSED, "general.architecture is not 'qwen35moe'");
}
END_TEST

START_TEST(test_err_backend_refuses)
{
    tiny_cfg c = tiny_default(false);
    c.weight_type = SI_TYPE_F16;
    load_fails_on(&c, SI_OP_NONE, SI_TYPE_F16, SI_EUNSUPPORTED,
                  "backend 'cpu' refuses op MATMUL of layer 0 (1 tokens) with weight "
                  "blk.0.attn_qkv.weight of type f16");
    c = tiny_default(false);
    load_fails_on(&c, SI_OP_GDN, UINT32_MAX, SI_EUNSUPPORTED,
                  "backend 'cpu' refuses op GDN of layer 0 (1 tokens)");
    c = tiny_default(true);
    load_fails_on(&c, SI_OP_MOE, UINT32_MAX, SI_EUNSUPPORTED,
                  "backend 'cpu' refuses op MOE of layer 0 (1 tokens)");
    load_fails_on(&c, SI_OP_ATTN, UINT32_MAX, SI_EUNSUPPORTED,
                  "backend 'cpu' refuses op ATTN of layer 3 (1 tokens)");
    c.tied = true;
    c.f16 = "token_embd.weight";
    load_fails_on(&c, SI_OP_NONE, SI_TYPE_F16, SI_EUNSUPPORTED,
                  "backend 'cpu' refuses op MATMUL of the output head (1 tokens) with weight "
                  "token_embd.weight (tied output) of type f16");
}
END_TEST

/* Quantized weights (every matrix Q8_0 or F16) flow through weight_load
 * unchanged: with the cpu backend's f32 reference matmul the logits still
 * match the reference (which dequantizes the same blocks) to 1e-4. */
START_TEST(test_quantized_weights)
{
    static const char *const ref_mm[] = { "backend.cpu.matmul=ref", NULL };
    tiny_cfg c = tiny_default(_i >= 2);
    c.weight_type = _i % 2 == 0 ? SI_TYPE_Q8_0 : SI_TYPE_F16;
    char what[64];
    snprintf(what, sizeof what, "%s %s weights", tiny_arch(&c), _i % 2 == 0 ? "q8_0" : "f16");
    check_against_reference(&c, what, 12, ref_mm);
}
END_TEST

/* Real third-party GGUFs of other architectures are declined by both
 * plugins' accepts(), and load() refuses them too. */
START_TEST(test_foreign_files)
{
    /* Committed copies (tests/data/gguf), so a fresh clone has them. */
    static const char *const files[] = {
        "tests/data/gguf/llama-2-tiny-random.gguf",
        "tests/data/gguf/ggml-vocab-gpt-2.gguf",
    };
    const char *data = getenv("SI_TOP_SRCDIR");
    ck_assert_msg(data != NULL, "SI_TOP_SRCDIR unset");
    env e;
    si_err err;
    env_open(&e, NULL);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        si_gguf *g = NULL;
        si_model *m = NULL;
        snprintf(path, sizeof path, "%s/%s", data, files[i]);
        ck_assert_msg(si_gguf_open(path, &g, &err) == SI_OK, "%s", err.msg);
        const struct si_model_ops *o35 = e.q35->ops, *o36 = e.q36->ops;
        ck_assert(!o35->accepts(&e.host, g));
        ck_assert(!o36->accepts(&e.host, g));
        ck_assert_int_eq(o35->load(&e.host, g, &e.be, 1, 16, &m, &err), SI_EREFUSED);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err.msg, "general.architecture is not 'qwen35'") != NULL, "%s", err.msg);
        si_gguf_close(g);
    }
    env_close(&e);
}
END_TEST

/* forward_topk: per wanted row, exactly the top-k (after the penalties) of
 * the logits forward gives for the same batch, over 40 rows (two logit
 * chunks: the penalty offsets are sliced per chunk); and a backend
 * without TOPK is refused before anything runs (the sequence stays at 0). */
typedef struct tk_ent {
    float   v;
    int32_t id;
} tk_ent;

static int tk_cmp(const void *a, const void *b)
{
    const tk_ent *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* ids/vals of `rows` TOPK rows against the logits lg with tp's
 * penalties (P per row, from pid/pcnt) applied as the spec says. */
static void topk_expect(const float *lg, uint32_t V, uint32_t rows, const si_topk_params *tp, uint32_t P,
                        const int32_t *pid, const int32_t *pcnt, const float *vals, const int32_t *ids, tk_ent *row)
{
    const uint32_t K = tp->k;
    for (uint32_t r = 0; r < rows; r++) {
        for (uint32_t i = 0; i < V; i++)
            row[i] = (tk_ent){ lg[(size_t)r * V + i], (int32_t)i };
        for (uint32_t j = 0; tp->pen_off != NULL && j < P; j++) {
            float l = row[pid[r * P + j]].v;
            l = l <= 0.0f ? l * tp->repeat_penalty : l / tp->repeat_penalty;
            float sub = (float)pcnt[r * P + j] * tp->frequency_penalty;
            sub = sub + tp->presence_penalty;
            row[pid[r * P + j]].v = l - sub;
        }
        qsort(row, V, sizeof *row, tk_cmp);
        for (uint32_t i = 0; i < K; i++)
            ck_assert_msg(ids[r * K + i] == row[i].id && memcmp(&vals[r * K + i], &row[i].v, 4) == 0,
                          "row %u entry %u: (%g, %d) vs (%g, %d)", r, i, (double)vals[r * K + i], ids[r * K + i],
                          (double)row[i].v, row[i].id);
    }
}

/* The cpu backend's download, as download_start / download_wait (plugin.h
 * 1.3): the copy made at start into the test's own slot, the caller's
 * memory written only at the wait, tickets checked (each waited for once). */
#define FAKE_SLOTS SI_DOWNLOADS_IN_FLIGHT
static struct { uint8_t bytes[4096]; void *dst; uint64_t n; bool busy; } fake_dl[FAKE_SLOTS];
static uint32_t fake_started, fake_waited;

static int fake_start(si_backend *b, void *dst, si_buf *src, uint64_t off, uint64_t n, uint32_t *ticket, si_err *err)
{
    int i = 0;
    while (i < FAKE_SLOTS && fake_dl[i].busy)
        i++;
    ck_assert_msg(i < FAKE_SLOTS && n <= sizeof fake_dl[i].bytes, "more downloads in flight than the ABI allows");
    int rc = real_download(b, fake_dl[i].bytes, src, off, n, err);
    if (rc == SI_OK) {
        fake_dl[i].dst = dst;
        fake_dl[i].n = n;
        fake_dl[i].busy = true;
        *ticket = 100u + (uint32_t)i;
        fake_started++;
    }
    return rc;
}

static int fake_wait(si_backend *b, uint32_t ticket, si_err *err)
{
    (void)b;
    const uint32_t i = ticket - 100u;
    if (i >= FAKE_SLOTS || !fake_dl[i].busy)
        return si_err_set(err, SI_EINVAL, "ticket %u not in flight", ticket);
    memcpy(fake_dl[i].dst, fake_dl[i].bytes, fake_dl[i].n);
    fake_dl[i].busy = false;
    fake_waited++;
    return SI_OK;
}

static void make_async(env *e)
{
    make_picky(e, SI_OP_NONE, UINT32_MAX);
    real_download = picky_ops.download;
    picky_ops.download_start = fake_start;
    picky_ops.download_wait = fake_wait;
    fake_started = fake_waited = 0;
    memset(fake_dl, 0, sizeof fake_dl);
}

/* Decode ahead (topk_submit / topk_collect): 40 greedy steps the same bits
 * as forward_topk one at a time, for both families, with the backend's
 * download (a row fetched at submit) and with download_start (fetched at
 * collect); then what the ABI refuses, each refusal leaving the queue as
 * it was. */
START_TEST(test_decode_ahead)
{
    for (int moe = 0; moe < 2; moe++)
        for (int async = 0; async < 2; async++) {
            env e;
            si_err err;
            tiny_cfg c = tiny_default(moe);
            const uint32_t V = c.V;
            env_open(&e, NULL);
            if (async)
                make_async(&e);
            load_ok(&e, &c, 2, 128);
            si_model *b = NULL;
            ck_assert_msg(e.mops->load(&e.host, e.g, &e.be, 2, 128, &b, &err) == SI_OK, "%s", err.msg);
            ck_assert(SI_HAS_MEMBER(e.mops, struct si_model_ops, topk_collect) && e.mops->topk_submit != NULL);
            int32_t toks[6];
            for (uint32_t i = 0; i < 6; i++)
                toks[i] = tok_at(i, 5, V);
            si_model *a = e.m;
            for (int i = 0; i < 2; i++) {
                e.m = i ? b : a;
                ck_assert_msg(fwd_seq(&e, 1, 0, toks, 5, NULL, &err) == SI_OK, "%s", err.msg);
                ck_assert_msg(fwd_seq(&e, 0, 0, toks + 1, 3, NULL, &err) == SI_OK, "%s", err.msg);
            }
            e.m = a;
            /* sequence 1 alone, then both (a step of two rows: strided
             * ids), sequence 1 first */
            const int32_t s1[1] = { 1 }, p1[1] = { 5 }, t1[1] = { toks[5] };
            const int32_t s2[2] = { 1, 0 }, p2[2] = { 25, 3 }, t2[2] = { toks[0], toks[4] };
            ck_assert_uint_gt(si_ahead_compare(e.mops, a, b, 1, s1, p1, t1, 20, 3, false), 0);
            ck_assert_uint_gt(si_ahead_compare(e.mops, a, b, 2, s2, p2, t2, 20, 2, false), 0);
            if (async)
                ck_assert_uint_eq(fake_started, 40);
            /* posted (the cpu has no post_ids: each posted step runs at its
             * post), then fed again after them */
            const int32_t p3[2] = { 45, 23 }, t3[2] = { toks[2], toks[3] };
            ck_assert_uint_gt(si_ahead_compare(e.mops, a, b, 2, s2, p3, t3, 12, 3, true), 0);
            const int32_t p4[2] = { 57, 35 }, t4[2] = { toks[1], toks[5] };
            ck_assert_uint_gt(si_ahead_compare(e.mops, a, b, 2, s2, p4, t4, 8, 2, false), 0);
            if (async)
                ck_assert_uint_eq(fake_started, 60);

            /* What the ABI refuses, each refusal leaving the queue as it
             * was.  b now: sequence 1 at 65, 0 at 43, the last exec a
             * submit of both with k 2. */
            const si_topk_params tp = { .k = 3, .repeat_penalty = 1.0f }, tp2 = { .k = 2, .repeat_penalty = 1.0f };
            int32_t t = toks[0], p = 65, sq = 1, sq0 = 0, p0 = 44;   /* (sequence 0 after the fed step of both) */
            const uint8_t w1 = 1, w2[2] = { 1, 1 }, w0 = 0;
            int32_t two_t[2] = { 1, 2 }, two_p[2] = { 65, 66 }, two_s[2] = { 1, 1 };
            const int32_t both_s[2] = { 1, 0 }, both_p[2] = { 65, 43 };
            si_batch one = { .n = 1, .tokens = &t, .pos = &p, .seq = &sq, .want_logits = &w1 };
            si_batch two = { .n = 2, .tokens = two_t, .pos = two_p, .seq = two_s, .want_logits = w2 };
            si_batch both = { .n = 2, .tokens = two_t, .pos = both_p, .seq = both_s, .want_logits = w2 };
            si_batch nolog = one, other = one;
            nolog.want_logits = &w0;
            other.seq = &sq0;
            other.pos = &p0;
            float v[6];
            int32_t id[6];
            const int32_t off[2] = { 0, 1 }, pid[1] = { 3 }, pc[1] = { 1 };
            const si_topk_params pen = { .k = 3, .repeat_penalty = 1.5f, .pen_off = off, .pen_id = pid, .pen_count = pc };
            ck_assert_int_eq(e.mops->topk_collect(b, v, id, &err), SI_EINVAL);                    /* none queued */
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp2, SI_SUBMIT_FEED, &err), SI_EINVAL); /* other seqs */
            ck_assert_int_eq(e.mops->topk_submit(b, &both, &tp, SI_SUBMIT_FEED, &err), SI_EINVAL); /* other k */
            ck_assert_msg(e.mops->topk_submit(b, &both, &tp2, SI_SUBMIT_FEED, &err) == SI_OK, "%s", err.msg);
            ck_assert_msg(e.mops->topk_collect(b, v, id, &err) == SI_OK, "%s", err.msg);
            p = 66;
            two_p[0] = 66;
            two_p[1] = 67;
            ck_assert_int_eq(e.mops->topk_submit(b, &two, &tp, 0, &err), SI_EINVAL);  /* one sequence twice */
            ck_assert_int_eq(e.mops->topk_submit(b, &nolog, &tp, 0, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &pen, 0, &err), SI_EINVAL);  /* penalties */
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp, 4u, &err), SI_EINVAL);  /* unknown flag */
            ck_assert_msg(e.mops->topk_submit(b, &one, &tp, 0, &err) == SI_OK, "%s", err.msg);   /* at 66 */
            p++;
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp2, SI_SUBMIT_FEED, &err), SI_EINVAL);  /* other k */
            ck_assert_int_eq(e.mops->topk_submit(b, &other, &tp, SI_SUBMIT_FEED, &err), SI_EINVAL); /* other seq */
            ck_assert_msg(e.mops->topk_submit(b, &one, &tp, SI_SUBMIT_FEED, &err) == SI_OK, "%s", err.msg);
            p++;
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp, SI_SUBMIT_FEED, &err), SI_EINVAL);   /* 2 queued */
            ck_assert_int_eq(e.mops->forward(b, &other, v, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->seq_reset(b, 0, &err), SI_EINVAL);
            ck_assert_msg(e.mops->topk_collect(b, v, id, &err) == SI_OK, "%s", err.msg);
            ck_assert_msg(e.mops->topk_collect(b, v, id, &err) == SI_OK, "%s", err.msg);
            /* another exec between: a fed step has nothing to feed on */
            float *full = malloc(V * sizeof *full);
            ck_assert_ptr_nonnull(full);
            ck_assert_msg(e.mops->forward(b, &other, full, &err) == SI_OK, "%s", err.msg);
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp, SI_SUBMIT_FEED, &err), SI_EINVAL);
            ck_assert_msg(e.mops->topk_submit(b, &one, &tp, 0, &err) == SI_OK, "%s", err.msg);   /* at 68 */
            ck_assert_msg(e.mops->topk_collect(b, v, id, &err) == SI_OK, "%s", err.msg);
            /* posts: the flags together, a post with none waiting; with one
             * waiting: another submit, a collect of it, a forward, a reset,
             * a post of the wrong count or a bad token */
            const int32_t good = 3, bad = (int32_t)V, pair[2] = { 1, 2 };
            p++;
            ck_assert_int_eq(e.mops->topk_post(b, &good, 1, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp, SI_SUBMIT_FEED | SI_SUBMIT_POST, &err), SI_EINVAL);
            ck_assert_msg(e.mops->topk_submit(b, &one, &tp, SI_SUBMIT_POST, &err) == SI_OK, "%s", err.msg);
            p++;
            ck_assert_int_eq(e.mops->topk_submit(b, &one, &tp, SI_SUBMIT_FEED, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->topk_collect(b, v, id, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->forward(b, &other, full, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->seq_reset(b, 1, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->topk_post(b, pair, 2, &err), SI_EINVAL);
            ck_assert_int_eq(e.mops->topk_post(b, &bad, 1, &err), SI_ERANGE);
            ck_assert_msg(e.mops->topk_post(b, &good, 1, &err) == SI_OK, "%s", err.msg);
            ck_assert_int_eq(e.mops->topk_post(b, &good, 1, &err), SI_EINVAL);   /* (taken) */
            ck_assert_msg(e.mops->topk_collect(b, v, id, &err) == SI_OK, "%s", err.msg);
            ck_assert_msg(e.mops->seq_reset(b, 1, &err) == SI_OK, "%s", err.msg);
            if (async)
                ck_assert_uint_eq(fake_waited, fake_started);
            free(full);
            e.mops->unload(b);
            env_close(&e);
        }
}
END_TEST

START_TEST(test_forward_topk)
{
    env e;
    si_err err;
    tiny_cfg c = tiny_default(false);
    enum { N = 40, K = 7, P = 5 };
    const uint32_t V = c.V;
    env_open(&e, NULL);
    load_ok(&e, &c, 2, 64);
    ck_assert(SI_HAS_MEMBER(e.mops, struct si_model_ops, forward_topk) && e.mops->forward_topk != NULL);
    int32_t toks[N], pos[N], sq[N], off[N + 1], pid[N * P], pcnt[N * P];
    uint8_t want[N];
    for (uint32_t i = 0; i < N; i++) {
        toks[i] = tok_at(i, 9, V);
        pos[i] = (int32_t)i;
        sq[i] = 1;
        want[i] = 1;
        off[i] = (int32_t)(i * P);
        for (uint32_t j = 0; j < P; j++) {
            pid[i * P + j] = (int32_t)((i * 3 + j * 11) % V);
            pcnt[i * P + j] = (int32_t)j + 1;
        }
    }
    off[N] = N * P;
    float *lg = malloc((size_t)N * V * sizeof *lg), vals[N * K];
    int32_t ids[N * K];
    tk_ent *row = malloc(V * sizeof *row);
    ck_assert(lg && row);
    ck_assert_msg(fwd_seq(&e, 0, 0, toks, N, lg, &err) == SI_OK, "%s", err.msg);
    si_batch bt = { .n = N, .tokens = toks, .pos = pos, .seq = sq, .want_logits = want };
    si_topk_params tp = { .k = K, .repeat_penalty = 1.5f, .frequency_penalty = 0.25f, .presence_penalty = 0.5f,
                          .pen_off = off, .pen_id = pid, .pen_count = pcnt };
    ck_assert_msg(e.mops->forward_topk(e.m, &bt, &tp, vals, ids, &err) == SI_OK, "%s", err.msg);
    topk_expect(lg, V, N, &tp, P, pid, pcnt, vals, ids, row);
    /* 20 rows (<= SIH_LOGIT_ROWS): the trunk, the head and (without
     * penalties) TOPK run as one exec (forward_step); with penalties TOPK
     * follows as its own.  Reference: the same 20 tokens' logits. */
    for (int pen = 0; pen < 2; pen++) {
        enum { N2 = 20 };
        ck_assert_int_eq(e.mops->seq_reset(e.m, 0, &err), SI_OK);
        ck_assert_int_eq(e.mops->seq_reset(e.m, 1, &err), SI_OK);
        ck_assert_msg(fwd_seq(&e, 0, 0, toks, N2, lg, &err) == SI_OK, "%s", err.msg);
        si_topk_params t2 = tp;
        if (!pen)
            t2 = (si_topk_params){ .k = K, .repeat_penalty = 1.0f };
        bt.n = N2;
        ck_assert_msg(e.mops->forward_topk(e.m, &bt, &t2, vals, ids, &err) == SI_OK, "%s", err.msg);
        topk_expect(lg, V, N2, &t2, P, pid, pcnt, vals, ids, row);
        bt.n = N;
    }
    tp.k = V + 1;
    ck_assert_int_eq(e.mops->forward_topk(e.m, &bt, &tp, vals, ids, &err), SI_EINVAL);
    free(lg);
    free(row);
    env_close(&e);

    env_open(&e, NULL);
    make_picky(&e, SI_OP_TOPK, UINT32_MAX);
    load_ok(&e, &c, 1, 64);
    for (uint32_t i = 0; i < N; i++)
        sq[i] = 0;
    tp.k = K;
    ck_assert_int_eq(e.mops->forward_topk(e.m, &bt, &tp, vals, ids, &err), SI_EUNSUPPORTED);
    ck_assert_msg(fwd_seq(&e, 0, 0, toks, 1, NULL, &err) == SI_OK, "still at position 0: %s", err.msg);
    env_close(&e);
    refuse_kind = 0;
}
END_TEST

static Suite *models_suite(void)
{
    Suite *s = suite_create("models");
    TCase *t = tcase_create("reference");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, test_dense_reference);
    tcase_add_test(t, test_moe_reference);
    tcase_add_test(t, test_moe_fused_gate_up);
    tcase_add_test(t, test_yarn_reference);
    tcase_add_loop_test(t, test_chunked_batch, 0, 2);
    tcase_add_loop_test(t, test_variants, 0, 6);
    tcase_add_loop_test(t, test_quantized_weights, 0, 4);
    suite_add_tcase(s, t);

    t = tcase_create("sequences");
    tcase_set_timeout(t, 300);
    tcase_add_loop_test(t, test_batch_vs_stepwise, 0, 2);
    tcase_add_loop_test(t, test_two_sequences, 0, 2);
    tcase_add_test(t, test_bad_batches);
    tcase_add_test(t, test_forward_failures);
    tcase_add_test(t, test_step_check_once);
    tcase_add_test(t, test_forward_topk);
    tcase_add_test(t, test_decode_ahead);
    suite_add_tcase(s, t);

    t = tcase_create("load_errors");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_err_missing_tensor);
    tcase_add_test(t, test_err_wrong_shape);
    tcase_add_test(t, test_err_wrong_type);
    tcase_add_test(t, test_err_metadata);
    tcase_add_test(t, test_err_backend_refuses);
    tcase_add_test(t, test_foreign_files);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(models_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
