/*
 * arena.c: the micro-batch workspace and the phase arena (arena.h).
 */
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "context.h"
#include "error.h"

#define WS_MAX 20
#define WS_ALIGN 256   /* each buffer of the arena starts at a multiple (as cudaMalloc's) */

/* the workspace buffers of a micro-batch of `rows` tokens: where the
 * context keeps each pointer, and its bytes */
typedef struct {
    int n;
    void *field[WS_MAX];     /* the address of a float * or void * field */
    size_t bytes[WS_MAX];
    const char *name[WS_MAX];
} ws_list;

struct lkv_arena {
    char *base;              /* the arena: the prefill set, or lent to the KV cache */
    int64_t bytes;
    void *big[WS_MAX];       /* prefill set (n_ubatch rows), inside base */
    void *small[WS_MAX];     /* decode set (LKV_DECODE_ROWS rows), own allocations */
    int prefill;             /* the phase now: 1 prefill (the arena is the workspace) */
};

static void ws_list_of(lkv_context *c, int rows, ws_list *w) {
    const lkv_model_params *hp = &c->model->hp;
    const size_t R = (size_t)rows, F = sizeof(float), hd = (size_t)hp->head_dim;
    const size_t nq = (size_t)hp->n_head * hd, nkv = (size_t)hp->n_head_kv * hd;
    const size_t wide = nq > (size_t)hp->n_embd ? nq : (size_t)hp->n_embd;
    w->n = 0;
#define W(ptr, nbytes) (w->field[w->n] = (void *)&(ptr), w->bytes[w->n] = (nbytes), \
                        w->name[w->n++] = #ptr)
    W(c->x, F * R * hp->n_embd);
    W(c->h, F * R * wide);
    W(c->q, F * R * nq);
    W(c->k, F * R * nkv);
    W(c->v, F * R * nkv);
    W(c->ffn_g, F * R * hp->n_ff);
    W(c->ffn_u, F * R * hp->n_ff);
    W(c->o, F * R * hp->n_embd);
    W(c->attn_st, c->be->attn_state_bytes(rows, hp->n_head, (int)hd));
    if (c->model->arch->hybrid) {
        const size_t VD = (size_t)hp->ssm_n_v_heads * hp->ssm_head_v_dim,
                     CD = 2 * (size_t)hp->ssm_n_k_heads * hp->ssm_head_k_dim + VD;
        W(c->qg, F * R * 2 * nq);
        W(c->gate, F * R * nq);
        W(c->rs_qkv, F * R * CD);
        W(c->rs_conv, F * R * CD);
        W(c->rs_z, F * R * VD);
        W(c->rs_beta, F * R * hp->ssm_n_v_heads);
        W(c->rs_alpha, F * R * hp->ssm_n_v_heads);
        W(c->rs_out, F * R * VD);
    }
#undef W
}

static int wants_arena(const lkv_context *c) {
    const lkv_context_params *p = &c->p;
    const int on = p->phase_arena > 0 || (p->phase_arena < 0 && c->be->phase_arena);
    return on && p->kv_pool_bytes >= 0 && p->n_seq_max == 1 && p->n_ubatch > LKV_DECODE_ROWS;
}

/* the context's pointers are float * or void *: written and read as bytes */
static void set_field(const ws_list *w, int i, void *p) { memcpy(w->field[i], &p, sizeof p); }
static void *get_field(const ws_list *w, int i) {
    void *p;
    memcpy(&p, w->field[i], sizeof p);
    return p;
}

static void set_fields(const ws_list *w, void *const *bufs) {
    for (int i = 0; i < w->n; i++) set_field(w, i, bufs[i]);
}

lkv_status lkv_ws_create(lkv_context *c) {
    ws_list w;
    ws_list_of(c, c->p.n_ubatch, &w);
    if (!wants_arena(c)) {
        for (int i = 0; i < w.n; i++) {
            void *p = c->be->alloc(c->b, w.bytes[i]);
            set_field(&w, i, p);
            if (!p)
                return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for %s",
                                w.bytes[i], w.name[i]);
        }
        return LKV_OK;
    }
    lkv_arena *a = calloc(1, sizeof *a);
    if (!a) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the phase arena");
    c->arena = a;
    size_t off[WS_MAX], total = 0;
    for (int i = 0; i < w.n; i++) {
        off[i] = total;
        total += (w.bytes[i] + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    }
    if (!(a->base = c->be->alloc(c->b, total)))
        return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate the phase arena of %zu bytes "
                        "(the workspace of %d tokens)", total, c->p.n_ubatch);
    a->bytes = (int64_t)total;
    for (int i = 0; i < w.n; i++) a->big[i] = a->base + off[i];
    ws_list d;
    ws_list_of(c, LKV_DECODE_ROWS, &d);
    for (int i = 0; i < d.n; i++)
        if (!(a->small[i] = c->be->alloc(c->b, d.bytes[i])))
            return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for %s (decode)",
                            d.bytes[i], d.name[i]);
    set_fields(&w, a->big);
    a->prefill = 1;
    return LKV_OK;
}

void lkv_ws_free(lkv_context *c) {
    ws_list w;
    ws_list_of(c, 1, &w);
    lkv_arena *a = c->arena;
    for (int i = 0; i < w.n; i++) {
        void *p = get_field(&w, i);
        if (!a && p) c->be->free(c->b, p);
        if (a && a->small[i]) c->be->free(c->b, a->small[i]);
        set_field(&w, i, NULL);
    }
    if (a && a->base) c->be->free(c->b, a->base);
    free(a);
    c->arena = NULL;
}

lkv_status lkv_ws_phase(lkv_context *c, int32_t n) {
    lkv_arena *a = c->arena;
    const int prefill = n > LKV_DECODE_ROWS;
    if (!a || prefill == a->prefill) return LKV_OK;
    lkv_kv *kv = lkv_kvset_seq(c->kvs, 0);
    ws_list w;
    ws_list_of(c, 1, &w);
    if (prefill) {   /* the KV cache lets go first: then the arena is workspace again */
        LKV_TRY(lkv_kv_lend(kv, NULL, 0));
        set_fields(&w, a->big);
    } else {         /* the small set from now on; the cache's fills wait for the prefill */
        set_fields(&w, a->small);
        lkv_status st = lkv_kv_lend(kv, a->base, a->bytes);
        if (st) { set_fields(&w, a->big); return st; }
    }
    a->prefill = prefill;
    return LKV_OK;
}

int64_t lkv_ws_arena_bytes(const lkv_context *c) { return c->arena ? c->arena->bytes : 0; }
