/* core/quant_iq.c — the non-linear 4-bit types IQ4_NL and IQ4_XS
 * (reference dequantisation).
 *
 * Both map a 4-bit index through one fixed 16-entry table of int8 levels,
 * denser near zero, where weights are most common.
 *
 *   IQ4_NL (18 B per 32): d (f16) @0, qs[16] @2
 *       byte j: low nibble -> element j, high nibble -> element j+16;
 *       x = d * kvalues[nibble].
 *   IQ4_XS (136 B per 256): d (f16) @0, scales_h (u16 LE) @2,
 *       scales_l[4] @4, qs[128] @8
 *       eight 32-element sub-blocks, each laid out like an IQ4_NL block
 *       (16 bytes of qs); sub-block i's 6-bit scale is the nibble
 *       (scales_l[i/2] >> 4*(i%2)) & 15 plus bits 2i..2i+1 of scales_h as
 *       its top two bits; x = d * (scale - 32) * kvalues[nibble].
 */
#include "quant_internal.h"

static const int8_t kvalues_iq4[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* One 32-element sub-block: 16 bytes of nibbles at scale dl. */
static void iq4_sub(const uint8_t *qs, float dl, float *dst)
{
    for (int j = 0; j < 16; j++) {
        dst[j]      = dl * (float)kvalues_iq4[qs[j] & 15];
        dst[j + 16] = dl * (float)kvalues_iq4[qs[j] >> 4];
    }
}

void si_dequant_iq4_nl(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 18, dst += SI_QK)
        iq4_sub(src + 2, si_rdh(src), dst);
}

void si_dequant_iq4_xs(const uint8_t *src, float *dst, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, src += 136) {
        const float d = si_rdh(src);
        const uint16_t scales_h = si_rd16(src + 2);
        const uint8_t *scales_l = src + 4, *qs = src + 8;
        for (int i = 0; i < 8; i++, qs += 16, dst += 32) {
            int ls = ((scales_l[i / 2] >> (4 * (i % 2))) & 15) |
                     (((scales_h >> (2 * i)) & 3) << 4);
            iq4_sub(qs, d * (float)(ls - 32), dst);
        }
    }
}
