/*
 * quant/float_scalars.c: the exported scalar fp16 / bf16 conversions declared
 * in quant/types.h (exact, round-to-nearest-even). Kept out of float_types.c,
 * which is compiled once per ISA level (quant/isa.h).
 */
#include "quant/types.h"
#include "quant/simd.h"

float lkv_fp16_to_fp32(uint16_t h) { return fp16_to_fp32_bits(h); }
uint16_t lkv_fp32_to_fp16(float f) { return fp32_to_fp16_bits(f); }

float lkv_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even on the upper half; a NaN is kept quiet. */
uint16_t lkv_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}
