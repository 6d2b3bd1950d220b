/*
 * cuda/to_type.cu: dst (n_rows, row_bytes(type, n_elems)) = src (n_rows, n_elems)
 * converted to a KV type. One thread quantizes one 32-element block with the
 * CPU's arithmetic (kv_quant.cuh), so the bytes equal the CPU's.
 */
#include "kv_quant.cuh"

// ---------------------------------------------------------------- kernel

enum { TT_THREADS = 128 };

/* one thread per 32-element block of one row; in a captured step (dpos set)
 * the rows land (*dpos - cap_pos0) rows after dst: the KV rows of the
 * position the step is replayed at (common.cuh) */
template <int T>
__global__ void to_type_kernel(uint8_t *dst, const float *src, int64_t n_blocks, int n_elems,
                               const int32_t *dpos, int32_t cap_pos0) {
    const int64_t i = blockIdx.x * (int64_t)TT_THREADS + threadIdx.x;
    if (i >= n_blocks) return;
    const int per_row = n_elems / 32;
    const int64_t row = i / per_row;
    const int g = (int)(i % per_row);
    const size_t row_bytes = (size_t)per_row * group_bytes<T>();
    if (dpos) dst += (int64_t)(*dpos - cap_pos0) * (int64_t)row_bytes;
    float x[32];
    const float4 *s = (const float4 *)(src + row * n_elems + 32 * g);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float4 v = s[k];
        x[4 * k] = v.x; x[4 * k + 1] = v.y; x[4 * k + 2] = v.z; x[4 * k + 3] = v.w;
    }
    quant32<T>(x, dst + row * row_bytes + (size_t)g * group_bytes<T>());
}

// ---------------------------------------------------------------- launcher / entry point

template <int T>
static void to_type_launch(lkv_bctx *b, void *dst, const float *src, int n_rows, int n_elems) {
    const int64_t nb = (int64_t)n_rows * (n_elems / 32);
    to_type_kernel<T><<<lkv_cdiv(nb, TT_THREADS), TT_THREADS, 0, b->stream>>>(
        (uint8_t *)dst, src, nb, n_elems, b->dyn_pos, b->cap_pos0);
    LKV_CUDA_LAUNCHED(b, "to_type");
}

void lkv_cuda_to_type(lkv_bctx *b, void *dst, int32_t type, const float *src, int n_rows, int n_elems) {
    if (n_rows <= 0) return;
    if (n_elems % 32) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "to_type: row length not a multiple of 32");
        return;
    }
    switch (type) {
#define X(T) case T: to_type_launch<T>(b, dst, src, n_rows, n_elems); break;
        LKV_CUDA_KV_TYPES(X)
#undef X
    default:
        lkv_cuda_note(b, cudaErrorInvalidValue, "to_type: unsupported KV type");
    }
}
