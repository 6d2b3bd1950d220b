/*
 * cuda/choose_matmul.cu: the matmul op, out (n, rows) = x (n, cols) @ W^T, and
 * its one kernel chooser.
 *
 * The choice is a table from (weight type class, phase, kernel kind,
 * architecture) to one kernel (tune.h names them); each kernel lives in its
 * own file with its design in the file's header:
 *
 *   class (types)                  decode (n <= 8)   prefill, fast        prefill, exact
 *                                                    sm_90a   other
 *   float (f32, f16, bf16)         matvec_f32        gemm_wg  gemm_f16    gemm_f16
 *   q4_0                           mvx               gemm_wg  mmq         mmb
 *   legacy (q4_1 q5_0 q5_1 q8_0    mvx               mmq      mmq         mmx
 *           iq4_nl)
 *   k45 (q4_K, q5_K)               mvq               gemm_wg  mmq         mmq
 *   k-other (q2_K, q3_K, q6_K)     mvq               gemm_wg  mmq         as fast
 *   iq4_xs                         mvq               gemm_wg  mmq         mmq
 *   iq-grid (iq2_xxs, iq2_xs,      mvq               gemm_wg  gemm_f16    gemm_f16
 *     iq2_s, iq3_xxs, iq3_s)
 *   iq1 (iq1_s, iq1_m)             matvec_f32        gemm_wg  gemm_f16    gemm_f16
 *
 * Where mvq decodes (super-blocks of 256 with 8-bit codes), it also takes 9
 * to 16 tokens in one launch (MQ_MAX_TOK: one pass over the weights; the
 * matvec_q8 it replaced: 187 t/s for q4_K's 8B decode on an H100 against
 * q4_0's 295 on mvx, issue 41). Where mvx decodes, it also takes 9 to 32
 * (q4_0, iq4_nl) or 16 (the other legacy types) tokens, in launches of 8 (several sequences' decode step, a
 * draft's verification; mm_slice_max): a GEMM's fixed cost (the f16 copy of
 * every weight for gemm_wg) makes a step of the 8B shape cost about 17 ms for
 * any n from 9 to 128 (one token: 2.4 ms); cuda_bench's BENCH_PPN measures
 * where the slices stop paying.
 *
 * "fast" (gpu_kernels = 1, the default) are the fastest kernels measured on
 * the H200 (docs/performance.md) among those that keep the accuracy
 * contract. The warp-specialized gemm_wg takes the prefill on sm_90a (pp512
 * of the 8B shape, H200, 2026-12-02, whole step against mmq: q4_0 25.7 /
 * 46.1 ms) except for the legacy types. For the k-quants and iq4_xs it
 * multiplies the CPU's integers (gemm_wg_kcodes.cuh: the q8_K codes of x,
 * the weights' sc * q, the mins' term beside them, the per-256 scales
 * applied once per super-block; 8-bit products for q2_K, q3_K and q6_K, f16
 * ones for q4_K and q5_K), so its products are the CPU's (test_ops: 1e-7
 * relative; H100, 2026-12-06, whole step: q2_K 24.7, q3_K 22.3, q4_K 35.0,
 * q5_K 35.6, q6_K 37.8 ms, against 29.9 / 31.5 / 32.5 / 40.5 / 32.3 with f16
 * operands, x rounded by the CPU's q8_K rule, and 52.9 for q4_K on mmq;
 * iq4_xs, q6_K's 8-bit path, 37.0 against 54.7 on mmq).
 * For the other types it rounds x as the CPU does for the weight type
 * (q8 codes per 32 or 256) before its f16 operand; the f16 rounding of the
 * weights remains. That costs the legacy types the accuracy contract:
 * gemm_wg would be twice as fast for them too (q8_0 26.6 / 55.3 ms, q4_1
 * 26.0 / 52.1), but their tiny models with 4- and 5-bit KV
 * (tests/test_cuda.py) left the CPU by mean KL 3.1e-3 to 6.8e-3 (bound 2e-3;
 * mmq within it) and SmolLM2's (Q4_1) golden test went from mean KL 0.0031
 * to 0.0051; q4_0 stays within it (1.2e-3, 1.45e-3). bf16 weights take x
 * rounded to bf16 and bf16 products, the CPU's operands.
 * On the other GPUs the i-quant rows are not measured yet:
 * iq4_xs has q4_K's structure (one integer scale per 32-block, q8_K
 * activations on the CPU), so it takes q4_K's kernels; the grid i-quants
 * have 8-bit codes too (grid level times sign) but scales per 16 (iq2_xs,
 * iq2_s) or grids mmq.cu does not stage, so only their mat-vec is integer;
 * iq1_s / iq1_m (grid + 1/8) run on the float kernels, which decode every
 * type through quant.cuh's dq8. "exact" replaces the prefill GEMM of the
 * legacy types by the kernels whose float sums are the CPU backend's, bit for
 * bit, and keeps the fast kind's GEMM for k-other, whose products are the
 * CPU's on every GPU (gemm_wg on sm_90a, mmq's split blocks elsewhere, both
 * on the CPU's q8_K codes of x) (decode is the same for both kinds: mvx is both the CPU's bits and the
 * fastest, 353 against 248 t/s for matvec_q8 at depth 0 on the 8B shape). The
 * architecture column is "sm_90a" where the code the device runs has the
 * wgmma kernel (gemm_wg.cu's probe at context creation: a Hopper GPU and a
 * build with 90 in gpu_arch), "other" everywhere else (sm_80 to sm_89,
 * sm_120). The integer kernels read the activations as 8-bit
 * codes in the CPU's format for the weight type (lkv_act_format), quantized
 * once per call and per format here, or left by the norm / swiglu that wrote x
 * (act_quant.cuh's tag). A kernel that declines a call (alignment, workspace
 * size) hands it to the class's generic kernel: matvec_f32 for decode,
 * gemm_f16 for prefill, which take every type. The choice depends on the
 * weights, n and the device only, never on the call's KV pool.
 *
 * matmul_swiglu (the gate / up GEMM with the swiglu in its epilogue) exists
 * for the exact kind's q4_0 prefill (mmb.cu, SW): the same bits as matmul +
 * swiglu; the fast kind runs mmq and the separate swiglu.
 */
#include "act_quant.cuh"
#include "exact.cuh"
#include "matmul.cuh"
#include "tune.h"

enum { MC_FLOAT, MC_Q4_0, MC_LEGACY, MC_K45, MC_KOTHER, MC_IQ4XS, MC_IQGRID, MC_IQ1, MC_CLASSES };

static int mm_class(int type) {
    switch (type) {
    case LKV_TYPE_Q4_0: return MC_Q4_0;
    case LKV_TYPE_Q4_1: case LKV_TYPE_Q5_0: case LKV_TYPE_Q5_1: case LKV_TYPE_Q8_0: case LKV_TYPE_IQ4_NL:
        return MC_LEGACY;
    case LKV_TYPE_Q4_K: case LKV_TYPE_Q5_K: return MC_K45;
    case LKV_TYPE_Q2_K: case LKV_TYPE_Q3_K: case LKV_TYPE_Q6_K: return MC_KOTHER;
    case LKV_TYPE_IQ4_XS: return MC_IQ4XS;
    case LKV_TYPE_IQ2_XXS: case LKV_TYPE_IQ2_XS: case LKV_TYPE_IQ2_S: case LKV_TYPE_IQ3_XXS:
    case LKV_TYPE_IQ3_S:
        return MC_IQGRID;
    case LKV_TYPE_IQ1_S: case LKV_TYPE_IQ1_M: return MC_IQ1;
    default: return MC_FLOAT;
    }
}

/* [arch: 0 other, 1 sm_90a][class][phase: 0 decode, 1 prefill][kind: 0 fast, 1 exact] */
static const unsigned char MM_TABLE[2][MC_CLASSES][2][2] = {
    {
        /* float   */ {{LKV_MM_MATVEC_F32, LKV_MM_MATVEC_F32}, {LKV_MM_GEMM_F16, LKV_MM_GEMM_F16}},
        /* q4_0    */ {{LKV_MM_MVX, LKV_MM_MVX}, {LKV_MM_MMQ, LKV_MM_MMB}},
        /* legacy  */ {{LKV_MM_MVX, LKV_MM_MVX}, {LKV_MM_MMQ, LKV_MM_MMX}},
        /* k45     */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_MMQ, LKV_MM_MMQ}},
        /* k-other */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_MMQ, LKV_MM_MMQ}},
        /* iq4_xs  */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_MMQ, LKV_MM_MMQ}},
        /* iq-grid */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_GEMM_F16, LKV_MM_GEMM_F16}},
        /* iq1     */ {{LKV_MM_MATVEC_F32, LKV_MM_MATVEC_F32}, {LKV_MM_GEMM_F16, LKV_MM_GEMM_F16}},
    },
    {
        /* float   */ {{LKV_MM_MATVEC_F32, LKV_MM_MATVEC_F32}, {LKV_MM_GEMM_WG, LKV_MM_GEMM_F16}},
        /* q4_0    */ {{LKV_MM_MVX, LKV_MM_MVX}, {LKV_MM_GEMM_WG, LKV_MM_MMB}},
        /* legacy  */ {{LKV_MM_MVX, LKV_MM_MVX}, {LKV_MM_MMQ, LKV_MM_MMX}},
        /* k45     */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_GEMM_WG, LKV_MM_MMQ}},
        /* k-other */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_GEMM_WG, LKV_MM_GEMM_WG}},
        /* iq4_xs  */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_GEMM_WG, LKV_MM_MMQ}},
        /* iq-grid */ {{LKV_MM_MVQ, LKV_MM_MVQ}, {LKV_MM_GEMM_WG, LKV_MM_GEMM_F16}},
        /* iq1     */ {{LKV_MM_MATVEC_F32, LKV_MM_MATVEC_F32}, {LKV_MM_GEMM_WG, LKV_MM_GEMM_F16}},
    },
};

/* whether a prefill of a `type` weight takes gemm_wg where the wgmma kernel
 * runs (sm_90a), with the fast (fast != 0) or the exact kernels: the memory
 * plan's question (mem_plan.cu: gemm_wg's weight scratch) */
bool lkv_cuda_mm_prefill_wg(int type, int fast) {
    return MM_TABLE[1][mm_class(type)][1][fast ? 0 : 1] == LKV_MM_GEMM_WG;
}

/* the most tokens mvx keeps for `type` (slices of 8) before the GEMM is
 * faster: H200, 8B shape, whole step, 2026-12-02: q4_0 9 / 16 / 24 / 32
 * tokens 5.9 / 8.6 / 11.9 / 15.4 ms against gemm_wg's 16.2 / 16.9 / 17.0 /
 * 17.2; q8_0 16 tokens 12.8 / 17.2 but 32 tokens 23.5 / 17.5; q4_1 16 tokens
 * 13.7 ms */
static int mm_slice_max(int type) {
    return type == LKV_TYPE_Q4_0 || type == LKV_TYPE_IQ4_NL ? MV_SLICE_MAX : 2 * MV_MAX_TOK;
}

static int mm_choose(const lkv_bctx *b, int type, int n) {
    const int phase = n > MV_MAX_TOK;
    const int forced = lkv_cuda_tuning.matmul;
    if (forced > LKV_MM_TABLE && forced < LKV_MM_KERNELS) {
        /* a forced kernel of the other phase does not apply */
        const bool dec = forced == LKV_MM_MATVEC_F32 || forced == LKV_MM_MATVEC_Q8 || forced == LKV_MM_MVX ||
                         forced == LKV_MM_MVQ;
        if (dec == !phase) return forced;
    }
    const unsigned char (&row)[2][2] = MM_TABLE[b->wg_ok ? 1 : 0][mm_class(type)];
    const int kind = b->fast ? 0 : 1;
    /* a few tokens more than 8: the classes decoded by mvx keep it (slices of 8) */
    if (phase && n <= mm_slice_max(type) && row[0][kind] == LKV_MM_MVX) return LKV_MM_MVX;
    if (phase && n <= MQ_MAX_TOK && row[0][kind] == LKV_MM_MVQ) return LKV_MM_MVQ;
    return row[phase][kind];
}

/* the 8-bit codes of x in the format of `type` in b->xq / xd / xs; *have: the
 * format they hold now (ACT_NONE, ACT_Q8, ACT_Q8K); false when the workspace
 * does not fit the call */
static bool mm_codes(lkv_bctx *b, const float *x, int n, int cols, int type, int *have) {
    if (!b->xq || n > b->xq_rows || cols > b->xq_cols || cols % 32) return false;
    const int f = lkv_act_format(type, cols);
    if (*have != f) {
        lkv_cuda_quantize_act(b, x, n, cols, type);
        *have = f;
    }
    return true;
}

/* whether integer kernel k takes weights of `type` in ms for n tokens */
static bool mm_takes(int k, int type, const mm_set &ms, int n) {
    switch (k) {
    case LKV_MM_MATVEC_Q8: return n <= MV_MAX_TOK && lkv_cuda_matvec_q8_takes(type);
    case LKV_MM_MVX: return n <= MV_SLICE_MAX && lkv_cuda_mvx_takes(type, ms);
    case LKV_MM_MVQ: return n <= MQ_MAX_TOK && lkv_cuda_mvq_takes(type, ms);
    case LKV_MM_MMQ: return lkv_cuda_mmq_takes(type, ms);
    case LKV_MM_MMB: return type == LKV_TYPE_Q4_0;
    case LKV_MM_MMX: return lkv_cuda_mmx_takes(type);
    default: return false;
    }
}

static bool mm_run(lkv_bctx *b, int k, int type, mm_set &ms, const float *x, int cols, int n, int *have) {
    switch (k) {
    case LKV_MM_MATVEC_F32: return lkv_cuda_matvec_f32(b, type, ms, x, cols, n);
    case LKV_MM_GEMM_F16: return lkv_cuda_gemm_f16(b, type, ms, x, cols, n);
    case LKV_MM_GEMM_WG: return lkv_cuda_gemm_wg(b, type, ms, x, cols, n);
    default: break;
    }
    /* the integer kernels: each checks its types and alignment before it quantizes */
    if (!mm_takes(k, type, ms, n)) return false;
    /* tune.h's mvq_q8 (an experiment, off by default): mvq on the q8_0-format
     * codes the producer left (same layout, 32-blocks with an f16 scale)
     * instead of the CPU's q8_K, saving the quantize launch */
    const bool reuse = k == LKV_MM_MVQ && lkv_cuda_tuning.mvq_q8 && *have == ACT_Q8;
    if (!reuse && !mm_codes(b, x, n, cols, type, have)) return false;
    bool ran = false;
    switch (k) {
    case LKV_MM_MATVEC_Q8: ran = lkv_cuda_matvec_q8(b, type, ms, cols, n); break;
    case LKV_MM_MVX: ran = lkv_cuda_mvx(b, type, ms, cols, n); break;
    case LKV_MM_MVQ: ran = lkv_cuda_mvq(b, type, ms, cols, n); break;
    case LKV_MM_MMQ: ran = lkv_cuda_mmq(b, type, ms, cols, n); break;
    case LKV_MM_MMB: ran = lkv_cuda_mmb(b, type, ms, cols, n); break;
    case LKV_MM_MMX: ran = lkv_cuda_mmx(b, type, ms, cols, n); break;
    default: break;
    }
    if (ran) LKV_CUDA_LAUNCHED(b, "matmul");
    return ran;
}

// ---------------------------------------------------------------- entry points

void lkv_cuda_matmul(lkv_bctx *b, float *const *outs, const float *x,
                     const lkv_weight *const *ws, int n_w, int n) {
    if (n <= 0) return;
    /* a norm or swiglu just wrote the q8 codes of x (act_quant.cuh) */
    int have = n_w > 0 && lkv_act_tag_take(b, x, n, (int)ws[0]->cols) ? ACT_Q8 : ACT_NONE;
    for (int i = 0; i < n_w;) {
        /* a run of up to 3 weights of one type and width: one launch */
        mm_set ms = {};
        const int type = ws[i]->type, cols = (int)ws[i]->cols;
        while (i < n_w && ms.n_w < 3 && ws[i]->type == type && ws[i]->cols == cols) {
            const lkv_weight *w = ws[i];
            if (!w->dev || w->cols % 32) {
                lkv_cuda_note(b, cudaErrorInvalidValue, "matmul: weight not on the device");
                return;
            }
            ms.w[ms.n_w] = (const uint8_t *)w->dev;
            ms.out[ms.n_w] = outs[i];
            ms.row_bytes[ms.n_w] = w->row_bytes;
            ms.rows[ms.n_w] = (int)w->rows;
            ms.n_w++;
            i++;
        }
        const int k = mm_choose(b, type, n);
        if (mm_run(b, k, type, ms, x, cols, n, &have)) continue;
        /* rows mvq cannot read (alignment): the older integer mat-vec */
        if (k == LKV_MM_MVQ && n <= MV_MAX_TOK && mm_run(b, LKV_MM_MATVEC_Q8, type, ms, x, cols, n, &have)) continue;
        /* the generic kernel of the phase */
        if (!mm_run(b, n > MV_MAX_TOK ? LKV_MM_GEMM_F16 : LKV_MM_MATVEC_F32, type, ms, x, cols, n, &have)) {
            lkv_cuda_note(b, cudaErrorInvalidValue, "matmul: unsupported weight type");
            return;
        }
    }
}

/* out (n, rows) = silu(x @ wg^T) * (x @ wu^T) in one launch, with the codes of
 * out for the down matmul (mmb.cu, SW): where the table gives mmb (q4_0,
 * prefill, exact kind), gate and up of one shape; 0 when not covered (the
 * caller runs matmul and swiglu, which give the same bits) */
int lkv_cuda_matmul_swiglu(lkv_bctx *b, float *out, const float *x, const lkv_weight *wg,
                           const lkv_weight *wu, int n) {
    const int cols = (int)wg->cols, rows = (int)wg->rows;
    if (n <= MV_MAX_TOK || wg->type != wu->type || wu->cols != wg->cols || wu->rows != wg->rows ||
        !wg->dev || !wu->dev || rows % 32 || cols % 32 || lkv_cuda_tuning.no_fuse)
        return 0;
    if (mm_choose(b, wg->type, n) != LKV_MM_MMB || !b->xq2 || n > b->xq_rows || cols > b->xq_cols ||
        rows > b->xq_cols)
        return 0;
    if (!lkv_act_tag_take(b, x, n, cols)) lkv_cuda_quantize_act(b, x, n, cols, LKV_TYPE_Q4_0);
    mm_set ms = {};
    ms.n_w = 2;
    ms.w[0] = (const uint8_t *)wg->dev;
    ms.w[1] = (const uint8_t *)wu->dev;
    ms.out[0] = out;
    ms.row_bytes[0] = wg->row_bytes;
    ms.row_bytes[1] = wu->row_bytes;
    ms.rows[0] = ms.rows[1] = rows;
    if (!lkv_cuda_mmb_swiglu(b, ms, cols, n)) return 0;
    LKV_CUDA_LAUNCHED(b, "matmul_swiglu (mmb)");
    lkv_act_swap(b, out, (int64_t)n * rows);
    return 1;
}
