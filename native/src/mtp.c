/*
 * mtp.c: the MTP (nextn) block beside the trunk: its K/V written after every
 * trunk micro-batch, and greedy drafts from it (what it computes: mtp.h).
 *
 * Hidden states kept: the trunk's normed final rows of the last micro-batch,
 * hid row r at position hid_pos0 + r, valid for positions [lo, hi); row 0 is
 * the position before the micro-batch (the row that waited for its first
 * token). A few more rows are kept at snapshot positions, so that a context
 * truncated back to a snapshot (prefix reuse, the hybrid speculation's
 * rollback) finds the hidden state it needs there.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mtp.h"
#include "quant/types.h"

#define N_SAVED 4

/* one sequence's block state */
typedef struct {
    lkv_kv *kv;                 /* one attention layer, n_ctx rows, all resident */
    float *hid;                 /* (U + 1, E) trunk hidden states, row r at hid_pos0 + r */
    int32_t hid_pos0, lo, hi;   /* valid positions [lo, hi) */
    float *saved;               /* (N_SAVED, E) hidden states kept at snapshots */
    int32_t saved_pos[N_SAVED]; /* their positions, -1 free */
    uint32_t saved_stamp[N_SAVED], clock;
    int32_t len;                /* rows in kv: positions [0, len) */
    bool on;                    /* follows the trunk (lkv_context_set_mtp); off: len stays */
    int64_t rows_computed;      /* K/V rows written following the trunk, total */
    int64_t draft_steps;        /* draft steps run, total */
} mtp_seq;

struct lkv_mtp {
    lkv_layer_weights blk;      /* model->nextn[0].blk, as KV layer 0 of each kv */
    const lkv_weight *enorm, *hnorm, *eh_proj, *embed, *head_norm, *head;
    float *emb;                 /* (U, E) embeddings of the rows' tokens */
    float *cat;                 /* (U, 2E) [enorm(emb) | hnorm(hidden)] per row */
    float *chain;               /* (1, E) the last draft step's g: the next step's hidden */
    float *host_logits;         /* (n_vocab,) a draft step's logits when the caller wants none */
    int32_t n_seq;
    mtp_seq *seq;               /* (n_seq) */
};

// ------------------------------------------------------------------ create / free

static lkv_status seq_create(lkv_context *c, mtp_seq *q) {
    const lkv_model_params *hp = &c->model->hp;
    const size_t E = (size_t)hp->n_embd, U = (size_t)c->p.n_ubatch;
    for (int i = 0; i < N_SAVED; i++) q->saved_pos[i] = -1;
    q->hid_pos0 = -1;
    q->on = true;
    if (!(q->hid = c->be->alloc(c->b, sizeof(float) * (U + 1) * E)) ||
        !(q->saved = c->be->alloc(c->b, sizeof(float) * N_SAVED * E)))
        return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for the MTP block's "
                        "hidden rows", sizeof(float) * (U + 1 + N_SAVED) * E);
    const int64_t nkv = (int64_t)hp->n_head_kv * hp->head_dim;
    lkv_kv_config kc = {
        .n_layer = 1, .n_ctx = c->p.n_ctx, .n_ubatch = c->p.n_ubatch, .chunk = c->p.kv_chunk,
        .type_k = c->p.type_k, .type_v = c->p.type_v,
        .row_bytes_k = lkv_type_row_bytes(lkv_type_traits(c->p.type_k), nkv),
        .row_bytes_v = lkv_type_row_bytes(lkv_type_traits(c->p.type_v), nkv),
        .pool_bytes = -1,
    };
    return lkv_kv_create(&q->kv, &kc, c->be, c->b);
}

lkv_status lkv_mtp_create(lkv_context *c, lkv_mtp **out) {
    const lkv_model *m = c->model;
    const lkv_model_params *hp = &m->hp;
    *out = NULL;
    if (hp->n_nextn < 1 || !m->nextn)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "mtp = 1: the model has no MTP (nextn) block");
    if (c->p.embeddings)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "mtp = 1 needs embeddings = 0");
    lkv_mtp *t = calloc(1, sizeof *t);
    if (!t) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the MTP state");
    *out = t;   /* from here lkv_mtp_free undoes a partial build */
    const lkv_nextn_weights *N = &m->nextn[0];
    t->blk = N->blk;
    t->blk.kv_layer = 0;
    t->enorm = &N->enorm;
    t->hnorm = &N->hnorm;
    t->eh_proj = &N->eh_proj;
    t->embed = N->embed_tokens.data ? &N->embed_tokens : &m->tok_embd;
    t->head_norm = N->shared_head_norm.data ? &N->shared_head_norm : &m->output_norm;
    t->head = N->shared_head_head.data ? &N->shared_head_head : &m->output;
    t->n_seq = c->p.n_seq_max;
    if (!(t->seq = calloc((size_t)t->n_seq, sizeof *t->seq)))
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the MTP state");

    const size_t E = (size_t)hp->n_embd, U = (size_t)c->p.n_ubatch;
    const size_t bytes[3] = {U * E, U * 2 * E, E};
    float **bufs[3] = {&t->emb, &t->cat, &t->chain};
    for (int i = 0; i < 3; i++)
        if (!(*bufs[i] = c->be->alloc(c->b, sizeof(float) * bytes[i])))
            return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for the MTP block",
                            sizeof(float) * bytes[i]);
    if (!(t->host_logits = malloc(sizeof(float) * (size_t)hp->n_vocab)))
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the MTP logits");
    for (int32_t s = 0; s < t->n_seq; s++) LKV_TRY(seq_create(c, &t->seq[s]));
    return LKV_OK;
}

void lkv_mtp_free(lkv_context *c, lkv_mtp *t) {
    if (!t) return;
    for (int32_t s = 0; t->seq && s < t->n_seq; s++) {
        mtp_seq *q = &t->seq[s];
        lkv_kv_free(q->kv);
        if (q->hid) c->be->free(c->b, q->hid);
        if (q->saved) c->be->free(c->b, q->saved);
    }
    free(t->seq);
    float *bufs[3] = {t->emb, t->cat, t->chain};
    for (int i = 0; i < 3; i++)
        if (bufs[i]) c->be->free(c->b, bufs[i]);
    free(t->host_logits);
    free(t);
}

// ------------------------------------------------------------------ the block

/* the block over n rows at positions pos0 .. pos0 + n - 1 into kv: row i from
 * hidden (n, E) and tokens[i]; full: through the FFN (c->x the block's
 * output), else only its K/V rows */
static lkv_status block(lkv_context *c, lkv_mtp *t, lkv_kv *kv, const float *hidden,
                        const int32_t *tokens, int32_t n, int32_t pos0, bool full) {
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    const int E = hp->n_embd;
    be->get_rows(c->b, t->emb, t->embed, tokens, n);
    for (int32_t i = 0; i < n; i++) {   /* rmsnorm has no row stride: one row at a time */
        be->rmsnorm(c->b, t->cat + (size_t)i * 2 * E, t->emb + (size_t)i * E, t->enorm, 1, E,
                    hp->rms_eps);
        be->rmsnorm(c->b, t->cat + (size_t)i * 2 * E + E, hidden + (size_t)i * E, t->hnorm, 1, E,
                    hp->rms_eps);
    }
    float *xo[1] = {c->x};
    be->matmul(c->b, xo, t->cat, &t->eh_proj, 1, n);
    be->rmsnorm(c->b, c->h, c->x, &t->blk.attn_norm, n, E, hp->rms_eps);
    const lkv_group g = {0, pos0, 0, n};
    const lkv_ubatch ub = {tokens, n, &g, 1, NULL, 0};
    LKV_TRY(lkv_kv_step_begin(kv, pos0, n));
    LKV_TRY(lkv_forward_block(c, &t->blk, &ub, kv, NULL, !full));
    return lkv_kv_step_end(kv);
}

static bool have_hidden(const mtp_seq *q, int32_t pos) { return pos >= q->lo && pos < q->hi; }

static bool have_saved(const mtp_seq *q, int32_t pos) {
    for (int i = 0; i < N_SAVED; i++)
        if (q->saved_pos[i] == pos) return true;
    return false;
}

static const float *hidden_at(const lkv_context *c, const mtp_seq *q, int32_t pos) {
    return q->hid + (size_t)(pos - q->hid_pos0) * c->model->hp.n_embd;
}

// ------------------------------------------------------------------ following the trunk

/* Each run of the micro-batch, of a sequence whose block is on: first every
 * run's hidden rows are kept (the normed rows of c->x, which the blocks
 * overwrite), then each run's block writes its K/V rows. */
lkv_status lkv_mtp_after_step(lkv_context *c, const lkv_ubatch *ub) {
    lkv_mtp *t = c->mtp;
    const lkv_model_params *hp = &c->model->hp;
    const size_t E = (size_t)hp->n_embd;
    for (int32_t g = 0; g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        mtp_seq *q = &t->seq[gr->seq];
        /* off: nothing at all, not even the hidden rows (those kept stay true:
         * truncation still trims them); the block falls behind (len < n_tokens - 1) */
        if (!q->on) continue;
        const int32_t p0 = gr->pos0, n = gr->n;
        const bool pending = p0 > 0 && have_hidden(q, p0 - 1);
        if (pending && p0 - 1 != q->hid_pos0)
            c->be->copy_d2d(c->b, q->hid, hidden_at(c, q, p0 - 1), sizeof(float) * E);
        c->be->rmsnorm(c->b, q->hid + E, c->x + (size_t)gr->row0 * E, &c->model->output_norm, n,
                       (int)E, hp->rms_eps);
        q->hid_pos0 = p0 - 1;
        q->lo = pending ? p0 - 1 : p0;
        q->hi = p0 + n;
    }
    for (int32_t g = 0; g < ub->n_groups; g++) {
        const lkv_group *gr = &ub->groups[g];
        mtp_seq *q = &t->seq[gr->seq];
        if (!q->on) continue;
        const int32_t p0 = gr->pos0, n = gr->n;
        const bool pending = p0 > 0 && q->lo == p0 - 1;
        /* rows p0 - 1 .. p0 + n - 2, each with the next position's token */
        const int32_t a = p0 > 0 ? p0 - 1 : 0, rows = p0 + n - 1 - a;
        if (q->len != a || (p0 > 0 && !pending) || rows == 0) continue;   /* out of sync */
        LKV_TRY(block(c, t, q->kv, hidden_at(c, q, a), ub->tokens + gr->row0 + (a + 1 - p0), rows,
                      a, false));
        q->len = a + rows;
        q->rows_computed += rows;
    }
    return LKV_OK;
}

void lkv_mtp_truncate(lkv_context *c, int32_t seq, int32_t n) {
    mtp_seq *q = &c->mtp->seq[seq];
    const int32_t keep = n > 0 ? n - 1 : 0;
    if (q->len > keep) q->len = keep;
    if (q->hi > n) q->hi = n;
    if (q->lo > q->hi) q->lo = q->hi;
    for (int i = 0; i < N_SAVED; i++)
        if (q->saved_pos[i] >= n) q->saved_pos[i] = -1;
    if (n == 0 || have_hidden(q, n - 1)) return;
    for (int i = 0; i < N_SAVED; i++)
        if (q->saved_pos[i] == n - 1) {
            const size_t E = (size_t)c->model->hp.n_embd;
            c->be->copy_d2d(c->b, q->hid, q->saved + i * E, sizeof(float) * E);
            q->hid_pos0 = q->lo = n - 1;
            q->hi = n;
            return;
        }
}

void lkv_mtp_snapshot(lkv_context *c, int32_t seq, int32_t pos) {
    mtp_seq *q = &c->mtp->seq[seq];
    if (pos < 1 || !have_hidden(q, pos - 1)) return;
    int s = 0;
    for (int i = 0; i < N_SAVED; i++) {
        if (q->saved_pos[i] == pos - 1) { s = i; break; }
        if (q->saved_pos[i] < 0 || q->saved_stamp[i] < q->saved_stamp[s]) s = i;
    }
    const size_t E = (size_t)c->model->hp.n_embd;
    c->be->copy_d2d(c->b, q->saved + s * E, hidden_at(c, q, pos - 1), sizeof(float) * E);
    q->saved_pos[s] = pos - 1;
    q->saved_stamp[s] = ++q->clock;
}

lkv_status lkv_mtp_copy(lkv_context *c, int32_t src, int32_t dst, int32_t n) {
    lkv_mtp *t = c->mtp;
    mtp_seq *d = &t->seq[dst], *s = &t->seq[src];
    const size_t E = (size_t)c->model->hp.n_embd, U = (size_t)c->p.n_ubatch;
    const int32_t len = s->len < n ? s->len : n;
    LKV_TRY(lkv_kv_copy(d->kv, s->kv, len));
    c->be->copy_d2d(c->b, d->hid, s->hid, sizeof(float) * (U + 1) * E);
    c->be->copy_d2d(c->b, d->saved, s->saved, sizeof(float) * N_SAVED * E);
    d->hid_pos0 = s->hid_pos0;
    d->lo = s->lo;
    d->hi = s->hi;
    memcpy(d->saved_pos, s->saved_pos, sizeof d->saved_pos);
    memcpy(d->saved_stamp, s->saved_stamp, sizeof d->saved_stamp);
    d->clock = s->clock;
    d->len = len;
    lkv_mtp_truncate(c, dst, n);   /* what lies at or past n goes (the trunk holds n) */
    return c->be->sync(c->b);
}

// ------------------------------------------------------------------ drafting

lkv_status lkv_mtp_run_draft(lkv_context *c, int32_t seq, int32_t token, int32_t n_draft,
                             int32_t *drafts, float *logits_out, int32_t *n_out) {
    lkv_mtp *t = c->mtp;
    mtp_seq *q = &t->seq[seq];
    const lkv_backend *be = c->be;
    const lkv_model_params *hp = &c->model->hp;
    const int32_t L = c->seq_len[seq], V = hp->n_vocab;
    *n_out = 0;
    if (token < 0 || token >= V)
        return lkv_fail(LKV_ERR_INVALID_ARG, "mtp draft: token id %d is outside the vocabulary "
                        "[0, %d)", token, V);
    if (n_draft < 1 || n_draft > 64)
        return lkv_fail(LKV_ERR_INVALID_ARG, "mtp draft: n_draft %d must be in [1, 64]", n_draft);
    if (L < 1 || q->len != L - 1 || !have_hidden(q, L - 1)) return LKV_OK;   /* out of sync */
    if (n_draft > c->p.n_ctx - L + 1) n_draft = c->p.n_ctx - L + 1;
    const float *hidden = hidden_at(c, q, L - 1);
    int32_t tok = token;
    lkv_status st = LKV_OK;
    for (int32_t j = 0; j < n_draft && !st; j++) {
        st = block(c, t, q->kv, hidden, &tok, 1, L - 1 + j, true);
        if (st) break;
        be->rmsnorm(c->b, t->chain, c->x, t->head_norm, 1, hp->n_embd, hp->rms_eps);
        float *lo[1] = {c->logits_dev};
        be->matmul(c->b, lo, t->chain, &t->head, 1, 1);
        float *row = logits_out ? logits_out + (size_t)j * V : t->host_logits;
        be->download(c->b, row, c->logits_dev, sizeof(float) * (size_t)V);
        if ((st = be->sync(c->b))) break;
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (row[i] > row[best]) best = i;
        drafts[j] = tok = best;
        hidden = t->chain;
        *n_out = j + 1;
        q->draft_steps++;
    }
    /* the draft rows (positions >= L - 1) are not kept: the verification rewrites L - 1 */
    lkv_status st2 = lkv_kv_truncate(q->kv, q->len);
    if (st == LKV_ERR_DEVICE) c->dead = true;
    return st ? st : st2;
}

// ------------------------------------------------------------------ switch and sync

void lkv_mtp_set_on(lkv_mtp *t, int32_t seq, bool on) {
    for (int32_t s = 0; s < t->n_seq; s++)
        if (seq < 0 || s == seq) t->seq[s].on = on;
}

bool lkv_mtp_is_on(const lkv_mtp *t, int32_t seq) { return t->seq[seq].on; }

bool lkv_mtp_synced_at(const lkv_mtp *t, int32_t seq, int32_t p) {
    /* truncate(p) keeps rows [0, p - 1) and the hidden state at p - 1 (lkv_mtp_truncate) */
    const mtp_seq *q = &t->seq[seq];
    return p == 0 || (q->len >= p - 1 && (have_hidden(q, p - 1) || have_saved(q, p - 1)));
}

int32_t lkv_mtp_rows(const lkv_mtp *t, int32_t seq) { return t->seq[seq].len; }

void lkv_mtp_get_stats(const lkv_context *c, int32_t seq, lkv_mtp_stats *out) {
    const mtp_seq *q = &c->mtp->seq[seq];
    const int32_t L = c->seq_len[seq];
    out->on = q->on;
    out->n_rows = q->len;
    out->in_sync = q->on && L > 0 && q->len == L - 1 && have_hidden(q, L - 1);
    out->rows_computed = q->rows_computed;
    out->draft_steps = q->draft_steps;
}
