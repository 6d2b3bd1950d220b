/*
 * quant/dot_iquants.c: dot products of the i-quants against q8_K activation
 * rows: the portable C path, the entry points the traits table names, and
 * the run-time choice between this path and dot_iquants_avx2.c.
 *
 * The integer form and the f32 steps both paths share are described in
 * quant/dot_iquants.h. Here each super-block is decoded once (for all the
 * activation rows) into its 256 signed integer levels and 16 integer scales,
 * with the formulas of iquants.c (ls = 2s + 1, iq4_xs ls - 32), and a plain
 * int8 x int8 loop per 16 elements (which compilers vectorize) sums them.
 *
 * The AVX2 path is compiled with a target attribute, so the library runs on
 * any x86-64 (and elsewhere); it is taken where the CPU reports AVX2, unless
 * lkv_iq_dot_force_portable() asked for the portable path (the tests compare
 * the two).
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "quant/dot_iquants.h"

// ---------------------------------------------------------------- decoding

/* Each decoder writes a super-block's 256 signed integer levels w (the grid
 * level with its sign; iq1: 8 * grid +- 1) and the integer scale of each 16
 * elements ls (a 32-element scale twice). */

/* w[j] = sign_j ? -lvl[j] : lvl[j], j < n */
static inline void put_signed(int8_t *w, const uint8_t *lvl, uint32_t signs, int n) {
    for (int j = 0; j < n; j++) w[j] = (int8_t)((signs >> j) & 1 ? -lvl[j] : lvl[j]);
}

/* w[j] = 8 * grid[j] + sg (sg = +-1: the iq1 delta), j < 8 */
static inline void put_iq1(int8_t *w, const int8_t *grid, int sg) {
    for (int j = 0; j < 8; j++) w[j] = (int8_t)(8 * grid[j] + sg);
}

static inline void dec_iq2_xxs(const block_iq2_xxs *x, int8_t *w, int16_t *ls) {
    for (int ib = 0; ib < 8; ib++) {
        uint32_t a0, a1;
        memcpy(&a0, x->qs + 4 * ib, 4);
        memcpy(&a1, x->qs + 4 * ib + 2, 4);
        ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * (a1 >> 28) + 1);
        for (int l = 0; l < 4; l++)
            put_signed(w + 32 * ib + 8 * l, lkv_iq2xxs_grid[(a0 >> 8 * l) & 255],
                       lkv_iq_ksigns[(a1 >> 7 * l) & 127], 8);
    }
}

static inline void dec_iq2_xs(const block_iq2_xs *x, int8_t *w, int16_t *ls) {
    for (int k = 0; k < 16; k++) ls[k] = (int16_t)(2 * ((x->scales[k / 2] >> 4 * (k % 2)) & 15) + 1);
    for (int g = 0; g < 32; g++)
        put_signed(w + 8 * g, lkv_iq2xs_grid[x->qs[g] & 511], lkv_iq_ksigns[x->qs[g] >> 9], 8);
}

static inline void dec_iq2_s(const block_iq2_s *x, int8_t *w, int16_t *ls) {
    for (int k = 0; k < 16; k++) ls[k] = (int16_t)(2 * ((x->scales[k / 2] >> 4 * (k % 2)) & 15) + 1);
    for (int g = 0; g < 32; g++)
        put_signed(w + 8 * g, lkv_iq2s_grid[x->qs[g] | ((x->qh[g / 4] >> 2 * (g % 4)) & 3) << 8],
                   x->qs[32 + g], 8);
}

static inline void dec_iq3_xxs(const block_iq3_xxs *x, int8_t *w, int16_t *ls) {
    for (int ib = 0; ib < 8; ib++) {
        uint32_t a;
        memcpy(&a, x->qs + QK_K / 4 + 4 * ib, 4);
        ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * (a >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            const uint32_t sg = lkv_iq_ksigns[(a >> 7 * l) & 127];
            int8_t *wl = w + 32 * ib + 8 * l;
            put_signed(wl, lkv_iq3xxs_grid[x->qs[8 * ib + 2 * l]], sg, 4);
            put_signed(wl + 4, lkv_iq3xxs_grid[x->qs[8 * ib + 2 * l + 1]], sg >> 4, 4);
        }
    }
}

static inline void dec_iq3_s(const block_iq3_s *x, int8_t *w, int16_t *ls) {
    for (int ib = 0; ib < 8; ib++) {
        ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * ((x->scales[ib / 2] >> 4 * (ib % 2)) & 15) + 1);
        uint32_t sg;
        memcpy(&sg, x->signs + 4 * ib, 4);
        for (int k = 0; k < 8; k++)
            put_signed(w + 32 * ib + 4 * k,
                       lkv_iq3s_grid[x->qs[8 * ib + k] | ((x->qh[ib] >> k) & 1) << 8], sg >> 4 * k, 4);
    }
}

static inline void dec_iq1_s(const block_iq1_s *x, int8_t *w, int16_t *ls) {
    for (int ib = 0; ib < 8; ib++) {
        const int qh = x->qh[ib];
        ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * ((qh >> 12) & 7) + 1);
        for (int l = 0; l < 4; l++)
            put_iq1(w + 32 * ib + 8 * l, lkv_iq1s_grid[x->qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8],
                    qh & 0x8000 ? -1 : 1);
    }
}

static inline void dec_iq1_m(const block_iq1_m *x, int8_t *w, int16_t *ls) {
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    for (int k = 0; k < 16; k++) ls[k] = (int16_t)(2 * ((sc[k / 4] >> 3 * (k % 4)) & 7) + 1);
    for (int g = 0; g < 32; g++) {
        const int nib = (x->qh[g / 2] >> 4 * (g % 2)) & 15;
        put_iq1(w + 8 * g, lkv_iq1s_grid[x->qs[g] | (nib & 7) << 8], nib & 8 ? -1 : 1);
    }
}

static inline void dec_iq4_xs(const block_iq4_xs *x, int8_t *w, int16_t *ls) {
    for (int ib = 0; ib < 8; ib++) {
        ls[2 * ib] = ls[2 * ib + 1] = (int16_t)((((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 15) |
                                                 ((x->scales_h >> 2 * ib) & 3) << 4) - 32);
        const uint8_t *c = x->qs + 16 * ib;
        for (int j = 0; j < 16; j++) {
            w[32 * ib + j] = lkv_iq4nl_values[c[j] & 15];
            w[32 * ib + j + 16] = lkv_iq4nl_values[c[j] >> 4];
        }
    }
}

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
