/*
 * tests/cuda/emu_deltanet.cpp: the CUDA delta-rule kernel (native/src/cuda/
 * deltanet.cu, delta_kernel) run on the CPU, no GPU needed; built with a host
 * C++ compiler and run by tests/test_deltanet_emu.py.
 *
 * deltanet.cu compiled with LKV_DELTA_EMU leaves out its CUDA headers and its
 * launcher, so the kernel's own text is included here and run one thread
 * block at a time, each CUDA thread a ucontext fiber on one OS thread:
 * __syncthreads waits until every thread of the block has reached it, a warp
 * shuffle until the 32 lanes of the warp have (each lane's value published,
 * then read back after a second rendezvous, as the hardware exchanges them),
 * shared memory is one array that the blocks take in turn (refilled with NaN
 * before each block, so a read of something not staged shows). The launch
 * shape (G lanes per column, columns per block, the token tile) is the
 * launcher's (dr_shape). The exp of beta is the CPU's (cpu/expf.h), as on the
 * GPU.
 *
 * Checks, per shape (key / value heads, dk, dv; tokens over several tiles,
 * rows and columns the lane groups and blocks do not fill):
 *   - outputs and final state against a float64 transcription of the
 *     recurrence (cpu/deltanet.c's formulas: l2-normalised q / sqrt(dk) and
 *     k, beta = sigmoid(b), g = a * softplus(alpha + dt), value head h on key
 *     head h % nk): relative L2 error < 1e-5 (f32 rounding only);
 *   - the same tokens one call per token: the same bits as one call.
 * Not covered (device only): the real shuffle and barrier hardware, the
 * launch, occupancy. tests/cuda/test_ops.c (`test_ops hybrid`) checks the
 * kernel on a GPU against the CPU backend.
 *
 * Exit status 0 when everything matched, 1 otherwise. LKV_TEST_SEED=n
 * repeats a run's inputs (the seed is printed).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include "emu_fibers.h"

float sm[1 << 14];                       /* the kernel's `extern __shared__ float sm[]` */

#define LKV_DELTA_EMU 1
#include "cuda/deltanet.cu"

// ---------------------------------------------------------------- cases

static uint64_t rng_s;
static float rnd(void) {   /* [-1, 1) */
    rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17;
    return (float)((rng_s >> 40) & 0xffffff) / (float)0x1000000 * 2.f - 1.f;
}

struct launch {
    float *out;
    const float *qkv, *bi, *al, *a, *dt;
    float *st;
    int nk, nv, dk, dv, stride, n, G, tt;
};
static launch L;
static void kernel_thread(void) {
    delta_kernel<DR_ROWS>(L.out, L.qkv, L.bi, L.al, L.a, L.dt, L.st, L.nk, L.nv, L.dk, L.dv,
                          L.stride, 1e-6f, L.n, L.G, L.tt);
}

/* the launcher's grid over n tokens from qkv row 0; false on a deadlock */
static bool launch_kernel(launch l) {
    int G, bc, tt;
    const int floats = dr_shape(l.dk, &G, &bc, &tt);
    if (floats > (int)(sizeof sm / sizeof sm[0])) return false;
    l.G = G;
    l.tt = tt;
    L = l;
    gridDim = {(unsigned)l.nv, (unsigned)((l.dv + bc - 1) / bc), 1};
    for (unsigned bx = 0; bx < gridDim.x; bx++)
        for (unsigned by = 0; by < gridDim.y; by++) {
            for (int i = 0; i < floats; i++) sm[i] = NAN;
            if (!run_block(kernel_thread, bx, by)) return false;
        }
    return true;
}

static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

static double rel(const float *a, const double *r, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        num += (a[i] - r[i]) * (a[i] - r[i]);
        den += r[i] * r[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static int run_case(int nk, int nv, int dk, int dv, int n) {
    const int stride = 2 * nk * dk + nv * dv;
    const size_t SN = (size_t)nv * dk * dv, ON = (size_t)n * nv * dv;
    std::vector<float> qkv((size_t)n * stride), bi((size_t)n * nv), al((size_t)n * nv), a(nv), dt(nv);
    std::vector<float> st(SN), st1(SN), out(ON, NAN), out1(ON, NAN);
    for (auto &x : qkv) x = 2 * rnd();
    for (auto &x : bi) x = 3 * rnd();
    for (auto &x : al) x = 2 * rnd();
    for (auto &x : a) x = -0.02f - 1.5f * fabsf(rnd());
    for (auto &x : dt) x = rnd();
    for (auto &x : st) x = 0.5f * rnd();
    st1 = st;
    /* float64 recurrence */
    std::vector<double> S(st.begin(), st.end()), ref(ON);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nv; h++) {
            const int kh = h % nk;
            const float *row = &qkv[(size_t)t * stride];
            std::vector<double> q(dk), k(dk);
            double qs = 0, ks = 0;
            for (int i = 0; i < dk; i++) {
                q[i] = row[kh * dk + i];
                k[i] = row[(nk + kh) * dk + i];
                qs += q[i] * q[i];
                ks += k[i] * k[i];
            }
            for (int i = 0; i < dk; i++) {
                q[i] /= sqrt(qs + 1e-6) * sqrt((double)dk);
                k[i] /= sqrt(ks + 1e-6);
            }
            const double dec = exp(a[h] * softplus(al[t * nv + h] + dt[h]));
            const double beta = 1 / (1 + exp(-(double)bi[t * nv + h]));
            double *Sh = &S[(size_t)h * dk * dv];
            for (int c = 0; c < dv; c++) {
                double sk = 0, o = 0;
                for (int i = 0; i < dk; i++) sk += Sh[(size_t)i * dv + c] * k[i];
                const double delta = beta * (row[2 * nk * dk + h * dv + c] - dec * sk);
                for (int i = 0; i < dk; i++) {
                    double &s = Sh[(size_t)i * dv + c];
                    s = dec * s + k[i] * delta;
                    o += s * q[i];
                }
                ref[(size_t)t * nv * dv + (size_t)h * dv + c] = o;
            }
        }
    bool ok = launch_kernel({out.data(), qkv.data(), bi.data(), al.data(), a.data(), dt.data(),
                             st.data(), nk, nv, dk, dv, stride, n, 0, 0});
    for (int t = 0; ok && t < n; t++)
        ok = launch_kernel({out1.data() + (size_t)t * nv * dv, qkv.data() + (size_t)t * stride,
                            bi.data() + (size_t)t * nv, al.data() + (size_t)t * nv, a.data(),
                            dt.data(), st1.data(), nk, nv, dk, dv, stride, 1, 0, 0});
    if (!ok) {
        printf("FAIL nk=%d nv=%d dk=%d dv=%d n=%d: the block deadlocked (or shared memory too small)\n",
               nk, nv, dk, dv, n);
        return 1;
    }
    int G, bc, tt;
    dr_shape(dk, &G, &bc, &tt);
    const double eo = rel(out.data(), ref.data(), ON), es = rel(st.data(), S.data(), SN);
    const bool same = !memcmp(out.data(), out1.data(), ON * 4) && !memcmp(st.data(), st1.data(), SN * 4);
    const bool pass = eo < 1e-5 && es < 1e-5 && same;
    printf("%s nk=%d nv=%d dk=%d dv=%d n=%d (G %d, %d columns a block, tile %d): out rel err %.2e, "
           "state %.2e; token by token %s\n", pass ? "ok  " : "FAIL", nk, nv, dk, dv, n, G, bc, tt,
           eo, es, same ? "the same bits" : "DIFFERENT");
    return !pass;
}

int main(void) {
    const char *e = getenv("LKV_TEST_SEED");
    rng_s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    if (!rng_s) rng_s = 1;
    printf("seed %llu (LKV_TEST_SEED to repeat)\n", (unsigned long long)rng_s);
    int fails = 0;
    fails += run_case(2, 4, 32, 32, 45);      /* the tiny test model's heads; two tiles of 42 */
    fails += run_case(1, 3, 48, 40, 53);      /* GQA 1x3; rows and columns not filled; two tiles */
    fails += run_case(2, 6, 128, 128, 3);     /* Qwen3.5-27B's head sizes */
    fails += run_case(1, 2, 512, 24, 9);      /* 32 lanes a column; tiles of 7 */
    fails += run_case(4, 8, 16, 16, 30);      /* one lane a column; tiles of 28 */
    fails += run_case(1, 2, 200, 56, 1);      /* a decode step */
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
