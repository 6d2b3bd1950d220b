/*
 * quant/gemm_kquants.c: the prefill GEMM tile of the k-quants (q2_K .. q6_K)
 * against q8_K activation rows (lkv_gemm_fn, quant/types.h).
 *
 * The row dots (dot_kquants.c) unpack a weight super-block for every group
 * of 4 tokens and reduce each (row, token) pair on its own. Here a tile of
 * up to LKV_GEMM_ROWS weight rows is unpacked once per call into `scratch`
 * (kdec: the 256 codes as unsigned bytes, the scale multiplier of each
 * 32-vector, the bsum weights, d and dmin as floats) and then meets every
 * token, 2 rows x 4 tokens at a time: per 32-vector two weight loads serve
 * 4 tokens and each activation load serves 2 rows, the 8 integer
 * accumulators stay in registers, and the activation's per-super-block
 * values (d, the bsum term's reduction) are handled 4 tokens at once.
 *
 * Bits: every (row, token) pair gets the integer lanes of dot_kquants.c's
 * KERNEL_K (lane l = the scaled products of elements 32v+4l .. 32v+4l+3,
 * summed over v; minus the bsum correction for the offset formats), then the
 * same float steps in the same order: acc = fma(d * dy, lanes, acc) per
 * super-block, accm += (dmin * dy) * bsum_term (4 tokens as the lanes of one
 * vector: the same IEEE operations per lane), result hsum(acc) - accm. So
 * each result equals vec_dot's bit for bit, on every ISA level.
 *
 * Only the AVX2 copies (avx2, avx512) have the tile; the portable copy
 * installs none (the matmul then takes the row dots, unchanged).
 */
#include <string.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/isa.h"
#include "quant/simd.h"

#ifdef __AVX2__
#include "quant/kquants_avx2.h"

/* One weight super-block, unpacked (at most LKV_GEMM_BYTES_PER_BLOCK bytes). */
typedef struct {
    __m256i q[8];    /* codes of elements 32v .. 32v+31, unsigned bytes */
    __m256i sc[8];   /* int16 multiplier of each code pair of vector v */
    __m256i w;       /* (16,) int16 bsum weights */
    float d, dmin;
    float pad[6];
} kdec;
_Static_assert(sizeof(kdec) <= LKV_GEMM_BYTES_PER_BLOCK, "kdec size");

#define YROW(vy, stride, r) ((const block_q8_K *)((const char *)(vy) + (size_t)(r) * (stride)))

/* the 4 sums of 4 vectors of 8 int32 (exact), vector j's in lane j */
LKV_INLINE __m128i hsum4_epi32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* R rows (1 or 2) of unpacked blocks against T tokens (1..4), all nb
 * super-blocks: out[j * out_stride + r]. FOLD as in dot_kquants.c. */
LKV_INLINE void micro(const kdec *a, size_t a_stride, int nb, const void *vy, size_t stride,
                      float *out, size_t out_stride, const int R, const int T, const int FOLD) {
    const block_q8_K *y[4];
    for (int j = 0; j < T; j++) y[j] = YROW(vy, stride, j);
    __m256 acc[2][4];
    __m128 accm[2];
    for (int r = 0; r < R; r++) {
        accm[r] = _mm_setzero_ps();
        for (int j = 0; j < T; j++) acc[r][j] = _mm256_setzero_ps();
    }
    for (int i = 0; i < nb; i++) {
        const kdec *k[2] = {a + i, a + a_stride + i};
        __m256i sumi[2][4];
        for (int r = 0; r < R; r++)
            for (int j = 0; j < T; j++) sumi[r][j] = _mm256_setzero_si256();
        for (int v = 0; v < 8; v++) {
            __m256i q[2], sc[2];
            for (int r = 0; r < R; r++) {
                q[r] = _mm256_load_si256(&k[r]->q[v]);
                sc[r] = _mm256_load_si256(&k[r]->sc[v]);
            }
            for (int j = 0; j < T; j++) {
                const __m256i qy = _mm256_loadu_si256((const __m256i *)(y[j][i].qs + 32 * v));
                for (int r = 0; r < R; r++)
                    sumi[r][j] = _mm256_add_epi32(sumi[r][j],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], qy), sc[r]));
            }
        }
        const __m128 dy4 = _mm_setr_ps(y[0][i].d, T > 1 ? y[1][i].d : 0.0f, T > 2 ? y[2][i].d : 0.0f,
                                       T > 3 ? y[3][i].d : 0.0f);
        for (int r = 0; r < R; r++) {
            __m256i bw[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                             _mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int j = 0; j < T; j++) {
                bw[j] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[j][i].bsums), k[r]->w);
                if (FOLD) sumi[r][j] = _mm256_sub_epi32(sumi[r][j], bw[j]);
            }
            if (!FOLD) {
                const __m128 f = _mm_mul_ps(_mm_set1_ps(k[r]->dmin), dy4);
                const __m128 m = _mm_cvtepi32_ps(hsum4_epi32(bw[0], bw[1], bw[2], bw[3]));
                accm[r] = _mm_add_ps(accm[r], _mm_mul_ps(f, m));
            }
            const __m256 dd = _mm256_castps128_ps256(_mm_mul_ps(_mm_set1_ps(k[r]->d), dy4));
            for (int j = 0; j < T; j++)   /* lane j of dd: d * dy_j */
                acc[r][j] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(j)),
                                            _mm256_cvtepi32_ps(sumi[r][j]), acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++) {
        float m[4];
        _mm_storeu_ps(m, accm[r]);
        for (int j = 0; j < T; j++) out[(size_t)j * out_stride + r] = hsum_ps(acc[r][j]) - m[j];
    }
}

/* the 2 x T and 1 x T cases with T a compile-time constant */
#define MICRO_T(a, as, nb, y, st, out, os, R, T, FOLD)                              \
    do {                                                                            \
        switch (T) {                                                                \
        case 1: micro(a, as, nb, y, st, out, os, R, 1, FOLD); break;                \
        case 2: micro(a, as, nb, y, st, out, os, R, 2, FOLD); break;                \
        case 3: micro(a, as, nb, y, st, out, os, R, 3, FOLD); break;                \
        default: micro(a, as, nb, y, st, out, os, R, 4, FOLD); break;               \
        }                                                                           \
    } while (0)

/* unpack rows [0, nrows) of x into a (row r's blocks at a + r * nb) */
#define UNPACK(name, BT, codes, vparams)                                            \
    LKV_INLINE void name(kdec *a, const void *vx, size_t x_stride, int nrows, int nb) { \
        for (int r = 0; r < nrows; r++) {                                           \
            const BT *x = (const BT *)((const char *)vx + (size_t)r * x_stride);    \
            for (int i = 0; i < nb; i++) {                                          \
                kdec *k = a + (size_t)r * nb + i;                                   \
                kvec p;                                                             \
                __m256i q[8];                                                       \
                vparams(&x[i], &p);                                                 \
                codes(&x[i], q);                                                    \
                for (int v = 0; v < 8; v++) {                                       \
                    _mm256_store_si256(&k->q[v], q[v]);                             \
                    _mm256_store_si256(&k->sc[v], scale_pair(p.t, v));              \
                }                                                                   \
                _mm256_store_si256(&k->w, p.w);                                     \
                k->d = p.d;                                                         \
                k->dmin = p.dmin;                                                   \
            }                                                                       \
        }                                                                           \
    }

#define GEMM(T_, BT, FOLD)                                                          \
    UNPACK(unpack_##T_, BT, codes_##T_, vparams_##T_)                               \
    static void T_##_gemm(int n, float *out, size_t out_stride, const void *x,      \
                          size_t x_stride, int nrows, const void *y, size_t stride, \
                          int ny, void *scratch) {                                  \
        const int nb = n / QK_K;                                                    \
        kdec *a = scratch;                                                          \
        unpack_##T_(a, x, x_stride, nrows, nb);                                     \
        for (int t0 = 0; t0 < ny; t0 += 4) {                                        \
            const int nt = ny - t0 < 4 ? ny - t0 : 4;                               \
            const char *yt = (const char *)y + (size_t)t0 * stride;                 \
            float *ot = out + (size_t)t0 * out_stride;                              \
            int r = 0;                                                              \
            for (; r + 2 <= nrows; r += 2)                                          \
                MICRO_T(a + (size_t)r * nb, (size_t)nb, nb, yt, stride, ot + r,     \
                        out_stride, 2, nt, FOLD);                                   \
            if (r < nrows)                                                          \
                MICRO_T(a + (size_t)r * nb, (size_t)nb, nb, yt, stride, ot + r,     \
                        out_stride, 1, nt, FOLD);                                   \
        }                                                                           \
    }

GEMM(q2_K, block_q2_K, 0)
GEMM(q3_K, block_q3_K, 1)
GEMM(q4_K, block_q4_K, 0)
GEMM(q5_K, block_q5_K, 0)
GEMM(q6_K, block_q6_K, 1)

#define SET(ID, fn) t[ID].gemm = fn
#else
#define SET(ID, fn) t[ID].gemm = NULL   /* portable: the row dots */
#endif

void LKV_ISA_FN(lkv_install_gemm_kquants)(lkv_traits *t) {
    SET(LKV_TYPE_Q2_K, q2_K_gemm);
    SET(LKV_TYPE_Q3_K, q3_K_gemm);
    SET(LKV_TYPE_Q4_K, q4_K_gemm);
    SET(LKV_TYPE_Q5_K, q5_K_gemm);
    SET(LKV_TYPE_Q6_K, q6_K_gemm);
}
