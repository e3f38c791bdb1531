/* core/chat.c — ChatML rendering (see chat.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

typedef struct sbuf {
    char  *s;
    size_t n, cap;
    bool   oom;
} sbuf;

static void put(sbuf *b, const char *s)
{
    size_t k = strlen(s);
    if (b->oom)
        return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + k + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

static bool is_tool(const si_chat_msg *m)
{
    return strcmp(m->role, "tool") == 0;
}

int si_chat_render(const si_chat_msg *msgs, size_t n, enum si_chat_gen gen,
                   char **out, size_t *len, si_err *err)
{
    *out = NULL;
    if (gen != SI_CHAT_GEN_NONE && gen != SI_CHAT_GEN_THINK && gen != SI_CHAT_GEN_NO_THINK)
        return si_err_set(err, SI_EINVAL, "chat: bad generation-prompt mode %d", (int)gen);
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        /* The role sits between <|im_start|> and a newline: a newline or an
         * added-token marker in it would forge turn structure. */
        if (r == NULL || r[0] == '\0' || strchr(r, '\n') || strchr(r, '\r') || strstr(r, "<|"))
            return si_err_set(err, SI_EINVAL, "chat: message %zu: bad role '%s'", i, r ? r : "(null)");
    }
    sbuf b = { 0 };
    put(&b, "");   /* an empty conversation still gives a valid string */
    for (size_t i = 0; i < n; i++) {
        const si_chat_msg *m = &msgs[i];
        const char *content = m->content ? m->content : "";
        if (is_tool(m)) {
            if (i == 0 || !is_tool(&msgs[i - 1]))
                put(&b, "<|im_start|>user");
            put(&b, "\n<tool_response>\n");
            put(&b, content);
            put(&b, "\n</tool_response>");
            if (i + 1 == n || !is_tool(&msgs[i + 1]))
                put(&b, "<|im_end|>\n");
            continue;
        }
        put(&b, "<|im_start|>");
        put(&b, m->role);
        put(&b, "\n");
        put(&b, content);
        put(&b, "<|im_end|>\n");
    }
    if (gen == SI_CHAT_GEN_THINK)
        put(&b, "<|im_start|>assistant\n<think>\n");
    else if (gen == SI_CHAT_GEN_NO_THINK)
        put(&b, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    if (b.oom) {
        free(b.s);
        return si_err_set(err, SI_ENOMEM, "chat: out of memory rendering %zu messages", n);
    }
    *out = b.s;
    if (len != NULL)
        *len = b.n;
    return SI_OK;
}

const char *si_chat_strip_thinking(const char *content)
{
    const char *p = content, *hit = NULL;
    while ((p = strstr(p, "</think>")) != NULL) {
        hit = p;
        p += 8;
    }
    if (hit == NULL)
        return content;
    hit += 8;
    while (*hit == '\n')
        hit++;
    return hit;
}
