/*
 * cpu/matmul.c: out (n, rows) = x (n, cols) @ W^T (rows, cols) for quantized W.
 *
 * As in ggml, activations are first converted to the weight type's
 * vec_dot_type (8-bit blocks for the quantized types) so that the inner loop
 * is an integer dot product. One call serves several weights that share the
 * input (q/k/v, gate/up): the input is converted once per format and all the
 * weights' rows are split across the threads in one job.
 *
 * Loop order: a tile of weight rows stays in L1 while it meets every token in
 * groups of four (vec_dot_rows, or vec_dot_tile for the whole tile where the
 * type has one); the converted activations stay in L2. From GEMM_MIN_TOKENS
 * tokens on, a type with a GEMM tile (traits' gemm: the quantized types on the
 * AVX2 levels, quant/gemm_*.c) unpacks the tile's rows once into per-thread
 * scratch and runs them against all the tokens, several rows and tokens per
 * inner loop. Each output element is one vec_dot's bits, whatever the tiling
 * or path, so a batch and the same tokens one by one give bit-identical
 * results.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "quant/types.h"

#define ROW_TILE 16          /* = LKV_GEMM_ROWS */
#define GEMM_MIN_TOKENS 8    /* fewer tokens do not repay a tile's unpacking */
_Static_assert(ROW_TILE == LKV_GEMM_ROWS, "a gemm call takes one row tile");
#define MAX_W 3   /* weights per call: q/k/v */

// ------------------------------------------------------------------ convert

typedef struct {
    const float *x;
    int n, cols;
    void *dst;
    const lkv_traits *vt;
} convert_job;

static void convert_fn(void *arg, int ith, int nth, int thread) {
    (void)thread;
    convert_job *j = arg;
    long lo, hi;
    lkv_split(j->n, ith, nth, &lo, &hi);
    size_t rb = (size_t)lkv_type_row_bytes(j->vt, j->cols);
    for (long t = lo; t < hi; t++)
        j->vt->from_float(j->x + t * (size_t)j->cols, (char *)j->dst + t * rb, j->cols);
}

// ------------------------------------------------------------------ dot

typedef struct {
    float *const *outs;
    const lkv_weight *const *ws;
    const void *act[MAX_W];      /* converted input for weight i */
    size_t act_stride[MAX_W];
    long row_start[MAX_W + 1];   /* prefix sums of rows */
    int n_w, n;
    char *scratch;               /* (n_threads, scratch_bytes): the gemm tiles' */
    size_t scratch_bytes;
} dot_job;

static void dot_rows(const dot_job *j, int wi, long r0, long r1, int thread) {
    const lkv_weight *w = j->ws[wi];
    const lkv_traits *t = lkv_type_traits(w->type);
    const int cols = (int)w->cols;
    const size_t as = j->act_stride[wi];
    const char *act = j->act[wi];
    float *out = j->outs[wi];
    const long rows = w->rows;
    if (t->gemm && j->n >= GEMM_MIN_TOKENS && lkv_gemm_scratch_bytes(cols) <= j->scratch_bytes) {
        for (long rt = r0; rt < r1; rt += ROW_TILE) {
            long re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
            t->gemm(cols, out + rt, (size_t)rows, (const char *)w->data + rt * w->row_bytes,
                    w->row_bytes, (int)(re - rt), act, as, j->n,
                    j->scratch + (size_t)thread * j->scratch_bytes);
        }
        return;
    }
    for (long rt = r0; rt < r1; rt += ROW_TILE) {
        long re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
        for (int t0 = 0; t0 < j->n; t0 += 4) {
            int nt = j->n - t0 < 4 ? j->n - t0 : 4;
            if (t->vec_dot_tile) {
                t->vec_dot_tile(cols, out + (size_t)t0 * rows + rt, (size_t)rows,
                                (const char *)w->data + rt * w->row_bytes, w->row_bytes,
                                (int)(re - rt), act + t0 * as, as, nt);
                continue;
            }
            for (long r = rt; r < re; r++) {
                const void *wr = (const char *)w->data + r * w->row_bytes;
                float s[4];
                if (t->vec_dot_rows && nt > 1) {
                    t->vec_dot_rows(cols, s, wr, act + t0 * as, as, nt);
                } else {
                    for (int k = 0; k < nt; k++) t->vec_dot(cols, &s[k], wr, act + (t0 + k) * as);
                }
                for (int k = 0; k < nt; k++) out[(size_t)(t0 + k) * rows + r] = s[k];
            }
        }
    }
}

static void dot_fn(void *arg, int ith, int nth, int thread) {
    const dot_job *j = arg;
    long total = j->row_start[j->n_w];
    long tiles = (total + ROW_TILE - 1) / ROW_TILE;
    long lo, hi;
    lkv_split(tiles, ith, nth, &lo, &hi);
    lo *= ROW_TILE;
    hi = hi * ROW_TILE < total ? hi * ROW_TILE : total;
    for (int wi = 0; wi < j->n_w && lo < hi; wi++) {
        long a = j->row_start[wi], b = j->row_start[wi + 1];
        long s = lo > a ? lo : a, e = hi < b ? hi : b;
        if (s < e) dot_rows(j, wi, s - a, e - a, thread);
    }
}

// ------------------------------------------------------------------ entry

void lkv_cpu_matmul(lkv_bctx *b, float *const *outs, const float *x, const lkv_weight *const *ws,
                    int n_w, int n) {
    /* all weights of one call share the input, hence cols */
    dot_job dj = {.outs = outs, .ws = ws, .n_w = n_w, .n = n,
                  .scratch = b->gemm_scratch, .scratch_bytes = b->gemm_scratch_bytes};
    int32_t conv_type[MAX_W];
    int used = 0;
    for (int wi = 0; wi < n_w; wi++) {
        const lkv_traits *t = lkv_type_traits(ws[wi]->type);
        const lkv_traits *vt = lkv_type_traits(t->vec_dot_type);
        int slot = -1;
        for (int k = 0; k < used; k++)
            if (conv_type[k] == t->vec_dot_type) slot = k;
        if (slot < 0) {
            slot = used++;
            conv_type[slot] = t->vec_dot_type;
            convert_job cj = {x, n, (int)ws[wi]->cols, b->act_q[slot], vt};
            lkv_tp_run(b->tp, convert_fn, &cj);
        }
        dj.act[wi] = b->act_q[slot];
        dj.act_stride[wi] = (size_t)lkv_type_row_bytes(vt, ws[wi]->cols);
        dj.row_start[wi + 1] = dj.row_start[wi] + ws[wi]->rows;
    }
    lkv_tp_run(b->tp, dot_fn, &dj);
}
