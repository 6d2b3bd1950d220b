/*
 * cuda/norm.cu: out (n, dim) = x / rms(x) * w, one block per row.
 * As the CPU computes it: the squares in f32 summed in f64 (a fixed tree
 * here, sequential there: the f64 sum rounds the same to f32 but for ties
 * ~2^-29 apart), scale = 1 / sqrt((float)(sum / dim) + eps) with IEEE sqrt
 * and division, out = (x * scale) * w.
 * Also used per head for qwen3's q/k norms (n = tokens * heads, dim = head_dim).
 * add_rmsnorm fuses the residual add before it (x += y, then out = norm(x)):
 * the same operations in the same order as add followed by rmsnorm, one
 * launch instead of two. It also writes the 8-bit codes of out for the next
 * matmul (act_quant.cuh), one launch fewer again.
 *
 * Rows of up to 16384 floats (dim % 4 == 0, 16-byte aligned) are held in
 * registers, 4 floats per chunk, chunk c of a row in thread c % 256: every
 * load of a row is issued before the first use, so a row costs one memory
 * latency (the loop version waited for each load: a one-row decode norm took
 * ~15 us on the H200). Other rows take the loop kernels.
 */
#include "act_quant.cuh"
#include "pdl.cuh"

// ---------------------------------------------------------------- kernels

enum { NORM_THREADS = 256, NORM_MAX_PER = 16 };

static __device__ __forceinline__ float norm_scale(double ss, int dim, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / dim), eps)));
}

static __device__ __forceinline__ void norm_out(float *orow, const float *xr,
                                                const float *__restrict__ w, int dim, float s) {
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __fmul_rn(xr[i], s);
        orow[i] = w ? __fmul_rn(v, w[i]) : v;
    }
}

__global__ void rmsnorm_kernel(float *out, const float *x, const float *__restrict__ w, int dim,
                               float eps) {
    __shared__ double red[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *orow = out + (size_t)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)__fmul_rn(xr[i], xr[i]);
    norm_out(orow, xr, w, dim, norm_scale(lkv_block_sum_d(ss, red), dim, eps));
}

__global__ void add_rmsnorm_kernel(float *x, const float *__restrict__ y, float *out,
                                   const float *__restrict__ w, int dim, float eps) {
    __shared__ double red[32];
    float *xr = x + (size_t)blockIdx.x * dim;
    const float *yr = y + (size_t)blockIdx.x * dim;
    float *orow = out + (size_t)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __fadd_rn(xr[i], yr[i]);
        xr[i] = v;
        ss += (double)__fmul_rn(v, v);
    }
    /* each thread reads back only the elements it wrote */
    norm_out(orow, xr, w, dim, norm_scale(lkv_block_sum_d(ss, red), dim, eps));
}

/* The register version: PER chunks of 4 floats per thread (NORM_THREADS
 * threads). ADD: x += y first (x written back); Q: the codes of out into
 * xq / xd / xs (dim % 32 == 0: a 32-block is the chunks of 8 neighbouring
 * threads). out may be x (in-place q/k norms): every read comes first. */
template <int PER, bool ADD, bool Q>
__global__ void __launch_bounds__(NORM_THREADS)
norm_reg_kernel(float *x, const float *__restrict__ y, float *out, const float *__restrict__ w,
                int dim, float eps, int8_t *__restrict__ xq, float *__restrict__ xd,
                float *__restrict__ xs) {
    __shared__ double red[32];
    pdl_enter();
    const int tid = threadIdx.x, n4 = dim / 4;
    float4 *xr = (float4 *)(x + (size_t)blockIdx.x * dim);
    float4 v[PER];
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int c = tid + k * NORM_THREADS;
        v[k] = c < n4 ? xr[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    if constexpr (ADD) {
        const float4 *yr = (const float4 *)(y + (size_t)blockIdx.x * dim);
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int c = tid + k * NORM_THREADS;
            if (c >= n4) continue;
            const float4 u = yr[c];
            v[k] = make_float4(__fadd_rn(v[k].x, u.x), __fadd_rn(v[k].y, u.y), __fadd_rn(v[k].z, u.z),
                               __fadd_rn(v[k].w, u.w));
            xr[c] = v[k];
        }
    }
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < PER; k++) {
        ss += (double)__fmul_rn(v[k].x, v[k].x);
        ss += (double)__fmul_rn(v[k].y, v[k].y);
        ss += (double)__fmul_rn(v[k].z, v[k].z);
        ss += (double)__fmul_rn(v[k].w, v[k].w);
    }
    const float s = norm_scale(lkv_block_sum_d(ss, red), dim, eps);
    float4 *orow = (float4 *)(out + (size_t)blockIdx.x * dim);
    const float4 *w4 = (const float4 *)w;
#pragma unroll
    for (int k = 0; k < PER; k++) {
        const int c = tid + k * NORM_THREADS;
        const bool in = c < n4;
        float o[4] = {__fmul_rn(v[k].x, s), __fmul_rn(v[k].y, s), __fmul_rn(v[k].z, s), __fmul_rn(v[k].w, s)};
        if (w && in) {
            const float4 g = w4[c];
            o[0] = __fmul_rn(o[0], g.x); o[1] = __fmul_rn(o[1], g.y);
            o[2] = __fmul_rn(o[2], g.z); o[3] = __fmul_rn(o[3], g.w);
        }
        if (in) orow[c] = make_float4(o[0], o[1], o[2], o[3]);
        if constexpr (Q) {
            /* chunks c..c+7 (c % 8 == 0) are one block; the whole warp calls */
            const size_t blk = ((size_t)blockIdx.x * dim) / 32 + c / 8;
            act_q8_group8(o, in, xq + blk * 32, xd + blk, xs + blk);
        }
    }
}

// ---------------------------------------------------------------- launchers / entry points

static inline int norm_threads(int dim) {
    return dim >= NORM_THREADS ? NORM_THREADS : ((dim + 31) / 32) * 32;
}

/* chunks of 4 per thread for the register kernel, 0 when the row does not fit it */
static int norm_per(const void *a, const void *b2, const void *c, const void *w, int dim) {
    const uintptr_t al = (uintptr_t)a | (uintptr_t)b2 | (uintptr_t)c | (uintptr_t)w;
    if (dim % 4 || al % 16 || dim > 4 * NORM_THREADS * NORM_MAX_PER) return 0;
    const int per = (int)lkv_cdiv(dim / 4, NORM_THREADS);
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : per <= 8 ? 8 : 16;
}

template <bool ADD, bool Q>
static void norm_reg_launch(lkv_bctx *b, int per, float *x, const float *y, float *out,
                            const float *w, int n, int dim, float eps) {
    switch (per) {
#define P(N) case N: lkv_launch(b, norm_reg_kernel<N, ADD, Q>, n, NORM_THREADS, 0, x, y, out, w, dim, eps, \
                                 b->xq, b->xd, b->xs); break;
        P(1) P(2) P(4) P(8) P(16)
#undef P
    }
}

void lkv_cuda_rmsnorm(lkv_bctx *b, float *out, const float *x, const lkv_weight *w, int n, int dim,
                      float eps) {
    if (n <= 0) return;
    const float *wd = w ? (const float *)w->dev : NULL;
    if (w && (!wd || w->type != LKV_TYPE_F32)) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "rmsnorm: weight must be f32 on the device");
        return;
    }
    if (const int per = norm_per(out, x, NULL, wd, dim))
        norm_reg_launch<false, false>(b, per, (float *)x, NULL, out, wd, n, dim, eps);
    else
        rmsnorm_kernel<<<n, norm_threads(dim), 0, b->stream>>>(out, x, wd, dim, eps);
    LKV_CUDA_LAUNCHED(b, "rmsnorm");
}

void lkv_cuda_add_rmsnorm(lkv_bctx *b, float *x, const float *y, float *out, const lkv_weight *w,
                          int n, int dim, float eps) {
    if (n <= 0) return;
    const float *wd = w ? (const float *)w->dev : NULL;
    if (w && (!wd || w->type != LKV_TYPE_F32)) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "add_rmsnorm: weight must be f32 on the device");
        return;
    }
    const int per = norm_per(out, x, y, wd, dim);
    const bool q = per && lkv_act_fits(b, n, dim);
    if (q) norm_reg_launch<true, true>(b, per, x, y, out, wd, n, dim, eps);
    else if (per) norm_reg_launch<true, false>(b, per, x, y, out, wd, n, dim, eps);
    else add_rmsnorm_kernel<<<n, norm_threads(dim), 0, b->stream>>>(x, y, out, wd, dim, eps);
    LKV_CUDA_LAUNCHED(b, "add_rmsnorm");
    if (q) lkv_act_tag_set(b, out, (int64_t)n * dim);
}
