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
 *
 * The float types' functions and the dots of the legacy formats and k-quants
 * exist once per ISA level (quant/isa.h): the table leaves them NULL and the
 * installers of the best level the CPU has fill them in when the library is
 * loaded (lkv_quant_set_isa switches level for tests).
 */
#include "quant/blocks.h"
#include "quant/impl.h"
#include "quant/isa.h"

#define FNS_ISA NULL, NULL, NULL, NULL /* all four installed per ISA level */
#define FNS(t) lkv_##t##_to_float, lkv_##t##_from_float, NULL, NULL /* dots installed */
#define FNS_NOQUANT(t) lkv_##t##_to_float, NULL, NULL, NULL        /* dots installed */
#define FNS_IQ(t) lkv_##t##_to_float, NULL, lkv_##t##_vec_dot, lkv_##t##_vec_dot_rows
#define FNS_ACT(t) lkv_##t##_to_float, lkv_##t##_from_float, NULL, NULL

static lkv_traits table[LKV_TYPE_COUNT] = {
    //                 name     block  bytes               weight kv     vec_dot_type
    [LKV_TYPE_F32]    = {"f32",    1,      4,                  true,  true,  LKV_TYPE_F32,  FNS_ISA},
    [LKV_TYPE_F16]    = {"f16",    1,      2,                  true,  true,  LKV_TYPE_F16,  FNS_ISA},
    [LKV_TYPE_BF16]   = {"bf16",   1,      2,                  true,  true,  LKV_TYPE_BF16, FNS_ISA},
    [LKV_TYPE_Q4_0]   = {"q4_0",   QK4_0,  sizeof(block_q4_0), true,  true,  LKV_TYPE_Q8_0, FNS(q4_0)},
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
    [LKV_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, sizeof(block_iq2_xxs), true, false, LKV_TYPE_Q8_K, FNS_IQ(iq2_xxs)},
    [LKV_TYPE_IQ2_XS]  = {"iq2_xs",  QK_K, sizeof(block_iq2_xs),  true, false, LKV_TYPE_Q8_K, FNS_IQ(iq2_xs)},
    [LKV_TYPE_IQ2_S]   = {"iq2_s",   QK_K, sizeof(block_iq2_s),   true, false, LKV_TYPE_Q8_K, FNS_IQ(iq2_s)},
    [LKV_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, sizeof(block_iq3_xxs), true, false, LKV_TYPE_Q8_K, FNS_IQ(iq3_xxs)},
    [LKV_TYPE_IQ3_S]   = {"iq3_s",   QK_K, sizeof(block_iq3_s),   true, false, LKV_TYPE_Q8_K, FNS_IQ(iq3_s)},
    [LKV_TYPE_IQ1_S]   = {"iq1_s",   QK_K, sizeof(block_iq1_s),   true, false, LKV_TYPE_Q8_K, FNS_IQ(iq1_s)},
    [LKV_TYPE_IQ1_M]   = {"iq1_m",   QK_K, sizeof(block_iq1_m),   true, false, LKV_TYPE_Q8_K, FNS_IQ(iq1_m)},
    [LKV_TYPE_IQ4_XS]  = {"iq4_xs",  QK_K, sizeof(block_iq4_xs),  true, false, LKV_TYPE_Q8_K, FNS_IQ(iq4_xs)},
};

const lkv_traits *lkv_type_traits(int32_t type) {
    if (type < 0 || type >= LKV_TYPE_COUNT || !table[type].name) return NULL;
    return &table[type];
}

// ---------------------------------------------------------------- ISA levels

static int current = -1; /* the level installed */

static void install(int level) {
    switch (level) {
#ifdef LKV_HAVE_ISA_LEVELS
    case LKV_ISA_AVX512:
        lkv_install_float_types_avx512(table);
        lkv_install_dot_legacy_avx512(table);
        lkv_install_dot_blocks_avx512(table);
        lkv_install_dot_kquants_avx512(table);
        lkv_install_gemm_kquants_avx512(table);
        lkv_install_gemm_iquants_avx512(table);
        lkv_install_gemm_legacy_avx512(table);
        break;
    case LKV_ISA_AVX2:
        lkv_install_float_types_avx2(table);
        lkv_install_dot_legacy_avx2(table);
        lkv_install_dot_blocks_avx2(table);
        lkv_install_dot_kquants_avx2(table);
        lkv_install_gemm_kquants_avx2(table);
        lkv_install_gemm_iquants_avx2(table);
        lkv_install_gemm_legacy_avx2(table);
        break;
#endif
    default:
        lkv_install_float_types_portable(table);
        lkv_install_dot_legacy_portable(table);
        lkv_install_dot_blocks_portable(table);
        lkv_install_dot_kquants_portable(table);
        lkv_install_gemm_kquants_portable(table);
        lkv_install_gemm_iquants_portable(table);
        lkv_install_gemm_legacy_portable(table);
    }
    lkv_iq_dot_force_portable(level == LKV_ISA_PORTABLE);
}

static int available(int level) {
    if (level == LKV_ISA_PORTABLE) return 1;
#ifdef LKV_HAVE_ISA_LEVELS
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c");
    if (level == LKV_ISA_AVX2) return avx2;
    if (level == LKV_ISA_AVX512)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
#endif
    return 0;
}

int lkv_quant_isa(void) { return current; }

const char *lkv_quant_isa_name(int level) {
    static const char *names[LKV_ISA_COUNT] = {"portable", "avx2", "avx512-vnni"};
    return level >= 0 && level < LKV_ISA_COUNT ? names[level] : "unknown";
}

static int best(void) {
    int level = LKV_ISA_COUNT - 1;
    while (!available(level)) level--;
    return level;
}

__attribute__((constructor)) static void install_best(void) {
    current = best();
    install(current);
}

int lkv_quant_set_isa(int level) {
    if (level == -1) level = best();
    if (level < 0 || level >= LKV_ISA_COUNT || !available(level)) return -1;
    const int prev = current;
    install(level);
    current = level;
    return prev;
}
