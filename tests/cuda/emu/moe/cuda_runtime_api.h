/* tests/cuda/emu/moe/cuda_runtime_api.h — C stand-in for the CUDA runtime
 * calls of plugins/moe_grouped_i8/moe_grouped_i8.c under the host
 * emulation (moe_emu.cc implements them: guarded host memory, a stream
 * that is always idle, a device of EMU_MEM_TOTAL / EMU_MEM_FREE bytes;
 * mw_emu.cc those the GEMMs' launchers call). */
#ifndef EMU_CUDA_RUNTIME_API_H
#define EMU_CUDA_RUNTIME_API_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorLaunchFailure = 719 };
typedef int cudaMemcpyKind;
enum { cudaMemcpyDeviceToHost = 2 };
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s);
const char *cudaGetErrorString(cudaError_t e);
#ifdef __cplusplus
}
#endif
#endif
