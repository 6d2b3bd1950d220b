/*
 * quant/dot_iquants.c: dot products of the i-quants against q8_K activation
 * rows: the portable C path, the entry points the traits table names, and
 * the run-time choice between this path and dot_iquants_avx2.c.
 *
 * The integer form and the f32 steps both paths share are described in
 * quant/dot_iquants.h. Here each block function decodes the levels with the
 * formulas of iquants.c (as integers: ls = 2s + 1 and the grid levels, with
 * the sign applied to the activation code) and sums in int32.
 *
 * The AVX2 path is compiled with a target attribute, so the library runs on
 * any x86-64 (and elsewhere); it is taken where the CPU reports AVX2, unless
 * lkv_iq_dot_force_portable() asked for the portable path (the tests compare
 * the two).
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "quant/dot_iquants.h"

// ---------------------------------------------------------------- helpers

/* sum_j lvl[j] * (sign_j ? -q[j] : q[j]) over 8 elements */
static inline int32_t dot8_signed(const uint8_t *lvl, uint8_t signs, const int8_t *q) {
    int32_t t = 0;
    for (int j = 0; j < 8; j++) t += lvl[j] * ((signs >> j) & 1 ? -q[j] : q[j]);
    return t;
}

/* sum_j (8 * grid[j] + sg) * q[j] over 8 elements (sg = +-1: the iq1 delta) */
static inline int32_t dot8_iq1(const int8_t *grid, int sg, const int8_t *q) {
    int32_t t = 0;
    for (int j = 0; j < 8; j++) t += (8 * grid[j] + sg) * q[j];
    return t;
}

// ---------------------------------------------------------------- block sums

static inline void blk_iq2_xxs(const block_iq2_xxs *x, const block_q8_K *const *y, int ny,
                               int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t a0, a1;
        memcpy(&a0, x->qs + 4 * ib, 4);
        memcpy(&a1, x->qs + 4 * ib + 2, 4);
        const int ls = 2 * (int)(a1 >> 28) + 1;
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 32 * ib;
            int32_t t = 0;
            for (int l = 0; l < 4; l++)
                t += dot8_signed(lkv_iq2xxs_grid[(a0 >> 8 * l) & 255],
                                 lkv_iq_ksigns[(a1 >> 7 * l) & 127], q + 8 * l);
            sumi[r] += ls * t;
        }
    }
}

static inline void blk_iq2_xs(const block_iq2_xs *x, const block_q8_K *const *y, int ny,
                              int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int k = 0; k < 16; k++) {   // 16 elements per scale
        const int ls = 2 * ((x->scales[k / 2] >> 4 * (k % 2)) & 15) + 1;
        const uint16_t q0 = x->qs[2 * k], q1 = x->qs[2 * k + 1];
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 16 * k;
            const int32_t t = dot8_signed(lkv_iq2xs_grid[q0 & 511], lkv_iq_ksigns[q0 >> 9], q) +
                              dot8_signed(lkv_iq2xs_grid[q1 & 511], lkv_iq_ksigns[q1 >> 9], q + 8);
            sumi[r] += ls * t;
        }
    }
}

static inline void blk_iq2_s(const block_iq2_s *x, const block_q8_K *const *y, int ny,
                             int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int k = 0; k < 16; k++) {
        const int ls = 2 * ((x->scales[k / 2] >> 4 * (k % 2)) & 15) + 1;
        const int g0 = 2 * k, g1 = 2 * k + 1;
        const uint8_t *l0 = lkv_iq2s_grid[x->qs[g0] | ((x->qh[g0 / 4] >> 2 * (g0 % 4)) & 3) << 8];
        const uint8_t *l1 = lkv_iq2s_grid[x->qs[g1] | ((x->qh[g1 / 4] >> 2 * (g1 % 4)) & 3) << 8];
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 16 * k;
            sumi[r] += ls * (dot8_signed(l0, x->qs[32 + g0], q) + dot8_signed(l1, x->qs[32 + g1], q + 8));
        }
    }
}

static inline void blk_iq3_xxs(const block_iq3_xxs *x, const block_q8_K *const *y, int ny,
                               int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t a;
        memcpy(&a, x->qs + QK_K / 4 + 4 * ib, 4);
        const int ls = 2 * (int)(a >> 28) + 1;
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 32 * ib;
            int32_t t = 0;
            for (int l = 0; l < 4; l++) {
                uint8_t lvl[8];
                memcpy(lvl, lkv_iq3xxs_grid[x->qs[8 * ib + 2 * l]], 4);
                memcpy(lvl + 4, lkv_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]], 4);
                t += dot8_signed(lvl, lkv_iq_ksigns[(a >> 7 * l) & 127], q + 8 * l);
            }
            sumi[r] += ls * t;
        }
    }
}

static inline void blk_iq3_s(const block_iq3_s *x, const block_q8_K *const *y, int ny,
                             int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = 2 * ((x->scales[ib / 2] >> 4 * (ib % 2)) & 15) + 1;
        uint8_t lvl[32];
        for (int g = 0; g < 8; g++) {
            const int gg = 8 * ib + g;
            memcpy(lvl + 4 * g, lkv_iq3s_grid[x->qs[gg] | ((x->qh[ib] >> g) & 1) << 8], 4);
        }
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 32 * ib;
            int32_t t = 0;
            for (int l = 0; l < 4; l++) t += dot8_signed(lvl + 8 * l, x->signs[4 * ib + l], q + 8 * l);
            sumi[r] += ls * t;
        }
    }
}

static inline void blk_iq1_s(const block_iq1_s *x, const block_q8_K *const *y, int ny,
                             int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int ib = 0; ib < 8; ib++) {
        const int qh = x->qh[ib];
        const int ls = 2 * ((qh >> 12) & 7) + 1, sg = qh & 0x8000 ? -1 : 1;
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 32 * ib;
            int32_t t = 0;
            for (int l = 0; l < 4; l++)
                t += dot8_iq1(lkv_iq1s_grid[x->qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8], sg, q + 8 * l);
            sumi[r] += ls * t;
        }
    }
}

static inline void blk_iq1_m(const block_iq1_m *x, const block_q8_K *const *y, int ny,
                             int32_t *sumi) {
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int k = 0; k < 16; k++) {   // 16 elements per scale, 8 per delta
        const int ls = 2 * ((sc[k / 4] >> 3 * (k % 4)) & 7) + 1;
        const int n0 = x->qh[k] & 15, n1 = x->qh[k] >> 4;
        const int8_t *gr0 = lkv_iq1s_grid[x->qs[2 * k] | (n0 & 7) << 8];
        const int8_t *gr1 = lkv_iq1s_grid[x->qs[2 * k + 1] | (n1 & 7) << 8];
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 16 * k;
            sumi[r] += ls * (dot8_iq1(gr0, n0 & 8 ? -1 : 1, q) + dot8_iq1(gr1, n1 & 8 ? -1 : 1, q + 8));
        }
    }
}

static inline void blk_iq4_xs(const block_iq4_xs *x, const block_q8_K *const *y, int ny,
                              int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = 0;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = (((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 15) |
                        ((x->scales_h >> 2 * ib) & 3) << 4) - 32;
        const uint8_t *c = x->qs + 16 * ib;
        for (int r = 0; r < ny; r++) {
            const int8_t *q = y[r]->qs + 32 * ib;
            int32_t t = 0;
            for (int j = 0; j < 16; j++)
                t += lkv_iq4nl_values[c[j] & 15] * q[j] + lkv_iq4nl_values[c[j] >> 4] * q[j + 16];
            sumi[r] += ls * t;
        }
    }
}

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
