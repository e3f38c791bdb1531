/* core/cli/cmd_tokenize.c — `sparkinfer tokenize`: text to token ids with
 * their pieces, like llama.cpp's llama-tokenize.  Needs only the GGUF's
 * tokenizer section: no plugin is loaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_model.h"
#include "gguf.h"
#include "tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: sparkinfer tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--ids-only] [--no-special]\n\n"
               "Prints one line per token: id -> 'piece'.\n\n"
               "  -m, --model FILE    GGUF with a tokenizer section (tokenizer.ggml.*)\n"
               "  -p, --prompt TEXT   text to tokenize\n"
               "  -f, --file FILE     read the text from FILE\n"
               "  --ids-only          print only the ids, as [1, 2, 3]\n"
               "  --no-special        treat special-token text as plain text\n");
}

/* Writes a piece with control bytes escaped so each token stays on its line. */
static void print_piece(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

int si_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool ids_only = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return SI_EXIT_OK;
        } else if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) && i + 1 < argc) {
            model = argv[++i];
        } else if ((strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) && i + 1 < argc) {
            prompt = argv[++i];
        } else if ((strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) && i + 1 < argc) {
            file = argv[++i];
        } else if (strcmp(a, "--ids-only") == 0) {
            ids_only = true;
        } else if (strcmp(a, "--no-special") == 0) {
            special = false;
        } else {
            si_cli_error("tokenize", "unknown or incomplete option '%s' (see --help)", a);
            return SI_EXIT_USAGE;
        }
    }
    if (model == NULL || (prompt == NULL) == (file == NULL)) {
        si_cli_error("tokenize", "need -m MODEL and exactly one of -p TEXT / -f FILE");
        return SI_EXIT_USAGE;
    }
    char *text = NULL;
    size_t len = prompt ? strlen(prompt) : 0;
    if (file != NULL && (text = si_cli_read_file("tokenize", file, &len)) == NULL)
        return SI_EXIT_FAIL;

    si_err err = { { 0 } };
    si_gguf *g = NULL;
    si_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = si_gguf_open(model, &g, &err);
    if (rc == SI_OK)
        rc = si_tokenizer_from_gguf(g, &tok, &err);
    if (rc == SI_OK)
        rc = si_tokenize(tok, text ? text : prompt, len,
                         special ? SI_TOK_SPECIAL_ALL : SI_TOK_SPECIAL_USER, &ids, &n, &err);
    if (rc != SI_OK) {
        si_cli_error("tokenize", "%s", err.msg);
    } else if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? ", " : "", ids[i]);
        puts("]");
    } else {
        for (size_t i = 0; i < n; i++) {
            const char *p = NULL;
            size_t pl = 0;
            si_token_bytes(tok, ids[i], &p, &pl);
            printf("%6d -> '", ids[i]);
            print_piece(p, pl);
            puts("'");
        }
    }
    free(ids);
    free(text);
    si_tokenizer_free(tok);
    si_gguf_close(g);
    return rc == SI_OK ? SI_EXIT_OK : SI_EXIT_FAIL;
}
