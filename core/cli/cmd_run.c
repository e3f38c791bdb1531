/* core/cli/cmd_run.c — `sparkinfer run` (one prompt, streamed answer) and
 * `sparkinfer chat` (interactive ChatML conversation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_model.h"
#include "cli_prompt.h"
#include "generate.h"
#include "gguf.h"
#include "tokenizer.h"

typedef struct stream_ctx {
    si_detok detok;
    char    *buf;
    size_t   cap;
} stream_ctx;

/* Streams each token's completed text to stdout as it is generated. */
static int stream_token(void *ctx, int32_t id)
{
    stream_ctx *s = ctx;
    size_t len = 0;
    if (si_detok_push(&s->detok, id, s->buf, s->cap, &len, NULL) == SI_OK && len > 0) {
        fwrite(s->buf, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

static void stream_flush(stream_ctx *s)
{
    size_t len = 0;
    si_detok_flush(&s->detok, s->buf, s->cap, &len);
    fwrite(s->buf, 1, len, stdout);
    fflush(stdout);
}

static void print_stats(const si_gen_stats *st)
{
    fprintf(stderr, "\nsparkinfer: prompt %u tokens in %.3f s (%.1f tok/s), generated %u tokens in %.3f s (%.1f tok/s)%s\n",
            st->n_prompt, st->prompt_s, st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0.0,
            st->n_gen, st->gen_s, st->gen_s > 0 ? st->n_gen / st->gen_s : 0.0,
            st->stopped_eog ? ", stopped at end of generation" : "");
}

static void usage(FILE *f, const char *cmd)
{
    if (strcmp(cmd, "run") == 0)
        fprintf(f, "usage: sparkinfer run -m MODEL.gguf (-p TEXT | -f FILE) [-n N] [--chat] [--no-think] [options]\n\n"
                   "Generates text from a prompt and streams it to stdout; prompt and\n"
                   "generation speed go to stderr.\n\n"
                   "  -p, --prompt TEXT       prompt text\n"
                   "  -f, --file FILE         read the prompt from FILE\n"
                   "  -n, --n-predict N       tokens to generate (default [runtime] n_predict = 256; -1 = until end of generation)\n"
                   "  --chat                  wrap the prompt as a ChatML user turn\n"
                   "  --system TEXT           system message (with --chat)\n"
                   "  --no-think              with --chat: open the answer with an empty <think> block\n"
                   "  --no-special            treat special-token text in the prompt as plain text\n");
    else
        fprintf(f, "usage: sparkinfer chat -m MODEL.gguf [--system TEXT] [--no-think] [options]\n\n"
                   "Interactive conversation: one user message per line on stdin, the answer\n"
                   "streamed to stdout. An empty line or end of input ends the chat.\n\n"
                   "  -n, --n-predict N       max tokens per answer (default [runtime] n_predict = 256; -1 = until end of turn)\n"
                   "  --system TEXT           system message\n"
                   "  --no-think              answer without the reasoning block\n");
    fputs(SI_CLI_MODEL_HELP, f);
    fputs(SI_CLI_SAMPLING_HELP, f);
}

typedef struct run_args {
    si_cli_model_opts m;
    si_sampler_params sp;
    const char *prompt, *file, *system;
    long n_predict;
    bool chat, think, special;
} run_args;

static int parse(run_args *a, const char *cmd, int argc, char **argv)
{
    si_cli_model_defaults(&a->m);
    si_sampler_default_params(&a->sp);
    /* whatever no flag sets comes from [runtime] once the configuration
     * is loaded (si_cli_sampling_fill) */
    si_cli_sampling_unset(&a->sp, &a->n_predict);
    a->think = true;
    a->special = true;
    a->chat = strcmp(cmd, "chat") == 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int r = si_cli_model_opt(&a->m, cmd, argc, argv, &i);
        if (r == 0)
            r = si_cli_sampling_opt(&a->sp, cmd, argc, argv, &i);
        if (r < 0)
            return SI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage(stdout, cmd);
            return -1;
        } else if ((strcmp(s, "-p") == 0 || strcmp(s, "--prompt") == 0) && i + 1 < argc) {
            a->prompt = argv[++i];
        } else if ((strcmp(s, "-f") == 0 || strcmp(s, "--file") == 0) && i + 1 < argc) {
            a->file = argv[++i];
        } else if (strcmp(s, "--system") == 0 && i + 1 < argc) {
            a->system = argv[++i];
        } else if ((strcmp(s, "-n") == 0 || strcmp(s, "--n-predict") == 0) && i + 1 < argc) {
            if (!si_cli_parse_long(argv[++i], -1, 1L << 30, &a->n_predict)) {
                si_cli_error(cmd, "-n '%s': expected an integer >= -1", argv[i]);
                return SI_EXIT_USAGE;
            }
        } else if (strcmp(s, "--chat") == 0) {
            a->chat = true;
        } else if (strcmp(s, "--no-think") == 0) {
            a->think = false;
        } else if (strcmp(s, "--no-special") == 0) {
            a->special = false;
        } else {
            si_cli_error(cmd, "unknown or incomplete option '%s' (see --help)", s);
            return SI_EXIT_USAGE;
        }
    }
    return 0;
}

typedef struct session {
    si_engine    *e;
    si_config    *cfg;
    si_tokenizer *tok;
    si_sampler   *smp;
    stream_ctx    out;
} session;

static void session_close(session *s)
{
    free(s->out.buf);
    si_sampler_free(s->smp);
    si_tokenizer_free(s->tok);
    si_engine_close(s->e);
    si_config_free(s->cfg);
}

static int session_open(session *s, run_args *a, const char *cmd)
{
    memset(s, 0, sizeof *s);
    s->e = si_cli_engine_open(&a->m, cmd, &s->cfg);
    if (s->e == NULL)
        return SI_EXIT_FAIL;
    si_cli_sampling_fill(&a->sp, &a->n_predict, s->cfg);
    si_err err = { { 0 } };
    si_model_info info;
    si_engine_info(s->e, &info);
    if (si_tokenizer_from_gguf(si_engine_gguf(s->e), &s->tok, &err) != SI_OK ||
        si_sampler_new(&a->sp, info.n_vocab, &s->smp, &err) != SI_OK) {
        si_cli_error(cmd, "%s", err.msg);
        session_close(s);
        return SI_EXIT_FAIL;
    }
    s->out.cap = si_tokenizer_max_token_bytes(s->tok) + 8;
    s->out.buf = malloc(s->out.cap);
    if (s->out.buf == NULL) {
        session_close(s);
        return SI_EXIT_FAIL;
    }
    if (a->m.verbose)
        fprintf(stderr, "sparkinfer: model %s (plugin %s) on backend %s, context %u\n",
                a->m.model, si_engine_model_plugin(s->e), si_engine_backend_name(s->e), info.n_ctx);
    return SI_EXIT_OK;
}

static int cmd_run(run_args *a)
{
    char *file_text = NULL;
    const char *prompt = a->prompt;
    if (a->file != NULL) {
        if ((file_text = si_cli_read_file("run", a->file, NULL)) == NULL)
            return SI_EXIT_FAIL;
        prompt = file_text;
    }
    if (prompt == NULL) {
        si_cli_error("run", "no prompt (-p TEXT or -f FILE)");
        return SI_EXIT_USAGE;
    }
    session s;
    int rc = session_open(&s, a, "run");
    if (rc != SI_EXIT_OK) {
        free(file_text);
        return rc;
    }
    si_tok_vec v = { 0 };
    const si_cli_prompt_opts po = { .system = a->system, .chat = a->chat, .think = a->think, .special = a->special };
    int ok = si_cli_prompt_tokens(s.tok, &po, prompt, &v);
    if (ok == SI_OK && v.n == 0) {
        si_cli_error("run", "the prompt is empty");
        ok = SI_EINVAL;
    }
    if (ok == SI_OK) {
        si_detok_init(&s.out.detok, s.tok, false);
        si_gen_opts go = { .seq = 0, .n_batch = si_cli_n_batch(&a->m, s.cfg),
                           .n_predict = (int32_t)a->n_predict, .stop_at_eog = true, .ahead = true };
        si_gen_stats st;
        si_err err = { { 0 } };
        ok = si_generate(s.e, s.tok, s.smp, &go, v.ids, (uint32_t)v.n, stream_token, &s.out,
                         NULL, &st, &err);
        stream_flush(&s.out);
        if (ok != SI_OK)
            si_cli_error("run", "%s", err.msg);
        else
            print_stats(&st);
    }
    free(v.ids);
    free(file_text);
    session_close(&s);
    return ok == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}

static int cmd_chat(run_args *a)
{
    session s;
    int rc = session_open(&s, a, "chat");
    if (rc != SI_EXIT_OK)
        return rc;
    si_tok_vec v = { 0 };
    uint32_t pos = 0;
    int ok = SI_OK;
    if (a->system != NULL)
        ok = si_cli_append_turn(s.tok, &v, "system", a->system, a->special);
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t cap = 0;
    while (ok == SI_OK) {
        if (tty)
            fputs("\n> ", stderr);
        ssize_t n = getline(&line, &cap, stdin);
        if (n <= 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            break;
        if ((ok = si_cli_append_turn(s.tok, &v, "user", line, a->special)) != SI_OK ||
            (ok = si_cli_append_gen_prompt(s.tok, &v, a->think)) != SI_OK)
            break;
        si_detok_init(&s.out.detok, s.tok, false);
        si_gen_opts go = { .seq = 0, .pos0 = pos, .n_batch = si_cli_n_batch(&a->m, s.cfg),
                           .n_predict = (int32_t)a->n_predict, .stop_at_eog = true, .ahead = true,
                           .feed_stop = true };
        si_gen_stats st;
        si_err err = { { 0 } };
        ok = si_generate(s.e, s.tok, s.smp, &go, v.ids, (uint32_t)v.n, stream_token, &s.out,
                         &pos, &st, &err);
        stream_flush(&s.out);
        fputc('\n', stdout);
        if (ok != SI_OK) {
            si_cli_error("chat", "%s", err.msg);
            break;
        }
        if (a->m.verbose)
            print_stats(&st);
        /* The next prompt starts by closing the turn, so the context stays
         * ChatML: after the <|im_end|> it stopped on (fed: feed_stop) only
         * the newline; the whole close after another end of generation,
         * one not fed (a full context) or a cut answer (n_predict). */
        v.n = 0;
        const char *close = "\n<|im_end|>\n";
        if (st.stopped_eog)
            close = st.stop_fed && st.last == si_token_lookup(s.tok, "<|im_end|>") ? "\n" : "<|im_end|>\n";
        ok = si_cli_append_text(s.tok, &v, close, true);
    }
    free(line);
    free(v.ids);
    session_close(&s);
    return ok == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}

int si_cmd_run(int argc, char **argv)
{
    run_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(&a, "run", argc, argv);
    if (rc != 0)
        return rc < 0 ? SI_EXIT_OK : rc;
    return cmd_run(&a);
}

int si_cmd_chat(int argc, char **argv)
{
    run_args a;
    memset(&a, 0, sizeof a);
    int rc = parse(&a, "chat", argc, argv);
    if (rc != 0)
        return rc < 0 ? SI_EXIT_OK : rc;
    return cmd_chat(&a);
}
