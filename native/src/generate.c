/*
 * generate.c: generation inside the library (lkv_generate): decode a token,
 * pick the next one, decode it, and so on, up to n_max tokens or a stop id,
 * without a return to the caller per token.
 *
 * Greedy without penalties: the pick is engine/sampling.py's greedy rule bit
 * for bit (the largest (double)logit + bias, the first of equal ones; NaN, or
 * no finite largest value, ends the loop without a token: the caller's
 * sampler then reports it). Backends without pick_greedy (the CPU) have each
 * step's row copied to the host logits and picked here, by the same rule;
 * CUDA picks on the device (cuda/sample.cu; test_ops pick and
 * tests/test_greedy_loop.py on an H100, 2026-12-07) and brings back the id only.
 *
 * Otherwise (temperature > 0, penalties) each row is brought to the host and
 * run through the sampler chain (sample_chain.c: the Python sampler's pick,
 * its random draws from the caller's PCG64 state).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "error.h"
#include "model_api.h"
#include "sample_chain.h"

/* the greedy rule over a host row */
static int32_t pick_host(const float *x, int32_t n, const int32_t *ids, const double *bias, int32_t nb) {
    int32_t best = -1;
    double bv = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        double v = (double)x[i];
        for (int32_t j = 0; j < nb; j++)
            if (ids[j] == i) { v += bias[j]; break; }
        if (isnan(v)) return -1;
        if (v > bv) { bv = v; best = i; }
    }
    return best >= 0 && isfinite(bv) ? best : -1;
}

static bool is_stop(const lkv_generate_params *p, int32_t t) {
    for (int32_t i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] == t) return true;
    return false;
}

typedef struct {
    int32_t *ids;      /* bias in backend memory (pick_greedy), or NULL */
    double *bias;
} dev_bias;

/* how the loop picks: the plain greedy rule (ch NULL) or the chain with its window */
typedef struct {
    const lkv_generate_params *p;
    dev_bias db;
    lkv_chain *ch;
    int32_t *win;      /* (n_history + n_max) the penalties' history, each decoded token appended */
    int32_t n_win;
} picker;

/* one token at sequence 0's next position, its logits left in logits_dev */
static lkv_status step(lkv_context *c, int32_t token) {
    c->logits_stay = true;
    lkv_status st = lkv_context_decode(c, &token, 1, c->seq_len[0], 1);
    c->logits_stay = false;
    return st;
}

/* the backend's pick where it has one */
static bool dev_pick(const lkv_context *c) { return c->be->pick_greedy != NULL; }

static int32_t pick_row(const picker *pk, const float *row, int32_t V, bool *drew) {
    *drew = false;
    const lkv_generate_params *p = pk->p;
    if (!pk->ch) return pick_host(row, V, p->bias_ids, p->bias, p->n_bias);
    return lkv_chain_pick(pk->ch, row, p, pk->win, pk->n_win, drew);
}

static lkv_status pick_dev(lkv_context *c, const picker *pk, int32_t *tok, bool *drew) {
    const int32_t V = c->model->hp.n_vocab;
    *drew = false;
    if (!pk->ch && dev_pick(c))
        return c->be->pick_greedy(c->b, c->logits_dev, V, pk->db.ids, pk->db.bias,
                                  pk->db.ids ? pk->p->n_bias : 0, tok);
    c->be->download(c->b, c->logits, c->logits_dev, sizeof(float) * (size_t)V);
    LKV_TRY(c->be->sync(c->b));
    *tok = pick_row(pk, c->logits, V, drew);
    return LKV_OK;
}

/* the chain's scratch (kept by the context) and window, where p needs them */
static lkv_status picker_init(lkv_context *c, const lkv_generate_params *p, picker *pk) {
    const int32_t V = c->model->hp.n_vocab;
    pk->p = p;
    if (lkv_chain_plain(p)) return LKV_OK;
    if (c->chain && lkv_chain_vocab(c->chain) != V) {
        lkv_chain_free(c->chain);
        c->chain = NULL;
    }
    if (!c->chain && !(c->chain = lkv_chain_new(V)))
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "generate: no memory for the sampler's scratch");
    pk->ch = c->chain;
    pk->win = malloc(sizeof(int32_t) * ((size_t)p->n_history + (size_t)p->n_max));
    if (!pk->win) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "generate: no memory for the penalties' history");
    if (p->n_history) memcpy(pk->win, p->history, sizeof(int32_t) * (size_t)p->n_history);
    pk->n_win = p->n_history;
    return LKV_OK;
}

lkv_status lkv_context_generate(lkv_context *c, int32_t token, const lkv_generate_params *p,
                                int32_t *out, int32_t *n_out) {
    *n_out = 0;
    if (c->dead) return lkv_fail(LKV_ERR_DEAD, "the context failed earlier (device error); free it");
    if (c->p.embeddings)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "generate: the context computes embeddings, not logits");
    if (p->n_max < 1) return lkv_fail(LKV_ERR_INVALID_ARG, "generate: n_max = %d (at least 1)", p->n_max);
    if (p->n_stop < 0 || p->n_bias < 0 || (p->n_stop && !p->stop_ids) || (p->n_bias && (!p->bias_ids || !p->bias)))
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: stop ids or bias: bad count or NULL array");
    const int32_t V = c->model->hp.n_vocab;
    for (int32_t j = 0; j < p->n_bias; j++) {
        if (p->bias_ids[j] < 0 || p->bias_ids[j] >= V)
            return lkv_fail(LKV_ERR_INVALID_ARG, "generate: bias id %d is outside [0, %d)", p->bias_ids[j], V);
        if (isnan(p->bias[j]) || p->bias[j] == INFINITY)
            return lkv_fail(LKV_ERR_INVALID_ARG, "generate: bias of id %d is %g", p->bias_ids[j], p->bias[j]);
        for (int32_t k = 0; k < j; k++)
            if (p->bias_ids[k] == p->bias_ids[j])
                return lkv_fail(LKV_ERR_INVALID_ARG, "generate: bias id %d given twice", p->bias_ids[j]);
    }
    if (token < 0 && c->n_logit_rows < 1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: no logits to pick from (decode first, or pass "
                        "the token to decode)");
    if (token >= V) return lkv_fail(LKV_ERR_INVALID_ARG, "generate: token %d is outside [0, %d)", token, V);
    LKV_TRY(lkv_chain_check(p, V));

    picker pk = {0};
    LKV_TRY(picker_init(c, p, &pk));
    if (p->n_bias > 0 && !pk.ch && dev_pick(c)) {
        pk.db.ids = c->be->alloc(c->b, sizeof(int32_t) * (size_t)p->n_bias);
        pk.db.bias = c->be->alloc(c->b, sizeof(double) * (size_t)p->n_bias);
        if (!pk.db.ids || !pk.db.bias) {
            c->be->free(c->b, pk.db.ids);
            c->be->free(c->b, pk.db.bias);
            return lkv_fail(LKV_ERR_DEVICE_MEMORY, "generate: no device memory for %d bias entries", p->n_bias);
        }
        c->be->upload(c->b, pk.db.ids, p->bias_ids, sizeof(int32_t) * (size_t)p->n_bias);
        c->be->upload(c->b, pk.db.bias, p->bias, sizeof(double) * (size_t)p->n_bias);
    }
    lkv_status st = LKV_OK;
    bool stepped = false;   /* a decode of this call left its row in logits_dev only */
    bool drew = false;
    int32_t tok;
    if (token >= 0) {
        st = step(c, token);
        stepped = st == LKV_OK;
        if (!st) st = pick_dev(c, &pk, &tok, &drew);
    } else {   /* the last decode's last row, on the host */
        tok = pick_row(&pk, c->logits + (size_t)(c->n_logit_rows - 1) * c->out_width, V, &drew);
    }
    int32_t n = 0;
    while (st == LKV_OK && tok >= 0) {
        if (p->drawn) p->drawn[n] = drew;
        out[n++] = tok;
        if (n == p->n_max || is_stop(p, tok) || c->seq_len[0] >= c->p.n_ctx) break;
        st = lkv_context_check_abort(c);
        if (!st) st = step(c, tok);
        if (st) break;
        stepped = true;
        if (pk.win) pk.win[pk.n_win++] = tok;
        st = pick_dev(c, &pk, &tok, &drew);
    }
    *n_out = n;
    if (stepped && !c->dead) {   /* the host logits: those of the last decode, as after lkv_decode */
        c->be->download(c->b, c->logits, c->logits_dev, sizeof(float) * (size_t)c->out_width);
        const lkv_status s2 = c->be->sync(c->b);
        if (s2 == LKV_OK) c->n_logit_rows = 1;
        if (!st) st = s2;
    }
    if (st == LKV_ERR_DEVICE) c->dead = true;
    c->be->free(c->b, pk.db.ids);
    c->be->free(c->b, pk.db.bias);
    free(pk.win);
    return st;
}
