/*
 * cuda/rope_store.cu: the step between the q/k/v matmuls and attention in one
 * launch: rope on q and k in place (rope.cuh), then the k and v rows of the
 * batch converted to the KV type into the cache (kv_quant.cuh). The same
 * operations as rope, rope, to_type, to_type (bit for bit), three launches
 * fewer per layer. Both KV planes must have the same type; otherwise the
 * caller uses the separate ops. rope_store_rows does the same for the runs of
 * several sequences in one launch: each token has its own position, angle row
 * and cache rows.
 */
#include "kv_quant.cuh"
#include "rope.cuh"
#include "pdl.cuh"

/* one block per (token, hpb heads) over the n_head q heads then the n_kv k
 * heads of each token; a block with k heads also converts their k and v
 * slices, one thread per 32-block. hpb = 1 for decode (many small blocks for
 * few tokens), 8 for prefill (a block per head cost 0.85 ms of pp512 on the
 * 8B shape: 20480 blocks of 64 threads). In a captured step (dpos set) the
 * position and the cache rows move by *dpos - cap_pos0 (common.cuh). */
/* block (tok, heads h0 .. h1 - 1) of one token at position pos: its rope with
 * angles tab (NULL: computed), then its k heads' k and v rows into krow / vrow */
template <int T>
static __device__ __forceinline__ void rope_store_block(float *q, float *k, const float *v, int n_head, int n_kv,
                                                        int head_dim, int rope_dim, int tok, int h0, int h1,
                                                        int32_t pos, float theta_scale, float freq_scale,
                                                        int neox, const float *__restrict__ ff,
                                                        const float2 *tab, uint8_t *krow, uint8_t *vrow) {
    const int half = rope_dim / 2;
    for (int p = threadIdx.x; p < (h1 - h0) * half; p += blockDim.x) {
        const int h = h0 + p / half;
        float *row = h >= n_head ? k + ((size_t)tok * n_kv + (h - n_head)) * head_dim
                                 : q + ((size_t)tok * n_head + h) * head_dim;
        rope_pair(row, p % half, rope_dim, pos, theta_scale, freq_scale, neox, ff, tab);
    }
    const int k0 = max(h0, n_head) - n_head, k1 = h1 - n_head;   /* this block's k heads */
    if (k1 <= k0) return;
    __syncthreads();
    const int per_head = head_dim / 32;
    for (int i = threadIdx.x; i < (k1 - k0) * 2 * per_head; i += blockDim.x) {
        const int kh = k0 + i / (2 * per_head), g = i % per_head, plane = i / per_head % 2;
        const float *src = (plane ? v : k) + ((size_t)tok * n_kv + kh) * head_dim + 32 * g;
        uint8_t *dst = (plane ? vrow : krow) + (size_t)(kh * per_head + g) * group_bytes<T>();
        float x[32];
#pragma unroll
        for (int e = 0; e < 32; e++) x[e] = src[e];
        quant32<T>(x, dst);
    }
}

template <int T>
__global__ void rope_store_kernel(float *q, float *k, const float *v, int n_head, int n_kv,
                                  int head_dim, int rope_dim, int32_t pos0, float theta_scale,
                                  float freq_scale, int neox, const float *__restrict__ ff,
                                  const float2 *tab,
                                  uint8_t *kdst, uint8_t *vdst, const int32_t *dpos,
                                  int32_t cap_pos0, int hpb) {
    pdl_enter();
    const int32_t delta = dpos ? *dpos - cap_pos0 : 0;
    const int nh = n_head + n_kv, nbt = (nh + hpb - 1) / hpb, half = rope_dim / 2;
    const int tok = blockIdx.x / nbt, h0 = blockIdx.x % nbt * hpb, h1 = min(nh, h0 + hpb);
    const size_t row_bytes = (size_t)n_kv * (head_dim / 32) * group_bytes<T>();
    const int64_t r = (int64_t)tok + delta;   /* cache row of this token, from kdst's row 0 */
    rope_store_block<T>(q, k, v, n_head, n_kv, head_dim, rope_dim, tok, h0, h1, pos0 + delta + tok, theta_scale,
                        freq_scale, neox, ff, tab ? tab + (size_t)tok * half : NULL,
                        kdst + r * (int64_t)row_bytes, vdst + r * (int64_t)row_bytes);
}

/* several sequences' rows (backend.h rope_store_rows): token t at pos[t], its
 * angles at tab[t] (NULL: computed), its cache rows at kdst[t] / vdst[t] */
struct rope_rows_arg {
    int32_t pos[LKV_ROWS_MAX];
    const float2 *tab[LKV_ROWS_MAX];
    uint8_t *kdst[LKV_ROWS_MAX], *vdst[LKV_ROWS_MAX];
};

template <int T>
__global__ void rope_store_rows_kernel(float *q, float *k, const float *v, int n_head, int n_kv, int head_dim,
                                       int rope_dim, float theta_scale, float freq_scale, int neox,
                                       const float *__restrict__ ff, const __grid_constant__ rope_rows_arg ra) {
    pdl_enter();
    const int nh = n_head + n_kv;
    const int tok = blockIdx.x / nh, h0 = blockIdx.x % nh;
    rope_store_block<T>(q, k, v, n_head, n_kv, head_dim, rope_dim, tok, h0, h0 + 1, ra.pos[tok], theta_scale,
                        freq_scale, neox, ff, ra.tab[tok], ra.kdst[tok], ra.vdst[tok]);
}

template <int T>
static void launch(lkv_bctx *b, float *q, float *k, const float *v, int n, int32_t pos0,
                   const lkv_rope_desc *rq, const lkv_rope_desc *rk, void *kdst, void *vdst) {
    const int half = rq->rope_dim / 2, nh = rq->n_head + rk->n_head;
    const int hpb = n > 8 ? 8 : 1;
    int threads = half * hpb >= 256 ? 256 : ((half * hpb + 31) / 32) * 32;
    if (threads < 2 * hpb * (rq->head_dim / 32)) threads = 2 * hpb * (rq->head_dim / 32);
    if (threads > 1024) threads = 1024;
    lkv_launch(b, rope_store_kernel<T>, (unsigned)(n * ((nh + hpb - 1) / hpb)), threads, 0,
        q, k, v, rq->n_head, rk->n_head, rq->head_dim, rq->rope_dim, pos0, rope_theta_scale(rq),
        rq->freq_scale, rq->neox, rq->freq_factors, lkv_cuda_rope_table(b, rq, pos0, n),
        (uint8_t *)kdst, (uint8_t *)vdst, b->dyn_pos,
        b->cap_pos0, hpb);
    LKV_CUDA_LAUNCHED(b, "rope_store");
}

/* one rope geometry for q and k; whole 32-blocks per head; one KV type */
static bool rs_covered(const lkv_rope_desc *rq, const lkv_rope_desc *rk, int32_t type_k, int32_t type_v) {
    return type_k == type_v && rq->head_dim == rk->head_dim && rq->head_dim % 32 == 0 &&
           rq->rope_dim == rk->rope_dim && rq->freq_base == rk->freq_base &&
           rq->freq_scale == rk->freq_scale && rq->neox == rk->neox && rq->freq_factors == rk->freq_factors;
}

template <int T>
static void launch_rows(lkv_bctx *b, float *q, float *k, const float *v, int n, const rope_rows_arg &ra,
                        const lkv_rope_desc *rq, const lkv_rope_desc *rk) {
    const int half = rq->rope_dim / 2, nh = rq->n_head + rk->n_head;
    int threads = half >= 256 ? 256 : ((half + 31) / 32) * 32;
    if (threads < 2 * (rq->head_dim / 32)) threads = 2 * (rq->head_dim / 32);
    if (threads > 1024) threads = 1024;
    lkv_launch(b, rope_store_rows_kernel<T>, (unsigned)(n * nh), threads, 0, q, k, v, rq->n_head, rk->n_head,
               rq->head_dim, rq->rope_dim, rope_theta_scale(rq), rq->freq_scale, rq->neox, rq->freq_factors, ra);
    LKV_CUDA_LAUNCHED(b, "rope_store_rows");
}

int lkv_cuda_rope_store_rows(lkv_bctx *b, float *q, float *k, const float *v, int n_groups,
                             const int32_t *pos0, const int32_t *len, const lkv_rope_desc *rq,
                             const lkv_rope_desc *rk, void *const *kdst, void *const *vdst, int32_t type_k,
                             int32_t type_v) {
    if (n_groups < 1 || b->dyn_pos || !rs_covered(rq, rk, type_k, type_v)) return 0;
    const size_t row_bytes = (size_t)lkv_row_bytes(type_k, (int64_t)rk->n_head * rk->head_dim);
    rope_rows_arg ra;
    int n = 0;
    for (int g = 0; g < n_groups; g++) {
        if (len[g] < 1 || n + len[g] > LKV_ROWS_MAX) return 0;
        const float2 *tab = lkv_cuda_rope_table(b, rq, pos0[g], len[g]);   /* one upload per step and group */
        for (int j = 0; j < len[g]; j++, n++) {
            ra.pos[n] = pos0[g] + j;
            ra.tab[n] = tab ? tab + (size_t)j * (rq->rope_dim / 2) : NULL;
            ra.kdst[n] = (uint8_t *)kdst[g] + (size_t)j * row_bytes;
            ra.vdst[n] = (uint8_t *)vdst[g] + (size_t)j * row_bytes;
        }
    }
    switch (type_k) {
#define X(T) case T: launch_rows<T>(b, q, k, v, n, ra, rq, rk); return 1;
        LKV_CUDA_KV_TYPES(X)
#undef X
    default:
        return 0;
    }
}

int lkv_cuda_rope_store(lkv_bctx *b, float *q, float *k, const float *v, int n, int32_t pos0,
                        const lkv_rope_desc *rq, const lkv_rope_desc *rk, void *kdst,
                        int32_t type_k, void *vdst, int32_t type_v) {
    if (n <= 0 || !rs_covered(rq, rk, type_k, type_v)) return 0;
    switch (type_k) {
#define X(T) case T: launch<T>(b, q, k, v, n, pos0, rq, rk, kdst, vdst); return 1;
        LKV_CUDA_KV_TYPES(X)
#undef X
    default:
        return 0;
    }
}
