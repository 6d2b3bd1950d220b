/*
 * cpu/threadpool.c: persistent workers (see threadpool.h).
 *
 * A job is published by bumping `gen`; each worker runs it and bumps `done`.
 * Workers spin on `gen` for a while (cheap hand-off between the many small
 * jobs of a decode step) and then block on `cv` until the next job.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu/threadpool.h"

#define SPIN_ROUNDS 200000

struct lkv_threadpool {
    int n;                       /* threads including the caller */
    pthread_t *threads;          /* (n-1,) workers */
    _Atomic unsigned gen;        /* job generation */
    _Atomic int done;            /* workers finished with this generation */
    _Atomic int stop;
    lkv_tp_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int sleepers;
};

typedef struct { lkv_threadpool *tp; int ith; } worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    lkv_threadpool *tp = wa.tp;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen) {
            if (atomic_load(&tp->stop)) return NULL;
            if (++spins < SPIN_ROUNDS) {
                if (spins & 1023) cpu_relax();
                else sched_yield();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->sleepers, 1);
            while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->mu);
            spins = 0;
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        tp->fn(tp->arg, wa.ith, tp->n);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_release);
    }
}

lkv_threadpool *lkv_tp_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    lkv_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) { free(tp); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || (wa->tp = tp, wa->ith = i,
                    pthread_create(&tp->threads[i - 1], NULL, worker_main, wa) != 0)) {
            free(wa);
            tp->n = i;           /* only threads 1..i-1 exist */
            lkv_tp_free(tp);
            return NULL;
        }
    }
    return tp;
}

int lkv_tp_size(const lkv_threadpool *tp) { return tp->n; }

void lkv_tp_free(lkv_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

void lkv_tp_run(lkv_threadpool *tp, lkv_tp_fn fn, void *arg) {
    if (tp->n == 1) { fn(arg, 0, 1); return; }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_fetch_add(&tp->gen, 1);  /* seq_cst: ordered before the sleepers check */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    fn(arg, 0, tp->n);
    /* spin briefly, then yield: with more runnable threads than cores the
     * worker we wait for may need this core */
    for (int spins = 0; atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n - 1; spins++) {
        if (spins < 4096) cpu_relax();
        else sched_yield();
    }
}
