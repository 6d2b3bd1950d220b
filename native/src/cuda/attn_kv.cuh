/*
 * cuda/attn_kv.cuh: K and V elements as the CPU backend's attention uses them
 * (cpu/attention.c over quant/dot_legacy.c's AVX2 kernels, quant/float_types.c
 * and quant/legacy.c's to_float), for attn.cu and the decode kernels.
 *
 * Quantized K is dotted with the query in K's dot type (q8_0, or q8_1 for the
 * types with a minimum) as the AVX2 kernel does: per 32-block, 8 int32 lanes,
 * lane l the exact integer dot of elements 4l..4l+3 (dp4a computes exactly
 * that), each lane's f32 chain lane = fma(d_k * d_q, (float)dot, lane) over
 * the blocks in order; then reduce8 of the lanes (+ the chain of m_k * s_q
 * for q4_1 / q5_1). attn_kwords gives a block's codes as those 8 words of 4
 * signed bytes. V is converted element by element as to_float does: code * d
 * (+ m), each operation rounded on its own.
 */
#ifndef LKV_CUDA_ATTN_KV_CUH
#define LKV_CUDA_ATTN_KV_CUH

#include "attn.cuh"
#include "pdl.cuh"

/* K types read as q8 codes: q8_0 dot (1) or q8_1 dot with a minimum (2) */
template <int T> __host__ __device__ constexpr int attn_kq8() {
    return T == LKV_TYPE_Q8_0 || T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q5_0 || T == LKV_TYPE_IQ4_NL ? 1
           : T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1                                            ? 2
                                                                                                 : 0;
}

/* byte offset of the codes in a block */
template <int T> __host__ __device__ constexpr int attn_qs_off() {
    return T == LKV_TYPE_Q4_1 ? 4 : T == LKV_TYPE_Q5_0 ? 6 : T == LKV_TYPE_Q5_1 ? 8 : 2;
}

/* one 32-block of a quantized K row: w[l] = the signed codes of elements
 * 4l..4l+3 (byte i = element 4l + i; codes of q4_1 / q5_1 are 0..31, which
 * read the same signed), dk the scale, mk the minimum (0 if none). f(b): the
 * 4 bytes at even byte offset b of the block (little-endian), so the caller
 * chooses the loads (2-byte global, 8-byte staged shared). */
template <int T, class F>
static __device__ __forceinline__ void attn_kwords(F f, uint32_t *w, float &dk, float &mk) {
    const uint32_t h0 = f(0);
    dk = __half2float(__ushort_as_half((unsigned short)(h0 & 0xFFFF)));
    mk = attn_kq8<T>() == 2 ? __half2float(__ushort_as_half((unsigned short)(h0 >> 16))) : 0.f;
    if constexpr (T == LKV_TYPE_Q8_0) {
#pragma unroll
        for (int l = 0; l < 8; l++) w[l] = f(2 + 4 * l);
    } else {
        uint32_t qh = 0;
        if constexpr (T == LKV_TYPE_Q5_0) qh = f(2);
        if constexpr (T == LKV_TYPE_Q5_1) qh = f(4);
#pragma unroll
        for (int l = 0; l < 4; l++) {   /* elements 0..15: low nibbles, 16..31: high */
            const uint32_t u = f(attn_qs_off<T>() + 4 * l);
            w[l] = u & 0x0F0F0F0Fu;
            w[l + 4] = (u >> 4) & 0x0F0F0F0Fu;
        }
#pragma unroll
        for (int l = 0; l < 8; l++) {
            uint32_t x = w[l];
            if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1)   /* fifth bits 4l..4l+3 to bit 4 of each byte */
                x |= ((((qh >> (4 * l)) & 0xFu) * 0x00204081u) & 0x01010101u) << 4;
            if constexpr (T == LKV_TYPE_Q4_0) {        /* n - 8: the 4-bit two's complement of n ^ 8, sign-extended */
                x ^= 0x08080808u;
                x |= (x & 0x08080808u) * 0x1Eu;
            } else if constexpr (T == LKV_TYPE_Q5_0) { /* n - 16, likewise on 5 bits */
                x ^= 0x10101010u;
                x |= (x & 0x10101010u) * 0x0Fu;
            } else if constexpr (T == LKV_TYPE_IQ4_NL) {
                uint32_t y = 0;
#pragma unroll
                for (int b = 0; b < 4; b++) y |= (uint32_t)(uint8_t)lkv_iq4nl_levels[(x >> (8 * b)) & 15] << (8 * b);
                x = y;
            }
            w[l] = x;
        }
    }
}

/* f(b) for a block at a 2-byte aligned address (any memory) */
struct attn_fetch2 {
    const uint16_t *h;
    __device__ uint32_t operator()(int b) const { return h[b >> 1] | (uint32_t)h[(b >> 1) + 1] << 16; }
};

/* lane l += (d_k d_q) * (K codes 4l..4l+3 . query codes 4l..4l+3) */
static __device__ __forceinline__ void attn_q8_block(float *lanes, const uint32_t *kw, const uint32_t *qw,
                                                     float dkq) {
#pragma unroll
    for (int l = 0; l < 8; l++) lanes[l] = fmaf(dkq, (float)__dp4a((int)kw[l], (int)qw[l], 0), lanes[l]);
}

/* elements e, e + 1 (e even) of a V head slice of type T, as to_float */
template <int T>
static __device__ __forceinline__ void attn_vpair(const uint8_t *row, int e, float &a, float &b) {
    if constexpr (T == LKV_TYPE_F32) {
        const float2 v = *(const float2 *)(row + 4 * (size_t)e);
        a = v.x; b = v.y;
    } else if constexpr (T == LKV_TYPE_F16) {
        const float2 v = __half22float2(*(const __half2 *)(row + 2 * (size_t)e));
        a = v.x; b = v.y;
    } else if constexpr (T == LKV_TYPE_BF16) {
        const uint32_t u = *(const uint32_t *)(row + 2 * (size_t)e);
        a = __uint_as_float(u << 16); b = __uint_as_float(u & 0xffff0000u);
    } else {
        const uint8_t *blk = row + (size_t)(e >> 5) * cblk<T>::bytes;
        const uint16_t *h = (const uint16_t *)blk;
        const int i = e & 31;
        const float d = __half2float(__ushort_as_half(h[0]));
        int ca, cb;
        if constexpr (T == LKV_TYPE_Q8_0) {
            const uint32_t q = h[1 + (i >> 1)];
            ca = (int8_t)(q & 0xFF); cb = (int8_t)(q >> 8);
        } else {
            const uint32_t q = *(const uint16_t *)(blk + attn_qs_off<T>() + (i & 15));
            const int sh = i >= 16 ? 4 : 0;
            ca = (q >> sh) & 15; cb = (q >> (8 + sh)) & 15;
            if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
                const int o = T == LKV_TYPE_Q5_0 ? 1 : 2;   /* qh at byte 2 or 4 */
                const uint32_t qh = h[o] | (uint32_t)h[o + 1] << 16;
                ca |= ((qh >> i) & 1) << 4; cb |= ((qh >> (i + 1)) & 1) << 4;
            }
            if constexpr (T == LKV_TYPE_Q4_0) { ca -= 8; cb -= 8; }
            if constexpr (T == LKV_TYPE_Q5_0) { ca -= 16; cb -= 16; }
            if constexpr (T == LKV_TYPE_IQ4_NL) { ca = lkv_iq4nl_levels[ca]; cb = lkv_iq4nl_levels[cb]; }
        }
        a = __fmul_rn((float)ca, d);
        b = __fmul_rn((float)cb, d);
        if constexpr (T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1) {
            const float m = __half2float(__ushort_as_half(h[1]));
            a = __fadd_rn(a, m); b = __fadd_rn(b, m);
        }
    }
}

// ---------------------------------------------------------------- staged K/V (attn_dec_ring.cu, attn_dec_ring2.cu)

/* cp.async of N bytes (16: .cg, bypassing L1; 4 / 8: .ca) and its groups */
template <int N>
static __device__ __forceinline__ void cp_async(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (N == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(N));
}
static __device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* 4 bytes at a 2-byte aligned shared address. The aligned word is reached by
 * pointer arithmetic on p, not through an integer: a pointer rebuilt from an
 * integer loses its shared address space, and the loads become generic ones
 * (LD instead of LDS, with 64-bit address arithmetic) */
static __device__ __forceinline__ uint32_t lds4_2(const uint8_t *p) {
    const int mis = (int)((uintptr_t)p & 3);
    const uint32_t *w = (const uint32_t *)(p - mis);
    return mis ? __funnelshift_r(w[0], w[1], 16) : w[0];
}

/* f(b) of attn_kwords for a staged block: its bytes from 8-byte aligned
 * words w (loaded once), the block starting o (even) bytes into w */
struct ad_fetch {
    const uint32_t *w;
    int o;
    __device__ uint32_t operator()(int b) const {
        const int x = o + b;
        return (x & 2) ? __funnelshift_r(w[x >> 2], w[(x >> 2) + 1], 16) : w[x >> 2];
    }
};

/* the 4-byte words kblock reads per block, from the 8-byte word holding its
 * first byte */
template <int T> __host__ __device__ constexpr int kblock_nw() { return T == LKV_TYPE_Q8_0 ? 10 : 6; }

/* whether kblock may read a K head slice of nb blocks in place (global
 * memory): 8-byte aligned, and the last block's words inside the slice */
template <int T> static __device__ __forceinline__ bool kblock_fits(const uint8_t *row, int nb) {
    constexpr int GB = cblk<T>::bytes;
    return ((uintptr_t)row & 7) == 0 && ((GB * (nb - 1)) & ~7) + 4 * kblock_nw<T>() <= GB * nb;
}

/* 32-block j of a staged K slice (8-byte aligned): q8 code words and scale */
template <int T>
static __device__ __forceinline__ float kblock(const uint8_t *row, int j, uint32_t *kw) {
    constexpr int GB = cblk<T>::bytes, NW = kblock_nw<T>();
    const int base = GB * j, a0 = base & ~7;
    uint32_t w[NW];
    const uint2 *p = (const uint2 *)(row + a0);
#pragma unroll
    for (int i = 0; i < NW / 2; i++) { const uint2 v = p[i]; w[2 * i] = v.x; w[2 * i + 1] = v.y; }
    float dk, mk;
    attn_kwords<T>(ad_fetch{w, base - a0}, kw, dk, mk);
    return dk;
}

/* The end of a decode block: its chunk partial of G heads into the
 * workspace. o[g][i] holds lane l8 (= lane & 7: positions l8, l8 + 8, ...)
 * of dims dg * ND + i; the CPU's reduce8 across the 8 lanes, then m and l. */
template <int G, int ND>
static __device__ __forceinline__ void attn_store_partial(const float (&o)[G][ND], float *wbase,
                                                          size_t wstride, int dg, int l8, int tid,
                                                          const float *pm, const float *pl) {
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < ND; i++) {
            const float y = attn_reduce8_shfl(o[g][i]);
            if (l8 == 0) wbase[g * wstride + 2 + dg * ND + i] = y;
        }
    if (tid < G) { wbase[tid * wstride] = pm[tid]; wbase[tid * wstride + 1] = pl[tid]; }
}

/* Several sequences' decode rows in one launch (choose_attn.cu attn_rows):
 * row r is a query at position pos[r] over positions [0, pos[r]] of its own
 * all-resident planes k[r], v[r]; grid (n_head_kv, chunks, rows). Each block
 * builds the one-query desc of its row in shared memory and runs the decode
 * kernel's body on it, so a row's partials are those of a call for that
 * query alone (the same operations on the same bytes): chunks past a row's
 * query get empty partials, which the fold skips, and one fold of all rows
 * over the longest row's chunks gives each row its own call's bits. */
struct attn_rows_arg {
    int32_t n;
    int32_t pos[LKV_ROWS_MAX];
    const void *k[LKV_ROWS_MAX], *v[LKV_ROWS_MAX];
};

/* the block's row desc into sd (thread 0; params only, so before the PDL
 * wait), then q and ws moved to the row (nc: chunks per row in ws) */
static __device__ __forceinline__ void attn_row_desc(lkv_attn_desc &sd, const lkv_attn_desc &d0,
                                                     const attn_rows_arg &ra, const float *&q, float *&ws,
                                                     int nc) {
    const int r = blockIdx.z, pos = ra.pos[r];
    if (threadIdx.x == 0) {
        sd.n_q = 1;
        sd.q_pos0 = pos;
        sd.n_head = d0.n_head;
        sd.n_head_kv = d0.n_head_kv;
        sd.head_dim = d0.head_dim;
        sd.type_k = d0.type_k;
        sd.type_v = d0.type_v;
        sd.chunk = d0.chunk;
        sd.chunk_lo = 0;
        sd.chunk_hi = pos / d0.chunk + 1;
        sd.scale = d0.scale;
        sd.n_segs = 1;
        sd.segs[0].pos0 = 0;
        sd.segs[0].n = pos + 1;
        sd.segs[0].k = ra.k[r];
        sd.segs[0].v = ra.v[r];
    }
    __syncthreads();
    q += (size_t)r * d0.n_head * d0.head_dim;
    ws += (size_t)r * d0.n_head * nc * (d0.head_dim + 2);
}

/* host: the rows' longest chunk count, or 0 when the rows do not fit the
 * launch (count, alignment to the K and V copy units cuk / cuv, workspace of
 * ws_bytes) */
static inline int attn_rows_chunks(const lkv_attn_desc *geo, const attn_rows_arg &ra, size_t cuk, size_t cuv,
                                   size_t rbk, size_t rbv, size_t ws_bytes) {
    if (ra.n < 1 || ra.n > LKV_ROWS_MAX || rbk % cuk || rbv % cuv) return 0;
    int nc = 0;
    for (int r = 0; r < ra.n; r++) {
        if (ra.pos[r] < 0 || (uintptr_t)ra.k[r] % cuk || (uintptr_t)ra.v[r] % cuv) return 0;
        const int c = ra.pos[r] / geo->chunk + 1;
        nc = c > nc ? c : nc;
    }
    const size_t need = (size_t)ra.n * geo->n_head * nc * (geo->head_dim + 2) * sizeof(float);
    return need <= ws_bytes && nc <= 65535 ? nc : 0;
}

/* attn_fold.cu: folds the nc partials of the workspace (layout of attn.cu's
 * split kernel) into the state in chunk order, attn_fold_w / attn_fold_o's
 * operations */
void attn_dec_fold(lkv_bctx *b, float *st, int n_head, int hd, int n_q, int nc);

/* host: a decode kernel's rows launch (its rows instance `kernel`: nt
 * threads, smem bytes of its own beside the row desc, smem_max in all, copy
 * units cuk / cuv of K and V) and the fold of every row into st; false
 * (nothing enqueued) where the rows do not fit. attr: whether the kernel's
 * shared-memory limit is set */
template <class... P>
static bool attn_rows_launch(lkv_bctx *b, void (*kernel)(P...), bool &attr, int nt, size_t smem, int smem_max,
                             size_t cuk, size_t cuv, float *st, const float *q, const lkv_attn_desc *d,
                             const attn_rows_arg &ra, size_t rbk, size_t rbv, const char *where) {
    const int nc = attn_rows_chunks(d, ra, cuk, cuv, rbk, rbv, b->attn_ws_bytes);
    if (smem + sizeof(lkv_attn_desc) > (size_t)smem_max || nc < 1) return false;
    if (!attr) {
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem_max - (int)sizeof(lkv_attn_desc));
        attr = true;
    }
    lkv_launch(b, kernel, dim3(d->n_head_kv, nc, ra.n), nt, smem, b->attn_ws, q, *d, rbk, rbv, nc, ra);
    LKV_CUDA_LAUNCHED(b, where);
    attn_dec_fold(b, st, d->n_head, d->head_dim, ra.n, nc);
    return true;
}
/* attn_dec_ring.cu: decode attention streaming K/V through a ring of stages;
 * false (nothing enqueued) when the shape, types or alignment are not covered */
bool lkv_cuda_attn_dec_ring(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk,
                            size_t rbv);
/* attn_dec_ring2.cu: the same for q8_0 K and V with cheaper loads and copies
 * (choose_attn.cu); false (nothing enqueued) for anything else */
bool lkv_cuda_attn_dec_ring2(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk,
                             size_t rbv);
/* the same kernels over several sequences' rows (attn_rows_arg), folded
 * into st; false (nothing enqueued) where the one-sequence call would not run */
bool lkv_cuda_attn_dec_ring_rows(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *geo,
                                 const attn_rows_arg &ra, size_t rbk, size_t rbv);
bool lkv_cuda_attn_dec_ring2_rows(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *geo,
                                  const attn_rows_arg &ra, size_t rbk, size_t rbv);

#endif
