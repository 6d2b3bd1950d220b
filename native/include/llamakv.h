/*
 * llamakv.h: the C ABI of the pyllamakv core.
 *
 * This header is the single source of the ABI: pyllamakv/core/ffi.py reads the
 * declarations between the two LKV_CDEF marker lines below and hands them to
 * cffi (ABI mode). Keep that region plain C that cffi's parser accepts: no
 * preprocessor directives, no function-like macros, no inline functions.
 *
 * Conventions
 * - Every fallible call returns an lkv_status; LKV_OK is 0. On failure a
 *   message naming the problem is kept per thread: lkv_last_error().
 * - Created objects come back through out-parameters; the caller frees them
 *   with the matching *_free (which accepts NULL).
 * - Parameter structs are passed by pointer; *_params_init fills defaults.
 * - Enums are append-only; sized integers throughout.
 * - Nothing in the library exits, aborts or prints.
 * - Sequences: a context holds n_seq_max sequences (ids 0 .. n_seq_max - 1).
 *   The calls without a sequence id (lkv_decode, lkv_context_truncate,
 *   lkv_context_n_tokens, the state and stats calls) mean sequence 0.
 * - Threading: a context is used by one thread at a time (except
 *   lkv_context_set_abort, which any thread may call at any time). Distinct
 *   contexts (also of one model) may be used from distinct threads.
 */
#ifndef LLAMAKV_H
#define LLAMAKV_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define LKV_API __declspec(dllexport)
#else
#define LKV_API __attribute__((visibility("default")))
#endif

/* LKV_CDEF_BEGIN */

/* ---- status, errors, version ------------------------------------------ */

typedef enum lkv_status {
    LKV_OK = 0,
    LKV_ERR_INVALID_ARG = 1,    /* a parameter is out of range or inconsistent */
    LKV_ERR_OUT_OF_MEMORY = 2,  /* host allocation failed */
    LKV_ERR_UNSUPPORTED = 3,    /* type, architecture or device not supported */
    LKV_ERR_SHAPE = 4,          /* a tensor is missing or has the wrong shape */
    LKV_ERR_CONTEXT_FULL = 5,   /* more tokens than n_ctx */
    LKV_ERR_DEVICE = 6,         /* a device call failed; the context is now dead */
    LKV_ERR_DEAD = 7,           /* the context failed earlier and must be freed */
    LKV_ERR_POOL_TOO_SMALL = 8, /* kv_pool_bytes below the plan's minimum */
    LKV_ERR_DEVICE_MEMORY = 9,  /* device or pinned allocation failed */
    LKV_ERR_INTERNAL = 10,
    LKV_ERR_ABORTED = 11        /* lkv_context_set_abort stopped the call; nothing changed */
} lkv_status;

/* Bumped on every incompatible change of this header. */
int32_t lkv_abi_version(void);
/* Message of the last failed call on this thread ("" if none). Valid until
 * the next failing call on the same thread. */
const char *lkv_last_error(void);
/* Library version string, and a space separated list of features: the CPU
 * kernels' ISA level chosen at load ("isa:portable", "isa:avx2" (with FMA and
 * F16C) or "isa:avx512-vnni"), "cuda" where built with it, "cpu". Static
 * strings. */
const char *lkv_version(void);
const char *lkv_build_features(void);

/* ---- element types ------------------------------------------------------
 * Type ids are ggml's (GGUF's) numbers: F32=0 F16=1 Q4_0=2 Q4_1=3 Q5_0=6
 * Q5_1=7 Q8_0=8 Q8_1=9 Q2_K=10 Q3_K=11 Q4_K=12 Q5_K=13 Q6_K=14 Q8_K=15
 * IQ2_XXS=16 IQ2_XS=17 IQ3_XXS=18 IQ1_S=19 IQ4_NL=20 IQ3_S=21 IQ2_S=22
 * IQ4_XS=23 IQ1_M=29 BF16=30. */

typedef struct lkv_type_info {
    const char *name;        /* "q4_0", static */
    int32_t block_size;      /* elements per block */
    int32_t type_size;       /* bytes per block */
    int32_t is_weight_type;  /* usable for model weights */
    int32_t is_kv_type;      /* usable for the K / V cache */
} lkv_type_info;

lkv_status lkv_type_info_get(int32_t type, lkv_type_info *out);
/* n must be a multiple of the type's block size. */
lkv_status lkv_dequantize(int32_t type, const void *src, float *dst, int64_t n);
lkv_status lkv_quantize(int32_t type, const float *src, void *dst, int64_t n);
/* *out = dot(x, y) where x is n elements of `type` and y is float; y is first
 * converted to the type's activation format, as the matmuls do. */
lkv_status lkv_vec_dot(int32_t type, int64_t n, const void *x, const float *y, float *out);
/* Testing: while `portable` is nonzero, the dot kernels that choose their
 * SIMD path at run time (the i-quants) take their portable C path even on a
 * CPU with AVX2. Process-wide; switch it only while no decode runs. Returns
 * the previous setting. */
int32_t lkv_quant_force_portable(int32_t portable);
/* Testing: the ISA level of the CPU kernels, chosen at load as the best the
 * CPU has: 0 portable, 1 AVX2+FMA+F16C, 2 AVX-512 with VNNI. lkv_cpu_isa_set
 * installs `level` (-1: the best again) and returns the previous level, or -1
 * where this CPU or build lacks it (nothing changes). Every level gives the
 * same bits. Process-wide; switch it only while no decode runs. */
int32_t lkv_cpu_isa(void);
int32_t lkv_cpu_isa_set(int32_t level);

/* ---- devices ------------------------------------------------------------ */

typedef enum lkv_device {
    LKV_DEVICE_CPU = 0,
    LKV_DEVICE_CUDA = 1
} lkv_device;

/* Number of usable CUDA devices (0 without a CUDA build or GPU). */
int32_t lkv_cuda_device_count(void);
/* Free and total device memory in bytes of the current CUDA device. */
lkv_status lkv_cuda_mem_info(int64_t *free_bytes, int64_t *total_bytes);

/* ---- model -------------------------------------------------------------- */

typedef enum lkv_arch {
    LKV_ARCH_LLAMA = 0,   /* llama, SmolLM2, Llama 2/3, Mistral */
    LKV_ARCH_QWEN2 = 1,   /* q/k/v biases, neox rope */
    LKV_ARCH_QWEN3 = 2,   /* per-head q/k rms norms, neox rope */
    LKV_ARCH_QWEN35 = 3,  /* hybrid (Qwen3.5): Gated DeltaNet layers; layer i is gated full
                             attention when (i + 1) % full_attn_interval == 0 */
    LKV_ARCH_GEMMA3 = 4,  /* embeddings scaled by sqrt(n_embd), q/k rms norms, norms after
                             attention and FFN too, GeGLU (tanh gelu), neox rope; sliding-window
                             local layers beside global ones (swa_* below) */
    LKV_ARCH_QWEN3MOE = 5, /* qwen3 attention; every layer's FFN a mixture of experts (n_expert
                             below): softmax router, top n_expert_used, routed SwiGLU experts */
    LKV_ARCH_QWEN35MOE = 6 /* the qwen35 hybrid layout; every layer's FFN routed experts plus a
                             shared expert scaled by sigmoid(its gate) */
} lkv_arch;

typedef struct lkv_model_params {
    int32_t arch;            /* lkv_arch */
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;        /* key/value length per head */
    int32_t n_ff;            /* FFN width (MoE models: at least n_ff_exp and n_ff_shexp) */
    int32_t n_ctx_train;
    int32_t rope_dim;        /* rotated dims per head (<= head_dim) */
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale;   /* 1 / linear scaling factor */
    int32_t device;          /* lkv_device */
    int32_t n_threads;       /* CPU threads for this model's contexts' default */
    /* hybrid architectures (qwen35); 0 elsewhere */
    int32_t full_attn_interval;  /* layer i has attention (and KV) when (i + 1) % it == 0 */
    int32_t ssm_conv_kernel;     /* taps of the causal depthwise conv (ssm.conv_kernel) */
    int32_t ssm_n_k_heads;       /* delta-rule query/key heads (ssm.group_count) */
    int32_t ssm_n_v_heads;       /* delta-rule value heads (ssm.time_step_rank) */
    int32_t ssm_head_k_dim;      /* (ssm.state_size) */
    int32_t ssm_head_v_dim;      /* (ssm.inner_size / ssm_n_v_heads) */
    int32_t n_nextn;             /* MTP (nextn) blocks stored after the trunk: blk.{n_layer + i} */
    /* appended in ABI 7 (gemma3); 0 keeps every earlier model as it was */
    float attn_scale;            /* scores' scale; 0: 1 / sqrt(head_dim) */
    int32_t swa_window;          /* > 0: local layers attend to the last swa_window positions
                                    (query p sees keys k with p - k < swa_window); 0: none */
    int32_t swa_pattern;         /* with swa_window: layer i is global (full attention) when
                                    (i + 1) % swa_pattern == 0, else local; 0: all local */
    float rope_freq_base_swa;    /* local layers' rope base (their rope scale is 1); 0: as
                                    rope_freq_base and rope_freq_scale */
    float logit_softcap;         /* > 0: logits = softcap * tanh(logits / softcap); 0: none */
    /* appended in ABI 8 (mixture of experts: qwen3moe, qwen35moe); 0 elsewhere */
    int32_t n_expert;            /* routed experts per layer (ffn_*_exps: (.., .., n_expert)) */
    int32_t n_expert_used;       /* experts each token goes to (top k of the router) */
    int32_t n_ff_exp;            /* a routed expert's FFN width (<= n_ff) */
    int32_t n_ff_shexp;          /* the shared expert's FFN width (<= n_ff); 0: none */
    int32_t expert_weights_norm; /* 1: the top k router probabilities renormalised to sum 1 */
    float expert_weights_scale;  /* the routing weights' factor; 0 means 1 */
    int32_t n_cpu_moe;           /* the first n_cpu_moe layers keep their routed experts in host
                                    memory (not copied to a device), computed on the CPU while
                                    the device runs the rest (llama.cpp's --n-cpu-moe; >= n_layer:
                                    all); 0: every expert where the other weights are */
} lkv_model_params;

/* One tensor, as laid out in the GGUF file. ne[0] is the contiguous
 * dimension (ggml order). data stays owned by the caller and must outlive the
 * model on the CPU (weights are not copied there); a CUDA model copies it. */
typedef struct lkv_tensor_desc {
    const char *name;        /* GGUF name: "blk.3.attn_q.weight" */
    int32_t type;
    int32_t n_dims;
    int64_t ne[4];
    const void *data;
    uint64_t nbytes;
} lkv_tensor_desc;

typedef struct lkv_model lkv_model;

void lkv_model_params_init(lkv_model_params *p);
/* Validates every tensor's presence, type and shape against the parameters.
 * Unknown tensor names are ignored. */
lkv_status lkv_model_create(const lkv_model_params *p, const lkv_tensor_desc *tensors,
                            int32_t n_tensors, lkv_model **out);
void lkv_model_free(lkv_model *m);
/* Bytes of weights held by the model on its device. */
int64_t lkv_model_weight_bytes(const lkv_model *m);
/* Layers with a KV cache (all layers, or the full-attention layers of a hybrid). */
int32_t lkv_model_n_layer_kv(const lkv_model *m);
/* MTP (nextn) blocks the model loaded (0 when the file has none). Their
 * weights are bound and checked; a context made with mtp = 1 runs the first. */
int32_t lkv_model_n_nextn(const lkv_model *m);

/* ---- context -------------------------------------------------------------- */

typedef struct lkv_context_params {
    int32_t n_ctx;           /* positions the KV cache holds */
    int32_t n_batch;         /* most tokens one lkv_decode call takes */
    int32_t n_ubatch;        /* micro-batch the forward pass runs at once */
    int32_t n_threads;       /* CPU worker threads (0: the model's default) */
    int32_t type_k;          /* KV element types (type ids above) */
    int32_t type_v;
    int32_t kv_chunk;        /* positions per KV chunk (0: default 256) */
    int32_t logits_all;      /* keep logits of every token of a decode */
    int64_t kv_pool_bytes;   /* device KV pool; < 0: unbounded, all resident */
    int32_t gpu_kernels;     /* CUDA: 1 the fastest kernels (default: int8 tensor-core GEMM,
                                tensor-core prefill attention), 0 the kernels bit-identical
                                with the CPU backend */
    int32_t embeddings;      /* 1: a decode outputs each row's final-normed hidden state
                                (n_embd floats) instead of its logits (n_vocab floats) */
    int32_t n_state_snapshots; /* hybrid models: recurrent-state snapshots kept for prefix
                                  reuse (default 2; 0: none) */
    int32_t n_seq_max;       /* sequences the context holds (default 1; for hybrid models
                                each sequence has its own recurrent state, on every backend).
                                Each has n_ctx positions, its own chunk grid and host
                                store; kv_pool_bytes is one pool shared by all of them */
    int32_t phase_arena;     /* the phase arena (native/src/arena.h): -1 (default) where the
                                backend has device memory (CUDA), 1 on (also on the CPU's
                                emulated device), 0 off. Only with a pool bound, one
                                sequence and n_ubatch > 16; logits do not depend on it */
    int32_t mtp;             /* 1: run the model's MTP (nextn) block beside the trunk for
                                lkv_context_mtp_draft (per sequence its own resident KV of
                                n_ctx rows, one attention layer, and its hidden rows; no
                                embeddings); default 0. It starts switched on;
                                lkv_context_set_mtp switches it */
} lkv_context_params;

typedef struct lkv_context lkv_context;

void lkv_context_params_init(lkv_context_params *p);
/* Allocates every buffer the context will use. A pool below the plan's
 * minimum fails with LKV_ERR_POOL_TOO_SMALL and a message giving it (with
 * n_seq_max > 1: below n_seq_max sequences' minimum shares, kv/plan.h). The
 * model must outlive the context. */
lkv_status lkv_context_create(lkv_model *m, const lkv_context_params *p, lkv_context **out);
void lkv_context_free(lkv_context *c);

/* Runs tokens[0..n) at positions pos0 .. pos0+n-1, where pos0 must equal
 * lkv_context_n_tokens(c) and n <= n_batch; splits them into micro-batches.
 * On success the logits of the last token (or, with logits_all, of each of
 * the n tokens) are available through lkv_context_logits. On failure other
 * than LKV_ERR_DEVICE the cache is as it was before the call. */
lkv_status lkv_decode(lkv_context *c, const int32_t *tokens, int32_t n, int32_t pos0);
/* Sets (abort != 0) or clears the context's abort flag. Safe from any thread,
 * also while another thread is inside lkv_decode on c. While the flag is set,
 * lkv_decode stops at its next check (before each micro-batch, and between
 * the layers of a micro-batch of more than 8 tokens) and returns
 * LKV_ERR_ABORTED with the cache as it was before the call. The flag stays
 * set until cleared. */
lkv_status lkv_context_set_abort(lkv_context *c, int32_t abort);
/* lkv_decode keeping the logits of the last n_logits of the n tokens (the rows
 * a speculative verification reads); 0: as lkv_decode. 0 <= n_logits <= n.
 * The first call that asks for more rows than the context keeps (1, or
 * n_ubatch with logits_all) allocates room for n_batch rows once. */
lkv_status lkv_decode_ex(lkv_context *c, const int32_t *tokens, int32_t n, int32_t pos0,
                         int32_t n_logits);
/* Several sequences in one call (continuous batching): tokens[i] belongs to
 * sequence seq_ids[i] (seq_ids NULL: all 0) and goes at that sequence's next
 * position. Each sequence's tokens are contiguous in the call (one run per
 * sequence) and in order. want_logits[i] != 0 keeps token i's logits
 * (want_logits NULL: the last token of each run, or every token with
 * logits_all); lkv_context_logits then gives one row per kept token, in token
 * order. n <= n_batch. The weights are read once per micro-batch for all its
 * tokens; attention runs per sequence over its own cache. All or nothing: on
 * failure other than LKV_ERR_DEVICE every sequence is as it was before. */
lkv_status lkv_decode_batch(lkv_context *c, const int32_t *tokens, const int32_t *seq_ids,
                            const int8_t *want_logits, int32_t n);
int32_t lkv_context_n_seq_max(const lkv_context *c);
/* positions sequence seq holds (-1 for an id outside [0, n_seq_max)) */
int32_t lkv_context_seq_n_tokens(const lkv_context *c, int32_t seq);
/* Drops positions >= n of sequence seq (n = 0: resets it, which frees its
 * share of the pool for the others). */
lkv_status lkv_context_seq_truncate(lkv_context *c, int32_t seq, int32_t n);
/* Sequence dst becomes the first n positions of sequence src (copied, not
 * recomputed); dst != src, n <= the positions src holds. */
lkv_status lkv_context_seq_copy(lkv_context *c, int32_t src, int32_t dst, int32_t n);

/* Logits of the last decode: n_rows rows of n_vocab floats (with embeddings:
 * hidden states, n_embd floats), row-major.
 * Valid until the next decode, truncate (of any sequence), copy or free on
 * this context. */
const float *lkv_context_logits(const lkv_context *c, int32_t *n_rows);
int32_t lkv_context_n_tokens(const lkv_context *c);
int32_t lkv_context_n_ctx(const lkv_context *c);
/* Drops positions >= n (n <= n_tokens). n = 0 resets. A hybrid model's
 * recurrent state cannot be cut back: there n must be 0, n_tokens or the
 * position of a snapshot (lkv_context_restore_point gives the usable one). */
lkv_status lkv_context_truncate(lkv_context *c, int32_t n);
/* The largest position p <= n (and <= n_tokens) that truncate accepts: n
 * itself for models without recurrent state; for hybrids 0, n_tokens or the
 * latest snapshot at or before n; for sliding-window models with a pool
 * bound n, or 0 where n lies before their ring's floor (lkv_kv_stats). With the MTP block on (lkv_context_set_mtp),
 * the largest of those after which the block is also in sync (0 at worst). */
int32_t lkv_context_restore_point(const lkv_context *c, int32_t n);
/* Hybrid models: keeps the recurrent state at the current position as a
 * snapshot (replacing the oldest when all slots are used), so that a later
 * truncate can return here. A no-op for other models or with 0 slots. */
lkv_status lkv_context_snapshot(lkv_context *c);
/* The same two for sequence seq (0: the calls above; with the MTP block, its own). A
 * snapshot of an id outside [0, n_seq_max) is LKV_ERR_INVALID_ARG; its restore
 * point is 0. */
int32_t lkv_context_seq_restore_point(const lkv_context *c, int32_t seq, int32_t n);
lkv_status lkv_context_seq_snapshot(lkv_context *c, int32_t seq);
/* MTP drafts (a context made with mtp = 1): `token` is the token the caller
 * chose for position n_tokens; the model's MTP block, fed the trunk's final
 * hidden state at n_tokens - 1, drafts the token after it, then, fed its own
 * output, the next ones (arg-max each), up to n_draft (1..64, and the
 * positions left in n_ctx). *n_out drafts go to drafts (room for n_draft);
 * logits_out, NULL or room for (n_draft, n_vocab) floats, receives each
 * step's logits. *n_out is 0 (not an error) when the block does not hold the
 * rows up to n_tokens - 1: after a state load, or a truncation to a position
 * whose hidden state was not kept (the last decode's rows and the snapshot
 * positions are kept), or while the block is behind after lkv_context_set_mtp;
 * truncating to lkv_context_restore_point (reset at worst) and decoding again
 * brings it back. The cache and the logits of the last decode are unchanged.
 * LKV_ERR_UNSUPPORTED while the block is switched off. */
lkv_status lkv_context_mtp_draft(lkv_context *c, int32_t token, int32_t n_draft, int32_t *drafts,
                         float *logits_out, int32_t *n_out);
/* Switches the MTP block of a context made with mtp = 1 on (on != 0) or off,
 * so that only a context that speculates pays for it. Off, a decode runs the
 * trunk alone (the block writes no K/V rows; lkv_context_mtp_stats counts
 * them) and lkv_context_mtp_draft fails with LKV_ERR_UNSUPPORTED. Switching
 * computes nothing: switched on after positions were decoded while off, the
 * block lacks their rows and drafts nothing (n_out 0) until it is in sync
 * again. While it is on, lkv_context_restore_point gives only positions where
 * the block is in sync after the truncation (the last position decoded while
 * it was on, a snapshot taken while it was on, 0 at worst): truncate to
 * lkv_context_restore_point(c, n) and decode the tokens after it again, and
 * the block's rows are filled by that decode, as if it had been on all along
 * (bit for bit for the same sequence of decode calls). A context made with
 * mtp = 0 accepts on = 0 (a no-op) and refuses on != 0 (LKV_ERR_UNSUPPORTED).
 * This call switches the block of every sequence of the context. */
lkv_status lkv_context_set_mtp(lkv_context *c, int32_t on);
/* appended in ABI 10: the MTP block per sequence. With n_seq_max > 1 each
 * sequence has its own block state (its K/V rows, hidden rows, snapshots and
 * switch); the calls above are sequence 0's (lkv_context_set_mtp: every
 * sequence's), these sequence seq's, with the same meaning. A run of tokens
 * of sequence s in lkv_decode_batch writes s's block rows only; a draft for s
 * reads s's block and leaves the others' as they were. lkv_context_seq_copy
 * copies the block's rows and hidden states below n with the trunk. */
lkv_status lkv_context_seq_mtp_draft(lkv_context *c, int32_t seq, int32_t token, int32_t n_draft,
                                     int32_t *drafts, float *logits_out, int32_t *n_out);
lkv_status lkv_context_seq_set_mtp(lkv_context *c, int32_t seq, int32_t on);

/* Generation in the library (lkv_generate): greedy, or the sampler chain. */
typedef struct lkv_generate_params {
    int32_t n_max;           /* most tokens to return, >= 1 (default 1) */
    const int32_t *stop_ids; /* n_stop ids that end the generation: returned, not decoded */
    int32_t n_stop;
    const int32_t *bias_ids; /* logit bias: bias[j] added to the logit of bias_ids[j] (distinct */
    const double *bias;      /* ids, bias finite or -inf, which bans the id) before the pick */
    int32_t n_bias;
    /* appended in ABI 9: engine/sampling.py's chain, penalties -> bias -> top_k -> typical_p ->
     * top_p -> min_p -> temperature -> a draw from numpy's PCG64; the defaults pick greedily as
     * before. Each pick is the Python sampler's for the same logits, history and
     * generator state (native/src/sample_chain.h: the arithmetic, and where it can differ) */
    double temperature;      /* <= 0: greedy, the largest logit after penalties and bias (default 0) */
    int32_t top_k;           /* <= 0 or >= n_vocab: off (default 0) */
    double top_p;            /* [0, 1], 1: off (default 1) */
    double min_p;            /* [0, 1], 0: off (default 0) */
    double repeat_penalty;   /* > 0, 1: off (default 1): a logit v <= 0 is multiplied by it, else divided */
    double frequency_penalty;/* subtracted once per occurrence (default 0) */
    double presence_penalty; /* subtracted once (default 0) */
    int32_t repeat_last_n;   /* the penalties' window: the last ids of the history, -1: all, 0: off (64) */
    const int32_t *history;  /* n_history ids the penalties see at the first pick (the token passed */
    int32_t n_history;       /* to lkv_generate included); each token decoded after is appended */
    uint64_t *rng_state;     /* temperature > 0: numpy's PCG64 state as {state >> 64, state & (2^64-1),
                                inc >> 64, inc & (2^64-1)}, advanced in place by each draw */
    uint8_t *drawn;          /* NULL, or room for n_max: 1 where the pick of out[i] drew a number (a
                                pick from one candidate draws none) */
    double typical_p;        /* [0, 1], 1: off (default 1); between top_k and top_p */
} lkv_generate_params;
void lkv_generate_params_init(lkv_generate_params *p);
/* Decoding of sequence 0 without a return per token. With token >= 0,
 * decodes it first (at position n_tokens); then, repeatedly: picks the next
 * token from the last decode's logits (greedy: the largest (double)logit +
 * bias, the lowest id among equal ones; temperature > 0 or penalties: the
 * chain of p's fields), appends it to out, stops after n_max tokens, a
 * stop id or a full context, else decodes it. So the cache ends holding every
 * returned token but the last (which the next call passes as token), and the
 * logits are the last decode's, as after lkv_decode. With token < 0 the first
 * pick reads the logits of the previous decode. A NaN logit or no finite
 * largest value ends the call without a token for that step (the caller's own
 * sampler can then report it). On GPUs the greedy pick without penalties runs
 * on the device and only the id comes back; the chain downloads the row and
 * picks on the host. *n_out tokens go to out (room for n_max), also on
 * failure (LKV_ERR_ABORTED by lkv_context_set_abort between tokens, or a
 * decode's error), where the cache holds those decoded before it. */
lkv_status lkv_generate(lkv_context *c, int32_t token, const lkv_generate_params *p, int32_t *out,
                        int32_t *n_out);
/* One pick of lkv_generate's, from a host row logits (n_vocab,) with p's sampler fields,
 * bias and history (n_max, stop ids ignored): *token = the id, or -1 where the logits after
 * penalties and bias hold a NaN or no finite value; *drew = 1 where a number was drawn
 * (p->rng_state advanced). */
lkv_status lkv_sample(const float *logits, int32_t n_vocab, const lkv_generate_params *p, int32_t *token,
                      int32_t *drew);

typedef struct lkv_mtp_stats {
    int32_t on;              /* the switch (lkv_context_set_mtp) */
    int32_t n_rows;          /* K/V rows the block holds: positions [0, n_rows) */
    int32_t in_sync;         /* 1: lkv_context_mtp_draft drafts now */
    int64_t rows_computed;   /* K/V rows the block computed following the trunk, total */
    int64_t draft_steps;     /* draft steps run (one block pass each), total */
} lkv_mtp_stats;

/* The MTP block's switch and counters (a context made with mtp = 1; else
 * LKV_ERR_UNSUPPORTED). */
lkv_status lkv_context_mtp_stats(const lkv_context *c, lkv_mtp_stats *out);
/* appended in ABI 10: the same of sequence seq's block (lkv_context_mtp_stats: sequence 0's) */
lkv_status lkv_context_seq_mtp_stats(const lkv_context *c, int32_t seq, lkv_mtp_stats *out);
/* Bytes of recurrent state (conv + delta-rule state) of one sequence; 0 for
 * models without it. Snapshots take this much each, beside it. */
int64_t lkv_context_recurrent_bytes(const lkv_context *c);

/* KV state: the first n_tokens rows of every attention layer, with a small
 * header, then the recurrent state of hybrid models (snapshots are not part
 * of it; loading a state drops them). */
lkv_status lkv_context_state_size(const lkv_context *c, uint64_t *size);
lkv_status lkv_context_state_get(lkv_context *c, void *dst, uint64_t size);
lkv_status lkv_context_state_set(lkv_context *c, const void *src, uint64_t size);
/* The same for one sequence (the calls above are sequence 0's): the state of
 * sequence seq, in the same format, so a blob saved from any sequence loads
 * into any sequence of a context of the same model and geometry. set checks
 * the whole blob before it empties and refills seq; other sequences are not
 * touched. An id outside [0, n_seq_max) is LKV_ERR_INVALID_ARG. */
lkv_status lkv_context_seq_state_size(const lkv_context *c, int32_t seq, uint64_t *size);
lkv_status lkv_context_seq_state_get(lkv_context *c, int32_t seq, void *dst, uint64_t size);
lkv_status lkv_context_seq_state_set(lkv_context *c, int32_t seq, const void *src,
                                     uint64_t size);

/* ---- KV residency plan and statistics ----------------------------------- */

typedef struct lkv_plan_params {
    int32_t n_layer;         /* attention layers */
    int32_t kv_chunk;        /* positions per chunk */
    int64_t row_bytes_k;     /* one token's K of one layer, in bytes */
    int64_t row_bytes_v;
    int32_t n_ctx;
    int32_t n_ubatch;
    int64_t pool_bytes;      /* < 0: unbounded */
    int64_t arena_bytes;     /* decode: device memory lent by the phase arena for extra
                                resident chunks (0: none; kv/plan.h) */
} lkv_plan_params;

typedef struct lkv_plan {
    int32_t n_chunks;        /* chunks per layer needed for n_tokens */
    int32_t resident_min;    /* fewest resident chunks of any layer */
    int32_t resident_max;
    int64_t resident_chunks; /* total over layers */
    int64_t ring_bytes;
    int64_t pool_bytes;      /* bytes the pool needs (<= the bound) */
    int64_t min_pool_bytes;  /* the least pool this context accepts */
    int64_t streamed_bytes;  /* bytes copied host -> device per decode step */
    int32_t arena_chunks;    /* of each layer's resident chunks, those in the arena */
} lkv_plan;

/* Pure: the plan for a cache holding n_tokens positions. resident may be NULL,
 * else it receives n_layer resident-chunk counts. */
lkv_status lkv_plan_compute(const lkv_plan_params *p, int32_t n_tokens, lkv_plan *out,
                            int32_t *resident);

typedef struct lkv_kv_stats {
    int64_t pool_bytes;
    int64_t ring_bytes;
    int64_t resident_bytes;
    int64_t bytes_streamed;       /* host -> device, total */
    int64_t bytes_streamed_last;  /* host -> device, last decode call */
    int64_t bytes_written_back;   /* device -> host write-through, total */
    int64_t copies;
    int64_t copy_waits;           /* times compute waited for a copy */
    int64_t replans;
    int32_t n_layer;
    int32_t kv_chunk;
    int32_t streaming;            /* 1 when a pool bound is in force */
    int64_t arena_bytes;          /* the context's phase arena (0: none): the prefill
                                     workspace, lent to the KV as extra resident chunks
                                     while decoding */
    int64_t arena_resident_bytes; /* resident chunk bytes in the arena now (decode) */
    /* appended in ABI 7: a sliding-window model's local layers, with a pool bound kept in
     * device memory beside the pool as a ring of window - 1 + n_batch rows each (n_ctx
     * where that is less), neither planned nor streamed; n_layer above then counts only
     * the streamed (global) layers. 0 without a bound (every layer resident, n_ctx rows)
     * and for models without local layers. With the ring, truncation (and a failed
     * decode's roll-back) reaches back only to lkv_context_restore_point, 0 at worst */
    int32_t local_layers;
    int64_t local_bytes;
} lkv_kv_stats;

/* Pure: the shares of one pool among n_seq sequences, active[i] != 0 for the
 * active ones (policy in native/src/kv/plan.h): offset[i], bytes[i]. A share
 * below min_share fails with LKV_ERR_POOL_TOO_SMALL. */
lkv_status lkv_plan_pool_shares(int64_t pool_bytes, int32_t n_seq, const int32_t *active,
                                int64_t min_share, int64_t *offset, int64_t *bytes);

/* resident may be NULL, else it receives n_layer counts. Sequence 0's cache
 * (pool_bytes is its share); lkv_context_seq_kv_stats for another. */
lkv_status lkv_context_seq_kv_stats(const lkv_context *c, int32_t seq, lkv_kv_stats *out,
                                    int32_t *resident);
lkv_status lkv_context_kv_stats(const lkv_context *c, lkv_kv_stats *out, int32_t *resident);
/* Row bytes of `type` for n elements (n a multiple of the block size). */
int64_t lkv_row_bytes(int32_t type, int64_t n);

/* ---- memory plan (dry run) ------------------------------------------------ */

/* What a model and a context with these parameters would take, part by part,
 * on the device mp->device names: the allocations lkv_model_create and
 * lkv_context_create make there, found by running the context's creation on
 * a backend that records each allocation instead of making it (nothing of the
 * device is touched, and no weight is copied or read). Byte figures are the
 * sizes asked for; the *_device figures round each allocation up as the CUDA
 * driver does (multiples of 512 bytes below 1 MiB, of 2 MiB from there), so
 * they bound what the device shows. The CUDA backend's own buffers include
 * what it allocates on first use (the prefill GEMM's scratch where its
 * kernel chooser takes gemm_wg for a weight type on sm_90a). */
typedef struct lkv_memory_plan {
    int32_t device;            /* lkv_device planned for */
    int32_t n_ubatch;          /* the micro-batch after the core's caps (n_batch, n_ctx) */
    int32_t phase_arena;       /* 1: the workspace is the phase arena (arena.h) */
    int32_t n_allocations;     /* device allocations of the context (weights excluded) */
    int64_t weights;           /* bytes of the distinct weight tensors the model uses on
                                  the device (the n_cpu_moe layers' experts stay out) */
    int64_t weights_device;    /* the same as the CUDA backend allocates them, rounded */
    int64_t backend;           /* the backend's own buffers (CUDA: tokens, attention
                                  workspace, rope table, 8-bit activations, GEMM scratch) */
    int64_t workspace;         /* micro-batch buffers of n_ubatch rows (the arena with one) */
    int64_t workspace_decode;  /* with the arena: the decode set beside it; else 0 */
    int64_t logits;            /* the device's logits rows */
    int64_t logits_wide;       /* made on first use: the rows a decode keeping several
                                  logits rows needs without logits_all (speculative
                                  verification, a step of several sequences) */
    int64_t recurrent;         /* a hybrid's recurrent state and its snapshots */
    int64_t kv;                /* the KV cache on the device: the pool, or every resident
                                  plane of every sequence, with the stream's micro-batch
                                  rows and sliding-window rings */
    int64_t kv_pool;           /* of kv: the pool (0: all resident) */
    int64_t kv_ring;           /* of the pool: the transfer ring with every position held */
    int64_t mtp;               /* the MTP block's buffers and KV */
    int64_t host;              /* the host KV store (pinned on CUDA) */
    int64_t device_total;      /* every device allocation of the context, rounded */
    int64_t kv_device;         /* of device_total: the KV cache's allocations (kv), rounded */
    int64_t recurrent_device;  /* of device_total: the recurrent state's, rounded */
} lkv_memory_plan;

/* The dry run; tensors as for lkv_model_create (validated the same way; their
 * data is not read), p as for lkv_context_create (its checks and refusals,
 * LKV_ERR_POOL_TOO_SMALL included). */
lkv_status lkv_memory_plan_compute(const lkv_model_params *mp, const lkv_tensor_desc *tensors,
                                   int32_t n_tensors, const lkv_context_params *p,
                                   lkv_memory_plan *out);

/* LKV_CDEF_END */

#define LKV_ABI_VERSION 10

#ifdef __cplusplus
}
#endif
#endif
