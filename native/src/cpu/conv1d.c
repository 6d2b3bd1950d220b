/*
 * cpu/conv1d.c: the causal depthwise convolution of a Gated DeltaNet layer,
 * with its rolling state, followed by silu.
 *
 * Channel c of token t: acc = sum_j w[c][j] * in(t - (K-1) + j), where in(p)
 * for p < 0 is row K-1+p of the state (the inputs before this micro-batch,
 * oldest first). The state then holds the last K-1 inputs of [state; x], so
 * a prompt in one micro-batch, in several, or token by token gives the same
 * values (each output is the same sum in the same order).
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/expf.h"

typedef struct {
    float *out;
    const float *x;
    const float *state;      /* (K-1, ch), read only during the job */
    const float *w;          /* (ch, K) */
    int n, ch, K;
} conv_job;

static void conv_fn(void *arg, int ith, int nth, int thread) {
    (void)thread;
    const conv_job *j = arg;
    long lo, hi;
    lkv_split(j->ch, ith, nth, &lo, &hi);
    const int K = j->K;
    for (int t = 0; t < j->n; t++) {
        for (long c = lo; c < hi; c++) {
            const float *wc = j->w + c * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const int p = t - (K - 1) + k;
                const float in = p < 0 ? j->state[(size_t)(K - 1 + p) * j->ch + c]
                                       : j->x[(size_t)p * j->ch + c];
                acc += wc[k] * in;
            }
            j->out[(size_t)t * j->ch + c] = acc / (1.0f + ggml_like_expf(-acc));
        }
    }
}

void lkv_cpu_ssm_conv(lkv_bctx *b, float *out, const float *x, float *state, const lkv_weight *w,
                      int n, int ch) {
    const int K = (int)w->cols, S = K - 1;
    conv_job j = {out, x, state, w->data, n, ch, K};
    lkv_tp_run(b->tp, conv_fn, &j);
    if (S == 0) return;
    /* new state = last S rows of [state; x] */
    const size_t row = sizeof(float) * (size_t)ch;
    if (n >= S) {
        memcpy(state, x + (size_t)(n - S) * ch, row * S);
    } else {
        memmove(state, state + (size_t)n * ch, row * (S - n));
        memcpy(state + (size_t)(S - n) * ch, x, row * n);
    }
}
