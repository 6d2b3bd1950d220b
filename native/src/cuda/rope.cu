/*
 * cuda/rope.cu: rotary position embedding, in place on x (n, n_head, head_dim);
 * the rotation of each pair is rope.cuh's (the CPU's angles). Dims past
 * rope_dim are left alone.
 */
#include "rope.cuh"

// ---------------------------------------------------------------- kernel

/* one block per (token, head), one thread per rotated pair; in a captured
 * step (dpos set) the position is pos0 + *dpos - cap_pos0 (common.cuh) */
__global__ void rope_kernel(float *x, int n_head, int head_dim, int rope_dim, int32_t pos0,
                            float theta_scale, float freq_scale, int neox,
                            const float *__restrict__ freq_factors, const float2 *tab,
                            const int32_t *dpos, int32_t cap_pos0) {
    if (dpos) pos0 += *dpos - cap_pos0;
    const int row = blockIdx.x;                 /* token * n_head + head */
    const int tok = row / n_head;
    float *h = x + (size_t)row * head_dim;
    for (int j = threadIdx.x; j < rope_dim / 2; j += blockDim.x)
        rope_pair(h, j, rope_dim, pos0 + tok, theta_scale, freq_scale, neox, freq_factors,
                  tab ? tab + (size_t)tok * (rope_dim / 2) : NULL);
}

// ---------------------------------------------------------------- launcher / entry point

void lkv_cuda_rope(lkv_bctx *b, float *x, int n, int32_t pos0, const lkv_rope_desc *r) {
    if (n <= 0) return;
    const int half = r->rope_dim / 2;
    const int threads = half >= 128 ? 128 : ((half + 31) / 32) * 32;
    rope_kernel<<<(unsigned)(n * r->n_head), threads, 0, b->stream>>>(
        x, r->n_head, r->head_dim, r->rope_dim, pos0, rope_theta_scale(r), r->freq_scale, r->neox,
        r->freq_factors, lkv_cuda_rope_table(b, r, pos0, n), b->dyn_pos, b->cap_pos0);
    LKV_CUDA_LAUNCHED(b, "rope");
}
