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
    //        name        neox   qkv_b  qk_n   q_gate hybrid ffn norm              gemma  moe    shexp
    [LKV_ARCH_LLAMA]     = {"llama",     false, false, false, false, false, "ffn_norm",            false, false, false},
    [LKV_ARCH_QWEN2]     = {"qwen2",     true,  true,  false, false, false, "ffn_norm",            false, false, false},
    [LKV_ARCH_QWEN3]     = {"qwen3",     true,  false, true,  false, false, "ffn_norm",            false, false, false},
    [LKV_ARCH_QWEN35]    = {"qwen35",    true,  false, true,  true,  true,  "post_attention_norm", false, false, false},
    [LKV_ARCH_GEMMA3]    = {"gemma3",    true,  false, true,  false, false, "ffn_norm",            true,  false, false},
    [LKV_ARCH_QWEN3MOE]  = {"qwen3moe",  true,  false, true,  false, false, "ffn_norm",            false, true,  false},
    [LKV_ARCH_QWEN35MOE] = {"qwen35moe", true,  false, true,  true,  true,  "post_attention_norm", false, true,  true},
};

/* sliding-window models: layer il is local unless (il + 1) % swa_pattern == 0 */
static bool is_swa(const lkv_model_params *hp, int il) {
    return hp->swa_window > 0 && (hp->swa_pattern == 0 || (il + 1) % hp->swa_pattern != 0);
}

/* hybrids: layer il has attention (and KV) when (il + 1) % full_attn_interval == 0 */
static bool has_attention(const lkv_model_params *hp, const lkv_arch_traits *a, int il) {
    return !a->hybrid || (il + 1) % hp->full_attn_interval == 0;
}
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

/* Binds a 3-D tensor of n_mat matrices (cols, rows) each, ggml shape [cols, rows, n_mat], into
 * *w as one matrix of n_mat * rows rows (the experts stacked: moe.c views matrix e). */
static lkv_status bind3(const tensor_set *ts, const char *name, lkv_weight *w, int64_t cols,
                        int64_t rows, int64_t n_mat) {
    const lkv_tensor_desc *d = find(ts, name);
    if (d && (d->n_dims != 3 || d->ne[0] != cols || d->ne[1] != rows || d->ne[2] != n_mat))
        return lkv_fail(LKV_ERR_SHAPE, "tensor '%s' has shape [%lld, %lld, %lld] (%d dims), "
                        "expected [%lld, %lld, %lld]", name, (long long)d->ne[0],
                        (long long)(d->n_dims > 1 ? d->ne[1] : 1),
                        (long long)(d->n_dims > 2 ? d->ne[2] : 1), (int)d->n_dims,
                        (long long)cols, (long long)rows, (long long)n_mat);
    if (!d) return lkv_fail(LKV_ERR_SHAPE, "missing tensor '%s'", name);
    lkv_tensor_desc flat = *d;   /* the stacked view: [cols, n_mat * rows] */
    flat.n_dims = 2;
    flat.ne[1] = rows * n_mat;
    flat.ne[2] = flat.ne[3] = 1;
    tensor_set one = {&flat, 1};
    return bind(&one, name, w, cols, rows * n_mat, false);
}

/* The routed experts of layer `il` and, where the arch has one, its shared expert. */
static lkv_status bind_moe(const tensor_set *ts, const lkv_model_params *hp,
                           const lkv_arch_traits *a, int il, lkv_layer_weights *L) {
    char nm[96];
    const int64_t E = hp->n_embd, X = hp->n_expert, Fe = hp->n_ff_exp, Fs = hp->n_ff_shexp;
#define N(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix), nm)
    LKV_TRY(bind(ts, N("ffn_gate_inp.weight"), &L->moe_router, E, X, false));
    if (find(ts, N("ffn_gate_up_exps.weight"))) {   /* fused gate and up (llama.cpp reads both) */
        LKV_TRY(bind3(ts, nm, &L->exp_gate_up, E, 2 * Fe, X));
    } else {
        LKV_TRY(bind3(ts, N("ffn_gate_exps.weight"), &L->exp_gate, E, Fe, X));
        LKV_TRY(bind3(ts, N("ffn_up_exps.weight"), &L->exp_up, E, Fe, X));
    }
    LKV_TRY(bind3(ts, N("ffn_down_exps.weight"), &L->exp_down, Fe, E, X));
    if (!L->exp_gate_up.data && L->exp_gate.type != L->exp_up.type)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "blk.%d: ffn_gate_exps is %s but ffn_up_exps is %s; "
                        "the experts' gate and up must have one type", il,
                        lkv_type_traits(L->exp_gate.type)->name,
                        lkv_type_traits(L->exp_up.type)->name);
    if (a->shared_expert) {
        LKV_TRY(bind(ts, N("ffn_gate_inp_shexp.weight"), &L->sh_gate_inp, E, 1, false));
        LKV_TRY(bind(ts, N("ffn_gate_shexp.weight"), &L->sh_gate, E, Fs, false));
        LKV_TRY(bind(ts, N("ffn_up_shexp.weight"), &L->sh_up, E, Fs, false));
        LKV_TRY(bind(ts, N("ffn_down_shexp.weight"), &L->sh_down, Fs, E, false));
    }
#undef N
    return LKV_OK;
}

/* The attention and FFN weights of layer `il` (blk.<il>.*), or for a Gated
 * DeltaNet layer of a hybrid its mixer's weights instead of attention's. */
static lkv_status bind_layer(const tensor_set *ts, const lkv_model_params *hp,
                             const lkv_arch_traits *a, int il, bool attention,
                             lkv_layer_weights *L) {
    char nm[96];
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
#define B(field, suffix, cols, rows, opt) \
    do { snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix); \
         LKV_TRY(bind(ts, nm, &L->field, cols, rows, opt)); } while (0)
    B(attn_norm, "attn_norm.weight", E, 0, false);
    if (attention) {
        B(wq, "attn_q.weight", E, a->q_gate ? 2 * Q : Q, false);
        B(wk, "attn_k.weight", E, KV, false);
        B(wv, "attn_v.weight", E, KV, false);
        B(wo, "attn_output.weight", Q, E, false);
        B(bq, "attn_q.bias", Q, 0, !a->qkv_bias);
        B(bk, "attn_k.bias", KV, 0, !a->qkv_bias);
        B(bv, "attn_v.bias", KV, 0, !a->qkv_bias);
        B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, !a->qk_norm);
        B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, !a->qk_norm);
    } else {
        const int64_t nv = hp->ssm_n_v_heads, VD = nv * hp->ssm_head_v_dim,
                      CD = 2 * (int64_t)hp->ssm_n_k_heads * hp->ssm_head_k_dim + VD;
        B(ssm_qkv, "attn_qkv.weight", E, CD, false);
        B(ssm_z, "attn_gate.weight", E, VD, false);
        B(ssm_beta, "ssm_beta.weight", E, nv, false);
        B(ssm_alpha, "ssm_alpha.weight", E, nv, false);
        B(ssm_conv, "ssm_conv1d.weight", hp->ssm_conv_kernel, CD, false);
        B(ssm_a, "ssm_a", nv, 0, false);
        B(ssm_dt, "ssm_dt.bias", nv, 0, false);
        B(ssm_norm, "ssm_norm.weight", hp->ssm_head_v_dim, 0, false);
        B(ssm_out, "ssm_out.weight", VD, E, false);
        if (L->ssm_conv.type != LKV_TYPE_F32)
            return lkv_fail(LKV_ERR_UNSUPPORTED, "tensor 'blk.%d.ssm_conv1d.weight' is %s; the conv "
                            "taps must be f32", il, lkv_type_traits(L->ssm_conv.type)->name);
    }
    char nm_ffn[64];
    snprintf(nm_ffn, sizeof nm_ffn, "%s.weight", a->ffn_norm_name);
    B(ffn_norm, nm_ffn, E, 0, false);
    if (a->moe) return bind_moe(ts, hp, a, il, L);
    B(w_gate, "ffn_gate.weight", E, F, false);
    B(w_up, "ffn_up.weight", E, F, false);
    B(w_down, "ffn_down.weight", F, E, false);
    if (a->gemma) {   /* (qwen35's pre-FFN norm has the first name: bound once, above) */
        B(attn_post_norm, "post_attention_norm.weight", E, 0, false);
        B(ffn_post_norm, "post_ffw_norm.weight", E, 0, false);
    }
#undef B
    return LKV_OK;
}

/* MTP block i: blk.<n_layer + i>, an attention layer plus the nextn tensors. */
static lkv_status bind_nextn(const tensor_set *ts, const lkv_model_params *hp,
                             const lkv_arch_traits *a, int i, lkv_nextn_weights *N) {
    const int il = hp->n_layer + i;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    char nm[96];
    LKV_TRY(bind_layer(ts, hp, a, il, true, &N->blk));
    N->blk.kv_layer = N->blk.rs_layer = -1;
#define B(field, suffix, cols, rows, opt) \
    do { snprintf(nm, sizeof nm, "blk.%d.nextn.%s", il, suffix); \
         LKV_TRY(bind(ts, nm, &N->field, cols, rows, opt)); } while (0)
    B(eh_proj, "eh_proj.weight", 2 * E, E, false);
    B(enorm, "enorm.weight", E, 0, false);
    B(hnorm, "hnorm.weight", E, 0, false);
    B(shared_head_norm, "shared_head_norm.weight", E, 0, true);
    B(embed_tokens, "embed_tokens.weight", E, V, true);
    B(shared_head_head, "shared_head_head.weight", E, V, true);
#undef B
    return LKV_OK;
}

/* hybrid hyper-parameters; the delta rule's scratch bounds the head sizes */
static lkv_status check_hybrid(const lkv_model_params *p) {
    if (p->full_attn_interval <= 0 || p->full_attn_interval > p->n_layer)
        return lkv_fail(LKV_ERR_INVALID_ARG, "full_attn_interval %d must be in [1, n_layer=%d] (a "
                        "hybrid needs at least one full-attention layer)", p->full_attn_interval,
                        p->n_layer);
    if (p->ssm_conv_kernel < 1 || p->ssm_conv_kernel > 16)
        return lkv_fail(LKV_ERR_INVALID_ARG, "ssm_conv_kernel %d must be in [1, 16]",
                        p->ssm_conv_kernel);
    if (p->ssm_n_k_heads <= 0 || p->ssm_n_v_heads <= 0 || p->ssm_n_v_heads % p->ssm_n_k_heads)
        return lkv_fail(LKV_ERR_INVALID_ARG, "delta-rule heads: %d value heads is not a positive "
                        "multiple of %d key heads", p->ssm_n_v_heads, p->ssm_n_k_heads);
    if (p->ssm_head_k_dim <= 0 || p->ssm_head_k_dim > 512 || p->ssm_head_v_dim <= 0 ||
        p->ssm_head_v_dim > 512)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "delta-rule head sizes %d (key) and %d (value) must be "
                        "in [1, 512]", p->ssm_head_k_dim, p->ssm_head_v_dim);
    return LKV_OK;
}

/* mixture-of-experts hyper-parameters */
static lkv_status check_moe(const lkv_model_params *p, const lkv_arch_traits *a) {
    if (p->n_expert < 1 || p->n_expert > LKV_MOE_MAX_EXPERTS)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_expert %d must be in [1, %d]", p->n_expert,
                        LKV_MOE_MAX_EXPERTS);
    if (p->n_expert_used < 1 || p->n_expert_used > p->n_expert || p->n_expert_used > LKV_MOE_MAX_USED)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_expert_used %d must be in [1, min(n_expert=%d, %d)]",
                        p->n_expert_used, p->n_expert, LKV_MOE_MAX_USED);
    if (p->n_ff_exp < 1 || p->n_ff_exp > p->n_ff)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_ff_exp %d must be in [1, n_ff=%d]", p->n_ff_exp,
                        p->n_ff);
    if (a->shared_expert ? p->n_ff_shexp < 1 || p->n_ff_shexp > p->n_ff : p->n_ff_shexp != 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_ff_shexp %d must be %s", p->n_ff_shexp,
                        a->shared_expert ? "in [1, n_ff]" : "0 (this architecture has no shared "
                        "expert)");
    if (p->n_cpu_moe < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_cpu_moe must be >= 0 (got %d)", p->n_cpu_moe);
    if (p->expert_weights_norm != 0 && p->expert_weights_norm != 1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "expert_weights_norm must be 0 or 1 (got %d)",
                        p->expert_weights_norm);
    if (!(p->expert_weights_scale >= 0.0f) || p->expert_weights_scale > 1e30f)
        return lkv_fail(LKV_ERR_INVALID_ARG, "expert_weights_scale must be finite and >= 0 (0: 1)");
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
    if (p->n_nextn < 0 || p->n_nextn > 8)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_nextn %d must be in [0, 8]", p->n_nextn);
    if (!(p->attn_scale >= 0.0f) || !(p->rope_freq_base_swa >= 0.0f) ||
        !(p->logit_softcap >= 0.0f) || p->attn_scale > 1e30f || p->logit_softcap > 1e30f ||
        p->rope_freq_base_swa > 1e30f)
        return lkv_fail(LKV_ERR_INVALID_ARG, "attn_scale, rope_freq_base_swa and logit_softcap "
                        "must be finite and >= 0 (0: unused)");
    if (p->swa_window < 0 || p->swa_pattern < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "swa_window %d and swa_pattern %d must be >= 0",
                        p->swa_window, p->swa_pattern);
    if (ARCHS[p->arch].moe) LKV_TRY(check_moe(p, &ARCHS[p->arch]));
    if (ARCHS[p->arch].hybrid) return check_hybrid(p);
    return LKV_OK;
}

static void add_bytes(lkv_weight *w, void *ud) {
    if (w->data) *(int64_t *)ud += (int64_t)(w->row_bytes * w->rows);
}

/* the bytes a device backend leaves in host memory (n_cpu_moe's experts) */
static void add_host_bytes(lkv_weight *w, void *ud) {
    if (w->data && w->host) *(int64_t *)ud += (int64_t)(w->row_bytes * w->rows);
}

void lkv_model_foreach_weight(struct lkv_model *m, void (*fn)(lkv_weight *w, void *ud), void *ud) {
    fn(&m->tok_embd, ud);
    fn(&m->output_norm, ud);
    if (!m->tied_output) fn(&m->output, ud);
    fn(&m->rope_freqs, ud);
    for (int i = 0; i < m->hp.n_layer + m->hp.n_nextn; i++) {
        lkv_layer_weights *L = i < m->hp.n_layer ? &m->layers[i] : &m->nextn[i - m->hp.n_layer].blk;
        lkv_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk,
                            &L->bv, &L->q_norm, &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up,
                            &L->w_down, &L->attn_post_norm, &L->ffn_post_norm, &L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha,
                            &L->ssm_conv, &L->ssm_a, &L->ssm_dt, &L->ssm_norm, &L->ssm_out,
                            &L->moe_router, &L->exp_gate, &L->exp_up, &L->exp_down,
                            &L->exp_gate_up,
                            &L->sh_gate_inp, &L->sh_gate, &L->sh_up, &L->sh_down};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) fn(ws[k], ud);
    }
    for (int i = 0; i < m->hp.n_nextn; i++) {
        lkv_nextn_weights *N = &m->nextn[i];
        lkv_weight *ws[] = {&N->eh_proj, &N->enorm, &N->hnorm, &N->shared_head_norm,
                            &N->embed_tokens, &N->shared_head_head};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) fn(ws[k], ud);
    }
}

lkv_status lkv_model_backend(const lkv_model_params *p, const lkv_backend **out) {
    LKV_TRY(check_params(p));
    const lkv_backend *be = &lkv_backend_cpu;
    if (p->device == LKV_DEVICE_CUDA) {
#ifdef LKV_HAVE_CUDA
        be = &lkv_backend_cuda;
#else
        return lkv_fail(LKV_ERR_UNSUPPORTED, "this build of pyllamakv has no CUDA backend");
#endif
    }
    if (ARCHS[p->arch].hybrid && !be->delta_rule)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "the %s backend has no Gated DeltaNet layers yet, so "
                        "it cannot run %s models; use device='cpu'", be->name, ARCHS[p->arch].name);
    const bool gemma_ops = ARCHS[p->arch].gemma || p->swa_window > 0 || p->logit_softcap > 0.0f;
    if (gemma_ops && !be->geglu)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "the %s backend has no GeGLU, sliding-window "
                        "attention or logit softcapping yet, so it cannot run %s models; use "
                        "device='cpu'", be->name, ARCHS[p->arch].name);
    if (ARCHS[p->arch].moe && !be->moe_topk)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "the %s backend has no mixture-of-experts layers "
                        "yet, so it cannot run %s models; use device='cpu'", be->name,
                        ARCHS[p->arch].name);
    *out = be;
    return LKV_OK;
}

lkv_status lkv_model_build(const lkv_model_params *p, const lkv_tensor_desc *tensors,
                           int32_t n_tensors, lkv_model **out) {
    const lkv_backend *be = NULL;
    LKV_TRY(lkv_model_backend(p, &be));
    lkv_model *m = calloc(1, sizeof *m);
    if (!m) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the model");
    m->layers = calloc((size_t)p->n_layer, sizeof *m->layers);
    m->nextn = p->n_nextn ? calloc((size_t)p->n_nextn, sizeof *m->nextn) : NULL;
    if (!m->layers || (p->n_nextn && !m->nextn)) {
        free(m->layers); free(m->nextn); free(m);
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the model");
    }
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
    for (int i = 0; i < p->n_layer; i++) {
        lkv_layer_weights *L = &m->layers[i];
        const bool attn = has_attention(p, m->arch, i);
        if ((st = bind_layer(&ts, p, m->arch, i, attn, L))) goto fail;
        L->kv_layer = attn ? m->n_layer_kv++ : -1;
        L->swa = attn && is_swa(p, i);
        L->rs_layer = attn ? -1 : m->n_layer_rs++;
        if (i < p->n_cpu_moe)   /* its routed experts stay in host memory (moe.h) */
            L->exp_gate.host = L->exp_up.host = L->exp_down.host = L->exp_gate_up.host = true;
    }
    for (int i = 0; i < p->n_nextn; i++)
        if ((st = bind_nextn(&ts, p, m->arch, i, &m->nextn[i]))) goto fail;
    lkv_model_foreach_weight(m, add_bytes, &m->weight_bytes);
    int64_t host_bytes = 0;   /* on a device backend, not held on the device */
    if (p->device != LKV_DEVICE_CPU) lkv_model_foreach_weight(m, add_host_bytes, &host_bytes);
    m->weight_bytes -= host_bytes;
    m->be = be;
    if ((st = be->model_init(m))) { m->be = NULL; goto fail; }
    *out = m;
    return LKV_OK;
fail:
    free(m->layers);
    free(m->nextn);
    free(m);
    return st;
}

void lkv_model_destroy(lkv_model *m) {
    if (!m) return;
    if (m->be) m->be->model_free(m);
    free(m->layers);
    free(m->nextn);
    free(m);
}
