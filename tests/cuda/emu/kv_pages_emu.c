/* tests/cuda/emu/kv_pages_emu.c — the page table host logic of cuda_kv.c
 * (cu_kv_create / cu_kv_pages_reserve / cu_kv_seq_reset, kv_type = i8) on a
 * fake CUDA runtime in which device memory is host memory and copies are
 * immediate, so the device table can be compared with the host mirror.
 * Checks: one multi-token op across page boundaries takes exactly the pages
 * it needs, lowest id first; the device table equals the host mirror;
 * exhaustion fails with SI_ENOMEM and changes nothing (free list, owned
 * pages, device table); reset returns the pages and the next sequence gets
 * them back in order; a failed staging upload gives the pages back.  And
 * cu_kv_create's use of the weight-copy caches: they yield their memory
 * only where that makes the cache fit, and reopen when it is freed.
 * Built and run by run-attn-emu.sh. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

/* ---- the fake runtime ---------------------------------------------------- */
cudaError_t cudaMalloc(void **p, size_t n) { *p = calloc(1, n); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { (void)s; memset(p, v, n); return cudaSuccess; }
static size_t fake_free = (size_t)1 << 34;   /* what cudaMemGetInfo says is free */
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = fake_free; *t = (size_t)1 << 34; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { (void)e; return "fake"; }
static int copies;
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    (void)k; (void)st;
    memcpy(d, s, n);
    copies++;
    return cudaSuccess;
}
static int pin_fail;   /* the next cu_pin_reserve fails */
static unsigned char pin_arena[1 << 16];
void *cu_pin_reserve(si_backend *b, size_t bytes, si_err *err)
{
    (void)b;
    if (pin_fail || bytes > sizeof pin_arena) {
        pin_fail = 0;
        si_err_set(err, SI_ENOMEM, "fake: no staging");
        return NULL;
    }
    memset(pin_arena, 0xee, sizeof pin_arena);   /* what a later reuse would do */
    return pin_arena;
}
/* (cuda_w8cache.c's, which needs the kernels; here the caches are only
 * their byte counts, which free memory gets back) */
static int yields;
size_t cu_wcache_yield(si_backend *b, cu_wcache *c)
{
    (void)b;
    const size_t held = c->bytes;
    fake_free += held;
    c->bytes = 0;
    c->full = true;
    yields++;
    return held;
}
static void host_log(const si_host *h, int level, const char *who, const char *fmt, ...)
{
    (void)h; (void)level; (void)who; (void)fmt;
}

/* ---- checks -------------------------------------------------------------- */
static int fails;
#define CHECK(c, ...) do { if (!(c)) { printf("  FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); fails++; } } while (0)

static void check_mirror(const si_kv *kv, const char *when)
{
    for (uint32_t s = 0; s < kv->d.n_seq; s++)
        for (uint32_t j = 0; j < kv->seq_pages[s]; j++) {
            size_t i = (size_t)s * kv->max_pages + j;
            CHECK(kv->table[i] == kv->table_host[i], "%s: seq %u page %u: device %d host %d", when, s, j, kv->table[i],
                  kv->table_host[i]);
        }
    /* every page owned by exactly one sequence or free */
    int *seen = calloc(kv->n_pages, sizeof *seen);
    for (uint32_t s = 0; s < kv->d.n_seq; s++)
        for (uint32_t j = 0; j < kv->seq_pages[s]; j++)
            seen[kv->table_host[(size_t)s * kv->max_pages + j]]++;
    for (uint32_t i = 0; i < kv->n_free; i++)
        seen[kv->free_list[i]]++;
    for (uint32_t p = 0; p < kv->n_pages; p++)
        CHECK(seen[p] == 1, "%s: page %u owned/free %d times", when, p, seen[p]);
    free(seen);
}

/* A dense f16 cache of 2 MiB (1 layer, 4096 positions of one 128-wide kv
 * head, K and V) against 1 MiB free and the weight copies' bytes. */
static void yield_checks(void)
{
    si_host host = { 0 };
    host.log = host_log;
    si_backend b = { 0 };
    b.host = &host;
    b.kv_type = SI_TYPE_F16;
    si_kv_desc d = { 0 };
    d.size = sizeof d;
    d.n_layer = 1; d.n_head_kv = 1; d.head_dim = 128; d.n_seq = 1; d.n_ctx = 4096;
    const size_t kib = 1024;
    si_kv *kv = NULL;
    si_err err = { { 0 } };
    /* copies too small to make room: refused, the copies kept */
    fake_free = 1024 * kib;
    b.rg.bytes = 256 * kib;
    b.w8c.bytes = 256 * kib;
    yields = 0;
    int rc = cu_kv_create(&b, &d, &kv, &err);
    CHECK(rc == SI_ENOMEM && kv == NULL && yields == 0 && !b.rg.full && b.rg.bytes == 256 * kib,
          "no room even without the copies: rc %d, %d yields", rc, yields);
    CHECK(strstr(err.msg, "KV cache needs") != NULL, "message: %s", err.msg);
    /* enough free: no yield */
    fake_free = 4096 * kib;
    rc = cu_kv_create(&b, &d, &kv, &err);
    CHECK(rc == SI_OK && yields == 0 && !b.rg.full && !b.w8c.full, "room: rc %d %s, %d yields", rc, err.msg, yields);
    uint64_t gen = b.ws_gen;
    cu_kv_free(&b, kv);
    kv = NULL;
    CHECK(b.ws_gen == gen, "a cache freed with the copies open made graphs stale");
    /* room only without the copies: both yield, the cache is made, and
     * freeing it reopens them */
    fake_free = 1024 * kib;
    b.rg.bytes = 768 * kib;
    b.w8c.bytes = 512 * kib;
    rc = cu_kv_create(&b, &d, &kv, &err);
    CHECK(rc == SI_OK && yields == 2 && b.rg.full && b.w8c.full && b.rg.bytes == 0 && b.w8c.bytes == 0,
          "yield: rc %d %s, %d yields", rc, err.msg, yields);
    gen = b.ws_gen;
    cu_kv_free(&b, kv);
    CHECK(!b.rg.full && !b.w8c.full, "the copies stay closed after the cache is freed");
    /* graphs captured while they were closed read the GGUF rows: stale,
     * so their next step runs op by op and makes the copies */
    CHECK(b.ws_gen != gen, "graphs captured without the copies stay current after the cache is freed");
    fake_free = (size_t)1 << 34;
}

int main(void)
{
    si_host host = { 0 };
    host.log = host_log;
    si_backend b = { 0 };
    b.host = &host;
    b.kv_type = SI_TYPE_I8;
    b.kv_pages = 10;
    si_kv_desc d = { 0 };
    d.size = sizeof d;
    d.n_layer = 2; d.n_head_kv = 2; d.head_dim = 128; d.n_seq = 3; d.n_ctx = 100;   /* 7 pages per sequence */
    si_kv *kv = NULL;
    si_err err = { { 0 } };
    int rc = cu_kv_create(&b, &d, &kv, &err);
    CHECK(rc == SI_OK, "create: %s", err.msg);
    if (rc != SI_OK)
        return 1;
    CHECK(kv->max_pages == 7 && kv->n_pages == 10 && kv->n_free == 10, "plan: %u pages of %u", kv->max_pages,
          kv->n_pages);
    uint32_t len[3] = { 0, 0, 0 }, added[3] = { 0, 0, 0 };
    /* one op: seq 0 gets 15 positions (1 page), seq 1 gets 33 (3 pages, two boundaries) */
    added[0] = 15; added[1] = 33;
    rc = cu_kv_pages_reserve(&b, kv, len, added, 0, &err);
    CHECK(rc == SI_OK && kv->seq_pages[0] == 1 && kv->seq_pages[1] == 3 && kv->n_free == 6, "reserve 1: rc %d %s", rc,
          err.msg);
    CHECK(kv->table_host[0] == 0 && kv->table_host[7] == 1 && kv->table_host[8] == 2 && kv->table_host[9] == 3,
          "lowest ids first: %d %d %d %d", kv->table_host[0], kv->table_host[7], kv->table_host[8], kv->table_host[9]);
    check_mirror(kv, "after reserve 1");
    len[0] = 15; len[1] = 33;
    /* the same op again for layer 1 (same len): nothing new, no upload */
    int c0 = copies;
    rc = cu_kv_pages_reserve(&b, kv, len, (uint32_t[3]){ 0, 0, 0 }, 1, &err);
    CHECK(rc == SI_OK && copies == c0 && kv->n_free == 6, "no-op reserve");
    /* position 15 (last slot of page 0) needs nothing; 16 crosses */
    added[0] = 1; added[1] = 0;
    rc = cu_kv_pages_reserve(&b, kv, len, added, 0, &err);
    CHECK(rc == SI_OK && kv->seq_pages[0] == 1 && kv->n_free == 6, "pos 15 took a page");
    len[0] = 16;
    rc = cu_kv_pages_reserve(&b, kv, len, added, 0, &err);
    CHECK(rc == SI_OK && kv->seq_pages[0] == 2 && kv->table_host[1] == 4 && kv->n_free == 5, "pos 16: %u pages",
          kv->seq_pages[0]);
    len[0] = 17;
    check_mirror(kv, "after boundary");
    /* exhaustion: seq 2 wants 5 pages (80 positions) with 5 free, and seq 0
     * 1 more in the same op: refused, nothing changes */
    uint32_t snap_free = kv->n_free, snap_sp[3];
    int32_t snap_tab[21], snap_dev[21], snap_fl[10];
    memcpy(snap_sp, kv->seq_pages, sizeof snap_sp);
    memcpy(snap_tab, kv->table_host, sizeof snap_tab);
    memcpy(snap_dev, kv->table, sizeof snap_dev);
    memcpy(snap_fl, kv->free_list, sizeof snap_fl);
    uint32_t add2[3] = { 16, 0, 80 };
    c0 = copies;
    rc = cu_kv_pages_reserve(&b, kv, len, add2, 0, &err);
    CHECK(rc == SI_ENOMEM, "exhaustion: rc %d", rc);
    printf("  exhaustion message: %s\n", err.msg);
    CHECK(kv->n_free == snap_free && !memcmp(snap_sp, kv->seq_pages, sizeof snap_sp) &&
              !memcmp(snap_tab, kv->table_host, sizeof snap_tab) && !memcmp(snap_dev, kv->table, sizeof snap_dev) &&
              !memcmp(snap_fl, kv->free_list, sizeof snap_fl) && copies == c0,
          "exhaustion changed something");
    /* exactly the free pages: fits */
    uint32_t add3[3] = { 0, 0, 80 };
    rc = cu_kv_pages_reserve(&b, kv, len, add3, 0, &err);
    CHECK(rc == SI_OK && kv->n_free == 0 && kv->seq_pages[2] == 5, "exact fit: rc %d %s", rc, err.msg);
    len[2] = 80;
    check_mirror(kv, "full");
    /* a failed staging upload gives its pages back */
    cu_kv_seq_reset(&b, kv, 0, &err);
    len[0] = 0;
    CHECK(kv->n_free == 2 && kv->seq_pages[0] == 0, "reset: %u free", kv->n_free);
    pin_fail = 1;
    rc = cu_kv_pages_reserve(&b, kv, len, (uint32_t[3]){ 20, 0, 0 }, 0, &err);
    CHECK(rc == SI_ENOMEM && kv->n_free == 2 && kv->seq_pages[0] == 0, "staging failure: rc %d, %u free", rc,
          kv->n_free);
    check_mirror(kv, "after staging failure");
    /* reset then reuse: the reset pages come back in their order (0, 4) */
    rc = cu_kv_pages_reserve(&b, kv, len, (uint32_t[3]){ 20, 0, 0 }, 0, &err);
    CHECK(rc == SI_OK && kv->table_host[0] == 0 && kv->table_host[1] == 4 && kv->table[0] == 0 && kv->table[1] == 4,
          "reuse after reset: %d %d (device %d %d)", kv->table_host[0], kv->table_host[1], kv->table[0], kv->table[1]);
    len[0] = 20;
    check_mirror(kv, "after reuse");
    /* reset of every sequence: the whole pool is free again, each once */
    for (uint32_t s = 0; s < 3; s++)
        cu_kv_seq_reset(&b, kv, s, &err);
    CHECK(kv->n_free == 10, "all reset: %u free", kv->n_free);
    check_mirror(kv, "all reset");
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t s = 0; s < 3; s++)
            CHECK(kv->len[l * 3 + s] == 0, "len[%u][%u] = %u after reset", l, s, kv->len[l * 3 + s]);
    cu_kv_free(&b, kv);
    yield_checks();
    printf("kv_pages_emu: %s\n", fails ? "FAIL" : "OK");
    return fails != 0;
}
