/*
 * tests/cuda/emu_mvq.cu: the k-quant / iq4_xs decode mat-vec's lane code
 * (native/src/cuda/mvq.cu, mq_lane, and mvq_units.cuh's units) run on the
 * CPU, no GPU needed. tests/test_cuda_emu_mvq.py writes the cases, runs this
 * program and checks its outputs against numpy (gguf.quants' dequantization).
 *
 * mq_lane and the units are __host__ __device__ (their intrinsics have host
 * forms in mvq_units.cuh), so this program runs the lane code itself: for
 * every group of R rows (rows past the end: the last one again, not stored,
 * as mvq_kernel does) the 32 lanes one after another, their sums added (the
 * kernel's shuffle tree adds them in another order: float rounding only).
 *
 * Not covered (device only): the launch and its grid, mm_pick over a set of
 * weights, the shuffles, pdl; the grid i-quants, whose units read dq8i's
 * device tables. tests/cuda/test_ops.c checks the kernel on a GPU.
 *
 *   emu_mvq CASE...       each CASE file: int32 type, rows, cols, n, R; the
 *                         weight rows; the activations' codes (n x cols int8),
 *                         their groups' d and d * code sum (n x cols / 32
 *                         float each). Writes CASE.out: n x rows floats.
 *
 * Exit status 0 when every case ran, 1 on a bad case file.
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

/* no kernel is instantiated here (the weight type list emptied for this file):
 * the device pass has nothing to generate */
#include "matmul.cuh"
#undef LKV_CUDA_WEIGHT_TYPES
#define LKV_CUDA_WEIGHT_TYPES(X)
#include "mvq.cu"

static int rows_bytes(int T, int cols) {
    switch (T) {
    case LKV_TYPE_Q2_K: return cols / 256 * 84;
    case LKV_TYPE_Q3_K: return cols / 256 * 110;
    case LKV_TYPE_Q4_K: return cols / 256 * 144;
    case LKV_TYPE_Q5_K: return cols / 256 * 176;
    case LKV_TYPE_Q6_K: return cols / 256 * 210;
    case LKV_TYPE_IQ4_XS: return cols / 256 * 136;
    }
    return -1;
}

template <int T, int NT, int R>
static void run(const uint8_t *w, size_t rb, int rows, int cols, int n, const int8_t *xq, const float *xd,
                const float *xs, float *y) {
    for (int r0 = 0; r0 < rows; r0 += R) {
        const uint8_t *row[R];
        for (int k = 0; k < R; k++) row[k] = w + (size_t)(r0 + k < rows ? r0 + k : rows - 1) * rb;
        float sum[R][NT] = {};
        for (int lane = 0; lane < 32; lane++) {
            float acc[R][NT];
            mq_lane<T, NT, R>(row, lane, xq, xd, xs, cols, n, acc);
            for (int k = 0; k < R; k++)
                for (int t = 0; t < NT; t++) sum[k][t] += acc[k][t];
        }
        for (int k = 0; k < R && r0 + k < rows; k++)
            for (int t = 0; t < n; t++) y[(size_t)t * rows + r0 + k] = sum[k][t];
    }
}

/* mvq.cu's choice of the token slots NT for n (mq_run); R as given (4: NT <= 2) */
template <int T, int R>
static bool run_r(const uint8_t *w, size_t rb, int rows, int cols, int n, const int8_t *xq, const float *xd,
                  const float *xs, float *y) {
    if (n <= 1) run<T, 1, R>(w, rb, rows, cols, n, xq, xd, xs, y);
    else if (n <= 2) run<T, 2, R>(w, rb, rows, cols, n, xq, xd, xs, y);
    else if (R == 4) return false;
    else if (n <= 4) run<T, 4, (R > 2 ? 2 : R)>(w, rb, rows, cols, n, xq, xd, xs, y);
    else if (n <= 8) run<T, 8, (R > 2 ? 2 : R)>(w, rb, rows, cols, n, xq, xd, xs, y);
    else run<T, 16, (R > 2 ? 2 : R)>(w, rb, rows, cols, n, xq, xd, xs, y);
    return true;
}

template <int T>
static bool run_t(int R, const uint8_t *w, size_t rb, int rows, int cols, int n, const int8_t *xq,
                  const float *xd, const float *xs, float *y) {
    switch (R) {
    case 1: return run_r<T, 1>(w, rb, rows, cols, n, xq, xd, xs, y);
    case 2: return run_r<T, 2>(w, rb, rows, cols, n, xq, xd, xs, y);
    case 4: return run_r<T, 4>(w, rb, rows, cols, n, xq, xd, xs, y);
    }
    return false;
}

static bool run_case(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "%s: cannot open\n", path); return false; }
    int32_t h[5];
    bool ok = fread(h, 4, 5, f) == 5;
    const int T = h[0], rows = h[1], cols = h[2], n = h[3], R = h[4];
    const int rb = ok ? rows_bytes(T, cols) : -1;
    if (!ok || rb <= 0 || rows < 1 || cols % 256 || n < 1 || n > 16) {
        fprintf(stderr, "%s: bad header\n", path);
        fclose(f);
        return false;
    }
    const size_t wn = (size_t)rows * rb, xn = (size_t)n * cols, gn = (size_t)n * (cols / 32);
    /* 16-byte aligned, as the device's allocations (the units' wide loads) */
    uint8_t *w = (uint8_t *)aligned_alloc(16, (wn + 15) / 16 * 16);
    int8_t *xq = (int8_t *)aligned_alloc(16, (xn + 15) / 16 * 16);
    std::vector<float> xd(gn), xs(gn), y((size_t)n * rows, NAN);
    ok = fread(w, 1, wn, f) == wn && fread(xq, 1, xn, f) == xn && fread(xd.data(), 4, gn, f) == gn &&
         fread(xs.data(), 4, gn, f) == gn;
    fclose(f);
    if (ok) {
        switch (T) {
        case LKV_TYPE_Q2_K: ok = run_t<LKV_TYPE_Q2_K>(R, w, rb, rows, cols, n, xq, xd.data(), xs.data(), y.data()); break;
        case LKV_TYPE_Q3_K: ok = run_t<LKV_TYPE_Q3_K>(R, w, rb, rows, cols, n, xq, xd.data(), xs.data(), y.data()); break;
        case LKV_TYPE_Q4_K: ok = run_t<LKV_TYPE_Q4_K>(R, w, rb, rows, cols, n, xq, xd.data(), xs.data(), y.data()); break;
        case LKV_TYPE_Q5_K: ok = run_t<LKV_TYPE_Q5_K>(R, w, rb, rows, cols, n, xq, xd.data(), xs.data(), y.data()); break;
        case LKV_TYPE_Q6_K: ok = run_t<LKV_TYPE_Q6_K>(R, w, rb, rows, cols, n, xq, xd.data(), xs.data(), y.data()); break;
        case LKV_TYPE_IQ4_XS: ok = run_t<LKV_TYPE_IQ4_XS>(R, w, rb, rows, cols, n, xq, xd.data(), xs.data(), y.data()); break;
        default: ok = false;
        }
    }
    free(w);
    free(xq);
    if (!ok) { fprintf(stderr, "%s: short file or a case mvq does not take (R %d, n %d)\n", path, R, n); return false; }
    std::string out = std::string(path) + ".out";
    FILE *o = fopen(out.c_str(), "wb");
    ok = o && fwrite(y.data(), 4, y.size(), o) == y.size();
    if (o) fclose(o);
    return ok;
}

int main(int argc, char **argv) {
    int bad = 0;
    for (int i = 1; i < argc; i++) bad += !run_case(argv[i]);
    printf("emu_mvq: %d cases, %d bad\n", argc - 1, bad);
    return bad ? 1 : 0;
}
