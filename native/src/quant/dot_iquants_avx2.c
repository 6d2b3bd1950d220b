/*
 * quant/dot_iquants_avx2.c: the AVX2 path of the i-quant dots against q8_K.
 *
 * Per sub-block of 32 elements the weight levels are assembled into one
 * vector of 32 bytes (4 grid rows of 8, or 8 rows of 4, read from the tables),
 * the signs become a vector of +-1 bytes that is applied to the activation
 * codes (_mm256_sign_epi8), and an unsigned x signed multiply-add gives 16-bit
 * pair sums, which a second multiply-add with the sub-block scale(s) widens
 * to int32. iq1 levels are 8 * grid + sign (odd, never 0) and iq4_xs levels
 * are signed, so their sign moves onto the activation the same way. Every sum
 * is exact (|pair| <= 2 * 127 * 127 < 2^15), the f32 steps are those of
 * dot_iquants.h, so the results equal the portable path's bit for bit.
 *
 * Compiled with target("avx2") on x86 only; dot_iquants.c calls it when the
 * CPU has AVX2.
 */
#include "quant/dot_iquants.h"

#ifdef LKV_X86

// ---------------------------------------------------------------- helpers

/* 32 bits -> 32 bytes of +1 (bit clear) / -1 (bit set) */
LKV_AVX2_INLINE __m256i sign_bytes(uint32_t bits) {
    return _mm256_or_si256(bits_to_bytes(bits), _mm256_set1_epi8(1));
}

LKV_AVX2_INLINE uint64_t row8(const void *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

LKV_AVX2_INLINE uint32_t row4(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* the 4 ksigns patterns of 7-bit indices at bits 0, 7, 14, 21 of a */
LKV_AVX2_INLINE uint32_t ksigns4(uint32_t a) {
    return (uint32_t)lkv_iq_ksigns[a & 127] | (uint32_t)lkv_iq_ksigns[(a >> 7) & 127] << 8 |
           (uint32_t)lkv_iq_ksigns[(a >> 14) & 127] << 16 |
           (uint32_t)lkv_iq_ksigns[(a >> 21) & 127] << 24;
}

/* acc[r] += madd(maddubs(lvl, q_r * sg), scv) for the 32 codes at y[r]->qs + off */
LKV_AVX2_INLINE void acc_rows(__m256i *acc, const block_q8_K *const *y, int ny, int off,
                              __m256i lvl, __m256i sg, __m256i scv) {
    for (int r = 0; r < ny; r++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(y[r]->qs + off));
        const __m256i p = _mm256_maddubs_epi16(lvl, _mm256_sign_epi8(q, sg));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, scv));
    }
}

LKV_AVX2_INLINE void finish(const __m256i *acc, int ny, int32_t *sumi) {
    for (int r = 0; r < ny; r++) sumi[r] = hsum_epi32(acc[r]);
}

#define ACC_INIT __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), \
                                   _mm256_setzero_si256(), _mm256_setzero_si256()}

/* two 16-element scales: lo for bytes 0..15, hi for 16..31 */
LKV_AVX2_INLINE __m256i scales2(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo));
}

// ---------------------------------------------------------------- block sums

LKV_AVX2_INLINE void blk_iq2_xxs(const block_iq2_xxs *x, const block_q8_K *const *y, int ny,
                                 int32_t *sumi) {
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t a0, a1;
        memcpy(&a0, x->qs + 4 * ib, 4);
        memcpy(&a1, x->qs + 4 * ib + 2, 4);
        const __m256i lvl = _mm256_set_epi64x(
            (long long)row8(lkv_iq2xxs_grid[a0 >> 24]), (long long)row8(lkv_iq2xxs_grid[(a0 >> 16) & 255]),
            (long long)row8(lkv_iq2xxs_grid[(a0 >> 8) & 255]), (long long)row8(lkv_iq2xxs_grid[a0 & 255]));
        acc_rows(acc, y, ny, 32 * ib, lvl, sign_bytes(ksigns4(a1)),
                 _mm256_set1_epi16((short)(2 * (a1 >> 28) + 1)));
    }
    finish(acc, ny, sumi);
}

LKV_AVX2_INLINE void blk_iq2_xs(const block_iq2_xs *x, const block_q8_K *const *y, int ny,
                                int32_t *sumi) {
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t *qs = x->qs + 4 * ib;
        const __m256i lvl = _mm256_set_epi64x(
            (long long)row8(lkv_iq2xs_grid[qs[3] & 511]), (long long)row8(lkv_iq2xs_grid[qs[2] & 511]),
            (long long)row8(lkv_iq2xs_grid[qs[1] & 511]), (long long)row8(lkv_iq2xs_grid[qs[0] & 511]));
        const uint32_t sg = (uint32_t)lkv_iq_ksigns[qs[0] >> 9] | (uint32_t)lkv_iq_ksigns[qs[1] >> 9] << 8 |
                            (uint32_t)lkv_iq_ksigns[qs[2] >> 9] << 16 |
                            (uint32_t)lkv_iq_ksigns[qs[3] >> 9] << 24;
        const int sc = x->scales[ib];
        acc_rows(acc, y, ny, 32 * ib, lvl, sign_bytes(sg),
                 scales2(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1));
    }
    finish(acc, ny, sumi);
}

LKV_AVX2_INLINE void blk_iq2_s(const block_iq2_s *x, const block_q8_K *const *y, int ny,
                               int32_t *sumi) {
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *qs = x->qs + 4 * ib;
        const int qh = x->qh[ib];
        const __m256i lvl = _mm256_set_epi64x(
            (long long)row8(lkv_iq2s_grid[qs[3] | (qh >> 6 & 3) << 8]),
            (long long)row8(lkv_iq2s_grid[qs[2] | (qh >> 4 & 3) << 8]),
            (long long)row8(lkv_iq2s_grid[qs[1] | (qh >> 2 & 3) << 8]),
            (long long)row8(lkv_iq2s_grid[qs[0] | (qh & 3) << 8]));
        const int sc = x->scales[ib];
        acc_rows(acc, y, ny, 32 * ib, lvl, sign_bytes(row4(x->qs + 32 + 4 * ib)),
                 scales2(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1));
    }
    finish(acc, ny, sumi);
}

LKV_AVX2_INLINE void blk_iq3_xxs(const block_iq3_xxs *x, const block_q8_K *const *y, int ny,
                                 int32_t *sumi) {
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *qs = x->qs + 8 * ib;
        const uint32_t a = row4(x->qs + QK_K / 4 + 4 * ib);
        const __m256i lvl = _mm256_set_epi32(
            (int)row4(lkv_iq3xxs_grid[qs[7]]), (int)row4(lkv_iq3xxs_grid[qs[6]]),
            (int)row4(lkv_iq3xxs_grid[qs[5]]), (int)row4(lkv_iq3xxs_grid[qs[4]]),
            (int)row4(lkv_iq3xxs_grid[qs[3]]), (int)row4(lkv_iq3xxs_grid[qs[2]]),
            (int)row4(lkv_iq3xxs_grid[qs[1]]), (int)row4(lkv_iq3xxs_grid[qs[0]]));
        acc_rows(acc, y, ny, 32 * ib, lvl, sign_bytes(ksigns4(a)),
                 _mm256_set1_epi16((short)(2 * (a >> 28) + 1)));
    }
    finish(acc, ny, sumi);
}

LKV_AVX2_INLINE void blk_iq3_s(const block_iq3_s *x, const block_q8_K *const *y, int ny,
                               int32_t *sumi) {
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *qs = x->qs + 8 * ib;
        const int qh = x->qh[ib];
#define G3(g) (int)row4(lkv_iq3s_grid[qs[g] | ((qh >> (g)) & 1) << 8])
        const __m256i lvl = _mm256_set_epi32(G3(7), G3(6), G3(5), G3(4), G3(3), G3(2), G3(1), G3(0));
#undef G3
        const int s = (x->scales[ib / 2] >> 4 * (ib % 2)) & 15;
        acc_rows(acc, y, ny, 32 * ib, lvl, sign_bytes(row4(x->signs + 4 * ib)),
                 _mm256_set1_epi16((short)(2 * s + 1)));
    }
    finish(acc, ny, sumi);
}

/* iq1 levels 8 * grid + delta sign as signed bytes, their magnitudes, and the
 * sign pattern that moves their sign onto the activation */
LKV_AVX2_INLINE void iq1_levels(__m256i grid, __m256i delta, __m256i *mag, __m256i *sg) {
    const __m256i g2 = _mm256_add_epi8(grid, grid), g4 = _mm256_add_epi8(g2, g2);
    const __m256i w = _mm256_add_epi8(_mm256_add_epi8(g4, g4), delta);
    *mag = _mm256_abs_epi8(w);
    *sg = w;
}

LKV_AVX2_INLINE long long rep8(int sg) { return sg < 0 ? -1LL : 0x0101010101010101LL; }

LKV_AVX2_INLINE void blk_iq1_s(const block_iq1_s *x, const block_q8_K *const *y, int ny,
                               int32_t *sumi) {
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *qs = x->qs + 4 * ib;
        const int qh = x->qh[ib];
        const __m256i grid = _mm256_set_epi64x(
            (long long)row8(lkv_iq1s_grid[qs[3] | (qh >> 9 & 7) << 8]),
            (long long)row8(lkv_iq1s_grid[qs[2] | (qh >> 6 & 7) << 8]),
            (long long)row8(lkv_iq1s_grid[qs[1] | (qh >> 3 & 7) << 8]),
            (long long)row8(lkv_iq1s_grid[qs[0] | (qh & 7) << 8]));
        __m256i mag, sg;
        iq1_levels(grid, _mm256_set1_epi8(qh & 0x8000 ? -1 : 1), &mag, &sg);
        acc_rows(acc, y, ny, 32 * ib, mag, sg, _mm256_set1_epi16((short)(2 * ((qh >> 12) & 7) + 1)));
    }
    finish(acc, ny, sumi);
}

LKV_AVX2_INLINE void blk_iq1_m(const block_iq1_m *x, const block_q8_K *const *y, int ny,
                               int32_t *sumi) {
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *qs = x->qs + 4 * ib;
        const int h0 = x->qh[2 * ib], h1 = x->qh[2 * ib + 1];
        const __m256i grid = _mm256_set_epi64x(
            (long long)row8(lkv_iq1s_grid[qs[3] | (h1 >> 4 & 7) << 8]),
            (long long)row8(lkv_iq1s_grid[qs[2] | (h1 & 7) << 8]),
            (long long)row8(lkv_iq1s_grid[qs[1] | (h0 >> 4 & 7) << 8]),
            (long long)row8(lkv_iq1s_grid[qs[0] | (h0 & 7) << 8]));
        const __m256i delta = _mm256_set_epi64x(rep8(h1 & 0x80 ? -1 : 1), rep8(h1 & 0x08 ? -1 : 1),
                                                rep8(h0 & 0x80 ? -1 : 1), rep8(h0 & 0x08 ? -1 : 1));
        __m256i mag, sg;
        iq1_levels(grid, delta, &mag, &sg);
        const int k0 = 2 * ib, k1 = 2 * ib + 1;
        const int s0 = (sc[k0 / 4] >> 3 * (k0 % 4)) & 7, s1 = (sc[k1 / 4] >> 3 * (k1 % 4)) & 7;
        acc_rows(acc, y, ny, 32 * ib, mag, sg, scales2(2 * s0 + 1, 2 * s1 + 1));
    }
    finish(acc, ny, sumi);
}

LKV_AVX2_INLINE void blk_iq4_xs(const block_iq4_xs *x, const block_q8_K *const *y, int ny,
                                int32_t *sumi) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lkv_iq4nl_values));
    ACC_INIT;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = (((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 15) |
                        ((x->scales_h >> 2 * ib) & 3) << 4) - 32;
        const __m256i v = _mm256_shuffle_epi8(table, unpack_nibbles16(x->qs + 16 * ib));
        acc_rows(acc, y, ny, 32 * ib, _mm256_abs_epi8(v), v, _mm256_set1_epi16((short)ls));
    }
    finish(acc, ny, sumi);
}

// ---------------------------------------------------------------- row kernels

IQ_ROW_KERNEL(lkv_iq2_xxs_rows_avx2, LKV_AVX2, block_iq2_xxs, IQ_D, blk_iq2_xxs, 0.125f)
IQ_ROW_KERNEL(lkv_iq2_xs_rows_avx2, LKV_AVX2, block_iq2_xs, IQ_D, blk_iq2_xs, 0.125f)
IQ_ROW_KERNEL(lkv_iq2_s_rows_avx2, LKV_AVX2, block_iq2_s, IQ_D, blk_iq2_s, 0.125f)
IQ_ROW_KERNEL(lkv_iq3_xxs_rows_avx2, LKV_AVX2, block_iq3_xxs, IQ_D, blk_iq3_xxs, 0.25f)
IQ_ROW_KERNEL(lkv_iq3_s_rows_avx2, LKV_AVX2, block_iq3_s, IQ_D, blk_iq3_s, 1.0f)
IQ_ROW_KERNEL(lkv_iq1_s_rows_avx2, LKV_AVX2, block_iq1_s, IQ_D, blk_iq1_s, 0.125f)
IQ_ROW_KERNEL(lkv_iq1_m_rows_avx2, LKV_AVX2, block_iq1_m, IQ_D_IQ1_M, blk_iq1_m, 0.125f)
IQ_ROW_KERNEL(lkv_iq4_xs_rows_avx2, LKV_AVX2, block_iq4_xs, IQ_D, blk_iq4_xs, 1.0f)

#endif
