/*
 * cpu/threadpool.c: persistent workers (see threadpool.h).
 *
 * A job is cut into parts (PARTS_PER_THREAD per thread) that threads claim
 * one at a time from a shared counter, and the caller waits only for the
 * parts, not for the workers: a worker that is descheduled (a busy machine
 * has more runnable threads than cores) simply claims fewer parts, and one
 * that wakes after the last part was claimed does nothing. With a static
 * split each job would wait for its slowest thread, and a decode step issues
 * hundreds of jobs, so under contention two threads ran far slower than one.
 *
 * The claim counter holds the job's generation in its high 32 bits and the
 * next part in its low 32 bits, so a claim (a compare-and-swap) can only take
 * a part of the job the claimer saw published. The caller publishes the next
 * job only after every part of this one has finished, so fn, arg and n_parts
 * stay those of the claimed part's job while it runs.
 *
 * Workers spin on the generation for a while (cheap hand-off between the
 * small jobs of a decode step), yielding now and then, and then block on `cv`
 * until the next job.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/threadpool.h"

#define SPIN_ROUNDS 200000
#define PARTS_PER_THREAD 4

struct lkv_threadpool {
    int n;                       /* threads including the caller */
    pthread_t *threads;          /* (n-1,) workers */
    _Atomic unsigned gen;        /* job generation (wakes workers) */
    _Atomic uint64_t work;       /* gen << 32 | next part to claim */
    _Atomic int finished;        /* parts of this job done */
    _Atomic int stop;
    int n_parts;
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

/* claim and run parts of job `gen` until none is left */
static void run_parts(lkv_threadpool *tp, unsigned gen, int thread) {
    for (;;) {
        uint64_t w = atomic_load_explicit(&tp->work, memory_order_acquire);
        if ((unsigned)(w >> 32) != gen) return;          /* another job by now */
        const int part = (int)(uint32_t)w;
        if (part >= tp->n_parts) return;                  /* all claimed */
        if (!atomic_compare_exchange_weak_explicit(&tp->work, &w, w + 1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        tp->fn(tp->arg, part, tp->n_parts, thread);
        atomic_fetch_add_explicit(&tp->finished, 1, memory_order_release);
    }
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
        run_parts(tp, g, wa.ith);
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
    if (tp->n == 1) { fn(arg, 0, 1, 0); return; }
    const unsigned gen = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    tp->fn = fn;
    tp->arg = arg;
    tp->n_parts = tp->n * PARTS_PER_THREAD;
    atomic_store_explicit(&tp->finished, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->work, (uint64_t)gen << 32, memory_order_release);
    atomic_store(&tp->gen, gen);    /* seq_cst: ordered before the sleepers check */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    run_parts(tp, gen, 0);
    /* parts still running elsewhere: spin briefly, then yield (with more
     * runnable threads than cores the thread we wait for may need this core) */
    for (int spins = 0;
         atomic_load_explicit(&tp->finished, memory_order_acquire) < tp->n_parts; spins++) {
        if (spins < 4096) cpu_relax();
        else sched_yield();
    }
}
