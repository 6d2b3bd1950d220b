/*
 * cuda/rope_table.cu: the rope angles of a step's positions, computed on the
 * host and uploaded, so that the GPU rotates by exactly the CPU's cos/sin:
 * glibc's cosf/sinf are not always the correctly rounded value (about 1% of
 * the angles differ from the rounded f64 cos), which no device formula
 * reproduces. lkv_rope_angles (cpu/ops.c) fills a pinned staging buffer of
 * (n, rope_dim/2) (cos, sin) pairs, one async copy brings it over, and rope /
 * rope_store read row t for token t. The upload happens once per step and
 * sequence (the key: geometry, first position, count); q's and k's rope and
 * every layer share it. The buffers hold 2 * max_tokens rows: each upload
 * takes the next free rows, so the tables of the sequences of one step (one
 * rope call each per layer) stay side by side, and the host waits for the
 * previous uploads only when the rows run out (a wrap), not per upload.
 *
 * Each entry has its own geometry: a model whose layers rotate with two bases
 * (gemma3's local and global layers) keeps both tables of a step side by side
 * instead of uploading again (and waiting for the staging) at every switch.
 *
 * Decode-step graphs: the capture records the copies from the staging buffer,
 * one per geometry, each to its own rows; before each replay step_begin
 * refills those staging rows with the new positions (lkv_cuda_rope_replay),
 * so the replayed copies bring the right angles. When
 * the table cannot serve a call (more pairs or tokens than it holds, or a
 * device factor array it cannot read during a capture) the kernels compute
 * cos/sin themselves (f64, rounded).
 */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

/* bytes of the table (device, and as much pinned on the host); the memory plan
 * (backend.cu lkv_cuda_ctx_plan) asks it too */
size_t lkv_cuda_rope_bytes(int pairs, int max_tokens) {
    return sizeof(float) * 2 * (size_t)pairs * 2 * (size_t)max_tokens;
}

cudaError_t lkv_cuda_rope_alloc(lkv_bctx *b, int pairs) {
    b->rope_cap = pairs;
    const size_t bytes = lkv_cuda_rope_bytes(pairs, b->max_tokens);
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

/* angles of positions pos0 .. pos0 + n - 1 of geometry r (freq factors ff, host)
 * into the staging from float off (n rows of rope_dim / 2 pairs), kept as an entry */
static void fill(lkv_bctx *b, const lkv_rope_desc *r, const float *ff, int32_t off, int32_t pos0, int n) {
    const int pairs = r->rope_dim / 2;
    for (int t = 0; t < n; t++)
        lkv_rope_angles(r, ff, pos0 + t, b->rope_h + off + (size_t)2 * pairs * t);
    const int e = b->rope_entries++;
    b->rope_pos0[e] = pos0;
    b->rope_n[e] = n;
    b->rope_row[e] = off;
    b->rope_desc[e] = *r;
    b->rope_ff[e] = ff;
    b->rope_cursor = off + 2 * pairs * n;
}

/* forget every entry; the next upload starts at row 0 (wait: the staging's
 * earlier uploads must have left it) */
static void wrap(lkv_bctx *b) {
    if (b->rope_entries) LKV_CUDA_CALL(b, cudaEventSynchronize(b->rope_free), "rope angles");
    b->rope_entries = 0;
    b->rope_cursor = 0;
}

const float2 *lkv_cuda_rope_table(lkv_bctx *b, const lkv_rope_desc *r, int32_t pos0, int n) {
    const int pairs = r->rope_dim / 2;
    if (!b->rope_d || pairs > b->rope_cap || n > b->max_tokens) return NULL;
    /* a capture records its own uploads, even of angles already on the device */
    if (!b->capturing || b->rope_in_capture) {
        for (int e = 0; e < b->rope_entries; e++)
            if (b->rope_pos0[e] == pos0 && b->rope_n[e] == n && same_angles(r, &b->rope_desc[e]))
                return (const float2 *)(b->rope_d + b->rope_row[e]);
    }
    const float *ff;
    if (!host_factors(b, r->freq_factors, pairs, &ff)) return NULL;
    /* a capture's first upload starts at row 0 (step_begin waited for the staging
     * before the capture), its others follow; elsewhere the next free rows */
    if (b->capturing && !b->rope_in_capture) {
        b->rope_entries = 0;
        b->rope_cursor = 0;
    } else if (b->rope_entries == LKV_ROPE_ENTRIES ||
               (size_t)b->rope_cursor + (size_t)2 * pairs * n > lkv_cuda_rope_bytes(b->rope_cap, b->max_tokens) / sizeof(float)) {
        if (b->capturing) return NULL;   /* a capture that outgrows the rows: computed in the kernels */
        wrap(b);
    }
    const int32_t off = b->rope_cursor;
    fill(b, r, ff, off, pos0, n);
    LKV_CUDA_CALL(b, cudaMemcpyAsync(b->rope_d + off, b->rope_h + off,
                                     sizeof(float) * 2 * pairs * n, cudaMemcpyHostToDevice,
                                     b->stream), "rope angles");
    if (b->capturing) {
        b->rope_in_capture = 1;
        b->rope_cap_entries = b->rope_entries;
    } else {
        LKV_CUDA_CALL(b, cudaEventRecord(b->rope_free, b->stream), "rope angles");
    }
    return (const float2 *)(b->rope_d + off);
}

void lkv_cuda_rope_capture_begin(lkv_bctx *b) {
    if (b->rope_free) LKV_CUDA_CALL(b, cudaEventSynchronize(b->rope_free), "rope angles");
    b->rope_in_capture = 0;
}

/* kept: the capture became graph_exec (which then runs); otherwise its
 * recorded upload never runs, and the next direct call uploads again */
void lkv_cuda_rope_capture_end(lkv_bctx *b, bool kept) {
    if (kept) b->rope_in_graph = b->rope_in_capture;
    else if (b->rope_in_capture) b->rope_entries = b->rope_cursor = 0;
    b->rope_in_capture = 0;
}

/* the graph's recorded upload brings staging rows 0 .. n - 1 to the device:
 * refill them (every earlier upload has left the staging first); the entries
 * before are overwritten on the device, so they go */
void lkv_cuda_rope_replay(lkv_bctx *b, int32_t pos0, int n) {
    if (!b->rope_in_graph) return;
    LKV_CUDA_CALL(b, cudaEventSynchronize(b->rope_free), "rope angles");
    /* the captured uploads, one per geometry, each at its place in the staging
     * (the capture's first upload was at 0, each next one after it) */
    const int k = b->rope_cap_entries;
    lkv_rope_desc desc[LKV_ROPE_ENTRIES];
    const float *ff[LKV_ROPE_ENTRIES];
    int32_t off[LKV_ROPE_ENTRIES];
    for (int e = 0; e < k; e++) {
        desc[e] = b->rope_desc[e];
        ff[e] = b->rope_ff[e];
        off[e] = b->rope_row[e];
    }
    b->rope_entries = 0;
    for (int e = 0; e < k; e++) fill(b, &desc[e], ff[e], off[e], pos0, n);
}

void lkv_cuda_rope_replayed(lkv_bctx *b) {
    if (b->rope_in_graph) LKV_CUDA_CALL(b, cudaEventRecord(b->rope_free, b->stream), "rope angles");
}
