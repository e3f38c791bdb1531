/* core/cli/mkmodel_synth.c — seeded random tensor data for `mkmodel`.
 *
 * Every row of every tensor has its own generator, seeded from (seed, tensor
 * index, row), so the bytes of a file depend only on the seed and the plan,
 * not on thread count or chunking.  Generators: splitmix64 to derive seeds,
 * xoshiro256** for the stream (both public-domain algorithms, written here).
 *
 * Floats (F32/F16/BF16 tensors and small quantised ones) are drawn from the
 * tensor's distribution; small quantised tensors then go through the
 * reference quantiser.  Big quantised tensors (9B/35B presets: 5-20 GB) would
 * take hours through a float pass on a small machine, so their blocks are
 * SYNTHESISED: uniformly random quant indices, with block scales chosen so
 * that the dequantised values have mean ~0 and the intended std.  They are
 * valid blocks of the real formats (a dequantiser cannot tell them apart).
 */
#include <math.h>
#include <string.h>

#include "mkmodel.h"
#include "quant.h"

typedef struct rng { uint64_t s[4]; } rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 bits. */
static inline double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [lo, hi]. */
static inline int rng_int(rng *r, int lo, int hi)
{
    return lo + (int)(((rng_next(r) >> 32) * (uint64_t)(hi - lo + 1)) >> 32);
}

static void rng_for_row(rng *r, uint64_t seed, uint32_t ti, uint64_t row)
{
    uint64_t x = seed;
    uint64_t a = splitmix64(&x) ^ ((uint64_t)ti * 0xD1B54A32D192ED03ull);
    uint64_t b = splitmix64(&a) ^ (row * 0x8CB92BA72F3D8DD7ull);
    rng_seed(r, splitmix64(&b));
}

/* n floats of the tensor's distribution.  Normal pairs by Box-Muller. */
static void draw_floats(rng *r, uint32_t init, float std, float *dst, int64_t n)
{
    if (init == SI_MK_INIT_NEG_EXP) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = -expf((float)(2.0 * rng_unit(r) - 1.0));
        return;
    }
    const float base = init == SI_MK_INIT_ONE_PLUS ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - rng_unit(r);             /* (0, 1]: log is finite */
        double u2 = rng_unit(r);
        double rad = sqrt(-2.0 * log(u1)) * std;
        dst[i] = base + (float)(rad * cos(6.283185307179586 * u2));
        if (i + 1 < n)
            dst[i + 1] = base + (float)(rad * sin(6.283185307179586 * u2));
    }
}

/* ---- quant block synthesis ------------------------------------------------- */

static inline void put_f16(uint8_t *p, float f)
{
    uint16_t h = si_f32_to_fp16(f);
    p[0] = (uint8_t)(h & 0xFF);
    p[1] = (uint8_t)(h >> 8);
}

static inline void fill_random(rng *r, uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = rng_next(r);
        memcpy(p + i, &x, 8);
    }
    if (i < n) {
        uint64_t x = rng_next(r);
        memcpy(p + i, &x, n - i);
    }
}

/* Per-block scale jitter u ~ U[0.75, 1.25]: E[u^2] = 1 + 1/48. */
#define JITTER_E2 (1.0 + 1.0 / 48.0)
static inline double jitter(rng *r) { return 0.75 + 0.5 * rng_unit(r); }

/* E[k^2] for k uniform on the integers [lo, hi]. */
static double mean_sq(int lo, int hi)
{
    double s = 0;
    for (int k = lo; k <= hi; k++)
        s += (double)k * k;
    return s / (hi - lo + 1);
}

/* Q8_0: {f16 d; int8 q[32]}, x = d q.  q uniform in [-127, 127]. */
static void synth_q8_0(rng *r, float std, uint8_t *dst, uint64_t nb)
{
    const double var_q = (255.0 * 255.0 - 1.0) / 12.0;
    const double d0 = std / sqrt(JITTER_E2 * var_q);
    for (uint64_t b = 0; b < nb; b++, dst += 34) {
        put_f16(dst, (float)(d0 * jitter(r)));
        for (int i = 0; i < 32; i += 4) {
            uint64_t x = rng_next(r);
            for (int k = 0; k < 4; k++, x >>= 16)
                dst[2 + i + k] = (uint8_t)(int8_t)((int)(((x & 0xFFFF) * 255) >> 16) - 127);
        }
    }
}

/* Packs eight 6-bit (scale, min) pairs the way Q4_K/Q5_K store them:
 * bytes 0-3 low 6 bits of sc[0..3], 4-7 low 6 bits of m[0..3], their top
 * 2 bits carry the high bits of sc[4..7] / m[4..7], whose low nibbles sit in
 * bytes 8-11. */
static void pack_scales_k4(uint8_t q[12], const uint8_t sc[8], const uint8_t m[8])
{
    for (int j = 0; j < 4; j++) {
        q[j]     = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* Q4_K / Q5_K: x = d sc q - dmin m per 32-value sub-block, q uniform in
 * [0, 2^bits).  dmin = 2^(bits-1) d and m = round(sc (2^bits - 1)/2 / 2^(bits-1))
 * make the sub-block mean ~0. */
static void synth_k45(rng *r, int bits, float std, uint8_t *dst, uint64_t nb)
{
    const int qmax = (1 << bits) - 1;
    const double mid = qmax / 2.0, dmin_f = (double)(1 << (bits - 1));
    const double var_q = ((double)(qmax + 1) * (qmax + 1) - 1.0) / 12.0;
    const double d0 = std / sqrt(JITTER_E2 * mean_sq(40, 63) * var_q);
    const size_t bytes = bits == 4 ? 144 : 176;
    for (uint64_t b = 0; b < nb; b++, dst += bytes) {
        double d = d0 * jitter(r);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)rng_int(r, 40, 63);
            m[j] = (uint8_t)lround(sc[j] * mid / dmin_f);
        }
        put_f16(dst, (float)d);
        put_f16(dst + 2, (float)(d * dmin_f));
        pack_scales_k4(dst + 4, sc, m);
        fill_random(r, dst + 16, bytes - 16);   /* Q5_K: qh[32] then qs[128] */
    }
}

/* Q6_K: {ql[128], qh[64], int8 sc[16], f16 d}, x = d sc (q - 32), q in
 * [0, 64).  Scales have random sign, so the -0.5 mean of (q - 32) cancels. */
static void synth_q6_k(rng *r, float std, uint8_t *dst, uint64_t nb)
{
    const double var_q = (64.0 * 64.0 - 1.0) / 12.0 + 0.25;
    const double d0 = std / sqrt(JITTER_E2 * mean_sq(64, 127) * var_q);
    for (uint64_t b = 0; b < nb; b++, dst += 210) {
        fill_random(r, dst, 192);
        for (int j = 0; j < 16; j++) {
            int s = rng_int(r, 64, 127);
            dst[192 + j] = (uint8_t)(int8_t)((rng_next(r) >> 63) ? -s : s);
        }
        put_f16(dst + 208, (float)(d0 * jitter(r)));
    }
}

static int synth_rng(uint32_t type, float std, rng *r, void *dst, uint64_t nb, si_err *err)
{
    switch (type) {
    case SI_TYPE_Q8_0: synth_q8_0(r, std, dst, nb); return SI_OK;
    case SI_TYPE_Q4_K: synth_k45(r, 4, std, dst, nb); return SI_OK;
    case SI_TYPE_Q5_K: synth_k45(r, 5, std, dst, nb); return SI_OK;
    case SI_TYPE_Q6_K: synth_q6_k(r, std, dst, nb); return SI_OK;
    default:
        return si_err_set(err, SI_EUNSUPPORTED, "cannot synthesise %s blocks",
                          si_type_name(type) ? si_type_name(type) : "?");
    }
}

int si_mk_synth_blocks(uint32_t type, float std, uint64_t rng_seed_v, void *dst,
                       uint64_t n_blocks, si_err *err)
{
    rng r;
    rng_seed(&r, rng_seed_v);
    return synth_rng(type, std, &r, dst, n_blocks, err);
}

/* ---- rows ----------------------------------------------------------------- */

int si_mk_fill_rows(const si_mk_tensor *t, uint32_t ti, uint64_t seed,
                    uint64_t row0, uint64_t nrows, void *dst, float *scratch, si_err *err)
{
    const int64_t ne0 = t->ne[0];
    uint8_t *out = dst;
    rng r;

    if (t->synth) {
        if (t->init != SI_MK_INIT_NORMAL)
            return si_err_set(err, SI_EINVAL, "%s: only N(0, std) tensors can be synthesised",
                              t->name);
        uint64_t nb = (uint64_t)ne0 / si_type_get(t->type)->block_elems;
        for (uint64_t i = 0; i < nrows; i++) {
            rng_for_row(&r, seed, ti, row0 + i);
            int rc = synth_rng(t->type, t->std, &r, out + i * t->row_bytes, nb, err);
            if (rc != SI_OK)
                return rc;
        }
        return SI_OK;
    }

    /* F32 rows are drawn in place; other types via float scratch. */
    float *f = t->type == SI_TYPE_F32 ? (float *)dst : scratch;
    if (f == NULL)
        return si_err_set(err, SI_EINVAL, "%s: no scratch buffer", t->name);
    for (uint64_t i = 0; i < nrows; i++) {
        rng_for_row(&r, seed, ti, row0 + i);
        draw_floats(&r, t->init, t->std, f + i * (uint64_t)ne0, ne0);
    }
    const uint64_t n = nrows * (uint64_t)ne0;
    switch (t->type) {
    case SI_TYPE_F32:
        return SI_OK;
    case SI_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = si_f32_to_fp16(f[i]);
            out[2 * i] = (uint8_t)(h & 0xFF);
            out[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return SI_OK;
    case SI_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = si_f32_to_bf16(f[i]);
            out[2 * i] = (uint8_t)(h & 0xFF);
            out[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return SI_OK;
    default: {
        int rc = si_quant(t->type, f, dst, (int64_t)n, err);
        if (rc != SI_OK)
            si_err_prefix(err, t->name);
        return rc;
    }
    }
}
