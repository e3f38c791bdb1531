// tests/cuda/emu/cluster_emu.h — host emulation of the thread-block
// cluster primitives of backends/cuda_sm120/cuda_cluster.cuh (the cl_*
// functions of cuda_gdn_rows.cu's fused GDN decode and cuda_gemvx.cu's
// gx_kernel; run-gdn-emu.sh and run-gmm-emu.sh include this header in its
// place), and of cuda_launch.cuh's cu_launch_cluster.  emu.cc runs one CUDA block at a time, so a whole cluster runs
// as ONE emulated block of C x cl_emu::threads threads: thread T is thread
// T % threads of the cluster's block T / threads (its rank), the emulated
// blockIdx.x is the cluster's index.  Then
//   - the cluster barrier is the emulated block's __syncthreads (all
//     threads of all blocks, as barrier.cluster.arrive + wait);
//   - a block's own barrier (cl_sync) is a counter over its threads that
//     spins (emu::spin) until all of them arrived, so the other blocks of
//     the cluster keep running meanwhile, as on the GPU;
//   - each block has its own slice (cl_emu::stride floats) of the dynamic
//     shared memory, poisoned by emu.cc; distributed shared memory (mapa +
//     ld.shared::cluster) reads the same offset in another block's slice,
//     checked to lie inside it.
// Block skew (cl_emu::order): emu.cc wakes a spinning thread only when no
// other can run, which keeps the blocks of a cluster nearly in step, so a
// missing cluster barrier would rarely show.  With order 1 (2) block r
// starts only when block r - 1 (r + 1) has reached its first cluster
// barrier: everything a block does before that barrier runs before (after)
// the other blocks' share, so a block that reads another's shared memory
// before the barrier reads poison, and one that writes global memory
// another block reads before the barrier changes that block's input.
// Not modelled: a block's shared memory going away when it exits (what the
// last cluster barrier is for).
#pragma once
#include "cuda_runtime.h"

namespace cl_emu {
inline int threads = 128;          // threads of one cluster block (the kernel's GF_THREADS)
inline int cluster = 1;            // blocks a cluster
inline size_t stride = 0;          // floats of shared memory a block
inline int cnt[64], gen[64];       // cl_sync's counter and generation, per rank
inline int order = 0;              // block skew: 0 none, 1 rank order, 2 reverse
inline int progress[64];           // per rank: threads that reached a cluster barrier
inline long blk = -1;              // the emulated block progress[] counts for (-1: reset)
}

static inline int cl_tid() { return (int)threadIdx.x % cl_emu::threads; }
static inline int cl_rank_of() { return (int)threadIdx.x / cl_emu::threads; }
static inline int cl_cluster() { return (int)blockIdx.x; }
static inline float *cl_smem() { return emu::dyn_smem() + (size_t)cl_rank_of() * cl_emu::stride; }
static inline void cl_cluster_sync()
{
    cl_emu::progress[cl_rank_of()]++;
    __syncthreads();
}

// The kernel asks for its rank once, first: where the block skew holds a
// block back.
static inline int cl_rank()
{
    const int r = cl_rank_of();
    const long b = (long)blockIdx.y * 65536 + blockIdx.x;
    if (cl_emu::blk != b) {
        cl_emu::blk = b;
        memset(cl_emu::progress, 0, sizeof cl_emu::progress);
    }
    const int prev = cl_emu::order == 1 ? r - 1 : cl_emu::order == 2 ? r + 1 : -1;
    if (prev >= 0 && prev < cl_emu::cluster)
        for (long n = 0; cl_emu::progress[prev] < cl_emu::threads; n++) {
            if (n > 10000000) {
                fprintf(stderr, "emu: cluster block %d: block %d never reaches a cluster barrier\n", r, prev);
                abort();
            }
            emu::spin();
        }
    return r;
}

static inline void cl_sync()
{
    const int r = cl_rank_of(), g0 = cl_emu::gen[r];
    if (++cl_emu::cnt[r] == cl_emu::threads) {
        cl_emu::cnt[r] = 0;
        cl_emu::gen[r]++;
        return;
    }
    for (long n = 0; cl_emu::gen[r] == g0; n++) {
        if (n > 10000000) {
            fprintf(stderr, "emu: cluster block %d: block barrier never completes (%d of %d threads)\n", r,
                    cl_emu::cnt[r], cl_emu::threads);
            abort();
        }
        emu::spin();
    }
}

static inline float cl_remote(const float *p, int rank)
{
    const ptrdiff_t off = p - cl_smem();
    if (off < 0 || (size_t)off >= cl_emu::stride || rank < 0 || rank >= cl_emu::cluster) {
        fprintf(stderr, "emu: cl_remote: offset %td / rank %d outside the cluster's shared memory\n", off, rank);
        abort();
    }
    return emu::dyn_smem()[(size_t)rank * cl_emu::stride + (size_t)off];
}

// cuda_launch.cuh's cu_launch_cluster (cuda_gemvx.cu's gx_kernel): grid.x
// / cl clusters, each one emulated block of cl x block.x threads with cl
// slices of smem bytes (rounded up to 256); cl 1 too, so a kernel written
// with these primitives runs the same either way.
template <typename... P, typename... A>
static inline cudaError_t cu_launch_cluster(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                            int cl, A... args)
{
    if (cl < 1 || grid.x % (unsigned)cl != 0 || block.y != 1 || block.z != 1) {
        fprintf(stderr, "emu: cu_launch_cluster: grid %u not a multiple of the cluster %d\n", grid.x, cl);
        abort();
    }
    cl_emu::threads = (int)block.x;
    cl_emu::cluster = cl;
    cl_emu::stride = ((smem + 255) & ~(size_t)255) / sizeof(float);
    cl_emu::blk = -1;
    emu_launch_s(dim3(grid.x / (unsigned)cl, grid.y, grid.z), dim3(block.x * (unsigned)cl),
                 (size_t)cl * cl_emu::stride * sizeof(float), s, [&] { k(static_cast<P>(args)...); });
    return cudaSuccess;
}
