/*
 * kv/seqs.h: the KV caches of a context's sequences and the one pool they
 * share.
 *
 * Each sequence has its own cache (kv/cache.c): its chunk grid, host store
 * and, when a pool bound is given, its resident chunks and ring inside its
 * share of the context's one pool. The shares come from lkv_plan_shares
 * (policy in kv/plan.h); lkv_kvset_prepare applies them before a step.
 * Without a bound every sequence's cache is all resident.
 */
#ifndef LKV_KV_SEQS_H
#define LKV_KV_SEQS_H

#include "kv/cache.h"

typedef struct lkv_kvset lkv_kvset;

/* cfg describes one sequence's cache; cfg->pool_bytes is the whole pool */
lkv_status lkv_kvset_create(lkv_kvset **out, const lkv_kv_config *cfg, int32_t n_seq,
                            const lkv_backend *be, lkv_bctx *b);
void lkv_kvset_free(lkv_kvset *ks);
lkv_kv *lkv_kvset_seq(const lkv_kvset *ks, int32_t seq);
/* Before a step: active[i] != 0 for the sequences that hold positions or
 * have tokens in it; re-binds the sequences whose shares moved. */
lkv_status lkv_kvset_prepare(lkv_kvset *ks, const int32_t *active);

#endif
