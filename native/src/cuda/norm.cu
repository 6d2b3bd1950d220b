/*
 * cuda/norm.cu: out (n, dim) = x / rms(x) * w, one block per row.
 * As the CPU computes it: the squares in f32 summed in f64 (a fixed tree
 * here, sequential there: the f64 sum rounds the same to f32 but for ties
 * ~2^-29 apart), scale = 1 / sqrt((float)(sum / dim) + eps) with IEEE sqrt
 * and division, out = (x * scale) * w.
 * Also used per head for qwen3's q/k norms (n = tokens * heads, dim = head_dim).
 * add_rmsnorm fuses the residual add before it (x += y, then out = norm(x)):
 * the same operations in the same order as add followed by rmsnorm, one
 * launch instead of two.
 */
#include "common.cuh"

// ---------------------------------------------------------------- kernel

enum { NORM_THREADS = 256 };

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

// ---------------------------------------------------------------- launcher / entry point

static inline int norm_threads(int dim) {
    return dim >= NORM_THREADS ? NORM_THREADS : ((dim + 31) / 32) * 32;
}

void lkv_cuda_rmsnorm(lkv_bctx *b, float *out, const float *x, const lkv_weight *w, int n, int dim,
                      float eps) {
    if (n <= 0) return;
    const float *wd = w ? (const float *)w->dev : NULL;
    if (w && (!wd || w->type != LKV_TYPE_F32)) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "rmsnorm: weight must be f32 on the device");
        return;
    }
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
    add_rmsnorm_kernel<<<n, norm_threads(dim), 0, b->stream>>>(x, y, out, wd, dim, eps);
    LKV_CUDA_LAUNCHED(b, "add_rmsnorm");
}
