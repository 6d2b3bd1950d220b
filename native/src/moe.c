/*
 * moe.c: the mixture-of-experts FFN (moe.h): routing, grouping the tokens by
 * expert, each expert's SwiGLU over its rows, the weighted sum, and the
 * shared expert with its sigmoid gate; the experts of n_cpu_moe layers on the
 * host's CPU.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "error.h"
#include "moe.h"

struct lkv_moe {
    /* backend memory, U = n_ubatch rows, X experts, k used */
    float *logits;           /* (U, X) router logits */
    int32_t *ids;            /* (U, k) picked experts */
    float *wts;              /* (U, k) their weights */
    float *xe;               /* (U, n_embd) one expert's rows of h, gathered */
    float *ye;               /* (U, n_embd) its output; the shared expert's */
    float *shg;              /* (U,) the shared expert's gate logits */
    int32_t *d_rows;         /* (U*k,) rows, uploaded */
    float *d_w;              /* (U*k,) w, uploaded */
    int32_t *d_iota;         /* (U,) 0 .. U-1 */
    float *d_sig;            /* (U,) sigmoid of the shared gates */
    float *d_one;            /* (U,) 1.0f: d_sig's start, so that sigmoid_mul leaves the sigmoid */
    /* host */
    int32_t *h_ids;          /* (U, k) */
    float *h_wts;            /* (U, k) */
    float *h_sig;            /* (U,) 1.0f, uploaded into d_one */
    int32_t *start;          /* (X + 1,) expert e's picks: [start[e], start[e+1]) of rows / w */
    int32_t *rows;           /* (U*k,) token row of each pick, grouped by expert */
    float *w;                /* (U*k,) its weight */
    /* host experts: the CPU backend's ops on hb (NULL: no layer has them), a context of their
     * own beside a device backend's, the context's own on the CPU backend */
    lkv_bctx *hb;
    bool own_hb;
    float *hx, *hxe, *hye, *ho;  /* (U, n_embd) h; an expert's rows; its output; the sum */
    float *hg, *hu;              /* (U, n_ff_exp) */
};

// ------------------------------------------------------------------ create / free

static bool has_host_experts(const lkv_model *m) {
    for (int i = 0; i < m->hp.n_layer; i++)
        if (m->layers[i].exp_down.host) return true;
    return false;
}

lkv_status lkv_moe_create(lkv_context *c, lkv_moe **out) {
    *out = NULL;
    const lkv_model_params *hp = &c->model->hp;
    if (!c->model->arch->moe) return LKV_OK;
    const size_t U = (size_t)c->p.n_ubatch, X = (size_t)hp->n_expert,
                 K = (size_t)hp->n_expert_used, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff_exp;
    lkv_moe *t = calloc(1, sizeof *t);
    if (!t) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the experts' tables");
    *out = t;
    void **bufs[] = {(void **)&t->logits, (void **)&t->ids, (void **)&t->wts, (void **)&t->xe,
                     (void **)&t->ye, (void **)&t->shg, (void **)&t->d_rows, (void **)&t->d_w,
                     (void **)&t->d_iota, (void **)&t->d_sig, (void **)&t->d_one};
    const size_t bytes[] = {4 * U * X, 4 * U * K, 4 * U * K, 4 * U * E, 4 * U * E, 4 * U,
                            4 * U * K, 4 * U * K, 4 * U, 4 * U, 4 * U};
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (!(*bufs[i] = c->be->alloc(c->b, bytes[i])))
            return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for the experts' "
                            "routing", bytes[i]);
    t->h_ids = malloc(4 * U * K);
    t->h_wts = malloc(4 * U * K);
    t->h_sig = malloc(4 * U);
    t->start = malloc(4 * (X + 1));
    t->rows = malloc(4 * U * K);   /* (K >= 1: room for the iota uploaded below too) */
    t->w = malloc(4 * U * K);
    if (!t->h_ids || !t->h_wts || !t->h_sig || !t->start || !t->rows || !t->w)
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the experts' tables");
    for (size_t i = 0; i < U; i++) t->rows[i] = (int32_t)i;
    c->be->upload(c->b, t->d_iota, t->rows, 4 * U);
    for (size_t i = 0; i < U; i++) t->h_sig[i] = 1.0f;
    c->be->upload(c->b, t->d_one, t->h_sig, 4 * U);
    if (!has_host_experts(c->model)) return LKV_OK;
    const lkv_backend *cpu = &lkv_backend_cpu;
    if (c->be == cpu) {
        t->hb = c->b;
    } else {
        LKV_TRY(cpu->ctx_init(&t->hb, c->model, c->p.n_threads, (int)U));
        t->own_hb = true;
    }
    float **hbufs[] = {&t->hx, &t->hxe, &t->hye, &t->ho, &t->hg, &t->hu};
    const size_t hbytes[] = {4 * U * E, 4 * U * E, 4 * U * E, 4 * U * E, 4 * U * F, 4 * U * F};
    for (size_t i = 0; i < sizeof hbytes / sizeof hbytes[0]; i++)
        if (!(*hbufs[i] = cpu->alloc(t->hb, hbytes[i])))
            return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the host experts' buffers");
    return LKV_OK;
}

void lkv_moe_free(lkv_context *c, lkv_moe *t) {
    if (!t) return;
    void *bufs[] = {t->logits, t->ids, t->wts, t->xe, t->ye, t->shg, t->d_rows, t->d_w,
                    t->d_iota, t->d_sig, t->d_one};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) c->be->free(c->b, bufs[i]);
    if (t->hb) {
        float *hbufs[] = {t->hx, t->hxe, t->hye, t->ho, t->hg, t->hu};
        for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
            if (hbufs[i]) lkv_backend_cpu.free(t->hb, hbufs[i]);
        if (t->own_hb) lkv_backend_cpu.ctx_free(t->hb);
    }
    free(t->h_ids);
    free(t->h_wts);
    free(t->h_sig);
    free(t->start);
    free(t->rows);
    free(t->w);
    free(t);
}

// ------------------------------------------------------------------ forward

/* rows [row0, row0 + n) of w as a weight of their own (an expert of a 3-D tensor, model.h) */
static lkv_weight rows_of(const lkv_weight *w, int64_t row0, int64_t n) {
    lkv_weight v = *w;
    v.rows = n;
    const size_t off = (size_t)row0 * w->row_bytes;
    v.data = (const char *)w->data + off;
    if (w->dev) v.dev = (char *)w->dev + off;
    return v;
}

/* expert e's gate, up and down */
static void expert(const lkv_layer_weights *L, const lkv_model_params *hp, int e,
                   lkv_weight *g, lkv_weight *u, lkv_weight *d) {
    const int64_t F = hp->n_ff_exp, E = hp->n_embd;
    *d = rows_of(&L->exp_down, e * E, E);
    if (L->exp_gate_up.data) {   /* fused: the expert's gate rows, then its up rows */
        *g = rows_of(&L->exp_gate_up, 2 * e * F, F);
        *u = rows_of(&L->exp_gate_up, (2 * e + 1) * F, F);
    } else {
        *g = rows_of(&L->exp_gate, e * F, F);
        *u = rows_of(&L->exp_up, e * F, F);
    }
}

/* out (n, n_embd) = down(silu(gate(x)) * up(x)) with be's ops, through g, u (n, gate rows) */
static void swiglu_ffn(const lkv_backend *be, lkv_bctx *b, float *out, float *gbuf, float *ubuf,
                       const float *x, const lkv_weight *g, const lkv_weight *u,
                       const lkv_weight *d, int n) {
    float *gu[2] = {gbuf, ubuf};
    const lkv_weight *wgu[2] = {g, u};
    be->matmul(b, gu, x, wgu, 2, n);
    be->swiglu(b, gbuf, gbuf, ubuf, (int64_t)n * g->rows);
    float *o1[1] = {out};
    const lkv_weight *wd[1] = {d};
    be->matmul(b, o1, gbuf, wd, 1, n);
}

/* the picks (n, k) grouped by expert, in token order within an expert */
static void group_by_expert(lkv_moe *t, int n, int k, int X) {
    memset(t->start, 0, sizeof(int32_t) * (size_t)(X + 1));
    for (int i = 0; i < n * k; i++) t->start[t->h_ids[i] + 1]++;
    for (int e = 0; e < X; e++) t->start[e + 1] += t->start[e];
    int32_t *fill = t->start;   /* advanced while filling, then shifted back */
    for (int r = 0; r < n; r++)
        for (int j = 0; j < k; j++) {
            const int i = r * k + j, e = t->h_ids[i];
            t->rows[fill[e]] = r;
            t->w[fill[e]++] = t->h_wts[i];
        }
    for (int e = X; e > 0; e--) t->start[e] = t->start[e - 1];
    t->start[0] = 0;
}

/* o (n, n_embd) = the routed experts' weighted sum, with the ops of `be` on context b; rows,
 * w: the groups in b's memory; h, o, xe, ye, g, u: b's buffers */
static void routed(const lkv_backend *be, lkv_bctx *b, const lkv_layer_weights *L,
                   const lkv_model_params *hp, const lkv_moe *t, const int32_t *rows,
                   const float *w, float *o, const float *h, float *xe, float *ye, float *g,
                   float *u, int n) {
    const int E = hp->n_embd;
    be->zero(b, o, (int64_t)n * E);
    for (int e = 0; e < hp->n_expert; e++) {
        const int s = t->start[e], m = t->start[e + 1] - s;
        if (!m) continue;
        lkv_weight wg, wu, wd;
        expert(L, hp, e, &wg, &wu, &wd);
        be->gather_rows(b, xe, h, rows + s, m, E);
        swiglu_ffn(be, b, ye, g, u, xe, &wg, &wu, &wd, m);
        be->scatter_add_rows(b, o, ye, rows + s, w + s, m, E);
    }
}

lkv_status lkv_moe_ffn(lkv_context *c, const lkv_layer_weights *L, int n) {
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    lkv_moe *t = c->moe;
    const int E = hp->n_embd, X = hp->n_expert, k = hp->n_expert_used;
    const float scale = hp->expert_weights_scale > 0.0f ? hp->expert_weights_scale : 1.0f;
    const bool host = L->exp_down.host;   /* this layer's experts on the host's CPU */
    const bool shared = L->sh_gate.data != NULL;

    /* the router on the backend; the picks (and for host experts h) to the host */
    float *lo[1] = {t->logits};
    const lkv_weight *wr[1] = {&L->moe_router};
    be->matmul(c->b, lo, c->h, wr, 1, n);
    be->moe_topk(c->b, t->ids, t->wts, t->logits, n, X, k, hp->expert_weights_norm, scale);
    be->download(c->b, t->h_ids, t->ids, sizeof(int32_t) * (size_t)n * k);
    be->download(c->b, t->h_wts, t->wts, sizeof(float) * (size_t)n * k);
    if (host) be->download(c->b, t->hx, c->h, sizeof(float) * (size_t)n * E);
    LKV_TRY(be->sync(c->b));
    for (int i = 0; i < n * k; i++)
        if (t->h_ids[i] < 0 || t->h_ids[i] >= X)   /* NaN logits pick nothing */
            return lkv_fail(LKV_ERR_INTERNAL, "the router picked no expert (non-finite router "
                            "logits?)");
    group_by_expert(t, n, k, X);

    /* the shared expert, scaled per row by sigmoid(h . w_shgate): with host experts enqueued
     * first, so that the backend runs it while the CPU runs the routed ones */
    if (shared && host) {
        swiglu_ffn(be, c->b, t->ye, c->ffn_g, c->ffn_u, c->h, &L->sh_gate, &L->sh_up,
                   &L->sh_down, n);
        float *go[1] = {t->shg};
        const lkv_weight *wg[1] = {&L->sh_gate_inp};
        be->matmul(c->b, go, c->h, wg, 1, n);
    }
    if (host) {
        routed(&lkv_backend_cpu, t->hb, L, hp, t, t->rows, t->w, t->ho, t->hx, t->hxe, t->hye,
               t->hg, t->hu, n);
        be->upload(c->b, c->o, t->ho, sizeof(float) * (size_t)n * E);
    } else {
        be->upload(c->b, t->d_rows, t->rows, sizeof(int32_t) * (size_t)n * k);
        be->upload(c->b, t->d_w, t->w, sizeof(float) * (size_t)n * k);
        routed(be, c->b, L, hp, t, t->d_rows, t->d_w, c->o, c->h, t->xe, t->ye, c->ffn_g,
               c->ffn_u, n);
    }
    if (!shared) return LKV_OK;
    if (!host) {
        swiglu_ffn(be, c->b, t->ye, c->ffn_g, c->ffn_u, c->h, &L->sh_gate, &L->sh_up,
                   &L->sh_down, n);
        float *go[1] = {t->shg};
        const lkv_weight *wg[1] = {&L->sh_gate_inp};
        be->matmul(c->b, go, c->h, wg, 1, n);
    }
    /* sigmoid(shg) on the backend (1 * sigmoid is exact): no download, no sync */
    be->copy_d2d(c->b, t->d_sig, t->d_one, sizeof(float) * (size_t)n);
    be->sigmoid_mul(c->b, t->d_sig, t->shg, n);
    be->scatter_add_rows(c->b, c->o, t->ye, t->d_iota, t->d_sig, n, E);
    return LKV_OK;
}
