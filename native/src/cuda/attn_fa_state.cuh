/*
 * cuda/attn_fa_state.cuh: the running softmax of a thread's two (query, head)
 * rows in the prefill attention kernels (attn_fa_kernel.cuh, attn_fa_ws.cuh),
 * and its trips to and from attn.cu's state.
 *
 * A thread holds rows g and g + 8 of its warp's 16 (g = lane >> 2; the
 * mma.sync / wgmma accumulator layout) and, for each, m (the running max in
 * the state's scaled domain), lp (the sum of the probabilities, as partial
 * sums over the quad of lanes sharing the row), ofac (o's factor at the next
 * tile: the stored l while o is normalised, else 1) and the stored l. At the
 * end of every chunk l is summed over the quad and o normalised, so that the
 * values at each chunk boundary are the stored form (attn_fa_kernel.cuh's
 * header: why this keeps a split of the range into calls invisible).
 */
#ifndef LKV_CUDA_ATTN_FA_STATE_CUH
#define LKV_CUDA_ATTN_FA_STATE_CUH

#include "attn_fa_ptx.cuh"
#include "common.cuh"

template <int D> struct fa_state {
    static constexpr int NO = D / 8;   /* the thread's 8-column blocks of o */
    float *sp[2];                      /* the rows' state (NULL: padding rows) */
    float m[2], lsum[2], ofac[2], lp[2];
    bool changed[2], vis[2];           /* a tile reached the row; the current chunk did */

    /* the rows of block row f0 + 16 warp + g (+ 8) from st, o as stored */
    __device__ __forceinline__ void load(float *st, const lkv_attn_desc &d, int f0, int warp, int lane, int G,
                                         int kh, float (&o)[NO][4]) {
        const int n_rows = d.n_q * G;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int f = f0 + 16 * warp + (lane >> 2) + 8 * e;
            sp[e] = f < n_rows ? st + ((size_t)(f / G) * d.n_head + kh * G + f % G) * (D + 2) : NULL;
            m[e] = sp[e] ? sp[e][0] : -INFINITY;
            lsum[e] = sp[e] ? sp[e][1] : 0.f;
            ofac[e] = lsum[e];                          /* o is normalised: the next tile scales it by l */
            lp[e] = (lane & 3) == 0 ? lsum[e] : 0.f;    /* l as partial sums over the quad */
            changed[e] = vis[e] = false;
#pragma unroll
            for (int n = 0; n < NO; n++) {
                const float2 v = sp[e] ? *(const float2 *)(sp[e] + 2 + 8 * n + 2 * (lane & 3)) : make_float2(0.f, 0.f);
                o[n][2 * e] = v.x;
                o[n][2 * e + 1] = v.y;
            }
        }
    }

    /* a tile's raw row maxima (this thread's columns): the new running max; ml, the
     * exponent offset of p = 2^(s c2 - ml); fac, o's factor before this tile's P V.
     * A tile that shows a row nothing (max -inf) leaves every value of the row as it
     * is (p = 2^-inf = 0), so a call that reaches a row with nothing, which does not
     * store it, equals one that ran on through such tiles */
    __device__ __forceinline__ void step(float (&mx)[2], float scale, float (&ml)[2], float (&fac)[2]) {
        const float L2E = 1.4426950408889634f;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
            ml[e] = 0.f;
            fac[e] = 1.f;
            if (mx[e] != -INFINITY) {
                changed[e] = vis[e] = true;
                /* the running max in the state's (scaled) domain: scale > 0, rounding is monotonic */
                const float mn = fmaxf(m[e], __fmul_rn(mx[e], scale));
                ml[e] = __fmul_rn(mn, L2E);
                const float alpha = fa_ex2(__fsub_rn(__fmul_rn(m[e], L2E), ml[e]));   /* 1 while m holds; 0 from -inf */
                fac[e] = __fmul_rn(alpha, ofac[e]);
                ofac[e] = 1.f;
                lp[e] = __fmul_rn(lp[e], alpha);
                m[e] = mn;
            }
        }
    }

    /* a tile's probabilities p (f32, the accumulator layout) rounded to V's operand type
     * (BF: bf16, else f16) into pa, the A fragments of P V (n-tiles 2k and 2k + 1 make
     * k-step k); lp sums the rounded values */
    template <bool BF, int NB>
    __device__ __forceinline__ void take_p(const float (&p)[NB][4], uint32_t (&pa)[NB / 2][4]) {
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int n = 0; n < NB; n++) {
            const uint32_t u01 = fa_pack<BF>(p[n][0], p[n][1]), u23 = fa_pack<BF>(p[n][2], p[n][3]);
            const float2 f01 = fa_unpack<BF>(u01), f23 = fa_unpack<BF>(u23);
            rs[0] = __fadd_rn(rs[0], __fadd_rn(f01.x, f01.y));
            rs[1] = __fadd_rn(rs[1], __fadd_rn(f23.x, f23.y));
            pa[n >> 1][2 * (n & 1)] = u01;
            pa[n >> 1][2 * (n & 1) + 1] = u23;
        }
        lp[0] = __fadd_rn(lp[0], rs[0]);
        lp[1] = __fadd_rn(lp[1], rs[1]);
    }

    /* the chunk is complete: l over the quad (the same bits in all 4 lanes) becomes the
     * stored l; apply[e]: o's row e is to be multiplied by il[e] (1 / l) now, where the
     * chunk reached the row and l > 0 */
    __device__ __forceinline__ void chunk_end(int lane, float (&il)[2], bool (&apply)[2]) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float l = __fadd_rn(lp[e], __shfl_xor_sync(0xffffffffu, lp[e], 1));
            l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
            il[e] = 1.f;
            apply[e] = false;
            if (!vis[e]) continue;   /* the chunk showed the row nothing: unchanged */
            vis[e] = false;
            if (l > 0.f) {
                il[e] = __frcp_rn(l);
                apply[e] = true;
            }
            lsum[e] = l;
            ofac[e] = l;
            lp[e] = (lane & 3) == 0 ? l : 0.f;
        }
    }

    /* each row some tile reached back to st */
    __device__ __forceinline__ void store(int lane, const float (&o)[NO][4]) const {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (!sp[e] || !changed[e]) continue;
#pragma unroll
            for (int n = 0; n < NO; n++)
                *(float2 *)(sp[e] + 2 + 8 * n + 2 * (lane & 3)) = make_float2(o[n][2 * e], o[n][2 * e + 1]);
            if ((lane & 3) == 0) { sp[e][0] = m[e]; sp[e][1] = lsum[e]; }
        }
    }
};

#endif
