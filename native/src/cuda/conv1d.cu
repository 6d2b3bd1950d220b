/*
 * cuda/conv1d.cu: the causal depthwise convolution of a Gated DeltaNet layer
 * with its rolling state, followed by silu; the CUDA twin of cpu/conv1d.c.
 *
 * Channel c of token t: acc = sum_j w[c][j] * in(t - (K-1) + j), where in(p)
 * for p < 0 is row K-1+p of the state (K-1, ch) (the inputs before this
 * micro-batch, oldest first); out = acc / (1 + e^-acc). The sum runs in the
 * CPU's order with its rounding (products rounded, then added: no FMA), the
 * exp is the CPU's (lkv_expf_cpu), so the outputs are the CPU's bits.
 *
 * Two launches: conv_kernel, a thread per (token, channel), reads the old
 * state; then state_kernel, one thread per channel, moves the last K-1 inputs
 * of [state; x] into the state (it reads a channel's whole column into
 * registers before writing, so the shift in place has no race). Both are
 * memory-bound and fully parallel; a captured decode step replays them on
 * the same state buffer, which is how the state moves on from step to step.
 */
#include "common.cuh"

// ---------------------------------------------------------------- kernels

enum { CV_THREADS = 256, CV_MAX_STATE = 15, CV_MAX_GRID_Y = 65535 };

/* grid (ch / CV_THREADS, min(n, CV_MAX_GRID_Y)), tokens grid-strided: out (n, ch) */
__global__ void conv_kernel(float *__restrict__ out, const float *__restrict__ x,
                            const float *__restrict__ state, const float *__restrict__ w, int n,
                            int ch, int K) {
    const int c = blockIdx.x * CV_THREADS + threadIdx.x;
    if (c >= ch) return;
    const float *wc = w + (size_t)c * K;
    for (int t = blockIdx.y; t < n; t += gridDim.y) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) {
            const int p = t - (K - 1) + k;
            const float in = p < 0 ? state[(size_t)(K - 1 + p) * ch + c] : x[(size_t)p * ch + c];
            acc = __fadd_rn(acc, __fmul_rn(wc[k], in));
        }
        out[(size_t)t * ch + c] = __fdiv_rn(acc, __fadd_rn(1.0f, lkv_expf_cpu(__fsub_rn(0.f, acc))));
    }
}

/* state (S, ch) = the last S rows of [state; x (n, ch)], S <= CV_MAX_STATE */
__global__ void state_kernel(float *state, const float *__restrict__ x, int n, int ch, int S) {
    const int c = blockIdx.x * CV_THREADS + threadIdx.x;
    if (c >= ch) return;
    float v[CV_MAX_STATE];
#pragma unroll
    for (int j = 0; j < CV_MAX_STATE; j++) {
        if (j >= S) break;
        const int q = n + j;   /* index into [state; x] */
        v[j] = q < S ? state[(size_t)q * ch + c] : x[(size_t)(q - S) * ch + c];
    }
#pragma unroll
    for (int j = 0; j < CV_MAX_STATE; j++) {
        if (j >= S) break;
        state[(size_t)j * ch + c] = v[j];
    }
}

// ---------------------------------------------------------------- entry point

void lkv_cuda_ssm_conv(lkv_bctx *b, float *out, const float *x, float *state, const lkv_weight *w,
                       int n, int ch) {
    if (n <= 0 || ch <= 0) return;
    const int K = (int)w->cols, S = K - 1;
    if (!w->dev || w->type != LKV_TYPE_F32 || K < 1 || S > CV_MAX_STATE) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "ssm_conv: f32 taps on the device, K <= 16");
        return;
    }
    const dim3 grid(lkv_cdiv(ch, CV_THREADS), n < CV_MAX_GRID_Y ? n : CV_MAX_GRID_Y);
    conv_kernel<<<grid, CV_THREADS, 0, b->stream>>>(out, x, state, (const float *)w->dev, n, ch, K);
    LKV_CUDA_LAUNCHED(b, "ssm_conv");
    if (S == 0) return;
    state_kernel<<<lkv_cdiv(ch, CV_THREADS), CV_THREADS, 0, b->stream>>>(state, x, n, ch, S);
    LKV_CUDA_LAUNCHED(b, "ssm_conv: state");
}
