/*
 * Host emulation of one block of attn_dec_ring2.cu (LKV_CUDA_ATTN=ring2)
 * against a transcription of attn_dec_ring.cu's per-thread code for q8_0 K
 * and V: both run thread by thread over the same ring schedule (issue stage
 * s + NS - 1, then compute stage s), the softmax and the final reduce8 of
 * the 8 position lanes are one shared host function, so what is compared is
 * the copies (the staged bytes), the scores and the V pass. Checks the
 * chunk partial (m, l, o) bit for bit, for G 1, 2, 3, 4, 8, head_dim 64 and
 * 128, chunk 256 full and partial (and 64), rows in no segment, KV head 0
 * and 1 of a row (slice offset 0 / 136 or 68).
 *
 * Build and run (from the repository root; no GPU needed):
 *   nvcc -std=c++17 -O2 --fmad=false -DLKV_HAVE_CUDA=1 -Inative/include \
 *     -Inative/src -Inative/src/cuda tests/cuda/emu_attn_ring.cu -o /tmp/emu_ring && /tmp/emu_ring
 * RING2_SRC may name another copy of attn_dec_ring2.cu (mutation tests:
 *   -DRING2_SRC='"/tmp/mut/attn_dec_ring2.cu"').
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define LKV_ATTN_RING2_EMU 1
#ifndef RING2_SRC
#define RING2_SRC "attn_dec_ring2.cu"
#endif
#include RING2_SRC

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static float hround(float x) { return __half2float(__float2half_rn(x)); }

/* attn_chunk_softmax's operations (shared by both sides): m, w = exp(s - m),
 * l = f64 sum over groups of 8 of reduce8(w), p = w * (float)(1 / l) */
static float red8(const float *a) {   /* attn_reduce8 / attn_reduce8_shfl at lane 0 */
    const float t0 = tw_add(a[4], a[0]), t1 = tw_add(a[5], a[1]), t2 = tw_add(a[6], a[2]), t3 = tw_add(a[7], a[3]);
    return tw_add(tw_add(t0, t2), tw_add(t1, t3));
}
static float softmax(float *s, int stride, int n, float *l) {
    float mx = -INFINITY;
    for (int r = 0; r < n; r++) mx = fmaxf(mx, s[r * stride]);
    double sum = 0.0;
    for (int g0 = 0; g0 < n; g0 += 8) {
        float w[8];
        for (int i = 0; i < 8; i++) {
            const int r = g0 + i;
            w[i] = 0.f;
            if (r < n) {
                const float v = s[r * stride];
                w[i] = v == -INFINITY ? 0.f : expf(tw_sub(v, mx));
                s[r * stride] = w[i];
            }
        }
        sum += (double)red8(w);
    }
    const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.f;
    for (int r = 0; r < n; r++) s[r * stride] = tw_mul(s[r * stride], inv);
    *l = (float)sum;
    return mx;
}

// ---------------------------------------------------------------- attn_dec_ring.cu, transcribed (q8_0)

template <int HD, int G>
struct old_shape {   /* rg_shape<LKV_TYPE_Q8_0, HD, G> */
    static constexpr int NT = (G == 8 && HD == 128) ? 256 : 128;
    static constexpr int R = G >= 3 ? 32 : 64;
    static constexpr int GB = 34, NG = HD / 32;
    static constexpr int SLICE = HD / 32 * GB;
    static constexpr int CU = SLICE % 16 == 0 ? 16 : SLICE % 8 == 0 ? 8 : 4;
    static constexpr int U = SLICE / CU;
    static constexpr int PITCH = ((SLICE + 15) & ~15) % 32 == 0 ? ((SLICE + 15) & ~15) + 16 : ((SLICE + 15) & ~15);
    static constexpr int SLOT = R * PITCH;
    static constexpr int ND = HD * 8 / NT;
};

template <int HD, int G>
static void old_copy(int t, uint8_t *slot, const uint8_t *const *ptr, size_t off, int r0, int r1) {
    using S = old_shape<HD, G>;
    constexpr int RP = S::NT / S::U;
    const int u = t % S::U;
    if (t >= RP * S::U) return;
    for (int r = r0 + t / S::U; r < r1; r += RP) {
        const uint8_t *src = ptr[r];
        uint8_t *dst = slot + (r - r0) * S::PITCH + u * S::CU;
        if (src) memcpy(dst, src + off + u * S::CU, S::CU);
        else for (int i = 0; i < S::CU; i += 4) *(uint32_t *)(dst + i) = 0;
    }
}

/* kblock<Q8_0> over ad_fetch: 10 words from the block's 8-byte aligned start */
static float old_kblock(const uint8_t *row, int j, uint32_t *kw) {
    const int base = 34 * j, a0 = base & ~7, o = base - a0;
    uint32_t w[10];
    for (int i = 0; i < 10; i++) w[i] = tw_ld32(row + a0 + 4 * i);
    auto f = [&](int b) { const int x = o + b; return (x & 2) ? tw_fsr(w[x >> 2], w[(x >> 2) + 1], 16) : w[x >> 2]; };
    const uint32_t h0 = f(0);
    for (int l = 0; l < 8; l++) kw[l] = f(2 + 4 * l);
    return tw_hlo(h0);
}

template <int HD, int G>
static void old_scores(int tid, const uint8_t *slot, const int8_t *qs, const float *qdm, const uint8_t *valid,
                       float scale, float *ps, int C, int r0, int r1) {
    using S = old_shape<HD, G>;
    for (int t = tid; t < (r1 - r0) * G; t += S::NT) {
        const int rl = t / G, g = t - rl * G, r = r0 + rl;
        const uint8_t *row = slot + rl * S::PITCH;
        float lanes[8] = {0};
        for (int j = 0; j < S::NG; j++) {
            uint32_t kw[8], qw[8];
            const float dkq = tw_mul(old_kblock(row, j, kw), qdm[g * S::NG + j]);
            memcpy(qw, qs + g * HD + 32 * j, 32);
            for (int l = 0; l < 8; l++) {
                const float dot = tw_sub(tw_i2f_bits(tw_dp4a_ss(kw[l], qw[l], 0x4B400000)), 12582912.f);
                lanes[l] = tw_fma(dkq, dot, lanes[l]);
            }
        }
        ps[g * C + r] = valid[r] ? tw_mul(red8(lanes), scale) : -INFINITY;
    }
}

static uint32_t old_lds4_2(const uint8_t *p) {   /* 4 bytes at a 2-byte aligned address */
    const uintptr_t a = (uintptr_t)p;
    const uint8_t *w = (const uint8_t *)(a & ~(uintptr_t)3);
    return (a & 2) ? tw_fsr(tw_ld32(w), tw_ld32(w + 4), 16) : tw_ld32(w);
}

template <int HD, int G>
static void old_vpass(int tid, const uint8_t *slot, const float *ps, int C, int r0, int r1,
                      float (&o)[G][old_shape<HD, G>::ND]) {
    using S = old_shape<HD, G>;
    constexpr int ND = S::ND;
    const int l8 = tid & 7, dg = tid >> 3;
    for (int r = r0 + l8; r < r1; r += 8) {
        const uint8_t *row = slot + (r - r0) * S::PITCH;
        const int k0 = dg * ND;
        const uint8_t *gb = row + 34 * (k0 >> 5);
        const int e = k0 & 31;
        const float d = tw_h(gb);
        const float nd = tw_mul(-32896.f, d);
        float v[ND];
        for (int i = 0; i < ND; i += 4) {
            const uint32_t w = old_lds4_2(gb + 2 + e + i) ^ 0x80808080u;
            for (int b = 0; b < 4; b++) v[i + b] = tw_fma(r2_f(w, b), d, nd);
        }
        for (int g = 0; g < G; g++) {
            const float p = ps[g * C + r];
            for (int i = 0; i < ND; i++) o[g][i] = tw_fma(v[i], p, o[g][i]);
        }
    }
}

// ---------------------------------------------------------------- one block, both ways

struct result { float m[8], l[8], o[8][128]; };

template <int HD, int G>
static int run(int C, int nv, int kh, int nullrows, bool verbose) {
    using S = r2_shape<HD, G>;
    using O = old_shape<HD, G>;
    static_assert(S::NT == O::NT && S::R == O::R && S::PITCH == O::PITCH && S::ND == O::ND, "same roles");
    constexpr int NT = S::NT, R = S::R, NKV = 2, ND = S::ND;
    const int rb = NKV * S::SLICE;   /* row bytes: 2 KV heads */
    /* K, V rows: random scales (f16, some tiny / large), random codes incl. -128 */
    uint8_t *kd = (uint8_t *)calloc((size_t)C * rb + 64, 1), *vd = (uint8_t *)calloc((size_t)C * rb + 64, 1);
    for (uint8_t *pl : {kd, vd})
        for (int r = 0; r < C; r++)
            for (int b = 0; b < rb / 34; b++) {
                uint8_t *blk = pl + (size_t)r * rb + 34 * b;
                const float sc = (rnd32() % 64 == 0) ? 1e-6f : ldexpf((float)(rnd32() % 1000 + 1) / 1000.f, (int)(rnd32() % 8) - 10);
                const __half h = __float2half_rn(sc);
                memcpy(blk, &h, 2);
                for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(rnd32() % 7 == 0 ? 0x80 : rnd32());
            }
    const uint8_t **kptr = (const uint8_t **)calloc(C, sizeof(void *)), **vptr = (const uint8_t **)calloc(C, sizeof(void *));
    uint8_t *valid = (uint8_t *)calloc(C, 1);
    for (int r = 0; r < nv; r++) {
        const bool in = !(nullrows && (r % 37 == 5 || r == nv - 1));
        valid[r] = in;
        kptr[r] = in ? kd + (size_t)r * rb : NULL;
        vptr[r] = in ? vd + (size_t)r * rb : NULL;
    }
    int8_t *qs = (int8_t *)malloc(G * HD);
    float qdm[32];
    for (int i = 0; i < G * HD; i++) qs[i] = (int8_t)((int)(rnd32() % 255) - 127);
    /* the same codes with ring2's row pitch (S::QP bytes per head) */
    int8_t *qs2 = (int8_t *)calloc(G * S::QP, 1);
    for (int g = 0; g < G; g++) memcpy(qs2 + g * S::QP, qs + g * HD, HD);
    for (int i = 0; i < G * S::NG; i++) qdm[i] = hround((float)(rnd32() % 10000 + 1) / 1e6f);
    const float scale = 1.f / sqrtf((float)HD);
    const size_t off = (size_t)kh * S::SLICE;
    const int nst = (nv + R - 1) / R;

    result res[2];
    for (int side = 0; side < 2; side++) {
        uint8_t *ring = (uint8_t *)calloc(R2_NS * S::SLOT, 1);
        float *ps = (float *)calloc((size_t)S::GP * C, sizeof(float));
        static float o[256][G][ND];
        memset(o, 0, sizeof o);
        auto issue = [&](int s) {
            if (s >= 2 * nst) return;
            const bool v = s >= nst;
            const int r0 = (v ? s - nst : s) * R;
            for (int t = 0; t < NT; t++)
                if (side) r2_copy<HD, G>(t, ring + (s % R2_NS) * S::SLOT, v ? vptr : kptr, off, r0, std::min(nv, r0 + R));
                else old_copy<HD, G>(t, ring + (s % R2_NS) * S::SLOT, v ? vptr : kptr, off, r0, std::min(nv, r0 + R));
        };
        for (int s = 0; s < R2_NS - 1; s++) issue(s);
        for (int s = 0; s < 2 * nst; s++) {
            issue(s + R2_NS - 1);
            const uint8_t *slot = ring + (s % R2_NS) * S::SLOT;
            if (s < nst) {
                const int r0 = s * R, r1 = std::min(nv, r0 + R);
                for (int t = 0; t < NT; t++)
                    if (side) r2_scores<HD, G>(t, slot, qs2, qdm, valid, scale, ps, r0, r1);
                    else old_scores<HD, G>(t, slot, qs, qdm, valid, scale, ps, C, r0, r1);
            } else {
                if (s == nst)
                    for (int g = 0; g < G; g++)
                        res[side].m[g] = side ? softmax(ps + g, S::GP, nv, &res[side].l[g])
                                              : softmax(ps + g * C, 1, nv, &res[side].l[g]);
                const int r0 = (s - nst) * R, r1 = std::min(nv, r0 + R);
                for (int t = 0; t < NT; t++)
                    if (side) r2_vpass<HD, G>(t, slot, ps, r0, r1, o[t]);
                    else old_vpass<HD, G>(t, slot, ps, C, r0, r1, o[t]);
            }
        }
        for (int g = 0; g < G; g++)   /* attn_store_partial: reduce8 of lanes l8 = 0..7 of dim group dg */
            for (int dg = 0; dg < NT / 8; dg++)
                for (int i = 0; i < ND; i++) {
                    float a[8];
                    for (int l8 = 0; l8 < 8; l8++) a[l8] = o[dg * 8 + l8][g][i];
                    res[side].o[g][dg * ND + i] = red8(a);
                }
        free(ring); free(ps);
    }
    int bad = 0;
    double mag = 0;
    for (int g = 0; g < G; g++) {
        bad += memcmp(&res[0].m[g], &res[1].m[g], 4) != 0;
        bad += memcmp(&res[0].l[g], &res[1].l[g], 4) != 0;
        for (int i = 0; i < HD; i++) {
            bad += memcmp(&res[0].o[g][i], &res[1].o[g][i], 4) != 0;
            mag += fabs(res[0].o[g][i]);
        }
    }
    printf("%s HD %3d G %d C %3d nv %3d kh %d null rows %d: %s (%d of %d values differ; mean |o| %.3g, m0 %.4g l0 %.4g)\n",
           bad ? "FAIL" : "ok  ", HD, G, C, nv, kh, nullrows, bad ? "DIFFERS" : "bit-identical", bad, G * (HD + 2),
           mag / (G * HD), res[1].m[0], res[1].l[0]);
    (void)verbose;
    free(kd); free(vd); free(kptr); free(vptr); free(valid); free(qs); free(qs2);
    return bad != 0;
}

template <int HD, int G>
static int all() {
    int f = 0;
    f += run<HD, G>(256, 256, 0, 0, false);
    f += run<HD, G>(256, 201, 1, 1, false);   /* partial last chunk, rows in no segment */
    f += run<HD, G>(256, 7, 1, 0, false);
    f += run<HD, G>(64, 64, 1, 1, false);
    return f;
}

int main() {
    int f = 0;
    f += all<128, 1>(); f += all<128, 2>(); f += all<128, 3>(); f += all<128, 4>(); f += all<128, 8>();
    f += all<64, 1>(); f += all<64, 2>(); f += all<64, 3>(); f += all<64, 4>(); f += all<64, 8>();
    printf("%s: %d case(s) differ\n", f ? "FAIL" : "PASS", f);
    return f != 0;
}
