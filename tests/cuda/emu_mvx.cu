/*
 * tests/cuda/emu_mvx.cu: the decode mat-vec's thread code (native/src/cuda/
 * mvx.cu, mvx2_kernel) run on the CPU, no GPU needed. tests/test_cuda_emu.py
 * builds and runs it.
 *
 * mvx.cu's helpers are __host__ __device__, so a host program that includes
 * the file can run the real per-thread code: mw_thr::init (a thread's row,
 * lane, row parity, copy sources and limits), mw_thr::issue_any (its cp.async
 * copies of a stage: weight chunks, activation codes / scales / sums) and
 * mw_stage (the decoding of the weight codes from the shared ring and the
 * chain steps). This program emulates one thread block at a time the way
 * mvx2_kernel runs it: the same ring of st slots in host memory, the same
 * issue / compute order (the copies of a stage complete before it is
 * computed, as cp.async.wait_group + __syncthreads make them), with a host
 * copier in place of cp.async. It checks:
 *
 *   - every copy: destination inside the slot being filled, source inside
 *     the block's weight matrix (from the 16-byte chunk of its first byte to
 *     its last byte) or the activation arrays, source and destination aligned
 *     to the copy's size, cut copies of 1..16 bytes;
 *     each slot is filled with random bytes before its copies, so anything
 *     read from the ring that was not copied shows as a wrong operand;
 *   - every step of every chain (row, lane, token: through the kernel's
 *     MVX_EMU_TRACE hook in mw_step): the weight codes (SC times exact.cuh's
 *     ex_word of the row's block at the chain's position), the activation
 *     codes, the weight scale / minimum (ex_d / ex_m), the activation scale /
 *     sum, the dp4a result; each chain has exactly cols / 32 steps, in block
 *     order;
 *   - the outputs, bit for bit, against the CPU's arithmetic written out here
 *     from exact.cuh (8 lane chains of fmaf(dx * dy, (float)p, acc), the hsum
 *     tree, + the sum of m * s for q4_1 / q5_1).
 *
 * Not covered (device only): the cp.async / commit / wait_group bookkeeping
 * and barriers of the kernel body, the shuffle hsum (redone here in the same
 * order), mw_depth's choice of st, the launch. tests/cuda/test_ops.c checks
 * the kernel on a GPU.
 *
 * Cases: every legacy weight type (q4_0 q4_1 q5_0 q5_1 q8_0 iq4_nl), n = 1..8
 * tokens on small shapes (rows 16 / 24 / 37, cols 64..576, rows starting 0, 2
 * or 6 bytes past 16-byte alignment, ring depths 3..8), the 8B model's shapes
 * (4096 and 14336 columns; the q/k/v launch of 3 weights 4096 + 1024 + 1024
 * rows), a set of 3 small weights. Big grids are sampled (each weight's first
 * two, middle and last tiles); the full list runs every tile of the 8B q/k/v
 * and o launches (the default one: q4_0, n = 1). Default list: 745 cases,
 * 3-6 s on one core; full: 744 cases, ~13 s.
 *
 *   emu_mvx [--full]      LKV_EMU_FULL=1 also selects the full list
 *   LKV_TEST_SEED=n       repeat a run's random inputs (the seed is printed)
 *
 * Exit status 0 when everything matched, 1 on any mismatch.
 */
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

/* the host copier below is called from mvx.cu's __host__ __device__ templates:
 * fine on the host, which is the only side that instantiates them with it */
#pragma nv_diag_suppress 20011

/* The kernels themselves are never launched here: with the weight type list
 * emptied for this file, mvx.cu's dispatch (lkv_cuda_mvx) instantiates no
 * mvx2_kernel, which leaves the device pass nothing to generate and saves
 * ~10 s of the compile (-DEMU_MVX_KERNELS keeps them). */
#include "exact.cuh"
#ifndef EMU_MVX_KERNELS
#undef LKV_CUDA_WEIGHT_TYPES
#define LKV_CUDA_WEIGHT_TYPES(X)
#endif

static void emu_trace(int t, uint32_t x, int y, float dw, float dy, float mw, float sy, int p) __attribute__((unused));
#define MVX_EMU_TRACE(t, x, y, dw, dy, mw, sy, p) emu_trace(t, x, y, dw, dy, mw, sy, p)
static void emu_trace_block(int t, int b, float dw, float dy, int p) __attribute__((unused));
#define MVX_EMU_TRACE_BLOCK(t, b, dw, dy, p) emu_trace_block(t, b, dw, dy, p)
#include "mvx.cu"

/* the test-only overrides mvx.cu reads (tune.h; the library defines them in backend.cu) */
lkv_cuda_tune lkv_cuda_tuning;

// ---------------------------------------------------------------- one case's state

struct Run {
    int T, n, cols, ng, st, nsc;
    int max_rows;
    mm_set ms;
    const uint8_t *wbeg[3], *wend[3];
    const int8_t *xq;
    const float *xd, *xs;
    size_t xq_len, xd_len;
    /* trace context: the chain whose steps mw_stage is running */
    int cur_w, cur_row, cur_lane;
    int cur_b0;              /* first block of the stage being computed (block order's trace) */
    std::vector<int> step;   /* per (weight, row, lane, token): steps seen so far */
    size_t steps = 0, errors = 0;
    size_t copies16 = 0, copies16n = 0, copies4 = 0;
    int &chain(int w, int row, int lane, int t) {
        return step[(((size_t)w * max_rows + row) * 8 + lane) * 8 + t];
    }
};
static Run *R;
static std::mt19937_64 rng;

static const char *type_name(int T) {
    switch (T) {
    case LKV_TYPE_Q4_0: return "q4_0";
    case LKV_TYPE_Q4_1: return "q4_1";
    case LKV_TYPE_Q5_0: return "q5_0";
    case LKV_TYPE_Q5_1: return "q5_1";
    case LKV_TYPE_Q8_0: return "q8_0";
    case LKV_TYPE_IQ4_NL: return "iq4_nl";
    }
    return "?";
}
/* the codes' scale in the kernel's dp4a (mw_geom::sc) */
static int sc_of(int T) {
    return T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q4_1 ? 16 : T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1 ? 8 : 1;
}
static bool min_of(int T) { return T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1; }
/* block bytes from the published layouts (not from the kernel's tables) */
static int bytes_of(int T) {
    switch (T) {
    case LKV_TYPE_Q4_0: return 18;
    case LKV_TYPE_Q4_1: return 20;
    case LKV_TYPE_Q5_0: return 22;
    case LKV_TYPE_Q5_1: return 24;
    case LKV_TYPE_Q8_0: return 34;
    case LKV_TYPE_IQ4_NL: return 18;
    }
    abort();
}
static uint32_t ref_word(int T, const uint8_t *b, int l) {
    switch (T) {
    case LKV_TYPE_Q4_0: return ex_word<LKV_TYPE_Q4_0>(b, l);
    case LKV_TYPE_Q4_1: return ex_word<LKV_TYPE_Q4_1>(b, l);
    case LKV_TYPE_Q5_0: return ex_word<LKV_TYPE_Q5_0>(b, l);
    case LKV_TYPE_Q5_1: return ex_word<LKV_TYPE_Q5_1>(b, l);
    case LKV_TYPE_Q8_0: return ex_word<LKV_TYPE_Q8_0>(b, l);
    case LKV_TYPE_IQ4_NL: return ex_word<LKV_TYPE_IQ4_NL>(b, l);
    }
    abort();
}

static void mismatch(const char *what, int t, int blk) {
    if (R->errors++ < 10)
        fprintf(stderr, "  MISMATCH %s: weight %d row %d lane %d token %d block %d\n", what, R->cur_w, R->cur_row,
                R->cur_lane, t, blk);
}
static void error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void error(const char *fmt, ...) {
    if (R->errors++ < 10) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "  ERROR ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
}

// ---------------------------------------------------------------- the trace hook

/* one step of the chain (cur_w, cur_row, cur_lane, t): the operands must be
 * those of that chain's next block, addressed as exact.cuh does on the
 * row in global memory and on the activations by index */
static void emu_trace(int t, uint32_t x, int y, float dw, float dy, float mw, float sy, int p) {
    Run &r = *R;
    if (t >= r.n || r.cur_row < 0) return;   /* token slots past n, clamped tail rows: not stored */
    const int b = r.chain(r.cur_w, r.cur_row, r.cur_lane, t)++;
    r.steps++;
    if (b >= r.ng) { mismatch("chain longer than the row", t, b); return; }
    const uint8_t *bp = r.ms.w[r.cur_w] + (size_t)r.cur_row * r.ms.row_bytes[r.cur_w] + (size_t)b * bytes_of(r.T);
    const uint32_t xo = ref_word(r.T, bp, r.cur_lane);
    const bool mn = min_of(r.T);
    for (int i = 0; i < 4; i++) {
        const int nv = mn ? (int)(uint8_t)(x >> 8 * i) : (int)(int8_t)(x >> 8 * i);
        const int ov = (int)(int8_t)(xo >> 8 * i);
        if (nv != r.nsc * ov) { mismatch("weight codes", t, b); break; }
    }
    int yo;
    memcpy(&yo, r.xq + (size_t)t * r.cols + (size_t)b * 32 + 4 * r.cur_lane, 4);
    if (y != yo) mismatch("activation codes", t, b);
    const float dwo = ex_d(bp);
    if (memcmp(&dw, &dwo, 4)) mismatch("weight scale", t, b);
    const float dyo = r.xd[(size_t)t * r.ng + b];
    if (memcmp(&dy, &dyo, 4)) mismatch("activation scale", t, b);
    if (mn) {
        const float mo = ex_m(bp), so = r.xs[(size_t)t * r.ng + b];
        if (memcmp(&mw, &mo, 4)) mismatch("weight minimum", t, b);
        if (memcmp(&sy, &so, 4)) mismatch("activation sum", t, b);
    }
    int po = 0;
    for (int i = 0; i < 4; i++) po += (int)(int8_t)(xo >> 8 * i) * (int)(int8_t)(yo >> 8 * i);
    if (p - EX_MAGIC != r.nsc * po) mismatch("dot", t, b);
}

/* q4_0 (block order, mvx_blocks.cuh): one block of the chain (cur_row,
 * cur_lane, t): it must be the chain's next block (lane, lane + 8, ...), with
 * the block's scale, the activation scale and 16 times the block's whole dot */
static void emu_trace_block(int t, int bs, float dw, float dy, int p) {
    Run &r = *R;
    if (t >= r.n || r.cur_row < 0) return;
    const int b = r.cur_b0 + bs;   /* the hook gets the block within the stage */
    const int k = r.chain(r.cur_w, r.cur_row, r.cur_lane, t)++;
    r.steps++;
    if (b != r.cur_lane + 8 * k || b >= r.ng) { mismatch("block of the chain", t, b); return; }
    const uint8_t *bp = r.ms.w[r.cur_w] + (size_t)r.cur_row * r.ms.row_bytes[r.cur_w] + (size_t)b * bytes_of(r.T);
    const float dwo = ex_d(bp);
    if (memcmp(&dw, &dwo, 4)) mismatch("weight scale", t, b);
    const float dyo = r.xd[(size_t)t * r.ng + b];
    if (memcmp(&dy, &dyo, 4)) mismatch("activation scale", t, b);
    int po = 0;
    for (int l = 0; l < 8; l++) {
        const uint32_t xo = ref_word(r.T, bp, l);
        int yo;
        memcpy(&yo, r.xq + (size_t)t * r.cols + (size_t)b * 32 + 4 * l, 4);
        for (int i = 0; i < 4; i++) po += (int)(int8_t)(xo >> 8 * i) * (int)(int8_t)(yo >> 8 * i);
    }
    if (p - EX_MAGIC != 16 * po) mismatch("block dot", t, b);
}

// ---------------------------------------------------------------- the host copier

/* stands in for mw_cp_dev (cp.async): range checks, then memcpy; cut copies
 * zero-fill the rest of their 16 bytes as cp.async's src-size form does */
struct cp_host {
    uint8_t *base;     /* the slot being filled */
    int slot_bytes;
    int w;             /* the block's weight */
    /* cp.async: source and destination aligned to the copy size (the ring
     * and its slots are 16-byte aligned on the device) */
    void chk_dst(int off, int len) {
        if (off < 0 || off + len > slot_bytes) error("copy to slot bytes %d..%d of %d", off, off + len, slot_bytes);
        if (off % len || slot_bytes % 16) error("copy of %d bytes to slot byte %d, slot of %d bytes", len, off, slot_bytes);
    }
    void chk_align(const void *src, int len) {
        if ((uintptr_t)src % len) error("copy of %d bytes from an address %d mod %d", len, (int)((uintptr_t)src % len), len);
    }
    void chk_w(const void *src, int len) {
        const uint8_t *s = (const uint8_t *)src;
        const uint8_t *lo = (const uint8_t *)((uintptr_t)R->wbeg[w] & ~(uintptr_t)15);
        if (s < lo || s + len > R->wend[w])
            error("weight copy of %d bytes at %td outside weight %d's bytes 0..%td", len, s - R->wbeg[w], w,
                  R->wend[w] - R->wbeg[w]);
    }
    void c16(int off, const void *src) {
        chk_dst(off, 16);
        chk_align(src, 16);
        chk_w(src, 16);
        memcpy(base + off, src, 16);
        R->copies16++;
    }
    void c16n(int off, const void *src, int bytes) {
        chk_dst(off, 16);
        if (bytes <= 0 || bytes > 16) { error("cut copy of %d bytes", bytes); return; }
        chk_align(src, 16);
        chk_w(src, bytes);
        memcpy(base + off, src, bytes);
        memset(base + off + bytes, 0, 16 - bytes);
        R->copies16n++;
    }
    void c4(int off, const void *src) {
        chk_dst(off, 4);
        chk_align(src, 4);
        const uint8_t *s = (const uint8_t *)src;
        const bool ok = (s >= (const uint8_t *)R->xq && s + 4 <= (const uint8_t *)(R->xq + R->xq_len)) ||
                        (s >= (const uint8_t *)R->xd && s + 4 <= (const uint8_t *)(R->xd + R->xd_len)) ||
                        (s >= (const uint8_t *)R->xs && s + 4 <= (const uint8_t *)(R->xs + R->xd_len));
        if (!ok) { error("activation copy outside the arrays"); return; }
        memcpy(base + off, src, 4);
        R->copies4++;
    }
};

// ---------------------------------------------------------------- one thread block

static void poison(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t v = rng();
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* mvx2_kernel's body for block bid, thread by thread, stage by stage */
template <int T, int NT>
static void emulate_block(int bid, std::vector<uint8_t> &ring, float *out[3]) {
    using G = mw_geom<T, NT>;
    Run &r = *R;
    static mw_thr<T, NT> th[MT_THREADS];
    for (int tid = 0; tid < MT_THREADS; tid++) th[tid].init(r.ms, bid, tid, r.xq, r.xd, r.xs, r.cols, r.n);
    int j = 0;
    while (j + 1 < r.ms.n_w && bid >= r.ms.tile0[j + 1]) j++;
    const int ng = r.ng, nst = (ng + G::kc - 1) / G::kc, st = r.st;
    float acc[MT_THREADS][NT], summ[MT_THREADS][NT];
    for (int i = 0; i < MT_THREADS; i++)
        for (int t = 0; t < NT; t++) acc[i][t] = summ[i][t] = 0.f;
    uint8_t *ring0 = ring.data();
    const size_t ring_bytes = (size_t)st * G::stage;
    poison(ring0 + ring_bytes, ring.size() - ring_bytes);   /* past the ring: reads there show too */
    cp_host cp;
    cp.slot_bytes = G::stage;
    cp.w = j;
    auto issue = [&](int s, int slot) {
        uint8_t *sb = ring0 + (size_t)slot * G::stage;
        poison(sb, G::stage);   /* stale bytes show */
        cp.base = sb;
        for (int tid = 0; tid < MT_THREADS; tid++) th[tid].issue_any(s, ng, cp);
    };
    int si = 0;   /* slot of the next stage issued */
    for (int s = 0; s < st - 1; s++) {
        if (s < nst) issue(s, si);
        si++;
    }
    int sc = 0;   /* slot of the stage computed */
    for (int s = 0; s < nst; s++) {
        if (s + st - 1 < nst) issue(s + st - 1, si);
        si = si + 1 == st ? 0 : si + 1;
        const uint8_t *slot = ring0 + (size_t)sc * G::stage;
        const int nb = std::min(G::kc, ng - s * G::kc);
        for (int tid = 0; tid < MT_THREADS; tid++) {
            r.cur_w = j;
            r.cur_row = th[tid].rout < th[tid].rows ? th[tid].rout : -1;
            r.cur_lane = th[tid].l;
            r.cur_b0 = s * G::kc;
            if constexpr (T == LKV_TYPE_Q4_0)
                mb_stage_q4_0<NT, G::kc, G::rs, G::yoff, G::ys, G::doff>(slot, nb, th[tid].k, th[tid].l,
                                                                          th[tid].mis, acc[tid]);
            else if ((th[tid].mis & 3) == 0) mw_stage<T, NT, 0>(slot, nb, th[tid], acc[tid], summ[tid]);
            else mw_stage<T, NT, 2>(slot, nb, th[tid], acc[tid], summ[tid]);
        }
        sc = sc + 1 == st ? 0 : sc + 1;
    }
    /* the shuffles' hsum (xor 4, 2, 1) as lane 0 of each row ends up with it */
    for (int tid = 0; tid < MT_THREADS; tid += 8) {
        if (th[tid].rout >= th[tid].rows) continue;
        for (int t = 0; t < r.n; t++) {
            float a[8];
            for (int l = 0; l < 8; l++) a[l] = acc[tid + l][t];
            float v = tw_add(tw_add(tw_add(a[0], a[4]), tw_add(a[2], a[6])), tw_add(tw_add(a[1], a[5]), tw_add(a[3], a[7])));
            if (G::MIN) v = tw_add(v, summ[tid][t]);
            out[j][(size_t)t * th[tid].rows + th[tid].rout] = v;
        }
    }
}

// ---------------------------------------------------------------- the CPU's result

/* one output as the CPU computes it, from exact.cuh's addressing */
static float ref_out(int T, const uint8_t *row, const int8_t *xq, const float *xd, const float *xs, int ng) {
    float a[8] = {0}, sm = 0.f;
    if (T == LKV_TYPE_Q4_0) {
        /* quant/dot_blocks.c: chain b % 8 takes the block's whole dot */
        for (int b = 0; b < ng; b++) {
            const uint8_t *bp = row + (size_t)b * bytes_of(T);
            int p = 0;
            for (int l = 0; l < 8; l++) {
                const uint32_t x = ref_word(T, bp, l);
                int y;
                memcpy(&y, xq + b * 32 + 4 * l, 4);
                for (int i = 0; i < 4; i++) p += (int)(int8_t)(x >> 8 * i) * (int)(int8_t)(y >> 8 * i);
            }
            a[b % 8] = fmaf(tw_mul(ex_d(bp), xd[b]), (float)p, a[b % 8]);
        }
        return tw_add(tw_add(tw_add(a[0], a[4]), tw_add(a[2], a[6])), tw_add(tw_add(a[1], a[5]), tw_add(a[3], a[7])));
    }
    for (int b = 0; b < ng; b++) {
        const uint8_t *bp = row + (size_t)b * bytes_of(T);
        const float dw = ex_d(bp);
        for (int l = 0; l < 8; l++) {
            const uint32_t x = ref_word(T, bp, l);
            int y;
            memcpy(&y, xq + b * 32 + 4 * l, 4);
            int p = 0;
            for (int i = 0; i < 4; i++) p += (int)(int8_t)(x >> 8 * i) * (int)(int8_t)(y >> 8 * i);
            a[l] = fmaf(tw_mul(dw, xd[b]), (float)p, a[l]);
        }
        if (min_of(T)) sm = tw_add(sm, tw_mul(ex_m(bp), xs[b]));
    }
    float v = tw_add(tw_add(tw_add(a[0], a[4]), tw_add(a[2], a[6])), tw_add(tw_add(a[1], a[5]), tw_add(a[3], a[7])));
    if (min_of(T)) v = tw_add(v, sm);
    return v;
}

static uint16_t f2h_bits(float f) {
    const __half h = __float2half(f);
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static float rnd01() { return (float)(rng() % 1000) / 1000.f; }

// ---------------------------------------------------------------- one case

/* n_w weights of rows[j] x cols in one launch (rows starting woff bytes past
 * 16-byte alignment), n tokens, a ring of st stages; sample: only some tiles */
template <int T, int NT>
static bool run_case(const int *rows, int n_w, int cols, int n, int woff, int st, bool sample) {
    Run r;
    R = &r;
    r.T = T;
    r.n = n;
    r.cols = cols;
    r.ng = cols / 32;
    r.st = st;
    r.nsc = sc_of(T);
    const int bytes = bytes_of(T), ng = r.ng;
    if (bytes != mw_geom<T, NT>::bytes) {
        error("%s: block bytes %d, the kernel's %d", type_name(T), bytes, mw_geom<T, NT>::bytes);
        return false;
    }
    std::vector<std::vector<uint8_t>> wbuf(n_w);
    std::vector<std::vector<float>> outs(n_w);
    float *outp[3] = {nullptr, nullptr, nullptr};
    memset(&r.ms, 0, sizeof r.ms);
    r.ms.n_w = n_w;
    r.max_rows = 0;
    for (int j = 0; j < n_w; j++) {
        const size_t rb = (size_t)ng * bytes;
        wbuf[j].resize(rows[j] * rb + 64);
        poison(wbuf[j].data(), wbuf[j].size());
        uint8_t *w0 = (uint8_t *)(((uintptr_t)wbuf[j].data() + 15) & ~(uintptr_t)15) + woff;
        /* random codes; scales and minimums: sane f16 values */
        for (int rr = 0; rr < rows[j]; rr++)
            for (int b = 0; b < ng; b++) {
                uint8_t *bp = w0 + rr * rb + (size_t)b * bytes;
                uint16_t h = f2h_bits(0.001f + 0.01f * rnd01());
                memcpy(bp, &h, 2);
                if (min_of(T)) {
                    h = f2h_bits(-0.02f + 0.04f * rnd01());
                    memcpy(bp + 2, &h, 2);
                }
            }
        r.ms.w[j] = w0;
        r.ms.row_bytes[j] = rb;
        r.ms.rows[j] = rows[j];
        r.wbeg[j] = w0;
        r.wend[j] = w0 + rows[j] * rb;
        outs[j].assign((size_t)n * rows[j], NAN);
        outp[j] = outs[j].data();
        r.ms.out[j] = outp[j];
        r.max_rows = std::max(r.max_rows, rows[j]);
    }
    /* activations as the backend's quantizer leaves them: xq [n][cols], xd / xs [n][cols / 32] */
    std::vector<int8_t> xq((size_t)n * cols);
    std::vector<float> xd((size_t)n * ng), xs((size_t)n * ng);
    for (auto &v : xq) v = (int8_t)((int)(rng() % 255) - 127);
    for (auto &v : xd) v = __half2float(__float2half(0.001f + 0.02f * rnd01()));
    for (auto &v : xs) v = __half2float(__float2half(-1.f + 2.f * rnd01()));
    r.xq = xq.data();
    r.xd = xd.data();
    r.xs = xs.data();
    r.xq_len = xq.size();
    r.xd_len = xd.size();
    /* the tiles as mw_launch lays them out */
    r.ms.tile0[0] = 0;
    for (int i = 0; i < n_w; i++) r.ms.tile0[i + 1] = r.ms.tile0[i] + (rows[i] + MT_ROWS - 1) / MT_ROWS;
    const int grid = r.ms.tile0[n_w];
    r.step.assign((size_t)n_w * r.max_rows * 8 * 8, 0);
    std::vector<uint8_t> ring((size_t)st * mw_geom<T, NT>::stage + 256);
    std::vector<char> done(grid, 0);
    for (int bid = 0; bid < grid; bid++) {
        if (sample) {
            /* each weight's first two tiles, its middle and its last one */
            bool take = false;
            for (int j = 0; j < n_w; j++) {
                const int a = r.ms.tile0[j], z = r.ms.tile0[j + 1] - 1;
                take |= bid == a || bid == a + 1 || bid == z || bid == (a + z) / 2;
            }
            if (!take) continue;
        }
        done[bid] = 1;
        emulate_block<T, NT>(bid, ring, outp);
    }
    /* every chain of the emulated tiles complete, the outputs the CPU's */
    size_t nout = 0, ndiff = 0, nchain = 0;
    for (int j = 0; j < n_w; j++)
        for (int rr = 0; rr < rows[j]; rr++) {
            if (!done[r.ms.tile0[j] + rr / MT_ROWS]) continue;
            for (int t = 0; t < n; t++) {
                for (int l = 0; l < 8; l++) {
                    nchain++;
                    const int got = r.chain(j, rr, l, t);
                    /* q4_0: chain l has blocks l, l + 8, ... */
                    const int want = T == LKV_TYPE_Q4_0 ? (ng - l + 7) / 8 : ng;
                    if (got != want)
                        error("chain weight %d row %d lane %d token %d: %d steps of %d", j, rr, l, t, got, want);
                }
                const float ref = ref_out(T, r.ms.w[j] + (size_t)rr * r.ms.row_bytes[j], xq.data() + (size_t)t * cols,
                                          xd.data() + (size_t)t * ng, xs.data() + (size_t)t * ng, ng);
                const float got = outs[j][(size_t)t * rows[j] + rr];
                nout++;
                if (memcmp(&ref, &got, 4) && ndiff++ < 5)
                    fprintf(stderr, "  OUTPUT weight %d row %d token %d: %.9g, the CPU %.9g\n", j, rr, t, got, ref);
            }
        }
    const bool ok = r.errors == 0 && ndiff == 0;
    char rs[64];
    if (n_w == 1) snprintf(rs, sizeof rs, "%d", rows[0]);
    else snprintf(rs, sizeof rs, "%d+%d+%d", rows[0], rows[1], rows[2]);
    printf("%-6s rows %-14s cols %-5d n %d (NT %d) woff %d st %d%s: %s  chains %zu steps %zu outputs %zu "
           "(bit-equal %zu) copies 16B %zu cut %zu 4B %zu\n",
           type_name(T), rs, cols, n, NT, woff, st, sample ? " sampled" : "", ok ? "OK" : "FAIL", nchain, r.steps, nout,
           nout - ndiff, r.copies16, r.copies16n, r.copies4);
    R = nullptr;
    return ok;
}

/* NT as mw_run picks it for n */
template <int T>
static bool run_n(const int *rows, int n_w, int cols, int n, int woff, int st, bool sample) {
    if (n <= 1) return run_case<T, 1>(rows, n_w, cols, n, woff, st, sample);
    if (n <= 2) return run_case<T, 2>(rows, n_w, cols, n, woff, st, sample);
    if (n <= 4) return run_case<T, 4>(rows, n_w, cols, n, woff, st, sample);
    return run_case<T, 8>(rows, n_w, cols, n, woff, st, sample);
}
static bool run_t(int T, const int *rows, int n_w, int cols, int n, int woff, int st, bool sample) {
    switch (T) {
    case LKV_TYPE_Q4_0: return run_n<LKV_TYPE_Q4_0>(rows, n_w, cols, n, woff, st, sample);
    case LKV_TYPE_Q4_1: return run_n<LKV_TYPE_Q4_1>(rows, n_w, cols, n, woff, st, sample);
    case LKV_TYPE_Q5_0: return run_n<LKV_TYPE_Q5_0>(rows, n_w, cols, n, woff, st, sample);
    case LKV_TYPE_Q5_1: return run_n<LKV_TYPE_Q5_1>(rows, n_w, cols, n, woff, st, sample);
    case LKV_TYPE_Q8_0: return run_n<LKV_TYPE_Q8_0>(rows, n_w, cols, n, woff, st, sample);
    case LKV_TYPE_IQ4_NL: return run_n<LKV_TYPE_IQ4_NL>(rows, n_w, cols, n, woff, st, sample);
    }
    return false;
}

// ---------------------------------------------------------------- the cases

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* in order with the mismatches on stderr */
    bool full = false;
    if (const char *e = getenv("LKV_EMU_FULL")) full = *e && strcmp(e, "0") != 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--full")) {
            full = true;
        } else {
            fprintf(stderr, "usage: %s [--full]   (LKV_EMU_FULL=1: --full; LKV_TEST_SEED=n: repeat a run)\n", argv[0]);
            return 2;
        }
    }
    const char *se = getenv("LKV_TEST_SEED");
    uint64_t seed = se && *se ? strtoull(se, NULL, 0) : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    printf("seed %llu (LKV_TEST_SEED to repeat), %s list\n", (unsigned long long)seed, full ? "full" : "default");
    fflush(stdout);
    rng.seed(seed);
    const auto t0 = std::chrono::steady_clock::now();

    const int types[] = {LKV_TYPE_Q4_0, LKV_TYPE_Q4_1, LKV_TYPE_Q5_0, LKV_TYPE_Q5_1, LKV_TYPE_Q8_0, LKV_TYPE_IQ4_NL};
    int fails = 0, runs = 0;
    auto run = [&](int T, const int *rows, int n_w, int cols, int n, int woff, int st, bool sample) {
        fails += !run_t(T, rows, n_w, cols, n, woff, st, sample);
        runs++;
    };
    /* small shapes, every tile: n 1..8 (every NT, tokens past n in a slot),
     * rows starting 0, 2 or 6 bytes past 16-byte alignment, ring depths 3..8,
     * tail tiles (24, 37 rows), odd block counts (96, 160 columns: rows
     * alternating 4-byte alignment for 18 / 22 / 34-byte blocks), partial
     * stages */
    const int small_rows[] = {16, 24, 37};
    const int small_cols[] = {64, 96, 160, 576};
    for (int T : types)
        for (int rr : small_rows)
            for (int c : small_cols)
                for (int n = 1; n <= 8; n++) {
                    const int rows[1] = {rr};
                    run(T, rows, 1, c, n, (n & 1) ? 0 : (n & 2 ? 2 : 6), 3 + (n + c / 32) % 6, false);
                }
    /* the 8B model's row lengths (4096: q/k/v/o, gate/up; 14336: down) on one
     * and two tiles, and on 4096 rows (sampled tiles: every tile would be
     * 1-2 s per case) */
    for (int T : types)
        for (int rr : {16, 24, 4096})
            for (int c : {4096, 14336})
                for (int n : {1, 3, 8}) {
                    const int rows[1] = {rr};
                    run(T, rows, 1, c, n, rr == 24 ? 2 : 0, n == 1 ? 3 : n == 3 ? 5 : 8, rr == 4096);
                }
    /* 3 weights in one launch, tail tiles in each */
    for (int T : types)
        for (int n : {1, 3, 8}) {
            const int rows[3] = {40, 24, 24};
            run(T, rows, 3, 576, n, 0, 4, false);
            run(T, rows, 3, 4096, n, 2, 3, false);
        }
    /* the 8B q/k/v launch (3 weights: 4096 + 1024 + 1024 rows) and o with an
     * unaligned start: sampled tiles; the full list: every tile */
    for (int T : types)
        for (int n : {1, 2}) {
            const int qkv[3] = {4096, 1024, 1024}, o[1] = {4096};
            run(T, qkv, 3, 4096, n, 0, 3, !full);
            run(T, o, 1, 4096, n, 6, 8, !full);
        }
    if (!full) {
        /* one q/k/v launch with every tile */
        const int qkv[3] = {4096, 1024, 1024};
        run(LKV_TYPE_Q4_0, qkv, 3, 4096, 1, 0, 3, false);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("\n%d runs, %d failed (%.1f s; seed %llu)\n", runs, fails, secs, (unsigned long long)seed);
    return fails != 0;
}
