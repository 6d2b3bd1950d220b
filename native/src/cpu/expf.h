/*
 * cpu/expf.h: the exp that the CPU backend's softmax and swiglu use.
 */
#ifndef LKV_CPU_EXPF_H
#define LKV_CPU_EXPF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(x) as ggml's AVX2 vector kernel computes it (a degree-5 polynomial on
 * x - n ln2, n = round(x / ln2); the result k + k * j with k = 2^n, and a
 * two-factor scale where |n| > 126), in scalar form: fmaf is the same fused
 * operation as the vector FMA, so the values are identical. The golden data
 * come from an AVX2 build; ggml's AVX-512 kernel rounds differently (it adds
 * the 1 inside the polynomial and scales with scalef). */
static inline float ggml_like_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    uint32_t zb, kb;
    memcpy(&zb, &z, 4);
    const uint32_t e = zb << 23;           /* 2^n from z's low bits */
    kb = e + 0x3f800000u;
    float k;
    memcpy(&k, &kb, 4);
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, 0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126.0f)) return fmaf(j, k, k);
    /* large |n|: 2^n split in two factors (s2 * s1), or 0 / inf past 192 */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const uint32_t s1b = g + 0x7f000000u, s2b = e - g;
    float s1, s2;
    memcpy(&s1, &s1b, 4);
    memcpy(&s2, &s2b, 4);
    if (fabsf(n) > 192.0f) return s1 * s1;
    return fmaf(s2, j, s2) * s1;
}

#endif
