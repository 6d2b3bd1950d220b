/*
 * quant/gemm_iquants.c: the prefill GEMM tile of the i-quants against q8_K
 * activation rows (lkv_gemm_fn, quant/types.h).
 *
 * A tile of up to LKV_GEMM_ROWS weight rows is unpacked once per call into
 * `scratch` (idec: per 32-vector the level magnitudes as unsigned bytes, the
 * levels themselves as the sign source, the int16 scale of each element
 * pair; the super-block's d as a float) and then meets every token, 2 rows
 * x 4 tokens at a time: sumi = sum of madd(maddubs(|w|, sign(q, w)), ls),
 * exact (|pair| <= 2 * 127 * 127 < 2^15), the integer of dot_iquants.h.
 * iq4_xs unpacks with a byte shuffle of its level table; the other types
 * with the portable decoders of quant/iq_decode.h, once per row and
 * super-block for all the tokens (from 24 tokens on; fewer take the row dots).
 *
 * Bits: per super-block the f32 steps of dot_iquants.h, acc += (d * dy) *
 * (float)sumi, done for 4 tokens as the lanes of one vector (the same IEEE
 * multiplies and add per lane, no fusing), and the result acc * F: each
 * result equals vec_dot's bit for bit. The portable copy installs no tile.
 */
#include <string.h>

#include "quant/dot_iquants.h"
#include "quant/iq_decode.h"
#include "quant/isa.h"

#ifdef __AVX2__

/* One weight super-block, unpacked (at most LKV_GEMM_BYTES_PER_BLOCK bytes). */
typedef struct {
    __m256i mag[8];  /* |level| of elements 32v .. 32v+31 */
    __m256i sgn[8];  /* the levels (their signs move onto the activation) */
    __m256i sc[8];   /* int16 scale of each element pair of vector v */
    float d;
    float pad[7];
} idec;
_Static_assert(sizeof(idec) <= LKV_GEMM_BYTES_PER_BLOCK, "idec size");

/* the 4 sums of 4 vectors of 8 int32 (exact), vector j's in lane j */
LKV_INLINE __m128i hsum4_epi32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* R rows (1 or 2) of unpacked blocks (row 1 at a + a_stride) against T
 * tokens (1..4), all nb super-blocks: out[j * out_stride + r] */
LKV_INLINE void micro(const idec *a, size_t a_stride, int nb, const void *vy, size_t stride,
                      float *out, size_t out_stride, float F, const int R, const int T) {
    const block_q8_K *y[4];
    for (int j = 0; j < T; j++) y[j] = IQ_YROW(vy, stride, j);
    __m128 acc[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    for (int i = 0; i < nb; i++) {
        const idec *k[2] = {a + i, a + a_stride + i};
        __m256i sumi[2][4];
        for (int r = 0; r < R; r++)
            for (int j = 0; j < 4; j++) sumi[r][j] = _mm256_setzero_si256();
        for (int v = 0; v < 8; v++) {
            __m256i mag[2], sgn[2];
            for (int r = 0; r < R; r++) {
                mag[r] = _mm256_load_si256(&k[r]->mag[v]);
                sgn[r] = _mm256_load_si256(&k[r]->sgn[v]);
            }
            for (int j = 0; j < T; j++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(y[j][i].qs + 32 * v));
                for (int r = 0; r < R; r++) {
                    const __m256i p = _mm256_maddubs_epi16(mag[r], _mm256_sign_epi8(q, sgn[r]));
                    sumi[r][j] = _mm256_add_epi32(sumi[r][j], _mm256_madd_epi16(p, k[r]->sc[v]));
                }
            }
        }
        const __m128 dy4 = _mm_setr_ps(y[0][i].d, T > 1 ? y[1][i].d : 0.0f, T > 2 ? y[2][i].d : 0.0f,
                                       T > 3 ? y[3][i].d : 0.0f);
        for (int r = 0; r < R; r++) {
            const __m128 s = _mm_cvtepi32_ps(hsum4_epi32(sumi[r][0], sumi[r][1], sumi[r][2], sumi[r][3]));
            acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(k[r]->d), dy4), s));
        }
    }
    for (int r = 0; r < R; r++) {
        float o[4];
        _mm_storeu_ps(o, _mm_mul_ps(acc[r], _mm_set1_ps(F)));
        for (int j = 0; j < T; j++) out[(size_t)j * out_stride + r] = o[j];
    }
}

#define MICRO_T(a, as, nb, y, st, out, os, F, R, T)                                 \
    do {                                                                            \
        switch (T) {                                                                \
        case 1: micro(a, as, nb, y, st, out, os, F, R, 1); break;                   \
        case 2: micro(a, as, nb, y, st, out, os, F, R, 2); break;                   \
        case 3: micro(a, as, nb, y, st, out, os, F, R, 3); break;                   \
        default: micro(a, as, nb, y, st, out, os, F, R, 4); break;                  \
        }                                                                           \
    } while (0)

/* the tile against every token: rows in pairs, tokens in fours */
static void run_tile(const idec *a, int nrows, int nb, const void *y, size_t stride, int ny,
                     float *out, size_t out_stride, float F) {
    for (int t0 = 0; t0 < ny; t0 += 4) {
        const int nt = ny - t0 < 4 ? ny - t0 : 4;
        const char *yt = (const char *)y + (size_t)t0 * stride;
        float *ot = out + (size_t)t0 * out_stride;
        int r = 0;
        for (; r + 2 <= nrows; r += 2)
            MICRO_T(a + (size_t)r * nb, (size_t)nb, nb, yt, stride, ot + r, out_stride, F, 2, nt);
        if (r < nrows)
            MICRO_T(a + (size_t)r * nb, (size_t)nb, nb, yt, stride, ot + r, out_stride, F, 1, nt);
    }
}

/* levels w (256) and scales ls (16, one per 16 elements) -> k */
LKV_INLINE void put_levels(idec *k, const int8_t *w, const int16_t *ls, float d) {
    for (int v = 0; v < 8; v++) {
        const __m256i lv = _mm256_loadu_si256((const __m256i *)(w + 32 * v));
        _mm256_store_si256(&k->mag[v], _mm256_abs_epi8(lv));
        _mm256_store_si256(&k->sgn[v], lv);
        _mm256_store_si256(&k->sc[v], _mm256_set_m128i(_mm_set1_epi16(ls[2 * v + 1]),
                                                       _mm_set1_epi16(ls[2 * v])));
    }
    k->d = d;
}

/* iq4_xs: the 16 levels by a byte shuffle; one scale per 32 elements */
LKV_INLINE void unpack_iq4_xs(idec *k, const block_iq4_xs *x) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lkv_iq4nl_values));
    for (int v = 0; v < 8; v++) {
        const int ls = (((x->scales_l[v / 2] >> 4 * (v % 2)) & 15) | ((x->scales_h >> 2 * v) & 3) << 4) - 32;
        const __m256i lv = _mm256_shuffle_epi8(table, unpack_nibbles16(x->qs + 16 * v));
        _mm256_store_si256(&k->mag[v], _mm256_abs_epi8(lv));
        _mm256_store_si256(&k->sgn[v], lv);
        _mm256_store_si256(&k->sc[v], _mm256_set1_epi16((short)ls));
    }
    k->d = IQ_D(x);
}

#define UNPACK_DEC(t, DOF)                                                          \
    LKV_INLINE void unpack_##t(idec *k, const block_##t *x) {                       \
        int8_t w[QK_K];                                                             \
        int16_t ls[16];                                                             \
        dec_##t(x, w, ls);                                                          \
        put_levels(k, w, ls, DOF(x));                                               \
    }
UNPACK_DEC(iq2_xxs, IQ_D)
UNPACK_DEC(iq2_xs, IQ_D)
UNPACK_DEC(iq2_s, IQ_D)
UNPACK_DEC(iq3_xxs, IQ_D)
UNPACK_DEC(iq3_s, IQ_D)
UNPACK_DEC(iq1_s, IQ_D)
UNPACK_DEC(iq1_m, IQ_D_IQ1_M)

/* the row dots, 4 tokens at a time (calls too small to repay an unpacking) */
static void by_rows(lkv_vec_dot_rows_fn rows_fn, int n, float *out, size_t out_stride,
                    const void *x, size_t x_stride, int nrows, const void *y, size_t stride,
                    int ny) {
    for (int r = 0; r < nrows; r++)
        for (int t0 = 0; t0 < ny; t0 += 4) {
            const int nt = ny - t0 < 4 ? ny - t0 : 4;
            float s[4];
            rows_fn(n, s, (const char *)x + (size_t)r * x_stride, (const char *)y + (size_t)t0 * stride,
                    stride, nt);
            for (int j = 0; j < nt; j++) out[(size_t)(t0 + j) * out_stride + r] = s[j];
        }
}

/* MIN_NY: fewer tokens take the row dots (the grid types' scalar unpacking
 * repays itself from about 20 tokens on, iq4_xs's shuffle from 8) */
#define GEMM(t, F, MIN_NY)                                                          \
    static void t##_gemm(int n, float *out, size_t out_stride, const void *x,       \
                         size_t x_stride, int nrows, const void *y, size_t stride,  \
                         int ny, void *scratch) {                                   \
        if (ny < MIN_NY) {                                                          \
            by_rows(lkv_##t##_vec_dot_rows, n, out, out_stride, x, x_stride, nrows, \
                    y, stride, ny);                                                 \
            return;                                                                 \
        }                                                                           \
        const int nb = n / QK_K;                                                    \
        idec *a = scratch;                                                          \
        for (int r = 0; r < nrows; r++) {                                           \
            const block_##t *xr = (const block_##t *)((const char *)x + (size_t)r * x_stride); \
            for (int i = 0; i < nb; i++) unpack_##t(a + (size_t)r * nb + i, &xr[i]); \
        }                                                                           \
        run_tile(a, nrows, nb, y, stride, ny, out, out_stride, F);                  \
    }
GEMM(iq2_xxs, 0.125f, 24)
GEMM(iq2_xs, 0.125f, 24)
GEMM(iq2_s, 0.125f, 24)
GEMM(iq3_xxs, 0.25f, 24)
GEMM(iq3_s, 1.0f, 24)
GEMM(iq1_s, 0.125f, 24)
GEMM(iq1_m, 0.125f, 24)
GEMM(iq4_xs, 1.0f, 0)

#define SET(ID, fn) t[ID].gemm = fn
#else
#define SET(ID, fn) t[ID].gemm = NULL   /* portable: the row dots */
#endif

void LKV_ISA_FN(lkv_install_gemm_iquants)(lkv_traits *t) {
    SET(LKV_TYPE_IQ2_XXS, iq2_xxs_gemm);
    SET(LKV_TYPE_IQ2_XS, iq2_xs_gemm);
    SET(LKV_TYPE_IQ2_S, iq2_s_gemm);
    SET(LKV_TYPE_IQ3_XXS, iq3_xxs_gemm);
    SET(LKV_TYPE_IQ3_S, iq3_s_gemm);
    SET(LKV_TYPE_IQ1_S, iq1_s_gemm);
    SET(LKV_TYPE_IQ1_M, iq1_m_gemm);
    SET(LKV_TYPE_IQ4_XS, iq4_xs_gemm);
}
