/*
 * cpu/attention.c: exact attention over the KV chunk grid.
 *
 * The running state of one (query, head) is (m, l, o[head_dim]): the largest
 * score so far, the sum of exp(score - m) and the unnormalised sum of
 * exp(score - m) * v. attn_accum folds chunk after chunk, in increasing chunk
 * order, into that state; the partial of one chunk is computed in two passes
 * over all of its rows (scores, then max, then exp-weights and V in row
 * order), so nothing depends on which segment holds which row. Merging two
 * states is the log-sum-exp rule: M = max(m_a, m_b), each side scaled by
 * exp(m_side - M). An empty chunk (no row at or before the query) is skipped.
 *
 * Scores are dot products of the K rows with the query converted to K's
 * vec_dot_type (as the weight matmuls do); V rows are converted to f32.
 */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "quant/types.h"

typedef struct {
    float *st;
    const float *q;
    const lkv_attn_desc *d;
    lkv_bctx *b;
} accum_job;

size_t lkv_cpu_attn_scratch_floats(int head_dim, int chunk) {
    /* scores (chunk) + q converted (<= 2 * head_dim floats of bytes) + v row + o partial */
    return (size_t)chunk + 2 * (size_t)head_dim + 2 * (size_t)head_dim + 64;
}

size_t lkv_cpu_attn_state_bytes(int n_q, int n_head, int head_dim) {
    return (size_t)n_q * n_head * (head_dim + 2) * sizeof(float);
}

void lkv_cpu_attn_reset(lkv_bctx *b, void *st, int n_q, int n_head, int head_dim) {
    float *s = st;
    for (long i = 0; i < (long)n_q * n_head; i++) {
        float *e = s + i * (head_dim + 2);
        e[0] = -INFINITY;  /* m: empty */
        e[1] = 0.0f;       /* l */
        memset(e + 2, 0, sizeof(float) * head_dim);
    }
}

/* Row pointer of position p within the segments (NULL if none holds it). */
static inline const lkv_kv_seg *find_seg(const lkv_attn_desc *d, int32_t p, int *hint) {
    for (int i = *hint; i < d->n_segs; i++) {
        const lkv_kv_seg *s = &d->segs[i];
        if (p >= s->pos0 && p < s->pos0 + s->n) { *hint = i; return s; }
    }
    for (int i = 0; i < *hint; i++) {
        const lkv_kv_seg *s = &d->segs[i];
        if (p >= s->pos0 && p < s->pos0 + s->n) { *hint = i; return s; }
    }
    return NULL;
}

static void accum_one(const accum_job *j, int qi, int h, float *scratch) {
    const lkv_attn_desc *d = j->d;
    const int hd = d->head_dim;
    const int kvh = h / (d->n_head / d->n_head_kv);
    const lkv_traits *tk = lkv_type_traits(d->type_k), *tv = lkv_type_traits(d->type_v);
    const lkv_traits *tq = lkv_type_traits(tk->vec_dot_type);
    const size_t rbk = (size_t)lkv_type_row_bytes(tk, (int64_t)d->n_head_kv * hd);
    const size_t rbv = (size_t)lkv_type_row_bytes(tv, (int64_t)d->n_head_kv * hd);
    const size_t hk = (size_t)lkv_type_row_bytes(tk, hd) * kvh;   /* head offset in a row */
    const size_t hv = (size_t)lkv_type_row_bytes(tv, hd) * kvh;

    float *scores = scratch;
    void *qc = scratch + d->chunk;
    float *vrow = scratch + d->chunk + 2 * hd;
    float *oj = vrow + hd;
    tq->from_float(j->q + ((size_t)qi * d->n_head + h) * hd, qc, hd);

    float *e = j->st + ((size_t)qi * d->n_head + h) * (hd + 2);
    const int32_t p = d->q_pos0 + qi;
    int hint = 0;
    for (int c = d->chunk_lo; c < d->chunk_hi; c++) {
        const int32_t p0 = c * d->chunk;
        int32_t p1 = p0 + d->chunk;
        if (p1 > p + 1) p1 = p + 1;
        if (p1 <= p0) break;           /* later chunks are empty too */
        const int nr = p1 - p0;
        float mj = -INFINITY;
        for (int r = 0; r < nr; r++) {
            const lkv_kv_seg *s = find_seg(d, p0 + r, &hint);
            const char *krow = (const char *)s->k + (size_t)(p0 + r - s->pos0) * rbk + hk;
            float sc;
            tk->vec_dot(hd, &sc, krow, qc);
            sc *= d->scale;
            scores[r] = sc;
            if (sc > mj) mj = sc;
        }
        float lj = 0.0f;
        memset(oj, 0, sizeof(float) * hd);
        for (int r = 0; r < nr; r++) {
            const lkv_kv_seg *s = find_seg(d, p0 + r, &hint);
            const char *vr = (const char *)s->v + (size_t)(p0 + r - s->pos0) * rbv + hv;
            const float w = expf(scores[r] - mj);
            lj += w;
            tv->to_float(vr, vrow, hd);
            for (int k = 0; k < hd; k++) oj[k] += w * vrow[k];
        }
        /* fold (mj, lj, oj) into the state */
        if (e[0] == -INFINITY) {
            e[0] = mj;
            e[1] = lj;
            memcpy(e + 2, oj, sizeof(float) * hd);
        } else {
            const float M = e[0] > mj ? e[0] : mj;
            const float a = expf(e[0] - M), bb = expf(mj - M);
            for (int k = 0; k < hd; k++) e[2 + k] = e[2 + k] * a + oj[k] * bb;
            e[1] = e[1] * a + lj * bb;
            e[0] = M;
        }
    }
}

static void accum_fn(void *arg, int ith, int nth) {
    const accum_job *j = arg;
    float *scratch = j->b->attn_scratch + (size_t)ith * j->b->attn_scratch_floats;
    long total = (long)j->d->n_q * j->d->n_head, lo, hi;
    lkv_split(total, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) accum_one(j, (int)(i / j->d->n_head), (int)(i % j->d->n_head), scratch);
}

void lkv_cpu_attn_accum(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d) {
    accum_job j = {st, q, d, b};
    lkv_tp_run(b->tp, accum_fn, &j);
}

void lkv_cpu_attn_finish(lkv_bctx *b, float *out, const void *st, int n_q, int n_head,
                         int head_dim) {
    (void)b;
    const float *s = st;
    for (long i = 0; i < (long)n_q * n_head; i++) {
        const float *e = s + i * (head_dim + 2);
        const float inv = e[1] > 0.0f ? 1.0f / e[1] : 0.0f;
        for (int k = 0; k < head_dim; k++) out[i * head_dim + k] = e[2 + k] * inv;
    }
}
