/*
 * cuda/matvec_f32.cu: decode mat-vec (n <= MV_MAX_TOK tokens) on f32
 * activations, for every weight type: the kernel for the float weight types
 * (f32, f16, bf16) and the generic one where an integer kernel declines a call
 * (choose_matmul.cu).
 *
 * Memory-bound: each warp owns MV_ROWS weight rows; lane l takes 8-element
 * pieces l, l+32, ... (dq8, quant.cuh), so a warp reads a contiguous span of
 * each row and of the activations per step; it dequantizes in registers and
 * multiplies with every token's f32 activations, so each weight byte is read
 * once and each activation load serves MV_ROWS rows. Accumulation is f32.
 * For f16 and bf16 weights the activations are first rounded to the weight's
 * type, as the CPU rounds them for its dot (lkv_dot_round), so the products
 * are the CPU's and only the order of the adds differs; for the quantized
 * types this kernel serves (iq1_s, iq1_m, a declined call) they are not
 * rounded to 8 bits as the CPU's are: the results differ by that rounding.
 */
#include "matmul.cuh"

// ---------------------------------------------------------------- matvec


template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_kernel(const __grid_constant__ mm_set ms, const float *__restrict__ x, int cols, int n) {
    const int lane = threadIdx.x & 31;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j];
    const int r0 = ((blockIdx.x - ms.tile0[j]) * MV_WARPS + (threadIdx.x >> 5)) * MV_ROWS;
    if (r0 >= rows) return;
    const int ne = cols / 8;   /* 8-element pieces per row: lane takes every 32nd */
    const uint8_t *wr[MV_ROWS];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++) wr[r] = ms.w[j] + (size_t)min(r0 + r, rows - 1) * ms.row_bytes[j];
    float acc[MV_ROWS][MV_MAX_TOK];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) acc[r][t] = 0.f;

#pragma unroll 2
    for (int e = lane; e < ne; e += 32) {
        float wv[MV_ROWS][8];
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) dq8<T>(wr[r], e, wv[r]);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
            const float4 *xp = (const float4 *)(x + (size_t)t * cols + 8 * e);
            const float4 a = __ldg(xp), c = __ldg(xp + 1);
            const float xv[8] = {lkv_dot_round<T>(a.x), lkv_dot_round<T>(a.y), lkv_dot_round<T>(a.z),
                                 lkv_dot_round<T>(a.w), lkv_dot_round<T>(c.x), lkv_dot_round<T>(c.y),
                                 lkv_dot_round<T>(c.z), lkv_dot_round<T>(c.w)};
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++)
                acc[r][t] += wv[r][0] * xv[0] + wv[r][1] * xv[1] + wv[r][2] * xv[2] + wv[r][3] * xv[3] +
                             wv[r][4] * xv[4] + wv[r][5] * xv[5] + wv[r][6] * xv[6] + wv[r][7] * xv[7];
        }
    }
    float *out = ms.out[j];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) {
        if (t >= n) break;
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            const float sum = lkv_warp_sum(acc[r][t]);
            if (lane == 0 && r0 + r < rows) out[(size_t)t * rows + r0 + r] = sum;
        }
    }
}

// ---------------------------------------------------------------- launcher

template <int T>
static void matvec_run(lkv_bctx *b, mm_set &ms, const float *x, int cols, int n) {
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MV_WARPS * MV_ROWS);
    matvec_kernel<T><<<ms.tile0[ms.n_w], MV_WARPS * 32, 0, b->stream>>>(ms, x, cols, n);
    LKV_CUDA_LAUNCHED(b, "matmul (matvec_f32)");
}

bool lkv_cuda_matvec_f32(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n) {
    if (n < 1 || n > MV_MAX_TOK) return false;
    switch (type) {
#define X(T) case T: matvec_run<T>(b, ms, x, cols, n); return true;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
