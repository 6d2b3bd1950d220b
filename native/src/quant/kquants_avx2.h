/*
 * quant/kquants_avx2.h: the AVX2 decoders of the k-quant super-blocks that
 * the row dots (dot_kquants.c) and the GEMM tiles (gemm_kquants.c) share:
 * the 256 codes as 8 vectors of 32 unsigned bytes (codes_*) and the scales
 * and bsum weights in registers (vparams_*, kvec). Pure functions of the
 * block, so every kernel that calls them sees the same integers. Included
 * only where __AVX2__ is defined (the avx2 and avx512 copies of the ISA
 * sources, quant/isa.h).
 */
#ifndef LKV_QUANT_KQUANTS_AVX2_H
#define LKV_QUANT_KQUANTS_AVX2_H

#include "quant/blocks.h"
#include "quant/simd.h"

/* Codes of the 32 elements 32v .. 32v+31 as unsigned bytes (offset formats
 * keep their offset: q3_K 0..7, q6_K 0..63). */
LKV_INLINE void codes_q2_K(const block_q2_K *b, __m256i q[8]) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int s = 0; s < 4; s++) q[4 * h + s] = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * s), m3);
    }
}

LKV_INLINE void codes_q3_K(const block_q3_K *b, __m256i q[8]) {
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int h = 0; h < 2; h++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int s = 0; s < 4; s++) {
            const int v = 4 * h + s;
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * s), m3);
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, v), m1);
            q[v] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
        }
    }
}

LKV_INLINE void codes_q4_K(const block_q4_K *b, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int c = 0; c < 4; c++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        q[2 * c] = _mm256_and_si256(raw, m4);
        q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    }
}

LKV_INLINE void codes_q5_K(const block_q5_K *b, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(15), m1 = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    for (int c = 0; c < 4; c++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        for (int u = 0; u < 2; u++) {
            const int j = 2 * c + u;
            const __m256i lo = _mm256_and_si256(u ? _mm256_srli_epi16(raw, 4) : raw, m4);
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, j), m1);
            q[j] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
        }
    }
}

LKV_INLINE void codes_q6_K(const block_q6_K *b, __m256i q[8]) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        for (int s = 0; s < 4; s++) {
            const __m256i lraw = (s & 1) ? l1 : l0;
            const __m256i lo = _mm256_and_si256(s >> 1 ? _mm256_srli_epi16(lraw, 4) : lraw, m4);
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * s), m3);
            q[4 * h + s] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
        }
    }
}

/* The parameters built in registers (scalar stores read back as vectors stall
 * the store forwarding): t holds the 16-element scales as int16, those of the
 * even 16-groups (2v) at lane v of the low 128 bits, the odd ones (2v + 1) at
 * lane v of the high 128 bits, so one byte shuffle (scale_pair) gives the
 * multiplier of 32-vector v; w the 16 bsum weights in order (as kparams.w). */
typedef struct {
    float d, dmin;
    __m256i t, w;
} kvec;

LKV_INLINE __m128i even_odd(__m128i b) {
    return _mm_shuffle_epi8(b, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
}

LKV_INLINE __m256i scale_pair(__m256i t, int v) {
    return _mm256_shuffle_epi8(t, _mm256_set1_epi16((short)((2 * v + 1) << 8 | 2 * v)));
}

LKV_INLINE uint32_t u32_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

LKV_INLINE void vparams_q2_K(const block_q2_K *b, kvec *p) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(15);
    p->d = h2f(b->d);
    p->dmin = h2f(b->dmin);
    p->t = _mm256_cvtepu8_epi16(even_odd(_mm_and_si128(raw, m4)));
    p->w = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
}

LKV_INLINE void vparams_q3_K(const block_q3_K *b, kvec *p) {
    const uint32_t m2 = 0x03030303u, u = u32_at(b->scales + 8);
    uint64_t a;
    memcpy(&a, b->scales, 8);
    /* k < 8: scales[k] & 15, k >= 8: scales[k - 8] >> 4; high bits of k = 4g + i: (scales[8 + i] >> 2g) & 3 */
    const __m128i lo = _mm_set_epi64x((long long)((a >> 4) & 0x0f0f0f0f0f0f0f0fULL),
                                      (long long)(a & 0x0f0f0f0f0f0f0f0fULL));
    const __m128i hi = _mm_set_epi32((int)((u >> 6) & m2), (int)((u >> 4) & m2), (int)((u >> 2) & m2),
                                     (int)(u & m2));
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
    p->d = h2f(b->d);
    p->dmin = 0.0f;
    p->t = _mm256_cvtepi8_epi16(even_odd(sc));
    p->w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 2);
}

LKV_INLINE void vparams_k4(const uint8_t s[12], uint16_t d, uint16_t dmin, kvec *p) {
    const uint32_t m6 = 0x3f3f3f3fu, m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
    const uint32_t sc_lo = u0 & m6, sc_hi = (u2 & m4) | ((u0 >> 6) & m2) << 4;
    const uint32_t mn_lo = u1 & m6, mn_hi = ((u2 >> 4) & m4) | ((u1 >> 6) & m2) << 4;
    const __m128i mn = _mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo);
    p->d = h2f(d);
    p->dmin = h2f(dmin);
    /* each 32-scale serves both 16-groups of its vector */
    p->t = _mm256_cvtepu8_epi16(_mm_set_epi32((int)sc_hi, (int)sc_lo, (int)sc_hi, (int)sc_lo));
    p->w = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
}

LKV_INLINE void vparams_q4_K(const block_q4_K *b, kvec *p) { vparams_k4(b->scales, b->d, b->dmin, p); }
LKV_INLINE void vparams_q5_K(const block_q5_K *b, kvec *p) { vparams_k4(b->scales, b->d, b->dmin, p); }

LKV_INLINE void vparams_q6_K(const block_q6_K *b, kvec *p) {
    const __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    p->d = h2f(b->d);
    p->dmin = 0.0f;
    p->t = _mm256_cvtepi8_epi16(even_odd(sc));
    p->w = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc), 5);
}

#endif
