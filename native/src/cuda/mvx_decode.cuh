/*
 * cuda/mvx_decode.cuh: mvx.cu's per-lane decoding of one weight block from
 * shared memory: the lane's code word at the row's alignment class (aligned
 * 32-bit loads, one funnel shift for an unaligned word), the nibbles or
 * 5-bit codes moved so that one dp4a gives SC * p exactly, the block's scale
 * (and minimum for q4_1 / q5_1). mvx.cu's header explains the scheme. All
 * __host__ __device__, for the host emulation (tests/cuda/emu_mvx.cu).
 */
#ifndef LKV_CUDA_MVX_DECODE_CUH
#define LKV_CUDA_MVX_DECODE_CUH

#include "exact.cuh"
#include "twins.cuh"

/* the per-lane constants of the decoding */
struct mw_lane {
    int wo;   /* the lane's code word: byte offset within the block's codes */
    int sa;   /* shift of an aligned code word (q4: left; q5: rotate left; iq4_nl: right) */
    int su;   /* funnel shift (right) of an unaligned one */
    int qa;   /* q5: right shift of an aligned qh word */
    int qu;   /* q5: right shift of the half-aligned qh word */
    int qo;   /* q5: which of the two words around an unaligned qh (0 or 4) */
};

template <int T> static __host__ __device__ __forceinline__ mw_lane mw_lane_make(int l) {
    mw_lane c;
    const int hi = l >> 2;
    c.wo = T == LKV_TYPE_Q8_0 ? 4 * l : 4 * (l & 3);
    c.qa = 4 * l;
    c.qu = l < 4 ? 16 + 4 * l : 4 * l - 16;
    c.qo = l < 4 ? 0 : 4;
    if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q4_1) {
        c.sa = hi ? 0 : 4;        /* nibble to bits 4..7 */
        c.su = hi ? 16 : 12;
    } else if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
        c.sa = hi ? 31 : 3;       /* nibble to bits 3..6 */
        c.su = hi ? 17 : 13;
    } else if constexpr (T == LKV_TYPE_IQ4_NL) {
        c.sa = 4 * hi;            /* nibble to bits 0..3 */
        c.su = 16 + 4 * hi;
    } else {
        c.sa = 0;
        c.su = 16;
    }
    return c;
}

/* 4 bytes at wl + X (wl 4-aligned, X even): one load, or two and a funnel
 * shift by s (16, or 16 - k to also move bits up by k) */
template <int X> static __host__ __device__ __forceinline__ uint32_t mw_word_u(const uint8_t *wl, int s) {
    static_assert(X % 4 == 2, "mw_word_u");
    return tw_fsr(tw_ld32(wl + X - 2), tw_ld32(wl + X + 2), s);
}

/* The block whose first byte is wa + O (wa 4-aligned, O compile-time): the
 * lane's 4 codes x as SC times the CPU's expanded codes (bytes), its scale
 * and minimum. */
/* the f16 scale and minimum of a q4_1 / q5_1 block O bytes into the row:
 * one 32-bit load when they share an aligned word */
template <int O>
static __host__ __device__ __forceinline__ void mw_dm(const uint8_t *wa, float &dw, float &mw) {
    if constexpr (O % 4 == 0) {
        const uint32_t dm = tw_ld32(wa + O);
        dw = tw_hlo(dm);
        mw = tw_hhi(dm);
    } else {
        dw = tw_h(wa + O);
        mw = tw_h(wa + O + 2);
    }
}

template <int T, int O>
static __host__ __device__ __forceinline__ void mw_block(const uint8_t *wa, const mw_lane &c, uint32_t &x, float &dw,
                                                         float &mw) {
    const uint8_t *wl = wa + c.wo;
    /* (q4_0 weights are in block order: mvx_blocks.cuh) */
    if constexpr (T == LKV_TYPE_Q4_1) {
        constexpr int X = O + 4;
        uint32_t v;
        if constexpr (X % 4 == 0) v = tw_ld32(wl + X) << c.sa;
        else v = mw_word_u<X>(wl, c.su);
        x = v & 0xF0F0F0F0u;  /* 16 * code, unsigned */
        mw_dm<O>(wa, dw, mw);
    } else if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
        constexpr bool Q1 = T == LKV_TYPE_Q5_1;
        constexpr int X = O + (Q1 ? 8 : 6), H = O + (Q1 ? 4 : 2);   /* codes, qh */
        uint32_t v, h;
        if constexpr (X % 4 == 0) v = tw_rotl(tw_ld32(wl + X), c.sa);
        else v = mw_word_u<X>(wl, c.su);
        /* the lane's 4 fifth bits: qh bits 4l..4l+3 at bits 0..3 */
        if constexpr (H % 4 == 0) h = tw_ld32(wa + H) >> c.qa;
        else h = tw_ld32(wa + c.qo + H - 2) >> c.qu;
        /* bit i -> bit 8i + 7: the products i + 7m (m = 1..4) land on
         * 8i' + 7 only for m = i + 1, and do not overlap (no carries) */
        const uint32_t z = (h & 0xFu) * 0x10204080u;
        x = (v & 0x78787878u) | (z & 0x80808080u);   /* 8 * (code + 16 h) */
        if constexpr (!Q1) {
            x ^= 0x80808080u;                           /* 8 * (code + 16 h - 16), signed */
            dw = tw_h(wa + O);
        } else {
            mw_dm<O>(wa, dw, mw);
        }
    } else if constexpr (T == LKV_TYPE_IQ4_NL) {
        constexpr int X = O + 2;
        uint32_t a, b2;   /* the lane's nibbles at bits 0..3 (a) and 4..7 (b2) of every byte, after >> 4 more */
        if constexpr (X % 4 == 0) {
            const uint32_t w = tw_ld32(wl + X);
            a = w >> c.sa;
            b2 = w >> (c.sa + 4);
        } else {
            const uint32_t w0 = tw_ld32(wl + X - 2), w1 = tw_ld32(wl + X + 2);
            a = tw_fsr(w0, w1, c.su);
            b2 = tw_fsr(w0, w1, c.su + 4);
        }
        /* nibbles n0..n3 of the lane: byte 0 = n0 | n1 << 4, byte 2 = n2 | n3 << 4 */
        const uint32_t u = (a & 0x0F0F0F0Fu) | (b2 & 0xF0F0F0F0u);
        const uint32_t p = ex_perm(u, 0u, 0x0020u);             /* n0 | n1 << 4 | n2 << 8 | n3 << 12 */
        /* the levels (ex_iq4's table): the low 3 bits pick one of 8 in each
         * half, bit 3 picks the half */
        const uint32_t t0 = 0xBFAD9881u, t1 = 0xF6EADDCFu, t2 = 0x26190D01u, t3 = 0x71594535u;
        const uint32_t sel = p & 0x7777u;
        const uint32_t lo = ex_perm(t0, t1, sel), hi = ex_perm(t2, t3, sel);
        x = ex_perm(lo, hi, ((p >> 1) & 0x4444u) | 0x3210u);
        dw = tw_h(wa + O);
    } else {
        static_assert(T == LKV_TYPE_Q8_0, "mw_block: legacy types but q4_0 only");
        constexpr int X = O + 2;
        if constexpr (X % 4 == 0) x = tw_ld32(wl + X);
        else x = mw_word_u<X>(wl, 16);
        dw = tw_h(wa + O);
    }
}

template <int J> static __host__ __device__ __forceinline__ int mw_cmp(const int4 &v) {
    return J == 0 ? v.x : J == 1 ? v.y : J == 2 ? v.z : v.w;
}
template <int J> static __host__ __device__ __forceinline__ float mw_cmp(const float4 &v) {
    return J == 0 ? v.x : J == 1 ? v.y : J == 2 ? v.z : v.w;
}

#endif
