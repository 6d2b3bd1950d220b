/*
 * tests/cuda/iq_dq.cu: native/src/cuda/iquant_dq.cuh's iq_dq32<T> run on the
 * host and, where a GPU is present, in a kernel; tests/test_iquants.py builds
 * it with nvcc, feeds it random blocks and compares both outputs with
 * gguf.quants bit for bit.
 *
 *   iq_dq TYPE IN OUT_HOST OUT_DEV
 * IN: raw blocks of TYPE (a ggml type id); OUT_*: the f32 values. OUT_DEV is
 * written only when a CUDA device is usable. Exit status 0 on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include <cuda_runtime.h>

#include "iquant_dq.cuh"

#define TYPES(X) X(LKV_TYPE_IQ2_XXS) X(LKV_TYPE_IQ2_XS) X(LKV_TYPE_IQ2_S) X(LKV_TYPE_IQ3_XXS) \
    X(LKV_TYPE_IQ3_S) X(LKV_TYPE_IQ1_S) X(LKV_TYPE_IQ1_M) X(LKV_TYPE_IQ4_XS)

/* one thread per 32-element group */
template <int T>
__global__ void dq_kernel(const uint8_t *row, float *y, int groups) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g < groups) iq_dq32<T>(row, g, y + 32 * (size_t)g);
}

template <int T>
static int run(const std::vector<uint8_t> &raw, const char *out_host, const char *out_dev) {
    const int groups = (int)(raw.size() / iq_block_bytes<T>() * 8);
    std::vector<float> y((size_t)groups * 32);
    for (int g = 0; g < groups; g++) iq_dq32<T>(raw.data(), g, y.data() + 32 * (size_t)g);
    FILE *f = fopen(out_host, "wb");
    if (!f || fwrite(y.data(), 4, y.size(), f) != y.size()) return 2;
    fclose(f);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        printf("no CUDA device: host path only\n");
        return 0;
    }
    uint8_t *draw = nullptr;
    float *dy = nullptr;
    cudaError_t e = cudaMalloc(&draw, raw.size());
    if (e == cudaSuccess) e = cudaMalloc(&dy, y.size() * 4);
    if (e == cudaSuccess) e = cudaMemcpy(draw, raw.data(), raw.size(), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        dq_kernel<T><<<(groups + 127) / 128, 128>>>(draw, dy, groups);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        printf("CUDA error: %s\n", cudaGetErrorString(e));
        return 3;
    }
    cudaFree(draw);
    cudaFree(dy);
    f = fopen(out_dev, "wb");
    if (!f || fwrite(y.data(), 4, y.size(), f) != y.size()) return 2;
    fclose(f);
    printf("device path: %d groups\n", groups);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: iq_dq TYPE IN OUT_HOST OUT_DEV\n");
        return 1;
    }
    const int type = atoi(argv[1]);
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    std::vector<uint8_t> raw;
    uint8_t buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) raw.insert(raw.end(), buf, buf + k);
    fclose(f);
    switch (type) {
#define X(T) case T: return run<T>(raw, argv[3], argv[4]);
        TYPES(X)
#undef X
    default:
        fprintf(stderr, "not an i-quant type: %d\n", type);
        return 1;
    }
}
