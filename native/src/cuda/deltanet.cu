/*
 * cuda/deltanet.cu: the gated delta rule of a Gated DeltaNet layer, the CUDA
 * twin of cpu/deltanet.c.
 *
 * Per value head h (its query/key head is h % nk, llama.cpp's tiled GGUF
 * order), with q and k l2-normalised (x / sqrt(sum x^2 + eps)), q also scaled
 * by 1/sqrt(dk), beta = sigmoid(b) and the log-decay g = a * softplus(alpha +
 * dt) (a = -exp(A_log) < 0), the state S (dk, dv) follows, token by token,
 *
 *   S <- exp(g) S ;  delta = beta (v - S^T k) ;  S <- S + k delta^T ;  o = S^T q
 *
 * Design. Given a token's q, k, beta and g, the columns of S are independent:
 * column c needs only S[:, c], v[c] and the two dot products S[:, c] . k and
 * S[:, c] . q. So a group of G lanes of one warp owns one column in registers
 * (lane slot s holds rows s, s + G, s + 2G, ..., R = 16 of them, G the
 * smallest power of two with G * 16 >= dk: dk 128 -> G 8) and walks the
 * micro-batch's tokens in order; the two dot products are reduced across the
 * G lanes with shuffles. The grid is (value head, column groups of 4 * 32 / G
 * columns, one block of 4 warps each), so a decode step of the 27B shape (48
 * value heads, dv 128) runs 384 blocks. The block stages TT tokens at a time
 * in shared memory: their raw q and k of key head h % nk, normalised there
 * (one warp per row, a warp-tree sum of squares in f32 where the CPU sums in
 * f64), v of the block's columns, exp(g) and beta; the outputs collect in
 * shared memory and leave in coalesced rows at the end of the tile. The
 * state is read once at the start and written once at the end of the call.
 *
 * Decode runs this recurrence (the CPU's decode path). Prefill micro-batches
 * of DR_CHUNKED_MIN tokens or more can go to the chunked form of the same
 * function on tensor cores (deltanet_chunk.cu), where it takes the shape;
 * that is the default (DR_CHUNKED_ON): on an H100 (2026-12-07) `test_ops hybrid`
 * held it to the CPU's recurrence (1e-4, snapshots repeated bit for bit) and
 * timed it at 2.0-2.2x this recurrence from 64 tokens up at the Qwen3.5-27B
 * layer's shape (32768 tokens: 22.1 against 47.6 ms), 0.66x at 16.
 * lkv_cuda_tuning.delta forces either form, for the harnesses. This one is
 * latency bound per token but runs every (head, column group) in parallel.
 *
 * Rounding: f32 throughout with FMAs (the CPU rounds each product), the
 * shuffle tree in place of the CPU's sequential sums, CUDA's expf / log1pf:
 * close to the CPU (~1e-6 relative per step), not its bits.
 */
#ifndef LKV_DELTA_EMU   /* tests/cuda/emu_deltanet.cpp runs the kernel on the host */
#include "common.cuh"
#endif

// ---------------------------------------------------------------- kernel

#ifndef LKV_DR_CHUNKED_ON   /* a build may set it (-DLKV_DR_CHUNKED_ON=0) to time the recurrence alone */
#define LKV_DR_CHUNKED_ON 1
#endif

enum {
    DR_WARPS = 4,
    DR_THREADS = 32 * DR_WARPS,
    DR_ROWS = 16,              /* state rows per lane (R) */
    DR_SMEM_FLOATS = 8192,     /* the token tile's budget: 32 KiB */
    DR_MAX_TILE = 64,
    DR_CHUNKED_MIN = 64,       /* micro-batches of this many tokens or more: the chunked form */
    DR_CHUNKED_ON = LKV_DR_CHUNKED_ON, /* 1: the chunked form from DR_CHUNKED_MIN tokens (above) */
};

static __device__ __forceinline__ float dr_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

/* grid (nv, ceil(dv / bc)), DR_THREADS threads, bc = DR_WARPS * 32 / G columns
 * per block; shared memory: q, k (tt, dk), v, o (tt, bc), exp(g), beta (tt) */
template <int R>
__global__ void __launch_bounds__(DR_THREADS)
delta_kernel(float *__restrict__ out, const float *__restrict__ qkv,
             const float *__restrict__ beta_in, const float *__restrict__ alpha,
             const float *__restrict__ a, const float *__restrict__ dt, float *__restrict__ state,
             int nk, int nv, int dk, int dv, int stride, float eps, int n, int G, int tt) {
    extern __shared__ float sm[];
    const int cpw = 32 / G, bc = DR_WARPS * cpw;
    float *qs = sm, *ks = qs + tt * dk, *vs = ks + tt * dk, *os = vs + tt * bc;
    float *dec = os + tt * bc, *bet = dec + tt;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int slot = lane / cpw, col = warp * cpw + lane % cpw;
    const int h = blockIdx.x, kh = h % nk, c0 = blockIdx.y * bc, c = c0 + col;
    const bool valid = c < dv;
    const float qscale = 1.0f / sqrtf((float)dk);
    const float ah = a[h], dth = dt[h];
    float *S0 = state + (size_t)h * dk * dv;

    float S[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = slot + G * r;
        S[r] = valid && i < dk ? S0[(size_t)i * dv + c] : 0.0f;
    }

    for (int t0 = 0; t0 < n; t0 += tt) {
        const int L = n - t0 < tt ? n - t0 : tt;
        /* stage the tile */
        for (int e = tid; e < L * dk; e += DR_THREADS) {
            const int t = e / dk, i = e - t * dk;
            const float *row = qkv + (size_t)(t0 + t) * stride;
            qs[e] = row[(size_t)kh * dk + i];
            ks[e] = row[(size_t)(nk + kh) * dk + i];
        }
        for (int e = tid; e < L * bc; e += DR_THREADS) {
            const int t = e / bc, cc = c0 + (e - t * bc);
            vs[e] = cc < dv ? qkv[(size_t)(t0 + t) * stride + (size_t)2 * nk * dk + (size_t)h * dv + cc]
                            : 0.0f;
        }
        if (tid < L) {
            const size_t j = (size_t)(t0 + tid) * nv + h;
            dec[tid] = expf(ah * dr_softplus(alpha[j] + dth));
            bet[tid] = 1.0f / (1.0f + lkv_expf_cpu(-beta_in[j]));   /* the CPU's exp there */
        }
        __syncthreads();
        /* l2-normalise q (times 1/sqrt(dk)) and k: one warp per row */
        for (int rr = warp; rr < 2 * L; rr += DR_WARPS) {
            float *p = (rr & 1 ? ks : qs) + (size_t)(rr >> 1) * dk;
            float ss = 0.0f;
            for (int i = lane; i < dk; i += 32) ss = fmaf(p[i], p[i], ss);
            ss = lkv_warp_sum(ss);
            const float sc = (rr & 1 ? 1.0f : qscale) / sqrtf(ss + eps);
            for (int i = lane; i < dk; i += 32) p[i] *= sc;
        }
        __syncthreads();
        /* the recurrence over the tile's tokens */
        for (int t = 0; t < L; t++) {
            const float *kt = ks + (size_t)t * dk, *qt = qs + (size_t)t * dk;
            float sk = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = slot + G * r;
                if (i < dk) sk = fmaf(S[r], kt[i], sk);
            }
            for (int o = cpw; o < 32; o <<= 1) sk += __shfl_xor_sync(0xffffffffu, sk, o);
            const float decay = dec[t];
            const float delta = bet[t] * (vs[t * bc + col] - decay * sk);
            float so = 0.0f;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = slot + G * r;
                if (i < dk) {
                    S[r] = fmaf(decay, S[r], kt[i] * delta);
                    so = fmaf(S[r], qt[i], so);
                }
            }
            for (int o = cpw; o < 32; o <<= 1) so += __shfl_xor_sync(0xffffffffu, so, o);
            if (slot == 0) os[t * bc + col] = so;
        }
        __syncthreads();
        for (int e = tid; e < L * bc; e += DR_THREADS) {
            const int t = e / bc, cc = c0 + (e - t * bc);
            if (cc < dv) out[(size_t)(t0 + t) * nv * dv + (size_t)h * dv + cc] = os[e];
        }
        /* the next tile's staging touches q, k, v only; os is rewritten after
         * the next barrier, which every thread reaches after its stores */
    }

#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = slot + G * r;
        if (valid && i < dk) S0[(size_t)i * dv + c] = S[r];
    }
}

/* the launch shape for key heads of dk: G lanes per column, bc columns per
 * block, tt tokens per tile; the shared-memory floats */
static inline int dr_shape(int dk, int *G, int *bc, int *tt) {
    int g = 1;
    while (g * DR_ROWS < dk) g *= 2;
    *G = g;
    *bc = DR_WARPS * 32 / g;
    int t = DR_SMEM_FLOATS / (2 * dk + 2 * *bc + 2);
    *tt = t > DR_MAX_TILE ? DR_MAX_TILE : t < 1 ? 1 : t;
    return *tt * (2 * dk + 2 * *bc + 2);
}

// ---------------------------------------------------------------- launcher / entry point

#ifndef LKV_DELTA_EMU

void lkv_cuda_delta_rule(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                         const float *alpha, const lkv_weight *a, const lkv_weight *dt,
                         float *state, const lkv_delta_desc *d, int n) {
    if (n <= 0) return;
    const int nk = d->n_k_heads, nv = d->n_v_heads, dk = d->head_k_dim, dv = d->head_v_dim;
    if (!a->dev || !dt->dev || a->type != LKV_TYPE_F32 || dt->type != LKV_TYPE_F32 || nk <= 0 ||
        nv <= 0 || dk <= 0 || dv <= 0 || dk > 32 * DR_ROWS) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "delta_rule: f32 a / dt on the device, head_k_dim "
                      "<= 512");
        return;
    }
    /* prefill: the chunked form on tensor cores (deltanet_chunk.cu) where it takes the shape */
    const int path = lkv_cuda_tuning.delta;
    const bool by_default = DR_CHUNKED_ON && n >= DR_CHUNKED_MIN;
    if (path != LKV_DELTA_RECURRENCE && (path != LKV_DELTA_AUTO || by_default) &&
        lkv_cuda_delta_chunk(b, out, qkv, beta_in, alpha, (const float *)a->dev, (const float *)dt->dev,
                             state, d, n, path == LKV_DELTA_CHUNKED_TF32 ? 1 : path == LKV_DELTA_CHUNKED_W8 ? 2 : 0))
        return;
    int G, bc, tt;
    const size_t smem = sizeof(float) * (size_t)dr_shape(dk, &G, &bc, &tt);
    const dim3 grid((unsigned)nv, lkv_cdiv(dv, bc));
    delta_kernel<DR_ROWS><<<grid, DR_THREADS, smem, b->stream>>>(
        out, qkv, beta_in, alpha, (const float *)a->dev, (const float *)dt->dev, state, nk, nv, dk,
        dv, d->stride, d->l2_eps, n, G, tt);
    LKV_CUDA_LAUNCHED(b, "delta_rule");
}
#endif
