/*
 * cuda/attn_mma.cuh: tensor-core prefill attention (attn_mma.cu).
 *
 * lkv_cuda_attn_mma does what lkv_cuda_attn_accum does (backend.h: fold the
 * chunks [chunk_lo, chunk_hi) into the running state st, causal per query),
 * for the shapes it covers, with f16 tensor-core products: one flash-attention
 * pass per chunk and tile of 64 (query, head) rows, each chunk's partial
 * folded into the state with the CPU's fold, chunk after chunk. The state's
 * layout and meaning are attn.cu's ((m, l, o) per (query, head), o
 * normalised), so calls mix freely with attn.cu's kernels and attn_finish.
 * Not bit-identical with the CPU: the query, K, V and the probabilities are
 * rounded to f16 (relative error ~1e-3). Bit-identical with itself however
 * the range is split into calls: chunks [a, c) in one call give the state
 * that [a, b) then [b, c) give (same inputs, same segments' contents), which
 * is what keeps a streaming KV pool's logits equal to the all-resident run's.
 *
 * Returns true when the work was enqueued on b->stream (a launch error is
 * recorded in b as for every op, and sync reports it), or when there was
 * nothing to do (an empty chunk range: the state is unchanged). Returns false,
 * having enqueued nothing, for what it does not cover, so that the caller
 * runs the exact kernels instead: n_q < 16, head_dim other than 64 / 128, K
 * or V of a type other than f16 / q8_0 / q4_0, n_head not a multiple of
 * n_head_kv, a captured step (b->dyn_pos set; graphs are for n <= 8 tokens),
 * KV rows not aligned for the copies (f16: 16 bytes, others: 4), positions
 * past 2^31. Host-side only; same threading rules as the other ops.
 * extern "C" so that the C test (tests/cuda/test_attn_mma.c) can call it.
 */
#ifndef LKV_CUDA_ATTN_MMA_CUH
#define LKV_CUDA_ATTN_MMA_CUH

#include "common.cuh"

extern "C" bool lkv_cuda_attn_mma(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);

#endif
