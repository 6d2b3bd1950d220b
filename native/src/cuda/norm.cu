/*
 * cuda/norm.cu: out (n, dim) = x / rms(x) * w, one block per row.
 * rms = sqrt(mean(x^2) + eps), summed in f32 in a fixed order (deterministic).
 * Also used per head for qwen3's q/k norms (n = tokens * heads, dim = head_dim).
 * add_rmsnorm fuses the residual add before it (x += y, then out = norm(x)):
 * the same operations in the same order as add followed by rmsnorm, one
 * launch instead of two.
 */
#include "common.cuh"

// ---------------------------------------------------------------- kernel

enum { NORM_THREADS = 256 };

__global__ void rmsnorm_kernel(float *out, const float *x, const float *__restrict__ w, int dim,
                               float eps) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *orow = out + (size_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = lkv_block_sum(ss, red);
    const float s = rsqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = xr[i] * s;
        orow[i] = w ? v * w[i] : v;
    }
}

__global__ void add_rmsnorm_kernel(float *x, const float *__restrict__ y, float *out,
                                   const float *__restrict__ w, int dim, float eps) {
    __shared__ float red[32];
    float *xr = x + (size_t)blockIdx.x * dim;
    const float *yr = y + (size_t)blockIdx.x * dim;
    float *orow = out + (size_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = xr[i] + yr[i];
        xr[i] = v;
        ss += v * v;
    }
    ss = lkv_block_sum(ss, red);
    const float s = rsqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = xr[i] * s;
        orow[i] = w ? v * w[i] : v;
    }
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
