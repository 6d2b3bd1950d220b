/*
 * cuda/matmul.cu: out (n, rows) = x (n, cols) @ W^T for W in any weight type.
 *
 * Two kernels, chosen by the number of tokens n:
 * - matvec (n <= MV_MAX_TOK, decode): memory-bound. Each warp owns MV_ROWS
 *   weight rows; its lanes walk the rows 32 elements (one dq32 group) at a
 *   time, dequantize in registers and multiply with every token's f32
 *   activations, so each weight byte is read once and each activation load
 *   serves MV_ROWS rows. Accumulation is f32 (unlike the CPU, activations are
 *   not rounded to 8 bits: the results differ from the CPU's by that rounding).
 * - gemm (prefill): tensor cores through WMMA, f16 operands, f32 accumulators.
 *   A block computes a (GM tokens x GN rows) tile; per K step of GK elements it
 *   converts the activation tile to f16 and dequantizes the weight tile
 *   (one dq32 group per thread) into shared memory. f16 rounding of the
 *   operands gives relative errors near 1e-3, the usual price of f16 GEMM.
 */
#include <mma.h>

#include "common.cuh"

using namespace nvcuda;

// ---------------------------------------------------------------- matvec

enum { MV_MAX_TOK = 8, MV_ROWS = 2, MV_WARPS = 4 };

template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
matvec_kernel(float *__restrict__ out, const float *__restrict__ x, const uint8_t *__restrict__ w,
              size_t row_bytes, int rows, int cols, int n) {
    const int lane = threadIdx.x & 31;
    const int r0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * MV_ROWS;
    if (r0 >= rows) return;
    const int ng = cols / 32;
    float acc[MV_ROWS][MV_MAX_TOK];
#pragma unroll
    for (int r = 0; r < MV_ROWS; r++)
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) acc[r][t] = 0.f;

    for (int g = lane; g < ng; g += 32) {
        float wv[MV_ROWS][32];
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            const int row = min(r0 + r, rows - 1);   /* a missing last row repeats; not stored */
            dq32<T>(w + (size_t)row * row_bytes, g, wv[r]);
        }
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
            const float4 *xp = (const float4 *)(x + (size_t)t * cols + 32 * g);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float4 xv = __ldg(xp + i);
#pragma unroll
                for (int r = 0; r < MV_ROWS; r++) {
                    acc[r][t] += wv[r][4 * i] * xv.x + wv[r][4 * i + 1] * xv.y +
                                 wv[r][4 * i + 2] * xv.z + wv[r][4 * i + 3] * xv.w;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) {
        if (t >= n) break;
#pragma unroll
        for (int r = 0; r < MV_ROWS; r++) {
            const float s = lkv_warp_sum(acc[r][t]);
            if (lane == 0 && r0 + r < rows) out[(size_t)t * rows + r0 + r] = s;
        }
    }
}

// ---------------------------------------------------------------- gemm

enum { GM = 64, GN = 128, GK = 64, G_WARPS = 8, G_PAD = 8 };
enum { GA_LD = GK + G_PAD, GC_LD = 32 + 4 };

struct gemm_smem_ab {
    __half a[GM][GA_LD];   /* activations: token x k */
    __half b[GN][GA_LD];   /* weights: row x k (B^T, read col-major) */
};
union gemm_smem {
    gemm_smem_ab ab;
    float c[G_WARPS][32][GC_LD];   /* each warp's 32x32 output, staged for guarded stores */
};

template <int T>
__global__ void __launch_bounds__(G_WARPS * 32)
gemm_kernel(float *__restrict__ out, const float *__restrict__ x, const uint8_t *__restrict__ w,
            size_t row_bytes, int rows, int cols, int n) {
    __shared__ __align__(128) gemm_smem sm;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int t0 = blockIdx.y * GM, r0 = blockIdx.x * GN;
    const int wm = warp >> 2, wn = warp & 3;   /* warp tile: 32 tokens x 32 rows */
    const int ng = cols / 32;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.f);

    /* this thread's share of the weight tile: row br, group bg of the K step */
    const int br = tid >> 1, bgi = tid & 1;
    const bool brow_ok = r0 + br < rows;
    const uint8_t *wrow = w + (size_t)(brow_ok ? r0 + br : 0) * row_bytes;

    for (int k0 = 0; k0 < cols; k0 += GK) {
        /* activations: 64 x 64 floats, 16 per thread as float4 */
#pragma unroll
        for (int i = 0; i < (GM * GK / 4) / (G_WARPS * 32); i++) {
            const int idx = tid + i * G_WARPS * 32;
            const int tr = idx / (GK / 4), kc = (idx % (GK / 4)) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (t0 + tr < n && k0 + kc < cols) v = *(const float4 *)(x + (size_t)(t0 + tr) * cols + k0 + kc);
            __half2 *dst = (__half2 *)&sm.ab.a[tr][kc];
            dst[0] = __floats2half2_rn(v.x, v.y);
            dst[1] = __floats2half2_rn(v.z, v.w);
        }
        /* weights: one dq32 group per thread */
        {
            const int g = k0 / 32 + bgi;
            float y[32];
            if (brow_ok && g < ng) {
                dq32<T>(wrow, g, y);
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) y[i] = 0.f;
            }
            __half2 *dst = (__half2 *)&sm.ab.b[br][bgi * 32];
#pragma unroll
            for (int i = 0; i < 16; i++) dst[i] = __floats2half2_rn(y[2 * i], y[2 * i + 1]);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++)
                wmma::load_matrix_sync(fa[i], &sm.ab.a[wm * 32 + i * 16][kk], GA_LD);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(fb[j], &sm.ab.b[wn * 32 + j * 16][kk], GA_LD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }

    /* stage each warp's 32x32 tile, then guarded, coalesced stores */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&sm.c[warp][i * 16][j * 16], acc[i][j], GC_LD, wmma::mem_row_major);
    __syncwarp();
    const int rr = r0 + wn * 32 + lane;
    for (int i = 0; i < 32; i++) {
        const int t = t0 + wm * 32 + i;
        if (t < n && rr < rows) out[(size_t)t * rows + rr] = sm.c[warp][i][lane];
    }
}

// ---------------------------------------------------------------- launcher

template <int T>
static void matmul_one(lkv_bctx *b, float *out, const float *x, const lkv_weight *w, int n) {
    const int rows = (int)w->rows, cols = (int)w->cols;
    const uint8_t *wd = (const uint8_t *)w->dev;
    if (n <= MV_MAX_TOK) {
        const unsigned grid = lkv_cdiv(rows, MV_WARPS * MV_ROWS);
        matvec_kernel<T><<<grid, MV_WARPS * 32, 0, b->stream>>>(out, x, wd, w->row_bytes, rows, cols, n);
    } else {
        const dim3 grid(lkv_cdiv(rows, GN), lkv_cdiv(n, GM));
        gemm_kernel<T><<<grid, G_WARPS * 32, 0, b->stream>>>(out, x, wd, w->row_bytes, rows, cols, n);
    }
    LKV_CUDA_LAUNCHED(b, "matmul");
}

// ---------------------------------------------------------------- entry point

void lkv_cuda_matmul(lkv_bctx *b, float *const *outs, const float *x,
                     const lkv_weight *const *ws, int n_w, int n) {
    if (n <= 0) return;
    for (int i = 0; i < n_w; i++) {
        const lkv_weight *w = ws[i];
        if (!w->dev || w->cols % 32) {
            lkv_cuda_note(b, cudaErrorInvalidValue, "matmul: weight not on the device");
            return;
        }
        switch (w->type) {
#define X(T) case T: matmul_one<T>(b, outs[i], x, w, n); break;
            LKV_CUDA_WEIGHT_TYPES(X)
#undef X
        default:
            lkv_cuda_note(b, cudaErrorInvalidValue, "matmul: unsupported weight type");
            return;
        }
    }
}
