/* tests/quant/quant_test.h — helpers shared by the "quant" suite's files. */
#ifndef SI_TESTS_QUANT_TEST_H
#define SI_TESTS_QUANT_TEST_H

#include <check.h>
#include <stdint.h>

/* ck_assert_* reports every passing check to the runner (a pipe write in
 * fork mode); loops over thousands of elements use this instead. */
#define REQUIRE(cond, ...)                \
    do {                                  \
        if (!(cond))                      \
            ck_abort_msg(__VA_ARGS__);    \
    } while (0)

/* Stores v little-endian, as block headers hold their f16/u16 fields. */
static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* tests/quant/known_blocks.c: hand-built blocks of every dequant type. */
TCase *quant_known_tcase(void);

#endif /* SI_TESTS_QUANT_TEST_H */
