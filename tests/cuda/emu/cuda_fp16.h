// tests/cuda/emu/cuda_fp16.h — host stand-in for what cuda_quant.cuh uses:
// __half and an exact IEEE half -> float conversion.
#pragma once
#include <cmath>
#include <cstring>
struct __half { unsigned short x; };
static inline __half __ushort_as_half(unsigned short h) { __half r; r.x = h; return r; }
static inline float __half2float(__half h)
{
    const unsigned s = (h.x >> 15) & 1u, e = (h.x >> 10) & 31u, m = h.x & 1023u;
    float f;
    if (e == 0) f = std::ldexp((float)m, -24);                           // zero / subnormal
    else if (e == 31) f = m ? NAN : INFINITY;
    else f = std::ldexp((float)(m | 1024u), (int)e - 25);
    return s ? -f : f;
}
