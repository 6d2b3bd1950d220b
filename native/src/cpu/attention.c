/*
 * cpu/attention.c: exact attention over the KV chunk grid.
 *
 * The running state of one (query, head) is (m, l, o[head_dim]): the largest
 * score so far, the sum of exp(score - m) and the normalised output so far.
 * attn_accum folds chunk after chunk, in increasing chunk order, into that
 * state; the partial of one chunk is computed over all of its rows at once
 * (scores, max, weights, V in row order), so nothing depends on which
 * segment holds which row. Merging two states is the log-sum-exp rule:
 * M = max(m_a, m_b), w_side = l_side * exp(m_side - M), o = (o_a w_a + o_b
 * w_b) / (w_a + w_b). An empty chunk (no row at or before the query) is
 * skipped; a single chunk's partial is the result as it stands.
 *
 * Within a chunk the arithmetic is llama.cpp's CPU attention without flash
 * attention as its AVX2 build computes a batch (KQ and KQV matmuls through
 * the 8-lane f16 GEMM kernel, softmax in between), so that for contexts of
 * one chunk the values are the same as llama.cpp's: the query rounded to f16;
 * each score an 8-lane FMA dot of f16 values in f32 reduced by the
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) tree, times the scale; weights
 * exp(s - max) by ggml's AVX2 polynomial exp; their sum in f64 over groups of
 * 8 positions (each group reduced by the same tree); probabilities
 * weight * (float)(1 / sum) rounded to f16; the output an 8-lane FMA dot of
 * those with the f16 V column, reduced by the tree (with a V of another
 * type the probabilities stay f32). Lanes are position mod 8 from the chunk
 * start (a multiple of 8). Other KV types use their vec_dot / to_float with
 * the same softmax.
 */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/expf.h"
#include "quant/isa.h"
#include "quant/simd.h"
#include "quant/types.h"

typedef struct {
    float *st;
    const float *q;
    const lkv_attn_desc *d;
    lkv_bctx *b;
} accum_job;

size_t lkv_cpu_attn_scratch_floats(int head_dim, int chunk) {
    /* scores (chunk) + q converted (<= 2 * head_dim floats of bytes) + 8 lanes + v row */
    return (size_t)chunk + 2 * (size_t)head_dim + 9 * (size_t)head_dim + 64;
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

/* the 8-lane horizontal sum of ggml's AVX2 kernels: high half + low half,
 * then (t0 + t2) + (t1 + t3) */
static inline float reduce8(const float *a) {
    float t[4];
    for (int i = 0; i < 4; i++) t[i] = a[4 + i] + a[i];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

/* f16 <-> f32, exact (the bit arithmetic of quant/simd.h) */
static inline float f16_to_f32(uint16_t h) { return fp16_to_fp32_bits(h); }
static inline uint16_t f32_to_f16(float f) { return fp32_to_fp16_bits(f); }

/* The f16 dot and axpy below come in two builds, chosen per call by `simd`
 * (the CPU kernels' ISA level, quant/isa.h): F16C + FMA instructions, and
 * portable C with fmaf. Both do the same roundings, so the bits agree. */
#ifdef LKV_X86
#define F16_SIMD __attribute__((target("avx2,fma,f16c")))

static F16_SIMD float dot8_f16_simd(const uint16_t *a, const uint16_t *b, int n) {
    float lanes[8];
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), acc);
    _mm256_storeu_ps(lanes, acc);
    return reduce8(lanes);
}

/* x rounded to f16 and back (the F16C conversions round as f32_to_f16) */
static F16_SIMD float round_f16_simd(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

static F16_SIMD void axpy_f16_simd(float *acc, const uint16_t *v, float p, int n) {
    int k = 0;
    const __m256 pv = _mm256_set1_ps(p);
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(acc + k, _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + k))),
                                                  pv, _mm256_loadu_ps(acc + k)));
    for (; k < n; k++) acc[k] = fmaf(_cvtsh_ss(v[k]), p, acc[k]);
}
#endif

/* 8-lane f16 dot (lane l takes elements l, l+8, ...), n a multiple of 8 */
static inline float dot8_f16(int simd, const uint16_t *a, const uint16_t *b, int n) {
#ifdef LKV_X86
    if (simd) return dot8_f16_simd(a, b, n);
#endif
    float lanes[8];
    for (int l = 0; l < 8; l++) lanes[l] = 0.0f;
    for (int i = 0; i < n; i += 8)
        for (int l = 0; l < 8; l++) lanes[l] = fmaf(f16_to_f32(a[i + l]), f16_to_f32(b[i + l]), lanes[l]);
    return reduce8(lanes);
}

/* x rounded to f16 and back */
static inline float round_f16(int simd, float x) {
#ifdef LKV_X86
    if (simd) return round_f16_simd(x);
#endif
    return f16_to_f32(f32_to_f16(x));
}

/* acc[k] = fma(v[k], p, acc[k]) for k < n */
static inline void axpy_f16(int simd, float *acc, const uint16_t *v, float p, int n) {
#ifdef LKV_X86
    if (simd) {
        axpy_f16_simd(acc, v, p, n);
        return;
    }
#endif
    for (int k = 0; k < n; k++) acc[k] = fmaf(f16_to_f32(v[k]), p, acc[k]);
}

LKV_ISA_CLONES static void accum_one(const accum_job *j, int qi, int h, float *scratch) {
    const lkv_attn_desc *d = j->d;
    const int hd = d->head_dim;
    const int kvh = h / (d->n_head / d->n_head_kv);
    const lkv_traits *tk = lkv_type_traits(d->type_k), *tv = lkv_type_traits(d->type_v);
    const lkv_traits *tq = lkv_type_traits(tk->vec_dot_type);
    const lkv_vec_dot_fn kdot = lkv_type_kv_dot(tk);
    const size_t rbk = (size_t)lkv_type_row_bytes(tk, (int64_t)d->n_head_kv * hd);
    const size_t rbv = (size_t)lkv_type_row_bytes(tv, (int64_t)d->n_head_kv * hd);
    const size_t hk = (size_t)lkv_type_row_bytes(tk, hd) * kvh;   /* head offset in a row */
    const size_t hv = (size_t)lkv_type_row_bytes(tv, hd) * kvh;
    const int f16k = d->type_k == LKV_TYPE_F16 && hd % 8 == 0;
    const int f16v = d->type_v == LKV_TYPE_F16;
    const int simd = lkv_quant_isa() >= LKV_ISA_AVX2;

    /* scratch: scores/probabilities (chunk) | q converted (2*hd) | lanes (8*hd) | v row (hd) */
    float *scores = scratch;
    void *qc = scratch + d->chunk;
    float *lanes = scratch + d->chunk + 2 * hd;
    float *vrow = lanes + 8 * hd;
    tq->from_float(j->q + ((size_t)qi * d->n_head + h) * hd, qc, hd);

    float *e = j->st + ((size_t)qi * d->n_head + h) * (hd + 2);
    const int32_t p = d->q_pos0 + qi;
    /* a sliding window: rows before lo are masked (-inf scores, zero weights) */
    const int32_t lo = d->window > 0 && p - d->window + 1 > 0 ? p - d->window + 1 : 0;
    int hint = 0;
    for (int c = d->chunk_lo; c < d->chunk_hi; c++) {
        const int32_t p0 = c * d->chunk;
        int32_t p1 = p0 + d->chunk;
        if (p1 > p + 1) p1 = p + 1;
        if (p1 <= p0) break;           /* later chunks are empty too */
        if (p1 <= lo) continue;        /* wholly before the window: empty */
        const int nr = p1 - p0, r0 = lo > p0 ? lo - p0 : 0;
        float mj = -INFINITY;
        for (int r = 0; r < r0; r++) scores[r] = -INFINITY;
        for (int r = r0; r < nr; r++) {
            const lkv_kv_seg *s = find_seg(d, p0 + r, &hint);
            const char *krow = (const char *)s->k + (size_t)(p0 + r - s->pos0) * rbk + hk;
            float sc;
            if (f16k) sc = dot8_f16(simd, (const uint16_t *)krow, (const uint16_t *)qc, hd);
            else kdot(hd, &sc, krow, qc);
            sc *= d->scale;
            scores[r] = sc;
            if (sc > mj) mj = sc;
        }
        /* weights; their sum in f64 over groups of 8 positions */
        double sum = 0.0;
        for (int g = 0; g < nr; g += 8) {
            float w8[8];
            for (int l = 0; l < 8; l++) {
                w8[l] = g + l < nr && g + l >= r0 ? ggml_like_expf(scores[g + l] - mj) : 0.0f;
                if (g + l < nr) scores[g + l] = w8[l];
            }
            sum += (double)reduce8(w8);
        }
        const float inv = (float)(1.0 / sum);
        /* probabilities rounded to f16, V accumulated in 8 lanes by position */
        memset(lanes, 0, sizeof(float) * 8 * hd);
        for (int r = r0; r < nr; r++) {   /* masked rows would add fma(v, 0, acc) = acc */
            const lkv_kv_seg *s = find_seg(d, p0 + r, &hint);
            const char *vr = (const char *)s->v + (size_t)(p0 + r - s->pos0) * rbv + hv;
            /* the probabilities take V's dot type: f16 for an f16 V, else f32 */
            const float pr = f16v ? round_f16(simd, scores[r] * inv) : scores[r] * inv;
            float *acc = lanes + (size_t)(r & 7) * hd;
            if (f16v) {
                axpy_f16(simd, acc, (const uint16_t *)vr, pr, hd);
            } else {
                tv->to_float(vr, vrow, hd);
                for (int k = 0; k < hd; k++) acc[k] = fmaf(vrow[k], pr, acc[k]);
            }
        }
        const float lj = (float)sum;
        /* fold (mj, lj, oj) into the state */
        if (e[0] == -INFINITY) {
            e[0] = mj;
            e[1] = lj;
            for (int k = 0; k < hd; k++) {
                float a8[8];
                for (int l = 0; l < 8; l++) a8[l] = lanes[(size_t)l * hd + k];
                e[2 + k] = reduce8(a8);
            }
        } else {
            const float M = e[0] > mj ? e[0] : mj;
            const float wa = e[1] * expf(e[0] - M), wb = lj * expf(mj - M);
            const float il = 1.0f / (wa + wb);
            for (int k = 0; k < hd; k++) {
                float a8[8];
                for (int l = 0; l < 8; l++) a8[l] = lanes[(size_t)l * hd + k];
                e[2 + k] = (e[2 + k] * wa + reduce8(a8) * wb) * il;
            }
            e[1] = wa + wb;
            e[0] = M;
        }
    }
}

static void accum_fn(void *arg, int ith, int nth, int thread) {
    const accum_job *j = arg;
    float *scratch = j->b->attn_scratch + (size_t)thread * j->b->attn_scratch_floats;
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
        const int any = e[1] > 0.0f;   /* o is already normalised */
        for (int k = 0; k < head_dim; k++) out[i * head_dim + k] = any ? e[2 + k] : 0.0f;
    }
}
