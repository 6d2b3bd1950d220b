/*
 * cuda/attn_fold.cu: the decode attention's fold (attn_fold2): the per-chunk
 * partials (m, l, normalised o) that attn_dec_ring.cu's and attn_dec_ring2.cu's
 * kernels leave in the workspace are folded in increasing chunk order into the
 * running state, with attn_fold_w / attn_fold_o's exact operations (attn.cuh:
 * the same bits as attn.cu's folds and the CPU's). The running maxima and the
 * exponentials of all partials are computed in parallel first, the scalar
 * chain once per chunk in a producer warp, and each dim's thread runs only the
 * vector chain, its partials' vectors coming through a shared-memory ring.
 */
#include "attn_kv.cuh"
#include "pdl.cuh"

enum { AD_FOLD_PIECE = 1024 };

/* attn_fold2: tiles of FD_T chunks; the partials' vectors reach shared memory
 * through a ring of FD_NSV tiles (cp.async, fd_copier) */
enum { FD_T = 32, FD_NSV = 4 };

static __device__ __forceinline__ int fd_ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.cta.shared.b32 %0, [%1];\n" : "=r"(v) : "r"((unsigned)__cvta_generic_to_shared(p)) : "memory");
    return v;
}
static __device__ __forceinline__ void fd_st_release(int *p, int v) {
    asm volatile("st.release.cta.shared.b32 [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(p)), "r"(v) : "memory");
}

/* a consumer thread's share of copying tile vt's vectors into ring slot
 * vt % FD_NSV. W8 (hd fixed at compile time, one dim per thread): 8-byte
 * copies, lane L of warp w taking dims 32w + 2 (L & 15) + {0, 1} of chunk
 * 2u + (L >> 4) (the warp's own dims: a __syncwarp makes them its lanes');
 * else 4 bytes: the thread's own dims tid, tid + NC of every chunk u. */
template <int NC, int NV, int HDC>
struct fd_copier {
    static constexpr bool W8 = HDC != 0 && HDC == NC && NV == 1;
    static constexpr int U = W8 ? FD_T / 2 : FD_T;   /* copy units per tile */
    float *d;
    const float *s;
    int n;   /* chunks in the tile (<= 0: none) */
    __device__ __forceinline__ fd_copier(float *VB, const float *wp, int hd, int nc, int vt) {
        const int tid = threadIdx.x, c0 = vt * FD_T;
        float *slot = VB + (size_t)(vt % FD_NSV) * FD_T * NC * NV;
        n = nc - c0;
        if constexpr (W8) {
            const int r = (tid & 31) >> 4, col = (tid & ~31) + 2 * (tid & 15);
            d = slot + r * NC + col;
            s = wp + (size_t)(min(c0, nc) + r) * (HDC + 2) + 2 + col;   /* used only below n */
        } else {
            d = slot + tid;
            s = wp + (size_t)min(c0, nc) * (hd + 2) + 2 + tid;
        }
    }
    /* unit u; FULL: a whole tile, no checks */
    template <bool FULL>
    __device__ __forceinline__ void unit(int u, int hd) const {
        const int tid = threadIdx.x;
        if constexpr (W8) {
            if (FULL || 2 * u + ((tid & 31) >> 4) < n) cp_async<8>(d + u * 2 * NC, s + (size_t)u * 2 * (HDC + 2));
        } else if (FULL || u < n) {
            if (HDC == NC * NV || tid < hd) cp_async<4>(d + u * NC * NV, s + (size_t)u * (hd + 2));
            if (NV == 2 && tid + NC < hd) cp_async<4>(d + u * NC * NV + NC, s + (size_t)u * (hd + 2) + NC);
        }
    }
    __device__ __forceinline__ void all(int hd) const {
#pragma unroll 8
        for (int u = 0; u < U; u++) unit<false>(u, hd);
    }
};

/* a consumer's fold of a whole tile of merged partials (X, Y, Z at the tile:
 * wa, wb, il; vb: its dims in the tile's slot); REFILL: rf's whole tile
 * copied between the chain's operations */
template <int NC, int NV, int HDC, bool REFILL>
static __device__ __forceinline__ void fd_fast(float (&o)[NV], const float *X, const float *Y, const float *Z,
                                               const float *vb, const fd_copier<NC, NV, HDC> &rf, int hd) {
    using C = fd_copier<NC, NV, HDC>;
    const float4 *X4 = (const float4 *)X, *Y4 = (const float4 *)Y, *Z4 = (const float4 *)Z;
#pragma unroll
    for (int q = 0; q < FD_T / 4; q++) {
        const float4 a = X4[q], b = Y4[q], c = Z4[q];
        const float wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w}, il[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int k = 4 * q + j;
            const float *v = vb + k * NC * NV;
#pragma unroll
            for (int e = 0; e < NV; e++)
                o[e] = __fmul_rn(__fadd_rn(__fmul_rn(o[e], wa[j]), __fmul_rn(v[e * NC], wb[j])), il[j]);
            if constexpr (REFILL) {
                if (!C::W8 || k % 2 == 0) rf.template unit<true>(C::W8 ? k / 2 : k, hd);
            }
        }
    }
}

/* grid (n_head, n_q), NC + 32 threads (NC = hd rounded up to warps, at most
 * 128; NV = 2 values per thread for hd in (128, 256]; HDC = hd when fixed at
 * compile time, else 0): folds nc partials in chunk order with attn_fold_w /
 * attn_fold_o's operations (attn.cuh), each performed once, by one thread,
 * with the operands as before:
 *  per piece of up to AD_FOLD_PIECE chunks, 1. (m, l) of every partial into
 *  shared memory; 2. the running maxima (last warp, the lane-contiguous
 *  segments as ever: fmaxf in the same association); 3. the exponentials, the
 *  kinds (empty: nothing; the first non-empty: copied; else merged) and
 *  wb = lc * e^(mc - M), all threads; 4. warp-specialised: the last warp
 *  ("producer") runs the scalar chain wa = l * a, s = wa + wb (one lane) and
 *  il = 1 / s (a lane per chunk) tile after tile, publishing each through a
 *  shared counter (release / acquire); the NC consumer threads run only
 *  o = (o * wa + v * wb) * il per dim, v from the cp.async ring, refilled
 *  FD_NSV - 1 tiles ahead between the chain's operations. Tiles with an
 *  empty / copied partial (or short) take a per-chunk path. Arrays in place:
 *  X = mc -> a -> wa, Y = lc -> wb (lc for a copy), Z = running max -> s -> il. */
template <int NC, int NV, int HDC>
__global__ void __launch_bounds__(NC + 32, 1)
attn_fold2_kernel(float *st, const float *ws, int n_head, int hd_, int nc) {
    constexpr int P = AD_FOLD_PIECE, NT = NC + 32, R3 = 4;
    static_assert(P % FD_T == 0, "pieces of whole tiles");
    __shared__ __align__(16) float X[P], Y[P], Z[P];
    __shared__ uint8_t K[P];                     /* 0 empty, 1 copied, 2 merged */
    __shared__ int dirty[P / FD_T];              /* tile holds a kind other than 2 */
    __shared__ float seg_max[32], seg_run[32];   /* per producer lane: its segment's max; the run before it */
    __shared__ int prod, last_ns;                /* chunks published (whole call); last non-empty in the piece */
    extern __shared__ __align__(16) float VB[];  /* FD_NSV tiles of FD_T chunks x NC * NV */
    const int hd = HDC ? HDC : hd_;
    pdl_enter();
    const int h = blockIdx.x, qi = blockIdx.y, tid = threadIdx.x, lane = tid & 31;
    const bool producer = tid >= NC;
    float *sp = st + ((size_t)qi * n_head + h) * (hd + 2);
    const float *wp = ws + ((size_t)qi * n_head + h) * nc * (hd + 2);
    float m = 0.f, l = 0.f, o[NV];
    if (producer) {
        m = sp[0];
        l = sp[1];
    } else {
        o[0] = tid < hd ? sp[2 + tid] : 0.f;
        if constexpr (NV == 2) o[1] = tid + NC < hd ? sp[2 + tid + NC] : 0.f;
    }
    if (tid == 0) prod = 0;
    int avail = 0;   /* consumer: chunks known published */
    for (int x0 = 0; x0 < nc; x0 += P) {
        const int np = min(P, nc - x0), per = (np + 31) / 32;
        if (x0) __syncthreads();   /* the previous piece consumed */
        /* 1. (m, l) of the piece's partials; at the start also the ring's first tiles */
        for (int i = tid; i < np; i += NT) {
            cp_async<4>(X + i, wp + (size_t)(x0 + i) * (hd + 2));
            cp_async<4>(Y + i, wp + (size_t)(x0 + i) * (hd + 2) + 1);
        }
        cp_commit();
        if (tid < P / FD_T) dirty[tid] = 0;
        if (tid == 0) last_ns = -1;
        if (x0 == 0 && !producer) {
            for (int vt = 0; vt < FD_NSV - 1; vt++) {
                fd_copier<NC, NV, HDC>(VB, wp, hd, nc, vt).all(hd);
                cp_commit();
            }
            cp_wait<FD_NSV - 1>();   /* the (m, l) group only */
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        /* 2. running max (exact in this association): producer warp, lane-contiguous pieces */
        if (producer) {
            const float m0 = __shfl_sync(0xffffffffu, m, 0);
            const int lo = lane * per, hi = min(np, lo + per);
            float mx = -INFINITY;
            for (int i = lo; i < hi; i++) mx = fmaxf(mx, X[i]);
            seg_max[lane] = mx;
            __syncwarp();
            float run = m0;
#pragma unroll
            for (int w = 0; w < 31; w++)
                if (w < lane) run = fmaxf(run, seg_max[w]);
            seg_run[lane] = run;
            for (int i = lo; i < hi; i++) {
                run = fmaxf(run, X[i]);
                Z[i] = run;
            }
        }
        __syncthreads();
        /* 3. attn_fold_w's exponentials, the kinds, wb: all threads, R3 chunks
         * each at a time (operands first: the exponentials overlap) */
        int my_last = -1;
        for (int g = 0; g < np; g += R3 * NT) {
            float mc[R3], run[R3], prev[R3], lc[R3];
#pragma unroll
            for (int r = 0; r < R3; r++) {
                const int i = g + r * NT + tid;
                if (i < np) {
                    const int sg = i / per;   /* the producer lane whose segment holds i */
                    mc[r] = X[i];
                    run[r] = Z[i];
                    lc[r] = Y[i];
                    prev[r] = i == sg * per ? seg_run[sg] : Z[i - 1];
                }
            }
#pragma unroll
            for (int r = 0; r < R3; r++) {
                const int i = g + r * NT + tid;
                if (i < np) {
                    const float a = prev[r] == -INFINITY ? -1.f : attn_expf_libm(__fsub_rn(prev[r], run[r]));
                    const float c = mc[r] == -INFINITY ? -1.f : attn_expf_libm(__fsub_rn(mc[r], run[r]));
                    const int kind = c < 0.f ? 0 : a < 0.f ? 1 : 2;
                    X[i] = a;
                    Y[i] = kind == 2 ? __fmul_rn(lc[r], c) : lc[r];
                    K[i] = (uint8_t)kind;
                    if (kind != 2) dirty[i / FD_T] = 1;
                    if (kind != 0) my_last = i;
                }
            }
        }
        if (my_last >= 0) atomicMax(&last_ns, my_last);
        __syncthreads();
        /* 4. the chains */
        if (producer) {
            if (lane == 0 && last_ns >= 0) m = Z[last_ns];   /* the running max at the last non-empty partial */
            for (int i0 = 0; i0 < np; i0 += FD_T) {
                const int n = min((int)FD_T, np - i0);
                if (lane == 0) {
                    if (n == FD_T && !dirty[i0 / FD_T]) {
                        float4 *X4 = (float4 *)(X + i0), *Z4 = (float4 *)(Z + i0);
                        const float4 *Y4 = (const float4 *)(Y + i0);
                        float4 ra[FD_T / 4], rb[FD_T / 4];   /* all loads first: the chain waits on none */
#pragma unroll
                        for (int q = 0; q < FD_T / 4; q++) {
                            ra[q] = X4[q];
                            rb[q] = Y4[q];
                        }
#pragma unroll
                        for (int q = 0; q < FD_T / 4; q++) {
                            const float4 a = ra[q], b = rb[q];
                            float4 wa, s;
                            wa.x = __fmul_rn(l, a.x); s.x = __fadd_rn(wa.x, b.x);
                            wa.y = __fmul_rn(s.x, a.y); s.y = __fadd_rn(wa.y, b.y);
                            wa.z = __fmul_rn(s.y, a.z); s.z = __fadd_rn(wa.z, b.z);
                            wa.w = __fmul_rn(s.z, a.w); s.w = __fadd_rn(wa.w, b.w);
                            l = s.w;
                            X4[q] = wa;
                            Z4[q] = s;
                        }
                    } else {
                        for (int i = i0; i < i0 + n; i++) {
                            const int kind = K[i];
                            if (kind == 2) {
                                const float wa = __fmul_rn(l, X[i]), s = __fadd_rn(wa, Y[i]);
                                X[i] = wa;
                                Z[i] = s;
                                l = s;
                            } else if (kind == 1) {
                                l = Y[i];
                            }
                        }
                    }
                }
                __syncwarp();
                if (lane < n && K[i0 + lane] == 2) Z[i0 + lane] = __frcp_rn(Z[i0 + lane]);
                __syncwarp();
                if (lane == 0) fd_st_release(&prod, x0 + i0 + n);
            }
        } else {
            for (int i0 = 0; i0 < np; i0 += FD_T) {
                const int n = min((int)FD_T, np - i0), vt = (x0 + i0) / FD_T;
                if (avail < x0 + i0 + n)
                    do avail = fd_ld_acquire(&prod); while (avail < x0 + i0 + n);
                cp_wait<FD_NSV - 2>();   /* tile vt is in */
                if constexpr (fd_copier<NC, NV, HDC>::W8) __syncwarp();   /* and the warp's other copies */
                const float *vb = VB + (size_t)(vt % FD_NSV) * FD_T * NC * NV + tid;
                /* the refill: tile vt + FD_NSV - 1 into the slot of tile vt - 1 (read), one group */
                const fd_copier<NC, NV, HDC> rf(VB, wp, hd, nc, vt + FD_NSV - 1);
                if (n == FD_T && !dirty[i0 / FD_T]) {
                    if (rf.n >= FD_T) {
                        fd_fast<NC, NV, HDC, true>(o, X + i0, Y + i0, Z + i0, vb, rf, hd);
                    } else {
                        rf.all(hd);
                        fd_fast<NC, NV, HDC, false>(o, X + i0, Y + i0, Z + i0, vb, rf, hd);
                    }
                } else {
                    rf.all(hd);
                    for (int k = 0; k < n; k++) {
                        const int i = i0 + k, kind = K[i];
                        const float *v = vb + k * NC * NV;
                        if (kind == 2) {
                            const float wa = X[i], wb = Y[i], il = Z[i];
#pragma unroll
                            for (int e = 0; e < NV; e++)
                                o[e] = __fmul_rn(__fadd_rn(__fmul_rn(o[e], wa), __fmul_rn(v[e * NC], wb)), il);
                        } else if (kind == 1) {
#pragma unroll
                            for (int e = 0; e < NV; e++) o[e] = v[e * NC];
                        }
                    }
                }
                cp_commit();
            }
        }
    }
    if (producer) {
        if (lane == 0) { sp[0] = m; sp[1] = l; }
    } else {
        cp_wait<0>();
        if (tid < hd) sp[2 + tid] = o[0];
        if constexpr (NV == 2) if (tid + NC < hd) sp[2 + tid + NC] = o[1];
    }
}

// ---------------------------------------------------------------- launcher / entry point

template <int NC, int NV, int HDC>
static void fold_launch(lkv_bctx *b, float *st, int n_head, int hd, int n_q, int nc) {
    constexpr int bytes = FD_NSV * FD_T * NC * NV * (int)sizeof(float);
    static unsigned configured = 0;
    lkv_cuda_smem_limit(b, &configured, attn_fold2_kernel<NC, NV, HDC>, bytes, "attn_fold2: shared memory limit");
    lkv_launch(b, attn_fold2_kernel<NC, NV, HDC>, dim3(n_head, n_q), NC + 32, bytes, st, (const float *)b->attn_ws,
               n_head, hd, nc);
    LKV_CUDA_LAUNCHED(b, "attn_fold2");
}

/* head_dim up to 256 (the decode kernels': 64 and 128, with their row pitch
 * fixed at compile time) */
void attn_dec_fold(lkv_bctx *b, float *st, int n_head, int hd, int n_q, int nc) {
    if (hd == 128) fold_launch<128, 1, 128>(b, st, n_head, hd, n_q, nc);
    else if (hd == 64) fold_launch<64, 1, 64>(b, st, n_head, hd, n_q, nc);
    else if (hd > 128) fold_launch<128, 2, 0>(b, st, n_head, hd, n_q, nc);
    else if (hd > 96) fold_launch<128, 1, 0>(b, st, n_head, hd, n_q, nc);
    else if (hd > 64) fold_launch<96, 1, 0>(b, st, n_head, hd, n_q, nc);
    else if (hd > 32) fold_launch<64, 1, 0>(b, st, n_head, hd, n_q, nc);
    else fold_launch<32, 1, 0>(b, st, n_head, hd, n_q, nc);
}
