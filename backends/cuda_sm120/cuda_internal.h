/* backends/cuda_sm120/cuda_internal.h — shared between the C ops table and
 * the .cu translation units.  Only plain C types cross this header. */
#ifndef SI_CUDA_INTERNAL_H
#define SI_CUDA_INTERNAL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launches a one-block kernel that writes `n` (<= 256) words of a known
 * pattern into dev and waits.  0 on success, else the cudaError_t value.
 * Used at open() to prove the fatbin carries code for this device (a
 * missing SM target would otherwise surface later, at the first real
 * kernel, as "no kernel image is available"). */
int si_cuda_selftest_launch(unsigned *dev, int n);

#ifdef __cplusplus
}
#endif
#endif
