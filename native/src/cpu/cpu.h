/*
 * cpu/cpu.h: the CPU backend's per-context state, shared by its op files
 * (ops.c, matmul.c, attention.c). Everything is allocated in ctx_init; the
 * ops allocate nothing.
 */
#ifndef LKV_CPU_H
#define LKV_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu/threadpool.h"

typedef struct lkv_cpu_copier lkv_cpu_copier;

struct lkv_bctx {
    const struct lkv_model *model;
    lkv_threadpool *tp;
    int n_threads;
    int max_tokens;
    /* activations converted to a weight type's vec_dot_type, one buffer per
     * format in use: (max_tokens, row_bytes(fmt, max_cols)) */
    void *act_q[3];
    size_t act_q_bytes;
    /* per-thread scratch of the weight types' GEMM tiles (quant/types.h
     * lkv_gemm_fn), (n_threads, gemm_scratch_bytes) */
    char *gemm_scratch;
    size_t gemm_scratch_bytes;
    /* per-thread attention scratch, (n_threads, attn_scratch_floats) */
    float *attn_scratch;
    size_t attn_scratch_floats;
    lkv_cpu_copier *copier;  /* copy thread of the emulated device, when streaming */
    /* per-thread delta-rule scratch of hybrid models, (n_threads, delta_scratch_floats) */
    float *delta_scratch;
    size_t delta_scratch_floats;
};

void lkv_cpu_matmul(lkv_bctx *b, float *const *outs, const float *x, const lkv_weight *const *ws,
                    int n_w, int n);
size_t lkv_cpu_attn_state_bytes(int n_q, int n_head, int head_dim);
void lkv_cpu_attn_reset(lkv_bctx *b, void *st, int n_q, int n_head, int head_dim);
void lkv_cpu_attn_accum(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d);
void lkv_cpu_attn_finish(lkv_bctx *b, float *out, const void *st, int n_q, int n_head,
                         int head_dim);
/* floats of per-thread scratch attention needs for this model and chunk size */
size_t lkv_cpu_attn_scratch_floats(int head_dim, int chunk);

/* hybrid layers: gating.c, conv1d.c, deltanet.c */
void lkv_cpu_split_rows(lkv_bctx *b, float *q, float *gate, const float *x, int n_rows, int dim);
void lkv_cpu_sigmoid_mul(lkv_bctx *b, float *x, const float *gate, int64_t n);
void lkv_cpu_rmsnorm_gated(lkv_bctx *b, float *out, const float *x, const lkv_weight *w,
                           const float *z, int n, int dim, float eps);
void lkv_cpu_ssm_conv(lkv_bctx *b, float *out, const float *x, float *state, const lkv_weight *w,
                      int n, int ch);
void lkv_cpu_delta_rule(lkv_bctx *b, float *out, const float *qkv, const float *beta_in,
                        const float *alpha, const lkv_weight *a, const lkv_weight *dt,
                        float *state, const lkv_delta_desc *d, int n);
size_t lkv_cpu_delta_scratch_floats(int dk, int dv);

/* gemma3: gemma.c */
void lkv_cpu_geglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n);
void lkv_cpu_scale(lkv_bctx *b, float *x, float s, int64_t n);
/* moe.c: mixture-of-experts routing and row moves (backend.h) */
void lkv_cpu_moe_topk(lkv_bctx *b, int32_t *ids, float *wts, const float *logits, int n,
                      int n_expert, int k, int norm, float scale);
void lkv_cpu_gather_rows(lkv_bctx *b, float *out, const float *x, const int32_t *rows, int n,
                         int dim);
void lkv_cpu_scatter_add_rows(lkv_bctx *b, float *out, const float *y, const int32_t *rows,
                              const float *wts, int n, int dim);
void lkv_cpu_zero(lkv_bctx *b, float *x, int64_t n);
void lkv_cpu_softcap(lkv_bctx *b, float *x, float cap, int64_t n);

lkv_status lkv_cpu_copier_init(lkv_bctx *b);
void lkv_cpu_copier_free(lkv_cpu_copier *cp);
uint64_t lkv_cpu_copy_async(lkv_bctx *b, void *dst, const void *src, size_t bytes, int h2d);
uint64_t lkv_cpu_copy_async_2d(lkv_bctx *b, void *dst, size_t dpitch, const void *src,
                               size_t spitch, size_t width, size_t height, int h2d);
int lkv_cpu_compute_wait_copy(lkv_bctx *b, uint64_t t);
lkv_status lkv_cpu_copy_sync(lkv_bctx *b);

#define LKV_CPU_MAX_CHUNK 4096

#endif
