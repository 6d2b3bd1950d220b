/*
 * cuda/attn_mma.cuh: tensor-core prefill attention (attn_mma.cu).
 *
 * lkv_cuda_attn_mma does what lkv_cuda_attn_accum does (backend.h: fold the
 * chunks [chunk_lo, chunk_hi) into the running state st, causal per query),
 * for the shapes it covers, as a flash attention on tensor cores (wgmma on
 * sm_90a, mma.sync elsewhere) over tiles of 128 (query, head) rows of one KV
 * head and 64 positions of one chunk (128 in the warp-specialized kernel on
 * sm_90a), the running softmax brought to the
 * state's form at the end of every chunk. The state's layout and meaning are
 * attn.cu's ((m, l, o) per (query, head), o normalised), so calls mix freely
 * with attn.cu's kernels and attn_finish. Not bit-identical with the CPU: the
 * query, K, V and the probabilities are rounded to f16 (bf16 for bf16 K / V;
 * relative error ~1e-3, test_attn_mma's tolerance 2e-3, 4e-3 with a bf16 V).
 * Bit-identical with itself however the range is split into calls: chunks
 * [a, c) in one call give the state that [a, b) then [b, c) give (same
 * inputs, same segments' contents), which is what keeps a streaming KV
 * pool's logits equal to the all-resident run's.
 *
 * Returns true when the work was enqueued on b->stream (a launch error is
 * recorded in b as for every op, and sync reports it), or when there was
 * nothing to do (an empty chunk range: the state is unchanged). Returns false,
 * having enqueued nothing, for what it does not cover, so that the caller
 * runs the exact kernels instead: n_q < 16, head_dim other than 64 / 128 /
 * 256, a (K, V) type pair other than f16 / bf16 / q8_0 / q4_0 with itself,
 * q8_0 with q4_0 or f16, f16 with q8_0 or q4_0 (attn_mma.cu FA_PAIRS),
 * n_head not a multiple of n_head_kv, a captured step (b->dyn_pos set;
 * graphs are for n <= 8 tokens), KV rows not aligned for the copies (f16 /
 * bf16: 16 bytes, others: 4), 64 KV rows past 2^31 bytes, positions
 * past 2^31, and an instance whose shared memory (sized for Hopper's 227
 * KiB) exceeds the device's: on sm_80 the quantized head_dim 128 ones and
 * up, on sm_86 / 89 / 120 (99 KiB) all but head_dim 64 with 16-bit K/V. Host-side only; same threading rules as the other ops.
 * extern "C" so that the C test (tests/cuda/test_attn_mma.c) can call it;
 * the test also calls lkv_cuda_attn_mma_path (attn_mma.cu, test-only) to run
 * each of the kernel's paths.
 */
#ifndef LKV_CUDA_ATTN_MMA_CUH
#define LKV_CUDA_ATTN_MMA_CUH

#include "common.cuh"

extern "C" bool lkv_cuda_attn_mma(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);

/* attn_stage.cu: the same for quantized K or V (q8_0, q4_0, with each other or
 * f16) on sm_90a, decoded to f16 a pass of chunks at a time and folded by the
 * f16 kernel. _takes: whether it applies (the device's code has wgmma, the
 * types; any number of queries attn_mma takes: decoding the range once costs
 * less than the in-kernel decoding even for one query tile per KV head, 1.29
 * against 2.00 ms at 16 queries, q8_0 at 32K). lkv_cuda_attn_stage (rbk / rbv:
 * the K / V row strides): 1 done, 0
 * refused with nothing folded (no scratch, a chunk larger than it, the f16
 * call refused), -1 refused after a first pass was folded (an error). */
bool lkv_cuda_attn_stage_takes(const lkv_bctx *b, const lkv_attn_desc *d);
int lkv_cuda_attn_stage(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d, size_t rbk, size_t rbv);

#endif
