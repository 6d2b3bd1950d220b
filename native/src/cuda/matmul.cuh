/*
 * cuda/matmul.cuh: what the f32 mat-vec / GEMM (matmul.cu) and the integer
 * mat-vec (matvec_q8.cu) share: the set of weights of one launch and the
 * mat-vec geometry.
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

enum { MV_MAX_TOK = 8, MV_ROWS = 2, MV_WARPS = 4 };

/* integer mat-vec (matvec_q8.cu): x (n <= MV_MAX_TOK, cols) quantized to 8 bits
 * in b->xq / b->xd, then every weight of the set; false when it does not apply
 * (float weight types, disabled, cols beyond the workspace) */
bool lkv_cuda_matvec_q8(lkv_bctx *b, int type, mm_set &ms, const float *x, int cols, int n,
                        bool quantize);

/* q4_0 mat-vec with rows staged by 16-byte copies (mv_stage.cu), on the
 * activations lkv_cuda_matvec_q8 quantized; false when it does not apply */
bool lkv_cuda_mv_staged(lkv_bctx *b, int type, mm_set &ms, int cols, int n);

#endif
