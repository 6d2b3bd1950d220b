/*
 * cuda/rope.cu: rotary position embedding, in place on x (n, n_head, head_dim).
 * Pair j (j < rope_dim/2) is rotated by theta = pos * freq_scale *
 * base^(-2j/rope_dim) / freq_factors[j]; the pair is (2j, 2j+1) in the normal
 * (llama) style and (j, j + rope_dim/2) in the neox style (qwen2/3). Dims past
 * rope_dim are left alone. theta is formed as the CPU forms it (the power
 * by repeated f32 multiplication, then cosf/sinf in full precision), so both
 * backends rotate by the same angles up to the last bit of cos/sin.
 */
#include "common.cuh"

// ---------------------------------------------------------------- kernel

/* one block per (token, head), one thread per rotated pair; in a captured
 * step (dpos set) the position is pos0 + *dpos - cap_pos0 (common.cuh) */
__global__ void rope_kernel(float *x, int n_head, int head_dim, int rope_dim, int32_t pos0,
                            float freq_base, float freq_scale, int neox,
                            const float *__restrict__ freq_factors, const int32_t *dpos,
                            int32_t cap_pos0) {
    if (dpos) pos0 += *dpos - cap_pos0;
    const int row = blockIdx.x;                 /* token * n_head + head */
    const int tok = row / n_head;
    const int half = rope_dim / 2;
    float *h = x + (size_t)row * head_dim;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const float theta_scale = powf(freq_base, -2.0f / (float)rope_dim);
        float theta = (float)(pos0 + tok);
        for (int k = 0; k < j; k++) theta *= theta_scale;
        const float f = freq_factors ? freq_factors[j] : 1.0f;
        const float th = theta * freq_scale / f;
        const float c = cosf(th), s = sinf(th);
        const int i0 = neox ? j : 2 * j;
        const int i1 = neox ? j + half : 2 * j + 1;
        const float a = h[i0], bb = h[i1];
        h[i0] = a * c - bb * s;
        h[i1] = a * s + bb * c;
    }
}

// ---------------------------------------------------------------- launcher / entry point

void lkv_cuda_rope(lkv_bctx *b, float *x, int n, int32_t pos0, const lkv_rope_desc *r) {
    if (n <= 0) return;
    const int half = r->rope_dim / 2;
    const int threads = half >= 128 ? 128 : ((half + 31) / 32) * 32;
    rope_kernel<<<(unsigned)(n * r->n_head), threads, 0, b->stream>>>(
        x, r->n_head, r->head_dim, r->rope_dim, pos0, r->freq_base, r->freq_scale, r->neox,
        r->freq_factors, b->dyn_pos, b->cap_pos0);
    LKV_CUDA_LAUNCHED(b, "rope");
}
