/* tests/cuda/bench_util.h — what the kernel microbenchmarks (bench_gemm,
 * bench_gemv) share: a CUDA-call check that exits naming the program, a
 * reproducible random stream for weight bytes, the GGUF block sizes of the
 * types they time, and a float comparator for medians.  Header-only: each
 * program defines BENCH_NAME before including it. */
#ifndef SI_TESTS_CUDA_BENCH_UTIL_H
#define SI_TESTS_CUDA_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <sparkinfer/types.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME (the program's name, for messages) before including bench_util.h"
#endif

#define CK(x)                                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            fprintf(stderr, BENCH_NAME ": %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

/* xorshift: the same weights on every run of a program. */
static uint64_t bench_rs = 0x9e3779b97f4a7c15ull;
static inline uint32_t r32(void)
{
    bench_rs ^= bench_rs << 13;
    bench_rs ^= bench_rs >> 7;
    bench_rs ^= bench_rs << 17;
    return (uint32_t)(bench_rs >> 16);
}

/* Bytes of one GGUF block of Q8_0 (32 weights) or Q4_K/Q5_K/Q6_K (256). */
static inline int bench_blk_bytes(uint32_t t)
{
    return t == SI_TYPE_Q8_0 ? 34 : t == SI_TYPE_Q4_K ? 144 : t == SI_TYPE_Q5_K ? 176 : 210;
}

static inline int64_t bench_row_bytes(uint32_t t, int64_t in)
{
    return in / (t == SI_TYPE_Q8_0 ? 32 : 256) * bench_blk_bytes(t);
}

static inline int bench_cmpf(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#endif
