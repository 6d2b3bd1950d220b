/*
 * sample_chain.h: engine/sampling.py's sampler chain in C, for lkv_generate
 * (generate.c) and lkv_sample: penalties -> logit bias -> greedy or
 * top_k -> typical_p -> top_p -> min_p -> temperature -> one draw from
 * numpy's PCG64 (mirostat stays in Python).
 *
 * The same float64 operations in the same order as the numpy code, the same
 * candidate order (sampling.py keeps candidates largest first, ties by the
 * lower id, so that the order is numpy's on any CPU), numpy's pairwise sum
 * for the softmax denominators and its generator (PCG64, XSL-RR output,
 * random() = (next >> 11) * 2^-53), so a pick is the Python sampler's for the
 * same logits, history and generator state. exp and log are the C library's,
 * which numpy also calls for float64 where it has no SIMD version of its own
 * (x86-64 below AVX-512F); with AVX-512F numpy's own exp may differ in the
 * last bit, which moves a pick only where a draw or the top_p mass falls
 * within that bit of a boundary.
 */
#ifndef LKV_SAMPLE_CHAIN_H
#define LKV_SAMPLE_CHAIN_H

#include <stdbool.h>

#include "llamakv.h"

typedef struct lkv_chain lkv_chain;   /* scratch for one vocabulary size */

lkv_chain *lkv_chain_new(int32_t n_vocab);
void lkv_chain_free(lkv_chain *ch);
int32_t lkv_chain_vocab(const lkv_chain *ch);

/* Whether p is the greedy pick with nothing but the bias (a backend's pick_greedy does it). */
bool lkv_chain_plain(const lkv_generate_params *p);

/* The sampler fields of p (and its history) in range for a vocabulary of n_vocab. */
lkv_status lkv_chain_check(const lkv_generate_params *p, int32_t n_vocab);

/* One pick from row (n_vocab,) after the ids win (n_win,) seen so far (the
 * penalties' history); -1 where the logits after penalties and bias hold a
 * NaN or no finite largest value. *drew: whether a number was drawn from
 * p->rng_state (advanced in place). */
int32_t lkv_chain_pick(lkv_chain *ch, const float *row, const lkv_generate_params *p,
                       const int32_t *win, int32_t n_win, bool *drew);

#endif
