/*
 * cuda/gemm_wg.cu: prefill GEMM (n > MV_MAX_TOK tokens) on Hopper's
 * warpgroup tensor cores (wgmma), f16 operands, f32 accumulators, for every
 * weight type, warp-specialized: one producer thread feeds a ring of shared-
 * memory stages by bulk copies (cp.async.bulk) completed on mbarriers, two
 * consumer warpgroups run the products, and no block-wide barrier is taken
 * after the start. choose_matmul.cu gives it the fast kind's prefill on
 * sm_90a for every weight type except q4_1, q5_0, q5_1, q8_0 and iq4_nl
 * (its table says why; docs/performance.md has the figures; the
 * first version, with every thread copying by cp.async and a __syncthreads
 * per 64 of K, stayed near 190 TFLOP/s).
 *
 * The k-quants (q2_K .. q6_K) and iq4_xs take integer operands instead, the
 * CPU's codes (8-bit ones and wgmma s8 for q2_K, q3_K, q6_K and iq4_xs, f16
 * for q4_K and q5_K), and a per-super-block scaling in the consumer loop
 * (gemm_wg_kcodes.cuh): their products are the CPU's. For the other types:
 *
 * Three launches per call:
 *   1. x (n, cols) f32 -> x16 f16, written tile by tile in the order the
 *      GEMM's blocks read it; for a quantized weight type x is first rounded
 *      as the CPU backend rounds it for that type's dot (q8_0 / q8_1 codes
 *      per 32, q8_K per 256: the value code * scale), so that the product
 *      differs from the CPU's by the f16 rounding of the operands and the
 *      order of the adds, not by the 8-bit rounding of x (without it the
 *      tiny legacy and q4_K models left the CPU by mean KL 6.4e-3 to 1.7e-2);
 *      for bf16 weights x is rounded to bf16, as the CPU rounds it for their
 *      dot, and the whole GEMM runs on bf16 operands (the weights exactly);
 *   2. the weights of the call -> w16 f16 in a bounded scratch (WG_SCRATCH
 *      bytes; weights larger than what is left are split by rows into
 *      several GEMMs), each element dequantized once per call with dq8
 *      (quant.cuh: code * d in f32) and rounded to f16: the same operand
 *      values as gemm_f16.cu, which, fed x as the CPU rounds it, is this
 *      kernel's reference up to the order of the f32 adds;
 *   3. the GEMM over the two f16 (bf16) matrices.
 *
 * Tiled operands. Both copies are stored as tiles of 64 of K: an x tile is
 * 128 tokens x 64 (16 KiB), a weight tile BN rows x 64 (BN = 128 or 256;
 * 16 or 32 KiB); within a tile of R rows, element (r, c) sits at byte
 * (c / 8) * 16 R + r * 16 + (c % 8) * 2 (K-major core matrices of 8 rows x
 * 16 bytes, no swizzle), which wgmma reads through descriptors (LBO 16 R:
 * the next 8 of K; SBO 128: the next 8 rows). The tiles of one row panel
 * follow each other in K, so a stage is one contiguous bulk copy per
 * operand. Tokens past n, rows past the weight's and K past cols are zeros
 * in the copies (cols need only be a multiple of 8).
 *
 * GEMM blocks: 128 tokens x BN weight rows, 288 threads. Warps 0-7 are two
 * consumer warpgroups (warpgroup g: tokens 64 g ..), warp 8's first lane the
 * producer. Stage s of the WG_NS-deep ring has a `full` barrier (the
 * producer's arrival and the stage's bytes) and an `empty` one (an arrival
 * from every consumer thread). A consumer waits for full, issues the four
 * m64nBNk16 products of the stage as one wgmma group, and once the group
 * before it has finished (wait_group 1) releases that group's stage; the
 * producer waits for a stage's release before refilling it. The accumulator
 * fragments (the mma.sync C layout per warp, attn_fa_ptx.cuh) are stored
 * straight to the f32 outputs. The kernel is written for BN = 128 or 256
 * (m64n256k16: more products per byte of shared memory read), but 256 lost
 * wherever measured (H200, 2026-12-02, pp512 of the 8B shape: q4_0 39.3
 * against 37.4 ms, q8_0 39.0 / 37.2, q6_K 56.5 / 46.5; half the blocks, and
 * a 512-token prefill against a 4096-row weight fills half the SMs), so
 * WG_BN is 128.
 *
 * The kernel exists only in a build for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL);
 * lkv_cuda_gemm_wg_probe tells the chooser whether the code the device runs
 * has it.
 */
#include "act_quant.cuh"
#include "async_ptx.cuh"
#include "matmul.cuh"

enum { WG_BM = 128, WG_BN = 128, WG_BK = 64, WG_THREADS = 288, WG_XTILE = WG_BM * WG_BK * 2, WG_RING = 196608 };
static const size_t WG_SCRATCH = (size_t)128 << 20;   /* f16 weights of one GEMM, bytes */

template <int BN> struct wg_shape {
    static constexpr int WTILE = BN * WG_BK * 2;               /* bytes of a weight tile */
    static constexpr int STAGE = WG_XTILE + WTILE;
    static constexpr int NS = WG_RING / STAGE;                 /* 4 for 256, 6 for 128 */
    static constexpr int SCALES = NS * STAGE + 2 * NS * 8;     /* the k-quants' weight scales */
    static constexpr int SMEM = SCALES + 2 * 2 * 256 * 4;      /* the ring, the barriers, 2 x 2 x 256 scales */
};

/* the pieces of one GEMM: rows [a, a + rows[j]) of weight j sit in the scratch
 * from row tile tile0[j] on; out[j] points at column a of its output, whose
 * rows are ld[j] floats apart */
struct wg_set {
    const uint8_t *w16;
    float *out[4];
    int ld[4], rows[4], tile0[5];
    int n_p;
    /* the k-quants' integer operands (gemm_wg_kcodes.cuh): per super-block b,
     * the activations' scales xsc[b * ldx + token] and the weights'
     * wsc[(plane * nsb + b) * ldw + scratch row] (q2_K: two planes) */
    const float *xsc, *wsc;
    int nsb, ldx, ldw;
};

// ---------------------------------------------------------------- conversions

/* byte offset of element group (r, g) (8 elements from column 8 g) in a
 * matrix tiled by R rows, nkt tiles of 64 in K per row panel */
static __device__ __forceinline__ size_t wg_tiled(int r, int g, int R, int nkt) {
    return (((size_t)(r / R) * nkt + (g >> 3)) * WG_BK * R + (size_t)(g & 7) * 8 * R + (r % R) * 8) * 2;
}

/* thread i -> (row r, group g): a warp takes 8 consecutive rows x 4
 * consecutive groups, so it reads 32 contiguous elements of each row and
 * writes 4 runs of 128 contiguous bytes */
static __device__ __forceinline__ void wg_item(size_t i, int R, int nkt, int &r, int &g) {
    const size_t per_panel = (size_t)R * nkt * 8;
    const int p = (int)(i / per_panel);
    const int e = (int)(i - (size_t)p * per_panel), u = e >> 5, l = e & 31;
    r = p * R + (u % (R / 8)) * 8 + (l & 7);
    g = (u / (R / 8)) * 4 + (l >> 3);
}

/* every 16-byte piece of a matrix tiled by R rows (rows_pad rows, nkt tiles of
 * K per panel) from load(r, g, y): the 8 elements of group g of row r, or
 * zeros where it returns false (no such element); rounded to bf16 (BF) or f16 */
template <bool BF, class Load>
static __device__ __forceinline__ void wg_to_tiled(uint8_t *__restrict__ dst, int rows_pad, int R, int nkt,
                                                   Load load) {
    const size_t total = (size_t)rows_pad * nkt * 8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int r, g;
        wg_item(i, R, nkt, r, g);
        float y[8];
        const uint4 v = load(r, g, y) ? (BF ? lkv_bf16x8(y) : lkv_f16x8(y)) : make_uint4(0, 0, 0, 0);
        *(uint4 *)(dst + wg_tiled(r, g, R, nkt)) = v;
    }
}

/* the 8 floats at s (16-byte aligned) */
static __device__ __forceinline__ void wg_load8(const float *s, float (&v)[8]) {
    const float4 a = ((const float4 *)s)[0], b = ((const float4 *)s)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

/* x (n, cols) f32 -> x16, tiled by WG_BM rows, n_pad (a multiple of WG_BM) rows,
 * rounded to nearest f16, or bf16 for bf16 weights (BF): the float weights'
 * operand, as the CPU rounds x for them (its vec_dot_type; f32 weights: the
 * CPU keeps x in f32, here it is rounded to f16 like the weights) */
template <bool BF>
static __global__ void wg_x_to_f16(const float *__restrict__ x, uint8_t *__restrict__ y, int n, int cols,
                                   int n_pad, int nkt) {
    wg_to_tiled<BF>(y, n_pad, WG_BM, nkt, [&](int r, int g, float (&v)[8]) {
        if (r >= n || 8 * g >= cols) return false;
        wg_load8(x + (size_t)r * cols + 8 * g, v);
        return true;
    });
}

/* x (n, cols) f32 -> x16 as above, each 32-block first rounded by the CPU's
 * q8_0 / q8_1 rule (legacy.c quantize8): d = amax / 127, codes
 * round-half-even(x * (127 / amax)), element = code * d rounded to f16 (the
 * value the CPU's to_float gives), then to f16. A block is the 4 groups of one
 * row that lanes l, l ^ 8, l ^ 16, l ^ 24 of a warp hold (wg_item); the loop's
 * trip count is the same for every lane of a warp (total and the stride are
 * multiples of 32), so the shuffles are full. */
static __global__ void wg_x_q8_to_f16(const float *__restrict__ x, uint8_t *__restrict__ y, int n, int cols,
                                      int n_pad, int nkt) {
    const size_t total = (size_t)n_pad * nkt * 8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int r, g;
        wg_item(i, WG_BM, nkt, r, g);
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < n && 8 * g < cols) wg_load8(x + (size_t)r * cols + 8 * g, v);
        float amax = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 8));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 16));
        const act_q8_rule rule(amax);
        const float d16 = rule.d16();
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = rule.value(v[k], d16);
        *(uint4 *)(y + wg_tiled(r, g, WG_BM, nkt)) = lkv_f16x8(v);
    }
}

/* the CPU's q8_K scale (kquants.c lkv_q8_K_from_float) of a 256-block a warp
 * holds, 8 values a lane in order: max = the first element of the largest
 * magnitude, iscale = -127 / max, d = 1 / iscale; false (both 0) for a block
 * of zeros, whose codes are 0 */
static __device__ __forceinline__ bool wg_q8k_scale(const float (&v)[8], int lane, float &iscale, float &d) {
    float amax = 0.f, mx = 0.f;
    int at = 1 << 30;
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (fabsf(v[k]) > amax) { amax = fabsf(v[k]); mx = v[k]; at = 8 * lane + k; }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {   /* the largest magnitude, the first of equals */
        const float a2 = __shfl_xor_sync(0xffffffffu, amax, o), m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        const int at2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 > amax || (a2 == amax && at2 < at)) { amax = a2; mx = m2; at = at2; }
    }
    iscale = amax != 0.f ? __fdiv_rn(-127.f, mx) : 0.f;
    d = amax != 0.f ? __fdiv_rn(1.f, iscale) : 0.f;
    return amax != 0.f;
}

/* an element's q8_K code: round-half-even(iscale x) clamped to +-127 */
static __device__ __forceinline__ int wg_q8k_code(float x, float iscale) {
    return min(127, max(-127, __float2int_rn(__fmul_rn(iscale, x))));
}

/* x -> x16 as above by the CPU's q8_K rule, cols a multiple of 256: one warp
 * a 256-block of one row (lane l: group 32 b + l); element = code * d, then
 * f16. Rows n .. n_pad are zeros. */
static __global__ void wg_x_q8k_to_f16(const float *__restrict__ x, uint8_t *__restrict__ y, int n, int cols,
                                       int n_pad, int nkt) {
    const int nb = cols / 256;
    const size_t total = (size_t)n_pad * nb * 32;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t w = i >> 5;
        const int r = (int)(w / nb), g = (int)(w % nb) * 32 + (int)(i & 31);
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < n) wg_load8(x + (size_t)r * cols + 8 * g, v);
        float iscale, d;
        if (wg_q8k_scale(v, (int)(i & 31), iscale, d)) {
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = __fmul_rn(d, (float)wg_q8k_code(v[k], iscale));
        }
        *(uint4 *)(y + wg_tiled(r, g, WG_BM, nkt)) = lkv_f16x8(v);
    }
}

/* rows [0, rows) of a weight (row_bytes apart) -> dst, tiled by R rows,
 * rows_pad (a multiple of R) rows; bf16 weights stay bf16 (exactly) */
template <int T>
static __global__ void wg_w_to_f16(const uint8_t *__restrict__ w, size_t row_bytes, int rows, int cols,
                                   int rows_pad, int R, int nkt, uint8_t *__restrict__ dst) {
    wg_to_tiled<T == LKV_TYPE_BF16>(dst, rows_pad, R, nkt, [&](int r, int g, float (&v)[8]) {
        if (r >= rows || 8 * g >= cols) return false;
        dq8<T>(w + (size_t)r * row_bytes, g, v);
        return true;
    });
}

#include "gemm_wg_kcodes.cuh"

// ---------------------------------------------------------------- the GEMM

#if FA_HAVE_WGMMA
/* the accumulators of a 64 x 8 NB tile of warpgroup wg (tokens t0 + 64 wg ..,
 * rows r0.. of an output whose rows are ld floats apart): fragment (i, c) of
 * warp w is token 16 (w % 4) + g (+ 8 for c >= 2), row 8 i + 2 q + (c & 1) */
template <int NB>
static __device__ __forceinline__ void wg_store(const float (&acc)[NB][4], float *out, size_t ld, int t0, int r0,
                                                int rows, int n) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int t = t0 + 16 * warp + g + 8 * h;   /* warps 0-7: 16 tokens each */
        if (t >= n) continue;
        float *o = out + (size_t)t * ld;
        const bool pair = ((uintptr_t)o & 7) == 0;   /* rows of odd length: pairs may be misaligned */
#pragma unroll
        for (int i = 0; i < NB; i++) {
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

/* grid (token tiles, row tiles of all pieces); x16 and ws.w16 tiled, nkt
 * tiles of K per panel; both f16, or both bf16 (BF); KS > 0: the k-quants'
 * integer operands, KS k16 steps per super-block, or KS k32 steps of 8-bit
 * operands (I8: 1 q3_K, 2 q6_K / iq4_xs, 3 q2_K) (gemm_wg_kcodes.cuh) */
template <int BN, bool BF, int KS, int I8>
static __global__ void __launch_bounds__(WG_THREADS, 1)
wg_gemm_kernel(const __grid_constant__ wg_set ws, const uint8_t *__restrict__ x16, int nkt, int n) {
#if FA_HAVE_WGMMA
    using S = wg_shape<BN>;
    static_assert(!BF || BN == 128, "bf16 products: the 128-row tile only");
    static_assert(!KS || (BN == 128 && !BF), "integer operands: f16 or s8, the 128-row tile only");
    extern __shared__ __align__(128) uint8_t sm[];
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(sm);
    const uint32_t full = sb + S::NS * S::STAGE, empty = full + 8 * S::NS;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int tt = blockIdx.x, bt = blockIdx.y;

    if (tid == 0) {
        for (int s = 0; s < S::NS; s++) {
            mb_init(full + 8 * s, 1);
            mb_init(empty + 8 * s, WG_THREADS - 32);
        }
        mb_init_fence();
    }
    __syncthreads();

    if (warp == 8) {   /* the producer */
        if ((tid & 31) == 0) {
            const uint8_t *xa = x16 + (size_t)tt * nkt * WG_XTILE;
            const uint8_t *wb = ws.w16 + (size_t)bt * nkt * S::WTILE;
            for (int t = 0; t < nkt; t++) {
                const int s = t % S::NS;
                if (t >= S::NS) mb_wait(empty + 8 * s, (t / S::NS - 1) & 1);
                const uint32_t st = sb + s * S::STAGE;
                mb_arrive_tx(full + 8 * s, S::STAGE);
                bulk_g2s(st, xa + (size_t)t * WG_XTILE, WG_XTILE, full + 8 * s);
                bulk_g2s(st + WG_XTILE, wb + (size_t)t * S::WTILE, S::WTILE, full + 8 * s);
            }
        }
        return;
    }

    int j = 0;
    while (j + 1 < ws.n_p && bt >= ws.tile0[j + 1]) j++;
    const int r0 = (bt - ws.tile0[j]) * BN, wgi = warp >> 2;
    float acc[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    fa_reg_fence(acc);

    if constexpr (KS > 0) {
        wg_consume_kcodes<KS, wg_kq_unit(KS), S::NS, S::STAGE, I8>(ws, acc, sb, full, empty, wgi,
                                                   tt * WG_BM + 16 * warp + ((tid & 31) >> 2), bt * BN,
                                                   (float *)(sm + S::SCALES) + 2 * 256 * wgi);
    } else {
        for (int t = 0; t < nkt; t++) {
            const int s = t % S::NS;
            mb_wait(full + 8 * s, (t / S::NS) & 1);
            const uint32_t st = sb + s * S::STAGE;
            fa_wg_fence();
#pragma unroll
            for (int kk = 0; kk < WG_BK / 16; kk++) {
                const uint64_t da = fa_desc(st + wgi * 64 * 16 + kk * 2 * (WG_BM * 16), WG_BM * 16, 128);
                const uint64_t db = fa_desc(st + WG_XTILE + kk * 2 * (BN * 16), BN * 16, 128);
                if constexpr (BF) fa_wgmma_ss_n128<true>(acc, da, db, 1);
                else fa_wgmma_ss_f16(acc, da, db);
            }
            fa_wg_commit();
            fa_wg_wait1();   /* the group of stage t - 1 is done: its stage may be refilled */
            if (t > 0) mb_arrive(empty + 8 * ((t - 1) % S::NS));
        }
    }
    fa_wg_wait0();
    fa_reg_fence(acc);

    wg_store(acc, ws.out[j], (size_t)ws.ld[j], tt * WG_BM, r0, ws.rows[j], n);
#endif
}


/* the GEMM kernel weight type T runs (the k-quants' and iq4_xs's integer
 * operands: gemm_wg_kcodes.cuh), for the launch and for the probe */
template <int T, int BN> static constexpr auto wg_kernel_of() {
    using KQ = wg_kq<T>;
    return wg_gemm_kernel<BN, T == LKV_TYPE_BF16, KQ::on ? (int)KQ::S : 0, KQ::I8>;
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
    const int smem = wg_shape<WG_BN>::SMEM;
    const cudaFuncAttribute at = cudaFuncAttributeMaxDynamicSharedMemorySize;
    /* every type's kernel (several types share one) */
#define X(T) ok = ok && cudaFuncSetAttribute(wg_kernel_of<T, WG_BN>(), at, smem) == cudaSuccess;
    LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    if (!ok) cudaGetLastError();
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

void *lkv_cuda_wg_scratch(lkv_bctx *b, size_t *bytes) {
    if (!wg_buf(&b->wg_w16, &b->wg_w16_cap, WG_SCRATCH)) return nullptr;
    *bytes = b->wg_w16_cap;
    return b->wg_w16;
}

/* its device buffers for n tokens of inputs up to cols wide, each passed to
 * add (x16; with scratch, the weight scratch): the memory plan's (backend.cu) */
void lkv_cuda_gemm_wg_plan(int n, int cols, bool scratch, void (*add)(void *ud, int64_t bytes),
                           void *ud) {
    /* x16 as wg_run sizes it for the widest input (the k-quants' tiles are no
     * wider); the k-quants' scales (wg_sc, a few MiB) are not counted */
    const size_t n_pad = lkv_cdiv((size_t)(n > 0 ? n : 1), (size_t)WG_BM) * WG_BM;
    const size_t nkt = lkv_cdiv((size_t)cols, (size_t)WG_BK);
    add(ud, (int64_t)(n_pad * nkt * WG_XTILE / WG_BM));
    if (scratch) add(ud, (int64_t)WG_SCRATCH);
}

/* for the kernel harness (tests/cuda/test_ops.c) */
extern "C" int lkv_cuda_gemm_wg_ok(const lkv_bctx *b) { return b->wg_ok; }

void lkv_cuda_gemm_wg_free(lkv_bctx *b) {
    if (b->wg_x16) cudaFree(b->wg_x16);
    if (b->wg_w16) cudaFree(b->wg_w16);
    if (b->wg_sc) cudaFree(b->wg_sc);
    b->wg_x16 = b->wg_w16 = nullptr;
    b->wg_sc = nullptr;
    b->wg_x16_cap = b->wg_w16_cap = b->wg_sc_cap = 0;
}

static unsigned wg_grid(size_t work, int n_sm) {
    const size_t g = (work + 255) / 256, cap = (size_t)n_sm * 16;
    return (unsigned)(g < cap ? (g ? g : 1) : cap);
}

template <int T, int BN>
static bool wg_run(lkv_bctx *b, mm_set &ms, const float *x, int cols, int n) {
    using S = wg_shape<BN>;
    using KQ = wg_kq<T>;
    constexpr int KS = KQ::on ? (int)KQ::S : 0;
    static_assert(!KS || BN == 128, "k-quants: the 128-row tile");
    const int nsb = cols / 256, nsb_pad = wg_kq_pad(nsb, KQ::U), n_pad = (int)lkv_cdiv(n, WG_BM) * WG_BM;
    if (KS && cols % 256) return false;
    const int nkt = KS ? wg_kq_tiles(nsb_pad, KS) : (int)lkv_cdiv(cols, WG_BK);
    if (!wg_buf(&b->wg_x16, &b->wg_x16_cap, (size_t)n_pad * nkt * WG_XTILE / WG_BM)) return false;
    const size_t panel = (size_t)nkt * S::WTILE, cap_tiles = WG_SCRATCH / panel;
    if (cap_tiles < 1) return false;
    /* the k-quants' scales: the activations' (nsb_pad x n_pad), then the weights' (planes of nsb_pad x the
     * scratch's rows) */
    const int ldw = (int)(cap_tiles * BN);
    if (KS && !wg_buf((void **)&b->wg_sc, &b->wg_sc_cap,
                      sizeof(float) * (size_t)nsb_pad * (n_pad + KQ::PLANES * ldw)))
        return false;
    float *xsc = KS ? b->wg_sc : nullptr, *wsc = KS ? b->wg_sc + (size_t)nsb_pad * n_pad : nullptr;
    /* x as the CPU rounds it for this weight type (its vec_dot_type), then f16 */
    const unsigned gx = wg_grid((size_t)n_pad * nkt * 8, b->n_sm);
    uint8_t *x16 = (uint8_t *)b->wg_x16;
    if constexpr (KS > 0)
        wg_x_kcodes<T><<<gx, 256, 0, b->stream>>>(x, x16, xsc, n, nsb, nsb_pad, n_pad, nkt);
    else if (cblk<T>::qk == 1)
        wg_x_to_f16<T == LKV_TYPE_BF16><<<gx, 256, 0, b->stream>>>(x, x16, n, cols, n_pad, nkt);
    else if (lkv_act_format(T, cols) == ACT_Q8K)
        wg_x_q8k_to_f16<<<gx, 256, 0, b->stream>>>(x, x16, n, cols, n_pad, nkt);
    else
        wg_x_q8_to_f16<<<gx, 256, 0, b->stream>>>(x, x16, n, cols, n_pad, nkt);
    LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg: x to f16)");
    if (!wg_buf(&b->wg_w16, &b->wg_w16_cap, WG_SCRATCH)) return false;
    /* pack pieces of the weights into the scratch, one GEMM per full scratch */
    int j = 0, a = 0;
    while (j < ms.n_w) {
        wg_set s = {};
        size_t used = 0;   /* scratch row tiles taken */
        while (j < ms.n_w && s.n_p < 4 && used < cap_tiles) {
            const int left = ms.rows[j] - a;
            const size_t room = (cap_tiles - used) * BN;
            const int take = (int)((size_t)left <= room ? (size_t)left : room);
            const int tiles = (int)lkv_cdiv(take, BN);
            uint8_t *dst = (uint8_t *)b->wg_w16 + used * panel;
            const unsigned gw = wg_grid((size_t)tiles * BN * nkt * 8, b->n_sm);
            if constexpr (KS > 0)
                wg_w_kcodes<T><<<gw, 256, 0, b->stream>>>(ms.w[j] + (size_t)a * ms.row_bytes[j], ms.row_bytes[j],
                                                          take, nsb, tiles * BN, BN, nkt, dst, wsc + used * BN, ldw);
            else
                wg_w_to_f16<T><<<gw, 256, 0, b->stream>>>(ms.w[j] + (size_t)a * ms.row_bytes[j], ms.row_bytes[j],
                                                          take, cols, tiles * BN, BN, nkt, dst);
            LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg: weights to f16)");
            s.out[s.n_p] = ms.out[j] + a;
            s.ld[s.n_p] = ms.rows[j];
            s.rows[s.n_p] = take;
            s.tile0[s.n_p] = (int)used;
            s.n_p++;
            used += tiles;
            a += take;
            if (a == ms.rows[j]) { j++; a = 0; }
        }
        s.tile0[s.n_p] = (int)used;
        s.w16 = (const uint8_t *)b->wg_w16;
        s.xsc = xsc;
        s.wsc = wsc;
        s.nsb = nsb_pad;
        s.ldx = n_pad;
        s.ldw = ldw;
        const dim3 grid(n_pad / WG_BM, (unsigned)used);
        const auto kernel = wg_kernel_of<T, BN>();
        kernel<<<grid, WG_THREADS, S::SMEM, b->stream>>>(s, (const uint8_t *)b->wg_x16, nkt, n);
        LKV_CUDA_LAUNCHED(b, "matmul (gemm_wg)");
    }
    return true;
}

bool lkv_cuda_gemm_wg(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n) {
    if (n <= 0 || !b->wg_ok || cols % 8) return false;
    switch (type) {
#define X(T) case T: return wg_run<T, WG_BN>(b, ms, x, cols, n);
        LKV_CUDA_WEIGHT_TYPES(X)
#undef X
    default: return false;
    }
}
