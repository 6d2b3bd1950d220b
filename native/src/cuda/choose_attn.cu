/*
 * cuda/choose_attn.cu: the attention op (attn_accum: fold chunks [chunk_lo,
 * chunk_hi) into the running state; attn_whole: reset + accum + finish in one
 * launch) and its one kernel chooser.
 *
 * The choice is a table from (KV type class, phase, kernel kind) to one
 * kernel (tune.h names them); each kernel has its file and its design in the
 * file's header:
 *
 *   K / V class                     decode (n_q <= 8)   prefill, fast   prefill, exact
 *   q8_0 / q8_0                     ring2 (else ring)   mma             exact
 *   f16 / f16, q4_0 / q4_0,         ring                mma             exact
 *   q8_0 K / q4_0 V
 *   other (bf16, f32, q4_1 ...,     exact               mma             exact
 *          other mixed types)
 *
 * ring2 = attn_dec_ring2.cu (head_dim 64 / 128, G 1-4 and 8: where it
 * declines, ring), ring = attn_dec_ring.cu (flash-decoding over the
 * chunk grid, then attn_fold.cu), mma = attn_mma.cu (tensor-core flash
 * attention; on sm_90a q8_0 / q4_0 K and V, and a bf16 V, are decoded to f16
 * a pass of chunks at a time first, attn_stage.cu), exact = attn.cu (attn_seq for many
 * queries, attn_split + fold for few: every shape and type). The decode kernels and attn.cu give the
 * CPU backend's bits; mma rounds its operands to f16. A kernel that declines
 * a call (shape, alignment, a captured step, a type it does not read) hands it
 * to exact; which kernel runs depends on the micro-batch's shape and types,
 * never on where the chunks lie, and every kernel folds chunk by chunk, so
 * logits are the same for any KV pool size (docs/design.md section 4). attn_rows (several
 * sequences' decode rows in one step, all resident) runs the ring kernels'
 * rows launch (attn_kv.cuh) where a one-row call would take ring or ring2,
 * with the same bits; anything else goes back to the caller's calls per
 * sequence. "fast" (gpu_kernels
 * = 1) is the default; "exact" keeps prefill bit-identical with the CPU. A
 * sliding-window layer's call (d->window > 0, gemma3's local layers) always
 * takes exact, the one kernel that masks the rows before the window. All
 * architectures built for run all four (attn_mma.cu guards its own
 * architecture-specific paths).
 */
#include "attn_kv.cuh"
#include "attn_mma.cuh"
#include "matmul.cuh"

enum { AC_Q8_0, AC_RING, AC_OTHER, AC_CLASSES };

static int at_class(const lkv_attn_desc *d) {
    if (d->type_k == LKV_TYPE_Q8_0 && d->type_v == LKV_TYPE_Q4_0) return AC_RING;
    if (d->type_k != d->type_v) return AC_OTHER;
    switch (d->type_k) {
    case LKV_TYPE_Q8_0: return AC_Q8_0;
    case LKV_TYPE_F16: case LKV_TYPE_Q4_0: return AC_RING;
    default: return AC_OTHER;
    }
}

/* [class][phase: 0 decode, 1 prefill][kind: 0 fast, 1 exact] */
static const unsigned char AT_TABLE[AC_CLASSES][2][2] = {
    /* q8_0  */ {{LKV_ATT_RING2, LKV_ATT_RING2}, {LKV_ATT_MMA, LKV_ATT_EXACT}},
    /* ring  */ {{LKV_ATT_RING, LKV_ATT_RING}, {LKV_ATT_MMA, LKV_ATT_EXACT}},
    /* other */ {{LKV_ATT_EXACT, LKV_ATT_EXACT}, {LKV_ATT_MMA, LKV_ATT_EXACT}},
};

static int at_choose(const lkv_bctx *b, const lkv_attn_desc *d) {
    if (d->window > 0) return LKV_ATT_EXACT;   /* only attn.cu masks a sliding window */
    const int forced = lkv_cuda_tuning.attn;
    if (forced > LKV_ATT_TABLE && forced < LKV_ATT_KERNELS) return forced;
    return AT_TABLE[at_class(d)][d->n_q > MV_MAX_TOK][b->fast ? 0 : 1];
}

void lkv_cuda_attn_accum(lkv_bctx *b, void *st, const float *q, const lkv_attn_desc *d) {
    if (d->n_q <= 0 || d->chunk_hi <= d->chunk_lo || !lkv_cuda_attn_check(b, d)) return;
    const size_t kv = (size_t)d->n_head_kv * d->head_dim;
    const size_t rbk = (size_t)lkv_row_bytes(d->type_k, (int64_t)kv), rbv = (size_t)lkv_row_bytes(d->type_v, (int64_t)kv);
    switch (at_choose(b, d)) {
    case LKV_ATT_MMA:
        if (lkv_cuda_attn_mma(b, st, q, d)) return;
        break;
    case LKV_ATT_RING2:
        if (lkv_cuda_attn_dec_ring2(b, (float *)st, q, d, rbk, rbv)) return;
        [[fallthrough]];   /* a shape ring2 does not cover: ring's (the same bits) */
    case LKV_ATT_RING:
        if (lkv_cuda_attn_dec_ring(b, (float *)st, q, d, rbk, rbv)) return;
        break;
    default: break;
    }
    lkv_cuda_attn_exact(b, st, q, d);
}

/* several sequences' decode rows (backend.h attn_rows): the ring kernels'
 * rows launch where one row's call would take a ring kernel, else 0 */
int lkv_cuda_attn_rows(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *geo, int n,
                       const int32_t *pos, const void *const *k, const void *const *v) {
    if (n < 1 || n > LKV_ROWS_MAX || b->dyn_pos) return 0;
    lkv_attn_desc d = *geo;
    d.n_q = 1;
    const int kind = at_choose(b, &d);
    if (kind != LKV_ATT_RING2 && kind != LKV_ATT_RING) return 0;
    attn_rows_arg ra;
    ra.n = n;
    for (int i = 0; i < n; i++) {
        ra.pos[i] = pos[i];
        ra.k[i] = k[i];
        ra.v[i] = v[i];
    }
    const size_t kv = (size_t)d.n_head_kv * d.head_dim;
    const size_t rbk = (size_t)lkv_row_bytes(d.type_k, (int64_t)kv), rbv = (size_t)lkv_row_bytes(d.type_v, (int64_t)kv);
    lkv_cuda_attn_reset(b, st, n, d.n_head, d.head_dim);
    const bool ran = (kind == LKV_ATT_RING2 && lkv_cuda_attn_dec_ring2_rows(b, (float *)st, q, &d, ra, rbk, rbv)) ||
                     lkv_cuda_attn_dec_ring_rows(b, (float *)st, q, &d, ra, rbk, rbv);
    if (!ran) return 0;   /* the reset is harmless: the caller resets each sequence's rows again */
    lkv_cuda_attn_finish(b, out, st, n, d.n_head, d.head_dim);
    return 1;
}

/* where exact is the choice: attn.cu's fused launch (0 where it does not run) */
int lkv_cuda_attn_whole(lkv_bctx *b, float *out, void *st, const float *q, const lkv_attn_desc *d) {
    if (lkv_cuda_tuning.no_fuse || at_choose(b, d) != LKV_ATT_EXACT) return 0;
    return lkv_cuda_attn_exact_whole(b, out, st, q, d);
}
