/*
 * quant/iquants.c: dequantization of the i-quant super-blocks (iq2_xxs,
 * iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, iq4_xs).
 *
 * Layouts are in quant/blocks.h, grids in quant/iq_tables.h. Each value is
 * computed with the f32 operations of gguf.quants in the same order (the
 * sub-block scale first, e.g. (d * (0.5 + s)) * 0.25, then scale * level,
 * then the sign), so results match it bit for bit. The weight i-quants are
 * not quantized here (models arrive quantized); their dots are in
 * dot_iquants.c.
 */
#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/iq_tables.h"
#include "quant/simd.h"

/* y[j] = (db * level[j]) * sign_j for the 8 elements of one group */
static inline void put8(float *y, float db, const uint8_t *level, uint8_t signs) {
    for (int j = 0; j < 8; j++) {
        const float v = db * (float)level[j];
        y[j] = (signs >> j) & 1 ? -v : v;
    }
}

// ---------------------------------------------------------------- 2-bit grids

void lkv_iq2_xxs_to_float(const void *vx, float *y, int64_t n) {
    const block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            uint32_t a0, a1;
            memcpy(&a0, x[i].qs + 4 * ib, 4);
            memcpy(&a1, x[i].qs + 4 * ib + 2, 4);
            const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++)
                put8(y + 8 * l, db, lkv_iq2xxs_grid[(a0 >> 8 * l) & 255],
                     lkv_iq_ksigns[(a1 >> 7 * l) & 127]);
        }
    }
}

void lkv_iq2_xs_to_float(const void *vx, float *y, int64_t n) {
    const block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int g = 0; g < 32; g++, y += 8) {
            const int s = (x[i].scales[g / 4] >> 4 * ((g / 2) & 1)) & 15;
            const float db = d * (0.5f + (float)s) * 0.25f;
            const uint16_t q = x[i].qs[g];
            put8(y, db, lkv_iq2xs_grid[q & 511], lkv_iq_ksigns[q >> 9]);
        }
    }
}

void lkv_iq2_s_to_float(const void *vx, float *y, int64_t n) {
    const block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int g = 0; g < 32; g++, y += 8) {
            const int s = (x[i].scales[g / 4] >> 4 * ((g / 2) & 1)) & 15;
            const float db = d * (0.5f + (float)s) * 0.25f;
            const int idx = x[i].qs[g] | ((x[i].qh[g / 4] >> 2 * (g % 4)) & 3) << 8;
            put8(y, db, lkv_iq2s_grid[idx], x[i].qs[32 + g]);
        }
    }
}

// ---------------------------------------------------------------- 3-bit grids

void lkv_iq3_xxs_to_float(const void *vx, float *y, int64_t n) {
    const block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            uint32_t a;
            memcpy(&a, x[i].qs + QK_K / 4 + 4 * ib, 4);
            const float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                uint8_t level[8];
                memcpy(level, lkv_iq3xxs_grid[x[i].qs[8 * ib + 2 * l]], 4);
                memcpy(level + 4, lkv_iq3xxs_grid[x[i].qs[8 * ib + 2 * l + 1]], 4);
                put8(y + 8 * l, db, level, lkv_iq_ksigns[(a >> 7 * l) & 127]);
            }
        }
    }
}

void lkv_iq3_s_to_float(const void *vx, float *y, int64_t n) {
    const block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const int s = (x[i].scales[ib / 2] >> 4 * (ib % 2)) & 15;
            const float db = d * (float)(1 + 2 * s);
            for (int l = 0; l < 4; l++, y += 8) {
                const int g = 8 * ib + 2 * l;   // two groups of 4 per 8 elements
                uint8_t level[8];
                memcpy(level, lkv_iq3s_grid[x[i].qs[g] | ((x[i].qh[g / 8] >> g % 8) & 1) << 8], 4);
                memcpy(level + 4,
                       lkv_iq3s_grid[x[i].qs[g + 1] | ((x[i].qh[g / 8] >> (g + 1) % 8) & 1) << 8], 4);
                put8(y, db, level, x[i].signs[4 * ib + l]);
            }
        }
    }
}

// ---------------------------------------------------------------- 1-bit grids

static const float IQ1_DELTA = 0.125f;

void lkv_iq1_s_to_float(const void *vx, float *y, int64_t n) {
    const block_iq1_s *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const int qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
            for (int l = 0; l < 4; l++, y += 8) {
                const int8_t *gr = lkv_iq1s_grid[x[i].qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8];
                for (int j = 0; j < 8; j++) y[j] = dl * ((float)gr[j] + delta);
            }
        }
    }
}

void lkv_iq1_m_to_float(const void *vx, float *y, int64_t n) {
    const block_iq1_m *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        memcpy(sc, x[i].scales, 8);
        const float d = h2f(block_iq1_m_d(&x[i]));
        for (int g = 0; g < 32; g++, y += 8) {
            const int k = g / 2, s = (sc[k / 4] >> 3 * (k % 4)) & 7;
            const float dl = d * (float)(2 * s + 1);
            const int nib = (x[i].qh[g / 2] >> 4 * (g % 2)) & 15;
            const float delta = nib & 8 ? -IQ1_DELTA : IQ1_DELTA;
            const int8_t *gr = lkv_iq1s_grid[x[i].qs[g] | (nib & 7) << 8];
            for (int j = 0; j < 8; j++) y[j] = dl * ((float)gr[j] + delta);
        }
    }
}

// ---------------------------------------------------------------- iq4_xs

void lkv_iq4_xs_to_float(const void *vx, float *y, int64_t n) {
    const block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const int ls = (((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 15) |
                            ((x[i].scales_h >> 2 * ib) & 3) << 4) - 32;
            const float dl = d * (float)ls;
            const uint8_t *q = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)lkv_iq4nl_values[q[j] & 15];
                y[j + 16] = dl * (float)lkv_iq4nl_values[q[j] >> 4];
            }
        }
    }
}
