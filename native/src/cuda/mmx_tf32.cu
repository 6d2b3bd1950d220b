/*
 * cuda/mmx_tf32.cu: the first CPU-exact prefill GEMM (LKV_CUDA_GEMM=mmx-old),
 * kept beside mmx.cu's faster one for comparison; same results bit for bit,
 * bit-identical to the CPU backend (exact.cuh: per output 8 float chains,
 * one per lane of 4 elements, acc_l = fmaf(dx * dy, p_l, acc_l) per block).
 *
 * Cost floor: 8 FFMA per (row, token, block), each on a (float)p_l of its
 * own. The int8 mma of mmq.cu sums whole blocks; an int8 mma on lane-masked
 * columns would give the p_l but as ints (one more FADD each, via the
 * 0x4B400000 trick) and wastes 7/8 of the tensor work. Here the lane partials
 * come from mma.m16n8k4 tf32 with a zero accumulator: K = 4 is exactly one
 * lane, the codes (|q| <= 128) are exact in tf32 and the four products and
 * their sum (< 2^16) are exact in the f32 accumulator, so the mma returns
 * (float)p_l exactly, and each output lane costs one FFMA on the FP32 pipe
 * (plus one FMUL per block for dx * dy, shared by the 8 lanes).
 *
 * Tiles: a block of 8 warps computes 64 weight rows x 64 tokens; warp
 * (wr, wt) = (warp & 1, warp >> 1) owns rows 32 wr.. + 32 and tokens
 * 16 wt.. + 16: 2 m-tiles x 2 n-tiles x 8 lanes of m16n8 accumulators =
 * 128 floats per thread, all 8 lanes of an output in one thread, so the
 * final hsum is the CPU's, in registers. K advances 4 blocks per stage:
 *   cp.async  raw weight bytes (the 16-byte chunks covering each row's
 *             4 blocks), int8 activations, xd / xs of stage s + 1;
 *   unpack    raw -> f32 codes in shared memory, once per block tile (each
 *             weight code serves 64 tokens, each activation code 64 rows);
 *   compute   per block, 4 rows + 2 tokens x 2 LDS.128 give a thread its
 *             codes of all 8 lanes (stored lane-minor: element 4l + c of a
 *             block sits at 8c + l, so thread c of a quad reads 8 floats in
 *             a row), then 32 mma and 128 FFMA.
 * Fragments (PTX, m16n8k4 .tf32; g = lane >> 2, c = lane & 3):
 *   A (16 x 4, row): a0 = (row g, k c), a1 = (row g + 8, k c)
 *   B (4 x 8, col):  b0 = (k c, col g)
 *   C (16 x 8):      c0 = (g, 2c), c1 = (g, 2c + 1), c2 = (g + 8, 2c), c3 = (g + 8, 2c + 1)
 * with A = weight rows, B = tokens.
 */
#include "exact.cuh"

enum { XM_BM = 64, XM_BN = 64, XM_KB = 4, XM_THREADS = 256 };
enum { XM_LD = XM_KB * 32 + 4 };   /* floats per row of the code tiles: 4 mod 8 -> LDS.128 conflict-free */
enum { XM_XLD = XM_KB * 32 + 16 }; /* bytes per token row of the raw activations */

/* raw weight bytes of one row and stage: the span of the stage's 4 blocks,
 * copied as the 16-byte chunks covering it (it may start anywhere mod 16);
 * an odd number of chunks per row spreads the rows over the banks */
template <int T> struct xm_geom {
    static constexpr int span = XM_KB * cblk<T>::bytes;
    static constexpr int nch0 = (span + 15 + 15) / 16;
    static constexpr int nch = nch0 | 1;
    static constexpr int rs = nch * 16;
};

/* shared memory, byte offsets (all multiples of 16) */
template <int T> struct xm_smem {
    static constexpr bool MIN = ex_min<T>::v;
    static constexpr int a = 0;                                        /* float [XM_BM][XM_LD] */
    static constexpr int b = a + XM_BM * XM_LD * 4;                    /* float [XM_BN][XM_LD] */
    static constexpr int dw = b + XM_BN * XM_LD * 4;                   /* float [XM_KB][XM_BM] */
    static constexpr int mw = dw + XM_KB * XM_BM * 4;                  /* float [XM_KB][XM_BM] */
    static constexpr int raw = mw + (MIN ? XM_KB * XM_BM * 4 : 0);     /* [2][XM_BM][rs] */
    static constexpr int x = raw + 2 * XM_BM * xm_geom<T>::rs;         /* int8 [2][XM_BN][XM_XLD] */
    static constexpr int xd = x + 2 * XM_BN * XM_XLD;                  /* float [2][XM_KB][XM_BN] */
    static constexpr int xs = xd + 2 * XM_KB * XM_BN * 4;              /* float [2][XM_KB][XM_BN] */
    static constexpr int bytes = xs + (MIN ? 2 * XM_KB * XM_BN * 4 : 0);
};

static __device__ __forceinline__ void xm_cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void xm_cp4(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
/* d = a * b with a zero accumulator: exactly (float) sum of 4 integer products */
static __device__ __forceinline__ void xm_mma(float (&d)[4], float a0, float a1, float b0) {
    asm("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(b0)), "f"(0.f));
}
/* byte c of w (a signed code) as a float: 0x4B000000 | (code + 128) is the
 * float 8388608 + code + 128; w80 = w ^ 0x80808080 holds the code + 128 */
static __device__ __forceinline__ float xm_f(uint32_t w80, int c) {
    return __fsub_rn(__uint_as_float(__byte_perm(w80, 0x4B000000u, 0x7440u + c)), 8388736.f);
}
/* 8 code words (element 4k + c = byte c of w[k]) -> 32 floats at dst, lane-minor */
static __device__ __forceinline__ void xm_store(float *dst, const uint32_t (&w)[8]) {
    uint32_t v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = w[k] ^ 0x80808080u;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        *(float4 *)(dst + 8 * c) = make_float4(xm_f(v[0], c), xm_f(v[1], c), xm_f(v[2], c), xm_f(v[3], c));
        *(float4 *)(dst + 8 * c + 4) = make_float4(xm_f(v[4], c), xm_f(v[5], c), xm_f(v[6], c), xm_f(v[7], c));
    }
}

// ---------------------------------------------------------------- kernel

template <int T>
__global__ void __launch_bounds__(XM_THREADS, 1)
mmx_kernel(const __grid_constant__ mm_set ms, const int8_t *__restrict__ xq, const float *__restrict__ xd,
           const float *__restrict__ xs, int cols, int ntok) {
    using G = xm_geom<T>;
    using L = xm_smem<T>;
    constexpr bool MIN = ex_min<T>::v;
    extern __shared__ __align__(16) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j = mm_pick(ms, blockIdx.x);
    const int rows = ms.rows[j], r0 = (blockIdx.x - ms.tile0[j]) * XM_BM, t0 = blockIdx.y * XM_BN;
    const int ng = cols / 32, nst = (ng + XM_KB - 1) / XM_KB;
    __shared__ const uint8_t *s_rowp[XM_BM];   /* rows past the end read the last one */
    if (tid < XM_BM) s_rowp[tid] = ms.w[j] + (size_t)min(r0 + tid, rows - 1) * ms.row_bytes[j];
    const uint8_t *wend = ms.w[j] + (size_t)rows * ms.row_bytes[j];
    __syncthreads();

    /* cp.async of stage s into raw buffers s & 1 */
    auto issue = [&](int s) {
        const int buf = s & 1;
#pragma unroll 1
        for (int c = tid; c < XM_BN * (XM_KB * 32 / 16); c += XM_THREADS) {
            const int tk = c >> 3, ch = c & 7, k = s * XM_KB * 32 + ch * 16, t = t0 + tk;
            const bool ok = t < ntok && k < cols;
            xm_cp16(sb + L::x + (buf * XM_BN + tk) * XM_XLD + ch * 16, ok ? xq + (size_t)t * cols + k : xq,
                    ok ? 16 : 0);
        }
#pragma unroll 1
        for (int c = tid; c < XM_BN * XM_KB; c += XM_THREADS) {
            const int tk = c & (XM_BN - 1), kb = c / XM_BN, g = s * XM_KB + kb, t = t0 + tk;
            const bool ok = t < ntok && g < ng;
            const size_t o = ok ? (size_t)t * ng + g : 0;
            const int d = (buf * XM_KB + kb) * XM_BN + tk;
            xm_cp4(sb + L::xd + 4 * d, xd + o, ok ? 4 : 0);
            if constexpr (MIN) xm_cp4(sb + L::xs + 4 * d, xs + o, ok ? 4 : 0);
        }
#pragma unroll 1
        for (int c = tid; c < XM_BM * G::nch; c += XM_THREADS) {
            const int row = c / G::nch, ch = c % G::nch;
            const uint8_t *rp = s_rowp[row];
            const uint8_t *src = (const uint8_t *)((uintptr_t)(rp + (size_t)s * G::span) & ~(uintptr_t)15) + 16 * ch;
            const ptrdiff_t left = wend - src;
            const int nb = ch >= G::nch0 ? 0 : left >= 16 ? 16 : left > 0 ? (int)left : 0;
            xm_cp16(sb + L::raw + (buf * XM_BM + row) * G::rs + 16 * ch, nb ? src : rp, nb);
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    /* raw stage s -> f32 code tiles and scales: thread = (row or token, block) */
    auto unpack = [&](int s) {
        const int buf = s & 1, u = tid & 63, kb = tid >> 6, g = s * XM_KB + kb;
        if (g >= ng) return;
        {
            const uint8_t *blk = sm + L::raw + (buf * XM_BM + u) * G::rs +
                                 ((uintptr_t)(s_rowp[u] + (size_t)s * G::span) & 15) + kb * cblk<T>::bytes;
            uint32_t w[8];
#pragma unroll
            for (int k = 0; k < 8; k++) w[k] = ex_word<T>(blk, k);
            xm_store((float *)(sm + L::a) + u * XM_LD + kb * 32, w);
            ((float *)(sm + L::dw))[kb * XM_BM + u] = ex_d(blk);
            if constexpr (MIN) ((float *)(sm + L::mw))[kb * XM_BM + u] = ex_m(blk);
        }
        {
            const uint4 *p = (const uint4 *)(sm + L::x + (buf * XM_BN + u) * XM_XLD + kb * 32);
            const uint4 v0 = p[0], v1 = p[1];
            const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            xm_store((float *)(sm + L::b) + u * XM_LD + kb * 32, w);
        }
    };

    const int wr = warp & 1, wt = warp >> 1, g = lane >> 2, c = lane & 3;
    const float *sa = (const float *)(sm + L::a), *sbt = (const float *)(sm + L::b);
    const float *s_dw = (const float *)(sm + L::dw), *s_mw = (const float *)(sm + L::mw);
    /* acc[m][n][l][i]: m-tile m, n-tile n, lane l, C element i */
    float acc[2][2][8][4];
    float summ[2][2][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int i = 0; i < 4; i++) summ[m][n][i] = 0.f;
#pragma unroll
            for (int l = 0; l < 8; l++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[m][n][l][i] = 0.f;
        }

    issue(0);
#pragma unroll 1
    for (int s = 0; s < nst; s++) {
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();   /* stage s landed; everyone is done with the tiles of stage s - 1 */
        if (s + 1 < nst) issue(s + 1);
        unpack(s);
        __syncthreads();
        const int buf = s & 1;
        const float *s_xd = (const float *)(sm + L::xd) + buf * XM_KB * XM_BN;
        const float *s_xs = (const float *)(sm + L::xs) + buf * XM_KB * XM_BN;
#pragma unroll 1
        for (int kb = 0; kb < XM_KB; kb++) {
            if (s * XM_KB + kb >= ng) break;
            /* f = dx * dy of each C element, as the CPU: weight scale times activation scale */
            float f[2][2][4];
#pragma unroll
            for (int m = 0; m < 2; m++) {
                const int row = wr * 32 + 16 * m + g;
                const float dx0 = s_dw[kb * XM_BM + row], dx1 = s_dw[kb * XM_BM + row + 8];
                float mx0 = 0.f, mx1 = 0.f;
                if constexpr (MIN) { mx0 = s_mw[kb * XM_BM + row]; mx1 = s_mw[kb * XM_BM + row + 8]; }
#pragma unroll
                for (int n = 0; n < 2; n++) {
                    const int tk = wt * 16 + 8 * n + 2 * c;
                    const float2 dy = *(const float2 *)(s_xd + kb * XM_BN + tk);
                    f[m][n][0] = __fmul_rn(dx0, dy.x);
                    f[m][n][1] = __fmul_rn(dx0, dy.y);
                    f[m][n][2] = __fmul_rn(dx1, dy.x);
                    f[m][n][3] = __fmul_rn(dx1, dy.y);
                    if constexpr (MIN) {
                        const float2 sy = *(const float2 *)(s_xs + kb * XM_BN + tk);
                        summ[m][n][0] = __fadd_rn(summ[m][n][0], __fmul_rn(mx0, sy.x));
                        summ[m][n][1] = __fadd_rn(summ[m][n][1], __fmul_rn(mx0, sy.y));
                        summ[m][n][2] = __fadd_rn(summ[m][n][2], __fmul_rn(mx1, sy.x));
                        summ[m][n][3] = __fadd_rn(summ[m][n][3], __fmul_rn(mx1, sy.y));
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {   /* lanes 4h .. 4h + 3 */
                float4 a[2][2], bv[2];
#pragma unroll
                for (int m = 0; m < 2; m++)
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        a[m][i] = *(const float4 *)(sa + (wr * 32 + 16 * m + 8 * i + g) * XM_LD + kb * 32 + 8 * c + 4 * h);
#pragma unroll
                for (int n = 0; n < 2; n++)
                    bv[n] = *(const float4 *)(sbt + (wt * 16 + 8 * n + g) * XM_LD + kb * 32 + 8 * c + 4 * h);
#pragma unroll
                for (int ll = 0; ll < 4; ll++) {
                    const int l = 4 * h + ll;
#pragma unroll
                    for (int m = 0; m < 2; m++)
#pragma unroll
                        for (int n = 0; n < 2; n++) {
                            const float a0 = ((const float *)&a[m][0])[ll], a1 = ((const float *)&a[m][1])[ll];
                            float p[4];
                            xm_mma(p, a0, a1, ((const float *)&bv[n])[ll]);
#pragma unroll
                            for (int i = 0; i < 4; i++) acc[m][n][l][i] = __fmaf_rn(f[m][n][i], p[i], acc[m][n][l][i]);
                        }
                }
            }
        }
    }

    /* the CPU's hsum per output, then + summ (q8_1) */
    float *out = ms.out[j];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float s0 = __fadd_rn(acc[m][n][0][i], acc[m][n][4][i]), s1 = __fadd_rn(acc[m][n][1][i], acc[m][n][5][i]);
                float s2 = __fadd_rn(acc[m][n][2][i], acc[m][n][6][i]), s3 = __fadd_rn(acc[m][n][3][i], acc[m][n][7][i]);
                float v = __fadd_rn(__fadd_rn(s0, s2), __fadd_rn(s1, s3));
                if constexpr (MIN) v = __fadd_rn(v, summ[m][n][i]);
                const int r = r0 + wr * 32 + 16 * m + g + 8 * (i >> 1);
                const int t = t0 + wt * 16 + 8 * n + 2 * c + (i & 1);
                if (r < rows && t < ntok) out[(size_t)t * rows + r] = v;
            }
}

// ---------------------------------------------------------------- launcher

template <int T>
static bool mmx_run(lkv_bctx *b, mm_set &ms, int cols, int n) {
    if constexpr (ex_ok<T>::v) {
        constexpr int bytes = xm_smem<T>::bytes;
        static unsigned configured = 0;   /* one bit per device: shared-memory limit raised */
        if (b->device >= 32 || !(configured >> b->device & 1u)) {
            LKV_CUDA_CALL(b, cudaFuncSetAttribute(mmx_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                          "matmul (mmx-old): shared memory limit");
            if (b->device < 32) configured |= 1u << b->device;
        }
        ms.tile0[0] = 0;
        for (int i = 0; i < ms.n_w; i++) ms.tile0[i + 1] = ms.tile0[i] + (int)lkv_cdiv(ms.rows[i], XM_BM);
        const dim3 grid(ms.tile0[ms.n_w], lkv_cdiv(n, XM_BN));
        mmx_kernel<T><<<grid, XM_THREADS, bytes, b->stream>>>(ms, b->xq, b->xd, b->xs, cols, n);
        return true;
    } else {
        (void)b; (void)ms; (void)cols; (void)n;
        return false;
    }
}

bool lkv_cuda_mmx_tf32(lkv_bctx *b, int type, mm_set &ms, int cols, int n) {
    switch (type) {
#define X(T) case T: return mmx_run<T>(b, ms, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
