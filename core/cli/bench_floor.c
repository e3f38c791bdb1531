/* core/cli/bench_floor.c — see bench_floor.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_floor.h"

static uint32_t arch_u32(const si_gguf *g, const char *arch, const char *key)
{
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint32_t v = 0;
    if (si_gguf_get_u32(g, k, &v, NULL) == SI_OK)
        return v;
    /* per-layer arrays (Ollama's head_count_kv): the largest entry */
    const si_gguf_value *a = si_gguf_get(g, k);
    si_gguf_value e;
    for (uint64_t i = 0; a != NULL && si_gguf_arr_get(a, i, &e) == SI_OK; i++)
        if ((e.type == SI_GGUF_U32 || e.type == SI_GGUF_I32) && e.v.u > v && e.v.u < 0x100000000ull)
            v = (uint32_t)e.v.u;
    return v;
}

void si_floor_model_of(const si_gguf *g, double kv_elem, si_floor_model *out)
{
    memset(out, 0, sizeof *out);
    si_str arch_s = { 0 };
    if (si_gguf_get_str(g, "general.architecture", &arch_s, NULL) != SI_OK || arch_s.len >= 64)
        return;
    char arch[64];
    memcpy(arch, arch_s.ptr, arch_s.len);
    arch[arch_s.len] = '\0';
    bool tied = si_gguf_tensor(g, "output.weight") == NULL;
    uint32_t n_attn = 0, n_gdn = 0;
    for (uint64_t i = 0; i < si_gguf_n_tensors(g); i++) {
        const si_tensor_info *t = si_gguf_tensor_at(g, i);
        const char *dot = strrchr(t->name, '.');
        size_t base = dot ? (size_t)(dot - t->name) : strlen(t->name);
        if (strcmp(t->name, "token_embd.weight") == 0) {
            if (tied)
                out->w_dense += (double)t->nbytes;
            else
                out->embd_row = (double)t->nbytes / (double)(t->ne[1] > 0 ? t->ne[1] : 1);
        } else if (base >= 5 && memcmp(t->name + base - 5, "_exps", 5) == 0) {
            out->w_experts += (double)t->nbytes;
        } else {
            out->w_dense += (double)t->nbytes;
        }
        if (base >= 7 && memcmp(t->name + base - 7, ".attn_k", 7) == 0)
            n_attn++;
        if (base >= 6 && memcmp(t->name + base - 6, ".ssm_a", 6) == 0)
            n_gdn++;
    }
    out->n_expert = arch_u32(g, arch, "expert_count");
    out->n_used = arch_u32(g, arch, "expert_used_count");
    double n_kv = arch_u32(g, arch, "attention.head_count_kv"), hd = arch_u32(g, arch, "attention.key_length");
    out->kv_per_pos = (double)n_attn * 2.0 * n_kv * hd * kv_elem;
    double hv = arch_u32(g, arch, "ssm.time_step_rank"), hk = arch_u32(g, arch, "ssm.group_count");
    double dk = arch_u32(g, arch, "ssm.state_size"), inner = arch_u32(g, arch, "ssm.inner_size");
    double ck = arch_u32(g, arch, "ssm.conv_kernel");
    double dv = hv > 0 ? inner / hv : 0;
    double conv_dim = 2.0 * hk * dk + inner;
    out->state_per_seq = 2.0 * (double)n_gdn * 4.0 * (hv * dv * dk + conv_dim * (ck > 1 ? ck - 1 : 0));
    out->ok = out->w_dense > 0;
}

double si_floor_bytes(const si_floor_model *f, uint32_t D, uint32_t B)
{
    double touched = 1.0;
    if (f->n_expert > 0 && f->n_used > 0 && f->n_used <= f->n_expert)
        touched = 1.0 - pow(1.0 - (double)f->n_used / (double)f->n_expert, (double)B);
    return f->w_dense + f->w_experts * touched + f->embd_row * B + (f->kv_per_pos * D + f->state_per_seq) * B;
}
