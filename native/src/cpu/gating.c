/*
 * cpu/gating.c: the gates of the hybrid (qwen35) layers.
 *
 * - split_rows: a gated attention layer's q projection holds, per head, the
 *   query and then its output gate; this separates the two.
 * - sigmoid_mul: the attention output times sigmoid(gate).
 * - rmsnorm_gated: the Gated DeltaNet output, per value head, rms-normalised,
 *   scaled by the norm weight and by silu(z).
 * All three are elementwise and cheap next to the matmuls: one thread.
 */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/expf.h"

void lkv_cpu_split_rows(lkv_bctx *b, float *q, float *gate, const float *x, int n_rows, int dim) {
    (void)b;
    for (int r = 0; r < n_rows; r++) {
        memcpy(q + (size_t)r * dim, x + (size_t)2 * r * dim, sizeof(float) * dim);
        memcpy(gate + (size_t)r * dim, x + ((size_t)2 * r + 1) * dim, sizeof(float) * dim);
    }
}

void lkv_cpu_sigmoid_mul(lkv_bctx *b, float *x, const float *gate, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) x[i] *= 1.0f / (1.0f + ggml_like_expf(-gate[i]));
}

void lkv_cpu_rmsnorm_gated(lkv_bctx *b, float *out, const float *x, const lkv_weight *w,
                           const float *z, int n, int dim, float eps) {
    (void)b;
    const float *g = w->data;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim, *zi = z + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        double ss = 0.0;
        for (int k = 0; k < dim; k++) ss += (double)(xi[k] * xi[k]);
        const float scale = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int k = 0; k < dim; k++) {
            const float zk = zi[k];
            oi[k] = xi[k] * scale * g[k] * (zk / (1.0f + ggml_like_expf(-zk)));
        }
    }
}
