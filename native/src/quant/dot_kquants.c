/*
 * quant/dot_kquants.c: dot products of the k-quants (q2_K .. q6_K) against
 * q8_K activation rows.
 *
 * A super-block contributes d * dy * sum_k(sc_k * dot_k) minus a per-sub-block
 * offset term that needs only the activation's bsums (sums of 16 codes):
 * q2_K / q4_K / q5_K subtract dmin * dy * sum_k(mn_k * bsum_k); q3_K and q6_K
 * store codes with a fixed offset (4, 32), folded in as an exact integer
 * correction o * sum_k(sc_k * bsum_k). The AVX2 path expands the weight codes
 * of a super-block once into 8 vectors of 32 unsigned bytes, multiplies each
 * with the activation (u8 x s8 -> i16 pairs), applies the sub-block scales
 * with an i16 multiply-add and accumulates in i32 lanes, then one f32 FMA per
 * super-block and row. The kernels take up to 4 activation rows with the
 * per-row operation sequence of vec_dot, so vec_dot_rows equals vec_dot bit
 * for bit. The portable path decodes codes with the same formulas as
 * kquants.c and repeats the AVX2 path's integer lanes and float steps: the
 * same bits.
 */
#include <math.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/isa.h"
#include "quant/simd.h"

#define YROW(T, vy, stride, r) ((const T *)((const char *)(vy) + (size_t)(r) * (stride)))

/* Unpacked per-super-block parameters shared by both paths. */
typedef struct {
    float d, dmin;   // f32 scale and min scale (dmin unused when folded)
    int16_t sc[16];  // scale per 16 elements (q4_K/q5_K: each 32-scale twice)
    int16_t w[16];   // bsum weights: mins (unfolded) or offset * scale (folded)
} kparams;

static inline void scale_min_k4(const uint8_t s[12], int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static inline void params_q2_K(const block_q2_K *b, kparams *p) {
    p->d = h2f(b->d);
    p->dmin = h2f(b->dmin);
    for (int k = 0; k < 16; k++) {
        p->sc[k] = b->scales[k] & 15;
        p->w[k] = b->scales[k] >> 4;
    }
}

static inline void params_q3_K(const block_q3_K *b, kparams *p) {
    p->d = h2f(b->d);
    p->dmin = 0.0f;
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? b->scales[k] & 15 : b->scales[k - 8] >> 4;
        const int hi = (b->scales[8 + (k & 3)] >> 2 * (k >> 2)) & 3;
        p->sc[k] = (int16_t)((lo | hi << 4) - 32);
        p->w[k] = (int16_t)(4 * p->sc[k]);
    }
}

static inline void params_k4(const uint8_t scales[12], uint16_t d, uint16_t dmin, kparams *p) {
    p->d = h2f(d);
    p->dmin = h2f(dmin);
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        scale_min_k4(scales, j, &sc, &mn);
        p->sc[2 * j] = p->sc[2 * j + 1] = (int16_t)sc;
        p->w[2 * j] = p->w[2 * j + 1] = (int16_t)mn;
    }
}

static inline void params_q4_K(const block_q4_K *b, kparams *p) { params_k4(b->scales, b->d, b->dmin, p); }
static inline void params_q5_K(const block_q5_K *b, kparams *p) { params_k4(b->scales, b->d, b->dmin, p); }

static inline void params_q6_K(const block_q6_K *b, kparams *p) {
    p->d = h2f(b->d);
    p->dmin = 0.0f;
    for (int k = 0; k < 16; k++) {
        p->sc[k] = b->scales[k];
        p->w[k] = (int16_t)(32 * b->scales[k]);
    }
}

#ifdef __AVX2__
// ---------------------------------------------------------------- AVX2

#include "quant/kquants_avx2.h"

/* FOLD: 1 when the bsum term is an integer correction (q3_K, q6_K). */
#define KERNEL_K(name, BT, params, codes, FOLD)                                          \
    LKV_INLINE void name(int n, float *s, const void *vx, const void *vy, size_t stride,  \
                         int ny) {                                                        \
        const BT *x = vx;                                                                 \
        const block_q8_K *y[4];                                                           \
        __m256 acc[4];                                                                    \
        float accm[4];                                                                    \
        for (int r = 0; r < ny; r++) {                                                    \
            y[r] = YROW(block_q8_K, vy, stride, r);                                       \
            acc[r] = _mm256_setzero_ps();                                                 \
            accm[r] = 0.0f;                                                               \
        }                                                                                 \
        for (int i = 0; i < n / QK_K; i++) {                                              \
            kvec p;                                                                       \
            __m256i q[8], scv[8];                                                         \
            v##params(&x[i], &p);                                                         \
            codes(&x[i], q);                                                              \
            for (int v = 0; v < 8; v++) scv[v] = scale_pair(p.t, v);                      \
            const __m256i w = p.w;                                                        \
            for (int r = 0; r < ny; r++) {                                                \
                const block_q8_K *yb = &y[r][i];                                          \
                __m256i sumi = _mm256_setzero_si256();                                    \
                for (int v = 0; v < 8; v++) {                                             \
                    const __m256i qy = _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * v)); \
                    sumi = _mm256_add_epi32(sumi,                                         \
                        _mm256_madd_epi16(_mm256_maddubs_epi16(q[v], qy), scv[v]));       \
                }                                                                         \
                const __m256i bw = _mm256_madd_epi16(                                     \
                    _mm256_loadu_si256((const __m256i *)yb->bsums), w);                   \
                if (FOLD) sumi = _mm256_sub_epi32(sumi, bw);                              \
                else accm[r] += (p.dmin * yb->d) * (float)hsum_epi32(bw);                 \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(p.d * yb->d),                     \
                                         _mm256_cvtepi32_ps(sumi), acc[r]);               \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < ny; r++) s[r] = hsum_ps(acc[r]) - accm[r];                    \
    }

#else
// ---------------------------------------------------------------- portable C

/* Unsigned codes of all 256 elements (offset formats keep their offset). */
static inline void codes_q2_K(const block_q2_K *b, uint8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) q[e] = (b->qs[32 * (e >> 7) + (e & 31)] >> 2 * ((e >> 5) & 3)) & 3;
}
static inline void codes_q3_K(const block_q3_K *b, uint8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) {
        const int lo = (b->qs[32 * (e >> 7) + (e & 31)] >> 2 * ((e >> 5) & 3)) & 3;
        q[e] = (uint8_t)(lo | ((b->hmask[e & 31] >> (e >> 5)) & 1) << 2);
    }
}
static inline void codes_q4_K(const block_q4_K *b, uint8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) q[e] = (b->qs[32 * (e >> 6) + (e & 31)] >> 4 * ((e >> 5) & 1)) & 15;
}
static inline void codes_q5_K(const block_q5_K *b, uint8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) {
        const int lo = (b->qs[32 * (e >> 6) + (e & 31)] >> 4 * ((e >> 5) & 1)) & 15;
        q[e] = (uint8_t)(lo | ((b->qh[e & 31] >> (e >> 5)) & 1) << 4);
    }
}
static inline void codes_q6_K(const block_q6_K *b, uint8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) {
        const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
        const int lo = (b->ql[64 * h + 32 * (s & 1) + l] >> 4 * (s >> 1)) & 15;
        q[e] = (uint8_t)(lo | ((b->qh[32 * h + l] >> 2 * s) & 3) << 4);
    }
}

/* The AVX2 path's steps in scalar form: lane l sums, exactly in int, the
 * scaled products of elements 32v+4l .. 32v+4l+3 of every 32-vector v (and
 * for FOLD the bsum correction of its two 16-groups); one fmaf per lane and
 * super-block; hsum_ps's tree at the end. */
#define KERNEL_K(name, BT, params, codes, FOLD)                                          \
    static void name(int n, float *s, const void *vx, const void *vy, size_t stride,      \
                     int ny) {                                                            \
        const BT *x = vx;                                                                 \
        for (int r = 0; r < ny; r++) {                                                    \
            const block_q8_K *y = YROW(block_q8_K, vy, stride, r);                        \
            float acc[8] = {0}, accm = 0.0f;                                              \
            for (int i = 0; i < n / QK_K; i++) {                                          \
                kparams p;                                                                \
                uint8_t q[QK_K];                                                          \
                params(&x[i], &p);                                                        \
                codes(&x[i], q);                                                          \
                int lane[8] = {0}, sumw = 0;                                              \
                for (int e = 0; e < QK_K; e++)                                            \
                    lane[(e >> 2) & 7] += p.sc[e >> 4] * (q[e] * y[i].qs[e]);             \
                for (int l = 0; l < 8; l++) {                                             \
                    const int bw = p.w[2 * l] * y[i].bsums[2 * l] +                       \
                                   p.w[2 * l + 1] * y[i].bsums[2 * l + 1];                \
                    if (FOLD) lane[l] -= bw;                                              \
                    sumw += bw;                                                           \
                }                                                                         \
                if (!FOLD) accm += (p.dmin * y[i].d) * (float)sumw;                       \
                const float f = p.d * y[i].d;                                             \
                for (int l = 0; l < 8; l++) acc[l] = fmaf(f, (float)lane[l], acc[l]);     \
            }                                                                             \
            s[r] = (((acc[0] + acc[4]) + (acc[2] + acc[6])) +                             \
                    ((acc[1] + acc[5]) + (acc[3] + acc[7]))) - accm;                      \
        }                                                                                 \
    }
#endif

KERNEL_K(k_q2_K, block_q2_K, params_q2_K, codes_q2_K, 0)
KERNEL_K(k_q3_K, block_q3_K, params_q3_K, codes_q3_K, 1)
KERNEL_K(k_q4_K, block_q4_K, params_q4_K, codes_q4_K, 0)
KERNEL_K(k_q5_K, block_q5_K, params_q5_K, codes_q5_K, 0)
KERNEL_K(k_q6_K, block_q6_K, params_q6_K, codes_q6_K, 1)

// ---------------------------------------------------------------- entry points

#define DOT_ENTRIES(T, kernel)                                                           \
    static void T##_vec_dot(int n, float *s, const void *x, const void *y) {             \
        kernel(n, s, x, y, 0, 1);                                                         \
    }                                                                                     \
    static void T##_vec_dot_rows(int n, float *s, const void *x, const void *y,          \
                                 size_t stride, int ny) {                                 \
        LKV_ROWS_DISPATCH(kernel, n, s, x, y, stride, ny);                                \
    }
#define INSTALL(ID, T) t[ID].vec_dot = T##_vec_dot, t[ID].vec_dot_rows = T##_vec_dot_rows

DOT_ENTRIES(q2_K, k_q2_K)
DOT_ENTRIES(q3_K, k_q3_K)
DOT_ENTRIES(q4_K, k_q4_K)
DOT_ENTRIES(q5_K, k_q5_K)
DOT_ENTRIES(q6_K, k_q6_K)

void LKV_ISA_FN(lkv_install_dot_kquants)(lkv_traits *t) {
    INSTALL(LKV_TYPE_Q2_K, q2_K);
    INSTALL(LKV_TYPE_Q3_K, q3_K);
    INSTALL(LKV_TYPE_Q4_K, q4_K);
    INSTALL(LKV_TYPE_Q5_K, q5_K);
    INSTALL(LKV_TYPE_Q6_K, q6_K);
}
