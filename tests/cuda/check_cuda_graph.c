/* tests/cuda/check_cuda_graph.c — cuda_sm120's CUDA graph replay (knob
 * graph, backends/cuda_sm120/cuda_graph.c) against its own op-by-op path:
 * the same tiny model (tests/models/tiny_gguf.c) is loaded twice on the
 * GPU, graph = true and graph = false, and both run the same steps:
 *   - a batched prefill (sequence 0: 200 tokens, sequence 1: 8),
 *   - 70 decode steps of both sequences (sequence 0 crosses position 256:
 *     the attention length bucket changes, a new capture),
 *   - 20 decode steps of sequence 1 alone (batch of 1),
 *   - sequence 1 reset and prefilled again with 280 tokens (the largest
 *     batch yet: workspaces grow, captured graphs go stale),
 *   - 10 more decode steps of both.
 * The graph = false side also runs every op alone (gemv_fuse = false,
 * fuse_norm = false: no MATMUL groups, no fused ADD+RMSNORM+int8 copy) in
 * plain stream order (pdl = false), so the fusions and the programmatic
 * dependent launches are checked against the plain ops here too (Q8_0
 * weights: the int8 paths they live on).
 * Every logit of every step must agree to 1e-6 (relative to max(1, |x|));
 * the kernels do the same IEEE operations, so they are expected
 * bit-identical.  The
 * graph run must have replayed (its "graphs:" log line at close); the i8
 * graph side runs with profile = graph, whose timing (events around each
 * replay) must change no bit and count every replay; the graph sides also
 * run units twice in each capture (profile_twice = matmul for f16, moe
 * for i8; a third qwen36 f16 pair: an empty launch after every unit),
 * which must change no bit either.  Knob h2d_early (the ATTN/GDN per-step
 * numbers copied once before an exec's first op, cuda_h2d.c): on for the
 * f16/i8 graph sides and the f16e op-by-op side, off for the f16/i8
 * op-by-op sides and the f16e graph side (the per-op copies, captured as
 * memcpy nodes); the i8 graph side's captures (profile = graph logs their
 * node types) hold at most one copy each.  For
 * qwen35 (dense) and qwen36 (MoE), kv_type f16 and i8 (paged).
 *
 * Exits 77 (SKIP) when the cuda_sm120 probe refuses the machine.  CK_NOFORK:
 * a CUDA context does not survive fork(). */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sparkinfer/plugin.h>

#include "config.h"
#include "ahead_cmp.h"
#include "cuda_test.h"
#include "gguf.h"
#include "host.h"
#include "tiny.h"

#define N_SEQ    2
#define N_CTX    320
#define PRE0     200
#define PRE1     8
#define DEC2     70
#define DEC1     20
#define PRE1B    280
#define DEC2B    10

static si_config *cfg;
static si_host host;
static void *dl[3];
static const si_plugin *p_cu, *p_q35, *p_q36;

/* The "graphs:" line each cuda_sm120 logs at close. */
static unsigned long long g_seen, g_captured, g_replays, g_never;
static int g_lines;
/* profile = graph (the i8 graph side): its per-length timing lines. */
static unsigned long long t_replays;
static int t_lines, t_bad;
/* profile_twice (both graph sides): its lines at capture, and how many
 * of them doubled no unit. */
static int tw_lines, tw_none;
/* profile = graph: its line at each capture (node types); h2d_early
 * leaves at most one copy a graph (the per-step numbers, at its head). */
static int n_lines;
static size_t n_copies_max;

static void test_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    (void)h;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sscanf(msg, "graphs: %llu op lists seen, %llu captured, %llu replays, %llu not capturable", &g_seen,
               &g_captured, &g_replays, &g_never) == 4)
        g_lines++;
    size_t n_ops;
    unsigned long long reps;
    double mean, min, host_us;
    if (sscanf(msg, "profile: graphs of %zu ops: %llu replays, %lf us mean, %lf us min device time; %lf us mean host",
               &n_ops, &reps, &mean, &min, &host_us) == 5) {
        t_lines++;
        t_replays += reps;
        t_bad += !(n_ops > 0 && reps > 0 && min > 0.0 && mean >= min && mean < 1e6 && host_us > 0.0);
    }
    size_t nn, nk, nc, nm, no;
    if (sscanf(msg, "profile: captured a graph of %zu ops: %zu nodes (%zu kernels, %zu copies, %zu memsets, %zu other)",
               &n_ops, &nn, &nk, &nc, &nm, &no) == 6) {
        n_lines++;
        n_copies_max = nc > n_copies_max ? nc : n_copies_max;
    }
    size_t n_tw;
    if (sscanf(msg, "profile_twice: a graph of %zu ops runs %zu units twice", &n_ops, &n_tw) == 2) {
        tw_lines++;
        tw_none += n_tw == 0;
    }
    if (level <= SI_LOG_WARN)
        fprintf(stderr, "[%s] %s\n", who, msg);
}

typedef struct stats {
    uint64_t logits, exact;
    double   worst;
} stats;

/* The same batch on both (every token wants logits); compared value by
 * value. */
static void step_both(si_ct_model *ra, si_ct_model *rb, const si_batch *bt, uint32_t V, stats *st, const char *what)
{
    const size_t nv = (size_t)bt->n * V;
    float *la = malloc(nv * sizeof *la), *lb = malloc(nv * sizeof *lb);
    ck_assert(la != NULL && lb != NULL);
    si_err err = { { 0 } };
    ck_assert_msg(ra->mops->forward(ra->m, bt, la, &err) == SI_OK, "graph forward (%s): %s", what, err.msg);
    ck_assert_msg(rb->mops->forward(rb->m, bt, lb, &err) == SI_OK, "op-by-op forward (%s): %s", what, err.msg);
    for (size_t i = 0; i < nv; i++) {
        ck_assert_msg(isfinite(la[i]) && isfinite(lb[i]), "%s: logit %zu: graph %g, op by op %g", what, i,
                      (double)la[i], (double)lb[i]);
        const double d = fabs((double)la[i] - lb[i]) / fmax(1.0, fabs((double)lb[i]));
        ck_assert_msg(d <= 1e-6, "%s: logit %zu (token %zu): graph %.9g, op by op %.9g", what, i, i / V,
                      (double)la[i], (double)lb[i]);
        st->worst = fmax(st->worst, d);
        st->exact += la[i] == lb[i];
    }
    st->logits += nv;
    free(la);
    free(lb);
}

static void prefill(si_ct_model *ra, si_ct_model *rb, uint32_t V, stats *st, const int32_t *seqs, const int32_t *pos0,
                    const uint32_t *lens, int n_parts, uint32_t salt)
{
    uint32_t n = 0;
    for (int p = 0; p < n_parts; p++)
        n += lens[p];
    int32_t *tok = malloc(n * sizeof *tok), *pos = malloc(n * sizeof *pos), *seq = malloc(n * sizeof *seq);
    uint8_t *want = malloc(n);
    ck_assert(tok && pos && seq && want);
    uint32_t i = 0;
    for (int p = 0; p < n_parts; p++)
        for (uint32_t j = 0; j < lens[p]; j++, i++) {
            seq[i] = seqs[p];
            pos[i] = pos0[p] + (int32_t)j;
            tok[i] = si_ct_tok(j, salt + (uint32_t)seqs[p], V);
            want[i] = 1;
        }
    si_batch bt = { .n = n, .tokens = tok, .pos = pos, .seq = seq, .want_logits = want };
    step_both(ra, rb, &bt, V, st, "prefill");
    free(tok);
    free(pos);
    free(seq);
    free(want);
}

/* `steps` decode steps of the sequences seqs[0..ns), which stand at
 * positions pos[] (advanced). */
static void decode(si_ct_model *ra, si_ct_model *rb, uint32_t V, stats *st, const int32_t *seqs, int32_t *pos, int ns, int steps)
{
    for (int s = 0; s < steps; s++) {
        int32_t t[N_SEQ], p[N_SEQ], q[N_SEQ];
        uint8_t w[N_SEQ];
        for (int k = 0; k < ns; k++) {
            t[k] = si_ct_tok((uint32_t)pos[k], 31u + (uint32_t)seqs[k], V);
            p[k] = pos[k]++;
            q[k] = seqs[k];
            w[k] = 1;
        }
        si_batch bt = { .n = (uint32_t)ns, .tokens = t, .pos = p, .seq = q, .want_logits = w };
        char what[64];
        snprintf(what, sizeof what, "decode bs %d, step %d", ns, s);
        step_both(ra, rb, &bt, V, st, what);
    }
}

/* The tiny model of the family with Q8_0 weights, written to a temporary
 * `path` (the caller unlinks it) and opened. */
static si_gguf *tiny_q8(bool moe, tiny_cfg *c, char path[64])
{
    *c = tiny_default(moe);
    c->weight_type = SI_TYPE_Q8_0;
    snprintf(path, 64, "/tmp/si-cuda-graph-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    si_err err = { { 0 } };
    ck_assert_msg(tiny_write(c, path, &err) == SI_OK, "tiny_write: %s", err.msg);
    si_gguf *g = NULL;
    ck_assert_msg(si_gguf_open(path, &g, &err) == SI_OK, "%s", err.msg);
    return g;
}

static void graph_case(bool moe, const char *kv)
{
    tiny_cfg c;
    char path[64];
    si_gguf *g = tiny_q8(moe, &c, path);
    si_err err = { { 0 } };
    const si_plugin *model = moe ? p_q36 : p_q35;
    char sec_g[64], sec_n[64];
    snprintf(sec_g, sizeof sec_g, "backend.graph_%s", kv);
    snprintf(sec_n, sizeof sec_n, "backend.nograph_%s", kv);
    si_ct_model ra, rb;
    si_ct_model_open(&ra, &host, p_cu, sec_g, model, g, N_SEQ, N_CTX);
    si_ct_model_open(&rb, &host, p_cu, sec_n, model, g, N_SEQ, N_CTX);
    const uint32_t V = c.V;
    stats st = { 0 };
    tw_lines = tw_none = n_lines = 0;
    n_copies_max = 0;

    const int32_t both[2] = { 0, 1 }, one[1] = { 1 };
    const int32_t pos0[2] = { 0, 0 };
    const uint32_t lens[2] = { PRE0, PRE1 };
    prefill(&ra, &rb, V, &st, both, pos0, lens, 2, 7u);
    int32_t pos[2] = { PRE0, PRE1 };
    decode(&ra, &rb, V, &st, both, pos, 2, DEC2);     /* sequence 0: 200 -> 270, bucket 256 -> 512 */
    decode(&ra, &rb, V, &st, one, pos + 1, 1, DEC1);  /* batch of one */
    ck_assert_int_eq(ra.mops->seq_reset(ra.m, 1, &err), SI_OK);
    ck_assert_int_eq(rb.mops->seq_reset(rb.m, 1, &err), SI_OK);
    const uint32_t len1[1] = { PRE1B };
    prefill(&ra, &rb, V, &st, one, pos0, len1, 1, 9u);
    pos[1] = PRE1B;
    decode(&ra, &rb, V, &st, both, pos, 2, DEC2B);    /* after the workspaces grew */

    /* profile_twice (matmul on the f16 side, moe on the i8 one, empty on
     * f16e) doubled units in every capture (none is a MOE in the dense
     * model), and changed no bit above */
    ck_assert_msg(tw_lines > 0, "profile_twice: no line at capture");
    ck_assert_msg(tw_none == (strcmp(kv, "i8") == 0 && !moe ? tw_lines : 0),
                  "profile_twice: %d of %d captures doubled no unit", tw_none, tw_lines);
    /* (profile = graph on the i8 side, with h2d_early) */
    if (strcmp(kv, "i8") == 0)
        ck_assert_msg(n_lines > 0 && n_copies_max <= 1, "h2d_early: %d capture lines, up to %zu copies a graph",
                      n_lines, n_copies_max);
    g_lines = t_lines = t_bad = 0;
    t_replays = 0;
    si_ct_model_close(&ra);
    ck_assert_msg(g_lines == 1, "the graph backend logged no graphs: line at close");
    /* profile = graph on the i8 side: every replay timed, none timed on
     * the f16 side (no knob) */
    if (strcmp(kv, "i8") == 0)
        ck_assert_msg(t_lines > 0 && t_bad == 0 && t_replays == g_replays,
                      "profile = graph: %d lines (%d odd) timing %llu of %llu replays", t_lines, t_bad, t_replays,
                      g_replays);
    else
        ck_assert_msg(t_lines == 0, "graph timing lines without profile = graph");
    const unsigned long long replays = g_replays, captured = g_captured, never = g_never;
    si_ct_model_close(&rb);
    ck_assert_msg(g_lines == 1, "the graph = false backend must not run graphs");
    printf("  %s kv %s: %llu logits, %llu bit-identical, worst rel diff %.3g; graphs: %llu captured, %llu replays, "
           "%llu not capturable\n",
           moe ? "qwen36" : "qwen35", kv, (unsigned long long)st.logits, (unsigned long long)st.exact, st.worst,
           captured, replays, never);
    /* 100 decode steps, one exec each (the model's forward_step: trunk,
     * head and LM head in one list); a few are first sightings and
     * captures (bucket change, batch shape, stale after growth). */
    ck_assert_msg(replays >= 80, "only %llu replays", replays);
    ck_assert_msg(never == 0, "%llu op lists were not capturable", never);
    si_gguf_close(g);
    unlink(path);
}

/* Decode ahead (the model's topk_submit / topk_collect over the backend's
 * download_start / download_wait): two models on one graph section, the
 * same prompts (200 and 8 tokens), then 70 greedy steps of sequence 0
 * (through the attention bucket at 256) and 30 of both with k = 4 (strided
 * ids), then 12 of both and 24 of sequence 1 posted (HOST_IDS: each step
 * queued before the host's pick, not the best, is posted), one at a time
 * on one and queued ahead on the other: the same bits (si_ahead_compare);
 * the queued side's steps are graph replays, each launched while the one before runs (its
 * in-graph upload event lets the replay go once that step's copy left the
 * staging). */
static void ahead_case(bool moe)
{
    tiny_cfg c;
    char path[64];
    si_gguf *g = tiny_q8(moe, &c, path);
    si_ct_model ra, rb;
    si_ct_model_open(&ra, &host, p_cu, "backend.ahead", moe ? p_q36 : p_q35, g, N_SEQ, N_CTX);
    si_ct_model_open(&rb, &host, p_cu, "backend.ahead", moe ? p_q36 : p_q35, g, N_SEQ, N_CTX);
    stats st = { 0 };
    const int32_t seqs[2] = { 0, 1 }, pos0[2] = { 0, 0 };
    const uint32_t len[2] = { PRE0, PRE1 };
    prefill(&ra, &rb, c.V, &st, seqs, pos0, len, 2, 3u);
    ck_assert(SI_HAS_MEMBER(ra.mops, struct si_model_ops, topk_collect) && ra.mops->topk_submit != NULL);
    const int32_t p1[1] = { PRE0 }, t1[1] = { si_ct_tok(1, 2, c.V) };
    const uint32_t ch = si_ahead_compare(ra.mops, ra.m, rb.m, 1, seqs, p1, t1, 70, 1, false);
    /* both sequences (a step of two rows: strided ids), k = 4 */
    const int32_t p2[2] = { PRE0 + 70, PRE1 }, t2[2] = { si_ct_tok(2, 2, c.V), si_ct_tok(3, 2, c.V) };
    si_ahead_compare(ra.mops, ra.m, rb.m, 2, seqs, p2, t2, 30, 4, false);
    ck_assert_msg(ch > 0, "the greedy picks never changed: nothing was fed");
    /* posted steps (HOST_IDS waiting on the device for the host's pick,
     * not the best), both sequences with k = 8, then sequence 1 alone */
    const int32_t p3[2] = { PRE0 + 100, PRE1 + 30 }, t3[2] = { si_ct_tok(4, 2, c.V), si_ct_tok(5, 2, c.V) };
    const uint32_t chp = si_ahead_compare(ra.mops, ra.m, rb.m, 2, seqs, p3, t3, 12, 8, true);
    const int32_t p4[1] = { PRE1 + 42 }, t4[1] = { si_ct_tok(6, 2, c.V) };
    si_ahead_compare(ra.mops, ra.m, rb.m, 1, seqs + 1, p4, t4, 24, 3, true);
    ck_assert_msg(chp > 0, "the posted picks never changed");
    si_ct_model_close(&ra);
    g_lines = 0;
    si_ct_model_close(&rb);
    ck_assert_msg(g_lines == 1 && g_replays >= 120, "ahead side: %llu replays", g_replays);
    printf("  %s ahead: 100 fed and 36 posted steps the same bits, %u / %u pick changes; %llu replays\n",
           moe ? "qwen36" : "qwen35", ch, chp, g_replays);
    si_gguf_close(g);
    unlink(path);
}

START_TEST(test_qwen35_ahead) { ahead_case(false); }
END_TEST
START_TEST(test_qwen36_ahead) { ahead_case(true); }
END_TEST

START_TEST(test_qwen35_f16) { graph_case(false, "f16"); }
END_TEST
START_TEST(test_qwen35_i8) { graph_case(false, "i8"); }
END_TEST
START_TEST(test_qwen36_f16) { graph_case(true, "f16"); }
END_TEST
START_TEST(test_qwen36_i8) { graph_case(true, "i8"); }
END_TEST
/* (profile_twice = empty: an empty launch after every captured unit) */
START_TEST(test_qwen36_empty) { graph_case(true, "f16e"); }
END_TEST

int main(void)
{
    si_err err = { { 0 } };
    const char *text =
        "[backend.graph_f16]\npath = cuda_sm120.so\nkv_type = f16\ngraph = true\nprofile_twice = matmul\n"
        "[backend.nograph_f16]\npath = cuda_sm120.so\nkv_type = f16\ngraph = false\ngemv_fuse = false\nfuse_norm = false\npdl = false\n"
        "h2d_early = false\n"
        "[backend.graph_i8]\npath = cuda_sm120.so\nkv_type = i8\ngraph = true\nprofile = graph\nprofile_twice = moe\n"
        "[backend.nograph_i8]\npath = cuda_sm120.so\nkv_type = i8\ngraph = false\ngemv_fuse = false\nfuse_norm = false\npdl = false\n"
        "h2d_early = false\n"
        "[backend.graph_f16e]\npath = cuda_sm120.so\nkv_type = f16\ngraph = true\nprofile_twice = empty\nh2d_early = false\n"
        "[backend.nograph_f16e]\npath = cuda_sm120.so\nkv_type = f16\ngraph = false\n"
        "[backend.ahead]\npath = cuda_sm120.so\nkv_type = i8\ngraph = true\nhost_ids = true\n";
    if (si_config_load_string(text, "<test>", &cfg, &err) != SI_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    si_host_init(&host, cfg);
    host.log = test_log;
    const char *top = getenv("SI_TOP_BUILDDIR");
    if (top == NULL)
        top = ".";
    dl[0] = si_ct_open(top, "backends/cuda_sm120/.libs/cuda_sm120.so", &host, &p_cu);
    dl[1] = si_ct_open(top, "models/qwen35/.libs/qwen35.so", &host, &p_q35);
    dl[2] = si_ct_open(top, "models/qwen36/.libs/qwen36.so", &host, &p_q36);
    int rc = 1;
    if (dl[0] == NULL || dl[1] == NULL || dl[2] == NULL) {
        fprintf(stderr, "a plugin did not load\n");
    } else if (p_cu->probe && p_cu->probe(&host, &err) != SI_OK) {
        printf("SKIP: cuda_sm120 probe refused: %s\n", err.msg);
        rc = 77;
    } else {
        Suite *s = suite_create("cuda_graph");
        TCase *tc = tcase_create("graph_vs_ops");
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_qwen35_f16);
        tcase_add_test(tc, test_qwen35_i8);
        tcase_add_test(tc, test_qwen36_f16);
        tcase_add_test(tc, test_qwen36_i8);
        tcase_add_test(tc, test_qwen36_empty);
        tcase_add_test(tc, test_qwen35_ahead);
        tcase_add_test(tc, test_qwen36_ahead);
        suite_add_tcase(s, tc);
        rc = si_ct_run(s) ? 1 : 0;
    }
    for (int i = 0; i < 3; i++)
        if (dl[i] != NULL)
            dlclose(dl[i]);
    si_config_free(cfg);
    return rc;
}
