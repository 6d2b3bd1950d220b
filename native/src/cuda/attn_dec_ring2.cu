/*
 * cuda/attn_dec_ring2.cu: attn_dec_ring.cu's decode attention for q8_0 K and
 * V (head_dim 64 / 128, G 1, 2, 3, 4, 8) with cheaper per-row bookkeeping;
 * the choice for those types (choose_attn.cu); other types and shapes go
 * to attn_dec_ring.cu. Same grid, ring, stages, thread roles and float
 * operations in the same order per output as attn_dec_ring.cu (read its
 * header): the same bits. What differs, from the H200 SASS of the ring
 * kernel (q8_0, hd 128, G 4):
 *  - V codes: rg_vdims read each 4-code word through lds4_2, whose pointer
 *    round trip through uintptr_t loses the shared window: generic LD.E
 *    loads with 64-bit address arithmetic and a predicated second load per
 *    word (~85 instructions per row and thread, 32 of them the o FMAs). A
 *    V-pass thread always reads the same 8 (or 4) codes of a row: its
 *    aligned word offset and the funnel shift (0 or 16: the codes of even
 *    32-blocks are at 2 mod 4, of odd ones at 0 mod 4) are fixed once, then
 *    per row 3 (2) 32-bit shared loads and 2 (1) funnel shifts.
 *  - p: the scores / probabilities are stored [row][GP] (GP = G, 4 for
 *    G = 3), so a V row's G probabilities are one 4/8/16-byte load (two for
 *    G 8) instead of G loads; the softmax walks them with stride GP.
 *  - copies: TPR = NT / R threads per row, each loading the row's address
 *    once and issuing its units q, q + TPR, ... unrolled (~3 instructions a
 *    unit instead of ~19 for a loop trip per unit).
 *  - K: 32-bit loads at the block's alignment (odd blocks' codes aligned,
 *    even blocks' two words funnel-shifted), the scale a 16-bit load.
 * The per-thread pieces (copy, scores, V pass) are __host__ __device__ with
 * host twins of the intrinsics, so that tests/cuda/emu_attn_ring.cu runs a
 * block on the host and compares it bit for bit with a transcription of
 * attn_dec_ring.cu's per-thread code.
 */
#include "attn_kv.cuh"
#include "pdl.cuh"
#include "twins.cuh"

enum { R2_NS = 4, R2_SMEM_MAX = 200 * 1024 };

/* host twins of the intrinsics ring2 alone uses (the rest: twins.cuh) */
/* two words at an 8-aligned address (one 64-bit shared load) */
static __host__ __device__ __forceinline__ void r2_ld64(const uint8_t *p, uint32_t &a, uint32_t &b) {
#ifdef __CUDA_ARCH__
    const uint2 u = *(const uint2 *)p;
    a = u.x;
    b = u.y;
#else
    a = tw_ld32(p);
    b = tw_ld32(p + 4);
#endif
}
/* 0x4700XX00 = 2^15 + XX, XX byte i of w (rg_f's __byte_perm(w, 0x47000000, 0x7504 | i << 4)) */
static __host__ __device__ __forceinline__ float r2_f(uint32_t w, int i) {
#ifdef __CUDA_ARCH__
    return __int_as_float(__byte_perm(w, 0x47000000u, 0x7504 | (i << 4)));
#else
    return tw_i2f_bits((int)(0x47000000u | ((w >> 8 * i) & 0xFFu) << 8));
#endif
}
/* cp.async of N bytes; the host copies at once */
template <int N>
static __host__ __device__ __forceinline__ void r2_cp(uint8_t *dst, const uint8_t *src) {
#ifdef __CUDA_ARCH__
    cp_async<N>(dst, src);
#else
    memcpy(dst, src, N);
#endif
}
/* the N probabilities of a row (N = 1, 2, 4, 8; 16-byte aligned row groups) */
template <int N>
static __host__ __device__ __forceinline__ void r2_ldp(const float *p, float *v) {
#ifdef __CUDA_ARCH__
    if constexpr (N == 1) v[0] = p[0];
    else if constexpr (N == 2) { const float2 a = *(const float2 *)p; v[0] = a.x; v[1] = a.y; }
    else {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const float4 a = *(const float4 *)(p + i);
            v[i] = a.x; v[i + 1] = a.y; v[i + 2] = a.z; v[i + 3] = a.w;
        }
    }
#else
    for (int i = 0; i < N; i++) v[i] = p[i];
#endif
}

/* compile-time shape: attn_dec_ring.cu's rg_shape for q8_0, plus TPR and GP */
template <int HD, int G>
struct r2_shape {
    static constexpr int NT = (G == 8 && HD == 128) ? 256 : 128;   /* threads */
    static constexpr int NW = NT / 32;
    static constexpr int R = G >= 3 ? 32 : 64;                     /* rows per stage */
    static constexpr int NG = HD / 32;                             /* 32-blocks per head */
    static constexpr int SLICE = NG * 34;                          /* bytes of one KV head in a row */
    static constexpr int CU = SLICE % 16 == 0 ? 16 : SLICE % 8 == 0 ? 8 : 4;   /* copy unit */
    static constexpr int U = SLICE / CU;                           /* copy units per row */
    static constexpr int TPR = NT / R;                             /* copying threads per row */
    static constexpr int UI = (U + TPR - 1) / TPR;                 /* units per copying thread */
    static constexpr int PITCH = ((SLICE + 15) & ~15) % 32 == 0 ? ((SLICE + 15) & ~15) + 16 : ((SLICE + 15) & ~15);
    static constexpr int SLOT = R * PITCH;
    static constexpr int ND = HD * 8 / NT;                         /* dims per thread in the V pass */
    static constexpr int NWV = ND / 4 + 1;                         /* aligned words read per V row */
    static constexpr int GP = G == 3 ? 4 : G;                      /* score row pitch (floats) */
    /* q code row pitch (bytes): the G heads' rows 16 bytes apart modulo 128,
     * so that a quarter warp's 16-byte loads of G heads fall in distinct banks
     * (at HD bytes they were all in the same four: 4-way conflicts, ~40% of
     * the kernel's shared wavefronts in ncu, H200 run 3 of the fifth session) */
    static constexpr int QP = HD + 16;
    static constexpr int MINB = 768 / NT;
    static_assert(ND == 4 || ND == 8, "V pass: 4 or 8 dims per thread, inside one 32-block");
    static_assert(NT % R == 0, "whole threads per row");
    /* the V pass reads up to 4 bytes past the slice (unused): inside the pitch */
    static_assert(SLICE + 4 <= PITCH, "V words inside the row pitch");
    static_assert(PITCH % 8 == 0, "rows 8-aligned (the V pass's 64-bit loads)");
};

/* host: bytes of dynamic shared memory (layout in the kernel) */
template <int HD, int G>
static size_t r2_smem(int C) {
    using S = r2_shape<HD, G>;
    return (size_t)R2_NS * S::SLOT + (size_t)G * HD * sizeof(float) + 32 * sizeof(float) +
           (size_t)((S::GP * C + 3) & ~3) * sizeof(float) + 16 * sizeof(float) + 2 * (size_t)C * sizeof(void *) + C +
           16;
}

// ---------------------------------------------------------------- per-thread pieces

/* thread tid's copies of rows [r0, r1) of one plane into a slot: row
 * r0 + tid / TPR, units tid % TPR + TPR i; rows in no segment are zeroed */
template <int HD, int G>
static __host__ __device__ __forceinline__ void r2_copy(int tid, uint8_t *slot, const uint8_t *const *ptr,
                                                        size_t off, int r0, int r1) {
    using S = r2_shape<HD, G>;
    const int rl = tid / S::TPR, q = tid % S::TPR;
    if (r0 + rl >= r1) return;
    const uint8_t *src = ptr[r0 + rl];
    uint8_t *dst = slot + rl * S::PITCH + q * S::CU;
    if (src) {
        src += off + q * S::CU;
        TW_UNROLL
        for (int i = 0; i < S::UI; i++)
            if (S::UI * S::TPR == S::U || q + S::TPR * i < S::U) r2_cp<S::CU>(dst + S::TPR * S::CU * i, src + S::TPR * S::CU * i);
    } else {
        TW_UNROLL
        for (int i = 0; i < S::UI; i++)
            if (S::UI * S::TPR == S::U || q + S::TPR * i < S::U)
                TW_UNROLL
                for (int b = 0; b < S::CU; b += 4) *(uint32_t *)(dst + S::TPR * S::CU * i + b) = 0;
    }
}

/* block j of a staged q8_0 K row: the 8 code words and the scale. Codes at
 * 34 j + 2: 4-aligned for odd j, 2 mod 4 for even j (two words funnel-shifted) */
static __host__ __device__ __forceinline__ float r2_kblock(const uint8_t *row, int j, uint32_t *kw) {
    const int base = 34 * j;
    if (j & 1) {
        TW_UNROLL
        for (int l = 0; l < 8; l++) kw[l] = tw_ld32(row + base + 2 + 4 * l);
    } else {
        uint32_t w[9];
        TW_UNROLL
        for (int i = 0; i < 9; i++) w[i] = tw_ld32(row + base + 4 * i);
        TW_UNROLL
        for (int l = 0; l < 8; l++) kw[l] = tw_fsr(w[l], w[l + 1], 16);
        return tw_hlo(w[0]);
    }
    return tw_h(row + base);
}

/* thread tid's scores of rows [r0, r1) (thread per (row, head), the CPU's 8
 * lanes per head, as attn_dec_ring.cu) into ps[r * GP + g] */
template <int HD, int G>
static __host__ __device__ __forceinline__ void r2_scores(int tid, const uint8_t *slot, const int8_t *qs,
                                                          const float *qdm, const uint8_t *valid, float scale,
                                                          float *ps, int r0, int r1) {
    using S = r2_shape<HD, G>;
    for (int t = tid; t < (r1 - r0) * G; t += S::NT) {
        const int rl = t / G, g = t - rl * G, r = r0 + rl;
        const uint8_t *row = slot + rl * S::PITCH;
        float lanes[8];
        TW_UNROLL
        for (int l = 0; l < 8; l++) lanes[l] = 0.f;
        TW_UNROLL
        for (int j = 0; j < S::NG; j++) {
            uint32_t kw[8], qw[8];
            const float dkq = tw_mul(r2_kblock(row, j, kw), qdm[g * S::NG + j]);
#ifdef __CUDA_ARCH__
            const uint4 qa = *(const uint4 *)(qs + g * S::QP + 32 * j), qb = *(const uint4 *)(qs + g * S::QP + 32 * j + 16);
            qw[0] = qa.x; qw[1] = qa.y; qw[2] = qa.z; qw[3] = qa.w; qw[4] = qb.x; qw[5] = qb.y; qw[6] = qb.z; qw[7] = qb.w;
#else
            memcpy(qw, qs + g * S::QP + 32 * j, 32);
#endif
            /* |dot| < 2^22: 0x4B400000 + dot is the float 1.5 * 2^23 + dot, the subtraction exact */
            TW_UNROLL
            for (int l = 0; l < 8; l++) {
                const float dot = tw_sub(tw_i2f_bits(tw_dp4a_ss(kw[l], qw[l], 0x4B400000)), 12582912.f);
                lanes[l] = tw_fma(dkq, dot, lanes[l]);
            }
        }
        /* reduce8 (attn_reduce8) */
        const float t0 = tw_add(lanes[4], lanes[0]), t1 = tw_add(lanes[5], lanes[1]);
        const float t2 = tw_add(lanes[6], lanes[2]), t3 = tw_add(lanes[7], lanes[3]);
        const float s = tw_add(tw_add(t0, t2), tw_add(t1, t3));
        ps[r * S::GP + g] = valid[r] ? tw_mul(s, scale) : -INFINITY;
    }
}

/* thread tid's o += p v over rows [r0, r1) of a staged V slice: position
 * lane l8 = tid & 7 (rows l8, l8 + 8, ... in order), dims dg * ND.. of
 * dim group dg = tid >> 3; code * d as fma(2^15 + u, d, -(2^15 + 128) d) */
template <int HD, int G>
static __host__ __device__ __forceinline__ void r2_vpass(int tid, const uint8_t *slot, const float *ps, int r0,
                                                         int r1, float (&o)[G][r2_shape<HD, G>::ND]) {
    using S = r2_shape<HD, G>;
    constexpr int ND = S::ND;
    const int l8 = tid & 7, dg = tid >> 3;
    const int k0 = dg * ND, sb = 34 * (k0 >> 5);   /* this thread's 32-block */
    const int co = sb + 2 + (k0 & 31);             /* its first code */
    const int wa = co & ~3, sh = (co & 2) * 8;
    TW_UNROLLN(2)
    for (int r = r0 + l8; r < r1; r += 8) {
        const uint8_t *row = slot + (r - r0) * S::PITCH;
        const float d = tw_h(row + sb);
        const float nd = tw_mul(-32896.f, d);   /* exact */
        /* the words wa.. in 64-bit loads from the first 8-aligned one: a
         * half warp's 16 threads then cover 32 distinct banks (as 32-bit
         * loads, rows 36 words apart and dim groups 2 apart met 2-way) */
        uint32_t w[S::NWV];
        if ((wa & 7) == 0) {
            TW_UNROLL
            for (int i = 0; i + 1 < S::NWV; i += 2) r2_ld64(row + wa + 4 * i, w[i], w[i + 1]);
            if (S::NWV & 1) w[S::NWV - 1] = tw_ld32(row + wa + 4 * (S::NWV - 1));
        } else {
            w[0] = tw_ld32(row + wa);
            TW_UNROLL
            for (int i = 1; i + 1 < S::NWV; i += 2) r2_ld64(row + wa + 4 * i, w[i], w[i + 1]);
            if (!(S::NWV & 1)) w[S::NWV - 1] = tw_ld32(row + wa + 4 * (S::NWV - 1));
        }
        float v[ND];
        TW_UNROLL
        for (int i = 0; i < ND / 4; i++) {
            const uint32_t c = tw_fsr(w[i], w[i + 1], sh) ^ 0x80808080u;   /* code + 128 */
            TW_UNROLL
            for (int b = 0; b < 4; b++) v[4 * i + b] = tw_fma(r2_f(c, b), d, nd);
        }
        float p[S::GP];
        r2_ldp<S::GP>(ps + r * S::GP, p);
        TW_UNROLL
        for (int g = 0; g < G; g++)
            TW_UNROLL
            for (int i = 0; i < ND; i++) o[g][i] = tw_fma(v[i], p[g], o[g][i]);
    }
}

// ---------------------------------------------------------------- kernel

/* attn_dec_ring.cu's attn_ring_kernel for q8_0, the pieces above: the body
 * of the one-sequence kernel and of the rows kernel (attn_kv.cuh) */
template <int HD, int G>
static __device__ __forceinline__ void ring2_body(float *ws, const float *q, const lkv_attn_desc &d, attn_dyn dy,
                                                  size_t rbk, size_t rbv, int c_first, int nc) {
    using S = r2_shape<HD, G>;
    constexpr int NT = S::NT, R = S::R, NG = S::NG, ND = S::ND;
    extern __shared__ __align__(16) uint8_t sm[];
    pdl_enter();
    const int delta = attn_delta(dy);
    const int qi = blockIdx.x % d.n_q, kh = blockIdx.x / d.n_q, x = blockIdx.y;
    const int qpos = d.q_pos0 + delta + qi;
    const int h0 = kh * G, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int C = d.chunk, p0 = (c_first + x) * C;
    float *wbase;
    size_t wstride;
    if (!attn_chunk_slot<HD, G>(tid, ws, d, qi, h0, x, nc, p0, qpos, wbase, wstride)) return;   /* past the query */
    const int nv = min(C, qpos - p0 + 1), nst = (nv + R - 1) / R;   /* rows; stages per plane */

    /* ring (NS slots) | qs (G, HD) floats: q8 codes, rows S::QP bytes apart | qdm (<= 32): d_q per (head,
     * 32-group) | ps (C, GP): scores, then p | pm, pl (8 each) | kptr, vptr
     * (C) | valid (C) */
    uint8_t *ring = sm;
    float *qs = (float *)(sm + R2_NS * S::SLOT), *qdm = qs + G * HD, *ps = qdm + 32;
    float *pm = ps + ((S::GP * C + 3) & ~3), *pl = pm + 8;
    const uint8_t **kptr = (const uint8_t **)(pl + 8), **vptr = kptr + C;
    uint8_t *valid = (uint8_t *)(vptr + C);

    attn_locate_rows<NT>(tid, d, dy, delta, p0, nv, rbk, rbv, valid, kptr, vptr);
    __syncthreads();

    auto issue = [&](int s) {
        if (s < 2 * nst) {
            const bool v = s >= nst;
            const int r0 = (v ? s - nst : s) * R;
            r2_copy<HD, G>(tid, ring + (s % R2_NS) * S::SLOT, v ? vptr : kptr, (size_t)kh * S::SLICE, r0,
                           min(nv, r0 + R));
        }
        cp_commit();
    };
#pragma unroll
    for (int s = 0; s < R2_NS - 1; s++) issue(s);

    attn_stage_query<LKV_TYPE_Q8_0, HD, G, S::NW, S::QP>(warp, lane, q, d, qi, h0, qs, qdm);

    float o[G][ND];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < ND; i++) o[g][i] = 0.f;

    for (int s = 0; s < 2 * nst; s++) {
        cp_wait<R2_NS - 2>();
        __syncthreads();
        issue(s + R2_NS - 1);
        const uint8_t *slot = ring + (s % R2_NS) * S::SLOT;
        if (s < nst) {
            const int r0 = s * R;
            r2_scores<HD, G>(tid, slot, (const int8_t *)qs, qdm, valid, d.scale, ps, r0, min(nv, r0 + R));
        } else {
            if (s == nst) {
                for (int g = warp; g < G; g += S::NW) {
                    float l;
                    const float mx = attn_chunk_softmax(ps + g, S::GP, nv, false, &l);
                    if (lane == 0) { pm[g] = mx; pl[g] = l; }
                }
                __syncthreads();
            }
            const int r0 = (s - nst) * R;
            r2_vpass<HD, G>(tid, slot, ps, r0, min(nv, r0 + R), o);
        }
    }
    cp_wait<0>();
    attn_store_partial<G, ND>(o, wbase, wstride, tid >> 3, tid & 7, tid, pm, pl);
}

template <int HD, int G>
__global__ void __launch_bounds__(r2_shape<HD, G>::NT, r2_shape<HD, G>::MINB)
attn_ring2_kernel(float *ws, const float *q, const __grid_constant__ lkv_attn_desc d, attn_dyn dy, size_t rbk,
                  size_t rbv, int c_first, int nc) {
    ring2_body<HD, G>(ws, q, d, dy, rbk, rbv, c_first, nc);
}

/* grid (n_head_kv, nc, rows): row blockIdx.z's chunks 0 .. nc - 1 */
template <int HD, int G>
__global__ void __launch_bounds__(r2_shape<HD, G>::NT, r2_shape<HD, G>::MINB)
attn_ring2_rows_kernel(float *ws, const float *q, const __grid_constant__ lkv_attn_desc d0, size_t rbk,
                       size_t rbv, int nc, const __grid_constant__ attn_rows_arg ra) {
    __shared__ lkv_attn_desc sd;
    attn_row_desc(sd, d0, ra, q, ws, nc);
    ring2_body<HD, G>(ws, q, sd, attn_dyn{nullptr, 0, -1}, rbk, rbv, 0, nc);
}

// ---------------------------------------------------------------- launcher

#ifndef LKV_ATTN_RING2_EMU
template <int HD, int G>
static bool launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv) {
    using S = r2_shape<HD, G>;
    if (rbk % S::CU || rbv % S::CU) return false;
    for (int i = 0; i < d->n_segs; i++)
        if (((uintptr_t)d->segs[i].k | (uintptr_t)d->segs[i].v) % S::CU) return false;
    const size_t smem = r2_smem<HD, G>(d->chunk);
    if (smem > R2_SMEM_MAX) return false;
    static bool attr = false;
    if (!attr) {
        cudaFuncSetAttribute(attn_ring2_kernel<HD, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, R2_SMEM_MAX);
        attr = true;
    }
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (HD + 2) * sizeof(float);
    const int batch = (int)min((size_t)65535, b->attn_ws_bytes / per_chunk);
    if (batch < 1) return false;
    const attn_dyn dy = attn_dyn_of(b, d);
    for (int c0 = d->chunk_lo; c0 < d->chunk_hi; c0 += batch) {
        const int nc = min(batch, d->chunk_hi - c0);
        lkv_launch(b, attn_ring2_kernel<HD, G>, dim3(d->n_q * d->n_head_kv, nc), S::NT, smem, b->attn_ws, q, *d, dy,
                   rbk, rbv, c0, nc);
        LKV_CUDA_LAUNCHED(b, "attn_ring2");
        attn_dec_fold(b, st, d->n_head, HD, d->n_q, nc);
    }
    return true;
}

template <int HD, int G>
static bool launch_rows(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const attn_rows_arg &ra,
                        size_t rbk, size_t rbv) {
    using S = r2_shape<HD, G>;
    static bool attr = false;
    return attn_rows_launch(b, attn_ring2_rows_kernel<HD, G>, attr, S::NT, r2_smem<HD, G>(d->chunk),
                            R2_SMEM_MAX, S::CU, S::CU, st, q, d, ra, rbk, rbv, "attn_ring2_rows");
}

/* the G instance of launcher L for d's heads */
#define R2_BY_G(L, ...)                                                                            \
    switch (d->n_head / d->n_head_kv) {                                                            \
    case 1: return L<HD, 1>(__VA_ARGS__);                                                          \
    case 2: return L<HD, 2>(__VA_ARGS__);                                                          \
    case 3: return L<HD, 3>(__VA_ARGS__);                                                          \
    case 4: return L<HD, 4>(__VA_ARGS__);                                                          \
    case 8: return L<HD, 8>(__VA_ARGS__);                                                          \
    default: return false;                                                                         \
    }

template <int HD>
static bool launch_g(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv) {
    R2_BY_G(launch, b, st, q, d, rbk, rbv)
}

template <int HD>
static bool launch_rows_g(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const attn_rows_arg &ra,
                          size_t rbk, size_t rbv) {
    R2_BY_G(launch_rows, b, st, q, d, ra, rbk, rbv)
}

bool lkv_cuda_attn_dec_ring2(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk,
                             size_t rbv) {
    if (d->type_k != LKV_TYPE_Q8_0 || d->type_v != LKV_TYPE_Q8_0 || d->n_head_kv <= 0 ||
        d->n_head % d->n_head_kv || d->chunk > 1024)
        return false;
    if (d->head_dim == 64) return launch_g<64>(b, st, q, d, rbk, rbv);
    if (d->head_dim == 128) return launch_g<128>(b, st, q, d, rbk, rbv);
    return false;
}

bool lkv_cuda_attn_dec_ring2_rows(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d,
                                  const attn_rows_arg &ra, size_t rbk, size_t rbv) {
    if (d->type_k != LKV_TYPE_Q8_0 || d->type_v != LKV_TYPE_Q8_0 || d->n_head_kv <= 0 ||
        d->n_head % d->n_head_kv || d->chunk > 1024)
        return false;
    if (d->head_dim == 64) return launch_rows_g<64>(b, st, q, d, ra, rbk, rbv);
    if (d->head_dim == 128) return launch_rows_g<128>(b, st, q, d, ra, rbk, rbv);
    return false;
}
#endif
