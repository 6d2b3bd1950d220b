/*
 * cuda/gemm_wg_kcodes.cuh: gemm_wg's operands for the k-quants (q2_K ..
 * q6_K): the integers the CPU multiplies, so that the tensor cores' products
 * are the CPU's and only the order of the float adds differs.
 *
 * The CPU's dot of a k-quant row with an activation row (quant/dot_kquants.c)
 * is, per super-block of 256, dy d sum_e(sc_e q_e p_e) - dy dmin
 * sum_k(mn_k bsum_k): p_e the activation's q8_K codes, dy their scale,
 * bsum_k the sums of its 16 groups of 16 codes, sc / mn the 16-group's
 * integer scale and min (mins: q2_K, q4_K, q5_K), q_e the weight codes
 * (q3_K, q6_K: signed). Each of these integers is exact in f16 (|sc q| <=
 * 1953 for q5_K, 128 for q3_K, |bsum_k| <= 2032) but q6_K's |sc q|, up to
 * 4096, which f16 rounds to even above 2048: q6_K's codes go in two halves,
 * 32 (v / 32) and the remainder (|v| < 32), against the activation codes
 * twice (512 columns a super-block). The operands of super-block b:
 *   - activations: its 256 codes (q6_K: twice), then (types with mins) 32
 *     columns bsum_0, bsum_0, bsum_1, bsum_1, ..; its scale dy in xsc[b][token];
 *   - weights: sc_e q_e 2^p (q6_K: its two halves), then r_k^hi, r_k^lo for
 *     k = 0..15, the two f16 halves of r_k = -dmin mn_k 2^p / D (D = d, or
 *     dmin where d is 0), so that bsum_k (r_k^hi + r_k^lo) is the min term
 *     to 2^-22; the scale
 *     D 2^-p in wsc[b][row]. p <= 4 keeps the codes below 2^15 and
 *     |r_k| below 2^14 (f16's range); a power of two is exact on both sides.
 * gemm_wg runs a super-block's products (S = 16, 18 or 32 k16 steps) into a fresh
 * accumulator and adds it to the result times dy D 2^-p: within the
 * super-block every product and partial sum of codes is an integer below
 * 2^24, exact in the f32 accumulator.
 *
 * Layout: gemm_wg.cu's tiles (groups of 8 columns, 64 columns a tile);
 * super-block b is groups [G b, G b + G) of the extended K (G = 2 S). The
 * super-blocks are padded to an even count (a last one of zeros, scale 0), so
 * that two of them fill whole tiles (8, 9 or 16) and the consumer's schedule
 * below is the same for every pair.
 *
 * The consumer (wg_consume_kcodes) folds a super-block's accumulator into the
 * result after waiting for all of its products (a drain per 16, 18 or 32 k16
 * steps, as the two-level accumulation of FP8 GEMMs does per block; pp512 of
 * the 8B shape, q4_K, H100: 35.1 ms a step, 33.2 with the fold left out).
 * Every branch of its schedule is resolved at compile time (a pair of
 * super-blocks, 8, 9 or 16 tiles, unrolled): with the fold in a
 * data-dependent branch, or with a second accumulator folded while the
 * other's products ran, ptxas serialized the wgmmas (its C7520 / C7514). The
 * weights' scales of a super-block go to shared memory (one per thread of
 * the warpgroup; a named barrier per warpgroup before the fold), the
 * activations' to registers, both loaded a super-block ahead.
 */
#ifndef LKV_CUDA_GEMM_WG_KCODES_CUH
#define LKV_CUDA_GEMM_WG_KCODES_CUH

#include "quant_i8.cuh"

template <int T> struct wg_kq {
    enum {
        on = T == LKV_TYPE_Q2_K || T == LKV_TYPE_Q3_K || T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K ||
             T == LKV_TYPE_Q6_K,
        /* 8-bit operands, k32 steps: 1 q3_K (its codes once), 2 q6_K (in two halves) */
        I8 = T == LKV_TYPE_Q3_K ? 1 : T == LKV_TYPE_Q6_K ? 2 : 0,
        /* steps per super-block: 256 codes (k16), + 32 mins columns; q3_K's
         * 256 (k32), q6_K's two halves of 256 (k32) */
        S = has_min<T>::v ? 18 : T == LKV_TYPE_Q3_K ? 8 : 16,
        G = 2 * S                      /* 16-byte pieces per super-block and row */
    };
};

/* super-blocks padded to an even count, and their tiles of 64 columns */
static inline int wg_kq_pad(int nsb) { return nsb + (nsb & 1); }
static inline int wg_kq_tiles(int nsb_pad, int S) { return nsb_pad * S / 4; }

/* x (n, 256 nsb) f32 -> the activation operand (n_pad rows, tiled by WG_BM;
 * nsb_pad super-blocks) and xsc[b * n_pad + row], by the CPU's q8_K rule
 * (gemm_wg.cu's wg_q8k_scale / wg_q8k_code; dy = 1 / iscale); rows n ..
 * n_pad and the padding super-block zeros. One warp a super-block of a row,
 * lane l its group l. */
template <int T>
static __global__ void wg_x_kcodes(const float *__restrict__ x, uint8_t *__restrict__ y, float *__restrict__ xsc,
                                   int n, int nsb, int nsb_pad, int n_pad, int nkt) {
    const size_t total = (size_t)n_pad * nsb_pad * 32;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t w = i >> 5;
        const int r = (int)(w / nsb_pad), b = (int)(w % nsb_pad), lane = (int)(i & 31);
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < n && b < nsb) wg_load8(x + (size_t)r * nsb * 256 + 256 * b + 8 * lane, v);
        float iscale, d, c[8];
        const bool nz = wg_q8k_scale(v, lane, iscale, d);
        int sum = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int q = nz ? wg_q8k_code(v[k], iscale) : 0;
            c[k] = (float)q;
            sum += q;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);   /* bsum of the lane's 16-group, lane / 2 */
        constexpr int S = wg_kq<T>::S, G = wg_kq<T>::G;
        if constexpr (wg_kq<T>::I8) {
            /* 16 codes a piece (lanes l and l + 1); q6_K: the super-block's 256 twice */
            uint32_t p[2] = {0u, 0u};
#pragma unroll
            for (int k = 0; k < 8; k++) p[k >> 2] |= ((uint32_t)(int)c[k] & 0xFFu) << (8 * (k & 3));
            const uint32_t o0 = __shfl_xor_sync(0xffffffffu, p[0], 1), o1 = __shfl_xor_sync(0xffffffffu, p[1], 1);
            if (!(lane & 1)) {
                const uint4 v = make_uint4(p[0], p[1], o0, o1);
                *(uint4 *)(y + wg_tiled(r, G * b + lane / 2, WG_BM, nkt)) = v;
                if constexpr (wg_kq<T>::I8 == 2) *(uint4 *)(y + wg_tiled(r, G * b + 16 + lane / 2, WG_BM, nkt)) = v;
            }
        } else {
            *(uint4 *)(y + wg_tiled(r, G * b + lane, WG_BM, nkt)) = lkv_f16x8(c);
        }
        if constexpr (S == 18) {
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

/* rows [0, rows) of a k-quant weight (row_bytes apart, 256 nsb columns) ->
 * the weight operand (rows_pad rows, tiled by R; nsb_pad super-blocks) and
 * wsc[b * ldw + row]; rows past `rows` and the padding super-block zeros.
 * Threads take 8-column groups of the extended K in wg_item's order (a warp
 * writes runs of 128 bytes); each derives its super-block's p
 * from d, dmin and the largest possible min (63, q2_K 15), an upper bound of
 * the mins' r_k that keeps them in range. */
template <int T>
static __global__ void wg_w_kcodes(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int nsb,
                                   int rows_pad, int R, int nkt, uint8_t *__restrict__ dst, float *__restrict__ wsc,
                                   int ldw) {
    constexpr int S = wg_kq<T>::S, G = wg_kq<T>::G, MN_MAX = T == LKV_TYPE_Q2_K ? 15 : 63;
    const size_t total = (size_t)rows_pad * nkt * 8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int r, g;
        wg_item(i, R, nkt, r, g);
        const int b = g / G, c = g - b * G;
        if constexpr (wg_kq<T>::I8) {
            /* piece c: the 16-group m = c % 16; q3_K: -sc q (in [-128, 124]; the
             * scale -d), q6_K: sc q = 64 hi + lo, hi for c < 16, lo after */
            uint32_t p[4] = {0u, 0u, 0u, 0u};
            float scale = 0.f;
            if (r < rows && b < nsb) {
                const uint8_t *row = w + (size_t)r * row_bytes;
                const int e = 32 * b + 2 * (c & 15);   /* its first 8-piece */
                int sc, mn;
                float d, dmin;
                kq_scales<T>(row, e, sc, mn, d, dmin);
                if (d != 0.f) {
                    uint32_t q8[4];
                    float dw, mw;
                    dq8i<T>(row, e, q8[0], q8[1], dw, mw);
                    dq8i<T>(row, e + 1, q8[2], q8[3], dw, mw);
#pragma unroll
                    for (int k = 0; k < 16; k++) {
                        const int v = sc * (int)(int8_t)(q8[k >> 2] >> (8 * (k & 3))), hi = v / 64;
                        const int o = wg_kq<T>::I8 == 1 ? -v : c < 16 ? hi : v - 64 * hi;
                        p[k >> 2] |= ((uint32_t)o & 0xFFu) << (8 * (k & 3));
                    }
                    scale = wg_kq<T>::I8 == 1 ? -d : d;
                }
            }
            *(uint4 *)(dst + wg_tiled(r, g, R, nkt)) = make_uint4(p[0], p[1], p[2], p[3]);
            if (c == 0) wsc[(size_t)b * ldw + r] = scale;
            continue;
        }
        float y[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, scale = 0.f;
        if (r < rows && b < nsb) {
            const uint8_t *row = w + (size_t)r * row_bytes;
            int sc, mn;
            float d, dmin;
            const int e = 32 * b + (c & 31);   /* the piece of a code group */
            kq_scales<T>(row, e, sc, mn, d, dmin);
            const float D = d != 0.f ? d : dmin;
            int p = 0;
            if constexpr (S == 18) {
                const float big = D != 0.f ? fabsf(dmin * (float)MN_MAX / D) : 0.f;
                if (big > 0.f && big <= 3.0e38f) p = min(4, 13 - ilogbf(big));
            }
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
 * thread's tokens (tok, tok + 8), the weights' for row row0 + ti, which the
 * super-block's start stores to shared memory for the whole warpgroup */
static __device__ __forceinline__ void wg_kc_prefetch(const wg_set &ws, int b, int tok, int row0, int ti,
                                                      float (&nx)[2], float &nw) {
    b = min(b, ws.nsb - 1);
    const float *xs = ws.xsc + (size_t)b * ws.ldx + tok;
    nx[0] = xs[0];
    nx[1] = xs[8];
    nw = ws.wsc[(size_t)b * ws.ldw + row0 + ti];
}

/* super-blocks b0 and b0 + 1: tiles t0 .. t0 + KS / 2 of the ring, each
 * super-block's products into tmp, folded into acc after its last step
 * (wait for every product, the drain). At a super-block's start its scales,
 * loaded during the one before (nx, nw), go to fx and to wsm's buffer b % 2
 * (rewritten at b + 2, after every thread passed the barrier of b + 1's fold,
 * so after its reads of b's); two steps in, the next one's are loaded. */
template <int KS, int NS, int STAGE, int I8>
static __device__ __forceinline__ void wg_kc_pair(const wg_set &ws, float (&acc)[16][4],
                                                  typename wg_kc_acc<I8>::t (&tmp)[16][4],
                                                  float (&fx)[2], float (&nx)[2], float &nw, uint32_t sb,
                                                  uint32_t full, uint32_t empty, int t0, int b0, int wgi, int tok,
                                                  int row0, float *wsm) {
    constexpr int NT = KS / 2;
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
            if (us == 0) {
                fx[0] = nx[0];
                fx[1] = nx[1];
                wsm[(b & 1) * 128 + ti] = nw;
            }
            const uint64_t da = fa_desc(st + wgi * 64 * 16 + kk * 2 * (WG_BM * 16), WG_BM * 16, 128);
            const uint64_t db = fa_desc(st + WG_XTILE + kk * 2 * (128 * 16), 128 * 16, 128);
            if constexpr (I8) fa_wgmma_ss_n128_s8(tmp, da, db, us);   /* us == 0: tmp = the product */
            else fa_wgmma_ss_n128<false>(tmp, da, db, us);
            if (us == 2) wg_kc_prefetch(ws, b + 1, tok, row0, ti, nx, nw);
            if (I8 == 2 && us == KS / 2 - 1) {
                /* q6_K: the high halves' sum times 64, then the low halves' added to it */
                fa_wg_commit();
                fa_wg_wait0();
                fa_reg_fence(tmp);
#pragma unroll
                for (int i = 0; i < 16; i++)
#pragma unroll
                    for (int k = 0; k < 4; k++) tmp[i][k] = (int)((unsigned)tmp[i][k] << 6);
                fa_reg_fence(tmp);
                fa_wg_fence();
            }
#ifdef LKV_WG_NODRAIN
            if (false) {
#else
            if (us == KS - 1) {
#endif
                fa_wg_commit();
                fa_wg_wait0();
                wg_kc_fold(acc, tmp, fx, wsm + (b & 1) * 128 + 2 * q, wgi);
                fa_wg_fence();
            }
        }
        fa_wg_commit();
        fa_wg_wait1();   /* the group of tile t - 1 is done: its stage may be refilled */
        if (t > 0) mb_arrive(empty + 8 * ((t - 1) % NS));
    }
}

/* the consumer loop over ws.nsb (even) super-blocks; wsm: this warpgroup's
 * 2 x 128 weight scales in shared memory */
template <int KS, int NS, int STAGE, int I8>
static __device__ __forceinline__ void wg_consume_kcodes(const wg_set &ws, float (&acc)[16][4], uint32_t sb,
                                                         uint32_t full, uint32_t empty, int wgi, int tok, int row0,
                                                         float *wsm) {
    typename wg_kc_acc<I8>::t tmp[16][4];
    float fx[2], nx[2], nw;
#pragma unroll
    for (int i = 0; i < 16; i++) tmp[i][0] = tmp[i][1] = tmp[i][2] = tmp[i][3] = 0;
    fa_reg_fence(tmp);
    wg_kc_prefetch(ws, 0, tok, row0, threadIdx.x & 127, nx, nw);
    for (int b0 = 0; b0 < ws.nsb; b0 += 2)
        wg_kc_pair<KS, NS, STAGE, I8>(ws, acc, tmp, fx, nx, nw, sb, full, empty, b0 / 2 * (KS / 2), b0, wgi, tok,
                                      row0, wsm);
}
#endif

#endif
