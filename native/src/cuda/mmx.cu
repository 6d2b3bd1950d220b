/*
 * cuda/mmx.cu: prefill GEMM (n > MV_MAX_TOK) for the legacy weight types,
 * bit-identical to the CPU backend (exact.cuh: per output 8 float chains,
 * one per lane of 4 elements, acc_l = fmaf(dx * dy, p_l, acc_l) per block,
 * then the CPU's hsum tree and, for q4_1 / q5_1, + summ).
 *
 * Cost floor: 8 FFMA per (row, token, block), each on a (float)p_l of its
 * own. The lane partials p_l come from mma.m16n8k8 f16 -> f32 with a zero
 * accumulator: codes (|q| <= 128) are exact in f16, products and sums
 * (< 2^16) exact in f32, so the mma hands over (float)p_l and each lane
 * costs one FFMA. K = 8 spans two lanes (2p, 2p + 1); they are kept apart
 * by splitting the A rows: A row g is lane 2p of weight row g with k 4..7
 * zeroed, A row g + 8 is lane 2p + 1 with k 0..3 zeroed. One mma thus gives
 * 8 weight rows x 8 tokens x 2 lanes, and every thread receives both lanes
 * of its outputs (row g, tokens 2c, 2c + 1), i.e. over p = 0..3 all 8 lanes
 * of 16 outputs: the hsum stays in registers.
 *
 * Why this replaced the first version (a tf32 m16n8k4 kernel, 202 ms for
 * pp512 on 8B against 164 ms here, H200 run 15; removed): that one kept both operands as f32
 * codes in shared memory (12 bytes read per (row, token, block) with its
 * 32 x 16 warp tiles, plus 4 bytes per code written by a block-wide unpack
 * phase): shared-memory bound above the FFMA floor, and one block per SM
 * stalled at every unpack barrier. Here:
 *   - weights never pass through a code tile: each warp owns 8 rows x all
 *     64 tokens, so every weight code is needed by exactly one warp, which
 *     expands it from the raw bytes in shared memory straight into its A
 *     fragments (ex_word, byte_perm to f16 1024 + code + 128, one HFMA2 per
 *     fragment that subtracts 1152 or zeroes the masked half);
 *   - activations are unpacked once per block to f16 (2 bytes per code) in
 *     an order where a thread's 4 B fragments of one token are one LDS.128;
 *   - per warp and block: 32 mma, 128 FFMA, 16 FMUL, ~30 instructions of
 *     weight expansion, 12 LDS.128. Issue-bound at ~240 instructions per
 *     512 (row, token) pairs, ~25% above the FFMA floor.
 * Fragments (PTX, m16n8k8 .f16; g = lane >> 2, c = lane & 3):
 *   A (16 x 8, row): a0 = (row g, k 2c, 2c + 1), a1 = (row g + 8, k 2c, 2c + 1)
 *   B (8 x 8, col):  b0 = (k 2c, 2c + 1, col g)
 *   C (16 x 8):      c0 = (g, 2c), c1 = (g, 2c + 1), c2 = (g + 8, 2c), c3 = (g + 8, 2c + 1)
 * with k = element 8p + k of the block; a0 = codes of row g at 8p + 2c,
 * 8p + 2c + 1 when c < 2 (lane 2p) else 0, a1 the same pair when c >= 2
 * (lane 2p + 1) else 0; B column = token.
 */
#include "exact.cuh"
#include "gemm_ptx.cuh"

enum { XH_BM = 64, XH_BN = 64, XH_KB = 4, XH_THREADS = 256 };
enum { XH_XLD = XH_KB * 32 + 16 };   /* bytes per token row of the int8 activations: 16 mod 128 */
enum { XH_HS = XH_KB * 64 + 64 };    /* bytes per token row of the f16 codes: 64 mod 128 -> LDS.128 conflict-free */

/* raw weight bytes of one row and stage: the span of the stage's 4 blocks,
 * copied as the 16-byte chunks covering it (it may start anywhere mod 16);
 * an odd number of chunks per row spreads the rows over the banks */
template <int T> struct xh_geom {
    static constexpr int span = XH_KB * cblk<T>::bytes;
    static constexpr int nch0 = (span + 15 + 15) / 16;
    static constexpr int nch = nch0 | 1;
    static constexpr int rs = nch * 16;
};

/* shared memory, byte offsets (all multiples of 16). xd / xs of one block
 * are stored token-permuted (xh_dpos) so a thread's 16 tokens are 64
 * contiguous bytes */
template <int T> struct xh_smem {
    static constexpr bool MIN = ex_min<T>::v;
    static constexpr int raw = 0;                                      /* [2][XH_BM][rs] */
    static constexpr int x = raw + 2 * XH_BM * xh_geom<T>::rs;         /* int8 [2][XH_BN][XH_XLD] */
    static constexpr int h = x + 2 * XH_BN * XH_XLD;                   /* f16 [XH_BN][XH_HS / 2] */
    static constexpr int xd = h + XH_BN * XH_HS;                       /* float [2][XH_KB][XH_BN] */
    static constexpr int xs = xd + 2 * XH_KB * XH_BN * 4;              /* float [2][XH_KB][XH_BN] */
    static constexpr int bytes = xs + (MIN ? 2 * XH_KB * XH_BN * 4 : 0);
};

/* token t of the tile (t = 8 tg + 2 c + i) -> its place among a block's 64 scales */
static __host__ __device__ __forceinline__ int xh_dpos(int t) { return ((t >> 1) & 3) * 16 + (t >> 3) * 2 + (t & 1); }

/* d = a * b with a zero accumulator: exactly (float) sum of the integer products */
static __device__ __forceinline__ void xh_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "f"(0.f));
}
/* bytes 2 hi, 2 hi + 1 of w80 (codes + 128) as the f16 pair 1024 + code + 128:
 * 0x64 in the high byte makes a half in [1024, 2048), where the ulp is 1 */
static __device__ __forceinline__ uint32_t xh_pair(uint32_t w80, int hi) {
    return __byte_perm(w80, 0x64646464u, hi ? 0x4342u : 0x4140u);
}
static __device__ __forceinline__ uint32_t xh_hfma2(uint32_t x, uint32_t s, uint32_t k) {
    uint32_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(x), "r"(s), "r"(k));
    return r;
}
static __device__ __forceinline__ uint32_t xh_hadd2(uint32_t x, uint32_t k) {
    uint32_t r;
    asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(x), "r"(k));
    return r;
}
enum : uint32_t { XH_ONE2 = 0x3C003C00u, XH_M1152 = 0xE480E480u };   /* f16 pairs (1, 1), (-1152, -1152) */

// ---------------------------------------------------------------- kernel

template <int T>
__global__ void __launch_bounds__(XH_THREADS, 1)
mmx_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
           const float *__restrict__ xs, int cols, int ntok) {
    using G = xh_geom<T>;
    using L = xh_smem<T>;
    constexpr bool MIN = ex_min<T>::v;
    extern __shared__ __align__(16) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j], r0 = (blockIdx.x - ms.tile0[j]) * XH_BM, t0 = blockIdx.y * XH_BN;
    const int ng = cols / 32, nst = (ng + XH_KB - 1) / XH_KB;
    __shared__ const uint8_t *s_rowp[XH_BM];   /* rows past the end read the last one */
    const uint8_t *wend = mm_tile_rows(ms, j, r0, rows, XH_BM, tid, s_rowp);
    __syncthreads();

    /* cp.async of stage s into buffers s & 1 */
    auto issue = [&](int s) {
        const int buf = s & 1;
#pragma unroll 1
        for (int i = tid; i < XH_BN * (XH_KB * 32 / 16); i += XH_THREADS) {
            const int tk = i >> 3, ch = i & 7, k = s * XH_KB * 32 + ch * 16, t = t0 + tk;
            const bool ok = t < ntok && k < cols;
            gm_cp16(sb + L::x + (buf * XH_BN + tk) * XH_XLD + ch * 16, ok ? xq + (size_t)t * cols + k : xq,
                    ok ? 16 : 0);
        }
#pragma unroll 1
        for (int i = tid; i < XH_BN * XH_KB; i += XH_THREADS) {
            const int tk = i & (XH_BN - 1), kb = i / XH_BN, gb = s * XH_KB + kb, t = t0 + tk;
            const bool ok = t < ntok && gb < ng;
            const size_t o = ok ? (size_t)t * ng + gb : 0;
            const int d = (buf * XH_KB + kb) * XH_BN + xh_dpos(tk);
            gm_cp4(sb + L::xd + 4 * d, xd + o, ok ? 4 : 0);
            if constexpr (MIN) gm_cp4(sb + L::xs + 4 * d, xs + o, ok ? 4 : 0);
        }
#pragma unroll 1
        for (int i = tid; i < XH_BM * G::nch; i += XH_THREADS) {
            const int row = i / G::nch, ch = i % G::nch;
            const uint8_t *rp = s_rowp[row];
            const uint8_t *src = (const uint8_t *)((uintptr_t)(rp + (size_t)s * G::span) & ~(uintptr_t)15) + 16 * ch;
            const ptrdiff_t left = wend - src;
            const int nb = ch >= G::nch0 ? 0 : left >= 16 ? 16 : left > 0 ? (int)left : 0;
            gm_cp16(sb + L::raw + (buf * XH_BM + row) * G::rs + 16 * ch, nb ? src : rp, nb);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    /* int8 activations of stage s -> f16 codes, thread = (token, block). In a
     * token's block, 16-byte chunk c holds the pairs (8p + 2c, 8p + 2c + 1),
     * p = 0..3: a thread's B fragments of one block in one LDS.128 */
    auto unpack = [&](int s) {
        const int tk = tid & (XH_BN - 1), kb = tid >> 6;
        const uint4 *p = (const uint4 *)(sm + L::x + ((s & 1) * XH_BN + tk) * XH_XLD + kb * 32);
        const uint4 v0 = p[0], v1 = p[1];
        const uint32_t w[8] = {v0.x ^ 0x80808080u, v0.y ^ 0x80808080u, v0.z ^ 0x80808080u, v0.w ^ 0x80808080u,
                               v1.x ^ 0x80808080u, v1.y ^ 0x80808080u, v1.z ^ 0x80808080u, v1.w ^ 0x80808080u};
        uint4 *dst = (uint4 *)(sm + L::h + tk * XH_HS + kb * 64);
#pragma unroll
        for (int cc = 0; cc < 4; cc++) {
            uint32_t q[4];
#pragma unroll
            for (int pp = 0; pp < 4; pp++) q[pp] = xh_hadd2(xh_pair(w[2 * pp + (cc >> 1)], cc & 1), XH_M1152);
            dst[cc] = make_uint4(q[0], q[1], q[2], q[3]);
        }
    };

    /* this thread's weight row (one per thread: warp = 8 rows, g picks one) and
     * the masks of its A fragments: (1, -1152) keeps and shifts, (0, 0) zeroes */
    const int wrow = 8 * warp + g;
    const uint8_t *myrow = s_rowp[wrow];
    const uint32_t s0 = c < 2 ? XH_ONE2 : 0u, k0 = c < 2 ? XH_M1152 : 0u;
    const uint32_t s1 = c < 2 ? 0u : XH_ONE2, k1 = c < 2 ? 0u : XH_M1152;

    /* acc[tg][p][i]: tokens 8 tg + 2c + (i & 1), lane 2p + (i >> 1) of row wrow */
    float acc[8][4][4];
    float summ[8][2];
#pragma unroll
    for (int tg = 0; tg < 8; tg++) {
        summ[tg][0] = summ[tg][1] = 0.f;
#pragma unroll
        for (int p = 0; p < 4; p++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[tg][p][i] = 0.f;
    }

    issue(0);
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();   /* stage s landed; everyone is done with the f16 tile of stage s - 1 */
        if (s + 1 < nst) issue(s + 1);
        unpack(s);
        __syncthreads();
        const int buf = s & 1;
        const uint8_t *rb = sm + L::raw + (buf * XH_BM + wrow) * G::rs + ((uintptr_t)(myrow + (size_t)s * G::span) & 15);
        const uint8_t *hb = sm + L::h + g * XH_HS + 16 * c;
        const float *s_xd = (const float *)(sm + L::xd) + buf * XH_KB * XH_BN + 16 * c;
        const float *s_xs = (const float *)(sm + L::xs) + buf * XH_KB * XH_BN + 16 * c;
#pragma unroll
        for (int kb = 0; kb < XH_KB; kb++) {
            if (s * XH_KB + kb >= ng) break;   /* uniform: the K tail of the last stage */
            const uint8_t *blk = rb + kb * cblk<T>::bytes;
            /* A fragments of lanes 2p, 2p + 1: word k = 2p + (c >> 1) holds elements 4k..4k+3 */
            uint32_t a0[4], a1[4];
#pragma unroll
            for (int p = 0; p < 4; p++) {
                const uint32_t x = xh_pair(ex_word<T>(blk, 2 * p + (c >> 1)) ^ 0x80808080u, c & 1);
                a0[p] = xh_hfma2(x, s0, k0);
                a1[p] = xh_hfma2(x, s1, k1);
            }
            const float dw = ex_d(blk);
            float mw = 0.f;
            if constexpr (MIN) mw = ex_m(blk);
            /* dy of this thread's 16 tokens (8 tg + 2c + i), as xh_dpos placed them */
            float dy[16], sy[16];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float4 v = *(const float4 *)(s_xd + kb * XH_BN + 4 * q);
                dy[4 * q] = v.x; dy[4 * q + 1] = v.y; dy[4 * q + 2] = v.z; dy[4 * q + 3] = v.w;
                if constexpr (MIN) {
                    const float4 u = *(const float4 *)(s_xs + kb * XH_BN + 4 * q);
                    sy[4 * q] = u.x; sy[4 * q + 1] = u.y; sy[4 * q + 2] = u.z; sy[4 * q + 3] = u.w;
                }
            }
#pragma unroll
            for (int tg = 0; tg < 8; tg++) {
                const uint4 bv = *(const uint4 *)(hb + tg * 8 * XH_HS + kb * 64);
                const uint32_t b[4] = {bv.x, bv.y, bv.z, bv.w};
                /* f = dx * dy, as the CPU: weight scale times activation scale */
                const float f0 = __fmul_rn(dw, dy[2 * tg]), f1 = __fmul_rn(dw, dy[2 * tg + 1]);
                if constexpr (MIN) {
                    summ[tg][0] = __fadd_rn(summ[tg][0], __fmul_rn(mw, sy[2 * tg]));
                    summ[tg][1] = __fadd_rn(summ[tg][1], __fmul_rn(mw, sy[2 * tg + 1]));
                }
#pragma unroll
                for (int p = 0; p < 4; p++) {
                    float d[4];
                    xh_mma(d, a0[p], a1[p], b[p]);
                    acc[tg][p][0] = __fmaf_rn(f0, d[0], acc[tg][p][0]);
                    acc[tg][p][1] = __fmaf_rn(f1, d[1], acc[tg][p][1]);
                    acc[tg][p][2] = __fmaf_rn(f0, d[2], acc[tg][p][2]);
                    acc[tg][p][3] = __fmaf_rn(f1, d[3], acc[tg][p][3]);
                }
            }
        }
    }

    /* the CPU's hsum per output, then + summ (q8_1); lane l of token i is
     * acc[tg][l >> 1][2 (l & 1) + i] */
    float *out = ms.out[j];
    const int r = r0 + wrow;
#pragma unroll
    for (int tg = 0; tg < 8; tg++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float a[8];
#pragma unroll
            for (int l = 0; l < 8; l++) a[l] = acc[tg][l >> 1][2 * (l & 1) + i];
            const float q0 = __fadd_rn(a[0], a[4]), q1 = __fadd_rn(a[1], a[5]);
            const float q2 = __fadd_rn(a[2], a[6]), q3 = __fadd_rn(a[3], a[7]);
            float v = __fadd_rn(__fadd_rn(q0, q2), __fadd_rn(q1, q3));
            if constexpr (MIN) v = __fadd_rn(v, summ[tg][i]);
            const int t = t0 + 8 * tg + 2 * c + i;
            if (r < rows && t < ntok) out[(size_t)t * rows + r] = v;
        }
}

// ---------------------------------------------------------------- launcher

template <int T>
static bool mmx_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (ex_ok<T>::v && T != LKV_TYPE_Q4_0) {   /* q4_0: block order, mmb.cu */
        constexpr int bytes = xh_smem<T>::bytes;
        static unsigned configured = 0;
        lkv_cuda_smem_limit(b, &configured, mmx_kernel<T>, bytes, "matmul (mmx): shared memory limit");
        ms.tile0[0] = 0;
        for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], XH_BM);
        const dim3 grid(ms.tile0[ms.n_w], lkv_cdiv(n, XH_BN));
        mmx_kernel<T><<<grid, XH_THREADS, bytes, b->stream>>>(ms, b->xq, b->xd, b->xs, cols, n);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_mmx_takes(int type) {
    switch (type) {
#define X(T) case T: return ex_ok<T>::v;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}

bool lkv_cuda_mmx(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    switch (type) {
#define X(T) case T: return mmx_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
