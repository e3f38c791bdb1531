// tests/cuda/emu/cuda_fp16.h — stub: only what cuda_quant.cuh names, so it
// compiles on the host (never called by the GDN emulation).
#pragma once
#include <cstring>
struct __half { unsigned short x; };
static inline __half __ushort_as_half(unsigned short h) { __half r; r.x = h; return r; }
static inline float __half2float(__half) { return 0.0f; }
