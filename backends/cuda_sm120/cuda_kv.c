/* backends/cuda_sm120/cuda_kv.c — the KV cache of the full-attention
 * layers (the model's si_kv_desc counts only those), in one of two forms
 * chosen by the knob kv_type:
 *
 * f16 | f32 (dense): per layer one device array [seq][ctx][kv_head][hd]
 *   for K and one for V; every sequence owns n_ctx positions up front.
 *
 * i8 (paged): per layer a pool of pages of SI_KV_PAGE (16) positions,
 *   K and V int8 [page][kv_head][16][hd] and f32 scales [page][kv_head][16]
 *   (scale = max|x| / 127 of one (position, kv head) row).  kv_head before
 *   the position inside a page because one attention block reads one kv
 *   head: its 16 rows of a page are then one contiguous 16*hd-byte run
 *   (4 KiB at hd 256), its 16 scales 64 bytes.  Scales are f32: 4 bytes
 *   next to hd = 256 bytes of row is 1.6%, and f16 would add its own
 *   rounding (2^-11) and range limits to a number every element uses.
 *   One page id addresses the same page in every layer's pool, so there
 *   is one page table for all layers: device int32 [n_seq][max_pages]
 *   (max_pages = ceil(n_ctx / 16)) with a host mirror, and one host free
 *   list (a stack; pages are handed out lowest id first).  A sequence
 *   takes pages when an ATTN op appends a position in a page it does not
 *   own yet (cu_kv_pages_reserve: exec calls it for all its ATTN ops
 *   before it enqueues anything, so a full pool fails a whole forward
 *   before any layer ran; all or nothing), the new table entries go up on
 *   the stream ahead of the kernels, and kv_seq_reset returns them.  The pool holds kv_pages pages per layer
 *   (knob; default n_seq * max_pages, i.e. exactly what the dense cache
 *   holds, so nothing that fits today stops fitting); a request for a
 *   page when none is free is SI_ENOMEM naming the sequence, the position
 *   and the pool, and changes nothing.
 *
 * Both are checked against the device's free memory before allocating:
 * a cache that does not fit is SI_ENOMEM with the sizes, never a crash.
 * The weight copies made for speed (gemv_q6r/q8r at load, w8_cache) give
 * their memory back first where that makes the cache fit (cu_wcache_yield:
 * the products read the GGUF rows again, the same results). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_internal.h"

void cu_kv_free(si_backend *b, si_kv *kv)
{
    if (kv == NULL)
        return;
    if (b != NULL && b->stream != NULL)
        cudaStreamSynchronize(b->stream);
    cudaFree(kv->k);
    cudaFree(kv->v);
    cudaFree(kv->ks);
    cudaFree(kv->vs);
    cudaFree(kv->table);
    free(kv->len);
    free(kv->table_host);
    free(kv->seq_pages);
    free(kv->free_list);
    free(kv);
    /* Its memory is free again: the weight copies it may have taken back
     * (cu_wcache_yield in cu_kv_create) may be made again, on their next
     * use (a bench sweeping contexts frees and makes the cache per
     * context; the smaller ones should not run without the copies). */
    if (b != NULL && (b->rg.full || b->w8c.full)) {
        b->rg.full = b->w8c.full = false;
        b->ws_gen++;   /* graphs captured without them are stale (and the next step runs op by op, making them) */
    }
}

static const char *kv_type_name(const si_kv *kv) { return kv->i8 ? "i8 paged" : kv->f16 ? "f16" : "f32"; }

/* Allocates `bytes` of device memory at *p, zeroed (rows are read only
 * after they were written; zeros keep stray reads, a bug, finite). */
static int dev_zalloc(si_backend *b, void **p, size_t bytes, si_err *err)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return si_err_set(err, SI_ENOMEM, CU_NAME ": KV cache: cannot allocate %zu bytes (%zu free): %s", bytes,
                          free_b, cudaGetErrorString(e));
    }
    if ((e = cudaMemsetAsync(*p, 0, bytes, b->stream)) != cudaSuccess)
        return si_err_set(err, SI_EDEVICE, CU_NAME ": KV cache: %s", cudaGetErrorString(e));
    return SI_OK;
}

/* Sizes of the paged cache: pages per layer, bytes of one layer's K (or
 * V) pool and of its scales; SI_EINVAL/SI_EUNSUPPORTED when the shape or
 * knob cannot be served. */
static int paged_plan(si_backend *b, si_kv *kv, si_err *err)
{
    const si_kv_desc *d = &kv->d;
    const uint32_t hd = d->head_dim;
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128 && hd != 256)
        return si_err_set(err, SI_EUNSUPPORTED,
                          CU_NAME ": kv_type = i8 needs head_dim 16, 32, 64, 128 or 256 (this model: %u); "
                          "use kv_type = f16", hd);
    kv->max_pages = (d->n_ctx + SI_KV_PAGE - 1) / SI_KV_PAGE;
    uint64_t all = (uint64_t)d->n_seq * kv->max_pages;
    uint64_t pages = all;
    if (b->kv_pages > 0) {
        pages = b->kv_pages;
        if (pages > all) {
            b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                         "kv_pages = %u is more than %u seqs x %u pages can use: pool of %llu pages", b->kv_pages,
                         d->n_seq, kv->max_pages, (unsigned long long)all);
            pages = all;
        }
    }
    if (pages > 0x7fffffffu)
        return si_err_set(err, SI_EINVAL, CU_NAME ": KV pool of %llu pages (%u seqs x %u ctx): more than 2^31 - 1",
                          (unsigned long long)pages, d->n_seq, d->n_ctx);
    kv->n_pages = (uint32_t)pages;
    kv->layer_bytes = pages * d->n_head_kv * SI_KV_PAGE * hd;
    kv->layer_scales = pages * d->n_head_kv * SI_KV_PAGE;
    return SI_OK;
}

int cu_kv_create(si_backend *b, const si_kv_desc *d, si_kv **out, si_err *err)
{
    if (b == NULL || out == NULL || d == NULL || !SI_HAS_MEMBER(d, si_kv_desc, n_ctx))
        return si_err_set(err, SI_EINVAL, CU_NAME ": kv_create: descriptor missing or too small");
    if (d->n_layer == 0 || d->n_head_kv == 0 || d->head_dim == 0 || d->n_seq == 0 || d->n_ctx == 0)
        return si_err_set(err, SI_EINVAL,
                          CU_NAME ": kv_create: every size must be > 0 (layers %u, kv heads %u, head_dim %u, seqs %u, ctx %u)",
                          d->n_layer, d->n_head_kv, d->head_dim, d->n_seq, d->n_ctx);
    si_kv *kv = calloc(1, sizeof *kv);
    if (kv == NULL)
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    kv->d = *d;
    kv->d.size = sizeof kv->d;
    kv->i8 = b->kv_type == SI_TYPE_I8;
    kv->f16 = b->kv_type == SI_TYPE_F16;
    kv->elem = kv->i8 ? 1 : kv->f16 ? 2 : 4;
    double total;   /* device bytes of the whole cache */
    if (kv->i8) {
        int rc = paged_plan(b, kv, err);
        if (rc != SI_OK) {
            free(kv);
            return rc;
        }
        total = 2.0 * d->n_layer * ((double)kv->layer_bytes + 4.0 * (double)kv->layer_scales) +
                4.0 * d->n_seq * kv->max_pages;
    } else {
        kv->layer_bytes = (uint64_t)d->n_seq * d->n_ctx * d->n_head_kv * d->head_dim * kv->elem;
        total = 2.0 * (double)kv->layer_bytes * d->n_layer;
    }
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e == cudaSuccess && total > (double)free_b && total <= (double)free_b + (double)(b->rg.bytes + b->w8c.bytes)) {
        /* The weight copies (gemv_q6r/q8r, w8_cache) are only speed: the
         * cache the caller asked for comes first.  Products then read the
         * GGUF rows (the same results). */
        const size_t held = cu_wcache_yield(b, &b->rg) + cu_wcache_yield(b, &b->w8c);
        b->host->log(b->host, SI_LOG_WARN, CU_NAME,
                     "KV cache needs %.1f MiB, %.1f MiB free: the weight copies of gemv_q6r/q8r and w8_cache "
                     "(%.1f MiB) are freed for it, and no more are made while it lives", total / 1048576.0,
                     (double)free_b / 1048576.0, (double)held / 1048576.0);
        e = cudaMemGetInfo(&free_b, &total_b);
    }
    if (e != cudaSuccess) {
        free(kv);
        return si_err_set(err, SI_EDEVICE, CU_NAME ": cudaMemGetInfo: %s", cudaGetErrorString(e));
    }
    if (total > (double)free_b || total > (double)(SIZE_MAX / 4)) {
        int rc;
        if (kv->i8)
            rc = si_err_set(err, SI_ENOMEM,
                            CU_NAME ": KV cache needs %.0f bytes (%.1f MiB: %u layers x %u pages of %u positions x %u kv heads x %u, "
                            "i8 + f32 scales) but device %d has %zu bytes (%.1f MiB) free; lower kv_pages, n_seq or n_ctx",
                            total, total / 1048576.0, d->n_layer, kv->n_pages, SI_KV_PAGE, d->n_head_kv, d->head_dim,
                            b->device, free_b, (double)free_b / 1048576.0);
        else
            rc = si_err_set(err, SI_ENOMEM,
                            CU_NAME ": KV cache needs %.0f bytes (%.1f MiB: %u layers x %u seqs x %u ctx x %u kv heads x %u, %s) "
                            "but device %d has %zu bytes (%.1f MiB) free",
                            total, total / 1048576.0, d->n_layer, d->n_seq, d->n_ctx, d->n_head_kv, d->head_dim,
                            kv_type_name(kv), b->device, free_b, (double)free_b / 1048576.0);
        free(kv);
        return rc;
    }
    kv->len = calloc((size_t)d->n_layer * d->n_seq, sizeof *kv->len);
    if (kv->len == NULL) {
        free(kv);
        return si_err_set(err, SI_ENOMEM, "out of host memory");
    }
    const size_t bytes = (size_t)kv->layer_bytes * d->n_layer;
    int rc = SI_OK;
    if ((rc = dev_zalloc(b, (void **)&kv->k, bytes, err)) != SI_OK ||
        (rc = dev_zalloc(b, (void **)&kv->v, bytes, err)) != SI_OK) {
        cu_kv_free(b, kv);
        return rc;
    }
    if (kv->i8) {
        const size_t sbytes = (size_t)kv->layer_scales * d->n_layer * sizeof(float);
        const size_t tn = (size_t)d->n_seq * kv->max_pages;
        kv->table_host = calloc(tn, sizeof *kv->table_host);
        kv->seq_pages = calloc(d->n_seq, sizeof *kv->seq_pages);
        kv->free_list = malloc((size_t)kv->n_pages * sizeof *kv->free_list);
        if (kv->table_host == NULL || kv->seq_pages == NULL || kv->free_list == NULL) {
            cu_kv_free(b, kv);
            return si_err_set(err, SI_ENOMEM, "out of host memory");
        }
        for (uint32_t i = 0; i < kv->n_pages; i++)   /* popped from the end: page 0 first */
            kv->free_list[i] = (int32_t)(kv->n_pages - 1 - i);
        kv->n_free = kv->n_pages;
        if ((rc = dev_zalloc(b, (void **)&kv->ks, sbytes, err)) != SI_OK ||
            (rc = dev_zalloc(b, (void **)&kv->vs, sbytes, err)) != SI_OK ||
            (rc = dev_zalloc(b, (void **)&kv->table, tn * sizeof(int32_t), err)) != SI_OK) {
            cu_kv_free(b, kv);
            return rc;
        }
    }
    if ((e = cudaStreamSynchronize(b->stream)) != cudaSuccess) {
        cu_kv_free(b, kv);
        return si_err_set(err, SI_EDEVICE, CU_NAME ": KV cache: %s", cudaGetErrorString(e));
    }
    if (kv->i8)
        b->host->log(b->host, SI_LOG_INFO, CU_NAME,
                     "KV cache: %u layers, i8 paged: %u pages of %u positions (%u seqs x up to %u ctx), %.1f MiB, "
                     "%.0f bytes per position",
                     d->n_layer, kv->n_pages, SI_KV_PAGE, d->n_seq, d->n_ctx, total / 1048576.0,
                     2.0 * d->n_layer * d->n_head_kv * (d->head_dim + 4.0));
    else
        b->host->log(b->host, SI_LOG_INFO, CU_NAME, "KV cache: %u layers x %u seqs x %u ctx, %s, %.1f MiB", d->n_layer,
                     d->n_seq, d->n_ctx, kv_type_name(kv), total / 1048576.0);
    *out = kv;
    return SI_OK;
}

int cu_kv_seq_reset(si_backend *b, si_kv *kv, uint32_t seq, si_err *err)
{
    (void)b;
    if (kv == NULL)
        return si_err_set(err, SI_EINVAL, CU_NAME ": kv_seq_reset: no KV cache");
    if (seq >= kv->d.n_seq)
        return si_err_set(err, SI_ERANGE, CU_NAME ": kv_seq_reset: seq %u >= n_seq %u", seq, kv->d.n_seq);
    for (uint32_t l = 0; l < kv->d.n_layer; l++)
        kv->len[(size_t)l * kv->d.n_seq + seq] = 0;
    if (kv->i8) {
        /* Back on the stack in reverse, so the sequence that takes them next
         * gets them in the same order.  Kernels still in flight that read
         * these pages were enqueued before any later write to them (one
         * stream), so handing them out again right away is safe.  The
         * device table row keeps stale ids: it is read only below len. */
        const int32_t *row = kv->table_host + (size_t)seq * kv->max_pages;
        for (uint32_t j = kv->seq_pages[seq]; j-- > 0;)
            kv->free_list[kv->n_free++] = row[j];
        kv->seq_pages[seq] = 0;
    }
    return SI_OK;
}

int cu_kv_pages_reserve(si_backend *b, si_kv *kv, const uint32_t *len, const uint32_t *added, uint32_t layer,
                        si_err *err)
{
    const uint32_t n_seq = kv->d.n_seq;
    /* All or nothing: count first. */
    uint64_t want = 0;
    for (uint32_t s = 0; s < n_seq; s++) {
        if (added[s] == 0)
            continue;
        const uint32_t need = (len[s] + added[s] + SI_KV_PAGE - 1) / SI_KV_PAGE;
        if (need <= kv->seq_pages[s])
            continue;
        if (want + (need - kv->seq_pages[s]) > kv->n_free) {
            const uint32_t got = kv->seq_pages[s] + (uint32_t)(kv->n_free - want);
            const uint32_t at = got * SI_KV_PAGE > len[s] ? got * SI_KV_PAGE : len[s];
            return si_err_set(err, SI_ENOMEM,
                              CU_NAME ": ATTN: KV pool exhausted: seq %u needs a page for position %u (layer %u) but "
                              "%u of the pool's %u pages (%u positions each) are free and this op needs at least %llu; "
                              "nothing was written: reset a finished sequence or raise [backend." CU_NAME "] kv_pages",
                              s, at, layer, kv->n_free, kv->n_pages, SI_KV_PAGE,
                              (unsigned long long)(want + (need - kv->seq_pages[s])));
        }
        want += need - kv->seq_pages[s];
    }
    if (want == 0)
        return SI_OK;
    for (uint32_t s = 0; s < n_seq; s++) {
        if (added[s] == 0)
            continue;
        const uint32_t have = kv->seq_pages[s];
        const uint32_t need = (len[s] + added[s] + SI_KV_PAGE - 1) / SI_KV_PAGE;
        if (need <= have)
            continue;
        int32_t *row = kv->table_host + (size_t)s * kv->max_pages;
        for (uint32_t j = have; j < need; j++)
            row[j] = kv->free_list[--kv->n_free];
        kv->seq_pages[s] = need;
        /* The new entries go up on the op's stream, ahead of its kernels,
         * through pinned staging (never waits for the stream). */
        const size_t n = (size_t)(need - have) * sizeof(int32_t);
        void *stage = cu_pin_reserve(b, n, err);
        cudaError_t e = cudaSuccess;
        if (stage != NULL) {
            memcpy(stage, row + have, n);
            e = cudaMemcpyAsync(kv->table + (size_t)s * kv->max_pages + have, stage, n, cudaMemcpyHostToDevice,
                                b->stream);
        }
        if (stage == NULL || e != cudaSuccess) {
            /* Not in the device table: give the pages back, so that a
             * retry takes (and uploads) them again.  Sequences before s
             * keep theirs, uploaded: consistent too. */
            for (uint32_t j = need; j-- > have;)
                kv->free_list[kv->n_free++] = row[j];
            kv->seq_pages[s] = have;
            if (stage == NULL)
                return SI_ENOMEM;   /* err set by cu_pin_reserve */
            return si_err_set(err, SI_EDEVICE, CU_NAME ": ATTN: page table upload: %s", cudaGetErrorString(e));
        }
    }
    return SI_OK;
}
