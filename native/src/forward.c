/*
 * forward.c: one transformer step over a micro-batch, through the backend's
 * op table. The architecture table (model.h) supplies the differences:
 * q/k/v biases (qwen2), per-head q/k rms norms (qwen3), the rope style, and
 * for hybrids (qwen35) the two kinds of layer and the attention's output gate.
 *
 *   x = embed(tokens)
 *   per layer:  h = rmsnorm(x), then one of the two mixers into o:
 *     attention:  q[,gate],k,v = h @ Wq,Wk,Wv (+b) ; [qk norm] ; rope(q,k)
 *                 K/V rows -> cache (converted to the KV types)
 *                 a = attention(q, cache) [* sigmoid(gate)] ; o = a @ Wo
 *     DeltaNet:   qkv, z, b, alpha = h @ Wqkv, Wz, Wb, Wa ; qkv = silu(conv(qkv))
 *                 y = delta_rule(q, k, v, b, alpha ; state) ; o = gnorm(y, z) @ Wout
 *               x += o ; h = rmsnorm(x) ; x += (silu(h @ Wg) * (h @ Wu)) @ Wd
 *   logits = rmsnorm(x[rows wanted]) @ Wout
 * With an MTP block (mtp.c) each micro-batch then also writes that block's K/V.
 * A residual add and the rmsnorm after it go to the backend as one op where
 * it has one (add_rmsnorm), so a layer starts with h already normalised.
 */
#include <math.h>

#include "context.h"
#include "error.h"
#include "moe.h"
#include "mtp.h"

/* q, k, v of an attention layer into c->q, c->k, c->v (the K/V rows into
 * the cache). With a q gate the projection is (n, n_head, [q | gate]): the
 * gates go to c->gate. */
static void layer_attention(lkv_context *c, const lkv_layer_weights *L, const lkv_ubatch *ub,
                            lkv_kv *own) {
    const lkv_backend *be = c->be;
    const lkv_model *m = c->model;
    const lkv_model_params *hp = &m->hp;
    const int n = ub->n;
    const int hd = hp->head_dim, nq = hp->n_head * hd, nkv = hp->n_head_kv * hd;

    float *outs[3] = {m->arch->q_gate ? c->qg : c->q, c->k, c->v};
    const lkv_weight *ws[3] = {&L->wq, &L->wk, &L->wv};
    be->matmul(c->b, outs, c->h, ws, 3, n);
    if (m->arch->q_gate) be->split_rows(c->b, c->q, c->gate, c->qg, n * hp->n_head, hd);
    if (m->arch->qkv_bias) {
        be->add_bias(c->b, c->q, &L->bq, n, nq);
        be->add_bias(c->b, c->k, &L->bk, n, nkv);
        be->add_bias(c->b, c->v, &L->bv, n, nkv);
    }
    if (m->arch->qk_norm) {
        be->rmsnorm(c->b, c->q, c->q, &L->q_norm, n * hp->n_head, hd, hp->rms_eps);
        be->rmsnorm(c->b, c->k, c->k, &L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
    }
    lkv_rope_desc rq = c->rope, rk = c->rope;
    if (L->swa && hp->rope_freq_base_swa > 0.0f) {   /* local layers: their own base, scale 1 */
        rq.freq_base = rk.freq_base = hp->rope_freq_base_swa;
        rq.freq_scale = rk.freq_scale = 1.0f;
    }
    rq.n_head = hp->n_head;
    rk.n_head = hp->n_head_kv;
    /* rope and the K/V rows: several sequences' runs (at most LKV_ROWS_MAX
     * tokens) in one op where the backend has it, else per sequence, each at
     * its own positions into its own cache */
    int runs = be->rope_store_rows && ub->n_groups > 1 && n <= LKV_ROWS_MAX;
    for (int32_t g = 0, r = 0; runs && g < ub->n_groups; r += ub->groups[g++].n)
        runs = ub->groups[g].row0 == r;   /* the runs' rows in order, as the op reads them */
    int32_t pos0[LKV_ROWS_MAX], len[LKV_ROWS_MAX];
    void *kd[LKV_ROWS_MAX], *vd[LKV_ROWS_MAX];
    for (int32_t g = 0; runs && g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        pos0[g] = gr->pos0;
        len[g] = gr->n;
        lkv_kv_batch_rows(own ? own : lkv_kvset_seq(c->kvs, gr->seq), L->kv_layer, &kd[g], &vd[g]);
    }
    if (runs && be->rope_store_rows(c->b, c->q, c->k, c->v, ub->n_groups, pos0, len, &rq, &rk, kd, vd,
                                    c->p.type_k, c->p.type_v))
        return;
    for (int32_t g = 0; g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        float *q = c->q + (size_t)gr->row0 * nq, *k = c->k + (size_t)gr->row0 * nkv;
        const float *v = c->v + (size_t)gr->row0 * nkv;
        void *kdst, *vdst;
        if (runs) {
            kdst = kd[g];
            vdst = vd[g];
        } else {
            lkv_kv_batch_rows(own ? own : lkv_kvset_seq(c->kvs, gr->seq), L->kv_layer, &kdst, &vdst);
        }
        if (be->rope_store && be->rope_store(c->b, q, k, v, gr->n, gr->pos0, &rq, &rk, kdst,
                                             c->p.type_k, vdst, c->p.type_v))
            continue;
        be->rope(c->b, q, gr->n, gr->pos0, &rq);
        be->rope(c->b, k, gr->n, gr->pos0, &rk);
        be->to_type(c->b, kdst, c->p.type_k, k, gr->n, nkv);
        be->to_type(c->b, vdst, c->p.type_v, v, gr->n, nkv);
    }
}

/* several sequences' decode rows (at most LKV_ROWS_MAX, 8 or fewer per
 * sequence, every cache all resident) in one backend op (backend.h
 * attn_rows, the same bits as one call per sequence); 0 where it does not apply */
static int attention_rows(lkv_context *c, const lkv_layer_weights *L, const lkv_ubatch *ub) {
    const lkv_backend *be = c->be;
    if (!be->attn_rows || ub->n_groups < 2 || ub->n > LKV_ROWS_MAX) return 0;
    int32_t pos[LKV_ROWS_MAX];
    const void *k[LKV_ROWS_MAX], *v[LKV_ROWS_MAX];
    int32_t r = 0;
    for (int32_t g = 0; g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        const void *kp, *vp;
        if (gr->n > 8 || gr->row0 != r ||
            !lkv_kv_planes(lkv_kvset_seq(c->kvs, gr->seq), L->kv_layer, &kp, &vp))
            return 0;
        for (int32_t i = 0; i < gr->n; i++, r++) {
            pos[r] = gr->pos0 + i;
            k[r] = kp;
            v[r] = vp;
        }
    }
    return be->attn_rows(c->b, c->h, c->attn_st, c->q, &c->geo, r, pos, k, v);
}

/* the attention mixer: c->o (n, n_embd) from h; attention runs per
 * sequence over its own cache (or over `own`), the projections over all rows at once */
static lkv_status mixer_attention(lkv_context *c, const lkv_layer_weights *L, const lkv_ubatch *ub,
                                  lkv_kv *own) {
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    const int n = ub->n, nq = hp->n_head * hp->head_dim;
    layer_attention(c, L, ub, own);
    lkv_attn_desc geo = c->geo;
    geo.window = L->swa ? hp->swa_window : 0;
    const int batched = !own && !L->swa && attention_rows(c, L, ub);
    for (int32_t g = 0; !batched && g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        void *st = (char *)c->attn_st + be->attn_state_bytes(gr->row0, hp->n_head, hp->head_dim);
        LKV_TRY(lkv_kv_attend(own ? own : lkv_kvset_seq(c->kvs, gr->seq), L->kv_layer,
                              c->q + (size_t)gr->row0 * nq, st, c->h + (size_t)gr->row0 * nq,
                              &geo));
    }
    if (c->model->arch->q_gate)
        be->sigmoid_mul(c->b, c->h, c->gate, (int64_t)n * hp->n_head * hp->head_dim);
    float *o1[1] = {c->o};
    const lkv_weight *wo[1] = {&L->wo};
    be->matmul(c->b, o1, c->h, wo, 1, n);
    if (L->attn_post_norm.data)   /* gemma: the output normed before the residual add */
        be->rmsnorm(c->b, c->o, c->o, &L->attn_post_norm, n, hp->n_embd, hp->rms_eps);
    return LKV_OK;
}

/* the Gated DeltaNet mixer: c->o (n, n_embd) from h, through this layer's
 * recurrent state: qkv -> conv + silu -> delta rule -> gated norm -> ssm_out;
 * the conv and the delta rule run per sequence (each run of the micro-batch
 * through its own sequence's state), the projections on all rows at once */
static void mixer_delta(lkv_context *c, const lkv_layer_weights *L, const lkv_ubatch *ub) {
    const int n = ub->n;
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    const lkv_delta_desc *d = &c->delta;
    float *qz[2] = {c->rs_qkv, c->rs_z};
    const lkv_weight *wqz[2] = {&L->ssm_qkv, &L->ssm_z};
    be->matmul(c->b, qz, c->h, wqz, 2, n);
    float *ba[2] = {c->rs_beta, c->rs_alpha};
    const lkv_weight *wba[2] = {&L->ssm_beta, &L->ssm_alpha};
    be->matmul(c->b, ba, c->h, wba, 2, n);
    const size_t CD = (size_t)d->stride, VD = (size_t)d->n_v_heads * d->head_v_dim,
                 nv = (size_t)d->n_v_heads;
    for (int32_t g = 0; g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        lkv_recur *rs = c->rs_seq ? c->rs_seq[gr->seq] : c->rs;
        const size_t r = (size_t)gr->row0;
        be->ssm_conv(c->b, c->rs_conv + r * CD, c->rs_qkv + r * CD,
                     lkv_recur_conv(rs, L->rs_layer), &L->ssm_conv, gr->n, d->stride);
        be->delta_rule(c->b, c->rs_out + r * VD, c->rs_conv + r * CD, c->rs_beta + r * nv,
                       c->rs_alpha + r * nv, &L->ssm_a, &L->ssm_dt,
                       lkv_recur_delta(rs, L->rs_layer), d, gr->n);
    }
    be->rmsnorm_gated(c->b, c->rs_out, c->rs_out, &L->ssm_norm, c->rs_z, n * d->n_v_heads,
                      d->head_v_dim, hp->rms_eps);
    float *o1[1] = {c->o};
    const lkv_weight *wo[1] = {&L->ssm_out};
    be->matmul(c->b, o1, c->rs_out, wo, 1, n);
}

/* x += y; h = rmsnorm(x) * w: fused where the backend has it */
static void add_norm(lkv_context *c, float *y, const lkv_weight *w, int n) {
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    if (be->add_rmsnorm) {
        be->add_rmsnorm(c->b, c->x, y, c->h, w, n, hp->n_embd, hp->rms_eps);
    } else {
        be->add(c->b, c->x, y, (int64_t)n * hp->n_embd);
        be->rmsnorm(c->b, c->h, c->x, w, n, hp->n_embd, hp->rms_eps);
    }
}

/* the dense FFN: c->o (n, n_embd) from h */
static void ffn_dense(lkv_context *c, const lkv_layer_weights *L, int n) {
    const lkv_backend *be = c->be;
    const int64_t nf = (int64_t)n * c->model->hp.n_ff;
    const bool gemma = c->model->arch->gemma;
    if (gemma || !be->matmul_swiglu ||
        !be->matmul_swiglu(c->b, c->ffn_g, c->h, &L->w_gate, &L->w_up, n)) {
        float *gu[2] = {c->ffn_g, c->ffn_u};
        const lkv_weight *wgu[2] = {&L->w_gate, &L->w_up};
        be->matmul(c->b, gu, c->h, wgu, 2, n);
        if (gemma) be->geglu(c->b, c->ffn_g, c->ffn_g, c->ffn_u, nf);
        else be->swiglu(c->b, c->ffn_g, c->ffn_g, c->ffn_u, nf);
    }
    float *o1[1] = {c->o};
    const lkv_weight *wd[1] = {&L->w_down};
    be->matmul(c->b, o1, c->ffn_g, wd, 1, n);
}

/* One block L. On entry h = rmsnorm(x) * L's attn_norm; on exit x holds the
 * block's output and h = rmsnorm(x) * next_norm (next_norm NULL: h is
 * scratch). own: the cache of a block outside the trunk (the MTP block,
 * mtp.c), NULL for the sequences' caches; kv_only: stop once the K/V rows are
 * written (x and h are then unchanged). */
lkv_status lkv_forward_block(lkv_context *c, const lkv_layer_weights *L, const lkv_ubatch *ub,
                             lkv_kv *own, const lkv_weight *next_norm, bool kv_only) {
    const int n = ub->n;
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    if (kv_only) {
        layer_attention(c, L, ub, own);
        return LKV_OK;
    }
    if (L->kv_layer >= 0) LKV_TRY(mixer_attention(c, L, ub, own));
    else mixer_delta(c, L, ub);
    add_norm(c, c->o, &L->ffn_norm, n);
    if (c->model->arch->moe) LKV_TRY(lkv_moe_ffn(c, L, n));   /* moe.c: routed experts */
    else ffn_dense(c, L, n);
    if (L->ffn_post_norm.data)
        be->rmsnorm(c->b, c->o, c->o, &L->ffn_post_norm, n, hp->n_embd, hp->rms_eps);
    if (next_norm) add_norm(c, c->o, next_norm, n);
    else be->add(c->b, c->x, c->o, (int64_t)n * hp->n_embd);
    return LKV_OK;
}

static lkv_status layer(lkv_context *c, int il, const lkv_ubatch *ub) {
    const lkv_model *m = c->model;
    return lkv_forward_block(c, &m->layers[il], ub, NULL,
                             il + 1 < m->hp.n_layer ? &m->layers[il + 1].attn_norm : NULL, false);
}

/* the wanted rows' outputs, packed in row order: final norm and output
 * matmul (not downloaded); with embeddings the normed rows themselves */
static void output_head(lkv_context *c, const lkv_ubatch *ub) {
    const lkv_model *m = c->model;
    const lkv_model_params *hp = &m->hp;
    const int32_t E = hp->n_embd;
    float *out = lkv_logits_dev(c, ub->n_want);
    float *normed = c->p.embeddings ? out : c->h;
    int32_t k = 0;
    for (int32_t r = 0; r < ub->n;) {   /* one rmsnorm per run of wanted rows */
        if (!ub->want[r]) { r++; continue; }
        int32_t e = r;
        while (e < ub->n && ub->want[e]) e++;
        c->be->rmsnorm(c->b, normed + (size_t)k * E, c->x + (size_t)r * E, &m->output_norm,
                       e - r, E, hp->rms_eps);
        k += e - r;
        r = e;
    }
    if (c->p.embeddings) return;
    float *lo[1] = {out};
    const lkv_weight *wout[1] = {&m->output};
    c->be->matmul(c->b, lo, c->h, wout, 1, ub->n_want);
    if (hp->logit_softcap > 0.0f)
        c->be->softcap(c->b, out, hp->logit_softcap, (int64_t)ub->n_want * hp->n_vocab);
}

/* Decode steps of an all-resident cache go through the backend's step graph:
 * they differ only by tokens and position as long as the sequence, the token
 * count, the logits rows (a suffix) and the number of attention chunks stay
 * the same (the key). One sequence per step only. */
static int graph_key(const lkv_context *c, const lkv_ubatch *ub, uint64_t *key) {
    const int32_t n = ub->n, logit_lo = n - ub->n_want;
    if (!c->be->step_begin || ub->n_groups != 1 || n > 8 || ub->n_want == 0) return 0;
    if (c->model->arch->moe) return 0;   /* moe.c syncs mid-step (the picks go to the host) */
    const lkv_group *g = &ub->groups[0];
    if (lkv_kv_streaming(lkv_kvset_seq(c->kvs, g->seq))) return 0;
    for (int32_t r = logit_lo; r < n; r++)
        if (!ub->want[r]) return 0;
    const uint64_t chunks = (uint64_t)((g->pos0 + n - 1) / c->p.kv_chunk + 1);
    *key = (uint64_t)n | (uint64_t)logit_lo << 8 | chunks << 16 | (uint64_t)g->seq << 48;
    return 1;
}

/* logits_out NULL: the rows stay in backend memory (generate.c picks there; a
 * device error surfaces at its next wait) */
static lkv_status download_logits(lkv_context *c, int32_t nl, float *logits_out) {
    if (!logits_out) return LKV_OK;
    if (nl > 0)
        c->be->download(c->b, logits_out, lkv_logits_dev(c, nl),
                        sizeof(float) * (size_t)nl * c->out_width);
    return c->be->sync(c->b);
}

/* may_abort: between layers, stop when the abort flag is set (not while a
 * step graph is being captured, nor for decode steps, which are short) */
static lkv_status run_layers(lkv_context *c, const lkv_ubatch *ub, bool may_abort) {
    const lkv_model_params *hp = &c->model->hp;
    c->be->get_rows(c->b, c->x, &c->model->tok_embd, ub->tokens, ub->n);
    if (c->model->arch->gemma)   /* gemma: embeddings times sqrt(n_embd) */
        c->be->scale(c->b, c->x, sqrtf((float)hp->n_embd), (int64_t)ub->n * hp->n_embd);
    c->be->rmsnorm(c->b, c->h, c->x, &c->model->layers[0].attn_norm, ub->n, hp->n_embd,
                   hp->rms_eps);
    for (int il = 0; il < c->model->hp.n_layer; il++) {
        if (may_abort && il) LKV_TRY(lkv_context_check_abort(c));
        LKV_TRY(layer(c, il, ub));
    }
    return LKV_OK;
}

static lkv_status steps_end(lkv_context *c, const lkv_ubatch *ub) {
    for (int32_t g = 0; g < ub->n_groups; g++)
        LKV_TRY(lkv_kv_step_end(lkv_kvset_seq(c->kvs, ub->groups[g].seq)));
    return LKV_OK;
}

lkv_status lkv_forward(lkv_context *c, const lkv_ubatch *ub, float *logits_out) {
    const lkv_backend *be = c->be;
    for (int32_t g = 0; g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        LKV_TRY(lkv_kv_step_begin(lkv_kvset_seq(c->kvs, gr->seq), gr->pos0, gr->n));
    }
    uint64_t key = 0;
    if (graph_key(c, ub, &key)) {
        int ran = be->step_begin(c->b, key, ub->tokens, ub->n, ub->groups[0].pos0);  /* 1: replayed */
        if (!ran) {
            lkv_status st = run_layers(c, ub, false);
            if (st == LKV_OK) output_head(c, ub);
            /* always end the capture; -1: nothing ran, run the step directly */
            const int ended = be->step_end(c->b);
            LKV_TRY(st);
            ran = ended == 0;
        }
        if (ran) {
            LKV_TRY(steps_end(c, ub));
            if (c->mtp) LKV_TRY(lkv_mtp_after_step(c, ub));   /* mtp.c: the MTP block's K/V */
            return download_logits(c, ub->n_want, logits_out);
        }
    }
    LKV_TRY(run_layers(c, ub, ub->n > 8));
    LKV_TRY(steps_end(c, ub));
    if (ub->n_want > 0) output_head(c, ub);
    if (c->mtp) LKV_TRY(lkv_mtp_after_step(c, ub));
    return download_logits(c, ub->n_want, logits_out);
}
