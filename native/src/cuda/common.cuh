/*
 * cuda/common.cuh: what every CUDA op file shares: the backend context, the
 * error recording that replaces exit/print (the first CUDA error of a context
 * is kept and reported by sync), the launch check, and small device helpers.
 *
 * Each op file reads kernels first, then the launcher, then the entry point
 * the backend table (backend.cu) points at.
 */
#ifndef LKV_CUDA_COMMON_CUH
#define LKV_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* rope-table entries kept between wraps (rope_table.cu): one per sequence of a step */
#define LKV_ROPE_ENTRIES 64

extern "C" {
#include "llamakv.h"
#include "backend.h"
#include "model.h"
#include "error.h"
}

#include "quant.cuh"
#include "tune.h"

// ---------------------------------------------------------------- context

struct lkv_bctx {
    const lkv_model *m;
    int device;
    int n_sm;
    int max_tokens;              /* most tokens of one micro-batch */
    cudaStream_t stream;         /* compute stream: every op is enqueued here */

    cudaError_t err;             /* first CUDA error seen, cudaSuccess if none */
    const char *err_where;       /* op that saw it */

    int32_t *h_tokens;           /* (max_tokens,) pinned staging for get_rows */
    int32_t *d_tokens;           /* (max_tokens,) device copy */
    cudaEvent_t tokens_free;     /* staging may be rewritten after this */

    /* 8-bit activations of the integer mat-vec and GEMM (matvec_q8.cu), the
     * CPU's q8_0/q8_1 rounding: per 32-block xd = f16(amax / 127) and
     * xs = f16(sum(q) * amax / 127), both kept as floats */
    int8_t *xq;                  /* (xq_rows, xq_cols) quantized activations */
    float *xd;                   /* (xq_rows, xq_cols / 32) block scales */
    float *xs;                   /* (xq_rows, xq_cols / 32) block sums times scale */
    /* a second set of the same size: a matmul that quantizes its own output
     * (mmb.cu's gate/up with swiglu) writes it while reading xq, then the two
     * are swapped (lkv_cuda_act_swap) */
    int8_t *xq2;
    float *xd2, *xs2;
    int xq_cols;
    int xq_rows;                 /* max(MV_MAX_TOK, max_tokens) */
    /* xq holds the codes of this float array (act_quant.cuh), valid while
     * op_seq == xq_seq; op_seq counts every launch and call (lkv_cuda_note) */
    const float *xq_src;
    int64_t xq_src_total;
    uint64_t xq_seq, op_seq;

    /* gemm_wg.cu (sm_90a): whether the device runs its kernel; its f16 copies
     * of the activations and of the weights of one GEMM (grown on use) */
    int wg_ok;
    void *wg_x16, *wg_w16;
    size_t wg_x16_cap, wg_w16_cap;
    float *wg_sc;                /* the k-quants' super-block scales (gemm_wg_kcodes.cuh) */
    size_t wg_sc_cap;

    float *attn_ws;              /* per-chunk partials of split attention */
    size_t attn_ws_bytes;

    /* decode-step graph (step_begin / step_end). While a step is captured,
     * dyn_pos is the device copy of the step's first position: the kernels
     * whose arguments depend on the position (rope, the KV row writes,
     * attention) read it there, offset from the value they were given at
     * capture (cap_pos0), so the same graph replays at later positions.
     * NULL outside capture. */
    const int32_t *dyn_pos;
    int32_t cap_pos0;
    int32_t *h_pos, *d_pos;      /* the step's position: pinned, and its device copy */
    int graph_on;                /* LKV_CUDA_GRAPH != 0, and no capture has failed */
    int graph_gen;               /* lkv_cuda_tuning.gen when graph_exec was captured (tune.h) */
    int fast;                    /* the kernel kind: 1 fast (default), 0 exact (gpu_kernels) */
    int pdl;                     /* programmatic dependent launch (pdl.cuh): sm_90+ */
    int capturing;
    uint64_t cap_key, graph_key; /* key being captured; key of graph_exec */
    cudaGraphExec_t graph_exec;
    int64_t graph_replays, graph_builds;

    /* rope angles (rope_table.cu): cos/sin of a step's positions, computed on
     * the host by lkv_rope_angles and uploaded once per step and sequence */
    float *rope_h, *rope_d;      /* (2 * max_tokens, rope_cap) (cos, sin): pinned staging; device */
    int rope_cap;                /* pairs per position the buffers hold */
    cudaEvent_t rope_free;       /* the staging may be rewritten after this (the last upload) */
    /* entries uploaded since the buffers last wrapped: positions pos0 .. pos0 + n - 1
     * at float offset row of rope_d (or received there), each of its own
     * geometry (gemma3's local and global layers have two bases) and freq factors
     * in host memory (or NULL) */
    int32_t rope_pos0[LKV_ROPE_ENTRIES], rope_n[LKV_ROPE_ENTRIES], rope_row[LKV_ROPE_ENTRIES];
    lkv_rope_desc rope_desc[LKV_ROPE_ENTRIES];
    const float *rope_ff[LKV_ROPE_ENTRIES];
    int rope_entries, rope_cursor;   /* entries; first free float of the buffers */
    int rope_cap_entries;        /* the first this many entries are the captured step's
                                    uploads (rope_in_capture / rope_in_graph) */
    float *rope_ff_copy;         /* host copy of a device factor array that is not the model's */
    const float *rope_ff_src;    /* the device array rope_ff_copy mirrors */
    int rope_in_capture;         /* the step being captured records the upload */
    int rope_in_graph;           /* graph_exec uploads the angles (refilled before replays) */

    /* KV streaming (copier.cu): a copy stream and two rings of events; ticket
     * t of a queue lives in slot t % LKV_CUDA_EVENTS of its ring */
    struct lkv_cuda_copier *copier;

    /* sample.cu: the greedy pick's result (device, pinned host), made at first use */
    int32_t *pick_d, *pick_h;
};

lkv_status lkv_cuda_copier_init(lkv_bctx *b);
void lkv_cuda_copier_free(lkv_bctx *b);
void *lkv_cuda_host_alloc(lkv_bctx *b, size_t bytes);
void lkv_cuda_host_free(lkv_bctx *b, void *p);
uint64_t lkv_cuda_copy_async(lkv_bctx *b, void *dst, const void *src, size_t bytes, int h2d);
uint64_t lkv_cuda_copy_async_2d(lkv_bctx *b, void *dst, size_t dpitch, const void *src,
                                size_t spitch, size_t width, size_t height, int h2d);
int lkv_cuda_compute_wait_copy(lkv_bctx *b, uint64_t t);
uint64_t lkv_cuda_compute_mark(lkv_bctx *b);
void lkv_cuda_copy_wait_compute(lkv_bctx *b, uint64_t t);
lkv_status lkv_cuda_copy_sync(lkv_bctx *b);

/* rope angles (rope_table.cu). table: rows of (cos, sin) for tokens 0..n-1 at
 * pos0.., or NULL when the kernels must compute them. The capture / replay
 * hooks keep a decode graph's recorded upload fed with the step's positions. */
cudaError_t lkv_cuda_rope_alloc(lkv_bctx *b, int pairs);
void lkv_cuda_rope_release(lkv_bctx *b);
const float2 *lkv_cuda_rope_table(lkv_bctx *b, const lkv_rope_desc *r, int32_t pos0, int n);
void lkv_cuda_rope_capture_begin(lkv_bctx *b);
void lkv_cuda_rope_capture_end(lkv_bctx *b, bool kept);
void lkv_cuda_rope_replay(lkv_bctx *b, int32_t pos0, int n);
void lkv_cuda_rope_replayed(lkv_bctx *b);

/* Keeps the first error (later ones are usually its consequences); counts
 * every launch and call in op_seq. */
static inline void lkv_cuda_note(lkv_bctx *b, cudaError_t e, const char *where) {
    b->op_seq++;
    if (e != cudaSuccess && b->err == cudaSuccess) {
        b->err = e;
        b->err_where = where;
    }
}

/* After a launch: records a launch-configuration error (never aborts). */
#define LKV_CUDA_LAUNCHED(b, where) lkv_cuda_note((b), cudaGetLastError(), (where))
#define LKV_CUDA_CALL(b, expr, where) lkv_cuda_note((b), (expr), (where))

static inline unsigned lkv_cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

/* a kernel's dynamic shared-memory limit raised to bytes, once per device:
 * *done keeps one bit per device (devices >= 32 ask every time) */
template <class K>
static inline void lkv_cuda_smem_limit(lkv_bctx *b, unsigned *done, K kernel, int bytes, const char *where) {
    if (b->device < 32 && (*done >> b->device & 1u)) return;
    LKV_CUDA_CALL(b, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), where);
    if (b->device < 32) *done |= 1u << b->device;
}

/* the same for a kernel whose shared memory depends on the call (a head size,
 * a vocabulary): raised[device] keeps the largest limit set so far, and a call
 * that needs more raises it again (a bit set for the first call's size would
 * make a later, larger call's launch fail with "invalid argument") */
template <class K>
static inline void lkv_cuda_smem_raise(lkv_bctx *b, int (&raised)[32], K kernel, int bytes, const char *where) {
    if (b->device >= 0 && b->device < 32 && raised[b->device] >= bytes) return;
    LKV_CUDA_CALL(b, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), where);
    if (b->device >= 0 && b->device < 32 && b->err == cudaSuccess) raised[b->device] = bytes;
}

// ---------------------------------------------------------------- device helpers

static __device__ __forceinline__ float lkv_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float lkv_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}


/* Sum of doubles over the block in a fixed order (warp sums, then the warps'
 * in warp order): the same bits on every run; rmsnorm's sum of squares, in
 * f64 as the CPU's. red holds 32 doubles. */
static __device__ __forceinline__ double lkv_block_sum_d(double v, double *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0.0;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}

/* exp(x) as the CPU backend computes it (cpu/expf.h: ggml's AVX2 polynomial),
 * operation for operation, so softmax and swiglu round as the CPU does */
static __device__ __forceinline__ float lkv_expf_cpu(float x) {
    const float r = 0x1.8p23f;
    const float z = __fmaf_rn(x, 0x1.715476p+0f, r);
    const float n = __fsub_rn(z, r);
    const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float k = __uint_as_float(e + 0x3f800000u);
    const float u = __fmul_rn(b, b);
    const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                        __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                              u, __fmul_rn(0x1.ffffecp-1f, b));
    if (!(fabsf(n) > 126.0f)) return __fmaf_rn(j, k, k);
    /* large |n|: 2^n in two factors, or 0 / inf past 192 */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u), s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f) return __fmul_rn(s1, s1);
    return __fmul_rn(__fmaf_rn(s2, j, s2), s1);
}

/* silu(g) * u as the CPU's swiglu (cpu/ops.c): g / (1 + e^-g), times u */
static __device__ __forceinline__ float lkv_swiglu_cpu(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.f, lkv_expf_cpu(__fsub_rn(0.f, g)))), u);
}

static __device__ __forceinline__ float lkv_block_max(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nw = (blockDim.x + 31) >> 5;
    v = lkv_warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = -INFINITY;
    for (int i = 0; i < nw; i++) s = fmaxf(s, red[i]);
    return s;
}

// ---------------------------------------------------------------- launchers (one per op file)

void lkv_cuda_get_rows(lkv_bctx *b, float *out, const lkv_weight *w, const int32_t *tokens, int n);
void lkv_cuda_rmsnorm(lkv_bctx *b, float *out, const float *x, const lkv_weight *w, int n,
                      int dim, float eps);
void lkv_cuda_add_rmsnorm(lkv_bctx *b, float *x, const float *y, float *out, const lkv_weight *w,
                          int n, int dim, float eps);
void lkv_cuda_matmul(lkv_bctx *b, float *const *outs, const float *x,
                     const lkv_weight *const *ws, int n_w, int n);
void lkv_cuda_add_bias(lkv_bctx *b, float *x, const lkv_weight *bias, int n, int dim);
void lkv_cuda_rope(lkv_bctx *b, float *x, int n, int32_t pos0, const lkv_rope_desc *r);
int lkv_cuda_rope_store_rows(lkv_bctx *b, float *q, float *k, const float *v, int n_groups,
                             const int32_t *pos0, const int32_t *len, const lkv_rope_desc *rq,
                             const lkv_rope_desc *rk, void *const *kdst, void *const *vdst, int32_t type_k,
                             int32_t type_v);
int lkv_cuda_rope_store(lkv_bctx *b, float *q, float *k, const float *v, int n, int32_t pos0,
                        const lkv_rope_desc *rq, const lkv_rope_desc *rk, void *kdst,
                        int32_t type_k, void *vdst, int32_t type_v);
void lkv_cuda_swiglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n);
int lkv_cuda_matmul_swiglu(lkv_bctx *b, float *out, const float *x, const lkv_weight *wg,
                           const lkv_weight *wu, int n);
void lkv_cuda_add(lkv_bctx *b, float *x, const float *y, int64_t n);
/* gemma.cu: gemma3's elementwise ops */
void lkv_cuda_geglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n);
void lkv_cuda_scale(lkv_bctx *b, float *x, float s, int64_t n);
void lkv_cuda_softcap(lkv_bctx *b, float *x, float cap, int64_t n);
lkv_status lkv_cuda_pick_greedy(lkv_bctx *b, const float *logits, int32_t n, const int32_t *bias_ids,
                                const double *bias, int32_t n_bias, int32_t *out);
void lkv_cuda_to_type(lkv_bctx *b, void *dst, int32_t type, const float *src, int n_rows,
                      int n_elems);
size_t lkv_cuda_attn_state_bytes(int n_q, int n_head, int head_dim);
void lkv_cuda_attn_reset(lkv_bctx *b, void *st, int n_q, int n_head, int head_dim);
void lkv_cuda_attn_accum(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);
void lkv_cuda_attn_finish(lkv_bctx *b, float *out, const void *st, int n_q, int n_head,
                          int head_dim);
int lkv_cuda_attn_whole(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *d);
int lkv_cuda_attn_rows(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *geo, int n,
                       const int32_t *pos, const void *const *k, const void *const *v);
/* hybrid layers (gating.cu, conv1d.cu, deltanet.cu) */
void lkv_cuda_split_rows(lkv_bctx *b, float *q, float *gate, const float *x, int n_rows, int dim);
void lkv_cuda_sigmoid_mul(lkv_bctx *b, float *x, const float *gate, int64_t n);
void lkv_cuda_rmsnorm_gated(lkv_bctx *b, float *out, const float *x, const lkv_weight *w,
                            const float *z, int n, int dim, float eps);
void lkv_cuda_ssm_conv(lkv_bctx *b, float *out, const float *x, float *state, const lkv_weight *w,
                       int n, int ch);
void lkv_cuda_delta_rule(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                         const float *alpha, const lkv_weight *a, const lkv_weight *dt,
                         float *state, const lkv_delta_desc *d, int n);
int lkv_cuda_delta_chunk(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                         const float *alpha, const float *a, const float *dt, float *state,
                         const lkv_delta_desc *d, int n, int kind);
void lkv_cuda_attn_setup(void);   /* raises kernels' shared-memory limits once */
/* mixture of experts (moe.cu) */
void lkv_cuda_moe_topk(lkv_bctx *b, int32_t *ids, float *wts, const float *logits, int n,
                       int n_expert, int k, int norm, float scale);
void lkv_cuda_gather_rows(lkv_bctx *b, float *out, const float *x, const int32_t *rows, int n,
                          int dim);
void lkv_cuda_scatter_add_rows(lkv_bctx *b, float *out, const float *y, const int32_t *rows,
                               const float *w, int n, int dim);
void lkv_cuda_zero(lkv_bctx *b, float *x, int64_t n);
/* attn.cu's exact kernels, which take every supported shape and type
 * (choose_attn.cu hands them what no faster kernel takes): accum and the
 * fused reset + accum + finish (0 where attn_seq would not run); check: the
 * geometry is supported (else the error is noted) */
void lkv_cuda_attn_exact(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);
int lkv_cuda_attn_exact_whole(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *d);
bool lkv_cuda_attn_check(lkv_bctx *b, const lkv_attn_desc *d);

#endif
