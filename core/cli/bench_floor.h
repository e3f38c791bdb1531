/* core/cli/bench_floor.h — the memory floor of a decode step, for bench:
 * the bytes one step must move through device memory, from the GGUF.
 *   weights  every tensor once, except: token_embd reads B rows (all of
 *            it when there is no output.weight: tied), and routed-expert
 *            tensors (*_exps) read the experts the batch touches — the
 *            expected count E·(1 − (1 − K/E)^B) of E, K per token;
 *   KV       per full-attention layer (those with attn_k): D positions ×
 *            2 (K and V) × n_kv_head × head_dim × kv_elem bytes, per
 *            sequence;
 *   state    per GDN layer (those with ssm_a), per sequence, read and
 *            written: f32 Hv·dv·dk plus the conv state conv_dim·(conv_k−1).
 * Over a copy bandwidth this is the fastest a step can be; bench reports
 * achieved tok/s as a fraction of it. */
#ifndef SI_CLI_BENCH_FLOOR_H
#define SI_CLI_BENCH_FLOOR_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"

typedef struct si_floor_model {
    double   w_dense;        /* bytes of weights every step reads            */
    double   w_experts;      /* bytes of all routed-expert tensors            */
    double   embd_row;       /* bytes of one token_embd row (0: tied, dense)  */
    uint32_t n_expert, n_used;
    double   kv_per_pos;     /* bytes per position per sequence, all layers   */
    double   state_per_seq;  /* recurrent state bytes per sequence, r + w     */
    bool     ok;
} si_floor_model;

/* kv_elem: bytes per K/V element in the backend's cache (2 for f16). */
void   si_floor_model_of(const si_gguf *g, double kv_elem, si_floor_model *out);
/* Bytes of one step of B sequences at depth D. */
double si_floor_bytes(const si_floor_model *f, uint32_t D, uint32_t B);

#endif
