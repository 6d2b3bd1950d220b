/*
 * recurrent.h: the per-sequence recurrent state of a hybrid model's Gated
 * DeltaNet layers, beside the KV cache: per layer the conv state
 * (K-1, conv_dim) and the delta-rule state (nv, dk, dv), f32, in backend
 * memory; and a few snapshots of it at chosen positions.
 *
 * The state cannot be cut back to an arbitrary position the way KV rows
 * can: a context returns to position n only if n is 0 (the zero state), the
 * current position, or a snapshot's position. Snapshots past the position a
 * context returns to are dropped (their tokens are about to change).
 */
#ifndef LKV_RECURRENT_H
#define LKV_RECURRENT_H

#include <stdint.h>

#include "backend.h"

typedef struct lkv_recur lkv_recur;

typedef struct lkv_recur_config {
    int32_t n_layer;          /* Gated DeltaNet layers */
    int64_t conv_floats;      /* per layer: (K-1) * conv_dim */
    int64_t delta_floats;     /* per layer: nv * dk * dv */
    int32_t n_snapshots;
} lkv_recur_config;

lkv_status lkv_recur_create(lkv_recur **out, const lkv_recur_config *cfg, const lkv_backend *be,
                            lkv_bctx *b);
void lkv_recur_free(lkv_recur *r);
/* this layer's live conv state (K-1, conv_dim) and delta state (nv, dk, dv) */
float *lkv_recur_conv(lkv_recur *r, int layer);
float *lkv_recur_delta(lkv_recur *r, int layer);
/* bytes of the live state */
uint64_t lkv_recur_bytes(const lkv_recur *r);
/* the largest position <= n (and <= n_tokens) that lkv_recur_truncate accepts */
int32_t lkv_recur_restore_point(const lkv_recur *r, int32_t n, int32_t n_tokens);
/* the live state at n_tokens goes back to position n (see above); LKV_ERR_INVALID_ARG
 * naming the usable positions otherwise */
lkv_status lkv_recur_truncate(lkv_recur *r, int32_t n, int32_t n_tokens);
/* keep the live state as the snapshot of position pos */
lkv_status lkv_recur_snapshot(lkv_recur *r, int32_t pos);
/* dst's live state becomes src's (same config); dst's snapshots are dropped */
lkv_status lkv_recur_copy(lkv_recur *dst, lkv_recur *src);
/* the live state to / from host memory (lkv_recur_bytes); loading drops the snapshots */
lkv_status lkv_recur_read(lkv_recur *r, void *dst);
lkv_status lkv_recur_write(lkv_recur *r, const void *src);

#endif
