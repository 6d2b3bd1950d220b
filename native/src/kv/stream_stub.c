/* kv/stream_stub.c: placeholder until the streaming cache lands: a bounded
 * pool is refused with a clear error. */
#include "error.h"
#include "kv/stream.h"

lkv_status lkv_kv_stream_create(lkv_kv_stream **out, const lkv_kv_config *cfg,
                                const lkv_backend *be, lkv_bctx *b) {
    (void)out; (void)cfg; (void)be; (void)b;
    return lkv_fail(LKV_ERR_UNSUPPORTED, "a bounded KV pool (streaming) is not supported yet");
}
void lkv_kv_stream_free(lkv_kv_stream *s) { (void)s; }
lkv_status lkv_kv_stream_step_begin(lkv_kv_stream *s, int32_t pos0, int32_t n) { (void)s; (void)pos0; (void)n; return LKV_ERR_INTERNAL; }
lkv_status lkv_kv_stream_step_end(lkv_kv_stream *s) { (void)s; return LKV_ERR_INTERNAL; }
void lkv_kv_stream_batch_rows(lkv_kv_stream *s, int32_t layer, void **k, void **v) { (void)s; (void)layer; *k = *v = 0; }
lkv_status lkv_kv_stream_attend(lkv_kv_stream *s, int32_t layer, const float *q, void *st, lkv_attn_desc *d) { (void)s; (void)layer; (void)q; (void)st; (void)d; return LKV_ERR_INTERNAL; }
lkv_status lkv_kv_stream_truncate(lkv_kv_stream *s, int32_t n) { (void)s; (void)n; return LKV_ERR_INTERNAL; }
lkv_status lkv_kv_stream_read(lkv_kv_stream *s, int32_t layer, int plane, int32_t p0, int32_t n, void *dst) { (void)s; (void)layer; (void)plane; (void)p0; (void)n; (void)dst; return LKV_ERR_INTERNAL; }
lkv_status lkv_kv_stream_write(lkv_kv_stream *s, int32_t layer, int plane, int32_t p0, int32_t n, const void *src) { (void)s; (void)layer; (void)plane; (void)p0; (void)n; (void)src; return LKV_ERR_INTERNAL; }
void lkv_kv_stream_get_stats(const lkv_kv_stream *s, lkv_kv_stats *out, int32_t *resident) { (void)s; (void)out; (void)resident; }
