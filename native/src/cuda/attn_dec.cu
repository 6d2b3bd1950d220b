/*
 * cuda/attn_dec.cu: decode attention (few queries) over the chunk grid,
 * flash-decoding style, with each chunk's K/V staged through shared memory.
 *
 * One block per (chunk, KV head, query) computes the chunk's partial for the
 * G <= 8 query heads of that KV head (m, l, normalised o, at the CPU's
 * rounding points as attn.cu: attn.cuh):
 *  1. every row of the chunk up to the query is located in whichever segment
 *     holds it and its KV-head slice copied into shared memory with cp.async
 *     (16, 8 or 4 bytes at a time, whatever the row's address allows; rows in
 *     no segment are zeroed and masked). K comes in two halves, then V, as
 *     three copy groups, so scoring the first half overlaps the rest.
 *  2. scores: one thread per row, the K slice read with 8-byte shared loads
 *     (row pitch an odd number of 8-byte words: no bank conflicts), in the
 *     CPU's 8 lanes per head: f16 an FMA chain per lane, q8_0 / q4_0 the
 *     dp4a block lanes against the q8_0 query (attn_kv.cuh); reduce8, times
 *     the scale.
 *  3. softmax pieces: one warp per head (attn.cuh attn_chunk_softmax).
 *  4. o = sum p v: thread (tid & 7, tid >> 3) is position lane tid & 7 (rows
 *     l, l + 8, ...) for HD / 16 dims; the 8 lanes reduce8'ed by shuffles.
 * Every sum runs in an order fixed by the rows' places in the chunk, never by
 * the segments or the copy widths: the same bits for any placement (backend.h).
 * The partials are then folded in increasing chunk order by attn_fold2
 * (attn_fold.cu). A captured step's position comes from
 * device memory as in attn.cu (attn_dyn).
 *
 * Types: K and V both f16, q8_0 or q4_0; head_dim 64 or 128; G 1, 2, 3, 4 or 8;
 * other shapes use attn.cu's split kernel. LKV_CUDA_ATTN=0 selects attn.cu's.
 *
 * This kernel is now the fallback: lkv_cuda_attn_dec first tries
 * attn_dec_ring.cu (same partials, same bits; K/V streamed through a small
 * ring of stages, more blocks per SM), and runs the kernel below when that
 * one declines (copy-unit alignment) or LKV_CUDA_ATTN=dec-old (read per
 * call) asks for it. For q8_0 K and V attn_dec_ring2.cu comes first (50.5
 * against 74.1 us per layer at 32K, 8B shape, ncu on one H200, run 10 of
 * 2026-11-30's fifth session); LKV_CUDA_ATTN=ring skips it. attn_fold.cu's fold serves all three.
 */
#include <stdlib.h>
#include <string.h>

#include "attn_kv.cuh"

enum { AD_THREADS = 128, AD_GMAX = 8, AD_SMEM_MAX = 200 * 1024 };

struct ad_geom {
    int G;                    /* query heads per KV head */
    int slice_k, slice_v;     /* bytes of one KV head in a row */
    int pitch_k, pitch_v;     /* shared-memory row pitch (odd multiple of 8) */
    int region0;              /* bytes of the K area */
    size_t rbk, rbv;          /* row bytes */
};

// ---------------------------------------------------------------- small pieces

/* 4 signed bytes -> floats, exactly: 2^23 + (b ^ 0x80) built in the bits, minus 2^23 + 128 */
static __device__ __forceinline__ void s8x4(uint32_t w, float *f) {
    const uint32_t u = w ^ 0x80808080u;
#pragma unroll
    for (int i = 0; i < 4; i++) f[i] = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7540 + i)) - 8388736.f;
}
/* 4 nibbles in bytes (0..15) -> floats n - 8 */
static __device__ __forceinline__ void u4x4m8(uint32_t w, float *f) {
#pragma unroll
    for (int i = 0; i < 4; i++) f[i] = __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540 + i)) - 8388616.f;
}
/* dims [4k, 4k+4) of a staged V slice: values and scale */
template <int T>
static __device__ __forceinline__ float vquad(const uint8_t *row, int k, float *v) {
    if constexpr (T == LKV_TYPE_F16) {
        const uint2 u = *(const uint2 *)(row + 8 * k);
        const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
        return 1.f;
    } else {
        constexpr int GB = T == LKV_TYPE_Q8_0 ? 34 : 18;
        const int j = k >> 3, e = 4 * (k & 7);
        const uint8_t *g = row + GB * j;
        const float d = __half2float(*(const __half *)g);
        if constexpr (T == LKV_TYPE_Q8_0) s8x4(lds4_2(g + 2 + e), v);
        else u4x4m8((lds4_2(g + 2 + (e & 15)) >> (e & 16 ? 4 : 0)) & 0x0F0F0F0Fu, v);
        return d;
    }
}

/* the block copies rows [r_lo, r_hi) of one plane (K or V) into shared memory:
 * flat over (row, unit) pairs, unit bytes CU (16, 8 or 4 by cp.async; 2: plain
 * copy), chosen on the host from every segment's alignment; rows in no
 * segment are zeroed. The bytes, hence the arithmetic, never depend on CU. */
template <int CU>
static __device__ __forceinline__ void block_copy(uint8_t *dst, int pitch, const uint8_t *const *ptr,
                                                  size_t off, int bytes, int r_lo, int r_hi) {
    const int U = bytes / CU, n = (r_hi - r_lo) * U;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < n; idx += AD_THREADS) {
        const int rr = idx / U, r = r_lo + rr, o = (idx - rr * U) * CU;
        const uint8_t *src = ptr[r];
        uint8_t *d = dst + (size_t)r * pitch + o;
        if (!src) {
            if constexpr (CU >= 4) { for (int i = 0; i < CU; i += 4) *(uint32_t *)(d + i) = 0; }
            else *(uint16_t *)d = 0;
        } else if constexpr (CU >= 4) cp_async<CU>(d, src + off + o);
        else *(uint16_t *)d = *(const uint16_t *)(src + off + o);
    }
}

// ---------------------------------------------------------------- kernels

/* grid (chunks of this batch, n_head_kv, n_q): partial of chunk c_first + x into
 * ws[((qi * n_head + h) * nc + x) * (HD + 2)] (attn.cu's workspace layout) */
template <int T, int HD, int G, int CU>
__global__ void __launch_bounds__(AD_THREADS, 2)
attn_dec_kernel(float *ws, const float *q, const __grid_constant__ lkv_attn_desc d, ad_geom ge,
                attn_dyn dy, int c_first, int nc) {
    extern __shared__ __align__(16) uint8_t sm[];
    constexpr int NG = HD / 32, ND = HD / 16;   /* ND: dims per thread in the V pass */
    const int delta = attn_delta(dy);
    const int x = blockIdx.x, kh = blockIdx.y, qi = blockIdx.z, qpos = d.q_pos0 + delta + qi;
    const int h0 = kh * G, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int C = d.chunk, p0 = (c_first + x) * C;
    float *wbase;
    size_t wstride;
    if (!attn_chunk_slot<HD, G>(tid, ws, d, qi, h0, x, nc, p0, qpos, wbase, wstride)) return;   /* past the query */
    const int nv = min(C, qpos - p0 + 1), half = (nv + 1) >> 1;
    uint8_t *Ks = sm, *Vs = sm + ge.region0;
    float *qs = (float *)(Vs + (((size_t)C * ge.pitch_v + 15) & ~(size_t)15));   /* (G, HD) */
    float *qdm = qs + AD_GMAX * HD;                        /* (G, NG): d_q per 32-group */
    float *ps = qdm + AD_GMAX * NG;                        /* (C, 8): scores, then p */
    float *pm = ps + (size_t)C * AD_GMAX, *pl = pm + AD_GMAX;
    uint8_t *valid = (uint8_t *)(pl + AD_GMAX);            /* (C,) */

    // -- 1. where each row lives, then copies: K rows [0, half), K rows [half, nv), V rows [0, nv)
    const uint8_t **kptr = (const uint8_t **)(valid + ((C + 15) & ~15)), **vptr = kptr + C;
    attn_locate_rows<AD_THREADS>(tid, d, dy, delta, p0, nv, ge.rbk, ge.rbv, valid, kptr, vptr);
    __syncthreads();
    block_copy<CU>(Ks, ge.pitch_k, kptr, (size_t)kh * ge.slice_k, ge.slice_k, 0, half);
    cp_commit();
    block_copy<CU>(Ks, ge.pitch_k, kptr, (size_t)kh * ge.slice_k, ge.slice_k, half, nv);
    cp_commit();
    block_copy<CU>(Vs, ge.pitch_v, vptr, (size_t)kh * ge.slice_v, ge.slice_v, 0, nv);
    cp_commit();
    /* the query in K's dot type (one warp per 32-group): f16 values as
     * floats, or q8_0 codes as bytes with their scales */
    attn_stage_query<T, HD, G, AD_THREADS / 32, HD>(warp, lane, q, d, qi, h0, qs, qdm);

    // -- 2. scores, one thread per row (first half, then second), the CPU's
    //    8 lanes per head: f16 an FMA chain per lane (elements l, l + 8, ...),
    //    q8_0 / q4_0 dp4a block lanes (attn_kv.cuh); reduce8, times the scale
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        if (hf == 0) cp_wait<2>(); else cp_wait<1>();
        __syncthreads();
        const int r_lo = hf ? half : 0, r_hi = hf ? nv : half;
        for (int r = r_lo + tid; r < r_hi; r += AD_THREADS) {
            float lanes[G][8];
#pragma unroll
            for (int g = 0; g < G; g++)
#pragma unroll
                for (int l = 0; l < 8; l++) lanes[g][l] = 0.f;
            const uint8_t *row = Ks + (size_t)r * ge.pitch_k;
            if constexpr (T == LKV_TYPE_F16) {
#pragma unroll
                for (int i = 0; i < HD / 8; i++) {
                    const uint2 u0 = *(const uint2 *)(row + 16 * i), u1 = *(const uint2 *)(row + 16 * i + 8);
                    const float2 a = __half22float2(*(const __half2 *)&u0.x), b = __half22float2(*(const __half2 *)&u0.y);
                    const float2 c = __half22float2(*(const __half2 *)&u1.x), e = __half22float2(*(const __half2 *)&u1.y);
                    const float k[8] = {a.x, a.y, b.x, b.y, c.x, c.y, e.x, e.y};
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        const float4 qa = *(const float4 *)(qs + g * HD + 8 * i), qb = *(const float4 *)(qs + g * HD + 8 * i + 4);
                        const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                        for (int l = 0; l < 8; l++) lanes[g][l] = fmaf(k[l], qv[l], lanes[g][l]);
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < NG; j++) {
                    uint32_t kw[8];
                    const float dk = kblock<T>(row, j, kw);
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        const uint4 qa = *(const uint4 *)((const int8_t *)qs + g * HD + 32 * j);
                        const uint4 qb = *(const uint4 *)((const int8_t *)qs + g * HD + 32 * j + 16);
                        const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
                        attn_q8_block(lanes[g], kw, qw, __fmul_rn(dk, qdm[g * NG + j]));
                    }
                }
            }
            const bool ok = valid[r];
#pragma unroll
            for (int g = 0; g < G; g++) ps[r * AD_GMAX + g] = ok ? __fmul_rn(attn_reduce8(lanes[g]), d.scale) : -INFINITY;
        }
    }
    __syncthreads();

    // -- 3. softmax pieces: warp per head (attn.cuh attn_chunk_softmax)
    for (int g = warp; g < G; g += AD_THREADS / 32) {
        float l;
        const float mx = attn_chunk_softmax(ps + g, AD_GMAX, nv, T == LKV_TYPE_F16, &l);
        if (lane == 0) { pm[g] = mx; pl[g] = l; }
    }
    cp_wait<0>();
    __syncthreads();

    // -- 4. o = sum p v: thread (l8 = tid & 7, dg = tid >> 3) is lane l8 of the
    //    CPU's 8 position lanes (rows l8, l8 + 8, ..., an FMA chain each) for
    //    dims [ND dg, ND dg + ND); the lanes are reduce8'ed by shuffles
    const int l8 = tid & 7, dg = tid >> 3;
    float o[G][ND];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < ND; i++) o[g][i] = 0.f;
#pragma unroll 2
    for (int r = l8; r < nv; r += 8) {
        float v[ND];
#pragma unroll
        for (int k4 = 0; k4 < ND / 4; k4++) {
            const float dv = vquad<T>(Vs + (size_t)r * ge.pitch_v, dg * (ND / 4) + k4, v + 4 * k4);
            if constexpr (T != LKV_TYPE_F16)
#pragma unroll
                for (int i = 0; i < 4; i++) v[4 * k4 + i] = __fmul_rn(v[4 * k4 + i], dv);   /* the CPU's to_float */
        }
        const float4 pa = *(const float4 *)(ps + r * AD_GMAX), pb = *(const float4 *)(ps + r * AD_GMAX + 4);
        const float pr[8] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int i = 0; i < ND; i++) o[g][i] = fmaf(v[i], pr[g], o[g][i]);
    }
    attn_store_partial<G, ND>(o, wbase, wstride, dg, l8, tid, pm, pl);
}

static int odd8(int bytes) {
    int p = (bytes + 7) & ~7;
    if (((p >> 3) & 1) == 0) p += 8;
    return p;
}

template <int T, int HD, int G, int CU>
static void launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const ad_geom &ge,
                   size_t smem) {
    static bool attr = false;
    if (!attr) {
        cudaFuncSetAttribute(attn_dec_kernel<T, HD, G, CU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             AD_SMEM_MAX);
        attr = true;
    }
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (HD + 2) * sizeof(float);
    const int batch = (int)(b->attn_ws_bytes / per_chunk);
    const attn_dyn dy = attn_dyn_of(b, d);
    for (int c0 = d->chunk_lo; c0 < d->chunk_hi; c0 += batch) {
        const int nc = min(batch, d->chunk_hi - c0);
        attn_dec_kernel<T, HD, G, CU><<<dim3(nc, d->n_head_kv, d->n_q), AD_THREADS, smem, b->stream>>>(
            b->attn_ws, q, *d, ge, dy, c0, nc);
        LKV_CUDA_LAUNCHED(b, "attn_dec");
        attn_dec_fold(b, st, d->n_head, HD, d->n_q, nc);
    }
}

template <int T, int HD, int G>
static void launch_cu(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const ad_geom &ge,
                      size_t smem, int cu) {
    if (cu == 8) launch<T, HD, G, 8>(b, st, q, d, ge, smem);
    else launch<T, HD, G, 2>(b, st, q, d, ge, smem);
}

template <int T, int HD>
static bool launch_g(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const ad_geom &ge,
                     size_t smem, int cu) {
    switch (ge.G) {
    case 1: launch_cu<T, HD, 1>(b, st, q, d, ge, smem, cu); return true;
    case 2: launch_cu<T, HD, 2>(b, st, q, d, ge, smem, cu); return true;
    case 3: launch_cu<T, HD, 3>(b, st, q, d, ge, smem, cu); return true;
    case 4: launch_cu<T, HD, 4>(b, st, q, d, ge, smem, cu); return true;
    case 8: launch_cu<T, HD, 8>(b, st, q, d, ge, smem, cu); return true;
    default: return false;
    }
}

/* decode attention through this file's kernels; false (nothing enqueued) when
 * the shape or types are not covered: the choice depends on the shape only */
bool lkv_cuda_attn_dec(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d,
                       size_t rbk, size_t rbv) {
    const char *env = getenv("LKV_CUDA_ATTN");   /* read per call: tests switch it */
    if (env && env[0] == '0') return false;
    const bool old = env && !strcmp(env, "dec-old");
    if (!old && !(env && !strcmp(env, "ring")) && lkv_cuda_attn_dec_ring2(b, st, q, d, rbk, rbv)) return true;
    if (!old && lkv_cuda_attn_dec_ring(b, st, q, d, rbk, rbv)) return true;
    const int hd = d->head_dim, T = d->type_k;
    if (d->type_v != T || (T != LKV_TYPE_F16 && T != LKV_TYPE_Q8_0 && T != LKV_TYPE_Q4_0)) return false;
    if (hd != 64 && hd != 128) return false;
    const int Gq = d->n_head_kv > 0 && d->n_head % d->n_head_kv == 0 ? d->n_head / d->n_head_kv : 0;
    if (((Gq < 1 || Gq > 4) && Gq != 8) || d->chunk > 1024) return false;
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (hd + 2) * sizeof(float);
    if (b->attn_ws_bytes / per_chunk < 1) return false;
    ad_geom ge;
    ge.G = d->n_head / d->n_head_kv;
    const int gb = T == LKV_TYPE_F16 ? 64 : T == LKV_TYPE_Q8_0 ? 34 : 18;
    ge.slice_k = ge.slice_v = hd / 32 * gb;
    ge.pitch_k = ge.pitch_v = odd8(ge.slice_k);
    ge.rbk = rbk;
    ge.rbv = rbv;
    const int C = d->chunk;
    ge.region0 = (int)(((size_t)C * ge.pitch_k + 15) & ~(size_t)15);
    const size_t smem = ge.region0 + (((size_t)C * ge.pitch_v + 15) & ~(size_t)15) + (AD_GMAX * hd + AD_GMAX * hd / 32 + (size_t)C * AD_GMAX + 2 * AD_GMAX) *
                        sizeof(float) + ((C + 15) & ~15) + 2 * (size_t)C * sizeof(void *) + 16;
    if (smem > AD_SMEM_MAX) return false;
    /* copy unit: 8 bytes when every row slice is 8-byte aligned, else 2 (same bits either way) */
    int cu = ge.slice_k % 8 == 0 && rbk % 8 == 0 && rbv % 8 == 0 ? 8 : 2;
    for (int i = 0; i < d->n_segs && cu == 8; i++)
        if (((uintptr_t)d->segs[i].k | (uintptr_t)d->segs[i].v) & 7) cu = 2;
#define L(TT, H) if (T == TT && hd == H) return launch_g<TT, H>(b, st, q, d, ge, smem, cu);
    L(LKV_TYPE_F16, 64) L(LKV_TYPE_F16, 128)
    L(LKV_TYPE_Q8_0, 64) L(LKV_TYPE_Q8_0, 128)
    L(LKV_TYPE_Q4_0, 64) L(LKV_TYPE_Q4_0, 128)
#undef L
    return false;
}
