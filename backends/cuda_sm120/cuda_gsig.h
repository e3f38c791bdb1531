/* backends/cuda_sm120/cuda_gsig.h — the host-only half of CUDA graph
 * replay (knob graph = true, cuda_graph.c): the signature of an exec and
 * the small cache of graphs keyed by it.  Plain C, no CUDA: the unit test
 * (tests/cuda/check_cuda_gsig.c) builds it without a GPU.
 *
 * A signature is a flat array of 64-bit words holding everything about an
 * op list that a captured graph has baked in: op kinds, every tensor's
 * device address, size of its buffer, offset, type and shape, the op
 * parameters, plus words the caller appends (per-step values that select
 * a grid, e.g. the bucketed attention length).  It leaves out what a replay
 * restages each step (the host arrays pos/seq: only whether they are
 * given).  Two execs with equal signatures enqueue the same kernels with
 * the same arguments, so one graph serves both. */
#ifndef SI_CUDA_GSIG_H
#define SI_CUDA_GSIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sparkinfer/plugin.h>

typedef struct cu_gsig {
    uint64_t *w;
    size_t    n, cap;
    bool      oom;          /* a put could not grow the array: unusable   */
} cu_gsig;

/* What the signature knows of a buffer: its device address and size
 * (si_buf is the backend's own type). */
typedef void (*cu_gsig_buf_fn)(const si_buf *buf, uint64_t *dev, uint64_t *nbytes);

void     cu_gsig_reset(cu_gsig *s);
void     cu_gsig_free(cu_gsig *s);
void     cu_gsig_put(cu_gsig *s, uint64_t v);
/* The static words of one op (see above). */
void     cu_gsig_op(cu_gsig *s, const si_op *op, cu_gsig_buf_fn buf_id);
uint64_t cu_gsig_hash(const cu_gsig *s);

/* ---- the cache -----------------------------------------------------------
 * A signature is first SEEN (run op by op: that run also grows every
 * workspace to this exec's size), captured the next time (READY, with the
 * caller's payload), or NEVER when capture failed for good.  LRU eviction;
 * `drop` frees a payload (evicted, invalidated, or at clear). */
enum { CU_G_SEEN = 0, CU_G_READY = 1, CU_G_NEVER = 2 };

#define CU_GCACHE_MAX 16

typedef struct cu_gentry {
    uint64_t  hash;
    uint64_t *w;
    size_t    n;
    uint64_t  tick;         /* last lookup that found it                  */
    int       state;
    unsigned  fails;        /* captures that failed (retried while small) */
    void     *payload;
} cu_gentry;

typedef struct cu_gcache {
    cu_gentry e[CU_GCACHE_MAX];
    size_t    n;
    uint64_t  tick;
    void    (*drop)(void *ctx, void *payload);
    void     *ctx;
} cu_gcache;

/* The entry of this signature (hash, then every word compared), or NULL. */
cu_gentry *cu_gcache_find(cu_gcache *c, const cu_gsig *s);
/* A new SEEN entry for s (a copy of its words), evicting the least
 * recently used entry when full; NULL when out of host memory. */
cu_gentry *cu_gcache_add(cu_gcache *c, const cu_gsig *s);
/* Drops every payload (READY entries go back to SEEN, NEVER stays). */
void       cu_gcache_invalidate(cu_gcache *c);
/* NEVER entries back to SEEN with no failures counted: the backend's path
 * changed (a knob turned itself off), so a list whose capture failed may
 * capture now. */
void       cu_gcache_retry(cu_gcache *c);
void       cu_gcache_clear(cu_gcache *c);

#endif
