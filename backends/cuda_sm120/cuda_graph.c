/* backends/cuda_sm120/cuda_graph.c — knob graph = true: an exec whose op
 * list was seen before runs as one cudaGraphLaunch of a graph captured
 * from its own enqueue, instead of ~5 us of host work per op.
 *
 * Life of one op list (its signature, cuda_gsig.h, is the key):
 *   1st time  SEEN: run op by op.  That run grows the workspaces (ws, xq,
 *             attention partials) to what this list needs.
 *   2nd time  captured: the same op-by-op enqueue between
 *             cudaStreamBeginCapture/EndCapture, instantiated, launched.
 *   then      replayed: the host only validates and stages the per-step
 *             data, then launches.
 * What changes from step to step and how the graph sees it:
 *   - ATTN pos/seq and the GDN sequence runs: uploaded by memcpy nodes
 *     (one at the head of the graph with knob h2d_early, cuda_h2d.c; else
 *     one an upload, where the op runs) from a pinned buffer owned by the
 *     graph; a replay rewrites that buffer (after the previous launch of
 *     the graph has read it: event) in the layout the ops staged it at
 *     capture (cu_up_op makes both).  The kernels read
 *     positions from the device, so RoPE, appends and causal lengths follow.
 *   - the attention split grid, sized for max_len: max_len is bucketed
 *     (si_cu_attn_bucket, the same in the op-by-op path, so both give
 *     the same bits) and the bucket is part of the signature: a new
 *     capture every 256 positions.  Empty splits return at once and the
 *     combine reads only the splits a token's position reaches.
 *   - the GDN run count and longest run: part of the signature.
 *   - int8 KV pages: reserved, and their table entries uploaded, by
 *     cu_exec before the graph (attn_pages_early); the graph reads the
 *     device table.
 *   - host KV lengths: validated and advanced by the replay
 *     (cu_attn_commit_all), exactly as attn_exec does op by op.
 * What is never graphed: execs with an op taken by a kernel plugin (its
 * host-side choices are unknown here), a TOPK with sampling penalties
 * (their per-step lists are uploaded by the op), knob profile = true.  Any failure
 * of capture, instantiate or launch runs the exec op by op instead, and
 * the list is not captured again (NEVER), except when the capture needed
 * a workspace to grow (retried a few times).  ws/xq/attention-partials
 * reallocation bumps b->ws_gen (so does cu_kv_free where it reopens the
 * weight-copy caches): a graph of an older generation holds freed
 * pointers or reads weights without their copies; its next use runs op by
 * op (making the copies) and the one after captures it again. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_backend.h"
#include "cuda_gsig.h"
#include "cuda_internal.h"

#define GROW_RETRIES 3
#define TIMED_LISTS  8    /* profile = graph: op-list lengths timed apart */

typedef struct cu_graph {
    cudaGraphExec_t exec;
    uint8_t        *stage;       /* pinned: the per-step uploads             */
    size_t          stage_bytes;
    cudaEvent_t     done;        /* recorded after each launch              */
    /* recorded INSIDE the graph right after its one per-step upload (knob
     * h2d_early), so a replay waits only until the previous launch has
     * copied stage out, not for all of it: with decode ahead the next
     * step is launched while this one runs.  NULL: wait for done. */
    cudaEvent_t     staged;
    uint64_t        gen;         /* b->ws_gen at capture                     */
    bool            get_rows;    /* sets b->flag_pending when run            */
} cu_graph;

struct cu_graphs {
    cu_gcache cache;
    cu_gsig   sig;
    cu_upbuf  up;                /* this exec's per-step uploads (cu_up_op)  */
    bool      get_rows;
    uint32_t  n_host_ids;        /* its HOST_IDS ops (counted at launch)    */
    bool      told;              /* a capture failure was logged            */
    uint64_t  n_seen, n_capture, n_replay, n_fail;
    /* profile = graph: device time of each replay, by op-list length */
    cudaEvent_t t0, t1;          /* NULL: not timing                        */
    struct { size_t n_ops; uint64_t count; double ms, min_ms, host_ms; } timed[TIMED_LISTS];
    double host_ms;              /* this exec's host time up to its launch  */
    uint64_t n_untimed;          /* replays of lengths past TIMED_LISTS     */
};

static void graph_free(void *ctx, void *payload)
{
    (void)ctx;
    cu_graph *g = payload;
    if (g == NULL)
        return;
    if (g->done != NULL) {
        cudaEventSynchronize(g->done);   /* its last launch may still read stage */
        cudaEventDestroy(g->done);
    }
    if (g->staged != NULL)
        cudaEventDestroy(g->staged);
    if (g->exec != NULL)
        cudaGraphExecDestroy(g->exec);
    cudaFreeHost(g->stage);
    free(g);
}

int cu_graph_open(si_backend *b, bool timing, si_err *err)
{
    cu_graphs *G = calloc(1, sizeof *G);
    if (G == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    G->cache.drop = graph_free;
    b->graphs = G;
    if (timing) {
        cudaError_t ce = cudaEventCreate(&G->t0);
        if (ce == cudaSuccess && (ce = cudaEventCreate(&G->t1)) != cudaSuccess) {
            cudaEventDestroy(G->t0);
            G->t0 = NULL;
        }
        if (ce != cudaSuccess) {
            cudaGetLastError();
            return si_err_set(err, SI_EDEVICE, "profile = graph: cudaEventCreate: %s", cudaGetErrorString(ce));
        }
    }
    return SI_OK;
}

static double ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* profile = graph: waits for the replay just enqueued between t0 and t1
 * and adds its device time to its op-list length's row (the host's next
 * exec then no longer overlaps this one: for finding where a step's time
 * goes — device time against the wall time of the step — not for
 * headline figures). */
static void time_replay(cu_graphs *G, size_t n_ops)
{
    float ms = 0.0f;
    if (cudaEventSynchronize(G->t1) != cudaSuccess || cudaEventElapsedTime(&ms, G->t0, G->t1) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    for (int i = 0; i < TIMED_LISTS; i++) {
        if (G->timed[i].count > 0 && G->timed[i].n_ops != n_ops)
            continue;
        if (G->timed[i].count == 0 || ms < G->timed[i].min_ms)
            G->timed[i].min_ms = ms;
        G->timed[i].n_ops = n_ops;
        G->timed[i].count++;
        G->timed[i].ms += ms;
        G->timed[i].host_ms += G->host_ms;
        return;
    }
    G->n_untimed++;
}

void cu_graph_close(si_backend *b)
{
    cu_graphs *G = b->graphs;
    if (G == NULL)
        return;
    if (G->n_seen + G->n_capture + G->n_replay > 0)
        b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                     "graphs: %llu op lists seen, %llu captured, %llu replays, %llu not capturable",
                     (unsigned long long)G->n_seen, (unsigned long long)G->n_capture,
                     (unsigned long long)G->n_replay, (unsigned long long)G->n_fail);
    for (int i = 0; i < TIMED_LISTS && G->timed[i].count > 0; i++)
        b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                     "profile: graphs of %zu ops: %llu replays, %.1f us mean, %.1f us min device time; "
                     "%.1f us mean host time to the launch",
                     G->timed[i].n_ops, (unsigned long long)G->timed[i].count,
                     1000.0 * G->timed[i].ms / (double)G->timed[i].count, 1000.0 * G->timed[i].min_ms,
                     1000.0 * G->timed[i].host_ms / (double)G->timed[i].count);
    if (G->n_untimed > 0)
        b->host->log(b->host, SI_LOG_INFO, CU_NAME, "profile: %llu replays of more op-list lengths not timed",
                     (unsigned long long)G->n_untimed);
    if (G->t0 != NULL) {
        cudaEventDestroy(G->t0);
        cudaEventDestroy(G->t1);
    }
    cu_gcache_clear(&G->cache);
    cu_gsig_free(&G->sig);
    cu_upbuf_free(&G->up);
    free(G);
    b->graphs = NULL;
}

void *cu_graph_stage(si_backend *b, size_t bytes, si_err *err)
{
    const size_t need = cu_stage_rnd(bytes);
    if (need > b->cap_stage_cap - b->cap_stage_used) {
        si_err_set(err, SI_EINVAL, CU_NAME ": graph capture staged more than the op list announced");
        return NULL;
    }
    void *p = b->cap_stage + b->cap_stage_used;
    b->cap_stage_used += need;
    return p;
}

static void buf_id(const si_buf *buf, uint64_t *dev, uint64_t *nbytes)
{
    *dev = (uint64_t)(uintptr_t)buf->dev;
    *nbytes = buf->nbytes;
}

/* The signature of the op list and its per-step uploads (in the order the
 * ops' h2d calls make them).  SI_OK, or CU_GRAPH_DECLINED for a list
 * that must run op by op (a kernel plugin's op, per-step data that the
 * op-by-op path will refuse with its own error, out of host memory). */
static int scan(si_backend *b, cu_graphs *G, const si_op *ops, size_t n_ops)
{
    cu_gsig *s = &G->sig;
    cu_gsig_reset(s);
    G->up.used = 0;
    G->get_rows = false;
    G->n_host_ids = 0;
    cu_gsig_put(s, n_ops);
    for (size_t i = 0; i < n_ops; i++) {
        const si_op *op = &ops[i];
        if (op->kind >= SI_OP_KIND_COUNT)
            return CU_GRAPH_DECLINED;
        /* A kernel plugin's supports() may rely on a checked op. */
        if (b->kern[op->kind].ops != NULL &&
            (si_oc_check(&b->oc, op, NULL) != SI_OK || cu_kernel_for(b, op) != NULL))
            return CU_GRAPH_DECLINED;
        G->n_host_ids += op->kind == SI_OP_HOST_IDS;
        cu_gsig_op(s, op, buf_id);
        if (op->kind == SI_OP_GET_ROWS) {
            G->get_rows |= op->src[1] != NULL && op->src[1]->ne[0] > 0;
        } else if (op->kind == SI_OP_ATTN) {
            const si_attn_params *p = &op->p.attn;
            if (op->src[0] == NULL)
                return CU_GRAPH_DECLINED;
            const int64_t n = si_oc_ne(op->src[0], 1);
            if (n <= 0)
                continue;
            if (p->kv == NULL || p->pos == NULL || p->seq == NULL || n > 0x7fffffffLL)
                return CU_GRAPH_DECLINED;
            int32_t max_len = 0;
            for (int64_t t = 0; t < n; t++)
                if (p->pos[t] >= max_len)
                    max_len = p->pos[t] == INT32_MAX ? INT32_MAX : p->pos[t] + 1;
            const si_kv *kv = p->kv;
            cu_gsig_put(s, (uint64_t)si_cu_attn_bucket(max_len));
            cu_gsig_put(s, (uint64_t)(uintptr_t)kv->k);
            cu_gsig_put(s, (uint64_t)(uintptr_t)kv->v);
            cu_gsig_put(s, (uint64_t)(uintptr_t)kv->ks);
            cu_gsig_put(s, (uint64_t)(uintptr_t)kv->vs);
            cu_gsig_put(s, (uint64_t)(uintptr_t)kv->table);
            cu_gsig_put(s, (uint64_t)kv->d.n_ctx << 32 | kv->d.n_seq);
            cu_gsig_put(s, (uint64_t)kv->max_pages << 2 | (uint64_t)kv->i8 << 1 | kv->f16);
            int64_t gdn_runs, gdn_len;   /* (a GDN op's) */
            if (cu_up_op(&G->up, op, 0, &gdn_runs, &gdn_len) != 1)
                return CU_GRAPH_DECLINED;
        } else if (op->kind == SI_OP_TOPK) {
            /* Penalty lists change every step and are uploaded by the op
             * itself: such a head runs op by op (greedy has none). */
            if (op->p.topk.pen_off != NULL)
                return CU_GRAPH_DECLINED;
        } else if (op->kind == SI_OP_GDN) {
            const si_gdn_params *p = &op->p.gdn;
            if (op->src[0] == NULL)
                return CU_GRAPH_DECLINED;
            const int64_t n = si_oc_ne(op->src[0], 1);
            if (n <= 0)
                continue;
            if (p->seq == NULL || p->state == NULL)
                return CU_GRAPH_DECLINED;
            int64_t n_runs = 0, max_len = 0;
            if (cu_up_op(&G->up, op, cu_up_chunk_min(b), &n_runs, &max_len) != 1)
                return CU_GRAPH_DECLINED;
            cu_gsig_put(s, (uint64_t)n_runs);
            cu_gsig_put(s, (uint64_t)max_len);
        }
    }
    return s->oom ? CU_GRAPH_DECLINED : SI_OK;
}

static int replay(si_backend *b, cu_graphs *G, cu_gentry *e, const si_op *ops, size_t n_ops, si_err *err)
{
    cu_graph *g = e->payload;
    if (G->up.used != g->stage_bytes)
        return CU_GRAPH_DECLINED;   /* cannot happen: the sizes are in the signature */
    si_err scratch = { 0 };
    if (cu_attn_commit_all(b, ops, n_ops, true, &scratch) != SI_OK)
        return CU_GRAPH_DECLINED;   /* op by op reports the bad position itself */
    /* The previous launch of this graph has copied its staging out. */
    cudaError_t ce = cudaEventSynchronize(g->staged != NULL ? g->staged : g->done);
    if (ce == cudaSuccess) {
        if (G->up.used > 0)
            memcpy(g->stage, G->up.host, G->up.used);
        if (G->t0 != NULL) {
            G->host_ms = ms_now() - G->host_ms;   /* (cu_graph_exec set the start) */
            ce = cudaEventRecord(G->t0, b->stream);
        }
        if (ce == cudaSuccess)
            ce = cudaGraphLaunch(g->exec, b->stream);
        /* (not timed with a HOST_IDS in it: it waits for a post that
         * comes after the exec returns) */
        if (ce == cudaSuccess && G->t0 != NULL && G->n_host_ids == 0 &&
            cudaEventRecord(G->t1, b->stream) == cudaSuccess)
            time_replay(G, n_ops);
        if (ce == cudaSuccess)
            b->post_queued += G->n_host_ids;
    }
    if (ce != cudaSuccess) {
        cu_attn_uncommit(ops, n_ops, n_ops);
        cudaGetLastError();
        b->host->log(b->host, SI_LOG_WARN, CU_NAME, "graph replay failed (%s): exec runs op by op from now on",
                     cudaGetErrorString(ce));
        graph_free(NULL, g);
        e->payload = NULL;
        e->state = CU_G_NEVER;
        G->n_fail++;
        return CU_GRAPH_DECLINED;
    }
    if ((ce = cudaEventRecord(g->done, b->stream)) != cudaSuccess) {
        /* The graph is enqueued and runs: only the reuse guard is lost. */
        cudaStreamSynchronize(b->stream);
        return si_err_set(err, SI_EDEVICE, CU_NAME ": graph event: %s", cudaGetErrorString(ce));
    }
    if (g->get_rows)
        b->flag_pending = true;
    b->xq_key = NULL;
    G->n_replay++;
    return SI_OK;
}

/* profile = graph: what a captured graph holds, by node type (a copy or
 * an event between two kernels is a full dependency: the kernel after it
 * cannot launch early). */
static void log_nodes(si_backend *b, cudaGraph_t graph, size_t n_ops)
{
    size_t n = 0;
    if (cudaGraphGetNodes(graph, NULL, &n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return;
    }
    cudaGraphNode_t *nodes = malloc(n * sizeof *nodes);
    if (nodes == NULL)
        return;
    size_t k = 0, copy = 0, set = 0, other = 0;
    if (cudaGraphGetNodes(graph, nodes, &n) == cudaSuccess) {
        for (size_t i = 0; i < n; i++) {
            enum cudaGraphNodeType t;
            if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess)
                t = cudaGraphNodeTypeEmpty;
            k += t == cudaGraphNodeTypeKernel;
            copy += t == cudaGraphNodeTypeMemcpy;
            set += t == cudaGraphNodeTypeMemset;
            other += t != cudaGraphNodeTypeKernel && t != cudaGraphNodeTypeMemcpy && t != cudaGraphNodeTypeMemset;
        }
        b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                     "profile: captured a graph of %zu ops: %zu nodes (%zu kernels, %zu copies, %zu memsets, %zu other)",
                     n_ops, n, k, copy, set, other);
    }
    cudaGetLastError();
    free(nodes);
}

static int capture(si_backend *b, cu_graphs *G, cu_gentry *e, const si_op *ops, size_t n_ops, si_err *err)
{
    (void)err;
    si_err scratch = { 0 };
    /* Validate every position first (nothing must be half-captured when
     * the op-by-op path is going to refuse the list), then undo: the
     * captured attn_exec advances the lengths itself. */
    if (cu_attn_commit_all(b, ops, n_ops, false, &scratch) != SI_OK)
        return CU_GRAPH_DECLINED;
    cu_attn_uncommit(ops, n_ops, n_ops);
    cu_graph *g = calloc(1, sizeof *g);
    if (g == NULL)
        return CU_GRAPH_DECLINED;
    g->stage_bytes = G->up.used;
    cudaError_t ce = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming);
    if (ce != cudaSuccess)
        g->done = NULL;
    else if (b->h2d_early && g->stage_bytes > 0 &&
             (ce = cudaEventCreateWithFlags(&g->staged, cudaEventDisableTiming)) != cudaSuccess)
        g->staged = NULL;
    else if (g->stage_bytes > 0 && (ce = cudaMallocHost((void **)&g->stage, g->stage_bytes)) != cudaSuccess)
        g->stage = NULL;
    if (ce != cudaSuccess) {
        cudaGetLastError();
        graph_free(NULL, g);
        return CU_GRAPH_DECLINED;
    }
    b->cap_stage = g->stage;
    b->cap_stage_cap = g->stage_bytes;
    b->cap_stage_used = 0;
    b->cap_grow = false;
    b->capturing = true;
    size_t i = 0, ran = 0;   /* ops [0, ran) ran their host side (KV lengths) */
    int rc = SI_OK;
    cudaGraph_t graph = NULL;
    b->n_twice = 0;
    ce = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal);
    if (ce == cudaSuccess) {
        size_t n = 0;
        rc = cu_up_begin(b, ops, n_ops, &scratch);
        /* (all of stage went up in that one copy when it made one; an
         * external record is a node of the graph, a plain one would only
         * mark the capture) */
        const bool whole = rc == SI_OK && b->up_ops != NULL && b->cap_stage_used == g->stage_bytes;
        if (!whole && g->staged != NULL) {
            cudaEventDestroy(g->staged);
            g->staged = NULL;
        }
        cudaError_t ce3;
        if (whole && g->staged != NULL &&
            (ce3 = cudaEventRecordWithFlags(g->staged, b->stream, cudaEventRecordExternal)) != cudaSuccess)
            rc = si_err_set(&scratch, SI_EDEVICE, CU_NAME ": an event in the graph: %s", cudaGetErrorString(ce3));
        for (; i < n_ops && rc == SI_OK; i += n)
            rc = cu_exec_ops(b, ops, n_ops, i, &n, &scratch);
        ran = rc != SI_OK ? i - n : i;   /* the failed op (or group) committed nothing */
        if (rc == SI_OK)
            rc = cu_dn_resolve(b, &scratch);   /* (a deferred norm leaves the list whole) */
        cu_up_end(b);
        cudaError_t ce2 = cudaStreamEndCapture(b->stream, &graph);
        if (ce == cudaSuccess)
            ce = ce2;
    }
    b->capturing = false;
    b->cap_stage = NULL;
    bool ok = ce == cudaSuccess && rc == SI_OK && graph != NULL && b->cap_stage_used == g->stage_bytes;
    if (ok && G->t0 != NULL)
        log_nodes(b, graph, n_ops);
    if (ok)
        ok = (ce = cudaGraphInstantiate(&g->exec, graph, 0)) == cudaSuccess;
    if (graph != NULL)
        cudaGraphDestroy(graph);
    if (ok)
        ok = (ce = cudaGraphLaunch(g->exec, b->stream)) == cudaSuccess;
    if (ok)
        b->post_queued += G->n_host_ids;
    if (!ok) {
        /* Nothing of the list ran: undo what the captured ops did on the
         * host, so the op-by-op run finds the state it expects. */
        cudaGetLastError();
        cu_attn_uncommit(ops, n_ops, ran);
        b->xq_key = NULL;
        b->dn_on = false;
        graph_free(NULL, g);
        e->fails++;
        e->state = b->cap_grow && e->fails < GROW_RETRIES ? CU_G_SEEN : CU_G_NEVER;
        if (e->state == CU_G_NEVER) {
            G->n_fail++;
            if (!G->told) {
                G->told = true;
                b->host->log(b->host, SI_LOG_INFO, CU_NAME, "an exec of %zu ops is not captured as a graph (%s); it runs op by op",
                             n_ops, rc != SI_OK ? scratch.msg : ce != cudaSuccess ? cudaGetErrorString(ce) : "staging mismatch");
            }
        }
        return CU_GRAPH_DECLINED;
    }
    if (b->prof_twice != CU_TWICE_OFF)
        b->host->log(b->host, SI_LOG_INFO, CU_NAME, "profile_twice: a graph of %zu ops runs %zu units twice%s",
                     n_ops, b->n_twice, b->prof_twice == CU_TWICE_EMPTY ? " (an empty launch after each)" : "");
    g->gen = b->ws_gen;
    g->get_rows = G->get_rows;
    e->payload = g;
    e->state = CU_G_READY;
    G->n_capture++;
    b->xq_key = NULL;
    if ((ce = cudaEventRecord(g->done, b->stream)) != cudaSuccess) {
        cudaStreamSynchronize(b->stream);
        return si_err_set(err, SI_EDEVICE, CU_NAME ": graph event: %s", cudaGetErrorString(ce));
    }
    return SI_OK;
}

int cu_graph_exec(si_backend *b, const si_op *ops, size_t n_ops, si_err *err)
{
    cu_graphs *G = b->graphs;
    if (G != NULL && G->t0 != NULL)
        G->host_ms = ms_now();
    if (G != NULL && b->graph_retry) {
        cu_gcache_retry(&G->cache);
        b->graph_retry = false;
    }
    if (G == NULL || n_ops == 0 || scan(b, G, ops, n_ops) != SI_OK)
        return CU_GRAPH_DECLINED;
    cu_gentry *e = cu_gcache_find(&G->cache, &G->sig);
    if (e == NULL) {
        cu_gcache_add(&G->cache, &G->sig);   /* NULL (no memory): simply not cached */
        G->n_seen++;
        return CU_GRAPH_DECLINED;
    }
    if (e->state == CU_G_NEVER)
        return CU_GRAPH_DECLINED;
    if (e->state == CU_G_READY) {
        const cu_graph *g = e->payload;
        if (g->gen == b->ws_gen)
            return replay(b, G, e, ops, n_ops, err);
        /* It holds a freed workspace or reads weights as they were at
         * its capture: this step runs op by op, so whatever a capture
         * cannot make (a weight copy, reopened by cu_kv_free) is made
         * now, and the next step captures the list again. */
        graph_free(NULL, e->payload);
        e->payload = NULL;
        e->state = CU_G_SEEN;
        return CU_GRAPH_DECLINED;
    }
    return capture(b, G, e, ops, n_ops, err);
}
