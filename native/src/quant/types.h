/*
 * quant/types.h: element types and their traits table.
 *
 * Type ids are ggml's numbers so that GGUF tensors need no translation. Each
 * block format is a struct written from the published layout and pinned by a
 * size assertion (quant/blocks.h). Every op finds a type's functions through
 * lkv_type_traits(); nothing else switches on the type id.
 *
 * Dot products follow ggml's scheme: a weight row of type T is multiplied with
 * an activation row already converted to T's vec_dot_type (q8_0, q8_1 or q8_K
 * for the quantized types; f32 / f16 / bf16 otherwise), so the inner loop is
 * an integer dot product.
 */
#ifndef LKV_QUANT_TYPES_H
#define LKV_QUANT_TYPES_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

enum {
    LKV_TYPE_F32 = 0,
    LKV_TYPE_F16 = 1,
    LKV_TYPE_Q4_0 = 2,
    LKV_TYPE_Q4_1 = 3,
    LKV_TYPE_Q5_0 = 6,
    LKV_TYPE_Q5_1 = 7,
    LKV_TYPE_Q8_0 = 8,
    LKV_TYPE_Q8_1 = 9,
    LKV_TYPE_Q2_K = 10,
    LKV_TYPE_Q3_K = 11,
    LKV_TYPE_Q4_K = 12,
    LKV_TYPE_Q5_K = 13,
    LKV_TYPE_Q6_K = 14,
    LKV_TYPE_Q8_K = 15,
    LKV_TYPE_IQ2_XXS = 16,
    LKV_TYPE_IQ2_XS = 17,
    LKV_TYPE_IQ3_XXS = 18,
    LKV_TYPE_IQ1_S = 19,
    LKV_TYPE_IQ4_NL = 20,
    LKV_TYPE_IQ3_S = 21,
    LKV_TYPE_IQ2_S = 22,
    LKV_TYPE_IQ4_XS = 23,
    LKV_TYPE_IQ1_M = 29,
    LKV_TYPE_BF16 = 30,
    LKV_TYPE_COUNT = 40
};

typedef void (*lkv_to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*lkv_from_float_fn)(const float *x, void *y, int64_t n);
/* *s = dot(x, y) over n elements; x of the weight type, y of its vec_dot_type */
typedef void (*lkv_vec_dot_fn)(int n, float *s, const void *x, const void *y);
/* s[j] = dot(x, y + j*y_stride) for j < ny (ny <= 4): one weight row against
 * several activation rows. Each s[j] is bit-identical to vec_dot's result. */
typedef void (*lkv_vec_dot_rows_fn)(int n, float *s, const void *x, const void *y,
                                    size_t y_stride, int ny);

/* out[j * out_stride + r] = dot(x + r*x_stride, y + j*y_stride) for r < nrows,
 * j < ny (ny <= 4): a tile of weight rows against several activation rows, the
 * activation's per-block values (scales, sums) read once for all the rows.
 * Each result is bit-identical to vec_dot's. */
typedef void (*lkv_vec_dot_tile_fn)(int n, float *out, size_t out_stride, const void *x,
                                    size_t x_stride, int nrows, const void *y,
                                    size_t y_stride, int ny);

/* The prefill's GEMM tile (optional): out[j * out_stride + r] = dot(x +
 * r*x_stride, y + j*y_stride) for r < nrows <= LKV_GEMM_ROWS and every j <
 * ny (any count). The weight rows are unpacked once into `scratch` (32-byte
 * aligned, lkv_gemm_scratch_bytes(n) bytes, the caller's) and then meet all
 * the activation rows, several rows and tokens per inner loop. Each result
 * is bit-identical to vec_dot's. */
typedef void (*lkv_gemm_fn)(int n, float *out, size_t out_stride, const void *x,
                            size_t x_stride, int nrows, const void *y, size_t y_stride,
                            int ny, void *scratch);

#define LKV_GEMM_ROWS 16
#define LKV_GEMM_BYTES_PER_BLOCK 800   /* the most an unpacked 256-element super-block takes */

/* scratch bytes of one gemm call on rows of n elements */
static inline size_t lkv_gemm_scratch_bytes(int64_t n) {
    return (size_t)LKV_GEMM_ROWS * (size_t)((n + 255) / 256) * LKV_GEMM_BYTES_PER_BLOCK;
}

typedef struct lkv_traits {
    const char *name;
    int32_t block_size;           /* elements per block */
    int32_t type_size;            /* bytes per block */
    bool is_weight;               /* accepted as a weight type */
    bool is_kv;                   /* accepted as a K/V cache type */
    int32_t vec_dot_type;         /* activation format for vec_dot */
    lkv_to_float_fn to_float;     /* dequantize n elements (n % block_size == 0) */
    lkv_from_float_fn from_float; /* quantize n elements; NULL if not quantizable */
    lkv_vec_dot_fn vec_dot;       /* NULL for pure activation formats */
    lkv_vec_dot_rows_fn vec_dot_rows; /* optional (NULL: call vec_dot per row) */
    /* the dot of a KV cache row (attention scores) where it differs from the
     * weights' vec_dot (q4_0: dot_blocks.c's block order is for weights, the
     * KV rows keep the 8-lane order the GPU attention kernels reproduce) */
    lkv_vec_dot_fn kv_dot;
    lkv_vec_dot_tile_fn vec_dot_tile; /* optional (NULL: vec_dot_rows per row) */
    lkv_gemm_fn gemm;             /* optional: the prefill's tile (NULL: vec_dot_tile) */
} lkv_traits;

static inline lkv_vec_dot_fn lkv_type_kv_dot(const lkv_traits *t) {
    return t->kv_dot ? t->kv_dot : t->vec_dot;
}

/* NULL for an unknown or unsupported id. */
const lkv_traits *lkv_type_traits(int32_t type);

static inline int64_t lkv_type_row_bytes(const lkv_traits *t, int64_t n) {
    return n / t->block_size * t->type_size;
}

/* dot_iquants.c: while `portable` is nonzero the i-quant dots take their
 * portable C path even where the CPU has AVX2 (for tests); returns the
 * previous setting. */
int lkv_iq_dot_force_portable(int portable);

/* fp16 / bf16 scalar conversions (exact, round-to-nearest-even). */
float lkv_fp16_to_fp32(uint16_t h);
uint16_t lkv_fp32_to_fp16(float f);
float lkv_bf16_to_fp32(uint16_t h);
uint16_t lkv_fp32_to_bf16(float f);

#endif
