// backends/cuda_sm120/cuda_parts.cuh — which product of a launch of
// several (cu_mm.more: the q/k/v, GDN qkv/z/beta/alpha or ffn gate/up
// products of one input) a block of a decode GEMV serves: the blocks of
// product 0's rows first, then each more[] part's in order.  Shared by
// cuda_gemvq.cu's kernels and cuda_gemvm.cu's (knob gemv_mma).
#ifndef SI_CUDA_PARTS_CUH
#define SI_CUDA_PARTS_CUH

#include <stdint.h>

#include "cuda_internal.h"

// The product of block bx and the block's index in it: blocks past product
// 0's rows belong to mm.more[0..n_more) in order, as in mmq_kernel (uniform
// per block), RB rows a block.  (32-bit rows and row bytes: the
// launchers' checks keep every part within them.)
struct gq_prod {
    const uint8_t *w;
    float         *y;
    int            rows, bx;
    uint32_t       rb;
    int64_t        ys;   // (one column, gq_kernel: the stride does not matter)
};

// (block bx of RB rows over the parts: gq_find's walk for a block index
// that is not blockIdx.x, e.g. a cluster's)
__device__ __forceinline__ gq_prod gq_find_at(const cu_mm &mm, int RB, int bx)
{
    gq_prod g = { mm.w, mm.y, (int)mm.rows, bx, (uint32_t)mm.row_bytes, mm.y_stride };
    int nbk = (g.rows + RB - 1) / RB;
    for (int k = 0; k < mm.n_more && g.bx >= nbk; k++) {
        g.bx -= nbk;
        g.w = mm.more[k].w;
        g.y = mm.more[k].y;
        g.rows = (int)mm.more[k].rows;
        g.rb = (uint32_t)mm.more[k].row_bytes;
        g.ys = mm.more[k].y_stride;
        nbk = (g.rows + RB - 1) / RB;
    }
    return g;
}

__device__ __forceinline__ gq_prod gq_find(const cu_mm &mm, int RB) { return gq_find_at(mm, RB, (int)blockIdx.x); }

#endif
