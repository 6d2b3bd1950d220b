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

#endif
