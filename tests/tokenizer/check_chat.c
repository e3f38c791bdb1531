/* tests/tokenizer/check_chat.c — ChatML rendering (core/chat.c) with exact
 * expected strings, and the rendered prompt tokenized with the Qwen3
 * vocabulary (turn markers become single added tokens).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "tok_testutil.h"
#include "tokenizer.h"

static char *render(const si_chat_msg *m, size_t n, enum si_chat_gen gen)
{
    char *out = NULL;
    size_t len = 0;
    si_err err;
    ck_assert_msg(si_chat_render(m, n, gen, &out, &len, &err) == SI_OK, "%s", err.msg);
    ck_assert_uint_eq(len, strlen(out));
    return out;
}

START_TEST(test_turns)
{
    const si_chat_msg m[] = {
        { "system", "You are helpful." },
        { "user", "Hi!" },
        { "assistant", "Hello." },
        { "user", "2+2?" },
    };
    char *s = render(m, 4, SI_CHAT_GEN_THINK);
    ck_assert_str_eq(s,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n");
    free(s);
    s = render(m + 1, 1, SI_CHAT_GEN_NO_THINK);
    ck_assert_str_eq(s, "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(s);
    s = render(m, 2, SI_CHAT_GEN_NONE);
    ck_assert_str_eq(s, "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
    free(s);
    s = render(NULL, 0, SI_CHAT_GEN_NONE);
    ck_assert_str_eq(s, "");
    free(s);
    const si_chat_msg empty[] = { { "user", NULL } };
    s = render(empty, 1, SI_CHAT_GEN_NONE);
    ck_assert_str_eq(s, "<|im_start|>user\n<|im_end|>\n");
    free(s);
}
END_TEST

START_TEST(test_tool_results)
{
    const si_chat_msg m[] = {
        { "user", "Weather?" },
        { "assistant", "<tool_call>\n<function=get>\n</function>\n</tool_call>" },
        { "tool", "sunny" },
        { "tool", "20C" },
        { "assistant", "Sunny, 20C." },
        { "tool", "x" },
    };
    char *s = render(m, 6, SI_CHAT_GEN_NONE);
    ck_assert_str_eq(s,
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n<function=get>\n</function>\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nSunny, 20C.<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n");
    free(s);
}
END_TEST

START_TEST(test_bad_roles)
{
    char *out = (char *)1;
    si_err err;
    const si_chat_msg a[] = { { "user", "x" }, { "us\ner", "y" } };
    ck_assert_int_eq(si_chat_render(a, 2, SI_CHAT_GEN_NONE, &out, NULL, &err), SI_EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(err.msg, "message 1"));
    const si_chat_msg b[] = { { "", "x" } };
    ck_assert_int_eq(si_chat_render(b, 1, SI_CHAT_GEN_NONE, &out, NULL, &err), SI_EINVAL);
    const si_chat_msg c[] = { { NULL, "x" } };
    ck_assert_int_eq(si_chat_render(c, 1, SI_CHAT_GEN_NONE, &out, NULL, &err), SI_EINVAL);
    const si_chat_msg d[] = { { "user<|im_end|>", "x" } };
    ck_assert_int_eq(si_chat_render(d, 1, SI_CHAT_GEN_NONE, &out, NULL, &err), SI_EINVAL);
    const si_chat_msg e[] = { { "user", "x" } };
    ck_assert_int_eq(si_chat_render(e, 1, (enum si_chat_gen)9, &out, NULL, &err), SI_EINVAL);
}
END_TEST

START_TEST(test_strip_thinking)
{
    ck_assert_str_eq(si_chat_strip_thinking("<think>\nhmm\n</think>\n\nAnswer."), "Answer.");
    ck_assert_str_eq(si_chat_strip_thinking("a</think>b</think>\nc"), "c");
    ck_assert_str_eq(si_chat_strip_thinking("no reasoning"), "no reasoning");
    ck_assert_str_eq(si_chat_strip_thinking("</think>"), "");
}
END_TEST

/* The rendered prompt, tokenized with added tokens parsed: every marker is
 * one token, and the text between them is ordinary BPE. */
START_TEST(test_tokenized_prompt)
{
    tu_vocab v;
    ck_assert_int_eq(tu_load_qwen3(&v), 0);
    si_tok_spec spec = tu_spec(&v, "qwen35", false);
    si_tokenizer *t;
    si_err err;
    ck_assert_msg(si_tokenizer_new(&spec, &t, &err) == SI_OK, "%s", err.msg);
    const si_chat_msg m[] = { { "user", "Hello" } };
    char *s = render(m, 1, SI_CHAT_GEN_NO_THINK);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(si_tokenize(t, s, strlen(s), SI_TOK_SPECIAL_ALL, &ids, &n, &err), SI_OK);
    /* <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n <think> \n\n </think> \n\n */
    const int32_t want[] = { 151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198,
                             151667, 271, 151668, 271 };
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(ids[i], want[i]);
    free(ids);
    free(s);
    si_tokenizer_free(t);
    tu_free_vocab(&v);
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_turns);
    tcase_add_test(tc, test_tool_results);
    tcase_add_test(tc, test_bad_roles);
    tcase_add_test(tc, test_strip_thinking);
    tcase_add_test(tc, test_tokenized_prompt);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(chat_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
