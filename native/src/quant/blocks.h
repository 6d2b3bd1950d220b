/*
 * quant/blocks.h: the byte layout of every block format, once.
 *
 * Each struct is written from the published GGUF / ggml layout and pinned by
 * a size assertion, so a block read from a GGUF file is used in place. Scales
 * stored as IEEE half precision are kept as raw uint16_t bits (lkv_fp16_*).
 *
 * Legacy formats hold 32 elements per block; the k-quants hold QK_K = 256 in a
 * "super-block" made of 8 or 16 sub-blocks, each with its own small scale.
 * Element order inside a block (which nibble / bit plane holds element j) is
 * documented beside each struct and relied on by to_float and the dots.
 */
#ifndef LKV_QUANT_BLOCKS_H
#define LKV_QUANT_BLOCKS_H

#include <stdint.h>

#if defined(__cplusplus) && !defined(_Static_assert)  /* included by CUDA sources */
#define _Static_assert static_assert
#define LKV_BLOCKS_UNDEF_SA 1
#endif

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_K 256
#define K_SCALE_SIZE 12

// ---------------------------------------------------------------- 32-element blocks

/* x[j] = d * (q[j] - 8); q[j] (j < 16) is the low nibble of qs[j], q[j+16] the high. */
typedef struct {
    uint16_t d;             // f16 scale
    uint8_t qs[QK4_0 / 2];  // (32,) nibbles
} block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

/* x[j] = d * q[j] + m; nibbles as q4_0. */
typedef struct {
    uint16_t d;             // f16 scale
    uint16_t m;             // f16 minimum
    uint8_t qs[QK4_1 / 2];  // (32,) nibbles
} block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

/* x[j] = d * (q[j] - 16); low 4 bits as q4_0, bit 4 of q[j] is bit j of qh (LE). */
typedef struct {
    uint16_t d;             // f16 scale
    uint8_t qh[4];          // (32,) fifth bits, little-endian uint32
    uint8_t qs[QK5_0 / 2];  // (32,) low nibbles
} block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

/* x[j] = d * q[j] + m; bits as q5_0. */
typedef struct {
    uint16_t d;             // f16 scale
    uint16_t m;             // f16 minimum
    uint8_t qh[4];          // (32,) fifth bits
    uint8_t qs[QK5_1 / 2];  // (32,) low nibbles
} block_q5_1;
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

/* x[j] = d * qs[j]. */
typedef struct {
    uint16_t d;             // f16 scale
    int8_t qs[QK8_0];       // (32,)
} block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

/* x[j] = d * qs[j]; s = d * sum(qs) (an activation format: the dot with a
 * q4_1 / q5_1 block needs the sum of y for the minimum's term). */
typedef struct {
    uint16_t d;             // f16 scale
    uint16_t s;             // f16 d * sum(qs)
    int8_t qs[QK8_1];       // (32,)
} block_q8_1;
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

/* x[j] = d * kvalues_iq4nl[q[j]]; nibbles as q4_0. */
typedef struct {
    uint16_t d;             // f16 scale
    uint8_t qs[QK4_NL / 2]; // (32,) indices into the non-linear table
} block_iq4_nl;
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

// ---------------------------------------------------------------- 256-element super-blocks

/* 16 sub-blocks of 16. Element e = 128*h + 32*s + l (h < 2, s < 4, l < 32) has
 * q = (qs[32*h + l] >> 2*s) & 3 and sub-block e/16; scales[k] holds the scale
 * (low nibble) and the minimum (high nibble): x = d*sc*q - dmin*mn. */
typedef struct {
    uint8_t scales[QK_K / 16]; // (16,) 4-bit scale | 4-bit min << 4
    uint8_t qs[QK_K / 4];      // (256,) 2-bit quants
    uint16_t d;                // f16 super-block scale of the scales
    uint16_t dmin;             // f16 super-block scale of the mins
} block_q2_K;
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

/* 16 sub-blocks of 16. Low 2 bits as q2_K; element e = 32*i + l has high bit
 * (hmask[l] >> i) & 1, and q = low - (high ? 0 : 4). The 16 6-bit scales
 * (stored +32) are: low nibble of scales[k] (k < 8) or scales[k-8] >> 4, high
 * two bits (scales[8 + k%4] >> 2*(k/4)) & 3. x = d * (sc - 32) * q. */
typedef struct {
    uint8_t hmask[QK_K / 8];   // (256,) high bits
    uint8_t qs[QK_K / 4];      // (256,) low 2 bits
    uint8_t scales[12];        // (16,) 6-bit scales, packed
    uint16_t d;                // f16 super-block scale
} block_q3_K;
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min packed in
 * scales[12]: for j < 4 sc = scales[j] & 63, mn = scales[j+4] & 63; for j >= 4
 * sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
 * mn = (scales[j+4] >> 4) | (scales[j] >> 6) << 4.
 * Element e = 64*c + 32*u + l has q = (qs[32*c + l] >> 4*u) & 15, sub-block
 * 2*c + u; x = d*sc*q - dmin*mn. */
typedef struct {
    uint16_t d;                  // f16 super-block scale of the scales
    uint16_t dmin;               // f16 super-block scale of the mins
    uint8_t scales[K_SCALE_SIZE];// (8, 2) 6-bit scales and mins, packed
    uint8_t qs[QK_K / 2];        // (256,) 4-bit quants
} block_q4_K;
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

/* As q4_K plus a fifth bit: element e = 32*i + l has (qh[l] >> i) & 1. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];        // (256,) fifth bits
    uint8_t qs[QK_K / 2];        // (256,) low nibbles
} block_q5_K;
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

/* 16 sub-blocks of 16 with int8 scales. Element e = 128*h + 32*s + l has low
 * nibble (ql[64*h + 32*(s&1) + l] >> 4*(s>>1)) & 15 and high two bits
 * (qh[32*h + l] >> 2*s) & 3; x = d * scales[e/16] * (q - 32). */
typedef struct {
    uint8_t ql[QK_K / 2];        // (256,) low nibbles
    uint8_t qh[QK_K / 4];        // (256,) high 2 bits
    int8_t scales[QK_K / 16];    // (16,)
    uint16_t d;                  // f16 super-block scale
} block_q6_K;
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* Activation format of the k-quant dots: x = d * qs; bsums[k] = sum of
 * qs[16k .. 16k+15] (lets the dots apply per-sub-block minimums cheaply). */
typedef struct {
    float d;                     // f32 scale
    int8_t qs[QK_K];             // (256,)
    int16_t bsums[QK_K / 16];    // (16,)
} block_q8_K;
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

// ---------------------------------------------------------------- i-quants (256-element super-blocks)

/* The i-quants code groups of 8 (or 4) elements as one point of a fixed grid
 * (quant/iq_tables.h) with separate sign bits; 8 sub-blocks of 32 each carry
 * a small odd-valued scale. "ib" below is the sub-block (e = 32*ib + ...),
 * "g" a group of 8 (e = 8*g + j) or of 4 (e = 4*g + j). */

/* qs as 8 pairs of uint32 (a0, a1) per sub-block ib: byte l of a0 is the
 * iq2xxs grid index of group 4*ib + l; bits 7l..7l+6 of a1 its ksigns index;
 * a1 >> 28 the scale s. x = d * (0.5 + s) * 0.25 * grid * sign. */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint16_t qs[QK_K / 8];       // (8, 2) uint32 pairs, as above
} block_iq2_xxs;
_Static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");

/* qs[g]: 9-bit iq2xs grid index | ksigns index << 9 for group g (of 32);
 * scales[ib]: the scale of groups 4ib, 4ib+1 (low nibble) and 4ib+2, 4ib+3
 * (high nibble). x = d * (0.5 + s) * 0.25 * grid * sign. */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint16_t qs[QK_K / 8];       // (32,) grid index and sign index per group of 8
    uint8_t scales[QK_K / 32];   // (16,) 4-bit scales per 16 elements
} block_iq2_xs;
_Static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs size");

/* Group g (of 32): iq2s grid index qs[g] | ((qh[g/4] >> 2*(g%4)) & 3) << 8,
 * sign bit j of element j in qs[32 + g] (no parity rule); scales as iq2_xs.
 * x = d * (0.5 + s) * 0.25 * grid * sign. */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint8_t qs[QK_K / 4];        // (32,) low index bytes, then (32,) sign bytes
    uint8_t qh[QK_K / 32];       // (32,) 2-bit high index parts
    uint8_t scales[QK_K / 32];   // (16,) 4-bit scales
} block_iq2_s;
_Static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s size");

/* qs[0..63]: the iq3xxs grid index of group g of 4; then 8 little-endian
 * uint32 a (one per sub-block ib): bits 7l..7l+6 the ksigns index of the 8
 * elements 32ib + 8l .. +7, a >> 28 the scale s.
 * x = d * (0.5 + s) * 0.5 * grid * sign. */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint8_t qs[3 * QK_K / 8];    // (64,) grid indices, (8,) uint32 scale+signs
} block_iq3_xxs;
_Static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs size");

/* Group g of 4: iq3s grid index qs[g] | ((qh[g/8] >> g%8) & 1) << 8; element
 * e's sign is bit e%8 of signs[e/8]; sub-block ib's scale s is nibble ib%2 of
 * scales[ib/2]. x = d * (1 + 2s) * grid * sign. */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint8_t qs[QK_K / 4];        // (64,) low index bytes
    uint8_t qh[QK_K / 32];       // (64,) ninth index bits
    uint8_t signs[QK_K / 8];     // (256,) sign bits
    uint8_t scales[QK_K / 64];   // (8,) 4-bit scales
} block_iq3_s;
_Static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s size");

/* Sub-block ib, group l (of 4, 8 elements each): iq1s grid index
 * qs[4ib + l] | ((qh[ib] >> 3l) & 7) << 8; s = (qh[ib] >> 12) & 7; delta =
 * -0.125 where bit 15 of qh[ib] is set, else +0.125.
 * x = d * (2s + 1) * (grid + delta). */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint8_t qs[QK_K / 8];        // (32,) low index bytes
    uint16_t qh[QK_K / 32];      // (8,) high index bits, scale, delta sign
} block_iq1_s;
_Static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s size");

/* Group g (of 32, 8 elements): iq1s grid index qs[g] | (nib & 7) << 8 with
 * nib = qh[g/2] >> 4*(g%2); delta = -0.125 where nib & 8, else +0.125. Scale
 * k (of 16, 16 elements) s = (sc[k/4] >> 3*(k%4)) & 7 with sc the 4 uint16 of
 * scales; the f16 super-block scale d is made of their top nibbles:
 * bits (sc[0] >> 12) | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000).
 * x = d * (2s + 1) * (grid + delta). */
typedef struct {
    uint8_t qs[QK_K / 8];        // (32,) low index bytes
    uint8_t qh[QK_K / 16];       // (32,) nibbles: 3 high index bits, delta sign
    uint8_t scales[QK_K / 32];   // (4,) uint16: 3-bit scales, d in the top nibbles
} block_iq1_m;
_Static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m size");

/* The f16 bits of an iq1_m block's super-block scale (the scales' top nibbles). */
static inline uint16_t block_iq1_m_d(const block_iq1_m *b) {
    const uint16_t s0 = (uint16_t)(b->scales[0] | b->scales[1] << 8), s1 = (uint16_t)(b->scales[2] | b->scales[3] << 8),
                   s2 = (uint16_t)(b->scales[4] | b->scales[5] << 8), s3 = (uint16_t)(b->scales[6] | b->scales[7] << 8);
    return (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
}

/* The non-linear 4-bit levels of iq4_nl with 6-bit sub-block scales: ls of
 * sub-block ib = ((scales_l[ib/2] >> 4*(ib%2)) & 15) | ((scales_h >> 2ib) & 3) << 4;
 * element 32ib + 16h + j is nibble h of qs[16ib + j].
 * x = d * (ls - 32) * kvalues_iq4nl[q]. */
typedef struct {
    uint16_t d;                  // f16 super-block scale
    uint16_t scales_h;           // (8,) high 2 bits of the scales
    uint8_t scales_l[QK_K / 64]; // (8,) low nibbles of the scales
    uint8_t qs[QK_K / 2];        // (256,) indices into the non-linear table
} block_iq4_xs;
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

#ifdef LKV_BLOCKS_UNDEF_SA
#undef _Static_assert
#undef LKV_BLOCKS_UNDEF_SA
#endif

#endif
