/*
 * cuda/rope.cuh: the rotation of one pair of a head's row (rope.cu's math,
 * shared with rope_store.cu). Pair j (j < rope_dim/2) is rotated by theta =
 * pos * freq_scale * base^(-2j/rope_dim) / freq_factors[j]; the pair is
 * (2j, 2j+1) in the normal (llama) style and (j, j + rope_dim/2) in the neox
 * style. theta is formed as the CPU forms it (the power by repeated f32
 * multiplication), the rotation as the CPU rotates.
 */
#ifndef LKV_CUDA_ROPE_CUH
#define LKV_CUDA_ROPE_CUH

#include "common.cuh"

/* tab: this token's row of the host's angles (rope_table.cu), or NULL: then
 * cos/sin are computed here, in f64 and rounded, which differs from glibc's
 * cosf/sinf (the CPU's) for about 1% of the angles */
static __device__ __forceinline__ void rope_pair(float *h, int j, int rope_dim, int32_t pos,
                                                 float theta_scale, float freq_scale, int neox,
                                                 const float *__restrict__ freq_factors,
                                                 const float2 *__restrict__ tab) {
    const int half = rope_dim / 2;
    float c, s;
    if (tab) {
        const float2 cs = tab[j];
        c = cs.x;
        s = cs.y;
    } else {
        float theta = (float)pos;
        for (int k = 0; k < j; k++) theta = __fmul_rn(theta, theta_scale);
        const float f = freq_factors ? freq_factors[j] : 1.0f;
        double sd, cd;
        sincos((double)__fdiv_rn(__fmul_rn(theta, freq_scale), f), &sd, &cd);
        c = (float)cd;
        s = (float)sd;
    }
    const int i0 = neox ? j : 2 * j;
    const int i1 = neox ? j + half : 2 * j + 1;
    const float a = h[i0], bb = h[i1];
    /* the CPU's rotation (cpu/ops.c): the first product fused with the second */
    h[i0] = __fmaf_rn(a, c, -__fmul_rn(bb, s));
    h[i1] = __fmaf_rn(a, s, __fmul_rn(bb, c));
}

/* base^(-2/rope_dim), computed on the host with the C library's powf as the
 * CPU backend does (CUDA's powf may differ in the last bit) */
static inline float rope_theta_scale(const lkv_rope_desc *r) {
    return powf(r->freq_base, -2.0f / (float)r->rope_dim);
}

#endif
