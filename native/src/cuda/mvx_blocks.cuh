/*
 * cuda/mvx_blocks.cuh: mvx.cu's stage computation for q4_0 weights, whose CPU
 * dot is in block order (quant/dot_blocks.c): per 32-block b the whole
 * integer dot p_b, chain b % 8 takes c = fmaf(dx * dy, (float)p_b, c), and
 * the 8 chains end in the same tree as the 8-lane order. So thread l of a
 * row (mvx's lane) owns chain l and computes whole blocks l, l + 8, ... of
 * each stage; the ring, the copies and the final shuffles are mvx's.
 *
 * Per block a thread loads the 5 aligned words around it from the staged row
 * (a q4_0 block is 18 bytes: it starts 0 or 2 bytes past a word, the same for
 * all of a thread's blocks) and takes the scale and the 4 code words out by
 * funnel shifts; the nibbles go to the top of their bytes with bit 7 flipped
 * (16 * (code - 8) as a signed byte) so that 8 dp4a from EX_MAGIC give
 * 12582912 + 16 p_b, made (float)p_b exactly by one fma. The activation word
 * j of block b sits at [token][lane j][block b] in the stage (mvx's layout).
 * __host__ __device__ for the host emulation (tests/cuda/emu_mvx.cu).
 */
#ifndef LKV_CUDA_MVX_BLOCKS_CUH
#define LKV_CUDA_MVX_BLOCKS_CUH

#include "exact.cuh"
#include "twins.cuh"

/* block b (byte o of the staged row wr, wr 4-aligned): its scale and its
 * 8 code words as 16 * (code - 8), word j = elements 4j..4j+3 (j < 4: low
 * nibbles of qs[4j..], j >= 4: high nibbles of qs[4(j-4)..]) */
static __host__ __device__ __forceinline__ void mb_block_q4_0(const uint8_t *wr, int o, uint32_t (&x)[8], float &dw) {
    const uint8_t *wb = wr + (o & ~3);
    const int sh = 8 * (o & 3);   /* 0 or 16 */
    uint32_t w[5];
TW_UNROLL
    for (int j = 0; j < 5; j++) w[j] = tw_ld32(wb + 4 * j);
    dw = tw_hlo(w[0] >> sh);
TW_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t q = tw_fsrc(w[j], w[j + 1], sh + 16);
        x[j] = tw_andxor(q << 4, 0xF0F0F0F0u, 0x80808080u);
        x[j + 4] = tw_andxor(q, 0xF0F0F0F0u, 0x80808080u);
    }
}

/* the nb blocks of a stage slot, thread (row k, lane l) of mvx's block */
template <int NT, int KC, int RS, int YOFF, int YS, int DOFF>
static __host__ __device__ __forceinline__ void mb_stage_q4_0(const uint8_t *slot, int nb, int k, int l, int mis,
                                                             float *acc) {
    const uint8_t *wr = slot + k * RS;
TW_UNROLL
    for (int i = 0; i < KC / 8; i++) {
        const int b = l + 8 * i;
        if (b >= nb) break;
        uint32_t x[8];
        float dw;
        mb_block_q4_0(wr, mis + 18 * b, x, dw);
TW_UNROLL
        for (int t = 0; t < NT; t++) {
            const uint8_t *y = slot + YOFF + t * 8 * YS + 4 * b;
            int p = EX_MAGIC;
TW_UNROLL
            for (int j = 0; j < 8; j++) p = tw_dp4a_ss(x[j], tw_ld32(y + j * YS), p);
            const float dy = *(const float *)(slot + DOFF + t * KC * 4 + 4 * b);
            /* (12582912 + 16 p) / 16 - 786432 = p, exact */
            const float pf = tw_fma(tw_i2f_bits(p), 1.f / 16, -12582912.f / 16);
            acc[t] = tw_fma(tw_mul(dw, dy), pf, acc[t]);
#if defined(MVX_EMU_TRACE_BLOCK) && !defined(__CUDA_ARCH__)
            MVX_EMU_TRACE_BLOCK(t, b, dw, dy, p);
#endif
        }
    }
}

#endif
