/* core/cli/cmd_convert.c — `sparkinfer convert`: Hugging Face Qwen3.5 /
 * Qwen3.5-MoE checkpoint to GGUF (the work is in core/convert/). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "convert/convert.h"
#include "quant.h"

#define CMD "convert"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: sparkinfer convert HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0|q4_k_m]\n"
        "                          [--name NAME] [--quiet]\n\n"
        "Converts a Hugging Face Qwen3.5 (Qwen3_5ForCausalLM / ...ForConditionalGeneration)\n"
        "or Qwen3.5-MoE / Qwen3.6 checkpoint to GGUF with llama.cpp's conventions\n"
        "(arch qwen35 / qwen35moe): HF_DIR holds config.json, model.safetensors (or\n"
        "shards with model.safetensors.index.json), tokenizer.json and optionally\n"
        "tokenizer_config.json.  Vision and MTP tensors are skipped.\n\n"
        "  -o, --output  the GGUF to write (written as OUT.part, then renamed)\n"
        "  --type        f32 (default), f16, bf16, q8_0 or q4_k_m (llama-quantize's\n"
        "                Q4_K_M rule; tensors whose rows are not a multiple of 256\n"
        "                use Q8_0, or F16 when not a multiple of 32).  Norms, 1-D\n"
        "                tensors, ssm_conv1d and the MoE routers stay F32.\n"
        "  --name        general.name (default: the folder's name)\n"
        "  --quiet       no progress line on a terminal\n");
}

/* One status line, rewritten in place (terminal only). */
static void progress(void *ud, uint64_t done, uint64_t total, const char *tensor,
                     uint64_t bytes_done, uint64_t bytes_total)
{
    (void)ud;
    double pct = bytes_total ? 100.0 * (double)bytes_done / (double)bytes_total : 100.0;
    if (done == total)
        fprintf(stderr, "\r\033[K");
    else
        fprintf(stderr, "\r\033[K[%" PRIu64 "/%" PRIu64 "] %5.1f%%  %s", done + 1, total,
                pct, tensor);
    fflush(stderr);
}

static void print_summary(const char *out, const si_convert_opts *o, const si_convert_stats *st)
{
    printf("%s: %s, %s, %" PRIu64 " tensors (", out, st->arch, si_convert_ftype_name(o->ftype),
           st->n_tensors);
    bool first = true;
    for (uint32_t t = 0; t < SI_TYPE_COUNT; t++) {
        if (st->n_by_type[t] == 0)
            continue;
        printf("%s%" PRIu64 " %s", first ? "" : ", ", st->n_by_type[t], si_type_name(t));
        first = false;
    }
    printf("), %.2f MiB of tensor data\n", (double)st->tensor_bytes / (1024.0 * 1024.0));
    printf("vocabulary: %" PRIu32 " tokens, padded to %" PRIu32 " embedding rows\n",
           st->n_vocab_tokenizer, st->n_vocab);
    if (strcmp(st->arch, "qwen35moe") == 0)
        printf("experts: %s in the checkpoint\n",
               st->experts_fused ? "fused (gate_up_proj)" : "per-expert tensors");
}

int si_cmd_convert(int argc, char **argv)
{
    si_convert_opts o = { .ftype = SI_CONVERT_F32 };
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return SI_EXIT_OK;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 ||
                   strcmp(a, "--type") == 0 || strcmp(a, "--name") == 0) {
            if (i + 1 >= argc) {
                si_cli_error(CMD, "%s needs a value", a);
                return SI_EXIT_USAGE;
            }
            const char *v = argv[++i];
            if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
                o.out_path = v;
            } else if (strcmp(a, "--name") == 0) {
                o.name = v;
            } else if ((o.ftype = si_convert_ftype_from_name(v)) < 0) {
                si_cli_error(CMD, "--type '%s': expected f32, f16, bf16, q8_0 or q4_k_m", v);
                return SI_EXIT_USAGE;
            }
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            quiet = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            si_cli_error(CMD, "unknown option '%s' (see --help)", a);
            return SI_EXIT_USAGE;
        } else if (o.hf_dir == NULL) {
            o.hf_dir = a;
        } else {
            si_cli_error(CMD, "more than one input folder ('%s' and '%s')", o.hf_dir, a);
            return SI_EXIT_USAGE;
        }
    }
    if (o.hf_dir == NULL || o.out_path == NULL) {
        usage(stderr);
        return SI_EXIT_USAGE;
    }
    if (!quiet && isatty(fileno(stderr)))
        o.progress = progress;

    si_convert_stats st;
    si_err err = { "" };
    int rc = si_convert_hf(&o, &st, &err);
    if (rc != SI_OK) {
        si_cli_error(CMD, "%s", err.msg);
        return SI_EXIT_FAIL;
    }
    print_summary(o.out_path, &o, &st);
    return SI_EXIT_OK;
}
