/*
 * cuda/act_quant.cuh: the 8-bit activation quantization (q8_0 / q8_1 blocks of
 * 32, the CPU's quantize8: d = amax / 127, codes round-half-even(x * (127 /
 * amax)), scale and sum(codes) * d rounded to f16) done inside the kernel that
 * produces the activations, and the tag that lets the next matmul skip its own
 * quantize launch.
 *
 * The tag: a producer that wrote b->xq / xd / xs for the float array `src` of
 * `total` elements records it with lkv_act_tag_set right after its launch; the
 * next matmul takes it (lkv_act_tag_take) only if nothing was launched or
 * copied in between (b->op_seq, counted by lkv_cuda_note) and its input is that
 * array. The codes are the same bits matvec_q8.cu's quantize_q8_kernel writes.
 */
#ifndef LKV_CUDA_ACT_QUANT_CUH
#define LKV_CUDA_ACT_QUANT_CUH

#include "common.cuh"

/* The CPU's q8_0 / q8_1 rule (legacy.c quantize8) for a block whose largest
 * magnitude is amax: d = amax / 127, codes round-half-even(x * (127 / amax)),
 * the block's scale stored as f16(d); value(x) is what the CPU's to_float gives
 * back for x, code * f16(d). */
struct act_q8_rule {
    float d, id;
    __device__ __forceinline__ explicit act_q8_rule(float amax) {
        d = __fdiv_rn(amax, 127.f);
        id = amax != 0.f ? __fdiv_rn(127.f, amax) : 0.f;
    }
    __device__ __forceinline__ int code(float x) const { return __float2int_rn(__fmul_rn(x, id)); }
    __device__ __forceinline__ float d16() const { return __half2float(__float2half_rn(d)); }
    __device__ __forceinline__ float value(float x, float d16_) const { return __fmul_rn((float)code(x), d16_); }
};

/* 8 consecutive lanes (lane % 8 == 0 first) hold the 32 elements of one block,
 * 4 each in order; every lane of the warp must call it (idle groups with
 * store = false). Writes the block's 32 codes, scale and sum term. */
static __device__ __forceinline__ void act_q8_group8(const float v[4], bool store, int8_t *q32,
                                                     float *d_out, float *s_out) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const act_q8_rule rule(amax);
    const float d = rule.d;
    int q[4], sum = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        q[i] = rule.code(v[i]);
        sum += q[i];
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!store) return;
    const int lane8 = threadIdx.x & 7;
    char4 c;
    c.x = (signed char)q[0]; c.y = (signed char)q[1]; c.z = (signed char)q[2]; c.w = (signed char)q[3];
    *(char4 *)(q32 + 4 * lane8) = c;
    if (lane8 == 0) {
        *d_out = __half2float(__float2half_rn(d));
        *s_out = __half2float(__float2half_rn(__fmul_rn((float)sum, d)));
    }
}

/* one element per lane, the warp's 32 lanes one block (all lanes call it) */
static __device__ __forceinline__ void act_q8_warp(float v, bool store, int8_t *q32, float *d_out,
                                                   float *s_out) {
    const act_q8_rule rule(lkv_warp_max(fabsf(v)));
    const float d = rule.d;
    const int q = rule.code(v);
    const int sum = __reduce_add_sync(0xffffffffu, q);
    if (!store) return;
    const int lane = threadIdx.x & 31;
    q32[lane] = (int8_t)q;
    if (lane == 0) {
        *d_out = __half2float(__float2half_rn(d));
        *s_out = __half2float(__float2half_rn(__fmul_rn((float)sum, d)));
    }
}

/* the same for element i (>= 0; any integer type) of a flat array whose
 * 32-blocks are whole warps: its block's codes, scale and sum term (xq, xd,
 * xs laid out as b->xq ...) */
template <typename I>
static __device__ __forceinline__ void act_q8_at(float v, I i, int8_t *xq, float *xd, float *xs) {
    act_q8_warp(v, true, xq + (i & ~(I)31), xd + i / 32, xs + i / 32);
}

/* whether a producer of `total` floats (rows of `cols`) may write the codes */
static inline bool lkv_act_fits(const lkv_bctx *b, int64_t rows, int64_t cols) {
    return b->xq && cols % 32 == 0 && cols <= b->xq_cols && rows <= b->xq_rows;
}
static inline void lkv_act_tag_set(lkv_bctx *b, const float *src, int64_t total) {
    b->xq_src = src;
    b->xq_src_total = total;
    b->xq_seq = b->op_seq;
}
/* after a kernel wrote the codes of `src` into the second set: make it the
 * first (the launch took the pointers already) and tag it */
static inline void lkv_act_swap(lkv_bctx *b, const float *src, int64_t total) {
    int8_t *q = b->xq; b->xq = b->xq2; b->xq2 = q;
    float *d = b->xd; b->xd = b->xd2; b->xd2 = d;
    float *s = b->xs; b->xs = b->xs2; b->xs2 = s;
    lkv_act_tag_set(b, src, total);
}
/* true when b->xq holds the q8 codes of x (n, cols); the tag is used up */
static inline bool lkv_act_tag_take(lkv_bctx *b, const float *x, int n, int cols) {
    const bool ok = b->xq_src == x && b->xq_seq == b->op_seq && b->xq_src_total == (int64_t)n * cols;
    b->xq_src = NULL;
    return ok;
}

#endif
