/*
 * cuda/matmul.cuh: what the matmul kernels and their chooser
 * (choose_matmul.cu) share: the set of weights of one launch, the mat-vec
 * geometry, the activation formats and the kernels' entry points.
 */
#ifndef LKV_CUDA_MATMUL_CUH
#define LKV_CUDA_MATMUL_CUH

#include "common.cuh"

/* up to 3 weights of one type that share the input, one launch */
struct mm_set {
    const uint8_t *w[3];
    float *out[3];
    size_t row_bytes[3];
    int rows[3];
    int tile0[4];     /* first grid tile of weight j; tile0[n_w] = total */
    int n_w;
};

static __device__ __forceinline__ int mm_pick(const mm_set &ms, int tile) {
    int j = 0;
    while (j + 1 < ms.n_w && tile >= ms.tile0[j + 1]) j++;
    return j;
}

/* a GEMM tile's weight rows r0 .. r0 + bm - 1 of weight j: their addresses into
 * s_rowp (rows past the end read the last one); returns the weight's end */
static __device__ __forceinline__ const uint8_t *mm_tile_rows(const mm_set &ms, int j, int r0, int rows, int bm,
                                                              int tid, const uint8_t **s_rowp) {
    if (tid < bm) s_rowp[tid] = ms.w[j] + (size_t)min(r0 + tid, rows - 1) * ms.row_bytes[j];
    return ms.w[j] + (size_t)rows * ms.row_bytes[j];
}

/* MV_SLICE_MAX: the most tokens mvx.cu takes, in slices of MV_MAX_TOK (a
 * few sequences' decode step, a draft's verification), where its passes over
 * the weights cost less than a GEMM's fixed cost (choose_matmul.cu's
 * mm_slice_max, per type) */
enum { MV_MAX_TOK = 8, MV_SLICE_MAX = 32, MV_ROWS = 2, MV_WARPS = 4 };
/* MQ_MAX_TOK: the most tokens mvq.cu takes in one pass over the weights */
enum { MQ_MAX_TOK = 16 };

/* The activation format the integer paths use for weight type T: the CPU's
 * vec_dot_type: q8_K (256-blocks, f32 scale; quantize_k.cu) for the k-quants
 * and the i-quants when cols allows, else q8_0/q8_1 (32-blocks, f16 scale) */
enum { ACT_NONE = 0, ACT_Q8 = 1, ACT_Q8K = 2 };
static inline int lkv_act_format(int type, int cols) {
    const bool k = type == LKV_TYPE_Q2_K || type == LKV_TYPE_Q3_K || type == LKV_TYPE_Q4_K ||
                   type == LKV_TYPE_Q5_K || type == LKV_TYPE_Q6_K || lkv_is_iquant(type);
    return k && cols % 256 == 0 ? ACT_Q8K : ACT_Q8;
}

/* x (n, cols) quantized to 8 bits in the format of `type` into b->xq / b->xd /
 * b->xs (matvec_q8.cu): the input of the integer mat-vec and of the int8 GEMM */
void lkv_cuda_quantize_act(lkv_bctx *b, const float *x, int n, int cols, int type);
/* the q8_K kernel (quantize_k.cu); false when cols is not a multiple of 256 */
bool lkv_cuda_quantize_q8k(lkv_bctx *b, const float *x, int n, int cols);

/* The kernels choose_matmul.cu picks from (one file each). The integer ones
 * read the codes of x already in b->xq / xd / xs and return false, having
 * enqueued nothing, for what they do not take; *_takes answers that before
 * the codes are made. The float ones read x and take every weight type. */
bool lkv_cuda_matvec_f32(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n);
bool lkv_cuda_gemm_f16(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n);
/* gemm_wg.cu: wgmma f16 GEMM (sm_90a), every weight type; false when the
 * device's code lacks it (b->wg_ok, from the probe at context creation) */
bool lkv_cuda_gemm_wg(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n);
bool lkv_cuda_gemm_wg_probe(lkv_bctx *b);
/* gemm_wg's f16 scratch (WG_SCRATCH bytes, made on first use; NULL if it
 * cannot be): attn_stage.cu decodes K / V into it between GEMMs (one stream) */
void *lkv_cuda_wg_scratch(lkv_bctx *b, size_t *bytes);
void lkv_cuda_gemm_wg_free(lkv_bctx *b);
bool lkv_cuda_matvec_q8_takes(int type);
bool lkv_cuda_matvec_q8(lkv_bctx *b, int type, mm_set &ms, int cols, int n);
bool lkv_cuda_mmq_takes(int type, const mm_set &ms);
bool lkv_cuda_mmq(lkv_bctx *b, int type, mm_set &ms, int cols, int n);
bool lkv_cuda_mvx_takes(int type, const mm_set &ms);
/* mvq.cu: 1 .. MQ_MAX_TOK tokens, the k-quants, iq4_xs, the grid i-quants */
bool lkv_cuda_mvq_takes(int type, const mm_set &ms);
bool lkv_cuda_mvq(lkv_bctx *b, int type, mm_set &ms, int cols, int n);
bool lkv_cuda_mmx_takes(int type);

/* mmb.cu's gate/up GEMM with the swiglu and its codes in the epilogue: ms has
 * gate (w[0]) and up (w[1]) of equal shape, rows % 32 == 0, x quantized in
 * b->xq; writes out = ms.out[0] and its codes into b->xq2 / xd2 / xs2; false
 * when it does not apply */
bool lkv_cuda_mmb_swiglu(lkv_bctx *b, mm_set &ms, int cols, int n);

#endif
