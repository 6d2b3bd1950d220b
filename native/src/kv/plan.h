/*
 * kv/plan.h: the residency planner (pure logic, no device).
 *
 * For a cache whose next step ends with n_tokens positions it decides how
 * many leading chunks of each attention layer stay resident in the device
 * pool and how many bytes of the pool form the transfer ring.
 *
 * Policy, with cb = bytes of one chunk (K and V), L layers, P the pool:
 * - F = floor(P / (L * cb)) chunks per layer fit with no ring. While
 *   nc = ceil(n_tokens / C) <= F everything is resident and the ring is 0.
 * - Beyond that the ring takes R = clamp(P / 8, 2 * cb, 256 MiB) (rounded down
 *   to whole chunks) and every layer keeps r = min(floor((P - R) / cb / L), F)
 *   chunks resident (the same for all layers, so each layer's resident chunks
 *   sit contiguously in the pool; at most L - 1 chunks of the pool go unused).
 *   r does not depend on n_tokens, so resident chunks never increase as the
 *   context grows, and never exceed what was resident just before.
 * - The least pool a context accepts is min(2 * cb, L * nc(n_ctx) * cb).
 * - Phase arena (arena_bytes A > 0: the prefill workspace, lent while
 *   decoding; native/src/arena.h): only while the pool streams, each layer
 *   keeps e = min(floor(A / (L * cb)), nc(n_ctx) - r) more chunks resident,
 *   chunks [r, r + e), in the arena. resident[] and resident_chunks count
 *   them, arena_chunks = e, pool_bytes stays the pool's part, and a decode
 *   step streams e * C fewer rows per layer. e does not depend on n_tokens
 *   either. Entering prefill (A = 0) drops them without a copy back (the
 *   host is authoritative); entering decode refills them from the host.
 *
 * Several sequences, one pool (lkv_plan_shares): a context of n_seq_max
 * sequences has one pool, split into shares; each sequence is then planned
 * within its share by lkv_plan_make as above, as if it were a context of its
 * own (its resident prefix and its ring lie inside the share).
 * - A sequence is active when it holds positions or has tokens in the step.
 * - The pool is split equally among the active sequences, in seq-id order:
 *   every active sequence gets share = floor(P / n_active / A) * A bytes
 *   (A = LKV_PLAN_ALIGN), the k-th active one at offset k * share; inactive
 *   sequences get nothing (offset 0, 0 bytes).
 * - So the shares depend only on the set of active sequences: they move only
 *   when a sequence joins or leaves, and a moved sequence refills its
 *   resident chunks from its host store (no copy back: the host is
 *   authoritative). A sequence alone gets the whole pool.
 * - Residency never changes logits (attention splits by position only), so a
 *   sequence's logits depend neither on the pool nor on its neighbours.
 * - A share below min_share (a sequence's least pool) fails: a context
 *   accepts a pool only if n_seq_max active sequences all fit.
 */
#ifndef LKV_KV_PLAN_H
#define LKV_KV_PLAN_H

#include "llamakv.h"

#define LKV_PLAN_MAX_RING ((int64_t)256 << 20)
#define LKV_PLAN_ALIGN 256

/* offset[i], bytes[i] for i < n_seq from active[i] != 0 (policy above) */
lkv_status lkv_plan_shares(int64_t pool_bytes, int32_t n_seq, const int32_t *active,
                           int64_t min_share, int64_t *offset, int64_t *bytes);

lkv_status lkv_plan_make(const lkv_plan_params *p, int32_t n_tokens, lkv_plan *out,
                         int32_t *resident);

#endif
