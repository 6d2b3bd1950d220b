/*
 * cuda/copier.cu: the CUDA backend's copy queue for KV streaming (the
 * "KV streaming" ops of backend.h, driven by kv/stream.c).
 *
 * - Host store: pinned memory (cudaHostAlloc), so copies run asynchronously at
 *   the link's rate; a failed allocation returns NULL and the core reports it.
 * - Copy queue: one non-blocking stream. Copies run in enqueue order (both
 *   directions share the stream: stream.c relies on a write-through d2h being
 *   ordered before a later h2d of the same rows).
 * - Tickets: copy ticket t is an event recorded after the t-th copy, in slot
 *   t % LKV_CUDA_EVENTS of a ring; a slot is reused only once its previous
 *   ticket is known complete (queried or synchronized when the ring wraps).
 *   Compute tickets (compute_mark) are events recorded on the compute stream
 *   in a second ring; waiting on a re-recorded (newer) mark is merely
 *   conservative, never wrong.
 * - Nothing here synchronizes the host per layer: waits between the queues
 *   are cudaStreamWaitEvent; compute_wait_copy only queries an event to count
 *   the waits. copy_sync (drain, state read/write, teardown) is the one host
 *   synchronization.
 */
#include <stdlib.h>

#include "common.cuh"

enum { LKV_CUDA_EVENTS = 1024 };

struct lkv_cuda_copier {
    cudaStream_t copy;
    cudaEvent_t cev[LKV_CUDA_EVENTS];   /* copy tickets */
    cudaEvent_t mev[LKV_CUDA_EVENTS];   /* compute marks */
    int n_cev, n_mev;                   /* events created (for teardown) */
    uint64_t issued;                    /* copy tickets handed out */
    uint64_t known_done;                /* every copy ticket <= this has completed */
    uint64_t marks;                     /* compute marks handed out */
    uint64_t waited_mark;               /* the copy stream already waits for this mark */
};

/* cudaErrorNotReady from a query is an answer, not an error: keep it from
 * reaching the launch checks that read cudaGetLastError. */
static void clear_not_ready(void) {
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
}

// ---------------------------------------------------------------- host memory

void *lkv_cuda_host_alloc(lkv_bctx *b, size_t bytes) {
    (void)b;
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 16, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();   /* reported by the caller as a clear error, not sticky */
        return NULL;
    }
    return p;
}

void lkv_cuda_host_free(lkv_bctx *b, void *p) {
    (void)b;
    if (p) cudaFreeHost(p);
}

// ---------------------------------------------------------------- queue

void lkv_cuda_copier_free(lkv_bctx *b) {
    lkv_cuda_copier *cp = b->copier;
    if (!cp) return;
    if (cp->copy) cudaStreamSynchronize(cp->copy);
    for (int i = 0; i < cp->n_cev; i++) cudaEventDestroy(cp->cev[i]);
    for (int i = 0; i < cp->n_mev; i++) cudaEventDestroy(cp->mev[i]);
    if (cp->copy) cudaStreamDestroy(cp->copy);
    cudaGetLastError();
    free(cp);
    b->copier = NULL;
}

lkv_status lkv_cuda_copier_init(lkv_bctx *b) {
    if (b->copier) return LKV_OK;
    lkv_cuda_copier *cp = (lkv_cuda_copier *)calloc(1, sizeof(*cp));
    if (!cp) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the CUDA copy queue");
    b->copier = cp;
    cudaError_t e = cudaStreamCreateWithFlags(&cp->copy, cudaStreamNonBlocking);
    if (e != cudaSuccess) cp->copy = NULL;
    while (e == cudaSuccess && cp->n_cev < LKV_CUDA_EVENTS) {
        e = cudaEventCreateWithFlags(&cp->cev[cp->n_cev], cudaEventDisableTiming);
        if (e == cudaSuccess) cp->n_cev++;
    }
    while (e == cudaSuccess && cp->n_mev < LKV_CUDA_EVENTS) {
        e = cudaEventCreateWithFlags(&cp->mev[cp->n_mev], cudaEventDisableTiming);
        if (e == cudaSuccess) cp->n_mev++;
    }
    if (e != cudaSuccess) {
        lkv_cuda_copier_free(b);
        return lkv_fail(LKV_ERR_DEVICE, "creating the CUDA copy stream and events: %s",
                        cudaGetErrorString(e));
    }
    return LKV_OK;
}

uint64_t lkv_cuda_copy_async(lkv_bctx *b, void *dst, const void *src, size_t bytes, int h2d) {
    return lkv_cuda_copy_async_2d(b, dst, bytes, src, bytes, bytes, 1, h2d);
}

/* `height` rows of `width` bytes (one cudaMemcpy2DAsync): the step's
 * write-through of every layer at once */
uint64_t lkv_cuda_copy_async_2d(lkv_bctx *b, void *dst, size_t dpitch, const void *src,
                                size_t spitch, size_t width, size_t height, int h2d) {
    const size_t bytes = width * height;
    lkv_cuda_copier *cp = b->copier;
    const uint64_t t = ++cp->issued;
    cudaEvent_t ev = cp->cev[t % LKV_CUDA_EVENTS];
    if (t > LKV_CUDA_EVENTS && t - LKV_CUDA_EVENTS > cp->known_done) {
        /* the ring wrapped: the slot's previous ticket must be complete first */
        LKV_CUDA_CALL(b, cudaEventSynchronize(ev), "copy_async: event ring");
        cp->known_done = t - LKV_CUDA_EVENTS;
    }
    if (bytes)
        LKV_CUDA_CALL(b, cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                           h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                           cp->copy),
                      "copy_async");
    LKV_CUDA_CALL(b, cudaEventRecord(ev, cp->copy), "copy_async: record");
    return t;
}

int lkv_cuda_compute_wait_copy(lkv_bctx *b, uint64_t t) {
    lkv_cuda_copier *cp = b->copier;
    if (!cp || t == 0 || t <= cp->known_done || t > cp->issued) return 0;
    cudaEvent_t ev = cp->cev[t % LKV_CUDA_EVENTS];
    const cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) {
        cp->known_done = t;   /* one stream: earlier tickets are done too */
        return 0;
    }
    if (q != cudaErrorNotReady) {
        lkv_cuda_note(b, q, "compute_wait_copy");
        return 0;
    }
    clear_not_ready();
    LKV_CUDA_CALL(b, cudaStreamWaitEvent(b->stream, ev, 0), "compute_wait_copy");
    return 1;
}

uint64_t lkv_cuda_compute_mark(lkv_bctx *b) {
    lkv_cuda_copier *cp = b->copier;
    if (!cp) return 0;
    const uint64_t t = ++cp->marks;
    LKV_CUDA_CALL(b, cudaEventRecord(cp->mev[t % LKV_CUDA_EVENTS], b->stream), "compute_mark");
    return t;
}

void lkv_cuda_copy_wait_compute(lkv_bctx *b, uint64_t t) {
    lkv_cuda_copier *cp = b->copier;
    if (!cp || t == 0 || t > cp->marks || t <= cp->waited_mark) return;
    LKV_CUDA_CALL(b, cudaStreamWaitEvent(cp->copy, cp->mev[t % LKV_CUDA_EVENTS], 0),
                  "copy_wait_compute");
    cp->waited_mark = t;
}

lkv_status lkv_cuda_copy_sync(lkv_bctx *b) {
    lkv_cuda_copier *cp = b->copier;
    if (cp && b->err == cudaSuccess) {
        LKV_CUDA_CALL(b, cudaStreamSynchronize(cp->copy), "copy_sync");
        if (b->err == cudaSuccess) cp->known_done = cp->issued;
    }
    if (b->err != cudaSuccess)
        return lkv_fail(LKV_ERR_DEVICE, "CUDA error in %s: %s", b->err_where ? b->err_where : "?",
                        cudaGetErrorString(b->err));
    return LKV_OK;
}
