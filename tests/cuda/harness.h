/*
 * tests/cuda/harness.h: what the CUDA test programs (test_ops.c,
 * test_attn_mma.c) share: the check counter and line printer, a random
 * generator seeded per run (LKV_TEST_SEED=n repeats a run; the seed is
 * printed), relative errors, and device buffers made and read back in order
 * with the backends' non-blocking streams.
 *
 * The backends' streams do not wait for the legacy stream, and cudaMemcpy
 * from pageable memory may return before its DMA lands: every copy or memset
 * here is followed by cudaDeviceSynchronize, and results are read back after
 * the backend's own sync.
 */
#ifndef LKV_TEST_HARNESS_H
#define LKV_TEST_HARNESS_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>

#include "llamakv.h"
#include "backend.h"
#include "model.h"

static int n_fail = 0, n_pass = 0;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* a fresh seed per run unless LKV_TEST_SEED is set; printed so a failure can be repeated */
static void seed_rng(void) {
    const char *e = getenv("LKV_TEST_SEED");
    uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    rng = s ? s : 1;
    printf("seed %llu (LKV_TEST_SEED to repeat)\n", (unsigned long long)rng);
}

static uint32_t rnd32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float rndf(void) { return (rnd32() & 0xffffff) / (float)0x1000000 * 2.f - 1.f; }   /* [-1, 1) */
static void fill(float *x, size_t n, float s) { for (size_t i = 0; i < n; i++) x[i] = rndf() * s; }

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok) n_pass++; else n_fail++;
}

/* L2 relative error of a against b; NaN anywhere: infinite */
static double rel_err_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

// ---------------------------------------------------------------- device buffers

static const lkv_backend *G = &lkv_backend_cuda, *C = &lkv_backend_cpu;
static lkv_bctx *gb, *cb;

static void *dev_buf(size_t n) {
    void *d = NULL;
    if (cudaMalloc(&d, n ? n : 16) != cudaSuccess) { fprintf(stderr, "cudaMalloc\n"); exit(2); }
    cudaMemset(d, 0xff, n);   /* poison: NaN floats */
    cudaDeviceSynchronize();
    return d;
}
static void *dup_dev(const void *h, size_t n) {
    void *d = dev_buf(n);
    if (n) cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    return d;
}
static void get(void *h, const void *d, size_t n) {
    if (G->sync(gb) != LKV_OK) printf("device error: %s\n", lkv_last_error());
    cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
}

// ---------------------------------------------------------------- program frame

/* 1: no device (the caller exits 0, skipped); 2: set-up failed; 0: gb / cb are
 * contexts of both backends over a fake model of this shape (the integer paths
 * size their buffers by n_ff, attention by head_dim) */
static int harness_open(int n_embd, int n_ff, int n_head, int head_dim, int cpu_threads) {
    if (lkv_cuda_device_count() <= 0) { printf("no CUDA device: skipped\n"); return 1; }
    seed_rng();
    static struct lkv_model fake;
    memset(&fake, 0, sizeof fake);
    fake.hp.n_embd = n_embd; fake.hp.n_ff = n_ff; fake.hp.n_head = n_head; fake.hp.head_dim = head_dim;
    if (G->ctx_init(&gb, &fake, 1, 512) || C->ctx_init(&cb, &fake, cpu_threads, 512)) {
        printf("ctx_init: %s\n", lkv_last_error());
        return 2;
    }
    return 0;
}

/* the last check (no device error left behind), the counts; the exit status */
static int harness_close(void) {
    const lkv_status st = G->sync(gb);
    check(st == LKV_OK, "no device error at the end (%s)", st ? lkv_last_error() : "");
    G->ctx_free(gb);
    C->ctx_free(cb);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}

#endif
