/*
 * cuda/attn.cuh: what attn.cu and the decode kernels share: the CPU backend's
 * rounding points (cpu/attention.c) and the dynamic position of a replayed
 * step (common.cuh: dyn_pos).
 *
 * The query of a head goes to K's dot type, per 32-group, one lane per
 * element: f32 as is; f16 / bf16 rounded (to nearest even); q8_0 / q8_1 as
 * quant/legacy.c's quantize8: d = amax / 127, codes rint(x * (127 / amax)),
 * d rounded to f16, for q8_1 also s = f16(sum(codes) * d). Scores are the
 * CPU's 8-lane dots (attn_kv.cuh, attn.cu score_row) times the scale.
 * Within a chunk: w = exp(s - max) (ggml's polynomial, cpu/expf.h), l = the
 * f64 sum of reduce8's of 8 positions, p = w * (float)(1 / l), rounded to
 * f16 when V is f16, and o = reduce8 of 8 position lanes of FMA chains. The
 * running state holds the normalised o; fold is the CPU's, with libm's expf
 * (attn_expf_libm): W_a = l_a e^(m_a - M), W_b likewise,
 * o = (o_a W_a + o_b W_b) * (1 / (W_a + W_b)), each operation rounded.
 */
#ifndef LKV_CUDA_ATTN_CUH
#define LKV_CUDA_ATTN_CUH

#include "common.cuh"

/* dynamic position of a captured step: the kernels read *dpos once per block;
 * delta = *dpos - cap_pos0 moves every query by delta and gives segment dseg
 * (the one ending at the captured batch's end) delta more rows */
struct attn_dyn {
    const int32_t *dpos;      /* NULL: no offset */
    int32_t cap_pos0;
    int32_t dseg;             /* -1: none */
};

/* host: the replay offset of a call (none outside capture). The segment
 * that grows is the one ending where the captured batch ends (in a captured
 * decode step the only one); found from the desc alone, so the same at
 * capture and at every replay */
static inline attn_dyn attn_dyn_of(const lkv_bctx *b, const lkv_attn_desc *d) {
    attn_dyn dy = {b->dyn_pos, b->cap_pos0, -1};
    if (!dy.dpos) return dy;
    for (int i = 0; i < d->n_segs && dy.dseg < 0; i++)
        if (d->segs[i].pos0 + d->segs[i].n == d->q_pos0 + d->n_q) dy.dseg = i;
    return dy;
}

static __device__ __forceinline__ int attn_delta(const attn_dyn &dy) {
    return dy.dpos ? *dy.dpos - dy.cap_pos0 : 0;
}

/* rows of segment i, with the replay offset */
static __device__ __forceinline__ int attn_seg_n(const lkv_attn_desc &d, int i, const attn_dyn &dy,
                                                 int delta) {
    return d.segs[i].n + (i == dy.dseg ? delta : 0);
}

/* the K and V rows of position p, in whichever segment holds it (the replay
 * offset included); false, and NULLs, when none does */
static __device__ __forceinline__ bool attn_locate(const lkv_attn_desc &d, const attn_dyn &dy, int delta, int p,
                                                   size_t rbk, size_t rbv, const uint8_t *&k,
                                                   const uint8_t *&v) {
    for (int i = 0; i < d.n_segs; i++) {
        const lkv_kv_seg &sg = d.segs[i];
        if (p >= sg.pos0 && p < sg.pos0 + attn_seg_n(d, i, dy, delta)) {
            k = (const uint8_t *)sg.k + (size_t)(p - sg.pos0) * rbk;
            v = (const uint8_t *)sg.v + (size_t)(p - sg.pos0) * rbv;
            return true;
        }
    }
    k = v = NULL;
    return false;
}

/* a decode block's rows [p0, p0 + nv): valid[r] and the K / V row pointers
 * (NULL where no segment holds the row), rows strided over NT threads */
template <int NT>
static __device__ __forceinline__ void attn_locate_rows(int tid, const lkv_attn_desc &d, const attn_dyn &dy, int delta,
                                                        int p0, int nv, size_t rbk, size_t rbv, uint8_t *valid,
                                                        const uint8_t **kptr, const uint8_t **vptr) {
    for (int r = tid; r < nv; r += NT) {
        const uint8_t *kr, *vr;
        valid[r] = attn_locate(d, dy, delta, p0 + r, rbk, rbv, kr, vr);
        kptr[r] = kr;
        vptr[r] = vr;
    }
}

/* a decode block's G partials go to wbase[g * wstride] (ws layout: attn.cu);
 * a chunk that starts past the query gets empty partials (m = -inf) and the
 * block has nothing more to do: false */
template <int HD, int G>
static __device__ __forceinline__ bool attn_chunk_slot(int tid, float *ws, const lkv_attn_desc &d, int qi, int h0, int x,
                                                       int nc, int p0, int qpos, float *&wbase, size_t &wstride) {
    wbase = ws + (((size_t)qi * d.n_head + h0) * nc + x) * (HD + 2);
    wstride = (size_t)nc * (HD + 2);
    if (p0 <= qpos) return true;
    if (tid < G) wbase[tid * wstride] = -INFINITY;
    return false;
}

static __device__ __forceinline__ float attn_f16r(float x) { return __half2float(__float2half_rn(x)); }

/* the CPU's 8-lane horizontal sum (cpu/attention.c reduce8, quant/simd.h
 * hsum_ps): t_i = a_{i+4} + a_i, then (t0 + t2) + (t1 + t3) */
static __device__ __forceinline__ float attn_reduce8(const float *a) {
    const float t0 = __fadd_rn(a[4], a[0]), t1 = __fadd_rn(a[5], a[1]);
    const float t2 = __fadd_rn(a[6], a[2]), t3 = __fadd_rn(a[7], a[3]);
    return __fadd_rn(__fadd_rn(t0, t2), __fadd_rn(t1, t3));
}

/* the same sum when lane l (= lane & 7) of 8 consecutive lanes holds a_l:
 * xor 4 forms t_(l&3), xor 2 the pair sums, xor 1 their sum; every add is
 * one of the CPU's (operands swapped at most: exact); all 8 lanes get it */
static __device__ __forceinline__ float attn_reduce8_shfl(float v) {
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
}

/* 2^(i/32) rounded to double, minus i << 47 (i.e. i/32 off the exponent):
 * the table of glibc's expf (computed here with mpmath, not copied) */
__device__ __constant__ static const uint64_t attn_exp2_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};

/* expf as the CPU's libm computes it, for x <= 0 (the fold's m - M): glibc's
 * algorithm (x/ln2 = k/32 + r, 2^(k/32) from the table, a cubic in r, all in
 * f64), with the fused operations of its FMA build, which x86-64 machines
 * with FMA run. Not correctly rounded: glibc 2.36's expf differs from the
 * correctly rounded value for ~1e-4 of inputs, and (float)exp((double)x)
 * with them. Checked against glibc 2.36's expf on every negative float
 * (host emulation of these exact operations: all 2^31 equal). */
static __device__ __forceinline__ float attn_expf_libm(float x) {
    if (x < -0x1.9fe368p6f) return 0.f;   /* below log(2^-150), and -inf: 0 */
    const double xd = x, il32 = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
    double kd = __fma_rn(il32, xd, shift);
    const uint64_t ki = (uint64_t)__double_as_longlong(kd);
    kd = __dsub_rn(kd, shift);
    const double r = __fma_rn(il32, xd, -kd);
    const double s = __longlong_as_double((long long)(attn_exp2_tab[ki & 31] + (ki << 47)));
    const double c0 = 0x1.c6af84b912394p-5 / 32768, c1 = 0x1.ebfce50fac4f3p-3 / 1024,
                 c2 = 0x1.62e42ff0c52d6p-1 / 32;
    const double z = __fma_rn(c0, r, c1), r2 = __dmul_rn(r, r);
    const double y = __fma_rn(z, r2, __fma_rn(c2, r, 1.0));
    return __double2float_rn(__dmul_rn(y, s));
}

/* A chunk's softmax for one head, by one warp over its n scores s[r * stride]
 * (r from the chunk start), the CPU's order: m = max s; w = exp(s - m); per
 * group of 8 positions reduce8 of the w (0 past n), the group sums added in
 * f64 in order; p = w * (float)(1 / l), rounded to f16 when f16v. Row r is
 * lane r & 7 of its group: 32 lane-strided rows are 4 groups, reduced by
 * shuffles. The scores are replaced by p. Returns m, *l = (float)l. */
static __device__ __forceinline__ float attn_chunk_softmax(float *s, int stride, int n, bool f16v,
                                                           float *l) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int r = lane; r < n; r += 32) mx = fmaxf(mx, s[r * stride]);
    mx = lkv_warp_max(mx);
    double sum = 0.0;
    for (int r0 = 0; r0 < n; r0 += 32) {
        const int r = r0 + lane;
        float w = 0.f;
        if (r < n) {
            const float v = s[r * stride];
            w = v == -INFINITY ? 0.f : lkv_expf_cpu(__fsub_rn(v, mx));   /* -inf: a row in no segment */
            s[r * stride] = w;
        }
        const float gs = attn_reduce8_shfl(w);
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const float ga = __shfl_sync(0xffffffffu, gs, 8 * a);
            if (r0 + 8 * a < n) sum = __dadd_rn(sum, (double)ga);
        }
    }
    const float inv = sum > 0.0 ? __double2float_rn(__ddiv_rn(1.0, sum)) : 0.f;
    for (int r = lane; r < n; r += 32) {   /* the rows this lane wrote */
        const float pr = __fmul_rn(s[r * stride], inv);
        s[r * stride] = f16v ? attn_f16r(pr) : pr;
    }
    *l = __double2float_rn(sum);
    return mx;
}

/* the dot type of K: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q8_1 */
static __host__ __device__ __forceinline__ int attn_qkind(int type_k) {
    switch (type_k) {
    case LKV_TYPE_F16: return 1;
    case LKV_TYPE_BF16: return 2;
    case LKV_TYPE_Q8_0: case LKV_TYPE_Q4_0: case LKV_TYPE_Q5_0: case LKV_TYPE_IQ4_NL: return 3;
    case LKV_TYPE_Q4_1: case LKV_TYPE_Q5_1: return 4;
    default: return 0;
    }
}

/* element x (this lane's) of one 32-group of the query in K's dot type; the
 * whole warp calls it for one group. qd: the group's scale (1 for the float
 * types), qs: its q8_1 sum term (else 0). */
static __device__ __forceinline__ float attn_qconv(int kind, float x, float &qd, float &qs) {
    qd = 1.f;
    qs = 0.f;
    if (kind == 0) return x;
    if (kind == 1) return attn_f16r(x);
    if (kind == 2) return __bfloat162float(__float2bfloat16_rn(x));
    const float amax = lkv_warp_max(fabsf(x));
    const float dd = __fdiv_rn(amax, 127.f);
    const float id = amax != 0.f ? __fdiv_rn(127.f, amax) : 0.f;
    const float c = rintf(__fmul_rn(x, id));
    qd = attn_f16r(dd);
    if (kind == 4) qs = attn_f16r(__fmul_rn(lkv_warp_sum(c), dd));   /* codes: exact sum */
    return c;
}

/* a decode block's G query heads h0.. of query qi in K's dot type (T: f16
 * as floats, else q8_0 codes as bytes, QP bytes apart) with their scales
 * qdm[g * (HD / 32) + group]: one warp per 32-group, NW warps */
template <int T, int HD, int G, int NW, int QP>
static __device__ __forceinline__ void attn_stage_query(int warp, int lane, const float *q, const lkv_attn_desc &d,
                                                        int qi, int h0, float *qs, float *qdm) {
    constexpr int NG = HD / 32;
    for (int t = warp; t < G * NG; t += NW) {
        const int g = t / NG, e = (t % NG) * 32 + lane;
        float qd, qsum;
        const float c = attn_qconv(T == LKV_TYPE_F16 ? 1 : 3, q[((size_t)qi * d.n_head + h0 + g) * HD + e], qd, qsum);
        if constexpr (T == LKV_TYPE_F16) qs[g * HD + e] = c;
        else ((int8_t *)qs)[g * QP + e] = (int8_t)c;
        if (lane == 0) qdm[t] = qd;
    }
}

/* The CPU's fold of a chunk's (mc, lc, oc) into the state (m, l, o), in two
 * steps that every fold kernel shares (the same bits in each): the factors,
 * which also update (m, l), then per element of o. kind 0: an empty chunk
 * (nothing changes), 1: the first non-empty one (copied), 2: merged. */
struct attn_fw { float wa, wb, il; int kind; };

static __device__ __forceinline__ attn_fw attn_fold_w(float &m, float &l, float mc, float lc) {
    attn_fw f = {0.f, 0.f, 0.f, 0};
    if (mc == -INFINITY) return f;
    if (m == -INFINITY) { f.kind = 1; m = mc; l = lc; return f; }
    const float mn = fmaxf(m, mc);
    f.wa = __fmul_rn(l, attn_expf_libm(__fsub_rn(m, mn)));
    f.wb = __fmul_rn(lc, attn_expf_libm(__fsub_rn(mc, mn)));
    const float s = __fadd_rn(f.wa, f.wb);
    f.il = __frcp_rn(s);   /* = 1.f / s, correctly rounded */
    f.kind = 2;
    l = s;
    m = mn;
    return f;
}

static __device__ __forceinline__ float attn_fold_o(float o, float oc, const attn_fw &f) {
    if (f.kind == 0) return o;
    if (f.kind == 1) return oc;
    return __fmul_rn(__fadd_rn(__fmul_rn(o, f.wa), __fmul_rn(oc, f.wb)), f.il);
}

#endif
