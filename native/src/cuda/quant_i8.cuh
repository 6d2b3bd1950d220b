/*
 * cuda/quant_i8.cuh: weights as 8-bit integers for the integer mat-vec.
 *
 *   dq8i<T>(row, e, w0, w1, dw, mw)
 *
 * gives elements [8e, 8e + 8) of a row of quantized type T as eight signed
 * 8-bit integers packed in w0 (elements 0..3, little-endian bytes) and w1
 * (4..7), with element i = dw * q_i + mw. Paired with activations quantized
 * to 8 bits in 32-element blocks (x_i ~ dx * p_i), a piece's dot product is
 *   dx * (dw * dp4a(q, p) + mw * sum(p))
 * so the inner loop is two dp4a per 8 weights and token, and no conversions.
 * Piece numbering is dq8's (quant.cuh): piece e is 8-element piece e & 3 of
 * the 32-group e >> 2. Written from the published block layouts.
 */
#ifndef LKV_CUDA_QUANT_I8_CUH
#define LKV_CUDA_QUANT_I8_CUH

#include "quant.cuh"

/* the types the integer path reads: every quantized weight type but iq1_s and
 * iq1_m (whose values are grid + 1/8, no 8-bit code times a scale) */
template <int T> struct has_i8 { enum { v = cblk<T>::qk >= 32 && (!lkv_is_iquant(T) || iq_has_codes<T>()) }; };
/* types with an additive term mw != 0 */
template <int T> struct has_min {
    enum { v = T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1 || T == LKV_TYPE_Q2_K ||
               T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K };
};

/* 8 bytes at a 2-byte aligned address */
static __device__ __forceinline__ void ld8_2(const uint8_t *p, uint32_t &a, uint32_t &b) {
    const uint16_t *q = (const uint16_t *)p;
    a = q[0] | ((uint32_t)q[1] << 16);
    b = q[2] | ((uint32_t)q[3] << 16);
}
/* 8 bytes at a 4-byte aligned address */
static __device__ __forceinline__ void ld8_4(const uint8_t *p, uint32_t &a, uint32_t &b) {
    const uint32_t *q = (const uint32_t *)p;
    a = q[0];
    b = q[1];
}
/* spread4 (bit i of h to bit 0 of byte i): iquant_dq.cuh */

/* the integer sub-block scale sc and min mn of piece e of a k-quant (or iq4_xs) row,
 * with the super-block's d and dmin: element i of the piece is
 * d * sc * q_i - dmin * mn, q_i the code dq8i gives (q3_K / q6_K: signed,
 * mn = 0). The CPU's dot (quant/dot_kquants.c) multiplies the same integers.
 * For gemm_wg_kcodes.cuh; dq8i reads these fields itself, which keeps the
 * PTX of matvec_q8.cu and mmq.cu what it was. */
template <int T>
static __device__ __forceinline__ void kq_scales(const uint8_t *__restrict__ row, int e, int &sc, int &mn,
                                                 float &d, float &dmin) {
    const int g = e >> 2, s = g & 7, k = 2 * s + ((e & 3) >> 1);   /* k: the piece's 16-group */
    mn = 0;
    dmin = 0.f;
    if constexpr (T == LKV_TYPE_Q2_K) {
        const cq2_k *b = (const cq2_k *)row + (g >> 3);
        sc = b->scales[k] & 0xF;
        mn = b->scales[k] >> 4;
        d = h2f(b->d);
        dmin = h2f(b->dmin);
    } else if constexpr (T == LKV_TYPE_Q3_K) {
        const cq3_k *b = (const cq3_k *)row + (g >> 3);
        sc = k3_scale(b->scales, k);
        d = h2f(b->d);
    } else if constexpr (T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K) {
        const cq4_k *b = (const cq4_k *)(row + (size_t)(g >> 3) * cblk<T>::bytes);   /* d, dmin, scales: one prefix */
        k4_scale_min(b->scales, s, &sc, &mn);
        d = h2f(b->d);
        dmin = h2f(b->dmin);
    } else if constexpr (T == LKV_TYPE_Q6_K) {
        const cq6_k *b = (const cq6_k *)row + (g >> 3);
        sc = b->scales[k];
        d = h2f(b->d);
    } else if constexpr (T == LKV_TYPE_IQ4_XS) {
        /* its 32-group's scale ls - 32; the codes are the table's levels */
        const block_iq4_xs *b = (const block_iq4_xs *)(row + (size_t)(g >> 3) * iq_block_bytes<T>());
        sc = iq4xs_scale(b, s);
        d = iq_h2f(b->d);
    } else {
        static_assert(T == LKV_TYPE_Q2_K, "k-quants and iq4_xs only");
    }
}

template <int T>
static __device__ __forceinline__ void dq8i(const uint8_t *__restrict__ row, int e, uint32_t &w0,
                                            uint32_t &w1, float &dw, float &mw) {
    const int p = e & 3;
    mw = 0.f;
    if constexpr (T == LKV_TYPE_Q8_0) {
        const cq8_0 *b = (const cq8_0 *)row + (e >> 2);
        dw = h2f(b->d);
        ld8_2((const uint8_t *)b->qs + 8 * p, w0, w1);
    } else if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_IQ4_NL) {
        const cq4_0 *b = (const cq4_0 *)row + (e >> 2);
        dw = h2f(b->d);
        uint32_t a, c;
        ld8_2(b->qs + 8 * (p & 1), a, c);
        const int sh = (p >> 1) * 4;
        a = (a >> sh) & 0x0F0F0F0Fu;
        c = (c >> sh) & 0x0F0F0F0Fu;
        if constexpr (T == LKV_TYPE_Q4_0) {
            w0 = __vsubss4(a, 0x08080808u);
            w1 = __vsubss4(c, 0x08080808u);
        } else {
            w0 = w1 = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                w0 |= (uint32_t)(uint8_t)lkv_iq4nl_levels[(a >> (8 * i)) & 0xF] << (8 * i);
                w1 |= (uint32_t)(uint8_t)lkv_iq4nl_levels[(c >> (8 * i)) & 0xF] << (8 * i);
            }
        }
    } else if constexpr (T == LKV_TYPE_Q4_1) {
        const cq4_1 *b = (const cq4_1 *)row + (e >> 2);
        dw = h2f(b->d);
        mw = h2f(b->m);
        uint32_t a, c;
        ld8_4(b->qs + 8 * (p & 1), a, c);
        const int sh = (p >> 1) * 4;
        w0 = (a >> sh) & 0x0F0F0F0Fu;
        w1 = (c >> sh) & 0x0F0F0F0Fu;
    } else if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
        const uint8_t *qs, *qh8;
        uint32_t a, c;
        if constexpr (T == LKV_TYPE_Q5_0) {
            const cq5_0 *b = (const cq5_0 *)row + (e >> 2);
            dw = h2f(b->d); qs = b->qs; qh8 = b->qh;
            ld8_2(qs + 8 * (p & 1), a, c);
        } else {
            const cq5_1 *b = (const cq5_1 *)row + (e >> 2);
            dw = h2f(b->d); mw = h2f(b->m); qs = b->qs; qh8 = b->qh;
            ld8_4(qs + 8 * (p & 1), a, c);
        }
        const uint32_t hb = qh8[p];   /* bit i: element 8p + i */
        const int sh = (p >> 1) * 4;
        a = ((a >> sh) & 0x0F0F0F0Fu) | (spread4(hb) << 4);
        c = ((c >> sh) & 0x0F0F0F0Fu) | (spread4(hb >> 4) << 4);
        if constexpr (T == LKV_TYPE_Q5_0) {
            w0 = __vsubss4(a, 0x10101010u);
            w1 = __vsubss4(c, 0x10101010u);
        } else {
            w0 = a;
            w1 = c;
        }
    } else if constexpr (T == LKV_TYPE_Q2_K) {
        const int g = e >> 2, s = g & 7, n = s >> 2, j = s & 3;
        const cq2_k *b = (const cq2_k *)row + (g >> 3);
        const int sc = b->scales[8 * n + 2 * j + (p >> 1)];
        dw = h2f(b->d) * (sc & 0xF);
        mw = -h2f(b->dmin) * (sc >> 4);
        uint32_t a, c;
        ld8_4(b->qs + 32 * n + 8 * p, a, c);
        w0 = (a >> (2 * j)) & 0x03030303u;
        w1 = (c >> (2 * j)) & 0x03030303u;
    } else if constexpr (T == LKV_TYPE_Q3_K) {
        const int g = e >> 2, s = g & 7, n = s >> 2, j = s & 3;
        const cq3_k *b = (const cq3_k *)row + (g >> 3);
        dw = h2f(b->d) * k3_scale(b->scales, 2 * s + (p >> 1));
        uint32_t a, c, ha, hc;
        ld8_2(b->qs + 32 * n + 8 * p, a, c);
        ld8_2(b->hmask + 8 * p, ha, hc);
        a = ((a >> (2 * j)) & 0x03030303u) | (((ha >> s) & 0x01010101u) << 2);
        c = ((c >> (2 * j)) & 0x03030303u) | (((hc >> s) & 0x01010101u) << 2);
        w0 = __vsubss4(a, 0x04040404u);
        w1 = __vsubss4(c, 0x04040404u);
    } else if constexpr (T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K) {
        const int g = e >> 2, s = g & 7, hi = s & 1;
        const uint8_t *sc8, *q, *qh = nullptr;
        float d, dmin;
        if constexpr (T == LKV_TYPE_Q4_K) {
            const cq4_k *b = (const cq4_k *)row + (g >> 3);
            d = h2f(b->d); dmin = h2f(b->dmin); sc8 = b->scales; q = b->qs + 32 * (s >> 1) + 8 * p;
        } else {
            const cq5_k *b = (const cq5_k *)row + (g >> 3);
            d = h2f(b->d); dmin = h2f(b->dmin); sc8 = b->scales; q = b->qs + 32 * (s >> 1) + 8 * p;
            qh = b->qh + 8 * p;
        }
        int sc, mn;
        k4_scale_min(sc8, s, &sc, &mn);
        dw = d * sc;
        mw = -dmin * mn;
        uint32_t a, c;
        ld8_4(q, a, c);
        w0 = (a >> (4 * hi)) & 0x0F0F0F0Fu;
        w1 = (c >> (4 * hi)) & 0x0F0F0F0Fu;
        if constexpr (T == LKV_TYPE_Q5_K) {
            uint32_t ha, hc;
            ld8_4(qh, ha, hc);
            w0 |= ((ha >> s) & 0x01010101u) << 4;
            w1 |= ((hc >> s) & 0x01010101u) << 4;
        }
    } else if constexpr (T == LKV_TYPE_Q6_K) {
        const int g = e >> 2, s = g & 7, n = s >> 2, k = s & 3;
        const cq6_k *b = (const cq6_k *)row + (g >> 3);
        dw = h2f(b->d) * b->scales[8 * n + 2 * k + (p >> 1)];
        uint32_t a, c, ha, hc;
        ld8_2(b->ql + 64 * n + ((k & 1) ? 32 : 0) + 8 * p, a, c);
        ld8_2(b->qh + 32 * n + 8 * p, ha, hc);
        const int sh = (k >> 1) * 4;
        a = ((a >> sh) & 0x0F0F0F0Fu) | (((ha >> (2 * k)) & 0x03030303u) << 4);
        c = ((c >> sh) & 0x0F0F0F0Fu) | (((hc >> (2 * k)) & 0x03030303u) << 4);
        w0 = __vsubss4(a, 0x20202020u);
        w1 = __vsubss4(c, 0x20202020u);
    } else if constexpr (lkv_is_iquant(T)) {
        /* the grid / level codes with their scale (iquant_dq.cuh) */
        iq_codes8<T>(row, e, w0, w1, dw);
    }
}

#endif
