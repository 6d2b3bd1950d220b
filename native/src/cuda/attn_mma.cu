/*
 * cuda/attn_mma.cu: prefill attention on f16 tensor cores (flash attention
 * with mma.sync m16n8k16, f32 accumulation), folded into attn.cu's state.
 *
 * Why: attn.cu's sequential kernel re-reads K/V once per query on CUDA cores;
 * at long depth a prefill batch spends its time there. Here one block reads a
 * K/V tile once for 64 (query, head) rows and multiplies on tensor cores.
 *
 * Work split. The rows of the M dimension are (query, head) pairs of one KV
 * head (GQA): flat index f = qi * G + g (G = n_head / n_head_kv) is query qi,
 * head kh * G + g. A block (4 warps) owns 64 such rows (warp w: rows 16w ..
 * 16w+15, one m16 tile) and walks the positions [P0, Pend) of the chunk range
 * chunk by chunk, each in tiles of up to 64 K/V rows that start at the
 * chunk's start and are clipped at its end (a chunk that is not a multiple of
 * 64 rows ends in a part-filled tile): S = Q K^T (16 x 64 per warp), online
 * softmax in registers, O += P V (16 x head_dim per warp). Pend stops at the
 * block's last query; the causal limit of each row is applied as a mask.
 *
 * Exactness across calls (DESIGN.md section 4: the split of a layer's chunk
 * range into calls, which depends on the KV pool, must not show in the
 * result). As the CPU does (cpu/attention.c), each chunk's partial
 * (m_c, l_c, O_c / l_c), computed over that chunk's rows only, is folded into
 * the state per (query, head) in increasing chunk order with the CPU's fold
 * (attn.cuh attn_fold_w / attn_fold_o: libm's expf, each operation rounded;
 * the first non-empty chunk taken as it stands, an empty one skipped). The
 * state of the block's rows lives in registers from the first chunk to the
 * last (read at the start, written once at the end), so one call over
 * [a, c) and the calls [a, b), [b, c) do the same operations on the same
 * values: bit-identical. A chunk's tiles, and so its partial, do not depend
 * on the call: they start at the chunk's start and stop at its end or at the
 * block's last query, never at the range's end.
 *
 * Data movement, per K/V tile (double-buffered, in flight during the previous
 * tile's products): each row is found in whichever segment holds it (one
 * search per lane pair) and copied with cp.async by its warp (16 lanes per
 * row slice), f16 straight into the padded f16 tile, q8_0 / q4_0 as raw blocks
 * into a staging area that is then dequantized to f16 (code * d, one f16
 * rounding). Rows held by no segment, or past the tile's end (its chunk's end
 * or the block's last query), are zero-filled and masked. Q is converted once into the f16 tile's second buffer and kept in
 * registers as mma A fragments.
 *
 * Rounding (why it agrees with the CPU to ~1e-3 and not better): the query
 * goes to K's dot type as the CPU's does (f16 for an f16 K; for q8_0 / q4_0 K
 * the CPU's q8_0 quantization, attn.cuh's attn_qconv rule, then code * d
 * rounded to f16), which keeps the largest difference away (q8 rounding of the
 * query moves scores by ~3e-3, f16 by ~1e-4); K and V dequantized values are
 * rounded to f16 (2^-12 relative); scores and sums are f32; the probabilities
 * exp2((s - m) * scale * log2 e) (ex2.approx, ~2 ulp) are rounded to f16 as
 * the P operand and l sums those rounded values, so O / l is normalised
 * consistently. Within a chunk the softmax runs across its tiles (a running
 * max); the CPU takes the chunk at once: the same value up to rounding.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 .f16, g = lane >> 2, t = lane & 3;
 * the byte-for-byte same as mmq.cu's m16n8k32 .s8, which the hardware test
 * covers):
 *   A 16x16 (row): reg0 (row g, k 2t..2t+1), reg1 (row g+8, same k),
 *                  reg2 (row g, k 8+2t..), reg3 (row g+8, k 8+2t..)
 *   B 16x8 (col):  reg0 (k 2t..2t+1, col g), reg1 (k 8+2t.., col g)
 *   C 16x8:        c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, same cols)
 *   each f16 pair with the lower index in the low half.
 *   ldmatrix.x4: lanes 8i..8i+7 address the 8 rows (16 bytes each) of matrix
 *   i; register i of lane l holds row l >> 2, elements 2(l & 3), +1 of matrix
 *   i (with .trans: of its transpose).
 * Hence: Q (row-major [row][dim]) -> A via ldmatrix from row l & 15, dim
 * 8 (l >> 4); K ([kv row][dim]) -> B of S = Q K^T via ldmatrix (non-trans)
 * from kv row (l & 7) + 8 (l >> 4), dim 8 ((l >> 3) & 1): two n-tiles per
 * call; V ([kv row][dim]) -> B of O = P V via ldmatrix.trans from kv row
 * (l & 7) + 8 ((l >> 3) & 1), dim 8 (l >> 4): two n-tiles per call; and the C
 * fragments of S, rounded to f16 pairs, are the A fragments of P directly
 * (n-tiles 2k and 2k+1 of S make k-step k of P).
 */
#include <limits.h>

#include "attn.cuh"   /* the CPU's fold: attn_fold_w / attn_fold_o */
#include "attn_mma.cuh"

enum { AM_BM = 64, AM_BN = 64, AM_WARPS = 4, AM_THREADS = 32 * AM_WARPS };
static_assert(AM_BM == 16 * AM_WARPS, "one m16 tile per warp");
static_assert(AM_BM == AM_BN, "Q is staged in a K tile buffer");

// ---------------------------------------------------------------- layout

/* bytes of one head's slice of a KV row of type T, head_dim D */
template <int T, int D> __host__ __device__ constexpr int am_head_bytes() { return D / 32 * group_bytes<T>(); }

/* shared memory, byte offsets (all multiples of 16):
 *   k, v: f16 tiles [2][AM_BN][ld] (rows padded by 16 bytes: the 8 rows of an
 *         ldmatrix phase fall in distinct bank groups)
 *   rawk, rawv: staged q8_0 / q4_0 blocks [AM_BN][rs] (absent for f16)
 *   mask: [2][AM_WARPS] bit r of word w = row 16w + r of the tile is present */
template <int TK, int TV, int D> struct am_smem {
    static constexpr int ld = D + 8;                                   /* halves per tile row */
    static constexpr int tile = AM_BN * ld * 2;
    static constexpr int rsk = TK == LKV_TYPE_F16 ? 0 : (am_head_bytes<TK, D>() + 15) & ~15;
    static constexpr int rsv = TV == LKV_TYPE_F16 ? 0 : (am_head_bytes<TV, D>() + 15) & ~15;
    static constexpr int k = 0;
    static constexpr int v = k + 2 * tile;
    static constexpr int rawk = v + 2 * tile;
    static constexpr int rawv = rawk + AM_BN * rsk;
    static constexpr int mask = rawv + AM_BN * rsv;
    static constexpr int bytes = mask + 2 * AM_WARPS * 4;
};

/* per-call values the kernel needs besides the desc */
struct am_geom {
    int G;               /* heads per KV head */
    int P0, P1;          /* the range's positions before causality: [chunk_lo, chunk_hi) * chunk */
    int tpc;             /* K/V tiles per chunk: ceil(chunk / AM_BN) */
    float c2;            /* scale * log2(e): scores to exp2 exponents */
    size_t rbk, rbv;     /* KV row bytes (all KV heads) */
    int gk, gv;          /* cp.async piece bytes for quantized K / V (4, 8 or 16) */
};

// ---------------------------------------------------------------- PTX wrappers

static __device__ __forceinline__ void am_cp(uint32_t dst, const void *src, int n) {
    /* n is uniform per call site; cg (L2 only) needs 16 bytes, ca takes 4 / 8 */
    if (n == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
    else if (n == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
static __device__ __forceinline__ void am_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
static __device__ __forceinline__ void am_cp_wait() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

static __device__ __forceinline__ void am_ldsm4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
static __device__ __forceinline__ void am_ldsm4t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                 uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
/* c (16x8 f32) += a (16x16 f16) * b (16x8 f16) */
static __device__ __forceinline__ void am_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 2^x, ~2 ulp; 2^-inf = 0 (what masked scores need) */
static __device__ __forceinline__ float am_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ uint32_t am_h2u(__half2 h) { return *(const uint32_t *)&h; }

// ---------------------------------------------------------------- K/V tiles

/* Copies the 16 rows of this warp's quarter of a tile (row i's head slice at
 * `myrow` of lane 2i; NULL: no such row) into dst (row stride `stride`):
 * f16 straight into the padded f16 tile, other types as raw bytes into the
 * staging rows, in pieces of g bytes. Consecutive lanes take consecutive
 * pieces of a row (whole sectors per request); the row address comes from
 * its owner lane by shuffle. Missing rows are zero-filled with plain stores. */
template <int T, int D>
static __device__ __forceinline__ void am_copy_rows(uint8_t *dst, int stride, const uint8_t *myrow, int g) {
    const int lane = threadIdx.x & 31;
    const int pb = T == LKV_TYPE_F16 ? 16 : g;          /* piece bytes */
    const int np = am_head_bytes<T, D>() / pb;           /* pieces per row */
    const int total = 16 * np;
    for (int i0 = 0; i0 < total; i0 += 32) {
        const int idx = i0 + lane, rr = min(idx / np, 15), pc = idx % np;
        const uint8_t *src =
            (const uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)(uintptr_t)myrow, 2 * rr);
        if (idx >= total) continue;
        uint8_t *dp = dst + rr * stride + pc * pb;
        if (src) {
            am_cp((uint32_t)__cvta_generic_to_shared(dp), src + pc * pb, pb);
        } else {
            for (int k = 0; k < pb; k += 4) *(uint32_t *)(dp + k) = 0u;
        }
    }
}

/* raw q8_0 / q4_0 rows of the staging area -> f16 tile: one thread per 8
 * elements; value = code * d as one f16 rounding of the exact product */
template <int T, int D>
static __device__ __forceinline__ void am_dequant(uint8_t *tile, const uint8_t *raw) {
    constexpr int P = D / 8, LD = D + 8, GB = group_bytes<T>();
    constexpr int RS = (am_head_bytes<T, D>() + 15) & ~15;
    for (int i = threadIdx.x; i < AM_BN * P; i += AM_THREADS) {
        const int r = i / P, e8 = i % P, sub = e8 & 3;
        const uint8_t *blk = raw + r * RS + (e8 >> 2) * GB;   /* blocks start at even offsets */
        const __half2 d2 = __half2half2(*(const __half *)blk);
        int c[8];
        if constexpr (T == LKV_TYPE_Q8_0) {
            const uint16_t *q16 = (const uint16_t *)(blk + 2 + 8 * sub);   /* qs[8 sub ..] */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                c[2 * j] = (int8_t)(q16[j] & 0xff);
                c[2 * j + 1] = (int8_t)(q16[j] >> 8);
            }
        } else {   /* q4_0: element j < 16 is the low nibble of qs[j], 16 + j the high one */
            const uint16_t *q16 = (const uint16_t *)(blk + 2 + 8 * (sub & 1));
            const int sh = 4 * (sub >> 1);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                c[2 * j] = (int)((q16[j] >> sh) & 0xF) - 8;
                c[2 * j + 1] = (int)((q16[j] >> (8 + sh)) & 0xF) - 8;
            }
        }
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = am_h2u(__hmul2(__floats2half2_rn((float)c[2 * j], (float)c[2 * j + 1]), d2));
        *(uint4 *)(tile + (r * LD + 8 * e8) * 2) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* segment holding position p (-1: none); the first match, like the CPU's search */
static __device__ __forceinline__ int am_find(const lkv_attn_desc &d, int p) {
    for (int i = 0; i < d.n_segs; i++)
        if (p >= d.segs[i].pos0 && p - d.segs[i].pos0 < d.segs[i].n) return i;
    return -1;
}

/* Tile j of a call: tile j % tpc of chunk chunk_lo + j / tpc, rows [p0, pe).
 * Tiles start at their chunk's start and are clipped at its end (and at the
 * block's last visible position Pend), so a tile never holds rows of two
 * chunks and a chunk's tiles are the same whatever range the call covers.
 * last: the chunk's last tile (its partial is complete after it). */
struct am_tile { int p0, pe; bool last; };

static __device__ __forceinline__ am_tile am_tile_of(const lkv_attn_desc &d, const am_geom &ge, int j, int Pend,
                                                     int n_tiles) {
    const int cj = j / ge.tpc, t = j - cj * ge.tpc, cs = (d.chunk_lo + cj) * d.chunk;
    am_tile r;
    r.p0 = cs + AM_BN * t;
    r.pe = min(min(r.p0 + AM_BN, cs + d.chunk), Pend);
    r.last = t == ge.tpc - 1 || j == n_tiles - 1;
    return r;
}

// ---------------------------------------------------------------- kernel

/* grid (M tiles of 64 (query, head) rows, n_head_kv); the heaviest tiles
 * (latest queries: most positions) are scheduled first */
template <int TK, int TV, int D>
__global__ void __launch_bounds__(AM_THREADS, 2)
attn_mma_kernel(float *st, const float *__restrict__ q, const __grid_constant__ lkv_attn_desc d,
                const am_geom ge) {
    using L = am_smem<TK, TV, D>;
    constexpr bool QK = TK != LKV_TYPE_F16, QV = TV != LKV_TYPE_F16;
    constexpr int LD = L::ld, KS = D / 16, NO = D / 8;
    extern __shared__ __align__(16) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mt = gridDim.x - 1 - blockIdx.x, kh = blockIdx.y, G = ge.G;
    const int n_rows = d.n_q * G, f0 = mt * AM_BM;

    /* positions this block reads: up to its last query */
    const int qi_last = min(d.n_q - 1, (f0 + AM_BM - 1) / G);
    const int Pend = min(ge.P1, d.q_pos0 + qi_last + 1);
    if (Pend <= ge.P0) return;   /* nothing visible: every state stays as it is */
    /* the whole chunks before the one holding Pend - 1, then that one's tiles up to Pend */
    const int c_last = (Pend - 1) / d.chunk;
    const int n_tiles = (c_last - d.chunk_lo) * ge.tpc + (Pend - c_last * d.chunk + AM_BN - 1) / AM_BN;

    /* the rows of this thread's C fragments: e = 0 (row g), 1 (row g + 8) */
    int qpos[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int f = f0 + 16 * warp + (lane >> 2) + 8 * e;
        qpos[e] = f < n_rows ? d.q_pos0 + f / G : INT_MIN;   /* padding rows see nothing */
    }

    // -- issue the copies of tile j into buffer j & 1: the lane pair 2i, 2i+1 of
    //    warp w locates row 16w + i; the warp then copies its 16 rows
    auto issue = [&](int j) {
        const am_tile tl = am_tile_of(d, ge, j, Pend, n_tiles);
        const int buf = j & 1, r = tid >> 1, p = tl.p0 + r;
        const uint8_t *kr = NULL, *vr = NULL;
        if (p < tl.pe) {   /* rows past the chunk's end (or Pend) stay zero and masked */
            const int s = am_find(d, p);
            if (s >= 0) {
                const size_t row = (size_t)(p - d.segs[s].pos0);
                kr = (const uint8_t *)d.segs[s].k + row * ge.rbk + (size_t)kh * am_head_bytes<TK, D>();
                vr = (const uint8_t *)d.segs[s].v + row * ge.rbv + (size_t)kh * am_head_bytes<TV, D>();
            }
        }
        /* row r of the tile is present: bit r % 16 of word r / 16 (lanes 2i, 2i+1 hold row i of the warp) */
        const uint32_t bal = __ballot_sync(0xffffffffu, kr != NULL);
        if (lane == 0) {
            uint32_t m16 = 0;
#pragma unroll
            for (int i = 0; i < 16; i++) m16 |= ((bal >> (2 * i)) & 1u) << i;
            ((uint32_t *)(sm + L::mask))[buf * AM_WARPS + warp] = m16;
        }
        const int r16 = 16 * warp;   /* this warp's rows of the tile */
        if constexpr (QK) am_copy_rows<TK, D>(sm + L::rawk + r16 * L::rsk, L::rsk, kr, ge.gk);
        else am_copy_rows<TK, D>(sm + L::k + buf * L::tile + r16 * LD * 2, LD * 2, kr, 16);
        if constexpr (QV) am_copy_rows<TV, D>(sm + L::rawv + r16 * L::rsv, L::rsv, vr, ge.gv);
        else am_copy_rows<TV, D>(sm + L::v + buf * L::tile + r16 * LD * 2, LD * 2, vr, 16);
        am_cp_commit();
    };
    /* staged raw rows of tile j -> f16 buffers j & 1 (quantized types only) */
    auto dequant = [&](int j) {
        if constexpr (QK) am_dequant<TK, D>(sm + L::k + (j & 1) * L::tile, sm + L::rawk);
        if constexpr (QV) am_dequant<TV, D>(sm + L::v + (j & 1) * L::tile, sm + L::rawv);
    };

    issue(0);

    // -- Q: 64 rows into K buffer 1 as f16 in K's dot type, one warp per 32-group
    {
        __half *qs = (__half *)(sm + L::k + L::tile);
        for (int it = warp; it < AM_BM * (D / 32); it += AM_WARPS) {
            const int r = it / (D / 32), g32 = it % (D / 32), f = f0 + r;
            float x = 0.f;
            if (f < n_rows) {
                const int qi = f / G, h = kh * G + f % G;
                x = q[((size_t)qi * d.n_head + h) * D + 32 * g32 + lane];
            }
            __half hv;
            if constexpr (QK) {
                /* the CPU's q8_0 (attn.cuh attn_qconv): d = amax / 127 rounded to f16,
                 * codes rint(x * 127 / amax); the f16 operand is code * d */
                const float amax = lkv_warp_max(fabsf(x));
                const float id = amax != 0.f ? __fdiv_rn(127.f, amax) : 0.f;
                const float qd = __half2float(__float2half_rn(__fdiv_rn(amax, 127.f)));
                hv = __float2half_rn(__fmul_rn(rintf(__fmul_rn(x, id)), qd));
            } else {
                hv = __float2half_rn(x);
            }
            qs[r * LD + 32 * g32 + lane] = hv;
        }
    }
    __syncthreads();
    uint32_t qa[KS][4];
    {
        const uint32_t qb = sb + L::k + L::tile + ((16 * warp + (lane & 15)) * LD + 8 * (lane >> 4)) * 2;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) am_ldsm4(qb + kk * 32, qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
    }
    am_cp_wait();
    __syncthreads();   /* tile 0 landed; every warp holds its Q fragments (buffer 1 is free) */
    if constexpr (QK || QV) {
        dequant(0);
        __syncthreads();
    }

    /* the state of the thread's two rows (attn.cu's layout: m, l, o normalised),
     * its columns of o only: read here, folded chunk by chunk in registers,
     * written once at the end. Rows past n_rows see nothing (never folded). */
    float *sp[2], ms[2], ls[2], os[NO][4];
    bool changed[2] = {false, false};   /* some chunk was folded into the row */
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int f = f0 + 16 * warp + (lane >> 2) + 8 * e;
        sp[e] = f < n_rows ? st + ((size_t)(f / G) * d.n_head + kh * G + f % G) * (D + 2) : NULL;
        ms[e] = sp[e] ? sp[e][0] : -INFINITY;
        ls[e] = sp[e] ? sp[e][1] : 0.f;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            const float2 v = sp[e] ? *(const float2 *)(sp[e] + 2 + 8 * n + 2 * (lane & 3)) : make_float2(0.f, 0.f);
            os[n][2 * e] = v.x;
            os[n][2 * e + 1] = v.y;
        }
    }

    /* the current chunk's partial of the two rows: max of the raw scores q.k,
     * the partial l of this thread's columns (summed over the quad at the
     * chunk's end), O unnormalised */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

    /* lane offsets of the ldmatrix addresses (see the layouts above) */
    const int krow = (lane & 7) + 8 * (lane >> 4), kcol = 8 * ((lane >> 3) & 1);
    const int vrow = (lane & 7) + 8 * ((lane >> 3) & 1), vcol = 8 * (lane >> 4);

    for (int j = 0; j < n_tiles; j++) {
        const am_tile tl = am_tile_of(d, ge, j, Pend, n_tiles);
        const int buf = j & 1, tp0 = tl.p0;
        if (j + 1 < n_tiles) issue(j + 1);

        // -- S = Q K^T: 16 x 64 per warp
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
        const uint32_t kb = sb + L::k + buf * L::tile + (krow * LD + kcol) * 2;
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t b0, b1, b2, b3;
                am_ldsm4(kb + (16 * np * LD + 16 * kk) * 2, b0, b1, b2, b3);
                am_mma(s[2 * np], qa[kk], b0, b1);
                am_mma(s[2 * np + 1], qa[kk], b2, b3);
            }

        // -- mask (absent rows, causality), new row maxima over the quad
        const uint32_t *mw = (const uint32_t *)(sm + L::mask) + buf * AM_WARPS;
        const uint64_t okm = (uint64_t)(mw[0] | (mw[1] << 16)) | ((uint64_t)(mw[2] | (mw[3] << 16)) << 32);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int col = 8 * n + 2 * (lane & 3) + (i & 1);
                if (!((okm >> col) & 1) || tp0 + col > qpos[i >> 1]) s[n][i] = -INFINITY;
                mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
            }
        float alpha[2], msub[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
            const float mn = fmaxf(m[e], mx[e]);
            /* all masked so far: subtract 0 (exp2(-inf) = 0 keeps everything 0, no NaN) */
            msub[e] = mn == -INFINITY ? 0.f : __fmul_rn(mn, ge.c2);
            alpha[e] = am_ex2(fmaf(m[e], ge.c2, -msub[e]));
            m[e] = mn;
        }

        // -- P = exp2(s c2 - m c2) rounded to f16: the C fragments of S become
        //    the A fragments of P (k-step k = n-tiles 2k, 2k+1); l sums the rounded values
        uint32_t pa[4][4];
        float rs[2] = {0.f, 0.f};
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const __half2 h01 = __floats2half2_rn(am_ex2(fmaf(s[n][0], ge.c2, -msub[0])),
                                                  am_ex2(fmaf(s[n][1], ge.c2, -msub[0])));
            const __half2 h23 = __floats2half2_rn(am_ex2(fmaf(s[n][2], ge.c2, -msub[1])),
                                                  am_ex2(fmaf(s[n][3], ge.c2, -msub[1])));
            const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
            rs[0] += f01.x + f01.y;
            rs[1] += f23.x + f23.y;
            pa[n >> 1][2 * (n & 1)] = am_h2u(h01);
            pa[n >> 1][2 * (n & 1) + 1] = am_h2u(h23);
        }
#pragma unroll
        for (int e = 0; e < 2; e++) l[e] = l[e] * alpha[e] + rs[e];
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
            o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
        }

        // -- O += P V: 16 x D per warp
        const uint32_t vb = sb + L::v + buf * L::tile + (vrow * LD + vcol) * 2;
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b0, b1, b2, b3;
                am_ldsm4t(vb + (16 * k * LD + 16 * dp) * 2, b0, b1, b2, b3);
                am_mma(o[2 * dp], pa[k], b0, b1);
                am_mma(o[2 * dp + 1], pa[k], b2, b3);
            }

        // -- the chunk is complete: its partial (m_c, l_c, O / l_c) of each row
        //    is folded into the state by the CPU's rule (attn.cuh: M = max,
        //    W = l e^(m - M) with libm's expf, o = (o W_a + o_c W_b) / (W_a + W_b);
        //    the first non-empty chunk as it stands, an empty one skipped), then
        //    the partial restarts. Chunk after chunk, in order, exactly as a
        //    call per chunk would: the split of the range into calls is invisible
        if (tl.last) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                /* the quad's sum; every lane of the quad gets the same bits */
                float lc = __fadd_rn(l[e], __shfl_xor_sync(0xffffffffu, l[e], 1));
                lc = __fadd_rn(lc, __shfl_xor_sync(0xffffffffu, lc, 2));
                const float mc = __fmul_rn(m[e], d.scale);   /* scale > 0: -inf (empty) stays -inf */
                const attn_fw fw = attn_fold_w(ms[e], ls[e], mc, lc);
                const float ic = __frcp_rn(lc);   /* unused when the chunk is empty */
                changed[e] = changed[e] || fw.kind != 0;
#pragma unroll
                for (int n = 0; n < NO; n++) {
                    os[n][2 * e] = attn_fold_o(os[n][2 * e], __fmul_rn(o[n][2 * e], ic), fw);
                    os[n][2 * e + 1] = attn_fold_o(os[n][2 * e + 1], __fmul_rn(o[n][2 * e + 1], ic), fw);
                    o[n][2 * e] = o[n][2 * e + 1] = 0.f;
                }
                m[e] = -INFINITY;
                l[e] = 0.f;
            }
        }

        // -- tile j + 1: landed, then (quantized) dequantized into buffers (j + 1) & 1
        am_cp_wait();
        __syncthreads();   /* also: every warp is done reading buffers j & 1 */
        if constexpr (QK || QV) {
            if (j + 1 < n_tiles) {
                dequant(j + 1);
                __syncthreads();
            }
        }
    }

    // -- the state of each row that some chunk changed; the loop's barriers
    //    order these stores after every lane's reads at the start
#pragma unroll
    for (int e = 0; e < 2; e++) {
        if (!sp[e] || !changed[e]) continue;
#pragma unroll
        for (int n = 0; n < NO; n++)
            *(float2 *)(sp[e] + 2 + 8 * n + 2 * (lane & 3)) = make_float2(os[n][2 * e], os[n][2 * e + 1]);
        if ((lane & 3) == 0) { sp[e][0] = ms[e]; sp[e][1] = ls[e]; }
    }
}

// ---------------------------------------------------------------- launcher

template <int TK, int TV, int D>
static bool am_launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const am_geom &ge) {
    using L = am_smem<TK, TV, D>;
    /* above 48 KiB the kernel must opt in, once per instantiation */
    static int smem_ok = -1;
    if (smem_ok < 0)
        smem_ok = cudaFuncSetAttribute(attn_mma_kernel<TK, TV, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       L::bytes) == cudaSuccess;
    if (!smem_ok) { cudaGetLastError(); return false; }
    const int n_mt = (int)lkv_cdiv((int64_t)d->n_q * ge.G, AM_BM);
    attn_mma_kernel<TK, TV, D><<<dim3(n_mt, d->n_head_kv), AM_THREADS, L::bytes, b->stream>>>(st, q, *d, ge);
    LKV_CUDA_LAUNCHED(b, "attn_mma");
    return true;
}

/* the kernel's instances: K type x V type x head_dim */
#define AM_TYPES(X) X(LKV_TYPE_F16) X(LKV_TYPE_Q8_0) X(LKV_TYPE_Q4_0)

template <int TK, int D>
static bool am_pick_v(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const am_geom &ge) {
    switch (d->type_v) {
#define X(T) case T: return am_launch<TK, T, D>(b, st, q, d, ge);
        AM_TYPES(X)
#undef X
    default: return false;
    }
}

template <int D>
static bool am_pick(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const am_geom &ge) {
    switch (d->type_k) {
#define X(T) case T: return am_pick_v<T, D>(b, st, q, d, ge);
        AM_TYPES(X)
#undef X
    default: return false;
    }
}

/* bytes of 32 elements of a type this file reads; 0 for the others */
static int am_group_bytes(int type) {
    switch (type) {
#define X(T) case T: return group_bytes<T>();
        AM_TYPES(X)
#undef X
    default: return 0;
    }
}

/* the largest cp.async piece (16, 8, 4) that divides the head slice, the row
 * and every segment's base address; 0 if not even 4 does */
static int am_piece(int head_bytes, size_t row_bytes, const lkv_attn_desc *d, bool is_k) {
    for (int g = 16; g >= 4; g >>= 1) {
        bool ok = head_bytes % g == 0 && row_bytes % g == 0;
        for (int i = 0; i < d->n_segs && ok; i++)
            ok = (uintptr_t)(is_k ? d->segs[i].k : d->segs[i].v) % g == 0;
        if (ok) return g;
    }
    return 0;
}

// ---------------------------------------------------------------- entry point

extern "C" bool lkv_cuda_attn_mma(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d) {
    const int hd = d->head_dim;
    if (b->dyn_pos) return false;   /* captured steps are decode-sized: not this kernel's */
    if (d->n_q < 16 || (hd != 64 && hd != 128)) return false;
    if (d->n_head_kv <= 0 || d->n_head <= 0 || d->n_head % d->n_head_kv) return false;
    if (d->chunk <= 0 || d->n_segs < 0 || d->n_segs > LKV_MAX_SEGS) return false;
    if (!(d->scale > 0.f)) return false;   /* the running max of q.k is the max score only for scale > 0 */
    const int gbk = am_group_bytes(d->type_k), gbv = am_group_bytes(d->type_v);
    if (!gbk || !gbv) return false;
    /* positions must stay in int: the range's end, and the last query */
    const int64_t P1 = (int64_t)d->chunk_hi * d->chunk;
    if (P1 > INT32_MAX - AM_BN || (int64_t)d->q_pos0 + d->n_q > INT32_MAX || d->chunk_lo < 0) return false;
    if ((int64_t)d->n_q * d->n_head > INT32_MAX / 2) return false;
    if (d->chunk_hi <= d->chunk_lo) return true;   /* nothing to fold: the state is unchanged */

    am_geom ge;
    ge.G = d->n_head / d->n_head_kv;
    ge.P0 = d->chunk_lo * d->chunk;
    ge.P1 = (int)P1;
    ge.tpc = (d->chunk + AM_BN - 1) / AM_BN;
    ge.c2 = d->scale * 1.4426950408889634f;
    ge.rbk = (size_t)d->n_head_kv * (hd / 32) * gbk;
    ge.rbv = (size_t)d->n_head_kv * (hd / 32) * gbv;
    ge.gk = am_piece(hd / 32 * gbk, ge.rbk, d, true);
    ge.gv = am_piece(hd / 32 * gbv, ge.rbv, d, false);
    /* f16 rows go in 16-byte pieces straight into the tile; the others need 4 */
    if (ge.gk < (d->type_k == LKV_TYPE_F16 ? 16 : 4) || ge.gv < (d->type_v == LKV_TYPE_F16 ? 16 : 4))
        return false;
    return hd == 64 ? am_pick<64>(b, (float *)st, q, d, ge) : am_pick<128>(b, (float *)st, q, d, ge);
}
