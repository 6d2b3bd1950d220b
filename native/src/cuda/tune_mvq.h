/*
 * cuda/tune_mvq.h: mvq.cu's test-only override, beside tune.h's (the same
 * rules: zero is the library's own choice; a program that sets it bumps
 * lkv_cuda_tuning.gen so that no captured decode graph keeps the old choice).
 * Kept out of tune.h, which every CUDA object includes.
 */
#ifndef LKV_CUDA_TUNE_MVQ_H
#define LKV_CUDA_TUNE_MVQ_H

#ifdef __cplusplus
extern "C" {
#endif

/* mvq.cu's rows a warp: 1 | 2 | 4 (4 is 2 above 2 tokens); 0: its own choice */
extern int lkv_cuda_mvq_rows;

#ifdef __cplusplus
}
#endif

#endif
