/* backends/cpu/cpu_quant_dot.c — the cpu backend's own view of GGUF block
 * formats: which types it reads and how, weight-row decoders, activation
 * quantisation and the portable dot kernels.
 *
 * The fast MATMUL path never builds f32 weights.  A weight row is decoded
 * into int8 values plus a scale per 16 values (and, for formats with a min
 * or offset, a term per 32 values), which is the common denominator of
 * Q4_0..Q8_0 and Q4_K/Q5_K/Q6_K.  Activations are quantised once per op to
 * int8 blocks of 32 with an f32 scale and the block's exact f32 sum, so
 *   w.x = sum_b ad[b] * (d16[2b] * isum(lo 16) + d16[2b+1] * isum(hi 16))
 *       - sum_b m32[b] * s[b].
 * Block layouts follow ggml's (they are what GGUF stores); the code is ours.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

#define QK   32
#define QK_K 256

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CPU_HAVE_AVX2_KERNEL 1
float cpu_dot_row8_avx2(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in);
void  cpu_dot_row8_x4_avx2(const cpu_row8 *w, const cpu_q8 *a, const int64_t rows[4], int64_t in, float out[4]);
float cpu_dot_f32_avx2(const float *a, const float *b, int64_t n);
void  cpu_f16_to_f32_avx2(const uint8_t *src, float *dst, int64_t n);
void  cpu_unpack_q45k_avx2(const uint8_t *qs, const uint8_t *qh, int8_t *q);
void  cpu_unpack_q6k_avx2(const uint8_t *ql, const uint8_t *qh, int8_t *q);
float cpu_dot_packed_avx2(uint32_t type, const uint8_t *x, const cpu_q8 *a, int64_t row, int64_t in);
#endif

typedef struct cpu_type_desc {
    uint32_t blk, bytes;
    int      path;
} cpu_type_desc;

static const cpu_type_desc type_tab[SI_TYPE_COUNT] = {
    [SI_TYPE_F32]    = { 1, 4, CPU_PATH_F32 },
    [SI_TYPE_F16]    = { 1, 2, CPU_PATH_F32 },
    [SI_TYPE_BF16]   = { 1, 2, CPU_PATH_F32 },
    [SI_TYPE_Q4_0]   = { QK, 18, CPU_PATH_Q8 },
    [SI_TYPE_Q4_1]   = { QK, 20, CPU_PATH_Q8 },
    [SI_TYPE_Q5_0]   = { QK, 22, CPU_PATH_Q8 },
    [SI_TYPE_Q5_1]   = { QK, 24, CPU_PATH_Q8 },
    [SI_TYPE_Q8_0]   = { QK, 34, CPU_PATH_Q8 },
    [SI_TYPE_Q2_K]   = { QK_K, 84, CPU_PATH_HOST },
    [SI_TYPE_Q3_K]   = { QK_K, 110, CPU_PATH_HOST },
    [SI_TYPE_Q4_K]   = { QK_K, 144, CPU_PATH_Q8 },
    [SI_TYPE_Q5_K]   = { QK_K, 176, CPU_PATH_Q8 },
    [SI_TYPE_Q6_K]   = { QK_K, 210, CPU_PATH_Q8 },
    [SI_TYPE_IQ4_NL] = { QK, 18, CPU_PATH_HOST },
    [SI_TYPE_IQ4_XS] = { QK_K, 136, CPU_PATH_HOST },
};

int cpu_type_path(uint32_t type) { return type < SI_TYPE_COUNT ? type_tab[type].path : CPU_PATH_NONE; }
bool cpu_type_supported(uint32_t type) { return cpu_type_path(type) != CPU_PATH_NONE; }
uint32_t cpu_type_blk(uint32_t type) { return cpu_type_supported(type) ? type_tab[type].blk : 0; }
uint32_t cpu_type_blk_bytes(uint32_t type) { return cpu_type_supported(type) ? type_tab[type].bytes : 0; }

const char *cpu_type_name(const si_backend *b, uint32_t type)
{
    const char *n = (b != NULL && b->host != NULL && b->host->type_name != NULL) ? b->host->type_name(type) : NULL;
    return n != NULL ? n : "unknown type";
}

/* ---- int8 row decoders -------------------------------------------------- */

size_t cpu_row8_bytes(int64_t in)
{
    return cpu_round((size_t)in) + cpu_round((size_t)(in / 16) * sizeof(float)) +
           cpu_round((size_t)(in / 32) * sizeof(float));
}

void cpu_row8_carve(cpu_row8 *r, void *mem, int64_t in)
{
    cpu_carve c = { mem, 0 };
    r->q = cpu_carve_take(&c, (size_t)in);
    r->d16 = cpu_carve_take(&c, (size_t)(in / 16) * sizeof(float));
    r->m32 = cpu_carve_take(&c, (size_t)(in / 32) * sizeof(float));
    r->has_min = false;
}

static inline float rdh(const uint8_t *p) { return cpu_f16_to_f32(cpu_rd16(p)); }

static void dec_q8_0(const uint8_t *x, int64_t nb, cpu_row8 *r)
{
    for (int64_t b = 0; b < nb; b++, x += 34) {
        float d = rdh(x);
        r->d16[2 * b] = r->d16[2 * b + 1] = d;
        memcpy(r->q + QK * b, x + 2, QK);
    }
}

/* Q4_0 / Q4_1: value j from the low nibble of byte j, j+16 from its high. */
static void dec_q4_01(const uint8_t *x, int64_t nb, cpu_row8 *r, bool q41)
{
    const int bs = q41 ? 20 : 18, off = q41 ? 4 : 2, bias = q41 ? 0 : 8;
    for (int64_t b = 0; b < nb; b++, x += bs) {
        float d = rdh(x);
        r->d16[2 * b] = r->d16[2 * b + 1] = d;
        if (q41)
            r->m32[b] = -rdh(x + 2);
        int8_t *q = r->q + QK * b;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)((x[off + j] & 0x0f) - bias);
            q[j + 16] = (int8_t)((x[off + j] >> 4) - bias);
        }
    }
}

/* Q5_0 / Q5_1: as Q4 plus a fifth bit per value from the 32-bit qh. */
static void dec_q5_01(const uint8_t *x, int64_t nb, cpu_row8 *r, bool q51)
{
    const int bs = q51 ? 24 : 22, hoff = q51 ? 4 : 2, bias = q51 ? 0 : 16;
    for (int64_t b = 0; b < nb; b++, x += bs) {
        float d = rdh(x);
        r->d16[2 * b] = r->d16[2 * b + 1] = d;
        if (q51)
            r->m32[b] = -rdh(x + 2);
        uint32_t qh = (uint32_t)x[hoff] | ((uint32_t)x[hoff + 1] << 8) |
                      ((uint32_t)x[hoff + 2] << 16) | ((uint32_t)x[hoff + 3] << 24);
        const uint8_t *qs = x + hoff + 4;
        int8_t *q = r->q + QK * b;
        for (int j = 0; j < 16; j++) {
            q[j] = (int8_t)(((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - bias);
            q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - bias);
        }
    }
}

/* Q4_K (144 B): d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of
 * nibbles; each 32 bytes hold sub-blocks 2c (low) and 2c+1 (high).
 * Q5_K (176 B) adds qh[32] before the nibbles: bit 2c / 2c+1 of qh[l] is
 * the fifth bit of value l of sub-block 2c / 2c+1. */
static void dec_q45_k(const uint8_t *x, int64_t nb, cpu_row8 *r, bool q5, bool simd)
{
    const int bs = q5 ? 176 : 144;
    for (int64_t b = 0; b < nb; b++, x += bs) {
        float d = rdh(x), dmin = rdh(x + 2);
        const uint8_t *sc = x + 4, *qh = x + 16, *qs = x + (q5 ? 48 : 16);
        int8_t *q = r->q + QK_K * b;
        for (int s = 0; s < 8; s++) {
            int is, im;
            cpu_k4_scale_min(sc, s, &is, &im);
            r->d16[16 * b + 2 * s] = r->d16[16 * b + 2 * s + 1] = d * (float)is;
            r->m32[8 * b + s] = dmin * (float)im;
        }
#ifdef CPU_HAVE_AVX2_KERNEL
        if (simd) {
            cpu_unpack_q45k_avx2(qs, q5 ? qh : NULL, q);
            continue;
        }
#endif
        for (int c = 0; c < 4; c++) {
            const uint8_t *p = qs + 32 * c;
            int8_t *lo = q + 64 * c, *hi = lo + 32;
            if (q5) {
                for (int l = 0; l < 32; l++) {
                    lo[l] = (int8_t)((p[l] & 0x0f) | (((qh[l] >> (2 * c)) & 1) << 4));
                    hi[l] = (int8_t)((p[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
                }
            } else {
                for (int l = 0; l < 32; l++) {
                    lo[l] = (int8_t)(p[l] & 0x0f);
                    hi[l] = (int8_t)(p[l] >> 4);
                }
            }
        }
    }
}

/* Q6_K (210 B): ql[128], qh[64], int8 scales[16] (one per 16 values), d.
 * Per half n of 128 values: ql+64n, qh+32n; value 32k+l takes a nibble of
 * ql[l] or ql[l+32] and bit pair k of qh[l]. */
static void dec_q6_k(const uint8_t *x, int64_t nb, cpu_row8 *r, bool simd)
{
    for (int64_t b = 0; b < nb; b++, x += 210) {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        float d = rdh(x + 208);
        for (int s = 0; s < 16; s++)
            r->d16[16 * b + s] = d * (float)sc[s];
#ifdef CPU_HAVE_AVX2_KERNEL
        if (simd) {
            cpu_unpack_q6k_avx2(ql, qh, r->q + QK_K * b);
            continue;
        }
#endif
        for (int n = 0; n < 2; n++) {
            const uint8_t *l8 = ql + 64 * n, *h8 = qh + 32 * n;
            int8_t *q = r->q + QK_K * b + 128 * n;
            for (int l = 0; l < 32; l++) {
                q[l]      = (int8_t)(((l8[l] & 0x0f)      | (((h8[l] >> 0) & 3) << 4)) - 32);
                q[l + 32] = (int8_t)(((l8[l + 32] & 0x0f) | (((h8[l] >> 2) & 3) << 4)) - 32);
                q[l + 64] = (int8_t)(((l8[l] >> 4)        | (((h8[l] >> 4) & 3) << 4)) - 32);
                q[l + 96] = (int8_t)(((l8[l + 32] >> 4)   | (((h8[l] >> 6) & 3) << 4)) - 32);
            }
        }
    }
}

void cpu_decode_row8(uint32_t type, const uint8_t *src, int64_t in, cpu_row8 *r, bool simd)
{
    switch (type) {
    case SI_TYPE_Q8_0: r->has_min = false; dec_q8_0(src, in / QK, r); break;
    case SI_TYPE_Q4_0: r->has_min = false; dec_q4_01(src, in / QK, r, false); break;
    case SI_TYPE_Q4_1: r->has_min = true;  dec_q4_01(src, in / QK, r, true); break;
    case SI_TYPE_Q5_0: r->has_min = false; dec_q5_01(src, in / QK, r, false); break;
    case SI_TYPE_Q5_1: r->has_min = true;  dec_q5_01(src, in / QK, r, true); break;
    case SI_TYPE_Q4_K: r->has_min = true;  dec_q45_k(src, in / QK_K, r, false, simd); break;
    case SI_TYPE_Q5_K: r->has_min = true;  dec_q45_k(src, in / QK_K, r, true, simd); break;
    case SI_TYPE_Q6_K: r->has_min = false; dec_q6_k(src, in / QK_K, r, simd); break;
    default: break;   /* callers only pass CPU_PATH_Q8 types */
    }
}

void cpu_decode_f32(uint32_t type, const uint8_t *src, int64_t in, float *dst)
{
    switch (type) {
    case SI_TYPE_F32:
        memcpy(dst, src, (size_t)in * sizeof(float));
        return;
    case SI_TYPE_F16:
        for (int64_t i = 0; i < in; i++)
            dst[i] = cpu_f16_to_f32(cpu_rd16(src + 2 * i));
        return;
    case SI_TYPE_BF16:
        for (int64_t i = 0; i < in; i++)
            dst[i] = cpu_bf16_to_f32(cpu_rd16(src + 2 * i));
        return;
    default: {
        /* An int8-path type: decode in pieces of one super-block through a
         * small stack row, so no caller needs extra scratch. */
        const int64_t blk = type_tab[type].blk, bytes = type_tab[type].bytes;
        int8_t q[QK_K];
        float d16[QK_K / 16], m32[QK_K / 32];
        cpu_row8 r = { q, d16, m32, false };
        for (int64_t o = 0; o < in; o += blk) {
            cpu_decode_row8(type, src + (o / blk) * bytes, blk, &r, false);
            for (int64_t i = 0; i < blk; i++)
                dst[o + i] = r.d16[i / 16] * (float)r.q[i] - (r.has_min ? r.m32[i / 32] : 0.0f);
        }
        return;
    }
    }
}

int cpu_row_to_f32(const si_host *h, uint32_t type, const uint8_t *src, int64_t in, float *dst, si_err *err)
{
    if (cpu_type_path(type) == CPU_PATH_HOST)
        return h->dequant(type, src, dst, in, err);
    cpu_decode_f32(type, src, in, dst);
    return SI_OK;
}

/* ---- activation quantisation ---------------------------------------- */

size_t cpu_q8_bytes(int64_t in, int64_t rows)
{
    return cpu_round((size_t)(in * rows)) + 2 * cpu_round((size_t)(in / QK * rows) * sizeof(float));
}

void cpu_q8_carve(cpu_q8 *q, void *mem, int64_t in, int64_t rows)
{
    cpu_carve c = { mem, 0 };
    q->q = cpu_carve_take(&c, (size_t)(in * rows));
    q->d = cpu_carve_take(&c, (size_t)(in / QK * rows) * sizeof(float));
    q->s = cpu_carve_take(&c, (size_t)(in / QK * rows) * sizeof(float));
    q->in = in;
}

void cpu_quantize_row_q8(const float *x, int64_t in, const cpu_q8 *q, int64_t row)
{
    const int64_t nb = in / QK;
    int8_t *dq = q->q + row * in;
    float *dd = q->d + row * nb, *ds = q->s + row * nb;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + QK * b;
        float amax = 0.0f, sum = 0.0f;
        for (int l = 0; l < QK; l++) {
            float a = fabsf(xb[l]);
            amax = a > amax ? a : amax;
            sum += xb[l];
        }
        float d = amax / 127.0f;
        float id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int l = 0; l < QK; l++) {
            /* Round to nearest through the 1.5*2^23 trick: |x*id| <= 127. */
            float t = xb[l] * id + 12582912.0f;
            int32_t i;
            memcpy(&i, &t, sizeof i);
            dq[QK * b + l] = (int8_t)((i & 0x007fffff) - 0x00400000);
        }
        /* A NaN or Inf in the block must reach the output: max() would
         * drop it, the sum does not (sum - sum is 0 only when finite). */
        dd[b] = d + (sum - sum);
        ds[b] = sum;
    }
}

/* ---- dot kernels -------------------------------------------------------- */


static float dot_row8_c(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in)
{
    const int64_t nb = in / QK;
    const int8_t *aq = a->q + row * in;
    const float *ad = a->d + row * nb, *as = a->s + row * nb;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *wq = w->q + QK * b, *xq = aq + QK * b;
        int32_t s0 = 0, s1 = 0;
        for (int l = 0; l < 16; l++)
            s0 += (int32_t)wq[l] * (int32_t)xq[l];
        for (int l = 16; l < 32; l++)
            s1 += (int32_t)wq[l] * (int32_t)xq[l];
        acc += ad[b] * (w->d16[2 * b] * (float)s0 + w->d16[2 * b + 1] * (float)s1);
    }
    if (w->has_min) {
        float m = 0.0f;
        for (int64_t b = 0; b < nb; b++)
            m += w->m32[b] * as[b];
        acc -= m;
    }
    return acc;
}

static float dot_f32_c(const float *a, const float *b, int64_t n)
{
    /* 16 independent lanes: vectorisable without reassociating a single sum. */
    float acc[16] = { 0 };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++)
            acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (; i < n; i++)
        s += a[i] * b[i];
    for (int l = 0; l < 16; l++)
        s += acc[l];
    return s;
}

bool cpu_have_simd(void)
{
#ifdef CPU_HAVE_AVX2_KERNEL
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

float cpu_dot_row8(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in, bool simd)
{
#ifdef CPU_HAVE_AVX2_KERNEL
    if (simd)
        return cpu_dot_row8_avx2(w, a, row, in);
#endif
    (void)simd;
    return dot_row8_c(w, a, row, in);
}

bool cpu_dot_packed_ok(uint32_t type, bool packed)
{
#ifdef CPU_HAVE_AVX2_KERNEL
    return packed && (type == SI_TYPE_Q4_K || type == SI_TYPE_Q5_K || type == SI_TYPE_Q6_K || type == SI_TYPE_Q8_0);
#else
    (void)type, (void)packed;
    return false;
#endif
}

float cpu_dot_packed(uint32_t type, const uint8_t *src, const cpu_q8 *a, int64_t row, int64_t in)
{
#ifdef CPU_HAVE_AVX2_KERNEL
    return cpu_dot_packed_avx2(type, src, a, row, in);
#else
    (void)type, (void)src, (void)a, (void)row, (void)in;
    return 0.0f;   /* (never called: cpu_dot_packed_ok is false) */
#endif
}

void cpu_dot_row8_x4(const cpu_row8 *w, const cpu_q8 *a, const int64_t rows[4], int64_t in, bool simd,
                     float out[4])
{
#ifdef CPU_HAVE_AVX2_KERNEL
    if (simd) {
        cpu_dot_row8_x4_avx2(w, a, rows, in, out);
        return;
    }
#endif
    for (int t = 0; t < 4; t++)
        out[t] = dot_row8_c(w, a, rows[t], in);
}

void cpu_decode_f32_simd(uint32_t type, const uint8_t *src, int64_t in, float *dst, bool simd)
{
#ifdef CPU_HAVE_AVX2_KERNEL
    if (simd && type == SI_TYPE_F16) {
        cpu_f16_to_f32_avx2(src, dst, in);
        return;
    }
#endif
    (void)simd;
    cpu_decode_f32(type, src, in, dst);
}

float cpu_dot_f32(const float *a, const float *b, int64_t n, bool simd)
{
#ifdef CPU_HAVE_AVX2_KERNEL
    if (simd)
        return cpu_dot_f32_avx2(a, b, n);
#endif
    (void)simd;
    return dot_f32_c(a, b, n);
}
