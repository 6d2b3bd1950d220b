/*
 * cuda/kv_quant.cuh: one 32-element block of f32 to a KV type, as the CPU
 * reference quantizers do it (quant/legacy.c): scale from the block's extreme
 * value, f16 scale, truncating or round-half-away conversions as each format
 * defines; products and sums explicitly rounded, as the CPU builds with
 * -ffp-contract=off. A KV row written on the GPU has the CPU's bytes for the
 * same input floats. Used by to_type.cu and rope_store.cu.
 */
#ifndef LKV_CUDA_KV_QUANT_CUH
#define LKV_CUDA_KV_QUANT_CUH

#include "common.cuh"

/* nearest of the 16 iq4_nl levels (the lower one on ties, as the CPU picks) */
static __device__ int iq4nl_nearest(float v) {
    int best = 0;
    float err = fabsf(v - lkv_iq4nl_levels[0]);
    for (int k = 1; k < 16; k++) {
        const float e = fabsf(v - lkv_iq4nl_levels[k]);
        if (e < err) { err = e; best = k; }
    }
    return best;
}

/* weighted least-squares fit (weights x^2) of the codes `id` picks */
static __device__ void iq4nl_fit(const float *x, float id, float *sumqx, float *sumq2) {
    float sqx = 0.f, sq2 = 0.f;
    for (int j = 0; j < 32; j++) {
        const float w = __fmul_rn(x[j], x[j]);
        const float q = lkv_iq4nl_levels[iq4nl_nearest(__fmul_rn(id, x[j]))];
        sqx = __fadd_rn(sqx, __fmul_rn(__fmul_rn(w, q), x[j]));
        sq2 = __fadd_rn(sq2, __fmul_rn(__fmul_rn(w, q), q));
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* iq4_nl: the CPU's rule: fit from the extreme, 15 trial inverse scales,
 * keep the least-squares best; codes chosen with the stored f16 scale. */
static __device__ void quant_iq4nl(const float *x, ciq4nl *y) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    float scale = 0.f;
    if (fabsf(max) >= 1e-15f) {
        float sqx, sq2;
        iq4nl_fit(x, -(float)lkv_iq4nl_levels[0] / max, &sqx, &sq2);
        scale = sq2 > 0.f ? sqx / sq2 : max / -(float)lkv_iq4nl_levels[0];
        float best = __fmul_rn(scale, sqx);
        for (int t = -7; t <= 7; t++) {
            iq4nl_fit(x, (float)(t + lkv_iq4nl_levels[0]) / max, &sqx, &sq2);
            if (sq2 > 0.f && __fmul_rn(sqx, sqx) > __fmul_rn(best, sq2)) {
                scale = sqx / sq2;
                best = __fmul_rn(scale, sqx);
            }
        }
    }
    y->d = __float2half_rn(scale);
    const float d = __half2float(y->d);
    const float id = d != 0.f ? 1.f / d : 0.f;
    for (int j = 0; j < 16; j++)
        y->qs[j] = (uint8_t)(iq4nl_nearest(__fmul_rn(id, x[j])) | iq4nl_nearest(__fmul_rn(id, x[j + 16])) << 4);
}

/* 32 five-bit codes: low nibbles in qs (j and j + 16 share a byte), the
 * fifth bits in qh, code j at bit j */
static __device__ void pack_q5(const uint8_t *q, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4);
        h |= (uint32_t)(q[j] >> 4) << j;
        h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

template <int T>
static __device__ void quant32(const float *x, uint8_t *dst) {
    if constexpr (T == LKV_TYPE_F32) {
        for (int j = 0; j < 32; j++) ((float *)dst)[j] = x[j];
    } else if constexpr (T == LKV_TYPE_F16) {   /* 4-byte stores: blocks are 64 bytes */
        for (int j = 0; j < 16; j++) ((__half2 *)dst)[j] = __floats2half2_rn(x[2 * j], x[2 * j + 1]);
    } else if constexpr (T == LKV_TYPE_BF16) {
        for (int j = 0; j < 32; j++) ((__nv_bfloat16 *)dst)[j] = __float2bfloat16_rn(x[j]);
    } else if constexpr (T == LKV_TYPE_Q8_0) {
        cq8_0 *y = (cq8_0 *)dst;
        float amax = 0.f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        /* the CPU's quantize8: 127 / amax (not 1 / d), half to even */
        const float d = amax / 127.f, id = amax != 0.f ? 127.f / amax : 0.f;
        /* 17 2-byte stores (blocks are 34 bytes, so 2-byte aligned), not 33 */
        uint16_t *w = (uint16_t *)y;
        w[0] = __half_as_ushort(__float2half_rn(d));
        for (int j = 0; j < 16; j++) {
            const int a = __float2int_rn(__fmul_rn(x[2 * j], id)), b = __float2int_rn(__fmul_rn(x[2 * j + 1], id));
            w[1 + j] = (uint16_t)((a & 0xff) | (b & 0xff) << 8);
        }
    } else if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q5_0) {
        constexpr int H = T == LKV_TYPE_Q4_0 ? 8 : 16, QMAX = 2 * H - 1;
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        const float d = max / -H, id = d != 0.f ? 1.f / d : 0.f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)min(QMAX, (int)(int8_t)__fadd_rn(__fmul_rn(x[j], id), H + 0.5f));
        if constexpr (T == LKV_TYPE_Q4_0) {
            cq4_0 *y = (cq4_0 *)dst;
            y->d = __float2half_rn(d);
            for (int j = 0; j < 16; j++) y->qs[j] = q[j] | (q[j + 16] << 4);
        } else {
            cq5_0 *y = (cq5_0 *)dst;
            y->d = __float2half_rn(d);
            pack_q5(q, y->qs, y->qh);
        }
    } else if constexpr (T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1) {
        constexpr int QMAX = T == LKV_TYPE_Q4_1 ? 15 : 31;
        float mn = INFINITY, mx = -INFINITY;   /* the CPU's comparisons (which zero's sign wins) */
        for (int j = 0; j < 32; j++) {
            if (x[j] < mn) mn = x[j];
            if (x[j] > mx) mx = x[j];
        }
        const float d = (mx - mn) / QMAX, id = d != 0.f ? 1.f / d : 0.f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)min(QMAX, (int)(int8_t)__fadd_rn(__fmul_rn(__fsub_rn(x[j], mn), id), 0.5f));
        if constexpr (T == LKV_TYPE_Q4_1) {
            cq4_1 *y = (cq4_1 *)dst;
            y->d = __float2half_rn(d);
            y->m = __float2half_rn(mn);
            for (int j = 0; j < 16; j++) y->qs[j] = q[j] | (q[j + 16] << 4);
        } else {
            cq5_1 *y = (cq5_1 *)dst;
            y->d = __float2half_rn(d);
            y->m = __float2half_rn(mn);
            pack_q5(q, y->qs, y->qh);
        }
    } else if constexpr (T == LKV_TYPE_IQ4_NL) {
        quant_iq4nl(x, (ciq4nl *)dst);
    }
}

#endif
