/* core/cli/cmd_bench.c — `sparkinfer bench`: one model load, then a sweep
 * of prefill lengths (pp) and of decode depths x batch sizes (tg), each the
 * median of --reps timed repetitions after --warmup untimed ones.  A human
 * table (one row per measurement, printed as it finishes) and, last, one
 * JSON line.
 *
 * What is timed (wall clock, CLOCK_MONOTONIC through si_now_seconds):
 *   pp P    one si_prefill of P seeded-random tokens into a freshly reset
 *           sequence 0, chunked by n_batch, logits of the last token only.
 *   tg D,B  --tg decode steps of B sequences that were filled (untimed) to
 *           depth D.  A step is ONE forward call with B tokens (one per
 *           sequence) that downloads B logit rows; the host then takes the
 *           argmax of each row and feeds it as that sequence's next token.
 *           So the greedy pick and what crosses to the host are part of a
 *           step's cost.  As in generation, the pick runs on the backend
 *           (SI_OP_TOPK with k = 1: one value and id per row come back)
 *           unless --full-logits or [runtime] device_sampling = false, or
 *           the backend lacks the op: then B whole logit rows are
 *           downloaded and the host takes the argmax.
 *           Without --refill the repetitions run back to back after one
 *           fill, so rep k starts at depth D + k x tg (warm-up reps
 *           included): the context grows by tg per rep, a small drift for
 *           tg << D.  --refill resets and refills before every rep instead.
 * A measurement that cannot run (does not fit the context, or the backend
 * refuses) becomes a "skipped" row with the reason; the run goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "si_build.h"   /* PACKAGE_VERSION */
#include "cli_model.h"
#include "bench_floor.h"
#include "engine.h"
#include "generate.h"

#define MAX_LIST 32

typedef struct bench_args {
    si_cli_model_opts m;
    uint32_t ctx[MAX_LIST], pp[MAX_LIST], bs[MAX_LIST];
    size_t   n_ctx_list, n_pp, n_bs;
    long     tg, reps, warmup, seed, bw_gbps;
    bool     no_pp, no_tg, json_only, refill, full_logits;
} bench_args;

/* One row of the table / element of "results". */
typedef struct bench_result {
    bool     tg;            /* false: pp                                  */
    uint32_t len;           /* pp: prompt length; tg: start depth D       */
    uint32_t bs;
    double   median_s, min_s, max_s;
    double   tokens;        /* tokens processed in one rep                */
    double   floor_bytes;   /* tg: bytes one step must move (bench_floor.h) */
    bool     device_pick;   /* tg: the argmax ran on the backend (TOPK)    */
    bool     ahead;         /* tg: steps queued ahead (decode_ahead)       */
    char     skipped[SI_ERR_MSG_MAX]; /* non-empty: why it did not run       */
} bench_result;

/* ---- options ----------------------------------------------------------- */

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: sparkinfer bench -m MODEL.gguf [--ctx 128,4096,32768] [--pp 512,4096] [--tg 64]\n"
               "                        [--bs 1,8,32] [--reps 5] [--warmup 1] [--no-pp] [--no-tg]\n"
               "                        [--refill] [--full-logits] [--json-only] [--bw GBPS] [--seed S]\n"
               "                        [options]\n\n"
               "Loads the model once, then measures prefill (pp: P random tokens into an\n"
               "empty sequence, tok/s = P / median seconds) and decode (tg: B sequences\n"
               "filled to depth D, then --tg steps of one forward call with B tokens;\n"
               "tok/s = B x tg / median seconds; the greedy pick, on the backend unless\n"
               "--full-logits, is part of a step).  Without --refill the reps of one (D, B) run back to back, so the\n"
               "depth grows by tg per rep.  Prints one table row per measurement and,\n"
               "last, one JSON line.  The context (-c) defaults to what the lists need.\n\n"
               "  --ctx LIST       decode start depths D (default 128,4096,32768)\n"
               "  --pp LIST        prefill lengths P (default 512,4096)\n"
               "  --tg N           decode steps per rep (default 64)\n"
               "  --bs LIST        decode batch sizes B, at most 256 (default 1,8,32)\n"
               "  --reps N         timed repetitions, median reported (default 5)\n"
               "  --warmup N       untimed repetitions before them (default 1)\n"
               "  --no-pp, --no-tg skip the prefill or the decode part\n"
               "  --refill         reset and refill the sequences before every decode rep\n"
               "  --full-logits    decode steps download every logits row and pick on the\n"
               "                   host (default: SI_OP_TOPK on the backend, as generation\n"
               "                   does; also [runtime] device_sampling = false)\n"
               "  --json-only      print only the JSON line\n"
               "  --bw GBPS        device copy bandwidth: tg rows also show the memory floor\n"
               "                   (bytes a step must move / GBPS) and the fraction reached\n"
               "  --seed S         seed of the random tokens (default 0)\n"
               "A/B a knob in one binary with --set, e.g. --set backend.cpu.moe=per_token.\n\n");
    fputs(SI_CLI_MODEL_HELP, f);
}

/* "--name VALUE" or "--name=VALUE": 1 with *val set, 0 when argv[*i] is not
 * the option, -1 (printed) when the value is missing. */
static int take(const char *name, int argc, char **argv, int *i, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (*i + 1 >= argc) {
        si_cli_error("bench", "%s needs a value", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

/* A comma-separated list of integers in [min, max], 1..MAX_LIST of them. */
static bool parse_list(const char *opt, const char *s, long min, long max, uint32_t *out, size_t *n)
{
    *n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        long v = 0;
        if (len == 0 || len >= sizeof item || *n >= MAX_LIST) {
            si_cli_error("bench", "%s '%s': expected a comma-separated list of 1 to %d integers in [%ld, %ld]",
                         opt, s, MAX_LIST, min, max);
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!si_cli_parse_long(item, min, max, &v)) {
            si_cli_error("bench", "%s '%s': item '%s' is not an integer in [%ld, %ld]", opt, s, item, min, max);
            return false;
        }
        out[(*n)++] = (uint32_t)v;
        if (comma == NULL)
            return true;
        p = comma + 1;
    }
}

static bool parse_num(const char *opt, const char *s, long min, long max, long *out)
{
    if (si_cli_parse_long(s, min, max, out))
        return true;
    si_cli_error("bench", "%s '%s': expected an integer in [%ld, %ld]", opt, s, min, max);
    return false;
}

/* 0: go on; -1: --help printed; SI_EXIT_USAGE: bad usage (printed). */
static int parse(bench_args *a, int argc, char **argv)
{
    static const uint32_t dctx[] = { 128, 4096, 32768 }, dpp[] = { 512, 4096 }, dbs[] = { 1, 8, 32 };
    si_cli_model_defaults(&a->m);
    memcpy(a->ctx, dctx, sizeof dctx);
    a->n_ctx_list = 3;
    memcpy(a->pp, dpp, sizeof dpp);
    a->n_pp = 2;
    memcpy(a->bs, dbs, sizeof dbs);
    a->n_bs = 3;
    a->tg = 64;
    a->reps = 5;
    a->warmup = 1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v = NULL;
        int r;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            bench_usage(stdout);
            return -1;
        }
        bool ok = true;
        if ((r = take("--ctx", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_list("--ctx", v, 0, 1L << 20, a->ctx, &a->n_ctx_list);
        else if ((r = take("--pp", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_list("--pp", v, 1, 1L << 20, a->pp, &a->n_pp);
        else if ((r = take("--bs", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_list("--bs", v, 1, 256, a->bs, &a->n_bs);
        else if ((r = take("--tg", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_num("--tg", v, 1, 1L << 20, &a->tg);
        else if ((r = take("--reps", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_num("--reps", v, 1, 100000, &a->reps);
        else if ((r = take("--warmup", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_num("--warmup", v, 0, 100000, &a->warmup);
        else if ((r = take("--bw", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_num("--bw", v, 1, 1000000, &a->bw_gbps);
        else if ((r = take("--seed", argc, argv, &i, &v)) != 0)
            ok = r > 0 && parse_num("--seed", v, 0, 0x7fffffffL, &a->seed);
        else if (strcmp(s, "--no-pp") == 0)
            a->no_pp = true;
        else if (strcmp(s, "--no-tg") == 0)
            a->no_tg = true;
        else if (strcmp(s, "--refill") == 0)
            a->refill = true;
        else if (strcmp(s, "--full-logits") == 0)
            a->full_logits = true;
        else if (strcmp(s, "--json-only") == 0)
            a->json_only = true;
        else if ((r = si_cli_model_opt(&a->m, "bench", argc, argv, &i)) != 0)
            ok = r > 0;
        else {
            si_cli_error("bench", "unknown option '%s' (see --help)", s);
            ok = false;
        }
        if (!ok)
            return SI_EXIT_USAGE;
    }
    if (a->no_pp && a->no_tg) {
        si_cli_error("bench", "--no-pp with --no-tg leaves nothing to measure");
        return SI_EXIT_USAGE;
    }
    if (a->m.model == NULL) {
        si_cli_error("bench", "no model given (-m FILE.gguf)");
        return SI_EXIT_USAGE;
    }
    return 0;
}

/* ---- measuring --------------------------------------------------------- */

typedef struct bench_run {
    const bench_args *a;
    si_engine *e;
    uint32_t   nv, n_ctx, n_seq, nb;
    bool       device_pick;   /* decode steps try SI_OP_TOPK (k = 1) first */
    uint32_t   ahead;         /* decode queues each step ahead up to this batch ([runtime] decode_ahead) */
    si_floor_model fm;
} bench_run;

/* xorshift ids in [0, nv): the content does not matter for speed except
 * through MoE routing, which random ids spread like real text does. */
static void random_tokens(int32_t *t, uint32_t n, uint64_t seed, uint32_t nv)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
        t[i] = (int32_t)((x * 0x2545F4914F6CDD1Dull >> 33) % nv);
    }
}

static int32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

static int cmp_double(const void *pa, const void *pb)
{
    double x = *(const double *)pa, y = *(const double *)pb;
    return x < y ? -1 : x > y;
}

static void summarize(bench_result *r, double *t, long n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    r->min_s = t[0];
    r->max_s = t[n - 1];
    r->median_s = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void skip(bench_result *r, const char *why)
{
    snprintf(r->skipped, sizeof r->skipped, "%s", why);
}

static void bench_pp(const bench_run *br, uint32_t P, bench_result *r)
{
    const bench_args *a = br->a;
    r->len = P;
    r->bs = 1;
    r->tokens = P;
    if (P > br->n_ctx) {
        snprintf(r->skipped, sizeof r->skipped, "%u tokens exceed the context of %u (raise -c)", P, br->n_ctx);
        return;
    }
    int32_t *tok = malloc(sizeof *tok * P);
    uint8_t *want = calloc(P, 1);
    float *logits = malloc(sizeof *logits * br->nv);
    double *t = malloc(sizeof *t * (size_t)a->reps);
    si_err err = { { 0 } };
    int rc = tok && want && logits && t ? SI_OK : si_err_set(&err, SI_ENOMEM, "out of memory");
    if (rc == SI_OK) {
        random_tokens(tok, P, (uint64_t)a->seed, br->nv);
        want[P - 1] = 1;
    }
    for (long rep = 0; rc == SI_OK && rep < a->warmup + a->reps; rep++) {
        rc = si_engine_seq_reset(br->e, 0, &err);
        double t0 = si_now_seconds();
        if (rc == SI_OK)
            rc = si_prefill(br->e, 0, 0, tok, P, br->nb, want, logits, &err);
        if (rep >= a->warmup)
            t[rep - a->warmup] = si_now_seconds() - t0;
    }
    if (rc == SI_OK)
        summarize(r, t, a->reps);
    else
        skip(r, err.msg);
    si_engine_seq_reset(br->e, 0, NULL);   /* leave no undefined state behind */
    free(tok); free(want); free(logits); free(t);
}

/* Resets sequences [0, B) and fills each with D random tokens (batched,
 * untimed); next[s] becomes the argmax after the last one (random if D = 0). */
static int fill(const bench_run *br, uint32_t D, uint32_t B, int32_t *tok, uint8_t *want,
                float *logits, int32_t *next, si_err *err)
{
    for (uint32_t s = 0; s < B; s++) {
        int rc = si_engine_seq_reset(br->e, s, err);
        uint64_t seed = (uint64_t)br->a->seed * 1000003u + s + 1;
        if (rc != SI_OK)
            return rc;
        if (D == 0) {
            random_tokens(&next[s], 1, seed, br->nv);
            continue;
        }
        random_tokens(tok, D, seed, br->nv);
        memset(want, 0, D);
        want[D - 1] = 1;
        if ((rc = si_prefill(br->e, s, 0, tok, D, br->nb, want, logits, err)) != SI_OK)
            return rc;
        next[s] = argmax(logits, br->nv);
    }
    return SI_OK;
}

/* One decode step of B sequences: next[s] becomes each row's greedy pick,
 * on the backend when *device (turned off for good when the backend or
 * model refuses, which happens before anything runs), else on the host
 * from the downloaded rows. */
static int decode_step(const bench_run *br, const si_batch *b, bool *device, float *logits, int32_t *next,
                       si_err *err)
{
    if (*device) {
        si_topk_params tp = { .k = 1, .repeat_penalty = 1.0f };
        float *vals = logits;   /* B floats of the [B][nv] buffer */
        int rc = si_engine_forward_topk(br->e, b, &tp, vals, next, err);
        if (rc != SI_EUNSUPPORTED)
            return rc;
        *device = false;
    }
    int rc = si_engine_forward(br->e, b, logits, err);
    for (uint32_t s = 0; rc == SI_OK && s < b->n; s++)
        next[s] = argmax(logits + (size_t)s * br->nv, br->nv);
    return rc;
}

/* The tg steps of the batch b queued ahead (si_engine_topk_submit, the
 * way si_generate's greedy decode runs): step i + 1, fed on the backend
 * with step i's picks, is queued before step i's picks are read; the same
 * steps and picks as decode_step one at a time (next[], vals: b->n each;
 * pos[], the array b->pos points at, advanced).  SI_EUNSUPPORTED when the
 * first submit is refused (nothing ran): *ahead is turned off. */
static int decode_ahead(const bench_run *br, const si_batch *b, int32_t *pos, uint32_t tg, bool *ahead, float *vals,
                        int32_t *next, si_err *err)
{
    const si_topk_params tp = { .k = 1, .repeat_penalty = 1.0f };
    int rc = si_engine_topk_submit(br->e, b, &tp, 0, err);
    if (rc == SI_EUNSUPPORTED)
        *ahead = false;
    uint32_t queued = rc == SI_OK;
    for (uint32_t step = 1; rc == SI_OK && step <= tg; step++) {
        for (uint32_t s = 0; s < b->n; s++)
            pos[s]++;
        if (step < tg) {
            rc = si_engine_topk_submit(br->e, b, &tp, SI_SUBMIT_FEED, err);
            queued += rc == SI_OK;
        }
        if (rc == SI_OK) {
            rc = si_engine_topk_collect(br->e, vals, next, err);
            queued--;
        }
    }
    return si_engine_topk_drain(br->e, queued, vals, next, rc, err);
}

static void bench_tg(const bench_run *br, uint32_t D, uint32_t B, bench_result *r)
{
    const bench_args *a = br->a;
    uint32_t tg = (uint32_t)a->tg;
    r->tg = true;
    r->len = D;
    r->bs = B;
    r->tokens = (double)B * tg;
    uint64_t end = (uint64_t)D + (uint64_t)tg * (a->refill ? 1 : (uint64_t)(a->warmup + a->reps));
    if (B > br->n_seq) {
        snprintf(r->skipped, sizeof r->skipped, "batch %u exceeds the %u sequences provisioned", B, br->n_seq);
        return;
    }
    if (end > br->n_ctx) {
        snprintf(r->skipped, sizeof r->skipped,
                 "depth %u + decoded tokens reaches %llu, beyond the context of %u (raise -c)",
                 D, (unsigned long long)end, br->n_ctx);
        return;
    }
    int32_t *tok = malloc(sizeof *tok * (D ? D : 1));
    uint8_t *want = malloc(D > B ? D : B);
    float *logits = malloc(sizeof *logits * (size_t)B * br->nv);   /* [B][nv] */
    int32_t *next = malloc(sizeof *next * B), *pos = malloc(sizeof *pos * B), *seq = malloc(sizeof *seq * B);
    double *t = malloc(sizeof *t * (size_t)a->reps);
    si_err err = { { 0 } };
    int rc = tok && want && logits && next && pos && seq && t ? SI_OK
             : si_err_set(&err, SI_ENOMEM, "out of memory for %u x %u logits", B, br->nv);
    bool device = br->device_pick, ahead = device && B <= br->ahead;
    for (long rep = 0; rc == SI_OK && rep < a->warmup + a->reps; rep++) {
        if (rep == 0 || a->refill) {
            rc = fill(br, D, B, tok, want, logits, next, &err);
            for (uint32_t s = 0; s < B; s++)
                pos[s] = (int32_t)D;
        }
        for (uint32_t s = 0; s < B; s++) {
            seq[s] = (int32_t)s;
            want[s] = 1;
        }
        double t0 = si_now_seconds();
        bool done = false;
        if (ahead && tg > 0) {
            si_batch b = { .n = B, .tokens = next, .pos = pos, .seq = seq, .want_logits = want };
            rc = decode_ahead(br, &b, pos, tg, &ahead, logits, next, &err);
            done = ahead;
            if (!ahead)
                rc = SI_OK;   /* (refused before anything ran: the steps one at a time) */
        }
        for (uint32_t step = 0; rc == SI_OK && !done && step < tg; step++) {
            si_batch b = { .n = B, .tokens = next, .pos = pos, .seq = seq, .want_logits = want };
            rc = decode_step(br, &b, &device, logits, next, &err);
            for (uint32_t s = 0; rc == SI_OK && s < B; s++)
                pos[s]++;
        }
        if (rep >= a->warmup)
            t[rep - a->warmup] = si_now_seconds() - t0;
    }
    r->device_pick = device;
    r->ahead = ahead;
    if (rc == SI_OK)
        summarize(r, t, a->reps);
    else
        skip(r, err.msg);
    for (uint32_t s = 0; s < B && s < br->n_seq; s++)
        si_engine_seq_reset(br->e, s, NULL);   /* free the depth for the next row */
    free(tok); free(want); free(logits); free(next); free(pos); free(seq); free(t);
}

/* ---- output ------------------------------------------------------------ */

/* tok/s at the memory floor (0 when unknown: no --bw or no floor). */
static double floor_tok_s(const bench_result *r, const bench_args *a)
{
    if (!r->tg || a->bw_gbps <= 0 || r->floor_bytes <= 0)
        return 0.0;
    return (double)r->bs * (double)a->bw_gbps * 1e9 / r->floor_bytes;
}

static void print_row(const bench_result *r, const bench_args *a)
{
    if (r->skipped[0] != '\0') {
        printf("%-4s %8u %4u   skipped: %s\n", r->tg ? "tg" : "pp", r->len, r->bs, r->skipped);
    } else {
        printf("%-4s %8u %4u %12.6f %12.2f   %.2f-%.2f", r->tg ? "tg" : "pp", r->len, r->bs, r->median_s,
               r->tokens / r->median_s, r->tokens / r->max_s, r->tokens / r->min_s);
        double ft = floor_tok_s(r, a);
        if (r->tg && r->floor_bytes > 0)
            printf("   floor %.1f MB/step", r->floor_bytes / 1e6);
        if (ft > 0)
            printf(" = %.1f tok/s, at %.1f%%", ft, 100.0 * (r->tokens / r->median_s) / ft);
        if (r->tg && !r->device_pick)
            printf("   (host argmax)");
        printf("\n");
    }
    fflush(stdout);
}

static cJSON *result_json(const bench_result *r, const bench_args *a)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "kind", r->tg ? "tg" : "pp");
    cJSON_AddNumberToObject(o, r->tg ? "ctx" : "len", r->len);
    cJSON_AddNumberToObject(o, "bs", r->bs);
    if (r->tg)
        cJSON_AddNumberToObject(o, "tg", (double)a->tg);
    if (r->skipped[0] != '\0') {
        cJSON_AddStringToObject(o, "skipped", r->skipped);
        return o;
    }
    cJSON_AddNumberToObject(o, "median_s", r->median_s);
    cJSON_AddNumberToObject(o, "tok_s", r->tokens / r->median_s);
    cJSON_AddNumberToObject(o, "min_s", r->min_s);
    cJSON_AddNumberToObject(o, "max_s", r->max_s);
    cJSON_AddNumberToObject(o, "reps", (double)a->reps);
    if (r->tg) {
        cJSON_AddBoolToObject(o, "device_sampling", r->device_pick);
        cJSON_AddBoolToObject(o, "decode_ahead", r->ahead);
    }
    if (r->tg && r->floor_bytes > 0)
        cJSON_AddNumberToObject(o, "floor_bytes", r->floor_bytes);
    double ft = floor_tok_s(r, a);
    if (ft > 0) {
        cJSON_AddNumberToObject(o, "floor_tok_s", ft);
        cJSON_AddNumberToObject(o, "floor_frac", (r->tokens / r->median_s) / ft);
    }
    return o;
}

static bool print_json(const bench_run *br, const bench_result *res, size_t n_res,
                       const char *host, long nproc, double load1, long threads)
{
    const bench_args *a = br->a;
    si_model_info info;
    si_engine_info(br->e, &info);
    cJSON *o = cJSON_CreateObject(), *arr = NULL, *ov = NULL;
    bool ok = o != NULL;
    if (ok) {
        cJSON_AddStringToObject(o, "bench", "sparkinfer");
        cJSON_AddStringToObject(o, "version", PACKAGE_VERSION);
        cJSON_AddStringToObject(o, "model", a->m.model);
        cJSON_AddStringToObject(o, "arch", info.arch ? info.arch : "?");
        cJSON_AddStringToObject(o, "model_plugin", si_engine_model_plugin(br->e));
        cJSON_AddStringToObject(o, "backend", si_engine_backend_name(br->e));
        cJSON_AddNumberToObject(o, "n_vocab", br->nv);
        cJSON_AddNumberToObject(o, "n_ctx", br->n_ctx);
        cJSON_AddNumberToObject(o, "n_seq", br->n_seq);
        cJSON_AddNumberToObject(o, "n_batch", br->nb);
        cJSON_AddNumberToObject(o, "threads", (double)threads);
        cJSON_AddNumberToObject(o, "warmup", (double)a->warmup);
        cJSON_AddBoolToObject(o, "refill", a->refill);
        if (a->bw_gbps > 0)
            cJSON_AddNumberToObject(o, "bw_gbps", (double)a->bw_gbps);
        cJSON_AddStringToObject(o, "hostname", host);
        cJSON_AddNumberToObject(o, "nproc", (double)nproc);
        if (load1 >= 0)
            cJSON_AddNumberToObject(o, "load1", load1);
        arr = cJSON_AddArrayToObject(o, "results");
        ov = cJSON_AddArrayToObject(o, "config_overrides");
        ok = arr != NULL && ov != NULL;
    }
    for (size_t i = 0; ok && i < n_res; i++) {
        cJSON *r = result_json(&res[i], a);
        ok = r != NULL && cJSON_AddItemToArray(arr, r);
    }
    for (int i = 0; ok && i < a->m.cfg.n_sets; i++)
        ok = cJSON_AddItemToArray(ov, cJSON_CreateString(a->m.cfg.sets[i])) != 0;
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    if (text != NULL)
        printf("%s\n", text);
    else
        si_cli_error("bench", "out of memory for the JSON line");
    free(text);
    cJSON_Delete(o);
    return text != NULL;
}

static uint32_t max_of(const uint32_t *v, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] > m)
            m = v[i];
    return m;
}

int si_cmd_bench(int argc, char **argv)
{
    bench_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(&a, argc, argv);
    if (rc != 0)
        return rc < 0 ? SI_EXIT_OK : rc;

    /* Provision what the sweep needs unless -c says otherwise: sequences
     * for the largest batch, context for the longest prefill and for the
     * deepest decode plus every token the decode reps add. */
    uint64_t need = a.no_pp ? 1 : max_of(a.pp, a.n_pp);
    uint32_t n_seq = a.no_tg ? 1 : max_of(a.bs, a.n_bs);
    if (!a.no_tg) {
        uint64_t d = max_of(a.ctx, a.n_ctx_list) + (uint64_t)a.tg * (a.refill ? 1 : (uint64_t)(a.warmup + a.reps));
        need = d > need ? d : need;
    }
    si_cli_model_opts mo = a.m;   /* a.m.cfg.sets stays the user's list for the JSON */
    char seq_set[64];
    if (!si_cli_model_set_n_seq(&mo, "bench", seq_set, sizeof seq_set, n_seq))
        return SI_EXIT_USAGE;
    if (mo.n_ctx == 0)
        mo.n_ctx = (long)(need > (1u << 20) ? (1u << 20) : need);

    si_config *cfg = NULL;
    si_engine *e = si_cli_engine_open(&mo, "bench", &cfg);
    if (e == NULL)
        return SI_EXIT_FAIL;
    si_model_info info;
    si_engine_info(e, &info);
    bench_run br = { .a = &a, .e = e, .nv = info.n_vocab, .n_ctx = info.n_ctx,
                     .n_seq = info.n_seq_max, .nb = si_cli_n_batch(&mo, cfg),
                     .device_pick = !a.full_logits && si_engine_device_sampling(e),
                     .ahead = si_engine_decode_ahead(e) };
    /* The KV element size of the backend's cache, resolved as the backends
     * do (backends/common/si_kvknob.h): the backend's own kv_type, else
     * [runtime] kv_type unless auto, else the backend's default (cpu: f32,
     * cuda_sm120: f16).  A runtime int8 the cpu lacks becomes f16 there. */
    char bsec[96];
    const char *bname = si_engine_backend_name(e);
    snprintf(bsec, sizeof bsec, "backend.%s", bname);
    const char *kvt = si_config_get(cfg, bsec, "kv_type");
    if (kvt == NULL) {
        kvt = si_config_get(cfg, "runtime", "kv_type");
        if (kvt != NULL && strcmp(kvt, "auto") == 0)
            kvt = NULL;
    }
    const bool kv_cpu = strcmp(bname, "cpu") == 0;
    if (kvt == NULL)
        kvt = kv_cpu ? "f32" : "f16";
    double kv_elem = strcmp(kvt, "f32") == 0                                     ? 4.0
                     : !kv_cpu && (strcmp(kvt, "i8") == 0 || strcmp(kvt, "int8") == 0) ? 1.0
                                                                                : 2.0;
    si_floor_model_of(si_engine_gguf(e), kv_elem, &br.fm);

    char host[256] = "?";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    double load[1] = { -1.0 };
    if (getloadavg(load, 1) != 1)
        load[0] = -1.0;
    long threads = si_config_get_long(cfg, "runtime", "threads", 0);

    size_t n_res = (a.no_pp ? 0 : a.n_pp) + (a.no_tg ? 0 : a.n_ctx_list * a.n_bs);
    bench_result *res = calloc(n_res, sizeof *res);
    if (res == NULL) {
        si_cli_error("bench", "out of memory");
        si_engine_close(e);
        si_config_free(cfg);
        return SI_EXIT_FAIL;
    }
    if (!a.json_only) {
        printf("bench %s: arch %s, n_vocab %u, backend %s, model plugin %s\n", a.m.model,
               info.arch ? info.arch : "?", info.n_vocab, si_engine_backend_name(e), si_engine_model_plugin(e));
        printf("context %u x %u sequences, n_batch %u, threads %ld; warm-up %ld, median of %ld reps; "
               "tg %ld steps/rep%s\n", br.n_ctx, br.n_seq, br.nb, threads, a.warmup, a.reps, a.tg,
               a.refill ? ", refilled per rep" : ", depth grows per rep");
        printf("host %s, %ld cores, load %.2f\n", host, nproc, load[0]);
        for (int i = 0; i < a.m.cfg.n_sets; i++)
            printf("--set %s\n", a.m.cfg.sets[i]);
        printf("%-4s %8s %4s %12s %12s   %s\n", "kind", "ctx/len", "bs", "median s", "tok/s", "min-max tok/s");
        fflush(stdout);
    }
    size_t k = 0;
    for (size_t i = 0; !a.no_pp && i < a.n_pp; i++, k++) {
        bench_pp(&br, a.pp[i], &res[k]);
        if (!a.json_only)
            print_row(&res[k], &a);
    }
    for (size_t i = 0; !a.no_tg && i < a.n_ctx_list; i++)
        for (size_t j = 0; j < a.n_bs; j++, k++) {
            bench_tg(&br, a.ctx[i], a.bs[j], &res[k]);
            if (br.fm.ok)
                res[k].floor_bytes = si_floor_bytes(&br.fm, a.ctx[i], a.bs[j]);
            if (!a.json_only)
                print_row(&res[k], &a);
        }
    bool ok = print_json(&br, res, n_res, host, nproc, load[0], threads);
    size_t n_skipped = 0;
    for (size_t i = 0; i < n_res; i++)
        n_skipped += res[i].skipped[0] != '\0';
    if (n_skipped == n_res) {
        si_cli_error("bench", "every measurement was skipped");
        ok = false;
    }
    free(res);
    si_engine_close(e);
    si_config_free(cfg);
    return ok ? SI_EXIT_OK : SI_EXIT_FAIL;
}
