// tests/cuda/emu/cuda_runtime.h — host emulation of the CUDA features the
// GDN kernels use, for checking kernel LOGIC on a machine without a GPU
// (x86-64 only; not part of the build; run-gdn-emu.sh uses it): one block
// at a time, its threads as cooperative fibers; __syncthreads, __syncwarp
// and the shuffles are real barriers (a deadlock, a divergent barrier or
// a barrier after exited threads aborts); dynamic shared memory is filled
// with 0x7f bytes so reading what no thread wrote shows as huge values.
// Says nothing about speed, occupancy, races inside a warp or launch
// limits; math is host libm (expf etc. may differ in the last bit).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include <math.h>
using std::min;
using std::max;
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() {} dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint2 make_uint2(unsigned a, unsigned b) { uint2 r; r.x = a; r.y = b; return r; }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh)
{ return (unsigned)((((unsigned long long)hi << 32) | lo) >> (sh & 31)); }
typedef void *cudaStream_t;
#ifndef EMU_OWN_RUNTIME_API   /* moe/cuda_runtime_api.h declares its own */
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
#endif
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static
static inline float __fmul_rn(float a, float b) { return a * b; }
namespace emu {
extern dim3 threadIdx, blockIdx, blockDim, gridDim;
void sync_block();
void sync_warp();
float *dyn_smem();
void xchg(const void *in, void *out, int size, int src_lane);   // out = lane src_lane's in
}
using emu::threadIdx; using emu::blockIdx; using emu::blockDim; using emu::gridDim;
// a misaligned global load faults on the GPU: it aborts here
template <class T> static inline T __ldg(const T *p)
{
    if ((uintptr_t)p % sizeof(T) != 0) {
        fprintf(stderr, "emu: misaligned %zu-byte global load at %p (block %u,%u thread %u)\n", sizeof(T),
                (const void *)p, blockIdx.x, blockIdx.y, threadIdx.x);
        abort();
    }
    return *p;
}
static inline void __syncthreads() { emu::sync_block(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o)
{ T r; emu::xchg(&v, &r, sizeof(T), (int)(threadIdx.x & 31) ^ o); return r; }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int o)
{ T r; int l = (int)(threadIdx.x & 31); emu::xchg(&v, &r, sizeof(T), l >= o ? l - o : l); return r; }
template <class T> static inline T __shfl_down_sync(unsigned, T v, int o)
{ T r; int l = (int)(threadIdx.x & 31); emu::xchg(&v, &r, sizeof(T), l + o < 32 ? l + o : l); return r; }
// run kernel(args) on every block of the grid
void emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
// what `k<<<grid, block, smem, stream>>>(args)` becomes (sed in run-*-emu.sh)
static inline void emu_launch_s(dim3 grid, dim3 block, size_t smem, cudaStream_t, const std::function<void()> &body)
{ emu_launch(grid, block, smem, body); }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
