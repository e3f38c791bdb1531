/* plugins/moe_grouped_i8/moe_i8.h — the launches of the moe_grouped_i8
 * kernels (C interface; the kernels are in moe_i8_route.cu and
 * moe_i8_gemm.cu, the i8 GEMMs in moe_i8_w8.cu and moe_i8_wg.cu).  Every
 * function enqueues on `stream` and returns 0 or a cudaError_t value.
 *
 * Shapes: n tokens, E experts, K used per token, H hidden, F expert width.
 * An "assignment" a = t*K + k is token t's k-th chosen expert.  The grouped
 * GEMMs work on "rows": assignments permuted into per-expert groups, each
 * group padded to a whole number of tiles of BT rows; row r of tile i is
 * r = i*BT + j.  BT is the GEMMs' token tile: MI8_BT for the GGUF path
 * (weights = gguf), MI8_W8_BT for the int8-requantised one (weights = i8,
 * moe_i8_w8.cu). */
#ifndef MOE_I8_H
#define MOE_I8_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MI8_BT      32    /* tokens (rows) per tile: the GEMMs' N tile          */
#define MI8_W8_BT   64    /* the same for the w8 GEMMs (moe_i8_w8.cu)           */
#define MI8_W8_G    128   /* their scale block: k values per int8 scale         */
#define MI8_MAX_E   1024  /* experts the one-block schedule kernel handles       */
/* GEMM inner size: the tile's scales take 8*in bytes of dynamic shared
 * memory and the kernels 256 B static; without an opt-in attribute the SUM
 * must fit 48 KiB, so 6144 (exactly 48 KiB dynamic) fails to launch.
 * 5888 = the largest multiple of 256 (K-quant rows) that fits. */
#define MI8_MAX_KIN 5888

/* One weight: row f of expert e starts at w + e*expert_bytes + f*row_bytes. */
typedef struct mi8_w {
    const uint8_t *w;
    uint32_t       type;              /* SI_TYPE_Q8_0, Q4_K, Q5_K, Q6_K */
    uint64_t       row_bytes, expert_bytes;
} mi8_w;

/* Which rows a tile holds.  Grouped (tile_exp != NULL): tile i is expert
 * tile_exp[i], rows i*BT.. read token row_tok[r] and belong to assignment
 * row_slot[r] (-1: padding, reading some valid token); tiles >= *n_tiles
 * are empty.  Dense
 * (tile_exp == NULL, the shared expert): row r is token r, expert 0, rows
 * >= n_rows are padding (the w8 GEMMs read token n_rows - 1 there, the
 * GGUF ones token 0; neither stores them). */
typedef struct mi8_sched {
    const int32_t *n_tiles;
    const int32_t *tile_exp;
    const int32_t *row_tok;
    const int32_t *row_slot;
    int64_t        max_tiles;         /* grid size; >= the real tile count */
    int64_t        n_rows;            /* dense only */
} mi8_sched;

/* Activations quantised per 32: q [rows][in] int8, d and s [rows][in/32]
 * (scale and exact f32 sum of the block's values, as the cpu backend). */
typedef struct mi8_act {
    int8_t *q;
    float  *d, *s;
} mi8_act;

/* softmax over E (<= MI8_MAX_E), top-K (ties: lower index), renormalised;
 * logits [n][E] are only read (cuda_sm120's route_warp_kernel). */
int mi8_route(float *logits, int64_t n, int E, int K, int32_t *sel, float *wts, void *stream);
/* Groups the n*K assignments by expert into tiles of bt rows (one thread
 * block; bt = MI8_BT or MI8_W8_BT). */
int mi8_schedule(const int32_t *sel, int64_t n, int E, int K, int bt, int32_t *n_tiles, int32_t *tile_exp,
                 int32_t *row_tok, int32_t *row_slot, int64_t max_tiles, void *stream);
/* x [n][in] rows `stride` floats apart -> a (rows 0..n-1). */
int mi8_quantize(const float *x, int64_t stride, int64_t n, int64_t in, mi8_act a, void *stream);
/* act[row] = int8(silu(gate . x) * (up . x)) per 32 for every row of every
 * tile; x is read at row_tok (grouped) or the row (dense). */
int mi8_gate_up(mi8_w gate, mi8_w up, mi8_act x, int64_t H, int64_t F, mi8_sched s, mi8_act act, void *stream);
/* y[slot][0..H) = down . act[row] for the rows with a slot (dense: slot =
 * row); y rows are H floats apart. */
int mi8_down(mi8_w down, mi8_act act, int64_t F, int64_t H, mi8_sched s, float *y, void *stream);
/* dst[t] = sum_k wts[t][k] * y[t*K+k] (k in order) + sigmoid(gamma[t]) * ys[t]
 * (ys NULL: no shared expert). */
int mi8_combine(float *dst, int64_t dst_stride, const float *y, const float *wts, const float *ys,
                const float *gamma, int64_t n, int K, int64_t H, void *stream);

/* ---- weights = i8 (moe_i8_w8.cu): the w8 scheme of cuda_sm120's
 * cuda_w8.cu, int8 per (row, MI8_W8_G) with a 16-significant-bit f32 scale.
 * Shapes: every inner size (H, F) a multiple of MI8_W8_G. */

/* A requantised weight: row f of expert e is q + (e*expert_rows + f)*in,
 * its scales s + (e*expert_rows + f)*(in/G). */
typedef struct mi8_q8w {
    const int8_t *q;
    const float  *s;
    int64_t       expert_rows;
} mi8_q8w;

/* int8 rows with one scale per MI8_W8_G values: q [rows][in], s [rows][in/G]. */
typedef struct mi8_q8a {
    int8_t *q;
    float  *s;
} mi8_q8a;

/* The n_exp * rows rows of w (each `in` wide) to int8 at q, scales at s
 * (q [n_exp*rows][in], s [n_exp*rows][in/G]); bit for bit what cuda_w8.cu's
 * si_cu_w8_weights makes of each row.  fp != NULL (a kept copy): 3 device
 * words, zero before the first call; the copy is made only when w's bytes
 * (a sampled hash, fp[0]) differ from what it was made from. */
int mi8_w8_weights(mi8_w w, int64_t n_exp, int64_t rows, int64_t in, int8_t *q, float *s, uint32_t *fp,
                   void *stream);
/* x [n][in] rows `stride` floats apart -> a.  n_tiles != NULL: only rows
 * < *n_tiles * MI8_W8_BT (the rest are tiles no GEMM reads). */
int mi8_w8_quantize(const float *x, int64_t stride, int64_t n, int64_t in, const int32_t *n_tiles, mi8_q8a a,
                    void *stream);
/* act[row][f] = silu(gate_f . x) * (up_f . x) in f32 for every row of every
 * tile (padding rows too, from their stand-in token); rows F floats apart. */
int mi8_w8_gate_up(mi8_q8w gate, mi8_q8w up, mi8_q8a x, int64_t H, int64_t F, mi8_sched s, float *act,
                   int kt, void *stream);
/* y[slot][0..H) = down . act[row] for the rows with a slot.  kt (both): the
 * k bytes a pipeline stage, 128 or 64 (knob ktile; 128 falls back to 64
 * where a block's shared memory does not hold it). */
int mi8_w8_down(mi8_q8w down, mi8_q8a act, int64_t F, int64_t H, mi8_sched s, float *y, int kt, void *stream);

/* ---- the same two GEMMs on Hopper's wgmma (moe_i8_wg.cu, knob wgmma):
 * bit for bit mi8_w8_gate_up's and mi8_w8_down's results (no kt: their
 * k-tiles are always 128 bytes). */

/* *avail = 1 where this process's device runs them: compute capability
 * cc_major 9 and sm_90a code in the fatbin (a probe kernel on `stream`,
 * waited for: call at init, not during a capture); also sets their shared
 * memory attribute, which they need. */
int mi8_wg_init(int cc_major, void *stream, int *avail);
/* n_sm: the device's multiprocessors (si_cuda_ext's n_sm), for the grid's
 * shape (0: any). */
int mi8_wg_gate_up(mi8_q8w gate, mi8_q8w up, mi8_q8a x, int64_t H, int64_t F, mi8_sched s, float *act, int n_sm,
                   void *stream);
int mi8_wg_down(mi8_q8w down, mi8_q8a act, int64_t F, int64_t H, mi8_sched s, float *y, int n_sm, void *stream);

#ifdef __cplusplus
}
#endif
#endif
