/*
 * quant/traits.c: the traits table, the one place that maps a type id to its
 * name, block geometry, roles (weight / KV cache) and functions.
 *
 * vec_dot_type follows ggml: the symmetric 32-blocks dot with q8_0, the ones
 * with a minimum with q8_1 (whose stored sum serves the minimum's term), the
 * k-quants and the 256-element i-quants with q8_K, the float types with
 * themselves. The activation-only formats q8_1 and q8_K have no dot of their
 * own and are neither weight nor KV types. from_float is NULL where
 * quantization is not offered (the weight k-quants and i-quants: models
 * arrive quantized).
 */
#include "quant/blocks.h"
#include "quant/impl.h"

#define FNS(t) lkv_##t##_to_float, lkv_##t##_from_float, lkv_##t##_vec_dot, lkv_##t##_vec_dot_rows
#define FNS_NOQUANT(t) lkv_##t##_to_float, NULL, lkv_##t##_vec_dot, lkv_##t##_vec_dot_rows
#define FNS_ACT(t) lkv_##t##_to_float, lkv_##t##_from_float, NULL, NULL

static const lkv_traits table[LKV_TYPE_COUNT] = {
    //                 name     block  bytes               weight kv     vec_dot_type
    [LKV_TYPE_F32]    = {"f32",    1,      4,                  true,  true,  LKV_TYPE_F32,  FNS(f32)},
    [LKV_TYPE_F16]    = {"f16",    1,      2,                  true,  true,  LKV_TYPE_F16,  FNS(f16)},
    [LKV_TYPE_BF16]   = {"bf16",   1,      2,                  true,  true,  LKV_TYPE_BF16, FNS(bf16)},
    [LKV_TYPE_Q4_0]   = {"q4_0",   QK4_0,  sizeof(block_q4_0), true,  true,  LKV_TYPE_Q8_0, FNS(q4_0), lkv_q4_0_kv_dot},
    [LKV_TYPE_Q4_1]   = {"q4_1",   QK4_1,  sizeof(block_q4_1), true,  true,  LKV_TYPE_Q8_1, FNS(q4_1)},
    [LKV_TYPE_Q5_0]   = {"q5_0",   QK5_0,  sizeof(block_q5_0), true,  true,  LKV_TYPE_Q8_0, FNS(q5_0)},
    [LKV_TYPE_Q5_1]   = {"q5_1",   QK5_1,  sizeof(block_q5_1), true,  true,  LKV_TYPE_Q8_1, FNS(q5_1)},
    [LKV_TYPE_Q8_0]   = {"q8_0",   QK8_0,  sizeof(block_q8_0), true,  true,  LKV_TYPE_Q8_0, FNS(q8_0)},
    [LKV_TYPE_Q8_1]   = {"q8_1",   QK8_1,  sizeof(block_q8_1), false, false, LKV_TYPE_Q8_1, FNS_ACT(q8_1)},
    [LKV_TYPE_Q2_K]   = {"q2_K",   QK_K,   sizeof(block_q2_K), true,  false, LKV_TYPE_Q8_K, FNS_NOQUANT(q2_K)},
    [LKV_TYPE_Q3_K]   = {"q3_K",   QK_K,   sizeof(block_q3_K), true,  false, LKV_TYPE_Q8_K, FNS_NOQUANT(q3_K)},
    [LKV_TYPE_Q4_K]   = {"q4_K",   QK_K,   sizeof(block_q4_K), true,  false, LKV_TYPE_Q8_K, FNS_NOQUANT(q4_K)},
    [LKV_TYPE_Q5_K]   = {"q5_K",   QK_K,   sizeof(block_q5_K), true,  false, LKV_TYPE_Q8_K, FNS_NOQUANT(q5_K)},
    [LKV_TYPE_Q6_K]   = {"q6_K",   QK_K,   sizeof(block_q6_K), true,  false, LKV_TYPE_Q8_K, FNS_NOQUANT(q6_K)},
    [LKV_TYPE_Q8_K]   = {"q8_K",   QK_K,   sizeof(block_q8_K), false, false, LKV_TYPE_Q8_K, FNS_ACT(q8_K)},
    [LKV_TYPE_IQ4_NL] = {"iq4_nl", QK4_NL, sizeof(block_iq4_nl), true, true, LKV_TYPE_Q8_0, FNS(iq4_nl)},
    [LKV_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, sizeof(block_iq2_xxs), true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq2_xxs)},
    [LKV_TYPE_IQ2_XS]  = {"iq2_xs",  QK_K, sizeof(block_iq2_xs),  true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq2_xs)},
    [LKV_TYPE_IQ2_S]   = {"iq2_s",   QK_K, sizeof(block_iq2_s),   true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq2_s)},
    [LKV_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, sizeof(block_iq3_xxs), true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq3_xxs)},
    [LKV_TYPE_IQ3_S]   = {"iq3_s",   QK_K, sizeof(block_iq3_s),   true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq3_s)},
    [LKV_TYPE_IQ1_S]   = {"iq1_s",   QK_K, sizeof(block_iq1_s),   true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq1_s)},
    [LKV_TYPE_IQ1_M]   = {"iq1_m",   QK_K, sizeof(block_iq1_m),   true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq1_m)},
    [LKV_TYPE_IQ4_XS]  = {"iq4_xs",  QK_K, sizeof(block_iq4_xs),  true, false, LKV_TYPE_Q8_K, FNS_NOQUANT(iq4_xs)},
};

const lkv_traits *lkv_type_traits(int32_t type) {
    if (type < 0 || type >= LKV_TYPE_COUNT || !table[type].name) return NULL;
    return &table[type];
}
