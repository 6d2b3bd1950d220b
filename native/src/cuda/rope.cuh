/*
 * cuda/rope.cuh: the rotation of one pair of a head's row (rope.cu's math,
 * shared with rope_store.cu). Pair j (j < rope_dim/2) is rotated by theta =
 * pos * freq_scale * base^(-2j/rope_dim) / freq_factors[j]; the pair is
 * (2j, 2j+1) in the normal (llama) style and (j, j + rope_dim/2) in the neox
 * style. theta is formed as the CPU forms it (the power by repeated f32
 * multiplication, then cosf/sinf in full precision).
 */
#ifndef LKV_CUDA_ROPE_CUH
#define LKV_CUDA_ROPE_CUH

#include "common.cuh"

static __device__ __forceinline__ void rope_pair(float *h, int j, int rope_dim, int32_t pos,
                                                 float freq_base, float freq_scale, int neox,
                                                 const float *__restrict__ freq_factors) {
    const int half = rope_dim / 2;
    const float theta_scale = powf(freq_base, -2.0f / (float)rope_dim);
    float theta = (float)pos;
    for (int k = 0; k < j; k++) theta *= theta_scale;
    const float f = freq_factors ? freq_factors[j] : 1.0f;
    const float th = theta * freq_scale / f;
    const float c = cosf(th), s = sinf(th);
    const int i0 = neox ? j : 2 * j;
    const int i1 = neox ? j + half : 2 * j + 1;
    const float a = h[i0], bb = h[i1];
    h[i0] = a * c - bb * s;
    h[i1] = a * s + bb * c;
}

#endif
