/*
 * cuda/mmb.cu: prefill GEMM (n > MV_MAX_TOK) for q4_0 weights, bit-identical
 * to the CPU's block-order dot (quant/dot_blocks.c): per 32-block b the whole
 * integer dot p_b, chain b % 8 takes c = fmaf(dw * dy, (float)p_b, c), and the
 * output is ((c0 + c4) + (c2 + c6)) + ((c1 + c5) + (c3 + c7)).
 *
 * A block computes MB_BM = 64 weight rows x BN tokens with BN / 4 warps: warp
 * w is chain w % 8 for tokens 32 (w / 8) .. + 31. K advances 8 blocks (256
 * elements) per stage and chain c takes block c of every stage. So each output
 * costs one int8 mma.m16n8k32 share, one subtraction (the mma's C input is
 * EX_MAGIC, which makes the int32 result the bits of 12582912 + p_b), one
 * multiply and one fma per block, against mmx.cu's 8 fmas for the 8-lane
 * order. At the end the chains meet in shared memory in the tree's order
 * (chains 4..7 into 0..3, then 2, 3 into 0, 1, then 1 into 0).
 *
 * Per stage (as mmq.cu): cp.async of stage s + NS - 1 (raw weight bytes: the
 * 16-byte chunks covering each row's 8 blocks; int8 activations; their
 * scales) into a ring of NS buffers while stage s is unpacked (raw q4_0 ->
 * int8 tile and scales, thread c takes row c / 8, block c % 8) and multiplied
 * (ldmatrix from the int8 tiles, rows 272 bytes apart: 16 mod 128,
 * conflict-free); two block barriers per stage. Tried and slower (H200, pp512
 * of the 8B shape, 2026-11-30 sixth session): warps with their own copies and
 * __syncwarp only (5086 t/s against 6024), a block's 64 rows unpacked by its
 * chain's warp (5165: the row stride put a warp's reads in 4 banks).
 * Fragments (PTX, mma.m16n8k32 .s8; g = lane >> 2, q = lane & 3): A (16 x 32)
 * = activations (token x k), B (32 x 8) = weights (k x row), C = tokens x
 * rows: c0 = (g, 2q), c1 = (g, 2q + 1), c2 = (g + 8, 2q), c3 = (g + 8, 2q + 1).
 * The token tile is 64 (2 warps per chain, 512 threads) and the copy ring 3
 * stages deep; tune.h's mmb_bn = 32 and mmb_st = 2 give the other variants.
 *
 * SW (lkv_cuda_mmb_swiglu, the gate and up matmuls of a SwiGLU FFN): a tile's
 * rows are 32 gate rows and the same 32 up rows, so the tile's end has gate
 * and up of the same outputs; it writes silu(gate) * up (the CPU's swiglu)
 * and, 8 lanes holding one 32-block of a token, its 8-bit codes for the down
 * matmul (act_quant.cuh act_q8_group8). Gate and up never reach memory. The
 * tree's last addition and this epilogue are done by all threads from shared
 * memory (mb_swiglu_store): on chain 0's two warps alone it cost 2 ms of pp512
 * (76.5 against 74.5 ms without the fusion, run 1 of the seventh session);
 * the plain GEMM's stores the same way were no faster (73.7 against 73.4 ms
 * from registers, run 2).
 *
 * Launched with programmatic dependent launch (pdl.cuh): the row addresses
 * and the first stages' weight copies are issued before the wait for the
 * kernel that wrote the activations.
 */
#include <stdlib.h>

#include "act_quant.cuh"
#include "exact.cuh"
#include "gemm_ptx.cuh"
#include "pdl.cuh"

enum { MB_BM = 64, MB_KB = 8, MB_BK = 256, MB_LD = MB_BK + 16 };
enum { MB_SPAN = MB_KB * 18, MB_NCH = (MB_SPAN + 15 + 15) / 16, MB_RS = MB_NCH * 16 };
/* a token's 8 activation scales of a stage, in a 48-byte slot: 16-byte copies,
 * and the 8 tokens a warp reads at once fall in 8 distinct banks */
enum { MB_XD = 12 };

template <int BN, int NS> struct mb_smem {   /* NS: stages in the ring */
    static constexpr int x = 0;                               /* int8 [NS][BN][MB_LD] */
    static constexpr int w = x + NS * BN * MB_LD;             /* int8 [MB_BM][MB_LD] */
    static constexpr int raw = w + MB_BM * MB_LD;             /* [NS][MB_BM][MB_RS] */
    static constexpr int dw = raw + NS * MB_BM * MB_RS;       /* float [MB_KB][MB_BM] */
    static constexpr int xd = dw + MB_KB * MB_BM * 4;         /* float [NS][BN][MB_XD] */
    static constexpr int bytes = xd + NS * BN * MB_XD * 4;
    /* the fold's exchange at the end: 4 warps' accumulators */
    static constexpr int red = 4 * (BN / 32) * 2 * 8 * 4 * 32 * 4;
    static_assert(red <= bytes, "mb_smem");
};

static __device__ __forceinline__ float mb_isum(int d) { return __fsub_rn(__int_as_float(d), 12582912.f); }

/* BN / 32 warps per chain (the token tile split in 32-token parts): 256 or
 * 512 threads */
template <int BN> __host__ __device__ constexpr int mb_threads() { return 8 * BN; }

/* where the SW kernel writes the 8-bit codes of its output (b->xq2 ...) */
struct mb_act { int8_t *q; float *d, *s; };

/* SW tile rows: gate rows r0 .. r0 + 31 (ms.w[0]), then the same up rows
 * (ms.w[1]); rows past the end read the last one. The two weights' ends. */
static __device__ __forceinline__ void mb_pair_rows(const mm_set &ms, int r0, int rows, int tid,
                                                    const uint8_t **s_rowp, const uint8_t **s_wend) {
    if (tid < MB_BM) {
        const int w = tid / (MB_BM / 2);
        s_rowp[tid] = ms.w[w] + (size_t)min(r0 + tid % (MB_BM / 2), rows - 1) * ms.row_bytes[w];
    }
    if (tid < 2) s_wend[tid] = ms.w[tid] + (size_t)rows * ms.row_bytes[tid];
}

/* the end of an SW tile, all threads: the tree's two halves (chains 0 and 1)
 * are fin[2][BN][MB_LDF]; thread (token tid / 8, l8 = tid % 8) adds them for
 * gate rows 4 l8 .. + 3 and the same up rows (float4s, conflict-free), writes
 * silu(gate) * up and its codes (8 lanes a 32-block) */
enum { MB_LDF = MB_BM + 8 };   /* fin rows 288 bytes apart: the float2 writes of a half-warp hit 32 banks */

static __device__ __forceinline__ float4 mb_fin4(const float *fin, int stride, int at) {
    const float4 a = *(const float4 *)(fin + at), b = *(const float4 *)(fin + stride + at);
    return make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
}

template <int BN>
static __device__ __forceinline__ void mb_swiglu_store(const float *fin, float *out, const mb_act &oa, int rows,
                                                       int r0, int t0, int ntok) {
    const int tk = threadIdx.x >> 3, l8 = threadIdx.x & 7, t = t0 + tk;
    const float *f = fin + tk * MB_LDF;
    constexpr int S = BN * MB_LDF;   /* chain 1's half */
    const float4 g = mb_fin4(f, S, 4 * l8), u = mb_fin4(f, S, 32 + 4 * l8);
    const float v[4] = {lkv_swiglu_cpu(g.x, u.x), lkv_swiglu_cpu(g.y, u.y), lkv_swiglu_cpu(g.z, u.z),
                        lkv_swiglu_cpu(g.w, u.w)};
    const size_t o = (size_t)t * rows + r0, kb = (size_t)t * (rows / 32) + r0 / 32;
    act_q8_group8(v, t < ntok, oa.q + o, oa.d + kb, oa.s + kb);   /* all lanes: shuffles */
    if (t < ntok) *(float4 *)(out + o + 4 * l8) = make_float4(v[0], v[1], v[2], v[3]);
}

template <int BN, int NS, bool SW>
__global__ void __launch_bounds__(mb_threads<BN>(), BN == 32 ? 2 : 1)
mmb_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd, int cols,
           int ntok, const mb_act oa, int xd16) {
    using L = mb_smem<BN, NS>;
    constexpr int MT = 2;                       /* m-tiles (16 tokens) per warp */
    constexpr int NT = mb_threads<BN>();        /* threads: BN / 32 warps per chain */
    extern __shared__ __align__(16) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int chain = warp & 7, part = warp >> 3;   /* chain: block of the stage; part: 32 tokens */
    pdl_trigger();
    /* grid (token tiles, row tiles): the blocks of one row tile run together,
     * its weights read from DRAM once (0.5% faster than row tiles first) */
    const int j = SW ? 0 : mm_pick(ms, blockIdx.y);
    const int rows = ms.rows[j], r0 = (blockIdx.y - ms.tile0[j]) * (SW ? MB_BM / 2 : MB_BM), t0 = blockIdx.x * BN;
    const int ng = cols / 32, nst = (ng + MB_KB - 1) / MB_KB;
    __shared__ const uint8_t *s_rowp[MB_BM];   /* rows past the end read the last one */
    __shared__ const uint8_t *s_wend[2];       /* SW: the gate's and the up's end */
    const uint8_t *wend = nullptr;
    if constexpr (SW) mb_pair_rows(ms, r0, rows, tid, s_rowp, s_wend);
    else wend = mm_tile_rows(ms, j, r0, rows, MB_BM, tid, s_rowp);
    __syncthreads();

    /* activations and their scales of stage s (written by the kernel before) */
    auto issue_x = [&](int s) {
        const int buf = s % NS;
#pragma unroll 1
        for (int c = tid; c < BN * (MB_BK / 16); c += NT) {
            const int tk = c >> 4, ch = c & 15, k = s * MB_BK + ch * 16, t = t0 + tk;
            const bool ok = t < ntok && k < cols;
            gm_cp16(sb + L::x + (buf * BN + tk) * MB_LD + ch * 16, ok ? xq + (size_t)t * cols + k : xq, ok ? 16 : 0);
        }
        if (!SW && xd16) {   /* a token's scales 4 at a time (16-aligned): 128 copies, not 512 (SW: spills) */
#pragma unroll 1
            for (int c = tid; c < BN * 2; c += NT) {
                const int tk = c >> 1, h = c & 1, g = s * MB_KB + 4 * h, t = t0 + tk;
                const int nv = t < ntok ? max(0, min(4, ng - g)) : 0;
                gm_cp16(sb + L::xd + 4 * ((buf * BN + tk) * MB_XD + 4 * h), nv ? xd + (size_t)t * ng + g : xd, 4 * nv);
            }
        } else {
#pragma unroll 1
            for (int c = tid; c < BN * MB_KB; c += NT) {
                const int tk = c >> 3, kb = c & 7, g = s * MB_KB + kb, t = t0 + tk;
                const bool ok = t < ntok && g < ng;
                gm_cp4(sb + L::xd + 4 * ((buf * BN + tk) * MB_XD + kb), ok ? xd + (size_t)t * ng + g : xd, ok ? 4 : 0);
            }
        }
    };
    /* raw weight bytes of stage s */
    auto issue_w = [&](int s) {
        const int buf = s % NS;
#pragma unroll 1
        for (int c = tid; c < MB_BM * MB_NCH; c += NT) {
            const int row = c / MB_NCH, ch = c % MB_NCH;
            const uint8_t *rp = s_rowp[row];
            const uint8_t *src = (const uint8_t *)((uintptr_t)(rp + (size_t)s * MB_SPAN) & ~(uintptr_t)15) + 16 * ch;
            const ptrdiff_t left = (SW ? s_wend[row / (MB_BM / 2)] : wend) - src;
            const int nb = left >= 16 ? 16 : left > 0 ? (int)left : 0;
            gm_cp16(sb + L::raw + (buf * MB_BM + row) * MB_RS + 16 * ch, nb ? src : rp, nb);
        }
    };
    auto issue = [&](int s) {
        issue_x(s);
        issue_w(s);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    /* raw q4_0 of stage s -> int8 codes - 8 (element order) and the scales,
     * all threads: thread c takes row c / 8, block c % 8 (8 threads read a
     * row's 144 consecutive bytes; taking a block's 64 rows per warp instead
     * was 15% slower: the row stride put the lanes' reads in 4 banks) */
    auto unpack = [&](int s) {
        const int buf = s % NS;
#pragma unroll 1
        for (int c = tid; c < MB_BM * MB_KB; c += NT) {
            const int row = c >> 3, kb = c & 7;
            if (s * MB_KB + kb >= ng) continue;
            const uint8_t *raw = sm + L::raw + (buf * MB_BM + row) * MB_RS +
                                 ((uintptr_t)(s_rowp[row] + (size_t)s * MB_SPAN) & 15) + 18 * kb;
            const uint16_t *h = (const uint16_t *)raw;
            uint32_t q[8];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t v = h[1 + 2 * i] | ((uint32_t)h[2 + 2 * i] << 16);   /* qs[4i..4i+3] */
                q[i] = ((v & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u;            /* elements 4i.. */
                q[4 + i] = (((v >> 4) & 0x0F0F0F0Fu) + 0x78787878u) ^ 0x80808080u; /* 16 + 4i.. */
            }
            uint4 *dst = (uint4 *)(sm + L::w + row * MB_LD + kb * 32);
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            ((float *)(sm + L::dw))[kb * MB_BM + row] = __half2float(__ushort_as_half(h[0]));
        }
    };

    const int g = lane >> 2, q = lane & 3;
    float acc[MT][8][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[m][nt][i] = 0.f;

    /* a ring of NS stages: NS - 1 in flight while one is unpacked and used;
     * a stage past the end commits an empty group, so the count stays. The
     * first stages' weights go before the wait (they land in group 0) */
#pragma unroll 1
    for (int s = 0; s < NS - 1; s++)
        if (s < nst) issue_w(s);
    pdl_wait();
#pragma unroll 1
    for (int s = 0; s < NS - 1; s++) {
        if (s < nst) issue_x(s);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        if constexpr (NS == 2) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        else asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        __syncthreads();   /* stage s landed; everyone is done with stage s - 1, whose slot s + NS - 1 takes */
        if (s + NS - 1 < nst) issue(s + NS - 1);
        else asm volatile("cp.async.commit_group;\n" ::: "memory");
        unpack(s);
        __syncthreads();
        const int buf = s % NS, kb = chain;
        if (s * MB_KB + kb >= ng) continue;   /* this chain has no block here */
        /* B: weight rows 16 np + (lane & 7) + 8 (lane >> 4), k bytes 16 ((lane >> 3) & 1) */
        uint32_t bf[8][2];
#pragma unroll
        for (int np = 0; np < 4; np++)
            gm_ldsm4(sb + L::w + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * MB_LD + ((lane >> 3) & 1) * 16 + 32 * kb,
                     bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1]);
        float2 dw2[8];
#pragma unroll
        for (int nt = 0; nt < 8; nt++) dw2[nt] = *(const float2 *)(sm + L::dw + 4 * (kb * MB_BM + 8 * nt + 2 * q));
#pragma unroll
        for (int m = 0; m < MT; m++) {
            /* A: tokens 16 m + (lane & 15), k bytes 16 (lane >> 4) */
            uint32_t a[4];
            gm_ldsm4(sb + L::x + (buf * BN + 32 * part + 16 * m + (lane & 15)) * MB_LD + (lane >> 4) * 16 + 32 * kb,
                     a[0], a[1], a[2], a[3]);
            const float *xds = (const float *)(sm + L::xd) + (buf * BN + 32 * part + 16 * m + g) * MB_XD + kb;
            const float x0 = xds[0], x1 = xds[8 * MB_XD];
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                int d[4];
                gm_mma_s8(d, a, bf[nt][0], bf[nt][1], EX_MAGIC);
                float *c = acc[m][nt];
                c[0] = __fmaf_rn(__fmul_rn(dw2[nt].x, x0), mb_isum(d[0]), c[0]);
                c[1] = __fmaf_rn(__fmul_rn(dw2[nt].y, x0), mb_isum(d[1]), c[1]);
                c[2] = __fmaf_rn(__fmul_rn(dw2[nt].x, x1), mb_isum(d[2]), c[2]);
                c[3] = __fmaf_rn(__fmul_rn(dw2[nt].y, x1), mb_isum(d[3]), c[3]);
            }
        }
    }

    /* the tree: (w, w + 4) for w < 4, then (w, w + 2) for w < 2 here, each
     * thread exchanging its own elements (value e of lane at e * 32 + lane);
     * then (0, 1): here too, and chain 0's two warps store (SW: in
     * mb_swiglu_store, by all threads) */
    constexpr int NE = MT * 8 * 4;
    float *red = (float *)sm;
#pragma unroll 1
    for (int half = 4; half >= (SW ? 2 : 1); half >>= 1) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();   /* the previous round's reads (or the main loop's) are done */
        if (chain >= half && chain < 2 * half) {
            float *dst = red + (size_t)(part * 4 + chain - half) * NE * 32 + lane;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++) dst[((m * 8 + nt) * 4 + i) * 32] = acc[m][nt][i];
        }
        __syncthreads();
        if (chain < half) {
            const float *src = red + (size_t)(part * 4 + chain) * NE * 32 + lane;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[m][nt][i] = __fadd_rn(acc[m][nt][i], src[((m * 8 + nt) * 4 + i) * 32]);
        }
    }
    if constexpr (!SW) {
        if (chain != 0) return;
        float *out = ms.out[j];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int t = t0 + 32 * part + 16 * m + g + 8 * (i >> 1), r = r0 + 8 * nt + 2 * q + (i & 1);
                    if (t < ntok && r < rows) out[(size_t)t * rows + r] = acc[m][nt][i];
                }
        return;
    }
    __syncthreads();   /* the last round's reads are done */
    float *fin = (float *)sm;
    static_assert(2 * BN * MB_LDF * 4 <= L::bytes, "mb_smem: fin");
    if (chain < 2) {
        float *f = fin + chain * BN * MB_LDF;
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    *(float2 *)(f + (32 * part + 16 * m + g + 8 * h) * MB_LDF + 8 * nt + 2 * q) =
                        make_float2(acc[m][nt][2 * h], acc[m][nt][2 * h + 1]);
    }
    __syncthreads();
    mb_swiglu_store<BN>(fin, ms.out[j], oa, rows, r0, t0, ntok);
}

template <int BN, int NS, bool SW>
static void mmb_launch(lkv_bctx *b, const mm_set &ms, int cols, int n, const mb_act &oa) {
    constexpr int bytes = mb_smem<BN, NS>::bytes;
    static unsigned configured = 0;
    lkv_cuda_smem_limit(b, &configured, mmb_kernel<BN, NS, SW>, bytes, "matmul (mmb): shared memory limit");
    const unsigned row_tiles = ms.tile0[ms.n_w];
    /* the scales by 16-byte copies where aligned (cols % 128 == 0; tune.h's mmb_xd4: 4-byte ones) */
    const int xd16 = cols / 32 % 4 == 0 && !lkv_cuda_tuning.mmb_xd4;
    lkv_launch(b, mmb_kernel<BN, NS, SW>, dim3(lkv_cdiv(n, BN), row_tiles), mb_threads<BN>(), bytes, ms,
               (const int8_t *)b->xq, (const float *)b->xd, cols, n, oa, xd16);
}

/* the token tile and ring depth: 64 x 3 (tune.h's mmb_bn = 32, mmb_st = 2:
 * the other variants, which the tests run) */
template <bool SW> static void mmb_dispatch(lkv_bctx *b, const mm_set &ms, int cols, int n, const mb_act &oa) {
    const bool b64 = lkv_cuda_tuning.mmb_bn != 32, s3 = lkv_cuda_tuning.mmb_st != 2;
    if (b64) s3 ? mmb_launch<64, 3, SW>(b, ms, cols, n, oa) : mmb_launch<64, 2, SW>(b, ms, cols, n, oa);
    else s3 ? mmb_launch<32, 3, SW>(b, ms, cols, n, oa) : mmb_launch<32, 2, SW>(b, ms, cols, n, oa);
}

bool lkv_cuda_mmb(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (type != LKV_TYPE_Q4_0) return false;
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], MB_BM);
    mmb_dispatch<false>(b, ms, cols, n, mb_act{nullptr, nullptr, nullptr});
    return true;
}

bool lkv_cuda_mmb_swiglu(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if (ms.n_w != 2 || ms.rows[0] != ms.rows[1] || ms.rows[0] % 32 || !b->xq2) return false;
    ms.tile0[0] = 0;
    ms.tile0[1] = ms.tile0[2] = (int)lkv_cdiv(ms.rows[0], MB_BM / 2);
    mmb_dispatch<true>(b, ms, cols, n, mb_act{b->xq2, b->xd2, b->xs2});
    return true;
}
