/*
 * cuda/async_ptx.cuh: Hopper's asynchronous copies and their barriers, as
 * the warp-specialized kernels (gemm_wg.cu) use them: shared-memory mbarriers
 * (init, arrive, arrive with an expected transaction count, parity wait) and
 * the bulk copy global -> shared that completes its bytes on an mbarrier
 * (cp.async.bulk, one contiguous run of a multiple of 16 bytes, both ends 16-
 * byte aligned), and the tensor copy of a 2-D box (tma_load_2d: a tensor map
 * made on the host, attn_mma.cu).
 *
 * The protocol (PTX ISA, "mbarrier"): a barrier's phase completes when its
 * pending arrivals reach zero and its expected transaction bytes have all
 * landed; a waiter names the phase by its parity (0 for the first phase, 1
 * for the second, ...). Memory the async proxy wrote (bulk copies) is
 * visible to the threads and to wgmma once they observed the phase complete.
 *
 * Everything here exists where the compiler targets sm_90a (FA_HAVE_WGMMA,
 * attn_fa_ptx.cuh); the callers are compiled only there.
 */
#ifndef LKV_CUDA_ASYNC_PTX_CUH
#define LKV_CUDA_ASYNC_PTX_CUH

#include "attn_fa_ptx.cuh"

#if FA_HAVE_WGMMA
static __device__ __forceinline__ void mb_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* the inits made visible to the other threads and to the async proxy (before a __syncthreads) */
static __device__ __forceinline__ void mb_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
static __device__ __forceinline__ void mb_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* one arrival that also expects `bytes` more bytes of transactions this phase */
static __device__ __forceinline__ void mb_arrive_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* until the phase of the given parity has completed */
static __device__ __forceinline__ void mb_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
/* bytes (multiple of 16) from global src to shared dst, completed on bar */
static __device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
/* a 2-D box of a tensor map (a CUtensorMap in param, const or global memory) at element
 * coordinates (x, y) to shared dst (as the map's swizzle lays it out), completed on bar;
 * rows past the tensor's extent arrive as zeros */
static __device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *map, int x, int y, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}
#endif

#endif
