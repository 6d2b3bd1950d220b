/*
 * cuda/get_rows.cu: out (n, cols) = rows tokens[i] of w, dequantized (the
 * token embedding). The token ids arrive in host memory: they are copied into
 * a pinned staging buffer and from there to the device on the compute stream,
 * so the copy is also valid inside a captured decode-step graph.
 */
#include <string.h>

#include "common.cuh"
#include "pdl.cuh"

// ---------------------------------------------------------------- kernel

enum { GR_THREADS = 128 };

/* one thread per 32-element group; grid (groups / GR_THREADS, n) */
template <int T>
__global__ void get_rows_kernel(float *__restrict__ out, const uint8_t *__restrict__ w,
                                size_t row_bytes, const int32_t *__restrict__ tokens, int cols,
                                int64_t n_rows) {
    pdl_enter();
    const int g = blockIdx.x * GR_THREADS + threadIdx.x;
    if (g >= cols / 32) return;
    const int i = blockIdx.y;
    int64_t tok = tokens[i];
    if (tok < 0 || tok >= n_rows) tok = 0;   /* ids are validated by the core; stay in bounds */
    float y[32];
    dq32<T>(w + (size_t)tok * row_bytes, g, y);
    float4 *o = (float4 *)(out + (size_t)i * cols + 32 * g);
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = make_float4(y[4 * k], y[4 * k + 1], y[4 * k + 2], y[4 * k + 3]);
}

// ---------------------------------------------------------------- launcher

template <int T>
static void get_rows_launch(lkv_bctx *b, float *out, const lkv_weight *w, int n) {
    const dim3 grid(lkv_cdiv(w->cols / 32, GR_THREADS), n);
    lkv_launch(b, get_rows_kernel<T>, grid, GR_THREADS, 0, out, (const uint8_t *)w->dev, w->row_bytes,
               (const int32_t *)b->d_tokens, (int)w->cols, w->rows);
    LKV_CUDA_LAUNCHED(b, "get_rows");
}

// ---------------------------------------------------------------- entry point

void lkv_cuda_get_rows(lkv_bctx *b, float *out, const lkv_weight *w, const int32_t *tokens, int n) {
    if (n <= 0) return;
    if (n > b->max_tokens || !w->dev || w->cols % 32) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "get_rows: bad arguments");
        return;
    }
    /* the staging buffer may still feed the previous copy: wait for it (not
     * while capturing: a captured step is replayed before the next one) */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    LKV_CUDA_CALL(b, cudaStreamIsCapturing(b->stream, &cs), "get_rows");
    if (cs == cudaStreamCaptureStatusNone) LKV_CUDA_CALL(b, cudaEventSynchronize(b->tokens_free), "get_rows");
    memcpy(b->h_tokens, tokens, (size_t)n * sizeof(int32_t));
    LKV_CUDA_CALL(b, cudaMemcpyAsync(b->d_tokens, b->h_tokens, (size_t)n * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, b->stream), "get_rows: upload");
    if (cs == cudaStreamCaptureStatusNone) LKV_CUDA_CALL(b, cudaEventRecord(b->tokens_free, b->stream), "get_rows");
    switch (w->type) {
#define X(T) case T: get_rows_launch<T>(b, out, w, n); break;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default:
        lkv_cuda_note(b, cudaErrorInvalidValue, "get_rows: unsupported type");
    }
}
