/*
 * cuda/attn_dec_ring.cu: decode attention (few queries) over the chunk grid,
 * K and V streamed through a small ring of shared-memory stages.
 *
 * The work (decode attention, flash-decoding style): one block per (query, KV head, chunk) computes
 * the chunk's partial (m, l, normalised o) for the G query heads of that KV
 * head, every float operation cpu/attention.c's in its order (attn.cuh,
 * attn_kv.cuh), and attn_fold.cu's attn_fold2 folds the partials in chunk order.
 * What differs is how the bytes come in and how threads share the work:
 *  - a chunk is read as a sequence of stages of R rows, K stages then V
 *    stages, each one KV head's slice of R rows. Stage s is copied (cp.async,
 *    16/8/4-byte units) into slot s % NS of a ring of NS slots, NS - 1 stages
 *    ahead of the one being computed: scoring K rows overlaps the copies of
 *    the next K rows and of the first V rows, the softmax the V copies, and
 *    the V pass the copies of the rest of V. A block holds ~33 KB of shared
 *    memory (8B shape, chunk 256), not ~87 KB: 6 blocks (24 warps) per SM
 *    instead of 2, so one block's compute phases overlap others' copies.
 *  - blocks of one (chunk, KV head) for the n_q queries, then the KV heads of
 *    a chunk, are neighbours in the grid: a K/V slice (136 bytes of a
 *    1088-byte row for q8_0) shares 32-byte sectors with its neighbour head's,
 *    which is now read at about the same time (an L2 hit, not a second DRAM
 *    read), and the n_q queries read the same slices from L2.
 *  - scores: one thread per (row, head), the CPU's 8 lanes per head; integer
 *    block dots by dp4a into the exponent-biased integer 0x4B400000, so the
 *    exact conversion of the dot to float is one subtraction (I2F runs at a
 *    quarter of the FMA rate).
 *  - o = sum p v: thread (l8, dg) is lane l8 of the CPU's 8 position lanes
 *    (rows l8, l8 + 8, ... in order, stage after stage) for ND dims; the
 *    accumulators live in registers across the V stages. V codes to floats
 *    with one FMA: f = 2^15 + u built in the bits, code * d = fma(f, d, -c d)
 *    with c d exact (c = 2^15 + 128 for q8_0, 2^15 + 8 for q4_0: 9 or 13
 *    significant bits times d's 11), so the FMA's one rounding is of the
 *    exact code * d: the CPU's (float)code * d bit for bit.
 * Rows in no segment are zeroed and masked; every sum's
 * order is fixed by the rows' places in the chunk: the same bits for any
 * segments, copy units or stage sizes, hence attn.cu's and the CPU's.
 *
 * Covers K = V type f16 (16-byte copies), q8_0 / q4_0 (8-byte copies at
 * head_dim 128, 4-byte at 64, 16-byte at 256), and q8_0 K with q4_0 V (each
 * plane staged at its own slice size, copy unit and pitch; a slot holds the
 * larger), head_dim 64 / 128 with G 1, 2, 3, 4, 6, 8 and head_dim 256 with
 * G 2, 4, 6, 8 (256 threads, 2 blocks per SM: G x 8 accumulators), with row
 * sizes and segment addresses aligned to each plane's copy unit; anything
 * else goes to attn.cu's split kernel (choose_attn.cu): the same bits. The
 * instances of one type for K and V compile to the PTX they had before the
 * mixed pair and head_dim 256 were added.
 */
#include "attn_kv.cuh"
#include "pdl.cuh"

enum { RG_NS = 4, RG_SMEM_MAX = 200 * 1024 };

/* one plane's staged head slice (type T, head_dim HD) */
template <int T, int HD>
struct rg_plane {
    static constexpr int GB = T == LKV_TYPE_F16 ? 64 : T == LKV_TYPE_Q8_0 ? 34 : 18;   /* bytes per 32 dims */
    static constexpr int SLICE = HD / 32 * GB;                     /* bytes of one KV head in a row */
    static constexpr int CU = SLICE % 16 == 0 ? 16 : SLICE % 8 == 0 ? 8 : 4;   /* copy unit */
    static constexpr int U = SLICE / CU;                           /* copy units per row */
    /* shared row pitch: a multiple of 16 that is 16 mod 32, so 8 rows' 8-byte
     * loads at one offset fall in 8 distinct bank pairs */
    static constexpr int PITCH = ((SLICE + 15) & ~15) % 32 == 0 ? ((SLICE + 15) & ~15) + 16 : ((SLICE + 15) & ~15);
};

/* compile-time shape of a (K type, V type, head_dim, G) kernel */
template <int TK, int TV, int HD, int G>
struct rg_shape {
    static constexpr int NT = (HD == 256 || (G >= 6 && HD == 128)) ? 256 : 128;   /* threads */
    static constexpr int NW = NT / 32;
    static constexpr int R = (G >= 3 || HD == 256) ? 32 : 64;      /* rows per stage */
    using PK = rg_plane<TK, HD>;
    using PV = rg_plane<TV, HD>;
    static constexpr int SLOT = R * (PK::PITCH > PV::PITCH ? PK::PITCH : PV::PITCH);
    static constexpr int ND = HD * 8 / NT;                         /* dims per thread in the V pass */
    /* blocks per SM: 6 x 4 warps or 3 x 8 (<= 85 registers); head_dim 256
     * holds G x 8 accumulators per thread: 2 x 8 warps (<= 128 registers) */
    static constexpr int MINB = HD == 256 ? 2 : 768 / NT;
    static constexpr int QDM = (G * HD / 32 + 3) / 4 * 4 > 32 ? (G * HD / 32 + 3) / 4 * 4 : 32;   /* d_q floats */
    static_assert(ND == 4 || ND == 8, "V pass: 4 or 8 dims per thread, inside one 32-block");
    static_assert(PK::U <= NT && PV::U <= NT, "a row's units fit the block");
};

/* floats of the (G, C) score area, rounded up to keep what follows 16-byte aligned */
static __host__ __device__ __forceinline__ int rg_psn(int G, int C) { return (G * C + 3) & ~3; }

/* host: bytes of dynamic shared memory (layout in the kernel) */
template <int TK, int TV, int HD, int G>
static size_t rg_smem(int C) {
    using S = rg_shape<TK, TV, HD, G>;
    return (size_t)RG_NS * S::SLOT + (size_t)G * HD * sizeof(float) + S::QDM * sizeof(float) +
           (size_t)rg_psn(G, C) * sizeof(float) + 16 * sizeof(float) + 2 * (size_t)C * sizeof(void *) + C + 16;
}

// ---------------------------------------------------------------- pieces

/* rows [r0, r1) of one plane into a slot: thread t copies unit t % U of rows
 * r0 + t / U, + NT / U, ... (threads past the last whole row idle); rows in no
 * segment are zeroed. The bytes never depend on the unit. */
template <int CU, int U, int NT, int PITCH>
static __device__ __forceinline__ void rg_copy(uint8_t *slot, const uint8_t *const *ptr, size_t off, int r0,
                                               int r1) {
    constexpr int RP = NT / U;
    const int t = threadIdx.x, u = t % U;
    if (t >= RP * U) return;
    for (int r = r0 + t / U; r < r1; r += RP) {
        const uint8_t *src = ptr[r];
        uint8_t *dst = slot + (r - r0) * PITCH + u * CU;
        if (src) cp_async<CU>(dst, src + off + u * CU);
        else
#pragma unroll
            for (int i = 0; i < CU; i += 4) *(uint32_t *)(dst + i) = 0;
    }
}

/* the CPU's (float)code * d exactly, from f = 2^15 + u (u the code's biased
 * byte) and nd = -(2^15 + bias) * d (exact): fma(f, d, nd) = code * d before
 * rounding, which is representable, so the one rounding changes nothing */
static __device__ __forceinline__ float rg_f(uint32_t w, int i) {
    return __int_as_float(__byte_perm(w, 0x47000000u, 0x7504 | (i << 4)));   /* 0x4700XX00 = 2^15 + XX */
}

/* dims [k0, k0 + N) of a staged V slice (inside one 32-block), as to_float */
template <int T, int N>
static __device__ __forceinline__ void rg_vdims(const uint8_t *row, int k0, float *v) {
    if constexpr (T == LKV_TYPE_F16) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const uint2 u = *(const uint2 *)(row + 2 * (k0 + i));
            const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
            v[i] = a.x; v[i + 1] = a.y; v[i + 2] = b.x; v[i + 3] = b.y;
        }
    } else {
        constexpr int GB = T == LKV_TYPE_Q8_0 ? 34 : 18;
        const uint8_t *g = row + GB * (k0 >> 5);
        const int e = k0 & 31;
        const float d = __half2float(*(const __half *)g);
        const float nd = __fmul_rn(T == LKV_TYPE_Q8_0 ? -32896.f : -32776.f, d);   /* exact */
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            uint32_t w;
            if constexpr (T == LKV_TYPE_Q8_0) w = lds4_2(g + 2 + e + i) ^ 0x80808080u;   /* code + 128 */
            else w = (lds4_2(g + 2 + ((e + i) & 15)) >> ((e + i) & 16 ? 4 : 0)) & 0x0F0F0F0Fu;   /* code + 8 */
#pragma unroll
            for (int b = 0; b < 4; b++) v[i + b] = fmaf(rg_f(w, b), d, nd);
        }
    }
}

// ---------------------------------------------------------------- kernel

/* grid (n_q * n_head_kv, chunks of this batch): block (qi + n_q kh, x) writes
 * the partial of chunk c_first + x, heads kh G.. kh G + G - 1, query qi into
 * ws[((qi * n_head + h) * nc + x) * (HD + 2)] (attn.cu's workspace layout) */
template <int TK, int TV, int HD, int G>
static __device__ __forceinline__ void ring_body(float *ws, const float *q, const lkv_attn_desc &d, attn_dyn dy,
                                                 size_t rbk, size_t rbv, int c_first, int nc) {
    using S = rg_shape<TK, TV, HD, G>;
    using PK = typename S::PK;
    using PV = typename S::PV;
    constexpr int NT = S::NT, R = S::R, NG = HD / 32, ND = S::ND;
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

    /* ring (NS slots) | qs (G, HD): query floats or q8 codes | qdm (QDM): d_q
     * per (head, 32-group) | ps (G, C): scores, then p | pm, pl (8 each) |
     * kptr, vptr (C) | valid (C) */
    uint8_t *ring = sm;
    float *qs = (float *)(sm + RG_NS * S::SLOT), *qdm = qs + G * HD, *ps = qdm + S::QDM;
    float *pm = ps + rg_psn(G, C), *pl = pm + 8;
    const uint8_t **kptr = (const uint8_t **)(pl + 8), **vptr = kptr + C;
    uint8_t *valid = (uint8_t *)(vptr + C);

    attn_locate_rows<NT>(tid, d, dy, delta, p0, nv, rbk, rbv, valid, kptr, vptr);
    __syncthreads();

    /* stage s: K rows [R s, ..) for s < nst, else V rows [R (s - nst), ..);
     * one commit group per stage (empty past the end), so group s is stage s */
    auto issue = [&](int s) {
        if constexpr (TK == TV) {   /* one copy loop for both planes */
            if (s < 2 * nst) {
                const bool v = s >= nst;
                const int r0 = (v ? s - nst : s) * R;
                rg_copy<PK::CU, PK::U, NT, PK::PITCH>(ring + (s % RG_NS) * S::SLOT, v ? vptr : kptr,
                                                      (size_t)kh * PK::SLICE, r0, min(nv, r0 + R));
            }
        } else if (s < nst) {
            rg_copy<PK::CU, PK::U, NT, PK::PITCH>(ring + (s % RG_NS) * S::SLOT, kptr, (size_t)kh * PK::SLICE, s * R,
                                                  min(nv, s * R + R));
        } else if (s < 2 * nst) {
            rg_copy<PV::CU, PV::U, NT, PV::PITCH>(ring + (s % RG_NS) * S::SLOT, vptr, (size_t)kh * PV::SLICE,
                                                  (s - nst) * R, min(nv, (s - nst) * R + R));
        }
        cp_commit();
    };
#pragma unroll
    for (int s = 0; s < RG_NS - 1; s++) issue(s);

    /* the query in K's dot type (one warp per 32-group), under the first copies */
    attn_stage_query<TK, HD, G, S::NW, HD>(warp, lane, q, d, qi, h0, qs, qdm);

    const int l8 = tid & 7, dg = tid >> 3;   /* V pass: position lane, dim group */
    float o[G][ND];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < ND; i++) o[g][i] = 0.f;

    for (int s = 0; s < 2 * nst; s++) {
        cp_wait<RG_NS - 2>();   /* stage s has landed (this thread's copies) */
        __syncthreads();        /* ... everyone's; and slot (s - 1) % NS is consumed */
        issue(s + RG_NS - 1);
        const uint8_t *slot = ring + (s % RG_NS) * S::SLOT;
        if (s < nst) {
            // -- scores of rows [r0, r1): thread per (row, head), the CPU's 8
            //    lanes: f16 an FMA chain per lane (elements l, l + 8, ...),
            //    q8_0 / q4_0 per 32-block lane l += (d_k d_q) * dot(4l..4l+3);
            //    reduce8, times the scale
            const int r0 = s * R, r1 = min(nv, r0 + R);
            for (int t = tid; t < (r1 - r0) * G; t += NT) {
                const int rl = t / G, g = t - rl * G, r = r0 + rl;
                const uint8_t *row = slot + rl * PK::PITCH;
                float lanes[8];
#pragma unroll
                for (int l = 0; l < 8; l++) lanes[l] = 0.f;
                if constexpr (TK == LKV_TYPE_F16) {
                    const float *qg = qs + g * HD;
#pragma unroll
                    for (int i = 0; i < HD / 8; i++) {
                        const uint4 u = *(const uint4 *)(row + 16 * i);
                        const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
                        const float2 c = __half22float2(*(const __half2 *)&u.z), e = __half22float2(*(const __half2 *)&u.w);
                        const float k[8] = {a.x, a.y, b.x, b.y, c.x, c.y, e.x, e.y};
                        const float4 qa = *(const float4 *)(qg + 8 * i), qb = *(const float4 *)(qg + 8 * i + 4);
                        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                        for (int l = 0; l < 8; l++) lanes[l] = fmaf(k[l], qv[l], lanes[l]);
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < NG; j++) {
                        uint32_t kw[8];
                        const float dkq = __fmul_rn(kblock<TK>(row, j, kw), qdm[g * NG + j]);
                        const uint4 qa = *(const uint4 *)((const int8_t *)qs + g * HD + 32 * j);
                        const uint4 qb = *(const uint4 *)((const int8_t *)qs + g * HD + 32 * j + 16);
                        const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
                        /* |dot| <= 4 * 128 * 128 < 2^22: 0x4B400000 + dot is the float
                         * 1.5 * 2^23 + dot, and the subtraction is exact: (float)dot */
#pragma unroll
                        for (int l = 0; l < 8; l++) {
                            const float dot = __fsub_rn(__int_as_float(__dp4a((int)kw[l], (int)qw[l], 0x4B400000)),
                                                        12582912.f);
                            lanes[l] = fmaf(dkq, dot, lanes[l]);
                        }
                    }
                }
                ps[g * C + r] = valid[r] ? __fmul_rn(attn_reduce8(lanes), d.scale) : -INFINITY;
            }
        } else {
            if (s == nst) {
                // -- softmax pieces of the whole chunk: warp per head
                for (int g = warp; g < G; g += S::NW) {
                    float l;
                    const float mx = attn_chunk_softmax(ps + g * C, 1, nv, TV == LKV_TYPE_F16, &l);
                    if (lane == 0) { pm[g] = mx; pl[g] = l; }
                }
                __syncthreads();
            }
            // -- o += p v over rows [r0, r1): lane l8's rows in order
            const int r0 = (s - nst) * R, r1 = min(nv, r0 + R);
#pragma unroll 2
            for (int r = r0 + l8; r < r1; r += 8) {
                float v[ND];
                rg_vdims<TV, ND>(slot + (r - r0) * PV::PITCH, dg * ND, v);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float p = ps[g * C + r];
#pragma unroll
                    for (int i = 0; i < ND; i++) o[g][i] = fmaf(v[i], p, o[g][i]);
                }
            }
        }
    }
    cp_wait<0>();   /* (only empty groups are left) */
    attn_store_partial<G, ND>(o, wbase, wstride, dg, l8, tid, pm, pl);
}

template <int TK, int TV, int HD, int G>
__global__ void __launch_bounds__(rg_shape<TK, TV, HD, G>::NT, rg_shape<TK, TV, HD, G>::MINB)
attn_ring_kernel(float *ws, const float *q, const __grid_constant__ lkv_attn_desc d, attn_dyn dy, size_t rbk,
                 size_t rbv, int c_first, int nc) {
    ring_body<TK, TV, HD, G>(ws, q, d, dy, rbk, rbv, c_first, nc);
}

/* grid (n_head_kv, nc, rows): row blockIdx.z's chunks 0 .. nc - 1 (attn_kv.cuh) */
template <int TK, int TV, int HD, int G>
__global__ void __launch_bounds__(rg_shape<TK, TV, HD, G>::NT, rg_shape<TK, TV, HD, G>::MINB)
attn_ring_rows_kernel(float *ws, const float *q, const __grid_constant__ lkv_attn_desc d0, size_t rbk,
                      size_t rbv, int nc, const __grid_constant__ attn_rows_arg ra) {
    __shared__ lkv_attn_desc sd;
    attn_row_desc(sd, d0, ra, q, ws, nc);
    ring_body<TK, TV, HD, G>(ws, q, sd, attn_dyn{nullptr, 0, -1}, rbk, rbv, 0, nc);
}

// ---------------------------------------------------------------- launcher

template <int TK, int TV, int HD, int G>
static bool launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv) {
    using S = rg_shape<TK, TV, HD, G>;
    constexpr int CUK = S::PK::CU, CUV = S::PV::CU;
    /* every row slice must be aligned to its plane's copy unit (else attn.cu's) */
    if (rbk % CUK || rbv % CUV) return false;
    for (int i = 0; i < d->n_segs; i++)
        if ((uintptr_t)d->segs[i].k % CUK || (uintptr_t)d->segs[i].v % CUV) return false;
    const size_t smem = rg_smem<TK, TV, HD, G>(d->chunk);
    if (smem > RG_SMEM_MAX) return false;
    static bool attr = false;
    if (!attr) {
        cudaFuncSetAttribute(attn_ring_kernel<TK, TV, HD, G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             RG_SMEM_MAX);
        attr = true;
    }
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (HD + 2) * sizeof(float);
    const int batch = (int)min((size_t)65535, b->attn_ws_bytes / per_chunk);   /* grid y <= 65535 */
    if (batch < 1) return false;
    const attn_dyn dy = attn_dyn_of(b, d);
    for (int c0 = d->chunk_lo; c0 < d->chunk_hi; c0 += batch) {
        const int nc = min(batch, d->chunk_hi - c0);
        lkv_launch(b, attn_ring_kernel<TK, TV, HD, G>, dim3(d->n_q * d->n_head_kv, nc), S::NT, smem, b->attn_ws, q,
                   *d, dy, rbk, rbv, c0, nc);
        LKV_CUDA_LAUNCHED(b, "attn_ring");
        attn_dec_fold(b, st, d->n_head, HD, d->n_q, nc);
    }
    return true;
}

template <int TK, int TV, int HD, int G>
static bool launch_rows(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const attn_rows_arg &ra,
                        size_t rbk, size_t rbv) {
    using S = rg_shape<TK, TV, HD, G>;
    static bool attr = false;
    return attn_rows_launch(b, attn_ring_rows_kernel<TK, TV, HD, G>, attr, S::NT, rg_smem<TK, TV, HD, G>(d->chunk),
                            RG_SMEM_MAX, S::PK::CU, S::PV::CU, st, q, d, ra, rbk, rbv, "attn_ring_rows");
}

/* the G values built at head_dim HD: every listed one at 64 / 128; even ones
 * at 256 (the hybrid models' full attention, GQA 2-8), to bound the build */
static constexpr bool rg_built(int HD, int G) { return HD != 256 || G % 2 == 0; }

template <int TK, int TV, int HD, int G>
static bool launch_if(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv) {
    if constexpr (rg_built(HD, G)) return launch<TK, TV, HD, G>(b, st, q, d, rbk, rbv);
    else return false;
}

template <int TK, int TV, int HD, int G>
static bool launch_rows_if(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const attn_rows_arg &ra,
                           size_t rbk, size_t rbv) {
    if constexpr (rg_built(HD, G)) return launch_rows<TK, TV, HD, G>(b, st, q, d, ra, rbk, rbv);
    else return false;
}

/* the G instance of launcher L for d's heads */
#define RG_BY_G(L, ...)                                                                            \
    switch (d->n_head / d->n_head_kv) {                                                            \
    case 1: return L<TK, TV, HD, 1>(__VA_ARGS__);                                                  \
    case 2: return L<TK, TV, HD, 2>(__VA_ARGS__);                                                  \
    case 3: return L<TK, TV, HD, 3>(__VA_ARGS__);                                                  \
    case 4: return L<TK, TV, HD, 4>(__VA_ARGS__);                                                  \
    case 6: return L<TK, TV, HD, 6>(__VA_ARGS__);                                                  \
    case 8: return L<TK, TV, HD, 8>(__VA_ARGS__);                                                  \
    default: return false;                                                                         \
    }

template <int TK, int TV, int HD>
static bool launch_g(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv) {
    RG_BY_G(launch_if, b, st, q, d, rbk, rbv)
}

template <int TK, int TV, int HD>
static bool launch_rows_g(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const attn_rows_arg &ra,
                          size_t rbk, size_t rbv) {
    RG_BY_G(launch_rows_if, b, st, q, d, ra, rbk, rbv)
}

/* the (K type, V type, head_dim) instances */
#define RG_TYPES(L)                                                                                \
    L(LKV_TYPE_F16, LKV_TYPE_F16, 64) L(LKV_TYPE_F16, LKV_TYPE_F16, 128)                           \
    L(LKV_TYPE_F16, LKV_TYPE_F16, 256) L(LKV_TYPE_Q8_0, LKV_TYPE_Q8_0, 64)                         \
    L(LKV_TYPE_Q8_0, LKV_TYPE_Q8_0, 128) L(LKV_TYPE_Q8_0, LKV_TYPE_Q8_0, 256)                      \
    L(LKV_TYPE_Q4_0, LKV_TYPE_Q4_0, 64) L(LKV_TYPE_Q4_0, LKV_TYPE_Q4_0, 128)                       \
    L(LKV_TYPE_Q4_0, LKV_TYPE_Q4_0, 256) L(LKV_TYPE_Q8_0, LKV_TYPE_Q4_0, 64)                       \
    L(LKV_TYPE_Q8_0, LKV_TYPE_Q4_0, 128) L(LKV_TYPE_Q8_0, LKV_TYPE_Q4_0, 256)

bool lkv_cuda_attn_dec_ring(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, size_t rbk,
                            size_t rbv) {
    const int hd = d->head_dim, tk = d->type_k, tv = d->type_v;
    if (d->n_head_kv <= 0 || d->n_head % d->n_head_kv || d->chunk > 1024) return false;
#define L(K, V, H) if (tk == K && tv == V && hd == H) return launch_g<K, V, H>(b, st, q, d, rbk, rbv);
    RG_TYPES(L)
#undef L
    return false;
}

bool lkv_cuda_attn_dec_ring_rows(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d,
                                 const attn_rows_arg &ra, size_t rbk, size_t rbv) {
    const int hd = d->head_dim, tk = d->type_k, tv = d->type_v;
    if (d->n_head_kv <= 0 || d->n_head % d->n_head_kv || d->chunk > 1024) return false;
#define L(K, V, H) if (tk == K && tv == V && hd == H) return launch_rows_g<K, V, H>(b, st, q, d, ra, rbk, rbv);
    RG_TYPES(L)
#undef L
    return false;
}
