/*
 * cuda/to_type.cu: dst (n_rows, row_bytes(type, n_elems)) = src (n_rows, n_elems)
 * converted to a KV type. One thread quantizes one 32-element block, in the
 * same order and with the same rounding as the CPU reference quantizers
 * (quant/legacy.c: scale from the block's extreme value, f16 scale,
 * truncating or round-half-away conversions as each format defines; products
 * and sums explicitly rounded, as the CPU builds with -ffp-contract=off), so a
 * KV row written on the GPU has the CPU's bytes for the same input floats.
 */
#include "common.cuh"

// ---------------------------------------------------------------- quantizers (one block of 32)

/* nearest of the 16 iq4_nl levels (the lower one on ties, as the CPU picks) */
static __device__ int iq4nl_nearest(float v) {
    int best = 0;
    float err = fabsf(v - lkv_iq4nl_levels[0]);
    for (int k = 1; k < 16; k++) {
        const float e = fabsf(v - lkv_iq4nl_levels[k]);
        if (e < err) { err = e; best = k; }
    }
    return best;
}

/* weighted least-squares fit (weights x^2) of the codes `id` picks */
static __device__ void iq4nl_fit(const float *x, float id, float *sumqx, float *sumq2) {
    float sqx = 0.f, sq2 = 0.f;
    for (int j = 0; j < 32; j++) {
        const float w = __fmul_rn(x[j], x[j]);
        const float q = lkv_iq4nl_levels[iq4nl_nearest(__fmul_rn(id, x[j]))];
        sqx = __fadd_rn(sqx, __fmul_rn(__fmul_rn(w, q), x[j]));
        sq2 = __fadd_rn(sq2, __fmul_rn(__fmul_rn(w, q), q));
    }
    *sumqx = sqx;
    *sumq2 = sq2;
}

/* iq4_nl: the CPU's rule: fit from the extreme, 15 trial inverse scales,
 * keep the least-squares best; codes chosen with the stored f16 scale. */
static __device__ void quant_iq4nl(const float *x, ciq4nl *y) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    float scale = 0.f;
    if (fabsf(max) >= 1e-15f) {
        float sqx, sq2;
        iq4nl_fit(x, -(float)lkv_iq4nl_levels[0] / max, &sqx, &sq2);
        scale = sq2 > 0.f ? sqx / sq2 : max / -(float)lkv_iq4nl_levels[0];
        float best = __fmul_rn(scale, sqx);
        for (int t = -7; t <= 7; t++) {
            iq4nl_fit(x, (float)(t + lkv_iq4nl_levels[0]) / max, &sqx, &sq2);
            if (sq2 > 0.f && __fmul_rn(sqx, sqx) > __fmul_rn(best, sq2)) {
                scale = sqx / sq2;
                best = __fmul_rn(scale, sqx);
            }
        }
    }
    y->d = __float2half_rn(scale);
    const float d = __half2float(y->d);
    const float id = d != 0.f ? 1.f / d : 0.f;
    for (int j = 0; j < 16; j++)
        y->qs[j] = (uint8_t)(iq4nl_nearest(__fmul_rn(id, x[j])) | iq4nl_nearest(__fmul_rn(id, x[j + 16])) << 4);
}

/* 32 five-bit codes: low nibbles in qs (j and j + 16 share a byte), the
 * fifth bits in qh, code j at bit j */
static __device__ void pack_q5(const uint8_t *q, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4);
        h |= (uint32_t)(q[j] >> 4) << j;
        h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

template <int T>
static __device__ void quant32(const float *x, uint8_t *dst) {
    if constexpr (T == LKV_TYPE_F32) {
        for (int j = 0; j < 32; j++) ((float *)dst)[j] = x[j];
    } else if constexpr (T == LKV_TYPE_F16) {
        for (int j = 0; j < 32; j++) ((__half *)dst)[j] = __float2half_rn(x[j]);
    } else if constexpr (T == LKV_TYPE_BF16) {
        for (int j = 0; j < 32; j++) ((__nv_bfloat16 *)dst)[j] = __float2bfloat16_rn(x[j]);
    } else if constexpr (T == LKV_TYPE_Q8_0) {
        cq8_0 *y = (cq8_0 *)dst;
        float amax = 0.f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
        y->d = __float2half_rn(d);
        for (int j = 0; j < 32; j++) y->qs[j] = (int8_t)roundf(__fmul_rn(x[j], id));
    } else if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_Q5_0) {
        constexpr int H = T == LKV_TYPE_Q4_0 ? 8 : 16, QMAX = 2 * H - 1;
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < 32; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        const float d = max / -H, id = d != 0.f ? 1.f / d : 0.f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)min(QMAX, (int)(int8_t)__fadd_rn(__fmul_rn(x[j], id), H + 0.5f));
        if constexpr (T == LKV_TYPE_Q4_0) {
            cq4_0 *y = (cq4_0 *)dst;
            y->d = __float2half_rn(d);
            for (int j = 0; j < 16; j++) y->qs[j] = q[j] | (q[j + 16] << 4);
        } else {
            cq5_0 *y = (cq5_0 *)dst;
            y->d = __float2half_rn(d);
            pack_q5(q, y->qs, y->qh);
        }
    } else if constexpr (T == LKV_TYPE_Q4_1 || T == LKV_TYPE_Q5_1) {
        constexpr int QMAX = T == LKV_TYPE_Q4_1 ? 15 : 31;
        float mn = x[0], mx = x[0];
        for (int j = 1; j < 32; j++) { mn = fminf(mn, x[j]); mx = fmaxf(mx, x[j]); }
        const float d = (mx - mn) / QMAX, id = d != 0.f ? 1.f / d : 0.f;
        uint8_t q[32];
        for (int j = 0; j < 32; j++) q[j] = (uint8_t)min(QMAX, (int)(int8_t)__fadd_rn(__fmul_rn(__fsub_rn(x[j], mn), id), 0.5f));
        if constexpr (T == LKV_TYPE_Q4_1) {
            cq4_1 *y = (cq4_1 *)dst;
            y->d = __float2half_rn(d);
            y->m = __float2half_rn(mn);
            for (int j = 0; j < 16; j++) y->qs[j] = q[j] | (q[j + 16] << 4);
        } else {
            cq5_1 *y = (cq5_1 *)dst;
            y->d = __float2half_rn(d);
            y->m = __float2half_rn(mn);
            pack_q5(q, y->qs, y->qh);
        }
    } else if constexpr (T == LKV_TYPE_IQ4_NL) {
        quant_iq4nl(x, (ciq4nl *)dst);
    }
}

// ---------------------------------------------------------------- kernel

enum { TT_THREADS = 128 };

/* one thread per 32-element block of one row; in a captured step (dpos set)
 * the rows land (*dpos - cap_pos0) rows after dst: the KV rows of the
 * position the step is replayed at (common.cuh) */
template <int T>
__global__ void to_type_kernel(uint8_t *dst, const float *src, int64_t n_blocks, int n_elems,
                               const int32_t *dpos, int32_t cap_pos0) {
    const int64_t i = blockIdx.x * (int64_t)TT_THREADS + threadIdx.x;
    if (i >= n_blocks) return;
    const int per_row = n_elems / 32;
    const int64_t row = i / per_row;
    const int g = (int)(i % per_row);
    const size_t row_bytes = (size_t)per_row * group_bytes<T>();
    if (dpos) dst += (int64_t)(*dpos - cap_pos0) * (int64_t)row_bytes;
    float x[32];
    const float4 *s = (const float4 *)(src + row * n_elems + 32 * g);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float4 v = s[k];
        x[4 * k] = v.x; x[4 * k + 1] = v.y; x[4 * k + 2] = v.z; x[4 * k + 3] = v.w;
    }
    quant32<T>(x, dst + row * row_bytes + (size_t)g * group_bytes<T>());
}

// ---------------------------------------------------------------- launcher / entry point

template <int T>
static void to_type_launch(lkv_bctx *b, void *dst, const float *src, int n_rows, int n_elems) {
    const int64_t nb = (int64_t)n_rows * (n_elems / 32);
    to_type_kernel<T><<<lkv_cdiv(nb, TT_THREADS), TT_THREADS, 0, b->stream>>>(
        (uint8_t *)dst, src, nb, n_elems, b->dyn_pos, b->cap_pos0);
    LKV_CUDA_LAUNCHED(b, "to_type");
}

void lkv_cuda_to_type(lkv_bctx *b, void *dst, int32_t type, const float *src, int n_rows, int n_elems) {
    if (n_rows <= 0) return;
    if (n_elems % 32) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "to_type: row length not a multiple of 32");
        return;
    }
    switch (type) {
#define X(T) case T: to_type_launch<T>(b, dst, src, n_rows, n_elems); break;
        LKV_CUDA_KV_TYPES(X)
#undef X
    default:
        lkv_cuda_note(b, cudaErrorInvalidValue, "to_type: unsupported KV type");
    }
}
