/*
 * cuda/attn_fa_tile.cuh: the K/V tiles of attn_mma.cu's flash attention
 * kernels (attn_fa_kernel.cuh, attn_fa_ws.cuh):
 * shared-memory layout, where each row lives, the copies, the dequantization.
 *
 * Tile layout ("core matrices", what both ldmatrix and wgmma descriptors
 * read): a tile of R rows x D dims of 16-bit elements stores element (r, c)
 * at byte (c / 8) * (R * 16) + r * 16 + (c % 8) * 2, so the 8 rows x 8 dims
 * of a core matrix are 128 contiguous bytes (an ldmatrix phase is free of
 * bank conflicts) and a dim group of all R rows is R * 16 bytes.
 *
 * A stage holds tile j's K and V as they lie in the cache: f16 / bf16 rows
 * straight into the layout above (16-byte cp.async pieces), q8_0 / q4_0 head
 * slices as raw bytes (rows hb bytes apart, pieces of 4 / 8 / 16 bytes).
 * Quantized tiles are then dequantized once into a shared f16 tile that all
 * 8 warps read (code * d, one f16 rounding, with the 0x6400 bias trick: no
 * integer-to-float conversions). Rows that no segment holds, or past the
 * tile's end, are zero-filled (so V never brings a NaN in) and masked.
 */
#ifndef LKV_CUDA_ATTN_FA_TILE_CUH
#define LKV_CUDA_ATTN_FA_TILE_CUH

#include "attn_fa_ptx.cuh"
#include "common.cuh"
#include "quant.cuh"

enum { FA_BM = 128, FA_BN = 64, FA_WARPS = 8, FA_THREADS = 32 * FA_WARPS };

template <int T> __host__ __device__ constexpr bool fa_quant() { return T == LKV_TYPE_Q8_0 || T == LKV_TYPE_Q4_0; }
/* bytes of one head's slice of a row */
template <int T, int D> __host__ __device__ constexpr int fa_hb() { return D / 32 * group_bytes<T>(); }

/* shared memory of one instance: NS stages of raw K + V, NF dequantized f16
 * buffers for each quantized operand, the Q tile, NS tile masks (2 words) */
template <int TK, int TV, int D> struct fa_smem {
    static constexpr int tile = FA_BN * D * 2;
    static constexpr bool QK = fa_quant<TK>(), QV = fa_quant<TV>(), ANYQ = QK || QV;
    static constexpr int rk = QK ? (FA_BN * fa_hb<TK, D>() + 15) & ~15 : tile;
    static constexpr int rv = QV ? (FA_BN * fa_hb<TV, D>() + 15) & ~15 : tile;
    static constexpr int stage = rk + rv;
    static constexpr int fbuf = (QK ? tile : 0) + (QV ? tile : 0);
    static constexpr int qb = FA_BM * D * 2;
    static constexpr int LIMIT = 227 * 1024;
    static constexpr int size(int ns, int nf) { return ns * stage + nf * fbuf + qb + ns * 24; }
    /* deepest pipeline that fits: quantized with two f16 buffers needs 3 stages */
    static constexpr int NF = !ANYQ ? 0 : size(3, 2) <= LIMIT ? 2 : 1;
    static constexpr int NS = size(4, NF) <= LIMIT && (D <= 128) ? 4 : size(3, NF) <= LIMIT ? 3 : 2;
    static constexpr int stages = 0;
    static constexpr int fbufs = NS * stage;
    static constexpr int q = fbufs + NF * fbuf;
    static constexpr int mask = q + qb;
    static constexpr int bytes = mask + NS * 8;
    static_assert(bytes <= LIMIT, "shared memory");
    static_assert(!ANYQ || NF == 1 || NS >= 3, "pipeline");
};

/* per-call values besides the desc */
struct fa_geom {
    int G;               /* heads per KV head */
    int P0, P1;          /* [chunk_lo, chunk_hi) * chunk */
    int tpc;             /* tiles of 64 per chunk (the 8-warp kernel) */
    float scale, c2;     /* scale; scale * log2(e) */
    size_t rbk, rbv;     /* KV row bytes (all KV heads) */
    int gk, gv;          /* cp.async piece bytes for quantized K / V */
    int wg;              /* the 8-warp kernel where compiled for sm_90a: 0 mma.sync, 1 wgmma, 2 wgmma with S
                          * one tile ahead */
};

/* a tile of a call: rows [p0, pe) of one chunk, from the chunk's start in steps of 64 (128),
 * clipped at its end and at the block's last visible position Pend; last: the chunk's
 * last tile (its partial is complete after it) */
struct fa_tile { int p0, pe; bool last; };

/* the same tiles walked in order without divisions: chunk cs (start), tile start p0;
 * BN positions per tile (attn_fa_ws.cuh: 128) */
template <int BN> struct fa_cursor_t {
    int cs, p0;
    __device__ __forceinline__ void start(const lkv_attn_desc &d) { cs = p0 = d.chunk_lo * d.chunk; }
    __device__ __forceinline__ fa_tile tile(const lkv_attn_desc &d, int Pend) const {
        const int ce = min(cs + d.chunk, Pend);
        fa_tile tl;
        tl.p0 = p0;
        tl.pe = min(p0 + BN, ce);
        tl.last = tl.pe >= ce;
        return tl;
    }
    __device__ __forceinline__ void next(const lkv_attn_desc &d, int Pend) {
        if (tile(d, Pend).last) cs = p0 = cs + d.chunk;
        else p0 += BN;
    }
};
using fa_cursor = fa_cursor_t<FA_BN>;

/* segment holding position p (-1: none); the first match, like the CPU's search (also
 * on the host: attn_mma.cu picks the segment the kernels will find) */
static __host__ __device__ __forceinline__ int fa_find(const lkv_attn_desc &d, int p) {
    for (int i = 0; i < d.n_segs; i++)
        if (p >= d.segs[i].pos0 && p - d.segs[i].pos0 < d.segs[i].n) return i;
    return -1;
}

/* where a tile's rows live: one segment for all of them (the common case:
 * seg >= 0), else a search per row */
struct fa_rows {
    int seg, p0, pe;
    __device__ __forceinline__ void init(const lkv_attn_desc &d, const fa_tile &tl) {
        p0 = tl.p0;
        pe = tl.pe;
        const int s = fa_find(d, p0);
        seg = s >= 0 && pe - d.segs[s].pos0 <= d.segs[s].n ? s : -1;
    }
    /* the row of position p0 + r in plane (k or v), NULL when absent */
    __device__ __forceinline__ const uint8_t *row(const lkv_attn_desc &d, int r, bool is_k, size_t rb,
                                                  size_t off) const {
        const int p = p0 + r;
        if (p >= pe) return nullptr;
        const int s = seg >= 0 ? seg : fa_find(d, p);
        if (s < 0) return nullptr;
        const uint8_t *base = (const uint8_t *)(is_k ? d.segs[s].k : d.segs[s].v);
        return base + (size_t)(p - d.segs[s].pos0) * rb + off;
    }
};

/* f16 / bf16 rows of a tile into the core-matrix layout: piece (row, dim
 * group) per thread, 16 rows of one group per half warp (a 32-byte sector
 * per row pair of lanes, the 8 bank groups evenly) */
template <int D, int NT>
static __device__ __forceinline__ void fa_copy_f16(const lkv_attn_desc &d, const fa_rows &rw, bool is_k, size_t rb,
                                                   size_t off, uint8_t *dst, int t) {
    constexpr int P = D / 8, TOTAL = FA_BN * P;
    const uint8_t *base = rw.seg >= 0 ? rw.row(d, 0, is_k, rb, off) : nullptr;   /* one segment: rows rb apart */
    const int nrow = rw.pe - rw.p0;
    for (int idx = t; idx < TOTAL; idx += NT) {
        const int rlo = idx & 15, rest = idx >> 4, pc = rest % P, r = (rest / P) * 16 + rlo;
        const uint8_t *src = base ? (r < nrow ? base + (size_t)r * rb : nullptr) : rw.row(d, r, is_k, rb, off);
        uint8_t *dp = dst + pc * (FA_BN * 16) + r * 16;
        if (src) fa_cp16((uint32_t)__cvta_generic_to_shared(dp), src + pc * 16);
        else *(uint4 *)dp = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* the same when one segment holds every row of the call: row p at base + p * rb */
template <int D, int NT>
static __device__ __forceinline__ void fa_copy_f16_flat(const uint8_t *base, size_t rb, const fa_tile &tl,
                                                        uint8_t *dst, int t) {
    constexpr int P = D / 8, TOTAL = FA_BN * P;
    const uint8_t *b0 = base + (size_t)tl.p0 * rb;
    const uint32_t rb32 = (uint32_t)rb;   /* 64 rows of a tile: 32-bit offsets (the entry point checks) */
    const int nrow = tl.pe - tl.p0;
#pragma unroll
    for (int idx0 = 0; idx0 < TOTAL; idx0 += NT) {
        const int idx = idx0 + t, rlo = idx & 15, rest = idx >> 4, pc = rest % P, r = (rest / P) * 16 + rlo;
        uint8_t *dp = dst + pc * (FA_BN * 16) + r * 16;
        const bool in = r < nrow;   /* rows past the tile's end: zeros (row 0 is a valid address) */
        fa_cp16z((uint32_t)__cvta_generic_to_shared(dp), b0 + (in ? (uint32_t)r * rb32 + pc * 16 : 0u), in);
    }
}

template <int HB, int NT>
static __device__ __forceinline__ void fa_copy_raw_flat(const uint8_t *base, size_t rb, const fa_tile &tl, int g,
                                                        uint8_t *dst, int t) {
    const uint8_t *b0 = base + (size_t)tl.p0 * rb;
    const uint32_t rb32 = (uint32_t)rb;
    const int nrow = tl.pe - tl.p0, np = HB / g, total = FA_BN * np;
    for (int idx = t; idx < total; idx += NT) {
        const int r = idx / np, pc = idx - r * np;
        uint8_t *dp = dst + r * HB + pc * g;
        if (r < nrow) {
            const uint8_t *src = b0 + ((uint32_t)r * rb32 + pc * g);
            if (g == 16) fa_cp16((uint32_t)__cvta_generic_to_shared(dp), src);
            else fa_cp_small((uint32_t)__cvta_generic_to_shared(dp), src, g);
        } else {
            for (int k = 0; k < g; k += 4) *(uint32_t *)(dp + k) = 0u;
        }
    }
}

/* raw head slices (hb bytes) of a tile, rows hb bytes apart, pieces of g bytes */
template <int NT>
static __device__ __forceinline__ void fa_copy_raw(const lkv_attn_desc &d, const fa_rows &rw, bool is_k, size_t rb,
                                                   size_t off, int hb, int g, uint8_t *dst, int t) {
    const int np = hb / g, total = FA_BN * np;
    const uint8_t *base = rw.seg >= 0 ? rw.row(d, 0, is_k, rb, off) : nullptr;
    const int nrow = rw.pe - rw.p0;
    for (int idx = t; idx < total; idx += NT) {
        const int r = idx / np, pc = idx - r * np;
        const uint8_t *src = base ? (r < nrow ? base + (size_t)r * rb : nullptr) : rw.row(d, r, is_k, rb, off);
        uint8_t *dp = dst + r * hb + pc * g;
        if (src) {
            if (g == 16) fa_cp16((uint32_t)__cvta_generic_to_shared(dp), src + pc * g);
            else fa_cp_small((uint32_t)__cvta_generic_to_shared(dp), src + pc * g, g);
        } else {
            for (int k = 0; k < g; k += 4) *(uint32_t *)(dp + k) = 0u;
        }
    }
}

/* 4 codes (bytes of w, biased: value = byte - bias) as two f16 pairs, exact */
static __device__ __forceinline__ void fa_bias4(uint32_t w, __half2 &lo, __half2 &hi, __half2 bias) {
    const uint32_t l = __byte_perm(w, 0x64646464u, 0x4140), h = __byte_perm(w, 0x64646464u, 0x4342);
    lo = __hsub2(*(const __half2 *)&l, bias);
    hi = __hsub2(*(const __half2 *)&h, bias);
}

/* raw q8_0 / q4_0 rows -> f16 tile (core-matrix layout): thread per (row,
 * dim group of 8); value = code * d rounded once to f16 */
template <int T, int D, int NT>
static __device__ __forceinline__ void fa_dequant(uint8_t *tile, const uint8_t *raw, int t) {
    constexpr int P = D / 8, HB = fa_hb<T, D>(), GB = group_bytes<T>();
    for (int idx = t; idx < FA_BN * P; idx += NT) {
        const int r = idx & (FA_BN - 1), c8 = idx / FA_BN, sub = c8 & 3;
        const uint8_t *blk = raw + r * HB + (c8 >> 2) * GB;   /* 2-byte aligned */
        const __half2 d2 = __half2half2(*(const __half *)blk);
        uint32_t w0, w1;
        __half2 bias;
        if constexpr (T == LKV_TYPE_Q8_0) {
            const uint16_t *q = (const uint16_t *)(blk + 2 + 8 * sub);
            w0 = ((uint32_t)q[0] | ((uint32_t)q[1] << 16)) ^ 0x80808080u;   /* byte = code + 128 */
            w1 = ((uint32_t)q[2] | ((uint32_t)q[3] << 16)) ^ 0x80808080u;
            bias = __half2half2(__ushort_as_half(0x6480));                  /* 1024 + 128 */
        } else {   /* element j < 16: low nibble of qs[j], 16 + j: the high one; value nibble - 8 */
            const uint16_t *q = (const uint16_t *)(blk + 2 + 8 * (sub & 1));
            const int sh = 4 * (sub >> 1);
            w0 = (((uint32_t)q[0] | ((uint32_t)q[1] << 16)) >> sh) & 0x0F0F0F0Fu;
            w1 = (((uint32_t)q[2] | ((uint32_t)q[3] << 16)) >> sh) & 0x0F0F0F0Fu;
            bias = __half2half2(__ushort_as_half(0x6408));                  /* 1024 + 8 */
        }
        __half2 a, b, c, e;
        fa_bias4(w0, a, b, bias);
        fa_bias4(w1, c, e, bias);
        a = __hmul2(a, d2); b = __hmul2(b, d2); c = __hmul2(c, d2); e = __hmul2(e, d2);
        *(uint4 *)(tile + c8 * (FA_BN * 16) + r * 16) =
            make_uint4(*(uint32_t *)&a, *(uint32_t *)&b, *(uint32_t *)&c, *(uint32_t *)&e);
    }
}

#endif
