/*
 * quant/dot_iquants.c: dot products of the i-quants against q8_K activation
 * rows: the portable C path, the entry points the traits table names, and
 * the run-time choice between this path and dot_iquants_avx2.c.
 *
 * The integer form and the f32 steps both paths share are described in
 * quant/dot_iquants.h. Here each super-block is decoded once (for all the
 * activation rows) into its 256 signed integer levels and 16 integer scales
 * (quant/iq_decode.h), and a plain int8 x int8 loop per 16 elements (which
 * compilers vectorize) sums them.
 *
 * The AVX2 path is compiled with a target attribute, so the library runs on
 * any x86-64 (and elsewhere); it is taken where the CPU reports AVX2, unless
 * lkv_iq_dot_force_portable() asked for the portable path (the tests compare
 * the two).
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "quant/dot_iquants.h"
#include "quant/iq_decode.h"

// ---------------------------------------------------------------- block sums

/* sumi[r] = sum_k ls[k] * (w . q_r over the 16 elements of k), exact in int32 */
static inline void sum_rows(const int8_t *w, const int16_t *ls, const block_q8_K *const *y,
                            int ny, int32_t *sumi) {
    for (int r = 0; r < ny; r++) {
        const int8_t *q = y[r]->qs;
        int32_t s = 0;
        for (int k = 0; k < 16; k++) {
            int32_t t = 0;
            for (int j = 0; j < 16; j++) t += w[16 * k + j] * q[16 * k + j];
            s += ls[k] * t;
        }
        sumi[r] = s;
    }
}

#define BLOCK_FN(t)                                                                     \
    static inline void blk_##t(const block_##t *x, const block_q8_K *const *y, int ny,   \
                               int32_t *sumi) {                                          \
        int8_t w[QK_K];                                                                  \
        int16_t ls[16];                                                                  \
        dec_##t(x, w, ls);                                                               \
        sum_rows(w, ls, y, ny, sumi);                                                    \
    }
BLOCK_FN(iq2_xxs)
BLOCK_FN(iq2_xs)
BLOCK_FN(iq2_s)
BLOCK_FN(iq3_xxs)
BLOCK_FN(iq3_s)
BLOCK_FN(iq1_s)
BLOCK_FN(iq1_m)
BLOCK_FN(iq4_xs)

// ---------------------------------------------------------------- row kernels

IQ_ROW_KERNEL(lkv_iq2_xxs_rows_c, , block_iq2_xxs, IQ_D, blk_iq2_xxs, 0.125f)
IQ_ROW_KERNEL(lkv_iq2_xs_rows_c, , block_iq2_xs, IQ_D, blk_iq2_xs, 0.125f)
IQ_ROW_KERNEL(lkv_iq2_s_rows_c, , block_iq2_s, IQ_D, blk_iq2_s, 0.125f)
IQ_ROW_KERNEL(lkv_iq3_xxs_rows_c, , block_iq3_xxs, IQ_D, blk_iq3_xxs, 0.25f)
IQ_ROW_KERNEL(lkv_iq3_s_rows_c, , block_iq3_s, IQ_D, blk_iq3_s, 1.0f)
IQ_ROW_KERNEL(lkv_iq1_s_rows_c, , block_iq1_s, IQ_D, blk_iq1_s, 0.125f)
IQ_ROW_KERNEL(lkv_iq1_m_rows_c, , block_iq1_m, IQ_D_IQ1_M, blk_iq1_m, 0.125f)
IQ_ROW_KERNEL(lkv_iq4_xs_rows_c, , block_iq4_xs, IQ_D, blk_iq4_xs, 1.0f)

// ---------------------------------------------------------------- dispatch

static atomic_int force_portable;

int lkv_iq_dot_force_portable(int portable) {
    return atomic_exchange(&force_portable, portable != 0);
}

#ifdef LKV_X86
static inline bool use_avx2(void) {
    return !atomic_load_explicit(&force_portable, memory_order_relaxed) &&
           __builtin_cpu_supports("avx2");
}
#define IQ_PICK(t) (use_avx2() ? lkv_##t##_rows_avx2 : lkv_##t##_rows_c)
#else
#define IQ_PICK(t) lkv_##t##_rows_c
#endif

#define IQ_ENTRIES(t)                                                                    \
    void lkv_##t##_vec_dot(int n, float *s, const void *x, const void *y) {              \
        IQ_PICK(t)(n, s, x, y, 0, 1);                                                     \
    }                                                                                     \
    void lkv_##t##_vec_dot_rows(int n, float *s, const void *x, const void *y,           \
                                size_t stride, int ny) {                                  \
        IQ_PICK(t)(n, s, x, y, stride, ny < 1 ? 1 : ny > 4 ? 4 : ny);                     \
    }

IQ_ENTRIES(iq2_xxs)
IQ_ENTRIES(iq2_xs)
IQ_ENTRIES(iq2_s)
IQ_ENTRIES(iq3_xxs)
IQ_ENTRIES(iq3_s)
IQ_ENTRIES(iq1_s)
IQ_ENTRIES(iq1_m)
IQ_ENTRIES(iq4_xs)
