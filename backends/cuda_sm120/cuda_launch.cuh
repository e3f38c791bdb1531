// backends/cuda_sm120/cuda_launch.cuh — the launch of the decode step's
// kernels with programmatic dependent launch (knob pdl): the attribute
// lets a kernel be resident while the previous one in the stream drains;
// the kernel itself waits for it (cu_pdl_enter, cuda_quant.cuh, its first
// statement: only kernels that call it may be launched this way).  In a
// captured graph the dependency becomes a programmatic edge.  What keeps it
// exact: every kernel launched here calls cu_pdl_enter before its first
// global access; one that did not could finish before its predecessor, and
// the next kernel's wait (on it) would return too early.  nvcc only
// (tests/cuda/emu/cuda_runtime.h has the host emulation's cu_launch).
#ifndef SI_CUDA_LAUNCH_CUH
#define SI_CUDA_LAUNCH_CUH
#ifdef __CUDACC__
#include <cuda_runtime.h>

#include "cuda_internal.h"

template <typename... P, typename... A>
static inline cudaError_t cu_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    if (si_cu_pdl_get()) {
        cfg.attrs = at;
        cfg.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
}

// cu_launch with thread-block clusters of cl blocks along x (sm_90+;
// grid.x a multiple of cl); cl 1: cu_launch.
template <typename... P, typename... A>
static inline cudaError_t cu_launch_cluster(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                            int cl, A... args)
{
    if (cl <= 1)
        return cu_launch(k, grid, block, smem, s, args...);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = si_cu_pdl_get() ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
}
#endif
#endif
