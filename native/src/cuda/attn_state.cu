/*
 * cuda/attn_state.cu: the attention's running state (backend.h): per query
 * and head (m, l, normalised o), hd + 2 floats. attn_reset sets m = -inf,
 * l = 0, o = 0 before a layer's chunks are folded in (attn.cu and the others);
 * attn_finish writes o (0 where no row was seen), and with the 8-bit codes of
 * the o matmul's input when they fit (act_quant.cuh).
 */
#include "common.cuh"
#include "act_quant.cuh"
#include "pdl.cuh"

// ---------------------------------------------------------------- kernels

__global__ void attn_reset_kernel(float *st, int64_t n_states, int hd) {
    pdl_enter();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_states * (hd + 2)) return;
    st[i] = (i % (hd + 2)) == 0 ? -INFINITY : 0.f;
}

/* the state's o is already normalised */
__global__ void attn_finish_kernel(float *out, const float *st, int64_t n_states, int hd) {
    pdl_enter();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_states * hd) return;
    const int64_t sidx = i / hd;
    const float *sp = st + sidx * (hd + 2);
    out[i] = sp[1] > 0.f ? sp[2 + i % hd] : 0.f;
}

/* the same, and the 8-bit codes of out for the o matmul (act_quant.cuh);
 * n_states * hd % 32 == 0: whole warps leave together, a warp is one block */
__global__ void attn_finish_q_kernel(float *out, const float *st, int64_t n_states, int hd,
                                     int8_t *__restrict__ xq, float *__restrict__ xd, float *__restrict__ xs) {
    pdl_enter();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_states * hd) return;
    const float *sp = st + (i / hd) * (hd + 2);
    const float o = sp[1] > 0.f ? sp[2 + i % hd] : 0.f;
    out[i] = o;
    act_q8_at(o, i, xq, xd, xs);
}

// ---------------------------------------------------------------- entry points

size_t lkv_cuda_attn_state_bytes(int n_q, int n_head, int head_dim) {
    return (size_t)n_q * n_head * (head_dim + 2) * sizeof(float);
}

void lkv_cuda_attn_reset(lkv_bctx *b, void *st, int n_q, int n_head, int head_dim) {
    const int64_t n = (int64_t)n_q * n_head * (head_dim + 2);
    if (n <= 0) return;
    lkv_launch(b, attn_reset_kernel, lkv_cdiv(n, 256), 256, 0, (float *)st, (int64_t)n_q * n_head, head_dim);
    LKV_CUDA_LAUNCHED(b, "attn_reset");
}

void lkv_cuda_attn_finish(lkv_bctx *b, float *out, const void *st, int n_q, int n_head, int head_dim) {
    const int64_t n = (int64_t)n_q * n_head * head_dim;
    if (n <= 0) return;
    const bool q = lkv_act_fits(b, n_q, (int64_t)n_head * head_dim);
    if (q)
        lkv_launch(b, attn_finish_q_kernel, lkv_cdiv(n, 256), 256, 0, out, (const float *)st, (int64_t)n_q * n_head,
                   head_dim, b->xq, b->xd, b->xs);
    else
        lkv_launch(b, attn_finish_kernel, lkv_cdiv(n, 256), 256, 0, out, (const float *)st,
                   (int64_t)n_q * n_head, head_dim);
    LKV_CUDA_LAUNCHED(b, "attn_finish");
    if (q) lkv_act_tag_set(b, out, n);
}
