/*
 * cuda/gemma.cu: the elementwise ops gemma3 adds (backend.h): GeGLU with
 * gelu's tanh approximation, a scale, and the final logit softcap. The
 * operations and their order are the CPU's (cpu/gemma.c): gelu from x rounded
 * to f16, its result rounded to f16, 0 below -10 and x above 10. tanhf here
 * is CUDA's (within 2 ulp of glibc's), so a gelu value can differ from the
 * CPU's in its last f16 bit, rarely; the scale and the softcap's products are
 * the CPU's bits.
 */
#include <cuda_fp16.h>

#include "common.cuh"

enum { GM_THREADS = 256, GM_MAX_BLOCKS = 4096 };

static unsigned gm_grid(int64_t n) {
    const int64_t g = (n + GM_THREADS - 1) / GM_THREADS;
    return (unsigned)(g < GM_MAX_BLOCKS ? (g > 0 ? g : 1) : GM_MAX_BLOCKS);
}

static __device__ __forceinline__ float gelu_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = __half2float(__float2half_rn(x));
    const float c = 0.79788456080286535587989211986876f, a = 0.044715f;
    const float g = 0.5f * xh * (1.0f + tanhf(c * xh * (1.0f + a * xh * xh)));
    return __half2float(__float2half_rn(g));
}

__global__ void geglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g >= 10.0f ? g * up[i] : gelu_f16(g) * up[i];
    }
}

__global__ void scale_kernel(float *x, float s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

__global__ void softcap_kernel(float *x, float cap, float inv, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = tanhf(x[i] * inv) * cap;
}

void lkv_cuda_geglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n) {
    if (n <= 0) return;
    geglu_kernel<<<gm_grid(n), GM_THREADS, 0, b->stream>>>(out, gate, up, n);
    LKV_CUDA_LAUNCHED(b, "geglu");
}

void lkv_cuda_scale(lkv_bctx *b, float *x, float s, int64_t n) {
    if (n <= 0) return;
    scale_kernel<<<gm_grid(n), GM_THREADS, 0, b->stream>>>(x, s, n);
    LKV_CUDA_LAUNCHED(b, "scale");
}

void lkv_cuda_softcap(lkv_bctx *b, float *x, float cap, int64_t n) {
    if (n <= 0) return;
    softcap_kernel<<<gm_grid(n), GM_THREADS, 0, b->stream>>>(x, cap, 1.0f / cap, n);
    LKV_CUDA_LAUNCHED(b, "softcap");
}
