/*
 * cuda/iquant_dq.cuh: the i-quant super-blocks (iq2_xxs, iq2_xs, iq2_s,
 * iq3_xxs, iq3_s, iq1_s, iq1_m, iq4_xs) as the CUDA kernels read them:
 *   iq_dq8<T>(row, e, y)    y[0..8)  = elements [8e, 8e+8) of a row of type T
 *   iq_dq32<T>(row, g, y)   y[0..32) = elements [32g, 32g+32), four iq_dq8
 * quant.cuh's dq8<T> / dq32<T> primitives, which branch here for these
 * types, so every kernel that reads weights through them reads these too;
 * and iq4_xs's 8-bit codes with its per-32 scale (iq4xs_codes, iq4xs_scale)
 * for the integer kernels (quant_i8.cuh's dq8i).
 *
 * Layouts: quant/blocks.h (the CPU's structs, used here as they are). Each
 * value is computed with the f32 operations of quant/iquants.c in the same
 * order (built with --fmad=false, as the library is), so a value equals the
 * CPU's to_float, and gguf.quants, bit for bit. __host__ __device__: the host
 * pass reads quant/iq_tables.c's tables, the device pass the static
 * __device__ copies of cuda/iq_tables.cuh (one per translation unit and type
 * that reads them); tests/cuda/iq_dq.cu runs both.
 */
#ifndef LKV_CUDA_IQUANT_DQ_CUH
#define LKV_CUDA_IQUANT_DQ_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "quant/types.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
}
#include "iq_tables.cuh"

#ifdef __CUDA_ARCH__
#define IQT(name) name##_d<T>   /* dependent: only the tables of the types used */
#else
#define IQT(name) name
#endif

static __host__ __device__ constexpr bool lkv_is_iquant(int t) {
    return t == LKV_TYPE_IQ2_XXS || t == LKV_TYPE_IQ2_XS || t == LKV_TYPE_IQ2_S ||
           t == LKV_TYPE_IQ3_XXS || t == LKV_TYPE_IQ3_S || t == LKV_TYPE_IQ1_S ||
           t == LKV_TYPE_IQ1_M || t == LKV_TYPE_IQ4_XS;
}

/* bytes per 256-element block */
template <int T> static __host__ __device__ constexpr int iq_block_bytes() {
    return T == LKV_TYPE_IQ2_XXS ? 66 : T == LKV_TYPE_IQ2_XS ? 74 : T == LKV_TYPE_IQ2_S ? 82
         : T == LKV_TYPE_IQ3_XXS ? 98 : T == LKV_TYPE_IQ3_S ? 110 : T == LKV_TYPE_IQ1_S ? 50
         : T == LKV_TYPE_IQ1_M ? 56 : T == LKV_TYPE_IQ4_XS ? 136 : 0;
}

static __host__ __device__ __forceinline__ float iq_h2f(uint16_t bits) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

static __host__ __device__ __forceinline__ uint32_t iq_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* bit i (i < 4) of h to bit 0 of byte i */
static __host__ __device__ __forceinline__ uint32_t spread4(uint32_t h) {
    return ((h & 0xF) * 0x00204081u) & 0x01010101u;
}

/* 4 bytes of a grid table row: aligned words on the device (iq_tables.cuh) */
static __host__ __device__ __forceinline__ uint32_t iq_grid4(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    return iq_u32(p);
#endif
}

/* the 4 grid levels in the bytes of g (each 1..127) with the signs of bits
 * 0..3 of s applied: -level where the bit is set, as signed bytes (-l is
 * ~l + 1, and ~l + 1 <= 255 carries into no other byte since l >= 1) */
static __host__ __device__ __forceinline__ uint32_t iq_signed4(uint32_t g, uint32_t s) {
    const uint32_t one = spread4(s);
    return (g ^ one * 255u) + one;
}

// ---------------------------------------------------------------- iq4_xs's int8 codes

/* iq4_nl's 16 levels (quant/legacy.c's lkv_iq4nl_values, ggml's table) as
 * signed bytes, four to a word: levels 0..7 in the first two, 8..15 in the
 * last two */
#define LKV_IQ4NL_W0 0xBFAD9881u   /* -127 -104  -83  -65 */
#define LKV_IQ4NL_W1 0xF6EADDCFu   /*  -49  -35  -22  -10 */
#define LKV_IQ4NL_W2 0x26190D01u   /*    1   13   25   38 */
#define LKV_IQ4NL_W3 0x71594535u   /*   53   69   89  113 */

/* bytes s & 7, s >> 4 & 7, ... of the 8 bytes (a, b): the byte permutation
 * (PRMT) without its sign mode */
static __host__ __device__ __forceinline__ uint32_t iq_prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, s);
#else
    const uint64_t v = a | (uint64_t)b << 32;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(v >> 8 * ((s >> 4 * i) & 7) & 255) << 8 * i;
    return r;
#endif
}

/* four nibbles (one per byte of v, 0..15) to their iq4_nl levels as signed bytes */
static __host__ __device__ __forceinline__ uint32_t iq4nl_bytes(uint32_t v) {
    const uint32_t sel = (v & 7) | (v >> 4 & 0x70) | (v >> 8 & 0x700) | (v >> 12 & 0x7000);
    const uint32_t lo = iq_prmt(LKV_IQ4NL_W0, LKV_IQ4NL_W1, sel), hi = iq_prmt(LKV_IQ4NL_W2, LKV_IQ4NL_W3, sel);
    const uint32_t m = (v >> 3 & 0x01010101u) * 255u;   /* bytes whose nibble is >= 8 */
    return (lo & ~m) | (hi & m);
}

/* the signed 6-bit scale (ls - 32) of sub-block ib of an iq4_xs block */
static __host__ __device__ __forceinline__ int iq4xs_scale(const block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 15) | ((b->scales_h >> 2 * ib) & 3) << 4) - 32;
}

/* elements 8p .. 8p + 7 (p < 4) of sub-block ib as levels, signed bytes in w0
 * (elements 0..3) and w1 (4..7): nibble p >> 1 of qs[16ib + 8(p & 1) ..]; the
 * value of element i is d * scale * level_i. The block is 4-byte aligned. */
static __host__ __device__ __forceinline__ void iq4xs_codes(const block_iq4_xs *b, int ib, int p, uint32_t &w0,
                                                            uint32_t &w1) {
    const uint32_t *q = (const uint32_t *)(b->qs + 16 * ib + 8 * (p & 1));
    const int sh = 4 * (p >> 1);
    w0 = iq4nl_bytes(q[0] >> sh & 0x0F0F0F0Fu);
    w1 = iq4nl_bytes(q[1] >> sh & 0x0F0F0F0Fu);
}

// ---------------------------------------------------------------- codes, iq_dq8, iq_dq32

/* the types whose element is db * code with an 8-bit code and one float db
 * per 8 elements: all but iq1_s / iq1_m (grid + 1/8) */
template <int T> static __host__ __device__ constexpr bool iq_has_codes() {
    return lkv_is_iquant(T) && T != LKV_TYPE_IQ1_S && T != LKV_TYPE_IQ1_M;
}

/* Elements [8e, 8e + 8) of a row of type T (iq_has_codes<T>) as db * code_i,
 * the codes signed bytes in w0 (elements 0..3) and w1 (4..7): piece e & 3 of
 * the 32-group g = e >> 2 (quant.cuh's dq8 numbering), sub-block ib = g & 7 of
 * super-block g >> 3. db is computed as quant/iquants.c computes it, and
 * db * (float)code is its value (negation is exact), so both the float
 * kernels (iq_dq8) and the integer ones (quant_i8.cuh's dq8i) read this. The
 * row is 4-byte aligned (every weight upload is). */
template <int T>
static __host__ __device__ __forceinline__ void iq_codes8(const uint8_t *__restrict__ row, int e, uint32_t &w0,
                                                          uint32_t &w1, float &db) {
    static_assert(iq_has_codes<T>(), "iq_codes8: a type with 8-bit codes");
    const int g = e >> 2, p = e & 3, ib = g & 7;
    const uint8_t *blk = row + (size_t)(g >> 3) * iq_block_bytes<T>();
    if constexpr (T == LKV_TYPE_IQ4_XS) {
        const block_iq4_xs *b = (const block_iq4_xs *)blk;
        db = iq_h2f(b->d) * (float)iq4xs_scale(b, ib);
        iq4xs_codes(b, ib, p, w0, w1);
    } else {
        const uint8_t *gr0 = nullptr, *gr1 = nullptr;   /* grid levels of elements 0..3, 4..7 */
        uint32_t sg = 0;                                /* sign bits of elements 0..7 */
        if constexpr (T == LKV_TYPE_IQ2_XXS) {
            const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
            const uint8_t *q = (const uint8_t *)b->qs + 8 * ib;
            const uint32_t a0 = iq_u32(q), a1 = iq_u32(q + 4);
            db = iq_h2f(b->d) * (0.5f + (float)(a1 >> 28)) * 0.25f;
            gr0 = IQT(lkv_iq2xxs_grid)[(a0 >> 8 * p) & 255];
            gr1 = gr0 + 4;
            sg = IQT(lkv_iq_ksigns)[(a1 >> 7 * p) & 127];
        } else if constexpr (T == LKV_TYPE_IQ2_XS || T == LKV_TYPE_IQ2_S) {
            const float d = iq_h2f(((const block_iq2_xs *)blk)->d);
            const uint8_t sc = T == LKV_TYPE_IQ2_XS ? ((const block_iq2_xs *)blk)->scales[ib]
                                                     : ((const block_iq2_s *)blk)->scales[ib];
            const int gg = 4 * ib + p;
            db = d * (0.5f + (float)((sc >> 4 * (p >> 1)) & 15)) * 0.25f;
            if constexpr (T == LKV_TYPE_IQ2_XS) {
                const uint16_t q = ((const block_iq2_xs *)blk)->qs[gg];
                gr0 = IQT(lkv_iq2xs_grid)[q & 511];
                sg = IQT(lkv_iq_ksigns)[q >> 9];
            } else {
                const block_iq2_s *b = (const block_iq2_s *)blk;
                gr0 = IQT(lkv_iq2s_grid)[b->qs[gg] | ((b->qh[ib] >> 2 * p) & 3) << 8];
                sg = b->qs[32 + gg];
            }
            gr1 = gr0 + 4;
        } else if constexpr (T == LKV_TYPE_IQ3_XXS) {
            const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
            const uint32_t a = iq_u32(b->qs + QK_K / 4 + 4 * ib);
            db = iq_h2f(b->d) * (0.5f + (float)(a >> 28)) * 0.5f;
            sg = IQT(lkv_iq_ksigns)[(a >> 7 * p) & 127];
            gr0 = IQT(lkv_iq3xxs_grid)[b->qs[8 * ib + 2 * p]];
            gr1 = IQT(lkv_iq3xxs_grid)[b->qs[8 * ib + 2 * p + 1]];
        } else if constexpr (T == LKV_TYPE_IQ3_S) {
            const block_iq3_s *b = (const block_iq3_s *)blk;
            db = iq_h2f(b->d) * (float)(1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 15));
            sg = iq_u32(b->signs + 4 * ib) >> 8 * p & 255;
            gr0 = IQT(lkv_iq3s_grid)[b->qs[8 * ib + 2 * p] | ((b->qh[ib] >> 2 * p) & 1) << 8];
            gr1 = IQT(lkv_iq3s_grid)[b->qs[8 * ib + 2 * p + 1] | ((b->qh[ib] >> (2 * p + 1)) & 1) << 8];
        }
        w0 = iq_signed4(iq_grid4(gr0), sg);
        w1 = iq_signed4(iq_grid4(gr1), sg >> 4);
    }
}

/* y[0..8) = elements [8e, 8e + 8) of a row of type T (numbering as iq_codes8) */
template <int T>
static __host__ __device__ __forceinline__ void iq_dq8(const uint8_t *__restrict__ row, int e, float *y) {
    if constexpr (iq_has_codes<T>()) {
        uint32_t w[2];
        float db;
        iq_codes8<T>(row, e, w[0], w[1], db);
        for (int j = 0; j < 8; j++) y[j] = db * (float)(int8_t)(w[j >> 2] >> 8 * (j & 3));
    } else {   /* iq1_s, iq1_m: x = dl * (grid + delta) */
        const int g = e >> 2, p = e & 3, ib = g & 7;
        const uint8_t *blk = row + (size_t)(g >> 3) * iq_block_bytes<T>();
        float d;
        int idx, s, neg;
        if constexpr (T == LKV_TYPE_IQ1_S) {
            const block_iq1_s *b = (const block_iq1_s *)blk;
            const int qh = b->qh[ib];
            d = iq_h2f(b->d);
            idx = b->qs[4 * ib + p] | ((qh >> 3 * p) & 7) << 8;
            s = (qh >> 12) & 7;
            neg = qh & 0x8000;
        } else {
            const block_iq1_m *b = (const block_iq1_m *)blk;
            const uint8_t *sb = b->scales;   /* the f16 in the top nibbles of the 4 scale words (blocks.h) */
            d = iq_h2f((uint16_t)((sb[1] >> 4) | (sb[3] & 0xf0) | (sb[5] >> 4) << 8 | (sb[7] & 0xf0) << 8));
            const int gg = 4 * ib + p, k = gg / 2;
            const int nib = (b->qh[gg / 2] >> 4 * (gg % 2)) & 15;
            const uint16_t sc = (uint16_t)(b->scales[2 * (k / 4)] | b->scales[2 * (k / 4) + 1] << 8);
            idx = b->qs[gg] | (nib & 7) << 8;
            s = (sc >> 3 * (k % 4)) & 7;
            neg = nib & 8;
        }
        const float dl = d * (float)(2 * s + 1), delta = neg ? -0.125f : 0.125f;
        const int8_t *gr = IQT(lkv_iq1s_grid)[idx];
        for (int j = 0; j < 8; j++) y[j] = dl * ((float)gr[j] + delta);
    }
}

/* y[0..32) = elements [32g, 32g + 32) of a row of type T */
template <int T>
static __host__ __device__ __forceinline__ void iq_dq32(const uint8_t *__restrict__ row, int g, float *y) {
    for (int p = 0; p < 4; p++) iq_dq8<T>(row, 4 * g + p, y + 8 * p);
}

#undef IQT
#endif
