/* core/cli/cli_model.h — options shared by the commands that run a model
 * (run, chat, check, score, bench) and opening the engine they describe. */
#ifndef SI_CLI_MODEL_H
#define SI_CLI_MODEL_H

#include "cli.h"
#include "engine.h"
#include "sample.h"

typedef struct si_cli_model_opts {
    si_cli_config_opts cfg;
    const char *model;        /* -m FILE                       */
    const char *backend;      /* --backend NAME                */
    long        n_ctx;        /* -c/--ctx-size, 0 = config     */
    long        n_batch;      /* -b/--batch-size, 0 = config   */
    long        threads;      /* -t/--threads, -1 = config     */
    bool        verbose;      /* -v                            */
} si_cli_model_opts;

#define SI_CLI_MODEL_HELP \
    "  -m, --model FILE        GGUF model (required)\n" \
    "  --backend NAME          backend plugin to use (default: best loaded by priority)\n" \
    "  -c, --ctx-size N        context tokens per sequence (default [runtime] n_ctx)\n" \
    "  -b, --batch-size N      prefill chunk in tokens (default [runtime] n_batch)\n" \
    "  -t, --threads N         CPU threads (default [runtime] threads; 0 = all cores)\n" \
    "  --config FILE           configuration file (default $SPARKINFER_CONFIG, then the installed one)\n" \
    "  --set SECTION.KEY=VAL   override one configuration key (repeatable)\n" \
    "  -v, --verbose           log plugin and backend details\n"

void si_cli_model_defaults(si_cli_model_opts *o);
/* 1: consumed argv[*i] (and its value); 0: not a model option; -1: bad
 * value (message printed). */
int  si_cli_model_opt(si_cli_model_opts *o, const char *cmd, int argc, char **argv, int *i);
/* Loads the configuration, applies -t/-c/-b, opens the engine.  On failure
 * prints "sparkinfer CMD: reason" and returns NULL. *cfg_out must be freed
 * with si_config_free after si_engine_close. */
si_engine *si_cli_engine_open(const si_cli_model_opts *o, const char *cmd, si_config **cfg_out);
uint32_t   si_cli_n_batch(const si_cli_model_opts *o, const si_config *cfg);
/* Appends "runtime.n_seq=N" (text in buf, which must outlive the engine's
 * opening) to o's --set list, after the user's, so that it wins: the
 * sequences a command provisions itself.  false (message printed) when the
 * list is full. */
bool       si_cli_model_set_n_seq(si_cli_model_opts *o, const char *cmd, char *buf, size_t cap, unsigned long n);

/* Sampling flags: --temp --top-k --top-p --min-p --repeat-penalty
 * --repeat-last-n --presence-penalty --frequency-penalty --seed. */
#define SI_CLI_SAMPLING_HELP \
    "  --temp T                temperature (default [runtime] temp = 1.0; 0 = greedy)\n" \
    "  --top-k K               keep the K most likely tokens (default [runtime] top_k = 20; 0 = off)\n" \
    "  --top-p P               nucleus mass (default [runtime] top_p = 0.95; 1 = off)\n" \
    "  --min-p P               drop tokens below P x the top probability ([runtime] min_p = 0)\n" \
    "  --repeat-penalty X      repetition penalty (default 1 = off)\n" \
    "  --repeat-last-n N       penalty window (default 64)\n" \
    "  --presence-penalty X    (default 0)\n" \
    "  --frequency-penalty X   (default 0)\n" \
    "  --seed S                random seed (default [runtime] seed; -1 = from the clock)\n"
int si_cli_sampling_opt(si_sampler_params *p, const char *cmd, int argc, char **argv, int *i);

/* Reads a whole file into a NUL-terminated buffer (free()); NULL with a
 * printed message on failure. */
char *si_cli_read_file(const char *cmd, const char *path, size_t *len);

#endif /* SI_CLI_MODEL_H */
