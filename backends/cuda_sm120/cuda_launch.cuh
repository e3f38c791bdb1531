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

// With thread-block clusters of cl blocks along x where cl > 1 (sm_90+;
// grid.x a multiple of cl; cluster_emu.h has the host emulation's).
// coop: a cooperative launch, which the driver starts only with every
// block of the grid resident at once (or refuses: too large a grid for
// the SMs this context may use), for kernels with grid-wide barriers.
template <typename... P, typename... A>
static inline cudaError_t cu_launch_attrs(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                          int cl, bool coop, A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[3];
    unsigned n = 0;
    if (coop) {
        at[n].id = cudaLaunchAttributeCooperative;
        at[n].val.cooperative = 1;
        n++;
    }
    if (cl > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = (unsigned)cl;
        at[n].val.clusterDim.y = 1;
        at[n].val.clusterDim.z = 1;
        n++;
    }
    if (si_cu_pdl_get()) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
}

template <typename... P, typename... A>
static inline cudaError_t cu_launch_cluster(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                            int cl, A... args)
{
    return cu_launch_attrs(k, grid, block, smem, s, cl, false, args...);
}
template <typename... P, typename... A>
static inline cudaError_t cu_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A... args)
{
    return cu_launch_attrs(k, grid, block, smem, s, 1, false, args...);
}
template <typename... P, typename... A>
static inline cudaError_t cu_launch_coop(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                         A... args)
{
    return cu_launch_attrs(k, grid, block, smem, s, 1, true, args...);
}
#endif
#endif
