/*
 * cuda/tune.h: the test-only overrides of the CUDA kernel choice (C and CUDA).
 *
 * The library chooses each op's kernel from its table (choose_matmul.cu,
 * choose_attn.cu) and the context's gpu_kernels; it reads no environment
 * beyond its one debug switch (LKV_CUDA_GRAPH=0: the decode step launched op
 * by op, read at context creation). What the kernel harnesses (tests/cuda)
 * and the benchmark (benchmarks/cuda_bench.c) must vary besides is written
 * into lkv_cuda_tuning, which those programs reach because they link the
 * library's objects; the installed library exports no way to it. All zero
 * (the start value): the library's own choices. A program that changes it
 * bumps `gen`, and a captured decode graph made under another generation is
 * dropped before its next replay (backend.cu), so no graph keeps a stale
 * choice. Read per call; not thread-safe (test programs only).
 */
#ifndef LKV_CUDA_TUNE_H
#define LKV_CUDA_TUNE_H

#ifdef __cplusplus
extern "C" {
#endif

/* matmul kernels (choose_matmul.cu) */
enum {
    LKV_MM_TABLE = 0,    /* the table's choice */
    LKV_MM_MATVEC_F32,   /* matvec_f32.cu: any weight type, f32 activations */
    LKV_MM_MATVEC_Q8,    /* matvec_q8.cu: int8 dots, any block type */
    LKV_MM_MVX,          /* mvx.cu: int8 dots, the CPU's float sums, q4_0 ... iq4_nl */
    LKV_MM_GEMM_F16,     /* gemm_f16.cu: WMMA f16 tensor cores, any weight type */
    LKV_MM_MMQ,          /* mmq.cu: int8 tensor cores, 32-block integer scales */
    LKV_MM_MMB,          /* mmb.cu: int8 tensor cores, the CPU's float sums, q4_0 */
    LKV_MM_MMX,          /* mmx.cu: int8 tensor cores, the CPU's float sums, q4_0 ... iq4_nl */
    LKV_MM_GEMM_WG,      /* gemm_wg.cu: wgmma f16 tensor cores (sm_90a), any weight type */
    LKV_MM_MVQ,          /* mvq.cu: int8 dots, 1..16 tokens, k-quants, iq4_xs, grid i-quants */
    LKV_MM_KERNELS
};

/* attention kernels (choose_attn.cu) */
enum {
    LKV_ATT_TABLE = 0,   /* the table's choice */
    LKV_ATT_EXACT,       /* attn.cu: every type and shape, the CPU's bits */
    LKV_ATT_RING,        /* attn_dec_ring.cu: decode, f16 / q8_0 / q4_0, q8_0 K + q4_0 V, the CPU's bits */
    LKV_ATT_RING2,       /* attn_dec_ring2.cu: decode, q8_0, the CPU's bits */
    LKV_ATT_MMA,         /* attn_mma.cu: prefill, tensor cores */
    LKV_ATT_KERNELS
};

/* the delta rule of the hybrids' Gated DeltaNet layers (deltanet.cu) */
enum {
    LKV_DELTA_AUTO = 0,        /* the recurrence for decode and short micro-batches, else chunked */
    LKV_DELTA_RECURRENCE,      /* deltanet.cu: token by token */
    LKV_DELTA_CHUNKED,         /* deltanet_chunk.cu: any n, 3xTF32 tensor cores */
    LKV_DELTA_CHUNKED_TF32,    /* the same, one TF32 mma a product (~1e-3 relative; timings) */
    LKV_DELTA_CHUNKED_W8,      /* the same, 3xTF32, blocks of 8 warps (timings) */
};

typedef struct lkv_cuda_tune {
    int gen;         /* bumped by whoever changes a field */
    int matmul;      /* LKV_MM_*: used wherever it takes the call, else the table's */
    int attn;        /* LKV_ATT_*: likewise */
    int mmq_bn;      /* mmq.cu token tile 64 | 128 (0: by grid size) */
    int mmb_bn;      /* mmb.cu token tile 32 | 64 (0: 64) */
    int mmb_st;      /* mmb.cu ring stages 2 | 3 (0: 3) */
    int mmb_xd4;     /* mmb.cu: the scales by 4-byte copies (0: 16-byte where aligned) */
    int mvx_st;      /* mvx.cu ring stages 3..8 (0: as many as fit) */
    int no_pdl;      /* programmatic dependent launch off (pdl.cuh) */
    int no_fuse;     /* the fused prefill ops off (matmul_swiglu, attn_whole) */
    int mvq_q8;      /* mvq.cu reads the q8_0-format codes a norm / swiglu left (no q8_K pass) */
    int delta;       /* LKV_DELTA_*: the delta rule's form (deltanet.cu) */
} lkv_cuda_tune;

extern lkv_cuda_tune lkv_cuda_tuning;

#ifdef __cplusplus
}
#endif

#endif
