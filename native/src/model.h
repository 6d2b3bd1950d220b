/*
 * model.h: the model as the core sees it: hyper-parameters, the per-arch
 * table of differences, and one lkv_weight per tensor.
 *
 * A weight is a matrix of `rows` rows of `cols` elements (ggml: ne[1] rows of
 * ne[0] contiguous elements), stored in the GGUF block format of `type`. On
 * the CPU `data` points into the caller's memory map (nothing is copied); a
 * device backend keeps its own copy in `dev`.
 */
#ifndef LKV_MODEL_H
#define LKV_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llamakv.h"

struct lkv_backend;

#define LKV_MOE_MAX_EXPERTS 1024   /* routed experts per layer */
#define LKV_MOE_MAX_USED 64        /* experts per token */

typedef struct lkv_weight {
    int32_t type;
    int64_t rows;        /* output features (ne[1]); 1 for vectors */
    int64_t cols;        /* input features  (ne[0]) */
    size_t row_bytes;    /* bytes of one row in `type` */
    const void *data;    /* host bytes, rows * row_bytes; NULL if absent */
    void *dev;           /* backend copy (device backends), else NULL */
    bool host;           /* kept in host memory even on a device backend (n_cpu_moe's experts):
                            no dev copy; computed by the CPU */
} lkv_weight;

/* What distinguishes one architecture from another inside the one forward. */
typedef struct lkv_arch_traits {
    const char *name;
    bool rope_neox;      /* rotate halves (neox) instead of adjacent pairs */
    bool qkv_bias;       /* q/k/v projections carry biases */
    bool qk_norm;        /* per-head rms norm on q and k before rope */
    bool q_gate;         /* q projection of twice the width, per head [q | gate]; the
                            attention output is multiplied by sigmoid(gate) (qwen35) */
    bool hybrid;         /* Gated DeltaNet layers beside full attention (full_attn_interval) */
    const char *ffn_norm_name;   /* the pre-FFN norm's tensor: "ffn_norm" or "post_attention_norm" */
    bool gemma;          /* gemma3: embeddings * sqrt(n_embd); rms norms on the attention and
                            FFN outputs (post_attention_norm, post_ffw_norm) before each
                            residual add; GeGLU (tanh gelu) instead of SwiGLU */
    bool moe;            /* every layer's FFN is routed experts (moe.c) instead of one SwiGLU */
    bool shared_expert;  /* beside the routed experts a shared one, scaled by sigmoid(its gate) */
} lkv_arch_traits;

typedef struct lkv_layer_weights {
    lkv_weight attn_norm;            /* (n_embd,) f32 */
    lkv_weight wq, wk, wv, wo;       /* (n_head*hd, n_embd) (n_kv*hd, n_embd) x2, (n_embd, n_head*hd) */
    lkv_weight bq, bk, bv;           /* biases, f32, qwen2 only */
    lkv_weight q_norm, k_norm;       /* (hd,) f32, qwen3 only */
    lkv_weight ffn_norm;             /* (n_embd,) f32 */
    lkv_weight w_gate, w_up;         /* (n_ff, n_embd) */
    lkv_weight w_down;               /* (n_embd, n_ff) */
    lkv_weight attn_post_norm;       /* (n_embd,) f32, gemma only: on the attention output */
    lkv_weight ffn_post_norm;        /* (n_embd,) f32, gemma only: on the FFN output */
    bool swa;                        /* a local (sliding-window) attention layer */

    /* hybrid models: a layer is attention (kv_layer >= 0) or Gated DeltaNet (rs_layer >= 0).
     * With nk, nv heads of dk, dv and conv_dim = 2*nk*dk + nv*dv: */
    int32_t kv_layer;                /* index of this layer in the KV cache, else -1 */
    int32_t rs_layer;                /* index of this layer in the recurrent state, else -1 */
    lkv_weight ssm_qkv;              /* (conv_dim, n_embd) attn_qkv: q | k | v before the conv */
    lkv_weight ssm_z;                /* (nv*dv, n_embd) attn_gate: the output norm's gate */
    lkv_weight ssm_beta, ssm_alpha;  /* (nv, n_embd) write strength, decay input */
    lkv_weight ssm_conv;             /* (conv_dim, K) f32 taps, tap K-1 on the current token */
    lkv_weight ssm_a;                /* (nv,) f32: -exp(A_log) */
    lkv_weight ssm_dt;               /* (nv,) f32: dt bias */
    lkv_weight ssm_norm;             /* (dv,) f32 gated rms norm weight */
    lkv_weight ssm_out;              /* (n_embd, nv*dv) */

    /* mixture of experts (arch->moe), with X = n_expert, Fe = n_ff_exp, Fs = n_ff_shexp; the
     * 3-D expert tensors are held as matrices of X stacked experts (expert e: rows
     * [e*rows/X, (e+1)*rows/X), moe.c) */
    lkv_weight moe_router;           /* (X, n_embd) ffn_gate_inp: the router's logits */
    lkv_weight exp_gate, exp_up;     /* (X*Fe, n_embd) ffn_gate_exps, ffn_up_exps */
    lkv_weight exp_down;             /* (X*n_embd, Fe) ffn_down_exps */
    lkv_weight exp_gate_up;          /* (X*2*Fe, n_embd) ffn_gate_up_exps, in files with the two
                                        fused (then exp_gate, exp_up absent): expert e's gate
                                        rows, then its up rows */
    lkv_weight sh_gate_inp;          /* (1, n_embd) ffn_gate_inp_shexp: the shared expert's gate */
    lkv_weight sh_gate, sh_up;       /* (Fs, n_embd) ffn_gate_shexp, ffn_up_shexp */
    lkv_weight sh_down;              /* (n_embd, Fs) ffn_down_shexp */
} lkv_layer_weights;

/* One MTP (nextn) block: a full-attention layer fed with
 * eh_proj([enorm(embed(token t+1)) | hnorm(h_t)]), h_t the trunk's hidden state at t
 * after output_norm; shared_head_norm and shared_head_head (or output_norm and output)
 * then give the logits of token t+2. Run by mtp.c (what and when: mtp.h). */
typedef struct lkv_nextn_weights {
    lkv_layer_weights blk;           /* attention + FFN weights, as a trunk attention layer */
    lkv_weight eh_proj;              /* (n_embd, 2*n_embd) */
    lkv_weight enorm, hnorm;         /* (n_embd,) f32 */
    lkv_weight shared_head_norm;     /* (n_embd,) f32, optional (else output_norm) */
    lkv_weight embed_tokens;         /* (n_vocab, n_embd), optional (else tok_embd) */
    lkv_weight shared_head_head;     /* (n_vocab, n_embd), optional (else output) */
} lkv_nextn_weights;

struct lkv_model {
    lkv_model_params hp;
    const lkv_arch_traits *arch;
    lkv_weight tok_embd;             /* (n_vocab, n_embd) */
    lkv_weight output_norm;          /* (n_embd,) f32 */
    lkv_weight output;               /* (n_vocab, n_embd); == tok_embd when tied */
    lkv_weight rope_freqs;           /* (rope_dim/2,) f32 factors, optional (llama 3.1) */
    bool tied_output;
    lkv_layer_weights *layers;       /* (n_layer,) */
    int32_t n_layer_kv;              /* layers with a KV cache */
    int32_t n_layer_rs;              /* Gated DeltaNet layers (recurrent state) */
    lkv_nextn_weights *nextn;        /* (hp.n_nextn,) or NULL */
    const struct lkv_backend *be;    /* backend the model's contexts run on */
    void *be_state;                  /* backend's per-model state */
    int64_t weight_bytes;
};

/* Calls fn on every weight the model holds (present or not). */
void lkv_model_foreach_weight(struct lkv_model *m, void (*fn)(lkv_weight *w, void *ud), void *ud);

#endif
