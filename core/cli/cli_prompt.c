/* core/cli/cli_prompt.c — prompt tokens and sampling defaults of the
 * generating commands (cli_prompt.h). */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli_prompt.h"

int si_cli_append_text(const si_tokenizer *tok, si_tok_vec *v, const char *text, bool special)
{
    si_err err = { { 0 } };
    int rc = si_tokenize_append(tok, text, strlen(text), special ? SI_TOK_SPECIAL_ALL : SI_TOK_SPECIAL_USER, v,
                                &err);
    if (rc != SI_OK)
        fprintf(stderr, "sparkinfer: tokenize: %s\n", err.msg);
    return rc;
}

/* User text goes between template pieces; the template's own special
 * tokens are parsed, the user's text only as chosen by --no-special. */
int si_cli_append_turn(const si_tokenizer *tok, si_tok_vec *v, const char *role, const char *content,
                       bool special)
{
    char head[64];
    snprintf(head, sizeof head, "<|im_start|>%s\n", role);
    if (si_cli_append_text(tok, v, head, true) != SI_OK || si_cli_append_text(tok, v, content, special) != SI_OK)
        return SI_EINVAL;
    return si_cli_append_text(tok, v, "<|im_end|>\n", true);
}

int si_cli_append_gen_prompt(const si_tokenizer *tok, si_tok_vec *v, bool think)
{
    return si_cli_append_text(tok, v, think ? "<|im_start|>assistant\n<think>\n"
                                            : "<|im_start|>assistant\n<think>\n\n</think>\n\n", true);
}

int si_cli_prompt_tokens(const si_tokenizer *tok, const si_cli_prompt_opts *o, const char *text, si_tok_vec *v)
{
    if (!o->chat)
        return si_cli_append_text(tok, v, text, o->special);
    int rc = SI_OK;
    if (o->system != NULL)
        rc = si_cli_append_turn(tok, v, "system", o->system, o->special);
    if (rc == SI_OK)
        rc = si_cli_append_turn(tok, v, "user", text, o->special);
    if (rc == SI_OK)
        rc = si_cli_append_gen_prompt(tok, v, o->think);
    return rc;
}

void si_cli_sampling_unset(si_sampler_params *sp, long *n_predict)
{
    sp->temperature = -1.0f;
    sp->top_k = -1;
    sp->top_p = -1.0f;
    sp->min_p = -1.0f;
    sp->seed = UINT64_MAX;
    *n_predict = LONG_MIN;
}

void si_cli_sampling_fill(si_sampler_params *sp, long *n_predict, const si_config *cfg)
{
    if (sp->temperature < 0.0f)
        sp->temperature = (float)si_config_get_double(cfg, "runtime", "temp", 1.0);
    if (sp->top_k < 0)
        sp->top_k = (int32_t)si_config_get_long(cfg, "runtime", "top_k", 20);
    if (sp->top_p < 0.0f)
        sp->top_p = (float)si_config_get_double(cfg, "runtime", "top_p", 0.95);
    if (sp->min_p < 0.0f)
        sp->min_p = (float)si_config_get_double(cfg, "runtime", "min_p", 0.0);
    if (sp->seed == UINT64_MAX) {
        long seed = si_config_get_long(cfg, "runtime", "seed", -1);
        sp->seed = seed >= 0 ? (uint64_t)seed : (uint64_t)time(NULL);
    }
    if (*n_predict == LONG_MIN)
        *n_predict = si_config_get_long(cfg, "runtime", "n_predict", 256);
}
