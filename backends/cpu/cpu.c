/* backends/cpu/cpu.c — the cpu backend plugin: descriptor, knobs,
 * open/close and the supports/exec dispatch.
 *
 * The portable reference backend.  Host memory, weights read in place from
 * the GGUF mapping in their own types, every op of enum si_op_kind, and a
 * persistent thread pool.  It links nothing from the core: all services
 * come through the si_host given to open().
 *
 * Knobs ([backend.cpu], read with host->cfg_get):
 *   threads = N                 worker threads; falls back to [runtime] threads;
 *                               0 or absent = one per online core
 *   matmul  = fast | ref        int8 fast path, or the f32 reference path
 *   moe     = grouped | per_token
 *                               group a batch's tokens by expert (weights
 *                               stream once per batch) or loop per token
 *   kv_type = f32 | f16         KV cache element type; falls back to [runtime]
 *                               kv_type (int8 there means f16 here, with a
 *                               warning), else f32 (backends/common/si_kvknob.h)
 *   simd    = auto | off        off forces the portable C kernels (tests)
 *   packed  = true | false      (simd) products of fewer than 4 tokens, i.e.
 *                               decode, read Q4_K/Q5_K/Q6_K/Q8_0 rows packed,
 *                               unpacked in registers (cpu_dot_packed), where
 *                               false decodes each row to int8 in memory
 *                               first; the same bits either way (A/B)
 */
#include <stdlib.h>

#include "cpu_internal.h"
#include "../common/si_kvknob.h"

static int cpu_probe(const si_host *h, si_err *err)
{
    (void)h;
    (void)err;
    return SI_OK;   /* plain C: runs wherever it was built */
}

/* Parses a knob value: -1 when absent, else the index of `v` in the
 * '|'-separated `choices`; SI_EINVAL with a message otherwise. */
static int knob_choice(const si_host *h, const char *section, const char *key, const char *choices,
                       int *out, si_err *err)
{
    const char *v = h->cfg_get(h, section, key);
    *out = -1;
    if (v == NULL)
        return SI_OK;
    int idx = 0;
    for (const char *c = choices; *c != '\0'; idx++) {
        size_t len = strcspn(c, "|");
        if (strlen(v) == len && strncmp(v, c, len) == 0) {
            *out = idx;
            return SI_OK;
        }
        c += len;
        if (*c == '|')
            c++;
    }
    return si_err_set(err, SI_EINVAL, "[%s] %s = '%s': expected one of %s", section, key, v, choices);
}

static int knob_threads(const si_host *h, const char *section, int *out, si_err *err)
{
    const char *sec = section;
    const char *v = h->cfg_get(h, section, "threads");
    if (v == NULL) {
        sec = "runtime";
        v = h->cfg_get(h, sec, "threads");
    }
    *out = 0;
    if (v == NULL)
        return SI_OK;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0 || n > 1024)
        return si_err_set(err, SI_EINVAL, "[%s] threads = '%s': expected an integer in 0..1024", sec, v);
    *out = (int)n;
    return SI_OK;
}

static void cpu_close(si_backend *b)
{
    if (b == NULL)
        return;
    cpu_pool_destroy(b->pool);
    if (b->tls != NULL)
        for (int i = 0; i < b->n_threads; i++)
            free(b->tls[i].p);
    free(b->tls);
    free(b->work);
    free(b);
}

static int cpu_open(const si_host *h, const char *section, si_backend **out, si_err *err)
{
    if (h == NULL || out == NULL)
        return si_err_set(err, SI_EINVAL, "cpu: open: NULL argument");
    /* Every host service used here exists since 1.0; a shorter table is
     * not a host of this ABI. */
    if (!SI_HAS_MEMBER(h, si_host, quant) || h->log == NULL || h->cfg_get == NULL || h->dequant == NULL ||
        h->type_name == NULL)
        return si_err_set(err, SI_EABI, "cpu: open: host table of %u bytes lacks services of ABI 1.0", h->size);
    if (section == NULL)
        section = "backend." CPU_NAME;
    static const si_kvknob kvk = { CPU_NAME, SI_TYPE_F32, SI_TYPE_F16, true, false };
    int threads, mm, moe, simd, packed, rc;
    uint32_t kvt;
    if ((rc = knob_threads(h, section, &threads, err)) != SI_OK ||
        (rc = knob_choice(h, section, "matmul", "fast|ref", &mm, err)) != SI_OK ||
        (rc = knob_choice(h, section, "moe", "grouped|per_token", &moe, err)) != SI_OK ||
        (rc = si_kvknob_resolve(h, section, &kvk, &kvt, err)) != SI_OK ||
        (rc = knob_choice(h, section, "simd", "auto|off", &simd, err)) != SI_OK ||
        (rc = knob_choice(h, section, "packed", "true|false", &packed, err)) != SI_OK)
        return rc;
    si_backend *b = calloc(1, sizeof *b);
    if (b == NULL)
        return si_err_set(err, SI_ENOMEM, "cpu: out of memory");
    b->host = h;
    cpu_opcheck_init(b);
    b->n_threads = threads > 0 ? threads : cpu_online_cores();
    b->mm_ref = mm == 1;
    b->moe_per_token = moe == 1;
    b->kv_type = kvt;
    b->simd = simd != 1 && cpu_have_simd();
    b->packed = packed != 1 && b->simd;
    b->tls = calloc((size_t)b->n_threads, sizeof *b->tls);
    if (b->tls == NULL) {
        cpu_close(b);
        return si_err_set(err, SI_ENOMEM, "cpu: out of memory");
    }
    if ((rc = cpu_pool_create(b->n_threads, &b->pool, err)) != SI_OK) {
        cpu_close(b);
        return rc;
    }
    h->log(h, SI_LOG_INFO, CPU_NAME, "%d threads, matmul %s, moe %s, kv %s, kernels %s%s", b->n_threads,
           b->mm_ref ? "ref" : "fast", b->moe_per_token ? "per_token" : "grouped",
           b->kv_type == SI_TYPE_F16 ? "f16" : "f32", b->simd ? "avx2" : "portable", b->packed ? " (packed decode)" : "");
    *out = b;
    return SI_OK;
}

typedef struct op_entry {
    const char *name;
    int (*exec)(si_backend *b, const si_op *op, si_err *err);
} op_entry;

static const op_entry op_tab[SI_OP_KIND_COUNT] = {
    [SI_OP_GET_ROWS] = { "GET_ROWS", cpu_elem_exec },
    [SI_OP_MATMUL]   = { "MATMUL", cpu_matmul_exec },
    [SI_OP_RMSNORM]  = { "RMSNORM", cpu_elem_exec },
    [SI_OP_ADD]      = { "ADD", cpu_elem_exec },
    [SI_OP_MUL]      = { "MUL", cpu_elem_exec },
    [SI_OP_SWIGLU]   = { "SWIGLU", cpu_elem_exec },
    [SI_OP_ATTN]     = { "ATTN", cpu_attn_exec },
    [SI_OP_GDN]      = { "GDN", cpu_gdn_exec },
    [SI_OP_MOE]      = { "MOE", cpu_moe_exec },
    [SI_OP_TOPK]     = { "TOPK", cpu_topk_exec },
};

static const op_entry *find_op(const si_op *op, si_err *err)
{
    if (op->kind >= SI_OP_KIND_COUNT || op_tab[op->kind].exec == NULL) {
        si_err_set(err, SI_EUNSUPPORTED, "cpu: op kind %u is not supported", op->kind);
        return NULL;
    }
    return &op_tab[op->kind];
}

static bool cpu_supports(const si_backend *b, const si_op *op)
{
    if (b == NULL || op == NULL)
        return false;
    const op_entry *e = find_op(op, NULL);
    return e != NULL && si_oc_check(&b->oc, op, NULL) == SI_OK;
}

static int cpu_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    if (n_ops > 0 && (b == NULL || ops == NULL))
        return si_err_set(err, SI_EINVAL, "cpu: exec: NULL argument");
    for (size_t i = 0; i < n_ops; i++) {
        const op_entry *e = find_op(&ops[i], err);
        if (e == NULL)
            return SI_EUNSUPPORTED;
        int rc = si_oc_check(&b->oc, &ops[i], err);
        if (rc == SI_OK)
            rc = e->exec(b, &ops[i], err);
        if (rc != SI_OK)
            return rc;
    }
    return SI_OK;
}

static const struct si_backend_ops cpu_ops = {
    .size = sizeof(struct si_backend_ops),
    .open = cpu_open,
    .close = cpu_close,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .weight_load = cpu_weight_load,
    .kv_create = cpu_kv_create,
    .kv_free = cpu_kv_free,
    .kv_seq_reset = cpu_kv_seq_reset,
    .supports = cpu_supports,
    .exec = cpu_exec,
    .sync = NULL,
    .attach_kernel = NULL,
};

SI_PLUGIN_DEFINE(SI_KIND_BACKEND, CPU_NAME, "0.1.0",
                 "portable multi-threaded CPU backend: every op, GGUF quant types read in place",
                 cpu_probe, &cpu_ops, NULL)
