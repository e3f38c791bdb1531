/* tests/cpu/cpu_test_util.h — harness shared by the cpu backend tests.
 *
 * The tests dlopen the BUILT plugin ($SI_TOP_BUILDDIR/backends/cpu/.libs/
 * cpu.so) and talk to it only through the ABI, with a host table of their
 * own built from the core's reference functions (si_dequant, si_quant ...)
 * and a tiny knob table for cfg_get.  Every expected value comes from
 * naive double-precision code in the tests, written independently of the
 * plugin.
 */
#ifndef SI_TESTS_CPU_UTIL_H
#define SI_TESTS_CPU_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <sparkinfer/plugin.h>

#define CT_MAX_KNOBS 8

typedef struct ct_backend {
    void                        *dl;
    const si_plugin             *plugin;
    const struct si_backend_ops *ops;
    si_host                      host;
    si_backend                  *b;
    /* knobs: "section.key" -> value, read by the host's cfg_get */
    char                         knob_sec[CT_MAX_KNOBS][32];
    char                         knob_key[CT_MAX_KNOBS][32];
    char                         knob_val[CT_MAX_KNOBS][32];
    int                          n_knobs;
    /* buffers to free at close */
    si_buf                      *bufs[256];
    int                          n_bufs;
    void                        *blobs[256];   /* weight bytes lent zero-copy */
    int                          n_blobs;
    char                         last_log[512];
} ct_backend;

/* Loads the plugin and fills the host (no backend opened yet). */
void ct_load(ct_backend *c);
/* Adds knob `section.key = value` (before ct_open). */
void ct_knob(ct_backend *c, const char *section, const char *key, const char *value);
/* ct_load + knobs "k=v,k=v" in [backend.cpu] + open; asserts success. */
void ct_open(ct_backend *c, const char *knobs);
/* Opens with the knobs set so far; returns the status (err filled). */
int  ct_try_open(ct_backend *c, si_err *err);
void ct_close(ct_backend *c);

/* Random numbers: seeded once per process from SI_TEST_SEED or the clock
 * (printed, so a failure can be replayed). */
uint64_t ct_seed(void);
double   ct_uniform(double lo, double hi);
void     ct_fill(float *x, int64_t n, double lo, double hi);

/* Tensors.  ct_f32 uploads `data` (NULL: NaN fill) as a [ne0, ne1] F32
 * tensor with row stride `stride` floats (0: ne0). */
si_tensor ct_f32(ct_backend *c, const float *data, int64_t ne0, int64_t ne1, int64_t stride);
/* NaN-fills the whole extent of t (poison before every exec). */
void ct_poison(ct_backend *c, const si_tensor *t);
/* Downloads rows of an F32 tensor into out[ne1][ne0]. */
void ct_get(ct_backend *c, const si_tensor *t, float *out);
si_tensor ct_i32(ct_backend *c, const int32_t *ids, int64_t n);

/* GGUF bytes of n values of `type` (malloc'd): quantised from src with
 * si_quant, or random valid blocks for types without a quantiser.  deq
 * (optional) receives the core's dequantisation: the exact weights the
 * plugin must compute with. */
uint8_t  *ct_wbytes(uint32_t type, const float *src, int64_t n, float *deq);
/* Those bytes as a tensor through weight_load (zero copy: they must
 * outlive the tensor). */
si_tensor ct_wload(ct_backend *c, uint32_t type, const uint8_t *bytes, int64_t ne0, int64_t ne1, int64_t ne2);
/* The same through buf_alloc + upload, rows `row_pad` bytes apart beyond
 * their size (a strided weight). */
si_tensor ct_wupload(ct_backend *c, uint32_t type, const uint8_t *bytes, int64_t ne0, int64_t ne1, uint64_t row_pad);
/* ct_wbytes + ct_wload; the bytes are freed by ct_close. */
si_tensor ct_weight(ct_backend *c, uint32_t type, const float *src, int64_t ne0, int64_t ne1, int64_t ne2,
                    float *deq);

/* Runs one op; returns the status. */
int ct_exec(ct_backend *c, const si_op *op, si_err *err);

/* Compares got[i] with want[i]: |got - want| <= tol[i] (tol NULL: atol +
 * rtol*|want|).  NaN never passes.  Reports the worst index. */
void ct_expect_close(const char *what, const float *got, const double *want, const double *tol, int64_t n,
                     double atol, double rtol);

#endif /* SI_TESTS_CPU_UTIL_H */
