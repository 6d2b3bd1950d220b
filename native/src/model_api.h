/*
 * model_api.h: the core's entry points behind api.c (which validates the
 * call, clears the error and forwards here).
 */
#ifndef LKV_MODEL_API_H
#define LKV_MODEL_API_H

#include "llamakv.h"
#include "model.h"

struct lkv_bctx;

lkv_status lkv_model_build(const lkv_model_params *p, const lkv_tensor_desc *tensors,
                           int32_t n_tensors, lkv_model **out);
void lkv_model_destroy(lkv_model *m);

/* the backend that p->device names, if it can run p's architecture */
lkv_status lkv_model_backend(const lkv_model_params *p, const struct lkv_backend **out);

lkv_status lkv_context_build(lkv_model *m, const lkv_context_params *p, lkv_context **out);
/* The parts of a context's backend memory, in the order the build allocates them. */
typedef enum lkv_ctx_part {
    LKV_PART_BACKEND,        /* the backend's own state (ctx_init) */
    LKV_PART_WORKSPACE,      /* micro-batch buffers, the phase arena (arena.h) */
    LKV_PART_LOGITS,
    LKV_PART_RECURRENT,      /* a hybrid's recurrent state and snapshots */
    LKV_PART_KV,             /* pool, resident planes, stream rows, local rings, host store */
    LKV_PART_MTP,            /* the MTP block's buffers and KV */
    LKV_PARTS
} lkv_ctx_part;
/* lkv_context_build on backend be (the model's, or the dry run's recorder:
 * memplan.c), calling mark(b, part) before each part's allocations (mark may
 * be NULL). */
lkv_status lkv_context_build_on(lkv_model *m, const struct lkv_backend *be,
                                const lkv_context_params *p, lkv_context **out,
                                void (*mark)(struct lkv_bctx *b, int part));
/* the dry run behind lkv_memory_plan_compute (memplan.c) */
lkv_status lkv_memplan_run(const lkv_model_params *mp, const lkv_tensor_desc *tensors,
                           int32_t n_tensors, const lkv_context_params *cp, lkv_memory_plan *out);
void lkv_context_destroy(lkv_context *c);
lkv_status lkv_context_decode(lkv_context *c, const int32_t *tokens, int32_t n, int32_t pos0,
                              int32_t n_logits);
lkv_status lkv_context_decode_seqs(lkv_context *c, const int32_t *tokens, const int32_t *seq_ids,
                                   const int8_t *want_logits, int32_t n);
lkv_status lkv_context_set_length(lkv_context *c, int32_t n);
/* the MTP block of sequence seq (switch: seq < 0 switches every sequence) */
lkv_status lkv_context_draft_mtp(lkv_context *c, int32_t seq, int32_t token, int32_t n_draft,
                                 int32_t *drafts, float *logits_out, int32_t *n_out);
lkv_status lkv_context_switch_mtp(lkv_context *c, int32_t seq, int32_t on);
lkv_status lkv_context_generate(lkv_context *c, int32_t token, const lkv_generate_params *p,
                                int32_t *out, int32_t *n_out);
lkv_status lkv_context_get_mtp_stats(const lkv_context *c, int32_t seq, lkv_mtp_stats *out);
lkv_status lkv_context_seq_set_length(lkv_context *c, int32_t seq, int32_t n);
lkv_status lkv_context_copy_seq(lkv_context *c, int32_t src, int32_t dst, int32_t n);
int32_t lkv_context_restore(const lkv_context *c, int32_t n);
lkv_status lkv_context_keep_snapshot(lkv_context *c);
/* the same for sequence seq (0: the calls above) */
int32_t lkv_context_seq_restore(const lkv_context *c, int32_t seq, int32_t n);
lkv_status lkv_context_seq_keep_snapshot(lkv_context *c, int32_t seq);
lkv_status lkv_context_state_bytes(const lkv_context *c, int32_t seq, uint64_t *size);
lkv_status lkv_context_state_save(lkv_context *c, int32_t seq, void *dst, uint64_t size);
lkv_status lkv_context_state_load(lkv_context *c, int32_t seq, const void *src, uint64_t size);
lkv_status lkv_context_stats(const lkv_context *c, int32_t seq, lkv_kv_stats *out,
                             int32_t *resident);

#endif
