/*
 * tests/cuda/test_attn_mma.c: the tensor-core prefill attention
 * (native/src/cuda/attn_mma.cu) against the CPU backend's attention.
 *
 * Built and run on the GPU machine by tools/gpu-run.sh (linked against the
 * meson build's objects, like test_ops). Prints one line per check and exits
 * non-zero if any check fails. Optional argument: "time" adds informational
 * timings (no assertion): the Llama-3-8B shape at 512 queries x 32K and 128K
 * depth for f16 / q8_0 / q4_0 KV, 2048 queries at 32K, head_dim 256 and 64;
 * "timeonly" those timings alone; "timeone P" one f16 timing at 32K on path P
 * (attn_mma.cu's test-only switch), for a profiler; "timesmall" q8_0 at 32K
 * with 16 to 128 queries, staged (auto) against the in-kernel decoding;
 * "timeab" the warp-specialized kernel (auto) against the 8-warp kernel
 * with S one tile ahead (path 3) at 32K / 128K.
 *
 * What is compared: lkv_cuda_attn_mma + attn_finish against the CPU's
 * attn_accum + attn_finish on fresh random inputs, for KV f16 / bf16 / q8_0 /
 * q4_0 (and the mixed pairs), GQA 3 at head_dim 64, GQA 4 at head_dim 128,
 * GQA 6 and 1 at head_dim 256, 16 to 512 queries, contexts of several chunks
 * with a partial last one, on each path (the 8-warp kernel's mma.sync; where
 * the build targets sm_90a its wgmma and wgmma with S one tile ahead; auto:
 * the warp-specialized kernel for 16-bit K/V at head_dim 128, q8_0 / q4_0
 * decoded to f16 first), and:
 *   (1) one call, one segment;
 *   (2) the chunk range in two calls, rows in three segments listed out of
 *       order (boundaries inside K/V tiles); the cut lies inside the queries'
 *       span, so the second call sees queries with nothing visible;
 *   (3) a non-empty incoming state: the CPU's state after the first chunks,
 *       uploaded, then the rest on the GPU;
 *   (4) mixed with attn.cu's kernels: attn_accum for the first chunks then
 *       attn_mma, and the other way round;
 *   (5) a fully masked range leaves the state bit-for-bit as it was;
 *   (6) unsupported shapes return false and leave the state untouched;
 *   (7) exactness across calls (docs/design.md section 4): the state after one
 *       call over all chunks, one segment, equals bit for bit the state after
 *       the same range in 2 calls, in 3 calls and in one call per chunk (the
 *       state carried from call to call, rows in three segments out of
 *       order), as a streaming KV pool splits a layer's range.
 * Tolerance of (1)-(4): the GPU rounds the query (in K's dot type, then f16),
 * K, V and the probabilities to f16 (bf16 for a bf16 V, but where the auto
 * path stages a bf16 V to f16) and runs an online softmax across the
 * tiles; each is ~2^-12 (bf16: 2^-9) relative per element. 2e-3 relative (L2
 * over all outputs; 4e-3 with bf16 probabilities) leaves room for that and
 * catches any layout or masking error (those give O(1) errors).
 * (7) has no tolerance.
 */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "llamakv.h"
#include "backend.h"
#include "model.h"
#include "quant/types.h"
#include "harness.h"

/* attn_mma.cu (attn_mma.cuh; the path switch is test-only) and attn.cu (test only) */
bool lkv_cuda_attn_mma(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);
void lkv_cuda_attn_mma_path(int sel);
void lkv_cuda_attn_test_dyn(lkv_bctx *b, const int32_t *dyn_pos, int32_t cap_pos0);

// ---------------------------------------------------------------- one geometry

typedef struct {
    int nh, nkv, hd, chunk, n_ctx, n_q, tk, tv;
} acase;

/* everything one case needs, host and device */
typedef struct {
    acase c;
    size_t rbk, rbv, QN, SB;   /* row bytes; query / output floats; state bytes */
    int n_chunks, cut;
    uint8_t *kq, *vq, *dk, *dv;
    float *q, *dq, *dout;
    void *dst;
    float *ref, *out, *cst;    /* CPU output; GPU output (host); CPU state */
} actx;

static lkv_attn_desc desc_of(const actx *x, int lo, int hi, int dev, int split) {
    const acase *c = &x->c;
    lkv_attn_desc d = {c->n_q, c->n_ctx - c->n_q, c->nh, c->nkv, c->hd, c->tk, c->tv, c->chunk, lo, hi,
                       1.f / sqrtf((float)c->hd), 1, {{0}}};
    const uint8_t *k = dev ? x->dk : x->kq, *v = dev ? x->dv : x->vq;
    if (!split) {
        d.segs[0] = (lkv_kv_seg){0, c->n_ctx, k, v};
    } else {
        /* three segments out of order; boundaries not on 64-row tiles */
        const int s1 = 37, s2 = c->n_ctx / 2 + 5;
        d.n_segs = 3;
        d.segs[0] = (lkv_kv_seg){s2, c->n_ctx - s2, k + s2 * x->rbk, v + s2 * x->rbv};
        d.segs[1] = (lkv_kv_seg){0, s1, k, v};
        d.segs[2] = (lkv_kv_seg){s1, s2 - s1, k + s1 * x->rbk, v + s1 * x->rbv};
    }
    return d;
}

static void cpu_run(actx *x, float *out, int lo, int hi, int keep_state) {
    const acase *c = &x->c;
    lkv_attn_desc d = desc_of(x, lo, hi, 0, 0);
    if (!keep_state) C->attn_reset(cb, x->cst, c->n_q, c->nh, c->hd);
    C->attn_accum(cb, x->cst, x->q, &d);
    if (out) C->attn_finish(cb, out, x->cst, c->n_q, c->nh, c->hd);
}

/* GPU: finish into x->out; returns 0 if attn_mma refused a call */
static int gpu_finish(actx *x) {
    G->attn_finish(gb, x->dout, x->dst, x->c.n_q, x->c.nh, x->c.hd);
    get(x->out, x->dout, sizeof(float) * x->QN);
    return 1;
}

/* GPU state (into host) after the chunk range [0, n_chunks) in calls cut at
 * cuts[0 .. n_cuts) (increasing chunk indices), from a reset state carried
 * from call to call; rows in one segment, or in three out of order (split):
 * where a row lives must not matter. false if attn_mma refused any call. */
static bool gpu_calls(actx *x, const int *cuts, int n_cuts, int split, void *state) {
    G->attn_reset(gb, x->dst, x->c.n_q, x->c.nh, x->c.hd);
    bool took = true;
    for (int i = 0, lo = 0; i <= n_cuts; i++) {
        const int hi = i < n_cuts ? cuts[i] : x->n_chunks;
        lkv_attn_desc d = desc_of(x, lo, hi, 1, split);
        took = lkv_cuda_attn_mma(gb, x->dst, x->dq, &d) && took;
        lo = hi;
    }
    get(state, x->dst, x->SB);
    return took;
}

/* 32-bit words of a and b (n bytes) that differ */
static long words_differing(const void *a, const void *b, size_t n) {
    const uint32_t *u = a, *v = b;
    long nd = 0;
    for (size_t i = 0; i < n / 4; i++) nd += u[i] != v[i];
    return nd;
}

static const char *path_name = "auto";
/* the auto path where the device runs wgmma: a bf16 V is staged to f16 (attn_stage.cu), P in f16 */
static int bf16_staged = 0;
extern int lkv_cuda_gemm_wg_ok(const lkv_bctx *b);
static double worst_err = 0;

static void run_case(const acase *c) {
    actx x = {.c = *c};
    const lkv_traits *TK = lkv_type_traits(c->tk), *TV = lkv_type_traits(c->tv);
    const size_t E = (size_t)c->nkv * c->hd;
    x.rbk = lkv_type_row_bytes(TK, E);
    x.rbv = lkv_type_row_bytes(TV, E);
    x.n_chunks = (c->n_ctx + c->chunk - 1) / c->chunk;
    /* the cut falls inside the queries' span: part of the queries see nothing after it */
    const int q_pos0 = c->n_ctx - c->n_q;
    x.cut = (q_pos0 + c->n_q / 2) / c->chunk;
    if (x.cut < 1) x.cut = 1;
    if (x.cut >= x.n_chunks) x.cut = x.n_chunks - 1;
    x.QN = (size_t)c->n_q * c->nh * c->hd;
    x.SB = G->attn_state_bytes(c->n_q, c->nh, c->hd);

    float *kf = malloc(sizeof(float) * E), *vf = malloc(sizeof(float) * E);
    x.kq = malloc(x.rbk * c->n_ctx);
    x.vq = malloc(x.rbv * c->n_ctx);
    for (int r = 0; r < c->n_ctx; r++) {
        fill(kf, E, 2.f);
        fill(vf, E, 1.f);
        TK->from_float(kf, x.kq + r * x.rbk, E);
        TV->from_float(vf, x.vq + r * x.rbv, E);
    }
    x.q = malloc(sizeof(float) * x.QN);
    fill(x.q, x.QN, 3.f);   /* scores of sd ~2: a peaked softmax, maxima move across tiles */
    x.dk = dup_dev(x.kq, x.rbk * c->n_ctx);
    x.dv = dup_dev(x.vq, x.rbv * c->n_ctx);
    x.dq = dup_dev(x.q, sizeof(float) * x.QN);
    x.dout = dev_buf(sizeof(float) * x.QN);
    x.dst = dev_buf(x.SB);
    x.ref = malloc(sizeof(float) * x.QN);
    x.out = malloc(sizeof(float) * x.QN);
    x.cst = malloc(C->attn_state_bytes(c->n_q, c->nh, c->hd));
    float *st0 = malloc(x.SB), *st1 = malloc(x.SB);

    char tag[160];
    snprintf(tag, sizeof tag, "[%s] nh=%d nkv=%d hd=%d chunk=%d ctx=%d nq=%d k=%s v=%s", path_name, c->nh, c->nkv,
             c->hd, c->chunk, c->n_ctx, c->n_q, TK->name, TV->name);
    /* bf16 P (a bf16 V) rounds each probability to 2^-9: twice the room (staged to f16: none) */
    const double tol = c->tv == LKV_TYPE_BF16 && !bf16_staged ? 4e-3 : 2e-3;

    /* the CPU's whole range: the reference of every check */
    cpu_run(&x, x.ref, 0, x.n_chunks, 0);

    /* (1) one call, one segment */
    {
        lkv_attn_desc d = desc_of(&x, 0, x.n_chunks, 1, 0);
        G->attn_reset(gb, x.dst, c->n_q, c->nh, c->hd);
        const bool took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d);
        gpu_finish(&x);
        const double e = rel_err_f(x.out, x.ref, x.QN);
        if (e > worst_err) worst_err = e;
        check(took && e < tol, "attn_mma %s: one call: %s, rel err vs cpu %.2e (tol %.0e)", tag,
              took ? "taken" : "REFUSED", e, tol);
    }
    /* (2) two calls, three segments */
    {
        lkv_attn_desc d = desc_of(&x, 0, x.cut, 1, 1);
        G->attn_reset(gb, x.dst, c->n_q, c->nh, c->hd);
        bool took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d);
        d.chunk_lo = x.cut;
        d.chunk_hi = x.n_chunks;
        took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d) && took;
        gpu_finish(&x);
        const double e = rel_err_f(x.out, x.ref, x.QN);
        check(took && e < tol, "attn_mma %s: chunks [0,%d) + [%d,%d), 3 segments: rel err %.2e", tag, x.cut,
              x.cut, x.n_chunks, e);
    }
    /* (3) incoming state from the CPU */
    {
        cpu_run(&x, NULL, 0, x.cut, 0);
        cudaMemcpy(x.dst, x.cst, x.SB, cudaMemcpyHostToDevice); cudaDeviceSynchronize();
        lkv_attn_desc d = desc_of(&x, x.cut, x.n_chunks, 1, 1);
        const bool took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d);
        gpu_finish(&x);
        const double e = rel_err_f(x.out, x.ref, x.QN);
        check(took && e < tol, "attn_mma %s: CPU state of [0,%d) in, [%d,%d) on the GPU: rel err %.2e", tag,
              x.cut, x.cut, x.n_chunks, e);
    }
    /* (4) mixed with attn.cu, both orders */
    for (int order = 0; order < 2; order++) {
        lkv_attn_desc d1 = desc_of(&x, 0, x.cut, 1, 0), d2 = desc_of(&x, x.cut, x.n_chunks, 1, 0);
        G->attn_reset(gb, x.dst, c->n_q, c->nh, c->hd);
        bool took;
        if (order == 0) {
            G->attn_accum(gb, x.dst, x.dq, &d1);
            took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d2);
        } else {
            took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d1);
            G->attn_accum(gb, x.dst, x.dq, &d2);
        }
        gpu_finish(&x);
        const double e = rel_err_f(x.out, x.ref, x.QN);
        check(took && e < tol, "attn_mma %s: %s: rel err %.2e", tag,
              order == 0 ? "attn.cu then attn_mma" : "attn_mma then attn.cu", e);
    }
    /* (5) a fully masked range (past every query) leaves the state as it is */
    {
        lkv_attn_desc d = desc_of(&x, 0, x.cut, 1, 0);
        G->attn_reset(gb, x.dst, c->n_q, c->nh, c->hd);
        lkv_cuda_attn_mma(gb, x.dst, x.dq, &d);
        get(st0, x.dst, x.SB);
        d.chunk_lo = x.n_chunks;
        d.chunk_hi = x.n_chunks + 2;   /* positions no query reaches, held by no segment */
        const bool took = lkv_cuda_attn_mma(gb, x.dst, x.dq, &d);
        get(st1, x.dst, x.SB);
        check(took && memcmp(st0, st1, x.SB) == 0, "attn_mma %s: masked range: state %s", tag,
              memcmp(st0, st1, x.SB) == 0 ? "unchanged" : "CHANGED");
    }

    /* (7) one call against the range cut into 2, 3 and n_chunks calls */
    {
        const bool took = gpu_calls(&x, NULL, 0, 0, st0);
        int cuts[64];
        const int third = x.n_chunks / 3 > 0 ? x.n_chunks / 3 : 1;
        for (int v = 0; v < 3; v++) {
            int n_cuts = 0;
            if (v == 0) cuts[n_cuts++] = x.cut;   /* inside the queries' span */
            if (v == 1) { cuts[n_cuts++] = third; cuts[n_cuts++] = third < x.n_chunks - 1 ? 2 * third : third + 1; }
            if (v == 2) for (int i = 1; i < x.n_chunks && n_cuts < 64; i++) cuts[n_cuts++] = i;
            if (n_cuts == 0 || cuts[n_cuts - 1] >= x.n_chunks) continue;   /* a range too short for the cuts */
            const bool took2 = gpu_calls(&x, cuts, n_cuts, 1, st1);
            const long nd = words_differing(st0, st1, x.SB);
            check(took && took2 && nd == 0, "attn_mma %s: one call == %d calls (cuts at %d%s): %s (%ld words differ)",
                  tag, n_cuts + 1, cuts[0], n_cuts > 1 ? ", ..." : "", nd == 0 ? "bit-identical" : "DIFFERENT", nd);
        }
    }

    free(kf); free(vf); free(x.kq); free(x.vq); free(x.q); free(x.ref); free(x.out); free(x.cst);
    free(st0); free(st1);
    cudaFree(x.dk); cudaFree(x.dv); cudaFree(x.dq); cudaFree(x.dout); cudaFree(x.dst);
}

// ---------------------------------------------------------------- refusals

/* each of these must return false and leave the state untouched */
static void test_refusals(void) {
    const int nh = 8, nkv = 2, hd = 128, n_ctx = 300, n_q = 32;
    const size_t rb = (size_t)nkv * hd * 4 * 2;   /* room for any type tried below */
    uint8_t *dk = dev_buf(rb * n_ctx), *dv = dev_buf(rb * n_ctx);
    cudaMemset(dk, 0, rb * n_ctx); cudaDeviceSynchronize();
    cudaMemset(dv, 0, rb * n_ctx); cudaDeviceSynchronize();
    float *dq = dev_buf(sizeof(float) * n_q * nh * 256);
    cudaMemset(dq, 0, sizeof(float) * n_q * nh * 256); cudaDeviceSynchronize();
    const size_t SB = G->attn_state_bytes(n_q, nh, 256);
    void *dst = dev_buf(SB);
    uint8_t *s0 = malloc(SB), *s1 = malloc(SB);
    get(s0, dst, SB);
    const lkv_attn_desc base = {n_q, n_ctx - n_q, nh, nkv, hd, LKV_TYPE_F16, LKV_TYPE_F16, 64, 0, 5,
                                1.f / sqrtf((float)hd), 1, {{0, n_ctx, dk, dv}}};
    struct { const char *what; lkv_attn_desc d; int dyn; } cases[10];
    int n = 0;
    cases[n].what = "n_q = 15"; cases[n].d = base; cases[n].d.n_q = 15; cases[n++].dyn = 0;
    cases[n].what = "head_dim 32"; cases[n].d = base; cases[n].d.head_dim = 32; cases[n++].dyn = 0;
    cases[n].what = "head_dim 96"; cases[n].d = base; cases[n].d.head_dim = 96; cases[n++].dyn = 0;
    cases[n].what = "K f32"; cases[n].d = base; cases[n].d.type_k = LKV_TYPE_F32; cases[n++].dyn = 0;
    cases[n].what = "V q4_1"; cases[n].d = base; cases[n].d.type_v = LKV_TYPE_Q4_1; cases[n++].dyn = 0;
    cases[n].what = "K bf16, V q8_0 (no such instance)"; cases[n].d = base; cases[n].d.type_k = LKV_TYPE_BF16;
    cases[n].d.type_v = LKV_TYPE_Q8_0; cases[n++].dyn = 0;
    cases[n].what = "n_head % n_head_kv != 0"; cases[n].d = base; cases[n].d.n_head_kv = 3; cases[n++].dyn = 0;
    cases[n].what = "f16 rows not 16-byte aligned"; cases[n].d = base; cases[n].d.segs[0].k = dk + 8;
    cases[n++].dyn = 0;
    cases[n].what = "captured step (dyn_pos)"; cases[n].d = base; cases[n++].dyn = 1;
    int32_t *dpos = dev_buf(sizeof(int32_t));
    cudaMemset(dpos, 0, sizeof(int32_t)); cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) {
        if (cases[i].dyn) lkv_cuda_attn_test_dyn(gb, dpos, cases[i].d.q_pos0);
        const bool took = lkv_cuda_attn_mma(gb, dst, dq, &cases[i].d);
        if (cases[i].dyn) lkv_cuda_attn_test_dyn(gb, NULL, 0);
        get(s1, dst, SB);
        check(!took && memcmp(s0, s1, SB) == 0, "attn_mma refuses %s (%s, state %s)", cases[i].what,
              took ? "TAKEN" : "false", memcmp(s0, s1, SB) == 0 ? "untouched" : "CHANGED");
    }
    /* and takes the base case itself */
    const bool took = lkv_cuda_attn_mma(gb, dst, dq, &base);
    check(took, "attn_mma takes the base case of the refusals");
    free(s0); free(s1);
    cudaFree(dk); cudaFree(dv); cudaFree(dq); cudaFree(dst); cudaFree(dpos);
}

// ---------------------------------------------------------------- timing (information only)

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* median of 5 timed calls (after one warm-up) of n_q queries at the end of a
 * context of `depth` positions; TFLOP/s counts the causal part only:
 * 4 * n_q * (mean positions per query) * head_dim * n_head */
static void time_one(int nh, int nkv, int hd, int depth, int n_q, int t, const char *shape) {
    const int chunk = 256, R = 256;
    const lkv_traits *T = lkv_type_traits(t);
    const size_t E = (size_t)nkv * hd, rb = lkv_type_row_bytes(T, E);
    uint8_t *h = malloc(rb * R);
    float *f = malloc(sizeof(float) * E);
    for (int r = 0; r < R; r++) { fill(f, E, 2.f); T->from_float(f, h + r * rb, E); }
    uint8_t *dk = dev_buf(rb * depth);
    for (int r = 0; r < depth; r += R) cudaMemcpy(dk + r * rb, h, rb * R, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    const size_t QN = (size_t)n_q * nh * hd;
    float *q = malloc(sizeof(float) * QN);
    fill(q, QN, 1.f);
    float *dq = dup_dev(q, sizeof(float) * QN);
    void *dst = dev_buf(G->attn_state_bytes(n_q, nh, hd));
    const int n_chunks = (depth + chunk - 1) / chunk;
    lkv_attn_desc d = {n_q, depth - n_q, nh, nkv, hd, t, t, chunk, 0, n_chunks, 1.f / sqrtf((float)hd), 1,
                       {{0, depth, dk, dk}}};   /* V reads the K rows: timing only */
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms[6];
    bool took = true;
    for (int rep = 0; rep < 6; rep++) {
        G->attn_reset(gb, dst, n_q, nh, hd);
        G->sync(gb);
        cudaEventRecord(e0, 0);
        took = lkv_cuda_attn_mma(gb, dst, dq, &d) && took;
        G->sync(gb);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[rep], e0, e1);
    }
    qsort(ms + 1, 5, sizeof(float), cmp_f);   /* rep 0 warms up */
    const double mean_pos = (double)(depth - n_q) + (n_q + 1) / 2.0;
    const double flop = 4.0 * n_q * mean_pos * hd * nh;
    printf("info: [%s] attn_mma %s, %d queries at depth %d, KV %s: %.3f ms per layer (%.0f TFLOP/s)%s\n", path_name,
           shape, n_q, depth, T->name, ms[3], flop / (ms[3] * 1e-3) / 1e12, took ? "" : " REFUSED");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    free(h); free(f); free(q);
    cudaFree(dk); cudaFree(dq); cudaFree(dst);
}

static void time_all(void) {
    const int types[] = {LKV_TYPE_F16, LKV_TYPE_Q8_0, LKV_TYPE_Q4_0};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 3; ti++) time_one(32, 8, 128, di ? 131072 : 32768, 512, types[ti], "8B shape");
    time_one(32, 8, 128, 32768, 2048, LKV_TYPE_Q8_0, "8B shape");
    time_one(24, 4, 256, 32768, 512, LKV_TYPE_Q8_0, "hd256 GQA6");
    time_one(24, 4, 256, 32768, 512, LKV_TYPE_F16, "hd256 GQA6");
    time_one(9, 3, 64, 32768, 512, LKV_TYPE_Q8_0, "hd64 GQA3");
    time_one(9, 3, 64, 32768, 512, LKV_TYPE_F16, "hd64 GQA3");
}

int main(int argc, char **argv) {
    const int op = harness_open(1024, 4096, 32, 256, 8);
    if (op) return op == 1 ? 0 : op;
    const acase cases[] = {
        /* GQA 3, head_dim 64 (SmolLM2-like); chunk 96: tiles start off the 64-grid */
        {9, 3, 64, 256, 1000, 16, LKV_TYPE_F16, LKV_TYPE_F16},
        {9, 3, 64, 256, 1000, 100, LKV_TYPE_F16, LKV_TYPE_F16},
        {9, 3, 64, 256, 1000, 100, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {9, 3, 64, 256, 1000, 100, LKV_TYPE_Q4_0, LKV_TYPE_Q4_0},
        {9, 3, 64, 96, 700, 512, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {9, 3, 64, 96, 700, 16, LKV_TYPE_Q4_0, LKV_TYPE_Q4_0},
        /* GQA 4, head_dim 128 (Llama-3-8B-like) */
        {8, 2, 128, 256, 1300, 16, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {8, 2, 128, 256, 1300, 100, LKV_TYPE_F16, LKV_TYPE_F16},
        {8, 2, 128, 256, 1300, 100, LKV_TYPE_Q4_0, LKV_TYPE_Q4_0},
        {8, 2, 128, 256, 1300, 512, LKV_TYPE_F16, LKV_TYPE_F16},
        {8, 2, 128, 256, 1300, 512, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {8, 2, 128, 256, 1300, 512, LKV_TYPE_Q4_0, LKV_TYPE_Q4_0},
        {32, 8, 128, 256, 1100, 512, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        /* K and V of different types */
        {8, 2, 128, 256, 900, 100, LKV_TYPE_Q8_0, LKV_TYPE_F16},
        {9, 3, 64, 256, 600, 64, LKV_TYPE_F16, LKV_TYPE_Q4_0},
        /* longer contexts (5 to 20 chunks, the last partial) for the split checks (7);
         * chunk 96: a chunk ends inside a 64-row tile */
        {9, 3, 64, 256, 1200, 16, LKV_TYPE_F16, LKV_TYPE_F16},
        {9, 3, 64, 256, 1200, 100, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {9, 3, 64, 64, 1250, 512, LKV_TYPE_F16, LKV_TYPE_F16},
        {9, 3, 64, 96, 1000, 100, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {9, 3, 64, 128, 1100, 512, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {8, 2, 128, 256, 2500, 512, LKV_TYPE_F16, LKV_TYPE_F16},
        {8, 2, 128, 256, 2500, 16, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {8, 2, 128, 64, 1000, 100, LKV_TYPE_F16, LKV_TYPE_F16},
        {8, 2, 128, 256, 4900, 512, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {8, 2, 128, 96, 1500, 16, LKV_TYPE_F16, LKV_TYPE_F16},
        /* bf16 K/V (bf16 products and P), the other mixed pairs */
        {8, 2, 128, 256, 1300, 100, LKV_TYPE_BF16, LKV_TYPE_BF16},
        {9, 3, 64, 96, 1000, 512, LKV_TYPE_BF16, LKV_TYPE_BF16},
        {8, 2, 128, 256, 1300, 100, LKV_TYPE_Q8_0, LKV_TYPE_Q4_0},
        {9, 3, 64, 128, 900, 100, LKV_TYPE_F16, LKV_TYPE_Q8_0},
        {8, 2, 128, 256, 1300, 100, LKV_TYPE_BF16, LKV_TYPE_F16},
        /* head_dim 256, GQA 6 (Qwen3.5-like full attention), GQA 1 */
        {12, 2, 256, 256, 1300, 100, LKV_TYPE_F16, LKV_TYPE_F16},
        {12, 2, 256, 256, 1300, 512, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
        {12, 2, 256, 96, 1000, 100, LKV_TYPE_Q4_0, LKV_TYPE_Q4_0},
        {12, 2, 256, 256, 900, 64, LKV_TYPE_Q8_0, LKV_TYPE_Q4_0},
        {4, 4, 256, 256, 1000, 64, LKV_TYPE_BF16, LKV_TYPE_BF16},
        {4, 4, 128, 64, 1000, 200, LKV_TYPE_Q8_0, LKV_TYPE_Q8_0},
    };
    /* every case on each path: auto (wgmma where built for sm_90a) and mma.sync */
    const char *names[4] = {"mma.sync", "wgmma", "wgmma pipelined (8 warps)", "auto"};
    const int sel[4] = {1, 2, 3, 0};
    const int timing = argc > 1 && !strcmp(argv[1], "time");
    if (argc > 2 && !strcmp(argv[1], "timeone")) {   /* one f16 timing on path argv[2] (for a profiler) */
        lkv_cuda_attn_mma_path(atoi(argv[2]));
        time_one(32, 8, 128, 32768, 512, LKV_TYPE_F16, "8B shape");
        lkv_cuda_attn_mma_path(0);
        return harness_close();
    }
    if (argc > 1 && !strcmp(argv[1], "timesmall")) {   /* few queries: staged (auto) against in-kernel (path 3) */
        const int nqs[] = {16, 32, 48, 64, 96, 128}, pis[2] = {3, 2};   /* names[] / sel[]: auto, path 3 */
        for (int k = 0; k < 2; k++) {
            lkv_cuda_attn_mma_path(sel[pis[k]]);
            path_name = names[pis[k]];
            for (int i = 0; i < 6; i++) time_one(32, 8, 128, 32768, nqs[i], LKV_TYPE_Q8_0, "8B shape");
        }
        lkv_cuda_attn_mma_path(0);
        return harness_close();
    }
    if (argc > 1 && !strcmp(argv[1], "timeonly")) {   /* timings only, the auto path */
        time_all();
        return harness_close();
    }
    if (argc > 1 && !strcmp(argv[1], "timeab")) {   /* auto (warp-specialized) against the 8-warp kernel (3) */
        for (int k = 3; k >= 2; k--) {
            lkv_cuda_attn_mma_path(sel[k]);
            path_name = names[k];
            for (int di = 0; di < 2; di++) {
                time_one(32, 8, 128, di ? 131072 : 32768, 512, LKV_TYPE_F16, "8B shape");
                time_one(32, 8, 128, di ? 131072 : 32768, 512, LKV_TYPE_Q8_0, "8B shape");
            }
            time_one(32, 8, 128, 32768, 2048, LKV_TYPE_Q8_0, "8B shape");
        }
        lkv_cuda_attn_mma_path(0);
        return harness_close();
    }
    for (int pi = 0; pi < 4; pi++) {
        lkv_cuda_attn_mma_path(sel[pi]);
        path_name = names[pi];
        bf16_staged = sel[pi] == 0 && lkv_cuda_gemm_wg_ok(gb);
        worst_err = 0;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
        printf("info: [%s] largest rel err vs cpu (one call) %.2e\n", path_name, worst_err);
        if (pi == 3) test_refusals();
        if (timing) time_all();
    }
    lkv_cuda_attn_mma_path(0);
    return harness_close();
}
