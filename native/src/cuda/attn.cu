/*
 * cuda/attn.cu: exact attention over the chunk grid (backend.h, DESIGN.md 4).
 *
 * The unit of work is one chunk's partial for one query and one group of up to
 * GMAX query heads sharing a KV head (GQA): scores over the chunk's rows at
 * positions <= the query's, m = max s, l = sum e^(s-m), o = sum p v with the
 * normalised probabilities p, at the CPU backend's rounding points (attn.cuh:
 * query in K's dot type, integer block dots, p rounded to f16 for an f16 V).
 * chunk_partial() computes it with one block, locating each row in whichever
 * segment holds it, in an order that depends only on the row's place in the
 * chunk: the same bits for any placement. Partials are folded into the
 * running state (m, l, normalised o) strictly in increasing chunk order with
 * the CPU's fold (attn.cuh: attn_fold_w / attn_fold_o), every operation
 * explicitly rounded, so either kernel below yields the same state:
 * - attn_seq (many queries, prefill): one block per (query, head group) walks
 *   its chunks in order, folding each partial as it goes.
 * - attn_split + attn_fold (few queries, decode: flash-decoding): one block
 *   per (chunk, head group, query) writes its partial to the workspace, then
 *   one block per (query, head) folds the partials in chunk order.
 *   attn_dec.cu replaces both for the shapes it covers (f16/q8_0/q4_0 K and V,
 *   head_dim 64/128, 1/2/4/8 heads per KV head) unless LKV_CUDA_ATTN=0; the
 *   choice depends on the shape only, like the choice between these two.
 * K is read as integer codes and block scales (values for the float types);
 * V is dequantized 8 elements at a time (a lane reads one 8-element piece).
 * In a captured step (b->dyn_pos) the kernels take the position from device
 * memory (attn.cuh: attn_dyn); grids and launches depend only on the chunk
 * range and the shape.
 *
 * Left to do: tensor-core prefill attention (attn_seq re-reads K/V once per
 * query, fine at short depth, slow at long depth).
 */
#include "attn.cuh"

// ---------------------------------------------------------------- element access

enum { ATT_THREADS = 128, ATT_WARPS = ATT_THREADS / 32, GMAX = 8, ATT_SMEM_MAX = 160 * 1024 };

/* 32-group g of a K row of type T: kf = the integer codes (values for the
 * float types), dk the block scale (1), mk the block minimum (0 if none) */
template <int T>
static __device__ __forceinline__ void kcodes32(const uint8_t *row, int g, float *kf, float &dk, float &mk) {
    mk = 0.f;
    if constexpr (T == LKV_TYPE_F32 || T == LKV_TYPE_F16 || T == LKV_TYPE_BF16) {
        dq32<T>(row, g, kf);
        dk = 1.f;
    } else if constexpr (T == LKV_TYPE_Q8_0) {
        const cq8_0 *b = (const cq8_0 *)row + g;
        dk = __half2float(b->d);
        const uint16_t *q16 = (const uint16_t *)b->qs;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const uint32_t q = q16[i];
            kf[2 * i] = (float)(int8_t)(q & 0xff);
            kf[2 * i + 1] = (float)(int8_t)(q >> 8);
        }
    } else {
        const uint8_t *qs, *qh8 = nullptr;
        if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_IQ4_NL) {
            const cq4_0 *b = (const cq4_0 *)row + g;
            dk = __half2float(b->d); qs = b->qs;
        } else if constexpr (T == LKV_TYPE_Q4_1) {
            const cq4_1 *b = (const cq4_1 *)row + g;
            dk = __half2float(b->d); mk = __half2float(b->m); qs = b->qs;
        } else if constexpr (T == LKV_TYPE_Q5_0) {
            const cq5_0 *b = (const cq5_0 *)row + g;
            dk = __half2float(b->d); qs = b->qs; qh8 = b->qh;
        } else {
            const cq5_1 *b = (const cq5_1 *)row + g;
            dk = __half2float(b->d); mk = __half2float(b->m); qs = b->qs; qh8 = b->qh;
        }
        uint32_t qh = 0;
        if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1)
            qh = qh8[0] | (qh8[1] << 8) | (qh8[2] << 16) | ((uint32_t)qh8[3] << 24);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int lo = qs[j] & 0xF, hi = qs[j] >> 4;
            if constexpr (T == LKV_TYPE_Q5_0 || T == LKV_TYPE_Q5_1) {
                lo |= ((qh >> j) & 1) << 4;
                hi |= ((qh >> (j + 16)) & 1) << 4;
            }
            if constexpr (T == LKV_TYPE_IQ4_NL) { lo = lkv_iq4nl_levels[lo]; hi = lkv_iq4nl_levels[hi]; }
            else if constexpr (T == LKV_TYPE_Q4_0) { lo -= 8; hi -= 8; }
            else if constexpr (T == LKV_TYPE_Q5_0) { lo -= 16; hi -= 16; }
            kf[j] = (float)lo;
            kf[j + 16] = (float)hi;
        }
    }
}

/* Run-time type (TK == -1): one uniform switch per call. */
template <int T>
static __device__ __forceinline__ void kv_codes32(int type, const uint8_t *row, int g, float *kf, float &dk,
                                                  float &mk) {
    if constexpr (T >= 0) { kcodes32<T>(row, g, kf, dk, mk); }
    else {
        switch (type) {
#define X(TT) case TT: kcodes32<TT>(row, g, kf, dk, mk); break;
            LKV_CUDA_KV_TYPES(X)
#undef X
        default: dk = mk = 0.f;
        }
    }
}

// ---------------------------------------------------------------- shared pieces

struct attn_geom {
    int G_total, n_sub;       /* heads per KV head; head groups per KV head */
    int ng_hd, lpr, rpw;      /* 32-groups per head; lanes per K row (pow2); rows per warp pass */
    int hdT;                  /* dims a thread column covers */
    size_t rbk, rbv;          /* row bytes of K and V */
};

/* smem bytes needed by chunk_partial (see carve) */
static size_t attn_smem_bytes(int G, int lpr, int chunk, int hd) {
    return ((size_t)G * lpr * 35 + (size_t)G * chunk + (size_t)ATT_WARPS * G * hd + 2 * GMAX) *
               sizeof(float) + 2 * (size_t)chunk * sizeof(void *) + 16;
}

struct attn_smem_ptrs { float *qsm, *qd, *qs, *s, *comb, *pm, *pl; const uint8_t **kptr, **vptr; };

/* qsm (G, lpr, 33) | qd, qs (G, lpr) | s (G, C) | comb (ATT_WARPS, G, hd) | pm, pl (GMAX) | kptr, vptr (C) */
static __device__ __forceinline__ attn_smem_ptrs carve(float *sm, const attn_geom &ge, int G, int C,
                                                       int hd) {
    attn_smem_ptrs p;
    p.qsm = sm;
    p.qd = p.qsm + G * ge.lpr * 33;
    p.qs = p.qd + G * ge.lpr;
    p.s = p.qs + G * ge.lpr;
    p.comb = p.s + G * C;
    p.pm = p.comb + ATT_WARPS * G * hd;
    p.pl = p.pm + GMAX;
    size_t off = ((size_t)(p.pl + GMAX - sm) * sizeof(float) + 15) & ~(size_t)15;
    p.kptr = (const uint8_t **)((char *)sm + off);
    p.vptr = p.kptr + C;
    return p;
}

/*
 * One chunk's partial for the query at qpos and heads h0 .. h0+G-1 (KV head
 * kh), delta: the replay offset (attn.cuh). On return (after a barrier):
 * pm[g], pl[g] hold m and l; the dim-owner threads (tid < hdT) hold the
 * normalised o for dims tid + k*128 in acc[g][k].
 */
template <int TK, int TV>
static __device__ __forceinline__ void chunk_partial(
    const lkv_attn_desc &d, const attn_geom &ge, const attn_dyn &dy, int delta, int c, int qpos, int kh,
    int G, const attn_smem_ptrs &sp, float (&acc)[GMAX][2]) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int C = d.chunk, p0 = c * C, hd = d.head_dim;
    const int n_valid = max(0, min(C, qpos - p0 + 1));
    float *s = sp.s;

    // -- where each row lives (NULL: in no segment)
    for (int r = tid; r < n_valid; r += ATT_THREADS) {
        const int p = p0 + r;
        const uint8_t *kr = NULL, *vr = NULL;
        for (int i = 0; i < d.n_segs; i++) {
            const lkv_kv_seg &sg = d.segs[i];
            if (p >= sg.pos0 && p < sg.pos0 + attn_seg_n(d, i, dy, delta)) {
                kr = (const uint8_t *)sg.k + (size_t)(p - sg.pos0) * ge.rbk;
                vr = (const uint8_t *)sg.v + (size_t)(p - sg.pos0) * ge.rbv;
                break;
            }
        }
        sp.kptr[r] = kr;
        sp.vptr[r] = vr;
    }
    __syncthreads();

    // -- scores: lanes split a K row into 32-groups, rpw rows per warp pass;
    //    per group (d_k d_q) * dot (+ m_k s_q), the dot exact for integer codes
#pragma unroll 2
    for (int base = warp * ge.rpw; base < n_valid; base += ATT_WARPS * ge.rpw) {
        const int r = base + lane / ge.lpr, gl = lane % ge.lpr;
        const uint8_t *krow = r < n_valid ? sp.kptr[r] : NULL;
        float kf[32], dk = 0.f, mk = 0.f;
        if (krow && gl < ge.ng_hd) kv_codes32<TK>(d.type_k, krow, kh * ge.ng_hd + gl, kf, dk, mk);
        else {
#pragma unroll
            for (int i = 0; i < 32; i++) kf[i] = 0.f;
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= G) break;
            const float *qg = sp.qsm + (g * ge.lpr + gl) * 33;
            float dot = 0.f;
#pragma unroll
            for (int i = 0; i < 32; i++) dot = fmaf(kf[i], qg[i], dot);
            float part = fmaf(__fmul_rn(dk, sp.qd[g * ge.lpr + gl]), dot, __fmul_rn(mk, sp.qs[g * ge.lpr + gl]));
            for (int o = ge.lpr >> 1; o > 0; o >>= 1) part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, o));
            if (gl == 0 && r < n_valid) s[g * C + r] = krow ? __fmul_rn(part, d.scale) : -INFINITY;
        }
    }
    __syncthreads();

    // -- softmax pieces: one warp per head, lane-strided rows, fixed order:
    //    w = exp(s - m), l = sum w (f64), p = w * (float)(1 / l), f16 for an f16 V
    const bool f16v = TV >= 0 ? TV == LKV_TYPE_F16 : d.type_v == LKV_TYPE_F16;
    for (int g = warp; g < G; g += ATT_WARPS) {
        float l;
        const float mx = attn_chunk_softmax(s + g * C, 1, n_valid, f16v, &l);
        if (lane == 0) { sp.pm[g] = mx; sp.pl[g] = l; }
    }
    __syncthreads();

    // -- o = sum p v: lanes split a V row into 8-element pieces (dq8), rv rows
    //    per warp pass; then row slots, then warps, are added in a fixed order
    const int n8 = hd / 8;
    int lv = 1;
    while (lv < n8) lv <<= 1;
    const int rv = 32 / lv, pc = lane % lv, slot = lane / lv;
    float o8[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; g++)
#pragma unroll
        for (int i = 0; i < 8; i++) o8[g][i] = 0.f;
#pragma unroll 2
    for (int r = warp * rv + slot; r < n_valid; r += ATT_WARPS * rv) {
        const uint8_t *vrow = sp.vptr[r];
        if (!vrow || pc >= n8) continue;
        float v8[8];
        if constexpr (TV >= 0) dq8<TV>(vrow, kh * n8 + pc, v8);
        else {
            switch (d.type_v) {
#define X(TT) case TT: dq8<TT>(vrow, kh * n8 + pc, v8); break;
                LKV_CUDA_KV_TYPES(X)
#undef X
            default:
#pragma unroll
                for (int i = 0; i < 8; i++) v8[i] = 0.f;
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= G) break;
            const float pr = s[g * C + r];
#pragma unroll
            for (int i = 0; i < 8; i++) o8[g][i] = fmaf(pr, v8[i], o8[g][i]);
        }
    }
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
#pragma unroll
        for (int i = 0; i < 8; i++)
            for (int off = lv; off < 32; off <<= 1) o8[g][i] += __shfl_xor_sync(0xffffffffu, o8[g][i], off);
        if (slot == 0 && pc < n8)
#pragma unroll
            for (int i = 0; i < 8; i++) sp.comb[(warp * G + g) * hd + 8 * pc + i] = o8[g][i];
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        acc[g][0] = acc[g][1] = 0.f;
        if (g >= G) continue;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int dd = tid + 128 * k;
            if (tid >= ge.hdT || dd >= hd) continue;
            float v = 0.f;
            for (int w = 0; w < ATT_WARPS; w++) v += sp.comb[(w * G + g) * hd + dd];
            acc[g][k] = v;
        }
    }
    __syncthreads();
}

/* the G query heads in K's dot type (attn.cuh), 32-groups padded to 33,
 * one warp per group; the scale is applied to the scores */
template <int TK>
static __device__ __forceinline__ void load_q(const float *q, const lkv_attn_desc &d, const attn_geom &ge,
                                              int qi, int h0, int G, const attn_smem_ptrs &sp) {
    const int hd = d.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kind = attn_qkind(TK >= 0 ? TK : d.type_k);
    for (int t = warp; t < G * ge.lpr; t += ATT_WARPS) {
        const int g = t / ge.lpr, e = (t % ge.lpr) * 32 + lane;
        const float x = e < hd ? q[((size_t)qi * d.n_head + h0 + g) * hd + e] : 0.f;
        float qd, qs;
        sp.qsm[t * 33 + lane] = attn_qconv(kind, x, qd, qs);
        if (lane == 0) { sp.qd[t] = qd; sp.qs[t] = qs; }
    }
    __syncthreads();
}

// ---------------------------------------------------------------- kernels

/* grid (head groups, n_q): chunks in order, folded as they come; thread g < G
 * keeps head g's (m, l) and the fold factors in shared memory */
template <int TK, int TV>
__global__ void __launch_bounds__(ATT_THREADS)
attn_seq_kernel(float *st, const float *q, const __grid_constant__ lkv_attn_desc d, attn_geom ge,
                attn_dyn dy) {
    extern __shared__ __align__(16) float sm[];
    __shared__ float run_m[GMAX], run_l[GMAX];
    __shared__ attn_fw fw[GMAX];
    const int delta = attn_delta(dy);
    const int gi = blockIdx.x, qi = blockIdx.y, qpos = d.q_pos0 + delta + qi;
    const int kh = gi / ge.n_sub, sub = gi % ge.n_sub;
    const int h0 = kh * ge.G_total + sub * GMAX, G = min(GMAX, ge.G_total - sub * GMAX);
    attn_smem_ptrs p = carve(sm, ge, G, d.chunk, d.head_dim);
    load_q<TK>(q, d, ge, qi, h0, G, p);

    const int hd = d.head_dim, tid = threadIdx.x;
    const bool owner = tid < ge.hdT;
    float o[GMAX][2], acc[GMAX][2];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
        const float *sp = st + ((size_t)qi * d.n_head + h0 + g) * (hd + 2);
        o[g][0] = owner ? sp[2 + tid] : 0.f;
        o[g][1] = owner && tid + 128 < hd ? sp[2 + tid + 128] : 0.f;
    }
    if (tid < G) {
        const float *sp = st + ((size_t)qi * d.n_head + h0 + tid) * (hd + 2);
        run_m[tid] = sp[0];
        run_l[tid] = sp[1];
    }
    const int c_end = min(d.chunk_hi, qpos / d.chunk + 1);
    for (int c = d.chunk_lo; c < c_end; c++) {
        chunk_partial<TK, TV>(d, ge, dy, delta, c, qpos, kh, G, p, acc);
        if (tid < G) fw[tid] = attn_fold_w(run_m[tid], run_l[tid], p.pm[tid], p.pl[tid]);
        __syncthreads();
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= G) break;
            const attn_fw f = fw[g];
            o[g][0] = attn_fold_o(o[g][0], acc[g][0], f);
            o[g][1] = attn_fold_o(o[g][1], acc[g][1], f);
        }
        __syncthreads();
    }
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
        float *sp = st + ((size_t)qi * d.n_head + h0 + g) * (hd + 2);
        if (tid == g) { sp[0] = run_m[g]; sp[1] = run_l[g]; }
        if (owner) {
            sp[2 + tid] = o[g][0];
            if (tid + 128 < hd) sp[2 + tid + 128] = o[g][1];
        }
    }
}

/* grid (chunks of this batch, head groups, n_q): partial of chunk c_first + x
 * into ws[((qi * n_head + h) * nc + x) * (hd + 2)] */
template <int TK, int TV>
__global__ void __launch_bounds__(ATT_THREADS)
attn_split_kernel(float *ws, const float *q, const __grid_constant__ lkv_attn_desc d, attn_geom ge,
                  attn_dyn dy, int c_first, int nc) {
    extern __shared__ __align__(16) float sm[];
    const int delta = attn_delta(dy);
    const int x = blockIdx.x, gi = blockIdx.y, qi = blockIdx.z, qpos = d.q_pos0 + delta + qi;
    const int kh = gi / ge.n_sub, sub = gi % ge.n_sub;
    const int h0 = kh * ge.G_total + sub * GMAX, G = min(GMAX, ge.G_total - sub * GMAX);
    const int hd = d.head_dim, tid = threadIdx.x;
    const int c = c_first + x;
    attn_smem_ptrs p = carve(sm, ge, G, d.chunk, d.head_dim);
    float acc[GMAX][2];
    if (c * d.chunk > qpos) {   /* past the query: empty partial */
        for (int g = 0; g < G; g++)
            if (tid == 0) ws[(((size_t)qi * d.n_head + h0 + g) * nc + x) * (hd + 2)] = -INFINITY;
        return;
    }
    load_q<TK>(q, d, ge, qi, h0, G, p);
    chunk_partial<TK, TV>(d, ge, dy, delta, c, qpos, kh, G, p, acc);
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
        float *wp = ws + (((size_t)qi * d.n_head + h0 + g) * nc + x) * (hd + 2);
        if (tid == 0) { wp[0] = p.pm[g]; wp[1] = p.pl[g]; }
        if (tid < ge.hdT) {
            wp[2 + tid] = acc[g][0];
            if (tid + 128 < hd) wp[2 + tid + 128] = acc[g][1];
        }
    }
}

/* grid (n_head, n_q), threads over dims: fold nc partials in chunk order
 * (loads of FOLD_AHEAD partials are issued before they are folded) */
enum { FOLD_AHEAD = 8 };
__global__ void attn_fold_kernel(float *st, const float *ws, int n_head, int hd, int nc) {
    const int h = blockIdx.x, qi = blockIdx.y;
    float *sp = st + ((size_t)qi * n_head + h) * (hd + 2);
    const float *wp = ws + ((size_t)qi * n_head + h) * nc * (hd + 2);
    const float m0 = sp[0], l0 = sp[1];
    __syncthreads();   /* every thread has read the old (m, l) before thread 0 rewrites it */
    for (int d0 = threadIdx.x; d0 < hd; d0 += blockDim.x) {
        float m = m0, l = l0, o[1] = {sp[2 + d0]};
        for (int x0 = 0; x0 < nc; x0 += FOLD_AHEAD) {
            float pm[FOLD_AHEAD], pl[FOLD_AHEAD], po[FOLD_AHEAD];
#pragma unroll
            for (int k = 0; k < FOLD_AHEAD; k++) {
                const float *pp = wp + (size_t)min(x0 + k, nc - 1) * (hd + 2);
                pm[k] = pp[0]; pl[k] = pp[1]; po[k] = pp[2 + d0];
            }
#pragma unroll
            for (int k = 0; k < FOLD_AHEAD; k++)
                if (x0 + k < nc) o[0] = attn_fold_o(o[0], po[k], attn_fold_w(m, l, pm[k], pl[k]));
        }
        sp[2 + d0] = o[0];
        if (d0 == 0) { sp[0] = m; sp[1] = l; }
    }
}

__global__ void attn_reset_kernel(float *st, int64_t n_states, int hd) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_states * (hd + 2)) return;
    st[i] = (i % (hd + 2)) == 0 ? -INFINITY : 0.f;
}

/* the state's o is already normalised */
__global__ void attn_finish_kernel(float *out, const float *st, int64_t n_states, int hd) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_states * hd) return;
    const int64_t sidx = i / hd;
    const float *sp = st + sidx * (hd + 2);
    out[i] = sp[1] > 0.f ? sp[2 + i % hd] : 0.f;
}

// ---------------------------------------------------------------- launchers

template <int TK, int TV>
static void attn_launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d,
                        const attn_geom &ge, const attn_dyn &dy) {
    const int n_groups = d->n_head_kv * ge.n_sub;
    const int Gmax = min(GMAX, ge.G_total);
    const size_t smem = attn_smem_bytes(Gmax, ge.lpr, d->chunk, d->head_dim);
    if (smem > ATT_SMEM_MAX) { lkv_cuda_note(b, cudaErrorInvalidValue, "attn: chunk too large"); return; }
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (d->head_dim + 2) * sizeof(float);
    const int batch = (int)(b->attn_ws_bytes / per_chunk);
    /* the kernel choice depends on the micro-batch shape only, never on the
     * chunk range, segments or position (both kernels give the same bits anyway) */
    if ((int64_t)d->n_q * n_groups >= 2 * b->n_sm || batch < 1) {
        attn_seq_kernel<TK, TV><<<dim3(n_groups, d->n_q), ATT_THREADS, smem, b->stream>>>(st, q, *d, ge, dy);
        LKV_CUDA_LAUNCHED(b, "attn_seq");
        return;
    }
    if (lkv_cuda_attn_dec(b, st, q, d, ge.rbk, ge.rbv)) return;   /* attn_dec.cu */
    for (int c0 = d->chunk_lo; c0 < d->chunk_hi; c0 += batch) {
        const int nc = min(batch, d->chunk_hi - c0);
        attn_split_kernel<TK, TV><<<dim3(nc, n_groups, d->n_q), ATT_THREADS, smem, b->stream>>>(
            b->attn_ws, q, *d, ge, dy, c0, nc);
        LKV_CUDA_LAUNCHED(b, "attn_split");
        const int ft = d->head_dim >= 128 ? 128 : d->head_dim;
        attn_fold_kernel<<<dim3(d->n_head, d->n_q), ft, 0, b->stream>>>(st, b->attn_ws, d->n_head,
                                                                       d->head_dim, nc);
        LKV_CUDA_LAUNCHED(b, "attn_fold");
    }
}

// ---------------------------------------------------------------- entry points

#define ATTN_INSTANCES(X) X(LKV_TYPE_F16) X(LKV_TYPE_Q8_0) X(LKV_TYPE_Q4_0)

void lkv_cuda_attn_setup(void) {
    static int done = 0;
    if (done) return;
    done = 1;
#define X(T)                                                                                    \
    cudaFuncSetAttribute(attn_seq_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX); \
    cudaFuncSetAttribute(attn_split_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX);
    ATTN_INSTANCES(X)
    X(-1)
#undef X
    cudaGetLastError();
}

/* bytes of a KV row of n elements (n % 32 == 0); -1 for a type not read here */
static int64_t kv_row_bytes(int type, int64_t n) {
    switch (type) {
#define X(T) case T: return n / 32 * group_bytes<T>();
        LKV_CUDA_KV_TYPES(X)
#undef X
    default: return -1;
    }
}

size_t lkv_cuda_attn_state_bytes(int n_q, int n_head, int head_dim) {
    return (size_t)n_q * n_head * (head_dim + 2) * sizeof(float);
}

void lkv_cuda_attn_reset(lkv_bctx *b, void *st, int n_q, int n_head, int head_dim) {
    const int64_t n = (int64_t)n_q * n_head * (head_dim + 2);
    if (n <= 0) return;
    attn_reset_kernel<<<lkv_cdiv(n, 256), 256, 0, b->stream>>>((float *)st, (int64_t)n_q * n_head, head_dim);
    LKV_CUDA_LAUNCHED(b, "attn_reset");
}

void lkv_cuda_attn_finish(lkv_bctx *b, float *out, const void *st, int n_q, int n_head, int head_dim) {
    const int64_t n = (int64_t)n_q * n_head * head_dim;
    if (n <= 0) return;
    attn_finish_kernel<<<lkv_cdiv(n, 256), 256, 0, b->stream>>>(out, (const float *)st,
                                                                (int64_t)n_q * n_head, head_dim);
    LKV_CUDA_LAUNCHED(b, "attn_finish");
}

void lkv_cuda_attn_accum(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d) {
    if (d->n_q <= 0 || d->chunk_hi <= d->chunk_lo) return;
    const int hd = d->head_dim;
    if (hd % 32 || hd > 256 || d->n_head % d->n_head_kv || d->chunk <= 0 || d->n_segs > LKV_MAX_SEGS) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "attn: unsupported geometry");
        return;
    }
    attn_geom ge;
    ge.G_total = d->n_head / d->n_head_kv;
    ge.n_sub = (ge.G_total + GMAX - 1) / GMAX;
    ge.ng_hd = hd / 32;
    ge.lpr = 1;
    while (ge.lpr < ge.ng_hd) ge.lpr <<= 1;
    ge.rpw = 32 / ge.lpr;
    ge.hdT = hd < 128 ? hd : 128;
    const int64_t kv_elems = (int64_t)d->n_head_kv * hd;
    ge.rbk = (size_t)kv_row_bytes(d->type_k, kv_elems);
    ge.rbv = (size_t)kv_row_bytes(d->type_v, kv_elems);
    if ((int64_t)ge.rbk <= 0 || (int64_t)ge.rbv <= 0) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "attn: unsupported KV type");
        return;
    }
    const attn_dyn dy = attn_dyn_of(b, d);
    if (d->type_k == d->type_v) {
        switch (d->type_k) {
#define X(T) case T: attn_launch<T, T>(b, (float *)st, q, d, ge, dy); return;
            ATTN_INSTANCES(X)
#undef X
        default: break;
        }
    }
    attn_launch<-1, -1>(b, (float *)st, q, d, ge, dy);
}

/* for tests/cuda/test_ops.c only (declared there): emulates a replayed step
 * (common.cuh: dyn_pos, cap_pos0) without a graph; NULL ends it */
extern "C" void lkv_cuda_attn_test_dyn(lkv_bctx *b, const int32_t *dyn_pos, int32_t cap_pos0) {
    b->dyn_pos = dyn_pos;
    b->cap_pos0 = cap_pos0;
}
