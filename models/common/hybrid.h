/* models/common/hybrid.h — shared code of the Qwen3.5 hybrid model plugins
 * (qwen35: dense FFN, qwen36: MoE FFN).  Both families share everything but
 * the FFN: hyper-parameters, tensor validation, weight upload, per-sequence
 * state and the op list of one forward step.  This is a libtool convenience
 * library linked into each plugin; its symbols stay hidden inside the .so.
 *
 * Shapes use ggml order [ne0, ne1, ...] (ne0 contiguous).  Symbols follow
 * spec/qwen35-gguf.md §1.3: H (embedding), L (trunk layers), nh / nkv / hd
 * (attention heads, KV heads, head dim), Hk / Hv / dk = dv (GDN key heads,
 * value heads, state size), conv_dim = 2*Hk*dk + Hv*dv.
 */
#ifndef SI_MODELS_HYBRID_H
#define SI_MODELS_HYBRID_H

#include <stdbool.h>
#include <stdint.h>

#include <sparkinfer/plugin.h>

/* Tokens per forward chunk when runtime.n_batch is unset; bigger batches are
 * split (the recurrent state carries across chunks, so this is exact). */
#define SIH_DEFAULT_CHUNK 512u
/* Logit rows computed per output matmul: bounds the logits scratch at
 * n_vocab * SIH_LOGIT_ROWS floats however many logits a batch asks for. */
#define SIH_LOGIT_ROWS 32u

/* What distinguishes the two plugins. */
typedef struct sih_family {
    const char *name;          /* plugin name, used in logs ("qwen36")      */
    const char *arch;          /* general.architecture it serves            */
    bool        moe;           /* MoE FFN (qwen35moe) instead of dense      */
} sih_family;

typedef struct sih_hparams {
    bool     moe;
    uint32_t n_block;          /* block_count: trunk + trailing MTP blocks   */
    uint32_t n_nextn;          /* nextn_predict_layers (MTP, never run)      */
    uint32_t n_layer;          /* L = n_block - n_nextn                      */
    uint32_t n_embd;           /* H                                          */
    uint32_t n_vocab;          /* token_embd ne[1]                           */
    uint32_t n_ctx_train;      /* context_length (0 when absent)             */
    uint32_t n_ff;             /* dense FFN width (dense only)               */
    uint32_t n_expert, n_expert_used;
    uint32_t n_ff_exp;         /* routed expert width                        */
    uint32_t n_ff_shexp;       /* shared expert width (0 = from the tensor)  */
    uint32_t n_head, n_head_kv, head_dim, n_rot;
    float    eps;              /* RMSNorm eps, also the GDN L2-norm eps      */
    float    rope_base;
    float    yarn_factor;      /* 0 = no YaRN                                */
    uint32_t yarn_orig_ctx;
    uint32_t conv_k;           /* ssm.conv_kernel                            */
    uint32_t d_state;          /* ssm.state_size = dk = dv                   */
    uint32_t n_k_head;         /* ssm.group_count = Hk                       */
    uint32_t n_v_head;         /* ssm.time_step_rank = Hv                    */
    uint32_t d_inner;          /* ssm.inner_size = Hv * dv                   */
    uint32_t n_full;           /* full-attention layers in the trunk         */
    uint8_t *is_full;          /* [L]: 1 = full attention, 0 = GDN           */
} sih_hparams;

static inline uint32_t sih_conv_dim(const sih_hparams *hp)
{
    return 2u * hp->n_k_head * hp->d_state + hp->d_inner;
}

/* One trunk layer's weights (views of backend memory).  A member whose
 * .buf is NULL is absent (tensors of the other layer kind or FFN kind). */
typedef struct sih_layer {
    bool      full;            /* full attention; otherwise Gated DeltaNet   */
    uint32_t  kv_layer;        /* index among full-attention layers          */
    uint32_t  gdn_index;       /* index among GDN layers                     */
    si_tensor attn_norm;       /* [H] f32                                    */
    si_tensor post_norm;       /* [H] f32 (post_attention_norm)              */
    /* full attention */
    si_tensor wq;              /* [H, 2*nh*hd]  per head: query, then gate  */
    si_tensor wk, wv;          /* [H, nkv*hd]                                */
    si_tensor wo;              /* [nh*hd, H]                                 */
    si_tensor q_norm, k_norm;  /* [hd] f32                                   */
    /* Gated DeltaNet */
    si_tensor wqkv;            /* [H, conv_dim]                              */
    si_tensor wgate;           /* [H, Hv*dv]   z                             */
    si_tensor wbeta, walpha;   /* [H, Hv]                                    */
    si_tensor conv;            /* [conv_k, conv_dim] f32                     */
    si_tensor ssm_a;           /* [Hv] f32  (= -exp(A_log))                  */
    si_tensor ssm_dt;          /* [Hv] f32  dt bias                          */
    si_tensor ssm_norm;        /* [dv] f32                                   */
    si_tensor ssm_out;         /* [Hv*dv, H]                                 */
    /* dense FFN */
    si_tensor ffn_gate, ffn_up;/* [H, F]                                     */
    si_tensor ffn_down;        /* [F, H]                                     */
    /* MoE FFN */
    si_tensor router;          /* [H, E]                                     */
    si_tensor gate_exps;       /* [H, Fe, E], or fused gate_up [H, 2Fe, E]   */
    si_tensor up_exps;         /* [H, Fe, E]; absent when fused              */
    si_tensor down_exps;       /* [Fe, H, E]                                 */
    si_tensor shexp_gate_inp;  /* [H] f32; absent = no shared expert         */
    si_tensor gate_shexp, up_shexp; /* [H, Fs]                               */
    si_tensor down_shexp;      /* [Fs, H]                                    */
} sih_layer;

/* Offsets (bytes) of the F32 activation regions inside the scratch buffer,
 * each sized for `cap` tokens. */
typedef struct sih_scratch {
    si_buf  *buf;
    uint32_t cap;              /* tokens per chunk it holds (0 = none yet)  */
    uint64_t x[2];             /* residual stream, ping-pong   [H, T]        */
    uint64_t h;                /* normed input of a sub-block  [H, T]        */
    uint64_t y;                /* mixer / FFN output           [H, T]        */
    uint64_t qg;               /* [2*nh*hd, T]                               */
    uint64_t k, v;             /* [nkv*hd, T]                                */
    uint64_t ao;               /* attention output  [nh*hd, T]               */
    uint64_t u;                /* attn_qkv output   [conv_dim, T]            */
    uint64_t z;                /* [Hv*dv, T]                                 */
    uint64_t b, a;             /* [Hv, T]                                    */
    uint64_t go;               /* GDN output        [Hv*dv, T]               */
    uint64_t fg, fu, fa;       /* dense FFN gate / up / act  [F, T]          */
    uint64_t ids;              /* I32 token ids     [T]                      */
    uint64_t oids;             /* I32 rows wanted   [T]                      */
    uint64_t xo, xn;           /* gathered, normed rows [H, T]               */
    uint64_t lg;               /* logits            [V, SIH_LOGIT_ROWS]      */
    uint64_t tk;               /* TOPK output [2*SI_TOPK_MAX, SIH_LOGIT_ROWS] */
    uint64_t bytes;
} sih_scratch;

/* A trunk weight: its GGUF view (name, type) and where it was uploaded. */
typedef struct sih_weight {
    const si_tensor_info *ti;
    si_tensor            *dst;
} sih_weight;

/* One step queued by topk_submit (si_model.ahead). */
typedef struct sih_queued {
    float   *row;      /* SI_SUBMIT_MAX_ROWS x 2 SI_TOPK_MAX floats: where its TOPK rows land */
    uint32_t ticket;   /* download_start's (async) */
    uint32_t k, n;     /* k, and its rows (tokens) */
    bool     async;    /* false: downloaded at submit already */
    bool     owed;     /* its HOST_IDS op waits for a post: not collectable yet */
} sih_queued;

struct si_model {
    const si_host      *host;
    const sih_family   *fam;
    const struct si_backend_ops *bops;
    si_backend         *b;
    char                be_name[64];
    sih_hparams         hp;
    sih_layer          *layers;       /* [L] */
    si_tensor           tok_embd;     /* [H, V] */
    si_tensor           out_norm;     /* [H] f32 */
    si_tensor           output;       /* [H, V]; = tok_embd when tied */
    bool                tied;
    sih_weight         *weights;      /* [n_weights] every uploaded tensor */
    size_t              n_weights;
    si_buf            **owned;        /* weight buffers to free */
    uint32_t            n_owned, cap_owned;
    /* per-sequence state */
    uint32_t            n_seq, n_ctx;
    uint32_t            chunk;        /* tokens per forward chunk (runtime.n_batch) */
    si_kv              *kv;           /* full-attention layers; NULL if none */
    si_buf            **gdn_state;    /* [n_gdn]: n_seq slots each */
    uint32_t            n_gdn;
    uint64_t            gdn_stride;   /* bytes per slot */
    void               *zeros;        /* gdn_stride zero bytes (host) */
    uint32_t           *n_past;       /* [n_seq] tokens in each sequence */
    sih_scratch         sc;
    /* forward bookkeeping, sized at load */
    si_op              *ops;          /* [sih_plan_max_ops] */
    int32_t            *op_layer;     /* layer of each op, -1 = none */
    uint8_t            *seen;         /* [n_seq] batch validation */
    int32_t            *oids;         /* [chunk] rows wanted */
    float              *tk_host;      /* [SIH_LOGIT_ROWS][2 SI_TOPK_MAX]: TOPK rows as downloaded */
    /* Decode ahead (topk_submit / topk_collect, forward.c): the steps
     * queued and not collected, oldest at `head`, each with its row's
     * landing space (2 SI_TOPK_MAX floats) and the backend's ticket
     * (async: download_start, else the row was downloaded at submit). */
    struct {
        uint32_t n, head;
        bool     feed_ok;             /* the last exec was a submit: feed may follow */
        uint32_t k, n_seq;            /* that submit's k and sequences */
        int32_t  seq[SI_SUBMIT_MAX_ROWS];
        sih_queued q[SI_SUBMITS_IN_FLIGHT];
        /* A SI_SUBMIT_POST step waiting for its tokens (one at a time):
         * queued with its HOST_IDS op (has_post), or, deferred, only its
         * positions kept, to run at the post. */
        struct {
            bool     pending, deferred;
            uint32_t k;
            int32_t  pos[SI_SUBMIT_MAX_ROWS];
        } post;
    } ahead;
    bool                has_topk;     /* the backend runs SI_OP_TOPK (checked at load) */
    bool                has_post;     /* and SI_OP_HOST_IDS with post_ids */
    /* The shape of forward_step's last list that sih_plan_check passed:
     * tokens, wanted rows, TOPK's k (0: none), op count, scratch buffer.
     * A step of the same shape makes the same ops over the same tensors
     * (its positions and sequences are host arrays that supports() does
     * not read), which the backend's supports(), a function of shapes and
     * types, answers alike: the check is not made again (it asked
     * supports() of each of a 9b step's 445 ops, ~34 us a step on a
     * 2-core host).  n_ops 0: none yet. */
    struct {
        uint32_t      n_tok, n_out, k;
        size_t        n_ops;
        const si_buf *buf;
        bool          ahead;          /* a submit's list (strided ids) */
        bool          post;           /* with HOST_IDS first */
    } step_ok;
};

/* F32 activation views of the scratch for one chunk of T tokens.  Ops
 * point at these, so they live as long as the op list. */
typedef struct sih_acts {
    si_tensor x[2];            /* residual ping-pong  [H, T]              */
    si_tensor h, y;            /* [H, T]                                  */
    si_tensor qg, k, v, ao;    /* attention                               */
    si_tensor u, z, b, a, go;  /* Gated DeltaNet                          */
    si_tensor fg, fu, fa;      /* dense FFN                               */
    si_tensor ids;             /* I32 [T] token ids                       */
} sih_acts;

/* ---- hparams.c ---- */
/* Reads and cross-checks every hyper-parameter under "<arch>.". */
int  sih_hparams_read(const si_host *h, const si_gguf *g, const char *arch, bool moe,
                      sih_hparams *hp, si_err *err);
void sih_hparams_free(sih_hparams *hp);

/* ---- tensor.c ---- */
/* Describes contiguous memory of this type and shape at buf+offset. */
void sih_tensor_desc(const si_host *h, uint32_t type, uint32_t ndim, const int64_t *ne,
                     si_buf *buf, uint64_t offset, si_tensor *out);
/* An F32 activation [ne0, ne1] at buf+offset. */
si_tensor sih_act(si_buf *buf, uint64_t offset, int64_t ne0, int64_t ne1);
/* An I32 vector [n] at buf+offset. */
si_tensor sih_ids(si_buf *buf, uint64_t offset, int64_t n);
/* "q4_K", or "type 31" written into tmp. */
const char *sih_type_str(const si_host *h, uint32_t type, char *tmp, size_t n);
const char *sih_op_name(uint32_t kind);

/* ---- weights.c ---- */
/* Validates every trunk tensor (presence, exact shape, F32 where required,
 * known type) and only then uploads them into m->layers / tok_embd /
 * out_norm / output.  Backend support is checked by sih_plan_validate. */
int  sih_weights_load(si_model *m, const si_gguf *g, si_err *err);
void sih_weights_free(si_model *m);

/* ---- state.c ---- */
/* KV cache for the full-attention layers and zeroed GDN state slots. */
int  sih_state_create(si_model *m, si_err *err);
void sih_state_free(si_model *m);
int  sih_state_reset(si_model *m, uint32_t seq, si_err *err);
/* Makes the scratch hold chunks of `tokens` tokens (at most m->chunk). */
int  sih_scratch_reserve(si_model *m, uint32_t tokens, si_err *err);
void sih_scratch_free(si_model *m);

/* ---- forward.c ---- */
size_t sih_plan_max_ops(const si_model *m);
void   sih_acts_init(const si_model *m, uint32_t n, sih_acts *t);
/* Builds the trunk op list of one chunk (embedding through the last layer;
 * the token count is the one t was made for; pos/seq are that chunk's host
 * arrays) into m->ops / m->op_layer; returns the op count.  The final
 * residual is t->x[*x_final]. */
size_t sih_plan_trunk(si_model *m, const sih_acts *t, const int32_t *pos,
                      const int32_t *seq, int *x_final);
/* Asks the backend whether it runs every op; names the first refusal. */
int  sih_plan_check(const si_model *m, const si_op *ops, const int32_t *op_layer,
                    size_t n_ops, uint32_t n_tok, si_err *err);
/* Dry run at load: plans a 1-token step and checks every op. */
int  sih_plan_validate(si_model *m, si_err *err);
int  sih_forward(si_model *m, const si_batch *batch, float *logits, si_err *err);
/* sih_forward with SI_OP_TOPK on the wanted rows (si_model_ops.forward_topk);
 * SI_EUNSUPPORTED, before anything runs, when the backend lacks TOPK. */
int  sih_forward_topk(si_model *m, const si_batch *batch, const si_topk_params *tp, float *vals,
                      int32_t *ids, si_err *err);
/* si_model_ops.topk_submit / topk_collect (decode ahead). */
int  sih_topk_submit(si_model *m, const si_batch *batch, const si_topk_params *tp, uint32_t flags, si_err *err);
int  sih_topk_collect(si_model *m, float *vals, int32_t *ids, si_err *err);
int  sih_topk_post(si_model *m, const int32_t *tokens, uint32_t n, si_err *err);

/* ---- model.c ---- */
bool sih_accepts(const si_host *h, const si_gguf *g, const char *arch);
int  sih_load(const sih_family *fam, const si_host *h, const si_gguf *g,
              const si_backend_ref *be, uint32_t n_seq, uint32_t n_ctx,
              si_model **out, si_err *err);
void sih_unload(si_model *m);
void sih_info(const si_model *m, si_model_info *out);
int  sih_seq_reset(si_model *m, uint32_t seq, si_err *err);

#endif /* SI_MODELS_HYBRID_H */
