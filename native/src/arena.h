/*
 * arena.h: the micro-batch workspace and the phase arena.
 *
 * The workspace is the context's activation buffers of one micro-batch
 * (context.h: x, h, q, k, v, ffn_g, ffn_u, o, attn_st and a hybrid's rows).
 * Without an arena each is one backend allocation of n_ubatch rows.
 *
 * With the phase arena (lkv_context_params.phase_arena; only with a pool
 * bound, one sequence and n_ubatch > LKV_DECODE_ROWS) the n_ubatch-row set
 * is carved from one allocation, the arena, and a second set of
 * LKV_DECODE_ROWS rows has allocations of its own:
 * - a micro-batch of more than LKV_DECODE_ROWS tokens is prefill: it runs on
 *   the arena's set, and the KV cache has only its pool;
 * - one of at most that many is decode: it runs on the small set while the
 *   arena is lent to sequence 0's KV cache for extra resident chunks
 *   (kv/plan.h, kv/stream.c).
 * The host store holds every KV row, so taking the arena back copies
 * nothing: a phase change waits for the copies in flight and, entering
 * decode, the next step refills the extra chunks from the host once; steps
 * of the same phase cost nothing more. Logits do not depend on it (the
 * attention splits by position only, and each micro-batch runs the same ops
 * on buffers of either set).
 */
#ifndef LKV_ARENA_H
#define LKV_ARENA_H

#include <stdint.h>

#include "llamakv.h"

#define LKV_DECODE_ROWS 16

struct lkv_context;
typedef struct lkv_arena lkv_arena;

/* Allocates the workspace of c (c->p, c->be, c->b, c->model set), with the
 * arena where c->p asks for it and allows it. */
lkv_status lkv_ws_create(struct lkv_context *c);
/* Frees it (also a partly made one). */
void lkv_ws_free(struct lkv_context *c);
/* Before a micro-batch of n tokens: the phase it needs (no-op without an arena). */
lkv_status lkv_ws_phase(struct lkv_context *c, int32_t n);
/* The arena's bytes (0: none) */
int64_t lkv_ws_arena_bytes(const struct lkv_context *c);

#endif
