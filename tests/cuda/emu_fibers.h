/*
 * tests/cuda/emu_fibers.h: CUDA thread blocks run on the CPU, for the kernel
 * emulators (emu_deltanet.cpp, emu_deltanet_chunk.cpp), which include a
 * kernel's .cu file built without its CUDA headers and launcher.
 *
 * One block at a time, each CUDA thread a ucontext fiber on one OS thread:
 * __syncthreads waits until every thread of the block has reached it, a warp
 * collective (shuffle; the emulators' mma) until the 32 lanes of the warp
 * have (each lane's value published, then read back after a second
 * rendezvous, as the hardware exchanges them). run_block reports a deadlock.
 */
#ifndef LKV_EMU_FIBERS_H
#define LKV_EMU_FIBERS_H

#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <vector>

#include "cpu/expf.h"

// ---------------------------------------------------------------- the CUDA surface the kernel uses

#define __global__
#define __launch_bounds__(x)
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define lkv_expf_cpu ggml_like_expf

struct emu_dim3 { unsigned x, y, z; };
static emu_dim3 threadIdx, blockIdx, gridDim;
/* the kernel's `extern __shared__ float sm[]` is the including file's global sm */

enum { N_THREADS = 512, STACK = 1 << 16 };   /* N_THREADS: the most a block may have */
enum wait_kind { RUN, SHFL, SYNC, DONE };

static ucontext_t sched_ctx, fib_ctx[N_THREADS];
static wait_kind state[N_THREADS];
static int cur;
static int n_threads = 128;              /* this block's threads */
static float shfl_buf[N_THREADS];

static void yield_as(wait_kind w) {
    state[cur] = w;
    swapcontext(&fib_ctx[cur], &sched_ctx);
    threadIdx.x = (unsigned)cur;         /* the scheduler ran other fibers meanwhile */
}

static void __syncthreads() { yield_as(SYNC); }

static float __shfl_xor_sync(unsigned, float v, int o) {
    const int t = cur;
    shfl_buf[t] = v;
    yield_as(SHFL);                      /* every lane has published */
    const float r = shfl_buf[t ^ o];
    yield_as(SHFL);                      /* every lane has read */
    return r;
}

static float lkv_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---------------------------------------------------------------- the block scheduler

static void (*body)(void);
static void fiber_main(void) {
    body();
    state[cur] = DONE;
    swapcontext(&fib_ctx[cur], &sched_ctx);
}

/* runs body() as nt (<= N_THREADS) threads of block (bx, by); false on a deadlock */
static bool run_block(void (*fn)(void), unsigned bx, unsigned by, int nt = 128) {
    n_threads = nt;
    static std::vector<char> stacks((size_t)N_THREADS * STACK);
    body = fn;
    for (int t = 0; t < n_threads; t++) {
        getcontext(&fib_ctx[t]);
        fib_ctx[t].uc_stack.ss_sp = &stacks[(size_t)t * STACK];
        fib_ctx[t].uc_stack.ss_size = STACK;
        fib_ctx[t].uc_link = &sched_ctx;
        makecontext(&fib_ctx[t], fiber_main, 0);
        state[t] = RUN;
    }
    blockIdx = {bx, by, 0};
    for (;;) {
        bool ran = false;
        for (int t = 0; t < n_threads; t++) {
            if (state[t] != RUN) continue;
            cur = t;
            threadIdx = {(unsigned)t, 0, 0};
            swapcontext(&sched_ctx, &fib_ctx[t]);
            ran = true;
        }
        int done = 0, sync = 0;
        for (int t = 0; t < n_threads; t++) done += state[t] == DONE, sync += state[t] == SYNC;
        if (done == n_threads) return true;
        bool released = false;
        for (int w = 0; w < n_threads / 32; w++) {
            int sh = 0;
            for (int l = 0; l < 32; l++) sh += state[32 * w + l] == SHFL;
            if (sh == 32) {
                for (int l = 0; l < 32; l++) state[32 * w + l] = RUN;
                released = true;
            }
        }
        if (!released && sync + done == n_threads && sync > 0) {
            for (int t = 0; t < n_threads; t++) if (state[t] == SYNC) state[t] = RUN;
            released = true;
        }
        if (!released && !ran) return false;
    }
}

#endif
