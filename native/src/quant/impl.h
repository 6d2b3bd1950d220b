/*
 * quant/impl.h: the per-type functions the traits table (traits.c) points to.
 * Internal to quant/; everything outside reaches them through lkv_type_traits.
 * Signatures are the lkv_*_fn types of quant/types.h.
 */
#ifndef LKV_QUANT_IMPL_H
#define LKV_QUANT_IMPL_H

#include "quant/types.h"

#define LKV_DECL_CONV(t)                                                    \
    void lkv_##t##_to_float(const void *x, float *y, int64_t n);            \
    void lkv_##t##_from_float(const float *x, void *y, int64_t n);
#define LKV_DECL_TYPE(t)                                                    \
    LKV_DECL_CONV(t)                                                        \
    void lkv_##t##_vec_dot(int n, float *s, const void *x, const void *y);  \
    void lkv_##t##_vec_dot_rows(int n, float *s, const void *x, const void *y, \
                                size_t y_stride, int ny);

/* The float types' functions and the dots of the legacy formats and
 * k-quants are per ISA level (float_types.c, dot_*.c): their installers are
 * declared in quant/isa.h. */
/* legacy.c (conversions) */
LKV_DECL_CONV(q4_0)
LKV_DECL_CONV(q4_1)
LKV_DECL_CONV(q5_0)
LKV_DECL_CONV(q5_1)
LKV_DECL_CONV(q8_0)
LKV_DECL_CONV(q8_1)
LKV_DECL_CONV(iq4_nl)
/* kquants.c (conversions) */
LKV_DECL_CONV(q2_K)
LKV_DECL_CONV(q3_K)
LKV_DECL_CONV(q4_K)
LKV_DECL_CONV(q5_K)
LKV_DECL_CONV(q6_K)
LKV_DECL_CONV(q8_K)
/* iquants.c (conversions), dot_iquants.c (dots) */
LKV_DECL_TYPE(iq2_xxs)
LKV_DECL_TYPE(iq2_xs)
LKV_DECL_TYPE(iq2_s)
LKV_DECL_TYPE(iq3_xxs)
LKV_DECL_TYPE(iq3_s)
LKV_DECL_TYPE(iq1_s)
LKV_DECL_TYPE(iq1_m)
LKV_DECL_TYPE(iq4_xs)

#undef LKV_DECL_TYPE
#undef LKV_DECL_CONV

/* The iq4_nl table of non-linear levels (int8, ascending). */
extern const int8_t lkv_iq4nl_values[16];

/* Runs one row kernel for ny = 1..4 with ny a compile-time constant, so the
 * per-row accumulation is the same instruction sequence as vec_dot's (ny=1)
 * and each result is bit-identical to it. */
#define LKV_ROWS_DISPATCH(kernel, n, s, x, y, stride, ny)   \
    do {                                                    \
        switch (ny) {                                       \
        case 1: kernel(n, s, x, y, stride, 1); break;       \
        case 2: kernel(n, s, x, y, stride, 2); break;       \
        case 3: kernel(n, s, x, y, stride, 3); break;       \
        default: kernel(n, s, x, y, stride, 4); break;      \
        }                                                   \
    } while (0)

/* A vec_dot_tile from a row kernel (kernel(n, s, x, y, stride, ny)): each
 * weight row against the ny activation rows in turn. */
#define LKV_TILE_BY_ROWS(kernel, n, out, out_stride, x, x_stride, nrows, y, y_stride, ny) \
    do {                                                                            \
        for (int r_ = 0; r_ < (nrows); r_++) {                                      \
            float s_[4];                                                            \
            LKV_ROWS_DISPATCH(kernel, n, s_, (const char *)(x) + (size_t)r_ * (x_stride), \
                              y, y_stride, ny);                                     \
            for (int j_ = 0; j_ < (ny); j_++) (out)[(size_t)j_ * (out_stride) + r_] = s_[j_]; \
        }                                                                           \
    } while (0)

#endif
