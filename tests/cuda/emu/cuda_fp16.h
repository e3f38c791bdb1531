// tests/cuda/emu/cuda_fp16.h — host stand-in for what the emulated kernels
// name from cuda_fp16.h: __half as its 16 bits, a real f16 -> f32
// conversion (IEEE binary16, subnormals included).
#pragma once
#include <cmath>
#include <cstring>
struct __half { unsigned short x; };
static inline __half __ushort_as_half(unsigned short h) { __half r; r.x = h; return r; }
static inline float __half2float(__half h)
{
    const unsigned s = (h.x >> 15) & 1, e = (h.x >> 10) & 31, m = h.x & 1023;
    float v;
    if (e == 0) v = std::ldexp((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = std::ldexp((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}
