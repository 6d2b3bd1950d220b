/*
 * cuda/deltanet_chunk.cu: the gated delta rule over a prefill micro-batch in
 * its chunk-parallel (WY / UT) form on tensor cores; deltanet.cu's
 * recurrence keeps decode and short micro-batches, and calls this from
 * DR_CHUNKED_MIN tokens (checked on the host emulator, tests/cuda/
 * emu_deltanet_chunk.cpp, and on an H100 by `test_ops hybrid`: 2.2x the
 * recurrence at the 27B layer's shape).
 *
 * The math (cpu/deltanet.c's chunked form, tests/test_deltanet_chunked.py's
 * numpy twin). Per value head, chunks of C = 64 tokens from the
 * micro-batch's first token, S0 the state at a chunk's start, G the
 * cumulative log-decay inside it, A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s)
 * for s < t and T = (I + A)^-1:
 *
 *   T1  = T diag(beta)                T2n = -T diag(beta exp(G))
 *   delta = T1 V + T2n (K S0)                         (C, dv)
 *   o     = diag(exp(G)) Q S0 + (Q K^T o exp(G_t - G_s), s <= t) delta
 *   S_end = exp(G_last) S0 + K^T (exp(G_last - G_s) delta_s)
 *
 * Design. A block owns one value head and BV of its dv columns (the columns
 * of S and of delta are independent given T, which depends on q, k, g and
 * beta only) and walks the micro-batch's chunks in order with S (dk, BV) in
 * shared memory; the grid is (nv, dv / BV): 96 blocks at the Qwen3.5-27B
 * shape (48 value heads of 128, BV 64), 16 warps each. Per chunk: stage q, k (the key head's,
 * l2-normalised there), v, g, beta; K K^T and Q K^T into the masked, decayed
 * A and QK (C, C); T by blocks of 16 (the diagonal blocks by forward
 * substitution, one thread a column, then the blocks below by distance from
 * the diagonal: T_ij = -T_ii sum_k A_ik T_kj, on the CUDA cores in f32);
 * then the GEMMs above. Every product of two matrices runs on the tensor
 * cores as mma.sync m16n8k8 TF32 with f32 accumulation, one warp a 16-row
 * strip, fragments read straight from f32 shared memory (strides give the
 * transposes). The K K^T / Q K^T of a chunk are computed again by each of a
 * head's dv / BV blocks (a quarter of the chunk's products at 27B's shape).
 *
 * Rounding. TF32 keeps 10 of f32's 23 mantissa bits; to hold the state to
 * the recurrence at float tolerance each product is split (3xTF32: x = hi +
 * lo, a_hi b_hi + a_hi b_lo + a_lo b_hi, f32 accumulation), which costs 3
 * mma per product and leaves errors near f32's (about 1e-6 relative,
 * growing slowly over chunks). lkv_cuda_tuning.delta = 3 drops the split
 * (one TF32 mma, ~1e-3 relative) and 4 runs blocks of 8 warps: timing
 * switches, not library paths.
 * exp via expf; beta's sigmoid uses the CPU's exp, as the recurrence does.
 * The recurrence and this form are the same function; they differ by
 * rounding only, not bitwise.
 *
 * Limits: dk a multiple of 16 up to 128 (shared memory), any dv. Other
 * shapes, and devices whose shared memory per block is short of BV = 32's,
 * stay on the recurrence (lkv_cuda_delta_chunk returns 0).
 */
#ifndef LKV_DELTA_EMU   /* tests/cuda/emu_deltanet_chunk.cpp runs the kernel on the host */
#include "common.cuh"
#endif

enum {
    DC_C = 64,                 /* tokens a chunk */
    DC_WARPS = 16,             /* the library's block: 16 warps (8: a timing variant) */
    DC_MAX_DK = 128,
    DC_LDC = DC_C + 4,         /* row stride of the (C, C) matrices */
};

// ---------------------------------------------------------------- tensor-core tile

#ifndef LKV_DELTA_EMU
static __device__ __forceinline__ uint32_t dc_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
/* d (16 x 8) += a (16 x 8, row) b (8 x 8, col), TF32 in, f32 accumulation. Lane
 * l = 4 g + t holds a (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); b (t, g),
 * (t + 4, g); d (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) */
static __device__ __forceinline__ void dc_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/* x = hi + lo, both TF32 */
static __device__ __forceinline__ void dc_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = dc_tf32(x);
    lo = dc_tf32(x - __uint_as_float(hi));
}

/* acc[j] (16 x 8, columns 8j..8j+7 of a 16 x 8NT strip) += A (16 x K) B (K x 8NT),
 * A(r, k) = A[r ars + k acs], B(k, n) = B[k brs + n bcs]; K a multiple of 8.
 * SPLIT: 3xTF32 (the small terms first) */
template <int NT, bool SPLIT>
static __device__ __forceinline__ void dc_gemm(float (&acc)[NT][4], const float *A, int ars, int acs,
                                               const float *B, int brs, int bcs, int K) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int k0 = 0; k0 < K; k0 += 8) {
        const float *a = A + (size_t)g * ars + (size_t)(k0 + t) * acs;
        const float af[4] = {a[0], a[8 * ars], a[4 * acs], a[8 * ars + 4 * acs]};
        uint32_t ah[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (SPLIT) dc_split(af[i], ah[i], al[i]);
            else ah[i] = dc_tf32(af[i]);
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const float *bp = B + (size_t)(k0 + t) * brs + (size_t)(8 * j + g) * bcs;
            const float b0 = bp[0], b1 = bp[4 * brs];
            if (SPLIT) {
                uint32_t h0, l0, h1, l1;
                dc_split(b0, h0, l0);
                dc_split(b1, h1, l1);
                dc_mma(acc[j], al, h0, h1);
                dc_mma(acc[j], ah, l0, l1);
                dc_mma(acc[j], ah, h0, h1);
            } else {
                dc_mma(acc[j], ah, dc_tf32(b0), dc_tf32(b1));
            }
        }
    }
}

template <int NT>
static __device__ __forceinline__ void dc_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
}

/* the row / column inside its 16 x 8NT strip of fragment element (j, e) */
static __device__ __forceinline__ int dc_row(int e) { return ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
static __device__ __forceinline__ int dc_col(int j, int e) { return 8 * j + 2 * (threadIdx.x & 3) + (e & 1); }

static __device__ __forceinline__ float dc_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

// ---------------------------------------------------------------- shared-memory plan

/* floats of each buffer for key heads of dk and BV columns */
struct dc_plan {
    int ldk, ldv;              /* row strides: q / k rows (dk), v / delta / S rows (BV) */
    int q, k, v, s, mats, vecs, total;
};

static __host__ __device__ inline dc_plan dc_plan_of(int dk, int bv) {
    dc_plan p;
    p.ldk = dk + 4;
    p.ldv = bv + 8;
    const int qrow = p.ldk > p.ldv ? p.ldk : p.ldv;   /* q's rows later hold K S0 (BV) */
    p.q = DC_C * qrow;
    p.k = DC_C * p.ldk;
    p.v = DC_C * p.ldv;
    p.s = dk * p.ldv;
    p.mats = 3 * DC_C * DC_LDC;
    p.vecs = 6 * DC_C;
    p.total = p.q + p.k + p.v + p.s + p.mats + p.vecs;
    return p;
}

// ---------------------------------------------------------------- kernel

/* grid (nv, ceil(dv / BV)), 32 W threads, dc_plan_of(dk, BV).total floats */
template <int BV, bool SPLIT, int W>
__global__ void __launch_bounds__(32 * W)
delta_chunk_kernel(float *__restrict__ out, const float *__restrict__ qkv,
                   const float *__restrict__ beta_in, const float *__restrict__ alpha,
                   const float *__restrict__ a, const float *__restrict__ dt,
                   float *__restrict__ state, int nk, int nv, int dk, int dv, int stride,
                   float eps, int n) {
    constexpr int TH = 32 * W, CW = W / 4;      /* CW warps share each 16-row tile */
    constexpr int NT = BV / (8 * CW);           /* a warp's strip: 16 rows x BV / CW columns */
    extern __shared__ float sm[];
    const dc_plan P = dc_plan_of(dk, BV);
    const int ldk = P.ldk, ldv = P.ldv;
    float *Qs = sm;                             /* (C, dk) q; then (C, BV) K S0 */
    float *Ks = Qs + P.q;                       /* (C, dk) k */
    float *Vs = Ks + P.k;                       /* (C, BV) v; then delta; then decayed delta */
    float *Ss = Vs + P.v;                       /* (dk, BV) the state's columns */
    float *TA = Ss + P.s;                       /* (C, C) A; then T2n */
    float *T1 = TA + DC_C * DC_LDC;             /* (C, C) T; then T1 */
    float *QK = T1 + DC_C * DC_LDC;             /* (C, C) masked, decayed Q K^T */
    float *gv = QK + DC_C * DC_LDC;             /* (C,) g */
    float *Gv = gv + DC_C;                      /* (C,) cumulative g */
    float *eG = Gv + DC_C;                      /* (C,) exp(G) */
    float *eE = eG + DC_C;                      /* (C,) exp(G_last - G) */
    float *bt = eE + DC_C;                      /* (C,) beta */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int h = blockIdx.x, kh = h % nk, c0 = blockIdx.y * BV;
    const float qscale = 1.0f / sqrtf((float)dk);
    const float ah = a[h], dth = dt[h];
    float *S0 = state + (size_t)h * dk * dv;
    /* the warp's strip in the (C, BV) products: rows 16 mt.., columns nc.. */
    const int mt = warp / CW, nc = (warp % CW) * (BV / CW);

    for (int e = tid; e < dk * BV; e += TH) {
        const int i = e / BV, c = e - i * BV;
        Ss[i * ldv + c] = c0 + c < dv ? S0[(size_t)i * dv + c0 + c] : 0.0f;
    }

    for (int t0 = 0; t0 < n; t0 += DC_C) {
        const int L = n - t0 < DC_C ? n - t0 : DC_C;
        // --- stage: q, k of key head kh, v of the block's columns, g, beta; rows past L zero
        for (int e = tid; e < DC_C * dk; e += TH) {
            const int t = e / dk, i = e - t * dk;
            const float *row = qkv + (size_t)(t0 + t) * stride;
            Qs[t * ldk + i] = t < L ? row[(size_t)kh * dk + i] : 0.0f;
            Ks[t * ldk + i] = t < L ? row[(size_t)(nk + kh) * dk + i] : 0.0f;
        }
        for (int e = tid; e < DC_C * BV; e += TH) {
            const int t = e / BV, c = e - t * BV;
            Vs[t * ldv + c] = t < L && c0 + c < dv
                ? qkv[(size_t)(t0 + t) * stride + (size_t)2 * nk * dk + (size_t)h * dv + c0 + c] : 0.0f;
        }
        if (tid < DC_C) {
            const size_t j = (size_t)(t0 + tid) * nv + h;
            gv[tid] = tid < L ? ah * dc_softplus(alpha[j] + dth) : 0.0f;
            bt[tid] = tid < L ? 1.0f / (1.0f + lkv_expf_cpu(-beta_in[j])) : 0.0f;
        }
        __syncthreads();
        /* l2-normalise q (times 1/sqrt(dk)) and k, one warp a row; G by prefix sums */
        for (int rr = warp; rr < 2 * L; rr += W) {
            float *p = (rr & 1 ? Ks : Qs) + (size_t)(rr >> 1) * ldk;
            float ss = 0.0f;
            for (int i = lane; i < dk; i += 32) ss = fmaf(p[i], p[i], ss);
            ss = lkv_warp_sum(ss);
            const float sc = (rr & 1 ? 1.0f : qscale) / sqrtf(ss + eps);
            for (int i = lane; i < dk; i += 32) p[i] *= sc;
        }
        if (tid < DC_C) {
            float G = 0.0f;
            for (int s = 0; s <= tid; s++) G += gv[s];
            Gv[tid] = G;
            eG[tid] = expf(G);
        }
        __syncthreads();
        if (tid < DC_C) eE[tid] = expf(Gv[DC_C - 1] - Gv[tid]);

        // --- A = beta_t K K^T exp(G_t - G_s) (s < t), QK = Q K^T exp(G_t - G_s) (s <= t)
        for (int task = warp; task < 16; task += W) {
            const int m = task >> 3, rt = (task & 7) >> 1, cg = (task & 1) * 32;
            float *dst = m ? QK : TA;
            float acc[4][4];
            dc_zero(acc);
            if (cg <= rt * 16 + 15)   /* strips wholly above the diagonal stay zero */
                dc_gemm<4, SPLIT>(acc, (m ? Qs : Ks) + rt * 16 * ldk, ldk, 1, Ks + cg * ldk, 1, ldk, dk);
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = rt * 16 + dc_row(e), s = cg + dc_col(j, e);
                    const bool keep = m ? s <= r : s < r;
                    const float dec = keep ? expf(Gv[r] - Gv[s]) : 0.0f;
                    dst[r * DC_LDC + s] = keep ? (m ? acc[j][e] : bt[r] * acc[j][e]) * dec : 0.0f;
                }
        }
        __syncthreads();

        // --- T = (I + A)^-1 into T1: diagonal 16 x 16 blocks, one thread a column
        if (tid < DC_C) {
            const int b0 = (tid >> 4) * 16, j = tid & 15;
            float x[16];
#pragma unroll
            for (int r = 0; r < 16; r++) {
                float v = r == j ? 1.0f : 0.0f;
#pragma unroll
                for (int s = 0; s < r; s++) v -= TA[(b0 + r) * DC_LDC + b0 + s] * x[s];
                x[r] = v;
            }
#pragma unroll
            for (int r = 0; r < 16; r++) T1[(b0 + r) * DC_LDC + b0 + j] = x[r];
        }
        for (int e = tid; e < DC_C * DC_C; e += TH) {   /* blocks above the diagonal */
            const int r = e / DC_C, s = e - r * DC_C;
            if ((s >> 4) > (r >> 4)) T1[r * DC_LDC + s] = 0.0f;
        }
        __syncthreads();
        /* the blocks below, by distance d: X_ij = sum_k A_ik T_kj, then T_ij = -T_ii X_ij */
        for (int d = 1; d < DC_C / 16; d++) {
            const int cnt = (DC_C / 16 - d) * 256;
            float val[3];
#pragma unroll
            for (int q = 0; q < 3; q++) {
                const int e = tid + q * TH;
                if (e >= cnt) break;
                const int bi = d + (e >> 8), bj = bi - d, r = (e & 255) >> 4, c = e & 15;
                float x = 0.0f;
                for (int u = bj * 16; u < bi * 16; u++)
                    x += TA[(bi * 16 + r) * DC_LDC + u] * T1[u * DC_LDC + bj * 16 + c];
                val[q] = x;
            }
            __syncthreads();
#pragma unroll
            for (int q = 0; q < 3; q++) {
                const int e = tid + q * TH;
                if (e >= cnt) break;
                const int bi = d + (e >> 8), bj = bi - d, r = (e & 255) >> 4, c = e & 15;
                T1[(bi * 16 + r) * DC_LDC + bj * 16 + c] = val[q];
            }
            __syncthreads();
#pragma unroll
            for (int q = 0; q < 3; q++) {
                const int e = tid + q * TH;
                if (e >= cnt) break;
                const int bi = d + (e >> 8), bj = bi - d, r = (e & 255) >> 4, c = e & 15;
                float x = 0.0f;
                for (int u = 0; u < 16; u++)
                    x -= T1[(bi * 16 + r) * DC_LDC + bi * 16 + u] * T1[(bi * 16 + u) * DC_LDC + bj * 16 + c];
                val[q] = x;
            }
            __syncthreads();
#pragma unroll
            for (int q = 0; q < 3; q++) {
                const int e = tid + q * TH;
                if (e >= cnt) break;
                const int bi = d + (e >> 8), bj = bi - d, r = (e & 255) >> 4, c = e & 15;
                T1[(bi * 16 + r) * DC_LDC + bj * 16 + c] = val[q];
            }
            __syncthreads();
        }
        /* T1 = T diag(beta), T2n = -T diag(beta exp(G)) (into A's place) */
        for (int e = tid; e < DC_C * DC_C; e += TH) {
            const int r = e / DC_C, s = e - r * DC_C;
            const float T = T1[r * DC_LDC + s];
            TA[r * DC_LDC + s] = -T * (bt[s] * eG[s]);
            T1[r * DC_LDC + s] = T * bt[s];
        }
        __syncthreads();

        // --- o = diag(exp(G)) Q S0 (kept in registers), K S0 into q's place
        float acc_o[NT][4], acc[NT][4];
        dc_zero(acc_o);
        dc_gemm<NT, SPLIT>(acc_o, Qs + mt * 16 * ldk, ldk, 1, Ss + nc, ldv, 1, dk);
        dc_zero(acc);
        dc_gemm<NT, SPLIT>(acc, Ks + mt * 16 * ldk, ldk, 1, Ss + nc, ldv, 1, dk);
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_o[j][e] *= eG[mt * 16 + dc_row(e)];
        __syncthreads();
        float *KS = Qs;                        /* (C, BV), stride ldv */
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) KS[(mt * 16 + dc_row(e)) * ldv + nc + dc_col(j, e)] = acc[j][e];
        __syncthreads();

        // --- delta = T1 V + T2n (K S0), into v's place (rows of m-tile mt need k < 16 (mt + 1))
        const int kl = 16 * (mt + 1);
        dc_zero(acc);
        dc_gemm<NT, SPLIT>(acc, T1 + mt * 16 * DC_LDC, DC_LDC, 1, Vs + nc, ldv, 1, kl);
        dc_gemm<NT, SPLIT>(acc, TA + mt * 16 * DC_LDC, DC_LDC, 1, KS + nc, ldv, 1, kl);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) Vs[(mt * 16 + dc_row(e)) * ldv + nc + dc_col(j, e)] = acc[j][e];
        __syncthreads();

        // --- o += QK delta; out
        dc_gemm<NT, SPLIT>(acc_o, QK + mt * 16 * DC_LDC, DC_LDC, 1, Vs + nc, ldv, 1, kl);
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = mt * 16 + dc_row(e), c = c0 + nc + dc_col(j, e);
                if (r < L && c < dv) out[(size_t)(t0 + r) * nv * dv + (size_t)h * dv + c] = acc_o[j][e];
            }
        __syncthreads();

        // --- S = exp(G_last) S + K^T (exp(G_last - G_s) delta_s)
        for (int e = tid; e < DC_C * BV; e += TH) {
            const int t = e / BV, c = e - t * BV;
            Vs[t * ldv + c] *= eE[t];
        }
        __syncthreads();
        const float eL = eG[DC_C - 1];
        for (int task = warp; task < (dk / 16) * CW; task += W) {
            const int rt = task / CW, cc = (task % CW) * (BV / CW);
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][e] = eL * Ss[(rt * 16 + dc_row(e)) * ldv + cc + dc_col(j, e)];
            dc_gemm<NT, SPLIT>(acc, Ks + rt * 16, 1, ldk, Vs + cc, ldv, 1, DC_C);
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) Ss[(rt * 16 + dc_row(e)) * ldv + cc + dc_col(j, e)] = acc[j][e];
        }
        __syncthreads();   /* the next chunk's staging rewrites q, k, v */
    }

    for (int e = tid; e < dk * BV; e += TH) {
        const int i = e / BV, c = e - i * BV;
        if (c0 + c < dv) S0[(size_t)i * dv + c0 + c] = Ss[i * ldv + c];
    }
}

// ---------------------------------------------------------------- launcher / entry point

#ifndef LKV_DELTA_EMU

/* the device's shared memory per block (opt-in), once per device; 0 if unknown */
static int dc_smem_optin(int device) {
    static int cache[32];
    if (device >= 0 && device < 32 && cache[device]) return cache[device];
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
        cudaGetLastError();
        v = 0;
    }
    if (device >= 0 && device < 32) cache[device] = v;
    return v;
}

template <int BV, bool SPLIT, int W>
static void dc_launch(lkv_bctx *b, float *out, const float *qkv, const float *beta_in, const float *alpha,
                      const float *a, const float *dt, float *state, const lkv_delta_desc *d, int n) {
    static int raised[32];   /* dk varies between calls: the limit follows the largest */
    const int smem = (int)sizeof(float) * dc_plan_of(d->head_k_dim, BV).total;
    lkv_cuda_smem_raise(b, raised, delta_chunk_kernel<BV, SPLIT, W>, smem, "delta_rule (chunked): smem");
    const dim3 grid((unsigned)d->n_v_heads, lkv_cdiv(d->head_v_dim, BV));
    delta_chunk_kernel<BV, SPLIT, W><<<grid, 32 * W, smem, b->stream>>>(
        out, qkv, beta_in, alpha, a, dt, state, d->n_k_heads, d->n_v_heads, d->head_k_dim, d->head_v_dim,
        d->stride, d->l2_eps, n);
    LKV_CUDA_LAUNCHED(b, "delta_rule (chunked)");
}

/* the chunked form for this call, where the shape and the device allow it:
 * 1 when launched, 0 to leave the call to the recurrence. kind: 0 the
 * library's (3xTF32, 16 warps); timing variants: 1 one TF32 mma a product,
 * 2 blocks of 8 warps */
int lkv_cuda_delta_chunk(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                         const float *alpha, const float *a, const float *dt, float *state,
                         const lkv_delta_desc *d, int n, int kind) {
    const int dk = d->head_k_dim, dv = d->head_v_dim;
    if (dk % 16 || dk > DC_MAX_DK || dv <= 0) return 0;
    const int optin = dc_smem_optin(b->device);
    const bool wide = dv > 32 && (int)sizeof(float) * dc_plan_of(dk, 64).total <= optin;
    if (!wide && (int)sizeof(float) * dc_plan_of(dk, 32).total > optin) return 0;
#define DC_ARGS b, out, qkv, beta_in, alpha, a, dt, state, d, n
    if (wide) {
        if (kind == 1) dc_launch<64, false, DC_WARPS>(DC_ARGS);
        else if (kind == 2) dc_launch<64, true, 8>(DC_ARGS);
        else dc_launch<64, true, DC_WARPS>(DC_ARGS);
    } else {
        if (kind == 1) dc_launch<32, false, DC_WARPS>(DC_ARGS);
        else if (kind == 2) dc_launch<32, true, 8>(DC_ARGS);
        else dc_launch<32, true, DC_WARPS>(DC_ARGS);
    }
#undef DC_ARGS
    return 1;
}
#endif
