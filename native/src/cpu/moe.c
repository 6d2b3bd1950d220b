/*
 * cpu/moe.c: the mixture-of-experts ops of the CPU backend (backend.h): the
 * router's top k, and moving token rows to and from an expert's batch.
 *
 * moe_topk: per token, softmax over the router logits (in f32, max
 * subtracted, ggml's exp (cpu/expf.h) and a sum in double, as llama.cpp's
 * soft_max; cuda/moe.cu computes the same), then the k largest probabilities by selection (ties go to the
 * lower expert id, as a stable descending sort gives), optionally divided by
 * their sum (llama.cpp's and HF's norm_topk_prob), then scaled. k and
 * n_expert are small (8 of 128..512): a partial selection is cheap next to
 * one expert's matmul. All three ops are one thread.
 */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/expf.h"

void lkv_cpu_moe_topk(lkv_bctx *b, int32_t *ids, float *wts, const float *logits, int n,
                      int n_expert, int k, int norm, float scale) {
    (void)b;
    float p[LKV_MOE_MAX_EXPERTS];
    for (int r = 0; r < n; r++) {
        const float *l = logits + (size_t)r * n_expert;
        int32_t *id = ids + (size_t)r * k;
        float *w = wts + (size_t)r * k;
        float mx = l[0];
        for (int e = 1; e < n_expert; e++) mx = l[e] > mx ? l[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < n_expert; e++) sum += (p[e] = ggml_like_expf(l[e] - mx));
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < n_expert; e++) p[e] *= inv;
        float picked = 0.0f;
        for (int j = 0; j < k; j++) {   /* selection: the largest not yet taken */
            int best = -1;
            for (int e = 0; e < n_expert; e++)
                if (p[e] >= 0.0f && (best < 0 || p[e] > p[best])) best = e;
            id[j] = best;   /* -1 where the logits were not finite: moe.c refuses it */
            if (best < 0) { w[j] = 0.0f; continue; }
            w[j] = p[best];
            picked += p[best];
            p[best] = -1.0f;   /* taken */
        }
        const float f = (norm ? 1.0f / picked : 1.0f) * scale;
        for (int j = 0; j < k; j++) w[j] *= f;
    }
}

void lkv_cpu_gather_rows(lkv_bctx *b, float *out, const float *x, const int32_t *rows, int n,
                         int dim) {
    (void)b;
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * dim, x + (size_t)rows[i] * dim, sizeof(float) * dim);
}

void lkv_cpu_scatter_add_rows(lkv_bctx *b, float *out, const float *y, const int32_t *rows,
                              const float *wts, int n, int dim) {
    (void)b;
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)rows[i] * dim;
        const float *yi = y + (size_t)i * dim, w = wts[i];
        for (int k = 0; k < dim; k++) o[k] += w * yi[k];
    }
}

void lkv_cpu_zero(lkv_bctx *b, float *x, int64_t n) {
    (void)b;
    memset(x, 0, sizeof(float) * (size_t)n);
}
