/*
 * cuda/attn_rows.cuh: attn.cu's block layout and its reads of single KV rows:
 * the shared-memory carve-up of one (query, head group) block, one K row's
 * scores against the group's heads (score_row, the CPU's dot per K type), and
 * a thread's V values of one row (v_pairs: 2 dims in each of 4 blocks;
 * oct_load / oct_vals: 8 consecutive dims of q8_0). Only attn.cu includes it.
 */
#ifndef LKV_CUDA_ATTN_ROWS_CUH
#define LKV_CUDA_ATTN_ROWS_CUH

#include "attn_kv.cuh"

// ---------------------------------------------------------------- layout and scores

enum { ATT_THREADS = 128, ATT_WARPS = ATT_THREADS / 32, GMAX = 8, ATT_SMEM_MAX = 160 * 1024 };

struct attn_geom {
    int G_total, n_sub;       /* heads per KV head; head groups per KV head */
    int hdT;                  /* dims a thread column covers in the fold */
    size_t rbk, rbv;          /* row bytes of K and V */
    size_t hbk, hbv;          /* bytes of one KV head's slice of a row */
};

/* qf (G, hd) floats: the query in K's dot type, or its q8 codes as bytes |
 * qd, qs (G, hd / 32): q8 scales and sums | s (G, C) | comb (G, hd) | pm, pl (GMAX) | kptr, vptr (C) */
struct attn_smem_ptrs { float *qf, *qd, *qs, *s, *comb, *pm, *pl; const uint8_t **kptr, **vptr; };

static size_t attn_smem_bytes(int G, int chunk, int hd) {
    return ((size_t)G * hd * 2 + (size_t)G * hd / 16 + (size_t)G * chunk + 2 * GMAX) * sizeof(float) +
           2 * (size_t)chunk * sizeof(void *) + 16;
}

static __device__ __forceinline__ attn_smem_ptrs carve(float *sm, int G, int C, int hd) {
    attn_smem_ptrs p;
    p.qf = sm;
    p.qd = p.qf + G * hd;
    p.qs = p.qd + G * hd / 32;
    p.s = p.qs + G * hd / 32;
    p.comb = p.s + G * C;
    p.pm = p.comb + G * hd;
    p.pl = p.pm + GMAX;
    size_t off = ((size_t)(p.pl + GMAX - sm) * sizeof(float) + 15) & ~(size_t)15;
    p.kptr = (const uint8_t **)((char *)sm + off);
    p.vptr = p.kptr + C;
    return p;
}

/* 16 elements [i, i + 16) of an f32 / bf16 K head slice */
template <int T>
static __device__ __forceinline__ void k16(const uint8_t *kr, int i, float *k) {
    if constexpr (T == LKV_TYPE_F32) {
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const float4 v = ((const float4 *)(kr + 4 * (size_t)i))[h];
            k[4 * h] = v.x; k[4 * h + 1] = v.y; k[4 * h + 2] = v.z; k[4 * h + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint4 v = ((const uint4 *)(kr + 2 * (size_t)i))[h];
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int t = 0; t < 4; t++) {
                k[8 * h + 2 * t] = __uint_as_float(w[t] << 16);
                k[8 * h + 2 * t + 1] = __uint_as_float(w[t] & 0xffff0000u);
            }
        }
    }
}

/*
 * Scores of one K row (kr: its KV head's slice) against the G query heads,
 * into s[g * C + r], each the CPU's vec_dot times the scale:
 * - f32 / bf16 (quant/float_types.c): two 8-lane FMA chains over 16-element
 *   steps, added lane-wise, reduce8;
 * - f16 (cpu/attention.c dot8_f16): one 8-lane FMA chain, lane l takes
 *   elements l, l + 8, ...; reduce8;
 * - quantized: attn_kv.cuh's block lanes, reduce8 (+ the m_k s_q chain).
 */
template <int T, int GM = GMAX>
static __device__ __forceinline__ void score_row(const uint8_t *kr, const attn_smem_ptrs &sp, int G, int hd,
                                                 float scale, int C, int r) {
    const int nb = hd / 32;
    if constexpr (T == LKV_TYPE_F32 || T == LKV_TYPE_BF16) {
        for (int g = 0; g < G; g++) {   /* heads outside: 16 lanes each */
            float a0[8], a1[8];
#pragma unroll
            for (int l = 0; l < 8; l++) a0[l] = a1[l] = 0.f;
            for (int i = 0; i < hd; i += 16) {
                float k[16];
                k16<T>(kr, i, k);
                const float *q = sp.qf + g * hd + i;
#pragma unroll
                for (int l = 0; l < 8; l++) {
                    a0[l] = fmaf(k[l], q[l], a0[l]);
                    a1[l] = fmaf(k[8 + l], q[8 + l], a1[l]);
                }
            }
#pragma unroll
            for (int l = 0; l < 8; l++) a0[l] = __fadd_rn(a0[l], a1[l]);
            sp.s[g * C + r] = __fmul_rn(attn_reduce8(a0), scale);
        }
    } else {
        float lanes[GM][8], summ[GM];
#pragma unroll
        for (int g = 0; g < GM; g++) {
            summ[g] = 0.f;
#pragma unroll
            for (int l = 0; l < 8; l++) lanes[g][l] = 0.f;
        }
        /* q8_0 / q4_0: 8-byte loads (attn_kv.cuh kblock) where the slice
         * allows, the same bytes as the 2-byte loads */
        bool k8 = false;
        if constexpr (T == LKV_TYPE_Q8_0 || T == LKV_TYPE_Q4_0) k8 = kblock_fits<T>(kr, nb);
        for (int j = 0; j < nb; j++) {
            if constexpr (T == LKV_TYPE_F16) {
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    const uint4 u = ((const uint4 *)(kr + 64 * (size_t)j))[h];
                    const __half2 *hh = (const __half2 *)&u;
                    float k[8];
#pragma unroll
                    for (int t = 0; t < 4; t++) {
                        const float2 f = __half22float2(hh[t]);
                        k[2 * t] = f.x; k[2 * t + 1] = f.y;
                    }
#pragma unroll
                    for (int g = 0; g < GM; g++) {
                        if (g >= G) break;
                        const float *q = sp.qf + g * hd + 32 * j + 8 * h;
#pragma unroll
                        for (int l = 0; l < 8; l++) lanes[g][l] = fmaf(k[l], q[l], lanes[g][l]);
                    }
                }
            } else {
                uint32_t kw[8];
                float dk, mk;
                if (k8) {   /* (false for the other types: kblock is q8_0 / q4_0 only) */
                    if constexpr (T == LKV_TYPE_Q8_0 || T == LKV_TYPE_Q4_0) dk = kblock<T>(kr, j, kw);
                    mk = 0.f;
                } else {
                    attn_kwords<T>(attn_fetch2{(const uint16_t *)(kr + (size_t)j * cblk<T>::bytes)}, kw, dk, mk);
                }
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    if (g >= G) break;
                    const uint32_t *qw = (const uint32_t *)((const int8_t *)sp.qf + g * hd + 32 * j);
                    attn_q8_block(lanes[g], kw, qw, __fmul_rn(dk, sp.qd[g * nb + j]));
                    if constexpr (attn_kq8<T>() == 2) summ[g] = __fadd_rn(summ[g], __fmul_rn(mk, sp.qs[g * nb + j]));
                }
            }
        }
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
            float sc = attn_reduce8(lanes[g]);
            if constexpr (attn_kq8<T>() == 2) sc = __fadd_rn(sc, summ[g]);
            sp.s[g * C + r] = __fmul_rn(sc, scale);
        }
    }
}

/* 2 * kn dims of V (elements dg * 2 + 32 k + {0, 1}, k0 <= k < k0 + kn) */
template <int T>
static __device__ __forceinline__ void v_pairs(const uint8_t *vr, int dg, int k0, int kn, float *v) {
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (k < kn) attn_vpair<T>(vr, dg * 2 + 32 * (k0 + k), v[2 * k], v[2 * k + 1]);
}

/* q8_0 V: dims 32 k0 + 8 dg .. + 7 (block k0 + dg / 4, codes 8 (dg % 4) ..
 * + 7) as to_float (code * d), when dg / 4 < kn (else zeros). oct_load does
 * the loads (the codes by one or two 4-byte loads, 2-byte ones at the ends
 * when they sit 2 bytes off, never past the block), oct_vals the conversion,
 * so that a thread can have several rows' loads in flight */
struct oct_raw { uint32_t w0, w1; float d; };

static __device__ __forceinline__ oct_raw oct_load(const uint8_t *vr, int dg, int k0, int kn) {
    oct_raw o = {0u, 0u, 0.f};
    if ((dg >> 2) >= kn) return o;
    const uint8_t *bp = vr + (size_t)(k0 + (dg >> 2)) * 34, *a = bp + 2 + 8 * (dg & 3);
    o.d = __half2float(__ushort_as_half(*(const uint16_t *)bp));
    if (((uintptr_t)a & 3) == 0) {
        o.w0 = *(const uint32_t *)a;
        o.w1 = *(const uint32_t *)(a + 4);
    } else {
        const uint32_t lo = *(const uint16_t *)a, mid = *(const uint32_t *)(a + 2), hi = *(const uint16_t *)(a + 6);
        o.w0 = lo | mid << 16;
        o.w1 = mid >> 16 | hi << 16;
    }
    return o;
}

static __device__ __forceinline__ void oct_vals(const oct_raw &o, float *v) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i] = __fmul_rn((float)(int8_t)(o.w0 >> 8 * i), o.d);
        v[4 + i] = __fmul_rn((float)(int8_t)(o.w1 >> 8 * i), o.d);
    }
}

#endif
