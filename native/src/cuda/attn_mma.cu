/*
 * cuda/attn_mma.cu: prefill attention on tensor cores (flash attention over
 * the chunk grid, f32 accumulation), folded into attn.cu's state: the checks
 * of a call, the launch, and the choice between the kernels (the
 * warp-specialized one on sm_90a: attn_fa_ws.cuh; the 8-warp one with its
 * wgmma and mma.sync paths: attn_fa_kernel.cuh). Their tiles:
 * attn_fa_tile.cuh; their PTX: attn_fa_ptx.cuh, async_ptx.cuh.
 */
#include "attn_fa_kernel.cuh"
#include "attn_fa_ws.cuh"
#include "attn_mma.cuh"

#include <string.h>

/* test-only: 0 auto (the warp-specialized kernel where compiled for sm_90a for
 * head_dim 128 with 16-bit K and V, q8_0 / q4_0 ones and a bf16 V decoded to
 * f16 first by attn_stage.cu, else pipelined wgmma where compiled for sm_90a, else
 * mma.sync); the 8-warp kernel (one block of 8 warps that copy and compute):
 * 1 mma.sync, 2 wgmma not pipelined, 3 wgmma pipelined */
static int fa_path_sel = 0;
extern "C" void lkv_cuda_attn_mma_path(int sel) { fa_path_sel = sel; }

// ---------------------------------------------------------------- launcher

/* the device's shared memory per block (opt-in); 0 if unknown */
static int fa_smem_max(const lkv_bctx *b) {
    static int cache[32];
    if (b->device >= 0 && b->device < 32 && cache[b->device]) return cache[b->device];
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, b->device) != cudaSuccess) {
        cudaGetLastError();
        v = 0;
    }
    if (b->device >= 0 && b->device < 32) cache[b->device] = v;
    return v;
}

/* the driver's tensor-map encoder (found once; null where the driver has none) */
typedef CUresult (*fa_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static fa_encode_fn fa_encoder() {
    static const fa_encode_fn fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult qr;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &qr);
#else
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &qr);
#endif
        if (e != cudaSuccess || qr != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            p = nullptr;
        }
        return (fa_encode_fn)p;
    }();
    return fn;
}

/* one plane's map: rows of n_head_kv * 128 16-bit elements, rb bytes apart, n rows;
 * boxes of 64 elements x 128 rows (the kernel's half tiles), 128-byte swizzle, rows
 * past n read as zeros */
static bool fa_ws_map(CUtensorMap *m, const void *base, int n_head_kv, size_t rb, int n) {
    const fa_encode_fn enc = fa_encoder();
    if (!enc || n <= 0) return false;
    const cuuint64_t dim[2] = {(cuuint64_t)n_head_kv * 128, (cuuint64_t)n}, stride[1] = {(cuuint64_t)rb};
    const cuuint32_t box[2] = {64, FA_WS_BN}, es[2] = {1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)base, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* the maps of the segment holding the call's first position (fa_find, as the kernel
 * finds it); ok = 0 without one (the kernel then copies by cp.async: the same tiles,
 * the same bits) */
static fa_ws_maps fa_ws_maps_for(const lkv_attn_desc *d, const fa_geom &ge) {
    fa_ws_maps mp;
    memset(&mp, 0, sizeof mp);
    const int i = fa_find(*d, ge.P0);
    if (i >= 0) {
        const lkv_kv_seg &g = d->segs[i];
        mp.ok = fa_ws_map(&mp.k, g.k, d->n_head_kv, ge.rbk, g.n) && fa_ws_map(&mp.v, g.v, d->n_head_kv, ge.rbv, g.n);
    }
    return mp;
}

/* false (nothing enqueued) where the instance's shared memory exceeds the device's
 * (the pipeline is sized for Hopper's 227 KiB; sm_86 / sm_89 give 99 KiB) */
template <int TK, int TV, int D>
static bool fa_launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const fa_geom &ge) {
    using L = fa_smem<TK, TV, D>;
    const int n_mt = (int)lkv_cdiv((int64_t)d->n_q * ge.G, FA_BM);
    const dim3 grid(n_mt, d->n_head_kv);
    /* the warp-specialized kernel for 16-bit K and V at head_dim 128 where the
     * device runs sm_90a code (gemm_wg.cu's probe); docs/performance.md has the
     * figures against the 8-warp kernel */
    if constexpr (D == 128 && !fa_quant<TK>() && !fa_quant<TV>()) {
        using W = fa_ws_smem<D>;
        if (fa_path_sel == 0 && b->wg_ok && W::bytes <= fa_smem_max(b)) {
            static unsigned ws_done = 0;
            lkv_cuda_smem_limit(b, &ws_done, attn_fa_ws_kernel<TK, TV>, W::bytes, "attn_mma smem");
            const fa_ws_maps mp = fa_ws_maps_for(d, ge);
            attn_fa_ws_kernel<TK, TV><<<grid, FA_THREADS + FA_WS_PROD, W::bytes, b->stream>>>(st, q, *d, ge, mp);
            LKV_CUDA_LAUNCHED(b, "attn_mma (warp-specialized)");
            return true;
        }
    }
    if (L::bytes > fa_smem_max(b)) return false;
    static unsigned smem_done = 0;
    lkv_cuda_smem_limit(b, &smem_done, attn_fa_kernel<TK, TV, D>, L::bytes, "attn_mma smem");
    attn_fa_kernel<TK, TV, D><<<grid, FA_THREADS, L::bytes, b->stream>>>(st, q, *d, ge);
    LKV_CUDA_LAUNCHED(b, "attn_mma");
    return true;
}

/* the (K, V) type pairs instantiated: each type with itself, and the mixed
 * pairs in use (q8_0 K with q4_0 or f16 V, f16 K with a quantized V, bf16 K
 * with f16 V: attn_stage.cu's call for bf16 K and V) */
#define FA_PAIRS(X)                                                                                        \
    X(LKV_TYPE_F16, LKV_TYPE_F16) X(LKV_TYPE_BF16, LKV_TYPE_BF16) X(LKV_TYPE_Q8_0, LKV_TYPE_Q8_0)          \
    X(LKV_TYPE_Q4_0, LKV_TYPE_Q4_0) X(LKV_TYPE_Q8_0, LKV_TYPE_Q4_0) X(LKV_TYPE_Q8_0, LKV_TYPE_F16)        \
    X(LKV_TYPE_F16, LKV_TYPE_Q8_0) X(LKV_TYPE_F16, LKV_TYPE_Q4_0) X(LKV_TYPE_BF16, LKV_TYPE_F16)

template <int D>
static int fa_pick(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const fa_geom *ge) {
#define X(A, B) if (d->type_k == A && d->type_v == B) return b ? (int)fa_launch<A, B, D>(b, st, q, d, *ge) : 1;
    FA_PAIRS(X)
#undef X
    return 0;
}

/* bytes of 32 elements of a type this file reads; 0 for the others */
static int fa_group_bytes(int type) {
    switch (type) {
    case LKV_TYPE_F16: return group_bytes<LKV_TYPE_F16>();
    case LKV_TYPE_BF16: return group_bytes<LKV_TYPE_BF16>();
    case LKV_TYPE_Q8_0: return group_bytes<LKV_TYPE_Q8_0>();
    case LKV_TYPE_Q4_0: return group_bytes<LKV_TYPE_Q4_0>();
    default: return 0;
    }
}

/* the largest cp.async piece (16, 8, 4) that divides the head slice, the row
 * and every segment's base address; 0 if not even 4 does */
static int fa_piece(int head_bytes, size_t row_bytes, const lkv_attn_desc *d, bool is_k) {
    for (int g = 16; g >= 4; g >>= 1) {
        bool ok = head_bytes % g == 0 && row_bytes % g == 0;
        for (int i = 0; i < d->n_segs && ok; i++)
            ok = (uintptr_t)(is_k ? d->segs[i].k : d->segs[i].v) % g == 0;
        if (ok) return g;
    }
    return 0;
}

// ---------------------------------------------------------------- entry point

extern "C" bool lkv_cuda_attn_mma(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d) {
    const int hd = d->head_dim;
    if (b->dyn_pos) return false;   /* captured steps are decode-sized: not this kernel's */
    if (d->n_q < 16 || (hd != 64 && hd != 128 && hd != 256)) return false;
    if (d->n_head_kv <= 0 || d->n_head <= 0 || d->n_head % d->n_head_kv) return false;
    if (d->chunk <= 0 || d->n_segs < 0 || d->n_segs > LKV_MAX_SEGS) return false;
    if (!(d->scale > 0.f)) return false;   /* the running max of q.k is the max score only for scale > 0 */
    const int gbk = fa_group_bytes(d->type_k), gbv = fa_group_bytes(d->type_v);
    if (!gbk || !gbv) return false;
    const int64_t P1 = (int64_t)d->chunk_hi * d->chunk;
    if (P1 > INT32_MAX - FA_WS_BN || (int64_t)d->q_pos0 + d->n_q > INT32_MAX || d->chunk_lo < 0) return false;
    if ((int64_t)d->n_q * d->n_head > INT32_MAX / 2) return false;
    /* the 8-warp kernel's 64-row tiles within 32-bit offsets of their first row (the
     * warp-specialized kernel's copies use 64-bit offsets) */
    if ((int64_t)d->n_head_kv * (hd / 32) * (gbk > gbv ? gbk : gbv) * FA_BN > INT32_MAX) return false;
    const bool pair = hd == 64 ? fa_pick<64>(NULL, NULL, NULL, d, NULL)
                      : hd == 128 ? fa_pick<128>(NULL, NULL, NULL, d, NULL) : fa_pick<256>(NULL, NULL, NULL, d, NULL);
    if (!pair) return false;
    if (d->chunk_hi <= d->chunk_lo) return true;   /* nothing to fold: the state is unchanged */

    fa_geom ge;
    ge.G = d->n_head / d->n_head_kv;
    ge.P0 = d->chunk_lo * d->chunk;
    ge.P1 = (int)P1;
    ge.tpc = (d->chunk + FA_BN - 1) / FA_BN;
    ge.scale = d->scale;
    ge.c2 = d->scale * 1.4426950408889634f;
    ge.rbk = (size_t)d->n_head_kv * (hd / 32) * gbk;
    ge.rbv = (size_t)d->n_head_kv * (hd / 32) * gbv;
    ge.gk = fa_piece(hd / 32 * gbk, ge.rbk, d, true);
    ge.gv = fa_piece(hd / 32 * gbv, ge.rbv, d, false);
    ge.wg = fa_path_sel == 1 ? 0 : fa_path_sel == 2 ? 1 : 2;
    /* 16-bit rows go in 16-byte pieces straight into the tile; the others need 4 */
    const bool f16k = d->type_k == LKV_TYPE_F16 || d->type_k == LKV_TYPE_BF16;
    const bool f16v = d->type_v == LKV_TYPE_F16 || d->type_v == LKV_TYPE_BF16;
    if (ge.gk < (f16k ? 16 : 4) || ge.gv < (f16v ? 16 : 4)) return false;
    /* quantized K / V, a bf16 V, on sm_90a: decoded once per pass, then the 16-bit kernel */
    if (fa_path_sel == 0 && lkv_cuda_attn_stage_takes(b, d)) {
        const int r = lkv_cuda_attn_stage(b, st, q, d, ge.rbk, ge.rbv);
        if (r < 0) lkv_cuda_note(b, cudaErrorInvalidValue, "attn_mma: a staged pass was refused");
        if (r != 0) return true;
    }
    return hd == 64 ? fa_pick<64>(b, (float *)st, q, d, &ge)
           : hd == 128 ? fa_pick<128>(b, (float *)st, q, d, &ge) : fa_pick<256>(b, (float *)st, q, d, &ge);
}
