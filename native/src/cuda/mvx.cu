/*
 * cuda/mvx.cu: decode mat-vec (n <= MV_MAX_TOK; up to MV_SLICE_MAX in
 * launches of 8 tokens) for the legacy weight types,
 * bit-identical to the CPU backend (exact.cuh: the CPU's 8 lane chains; for
 * q4_0 its 8 chains of whole blocks, computed by mvx_blocks.cuh in the same
 * frame).
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
 *   - the block streams its rows through a ring of stages of KC blocks
 *     per row in shared memory, filled with 16-byte cp.async; all but one
 *     stage are in flight while one is computed (a first version with
 *     warp-private rings, ~27 KB in flight per SM, was 153 against 200 t/s
 *     for the 8B decode step, H200 run 15 of the third session);
 *   - per block and token a thread does, from shared memory, a dp4a of the
 *     codes and the activations started at EX_MAGIC (the bits of 12582912 +
 *     p, made (float)p exactly by one operation) and the CPU's fmadd
 *     acc = fmaf(dx * dy, (float)p, acc);
 *   - at the end the 8 threads of a row add their lanes in the CPU's hsum
 *     order through three shuffles.
 *
 * Stage layout: row k of a stage holds the 16-byte chunks covering its KC
 * blocks from the chunk holding the row's first byte (rows need not start on
 * 16 bytes: 576 columns of q4_0 are 324-byte rows); the row stride rs is
 * 32 or 96 mod 128 bytes so that the 4 rows of a warp, each reading a window
 * of <= 5 consecutive words shifted by at most 3 words, fall in distinct
 * banks (q8_0 reads 9 words per row: some 2-way conflicts remain).
 *
 * The kernel (mvx2_kernel, below) also stages the activations in the ring
 * and reads the weight codes with aligned 32-bit loads: see its comment.
 */
#include <stdlib.h>
#include <string.h>

#include "exact.cuh"
#include "twins.cuh"
#include "mvx_decode.cuh"
#include "mvx_blocks.cuh"
#include "pdl.cuh"

enum { MT_THREADS = 128, MT_ROWS = 16 };

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
    static_assert(span % 16 == 0 && (rs % 128 == 32 || rs % 128 == 96) && rs >= rs_min, "mt_geom");
};

// ================================================================ the kernel
//
// mvx2_kernel: the frame above (16 rows x 8 lane chains per block, a
// block-wide cp.async ring of KC-block stages, the hsum by shuffles).
// What changed against the first version of that frame (removed after H200
// run 8 of 2026-11-30's fourth session: 229 vs 353 t/s for the 8B decode step,
// the same bits), the arithmetic staying the same float operations per chain
// in the same order:
//
//   - the activations of a stage (q8 codes, scales, and sums for q4_1 / q5_1)
//     come into the same ring slot as the weights, by 4-byte cp.async, the
//     codes transposed to [token][lane][block] (a lane's words of 4
//     consecutive blocks in one 16-byte shared load; lanes 16 bytes apart
//     modulo 128 so the 8 lanes of a row hit distinct banks), the scales and
//     sums as [token][block] (one broadcast 16-byte load per 4 blocks);
//   - a thread reads its weight codes with 32-bit shared loads at the row's
//     alignment (the class A = row start mod 4, 0 or 2, is the same for the
//     whole stage and the blocks' offsets from it are constants), an
//     unaligned word being one funnel shift of two aligned ones, and the
//     nibble is moved to the top of its byte (x16; q5: to bits 3..6 with the
//     fifth bit in bit 7, x8; iq4_nl: the 4 nibbles packed into a byte_perm
//     selector for the table) by the same shift. The dp4a then gives SC * p
//     exactly (SC = 16, 8 or 1; |SC * p| < 2^22), and one fma by 1 / SC
//     turns the magic-biased bits into (float)p exactly, where the old kernel
//     subtracted; the -8 / -16 offsets become an xor of bit 7;
//   - the weight chunks of a row are copied by the row's own 8 threads (chunk
//     l + 8i for lane l), so one 64-bit pointer and immediate offsets serve a
//     thread's copies;
//   - the ring depth is chosen at launch: as many stages (3..8) as fit when
//     the blocks the grid puts on each SM are resident together.
//
// Warps hold rows of one class: when rows alternate classes (row bytes = 2
// mod 4: 18 / 22 / 34-byte blocks, odd blocks per row) the block's 16 rows
// are taken even rows first. Rows of a warp that still differ (the clamped
// tail rows) run both paths, correct but slower.

template <int T, int NT> struct mw_geom {
    using M = mt_geom<T>;
    static constexpr bool MIN = ex_min<T>::v;
    static constexpr int bytes = M::bytes, kc = M::kc, span = M::span, nch = M::nch, rs = M::rs;
    static constexpr int ci = (nch + 7) / 8;             /* weight chunks per thread and stage */
    static constexpr int ys = kc * 4 + 16;               /* bytes per (token, lane) of y: 16 mod 32 */
    static constexpr int yoff = MT_ROWS * rs;            /* y codes: [NT][8 lanes][kc] words */
    static constexpr int doff = yoff + NT * 8 * ys;      /* scales: [NT][kc] floats */
    static constexpr int soff = doff + NT * kc * 4;      /* sums (q4_1 / q5_1): [NT][kc] floats */
    static constexpr int stage = soff + (MIN ? NT * kc * 4 : 0);
    static constexpr int yi = kc * 8 / MT_THREADS;       /* y words per thread and token */
    static constexpr int di = (NT * kc + MT_THREADS - 1) / MT_THREADS;   /* scales per thread */
    /* the codes' scale in the dp4a (see above) */
    static constexpr int sc = T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q4_1 ? 16
                            : T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1 ? 8 : 1;
    static_assert(kc * 8 % MT_THREADS == 0 && MT_THREADS % kc == 0 && stage % 16 == 0 && 16 * nch <= rs &&
                      MT_ROWS * 8 == MT_THREADS, "mw_geom");
};

/* one thread: its row and lane, its copies, its chain constants */
template <int T, int NT> struct mw_thr {
    using G = mw_geom<T, NT>;
    int tid, k, l;            /* thread, stage row (tid / 8), lane (tid % 8) */
    int rout, rows;           /* the row it computes (stored if < rows) */
    int mis;                  /* the row's first byte within its 16-byte chunk */
    int n, cols, ng;
    mw_lane c;
    /* weight copies: chunks l + 8i of the row (from the 16-byte chunk of its
     * first byte) in every stage */
    const uint8_t *wsrc;      /* chunk l of stage 0 */
    int wlim;                 /* bytes from the row's first chunk to the matrix end (clamped) */
    /* activation copies */
    const int8_t *xsrc;       /* xq + 4 * tid: word tid of stage 0, token 0 */
    const float *xd, *xs;
    int dof[G::di];           /* scale / sum copy i: t * ng + block of stage 0, or -1 */

    __host__ __device__ __forceinline__ void init(const mm_set &ms, int bid, int tid_, const int8_t *xq,
                                                  const float *xd_, const float *xs_, int cols_, int n_) {
        tid = tid_;
        k = tid >> 3;
        l = tid & 7;
        n = n_;
        cols = cols_;
        ng = cols / 32;
        int j = 0;
        while (j + 1 < ms.n_w && bid >= ms.tile0[j + 1]) j++;
        rows = ms.rows[j];
        const size_t rb = ms.row_bytes[j];
        const uint8_t *w0 = ms.w[j];
        /* rows of alternating 4-byte alignment: a warp's 4 rows of one parity */
        int pk = k;
        if ((G::bytes & 2) && (ng & 1)) {
            const int q = k >> 2;
            pk = (q & 1) * 8 + (q >> 1) + 2 * (k & 3);
        }
        rout = (bid - ms.tile0[j]) * MT_ROWS + pk;
        const int rg = rout < rows ? rout : rows - 1;
        const uint8_t *rp = w0 + (size_t)rg * rb;
        const uint8_t *pa = (const uint8_t *)((uintptr_t)rp & ~(uintptr_t)15);
        mis = (int)((uintptr_t)rp & 15);
        wsrc = pa + 16 * l;
        const ptrdiff_t lim = (w0 + (size_t)rows * rb) - pa;
        wlim = lim < (ptrdiff_t)0x40000000 ? (int)lim : 0x40000000;
        xsrc = xq + 4 * tid;
        xd = xd_;
        xs = xs_;
TW_UNROLL
        for (int i = 0; i < G::di; i++) {
            /* entry f = tid + 128 i of a stage's scales: token f / kc, block f % kc */
            const int t = tid / G::kc + MT_THREADS / G::kc * i;
            dof[i] = t < NT && t < n ? t * ng + tid % G::kc : -1;
        }
        c = mw_lane_make<T>(l);
    }

    /* copies of stage s (its nb blocks) into the slot; CP: cp.async on the
     * device, memcpy in a host check. FULL: nb = kc. */
    template <bool FULL, class CP> __host__ __device__ __forceinline__ void issue(int s, int nb, CP &cp) const {
        issue_w<FULL>(s, nb, cp);
        issue_x<FULL>(s, nb, cp);
    }
    template <bool FULL, class CP> __host__ __device__ __forceinline__ void issue_w(int s, int nb, CP &cp) const {
        /* weights: chunks l + 8i of the row from its stage's first chunk,
         * those holding a byte of the stage's blocks, whole (the bytes past
         * the stage are the row's next ones or the next row's) except at the
         * matrix end */
        const int so = s * G::span;
        const uint8_t *ws = wsrc + so;
        const int e = mis + nb * G::bytes - 16 * l;   /* chunk i needed: 128 i < e */
        const int wdst = k * G::rs + 16 * l;
        if (wlim - so >= mis + nb * G::bytes + 16) {
TW_UNROLL
            for (int i = 0; i < G::ci; i++)
                /* full stage: all but the last chunk of a row are needed */
                if ((FULL && i + 1 < G::ci) || 128 * i < e) cp.c16(wdst + 128 * i, ws + 128 * i);
        } else {
            /* the matrix's last row: copies cut at its end */
            const int el = wlim - so - 16 * l;
TW_UNROLL
            for (int i = 0; i < G::ci; i++)
                if (128 * i < e && 128 * i < el)
                    cp.c16n(wdst + 128 * i, ws + 128 * i, el - 128 * i < 16 ? el - 128 * i : 16);
        }
    }
    template <bool FULL, class CP> __host__ __device__ __forceinline__ void issue_x(int s, int nb, CP &cp) const {
        /* y: word tid + 128 i of the stage's codes (block tid / 8 + 16 i,
         * lane l) to [t][l][block] */
        const int ydst = G::yoff + l * G::ys + 4 * (tid >> 3);
TW_UNROLL
        for (int t = 0; t < NT; t++) {
            if (t >= n) break;
            const int8_t *src = xsrc + (unsigned)(s * G::kc * 32 + t * cols);
TW_UNROLL
            for (int i = 0; i < G::yi; i++)
                if (FULL || (tid >> 3) + 16 * i < nb) cp.c4(ydst + t * 8 * G::ys + 64 * i, src + 512 * i);
        }
        /* scales and sums */
        if (FULL || tid % G::kc < nb) {
TW_UNROLL
            for (int i = 0; i < G::di; i++) {
                if (dof[i] >= 0) {
                    const unsigned o = (unsigned)(dof[i] + s * G::kc);
                    cp.c4(G::doff + 4 * (tid + MT_THREADS * i), xd + o);
                    if constexpr (G::MIN) cp.c4(G::soff + 4 * (tid + MT_THREADS * i), xs + o);
                }
            }
        }
    }
    template <class CP> __host__ __device__ __forceinline__ void issue_any(int s, int ngb, CP &cp) const {
        const int nb = ngb - s * G::kc;
        if (nb >= G::kc) issue<true>(s, G::kc, cp);
        else issue<false>(s, nb, cp);
    }
    /* the two halves: weights (no earlier kernel writes them), activations */
    template <class CP> __host__ __device__ __forceinline__ void issue_w_any(int s, int ngb, CP &cp) const {
        const int nb = ngb - s * G::kc;
        if (nb >= G::kc) issue_w<true>(s, G::kc, cp);
        else issue_w<false>(s, nb, cp);
    }
    template <class CP> __host__ __device__ __forceinline__ void issue_x_any(int s, int ngb, CP &cp) const {
        const int nb = ngb - s * G::kc;
        if (nb >= G::kc) issue_x<true>(s, G::kc, cp);
        else issue_x<false>(s, nb, cp);
    }
};

/* block j of a group of 4: every token's step of the chain */
template <int T, int NT, int O, int J>
static __host__ __device__ __forceinline__ void mw_step(const uint8_t *wg, const mw_lane &c, const int4 *y,
                                                        const float4 *d, const float4 *sy, float *acc, float *summ) {
    using G = mw_geom<T, NT>;
    uint32_t x;
    float dw, mw = 0.f;
    mw_block<T, O>(wg, c, x, dw, mw);
TW_UNROLL
    for (int t = 0; t < NT; t++) {
        const int yv = mw_cmp<J>(y[t]);
        const float dy = mw_cmp<J>(d[t]);
        const float f = tw_mul(dw, dy);
        const int p = G::MIN ? tw_dp4a_us(x, (uint32_t)yv, EX_MAGIC) : tw_dp4a_ss(x, (uint32_t)yv, EX_MAGIC);
        /* (12582912 + SC p) / SC - 12582912 / SC = p, exact */
        const float pf = tw_fma(tw_i2f_bits(p), 1.f / G::sc, -12582912.f / G::sc);
        acc[t] = tw_fma(f, pf, acc[t]);
        if constexpr (G::MIN) summ[t] = tw_add(summ[t], tw_mul(mw, mw_cmp<J>(sy[t])));
#if defined(MVX_EMU_TRACE) && !defined(__CUDA_ARCH__)
        MVX_EMU_TRACE(t, x, yv, dw, dy, mw, G::MIN ? mw_cmp<J>(sy[t]) : 0.f, p);
#endif
    }
}

/* 4 blocks (the first rem when !FULL): wg the group's first block minus A
 * (4-aligned), ya the lane's y words of the group for token 0, da the group's
 * scales of token 0 */
template <int T, int NT, int A, bool FULL>
static __host__ __device__ __forceinline__ void mw_group(const uint8_t *wg, const uint8_t *ya, const uint8_t *da, int rem,
                                                         const mw_lane &c, float *acc, float *summ) {
    using G = mw_geom<T, NT>;
    int4 y[NT];
    float4 d[NT], sy[NT];
TW_UNROLL
    for (int t = 0; t < NT; t++) {
        y[t] = *(const int4 *)(ya + t * 8 * G::ys);
        d[t] = *(const float4 *)(da + t * G::kc * 4);
        if constexpr (G::MIN) sy[t] = *(const float4 *)(da + (G::soff - G::doff) + t * G::kc * 4);
    }
    constexpr int B = G::bytes;
    mw_step<T, NT, A, 0>(wg, c, y, d, sy, acc, summ);
    if (FULL || rem > 1) mw_step<T, NT, A + B, 1>(wg, c, y, d, sy, acc, summ);
    if (FULL || rem > 2) mw_step<T, NT, A + 2 * B, 2>(wg, c, y, d, sy, acc, summ);
    if (FULL) mw_step<T, NT, A + 3 * B, 3>(wg, c, y, d, sy, acc, summ);
}

/* the nb blocks of a stage slot for a thread whose row starts at class A */
template <int T, int NT, int A>
static __host__ __device__ __forceinline__ void mw_stage(const uint8_t *slot, int nb, const mw_thr<T, NT> &th,
                                                         float *acc, float *summ) {
    using G = mw_geom<T, NT>;
    const uint8_t *wa = slot + th.k * G::rs + th.mis - A;
    const uint8_t *ya = slot + G::yoff + th.l * G::ys, *da = slot + G::doff;
    constexpr int GB = 4 * G::bytes;
    if (nb == G::kc) {
        /* fewer tokens: more of the stage unrolled */
TW_UNROLLN(NT <= 2 ? G::kc / 4 : 2)
        for (int g = 0; g < G::kc / 4; g++)
            mw_group<T, NT, A, true>(wa + GB * g, ya + 16 * g, da + 16 * g, 4, th.c, acc, summ);
    } else {
        int g = 0;
TW_UNROLL1
        for (; g < nb / 4; g++) mw_group<T, NT, A, true>(wa + GB * g, ya + 16 * g, da + 16 * g, 4, th.c, acc, summ);
        if (nb & 3) mw_group<T, NT, A, false>(wa + GB * g, ya + 16 * g, da + 16 * g, nb & 3, th.c, acc, summ);
    }
}

struct mw_cp_dev {
    uint32_t base;   /* shared address of the slot being filled */
    __device__ __forceinline__ void c16(int off, const void *src) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(base + off), "l"(src) : "memory");
    }
    __device__ __forceinline__ void c16n(int off, const void *src, int bytes) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(base + off), "l"(src), "r"(bytes)
                     : "memory");
    }
    __device__ __forceinline__ void c4(int off, const void *src) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(base + off), "l"(src) : "memory");
    }
};

/* cp.async.wait_group with the ring's depth known at run time */
static __device__ __forceinline__ void mw_wait(int pending) {
    switch (pending) {
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    }
}

/* st: ring stages (3..8) */
template <int T, int NT>
__global__ void __launch_bounds__(MT_THREADS, NT <= 2 ? 6 : NT == 4 ? 4 : 2)
mvx2_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
            const float *__restrict__ xs, int cols, int n, int st) {
    using G = mw_geom<T, NT>;
    extern __shared__ __align__(16) uint8_t sm[];
    mw_thr<T, NT> th;
    th.init(ms, blockIdx.x, threadIdx.x, xq, xd, xs, cols, n);
    const int ng = cols / 32, nst = (ng + G::kc - 1) / G::kc;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(sm);
    mw_cp_dev cp;
    float acc[NT], summ[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = summ[t] = 0.f;

    /* the first stages' weights before waiting for the previous kernel
     * (pdl.cuh), their activations after: the first group holds them all */
    pdl_trigger();
#pragma unroll 1
    for (int s = 0; s < st - 1 && s < nst; s++) {
        cp.base = ring_s + s * G::stage;
        th.issue_w_any(s, ng, cp);
    }
    pdl_wait();
    int si = 0;   /* slot of the next stage issued */
#pragma unroll 1
    for (int s = 0; s < st - 1; s++) {
        if (s < nst) {
            cp.base = ring_s + si * G::stage;
            th.issue_x_any(s, ng, cp);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        si++;
    }
    int sc = 0;   /* slot of the stage computed */
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        mw_wait(st - 2);
        /* stage s is in for every thread, and every thread is done with
         * stage s - 1, whose slot stage s + st - 1 now takes */
        __syncthreads();
        if (s + st - 1 < nst) {
            cp.base = ring_s + si * G::stage;
            th.issue_any(s + st - 1, ng, cp);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        si = si + 1 == st ? 0 : si + 1;
        const uint8_t *slot = sm + sc * G::stage;
        const int nb = min(G::kc, ng - s * G::kc);
        if constexpr (T == LKV_TYPE_Q4_0)   /* block order: mvx_blocks.cuh */
            mb_stage_q4_0<NT, G::kc, G::rs, G::yoff, G::ys, G::doff>(slot, nb, th.k, th.l, th.mis, acc);
        else if ((th.mis & 3) == 0) mw_stage<T, NT, 0>(slot, nb, th, acc, summ);
        else mw_stage<T, NT, 2>(slot, nb, th, acc, summ);
        sc = sc + 1 == st ? 0 : sc + 1;
    }
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");

    /* the CPU's hsum over the row's 8 threads (xor 4, 2, 1); q4_0's block
     * order ends its 8 chains in the same tree */
    int j = 0;
    while (j + 1 < ms.n_w && (int)blockIdx.x >= ms.tile0[j + 1]) j++;
    float *out = ms.out[j];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = acc[t];
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
        if constexpr (G::MIN) v = __fadd_rn(v, summ[t]);
        if (th.l == 0 && t < n && th.rout < th.rows) out[(size_t)t * th.rows + th.rout] = v;
    }
}

/* the device's shared memory limits, read once */
struct mw_dev_info {
    int sm_bytes, block_optin, reserved;
};
static mw_dev_info mw_info(int device) {
    static mw_dev_info cache[32];
    static unsigned have = 0;
    if (device >= 0 && device < 32 && (have >> device & 1u)) return cache[device];
    mw_dev_info d = {100 * 1024, 99 * 1024, 1024};
    int v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) == cudaSuccess) d.sm_bytes = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess) d.block_optin = v;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrReservedSharedMemoryPerBlock, device) == cudaSuccess) d.reserved = v;
    cudaGetLastError();
    if (device >= 0 && device < 32) {
        cache[device] = d;
        have |= 1u << device;
    }
    return d;
}

/* ring stages: as many (3..8) as fit in a block's share of the SM when the
 * blocks the grid gives each SM are resident together (tune.h's mvx_st
 * forces a depth, for measurements) */
static int mw_depth(lkv_bctx *b, int stage, int grid) {
    const mw_dev_info d = mw_info(b->device);
    const int max_st = d.block_optin / stage < 8 ? d.block_optin / stage : 8;
    int st;
    if (lkv_cuda_tuning.mvx_st > 0) {
        st = lkv_cuda_tuning.mvx_st;
    } else {
        const int nsm = b->n_sm > 0 ? b->n_sm : 1;
        const int per_sm = (grid + nsm - 1) / nsm;
        st = (d.sm_bytes / per_sm - d.reserved) / stage;
    }
    if (st > max_st) st = max_st;
    if (st < 3) st = 3;
    return st;
}

/* tokens t0 .. t0 + n - 1 of the call (n <= NT): their codes from row t0 of
 * b->xq / xd / xs, their outputs from row t0 of ms.out */
template <int T, int NT>
static void mw_launch(lkv_bctx *b, mm_set ms, int cols, int n, int t0) {
    using G = mw_geom<T, NT>;
    static unsigned configured = 0;   /* one bit per device: shared-memory limit raised */
    if (b->device >= 32 || !(configured >> b->device & 1u)) {
        const mw_dev_info d = mw_info(b->device);
        const int cap = 8 * G::stage < d.block_optin ? 8 * G::stage : d.block_optin;
        LKV_CUDA_CALL(b, cudaFuncSetAttribute(mvx2_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, cap),
                      "matmul (mvx): shared memory limit");
        LKV_CUDA_CALL(b, cudaFuncSetAttribute(mvx2_kernel<T, NT>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                              cudaSharedmemCarveoutMaxShared),
                      "matmul (mvx): carveout");
        if (b->device < 32) configured |= 1u << b->device;
    }
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) {
        ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MT_ROWS);
        ms.out[i] += (size_t)t0 * ms.rows[i];
    }
    const int grid = ms.tile0[ms.n_w];
    const int st = mw_depth(b, G::stage, grid);
    const size_t q0 = (size_t)t0 * cols, d0 = (size_t)t0 * (cols / 32);
    lkv_launch(b, mvx2_kernel<T, NT>, grid, MT_THREADS, (size_t)st * G::stage, ms, (const int8_t *)b->xq + q0,
               (const float *)b->xd + d0, (const float *)b->xs + d0, cols, n, st);
}

template <int T>
static bool mw_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (ex_ok<T>::v) {
        /* more than 8 tokens (MV_SLICE_MAX at most): slices of 8, each a pass
         * over the weights; per token the same sums as one call */
        int t0 = 0;
        for (; n - t0 > 8; t0 += 8) mw_launch<T, 8>(b, ms, cols, 8, t0);
        const int m = n - t0;
        if (m <= 1) mw_launch<T, 1>(b, ms, cols, m, t0);
        else if (m <= 2) mw_launch<T, 2>(b, ms, cols, m, t0);
        else if (m <= 4) mw_launch<T, 4>(b, ms, cols, m, t0);
        else mw_launch<T, 8>(b, ms, cols, m, t0);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_mvx_takes(int type, const mm_set &ms) {
    /* rows must start on 2 bytes (the two alignment classes, 0 and 2 mod 4) */
    for (int i = 0; i < ms.n_w; i++)
        if (((uintptr_t)ms.w[i] | (uintptr_t)ms.row_bytes[i]) & 1) return false;
    switch (type) {
#define X(T) case T: return ex_ok<T>::v;
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}

bool lkv_cuda_mvx(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (n < 1 || n > MV_SLICE_MAX || !lkv_cuda_mvx_takes(type, ms)) return false;
    switch (type) {
#define X(T) case T: return mw_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
