/*
 * cpu/ops.c: the CPU backend's table, its per-context state and the
 * elementwise ops (embedding rows, rms norm, rope, swiglu, adds, KV row
 * conversion). The heavy ops live in matmul.c and attention.c.
 *
 * The CPU backend computes in host memory, so alloc is an aligned malloc and
 * the copy ops are memcpy. It is the reference the other backends are tested
 * against.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/expf.h"
#include "error.h"
#include "quant/simd.h"
#include "quant/types.h"

// ------------------------------------------------------------------ model / context

static lkv_status cpu_model_init(struct lkv_model *m) { (void)m; return LKV_OK; }
static void cpu_model_free(struct lkv_model *m) { (void)m; }

static void *cpu_alloc(lkv_bctx *b, size_t bytes) {
    (void)b;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64) != 0) return NULL;
    return p;
}

static void cpu_free(lkv_bctx *b, void *p) { (void)b; free(p); }

static void cpu_ctx_free(lkv_bctx *b) {
    if (!b) return;
    lkv_cpu_copier_free(b->copier);
    lkv_tp_free(b->tp);
    for (int i = 0; i < 3; i++) free(b->act_q[i]);
    free(b->attn_scratch);
    free(b->gemm_scratch);
    free(b->delta_scratch);
    free(b);
}

static lkv_status cpu_ctx_init(lkv_bctx **out, const struct lkv_model *m, int n_threads,
                               int max_tokens) {
    lkv_bctx *b = calloc(1, sizeof *b);
    if (!b) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the CPU backend state");
    b->model = m;
    b->n_threads = n_threads;
    b->max_tokens = max_tokens;
    /* converted activations: the widest input is max(n_embd, n_ff, n_head*hd) f32 values */
    const lkv_model_params *hp = &m->hp;
    int64_t cols = hp->n_embd;
    if (hp->n_ff > cols) cols = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim > cols) cols = (int64_t)hp->n_head * hp->head_dim;
    if ((int64_t)hp->ssm_n_v_heads * hp->ssm_head_v_dim > cols)   /* hybrids: ssm_out's input */
        cols = (int64_t)hp->ssm_n_v_heads * hp->ssm_head_v_dim;
    b->act_q_bytes = (size_t)max_tokens * (size_t)(cols * 4 + 256);
    b->attn_scratch_floats = lkv_cpu_attn_scratch_floats(hp->head_dim, LKV_CPU_MAX_CHUNK);
    for (int i = 0; i < 3; i++) b->act_q[i] = cpu_alloc(b, b->act_q_bytes);
    b->attn_scratch = cpu_alloc(b, sizeof(float) * b->attn_scratch_floats * (size_t)n_threads);
    b->gemm_scratch_bytes = lkv_gemm_scratch_bytes(cols);
    b->gemm_scratch = cpu_alloc(b, b->gemm_scratch_bytes * (size_t)n_threads);
    b->tp = lkv_tp_create(n_threads);
    const bool hybrid = m->arch && m->arch->hybrid;   /* the kernel harnesses bind no arch */
    if (hybrid) {
        b->delta_scratch_floats = lkv_cpu_delta_scratch_floats(hp->ssm_head_k_dim, hp->ssm_head_v_dim);
        b->delta_scratch = cpu_alloc(b, sizeof(float) * b->delta_scratch_floats * (size_t)n_threads);
    }
    if (!b->act_q[0] || !b->act_q[1] || !b->act_q[2] || !b->attn_scratch || !b->gemm_scratch || !b->tp ||
        (hybrid && !b->delta_scratch)) {
        cpu_ctx_free(b);
        return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the CPU backend's buffers "
                        "(%d threads, %d tokens)", n_threads, max_tokens);
    }
    *out = b;
    return LKV_OK;
}

// ------------------------------------------------------------------ elementwise

static void cpu_get_rows(lkv_bctx *b, float *out, const lkv_weight *w, const int32_t *tokens,
                         int n) {
    (void)b;
    const lkv_traits *t = lkv_type_traits(w->type);
    for (int i = 0; i < n; i++)
        t->to_float((const char *)w->data + (size_t)tokens[i] * w->row_bytes,
                    out + (size_t)i * w->cols, w->cols);
}

static void cpu_rmsnorm(lkv_bctx *b, float *out, const float *x, const lkv_weight *w, int n,
                        int dim, float eps) {
    (void)b;
    const float *g = w ? (const float *)w->data : NULL;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        double ss = 0.0;
        for (int k = 0; k < dim; k++) ss += (double)(xi[k] * xi[k]);   /* f32 square, f64 sum (ggml) */
        const float scale = 1.0f / sqrtf((float)(ss / dim) + eps);
        if (g) for (int k = 0; k < dim; k++) oi[k] = xi[k] * scale * g[k];
        else for (int k = 0; k < dim; k++) oi[k] = xi[k] * scale;
    }
}

static void cpu_add_bias(lkv_bctx *b, float *x, const lkv_weight *bias, int n, int dim) {
    (void)b;
    const float *bb = bias->data;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < dim; k++) x[(size_t)i * dim + k] += bb[k];
}

/* theta_i = pos * freq_scale * base^(-2i/rope_dim) / factor_i, the power
 * built up by repeated multiplication in float as ggml does; cos and sin by
 * the C library (the CUDA backend takes its angles from here too: glibc's
 * cosf/sinf are not always the correctly rounded value) */
void lkv_rope_angles(const lkv_rope_desc *r, const float *ff, int32_t pos, float *cs) {
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->rope_dim);
    float theta = (float)pos;
    for (int i = 0; i < r->rope_dim / 2; i++) {
        const float f = ff ? ff[i] : 1.0f;
        const float th = theta * r->freq_scale / f;
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
        theta *= theta_scale;
    }
}

static void cpu_rope(lkv_bctx *b, float *x, int n, int32_t pos0, const lkv_rope_desc *r) {
    (void)b;
    const int half = r->rope_dim / 2;
    float cs[2 * 512];
    for (int t = 0; t < n; t++) {
        lkv_rope_angles(r, r->freq_factors, pos0 + t, cs);
        for (int h = 0; h < r->n_head; h++) {
            float *v = x + ((size_t)t * r->n_head + h) * r->head_dim;
            for (int i = 0; i < half; i++) {
                const int i0 = r->neox ? i : 2 * i, i1 = r->neox ? i + half : 2 * i + 1;
                /* llama.cpp's compiled rotation: the first product fused with
                 * the second (GCC contracts it so, and vectorizes it as a
                 * complex multiply with fmaddsub): written out, so that no
                 * compiler choice can change it */
                const float a = v[i0], c = v[i1];
                v[i0] = fmaf(a, cs[2 * i], -(c * cs[2 * i + 1]));
                v[i1] = fmaf(a, cs[2 * i + 1], c * cs[2 * i]);
            }
        }
    }
}

/* silu(g) * up with silu(g) = g / (1 + exp(-g)), the exp as above (llama.cpp's
 * CPU swiglu computes the same values, so quantization downstream agrees) */
LKV_ISA_CLONES static void cpu_swiglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + ggml_like_expf(0.0f - g)) * up[i];
    }
}

static void cpu_add(lkv_bctx *b, float *x, const float *y, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_to_type(lkv_bctx *b, void *dst, int32_t type, const float *src, int n_rows,
                        int n_elems) {
    (void)b;
    const lkv_traits *t = lkv_type_traits(type);
    const size_t rb = (size_t)lkv_type_row_bytes(t, n_elems);
    for (int i = 0; i < n_rows; i++)
        t->from_float(src + (size_t)i * n_elems, (char *)dst + i * rb, n_elems);
}

// ------------------------------------------------------------------ movement

static void cpu_copy(lkv_bctx *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memcpy(dst, src, bytes);
}

static lkv_status cpu_sync(lkv_bctx *b) { (void)b; return LKV_OK; }

static uint64_t cpu_compute_mark(lkv_bctx *b) { (void)b; return 0; }
static void cpu_copy_wait_compute(lkv_bctx *b, uint64_t t) { (void)b; (void)t; }

const lkv_backend lkv_backend_cpu = {
    .name = "cpu",
    .model_init = cpu_model_init,
    .model_free = cpu_model_free,
    .ctx_init = cpu_ctx_init,
    .ctx_free = cpu_ctx_free,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .matmul = lkv_cpu_matmul,
    .add_bias = cpu_add_bias,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .to_type = cpu_to_type,
    .attn_state_bytes = lkv_cpu_attn_state_bytes,
    .attn_reset = lkv_cpu_attn_reset,
    .attn_accum = lkv_cpu_attn_accum,
    .attn_finish = lkv_cpu_attn_finish,
    .download = cpu_copy,
    .upload = cpu_copy,
    .copy_d2d = cpu_copy,
    .sync = cpu_sync,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .copier_init = lkv_cpu_copier_init,
    .copy_async = lkv_cpu_copy_async,
    .compute_wait_copy = lkv_cpu_compute_wait_copy,
    .compute_mark = cpu_compute_mark,
    .copy_wait_compute = cpu_copy_wait_compute,
    .copy_sync = lkv_cpu_copy_sync,
    .copy_async_2d = lkv_cpu_copy_async_2d,
    .split_rows = lkv_cpu_split_rows,
    .sigmoid_mul = lkv_cpu_sigmoid_mul,
    .rmsnorm_gated = lkv_cpu_rmsnorm_gated,
    .ssm_conv = lkv_cpu_ssm_conv,
    .delta_rule = lkv_cpu_delta_rule,
    .geglu = lkv_cpu_geglu,
    .scale = lkv_cpu_scale,
    .softcap = lkv_cpu_softcap,
    .moe_topk = lkv_cpu_moe_topk,
    .gather_rows = lkv_cpu_gather_rows,
    .scatter_add_rows = lkv_cpu_scatter_add_rows,
    .zero = lkv_cpu_zero,
};
