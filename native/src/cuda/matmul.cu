/*
 * cuda/matmul.cu: out (n, rows) = x (n, cols) @ W^T for W in any weight type.
 *
 * Two kernels, chosen by the number of tokens n:
 * - matvec (n <= MV_MAX_TOK, decode): memory-bound. Each warp owns MV_ROWS
 *   weight rows; lane l takes 8-element pieces l, l+32, ... (dq8), so a warp
 *   reads a contiguous span of each row and of the activations per step; it
 *   dequantizes in registers and multiplies with every token's f32
 *   activations, so each weight byte is read once and each activation load
 *   serves MV_ROWS rows. Accumulation is f32 (unlike the CPU, activations are
 *   not rounded to 8 bits: the results differ from the CPU's by that rounding).
 * - gemm (prefill): tensor cores through WMMA, f16 operands, f32 accumulators.
 *   A block computes a (GM tokens x GN rows) tile; per K step of GK elements it
 *   converts the activation tile to f16 and dequantizes the weight tile
 *   (one 32-element group per thread) into shared memory. The dequantization is the
 *   costly part (ALU), so GM is large: each weight tile serves 128 tokens.
 *   f16 rounding of the operands gives relative errors near 3e-4, the usual
 *   price of f16 GEMM; activations beyond f16's range (65504) would overflow.
 * Weights of one type sharing the input (q/k/v, gate/up) go in one launch:
 * the grid's x dimension runs over the row tiles of all of them.
 * Quantized weights take the integer paths first, on activations quantized
 * to 8 bits once per call: the mat-vec of matvec_q8.cu (n <= MV_MAX_TOK) and,
 * for the types with one integer scale per 32-block, the int8 tensor-core GEMM
 * of mmq.cu (n > MV_MAX_TOK; LKV_CUDA_GEMM=wmma keeps gemm_kernel). The two
 * kernels here serve the rest (float types, q2_K, q3_K, q6_K, LKV_CUDA_MMQ=0).
 */
#include <mma.h>

#include "act_quant.cuh"

using namespace nvcuda;

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
#pragma unroll
            for (int r = 0; r < MV_ROWS; r++)
                acc[r][t] += wv[r][0] * a.x + wv[r][1] * a.y + wv[r][2] * a.z + wv[r][3] * a.w +
                             wv[r][4] * c.x + wv[r][5] * c.y + wv[r][6] * c.z + wv[r][7] * c.w;
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

// ---------------------------------------------------------------- gemm

enum { GM = 128, GN = 128, GK = 64, G_WARPS = 8, G_PAD = 8 };
enum { GA_LD = GK + G_PAD, GC_LD = 32 + 4 };

struct gemm_smem_ab {
    __half a[GM][GA_LD];   /* activations: token x k */
    __half b[GN][GA_LD];   /* weights: row x k (B^T, read col-major) */
};
union gemm_smem {
    gemm_smem_ab ab;
    float c[G_WARPS][32][GC_LD];   /* a warp's 32x32 piece of output, staged for guarded stores */
};

static __device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

template <int T>
__global__ void __launch_bounds__(G_WARPS * 32, 2)
gemm_kernel(const __grid_constant__ mm_set ms, const float *__restrict__ x, int cols, int n) {
    __shared__ __align__(128) gemm_smem sm;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j];
    const int t0 = blockIdx.y * GM, r0 = (blockIdx.x - ms.tile0[j]) * GN;
    const int wm = warp >> 2, wn = warp & 3;   /* warp tile: 64 tokens x 32 rows */
    const int ng = cols / 32;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int jj = 0; jj < 2; jj++) wmma::fill_fragment(acc[i][jj], 0.f);

    /* this thread's share of the weight tile: row br, group bgi of the K step */
    const int br = tid >> 1, bgi = tid & 1;
    const bool brow_ok = r0 + br < rows;
    const uint8_t *wrow = ms.w[j] + (size_t)(brow_ok ? r0 + br : 0) * ms.row_bytes[j];
    constexpr int XV = (GM * GK / 4) / (G_WARPS * 32);   /* float4s of activations per thread */
    static_assert(GM * GK * 4 / 128 == G_WARPS * 32, "one activation line per thread to prefetch");

    for (int k0 = 0; k0 < cols; k0 += GK) {
        /* activations to f16 smem */
#pragma unroll
        for (int i = 0; i < XV; i++) {
            const int idx = tid + i * G_WARPS * 32;
            const int tr = idx / (GK / 4), kc = (idx % (GK / 4)) * 4;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (t0 + tr < n && k0 + kc < cols) v = __ldg((const float4 *)(x + (size_t)(t0 + tr) * cols + k0 + kc));
            __half2 *dst = (__half2 *)&sm.ab.a[tr][kc];
            dst[0] = __floats2half2_rn(v.x, v.y);
            dst[1] = __floats2half2_rn(v.z, v.w);
        }
        /* weights: one 32-element group per thread, 8 at a time (dq8: fewer live registers) */
        {
            const int g = k0 / 32 + bgi;
            __half2 *dst = (__half2 *)&sm.ab.b[br][bgi * 32];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float y[8];
                if (brow_ok && g < ng) {
                    dq8<T>(wrow, 4 * g + q, y);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) y[i] = 0.f;
                }
#pragma unroll
                for (int i = 0; i < 4; i++) dst[4 * q + i] = __floats2half2_rn(y[2 * i], y[2 * i + 1]);
            }
        }
        __syncthreads();
        /* next step's activations and weights start on their way during the mma */
        if (k0 + GK < cols) {
            /* activations: 128 rows x 256 bytes = 256 lines, one per thread */
            if (t0 + (tid >> 1) < n)
                prefetch_l2(x + (size_t)(t0 + (tid >> 1)) * cols + k0 + GK + (tid & 1) * 32);
            const int gn = k0 / 32 + GK / 32 + bgi;
            if (brow_ok && gn < ng) {
                const uint8_t *pb;
                if constexpr (cblk<T>::qk <= 32) pb = wrow + (size_t)gn * group_bytes<T>();
                else pb = wrow + (size_t)(gn >> 3) * cblk<T>::bytes;
                prefetch_l2(pb);
                if constexpr (cblk<T>::qk > 32) prefetch_l2(pb + 128);
            }
        }
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
                wmma::load_matrix_sync(fb[jj], &sm.ab.b[wn * 32 + jj * 16][kk], GA_LD);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                wmma::load_matrix_sync(fa, &sm.ab.a[wm * 64 + i * 16][kk], GA_LD);
#pragma unroll
                for (int jj = 0; jj < 2; jj++) wmma::mma_sync(acc[i][jj], fa, fb[jj], acc[i][jj]);
            }
        }
        __syncthreads();
    }

    /* stage each warp's output 32 tokens at a time, then guarded, coalesced stores */
    float *out = ms.out[j];
    const int rr = r0 + wn * 32 + lane;
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int jj = 0; jj < 2; jj++)
                wmma::store_matrix_sync(&sm.c[warp][i * 16][jj * 16], acc[2 * h + i][jj], GC_LD,
                                        wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < 32; i++) {
            const int t = t0 + wm * 64 + h * 32 + i;
            if (t < n && rr < rows) out[(size_t)t * rows + rr] = sm.c[warp][i][lane];
        }
        __syncwarp();
    }
}

// ---------------------------------------------------------------- launcher

template <int T>
static void matmul_set(lkv_bctx *b, mm_set &ms, const float *x, int cols, int n, int *quantized) {
    /* one quantization of x serves every run of this call that uses its format */
    const int fmt = lkv_act_format(T, cols);
    const bool q = *quantized != fmt;
    if (n <= MV_MAX_TOK ? lkv_cuda_matvec_q8(b, T, ms, x, cols, n, q)
                        : lkv_cuda_mmq(b, T, ms, x, cols, n, q)) {
        *quantized = fmt;
        return;
    }
    const int rows_per_tile = n <= MV_MAX_TOK ? MV_WARPS * MV_ROWS : GN;
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], rows_per_tile);
    if (n <= MV_MAX_TOK) {
        matvec_kernel<T><<<ms.tile0[ms.n_w], MV_WARPS * 32, 0, b->stream>>>(ms, x, cols, n);
    } else {
        const dim3 grid(ms.tile0[ms.n_w], lkv_cdiv(n, GM));
        gemm_kernel<T><<<grid, G_WARPS * 32, 0, b->stream>>>(ms, x, cols, n);
    }
    LKV_CUDA_LAUNCHED(b, "matmul");
}

// ---------------------------------------------------------------- entry point

void lkv_cuda_matmul(lkv_bctx *b, float *const *outs, const float *x,
                     const lkv_weight *const *ws, int n_w, int n) {
    if (n <= 0) return;
    /* a norm or swiglu just wrote the q8 codes of x (act_quant.cuh) */
    int quantized = n_w > 0 && lkv_act_tag_take(b, x, n, (int)ws[0]->cols) ? ACT_Q8 : ACT_NONE;
    for (int i = 0; i < n_w;) {
        /* a run of up to 3 weights of one type */
        mm_set ms = {};
        const int type = ws[i]->type, cols = (int)ws[i]->cols;
        while (i < n_w && ms.n_w < 3 && ws[i]->type == type && ws[i]->cols == cols) {
            const lkv_weight *w = ws[i];
            if (!w->dev || w->cols % 32) {
                lkv_cuda_note(b, cudaErrorInvalidValue, "matmul: weight not on the device");
                return;
            }
            ms.w[ms.n_w] = (const uint8_t *)w->dev;
            ms.out[ms.n_w] = outs[i];
            ms.row_bytes[ms.n_w] = w->row_bytes;
            ms.rows[ms.n_w] = (int)w->rows;
            ms.n_w++;
            i++;
        }
        switch (type) {
#define X(T) case T: matmul_set<T>(b, ms, x, cols, n, &quantized); break;
            LKV_CUDA_WEIGHT_TYPES(X)
#undef X
        default:
            lkv_cuda_note(b, cudaErrorInvalidValue, "matmul: unsupported weight type");
            return;
        }
    }
}

/* out (n, rows) = silu(x @ wg^T) * (x @ wu^T) in one launch, with the codes of
 * out for the down matmul (mmb.cu, SW): q4_0 gate and up of one shape, the
 * exact kernels, a prefill batch; 0 when not covered (the caller runs matmul
 * and swiglu, which give the same bits) */
int lkv_cuda_matmul_swiglu(lkv_bctx *b, float *out, const float *x, const lkv_weight *wg,
                           const lkv_weight *wu, int n) {
    const int cols = (int)wg->cols, rows = (int)wg->rows;
    if (n <= MV_MAX_TOK || wg->type != LKV_TYPE_Q4_0 || wu->type != LKV_TYPE_Q4_0 || wu->cols != wg->cols ||
        wu->rows != wg->rows || !wg->dev || !wu->dev || rows % 32 || cols % 32)
        return 0;
    if (!b->mmq || !b->xq2 || n > b->xq_rows || cols > b->xq_cols || rows > b->xq_cols ||
        lkv_cuda_env_is("LKV_CUDA_GEMM", "wmma") || lkv_cuda_fast(b, "LKV_CUDA_GEMM", "fast") ||
        lkv_cuda_env_is("LKV_CUDA_SWIGLU", "0"))
        return 0;
    if (!lkv_act_tag_take(b, x, n, cols)) lkv_cuda_quantize_act(b, x, n, cols, LKV_TYPE_Q4_0);
    mm_set ms = {};
    ms.n_w = 2;
    ms.w[0] = (const uint8_t *)wg->dev;
    ms.w[1] = (const uint8_t *)wu->dev;
    ms.out[0] = out;
    ms.row_bytes[0] = wg->row_bytes;
    ms.row_bytes[1] = wu->row_bytes;
    ms.rows[0] = ms.rows[1] = rows;
    if (!lkv_cuda_mmb_swiglu(b, ms, cols, n)) return 0;
    LKV_CUDA_LAUNCHED(b, "matmul_swiglu (mmb)");
    lkv_act_swap(b, out, (int64_t)n * rows);
    return 1;
}
