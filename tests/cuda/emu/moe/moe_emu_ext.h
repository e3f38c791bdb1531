// tests/cuda/emu/moe/moe_emu_ext.h — what the moe_grouped_i8 kernels use on
// top of ../cuda_runtime.h: __ldg (alignment-checked: a misaligned global
// load faults on the GPU, so it aborts here), byte-wise __vsub4, the _rn
// conversions, shared atomicAdd (fibers are cooperative: a plain add is
// atomic), launches with their configuration checked against the limits
// of the hardware, and mma.sync.m16n8k32.row.col.s32.s8.s8.s32 emulated as
// a warp collective from the PTX ISA's fragment tables (not from the
// kernel's comments):
//   groupID g = lane >> 2, threadID_in_group t = lane % 4;
//   A elements a_i, i = 0..15, 4 per .b32 register, low byte = lowest i:
//     row = g for i < 4 or 8 <= i < 12, else g + 8;
//     col = 4t + (i & 3) for i < 8, else 4t + (i & 3) + 16;
//   B elements b_i, i = 0..7: row (k) = 4t + (i & 3) (+16 for i >= 4), col = g;
//   C/D c_i, i = 0..3: row = g (i < 2) or g + 8, col = 2t + (i & 1).
// The w8 GEMMs (moe_i8_w8.cu) take their PTX from ../ptx_emu.h (as
// run-w8-emu.sh does for cuda_w8.cu), __any_sync as an OR over the
// shuffles' butterfly (every lane must reach it, as on the device), and
// cudaFuncSetAttribute's shared-memory opt-in, recorded for the launch
// check (emu_smem_optin).
#pragma once
#include "../cuda_runtime.h"
#include "cuda_runtime_api.h"
static inline int __any_sync(unsigned m, int p)
{ for (int o = 16; o > 0; o >>= 1) p |= __shfl_xor_sync(m, p, o); return p != 0; }
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
void emu_smem_optin(int bytes);
template <class K> static inline cudaError_t cudaFuncSetAttribute(K *, int attr, int v)
{ if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) emu_smem_optin(v); return cudaSuccess; }
// The device's opt-in shared memory a block, as ../cuda_runtime.h's
// (EMU_SMEM_OPTIN, default 227 KiB) over this directory's runtime API.
enum { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return 0; }
static inline cudaError_t cudaDeviceGetAttribute(int *v, int attr, int)
{
    const char *e = getenv("EMU_SMEM_OPTIN");
    *v = attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? (e ? atoi(e) : 232448) : 0;
    return 0;
}
static inline int atomicAdd(int *p, int v) { int o = *p; *p = v + o; return o; }
void emu_launch_cfg(dim3 grid, dim3 block, size_t smem, cudaStream_t st, const std::function<void()> &body);
void emu_mma_s8(int c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1);
