/*
 * backend.h: the table of operations a backend supplies.
 *
 * forward.c drives one micro-batch through these ops; kv/ moves KV rows with
 * the copy ops. Buffers passed to ops live in the backend's memory (host
 * memory for the CPU, device memory for CUDA) and were obtained from its
 * alloc. Activations are f32, row-major, one row per token. Ops are enqueued
 * in order on the backend's compute stream; a host-visible result is ready
 * after sync. Shapes are in the comment beside each op.
 *
 * Attention works on KV segments (contiguous rows of one layer at known
 * positions) and a running state per (query, head): attn_accum folds, chunk
 * by chunk in increasing chunk order, the partial attention over every chunk
 * in [chunk_lo, chunk_hi) into the state, using only rows at positions <= the
 * query's. A chunk's partial is computed over all of its rows at once, found
 * in whichever segments hold them, with arithmetic that does not depend on how
 * the rows are split into segments. The result is therefore the same for any
 * placement of chunks, which is the exactness contract (docs/design.md sections 3-4).
 */
#ifndef LKV_BACKEND_H
#define LKV_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "llamakv.h"
#include "model.h"

typedef struct lkv_kv_seg {
    int32_t pos0;        /* position of row 0 */
    int32_t n;           /* rows */
    const void *k;       /* (n, row_bytes_k) in type_k */
    const void *v;       /* (n, row_bytes_v) in type_v */
} lkv_kv_seg;

#define LKV_MAX_SEGS 64
#define LKV_ROWS_MAX 64   /* the most rows (tokens) attn_rows and rope_store_rows take */

/* Geometry of one attention call. */
typedef struct lkv_attn_desc {
    int32_t n_q;         /* queries (tokens of the micro-batch) */
    int32_t q_pos0;      /* position of query 0; query i is at q_pos0 + i */
    int32_t n_head, n_head_kv, head_dim;
    int32_t type_k, type_v;
    int32_t chunk;       /* positions per chunk */
    int32_t chunk_lo, chunk_hi;
    float scale;         /* 1/sqrt(head_dim) */
    int32_t n_segs;
    lkv_kv_seg segs[LKV_MAX_SEGS];
    int32_t window;      /* > 0: query p sees only positions > p - window (a sliding-window
                            layer); chunks wholly before that are empty; 0: all <= p */
} lkv_attn_desc;

typedef struct lkv_rope_desc {
    int32_t n_head, head_dim, rope_dim;
    float freq_base, freq_scale;
    int32_t neox;
    const float *freq_factors;   /* backend memory, (rope_dim/2,) or NULL */
} lkv_rope_desc;

/* Geometry of a Gated DeltaNet layer's delta rule (hybrid models). Value
 * head h reads query/key head h % n_k_heads (llama.cpp's GGUF order: value
 * heads tiled over the key heads). */
typedef struct lkv_delta_desc {
    int32_t n_k_heads, n_v_heads, head_k_dim, head_v_dim;
    int32_t stride;      /* floats per token of qkv: q at 0, k at nk*dk, v at 2*nk*dk */
    float l2_eps;        /* q and k are l2-normalised with this epsilon */
} lkv_delta_desc;

/* cs[2i], cs[2i+1] = cos, sin of pair i's angle at position pos (i < rope_dim/2),
 * with freq_factors given in host memory (ff, or NULL): the angles of every
 * backend, computed on the host by the C library (cpu/ops.c) */
void lkv_rope_angles(const lkv_rope_desc *r, const float *ff, int32_t pos, float *cs);

typedef struct lkv_backend lkv_backend;
typedef struct lkv_bctx lkv_bctx;   /* a backend's per-context state */

struct lkv_backend {
    const char *name;

    /* model: make weights usable (device copies); undo */
    lkv_status (*model_init)(struct lkv_model *m);
    void (*model_free)(struct lkv_model *m);

    /* context: compute state (threads, streams, workspace) */
    lkv_status (*ctx_init)(lkv_bctx **out, const struct lkv_model *m, int n_threads,
                           int max_tokens);
    void (*ctx_free)(lkv_bctx *b);

    /* memory in the backend's address space; NULL on failure */
    void *(*alloc)(lkv_bctx *b, size_t bytes);
    void (*free)(lkv_bctx *b, void *p);

    /* ---- compute ops (compute stream) ---- */
    /* out (n, w->cols) = rows tokens[i] of w, dequantized */
    void (*get_rows)(lkv_bctx *b, float *out, const lkv_weight *w, const int32_t *tokens, int n);
    /* out (n, dim) = x / rms(x) * w (w may be NULL: no scale); out may be x */
    void (*rmsnorm)(lkv_bctx *b, float *out, const float *x, const lkv_weight *w, int n, int dim,
                    float eps);
    /* x (n, dim) += y, then out = rmsnorm(x) * w: add then rmsnorm, fused
     * (optional: NULL makes the caller call the two) */
    void (*add_rmsnorm)(lkv_bctx *b, float *x, const float *y, float *out, const lkv_weight *w,
                        int n, int dim, float eps);
    /* outs[i] (n, ws[i]->rows) = x (n, cols) @ ws[i]^T for i < n_w; one input, several weights */
    void (*matmul)(lkv_bctx *b, float *const *outs, const float *x, const lkv_weight *const *ws,
                   int n_w, int n);
    /* x (n, dim) += bias (dim,) */
    void (*add_bias)(lkv_bctx *b, float *x, const lkv_weight *bias, int n, int dim);
    /* x (n, n_head, head_dim) rotated in place; position of row i: pos0 + i */
    void (*rope)(lkv_bctx *b, float *x, int n, int32_t pos0, const lkv_rope_desc *r);
    /* rope(q, rq) and rope(k, rk), then to_type(kdst, type_k, k) and
     * to_type(vdst, type_v, v) with n_head_kv * head_dim elements per row, as
     * one op (optional: NULL, or 0 returned when the shapes or types are not
     * covered, makes the caller call the four) */
    int (*rope_store)(lkv_bctx *b, float *q, float *k, const float *v, int n, int32_t pos0,
                      const lkv_rope_desc *rq, const lkv_rope_desc *rk, void *kdst,
                      int32_t type_k, void *vdst, int32_t type_v);
    /* out (n) = silu(gate) * up */
    void (*swiglu)(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n);
    /* out (n, wg->rows) = silu(x @ wg^T) * (x @ wu^T): the two matmuls and
     * swiglu as one op (optional: NULL, or 0 returned when the types or shapes
     * are not covered, makes the caller call them) */
    int (*matmul_swiglu)(lkv_bctx *b, float *out, const float *x, const lkv_weight *wg,
                         const lkv_weight *wu, int n);
    /* x (n) += y */
    void (*add)(lkv_bctx *b, float *x, const float *y, int64_t n);
    /* dst (n_rows, row_bytes(type, n_elems)) = src (n_rows, n_elems) converted to type */
    void (*to_type)(lkv_bctx *b, void *dst, int32_t type, const float *src, int n_rows,
                    int n_elems);
    /* attention state: st holds (n_q, n_head) running (m, l, o[head_dim]) */
    size_t (*attn_state_bytes)(int n_q, int n_head, int head_dim);
    void (*attn_reset)(lkv_bctx *b, void *st, int n_q, int n_head, int head_dim);
    void (*attn_accum)(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);
    /* out (n_q, n_head*head_dim) = state normalised */
    void (*attn_finish)(lkv_bctx *b, float *out, const void *st, int n_q, int n_head, int head_dim);
    /* attn_reset, attn_accum(d) and attn_finish(out) as one op; st's contents
     * are unspecified afterwards (optional: NULL, or 0 returned when the shape
     * is not covered, makes the caller call the three) */
    int (*attn_whole)(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *d);

    /* ---- movement ---- */
    /* device -> host of finished compute results (waits for the compute stream) */
    void (*download)(lkv_bctx *b, void *host_dst, const void *src, size_t bytes);
    /* host -> device on the compute stream (host_src may be reused on return) */
    void (*upload)(lkv_bctx *b, void *dst, const void *host_src, size_t bytes);
    /* device -> device copy on the compute stream */
    void (*copy_d2d)(lkv_bctx *b, void *dst, const void *src, size_t bytes);
    /* wait until all enqueued compute is done; LKV_ERR_DEVICE on a device error */
    lkv_status (*sync)(lkv_bctx *b);

    /* ---- decode-step graph (optional: NULL on backends without one) ----
     * A step whose ops depend on the step only through its tokens and its
     * first position pos0 (all-resident KV, a few tokens) may be recorded
     * once and replayed at later positions. `key` names everything else the
     * ops depend on (the caller's choice: token count, logits rows, number of
     * attention chunks). step_begin returns 1 when it replayed the recording
     * of `key` for these tokens and pos0: the caller skips the step's ops and
     * does not call step_end. It returns 0 when the caller must issue the
     * ops (the backend may record them), then call step_end, which runs them
     * and returns 0, or -1 when the recording failed and nothing ran: the
     * caller issues the ops again without step_begin. Between the two the
     * caller must not call sync, download, upload or alloc. */
    int (*step_begin)(lkv_bctx *b, uint64_t key, const int32_t *tokens, int n, int32_t pos0);
    int (*step_end)(lkv_bctx *b);

    /* ---- KV streaming (kv/stream.c) ----
     * Two queues: compute (the ops above) and copy. Tickets are increasing
     * numbers naming a point in one queue. The copy queue runs copies in the
     * order they were enqueued. */
    /* host memory the copy queue can reach at full speed (pinned on CUDA) */
    void *(*host_alloc)(lkv_bctx *b, size_t bytes);
    void (*host_free)(lkv_bctx *b, void *p);
    /* start the copy queue; LKV_ERR_* on failure */
    lkv_status (*copier_init)(lkv_bctx *b);
    /* enqueue a copy (h2d: host -> backend memory; else backend -> host); its ticket */
    uint64_t (*copy_async)(lkv_bctx *b, void *dst, const void *src, size_t bytes, int h2d);
    /* compute waits for copy ticket t before its next op; returns 1 if t was
     * not yet done when asked (a copy wait), else 0 */
    int (*compute_wait_copy)(lkv_bctx *b, uint64_t t);
    /* ticket for the compute enqueued so far */
    uint64_t (*compute_mark)(lkv_bctx *b);
    /* later copies wait for compute ticket t */
    void (*copy_wait_compute)(lkv_bctx *b, uint64_t t);
    /* host waits for every enqueued copy; LKV_ERR_DEVICE on failure */
    lkv_status (*copy_sync)(lkv_bctx *b);
    /* enqueue `height` copies of `width` bytes, row i from src + i*spitch to
     * dst + i*dpitch, as one copy; optional (NULL: the caller loops) */
    uint64_t (*copy_async_2d)(lkv_bctx *b, void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height, int h2d);

    /* kernels that are not bit-identical with the CPU backend, where faster
     * (lkv_context_params.gpu_kernels); optional (NULL: there is one kind) */
    void (*set_fast)(lkv_bctx *b, int fast);

    /* ---- hybrid layers (last in the table, so that positional initializers
     * leave them NULL; optional: a backend without delta_rule cannot load
     * hybrid models; the model fails with LKV_ERR_UNSUPPORTED) ---- */
    /* q, gate (n_rows, dim) = the even and the odd rows of x (2*n_rows, dim) */
    void (*split_rows)(lkv_bctx *b, float *q, float *gate, const float *x, int n_rows, int dim);
    /* x (n) *= sigmoid(gate) */
    void (*sigmoid_mul)(lkv_bctx *b, float *x, const float *gate, int64_t n);
    /* out (n, dim) = rmsnorm(x) * w * silu(z), row by row; out may be x */
    void (*rmsnorm_gated)(lkv_bctx *b, float *out, const float *x, const lkv_weight *w,
                          const float *z, int n, int dim, float eps);
    /* out (n, ch) = silu(causal depthwise conv of x (n, ch) with taps w (ch, K)), the K-1
     * inputs before x taken from state (K-1, ch), oldest first; state then holds the
     * last K-1 inputs of [state; x] */
    void (*ssm_conv)(lkv_bctx *b, float *out, const float *x, float *state, const lkv_weight *w,
                     int n, int ch);
    /* out (n, nv*dv) = the gated delta rule over qkv (n, d->stride) with
     * beta = sigmoid(beta_in (n, nv)) and log-decay g = a * softplus(alpha (n, nv) + dt),
     * from and into state (nv, dk, dv) */
    void (*delta_rule)(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                       const float *alpha, const lkv_weight *a, const lkv_weight *dt,
                       float *state, const lkv_delta_desc *d, int n);

    /* contexts with a pool bound put their prefill workspace in a phase arena
     * lent to the KV cache while decoding, unless asked not to (arena.h) */
    int phase_arena;

    /* the decode attention of n <= LKV_ROWS_MAX rows of several sequences in one op, each
     * sequence's KV all resident: row i, at position pos[i], attends positions
     * [0, pos[i]] of planes k[i], v[i] (geo: heads, types, chunk, scale); q,
     * st and out hold the n rows in order, as for one call of n queries; the
     * bits of attn_reset + attn_accum + attn_finish per sequence (optional:
     * NULL, or 0 returned when not covered, makes the caller attend sequence
     * by sequence) */
    int (*attn_rows)(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *geo, int n,
                     const int32_t *pos, const void *const *k, const void *const *v);
    /* rope_store for the n_groups runs of a micro-batch (LKV_ROWS_MAX tokens
     * at most) in one op: run g is
     * len[g] tokens (rows in order) from position pos0[g], its K/V rows going
     * to kdst[g], vdst[g] (optional: NULL, or 0 returned when not covered,
     * makes the caller call rope_store per run; the same bits) */
    int (*rope_store_rows)(lkv_bctx *b, float *q, float *k, const float *v, int n_groups,
                           const int32_t *pos0, const int32_t *len, const lkv_rope_desc *rq,
                           const lkv_rope_desc *rk, void *const *kdst, void *const *vdst,
                           int32_t type_k, int32_t type_v);

    /* ---- gemma3 (optional: a backend without geglu cannot load models that need
     * these, nor sliding-window models: its attention ignores d->window) ---- */
    /* out (n) = gelu(gate) * up, gelu's tanh approximation; out may be gate */
    void (*geglu)(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n);
    /* x (n) *= s */
    void (*scale)(lkv_bctx *b, float *x, float s, int64_t n);
    /* x (n) = cap * tanh(x / cap) */
    void (*softcap)(lkv_bctx *b, float *x, float cap, int64_t n);

    /* ---- sampling on the device (optional: NULL makes decode.c's loop download
     * the logits and pick on the host, the same rule) ---- */
    /* *out = the greedy pick over logits (n, in backend memory): the index of the
     * largest (double)logits[i] + bias (bias[j] added at bias_ids[j], j < n_bias,
     * both arrays in backend memory, ids distinct), the lowest index among equal
     * ones; -1 when a value is NaN or the largest is not finite. Waits for the
     * result; returns LKV_ERR_DEVICE as sync does. */
    lkv_status (*pick_greedy)(lkv_bctx *b, const float *logits, int32_t n, const int32_t *bias_ids,
                              const double *bias, int32_t n_bias, int32_t *out);

    /* ---- mixture of experts (moe.c; optional: a backend without moe_topk cannot load
     * MoE models) ---- */
    /* per row r of logits (n, n_expert): ids (n, k) the k experts of the largest softmax
     * probabilities (largest first, ties to the lower id), wts (n, k) their probabilities,
     * renormalised to sum 1 when norm, times scale */
    void (*moe_topk)(lkv_bctx *b, int32_t *ids, float *wts, const float *logits, int n,
                     int n_expert, int k, int norm, float scale);
    /* out (n, dim): row i = x row rows[i] (rows (n,) in backend memory) */
    void (*gather_rows)(lkv_bctx *b, float *out, const float *x, const int32_t *rows, int n,
                        int dim);
    /* out row rows[i] += w[i] * y row i, i < n, dim wide rows; rows (n,) distinct, rows and
     * w (n,) in backend memory */
    void (*scatter_add_rows)(lkv_bctx *b, float *out, const float *y, const int32_t *rows,
                             const float *w, int n, int dim);
    /* x (n) = 0 */
    void (*zero)(lkv_bctx *b, float *x, int64_t n);
};

extern const lkv_backend lkv_backend_cpu;
#ifdef LKV_HAVE_CUDA
extern const lkv_backend lkv_backend_cuda;
#endif

#endif
