/*
 * quant/isa.h: the instruction-set levels the dot kernels are built for, and
 * how the traits table picks one at run time.
 *
 * The sources with SIMD paths (float_types.c, dot_legacy.c, dot_blocks.c,
 * dot_kquants.c, gemm_*.c) are compiled once per level
 * (quant/meson.build): portable (the baseline, no flags), avx2 (-mavx2
 * -mfma -mf16c) and avx512
 * (-march=x86-64-v4 -mavx512vnni: the same 256-bit kernels, with VNNI for
 * the u8 x s8 dot). LKV_ISA_SUFFIX (_portable, _avx2, _avx512) names each
 * copy; its functions are static and one installer per source,
 * LKV_ISA_FN(lkv_install_...), writes them into the table. traits.c installs
 * the best level the CPU supports when the library is loaded.
 *
 * Every level gives the same bits for every dot: the integer parts are exact
 * and the float operations (fused multiply-adds, reduction trees) are the
 * same on every level.
 */
#ifndef LKV_QUANT_ISA_H
#define LKV_QUANT_ISA_H

#include "quant/types.h"

enum { LKV_ISA_PORTABLE = 0, LKV_ISA_AVX2 = 1, LKV_ISA_AVX512 = 2, LKV_ISA_COUNT = 3 };

#define LKV_ISA_CAT2(a, b) a##b
#define LKV_ISA_CAT(a, b) LKV_ISA_CAT2(a, b)
#define LKV_ISA_FN(name) LKV_ISA_CAT(name, LKV_ISA_SUFFIX)

/* One installer per multi-level source and level; `t` is the table indexed
 * by type id. */
#define LKV_DECL_INSTALLERS(S)                              \
    void lkv_install_float_types##S(lkv_traits *t);         \
    void lkv_install_dot_legacy##S(lkv_traits *t);          \
    void lkv_install_dot_blocks##S(lkv_traits *t);          \
    void lkv_install_dot_kquants##S(lkv_traits *t);         \
    void lkv_install_gemm_kquants##S(lkv_traits *t);         \
    void lkv_install_gemm_iquants##S(lkv_traits *t);         \
    void lkv_install_gemm_legacy##S(lkv_traits *t);
LKV_DECL_INSTALLERS(_portable)
LKV_DECL_INSTALLERS(_avx2)
LKV_DECL_INSTALLERS(_avx512)
#undef LKV_DECL_INSTALLERS

/* The level in use, and its name ("portable", "avx2", "avx512-vnni"). */
int lkv_quant_isa(void);
const char *lkv_quant_isa_name(int level);

/* Installs `level` (-1: the best) if the CPU and the build have it (tests);
 * returns the previous level, or -1 (nothing changed) where it is not
 * available. Not while another thread runs dots. */
int lkv_quant_set_isa(int level);

#endif
