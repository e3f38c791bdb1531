// backends/cuda_sm120/cuda_cluster.cuh — what a kernel that may run as
// thread-block clusters along x (sm_90+) asks of its block: its thread
// index, block barrier and dynamic shared memory, its rank in the cluster
// and the cluster's index (a block launched without a cluster attribute
// is a cluster of one: rank 0, index blockIdx.x), the barrier of all the
// cluster's threads and a float of another block's shared memory
// (distributed shared memory).  Users: cuda_gdn_rows.cu's fused GDN
// decode, cuda_gemvx.cu's gx_kernel.  The emulator harnesses put
// tests/cuda/emu/cluster_emu.h in place of this header (a cluster run as
// one emulated block), so a kernel goes through these and nothing else.
#ifndef SI_CUDA_CLUSTER_CUH
#define SI_CUDA_CLUSTER_CUH

extern __shared__ __align__(16) float cl_sm[];
__device__ __forceinline__ float *cl_smem() { return cl_sm; }
__device__ __forceinline__ int cl_tid() { return (int)threadIdx.x; }
__device__ __forceinline__ void cl_sync() { __syncthreads(); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ int cl_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
}
__device__ __forceinline__ int cl_cluster()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return (int)r;
}
// Every thread of every block of the cluster; arrive releases this
// thread's writes (shared and global), wait acquires everyone's.
__device__ __forceinline__ void cl_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
// *p of block `rank` of the cluster (p: this block's shared memory).
__device__ __forceinline__ float cl_remote(const float *p, int rank)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned ra;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}
#else
// (no clusters below sm_90: the launchers send none there)
__device__ __forceinline__ int cl_rank() { return 0; }
__device__ __forceinline__ int cl_cluster() { return (int)blockIdx.x; }
__device__ __forceinline__ void cl_cluster_sync() { __trap(); }
__device__ __forceinline__ float cl_remote(const float *p, int) { return *p; }
#endif

#endif
