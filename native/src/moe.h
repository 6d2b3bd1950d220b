/*
 * moe.h: a mixture-of-experts FFN (qwen3moe, qwen35moe) through the backend's ops.
 *
 * With h (n, n_embd) the FFN's normed input, X experts, k used per token:
 *
 *   p        = softmax(h @ Wrouter^T)                 (n, X)
 *   ids, w   = top k of p per row [/ their sum] [* scale]
 *   o        = sum over the k picks of w * down_e(silu(gate_e(h)) * up_e(h))
 *            [+ sigmoid(h . w_shgate) * down_s(silu(gate_s(h)) * up_s(h))]   (shared expert)
 *
 * Tokens are grouped by expert: each expert that any row picked runs once over
 * its rows (gathered), so a prefill reads each picked expert's weights once.
 * The picks come back to the host (a download of n*k ids and weights) to
 * form the groups. Every output element is the backend's matmul of one row,
 * and a row's contributions are added in expert order, so a batch gives the
 * same bits as its rows one at a time.
 *
 * Host experts (n_cpu_moe: the layer's expert weights marked host, model.h):
 * the router, the shared expert and everything else run on the backend; h
 * comes to the host with the picks, the routed experts run there on the CPU
 * backend's ops (a CPU context of its own beside a device backend's), the
 * backend computing the shared expert meanwhile, and their sum goes back up
 * as the start of o. On the CPU backend itself the same path runs on the
 * context's own CPU state (the bits of the other path: the same kernels).
 */
#ifndef LKV_MOE_H
#define LKV_MOE_H

#include "context.h"

typedef struct lkv_moe lkv_moe;

/* buffers for c's micro-batch (c->p.n_ubatch rows); *out NULL for models without experts */
lkv_status lkv_moe_create(lkv_context *c, lkv_moe **out);
void lkv_moe_free(lkv_context *c, lkv_moe *t);

/* c->o (n, n_embd) = the MoE FFN of c->h (n, n_embd) for layer L */
lkv_status lkv_moe_ffn(lkv_context *c, const lkv_layer_weights *L, int n);

#endif
