/* backends/cuda_sm120/cuda_prof.c — knob `profile = true`: device time per
 * kind of op, logged (INFO, `-v` on the CLI) when the backend closes.
 *
 * An event is recorded on the stream before every op of an exec and one
 * after the last; op i's time is elapsed(ev[i], ev[i+1]), so launch gaps
 * between kernels are charged to the op that follows them — what a user
 * waits for.  The exec then waits for its last event (profiling costs the
 * overlap of the host's next exec with this one; it is opt-in, for finding
 * where a step's time goes, not for headline figures).
 *
 * Ops are grouped by a label: the op kind, the weight type for MATMUL and
 * MOE, and the tokens (columns) the op runs: "dec" (<= 8: the decode
 * GEMV path), "bat" (9..64: batched decode, which otherwise would be
 * counted with the prefill chunks that filled the context) or "pre". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

#define PROF_MAX_LABELS 64

typedef struct prof_label {
    char     name[40];
    uint64_t count;
    double   ms;
} prof_label;

struct cu_prof {
    cudaEvent_t *ev;
    size_t       ev_cap;
    int         *lab;        /* label index of each op of the running exec */
    size_t       n_ops;
    prof_label   labels[PROF_MAX_LABELS];
    int          n_labels;
    uint64_t     n_exec;
    bool         broken;     /* an event call failed: stop, say so at close */
};

static const char *kind_name(uint32_t k)
{
    static const char *const names[SI_OP_KIND_COUNT] = {
        [SI_OP_GET_ROWS] = "GET_ROWS", [SI_OP_MATMUL] = "MATMUL", [SI_OP_RMSNORM] = "RMSNORM",
        [SI_OP_ADD] = "ADD",           [SI_OP_MUL] = "MUL",       [SI_OP_SWIGLU] = "SWIGLU",
        [SI_OP_ATTN] = "ATTN",         [SI_OP_GDN] = "GDN",       [SI_OP_MOE] = "MOE",
    };
    return k < SI_OP_KIND_COUNT && names[k] != NULL ? names[k] : "op?";
}

static int label_of(cu_prof *p, const si_host *h, const si_op *op)
{
    char name[40];
    const int64_t ntok = op->src[1] != NULL && op->kind == SI_OP_MATMUL ? op->src[1]->ne[1] : op->dst.ne[1];
    const char *phase = ntok <= 8 ? "dec" : ntok <= 64 ? "bat" : "pre";
    if (op->kind == SI_OP_MATMUL || op->kind == SI_OP_MOE) {
        const si_tensor *w = op->kind == SI_OP_MATMUL ? op->src[0] : op->src[2];
        snprintf(name, sizeof name, "%s %s %s", kind_name(op->kind), w && h->type_name(w->type) ? h->type_name(w->type) : "?", phase);
    } else {
        snprintf(name, sizeof name, "%s %s", kind_name(op->kind), phase);
    }
    for (int i = 0; i < p->n_labels; i++)
        if (strcmp(p->labels[i].name, name) == 0)
            return i;
    if (p->n_labels == PROF_MAX_LABELS)
        return PROF_MAX_LABELS - 1;   /* the last slot collects the rest */
    prof_label *l = &p->labels[p->n_labels];
    snprintf(l->name, sizeof l->name, "%s", name);
    return p->n_labels++;
}

int cu_prof_open(si_backend *b, si_err *err)
{
    b->prof = calloc(1, sizeof *b->prof);
    if (b->prof == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    return SI_OK;
}

static bool prof_grow(cu_prof *p, size_t n_ops)
{
    if (n_ops + 1 <= p->ev_cap)
        return true;
    size_t want = (n_ops + 1) * 2;
    cudaEvent_t *ev = realloc(p->ev, want * sizeof *ev);
    if (ev == NULL)
        return false;
    p->ev = ev;
    int *lab = realloc(p->lab, want * sizeof *lab);
    if (lab == NULL)
        return false;
    p->lab = lab;
    for (size_t i = p->ev_cap; i < want; i++) {
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            p->ev_cap = i;
            return false;
        }
    }
    p->ev_cap = want;
    return true;
}

void cu_prof_before(si_backend *b, size_t i, size_t n_ops, const si_op *op)
{
    cu_prof *p = b->prof;
    if (p == NULL || p->broken)
        return;
    if (i == 0 && !prof_grow(p, n_ops)) {
        p->broken = true;
        return;
    }
    p->lab[i] = label_of(p, b->host, op);
    p->n_ops = i + 1;
    if (cudaEventRecord(p->ev[i], b->stream) != cudaSuccess)
        p->broken = true;
}

void cu_prof_after(si_backend *b)
{
    cu_prof *p = b->prof;
    if (p == NULL || p->broken || p->n_ops == 0)
        return;
    const size_t n = p->n_ops;
    p->n_ops = 0;
    if (cudaEventRecord(p->ev[n], b->stream) != cudaSuccess || cudaEventSynchronize(p->ev[n]) != cudaSuccess) {
        cudaGetLastError();
        p->broken = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, p->ev[i], p->ev[i + 1]) != cudaSuccess) {
            cudaGetLastError();
            p->broken = true;
            return;
        }
        p->labels[p->lab[i]].count++;
        p->labels[p->lab[i]].ms += ms;
    }
    p->n_exec++;
}

static int by_ms_desc(const void *a, const void *b)
{
    const prof_label *x = a, *y = b;
    return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

void cu_prof_close(si_backend *b)
{
    cu_prof *p = b->prof;
    if (p == NULL)
        return;
    const si_host *h = b->host;
    if (p->broken)
        h->log(h, SI_LOG_WARN, CU_NAME, "profile: a CUDA event call failed; figures below are partial");
    double total = 0.0;
    for (int i = 0; i < p->n_labels; i++)
        total += p->labels[i].ms;
    qsort(p->labels, (size_t)p->n_labels, sizeof p->labels[0], by_ms_desc);
    h->log(h, SI_LOG_INFO, CU_NAME, "profile: %llu execs, %.3f ms of device time in ops",
           (unsigned long long)p->n_exec, total);
    h->log(h, SI_LOG_INFO, CU_NAME, "profile: %-24s %10s %12s %10s %6s", "op", "count", "total ms", "us/op", "share");
    for (int i = 0; i < p->n_labels; i++) {
        const prof_label *l = &p->labels[i];
        h->log(h, SI_LOG_INFO, CU_NAME, "profile: %-24s %10llu %12.3f %10.2f %5.1f%%", l->name,
               (unsigned long long)l->count, l->ms, l->count ? 1000.0 * l->ms / (double)l->count : 0.0,
               total > 0 ? 100.0 * l->ms / total : 0.0);
    }
    for (size_t i = 0; i < p->ev_cap; i++)
        cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->lab);
    free(p);
    b->prof = NULL;
}
