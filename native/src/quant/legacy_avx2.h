/*
 * quant/legacy_avx2.h: the AVX2 expansions of the 32-element block formats
 * that the row dots (dot_legacy.c) and the GEMM tiles (gemm_legacy.c)
 * share: a block's codes as one vector of 32 bytes in element order, signed
 * for the symmetric formats (q4_0, q5_0, q8_0, iq4_nl: the value over d),
 * unsigned for the ones with a minimum (q4_1, q5_1). Included only where
 * __AVX2__ is defined.
 */
#ifndef LKV_QUANT_LEGACY_AVX2_H
#define LKV_QUANT_LEGACY_AVX2_H

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/simd.h"

LKV_INLINE int load_u32(const void *p) {
    int v;
    memcpy(&v, p, 4);
    return v;
}

LKV_INLINE __m256i expand_q4_0(const block_q4_0 *b) {
    return _mm256_sub_epi8(unpack_nibbles16(b->qs), _mm256_set1_epi8(8));
}
LKV_INLINE __m256i expand_q4_1(const block_q4_1 *b) { return unpack_nibbles16(b->qs); }
LKV_INLINE uint32_t qh32(const uint8_t qh[4]) {
    uint32_t h;
    memcpy(&h, qh, 4);  // little-endian host
    return h;
}
/* q - 16 as a signed byte: low nibble | 0xf0 where the fifth bit is clear. */
LKV_INLINE __m256i expand_q5_0(const block_q5_0 *b) {
    const __m256i hb = bits_to_bytes(qh32(b->qh));
    return _mm256_or_si256(unpack_nibbles16(b->qs), _mm256_andnot_si256(hb, _mm256_set1_epi8((char)0xf0)));
}
LKV_INLINE __m256i expand_q5_1(const block_q5_1 *b) {
    const __m256i hb = bits_to_bytes(qh32(b->qh));
    return _mm256_or_si256(unpack_nibbles16(b->qs), _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}
LKV_INLINE __m256i expand_q8_0(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
LKV_INLINE __m256i expand_iq4_nl(const block_iq4_nl *b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lkv_iq4nl_values));
    return _mm256_shuffle_epi8(table, unpack_nibbles16(b->qs));
}

#endif
