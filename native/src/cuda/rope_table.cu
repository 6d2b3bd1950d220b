/*
 * cuda/rope_table.cu: the rope angles of a step's positions, computed on the
 * host and uploaded, so that the GPU rotates by exactly the CPU's cos/sin:
 * glibc's cosf/sinf are not always the correctly rounded value (about 1% of
 * the angles differ from the rounded f64 cos), which no device formula
 * reproduces. lkv_rope_angles (cpu/ops.c) fills a pinned staging buffer of
 * (n, rope_dim/2) (cos, sin) pairs, one async copy brings it over, and rope /
 * rope_store read row t for token t. The upload happens once per step (the
 * key: geometry, first position, count); q's and k's rope share it.
 *
 * Decode-step graphs: the capture records the copy from the staging buffer;
 * before each replay step_begin refills the staging with the new positions
 * (lkv_cuda_rope_replay), so the replayed copy brings the right angles. When
 * the table cannot serve a call (more pairs or tokens than it holds, or a
 * device factor array it cannot read during a capture) the kernels compute
 * cos/sin themselves (f64, rounded).
 */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

cudaError_t lkv_cuda_rope_alloc(lkv_bctx *b, int pairs) {
    b->rope_cap = pairs;
    const size_t bytes = sizeof(float) * 2 * (size_t)pairs * b->max_tokens;
    cudaError_t e = cudaMallocHost((void **)&b->rope_h, bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->rope_d, bytes);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b->rope_free, cudaEventDisableTiming);
    return e;
}

void lkv_cuda_rope_release(lkv_bctx *b) {
    if (b->rope_free) cudaEventDestroy(b->rope_free);
    if (b->rope_d) cudaFree(b->rope_d);
    if (b->rope_h) cudaFreeHost(b->rope_h);
    free(b->rope_ff_copy);
}

static bool same_angles(const lkv_rope_desc *a, const lkv_rope_desc *b) {
    return a->rope_dim == b->rope_dim && a->freq_base == b->freq_base &&
           a->freq_scale == b->freq_scale && a->freq_factors == b->freq_factors;
}

/* the factors in host memory: the model's own copy, or one read back (not
 * possible while a capture is running: false) */
static bool host_factors(lkv_bctx *b, const float *dev, int pairs, const float **out) {
    *out = NULL;
    if (!dev) return true;
    if (b->m && b->m->rope_freqs.dev == dev && b->m->rope_freqs.data) {
        *out = (const float *)b->m->rope_freqs.data;
        return true;
    }
    if (b->rope_ff_src != dev) {
        if (b->capturing) return false;
        float *copy = (float *)realloc(b->rope_ff_copy, sizeof(float) * pairs);
        if (!copy) return false;
        b->rope_ff_copy = copy;
        if (cudaMemcpy(copy, dev, sizeof(float) * pairs, cudaMemcpyDeviceToHost) != cudaSuccess) {
            cudaGetLastError();
            b->rope_ff_src = NULL;
            return false;
        }
        b->rope_ff_src = dev;
    }
    *out = b->rope_ff_copy;
    return true;
}

static void fill(lkv_bctx *b, int32_t pos0, int n) {
    const int pairs = b->rope_desc.rope_dim / 2;
    for (int t = 0; t < n; t++)
        lkv_rope_angles(&b->rope_desc, b->rope_ff, pos0 + t, b->rope_h + (size_t)2 * pairs * t);
    b->rope_pos0 = pos0;
    b->rope_n = n;
}

const float2 *lkv_cuda_rope_table(lkv_bctx *b, const lkv_rope_desc *r, int32_t pos0, int n) {
    const int pairs = r->rope_dim / 2;
    if (!b->rope_d || pairs > b->rope_cap || n > b->max_tokens) return NULL;
    const bool same = b->rope_have && same_angles(r, &b->rope_desc) && pos0 == b->rope_pos0 &&
                      n == b->rope_n;
    /* a capture records its own upload, even of angles already on the device */
    if (same && (!b->capturing || b->rope_in_capture)) return (const float2 *)b->rope_d;
    const float *ff;
    if (!host_factors(b, r->freq_factors, pairs, &ff)) return NULL;
    /* outside a capture: the previous upload has left the staging buffer
     * (step_begin waits for it before a capture) */
    if (!b->capturing) LKV_CUDA_CALL(b, cudaEventSynchronize(b->rope_free), "rope angles");
    b->rope_desc = *r;
    b->rope_ff = ff;
    fill(b, pos0, n);
    LKV_CUDA_CALL(b, cudaMemcpyAsync(b->rope_d, b->rope_h, sizeof(float) * 2 * pairs * n,
                                     cudaMemcpyHostToDevice, b->stream), "rope angles");
    if (b->capturing) b->rope_in_capture = 1;
    else LKV_CUDA_CALL(b, cudaEventRecord(b->rope_free, b->stream), "rope angles");
    b->rope_have = 1;
    return (const float2 *)b->rope_d;
}

void lkv_cuda_rope_capture_begin(lkv_bctx *b) {
    if (b->rope_free) LKV_CUDA_CALL(b, cudaEventSynchronize(b->rope_free), "rope angles");
    b->rope_in_capture = 0;
}

/* kept: the capture became graph_exec (which then runs); otherwise its
 * recorded upload never runs, and the next direct call uploads again */
void lkv_cuda_rope_capture_end(lkv_bctx *b, bool kept) {
    if (kept) b->rope_in_graph = b->rope_in_capture;
    else if (b->rope_in_capture) b->rope_have = 0;
    b->rope_in_capture = 0;
}

void lkv_cuda_rope_replay(lkv_bctx *b, int32_t pos0, int n) {
    if (!b->rope_in_graph) return;
    LKV_CUDA_CALL(b, cudaEventSynchronize(b->rope_free), "rope angles");
    fill(b, pos0, n);
}

void lkv_cuda_rope_replayed(lkv_bctx *b) {
    if (b->rope_in_graph) LKV_CUDA_CALL(b, cudaEventRecord(b->rope_free, b->stream), "rope angles");
}
