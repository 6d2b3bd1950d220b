/*
 * memplan.c: the dry run behind lkv_memory_plan_compute (llamakv.h).
 *
 * The plan is not a second list of the context's buffers: it runs the
 * context's own creation (context.c lkv_context_build_on: the workspace and
 * phase arena, the logits, the recurrent state, the KV caches and pool, the
 * MTP block) on a *recording backend*, a copy of the target backend's table
 * whose memory calls write down each allocation, under the part the build
 * marks (model_api.h lkv_ctx_part), and hand back an address nobody reads.
 * So every size, every condition (arena or not, pool or all resident, a
 * sliding-window ring) and every refusal (a pool below the minimum) is the
 * creation's own. The model is bound on the CPU backend, which copies
 * nothing; the weights it uses are counted as the CUDA backend would copy
 * them (one allocation per distinct tensor), less the routed experts that
 * mp->n_cpu_moe keeps in host memory (on the CPU target too: the emulated
 * device's budget is the CUDA one's). The backend's own buffers, made
 * outside its alloc call, come from the backend: lkv_cuda_ctx_plan.
 *
 * Recorded per part: bytes as asked, and each allocation rounded up as the
 * CUDA driver rounds it (granule), which bounds what the device shows.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "context.h"
#include "error.h"
#include "kv/plan.h"
#include "model_api.h"
#include "quant/types.h"

#define SMALL_ALLOC ((int64_t)1 << 20)   /* cudaMalloc: below, 512-byte steps */
#define PAGE_ALLOC ((int64_t)2 << 20)    /* from there, whole 2 MiB pages */

int64_t lkv_memplan_granule(int64_t n) {
    if (n < 16) n = 16;                  /* the backends ask for 16 bytes for 0 */
    const int64_t small = (n + 511) / 512 * 512;
    return small < SMALL_ALLOC ? small : (n + PAGE_ALLOC - 1) / PAGE_ALLOC * PAGE_ALLOC;
}

// ------------------------------------------------------------------ the recorder

typedef struct memrec {
    lkv_backend table;       /* the target's, memory and queue calls replaced below */
    int part;                /* lkv_ctx_part in force */
    int64_t bytes[LKV_PARTS];
    int64_t rounded[LKV_PARTS];
    int32_t n_alloc;
    int64_t host;
    uintptr_t next;          /* the next address handed out (never dereferenced) */
} memrec;

static memrec *rec_of(lkv_bctx *b) { return (memrec *)(void *)b; }

/* the recorder of the dry run in progress on this thread: ctx_init's
 * signature has no way to it */
static _Thread_local memrec *building;

static void rec_add(memrec *r, int64_t bytes) {
    r->bytes[r->part] += bytes;
    r->rounded[r->part] += lkv_memplan_granule(bytes);
    r->n_alloc++;
}

static void *rec_address(memrec *r, size_t bytes) {
    void *p = (void *)r->next;
    r->next += (bytes + 4095) / 4096 * 4096 + 4096;
    return p;
}

static lkv_status rec_ctx_init(lkv_bctx **out, const struct lkv_model *m, int n_threads,
                               int max_tokens) {
    (void)m; (void)n_threads; (void)max_tokens;
    *out = (lkv_bctx *)(void *)building;   /* the backend state is the recorder */
    return LKV_OK;
}
static void rec_ctx_free(lkv_bctx *b) { (void)b; }
static void *rec_alloc(lkv_bctx *b, size_t bytes) {
    rec_add(rec_of(b), (int64_t)bytes);
    return rec_address(rec_of(b), bytes);
}
static void rec_free(lkv_bctx *b, void *p) { (void)b; (void)p; }
static void *rec_host_alloc(lkv_bctx *b, size_t bytes) {
    rec_of(b)->host += (int64_t)bytes;
    return rec_address(rec_of(b), bytes);
}
static lkv_status rec_ok(lkv_bctx *b) { (void)b; return LKV_OK; }
static uint64_t rec_copy(lkv_bctx *b, void *dst, const void *src, size_t n, int h2d) {
    (void)b; (void)dst; (void)src; (void)n; (void)h2d;
    return 0;
}
static uint64_t rec_copy_2d(lkv_bctx *b, void *dst, size_t dp, const void *src, size_t sp,
                            size_t w, size_t h, int h2d) {
    (void)b; (void)dst; (void)dp; (void)src; (void)sp; (void)w; (void)h; (void)h2d;
    return 0;
}
static void rec_move(lkv_bctx *b, void *dst, const void *src, size_t n) {
    (void)b; (void)dst; (void)src; (void)n;
}
static void rec_set_fast(lkv_bctx *b, int fast) { (void)b; (void)fast; }
static void rec_mark(lkv_bctx *b, int part) { rec_of(b)->part = part; }

/* the target's table with every call the creation makes on memory replaced
 * (the creation calls no compute op; the presence checks see the target's) */
static void rec_init(memrec *r, const lkv_backend *target) {
    memset(r, 0, sizeof *r);
    r->table = *target;
    r->table.ctx_init = rec_ctx_init;
    r->table.ctx_free = rec_ctx_free;
    r->table.alloc = rec_alloc;
    r->table.free = rec_free;
    r->table.host_alloc = target->host_alloc ? rec_host_alloc : NULL;
    r->table.host_free = target->host_free ? rec_free : NULL;
    r->table.copier_init = target->copier_init ? rec_ok : NULL;
    r->table.copy_sync = target->copy_sync ? rec_ok : NULL;
    r->table.copy_async = target->copy_async ? rec_copy : NULL;
    r->table.copy_async_2d = target->copy_async_2d ? rec_copy_2d : NULL;
    r->table.upload = (void (*)(lkv_bctx *, void *, const void *, size_t))rec_move;
    r->table.download = (void (*)(lkv_bctx *, void *, const void *, size_t))rec_move;
    r->table.copy_d2d = (void (*)(lkv_bctx *, void *, const void *, size_t))rec_move;
    r->table.sync = rec_ok;
    r->table.set_fast = target->set_fast ? rec_set_fast : NULL;
    r->next = 1u << 20;
}

// ------------------------------------------------------------------ weights

typedef struct { const void **seen; int n, cap; int64_t bytes, rounded; bool oom; } weight_sum;

static void add_weight(lkv_weight *w, void *ud) {
    weight_sum *s = ud;
    if (!w->data || w->host || s->oom) return;   /* host: n_cpu_moe's experts stay off it */
    for (int i = 0; i < s->n; i++)
        if (s->seen[i] == w->data) return;   /* one copy per distinct tensor */
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 256;
        const void **p = realloc(s->seen, sizeof *p * (size_t)cap);
        if (!p) { s->oom = true; return; }
        s->seen = p;
        s->cap = cap;
    }
    s->seen[s->n++] = w->data;
    const int64_t b = (int64_t)(w->row_bytes * w->rows);
    s->bytes += b;
    s->rounded += lkv_memplan_granule(b);
}

// ------------------------------------------------------------------ the plan

#ifdef LKV_HAVE_CUDA
void lkv_cuda_ctx_plan(const lkv_model *m, int max_tokens, int32_t type_k, int32_t type_v,
                       int fast, void (*add)(void *ud, int64_t bytes), void *ud);
#endif

static void add_backend(void *ud, int64_t bytes) { rec_add(ud, bytes); }

static void fill_kv(const lkv_context *c, memrec *r, lkv_memory_plan *out) {
    out->kv = r->bytes[LKV_PART_KV];
    out->host = r->host;
    const int64_t nkv = (int64_t)c->model->hp.n_head_kv * c->model->hp.head_dim;
    for (int32_t s = 0; s < c->n_seq; s++) {
        lkv_kv_stats st;
        if (lkv_context_stats(c, s, &st, NULL) || !st.streaming) continue;
        out->kv_pool = c->p.kv_pool_bytes;
        lkv_plan_params pp = {st.n_layer, c->p.kv_chunk,
                              lkv_type_row_bytes(lkv_type_traits(c->p.type_k), nkv),
                              lkv_type_row_bytes(lkv_type_traits(c->p.type_v), nkv),
                              c->p.n_ctx, c->p.n_ubatch, st.pool_bytes, 0};
        lkv_plan plan;
        if (!lkv_plan_make(&pp, c->p.n_ctx, &plan, NULL)) out->kv_ring += plan.ring_bytes;
    }
}

lkv_status lkv_memplan_run(const lkv_model_params *mp, const lkv_tensor_desc *tensors,
                           int32_t n_tensors, const lkv_context_params *cp, lkv_memory_plan *out) {
    memset(out, 0, sizeof *out);
    const lkv_backend *target = NULL;
    LKV_TRY(lkv_model_backend(mp, &target));
    lkv_model_params bound = *mp;
    bound.device = LKV_DEVICE_CPU;       /* binds and checks every tensor, copies none */
    lkv_model *m = NULL;
    LKV_TRY(lkv_model_build(&bound, tensors, n_tensors, &m));
    weight_sum ws = {0};
    lkv_model_foreach_weight(m, add_weight, &ws);
    free(ws.seen);
    lkv_status st = ws.oom ? lkv_fail(LKV_ERR_OUT_OF_MEMORY, "memory plan: no memory") : LKV_OK;
    memrec *r = st ? NULL : malloc(sizeof *r);
    if (!st && !r) st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "memory plan: no memory");
    lkv_context *c = NULL;
    if (!st) {
        rec_init(r, target);
        building = r;
        st = lkv_context_build_on(m, &r->table, cp, &c, rec_mark);
        building = NULL;
    }
    if (!st) {
        out->device = mp->device;
        out->n_ubatch = c->p.n_ubatch;
        out->phase_arena = lkv_ws_arena_bytes(c) > 0;
        out->weights = ws.bytes;
        out->weights_device = ws.rounded;
        r->part = LKV_PART_LOGITS;
        const int64_t before = r->bytes[LKV_PART_LOGITS], rounded = r->rounded[LKV_PART_LOGITS];
        if (!c->p.logits_all && (st = lkv_context_wide_logits(c))) goto done;
        out->logits_wide = r->bytes[LKV_PART_LOGITS] - before;
        r->bytes[LKV_PART_LOGITS] = before;      /* counted apart, not in device_total */
        r->rounded[LKV_PART_LOGITS] = rounded;
        r->n_alloc -= out->logits_wide > 0;
        r->part = LKV_PART_BACKEND;
#ifdef LKV_HAVE_CUDA
        if (mp->device == LKV_DEVICE_CUDA)
            lkv_cuda_ctx_plan(m, c->p.n_ubatch, c->p.type_k, c->p.type_v, c->p.gpu_kernels,
                              add_backend, r);
#else
        (void)add_backend;
#endif
        out->backend = r->bytes[LKV_PART_BACKEND];
        const int64_t arena = lkv_ws_arena_bytes(c);
        out->workspace = arena ? arena : r->bytes[LKV_PART_WORKSPACE];
        out->workspace_decode = arena ? r->bytes[LKV_PART_WORKSPACE] - arena : 0;
        out->logits = r->bytes[LKV_PART_LOGITS];
        out->recurrent = r->bytes[LKV_PART_RECURRENT];
        out->mtp = r->bytes[LKV_PART_MTP];
        fill_kv(c, r, out);
        out->n_allocations = r->n_alloc;
        for (int i = 0; i < LKV_PARTS; i++) out->device_total += r->rounded[i];
        out->kv_device = r->rounded[LKV_PART_KV];
        out->recurrent_device = r->rounded[LKV_PART_RECURRENT];
    }
done:
    if (c) lkv_context_destroy(c);
    free(r);
    lkv_model_destroy(m);
    return st;
}
