/* backends/cpu/cpu_dot_avx2.c — AVX2/FMA versions of the two hot dot
 * kernels.  Compiled with a per-function target attribute rather than
 * -mavx2, so the plugin still runs on any x86-64; cpu_quant_dot.c calls
 * these only when cpuid reports AVX2 and FMA.  The portable C versions in
 * cpu_quant_dot.c are the definition: these must give the same sums up to
 * float reassociation (tests/cpu compares the paths).
 */
#include "cpu_internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

float cpu_dot_row8_avx2(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in);
void  cpu_dot_row8_x4_avx2(const cpu_row8 *w, const cpu_q8 *a, const int64_t rows[4], int64_t in, float out[4]);
float cpu_dot_f32_avx2(const float *a, const float *b, int64_t n);
void  cpu_f16_to_f32_avx2(const uint8_t *src, float *dst, int64_t n);
void  cpu_unpack_q45k_avx2(const uint8_t *qs, const uint8_t *qh, int8_t *q);
void  cpu_unpack_q6k_avx2(const uint8_t *ql, const uint8_t *qh, int8_t *q);
float cpu_dot_packed_avx2(uint32_t type, const uint8_t *x, const cpu_q8 *a, int64_t row, int64_t in);

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Products of one 32-value block as 8 int32 lanes: lanes 0-3 hold sums over
 * values 0-15, lanes 4-7 over values 16-31 (maddubs/madd stay inside each
 * 128-bit half), which is exactly the per-16 scale split of cpu_row8.
 * maddubs takes unsigned x signed bytes: unsigned weights (the formats
 * with a min, q in 0..31) go straight in; signed ones use |w| and
 * sign(w)*x.  No int16 saturation: 2*128*127 < 32768. */
AVX2 static inline __m256 block_dot_v(__m256i wv, const int8_t *xq, bool nonneg, __m256i ones)
{
    __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
    __m256i p16 = nonneg ? _mm256_maddubs_epi16(wv, xv)
                         : _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
}

AVX2 static inline __m256 block_dot(const int8_t *wq, const int8_t *xq, bool nonneg, __m256i ones)
{
    return block_dot_v(_mm256_loadu_si256((const __m256i *)wq), xq, nonneg, ones);
}

AVX2 static inline __m256 block_scale(const float *d16, float ad)
{
    return _mm256_set_m128(_mm_set1_ps(d16[1] * ad), _mm_set1_ps(d16[0] * ad));
}

AVX2 float cpu_dot_row8_avx2(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in)
{
    const int64_t nb = in / 32;
    const int8_t *aq = a->q + row * in;
    const float *ad = a->d + row * nb, *as = a->s + row * nb;
    const __m256i ones = _mm256_set1_epi16(1);
    const bool nonneg = w->has_min;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256 p0 = block_dot(w->q + 32 * b, aq + 32 * b, nonneg, ones);
        __m256 p1 = block_dot(w->q + 32 * b + 32, aq + 32 * b + 32, nonneg, ones);
        acc0 = _mm256_fmadd_ps(p0, block_scale(w->d16 + 2 * b, ad[b]), acc0);
        acc1 = _mm256_fmadd_ps(p1, block_scale(w->d16 + 2 * b + 2, ad[b + 1]), acc1);
    }
    for (; b < nb; b++)
        acc0 = _mm256_fmadd_ps(block_dot(w->q + 32 * b, aq + 32 * b, nonneg, ones),
                               block_scale(w->d16 + 2 * b, ad[b]), acc0);
    float acc = hsum8(_mm256_add_ps(acc0, acc1));
    if (w->has_min) {
        __m256 m = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= nb; i += 8)
            m = _mm256_fmadd_ps(_mm256_loadu_ps(w->m32 + i), _mm256_loadu_ps(as + i), m);
        float ms = hsum8(m);
        for (; i < nb; i++)
            ms += w->m32[i] * as[i];
        acc -= ms;
    }
    return acc;
}

/* Four activation rows against one weight row: each weight block and its
 * |w| are loaded once for all four (prefill is bound by these dots).  The
 * arithmetic per row is exactly that of cpu_dot_row8_avx2 (same products,
 * same two alternating accumulators, same order), so a token's result
 * does not depend on how many tokens share its batch or expert group. */
AVX2 static inline __m256i wabs(__m256i wv, bool nonneg) { return nonneg ? wv : _mm256_sign_epi8(wv, wv); }

AVX2 static inline __m256 block_dot_w(__m256i wv, __m256i wa, const int8_t *xq, bool nonneg, __m256i ones)
{
    __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
    __m256i p16 = _mm256_maddubs_epi16(wa, nonneg ? xv : _mm256_sign_epi8(xv, wv));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
}

AVX2 void cpu_dot_row8_x4_avx2(const cpu_row8 *w, const cpu_q8 *a, const int64_t rows[4], int64_t in, float out[4])
{
    const int64_t nb = in / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    const bool nonneg = w->has_min;
    const int8_t *xq[4];
    const float *xd[4];
    __m256 acc0[4], acc1[4];
    for (int t = 0; t < 4; t++) {
        xq[t] = a->q + rows[t] * in;
        xd[t] = a->d + rows[t] * nb;
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(w->q + 32 * b));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(w->q + 32 * b + 32));
        __m256i a0 = wabs(w0, nonneg), a1 = wabs(w1, nonneg);
        for (int t = 0; t < 4; t++) {
            __m256 p0 = block_dot_w(w0, a0, xq[t] + 32 * b, nonneg, ones);
            __m256 p1 = block_dot_w(w1, a1, xq[t] + 32 * b + 32, nonneg, ones);
            acc0[t] = _mm256_fmadd_ps(p0, block_scale(w->d16 + 2 * b, xd[t][b]), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(p1, block_scale(w->d16 + 2 * b + 2, xd[t][b + 1]), acc1[t]);
        }
    }
    if (b < nb) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(w->q + 32 * b));
        __m256i a0 = wabs(w0, nonneg);
        for (int t = 0; t < 4; t++)
            acc0[t] = _mm256_fmadd_ps(block_dot_w(w0, a0, xq[t] + 32 * b, nonneg, ones),
                                      block_scale(w->d16 + 2 * b, xd[t][b]), acc0[t]);
    }
    for (int t = 0; t < 4; t++) {
        float s = hsum8(_mm256_add_ps(acc0[t], acc1[t]));
        if (w->has_min) {
            const float *xs = a->s + rows[t] * nb;
            __m256 m = _mm256_setzero_ps();
            int64_t i = 0;
            for (; i + 8 <= nb; i += 8)
                m = _mm256_fmadd_ps(_mm256_loadu_ps(w->m32 + i), _mm256_loadu_ps(xs + i), m);
            float ms = hsum8(m);
            for (; i < nb; i++)
                ms += w->m32[i] * xs[i];
            s -= ms;
        }
        out[t] = s;
    }
}

/* Chunk c (of 4) of one Q4_K (q5 false) or Q5_K super-block's values:
 * 32 bytes of nibbles a pair of sub-blocks, *lo the low nibbles (values
 * 64c..64c+31), *hi the high ones; Q5_K's fifth bit of value l of
 * sub-block s is bit s of its qh byte l (h: the 32 qh bytes). */
AVX2 static inline void q45k_chunk(const uint8_t *qs, __m256i h, bool q5, int c, __m256i *lo, __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (q5) {
        const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c))), bh = _mm256_set1_epi8((char)(2 << (2 * c)));
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bl), bl), b4));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bh), bh), b4));
    }
}

/* Half n's 128 values of a Q6_K super-block (ql: its 64 bytes, qh: its 32)
 * as int8 q - 32, four groups of 32 in value order. */
AVX2 static inline void q6k_half(const uint8_t *ql, const uint8_t *qh, __m256i v[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    /* bit pair k of each qh byte moved to bits 4-5 (16-bit shifts; the
     * 0x30 mask drops what crossed from the neighbouring byte) */
    const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(h, 4), m30);
    const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(h, 2), m30);
    const __m256i h2 = _mm256_and_si256(h, m30);
    const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(h, 2), m30);
    v[0] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), h0), k32);
    v[1] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), h1), k32);
    v[2] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2), k32);
    v[3] = _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3), k32);
}

/* The value bytes of one Q4_K (qh NULL) or Q5_K super-block. */
AVX2 void cpu_unpack_q45k_avx2(const uint8_t *qs, const uint8_t *qh, int8_t *q)
{
    const __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i lo, hi;
        q45k_chunk(qs, h, qh != NULL, c, &lo, &hi);
        _mm256_storeu_si256((__m256i *)(q + 64 * c), lo);
        _mm256_storeu_si256((__m256i *)(q + 64 * c + 32), hi);
    }
}

/* The value bytes of one Q6_K super-block (two halves of 128 values). */
AVX2 void cpu_unpack_q6k_avx2(const uint8_t *ql, const uint8_t *qh, int8_t *q)
{
    for (int n = 0; n < 2; n++, ql += 64, qh += 32, q += 128) {
        __m256i v[4];
        q6k_half(ql, qh, v);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_si256((__m256i *)(q + 32 * k), v[k]);
    }
}

AVX2 void cpu_f16_to_f32_avx2(const uint8_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
    for (; i < n; i++)
        dst[i] = cpu_f16_to_f32(cpu_rd16(src + 2 * i));
}

AVX2 float cpu_dot_f32_avx2(const float *a, const float *b, int64_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    __m256 s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* ---- one token straight from the packed row --------------------------
 * cpu_dot_row8_avx2 over the row cpu_decode_row8 would make, without making
 * it: the same int8 values (unpacked in registers, as the unpack kernels
 * above do), the same f32 scales (d * scale, dmin * min), the same two
 * accumulators (even blocks, odd blocks) and the same min term, so the
 * same bits.  A decode step's products (one token a row) spent more time
 * writing the decoded row out and reading it back than in the dots. */

/* Blocks b and b + 1 (wa, wb: their 32 values) into the two accumulators,
 * scaled by sa and sb (each lane by its half's scale: block_dot_v's lanes
 * 0-3 hold values 0-15, lanes 4-7 values 16-31). */
AVX2 static inline void pair_fma(__m256i wa, __m256i wb, const int8_t *xq, bool nonneg, __m256i ones, __m256 sa,
                                 __m256 sb, __m256 *acc0, __m256 *acc1)
{
    *acc0 = _mm256_fmadd_ps(block_dot_v(wa, xq, nonneg, ones), sa, *acc0);
    *acc1 = _mm256_fmadd_ps(block_dot_v(wb, xq + 32, nonneg, ones), sb, *acc1);
}

AVX2 static float dot_q45k(const uint8_t *x, bool q5, const cpu_q8 *a, int64_t row, int64_t in)
{
    const int64_t nb = in / 32;
    const int8_t *aq = a->q + row * in;
    const float *ad = a->d + row * nb, *as = a->s + row * nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), m = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8, x += q5 ? 176 : 144) {
        const float d = cpu_f16_to_f32(cpu_rd16(x)), dmin = cpu_f16_to_f32(cpu_rd16(x + 2));
        const uint8_t *sc = x + 4, *qs = x + (q5 ? 48 : 16);
        float ds[8], ms[8];
        for (int k = 0; k < 8; k++) {
            int is, im;
            cpu_k4_scale_min(sc, k, &is, &im);
            ds[k] = d * (float)is;
            ms[k] = dmin * (float)im;
        }
        const __m256i h = q5 ? _mm256_loadu_si256((const __m256i *)(x + 16)) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i lo, hi;
            q45k_chunk(qs, h, q5, c, &lo, &hi);
            const int64_t k = b + 2 * c;
            pair_fma(lo, hi, aq + 32 * k, true, ones, _mm256_set1_ps(ds[2 * c] * ad[k]),
                     _mm256_set1_ps(ds[2 * c + 1] * ad[k + 1]), &acc0, &acc1);
        }
        m = _mm256_fmadd_ps(_mm256_loadu_ps(ms), _mm256_loadu_ps(as + b), m);
    }
    return hsum8(_mm256_add_ps(acc0, acc1)) - hsum8(m);
}

AVX2 static float dot_q6k(const uint8_t *x, const cpu_q8 *a, int64_t row, int64_t in)
{
    const int64_t nb = in / 32;
    const int8_t *aq = a->q + row * in;
    const float *ad = a->d + row * nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b += 8, x += 210) {
        const float d = cpu_f16_to_f32(cpu_rd16(x + 208));
        const int8_t *sc = (const int8_t *)(x + 192);
        float d16[16];
        for (int k = 0; k < 16; k++)
            d16[k] = d * (float)sc[k];
        for (int n = 0; n < 2; n++) {
            __m256i v[4];
            q6k_half(x + 64 * n, x + 128 + 32 * n, v);
            for (int p = 0; p < 4; p += 2) {
                const int64_t k = b + 4 * n + p;   /* block k of the row, its d16 from 2 * (k - b) */
                const float *s = d16 + 2 * (4 * n + p);
                pair_fma(v[p], v[p + 1], aq + 32 * k, false, ones, block_scale(s, ad[k]), block_scale(s + 2, ad[k + 1]),
                         &acc0, &acc1);
            }
        }
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

AVX2 static float dot_q8_0(const uint8_t *x, const cpu_q8 *a, int64_t row, int64_t in)
{
    const int64_t nb = in / 32;
    const int8_t *aq = a->q + row * in;
    const float *ad = a->d + row * nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, x += 68) {
        const float d0 = cpu_f16_to_f32(cpu_rd16(x)), d1 = cpu_f16_to_f32(cpu_rd16(x + 34));
        pair_fma(_mm256_loadu_si256((const __m256i *)(x + 2)), _mm256_loadu_si256((const __m256i *)(x + 36)),
                 aq + 32 * b, false, ones, _mm256_set1_ps(d0 * ad[b]), _mm256_set1_ps(d1 * ad[b + 1]), &acc0, &acc1);
    }
    if (b < nb)
        acc0 = _mm256_fmadd_ps(block_dot((const int8_t *)(x + 2), aq + 32 * b, false, ones),
                               _mm256_set1_ps(cpu_f16_to_f32(cpu_rd16(x)) * ad[b]), acc0);
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* Only for the types cpu_dot_packed_ok takes. */
AVX2 float cpu_dot_packed_avx2(uint32_t type, const uint8_t *x, const cpu_q8 *a, int64_t row, int64_t in)
{
    switch (type) {
    case SI_TYPE_Q4_K: return dot_q45k(x, false, a, row, in);
    case SI_TYPE_Q5_K: return dot_q45k(x, true, a, row, in);
    case SI_TYPE_Q6_K: return dot_q6k(x, a, row, in);
    default:           return dot_q8_0(x, a, row, in);
    }
}

#else
/* Not x86: nothing here; cpu_quant_dot.c uses its portable kernels. */
typedef int cpu_dot_avx2_unused;
#endif
