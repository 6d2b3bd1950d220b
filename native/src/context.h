/*
 * context.h: an inference context: the backend's compute state, the
 * workspace of one micro-batch, the KV cache and the logits.
 */
#ifndef LKV_CONTEXT_H
#define LKV_CONTEXT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "backend.h"
#include "kv/seqs.h"
#include "model.h"
#include "recurrent.h"

struct lkv_context {
    lkv_model *model;
    lkv_context_params p;
    const lkv_backend *be;
    lkv_bctx *b;
    lkv_kvset *kvs;          /* one KV cache per sequence, one pool */
    uint8_t *kv_local;       /* (n_layer_kv,) 1: a sliding-window layer (kv/cache.h) */
    int32_t n_seq;           /* p.n_seq_max */
    int32_t *seq_len;        /* (n_seq,) positions held by each sequence's cache */
    /* decode scratch, made at creation */
    uint8_t *want;           /* (n_batch,) rows whose logits are kept */
    struct lkv_group *groups;/* (n_batch,) one micro-batch's sequence runs */
    int32_t *seq_start;      /* (n_seq,) lengths before the decode call; -1: not in it */
    int32_t *active;         /* (n_seq,) lkv_kvset_prepare's argument */
    bool dead;               /* a device error happened */
    atomic_int abort;        /* lkv_context_set_abort: stop the running decode */

    /* workspace in backend memory, U = n_ubatch rows */
    float *x;                /* (U, n_embd) residual stream */
    float *h;                /* (U, max(n_embd, n_head*hd)) normed input / attention output */
    float *q;                /* (U, n_head*hd) */
    float *k, *v;            /* (U, n_kv*hd) f32 before conversion */
    float *ffn_g, *ffn_u;    /* (U, n_ff) */
    float *o;                /* (U, n_embd) projection output */
    void *attn_st;           /* backend attention state for U queries */
    float *logits_dev;       /* (logits_all ? U : 1, out_width) */
    struct lkv_arena *arena; /* the phase arena (arena.h), or NULL: the buffers above are
                                then each its own allocation */
    float *logits_wide;      /* (U, n_vocab), allocated by the first decode that asks for
                                more rows than logits_dev holds; never moves after that
                                (step graphs record it) */

    /* hybrid models (NULL otherwise); nv*dv = VD, conv_dim = CD */
    lkv_recur *rs;           /* sequence 0's recurrent state and its snapshots (= rs_seq[0]) */
    lkv_recur **rs_seq;      /* (n_seq) each sequence's (hybrids only) */
    float *qg;               /* (U, 2*n_head*hd) gated attention's q projection */
    float *gate;             /* (U, n_head*hd) its output gate */
    float *rs_qkv, *rs_conv; /* (U, CD) delta-rule q|k|v before and after the conv */
    float *rs_z;             /* (U, VD) output norm gate */
    float *rs_beta, *rs_alpha; /* (U, nv) */
    float *rs_out;           /* (U, VD) delta-rule output, then gated-normed */
    lkv_delta_desc delta;

    struct lkv_mtp *mtp;     /* the MTP block's cache and inputs (mtp.h), NULL unless p.mtp */
    struct lkv_moe *moe;     /* the experts' routing buffers (moe.h), NULL without experts */

    float *logits;           /* host (logit_rows_host, n_vocab) */
    int32_t logit_rows_host; /* logits_all ? n_batch : 1, n_batch once logits_wide exists */
    int32_t n_logit_rows;    /* rows valid after the last decode */
    bool logits_stay;        /* generate.c: decodes leave their logits row in logits_dev
                                (not copied to `logits`, which the loop refills at its end) */
    int32_t out_width;       /* floats per output row: n_vocab, or n_embd with embeddings */
    struct lkv_chain *chain; /* generate.c's sampler scratch (sample_chain.h), made by its first use */

    lkv_attn_desc geo;       /* head geometry for attention */
    lkv_rope_desc rope;
};

/* rows [row0, row0 + n) of a micro-batch: tokens of sequence seq at
 * positions pos0 .. pos0 + n - 1 */
typedef struct lkv_group {
    int32_t seq, pos0, row0, n;
} lkv_group;

/* One micro-batch of n <= n_ubatch tokens in n_groups runs, one per sequence */
typedef struct lkv_ubatch {
    const int32_t *tokens;
    int32_t n;
    const lkv_group *groups;
    int32_t n_groups;
    const uint8_t *want;     /* (n,) nonzero: the row's logits are kept */
    int32_t n_want;
} lkv_ubatch;

/* The device buffer the output head writes nl logits rows into. */
float *lkv_logits_dev(const struct lkv_context *c, int32_t nl);

/* Runs one micro-batch; the logits of the wanted rows go, packed in row
 * order, to host `logits_out` (NULL: they stay in backend memory). */
lkv_status lkv_forward(struct lkv_context *c, const lkv_ubatch *ub, float *logits_out);

/* One decoder block (forward.c): see there. */
lkv_status lkv_forward_block(struct lkv_context *c, const lkv_layer_weights *L,
                             const lkv_ubatch *ub, lkv_kv *own, const lkv_weight *next_norm,
                             bool kv_only);

/* LKV_ERR_ABORTED (with a message) when the abort flag is set, else LKV_OK */
lkv_status lkv_context_check_abort(const struct lkv_context *c);

/* the device and host rows a decode keeping several logits rows needs, made
 * once on first use (decode.c) */
lkv_status lkv_context_wide_logits(struct lkv_context *c);

#endif
