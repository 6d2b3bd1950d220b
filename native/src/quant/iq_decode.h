/*
 * quant/iq_decode.h: the portable decoders of the i-quant super-blocks: each
 * writes a super-block's 256 signed integer levels w (the grid level with its
 * sign; iq1: 8 * grid +- 1) and the integer scale of each 16 elements ls (a
 * 32-element scale twice), with the formulas of iquants.c (ls = 2s + 1,
 * iq4_xs ls - 32). The portable dots (dot_iquants.c) and the GEMM tiles'
 * unpacking (gemm_iquants.c) share them.
 */
#ifndef LKV_QUANT_IQ_DECODE_H
#define LKV_QUANT_IQ_DECODE_H

#include <string.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/iq_tables.h"

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

#endif
