/*
 * cuda/twins.cuh: the device intrinsics that mvx.cu's and attn_dec_ring2.cu's
 * thread code use, each with a host version of the same result, and the
 * unrolling hints, so that a host program (tests/cuda/emu_mvx.cu,
 * emu_attn_ring.cu) can run that thread code: the index math, the decoding
 * and every float operation, bit for bit.
 */
#ifndef LKV_CUDA_TWINS_CUH
#define LKV_CUDA_TWINS_CUH

#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cuda_fp16.h>

/* unrolling hints for the helpers below, which a host program may compile
 * (the host compiler does not know the pragma) */
#ifdef __CUDA_ARCH__
#define TW_UNROLL _Pragma("unroll")
#define TW_UNROLL1 _Pragma("unroll 1")
#define TW_PRAGMA(x) _Pragma(#x)
#define TW_UNROLLN(n) TW_PRAGMA(unroll(n))
#else
#define TW_UNROLL
#define TW_UNROLL1
#define TW_UNROLLN(n)
#endif

/* host twins of the intrinsics, so that a host program can run the index
 * math and the decoding of a thread (MVX_EMU_TRACE: the operands of every
 * step of a chain) */
static __host__ __device__ __forceinline__ uint32_t tw_ld32(const uint8_t *p) { return *(const uint32_t *)p; }
static __host__ __device__ __forceinline__ float tw_h(const uint8_t *p) { return __half2float(*(const __half *)p); }
static __host__ __device__ __forceinline__ float tw_hlo(uint32_t w) {
    return __half2float(__ushort_as_half((unsigned short)(w & 0xFFFFu)));
}
static __host__ __device__ __forceinline__ float tw_hhi(uint32_t w) {
    return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
/* bits s..s+31 of hi:lo (s < 32) */
static __host__ __device__ __forceinline__ uint32_t tw_fsr(uint32_t lo, uint32_t hi, int s) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, s);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (s & 31));
#endif
}
/* bits s..s+31 of hi:lo for s in 0..32 (32: hi) */
static __host__ __device__ __forceinline__ uint32_t tw_fsrc(uint32_t lo, uint32_t hi, int s) {
#ifdef __CUDA_ARCH__
    return __funnelshift_rc(lo, hi, s);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (s > 32 ? 32 : s));
#endif
}
/* w rotated left by s (s < 32) */
static __host__ __device__ __forceinline__ uint32_t tw_rotl(uint32_t w, int s) {
#ifdef __CUDA_ARCH__
    return __funnelshift_l(w, w, s);
#else
    s &= 31;
    return s ? (w << s) | (w >> (32 - s)) : w;
#endif
}
/* c + dot of 4 bytes: a signed (ss) or unsigned (us), b signed */
static __host__ __device__ __forceinline__ int tw_dp4a_ss(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
#endif
}
static __host__ __device__ __forceinline__ int tw_dp4a_us(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    for (int i = 0; i < 4; i++) c += (int)(uint8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
#endif
}
static __host__ __device__ __forceinline__ float tw_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float r = a * b;
    return r;
#endif
}
static __host__ __device__ __forceinline__ float tw_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    volatile float r = a + b;
    return r;
#endif
}
static __host__ __device__ __forceinline__ float tw_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    volatile float r = a - b;
    return r;
#endif
}
static __host__ __device__ __forceinline__ float tw_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}
static __host__ __device__ __forceinline__ float tw_i2f_bits(int p) {
#ifdef __CUDA_ARCH__
    return __int_as_float(p);
#else
    float f;
    memcpy(&f, &p, 4);
    return f;
#endif
}

/* (a & b) ^ c in one LOP3 (the compiler splits it in two with two
 * immediates; c comes in a register) */
static __host__ __device__ __forceinline__ uint32_t tw_andxor(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    return (a & b) ^ c;
#endif
}

#endif
