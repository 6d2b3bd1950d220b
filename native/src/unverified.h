/*
 * unverified.h: CUDA paths that are built and tested on the host (emulators,
 * harnesses compiled) but have not yet run on a GPU stay off unless the
 * environment variable PYLLAMAKV_CUDA_UNVERIFIED is set (to anything but "0"):
 * gemma3 / sliding-window models on CUDA (cuda/gemma.cu, attn.cu's window mask)
 * the device-side greedy pick of lkv_generate (cuda/sample.cu) and MoE models
 * on CUDA (cuda/moe.cu, the host experts beside it: tests/test_cuda_moe.py). A device
 * run of tests/cuda/test_ops (gemma, pick) and tests/test_cuda_gemma3.py /
 * tests/test_greedy_loop.py with PYLLAMAKV_TEST_DEVICE=cuda is what turns one on
 * for good.
 */
#ifndef LKV_UNVERIFIED_H
#define LKV_UNVERIFIED_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LKV_UNVERIFIED_ENV "PYLLAMAKV_CUDA_UNVERIFIED"

static inline bool lkv_unverified_on(void) {
    const char *e = getenv(LKV_UNVERIFIED_ENV);
    return e && *e && strcmp(e, "0") != 0;
}

#endif
