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
 *
 * Solo spells. On a busy machine a second thread can cost more than it
 * gives. The kernel shares CPU time between groups of processes (autogroup:
 * one group per session; cgroups), so on a 2-core machine with a few busy
 * sessions the whole process may get a third of a core however many threads
 * it runs: then every thread is a slice of that third, and a worker
 * descheduled while it holds a part stalls the caller until its next turn
 * (measured: a process at 0.3 cores decoded at 35 t/s with 1 thread, 5-26
 * t/s with 2). So the caller measures each window of WINDOW_JOBS jobs run
 * in parallel:
 *   - the CPU time the process got per second of the window (both threads
 *     are runnable all along, spinning or working): below SHARE_MIN cores,
 *     a second thread cannot pay;
 *   - the time saved: per job, the caller's own parts' time scaled to all
 *     parts (what the job would cost it alone) less the job's wall time;
 *     below MIN_GAIN of the solo estimate, the worker costs more than it
 *     gives (stalls, hand-off overhead). The estimate is scaled by the
 *     share: beside the workers the caller got share / n cores, alone it
 *     would get up to one (the group's share, as autogroup gives it, does
 *     not grow with the thread count; where threads are shared out one by
 *     one this errs towards solo spells).
 * A window whose first EARLY_JOBS jobs already took longer than the solo
 * estimate fails there (a failing probe then costs an eighth of a window).
 * A window that fails starts a solo spell: the next jobs run on the
 * caller alone and the workers park on `cv`, for one window, then 2, 4...
 * up to MAX_BACKOFF windows while the probes keep failing, and back to 1
 * after a window that passed. A window that an idle pause interrupts
 * starts again. A solo job runs the same parts in order, so the results are
 * the same bits either way.
 *
 * Probes cost: a failing parallel window runs at a fraction of solo speed,
 * and with short generations the probes between the first spells are a
 * tenth of the tokens (measured: 2 threads beside 2 busy processes 0.84x of
 * 1 thread). So a spell also measures the CPU time the caller gets per
 * second of each of its windows: below SOLO_SHARE_MIN of a core, other
 * runnable threads already hold the cores, a second thread would take its
 * time from the first, and the spell ends without a probe: the next spell
 * (twice as long) follows at once. A caller that gets its core again probes
 * at the next spell's end, as before.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/threadpool.h"

#define SPIN_ROUNDS 200000
#define PARTS_PER_THREAD 4
#define WINDOW_JOBS 256          /* jobs per measured window (a decode token is ~250) */
#define EARLY_JOBS 32            /* a window's first check: a loss by then fails it */
#define MIN_GAIN 0.05            /* a parallel window must save this share of solo time */
#define SHARE_MIN 1.25           /* ... and get this many cores' worth of CPU time */
#define MAX_BACKOFF 128          /* longest solo spell, in windows */
#define GAP_S 0.01               /* a pause between jobs this long restarts the window */
#define SOLO_SHARE_MIN 0.9       /* a solo window below this share of a core: no probe */

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
    _Atomic int park;            /* solo spell: spinning workers go to sleep */
    /* the caller's accounting (only the caller touches these) */
    int solo_left;               /* jobs left in this solo spell */
    int backoff;                 /* windows of the next solo spell */
    int win_jobs;                /* jobs measured in this window */
    double win_solo, win_gain;   /* seconds: solo estimate, and estimate - wall */
    double win_t0, win_cpu0;     /* the window's start: wall and process CPU time */
    double last_end;             /* when the last parallel job ended */
    int solo_jobs;               /* jobs measured in this solo window */
    double solo_t0, solo_cpu0;   /* the solo window's start: wall and the caller's CPU time */
    pthread_t solo_thread;       /* ... and the thread whose CPU clock solo_cpu0 read */
    double solo_end;             /* when the last solo job ended */
    double solo_share;           /* the caller's cores in the last whole solo window (1 before any) */
};

typedef struct { lkv_threadpool *tp; int ith; } worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

/* claim and run parts of job `gen` until none is left; returns how many */
static int run_parts(lkv_threadpool *tp, unsigned gen, int thread) {
    for (int ran = 0;; ran++) {
        uint64_t w = atomic_load_explicit(&tp->work, memory_order_acquire);
        if ((unsigned)(w >> 32) != gen) return ran;      /* another job by now */
        const int part = (int)(uint32_t)w;
        if (part >= tp->n_parts) return ran;              /* all claimed */
        if (!atomic_compare_exchange_weak_explicit(&tp->work, &w, w + 1,
                                                   memory_order_acq_rel, memory_order_acquire)) {
            ran--;
            continue;
        }
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
            if (++spins < SPIN_ROUNDS && !atomic_load_explicit(&tp->park, memory_order_relaxed)) {
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
    tp->backoff = 1;
    tp->solo_share = 1;
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

/* a window failed: the next jobs run on the caller alone, the workers park */
static void start_spell(lkv_threadpool *tp) {
    tp->solo_left = tp->backoff * WINDOW_JOBS;
    if (tp->backoff < MAX_BACKOFF) tp->backoff *= 2;
    atomic_store_explicit(&tp->park, 1, memory_order_relaxed);
    tp->win_jobs = 0;
    tp->win_solo = tp->win_gain = 0;
}

/* the job just run in parallel: own_s on the caller's n_own parts, wall_s in all */
static void account(lkv_threadpool *tp, double own_s, int n_own, double wall_s) {
    if (n_own > 0) {             /* else the workers took every part: no estimate */
        const double solo = own_s * tp->n_parts / n_own;
        tp->win_solo += solo;
        tp->win_gain += solo - wall_s;
    }
    if (++tp->win_jobs < WINDOW_JOBS) {
        /* already slower than the caller alone: the rest of the window would
         * only add to the loss */
        if (tp->win_jobs == EARLY_JOBS && tp->win_gain < 0) start_spell(tp);
        return;
    }
    const double share = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - tp->win_cpu0) /
                         (now_s() - tp->win_t0);
    /* the caller ran at share / n cores beside the workers; alone it would get
     * up to a core of the process's share: the solo estimate shrinks by that */
    const double per_thread = share / tp->n < 1 ? share / tp->n : 1;
    const double solo = tp->win_solo * per_thread / (share < 1 ? share : 1);
    const double wall = tp->win_solo - tp->win_gain;
    if (share < SHARE_MIN || solo - wall < MIN_GAIN * solo) {
        start_spell(tp);
        return;
    }
    tp->backoff = 1;
    tp->win_jobs = 0;
    tp->win_solo = tp->win_gain = 0;
}

/* one job of a solo spell, and the spell's accounting: the caller's share of a
 * core per window; at the spell's end, a share below SOLO_SHARE_MIN starts the
 * next spell instead of a probe */
static void solo_job(lkv_threadpool *tp, lkv_tp_fn fn, void *arg, int n_parts) {
    const double t0 = now_s();
    const pthread_t self = pthread_self();
    /* a window starts: after a pause (not measured), and when another thread
     * calls (Python runs a prefill on a helper thread and decodes on its own:
     * one thread's CPU clock against another's would read as any share) */
    if (tp->solo_jobs == 0 || t0 - tp->solo_end > GAP_S ||
        !pthread_equal(tp->solo_thread, self)) {
        tp->solo_jobs = 0;
        tp->solo_t0 = t0;
        tp->solo_thread = self;
        tp->solo_cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    }
    for (int part = 0; part < n_parts; part++) fn(arg, part, n_parts, 0);
    tp->solo_end = now_s();
    if (++tp->solo_jobs == WINDOW_JOBS) {
        const double wall = tp->solo_end - tp->solo_t0;
        if (wall > 0) tp->solo_share = (clock_s(CLOCK_THREAD_CPUTIME_ID) - tp->solo_cpu0) / wall;
        tp->solo_jobs = 0;
    }
    if (--tp->solo_left == 0 && tp->solo_share < SOLO_SHARE_MIN) {
        tp->solo_left = tp->backoff * WINDOW_JOBS;
        if (tp->backoff < MAX_BACKOFF) tp->backoff *= 2;
    }
}

void lkv_tp_run(lkv_threadpool *tp, lkv_tp_fn fn, void *arg) {
    if (tp->n == 1) { fn(arg, 0, 1, 0); return; }
    const int n_parts = tp->n * PARTS_PER_THREAD;
    if (tp->solo_left > 0) {     /* the same parts, in order, on the caller */
        solo_job(tp, fn, arg, n_parts);
        return;
    }
    const double t0 = now_s();
    if (t0 - tp->last_end > GAP_S) {
        tp->win_jobs = 0;
        tp->win_solo = tp->win_gain = 0;
    }
    if (tp->win_jobs == 0) {     /* a window starts (an idle pause is not measured) */
        atomic_store_explicit(&tp->park, 0, memory_order_relaxed);
        tp->win_t0 = t0;
        tp->win_cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    }
    const unsigned gen = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    tp->fn = fn;
    tp->arg = arg;
    tp->n_parts = n_parts;
    atomic_store_explicit(&tp->finished, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->work, (uint64_t)gen << 32, memory_order_release);
    atomic_store(&tp->gen, gen);    /* seq_cst: ordered before the sleepers check */
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    const int n_own = run_parts(tp, gen, 0);
    const double t1 = now_s();
    /* parts still running elsewhere: spin briefly, then yield (with more
     * runnable threads than cores the thread we wait for may need this core) */
    for (int spins = 0;
         atomic_load_explicit(&tp->finished, memory_order_acquire) < tp->n_parts; spins++) {
        if (spins < 4096) cpu_relax();
        else sched_yield();
    }
    tp->last_end = now_s();
    account(tp, t1 - t0, n_own, tp->last_end - t0);
}
