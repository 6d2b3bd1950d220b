/*
 * cuda/iquant_dq.cuh: the i-quant super-blocks (iq2_xxs, iq2_xs, iq2_s,
 * iq3_xxs, iq3_s, iq1_s, iq1_m, iq4_xs) as the CUDA kernels would read them:
 *   iq_dq32<T>(row, g, y)   y[0..32) = elements [32g, 32g+32) of a row of type T
 * the same primitive as quant.cuh's dq32<T>, so plugging these types into the
 * kernels is a branch in dq32 (if constexpr (lkv_is_iquant(T)) iq_dq32<T>(...))
 * plus their cblk<T> geometry and an entry in LKV_CUDA_WEIGHT_TYPES.
 *
 * Layouts: quant/blocks.h (the CPU's structs, used here as they are). Each
 * value is computed with the f32 operations of quant/iquants.c in the same
 * order (built with --fmad=false, as the library is), so a value equals the
 * CPU's to_float, and gguf.quants, bit for bit. __host__ __device__: the host
 * pass reads quant/iq_tables.c's tables, the device pass the static
 * __device__ copies of cuda/iq_tables.cuh (one per translation unit that
 * includes this header); tests/cuda/iq_dq.cu runs both.
 */
#ifndef LKV_CUDA_IQUANT_DQ_CUH
#define LKV_CUDA_IQUANT_DQ_CUH

#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "quant/types.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"
}
#include "iq_tables.cuh"

#ifdef __CUDA_ARCH__
#define IQT(name) name##_d
#else
#define IQT(name) name
#endif

static __host__ __device__ constexpr bool lkv_is_iquant(int t) {
    return t == LKV_TYPE_IQ2_XXS || t == LKV_TYPE_IQ2_XS || t == LKV_TYPE_IQ2_S ||
           t == LKV_TYPE_IQ3_XXS || t == LKV_TYPE_IQ3_S || t == LKV_TYPE_IQ1_S ||
           t == LKV_TYPE_IQ1_M || t == LKV_TYPE_IQ4_XS;
}

/* bytes per 256-element block */
template <int T> static __host__ __device__ constexpr int iq_block_bytes() {
    return T == LKV_TYPE_IQ2_XXS ? 66 : T == LKV_TYPE_IQ2_XS ? 74 : T == LKV_TYPE_IQ2_S ? 82
         : T == LKV_TYPE_IQ3_XXS ? 98 : T == LKV_TYPE_IQ3_S ? 110 : T == LKV_TYPE_IQ1_S ? 50
         : T == LKV_TYPE_IQ1_M ? 56 : T == LKV_TYPE_IQ4_XS ? 136 : 0;
}

static __host__ __device__ __forceinline__ float iq_h2f(uint16_t bits) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

static __host__ __device__ __forceinline__ uint32_t iq_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* y[j] = (db * level[j]) * sign_j, j < n */
static __host__ __device__ __forceinline__ void iq_put(float *y, float db, const uint8_t *level,
                                                       uint32_t signs, int n) {
    for (int j = 0; j < n; j++) {
        const float v = db * (float)level[j];
        y[j] = (signs >> j) & 1 ? -v : v;
    }
}

template <int T>
static __host__ __device__ __forceinline__ void iq_dq32(const uint8_t *__restrict__ row, int g,
                                                        float *y) {
    const uint8_t *blk = row + (size_t)(g >> 3) * iq_block_bytes<T>();
    const int ib = g & 7;
    if constexpr (T == LKV_TYPE_IQ2_XXS) {
        const block_iq2_xxs *b = (const block_iq2_xxs *)blk;
        const uint8_t *q = (const uint8_t *)b->qs + 8 * ib;
        const uint32_t a0 = iq_u32(q), a1 = iq_u32(q + 4);
        const float db = iq_h2f(b->d) * (0.5f + (float)(a1 >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++)
            iq_put(y + 8 * l, db, IQT(lkv_iq2xxs_grid)[(a0 >> 8 * l) & 255],
                   IQT(lkv_iq_ksigns)[(a1 >> 7 * l) & 127], 8);
    } else if constexpr (T == LKV_TYPE_IQ2_XS || T == LKV_TYPE_IQ2_S) {
        const float d = iq_h2f(((const block_iq2_xs *)blk)->d);
        const uint8_t sc = T == LKV_TYPE_IQ2_XS ? ((const block_iq2_xs *)blk)->scales[ib]
                                                 : ((const block_iq2_s *)blk)->scales[ib];
        for (int l = 0; l < 4; l++) {
            const int gg = 4 * ib + l;
            const float db = d * (0.5f + (float)((sc >> 4 * (l >> 1)) & 15)) * 0.25f;
            if constexpr (T == LKV_TYPE_IQ2_XS) {
                const uint16_t q = ((const block_iq2_xs *)blk)->qs[gg];
                iq_put(y + 8 * l, db, IQT(lkv_iq2xs_grid)[q & 511], IQT(lkv_iq_ksigns)[q >> 9], 8);
            } else {
                const block_iq2_s *b = (const block_iq2_s *)blk;
                const int idx = b->qs[gg] | ((b->qh[ib] >> 2 * l) & 3) << 8;
                iq_put(y + 8 * l, db, IQT(lkv_iq2s_grid)[idx], b->qs[32 + gg], 8);
            }
        }
    } else if constexpr (T == LKV_TYPE_IQ3_XXS) {
        const block_iq3_xxs *b = (const block_iq3_xxs *)blk;
        const uint32_t a = iq_u32(b->qs + QK_K / 4 + 4 * ib);
        const float db = iq_h2f(b->d) * (0.5f + (float)(a >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++) {
            const uint32_t sg = IQT(lkv_iq_ksigns)[(a >> 7 * l) & 127];
            iq_put(y + 8 * l, db, IQT(lkv_iq3xxs_grid)[b->qs[8 * ib + 2 * l]], sg, 4);
            iq_put(y + 8 * l + 4, db, IQT(lkv_iq3xxs_grid)[b->qs[8 * ib + 2 * l + 1]], sg >> 4, 4);
        }
    } else if constexpr (T == LKV_TYPE_IQ3_S) {
        const block_iq3_s *b = (const block_iq3_s *)blk;
        const float db = iq_h2f(b->d) * (float)(1 + 2 * ((b->scales[ib / 2] >> 4 * (ib % 2)) & 15));
        const uint32_t sg = iq_u32(b->signs + 4 * ib);
        for (int k = 0; k < 8; k++) {
            const int idx = b->qs[8 * ib + k] | ((b->qh[ib] >> k) & 1) << 8;
            iq_put(y + 4 * k, db, IQT(lkv_iq3s_grid)[idx], sg >> 4 * k, 4);
        }
    } else if constexpr (T == LKV_TYPE_IQ1_S || T == LKV_TYPE_IQ1_M) {
        float d;
        if constexpr (T == LKV_TYPE_IQ1_S) d = iq_h2f(((const block_iq1_s *)blk)->d);
        else {   // the f16 in the top nibbles of the 4 scale words (blocks.h)
            const uint8_t *sc = ((const block_iq1_m *)blk)->scales;
            d = iq_h2f((uint16_t)((sc[1] >> 4) | (sc[3] & 0xf0) | (sc[5] >> 4) << 8 | (sc[7] & 0xf0) << 8));
        }
        for (int l = 0; l < 4; l++) {
            int idx, s, neg;
            if constexpr (T == LKV_TYPE_IQ1_S) {
                const block_iq1_s *b = (const block_iq1_s *)blk;
                const int qh = b->qh[ib];
                idx = b->qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8;
                s = (qh >> 12) & 7;
                neg = qh & 0x8000;
            } else {
                const block_iq1_m *b = (const block_iq1_m *)blk;
                const int gg = 4 * ib + l, k = gg / 2;
                const int nib = (b->qh[gg / 2] >> 4 * (gg % 2)) & 15;
                const uint16_t sc = (uint16_t)(b->scales[2 * (k / 4)] | b->scales[2 * (k / 4) + 1] << 8);
                idx = b->qs[gg] | (nib & 7) << 8;
                s = (sc >> 3 * (k % 4)) & 7;
                neg = nib & 8;
            }
            const float dl = d * (float)(2 * s + 1), delta = neg ? -0.125f : 0.125f;
            const int8_t *gr = IQT(lkv_iq1s_grid)[idx];
            for (int j = 0; j < 8; j++) y[8 * l + j] = dl * ((float)gr[j] + delta);
        }
    } else if constexpr (T == LKV_TYPE_IQ4_XS) {
        const block_iq4_xs *b = (const block_iq4_xs *)blk;
        const int ls = (((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 15) |
                        ((b->scales_h >> 2 * ib) & 3) << 4) - 32;
        const float dl = iq_h2f(b->d) * (float)ls;
        const uint8_t *q = b->qs + 16 * ib;
        /* iq4_nl's levels, as quant/legacy.c's lkv_iq4nl_values */
        const int8_t lv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)lv[q[j] & 15];
            y[j + 16] = dl * (float)lv[q[j] >> 4];
        }
    }
}

#undef IQT
#endif
