/*
 * cuda/quantize_k.cu: activations to the CPU's q8_K for the k-quant weights.
 *
 * The CPU backend dots k-quant rows with q8_K activations (quant/kquants.c):
 * per 256 elements, max = the first element of largest magnitude, iscale =
 * -127 / max, codes = round-half-even(iscale * x) clamped to +-127, d =
 * 1 / iscale kept in f32. Written into the integer matmuls' 32-block layout
 * (b->xq codes; b->xd = d for each of the 8 groups; b->xs = d * the group's
 * code sum), the k-quant mat-vec and GEMM then compute what the CPU computes
 * up to the order of the float sums.
 */
#include "matmul.cuh"

/* one warp per 256-element block, lane l holds elements [8l, 8l + 8) */
__global__ void quantize_q8k_kernel(const float *__restrict__ x, int8_t *__restrict__ xq,
                                    float *__restrict__ xd, float *__restrict__ xs,
                                    int64_t nblocks) {
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (blk >= nblocks) return;
    const int lane = threadIdx.x & 31;
    const float4 *src = (const float4 *)(x + blk * 256 + lane * 8);
    const float4 a = src[0], c = src[1];
    const float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
    /* the first element of largest |x|: strict > within the lane, then the
     * lower index among equal magnitudes across lanes */
    float amax = 0.f, mx = 0.f;
    int idx = 1 << 30;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (fabsf(v[i]) > amax) { amax = fabsf(v[i]); mx = v[i]; idx = lane * 8 + i; }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
        const float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (a2 > amax || (a2 == amax && i2 < idx)) { amax = a2; mx = m2; idx = i2; }
    }
    const float iscale = amax != 0.f ? -127.f / mx : 0.f;
    const float d = amax != 0.f ? 1.f / iscale : 0.f;
    int q[8], sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        q[i] = amax != 0.f ? max(-127, min(127, __float2int_rn(__fmul_rn(iscale, v[i])))) : 0;
        sum += q[i];
    }
    uint2 packed;
    packed.x = (q[0] & 0xFF) | (q[1] & 0xFF) << 8 | (q[2] & 0xFF) << 16 | (uint32_t)(q[3] & 0xFF) << 24;
    packed.y = (q[4] & 0xFF) | (q[5] & 0xFF) << 8 | (q[6] & 0xFF) << 16 | (uint32_t)(q[7] & 0xFF) << 24;
    *(uint2 *)(xq + blk * 256 + lane * 8) = packed;
    /* lanes 4g .. 4g+3 hold group g */
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if ((lane & 3) == 0) {
        xd[blk * 8 + (lane >> 2)] = d;
        xs[blk * 8 + (lane >> 2)] = d * (float)sum;
    }
}

bool lkv_cuda_quantize_q8k(lkv_bctx *b, const float *x, int n, int cols) {
    if (cols % 256 || n > b->xq_rows || cols > b->xq_cols) return false;
    const int64_t nb = (int64_t)n * cols / 256;
    quantize_q8k_kernel<<<lkv_cdiv(nb, 8), 256, 0, b->stream>>>(x, b->xq, b->xd, b->xs, nb);
    LKV_CUDA_LAUNCHED(b, "matmul: activations to q8_K");
    return true;
}
