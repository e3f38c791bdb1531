/* core/cli/cli_prompt.h — a prompt's tokens as the generating commands
 * (run, chat, batch) build them, and their [runtime] sampling defaults.
 *
 * Added tokens are parsed in template text always and in the user's text
 * only when `special` (--no-special turns it off). */
#ifndef SI_CLI_PROMPT_H
#define SI_CLI_PROMPT_H

#include <stdbool.h>

#include "config.h"
#include "sample.h"
#include "tokenizer.h"

typedef struct si_cli_prompt_opts {
    const char *system;   /* system message (chat only), NULL = none */
    bool        chat;     /* a ChatML user turn and the generation prompt */
    bool        think;    /* the generation prompt opens a <think> block */
    bool        special;  /* parse added tokens in the user's text */
} si_cli_prompt_opts;

/* Appends to v; a tokenizer error is printed ("sparkinfer: tokenize: ...")
 * and returned. */
int si_cli_append_text(const si_tokenizer *tok, si_tok_vec *v, const char *text, bool special);
int si_cli_append_turn(const si_tokenizer *tok, si_tok_vec *v, const char *role, const char *content,
                       bool special);
int si_cli_append_gen_prompt(const si_tokenizer *tok, si_tok_vec *v, bool think);
/* The whole prompt for `text`: plain, or (chat) the system turn, the user
 * turn and the generation prompt. */
int si_cli_prompt_tokens(const si_tokenizer *tok, const si_cli_prompt_opts *o, const char *text, si_tok_vec *v);

/* Sentinels for "no flag given" in sp and *n_predict, then, once the
 * configuration is loaded, the [runtime] values for whatever is still
 * unset (seed -1 there: from the clock). */
void si_cli_sampling_unset(si_sampler_params *sp, long *n_predict);
void si_cli_sampling_fill(si_sampler_params *sp, long *n_predict, const si_config *cfg);

#endif /* SI_CLI_PROMPT_H */
