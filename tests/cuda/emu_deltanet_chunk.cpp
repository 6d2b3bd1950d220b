/*
 * tests/cuda/emu_deltanet_chunk.cpp: the CUDA chunked delta-rule kernel
 * (native/src/cuda/deltanet_chunk.cu, delta_chunk_kernel) run on the CPU, no
 * GPU needed; built with a host C++ compiler and run by
 * tests/test_deltanet_emu.py.
 *
 * deltanet_chunk.cu compiled with LKV_DELTA_EMU leaves out its CUDA headers,
 * its PTX and its launcher; its kernel runs here one block at a time on
 * emu_fibers.h's fibers (16 warps, or 8). The two PTX pieces are given here:
 *   - dc_tf32 (cvt.rna.tf32.f32): f32 rounded to 10 mantissa bits, ties away
 *     from zero;
 *   - dc_mma (mma.sync m16n8k8 row.col f32.tf32): a warp collective: each
 *     lane publishes its A (4) and B (2) fragment registers, and after the
 *     rendezvous computes its 4 accumulator elements from the whole 16 x 8 A
 *     and 8 x 8 B, products and sum in double, from the fragment layout the
 *     PTX ISA documents (lane 4g + t holds A (g, t), (g + 8, t), (g, t + 4),
 *     (g + 8, t + 4); B (t, g), (t + 4, g); D (g, 2t), (g, 2t + 1), (g + 8, 2t),
 *     (g + 8, 2t + 1)), written out again here from that table, not shared
 *     with the kernel.
 * Shared memory is refilled with NaN before each block, so a read of
 * something not written shows.
 *
 * Checks, per shape (key / value heads, dk, dv; tokens over several chunks
 * with a short tail; value columns the blocks do not fill): outputs and final
 * state against a float64 recurrence (relative L2 error < 2e-5: 3xTF32 keeps
 * f32's accuracy), and with the split off (one TF32 mma) < 5e-3. Not covered
 * (device only): the real mma unit, launch limits, timing.
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

float sm[1 << 16];                       /* the kernel's `extern __shared__ float sm[]` */

// ---------------------------------------------------------------- the PTX, emulated

static uint32_t dc_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;   /* inf / nan as they are */
    return (u + 0x1000u) & ~0x1fffu;                   /* magnitude bits: ties away from zero */
}

static uint32_t mma_a[N_THREADS][4], mma_b[N_THREADS][2];

static void dc_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const int me = cur;
    memcpy(mma_a[me], a, sizeof a);
    mma_b[me][0] = b0;
    mma_b[me][1] = b1;
    yield_as(SHFL);                      /* every lane has published */
    const int w0 = me & ~31, lane = me & 31, g = lane >> 2, t = lane & 3;
    auto A = [&](int r, int k) {         /* A (16 x 8) from the lane that holds it */
        return (double)__uint_as_float(mma_a[w0 + (r & 7) * 4 + (k & 3)][(r >= 8) + 2 * (k >= 4)]);
    };
    auto B = [&](int k, int c) { return (double)__uint_as_float(mma_b[w0 + c * 4 + (k & 3)][k >= 4]); };
    float r[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        double s = d[e];
        for (int k = 0; k < 8; k++) s += A(row, k) * B(k, col);
        r[e] = (float)s;
    }
    yield_as(SHFL);                      /* every lane has read */
    for (int e = 0; e < 4; e++) d[e] = r[e];
}

#define LKV_DELTA_EMU 1
#include "cuda/deltanet_chunk.cu"

// ---------------------------------------------------------------- launches

struct launch {
    float *out;
    const float *qkv, *bi, *al, *a, *dt;
    float *st;
    int nk, nv, dk, dv, stride, n;
    bool split;
};
static launch L;
static int bv_now;

static int warps_now;

template <int BV, bool SPLIT, int W>
static void run_kernel(void) {
    delta_chunk_kernel<BV, SPLIT, W>(L.out, L.qkv, L.bi, L.al, L.a, L.dt, L.st, L.nk, L.nv, L.dk, L.dv,
                                     L.stride, 1e-6f, L.n);
}

static void kernel_thread(void) {
    if (warps_now == 8) {
        if (bv_now == 64) run_kernel<64, true, 8>();
        else run_kernel<32, true, 8>();
    } else if (bv_now == 64) {
        if (L.split) run_kernel<64, true, DC_WARPS>();
        else run_kernel<64, false, DC_WARPS>();
    } else {
        if (L.split) run_kernel<32, true, DC_WARPS>();
        else run_kernel<32, false, DC_WARPS>();
    }
}

/* the launcher's grid for column blocks of bv; false on a deadlock or short shared memory */
static bool launch_kernel(launch l, int bv, int warps) {
    const int floats = dc_plan_of(l.dk, bv).total;
    if (floats > (int)(sizeof sm / sizeof sm[0])) return false;
    L = l;
    bv_now = bv;
    warps_now = warps;
    gridDim = {(unsigned)l.nv, (unsigned)((l.dv + bv - 1) / bv), 1};
    for (unsigned bx = 0; bx < gridDim.x; bx++)
        for (unsigned by = 0; by < gridDim.y; by++) {
            for (int i = 0; i < floats; i++) sm[i] = NAN;
            if (!run_block(kernel_thread, bx, by, 32 * warps)) return false;
        }
    return true;
}

// ---------------------------------------------------------------- cases

static uint64_t rng_s;
static float rnd(void) {   /* [-1, 1) */
    rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17;
    return (float)((rng_s >> 40) & 0xffffff) / (float)0x1000000 * 2.f - 1.f;
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

static int run_case(int nk, int nv, int dk, int dv, int n, int bv, bool split, int warps = DC_WARPS) {
    const int stride = 2 * nk * dk + nv * dv;
    const size_t SN = (size_t)nv * dk * dv, ON = (size_t)n * nv * dv;
    std::vector<float> qkv((size_t)n * stride), bi((size_t)n * nv), al((size_t)n * nv), a(nv), dt(nv);
    std::vector<float> st(SN), out(ON, NAN);
    for (auto &x : qkv) x = 2 * rnd();
    for (auto &x : bi) x = 3 * rnd();
    for (auto &x : al) x = 2 * rnd();
    for (auto &x : a) x = -0.02f - 1.5f * fabsf(rnd());
    for (auto &x : dt) x = rnd();
    for (auto &x : st) x = 0.5f * rnd();
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
    if (!launch_kernel({out.data(), qkv.data(), bi.data(), al.data(), a.data(), dt.data(), st.data(), nk, nv,
                        dk, dv, stride, n, split}, bv, warps)) {
        printf("FAIL nk=%d nv=%d dk=%d dv=%d n=%d BV=%d: the block deadlocked (or shared memory too small)\n",
               nk, nv, dk, dv, n, bv);
        return 1;
    }
    const double eo = rel(out.data(), ref.data(), ON), es = rel(st.data(), S.data(), SN);
    const double tol = split ? 2e-5 : 5e-3;
    const bool pass = eo < tol && es < tol;
    printf("%s nk=%d nv=%d dk=%d dv=%d n=%d BV=%d %s, %d warps: out rel err %.2e, state %.2e (< %.0e)\n",
           pass ? "ok  " : "FAIL", nk, nv, dk, dv, n, bv, split ? "3xTF32" : "TF32", warps, eo, es, tol);
    fflush(stdout);
    return !pass;
}

int main(void) {
    const char *e = getenv("LKV_TEST_SEED");
    rng_s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    if (!rng_s) rng_s = 1;
    printf("seed %llu (LKV_TEST_SEED to repeat)\n", (unsigned long long)rng_s);
    int fails = 0;
    fails += run_case(2, 4, 32, 32, 150, 32, true);    /* the tiny test model's heads; 3 chunks, tail 22 */
    fails += run_case(1, 3, 48, 40, 70, 32, true);     /* GQA 1x3; dv 40: the 2nd column block part-filled */
    fails += run_case(1, 1, 128, 72, 100, 64, true);   /* 27B's dk; BV 64 over dv 72 */
    fails += run_case(1, 2, 16, 24, 9, 32, true);      /* one short chunk */
    fails += run_case(2, 2, 32, 32, 130, 32, false);   /* the split off */
    fails += run_case(1, 2, 64, 80, 90, 64, true, 8);  /* blocks of 8 warps (a timing variant) */
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails ? 1 : 0;
}
