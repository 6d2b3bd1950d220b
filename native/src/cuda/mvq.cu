/*
 * cuda/mvq.cu: mat-vec for 1 to 16 tokens (decode, several sequences' step,
 * a draft's verification) on the k-quants (q2_K .. q6_K), iq4_xs and the
 * grid i-quants, with int8 dot products on the activations' 8-bit codes.
 *
 * Why: matvec_q8.cu, which had these types before, gives each lane one
 * 8-element piece at a time: two 4-byte weight loads, the super-block's
 * scale bytes, d and dmin again for every piece, and the activations'
 * 8 bytes, so a q4_K row cost about 6 load instructions per 8 weights, and
 * decode of the 8B shape ran at 187 t/s against q4_0's 295 (H100, issue 41).
 * Here a lane takes a unit of 64 elements of one super-block
 * (mvq_units.cuh): the unit's weight bytes in 2 or 3 wide loads, its scales
 * once, decoded to signed bytes once for all the call's tokens, then per
 * token 4 16-byte loads of the codes and 16 dp4a.
 *
 * Work split: one warp per R output rows (1, 2 or 4: mq_rows_per_warp), its
 * lanes on units lane, lane + 32, ... of each (4 consecutive lanes read one
 * super-block: 144 consecutive bytes for q4_K), 4 warps a block; a unit's
 * activations are loaded once for the R rows. With R = 1 the next unit's
 * weights are loaded before the current one is multiplied; the first units
 * are loaded before the previous kernel is waited for (pdl.cuh). The warp's
 * sums by shuffles, one per row and token. q4_K / q5_K read d, dmin and the
 * scales in one 16-byte load, iq4_xs d and its scales in one 8-byte load.
 *
 * Activations: what the chooser quantized for the type (matmul.cuh,
 * lkv_act_format): the CPU's q8_K codes in 32-groups (xd the group's d, xs
 * d times its code sum), so the integer products are the CPU's and only the
 * order of the float sums differs (test_ops: relative 1e-5 against the
 * CPU's matmul).
 */
#include "matmul.cuh"
#include "mvq_units.cuh"
#include "pdl.cuh"
#include "tune_mvq.h"

enum { MQ_WARPS = 4 };

/* one token's activations for a unit (their places: the unit's e[s], the same
 * in every row): the 4 sub-blocks' 16 codes, their 32-groups' d and, for
 * MQ_GROUP, the groups' xs (xq, xd, xs at the super-block's first element /
 * group) */
struct mq_x {
    uint4 q[4];
    float d[4], s[2];
};

template <int T>
MQ_HD void mq_xload(const mq_unit &w, const int8_t *__restrict__ xq,
                                                const float *__restrict__ xd, const float *__restrict__ xs,
                                                mq_x &x) {
MQ_UNROLL
    for (int s = 0; s < 4; s++) {
        x.q[s] = mq_ldg((const uint4 *)(xq + w.e[s]));
        x.d[s] = mq_ldg(xd + (w.e[s] >> 5));
    }
    if constexpr (mq_min<T>::v == MQ_GROUP) {
        x.s[0] = mq_ldg(xs + (w.e[0] >> 5));
        x.s[1] = mq_ldg(xs + (w.e[2] >> 5));
    }
}

/* unit w against one token's activations x */
template <int T>
MQ_HD float mq_dot(const mq_unit &w, const mq_x &x) {
    float acc = 0.f;
MQ_UNROLL
    for (int s = 0; s < 4; s++) {
        int p = mq_dp4a((int)w.q[4 * s], (int)x.q[s].x, 0);
        p = mq_dp4a((int)w.q[4 * s + 1], (int)x.q[s].y, p);
        p = mq_dp4a((int)w.q[4 * s + 2], (int)x.q[s].z, p);
        p = mq_dp4a((int)w.q[4 * s + 3], (int)x.q[s].w, p);
        acc += (w.d[s] * x.d[s]) * (float)p;
        if constexpr (mq_min<T>::v == MQ_SUB) {
            int c = mq_dp4a((int)x.q[s].x, 0x01010101, 0);
            c = mq_dp4a((int)x.q[s].y, 0x01010101, c);
            c = mq_dp4a((int)x.q[s].z, 0x01010101, c);
            c = mq_dp4a((int)x.q[s].w, 0x01010101, c);
            acc += (w.m[s] * x.d[s]) * (float)c;
        }
    }
    if constexpr (mq_min<T>::v == MQ_GROUP) acc += w.m[0] * x.s[0] + w.m[2] * x.s[1];
    return acc;
}

/* one lane's sums over R rows (row[k]: their first bytes; past the end: the
 * last row again, not stored) and the call's n tokens: the lane takes units
 * lane, lane + 32, ... of every row, so the activations of a unit are loaded
 * once for the R rows, and R units' weight loads are in flight at once; R = 1
 * loads the next unit before it multiplies the current one (R > 1 has its R
 * loads for that). The first units are loaded before the previous kernel is
 * waited for (pdl.cuh). __host__ too: tests/cuda/emu_mvq.cu runs it. */
template <int T, int NT, int R>
MQ_HD void mq_lane(const uint8_t *const (&row)[R], int lane, const int8_t *__restrict__ xq,
                   const float *__restrict__ xd, const float *__restrict__ xs, int cols, int n,
                   float (&acc)[R][NT]) {
    constexpr int B = cblk<T>::bytes;
    const int nu = cols / 64, ng = cols / 32;   /* units and 32-groups of a row */
MQ_UNROLL
    for (int k = 0; k < R; k++)
MQ_UNROLL
        for (int t = 0; t < NT; t++) acc[k][t] = 0.f;
    mq_unit w[R];
    int i = lane;
    if (i < nu)
MQ_UNROLL
        for (int k = 0; k < R; k++) mq_load<T>(row[k] + (size_t)(i >> 2) * B, i & 3, w[k]);
#ifdef __CUDA_ARCH__
    pdl_wait();
#endif
MQ_NO_UNROLL
    while (i < nu) {
        const int sb = i >> 2;
        const int i2 = i + 32;
        mq_unit nx;
        if constexpr (R == 1)
            if (i2 < nu) mq_load<T>(row[0] + (size_t)(i2 >> 2) * B, i2 & 3, nx);
MQ_UNROLL
        for (int t = 0; t < NT; t++) {
            if (t >= n) break;
            mq_x x;
            mq_xload<T>(w[0], xq + (size_t)t * cols + 256 * sb, xd + (size_t)t * ng + 8 * sb,
                        xs + (size_t)t * ng + 8 * sb, x);
MQ_UNROLL
            for (int k = 0; k < R; k++) acc[k][t] += mq_dot<T>(w[k], x);
        }
        if constexpr (R == 1) {
            w[0] = nx;
        } else if (i2 < nu) {
MQ_UNROLL
            for (int k = 0; k < R; k++) mq_load<T>(row[k] + (size_t)(i2 >> 2) * B, i2 & 3, w[k]);
        }
        i = i2;
    }
}

/* R rows a warp (rows r0 .. r0 + R - 1), the lanes' sums by shuffles, one per
 * row and token */
template <int T, int NT, int R>
__global__ void __launch_bounds__(MQ_WARPS * 32)
mvq_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
           const float *__restrict__ xs, int cols, int n) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j];
    const int r0 = ((blockIdx.x - ms.tile0[j]) * MQ_WARPS + warp) * R;
    pdl_trigger();
    if (r0 >= rows) {
        pdl_wait();
        return;
    }
    const uint8_t *row[R];
#pragma unroll
    for (int k = 0; k < R; k++) row[k] = ms.w[j] + (size_t)min(r0 + k, rows - 1) * ms.row_bytes[j];
    float acc[R][NT];
    mq_lane<T, NT, R>(row, lane, xq, xd, xs, cols, n, acc);
#pragma unroll
    for (int k = 0; k < R; k++) {
        float *out = ms.out[j] + r0 + k;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n) break;
            const float s = lkv_warp_sum(acc[k][t]);
            if (lane == 0 && r0 + k < rows) out[(size_t)t * rows] = s;
        }
    }
}

// ---------------------------------------------------------------- launcher

template <int T> struct mq_ok {
    enum { v = cblk<T>::qk == 256 && has_i8<T>::v };
};

int lkv_cuda_mvq_rows;

/* the rows a warp without the override (a build may choose: -DLKV_MVQ_ROWS=2) */
#ifndef LKV_MVQ_ROWS
#define LKV_MVQ_ROWS 1
#endif

/* rows a warp: tune_mvq.h's 1, 2 or 4, else the build's LKV_MVQ_ROWS; 4 is 2
 * above 2 tokens. R rows a warp read the activations once for R rows and keep
 * R units' loads in flight, at R times fewer warps (which wins: not yet timed). */
static int mq_rows_per_warp(int n) {
    int f = lkv_cuda_mvq_rows;
    if (f != 1 && f != 2 && f != 4) f = LKV_MVQ_ROWS;
    return n > 2 && f == 4 ? 2 : f;
}

template <int T, int NT, int R>
static void mq_launch(lkv_bctx *b, mm_set &ms, int cols, int n) {
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MQ_WARPS * R);
    lkv_launch(b, mvq_kernel<T, NT, R>, ms.tile0[ms.n_w], MQ_WARPS * 32, 0, ms, (const int8_t *)b->xq,
               (const float *)b->xd, (const float *)b->xs, cols, n);
}

template <int T, int NT>
static void mq_launch_r(lkv_bctx *b, mm_set &ms, int cols, int n) {
    const int r = mq_rows_per_warp(n);
    if constexpr (NT <= 2) {
        if (r == 4) return mq_launch<T, NT, 4>(b, ms, cols, n);
    }
    if (r >= 2) return mq_launch<T, NT, 2>(b, ms, cols, n);
    mq_launch<T, NT, 1>(b, ms, cols, n);
}

template <int T>
static bool mq_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (mq_ok<T>::v) {
        if (n <= 1) mq_launch_r<T, 1>(b, ms, cols, n);
        else if (n <= 2) mq_launch_r<T, 2>(b, ms, cols, n);
        else if (n <= 4) mq_launch_r<T, 4>(b, ms, cols, n);
        else if (n <= 8) mq_launch_r<T, 8>(b, ms, cols, n);
        else mq_launch_r<T, 16>(b, ms, cols, n);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

/* the rows' alignment the unit's loads need (mvq_units.cuh) */
template <int T> static constexpr int mq_align() {
    return T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K ? 16 : T == LKV_TYPE_IQ4_XS ? 8 : T == LKV_TYPE_Q2_K ? 4 : 2;
}

bool lkv_cuda_mvq_takes(int type, const mm_set &ms) {
    uintptr_t a = 0;
    for (int i = 0; i < ms.n_w; i++) a |= (uintptr_t)ms.w[i] | (uintptr_t)ms.row_bytes[i];
    switch (type) {
#define X(T) case T: return mq_ok<T>::v && (a & (mq_align<T>() - 1)) == 0;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}

bool lkv_cuda_mvq(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (n < 1 || n > MQ_MAX_TOK || cols % 256 || !lkv_cuda_mvq_takes(type, ms)) return false;
    switch (type) {
#define X(T) case T: return mq_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
