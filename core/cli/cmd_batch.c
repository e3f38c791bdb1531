/* core/cli/cmd_batch.c — `sparkinfer batch`: a completion for every prompt
 * of a file, up to P sequences at once (continuous batching).
 *
 * Each of the P sequence slots takes the next waiting prompt as soon as it
 * is free.  Every step is one forward: the next token of each decoding
 * sequence, then the next chunks of the prompts being prefilled, up to -b
 * tokens in all (chunked prefill: the decoding sequences go on while a
 * new prompt comes in, where prefilling it in forwards of its own,
 * --prefill-apart, stalls them); a prompt whose last token went in draws
 * its first token from that step.  A sequence that ends (end of
 * generation, -n reached, context full) gives its slot back at once
 * (si_engine_seq_reset), so the batch stays full while prompts wait.
 * Every prompt has its own sampler seeded with seed + its index, so a
 * prompt's text does not depend on the others or on P (on the cpu backend
 * it is `run`'s bit for bit; a GPU backend's products may round another
 * way at another batch size).  Pure decode steps are queued ahead of the
 * host's draws where [runtime] decode_ahead allows (ahead_run: the same
 * text).  Results are printed in input order as soon
 * as all before them are done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli_model.h"
#include "cli_prompt.h"
#include "generate.h"
#include "tokenizer.h"

typedef struct bt_prompt {
    char      *text;     /* the prompt (owned)                          */
    long       line;     /* its line in the input, from 1               */
    si_tok_vec gen;      /* generated ids, without a final end token    */
    uint32_t   n_prompt;
    const char *finish;  /* "stop", "length", "context"; NULL: error    */
    char      *error;    /* why it failed (owned)                       */
    bool       done;
} bt_prompt;

typedef struct bt_slot {
    long        p;       /* prompt index; -1: free                        */
    si_sampler *smp;
    si_tok_vec  prompt;  /* its tokens, of which `fed` went into the model */
    uint32_t    fed;
    uint32_t    pos;     /* where `next` goes (decoding: fed == prompt.n)  */
    int32_t     next;    /* the token to feed                              */
    uint32_t    n_gen;   /* tokens sampled                                 */
} bt_slot;

typedef struct bt_args {
    si_cli_model_opts  m;
    si_sampler_params  sp;
    si_cli_prompt_opts po;
    const char        *file;
    long               n_predict, parallel;
    bool               jsonl, jsonl_in, apart;
} bt_args;

typedef struct bt_run {
    const bt_args *a;
    si_engine     *e;
    si_tokenizer  *tok;
    uint32_t       n_vocab, n_ctx, n_batch;
    bt_prompt     *pr;
    size_t         n_pr, next_out;
    bt_slot       *sl;
    uint32_t       n_sl;
    float         *logits;            /* [n_sl][n_vocab]        */
    int32_t       *b_tok, *b_pos, *b_seq;   /* a step's batch: n_sl + n_batch */
    uint8_t       *b_want;
    bt_slot      **rows;              /* the slot of each wanted row */
    bool          *first;             /* that row ends its prompt    */
    uint32_t       k;                 /* top-K path; 0: full rows */
    float         *vals;
    int32_t       *ids, *pen_id, *pen_count, *pen_off;
    uint32_t       pen_cap;
    /* decode ahead (ahead_run): while steps are queued the model refuses
     * seq_reset, so the sequences of slots ended meanwhile are reset
     * after the last one is collected */
    bool           in_ahead, ahead_off;
    uint32_t      *reset_owed, n_reset_owed;
    long          *row_p;             /* the prompt of each row at its submit */
    int32_t       *post;              /* the tokens posted to a queued step   */
    /* totals */
    uint64_t       n_prompt_tok, n_gen_tok, n_rows, n_steps, n_ahead;
    double         fwd_s;
    int            failed;
} bt_run;

static void usage(FILE *f)
{
    fprintf(f, "usage: sparkinfer batch -m MODEL.gguf -f PROMPTS [-np N] [-n N] [--chat] [--jsonl] [--jsonl-in] [options]\n\n"
               "A completion for every prompt of PROMPTS (one a line, empty lines skipped;\n"
               "`-` reads stdin), up to N sequences decoding together: a sequence that ends\n"
               "hands its slot to the next waiting prompt (continuous batching). Results\n"
               "go to stdout in input order; throughput to stderr.\n\n"
               "  -f, --file FILE         the prompts\n"
               "  -np, --parallel N       sequences at once (default: the prompt count, at most 8)\n"
               "  -n, --n-predict N       tokens to generate a prompt (default [runtime] n_predict; -1 = until end of generation)\n"
               "  --jsonl                 one JSON object a prompt on stdout: index, line, prompt, text,\n"
               "                          prompt_tokens, tokens, finish (stop | length | context), or error\n"
               "  --jsonl-in              each input line is a JSON string or an object with a string \"prompt\"\n"
               "                          (prompts holding newlines)\n"
               "  --chat                  wrap each prompt as a ChatML user turn\n"
               "  --system TEXT           system message (with --chat)\n"
               "  --no-think              with --chat: open each answer with an empty <think> block\n"
               "  --no-special            treat special-token text in the prompts as plain text\n"
               "  --prefill-apart         prefill each admitted prompt in forwards of its own (default: its\n"
               "                          chunks ride in the decode steps, up to -b tokens a step in all)\n"
               "Prompt i samples with seed + i, so its text does not depend on -np.\n");
    fputs(SI_CLI_MODEL_HELP, f);
    fputs(SI_CLI_SAMPLING_HELP, f);
}

static int parse(bt_args *a, int argc, char **argv)
{
    si_cli_model_defaults(&a->m);
    si_sampler_default_params(&a->sp);
    si_cli_sampling_unset(&a->sp, &a->n_predict);
    a->po.think = true;
    a->po.special = true;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int r = si_cli_model_opt(&a->m, "batch", argc, argv, &i);
        if (r == 0)
            r = si_cli_sampling_opt(&a->sp, "batch", argc, argv, &i);
        if (r < 0)
            return SI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage(stdout);
            return -1;
        } else if ((strcmp(s, "-f") == 0 || strcmp(s, "--file") == 0) && i + 1 < argc) {
            a->file = argv[++i];
        } else if ((strcmp(s, "-np") == 0 || strcmp(s, "--parallel") == 0) && i + 1 < argc) {
            if (!si_cli_parse_long(argv[++i], 1, 256, &a->parallel)) {
                si_cli_error("batch", "-np '%s': expected an integer in 1..256", argv[i]);
                return SI_EXIT_USAGE;
            }
        } else if ((strcmp(s, "-n") == 0 || strcmp(s, "--n-predict") == 0) && i + 1 < argc) {
            if (!si_cli_parse_long(argv[++i], -1, 1L << 30, &a->n_predict)) {
                si_cli_error("batch", "-n '%s': expected an integer >= -1", argv[i]);
                return SI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--jsonl") == 0) {
            a->jsonl = true;
        } else if (strcmp(s, "--jsonl-in") == 0) {
            a->jsonl_in = true;
        } else if (strcmp(s, "--chat") == 0) {
            a->po.chat = true;
        } else if (strcmp(s, "--system") == 0 && i + 1 < argc) {
            a->po.system = argv[++i];
        } else if (strcmp(s, "--no-think") == 0) {
            a->po.think = false;
        } else if (strcmp(s, "--no-special") == 0) {
            a->po.special = false;
        } else if (strcmp(s, "--prefill-apart") == 0) {
            a->apart = true;
        } else {
            si_cli_error("batch", "unknown or incomplete option '%s' (see --help)", s);
            return SI_EXIT_USAGE;
        }
    }
    if (a->file == NULL) {
        si_cli_error("batch", "no prompts (-f FILE, or -f - for stdin)");
        return SI_EXIT_USAGE;
    }
    return 0;
}

/* ---- input ------------------------------------------------------------- */

static char *read_stdin(void)
{
    size_t n = 0, cap = 1 << 16;
    char *b = malloc(cap);
    for (size_t got; b != NULL && (got = fread(b + n, 1, cap - n - 1, stdin)) > 0;) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(b, cap * 2);
            if (nb == NULL)
                free(b);
            b = nb;
            cap *= 2;
        }
    }
    if (b != NULL)
        b[n] = '\0';
    return b;
}

/* One line's prompt (owned), or NULL with the reason printed. */
static char *line_prompt(const bt_args *a, const char *s, long line)
{
    if (!a->jsonl_in)
        return strdup(s);
    cJSON *j = cJSON_Parse(s);
    const cJSON *p = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : j;
    char *out = cJSON_IsString(p) ? strdup(p->valuestring) : NULL;
    if (out == NULL)
        si_cli_error("batch", "%s:%ld: expected a JSON string or an object with a string \"prompt\"", a->file, line);
    cJSON_Delete(j);
    return out;
}

/* The prompts of the input, in order. */
static int read_prompts(const bt_args *a, bt_prompt **out, size_t *n_out)
{
    char *all = strcmp(a->file, "-") == 0 ? read_stdin() : si_cli_read_file("batch", a->file, NULL);
    if (all == NULL) {
        if (strcmp(a->file, "-") == 0)
            si_cli_error("batch", "stdin: out of memory");
        return SI_EXIT_FAIL;
    }
    bt_prompt *pr = NULL;
    size_t n = 0, cap = 0;
    int rc = SI_EXIT_OK;
    long line = 0;
    for (char *s = all, *nl; s != NULL && rc == SI_EXIT_OK; s = nl) {
        nl = strchr(s, '\n');
        if (nl != NULL)
            *nl++ = '\0';
        line++;
        size_t len = strlen(s);
        if (len > 0 && s[len - 1] == '\r')
            s[--len] = '\0';
        if (len == 0)
            continue;
        if (n == cap) {
            bt_prompt *np = realloc(pr, (cap = cap ? 2 * cap : 16) * sizeof *pr);
            if (np == NULL) {
                si_cli_error("batch", "out of memory for %zu prompts", n + 1);
                rc = SI_EXIT_FAIL;
                break;
            }
            pr = np;
        }
        memset(&pr[n], 0, sizeof pr[n]);
        pr[n].line = line;
        if ((pr[n].text = line_prompt(a, s, line)) == NULL)
            rc = SI_EXIT_FAIL;
        else
            n++;
    }
    free(all);
    if (rc == SI_EXIT_OK && n == 0) {
        si_cli_error("batch", "%s: no prompts (every line is empty)", a->file);
        rc = SI_EXIT_FAIL;
    }
    *out = pr;
    *n_out = n;
    return rc;
}

/* ---- output ------------------------------------------------------------ */

static void print_result(bt_run *r, size_t i)
{
    bt_prompt *p = &r->pr[i];
    char *text = NULL;
    si_err err = { { 0 } };
    if (p->error == NULL && si_detokenize(r->tok, p->gen.ids, p->gen.n, false, &text, NULL, &err) != SI_OK) {
        p->error = strdup(err.msg);
        p->finish = NULL;
    }
    if (r->a->jsonl) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", (double)i);
        cJSON_AddNumberToObject(o, "line", (double)p->line);
        cJSON_AddStringToObject(o, "prompt", p->text);
        if (p->error != NULL) {
            cJSON_AddStringToObject(o, "error", p->error);
        } else {
            cJSON_AddStringToObject(o, "text", text);
            cJSON_AddNumberToObject(o, "prompt_tokens", p->n_prompt);
            cJSON_AddNumberToObject(o, "tokens", (double)p->gen.n);
            cJSON_AddStringToObject(o, "finish", p->finish);
        }
        char *js = cJSON_PrintUnformatted(o);
        if (js != NULL)
            printf("%s\n", js);
        free(js);
        cJSON_Delete(o);
    } else if (p->error != NULL) {
        printf("--- prompt %zu (line %ld): error: %s\n", i, p->line, p->error);
    } else {
        printf("--- prompt %zu (line %ld): %u + %zu tokens, %s\n%s\n", i, p->line, p->n_prompt, p->gen.n, p->finish,
               text);
    }
    fflush(stdout);
    free(text);
}

/* Prints every finished result whose predecessors are all printed. */
static void flush_results(bt_run *r)
{
    for (; r->next_out < r->n_pr && r->pr[r->next_out].done; r->next_out++) {
        print_result(r, r->next_out);
        free(r->pr[r->next_out].gen.ids);
        r->pr[r->next_out].gen = (si_tok_vec){ 0 };
    }
}

static void prompt_fail(bt_run *r, size_t i, const char *msg)
{
    bt_prompt *p = &r->pr[i];
    p->error = strdup(msg != NULL ? msg : "failed");
    p->done = true;
    r->failed = 1;
    fprintf(stderr, "sparkinfer batch: prompt %zu (line %ld): %s\n", i, p->line, p->error);
}

/* ---- the scheduler ------------------------------------------------------ */

/* Slot s is done with its prompt: `finish` (NULL: msg is the error); its
 * sequence is emptied for the next one. */
static void slot_end(bt_run *r, bt_slot *s, const char *finish, const char *msg)
{
    const size_t i = (size_t)s->p;
    if (finish != NULL) {
        r->pr[i].finish = finish;
        r->pr[i].done = true;
    } else {
        prompt_fail(r, i, msg);
    }
    si_err err = { { 0 } };
    if (r->in_ahead)
        r->reset_owed[r->n_reset_owed++] = (uint32_t)(s - r->sl);
    else if (si_engine_seq_reset(r->e, (uint32_t)(s - r->sl), &err) != SI_OK)
        fprintf(stderr, "sparkinfer batch: sequence %td: reset: %s\n", s - r->sl, err.msg);
    si_sampler_free(s->smp);
    free(s->prompt.ids);
    memset(s, 0, sizeof *s);
    s->p = -1;
    flush_results(r);
}

/* Slot s sampled `id`: it ends there (end of generation, -n, a full
 * context) or the next step feeds id. */
static void slot_took(bt_run *r, bt_slot *s, int32_t id)
{
    bt_prompt *p = &r->pr[s->p];
    si_sampler_accept(s->smp, id);
    s->n_gen++;
    r->n_gen_tok++;
    if (si_token_is_eog(r->tok, id)) {
        slot_end(r, s, "stop", NULL);
        return;
    }
    if (p->gen.n == p->gen.cap) {
        const size_t nc = p->gen.cap ? 2 * p->gen.cap : 64;
        int32_t *ni = realloc(p->gen.ids, nc * sizeof *ni);
        if (ni == NULL) {
            slot_end(r, s, NULL, "out of memory for the generated tokens");
            return;
        }
        p->gen.ids = ni;
        p->gen.cap = nc;
    }
    p->gen.ids[p->gen.n++] = id;
    if (r->a->n_predict >= 0 && s->n_gen >= (uint32_t)r->a->n_predict)
        slot_end(r, s, "length", NULL);
    else if (s->pos >= r->n_ctx)
        slot_end(r, s, "context", NULL);
    else
        s->next = id;
}

/* Slot s samples from row j of the last forward (the top-K's or the
 * logits rows); the id drawn, -1 when sampling failed (the slot ended). */
static int32_t slot_draw(bt_run *r, bt_slot *s, bool topk, uint32_t j)
{
    int32_t id = -1;
    si_err err = { { 0 } };
    int rc = topk ? si_sampler_sample_topk(s->smp, r->vals + (size_t)j * r->k, r->ids + (size_t)j * r->k, r->k, &id,
                                           &err)
                  : si_sampler_sample(s->smp, r->logits + (size_t)j * r->n_vocab, &id, &err);
    if (rc != SI_OK) {
        slot_end(r, s, NULL, err.msg);
        return -1;
    }
    slot_took(r, s, id);
    return id;
}

/* Prompt i into free slot s: its tokens (into its sampler's window) and
 * its sampler; nothing runs yet.  A prompt that cannot run fails alone. */
static void slot_admit(bt_run *r, bt_slot *s, size_t i)
{
    bt_prompt *p = &r->pr[i];
    si_err err = { { 0 } };
    char msg[160];
    s->p = (long)i;
    if (si_cli_prompt_tokens(r->tok, &r->a->po, p->text, &s->prompt) != SI_OK || s->prompt.n == 0) {
        slot_end(r, s, NULL, s->prompt.n == 0 ? "the prompt is empty" : "cannot tokenize the prompt");
        return;
    }
    p->n_prompt = (uint32_t)s->prompt.n;
    if (s->prompt.n > r->n_ctx) {
        snprintf(msg, sizeof msg, "prompt of %zu tokens exceeds the context of %u tokens (raise -c or shorten it)",
                 s->prompt.n, r->n_ctx);
        slot_end(r, s, NULL, msg);
        return;
    }
    si_sampler_params sp = r->a->sp;
    sp.seed += i;
    if (si_sampler_new(&sp, r->n_vocab, &s->smp, &err) != SI_OK) {
        slot_end(r, s, NULL, err.msg);
        return;
    }
    for (size_t k = 0; k < s->prompt.n; k++)
        si_sampler_accept(s->smp, s->prompt.ids[k]);
}

/* --prefill-apart: slot s's whole prompt in forwards of its own (chunks
 * of -b, as `run`), then its first token.  SI_OK unless the engine failed. */
static int slot_prefill(bt_run *r, bt_slot *s)
{
    const uint32_t n = (uint32_t)s->prompt.n;
    uint8_t *want = calloc(n, 1);
    si_err err = { { 0 } };
    if (want == NULL) {
        slot_end(r, s, NULL, "out of memory");
        return SI_OK;
    }
    want[n - 1] = 1;
    const double t0 = si_now_seconds();
    int rc = si_prefill(r->e, (uint32_t)(s - r->sl), 0, s->prompt.ids, n, r->n_batch, want, r->logits, &err);
    r->fwd_s += si_now_seconds() - t0;
    free(want);
    r->n_prompt_tok += n;
    s->fed = s->pos = n;
    if (rc != SI_OK)
        slot_end(r, s, NULL, err.msg);
    else if (r->a->n_predict == 0)
        slot_end(r, s, "length", NULL);
    else
        slot_draw(r, s, false, 0);
    return rc;
}

/* Token t of sequence q at position at into the step's batch. */
static void put(bt_run *r, uint32_t *n, int32_t t, uint32_t at, uint32_t q, bool want)
{
    r->b_tok[*n] = t;
    r->b_pos[*n] = (int32_t)at;
    r->b_seq[*n] = (int32_t)q;
    r->b_want[*n] = want;
    (*n)++;
}

/* Slot s owns the next wanted row; its penalty window for the top-K op
 * (the window its next draw sees). */
static void want_row(bt_run *r, bt_slot *s, bool first, uint32_t *nw, uint32_t *np, float pen[3])
{
    if (r->k > 0) {
        r->pen_off[*nw] = (int32_t)*np;
        *np += si_sampler_penalties(s->smp, r->pen_id + *np, r->pen_count + *np, pen);
    }
    r->rows[*nw] = s;
    r->first[*nw] = first;
    (*nw)++;
}

/* Row j of the step drew for decoding slot s: its position moves on, then
 * its next token is drawn (returned; < 0 when none). */
static int32_t decode_row(bt_run *r, bt_slot *s, bool topk, uint32_t j)
{
    r->n_rows++;
    s->pos++;
    return slot_draw(r, s, topk, j);
}

/* One forward: every decoding slot's next token, then (unless
 * --prefill-apart) the next chunks of the prompts being prefilled, up to
 * -b tokens in all; then a draw for every decoding slot and for every
 * prompt whose last token went in: from the backend's top-K where the
 * sampler allows it (only K values and ids a row come back), else from
 * the whole logits rows. */
static int step(bt_run *r, si_err *err)
{
    uint32_t n = 0, nw = 0, np = 0;
    float pen[3] = { 1.0f, 0.0f, 0.0f };
    for (uint32_t i = 0; i < r->n_sl; i++) {
        bt_slot *s = &r->sl[i];
        if (s->p >= 0 && s->fed == s->prompt.n) {
            put(r, &n, s->next, s->pos, i, true);
            want_row(r, s, false, &nw, &np, pen);
        }
    }
    uint32_t budget = r->n_batch > n ? r->n_batch - n : n == 0;
    for (uint32_t i = 0; i < r->n_sl && budget > 0; i++) {
        bt_slot *s = &r->sl[i];
        if (s->p < 0 || s->fed == s->prompt.n)
            continue;
        const uint32_t left = (uint32_t)s->prompt.n - s->fed, m = left < budget ? left : budget;
        for (uint32_t j = 0; j < m; j++)
            put(r, &n, s->prompt.ids[s->fed + j], s->fed + j, i, j == left - 1);
        if (m == left)
            want_row(r, s, true, &nw, &np, pen);
        s->fed += m;
        budget -= m;
        r->n_prompt_tok += m;
    }
    if (n == 0)
        return SI_OK;
    si_batch b = { .n = n, .tokens = r->b_tok, .pos = r->b_pos, .seq = r->b_seq, .want_logits = r->b_want };
    const double t0 = si_now_seconds();
    int rc = SI_EUNSUPPORTED;
    if (r->k > 0) {
        r->pen_off[nw] = (int32_t)np;
        si_topk_params tp = { .k = r->k, .repeat_penalty = pen[0], .frequency_penalty = pen[1],
                              .presence_penalty = pen[2], .pen_off = np > 0 ? r->pen_off : NULL,
                              .pen_id = r->pen_id, .pen_count = r->pen_count };
        rc = si_engine_forward_topk(r->e, &b, &tp, r->vals, r->ids, err);
        if (rc == SI_EUNSUPPORTED)
            r->k = 0;   /* (refused before running anything: the full rows from now on) */
    }
    const bool topk = rc != SI_EUNSUPPORTED;
    if (!topk)
        rc = si_engine_forward(r->e, &b, r->logits, err);
    r->fwd_s += si_now_seconds() - t0;
    if (rc != SI_OK)
        return rc;
    r->n_steps++;
    for (uint32_t j = 0; j < nw; j++) {
        bt_slot *s = r->rows[j];
        if (r->first[j]) {   /* (its prompt is in: the first draw) */
            s->pos = s->fed;
            if (r->a->n_predict == 0) {
                slot_end(r, s, "length", NULL);
                continue;
            }
            slot_draw(r, s, topk, j);
        } else {
            decode_row(r, s, topk, j);
        }
    }
    return SI_OK;
}

/* ---- decode ahead ---------------------------------------------------------
 * [runtime] decode_ahead (batch: up to SI_SUBMIT_MAX_ROWS sequences; true:
 * one): while every live slot decodes, drawing from the backend's top-K
 * without penalties, each step is queued before the previous one's draws
 * (SI_SUBMIT_POST: the step waits on the device for the host's tokens;
 * greedy, k = 1: SI_SUBMIT_FEED, fed from the previous step's best id), so
 * the device does not idle while the host collects, draws and plans the
 * next step.  The run ends when a slot ends (a waiting prompt may take
 * it; a smaller step goes on without it): the step already queued is
 * collected and drawn for the slots still going, the ended slot's row of
 * it dropped and its sequence reset after (the model refuses seq_reset
 * while a step is queued).  Each slot draws from the same numbers in the
 * same order as step by step: the same text. */
static bool ahead_ok(const bt_run *r, uint32_t live)
{
    if (r->ahead_off || r->k == 0 || r->pen_cap != 0 || r->reset_owed == NULL || live == 0 ||
        live > SI_SUBMIT_MAX_ROWS || si_engine_decode_ahead(r->e) < live ||
        (r->k > 1 && !si_engine_topk_can_post(r->e)))
        return false;
    for (uint32_t i = 0; i < r->n_sl; i++)
        if (r->sl[i].p >= 0 && r->sl[i].fed != r->sl[i].prompt.n)
            return false;   /* (a prompt still going in: a step of its own) */
    return true;
}

/* Whether a step may be queued behind the n rows' last submitted one: no
 * row's draw from that one is its last by -n, and the step fits. */
static bool may_queue(const bt_run *r, uint32_t n)
{
    for (uint32_t j = 0; j < n; j++) {
        const bt_slot *s = r->rows[j];
        if ((r->a->n_predict >= 0 && s->n_gen + 1 >= (uint32_t)r->a->n_predict) ||
            (uint32_t)r->b_pos[j] + 1 >= r->n_ctx)
            return false;
    }
    return true;
}

static int ahead_run(bt_run *r, si_err *err)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->n_sl; i++) {
        bt_slot *s = &r->sl[i];
        if (s->p < 0)
            continue;
        r->rows[n] = s;
        r->row_p[n] = s->p;
        put(r, &n, s->next, s->pos, i, true);
    }
    const si_topk_params tp = { .k = r->k, .repeat_penalty = 1.0f };
    const uint32_t next = r->k == 1 ? SI_SUBMIT_FEED : SI_SUBMIT_POST;
    si_batch b = { .n = n, .tokens = r->b_tok, .pos = r->b_pos, .seq = r->b_seq, .want_logits = r->b_want };
    const double t0 = si_now_seconds();
    int rc = si_engine_topk_submit(r->e, &b, &tp, 0, err);
    if (rc == SI_EUNSUPPORTED) {   /* (refused before running: step by step from now on) */
        r->ahead_off = true;
        return SI_OK;
    }
    r->in_ahead = true;
    uint32_t queued = rc == SI_OK;
    bool going = true;   /* every row's slot still has its prompt */
    while (rc == SI_OK && queued > 0) {
        bool owed = false;
        if (going && may_queue(r, n)) {
            for (uint32_t j = 0; j < n; j++)
                r->b_pos[j]++;
            if ((rc = si_engine_topk_submit(r->e, &b, &tp, next, err)) != SI_OK)
                break;
            queued++;
            owed = next == SI_SUBMIT_POST;
        }
        rc = si_engine_topk_collect(r->e, r->vals, r->ids, err);
        queued--;
        r->n_steps += rc == SI_OK;
        for (uint32_t j = 0; j < n; j++) {
            bt_slot *s = r->rows[j];
            int32_t id = -1;
            if (rc == SI_OK && s->p == r->row_p[j]) {   /* (an ended slot's row is dropped) */
                r->n_ahead++;
                id = decode_row(r, s, true, j);
            }
            going &= s->p == r->row_p[j];
            r->post[j] = id >= 0 ? id : 0;
        }
        if (owed)   /* (whatever happened: the queued step must not wait on) */
            rc = si_engine_topk_post_owed(r->e, r->post, n, rc, err);
    }
    rc = si_engine_topk_drain(r->e, queued, r->vals, r->ids, rc, err);
    r->in_ahead = false;
    r->fwd_s += si_now_seconds() - t0;
    si_err scratch = { { 0 } };
    for (uint32_t i = 0; i < r->n_reset_owed; i++)
        if (si_engine_seq_reset(r->e, r->reset_owed[i], &scratch) != SI_OK)
            fprintf(stderr, "sparkinfer batch: sequence %u: reset: %s\n", r->reset_owed[i], scratch.msg);
    r->n_reset_owed = 0;
    return rc;
}

/* Buffers for n_sl rows: logits, and the top-K path's where it is on. */
static int run_buffers(bt_run *r, const si_cli_model_opts *m)
{
    const size_t nb = (size_t)r->n_sl + r->n_batch;
    r->logits = malloc(sizeof(float) * r->n_vocab * r->n_sl);
    r->b_tok = malloc(sizeof *r->b_tok * nb);
    r->b_pos = malloc(sizeof *r->b_pos * nb);
    r->b_seq = malloc(sizeof *r->b_seq * nb);
    r->b_want = malloc(nb);
    r->rows = malloc(sizeof *r->rows * r->n_sl);
    r->first = malloc(sizeof *r->first * r->n_sl);
    if (r->logits == NULL || r->b_tok == NULL || r->b_pos == NULL || r->b_seq == NULL || r->b_want == NULL ||
        r->rows == NULL || r->first == NULL) {
        si_cli_error("batch", "out of memory for %u logits rows", r->n_sl);
        return SI_EXIT_FAIL;
    }
    si_sampler *probe = NULL;
    si_err err = { { 0 } };
    if (!si_engine_device_sampling(r->e) || si_sampler_new(&r->a->sp, r->n_vocab, &probe, &err) != SI_OK)
        return SI_EXIT_OK;   /* (a bad parameter is reported by the first prompt) */
    r->k = si_sampler_topk_k(probe, SI_TOPK_MAX);
    r->pen_cap = si_sampler_penalty_cap(probe);
    si_sampler_free(probe);
    if (r->k == 0)
        return SI_EXIT_OK;
    r->vals = malloc(sizeof *r->vals * r->k * r->n_sl);
    r->ids = malloc(sizeof *r->ids * r->k * r->n_sl);
    r->pen_id = malloc(sizeof *r->pen_id * ((size_t)r->pen_cap * r->n_sl + 1));
    r->pen_count = malloc(sizeof *r->pen_count * ((size_t)r->pen_cap * r->n_sl + 1));
    r->pen_off = malloc(sizeof *r->pen_off * (r->n_sl + 1));
    if (r->vals == NULL || r->ids == NULL || r->pen_id == NULL || r->pen_count == NULL || r->pen_off == NULL)
        r->k = 0;   /* (the full rows still work) */
    r->row_p = malloc(sizeof *r->row_p * r->n_sl);
    r->post = malloc(sizeof *r->post * r->n_sl);
    r->reset_owed = r->row_p != NULL && r->post != NULL ? malloc(sizeof *r->reset_owed * r->n_sl) : NULL;
    /* (no reset_owed: step by step, ahead_ok) */
    if (m->verbose)
        fprintf(stderr, "sparkinfer batch: decode samples from the backend's top %u\n", r->k);
    return SI_EXIT_OK;
}

static void run_free(bt_run *r)
{
    for (uint32_t i = 0; r->sl != NULL && i < r->n_sl; i++) {
        si_sampler_free(r->sl[i].smp);
        free(r->sl[i].prompt.ids);
    }
    for (size_t i = 0; i < r->n_pr; i++) {
        free(r->pr[i].text);
        free(r->pr[i].error);
        free(r->pr[i].gen.ids);
    }
    free(r->pr);
    free(r->sl);
    free(r->logits);
    free(r->b_tok);
    free(r->b_pos);
    free(r->b_seq);
    free(r->b_want);
    free(r->rows);
    free(r->first);
    free(r->vals);
    free(r->ids);
    free(r->pen_id);
    free(r->pen_count);
    free(r->pen_off);
    free(r->row_p);
    free(r->post);
    free(r->reset_owed);
}

static int batch_loop(bt_run *r)
{
    size_t waiting = 0;   /* the next prompt to admit */
    si_err err = { { 0 } };
    int rc = SI_OK;
    const double t0 = si_now_seconds();
    for (;;) {
        uint32_t live = 0;
        for (uint32_t i = 0; i < r->n_sl && rc == SI_OK; i++) {
            bt_slot *s = &r->sl[i];
            while (s->p < 0 && waiting < r->n_pr && rc == SI_OK) {
                slot_admit(r, s, waiting++);
                if (s->p >= 0 && r->a->apart)
                    rc = slot_prefill(r, s);
            }
            live += s->p >= 0;
        }
        if (rc != SI_OK) {
            si_cli_error("batch", "prefill: %s", r->pr[waiting - 1].error);
            break;
        }
        if (live == 0)
            break;
        if ((rc = ahead_ok(r, live) ? ahead_run(r, &err) : step(r, &err)) != SI_OK) {
            si_cli_error("batch", "forward of %u sequences: %s", live, err.msg);
            break;
        }
    }
    const double wall = si_now_seconds() - t0;
    /* after an engine failure the prompts not done fail with it */
    for (size_t i = 0; i < r->n_pr; i++)
        if (!r->pr[i].done)
            prompt_fail(r, i, "not run: the engine failed");
    flush_results(r);
    fprintf(stderr,
            "sparkinfer batch: %zu prompts, %u at once%s: %llu prompt + %llu generated tokens, %llu forwards in "
            "%.3f s (%.1f generated tok/s, %.1f tok/s in all; %.2f sequences decoding a step), wall %.3f s\n",
            r->n_pr, r->n_sl, r->a->apart ? ", prefill apart" : "", (unsigned long long)r->n_prompt_tok,
            (unsigned long long)r->n_gen_tok, (unsigned long long)r->n_steps, r->fwd_s,
            r->fwd_s > 0 ? (double)r->n_gen_tok / r->fwd_s : 0.0,
            r->fwd_s > 0 ? (double)(r->n_gen_tok + r->n_prompt_tok) / r->fwd_s : 0.0,
            r->n_steps ? (double)r->n_rows / (double)r->n_steps : 0.0, wall);
    if (r->a->m.verbose)
        fprintf(stderr, "sparkinfer batch: decode ahead: %llu of %llu decode rows\n", (unsigned long long)r->n_ahead,
                (unsigned long long)r->n_rows);
    return rc == SI_OK && !r->failed ? SI_EXIT_OK : SI_EXIT_FAIL;
}

int si_cmd_batch(int argc, char **argv)
{
    bt_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(&a, argc, argv);
    if (rc != 0)
        return rc < 0 ? SI_EXIT_OK : rc;
    bt_run r;
    memset(&r, 0, sizeof r);
    r.a = &a;
    if ((rc = read_prompts(&a, &r.pr, &r.n_pr)) != SI_EXIT_OK) {
        run_free(&r);
        return rc;
    }
    const long P = a.parallel > 0 ? a.parallel : (long)(r.n_pr < 8 ? r.n_pr : 8);
    char seq_set[64];
    si_cli_model_opts mo = a.m;
    if (!si_cli_model_set_n_seq(&mo, "batch", seq_set, sizeof seq_set, (unsigned long)P)) {
        run_free(&r);
        return SI_EXIT_USAGE;
    }
    si_config *cfg = NULL;
    r.e = si_cli_engine_open(&mo, "batch", &cfg);
    if (r.e == NULL) {
        run_free(&r);
        return SI_EXIT_FAIL;
    }
    si_cli_sampling_fill(&a.sp, &a.n_predict, cfg);
    si_model_info info;
    si_engine_info(r.e, &info);
    r.n_vocab = info.n_vocab;
    r.n_ctx = info.n_ctx;
    r.n_batch = si_cli_n_batch(&mo, cfg);
    r.n_sl = (uint32_t)P;
    si_err err = { { 0 } };
    r.sl = calloc(r.n_sl, sizeof *r.sl);
    if (r.sl == NULL || si_tokenizer_from_gguf(si_engine_gguf(r.e), &r.tok, &err) != SI_OK) {
        si_cli_error("batch", "%s", r.sl == NULL ? "out of memory" : err.msg);
        rc = SI_EXIT_FAIL;
    } else {
        for (uint32_t i = 0; i < r.n_sl; i++)
            r.sl[i].p = -1;
        rc = run_buffers(&r, &mo);
    }
    if (rc == SI_EXIT_OK) {
        if (a.m.verbose)
            fprintf(stderr, "sparkinfer batch: model %s on backend %s, %u sequences of %u tokens\n", a.m.model,
                    si_engine_backend_name(r.e), r.n_sl, r.n_ctx);
        rc = batch_loop(&r);
    }
    run_free(&r);
    si_tokenizer_free(r.tok);
    si_engine_close(r.e);
    si_config_free(cfg);
    return rc;
}
