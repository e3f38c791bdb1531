/* core/cli/mkmodel_presets.c — the model shapes, per-tensor quant types and
 * metadata of `sparkinfer mkmodel` (spec qwen35-gguf.md §1.2, §2.2-§2.8).
 *
 * Quant rules:
 *  - Never quantised (always F32): 1-D tensors, *_norm.weight, ssm_conv1d,
 *    ssm_a, ssm_dt.bias, the router ffn_gate_inp and ffn_gate_inp_shexp
 *    (what llama.cpp's converter forces and llama-quantize skips).
 *  - f32 / f16 / q8_0: every other weight gets that type.
 *  - q4_k_m: llama-quantize's standard rule: Q4_K by default; output Q6_K;
 *    attn_v / attn_qkv (one shared counter = layer index) and every
 *    ffn_down* (ffn_down, ffn_down_exps, ffn_down_shexp: llama.cpp matches
 *    them by the "ffn_down" substring) are Q6_K where use_more_bits(il, n).
 *  - ud-q4_k_m: Unsloth's 35B-A3B mix as far as it is known (§2.8): Q8_0 for
 *    attn_q, attn_output, attn_qkv, attn_gate, ssm_out and the shared
 *    expert; Q4_K for ffn_gate_exps/ffn_up_exps; Q5_K for ffn_down_exps.
 *    Our choices for the UNCONFIRMED ones: attn_k, attn_v, ssm_alpha and
 *    ssm_beta Q8_0 (the mix keeps every attention/GDN projection at 8 bits),
 *    token_embd Q4_K and output Q6_K (the standard rule), router F32 (the
 *    F32 count of 301/733 reported for 35B files needs it).  On the dense
 *    arch, ffn_gate/ffn_up follow the experts (Q4_K) and ffn_down too (Q5_K).
 *  - Fallback: a K-quant on a tensor whose ne[0] is not a multiple of 256
 *    becomes Q8_0 (llama.cpp's own fallbacks vary by type; one simple rule
 *    keeps tiny models readable); Q8_0 with ne[0] % 32 != 0 becomes F16.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel.h"
#include "quant.h"

/* ---- names -------------------------------------------------------------- */

static const char *const arch_names[] = { "qwen35", "qwen35moe" };
static const char *const quant_names[] = { "f32", "f16", "q8_0", "q4_k_m", "ud-q4_k_m" };

int si_mk_arch_from_name(const char *s, si_mk_arch *out)
{
    for (int i = 0; i < 2; i++)
        if (s != NULL && strcmp(s, arch_names[i]) == 0) {
            *out = (si_mk_arch)i;
            return SI_OK;
        }
    return SI_EINVAL;
}

int si_mk_quant_from_name(const char *s, si_mk_quant *out)
{
    for (int i = 0; i < 5; i++)
        if (s != NULL && strcmp(s, quant_names[i]) == 0) {
            *out = (si_mk_quant)i;
            return SI_OK;
        }
    return SI_EINVAL;
}

const char *si_mk_arch_name(si_mk_arch a)   { return (unsigned)a < 2 ? arch_names[a] : "?"; }
const char *si_mk_quant_name(si_mk_quant q) { return (unsigned)q < 5 ? quant_names[q] : "?"; }

/* ---- presets -------------------------------------------------------------- */

/* Qwythos-9B / Qwen3.5-9B (spec §1.2, §1.3). */
static const si_mk_hparams preset_9b = {
    .preset = "9b", .arch = SI_MK_QWEN35, .default_quant = SI_MK_Q_Q4_K_M,
    .n_embd = 4096, .n_layer = 32, .n_ff = 12288,
    .n_head = 16, .n_head_kv = 4, .head_dim = 256,
    .ssm_group = 16, .ssm_dt_rank = 32, .ssm_state = 128, .ssm_conv = 4,
    .rope_dim = 64, .rope_base = 10000000.0f, .rope_sections = { 11, 11, 10, 0 },
    .ctx = 262144, .vocab_rows = 248320, .full_attn_interval = 4, .eps = 1e-6f,
};

/* Qwen3.6-35B-A3B (spec §1.2, §1.3). */
static const si_mk_hparams preset_35b = {
    .preset = "35b-a3b", .arch = SI_MK_QWEN35MOE, .default_quant = SI_MK_Q_UD_Q4_K_M,
    .n_embd = 2048, .n_layer = 40,
    .n_head = 16, .n_head_kv = 2, .head_dim = 256,
    .ssm_group = 16, .ssm_dt_rank = 32, .ssm_state = 128, .ssm_conv = 4,
    .rope_dim = 64, .rope_base = 10000000.0f, .rope_sections = { 11, 11, 10, 0 },
    .ctx = 262144, .vocab_rows = 248320, .full_attn_interval = 4, .eps = 1e-6f,
    .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 512, .n_ff_shexp = 512,
};

/* A small model of the same structure for tests: 8 layers (2 full
 * attention), Hk 2 < Hv 4 so the tiled v-head mapping matters, rope over a
 * quarter of the head like the real models, sections scaled to n_rot/2. */
static const si_mk_hparams preset_tiny = {
    .preset = "tiny", .arch = SI_MK_QWEN35, .default_quant = SI_MK_Q_F32,
    .n_embd = 64, .n_layer = 8, .n_ff = 128,
    .n_head = 4, .n_head_kv = 2, .head_dim = 32,
    .ssm_group = 2, .ssm_dt_rank = 4, .ssm_state = 16, .ssm_conv = 4,
    .rope_dim = 16, .rope_base = 10000000.0f, .rope_sections = { 3, 3, 2, 0 },
    .ctx = 8192, .vocab_rows = 0, .full_attn_interval = 4, .eps = 1e-6f,
    .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32, .n_ff_shexp = 32,
};

int si_mk_preset(const char *name, const si_mk_arch *arch, si_mk_hparams *hp, si_err *err)
{
    const si_mk_hparams *p = NULL;
    if (name != NULL && strcmp(name, "9b") == 0)
        p = &preset_9b;
    else if (name != NULL && strcmp(name, "35b-a3b") == 0)
        p = &preset_35b;
    else if (name != NULL && strcmp(name, "tiny") == 0)
        p = &preset_tiny;
    if (p == NULL)
        return si_err_set(err, SI_EINVAL, "unknown preset '%s' (tiny, 9b, 35b-a3b)",
                          name != NULL ? name : "(null)");
    *hp = *p;
    if (arch == NULL)
        return SI_OK;
    if (p != &preset_tiny && *arch != p->arch)
        return si_err_set(err, SI_EINVAL, "preset '%s' is a %s model, not %s",
                          name, arch_names[p->arch], arch_names[*arch]);
    hp->arch = *arch;
    if (hp->arch == SI_MK_QWEN35)
        hp->n_expert = hp->n_expert_used = hp->n_ff_exp = hp->n_ff_shexp = 0;
    else
        hp->n_ff = 0;
    return SI_OK;
}

/* ---- rules ----------------------------------------------------------------- */

bool si_mk_use_more_bits(uint32_t i, uint32_t n)
{
    /* llama.cpp computes this in int: (i - n/8) may be negative, but then
     * the first clause is already true. */
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

bool si_mk_is_full_attn(const si_mk_hparams *hp, uint32_t il)
{
    uint32_t k = hp->full_attn_interval ? hp->full_attn_interval : 4;
    return (il + 1) % k == 0;
}

uint32_t si_mk_file_type(si_mk_quant q)
{
    switch (q) {   /* llama_ftype values */
    case SI_MK_Q_F32:       return 0;   /* ALL_F32       */
    case SI_MK_Q_F16:       return 1;   /* MOSTLY_F16    */
    case SI_MK_Q_Q8_0:      return 7;   /* MOSTLY_Q8_0   */
    case SI_MK_Q_Q4_K_M:    return 15;  /* MOSTLY_Q4_K_M */
    case SI_MK_Q_UD_Q4_K_M: return 15;  /* UNCONFIRMED for the UD file, spec §1.2 */
    }
    return 0;
}

/* What a tensor is, for the quant rule. */
enum role {
    R_F32,          /* never quantised */
    R_EMBD, R_OUTPUT,
    R_ATTN_Q, R_ATTN_K, R_ATTN_V, R_ATTN_OUT,
    R_QKV, R_GATE, R_ALPHA, R_BETA, R_SSM_OUT,
    R_FFN_GATE, R_FFN_UP, R_FFN_DOWN,
    R_EXP_GATE, R_EXP_UP, R_EXP_DOWN,
    R_SH_GATE, R_SH_UP, R_SH_DOWN,
};

static uint32_t rule_type(enum role r, uint32_t il, const si_mk_hparams *hp, si_mk_quant q)
{
    if (r == R_F32)
        return SI_TYPE_F32;
    switch (q) {
    case SI_MK_Q_F32:  return SI_TYPE_F32;
    case SI_MK_Q_F16:  return SI_TYPE_F16;
    case SI_MK_Q_Q8_0: return SI_TYPE_Q8_0;
    case SI_MK_Q_Q4_K_M:
        switch (r) {
        case R_OUTPUT:
            return SI_TYPE_Q6_K;
        case R_ATTN_V: case R_QKV:
        case R_FFN_DOWN: case R_EXP_DOWN: case R_SH_DOWN:
            return si_mk_use_more_bits(il, hp->n_layer) ? SI_TYPE_Q6_K : SI_TYPE_Q4_K;
        default:
            return SI_TYPE_Q4_K;
        }
    case SI_MK_Q_UD_Q4_K_M:
        switch (r) {
        case R_EMBD:     return SI_TYPE_Q4_K;
        case R_OUTPUT:   return SI_TYPE_Q6_K;
        case R_FFN_GATE: case R_FFN_UP: case R_EXP_GATE: case R_EXP_UP:
            return SI_TYPE_Q4_K;
        case R_FFN_DOWN: case R_EXP_DOWN:
            return SI_TYPE_Q5_K;
        default:         /* attention, GDN projections, shared expert */
            return SI_TYPE_Q8_0;
        }
    }
    return SI_TYPE_F32;
}

static bool is_k_quant(uint32_t type)
{
    return type == SI_TYPE_Q4_K || type == SI_TYPE_Q5_K || type == SI_TYPE_Q6_K;
}

static uint32_t fallback_type(uint32_t type, int64_t ne0)
{
    if (is_k_quant(type) && ne0 % 256 != 0)
        type = SI_TYPE_Q8_0;
    if (type == SI_TYPE_Q8_0 && ne0 % 32 != 0)
        type = SI_TYPE_F16;
    return type;
}

/* ---- plan ------------------------------------------------------------------- */

typedef struct builder {
    si_mk_plan         *p;
    uint32_t            cap;
    const si_mk_hparams *hp;
    si_mk_quant         q;
    uint32_t            il;   /* current layer, for the rule */
    si_err             *err;
    int                 rc;
} builder;

static void add(builder *b, const char *name, enum role r, uint32_t init, float std,
                int64_t ne0, int64_t ne1, int64_t ne2)
{
    if (b->rc != SI_OK)
        return;
    si_mk_plan *p = b->p;
    if (p->n == b->cap) {
        b->rc = si_err_set(b->err, SI_EINVAL, "internal: tensor table full at '%s'", name);
        return;
    }
    si_mk_tensor *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    int len = snprintf(t->name, sizeof t->name, "%s", name);
    if (len < 0 || (size_t)len >= sizeof t->name) {
        b->rc = si_err_set(b->err, SI_EINVAL, "internal: tensor name '%s' too long", name);
        return;
    }
    t->ne[0] = ne0;
    t->ne[1] = ne1 > 0 ? ne1 : 1;
    t->ne[2] = ne2 > 0 ? ne2 : 1;
    t->ne[3] = 1;
    t->ndim = ne2 > 0 ? 3 : ne1 > 0 ? 2 : 1;
    /* 1-D tensors are never quantised, whatever their role. */
    t->type = t->ndim == 1 ? SI_TYPE_F32 : fallback_type(rule_type(r, b->il, b->hp, b->q), ne0);
    t->init = init;
    t->std = std;
    t->rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
    t->row_bytes = si_type_row_bytes(t->type, ne0);
    t->nbytes = t->rows * t->row_bytes;
    t->synth = si_type_get(t->type)->block_elems > 1 &&
               (uint64_t)ne0 * t->rows > SI_MK_SYNTH_MIN_ELEMS;
    p->total_bytes += t->nbytes;
    p->n++;
}

static void add_blk(builder *b, const char *suffix, enum role r, uint32_t init, float std,
                    int64_t ne0, int64_t ne1, int64_t ne2)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%u.%s", b->il, suffix);
    add(b, name, r, init, std, ne0, ne1, ne2);
}

static int check_hparams(const si_mk_hparams *hp, si_err *err)
{
    if (hp->n_layer < 1 || hp->n_layer > 4096)
        return si_err_set(err, SI_ERANGE, "layer count %u out of range [1, 4096]", hp->n_layer);
    if (hp->vocab_rows < 1)
        return si_err_set(err, SI_ERANGE, "vocabulary rows must be at least 1");
    if (hp->n_embd == 0 || hp->n_head == 0 || hp->n_head_kv == 0 || hp->head_dim == 0 ||
        hp->ssm_group == 0 || hp->ssm_dt_rank == 0 || hp->ssm_state == 0 || hp->ssm_conv == 0)
        return si_err_set(err, SI_EINVAL, "preset '%s': zero dimension", hp->preset);
    if (hp->arch == SI_MK_QWEN35MOE && (hp->n_expert == 0 || hp->n_ff_exp == 0 ||
                                       hp->n_ff_shexp == 0 || hp->n_expert_used == 0))
        return si_err_set(err, SI_EINVAL, "preset '%s': MoE sizes missing", hp->preset);
    if (hp->arch == SI_MK_QWEN35 && hp->n_ff == 0)
        return si_err_set(err, SI_EINVAL, "preset '%s': FFN size missing", hp->preset);
    return SI_OK;
}

int si_mk_plan_build(const si_mk_hparams *hp, si_mk_quant q, si_mk_plan *out, si_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_hparams(hp, err);
    if (rc != SI_OK)
        return rc;
    builder b = { .p = out, .cap = hp->n_layer * 19 + 3, .hp = hp, .q = q, .err = err };
    out->hp = *hp;
    out->quant = q;
    out->t = calloc(b.cap, sizeof *out->t);
    if (out->t == NULL)
        return si_err_set(err, SI_ENOMEM, "out of memory for %u tensors", b.cap);

    const int64_t H = hp->n_embd, V = hp->vocab_rows;
    const int64_t hd = hp->head_dim, q_dim = (int64_t)hp->n_head * hd;
    const int64_t kv_dim = (int64_t)hp->n_head_kv * hd;
    const int64_t key_dim = (int64_t)hp->ssm_group * hp->ssm_state;
    const int64_t value_dim = (int64_t)hp->ssm_dt_rank * hp->ssm_state;
    const int64_t conv_dim = 2 * key_dim + value_dim;
    const int64_t Hv = hp->ssm_dt_rank;
    /* Linear weights ~ N(0, 1/sqrt(fan_in)); the projections that write into
     * the residual stream are further scaled by 1/sqrt(2 L) so that the
     * stream stays O(1) over all layers. */
    const float res = 1.0f / sqrtf(2.0f * (float)hp->n_layer);
#define LIN(fan_in) (1.0f / sqrtf((float)(fan_in)))
    const uint32_t N = SI_MK_INIT_NORMAL, ONE = SI_MK_INIT_ONE_PLUS;

    add(&b, "token_embd.weight", R_EMBD, N, 0.05f, H, V, 0);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        b.il = il;
        add_blk(&b, "attn_norm.weight", R_F32, ONE, 0.02f, H, 0, 0);
        if (si_mk_is_full_attn(hp, il)) {
            add_blk(&b, "attn_q.weight", R_ATTN_Q, N, LIN(H), H, 2 * q_dim, 0);
            add_blk(&b, "attn_k.weight", R_ATTN_K, N, LIN(H), H, kv_dim, 0);
            add_blk(&b, "attn_v.weight", R_ATTN_V, N, LIN(H), H, kv_dim, 0);
            add_blk(&b, "attn_output.weight", R_ATTN_OUT, N, LIN(q_dim) * res, q_dim, H, 0);
            add_blk(&b, "attn_q_norm.weight", R_F32, ONE, 0.02f, hd, 0, 0);
            add_blk(&b, "attn_k_norm.weight", R_F32, ONE, 0.02f, hd, 0, 0);
        } else {
            add_blk(&b, "attn_qkv.weight", R_QKV, N, LIN(H), H, conv_dim, 0);
            add_blk(&b, "attn_gate.weight", R_GATE, N, LIN(H), H, value_dim, 0);
            add_blk(&b, "ssm_beta.weight", R_BETA, N, LIN(H), H, Hv, 0);
            add_blk(&b, "ssm_alpha.weight", R_ALPHA, N, LIN(H), H, Hv, 0);
            add_blk(&b, "ssm_conv1d.weight", R_F32, N, 0.3f, hp->ssm_conv, conv_dim, 0);
            add_blk(&b, "ssm_dt.bias", R_F32, N, 0.1f, Hv, 0, 0);
            add_blk(&b, "ssm_a", R_F32, SI_MK_INIT_NEG_EXP, 0.0f, Hv, 0, 0);
            add_blk(&b, "ssm_norm.weight", R_F32, ONE, 0.02f, hp->ssm_state, 0, 0);
            add_blk(&b, "ssm_out.weight", R_SSM_OUT, N, LIN(value_dim) * res, value_dim, H, 0);
        }
        add_blk(&b, "post_attention_norm.weight", R_F32, ONE, 0.02f, H, 0, 0);
        if (hp->arch == SI_MK_QWEN35) {
            const int64_t ff = hp->n_ff;
            add_blk(&b, "ffn_gate.weight", R_FFN_GATE, N, LIN(H), H, ff, 0);
            add_blk(&b, "ffn_up.weight", R_FFN_UP, N, LIN(H), H, ff, 0);
            add_blk(&b, "ffn_down.weight", R_FFN_DOWN, N, LIN(ff) * res, ff, H, 0);
        } else {
            const int64_t E = hp->n_expert, fe = hp->n_ff_exp, fs = hp->n_ff_shexp;
            add_blk(&b, "ffn_gate_inp.weight", R_F32, N, LIN(H), H, E, 0);
            add_blk(&b, "ffn_gate_exps.weight", R_EXP_GATE, N, LIN(H), H, fe, E);
            add_blk(&b, "ffn_up_exps.weight", R_EXP_UP, N, LIN(H), H, fe, E);
            add_blk(&b, "ffn_down_exps.weight", R_EXP_DOWN, N, LIN(fe) * res, fe, H, E);
            add_blk(&b, "ffn_gate_inp_shexp.weight", R_F32, N, LIN(H), H, 0, 0);
            add_blk(&b, "ffn_gate_shexp.weight", R_SH_GATE, N, LIN(H), H, fs, 0);
            add_blk(&b, "ffn_up_shexp.weight", R_SH_UP, N, LIN(H), H, fs, 0);
            add_blk(&b, "ffn_down_shexp.weight", R_SH_DOWN, N, LIN(fs) * res, fs, H, 0);
        }
    }
    add(&b, "output_norm.weight", R_F32, ONE, 0.02f, H, 0, 0);
    add(&b, "output.weight", R_OUTPUT, N, LIN(H), H, V, 0);
#undef LIN
    if (b.rc != SI_OK)
        si_mk_plan_free(out);
    return b.rc;
}

void si_mk_plan_free(si_mk_plan *p)
{
    if (p == NULL)
        return;
    free(p->t);
    memset(p, 0, sizeof *p);
}

const si_mk_tensor *si_mk_plan_find(const si_mk_plan *p, const char *name)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (strcmp(p->t[i].name, name) == 0)
            return &p->t[i];
    return NULL;
}

/* ---- metadata ---------------------------------------------------------------- */

int si_mk_write_metadata(const si_mk_plan *p, si_gguf_writer *w, si_err *err)
{
    const si_mk_hparams *hp = &p->hp;
    const char *arch = si_mk_arch_name(hp->arch);
    char name[96], key[96];
    int rc = SI_OK;
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
#define SET(call) do { if (rc == SI_OK) rc = (call); } while (0)

    snprintf(name, sizeof name, "sparkinfer mkmodel %s", hp->preset);
    SET(si_gguf_writer_set_str(w, "general.architecture", arch));
    SET(si_gguf_writer_set_str(w, "general.name", name));
    SET(si_gguf_writer_set_u32(w, K("block_count"), hp->n_layer));
    SET(si_gguf_writer_set_u32(w, K("context_length"), hp->ctx));
    SET(si_gguf_writer_set_u32(w, K("embedding_length"), hp->n_embd));
    if (hp->arch == SI_MK_QWEN35)
        SET(si_gguf_writer_set_u32(w, K("feed_forward_length"), hp->n_ff));
    SET(si_gguf_writer_set_u32(w, K("attention.head_count"), hp->n_head));
    SET(si_gguf_writer_set_u32(w, K("attention.head_count_kv"), hp->n_head_kv));
    SET(si_gguf_writer_set_f32(w, K("rope.freq_base"), hp->rope_base));
    SET(si_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), hp->eps));
    if (hp->arch == SI_MK_QWEN35MOE) {
        SET(si_gguf_writer_set_u32(w, K("expert_count"), hp->n_expert));
        SET(si_gguf_writer_set_u32(w, K("expert_used_count"), hp->n_expert_used));
    }
    SET(si_gguf_writer_set_u32(w, K("attention.key_length"), hp->head_dim));
    SET(si_gguf_writer_set_u32(w, K("attention.value_length"), hp->head_dim));
    SET(si_gguf_writer_set_u32(w, "general.file_type", si_mk_file_type(p->quant)));
    if (hp->arch == SI_MK_QWEN35MOE) {
        SET(si_gguf_writer_set_u32(w, K("expert_feed_forward_length"), hp->n_ff_exp));
        SET(si_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), hp->n_ff_shexp));
    }
    SET(si_gguf_writer_set_arr(w, K("rope.dimension_sections"), SI_GGUF_I32, hp->rope_sections, 4));
    SET(si_gguf_writer_set_u32(w, K("rope.dimension_count"), hp->rope_dim));
    SET(si_gguf_writer_set_u32(w, K("full_attention_interval"), hp->full_attn_interval));
    SET(si_gguf_writer_set_u32(w, K("ssm.conv_kernel"), hp->ssm_conv));
    SET(si_gguf_writer_set_u32(w, K("ssm.state_size"), hp->ssm_state));
    SET(si_gguf_writer_set_u32(w, K("ssm.group_count"), hp->ssm_group));
    SET(si_gguf_writer_set_u32(w, K("ssm.time_step_rank"), hp->ssm_dt_rank));
    SET(si_gguf_writer_set_u32(w, K("ssm.inner_size"), hp->ssm_dt_rank * hp->ssm_state));
    SET(si_gguf_writer_set_u32(w, "general.quantization_version", 2));
#undef SET
#undef K
    if (rc != SI_OK) {
        const char *m = si_gguf_writer_error(w);
        return si_err_set(err, rc, "metadata: %s", m != NULL ? m : si_strerror(rc));
    }
    return SI_OK;
}
