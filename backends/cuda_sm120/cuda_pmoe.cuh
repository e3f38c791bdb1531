// backends/cuda_sm120/cuda_pmoe.cuh — knob moe_persist: one token's MOE
// (router, top-K, the routed and shared experts' gate/up, SwiGLU, downs,
// combine) in ONE launch.  Part of cuda_gemvq.cu's translation unit (it is
// included at that file's end): it runs gq_load / gq_dot / gs_dot, which
// without -rdc only that unit can call.
//
// Why: at one token the in-line path is six launches a layer (router
// product, route, shared gate/up, routed gate/up + SwiGLU, routed down,
// shared down + combine), ~26 us of the 35b-a3b's chain for ~17 MB of
// weights (~6 us at the HBM's rate): every launch is a ramp, a drain and a
// link of ~1.3 us.  Here one block an SM (every block resident at once)
// runs three phases apart by two grid-wide barriers (an L2 counter each):
//  1. the router's E rows and the shared gate row, a quarter block a row
//     (mm_kernel<F32, 1, 4>'s order: the same logits), the rows spread
//     over every block (2 a block at E = 256 on 132 SMs); the block's
//     static weights (router rows, shared expert rows) asked of the L2
//     before the programmatic-launch wait;
//  2. every block routes the token itself (route_token over the logits,
//     no launch for it) on its last warp while the other warps copy h's
//     int8 copy into shared memory and make the block's share of the F
//     shared gate/up index pairs (gs_kernel's or the regrouped
//     gq_kernel's sums) beside it, then the block makes its share of the
//     K * F routed index pairs (gu_kernel's sums); each pair's SwiGLU
//     value silu(gate) * up (swiglu_q_kernel's) goes into gu's gate half;
//  3. every block makes the whole SwiGLU int8 copy ((K + 1) * F values)
//     in its shared memory, then owns rows of the output: each row's K
//     routed down sums (gqe_kernel's lanes and shuffles at 512-wide
//     rows), its shared down sum (mmq_kernel's 8 lanes) and their
//     combine (cb_sum, sdc_kernel's) in one warp, so no combine pass and
//     no count of finished blocks.
// (moe_persist_prof, H100 35b-a3b, stop 51, with the shared pairs in
// phase 1 on the blocks the router left idle and the SwiGLU made in
// phase 3: a block spent 2.6 us in phase 1, 1.4 at barrier 1, 3.1 on the
// route, 6.6 on the routed pairs, 1.5 at barrier 2, 3.5 on the copy, 5.8
// on the downs: the shared pairs now hide under the route, phase 1 is
// balanced, the copy reads half as much and computes no exponentials.)
// The phases are functions of their own so that the host emulation
// (tests/cuda/emu/pmoe_emu.cc) runs them as three launches.
#ifndef SI_CUDA_PMOE_CUH
#define SI_CUDA_PMOE_CUH

#include "cuda_combine.cuh"
#include "cuda_route.cuh"

#define PM_WARPS 16
#define PM_F 512    // the experts' width it takes (the downs' lanes: gqe's BS 2)

// Grid-wide barrier: every block adds to *bar, block 0 so much that the
// total of one barrier is 2^31, so the top bit flips once per barrier and
// the word is back where it was after every second one (a launch has two:
// a graph replays it as captured).  Only correct with every block of the
// grid resident (one block an SM, the grid no larger than the SMs): the
// launch is cooperative (the driver refuses a grid it cannot hold at
// once); should blocks still be missing, the launch traps after ~2^32
// cycles (a second or two) instead of hanging, and the backend reports
// the failed launch.
// The arrival is a release at GPU scope and the polling acquires (the
// PTX memory model's pairing: the block's writes, ordered before thread
// 0's arrival by the block barrier, are visible to every block whose
// acquire reads a value at or after it), where a full __threadfence before
// the add and after the wait cost two fences a barrier.  The host
// emulation runs the phases as separate launches: plain operations there.
__device__ __forceinline__ unsigned pm_arrive(unsigned *bar, unsigned add)
{
#ifdef __CUDA_ARCH__
    unsigned old;
    asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(bar), "r"(add) : "memory");
    return old;
#else
    __threadfence();
    return atomicAdd(bar, add);
#endif
}

__device__ __forceinline__ unsigned pm_poll(const unsigned *bar)
{
#ifdef __CUDA_ARCH__
    unsigned v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
    return v;
#else
    return *(const volatile unsigned *)bar;
#endif
}

__device__ __forceinline__ void pm_grid_sync(unsigned *bar)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        const unsigned old = pm_arrive(bar, add);
#ifdef __CUDA_ARCH__
        const long long t0 = clock64();
#endif
        while (((old ^ pm_poll(bar)) & 0x80000000u) == 0) {
#ifdef __CUDA_ARCH__
            if (clock64() - t0 > (1ll << 32))
                __trap();
#endif
        }
    }
    __syncthreads();
}

// Asks this SM's L1 for the 128-byte lines of bytes [p, p + n) without
// waiting (read-only data: weights).  A no-op on the host emulation.
__device__ __forceinline__ void pm_prefetch_l1(const void *p, uint64_t n)
{
#ifdef __CUDA_ARCH__
    for (uintptr_t o = (uintptr_t)p & ~(uintptr_t)127; o < (uintptr_t)p + n; o += 128)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(o));
#else
    (void)p;
    (void)n;
#endif
}

// bar.sync on named barrier id (not 0: __syncthreads') for n threads
// (cuda_ptx.cuh's named_sync is sm_90a's only; this unit also builds for
// sm_120); the host emulation's named_sync under g++.
__device__ __forceinline__ void pm_named_sync(int id, int n)
{
#if defined(__CUDA_ARCH__)
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
#elif defined(__CUDACC__)
    (void)id;   // (nvcc's host pass: never run)
    (void)n;
#else
    named_sync(id, n);
#endif
}

// [lo, hi) of n items for block b of g, in order.
__device__ __forceinline__ void pm_share(int n, int b, int g, int &lo, int &hi)
{
    lo = (int)((int64_t)n * b / g);
    hi = (int)((int64_t)n * (b + 1) / g);
}

// Knob moe_persist_prof (measurement): thread 0 of each block notes the
// SM clock at PM_PROF_N - 1 points of the launch (ck[i]); at the end the
// block adds each interval to p.prof[i] and 1 to p.prof[PM_PROF_N - 1],
// so the backend can say at close how long a block spends, on average,
// waiting for the launch before, in each phase and at each barrier, in
// the real chain (ncu runs a kernel alone, without that overlap).
#define PM_PROF_N CU_PM_PROF_N   // intervals 0..7 and the count
__device__ __forceinline__ void pm_stamp(const cu_pmoe &p, long long *ck, int i)
{
#ifdef __CUDA_ARCH__
    if (p.prof != NULL && threadIdx.x == 0)
        ck[i] = clock64();
#endif
}

__device__ __forceinline__ void pm_prof_add(const cu_pmoe &p, const long long *ck)
{
#ifdef __CUDA_ARCH__
    if (p.prof != NULL && threadIdx.x == 0) {
        for (int i = 0; i + 1 < PM_PROF_N; i++)
            atomicAdd(p.prof + i, (unsigned long long)(ck[i + 1] - ck[i]));
        atomicAdd(p.prof + PM_PROF_N - 1, 1ull);
    }
#endif
}

// Phase 1's split: the router's E + 1 rows take a quarter block each,
// rpb quarters of every block (rows b rpb .. b rpb + rpb - 1 of a pass),
// so that the rows spread over every block (2 a block at 257 rows on
// 132) rather than filling the first blocks' four quarters.
__device__ __forceinline__ int pm_rpb(const cu_pmoe &p)
{
    const int g = (int)gridDim.x, q = (p.E + 1 + g - 1) / g;
    return q < 4 ? q : 4;
}

// The SwiGLU value of an index pair (swiglu_q_kernel's arithmetic).
__device__ __forceinline__ float pm_swiglu(float g, float u) { return __fmul_rn(cu_silu(g), u); }

// A shared gate row and its up row (Q8_0, H wide) against h's copy in
// xsm, both rows' words loaded before either is multiplied: gs_kernel's
// sums (plain rows), or gq_kernel's on the regrouped copies (the same
// bits, cuda_gemvq.cu's q8_pair_dot).
__device__ __forceinline__ void pm_q8_pair(const cu_pmoe &p, const uint8_t *rg, const uint8_t *ru, const uint4 *xsm,
                                           float &g, float &u)
{
    const int lane = threadIdx.x & 31, pp = lane & 3, bl = lane >> 2, steps = p.H / 2048;
    float ag = 0.0f, au = 0.0f;
    for (int st = 0; st < steps; st++) {
        if (p.s_rg) {
            const size_t o = (size_t)st * GS_UNIT + (size_t)bl * gq_traits<CU_TYPE_Q8R>::bytes;
            gq_part wg, wu;
            gq_ld<CU_TYPE_Q8R>(rg + o, pp, bl, wg);
            gq_ld<CU_TYPE_Q8R>(ru + o, pp, bl, wu);
            ag = gq_dot<CU_TYPE_Q8R, true>(wg, 8 * st + bl, pp, NULL, xsm, p.xd, NULL, ag);
            au = gq_dot<CU_TYPE_Q8R, true>(wu, 8 * st + bl, pp, NULL, xsm, p.xd, NULL, au);
        } else {
            uint32_t wg[17], wu[17];
            gs_words(rg + (size_t)st * GS_UNIT, lane, wg);
            gs_words(ru + (size_t)st * GS_UNIT, lane, wu);
            ag = gs_dot(wg, st, lane, xsm, p.xd, ag);
            au = gs_dot(wu, st, lane, xsm, p.xd, au);
        }
    }
    g = cu_warp_sum(ag);
    u = cu_warp_sum(au);
}

// Phase 1: logits[r] (r < E) and *gamma (r == E), a quarter block (4
// warps) a row: warp w of it takes 8-float groups 32 w + lane, + 128, ...,
// fmaf in element order, the warp sums, then the 4 in warp order.
__device__ __forceinline__ void pm_router(const cu_pmoe &p, long long *ck = NULL)
{
    __shared__ float part[PM_WARPS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, q = warp >> 2, w4 = warp & 3;
    const int rows = p.E + 1, rpb = pm_rpb(p), slots = rpb * (int)gridDim.x, n8 = p.H / 8;
    // (the block's static weights asked of the L2 first: its router rows,
    // the shared gate/up rows of phase 2 and the shared down rows of 3)
    if (lane == 0 && w4 == 0 && q < rpb) {
        for (int r = (int)blockIdx.x * rpb + q; r < rows; r += slots)
            cu_prefetch_l2(r < p.E ? p.wr + (int64_t)r * p.wr_stride : p.wsg, (uint64_t)p.H * 4);
    }
    if (threadIdx.x == 32) {
        int lo, hi;
        pm_share(p.F, (int)blockIdx.x, (int)gridDim.x, lo, hi);
        if (hi > lo) {
            cu_prefetch_l2(p.sg + (uint64_t)lo * p.s_rb, (uint64_t)(hi - lo) * p.s_rb);
            cu_prefetch_l2(p.su + (uint64_t)lo * p.s_rb, (uint64_t)(hi - lo) * p.s_rb);
        }
        pm_share(p.H, (int)blockIdx.x, (int)gridDim.x, lo, hi);
        if (hi > lo)
            cu_prefetch_l2(p.sd + (uint64_t)lo * p.sd_rb, (uint64_t)(hi - lo) * p.sd_rb);
    }
    cu_pdl_enter();   // (h and its copy come from the kernel before)
    pm_stamp(p, ck, 1);
    for (int r0 = 0; r0 < rows; r0 += slots) {   // (uniform: the barriers below)
        const int r = r0 + (int)blockIdx.x * rpb + q;
        float acc = 0.0f;
        if (q < rpb && r < rows) {
            const float *w = r < p.E ? p.wr + (int64_t)r * p.wr_stride : p.wsg;
#pragma unroll 4
            for (int g = 32 * w4 + lane; g < n8; g += 128) {
                float wv[8];
                cu_deq8<SI_TYPE_F32>((const uint8_t *)w, (int64_t)g * 8, wv);
                const float4 a = ((const float4 *)(p.h + 8 * g))[0], c = ((const float4 *)(p.h + 8 * g))[1];
                const float xv[8] = { a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w };
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc = fmaf(wv[j], xv[j], acc);
            }
        }
        const float s = cu_warp_sum(acc);
        if (lane == 0)
            part[warp] = s;
        __syncthreads();
        if (w4 == 0 && lane == 0 && q < rpb && r < rows) {
            float t = 0.0f;
#pragma unroll
            for (int k = 0; k < 4; k++)
                t += part[4 * q + k];
            if (r < p.E)
                p.logits[r] = t;
            else
                *p.gamma = t;
        }
        __syncthreads();   // (part is rewritten by the next rows)
    }
}

// Phase 2: the last warp routes the token (every block routes it; block
// 0 stores the picks) while the other warps copy h into shared memory
// (named barrier 1 among them) and make this block's shared index pairs
// [s0, s1) of F (a warp a pair; their rows were asked of the L2 before
// phase 1's wait), SwiGLU'd into gu's row K; one barrier for all; then
// this block's routed index pairs t of [0, K F) (expert slot t / F, index
// t % F: its gate row and its up row), warp w taking t0 + w, + 16, ..., a
// unit's weights loaded while the one before is multiplied, SwiGLU'd
// into gu ([K + 1][2F]: the gate half holds silu(gate) * up).
template <int T>
__device__ __forceinline__ void pm_gate_up(const cu_pmoe &p, long long *ck = NULL)
{
    uint4 *xsm = gq_dyn_smem();
    __shared__ int32_t s_sel[8];
    __shared__ float s_wts[8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, pp = lane & 3, bl = lane >> 2;
    const int F = p.F, K = p.K, steps = p.H / 2048;
    if (warp == PM_WARPS - 1) {
        route_token<8, true>(p.logits, p.E, K, s_sel, s_wts);   // (logits: other blocks')
        __syncwarp();
        if (blockIdx.x == 0 && lane < K) {
            p.sel[lane] = s_sel[lane];
            p.wts[lane] = s_wts[lane];
        }
    } else {
        const int nu = p.H >> 4, nt = 32 * (PM_WARPS - 1);
        for (int u = (int)threadIdx.x; u < nu; u += nt)
            xsm[gq_swz(u)] = __ldg((const uint4 *)p.xq + u);
        pm_named_sync(1, nt);   // (h's copy whole, among the warps that use it)
        int s0, s1;
        pm_share(F, (int)blockIdx.x, (int)gridDim.x, s0, s1);
        for (int idx = s0 + warp; idx < s1; idx += PM_WARPS - 1) {
            float g, u;
            pm_q8_pair(p, p.sg + (size_t)idx * p.s_rb, p.su + (size_t)idx * p.s_rb, xsm, g, u);
            if (lane == 0)
                p.gu[(size_t)K * 2 * F + idx] = pm_swiglu(g, u);
        }
    }
    __syncthreads();   // (the picks)
    pm_stamp(p, ck, 4);
    // this block's rows of phase 3, asked of the L2 now that the picks are known
    {
        int lo, hi;
        pm_share(p.H, (int)blockIdx.x, (int)gridDim.x, lo, hi);
        if (lane < K && lo + warp < hi)
            cu_prefetch_l2(p.wd + (size_t)s_sel[lane] * p.wd_eb + (size_t)(lo + warp) * p.wd_rb, p.wd_rb);
    }
    int t0, t1;
    pm_share(K * F, (int)blockIdx.x, (int)gridDim.x, t0, t1);
    const int nt = t1 - t0 > warp ? (t1 - t0 - warp + PM_WARPS - 1) / PM_WARPS : 0, units = nt * steps;
    const uint32_t SB = 8 * gq_traits<T>::bytes;   // bytes of a step of a row
    auto load = [&](int k, gq_part w[2]) {
        const int i = k / steps, st = k - i * steps, t = t0 + warp + PM_WARPS * i, kk = t / F;
        const size_t o = (size_t)s_sel[kk] * p.gu_eb + (size_t)(t - kk * F) * p.gu_rb + (size_t)st * SB +
                         (size_t)bl * gq_traits<T>::bytes;
        gq_load<T>(p.wg + o, pp, bl & 1, w[0]);
        gq_load<T>(p.wu + o, pp, bl & 1, w[1]);
    };
    gq_part cur[2], nxt[2];
    if (units > 0)
        load(0, cur);
    float ag = 0.0f, au = 0.0f;
    for (int k = 0; k < units; k++) {
        const int i = k / steps, st = k - i * steps;
        if (k + 1 < units)
            load(k + 1, nxt);
        ag = gq_dot<T, true>(cur[0], 8 * st + bl, pp, NULL, xsm, p.xd, p.xs, ag);
        au = gq_dot<T, true>(cur[1], 8 * st + bl, pp, NULL, xsm, p.xd, p.xs, au);
        cur[0] = nxt[0];
        cur[1] = nxt[1];
        if (st == steps - 1) {
            const float g = cu_warp_sum(ag), u = cu_warp_sum(au);
            const int t = t0 + warp + PM_WARPS * i, kk = t / F, idx = t - kk * F;
            if (lane == 0)
                p.gu[(size_t)kk * 2 * F + idx] = pm_swiglu(g, u);
            ag = au = 0.0f;
        }
    }
}

// Dynamic shared memory of phase 3 (and 2: h's copy, H <= its x part).
__host__ __device__ __forceinline__ size_t pm_smem(int H, int K)
{
    const size_t n = (size_t)(K + 1) * PM_F, x = (size_t)H > n ? (size_t)H : n;
    return x + 2 * (n / 32) * sizeof(float);
}

// Phase 3: the int8 copy of all K + 1 rows' SwiGLU values (made in
// phase 2; swiglu_q_kernel's bits; slot k's 512 values at xsm + 32 k, swizzled as gq_fill_x's; its scales
// and sums in shared memory too), then this block's output rows, a warp a
// row: lanes 8 s .. 8 s + 7 make slot s's and s + 4's routed down sums
// (gqe_kernel<T, 2, R>'s), lanes 0..7 the shared down sum (mmq_kernel<Q8_0,
// 1, U, false, 8>'s units in order), lane 0 the combine (sdc_kernel's
// cb_sum).
template <int T>
__device__ __forceinline__ void pm_down(const cu_pmoe &p, long long *ck = NULL)
{
    uint4 *xsm = gq_dyn_smem();
    __shared__ int32_t s_sel[8];
    __shared__ float s_wts[CB_K];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int F = PM_F, K = p.K, S = K + 1, nbk = F / 32, upk = F / 16;
    const int xu = (p.H > S * F ? p.H : S * F) / 16;   // (pm_smem's x part, in 16-byte units)
    float *qd = (float *)(xsm + xu), *qs = qd + S * nbk;
    // (the picks and their weights once: ncu put ~8% of the warp stalls
    // on the combine, lane 0 reading the K weights from the L2 each row)
    if ((int)threadIdx.x < K) {
        s_sel[threadIdx.x] = __ldcg(p.sel + threadIdx.x);
        s_wts[threadIdx.x] = __ldcg(p.wts + threadIdx.x);
    }
    // (this warp's first row's routed and shared down words asked of the
    // L1 before the copy, which they do not need: their latency under its
    // work; the routed ones were asked of the L2 in phase 2)
    {
        int h0, h1;
        pm_share(p.H, (int)blockIdx.x, (int)gridDim.x, h0, h1);
        if (lane < K && h0 + warp < h1)
            pm_prefetch_l1(p.wd + (size_t)__ldcg(p.sel + lane) * p.wd_eb + (size_t)(h0 + warp) * p.wd_rb, p.wd_rb);
        if (lane == 8 && h0 + warp < h1)
            pm_prefetch_l1(p.sd + (size_t)(h0 + warp) * p.sd_rb, (uint64_t)PM_F / 32 * 34);
    }
    // the copy in rms2_q8's chunks: thread c the 16 values 16 c .. 16 c + 15
    // of the S rows, a block of 32 on two lanes, so one shuffle passes its
    // sum on (ncu, H100: the copy made of cu_q8_block32's blocks, 9 a warp
    // in turn, each with 32 serial shuffles, held ~23% of this launch's
    // warp stalls); S * F / 16 is a multiple of 32: whole warps take part.
    // Chunk c is 16-byte unit c - k upk of slot k, stored straight to its
    // swizzled place (no second pass through a linear copy)
    if ((int)threadIdx.x < S * (F / RMS2_E)) {
        const int c = (int)threadIdx.x, k = c / (F / RMS2_E), j = RMS2_E * (c - k * (F / RMS2_E));
        float yv[RMS2_E];
        rms2_ld<true>(p.gu + (size_t)k * 2 * F + j, yv);   // (SwiGLU'd in phase 2)
        rms2_q8(yv, c, xsm + k * upk + gq_swz(c - k * upk), qd, qs);
    }
    __syncthreads();
    pm_stamp(p, ck, 7);
    const int sub = lane >> 3, sl = lane & 7, pp = lane & 3, bl = sl >> 2;
    const float gm = cb_gate(__ldcg(p.gamma));
    int h0, h1;
    pm_share(p.H, (int)blockIdx.x, (int)gridDim.x, h0, h1);
    for (int h = h0 + warp; h < h1; h += PM_WARPS) {
        gq_part w[2];
#pragma unroll
        for (int ps = 0; ps < 2; ps++) {
            const int k = 4 * ps + sub;
            if (k < K)
                gq_load<T>(p.wd + (size_t)s_sel[k] * p.wd_eb + (size_t)h * p.wd_rb +
                               (size_t)bl * gq_traits<T>::bytes,
                           pp, bl & 1, w[ps]);
        }
        // the shared row's units (Q8_0: 34-byte blocks, 16 weights a unit)
        const uint8_t *srow = p.sd + (size_t)h * p.sd_rb;
        float sacc = 0.0f;
        if (sub == 0) {
#pragma unroll
            for (int m = 0; m < PM_F / 16 / 8; m++) {
                const int v = sl + 8 * m, blk = v >> 1, hh = v & 1;
                const uint8_t *B = srow + (size_t)blk * 34;
                uint32_t wv[4];
                cu_ld16_a2(B + 2 + 16 * hh, wv);
                const float dw = gq_h2f(__ldg((const unsigned short *)B));
                const uint4 x4 = xsm[K * upk + gq_swz(v)];
                const uint32_t xv[4] = { x4.x, x4.y, x4.z, x4.w };
                int s = 0;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s = __dp4a((int)wv[j], (int)xv[j], s);
                sacc += dw * qd[K * nbk + blk] * (float)s;
            }
        }
        float yk[2];
#pragma unroll
        for (int ps = 0; ps < 2; ps++) {
            const int k = 4 * ps + sub;
            float a = 0.0f;
            if (k < K)
                a = gq_dot<T, true, true>(w[ps], bl, pp, NULL, xsm + k * upk, qd + k * nbk, qs + k * nbk, 0.0f);
#pragma unroll
            for (int o = 4; o > 0; o >>= 1)
                a += __shfl_xor_sync(0xffffffffu, a, o);
            yk[ps] = a;
        }
#pragma unroll
        for (int o = 4; o > 0; o >>= 1)
            sacc += __shfl_xor_sync(0xffffffffu, sacc, o);
        float yv[CB_K], wv[CB_K];
#pragma unroll
        for (int k = 0; k < CB_K; k++)
            yv[k] = __shfl_sync(0xffffffffu, yk[k >> 2], 8 * (k & 3));
        if (lane == 0) {
#pragma unroll
            for (int k = 0; k < CB_K; k++) {
                wv[k] = k < K ? s_wts[k] : 0.0f;
                yv[k] = k < K ? yv[k] : 0.0f;
            }
            p.dst[h] = cb_sum(wv, yv, K, true, gm, sacc);
        }
    }
}

template <int TG, int TD>
__global__ void __launch_bounds__(32 * PM_WARPS, 1) pm_kernel(cu_pmoe p)
{
    long long ck[PM_PROF_N];
    pm_stamp(p, ck, 0);
    pm_router(p, ck);
    pm_stamp(p, ck, 2);
    pm_grid_sync(p.bar);
    pm_stamp(p, ck, 3);
    pm_gate_up<TG>(p, ck);
    pm_stamp(p, ck, 5);
    pm_grid_sync(p.bar);
    pm_stamp(p, ck, 6);
    pm_down<TD>(p, ck);
    pm_stamp(p, ck, 8);
    pm_prof_add(p, ck);
}

static bool pm_kq(uint32_t t) { return t == SI_TYPE_Q4_K || t == SI_TYPE_Q5_K || t == SI_TYPE_Q6_K; }

static bool pm_a16(const void *w, uint64_t rb, uint64_t eb)
{
    return w != NULL && (uintptr_t)w % 16 == 0 && rb % 16 == 0 && eb % 16 == 0;
}

extern "C" bool si_cu_moe_persist_ok(const cu_pmoe *p)
{
    if (p->F != PM_F || p->H <= 0 || p->H % 2048 != 0 || p->H > GQ_XS_MAX || p->E < 1 || p->E > 256 ||
        p->K < 1 || p->K > 8 || p->K > p->E || !pm_kq(p->t_gu) || !pm_kq(p->t_dn))
        return false;
    if (p->h == NULL || (uintptr_t)p->h % 16 != 0 || p->wr == NULL || (uintptr_t)p->wr % 16 != 0 ||
        p->wr_stride % 4 != 0 || p->wr_stride < p->H || p->wsg == NULL || (uintptr_t)p->wsg % 16 != 0)
        return false;
    if (!pm_a16(p->wg, p->gu_rb, p->gu_eb) || !pm_a16(p->wu, p->gu_rb, p->gu_eb) ||
        !pm_a16(p->wd, p->wd_rb, p->wd_eb))
        return false;
    // (shared gate/up: plain Q8_0 rows 4-byte aligned for gs_words, the
    // regrouped ones 16; the shared down's blocks are read 2-byte aligned)
    const uint64_t sa = p->s_rg ? 16 : 4;
    if (p->sg == NULL || p->su == NULL || (uintptr_t)p->sg % sa != 0 || (uintptr_t)p->su % sa != 0 ||
        p->s_rb % sa != 0 || p->s_rb < (uint64_t)p->H / 32 * 34 || p->sd == NULL || (uintptr_t)p->sd % 2 != 0 ||
        p->sd_rb % 2 != 0 || p->sd_rb < (uint64_t)PM_F / 32 * 34)
        return false;
    return p->logits != NULL && p->gamma != NULL && p->wts != NULL && p->gu != NULL && (uintptr_t)p->gu % 16 == 0 &&
           p->dst != NULL &&
           p->sel != NULL && p->bar != NULL;
}

template <int TG, int TD> static cudaError_t pm_go(const cu_pmoe *p, int grid, cudaStream_t s)
{
    const size_t smem = pm_smem(p->H, p->K);
    return cu_launch_coop(pm_kernel<TG, TD>, dim3((unsigned)grid), dim3(32 * PM_WARPS), smem, s, *p);
}

template <int TG> static cudaError_t pm_go_d(const cu_pmoe *p, int grid, cudaStream_t s)
{
    switch (p->t_dn) {
    case SI_TYPE_Q4_K: return pm_go<TG, SI_TYPE_Q4_K>(p, grid, s);
    case SI_TYPE_Q5_K: return pm_go<TG, SI_TYPE_Q5_K>(p, grid, s);
    default: return pm_go<TG, SI_TYPE_Q6_K>(p, grid, s);
    }
}

extern "C" int si_cu_moe_persist(const cu_pmoe *p, int grid, void *stream)
{
    if (!si_cu_moe_persist_ok(p) || grid < 1 || p->xq == NULL || (uintptr_t)p->xq % 16 != 0 || p->xd == NULL ||
        (uintptr_t)p->xd % 8 != 0 || p->xs == NULL || (uintptr_t)p->xs % 8 != 0)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    switch (p->t_gu) {
    case SI_TYPE_Q4_K: return (int)pm_go_d<SI_TYPE_Q4_K>(p, grid, s);
    case SI_TYPE_Q5_K: return (int)pm_go_d<SI_TYPE_Q5_K>(p, grid, s);
    default: return (int)pm_go_d<SI_TYPE_Q6_K>(p, grid, s);
    }
}

#endif
