/*
 * cuda/quant.cuh: the GGUF block formats as the kernels read them.
 *
 * Every kernel that touches a weight or a KV row goes through one primitive:
 *   dq32<T>(row, g, y)   y[0..32) = elements [32g, 32g+32) of a row of type T
 * Every format's block is 32 or 256 elements (the plain float formats are
 * read 32 at a time), so a row of `cols` elements is cols/32 such groups and
 * kernels never need to know a block's inside. The layouts are ggml's,
 * written here from the published format description; sizes are pinned by the
 * static_asserts below. The i-quants (256-element super-blocks) are decoded
 * by iquant_dq.cuh, in the CPU's structs. One switch (LKV_CUDA_DISPATCH) maps a run-time type id
 * to the template: nothing else switches on the type.
 */
#ifndef LKV_CUDA_QUANT_CUH
#define LKV_CUDA_QUANT_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

extern "C" {
#include "quant/types.h"
}
#include "iquant_dq.cuh"

// ---------------------------------------------------------------- block layouts

struct cq4_0 { __half d; uint8_t qs[16]; };                       /* x = (q - 8) d */
struct cq4_1 { __half d, m; uint8_t qs[16]; };                    /* x = q d + m */
struct cq5_0 { __half d; uint8_t qh[4]; uint8_t qs[16]; };        /* x = (q - 16) d */
struct cq5_1 { __half d, m; uint8_t qh[4]; uint8_t qs[16]; };     /* x = q d + m */
struct cq8_0 { __half d; int8_t qs[32]; };                        /* x = q d */
struct ciq4nl { __half d; uint8_t qs[16]; };                      /* x = table[q] d */
struct cq2_k { uint8_t scales[16]; uint8_t qs[64]; __half d, dmin; };
struct cq3_k { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; __half d; };
struct cq4_k { __half d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct cq5_k { __half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct cq6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; __half d; };

static_assert(sizeof(cq4_0) == 18, "q4_0");
static_assert(sizeof(cq4_1) == 20, "q4_1");
static_assert(sizeof(cq5_0) == 22, "q5_0");
static_assert(sizeof(cq5_1) == 24, "q5_1");
static_assert(sizeof(cq8_0) == 34, "q8_0");
static_assert(sizeof(ciq4nl) == 18, "iq4_nl");
static_assert(sizeof(cq2_k) == 84, "q2_k");
static_assert(sizeof(cq3_k) == 110, "q3_k");
static_assert(sizeof(cq4_k) == 144, "q4_k");
static_assert(sizeof(cq5_k) == 176, "q5_k");
static_assert(sizeof(cq6_k) == 210, "q6_k");

/* The 16 non-linear levels of iq4_nl (ggml's table, a published constant). */
__device__ __constant__ static const int8_t lkv_iq4nl_levels[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Block geometry per type: elements per block and bytes per block. */
template <int T> struct cblk;
#define LKV_CBLK(T, QK, BYTES) template <> struct cblk<T> { enum { qk = QK, bytes = BYTES }; };
LKV_CBLK(LKV_TYPE_F32, 1, 4)
LKV_CBLK(LKV_TYPE_F16, 1, 2)
LKV_CBLK(LKV_TYPE_BF16, 1, 2)
LKV_CBLK(LKV_TYPE_Q4_0, 32, 18)
LKV_CBLK(LKV_TYPE_Q4_1, 32, 20)
LKV_CBLK(LKV_TYPE_Q5_0, 32, 22)
LKV_CBLK(LKV_TYPE_Q5_1, 32, 24)
LKV_CBLK(LKV_TYPE_Q8_0, 32, 34)
LKV_CBLK(LKV_TYPE_IQ4_NL, 32, 18)
LKV_CBLK(LKV_TYPE_Q2_K, 256, 84)
LKV_CBLK(LKV_TYPE_Q3_K, 256, 110)
LKV_CBLK(LKV_TYPE_Q4_K, 256, 144)
LKV_CBLK(LKV_TYPE_Q5_K, 256, 176)
LKV_CBLK(LKV_TYPE_Q6_K, 256, 210)
/* the i-quants: layouts and decoding in iquant_dq.cuh */
LKV_CBLK(LKV_TYPE_IQ2_XXS, 256, 66)
LKV_CBLK(LKV_TYPE_IQ2_XS, 256, 74)
LKV_CBLK(LKV_TYPE_IQ2_S, 256, 82)
LKV_CBLK(LKV_TYPE_IQ3_XXS, 256, 98)
LKV_CBLK(LKV_TYPE_IQ3_S, 256, 110)
LKV_CBLK(LKV_TYPE_IQ1_S, 256, 50)
LKV_CBLK(LKV_TYPE_IQ1_M, 256, 56)
LKV_CBLK(LKV_TYPE_IQ4_XS, 256, 136)
#undef LKV_CBLK

/* Bytes of 32 consecutive elements, for the types whose block is <= 32. */
template <int T> __host__ __device__ constexpr int group_bytes() {
    return cblk<T>::qk == 1 ? 32 * cblk<T>::bytes : cblk<T>::bytes * 32 / cblk<T>::qk;
}

// ---------------------------------------------------------------- helpers

static __device__ __forceinline__ float h2f(__half h) { return __half2float(h); }

/* 6-bit scale and min j (0..7) of a q4_k / q5_k block's 12 scale bytes. */
static __device__ __forceinline__ void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Signed 6-bit scale i (0..15) of a q3_k block's 12 scale bytes (host too:
 * tests/cuda/emu_mvq.cu runs mvq_units.cuh's units on the CPU). */
static __host__ __device__ __forceinline__ int k3_scale(const uint8_t *s, int i) {
    int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
    int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

// ---------------------------------------------------------------- dq32

/* y[0..32) = elements [32g, 32g + 32) of the row starting at `row`. */
template <int T>
static __device__ __forceinline__ void dq32(const uint8_t *__restrict__ row, int g, float *y) {
    static_assert(!lkv_is_iquant(T) || cblk<T>::bytes == iq_block_bytes<T>(), "i-quant block size");
    if constexpr (lkv_is_iquant(T)) {
        iq_dq32<T>(row, g, y);
    } else if constexpr (T == LKV_TYPE_F32) {
        const float4 *p = (const float4 *)(row + (size_t)g * 128);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 v = p[i];
            y[4 * i] = v.x; y[4 * i + 1] = v.y; y[4 * i + 2] = v.z; y[4 * i + 3] = v.w;
        }
    } else if constexpr (T == LKV_TYPE_F16) {
        const uint4 *p = (const uint4 *)(row + (size_t)g * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 v = p[i];
            const __half2 *h = (const __half2 *)&v;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 f = __half22float2(h[k]);
                y[8 * i + 2 * k] = f.x; y[8 * i + 2 * k + 1] = f.y;
            }
        }
    } else if constexpr (T == LKV_TYPE_BF16) {
        const uint4 *p = (const uint4 *)(row + (size_t)g * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 v = p[i];
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                y[8 * i + 2 * k] = __uint_as_float(w[k] << 16);
                y[8 * i + 2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
            }
        }
    } else if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_IQ4_NL) {
        const cq4_0 *b = (const cq4_0 *)row + g;
        const float d = h2f(b->d);
        const uint16_t *q16 = (const uint16_t *)b->qs;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t q = q16[i];
            int l0 = q & 0xF, l1 = (q >> 8) & 0xF, h0 = (q >> 4) & 0xF, h1 = q >> 12;
            if constexpr (T == LKV_TYPE_Q4_0) {
                y[2 * i] = (l0 - 8) * d; y[2 * i + 1] = (l1 - 8) * d;
                y[16 + 2 * i] = (h0 - 8) * d; y[17 + 2 * i] = (h1 - 8) * d;
            } else {
                y[2 * i] = lkv_iq4nl_levels[l0] * d; y[2 * i + 1] = lkv_iq4nl_levels[l1] * d;
                y[16 + 2 * i] = lkv_iq4nl_levels[h0] * d; y[17 + 2 * i] = lkv_iq4nl_levels[h1] * d;
            }
        }
    } else if constexpr (T == LKV_TYPE_Q4_1) {
        const cq4_1 *b = (const cq4_1 *)row + g;
        const float d = h2f(b->d), m = h2f(b->m);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            y[j] = (b->qs[j] & 0xF) * d + m;
            y[j + 16] = (b->qs[j] >> 4) * d + m;
        }
    } else if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
        float d, m;
        const uint8_t *qh8, *qs;
        if constexpr (T == LKV_TYPE_Q5_0) {
            const cq5_0 *b = (const cq5_0 *)row + g;
            d = h2f(b->d); m = -16.f * d; qh8 = b->qh; qs = b->qs;
        } else {
            const cq5_1 *b = (const cq5_1 *)row + g;
            d = h2f(b->d); m = h2f(b->m); qh8 = b->qh; qs = b->qs;
        }
        const uint32_t qh = qh8[0] | (qh8[1] << 8) | (qh8[2] << 16) | ((uint32_t)qh8[3] << 24);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
            int hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            y[j] = lo * d + m;
            y[j + 16] = hi * d + m;
        }
    } else if constexpr (T == LKV_TYPE_Q8_0) {
        const cq8_0 *b = (const cq8_0 *)row + g;
        const float d = h2f(b->d);
        const uint16_t *q16 = (const uint16_t *)b->qs;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            uint32_t q = q16[i];
            y[2 * i] = (int8_t)(q & 0xff) * d;
            y[2 * i + 1] = (int8_t)(q >> 8) * d;
        }
    } else if constexpr (T == LKV_TYPE_Q2_K) {
        const cq2_k *b = (const cq2_k *)row + (g >> 3);
        const int s = g & 7, n = s >> 2, j = s & 3;
        const float d = h2f(b->d), dmin = h2f(b->dmin);
        const uint8_t *q = b->qs + 32 * n;
        const int sc0 = b->scales[8 * n + 2 * j], sc1 = b->scales[8 * n + 2 * j + 1];
        const float d0 = d * (sc0 & 0xF), m0 = dmin * (sc0 >> 4);
        const float d1 = d * (sc1 & 0xF), m1 = dmin * (sc1 >> 4);
#pragma unroll
        for (int l = 0; l < 16; l++) {
            y[l] = d0 * ((q[l] >> (2 * j)) & 3) - m0;
            y[l + 16] = d1 * ((q[l + 16] >> (2 * j)) & 3) - m1;
        }
    } else if constexpr (T == LKV_TYPE_Q3_K) {
        const cq3_k *b = (const cq3_k *)row + (g >> 3);
        const int s = g & 7, n = s >> 2, j = s & 3;
        const float d = h2f(b->d);
        const uint8_t *q = b->qs + 32 * n;
        const float d0 = d * k3_scale(b->scales, 2 * s), d1 = d * k3_scale(b->scales, 2 * s + 1);
        const int mbit = 1 << s;
#pragma unroll
        for (int l = 0; l < 16; l++) {
            int a = ((q[l] >> (2 * j)) & 3) - ((b->hmask[l] & mbit) ? 0 : 4);
            int c = ((q[l + 16] >> (2 * j)) & 3) - ((b->hmask[l + 16] & mbit) ? 0 : 4);
            y[l] = d0 * a;
            y[l + 16] = d1 * c;
        }
    } else if constexpr (T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K) {
        const int s = g & 7, p = s >> 1, hi = s & 1;
        const uint8_t *sc8, *qs, *qh = nullptr;
        float d, dmin;
        if constexpr (T == LKV_TYPE_Q4_K) {
            const cq4_k *b = (const cq4_k *)row + (g >> 3);
            d = h2f(b->d); dmin = h2f(b->dmin); sc8 = b->scales; qs = b->qs;
        } else {
            const cq5_k *b = (const cq5_k *)row + (g >> 3);
            d = h2f(b->d); dmin = h2f(b->dmin); sc8 = b->scales; qs = b->qs; qh = b->qh;
        }
        int sc, mn;
        k4_scale_min(sc8, s, &sc, &mn);
        const float dl = d * sc, ml = dmin * mn;
        const uint8_t *q = qs + 32 * p;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int v = hi ? (q[l] >> 4) : (q[l] & 0xF);
            if constexpr (T == LKV_TYPE_Q5_K) v += (qh[l] >> s & 1) << 4;
            y[l] = dl * v - ml;
        }
    } else if constexpr (T == LKV_TYPE_Q6_K) {
        const cq6_k *b = (const cq6_k *)row + (g >> 3);
        const int s = g & 7, n = s >> 2, k = s & 3;
        const float d = h2f(b->d);
        const uint8_t *ql = b->ql + 64 * n + ((k & 1) ? 32 : 0);
        const uint8_t *qh = b->qh + 32 * n;
        const float d0 = d * b->scales[8 * n + 2 * k], d1 = d * b->scales[8 * n + 2 * k + 1];
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int lo = (k >= 2) ? (ql[l] >> 4) : (ql[l] & 0xF);
            int v = (lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            y[l] = (l < 16 ? d0 : d1) * v;
        }
    }
}

// ---------------------------------------------------------------- dq8

/* y[0..8) = elements [8e, 8e + 8) of the row starting at `row`. The unit of
 * the coalesced kernels: consecutive lanes take consecutive 8-element pieces,
 * so a warp reads a contiguous span of weights and of activations. */
template <int T>
static __device__ __forceinline__ void dq8(const uint8_t *__restrict__ row, int e, float *y) {
    if constexpr (lkv_is_iquant(T)) {
        iq_dq8<T>(row, e, y);
    } else if constexpr (T == LKV_TYPE_F32) {
        const float4 *p = (const float4 *)(row + (size_t)e * 32);
        const float4 a = p[0], b = p[1];
        y[0] = a.x; y[1] = a.y; y[2] = a.z; y[3] = a.w; y[4] = b.x; y[5] = b.y; y[6] = b.z; y[7] = b.w;
    } else if constexpr (T == LKV_TYPE_F16) {
        const uint4 v = *(const uint4 *)(row + (size_t)e * 16);
        const __half2 *h = (const __half2 *)&v;
#pragma unroll
        for (int k = 0; k < 4; k++) { float2 f = __half22float2(h[k]); y[2 * k] = f.x; y[2 * k + 1] = f.y; }
    } else if constexpr (T == LKV_TYPE_BF16) {
        const uint4 v = *(const uint4 *)(row + (size_t)e * 16);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            y[2 * k] = __uint_as_float(w[k] << 16);
            y[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    } else if constexpr (cblk<T>::qk == 32) {
        /* piece p of a 32-block: elements 8p..8p+7 are the low (p < 2) or high
         * nibbles of qs[8(p&1) .. 8(p&1)+8) */
        const int p = e & 3, j0 = 8 * p, o = 8 * (p & 1), sh = (p >> 1) * 4;
        if constexpr (T == LKV_TYPE_Q8_0) {
            const cq8_0 *b = (const cq8_0 *)row + (e >> 2);
            const float d = h2f(b->d);
            const uint16_t *q16 = (const uint16_t *)(b->qs + j0);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t q = q16[i];
                y[2 * i] = (int8_t)(q & 0xff) * d;
                y[2 * i + 1] = (int8_t)(q >> 8) * d;
            }
        } else {
            const uint8_t *qs, *qh8 = nullptr;
            float d, m = 0.f;
            if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_IQ4_NL) {
                const cq4_0 *b = (const cq4_0 *)row + (e >> 2);
                d = h2f(b->d); qs = b->qs;
                if constexpr (T == LKV_TYPE_Q4_0) m = -8.f * d;
            } else if constexpr (T == LKV_TYPE_Q4_1) {
                const cq4_1 *b = (const cq4_1 *)row + (e >> 2);
                d = h2f(b->d); m = h2f(b->m); qs = b->qs;
            } else if constexpr (T == LKV_TYPE_Q5_0) {
                const cq5_0 *b = (const cq5_0 *)row + (e >> 2);
                d = h2f(b->d); m = -16.f * d; qs = b->qs; qh8 = b->qh;
            } else {
                const cq5_1 *b = (const cq5_1 *)row + (e >> 2);
                d = h2f(b->d); m = h2f(b->m); qs = b->qs; qh8 = b->qh;
            }
            const uint16_t *q16 = (const uint16_t *)(qs + o);
            uint32_t hb = 0;
            if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) hb = qh8[p];   /* bits j0..j0+7 */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t q = q16[i];
                int a = (q >> sh) & 0xF, c = (q >> (8 + sh)) & 0xF;
                if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
                    a |= ((hb >> (2 * i)) & 1) << 4;
                    c |= ((hb >> (2 * i + 1)) & 1) << 4;
                }
                if constexpr (T == LKV_TYPE_IQ4_NL) {
                    y[2 * i] = lkv_iq4nl_levels[a] * d;
                    y[2 * i + 1] = lkv_iq4nl_levels[c] * d;
                } else if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q5_0) {
                    y[2 * i] = (a - (T == LKV_TYPE_Q4_0 ? 8 : 16)) * d;
                    y[2 * i + 1] = (c - (T == LKV_TYPE_Q4_0 ? 8 : 16)) * d;
                } else {
                    y[2 * i] = a * d + m;
                    y[2 * i + 1] = c * d + m;
                }
            }
            (void)m;
        }
    } else {
        /* K types: 32-group g = e/4 of the row, piece p: elements l = 8p..8p+7 of the group */
        const int g = e >> 2, p = e & 3, l0 = 8 * p;
        const int s = g & 7;
        if constexpr (T == LKV_TYPE_Q2_K) {
            const cq2_k *b = (const cq2_k *)row + (g >> 3);
            const int n = s >> 2, j = s & 3;
            const int sc = b->scales[8 * n + 2 * j + (p >> 1)];
            const float dl = h2f(b->d) * (sc & 0xF), ml = h2f(b->dmin) * (sc >> 4);
            const uint8_t *q = b->qs + 32 * n + l0;
#pragma unroll
            for (int l = 0; l < 8; l++) y[l] = dl * ((q[l] >> (2 * j)) & 3) - ml;
        } else if constexpr (T == LKV_TYPE_Q3_K) {
            const cq3_k *b = (const cq3_k *)row + (g >> 3);
            const int n = s >> 2, j = s & 3;
            const float dl = h2f(b->d) * k3_scale(b->scales, 2 * s + (p >> 1));
            const uint8_t *q = b->qs + 32 * n + l0, *hm = b->hmask + l0;
            const int mbit = 1 << s;
#pragma unroll
            for (int l = 0; l < 8; l++) y[l] = dl * (((q[l] >> (2 * j)) & 3) - ((hm[l] & mbit) ? 0 : 4));
        } else if constexpr (T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K) {
            const int hi = s & 1;
            const uint8_t *sc8, *q, *qh = nullptr;
            float d, dmin;
            if constexpr (T == LKV_TYPE_Q4_K) {
                const cq4_k *b = (const cq4_k *)row + (g >> 3);
                d = h2f(b->d); dmin = h2f(b->dmin); sc8 = b->scales; q = b->qs + 32 * (s >> 1) + l0;
            } else {
                const cq5_k *b = (const cq5_k *)row + (g >> 3);
                d = h2f(b->d); dmin = h2f(b->dmin); sc8 = b->scales; q = b->qs + 32 * (s >> 1) + l0;
                qh = b->qh + l0;
            }
            int sc, mn;
            k4_scale_min(sc8, s, &sc, &mn);
            const float dl = d * sc, ml = dmin * mn;
#pragma unroll
            for (int l = 0; l < 8; l++) {
                int v = hi ? (q[l] >> 4) : (q[l] & 0xF);
                if constexpr (T == LKV_TYPE_Q5_K) v += (qh[l] >> s & 1) << 4;
                y[l] = dl * v - ml;
            }
        } else if constexpr (T == LKV_TYPE_Q6_K) {
            const cq6_k *b = (const cq6_k *)row + (g >> 3);
            const int n = s >> 2, k = s & 3;
            const float dl = h2f(b->d) * b->scales[8 * n + 2 * k + (p >> 1)];
            const uint8_t *ql = b->ql + 64 * n + ((k & 1) ? 32 : 0) + l0;
            const uint8_t *qh = b->qh + 32 * n + l0;
#pragma unroll
            for (int l = 0; l < 8; l++) {
                const int lo = (k >= 2) ? (ql[l] >> 4) : (ql[l] & 0xF);
                y[l] = dl * ((lo | (((qh[l] >> (2 * k)) & 3) << 4)) - 32);
            }
        }
    }
}

/* eight floats rounded to f16 (round to nearest), as one 16-byte piece: dq8's
 * output as the f16 copies of gemm_wg.cu and attn_stage.cu store it */
static __device__ __forceinline__ uint4 lkv_f16x8(const float (&y)[8]) {
    __half2 h[4];
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2half2_rn(y[2 * k], y[2 * k + 1]);
    return *(const uint4 *)h;
}

/* the same rounded to bf16 (round to nearest even): the bf16 weights' and
 * activations' copies in gemm_wg.cu */
static __device__ __forceinline__ uint4 lkv_bf16x8(const float (&y)[8]) {
    __nv_bfloat162 h[4];
#pragma unroll
    for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(y[2 * k], y[2 * k + 1]);
    return *(const uint4 *)h;
}

/* an activation as the CPU rounds it for its dot with weights of float type T
 * (the type's vec_dot_type, quant/traits.c: f16 for f16 weights, bf16 for
 * bf16, itself for f32); the identity for every other type */
template <int T>
static __device__ __forceinline__ float lkv_dot_round(float v) {
    if constexpr (T == LKV_TYPE_F16) return __half2float(__float2half_rn(v));
    else if constexpr (T == LKV_TYPE_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    else return v;
}

// ---------------------------------------------------------------- dispatch

/* Calls F<T>::run(args...) for a run-time weight type id; returns false for a
 * type this backend cannot read. */
#define LKV_CUDA_WEIGHT_TYPES(X)                                                    \
    X(LKV_TYPE_F32) X(LKV_TYPE_F16) X(LKV_TYPE_BF16) X(LKV_TYPE_Q4_0) X(LKV_TYPE_Q4_1) \
    X(LKV_TYPE_Q5_0) X(LKV_TYPE_Q5_1) X(LKV_TYPE_Q8_0) X(LKV_TYPE_Q2_K) X(LKV_TYPE_Q3_K) \
    X(LKV_TYPE_Q4_K) X(LKV_TYPE_Q5_K) X(LKV_TYPE_Q6_K) X(LKV_TYPE_IQ4_NL)              \
    X(LKV_TYPE_IQ2_XXS) X(LKV_TYPE_IQ2_XS) X(LKV_TYPE_IQ2_S) X(LKV_TYPE_IQ3_XXS)        \
    X(LKV_TYPE_IQ3_S) X(LKV_TYPE_IQ1_S) X(LKV_TYPE_IQ1_M) X(LKV_TYPE_IQ4_XS)

#define LKV_CUDA_KV_TYPES(X)                                                        \
    X(LKV_TYPE_F32) X(LKV_TYPE_F16) X(LKV_TYPE_BF16) X(LKV_TYPE_Q8_0) X(LKV_TYPE_Q4_0) \
    X(LKV_TYPE_Q4_1) X(LKV_TYPE_Q5_0) X(LKV_TYPE_Q5_1) X(LKV_TYPE_IQ4_NL)

#endif
