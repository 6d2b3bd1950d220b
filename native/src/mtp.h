/*
 * mtp.h: a qwen35 model's MTP (nextn) block run beside the trunk, as a drafter.
 *
 * With h_t the trunk's final hidden state at position t after output_norm
 * (the vector the LM head reads) and e = embed(token at t + 1), the block's
 * row at position t is
 *
 *   u  = eh_proj @ [enorm(e) | hnorm(h_t)]          (embedding half first)
 *   u  = one gated full-attention decoder block (attention + SwiGLU FFN) on u,
 *        attending over the block's own K/V at positions 0..t
 *   g  = rmsnorm(u) * shared_head_norm (output_norm when absent)
 *   logits = g @ shared_head_head (output when absent): the token at t + 2
 *
 * Its own KV is one resident attention layer of n_ctx rows (lkv_kv, never
 * streamed). Every trunk micro-batch at positions [p0, p0 + n) writes the
 * block's K/V rows for positions p0 - 1 .. p0 + n - 2 (their next tokens are
 * the micro-batch's), so after a decode the block holds n_tokens - 1 rows and
 * the trunk's hidden state at n_tokens - 1 waits for the token the caller
 * samples. A draft runs the block at n_tokens - 1 with that token, then at
 * the next positions with the block's own g and its arg-max token (one block
 * reused for every draft step, as llama.cpp and vLLM do); its rows are
 * dropped afterwards. Truncation keeps the rows below the new length; the
 * block is "in sync" while it holds n_tokens - 1 rows and the hidden state at
 * n_tokens - 1 is known (kept from the last micro-batch, or at a snapshot).
 * Out of sync (after a state load, or a truncation to a position whose hidden
 * state was not kept), drafts are empty until the context is truncated to a
 * position where the block is in sync (0 always is) and decoded again.
 *
 * Switched off (lkv_context_set_mtp), the block computes nothing: a trunk
 * micro-batch neither writes its K/V rows nor keeps its hidden rows, so the
 * block falls behind. Its rows [0, len) and the hidden states it kept stay
 * true (truncation still trims them). Switched on again, it is in sync at a
 * position p where len >= p - 1 and the hidden state at p - 1 is kept; the
 * context's restore point (context.c) then only gives such positions, so a
 * caller that truncates to it and decodes the rest again (prefix reuse) has
 * the block's rows filled by that decode, as if it had been on throughout.
 */
#ifndef LKV_MTP_H
#define LKV_MTP_H

#include <stdbool.h>
#include <stdint.h>

#include "context.h"

typedef struct lkv_mtp lkv_mtp;

/* the MTP state of c (c->p.mtp != 0; the model has an MTP block): one per sequence */
lkv_status lkv_mtp_create(lkv_context *c, lkv_mtp **out);
void lkv_mtp_free(lkv_context *c, lkv_mtp *t);
/* after a trunk micro-batch's layers (c->x holds its residual rows; overwritten) */
lkv_status lkv_mtp_after_step(lkv_context *c, const lkv_ubatch *ub);
/* sequence seq of the trunk now holds n positions (truncate, roll back, reset) */
void lkv_mtp_truncate(lkv_context *c, int32_t seq, int32_t n);
/* a snapshot of sequence seq at position pos: keep the hidden state at pos - 1 with it */
void lkv_mtp_snapshot(lkv_context *c, int32_t seq, int32_t pos);
/* sequence dst becomes the first n positions of src (the trunk's copy): the
 * block's rows and hidden states that lie below n, copied */
lkv_status lkv_mtp_copy(lkv_context *c, int32_t src, int32_t dst, int32_t n);
/* up to n_draft arg-max drafts after `token` (the token at sequence seq's
 * n_tokens); *n_out of them (0 out of sync); logits_out (n_draft, n_vocab) host or NULL */
lkv_status lkv_mtp_run_draft(lkv_context *c, int32_t seq, int32_t token, int32_t n_draft,
                             int32_t *drafts, float *logits_out, int32_t *n_out);
/* the switch of sequence seq (seq < 0: every sequence); off, lkv_mtp_after_step
 * does nothing for it */
void lkv_mtp_set_on(lkv_mtp *t, int32_t seq, bool on);
bool lkv_mtp_is_on(const lkv_mtp *t, int32_t seq);
/* after truncate(seq, p) the block of seq would be in sync (p = 0 always is) */
bool lkv_mtp_synced_at(const lkv_mtp *t, int32_t seq, int32_t p);
/* rows the block of seq holds: positions [0, rows) */
int32_t lkv_mtp_rows(const lkv_mtp *t, int32_t seq);
void lkv_mtp_get_stats(const lkv_context *c, int32_t seq, lkv_mtp_stats *out);

#endif
