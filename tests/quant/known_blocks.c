/* tests/quant/known_blocks.c — tcase "known" of the "quant" suite: one
 * block per dequantisable type, built byte by byte from the format
 * definition (see the layout notes in core/quant*.c), with expected floats
 * worked out by hand in the comments.  Values are chosen so every product
 * is exact in float, hence exact comparisons.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "quant_test.h"

typedef struct {
    int   idx;
    float val;
} expect_t;

static void check_block(uint32_t type, const uint8_t *blk, const expect_t *ex, size_t nex)
{
    const si_type_traits *t = si_type_get(type);
    ck_assert_ptr_nonnull(t);
    float out[256];
    si_err err;
    int rc = si_dequant(type, blk, out, t->block_elems, &err);
    ck_assert_msg(rc == SI_OK, "%s: %s", t->name, err.msg);
    for (size_t i = 0; i < nex; i++)
        REQUIRE(out[ex[i].idx] == ex[i].val, "%s: element %d = %.9g, expected %.9g",
                t->name, ex[i].idx, out[ex[i].idx], ex[i].val);
}


START_TEST(test_known_plain)
{
    /* F32: a copy, bit for bit (NaN payload included). */
    uint32_t f32[3] = { 0x3F800000u, 0xC0490FDBu, 0x7FC12345u };
    float out[3];
    ck_assert_int_eq(si_dequant(SI_TYPE_F32, f32, out, 3, NULL), SI_OK);
    ck_assert_mem_eq(out, f32, sizeof f32);

    /* F16 little-endian: 00 3C = 1.0, FF 7B = 65504, 01 80 = -2^-24 */
    const uint8_t f16[6] = { 0x00, 0x3C, 0xFF, 0x7B, 0x01, 0x80 };
    ck_assert_int_eq(si_dequant(SI_TYPE_F16, f16, out, 3, NULL), SI_OK);
    ck_assert(out[0] == 1.0f && out[1] == 65504.0f && out[2] == -0x1p-24f);

    /* BF16: 80 3F = 1.0, 49 40 = 3.140625, 80 BF = -1.0 */
    const uint8_t bf16[6] = { 0x80, 0x3F, 0x49, 0x40, 0x80, 0xBF };
    ck_assert_int_eq(si_dequant(SI_TYPE_BF16, bf16, out, 3, NULL), SI_OK);
    ck_assert(out[0] == 1.0f && out[1] == 3.140625f && out[2] == -1.0f);
}
END_TEST

START_TEST(test_known_q4_0)
{
    /* d = 0.5 (f16 0x3800); qs[j] = j | (15-j) << 4.
     * element j = (j - 8) * 0.5, element j+16 = ((15-j) - 8) * 0.5. */
    uint8_t b[18];
    put16(b, 0x3800);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    const expect_t ex[] = {
        { 0, -4.0f },   /* (0-8)*0.5 */
        { 9, 0.5f },    /* (9-8)*0.5 */
        { 15, 3.5f },   /* (15-8)*0.5 */
        { 16, 3.5f },   /* high nibble of qs[0] = 15 */
        { 20, 1.5f },   /* qs[4] high = 11: (11-8)*0.5 */
        { 31, -4.0f },  /* qs[15] high = 0 */
    };
    check_block(SI_TYPE_Q4_0, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q4_1)
{
    /* d = 0.25 (0x3400), m = -1.0 (0xBC00); qs[j] = j | 3 << 4. */
    uint8_t b[20];
    put16(b, 0x3400);
    put16(b + 2, 0xBC00);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(j | (3 << 4));
    const expect_t ex[] = {
        { 0, -1.0f },    /* 0*0.25 - 1 */
        { 5, 0.25f },    /* 5*0.25 - 1 */
        { 15, 2.75f },   /* 15*0.25 - 1 */
        { 16, -0.25f },  /* 3*0.25 - 1 */
        { 31, -0.25f },
    };
    check_block(SI_TYPE_Q4_1, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q5_0)
{
    /* d = 1.0; qh = 0x80100001 (LE bytes 01 00 10 80): high bits of
     * elements 0, 20 and 31.  qs[0] = 0xA5, qs[15] = 0x3C, others 0x88. */
    uint8_t b[22];
    put16(b, 0x3C00);
    b[2] = 0x01; b[3] = 0x00; b[4] = 0x10; b[5] = 0x80;
    memset(b + 6, 0x88, 16);
    b[6 + 0] = 0xA5;
    b[6 + 15] = 0x3C;
    const expect_t ex[] = {
        { 0, 5.0f },    /* (5 | 16) - 16 */
        { 16, -6.0f },  /* 10 - 16, bit 16 clear */
        { 15, -4.0f },  /* 12 - 16 */
        { 31, 3.0f },   /* (3 | 16) - 16: bit 31 in the 4th byte */
        { 1, -8.0f },   /* 8 - 16 */
        { 4, -8.0f },
        { 20, 8.0f },   /* (8 | 16) - 16: bit 20 = bit 4 of the 3rd byte */
        { 21, -8.0f },
    };
    check_block(SI_TYPE_Q5_0, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q5_1)
{
    /* d = 0.5, m = 2.0; qh = 0x00010002 (bytes 02 00 01 00): elements 1
     * and 16 get bit 4.  qs[0] = 0x1F, qs[1] = 0xF7, others 0. */
    uint8_t b[24];
    memset(b, 0, sizeof b);
    put16(b, 0x3800);
    put16(b + 2, 0x4000);
    b[4] = 0x02; b[6] = 0x01;
    b[8 + 0] = 0x1F;
    b[8 + 1] = 0xF7;
    const expect_t ex[] = {
        { 0, 9.5f },    /* 15*0.5 + 2 */
        { 1, 13.5f },   /* (7|16)=23: 23*0.5 + 2 */
        { 16, 10.5f },  /* (1|16)=17: 17*0.5 + 2 */
        { 17, 9.5f },   /* 15*0.5 + 2 */
        { 2, 2.0f },
        { 31, 2.0f },
    };
    check_block(SI_TYPE_Q5_1, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q8_0)
{
    /* d = 0.125 (0x3000); qs[j] = j*8 - 128 (int8) for j < 31, qs[31] = 127 */
    uint8_t b[34];
    put16(b, 0x3000);
    for (int j = 0; j < 31; j++)
        b[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    b[2 + 31] = 0x7F;
    const expect_t ex[] = {
        { 0, -16.0f },   /* -128 * 0.125 */
        { 5, -11.0f },   /* -88 * 0.125 */
        { 16, 0.0f },
        { 17, 1.0f },    /* 8 * 0.125 */
        { 31, 15.875f }, /* 127 * 0.125 */
    };
    check_block(SI_TYPE_Q8_0, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q2_k)
{
    /* scales[16] @0, qs[64] @16, d @80 = 1.0, dmin @82 = 0.5.
     * element e: half h = e/128, r = e%128, shift pair s = r/32,
     * part = (r%32)/16, l = r%16; scale byte is = 8h + 2s + part;
     * q = (qs[32h + 16part + l] >> 2s) & 3;
     * value = (d * (sc & 15)) * q - dmin * (sc >> 4). */
    static const uint8_t sc[16] = { 0x21, 0x13, 0x35, 0x07, 0x4F, 0x10, 0x52, 0x3A,
                                    0x00, 0x61, 0x09, 0x0C, 0x7D, 0x0E, 0x1F, 0xF2 };
    uint8_t b[84];
    memset(b, 0, sizeof b);
    memcpy(b, sc, 16);
    uint8_t *qs = b + 16;
    qs[0] = 0xE4;       /* pairs (low first): 0,1,2,3 */
    qs[16 + 5] = 0x1B;  /* pairs 3,2,1,0 */
    qs[63] = 0xC0;      /* pairs 0,0,0,3 */
    put16(b + 80, 0x3C00);
    put16(b + 82, 0x3800);
    const expect_t ex[] = {
        { 0, -1.0f },    /* is 0 sc 0x21: 1*0 - 0.5*2 */
        { 32, 3.5f },    /* is 2 sc 0x35: 5*1 - 0.5*3 */
        { 64, 28.0f },   /* is 4 sc 0x4F: 15*2 - 0.5*4 */
        { 96, 3.5f },    /* is 6 sc 0x52: 2*3 - 0.5*5 */
        { 21, 8.5f },    /* is 1 sc 0x13, qs[21] pair 0 = 3: 3*3 - 0.5 */
        { 53, 14.0f },   /* is 3 sc 0x07, pair 1 = 2: 7*2 - 0 */
        { 117, -1.5f },  /* is 7 sc 0x3A, pair 3 = 0: 0 - 0.5*3 */
        { 128, 0.0f },   /* is 8 sc 0x00 */
        { 159, -3.0f },  /* is 9 sc 0x61, qs[63] pair 0 = 0: 0 - 0.5*6 */
        { 255, -1.5f },  /* is 15 sc 0xF2, qs[63] pair 3 = 3: 2*3 - 0.5*15 */
    };
    check_block(SI_TYPE_Q2_K, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q3_k)
{
    /* hmask[32] @0, qs[64] @32, scales[12] @96, d @108 = 0.5.
     * Sixteen 6-bit scales v (stored; used as v - 32):
     *   v  = 32 33 31 40  0 63 20 47 | 35  1 62 16 48 34 30 36
     *   -32:  0  1 -1  8 -32 31 -12 15 |  3 -31 30 -16 16  2 -2  4
     * bytes 0..7: low nibble = v[k] & 15, high nibble = v[k+8] & 15;
     * bytes 8..11 (k = 0..3): bit pairs 0,1,2,3 = v[k], v[k+4], v[k+8],
     * v[k+12] >> 4:
     *   b8  = 2 | 0<<2 | 2<<4 | 3<<6 = 0xE2   b9  = 2 | 3<<2 | 0<<4 | 2<<6 = 0x8E
     *   b10 = 1 | 1<<2 | 3<<4 | 1<<6 = 0x75   b11 = 2 | 2<<2 | 1<<4 | 2<<6 = 0x9A
     * element e: h = e/128, r = e%128, s = r/32, l = r%32, part = l/16;
     * scale is = 8h + 2s + part; q = (qs[32h + l] >> 2s) & 3, minus 4
     * unless bit (4h + s) of hmask[l] is set; value = (d*(v-32)) * q. */
    static const uint8_t scales[12] = { 0x30, 0x11, 0xEF, 0x08, 0x00, 0x2F, 0xE4, 0x4F,
                                        0xE2, 0x8E, 0x75, 0x9A };
    uint8_t b[110];
    memset(b, 0, sizeof b);
    uint8_t *hm = b, *qs = b + 32;
    memset(hm, 0xFF, 32);
    memcpy(b + 96, scales, 12);
    put16(b + 108, 0x3800);
    qs[16] = 0x03; hm[16] = 0xFD;
    qs[5] = 0x20;  hm[5] = 0xFB;
    qs[31] = 0xC0;
    qs[32 + 10] = 0x01; hm[10] = 0xEF;
    qs[32 + 20] = 0x08;
    qs[32 + 31] = 0x40;
    hm[0] = 0xBF;
    qs[2] = 0xC0;  hm[2] = 0xF7;
    qs[32 + 3] = 0x80; hm[3] = 0x7F;
    qs[17] = 0x30;
    qs[32 + 25] = 0x02;
    qs[32 + 7] = 0x04; hm[7] = 0xDF;
    const expect_t ex[] = {
        { 16, 1.5f },    /* is 1 (1): q 3, hbit 0 set: 0.5*1*3 */
        { 48, -16.0f },  /* is 3 (8): q 0, hbit 1 clear: 4 * -4 */
        { 69, 32.0f },   /* is 4 (-32): q 2, hbit 2 clear: -16 * -2 */
        { 127, 22.5f },  /* is 7 (15): q 3, set: 7.5 * 3 */
        { 138, -4.5f },  /* is 8 (3): q 1, bit 4 clear: 1.5 * -3 */
        { 180, -16.0f }, /* is 11 (-16): q 2, bit 5 set: -8 * 2 */
        { 255, 2.0f },   /* is 15 (4): q 1, bit 7 set: 2 * 1 */
        { 192, -32.0f }, /* is 12 (16): q 0, bit 6 clear: 8 * -4 */
        { 98, 6.0f },    /* is 6 (-12): q 3, bit 3 clear: -6 * -1 */
        { 227, 2.0f },   /* is 14 (-2): q 2, bit 7 clear: -1 * -2 */
        { 81, 46.5f },   /* is 5 (31): q 3, bit 2 set: 15.5 * 3 */
        { 153, -31.0f }, /* is 9 (-31): q 2, bit 4 set: -15.5 * 2 */
        { 167, -45.0f }, /* is 10 (30): q 1, bit 5 clear: 15 * -3 */
    };
    check_block(SI_TYPE_Q3_K, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

/* Q4_K/Q5_K scale bytes for sc = {1,2,63,10,33,17,48,5},
 * m = {0,4,7,63,21,40,1,32}:
 *   b[j]   (j<4) = sc[j] | (sc[j+4] >> 4) << 6 : 0x81 0x42 0xFF 0x0A
 *   b[j+4] (j<4) = m[j]  | (m[j+4] >> 4) << 6  : 0x40 0x84 0x07 0xBF
 *   b[j+4] (j>=4) = (sc[j] & 15) | (m[j] & 15) << 4 : 0x51 0x81 0x10 0x05 */
static const uint8_t k4_scales[12] = { 0x81, 0x42, 0xFF, 0x0A, 0x40, 0x84, 0x07, 0xBF,
                                       0x51, 0x81, 0x10, 0x05 };

START_TEST(test_known_q4_k)
{
    /* d @0 = 0.5, dmin @2 = 0.25, scales @4, qs[128] @16 with
     * qs[k] = (k & 15) | (15 - (k & 15)) << 4.
     * element e: group g = e/64, r = e%64; r < 32: low nibble of
     * qs[32g + r], sub-block 2g; else high nibble of qs[32g + r - 32],
     * sub-block 2g+1.  value = (d*sc)*q - dmin*m. */
    uint8_t b[144];
    put16(b, 0x3800);
    put16(b + 2, 0x3400);
    memcpy(b + 4, k4_scales, 12);
    for (int k = 0; k < 128; k++)
        b[16 + k] = (uint8_t)((k & 15) | ((15 - (k & 15)) << 4));
    const expect_t ex[] = {
        { 0, 0.0f },       /* j0 (1,0): q 0 */
        { 5, 2.5f },       /* j0: 0.5*5 - 0 */
        { 40, 6.0f },      /* j1 (2,4): q = 15-8 = 7: 1*7 - 1 */
        { 95, 470.75f },   /* j2 (63,7): q 15: 31.5*15 - 1.75 */
        { 96, 59.25f },    /* j3 (10,63): q 15: 5*15 - 15.75 */
        { 145, 11.25f },   /* j4 (33,21): q 1: 16.5 - 5.25 */
        { 191, -10.0f },   /* j5 (17,40): q 0: 0 - 10 */
        { 202, 239.75f },  /* j6 (48,1): q 10: 24*10 - 0.25 */
        { 225, 27.0f },    /* j7 (5,32): q 14: 2.5*14 - 8 */
        { 255, -8.0f },    /* j7: q 0 */
    };
    check_block(SI_TYPE_Q4_K, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q5_k)
{
    /* As Q4_K (same d, dmin, scales, nibbles at qs @48), plus qh[32] @16:
     * bit 2g of qh[l] is bit 4 of element 64g + l, bit 2g+1 that of
     * element 64g + 32 + l. */
    uint8_t b[176];
    memset(b, 0, sizeof b);
    put16(b, 0x3800);
    put16(b + 2, 0x3400);
    memcpy(b + 4, k4_scales, 12);
    uint8_t *qh = b + 16;
    qh[5] = 0x01;   /* e 5   */
    qh[8] = 0x02;   /* e 40  */
    qh[31] = 0x04;  /* e 95  */
    qh[0] = 0x08;   /* e 96  */
    qh[17] = 0x10;  /* e 145 */
    qh[1] = 0x80;   /* e 225 */
    for (int k = 0; k < 128; k++)
        b[48 + k] = (uint8_t)((k & 15) | ((15 - (k & 15)) << 4));
    const expect_t ex[] = {
        { 5, 10.5f },      /* q 5+16: 0.5*21 */
        { 4, 2.0f },       /* no high bit: 0.5*4 */
        { 69, 155.75f },   /* qh[5] bit 2 clear, q 5: 31.5*5 - 1.75 */
        { 40, 22.0f },     /* q 7+16: 1*23 - 1 */
        { 95, 974.75f },   /* q 31: 31.5*31 - 1.75 */
        { 96, 139.25f },   /* q 31: 5*31 - 15.75 */
        { 145, 275.25f },  /* q 17: 16.5*17 - 5.25 */
        { 191, -10.0f },   /* q 0 */
        { 202, 239.75f },  /* q 10, qh[10] clear */
        { 225, 67.0f },    /* q 14+16: 2.5*30 - 8 */
    };
    check_block(SI_TYPE_Q5_K, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_q6_k)
{
    /* ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208 = 0.25.
     * element e: h = e/128, r = e%128, quarter t = r/32, l = r%32:
     *   t0: low nibble ql[64h+l],     qh[32h+l] bits 0-1
     *   t1: low nibble ql[64h+l+32],  bits 2-3
     *   t2: high nibble ql[64h+l],    bits 4-5
     *   t3: high nibble ql[64h+l+32], bits 6-7
     * scale index 8h + l/16 + 2t; value = (d*sc) * (q - 32). */
    static const int8_t sc[16] = { 1, -1, 2, -2, 4, -4, 8, -8,
                                   16, -16, 32, -32, 64, -64, 127, -128 };
    uint8_t b[210];
    memset(b, 0, sizeof b);
    uint8_t *ql = b, *qh = b + 128;
    memcpy(b + 192, sc, 16);
    put16(b + 208, 0x3400);
    ql[0] = 0x5A;  qh[0] = 0xE4;   /* qh pairs (low first): 0,1,2,3 */
    ql[32] = 0x3F;
    ql[63] = 0xF0; qh[31] = 0xC0;
    ql[64 + 5] = 0x07; qh[32 + 5] = 0x02;
    ql[64 + 20] = 0x90; qh[32 + 20] = 0x10;
    ql[127] = 0x10; qh[63] = 0x40;
    ql[112] = 0x0C; qh[48] = 0x0C;
    const expect_t ex[] = {
        { 0, -5.5f },     /* sc 1: q = 10 | 0<<4 = 10: 0.25 * -22 */
        { 64, 5.0f },     /* sc 4: q = 5 | 2<<4 = 37: 1 * 5 */
        { 32, -0.5f },    /* sc 2: q = 15 | 1<<4 = 31: 0.5 * -1 */
        { 96, 38.0f },    /* sc 8: q = 3 | 3<<4 = 51: 2 * 19 */
        { 17, 8.0f },     /* sc -1: q 0: -0.25 * -32 */
        { 127, -62.0f },  /* sc -8: q = 15 | 3<<4 = 63: -2 * 31 */
        { 133, 28.0f },   /* sc[8] 16: q = 7 | 2<<4 = 39: 4 * 7 */
        { 212, 112.0f },  /* sc[13] -64: q = 9 | 1<<4 = 25: -16 * -7 */
        { 255, 480.0f },  /* sc[15] -128: q = 1 | 1<<4 = 17: -32 * -15 */
        { 176, -224.0f }, /* sc[11] -32: q = 12 | 3<<4 = 60: -8 * 28 */
    };
    check_block(SI_TYPE_Q6_K, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

/* kvalues = -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113 */
START_TEST(test_known_iq4_nl)
{
    /* d = 0.5; qs[j] = j | (15-j) << 4 */
    uint8_t b[18];
    put16(b, 0x3800);
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    const expect_t ex[] = {
        { 0, -63.5f },   /* 0.5 * -127 */
        { 5, -17.5f },   /* 0.5 * -35 */
        { 8, 0.5f },     /* 0.5 * 1 */
        { 15, 56.5f },   /* 0.5 * 113 */
        { 16, 56.5f },   /* nibble 15 */
        { 23, 0.5f },    /* nibble 8 */
        { 31, -63.5f },  /* nibble 0 */
    };
    check_block(SI_TYPE_IQ4_NL, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

START_TEST(test_known_iq4_xs)
{
    /* d @0 = 0.5, scales_h @2, scales_l[4] @4, qs[128] @8.
     * 6-bit scales ls = 32 33 0 63 31 40 16 48 (used as ls - 32:
     * 0 1 -32 31 -1 8 -16 16).
     * scales_l[k] = (ls[2k] & 15) | (ls[2k+1] & 15) << 4: 10 F0 8F 00
     * scales_h = sum (ls[i] >> 4) << 2i
     *          = 2 | 2<<2 | 0<<4 | 3<<6 | 1<<8 | 2<<10 | 1<<12 | 3<<14 = 0xD9CA
     * sub-block i = e/32 uses qs[16i..16i+15]: element 32i+j low nibble
     * of qs[16i+j], 32i+16+j the high nibble; qs[k] = (k&15) | (15-(k&15))<<4.
     * value = (d * (ls - 32)) * kvalues[nibble]. */
    uint8_t b[136];
    put16(b, 0x3800);
    put16(b + 2, 0xD9CA);
    b[4] = 0x10; b[5] = 0xF0; b[6] = 0x8F; b[7] = 0x00;
    for (int k = 0; k < 128; k++)
        b[8 + k] = (uint8_t)((k & 15) | ((15 - (k & 15)) << 4));
    const expect_t ex[] = {
        { 35, -32.5f },    /* i1 (1): nibble 3 -> -65: 0.5 * -65 */
        { 82, -1104.0f },  /* i2 (-32): high nibble 13 -> 69: -16 * 69 */
        { 111, 1751.5f },  /* i3 (31): nibble 15 -> 113: 15.5 * 113 */
        { 159, 63.5f },    /* i4 (-1): nibble 0 -> -127: -0.5 * -127 */
        { 168, 4.0f },     /* i5 (8): nibble 8 -> 1: 4 * 1 */
        { 212, -304.0f },  /* i6 (-16): high nibble 11 -> 38: -8 * 38 */
        { 255, -1016.0f }, /* i7 (16): nibble 0 -> -127: 8 * -127 */
        { 31, 0.0f },      /* i0 (0) */
    };
    check_block(SI_TYPE_IQ4_XS, b, ex, sizeof ex / sizeof *ex);
}
END_TEST

TCase *quant_known_tcase(void)
{
    TCase *tc = tcase_create("known");
    tcase_add_test(tc, test_known_plain);
    tcase_add_test(tc, test_known_q4_0);
    tcase_add_test(tc, test_known_q4_1);
    tcase_add_test(tc, test_known_q5_0);
    tcase_add_test(tc, test_known_q5_1);
    tcase_add_test(tc, test_known_q8_0);
    tcase_add_test(tc, test_known_q2_k);
    tcase_add_test(tc, test_known_q3_k);
    tcase_add_test(tc, test_known_q4_k);
    tcase_add_test(tc, test_known_q5_k);
    tcase_add_test(tc, test_known_q6_k);
    tcase_add_test(tc, test_known_iq4_nl);
    tcase_add_test(tc, test_known_iq4_xs);
    return tc;
}
