/*
 * sample_chain.c: engine/sampling.py's chain over one host logits row
 * (sample_chain.h says what "the same" means and where it can differ).
 *
 * Candidates are two parallel arrays, ids (n,) and their logits x (n,), in
 * the Python sampler's order: all ids ascending at first; after top_k the k
 * largest, largest first, ties by the lower id; after typical_p the kept
 * prefix of the candidates sorted by |surprise - entropy|; after top_p the kept prefix
 * of the candidates sorted by probability, largest first, ties by the earlier
 * candidate; min_p keeps the order. Each filter is written beside the numpy
 * lines it mirrors; the float64 operations are the same ones in the same
 * order (the build has -ffp-contract=off: no fused multiply-adds).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "sample_chain.h"

struct lkv_chain {
    int32_t V;
    double *x;      /* (V,) the row in float64, penalties and bias added */
    double *cx[2];  /* (V,) candidates' logits, two buffers (a filter writes the other) */
    int32_t *ci[2]; /* (V,) candidates' ids */
    double *pr;     /* (V,) probabilities, then their cumulative sum */
    double *aux;    /* (V,) typical_p's log-probabilities, then cumulative sums */
    int32_t *ord;   /* (V,) candidate positions, best first */
    int32_t *cnt;   /* (V,) the penalty window's counts; all zero between picks */
    struct kp *kp;  /* (V,) keys and positions being sorted */
};

typedef struct kp {
    double key;
    int32_t pos;
} kp;

lkv_chain *lkv_chain_new(int32_t n_vocab) {
    lkv_chain *ch = calloc(1, sizeof *ch);
    if (!ch) return NULL;
    const size_t V = (size_t)n_vocab;
    ch->V = n_vocab;
    ch->x = malloc(sizeof(double) * V);
    ch->cx[0] = malloc(sizeof(double) * V);
    ch->cx[1] = malloc(sizeof(double) * V);
    ch->ci[0] = malloc(sizeof(int32_t) * V);
    ch->ci[1] = malloc(sizeof(int32_t) * V);
    ch->pr = malloc(sizeof(double) * V);
    ch->ord = malloc(sizeof(int32_t) * V);
    ch->cnt = calloc(V, sizeof(int32_t));
    ch->aux = malloc(sizeof(double) * V);
    ch->kp = malloc(sizeof(kp) * V);
    if (!ch->x || !ch->cx[0] || !ch->cx[1] || !ch->ci[0] || !ch->ci[1] || !ch->pr || !ch->ord || !ch->cnt ||
        !ch->kp || !ch->aux) {
        lkv_chain_free(ch);
        return NULL;
    }
    return ch;
}

void lkv_chain_free(lkv_chain *ch) {
    if (!ch) return;
    free(ch->x);
    free(ch->cx[0]);
    free(ch->cx[1]);
    free(ch->ci[0]);
    free(ch->ci[1]);
    free(ch->pr);
    free(ch->ord);
    free(ch->cnt);
    free(ch->kp);
    free(ch->aux);
    free(ch);
}

int32_t lkv_chain_vocab(const lkv_chain *ch) { return ch->V; }

static bool penalties_on(const lkv_generate_params *p) {
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0 || p->presence_penalty != 0.0 || p->frequency_penalty != 0.0);
}

bool lkv_chain_plain(const lkv_generate_params *p) { return !(p->temperature > 0) && !penalties_on(p); }

lkv_status lkv_chain_check(const lkv_generate_params *p, int32_t n_vocab) {
    if (!isfinite(p->temperature) || !isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty))
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: temperature %g, frequency_penalty %g, "
                        "presence_penalty %g: finite numbers only", p->temperature, p->frequency_penalty,
                        p->presence_penalty);
    if (!(p->top_p >= 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
        !(p->typical_p >= 0 && p->typical_p <= 1))
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: top_p %g, min_p %g or typical_p %g outside [0, 1]",
                        p->top_p, p->min_p, p->typical_p);
    if (!(p->repeat_penalty > 0) || !isfinite(p->repeat_penalty))
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: repeat_penalty %g (a finite number > 0)",
                        p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: repeat_last_n %d (-1: all, 0: off, or a count)",
                        p->repeat_last_n);
    if (p->n_history < 0 || (p->n_history && !p->history))
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: history: bad count or NULL array");
    for (int32_t i = 0; i < p->n_history; i++)
        if (p->history[i] < 0 || p->history[i] >= n_vocab)
            return lkv_fail(LKV_ERR_INVALID_ARG, "generate: history id %d is outside [0, %d)", p->history[i],
                            n_vocab);
    if (p->temperature > 0 && !p->rng_state)
        return lkv_fail(LKV_ERR_INVALID_ARG, "generate: temperature > 0 needs rng_state");
    return LKV_OK;
}

// --------------------------------------------------------------------- numpy's PCG64

/* 128-bit state and increment as (hi, lo) words; step: s = s * M + inc; output
 * XSL-RR: rotate right (hi ^ lo) by the top 6 bits of s (numpy: pcg64.h) */
static const uint64_t PCG_MUL_HI = 0x2360ED051FC65DA4ULL, PCG_MUL_LO = 0x4385DF649FCCF645ULL;

static uint64_t mul_hi64(uint64_t a, uint64_t b) {
#ifdef __SIZEOF_INT128__
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
#else
    const uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

static uint64_t pcg64_next(uint64_t *s) {   /* s: {state_hi, state_lo, inc_hi, inc_lo} */
    const uint64_t hi = mul_hi64(s[1], PCG_MUL_LO) + s[0] * PCG_MUL_LO + s[1] * PCG_MUL_HI;
    const uint64_t lo = s[1] * PCG_MUL_LO;
    const uint64_t nlo = lo + s[3];
    s[0] = hi + s[2] + (nlo < lo);
    s[1] = nlo;
    const uint64_t v = s[0] ^ s[1];
    const unsigned r = (unsigned)(s[0] >> 58);
    return (v >> r) | (v << ((64 - r) & 63));
}

/* Generator.random(): 53 random bits in [0, 1) */
static double pcg64_double(uint64_t *s) { return (double)(pcg64_next(s) >> 11) * (1.0 / 9007199254740992.0); }

// --------------------------------------------------------------------- numpy's arithmetic

/* np.add.reduce over a contiguous float64 array: pairwise, 8 partial sums per leaf */
static double pairwise_sum(const double *a, int32_t n) {
    if (n < 8) {
        double r = 0.;
        for (int32_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int32_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int32_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

static double max_of(const double *x, int32_t n) {   /* no NaN among x here */
    double m = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* out = np.exp(x - x.max()); out / out.sum() */
static void softmax(double *out, const double *x, int32_t n) {
    const double m = max_of(x, n);
    for (int32_t i = 0; i < n; i++) out[i] = exp(x[i] - m);
    const double s = pairwise_sum(out, n);
    for (int32_t i = 0; i < n; i++) out[i] = out[i] / s;
}

/* numpy's float ordering for searchsorted: NaN after everything */
static bool np_less(double a, double b) { return a < b || (b != b && a == a); }

/* np.searchsorted(a, v, side="right") */
static int32_t search_right(const double *a, int32_t n, double v) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        const int32_t mid = lo + ((hi - lo) >> 1);
        if (np_less(v, a[mid])) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* np.searchsorted(a, v, side="left") */
static int32_t search_left(const double *a, int32_t n, double v) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        const int32_t mid = lo + ((hi - lo) >> 1);
        if (np_less(a[mid], v)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// --------------------------------------------------------------------- best m of n

/* a after b: a smaller key, or an equal key at a later position */
static bool after(const double *key, int32_t a, int32_t b) { return key[a] < key[b] || (key[a] == key[b] && a > b); }

static void sift_down(const double *key, int32_t *h, int32_t m, int32_t i) {
    for (;;) {
        int32_t w = i;
        const int32_t l = 2 * i + 1, r = l + 1;
        if (l < m && after(key, h[l], h[w])) w = l;
        if (r < m && after(key, h[r], h[w])) w = r;
        if (w == i) return;
        const int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* larger key first, then the lower position (keys hold no NaN) */
static int kp_cmp(const void *a, const void *b) {
    const kp *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* out (m,) = the positions of the m largest of key (n,), largest first, ties
 * by the lower position (sampling.py's _top_n): for m < n a heap whose root
 * is the last kept picks them, then they are sorted */
static void top_positions(lkv_chain *ch, int32_t *out, const double *key, int32_t n, int32_t m) {
    if (m < n) {
        for (int32_t i = 0; i < m; i++) out[i] = i;
        for (int32_t i = m / 2 - 1; i >= 0; i--) sift_down(key, out, m, i);
        double last = key[out[0]];   /* i comes after every kept position: only a larger key enters */
        for (int32_t i = m; i < n; i++)
            if (key[i] > last) {
                out[0] = i;
                sift_down(key, out, m, 0);
                last = key[out[0]];
            }
    }
    for (int32_t i = 0; i < m; i++) {
        const int32_t j = m < n ? out[i] : i;
        ch->kp[i] = (kp){key[j], j};
    }
    qsort(ch->kp, (size_t)m, sizeof(kp), kp_cmp);
    for (int32_t i = 0; i < m; i++) out[i] = ch->kp[i].pos;
}

/* np.argsort(key, kind="stable"): smaller key first, NaN last, ties by position */
static int kp_cmp_up(const void *a, const void *b) {
    const kp *x = a, *y = b;
    const bool xn = x->key != x->key, yn = y->key != y->key;
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

// --------------------------------------------------------------------- the chain

/* _penalize: over the last repeat_last_n of win (all with -1), each distinct
 * id once: v <= 0 ? v * rp : v / rp, then - count * fp - pp */
static void penalize(lkv_chain *ch, const lkv_generate_params *p, const int32_t *win, int32_t n_win) {
    if (!penalties_on(p) || n_win == 0) return;
    const int32_t w = p->repeat_last_n < 0 || p->repeat_last_n > n_win ? n_win : p->repeat_last_n;
    const int32_t *h = win + (n_win - w);
    for (int32_t i = 0; i < w; i++) ch->cnt[h[i]]++;
    for (int32_t i = 0; i < w; i++) {
        const int32_t t = h[i];
        if (!ch->cnt[t]) continue;
        double v = ch->x[t];
        v = v <= 0 ? v * p->repeat_penalty : v / p->repeat_penalty;
        ch->x[t] = v - (double)ch->cnt[t] * p->frequency_penalty - p->presence_penalty;
        ch->cnt[t] = 0;
    }
}

/* _top_p: the smallest most-likely prefix whose mass reaches top_p; returns the count kept */
static int32_t top_p(lkv_chain *ch, int b, int32_t n, double top) {
    softmax(ch->pr, ch->cx[b], n);
    /* sorted heads of 1024, 8192, .. until one holds top_p's mass (numpy: 1024, then all;
       a longer sorted head has the same cumulative sums) */
    double *cum = ch->cx[!b];   /* scratch until the copy below */
    int32_t L = n < 1024 ? n : 1024;
    for (;;) {
        top_positions(ch, ch->ord, ch->pr, n, L);
        double s = 0;
        for (int32_t i = 0; i < L; i++) cum[i] = s = (i ? s + ch->pr[ch->ord[i]] : ch->pr[ch->ord[i]]);
        if (!(cum[L - 1] < top) || L >= n) break;
        L = L <= n / 8 ? 8 * L : n;
    }
    int32_t k = search_left(cum, L, top) + 1;
    if (k > L) k = L;
    for (int32_t i = 0; i < k; i++) {
        ch->cx[!b][i] = ch->cx[b][ch->ord[i]];
        ch->ci[!b][i] = ch->ci[b][ch->ord[i]];
    }
    return k;
}

/* _typical: the candidates whose surprise is closest to the entropy, until their
 * mass reaches typical_p (logp = x - max - log(sum(exp(x - max))); entropy =
 * -sum(p * logp), sorted by |-logp - entropy|); returns the count kept. A
 * candidate at -inf makes the entropy NaN (0 * -inf), as in numpy: every key
 * is then NaN and the order stays the candidates'. */
static int32_t typical(lkv_chain *ch, int b, int32_t n, double tp) {
    const double *x = ch->cx[b];
    double *logp = ch->aux, *prob = ch->pr, *tmp = ch->cx[!b];
    const double m = max_of(x, n);
    for (int32_t i = 0; i < n; i++) tmp[i] = exp(x[i] - m);
    const double ls = log(pairwise_sum(tmp, n));
    for (int32_t i = 0; i < n; i++) {
        logp[i] = (x[i] - m) - ls;
        prob[i] = exp(logp[i]);
        tmp[i] = prob[i] * logp[i];
    }
    const double entropy = -pairwise_sum(tmp, n);
    for (int32_t i = 0; i < n; i++) ch->kp[i] = (kp){fabs(-logp[i] - entropy), i};
    qsort(ch->kp, (size_t)n, sizeof(kp), kp_cmp_up);
    double *cum = logp;
    for (int32_t i = 0; i < n; i++) cum[i] = i ? cum[i - 1] + prob[ch->kp[i].pos] : prob[ch->kp[i].pos];
    int32_t k = search_left(cum, n, tp) + 1;
    if (k > n) k = n;
    for (int32_t i = 0; i < k; i++) {
        ch->cx[!b][i] = ch->cx[b][ch->kp[i].pos];
        ch->ci[!b][i] = ch->ci[b][ch->kp[i].pos];
    }
    return k;
}

int32_t lkv_chain_pick(lkv_chain *ch, const float *row, const lkv_generate_params *p, const int32_t *win,
                       int32_t n_win, bool *drew) {
    const int32_t V = ch->V;
    double *x = ch->x;
    *drew = false;
    for (int32_t i = 0; i < V; i++) x[i] = (double)row[i];
    penalize(ch, p, win, n_win);
    for (int32_t j = 0; j < p->n_bias; j++) x[p->bias_ids[j]] += p->bias[j];
    double top = -INFINITY;   /* x.max(): NaN or not finite ends the pick */
    int nan = 0;
    for (int32_t i = 0; i < V; i++) {
        const double v = x[i];
        nan |= v != v;
        top = v > top ? v : top;
    }
    if (nan || !isfinite(top)) return -1;
    if (!(p->temperature > 0)) {   /* np.argmax: the first of the largest */
        int32_t i = 0;
        while (x[i] != top) i++;
        return i;
    }

    /* candidates: buffer b holds n of them */
    int b = 0;
    int32_t n = V;
    if (p->top_k > 0 && p->top_k < V) {
        top_positions(ch, ch->ci[b], x, V, p->top_k);
        n = p->top_k;
        for (int32_t i = 0; i < n; i++) ch->cx[b][i] = x[ch->ci[b][i]];
    } else {
        memcpy(ch->cx[b], x, sizeof(double) * (size_t)V);
        for (int32_t i = 0; i < V; i++) ch->ci[b][i] = i;
    }
    if (p->typical_p < 1.0) {
        n = typical(ch, b, n, p->typical_p);
        b = !b;
    }
    if (p->top_p < 1.0) {
        n = top_p(ch, b, n, p->top_p);
        b = !b;
    }
    if (p->min_p > 0.0) {   /* keep = x >= x.max() + log(min_p), in order */
        const double thr = max_of(ch->cx[b], n) + log(p->min_p);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (ch->cx[b][i] >= thr) {
                ch->cx[b][k] = ch->cx[b][i];
                ch->ci[b][k++] = ch->ci[b][i];
            }
        n = k;
    }
    /* _softmax(x / temperature), the cdf, one draw */
    double *y = ch->cx[b];
    for (int32_t i = 0; i < n; i++) y[i] = y[i] / p->temperature;
    softmax(ch->pr, y, n);
    if (n == 1) return ch->ci[b][0];
    double *cdf = ch->pr;
    for (int32_t i = 1; i < n; i++) cdf[i] = cdf[i - 1] + cdf[i];
    const double u = pcg64_double(p->rng_state) * cdf[n - 1];
    *drew = true;
    int32_t i = search_right(cdf, n, u);
    return ch->ci[b][i < n - 1 ? i : n - 1];
}
