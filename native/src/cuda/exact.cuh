/*
 * cuda/exact.cuh: what the CPU-exact mat-vec (mvx.cu) and GEMM (mmx.cu) share
 * for the legacy weight types q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl.
 *
 * The CPU's AVX2 dot (quant/dot_legacy.c) expands a 32-block to 32 byte codes
 * and forms 8 int32 lanes, lane l = sum of the products of elements 4l..4l+3
 * (exact), then per block acc_l = fmaf(dx * dy, (float)p_l, acc_l): 8 float
 * chains in block order, summed at the end as ((a0+a4)+(a2+a6)) +
 * ((a1+a5)+(a3+a7)); q4_1/q5_1 add summ = sum over blocks of m * s (plain
 * float adds in block order) after that. Reproducing those chains bit for bit
 * is what makes the GPU agree with the CPU: a 1-ulp difference flips 8-bit
 * activation roundings further down the model. q4_0 weights are the
 * exception: their CPU dot is in block order (quant/dot_blocks.c: chain
 * b % 8 takes block b's whole integer dot), computed by mvx_blocks.cuh for
 * decode and mmb.cu for prefill.
 *
 *   ex_word<T>(blk, k)  elements 4k..4k+3 (k = 0..7) of a block as 4 signed
 *                       bytes (q4_1/q5_1: unsigned codes 0..31, also valid
 *                       as signed bytes), the CPU's expanded codes
 *   ex_d / ex_m         the block's scale and minimum as floats
 *
 * Written from the published block layouts; __host__ so that a host program
 * can check them against the CPU's codes.
 */
#ifndef LKV_CUDA_EXACT_CUH
#define LKV_CUDA_EXACT_CUH

#include "matmul.cuh"

template <int T> struct ex_ok {
    enum { v = T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1 ||
               T == LKV_TYPE_Q8_0 || T == LKV_TYPE_IQ4_NL };
};
/* the types dotted against q8_1 activations: a minimum m, the sum term s */
template <int T> struct ex_min { enum { v = T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1 }; };

/* bits 0x4B400000 are the float 1.5 * 2^23; adding an int |p| < 2^22 to them
 * gives the bits of 12582912 + p exactly, so a dp4a started there yields
 * (float)p after one subtraction instead of an int-to-float conversion */
static constexpr int EX_MAGIC = 0x4B400000;

// ---------------------------------------------------------------- codes

/* 4 bytes at a 2-byte (ld2) or 4-byte (ld4) aligned address */
static __host__ __device__ __forceinline__ uint32_t ex_ld2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return h[0] | ((uint32_t)h[1] << 16);
}
static __host__ __device__ __forceinline__ uint32_t ex_ld4(const uint8_t *p) { return *(const uint32_t *)p; }

/* bit i (i < 4) of h to bit 0 of byte i */
static __host__ __device__ __forceinline__ uint32_t ex_spread4(uint32_t h) {
    return ((h & 0xF) * 0x00204081u) & 0x01010101u;
}

/* byte_perm with selector nibbles below 8: byte i of the result is byte
 * (s >> 4i) & 7 of the 8 bytes {y, x} (a host twin for the checks) */
static __host__ __device__ __forceinline__ uint32_t ex_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = x | ((uint64_t)y << 32);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
#endif
}
/* 4 nibble indices (one per byte) -> the iq4_nl levels as signed bytes. The
 * 16 levels sit in 4 words; byte_perm picks from the lower or the upper 8 by
 * the low 3 bits of each index, bit 3 chooses between the two picks. */
static __host__ __device__ __forceinline__ uint32_t ex_iq4(uint32_t x) {
    const uint32_t t0 = 0xBFAD9881u, t1 = 0xF6EADDCFu, t2 = 0x26190D01u, t3 = 0x71594535u;
    const uint32_t s = x & 0x07070707u;
    const uint32_t sel = (s & 0x7u) | ((s >> 4) & 0x70u) | ((s >> 8) & 0x700u) | ((s >> 12) & 0x7000u);
    const uint32_t lo = ex_perm(t0, t1, sel), hi = ex_perm(t2, t3, sel);
    const uint32_t m = ((x >> 3) & 0x01010101u) * 0xFFu;
    return (hi & m) | (lo & ~m);
}

/* elements 4k..4k+3 (k = 0..7) of the block at b. Nibble formats: elements
 * 0..15 are the low nibbles of qs[0..15], 16..31 the high ones; q5: bit j of
 * qh is element j's fifth bit. Offsets by 8 / 16 are done per byte without
 * carries: x + 0x78 stays below 0x100 and ^ 0x80 then takes 128 away mod 256. */
template <int T>
static __host__ __device__ __forceinline__ uint32_t ex_word(const uint8_t *b, int k) {
    const int w = k & 3, sh = (k >> 2) * 4;
    if constexpr (T == LKV_TYPE_Q4_0) {
        const uint32_t x = (ex_ld2(b + 2 + 4 * w) >> sh) & 0x0F0F0F0Fu;
        return (x + 0x78787878u) ^ 0x80808080u;
    } else if constexpr (T == LKV_TYPE_IQ4_NL) {
        return ex_iq4((ex_ld2(b + 2 + 4 * w) >> sh) & 0x0F0F0F0Fu);
    } else if constexpr (T == LKV_TYPE_Q4_1) {
        return (ex_ld4(b + 4 + 4 * w) >> sh) & 0x0F0F0F0Fu;
    } else if constexpr (T == LKV_TYPE_Q5_0) {
        const uint32_t x = ((ex_ld2(b + 6 + 4 * w) >> sh) & 0x0F0F0F0Fu) | (ex_spread4(ex_ld2(b + 2) >> (4 * k)) << 4);
        return (x + 0x70707070u) ^ 0x80808080u;
    } else if constexpr (T == LKV_TYPE_Q5_1) {
        return ((ex_ld4(b + 8 + 4 * w) >> sh) & 0x0F0F0F0Fu) | (ex_spread4(ex_ld4(b + 4) >> (4 * k)) << 4);
    } else {
        static_assert(T == LKV_TYPE_Q8_0, "ex_word: legacy types only");
        return ex_ld2(b + 2 + 4 * k);
    }
}
static __host__ __device__ __forceinline__ float ex_d(const uint8_t *b) { return __half2float(*(const __half *)b); }
static __host__ __device__ __forceinline__ float ex_m(const uint8_t *b) { return __half2float(*(const __half *)(b + 2)); }

// ---------------------------------------------------------------- entry points

/* CPU-exact mat-vec (mvx.cu), n <= MV_MAX_TOK, activations already quantized
 * in b->xq / b->xd / b->xs; false for the other types */
bool lkv_cuda_mvx(lkv_bctx *b, int type, mm_set &ms, int cols, int n);
/* CPU-exact GEMM (mmx.cu), any n up to b->xq_rows, activations already
 * quantized; false for the other types */
bool lkv_cuda_mmx(lkv_bctx *b, int type, mm_set &ms, int cols, int n);
/* the same for q4_0 weights, whose CPU dot is in block order (mmb.cu) */
bool lkv_cuda_mmb(lkv_bctx *b, int type, mm_set &ms, int cols, int n);

#endif
