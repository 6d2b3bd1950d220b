/*
 * kv/cache.h: the KV cache as the forward pass sees it.
 *
 * Per attention layer a K plane and a V plane of n_ctx rows, token-contiguous.
 * The forward pass asks where to write the current micro-batch's converted
 * K/V rows (lkv_kv_batch_rows) and then asks the cache to run the layer's
 * attention (lkv_kv_attend), which feeds the backend's attn_accum with
 * segments in chunk order. Where the rows live (all resident on the device,
 * or host store + resident chunks + streamed ring) is the cache's business;
 * the result does not depend on it.
 */
#ifndef LKV_KV_CACHE_H
#define LKV_KV_CACHE_H

#include <stdint.h>

#include "backend.h"
#include "llamakv.h"

typedef struct lkv_kv lkv_kv;

typedef struct lkv_kv_config {
    int32_t n_layer;
    int32_t n_ctx;
    int32_t n_ubatch;
    int32_t chunk;           /* positions per chunk */
    int32_t type_k, type_v;
    int64_t row_bytes_k;     /* one token, all kv heads */
    int64_t row_bytes_v;
    int64_t pool_bytes;      /* < 0: all resident */
    void *pool_base;         /* non-NULL: the pool is this memory (a share of a pool the
                                caller owns and frees), else the cache allocates it */
    const uint8_t *local;    /* (n_layer,) nonzero: a sliding-window layer, or NULL: none.
                                With a pool bound these stay resident in backend memory beside
                                the pool (n_ctx rows each); only the other (global) layers are
                                planned, held in the host store and streamed */
    int32_t window;          /* the local layers' sliding window (with `local`) */
    int32_t ring_rows;       /* with a pool bound, a local layer keeps only this many rows,
                                a ring (position p in row p % ring_rows), when it is below
                                n_ctx; it must be >= window - 1 + n_batch so that one decode
                                call never overwrites rows it, or a roll-back, still needs */
} lkv_kv_config;

/* the layers a pool bound plans and streams: those not local */
int32_t lkv_kv_config_streamed(const lkv_kv_config *cfg);

lkv_status lkv_kv_create(lkv_kv **out, const lkv_kv_config *cfg, const lkv_backend *be,
                         lkv_bctx *b);
void lkv_kv_free(lkv_kv *kv);

/* A decode call starts (resets the per-call statistics). */
void lkv_kv_decode_begin(lkv_kv *kv);
/* A micro-batch at positions [pos0, pos0 + n) starts / ended. */
lkv_status lkv_kv_step_begin(lkv_kv *kv, int32_t pos0, int32_t n);
lkv_status lkv_kv_step_end(lkv_kv *kv);
/* Backend buffers that receive this micro-batch's (n, row) K and V rows of `layer`. */
void lkv_kv_batch_rows(lkv_kv *kv, int32_t layer, void **k, void **v);
/* Attention of the micro-batch's queries q (n, n_head*hd) over positions
 * [0, pos0 + i] for query i into out (n, n_head*hd), through the backend
 * state st (reset here; its contents are unspecified afterwards). `geo`
 * carries head counts, types, scale; its chunk/segment fields are set here. */
lkv_status lkv_kv_attend(lkv_kv *kv, int32_t layer, const float *q, void *st, float *out,
                         const lkv_attn_desc *geo);
/* The cache now holds n positions (n <= current). With a ring (cfg.ring_rows)
 * n must be 0 or >= lkv_kv_restore_floor. */
lkv_status lkv_kv_truncate(lkv_kv *kv, int32_t n);
/* The least n > 0 that truncate accepts (0: any): with a ring, the positions
 * before the ring's oldest row plus window - 1 cannot be returned to. */
int32_t lkv_kv_restore_floor(const lkv_kv *kv);
/* 1 when the cache streams through a bounded pool (kv/stream.c), 0 when all resident */
int lkv_kv_streaming(const lkv_kv *kv);
/* an all-resident cache's planes of `layer` (rows from position 0); 0 when
 * the cache streams (its rows lie in the pool and the ring) */
int lkv_kv_planes(const lkv_kv *kv, int32_t layer, const void **k, const void **v);
/* Rows [p0, p0 + n) of one plane (0 = K, 1 = V) of `layer`, to / from host memory. */
lkv_status lkv_kv_read(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n, void *dst);
lkv_status lkv_kv_write(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n,
                        const void *src);
/* Streaming caches: the pool is now `bytes` at `base` (kv/seqs.c moves shares) */
lkv_status lkv_kv_rebind(lkv_kv *kv, void *base, int64_t bytes);
/* Streaming caches: the phase arena lends `bytes` at `base` for extra
 * resident chunks, or (base NULL) takes them back; a no-op when all resident */
lkv_status lkv_kv_lend(lkv_kv *kv, void *base, int64_t bytes);
/* dst's first n rows of every layer = src's (dst then holds n positions) */
lkv_status lkv_kv_copy(lkv_kv *dst, lkv_kv *src, int32_t n);
void lkv_kv_get_stats(const lkv_kv *kv, lkv_kv_stats *out, int32_t *resident);

#endif
