/*
 * model.c: building an lkv_model from hyper-parameters and tensor
 * descriptions: the architecture table, name lookup, and the type and shape
 * check of every tensor the forward pass will touch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "model_api.h"
#include "quant/types.h"

// ------------------------------------------------------------------ architectures

static const lkv_arch_traits ARCHS[] = {
    [LKV_ARCH_LLAMA] = {"llama", false, false, false},
    [LKV_ARCH_QWEN2] = {"qwen2", true, true, false},
    [LKV_ARCH_QWEN3] = {"qwen3", true, false, true},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof ARCHS[0]))

// ------------------------------------------------------------------ tensor lookup

typedef struct {
    const lkv_tensor_desc *t;
    int32_t n;
} tensor_set;

static const lkv_tensor_desc *find(const tensor_set *ts, const char *name) {
    for (int i = 0; i < ts->n; i++)
        if (ts->t[i].name && strcmp(ts->t[i].name, name) == 0) return &ts->t[i];
    return NULL;
}

/* Binds `name` into *w, checking shape (cols, rows) and type. rows == 0 means
 * a vector of `cols` f32 values. Absent and optional: *w stays zeroed. */
static lkv_status bind(const tensor_set *ts, const char *name, lkv_weight *w, int64_t cols,
                       int64_t rows, bool optional) {
    memset(w, 0, sizeof *w);
    const lkv_tensor_desc *d = find(ts, name);
    if (!d) {
        if (optional) return LKV_OK;
        return lkv_fail(LKV_ERR_SHAPE, "missing tensor '%s'", name);
    }
    const lkv_traits *t = lkv_type_traits(d->type);
    if (!t || !t->is_weight)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "tensor '%s' has type %s (id %d), which is not a "
                        "supported weight type", name, t ? t->name : "unknown", (int)d->type);
    bool vec = rows == 0;
    int64_t ne1 = d->n_dims > 1 ? d->ne[1] : 1;
    bool ok = d->ne[0] == cols && (vec ? d->n_dims == 1 || ne1 == 1 : ne1 == rows);
    for (int k = 2; k < d->n_dims && k < 4; k++) ok = ok && d->ne[k] == 1;
    if (!ok)
        return lkv_fail(LKV_ERR_SHAPE, "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                        name, (long long)d->ne[0], (long long)ne1, (long long)cols,
                        (long long)(vec ? 1 : rows));
    if (vec && d->type != LKV_TYPE_F32)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "tensor '%s' is %s; norm and bias vectors must be f32",
                        name, t->name);
    if (cols % t->block_size)
        return lkv_fail(LKV_ERR_SHAPE, "tensor '%s': %lld columns is not a multiple of %s's "
                        "block of %d", name, (long long)cols, t->name, (int)t->block_size);
    w->type = d->type;
    w->rows = vec ? 1 : rows;
    w->cols = cols;
    w->row_bytes = (size_t)lkv_type_row_bytes(t, cols);
    if (d->nbytes < w->row_bytes * (uint64_t)w->rows || !d->data)
        return lkv_fail(LKV_ERR_SHAPE, "tensor '%s' holds %llu bytes, its shape needs %llu",
                        name, (unsigned long long)d->nbytes,
                        (unsigned long long)(w->row_bytes * (uint64_t)w->rows));
    w->data = d->data;
    return LKV_OK;
}

static lkv_status bind_layer(const tensor_set *ts, const lkv_model_params *hp,
                             const lkv_arch_traits *a, int il, lkv_layer_weights *L) {
    char nm[96];
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
#define B(field, suffix, cols, rows, opt) \
    do { snprintf(nm, sizeof nm, "blk.%d." suffix, il); \
         LKV_TRY(bind(ts, nm, &L->field, cols, rows, opt)); } while (0)
    B(attn_norm, "attn_norm.weight", E, 0, false);
    B(wq, "attn_q.weight", E, Q, false);
    B(wk, "attn_k.weight", E, KV, false);
    B(wv, "attn_v.weight", E, KV, false);
    B(wo, "attn_output.weight", Q, E, false);
    B(bq, "attn_q.bias", Q, 0, !a->qkv_bias);
    B(bk, "attn_k.bias", KV, 0, !a->qkv_bias);
    B(bv, "attn_v.bias", KV, 0, !a->qkv_bias);
    B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, !a->qk_norm);
    B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, !a->qk_norm);
    B(ffn_norm, "ffn_norm.weight", E, 0, false);
    B(w_gate, "ffn_gate.weight", E, F, false);
    B(w_up, "ffn_up.weight", E, F, false);
    B(w_down, "ffn_down.weight", F, E, false);
#undef B
    return LKV_OK;
}

// ------------------------------------------------------------------ create / free

static lkv_status check_params(const lkv_model_params *p) {
    if (p->arch < 0 || p->arch >= N_ARCHS)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "unknown architecture id %d", (int)p->arch);
    if (p->n_vocab <= 0 || p->n_embd <= 0 || p->n_layer <= 0 || p->n_head <= 0 ||
        p->n_head_kv <= 0 || p->head_dim <= 0 || p->n_ff <= 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "model sizes must be positive (n_vocab %d, n_embd %d, "
                        "n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d)",
                        p->n_vocab, p->n_embd, p->n_layer, p->n_head, p->n_head_kv, p->head_dim,
                        p->n_ff);
    if (p->n_head % p->n_head_kv)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_head %d is not a multiple of n_head_kv %d",
                        p->n_head, p->n_head_kv);
    if (p->head_dim % 32 || p->head_dim > 1024)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "head_dim %d unsupported (a multiple of 32, <= 1024)",
                        p->head_dim);
    if (p->rope_dim <= 0 || p->rope_dim > p->head_dim || p->rope_dim % 2)
        return lkv_fail(LKV_ERR_INVALID_ARG, "rope_dim %d must be even and in (0, head_dim=%d]",
                        p->rope_dim, p->head_dim);
    if (!(p->rms_eps > 0.0f) || !(p->rope_freq_base > 0.0f) || !(p->rope_freq_scale > 0.0f))
        return lkv_fail(LKV_ERR_INVALID_ARG, "rms_eps, rope_freq_base and rope_freq_scale must be > 0");
    if (p->device != LKV_DEVICE_CPU && p->device != LKV_DEVICE_CUDA)
        return lkv_fail(LKV_ERR_INVALID_ARG, "unknown device id %d", (int)p->device);
    return LKV_OK;
}

static void add_bytes(lkv_weight *w, void *ud) {
    if (w->data) *(int64_t *)ud += (int64_t)(w->row_bytes * w->rows);
}

void lkv_model_foreach_weight(struct lkv_model *m, void (*fn)(lkv_weight *w, void *ud), void *ud) {
    fn(&m->tok_embd, ud);
    fn(&m->output_norm, ud);
    if (!m->tied_output) fn(&m->output, ud);
    fn(&m->rope_freqs, ud);
    for (int i = 0; i < m->hp.n_layer; i++) {
        lkv_layer_weights *L = &m->layers[i];
        lkv_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk,
                            &L->bv, &L->q_norm, &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up,
                            &L->w_down};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) fn(ws[k], ud);
    }
}

lkv_status lkv_model_build(const lkv_model_params *p, const lkv_tensor_desc *tensors,
                           int32_t n_tensors, lkv_model **out) {
    LKV_TRY(check_params(p));
    const lkv_backend *be = &lkv_backend_cpu;
    if (p->device == LKV_DEVICE_CUDA) {
#ifdef LKV_HAVE_CUDA
        be = &lkv_backend_cuda;
#else
        return lkv_fail(LKV_ERR_UNSUPPORTED, "this build of pyllamakv has no CUDA backend");
#endif
    }
    lkv_model *m = calloc(1, sizeof *m);
    if (!m) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the model");
    m->layers = calloc((size_t)p->n_layer, sizeof *m->layers);
    if (!m->layers) { free(m); return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the model"); }
    m->hp = *p;
    m->arch = &ARCHS[p->arch];
    tensor_set ts = {tensors, n_tensors};
    lkv_status st;
    if ((st = bind(&ts, "token_embd.weight", &m->tok_embd, p->n_embd, p->n_vocab, false)) ||
        (st = bind(&ts, "output_norm.weight", &m->output_norm, p->n_embd, 0, false)) ||
        (st = bind(&ts, "output.weight", &m->output, p->n_embd, p->n_vocab, true)) ||
        (st = bind(&ts, "rope_freqs.weight", &m->rope_freqs, p->rope_dim / 2, 0, true)))
        goto fail;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->tied_output = true;
    }
    for (int i = 0; i < p->n_layer; i++)
        if ((st = bind_layer(&ts, p, m->arch, i, &m->layers[i]))) goto fail;
    lkv_model_foreach_weight(m, add_bytes, &m->weight_bytes);
    m->be = be;
    if ((st = be->model_init(m))) { m->be = NULL; goto fail; }
    *out = m;
    return LKV_OK;
fail:
    free(m->layers);
    free(m);
    return st;
}

void lkv_model_destroy(lkv_model *m) {
    if (!m) return;
    if (m->be) m->be->model_free(m);
    free(m->layers);
    free(m);
}
