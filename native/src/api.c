/*
 * api.c: every exported lkv_* symbol. Each entry point validates its
 * arguments, clears the thread's error, calls into the core and returns the
 * status; the message for a failure is set where the failure is found.
 */
#include <stdlib.h>
#include <string.h>

#include "llamakv.h"
#include "error.h"
#include "quant/types.h"

#define API LKV_API

// ---------------------------------------------------------------- version

API int32_t lkv_abi_version(void) { return LKV_ABI_VERSION; }

API const char *lkv_last_error(void) { return lkv_error_message(); }

API const char *lkv_version(void) { return "0.1.0"; }

API const char *lkv_build_features(void) {
    return ""
#ifdef __AVX2__
           "avx2 "
#endif
#ifdef __FMA__
           "fma "
#endif
#ifdef __F16C__
           "f16c "
#endif
#ifdef __AVX512F__
           "avx512f "
#endif
#ifdef LKV_HAVE_CUDA
           "cuda "
#endif
           "cpu";
}

// ---------------------------------------------------------------- types

static lkv_status get_traits(int32_t type, const lkv_traits **out) {
    const lkv_traits *t = lkv_type_traits(type);
    if (!t) return lkv_fail(LKV_ERR_UNSUPPORTED, "unsupported element type id %d", (int)type);
    *out = t;
    return LKV_OK;
}

static lkv_status check_n(const lkv_traits *t, int64_t n) {
    if (n < 0 || n % t->block_size)
        return lkv_fail(LKV_ERR_INVALID_ARG, "%lld elements is not a multiple of %s's block of %d",
                        (long long)n, t->name, (int)t->block_size);
    return LKV_OK;
}

API lkv_status lkv_type_info_get(int32_t type, lkv_type_info *out) {
    const lkv_traits *t;
    if (!out) return lkv_fail(LKV_ERR_INVALID_ARG, "out is NULL");
    LKV_TRY(get_traits(type, &t));
    out->name = t->name;
    out->block_size = t->block_size;
    out->type_size = t->type_size;
    out->is_weight_type = t->is_weight;
    out->is_kv_type = t->is_kv;
    return LKV_OK;
}

API int64_t lkv_row_bytes(int32_t type, int64_t n) {
    const lkv_traits *t = lkv_type_traits(type);
    if (!t || n < 0 || n % t->block_size) return -1;
    return lkv_type_row_bytes(t, n);
}

API lkv_status lkv_dequantize(int32_t type, const void *src, float *dst, int64_t n) {
    const lkv_traits *t;
    LKV_TRY(get_traits(type, &t));
    LKV_TRY(check_n(t, n));
    if (!src || !dst) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL buffer");
    t->to_float(src, dst, n);
    return LKV_OK;
}

API lkv_status lkv_quantize(int32_t type, const float *src, void *dst, int64_t n) {
    const lkv_traits *t;
    LKV_TRY(get_traits(type, &t));
    LKV_TRY(check_n(t, n));
    if (!src || !dst) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL buffer");
    if (!t->from_float) return lkv_fail(LKV_ERR_UNSUPPORTED, "%s cannot be quantized here", t->name);
    t->from_float(src, dst, n);
    return LKV_OK;
}

API lkv_status lkv_vec_dot(int32_t type, int64_t n, const void *x, const float *y, float *out) {
    const lkv_traits *t, *vt;
    LKV_TRY(get_traits(type, &t));
    LKV_TRY(check_n(t, n));
    if (!x || !y || !out) return lkv_fail(LKV_ERR_INVALID_ARG, "NULL buffer");
    if (!t->vec_dot) return lkv_fail(LKV_ERR_UNSUPPORTED, "%s has no dot product", t->name);
    LKV_TRY(get_traits(t->vec_dot_type, &vt));
    LKV_TRY(check_n(vt, n));
    void *yq = malloc((size_t)lkv_type_row_bytes(vt, n) + 64);
    if (!yq) return lkv_fail(LKV_ERR_OUT_OF_MEMORY, "no memory for %lld elements", (long long)n);
    vt->from_float(y, yq, n);
    t->vec_dot((int)n, out, x, yq);
    free(yq);
    return LKV_OK;
}
