/*
 * cuda/gemm_wg_kcodes.cuh: gemm_wg's operands for the k-quants (q2_K ..
 * q6_K) and iq4_xs: the integers the CPU multiplies, so that the tensor
 * cores' products are the CPU's and only the order of the float adds differs.
 *
 * The CPU's dot of a k-quant row with an activation row (quant/dot_kquants.c)
 * is, per super-block of 256, dy d sum_e(sc_e q_e p_e) - dy dmin
 * sum_k(mn_k bsum_k): p_e the activation's q8_K codes, dy their scale,
 * bsum_k the sums of its 16 groups of 16 codes, sc / mn the 16-group's
 * integer scale and min (mins: q2_K, q4_K, q5_K), q_e the weight codes
 * (q3_K, q6_K: signed). iq4_xs is q6_K's case: sc its 32-group's ls - 32
 * (-32 .. 31), q_e the non-linear table's levels (-127 .. 113), so |sc q|
 * <= 4064, d its one float scale (quant/dot_iquants.c's integer form).
 *
 * Two kinds of operands, by what the products need:
 *   - 8-bit (wgmma s8, k32 steps, twice f16's rate; s32 sums, exact), where
 *     the weights' sc q fit a byte or two: q2_K (sc q in [0, 45]), q3_K
 *     (-sc q in [-128, 124]; its scale -d), q6_K and iq4_xs (|sc q| <= 4096,
 *     as 64 hi + lo, |hi|, |lo| < 65, the activation codes against each half). q2_K's
 *     mins are one more k32 step: the activation side bsum_k as 16 bh_k +
 *     bl_k (bh_k = bsum_k / 16, |bl_k| < 16), the weight side (unsigned)
 *     16 mn_k against bh_k and mn_k against bl_k: sum_k mn_k bsum_k exactly.
 *   - f16 (k16 steps), for q4_K / q5_K, whose sc q (up to 945, 1953) do not
 *     fit a byte: every integer is exact in f16 (|bsum_k| <= 2032); the
 *     mins' term goes in as 32 columns, bsum_k twice against r_k^hi, r_k^lo,
 *     the two f16 halves of r_k = -dmin mn_k 2^p / D (D = d, or dmin where d
 *     is 0), so that bsum_k (r_k^hi + r_k^lo) is the min term to 2^-22; the
 *     codes are sc q 2^p, the super-block's scale D 2^-p. p <= 4 keeps the
 *     codes below 2^15 and |r_k| below 2^14 (f16's range); a power of two is
 *     exact on both sides. Within a super-block every partial sum is an
 *     integer below 2^24, exact in the f32 accumulator.
 * Per super-block b: activations' scale dy in xsc[b][token]; the weights'
 * in wsc[b][row] (q2_K: d, and -dmin in a second plane after the first).
 *
 * Layout: gemm_wg.cu's tiles (16-byte pieces, 8 pieces = 128 bytes a tile
 * row); super-block b is pieces [G b, G b + G) of the extended K (G = 2 S, S
 * its steps of 32 bytes: q2_K 9, q3_K 8, q6_K / iq4_xs 16, q4_K / q5_K 18). The
 * super-blocks are padded (super-blocks of zeros, scale 0) to a multiple of
 * U (2, q2_K 4), so that U of them fill whole tiles and the consumer's
 * schedule below is the same for every unit of U.
 *
 * The consumer (wg_consume_kcodes) runs a super-block's products into a fresh
 * accumulator and folds it into the result times its scales after waiting
 * for all of them (a drain, as the two-level accumulation of FP8 GEMMs does
 * per block; pp512 of the 8B shape, q4_K, H100: 35.1 ms a step, 33.2 with the
 * fold left out). q6_K's high halves' sum is shifted by 6 bits (after a
 * drain) before the low halves' products are added; q2_K's codes are folded
 * with d, then its mins step with -dmin: two drains a super-block for these
 * two. Every branch of the schedule is resolved at compile time (a unit of
 * super-blocks unrolled): with the fold in a data-dependent branch, or with
 * a second accumulator folded while the other's products ran, ptxas
 * serialized the wgmmas (its C7520 / C7514). The weights' scales of a
 * super-block go to shared memory (one per thread of the warpgroup; a named
 * barrier per warpgroup before the fold), the activations' to registers,
 * both loaded a super-block ahead.
 */
#ifndef LKV_CUDA_GEMM_WG_KCODES_CUH
#define LKV_CUDA_GEMM_WG_KCODES_CUH

#include "quant_i8.cuh"

/* super-blocks per unit (Layout below): U S steps of 32 bytes fill whole tiles of 4 */
static constexpr __host__ __device__ int wg_kq_unit(int S) { return S % 2 ? 4 : 2; }

template <int T> struct wg_kq {
    enum {
        on = T == LKV_TYPE_Q2_K || T == LKV_TYPE_Q3_K || T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K ||
             T == LKV_TYPE_Q6_K || T == LKV_TYPE_IQ4_XS,
        /* operands: 0 f16; 8-bit: 1 q3_K (codes once), 2 q6_K / iq4_xs (two halves), 3 q2_K (codes, mins) */
        I8 = T == LKV_TYPE_Q3_K ? 1 : T == LKV_TYPE_Q6_K || T == LKV_TYPE_IQ4_XS ? 2 : T == LKV_TYPE_Q2_K ? 3 : 0,
        /* steps of 32 bytes per super-block: f16, 256 codes + 32 mins
         * columns; 8-bit, 256 codes (q6_K twice) + q2_K's mins step */
        S = I8 == 0 ? 18 : I8 == 1 ? 8 : I8 == 2 ? 16 : 9,
        G = 2 * S,                     /* 16-byte pieces per super-block and row */
        U = wg_kq_unit(S),             /* super-blocks per unit of whole tiles */
        PLANES = I8 == 3 ? 2 : 1       /* the weights' scales per super-block */
    };
};

/* super-blocks padded to a multiple of u, and their tiles of 128 bytes */
static inline int wg_kq_pad(int nsb, int u) { return (nsb + u - 1) / u * u; }
static inline int wg_kq_tiles(int nsb_pad, int S) { return nsb_pad * S / 4; }

/* x (n, 256 nsb) f32 -> the activation operand (n_pad rows, tiled by WG_BM;
 * nsb_pad super-blocks) and xsc[b * n_pad + row], by the CPU's q8_K rule
 * (gemm_wg.cu's wg_q8k_scale / wg_q8k_code; dy = 1 / iscale); rows n ..
 * n_pad and the padding super-blocks zeros. One warp a super-block of a row,
 * lane l its 8 codes 8 l ... */
template <int T>
static __global__ void wg_x_kcodes(const float *__restrict__ x, uint8_t *__restrict__ y, float *__restrict__ xsc,
                                   int n, int nsb, int nsb_pad, int n_pad, int nkt) {
    constexpr int I8 = wg_kq<T>::I8, G = wg_kq<T>::G;
    const size_t total = (size_t)n_pad * nsb_pad * 32;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t w = i >> 5;
        const int r = (int)(w / nsb_pad), b = (int)(w % nsb_pad), lane = (int)(i & 31);
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < n && b < nsb) wg_load8(x + (size_t)r * nsb * 256 + 256 * b + 8 * lane, v);
        float iscale, d, c[8];
        const bool nz = wg_q8k_scale(v, lane, iscale, d);
        int sum = 0;
        uint32_t p[2] = {0u, 0u};
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int q = nz ? wg_q8k_code(v[k], iscale) : 0;
            c[k] = (float)q;
            p[k >> 2] |= ((uint32_t)q & 0xFFu) << (8 * (k & 3));
            sum += q;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);   /* bsum of the lane's 16-group, lane / 2 */
        if constexpr (I8) {
            /* 16 codes a piece (lanes l and l + 1); q6_K: the super-block's 256 twice */
            const uint32_t o0 = __shfl_xor_sync(0xffffffffu, p[0], 1), o1 = __shfl_xor_sync(0xffffffffu, p[1], 1);
            if (!(lane & 1)) {
                const uint4 u = make_uint4(p[0], p[1], o0, o1);
                *(uint4 *)(y + wg_tiled(r, G * b + lane / 2, WG_BM, nkt)) = u;
                if constexpr (I8 == 2) *(uint4 *)(y + wg_tiled(r, G * b + 16 + lane / 2, WG_BM, nkt)) = u;
            }
        } else {
            *(uint4 *)(y + wg_tiled(r, G * b + lane, WG_BM, nkt)) = lkv_f16x8(c);
        }
        if constexpr (I8 == 3) {
            /* the mins step: lane 0 bh_0 .. bh_15, lane 1 bl_0 .. bl_15 */
            uint32_t m[4] = {0u, 0u, 0u, 0u};
#pragma unroll
            for (int k = 0; k < 16; k++) {
                const int bs = __shfl_sync(0xffffffffu, sum, 2 * k), bh = bs / 16;
                m[k >> 2] |= ((uint32_t)(lane ? bs - 16 * bh : bh) & 0xFFu) << (8 * (k & 3));
            }
            if (lane < 2)
                *(uint4 *)(y + wg_tiled(r, G * b + 16 + lane, WG_BM, nkt)) = make_uint4(m[0], m[1], m[2], m[3]);
        } else if constexpr (I8 == 0) {
            /* lane m < 4: columns 8 m .. 8 m + 7, bsum_k twice for k = 4 m .. 4 m + 3 */
            float m8[8];
#pragma unroll
            for (int u = 0; u < 4; u++)
                m8[2 * u] = m8[2 * u + 1] = (float)__shfl_sync(0xffffffffu, sum, 2 * (4 * (lane & 3) + u));
            if (lane < 4) *(uint4 *)(y + wg_tiled(r, G * b + 32 + lane, WG_BM, nkt)) = lkv_f16x8(m8);
        }
        if (lane == 0) xsc[(size_t)b * n_pad + r] = d;
    }
}

/* piece c of super-block b of a row of an 8-bit type (I8 1-3), 16 bytes;
 * its scale (plane 0, or q2_K's mins' in plane 1) in sc0 where c == 0 and in
 * sc1 where c == 16 */
template <int T>
static __device__ __forceinline__ uint4 wg_w_piece8(const uint8_t *__restrict__ row, int b, int c, float &sc0,
                                                    float &sc1) {
    constexpr int I8 = wg_kq<T>::I8;
    uint32_t p[4] = {0u, 0u, 0u, 0u};
    int sc, mn;
    float d, dmin;
    if (I8 == 3 && c >= 16) {
        /* q2_K's mins step: 16 mn_k (c = 16), mn_k (c = 17), unsigned */
        kq_scales<T>(row, 32 * b, sc, mn, d, dmin);
        if (dmin != 0.f) {
#pragma unroll
            for (int k = 0; k < 16; k++) {
                kq_scales<T>(row, 32 * b + 2 * k, sc, mn, d, dmin);
                p[k >> 2] |= (uint32_t)(c == 16 ? 16 * mn : mn) << (8 * (k & 3));
            }
        }
        sc1 = -dmin;
        return make_uint4(p[0], p[1], p[2], p[3]);
    }
    /* codes: the 16-group m = c % 16; q3_K: -sc q (the scale -d); q6_K: sc q
     * = 64 hi + lo, hi for c < 16, lo after */
    const int e = 32 * b + 2 * (c & 15);   /* its first 8-piece */
    kq_scales<T>(row, e, sc, mn, d, dmin);
    if (d != 0.f) {
        uint32_t q8[4];
        float dw, mw;
        dq8i<T>(row, e, q8[0], q8[1], dw, mw);
        dq8i<T>(row, e + 1, q8[2], q8[3], dw, mw);
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const int q = I8 == 3 ? (int)((q8[k >> 2] >> (8 * (k & 3))) & 0xFFu)
                                  : (int)(int8_t)(q8[k >> 2] >> (8 * (k & 3)));
            const int v = sc * q, hi = v / 64;
            const int o = I8 == 1 ? -v : I8 == 3 ? v : c < 16 ? hi : v - 64 * hi;
            p[k >> 2] |= ((uint32_t)o & 0xFFu) << (8 * (k & 3));
        }
    }
    sc0 = I8 == 1 ? -d : d;
    return make_uint4(p[0], p[1], p[2], p[3]);
}

/* rows [0, rows) of a k-quant weight (row_bytes apart, 256 nsb columns) ->
 * the weight operand (rows_pad rows, tiled by R; nsb_pad = 4 nkt / S
 * super-blocks) and wsc[plane][b][row] (planes nsb_pad * ldw apart); rows
 * past `rows` and the padding super-blocks zeros. Threads take 16-byte
 * pieces of the extended K in wg_item's order (a warp writes runs of 128
 * bytes). f16 types: each derives its super-block's p from d, dmin and the
 * largest possible min (63), an upper bound of the mins' r_k that keeps them
 * in range. */
template <int T>
static __global__ void wg_w_kcodes(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int nsb,
                                   int rows_pad, int R, int nkt, uint8_t *__restrict__ dst, float *__restrict__ wsc,
                                   int ldw) {
    constexpr int S = wg_kq<T>::S, G = wg_kq<T>::G, MN_MAX = 63;
    const size_t total = (size_t)rows_pad * nkt * 8, plane = (size_t)(4 * nkt / S) * ldw;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int r, g;
        wg_item(i, R, nkt, r, g);
        const int b = g / G, c = g - b * G;
        if constexpr (wg_kq<T>::I8) {
            float sc0 = 0.f, sc1 = 0.f;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < rows && b < nsb) v = wg_w_piece8<T>(w + (size_t)r * row_bytes, b, c, sc0, sc1);
            *(uint4 *)(dst + wg_tiled(r, g, R, nkt)) = v;
            if (c == 0) wsc[(size_t)b * ldw + r] = sc0;
            if (wg_kq<T>::PLANES == 2 && c == 16) wsc[plane + (size_t)b * ldw + r] = sc1;
        } else {
            float y[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, scale = 0.f;
            if (r < rows && b < nsb) {
                const uint8_t *row = w + (size_t)r * row_bytes;
                int sc, mn;
                float d, dmin;
                const int e = 32 * b + (c & 31);   /* the piece of a code group */
                kq_scales<T>(row, e, sc, mn, d, dmin);
                const float D = d != 0.f ? d : dmin;
                int p = 0;
                const float big = D != 0.f ? fabsf(dmin * (float)MN_MAX / D) : 0.f;
                if (big > 0.f && big <= 3.0e38f) p = min(4, 13 - ilogbf(big));
                const float p2 = __int_as_float((127 + p) << 23);   /* 2^p, p in [-34, 4] for f16 d, dmin */
                scale = D != 0.f ? D * __int_as_float((127 - p) << 23) : 0.f;
                if (c < 32) {
                    uint32_t w0, w1;
                    float dw, mw;
                    dq8i<T>(row, e, w0, w1, dw, mw);
#pragma unroll
                    for (int k = 0; k < 8; k++) {
                        const int q = (int8_t)((k < 4 ? w0 : w1) >> (8 * (k & 3)));
                        y[k] = d != 0.f ? (float)(sc * q) * p2 : 0.f;
                    }
                } else if (D != 0.f) {
                    /* columns 8 (c - 32) ..: r_k^hi, r_k^lo for k = 4 (c - 32) .. + 3 */
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        int sck, mnk;
                        float dk, dmk;
                        kq_scales<T>(row, 32 * b + 2 * (4 * (c - 32) + u), sck, mnk, dk, dmk);
                        const float rk = -__fdiv_rn(dmin * (float)mnk * p2, D);
                        const float hi = __half2float(__float2half_rn(rk));
                        y[2 * u] = hi;
                        y[2 * u + 1] = __half2float(__float2half_rn(rk - hi));
                    }
                }
            }
            *(uint4 *)(dst + wg_tiled(r, g, R, nkt)) = lkv_f16x8(y);
            if (c == 0) wsc[(size_t)b * ldw + r] = scale;
        }
    }
}

#if FA_HAVE_WGMMA
/* acc += tmp times the super-block's scales: fx for this thread's tokens
 * (tok, tok + 8), w for the block's rows (w[8 i], w[8 i + 1]: this thread's
 * fragment columns), once every thread of the warpgroup wrote its share of w */
template <class A>
static __device__ __forceinline__ void wg_kc_fold(float (&acc)[16][4], A (&tmp)[16][4], const float (&fx)[2],
                                                  const float *w, int wgi) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wgi) : "memory");
    fa_reg_fence(tmp);
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const float2 fw = *(const float2 *)(w + 8 * i);
        acc[i][0] = fmaf((float)tmp[i][0], fx[0] * fw.x, acc[i][0]);
        acc[i][1] = fmaf((float)tmp[i][1], fx[0] * fw.y, acc[i][1]);
        acc[i][2] = fmaf((float)tmp[i][2], fx[1] * fw.x, acc[i][2]);
        acc[i][3] = fmaf((float)tmp[i][3], fx[1] * fw.y, acc[i][3]);
    }
    fa_reg_fence(tmp);
}

/* the super-block's accumulator: f32, or s32 for 8-bit operands */
template <int I8> struct wg_kc_acc { typedef int t; };
template <> struct wg_kc_acc<0> { typedef float t; };

/* the scales of super-block b (clamped to the last one), loaded into
 * registers a super-block before they are used: the activations' for this
 * thread's tokens (tok, tok + 8), the weights' (each plane) for row row0 +
 * ti, which the super-block's start stores to shared memory for the whole
 * warpgroup */
template <int PLANES>
static __device__ __forceinline__ void wg_kc_prefetch(const wg_set &ws, int b, int tok, int row0, int ti,
                                                      float (&nx)[2], float (&nw)[PLANES]) {
    b = min(b, ws.nsb - 1);
    const float *xs = ws.xsc + (size_t)b * ws.ldx + tok;
    nx[0] = xs[0];
    nx[1] = xs[8];
#pragma unroll
    for (int pl = 0; pl < PLANES; pl++) nw[pl] = ws.wsc[((size_t)pl * ws.nsb + b) * ws.ldw + row0 + ti];
}

/* super-blocks b0 .. b0 + U - 1: tiles t0 .. t0 + U KS / 4 of the ring, each
 * super-block's products into tmp, folded into acc after its last step
 * (wait for every product, the drain; q6_K and q2_K: once more in between,
 * at step MID). At a super-block's start its scales, loaded during the one
 * before (nx, nw), go to fx and to wsm's buffer b % 2 (rewritten at b + 2,
 * after every thread passed the barrier of b + 1's fold, so after its reads
 * of b's); two steps in, the next one's are loaded. */
template <int KS, int U, int NS, int STAGE, int I8>
static __device__ __forceinline__ void wg_kc_unit(const wg_set &ws, float (&acc)[16][4],
                                                  typename wg_kc_acc<I8>::t (&tmp)[16][4], float (&fx)[2],
                                                  float (&nx)[2], float (&nw)[I8 == 3 ? 2 : 1], uint32_t sb,
                                                  uint32_t full, uint32_t empty, int t0, int b0, int wgi, int tok,
                                                  int row0, float *wsm) {
    constexpr int NT = U * KS / 4, PL = I8 == 3 ? 2 : 1, MID = I8 == 2 ? KS / 2 - 1 : I8 == 3 ? KS - 2 : -1;
    const int ti = threadIdx.x & 127, q = threadIdx.x & 3;
#pragma unroll
    for (int tt = 0; tt < NT; tt++) {
        const int t = t0 + tt, s = t % NS;
        mb_wait(full + 8 * s, (t / NS) & 1);
        const uint32_t st = sb + s * STAGE;
        fa_wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++) {
            const int j = 4 * tt + kk, b = b0 + j / KS, us = j % KS;
            float *wb = wsm + (b & 1) * 256;
            if (us == 0) {
                fx[0] = nx[0];
                fx[1] = nx[1];
#pragma unroll
                for (int pl = 0; pl < PL; pl++) wb[128 * pl + ti] = nw[pl];
            }
            const uint64_t da = fa_desc(st + wgi * 64 * 16 + kk * 2 * (WG_BM * 16), WG_BM * 16, 128);
            const uint64_t db = fa_desc(st + WG_XTILE + kk * 2 * (128 * 16), 128 * 16, 128);
            /* a fresh sum at the super-block's start, and at q2_K's mins step */
            if constexpr (I8 == 3) {
                if (us == KS - 1) fa_wgmma_ss_n128_s8u8(tmp, da, db, 0);
                else fa_wgmma_ss_n128_s8(tmp, da, db, us);
            } else if constexpr (I8) {
                fa_wgmma_ss_n128_s8(tmp, da, db, us);
            } else {
                fa_wgmma_ss_n128<false>(tmp, da, db, us);
            }
            if (us == 2) wg_kc_prefetch<PL>(ws, b + 1, tok, row0, ti, nx, nw);
            if (us == MID) {
                fa_wg_commit();
                fa_wg_wait0();
                if constexpr (I8 == 2) {
                    /* q6_K: the high halves' sum times 64, then the low halves' added to it */
                    fa_reg_fence(tmp);
#pragma unroll
                    for (int i = 0; i < 16; i++)
#pragma unroll
                        for (int k = 0; k < 4; k++) tmp[i][k] = (int)((unsigned)tmp[i][k] << 6);
                    fa_reg_fence(tmp);
                } else {
                    wg_kc_fold(acc, tmp, fx, wb + 2 * q, wgi);   /* q2_K: the codes, times d */
                }
                fa_wg_fence();
            }
#ifdef LKV_WG_NODRAIN
            if (false) {
#else
            if (us == KS - 1) {
#endif
                fa_wg_commit();
                fa_wg_wait0();
                wg_kc_fold(acc, tmp, fx, wb + 128 * (PL - 1) + 2 * q, wgi);
                fa_wg_fence();
            }
        }
        fa_wg_commit();
        fa_wg_wait1();   /* the group of tile t - 1 is done: its stage may be refilled */
        if (t > 0) mb_arrive(empty + 8 * ((t - 1) % NS));
    }
}

/* the consumer loop over ws.nsb (a multiple of U) super-blocks; wsm: this
 * warpgroup's 2 x 256 weight scales in shared memory */
template <int KS, int U, int NS, int STAGE, int I8>
static __device__ __forceinline__ void wg_consume_kcodes(const wg_set &ws, float (&acc)[16][4], uint32_t sb,
                                                         uint32_t full, uint32_t empty, int wgi, int tok, int row0,
                                                         float *wsm) {
    typename wg_kc_acc<I8>::t tmp[16][4];
    float fx[2], nx[2], nw[I8 == 3 ? 2 : 1];
#pragma unroll
    for (int i = 0; i < 16; i++) tmp[i][0] = tmp[i][1] = tmp[i][2] = tmp[i][3] = 0;
    fa_reg_fence(tmp);
    wg_kc_prefetch<I8 == 3 ? 2 : 1>(ws, 0, tok, row0, threadIdx.x & 127, nx, nw);
    for (int b0 = 0; b0 < ws.nsb; b0 += U)
        wg_kc_unit<KS, U, NS, STAGE, I8>(ws, acc, tmp, fx, nx, nw, sb, full, empty, b0 / U * (U * KS / 4), b0, wgi,
                                         tok, row0, wsm);
}
#endif

#endif
