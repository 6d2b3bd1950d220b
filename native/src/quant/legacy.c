/*
 * quant/legacy.c: conversions of the 32-element block formats (q4_0, q4_1,
 * q5_0, q5_1, q8_0, q8_1, iq4_nl) to and from f32.
 *
 * Dequantization computes exactly what gguf.quants computes (same f32
 * operations in the same order: d * q, then + m where there is a minimum).
 * Quantization is ggml's reference rounding, which gguf.quants reproduces:
 * q4/q5 take the scale from the signed extreme (or from max - min), multiply
 * by the reciprocal scale, add the offset plus one half and truncate; q8_0 and
 * q8_1 multiply by 127 / amax and round half to even, as ggml's x86
 * activation quantizers do (llama.cpp's results depend on it). These are the
 * formats of the KV cache and of the activations, so they are deterministic.
 * iq4_nl has no reference in gguf.quants; its quantizer here is a small,
 * deterministic scale search in the spirit of ggml's (see quantize_iq4_nl).
 */
#include <math.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/simd.h"

const int8_t lkv_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1, 13, 25, 38, 53, 69, 89, 113};

/* Block's value of largest magnitude, signed (the first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

// ---------------------------------------------------------------- q4_0, q4_1

void lkv_q4_0_to_float(const void *vx, float *y, int64_t n) {
    const block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void lkv_q4_0_from_float(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + 16] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void lkv_q4_1_to_float(const void *vx, float *y, int64_t n) {
    const block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 15) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void lkv_q4_1_from_float(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float mn, mx;
        min_max(x, QK4_1, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)((x[j] - mn) * id + 0.5f), q1 = (int8_t)((x[j + 16] - mn) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

// ---------------------------------------------------------------- q5_0, q5_1

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static inline void store_qh(uint8_t qh[4], uint32_t h) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> 8 * k);
}

/* Packs 32 five-bit codes: low nibbles as q4_0, fifth bits into qh. */
static void pack5(const int q[32], uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    store_qh(qh, h);
}

static inline int q5_code(const uint8_t qs[16], uint32_t h, int j) {
    int lo = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return lo | (int)((h >> j) & 1) << 4;
}

void lkv_q5_0_to_float(const void *vx, float *y, int64_t n) {
    const block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = h2f(x[i].d);
        const uint32_t h = load_qh(x[i].qh);
        for (int j = 0; j < 32; j++) y[j] = (float)(q5_code(x[i].qs, h, j) - 16) * d;
    }
}

void lkv_q5_0_from_float(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        y[i].d = f2h(d);
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)(x[j] * id + 16.5f);
            q[j] = q[j] > 31 ? 31 : q[j];
        }
        pack5(q, y[i].qs, y[i].qh);
    }
}

void lkv_q5_1_to_float(const void *vx, float *y, int64_t n) {
    const block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        const uint32_t h = load_qh(x[i].qh);
        for (int j = 0; j < 32; j++) y[j] = (float)q5_code(x[i].qs, h, j) * d + m;
    }
}

void lkv_q5_1_from_float(const float *x, void *vy, int64_t n) {
    block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float mn, mx;
        min_max(x, QK5_1, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int q[32];
        y[i].d = f2h(d);
        y[i].m = f2h(mn);
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)((x[j] - mn) * id + 0.5f);
            q[j] = q[j] > 31 ? 31 : q[j];
        }
        pack5(q, y[i].qs, y[i].qh);
    }
}

// ---------------------------------------------------------------- q8_0, q8_1

/* amax / 127 as the scale, x * (127 / amax) rounded half to even (ggml's
 * x86 quantize_row_q8_0/q8_1). Returns the
 * f32 scale; q receives the 32 codes, *sum their sum. */
static inline float quantize8(const float *x, int8_t *q, int *sum) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;   /* as ggml's x86 path */
    int s = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)nearbyintf(x[j] * id);   /* half to even, as _mm256_round_ps */
        s += q[j];
    }
    *sum = s;
    return d;
}

void lkv_q8_0_to_float(const void *vx, float *y, int64_t n) {
    const block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

LKV_ISA_CLONES void lkv_q8_0_from_float(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) y[i].d = f2h(quantize8(x, y[i].qs, &sum));
}

void lkv_q8_1_to_float(const void *vx, float *y, int64_t n) {
    const block_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

LKV_ISA_CLONES void lkv_q8_1_from_float(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float d = quantize8(x, y[i].qs, &sum);
        y[i].d = f2h(d);
        y[i].s = f2h((float)sum * d);
    }
}

// ---------------------------------------------------------------- iq4_nl

void lkv_iq4_nl_to_float(const void *vx, float *y, int64_t n) {
    const block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)lkv_iq4nl_values[x[i].qs[j] & 15] * d;
            y[j + 16] = (float)lkv_iq4nl_values[x[i].qs[j] >> 4] * d;
        }
    }
}

/* Index of the table level nearest to v (the lower one on ties). */
static int iq4nl_nearest(float v) {
    int best = 0;
    float err = fabsf(v - lkv_iq4nl_values[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabsf(v - lkv_iq4nl_values[k]);
        if (e < err) { err = e; best = k; }
    }
    return best;
}

/* Weighted least squares fit of the scale for the codes that `id` (inverse
 * scale) picks: weights x^2 favour the large values, as ggml does without an
 * importance matrix. Returns sum(w q x) and sum(w q q) through the pointers. */
static void iq4nl_fit(const float *x, float id, float *sumqx, float *sumq2) {
    float sqx = 0.0f, sq2 = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float w = x[j] * x[j];
        const float q = lkv_iq4nl_values[iq4nl_nearest(id * x[j])];
        sqx += w * q * x[j];
        sq2 += w * q * q;
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* Start from the scale that maps the extreme onto the table's end, then try
 * 15 nearby inverse scales (both signs of the mapping via the table's
 * asymmetry) and keep the least-squares best. The codes are finally chosen
 * with the stored (f16) scale, so dequantization reproduces what was fitted. */
void lkv_iq4_nl_from_float(const float *x, void *vy, int64_t n) {
    block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
        const float max = signed_absmax(x, QK4_NL);
        float scale = 0.0f;
        if (fabsf(max) >= 1e-15f) {
            float sqx, sq2;
            iq4nl_fit(x, -(float)lkv_iq4nl_values[0] / max, &sqx, &sq2);
            scale = sq2 > 0.0f ? sqx / sq2 : max / -(float)lkv_iq4nl_values[0];
            float best = scale * sqx;
            for (int t = -7; t <= 7; t++) {
                iq4nl_fit(x, (float)(t + lkv_iq4nl_values[0]) / max, &sqx, &sq2);
                if (sq2 > 0.0f && sqx * sqx > best * sq2) {
                    scale = sqx / sq2;
                    best = scale * sqx;
                }
            }
        }
        y[i].d = f2h(scale);
        const float d = h2f(y[i].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(iq4nl_nearest(id * x[j]) | iq4nl_nearest(id * x[j + 16]) << 4);
    }
}
