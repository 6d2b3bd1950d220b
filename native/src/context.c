/*
 * context.c: creating a context (every buffer it will use), decoding a batch
 * as a sequence of micro-batches, truncation, and the KV state blob.
 */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "arena.h"
#include "context.h"
#include "error.h"
#include "model_api.h"
#include "moe.h"
#include "mtp.h"
#include "quant/types.h"
#include "sample_chain.h"

#define DEFAULT_CHUNK 256
#define STATE_MAGIC 0x564b4c32u   /* "2LKV": the header has recur_bytes since ABI 2 */

// ------------------------------------------------------------------ create / free

static lkv_status check_params(const lkv_model *m, const lkv_context_params *p) {
    if (p->n_ctx <= 0) return lkv_fail(LKV_ERR_INVALID_ARG, "n_ctx must be > 0 (got %d)", p->n_ctx);
    if (p->n_batch <= 0 || p->n_ubatch <= 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_batch (%d) and n_ubatch (%d) must be > 0",
                        p->n_batch, p->n_ubatch);
    if (p->n_threads < 0 || p->n_threads > 512)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_threads must be in [0, 512] (got %d)", p->n_threads);
    if (p->kv_chunk < 0 || p->kv_chunk > 4096)
        return lkv_fail(LKV_ERR_INVALID_ARG, "kv_chunk must be in [1, 4096] or 0 for the default "
                        "(got %d)", p->kv_chunk);
    if (p->embeddings != 0 && p->embeddings != 1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "embeddings must be 0 or 1 (got %d)", p->embeddings);
    if (p->n_seq_max < 1 || p->n_seq_max > 4096)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_seq_max must be in [1, 4096] (got %d)", p->n_seq_max);
    if (p->mtp != 0 && p->mtp != 1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "mtp must be 0 or 1 (got %d)", p->mtp);
    if (p->gpu_kernels != 0 && p->gpu_kernels != 1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "gpu_kernels must be 0 (exact) or 1 (fast) (got %d)",
                        p->gpu_kernels);
    if (p->phase_arena < -1 || p->phase_arena > 1)
        return lkv_fail(LKV_ERR_INVALID_ARG, "phase_arena must be -1 (the backend's default), 0 "
                        "or 1 (got %d)", p->phase_arena);
    const int32_t types[2] = {p->type_k, p->type_v};
    for (int i = 0; i < 2; i++) {
        const lkv_traits *t = lkv_type_traits(types[i]);
        if (!t || !t->is_kv)
            return lkv_fail(LKV_ERR_UNSUPPORTED, "%s type %s (id %d) is not a supported KV cache type",
                            i ? "type_v" : "type_k", t ? t->name : "unknown", (int)types[i]);
        if (m->hp.head_dim % t->block_size)
            return lkv_fail(LKV_ERR_UNSUPPORTED, "KV type %s needs head_dim a multiple of %d",
                            t->name, (int)t->block_size);
    }
    return LKV_OK;
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

lkv_status lkv_context_build(lkv_model *m, const lkv_context_params *pin, lkv_context **out) {
    return lkv_context_build_on(m, m->be, pin, out, NULL);
}

/* mark(b, part): the allocations that follow belong to part (lkv_ctx_part), for
 * the dry run's recording backend (memplan.c); NULL otherwise */
#define MARK(part) do { if (mark) mark(c->b, (part)); } while (0)

/* Several sequences of a hybrid (a recurrent state each) and the MTP block per
 * sequence: the code holds them on every backend (forward.c runs the conv and
 * delta-rule ops per sequence's run; a captured decode step's key names its
 * sequence; mtp.c keeps a block state per sequence), checked on the CPU
 * (tests/test_qwen35_multiseq.py, test_mtp_multiseq.py) but not yet run on a
 * GPU: until tests/test_cuda_qwen35_multiseq.py and test_mtp_multiseq.py pass
 * there, a GPU backend takes one such sequence per context. A build with
 * -DLKV_GPU_SEQS=1 lifts this (dev/tools/pack_b90.sh makes one, for those tests). */
#ifndef LKV_GPU_SEQS
#define LKV_GPU_SEQS 0
#endif
static bool gpu_seqs_verified(const lkv_backend *be) {
    return LKV_GPU_SEQS || strcmp(be->name, "cpu") == 0;
}

lkv_status lkv_context_build_on(lkv_model *m, const lkv_backend *be, const lkv_context_params *pin,
                                lkv_context **out, void (*mark)(lkv_bctx *b, int part)) {
    lkv_context_params p = *pin;
    if (!p.n_seq_max) p.n_seq_max = 1;
    LKV_TRY(check_params(m, &p));
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    if (p.n_ubatch > p.n_batch) p.n_ubatch = p.n_batch;
    if (!p.kv_chunk) p.kv_chunk = DEFAULT_CHUNK;
    if (!p.n_threads) p.n_threads = m->hp.n_threads > 0 ? m->hp.n_threads : default_threads();

    lkv_context *c = calloc(1, sizeof *c);
    if (!c) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the context");
    c->model = m;
    c->p = p;
    c->be = be;
    const lkv_model_params *hp = &m->hp;
    const int U = p.n_ubatch, hd = hp->head_dim;
    const size_t nkv = (size_t)hp->n_head_kv * hd;
    const int logit_rows_dev = p.logits_all ? U : 1;
    c->out_width = p.embeddings ? hp->n_embd : hp->n_vocab;
    lkv_status st = c->be->ctx_init(&c->b, m, p.n_threads, U);
    if (st) { free(c); return st; }
    if (c->be->set_fast) c->be->set_fast(c->b, p.gpu_kernels);

#define ALLOC(ptr, bytes) \
    do { if (!st && !((ptr) = c->be->alloc(c->b, (bytes)))) \
        st = lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate %zu bytes for " #ptr, (size_t)(bytes)); } while (0)
    MARK(LKV_PART_WORKSPACE);
    st = lkv_ws_create(c);   /* x .. attn_st and a hybrid's rows (arena.c) */
    MARK(LKV_PART_LOGITS);
    ALLOC(c->logits_dev, sizeof(float) * (size_t)logit_rows_dev * c->out_width);
    MARK(LKV_PART_RECURRENT);
    if (m->arch->hybrid) {
        const size_t VD = (size_t)hp->ssm_n_v_heads * hp->ssm_head_v_dim,
                     CD = 2 * (size_t)hp->ssm_n_k_heads * hp->ssm_head_k_dim + VD;
        c->delta = (lkv_delta_desc){hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_head_k_dim,
                                    hp->ssm_head_v_dim, (int32_t)CD, hp->rms_eps};
        lkv_recur_config rc = {m->n_layer_rs, (int64_t)(hp->ssm_conv_kernel - 1) * (int64_t)CD,
                               (int64_t)hp->ssm_n_v_heads * hp->ssm_head_k_dim * hp->ssm_head_v_dim,
                               p.n_state_snapshots};
        /* a recurrent state per sequence: the backends' conv and delta-rule ops take
           any state pointer, run once per sequence's run of a micro-batch (forward.c);
           a captured decode step holds one sequence's state pointers, and its key
           names that sequence (forward.c graph_key), so it replays for that one only */
        if (!st && p.n_seq_max > 1 && !gpu_seqs_verified(c->be))
            st = lkv_fail(LKV_ERR_UNSUPPORTED, "n_seq_max = %d: several sequences of a hybrid "
                          "model (recurrent state) are not yet verified on the %s backend; "
                          "one sequence per context there", p.n_seq_max, c->be->name);
        if (!st && !(c->rs_seq = calloc((size_t)p.n_seq_max, sizeof *c->rs_seq)))
            st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the recurrent states");
        for (int32_t s = 0; !st && s < p.n_seq_max; s++)
            st = lkv_recur_create(&c->rs_seq[s], &rc, c->be, c->b);
        if (!st) c->rs = c->rs_seq[0];
    }
#undef ALLOC
    if (!st) {
        c->logit_rows_host = p.logits_all ? p.n_batch : 1;
        c->logits = malloc(sizeof(float) * (size_t)c->logit_rows_host * c->out_width);
        if (!c->logits) st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the logits");
    }
    if (!st && m->n_layer_kv) {   /* the sliding-window layers among the KV layers */
        c->kv_local = calloc((size_t)m->n_layer_kv, 1);
        if (!c->kv_local) st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the layer table");
        for (int i = 0; !st && i < hp->n_layer; i++)
            if (m->layers[i].kv_layer >= 0) c->kv_local[m->layers[i].kv_layer] = m->layers[i].swa;
    }
    if (!st) {
        const lkv_traits *tk = lkv_type_traits(p.type_k), *tv = lkv_type_traits(p.type_v);
        lkv_kv_config kc = {
            .n_layer = m->n_layer_kv, .n_ctx = p.n_ctx, .n_ubatch = U, .chunk = p.kv_chunk,
            .type_k = p.type_k, .type_v = p.type_v,
            .row_bytes_k = lkv_type_row_bytes(tk, (int64_t)nkv),
            .row_bytes_v = lkv_type_row_bytes(tv, (int64_t)nkv),
            .pool_bytes = p.kv_pool_bytes, .local = c->kv_local, .window = hp->swa_window,
            /* a local layer's ring: its window and one decode call (kv/cache.h) */
            .ring_rows = hp->swa_window > 0 ? hp->swa_window - 1 + p.n_batch : 0,
        };
        MARK(LKV_PART_KV);
        st = lkv_kvset_create(&c->kvs, &kc, p.n_seq_max, c->be, c->b);
    }
    c->n_seq = p.n_seq_max;
    if (!st) {
        c->seq_len = calloc((size_t)c->n_seq * 3, sizeof(int32_t));
        c->want = calloc((size_t)p.n_batch, 1);
        c->groups = calloc((size_t)p.n_batch, sizeof(lkv_group));
        if (!c->seq_len || !c->want || !c->groups)
            st = lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the sequence tables");
        else {
            c->seq_start = c->seq_len + c->n_seq;
            c->active = c->seq_len + 2 * c->n_seq;
        }
    }
    MARK(LKV_PART_MTP);
    if (!st && p.mtp && p.n_seq_max > 1 && !gpu_seqs_verified(c->be))
        st = lkv_fail(LKV_ERR_UNSUPPORTED, "mtp = 1 with n_seq_max = %d: the MTP block of several "
                      "sequences is not yet verified on the %s backend; one sequence per context "
                      "there", p.n_seq_max, c->be->name);
    if (!st && p.mtp) st = lkv_mtp_create(c, &c->mtp);
    if (!st) st = lkv_moe_create(c, &c->moe);
    if (st) { lkv_context_destroy(c); return st; }

    c->geo = (lkv_attn_desc){
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .type_k = p.type_k, .type_v = p.type_v, .chunk = p.kv_chunk,
        .scale = hp->attn_scale > 0.0f ? hp->attn_scale : 1.0f / sqrtf((float)hd),
    };
    c->rope = (lkv_rope_desc){
        .head_dim = hd, .rope_dim = hp->rope_dim, .freq_base = hp->rope_freq_base,
        .freq_scale = hp->rope_freq_scale, .neox = m->arch->rope_neox,
        .freq_factors = m->rope_freqs.data ? (const float *)(m->rope_freqs.dev ? m->rope_freqs.dev
                                                                               : m->rope_freqs.data)
                                           : NULL,
    };
    *out = c;
    return LKV_OK;
}
#undef MARK

void lkv_context_destroy(lkv_context *c) {
    if (!c) return;
    lkv_mtp_free(c, c->mtp);
    lkv_moe_free(c, c->moe);
    lkv_kvset_free(c->kvs);
    free(c->kv_local);
    free(c->seq_len);
    free(c->want);
    free(c->groups);
    for (int32_t s = 0; c->rs_seq && s < c->p.n_seq_max; s++) lkv_recur_free(c->rs_seq[s]);
    free(c->rs_seq);
    lkv_ws_free(c);
    void *bufs[] = {c->logits_dev, c->logits_wide};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) c->be->free(c->b, bufs[i]);
    c->be->ctx_free(c->b);
    free(c->logits);
    lkv_chain_free(c->chain);
    free(c);
}

// ------------------------------------------------------------------ recurrent state

/* sequence seq's trunk: the largest p <= n that truncate accepts */
static int32_t seq_restore(const lkv_context *c, int32_t seq, int32_t n) {
    if (n < 0) return 0;
    if (!c->rs) {   /* a sliding-window ring cannot go back before its floor */
        const int32_t p = n < c->seq_len[seq] ? n : c->seq_len[seq];
        return p < lkv_kv_restore_floor(lkv_kvset_seq(c->kvs, seq)) ? 0 : p;
    }
    return lkv_recur_restore_point(c->rs_seq[seq], n, c->seq_len[seq]);
}

/* with the MTP block of seq on, also one where the block is in sync after the
 * truncation (mtp.h): walk the sequence's points down to one (0 at worst) */
int32_t lkv_context_seq_restore(const lkv_context *c, int32_t seq, int32_t n) {
    if (seq < 0 || seq >= c->n_seq) return 0;
    int32_t p = seq_restore(c, seq, n);
    if (!c->mtp || !lkv_mtp_is_on(c->mtp, seq)) return p;
    const int32_t rows = lkv_mtp_rows(c->mtp, seq);
    if (p > rows + 1) p = seq_restore(c, seq, rows + 1);
    while (p > 0 && !lkv_mtp_synced_at(c->mtp, seq, p)) p = seq_restore(c, seq, p - 1);
    return p;
}

int32_t lkv_context_restore(const lkv_context *c, int32_t n) {
    return lkv_context_seq_restore(c, 0, n);
}

lkv_status lkv_context_seq_keep_snapshot(lkv_context *c, int32_t seq) {
    if (seq < 0 || seq >= c->n_seq)
        return lkv_fail(LKV_ERR_INVALID_ARG, "snapshot: sequence id %d is outside [0, n_seq_max "
                        "= %d)", seq, c->n_seq);
    if (c->dead) return lkv_fail(LKV_ERR_DEAD, "the context failed earlier (device error); free it");
    if (c->mtp) lkv_mtp_snapshot(c, seq, c->seq_len[seq]);
    return c->rs ? lkv_recur_snapshot(c->rs_seq[seq], c->seq_len[seq]) : LKV_OK;
}

lkv_status lkv_context_keep_snapshot(lkv_context *c) {
    return lkv_context_seq_keep_snapshot(c, 0);
}

// ------------------------------------------------------------------ state

typedef struct {
    uint32_t magic;
    int32_t n_tokens, n_layer, type_k, type_v;   /* n_layer: attention layers */
    int64_t row_bytes_k, row_bytes_v;
    int64_t recur_bytes;                         /* recurrent state after the KV rows */
} state_header;

static lkv_status check_state_seq(const lkv_context *c, int32_t seq) {
    if (seq < 0 || seq >= c->n_seq)
        return lkv_fail(LKV_ERR_INVALID_ARG, "state: sequence id %d is outside [0, n_seq_max = %d)",
                        seq, c->n_seq);
    return LKV_OK;
}

/* seq's header (hybrids: its recurrent state after the KV rows) */
static state_header header_of(const lkv_context *c, int32_t seq) {
    const lkv_model_params *hp = &c->model->hp;
    const int64_t nkv = (int64_t)hp->n_head_kv * hp->head_dim;
    state_header h;
    memset(&h, 0, sizeof h);   /* the padding too: equal states give equal blobs */
    h.magic = STATE_MAGIC;
    h.n_tokens = c->seq_len[seq];
    h.n_layer = c->model->n_layer_kv;
    h.type_k = c->p.type_k;
    h.type_v = c->p.type_v;
    h.row_bytes_k = lkv_type_row_bytes(lkv_type_traits(c->p.type_k), nkv);
    h.row_bytes_v = lkv_type_row_bytes(lkv_type_traits(c->p.type_v), nkv);
    h.recur_bytes = c->rs ? (int64_t)lkv_recur_bytes(c->rs) : 0;
    return h;
}

static uint64_t state_bytes_for(const state_header *h) {
    return sizeof *h + (uint64_t)h->n_layer * h->n_tokens * (uint64_t)(h->row_bytes_k + h->row_bytes_v)
           + (uint64_t)h->recur_bytes;
}

lkv_status lkv_context_state_bytes(const lkv_context *c, int32_t seq, uint64_t *size) {
    LKV_TRY(check_state_seq(c, seq));
    state_header h = header_of(c, seq);
    *size = state_bytes_for(&h);
    return LKV_OK;
}

lkv_status lkv_context_state_save(lkv_context *c, int32_t seq, void *dst, uint64_t size) {
    LKV_TRY(check_state_seq(c, seq));
    state_header h = header_of(c, seq);
    if (size < state_bytes_for(&h))
        return lkv_fail(LKV_ERR_INVALID_ARG, "state buffer of %llu bytes; %llu needed",
                        (unsigned long long)size, (unsigned long long)state_bytes_for(&h));
    lkv_kv *kv = lkv_kvset_seq(c->kvs, seq);
    char *p = dst;
    memcpy(p, &h, sizeof h);
    p += sizeof h;
    for (int l = 0; l < h.n_layer && h.n_tokens; l++) {
        LKV_TRY(lkv_kv_read(kv, l, 0, 0, h.n_tokens, p));
        p += h.n_tokens * h.row_bytes_k;
        LKV_TRY(lkv_kv_read(kv, l, 1, 0, h.n_tokens, p));
        p += h.n_tokens * h.row_bytes_v;
    }
    if (c->rs) LKV_TRY(lkv_recur_read(c->rs_seq[seq], p));
    return LKV_OK;
}

/* Every check runs before sequence seq is emptied and refilled; the blob's
 * rows are position-indexed, so one saved from any sequence fits any other. */
lkv_status lkv_context_state_load(lkv_context *c, int32_t seq, const void *src, uint64_t size) {
    if (c->dead) return lkv_fail(LKV_ERR_DEAD, "the context failed earlier (device error); free it");
    LKV_TRY(check_state_seq(c, seq));
    state_header h, mine = header_of(c, seq);
    if (size < sizeof h) return lkv_fail(LKV_ERR_INVALID_ARG, "state blob too short");
    memcpy(&h, src, sizeof h);
    if (h.magic != STATE_MAGIC || h.n_layer != mine.n_layer || h.type_k != mine.type_k ||
        h.type_v != mine.type_v || h.row_bytes_k != mine.row_bytes_k ||
        h.row_bytes_v != mine.row_bytes_v || h.recur_bytes != mine.recur_bytes)
        return lkv_fail(LKV_ERR_INVALID_ARG, "state blob does not match this model/context "
                        "(layers, KV types, row sizes or recurrent state differ)");
    if (h.n_tokens < 0 || h.n_tokens > c->p.n_ctx)
        return lkv_fail(LKV_ERR_CONTEXT_FULL, "state holds %d positions; n_ctx is %d", h.n_tokens,
                        c->p.n_ctx);
    if (size != state_bytes_for(&h))
        return lkv_fail(LKV_ERR_INVALID_ARG, "state blob has %llu bytes; its header says %llu",
                        (unsigned long long)size, (unsigned long long)state_bytes_for(&h));
    LKV_TRY(lkv_context_seq_set_length(c, seq, 0));
    lkv_kv *kv = lkv_kvset_seq(c->kvs, seq);
    const char *p = (const char *)src + sizeof h;
    for (int l = 0; l < h.n_layer && h.n_tokens; l++) {
        LKV_TRY(lkv_kv_write(kv, l, 0, 0, h.n_tokens, p));
        p += h.n_tokens * h.row_bytes_k;
        LKV_TRY(lkv_kv_write(kv, l, 1, 0, h.n_tokens, p));
        p += h.n_tokens * h.row_bytes_v;
    }
    if (c->rs) LKV_TRY(lkv_recur_write(c->rs_seq[seq], p));
    c->seq_len[seq] = h.n_tokens;
    return LKV_OK;
}

lkv_status lkv_context_stats(const lkv_context *c, int32_t seq, lkv_kv_stats *out,
                             int32_t *resident) {
    if (seq < 0 || seq >= c->n_seq)
        return lkv_fail(LKV_ERR_INVALID_ARG, "kv stats: sequence id %d is outside [0, "
                        "n_seq_max = %d)", seq, c->n_seq);
    lkv_kv_get_stats(lkv_kvset_seq(c->kvs, seq), out, resident);
    if (seq == 0) out->arena_bytes = lkv_ws_arena_bytes(c);
    return LKV_OK;
}
