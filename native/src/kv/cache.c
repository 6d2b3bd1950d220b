/*
 * kv/cache.c: the all-resident KV cache, and the dispatch to the streaming
 * cache (kv/stream.c) when a pool bound is given. A sliding-window model's
 * local layers (cfg.local) stay resident even then: only its global layers
 * go to the stream, which plans and streams them as if they were all.
 *
 * All resident: every layer's K and V planes live in backend memory; the
 * micro-batch writes its rows straight into them and attention reads one
 * segment per layer covering [0, pos0 + n). No copies, no ring.
 *
 * Local layers beside a pool keep a ring of R = ring_rows rows when that is
 * below n_ctx: position p in row p % R. The micro-batch's rows go to a
 * staging buffer and are copied into the ring when the layer attends; its
 * attention reads the window [pos0 - window + 1, pos0 + n) as at most two
 * segments. The ring holds positions [lo, len): lo rises as rows are
 * overwritten (at step begin, before any write), so a truncation to n needs
 * n >= lo + window - 1 (or n = 0). Rows read back from before lo are zeros:
 * no query at or after the cache's length reads them. A cache filled by
 * writes (state load, sequence copy) counts only its last window - 1 rows as
 * held, since the writer may have had zeros there.
 */
#include <stdbool.h>
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
    /* the local layers' ring (ring > 0): planes of `ring` rows, positions [lo, len) held */
    int32_t ring, lo, len;
    void *stage_k, *stage_v; /* (n_ubatch, row) the micro-batch's rows before the ring */
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
    if (!st && kv->stream && cfg->window > 0 && cfg->ring_rows > 0 && cfg->ring_rows < cfg->n_ctx &&
        n_streamed < cfg->n_layer) {   /* local layers beside a pool: a ring */
        kv->ring = cfg->ring_rows;
        kv->stage_k = be->alloc(b, (size_t)cfg->row_bytes_k * cfg->n_ubatch);
        kv->stage_v = be->alloc(b, (size_t)cfg->row_bytes_v * cfg->n_ubatch);
        if (!kv->stage_k || !kv->stage_v)
            st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate the micro-batch KV rows");
    }
    const int32_t rows = kv->ring ? kv->ring : cfg->n_ctx;
    for (int l = 0; !st && l < cfg->n_layer; l++) {   /* the resident layers' planes */
        if (kv->sl[l] >= 0) continue;
        kv->k[l] = be->alloc(b, (size_t)cfg->row_bytes_k * rows);
        kv->v[l] = be->alloc(b, (size_t)cfg->row_bytes_v * rows);
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
    if (kv->stage_k) kv->be->free(kv->b, kv->stage_k);
    if (kv->stage_v) kv->be->free(kv->b, kv->stage_v);
    free(kv->k);
    free(kv->v);
    free(kv->sl);
    free(kv);
}

// ------------------------------------------------------------------ the local layers' ring

static inline bool in_ring(const lkv_kv *kv, int32_t layer) {
    return kv->ring && kv->sl[layer] < 0;
}

/* rows [p0, p0 + n) of one ring plane (n <= ring) as at most two runs:
 * (row, count) pairs; returns the number of runs */
static int ring_runs(const lkv_kv *kv, int32_t p0, int32_t n, int32_t run[2][2]) {
    const int32_t r0 = p0 % kv->ring, first = n < kv->ring - r0 ? n : kv->ring - r0;
    run[0][0] = r0;
    run[0][1] = first;
    run[1][0] = 0;
    run[1][1] = n - first;
    return n - first > 0 ? 2 : 1;
}

/* the staged micro-batch rows of `layer` into its ring (compute stream) */
static void ring_store(lkv_kv *kv, int32_t layer) {
    int32_t run[2][2];
    const int nr = ring_runs(kv, kv->pos0, kv->n, run);
    const size_t rbk = (size_t)kv->cfg.row_bytes_k, rbv = (size_t)kv->cfg.row_bytes_v;
    for (int i = 0, done = 0; i < nr; done += run[i][1], i++) {
        kv->be->copy_d2d(kv->b, (char *)kv->k[layer] + run[i][0] * rbk,
                         (const char *)kv->stage_k + done * rbk, run[i][1] * rbk);
        kv->be->copy_d2d(kv->b, (char *)kv->v[layer] + run[i][0] * rbv,
                         (const char *)kv->stage_v + done * rbv, run[i][1] * rbv);
    }
}

int32_t lkv_kv_restore_floor(const lkv_kv *kv) {
    return kv->ring && kv->lo > 0 ? kv->lo + kv->cfg.window - 1 : 0;
}

void lkv_kv_decode_begin(lkv_kv *kv) {
    if (kv->stream) lkv_kv_stream_decode_begin(kv->stream);
}

lkv_status lkv_kv_step_begin(lkv_kv *kv, int32_t pos0, int32_t n) {
    kv->pos0 = pos0;
    kv->n = n;
    if (kv->ring) {   /* this step's rows overwrite positions before pos0 + n - ring */
        if (pos0 + n - kv->ring > kv->lo) kv->lo = pos0 + n - kv->ring;
        kv->len = pos0 + n;
    }
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
    if (in_ring(kv, layer)) { *k = kv->stage_k; *v = kv->stage_v; return; }
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
    if (in_ring(kv, layer)) {
        ring_store(kv, layer);
        int32_t lo = kv->pos0 - d.window + 1, run[2][2];
        if (lo < 0) lo = 0;
        const int nr = ring_runs(kv, lo, kv->pos0 + kv->n - lo, run);
        d.chunk_lo = lo / d.chunk;
        d.chunk_hi = (kv->pos0 + kv->n - 1) / d.chunk + 1;
        d.n_segs = nr;
        for (int i = 0, p = lo; i < nr; p += run[i][1], i++)
            d.segs[i] = (lkv_kv_seg){p, run[i][1],
                                     (const char *)kv->k[layer] + (size_t)run[i][0] * kv->cfg.row_bytes_k,
                                     (const char *)kv->v[layer] + (size_t)run[i][0] * kv->cfg.row_bytes_v};
        be->attn_reset(kv->b, st, d.n_q, d.n_head, d.head_dim);
        be->attn_accum(kv->b, st, q, &d);
        be->attn_finish(kv->b, out, st, d.n_q, d.n_head, d.head_dim);
        return LKV_OK;
    }
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
    if (streamed(kv, layer) >= 0 || in_ring(kv, layer)) return 0;
    *k = kv->k[layer];
    *v = kv->v[layer];
    return 1;
}

lkv_status lkv_kv_truncate(lkv_kv *kv, int32_t n) {
    if (kv->ring && n > 0 && n < kv->len && n < lkv_kv_restore_floor(kv))
        return lkv_fail(LKV_ERR_INVALID_ARG, "cannot truncate to %d: the sliding-window layers "
                        "keep a ring of %d rows and no longer hold the rows before %d; truncate to "
                        "0 or to at least %d (lkv_context_restore_point)", n, kv->ring, kv->lo,
                        lkv_kv_restore_floor(kv));
    if (kv->ring) {
        if (n < kv->len) kv->len = n;
        if (n == 0) kv->lo = 0;
    }
    if (kv->stream) return lkv_kv_stream_truncate(kv->stream, n);
    return LKV_OK;
}

/* rows [p0, p0 + n) of a ring plane to host dst: those before lo (gone) as zeros */
static lkv_status ring_read(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n,
                            char *dst) {
    const size_t rb = (size_t)(plane ? kv->cfg.row_bytes_v : kv->cfg.row_bytes_k);
    const char *base = plane ? kv->v[layer] : kv->k[layer];
    int32_t held = kv->len - kv->ring > kv->lo ? kv->len - kv->ring : kv->lo;
    if (held < p0) held = p0;
    if (held > p0 + n) held = p0 + n;
    memset(dst, 0, (size_t)(held - p0) * rb);
    int32_t run[2][2];
    const int nr = held < p0 + n ? ring_runs(kv, held, p0 + n - held, run) : 0;
    char *d = dst + (size_t)(held - p0) * rb;
    for (int i = 0; i < nr; d += (size_t)run[i][1] * rb, i++)
        kv->be->download(kv->b, d, base + (size_t)run[i][0] * rb, (size_t)run[i][1] * rb);
    return kv->be->sync(kv->b);
}

/* rows [p0, p0 + n) from host src into a ring plane (the last `ring` of them);
 * afterwards only the last window - 1 rows count as held (see the top) */
static lkv_status ring_write(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n,
                             const char *src) {
    const size_t rb = (size_t)(plane ? kv->cfg.row_bytes_v : kv->cfg.row_bytes_k);
    char *base = plane ? kv->v[layer] : kv->k[layer];
    const int32_t skip = n > kv->ring ? n - kv->ring : 0;
    int32_t run[2][2];
    const int nr = n - skip > 0 ? ring_runs(kv, p0 + skip, n - skip, run) : 0;
    const char *s = src + (size_t)skip * rb;
    for (int i = 0; i < nr; s += (size_t)run[i][1] * rb, i++)
        kv->be->upload(kv->b, base + (size_t)run[i][0] * rb, s, (size_t)run[i][1] * rb);
    if (p0 + n > kv->len) kv->len = p0 + n;
    const int32_t lo = kv->len - kv->cfg.window + 1;
    if (lo > kv->lo) kv->lo = lo;
    return kv->be->sync(kv->b);
}

lkv_status lkv_kv_read(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n, void *dst) {
    if (in_ring(kv, layer)) return ring_read(kv, layer, plane, p0, n, dst);
    if (streamed(kv, layer) >= 0)
        return lkv_kv_stream_read(kv->stream, streamed(kv, layer), plane, p0, n, dst);
    size_t rb = (size_t)(plane ? kv->cfg.row_bytes_v : kv->cfg.row_bytes_k);
    const char *src = (const char *)(plane ? kv->v[layer] : kv->k[layer]) + (size_t)p0 * rb;
    kv->be->download(kv->b, dst, src, (size_t)n * rb);
    return kv->be->sync(kv->b);
}

lkv_status lkv_kv_write(lkv_kv *kv, int32_t layer, int plane, int32_t p0, int32_t n,
                        const void *src) {
    if (in_ring(kv, layer)) return ring_write(kv, layer, plane, p0, n, src);
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
    if (src->ring && n > 0 && n < src->len && n < lkv_kv_restore_floor(src))
        return lkv_fail(LKV_ERR_INVALID_ARG, "cannot copy the first %d positions: the source's "
                        "sliding-window ring no longer holds the rows before %d", n, src->lo);
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
        out->local_bytes = (kv->ring ? (int64_t)kv->ring * (kv->cfg.row_bytes_k + kv->cfg.row_bytes_v)
                                     : per_layer) * n_res;
        return;
    }
    out->pool_bytes = per_layer * kv->cfg.n_layer;
    out->resident_bytes = out->pool_bytes;
    for (int l = 0; resident && l < kv->cfg.n_layer; l++) resident[l] = chunks;
}
