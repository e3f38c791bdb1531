// backends/cuda_sm120/cuda_ptx.cuh — the inline PTX of the tensor-core
// kernels: the int8 GEMMs (cuda_mma.cu, cuda_mma2.cu, cuda_w8.cu) and the
// f16 attention (cuda_attn_fa.cu, cuda_attn_mma.cu; cp.async also
// cuda_attn_gqa.cu): mma.sync, ldmatrix, cp.async.  Operands as the PTX ISA
// gives them; tests/cuda/emu/ptx_emu.h defines the same names on the host
// (the emulator harnesses include it in place of this header).
#ifndef SI_CUDA_PTX_CUH
#define SI_CUDA_PTX_CUH

#include <stdint.h>

// D = A B (C = 0).
__device__ __forceinline__ void mma_k32(int c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

__device__ __forceinline__ void mma_k16(int c[4], uint32_t a0, uint32_t a1, uint32_t b0)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// D = A B + C with every C element = c0 (the int32 sum wraps).
__device__ __forceinline__ void mma_k32c(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, int c0)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0));
}

__device__ __forceinline__ void mma_k16c(int d[4], uint32_t a0, uint32_t a1, uint32_t b0, int c0)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%7,%7,%7,%7};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(c0));
}

// c += A(16x16 f16, row) . B(16x8 f16, col), f32
__device__ __forceinline__ void mma_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x rounded to tf32 (10 mantissa bits, to nearest, ties away from zero):
// the A/B register of mma_tf32 (the tensor cores would otherwise drop the
// low 13 bits, a truncation)
__device__ __forceinline__ uint32_t cvt_tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c += A(16x8 tf32, row) . B(8x8 tf32, col), f32 (sm_80+)
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i
// (s: a shared-memory address, smem_u32), as they are or transposed
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t s)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], uint32_t s)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *smem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void cp_async16(void *smem, const void *g)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g));
}

__device__ __forceinline__ void cp_async8(void *smem, const void *g)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(g));
}

__device__ __forceinline__ void cp_async4(void *smem, const void *g)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(g));
}

// Into L2 only: no register, nothing to wait for.
__device__ __forceinline__ void prefetch_l2(const void *g) { asm volatile("prefetch.global.L2 [%0];" ::"l"(g)); }

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait_group()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// D = A B + D: the int32 sums carried from the previous k-step (wrapping).
__device__ __forceinline__ void mma_k32acc(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- Hopper's warpgroup MMA (cuda_w8wg.cu; moe_grouped_i8's moe_i8_wg.cu),
// sm_90a code only -------------------------------------------------------------
// nvcc defines __CUDA_ARCH_FEAT_SM90_ALL when it compiles for sm_90a, the
// only target that has wgmma; every other pass (sm_90, sm_120, the host)
// sees no wrappers and the kernel compiles to nothing there.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SI_HAVE_WGMMA 1

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Shared memory written through the generic proxy (cp.async, st.shared)
// made visible to the async proxy that wgmma reads it through.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// mbarriers in shared memory (s: smem_u32 address, 8-byte aligned)
__device__ __forceinline__ void mbar_init(uint32_t s, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(s), "r"(count) : "memory");
}
// the inits visible to the other threads (before their barrier)
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(uint32_t s)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(s) : "memory");
}
// Spins until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t s, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nW8WG_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra W8WG_WAIT;\n}" ::"r"(s),
                 "r"(parity)
                 : "memory");
}
// An arrive on the mbarrier once every cp.async this thread issued before
// has landed (counted as this thread's arrival: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t s)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(s) : "memory");
}

// The warpgroup's registers a thread (setmaxnreg): the producer's down to
// WG_REGS_PRODUCER, the consumers' up to WG_REGS_CONSUMER.  An increase
// waits until the block's own pool has the registers, and that pool is
// what the block started with: 384 x 168 (65536 / 384 rounded down to 8,
// under __launch_bounds__(384, 1)), not the SM's 64 K.  Asking for more
// than the producer gives back hangs the consumers (80 / 216 did, on the
// H200); the producer's unrolled copies spill below 80.
#define WG_REGS_PRODUCER 80
#define WG_REGS_CONSUMER 208
static_assert(128 * WG_REGS_PRODUCER + 256 * WG_REGS_CONSUMER <= 384 * 168, "setmaxnreg: more than the block's pool");
#define WG_STR_(x) #x
#define WG_STR(x)  WG_STR_(x)
__device__ __forceinline__ void wg_regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 " WG_STR(WG_REGS_PRODUCER) ";");
}
__device__ __forceinline__ void wg_regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " WG_STR(WG_REGS_CONSUMER) ";");
}
// The same to N registers, for a kernel whose block's pool is another
// (moe_i8_wg.cu: two blocks an SM, 384 x 80); the caller checks its N
// against its own pool, as the static_assert above does.
template <int N> __device__ __forceinline__ void wg_regs_dec_to()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void wg_regs_inc_to()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// Named barriers (not 0, __syncthreads'): bar.sync waits until n threads
// (a multiple of 32) have arrived on barrier id, counting itself;
// bar.arrive counts this thread without waiting.
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

// D[64 x 128] += A[64 x 32] B[128 x 32]^T, s8 x s8 -> s32 (wrapping), A and
// B from descriptors.  d: this thread's 64 elements, element 4j + e at row
// 16 (warp % 4) + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2.
__device__ __forceinline__ void wg_mma_s8_n128(int (&d)[64], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1;"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
                   "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]),
                   "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]),
                   "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]),
                   "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]),
                   "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]),
                   "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]),
                   "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
                   "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
                 : "l"(da), "l"(db));
}

// D[64 x 64] += A[64 x 32] B[64 x 32]^T (the moe_grouped_i8 plugin's
// 64-token tiles, moe_i8_wg.cu): n128's fragment cut to its first 64
// columns, element 4j + e (j < 8) at row 16 (warp % 4) + lane / 4 + 8 (e /
// 2), column 8 j + 2 (lane % 4) + e % 2.
__device__ __forceinline__ void wg_mma_s8_n64(int (&d)[32], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1;"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
                   "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]),
                   "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]),
                   "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]),
                   "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "l"(da), "l"(db));
}
#endif

#endif
