/*
 * cpu/copier.c: the CPU backend's copy queue, the "emulated device" link.
 *
 * With a bounded KV pool the CPU backend plays a device: the pool is its own
 * arena and every host <-> pool transfer goes through this queue, run by one
 * copy thread in enqueue order, concurrently with compute. Compute on the CPU
 * is synchronous, so compute tickets are immediate and copies never have to
 * wait for compute; compute waits for copies through their tickets.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "error.h"

#define QUEUE_LEN 1024

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;            /* per row */
    size_t rows, dpitch, spitch;
} copy_job;

struct lkv_cpu_copier {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work;     /* signalled when a job is queued or stop set */
    pthread_cond_t cv_done;     /* signalled when a job finishes */
    copy_job q[QUEUE_LEN];
    uint64_t issued;            /* tickets handed out (job k has ticket k+1) */
    _Atomic uint64_t done;      /* jobs finished */
    int stop;
};

static void *copier_main(void *arg) {
    lkv_cpu_copier *cp = arg;
    pthread_mutex_lock(&cp->mu);
    for (;;) {
        while (!cp->stop && atomic_load(&cp->done) == cp->issued)
            pthread_cond_wait(&cp->cv_work, &cp->mu);
        if (atomic_load(&cp->done) == cp->issued && cp->stop) break;
        copy_job j = cp->q[atomic_load(&cp->done) % QUEUE_LEN];
        pthread_mutex_unlock(&cp->mu);
        for (size_t r = 0; r < j.rows; r++)
            memcpy((char *)j.dst + r * j.dpitch, (const char *)j.src + r * j.spitch, j.bytes);
        pthread_mutex_lock(&cp->mu);
        atomic_fetch_add(&cp->done, 1);
        pthread_cond_broadcast(&cp->cv_done);
    }
    pthread_mutex_unlock(&cp->mu);
    return NULL;
}

lkv_status lkv_cpu_copier_init(lkv_bctx *b) {
    if (b->copier) return LKV_OK;
    lkv_cpu_copier *cp = calloc(1, sizeof *cp);
    if (!cp) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the copy queue");
    pthread_mutex_init(&cp->mu, NULL);
    pthread_cond_init(&cp->cv_work, NULL);
    pthread_cond_init(&cp->cv_done, NULL);
    if (pthread_create(&cp->thread, NULL, copier_main, cp) != 0) {
        free(cp);
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "cannot start the copy thread");
    }
    b->copier = cp;
    return LKV_OK;
}

void lkv_cpu_copier_free(lkv_cpu_copier *cp) {
    if (!cp) return;
    pthread_mutex_lock(&cp->mu);
    cp->stop = 1;
    pthread_cond_broadcast(&cp->cv_work);
    pthread_mutex_unlock(&cp->mu);
    pthread_join(cp->thread, NULL);
    pthread_mutex_destroy(&cp->mu);
    pthread_cond_destroy(&cp->cv_work);
    pthread_cond_destroy(&cp->cv_done);
    free(cp);
}

uint64_t lkv_cpu_copy_async_2d(lkv_bctx *b, void *dst, size_t dpitch, const void *src,
                               size_t spitch, size_t width, size_t height, int h2d) {
    (void)h2d;
    lkv_cpu_copier *cp = b->copier;
    pthread_mutex_lock(&cp->mu);
    while (cp->issued - atomic_load(&cp->done) >= QUEUE_LEN)
        pthread_cond_wait(&cp->cv_done, &cp->mu);
    cp->q[cp->issued % QUEUE_LEN] = (copy_job){dst, src, width, height, dpitch, spitch};
    uint64_t t = ++cp->issued;
    pthread_cond_signal(&cp->cv_work);
    pthread_mutex_unlock(&cp->mu);
    return t;
}

uint64_t lkv_cpu_copy_async(lkv_bctx *b, void *dst, const void *src, size_t bytes, int h2d) {
    return lkv_cpu_copy_async_2d(b, dst, 0, src, 0, bytes, 1, h2d);
}

int lkv_cpu_compute_wait_copy(lkv_bctx *b, uint64_t t) {
    lkv_cpu_copier *cp = b->copier;
    if (!cp || atomic_load(&cp->done) >= t) return 0;
    pthread_mutex_lock(&cp->mu);
    while (atomic_load(&cp->done) < t) pthread_cond_wait(&cp->cv_done, &cp->mu);
    pthread_mutex_unlock(&cp->mu);
    return 1;
}

lkv_status lkv_cpu_copy_sync(lkv_bctx *b) {
    lkv_cpu_copier *cp = b->copier;
    if (!cp) return LKV_OK;
    pthread_mutex_lock(&cp->mu);
    uint64_t t = cp->issued;
    pthread_mutex_unlock(&cp->mu);
    lkv_cpu_compute_wait_copy(b, t);
    return LKV_OK;
}
