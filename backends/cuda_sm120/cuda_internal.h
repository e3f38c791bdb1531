/* backends/cuda_sm120/cuda_internal.h — shared between the C side of the
 * plugin (cuda_sm120.c: objects and memory; cuda_ops*.c: checks and op
 * dispatch) and the .cu translation units (kernels and their launchers).
 * Only plain C types cross this header; every launcher enqueues on the
 * given stream and returns 0 or a cudaError_t value (never aborts).
 *
 * Layout of the plugin, one concern per file:
 *   cuda_sm120.c    descriptor, probe, open/close, buffers, sync
 *   cuda_kv.c       KV cache: dense f16/f32, or paged int8 (page table,
 *                   free list, pages taken per ATTN op)
 *   cuda_ops.c      supports()/exec(): shape checks (same rules as the cpu
 *                   backend), host-side validation, workspace, launches;
 *                   cuda_ops_attn.c its ATTN and GDN ops, cuda_ops_moe.c
 *                   its MOE ops (cuda_ops.h: what the three share)
 *   cuda_graph.c    knob graph: capture and replay of seen op lists as
 *                   CUDA graphs; cuda_gsig.c their signatures and cache
 *   cuda_quant.cuh  device dequantisation of F32/F16/BF16/Q8_0/Q4_K/Q5_K/Q6_K
 *   cuda_matmul.cu  GEMV-style MATMUL (also the expert products of MOE)
 *   cuda_mmq.cu     the same on int8 activations with __dp4a (matmul = dp4a,
 *                   gemv = v1), and the activation quantiser both int8
 *                   paths share
 *   cuda_gemv.cu    the dp4a GEMV v2 (gemv = v2): many weight loads in
 *                   flight per lane, stacked gate+up
 *   cuda_mma.cu     prefill MATMUL (> 8 columns) as an int8 tensor-core GEMM
 *                   (prefill_mm = mma, mma_tile = v1)
 *   cuda_mma2.cu    the same GEMM with 128x128 tiles (mma_tile = v2)
 *   cuda_w8.cu      the same product on weights requantised to int8 per
 *                   128 (mma_weights = i8, the default)
 *   cuda_elem.cu    GET_ROWS, RMSNORM, ADD, MUL, SWIGLU
 *   cuda_attn.cu    RoPE table, K/V append (int8 quantisation for the
 *                   paged cache), causal GQA attention over the dense
 *                   cache (split-K over the context, or one block per
 *                   head), the split combine
 *   cuda_attn_i8.cu split-K attention over the paged int8 cache
 *   cuda_attn_fa.cu prefill attention over the dense f16 cache on the f16
 *                   tensor cores (flash attention; attn_prefill = fa)
 *   cuda_attn.cuh   device helpers shared by the two attention files
 *   cuda_gdn.cu     conv + SiLU, gated delta rule, gated RMSNorm (token
 *                   by token; the dispatch between the GDN paths)
 *   cuda_gdn_rows.cu  the delta rule spread over state rows (gdn_rows);
 *                   the fused decode step in thread-block clusters (gdn_dec)
 *   cuda_gdn_chunk.cu  GDN prefill: token-parallel conv, chunked delta rule
 *   cuda_gdn.cuh    device helpers shared by the GDN files
 *   cuda_moe.cu     router softmax/top-k, SwiGLU act, combine
 *   cuda_topk.cu    TOPK: sampling penalties and the k best logits per row;
 *                   HOST_IDS: a step's tokens posted by the host
 */
#ifndef SI_CUDA_INTERNAL_H
#define SI_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launches a one-block kernel that writes `n` (<= 256) words of a known
 * pattern into dev and waits.  0 on success, else the cudaError_t value.
 * Used at open() to prove the fatbin carries code for this device (a
 * missing SM target would otherwise surface later, at the first real
 * kernel, as "no kernel image is available"). */
int si_cuda_selftest_launch(unsigned *dev, int n);

/* Knob pdl: whether cu_launch (cuda_launch.cuh) gives the decode step's
 * kernels the programmatic-dependent-launch attribute.  Process-wide:
 * cuda_ops.c sets it from the backend's knob at each exec (a stream runs
 * one backend's ops at a time). */
void si_cu_pdl_set(bool on);
bool si_cu_pdl_get(void);

/* Weight types the kernels decode (cuda_quant.cuh). */
bool si_cu_type_ok(uint32_t type);

typedef struct cu_rows {
    uint8_t *p;                  /* device, first element                  */
    int64_t  ne1, ne2;           /* to split a flat row index              */
    uint64_t nb1, nb2, nb3;      /* byte strides                           */
} cu_rows;

/* RMSNORM fused with the ADD before it and/or the int8 quantisation of its
 * output (cuda_ops.c norm_fused).  b.p != NULL: the norm's input is
 * a + b (rows of a), also stored to r.  q != NULL: y is also quantised
 * as si_cu_quantize_x would (q[row*ne0 + i], qd/qs[row*ne0/32 + i/32]).
 * Rows of ne0 % 32 == 0, ne0 <= 4096 (si_cu_norm_fuse_ok). */
typedef struct cu_norm_fuse {
    cu_rows b, r;
    int8_t *q;
    float  *qd, *qs;
} cu_norm_fuse;

/* Knob norm_tail (cuda_ops.c mm_norm): a hidden-size decode product that
 * ends with the ADD of its output and the residual, the RMSNORM of the sum
 * and the int8 copy of that (cu_norm_fuse's, with a = the product's y,
 * column c = row c): the launch's last block to finish does it (a count of
 * finished blocks at *ctr, 0 between launches).  The same bits as
 * rms2_kernel (cuda_rms.cuh).  ctr == NULL: no tail. */
/* Knob norm_tail = defer (cuda_ops.c mm_norm): instead of a last block,
 * every block of 32 rows finishes its own rows: the ADD, t = sum * the
 * norm's weight (stored to d, unscaled) and the int8 copy of t per 32
 * (the block's rows), and its rows' sum of squares of the sum into
 * part[block].  The norm's scale r = 1 / sqrt(sum of part / rows + eps)
 * multiplies t, and so the copy's scales (an int8 block is the same for x
 * and r x), in the products that read the copy (cu_mm.xr: they scale
 * their sums by r) or in si_cu_xr_resolve for anyone else. */
typedef struct cu_xr {
    const double *part;          /* device [n] or NULL: x is no deferred
                                  * norm's output                          */
    int           n;
    int64_t       ne;            /* the norm's row width                   */
    float         eps;
} cu_xr;

typedef struct cu_norm_tail {
    unsigned     *ctr;           /* device, 0 between launches             */
    double       *part;          /* norm_tail = defer: device [rows / 32];
                                  * ctr NULL then                          */
    const float  *w;             /* device: the norm's weight [rows]       */
    cu_rows       d;             /* the norm's output                      */
    float         eps;
    cu_norm_fuse  f;             /* residual b, sum r, int8 copy q/qd/qs   */
} cu_norm_tail;

/* ---- MATMUL core -------------------------------------------------------
 * For every column j in [0, ncols) and weight row r in [0, rows):
 *   y[j*y_stride + r] = W_e[r] . x[(j / x_div)*x_stride + 0..in)
 * where W_e = w + e*expert_bytes, e = expert ? expert[j] : 0.
 * w2 != NULL (only si_cu_matmul_q8 takes it; the ops split it for the
 * others): rows [rows_split, rows) are rows 0.. of a second matrix at w2
 * of the same type and strides (gate and up of an expert in one launch). */
/* One more product of the same input in a cu_mm (cu_mm.more): its own
 * weight rows and output, the type, width and columns of the cu_mm. */
#define CU_MM_MORE 3
typedef struct cu_mm_part {
    const uint8_t *w;            /* device: row 0                          */
    float         *y;            /* device                                 */
    int64_t        rows;
    uint64_t       row_bytes;
    int64_t        y_stride;     /* floats                                 */
    const uint8_t *w_rg;         /* (as cu_mm.w_rg)                        */
} cu_mm_part;

/* Knobs gemv_q6r / gemv_q8r: type ids of cuda_gemvq.cu's own (never GGUF
 * types): Q6_K / Q8_0 rows regrouped within each group of a row's 2048
 * weights (si_cu_rg_group bytes: 8 Q6_K blocks' ql+qh, then their scales,
 * then their d; 64 Q8_0 blocks' qs, then their d), so that every load of a
 * lane is aligned; the same bytes in the same group, so a weight's copy
 * serves any row or view of it that starts on a group.  si_cu_rg_copy
 * makes one (bytes a whole number of groups, src 2- and dst 16-byte
 * aligned); si_cu_rg_group is 0 for the types it does not take. */
#define CU_TYPE_Q6R 0x10006
#define CU_TYPE_Q8R 0x10008
uint64_t si_cu_rg_group(uint32_t type);
int si_cu_rg_copy(uint32_t type, const uint8_t *src, uint8_t *dst, uint64_t bytes, void *stream);

typedef struct cu_mm {
    const uint8_t *w;            /* device: row 0 of expert 0              */
    uint32_t       type;
    int64_t        in, rows;
    uint64_t       row_bytes, expert_bytes;
    const int32_t *expert;       /* device [ncols] or NULL                 */
    const uint8_t *w_rg;         /* knobs gemv_q6r / gemv_q8r: device, w's
                                  * regrouped copy (CU_TYPE_Q6R / Q8R) at
                                  * w's offsets, or NULL; cuda_gemvq.cu's
                                  * one-column products read it instead   */
    bool           expert_early; /* expert[] was written two or more
                                  * launches before this product's (each
                                  * launch between waits for the one
                                  * before it, cu_pdl_enter): gqe_kernel
                                  * reads it and its first weights before
                                  * the programmatic-launch wait          */
    const float   *x;            /* device                                 */
    int64_t        x_stride;     /* floats                                 */
    int64_t        x_div;        /* >= 1                                   */
    float         *y;            /* device                                 */
    int64_t        y_stride;     /* floats                                 */
    int64_t        ncols;
    const uint8_t *w2;           /* device or NULL: stacked second matrix  */
    int64_t        rows_split;   /* w2: rows below come from w             */
    bool           gemv_direct;  /* v2 GEMV: never staged (bench A/B only) */
    int            gemv_rows;    /* v2, one column: rows a lane group, 1 or
                                  * 4; cuda_gemvm.cu: row tiles a warp
                                  * (1, 2) or a block (2, 8 at 9..32
                                  * columns) (bench A/B only; 0: by size) */
    int            gemv_unroll;  /* v1, one column: units a lane loads at
                                  * once, 2/4/8 (bench A/B only; 0: 4)    */
    bool           gemv_wide;    /* v1, Q4_K, one column: 32-byte units
                                  * (bench A/B only)                      */
    bool           gemv_order;   /* v1, Q4_K/Q5_K, one column: a warp's
                                  * lanes share the sub-block pair of an
                                  * iteration (bench A/B only)           */
    bool           gemv_quad;    /* knob gemv_quad: v1's one-column K-quant
                                  * rows of in % 2048 == 0 go through
                                  * cuda_gemvq.cu (4 lanes a block)       */
    bool           gemv_qn;      /* knob gemv_quad_cols: with gemv_quad,
                                  * v1's dense K-quant products of 2..8
                                  * columns (x_div 1) go through
                                  * cuda_gemvq.cu's gq_kernel too         */
    bool           gemv_qe;      /* knob gemv_quad_experts: with gemv_quad,
                                  * v1's expert products of K-quant rows of
                                  * in % 512 == 0 (<= 16384) go through
                                  * cuda_gemvq.cu's gqe_kernel too        */
    bool           gemv_mma;     /* knob gemv_mma: v1's dense products of
                                  * 2..8 columns on the int8 tensor cores
                                  * (cuda_gemvm.cu) where it takes them;
                                  * 9..32 where cuda_ops.c mm_wide sends
                                  * them (knob gemv_mma_wide)             */
    bool           gemv_wide_db; /* knob gemv_wide_db: gx_kernel stages the
                                  * next round's x while it multiplies     */
    int            gemv_wide_regs; /* knob gemv_wide_regs: gx_kernel's register
                                  * cap: 0 two blocks an SM, 1 one block an
                                  * SM where the launch has no more blocks
                                  * than n_sm, 2 one block an SM always     */
    bool           gemv_wide_split; /* knob gemv_wide_split: gx_kernel at 128
                                  * rows a block, x staged a round ahead,
                                  * the steps split over a cluster of 2-4
                                  * blocks where the row blocks are few  */
    int            gemv_wide_ring; /* knob gemv_wide_ring: gw_kernel (the
                                  * weights' next round copied into shared
                                  * memory, two blocks an SM) for 0 none,
                                  * 1 every type, 2 the K-quants          */
    bool           gemv_ring_ks8; /* knob gemv_wide_ring_ks8: gw_kernel at
                                  * 16 warps a block where the launch has
                                  * no more blocks than n_sm (K-quants)   */
    int            gemv_mma_cols; /* knob gemv_mma_cols: the fewest columns
                                  * gemv_mma takes (0: 4)                 */
    bool           gemv_rg_cols; /* knob gemv_regroup_cols: the regrouped
                                  * copies (w_rg) for 2..8 columns too    */
    int            gemv_narrow;  /* knob gemv_narrow: 2..8 columns on the
                                  * 9..32 kernels too (one column tile)
                                  * for 0 none (gm_kernel), 1 every type,
                                  * 2 the K-quants                        */
    int            n_sm;         /* the device's multiprocessors (0: unknown) */
    bool           gemv_xs;      /* knob gemv_xsmem: cuda_gemvq.cu reads x
                                  * from a swizzled copy in shared memory */
    int            gemv_warps;   /* knob gemv_warps: cuda_gemvq.cu's K-quant
                                  * blocks of 8 warps at 8, else 4        */
    bool           gemv_st;      /* knob gemv_staged: gemv_quad also takes
                                  * Q8_0 (in % 2048 == 0, <= 12288), its
                                  * weights staged in shared memory       */
    int            gemv_st6;     /* knob gemv_staged_q6: with gemv_quad,
                                  * one-column Q6_K rows come through
                                  * shared memory (cuda_gemvq.cu g6_kernel):
                                  * 0 false, 1 true, 2 large (only big
                                  * products, g6_ok)                       */
    bool           prefetch;     /* knob gemv_prefetch: decode GEMVs ask
                                  * the L2 for their rows before the
                                  * programmatic-launch wait             */
    int            w8_ktile;     /* knob w8_ktile: the i8 GEMM's
                                  * (cuda_w8.cu) k bytes a stage, 128 or
                                  * 64 (also 0)                          */
    bool           w8_wgmma;     /* knob w8_wgmma: the i8 GEMM on wgmma
                                  * (cuda_w8wg.cu) where the device and
                                  * the fatbin allow                      */
    bool           w8_wg_pp;     /* knob w8_wg_pingpong (cuda_w8wg.cu):
                                  * the consumer warpgroups take turns    */
    bool           f32_tiled;    /* knob f32_gemm = tiled: F32/F16/BF16
                                  * weights, >= 64 columns, no experts:
                                  * mm_tiled_kernel (cuda_matmul.cu)     */
    int            block_cols;   /* knob mm_block_cols: float-stored
                                  * products of <= 2048 rows from this
                                  * many columns to 8 (and the router's
                                  * rr_kernel) a block a row
                                  * (cuda_matmul.cu); 0 or 9: never     */
    int            n_more;       /* v1 only (the ops split it for the
                                  * others): products 1.. of the launch   */
    cu_mm_part     more[CU_MM_MORE];   /* (same x, type, experts and
                                        * expert_bytes)                    */
    cu_norm_tail   norm;         /* knob norm_tail: cuda_gemvq.cu only
                                  * (si_cu_gemvq_norm_ok); ctr NULL: none */
    cu_xr          xr;           /* x's copy is a deferred norm's: the sums
                                  * times its scale (cuda_gemvq.cu only,
                                  * si_cu_gemvq_xr_ok); part NULL: none   */
} cu_mm;

int si_cu_matmul(const cu_mm *mm, void *stream);
/* Whether si_cu_matmul runs mm->more[] in the same launch (float-stored
 * weights, one column, no experts, <= 2048 rows a part); it refuses a
 * cu_mm with more[] otherwise. */
bool si_cu_matmul_more_ok(const cu_mm *mm);

/* ---- dp4a MATMUL (cuda_mmq.cu) ------------------------------------------
 * Activations quantised to int8 blocks of 32 with one f32 scale and the
 * block's f32 sum each (rounded exactly as the cpu backend's
 * cpu_quantize_row_q8): q[c*in + i], d[c*(in/32) + i/32] and
 * s[c*(in/32) + i/32] for columns c in [0, ncx). */
#define SI_CU_MMQ_MAX_COLS 8
int si_cu_quantize_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d, float *s,
                     void *stream);
/* Whether si_cu_matmul_q8 takes this product: Q8_0/Q4_K/Q5_K/Q6_K weights
 * aligned for its loads, and ncols <= SI_CU_MMQ_MAX_COLS unless per-column
 * experts are given.  mm->x is ignored; column j reads quantised column
 * j / x_div. */
bool si_cu_mmq_ok(const cu_mm *mm);
/* v2 (cuda_gemv.cu, knob gemv = v2): rows in flight per lane group, the
 * next unit's weights loaded ahead; takes w2 (si_cu_gemv_ok: mmq_ok and
 * w2 aligned like w).  v1 (cuda_mmq.cu, gemv = v1): one warp per row, no
 * w2.  Same integer terms; the f32 summation order differs for rows of
 * fewer than 32 units. */
bool si_cu_gemv_ok(const cu_mm *mm);
int  si_cu_matmul_q8(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream);
int  si_cu_matmul_q8_v1(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream);
/* The one-column GEMV with four lanes a block (cuda_gemvq.cu), which v1
 * hands the products it takes when mm->gemv_quad is set: Q4_K/Q5_K/Q6_K,
 * ncols 1, no experts or w2, in % 2048 == 0, 16-byte aligned rows (every
 * part of cu_mm.more too); and with mm->gemv_qe the expert products of
 * K-quant rows of in % 512 == 0, in <= 16384, any column count up to
 * 65535 (16-byte aligned rows and experts).  Same integer terms as v1,
 * another f32 order. */
bool si_cu_gemvq_ok(const cu_mm *mm);
int  si_cu_gemvq(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream);
/* Knob gemv_mma (cuda_gemvm.cu): a dense product of 2..32 columns (x_div
 * 1, no experts, w2 or norm tail; more[] parts are one launch) of Q4_K,
 * Q5_K, Q6_K or Q8_0 rows of in % 256 == 0 (<= 65536), 16-byte aligned
 * rows, on mma.sync int8: up to 8 columns 16 (LM heads 32) rows a block,
 * 9..32 with x staged in shared memory, 32 (LM heads 128) rows a block.
 * Same integer terms as the dp4a GEMVs, another f32 order.  Only where
 * mm->gemv_mma is set. */
bool si_cu_gemvm_ok(const cu_mm *mm);
int  si_cu_gemvm(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream);
/* Whether si_cu_gemvq runs mm's norm tail (mm->norm, knob norm_tail): one
 * product (no more[]), gq_kernel's or gs_kernel's (not g6_kernel's), rows
 * of % 512 == 0 up to 4096, the rows and tensors 16-byte aligned as
 * rms2_kernel wants them.  si_cu_gemvq refuses a cu_mm with a tail
 * otherwise. */
bool si_cu_gemvq_norm_ok(const cu_mm *mm);
/* Knob norm_tail = defer: whether si_cu_gemvq runs mm (mm->norm.part set)
 * as the deferred norm's product (gqd_kernel: 32 rows a block): one
 * column, one product, rows % 32 == 0 up to 32 * CU_DN_PART, x in shared
 * memory, a K-quant or a regrouped Q8_0 (not g6_kernel's Q6_K); the int8
 * copy's place (norm.f.q) may come later, si_cu_gemvq wants it. */
#define CU_DN_PART 2048
bool si_cu_gemvq_defer_ok(const cu_mm *mm);
/* Whether si_cu_matmul_q8_v1 runs mm on a kernel that takes mm->xr (one
 * column, gq_kernel's forms); it refuses a cu_mm with xr otherwise. */
bool si_cu_gemvq_xr_ok(const cu_mm *mm);
/* Knob gemv_glu: decode's ffn gate and up products (mm: the gate rows,
 * mm->more[0] the up rows) with the SwiGLU of their outputs and its int8
 * copy made by the same launch (gu_kernel, cuda_gemvq.cu): for column j,
 * d[j * d_stride + i] = silu(gate[i]) * up[i] and row j of q/qd/qs as
 * si_cu_quantize_x makes them (blocks of 32), besides the gate and up
 * outputs at mm->y and mm->more[0].y.  Dense: one column.  The MOE's
 * routed experts (mm->expert, x_div): any column count, and with sh the
 * shared expert's n_sh rows of gate then up (sh_stride floats apart,
 * complete before the launch) get their SwiGLU in place (into the gate
 * half) and are rows ncols.. of the copy.  The same bits as the products
 * then si_cu_swiglu_q.  All device pointers; d and the copy must not
 * overlap x's copy (xq). */
typedef struct cu_glu {
    float   *d;
    int64_t  d_stride;
    int8_t  *q;
    float   *qd, *qs;
    float   *sh;                 /* or NULL                                */
    int64_t  n_sh, sh_stride;
} cu_glu;
/* K-quant gate and up of the same shape (rows % 32 == 0), in % 2048 == 0
 * and <= 16384, rows aligned as si_cu_gemvq_ok asks; dense one column,
 * experts any (16-byte aligned experts). */
bool si_cu_gemvq_glu_ok(const cu_mm *mm, const cu_glu *gl);
int  si_cu_gemvq_glu(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_glu *gl,
                     void *stream);
/* Knob moe_dec_fuse: the MOE decode's expert products with the work of
 * the launch after them done by their own blocks (gqe_tail_kernel): the
 * routed gate/up makes the SwiGLU and its int8 copy (swiglu_q_kernel's
 * bits), the routed down the combine (combine_kernel's bits).  ctr:
 * ctr_n device words, 0 between launches (each launch puts back what it
 * counted).  si_cu_gemvq_tail_ok: gqe_kernel takes mm (si_cu_gemvq_ok),
 * no more[], the groups fit ctr_n, and the shapes below. */
enum { CU_MOE_TAIL_SWIGLU = 1, CU_MOE_TAIL_COMBINE = 2 };
typedef struct cu_moe_tail {
    int          mode;
    unsigned    *ctr;            /* device, ctr_n words                    */
    int64_t      ctr_n;
    /* SWIGLU: y [ncols][2F] (rows = 2F, gate rows then up rows); row j of
     * the int8 copy (q [.][F], qd/qs [.][F/32]) is column j's; the shared
     * expert's n_sh rows of gate then up (sh, sh_stride floats apart,
     * complete before the launch) are rows ncols.. of the copy */
    int64_t      F;
    int8_t      *q;
    float       *qd, *qs;
    const float *sh;             /* or NULL                                */
    int64_t      n_sh, sh_stride;
    /* COMBINE: column t*K + k (K <= 8) is token t's k-th pick:
     * dst[t*ds + h] = sum_k wts[t*K + k] y[t*K + k][h]
     *                 + sigmoid(gamma[t]) ys[t*ys_stride + h] (ys: or NULL) */
    int          K;
    float       *dst;
    uint64_t     ds;
    const float *wts, *ys, *gamma;
    int64_t      ys_stride;
} cu_moe_tail;
bool si_cu_gemvq_tail_ok(const cu_mm *mm, const cu_moe_tail *tl);
int  si_cu_gemvq_tail(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_moe_tail *tl,
                      void *stream);
/* The routed gate/up with its SWIGLU tail and the shared expert's gate/up
 * (sm: Q8_0, gemv_staged's kernel, its gate rows then its up rows into
 * tl->sh) in one launch, the shared rows' SwiGLU a tail too (rows
 * mm->ncols.. of the copy): the same bits as the shared launch before
 * si_cu_gemvq_tail.  mm->expert_early must be false (the picks come from
 * the launch just before).  ctr_n >= (ncols + 1) * F / 32. */
bool si_cu_gemvq_gs_ok(const cu_mm *mm, const cu_mm *sm, const cu_moe_tail *tl);
int  si_cu_gemvq_gs(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, const cu_mm *sm,
                    const cu_moe_tail *tl, void *stream);

/* ---- int8 tensor-core MATMUL (cuda_mma.cu) ------------------------------
 * The same product as a GEMM (any ncols; meant for prefill, > 8 columns):
 * Q8_0/Q4_K/Q5_K/Q6_K weights aligned for its loads, in % 256 == 0 (% 32
 * for Q8_0), dense only (expert == NULL).  Reads the quantised columns
 * (xq, xd, and the sums xs for the Q4_K/Q5_K min terms) of
 * si_cu_quantize_x; column j reads quantised column j / x_div. */
bool si_cu_mma_ok(const cu_mm *mm);
int  si_cu_matmul_mma(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream);
/* The same product, v2 tiling (cuda_mma2.cu, knob mma_tile = v2): takes
 * what si_cu_mma_ok accepts; same int32 block terms, f32 rounding of the
 * scaled terms in a different place (see the file). */
int  si_cu_matmul_mma2(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, void *stream);
/* ... with the row tile forced (bm 64 or 128; 0: the launcher's choice),
 * for tests/cuda/bench_gemm's A/B. */
int  si_cu_matmul_mma2_bm(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, int bm, void *stream);

/* The same product, v3 (cuda_w8.cu, knob mma_weights = i8): weights and
 * activations requantised to int8 per g-wide block of `in` (g = 128 or
 * 32, knob w8_block; one f32 scale each), int32 sums per block on the
 * tensor cores.  si_cu_w8_ok: Q8_0/Q4_K/Q5_K/Q6_K, in % 256 == 0, dense,
 * one product (no w2, no more).  si_cu_w8_weights writes the rows x in
 * int8 weights wq[r*in + i] and scales ws[r*(in/g) + i/g];
 * si_cu_w8_quantize_x the same of ncx columns of x for g = 128 (column c
 * at x + c*x_stride; g = 32 takes si_cu_quantize_x's q and d);
 * si_cu_matmul_w8 the product, column j reading quantised column j /
 * x_div. */
bool si_cu_w8_ok(const cu_mm *mm);
int  si_cu_w8_weights(const cu_mm *mm, int g, int8_t *wq, float *ws, void *stream);
int  si_cu_w8_quantize_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d,
                         void *stream);
int  si_cu_matmul_w8(const cu_mm *mm, int g, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd,
                     void *stream);
/* The same product at g = 128 on Hopper's wgmma (cuda_w8wg.cu, knob
 * w8_wgmma; si_cu_matmul_w8 takes it where si_cu_w8wg_ok): the same bits.
 * si_cu_w8wg_init asks the device once, at open (not during a capture),
 * whether it runs the kernel (compute capability 9.0 and sm_90a code in
 * the fatbin) and sets its shared memory: cudaSuccess with *avail false
 * where it does not; an error only where the device failed. */
int  si_cu_w8wg_init(bool *avail);
bool si_cu_w8wg_ok(const cu_mm *mm);
int  si_cu_matmul_w8wg(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd,
                       void *stream);

/* ---- elementwise (rows of up to 4 dims, contiguous ne0) ---------------- */
/* dst rows = decoded rows ids[i] of the table (row_bytes apart).  An id
 * outside [0, n_rows) gives a row of zeros and, for the first such id,
 * flag[0] = 1, flag[1] = id, flag[2] = i, flag[3] = n_rows (device words,
 * read back by the host at sync: no host round trip per op). */
int si_cu_get_rows(uint32_t type, const uint8_t *table, uint64_t row_bytes, int64_t n_rows, const int32_t *ids,
                   uint64_t ids_stride, int64_t n, float *dst, uint64_t dst_stride, int64_t ne0,
                   unsigned *flag, void *stream);
/* One launch of a kernel that only waits for the one before (knob
 * profile_twice = empty: the cost of a link of the chain). */
int si_cu_empty(void *stream);
/* op: 3 RMSNORM (b = weight [ne0]), 4 ADD, 5 MUL, 6 SWIGLU.  norm_v2
 * (knob norm = v2): RMSNORM rows of ne0 % 512 == 0, <= 4096, 16-byte
 * aligned, on rms2_kernel (another summation order than v1's). */
int si_cu_elem(int op, const cu_rows *a, const cu_rows *b, const cu_rows *d, int64_t ne0,
               int64_t nrows, float eps, bool norm_v2, void *stream);
/* (cu_norm_fuse: RMSNORM fused with the ADD before it and/or the int8
 * quantisation of its output, above cu_mm) */
bool si_cu_norm_fuse_ok(int64_t ne0);
/* SWIGLU d = silu(g) * u whose output is also quantised like
 * si_cu_quantize_x (q[row*ne0 + i], qd/qs[row*ne0/32 + i/32]); ne0 % 32 == 0. */
int  si_cu_swiglu_q(const cu_rows *g, const cu_rows *u, const cu_rows *d, int64_t ne0, int64_t nrows, int8_t *q,
                    float *qd, float *qs, void *stream);
int  si_cu_norm_fused(const cu_rows *a, const float *w, const cu_rows *d, int64_t ne0, int64_t nrows, float eps,
                      const cu_norm_fuse *f, bool norm_v2, void *stream);
/* Knob norm_tail = defer: a deferred norm's output made whole where a
 * reader cannot take xr: d[0..ne) and, with qd != NULL, the int8 copy's
 * scales and sums (ne / 32 of each) times xr's scale, in place. */
int  si_cu_xr_resolve(const cu_xr *xr, float *d, float *qd, float *qs, void *stream);

/* ---- ATTN --------------------------------------------------------------- */
/* Positions per page of the paged int8 KV cache (kv_type = i8). */
#define SI_KV_PAGE 16

typedef struct cu_attn {
    const float *qg, *k, *v;     /* [*, n] activations                     */
    uint64_t     qg_stride, k_stride, v_stride, dst_stride;   /* floats    */
    const float *q_norm, *k_norm;/* [hd] or NULL                           */
    float       *dst;
    int          n_head, n_head_kv, head_dim, n_rot;
    float        eps, rope_base, yarn_factor;
    uint32_t     yarn_orig_ctx;
    int64_t      n;
    const int32_t *pos, *seq;    /* device [n]                             */
    float       *rope;           /* device workspace [n][n_rot]            */
    void        *kc, *vc;        /* device: this layer's K and V           */
    bool         f16;            /* cache element type                     */
    uint32_t     n_ctx;          /* cache: [seq][ctx][kv_head][head_dim]   */
    /* Paged int8 cache (kv_type = i8): kc/vc are this layer's int8 pools
     * [page][kv_head][SI_KV_PAGE][head_dim], ks/vs the f32 scales
     * [page][kv_head][SI_KV_PAGE]; position p of sequence s lives in page
     * pages[s * max_pages + p / SI_KV_PAGE], slot p % SI_KV_PAGE. */
    bool         i8;
    float       *ks, *vs;
    const int32_t *pages;        /* device [n_seq][max_pages]              */
    uint32_t     max_pages;
    /* Attention core (all zero = the simple kernel): */
    bool         split;          /* knob attn = split (else simple)        */
    int          n_sm;           /* multiprocessors: sizes the split grid  */
    int          split_bps;      /* knob attn_split_blocks: blocks a
                                  * multiprocessor the split plan aims for */
    bool         split_ctx;      /* knob attn_split_len = context: splits
                                  * cut each token's own context, not
                                  * max_len (split_chunk, cuda_attn.cuh)   */
    bool         gqa_shared;     /* knob attn_gqa = shared: split K/V tiles
                                  * staged by cp.async (cuda_attn_gqa.cu) */
    bool         dec_mma;        /* knob attn_mma (with gqa_shared): the
                                  * f16 dense cache's split core on the
                                  * tensor cores (cuda_attn_mma.cu)       */
    int          ring;           /* knob attn_ring (with dec_mma): 0 off,
                                  * 1 true (4 warps, 3 stages), 2 small
                                  * (2 warps, 2 stages), cuda_attn_ring.cu */
    bool         ring_ahead;     /* knob attn_ring_pages = ahead: the ring
                                  * over the int8 pages reads a warp's
                                  * pages 32 groups ahead                 */
    int          ring_chains;    /* knob attn_ring_chains: 1 or 2 chains of
                                  * the ring's score mma                  */
    int          smem_blk, smem_sm; /* opt-in shared memory a block, and an
                                  * SM: which ring shape fits, how many a
                                  * multiprocessor holds                  */
    int32_t      max_len;        /* max over the tokens of pos + 1         */
    float       *part;           /* device, si_cu_attn_part_bytes() bytes  */
    /* Knob attn_prefill = fa and an op of runs of >= SI_CU_FA_MIN_RUN
     * tokens on average (cu_attn_prepare): the f16 dense cache's core is
     * then cuda_attn_fa.cu's flash attention. */
    bool         fa;
    int          fa_tile;        /* knob attn_fa_tile: 1 (v1), 2 (v2: its
                                  * 128-token tiles where they fit), 3 (v3:
                                  * wgmma where it runs; si_cu_fa_plan) */
    bool         fa3_overlap;    /* knob attn_fa3_overlap: v3's softmax
                                  * overlapped with the tile before's P V
                                  * (cuda_attn_fa3.cu)                    */
    /* Knob fuse_attn_q: device, or NULL: the int8 copy (per 32, as
     * quant_x) of dst for the out projection, dense [n][n_head * head_dim]
     * with its scales and sums [n][n_head * head_dim / 32], made by
     * combine_kernel where it runs (si_cu_attn_takes_q). */
    int8_t      *q8;
    float       *q8d, *q8s;
} cu_attn;

/* The max_len the attention core is planned for: the true one rounded up
 * to a multiple of 256 up to 4096, then to 8 buckets per doubling (at most
 * 1/8 over), so the split grid, and a captured graph (knob graph), change
 * only when the bucket does.  Exact at any bucket: the kernels read every token's own
 * position from the device and skip splits beyond it. */
static inline int32_t si_cu_attn_bucket(int32_t len)
{
    if (len <= 0)
        return len;
    int64_t step = 256;
    while (step * 16 < len)
        step *= 2;
    const int64_t r = ((int64_t)len + step - 1) / step * step;
    return r > 0x7fffffff ? 0x7fffffff : (int32_t)r;
}
/* Tokens per run of consecutive positions (on average over the op) from
 * which the flash-attention core takes over; decode keeps split-K. */
#define SI_CU_FA_MIN_RUN 16

/* cuda_attn_fa.cu: whether the flash-attention core runs this op (a->fa,
 * f16 dense cache, head_dim 64/128/256, the device's shared memory) and
 * its split of the context (n_split > 1: partials in a->part for the
 * split path's combine_kernel, whose layout they share). */
typedef struct cu_fa_plan {
    int     n_split;
    int32_t chunk;               /* positions per split, a multiple of 64  */
    int     tile;                /* 3: fa3_kernel (v3), 2: fa2_kernel (v2),
                                  * 1: fa_kernel (v1)                      */
} cu_fa_plan;
bool si_cu_fa_plan(const cu_attn *a, cu_fa_plan *p);
/* cuda_attn_mma.cu: the opt-in shared memory of its kernels (above 48 KB),
 * once at open, outside any graph capture; a CUDA error code, 0 on success. */
int si_cu_attn_mma_init(void);
/* Knob attn_ring (cuda_attn_ring.cu): the opt-in shared memory of its
 * kernels that fit `blk` bytes a block; a cudaError_t. */
int si_cu_attn_ring_init(int blk);
/* The core alone (after rope and append; without the combine). */
int  si_cu_fa(const cu_attn *a, const cu_fa_plan *p, void *stream);
/* cuda_attn_fa3.cu (v3, wgmma): whether this device runs it (at open,
 * outside any graph capture: a probe launch; a CUDA error code, 0 on
 * success), its dynamic shared memory at head_dim (128 or 256, else 0),
 * and its launch (si_cu_fa does it for a plan of tile 3). */
int    si_cu_fa3_init(bool *avail);
size_t si_cu_fa3_smem(int head_dim);
int    si_cu_fa3(const cu_attn *a, const cu_fa_plan *p, void *stream);

/* Bytes of split partials si_cu_attn needs in a->part (0: none; set split,
 * fa, n_sm and max_len first). */
size_t si_cu_attn_part_bytes(const cu_attn *a);
int si_cu_attn(const cu_attn *a, void *stream);
/* Whether si_cu_attn's core ends with combine_kernel (a split context, or
 * flash attention in splits), so that it makes a->q8's copy when set:
 * head_dim a multiple of 32 (set everything else first). */
bool si_cu_attn_takes_q(const cu_attn *a);
/* The front half alone (for a kernel plugin): rope, K/V append, and q =
 * rope(rms(q) * q_norm) per (token, head) into q [n][n_head][head_dim]. */
int si_cu_attn_front(const cu_attn *a, float *q, void *stream);

/* ---- GDN ---------------------------------------------------------------- */
typedef struct cu_gdn_run {
    int64_t  t0, len;
    uint64_t state_off;          /* bytes into the state buffer            */
    int64_t  chunk0;             /* chunked runs: the index of the run's
                                  * first 64-token chunk among the op's
                                  * (si_cu_gdn_plan_chunks)               */
} cu_gdn_run;

typedef struct cu_gdn {
    const float *u, *z, *b, *a;  /* activations                            */
    uint64_t     u_stride, z_stride, b_stride, a_stride, dst_stride;   /* floats */
    const float *conv_w;         /* [conv_dim][conv_k]                     */
    uint64_t     conv_w_stride;  /* floats per channel row                 */
    const float *ssm_a, *dt_bias, *norm_w;
    float       *dst;
    uint8_t     *state;          /* device state buffer                    */
    const cu_gdn_run *runs;      /* device [n_runs]                        */
    int64_t      n_runs, n, conv_dim;
    int          n_k_head, n_v_head, dk, dv, conv_k;
    float        eps;
    float       *y;              /* device workspace [n][conv_dim]         */
    bool         rows;           /* knob gdn_rows: cuda_gdn_rows.cu        */
    /* Knob gdn_prefill = chunked: runs of >= chunk_min tokens take the
     * chunked delta rule (cuda_gdn_chunk.cu) and, when max_len > 1, the
     * conv runs one thread per (channel, token).  chunk_min = 0: all runs
     * token by token (gdn_prefill = seq). */
    int          chunk_min;
    int64_t      max_len;        /* longest run                            */
    /* The chunked runs' per-chunk matrices (cuda_gdn_chunk.cu
     * chunk_pre_kernel): device [n_chunks][n_v_head][GDN_TP_REC] floats
     * (cuda_gdn.cuh; si_cu_gdn_tp_bytes), NULL when no run is chunked. */
    float       *tp;
    int64_t      n_chunks;
    bool         tc;             /* knob gdn_tc: cuda_gdn_tc.cu's kernel for
                                  * the chunks where si_cu_gdn_tc_ok      */
    /* The int8 copy of dst for the product after the op (knob fuse_norm):
     * values q [n][n_v_head * dv], per-32 scales qd and sums qs, as
     * si_cu_quantize_x would make them; written by norm_kernel, so only
     * where si_cu_gdn_takes_q says that path runs (else NULL); or by
     * the fused decode kernel (fused). */
    int8_t      *q;
    float       *qd, *qs;
    bool         fused;          /* knob gdn_dec = fused: decode steps as
                                  * one cluster launch (cuda_gdn_rows.cu
                                  * fused_kernel) where si_cu_gdn_fused_ok */
    bool         early;          /* knob gdn_early: fused_kernel loads its
                                  * state rows before the programmatic-
                                  * launch wait (cuda_gdn_rows.cu)        */
} cu_gdn;

/* Runs of at least this many tokens go to the chunked kernel by default. */
#define SI_CU_GDN_CHUNK_MIN 32

int si_cu_gdn(const cu_gdn *g, void *stream);
/* cuda_gdn_rows.cu: the delta rule over state rows (after the conv). */
bool si_cu_gdn_rows_ok(const cu_gdn *g);
/* Whether si_cu_gdn runs g on the state-rows path with norm_kernel, which
 * can write the int8 copy of dst (cu_gdn.q; dv a multiple of 32, <= 256). */
bool si_cu_gdn_takes_q(const cu_gdn *g);
int  si_cu_gdn_rows(const cu_gdn *g, void *stream);
/* cuda_gdn_rows.cu: the whole decode step (conv, delta rule, gated norm,
 * the int8 copy) in one launch of thread-block clusters (sm_90+), where
 * every run is one token and the shapes fit (_ok); same bits as the
 * split path. */
bool si_cu_gdn_fused_ok(const cu_gdn *g);
int  si_cu_gdn_fused(const cu_gdn *g, void *stream);
/* cuda_gdn_chunk.cu, called by si_cu_gdn: the token-parallel conv (all
 * runs), and the chunked delta rule + gated norm of the runs with
 * len >= chunk_min.  si_cu_gdn_chunk_fits: whether the chunked kernel's
 * shared memory fits this device for dk (else everything goes token by
 * token). */
int  si_cu_gdn_conv_tok(const cu_gdn *g, void *stream);
/* Whether si_cu_gdn_conv_tok takes g (runs of > 1 token, conv_k 2..8;
 * else conv_kernel), and whether it then also L2-normalises q and k of the
 * chunked runs (dk = 128: a head a block), so si_cu_gdn_chunk skips its
 * norm pass. */
bool si_cu_gdn_conv_tok_ok(const cu_gdn *g);
bool si_cu_gdn_conv_norms(const cu_gdn *g);
/* Host: numbers the 64-token chunks of the runs of >= chunk_min tokens
 * (runs[r].chunk0; chunk_min 0: none) and returns how many there are;
 * si_cu_gdn_tp_bytes: the bytes of cu_gdn.tp for that many. */
int64_t si_cu_gdn_plan_chunks(cu_gdn_run *runs, int64_t n_runs, int chunk_min);
size_t  si_cu_gdn_tp_bytes(int64_t n_chunks, int n_v_head);
bool si_cu_gdn_chunk_fits(int dk);
int  si_cu_gdn_chunk(const cu_gdn *g, void *stream);
/* cuda_gdn_tc.cu: the chunks' state-dependent products on the tf32 tensor
 * cores (called by si_cu_gdn_chunk when g->tc and _ok: dk a multiple of
 * 32 up to 128, dv a multiple of 4, the shared memory on this device). */
bool si_cu_gdn_tc_ok(const cu_gdn *g);
int  si_cu_gdn_chunk_tc(const cu_gdn *g, void *stream);

/* ---- MOE pieces ---------------------------------------------------------- */
/* Per token: softmax of logits[t][0..E), top-K (ties: lower index),
 * renormalised weights (denominator clamped to >= 6.103515625e-5). */
int si_cu_moe_route(const float *logits, int64_t n, int E, int K, int32_t *sel, float *wts,
                    void *stream);
/* Knob route_fused (cuda_matmul.cu): the router product mm (logits
 * mm->y [ncols][rows], y_stride == rows; with mm->more[] the shared gate)
 * and the routing of si_cu_moe_route in one launch, the same bits as
 * si_cu_matmul then si_cu_moe_route.  done: a device word that is 0; the
 * launch leaves it 0.  _ok: float-stored weights, 1..8 columns, rows
 * (experts) <= 1024, x_div 1, no experts or w2. */
bool si_cu_router_route_ok(const cu_mm *mm, int K);
int  si_cu_router_route(const cu_mm *mm, int K, int32_t *sel, float *wts, unsigned *done, void *stream);
/* g[r][i] = silu(g[r][i]) * u[r][i] for rows r of F (u_stride floats apart). */
int si_cu_swiglu_rows(float *g, uint64_t g_stride, const float *u, uint64_t u_stride, int64_t rows,
                      int64_t F, void *stream);
/* Knob moe_sdc (cuda_mmq.cu): one token's combine (si_cu_moe_combine's
 * dst, with the shared expert) whose shared value, row r of the shared
 * down product sd (one column, its int8 input xq/xd/xs: si_cu_quantize_x's
 * layout), the launch computes itself, as si_cu_matmul_q8_v1 would (the
 * same bits), before its programmatic-launch wait: xq must come from a
 * launch at least two before this one.  y: the K expert rows [K][rows].
 * _ok: sd one column on mmq_kernel's plain path (not gemv_quad's), no
 * experts or more[], 1 <= K <= 8. */
bool si_cu_moe_sdc_ok(const cu_mm *sd, int K);
int  si_cu_moe_sdc(const cu_mm *sd, const int8_t *xq, const float *xd, const float *xs, float *dst, const float *y,
                   const float *wts, const float *gamma, int K, void *stream);
/* dst[t] = sum_k wts[t][k] * y[t*K+k] + (shared ? sigmoid(gamma[t]) * ys[t] : 0). */
int si_cu_moe_combine(float *dst, uint64_t dst_stride, const float *y, const float *wts,
                      const float *ys, const float *gamma, int64_t n, int K, int64_t H, void *stream);

/* Knob moe_persist (cuda_pmoe.cuh, in cuda_gemvq.cu): one token's MOE with
 * a shared expert in ONE launch of one block an SM, its three phases
 * (router; top-K + gate/up; SwiGLU + downs + combine) apart by grid-wide
 * barriers on *bar, where the in-line path runs six launches.  The same
 * bits as that path (the same row sums in the same order).  The caller
 * owns every buffer; the launch writes logits [E], gamma [1], sel/wts [K],
 * gu [K + 1][2F] (routed rows, then the shared expert's) and dst [H].
 * bar: a device word, 0 when first used; each launch leaves it as it
 * found it.  _ok: the shapes and types the kernel takes (F == 512,
 * H % 2048 == 0, E <= 256, K <= 8, router and shared gate F32, routed
 * gate/up Q4_K/Q5_K/Q6_K, down Q4_K/Q5_K/Q6_K, shared expert Q8_0 (its
 * gate/up regrouped or not), 16-byte aligned K-quant rows). */
#define CU_PM_PROF_N 9   /* moe_persist_prof: 8 intervals' clock sums, then the count */
typedef struct cu_pmoe {
    const float   *h;                  /* [H] the router's input            */
    const int8_t  *xq;                 /* h's int8 copy (quant_x layout)    */
    const float   *xd, *xs;
    const float   *wr;                 /* router [E][wr_stride] (F32)       */
    const float   *wsg;                /* shared gate row [H] (F32)         */
    int64_t        wr_stride;          /* floats                            */
    const uint8_t *wg, *wu;            /* routed gate / up rows, expert 0   */
    uint64_t       gu_rb, gu_eb;       /* their row and expert bytes        */
    const uint8_t *wd;                 /* routed down [E][H][F]             */
    uint64_t       wd_rb, wd_eb;
    const uint8_t *sg, *su;            /* shared gate / up [F][H] (Q8_0)   */
    uint64_t       s_rb;
    bool           s_rg;               /* sg/su are CU_TYPE_Q8R copies      */
    const uint8_t *sd;                 /* shared down [H][F] (Q8_0)         */
    uint64_t       sd_rb;
    float         *logits, *gamma, *wts, *gu, *dst;
    int32_t       *sel;
    unsigned      *bar;
    unsigned long long *prof;          /* knob moe_persist_prof: [9] sums, or NULL */
    int            H, F, E, K;
    uint32_t       t_gu, t_dn;         /* routed gate/up and down types     */
} cu_pmoe;
bool si_cu_moe_persist_ok(const cu_pmoe *p);   /* (x's copy: checked at launch) */
/* grid: blocks (the device's multiprocessors: every block must be
 * resident at once). */
int  si_cu_moe_persist(const cu_pmoe *p, int grid, void *stream);

/* ---- TOPK (cuda_topk.cu) ---------------------------------------------------
 * Per row r < n of x (V floats, x_stride apart): dst row r (dst_stride
 * floats apart) = the k best values then their ids (plugin.h semantics).
 * With penalties (pen_off != NULL, device arrays rebased to pen_off[0] = 0)
 * the workspace also holds bitmap [n][ceil(V/32)] and pen_key[pen_off[n]];
 * cand [n][slices][k] always. */
typedef struct cu_topk {
    const float   *x;
    int64_t        x_stride, V, n;
    int            k, slices;      /* slices: si_cu_topk_slices(V, k)        */
    float         *dst;
    int64_t        dst_stride;
    const int32_t *pen_off, *pen_id, *pen_cnt;
    float          repeat, freq, presence;
    uint32_t      *bitmap;
    uint64_t      *pen_key, *cand;
} cu_topk;

int si_cu_topk_slices(int64_t V, int k);
int si_cu_topk(const cu_topk *t, void *stream);

/* ---- HOST_IDS (cuda_topk.cu) -----------------------------------------------
 * The host's posts (post_ids) in mapped pinned memory: post g (from 1) in
 * slot g % CU_POST_RING, its ids written before its gen.  One launch
 * takes the post after *ctr (device memory; then advanced), waiting for
 * it, and writes its n ids to dst (stride int32s apart); after
 * CU_POST_GIVE_UP_NS unposted it writes -1s (GET_ROWS reports them). */
#define CU_POST_RING 4
#define CU_POST_GIVE_UP_NS 10000000000ull
typedef struct cu_post_slot {
    uint32_t gen;
    int32_t  ids[32];   /* SI_SUBMIT_MAX_ROWS */
} cu_post_slot;

int si_cu_host_ids(const cu_post_slot *ring, unsigned *ctr, int32_t *dst, int64_t stride, int n, void *stream);

/* A cudaError_t as text (for the C side, which has no cuda_runtime.h). */
const char *si_cu_errstr(int e);

#ifdef __cplusplus
}
#endif
#endif
