/*
 * cuda/attn.cu: exact attention over the chunk grid (backend.h, docs/design.md section 4).
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
 *   attn_dec_ring.cu and attn_dec_ring2.cu replace both for the shapes they
 *   cover (choose_attn.cu); this file takes every shape and type.
 * Every float operation is cpu/attention.c's, in its order (attn.cuh: the
 * query, reduce8, softmax, fold; attn_kv.cuh: the K dots and V elements), so
 * the partials, and the state, equal the CPU backend's bit for bit.
 * In a captured step (b->dyn_pos) the kernels take the position from device
 * memory (attn.cuh: attn_dyn); grids and launches depend only on the chunk
 * range and the shape.
 *
 * attn_seq re-reads K/V once per query: fine at short depth, slow at long
 * depth. The fast kernels (gpu_kernels = 1, the default) send prefill to the
 * tensor-core flash attention of attn_mma.cu instead (choose_attn.cu), which
 * is not bit-identical with the CPU (f16 products).
 */
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "act_quant.cuh"
#include "attn_rows.cuh"
#include "pdl.cuh"

/*
 * One chunk's partial for the query at qpos and heads h0 .. h0+G-1 (KV head
 * kh), delta: the replay offset (attn.cuh), in the CPU's order:
 * scores (one thread per row), softmax (attn_chunk_softmax, a warp per head),
 * then o: thread (l = tid & 7, dg = tid >> 3) keeps lane l of the CPU's 8
 * position lanes (rows l, l + 8, ... of the chunk, one FMA chain each, in
 * row order) for dims dg * 2 + 32 k + {0, 1}, at most 8 dims per pass; the
 * 8 lanes of a dim are reduce8'ed by shuffles. On return (after a barrier):
 * pm[g], pl[g] hold m and l; the dim-owner threads (tid < hdT) hold the
 * normalised o for dims tid + k*128 in acc[g][k].
 */
/* the first position query qpos sees: past a sliding window's start (d.window
 * > 0: positions > qpos - window), else 0 */
static __device__ __forceinline__ int attn_window_lo(const lkv_attn_desc &d, int qpos) {
    return d.window > 0 ? max(0, qpos - d.window + 1) : 0;
}

template <int TK, int TV, int GM = GMAX>
static __device__ __forceinline__ void chunk_partial(
    const lkv_attn_desc &d, const attn_geom &ge, const attn_dyn &dy, int delta, int c, int qpos, int kh,
    int G, const attn_smem_ptrs &sp, float (&acc)[GM][2]) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int C = d.chunk, p0 = c * C, hd = d.head_dim;
    const int n_valid = max(0, min(C, qpos - p0 + 1));
    const int lo = attn_window_lo(d, qpos);

    // -- where each row lives (NULL: in no segment, or before a sliding window)
    for (int r = tid; r < n_valid; r += ATT_THREADS) {
        const uint8_t *kr = nullptr, *vr = nullptr;
        if (p0 + r >= lo) attn_locate(d, dy, delta, p0 + r, ge.rbk, ge.rbv, kr, vr);
        sp.kptr[r] = kr;
        sp.vptr[r] = vr;
    }
    __syncthreads();

    // -- scores, one thread per row
    for (int r = tid; r < n_valid; r += ATT_THREADS) {
        const uint8_t *kr = sp.kptr[r];
        if (!kr) {
            for (int g = 0; g < G; g++) sp.s[g * C + r] = -INFINITY;
            continue;
        }
        kr += kh * ge.hbk;
        if constexpr (TK >= 0) score_row<TK, GM>(kr, sp, G, hd, d.scale, C, r);
        else {
            switch (d.type_k) {
#define X(TT) case TT: score_row<TT, GM>(kr, sp, G, hd, d.scale, C, r); break;
                LKV_CUDA_KV_TYPES(X)
#undef X
            default: break;
            }
        }
    }
    __syncthreads();

    // -- softmax pieces: one warp per head
    const bool f16v = TV >= 0 ? TV == LKV_TYPE_F16 : d.type_v == LKV_TYPE_F16;
    for (int g = warp; g < G; g += ATT_WARPS) {
        float l;
        const float mx = attn_chunk_softmax(sp.s + g * C, 1, n_valid, f16v, &l);
        if (lane == 0) { sp.pm[g] = mx; sp.pl[g] = l; }
    }
    __syncthreads();

    // -- o = sum p v in the CPU's 8 position lanes
    const int l8 = tid & 7, dg = tid >> 3, np = hd / 32;
    /* OCT (q8_0 V): thread dg takes 8 consecutive dims 32 k0 + 8 dg .. + 7
     * (oct_load: 2-4 loads instead of 8); its warp's 4 dg share a block, so
     * the dims in use ((dg >> 2) < kn) are the same for the whole warp. Its
     * loads run OCT_AHEAD rows ahead of the FMAs (the others: one row) */
    constexpr bool OCT = TV == LKV_TYPE_Q8_0;
    for (int k0 = 0; k0 < np; k0 += 4) {
        const int kn = min(4, np - k0);
        const bool oct_on = (dg >> 2) < kn;
        float o[GM][8];
#pragma unroll
        for (int g = 0; g < GM; g++)
#pragma unroll
            for (int i = 0; i < 8; i++) o[g][i] = 0.f;
        /* row r's contribution: o += p v in this lane's chain */
        auto accum = [&](int r, const float (&v)[8]) {
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if (g >= G) break;
                const float pr = sp.s[g * C + r];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (OCT ? oct_on : i < 2 * kn) o[g][i] = fmaf(v[i], pr, o[g][i]);
            }
        };
        if constexpr (OCT) {
            /* slot u holds the raw words of row r + 8 u; it is refilled with
             * row r + 8 (u + OCT_AHEAD) as soon as it is converted */
            constexpr int OCT_AHEAD = 4;
            oct_raw raw[OCT_AHEAD];
            bool ok[OCT_AHEAD];
            auto load = [&](int r, oct_raw &w) -> bool {   /* false: past the rows, or in no segment */
                const uint8_t *vr = r < n_valid ? sp.vptr[r] : nullptr;
                if (!vr) return false;
                w = oct_load(vr + kh * ge.hbv, dg, k0, kn);
                return true;
            };
#pragma unroll
            for (int u = 0; u < OCT_AHEAD; u++) {
                raw[u] = oct_raw{0u, 0u, 0.f};
                ok[u] = load(l8 + 8 * u, raw[u]);
            }
            for (int r = l8; r < n_valid; r += 8 * OCT_AHEAD) {
#pragma unroll
                for (int u = 0; u < OCT_AHEAD; u++) {
                    const int ru = r + 8 * u;
                    if (ru >= n_valid) break;
                    float v[8];
                    oct_vals(raw[u], v);
                    const bool have = ok[u];
                    ok[u] = load(ru + 8 * OCT_AHEAD, raw[u]);
                    if (have) accum(ru, v);
                }
            }
        } else {
            /* row r's V values (false: in no segment, p = 0); the next row's
             * are loaded before this row's FMAs, so their latency overlaps */
            auto fetch = [&](int r, float (&v)[8]) -> bool {
                const uint8_t *vr = sp.vptr[r];
                if (!vr) return false;
                vr += kh * ge.hbv;
                if constexpr (TV >= 0) v_pairs<TV>(vr, dg, k0, kn, v);
                else {
                    switch (d.type_v) {
#define X(TT) case TT: v_pairs<TT>(vr, dg, k0, kn, v); break;
                        LKV_CUDA_KV_TYPES(X)
#undef X
                    default:
#pragma unroll
                        for (int i = 0; i < 8; i++) v[i] = 0.f;
                    }
                }
                return true;
            };
            float v[8], vn[8];
            bool have = l8 < n_valid && fetch(l8, v);
            for (int r = l8; r < n_valid; r += 8) {
                const bool hn = r + 8 < n_valid && fetch(r + 8, vn);
                if (have) accum(r, v);
                have = hn;
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = vn[i];
            }
        }
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                if (OCT ? !oct_on : i >= 2 * kn) break;   /* uniform in the warp */
                const float x = attn_reduce8_shfl(o[g][i]);
                const int e = OCT ? 32 * k0 + 8 * dg + i : dg * 2 + 32 * (k0 + (i >> 1)) + (i & 1);
                if (l8 == 0) sp.comb[g * hd + e] = x;
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GM; g++) {
        acc[g][0] = acc[g][1] = 0.f;
        if (g >= G) continue;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int dd = tid + 128 * k;
            if (tid < ge.hdT && dd < hd) acc[g][k] = sp.comb[g * hd + dd];
        }
    }
    __syncthreads();
}

/* the G query heads in K's dot type (attn.cuh attn_qconv), one warp per
 * 32-group: values (f32 / f16 / bf16) or q8 codes as bytes, with the q8
 * scales and sums; the scale is applied to the scores */
template <int TK>
static __device__ __forceinline__ void load_q(const float *q, const lkv_attn_desc &d, int qi, int h0, int G,
                                              const attn_smem_ptrs &sp) {
    const int hd = d.head_dim, nb = hd / 32, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kind = attn_qkind(TK >= 0 ? TK : d.type_k);
    for (int t = warp; t < G * nb; t += ATT_WARPS) {
        const int g = t / nb, e = (t % nb) * 32 + lane;
        float qd, qs;
        const float c = attn_qconv(kind, q[((size_t)qi * d.n_head + h0 + g) * hd + e], qd, qs);
        if (kind <= 2) sp.qf[g * hd + e] = c;
        else ((int8_t *)sp.qf)[g * hd + e] = (int8_t)c;
        if (lane == 0) { sp.qd[t] = qd; sp.qs[t] = qs; }
    }
    __syncthreads();
}

// ---------------------------------------------------------------- kernels

/* where attn_seq writes a finished output (attn_whole) instead of the state:
 * out (n_q, n_head * hd), and its 8-bit codes for the o matmul (q: NULL when
 * they do not fit) */
struct attn_fin { float *out; int8_t *q; float *d, *s; };

/* grid (head groups, n_q): chunks in order, folded as they come; thread g < G
 * keeps head g's (m, l) and the fold factors in shared memory. Blocks start
 * with the last query, which sees the most rows: the longest blocks go
 * first and the short ones fill the end (causal prefill; pp512 of the 8B
 * shape 73.6-74.0 ms against 74.3 in query order). With fin.out
 * it starts from the reset state and writes the finished output (attn_finish)
 * instead of the state. */
template <int TK, int TV, int GM>
__global__ void __launch_bounds__(ATT_THREADS, GM == 4 ? 5 : 1)
attn_seq_kernel(float *st, const float *q, const __grid_constant__ lkv_attn_desc d, attn_geom ge,
                attn_dyn dy, const attn_fin fin) {
    extern __shared__ __align__(16) float sm[];
    __shared__ float run_m[GM], run_l[GM];
    __shared__ attn_fw fw[GM];
    pdl_enter();
    const int delta = attn_delta(dy);
    const int gi = blockIdx.x, qi = gridDim.y - 1 - blockIdx.y, qpos = d.q_pos0 + delta + qi;
    const int kh = gi / ge.n_sub, sub = gi % ge.n_sub;
    const int h0 = kh * ge.G_total + sub * GMAX, G = min(GMAX, ge.G_total - sub * GMAX);
    attn_smem_ptrs p = carve(sm, G, d.chunk, d.head_dim);
    load_q<TK>(q, d, qi, h0, G, p);

    const int hd = d.head_dim, tid = threadIdx.x;
    const bool owner = tid < ge.hdT;
    float o[GM][2], acc[GM][2];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g >= G) break;
        const float *sp = st + ((size_t)qi * d.n_head + h0 + g) * (hd + 2);
        o[g][0] = owner && !fin.out ? sp[2 + tid] : 0.f;
        o[g][1] = owner && !fin.out && tid + 128 < hd ? sp[2 + tid + 128] : 0.f;
    }
    if (tid < G) {
        const float *sp = st + ((size_t)qi * d.n_head + h0 + tid) * (hd + 2);
        run_m[tid] = fin.out ? -INFINITY : sp[0];
        run_l[tid] = fin.out ? 0.f : sp[1];
    }
    const int c_end = min(d.chunk_hi, qpos / d.chunk + 1);
    /* chunks wholly before a sliding window are skipped, as the CPU does */
    for (int c = max(d.chunk_lo, attn_window_lo(d, qpos) / d.chunk); c < c_end; c++) {
        chunk_partial<TK, TV, GM>(d, ge, dy, delta, c, qpos, kh, G, p, acc);
        if (tid < G) fw[tid] = attn_fold_w(run_m[tid], run_l[tid], p.pm[tid], p.pl[tid]);
        __syncthreads();
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
            const attn_fw f = fw[g];
            o[g][0] = attn_fold_o(o[g][0], acc[g][0], f);
            o[g][1] = attn_fold_o(o[g][1], acc[g][1], f);
        }
        __syncthreads();
    }
    if (fin.out) {
        __syncthreads();   /* run_l (no chunk: the values set above) */
#pragma unroll
        for (int g = 0; g < GM; g++) {
            if (g >= G) break;
#pragma unroll
            for (int k = 0; k < 2; k++) {
                if (!owner || tid + 128 * k >= hd) continue;   /* whole warps: hd % 32 == 0 */
                const float v = run_l[g] > 0.f ? o[g][k] : 0.f;
                const size_t i = ((size_t)qi * d.n_head + h0 + g) * hd + tid + 128 * k;
                fin.out[i] = v;
                if (fin.q) act_q8_at(v, i, fin.q, fin.d, fin.s);
            }
        }
        return;
    }
#pragma unroll
    for (int g = 0; g < GM; g++) {
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
    attn_smem_ptrs p = carve(sm, G, d.chunk, d.head_dim);
    float acc[GMAX][2];
    /* past the query, or wholly before its sliding window: empty partial */
    if (c * d.chunk > qpos || (c + 1) * d.chunk <= attn_window_lo(d, qpos)) {
        for (int g = 0; g < G; g++)
            if (tid == 0) ws[(((size_t)qi * d.n_head + h0 + g) * nc + x) * (hd + 2)] = -INFINITY;
        return;
    }
    load_q<TK>(q, d, qi, h0, G, p);
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

// ---------------------------------------------------------------- launchers

/* chunks the workspace holds for this micro-batch (attn_split) */
static int attn_ws_batch(const lkv_bctx *b, const lkv_attn_desc *d) {
    const size_t per_chunk = (size_t)d->n_q * d->n_head * (d->head_dim + 2) * sizeof(float);
    return (int)(b->attn_ws_bytes / per_chunk);
}

/* the kernel choice depends on the micro-batch shape only, never on the chunk
 * range, segments or position (the kernels give the same bits anyway):
 * attn_seq when there are queries enough to fill the GPU */
static bool attn_use_seq(const lkv_bctx *b, const lkv_attn_desc *d, const attn_geom &ge) {
    return (int64_t)d->n_q * d->n_head_kv * ge.n_sub >= 2 * b->n_sm || attn_ws_batch(b, d) < 1;
}

template <int TK, int TV>
static void attn_seq_launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d, const attn_geom &ge,
                            const attn_dyn &dy, const attn_fin &fin) {
    const int n_groups = d->n_head_kv * ge.n_sub, Gmax = min(GMAX, ge.G_total);
    const size_t smem = attn_smem_bytes(Gmax, d->chunk, d->head_dim);
    const dim3 grid(n_groups, d->n_q);
    /* GQA groups of <= 4 heads: a kernel with half the per-head registers */
    if (Gmax <= 4) lkv_launch(b, attn_seq_kernel<TK, TV, 4>, grid, ATT_THREADS, smem, st, q, *d, ge, dy, fin);
    else lkv_launch(b, attn_seq_kernel<TK, TV, GMAX>, grid, ATT_THREADS, smem, st, q, *d, ge, dy, fin);
    LKV_CUDA_LAUNCHED(b, "attn_seq");
}

template <int TK, int TV>
static void attn_launch(lkv_bctx *b, float *st, const float *q, const lkv_attn_desc *d,
                        const attn_geom &ge, const attn_dyn &dy) {
    const int n_groups = d->n_head_kv * ge.n_sub;
    const int Gmax = min(GMAX, ge.G_total);
    const size_t smem = attn_smem_bytes(Gmax, d->chunk, d->head_dim);
    if (smem > ATT_SMEM_MAX) { lkv_cuda_note(b, cudaErrorInvalidValue, "attn: chunk too large"); return; }
    const int batch = attn_ws_batch(b, d);
    if (attn_use_seq(b, d, ge)) {
        attn_seq_launch<TK, TV>(b, st, q, d, ge, dy, attn_fin{nullptr, nullptr, nullptr, nullptr});
        return;
    }
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
    cudaFuncSetAttribute(attn_seq_kernel<T, T, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX); \
    cudaFuncSetAttribute(attn_seq_kernel<T, T, GMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX); \
    cudaFuncSetAttribute(attn_split_kernel<T, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_SMEM_MAX);
    ATTN_INSTANCES(X)
    X(-1)
#undef X
    cudaGetLastError();
}

/* f(std::integral_constant<int, T>) with T the KV type when K and V share
 * one of the instantiated types, else T = -1 (the kernels switch per row) */
template <typename F> static void attn_typed(const lkv_attn_desc *d, F &&f) {
    if (d->type_k == d->type_v) {
        switch (d->type_k) {
#define X(T) case T: f(std::integral_constant<int, T>()); return;
            ATTN_INSTANCES(X)
#undef X
        default: break;
        }
    }
    f(std::integral_constant<int, -1>());
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

/* the geometry of d; false (with the reason noted when `note`) when unsupported */
static bool attn_geom_of(lkv_bctx *b, const lkv_attn_desc *d, attn_geom &ge, bool note) {
    const int hd = d->head_dim;
    if (hd % 32 || hd > 256 || d->n_head % d->n_head_kv || d->chunk <= 0 || d->n_segs > LKV_MAX_SEGS) {
        if (note) lkv_cuda_note(b, cudaErrorInvalidValue, "attn: unsupported geometry");
        return false;
    }
    ge.G_total = d->n_head / d->n_head_kv;
    ge.n_sub = (ge.G_total + GMAX - 1) / GMAX;
    ge.hdT = hd < 128 ? hd : 128;
    const int64_t kv_elems = (int64_t)d->n_head_kv * hd;
    ge.rbk = (size_t)kv_row_bytes(d->type_k, kv_elems);
    ge.rbv = (size_t)kv_row_bytes(d->type_v, kv_elems);
    ge.hbk = (size_t)kv_row_bytes(d->type_k, hd);
    ge.hbv = (size_t)kv_row_bytes(d->type_v, hd);
    if ((int64_t)ge.rbk <= 0 || (int64_t)ge.rbv <= 0) {
        if (note) lkv_cuda_note(b, cudaErrorInvalidValue, "attn: unsupported KV type");
        return false;
    }
    return true;
}

bool lkv_cuda_attn_check(lkv_bctx *b, const lkv_attn_desc *d) {
    attn_geom ge;
    return attn_geom_of(b, d, ge, true);
}

void lkv_cuda_attn_exact(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d) {
    if (d->n_q <= 0 || d->chunk_hi <= d->chunk_lo) return;
    attn_geom ge;
    if (!attn_geom_of(b, d, ge, true)) return;
    attn_typed(d, [&](auto tk) {
        attn_launch<decltype(tk)::value, decltype(tk)::value>(b, (float *)st, q, d, ge, attn_dyn_of(b, d));
    });
}

/* reset + accum + finish where attn_accum would run attn_seq: one launch that
 * starts from the reset state and writes out and its codes; 0 otherwise */
int lkv_cuda_attn_exact_whole(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *d) {
    attn_geom ge;
    if (d->n_q <= 0 || d->chunk_hi <= d->chunk_lo || !attn_geom_of(b, d, ge, false)) return 0;
    const int Gmax = min(GMAX, ge.G_total);
    if (attn_smem_bytes(Gmax, d->chunk, d->head_dim) > ATT_SMEM_MAX || !attn_use_seq(b, d, ge)) return 0;
    const int64_t n = (int64_t)d->n_q * d->n_head * d->head_dim;
    const bool qc = lkv_act_fits(b, d->n_q, (int64_t)d->n_head * d->head_dim);
    const attn_fin fin = {out, qc ? b->xq : nullptr, qc ? b->xd : nullptr, qc ? b->xs : nullptr};
    attn_typed(d, [&](auto tk) {
        attn_seq_launch<decltype(tk)::value, decltype(tk)::value>(b, (float *)st, q, d, ge, attn_dyn_of(b, d), fin);
    });
    if (qc) lkv_act_tag_set(b, out, n);
    return 1;
}

/* for tests/cuda/test_ops.c only (declared there): emulates a replayed step
 * (common.cuh: dyn_pos, cap_pos0) without a graph; NULL ends it */
extern "C" void lkv_cuda_attn_test_dyn(lkv_bctx *b, const int32_t *dyn_pos, int32_t cap_pos0) {
    b->dyn_pos = dyn_pos;
    b->cap_pos0 = cap_pos0;
}
