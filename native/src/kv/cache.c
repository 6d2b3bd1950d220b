/*
 * kv/cache.c: the all-resident KV cache, and the dispatch to the streaming
 * cache (kv/stream.c) when a pool bound is given. A sliding-window model's
 * local layers (cfg.local) stay resident even then: only its global layers
 * go to the stream, which plans and streams them as if they were all.
 *
 * All resident: every layer's K and V planes live in backend memory; the
 * micro-batch writes its rows straight into them and attention reads one
 * segment per layer covering [0, pos0 + n). No copies, no ring.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kv/cache.h"
#include "kv/stream.h"

struct lkv_kv {
    lkv_kv_config cfg;
    const lkv_backend *be;
    lkv_bctx *b;
    lkv_kv_stream *stream;   /* non-NULL: bounded pool, streaming (the global layers) */
    void **k, **v;           /* (n_layer,) planes of n_ctx rows of the resident layers, NULL
                                for the streamed ones */
    int32_t *sl;             /* (n_layer,) a streamed layer's index in the stream, else -1 */
    int32_t pos0, n;         /* current micro-batch */
};

int32_t lkv_kv_config_streamed(const lkv_kv_config *cfg) {
    int32_t n = 0;
    for (int l = 0; l < cfg->n_layer; l++) n += !(cfg->local && cfg->local[l]);
    return n;
}

/* a layer whose rows live in the stream (its index there), or -1: resident planes */
static inline int32_t streamed(const lkv_kv *kv, int32_t layer) {
    return kv->stream ? kv->sl[layer] : -1;
}

lkv_status lkv_kv_create(lkv_kv **out, const lkv_kv_config *cfg, const lkv_backend *be,
                         lkv_bctx *b) {
    lkv_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV cache");
    kv->cfg = *cfg;
    kv->be = be;
    kv->b = b;
    kv->cfg.local = NULL;    /* the caller's flags: read here only */
    const int32_t n_streamed = cfg->pool_bytes >= 0 ? lkv_kv_config_streamed(cfg) : 0;
    kv->k = calloc((size_t)cfg->n_layer, sizeof(void *));
    kv->v = calloc((size_t)cfg->n_layer, sizeof(void *));
    kv->sl = calloc((size_t)cfg->n_layer, sizeof(int32_t));
    lkv_status st = kv->k && kv->v && kv->sl
                        ? LKV_OK : lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV cache");
    for (int l = 0, g = 0; !st && l < cfg->n_layer; l++)
        kv->sl[l] = n_streamed && !(cfg->local && cfg->local[l]) ? g++ : -1;
    if (!st && n_streamed) {
        lkv_kv_config sc = *cfg;
        sc.n_layer = n_streamed;
        sc.local = NULL;
        st = lkv_kv_stream_create(&kv->stream, &sc, be, b);
    }
    for (int l = 0; !st && l < cfg->n_layer; l++) {   /* the resident layers' planes */
        if (kv->sl[l] >= 0) continue;
        kv->k[l] = be->alloc(b, (size_t)cfg->row_bytes_k * cfg->n_ctx);
        kv->v[l] = be->alloc(b, (size_t)cfg->row_bytes_v * cfg->n_ctx);
        if (!kv->k[l] || !kv->v[l])
            st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate the KV cache: %d layers x "
                          "%d positions x %lld bytes",
                          cfg->n_layer, cfg->n_ctx,
                          (long long)(cfg->row_bytes_k + cfg->row_bytes_v));
    }
    if (st) { lkv_kv_free(kv); return st; }
    *out = kv;
    return LKV_OK;
}

void lkv_kv_free(lkv_kv *kv) {
    if (!kv) return;
    lkv_kv_stream_free(kv->stream);
    for (int l = 0; kv->k && l < kv->cfg.n_layer; l++) {
        if (kv->k[l]) kv->be->free(kv->b, kv->k[l]);
        if (kv->v && kv->v[l]) kv->be->free(kv->b, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv->sl);
    free(kv);
}

void lkv_kv_decode_begin(lkv_kv *kv) {
    if (kv->stream) lkv_kv_stream_decode_begin(kv->stream);
}

lkv_status lkv_kv_step_begin(lkv_kv *kv, int32_t pos0, int32_t n) {
    kv->pos0 = pos0;
    kv->n = n;
    if (kv->stream) return lkv_kv_stream_step_begin(kv->stream, pos0, n);
    return LKV_OK;
}

lkv_status lkv_kv_step_end(lkv_kv *kv) {
    if (kv->stream) return lkv_kv_stream_step_end(kv->stream);
    return LKV_OK;
}

void lkv_kv_batch_rows(lkv_kv *kv, int32_t layer, void **k, void **v) {
    const int32_t sl = streamed(kv, layer);
    if (sl >= 0) { lkv_kv_stream_batch_rows(kv->stream, sl, k, v); return; }
    *k = (char *)kv->k[layer] + (size_t)kv->pos0 * kv->cfg.row_bytes_k;
    *v = (char *)kv->v[layer] + (size_t)kv->pos0 * kv->cfg.row_bytes_v;
}

lkv_status lkv_kv_attend(lkv_kv *kv, int32_t layer, const float *q, void *st, float *out,
                         const lkv_attn_desc *geo) {
    const lkv_backend *be = kv->be;
    lkv_attn_desc d = *geo;
    d.q_pos0 = kv->pos0;
    d.n_q = kv->n;
    d.chunk = kv->cfg.chunk;
    const int32_t sl = streamed(kv, layer);
    if (sl < 0) {
        /* a sliding window's earlier chunks are empty for every query */
        const int32_t lo = d.window > 0 ? kv->pos0 - d.window + 1 : 0;
        d.chunk_lo = lo > 0 ? lo / d.chunk : 0;
        d.chunk_hi = (kv->pos0 + kv->n - 1) / d.chunk + 1;
        d.n_segs = 1;
        d.segs[0] = (lkv_kv_seg){0, kv->pos0 + kv->n, kv->k[layer], kv->v[layer]};
        if (be->attn_whole && be->attn_whole(kv->b, out, st, q, &d)) return LKV_OK;
    }
    be->attn_reset(kv->b, st, d.n_q, d.n_head, d.head_dim);
    if (sl >= 0) LKV_TRY(lkv_kv_stream_attend(kv->stream, sl, q, st, &d));
    else be->attn_accum(kv->b, st, q, &d);
    be->attn_finish(kv->b, out, st, d.n_q, d.n_head, d.head_dim);
    return LKV_OK;
}

int lkv_kv_streaming(const lkv_kv *kv) { return kv->stream != NULL; }

int lkv_kv_planes(const lkv_kv *kv, int32_t layer, const void **k, const void **v) {
    if (streamed(kv, layer) >= 0) return 0;
    *k = kv->k[layer];
    *v = kv->v[layer];
    return 1;
}

lkv_status lkv_kv_truncate(lkv_kv *kv, int32_t n) {
    if (kv->stream) return lkv_kv_stream_truncate(kv->stream, n);
    return LKV_OK;
}

lkv_status lkv_kv_read(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n, void *dst) {
    if (streamed(kv, layer) >= 0)
        return lkv_kv_stream_read(kv->stream, streamed(kv, layer), plane, p0, n, dst);
    size_t rb = (size_t)(plane ? kv->cfg.row_bytes_v : kv->cfg.row_bytes_k);
    const char *src = (const char *)(plane ? kv->v[layer] : kv->k[layer]) + (size_t)p0 * rb;
    kv->be->download(kv->b, dst, src, (size_t)n * rb);
    return kv->be->sync(kv->b);
}

lkv_status lkv_kv_write(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n,
                        const void *src) {
    if (streamed(kv, layer) >= 0)
        return lkv_kv_stream_write(kv->stream, streamed(kv, layer), plane, p0, n, src);
    size_t rb = (size_t)(plane ? kv->cfg.row_bytes_v : kv->cfg.row_bytes_k);
    char *dst = (char *)(plane ? kv->v[layer] : kv->k[layer]) + (size_t)p0 * rb;
    kv->be->upload(kv->b, dst, src, (size_t)n * rb);
    return kv->be->sync(kv->b);
}

lkv_status lkv_kv_rebind(lkv_kv *kv, void *base, int64_t bytes) {
    return kv->stream ? lkv_kv_stream_rebind(kv->stream, base, bytes) : LKV_OK;
}

lkv_status lkv_kv_lend(lkv_kv *kv, void *base, int64_t bytes) {
    return kv->stream ? lkv_kv_stream_lend(kv->stream, base, bytes) : LKV_OK;
}

lkv_status lkv_kv_copy(lkv_kv *dst, lkv_kv *src, int32_t n) {
    LKV_TRY(lkv_kv_truncate(dst, 0));
    if (n <= 0) return LKV_OK;
    const lkv_kv_config *cf = &src->cfg;
    if (!dst->stream && !src->stream) {   /* both in backend memory: device to device */
        for (int l = 0; l < cf->n_layer; l++) {
            dst->be->copy_d2d(dst->b, dst->k[l], src->k[l], (size_t)n * cf->row_bytes_k);
            dst->be->copy_d2d(dst->b, dst->v[l], src->v[l], (size_t)n * cf->row_bytes_v);
        }
        return dst->be->sync(dst->b);
    }
    const int64_t rb = cf->row_bytes_k > cf->row_bytes_v ? cf->row_bytes_k : cf->row_bytes_v;
    void *tmp = malloc((size_t)n * (size_t)rb);
    if (!tmp) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory to copy %d KV rows", n);
    lkv_status st = LKV_OK;
    for (int l = 0; !st && l < cf->n_layer; l++)
        for (int plane = 0; !st && plane < 2; plane++) {
            st = lkv_kv_read(src, l, plane, 0, n, tmp);
            if (!st) st = lkv_kv_write(dst, l, plane, 0, n, tmp);
        }
    free(tmp);
    return st;
}

void lkv_kv_get_stats(const lkv_kv *kv, lkv_kv_stats *out, int32_t *resident) {
    memset(out, 0, sizeof *out);
    out->n_layer = kv->cfg.n_layer;
    out->kv_chunk = kv->cfg.chunk;
    const int64_t per_layer = (int64_t)kv->cfg.n_ctx * (kv->cfg.row_bytes_k + kv->cfg.row_bytes_v);
    const int32_t chunks = (kv->cfg.n_ctx + kv->cfg.chunk - 1) / kv->cfg.chunk;
    if (kv->stream) {
        /* the stream's layers (the global ones), then the resident layers beside the pool */
        int32_t n_res = 0;
        for (int l = 0; l < kv->cfg.n_layer; l++) n_res += kv->sl[l] < 0;
        lkv_kv_stream_get_stats(kv->stream, out, resident);
        out->n_layer = kv->cfg.n_layer - n_res;
        out->local_layers = n_res;
        out->local_bytes = per_layer * n_res;
        return;
    }
    out->pool_bytes = per_layer * kv->cfg.n_layer;
    out->resident_bytes = out->pool_bytes;
    for (int l = 0; resident && l < kv->cfg.n_layer; l++) resident[l] = chunks;
}
