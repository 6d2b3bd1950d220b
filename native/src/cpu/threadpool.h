/*
 * cpu/threadpool.h: a persistent pool of worker threads for the CPU backend.
 *
 * lkv_tp_run(tp, fn, arg) runs fn(arg, ith, nth) on all nth threads (the
 * caller is thread 0) and returns when every one has finished. Workers spin
 * briefly between jobs (decode issues hundreds of jobs per token) and then
 * sleep on a condition variable, so an idle context costs no CPU.
 */
#ifndef LKV_CPU_THREADPOOL_H
#define LKV_CPU_THREADPOOL_H

typedef void (*lkv_tp_fn)(void *arg, int ith, int nth);
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
