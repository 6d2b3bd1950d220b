/*
 * cuda/gating.cu: the gates of the hybrid (qwen35) layers, the CUDA twins of
 * cpu/gating.c.
 *
 * - split_rows: a gated attention layer's q projection holds, per head, the
 *   query and then its output gate: q (n_rows, dim) = the even rows of x,
 *   gate = the odd ones. One element per thread.
 * - sigmoid_mul: x *= sigmoid(gate) = 1 / (1 + e^-gate), one element per
 *   thread.
 * - rmsnorm_gated: per row (one value head of one token), out = x / rms(x) *
 *   w * silu(z), one block per row.
 * The exp is the CPU's (common.cuh lkv_expf_cpu), the divisions and the
 * square root IEEE, the products in the CPU's order, and the sum of squares
 * in f64 as there (a fixed tree here, sequential there: the same f32 result
 * but for ties ~2^-29 apart, as cuda/norm.cu), so the values are the CPU's
 * bit for bit in practice; the tests hold them to a tolerance all the same.
 */
#include "common.cuh"

// ---------------------------------------------------------------- kernels

enum { GT_THREADS = 256, GT_MAX_BLOCKS = 4096, GN_MAX_THREADS = 256 };

/* q, gate (n_rows, dim) from x (2 * n_rows, dim) */
__global__ void split_rows_kernel(float *q, float *gate, const float *__restrict__ x,
                                  int64_t total, int dim) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / dim, k = i - r * dim;
        q[i] = x[2 * r * dim + k];
        gate[i] = x[(2 * r + 1) * dim + k];
    }
}

/* x (n) *= 1 / (1 + e^-gate) */
__global__ void sigmoid_mul_kernel(float *x, const float *__restrict__ gate, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, lkv_expf_cpu(__fsub_rn(0.f, gate[i]))));
        x[i] = __fmul_rn(x[i], s);
    }
}

/* one block per row: out = ((x * scale) * w) * (z / (1 + e^-z)); out may be x
 * (every thread reads back only the elements it writes) */
__global__ void rmsnorm_gated_kernel(float *out, const float *x, const float *__restrict__ w,
                                     const float *__restrict__ z, int dim, float eps) {
    __shared__ double red[32];
    const size_t row = (size_t)blockIdx.x * dim;
    const float *xr = x + row, *zr = z + row;
    float *orow = out + row;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += (double)__fmul_rn(xr[i], xr[i]);
    ss = lkv_block_sum_d(ss, red);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / dim), eps)));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float zk = zr[i];
        const float silu = __fdiv_rn(zk, __fadd_rn(1.0f, lkv_expf_cpu(__fsub_rn(0.f, zk))));
        orow[i] = __fmul_rn(__fmul_rn(__fmul_rn(xr[i], scale), w[i]), silu);
    }
}

// ---------------------------------------------------------------- launchers / entry points

static unsigned gt_grid(int64_t n) {
    const int64_t g = (n + GT_THREADS - 1) / GT_THREADS;
    return (unsigned)(g < GT_MAX_BLOCKS ? (g > 0 ? g : 1) : GT_MAX_BLOCKS);
}

void lkv_cuda_split_rows(lkv_bctx *b, float *q, float *gate, const float *x, int n_rows, int dim) {
    const int64_t total = (int64_t)n_rows * dim;
    if (total <= 0) return;
    split_rows_kernel<<<gt_grid(total), GT_THREADS, 0, b->stream>>>(q, gate, x, total, dim);
    LKV_CUDA_LAUNCHED(b, "split_rows");
}

void lkv_cuda_sigmoid_mul(lkv_bctx *b, float *x, const float *gate, int64_t n) {
    if (n <= 0) return;
    sigmoid_mul_kernel<<<gt_grid(n), GT_THREADS, 0, b->stream>>>(x, gate, n);
    LKV_CUDA_LAUNCHED(b, "sigmoid_mul");
}

void lkv_cuda_rmsnorm_gated(lkv_bctx *b, float *out, const float *x, const lkv_weight *w,
                            const float *z, int n, int dim, float eps) {
    if (n <= 0 || dim <= 0) return;
    if (!w || !w->dev || w->type != LKV_TYPE_F32) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "rmsnorm_gated: weight must be f32 on the device");
        return;
    }
    const int threads = dim >= GN_MAX_THREADS ? GN_MAX_THREADS : (dim + 31) / 32 * 32;
    rmsnorm_gated_kernel<<<n, threads, 0, b->stream>>>(out, x, (const float *)w->dev, z, dim, eps);
    LKV_CUDA_LAUNCHED(b, "rmsnorm_gated");
}
