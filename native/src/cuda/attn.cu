/*
 * cuda/attn.cu: exact attention over the chunk grid (backend.h, DESIGN.md 4).
 *
 * The unit of work is one chunk's partial for one query and one group of up to
 * GMAX query heads sharing a KV head (GQA): scores s = scale q.k over the
 * chunk's rows at positions <= the query's, m = max s, p = e^(s-m), l = sum p,
 * o = sum p v (unnormalised). chunk_partial() computes it with one block,
 * locating each row in whichever segment holds it, in an order that depends
 * only on the row's place in the chunk: the same bits for any placement.
 * Partials are folded into the running state (m, l, o) strictly in increasing
 * chunk order with fold(), whose products and sums are explicitly rounded (no
 * contraction), so either kernel below yields the same state:
 * - attn_seq (many queries, prefill): one block per (query, head group) walks
 *   its chunks in order, folding each partial as it goes.
 * - attn_split + attn_fold (few queries, decode: flash-decoding): one block
 *   per (chunk, head group, query) writes its partial to the workspace, then
 *   one block per (query, head) folds the partials in chunk order.
 *   attn_dec.cu replaces both for the shapes it covers (f16/q8_0/q4_0 K and V,
 *   head_dim 64/128, 1/2/4/8 heads per KV head) unless LKV_CUDA_ATTN=0; the
 *   choice depends on the shape only, like the choice between these two.
 * Scores are f32 dot products of the f32 query with dequantized K; V is read
 * element by element (a warp reads 32 consecutive elements of a row).
 *
 * Left to do: tensor-core prefill attention (attn_seq re-reads K/V once per
 * query, fine at short depth, slow at long depth).
 */
#include "common.cuh"

// ---------------------------------------------------------------- element access

enum { ATT_THREADS = 128, ATT_WARPS = ATT_THREADS / 32, GMAX = 8, ATT_SMEM_MAX = 160 * 1024 };

/* element i of a KV row of type T */
template <int T>
static __device__ __forceinline__ float dq1(const uint8_t *row, int i) {
    if constexpr (T == LKV_TYPE_F32) return ((const float *)row)[i];
    else if constexpr (T == LKV_TYPE_F16) return __half2float(((const __half *)row)[i]);
    else if constexpr (T == LKV_TYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
    else if constexpr (T == LKV_TYPE_Q8_0) {
        const cq8_0 *b = (const cq8_0 *)row + (i >> 5);
        return b->qs[i & 31] * __half2float(b->d);
    } else {
        const int j = i & 31;
        const uint8_t *qs, *qh = NULL;
        float d, m = 0.f;
        if constexpr (T == LKV_TYPE_Q4_0 || T == LKV_TYPE_IQ4_NL) {
            const cq4_0 *b = (const cq4_0 *)row + (i >> 5);
            d = __half2float(b->d); qs = b->qs;
        } else if constexpr (T == LKV_TYPE_Q4_1) {
            const cq4_1 *b = (const cq4_1 *)row + (i >> 5);
            d = __half2float(b->d); m = __half2float(b->m); qs = b->qs;
        } else if constexpr (T == LKV_TYPE_Q5_0) {
            const cq5_0 *b = (const cq5_0 *)row + (i >> 5);
            d = __half2float(b->d); qs = b->qs; qh = b->qh;
        } else {
            const cq5_1 *b = (const cq5_1 *)row + (i >> 5);
            d = __half2float(b->d); m = __half2float(b->m); qs = b->qs; qh = b->qh;
        }
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        if (qh) q |= ((qh[j >> 3] >> (j & 7)) & 1) << 4;
        if constexpr (T == LKV_TYPE_Q4_0) return (q - 8) * d;
        else if constexpr (T == LKV_TYPE_IQ4_NL) return lkv_iq4nl_levels[q] * d;
        else if constexpr (T == LKV_TYPE_Q5_0) return (q - 16) * d;
        else return q * d + m;
    }
}

/* Run-time type (TK/TV == -1): one uniform switch per call. */
template <int T>
static __device__ __forceinline__ void kv_dq32(int type, const uint8_t *row, int g, float *y) {
    if constexpr (T >= 0) { dq32<T>(row, g, y); }
    else {
        switch (type) {
#define X(TT) case TT: dq32<TT>(row, g, y); break;
            LKV_CUDA_KV_TYPES(X)
#undef X
        }
    }
}

template <int T>
static __device__ __forceinline__ float kv_dq1(int type, const uint8_t *row, int i) {
    if constexpr (T >= 0) { return dq1<T>(row, i); }
    else {
        switch (type) {
#define X(TT) case TT: return dq1<TT>(row, i);
            LKV_CUDA_KV_TYPES(X)
#undef X
        }
        return 0.f;
    }
}

// ---------------------------------------------------------------- shared pieces

struct attn_geom {
    int G_total, n_sub;       /* heads per KV head; head groups per KV head */
    int ng_hd, lpr, rpw;      /* 32-groups per head; lanes per K row (pow2); rows per warp pass */
    int hdT, dpt;             /* dims a thread column covers; dims per thread */
    size_t rbk, rbv;          /* row bytes of K and V */
};

static __device__ __forceinline__ void fold(float &m, float &l, float *o, int n_o, float mc,
                                            float lc, const float *oc) {
    if (mc == -INFINITY) return;
    const float mn = fmaxf(m, mc);
    const float a = m == -INFINITY ? 0.f : expf(m - mn);
    const float c = expf(mc - mn);
    l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(lc, c));
#pragma unroll
    for (int i = 0; i < 2; i++)
        if (i < n_o) o[i] = __fadd_rn(__fmul_rn(o[i], a), __fmul_rn(oc[i], c));
    m = mn;
}

/* smem bytes needed by chunk_partial (see carve) */
static size_t attn_smem_bytes(int G, int lpr, int chunk, int hd) {
    return ((size_t)G * lpr * 33 + (size_t)G * chunk + (size_t)ATT_WARPS * G * hd + 2 * GMAX) *
               sizeof(float) + 2 * (size_t)chunk * sizeof(void *) + 16;
}

struct attn_smem_ptrs { float *qsm, *s, *comb, *pm, *pl; const uint8_t **kptr, **vptr; };

/* qsm (G, lpr, 33) | s (G, C) | comb (ATT_WARPS, G, hd) | pm, pl (GMAX) | kptr, vptr (C) */
static __device__ __forceinline__ attn_smem_ptrs carve(float *sm, const attn_geom &ge, int G, int C,
                                                       int hd) {
    attn_smem_ptrs p;
    p.qsm = sm;
    p.s = p.qsm + G * ge.lpr * 33;
    p.comb = p.s + G * C;
    p.pm = p.comb + ATT_WARPS * G * hd;
    p.pl = p.pm + GMAX;
    size_t off = ((size_t)(p.pl + GMAX - sm) * sizeof(float) + 15) & ~(size_t)15;
    p.kptr = (const uint8_t **)((char *)sm + off);
    p.vptr = p.kptr + C;
    return p;
}

/*
 * One chunk's partial for query qi and heads h0 .. h0+G-1 (KV head kh).
 * On return (after a barrier): pm[g], pl[g] hold m and l; the dim-owner
 * threads (tid < hdT) hold o for dims tid + k*128 in acc[g][k].
 */
template <int TK, int TV>
static __device__ __forceinline__ void chunk_partial(
    const lkv_attn_desc &d, const attn_geom &ge, int c, int qpos, int kh, int G,
    const attn_smem_ptrs &sp, float (&acc)[GMAX][2]) {
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
            if (p >= sg.pos0 && p < sg.pos0 + sg.n) {
                kr = (const uint8_t *)sg.k + (size_t)(p - sg.pos0) * ge.rbk;
                vr = (const uint8_t *)sg.v + (size_t)(p - sg.pos0) * ge.rbv;
                break;
            }
        }
        sp.kptr[r] = kr;
        sp.vptr[r] = vr;
    }
    __syncthreads();

    // -- scores: lanes split a K row into 32-groups, rpw rows per warp pass
#pragma unroll 2
    for (int base = warp * ge.rpw; base < n_valid; base += ATT_WARPS * ge.rpw) {
        const int r = base + lane / ge.lpr, gl = lane % ge.lpr;
        const uint8_t *krow = r < n_valid ? sp.kptr[r] : NULL;
        float kf[32];
        if (krow && gl < ge.ng_hd) kv_dq32<TK>(d.type_k, krow, kh * ge.ng_hd + gl, kf);
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
            for (int i = 0; i < 32; i++) dot += kf[i] * qg[i];
            for (int o = ge.lpr >> 1; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            if (gl == 0 && r < n_valid) s[g * C + r] = krow ? dot : -INFINITY;
        }
    }
    __syncthreads();

    // -- softmax pieces: one warp per head, lane-strided rows, fixed order
    for (int g = warp; g < G; g += ATT_WARPS) {
        float mx = -INFINITY;
        for (int r = lane; r < n_valid; r += 32) mx = fmaxf(mx, s[g * C + r]);
        mx = lkv_warp_max(mx);
        float sum = 0.f;
        for (int r = lane; r < n_valid; r += 32) {
            const float e = mx == -INFINITY ? 0.f : expf(s[g * C + r] - mx);
            s[g * C + r] = e;
            sum += e;
        }
        sum = lkv_warp_sum(sum);
        if (lane == 0) { sp.pm[g] = mx; sp.pl[g] = sum; }
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
            for (int i = 0; i < 8; i++) o8[g][i] += pr * v8[i];
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

/* loads the G query heads, scaled, into qsm (32-groups padded to 33) */
static __device__ __forceinline__ void load_q(const float *q, const lkv_attn_desc &d,
                                              const attn_geom &ge, int qi, int h0, int G, float *qsm) {
    const int hd = d.head_dim;
    for (int i = threadIdx.x; i < G * ge.lpr * 32; i += blockDim.x) {
        const int g = i / (ge.lpr * 32), e = i % (ge.lpr * 32);
        const float v = e < hd ? q[((size_t)qi * d.n_head + h0 + g) * hd + e] * d.scale : 0.f;
        qsm[(g * ge.lpr + e / 32) * 33 + e % 32] = v;
    }
    __syncthreads();
}

// ---------------------------------------------------------------- kernels

/* grid (head groups, n_q): chunks in order, folded as they come */
template <int TK, int TV>
__global__ void __launch_bounds__(ATT_THREADS)
attn_seq_kernel(float *st, const float *q, const __grid_constant__ lkv_attn_desc d, attn_geom ge) {
    extern __shared__ __align__(16) float sm[];
    const int gi = blockIdx.x, qi = blockIdx.y, qpos = d.q_pos0 + qi;
    const int kh = gi / ge.n_sub, sub = gi % ge.n_sub;
    const int h0 = kh * ge.G_total + sub * GMAX, G = min(GMAX, ge.G_total - sub * GMAX);
    attn_smem_ptrs p = carve(sm, ge, G, d.chunk, d.head_dim);
    load_q(q, d, ge, qi, h0, G, p.qsm);

    const int hd = d.head_dim, tid = threadIdx.x;
    const bool owner = tid < ge.hdT;
    float m[GMAX], l[GMAX], o[GMAX][2], acc[GMAX][2];
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
        const float *sp = st + ((size_t)qi * d.n_head + h0 + g) * (hd + 2);
        m[g] = sp[0]; l[g] = sp[1];
        o[g][0] = owner ? sp[2 + tid] : 0.f;
        o[g][1] = owner && tid + 128 < hd ? sp[2 + tid + 128] : 0.f;
    }
    const int c_end = min(d.chunk_hi, qpos / d.chunk + 1);
    for (int c = d.chunk_lo; c < c_end; c++) {
        chunk_partial<TK, TV>(d, ge, c, qpos, kh, G, p, acc);
#pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= G) break;
            fold(m[g], l[g], o[g], ge.dpt, p.pm[g], p.pl[g], acc[g]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
        float *sp = st + ((size_t)qi * d.n_head + h0 + g) * (hd + 2);
        if (tid == 0) { sp[0] = m[g]; sp[1] = l[g]; }
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
                  int c_first, int nc) {
    extern __shared__ __align__(16) float sm[];
    const int x = blockIdx.x, gi = blockIdx.y, qi = blockIdx.z, qpos = d.q_pos0 + qi;
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
    load_q(q, d, ge, qi, h0, G, p.qsm);
    chunk_partial<TK, TV>(d, ge, c, qpos, kh, G, p, acc);
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
        float m = m0, l = l0, o[2] = {sp[2 + d0], 0.f};
        for (int x0 = 0; x0 < nc; x0 += FOLD_AHEAD) {
            float pm[FOLD_AHEAD], pl[FOLD_AHEAD], po[FOLD_AHEAD];
#pragma unroll
            for (int k = 0; k < FOLD_AHEAD; k++) {
                const float *pp = wp + (size_t)min(x0 + k, nc - 1) * (hd + 2);
                pm[k] = pp[0]; pl[k] = pp[1]; po[k] = pp[2 + d0];
            }
#pragma unroll
            for (int k = 0; k < FOLD_AHEAD; k++)
                if (x0 + k < nc) fold(m, l, o, 1, pm[k], pl[k], &po[k]);
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

__global__ void attn_finish_kernel(float *out, const float *st, int64_t n_states, int hd) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_states * hd) return;
    const int64_t sidx = i / hd;
    const float *sp = st + sidx * (hd + 2);
    out[i] = sp[1] > 0.f ? sp[2 + i % hd] / sp[1] : 0.f;
}

// ---------------------------------------------------------------- launchers

template <int TK, int TV>
static void attn_launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d,
                        const attn_geom &ge) {
    const int n_groups = d->n_head_kv * ge.n_sub;
    const int Gmax = min(GMAX, ge.G_total);
    const size_t smem = attn_smem_bytes(Gmax, ge.lpr, d->chunk, d->head_dim);
    if (smem > ATT_SMEM_MAX) { lkv_cuda_note(b, cudaErrorInvalidValue, "attn: chunk too large"); return; }
    const int n_chunks = d->chunk_hi - d->chunk_lo;
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (d->head_dim + 2) * sizeof(float);
    const int batch = (int)(b->attn_ws_bytes / per_chunk);
    /* the kernel choice depends on the micro-batch shape only, never on the
     * chunk range or segments (both kernels give the same bits anyway) */
    if ((int64_t)d->n_q * n_groups >= 2 * b->n_sm || batch < 1) {
        attn_seq_kernel<TK, TV><<<dim3(n_groups, d->n_q), ATT_THREADS, smem, b->stream>>>(st, q, *d, ge);
        LKV_CUDA_LAUNCHED(b, "attn_seq");
        return;
    }
    if (lkv_cuda_attn_dec(b, st, q, d, ge.rbk, ge.rbv)) return;   /* attn_dec.cu */
    for (int c0 = d->chunk_lo; c0 < d->chunk_hi; c0 += batch) {
        const int nc = min(batch, d->chunk_hi - c0);
        attn_split_kernel<TK, TV><<<dim3(nc, n_groups, d->n_q), ATT_THREADS, smem, b->stream>>>(
            b->attn_ws, q, *d, ge, c0, nc);
        LKV_CUDA_LAUNCHED(b, "attn_split");
        const int ft = d->head_dim >= 128 ? 128 : d->head_dim;
        attn_fold_kernel<<<dim3(d->n_head, d->n_q), ft, 0, b->stream>>>(st, b->attn_ws, d->n_head,
                                                                       d->head_dim, nc);
        LKV_CUDA_LAUNCHED(b, "attn_fold");
    }
    (void)n_chunks;
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
    ge.dpt = (hd + 127) / 128;
    const int64_t kv_elems = (int64_t)d->n_head_kv * hd;
    ge.rbk = (size_t)kv_row_bytes(d->type_k, kv_elems);
    ge.rbv = (size_t)kv_row_bytes(d->type_v, kv_elems);
    if ((int64_t)ge.rbk <= 0 || (int64_t)ge.rbv <= 0) {
        lkv_cuda_note(b, cudaErrorInvalidValue, "attn: unsupported KV type");
        return;
    }
    if (d->type_k == d->type_v) {
        switch (d->type_k) {
#define X(T) case T: attn_launch<T, T>(b, (float *)st, q, d, ge); return;
            ATTN_INSTANCES(X)
#undef X
        default: break;
        }
    }
    attn_launch<-1, -1>(b, (float *)st, q, d, ge);
}
