/*
 * benchmarks/cuda_bench.c: decode and prefill speed of the CUDA backend on a
 * synthetic model of Llama-3-8B shape (BENCHMARKS.md): random weight blocks
 * with small f16 scales, generated here in memory (speed does not depend on
 * the values). Context depth is reached by loading a synthetic KV state
 * (lkv_context_state_set) instead of prefilling, so depth costs seconds.
 *
 * usage: cuda_bench [weight_type=2 (q4_0)] [kv_type=8 (q8_0)] [depths=0,32768,131072]
 *                   [layers=32]
 * Prints one line per measurement: pp512 (depth 0 only) and tg (median of 5
 * runs of 32 single-token decodes), with the implied weight+KV bandwidth.
 * Kernel variants go through lkv_context_params.gpu_kernels and the test-only
 * overrides of src/cuda/tune.h (this program links the library's objects:
 * meson -Dharnesses=true); the llama.cpp figures of BENCHMARKS.md are printed
 * beside the default's where the shape and types are theirs (q4_0, q8_0 KV).
 * BENCH_NCU=tg|pp: instead of timing, mark one range for `ncu --profile-from-start
 * off` per depth: 3 decode steps after 2 warm-up steps (tg), or one prefill of 512
 * (pp). BENCH_NO_PP=1: decode only. BENCH_PPN="9,16,32": steps of those
 * token counts as well.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llamakv.h"
#include "cuda/tune.h"
#include "cuda/tune_mvq.h"
#include "quant/types.h"

/* cudart (linked statically); declared here so that this file needs no CUDA headers */
extern int cudaProfilerStart(void);
extern int cudaProfilerStop(void);

static uint64_t rs = 88172645463325252ull;
static void fill_random(uint8_t *p, size_t n) {
    uint64_t x = rs;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)i;
    rs = x;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* random blocks of `type`; every f16 field of a block set to a small scale */
static void *make_tensor(int type, int64_t rows, int64_t cols, uint64_t *nbytes) {
    lkv_type_info ti;
    lkv_type_info_get(type, &ti);
    const int64_t rb = lkv_row_bytes(type, cols);
    *nbytes = (uint64_t)(rb * rows);
    uint8_t *p = malloc(*nbytes);
    fill_random(p, *nbytes);
    const uint16_t small = 0x1c00;   /* f16 0.0039 */
    if (type == 0) {
        for (uint64_t i = 0; i < *nbytes / 4; i++) ((float *)p)[i] = ((int)(p[4 * i] & 15) - 8) * 0.01f;
    } else if (type == 1) {
        for (uint64_t i = 0; i < *nbytes / 2; i++) ((uint16_t *)p)[i] = small | (((uint16_t *)p)[i] & 0x83ff);
    } else {
        /* offsets of f16 fields: q4_0/q8_0/iq4_nl/q5_0 at 0; q4_1/q5_1 at 0 and 2; K types vary */
        int off[2] = {0, -1};
        if (type == 3 || type == 7) off[1] = 2;
        if (type == 10) { off[0] = 80; off[1] = 82; }
        if (type == 11) off[0] = 108;
        if (type == 12 || type == 13) off[1] = 2;
        if (type == 14) off[0] = 208;
        /* the super-block types: d such that |weights| stay under ~0.3 whatever
         * the sub-scales and codes (0.0039 made q4_K's up to 3.7 and the
         * activations overflow to inf / NaN over 32 layers) */
        const float per_d = type == 10 ? 45.f : type == 11 ? 128.f : type == 12 ? 945.f : type == 13 ? 1953.f
                          : type == 14 ? 4096.f : type == 23 ? 3937.f : type == 16 || type == 17 || type == 22 ? 166.f
                          : type == 18 || type == 21 ? 480.f : type == 19 ? 17.f : 0.f;
        const uint16_t dk = per_d > 0 ? lkv_fp32_to_fp16(0.3f / per_d) : small;
        for (uint64_t b = 0; b < *nbytes / ti.type_size; b++)
            for (int k = 0; k < 2; k++)
                if (off[k] >= 0) memcpy(p + b * ti.type_size + off[k], &dk, 2);
    }
    return p;
}

typedef struct { char name[48]; int type; int64_t ne0, ne1; void *data; uint64_t nbytes; } tensor;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int wt = argc > 1 ? atoi(argv[1]) : 2;
    const int kvt = argc > 2 ? atoi(argv[2]) : 8;
    const char *depths_s = argc > 3 ? argv[3] : "0,32768,131072";
    const int NL = argc > 4 ? atoi(argv[4]) : 32;
    const int E = 4096, FF = 14336, NH = 32, NKV = 8, HD = 128, V = 128256;
    if (lkv_cuda_device_count() <= 0) { printf("no CUDA device\n"); return 0; }

    double t0 = now();
    tensor *ts = calloc(16 + 16 * NL, sizeof *ts);
    int n = 0;
#define ADD(nm, ty, a, b) do { snprintf(ts[n].name, sizeof ts[n].name, "%s", nm); ts[n].type = ty; \
    ts[n].ne0 = a; ts[n].ne1 = b; ts[n].data = make_tensor(ty, b, a, &ts[n].nbytes); n++; } while (0)
    ADD("token_embd.weight", wt, E, V);
    ADD("output_norm.weight", 0, E, 1);
    ADD("output.weight", wt, E, V);
    char nm[48];
    for (int l = 0; l < NL; l++) {
#define L(s, ty, a, b) do { snprintf(nm, sizeof nm, "blk.%d." s, l); ADD(nm, ty, a, b); } while (0)
        L("attn_norm.weight", 0, E, 1);
        L("attn_q.weight", wt, E, NH * HD);
        L("attn_k.weight", wt, E, NKV * HD);
        L("attn_v.weight", wt, E, NKV * HD);
        L("attn_output.weight", wt, NH * HD, E);
        L("ffn_norm.weight", 0, E, 1);
        L("ffn_gate.weight", wt, E, FF);
        L("ffn_up.weight", wt, E, FF);
        L("ffn_down.weight", wt, FF, E);
    }
    lkv_tensor_desc *desc = calloc(n, sizeof *desc);
    for (int i = 0; i < n; i++)
        desc[i] = (lkv_tensor_desc){ts[i].name, ts[i].type, ts[i].ne1 > 1 ? 2 : 1,
                                    {ts[i].ne0, ts[i].ne1, 1, 1}, ts[i].data, ts[i].nbytes};
    lkv_model_params mp;
    lkv_model_params_init(&mp);
    mp.arch = LKV_ARCH_LLAMA; mp.n_vocab = V; mp.n_embd = E; mp.n_layer = NL; mp.n_head = NH;
    mp.n_head_kv = NKV; mp.head_dim = HD; mp.n_ff = FF; mp.n_ctx_train = 131072; mp.rope_dim = HD;
    mp.rms_eps = 1e-5f; mp.rope_freq_base = 500000.f; mp.rope_freq_scale = 1.f;
    mp.device = LKV_DEVICE_CUDA;
    lkv_model *m;
    if (lkv_model_create(&mp, desc, n, &m)) { printf("model: %s\n", lkv_last_error()); return 1; }
    const double wbytes = (double)lkv_model_weight_bytes(m);
    /* bytes one decode step reads: everything but the embedding table */
    const double step_wbytes = wbytes - (double)ts[0].nbytes;
    for (int i = 0; i < n; i++) free(ts[i].data);
    lkv_type_info wti, kti;
    lkv_type_info_get(wt, &wti);
    lkv_type_info_get(kvt, &kti);
    printf("model: 8B shape, %d layers, %s weights %.2f GiB, KV %s; set-up %.1f s\n", NL, wti.name,
           wbytes / (1 << 30), kti.name, now() - t0);

    const int64_t kv_row = lkv_row_bytes(kvt, NKV * HD);
    /* variants at depth 0: the first is the default; BENCH_VARIANTS=n measures
     * the first n (default 2; 0 = 1); BENCH_DEPTH_VARIANTS=n the first n also at
     * depth (default 1). Columns: name, gpu_kernels (1 fast, 0 exact), the
     * decode step as a replayed graph (LKV_CUDA_GRAPH, the library's debug
     * switch), tune.h's forced matmul kernel */
    struct { const char *name; int fast, graph, mm, mvq_rows; } vars[] = {
        {"default: the fastest kernels, decode step as a replayed graph", 1, 1, LKV_MM_TABLE},
        {"int8 GEMM mmq for prefill (tune.h)", 1, 1, LKV_MM_MMQ},
        {"exact kernels (gpu_kernels=\"exact\": bit-identical with the CPU)", 0, 1, LKV_MM_TABLE},
        {"wgmma f16 GEMM gemm_wg for prefill (tune.h; sm_90a)", 1, 1, LKV_MM_GEMM_WG},
        {"int8 mat-vec matvec_q8 for decode (tune.h; mvx is the default)", 1, 1, LKV_MM_MATVEC_Q8},
        {"the default, launched op by op (LKV_CUDA_GRAPH=0)", 1, 0, LKV_MM_TABLE},
        {"f16 WMMA GEMM gemm_f16 for prefill (tune.h)", 1, 1, LKV_MM_GEMM_F16},
        {"mvq on the norms' / swiglu's q8_0 codes, no q8_K pass (tune.h mvq_q8)", 1, 1, LKV_MM_TABLE},
        {"mvq 1 row a warp (tune_mvq.h)", 1, 1, LKV_MM_TABLE, 1},
        {"mvq 2 rows a warp (tune_mvq.h)", 1, 1, LKV_MM_TABLE, 2},
        {"mvq 4 rows a warp (tune_mvq.h)", 1, 1, LKV_MM_TABLE, 4}};
    const int n_vars = (int)(sizeof vars / sizeof vars[0]);
    int n_var = getenv("BENCH_VARIANTS") ? atoi(getenv("BENCH_VARIANTS")) : 2;
    if (n_var > n_vars) n_var = n_vars;
    /* BENCH_PICK="0,3,7": exactly those variants, in that order (overrides BENCH_VARIANTS) */
    int pick[16];
    for (int i = 0; i < n_vars; i++) pick[i] = i;
    if (getenv("BENCH_PICK")) {
        char *pc = strdup(getenv("BENCH_PICK"));
        n_var = 0;
        for (char *t = strtok(pc, ","); t && n_var < 16; t = strtok(NULL, ","))
            if (atoi(t) >= 0 && atoi(t) < n_vars) pick[n_var++] = atoi(t);
        free(pc);
    }
    const int n_dvar = getenv("BENCH_DEPTH_VARIANTS") ? atoi(getenv("BENCH_DEPTH_VARIANTS")) : 1;
    /* llama.cpp on the same shape, Q4_0 weights, q8_0 K and V (BENCHMARKS.md, 2026-12-01) */
    const int ref_ok = wt == 2 && kvt == 8 && NL == 32;
    char *dcopy = strdup(depths_s), *dsave = NULL;
    for (char *tok = strtok_r(dcopy, ",", &dsave); tok; tok = strtok_r(NULL, ",", &dsave))
    for (int vj = 0; vj < (atoi(tok) == 0 ? (n_var > 0 ? n_var : 1) : (n_dvar < n_var ? n_dvar : n_var)); vj++) {
        const int depth = atoi(tok);
        const int vi = pick[vj];
        lkv_cuda_tuning.matmul = vars[vi].mm;
        lkv_cuda_tuning.mvq_q8 = vi == 7;
        lkv_cuda_mvq_rows = vars[vi].mvq_rows;
        lkv_cuda_tuning.gen++;
        setenv("LKV_CUDA_GRAPH", vars[vi].graph ? "1" : "0", 1);
        if (depth == 0 || n_dvar > 1) printf("-- %s\n", vars[vi].name);
        const double ref_pp = !ref_ok ? 0 : depth == 0 ? 8191 : depth == 32768 ? 5946 : depth == 131072 ? 2567 : 0;
        const double ref_tg = !ref_ok ? 0 : depth == 0 ? 284.6 : depth == 32768 ? 130.3 : depth == 131072 ? 49.5 : 0;
        lkv_context_params cp;
        lkv_context_params_init(&cp);
        cp.n_ctx = depth + 1024;
        cp.n_batch = 512; cp.n_ubatch = 512; cp.type_k = kvt; cp.type_v = kvt;
        cp.gpu_kernels = vars[vi].fast;
        lkv_context *c;
        if (lkv_context_create(m, &cp, &c)) { printf("context @%d: %s\n", depth, lkv_last_error()); continue; }
        int32_t toks[512];
        for (int i = 0; i < 512; i++) toks[i] = (i * 7919) % V;
        if (depth > 0) {   /* synthetic KV state of `depth` positions */
            uint64_t hsz;
            lkv_context_state_size(c, &hsz);
            uint8_t *hdr = malloc(hsz);
            lkv_context_state_get(c, hdr, hsz);
            const uint64_t body = (uint64_t)NL * depth * (uint64_t)(2 * kv_row);
            uint8_t *blob = malloc(hsz + body);
            memcpy(blob, hdr, hsz);
            memcpy(blob + 4, &depth, 4);   /* header: magic, n_tokens, ... */
            uint8_t *kvp = blob + hsz;
            fill_random(kvp, body);
            if (kvt == 1) for (uint64_t i = 0; i < body / 2; i++) ((uint16_t *)kvp)[i] = 0x1c00 | (((uint16_t *)kvp)[i] & 0x83ff);
            else if (kvt != 0) {
                const uint16_t small = 0x1c00;
                for (uint64_t b = 0; b < body / kti.type_size; b++) memcpy(kvp + b * kti.type_size, &small, 2);
            } else for (uint64_t i = 0; i < body / 4; i++) ((float *)kvp)[i] = 0.01f;
            double ts0 = now();
            if (lkv_context_state_set(c, blob, hsz + body)) {
                printf("state_set @%d: %s\n", depth, lkv_last_error());
                free(blob); free(hdr); lkv_context_free(c);
                continue;
            }
            printf("depth %d: synthetic KV state %.2f GB loaded in %.1f s\n", depth, body / 1e9, now() - ts0);
            free(blob); free(hdr);
        }
        const char *ncu = getenv("BENCH_NCU");
        if (ncu) {
            int bad = 0;
            if (!strcmp(ncu, "pp")) {
                cudaProfilerStart();
                bad = lkv_decode(c, toks, 512, depth);
                cudaProfilerStop();
            } else {
                for (int i = 0; i < 5 && !bad; i++) {
                    if (i == 2) cudaProfilerStart();
                    bad = lkv_decode(c, toks + i, 1, depth + i);
                }
                cudaProfilerStop();
            }
            if (bad) printf("profiled range @%d: %s\n", depth, lkv_last_error());
            lkv_context_free(c);
            continue;
        }
        /* prefill of 512 at this depth (BENCH_NO_PP=1: decode only); BENCH_ATTN_EXACT=1:
         * at depth also with attn.cu's exact attention (tune.h) */
        for (int am = 0; am < (getenv("BENCH_NO_PP") ? 0 : depth > 0 && getenv("BENCH_ATTN_EXACT") ? 2 : 1); am++) {
            lkv_cuda_tuning.attn = am ? LKV_ATT_EXACT : LKV_ATT_TABLE;
            lkv_cuda_tuning.gen++;
            /* at depth an exact pass can take seconds: 2 runs there */
            double pp[4] = {0, 1e9, 1e9, 1e9};
            for (int r = 0; r < (depth > 0 ? 2 : 4); r++) {
                lkv_context_truncate(c, depth);
                double a = now();
                if (lkv_decode(c, toks, 512, depth)) { printf("pp: %s\n", lkv_last_error()); break; }
                pp[r] = now() - a;
            }
            qsort(pp + 1, 3, sizeof(double), cmp_d);
            const double tp = depth > 0 ? pp[1] : pp[2];   /* the second run / the median of 3 */
            printf("pp512 @%-6d %8.1f t/s  (%.1f ms)", depth, 512 / tp, tp * 1e3);
            if (am) printf("  [attn.cu's exact attention]");
            else if (ref_pp > 0 && vi == 0) printf("  llama.cpp %.0f t/s: %.2fx", ref_pp, 512 / tp / ref_pp);
            printf("\n");
        }
        /* BENCH_PPN="9,16,32": steps of those token counts too (a few sequences'
         * decode, a draft's verification): the median of 5 after a warm-up */
        if (getenv("BENCH_PPN") && !getenv("BENCH_NO_PP")) {
            char *pc = strdup(getenv("BENCH_PPN")), *psave = NULL;
            for (char *t = strtok_r(pc, ",", &psave); t; t = strtok_r(NULL, ",", &psave)) {
                const int np = atoi(t);
                if (np < 1 || np > 512) continue;
                double pt[6];
                int ok = 1;
                for (int r = 0; r < 6 && ok; r++) {
                    lkv_context_truncate(c, depth);
                    double a = now();
                    if (lkv_decode(c, toks, np, depth)) { printf("pp%d: %s\n", np, lkv_last_error()); ok = 0; }
                    pt[r] = now() - a;
                }
                if (!ok) break;
                qsort(pt + 1, 5, sizeof(double), cmp_d);
                printf("pp%-4d @%-6d %8.1f t/s  (%.2f ms a step)\n", np, depth, np / pt[3], pt[3] * 1e3);
            }
            free(pc);
        }
        lkv_cuda_tuning.attn = LKV_ATT_TABLE;
        lkv_cuda_tuning.gen++;
        /* decode: 5 runs of 32 tokens (after a warm-up run); BENCH_ATTN_RING=1: at
         * depth also with attn_dec_ring.cu for q8_0 (tune.h; ring2 is the default) */
        for (int av = 0; av < (depth > 0 && getenv("BENCH_ATTN_RING") ? 2 : 1); av++) {
            lkv_cuda_tuning.attn = av ? LKV_ATT_RING : LKV_ATT_TABLE;
            lkv_cuda_tuning.gen++;
            double tg[6];
            int ok = 1;
            for (int r = 0; r < 6 && ok; r++) {
                lkv_context_truncate(c, depth);
                double a = now();
                for (int i = 0; i < 32; i++)
                    if (lkv_decode(c, toks + i, 1, depth + i)) { printf("tg: %s\n", lkv_last_error()); ok = 0; break; }
                tg[r] = (now() - a) / 32;
            }
            if (ok) {
                qsort(tg + 1, 5, sizeof(double), cmp_d);
                const double t = tg[3];
                const double kvb = (double)NL * (depth + 16) * 2 * kv_row;
                printf("tg   @%-6d %8.1f t/s  (%.3f ms/token; weights+KV %.2f GB -> %.2f TB/s)", depth,
                       1 / t, t * 1e3, (step_wbytes + kvb) / 1e9, (step_wbytes + kvb) / t / 1e12);
                if (av) printf("  [attn_dec_ring.cu]");
                else if (ref_tg > 0 && vi == 0) printf("  llama.cpp %.1f t/s: %.2fx", ref_tg, 1 / t / ref_tg);
                printf("\n");
            }
        }
        lkv_cuda_tuning.attn = LKV_ATT_TABLE;
        lkv_cuda_tuning.gen++;
        fflush(stdout);
        lkv_context_free(c);
    }
    free(dcopy);
    lkv_model_free(m);
    return 0;
}
