/*
 * cuda/elementwise.cu: swiglu, residual add, bias add. Memory-bound one-pass
 * kernels, one element per thread, grid-stride. swiglu also writes the 8-bit
 * codes of its output for the down matmul (act_quant.cuh).
 */
#include "act_quant.cuh"
#include "pdl.cuh"

// ---------------------------------------------------------------- kernels

enum { EW_THREADS = 256, EW_MAX_BLOCKS = 4096 };

/* out (n) = silu(gate) * up, silu(g) = g / (1 + e^-g), the exp and the order
 * of operations the CPU's (cpu/ops.c; common.cuh lkv_swiglu_cpu) */
__global__ void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = lkv_swiglu_cpu(gate[i], up[i]);
    }
}

/* the same, and the 8-bit codes of out for the next matmul (act_quant.cuh);
 * n % 32 == 0, so a warp's 32 lanes hold one whole block in every pass */
__global__ void swiglu_q_kernel(float *out, const float *gate, const float *up, int64_t n,
                                int8_t *__restrict__ xq, float *__restrict__ xd, float *__restrict__ xs) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float o = lkv_swiglu_cpu(gate[i], up[i]);
        out[i] = o;
        act_q8_at(o, i, xq, xd, xs);
    }
}

/* x (n) += y */
__global__ void add_kernel(float *x, const float *y, int64_t n) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], y[i]);
}

/* x (n, dim) += bias (dim,) */
__global__ void add_bias_kernel(float *x, const float *bias, int64_t total, int dim) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __fadd_rn(x[i], bias[i % dim]);
}

// ---------------------------------------------------------------- launchers / entry points

static unsigned ew_grid(int64_t n) {
    int64_t g = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(g < EW_MAX_BLOCKS ? (g > 0 ? g : 1) : EW_MAX_BLOCKS);
}

void lkv_cuda_swiglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n) {
    if (n <= 0) return;
    const bool q = b->xq && n % 32 == 0 && n <= (int64_t)b->xq_rows * b->xq_cols;
    if (q) lkv_launch(b, swiglu_q_kernel, ew_grid(n), EW_THREADS, 0, out, gate, up, n, b->xq, b->xd, b->xs);
    else swiglu_kernel<<<ew_grid(n), EW_THREADS, 0, b->stream>>>(out, gate, up, n);
    LKV_CUDA_LAUNCHED(b, "swiglu");
    if (q) lkv_act_tag_set(b, out, n);
}

void lkv_cuda_add(lkv_bctx *b, float *x, const float *y, int64_t n) {
    if (n <= 0) return;
    lkv_launch(b, add_kernel, ew_grid(n), EW_THREADS, 0, x, y, n);
    LKV_CUDA_LAUNCHED(b, "add");
}

void lkv_cuda_add_bias(lkv_bctx *b, float *x, const lkv_weight *bias, int n, int dim) {
    if (n <= 0) return;
    if (!bias->dev || bias->type != LKV_TYPE_F32) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "add_bias: bias must be f32 on the device");
        return;
    }
    const int64_t total = (int64_t)n * dim;
    add_bias_kernel<<<ew_grid(total), EW_THREADS, 0, b->stream>>>(x, (const float *)bias->dev, total, dim);
    LKV_CUDA_LAUNCHED(b, "add_bias");
}
