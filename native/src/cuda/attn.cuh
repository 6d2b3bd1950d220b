/*
 * cuda/attn.cuh: what attn.cu and attn_dec.cu share: the CPU backend's
 * rounding points (cpu/attention.c) and the dynamic position of a replayed
 * step (common.cuh: dyn_pos).
 *
 * The query of a head goes to K's dot type, per 32-group, one lane per
 * element: f32 as is; f16 / bf16 rounded (to nearest even); q8_0 / q8_1 as
 * quant/legacy.c's quantize8: d = amax / 127, codes rint(x * (127 / amax)),
 * d rounded to f16, for q8_1 also s = f16(sum(codes) * d). A score is then
 * sum over 32-groups of (d_k * d_q) * isum (+ m_k * s_q), times the scale.
 * Within a chunk: w = exp(s - max) (ggml's polynomial, cpu/expf.h), l = sum
 * of w (in f64), p = w * (float)(1 / l), rounded to f16 when V is f16, and
 * the chunk's o = sum p v, normalised. The running state holds the
 * normalised o; fold is the CPU's: W_a = l_a e^(m_a - M), W_b likewise,
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

static __device__ __forceinline__ float attn_f16r(float x) { return __half2float(__float2half_rn(x)); }

/* cpu/expf.h's ggml_like_expf, operation for operation */
static __device__ __forceinline__ float attn_exp(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = __fsub_rn(z, r);
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float k = __uint_as_float(e + 0x3f800000u);
    const float u = __fmul_rn(b, b);
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, __fmul_rn(0x1.ffffecp-1f, b));
    if (!(fabsf(n) > 126.0f)) return fmaf(j, k, k);
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u), s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f) return __fmul_rn(s1, s1);
    return __fmul_rn(fmaf(s2, j, s2), s1);
}

static __device__ __forceinline__ double attn_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A chunk's softmax for one head, by one warp over its n scores s[r * stride]
 * (the CPU's: w = exp(s - m), l = sum w in f64, p = w * (float)(1 / l), rounded
 * to f16 when f16v); the scores are replaced by p in place. Returns m, *l = l. */
static __device__ __forceinline__ float attn_chunk_softmax(float *s, int stride, int n, bool f16v,
                                                           float *l) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int r = lane; r < n; r += 32) mx = fmaxf(mx, s[r * stride]);
    mx = lkv_warp_max(mx);
    double sum = 0.0;
    for (int r = lane; r < n; r += 32) {
        const float v = s[r * stride];
        const float e = v == -INFINITY ? 0.f : attn_exp(__fsub_rn(v, mx));
        s[r * stride] = e;
        sum += (double)e;
    }
    sum = attn_warp_sum_d(sum);
    const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.f;
    for (int r = lane; r < n; r += 32) {
        const float pr = __fmul_rn(s[r * stride], inv);
        s[r * stride] = f16v ? attn_f16r(pr) : pr;
    }
    *l = (float)sum;
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
    f.wa = __fmul_rn(l, expf(__fsub_rn(m, mn)));
    f.wb = __fmul_rn(lc, expf(__fsub_rn(mc, mn)));
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
