/*
 * decode.c: a decode call as a sequence of micro-batches, over one or
 * several sequences (each a run of consecutive tokens of the call), and
 * the per-sequence length changes: truncate, reset, copy.
 */
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "context.h"
#include "error.h"
#include "model_api.h"
#include "mtp.h"

lkv_status lkv_context_check_abort(const lkv_context *c) {
    if (!atomic_load_explicit(&c->abort, memory_order_relaxed)) return LKV_OK;
    return lkv_fail(LKV_ERR_ABORTED, "decode aborted (lkv_context_set_abort); the cache is as it "
                    "was before the call");
}

float *lkv_logits_dev(const lkv_context *c, int32_t nl) {
    return nl > (c->p.logits_all ? c->p.n_ubatch : 1) ? c->logits_wide : c->logits_dev;
}

/* Room for the logits of n_logits > 1 rows without logits_all: a device
 * buffer of U rows and a host one of n_batch rows, made once (also by the
 * memory plan, memplan.c, to count it). */
lkv_status lkv_context_wide_logits(lkv_context *c) {
    if (c->logits_wide) return LKV_OK;
    const size_t W = (size_t)c->out_width;   /* n_vocab, or n_embd with embeddings */
    float *host = malloc(sizeof(float) * (size_t)c->p.n_batch * W);
    if (!host) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for %d logits rows", c->p.n_batch);
    float *dev = c->be->alloc(c->b, sizeof(float) * (size_t)c->p.n_ubatch * W);
    if (!dev) {
        free(host);
        return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %d logits rows", c->p.n_ubatch);
    }
    free(c->logits);
    c->logits = host;
    c->logit_rows_host = c->p.n_batch;
    c->logits_wide = dev;
    return LKV_OK;
}

static lkv_status check_live(const lkv_context *c) {
    if (c->dead) return lkv_fail(LKV_ERR_DEAD, "the context failed earlier (device error); free it");
    return LKV_OK;
}

static lkv_status check_seq(const lkv_context *c, int32_t seq, const char *what) {
    if (seq < 0 || seq >= c->n_seq)
        return lkv_fail(LKV_ERR_INVALID_ARG, "%s: sequence id %d is outside [0, n_seq_max = %d)",
                        what, seq, c->n_seq);
    return LKV_OK;
}

/* Validates tokens and sequence runs; sets seq_start (lengths before the
 * call, -1 for sequences not in it). */
static lkv_status check_batch(lkv_context *c, const int32_t *tokens, const int32_t *seqs,
                              int32_t n) {
    LKV_TRY(check_live(c));
    if (n <= 0) return lkv_fail(LKV_ERR_INVALID_ARG, "no tokens to decode (n = %d)", n);
    if (n > c->p.n_batch)
        return lkv_fail(LKV_ERR_INVALID_ARG, "%d tokens exceed n_batch = %d", n, c->p.n_batch);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->model->hp.n_vocab)
            return lkv_fail(LKV_ERR_INVALID_ARG, "token id %d at index %d is outside the vocabulary "
                            "[0, %d)", tokens[i], i, c->model->hp.n_vocab);
    for (int32_t s = 0; s < c->n_seq; s++) c->seq_start[s] = -1;
    for (int32_t i = 0; i < n;) {
        const int32_t s = seqs ? seqs[i] : 0;
        LKV_TRY(check_seq(c, s, "decode"));
        if (c->seq_start[s] >= 0)
            return lkv_fail(LKV_ERR_INVALID_ARG, "decode: the tokens of sequence %d are not "
                            "contiguous (it appears again at index %d)", s, i);
        int32_t e = i;
        while (e < n && (seqs ? seqs[e] : 0) == s) e++;
        if ((int64_t)c->seq_len[s] + (e - i) > c->p.n_ctx)
            return lkv_fail(LKV_ERR_CONTEXT_FULL, "%d tokens at position %d of sequence %d exceed "
                            "n_ctx = %d", e - i, c->seq_len[s], s, c->p.n_ctx);
        c->seq_start[s] = c->seq_len[s];
        i = e;
    }
    return LKV_OK;
}

/* every sequence in the call back to its length before it */
static void roll_back(lkv_context *c) {
    for (int32_t s = 0; s < c->n_seq; s++) {
        if (c->seq_start[s] < 0) continue;
        int32_t back = c->seq_start[s];
        if (c->rs) {   /* the recurrent state moved on: back to the latest usable point */
            back = lkv_recur_restore_point(c->rs_seq[s], back, INT32_MAX);
            lkv_recur_truncate(c->rs_seq[s], back, -1);
        }
        if (back < lkv_kv_restore_floor(lkv_kvset_seq(c->kvs, s)))
            back = 0;   /* a sliding-window ring (kv/cache.h; its rows suffice for one call) */
        lkv_kv_truncate(lkv_kvset_seq(c->kvs, s), back);
        if (c->mtp) lkv_mtp_truncate(c, s, back);
        c->seq_len[s] = back;
    }
}

/* Runs a checked call whose kept rows are c->want[0..n) (n_want of them). */
static lkv_status run(lkv_context *c, const int32_t *tokens, const int32_t *seqs, int32_t n,
                      int32_t n_want) {
    if (n_want > c->logit_rows_host) LKV_TRY(lkv_context_wide_logits(c));
    for (int32_t s = 0; s < c->n_seq; s++) c->active[s] = c->seq_len[s] > 0 || c->seq_start[s] >= 0;
    LKV_TRY(lkv_kvset_prepare(c->kvs, c->active));
    const int32_t W = c->out_width, U = c->p.n_ubatch;
    c->n_logit_rows = 0;
    for (int32_t s = 0; s < c->n_seq; s++)
        if (c->seq_start[s] >= 0) lkv_kv_decode_begin(lkv_kvset_seq(c->kvs, s));
    int32_t kept = 0;
    for (int32_t done = 0; done < n; done += U) {
        const int32_t nu = n - done < U ? n - done : U;
        lkv_ubatch ub = {tokens + done, nu, c->groups, 0, c->want + done, 0};
        for (int32_t r = 0; r < nu;) {   /* the runs of this micro-batch */
            const int32_t s = seqs ? seqs[done + r] : 0;
            int32_t e = r;
            while (e < nu && (seqs ? seqs[done + e] : 0) == s) e++;
            c->groups[ub.n_groups++] = (lkv_group){s, c->seq_len[s], r, e - r};
            r = e;
        }
        for (int32_t r = 0; r < nu; r++) ub.n_want += ub.want[r] != 0;
        lkv_status st = lkv_context_check_abort(c);
        if (!st) st = lkv_ws_phase(c, nu);   /* prefill or decode buffers (arena.h) */
        if (!st) st = lkv_forward(c, &ub, c->logits_stay ? NULL : c->logits + (size_t)kept * W);
        if (st) {
            if (st == LKV_ERR_DEVICE) c->dead = true;
            roll_back(c);
            return st;
        }
        for (int32_t g = 0; g < ub.n_groups; g++) c->seq_len[c->groups[g].seq] += c->groups[g].n;
        kept += ub.n_want;
    }
    c->n_logit_rows = kept;
    return LKV_OK;
}

lkv_status lkv_context_decode(lkv_context *c, const int32_t *tokens, int32_t n, int32_t pos0,
                              int32_t n_logits) {
    LKV_TRY(check_live(c));
    if (n > 0 && n <= c->p.n_batch && (n_logits < 0 || n_logits > n))
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_logits = %d is outside [0, n = %d]", n_logits, n);
    if (n > 0 && pos0 != c->seq_len[0])
        return lkv_fail(LKV_ERR_INVALID_ARG, "position %d does not follow the cache, which holds %d "
                        "positions; truncate first", pos0, c->seq_len[0]);
    LKV_TRY(check_batch(c, tokens, NULL, n));
    if (n_logits == 0) n_logits = c->p.logits_all ? n : 1;
    for (int32_t i = 0; i < n; i++) c->want[i] = i >= n - n_logits;
    return run(c, tokens, NULL, n, n_logits);
}

lkv_status lkv_context_decode_seqs(lkv_context *c, const int32_t *tokens, const int32_t *seq_ids,
                                   const int8_t *want_logits, int32_t n) {
    LKV_TRY(check_batch(c, tokens, seq_ids, n));
    int32_t n_want = 0;
    for (int32_t i = 0; i < n; i++) {
        const bool last = i + 1 == n || (seq_ids && seq_ids[i + 1] != seq_ids[i]);
        c->want[i] = want_logits ? want_logits[i] != 0 : c->p.logits_all || last;
        n_want += c->want[i];
    }
    return run(c, tokens, seq_ids, n, n_want);
}

// ------------------------------------------------------------------ lengths

lkv_status lkv_context_seq_set_length(lkv_context *c, int32_t seq, int32_t n) {
    LKV_TRY(check_live(c));
    LKV_TRY(check_seq(c, seq, "truncate"));
    const int32_t len = c->seq_len[seq];
    if (n < 0 || n > len)
        return lkv_fail(LKV_ERR_INVALID_ARG, "cannot truncate to %d: the cache of sequence %d "
                        "holds %d positions", n, seq, len);
    if (c->rs) LKV_TRY(lkv_recur_truncate(c->rs_seq[seq], n, len));
    LKV_TRY(lkv_kv_truncate(lkv_kvset_seq(c->kvs, seq), n));
    if (c->mtp) lkv_mtp_truncate(c, seq, n);
    c->seq_len[seq] = n;
    c->n_logit_rows = 0;
    return LKV_OK;
}

lkv_status lkv_context_draft_mtp(lkv_context *c, int32_t seq, int32_t token, int32_t n_draft,
                                 int32_t *drafts, float *logits_out, int32_t *n_out) {
    *n_out = 0;
    LKV_TRY(check_live(c));
    LKV_TRY(check_seq(c, seq, "mtp draft"));
    if (!c->mtp)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "mtp draft: the context was made without mtp = 1");
    if (!lkv_mtp_is_on(c->mtp, seq))
        return lkv_fail(LKV_ERR_UNSUPPORTED, "mtp draft: the MTP block of sequence %d is switched "
                        "off (lkv_context_set_mtp); switch it on, then truncate to the restore "
                        "point and decode the rest again to bring it in sync", seq);
    return lkv_mtp_run_draft(c, seq, token, n_draft, drafts, logits_out, n_out);
}

lkv_status lkv_context_switch_mtp(lkv_context *c, int32_t seq, int32_t on) {
    LKV_TRY(check_live(c));
    if (seq >= 0) LKV_TRY(check_seq(c, seq, "set mtp"));
    if (!c->mtp) {
        if (!on) return LKV_OK;   /* nothing runs anyway */
        return lkv_fail(LKV_ERR_UNSUPPORTED, "set mtp: the context was made without mtp = 1 "
                        "(the MTP block's buffers are made with the context)");
    }
    lkv_mtp_set_on(c->mtp, seq, on != 0);
    return LKV_OK;
}

lkv_status lkv_context_get_mtp_stats(const lkv_context *c, int32_t seq, lkv_mtp_stats *out) {
    memset(out, 0, sizeof *out);
    LKV_TRY(check_seq(c, seq, "mtp stats"));
    if (!c->mtp)
        return lkv_fail(LKV_ERR_UNSUPPORTED, "mtp stats: the context was made without mtp = 1");
    lkv_mtp_get_stats(c, seq, out);
    return LKV_OK;
}

lkv_status lkv_context_set_length(lkv_context *c, int32_t n) {
    return lkv_context_seq_set_length(c, 0, n);
}

lkv_status lkv_context_copy_seq(lkv_context *c, int32_t src, int32_t dst, int32_t n) {
    LKV_TRY(check_live(c));
    LKV_TRY(check_seq(c, src, "copy"));
    LKV_TRY(check_seq(c, dst, "copy"));
    if (src == dst)
        return lkv_fail(LKV_ERR_INVALID_ARG, "copy: source and destination are both sequence %d",
                        src);
    if (n < 0 || n > c->seq_len[src])
        return lkv_fail(LKV_ERR_INVALID_ARG, "copy: %d positions asked of sequence %d, which holds "
                        "%d", n, src, c->seq_len[src]);
    if (c->rs && n != 0 && n != c->seq_len[src])
        return lkv_fail(LKV_ERR_UNSUPPORTED, "copy: a hybrid model's recurrent state is at "
                        "position %d of sequence %d; copy all of it or none (asked %d)",
                        c->seq_len[src], src, n);
    if (c->rs) LKV_TRY(lkv_context_seq_set_length(c, dst, 0));
    c->seq_len[dst] = 0;   /* the destination is emptied first; on failure it stays empty */
    c->n_logit_rows = 0;
    LKV_TRY(lkv_kv_copy(lkv_kvset_seq(c->kvs, dst), lkv_kvset_seq(c->kvs, src), n));
    if (c->rs && n) LKV_TRY(lkv_recur_copy(c->rs_seq[dst], c->rs_seq[src]));
    if (c->mtp) LKV_TRY(lkv_mtp_copy(c, src, dst, n));
    c->seq_len[dst] = n;
    return LKV_OK;
}
