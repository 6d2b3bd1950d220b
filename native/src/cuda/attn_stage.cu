/*
 * cuda/attn_stage.cu: prefill attention over q8_0 / q4_0 / bf16 K or V on
 * sm_90a by way of f16. The chunks of a call are dequantized, a pass of whole
 * chunks at a time, into gemm_wg.cu's f16 scratch (the weights' f16 copy:
 * one stream, never both at once), and attn_mma.cu's warp-specialized f16
 * kernel folds each pass into the state.
 *
 * Why: inside the attention kernel every block of 128 (query, head) rows
 * dequantizes every K / V tile it reads, so a tile is decoded once per query
 * tile (16 times for 2048 queries of the 8B shape), and with q8_0 / q4_0 the
 * producer warps' decoding bounds the warp-specialized kernel (H200,
 * 2026-12-02, 512 queries at 128K: q8_0 149 TFLOP/s in the 8-warp kernel,
 * f16 237 in the warp-specialized one). Decoding a chunk once costs a read of
 * its bytes and a write of twice as many f16 bytes, a few microseconds per
 * thousand positions, against the milliseconds of the products.
 *
 * The values are those of the in-kernel path (code * scale in f32, rounded to
 * f16), and for a quantized K the query is first rounded by the CPU's q8_0
 * rule, as the CPU scores such rows (st_q8_round). A bf16 V goes to f16 (as
 * llama.cpp's CUDA flash attention takes it: exact for |v| in [2^-17, 65504],
 * larger values overflow) so that P is rounded to f16, not bf16; a bf16 K is
 * read where it lies (the kernel's bf16 scores, the CPU's operands), so the
 * staged call is (bf16 K, f16 V) (test_attn_mma: 9.0e-4 -> 1.2e-4 against
 * the CPU; docs/performance.md has the cost). The passes split the range at chunk boundaries and the kernel folds
 * chunk by chunk, so the state is the same bits however the call's range is
 * cut, into passes here or into calls by the streaming pool (attn_mma.cuh).
 * Segments are kept as they are (rows a segment does not hold stay absent);
 * an f16 side (K or V) is read where it lies.
 */
#include "act_quant.cuh"
#include "attn_mma.cuh"
#include "matmul.cuh"
#include "quant.cuh"

/* rows x kv elements of type T (rows row_bytes apart) -> f16 rows of kv */
template <int T>
static __global__ void st_to_f16(const uint8_t *__restrict__ src, size_t row_bytes, __half *__restrict__ dst,
                                 int rows, int kv) {
    const int ng = kv / 8;
    const size_t total = (size_t)rows * ng;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i / ng), g = (int)(i % ng);
        float y[8];
        dq8<T>(src + (size_t)r * row_bytes, g, y);
        *(uint4 *)(dst + (size_t)r * kv + 8 * g) = lkv_f16x8(y);
    }
}

/* q (n floats, whole 32-blocks) -> out, each block rounded by the CPU's q8_0
 * rule (legacy.c quantize8; act_quant.cuh): the CPU's attention scores a
 * q8_0 / q4_0 K row against the query in q8_0, so the query goes to the f16
 * kernel as those values (without it the scores left the CPU's by ~6e-3) */
static __global__ void st_q8_round(const float *__restrict__ q, float *__restrict__ out, size_t n) {
    const size_t warps = (size_t)gridDim.x * blockDim.x / 32;
    for (size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; w < n / 32; w += warps) {
        const float v = q[32 * w + (threadIdx.x & 31)];
        const act_q8_rule rule(lkv_warp_max(fabsf(v)));
        out[32 * w + (threadIdx.x & 31)] = rule.value(v, rule.d16());
    }
}

static unsigned st_grid(const lkv_bctx *b, size_t work) {
    const size_t cap = (size_t)(b->n_sm > 0 ? b->n_sm : 1) * 16, g = (work + 255) / 256;
    return (unsigned)(g < cap ? (g ? g : 1) : cap);
}

/* the 16-bit rows the staged call reads for one side (K or V) of a
 * segment's piece: f16 rows, and a K side's bf16 rows, where they lie (the
 * row stride of kv 16-bit values is the copy's), q8_0 / q4_0 rows and a V
 * side's bf16 rows decoded into dst */
static const void *st_side(lkv_bctx *b, int type, bool is_k, const uint8_t *src, size_t row_bytes, __half *dst,
                           int rows, int kv) {
    const unsigned grid = st_grid(b, (size_t)rows * (kv / 8));
    if (type == LKV_TYPE_BF16 && is_k) return src;
    switch (type) {
    case LKV_TYPE_F16: return src;
    case LKV_TYPE_Q8_0: st_to_f16<LKV_TYPE_Q8_0><<<grid, 256, 0, b->stream>>>(src, row_bytes, dst, rows, kv); break;
    case LKV_TYPE_Q4_0: st_to_f16<LKV_TYPE_Q4_0><<<grid, 256, 0, b->stream>>>(src, row_bytes, dst, rows, kv); break;
    case LKV_TYPE_BF16: st_to_f16<LKV_TYPE_BF16><<<grid, 256, 0, b->stream>>>(src, row_bytes, dst, rows, kv); break;
    default: return src;
    }
    LKV_CUDA_LAUNCHED(b, "attn_mma (K / V to f16)");
    return dst;
}

static bool st_type(int t) {
    return t == LKV_TYPE_F16 || t == LKV_TYPE_BF16 || t == LKV_TYPE_Q8_0 || t == LKV_TYPE_Q4_0;
}
/* whether a side is decoded (else read where it lies) */
static bool st_decoded(int t, bool is_k) {
    return t == LKV_TYPE_Q8_0 || t == LKV_TYPE_Q4_0 || (t == LKV_TYPE_BF16 && !is_k);
}

/* the KV types whose staged attention decodes a side into gemm_wg's scratch
 * (also the memory plan's question: backend.cu lkv_cuda_ctx_plan) */
bool lkv_cuda_attn_stage_types(int type_k, int type_v) {
    return st_type(type_k) && st_type(type_v) && (st_decoded(type_k, true) || st_decoded(type_v, false));
}

bool lkv_cuda_attn_stage_takes(const lkv_bctx *b, const lkv_attn_desc *d) {
    const int kv = d->n_head_kv * d->head_dim;
    /* every call attn_mma takes, however few its queries (attn_mma.cuh says why),
     * with a side to decode (the staged call itself has none) */
    return b->wg_ok && d->n_head_kv > 0 && lkv_cuda_attn_stage_types(d->type_k, d->type_v) &&
           kv % 8 == 0 && d->chunk > 0;
}

int lkv_cuda_attn_stage(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv) {
    const int kv = d->n_head_kv * d->head_dim;
    size_t cap_bytes = 0;
    uint8_t *scratch = (uint8_t *)lkv_cuda_wg_scratch(b, &cap_bytes);
    if (!scratch) return 0;
    /* the scratch: the query as the CPU rounds it for a quantized K, then a
     * pass of K rows and one of V rows in f16 */
    const size_t qn = (size_t)d->n_q * d->n_head * d->head_dim;
    const bool qk = st_decoded(d->type_k, true);
    const size_t qbytes = qk ? (qn * sizeof(float) + 255) / 256 * 256 : 0;
    if (qbytes >= cap_bytes) return 0;
    /* positions per pass: whole chunks of K and V rows in the rest */
    const int64_t per_pass = (int64_t)((cap_bytes - qbytes) / ((size_t)kv * 2 * sizeof(__half))) / d->chunk;
    if (per_pass < 1) return 0;
    const size_t half_rows = (size_t)per_pass * d->chunk;   /* V rows start after K's */
    __half *k16 = (__half *)(scratch + qbytes), *v16 = k16 + half_rows * kv;
    if (qk) {
        float *qr = (float *)scratch;
        st_q8_round<<<st_grid(b, qn), 256, 0, b->stream>>>(q, qr, qn);
        LKV_CUDA_LAUNCHED(b, "attn_mma (query to q8_0 values)");
        q = qr;
    }
    lkv_attn_desc s = *d;
    s.type_k = d->type_k == LKV_TYPE_BF16 ? LKV_TYPE_BF16 : LKV_TYPE_F16;
    s.type_v = LKV_TYPE_F16;
    for (int c0 = d->chunk_lo; c0 < d->chunk_hi; c0 += (int)per_pass) {
        const int c1 = c0 + per_pass < d->chunk_hi ? c0 + (int)per_pass : d->chunk_hi;
        const int64_t a = (int64_t)c0 * d->chunk, e = (int64_t)c1 * d->chunk;
        s.n_segs = 0;
        for (int i = 0; i < d->n_segs; i++) {
            const lkv_kv_seg &g = d->segs[i];
            const int64_t lo = g.pos0 > a ? g.pos0 : a, hi = (int64_t)g.pos0 + g.n < e ? (int64_t)g.pos0 + g.n : e;
            if (lo >= hi) continue;
            const size_t o = (size_t)(lo - a) * kv, r0 = (size_t)(lo - g.pos0);
            const int rows = (int)(hi - lo);
            const void *ks = st_side(b, d->type_k, true, (const uint8_t *)g.k + r0 * rbk, rbk, k16 + o, rows, kv);
            const void *vs = st_side(b, d->type_v, false, (const uint8_t *)g.v + r0 * rbv, rbv, v16 + o, rows, kv);
            s.segs[s.n_segs++] = lkv_kv_seg{(int32_t)lo, (int32_t)(hi - lo), ks, vs};
        }
        s.chunk_lo = c0;
        s.chunk_hi = c1;
        /* the staged call takes what the first one took (same shape, aligned rows) */
        if (!lkv_cuda_attn_mma(b, st, q, &s)) return c0 == d->chunk_lo ? 0 : -1;
    }
    return 1;
}
