// tests/cuda/emu/cuda_fp16.h — the f16 type of the host emulation: what
// cuda_quant.cuh and the dense attention kernels name, on the host's
// _Float16 (g++ >= 12, x86-64), round-to-nearest-even like the device.
#pragma once
#include <cmath>
#include <cstring>
#include "cuda_runtime.h"
struct __half { unsigned short x; };
struct __half2 { __half x, y; };
static inline __half __ushort_as_half(unsigned short h) { __half r; r.x = h; return r; }
static inline float __half2float(__half h) { _Float16 f; memcpy(&f, &h.x, 2); return (float)f; }
static inline __half __float2half_rn(float x) { _Float16 f = (_Float16)x; __half r; memcpy(&r.x, &f, 2); return r; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline float2 __half22float2(__half2 h) { float2 r; r.x = __half2float(h.x); r.y = __half2float(h.y); return r; }
static inline __half2 __halves2half2(__half a, __half b) { __half2 r; r.x = a; r.y = b; return r; }
// f16 a - b per half, rounded to f16 (the device's __hsub2, round to nearest even)
static inline __half2 __hsub2(__half2 a, __half2 b)
{
    __half2 r;
    r.x = __float2half_rn(__half2float(a.x) - __half2float(b.x));
    r.y = __float2half_rn(__half2float(a.y) - __half2float(b.y));
    return r;
}
