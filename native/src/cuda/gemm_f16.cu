/*
 * cuda/gemm_f16.cu: prefill GEMM (n > MV_MAX_TOK tokens) on tensor cores
 * through WMMA, f16 operands, f32 accumulators, for every weight type: the
 * kernel for the float weight types and for q2_K / q3_K / q6_K (whose scales
 * are not uniform over 32-blocks, so mmq.cu does not take them), and the
 * generic one where an integer kernel declines a call (choose_matmul.cu).
 *
 * A block computes a (GM tokens x GN rows) tile; per K step of GK elements it
 * converts the activation tile to f16 and dequantizes the weight tile (one
 * 32-element group per thread, dq8: quant.cuh) into shared memory. The
 * dequantization is the costly part (ALU), so GM is large: each weight tile
 * serves 128 tokens. f16 rounding of the operands gives relative errors near
 * 3e-4, the usual price of f16 GEMM; activations beyond f16's range (65504)
 * would overflow. For bf16 weights both operands are bf16 (the weights
 * exactly, x rounded as the CPU rounds it for their dot), WMMA's bf16 shape.
 */
#include <mma.h>

#include <type_traits>

#include "gemm_ptx.cuh"
#include "matmul.cuh"

using namespace nvcuda;

// ---------------------------------------------------------------- gemm

enum { GM = 128, GN = 128, GK = 64, G_WARPS = 8, G_PAD = 8 };
enum { GA_LD = GK + G_PAD, GC_LD = 32 + 4 };

/* E: the operands' element type, __half, or __nv_bfloat16 for bf16 weights */
template <class E>
struct gemm_smem_ab {
    E a[GM][GA_LD];   /* activations: token x k */
    E b[GN][GA_LD];   /* weights: row x k (B^T, read col-major) */
};
template <class E>
union gemm_smem {
    gemm_smem_ab<E> ab;
    float c[G_WARPS][32][GC_LD];   /* a warp's 32x32 piece of output, staged for guarded stores */
};

/* two floats rounded to E (round to nearest), as one 32-bit pair */
template <class E> struct gemm_pair;
template <> struct gemm_pair<__half> {
    static __device__ __forceinline__ __half2 of(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct gemm_pair<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat162 of(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

template <int T>
__global__ void __launch_bounds__(G_WARPS * 32, 2)
gemm_kernel(const __grid_constant__ mm_set ms, const float *__restrict__ x, int cols, int n) {
    using E = typename std::conditional<T == LKV_TYPE_BF16, __nv_bfloat16, __half>::type;
    using P = gemm_pair<E>;
    using E2 = decltype(P::of(0.f, 0.f));   /* a pair of E */
    __shared__ __align__(128) gemm_smem<E> sm;
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
            E2 *dst = (E2 *)&sm.ab.a[tr][kc];
            dst[0] = P::of(v.x, v.y);
            dst[1] = P::of(v.z, v.w);
        }
        /* weights: one 32-element group per thread, 8 at a time (dq8: fewer live registers) */
        {
            const int g = k0 / 32 + bgi;
            E2 *dst = (E2 *)&sm.ab.b[br][bgi * 32];
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
                for (int i = 0; i < 4; i++) dst[4 * q + i] = P::of(y[2 * i], y[2 * i + 1]);
            }
        }
        __syncthreads();
        /* next step's activations and weights start on their way during the mma */
        if (k0 + GK < cols) {
            /* activations: 128 rows x 256 bytes = 256 lines, one per thread */
            if (t0 + (tid >> 1) < n)
                gm_prefetch_l2(x + (size_t)(t0 + (tid >> 1)) * cols + k0 + GK + (tid & 1) * 32);
            const int gn = k0 / 32 + GK / 32 + bgi;
            if (brow_ok && gn < ng) {
                const uint8_t *pb;
                if constexpr (cblk<T>::qk <= 32) pb = wrow + (size_t)gn * group_bytes<T>();
                else pb = wrow + (size_t)(gn >> 3) * cblk<T>::bytes;
                gm_prefetch_l2(pb);
                if constexpr (cblk<T>::qk > 32) gm_prefetch_l2(pb + 128);
            }
        }
#pragma unroll
        for (int kk = 0; kk < GK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> fb[2];
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
static void gemm_run(lkv_bctx *b, mm_set &ms, const float *x, int cols, int n) {
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], GN);
    const dim3 grid(ms.tile0[ms.n_w], lkv_cdiv(n, GM));
    gemm_kernel<T><<<grid, G_WARPS * 32, 0, b->stream>>>(ms, x, cols, n);
    LKV_CUDA_LAUNCHED(b, "matmul (gemm_f16)");
}

bool lkv_cuda_gemm_f16(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n) {
    if (n < 1) return false;
    switch (type) {
#define X(T) case T: gemm_run<T>(b, ms, x, cols, n); return true;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
