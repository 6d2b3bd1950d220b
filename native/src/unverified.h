/*
 * unverified.h: CUDA paths that are built and tested on the host (emulators,
 * harnesses compiled) but have not yet run on a GPU stay off unless the
 * environment variable PYLLAMAKV_CUDA_UNVERIFIED is set (to anything but "0"):
 * gemma3 / sliding-window models on CUDA (cuda/gemma.cu, attn.cu's window mask)
 * and MoE models on CUDA (cuda/moe.cu, the host experts beside it:
 * tests/test_cuda_moe.py). A device run of tests/cuda/test_ops (gemma) and
 * tests/test_cuda_gemma3.py / test_cuda_moe.py passing is what turns one on for
 * good. (The device-side greedy pick, cuda/sample.cu, passed its checks on an
 * H100 on 2026-12-07 and is on.)
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
