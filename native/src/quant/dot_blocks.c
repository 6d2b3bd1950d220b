/*
 * quant/dot_blocks.c: the q4_0 weight dot in block order.
 *
 * Per 32-block b the integer dot p_b = sum(qx * qy) over all 32 elements
 * (exact), then 8 float chains interleaved over the blocks,
 *     c[b % 8] = fmaf(dx_b * dy_b, (float)p_b, c[b % 8])   (b ascending),
 * and the result ((c0 + c4) + (c2 + c6)) + ((c1 + c5) + (c3 + c7)).
 *
 * Why not dot_legacy.c's 8-lane order (lane l = elements 4l..4l+3 of every
 * block): that order costs 8 fused multiply-adds per (row, token, block),
 * which caps an exact GPU prefill GEMM at ~0.4x llama.cpp on an H200
 * (docs/performance.md); here a block is one tensor-core integer dot and one
 * multiply-add, and a decode mat-vec keeps 8 threads per row (one chain
 * each). The types that llama.cpp's golden data pins (the test model's q4_1
 * and q8_0) keep its AVX2 order; q4_0 weights are not pinned by it. KV cache
 * rows of q4_0 keep the 8-lane order (lkv_q4_0_kv_dot): the GPU attention
 * kernels reproduce that one.
 *
 * The AVX2 path and the portable path give the same bits: both do exactly
 * these float operations (the portable one with fmaf). The AVX2 path also
 * has the prefill's GEMM tile (q4_0_gemm: the rows unpacked once per call).
 */
#include <math.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/isa.h"
#include "quant/simd.h"

#define YROW(vy, stride, r) ((const block_q8_0 *)((const char *)(vy) + (size_t)(r) * (stride)))

/* the tree that both paths and the GPU end with */
LKV_INLINE float fold8(const float c[8]) {
    return ((c[0] + c[4]) + (c[2] + c[6])) + ((c[1] + c[5]) + (c[3] + c[7]));
}

#ifdef __AVX2__
/* 8 vectors of 8 int32 -> their 8 sums, vector k's in lane k (exact) */
LKV_INLINE __m256i hsum8_epi32(const __m256i v[8]) {
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    /* lanes 0..3: vectors 0..3 (4..7 in the high half), each a half's sum */
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* the f16 scale (each block's first field) of block i of an array of
 * `size`-byte blocks */
LKV_INLINE int scale_bits(const void *blocks, size_t size, int i) {
    uint16_t h;
    memcpy(&h, (const char *)blocks + (size_t)i * size, 2);
    return h;
}

/* the scales of blocks i0 .. i0 + 7, those < nb (0 past it), as floats; built
 * in a register (eight small stores read back as one vector stall the store
 * forwarding: a third of the kernel's time on Zen 3) */
LKV_INLINE __m256 scales8(const void *blocks, size_t size, int i0, int nb) {
    __m128i h = _mm_setzero_si128();
#define SCALE_LANE(k) \
    if (i0 + (k) < nb) h = _mm_insert_epi16(h, scale_bits(blocks, size, i0 + (k)), k)
    if (i0 + 8 <= nb) {
        h = _mm_cvtsi32_si128(scale_bits(blocks, size, i0));
        for (int k = 1; k < 8; k++) h = _mm_insert_epi16(h, scale_bits(blocks, size, i0 + k), k);
    } else {
        SCALE_LANE(0); SCALE_LANE(1); SCALE_LANE(2); SCALE_LANE(3);
        SCALE_LANE(4); SCALE_LANE(5); SCALE_LANE(6);
    }
#undef SCALE_LANE
    return _mm256_cvtph_ps(h);
}

/* the exact integer dots of weight blocks qx[0..m) with y's blocks i0 .. i0 + m - 1,
 * block k's in lane k (0 where k >= m) */
LKV_INLINE __m256i block_dots(const __m256i *qx, const block_q8_0 *y, int i0, int m) {
#define DOT(k) (k < m ? dot_s8s8(qx[k], _mm256_loadu_si256((const __m256i *)y[i0 + k].qs)) \
                      : _mm256_setzero_si256())
    __m256i v[8];
    for (int k = 0; k < 8; k++) v[k] = DOT(k);
#undef DOT
    return hsum8_epi32(v);
}

LKV_INLINE void k_q4_0_blocks(int n, float *s, const void *vx, const void *vy, size_t stride, int ny) {
    const block_q4_0 *x = vx;
    const int nb = n / 32;
    __m256 acc[4];
    for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();
    int i0 = 0;
    for (; i0 + 8 <= nb; i0 += 8) {       /* whole groups: every chain takes a block */
        __m256i qx[8];
        for (int k = 0; k < 8; k++) qx[k] = _mm256_sub_epi8(unpack_nibbles16(x[i0 + k].qs), _mm256_set1_epi8(8));
        const __m256 dx = scales8(x, sizeof(block_q4_0), i0, nb);
        for (int r = 0; r < ny; r++) {
            const block_q8_0 *y = YROW(vy, stride, r);
            const __m256 p = _mm256_cvtepi32_ps(block_dots(qx, y, i0, 8));
            const __m256 d = _mm256_mul_ps(dx, scales8(y, sizeof(block_q8_0), i0, nb));
            acc[r] = _mm256_fmadd_ps(d, p, acc[r]);
        }
    }
    if (i0 < nb) {                        /* the tail group: the chains past it keep their value */
        const int m = nb - i0;
        __m256i qx[8];
        for (int k = 0; k < m; k++) qx[k] = _mm256_sub_epi8(unpack_nibbles16(x[i0 + k].qs), _mm256_set1_epi8(8));
        const __m256 dx = scales8(x, sizeof(block_q4_0), i0, nb);
        const __m256 on = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        for (int r = 0; r < ny; r++) {
            const block_q8_0 *y = YROW(vy, stride, r);
            const __m256 p = _mm256_cvtepi32_ps(block_dots(qx, y, i0, m));
            const __m256 d = _mm256_mul_ps(dx, scales8(y, sizeof(block_q8_0), i0, nb));
            acc[r] = _mm256_blendv_ps(acc[r], _mm256_fmadd_ps(d, p, acc[r]), on);
        }
    }
    for (int r = 0; r < ny; r++) {
        float c[8];
        _mm256_storeu_ps(c, acc[r]);
        s[r] = fold8(c);
    }
}

/* The tile: per activation row and 8-block group, the scales as floats and
 * -8 * each block's code sum, once for all the weight rows; a weight block's
 * codes then stay unsigned (0..15) and p_b = sum(u * qy) - 8 * sum(qy), the
 * same exact integer as with the sign trick. */
#define TILE_MAX_GROUPS 128   /* cols <= 32768; wider rows take the row kernel */

LKV_INLINE void prep_q8_0(const block_q8_0 *y, int nb, __m256 *dy, __m256i *sy) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int g = 0; g * 8 < nb; g++) {
        const int i0 = 8 * g, m = nb - i0 < 8 ? nb - i0 : 8;
        __m256i v[8];
        for (int k = 0; k < 8; k++)
            v[k] = k < m ? dot_u8s8(ones, _mm256_loadu_si256((const __m256i *)y[i0 + k].qs))
                         : _mm256_setzero_si256();
        sy[g] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(hsum8_epi32(v), 3));
        dy[g] = scales8(y, sizeof(block_q8_0), i0, nb);
    }
}

LKV_INLINE void tile_q4_0(int n, float *out, size_t out_stride, const void *vx, size_t x_stride,
                          int nrows, const void *vy, size_t stride, int ny) {
    const int nb = n / 32, ng = (nb + 7) / 8;
    __m256 dy[4][TILE_MAX_GROUPS];
    __m256i sy[4][TILE_MAX_GROUPS];
    const block_q8_0 *y[4];
    for (int r = 0; r < ny; r++) {
        y[r] = YROW(vy, stride, r);
        prep_q8_0(y[r], nb, dy[r], sy[r]);
    }
    const int m = nb - 8 * (ng - 1);   /* blocks in the last group */
    const __m256 on = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    for (int row = 0; row < nrows; row++) {
        const block_q4_0 *x = (const block_q4_0 *)((const char *)vx + (size_t)row * x_stride);
        __m256 acc[4];
        for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();
        for (int g = 0; g < ng; g++) {
            const int i0 = 8 * g, mg = g < ng - 1 ? 8 : m;
            __m256i qx[8];
            for (int k = 0; k < mg; k++) qx[k] = unpack_nibbles16(x[i0 + k].qs);
            const __m256 dx = scales8(x, sizeof(block_q4_0), i0, nb);
            for (int r = 0; r < ny; r++) {
                __m256i v[8];
                for (int k = 0; k < 8; k++)
                    v[k] = k < mg ? dot_u8s8(qx[k], _mm256_loadu_si256((const __m256i *)y[r][i0 + k].qs))
                                  : _mm256_setzero_si256();
                const __m256 p = _mm256_cvtepi32_ps(_mm256_add_epi32(hsum8_epi32(v), sy[r][g]));
                const __m256 f = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy[r][g]), p, acc[r]);
                acc[r] = mg == 8 ? f : _mm256_blendv_ps(acc[r], f, on);
            }
        }
        for (int r = 0; r < ny; r++) {
            float c[8];
            _mm256_storeu_ps(c, acc[r]);
            out[(size_t)r * out_stride + row] = fold8(c);
        }
    }
}

/* The GEMM tile (lkv_gemm_fn): the rows' unsigned codes and their scales
 * (8 per group, as floats) unpacked once into scratch (qdec), then per
 * token group of 4 the activation's prep (prep_q8_0) once for all the rows
 * and per row tile_q4_0's steps with the codes read back instead of
 * unpacked: the same integers and float operations, so the same bits. */
typedef struct {
    __m256i u[8];   /* codes of the group's 8 blocks (0 past the row's end) */
    __m256 dx;      /* their scales */
} qdec;
_Static_assert(sizeof(qdec) <= LKV_GEMM_BYTES_PER_BLOCK, "qdec size");

LKV_INLINE void gemm_rows_q4_0(const qdec *a, int nrows, int nb, const block_q8_0 *const *y,
                               const __m256 (*dy)[TILE_MAX_GROUPS],
                               const __m256i (*sy)[TILE_MAX_GROUPS], float *out,
                               size_t out_stride, const int ny) {
    const int ng = (nb + 7) / 8, m = nb - 8 * (ng - 1);
    const __m256 on = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    for (int row = 0; row < nrows; row++) {
        const qdec *k = a + (size_t)row * ng;
        __m256 acc[4];
        for (int r = 0; r < ny; r++) acc[r] = _mm256_setzero_ps();
        for (int g = 0; g < ng; g++) {
            const int i0 = 8 * g, mg = g < ng - 1 ? 8 : m;
            __m256i qx[8];
            for (int b = 0; b < 8; b++) qx[b] = _mm256_load_si256(&k[g].u[b]);
            for (int r = 0; r < ny; r++) {
                __m256i v[8];
                for (int b = 0; b < 8; b++)
                    v[b] = b < mg ? dot_u8s8(qx[b], _mm256_loadu_si256((const __m256i *)y[r][i0 + b].qs))
                                  : _mm256_setzero_si256();
                const __m256 p = _mm256_cvtepi32_ps(_mm256_add_epi32(hsum8_epi32(v), sy[r][g]));
                const __m256 f = _mm256_fmadd_ps(_mm256_mul_ps(k[g].dx, dy[r][g]), p, acc[r]);
                acc[r] = mg == 8 ? f : _mm256_blendv_ps(acc[r], f, on);
            }
        }
        for (int r = 0; r < ny; r++) {
            float c[8];
            _mm256_storeu_ps(c, acc[r]);
            out[(size_t)r * out_stride + row] = fold8(c);
        }
    }
}

static void q4_0_gemm(int n, float *out, size_t out_stride, const void *vx, size_t x_stride,
                      int nrows, const void *vy, size_t stride, int ny, void *scratch) {
    const int nb = n / 32, ng = (nb + 7) / 8;
    if (ng > TILE_MAX_GROUPS) {
        for (int t0 = 0; t0 < ny; t0 += 4)
            LKV_TILE_BY_ROWS(k_q4_0_blocks, n, out + (size_t)t0 * out_stride, out_stride, vx, x_stride,
                             nrows, (const char *)vy + (size_t)t0 * stride, stride,
                             ny - t0 < 4 ? ny - t0 : 4);
        return;
    }
    qdec *a = scratch;
    for (int row = 0; row < nrows; row++) {
        const block_q4_0 *x = (const block_q4_0 *)((const char *)vx + (size_t)row * x_stride);
        for (int g = 0; g < ng; g++) {
            qdec *k = a + (size_t)row * ng + g;
            for (int b = 0; b < 8; b++)
                k->u[b] = 8 * g + b < nb ? unpack_nibbles16(x[8 * g + b].qs) : _mm256_setzero_si256();
            k->dx = scales8(x, sizeof(block_q4_0), 8 * g, nb);
        }
    }
    __m256 dy[4][TILE_MAX_GROUPS];
    __m256i sy[4][TILE_MAX_GROUPS];
    for (int t0 = 0; t0 < ny; t0 += 4) {
        const int nt = ny - t0 < 4 ? ny - t0 : 4;
        const block_q8_0 *y[4];
        for (int r = 0; r < nt; r++) {
            y[r] = YROW(vy, stride, t0 + r);
            prep_q8_0(y[r], nb, dy[r], sy[r]);
        }
        float *ot = out + (size_t)t0 * out_stride;
        switch (nt) {
        case 1: gemm_rows_q4_0(a, nrows, nb, y, dy, sy, ot, out_stride, 1); break;
        case 2: gemm_rows_q4_0(a, nrows, nb, y, dy, sy, ot, out_stride, 2); break;
        case 3: gemm_rows_q4_0(a, nrows, nb, y, dy, sy, ot, out_stride, 3); break;
        default: gemm_rows_q4_0(a, nrows, nb, y, dy, sy, ot, out_stride, 4); break;
        }
    }
}

static void q4_0_vec_dot_tile(int n, float *out, size_t out_stride, const void *x, size_t x_stride,
                              int nrows, const void *y, size_t stride, int ny) {
    if ((n / 32 + 7) / 8 > TILE_MAX_GROUPS) {
        LKV_TILE_BY_ROWS(k_q4_0_blocks, n, out, out_stride, x, x_stride, nrows, y, stride, ny);
        return;
    }
    switch (ny) {
    case 1: tile_q4_0(n, out, out_stride, x, x_stride, nrows, y, stride, 1); break;
    case 2: tile_q4_0(n, out, out_stride, x, x_stride, nrows, y, stride, 2); break;
    case 3: tile_q4_0(n, out, out_stride, x, x_stride, nrows, y, stride, 3); break;
    default: tile_q4_0(n, out, out_stride, x, x_stride, nrows, y, stride, 4); break;
    }
}

#else
static void k_q4_0_blocks(int n, float *s, const void *vx, const void *vy, size_t stride, int ny) {
    const block_q4_0 *x = vx;
    for (int r = 0; r < ny; r++) {
        const block_q8_0 *y = YROW(vy, stride, r);
        float c[8] = {0};
        for (int i = 0; i < n / 32; i++) {
            int sumi = 0;
            for (int j = 0; j < 16; j++)
                sumi += ((x[i].qs[j] & 15) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
            c[i & 7] = fmaf(h2f(x[i].d) * h2f(y[i].d), (float)sumi, c[i & 7]);
        }
        s[r] = fold8(c);
    }
}

static void q4_0_vec_dot_tile(int n, float *out, size_t out_stride, const void *x, size_t x_stride,
                              int nrows, const void *y, size_t stride, int ny) {
    LKV_TILE_BY_ROWS(k_q4_0_blocks, n, out, out_stride, x, x_stride, nrows, y, stride, ny);
}
#endif

static void q4_0_vec_dot(int n, float *s, const void *x, const void *y) { k_q4_0_blocks(n, s, x, y, 0, 1); }

static void q4_0_vec_dot_rows(int n, float *s, const void *x, const void *y, size_t stride, int ny) {
    LKV_ROWS_DISPATCH(k_q4_0_blocks, n, s, x, y, stride, ny);
}

void LKV_ISA_FN(lkv_install_dot_blocks)(lkv_traits *t) {
    t[LKV_TYPE_Q4_0].vec_dot = q4_0_vec_dot;
    t[LKV_TYPE_Q4_0].vec_dot_rows = q4_0_vec_dot_rows;
    t[LKV_TYPE_Q4_0].vec_dot_tile = q4_0_vec_dot_tile;
#ifdef __AVX2__
    t[LKV_TYPE_Q4_0].gemm = q4_0_gemm;
#else
    t[LKV_TYPE_Q4_0].gemm = NULL;   /* portable: the row dots */
#endif
}
