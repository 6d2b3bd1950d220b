/*
 * cpu/gemma.c: the elementwise ops gemma3 adds: GeGLU, a scale, and the
 * final logit softcap.
 *
 * gelu is the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
 * computed as llama.cpp's CPU backend does: from x rounded to f16, the result
 * rounded to f16 again (its table of 65536 values), 0 below -10 and x above
 * 10. That differs from the exact f32 gelu by an f16 rounding (relative
 * 2^-11), which HF transformers' comparisons absorb; agreeing with llama.cpp
 * keeps the quantized FFN input the same as its.
 */
#include <math.h>

#include "cpu/cpu.h"
#include "quant/simd.h"

static inline float gelu_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float xh = fp16_to_fp32_bits(fp32_to_fp16_bits(x));
    const float c = 0.79788456080286535587989211986876f, a = 0.044715f;
    const float g = 0.5f * xh * (1.0f + tanhf(c * xh * (1.0f + a * xh * xh)));
    return fp16_to_fp32_bits(fp32_to_fp16_bits(g));
}

void lkv_cpu_geglu(lkv_bctx *b, float *out, const float *gate, const float *up, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g >= 10.0f ? g * up[i] : gelu_f16(g) * up[i];
    }
}

void lkv_cpu_scale(lkv_bctx *b, float *x, float s, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

/* cap * tanh(x / cap), as llama.cpp's scale, tanh, scale */
void lkv_cpu_softcap(lkv_bctx *b, float *x, float cap, int64_t n) {
    (void)b;
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] * inv) * cap;
}
