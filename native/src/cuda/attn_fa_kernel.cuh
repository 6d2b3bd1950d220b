/*
 * cuda/attn_fa_kernel.cuh: the prefill attention kernel on tensor cores (flash attention over
 * the chunk grid, f32 accumulation), folded into attn.cu's state.
 *
 * Work split. The M rows are (query, head) pairs of one KV head (GQA): flat
 * index f = qi * G + g is query qi, head kh * G + g, so all G heads of a KV
 * head share each K/V tile. A block (8 warps) owns 128 rows (warp w: rows
 * 16w .. 16w + 15) and walks the positions [P0, Pend) of the chunk range in
 * tiles of 64 K/V rows that start at each chunk's start and are clipped at
 * its end (Pend: the block's last query; causality per row is a mask). Per
 * tile: S = Q K^T, online softmax in registers, O += P V. On sm_90a the two
 * products are warpgroup MMAs (wgmma m64n64k16 for S, m64nDk16 for O, A from
 * registers: Q and P; B from the shared tile through a descriptor), on other
 * architectures (and head_dim 256, whose Q does not fit in registers)
 * mma.sync m16n8k16 with ldmatrix; both leave the same per-warp fragments.
 * On the wgmma path S of tile j + 1 is issued before tile j's softmax and
 * runs on the tensor cores meanwhile (K straight from its stage: f16 / bf16
 * K only). The sm_90a code exists only in a build for sm_90a (meson
 * gpu_arch=90a); a plain sm_90 build runs the mma.sync path.
 *
 * Data movement (attn_fa_tile.cuh): a cp.async pipeline of NS stages (4 at
 * head_dim <= 128) of raw K/V, one barrier per tile; q8_0 / q4_0 tiles are
 * dequantized once into a shared f16 tile for all warps, one tile ahead of
 * the products (two f16 buffers where shared memory allows), so the warps'
 * dequantization and tensor-core work overlap. When one segment holds every
 * position of the call (all resident) rows are found by arithmetic and tail
 * rows zero-filled by the copies themselves; otherwise each tile searches the
 * segments and keeps a mask of the rows present.
 *
 * Exactness across calls (docs/design.md section 4: the split of a layer's chunk
 * range into calls, which depends on the KV pool, must not show). The state
 * per (query, head) is attn.cu's (m = max scaled score, l = sum of e^(s - m),
 * o normalised) and the online softmax keeps its running values in that
 * form at every chunk boundary: m in the scaled domain (the tile maximum of
 * the raw scores times the scale: rounding is monotonic), and at the end of
 * each chunk l is summed over the quad and o is normalised (o *= 1 / l);
 * the next tile rescales o by alpha * l. A call that starts from a stored
 * state loads exactly those values, so one call over [a, c) and the calls
 * [a, b), [b, c) execute the same operations on the same bits. A tile (and a
 * chunk) that shows a row nothing changes none of the row's values, as a
 * call that shows a row nothing does not store it. A chunk's tiles do not
 * depend on the call (they start at the chunk's start and stop at its end
 * or at the block's last query, never at the range's end).
 *
 * Rounding (what makes it agree with the CPU to ~1e-3 and not bitwise): the
 * query goes to K's dot type as the CPU's does (f16 / bf16; for q8_0 / q4_0
 * K the CPU's q8_0 quantization, attn.cuh attn_qconv's rule, then code * d
 * in f16); K and V quantized values are code * d rounded to f16; scores and
 * sums are f32 (tensor-core order); p = 2^(s * scale * log2 e - m * log2 e)
 * with ex2.approx, rounded to V's operand type (f16, or bf16 for a bf16 V);
 * l sums the f32 values (2^-12 relative per term, unbiased).
 *
 * Speed (H200, tests/cuda/test_attn_mma.c "time", Llama-3-8B shape: 32 / 8
 * heads of 128, 512 queries at the end of the context, TFLOP/s of the causal
 * part, 2026-12-01): sm_90a wgmma path 192 / 134 / 165 TFLOP/s at 32K for
 * f16 / q8_0 / q4_0 K and V, 199 / 141 / 172 at 128K; the mma.sync path
 * 147 / 120 / 142 at 32K (the previous kernel: 138 / 65 / 80). ncu at 32K,
 * f16: issue slots 23% busy, ~1.9 warps per scheduler with 0.3 eligible, the
 * top stall the cp.async waits (L1TEX scoreboard, 32%), L2 51% busy: the
 * block-wide barrier per tile and 8 warps per SM leave it latency-bound.
 * The warp-specialized kernel (warps 8-11 copy behind per-stage mbarriers,
 * no block barrier per tile) is attn_fa_ws.cuh's since 2026-12-03: it takes
 * 16-bit K/V at head_dim 128 on sm_90a, and q8_0 / q4_0 after attn_stage.cu
 * decodes them; its history (224 / 235 TFLOP/s for f16 at 32K / 128K on
 * 2026-12-02, 255 / 268 with setmaxnreg, both with this kernel's 64-position
 * tiles) is in docs/performance.md. In this kernel, with the producer warps'
 * dequantization, q8_0 / q4_0 reached only 110 / 149. Tried and taken back
 * (2026-12-02, night; git history has it): FlashAttention-3's loop order in
 * the warp-specialized kernel (setmaxnreg 224 / 56, S_j issued with
 * P_{j-1} V_{j-1}, tile j's softmax beside the latter, with and without the
 * two warpgroups taking turns by named barriers, 4 or 6 stages). It was
 * exact (test_attn_mma's split checks) but slower: f16 at 32K 168 TFLOP/s
 * against 209 for this loop in the same build; ncu put the tensor pipe at
 * 21% against 26% busy. Two ptxas traps on the way, for whoever tries again:
 * writing a product's accumulators (the mask's -inf) or a register the next
 * P takes (a copy ptxas coalesces) before the last wgmma.wait of the stage
 * serializes every wgmma of the kernel (C7513 / C7520 in -Xptxas -v).
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, g = lane >> 2, t = lane & 3):
 *   A 16x16: a0 (row g, k 2t..2t+1), a1 (row g+8), a2 (row g, k 8+2t..), a3 (row g+8, k 8+2t..)
 *   B 16x8:  b0 (k 2t..2t+1, col g), b1 (k 8+2t.., col g)
 *   C 16x8:  c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8)
 * wgmma's per-warp fragments of A and of the accumulator are the same. The C
 * fragments of S, rounded to pairs, are the A fragments of P (n-tiles 2k and
 * 2k+1 make k-step k). ldmatrix.x4: lanes 8i..8i+7 address the rows of
 * matrix i; in the core-matrix layout each matrix is 128 contiguous bytes.
 */
#ifndef LKV_CUDA_ATTN_FA_KERNEL_CUH
#define LKV_CUDA_ATTN_FA_KERNEL_CUH

#include <limits.h>

#include "attn_fa_state.cuh"
#include "attn_fa_tile.cuh"

// ---------------------------------------------------------------- the kernel

/* grid (M tiles of 128 rows, n_head_kv); the heaviest tiles (latest queries) first */
template <int TK, int TV, int D>
__global__ void __launch_bounds__(FA_THREADS, 1)
attn_fa_kernel(float *st, const float *__restrict__ q, const __grid_constant__ lkv_attn_desc d, const fa_geom ge) {
    using L = fa_smem<TK, TV, D>;
    constexpr bool QK = L::QK, QV = L::QV, ANYQ = L::ANYQ;
    constexpr bool BFK = TK == LKV_TYPE_BF16, BFV = TV == LKV_TYPE_BF16;
    constexpr int NS = L::NS, NF = L::NF, KS = D / 16, NO = D / 8;
    constexpr bool QREG = D <= 128;
    constexpr int PEND = ANYQ && NF == 2 ? NS - 3 : NS - 2;   /* copy groups left in flight at a wait */
    extern __shared__ __align__(128) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mt = gridDim.x - 1 - blockIdx.x, kh = blockIdx.y, G = ge.G;
    const int n_rows = d.n_q * G, f0 = mt * FA_BM;
#if FA_HAVE_WGMMA
    const bool wg = QREG && ge.wg != 0;
    /* S of tile j + 1 in flight during tile j's softmax: K straight from its stage, landed a tile early */
    const bool pipe = wg && !QK && NS >= 3 && ge.wg == 2;
#else
    constexpr bool pipe = false;
#endif
    constexpr int PEND_P = NS >= 3 ? NS - 3 : 0;   /* the pipelined path's wait */

    const int qi_last = min(d.n_q - 1, (f0 + FA_BM - 1) / G);
    const int Pend = min(ge.P1, d.q_pos0 + qi_last + 1);
    if (Pend <= ge.P0) return;   /* nothing visible: every state stays as it is */
    const int c_last = (Pend - 1) / d.chunk;
    const int n_tiles = (c_last - d.chunk_lo) * ge.tpc + (Pend - c_last * d.chunk + FA_BN - 1) / FA_BN;
    const int qpos_min = d.q_pos0 + f0 / G;   /* the block's first query */

    int qpos[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int f = f0 + 16 * warp + (lane >> 2) + 8 * e;
        qpos[e] = f < n_rows ? d.q_pos0 + f / G : INT_MIN;   /* padding rows see nothing */
    }
    const size_t offk = (size_t)kh * fa_hb<TK, D>(), offv = (size_t)kh * fa_hb<TV, D>();

    /* one segment holding every position of [P0, Pend) (the all-resident case): rows
     * are found by arithmetic and every tile row is present; else a search per tile */
    const int seg0 = fa_find(d, ge.P0);
    const bool flat = seg0 >= 0 && Pend - d.segs[seg0].pos0 <= d.segs[seg0].n;
    const uint8_t *kflat = nullptr, *vflat = nullptr;
    if (flat) {
        kflat = (const uint8_t *)d.segs[seg0].k - (ptrdiff_t)d.segs[seg0].pos0 * (ptrdiff_t)ge.rbk + offk;
        vflat = (const uint8_t *)d.segs[seg0].v - (ptrdiff_t)d.segs[seg0].pos0 * (ptrdiff_t)ge.rbv + offv;
    }

    // -- tile j's copies into stage j % NS (an empty group past the end); ic walks the tiles
    fa_cursor ic;
    ic.start(d);
    constexpr int NT = FA_THREADS;
    const int t = tid;
    auto issue = [&](int j) {
        if (j < n_tiles) {
            const fa_tile tl = ic.tile(d, Pend);
            ic.next(d, Pend);
            uint8_t *stg = sm + L::stages + (j % NS) * L::stage;
            if (flat) {
                if constexpr (QK) fa_copy_raw_flat<fa_hb<TK, D>(), NT>(kflat, ge.rbk, tl, ge.gk, stg, t);
                else fa_copy_f16_flat<D, NT>(kflat, ge.rbk, tl, stg, t);
                if constexpr (QV) fa_copy_raw_flat<fa_hb<TV, D>(), NT>(vflat, ge.rbv, tl, ge.gv, stg + L::rk, t);
                else fa_copy_f16_flat<D, NT>(vflat, ge.rbv, tl, stg + L::rk, t);
            } else {
                fa_rows rw;
                rw.init(d, tl);
                /* bit r of the mask: tile row r is present (64 rows: the first two warps) */
                if (t < FA_BN) {
                    const bool ok = rw.row(d, t, true, ge.rbk, 0) != nullptr;
                    const uint32_t bal = __ballot_sync(0xffffffffu, ok);
                    if (lane == 0) ((uint32_t *)(sm + L::mask))[(j % NS) * 2 + (t >> 5)] = bal;
                }
                if constexpr (QK) fa_copy_raw<NT>(d, rw, true, ge.rbk, offk, fa_hb<TK, D>(), ge.gk, stg, t);
                else fa_copy_f16<D, NT>(d, rw, true, ge.rbk, offk, stg, t);
                if constexpr (QV) fa_copy_raw<NT>(d, rw, false, ge.rbv, offv, fa_hb<TV, D>(), ge.gv, stg + L::rk, t);
                else fa_copy_f16<D, NT>(d, rw, false, ge.rbv, offv, stg + L::rk, t);
            }
        }
        fa_cp_commit();
    };
    // -- tile j's quantized operands -> f16 buffer j % NF
    auto dequant = [&](int j) {
        const uint8_t *stg = sm + L::stages + (j % NS) * L::stage;
        uint8_t *fb = sm + L::fbufs + (j % (NF ? NF : 1)) * L::fbuf;
        if constexpr (QK) fa_dequant<TK, D, NT>(fb, stg, t);
        if constexpr (QV) fa_dequant<TV, D, NT>(fb + (QK ? L::tile : 0), stg + L::rk, t);
        (void)stg, (void)fb, (void)t;
        fa_fence_async();
    };
    /* shared addresses of tile j's K and V (16-bit tiles) */
    auto k_addr = [&](int j) -> uint32_t {
        if constexpr (QK) return sb + L::fbufs + (j % (NF ? NF : 1)) * L::fbuf;
        else return sb + L::stages + (j % NS) * L::stage;
    };
    auto v_addr = [&](int j) -> uint32_t {
        if constexpr (QV) return sb + L::fbufs + (j % (NF ? NF : 1)) * L::fbuf + (QK ? L::tile : 0);
        else return sb + L::stages + (j % NS) * L::stage + L::rk;
    };

    for (int s = 0; s < NS - 1; s++) issue(s);

    // -- Q: 128 rows in K's dot type into the Q tile (core-matrix layout, 128 rows)
    {
        uint8_t *qs = sm + L::q;
        for (int it = warp; it < FA_BM * (D / 32); it += FA_WARPS) {
            const int r = it / (D / 32), g32 = it % (D / 32), f = f0 + r, c = 32 * g32 + lane;
            float x = 0.f;
            if (f < n_rows) x = q[((size_t)(f / G) * d.n_head + kh * G + f % G) * D + c];
            uint16_t hv;
            if constexpr (QK) {
                /* the CPU's q8_0 (attn.cuh attn_qconv): d = amax / 127 rounded to f16,
                 * codes rint(x * 127 / amax); the f16 operand is code * d */
                const float amax = lkv_warp_max(fabsf(x));
                const float id = amax != 0.f ? __fdiv_rn(127.f, amax) : 0.f;
                const float qd = __half2float(__float2half_rn(__fdiv_rn(amax, 127.f)));
                hv = __half_as_ushort(__float2half_rn(__fmul_rn(rintf(__fmul_rn(x, id)), qd)));
            } else if constexpr (BFK) {
                hv = __bfloat16_as_ushort(__float2bfloat16_rn(x));
            } else {
                hv = __half_as_ushort(__float2half_rn(x));
            }
            *(uint16_t *)(qs + (c >> 3) * (FA_BM * 16) + r * 16 + (c & 7) * 2) = hv;
        }
    }
    __syncthreads();
    /* ldmatrix lane offsets: A (Q) rows; B of S (K): kv row, dim group; B of O (V, trans) */
    const uint32_t qrow = sb + L::q + (16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1)) * 16 + (lane >> 4) * (FA_BM * 16);
    const int koff = ((lane & 7) + 8 * (lane >> 4)) * 16 + ((lane >> 3) & 1) * (FA_BN * 16);
    const int voff = ((lane & 7) + 8 * ((lane >> 3) & 1)) * 16 + (lane >> 4) * (FA_BN * 16);
    uint32_t qa[QREG ? KS : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
            fa_ldsm4(qrow + kk * 2 * (FA_BM * 16), qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
    }

    /* the state of the thread's two rows (e = 0: row g, 1: row g + 8), its columns of o */
    fa_state<D> run;   /* the running softmax */
    float o[NO][4];
    run.load(st, d, f0, warp, lane, G, kh, o);

    if constexpr (ANYQ && NF == 2) {   /* tile 0 dequantized before the loop */
        fa_cp_wait<NS - 2>();
        __syncthreads();
        dequant(0);
    }

#if FA_HAVE_WGMMA
    float sn[8][4];   /* S of the next tile (pipelined wgmma path) */
#endif
    fa_cursor cc;   /* the tile being computed */
    cc.start(d);
    for (int j = 0; j < n_tiles; j++) {
        const fa_tile tl = cc.tile(d, Pend);
        cc.next(d, Pend);
        if (pipe) fa_cp_wait<PEND_P>();
        else fa_cp_wait<PEND>();
        fa_fence_async();
        __syncthreads();   /* tile j (and j + 1 for NF = 2) landed; stage (j - 1) % NS is free */
        issue(j + NS - 1);
        if constexpr (ANYQ && NF == 2) {
            if (j + 1 < n_tiles) dequant(j + 1);
        } else if constexpr (ANYQ) {
            dequant(j);
            __syncthreads();
        }
        const uint32_t kt = k_addr(j), vt = v_addr(j);

        // -- S = Q K^T: 16 x 64 per warp
        float s[8][4];
#if FA_HAVE_WGMMA
        if (wg) {
            if constexpr (QREG) {
                if (!pipe || j == 0) {
                    fa_wg_fence();
#pragma unroll
                    for (int kk = 0; kk < KS; kk++)   /* kk = 0 overwrites s */
                        fa_wgmma<BFK, 0>(s, qa[kk], fa_desc(kt + kk * 2 * (FA_BN * 16), FA_BN * 16, 128), kk > 0);
                    fa_wg_commit();
                    fa_wg_wait0();
                    fa_reg_fence(s);
                } else {
#pragma unroll
                    for (int n = 0; n < 8; n++) s[n][0] = sn[n][0], s[n][1] = sn[n][1], s[n][2] = sn[n][2], s[n][3] = sn[n][3];
                }
                if (pipe && j + 1 < n_tiles) {
                    const uint32_t kn = k_addr(j + 1);
                    fa_wg_fence();
#pragma unroll
                    for (int kk = 0; kk < KS; kk++)
                        fa_wgmma<BFK, 0>(sn, qa[kk], fa_desc(kn + kk * 2 * (FA_BN * 16), FA_BN * 16, 128), kk > 0);
                    fa_wg_commit();
                }
            }
        } else
#endif
        {
#pragma unroll
            for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t a[4];
                if constexpr (QREG) {
                    a[0] = qa[kk][0]; a[1] = qa[kk][1]; a[2] = qa[kk][2]; a[3] = qa[kk][3];
                } else {
                    fa_ldsm4(qrow + kk * 2 * (FA_BM * 16), a[0], a[1], a[2], a[3]);
                }
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t b0, b1, b2, b3;
                    fa_ldsm4(kt + koff + np * 256 + kk * 2 * (FA_BN * 16), b0, b1, b2, b3);
                    fa_mma<BFK>(s[2 * np], a, b0, b1);
                    fa_mma<BFK>(s[2 * np + 1], a, b2, b3);
                }
            }
        }

        // -- mask (absent rows, causality) unless the whole tile is visible to every row
        uint64_t okm;   /* bit r: tile row r is present */
        if (flat) {
            const int nr = tl.pe - tl.p0;
            okm = nr >= 64 ? ~0ull : (1ull << nr) - 1;
        } else {
            const uint32_t *mw = (const uint32_t *)(sm + L::mask) + (j % NS) * 2;
            okm = (uint64_t)mw[0] | ((uint64_t)mw[1] << 32);
        }
        if (!(okm == ~0ull && tl.p0 + FA_BN - 1 <= qpos_min)) {
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int col = 8 * n + 2 * (lane & 3) + (i & 1);
                    if (!((okm >> col) & 1) || tl.p0 + col > qpos[i >> 1]) s[n][i] = -INFINITY;
                }
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 8; n++) {
            mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
        }
        float ml[2], fac[2];
        run.step(mx, ge.scale, ml, fac);

        // -- P = 2^(s c2 - m log2 e) rounded to V's operand type; l sums the rounded values
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) s[n][i] = fa_ex2(fmaf(s[n][i], ge.c2, -ml[i >> 1]));
        uint32_t pa[4][4];
        run.template take_p<BFV>(s, pa);
        /* o rescaled where the max moved or a chunk starts (warp-uniform test: at depth
         * the max rarely moves) */
        if (!__all_sync(0xffffffffu, fac[0] == 1.f && fac[1] == 1.f)) {
#pragma unroll
            for (int n = 0; n < NO; n++) {
                o[n][0] = __fmul_rn(o[n][0], fac[0]); o[n][1] = __fmul_rn(o[n][1], fac[0]);
                o[n][2] = __fmul_rn(o[n][2], fac[1]); o[n][3] = __fmul_rn(o[n][3], fac[1]);
            }
        }

        // -- O += P V: 16 x D per warp
#if FA_HAVE_WGMMA
        if (wg) {
            if constexpr (QREG) {
                /* V is the N-major B: K (kv rows) core matrices 128 bytes apart, N (dims) FA_BN * 16 */
                const uint32_t lbo = 128, sbo = FA_BN * 16;
                fa_wg_fence();
#pragma unroll
                for (int k = 0; k < 4; k++) fa_wgmma<BFV, 1>(o, pa[k], fa_desc(vt + k * 256, lbo, sbo), 1);
                fa_wg_commit();
                fa_wg_wait0();   /* and S of tile j + 1 */
                fa_reg_fence(o);
                if (pipe) fa_reg_fence(sn);
            }
        } else
#endif
        {
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b0, b1, b2, b3;
                    fa_ldsm4t(vt + voff + k * 256 + dp * 2 * (FA_BN * 16), b0, b1, b2, b3);
                    fa_mma<BFV>(o[2 * dp], pa[k], b0, b1);
                    fa_mma<BFV>(o[2 * dp + 1], pa[k], b2, b3);
                }
        }

        // -- the chunk is complete: l over the quad, o normalised (the stored form)
        if (tl.last) {
            float il[2];
            bool apply[2];
            run.chunk_end(lane, il, apply);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (!apply[e]) continue;
#pragma unroll
                for (int n = 0; n < NO; n++) {
                    o[n][2 * e] = __fmul_rn(o[n][2 * e], il[e]);
                    o[n][2 * e + 1] = __fmul_rn(o[n][2 * e + 1], il[e]);
                }
            }
        }
    }
    fa_cp_wait<0>();

    run.store(lane, o);   // -- the state of each row that some tile reached
}

#endif
