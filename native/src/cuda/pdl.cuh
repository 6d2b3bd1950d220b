/*
 * cuda/pdl.cuh: programmatic dependent launch (sm_90+). A kernel enqueued by
 * lkv_launch may be scheduled while the kernel before it in the stream is
 * still running, so that its launch and its first loads of data no earlier
 * kernel writes (weights) overlap that kernel's tail. Such a kernel must call
 * pdl_wait() on every path before it reads anything an earlier kernel wrote
 * or writes anything an earlier kernel reads; pdl_wait returns once the
 * previous kernel has completed and its writes are visible, and since that
 * kernel waited in turn, all earlier work is done too. pdl_trigger lets the
 * next kernel be scheduled once every block of this one has called it (or
 * exited); pdl_enter is both, for kernels with nothing to do before the wait.
 * All are no-ops in a kernel launched plainly, and below sm_90.
 *
 * lkv_launch uses the attribute when b->pdl (compute capability 9.0 or more;
 * tune.h's no_pdl turns it off for measurements) and the context streams no KV (a copier's cross-stream
 * event waits stay plain launches); otherwise it is <<<>>>.
 */
#ifndef LKV_CUDA_PDL_CUH
#define LKV_CUDA_PDL_CUH

#include <utility>

#include "common.cuh"

static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* both, first thing in a kernel that has nothing to do before it waits */
static __device__ __forceinline__ void pdl_enter() {
    pdl_trigger();
    pdl_wait();
}

template <typename... P, typename... A>
static inline void lkv_launch(lkv_bctx *b, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                              A &&...args) {
    if (b->pdl && !b->copier && !lkv_cuda_tuning.no_pdl) {
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = b->stream;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
    } else {
        kernel<<<grid, block, smem, b->stream>>>(std::forward<A>(args)...);
    }
}

#endif
