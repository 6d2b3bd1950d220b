/*
 * quant/float_types.c: the unquantized element types f32, f16 and bf16.
 *
 * Owns the row conversions to and from f32 and the float dot products
 * (compiled once per ISA level, quant/isa.h; the scalar conversions are in
 * float_scalars.c). A weight of one
 * of these types is dotted with an activation row of the same type (ggml's
 * vec_dot_type), accumulated in f32 lanes: 16 lanes (two 8-wide FMA chains)
 * with AVX2, 16 scalar fmaf partial sums in portable C, then the same
 * reduction tree: both paths give the same bits.
 * The row kernels take ny activation rows; the per-row sequence of operations
 * does not depend on ny, so vec_dot_rows equals vec_dot bit for bit.
 */
#include <math.h>

#include "quant/impl.h"
#include "quant/isa.h"
#include "quant/simd.h"

// ---------------------------------------------------------------- row conversions

static void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void f32_from_float(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void f16_to_float(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    int64_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#endif
    for (; i < n; i++) y[i] = h2f(x[i]);
}

static void f16_from_float(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    int64_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) y[i] = f2h(x[i]);
}

static void bf16_to_float(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = lkv_bf16_to_fp32(x[i]);
}

static void bf16_from_float(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = lkv_fp32_to_bf16(x[i]);
}

// ---------------------------------------------------------------- dots

/* Loads 8 elements of each float type as f32 lanes. */
#ifdef __AVX2__
LKV_INLINE __m256 load8_f32(const void *p, int i) { return _mm256_loadu_ps((const float *)p + i); }
LKV_INLINE __m256 load8_f16(const void *p, int i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
LKV_INLINE __m256 load8_bf16(const void *p, int i) {
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif
LKV_INLINE float load1_f32(const void *p, int i) { return ((const float *)p)[i]; }
LKV_INLINE float load1_f16(const void *p, int i) { return h2f(((const uint16_t *)p)[i]); }
LKV_INLINE float load1_bf16(const void *p, int i) { return lkv_bf16_to_fp32(((const uint16_t *)p)[i]); }

#ifdef __AVX2__
#define FLOAT_DOT_KERNEL(T)                                                              \
    LKV_INLINE void dot_rows_##T(int n, float *s, const void *x, const void *y,           \
                                 size_t stride, int ny) {                                 \
        __m256 acc0[4], acc1[4];                                                          \
        for (int r = 0; r < ny; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();             \
        int i = 0;                                                                        \
        for (; i + 16 <= n; i += 16) {                                                    \
            __m256 x0 = load8_##T(x, i), x1 = load8_##T(x, i + 8);                        \
            for (int r = 0; r < ny; r++) {                                                \
                const char *yr = (const char *)y + r * stride;                            \
                acc0[r] = _mm256_fmadd_ps(x0, load8_##T(yr, i), acc0[r]);                 \
                acc1[r] = _mm256_fmadd_ps(x1, load8_##T(yr, i + 8), acc1[r]);             \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < ny; r++) {                                                    \
            const char *yr = (const char *)y + r * stride;                                \
            float t = hsum_ps(_mm256_add_ps(acc0[r], acc1[r]));                           \
            for (int j = i; j < n; j++) t += load1_##T(x, j) * load1_##T(yr, j);          \
            s[r] = t;                                                                     \
        }                                                                                 \
    }
#else
#define FLOAT_DOT_KERNEL(T)                                                              \
    LKV_INLINE void dot_rows_##T(int n, float *s, const void *x, const void *y,           \
                                 size_t stride, int ny) {                                 \
        for (int r = 0; r < ny; r++) {                                                    \
            const char *yr = (const char *)y + r * stride;                                \
            float acc[16] = {0};                                                          \
            int i = 0;                                                                    \
            for (; i + 16 <= n; i += 16)                                                  \
                for (int k = 0; k < 16; k++) acc[k] = fmaf(load1_##T(x, i + k), load1_##T(yr, i + k), acc[k]); \
            for (int w = 8; w >= 1; w /= 2)                                               \
                for (int k = 0; k < w; k++) acc[k] += acc[k + w];                         \
            float t = acc[0];                                                             \
            for (; i < n; i++) t += load1_##T(x, i) * load1_##T(yr, i);                   \
            s[r] = t;                                                                     \
        }                                                                                 \
    }
#endif

#define FLOAT_DOT_ENTRIES(T)                                                             \
    FLOAT_DOT_KERNEL(T)                                                                   \
    static void T##_vec_dot(int n, float *s, const void *x, const void *y) {             \
        dot_rows_##T(n, s, x, y, 0, 1);                                                   \
    }                                                                                     \
    static void T##_vec_dot_rows(int n, float *s, const void *x, const void *y,          \
                                 size_t stride, int ny) {                                 \
        LKV_ROWS_DISPATCH(dot_rows_##T, n, s, x, y, stride, ny);                          \
    }

FLOAT_DOT_ENTRIES(f32)
FLOAT_DOT_ENTRIES(f16)
FLOAT_DOT_ENTRIES(bf16)

#define INSTALL(ID, T)                                                                   \
    t[ID].to_float = T##_to_float, t[ID].from_float = T##_from_float,                     \
    t[ID].vec_dot = T##_vec_dot, t[ID].vec_dot_rows = T##_vec_dot_rows

void LKV_ISA_FN(lkv_install_float_types)(lkv_traits *t) {
    INSTALL(LKV_TYPE_F32, f32);
    INSTALL(LKV_TYPE_F16, f16);
    INSTALL(LKV_TYPE_BF16, bf16);
}
