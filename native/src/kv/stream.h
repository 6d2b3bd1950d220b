/*
 * kv/stream.h: the streaming KV cache (bounded device pool, host store,
 * resident chunks and transfer ring). See kv/stream.c.
 */
#ifndef LKV_KV_STREAM_H
#define LKV_KV_STREAM_H

#include "kv/cache.h"

typedef struct lkv_kv_stream lkv_kv_stream;

lkv_status lkv_kv_stream_create(lkv_kv_stream **out, const lkv_kv_config *cfg,
                                const lkv_backend *be, lkv_bctx *b);
void lkv_kv_stream_free(lkv_kv_stream *s);
lkv_status lkv_kv_stream_step_begin(lkv_kv_stream *s, int32_t pos0, int32_t n);
lkv_status lkv_kv_stream_step_end(lkv_kv_stream *s);
void lkv_kv_stream_batch_rows(lkv_kv_stream *s, int32_t layer, void **k, void **v);
lkv_status lkv_kv_stream_attend(lkv_kv_stream *s, int32_t layer, const float *q, void *st,
                                lkv_attn_desc *d);
lkv_status lkv_kv_stream_truncate(lkv_kv_stream *s, int32_t n);
lkv_status lkv_kv_stream_read(lkv_kv_stream *s, int32_t layer, int plane, int32_t p0, int32_t n,
                              void *dst);
lkv_status lkv_kv_stream_write(lkv_kv_stream *s, int32_t layer, int plane, int32_t p0, int32_t n,
                               const void *src);
/* The pool is now `bytes` at `base` (a share of a pool the caller owns):
 * waits for the copies in flight; the next step re-plans and refills. */
lkv_status lkv_kv_stream_rebind(lkv_kv_stream *s, void *base, int64_t bytes);
/* The phase arena lends `bytes` at `base` for extra resident chunks (decode),
 * or takes them back (base NULL: prefill): waits for the copies in flight;
 * nothing is copied back (the host store holds every row). */
lkv_status lkv_kv_stream_lend(lkv_kv_stream *s, void *base, int64_t bytes);
void lkv_kv_stream_decode_begin(lkv_kv_stream *s);
void lkv_kv_stream_get_stats(const lkv_kv_stream *s, lkv_kv_stats *out, int32_t *resident);

#endif
