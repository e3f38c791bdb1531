/* core/hf_vocab_minimal.c — si_hf_vocab_minimal(): a small but genuine
 * byte-level BPE vocabulary for synthetic models.
 *
 * The merges are LEARNT here, by running plain BPE training over a short
 * English text written for this file, so the result has the same structure
 * as a real tokenizer: every merge joins two existing tokens, the merged
 * string is itself a token, and merge order is training order.  Ids 0..255
 * are the byte symbols in GPT-2 bytes_to_unicode order (as in Qwen's vocab).
 */
#include <stdlib.h>
#include <string.h>

#include "hf_vocab.h"

#define MAX_MERGES 400
#define MAX_WORDS  1024
#define MAX_WLEN   32

static const char corpus[] =
    "The model reads a sequence of tokens and predicts the next one. Each layer "
    "mixes information between positions and then transforms every position on "
    "its own. Some layers use attention over all earlier tokens, while the other "
    "layers keep a small recurrent state that is updated with every new token. "
    "The state has a fixed size, so the cost of each step does not grow with the "
    "length of the text. This is the reason why these hybrid models can handle "
    "very long inputs on a single machine.\n"
    "When we test an inference engine we want files that look exactly like the "
    "real ones: the same names, the same shapes and the same types for every "
    "tensor. The values themselves are random, but they are chosen at sensible "
    "scales so that the numbers stay finite through the whole network. A test "
    "then compares two implementations of the same operation on the same input "
    "and checks that the results agree within a small tolerance.\n"
    "There are many things that can go wrong. A kernel may read the wrong row, "
    "a scale may be applied twice, or a state may not be reset between two "
    "requests. Good tests make such errors visible quickly, and they tell the "
    "reader which part of the computation is wrong and where to look next.\n"
    "In the morning the team writes down what they want to build, and in the "
    "evening they run the tests again. If something fails, they read the message, "
    "find the cause and write a fix. Over time the project becomes more stable "
    "and more people start to use it for their own work. They share their "
    "results, report problems and suggest new features, and the cycle continues.\n"
    "Numbers like one, two, three and four appear often in such text, as do "
    "words like first, second, third, last, before, after, other, every, under, "
    "over, within, between, there, where, which, while, these, those, should, "
    "would, could, question, answer, information, position, computation, "
    "operation, implementation and tolerance.\n"
    "A small garden behind the old house has apple trees, a narrow path of "
    "stones and a bench where people sit in the afternoon. Children play with a "
    "ball, birds sing in the branches, and somebody always brings bread, cheese "
    "and fresh fruit from the market in the village. Later the light changes, "
    "the wind becomes colder and everybody walks home along the river.\n"
    "Writing clear code is mostly about making decisions visible: name things "
    "for what they mean, keep functions short, check every result, and explain "
    "why something is done rather than what is done. Careful reviews, simple "
    "interfaces and honest measurements help much more than clever tricks.\n";

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in byte order.  Token ids list the printable
 * bytes first, then the remapped ones, as Qwen's vocabulary does. */
static bool byte_is_printable(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

static void utf8_put(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {   /* every code point here is < 0x800 */
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

typedef struct word {
    int      sym[MAX_WLEN];
    int      n;
    unsigned freq;
} word;

/* Splits the corpus like a (much simplified) GPT-2 pre-tokenizer: an
 * optional space followed by letters, or any other single character. */
static int split_words(const int *byte_id, word *w, int max_words)
{
    int nw = 0;
    const unsigned char *p = (const unsigned char *)corpus;
    while (*p) {
        const unsigned char *s = p;
        int len = 0;
        if (*p == ' ' && ((p[1] | 32) >= 'a' && (p[1] | 32) <= 'z'))
            p++;
        while (((*p | 32) >= 'a' && (*p | 32) <= 'z'))
            p++;
        if (p == s)
            p++;
        len = (int)(p - s);
        if (len > MAX_WLEN)
            len = MAX_WLEN;
        int k;
        for (k = 0; k < nw; k++) {
            if (w[k].n != len)
                continue;
            int j = 0;
            while (j < len && w[k].sym[j] == byte_id[s[j]])
                j++;
            if (j == len)
                break;
        }
        if (k == nw) {
            if (nw == max_words)
                continue;
            w[nw].n = len;
            w[nw].freq = 0;
            for (int j = 0; j < len; j++)
                w[nw].sym[j] = byte_id[s[j]];
            nw++;
        }
        w[k].freq++;
    }
    return nw;
}

static char *concat3(const char *a, const char *sep, const char *b)
{
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *s = malloc(la + ls + lb + 1);
    if (s != NULL) {
        memcpy(s, a, la);
        memcpy(s + la, sep, ls);
        memcpy(s + la + ls, b, lb + 1);
    }
    return s;
}

/* BPE training: repeatedly merge the most frequent adjacent pair. */
static int train(si_hf_vocab *v, word *w, int nw, si_err *err)
{
    const int nt_max = 256 + MAX_MERGES;
    unsigned *cnt = calloc((size_t)nt_max * nt_max, sizeof *cnt);   /* [a][b] */
    if (cnt == NULL)
        return si_err_set(err, SI_ENOMEM, "minimal vocabulary: out of memory");
    int rc = SI_OK;
    while (v->n_merges < MAX_MERGES) {
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++)
                cnt[w[k].sym[j] * nt_max + w[k].sym[j + 1]] += w[k].freq;
        unsigned best = 0;
        int ba = -1, bb = -1;
        for (int k = 0; k < nw; k++) {
            for (int j = 0; j + 1 < w[k].n; j++) {
                int a = w[k].sym[j], b = w[k].sym[j + 1];
                unsigned c = cnt[a * nt_max + b];
                /* ties: smaller (a, b) wins, so the result is deterministic */
                if (c > best || (c == best && c > 0 && (a < ba || (a == ba && b < bb)))) {
                    best = c;
                    ba = a;
                    bb = b;
                }
            }
        }
        for (int k = 0; k < nw; k++)
            for (int j = 0; j + 1 < w[k].n; j++)
                cnt[w[k].sym[j] * nt_max + w[k].sym[j + 1]] = 0;
        if (best < 2)
            break;

        char *merge = concat3(v->tokens[ba], " ", v->tokens[bb]);
        char *text = concat3(v->tokens[ba], "", v->tokens[bb]);
        if (merge == NULL || text == NULL) {
            free(merge);
            free(text);
            rc = si_err_set(err, SI_ENOMEM, "minimal vocabulary: out of memory");
            break;
        }
        v->merges[v->n_merges++] = merge;
        /* Two different pairs can spell the same string: reuse its id. */
        int id = si_hf_vocab_find(v, text);
        if (id >= 0) {
            free(text);
        } else {
            id = (int)v->n_tokens++;
            v->tokens[id] = text;
            v->token_type[id] = SI_TOKEN_NORMAL;
        }
        for (int k = 0; k < nw; k++) {
            int o = 0;
            for (int j = 0; j < w[k].n; j++) {
                if (j + 1 < w[k].n && w[k].sym[j] == ba && w[k].sym[j + 1] == bb) {
                    w[k].sym[o++] = id;
                    j++;
                } else {
                    w[k].sym[o++] = w[k].sym[j];
                }
            }
            w[k].n = o;
        }
    }
    free(cnt);
    return rc;
}

static const char chatml_template[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}";

int si_hf_vocab_minimal(si_hf_vocab *out, si_err *err)
{
    static const struct { const char *text; int32_t type; } specials[] = {
        { "<|endoftext|>", SI_TOKEN_CONTROL },
        { "<|im_start|>",  SI_TOKEN_CONTROL },
        { "<|im_end|>",    SI_TOKEN_CONTROL },
        { "<think>",       SI_TOKEN_USER_DEFINED },
        { "</think>",      SI_TOKEN_USER_DEFINED },
    };
    const uint32_t n_special = sizeof specials / sizeof specials[0];
    const uint32_t cap = 256 + MAX_MERGES + n_special;

    if (out == NULL)
        return si_err_set(err, SI_EINVAL, "si_hf_vocab_minimal: NULL argument");
    memset(out, 0, sizeof *out);
    out->bos_id = out->eos_id = out->pad_id = -1;
    si_hf_vocab *v = out;
    v->tokens = calloc(cap, sizeof *v->tokens);
    v->token_type = calloc(cap, sizeof *v->token_type);
    v->merges = calloc(MAX_MERGES, sizeof *v->merges);
    word *w = calloc(MAX_WORDS, sizeof *w);
    int rc = SI_OK;
    if (v->tokens == NULL || v->token_type == NULL || v->merges == NULL || w == NULL) {
        rc = si_err_set(err, SI_ENOMEM, "minimal vocabulary: out of memory");
        goto done;
    }

    int byte_id[256];
    unsigned next_cp = 256;
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned b = 0; b < 256; b++) {
            if (byte_is_printable(b) != (pass == 0))
                continue;
            char buf[4];
            utf8_put(buf, pass == 0 ? b : next_cp++);
            byte_id[b] = (int)v->n_tokens;
            if ((v->tokens[v->n_tokens] = concat3(buf, "", "")) == NULL) {
                rc = si_err_set(err, SI_ENOMEM, "minimal vocabulary: out of memory");
                goto done;
            }
            v->token_type[v->n_tokens++] = SI_TOKEN_NORMAL;
        }
    }

    int nw = split_words(byte_id, w, MAX_WORDS);
    if ((rc = train(v, w, nw, err)) != SI_OK)
        goto done;

    for (uint32_t i = 0; i < n_special; i++) {
        if ((v->tokens[v->n_tokens] = concat3(specials[i].text, "", "")) == NULL) {
            rc = si_err_set(err, SI_ENOMEM, "minimal vocabulary: out of memory");
            goto done;
        }
        v->token_type[v->n_tokens++] = specials[i].type;
    }
    v->bos_id = v->pad_id = si_hf_vocab_find(v, "<|endoftext|>");
    v->eos_id = si_hf_vocab_find(v, "<|im_end|>");
    v->add_bos = false;
    v->pre = concat3("qwen35", "", "");
    v->chat_template = concat3(chatml_template, "", "");
    if (v->pre == NULL || v->chat_template == NULL)
        rc = si_err_set(err, SI_ENOMEM, "minimal vocabulary: out of memory");
done:
    free(w);
    if (rc != SI_OK)
        si_hf_vocab_free(v);
    return rc;
}
