/* core/chat.h — ChatML prompt rendering for Qwen3.5/3.6 (spec §5.4).
 *
 *   <|im_start|>{role}\n{content}<|im_end|>\n            one turn
 *   <|im_start|>assistant\n<think>\n                     generation prompt, thinking on
 *   <|im_start|>assistant\n<think>\n\n</think>\n\n       generation prompt, thinking off
 *
 * Tool results (role "tool") go into a user turn, each wrapped as
 * "\n<tool_response>\n{content}\n</tool_response>", consecutive ones sharing
 * one turn, as the Qwen templates do.  Everything else is written as given:
 * rendering is text only, the caller tokenizes it with added tokens parsed
 * (SI_TOK_SPECIAL_ALL).  Tool definitions and tool-call formatting belong
 * to the model's own Jinja template and are not rendered here.
 */
#ifndef SI_CORE_CHAT_H
#define SI_CORE_CHAT_H

#include <stddef.h>

#include <sparkinfer/status.h>

typedef struct si_chat_msg {
    const char *role;      /* "system", "user", "assistant", "tool" or another single-line name */
    const char *content;   /* NUL-terminated UTF-8; NULL means empty */
} si_chat_msg;

enum si_chat_gen {
    SI_CHAT_GEN_NONE     = 0,   /* no generation prompt (e.g. a finished transcript) */
    SI_CHAT_GEN_THINK    = 1,   /* "<|im_start|>assistant\n<think>\n"                  */
    SI_CHAT_GEN_NO_THINK = 2,   /* "<|im_start|>assistant\n<think>\n\n</think>\n\n"    */
};

/* Renders msgs[0, n) into a fresh NUL-terminated string (free()); *len may
 * be NULL.  SI_EINVAL (naming the message) for a NULL, empty or multi-line
 * role, or a role holding "<|". */
int si_chat_render(const si_chat_msg *msgs, size_t n, enum si_chat_gen gen,
                   char **out, size_t *len, si_err *err);

/* For keeping a model's answer in the history without its reasoning:
 * the part after the last "</think>" with leading newlines removed, or the
 * whole text when it has no "</think>".  Points into `content`. */
const char *si_chat_strip_thinking(const char *content);

#endif /* SI_CORE_CHAT_H */
