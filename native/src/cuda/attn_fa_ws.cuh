/*
 * cuda/attn_fa_ws.cuh: the warp-specialized prefill attention on Hopper
 * (sm_90a): 16-bit K and V (f16 / bf16; q8_0 / q4_0 reach it decoded by
 * attn_stage.cu) at head_dim 128, over the chunk grid, folded into attn.cu's
 * state exactly as attn_fa_kernel.cuh's kernel folds it (its header: the
 * state's form at chunk boundaries, why a split of the range into calls does
 * not show, the rounding).
 *
 * Work split. A block owns 128 (query, head) rows of one KV head (flat index
 * f = qi * G + g, as attn_fa_kernel.cuh) and walks the positions up to its
 * last query in tiles of 128 K/V rows that start at each chunk's start and
 * are clipped at its end. Warps 0-7 compute, two warpgroups of 64 rows each
 * (warp w: rows 16w .. 16w + 15); warps 8-11 bring the tiles. Per tile a
 * compute warpgroup issues S = Q K^T (8 wgmma m64n128k16, Q and K from shared
 * memory) and O += P V (8 wgmma m64n128k16, P from registers, V from shared
 * memory), the online softmax of its 64 x 128 scores in registers between.
 *
 * The loop (FlashAttention-3's overlap within a warpgroup): at tile j the
 * warpgroup issues S_j and then P_{j-1} V_{j-1} as two groups; once S_j has
 * landed it masks it, takes the row maxima and computes 2^(s c2 - m log2 e)
 * in place while P_{j-1} V_{j-1} still runs; once that has landed too it
 * releases tile j - 1's stage, applies to o the previous chunk's
 * normalisation (where tile j - 1 ended a chunk) and the rescale by the new
 * maximum, and rounds P_j to V's type. Each value goes through the operations
 * of the plain loop (S, softmax, P V, one tile after another) in the same
 * order (by construction; the two were not compared bit for bit). The two
 * warpgroups run unsynchronized; making them take turns by named barriers
 * (FlashAttention-3's ping-pong) measured 2% slower.
 *
 * Data movement: tile j goes to stage j % 3; full[s] says a stage landed,
 * empty[s] (256 compute arrivals) that it was read. Where one segment holds
 * the block's whole range (all resident, or a streamed piece) and the host
 * made tensor maps for it, one producer thread copies each tile as 4 boxes of
 * 64 dims x 128 rows (K, V) by tensor copies (TMA), all 3 stages ahead, rows
 * past the segment arriving as zeros; the tiles then lie 128-byte swizzled
 * (rows of 128 bytes, the 16-byte chunk c of row r at c ^ (r % 8)) and the
 * wgmma descriptors say so. Otherwise the 4 producer warps copy 16-byte
 * pieces by cp.async into the same layout (fa_ws_copy; absent rows zero-
 * filled, a mask of present rows per tile), two tiles ahead: the same tiles,
 * the same bits. Rows of a tensor-copied box past the tile's end (the next
 * chunk's) are masked like absent ones; their p is exactly 0. Registers:
 * setmaxnreg gives the compute threads 224 and the producers 56 (2 x 128 x
 * 224 + 128 x 56 = 64512 of the SM's 65536; the launch gives each 168; at 208
 * the compute threads spilled 8 bytes).
 *
 * Head_dim 128 only: the earlier 64-position version of this kernel gave
 * wrong sums at head_dim 64 (every f16 case of test_attn_mma; cause not
 * found).
 *
 * Shared memory: 3 stages of K + V (64 KiB each), the Q tile (32 KiB, no
 * swizzle: the core-matrix layout of attn_fa_tile.cuh), the tile masks (4
 * words per stage) and the barriers: 224.1 KiB of 227.
 *
 * Speed (H200, 2026-12-03, tests/cuda/test_attn_mma "timeab", Llama-3-8B
 * shape, 512 queries at the end of a 32K / 128K context, TFLOP/s of the
 * causal part, f16 K/V): 64-position tiles by cp.async 255 / 265; 128-position
 * tiles 318 / 328; with tensor copies 478 / 511 (the copies left out
 * altogether, a timing-only build: 531 / 562, so the cp.async copies were the
 * bound); with the overlap above 559 / 606. q8_0 (staged): 459 / 493; 2048
 * queries at 32K, q8_0: 513. docs/performance.md has the table.
 */
#ifndef LKV_CUDA_ATTN_FA_WS_CUH
#define LKV_CUDA_ATTN_FA_WS_CUH

#include <cuda.h>
#include <limits.h>

#include "async_ptx.cuh"
#include "attn_fa_state.cuh"
#include "attn_fa_tile.cuh"

enum { FA_WS_BN = 128, FA_WS_NS = 3, FA_WS_PROD = 128 };

/* tensor maps of the K and V rows of the segment holding the call's first position
 * (attn_mma.cu fa_ws_maps_for): 16-bit elements, n_head_kv * 128 x the segment's rows,
 * boxes of 64 x 128, 128-byte swizzle; ok = 0 where none was made */
struct fa_ws_maps {
    CUtensorMap k, v;
    int ok;
};

/* byte offset of 16-byte piece pc (dims 8 pc .. 8 pc + 7) of row r in a 128-row tile
 * laid out as two 64-dim halves of 128 rows x 128 bytes, 128-byte swizzled (what a
 * tensor copy of a 64 x 128 box writes) */
static __device__ __forceinline__ int fa_ws_at(int r, int pc) {
    return (pc >> 3) * (FA_WS_BN * 128) + r * 128 + (((pc & 7) ^ (r & 7)) << 4);
}

/* a tile's f16 / bf16 rows by cp.async into that layout, absent rows zero-filled:
 * piece (row, dim group) per producer thread, a half warp taking 16 rows of one group */
static __device__ __forceinline__ void fa_ws_copy(const lkv_attn_desc &d, const fa_rows &rw, bool is_k, size_t rb,
                                                  size_t off, uint8_t *dst, int t) {
    constexpr int P = 16, TOTAL = FA_WS_BN * P;
    const uint8_t *base = rw.seg >= 0 ? rw.row(d, 0, is_k, rb, off) : nullptr;   /* one segment: rows rb apart */
    const int nrow = rw.pe - rw.p0;
    for (int idx = t; idx < TOTAL; idx += FA_WS_PROD) {
        const int rlo = idx & 15, rest = idx >> 4, pc = rest % P, r = (rest / P) * 16 + rlo;
        const uint8_t *src = base ? (r < nrow ? base + (size_t)r * rb : nullptr) : rw.row(d, r, is_k, rb, off);
        uint8_t *dp = dst + fa_ws_at(r, pc);
        if (src) fa_cp16((uint32_t)__cvta_generic_to_shared(dp), src + pc * 16);
        else *(uint4 *)dp = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* the kernel's shared memory (head_dim D, 16-bit K and V) */
template <int D> struct fa_ws_smem {
    static constexpr int tile = FA_WS_BN * D * 2;
    static constexpr int stage = 2 * tile;   /* K, then V */
    static constexpr int q = FA_WS_NS * stage;
    static constexpr int mask = q + FA_BM * D * 2;
    static constexpr int bars = mask + FA_WS_NS * 16;
    static constexpr int bytes = bars + FA_WS_NS * 16;
    static_assert(bytes <= 227 * 1024, "shared memory");
};

/* grid (M tiles of 128 rows, n_head_kv); the heaviest tiles (latest queries) first */
template <int TK, int TV>
__global__ void __launch_bounds__(FA_THREADS + FA_WS_PROD, 1)
attn_fa_ws_kernel(float *st, const float *__restrict__ q, const __grid_constant__ lkv_attn_desc d, const fa_geom ge,
                  const __grid_constant__ fa_ws_maps mp) {
#if FA_HAVE_WGMMA
    constexpr int D = 128, BN = FA_WS_BN, NS = FA_WS_NS, KS = D / 16, NO = D / 8, NB = BN / 8;
    constexpr bool BFK = TK == LKV_TYPE_BF16, BFV = TV == LKV_TYPE_BF16;
    static_assert((TK == LKV_TYPE_F16 || BFK) && (TV == LKV_TYPE_F16 || BFV), "16-bit K and V");
    using L = fa_ws_smem<D>;
    extern __shared__ __align__(1024) uint8_t smw[];   /* the swizzled tiles: 1024-byte boundaries */
    uint8_t *sm = smw;
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mt = gridDim.x - 1 - blockIdx.x, kh = blockIdx.y, G = ge.G;
    const int n_rows = d.n_q * G, f0 = mt * FA_BM;

    const int qi_last = min(d.n_q - 1, (f0 + FA_BM - 1) / G);
    const int Pend = min(ge.P1, d.q_pos0 + qi_last + 1);
    if (Pend <= ge.P0) return;   /* nothing visible: every state stays as it is */
    const int c_last = (Pend - 1) / d.chunk, tpc = (d.chunk + BN - 1) / BN;
    const int n_tiles = (c_last - d.chunk_lo) * tpc + (Pend - c_last * d.chunk + BN - 1) / BN;
    const int qpos_min = d.q_pos0 + f0 / G;   /* the block's first query */
    const size_t offk = (size_t)kh * D * 2, offv = offk;

    /* one segment holding every position of [P0, Pend) (all resident), with tensor maps:
     * tiles by tensor copies; else by cp.async, rows found per tile */
    const int seg0 = fa_find(d, ge.P0);
    const bool flat = mp.ok && seg0 >= 0 && Pend - d.segs[seg0].pos0 <= d.segs[seg0].n;
    const uint32_t bfull = sb + L::bars, bempty = bfull + 8 * NS;
    if (tid == 0) {
        for (int s = 0; s < NS; s++) {
            mb_init(bfull + 8 * s, flat ? 1 : FA_WS_PROD);
            mb_init(bempty + 8 * s, FA_THREADS);
        }
        mb_init_fence();
    }
    __syncthreads();

    if (warp >= FA_WARPS) {   // ---- the producer: tile j into stage j % NS
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
        const int t = tid - FA_THREADS;
        fa_cursor_t<BN> ic;
        ic.start(d);
        if (flat) {   /* one thread: 4 boxes (K, V; dims 0-63, 64-127) per tile, all NS stages ahead */
            if (t != 0) return;
            const int x = kh * D, y0 = d.segs[seg0].pos0;
            for (int j = 0; j < n_tiles; j++) {
                const fa_tile tl = ic.tile(d, Pend);
                ic.next(d, Pend);
                const int s = j % NS;
                if (j >= NS) mb_wait(bempty + 8 * s, ((j - NS) / NS) & 1);   /* tile j - NS is read */
                const uint32_t stg = sb + s * L::stage, bar = bfull + 8 * s;
                mb_arrive_tx(bar, L::stage);
                tma_load_2d(stg, &mp.k, x, tl.p0 - y0, bar);
                tma_load_2d(stg + L::tile / 2, &mp.k, x + 64, tl.p0 - y0, bar);
                tma_load_2d(stg + L::tile, &mp.v, x, tl.p0 - y0, bar);
                tma_load_2d(stg + L::tile + L::tile / 2, &mp.v, x + 64, tl.p0 - y0, bar);
            }
            return;
        }
        /* NS - 1 tiles ahead by cp.async, every producer thread */
        auto issue = [&](int j) {
            if (j < n_tiles) {
                const fa_tile tl = ic.tile(d, Pend);
                ic.next(d, Pend);
                uint8_t *stg = sm + (j % NS) * L::stage;
                fa_rows rw;
                rw.init(d, tl);
                /* bit r of the mask: tile row r is present (one row per producer thread) */
                const bool ok = rw.row(d, t, true, ge.rbk, 0) != nullptr;
                const uint32_t bal = __ballot_sync(0xffffffffu, ok);
                if (lane == 0) ((uint32_t *)(sm + L::mask))[(j % NS) * 4 + (t >> 5)] = bal;
                fa_ws_copy(d, rw, true, ge.rbk, offk, stg, t);
                fa_ws_copy(d, rw, false, ge.rbv, offv, stg + L::tile, t);
            }
            fa_cp_commit();
        };
        constexpr int LA = NS - 1;
        for (int s = 0; s < LA; s++) issue(s);
        for (int j = 0; j < n_tiles; j++) {
            fa_cp_wait<LA - 1>();   /* tile j's pieces of this thread */
            asm volatile("bar.sync 2, %0;\n" ::"r"((int)FA_WS_PROD) : "memory");   /* and of every producer */
            fa_fence_async();
            mb_arrive(bfull + 8 * (j % NS));
            /* stage (j + LA) % NS held tile j - 1 (its mask too): wait until it is read */
            if (j >= 1 && j + LA < n_tiles) mb_wait(bempty + 8 * ((j - 1) % NS), ((j - 1) / NS) & 1);
            issue(j + LA);
        }
        fa_cp_wait<0>();
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");

    // ---- Q: 128 rows in K's type into the Q tile (core-matrix layout, 128 rows)
    for (int it = warp; it < FA_BM * (D / 32); it += FA_WARPS) {
        const int r = it / (D / 32), c = 32 * (it % (D / 32)) + lane, f = f0 + r;
        const float x = f < n_rows ? q[((size_t)(f / G) * d.n_head + kh * G + f % G) * D + c] : 0.f;
        const uint16_t hv = BFK ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
        *(uint16_t *)(sm + L::q + (c >> 3) * (FA_BM * 16) + r * 16 + (c & 7) * 2) = hv;
    }
    fa_fence_async();   /* the Q tile is read by wgmma (the async proxy) */
    asm volatile("bar.sync 1, 256;\n" ::: "memory");   /* the compute warps */
    /* A of S: this warpgroup's 64 rows of Q (M-adjacent core matrices 128 bytes apart, K-adjacent 2048) */
    const uint32_t qa = sb + L::q + (warp >> 2) * 64 * 16;

    int qpos[2];   /* the thread's rows' query positions (padding rows: none) */
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int f = f0 + 16 * warp + (lane >> 2) + 8 * e;
        qpos[e] = f < n_rows ? d.q_pos0 + f / G : INT_MIN;
    }
    fa_state<D> run;   /* the running softmax of the thread's two rows */
    float o[NO][4];
    run.load(st, d, f0, warp, lane, G, kh, o);

    float s[NB][4];
    uint32_t pa[NB / 2][4];
    float fac[2], il[2];
    bool norm = false;   /* o waits for its chunk-end normalisation by il (the previous tile ended a chunk) */
    /* (the products of that tile done) o's pending normalisation */
    auto finish_chunk = [&]() {
        if (!norm) return;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][0] = __fmul_rn(o[n][0], il[0]); o[n][1] = __fmul_rn(o[n][1], il[0]);
            o[n][2] = __fmul_rn(o[n][2], il[1]); o[n][3] = __fmul_rn(o[n][3], il[1]);
        }
        norm = false;
    };
    auto issue_s = [&](int j) {
        const uint32_t kt = sb + (j % NS) * L::stage;
        fa_wg_fence();
#pragma unroll
        for (int kk = 0; kk < KS; kk++)   /* kk = 0 overwrites s */
            fa_wgmma_ss_n128<BFK>(s, fa_desc(qa + kk * 2 * (FA_BM * 16), FA_BM * 16, 128),
                                  fa_desc_sw128(kt + (kk >> 2) * (L::tile / 2) + (kk & 3) * 32, 16, 1024), kk > 0);
        fa_wg_commit();
    };
    auto issue_pv = [&](int j) {
        const uint32_t vt = sb + (j % NS) * L::stage + L::tile;
        fa_wg_fence();
#pragma unroll
        for (int k = 0; k < BN / 16; k++) fa_wgmma<BFV, 1>(o, pa[k], fa_desc_sw128(vt + k * 2048, L::tile / 2, 1024), 1);
        fa_wg_commit();
    };
    /* tile j's scores -> 2^(s c2 - m log2 e) in place (f32), the running max, fac */
    auto soft_a = [&](const fa_tile &tl, int j) {
        uint64_t ok0, ok1;   /* bit r of ok0 | ok1 << 64: tile row r is present */
        if (flat) {
            const int nr = tl.pe - tl.p0;
            ok0 = nr >= 64 ? ~0ull : (1ull << nr) - 1;
            ok1 = nr >= 128 ? ~0ull : nr <= 64 ? 0ull : (1ull << (nr - 64)) - 1;
        } else {
            const uint32_t *mw = (const uint32_t *)(sm + L::mask) + (j % NS) * 4;
            ok0 = (uint64_t)mw[0] | ((uint64_t)mw[1] << 32);
            ok1 = (uint64_t)mw[2] | ((uint64_t)mw[3] << 32);
        }
        if (!((ok0 & ok1) == ~0ull && tl.p0 + BN - 1 <= qpos_min)) {
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int col = 8 * n + 2 * (lane & 3) + (i & 1);
                    const uint64_t w = n < NB / 2 ? ok0 : ok1;
                    if (!((w >> (col & 63)) & 1) || tl.p0 + col > qpos[i >> 1]) s[n][i] = -INFINITY;
                }
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NB; n++) {
            mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
        }
        float ml[2];
        run.step(mx, ge.scale, ml, fac);
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[n][i] = fa_ex2(fmaf(s[n][i], ge.c2, -ml[i >> 1]));
    };
    /* (the products of the previous tile done) o: the pending normalisation, then fac;
     * P rounded to V's type, l sums the rounded values; at a chunk's end l over the quad */
    auto soft_b = [&](const fa_tile &tl) {
        finish_chunk();
        if (!__all_sync(0xffffffffu, fac[0] == 1.f && fac[1] == 1.f)) {
#pragma unroll
            for (int n = 0; n < NO; n++) {
                o[n][0] = __fmul_rn(o[n][0], fac[0]); o[n][1] = __fmul_rn(o[n][1], fac[0]);
                o[n][2] = __fmul_rn(o[n][2], fac[1]); o[n][3] = __fmul_rn(o[n][3], fac[1]);
            }
        }
        run.template take_p<BFV>(s, pa);
        if (tl.last) {
            bool apply[2];   /* (where not: il is 1, a multiplication that changes nothing) */
            run.chunk_end(lane, il, apply);
            norm = true;
        }
    };

    fa_cursor_t<BN> cc;   /* the tile being computed */
    cc.start(d);
    {
        const fa_tile tl = cc.tile(d, Pend);
        cc.next(d, Pend);
        mb_wait(bfull, 0);
        issue_s(0);
        fa_wg_wait0();
        fa_reg_fence(s);
        soft_a(tl, 0);
        soft_b(tl);
    }
    for (int j = 1; j < n_tiles; j++) {
        const fa_tile tl = cc.tile(d, Pend);
        cc.next(d, Pend);
        mb_wait(bfull + 8 * (j % NS), (j / NS) & 1);
        issue_s(j);
        issue_pv(j - 1);
        fa_wg_wait1();   /* S of tile j */
        fa_reg_fence(s);
        soft_a(tl, j);
        fa_wg_wait0();   /* P V of tile j - 1 */
        fa_reg_fence(o);
        mb_arrive(bempty + 8 * ((j - 1) % NS));   /* tile j - 1's K and V are read */
        soft_b(tl);
    }
    issue_pv(n_tiles - 1);
    fa_wg_wait0();
    fa_reg_fence(o);
    mb_arrive(bempty + 8 * ((n_tiles - 1) % NS));
    finish_chunk();

    run.store(lane, o);   // -- the state of each row that some tile reached
#else
    (void)st, (void)q, (void)d, (void)ge;
    __trap();   /* launched only where the device runs sm_90a code */
#endif
}

#endif
