/* core/quant_k.c — K-quants: 256-element super-blocks with per-sub-block
 * scales.  Reference dequantisation for Q2_K..Q6_K, quantisation for
 * Q4_K, Q5_K and Q6_K.
 *
 * Layouts (ggml's block structs, little-endian, byte offsets):
 *   Q2_K  84 B: scales[16] @0, qs[64] @16, d @80, dmin @82
 *   Q3_K 110 B: hmask[32] @0, qs[64] @32, scales[12] @96, d @108
 *   Q4_K 144 B: d @0, dmin @2, scales[12] @4, qs[128] @16
 *   Q5_K 176 B: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
 *   Q6_K 210 B: ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208
 *
 * Element order (the part that is easy to get wrong):
 *  - Q2_K/Q3_K: two 128-element halves, each using 32 bytes of qs.  Within
 *    a half, bit pair `shift` = 0,2,4,6 of qs[0..31] gives elements
 *    32*(shift/2) + 0..31; bytes 0..15 and 16..31 have separate scales
 *    (16-element sub-blocks, scale index = 8*half + 2*(shift/2) + {0,1}).
 *    Q3_K's high (third) bit of element 32*k + l (k = 0..7) is bit k of
 *    hmask[l]; a CLEAR bit subtracts 4.
 *  - Q4_K/Q5_K: four 64-element groups, each using 32 bytes of qs: low
 *    nibbles are elements 0..31 (scale 2g), high nibbles 32..63 (scale
 *    2g+1).  Q5_K's fifth bit of group g is bit 2g (low half) or 2g+1
 *    (high half) of qh[l].
 *  - Q6_K: two 128-element halves, each using 64 bytes of ql and 32 of qh.
 *    For l = 0..31: element l is low nibble of ql[l] + qh bits 0-1,
 *    l+32 low nibble of ql[l+32] + bits 2-3, l+64 high nibble of ql[l] +
 *    bits 4-5, l+96 high nibble of ql[l+32] + bits 6-7; value q - 32.
 *    16-element sub-blocks, one int8 scale each.
 *
 * Scale packing of Q4_K/Q5_K (12 bytes, eight 6-bit scales sc and eight
 * 6-bit mins m): for j < 4, sc[j] = b[j] & 63, m[j] = b[j+4] & 63; for
 * j >= 4, sc[j] = (b[j+4] & 15) | (b[j-4] >> 6) << 4 and
 * m[j] = (b[j+4] >> 4) | (b[j] >> 6) << 4.  Value = d*sc*q - dmin*m.
 * Q3_K packs sixteen 6-bit scales in 12 bytes: the low nibble of scale i
 * is b[i] & 15 (i < 8) or b[i-8] >> 4 (i >= 8), its top two bits are bits
 * 2*(i/4)..+1 of b[8 + i%4]; value = d * (scale - 32) * q.
 *
 * The dequantisers evaluate in ggml's order ((d*sc)*q - dmin*m) so they
 * reproduce its floats exactly.
 */
#include <math.h>
#include <string.h>

#include "quant_internal.h"

/* 6-bit scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12 bytes. */
static void scale_min_k4(const uint8_t *b, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = b[j] & 63;
        *m  = b[j + 4] & 63;
    } else {
        *sc = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4);
        *m  = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
    }
}

/* ---- dequantisation ---------------------------------------------------- */

void si_dequant_q2_k(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 84) {
        const uint8_t *scales = src;
        const float d = si_rdh(src + 80), dmin = si_rdh(src + 82);
        int is = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = src + 16 + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; part++, is++) {
                    const float dl = d * (float)(scales[is] & 15);
                    const float ml = dmin * (float)(scales[is] >> 4);
                    for (int l = 0; l < 16; l++)
                        *dst++ = dl * (float)((q[16 * part + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void si_dequant_q3_k(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 110) {
        const uint8_t *hmask = src, *sb = src + 96;
        const float d = si_rdh(src + 108);
        int sc[16];
        for (int i = 0; i < 16; i++) {
            int lo = i < 8 ? (sb[i] & 15) : (sb[i - 8] >> 4);
            int hi = (sb[8 + i % 4] >> (2 * (i / 4))) & 3;
            sc[i] = (lo | (hi << 4)) - 32;
        }
        int is = 0, bit = 0;
        for (int half = 0; half < 2; half++) {
            const uint8_t *q = src + 32 + 32 * half;
            for (int shift = 0; shift < 8; shift += 2, bit++) {
                for (int part = 0; part < 2; part++, is++) {
                    const float dl = d * (float)sc[is];
                    for (int l = 16 * part; l < 16 * part + 16; l++) {
                        int v = ((q[l] >> shift) & 3) - ((hmask[l] >> bit) & 1 ? 0 : 4);
                        *dst++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

void si_dequant_q4_k(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 144) {
        const float d = si_rdh(src), dmin = si_rdh(src + 2);
        const uint8_t *q = src + 16;
        for (int g = 0; g < 4; g++, q += 32) {
            int sc0, m0, sc1, m1;
            scale_min_k4(src + 4, 2 * g, &sc0, &m0);
            scale_min_k4(src + 4, 2 * g + 1, &sc1, &m1);
            const float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d0 * (float)(q[l] & 15) - mm0;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)(q[l] >> 4) - mm1;
        }
    }
}

void si_dequant_q5_k(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 176) {
        const float d = si_rdh(src), dmin = si_rdh(src + 2);
        const uint8_t *qh = src + 16, *q = src + 48;
        for (int g = 0; g < 4; g++, q += 32) {
            int sc0, m0, sc1, m1;
            scale_min_k4(src + 4, 2 * g, &sc0, &m0);
            scale_min_k4(src + 4, 2 * g + 1, &sc1, &m1);
            const float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
            const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d0 * (float)((q[l] & 15) | (((qh[l] >> (2 * g)) & 1) << 4)) - mm0;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)((q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4)) - mm1;
        }
    }
}

void si_dequant_q6_k(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 210) {
        const float d = si_rdh(src + 208);
        for (int half = 0; half < 2; half++, dst += 128) {
            const uint8_t *ql = src + 64 * half, *qh = src + 128 + 32 * half;
            const int8_t *sc = (const int8_t *)(src + 192 + 8 * half);
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15)      | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4)      | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l]      = d * (float)sc[is + 0] * (float)q1;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q2;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q3;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* ---- quantisation: sub-block fits -------------------------------------- */

/* Rounds 0 <= v < 2^22 to the nearest integer, ties to even, in float
 * arithmetic (vectorises; no conversions). */
static inline float round_pos(float v)
{
    return (v + 12582912.0f) - 12582912.0f;
}

/* Fits the 32 values x ~ s*l + m with integer levels l in [0, nmax] and an
 * offset m <= 0 (so zero stays representable), minimising
 * sum w*(s*l + m - x)^2.  Candidate level assignments come from the
 * scales (nmax + rmin + rdelta*k) / (max - min), k = 0..nstep; for each,
 * (s, m) is the closed-form weighted least-squares solution and its error
 * follows from the same sums, so each candidate costs one pass.  Returns s
 * and stores -m (>= 0) in *neg_min. */
static float fit_affine32(const float *x, const float *w, int nmax, float rmin,
                          float rdelta, int nstep, float *neg_min)
{
    float xmin = x[0], xmax = x[0];
    float sw = 0, swx = 0, swxx = 0;
    float xs[32], wx[32];
    for (int i = 0; i < 32; i++) {
        xmin = x[i] < xmin ? x[i] : xmin;
        xmax = x[i] > xmax ? x[i] : xmax;
        wx[i] = w[i] * x[i];
        sw += w[i];
        swx += wx[i];
        swxx += wx[i] * x[i];
    }
    if (xmin > 0)
        xmin = 0;
    if (!(xmax > xmin)) {                 /* constant (<= 0) sub-block */
        *neg_min = -xmin;
        return 0;
    }
    const float range = xmax - xmin;
    for (int i = 0; i < 32; i++)
        xs[i] = x[i] - xmin;

    /* Fallback if no candidate gives a solvable system. */
    float best_s = range / (float)nmax, best_m = xmin, best_err = INFINITY;
    const float lmax = (float)nmax;
    for (int k = 0; k <= nstep; k++) {
        const float iscale = (lmax + rmin + rdelta * (float)k) / range;
        /* Eight independent partial sums: the inner loop vectorises. */
        float psl[8] = { 0 }, psll[8] = { 0 }, psxl[8] = { 0 };
        for (int i0 = 0; i0 < 32; i0 += 8) {
            for (int v = 0; v < 8; v++) {
                float l = round_pos(iscale * xs[i0 + v]);
                l = l > lmax ? lmax : l;
                float wl = w[i0 + v] * l;
                psl[v] += wl;
                psll[v] += wl * l;
                psxl[v] += wx[i0 + v] * l;
            }
        }
        float sl = 0, sll = 0, sxl = 0;
        for (int v = 0; v < 8; v++) {
            sl += psl[v];
            sll += psll[v];
            sxl += psxl[v];
        }
        const float det = sw * sll - sl * sl;
        if (!(det > 0))
            continue;
        const float idet = 1.0f / det;
        float s = (sw * sxl - swx * sl) * idet;
        float m = (sll * swx - sl * sxl) * idet;
        if (m > 0) {                      /* keep zero representable */
            m = 0;
            s = sxl / sll;
        }
        const float err = s * s * sll + m * m * sw + swxx
                        + 2 * s * m * sl - 2 * s * sxl - 2 * m * swx;
        if (err < best_err) {
            best_err = err;
            best_s = s;
            best_m = m;
        }
    }
    *neg_min = -best_m;
    return best_s;
}

/* Fits the 16 values x ~ s*l with l in [-nmax, nmax-1], weights x^2 (large
 * values matter most), trying the scales -(nmax + 0.1k)/max, k = -9..9,
 * where max is the value of largest magnitude: the asymmetric range gives
 * that value the extra negative level.  Returns s (may be negative). */
static float fit_symmetric16(const float *x, int nmax)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 16; i++) {
        float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            max = x[i];
        }
    }
    if (amax < 1e-15f)
        return 0;
    float w[16], wx[16];
    for (int i = 0; i < 16; i++) {
        w[i] = x[i] * x[i];
        wx[i] = w[i] * x[i];
    }
    const float lo = (float)-nmax, hi = (float)(nmax - 1), imax = 1.0f / max;
    float best_s = 0, best = -1;
    for (int k = -9; k <= 9; k++) {
        const float iscale = -((float)nmax + 0.1f * (float)k) * imax;
        float psll[8] = { 0 }, psxl[8] = { 0 };
        for (int i0 = 0; i0 < 16; i0 += 8) {
            for (int v = 0; v < 8; v++) {
                /* |iscale*x| <= nmax + 1: the offset keeps it positive. */
                float l = round_pos(iscale * x[i0 + v] + 64.0f) - 64.0f;
                l = l < lo ? lo : (l > hi ? hi : l);
                psll[v] += w[i0 + v] * l * l;
                psxl[v] += wx[i0 + v] * l;
            }
        }
        float sll = 0, sxl = 0;
        for (int v = 0; v < 8; v++) {
            sll += psll[v];
            sxl += psxl[v];
        }
        /* With s = sxl/sll the weighted error is sum w x^2 - sxl^2/sll. */
        if (sll > 0 && sxl * sxl > best * sll) {
            best_s = sxl / sll;
            best = best_s * sxl;
        }
    }
    return best_s;
}

/* ---- quantisation: Q4_K / Q5_K ----------------------------------------- */

/* Common part of Q4_K and Q5_K: fits eight 32-element sub-blocks, quantises
 * their scales and mins to 6 bits against f16 super-scales, writes d, dmin
 * and the 12 scale bytes to blk[0..16) and the levels (0..nmax) to L. */
static void quant_k_affine(const float *x, int nmax, float rmin, float rdelta, int nstep,
                           uint8_t *blk, uint8_t L[SI_QK_K])
{
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        /* Weights as ggml: mean magnitude + |x|, favouring large values
         * without ignoring the small ones. */
        float s2 = 0;
        for (int i = 0; i < 32; i++)
            s2 += xj[i] * xj[i];
        const float av = sqrtf(s2 / 32.0f);
        for (int i = 0; i < 32; i++)
            w[i] = av + fabsf(xj[i]);
        scales[j] = fit_affine32(xj, w, nmax, rmin, rdelta, nstep, &mins[j]);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }

    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *sb = blk + 4;
    memset(sb, 0, 12);
    for (int j = 0; j < 8; j++) {
        const int ls = si_level(inv_scale * scales[j], 0, 63);
        const int lm = si_level(inv_min * mins[j], 0, 63);
        if (j < 4) {
            sb[j] |= (uint8_t)ls;
            sb[j + 4] |= (uint8_t)lm;
        } else {
            sb[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
            sb[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sb[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    si_wr16(blk, si_f32_to_fp16(max_scale / 63.0f));
    si_wr16(blk + 2, si_f32_to_fp16(max_min / 63.0f));

    /* Final levels against the scales as stored (f16 * 6-bit). */
    const float d = si_rdh(blk), dmin = si_rdh(blk + 2), lmax = (float)nmax;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        scale_min_k4(sb, j, &sc, &m);
        const float dj = d * (float)sc, mj = dmin * (float)m;
        if (dj == 0.0f) {
            memset(L + 32 * j, 0, 32);
            continue;
        }
        /* Clamp in float, then round: (x + mj)/dj is finite or +-inf
         * here, and the loop vectorises. */
        for (int i = 0; i < 32; i++) {
            float v = (x[32 * j + i] + mj) / dj;
            v = v < 0.0f ? 0.0f : (v > lmax ? lmax : v);
            L[32 * j + i] = (uint8_t)(int)round_pos(v);
        }
    }
}

void si_quant_q4_k(const float *src, uint8_t *dst, int64_t nb)
{
    uint8_t L[SI_QK_K];
    for (int64_t b = 0; b < nb; b++, src += SI_QK_K, dst += 144) {
        quant_k_affine(src, 15, -1.0f, 0.1f, 20, dst, L);
        uint8_t *q = dst + 16;
        for (int g = 0; g < 4; g++, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    }
}

void si_quant_q5_k(const float *src, uint8_t *dst, int64_t nb)
{
    uint8_t L[SI_QK_K];
    for (int64_t b = 0; b < nb; b++, src += SI_QK_K, dst += 176) {
        quant_k_affine(src, 31, -0.5f, 0.1f, 15, dst, L);
        uint8_t *qh = dst + 16, *q = dst + 48;
        memset(qh, 0, 32);
        for (int g = 0; g < 4; g++, q += 32) {
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                q[l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
        }
    }
}

/* ---- quantisation: Q6_K ------------------------------------------------- */

void si_quant_q6_k(const float *src, uint8_t *dst, int64_t nb)
{
    int8_t L[SI_QK_K];      /* levels -32..31 */
    for (int64_t b = 0; b < nb; b++, src += SI_QK_K, dst += 210) {
        float scales[16], max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_symmetric16(src + 16 * j, 32);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(dst, 0, 210);
        if (max_abs < 1e-15f)               /* all (near) zero: zero block */
            continue;

        /* The largest sub-scale becomes -128, the others follow. */
        const float iscale = -128.0f / max_scale;
        si_wr16(dst + 208, si_f32_to_fp16(1.0f / iscale));
        int8_t *sc = (int8_t *)(dst + 192);
        for (int j = 0; j < 16; j++) {
            sc[j] = (int8_t)si_level(iscale * scales[j], -128, 127);
        }
        const float d = si_rdh(dst + 208);
        for (int j = 0; j < 16; j++) {
            const float dj = d * (float)sc[j];
            if (dj == 0.0f) {
                memset(L + 16 * j, 0, 16);
                continue;
            }
            for (int i = 0; i < 16; i++) {      /* as in Q4_K: vectorises */
                float v = src[16 * j + i] / dj;
                v = v < -32.0f ? -32.0f : (v > 31.0f ? 31.0f : v);
                L[16 * j + i] = (int8_t)((int)round_pos(v + 64.0f) - 64);
            }
        }

        for (int half = 0; half < 2; half++) {
            uint8_t *ql = dst + 64 * half, *qh = dst + 128 + 32 * half;
            const int8_t *Lh = L + 128 * half;
            for (int l = 0; l < 32; l++) {
                int q1 = Lh[l] + 32, q2 = Lh[l + 32] + 32;
                int q3 = Lh[l + 64] + 32, q4 = Lh[l + 96] + 32;
                ql[l]      = (uint8_t)((q1 & 15) | ((q3 & 15) << 4));
                ql[l + 32] = (uint8_t)((q2 & 15) | ((q4 & 15) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                  ((q4 >> 4) << 6));
            }
        }
    }
}
