/*
 * cuda/sample.cu: sampling on the device (backend.h pick_greedy): the greedy
 * pick over one logits row, so that a decode loop (decode.c) brings back a
 * token id (4 bytes) instead of the row (n_vocab floats).
 *
 * One block of 1024 threads scans the row (a 248K vocabulary is 1 MB: a few
 * microseconds on one multiprocessor, beside a decode step of milliseconds).
 * Values are compared as doubles, logit + bias, as the host sampler does
 * (engine/sampling.py: float64 copy, bias added, arg-max = the first largest),
 * so the pick is the host's bit for bit. The biased ids are marked in a bitmap
 * in shared memory (n / 8 bytes) and their bias looked up in the short list.
 */
#include <math.h>

#include "common.cuh"

enum { PK_THREADS = 1024 };

struct pk_best {
    double v;
    int i;   /* -1: nothing finite or larger than -inf seen */
};

static __device__ __forceinline__ pk_best pk_better(pk_best a, pk_best b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (a.v > b.v || (a.v == b.v && a.i < b.i)) return a;
    return b;
}

__global__ void __launch_bounds__(PK_THREADS)
pick_greedy_kernel(const float *__restrict__ x, int n, const int *__restrict__ bias_ids,
                   const double *__restrict__ bias, int n_bias, int *out) {
    extern __shared__ unsigned pk_bits[];
    __shared__ pk_best red[PK_THREADS / 32];
    __shared__ int any_nan;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid == 0) any_nan = 0;
    if (n_bias > 0) {
        const int words = (n + 31) >> 5;
        for (int w = tid; w < words; w += PK_THREADS) pk_bits[w] = 0u;
        __syncthreads();
        for (int j = tid; j < n_bias; j += PK_THREADS) {
            const int id = bias_ids[j];
            if (id >= 0 && id < n) atomicOr(&pk_bits[id >> 5], 1u << (id & 31));
        }
    }
    __syncthreads();
    pk_best best = {-INFINITY, -1};
    int nan = 0;
    for (int i = tid; i < n; i += PK_THREADS) {
        double v = (double)x[i];
        if (n_bias > 0 && (pk_bits[i >> 5] >> (i & 31) & 1u)) {
            for (int j = 0; j < n_bias; j++)
                if (bias_ids[j] == i) { v += bias[j]; break; }
        }
        nan |= isnan(v);
        if (v > best.v) { best.v = v; best.i = i; }   /* i rises: the first of equals stays */
    }
    if (nan) any_nan = 1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        pk_best other;
        other.v = __shfl_xor_sync(0xffffffffu, best.v, o);
        other.i = __shfl_xor_sync(0xffffffffu, best.i, o);
        best = pk_better(best, other);
    }
    if (lane == 0) red[warp] = best;
    __syncthreads();
    if (tid == 0) {
        pk_best b = red[0];
        for (int w = 1; w < PK_THREADS / 32; w++) b = pk_better(b, red[w]);
        *out = (any_nan || b.i < 0 || !isfinite(b.v)) ? -1 : b.i;
    }
}

lkv_status lkv_cuda_pick_greedy(lkv_bctx *b, const float *logits, int32_t n, const int32_t *bias_ids,
                                const double *bias, int32_t n_bias, int32_t *out) {
    *out = -1;
    if (!b->pick_d) {
        LKV_CUDA_CALL(b, cudaMalloc((void **)&b->pick_d, sizeof(int32_t)), "pick_greedy: alloc");
        LKV_CUDA_CALL(b, cudaMallocHost((void **)&b->pick_h, sizeof(int32_t)), "pick_greedy: alloc");
    }
    if (b->err == cudaSuccess && n > 0) {
        const int smem = n_bias > 0 ? (int)(((n + 31) >> 5) * sizeof(unsigned)) : 0;
        if (smem > 48 * 1024) {
            static int raised[32];   /* the vocabulary's size: the largest so far */
            lkv_cuda_smem_raise(b, raised, pick_greedy_kernel, smem, "pick_greedy: smem");
        }
        pick_greedy_kernel<<<1, PK_THREADS, smem, b->stream>>>(logits, n, bias_ids, bias, n_bias, b->pick_d);
        LKV_CUDA_LAUNCHED(b, "pick_greedy");
        LKV_CUDA_CALL(b, cudaMemcpyAsync(b->pick_h, b->pick_d, sizeof(int32_t), cudaMemcpyDeviceToHost,
                                         b->stream), "pick_greedy: copy");
        LKV_CUDA_CALL(b, cudaStreamSynchronize(b->stream), "pick_greedy: sync");
    }
    if (b->err != cudaSuccess)
        return lkv_fail(LKV_ERR_DEVICE, "CUDA error in %s: %s", b->err_where ? b->err_where : "?",
                        cudaGetErrorString(b->err));
    *out = *b->pick_h;
    return LKV_OK;
}
