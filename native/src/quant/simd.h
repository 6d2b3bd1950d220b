/*
 * quant/simd.h: small inline helpers shared by the quant sources: scalar
 * fp16 <-> fp32 (F16C instructions where the build has them, exact bit
 * arithmetic otherwise) and the AVX2 building blocks of the integer dots.
 *
 * Every helper is a pure function of its inputs, so a kernel that calls them
 * in the same order produces bit-identical results (vec_dot vs vec_dot_rows).
 */
#ifndef LKV_QUANT_SIMD_H
#define LKV_QUANT_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define LKV_X86 1
#include <immintrin.h>
#endif

#define LKV_INLINE static inline __attribute__((always_inline))
/* The AVX2 helpers below carry the target themselves, so kernels that pick
 * their path at run time (target("avx2") functions behind a CPU check, as in
 * dot_iquants.c) can use them in a build without -mavx2. */
#define LKV_AVX2 __attribute__((target("avx2")))
#define LKV_AVX2_INLINE static inline __attribute__((always_inline, target("avx2")))

/* Plain C loops the compiler vectorizes (elementwise ops, activation
 * quantization): one clone per ISA level, picked by the loader (ifunc).
 * Elementwise IEEE operations and fmaf round the same on every level. */
#if defined(LKV_X86) && defined(LKV_HAVE_ISA_LEVELS)
#define LKV_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LKV_ISA_CLONES
#endif

// ---------------------------------------------------------------- fp16 scalars

LKV_INLINE float fp16_to_fp32_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    float f;
    if (exp == 0) {             // zero or subnormal: mant * 2^-24, exact in f32
        f = (float)mant * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (exp == 31) {     // inf / nan
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest, ties to even; overflow to inf; NaN stays a quiet NaN. */
LKV_INLINE uint16_t fp32_to_fp16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x3ff);
    if (x >= 0x477ff000u) return sign | 0x7c00;  // >= 65520 rounds to inf
    if (x < 0x38800000u) {                       // below 2^-14: subnormal half
        if (x < 0x33000000u) return sign;        // below 2^-25 (a tie at 2^-25 goes to 0)
        uint32_t e = x >> 23, m = (x & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e;                // half mantissa = m * 2^(e-126)
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = (x - 0x38000000u) >> 13, rem = x & 0x1fff;  // rebias 127 -> 15
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return sign | (uint16_t)r;
}

#ifdef __F16C__
LKV_INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }
LKV_INLINE uint16_t f2h(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
LKV_INLINE float h2f(uint16_t h) { return fp16_to_fp32_bits(h); }
LKV_INLINE uint16_t f2h(float f) { return fp32_to_fp16_bits(f); }
#endif

// ---------------------------------------------------------------- AVX2 helpers

#ifdef LKV_X86

LKV_AVX2_INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

LKV_AVX2_INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* 8 int32 lanes, each the sum of 4 products u8 * s8 (exact: no saturation as
 * long as the u8 side is < 128 or the s8 side avoids -128 pairs with 255). */
LKV_AVX2_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* Signed x signed: move x's sign onto y so the u8 * s8 instruction applies. */
LKV_AVX2_INLINE __m256i dot_s8s8(__m256i x, __m256i y) {
    return dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* 16 packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high in 16..31. */
LKV_AVX2_INLINE __m256i unpack_nibbles16(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 32 bits -> 32 bytes: byte j is 0xff where bit j is set. */
LKV_AVX2_INLINE __m256i bits_to_bytes(uint32_t bits) {
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                             0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

#endif
#endif
