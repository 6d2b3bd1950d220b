/*
 * kv/seqs.c: a context's per-sequence KV caches over one shared pool
 * (kv/seqs.h; the split of the pool is lkv_plan_shares, kv/plan.h).
 */
#include <stdlib.h>

#include "error.h"
#include "kv/plan.h"
#include "kv/seqs.h"

struct lkv_kvset {
    int32_t n_seq;
    lkv_kv **seq;
    const lkv_backend *be;
    lkv_bctx *b;
    char *pool;              /* NULL: no bound, all resident */
    int64_t pool_bytes, min_share;
    int64_t *off, *bytes;    /* (n_seq,) current shares */
    int64_t *new_off, *new_bytes;
};

/* a sequence's least pool (lkv_plan_make's minimum for one sequence) */
static lkv_status min_share(const lkv_kv_config *cfg, int64_t *out) {
    lkv_plan_params pp = {lkv_kv_config_streamed(cfg), cfg->chunk, cfg->row_bytes_k, cfg->row_bytes_v,
                          cfg->n_ctx, cfg->n_ubatch, -1};
    lkv_plan plan;
    LKV_TRY(lkv_plan_make(&pp, 0, &plan, NULL));
    *out = plan.min_pool_bytes;
    return LKV_OK;
}

lkv_status lkv_kvset_create(lkv_kvset **out, const lkv_kv_config *cfg, int32_t n_seq,
                            const lkv_backend *be, lkv_bctx *b) {
    lkv_kvset *ks = calloc(1, sizeof *ks);
    if (!ks) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV caches");
    ks->n_seq = n_seq;
    ks->be = be;
    ks->b = b;
    ks->seq = calloc((size_t)n_seq, sizeof *ks->seq);
    ks->off = calloc((size_t)n_seq * 4, sizeof(int64_t));
    lkv_status st = ks->seq && ks->off ? LKV_OK
                                       : lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV caches");
    if (!st) {
        ks->bytes = ks->off + n_seq;
        ks->new_off = ks->off + 2 * n_seq;
        ks->new_bytes = ks->off + 3 * n_seq;
    }
    lkv_kv_config one = *cfg;
    if (cfg->pool_bytes >= 0 && lkv_kv_config_streamed(cfg) == 0)
        one.pool_bytes = -1;   /* every layer local: nothing to stream, all resident */
    if (!st && one.pool_bytes >= 0 && n_seq > 1) {
        /* one pool; every sequence starts bound to its share with all active */
        int32_t *all = malloc(sizeof(int32_t) * (size_t)n_seq);
        if (!all) st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV caches");
        for (int32_t i = 0; all && i < n_seq; i++) all[i] = 1;
        ks->pool_bytes = cfg->pool_bytes;
        if (!st) st = min_share(cfg, &ks->min_share);
        if (!st) st = lkv_plan_shares(ks->pool_bytes, n_seq, all, ks->min_share, ks->off, ks->bytes);
        free(all);
        if (!st && !(ks->pool = be->alloc(b, (size_t)ks->pool_bytes)))
            st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate a KV pool of %lld bytes",
                          (long long)ks->pool_bytes);
    }
    for (int32_t i = 0; !st && i < n_seq; i++) {
        if (ks->pool) {
            one.pool_base = ks->pool + ks->off[i];
            one.pool_bytes = ks->bytes[i];
        }
        st = lkv_kv_create(&ks->seq[i], &one, be, b);
    }
    if (st) { lkv_kvset_free(ks); return st; }
    *out = ks;
    return LKV_OK;
}

void lkv_kvset_free(lkv_kvset *ks) {
    if (!ks) return;
    for (int32_t i = 0; ks->seq && i < ks->n_seq; i++) lkv_kv_free(ks->seq[i]);
    if (ks->pool) ks->be->free(ks->b, ks->pool);
    free(ks->seq);
    free(ks->off);
    free(ks);
}

lkv_kv *lkv_kvset_seq(const lkv_kvset *ks, int32_t seq) { return ks->seq[seq]; }

lkv_status lkv_kvset_prepare(lkv_kvset *ks, const int32_t *active) {
    if (!ks->pool) return LKV_OK;
    LKV_TRY(lkv_plan_shares(ks->pool_bytes, ks->n_seq, active, ks->min_share, ks->new_off,
                            ks->new_bytes));
    /* first every moved sequence lets go of its old share (waiting for its
     * copies in flight), so no share is written while its former owner's
     * copies may still land there */
    for (int32_t i = 0; i < ks->n_seq; i++) {
        if (!active[i] || (ks->new_off[i] == ks->off[i] && ks->new_bytes[i] == ks->bytes[i]))
            continue;
        LKV_TRY(lkv_kv_rebind(ks->seq[i], ks->pool + ks->new_off[i], ks->new_bytes[i]));
        ks->off[i] = ks->new_off[i];
        ks->bytes[i] = ks->new_bytes[i];
    }
    return LKV_OK;
}
