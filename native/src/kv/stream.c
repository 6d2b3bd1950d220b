/*
 * kv/stream.c: the streaming KV cache (docs/design.md section 3).
 *
 * - Host store: a K and a V plane of n_ctx rows per layer, each plane kind one
 *   allocation (host_alloc: pinned on CUDA), layer after layer.
 *   Authoritative: every row is written here.
 * - Pool: one backend allocation of exactly kv_pool_bytes: a K region and a V
 *   region of S chunk slots per layer (layer-major, so a layer's resident
 *   prefix is contiguous and is one attention segment), then the transfer
 *   ring in the last ring_bytes. S is the number of chunks per layer that fit
 *   with no ring while everything is resident, and the resident count once
 *   streaming; a change of S (at that transition) refills the slots.
 * - All resident (ring 0): the micro-batch writes its rows straight into the
 *   slots, attention reads one segment per layer as the unbounded cache does,
 *   and the write-through is one 2-D copy per plane at the end of the step.
 * - Pieces: a layer's streamed rows [res_l * C, pos0) are copied into the ring
 *   in pieces of whole chunks (the last may be partial), K rows then V rows.
 *   A cursor walks (step, layer, row) in the order attention consumes them and
 *   issues copies as far ahead as free ring space allows: the later layers of
 *   this step and, for layers whose new rows are already written through, the
 *   next step. A piece's ring space is released once the attention reading it
 *   has run for every query of the micro-batch.
 * - Writes: the micro-batch's rows live in per-layer batch buffers, feed their
 *   own attention, go to their slot when resident, and are written through to
 *   the host store on the copy queue (ordered before any later read).
 * - Phase arena (lkv_kv_stream_lend, native/src/arena.h): while decoding, the
 *   context lends its prefill workspace; once the pool streams, each layer's
 *   next E chunks after its S pool slots are resident there (a K and a V
 *   region of (L, E * C) rows, laid out as the pool's), refilled from the
 *   host on the first step after the loan. Taking the loan back only waits
 *   for the copies in flight: nothing is only on the device.
 * - Attention folds chunks in increasing order whichever source holds them, so
 *   the result equals the all-resident run bit for bit.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kv/plan.h"
#include "kv/stream.h"

#define MAX_PIECES 4096

typedef struct {
    int64_t step;
    int32_t layer, row0, rows;
    int64_t off, size;       /* ring bytes */
    uint64_t ticket;         /* copy ticket of its last copy */
} piece;

struct lkv_kv_stream {
    lkv_kv_config cfg;
    const lkv_backend *be;
    lkv_bctx *b;
    int32_t L, C, nc_max;
    int64_t rbk, rbv, cb;
    char *hk_all, *hv_all;   /* host store, (L, n_ctx) rows per plane */
    char **hk, **hv;         /* (L,) planes inside them */
    char **bk, **bv;         /* (L,) batch rows, n_ubatch rows (backend memory) */
    uint64_t *wt_ticket;     /* (L,) last write-through from bk/bv[l] */
    uint64_t *fill_ticket;   /* (L,) last fill copy into l's slots */
    char *pool;              /* cfg.pool_bytes; ours unless cfg.pool_base gave it */
    char *pool_k, *pool_v;   /* slot regions, (L, S * C) rows each */
    int32_t S;               /* slots per layer */
    char *arena;             /* lent by the context while decoding (NULL: none) */
    int64_t arena_bytes;
    char *arena_k, *arena_v; /* its slot regions, (L, E * C) rows each */
    int32_t E;               /* arena slots per layer in the current plan */
    int resident_all;        /* the plan streams nothing: ring 0 */
    /* plan */
    int planned;
    int32_t plan_nc;
    int32_t *res;            /* (L,) resident chunks */
    int32_t *valid;          /* (L * nc_max) valid rows of slot (l, j) */
    int64_t ring_bytes;
    char *ring;
    int32_t piece_rows;      /* most rows per piece */
    /* ring FIFO */
    piece pq[MAX_PIECES];
    int pq_head, pq_len;
    int64_t ring_head, ring_tail;
    uint64_t release_mark;   /* compute ticket of the last ring release */
    /* cursor: next rows to issue */
    int64_t cur_step;
    int32_t cur_layer, cur_row;
    /* step */
    int64_t step;
    int32_t pos0, n, wt_done, in_step;
    /* stats */
    lkv_kv_stats st;
};

/* resident chunk j < S + E of layer l: pool slot j, or arena slot j - S */
static inline char *slot_k(const lkv_kv_stream *s, int l, int j) {
    if (j >= s->S) return s->arena_k + ((int64_t)l * s->E + j - s->S) * s->C * s->rbk;
    return s->pool_k + ((int64_t)l * s->S + j) * s->C * s->rbk;
}
static inline char *slot_v(const lkv_kv_stream *s, int l, int j) {
    if (j >= s->S) return s->arena_v + ((int64_t)l * s->E + j - s->S) * s->C * s->rbv;
    return s->pool_v + ((int64_t)l * s->S + j) * s->C * s->rbv;
}

/* `height` rows of `width` bytes between pitched buffers, on the copy queue */
static uint64_t copy_2d(lkv_kv_stream *s, void *dst, size_t dpitch, const void *src,
                        size_t spitch, size_t width, size_t height, int h2d) {
    s->st.copies += s->be->copy_async_2d ? 1 : (int64_t)height;
    if (s->be->copy_async_2d)
        return s->be->copy_async_2d(s->b, dst, dpitch, src, spitch, width, height, h2d);
    uint64_t t = 0;
    for (size_t i = 0; i < height; i++)
        t = s->be->copy_async(s->b, (char *)dst + i * dpitch, (const char *)src + i * spitch,
                              width, h2d);
    return t;
}

// ------------------------------------------------------------------ create / free

lkv_status lkv_kv_stream_create(lkv_kv_stream **out, const lkv_kv_config *cfg,
                                const lkv_backend *be, lkv_bctx *b) {
    if (!be->copier_init || !be->copy_async)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "the %s backend cannot stream the KV cache", be->name);
    lkv_plan_params pp = {cfg->n_layer, cfg->chunk, cfg->row_bytes_k, cfg->row_bytes_v,
                          cfg->n_ctx, cfg->n_ubatch, cfg->pool_bytes};
    lkv_plan plan;
    LKV_TRY(lkv_plan_make(&pp, cfg->n_ctx, &plan, NULL));  /* checks the minimum pool */
    lkv_kv_stream *s = calloc(1, sizeof *s);
    if (!s) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV stream");
    s->cfg = *cfg;
    s->be = be;
    s->b = b;
    s->L = cfg->n_layer;
    s->C = cfg->chunk;
    s->nc_max = (cfg->n_ctx + cfg->chunk - 1) / cfg->chunk;
    s->rbk = cfg->row_bytes_k;
    s->rbv = cfg->row_bytes_v;
    s->cb = (int64_t)s->C * (s->rbk + s->rbv);
    lkv_status st = be->copier_init(b);
    const size_t L = (size_t)s->L;
    s->hk = calloc(L, sizeof(char *));
    s->hv = calloc(L, sizeof(char *));
    s->bk = calloc(L, sizeof(char *));
    s->bv = calloc(L, sizeof(char *));
    s->wt_ticket = calloc(L, sizeof(uint64_t));
    s->fill_ticket = calloc(L, sizeof(uint64_t));
    s->res = calloc(L, sizeof(int32_t));
    s->valid = calloc(L * (size_t)s->nc_max, sizeof(int32_t));
    if (!st && (!s->hk || !s->hv || !s->bk || !s->bv || !s->wt_ticket || !s->fill_ticket ||
                !s->res || !s->valid))
        st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the KV stream tables");
    if (!st) {
        s->hk_all = be->host_alloc(b, (size_t)(s->rbk * cfg->n_ctx) * L);
        s->hv_all = be->host_alloc(b, (size_t)(s->rbv * cfg->n_ctx) * L);
        if (!s->hk_all || !s->hv_all)
            st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate the host KV store (%d layers x %d "
                          "positions x %lld bytes)", s->L, cfg->n_ctx,
                          (long long)(s->rbk + s->rbv));
    }
    for (int l = 0; !st && l < s->L; l++) {
        s->hk[l] = s->hk_all + (int64_t)l * cfg->n_ctx * s->rbk;
        s->hv[l] = s->hv_all + (int64_t)l * cfg->n_ctx * s->rbv;
        s->bk[l] = be->alloc(b, (size_t)(s->rbk * cfg->n_ubatch));
        s->bv[l] = st ? NULL : be->alloc(b, (size_t)(s->rbv * cfg->n_ubatch));
        if (!st && (!s->bk[l] || !s->bv[l]))
            st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate the micro-batch KV rows");
    }
    if (!st && cfg->pool_base) {
        s->pool = cfg->pool_base;
    } else if (!st) {
        s->pool = be->alloc(b, (size_t)cfg->pool_bytes);
        if (!s->pool)
            st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate a KV pool of %lld bytes",
                          (long long)cfg->pool_bytes);
    }
    if (st) { lkv_kv_stream_free(s); return st; }
    s->st.pool_bytes = cfg->pool_bytes;
    s->st.streaming = 1;
    *out = s;
    return LKV_OK;
}

void lkv_kv_stream_free(lkv_kv_stream *s) {
    if (!s) return;
    if (s->be->copy_sync) s->be->copy_sync(s->b);
    if (s->hk_all) s->be->host_free(s->b, s->hk_all);
    if (s->hv_all) s->be->host_free(s->b, s->hv_all);
    for (int l = 0; l < s->L; l++) {
        if (s->bk && s->bk[l]) s->be->free(s->b, s->bk[l]);
        if (s->bv && s->bv[l]) s->be->free(s->b, s->bv[l]);
    }
    if (s->pool && !s->cfg.pool_base) s->be->free(s->b, s->pool);
    free(s->hk); free(s->hv); free(s->bk); free(s->bv);
    free(s->wt_ticket); free(s->fill_ticket); free(s->res); free(s->valid);
    free(s);
}

// ------------------------------------------------------------------ ring

static void ring_reset(lkv_kv_stream *s) {
    s->pq_head = s->pq_len = 0;
    s->ring_head = s->ring_tail = 0;
}

/* offset for `need` bytes, or -1 when the ring has no room now */
static int64_t ring_alloc(lkv_kv_stream *s, int64_t need) {
    const int64_t R = s->ring_bytes;
    if (s->pq_len == 0) { s->ring_head = s->ring_tail = 0; }
    if (s->pq_len >= MAX_PIECES || need > R) return -1;
    int64_t off;
    if (s->pq_len == 0) off = 0;
    else if (s->ring_head > s->ring_tail) {
        if (R - s->ring_head >= need) off = s->ring_head;
        else if (s->ring_tail >= need) off = 0;
        else return -1;
    } else {
        if (s->ring_tail - s->ring_head >= need) off = s->ring_head;
        else return -1;
    }
    s->ring_head = off + need;
    return off;
}

/* drain: wait for every copy and forget issued pieces. Later copies (fills of
 * resident slots, ring pieces) may land where enqueued compute still reads or
 * writes (a re-plan moves the ring over former slots and back; truncate and
 * state writes refill slots): order them after all compute enqueued so far. */
static lkv_status drain(lkv_kv_stream *s) {
    LKV_TRY(s->be->copy_sync(s->b));
    if (s->be->compute_mark) s->be->copy_wait_compute(s->b, s->be->compute_mark(s->b));
    ring_reset(s);
    s->cur_step = -1;
    return LKV_OK;
}

// ------------------------------------------------------------------ issuing copies

/* rows of the host store that step `step` streams for `layer`: [res*C, pos0) */
static int32_t stream_end(const lkv_kv_stream *s, int64_t step) {
    return step == s->step ? s->pos0 : s->pos0 + s->n;   /* next step starts at this end */
}

static void cursor_start(lkv_kv_stream *s, int64_t step, int32_t layer) {
    s->cur_step = step;
    s->cur_layer = layer;
    s->cur_row = s->res[layer] * s->C;
}

/* Issue pieces from the cursor while ring space lasts. */
static void issue_more(lkv_kv_stream *s) {
    while (s->cur_step >= 0 && s->ring_bytes > 0) {
        const int64_t step = s->cur_step;
        const int l = s->cur_layer;
        if (step > s->step && (s->in_step ? l >= s->wt_done : 0)) return;  /* rows not written yet */
        const int32_t end = stream_end(s, step);
        if (s->cur_row >= end) {
            if (l + 1 < s->L) cursor_start(s, step, l + 1);
            else if (step == s->step) cursor_start(s, step + 1, 0);
            else return;   /* look ahead at most one step */
            continue;
        }
        int32_t rows = end - s->cur_row;
        if (rows > s->piece_rows) rows = s->piece_rows;
        const int64_t kb = rows * s->rbk, need = rows * (s->rbk + s->rbv);
        const int64_t off = ring_alloc(s, need);
        if (off < 0) return;
        s->be->copy_wait_compute(s->b, s->release_mark);
        char *dst = s->ring + off;
        s->be->copy_async(s->b, dst, s->hk[l] + (int64_t)s->cur_row * s->rbk, (size_t)kb, 1);
        uint64_t t = s->be->copy_async(s->b, dst + kb, s->hv[l] + (int64_t)s->cur_row * s->rbv,
                                       (size_t)(rows * s->rbv), 1);
        int k = (s->pq_head + s->pq_len) % MAX_PIECES;
        s->pq[k] = (piece){step, l, s->cur_row, rows, off, need, t};
        s->pq_len++;
        s->cur_row += rows;
        s->st.copies += 2;
        s->st.bytes_streamed += need;
    }
}

// ------------------------------------------------------------------ plan

static lkv_status replan(lkv_kv_stream *s, int32_t end) {
    const int32_t nc = (end + s->C - 1) / s->C;
    if (s->planned && nc == s->plan_nc) return LKV_OK;
    lkv_plan_params pp = {s->L, s->C, s->rbk, s->rbv, s->cfg.n_ctx, s->cfg.n_ubatch,
                          s->cfg.pool_bytes, s->arena_bytes};
    lkv_plan plan;
    int32_t *res = malloc(sizeof(int32_t) * (size_t)s->L);
    if (!res) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory to plan");
    lkv_status st = lkv_plan_make(&pp, end, &plan, res);
    if (st) { free(res); return st; }
    /* slots per layer: all that fit while nothing streams, else the resident
     * count less the arena's */
    const int32_t S = plan.ring_bytes ? res[0] - plan.arena_chunks
                                      : (int32_t)(s->cfg.pool_bytes / ((int64_t)s->L * s->cb));
    bool same = s->planned && plan.ring_bytes == s->ring_bytes && S == s->S &&
                plan.arena_chunks == s->E && (s->E == 0 || s->arena_k == s->arena) &&
                memcmp(res, s->res, sizeof(int32_t) * (size_t)s->L) == 0;
    if (!same) {
        st = drain(s);
        if (st) { free(res); return st; }
        for (int l = 0; l < s->L; l++) {
            /* chunks that become resident, or whose slots moved, were not kept
             * up to date: refill them */
            for (int j = S == s->S ? s->res[l] : 0; j < res[l]; j++)
                s->valid[(int64_t)l * s->nc_max + j] = 0;
        }
        memcpy(s->res, res, sizeof(int32_t) * (size_t)s->L);
        s->S = S;
        s->E = plan.arena_chunks;
        s->arena_k = s->arena;
        s->arena_v = s->E ? s->arena + (int64_t)s->L * s->E * s->C * s->rbk : NULL;
        s->pool_k = s->pool;
        s->pool_v = s->pool + (int64_t)s->L * S * s->C * s->rbk;
        s->resident_all = plan.ring_bytes == 0;
        s->ring_bytes = plan.ring_bytes;
        s->ring = s->pool + s->cfg.pool_bytes - plan.ring_bytes;
        int64_t chunks = plan.ring_bytes / 2 / s->cb;
        s->piece_rows = (int32_t)((chunks < 1 ? 1 : chunks) * s->C);
        s->st.replans++;
    }
    free(res);
    s->planned = 1;
    s->plan_nc = nc;
    s->st.ring_bytes = s->ring_bytes;
    s->st.resident_bytes = plan.resident_chunks * s->cb;
    s->st.arena_resident_bytes = (int64_t)s->L * s->E * s->cb;
    return LKV_OK;
}

// ------------------------------------------------------------------ steps

void lkv_kv_stream_decode_begin(lkv_kv_stream *s) { s->st.bytes_streamed_last = 0; }

lkv_status lkv_kv_stream_step_begin(lkv_kv_stream *s, int32_t pos0, int32_t n) {
    const bool continues = s->cur_step == s->step + 1 && pos0 == s->pos0 + s->n;
    s->step++;
    if (!continues && s->cur_step >= 0) LKV_TRY(drain(s));
    s->pos0 = pos0;
    s->n = n;
    s->wt_done = 0;
    s->in_step = 1;
    LKV_TRY(replan(s, pos0 + n));
    /* fill resident chunks whose rows are not all on the device */
    for (int l = 0; l < s->L; l++) {
        const int32_t jmax = s->res[l] < (pos0 + s->C - 1) / s->C ? s->res[l] : (pos0 + s->C - 1) / s->C;
        for (int j = 0; j < jmax; j++) {
            int32_t *v = &s->valid[(int64_t)l * s->nc_max + j];
            const int32_t need = pos0 - j * s->C < s->C ? pos0 - j * s->C : s->C;
            if (*v >= need) continue;
            const int32_t r0 = j * s->C + *v, rows = need - *v;
            s->be->copy_async(s->b, slot_k(s, l, j) + (int64_t)*v * s->rbk,
                              s->hk[l] + (int64_t)r0 * s->rbk, (size_t)(rows * s->rbk), 1);
            s->fill_ticket[l] = s->be->copy_async(s->b, slot_v(s, l, j) + (int64_t)*v * s->rbv,
                                                  s->hv[l] + (int64_t)r0 * s->rbv,
                                                  (size_t)(rows * s->rbv), 1);
            s->st.copies += 2;
            s->st.bytes_streamed += rows * (s->rbk + s->rbv);
            s->st.bytes_streamed_last += rows * (s->rbk + s->rbv);
            *v = need;
        }
    }
    if (s->cur_step < 0 || s->cur_step < s->step) cursor_start(s, s->step, 0);
    issue_more(s);
    return LKV_OK;
}

lkv_status lkv_kv_stream_step_end(lkv_kv_stream *s) {
    s->in_step = 0;
    if (s->resident_all) {
        /* the step's rows of every layer, straight from the slots: one copy per plane */
        const size_t n = (size_t)s->n;
        s->be->copy_wait_compute(s->b, s->be->compute_mark(s->b));
        copy_2d(s, s->hk_all + (int64_t)s->pos0 * s->rbk, (size_t)(s->cfg.n_ctx * s->rbk),
                s->pool_k + (int64_t)s->pos0 * s->rbk, (size_t)((int64_t)s->S * s->C * s->rbk),
                n * (size_t)s->rbk, (size_t)s->L, 0);
        copy_2d(s, s->hv_all + (int64_t)s->pos0 * s->rbv, (size_t)(s->cfg.n_ctx * s->rbv),
                s->pool_v + (int64_t)s->pos0 * s->rbv, (size_t)((int64_t)s->S * s->C * s->rbv),
                n * (size_t)s->rbv, (size_t)s->L, 0);
        s->st.bytes_written_back += (int64_t)s->n * s->L * (s->rbk + s->rbv);
    }
    issue_more(s);   /* the next step's first layers */
    return LKV_OK;
}

void lkv_kv_stream_batch_rows(lkv_kv_stream *s, int32_t layer, void **k, void **v) {
    if (s->resident_all) {   /* every chunk the step touches is resident: write in place */
        *k = slot_k(s, layer, 0) + (int64_t)s->pos0 * s->rbk;
        *v = slot_v(s, layer, 0) + (int64_t)s->pos0 * s->rbv;
        return;
    }
    /* the previous step's write-through from these buffers must be done */
    s->st.copy_waits += s->be->compute_wait_copy(s->b, s->wt_ticket[layer]);
    *k = s->bk[layer];
    *v = s->bv[layer];
}

static void accum(lkv_kv_stream *s, const float *q, void *stt, lkv_attn_desc *d, int32_t c_lo,
                  int32_t c_hi) {
    if (c_lo >= c_hi) return;
    d->chunk_lo = c_lo;
    d->chunk_hi = c_hi;
    s->be->attn_accum(s->b, stt, q, d);
}

/* The micro-batch's rows of layer l reached their resident slots: record it,
 * and when streaming, copy them there and write them through to the host. */
static void write_through(lkv_kv_stream *s, int l) {
    const int32_t pos0 = s->pos0, end = s->pos0 + s->n;
    if (!s->resident_all) {
        s->be->copy_wait_compute(s->b, s->be->compute_mark(s->b));
        s->be->copy_async(s->b, s->hk[l] + (int64_t)pos0 * s->rbk, s->bk[l],
                          (size_t)(s->n * s->rbk), 0);
        s->wt_ticket[l] = s->be->copy_async(s->b, s->hv[l] + (int64_t)pos0 * s->rbv, s->bv[l],
                                            (size_t)(s->n * s->rbv), 0);
        s->st.copies += 2;
        s->st.bytes_written_back += (int64_t)s->n * (s->rbk + s->rbv);
    }
    for (int32_t j = pos0 / s->C; j < s->res[l] && j * s->C < end; j++) {
        const int32_t a = j * s->C > pos0 ? j * s->C : pos0;
        const int32_t e = (j + 1) * s->C < end ? (j + 1) * s->C : end;
        if (!s->resident_all) {
            s->be->copy_d2d(s->b, slot_k(s, l, j) + (int64_t)(a - j * s->C) * s->rbk,
                            s->bk[l] + (int64_t)(a - pos0) * s->rbk, (size_t)((e - a) * s->rbk));
            s->be->copy_d2d(s->b, slot_v(s, l, j) + (int64_t)(a - j * s->C) * s->rbv,
                            s->bv[l] + (int64_t)(a - pos0) * s->rbv, (size_t)((e - a) * s->rbv));
        }
        s->valid[(int64_t)l * s->nc_max + j] = e - j * s->C;
    }
    s->wt_done = l + 1;
}

lkv_status lkv_kv_stream_attend(lkv_kv_stream *s, int32_t l, const float *q, void *stt,
                                lkv_attn_desc *d) {
    const int32_t pos0 = s->pos0, end = pos0 + s->n, C = s->C;
    const int32_t c_end = (end - 1) / C + 1;
    const lkv_kv_seg batch = {pos0, s->n, s->bk[l], s->bv[l]};
    s->st.copy_waits += s->be->compute_wait_copy(s->b, s->fill_ticket[l]);

    if (s->resident_all) {   /* one segment, as the unbounded cache */
        d->n_segs = 1;
        d->segs[0] = (lkv_kv_seg){0, end, slot_k(s, l, 0), slot_v(s, l, 0)};
        accum(s, q, stt, d, 0, c_end);
        write_through(s, l);
        return LKV_OK;
    }
    /* 1. the resident prefix: its rows before this micro-batch, contiguous */
    const int32_t rr = s->res[l] < c_end ? s->res[l] : c_end;
    int32_t done = rr;
    const int32_t old = rr * C < pos0 ? rr * C : pos0;
    const int32_t in_pool = old < s->S * C ? old : s->S * C;   /* the rest is in the arena */
    d->n_segs = 0;
    d->segs[d->n_segs++] = batch;
    if (in_pool > 0)
        d->segs[d->n_segs++] = (lkv_kv_seg){0, in_pool, slot_k(s, l, 0), slot_v(s, l, 0)};
    if (old > in_pool)
        d->segs[d->n_segs++] = (lkv_kv_seg){in_pool, old - in_pool, slot_k(s, l, s->S),
                                            slot_v(s, l, s->S)};
    accum(s, q, stt, d, 0, rr);
    /* 2. streamed pieces of this layer, in order */
    for (;;) {
        const bool front_is_mine = s->pq_len > 0 && s->pq[s->pq_head].step == s->step &&
                                   s->pq[s->pq_head].layer == l;
        if (!front_is_mine) {
            const bool pending = s->cur_step == s->step && s->cur_layer == l &&
                                 s->cur_row < pos0;
            if (!pending) break;
            issue_more(s);
            if (s->pq_len == 0 || s->pq[s->pq_head].layer != l || s->pq[s->pq_head].step != s->step)
                return lkv_fail(LKV_ERR_INTERNAL, "KV stream: layer %d's rows could not be staged", l);
            continue;
        }
        piece *p = &s->pq[s->pq_head];
        s->st.copy_waits += s->be->compute_wait_copy(s->b, p->ticket);
        char *base = s->ring + p->off;
        d->n_segs = 2;
        d->segs[0] = (lkv_kv_seg){p->row0, p->rows, base, base + (int64_t)p->rows * s->rbk};
        d->segs[1] = batch;
        const int32_t lo = p->row0 / C, hi = (p->row0 + p->rows + C - 1) / C;
        accum(s, q, stt, d, lo > done ? lo : done, hi);
        if (hi > done) done = hi;
        s->st.bytes_streamed_last += p->size;
        /* release */
        s->release_mark = s->be->compute_mark(s->b);
        s->pq_head = (s->pq_head + 1) % MAX_PIECES;
        s->pq_len--;
        s->ring_tail = s->pq_len ? s->pq[s->pq_head].off : s->ring_head;
        issue_more(s);
    }
    /* 3. chunks holding only this micro-batch's rows */
    d->n_segs = 1;
    d->segs[0] = batch;
    accum(s, q, stt, d, done, c_end);
    write_through(s, l);
    issue_more(s);
    return LKV_OK;
}

// ------------------------------------------------------------------ truncate, state, stats

lkv_status lkv_kv_stream_truncate(lkv_kv_stream *s, int32_t n) {
    LKV_TRY(drain(s));
    for (int l = 0; l < s->L; l++)
        for (int j = 0; j < s->nc_max; j++) {
            int32_t *v = &s->valid[(int64_t)l * s->nc_max + j];
            int32_t keep = n - j * s->C;
            if (*v > keep) *v = keep > 0 ? keep : 0;
        }
    s->planned = 0;
    s->pos0 = n;
    s->n = 0;
    return LKV_OK;
}

lkv_status lkv_kv_stream_rebind(lkv_kv_stream *s, void *base, int64_t bytes) {
    if (base == s->pool && bytes == s->cfg.pool_bytes) return LKV_OK;
    LKV_TRY(drain(s));
    s->pool = base;
    s->cfg.pool_base = base;
    s->cfg.pool_bytes = bytes;
    s->st.pool_bytes = bytes;
    s->planned = 0;
    s->S = -1;   /* every slot moved: the next plan refills all resident chunks */
    return LKV_OK;
}

lkv_status lkv_kv_stream_read(lkv_kv_stream *s, int32_t layer, int plane, int32_t p0, int32_t n,
                              void *dst) {
    LKV_TRY(s->be->copy_sync(s->b));
    const int64_t rb = plane ? s->rbv : s->rbk;
    memcpy(dst, (plane ? s->hv : s->hk)[layer] + (int64_t)p0 * rb, (size_t)(n * rb));
    return LKV_OK;
}

lkv_status lkv_kv_stream_write(lkv_kv_stream *s, int32_t layer, int plane, int32_t p0, int32_t n,
                               const void *src) {
    LKV_TRY(drain(s));
    const int64_t rb = plane ? s->rbv : s->rbk;
    memcpy((plane ? s->hv : s->hk)[layer] + (int64_t)p0 * rb, src, (size_t)(n * rb));
    for (int j = p0 / s->C; j < s->nc_max; j++) {
        int32_t *v = &s->valid[(int64_t)layer * s->nc_max + j];
        int32_t keep = p0 - j * s->C;
        if (*v > keep) *v = keep > 0 ? keep : 0;
    }
    s->planned = 0;
    return LKV_OK;
}

lkv_status lkv_kv_stream_lend(lkv_kv_stream *s, void *base, int64_t bytes) {
    if (!base) bytes = 0;
    if (base == s->arena && bytes == s->arena_bytes) return LKV_OK;
    /* the copies into the arena's slots land before it is the workspace again,
     * and fills into it wait for the compute that used it as workspace */
    LKV_TRY(drain(s));
    s->arena = base;
    s->arena_bytes = bytes;
    s->planned = 0;   /* the next step re-plans: arena chunks become resident or leave */
    return LKV_OK;
}

void lkv_kv_stream_get_stats(const lkv_kv_stream *s, lkv_kv_stats *out, int32_t *resident) {
    int32_t n_layer = out->n_layer, chunk = out->kv_chunk;
    *out = s->st;
    out->n_layer = n_layer;
    out->kv_chunk = chunk;
    for (int l = 0; resident && l < s->L; l++) resident[l] = s->planned ? s->res[l] : 0;
}
