/*
 * quant/dot_legacy.c: dot products of the 32-element block formats against
 * their activation format: q4_0, q5_0, q8_0, iq4_nl with q8_0; q4_1, q5_1
 * with q8_1. (q4_0 here is the KV cache rows' dot, lkv_q4_0_kv_dot; q4_0
 * weights use dot_blocks.c's block order.)
 *
 * Per block the integer dot sum(qx * qy) is exact; it is scaled by dx * dy in
 * f32 and accumulated (formats with a minimum add m * s, where s = dy *
 * sum(qy) is stored in the q8_1 block). The AVX2 path expands a block's codes
 * to 32 bytes and uses the u8 x s8 multiply-add (VNNI where present), 8 f32
 * lanes per accumulator; the portable path sums the block in int and
 * does the same float steps in scalar form (8 fmaf chains, the same
 * reduction tree), so the two give the same bits. Every kernel takes up to 4 activation rows: the weight block
 * is unpacked once and each row's accumulator sees the same operations as in
 * vec_dot, so vec_dot_rows results equal vec_dot's bit for bit.
 */
#include <math.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/isa.h"
#include "quant/simd.h"

#define YROW(T, vy, stride, r) ((const T *)((const char *)(vy) + (size_t)(r) * (stride)))

#define DOT_ENTRIES(T, kernel)                                                           \
    static void T##_vec_dot(int n, float *s, const void *x, const void *y) {             \
        kernel(n, s, x, y, 0, 1);                                                         \
    }                                                                                     \
    static void T##_vec_dot_rows(int n, float *s, const void *x, const void *y,          \
                                 size_t stride, int ny) {                                 \
        LKV_ROWS_DISPATCH(kernel, n, s, x, y, stride, ny);                                \
    }
#define INSTALL(ID, T) t[ID].vec_dot = T##_vec_dot, t[ID].vec_dot_rows = T##_vec_dot_rows, \
                       t[ID].vec_dot_tile = T##_vec_dot_tile

#ifdef __AVX2__
// ---------------------------------------------------------------- AVX2

#include "quant/legacy_avx2.h"

/* Weight blocks against q8_0 rows: `expand` turns block i into 32 signed
 * bytes (element order 0..31), the dot is signed x signed. */
#define KERNEL_S8_Q8_0(name, BT, expand)                                                 \
    LKV_INLINE void name(int n, float *s, const void *vx, const void *vy, size_t stride,  \
                         int ny) {                                                        \
        const BT *x = vx;                                                                 \
        const block_q8_0 *y[4];                                                           \
        __m256 acc[4];                                                                    \
        for (int r = 0; r < ny; r++) {                                                    \
            y[r] = YROW(block_q8_0, vy, stride, r);                                       \
            acc[r] = _mm256_setzero_ps();                                                 \
        }                                                                                 \
        for (int i = 0; i < n / 32; i++) {                                                \
            const __m256i qx = expand(&x[i]);                                             \
            const float dx = h2f(x[i].d);                                                 \
            for (int r = 0; r < ny; r++) {                                                \
                const __m256i qy = _mm256_loadu_si256((const __m256i *)y[r][i].qs);       \
                const __m256 p = _mm256_cvtepi32_ps(dot_s8s8(qx, qy));                    \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * h2f(y[r][i].d)), p, acc[r]); \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < ny; r++) s[r] = hsum_ps(acc[r]);                              \
    }

/* Weight blocks with a minimum against q8_1 rows: `expand` gives 32 unsigned
 * codes; the minimum contributes m * s per block. (d, m) of the weight and
 * (d, s) of the activation are adjacent f16 pairs: one conversion and one
 * multiply give [dx * dy, m * s]; lane 1 accumulates the minimum's term. */
#define KERNEL_U8_Q8_1(name, BT, expand)                                                 \
    LKV_INLINE void name(int n, float *s, const void *vx, const void *vy, size_t stride,  \
                         int ny) {                                                        \
        const BT *x = vx;                                                                 \
        const block_q8_1 *y[4];                                                           \
        __m256 acc[4];                                                                    \
        __m128 summ[4];                                                                   \
        for (int r = 0; r < ny; r++) {                                                    \
            y[r] = YROW(block_q8_1, vy, stride, r);                                       \
            acc[r] = _mm256_setzero_ps();                                                 \
            summ[r] = _mm_setzero_ps();                                                   \
        }                                                                                 \
        for (int i = 0; i < n / 32; i++) {                                                \
            const __m256i qx = expand(&x[i]);                                             \
            const __m128 dmx = _mm_cvtph_ps(_mm_cvtsi32_si128(load_u32(&x[i].d)));        \
            for (int r = 0; r < ny; r++) {                                                \
                const __m256i qy = _mm256_loadu_si256((const __m256i *)y[r][i].qs);       \
                const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(qx, qy));                    \
                const __m128 f = _mm_mul_ps(dmx, _mm_cvtph_ps(_mm_cvtsi32_si128(load_u32(&y[r][i].d)))); \
                acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), p, acc[r]);           \
                summ[r] = _mm_add_ps(summ[r], f);                                         \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < ny; r++)                                                      \
            s[r] = hsum_ps(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summ[r]));             \
    }

KERNEL_S8_Q8_0(k_q4_0, block_q4_0, expand_q4_0)
KERNEL_S8_Q8_0(k_q5_0, block_q5_0, expand_q5_0)
KERNEL_S8_Q8_0(k_q8_0, block_q8_0, expand_q8_0)
KERNEL_S8_Q8_0(k_iq4_nl, block_iq4_nl, expand_iq4_nl)
KERNEL_U8_Q8_1(k_q4_1, block_q4_1, expand_q4_1)
KERNEL_U8_Q8_1(k_q5_1, block_q5_1, expand_q5_1)

/* Tiles (lkv_vec_dot_tile_fn): the activation rows' f16 scales (and q8_1's
 * sums) converted once for all the weight rows of the tile; per row the same
 * operations as the kernels above, so the same bits. Rows of more than
 * TILE_MAX_BLOCKS blocks take the row kernel. */
#define TILE_MAX_BLOCKS 1024

#define TILE_S8_Q8_0(name, BT, expand)                                                   \
    LKV_INLINE void name(int n, float *out, size_t out_stride, const void *vx,           \
                         size_t x_stride, int nrows, const void *vy, size_t stride, int ny) { \
        const int nb = n / 32;                                                            \
        const block_q8_0 *y[4];                                                           \
        float dy[4][TILE_MAX_BLOCKS];                                                     \
        for (int r = 0; r < ny; r++) {                                                    \
            y[r] = YROW(block_q8_0, vy, stride, r);                                       \
            for (int i = 0; i < nb; i++) dy[r][i] = h2f(y[r][i].d);                       \
        }                                                                                 \
        for (int row = 0; row < nrows; row++) {                                           \
            const BT *x = (const BT *)((const char *)vx + (size_t)row * x_stride);        \
            __m256 acc[4];                                                                \
            for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();                    \
            for (int i = 0; i < nb; i++) {                                                \
                const __m256i qx = expand(&x[i]);                                         \
                const float dx = h2f(x[i].d);                                             \
                for (int r = 0; r < ny; r++) {                                            \
                    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[r][i].qs);   \
                    const __m256 p = _mm256_cvtepi32_ps(dot_s8s8(qx, qy));                \
                    acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[r][i]), p, acc[r]);   \
                }                                                                         \
            }                                                                             \
            for (int r = 0; r < ny; r++) out[(size_t)r * out_stride + row] = hsum_ps(acc[r]); \
        }                                                                                 \
    }

#define TILE_U8_Q8_1(name, BT, expand)                                                   \
    LKV_INLINE void name(int n, float *out, size_t out_stride, const void *vx,           \
                         size_t x_stride, int nrows, const void *vy, size_t stride, int ny) { \
        const int nb = n / 32;                                                            \
        const block_q8_1 *y[4];                                                           \
        float ds[4][TILE_MAX_BLOCKS][2];   /* (d, s) of each block, as floats */          \
        for (int r = 0; r < ny; r++) {                                                    \
            y[r] = YROW(block_q8_1, vy, stride, r);                                       \
            for (int i = 0; i < nb; i++) {                                                \
                ds[r][i][0] = h2f(y[r][i].d);                                             \
                ds[r][i][1] = h2f(y[r][i].s);                                             \
            }                                                                             \
        }                                                                                 \
        for (int row = 0; row < nrows; row++) {                                           \
            const BT *x = (const BT *)((const char *)vx + (size_t)row * x_stride);        \
            __m256 acc[4];                                                                \
            __m128 summ[4];                                                               \
            for (int r = 0; r < ny; r++) {                                                \
                acc[r] = _mm256_setzero_ps();                                             \
                summ[r] = _mm_setzero_ps();                                               \
            }                                                                             \
            for (int i = 0; i < nb; i++) {                                                \
                const __m256i qx = expand(&x[i]);                                         \
                const __m128 dmx = _mm_cvtph_ps(_mm_cvtsi32_si128(load_u32(&x[i].d)));    \
                for (int r = 0; r < ny; r++) {                                            \
                    const __m256i qy = _mm256_loadu_si256((const __m256i *)y[r][i].qs);   \
                    const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(qx, qy));                \
                    const __m128 f = _mm_mul_ps(dmx, _mm_castpd_ps(_mm_load_sd((const double *)ds[r][i]))); \
                    acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), p, acc[r]);       \
                    summ[r] = _mm_add_ps(summ[r], f);                                     \
                }                                                                         \
            }                                                                             \
            for (int r = 0; r < ny; r++)                                                  \
                out[(size_t)r * out_stride + row] =                                       \
                    hsum_ps(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(summ[r]));            \
        }                                                                                 \
    }

TILE_S8_Q8_0(t_q5_0, block_q5_0, expand_q5_0)
TILE_S8_Q8_0(t_q8_0, block_q8_0, expand_q8_0)
TILE_S8_Q8_0(t_iq4_nl, block_iq4_nl, expand_iq4_nl)
TILE_U8_Q8_1(t_q4_1, block_q4_1, expand_q4_1)
TILE_U8_Q8_1(t_q5_1, block_q5_1, expand_q5_1)

#define TILE_ENTRY(T, tile, kernel)                                                      \
    static void T##_vec_dot_tile(int n, float *out, size_t out_stride, const void *x,    \
                                 size_t x_stride, int nrows, const void *y, size_t stride, \
                                 int ny) {                                                \
        if (n / 32 > TILE_MAX_BLOCKS) {                                                   \
            LKV_TILE_BY_ROWS(kernel, n, out, out_stride, x, x_stride, nrows, y, stride, ny); \
            return;                                                                       \
        }                                                                                 \
        switch (ny) {                                                                     \
        case 1: tile(n, out, out_stride, x, x_stride, nrows, y, stride, 1); break;        \
        case 2: tile(n, out, out_stride, x, x_stride, nrows, y, stride, 2); break;        \
        case 3: tile(n, out, out_stride, x, x_stride, nrows, y, stride, 3); break;        \
        default: tile(n, out, out_stride, x, x_stride, nrows, y, stride, 4); break;       \
        }                                                                                 \
    }

#else
// ---------------------------------------------------------------- portable C

/* Code j (0..31) of a block, already offset to its signed value for the
 * symmetric formats. */
static inline int code_q4_0(const block_q4_0 *b, int j) {
    return (j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4) - 8;
}
static inline int code_q4_1(const block_q4_1 *b, int j) {
    return j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4;
}
static inline int fifth(const uint8_t qh[4], int j) { return (qh[j >> 3] >> (j & 7)) & 1; }
static inline int code_q5_0(const block_q5_0 *b, int j) {
    return ((j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4) | fifth(b->qh, j) << 4) - 16;
}
static inline int code_q5_1(const block_q5_1 *b, int j) {
    return (j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4) | fifth(b->qh, j) << 4;
}
static inline int code_q8_0(const block_q8_0 *b, int j) { return b->qs[j]; }
static inline int code_iq4_nl(const block_iq4_nl *b, int j) {
    return lkv_iq4nl_values[j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4];
}

/* The AVX2 path's float steps in scalar form: lane l holds the exact sum of
 * elements 4l..4l+3 of each block, scaled with fmaf into its own chain, and
 * the chains end in hsum_ps's tree. */
LKV_INLINE float fold8(const float c[8]) {
    return ((c[0] + c[4]) + (c[2] + c[6])) + ((c[1] + c[5]) + (c[3] + c[7]));
}

#define KERNEL_S8_Q8_0(name, BT, code)                                                   \
    static void name(int n, float *s, const void *vx, const void *vy, size_t stride,      \
                     int ny) {                                                            \
        const BT *x = vx;                                                                 \
        for (int r = 0; r < ny; r++) {                                                    \
            const block_q8_0 *y = YROW(block_q8_0, vy, stride, r);                        \
            float acc[8] = {0};                                                           \
            for (int i = 0; i < n / 32; i++) {                                            \
                const float f = h2f(x[i].d) * h2f(y[i].d);                                \
                for (int l = 0; l < 8; l++) {                                             \
                    int sumi = 0;                                                         \
                    for (int j = 4 * l; j < 4 * l + 4; j++) sumi += code(&x[i], j) * y[i].qs[j]; \
                    acc[l] = fmaf(f, (float)sumi, acc[l]);                                \
                }                                                                         \
            }                                                                             \
            s[r] = fold8(acc);                                                            \
        }                                                                                 \
    }

/* the minimum's term m * s is summed apart, as the AVX2 path's lane 1 */
#define KERNEL_U8_Q8_1(name, BT, code)                                                   \
    static void name(int n, float *s, const void *vx, const void *vy, size_t stride,      \
                     int ny) {                                                            \
        const BT *x = vx;                                                                 \
        for (int r = 0; r < ny; r++) {                                                    \
            const block_q8_1 *y = YROW(block_q8_1, vy, stride, r);                        \
            float acc[8] = {0}, summ = 0.0f;                                              \
            for (int i = 0; i < n / 32; i++) {                                            \
                const float f = h2f(x[i].d) * h2f(y[i].d);                                \
                for (int l = 0; l < 8; l++) {                                             \
                    int sumi = 0;                                                         \
                    for (int j = 4 * l; j < 4 * l + 4; j++) sumi += code(&x[i], j) * y[i].qs[j]; \
                    acc[l] = fmaf(f, (float)sumi, acc[l]);                                \
                }                                                                         \
                summ += h2f(x[i].m) * h2f(y[i].s);                                        \
            }                                                                             \
            s[r] = fold8(acc) + summ;                                                     \
        }                                                                                 \
    }

KERNEL_S8_Q8_0(k_q4_0, block_q4_0, code_q4_0)
KERNEL_S8_Q8_0(k_q5_0, block_q5_0, code_q5_0)
KERNEL_S8_Q8_0(k_q8_0, block_q8_0, code_q8_0)
KERNEL_S8_Q8_0(k_iq4_nl, block_iq4_nl, code_iq4_nl)
KERNEL_U8_Q8_1(k_q4_1, block_q4_1, code_q4_1)
KERNEL_U8_Q8_1(k_q5_1, block_q5_1, code_q5_1)

#define TILE_ENTRY(T, tile, kernel)                                                      \
    static void T##_vec_dot_tile(int n, float *out, size_t out_stride, const void *x,    \
                                 size_t x_stride, int nrows, const void *y, size_t stride, \
                                 int ny) {                                                \
        LKV_TILE_BY_ROWS(kernel, n, out, out_stride, x, x_stride, nrows, y, stride, ny);  \
    }
#endif

// ---------------------------------------------------------------- entry points

/* q4_0 weights take dot_blocks.c's block order; this 8-lane one is the KV rows' */
static void q4_0_kv_dot(int n, float *s, const void *x, const void *y) { k_q4_0(n, s, x, y, 0, 1); }
DOT_ENTRIES(q4_1, k_q4_1)
DOT_ENTRIES(q5_0, k_q5_0)
DOT_ENTRIES(q5_1, k_q5_1)
DOT_ENTRIES(q8_0, k_q8_0)
DOT_ENTRIES(iq4_nl, k_iq4_nl)
TILE_ENTRY(q4_1, t_q4_1, k_q4_1)
TILE_ENTRY(q5_0, t_q5_0, k_q5_0)
TILE_ENTRY(q5_1, t_q5_1, k_q5_1)
TILE_ENTRY(q8_0, t_q8_0, k_q8_0)
TILE_ENTRY(iq4_nl, t_iq4_nl, k_iq4_nl)

void LKV_ISA_FN(lkv_install_dot_legacy)(lkv_traits *t) {
    t[LKV_TYPE_Q4_0].kv_dot = q4_0_kv_dot;
    INSTALL(LKV_TYPE_Q4_1, q4_1);
    INSTALL(LKV_TYPE_Q5_0, q5_0);
    INSTALL(LKV_TYPE_Q5_1, q5_1);
    INSTALL(LKV_TYPE_Q8_0, q8_0);
    INSTALL(LKV_TYPE_IQ4_NL, iq4_nl);
}
