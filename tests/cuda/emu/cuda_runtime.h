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
static inline uint2 make_uint2(unsigned a, unsigned b) { uint2 r; r.x = a; r.y = b; return r; }
static inline float2 make_float2(float a, float b) { float2 r; r.x = a; r.y = b; return r; }
static inline float4 make_float4(float a, float b, float c, float d) { float4 r; r.x = a; r.y = b; r.z = c; r.w = d; return r; }
typedef void *cudaStream_t;
#ifndef EMU_OWN_RUNTIME_API   /* moe/cuda_runtime_api.h declares its own */
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// (moe/moe_emu_ext.h has the same two for its own runtime API)
// The device's opt-in shared memory a block (kernels choose their tile by
// it): EMU_SMEM_OPTIN bytes, default an sm_90's 227 KiB (99 KiB: sm_120).
enum { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaDeviceGetAttribute(int *v, int attr, int)
{
    const char *e = getenv("EMU_SMEM_OPTIN");
    *v = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? (e ? atoi(e) : 232448) : 0;
    return cudaSuccess;
}
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
void spin();
float *dyn_smem();
void xchg(const void *in, void *out, int size, int src_lane);   // out = lane src_lane's in
}
using emu::threadIdx; using emu::blockIdx; using emu::blockDim; using emu::gridDim;
static inline void __syncthreads() { emu::sync_block(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o)
{ T r; emu::xchg(&v, &r, sizeof(T), (int)(threadIdx.x & 31) ^ o); return r; }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int o)
{ T r; int l = (int)(threadIdx.x & 31); emu::xchg(&v, &r, sizeof(T), l >= o ? l - o : l); return r; }
template <class T> static inline T __shfl_down_sync(unsigned, T v, int o)
{ T r; int l = (int)(threadIdx.x & 31); emu::xchg(&v, &r, sizeof(T), l + o < 32 ? l + o : l); return r; }
// redux.sync.max.u32: every lane gets the warp's maximum
static inline unsigned __reduce_max_sync(unsigned, unsigned v)
{
    unsigned m = 0;
    for (int l = 0; l < 32; l++) { unsigned r; emu::xchg(&v, &r, sizeof v, l); m = r > m ? r : m; }
    return m;
}
// run kernel(args) on every block of the grid
void emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
// what `k<<<grid, block, smem, stream>>>(args)` becomes (sed in run-*-emu.sh)
static inline void emu_launch_s(dim3 grid, dim3 block, size_t smem, cudaStream_t, const std::function<void()> &body)
{ emu_launch(grid, block, smem, body); }
// cuda_launch.cuh's cu_launch (knob pdl: the attribute has no meaning here;
// the kernels' cu_pdl_enter is a no-op on the host)
#ifndef EMU_OWN_RUNTIME_API
template <typename... P, typename... A>
static inline cudaError_t cu_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A... args)
{ emu_launch_s(grid, block, smem, s, [&] { k(static_cast<P>(args)...); }); return cudaSuccess; }
// (cooperative: every block resident at once; here blocks run one after
// another, so a grid-wide barrier cannot be emulated in one launch)
template <typename... P, typename... A>
static inline cudaError_t cu_launch_coop(void (*)(P...), dim3, dim3, size_t, cudaStream_t, A...)
{ return cudaErrorInvalidValue; }
#endif
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
// Fibers switch only at barriers, so a plain read-modify-write is atomic.
static inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
// Blocks run one after another here (in the order emu_launch picks): a
// block's global stores are seen by every later block, so the fence is
// empty and an L2 load is a plain load.
static inline void __threadfence() {}
template <class T> static inline T __ldcg(const T *p) { return *p; }
static inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
// ---- more intrinsics (the int8 GEMM kernels: cuda_mma.cu, cuda_mmq.cu) ----
// Semantics from the CUDA Math API / PTX ISA, not from the kernels.
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { uint4 r = { a, b, c, d }; return r; }
static inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
static inline int __float_as_int(float f) { int v; memcpy(&v, &f, 4); return v; }
static inline float __int2float_rn(int v) { return (float)v; }   // SSE cvtsi2ss: round to nearest even
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
// cvt.rni.s32.f32: nearest even; NaN -> 0, out of range saturates
static inline int __float2int_rn(float f)
{
    if (f != f) return 0;
    if (f >= 2147483648.0f) return 2147483647;
    if (f <= -2147483648.0f) return (int)0x80000000u;
    return (int)nearbyintf(f);
}
// sum of the four signed byte products, plus c
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
// per-byte a - b modulo 256 (not saturating: that is __vsubss4)
static inline unsigned __vsub4(unsigned a, unsigned b)
{
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= ((((a >> (8 * i)) & 0xffu) - ((b >> (8 * i)) & 0xffu)) & 0xffu) << (8 * i);
    return r;
}
// (hi:lo) >> (s & 31), low 32 bits
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s)
{ return (unsigned)(((((unsigned long long)hi) << 32) | lo) >> (s & 31)); }
// result byte i = byte (s >> 4i) & 7 of the 8 bytes x (0..3), y (4..7)
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const unsigned long long b = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((b >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
    return r;
}
namespace emu {
// Global-memory ranges a kernel may read (empty: unchecked).  __ldg and the
// cp.async emulation check every access against them and its natural
// alignment: a misaligned or stray load faults on the GPU.
struct grange { const void *lo, *hi; const char *name; };
inline std::vector<grange> granges;
inline void gread(const void *p, size_t n, size_t align, const char *what)
{
    if ((uintptr_t)p % align) { fprintf(stderr, "emu: %s: misaligned global read %p (%zu B, align %zu), thread %u block (%u,%u)\n", what, p, n, align, threadIdx.x, blockIdx.x, blockIdx.y); abort(); }
    if (granges.empty()) return;
    for (auto &r : granges)
        if ((const char *)p >= (const char *)r.lo && (const char *)p + n <= (const char *)r.hi) return;
    fprintf(stderr, "emu: %s: global read %p (%zu B) outside every buffer, thread %u block (%u,%u)\n", what, p, n, threadIdx.x, blockIdx.x, blockIdx.y);
    abort();
}
}
template <class T> static inline T __ldg(const T *p) { emu::gread(p, sizeof(T), sizeof(T), "__ldg"); return *p; }
template <class T> static inline T __shfl_sync(unsigned, T v, int src)
{ T r; emu::xchg(&v, &r, sizeof(T), src & 31); return r; }
