/*
 * cuda/mvx_warp.cu: the first CPU-exact decode mat-vec (n <= MV_MAX_TOK) for
 * the legacy weight types, kept for comparison with mvx.cu's (the default):
 * LKV_CUDA_MVX=old selects it. Same arithmetic (exact.cuh: the CPU's 8 lane
 * chains), another work split: a warp per 8 rows with its own ring, which
 * leaves too few bytes in flight per SM on 4096-row matrices (~27 KB; H200:
 * 0.67 TB/s on the 8B decode step).
 *
 * Work split: the 4 threads q = 0..3 of a quad own one weight row; thread q
 * holds the chains of lanes q and q + 4 for every token. Those two lanes read
 * the same 4 qs bytes in the nibble formats (low / high nibbles), so a thread
 * loads 4 bytes of codes per block. Per block and token:
 *   p = dp4a(codes, act, EX_MAGIC)                      (bits of 12582912 + p)
 *   acc = fmaf(dx * dy, float(p) - 12582912, acc)      (the CPU's fmadd)
 * and at the end the quad adds its lanes in the CPU's hsum order through
 * two shuffles. The chains run in block order inside one thread, as the CPU's.
 *
 * Memory: a warp owns 8 rows and streams them through its own ring of
 * MX_ST shared-memory stages (cp.async, 16-byte, consecutive lanes on
 * consecutive chunks of a row), MX_KC blocks per stage: each warp keeps
 * (MX_ST - 1) * 8 rows * MX_KC blocks in flight (q4_0: ~6.9 KB) whatever the
 * number of warps per SM, which is small for the 4096-row matrices (one
 * warp per 8 rows). No block-wide barrier: each warp waits for its own copies.
 * Activations (at most 8 x cols bytes) are read through L1 with __ldg: every
 * row of the SM uses them.
 *
 * Stage layout: row k of a stage holds the 16-byte chunks covering its
 * MX_KC blocks (one more chunk when the row does not start on 16 bytes);
 * the row stride is an odd number of chunks so that the 8 rows of a warp
 * fall in distinct banks.
 */
#include "exact.cuh"

enum { MX_KC = 16, MX_ST = 4, MX_WARPS = 4, MX_ROWS = 8 };

template <int T> struct mx_geom {
    static constexpr int span = MX_KC * cblk<T>::bytes;   /* bytes of a row per stage: 16 * bytes */
    static constexpr int nch = span / 16 + 1;               /* chunks: span / 16 = bytes is even */
    static constexpr int rs = nch * 16;                     /* row stride in shared memory */
    static constexpr int warp_bytes = MX_ST * MX_ROWS * rs;
};

static __device__ __forceinline__ void mx_cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

// ---------------------------------------------------------------- kernel

/* NT: tokens computed (n rounded up to 1, 2, 4 or 8; tokens past n repeat
 * the last one and are not stored) */
template <int T, int NT>
__global__ void __launch_bounds__(MX_WARPS * 32)
mvx_warp_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
           const float *__restrict__ xs, int cols, int n) {
    using G = mx_geom<T>;
    constexpr bool MIN = ex_min<T>::v;
    constexpr int BYTES = cblk<T>::bytes;
    extern __shared__ __align__(16) uint8_t sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j];
    const int r0 = ((blockIdx.x - ms.tile0[j]) * MX_WARPS + warp) * MX_ROWS;
    if (r0 >= rows) return;   /* warps are independent: no block barrier below */
    const int ng = cols / 32, nst = (ng + MX_KC - 1) / MX_KC;
    const size_t rb = ms.row_bytes[j];
    const uint8_t *w0 = ms.w[j], *wend = w0 + (size_t)rows * rb;
    uint8_t *ring = sm + warp * G::warp_bytes;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    /* copies of stage s: lane c takes chunks c, c + 32, ... of the 8 rows */
    auto issue = [&](int s) {
        const uint32_t dst0 = ring_s + (s % MX_ST) * (MX_ROWS * G::rs);
#pragma unroll 1
        for (int c = lane; c < MX_ROWS * G::nch; c += 32) {
            const int k = c / G::nch, ch = c % G::nch;
            const uint8_t *rp = w0 + (size_t)min(r0 + k, rows - 1) * rb + (size_t)s * G::span;
            const uint8_t *src = (const uint8_t *)((uintptr_t)rp & ~(uintptr_t)15) + 16 * ch;
            const ptrdiff_t left = wend - src;
            int nb = left >= 16 ? 16 : left > 0 ? (int)left : 0;
            if (ch == G::nch - 1 && ((uintptr_t)rp & 15) == 0) nb = 0;   /* aligned row: not needed */
            mx_cp16(dst0 + k * G::rs + 16 * ch, nb ? src : w0, nb);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    /* this thread's row and lanes; a row's offset mod 16 is the same in every
     * stage (span is a multiple of 16) */
    const int k = lane >> 2, q = lane & 3;
    const int mis = (int)((uintptr_t)(w0 + (size_t)min(r0 + k, rows - 1) * rb) & 15);
    float acc0[NT], acc1[NT], summ[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc0[t] = acc1[t] = summ[t] = 0.f;
    /* per token: its activation words q and q + 4, scale and sum term of the
     * current block (advanced block by block: immediate offsets when unrolled) */
    const int *yp[NT];
    const float *dp[NT], *sp[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int tt = min(t, n - 1);
        yp[t] = (const int *)(xq + (size_t)tt * cols) + q;
        dp[t] = xd + (size_t)tt * ng;
        sp[t] = xs + (size_t)tt * ng;
    }

#pragma unroll 1
    for (int s = 0; s < MX_ST - 1; s++) {
        if (s < nst) issue(s);
        else asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        /* stage s + MX_ST - 1 goes into the buffer that stage s - 1 used */
        if (s + MX_ST - 1 < nst) issue(s + MX_ST - 1);
        else asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_group %0;\n" ::"n"(MX_ST - 1) : "memory");
        __syncwarp();
        const uint8_t *base = ring + (s % MX_ST) * (MX_ROWS * G::rs) + k * G::rs + mis;
        const int nb = min(MX_KC, ng - s * MX_KC);
        /* more blocks in flight per thread when few tokens keep registers free */
#pragma unroll(NT <= 2 ? 8 : 4)
        for (int i = 0; i < nb; i++) {
            const uint8_t *blk = base + i * BYTES;
            const uint32_t lo = ex_word<T>(blk, q), hi = ex_word<T>(blk, q + 4);
            const float dw = ex_d(blk);
            float mw = 0.f;
            if constexpr (MIN) mw = ex_m(blk);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int y0 = __ldg(yp[t]), y1 = __ldg(yp[t] + 4);
                const float f = __fmul_rn(dw, __ldg(dp[t]));
                const int p0 = __dp4a((int)lo, y0, EX_MAGIC), p1 = __dp4a((int)hi, y1, EX_MAGIC);
                acc0[t] = __fmaf_rn(f, __fsub_rn(__int_as_float(p0), 12582912.f), acc0[t]);
                acc1[t] = __fmaf_rn(f, __fsub_rn(__int_as_float(p1), 12582912.f), acc1[t]);
                if constexpr (MIN) summ[t] = __fadd_rn(summ[t], __fmul_rn(mw, __ldg(sp[t])));
                yp[t] += 8; dp[t]++; sp[t]++;
            }
        }
        __syncwarp();   /* the next issue overwrites the oldest buffer */
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

    /* the CPU's hsum: (a_l + a_{l+4}) for l = q, then (s0 + s2), (s1 + s3),
     * then their sum; + summ for q8_1 */
    float *out = ms.out[j];
    const int r = r0 + k;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = __fadd_rn(acc0[t], acc1[t]);
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        if constexpr (MIN) v = __fadd_rn(v, summ[t]);
        if (q == 0 && t < n && r < rows) out[(size_t)t * rows + r] = v;
    }
}

// ---------------------------------------------------------------- launcher

template <int T, int NT>
static void mvx_warp_launch(lkv_bctx *b, mm_set &ms, int cols, int n) {
    constexpr int bytes = MX_WARPS * mx_geom<T>::warp_bytes;
    static unsigned configured = 0;   /* one bit per device: shared-memory limit raised */
    if (bytes > 48 * 1024 && (b->device >= 32 || !(configured >> b->device & 1u))) {
        LKV_CUDA_CALL(b, cudaFuncSetAttribute(mvx_warp_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                      "matmul (mvx): shared memory limit");
        if (b->device < 32) configured |= 1u << b->device;
    }
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++)
        ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MX_WARPS * MX_ROWS);
    mvx_warp_kernel<T, NT><<<ms.tile0[ms.n_w], MX_WARPS * 32, bytes, b->stream>>>(ms, b->xq, b->xd, b->xs, cols, n);
}

template <int T>
static bool mvx_warp_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (ex_ok<T>::v) {
        if (n <= 1) mvx_warp_launch<T, 1>(b, ms, cols, n);
        else if (n <= 2) mvx_warp_launch<T, 2>(b, ms, cols, n);
        else if (n <= 4) mvx_warp_launch<T, 4>(b, ms, cols, n);
        else mvx_warp_launch<T, 8>(b, ms, cols, n);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_mvx_warp(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (n < 1 || n > MV_MAX_TOK) return false;
    switch (type) {
#define X(T) case T: return mvx_warp_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
