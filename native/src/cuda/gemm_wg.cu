/*
 * cuda/gemm_wg.cu: prefill GEMM (n > MV_MAX_TOK tokens) on Hopper's
 * warpgroup tensor cores (wgmma), f16 operands, f32 accumulators, for every
 * weight type. choose_matmul.cu gives it the fast kind's prefill on sm_90a
 * for the weight types without an int8 GEMM (float, q2_K, q3_K, q6_K), in
 * place of gemm_f16.cu's WMMA kernel (H200, 2026-12-02, pp512 of the 8B
 * shape with q6_K weights: 55.2 against 115.8 ms). For q4_0 it lost to
 * mmq.cu (52.2 against 45.7 ms), and so did a variant that read the raw
 * q4_0 blocks and dequantized them in shared memory, one stage ahead of the
 * products (47.3 ms; q8_0: 53.1 against 55.4, too little to keep a kernel
 * for; git has it, commit d2de1db): with one block of two warpgroups per
 * SM, a barrier every 64 of K and one stage of copies in flight, both stay
 * near 190 TFLOP/s. Warp-specialized producers (TMA, mbarriers) and deeper
 * stages are what would take it further.
 *
 * Three launches per call:
 *   1. x (n, cols) f32 -> x16 (n, cols) f16, once per call (round to nearest);
 *   2. the weights of the call -> w16 (rows, cols) f16 in a bounded scratch
 *      (WG_SCRATCH bytes; weights larger than what is left are split by rows
 *      into several GEMMs), each element dequantized once per call with dq8
 *      (quant.cuh: code * d in f32) and rounded to f16: the same operand
 *      values as gemm_f16.cu, which makes that kernel this one's reference up
 *      to the order of the f32 adds (f16 weights are read where they lie);
 *   3. the GEMM over the two f16 matrices.
 *
 * GEMM tiles: a block of 2 warpgroups computes 128 tokens (warpgroup g:
 * tokens 64 g ..) x 128 weight rows, K in steps of 64. Both operands are
 * copied by cp.async (16-byte pieces, rows past the end and K past cols
 * zero-filled) into the core-matrix layout attn_fa_tile.cuh describes (K-major,
 * element (r, c) of a 128-row tile at byte (c / 8) * 2048 + r * 16 + (c % 8) * 2),
 * which wgmma reads through descriptors without swizzle (LBO 2048: the next
 * 8 of K; SBO 128: the next 8 rows). WG_NS stages: stage t + WG_NS - 2 is
 * copied while the products of stage t - 1 may still run (one wgmma group
 * in flight per warpgroup: wait_group 1), so a stage is overwritten only two
 * barriers after its last reader finished. The accumulator fragments (the
 * mma.sync C layout per warp, attn_fa_ptx.cuh) are stored straight to the
 * f32 outputs.
 *
 * The kernel exists only in a build for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL);
 * lkv_cuda_gemm_wg_probe tells the chooser whether the code the device runs
 * has it.
 */
#include "attn_fa_ptx.cuh"
#include "matmul.cuh"

enum { WG_BM = 128, WG_BN = 128, WG_BK = 64, WG_NS = 4, WG_THREADS = 256 };
enum { WG_TILE = WG_BM * WG_BK * 2, WG_STAGE = 2 * WG_TILE, WG_SMEM = WG_NS * WG_STAGE };
static const size_t WG_SCRATCH = (size_t)128 << 20;   /* f16 weights of one GEMM, bytes */

/* the pieces of one GEMM: rows [a, a + rows[j]) of weight j sit in the scratch
 * from row tile0[j] * WG_BN on; out[j] points at column a of its output,
 * whose rows are ld[j] floats apart */
struct wg_set {
    const __half *w16;
    float *out[4];
    int ld[4], rows[4], tile0[5];
    int n_p;
};

// ---------------------------------------------------------------- conversions

static __global__ void wg_x_to_f16(const float4 *__restrict__ x, uint2 *__restrict__ y, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
        y[i] = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
    }
}

/* rows [0, rows) of a weight (row_bytes apart) -> dst (rows, cols) f16 */
template <int T>
static __global__ void wg_w_to_f16(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int cols,
                                   uint4 *__restrict__ dst) {
    const int per_row = cols / 8;
    const size_t total = (size_t)rows * per_row;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i / per_row), e = (int)(i - (size_t)r * per_row);
        float y[8];
        dq8<T>(w + (size_t)r * row_bytes, e, y);
        __half2 h[4];
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2half2_rn(y[2 * k], y[2 * k + 1]);
        dst[i] = *(const uint4 *)h;
    }
}

// ---------------------------------------------------------------- the GEMM


#if FA_HAVE_WGMMA
/* the accumulators of a 128 x 128 tile (tokens t0.., rows r0.. of an output
 * whose rows are ld floats apart): fragment (i, c) of warp w is token
 * t0 + 16 w + g (+ 8 for c >= 2), row r0 + 8 i + 2 q + (c & 1) */
static __device__ __forceinline__ void wg_store(const float (&acc)[16][4], float *out, size_t ld, int t0, int r0,
                                                int rows, int n) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int t = t0 + 16 * warp + g + 8 * h;
        if (t >= n) continue;
        float *o = out + (size_t)t * ld;
        const bool pair = ((uintptr_t)o & 7) == 0;   /* rows of odd length: pairs may be misaligned */
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int r = r0 + 8 * i + 2 * q;
            if (pair && r + 1 < rows) {
                *(float2 *)(o + r) = make_float2(acc[i][2 * h], acc[i][2 * h + 1]);
            } else {
                if (r < rows) o[r] = acc[i][2 * h];
                if (r + 1 < rows) o[r + 1] = acc[i][2 * h + 1];
            }
        }
    }
}
#endif

/* grid (token tiles, row tiles of all pieces) */
static __global__ void __launch_bounds__(WG_THREADS, 1)
wg_gemm_kernel(const __grid_constant__ wg_set ws, const __half *__restrict__ x16, int cols, int n) {
#if FA_HAVE_WGMMA
    extern __shared__ __align__(128) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2;
    const int t0 = blockIdx.x * WG_BM, bt = blockIdx.y;
    int j = 0;
    while (j + 1 < ws.n_p && bt >= ws.tile0[j + 1]) j++;
    const int r0 = (bt - ws.tile0[j]) * WG_BN, rows = ws.rows[j];
    const __half *wb = ws.w16 + ((size_t)ws.tile0[j] * WG_BN + r0) * cols;
    const int nk = (cols + WG_BK - 1) / WG_BK;

    /* stage s's copies: 1024 pieces of 16 bytes per operand, 4 per thread; a
     * half warp takes 16 rows of one 8-column group, the two halves adjacent
     * groups (32 contiguous bytes per row in global memory) */
    auto issue = [&](int s) {
        if (s < nk) {
            const int k0 = s * WG_BK;
            const uint32_t st = sb + (s % WG_NS) * WG_STAGE;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int p = tid + WG_THREADS * i, g = p >> 5, l = p & 31;
                const int r = (g & 7) * 16 + (l & 15), pc = (g >> 3) * 2 + (l >> 4), kc = k0 + 8 * pc;
                const uint32_t off = pc * (WG_BM * 16) + r * 16;
                const bool ka = kc < cols;
                const bool oa = ka && t0 + r < n, ob = ka && r0 + r < rows;
                fa_cp16z(st + off, oa ? x16 + (size_t)(t0 + r) * cols + kc : x16, oa);
                fa_cp16z(st + WG_TILE + off, ob ? wb + (size_t)r * cols + kc : wb, ob);
            }
        }
        fa_cp_commit();
    };

    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 16; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    fa_reg_fence(acc);

#pragma unroll
    for (int s = 0; s < WG_NS - 2; s++) issue(s);
    for (int t = 0; t < nk; t++) {
        fa_cp_wait<WG_NS - 3>();   /* stage t landed (this thread's pieces) */
        fa_fence_async();
        __syncthreads();           /* everyone's pieces; stage t - 2's products are done */
        issue(t + WG_NS - 2);
        const uint32_t st = sb + (t % WG_NS) * WG_STAGE;
        fa_wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++)
            fa_wgmma_ss_n128_f16(acc, fa_desc(st + wgi * 64 * 16 + kk * 2 * (WG_BM * 16), WG_BM * 16, 128),
                   fa_desc(st + WG_TILE + kk * 2 * (WG_BN * 16), WG_BN * 16, 128));
        fa_wg_commit();
        fa_wg_wait1();
    }
    fa_wg_wait0();
    fa_reg_fence(acc);

    wg_store(acc, ws.out[j], (size_t)ws.ld[j], t0, r0, rows, n);
#endif
}


static __global__ void wg_probe_kernel(int *out) { *out = FA_HAVE_WGMMA; }

// ---------------------------------------------------------------- launcher

bool lkv_cuda_gemm_wg_probe(lkv_bctx *b) {
    int *d = nullptr, h = 0;
    if (cudaMalloc((void **)&d, sizeof(int)) != cudaSuccess) { cudaGetLastError(); return false; }
    wg_probe_kernel<<<1, 1, 0, b->stream>>>(d);
    bool ok = cudaGetLastError() == cudaSuccess &&
              cudaMemcpyAsync(&h, d, sizeof(int), cudaMemcpyDeviceToHost, b->stream) == cudaSuccess &&
              cudaStreamSynchronize(b->stream) == cudaSuccess && h == 1;
    cudaFree(d);
    cudaGetLastError();
    if (ok && cudaFuncSetAttribute(wg_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM) != cudaSuccess) {
        cudaGetLastError();
        ok = false;
    }
    return ok;
}

/* device memory of at least `bytes` in *p (grown, never shrunk; cap: its size) */
static bool wg_buf(void **p, size_t *cap, size_t bytes) {
    if (*cap >= bytes) return true;
    if (*p) cudaFree(*p);
    *p = nullptr;
    *cap = 0;
    if (cudaMalloc(p, bytes) != cudaSuccess) { cudaGetLastError(); *p = nullptr; return false; }
    *cap = bytes;
    return true;
}

/* for the kernel harness (tests/cuda/test_ops.c) */
extern "C" int lkv_cuda_gemm_wg_ok(const lkv_bctx *b) { return b->wg_ok; }

void lkv_cuda_gemm_wg_free(lkv_bctx *b) {
    if (b->wg_x16) cudaFree(b->wg_x16);
    if (b->wg_w16) cudaFree(b->wg_w16);
    b->wg_x16 = b->wg_w16 = nullptr;
    b->wg_x16_cap = b->wg_w16_cap = 0;
}

static unsigned wg_grid(size_t work, int n_sm) {
    const size_t g = (work + 255) / 256, cap = (size_t)n_sm * 16;
    return (unsigned)(g < cap ? (g ? g : 1) : cap);
}

template <int T>
static bool wg_run(lkv_bctx *b, mm_set &ms, const float *x, int cols, int n) {
    if (!wg_buf(&b->wg_x16, &b->wg_x16_cap, (size_t)n * cols * 2)) return false;
    const size_t per_row = (size_t)cols * 2, cap_rows = WG_SCRATCH / per_row / WG_BN * WG_BN;
    if (cap_rows < WG_BN) return false;
    const size_t n4 = (size_t)n * cols / 4;
    wg_x_to_f16<<<wg_grid(n4, b->n_sm), 256, 0, b->stream>>>((const float4 *)x, (uint2 *)b->wg_x16, n4);
    LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg: x to f16)");
    const __half *xh = (const __half *)b->wg_x16;
    if constexpr (T == LKV_TYPE_F16) {   /* already f16 rows: each weight is its own B */
        bool direct = true;
        for (int i = 0; i < ms.n_w; i++) direct = direct && ((uintptr_t)ms.w[i] & 15) == 0;
        if (direct) {
            for (int i = 0; i < ms.n_w; i++) {
                wg_set s = {};
                s.w16 = (const __half *)ms.w[i];
                s.out[0] = ms.out[i];
                s.ld[0] = s.rows[0] = ms.rows[i];
                s.tile0[1] = (int)lkv_cdiv(ms.rows[i], WG_BN);
                s.n_p = 1;
                wg_gemm_kernel<<<dim3(lkv_cdiv(n, WG_BM), s.tile0[1]), WG_THREADS, WG_SMEM, b->stream>>>(s, xh, cols, n);
                LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg)");
            }
            return true;
        }
    }
    /* pack pieces of the weights into the scratch, one GEMM per full scratch */
    int j = 0, a = 0;
    while (j < ms.n_w) {
        wg_set s = {};
        size_t used = 0;   /* scratch rows taken (whole tiles) */
        while (j < ms.n_w && s.n_p < 4 && used < cap_rows) {
            const int left = ms.rows[j] - a;
            const int take = (int)(left <= (int)(cap_rows - used) ? left : (int)(cap_rows - used));
            if (!wg_buf(&b->wg_w16, &b->wg_w16_cap, WG_SCRATCH)) return false;
            __half *dst = (__half *)b->wg_w16 + used * cols;
            const size_t work = (size_t)take * (cols / 8);
            wg_w_to_f16<T><<<wg_grid(work, b->n_sm), 256, 0, b->stream>>>(ms.w[j] + (size_t)a * ms.row_bytes[j],
                                                                         ms.row_bytes[j], take, cols, (uint4 *)dst);
            LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg: weights to f16)");
            s.out[s.n_p] = ms.out[j] + a;
            s.ld[s.n_p] = ms.rows[j];
            s.rows[s.n_p] = take;
            s.tile0[s.n_p] = (int)(used / WG_BN);
            s.n_p++;
            used += lkv_cdiv(take, WG_BN) * (size_t)WG_BN;
            a += take;
            if (a == ms.rows[j]) { j++; a = 0; }
        }
        s.tile0[s.n_p] = (int)(used / WG_BN);
        s.w16 = (const __half *)b->wg_w16;
        const dim3 grid(lkv_cdiv(n, WG_BM), s.tile0[s.n_p]);
        wg_gemm_kernel<<<grid, WG_THREADS, WG_SMEM, b->stream>>>(s, xh, cols, n);
        LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg)");
    }
    return true;
}

bool lkv_cuda_gemm_wg(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n) {
    if (n <= 0 || !b->wg_ok || cols % 8) return false;
    switch (type) {
#define X(T) case T: return wg_run<T>(b, ms, x, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
