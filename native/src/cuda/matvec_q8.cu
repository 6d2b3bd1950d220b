/*
 * cuda/matvec_q8.cu: decode mat-vec with 8-bit activations and integer dots.
 *
 * The f32 mat-vec (matmul.cu) converts every weight to float and spends
 * about 8 conversions, masks and FMAs per weight and token: arithmetic-bound
 * at ~0.7 TB/s (docs/performance.md). Here the activations (n <= MV_MAX_TOK rows) are
 * first quantized once per matmul call to 8 bits in blocks of 32 (scale
 * dx = max|x| / 127, round to nearest: the CPU backend's activation rounding),
 * then each 8-weight piece is unpacked to signed bytes (quant_i8.cuh) and
 * multiplied with two dp4a per token. Layout and work split are the f32
 * kernel's: warp = R rows, lane l takes 8-element pieces l, l+32, ... so a
 * warp reads contiguous spans of weights and activations.
 *
 * Results differ from the f32 kernel by the activation rounding (relative
 * ~4e-3, like the CPU's). choose_matmul.cu gives it the k-quants and the
 * i-quants with 8-bit codes (all but iq1_s / iq1_m: quant_i8.cuh); the legacy
 * types (q4_0 ... iq4_nl) go to mvx.cu, which reproduces the CPU's float sums
 * bit for bit and is faster (353 against 248 t/s at depth 0, 8B shape, H200).
 * This file also holds the activation quantization every integer kernel reads.
 *
 * Work split: the 4 warps of a block share R = 2 rows and split each row's
 * pieces (lane l of warp k takes pieces 32k + l, +128, ...), so there are 4x
 * as many warps in flight as rows/2: a mat-vec is latency-bound long before
 * it is ALU-bound (H200 run 1: one warp per 2 rows, 171 t/s at depth 0; 4
 * rows per warp, fewer warps, 135; the variants left with the fifth session).
 */
#include <stdlib.h>
#include <string.h>

#include "exact.cuh"
#include "quant_i8.cuh"
#include "act_quant.cuh"
#include "pdl.cuh"

// ---------------------------------------------------------------- quantize

/* one warp per 32-element block, exactly the CPU's quantize8 (quant/legacy.c):
 * act_quant.cuh's act_q8_warp, which the fused producers use too */
__global__ void quantize_q8_kernel(const float *__restrict__ x, int8_t *__restrict__ xq,
                                   float *__restrict__ xd, float *__restrict__ xs,
                                   int64_t nblocks) {
    pdl_enter();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    act_q8_warp(x[blk * 32 + (threadIdx.x & 31)], true, xq + blk * 32, xd + blk, xs + blk);
}

void lkv_cuda_quantize_act(lkv_bctx *b, const float *x, int n, int cols, int type) {
    if (lkv_act_format(type, cols) == ACT_Q8K && lkv_cuda_quantize_q8k(b, x, n, cols)) return;
    const int64_t nb = (int64_t)n * cols / 32;
    lkv_launch(b, quantize_q8_kernel, lkv_cdiv(nb, 8), 256, 0, x, b->xq, b->xd, b->xs, nb);
    LKV_CUDA_LAUNCHED(b, "matmul: quantize activations");
}

// ---------------------------------------------------------------- mat-vec

/* S = warps sharing the same R rows (1, or MV_WARPS: the block's warps split
 * each row's pieces and add their sums through shared memory in warp order) */
template <int T, int R, int S>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_q8_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq,
                 const float *__restrict__ xd, const float *__restrict__ xs, int cols, int n) {
    static_assert(S == 1 || S == MV_WARPS, "S: 1 or the block's warps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j];
    const int r0 = ((blockIdx.x - ms.tile0[j]) * (MV_WARPS / S) + warp / S) * R;
    if (r0 >= rows) return;   /* S > 1: the whole block leaves together */
    const int ks = warp % S;
    const int ne = cols / 8, ng = cols / 32;
    const uint8_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = ms.w[j] + (size_t)min(r0 + r, rows - 1) * ms.row_bytes[j];
    float acc[R][MV_MAX_TOK];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) acc[r][t] = 0.f;

#pragma unroll 2
    for (int e = ks * 32 + lane; e < ne; e += 32 * S) {
        uint32_t w0[R], w1[R];
        float dw[R], mw[R];
#pragma unroll
        for (int r = 0; r < R; r++) dq8i<T>(wr[r], e, w0[r], w1[r], dw[r], mw[r]);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
            const uint2 xv = __ldg((const uint2 *)(xq + (size_t)t * cols + 8 * e));
            const float dx = __ldg(xd + (size_t)t * ng + (e >> 2));
            /* sum(codes) * dx of the piece: a quarter of the block's f16 sum term
             * where the minimum is the same for the whole 32-block (as the CPU's
             * q8_1 dot), the piece's own sum for q2_K (a minimum per 16) */
            float sx = 0.f;
            if constexpr (T == LKV_TYPE_Q2_K)
                sx = dx * (float)__dp4a((int)xv.x, 0x01010101, __dp4a((int)xv.y, 0x01010101, 0));
            else if constexpr (has_min<T>::v)
                sx = 0.25f * __ldg(xs + (size_t)t * ng + (e >> 2));
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int si = __dp4a((int)w0[r], (int)xv.x, __dp4a((int)w1[r], (int)xv.y, 0));
                if constexpr (has_min<T>::v) acc[r][t] += (dw[r] * dx) * (float)si + mw[r] * sx;
                else acc[r][t] += (dw[r] * dx) * (float)si;
            }
        }
    }
    float *out = ms.out[j];
    if constexpr (S == 1) {
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float sum = lkv_warp_sum(acc[r][t]);
                if (lane == 0 && r0 + r < rows) out[(size_t)t * rows + r0 + r] = sum;
            }
        }
    } else {
        __shared__ float red[S][R][MV_MAX_TOK];
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float sum = lkv_warp_sum(acc[r][t]);
                if (lane == 0) red[ks][r][t] = sum;
            }
        }
        __syncthreads();
        const int tid = threadIdx.x, r = tid % R, t = tid / R;
        if (t < n && r0 + r < rows) {
            float sum = red[0][r][t];
#pragma unroll
            for (int k = 1; k < S; k++) sum += red[k][r][t];
            out[(size_t)t * rows + r0 + r] = sum;
        }
    }
}

// ---------------------------------------------------------------- launcher

template <int T, int R, int S>
static void launch(lkv_bctx *b, mm_set &ms, int cols, int n) {
    constexpr int rows_per_block = MV_WARPS / S * R;
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++)
        ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], rows_per_block);
    matvec_q8_kernel<T, R, S><<<ms.tile0[ms.n_w], MV_WARPS * 32, 0, b->stream>>>(ms, b->xq, b->xd, b->xs,
                                                                                 cols, n);
}

template <int T>
static bool run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (has_i8<T>::v) {
        launch<T, 2, MV_WARPS>(b, ms, cols, n);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_matvec_q8_takes(int type) {
    switch (type) {
#define X(T) case T: return has_i8<T>::v;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}

bool lkv_cuda_matvec_q8(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (n < 1 || n > MV_MAX_TOK) return false;
    bool ok = false;
    switch (type) {
#define X(T) case T: ok = run<T>(b, ms, cols, n); break;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: break;
    }
    if (ok) LKV_CUDA_LAUNCHED(b, "matmul (matvec_q8)");
    return ok;
}
