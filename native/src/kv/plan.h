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
 */
#ifndef LKV_KV_PLAN_H
#define LKV_KV_PLAN_H

#include "llamakv.h"

#define LKV_PLAN_MAX_RING ((int64_t)256 << 20)

lkv_status lkv_plan_make(const lkv_plan_params *p, int32_t n_tokens, lkv_plan *out,
                         int32_t *resident);

#endif
