/*
 * cuda/mvq_units.cuh: mvq.cu's units. A unit is 64 elements of one 256-element
 * super-block, read where they lie with a few wide loads, as 4 sub-blocks of
 * 16 elements:
 *
 *   mq_load<T>(blk, u, w)    unit u (0..3) of the super-block at blk into w:
 *                            w.q[4s..4s+3]  sub-block s's 16 codes, signed bytes
 *                            w.d[s], w.m[s] its value = d * code + m
 *                            w.e[s]         its first element in the super-block
 *
 * The e[s] are per type: q4_K, q5_K, iq4_xs and the grid i-quants take 64
 * consecutive elements (one pair of 32-groups: the bytes two neighbouring
 * groups share, both nibbles of q4_K's qs, both of iq4_xs's); q2_K, q3_K and
 * q6_K take the 16 elements at one offset of each of the 4 rows of a 128-half
 * (the bytes one load gives: qs[32n + 16h ..] holds elements 128n + 32j + 16h
 * + i of 2-bit row j), so every sub-block still lies inside one 32-group of
 * the activations. Layouts: quant.cuh's structs (the published ones).
 *
 * The scale rule is the one quant_i8.cuh's dq8i gives per 8-piece (test_ops
 * compares both with the CPU's dot); the grid i-quants are read through dq8i
 * itself, 8 pieces a unit (their grids are table look-ups either way).
 * Blocks whose size is a multiple of 16 (q4_K, q5_K) are read with 16-byte
 * loads (their d, dmin and 12 scale bytes: one load of the first 16 bytes), iq4_xs (136: 8-aligned) with 8-byte ones, q2_K (84) with 4-byte ones,
 * q3_K (110) and q6_K (210, 2-aligned blocks) with 4-byte loads of the words
 * around a piece and a funnel shift.
 */
#ifndef LKV_CUDA_MVQ_UNITS_CUH
#define LKV_CUDA_MVQ_UNITS_CUH

#include "quant_i8.cuh"

struct mq_unit {
    uint32_t q[16];   /* sub-block s: q[4s .. 4s + 3], elements e[s] + 0..15 */
    float d[4], m[4];
    int e[4];
};

/* how the additive term m of a unit's sub-blocks is summed: MQ_NONE, MQ_GROUP
 * (one m per 32-group: sub-blocks 0, 1 and 2, 3 are groups e[0] / 32 and
 * e[2] / 32, times the activations' group sum xs), MQ_SUB (an m per
 * sub-block: the codes' sum by dp4a) */
enum { MQ_NONE, MQ_GROUP, MQ_SUB };
template <int T> struct mq_min {
    static constexpr int v = T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K ? MQ_GROUP : T == LKV_TYPE_Q2_K ? MQ_SUB : MQ_NONE;
};

/* the device intrinsics the units use, and their host forms (tests/cuda/
 * emu_mvq.cu runs the units and the kernel's lane code on the CPU) */
#define MQ_HD static __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define MQ_UNROLL _Pragma("unroll")
#define MQ_NO_UNROLL _Pragma("unroll 1")
#else
#define MQ_NO_UNROLL
#define MQ_UNROLL   /* the host compiler's own choice (it does not know the pragma) */
#endif
template <class V> MQ_HD V mq_ldg(const V *p) {
#ifdef __CUDA_ARCH__
    return mq_ldg(p);
#else
    return *p;
#endif
}
MQ_HD int mq_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
#endif
}
MQ_HD uint32_t mq_fshr(uint32_t lo, uint32_t hi, int sh) {
#ifdef __CUDA_ARCH__
    return mq_fshr(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
#endif
}
/* bytewise a - b, signed, saturated */
MQ_HD uint32_t mq_vsubss4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return mq_vsubss4(a, b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        int v = (int)(int8_t)(a >> 8 * i) - (int)(int8_t)(b >> 8 * i);
        v = v < -128 ? -128 : v > 127 ? 127 : v;
        r |= (uint32_t)(uint8_t)v << 8 * i;
    }
    return r;
#endif
}

/* 16 bytes at a 2-aligned address inside a block: the 5 aligned words around
 * it, funnel-shifted (the fifth word stays inside the block for every use) */
MQ_HD void mq_ld16_2(const uint8_t *p, uint32_t (&v)[4]) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    const int sh = (int)((uintptr_t)p & 3) * 8;
    uint32_t w[5];
MQ_UNROLL
    for (int i = 0; i < 5; i++) w[i] = mq_ldg(a + i);
MQ_UNROLL
    for (int i = 0; i < 4; i++) v[i] = mq_fshr(w[i], w[i + 1], sh);
}
MQ_HD void mq_ld16_16(const uint8_t *p, uint32_t (&v)[4]) {
    const uint4 x = mq_ldg((const uint4 *)p);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}
MQ_HD void mq_ld16_8(const uint8_t *p, uint32_t (&v)[4]) {
    const uint2 x = mq_ldg((const uint2 *)p), y = mq_ldg((const uint2 *)p + 1);
    v[0] = x.x; v[1] = x.y; v[2] = y.x; v[3] = y.y;
}
MQ_HD void mq_ld16_4(const uint8_t *p, uint32_t (&v)[4]) {
MQ_UNROLL
    for (int i = 0; i < 4; i++) v[i] = mq_ldg((const uint32_t *)p + i);
}
/* the f16 in the low / high half of a word */
MQ_HD float mq_lo_h(uint32_t v) {
    return __half2float(__ushort_as_half((unsigned short)(v & 0xFFFFu)));
}
MQ_HD float mq_hi_h(uint32_t v) {
    return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
}
/* quant.cuh's k4_scale_min on the block's first 16 bytes held in registers
 * (head.y, .z, .w: scale bytes 0..3, 4..7, 8..11) */
MQ_HD void mq_k4_scale_min(const uint4 &head, int j, int &sc, int &mn) {
    const int k = 8 * (j & 3);
    const uint32_t a = head.y >> k & 0xFFu, c = head.z >> k & 0xFFu, e = head.w >> k & 0xFFu;
    if (j < 4) {
        sc = (int)(a & 63);
        mn = (int)(c & 63);
    } else {
        sc = (int)((e & 0xF) | (a >> 6) << 4);
        mn = (int)((e >> 4) | (c >> 6) << 4);
    }
}

template <int T>
MQ_HD void mq_load(const uint8_t *__restrict__ blk, int u, mq_unit &w) {
    if constexpr (T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K) {
        /* groups 2u (low nibbles of qs[32u ..]) and 2u + 1 (high nibbles) */
        const cq4_k *b = (const cq4_k *)blk;   /* d, dmin, scales: one 16-byte prefix */
        const uint8_t *qs = T == LKV_TYPE_Q4_K ? b->qs : ((const cq5_k *)blk)->qs;
        uint32_t lo[4], hi[4];
        const uint4 head = mq_ldg((const uint4 *)blk);
        mq_ld16_16(qs + 32 * u, lo);
        mq_ld16_16(qs + 32 * u + 16, hi);
        uint32_t h0[4] = {0, 0, 0, 0}, h1[4] = {0, 0, 0, 0};
        if constexpr (T == LKV_TYPE_Q5_K) {
            /* qh[l] bit g: element l of group g */
            mq_ld16_16(((const cq5_k *)blk)->qh, h0);
            mq_ld16_16(((const cq5_k *)blk)->qh + 16, h1);
        }
        const float d = mq_lo_h(head.x), dmin = mq_hi_h(head.x);
MQ_UNROLL
        for (int g = 0; g < 2; g++) {
            int sc, mn;
            mq_k4_scale_min(head, 2 * u + g, sc, mn);
MQ_UNROLL
            for (int i = 0; i < 4; i++) {
                uint32_t a = (lo[i] >> (4 * g)) & 0x0F0F0F0Fu, c = (hi[i] >> (4 * g)) & 0x0F0F0F0Fu;
                if constexpr (T == LKV_TYPE_Q5_K) {
                    a |= ((h0[i] >> (2 * u + g)) & 0x01010101u) << 4;
                    c |= ((h1[i] >> (2 * u + g)) & 0x01010101u) << 4;
                }
                w.q[8 * g + i] = a;
                w.q[8 * g + 4 + i] = c;
            }
            w.d[2 * g] = w.d[2 * g + 1] = d * (float)sc;
            w.m[2 * g] = w.m[2 * g + 1] = -dmin * (float)mn;
            w.e[2 * g] = 64 * u + 32 * g;
            w.e[2 * g + 1] = 64 * u + 32 * g + 16;
        }
    } else if constexpr (T == LKV_TYPE_IQ4_XS) {
        /* groups 2u, 2u + 1: 16 bytes each, low nibbles elements 0..15, high 16..31 */
        const block_iq4_xs *b = (const block_iq4_xs *)blk;
        const uint2 head = mq_ldg((const uint2 *)blk);   /* d, scales_h, scales_l */
        const float d = mq_lo_h(head.x);
MQ_UNROLL
        for (int g = 0; g < 2; g++) {
            uint32_t v[4];
            mq_ld16_8(b->qs + 16 * (2 * u + g), v);
MQ_UNROLL
            for (int i = 0; i < 4; i++) {
                w.q[8 * g + i] = iq4nl_bytes(v[i] & 0x0F0F0F0Fu);
                w.q[8 * g + 4 + i] = iq4nl_bytes((v[i] >> 4) & 0x0F0F0F0Fu);
            }
            const int ib = 2 * u + g;
            const int ls = (int)(((head.y >> 4 * ib) & 15) | ((head.x >> (16 + 2 * ib)) & 3) << 4) - 32;
            w.d[2 * g] = w.d[2 * g + 1] = d * (float)ls;
            w.m[2 * g] = w.m[2 * g + 1] = 0.f;
            w.e[2 * g] = 64 * u + 32 * g;
            w.e[2 * g + 1] = 64 * u + 32 * g + 16;
        }
    } else if constexpr (T == LKV_TYPE_Q2_K || T == LKV_TYPE_Q3_K || T == LKV_TYPE_Q6_K) {
        /* half n = u >> 1, offset 16h (h = u & 1) of each of the 4 rows j */
        const int n = u >> 1, h = u & 1;
        uint32_t v[4], v2[4], hv[4];
        float d = 0.f, dmin = 0.f;
        if constexpr (T == LKV_TYPE_Q2_K) {
            const cq2_k *b = (const cq2_k *)blk;
            mq_ld16_4(b->qs + 32 * n + 16 * h, v);
            d = __half2float(b->d);
            dmin = __half2float(b->dmin);
        } else if constexpr (T == LKV_TYPE_Q3_K) {
            const cq3_k *b = (const cq3_k *)blk;
            mq_ld16_2(b->qs + 32 * n + 16 * h, v);
            mq_ld16_2(b->hmask + 16 * h, hv);
            d = __half2float(b->d);
        } else {
            const cq6_k *b = (const cq6_k *)blk;
            mq_ld16_2(b->ql + 64 * n + 16 * h, v);        /* rows 0 (low nibble), 2 (high) */
            mq_ld16_2(b->ql + 64 * n + 32 + 16 * h, v2);  /* rows 1, 3 */
            mq_ld16_2(b->qh + 32 * n + 16 * h, hv);       /* bits 2j: row j */
            d = __half2float(b->d);
        }
MQ_UNROLL
        for (int j = 0; j < 4; j++) {
            const int is = 8 * n + 2 * j + h;   /* the sub-block's 16-group */
            w.e[j] = 128 * n + 32 * j + 16 * h;
            w.m[j] = 0.f;
            if constexpr (T == LKV_TYPE_Q2_K) {
                const int sc = ((const cq2_k *)blk)->scales[is];
                w.d[j] = d * (float)(sc & 0xF);
                w.m[j] = -dmin * (float)(sc >> 4);
MQ_UNROLL
                for (int i = 0; i < 4; i++) w.q[4 * j + i] = (v[i] >> (2 * j)) & 0x03030303u;
            } else if constexpr (T == LKV_TYPE_Q3_K) {
                w.d[j] = d * (float)k3_scale(((const cq3_k *)blk)->scales, is);
MQ_UNROLL
                for (int i = 0; i < 4; i++)
                    w.q[4 * j + i] = mq_vsubss4(((v[i] >> (2 * j)) & 0x03030303u) |
                                                   (((hv[i] >> (4 * n + j)) & 0x01010101u) << 2),
                                               0x04040404u);
            } else {
                w.d[j] = d * (float)((const cq6_k *)blk)->scales[is];
MQ_UNROLL
                for (int i = 0; i < 4; i++) {
                    const uint32_t l = j & 1 ? v2[i] : v[i];
                    w.q[4 * j + i] = mq_vsubss4(((l >> (4 * (j >> 1))) & 0x0F0F0F0Fu) |
                                                   (((hv[i] >> (2 * j)) & 0x03030303u) << 4),
                                               0x20202020u);
                }
            }
        }
    } else {
        /* the grid i-quants: elements 64u .. 64u + 63 as dq8i's 8 pieces
         * (their scales are per 16 or per 32) */
        static_assert(lkv_is_iquant(T) && iq_has_codes<T>(), "mvq: a k-quant or an i-quant with codes");
MQ_UNROLL
        for (int s = 0; s < 4; s++) {
            float dw, mw, dw1, mw1;
            dq8i<T>(blk, 8 * u + 2 * s, w.q[4 * s], w.q[4 * s + 1], dw, mw);
            dq8i<T>(blk, 8 * u + 2 * s + 1, w.q[4 * s + 2], w.q[4 * s + 3], dw1, mw1);
            w.d[s] = dw;
            w.m[s] = 0.f;
            w.e[s] = 64 * u + 16 * s;
        }
    }
}

#endif
