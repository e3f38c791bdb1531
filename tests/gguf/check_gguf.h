/* tests/gguf/check_gguf.h — shared helpers of the GGUF tests (check_gguf.c
 * holds main, the writer, getter, real-file, corpus and speed tests;
 * check_gguf_bad.c the malformed-input tests). */
#ifndef SI_TESTS_CHECK_GGUF_H
#define SI_TESTS_CHECK_GGUF_H

#include <check.h>

#include "gguf.h"
#include "gguf_bytes.h"

/* Opens a copy of b (exactly b->len bytes, so ASan sees any overread) as
 * "bad.gguf"; asserts status `code` and that the message contains `frag`
 * and starts with "bad.gguf: ".  Returns nothing: failures abort the test. */
void gguf_expect_refused(const gb *b, int code, const char *frag, int line);
#define REFUSED(b, code, frag) gguf_expect_refused((b), (code), (frag), __LINE__)

/* Opens a copy of b as "ok.gguf", asserts success and runs the fuzz walker
 * over it.  The caller closes *out (out may be NULL: closed here). */
void gguf_expect_accepted(const gb *b, si_gguf **out, void **copy, int line);
#define ACCEPTED(b, out, copy) gguf_expect_accepted((b), (out), (copy), __LINE__)

/* The fuzz target (tests/fuzz/fuzz_gguf.c); aborts when an invariant breaks. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

TCase *gguf_tcase_malformed(void);
TCase *gguf_tcase_truncated(void);
TCase *gguf_tcase_nested(void);

#endif
