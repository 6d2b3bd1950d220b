/*
 * moe.c: the mixture-of-experts FFN (moe.h): routing, grouping the tokens by
 * expert, each expert's SwiGLU over its rows, the weighted sum, and the
 * shared expert with its sigmoid gate.
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
    float *ye;               /* (U, n_embd) its output */
    float *shg;              /* (U,) the shared expert's gate logits */
    /* host */
    int32_t *h_ids;          /* (U, k) */
    float *h_wts;            /* (U, k); then (U,) the shared gate's sigmoids */
    int32_t *start;          /* (X + 1,) expert e's picks: [start[e], start[e+1]) of rows / w */
    int32_t *rows;           /* (U*k,) token row of each pick, grouped by expert */
    float *w;                /* (U*k,) its weight */
    int32_t *iota;           /* (U,) 0 .. U-1 */
};

// ------------------------------------------------------------------ create / free

lkv_status lkv_moe_create(lkv_context *c, lkv_moe **out) {
    *out = NULL;
    const lkv_model_params *hp = &c->model->hp;
    if (!c->model->arch->moe) return LKV_OK;
    const size_t U = (size_t)c->p.n_ubatch, X = (size_t)hp->n_expert,
                 K = (size_t)hp->n_expert_used, E = (size_t)hp->n_embd;
    lkv_moe *t = calloc(1, sizeof *t);
    if (!t) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the experts' tables");
    *out = t;
    void **bufs[] = {(void **)&t->logits, (void **)&t->ids, (void **)&t->wts, (void **)&t->xe,
                     (void **)&t->ye, (void **)&t->shg};
    const size_t bytes[] = {4 * U * X, 4 * U * K, 4 * U * K, 4 * U * E, 4 * U * E, 4 * U};
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (!(*bufs[i] = c->be->alloc(c->b, bytes[i])))
            return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for the experts' "
                            "routing", bytes[i]);
    t->h_ids = malloc(4 * U * K);
    t->h_wts = malloc(4 * U * K);
    t->start = malloc(4 * (X + 1));
    t->rows = malloc(4 * U * K);
    t->w = malloc(4 * U * K);
    t->iota = malloc(4 * U);
    if (!t->h_ids || !t->h_wts || !t->start || !t->rows || !t->w || !t->iota)
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the experts' tables");
    for (size_t i = 0; i < U; i++) t->iota[i] = (int32_t)i;
    return LKV_OK;
}

void lkv_moe_free(lkv_context *c, lkv_moe *t) {
    if (!t) return;
    void *bufs[] = {t->logits, t->ids, t->wts, t->xe, t->ye, t->shg};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) c->be->free(c->b, bufs[i]);
    free(t->h_ids);
    free(t->h_wts);
    free(t->start);
    free(t->rows);
    free(t->w);
    free(t->iota);
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

/* out (n, n_embd) = down(silu(gate(x)) * up(x)) through c->ffn_g, c->ffn_u */
static void swiglu_ffn(lkv_context *c, float *out, const float *x, const lkv_weight *g,
                       const lkv_weight *u, const lkv_weight *d, int n) {
    const lkv_backend *be = c->be;
    float *gu[2] = {c->ffn_g, c->ffn_u};
    const lkv_weight *wgu[2] = {g, u};
    be->matmul(c->b, gu, x, wgu, 2, n);
    be->swiglu(c->b, c->ffn_g, c->ffn_g, c->ffn_u, (int64_t)n * g->rows);
    float *o1[1] = {out};
    const lkv_weight *wd[1] = {d};
    be->matmul(c->b, o1, c->ffn_g, wd, 1, n);
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

lkv_status lkv_moe_ffn(lkv_context *c, const lkv_layer_weights *L, int n) {
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    lkv_moe *t = c->moe;
    const int E = hp->n_embd, X = hp->n_expert, k = hp->n_expert_used;
    const float scale = hp->expert_weights_scale > 0.0f ? hp->expert_weights_scale : 1.0f;

    float *lo[1] = {t->logits};
    const lkv_weight *wr[1] = {&L->moe_router};
    be->matmul(c->b, lo, c->h, wr, 1, n);
    be->moe_topk(c->b, t->ids, t->wts, t->logits, n, X, k, hp->expert_weights_norm, scale);
    be->download(c->b, t->h_ids, t->ids, sizeof(int32_t) * (size_t)n * k);
    be->download(c->b, t->h_wts, t->wts, sizeof(float) * (size_t)n * k);
    LKV_TRY(be->sync(c->b));
    for (int i = 0; i < n * k; i++)
        if (t->h_ids[i] < 0 || t->h_ids[i] >= X)   /* NaN logits pick nothing */
            return lkv_fail(LKV_ERR_INTERNAL, "the router picked no expert (non-finite router "
                            "logits?)");
    group_by_expert(t, n, k, X);

    be->zero(c->b, c->o, (int64_t)n * E);
    for (int e = 0; e < X; e++) {
        const int s = t->start[e], m = t->start[e + 1] - s;
        if (!m) continue;
        const int64_t F = hp->n_ff_exp;
        const lkv_weight d = rows_of(&L->exp_down, (int64_t)e * E, E);
        const lkv_weight g = L->exp_gate_up.data ? rows_of(&L->exp_gate_up, 2 * e * F, F)
                                                 : rows_of(&L->exp_gate, e * F, F);
        const lkv_weight u = L->exp_gate_up.data ? rows_of(&L->exp_gate_up, (2 * e + 1) * F, F)
                                                 : rows_of(&L->exp_up, e * F, F);
        be->gather_rows(c->b, t->xe, c->h, t->rows + s, m, E);
        swiglu_ffn(c, t->ye, t->xe, &g, &u, &d, m);
        be->scatter_add_rows(c->b, c->o, t->ye, t->rows + s, t->w + s, m, E);
    }
    if (!L->sh_gate.data) return LKV_OK;

    /* the shared expert, scaled per row by sigmoid(h . w_shgate) */
    swiglu_ffn(c, t->ye, c->h, &L->sh_gate, &L->sh_up, &L->sh_down, n);
    float *go[1] = {t->shg};
    const lkv_weight *wg[1] = {&L->sh_gate_inp};
    be->matmul(c->b, go, c->h, wg, 1, n);
    be->download(c->b, t->h_wts, t->shg, sizeof(float) * (size_t)n);
    LKV_TRY(be->sync(c->b));
    for (int r = 0; r < n; r++) t->h_wts[r] = 1.0f / (1.0f + expf(-t->h_wts[r]));
    be->scatter_add_rows(c->b, c->o, t->ye, t->iota, t->h_wts, n, E);
    return LKV_OK;
}
