/*
 * cuda/moe.cu: the mixture-of-experts ops (backend.h), the CUDA twins of
 * cpu/moe.c.
 *
 * - moe_topk: one thread per token: softmax over its router logits (the max
 *   subtracted, the CPU's exp, the sum in f64), then the k largest by
 *   selection, ties to the lower id, optionally renormalised, then scaled:
 *   the CPU's operations in the CPU's order. n_expert <= LKV_MOE_MAX_EXPERTS
 *   floats of per-thread scratch (local memory): slow for long prefills, but
 *   a small part of a layer next to its experts' matmuls.
 * - gather_rows / scatter_add_rows: one block per row, threads over its
 *   elements; a call's rows are distinct (a token picks an expert once), so
 *   no two blocks write one row.
 * - zero: a memset on the stream.
 */
#include "common.cuh"

// ---------------------------------------------------------------- kernels

enum { MOE_TOPK_THREADS = 64, MOE_ROW_THREADS = 256 };

__global__ void moe_topk_kernel(int32_t *ids, float *wts, const float *__restrict__ logits, int n,
                                int n_expert, int k, int norm, float scale) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    float p[LKV_MOE_MAX_EXPERTS];
    const float *l = logits + (size_t)r * n_expert;
    float mx = l[0];
    for (int e = 1; e < n_expert; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < n_expert; e++) {
        p[e] = lkv_expf_cpu(__fsub_rn(l[e], mx));
        sum += p[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n_expert; e++) p[e] = __fmul_rn(p[e], inv);
    float picked = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++)
            if (p[e] >= 0.0f && (best < 0 || p[e] > p[best])) best = e;
        ids[(size_t)r * k + j] = best;
        if (best < 0) { wts[(size_t)r * k + j] = 0.0f; continue; }
        wts[(size_t)r * k + j] = p[best];
        picked = __fadd_rn(picked, p[best]);
        p[best] = -1.0f;
    }
    const float f = __fmul_rn(norm ? __fdiv_rn(1.0f, picked) : 1.0f, scale);
    for (int j = 0; j < k; j++) wts[(size_t)r * k + j] = __fmul_rn(wts[(size_t)r * k + j], f);
}

/* out row i = x row rows[i] */
__global__ void gather_rows_kernel(float *out, const float *__restrict__ x,
                                   const int32_t *__restrict__ rows, int dim) {
    const float *src = x + (size_t)rows[blockIdx.x] * dim;
    float *dst = out + (size_t)blockIdx.x * dim;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) dst[j] = src[j];
}

/* out row rows[i] += w[i] * y row i */
__global__ void scatter_add_rows_kernel(float *out, const float *__restrict__ y,
                                        const int32_t *__restrict__ rows,
                                        const float *__restrict__ w, int dim) {
    float *o = out + (size_t)rows[blockIdx.x] * dim;
    const float *yi = y + (size_t)blockIdx.x * dim, wi = w[blockIdx.x];
    for (int j = threadIdx.x; j < dim; j += blockDim.x) o[j] = __fadd_rn(o[j], __fmul_rn(wi, yi[j]));
}

// ---------------------------------------------------------------- entry points

void lkv_cuda_moe_topk(lkv_bctx *b, int32_t *ids, float *wts, const float *logits, int n,
                       int n_expert, int k, int norm, float scale) {
    if (n <= 0) return;
    moe_topk_kernel<<<lkv_cdiv(n, MOE_TOPK_THREADS), MOE_TOPK_THREADS, 0, b->stream>>>(
        ids, wts, logits, n, n_expert, k, norm, scale);
    LKV_CUDA_LAUNCHED(b, "moe_topk");
}

void lkv_cuda_gather_rows(lkv_bctx *b, float *out, const float *x, const int32_t *rows, int n,
                          int dim) {
    if (n <= 0) return;
    gather_rows_kernel<<<n, MOE_ROW_THREADS, 0, b->stream>>>(out, x, rows, dim);
    LKV_CUDA_LAUNCHED(b, "gather_rows");
}

void lkv_cuda_scatter_add_rows(lkv_bctx *b, float *out, const float *y, const int32_t *rows,
                               const float *w, int n, int dim) {
    if (n <= 0) return;
    scatter_add_rows_kernel<<<n, MOE_ROW_THREADS, 0, b->stream>>>(out, y, rows, w, dim);
    LKV_CUDA_LAUNCHED(b, "scatter_add_rows");
}

void lkv_cuda_zero(lkv_bctx *b, float *x, int64_t n) {
    if (n <= 0) return;
    LKV_CUDA_CALL(b, cudaMemsetAsync(x, 0, sizeof(float) * (size_t)n, b->stream), "zero");
}
