/*
 * cuda/attn_fa_ptx.cuh: the PTX that attn_mma.cu's flash attention issues:
 * cp.async copies, ldmatrix, mma.sync m16n8k16 (f16 / bf16, f32 accumulate),
 * ex2.approx, and on sm_90a the warpgroup products (wgmma m64nNk16 with A
 * from registers and B from a shared-memory descriptor) with their fences.
 *
 * The wgmma wrappers exist only where the compiler targets sm_90a
 * (__CUDA_ARCH_FEAT_SM90_ALL): FA_HAVE_WGMMA says so, and the kernel takes
 * the mma.sync path everywhere else. Shared-memory descriptors (PTX ISA,
 * "matrix descriptor"): start address >> 4 in bits 0-13, the leading-
 * dimension byte offset >> 4 in 16-29 (between core matrices adjacent in K),
 * the stride-dimension byte offset >> 4 in 32-45 (adjacent in M / N), no
 * swizzle (bits 62-63 zero). A core matrix is 8 rows of 16 contiguous bytes.
 * The accumulator d[i][0..3] of a thread is the mma.sync C fragment of the
 * 16 x 8 block i of its warp's 16 rows, which is what lets both paths share
 * the softmax code.
 */
#ifndef LKV_CUDA_ATTN_FA_PTX_CUH
#define LKV_CUDA_ATTN_FA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_HAVE_WGMMA 1
#else
#define FA_HAVE_WGMMA 0
#endif

static __device__ __forceinline__ void fa_cp16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
/* 16 bytes, or 16 zeros when !full (src is not read then, but must be a valid address) */
static __device__ __forceinline__ void fa_cp16z(uint32_t dst, const void *src, bool full) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(full ? 16 : 0) : "memory");
}
/* n = 4 or 8 (uniform per call site) */
static __device__ __forceinline__ void fa_cp_small(uint32_t dst, const void *src, int n) {
    if (n == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
static __device__ __forceinline__ void fa_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void fa_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* generic-proxy writes of shared memory (cp.async, st.shared) made visible to
 * the async proxy (wgmma operands); before the barrier that orders them */
static __device__ __forceinline__ void fa_fence_async() {
#if FA_HAVE_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void fa_ldsm4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
static __device__ __forceinline__ void fa_ldsm4t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                 uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
/* c (16x8 f32) += a (16x16) * b (16x8), BF: bf16 operands, else f16 */
template <bool BF>
static __device__ __forceinline__ void fa_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (BF)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* 2^x, ~2 ulp; 2^-inf = 0 */
static __device__ __forceinline__ float fa_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* two floats rounded to the operand type (low half: a) */
template <bool BF> static __device__ __forceinline__ uint32_t fa_pack(float a, float b) {
    if constexpr (BF) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *(const uint32_t *)&h;
    } else {
        const __half2 h = __floats2half2_rn(a, b);
        return *(const uint32_t *)&h;
    }
}
/* the two values of a packed pair, as floats */
template <bool BF> static __device__ __forceinline__ float2 fa_unpack(uint32_t u) {
    if constexpr (BF) return __bfloat1622float2(*(const __nv_bfloat162 *)&u);
    else return __half22float2(*(const __half2 *)&u);
}

/* shared-memory matrix descriptor, no swizzle */
static __device__ __forceinline__ uint64_t fa_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

/* the same for a 128-byte-swizzled layout (rows of 128 bytes, the 16-byte chunk c of
 * row r at c ^ (r % 8), 8-row atoms of 1024 bytes on 1024-byte boundaries) */
static __device__ __forceinline__ uint64_t fa_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return fa_desc(addr, lbo, sbo) | (1ull << 62);
}

#if FA_HAVE_WGMMA
static __device__ __forceinline__ void fa_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void fa_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void fa_wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
static __device__ __forceinline__ void fa_wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

/* pins the registers of an accumulator after a wait: later reads are not moved above it */
template <int N> static __device__ __forceinline__ void fa_reg_fence(float (&x)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) asm volatile("" : "+f"(x[i][k])::"memory");
}

template <int N> static __device__ __forceinline__ void fa_reg_fence(int (&x)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int k = 0; k < 4; k++) asm volatile("" : "+r"(x[i][k])::"memory");
}

/* the accumulator operands of a 64 x 64 / 64 x 128 wgmma, d[N / 8][4] in
 * fragment order (FA_ACC64C: with constraint C, "+f" for f32 and "+r" for
 * s32 accumulators), and their places in the instruction (%0 ..) */
#define FA_ACC32(d) \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
    "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
    "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
    "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define FA_ACC64C(C, d) \
    C(d[0][0]), C(d[0][1]), C(d[0][2]), C(d[0][3]), C(d[1][0]), C(d[1][1]), C(d[1][2]), C(d[1][3]), \
    C(d[2][0]), C(d[2][1]), C(d[2][2]), C(d[2][3]), C(d[3][0]), C(d[3][1]), C(d[3][2]), C(d[3][3]), \
    C(d[4][0]), C(d[4][1]), C(d[4][2]), C(d[4][3]), C(d[5][0]), C(d[5][1]), C(d[5][2]), C(d[5][3]), \
    C(d[6][0]), C(d[6][1]), C(d[6][2]), C(d[6][3]), C(d[7][0]), C(d[7][1]), C(d[7][2]), C(d[7][3]), \
    C(d[8][0]), C(d[8][1]), C(d[8][2]), C(d[8][3]), C(d[9][0]), C(d[9][1]), C(d[9][2]), C(d[9][3]), \
    C(d[10][0]), C(d[10][1]), C(d[10][2]), C(d[10][3]), C(d[11][0]), C(d[11][1]), C(d[11][2]), C(d[11][3]), \
    C(d[12][0]), C(d[12][1]), C(d[12][2]), C(d[12][3]), C(d[13][0]), C(d[13][1]), C(d[13][2]), C(d[13][3]), \
    C(d[14][0]), C(d[14][1]), C(d[14][2]), C(d[14][3]), C(d[15][0]), C(d[15][1]), C(d[15][2]), C(d[15][3])
#define FA_ACC64(d) FA_ACC64C("+f", d)
#define FA_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define FA_ACC128(d) FA_ACC64(d), FA_ACC64((d + 16))
#define FA_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

/* d (64 x N f32, per warp its 16 rows) = (sd ? d : 0) + a (64 x 16, registers) * B (16 x N, descriptor);
 * TB: B is N-major (transposed). INSTR: the shape and operand types; AB, P, T: the
 * places of a and bdesc, of sd and of TB after the NB * 4 accumulators */
#define FA_WGMMA_RS(NAME, INSTR, NB, ACC, REGS, AB, P, T)                                           \
    template <int TB>                                                                            \
    static __device__ __forceinline__ void NAME(float (&d)[NB][4], const uint32_t (&a)[4], uint64_t bdesc, \
                                                int sd) {                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                              \
                     "wgmma.mma_async.sync.aligned." INSTR " " REGS ", " AB ", p, 1, 1, " T ";\n}\n" \
                     : ACC(d)                                                                    \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "r"(sd), "n"(TB));\
    }
FA_WGMMA_RS(fa_wgmma_n64_f16, "m64n64k16.f32.f16.f16", 8, FA_ACC32, FA_REGS32, "{%32, %33, %34, %35}, %36", "%37", "%38")
FA_WGMMA_RS(fa_wgmma_n64_bf16, "m64n64k16.f32.bf16.bf16", 8, FA_ACC32, FA_REGS32, "{%32, %33, %34, %35}, %36", "%37", "%38")
FA_WGMMA_RS(fa_wgmma_n128_f16, "m64n128k16.f32.f16.f16", 16, FA_ACC64, FA_REGS64, "{%64, %65, %66, %67}, %68", "%69", "%70")
FA_WGMMA_RS(fa_wgmma_n128_bf16, "m64n128k16.f32.bf16.bf16", 16, FA_ACC64, FA_REGS64, "{%64, %65, %66, %67}, %68", "%69", "%70")
#undef FA_WGMMA_RS

/* d (64 x 128 f32) = (sd ? d : 0) + A (64 x 16, descriptor) * B (16 x 128, descriptor), both
 * K-major, f16 or bf16 (BF) (attn_fa_ws.cuh: Q from shared memory) */
template <bool BF>
static __device__ __forceinline__ void fa_wgmma_ss_n128(float (&d)[16][4], uint64_t adesc, uint64_t bdesc, int sd) {
    if constexpr (BF)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " FA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : FA_ACC64(d)
                     : "l"(adesc), "l"(bdesc), "r"(sd));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : FA_ACC64(d)
                     : "l"(adesc), "l"(bdesc), "r"(sd));
}

/* d (64 x 128 s32) = (sd ? d : 0) + A (64 x 32, descriptor) * B (32 x 128, descriptor), s8,
 * both K-major (gemm_wg_kcodes.cuh: the k-quants' 8-bit codes) */
#define FA_ACC64I(d) FA_ACC64C("+r", d)
static __device__ __forceinline__ void fa_wgmma_ss_n128_s8(int (&d)[16][4], uint64_t adesc, uint64_t bdesc, int sd) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " FA_REGS64 ", %64, %65, p;\n}\n"
                 : FA_ACC64I(d)
                 : "l"(adesc), "l"(bdesc), "r"(sd));
}
/* the same with B unsigned (u8) */
static __device__ __forceinline__ void fa_wgmma_ss_n128_s8u8(int (&d)[16][4], uint64_t adesc, uint64_t bdesc, int sd) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.u8 " FA_REGS64 ", %64, %65, p;\n}\n"
                 : FA_ACC64I(d)
                 : "l"(adesc), "l"(bdesc), "r"(sd));
}

/* d (64 x 128 f32) += A (64 x 16, descriptor) * B (16 x 128, descriptor), f16, both K-major
 * (gemm_wg.cu) */
static __device__ __forceinline__ void fa_wgmma_ss_n128_f16(float (&d)[16][4], uint64_t adesc, uint64_t bdesc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " FA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : FA_ACC64(d)
                 : "l"(adesc), "l"(bdesc), "r"(1));
}

/* d (64 x 256 f32) += A (64 x 16, descriptor) * B (16 x 256, descriptor), f16, both K-major
 * (gemm_wg.cu) */
static __device__ __forceinline__ void fa_wgmma_ss_n256_f16(float (&d)[32][4], uint64_t adesc, uint64_t bdesc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " FA_REGS128 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : FA_ACC128(d)
                 : "l"(adesc), "l"(bdesc), "r"(1));
}
/* the shape's variant (N = 8 NB) */
static __device__ __forceinline__ void fa_wgmma_ss_f16(float (&d)[16][4], uint64_t a, uint64_t b) { fa_wgmma_ss_n128_f16(d, a, b); }
static __device__ __forceinline__ void fa_wgmma_ss_f16(float (&d)[32][4], uint64_t a, uint64_t b) { fa_wgmma_ss_n256_f16(d, a, b); }

/* the variant for the operand type */
template <bool BF, int TB>
static __device__ __forceinline__ void fa_wgmma(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int sd) {
    if constexpr (BF) fa_wgmma_n64_bf16<TB>(d, a, b, sd);
    else fa_wgmma_n64_f16<TB>(d, a, b, sd);
}
template <bool BF, int TB>
static __device__ __forceinline__ void fa_wgmma(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, int sd) {
    if constexpr (BF) fa_wgmma_n128_bf16<TB>(d, a, b, sd);
    else fa_wgmma_n128_f16<TB>(d, a, b, sd);
}
#endif

#endif
