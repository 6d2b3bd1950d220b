/*
 * quant/kquants.c: conversions of the 256-element k-quant super-blocks.
 *
 * Dequantization of q2_K .. q6_K follows the layouts in quant/blocks.h with
 * the f32 operations gguf.quants uses (sub-block scale = d * sc first, then
 * scale * q, minus dmin * mn), so results match it bit for bit. The weight
 * k-quants are not quantized here (models arrive quantized). q8_K is the
 * activation format of their dots: ggml's scheme, the signed extreme maps to
 * -127, codes round to nearest (ties to even), d = 1 / inverse scale, and
 * bsums hold the sums of each 16 codes.
 */
#include <math.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/simd.h"

// ---------------------------------------------------------------- q2_K, q3_K

void lkv_q2_K_to_float(const void *vx, float *y, int64_t n) {
    const block_q2_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
            const int q = (x[i].qs[32 * h + l] >> 2 * s) & 3;
            const uint8_t sc = x[i].scales[e >> 4];
            const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

/* The 16 signed 6-bit sub-block scales of a q3_K block. */
static void q3_K_scales(const uint8_t s[12], int out[16]) {
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? s[k] & 15 : s[k - 8] >> 4;
        const int hi = (s[8 + (k & 3)] >> 2 * (k >> 2)) & 3;
        out[k] = (lo | hi << 4) - 32;
    }
}

void lkv_q3_K_to_float(const void *vx, float *y, int64_t n) {
    const block_q3_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d);
        int sc[16];
        q3_K_scales(x[i].scales, sc);
        for (int e = 0; e < QK_K; e++) {
            const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
            const int lo = (x[i].qs[32 * h + l] >> 2 * s) & 3;
            const int hb = (x[i].hmask[l] >> (e >> 5)) & 1;
            const float dl = d * (float)sc[e >> 4];
            y[e] = dl * (float)(lo - (hb ? 0 : 4));
        }
    }
}

// ---------------------------------------------------------------- q4_K, q5_K

/* Scale and min of sub-block j (of 8) from the packed 12 bytes. */
static inline void scale_min_k4(const uint8_t s[12], int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

void lkv_q4_K_to_float(const void *vx, float *y, int64_t n) {
    const block_q4_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            scale_min_k4(x[i].scales, j, &sc, &mn);
            const float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *q = x[i].qs + 32 * (j >> 1);
            const int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) y[32 * j + l] = dl * (float)((q[l] >> shift) & 15) - ml;
        }
    }
}

void lkv_q5_K_to_float(const void *vx, float *y, int64_t n) {
    const block_q5_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            scale_min_k4(x[i].scales, j, &sc, &mn);
            const float dl = d * (float)sc, ml = dmin * (float)mn;
            const uint8_t *q = x[i].qs + 32 * (j >> 1);
            const int shift = 4 * (j & 1);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 15) | ((x[i].qh[l] >> j) & 1) << 4;
                y[32 * j + l] = dl * (float)v - ml;
            }
        }
    }
}

// ---------------------------------------------------------------- q6_K

void lkv_q6_K_to_float(const void *vx, float *y, int64_t n) {
    const block_q6_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d);
        for (int e = 0; e < QK_K; e++) {
            const int h = e >> 7, s = (e >> 5) & 3, l = e & 31;
            const int lo = (x[i].ql[64 * h + 32 * (s & 1) + l] >> 4 * (s >> 1)) & 15;
            const int hi = (x[i].qh[32 * h + l] >> 2 * s) & 3;
            const float dl = d * (float)x[i].scales[e >> 4];
            y[e] = dl * (float)((lo | hi << 4) - 32);
        }
    }
}

// ---------------------------------------------------------------- q8_K

void lkv_q8_K_to_float(const void *vx, float *y, int64_t n) {
    const block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int j = 0; j < QK_K; j++) y[j] = x[i].d * (float)x[i].qs[j];
}

/* ggml's q8_K: iscale = -127 / max, max the first element of the largest
 * magnitude (NaN never is), codes lrintf(iscale * x) clamped to +-127. Written
 * so that the compiler vectorizes it (the scalar form with lrintf, a libm
 * call, was 4% of a prefill): the largest magnitude as the largest of the
 * magnitudes' bit patterns (the same order for non-negative floats; NaN
 * patterns set to 0), the rounding as (v + 1.5 * 2^23) - 1.5 * 2^23 (ties to
 * even, exact for |v| < 2^22; here |v| <= 127 or v is NaN), NaN to -127 as
 * lrintf's out-of-range value clamps. Same bytes as the scalar form. */
LKV_ISA_CLONES void lkv_q8_K_from_float(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    const float magic = 12582912.0f;   /* 1.5 * 2^23 */
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint32_t bmax = 0;
        for (int j = 0; j < QK_K; j++) {
            uint32_t b;
            memcpy(&b, &x[j], 4);
            b &= 0x7fffffffu;
            b = b > 0x7f800000u ? 0 : b;
            bmax = b > bmax ? b : bmax;
        }
        memset(&y[i], 0, sizeof y[i]);
        if (bmax == 0) continue;
        float amax;
        memcpy(&amax, &bmax, 4);
        int jm = 0;
        while (fabsf(x[jm]) != amax) jm++;
        const float iscale = -127.0f / x[jm];
        for (int j = 0; j < QK_K; j++) {
            const float r = (iscale * x[j] + magic) - magic;
            y[i].qs[j] = (int8_t)(r >= -127.0f ? (r <= 127.0f ? (int)r : 127) : -127);
        }
        for (int k = 0; k < QK_K / 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * k + l];
            y[i].bsums[k] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}
