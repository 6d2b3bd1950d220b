/*
 * api.c: every exported lkv_* symbol. Each entry point validates its
 * arguments, clears the thread's error, calls into the core and returns the
 * status; the message for a failure is set where the failure is found.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llamakv.h"
#include "error.h"
#include "quant/types.h"
#include "quant/isa.h"
#include "model_api.h"
#include "context.h"
#include "kv/plan.h"
#include "sample_chain.h"

#define API LKV_API

// ---------------------------------------------------------------- version

API int32_t lkv_abi_version(void) { return LKV_ABI_VERSION; }

API const char *lkv_last_error(void) { return lkv_error_message(); }

API const char *lkv_version(void) { return LKV_VERSION; }   /* meson.build: project version */

#ifdef LKV_HAVE_CUDA
#define CUDA_FEATURE "cuda "
#else
#define CUDA_FEATURE ""
#endif

API const char *lkv_build_features(void) {
    switch (lkv_quant_isa()) {
    case LKV_ISA_AVX512: return "isa:avx512-vnni " CUDA_FEATURE "cpu";
    case LKV_ISA_AVX2: return "isa:avx2 " CUDA_FEATURE "cpu";
    default: return "isa:portable " CUDA_FEATURE "cpu";
    }
}

// ---------------------------------------------------------------- types

static lkv_status get_traits(int32_t type, const lkv_traits **out) {
    const lkv_traits *t = lkv_type_traits(type);
    if (!t) return lkv_fail(LKV_ERR_UNSUPPORTED, "unsupported element type id %d", (int)type);
    *out = t;
    return LKV_OK;
}

static lkv_status check_n(const lkv_traits *t, int64_t n) {
    if (n < 0 || n % t->block_size)
        return lkv_fail(LKV_ERR_INVALID_ARG, "%lld elements is not a multiple of %s's block of %d",
                        (long long)n, t->name, (int)t->block_size);
    return LKV_OK;
}

API lkv_status lkv_type_info_get(int32_t type, lkv_type_info *out) {
    const lkv_traits *t = NULL;
    if (!out) return lkv_fail(LKV_ERR_INVALID_ARG, "out is NULL");
    LKV_TRY(get_traits(type, &t));
    out->name = t->name;
    out->block_size = t->block_size;
    out->type_size = t->type_size;
    out->is_weight_type = t->is_weight;
    out->is_kv_type = t->is_kv;
    return LKV_OK;
}

API int64_t lkv_row_bytes(int32_t type, int64_t n) {
    const lkv_traits *t = lkv_type_traits(type);
    if (!t || n < 0 || n % t->block_size) return -1;
    return lkv_type_row_bytes(t, n);
}

API lkv_status lkv_dequantize(int32_t type, const void *src, float *dst, int64_t n) {
    const lkv_traits *t = NULL;
    LKV_TRY(get_traits(type, &t));
    LKV_TRY(check_n(t, n));
    if (!src || !dst) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL buffer");
    t->to_float(src, dst, n);
    return LKV_OK;
}

API lkv_status lkv_quantize(int32_t type, const float *src, void *dst, int64_t n) {
    const lkv_traits *t = NULL;
    LKV_TRY(get_traits(type, &t));
    LKV_TRY(check_n(t, n));
    if (!src || !dst) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL buffer");
    if (!t->from_float) return lkv_fail(LKV_ERR_UNSUPPORTED, "%s cannot be quantized here", t->name);
    t->from_float(src, dst, n);
    return LKV_OK;
}

API lkv_status lkv_vec_dot(int32_t type, int64_t n, const void *x, const float *y, float *out) {
    const lkv_traits *t = NULL, *vt = NULL;
    LKV_TRY(get_traits(type, &t));
    LKV_TRY(check_n(t, n));
    if (!x || !y || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL buffer");
    if (!t->vec_dot) return lkv_fail(LKV_ERR_UNSUPPORTED, "%s has no dot product", t->name);
    LKV_TRY(get_traits(t->vec_dot_type, &vt));
    LKV_TRY(check_n(vt, n));
    void *yq = malloc((size_t)lkv_type_row_bytes(vt, n) + 64);
    if (!yq) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for %lld elements", (long long)n);
    vt->from_float(y, yq, n);
    t->vec_dot((int)n, out, x, yq);
    free(yq);
    return LKV_OK;
}

API int32_t lkv_quant_force_portable(int32_t portable) {
    static int forced;  /* a test switch, see llamakv.h */
    const int prev = forced;
    forced = portable != 0;
    lkv_quant_set_isa(forced ? LKV_ISA_PORTABLE : -1);
    return prev;
}

API int32_t lkv_cpu_isa(void) { return lkv_quant_isa(); }

API int32_t lkv_cpu_isa_set(int32_t level) { return lkv_quant_set_isa(level); }

// ---------------------------------------------------------------- devices

#ifndef LKV_HAVE_CUDA
API int32_t lkv_cuda_device_count(void) { return 0; }

API lkv_status lkv_cuda_mem_info(int64_t *free_bytes, int64_t *total_bytes) {
    (void)free_bytes; (void)total_bytes;
    return lkv_fail(LKV_ERR_UNSUPPORTED, "this build of pyllamakv has no CUDA backend");
}
#endif

// ---------------------------------------------------------------- model

API void lkv_model_params_init(lkv_model_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->arch = LKV_ARCH_LLAMA;
    p->rms_eps = 1e-5f;
    p->rope_freq_base = 10000.0f;
    p->rope_freq_scale = 1.0f;
    p->device = LKV_DEVICE_CPU;
}

API lkv_status lkv_model_create(const lkv_model_params *p, const lkv_tensor_desc *tensors,
                                int32_t n_tensors, lkv_model **out) {
    lkv_clear_error();
    if (!p || !out || (n_tensors > 0 && !tensors) || n_tensors < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_model_create: NULL argument or negative count");
    *out = NULL;
    return lkv_model_build(p, tensors, n_tensors, out);
}

API void lkv_model_free(lkv_model *m) { lkv_model_destroy(m); }

API int64_t lkv_model_weight_bytes(const lkv_model *m) { return m ? m->weight_bytes : 0; }

API int32_t lkv_model_n_layer_kv(const lkv_model *m) { return m ? m->n_layer_kv : 0; }

API int32_t lkv_model_n_nextn(const lkv_model *m) { return m ? m->hp.n_nextn : 0; }

// ---------------------------------------------------------------- context

API void lkv_context_params_init(lkv_context_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->n_ctx = 4096;
    p->n_batch = 512;
    p->n_ubatch = 512;
    p->type_k = LKV_TYPE_F16;
    p->type_v = LKV_TYPE_F16;
    p->kv_pool_bytes = -1;
    p->n_state_snapshots = 2;
    p->gpu_kernels = 1;
    p->n_seq_max = 1;
    p->phase_arena = -1;
}

API lkv_status lkv_context_create(lkv_model *m, const lkv_context_params *p, lkv_context **out) {
    lkv_clear_error();
    if (!m || !p || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_create: NULL argument");
    *out = NULL;
    return lkv_context_build(m, p, out);
}

API void lkv_context_free(lkv_context *c) { lkv_context_destroy(c); }

API lkv_status lkv_memory_plan_compute(const lkv_model_params *mp, const lkv_tensor_desc *tensors,
                                       int32_t n_tensors, const lkv_context_params *p,
                                       lkv_memory_plan *out) {
    lkv_clear_error();
    if (!mp || !p || !out || (n_tensors > 0 && !tensors) || n_tensors < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_memory_plan_compute: NULL argument or "
                        "negative count");
    return lkv_memplan_run(mp, tensors, n_tensors, p, out);
}

API lkv_status lkv_decode(lkv_context *c, const int32_t *tokens, int32_t n, int32_t pos0) {
    lkv_clear_error();
    if (!c || (!tokens && n > 0)) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_decode: NULL argument");
    return lkv_context_decode(c, tokens, n, pos0, 0);
}

API lkv_status lkv_decode_ex(lkv_context *c, const int32_t *tokens, int32_t n, int32_t pos0,
                             int32_t n_logits) {
    lkv_clear_error();
    if (!c || (!tokens && n > 0)) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_decode_ex: NULL argument");
    return lkv_context_decode(c, tokens, n, pos0, n_logits);
}

API lkv_status lkv_decode_batch(lkv_context *c, const int32_t *tokens, const int32_t *seq_ids,
                                const int8_t *want_logits, int32_t n) {
    lkv_clear_error();
    if (!c || (!tokens && n > 0))
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_decode_batch: NULL argument");
    return lkv_context_decode_seqs(c, tokens, seq_ids, want_logits, n);
}

API int32_t lkv_context_n_seq_max(const lkv_context *c) { return c ? c->n_seq : 0; }

API int32_t lkv_context_seq_n_tokens(const lkv_context *c, int32_t seq) {
    return c && seq >= 0 && seq < c->n_seq ? c->seq_len[seq] : -1;
}

API lkv_status lkv_context_seq_truncate(lkv_context *c, int32_t seq, int32_t n) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_truncate: NULL context");
    return lkv_context_seq_set_length(c, seq, n);
}

API lkv_status lkv_context_seq_copy(lkv_context *c, int32_t src, int32_t dst, int32_t n) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_copy: NULL context");
    return lkv_context_copy_seq(c, src, dst, n);
}

API lkv_status lkv_context_set_abort(lkv_context *c, int32_t abort) {
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_set_abort: NULL context");
    atomic_store(&c->abort, abort != 0);
    return LKV_OK;
}

API lkv_status lkv_context_mtp_draft(lkv_context *c, int32_t token, int32_t n_draft,
                                     int32_t *drafts, float *logits_out, int32_t *n_out) {
    lkv_clear_error();
    if (!c || !drafts || !n_out)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_mtp_draft: NULL argument");
    return lkv_context_draft_mtp(c, 0, token, n_draft, drafts, logits_out, n_out);
}

API lkv_status lkv_context_seq_mtp_draft(lkv_context *c, int32_t seq, int32_t token,
                                         int32_t n_draft, int32_t *drafts, float *logits_out,
                                         int32_t *n_out) {
    lkv_clear_error();
    if (!c || !drafts || !n_out)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_mtp_draft: NULL argument");
    return lkv_context_draft_mtp(c, seq, token, n_draft, drafts, logits_out, n_out);
}

API void lkv_generate_params_init(lkv_generate_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->n_max = 1;
    p->top_p = 1.0;
    p->typical_p = 1.0;
    p->repeat_penalty = 1.0;
    p->repeat_last_n = 64;
}

API lkv_status lkv_generate(lkv_context *c, int32_t token, const lkv_generate_params *p, int32_t *out,
                            int32_t *n_out) {
    lkv_clear_error();
    if (n_out) *n_out = 0;
    if (!c || !p || !out || !n_out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_generate: NULL argument");
    return lkv_context_generate(c, token, p, out, n_out);
}

API lkv_status lkv_sample(const float *logits, int32_t n_vocab, const lkv_generate_params *p, int32_t *token,
                          int32_t *drew) {
    lkv_clear_error();
    if (!logits || !p || !token || !drew) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_sample: NULL argument");
    *token = -1;
    *drew = 0;
    if (n_vocab < 1) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_sample: n_vocab = %d (at least 1)", n_vocab);
    if (p->n_bias < 0 || (p->n_bias && (!p->bias_ids || !p->bias)))
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_sample: bias: bad count or NULL array");
    for (int32_t j = 0; j < p->n_bias; j++)
        if (p->bias_ids[j] < 0 || p->bias_ids[j] >= n_vocab || isnan(p->bias[j]) || p->bias[j] == INFINITY)
            return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_sample: bias of id %d: %g", p->bias_ids[j], p->bias[j]);
    for (int32_t j = 0; j < p->n_bias; j++)
        for (int32_t k = 0; k < j; k++)
            if (p->bias_ids[k] == p->bias_ids[j])
                return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_sample: bias id %d given twice", p->bias_ids[j]);
    LKV_TRY(lkv_chain_check(p, n_vocab));
    lkv_chain *ch = lkv_chain_new(n_vocab);
    if (!ch) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "lkv_sample: no memory for %d candidates", n_vocab);
    bool d = false;
    *token = lkv_chain_pick(ch, logits, p, p->history, p->n_history, &d);
    *drew = d;
    lkv_chain_free(ch);
    return LKV_OK;
}

API lkv_status lkv_context_set_mtp(lkv_context *c, int32_t on) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_set_mtp: NULL context");
    return lkv_context_switch_mtp(c, -1, on);
}

API lkv_status lkv_context_seq_set_mtp(lkv_context *c, int32_t seq, int32_t on) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_set_mtp: NULL context");
    if (seq < 0)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_set_mtp: sequence id %d is "
                        "negative (lkv_context_set_mtp switches every sequence)", seq);
    return lkv_context_switch_mtp(c, seq, on);
}

API lkv_status lkv_context_mtp_stats(const lkv_context *c, lkv_mtp_stats *out) {
    lkv_clear_error();
    if (!c || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_mtp_stats: NULL argument");
    return lkv_context_get_mtp_stats(c, 0, out);
}

API lkv_status lkv_context_seq_mtp_stats(const lkv_context *c, int32_t seq, lkv_mtp_stats *out) {
    lkv_clear_error();
    if (!c || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_mtp_stats: NULL argument");
    return lkv_context_get_mtp_stats(c, seq, out);
}

API const float *lkv_context_logits(const lkv_context *c, int32_t *n_rows) {
    if (n_rows) *n_rows = c ? c->n_logit_rows : 0;
    return c ? c->logits : NULL;
}

API int32_t lkv_context_n_tokens(const lkv_context *c) { return c ? c->seq_len[0] : 0; }

API int32_t lkv_context_n_ctx(const lkv_context *c) { return c ? c->p.n_ctx : 0; }

API lkv_status lkv_context_truncate(lkv_context *c, int32_t n) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_truncate: NULL context");
    return lkv_context_set_length(c, n);
}

API int32_t lkv_context_restore_point(const lkv_context *c, int32_t n) {
    return c ? lkv_context_restore(c, n) : 0;
}

API lkv_status lkv_context_snapshot(lkv_context *c) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_snapshot: NULL context");
    return lkv_context_keep_snapshot(c);
}

API int32_t lkv_context_seq_restore_point(const lkv_context *c, int32_t seq, int32_t n) {
    return c ? lkv_context_seq_restore(c, seq, n) : 0;
}

API lkv_status lkv_context_seq_snapshot(lkv_context *c, int32_t seq) {
    lkv_clear_error();
    if (!c) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_snapshot: NULL context");
    return lkv_context_seq_keep_snapshot(c, seq);
}

API int64_t lkv_context_recurrent_bytes(const lkv_context *c) {
    return c && c->rs ? (int64_t)lkv_recur_bytes(c->rs) : 0;
}

API lkv_status lkv_context_state_size(const lkv_context *c, uint64_t *size) {
    lkv_clear_error();
    if (!c || !size) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_state_size: NULL argument");
    return lkv_context_state_bytes(c, 0, size);
}

API lkv_status lkv_context_state_get(lkv_context *c, void *dst, uint64_t size) {
    lkv_clear_error();
    if (!c || !dst) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_state_get: NULL argument");
    return lkv_context_state_save(c, 0, dst, size);
}

API lkv_status lkv_context_state_set(lkv_context *c, const void *src, uint64_t size) {
    lkv_clear_error();
    if (!c || !src) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_state_set: NULL argument");
    return lkv_context_state_load(c, 0, src, size);
}

API lkv_status lkv_context_seq_state_size(const lkv_context *c, int32_t seq, uint64_t *size) {
    lkv_clear_error();
    if (!c || !size)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_state_size: NULL argument");
    return lkv_context_state_bytes(c, seq, size);
}

API lkv_status lkv_context_seq_state_get(lkv_context *c, int32_t seq, void *dst, uint64_t size) {
    lkv_clear_error();
    if (!c || !dst)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_state_get: NULL argument");
    return lkv_context_state_save(c, seq, dst, size);
}

API lkv_status lkv_context_seq_state_set(lkv_context *c, int32_t seq, const void *src,
                                         uint64_t size) {
    lkv_clear_error();
    if (!c || !src)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_state_set: NULL argument");
    return lkv_context_state_load(c, seq, src, size);
}

// ---------------------------------------------------------------- plan and stats

API lkv_status lkv_plan_compute(const lkv_plan_params *p, int32_t n_tokens, lkv_plan *out,
                                int32_t *resident) {
    lkv_clear_error();
    if (!p || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_plan_compute: NULL argument");
    return lkv_plan_make(p, n_tokens, out, resident);
}

API lkv_status lkv_context_kv_stats(const lkv_context *c, lkv_kv_stats *out, int32_t *resident) {
    lkv_clear_error();
    if (!c || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_kv_stats: NULL argument");
    return lkv_context_stats(c, 0, out, resident);
}

API lkv_status lkv_context_seq_kv_stats(const lkv_context *c, int32_t seq, lkv_kv_stats *out,
                                        int32_t *resident) {
    lkv_clear_error();
    if (!c || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_context_seq_kv_stats: NULL argument");
    return lkv_context_stats(c, seq, out, resident);
}

API lkv_status lkv_plan_pool_shares(int64_t pool_bytes, int32_t n_seq, const int32_t *active,
                                    int64_t min_share, int64_t *offset, int64_t *bytes) {
    lkv_clear_error();
    if (!active || !offset || !bytes)
        return lkv_fail(LKV_ERR_INVALID_ARG, "lkv_plan_pool_shares: NULL argument");
    return lkv_plan_shares(pool_bytes, n_seq, active, min_share, offset, bytes);
}
