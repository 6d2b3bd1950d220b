/*
 * cuda/gemm_ptx.cuh: the PTX the tiled GEMMs (mmq.cu, mmx.cu, mmb.cu) share:
 * cp.async of 16 / 4 bytes with a source size (the rest zero-filled),
 * ldmatrix.x4, the int8 mma.m16n8k32 and m16n8k16 with one value in all of
 * C, and a prefetch into L2 (gemm_f16.cu too).
 */
#ifndef LKV_CUDA_GEMM_PTX_CUH
#define LKV_CUDA_GEMM_PTX_CUH

#include <stdint.h>

/* bytes (0..16) of src to shared dst, the rest of the 16 zero-filled */
static __device__ __forceinline__ void gm_cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void gm_cp4(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void gm_ldsm4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
/* d = a * b + (c, c, c, c), int32 */
static __device__ __forceinline__ void gm_mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                                 int c) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
}

/* d = a * b + (c, c, c, c), int32, K = 16: A (16 x 16) is (a0, a1) of the
 * k32 fragment above for k 0..15, (a2, a3) for k 16..31; B (16 x 8) is b0, or b1 */
static __device__ __forceinline__ void gm_mma_s8_k16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, int c) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b), "r"(c));
}

static __device__ __forceinline__ void gm_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

#endif
