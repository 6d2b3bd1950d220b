/*
 * cuda/mmq.cu: prefill GEMM (n > MV_MAX_TOK tokens) on int8 tensor cores, for
 * the weight types whose integer scale is uniform over each 32-element block:
 * q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q4_K, q5_K, iq4_xs; and over each 16
 * (q2_K, q3_K, q6_K: "split", two mma.m16n8k16 per 32-block, below).
 *
 * Arithmetic: the activations are quantized as for the mat-vec (matvec_q8.cu:
 * int8 codes, per 32-block xd = scale, xs = sum(codes) * scale, f16-rounded
 * like the CPU's q8_0/q8_1). The weights are unpacked by dq8i (quant_i8.cuh)
 * to int8 codes q with element = dw * q + mw. One mma.m16n8k32 per 32-block
 * gives the exact int32 dot isum of each (token, row) pair; then
 *   acc += (dw * xd) * isum  [+ mw * xs]
 * in f32, the mat-vec's and the CPU's operations up to the order of the adds
 * (q4_K / q5_K / iq4_xs: the mat-vec's; the CPU uses 256-element q8_K
 * activations).
 * Split types: each 16 of a 32-block has its scale (dw = d * sc, dw2 = d *
 * sc2; codes q, q - 4, q - 32), so the block takes two k16 products, A's and
 * B's halves, and two folds, acc += (dw * xd) * isum + (dw2 * xd) * isum2;
 * q2_K's mins (mw = -dmin * mn per 16) add mw * xd * (x's code sum over the
 * 16), the sums taken by two more k16 products of A with a B of ones per
 * m-tile. With the CPU's q8_K codes of x (per 256: xd is that d for each of
 * its 32-blocks) the products are the CPU's, the float sums in another order.
 * isum is turned into a float without I2F: the mma's C input is 0x4B400000
 * (1.5 * 2^23), so the result's bits read as the float 12582912 + isum
 * (|isum| <= 32 * 128 * 127 < 2^22), and one subtraction gives isum exactly.
 *
 * Tiles: a block of 8 warps computes MQ_BM = 128 weight rows x BN (64 or 128)
 * tokens; warp (wt, wr) = (warp >> 2, warp & 3) owns tokens wt * BN/2 ..
 * + BN/2 and rows wr * 32 .. + 32 (BN/32 m-tiles of 16 tokens x 4 n-tiles of 8
 * rows). K advances MQ_BK = 128 elements (4 blocks) per stage. mma operands:
 * A (16 x 32, row) = activations, token x k; B (32 x 8, col) = weights, k x row
 * (i.e. weight rows k-contiguous); C = tokens x rows. Per stage:
 *   cp.async: raw weight bytes (the 16-byte-aligned chunks covering each row's
 *     4 blocks, zero-filled past the end of the tensor), int8 activations and
 *     xd/xs of stage s+1 -> buffers (s+1) & 1, in flight during stage s;
 *   unpack: raw weights of stage s -> int8 tile + dw/mw (one thread per block);
 *   mma: ldmatrix fragments from the int8 tiles (row stride 144 bytes = 16 mod
 *     128: the 8 rows of each 8x16-byte ldmatrix phase hit distinct banks).
 * Grid: x over the row tiles of all weights of the set (tile0 / mm_pick), y
 * over token tiles; the token tile by grid size (tune.h's mmq_bn forces one).
 * choose_matmul.cu gives it the prefill of every type it takes with the fast
 * kernels (~1 ulp off the CPU; pp512 of the 8B shape, q4_0: 1.4x mmb.cu, H200),
 * and q4_K / q5_K / iq4_xs with the exact ones too.
 */
#include "matmul.cuh"
#include "tune.h"
#include "quant_i8.cuh"
#include "gemm_ptx.cuh"

enum { MQ_BM = 128, MQ_BK = 128, MQ_KB = MQ_BK / 32, MQ_THREADS = 256, MQ_LD = MQ_BK + 16 };
static constexpr int MQ_MAGIC = 0x4B400000;   /* float 12582912.0f */

template <int T> struct mq_ok {
    enum { v = T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1 ||
               T == LKV_TYPE_Q8_0 || T == LKV_TYPE_IQ4_NL || T == LKV_TYPE_Q4_K || T == LKV_TYPE_Q5_K ||
               T == LKV_TYPE_IQ4_XS || T == LKV_TYPE_Q2_K || T == LKV_TYPE_Q3_K || T == LKV_TYPE_Q6_K };
};
/* an integer scale (and q2_K's min) per 16 elements: two k16 products per 32-block */
template <int T> struct mq_split { enum { v = T == LKV_TYPE_Q2_K || T == LKV_TYPE_Q3_K || T == LKV_TYPE_Q6_K }; };

/* raw weight bytes of one row and stage. 32-element blocks: the span of the
 * stage's 4 blocks, copied as the 16-byte chunks covering it (it may start
 * anywhere mod 16). q4_K / q5_K (256-element superblocks, 16-byte aligned):
 * stage s is half s & 1 of superblock s >> 1; its image is kept at the
 * superblock's own offsets, filled with the header chunks (d, dmin, scales;
 * q5_K also qh) and the 4 chunks of the half's qs. iq4_xs (x8: 136-byte
 * superblocks, so they start at 0 or 8 mod 16): the image is the 10 aligned
 * chunks from the one holding the superblock's first byte, filled with chunk 0
 * (d, scales: bytes 0..7 of the superblock) and the 5 chunks from the first
 * that holds the half's qs (64 bytes at 8 + 64 (s & 1)) not in chunk 0.
 * q2_K / q3_K / q6_K (direct: 84-, 110- and 210-byte superblocks) are not
 * staged: unpack reads them where they lie, after issue has asked L2 for the
 * superblock (gemm_f16.cu reads every type so). */
template <int T> struct mq_geom {
    static constexpr bool sb = cblk<T>::qk == 256;
    static constexpr bool x8 = T == LKV_TYPE_IQ4_XS;
    static constexpr bool direct = mq_split<T>::v;
    static constexpr int span = sb ? cblk<T>::bytes : MQ_KB * group_bytes<T>();
    static constexpr int nhdr = T == LKV_TYPE_Q5_K ? 3 : 1;
    static constexpr int nch = direct ? 0 : x8 ? 6 : sb ? nhdr + 4 : (span + 15 + 15) / 16;
    static constexpr int rs = direct ? 0 : x8 ? 160 : sb ? span : nch * 16;   /* raw bytes per row in shared memory */
};
/* x8: the image's chunk that slot ch (< 6) of stage s fills, for a superblock
 * at o = 0 or 8 past a 16-byte boundary */
__host__ __device__ constexpr int mq_x8_chunk(int ch, int o, int s) {
    return ch == 0 ? 0 : ch - 1 + ((o + 8 + 64 * (s & 1)) >> 4 > 1 ? (o + 8 + 64 * (s & 1)) >> 4 : 1);
}
static_assert(mq_x8_chunk(5, 8, 1) == 9 && mq_x8_chunk(1, 0, 0) == 1 && mq_x8_chunk(1, 0, 1) == 4 &&
              mq_x8_chunk(5, 8, 0) == 5, "x8 chunks");

/* shared memory, byte offsets (all multiples of 16) */
template <int T, int BN> struct mq_smem {
    static constexpr bool MIN = has_min<T>::v, SPLIT = mq_split<T>::v;
    static constexpr bool XS = MIN && !SPLIT;   /* x's sums per 32 (split types sum per 16 themselves) */
    static constexpr int x = 0;                                         /* int8 [2][BN][MQ_LD] */
    static constexpr int w = x + 2 * BN * MQ_LD;                        /* int8 [MQ_BM][MQ_LD] */
    static constexpr int raw = w + MQ_BM * MQ_LD;                       /* [2][MQ_BM][rs] */
    static constexpr int dw = raw + 2 * MQ_BM * mq_geom<T>::rs;         /* float [MQ_KB][MQ_BM] */
    static constexpr int mw = dw + MQ_KB * MQ_BM * 4;                   /* float [MQ_KB][MQ_BM] */
    /* split types: dw / mw are the first 16's scale and min, dw2 / mw2 the second's */
    static constexpr int dw2 = mw + (MIN ? MQ_KB * MQ_BM * 4 : 0);      /* float [MQ_KB][MQ_BM] */
    static constexpr int mw2 = dw2 + (SPLIT ? MQ_KB * MQ_BM * 4 : 0);   /* float [MQ_KB][MQ_BM] */
    static constexpr int xd = mw2 + (SPLIT && MIN ? MQ_KB * MQ_BM * 4 : 0);   /* float [2][MQ_KB][BN] */
    static constexpr int xs = xd + 2 * MQ_KB * BN * 4;                  /* float [2][MQ_KB][BN] */
    static constexpr int bytes = xs + (XS ? 2 * MQ_KB * BN * 4 : 0);
};

/* Fragment index mapping (PTX ISA, mma.m16n8k32 .s8; g = lane >> 2, q = lane & 3):
 *   A (16 x 32): a0 = (row g,   k 4q..4q+3)    a1 = (row g+8, k 4q..4q+3)
 *                a2 = (row g,   k 16+4q..)     a3 = (row g+8, k 16+4q..)
 *   B (32 x 8):  b0 = (k 4q..4q+3, col g)      b1 = (k 16+4q.., col g)
 *   C (16 x 8):  c0 = (g, 2q)  c1 = (g, 2q+1)  c2 = (g+8, 2q)  c3 = (g+8, 2q+1)
 * ldmatrix.x4 (b16 8x8 matrices = 8 rows of 16 bytes): lanes 8i..8i+7 give
 * the row addresses of matrix i; lane l receives in register i bytes
 * 4(l & 3)..+3 of row l >> 2 of matrix i. Hence, with tiles stored k-contiguous:
 *   A: lane l points at (row l & 15, k byte 16 (l >> 4)) -> regs a0..a3;
 *   B, two n-tiles: lane l points at (row (l & 7) + 8 (l >> 4), k byte
 *      16 ((l >> 3) & 1)) -> regs (b0, b1) of the first tile, (b0, b1) of the second.
 * The functions below are the only place these expressions live. */
__host__ __device__ constexpr int mq_a_row(int lane) { return lane & 15; }
__host__ __device__ constexpr int mq_a_kof(int lane) { return (lane >> 4) * 16; }
__host__ __device__ constexpr int mq_b_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__host__ __device__ constexpr int mq_b_kof(int lane) { return ((lane >> 3) & 1) * 16; }
/* C element i of lane: token (A row) and weight row (B column) within the 16 x 8 tile */
__host__ __device__ constexpr int mq_c_tok(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
__host__ __device__ constexpr int mq_c_row(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
/* In the block tile, for warp (wt, wr): the byte offset that lane gives ldmatrix
 * for m-tile m of the activations (buffer buf) and n-tiles 2np, 2np+1 of the
 * weights, at 32-block kb of the stage; and the token / weight row of C element i
 * of m-tile m, n-tile nt. */
template <int BN> __host__ __device__ constexpr int mq_a_off(int lane, int wt, int buf, int m, int kb) {
    return (buf * BN + wt * (BN / 2) + 16 * m + mq_a_row(lane)) * MQ_LD + mq_a_kof(lane) + 32 * kb;
}
__host__ __device__ constexpr int mq_b_off(int lane, int wr, int np, int kb) {
    return (wr * 32 + 16 * np + mq_b_row(lane)) * MQ_LD + mq_b_kof(lane) + 32 * kb;
}
template <int BN> __host__ __device__ constexpr int mq_tok(int lane, int wt, int m, int i) {
    return wt * (BN / 2) + 16 * m + mq_c_tok(lane, i);
}
__host__ __device__ constexpr int mq_row(int lane, int wr, int nt, int i) { return wr * 32 + 8 * nt + mq_c_row(lane, i); }

/* q4_0 codes (4 nibbles, one per byte, 0..15) minus 8 as signed bytes: +120
 * does not carry out of a byte, and flipping bit 7 then subtracts 128 mod 256 */
__host__ __device__ static inline uint32_t mq_q4_s8(uint32_t v) { return (v + 0x78787878u) ^ 0x80808080u; }

// ---------------------------------------------------------------- the mma result as a float (PTX: gemm_ptx.cuh)

static __device__ __forceinline__ float mq_isum(int d) { return __int_as_float(d) - 12582912.f; }

/* the folds of one C tile (elements 0, 1: token x0's, 2, 3: x1's; 0, 2: row
 * w.x's, 1, 3: w.y's): c += (w * x) * isum(d), and the min term c += m * y */
static __device__ __forceinline__ void mq_fold(float *c, float2 w, float x0, float x1, const int (&d)[4]) {
    c[0] = fmaf(w.x * x0, mq_isum(d[0]), c[0]);
    c[1] = fmaf(w.y * x0, mq_isum(d[1]), c[1]);
    c[2] = fmaf(w.x * x1, mq_isum(d[2]), c[2]);
    c[3] = fmaf(w.y * x1, mq_isum(d[3]), c[3]);
}
static __device__ __forceinline__ void mq_fold_min(float *c, float2 m, float y0, float y1) {
    c[0] = fmaf(m.x, y0, c[0]);
    c[1] = fmaf(m.y, y0, c[1]);
    c[2] = fmaf(m.x, y1, c[2]);
    c[3] = fmaf(m.y, y1, c[3]);
}

// ---------------------------------------------------------------- kernel

/* blocks per SM the registers are budgeted for: 3 where the shared memory
 * (sm_90: 228 KiB per SM, 1 KiB of it reserved per block) holds 3 */
template <int T, int BN> constexpr int mq_min_blocks() {
    return BN == 64 && 3 * (mq_smem<T, BN>::bytes + 1040 + 1024) <= 228 * 1024 ? 3 : 2;
}

template <int T, int BN>
__global__ void __launch_bounds__(MQ_THREADS, (mq_min_blocks<T, BN>()))
mmq_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
           const float *__restrict__ xs, int cols, int ntok) {
    using G = mq_geom<T>;
    using L = mq_smem<T, BN>;
    constexpr bool MIN = has_min<T>::v, SPLIT = mq_split<T>::v;
    constexpr int MT = BN / 32;   /* m-tiles (16 tokens) per warp */
    extern __shared__ __align__(16) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j], r0 = (blockIdx.x - ms.tile0[j]) * MQ_BM, t0 = blockIdx.y * BN;
    const int ng = cols / 32, nst = (cols + MQ_BK - 1) / MQ_BK;
    /* the weight rows' addresses (rows past the end read the last one) and the
     * tensor's end, kept in shared memory rather than in registers */
    __shared__ const uint8_t *s_rowp[MQ_BM];
    __shared__ const uint8_t *s_wend;
    if (tid < MQ_BM) s_rowp[tid] = ms.w[j] + (size_t)min(r0 + tid, rows - 1) * ms.row_bytes[j];
    if (tid == 0) s_wend = ms.w[j] + (size_t)rows * ms.row_bytes[j];
    __syncthreads();

    /* cp.async of stage s into buffers s & 1 */
    auto issue = [&](int s) {
        const int buf = s & 1;
#pragma unroll 1
        for (int c = tid; c < BN * (MQ_BK / 16); c += MQ_THREADS) {
            const int tk = c >> 3, ch = c & 7, k = s * MQ_BK + ch * 16, t = t0 + tk;
            const bool ok = t < ntok && k < cols;
            gm_cp16(sb + L::x + (buf * BN + tk) * MQ_LD + ch * 16, ok ? xq + (size_t)t * cols + k : xq,
                    ok ? 16 : 0);
        }
#pragma unroll 1
        for (int c = tid; c < BN * MQ_KB; c += MQ_THREADS) {
            const int tk = c >> 2, kb = c & 3, g = s * MQ_KB + kb, t = t0 + tk;
            const bool ok = t < ntok && g < ng;
            const size_t o = ok ? (size_t)t * ng + g : 0;
            const int d = (buf * MQ_KB + kb) * BN + tk;
            gm_cp4(sb + L::xd + 4 * d, xd + o, ok ? 4 : 0);
            if constexpr (L::XS) gm_cp4(sb + L::xs + 4 * d, xs + o, ok ? 4 : 0);
        }
        if constexpr (G::direct) {
            /* the superblock of stage s's half (its first 256 bytes), once per superblock */
            if ((s & 1) == 0)
                for (int c = tid; c < 2 * MQ_BM; c += MQ_THREADS)
                    gm_prefetch_l2(s_rowp[c >> 1] + (size_t)(s >> 1) * cblk<T>::bytes + 128 * (c & 1));
        }
#pragma unroll 1
        for (int c = tid; c < MQ_BM * G::nch; c += MQ_THREADS) {
            const int row = c / (G::nch ? G::nch : 1), ch = c % (G::nch ? G::nch : 1);
            const uint8_t *rp = s_rowp[row], *wend = s_wend;
            const uint8_t *src;
            int dof;
            if constexpr (G::x8) {
                const uint8_t *blk = rp + (size_t)(s >> 1) * cblk<T>::bytes;
                dof = 16 * mq_x8_chunk(ch, (int)((uintptr_t)blk & 15), s);
                src = (const uint8_t *)((uintptr_t)blk & ~(uintptr_t)15) + dof;
            } else if constexpr (G::sb) {
                dof = 16 * (ch < G::nhdr ? ch : ch + 4 * (s & 1));
                src = rp + (size_t)(s >> 1) * cblk<T>::bytes + dof;
            } else {
                dof = 16 * ch;
                src = (const uint8_t *)((uintptr_t)(rp + (size_t)s * G::span) & ~(uintptr_t)15) + dof;
            }
            const ptrdiff_t left = wend - src;
            const int nb = left >= 16 ? 16 : left > 0 ? (int)left : 0;
            gm_cp16(sb + L::raw + (buf * MQ_BM + row) * G::rs + dof, nb ? src : rp, nb);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    /* raw weights of stage s -> int8 tile and per-block dw / mw, one thread per 32-block */
    auto unpack = [&](int s) {
        const int buf = s & 1;
#pragma unroll 1
        for (int c = tid; c < MQ_BM * MQ_KB; c += MQ_THREADS) {
            const int row = c >> 2, kb = c & 3;
            if (s * MQ_KB + kb >= ng) continue;
            const uint8_t *raw = sm + L::raw + (buf * MQ_BM + row) * G::rs;
            uint32_t q[8];
            float dw, mw = 0.f, dw2 = 0.f, mw2 = 0.f;
            if constexpr (G::direct) {
                /* pieces 0, 1 are the block's first 16 (dw, mw), 2, 3 its second (dw2, mw2) */
                const int g = s * MQ_KB + kb;
                dq8i<T>(s_rowp[row], 4 * g, q[0], q[1], dw, mw);
                dq8i<T>(s_rowp[row], 4 * g + 1, q[2], q[3], dw, mw);
                dq8i<T>(s_rowp[row], 4 * g + 2, q[4], q[5], dw2, mw2);
                dq8i<T>(s_rowp[row], 4 * g + 3, q[6], q[7], dw2, mw2);
            } else if constexpr (G::sb) {
                if constexpr (G::x8) raw += (uintptr_t)(s_rowp[row] + (size_t)(s >> 1) * cblk<T>::bytes) & 15;
#pragma unroll
                for (int p = 0; p < 4; p++) dq8i<T>(raw, 16 * (s & 1) + 4 * kb + p, q[2 * p], q[2 * p + 1], dw, mw);
            } else {
                raw += (uintptr_t)(s_rowp[row] + (size_t)s * G::span) & 15;   /* the stage's first block */
                if constexpr (T == LKV_TYPE_Q4_0) {
                    const uint16_t *h = (const uint16_t *)(raw + 18 * kb);
                    dw = __half2float(__ushort_as_half(h[0]));
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const uint32_t v = h[1 + 2 * i] | ((uint32_t)h[2 + 2 * i] << 16);   /* qs[4i..4i+3] */
                        q[i] = mq_q4_s8(v & 0x0F0F0F0Fu);                                   /* elements 4i.. */
                        q[4 + i] = mq_q4_s8((v >> 4) & 0x0F0F0F0Fu);                        /* 16+4i.. */
                    }
                } else {
#pragma unroll
                    for (int p = 0; p < 4; p++) dq8i<T>(raw, 4 * kb + p, q[2 * p], q[2 * p + 1], dw, mw);
                }
            }
            uint4 *dst = (uint4 *)(sm + L::w + row * MQ_LD + kb * 32);
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            ((float *)(sm + L::dw))[kb * MQ_BM + row] = dw;
            if constexpr (MIN) ((float *)(sm + L::mw))[kb * MQ_BM + row] = mw;
            if constexpr (SPLIT) ((float *)(sm + L::dw2))[kb * MQ_BM + row] = dw2;
            if constexpr (SPLIT && MIN) ((float *)(sm + L::mw2))[kb * MQ_BM + row] = mw2;
        }
    };

    const int wt = warp >> 2, wr = warp & 3;
    /* scales: dw / mw of rows mq_row(.., 0) and + 1 (C elements 0, 2 and 1, 3) as a
     * float2; xd / xs of tokens mq_tok(.., 0) and + 8 (C elements 0, 1 and 2, 3) */
    const float *s_dw = (const float *)(sm + L::dw), *s_mw = (const float *)(sm + L::mw);
    const float *s_dw2 = (const float *)(sm + L::dw2), *s_mw2 = (const float *)(sm + L::mw2);
    const float *s_xd = (const float *)(sm + L::xd), *s_xs = (const float *)(sm + L::xs);
    float acc[MT][4][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.f;

    issue(0);
    for (int s = 0; s < nst; s++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();   /* stage s landed; everyone is done with stage s - 1 */
        if (s + 1 < nst) issue(s + 1);
        unpack(s);
        __syncthreads();
        const int buf = s & 1;
#pragma unroll 1
        for (int kb = 0; kb < MQ_KB; kb++) {
            if (s * MQ_KB + kb >= ng) break;
            uint32_t bf[4][2];
            gm_ldsm4(sb + L::w + mq_b_off(lane, wr, 0, kb), bf[0][0], bf[0][1], bf[1][0], bf[1][1]);
            gm_ldsm4(sb + L::w + mq_b_off(lane, wr, 1, kb), bf[2][0], bf[2][1], bf[3][0], bf[3][1]);
            /* this lane's rows' scales and mins, as pairs (the second 16's for split types) */
            float2 dwp[4], mwp[4], ewp[4], fwp[4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                const int o = kb * MQ_BM + mq_row(lane, wr, nt, 0);
                dwp[nt] = *(const float2 *)(s_dw + o);
                if constexpr (MIN) mwp[nt] = *(const float2 *)(s_mw + o);
                if constexpr (SPLIT) ewp[nt] = *(const float2 *)(s_dw2 + o);
                if constexpr (SPLIT && MIN) fwp[nt] = *(const float2 *)(s_mw2 + o);
            }
#pragma unroll
            for (int m = 0; m < MT; m++) {
                uint32_t a[4];
                gm_ldsm4(sb + L::x + mq_a_off<BN>(lane, wt, buf, m, kb), a[0], a[1], a[2], a[3]);
                const int xo = (buf * MQ_KB + kb) * BN + mq_tok<BN>(lane, wt, m, 0);
                const float x0 = s_xd[xo], x1 = s_xd[xo + 8];
                /* the min term's x: xs per 32, or for split types x's code sums per 16
                 * (a k16 product with B all ones; C elements 0 and 2 are tokens g, g + 8) */
                float y0 = 0.f, y1 = 0.f, z0 = 0.f, z1 = 0.f;
                if constexpr (L::XS) { y0 = s_xs[xo]; y1 = s_xs[xo + 8]; }
                if constexpr (SPLIT && MIN) {
                    int u[4], v[4];
                    gm_mma_s8_k16(u, a[0], a[1], 0x01010101u, MQ_MAGIC);
                    gm_mma_s8_k16(v, a[2], a[3], 0x01010101u, MQ_MAGIC);
                    y0 = x0 * mq_isum(u[0]); y1 = x1 * mq_isum(u[2]);
                    z0 = x0 * mq_isum(v[0]); z1 = x1 * mq_isum(v[2]);
                }
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    float *c = acc[m][nt];
                    int d[4];
                    if constexpr (SPLIT) {
                        /* each 16 with its scale: dw for k 0..15, dw2 for 16..31 */
                        int e[4];
                        gm_mma_s8_k16(d, a[0], a[1], bf[nt][0], MQ_MAGIC);
                        gm_mma_s8_k16(e, a[2], a[3], bf[nt][1], MQ_MAGIC);
                        mq_fold(c, ewp[nt], x0, x1, e);
                        if constexpr (MIN) mq_fold_min(c, fwp[nt], z0, z1);
                    } else {
                        gm_mma_s8(d, a, bf[nt][0], bf[nt][1], MQ_MAGIC);
                    }
                    mq_fold(c, dwp[nt], x0, x1, d);
                    if constexpr (MIN) mq_fold_min(c, mwp[nt], y0, y1);
                }
            }
        }
    }

    float *out = ms.out[j];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int t = t0 + mq_tok<BN>(lane, wt, m, i), r = r0 + mq_row(lane, wr, nt, i);
                if (t < ntok && r < rows) out[(size_t)t * rows + r] = acc[m][nt][i];
            }
}

// ---------------------------------------------------------------- launcher

template <int T, int BN>
static void mmq_launch(lkv_bctx *b, const mm_set &ms, int cols, int n) {
    constexpr int bytes = mq_smem<T, BN>::bytes;
    static unsigned configured = 0;
    lkv_cuda_smem_limit(b, &configured, mmq_kernel<T, BN>, bytes, "matmul (mmq): shared memory limit");
    const dim3 grid(ms.tile0[ms.n_w], lkv_cdiv(n, BN));
    mmq_kernel<T, BN><<<grid, MQ_THREADS, bytes, b->stream>>>(ms, b->xq, b->xd, b->xs, cols, n);
}

template <int T>
static bool mmq_takes(const mm_set &ms) {
    if constexpr (mq_ok<T>::v) {
        if constexpr (mq_geom<T>::sb && !mq_geom<T>::direct) {   /* superblock chunks are copied at their own offsets */
            /* x8: superblocks on 8 bytes, the first chunk inside the tensor */
            const size_t rb_align = mq_geom<T>::x8 ? 8 : 16;
            for (int i = 0; i < ms.n_w; i++)
                if ((uintptr_t)ms.w[i] % 16 || ms.row_bytes[i] % rb_align) return false;
        }
        return true;
    } else {
        (void)ms;
        return false;
    }
}

template <int T>
static bool mmq_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (mq_ok<T>::v) {
        ms.tile0[0] = 0;
        for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MQ_BM);
        /* the larger token tile when it still gives two blocks per SM (tune.h can force one) */
        int bn = lkv_cuda_tuning.mmq_bn;
        if (bn != 64 && bn != 128)
            bn = (int64_t)ms.tile0[ms.n_w] * lkv_cdiv(n, 128) >= 2 * (int64_t)b->n_sm ? 128 : 64;
        if (bn == 128) mmq_launch<T, 128>(b, ms, cols, n);
        else mmq_launch<T, 64>(b, ms, cols, n);
        LKV_CUDA_LAUNCHED(b, "matmul (mmq)");
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_mmq_takes(int type, const mm_set &ms) {
    switch (type) {
#define X(T) case T: return mmq_takes<T>(ms);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}

bool lkv_cuda_mmq(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (!lkv_cuda_mmq_takes(type, ms)) return false;
    switch (type) {
#define X(T) case T: return mmq_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
