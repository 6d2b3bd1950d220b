/*
 * cpu/threadpool.h: a persistent pool of worker threads for the CPU backend.
 *
 * lkv_tp_run(tp, fn, arg) runs fn(arg, part, n_parts, thread) once for each
 * part of [0, n_parts) (a few parts per thread), each part on whichever
 * thread claims it first (the caller is thread 0; `thread` indexes per-thread
 * scratch), and returns when every part has finished. A part's work is the
 * part-th of n_parts near-equal shares (lkv_split). Workers spin briefly
 * between jobs (decode issues hundreds of jobs per token) and then sleep on a
 * condition variable, so an idle context costs no CPU. When a second thread
 * does not pay (a busy machine), jobs run on the caller alone for a while
 * (threadpool.c: solo spells); the parts, and so the results, stay the same.
 * One caller at a time, from any thread (jobs may come from several in turn).
 */
#ifndef LKV_CPU_THREADPOOL_H
#define LKV_CPU_THREADPOOL_H

typedef void (*lkv_tp_fn)(void *arg, int part, int n_parts, int thread);
typedef struct lkv_threadpool lkv_threadpool;

/* NULL on failure (then no thread is left running). */
lkv_threadpool *lkv_tp_create(int n_threads);
void lkv_tp_free(lkv_threadpool *tp);
int lkv_tp_size(const lkv_threadpool *tp);
void lkv_tp_run(lkv_threadpool *tp, lkv_tp_fn fn, void *arg);

/* [*lo, *hi) = the ith of nth near-equal parts of [0, n) */
static inline void lkv_split(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

#endif
