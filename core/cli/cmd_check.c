/* core/cli/cmd_check.c — `sparkinfer check` (batched prefill against
 * token-by-token decoding on one backend) and `sparkinfer score`
 * (teacher-forced perplexity over a text, or agreement with reference
 * logits from another implementation). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_model.h"
#include "generate.h"
#include "tokenizer.h"

/* ---- comparing two logit rows ---------------------------------------- */

typedef struct cmp_acc {
    uint64_t n, top1_same;
    double   kl_sum, kl_max, max_abs, err2, ref2, rel_max;
} cmp_acc;

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* log-sum-exp in double: KL needs more precision than the logits carry. */
static double log_norm(const float *x, uint32_t n)
{
    double m = -INFINITY, s = 0.0;
    for (uint32_t i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (uint32_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    return m + log(s);
}

/* Accumulates KL(ref || test), top-1 agreement and errors for one row. */
static void cmp_row(cmp_acc *a, const float *ref, const float *test, uint32_t n)
{
    double lr = log_norm(ref, n), lt = log_norm(test, n), kl = 0.0, e2 = 0.0, r2 = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double pr = (double)ref[i] - lr;
        kl += exp(pr) * (pr - ((double)test[i] - lt));
        double d = (double)test[i] - (double)ref[i];
        e2 += d * d;
        r2 += (double)ref[i] * ref[i];
        if (fabs(d) > a->max_abs || d != d)
            a->max_abs = d != d ? INFINITY : fabs(d);
    }
    if (!(kl >= 0.0))   /* NaN, or rounding below zero */
        kl = kl != kl ? INFINITY : 0.0;
    a->n++;
    a->top1_same += argmax(ref, n) == argmax(test, n);
    a->kl_sum += kl;
    if (kl > a->kl_max)
        a->kl_max = kl;
    a->err2 += e2;
    a->ref2 += r2;
    double rel = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
    if (rel > a->rel_max || rel != rel)
        a->rel_max = rel != rel ? INFINITY : rel;
}

static void cmp_print(const char *what, const cmp_acc *a)
{
    double top1 = a->n ? (double)a->top1_same / a->n : 0.0;
    double kl = a->n ? a->kl_sum / a->n : 0.0;
    printf("%s: positions %llu  top-1 agreement %.4f  mean KL %.3e  max KL %.3e  max |dlogit| %.3e  max rel err %.3e\n",
           what, (unsigned long long)a->n, top1, kl, a->kl_max, a->max_abs, a->rel_max);
    printf("{\"check\":\"%s\",\"positions\":%llu,\"top1\":%.6f,\"mean_kl\":%.6e,\"max_kl\":%.6e,\"max_abs\":%.6e,\"max_rel\":%.6e}\n",
           what, (unsigned long long)a->n, top1, kl, a->kl_max, a->max_abs, a->rel_max);
}

static int gate(const char *cmd, const cmp_acc *a, double min_top1, double max_kl)
{
    double top1 = a->n ? (double)a->top1_same / a->n : 0.0;
    double kl = a->n ? a->kl_sum / a->n : INFINITY;
    if (top1 < min_top1 || !(kl <= max_kl)) {
        si_cli_error(cmd, "FAILED: top-1 %.4f (need >= %.4f), mean KL %.3e (need <= %.3e)",
                     top1, min_top1, kl, max_kl);
        return SI_EXIT_FAIL;
    }
    return SI_EXIT_OK;
}

/* ---- shared option parsing ------------------------------------------- */

typedef struct check_args {
    si_cli_model_opts m;
    long   prefix, cont, seed;
    const char *file, *ref_logits, *ref_tokens;
    double min_top1, max_kl;
    bool   batched_prefix;
} check_args;

static int parse(check_args *a, const char *cmd, int argc, char **argv, void (*usage)(FILE *))
{
    si_cli_model_defaults(&a->m);
    a->prefix = 64;
    a->cont = 64;
    a->min_top1 = 0.0;
    a->max_kl = INFINITY;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int r = si_cli_model_opt(&a->m, cmd, argc, argv, &i);
        if (r < 0)
            return SI_EXIT_USAGE;
        if (r > 0)
            continue;
        bool has = i + 1 < argc;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage(stdout);
            return -1;
        } else if (strcmp(s, "--prefix") == 0 && has) {
            if (!si_cli_parse_long(argv[++i], 0, 1L << 24, &a->prefix))
                goto bad;
        } else if (strcmp(s, "--cont") == 0 && has) {
            if (!si_cli_parse_long(argv[++i], 1, 1L << 24, &a->cont))
                goto bad;
        } else if (strcmp(s, "--seed") == 0 && has) {
            if (!si_cli_parse_long(argv[++i], 0, 0x7fffffffL, &a->seed))
                goto bad;
        } else if ((strcmp(s, "-f") == 0 || strcmp(s, "--file") == 0) && has) {
            a->file = argv[++i];
        } else if (strcmp(s, "--ref-logits") == 0 && has) {
            a->ref_logits = argv[++i];
        } else if (strcmp(s, "--ref-tokens") == 0 && has) {
            a->ref_tokens = argv[++i];
        } else if (strcmp(s, "--min-top1") == 0 && has) {
            a->min_top1 = strtod(argv[++i], NULL);
        } else if (strcmp(s, "--max-kl") == 0 && has) {
            a->max_kl = strtod(argv[++i], NULL);
        } else if (strcmp(s, "--batched-prefix") == 0) {
            a->batched_prefix = true;
        } else {
            si_cli_error(cmd, "unknown or incomplete option '%s' (see --help)", s);
            return SI_EXIT_USAGE;
        }
        continue;
bad:
        si_cli_error(cmd, "%s '%s': not a valid count", s, argv[i]);
        return SI_EXIT_USAGE;
    }
    return 0;
}

/* Tokens for a check: the file's text repeated, or seeded random ids. */
static int32_t *make_tokens(si_engine *e, const char *file, uint32_t n, uint64_t seed, uint32_t n_vocab)
{
    int32_t *t = malloc(sizeof *t * (n ? n : 1));
    if (t == NULL)
        return NULL;
    if (file != NULL) {
        size_t len = 0;
        char *text = si_cli_read_file("check", file, &len);
        si_tokenizer *tok = NULL;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        si_err err = { { 0 } };
        if (text == NULL || si_tokenizer_from_gguf(si_engine_gguf(e), &tok, &err) != SI_OK ||
            si_tokenize(tok, text, len, SI_TOK_SPECIAL_NONE, &ids, &n_ids, &err) != SI_OK ||
            n_ids == 0) {
            if (text != NULL)
                si_cli_error("check", "%s: %s", file, n_ids == 0 && err.msg[0] == 0 ? "no tokens" : err.msg);
            free(text); free(ids); free(t);
            si_tokenizer_free(tok);
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++)
            t[i] = ids[i % n_ids];
        free(text); free(ids);
        si_tokenizer_free(tok);
        return t;
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint32_t i = 0; i < n; i++) {
        x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
        t[i] = (int32_t)((x * 0x2545F4914F6CDD1Dull >> 33) % n_vocab);
    }
    return t;
}

static void check_usage(FILE *f)
{
    fprintf(f, "usage: sparkinfer check -m MODEL.gguf [--prefix N] [--cont M] [options]\n\n"
               "Runs N+M tokens once as a batched prefill and once token by token on the\n"
               "same backend, and compares the logits of the last M positions: top-1\n"
               "agreement and KL(batched || stepwise). One table line and one JSON line.\n\n"
               "  --prefix N         tokens before the compared positions (default 64)\n"
               "  --cont M           compared positions (default 64)\n"
               "  -f, --file FILE    take tokens from this text (repeated); default seeded random ids\n"
               "  --seed S           seed of the random ids (default 0)\n"
               "  --batched-prefix   feed the prefix batched in the stepwise run too\n"
               "  --min-top1 X       exit 1 when top-1 agreement < X\n"
               "  --max-kl X         exit 1 when the mean KL > X\n");
    fputs(SI_CLI_MODEL_HELP, f);
}

int si_cmd_check(int argc, char **argv)
{
    check_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(&a, "check", argc, argv, check_usage);
    if (rc != 0)
        return rc < 0 ? SI_EXIT_OK : rc;
    si_config *cfg = NULL;
    si_engine *e = si_cli_engine_open(&a.m, "check", &cfg);
    if (e == NULL)
        return SI_EXIT_FAIL;
    si_model_info info;
    si_engine_info(e, &info);
    uint32_t n = (uint32_t)(a.prefix + a.cont), m = (uint32_t)a.cont, nv = info.n_vocab;
    uint32_t nb = si_cli_n_batch(&a.m, cfg);
    int32_t *tok = make_tokens(e, a.file, n, (uint64_t)a.seed, nv);
    float *la = malloc(sizeof(float) * (size_t)m * nv);
    float *lb = malloc(sizeof(float) * (size_t)m * nv);
    uint8_t *want = calloc(n, 1);
    si_err err = { { 0 } };
    rc = (tok && la && lb && want) ? SI_OK : si_err_set(&err, SI_ENOMEM, "out of memory");
    for (uint32_t i = (uint32_t)a.prefix; i < n && want; i++)
        want[i] = 1;

    double t0 = si_now_seconds();
    if (rc == SI_OK)
        rc = si_prefill(e, 0, 0, tok, n, nb, want, la, &err);
    double t_batched = si_now_seconds() - t0;
    if (rc == SI_OK)
        rc = si_engine_seq_reset(e, 0, &err);
    t0 = si_now_seconds();
    uint32_t start = 0;
    if (rc == SI_OK && a.batched_prefix && a.prefix > 0) {
        rc = si_prefill(e, 0, 0, tok, (uint32_t)a.prefix, nb, NULL, NULL, &err);
        start = (uint32_t)a.prefix;
    }
    for (uint32_t i = start; i < n && rc == SI_OK; i++)
        rc = si_prefill(e, 0, i, tok + i, 1, 1, want + i,
                        lb + (size_t)(i >= a.prefix ? i - a.prefix : 0) * nv, &err);
    double t_step = si_now_seconds() - t0;

    cmp_acc acc;
    memset(&acc, 0, sizeof acc);
    if (rc == SI_OK) {
        for (uint32_t i = 0; i < m; i++)
            cmp_row(&acc, la + (size_t)i * nv, lb + (size_t)i * nv, nv);
        printf("check %s on %s: prefix %ld, cont %ld; batched %.2f s, stepwise %.2f s\n",
               a.m.model, si_engine_backend_name(e), a.prefix, a.cont, t_batched, t_step);
        cmp_print("batched_vs_stepwise", &acc);
        rc = gate("check", &acc, a.min_top1, a.max_kl) == SI_EXIT_OK ? SI_OK : SI_EINVAL;
    } else {
        si_cli_error("check", "%s", err.msg);
    }
    free(tok); free(la); free(lb); free(want);
    si_engine_close(e);
    si_config_free(cfg);
    return rc == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}

/* ---- score ----------------------------------------------------------- */

static void score_usage(FILE *f)
{
    fprintf(f, "usage: sparkinfer score -m MODEL.gguf (-f TEXT_FILE | --ref-tokens IDS --ref-logits F32) [options]\n\n"
               "Teacher-forced evaluation.  With -f: perplexity of the text (windows of the\n"
               "context size).  With --ref-tokens/--ref-logits: the model's logits at every\n"
               "position against reference logits (raw little-endian f32 [n][n_vocab], e.g.\n"
               "from Hugging Face transformers): top-1 agreement, KL, relative error.\n\n"
               "  --ref-tokens FILE   whitespace-separated token ids\n"
               "  --ref-logits FILE   reference logits\n"
               "  --min-top1 X / --max-kl X   exit 1 outside these bounds\n");
    fputs(SI_CLI_MODEL_HELP, f);
}

static int32_t *read_ids(const char *path, uint32_t *n)
{
    size_t len = 0;
    char *text = si_cli_read_file("score", path, &len);
    if (text == NULL)
        return NULL;
    size_t cap = len / 2 + 1;
    int32_t *ids = malloc(sizeof *ids * cap);
    uint32_t k = 0;
    char *p = text, *end = NULL;
    while (ids != NULL && k < cap) {
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        ids[k++] = (int32_t)v;
        p = end;
    }
    free(text);
    *n = k;
    return ids;
}

static int score_ref(si_engine *e, const check_args *a, uint32_t nb)
{
    si_model_info info;
    si_engine_info(e, &info);
    uint32_t n = 0, nv = info.n_vocab;
    int32_t *ids = read_ids(a->ref_tokens, &n);
    if (ids == NULL || n == 0) {
        si_cli_error("score", "%s: no token ids", a->ref_tokens);
        free(ids);
        return SI_EXIT_FAIL;
    }
    size_t flen = 0;
    char *ref = si_cli_read_file("score", a->ref_logits, &flen);
    if (ref == NULL || flen != (size_t)n * nv * sizeof(float)) {
        if (ref != NULL)
            si_cli_error("score", "%s: %zu bytes, expected %u positions x %u vocab x 4 = %zu",
                         a->ref_logits, flen, n, nv, (size_t)n * nv * 4);
        free(ids); free(ref);
        return SI_EXIT_FAIL;
    }
    float *out = malloc(sizeof(float) * (size_t)n * nv);
    si_err err = { { 0 } };
    int rc = out ? si_prefill(e, 0, 0, ids, n, nb, NULL, out, &err)
                 : si_err_set(&err, SI_ENOMEM, "out of memory");
    int status = SI_EXIT_FAIL;
    if (rc == SI_OK) {
        cmp_acc acc;
        memset(&acc, 0, sizeof acc);
        float *rf = malloc(sizeof(float) * nv);
        for (uint32_t i = 0; i < n && rf; i++) {
            memcpy(rf, ref + (size_t)i * nv * sizeof(float), sizeof(float) * nv);
            cmp_row(&acc, rf, out + (size_t)i * nv, nv);
        }
        free(rf);
        cmp_print("vs_reference", &acc);
        status = gate("score", &acc, a->min_top1, a->max_kl);
    } else {
        si_cli_error("score", "%s", err.msg);
    }
    free(ids); free(ref); free(out);
    return status;
}

static int score_text(si_engine *e, const check_args *a, uint32_t nb)
{
    si_model_info info;
    si_engine_info(e, &info);
    uint32_t nv = info.n_vocab;
    size_t len = 0;
    char *text = si_cli_read_file("score", a->file, &len);
    si_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    si_err err = { { 0 } };
    int rc = text ? si_tokenizer_from_gguf(si_engine_gguf(e), &tok, &err) : SI_EIO;
    if (rc == SI_OK)
        rc = si_tokenize(tok, text, len, SI_TOK_SPECIAL_NONE, &ids, &n, &err);
    if (rc == SI_OK && n < 2)
        rc = si_err_set(&err, SI_EINVAL, "%s: fewer than 2 tokens", a->file);
    float *lg = malloc(sizeof(float) * (size_t)nb * nv);
    double nll = 0.0;
    uint64_t count = 0;
    uint32_t win = info.n_ctx;
    for (size_t w0 = 0; rc == SI_OK && w0 + 1 < n; w0 += win) {
        uint32_t wn = (uint32_t)(n - w0 < win ? n - w0 : win);
        rc = si_engine_seq_reset(e, 0, &err);
        for (uint32_t c = 0; rc == SI_OK && c < wn; c += nb) {
            uint32_t cn = wn - c < nb ? wn - c : nb;
            rc = lg ? si_prefill(e, 0, c, ids + w0 + c, cn, nb, NULL, lg, &err)
                    : si_err_set(&err, SI_ENOMEM, "out of memory");
            for (uint32_t i = 0; rc == SI_OK && i < cn; i++) {
                size_t next = w0 + c + i + 1;
                if (next >= w0 + wn)
                    break;   /* the window's last token predicts outside it */
                const float *row = lg + (size_t)i * nv;
                nll += log_norm(row, nv) - row[ids[next]];
                count++;
            }
        }
    }
    if (rc == SI_OK) {
        double ppl = exp(nll / (double)count);
        printf("perplexity over %llu predictions: %.4f (mean NLL %.5f)\n",
               (unsigned long long)count, ppl, nll / (double)count);
        printf("{\"score\":\"perplexity\",\"predictions\":%llu,\"ppl\":%.6f,\"nll\":%.6f}\n",
               (unsigned long long)count, ppl, nll / (double)count);
    } else {
        si_cli_error("score", "%s", err.msg);
    }
    free(lg); free(ids); free(text);
    si_tokenizer_free(tok);
    return rc == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}

int si_cmd_score(int argc, char **argv)
{
    check_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(&a, "score", argc, argv, score_usage);
    if (rc != 0)
        return rc < 0 ? SI_EXIT_OK : rc;
    bool ref = a.ref_logits != NULL || a.ref_tokens != NULL;
    if ((ref && (a.ref_logits == NULL || a.ref_tokens == NULL)) || (ref == (a.file != NULL))) {
        si_cli_error("score", "give either -f TEXT or both --ref-tokens and --ref-logits");
        return SI_EXIT_USAGE;
    }
    si_config *cfg = NULL;
    si_engine *e = si_cli_engine_open(&a.m, "score", &cfg);
    if (e == NULL)
        return SI_EXIT_FAIL;
    uint32_t nb = si_cli_n_batch(&a.m, cfg);
    rc = ref ? score_ref(e, &a, nb) : score_text(e, &a, nb);
    si_engine_close(e);
    si_config_free(cfg);
    return rc;
}
