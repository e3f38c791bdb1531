// tests/cuda/emu/emu_util.h — small helpers the bit-for-bit emulator
// harnesses share (moedec_emu.cc, normtail_emu.cc, rrf_emu.cc).
#ifndef SI_EMU_UTIL_H
#define SI_EMU_UTIL_H
#include <stdint.h>
#include <string.h>
#include <vector>
#include "sparkinfer/types.h"   // SI_TYPE_*

// How many elements of a and b (same size) differ in their bytes.
template <class V> static inline int64_t ndiff(const V &a, const V &b)
{
    int64_t d = 0;
    for (size_t i = 0; i < a.size(); i++)
        d += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return d;
}

// v stored as an f16 at p (a block scale of a quantised weight).
static inline void put_f16(uint8_t *p, float v)
{
    const _Float16 h = (_Float16)v;
    memcpy(p, &h, 2);
}

// rows of `in` weights of quantised type t (Q4_K, Q5_K, Q6_K, Q8_0):
// random bytes from ru(), sane f16 scales from fr() (d and dmin of a
// Q4_K/Q5_K block, d of a Q6_K or Q8_0 one).
template <class U, class F>
static std::vector<uint8_t> emu_weights(uint32_t t, int64_t rows, int64_t in, U ru, F fr)
{
    const int bb = t == SI_TYPE_Q4_K ? 144 : t == SI_TYPE_Q5_K ? 176 : t == SI_TYPE_Q6_K ? 210 : 34;
    const int64_t nblk = rows * (in / (t == SI_TYPE_Q8_0 ? 32 : 256));
    std::vector<uint8_t> w((size_t)(nblk * bb));
    for (auto &c : w) c = (uint8_t)ru();
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *p = w.data() + b * bb;
        if (t == SI_TYPE_Q6_K) {
            put_f16(p + 208, 0.002f * (1.0f + fr()));
        } else if (t == SI_TYPE_Q8_0) {
            put_f16(p, 0.002f * (1.0f + fr()));
        } else {
            put_f16(p, 0.002f * (1.0f + fr()));
            put_f16(p + 2, 0.001f * (1.0f + fr()));
        }
    }
    return w;
}
#endif
