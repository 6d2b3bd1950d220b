/*
 * kv/plan.c: the residency planner (policy in kv/plan.h). Pure: the same
 * inputs give the same plan; nothing here touches memory outside its
 * arguments.
 */
#include <string.h>

#include "error.h"
#include "kv/plan.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

lkv_status lkv_plan_make(const lkv_plan_params *p, int32_t n_tokens, lkv_plan *out,
                         int32_t *resident) {
    if (p->n_layer <= 0 || p->kv_chunk <= 0 || p->row_bytes_k <= 0 || p->row_bytes_v <= 0 ||
        p->n_ctx <= 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "plan: n_layer, kv_chunk, row bytes and n_ctx must be > 0");
    if (p->arena_bytes < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "plan: arena_bytes (%lld) must be >= 0",
                        (long long)p->arena_bytes);
    if (n_tokens < 0 || n_tokens > p->n_ctx)
        return lkv_fail(LKV_ERR_INVALID_ARG, "plan: n_tokens %d outside [0, n_ctx=%d]", n_tokens,
                        p->n_ctx);
    const int64_t L = p->n_layer, C = p->kv_chunk;
    const int64_t cb = C * (p->row_bytes_k + p->row_bytes_v);
    const int64_t nc = ceil_div(n_tokens, C), nc_max = ceil_div(p->n_ctx, C);
    const int64_t all_bytes = L * nc_max * cb;
    memset(out, 0, sizeof *out);
    out->n_chunks = (int32_t)nc;
    out->min_pool_bytes = 2 * cb < all_bytes ? 2 * cb : all_bytes;

    int64_t F, ring = 0, T;
    if (p->pool_bytes < 0) {
        F = nc_max;
    } else {
        if (p->pool_bytes < out->min_pool_bytes)
            return lkv_fail(LKV_ERR_POOL_TOO_SMALL, "KV pool of %lld bytes is below the minimum of "
                            "%lld bytes (%.2f MiB: two chunks of %lld positions x %lld layers' "
                            "row bytes)", (long long)p->pool_bytes,
                            (long long)out->min_pool_bytes, out->min_pool_bytes / 1048576.0,
                            (long long)C, (long long)(p->row_bytes_k + p->row_bytes_v));
        F = p->pool_bytes / (L * cb);
    }
    if (nc <= F) {
        T = L * nc;
        for (int64_t l = 0; resident && l < L; l++) resident[l] = (int32_t)nc;
        out->resident_min = out->resident_max = (int32_t)nc;
    } else {
        ring = p->pool_bytes / 8;
        if (ring > LKV_PLAN_MAX_RING) ring = LKV_PLAN_MAX_RING;
        ring = ring / cb * cb;
        if (ring < 2 * cb) ring = 2 * cb;
        int64_t r = (p->pool_bytes - ring) / cb / L;
        if (r > F) r = F;
        /* the arena's whole chunks per layer, after the pool's, up to the last chunk */
        int64_t e = p->arena_bytes / (L * cb);
        if (e > nc_max - r) e = nc_max - r;
        out->arena_chunks = (int32_t)e;
        out->pool_bytes = r * L * cb + ring;
        r += e;
        T = r * L;
        for (int64_t l = 0; resident && l < L; l++) resident[l] = (int32_t)r;
        out->resident_min = out->resident_max = (int32_t)r;
        /* one decode step ending at n_tokens streams rows [r * C, n_tokens - 1) of each layer */
        int64_t rows = (int64_t)n_tokens - 1 - r * C;
        if (rows > 0) out->streamed_bytes = L * rows * (p->row_bytes_k + p->row_bytes_v);
    }
    out->resident_chunks = T;
    out->ring_bytes = ring;
    if (!ring) out->pool_bytes = T * cb;
    return LKV_OK;
}

lkv_status lkv_plan_shares(int64_t pool_bytes, int32_t n_seq, const int32_t *active,
                           int64_t min_share, int64_t *offset, int64_t *bytes) {
    if (n_seq <= 0 || pool_bytes < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "plan: n_seq (%d) must be > 0 and the pool (%lld "
                        "bytes) >= 0", n_seq, (long long)pool_bytes);
    int64_t n_active = 0;
    for (int32_t i = 0; i < n_seq; i++) n_active += active[i] != 0;
    const int64_t share = n_active ? pool_bytes / n_active / LKV_PLAN_ALIGN * LKV_PLAN_ALIGN : 0;
    if (n_active && share < min_share)
        return lkv_fail(LKV_ERR_POOL_TOO_SMALL, "KV pool of %lld bytes split among %lld sequences "
                        "gives %lld bytes each, below a sequence's minimum of %lld bytes",
                        (long long)pool_bytes, (long long)n_active, (long long)share,
                        (long long)min_share);
    int64_t k = 0;
    for (int32_t i = 0; i < n_seq; i++) {
        offset[i] = active[i] ? k * share : 0;
        bytes[i] = active[i] ? share : 0;
        k += active[i] != 0;
    }
    return LKV_OK;
}
