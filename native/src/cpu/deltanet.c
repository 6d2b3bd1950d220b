/*
 * cpu/deltanet.c: the gated delta rule of a Gated DeltaNet layer.
 *
 * Per value head h (its query/key head is h % nk), with q and k
 * l2-normalised, q scaled by 1/sqrt(dk), beta = sigmoid(b) and the log-decay
 * g = a * softplus(alpha + dt) (a = -exp(A_log) < 0), the state S (dk, dv)
 * follows, token by token,
 *
 *   S <- exp(g) S ;  delta = beta (v - S^T k) ;  S <- S + k delta^T ;  o = S^T q
 *
 * Decode (one token) runs exactly that recurrence. A longer micro-batch runs
 * in chunks of CHUNK tokens, parallel within a chunk and recurrent across
 * chunks: with G the cumulative log-decay inside the chunk and S0 the state
 * at its start, the chunk's deltas solve the unit lower-triangular system
 *
 *   delta_t + beta_t sum_{s<t} exp(G_t - G_s) (k_t . k_s) delta_s
 *       = beta_t v_t - beta_t exp(G_t) S0^T k_t
 *
 * (forward substitution, giving U = T beta V and W = T beta exp(G) K so that
 * delta = U - W S0), and then
 *
 *   o_t   = exp(G_t) S0^T q_t + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) delta_s
 *   S_end = exp(G_L) S0 + sum_s exp(G_L - G_s) k_s delta_s^T.
 *
 * Both forms compute the same function; in float they differ by rounding
 * only (about 1e-6 relative), so a prompt in one micro-batch and token by
 * token agree closely, not bitwise. Chunks start at the micro-batch's first
 * token. Threads split the value heads.
 */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/expf.h"

#define CHUNK 64

size_t lkv_cpu_delta_scratch_floats(int dk, int dv) {
    return (size_t)CHUNK * (3 * (size_t)dk + 3 * (size_t)dv + 2 * CHUNK + 3) + (size_t)dv + 64;
}

typedef struct {
    float *out;
    const float *qkv, *beta_in, *alpha, *a, *dt;
    float *state;
    const lkv_delta_desc *d;
    int n;
    float *scratch;
    size_t scratch_floats;
} delta_job;

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* x (dim) / sqrt(sum x^2 + eps) * scale */
static void l2_normalise(float *dst, const float *x, int dim, float eps, float scale) {
    double ss = 0.0;
    for (int i = 0; i < dim; i++) ss += (double)(x[i] * x[i]);
    const float r = scale / sqrtf((float)ss + eps);
    for (int i = 0; i < dim; i++) dst[i] = x[i] * r;
}

/* tokens [t0, t0 + L) of head h: normalised q, k, v, log-decay g, beta */
static void load_head(const delta_job *j, int h, int t0, int L, float *q, float *k, float *v,
                      float *g, float *beta) {
    const lkv_delta_desc *d = j->d;
    const int nk = d->n_k_heads, nv = d->n_v_heads, dk = d->head_k_dim, dv = d->head_v_dim;
    const int kh = h % nk;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < L; t++) {
        const int tok = t0 + t;
        const float *row = j->qkv + (size_t)tok * d->stride;
        l2_normalise(q + (size_t)t * dk, row + (size_t)kh * dk, dk, d->l2_eps, qscale);
        l2_normalise(k + (size_t)t * dk, row + (size_t)(nk + kh) * dk, dk, d->l2_eps, 1.0f);
        memcpy(v + (size_t)t * dv, row + (size_t)2 * nk * dk + (size_t)h * dv, sizeof(float) * dv);
        g[t] = j->a[h] * softplus(j->alpha[(size_t)tok * nv + h] + j->dt[h]);
        beta[t] = 1.0f / (1.0f + ggml_like_expf(-j->beta_in[(size_t)tok * nv + h]));
    }
}

static float dot(const float *x, const float *y, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

// ------------------------------------------------------------------ one token

static void step(float *S, const float *q, const float *k, const float *v, float g, float beta,
                 float *o, float *tmp, int dk, int dv) {
    const float decay = expf(g);
    memset(tmp, 0, sizeof(float) * dv);
    for (int i = 0; i < dk; i++) {
        const float *row = S + (size_t)i * dv;
        const float ki = k[i];
        for (int c = 0; c < dv; c++) tmp[c] += row[c] * ki;
    }
    for (int c = 0; c < dv; c++) tmp[c] = beta * (v[c] - decay * tmp[c]);   /* delta */
    memset(o, 0, sizeof(float) * dv);
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        const float ki = k[i], qi = q[i];
        for (int c = 0; c < dv; c++) {
            row[c] = decay * row[c] + ki * tmp[c];
            o[c] += row[c] * qi;
        }
    }
}

// ------------------------------------------------------------------ one chunk

typedef struct {
    float *q, *k, *v, *U, *W, *delta;   /* (CHUNK, dk or dv) */
    float *A, *QK;                      /* (CHUNK, CHUNK) */
    float *g, *G, *beta;                /* (CHUNK,) */
    float *tmp;                         /* (dv,) */
} scratch;

static void chunk(float *S, const scratch *w, int L, int dk, int dv, float *out, size_t out_stride) {
    float *G = w->G;
    G[0] = w->g[0];
    for (int t = 1; t < L; t++) G[t] = G[t - 1] + w->g[t];
    for (int t = 0; t < L; t++) {
        const float *kt = w->k + (size_t)t * dk, *qt = w->q + (size_t)t * dk;
        for (int s = 0; s <= t; s++) {
            const float *ks = w->k + (size_t)s * dk;
            const float decay = expf(G[t] - G[s]);
            w->QK[t * CHUNK + s] = dot(qt, ks, dk) * decay;
            if (s < t) w->A[t * CHUNK + s] = w->beta[t] * dot(kt, ks, dk) * decay;
        }
    }
    /* forward substitution: U = T (beta v), W = T (beta exp(G) k) */
    for (int t = 0; t < L; t++) {
        float *Ut = w->U + (size_t)t * dv, *Wt = w->W + (size_t)t * dk;
        const float *vt = w->v + (size_t)t * dv, *kt = w->k + (size_t)t * dk;
        const float bw = w->beta[t] * expf(G[t]);
        for (int c = 0; c < dv; c++) Ut[c] = w->beta[t] * vt[c];
        for (int i = 0; i < dk; i++) Wt[i] = bw * kt[i];
        for (int s = 0; s < t; s++) {
            const float as = w->A[t * CHUNK + s];
            const float *Us = w->U + (size_t)s * dv, *Ws = w->W + (size_t)s * dk;
            for (int c = 0; c < dv; c++) Ut[c] -= as * Us[c];
            for (int i = 0; i < dk; i++) Wt[i] -= as * Ws[i];
        }
    }
    /* delta = U - W S0 ; o = exp(G) S0^T q + (QK o decay) delta */
    for (int t = 0; t < L; t++) {
        float *dt = w->delta + (size_t)t * dv, *o = out + (size_t)t * out_stride;
        const float *Wt = w->W + (size_t)t * dk, *qt = w->q + (size_t)t * dk;
        const float eg = expf(G[t]);
        memcpy(dt, w->U + (size_t)t * dv, sizeof(float) * dv);
        memset(o, 0, sizeof(float) * dv);
        for (int i = 0; i < dk; i++) {
            const float *row = S + (size_t)i * dv;
            const float wi = Wt[i], qi = eg * qt[i];
            for (int c = 0; c < dv; c++) {
                dt[c] -= wi * row[c];
                o[c] += qi * row[c];
            }
        }
        for (int s = 0; s <= t; s++) {
            const float a = w->QK[t * CHUNK + s];
            const float *ds = w->delta + (size_t)s * dv;
            for (int c = 0; c < dv; c++) o[c] += a * ds[c];
        }
    }
    /* S = exp(G_L) S0 + sum_s exp(G_L - G_s) k_s delta_s^T */
    const float eL = expf(G[L - 1]);
    for (int i = 0; i < dk; i++) {
        float *row = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) row[c] *= eL;
    }
    for (int s = 0; s < L; s++) {
        const float cs = expf(G[L - 1] - G[s]);
        const float *ks = w->k + (size_t)s * dk, *ds = w->delta + (size_t)s * dv;
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv;
            const float ki = cs * ks[i];
            for (int c = 0; c < dv; c++) row[c] += ki * ds[c];
        }
    }
}

// ------------------------------------------------------------------ heads

static void delta_fn(void *arg, int ith, int nth, int thread) {
    const delta_job *j = arg;
    const lkv_delta_desc *d = j->d;
    const int nv = d->n_v_heads, dk = d->head_k_dim, dv = d->head_v_dim;
    float *p = j->scratch + (size_t)thread * j->scratch_floats;
    scratch w;
    w.q = p; p += (size_t)CHUNK * dk;
    w.k = p; p += (size_t)CHUNK * dk;
    w.W = p; p += (size_t)CHUNK * dk;
    w.v = p; p += (size_t)CHUNK * dv;
    w.U = p; p += (size_t)CHUNK * dv;
    w.delta = p; p += (size_t)CHUNK * dv;
    w.A = p; p += (size_t)CHUNK * CHUNK;
    w.QK = p; p += (size_t)CHUNK * CHUNK;
    w.g = p; p += CHUNK;
    w.G = p; p += CHUNK;
    w.beta = p; p += CHUNK;
    w.tmp = p;
    long lo, hi;
    lkv_split(nv, ith, nth, &lo, &hi);
    const size_t os = (size_t)nv * dv;
    for (long h = lo; h < hi; h++) {
        float *S = j->state + (size_t)h * dk * dv;
        if (j->n == 1) {
            load_head(j, (int)h, 0, 1, w.q, w.k, w.v, w.g, w.beta);
            step(S, w.q, w.k, w.v, w.g[0], w.beta[0], j->out + (size_t)h * dv, w.tmp, dk, dv);
            continue;
        }
        for (int t0 = 0; t0 < j->n; t0 += CHUNK) {
            const int L = j->n - t0 < CHUNK ? j->n - t0 : CHUNK;
            load_head(j, (int)h, t0, L, w.q, w.k, w.v, w.g, w.beta);
            chunk(S, &w, L, dk, dv, j->out + (size_t)t0 * os + (size_t)h * dv, os);
        }
    }
}

void lkv_cpu_delta_rule(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                        const float *alpha, const lkv_weight *a, const lkv_weight *dt,
                        float *state, const lkv_delta_desc *d, int n) {
    delta_job j = {out, qkv, beta_in, alpha, a->data, dt->data, state, d, n,
                   b->delta_scratch, b->delta_scratch_floats};
    lkv_tp_run(b->tp, delta_fn, &j);
}
