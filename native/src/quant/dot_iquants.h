/*
 * quant/dot_iquants.h: what the two paths of the i-quant dots share (the
 * portable C of dot_iquants.c, the AVX2 of dot_iquants_avx2.c).
 *
 * A weight super-block against a q8_K activation block reduces to one exact
 * integer: sumi = sum over sub-blocks of ls * (dot of the integer levels with
 * the activation codes), where ls is the odd integer sub-block scale and the
 * levels are the grid values with their signs (iq1: 8 * grid +- 1, the delta
 * folded in). The super-block then adds (d * dy) * (float)sumi to an f32
 * accumulator, and the row's result is acc * F with F the power of two that
 * the integer form leaves out (iq2: 1/8, iq3_xxs: 1/4, iq1: 1/8, iq3_s and
 * iq4_xs: 1). Both paths compute sumi exactly and run these f32 operations in
 * the same order, so their results are bit-identical (and vec_dot_rows equals
 * vec_dot bit for bit).
 */
#ifndef LKV_QUANT_DOT_IQUANTS_H
#define LKV_QUANT_DOT_IQUANTS_H

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/iq_tables.h"
#include "quant/simd.h"

#define IQ_YROW(vy, stride, r) ((const block_q8_K *)((const char *)(vy) + (size_t)(r) * (stride)))

/* f32 super-block scale of each type */
LKV_INLINE float iq_d_std(uint16_t d) { return h2f(d); }
LKV_INLINE float iq_d_iq1_m(const block_iq1_m *b) { return h2f(block_iq1_m_d(b)); }
#define IQ_D(b) iq_d_std((b)->d)
#define IQ_D_IQ1_M(b) iq_d_iq1_m(b)

/* One row kernel from a block function BLOCK(const BT *x, const block_q8_K
 * *y[4], int ny, int32_t sumi[4]); ATTR is empty or LKV_AVX2. */
#define IQ_ROW_KERNEL(name, ATTR, BT, DOF, BLOCK, F)                                       \
    ATTR static inline __attribute__((always_inline)) void name##_k(                           \
        int n, float *s, const void *vx, const void *vy, size_t stride, int ny) {             \
        const BT *x = vx;                                                                 \
        const block_q8_K *y[4];                                                           \
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                          \
        for (int r = 0; r < ny; r++) y[r] = IQ_YROW(vy, stride, r);                       \
        for (int i = 0; i < n / QK_K; i++) {                                              \
            const block_q8_K *yb[4];                                                      \
            int32_t sumi[4];                                                              \
            for (int r = 0; r < ny; r++) yb[r] = &y[r][i];                                \
            BLOCK(&x[i], yb, ny, sumi);                                                   \
            const float d = DOF(&x[i]);                                                   \
            for (int r = 0; r < ny; r++) acc[r] += (d * yb[r]->d) * (float)sumi[r];       \
        }                                                                                 \
        for (int r = 0; r < ny; r++) s[r] = acc[r] * (F);                                 \
    }                                                                                     \
    /* ny a constant in each copy: the row loops unroll, the accumulators stay in registers */ \
    ATTR void name(int n, float *s, const void *vx, const void *vy, size_t stride, int ny) { \
        LKV_ROWS_DISPATCH(name##_k, n, s, vx, vy, stride, ny);                            \
    }

/* The row kernels of each path (n a multiple of QK_K, 1 <= ny <= 4). */
#define IQ_DECL(t)                                                                        \
    void lkv_##t##_rows_c(int n, float *s, const void *x, const void *y, size_t stride, int ny); \
    void lkv_##t##_rows_avx2(int n, float *s, const void *x, const void *y, size_t stride, int ny);
IQ_DECL(iq2_xxs)
IQ_DECL(iq2_xs)
IQ_DECL(iq2_s)
IQ_DECL(iq3_xxs)
IQ_DECL(iq3_s)
IQ_DECL(iq1_s)
IQ_DECL(iq1_m)
IQ_DECL(iq4_xs)
#undef IQ_DECL

#endif
