/* plugins/attn_mma_i8/ami8.h — the attention kernel of attn_mma_i8
 * (ami8_attn.cu) as the plugin glue (attn_mma_i8.c) and the host emulation
 * (tests/cuda/emu/run-attnmma-emu.sh) call it. */
#ifndef AMI8_H
#define AMI8_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AMI8_PAGE 16      /* positions per page: one page = the 16 K rows of an mma tile pair */

/* ami8_args.tile: which kernel (knob tile = v1 | v2; 0 = v1 so a zeroed
 * args struct keeps the original kernel) */
#define AMI8_TILE_V1 0    /* 16 tokens x 1 head a block, K/V from L2 per block */
#define AMI8_TILE_V2 1    /* 128 tokens x 1 head, K/V staged by cp.async, P.V on u8 x s8 mma */

/* One op: everything device memory; layouts as si_cuda_attn_view's. */
typedef struct ami8_args {
    const float   *q;           /* [n][n_head][hd] normed+roped           */
    const float   *qg;          /* gate of (t, h) at qg + t*qg_stride + (2h+1)*hd */
    uint64_t       qg_stride;
    const int8_t  *k, *v;       /* [page][n_head_kv][AMI8_PAGE][hd]       */
    const float   *ks, *vs;     /* [page][n_head_kv][AMI8_PAGE]           */
    const int32_t *pages;       /* [n_seq][max_pages]                     */
    uint32_t       max_pages;
    int            n_head, n_head_kv, hd;
    const int32_t *pos, *seq;   /* [n]                                    */
    int64_t        n;
    float         *dst;         /* [n][n_head*hd], row stride dst_stride floats */
    uint64_t       dst_stride;
    int            tile;        /* AMI8_TILE_V1 or AMI8_TILE_V2 (v2: hd 128/256; else v1 runs) */
} ami8_args;

/* True when the kernel is built for head_dim hd. */
int ami8_hd_ok(int hd);
/* Enqueues the attention on stream; 0 or a cudaError_t. */
int ami8_attn(const ami8_args *a, void *stream);

#ifdef __cplusplus
}
#endif
#endif
