/* core/convert/convert_internal.h — the conversion plan shared by
 * convert_plan.c (which HF tensor feeds which GGUF tensor, how) and
 * convert.c (types, metadata, streaming).  Private to core/convert/. */
#ifndef SI_CONVERT_INTERNAL_H
#define SI_CONVERT_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/status.h>

#include "hf_config.h"
#include "safetensors.h"

/* Where output row r (counted over ne[1] * ne[2]) comes from. */
enum cv_rows {
    CV_ROWS_IDENT = 0,     /* source row r                                       */
    CV_ROWS_QKV,           /* rows < qk_rows as is, the rest v-head permuted     */
    CV_ROWS_VHEADS,        /* every row v-head permuted (head = row_hs rows)      */
    CV_ROWS_FUSED_GATE,    /* [E, 2F, H] source: expert e row i <- e*2F + i       */
    CV_ROWS_FUSED_UP,      /*                     expert e row i <- e*2F + F + i  */
    CV_ROWS_PER_EXPERT,    /* expert e row i <- row i of src_e[e]                 */
};

/* Elementwise transform, in f32, after the permutations. */
enum cv_elem {
    CV_ELEM_COPY = 0,
    CV_ELEM_PLUS1,         /* RMSNorm weights: GGUF stores 1 + w                  */
    CV_ELEM_NEG_EXP,       /* ssm_a = -exp(A_log)                                 */
};

typedef struct cv_tensor {
    char     name[64];             /* GGUF name                                  */
    int      layer;                /* -1 for global tensors                      */
    uint32_t ndim;
    int64_t  ne[3];                /* ggml order                                 */
    uint32_t type;                 /* output si_type (set by convert.c)          */
    uint8_t  rows;                 /* enum cv_rows                               */
    uint8_t  elem;                 /* enum cv_elem                               */
    bool     cols_v;               /* columns v-head permuted (head = col_hs)    */
    uint32_t row_hs, col_hs;       /* head sizes of the v-head permutations      */
    uint64_t qk_rows;              /* CV_ROWS_QKV: rows before the value block   */
    uint64_t n_ff;                 /* CV_ROWS_FUSED_*: F                          */
    const si_st_tensor  *src;      /* the source (first expert's for PER_EXPERT) */
    const si_st_tensor **src_e;    /* CV_ROWS_PER_EXPERT: [ne[2]], in plan pool  */
} cv_tensor;

typedef struct cv_plan {
    si_hf_qwen35  hp;
    const si_st_set *st;
    const char   *prefix;          /* "model." or "model.language_model."        */
    cv_tensor    *t;
    size_t        n, cap;
    const si_st_tensor **pool;     /* per-expert source pointers                 */
    size_t        pool_n, pool_cap;
    bool         *used;            /* [si_st_count] source consumed or skipped   */
    bool          experts_fused;
    uint32_t      n_vocab;         /* embedding rows                             */
} cv_plan;

/* Builds the plan for the checkpoint: finds and shape-checks every source
 * tensor, and refuses unknown or missing ones.  Frees with cv_plan_free. */
int  cv_plan_build(cv_plan *p, const si_hf_qwen35 *hp, const si_st_set *st, si_err *err);
void cv_plan_free(cv_plan *p);

/* Source tensor and row of output row r of t. */
void cv_row_source(const cv_plan *p, const cv_tensor *t, uint64_t r,
                   const si_st_tensor **src, uint64_t *src_row);
/* GGUF v-head order -> HF index: element idx of a block of heads of size
 * hs (idx = head * hs + within). */
uint64_t cv_vperm(const si_hf_qwen35 *hp, uint64_t idx, uint32_t hs);

#endif /* SI_CONVERT_INTERNAL_H */
