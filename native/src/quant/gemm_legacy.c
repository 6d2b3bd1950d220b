/*
 * quant/gemm_legacy.c: the prefill GEMM tiles of the 32-element block formats
 * that keep dot_legacy.c's 8-lane order: q8_0, q5_0, iq4_nl against q8_0
 * rows, q4_1, q5_1 against q8_1 rows (lkv_gemm_fn, quant/types.h).
 *
 * A tile of up to LKV_GEMM_ROWS weight rows is unpacked once per call into
 * `scratch`: per block the codes as 32 bytes (the symmetric formats: their
 * magnitudes and the signed codes as the sign source, so a block's dot is one
 * sign, one u8 x s8 multiply-add and one widening per token; the formats with
 * a minimum: the unsigned codes), and the block's f16 scale(s) as floats. Per
 * token group the activation rows' scales are converted once for all the
 * rows. Then 2 rows x 4 tokens per inner loop, the 8 accumulators held
 * across the row's blocks.
 *
 * Bits: per (row, token) and block the exact 8 int32 lanes of dot_legacy.c
 * (lane l = elements 4l .. 4l+3), one fma with dx * dy, the minimum's term
 * m * s summed apart in block order, hsum_ps at the end: the operations of
 * KERNEL_S8_Q8_0 / KERNEL_U8_Q8_1 in their order, so vec_dot's bits. Rows
 * of more than MAX_BLOCKS blocks and the portable copy take the row dots.
 */
#include <string.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/isa.h"
#include "quant/simd.h"

#ifdef __AVX2__
#include "quant/legacy_avx2.h"

#define MAX_BLOCKS 1024   /* cols <= 32768 */

/* One unpacked weight block; a row's blocks are followed by its scales. */
typedef struct {
    __m256i mag;   /* |code| (symmetric) or the code (with a minimum) */
    __m256i sgn;   /* the signed code (symmetric; unused otherwise) */
} ldec;
/* a row: nb ldec, then nb (d, m) float pairs: 72 bytes per block, the row
 * rounded up to 32 bytes (the next row's vectors are aligned loads) */
_Static_assert(8 * (sizeof(ldec) + 8) + 32 <= LKV_GEMM_BYTES_PER_BLOCK, "ldec size");

#define ROW_BYTES(nb) (((size_t)(nb) * (sizeof(ldec) + 8) + 31) / 32 * 32)

/* per token group: the activation rows' (d, s) as floats, (4, MAX_BLOCKS, 2) */
typedef struct {
    float ds[4][MAX_BLOCKS][2];
} yscales;

/* R rows (1 or 2; row 1 at a + a_stride bytes) against T tokens (1..4) of
 * nb blocks: out[j * out_stride + r]. MIN: the q8_1 formats. */
LKV_INLINE void micro(const char *a, size_t a_stride, int nb, const yscales *ys, const void *vy,
                      size_t stride, float *out, size_t out_stride, const int R, const int T,
                      const int MIN) {
    const block_q8_0 *y0[4];
    const block_q8_1 *y1[4];
    for (int j = 0; j < T; j++) {
        y0[j] = (const block_q8_0 *)((const char *)vy + (size_t)j * stride);
        y1[j] = (const block_q8_1 *)((const char *)vy + (size_t)j * stride);
    }
    const ldec *k[2] = {(const ldec *)a, (const ldec *)(a + a_stride)};
    const float *dm[2] = {(const float *)(k[0] + nb), (const float *)(k[1] + nb)};
    __m256 acc[2][4];
    __m128 summ[2];
    for (int r = 0; r < R; r++) {
        summ[r] = _mm_setzero_ps();
        for (int j = 0; j < T; j++) acc[r][j] = _mm256_setzero_ps();
    }
    for (int i = 0; i < nb; i++) {
        __m256i mag[2], sgn[2];
        __m256 dx[2];
        for (int r = 0; r < R; r++) {
            mag[r] = _mm256_load_si256(&k[r][i].mag);
            if (!MIN) sgn[r] = _mm256_load_si256(&k[r][i].sgn);
            dx[r] = _mm256_broadcast_ss(&dm[r][2 * i]);
        }
        for (int j = 0; j < T; j++) {
            const __m256i q = MIN ? _mm256_loadu_si256((const __m256i *)y1[j][i].qs)
                                  : _mm256_loadu_si256((const __m256i *)y0[j][i].qs);
            const __m256 dy = _mm256_broadcast_ss(&ys->ds[j][i][0]);
            for (int r = 0; r < R; r++) {
                const __m256i qs = MIN ? q : _mm256_sign_epi8(q, sgn[r]);
                const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(mag[r], qs));
                acc[r][j] = _mm256_fmadd_ps(_mm256_mul_ps(dx[r], dy), p, acc[r][j]);
            }
        }
        if (MIN) {   /* m * s per token, 4 tokens as lanes, added in block order */
            const __m128 s4 = _mm_setr_ps(ys->ds[0][i][1], T > 1 ? ys->ds[1][i][1] : 0.0f,
                                          T > 2 ? ys->ds[2][i][1] : 0.0f, T > 3 ? ys->ds[3][i][1] : 0.0f);
            for (int r = 0; r < R; r++)
                summ[r] = _mm_add_ps(summ[r], _mm_mul_ps(_mm_set1_ps(dm[r][2 * i + 1]), s4));
        }
    }
    for (int r = 0; r < R; r++) {
        float m[4];
        _mm_storeu_ps(m, summ[r]);
        for (int j = 0; j < T; j++)
            out[(size_t)j * out_stride + r] = MIN ? hsum_ps(acc[r][j]) + m[j] : hsum_ps(acc[r][j]);
    }
}

#define MICRO_T(a, as, nb, ys, y, st, out, os, R, T, MIN)                           \
    do {                                                                            \
        switch (T) {                                                                \
        case 1: micro(a, as, nb, ys, y, st, out, os, R, 1, MIN); break;             \
        case 2: micro(a, as, nb, ys, y, st, out, os, R, 2, MIN); break;             \
        case 3: micro(a, as, nb, ys, y, st, out, os, R, 3, MIN); break;             \
        default: micro(a, as, nb, ys, y, st, out, os, R, 4, MIN); break;            \
        }                                                                           \
    } while (0)

/* the unpacked tile against every token: rows in pairs, tokens in fours */
LKV_INLINE void run_tile(const char *a, int nrows, int nb, const void *y, size_t stride, int ny,
                         float *out, size_t out_stride, const int MIN) {
    yscales ys;
    const size_t rb = ROW_BYTES(nb);
    for (int t0 = 0; t0 < ny; t0 += 4) {
        const int nt = ny - t0 < 4 ? ny - t0 : 4;
        const char *yt = (const char *)y + (size_t)t0 * stride;
        for (int j = 0; j < nt; j++)
            for (int i = 0; i < nb; i++) {
                if (MIN) {
                    const block_q8_1 *b = (const block_q8_1 *)(yt + (size_t)j * stride) + i;
                    ys.ds[j][i][0] = h2f(b->d);
                    ys.ds[j][i][1] = h2f(b->s);
                } else {
                    ys.ds[j][i][0] = h2f(((const block_q8_0 *)(yt + (size_t)j * stride) + i)->d);
                }
            }
        float *ot = out + (size_t)t0 * out_stride;
        int r = 0;
        for (; r + 2 <= nrows; r += 2)
            MICRO_T(a + r * rb, rb, nb, &ys, yt, stride, ot + r, out_stride, 2, nt, MIN);
        if (r < nrows)
            MICRO_T(a + r * rb, rb, nb, &ys, yt, stride, ot + r, out_stride, 1, nt, MIN);
    }
}

/* rows too wide for the activation scales' buffer: the row dots */
static void by_rows(int type, int n, float *out, size_t out_stride, const void *x, size_t x_stride,
                    int nrows, const void *y, size_t stride, int ny) {
    const lkv_traits *t = lkv_type_traits(type);
    for (int r = 0; r < nrows; r++)
        for (int t0 = 0; t0 < ny; t0 += 4) {
            const int nt = ny - t0 < 4 ? ny - t0 : 4;
            float s[4];
            t->vec_dot_rows(n, s, (const char *)x + (size_t)r * x_stride,
                            (const char *)y + (size_t)t0 * stride, stride, nt);
            for (int j = 0; j < nt; j++) out[(size_t)(t0 + j) * out_stride + r] = s[j];
        }
}

/* symmetric formats: expand gives the signed codes; d only */
#define GEMM_S8(T_, BT, ID)                                                         \
    static void T_##_gemm(int n, float *out, size_t out_stride, const void *x,      \
                          size_t x_stride, int nrows, const void *y, size_t stride, \
                          int ny, void *scratch) {                                  \
        const int nb = n / 32;                                                      \
        if (nb > MAX_BLOCKS) {                                                      \
            by_rows(ID, n, out, out_stride, x, x_stride, nrows, y, stride, ny);     \
            return;                                                                 \
        }                                                                           \
        for (int r = 0; r < nrows; r++) {                                           \
            const BT *xr = (const BT *)((const char *)x + (size_t)r * x_stride);    \
            ldec *k = (ldec *)((char *)scratch + r * ROW_BYTES(nb));                \
            float *dm = (float *)(k + nb);                                          \
            for (int i = 0; i < nb; i++) {                                          \
                const __m256i c = expand_##T_(&xr[i]);                              \
                _mm256_store_si256(&k[i].mag, _mm256_sign_epi8(c, c));              \
                _mm256_store_si256(&k[i].sgn, c);                                   \
                dm[2 * i] = h2f(xr[i].d);                                           \
                dm[2 * i + 1] = 0.0f;                                               \
            }                                                                       \
        }                                                                           \
        run_tile(scratch, nrows, nb, y, stride, ny, out, out_stride, 0);            \
    }

/* formats with a minimum: unsigned codes; (d, m) */
#define GEMM_U8(T_, BT, ID)                                                         \
    static void T_##_gemm(int n, float *out, size_t out_stride, const void *x,      \
                          size_t x_stride, int nrows, const void *y, size_t stride, \
                          int ny, void *scratch) {                                  \
        const int nb = n / 32;                                                      \
        if (nb > MAX_BLOCKS) {                                                      \
            by_rows(ID, n, out, out_stride, x, x_stride, nrows, y, stride, ny);     \
            return;                                                                 \
        }                                                                           \
        for (int r = 0; r < nrows; r++) {                                           \
            const BT *xr = (const BT *)((const char *)x + (size_t)r * x_stride);    \
            ldec *k = (ldec *)((char *)scratch + r * ROW_BYTES(nb));                \
            float *dm = (float *)(k + nb);                                          \
            for (int i = 0; i < nb; i++) {                                          \
                _mm256_store_si256(&k[i].mag, expand_##T_(&xr[i]));                 \
                dm[2 * i] = h2f(xr[i].d);                                           \
                dm[2 * i + 1] = h2f(xr[i].m);                                       \
            }                                                                       \
        }                                                                           \
        run_tile(scratch, nrows, nb, y, stride, ny, out, out_stride, 1);            \
    }

GEMM_S8(q8_0, block_q8_0, LKV_TYPE_Q8_0)
GEMM_S8(q5_0, block_q5_0, LKV_TYPE_Q5_0)
GEMM_S8(iq4_nl, block_iq4_nl, LKV_TYPE_IQ4_NL)
GEMM_U8(q4_1, block_q4_1, LKV_TYPE_Q4_1)
GEMM_U8(q5_1, block_q5_1, LKV_TYPE_Q5_1)

#define SET(ID, fn) t[ID].gemm = fn
#else
#define SET(ID, fn) t[ID].gemm = NULL   /* portable: the row dots */
#endif

void LKV_ISA_FN(lkv_install_gemm_legacy)(lkv_traits *t) {
    SET(LKV_TYPE_Q8_0, q8_0_gemm);
    SET(LKV_TYPE_Q5_0, q5_0_gemm);
    SET(LKV_TYPE_IQ4_NL, iq4_nl_gemm);
    SET(LKV_TYPE_Q4_1, q4_1_gemm);
    SET(LKV_TYPE_Q5_1, q5_1_gemm);
}
