/*
 * recurrent.c: the hybrid model's recurrent state and its snapshots (see
 * recurrent.h). One allocation holds every layer's live state, each
 * snapshot another of the same size; all copies go through the backend
 * (device to device on CUDA), and zeroing is an upload of zeros copied on.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "recurrent.h"

#define MAX_SNAPSHOTS 64
#define ZERO_BYTES ((size_t)1 << 16)

typedef struct {
    void *mem;
    int32_t pos;        /* -1: empty */
    uint64_t stamp;     /* when it was taken, for replacing the oldest */
} snapshot;

struct lkv_recur {
    lkv_recur_config cfg;
    const lkv_backend *be;
    lkv_bctx *b;
    size_t bytes;       /* live state (and each snapshot) */
    void *live;
    snapshot snaps[MAX_SNAPSHOTS];
    uint64_t clock;
};

static size_t layer_floats(const lkv_recur *r) {
    return (size_t)(r->cfg.conv_floats + r->cfg.delta_floats);
}

/* one upload of zeros, then copies of the zeroed prefix onto the rest, each
 * doubling it (the 27B's 150 MiB: 12 device copies instead of 2400 uploads) */
static void zero(lkv_recur *r) {
    static const char zeros[ZERO_BYTES];
    size_t done = r->bytes < ZERO_BYTES ? r->bytes : ZERO_BYTES;
    r->be->upload(r->b, r->live, zeros, done);
    while (done < r->bytes) {
        const size_t n = r->bytes - done < done ? r->bytes - done : done;
        r->be->copy_d2d(r->b, (char *)r->live + done, r->live, n);
        done += n;
    }
}

lkv_status lkv_recur_create(lkv_recur **out, const lkv_recur_config *cfg, const lkv_backend *be,
                            lkv_bctx *b) {
    if (cfg->n_snapshots < 0 || cfg->n_snapshots > MAX_SNAPSHOTS)
        return lkv_fail(LKV_ERR_INVALID_ARG, "n_state_snapshots must be in [0, %d] (got %d)",
                        MAX_SNAPSHOTS, cfg->n_snapshots);
    lkv_recur *r = calloc(1, sizeof *r);
    if (!r) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for the recurrent state");
    r->cfg = *cfg;
    r->be = be;
    r->b = b;
    r->bytes = sizeof(float) * layer_floats(r) * (size_t)cfg->n_layer;
    r->live = be->alloc(b, r->bytes);
    bool ok = r->live != NULL;
    for (int i = 0; i < cfg->n_snapshots && ok; i++) {
        r->snaps[i].pos = -1;
        ok = (r->snaps[i].mem = be->alloc(b, r->bytes)) != NULL;
    }
    if (!ok) {
        const size_t bytes = r->bytes;
        lkv_recur_free(r);
        return lkv_fail(LKV_ERR_DEVICE_MEMORY, "cannot allocate the recurrent state: %zu bytes, "
                        "and as much for each of %d snapshots", bytes, cfg->n_snapshots);
    }
    zero(r);
    *out = r;
    return LKV_OK;
}

void lkv_recur_free(lkv_recur *r) {
    if (!r) return;
    if (r->live) r->be->free(r->b, r->live);
    for (int i = 0; i < r->cfg.n_snapshots; i++)
        if (r->snaps[i].mem) r->be->free(r->b, r->snaps[i].mem);
    free(r);
}

float *lkv_recur_conv(lkv_recur *r, int layer) {
    return (float *)r->live + (size_t)layer * layer_floats(r);
}

float *lkv_recur_delta(lkv_recur *r, int layer) {
    return lkv_recur_conv(r, layer) + r->cfg.conv_floats;
}

uint64_t lkv_recur_bytes(const lkv_recur *r) { return r->bytes; }

int32_t lkv_recur_restore_point(const lkv_recur *r, int32_t n, int32_t n_tokens) {
    if (n >= n_tokens) return n_tokens;
    int32_t best = 0;
    for (int i = 0; i < r->cfg.n_snapshots; i++)
        if (r->snaps[i].pos <= n && r->snaps[i].pos > best) best = r->snaps[i].pos;
    return best;
}

static void drop_after(lkv_recur *r, int32_t n) {
    for (int i = 0; i < r->cfg.n_snapshots; i++)
        if (r->snaps[i].pos > n) r->snaps[i].pos = -1;
}

lkv_status lkv_recur_truncate(lkv_recur *r, int32_t n, int32_t n_tokens) {
    if (n == n_tokens) return LKV_OK;
    if (n == 0) {
        zero(r);
        drop_after(r, 0);
        return r->be->sync(r->b);
    }
    for (int i = 0; i < r->cfg.n_snapshots; i++) {
        if (r->snaps[i].pos == n) {
            r->be->copy_d2d(r->b, r->live, r->snaps[i].mem, r->bytes);
            drop_after(r, n);
            return r->be->sync(r->b);
        }
    }
    char have[256] = "0";
    size_t len = 1;
    for (int i = 0; i < r->cfg.n_snapshots && len < sizeof have - 16; i++)
        if (r->snaps[i].pos > 0)
            len += (size_t)snprintf(have + len, sizeof have - len, ", %d", (int)r->snaps[i].pos);
    return lkv_fail(LKV_ERR_INVALID_ARG, "cannot truncate to %d: the recurrent state of this "
                    "hybrid model returns only to %s or %d (the current position)", n, have,
                    n_tokens);
}

lkv_status lkv_recur_snapshot(lkv_recur *r, int32_t pos) {
    if (r->cfg.n_snapshots == 0) return LKV_OK;
    snapshot *dst = NULL;
    for (int i = 0; i < r->cfg.n_snapshots && !dst; i++)
        if (r->snaps[i].pos == pos) dst = &r->snaps[i];
    for (int i = 0; i < r->cfg.n_snapshots && !dst; i++)
        if (r->snaps[i].pos < 0) dst = &r->snaps[i];
    if (!dst) {
        dst = &r->snaps[0];
        for (int i = 1; i < r->cfg.n_snapshots; i++)
            if (r->snaps[i].stamp < dst->stamp) dst = &r->snaps[i];
    }
    r->be->copy_d2d(r->b, dst->mem, r->live, r->bytes);
    dst->pos = pos;
    dst->stamp = ++r->clock;
    return r->be->sync(r->b);
}

lkv_status lkv_recur_copy(lkv_recur *dst, lkv_recur *src) {
    dst->be->copy_d2d(dst->b, dst->live, src->live, dst->bytes);
    drop_after(dst, -1);
    return dst->be->sync(dst->b);
}

lkv_status lkv_recur_read(lkv_recur *r, void *dst) {
    r->be->download(r->b, dst, r->live, r->bytes);
    return r->be->sync(r->b);
}

lkv_status lkv_recur_write(lkv_recur *r, const void *src) {
    r->be->upload(r->b, r->live, src, r->bytes);
    drop_after(r, -1);
    return r->be->sync(r->b);
}
