/*
 * cuda/mvx.cu: decode mat-vec (n <= MV_MAX_TOK) for the legacy weight types,
 * bit-identical to the CPU backend (exact.cuh: the CPU's 8 lane chains).
 *
 * The arithmetic is fixed by the CPU: per output (row, token) and lane
 * l = 0..7, acc_l = fmaf(dx * dy, (float)p_l, acc_l) over the row's blocks in
 * order, p_l the exact integer dot of elements 4l..4l+3, then the hsum tree.
 * A chain cannot be split along the row, so the parallelism of a matrix is
 * rows x 8 x n chains (4096 rows, n = 1: 32768): few threads per SM, and the
 * memory system has to be kept busy by copies in flight rather than by
 * threads. Hence:
 *
 *   - a block of MT_THREADS threads owns MT_ROWS rows, one lane chain per
 *     thread (thread = row k, lane l): 16 rows per block gives 256 blocks
 *     on a 4096-row matrix and 64 on the 1024-row k/v weights;
 *   - the block streams its rows through a ring of MT_ST stages of KC blocks
 *     per row in shared memory, filled with 16-byte cp.async by all threads
 *     (consecutive threads on consecutive chunks of a row: coalesced);
 *     MT_ST - 1 stages are in flight while one is computed (q4_0: ~58 KB
 *     per block, 2-3 blocks per SM: 120-170 KB per SM in flight, against
 *     ~27 KB with the first version's warp-private rings: 153 -> 200 t/s
 *     for the 8B decode step, H200 run 15);
 *   - per block and token a thread does, from shared memory:
 *       p = dp4a(codes, act, EX_MAGIC)                 (bits of 12582912 + p)
 *       acc = fmaf(dx * dy, float(p) - 12582912, acc)  (the CPU's fmadd)
 *     activations (q8 codes, scales) are read through L1 with __ldg: every
 *     row of the SM reads the same ones;
 *   - at the end the 8 threads of a row add their lanes in the CPU's hsum
 *     order through three shuffles.
 *
 * Stage layout: row k of a stage holds the 16-byte chunks covering its KC
 * blocks from the chunk holding the row's first byte (rows need not start on
 * 16 bytes: 576 columns of q4_0 are 324-byte rows); the row stride rs is
 * 32 or 96 mod 128 bytes so that the 4 rows of a warp, each reading a window
 * of <= 5 consecutive words shifted by at most 3 words, fall in distinct
 * banks (q8_0 reads 9 words per row: some 2-way conflicts remain).
 */
#include <stdlib.h>
#include <string.h>

#include "exact.cuh"

enum { MT_THREADS = 128, MT_ROWS = 16, MT_LANES = 8, MT_RING_MAX = 72 * 1024 };

template <int T> struct mt_geom {
    static constexpr int bytes = cblk<T>::bytes;
    /* blocks per row and stage: ~512-700 bytes of a row between barriers */
    static constexpr int kc = bytes > 24 ? 16 : 32;
    static constexpr int span = kc * bytes;                 /* a multiple of 16 for every type */
    static constexpr int nch = span / 16 + 1;               /* + 1: the row's start within its chunk */
    static constexpr int rs_min = nch * 16;
    static constexpr int rs = rs_min % 128 <= 32 ? rs_min - rs_min % 128 + 32
                            : rs_min % 128 <= 96 ? rs_min - rs_min % 128 + 96
                                                 : rs_min - rs_min % 128 + 160;
    static constexpr int stage = MT_ROWS * rs;
    /* 3 blocks per SM fit (227 KB): enough for the 384 blocks of a q/k/v set */
    static constexpr int st = MT_RING_MAX / stage < 8 ? MT_RING_MAX / stage : 8;
    static constexpr int ring = st * stage;
    static constexpr int chunks = MT_ROWS * nch;            /* chunk slots per stage */
    static constexpr int cit = (chunks + MT_THREADS - 1) / MT_THREADS;   /* per thread */
    static_assert(span % 16 == 0 && (rs % 128 == 32 || rs % 128 == 96) && rs >= rs_min, "mt_geom");
    static_assert(st >= 3, "mt_geom: ring too shallow");
};

static __device__ __forceinline__ void mt_cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mt_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// ---------------------------------------------------------------- kernel

/* NT: tokens computed (n rounded up to 1, 2, 4 or 8; tokens past n repeat
 * the last one and are not stored) */
template <int T, int NT>
__global__ void __launch_bounds__(MT_THREADS)
mvx_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
           const float *__restrict__ xs, int cols, int n) {
    using G = mt_geom<T>;
    constexpr bool MIN = ex_min<T>::v;
    extern __shared__ __align__(16) uint8_t sm[];
    const int tid = threadIdx.x;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j];
    const int r0 = (blockIdx.x - ms.tile0[j]) * MT_ROWS;
    const int ng = cols / 32, nst = (ng + G::kc - 1) / G::kc;
    const size_t rb = ms.row_bytes[j];
    const uint8_t *w0 = ms.w[j], *wend = w0 + (size_t)rows * rb;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(sm);

    /* this thread's chunk slots c = tid + MT_THREADS * i of every stage: row
     * c / nch, chunk c % nch; src: the chunk in stage 0, off: its first byte
     * relative to the row's first byte of the stage (needed while < the
     * stage's bytes; past the matrix end the copy is cut short) */
    const uint8_t *csrc[G::cit];
    int cdst[G::cit], coff[G::cit];
#pragma unroll
    for (int i = 0; i < G::cit; i++) {
        const int c = tid + MT_THREADS * i, k = c / G::nch, ch = c % G::nch;
        const uint8_t *rp = w0 + (size_t)min(r0 + k, rows - 1) * rb;
        csrc[i] = (const uint8_t *)((uintptr_t)rp & ~(uintptr_t)15) + 16 * ch;
        cdst[i] = k * G::rs + 16 * ch;
        coff[i] = c < G::chunks ? 16 * ch - (int)((uintptr_t)rp & 15) : INT32_MAX;
    }
    auto issue = [&](int s) {
        const int need = min(G::kc, ng - s * G::kc) * G::bytes;
        const uint32_t dst0 = ring_s + (s % G::st) * G::stage;
#pragma unroll
        for (int i = 0; i < G::cit; i++) {
            if (coff[i] >= need) continue;
            const uint8_t *src = csrc[i] + (size_t)s * G::span;
            const ptrdiff_t left = wend - src;
            mt_cp16(dst0 + cdst[i], src, left >= 16 ? 16 : (int)left);
        }
        mt_commit();
    };

    /* this thread's chain: row k, lane l; the row's offset within its first
     * chunk is the same in every stage (span is a multiple of 16) */
    const int k = tid / MT_LANES, l = tid % MT_LANES;
    const int mis = (int)((uintptr_t)(w0 + (size_t)min(r0 + k, rows - 1) * rb) & 15);
    float acc[NT], summ[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = summ[t] = 0.f;
    /* per token: its activation word l, scale and sum term of the current
     * block (advanced block by block: immediate offsets when unrolled) */
    const int *yp[NT];
    const float *dp[NT], *sp[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int tt = min(t, n - 1);
        yp[t] = (const int *)(xq + (size_t)tt * cols) + l;
        dp[t] = xd + (size_t)tt * ng;
        sp[t] = xs + (size_t)tt * ng;
    }

#pragma unroll 1
    for (int s = 0; s < G::st - 1; s++) {
        if (s < nst) issue(s);
        else mt_commit();
    }
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(G::st - 2) : "memory");
        /* stage s is in for every thread, and every thread is done with
         * stage s - 1, whose buffer stage s + st - 1 now takes */
        __syncthreads();
        if (s + G::st - 1 < nst) issue(s + G::st - 1);
        else mt_commit();
        const uint8_t *base = sm + (s % G::st) * G::stage + k * G::rs + mis;
        const int nb = min(G::kc, ng - s * G::kc);
        /* more blocks in flight per thread when few tokens keep registers free */
#pragma unroll(NT <= 2 ? 8 : 4)
        for (int i = 0; i < nb; i++) {
            const uint8_t *blk = base + i * G::bytes;
            const uint32_t w = ex_word<T>(blk, l);
            const float dw = ex_d(blk);
            float mw = 0.f;
            if constexpr (MIN) mw = ex_m(blk);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int y = __ldg(yp[t]);
                const float f = __fmul_rn(dw, __ldg(dp[t]));
                const int p = __dp4a((int)w, y, EX_MAGIC);
                acc[t] = __fmaf_rn(f, __fsub_rn(__int_as_float(p), 12582912.f), acc[t]);
                if constexpr (MIN) summ[t] = __fadd_rn(summ[t], __fmul_rn(mw, __ldg(sp[t])));
                yp[t] += 8; dp[t]++; sp[t]++;
            }
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

    /* the CPU's hsum over the row's 8 threads: (a_l + a_{l+4}) for l < 4
     * (xor 4; the upper half computes the same sums, float + commutes), then
     * (s0 + s2), (s1 + s3) (xor 2), then their sum (xor 1); + summ for q8_1 */
    float *out = ms.out[j];
    const int r = r0 + k;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = acc[t];
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        if constexpr (MIN) v = __fadd_rn(v, summ[t]);
        if (l == 0 && t < n && r < rows) out[(size_t)t * rows + r] = v;
    }
}

// ---------------------------------------------------------------- launcher

template <int T, int NT>
static void mvx_launch(lkv_bctx *b, mm_set &ms, int cols, int n) {
    constexpr int bytes = mt_geom<T>::ring;
    static unsigned configured = 0;   /* one bit per device: shared-memory limit raised */
    if (b->device >= 32 || !(configured >> b->device & 1u)) {
        LKV_CUDA_CALL(b, cudaFuncSetAttribute(mvx_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                      "matmul (mvx): shared memory limit");
        /* 3 rings per SM need the largest carveout; L1 keeps the rest for the
         * activations (n = 1: cols + 4 * cols / 32 bytes) */
        LKV_CUDA_CALL(b, cudaFuncSetAttribute(mvx_kernel<T, NT>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                              cudaSharedmemCarveoutMaxShared),
                      "matmul (mvx): carveout");
        if (b->device < 32) configured |= 1u << b->device;
    }
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MT_ROWS);
    mvx_kernel<T, NT><<<ms.tile0[ms.n_w], MT_THREADS, bytes, b->stream>>>(ms, b->xq, b->xd, b->xs, cols, n);
}

template <int T>
static bool mvx_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (ex_ok<T>::v) {
        if (n <= 1) mvx_launch<T, 1>(b, ms, cols, n);
        else if (n <= 2) mvx_launch<T, 2>(b, ms, cols, n);
        else if (n <= 4) mvx_launch<T, 4>(b, ms, cols, n);
        else mvx_launch<T, 8>(b, ms, cols, n);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_mvx(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (n < 1 || n > MV_MAX_TOK) return false;
    switch (type) {
#define X(T) case T: return mvx_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
