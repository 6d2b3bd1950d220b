/*
 * generate.c: greedy generation inside the library (lkv_generate): decode a
 * token, pick the next one where the logits are (the backend's pick_greedy,
 * on the GPU a kernel that brings back 4 bytes), decode it, and so on, up to
 * n_max tokens or a stop id, without a return to the caller per token.
 *
 * The pick is engine/sampling.py's greedy rule bit for bit: the largest
 * (double)logit + bias, the first of equal ones; NaN, or no finite largest
 * value, ends the loop without a token (the caller's sampler then reports it).
 * Backends without pick_greedy (the CPU) have each step's row copied to the
 * host logits and picked here, by the same rule; CUDA picks on the device
 * (cuda/sample.cu; test_ops pick and tests/test_greedy_loop.py on an H100,
 * 2026-12-07) and brings back the id only.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "error.h"
#include "model_api.h"

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

/* one token at sequence 0's next position, its logits left in logits_dev */
static lkv_status step(lkv_context *c, int32_t token) {
    c->logits_stay = true;
    lkv_status st = lkv_context_decode(c, &token, 1, c->seq_len[0], 1);
    c->logits_stay = false;
    return st;
}

/* the backend's pick where it has one */
static bool dev_pick(const lkv_context *c) { return c->be->pick_greedy != NULL; }

static lkv_status pick_dev(lkv_context *c, const lkv_generate_params *p, const dev_bias *db, int32_t *tok) {
    const int32_t V = c->model->hp.n_vocab;
    if (dev_pick(c))
        return c->be->pick_greedy(c->b, c->logits_dev, V, db->ids, db->bias, db->ids ? p->n_bias : 0, tok);
    c->be->download(c->b, c->logits, c->logits_dev, sizeof(float) * (size_t)V);
    LKV_TRY(c->be->sync(c->b));
    *tok = pick_host(c->logits, V, p->bias_ids, p->bias, p->n_bias);
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

    dev_bias db = {NULL, NULL};
    if (p->n_bias > 0 && dev_pick(c)) {
        db.ids = c->be->alloc(c->b, sizeof(int32_t) * (size_t)p->n_bias);
        db.bias = c->be->alloc(c->b, sizeof(double) * (size_t)p->n_bias);
        if (!db.ids || !db.bias) {
            c->be->free(c->b, db.ids);
            c->be->free(c->b, db.bias);
            return lkv_fail(LKV_ERR_DEVICE_MEMORY, "generate: no device memory for %d bias entries", p->n_bias);
        }
        c->be->upload(c->b, db.ids, p->bias_ids, sizeof(int32_t) * (size_t)p->n_bias);
        c->be->upload(c->b, db.bias, p->bias, sizeof(double) * (size_t)p->n_bias);
    }
    lkv_status st = LKV_OK;
    bool stepped = false;   /* a decode of this call left its row in logits_dev only */
    int32_t tok;
    if (token >= 0) {
        st = step(c, token);
        stepped = st == LKV_OK;
        if (!st) st = pick_dev(c, p, &db, &tok);
    } else {   /* the last decode's last row, on the host */
        tok = pick_host(c->logits + (size_t)(c->n_logit_rows - 1) * c->out_width, V, p->bias_ids, p->bias,
                        p->n_bias);
    }
    int32_t n = 0;
    while (st == LKV_OK && tok >= 0) {
        out[n++] = tok;
        if (n == p->n_max || is_stop(p, tok) || c->seq_len[0] >= c->p.n_ctx) break;
        st = lkv_context_check_abort(c);
        if (!st) st = step(c, tok);
        if (st) break;
        stepped = true;
        st = pick_dev(c, p, &db, &tok);
    }
    *n_out = n;
    if (stepped && !c->dead) {   /* the host logits: those of the last decode, as after lkv_decode */
        c->be->download(c->b, c->logits, c->logits_dev, sizeof(float) * (size_t)c->out_width);
        const lkv_status s2 = c->be->sync(c->b);
        if (s2 == LKV_OK) c->n_logit_rows = 1;
        if (!st) st = s2;
    }
    if (st == LKV_ERR_DEVICE) c->dead = true;
    c->be->free(c->b, db.ids);
    c->be->free(c->b, db.bias);
    return st;
}
