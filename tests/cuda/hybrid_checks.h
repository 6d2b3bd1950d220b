/*
 * tests/cuda/hybrid_checks.h: the CUDA ops of the hybrid (qwen35) layers
 * (cuda/gating.cu, conv1d.cu, deltanet.cu) against the CPU backend's, on
 * fresh random inputs and several shapes; included by test_ops.c (it uses
 * that file's harness: gb / cb, fill, dup_dev, get, n_diff, check), run with
 * `test_ops hybrid`.
 *
 * - split_rows, sigmoid_mul: the CPU's bits.
 * - rmsnorm_gated, ssm_conv: the CPU's arithmetic (its exp, its order), held
 *   to 1e-6 relative with the count of differing values printed.
 * - delta_rule: n = 1, 5, 64, 65, 150 tokens (the CPU runs n > 1 in chunks of
 *   64, the GPU the recurrence under 64 tokens, else the chunked form where
 *   the shape allows), several head shapes (GQA 1x3, 2x3, 1x1, key
 *   heads of 48 .. 512, value columns not a multiple of the block's): the
 *   outputs and the state after the call within 1e-4 relative of the CPU; and
 *   the GPU token by token against the GPU in one call.
 * - the chunked form (deltanet_chunk.cu, forced through lkv_cuda_tuning.delta)
 *   over two micro-batches crossing chunk boundaries against the CPU's
 *   recurrence (one token a call) and the GPU's, within 1e-4 relative: the
 *   outputs, the state between the calls (a snapshot) and after; the second
 *   call again from the snapshot: the same bits.
 * Then "info" lines (timings at the Qwen3.5-27B layer shape, no checks): the
 * conv and the delta rule per step, and the delta rule's recurrence against
 * its chunked form at n = 16 .. 32768.
 */

/* a CPU context whose delta-rule scratch fits (dk, dv) (ctx_init sizes it
 * from a hybrid model's head sizes) */
static lkv_bctx *hybrid_cpu_ctx(int dk, int dv) {
    static const lkv_arch_traits hy = {.name = "qwen35", .hybrid = true};
    static struct lkv_model fake;
    memset(&fake, 0, sizeof fake);
    fake.arch = &hy;
    fake.hp.n_embd = 64; fake.hp.n_ff = 64; fake.hp.n_head = 1; fake.hp.head_dim = 64;
    fake.hp.ssm_head_k_dim = dk; fake.hp.ssm_head_v_dim = dv;
    lkv_bctx *c = NULL;
    if (C->ctx_init(&c, &fake, 2, 512)) return NULL;
    return c;
}

static lkv_weight f32_vec(const float *h, int n) {
    lkv_weight w = {LKV_TYPE_F32, 1, n, sizeof(float) * (size_t)n, h, dup_dev(h, sizeof(float) * n)};
    return w;
}

static void test_hybrid_gating(void) {
    const int rows = 37, dim = 96;
    const size_t N = (size_t)rows * dim;
    float *x = malloc(sizeof(float) * 2 * N), *z = malloc(sizeof(float) * N);
    float *cq = malloc(sizeof(float) * N), *cg = malloc(sizeof(float) * N);
    float *gq = malloc(sizeof(float) * N), *gg = malloc(sizeof(float) * N);
    fill(x, 2 * N, 4.f);
    fill(z, N, 4.f);
    float *dx = dup_dev(x, sizeof(float) * 2 * N), *dq = dev_buf(sizeof(float) * N);
    float *dg = dev_buf(sizeof(float) * N), *dz = dup_dev(z, sizeof(float) * N);

    G->split_rows(gb, dq, dg, dx, rows, dim);
    get(gq, dq, sizeof(float) * N); get(gg, dg, sizeof(float) * N);
    C->split_rows(cb, cq, cg, x, rows, dim);
    check(n_diff(gq, cq, N) == 0 && n_diff(gg, cg, N) == 0, "split_rows %dx%d: %zu + %zu values differ",
          rows, dim, n_diff(gq, cq, N), n_diff(gg, cg, N));

    G->sigmoid_mul(gb, dq, dz, (int64_t)N);
    get(gq, dq, sizeof(float) * N);
    C->sigmoid_mul(cb, cq, z, (int64_t)N);
    check(n_diff(gq, cq, N) == 0, "sigmoid_mul n=%zu: %zu values differ from the CPU (rel err %.2e)",
          N, n_diff(gq, cq, N), rel_err_f(gq, cq, N));

    const int dims[] = {32, 40, 128, 256, 300};
    for (int di = 0; di < NELEM(dims); di++) {
        const int d = dims[di], n = (int)(N / d);
        float *nw = malloc(sizeof(float) * d);
        fill(nw, d, 1.f);
        lkv_weight w = f32_vec(nw, d);
        /* in place (out = x), as forward.c calls it */
        float *dxx = dup_dev(cg, sizeof(float) * (size_t)n * d);
        G->rmsnorm_gated(gb, dxx, dxx, &w, dz, n, d, 1e-6f);
        get(gq, dxx, sizeof(float) * (size_t)n * d);
        memcpy(cq, cg, sizeof(float) * (size_t)n * d);
        C->rmsnorm_gated(cb, cq, cq, &w, z, n, d, 1e-6f);
        const size_t M = (size_t)n * d;
        const double e = rel_err_f(gq, cq, M);
        check(e < 1e-6, "rmsnorm_gated rows=%d dim=%d: rel err %.2e, %zu of %zu values differ", n, d,
              e, n_diff(gq, cq, M), M);
        cudaFree(dxx); cudaFree(w.dev); free(nw);
    }
    free(x); free(z); free(cq); free(cg); free(gq); free(gg);
    cudaFree(dx); cudaFree(dq); cudaFree(dg); cudaFree(dz);
}

/* two calls in a row (n1 then n2 tokens): both outputs and the final state */
static void test_hybrid_conv_shape(int n1, int n2, int ch, int K) {
    const int S = K - 1, n = n1 + n2;
    float *x = malloc(sizeof(float) * (size_t)n * ch), *taps = malloc(sizeof(float) * (size_t)ch * K);
    float *st = malloc(sizeof(float) * (size_t)(S > 0 ? S : 1) * ch);
    float *co = malloc(sizeof(float) * (size_t)n * ch), *go = malloc(sizeof(float) * (size_t)n * ch);
    float *gst = malloc(sizeof(float) * (size_t)(S > 0 ? S : 1) * ch);
    fill(x, (size_t)n * ch, 3.f);
    fill(taps, (size_t)ch * K, 1.f);
    fill(st, (size_t)S * ch, 3.f);
    lkv_weight w = {LKV_TYPE_F32, ch, K, sizeof(float) * K, taps, dup_dev(taps, sizeof(float) * (size_t)ch * K)};
    float *dx = dup_dev(x, sizeof(float) * (size_t)n * ch), *dout = dev_buf(sizeof(float) * (size_t)n * ch);
    float *dst = dup_dev(st, sizeof(float) * (size_t)(S > 0 ? S : 1) * ch);
    G->ssm_conv(gb, dout, dx, dst, &w, n1, ch);
    G->ssm_conv(gb, dout + (size_t)n1 * ch, dx + (size_t)n1 * ch, dst, &w, n2, ch);
    get(go, dout, sizeof(float) * (size_t)n * ch);
    get(gst, dst, sizeof(float) * (size_t)S * ch);
    C->ssm_conv(cb, co, x, st, &w, n1, ch);
    C->ssm_conv(cb, co + (size_t)n1 * ch, x + (size_t)n1 * ch, st, &w, n2, ch);
    const size_t M = (size_t)n * ch, MS = (size_t)S * ch;
    const double eo = rel_err_f(go, co, M), es = MS ? rel_err_f(gst, st, MS) : 0.0;
    check(eo < 1e-6 && n_diff(gst, st, MS) == 0,
          "ssm_conv n=%d+%d ch=%d K=%d: out rel err %.2e (%zu of %zu differ), state %zu of %zu differ",
          n1, n2, ch, K, eo, n_diff(go, co, M), M, n_diff(gst, st, MS), MS);
    (void)es;
    free(x); free(taps); free(st); free(co); free(go); free(gst);
    cudaFree(w.dev); cudaFree(dx); cudaFree(dout); cudaFree(dst);
}

static void test_hybrid_conv(void) {
    test_hybrid_conv_shape(1, 1, 96, 4);      /* decode: n < K - 1 */
    test_hybrid_conv_shape(2, 1, 96, 4);
    test_hybrid_conv_shape(5, 3, 160, 4);
    test_hybrid_conv_shape(70, 1, 1280, 4);   /* prefill, then decode */
    test_hybrid_conv_shape(130, 9, 256, 2);
    test_hybrid_conv_shape(3, 4, 96, 1);      /* no state */
    test_hybrid_conv_shape(20, 2, 64, 16);
}

/* random inputs of one delta-rule call: qkv (n, stride), beta_in, alpha (n, nv) */
static void delta_inputs(float *qkv, float *bi, float *al, int n, int stride, int nv) {
    fill(qkv, (size_t)n * stride, 2.f);
    fill(bi, (size_t)n * nv, 3.f);
    fill(al, (size_t)n * nv, 2.f);
}

static void test_hybrid_delta_shape(int nk, int nv, int dk, int dv) {
    lkv_bctx *cpu = hybrid_cpu_ctx(dk, dv);
    if (!cpu) { check(0, "delta_rule: CPU context for dk=%d dv=%d: %s", dk, dv, lkv_last_error()); return; }
    const lkv_delta_desc d = {nk, nv, dk, dv, 2 * nk * dk + nv * dv, 1e-6f};
    float ah[64], dth[64];
    for (int h = 0; h < nv; h++) {
        ah[h] = -expf(logf(0.02f) + (rndf() + 1.f) * 0.5f * (logf(2.f) - logf(0.02f)));
        dth[h] = -1.f + 2.f * rndf();
    }
    lkv_weight a = f32_vec(ah, nv), dt = f32_vec(dth, nv);
    const size_t SN = (size_t)nv * dk * dv;
    const int ns[] = {1, 5, 64, 65, 150};
    for (int ni = 0; ni < NELEM(ns); ni++) {
        const int n = ns[ni];
        const size_t QN = (size_t)n * d.stride, ON = (size_t)n * nv * dv, BN = (size_t)n * nv;
        float *qkv = malloc(sizeof(float) * QN), *bi = malloc(sizeof(float) * BN), *al = malloc(sizeof(float) * BN);
        float *st = malloc(sizeof(float) * SN), *gst = malloc(sizeof(float) * SN), *st0 = malloc(sizeof(float) * SN);
        float *co = malloc(sizeof(float) * ON), *go = malloc(sizeof(float) * ON), *g1 = malloc(sizeof(float) * ON);
        delta_inputs(qkv, bi, al, n, d.stride, nv);
        fill(st, SN, 0.5f);
        memcpy(st0, st, sizeof(float) * SN);
        float *dq = dup_dev(qkv, sizeof(float) * QN), *db = dup_dev(bi, sizeof(float) * BN);
        float *da = dup_dev(al, sizeof(float) * BN), *ds = dup_dev(st, sizeof(float) * SN);
        float *dout = dev_buf(sizeof(float) * ON);
        G->delta_rule(gb, dout, dq, db, da, &a, &dt, ds, &d, n);
        get(go, dout, sizeof(float) * ON);
        get(gst, ds, sizeof(float) * SN);
        C->delta_rule(cpu, co, qkv, bi, al, &a, &dt, st, &d, n);
        const double eo = rel_err_f(go, co, ON), es = rel_err_f(gst, st, SN);
        check(eo < 1e-4 && es < 1e-4, "delta_rule nk=%d nv=%d dk=%d dv=%d n=%-3d: out rel err %.2e, "
              "state rel err %.2e", nk, nv, dk, dv, n, eo, es);
        /* the GPU token by token from the same start */
        if (n > 1 && n <= 65) {
            cudaMemcpy(ds, st0, sizeof(float) * SN, cudaMemcpyHostToDevice);
            cudaDeviceSynchronize();
            for (int t = 0; t < n; t++)
                G->delta_rule(gb, dout + (size_t)t * nv * dv, dq + (size_t)t * d.stride, db + (size_t)t * nv,
                              da + (size_t)t * nv, &a, &dt, ds, &d, 1);
            get(g1, dout, sizeof(float) * ON);
            get(st0, ds, sizeof(float) * SN);
            const double e1 = rel_err_f(g1, go, ON), s1 = rel_err_f(st0, gst, SN);
            check(e1 < 1e-5 && s1 < 1e-5, "delta_rule nk=%d nv=%d dk=%d dv=%d: %d single tokens vs one "
                  "call: out rel err %.2e (%zu of %zu differ), state %.2e", nk, nv, dk, dv, n, e1,
                  n_diff(g1, go, ON), ON, s1);
        }
        free(qkv); free(bi); free(al); free(st); free(gst); free(st0); free(co); free(go); free(g1);
        cudaFree(dq); cudaFree(db); cudaFree(da); cudaFree(ds); cudaFree(dout);
    }
    cudaFree(a.dev); cudaFree(dt.dev);
    C->ctx_free(cpu);
}

static void test_hybrid_delta(void) {
    test_hybrid_delta_shape(2, 4, 32, 32);     /* the tiny test model's */
    test_hybrid_delta_shape(1, 3, 48, 40);     /* GQA 1x3; key rows and value columns masked */
    test_hybrid_delta_shape(2, 6, 128, 128);   /* Qwen3.5-27B's head sizes (48 / 16 heads there) */
    test_hybrid_delta_shape(2, 2, 64, 32);
    test_hybrid_delta_shape(1, 1, 256, 64);
    test_hybrid_delta_shape(1, 2, 512, 24);    /* the largest head the model accepts: 32 lanes a column */
    test_hybrid_delta_shape(4, 8, 16, 16);
}

/* figures, not checks: one Gated DeltaNet layer's conv and delta rule at the
 * Qwen3.5-27B shape (16 key / 48 value heads of 128, conv 4 over 10240
 * channels) for a decode step and a 512-token micro-batch */
static void time_hybrid(void) {
    const int nk = 16, nv = 48, dk = 128, dv = 128, ch = 2 * nk * dk + nv * dv, K = 4, N = 512;
    const lkv_delta_desc d = {nk, nv, dk, dv, ch, 1e-6f};
    float ah[48], dth[48];
    for (int h = 0; h < nv; h++) { ah[h] = -0.5f - 0.5f * rndf(); dth[h] = rndf(); }
    lkv_weight a = f32_vec(ah, nv), dt = f32_vec(dth, nv);
    float *h = malloc(sizeof(float) * (size_t)N * ch), *taps = malloc(sizeof(float) * (size_t)ch * K);
    fill(h, (size_t)N * ch, 1.f);
    fill(taps, (size_t)ch * K, 0.5f);
    lkv_weight w = {LKV_TYPE_F32, ch, K, sizeof(float) * K, taps, dup_dev(taps, sizeof(float) * (size_t)ch * K)};
    float *dq = dup_dev(h, sizeof(float) * (size_t)N * ch), *dc = dev_buf(sizeof(float) * (size_t)N * ch);
    float *db = dup_dev(h, sizeof(float) * (size_t)N * nv), *da = dup_dev(h + N * nv, sizeof(float) * (size_t)N * nv);
    float *dcs = dev_buf(sizeof(float) * (size_t)(K - 1) * ch), *ds = dev_buf(sizeof(float) * (size_t)nv * dk * dv);
    float *dout = dev_buf(sizeof(float) * (size_t)N * nv * dv);
    cudaMemset(dcs, 0, sizeof(float) * (size_t)(K - 1) * ch);
    cudaMemset(ds, 0, sizeof(float) * (size_t)nv * dk * dv);
    cudaDeviceSynchronize();
    const int ns[] = {1, N};
    for (int i = 0; i < 2; i++) {
        const int n = ns[i], reps = n == 1 ? 200 : 10;
        double us[2];
        for (int op = 0; op < 2; op++) {
            G->sync(gb);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < reps; r++) {
                if (op == 0) G->ssm_conv(gb, dc, dq, dcs, &w, n, ch);
                else G->delta_rule(gb, dout, dc, db, da, &a, &dt, ds, &d, n);
            }
            G->sync(gb);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            us[op] = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3) / reps;
        }
        printf("info hybrid layer (27B shape) n=%d: ssm_conv %.1f us, delta_rule %.1f us (%.2f us/token)\n",
               n, us[0], us[1], us[1] / n);
    }
    free(h); free(taps);
    cudaFree(a.dev); cudaFree(dt.dev); cudaFree(w.dev); cudaFree(dq); cudaFree(dc); cudaFree(db);
    cudaFree(da); cudaFree(dcs); cudaFree(ds); cudaFree(dout);
}

/* the chunked form (deltanet_chunk.cu, forced) over two micro-batches of n1 and n2
 * tokens against the CPU's recurrence (one token a call) and the GPU's: outputs,
 * the state between the two (a snapshot) and after; then from the snapshot
 * again: the second micro-batch's bits once more */
static void test_hybrid_delta_chunked(int nk, int nv, int dk, int dv, int n1, int n2) {
    lkv_bctx *cpu = hybrid_cpu_ctx(dk, dv);
    if (!cpu) { check(0, "delta_rule: CPU context for dk=%d dv=%d: %s", dk, dv, lkv_last_error()); return; }
    const int n = n1 + n2;
    const lkv_delta_desc d = {nk, nv, dk, dv, 2 * nk * dk + nv * dv, 1e-6f};
    float *ah = malloc(sizeof(float) * nv), *dth = malloc(sizeof(float) * nv);
    for (int h = 0; h < nv; h++) {
        ah[h] = -expf(logf(0.02f) + (rndf() + 1.f) * 0.5f * (logf(2.f) - logf(0.02f)));
        dth[h] = -1.f + 2.f * rndf();
    }
    lkv_weight a = f32_vec(ah, nv), dt = f32_vec(dth, nv);
    const size_t SN = (size_t)nv * dk * dv, QN = (size_t)n * d.stride, ON = (size_t)n * nv * dv, BN = (size_t)n * nv;
    float *qkv = malloc(sizeof(float) * QN), *bi = malloc(sizeof(float) * BN), *al = malloc(sizeof(float) * BN);
    float *st = malloc(sizeof(float) * SN), *st0 = malloc(sizeof(float) * SN), *cs1 = malloc(sizeof(float) * SN);
    float *gs1 = malloc(sizeof(float) * SN), *gst = malloc(sizeof(float) * SN), *rst = malloc(sizeof(float) * SN);
    float *co = malloc(sizeof(float) * ON), *go = malloc(sizeof(float) * ON), *ro = malloc(sizeof(float) * ON);
    float *again = malloc(sizeof(float) * ON);
    delta_inputs(qkv, bi, al, n, d.stride, nv);
    fill(st, SN, 0.5f);
    memcpy(st0, st, sizeof(float) * SN);
    for (int t = 0; t < n; t++) {   /* the CPU's recurrence: one token a call */
        C->delta_rule(cpu, co + (size_t)t * nv * dv, qkv + (size_t)t * d.stride, bi + (size_t)t * nv,
                      al + (size_t)t * nv, &a, &dt, st, &d, 1);
        if (t == n1 - 1) memcpy(cs1, st, sizeof(float) * SN);
    }
    float *dq = dup_dev(qkv, sizeof(float) * QN), *db = dup_dev(bi, sizeof(float) * BN);
    float *da = dup_dev(al, sizeof(float) * BN), *ds = dup_dev(st0, sizeof(float) * SN);
    float *dout = dev_buf(sizeof(float) * ON);
    float *q2 = dq + (size_t)n1 * d.stride, *b2 = db + (size_t)n1 * nv, *a2 = da + (size_t)n1 * nv;
    float *o2 = dout + (size_t)n1 * nv * dv;
    for (int path = LKV_DELTA_CHUNKED; path >= LKV_DELTA_RECURRENCE; path--) {
        lkv_cuda_tuning.delta = path;
        cudaMemcpy(ds, st0, sizeof(float) * SN, cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        G->delta_rule(gb, dout, dq, db, da, &a, &dt, ds, &d, n1);
        get(gs1, ds, sizeof(float) * SN);
        G->delta_rule(gb, o2, q2, b2, a2, &a, &dt, ds, &d, n2);
        get(path == LKV_DELTA_CHUNKED ? go : ro, dout, sizeof(float) * ON);
        get(path == LKV_DELTA_CHUNKED ? gst : rst, ds, sizeof(float) * SN);
        if (path != LKV_DELTA_CHUNKED) break;
        const double eo = rel_err_f(go, co, ON), e1 = rel_err_f(gs1, cs1, SN), es = rel_err_f(gst, st, SN);
        check(eo < 1e-4 && e1 < 1e-4 && es < 1e-4, "delta_rule chunked nk=%d nv=%d dk=%d dv=%d n=%d+%d vs the "
              "CPU recurrence: out rel err %.2e, state at %d %.2e, at %d %.2e", nk, nv, dk, dv, n1, n2, eo, n1,
              e1, n, es);
        /* from the snapshot at n1 again */
        cudaMemcpy(ds, gs1, sizeof(float) * SN, cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        G->delta_rule(gb, o2, q2, b2, a2, &a, &dt, ds, &d, n2);
        get(again, dout, sizeof(float) * ON);
        get(rst, ds, sizeof(float) * SN);
        const size_t O2 = (size_t)n2 * nv * dv, off = (size_t)n1 * nv * dv;
        check(n_diff(again + off, go + off, O2) == 0 && n_diff(rst, gst, SN) == 0, "delta_rule chunked nk=%d "
              "nv=%d dk=%d dv=%d: %d tokens from the snapshot at %d again: %zu outputs, %zu state values differ",
              nk, nv, dk, dv, n2, n1, n_diff(again + off, go + off, O2), n_diff(rst, gst, SN));
    }
    const double ro_e = rel_err_f(go, ro, ON), rs_e = rel_err_f(gst, rst, SN);
    check(ro_e < 1e-4 && rs_e < 1e-4, "delta_rule chunked vs the GPU recurrence nk=%d nv=%d dk=%d dv=%d n=%d+%d: "
          "out rel err %.2e, state %.2e", nk, nv, dk, dv, n1, n2, ro_e, rs_e);
    lkv_cuda_tuning.delta = LKV_DELTA_AUTO;
    free(ah); free(dth); free(qkv); free(bi); free(al); free(st); free(st0); free(cs1); free(gs1); free(gst);
    free(rst); free(co); free(go); free(ro); free(again);
    cudaFree(a.dev); cudaFree(dt.dev); cudaFree(dq); cudaFree(db); cudaFree(da); cudaFree(ds); cudaFree(dout);
    C->ctx_free(cpu);
}

static void test_hybrid_delta_chunks(void) {
    test_hybrid_delta_chunked(2, 4, 32, 32, 64, 65);       /* the tiny model's heads; a chunk, a chunk + 1 */
    test_hybrid_delta_chunked(1, 3, 48, 40, 100, 37);      /* GQA 1x3; columns not a multiple of 32 */
    test_hybrid_delta_chunked(4, 8, 64, 96, 129, 200);     /* dv 96: column blocks of 64, the 2nd half-filled */
    test_hybrid_delta_chunked(16, 48, 128, 128, 300, 157); /* Qwen3.5-27B's layer */
    test_hybrid_delta_chunked(2, 6, 128, 128, 1500, 1);    /* many chunks; then a decode step */
    test_hybrid_delta_chunked(1, 2, 16, 24, 9, 3);         /* short calls through the chunked kernel */
}

/* figures, not checks: the delta rule at the Qwen3.5-27B layer shape over
 * micro-batches of n tokens, the recurrence against the chunked form (3xTF32,
 * the library's; one TF32 mma a product; blocks of 8 warps) */
static void time_delta_paths(void) {
    const int nk = 16, nv = 48, dk = 128, dv = 128, ch = 2 * nk * dk + nv * dv, NMAX = 32768;
    const lkv_delta_desc d = {nk, nv, dk, dv, ch, 1e-6f};
    float ah[48], dth[48];
    for (int h = 0; h < nv; h++) { ah[h] = -0.5f - 0.5f * rndf(); dth[h] = rndf(); }
    lkv_weight a = f32_vec(ah, nv), dt = f32_vec(dth, nv);
    const size_t QN = (size_t)NMAX * ch;
    float *h = malloc(sizeof(float) * QN);
    fill(h, QN, 1.f);
    float *dq = dup_dev(h, sizeof(float) * QN), *db = dup_dev(h, sizeof(float) * (size_t)NMAX * nv);
    float *da = dup_dev(h + (size_t)NMAX * nv, sizeof(float) * (size_t)NMAX * nv);
    float *ds = dev_buf(sizeof(float) * (size_t)nv * dk * dv), *dout = dev_buf(sizeof(float) * (size_t)NMAX * nv * dv);
    cudaMemset(ds, 0, sizeof(float) * (size_t)nv * dk * dv);
    cudaDeviceSynchronize();
    const int ns[] = {16, 64, 128, 512, 4096, NMAX};
    const int paths[] = {LKV_DELTA_RECURRENCE, LKV_DELTA_CHUNKED, LKV_DELTA_CHUNKED_TF32, LKV_DELTA_CHUNKED_W8};
    for (int i = 0; i < NELEM(ns); i++) {
        const int n = ns[i], reps = n <= 512 ? 20 : n <= 4096 ? 3 : 1;
        double us[4];
        for (int p = 0; p < 4; p++) {
            lkv_cuda_tuning.delta = paths[p];
            G->delta_rule(gb, dout, dq, db, da, &a, &dt, ds, &d, n < 64 ? n : 64);   /* warm */
            G->sync(gb);
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < reps; r++) G->delta_rule(gb, dout, dq, db, da, &a, &dt, ds, &d, n);
            G->sync(gb);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            us[p] = ((t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) * 1e-3) / reps;
        }
        printf("info delta_rule (27B layer: 16/48 heads of 128) n=%d: recurrence %.1f us, chunked 3xTF32 %.1f us "
               "(%.2fx), chunked TF32 %.1f us (%.2fx), chunked 3xTF32 8 warps %.1f us\n", n, us[0], us[1],
               us[0] / us[1], us[2], us[0] / us[2], us[3]);
        fflush(stdout);
    }
    lkv_cuda_tuning.delta = LKV_DELTA_AUTO;
    free(h);
    cudaFree(a.dev); cudaFree(dt.dev); cudaFree(dq); cudaFree(db); cudaFree(da); cudaFree(ds); cudaFree(dout);
}

static void test_hybrid(void) {
    test_hybrid_gating();
    test_hybrid_conv();
    test_hybrid_delta();
    test_hybrid_delta_chunks();
    time_hybrid();
    time_delta_paths();
}
