/*
 * cuda/mv_stage.cu: decode mat-vec for q4_0 weights with the block's rows
 * staged through shared memory by 16-byte copies.
 *
 * matvec_q8.cu reads each 8-weight piece with four 2-byte loads straight from
 * global memory: few bytes in flight per warp, many load instructions per
 * byte (NOTES.md runs 3-4: latency-bound at ~1.1 TB/s on the weights). Here a
 * block of 128 threads takes R whole rows (R * row_bytes <= 18 KiB, R a power
 * of 2 up to 8), copies them into shared memory with cp.async.cg 16-byte
 * copies (the rows of one weight are contiguous, so this is one coalesced
 * span), then TPR = 128 / R threads per row each take units of 4 blocks
 * (128 weights, 72 bytes: nine 8-byte shared loads, conflict-free since 72
 * bytes is an odd number of 8-byte words) and dot them with the 8-bit
 * activations (matvec_q8.cu's quantization) by dp4a: per block
 *   d_w * d_x * (sum_i n_i x_i - 8 sum_i x_i),  n_i the unsigned nibbles.
 * The TPR partial sums of a row are added in a fixed order (shuffle tree, then
 * warps in order): deterministic. Several blocks per SM keep ~200 KiB in flight.
 *
 * Used for q4_0 when row_bytes % 16 == 0 (cols % 256 == 0) and the weights
 * are 16-byte aligned, when LKV_CUDA_MV16=1 (off by default: H200 run 5 measured
 * 165 t/s at depth 0 against 171 for matvec_q8.cu's kernel).
 */
#include "matmul.cuh"

enum { MS_THREADS = 128, MS_TILE = 18432, MS_UNIT = 72 };

template <int TPR>
__global__ void __launch_bounds__(MS_THREADS)
mv_q4_0_staged(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq,
               const float *__restrict__ xd, int cols, int n) {
    extern __shared__ __align__(16) uint8_t sm[];
    constexpr int R = MS_THREADS / TPR;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j], r0 = (blockIdx.x - ms.tile0[j]) * R, nr = min(R, rows - r0);
    const size_t rb = ms.row_bytes[j];
    {
        const uint8_t *src = ms.w[j] + (size_t)r0 * rb;
        const int bytes = (int)(nr * rb);
        for (int o = 16 * tid; o < bytes; o += 16 * MS_THREADS) {
            const unsigned s = (unsigned)__cvta_generic_to_shared(sm + o);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src + o));
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
    }
    __syncthreads();

    const int row = tid / TPR, ti = tid % TPR, nu = cols / 128, ng = cols / 32;
    float acc[MV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) acc[t] = 0.f;
    if (row < nr) {
        for (int u = ti; u < nu; u += TPR) {
            uint32_t w[18];
            const uint2 *p = (const uint2 *)(sm + row * rb + (size_t)u * MS_UNIT);
#pragma unroll
            for (int i = 0; i < 9; i++) { const uint2 v = p[i]; w[2 * i] = v.x; w[2 * i + 1] = v.y; }
            float dw[4];
            uint32_t qs[4][4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                /* block k at byte 18k: d (2 bytes), then 16 quant bytes */
                const int b = 18 * k;
                const uint32_t dword = w[b >> 2];
                dw[k] = __half2float(__ushort_as_half((unsigned short)((b & 2) ? dword >> 16 : dword & 0xFFFF)));
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int q = b + 2 + 4 * i;
                    qs[k][i] = (q & 2) ? __funnelshift_r(w[q >> 2], w[(q >> 2) + 1], 16) : w[q >> 2];
                }
            }
#pragma unroll
            for (int t = 0; t < MV_MAX_TOK; t++) {
                if (t >= n) break;
                const int4 *xv = (const int4 *)(xq + (size_t)t * cols + (size_t)u * 128);
                const float4 dx4 = __ldg((const float4 *)(xd + (size_t)t * ng + 4 * u));
                const float dx[4] = {dx4.x, dx4.y, dx4.z, dx4.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int4 xa = __ldg(xv + 2 * k), xb = __ldg(xv + 2 * k + 1);
                    const int X[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
                    int si = 0, sx = 0;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        si = __dp4a((int)(qs[k][i] & 0x0F0F0F0Fu), X[i], si);
                        si = __dp4a((int)((qs[k][i] >> 4) & 0x0F0F0F0Fu), X[4 + i], si);
                        sx = __dp4a(X[i], 0x01010101, sx);
                        sx = __dp4a(X[4 + i], 0x01010101, sx);
                    }
                    acc[t] += (dw[k] * dx[k]) * (float)(si - 8 * sx);
                }
            }
        }
    }
    float *out = ms.out[j];
    if constexpr (TPR <= 32) {
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
            float v = acc[t];
#pragma unroll
            for (int o = TPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (ti == 0 && row < nr) out[(size_t)t * rows + r0 + row] = v;
        }
    } else {
        constexpr int WPR = TPR / 32;   /* warps per row */
        __shared__ float red[MS_THREADS / 32][MV_MAX_TOK];
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t >= n) break;
            const float v = lkv_warp_sum(acc[t]);
            if (lane == 0) red[warp][t] = v;
        }
        __syncthreads();
        const int rr = tid % R, t = tid / R;
        if (t < n && rr < nr) {
            float s = red[rr * WPR][t];
#pragma unroll
            for (int w = 1; w < WPR; w++) s += red[rr * WPR + w][t];
            out[(size_t)t * rows + r0 + rr] = s;
        }
    }
}

template <int TPR>
static void launch(lkv_bctx *b, mm_set &ms, int cols, int n, size_t rb) {
    constexpr int R = MS_THREADS / TPR;
    static bool attr = false;
    if (!attr) {
        cudaFuncSetAttribute(mv_q4_0_staged<TPR>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
        attr = true;
    }
    ms.tile0[0] = 0;
    for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], R);
    mv_q4_0_staged<TPR><<<ms.tile0[ms.n_w], MS_THREADS, R * rb, b->stream>>>(ms, b->xq, b->xd, cols, n);
}

/* after matvec_q8.cu quantized x into b->xq / b->xd; false when not applicable */
bool lkv_cuda_mv_staged(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    if (!b->mv16 || type != LKV_TYPE_Q4_0 || cols % 256) return false;
    const size_t rb = (size_t)cols / 32 * 18;
    if (rb > 64 * 1024) return false;
    for (int i = 0; i < ms.n_w; i++)
        if (ms.row_bytes[i] != rb || ((uintptr_t)ms.w[i] & 15)) return false;
    int R = 8;
    while (R > 1 && (size_t)R * rb > MS_TILE) R >>= 1;
    switch (R) {
    case 8: launch<16>(b, ms, cols, n, rb); break;
    case 4: launch<32>(b, ms, cols, n, rb); break;
    case 2: launch<64>(b, ms, cols, n, rb); break;
    default: launch<128>(b, ms, cols, n, rb); break;
    }
    return true;
}
