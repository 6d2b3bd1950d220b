/*
 * quant/iq_tables.h: the lookup tables of the i-quant formats, defined in the
 * generated quant/iq_tables.c (tools/gen_iq_tables.py, from gguf.quants).
 * Each grid row is one point of 8 (or 4) levels that a code selects; signs
 * and scales come from the block (quant/blocks.h).
 */
#ifndef LKV_QUANT_IQ_TABLES_H
#define LKV_QUANT_IQ_TABLES_H

#include <stdint.h>

extern const uint8_t lkv_iq2xxs_grid[256][8];  /* levels 8, 25, 43 */
extern const uint8_t lkv_iq2xs_grid[512][8];
extern const uint8_t lkv_iq2s_grid[1024][8];
extern const uint8_t lkv_iq3xxs_grid[256][4];  /* levels 4 .. 62 */
extern const uint8_t lkv_iq3s_grid[512][4];    /* odd levels 1 .. 15 */
extern const int8_t lkv_iq1s_grid[2048][8];    /* levels -1, 0, 1 */
/* a 7-bit sign index -> 8 sign bits (bit j set: element j negative) */
extern const uint8_t lkv_iq_ksigns[128];

#endif
