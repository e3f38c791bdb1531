// backends/cuda_sm120/cuda_topk.cu — SI_OP_TOPK: the k best logits of each
// row after the sampling penalties (plugin.h si_topk_params), bit for bit
// the cpu backend's result, so that only 2*k numbers per row go to the host.
//
// Every entry becomes one 64-bit key whose unsigned order IS the op's order:
//   high 32 bits: the value's bits mapped to an unsigned order (NaN taken
//                 as -inf; -0 as +0, since -0 == +0 ties and the id decides);
//   low 32 bits:  (0x7fffffff - id) << 1 | (the value was -0), so equal
//                 values rank the lower id first and the sign of a zero
//                 comes back out.
// Key 0 is below every real key (-inf maps to 0x007fffff): the filler.
// Keys are unique, so no step depends on thread or block scheduling.
//
//   pen_kernel     (with penalties; one block per row) clears the row's
//                  bitmap of penalised ids, sets their bits, and computes
//                  their penalised keys with explicitly rounded f32 ops
//                  (no FMA contraction), exactly as core/sample.c;
//   slice_kernel   grid (S slices, n rows): a block streams its slice of
//                  the row, skipping penalised ids, and keeps its k best;
//   merge_kernel   one block per row: the k best of the S*k slice keys
//                  plus the row's penalised keys, written to dst.
// Both selections use select_stream: candidates above the current k-th
// best are appended to a shared buffer (a shared atomic counter; order
// does not matter), and when the next round might overflow it the buffer
// is bitonic-sorted and cut back to k.  On logits most entries fail the
// threshold test after the first rounds, so a slice costs about one read.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"

#define TK_THREADS 256
#define TK_CAP 2048          // shared keys (16 KiB); >= SI_TOPK_MAX + TK_THREADS
#define TK_SLICE_MIN 1024    // entries per slice at least
#define TK_SLICES_MAX 128
#define TK_MERGE_KEYS 8192   // S*k at most, unless S would drop below 4

__device__ __forceinline__ uint64_t tk_key(float v, int32_t id)
{
    if (isnan(v))
        v = -INFINITY;
    uint32_t neg0 = 0;
    if (v == 0.0f) {
        neg0 = signbit(v) ? 1u : 0u;
        v = 0.0f;
    }
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | ((uint64_t)(0x7fffffffu - (uint32_t)id) << 1) | neg0;
}

__device__ __forceinline__ void tk_unkey(uint64_t k, float *v, int32_t *id)
{
    uint32_t u = (uint32_t)(k >> 32), lo = (uint32_t)k;
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    *v = (lo & 1u) ? -0.0f : __uint_as_float(u);
    *id = (int32_t)(0x7fffffffu - (lo >> 1));
}

// Descending bitonic sort of s[0, n) by the whole block (n a power of 2).
__device__ void tk_sort(uint64_t *s, int n)
{
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
                int i = 2 * t - (t & (stride - 1));   // lower index of the pair
                int j = i + stride;
                bool desc = (i & size) == 0;
                uint64_t a = s[i], b = s[j];
                if ((a < b) == desc) {
                    s[i] = b;
                    s[j] = a;
                }
            }
        }
    __syncthreads();
}

// Shared state of a selection: buf[0, k) the best so far (after a cut),
// buf[k, *m) candidates, thr the k-th best (0 until the first cut).
struct tk_sel {
    uint64_t *buf;
    unsigned *m;
    uint64_t *thr;
    int       k;
};

__device__ void tk_cut(tk_sel &s)
{
    __syncthreads();
    int m = (int)*s.m, n = 2;
    while (n < m)
        n <<= 1;   // sort only as far as the buffer is used
    for (int i = m + threadIdx.x; i < n; i += blockDim.x)
        s.buf[i] = 0;
    tk_sort(s.buf, n);
    if (threadIdx.x == 0) {
        *s.m = (unsigned)s.k;
        *s.thr = s.buf[s.k - 1];
    }
    __syncthreads();
}

__device__ void tk_init(tk_sel &s)
{
    for (int i = threadIdx.x; i < s.k; i += blockDim.x)
        s.buf[i] = 0;
    if (threadIdx.x == 0) {
        *s.m = (unsigned)s.k;
        *s.thr = 0;
    }
    __syncthreads();
}

// Offers one key per thread (0 = none) for one round of the block.  The
// buffer is cut when the round might overflow it, and once early (k + one
// round of candidates, no threshold yet), so that the threshold filters
// from the second round on instead of after TK_CAP entries.
__device__ __forceinline__ void tk_offer(tk_sel &s, uint64_t key)
{
    // Every thread decides on the same count: the barrier keeps this
    // round's appends from changing it under a slower warp.
    unsigned m = *s.m;
    bool cut = m + blockDim.x > TK_CAP || (*s.thr == 0 && m >= (unsigned)s.k + blockDim.x);
    __syncthreads();
    if (cut)
        tk_cut(s);
    if (key > *s.thr) {
        unsigned at = atomicAdd(s.m, 1u);
        s.buf[at] = key;
    }
    __syncthreads();
}

// k = 1 (greedy): the block's largest key, no buffer.  Every thread
// returns it.
__device__ uint64_t tk_block_max(uint64_t key)
{
    __shared__ uint64_t warp_best[TK_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        uint64_t other = __shfl_down_sync(0xffffffffu, key, o);
        key = other > key ? other : key;
    }
    if ((threadIdx.x & 31) == 0)
        warp_best[threadIdx.x >> 5] = key;
    __syncthreads();
    uint64_t best = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        best = warp_best[w] > best ? warp_best[w] : best;
    __syncthreads();
    return best;
}

__global__ void __launch_bounds__(TK_THREADS) pen_kernel(cu_topk t)
{
    const int64_t r = blockIdx.x;
    const int64_t words = (t.V + 31) / 32;
    uint32_t *bits = t.bitmap + r * words;
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x)
        bits[w] = 0;
    __syncthreads();
    const float *x = t.x + r * t.x_stride;
    for (int32_t j = t.pen_off[r] + threadIdx.x; j < t.pen_off[r + 1]; j += blockDim.x) {
        int32_t id = t.pen_id[j];
        atomicOr(&bits[id >> 5], 1u << (id & 31));
        float l = x[id];
        if (isnan(l))
            l = -INFINITY;
        if (l != -INFINITY) {
            l = l <= 0.0f ? __fmul_rn(l, t.repeat) : __fdiv_rn(l, t.repeat);
            float sub = __fadd_rn(__fmul_rn((float)t.pen_cnt[j], t.freq), t.presence);
            l = __fsub_rn(l, sub);
        }
        t.pen_key[j] = tk_key(l, id);   // tk_key takes a NaN result as -inf
    }
}

__global__ void __launch_bounds__(TK_THREADS) slice_kernel(cu_topk t)
{
    __shared__ uint64_t buf[TK_CAP];
    __shared__ unsigned m;
    __shared__ uint64_t thr;
    const int64_t r = blockIdx.y, per = (t.V + t.slices - 1) / t.slices;
    const int64_t i0 = (int64_t)blockIdx.x * per, i1 = i0 + per < t.V ? i0 + per : t.V;
    const float *x = t.x + r * t.x_stride;
    const uint32_t *bits = t.bitmap != NULL ? t.bitmap + r * ((t.V + 31) / 32) : NULL;
    uint64_t *out = t.cand + (r * t.slices + blockIdx.x) * (int64_t)t.k;
    if (t.k == 1) {
        uint64_t best = 0;
        for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x)
            if (bits == NULL || !((bits[i >> 5] >> (i & 31)) & 1u)) {
                uint64_t key = tk_key(x[i], (int32_t)i);
                best = key > best ? key : best;
            }
        best = tk_block_max(best);
        if (threadIdx.x == 0)
            out[0] = best;
        return;
    }
    tk_sel s = { buf, &m, &thr, t.k };
    tk_init(s);
    for (int64_t b = i0; b < i1; b += blockDim.x) {
        int64_t i = b + threadIdx.x;
        uint64_t key = 0;
        if (i < i1 && (bits == NULL || !((bits[i >> 5] >> (i & 31)) & 1u)))
            key = tk_key(x[i], (int32_t)i);
        tk_offer(s, key);
    }
    tk_cut(s);
    for (int i = threadIdx.x; i < t.k; i += blockDim.x)
        out[i] = buf[i];
}

__global__ void __launch_bounds__(TK_THREADS) merge_kernel(cu_topk t)
{
    __shared__ uint64_t buf[TK_CAP];
    __shared__ unsigned m;
    __shared__ uint64_t thr;
    const int64_t r = blockIdx.x;
    const int64_t nc = (int64_t)t.slices * t.k;
    const uint64_t *cand = t.cand + r * nc;
    const int64_t p0 = t.pen_off != NULL ? t.pen_off[r] : 0, np = t.pen_off != NULL ? t.pen_off[r + 1] - p0 : 0;
    float *y = t.dst + r * t.dst_stride;
    if (t.k == 1) {
        uint64_t best = 0;
        for (int64_t i = threadIdx.x; i < nc + np; i += blockDim.x) {
            uint64_t key = i < nc ? cand[i] : t.pen_key[p0 + (i - nc)];
            best = key > best ? key : best;
        }
        best = tk_block_max(best);
        if (threadIdx.x == 0) {
            float v;
            int32_t id;
            tk_unkey(best, &v, &id);
            y[0] = v;
            y[1] = __int_as_float(id);
        }
        return;
    }
    tk_sel s = { buf, &m, &thr, t.k };
    tk_init(s);
    for (int64_t b = 0; b < nc + np; b += blockDim.x) {
        int64_t i = b + threadIdx.x;
        uint64_t key = 0;
        if (i < nc)
            key = cand[i];
        else if (i < nc + np)
            key = t.pen_key[p0 + (i - nc)];
        tk_offer(s, key);
    }
    tk_cut(s);
    for (int i = threadIdx.x; i < t.k; i += blockDim.x) {
        float v;
        int32_t id;
        tk_unkey(buf[i], &v, &id);
        y[i] = v;
        y[t.k + i] = __int_as_float(id);   // ids as int32 bit patterns
    }
}

extern "C" int si_cu_topk_slices(int64_t V, int k)
{
    int64_t s = (V + TK_SLICE_MIN - 1) / TK_SLICE_MIN;
    if (s > TK_SLICES_MAX)
        s = TK_SLICES_MAX;
    int64_t by_merge = TK_MERGE_KEYS / (k > 0 ? k : 1);
    if (by_merge < 4)
        by_merge = 4;
    if (s > by_merge)
        s = by_merge;
    return s < 1 ? 1 : (int)s;
}

extern "C" int si_cu_topk(const cu_topk *t, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    if (t->n == 0)
        return 0;
    if (t->n > 65535 || t->k < 1 || t->k > TK_CAP - TK_THREADS)
        return (int)cudaErrorInvalidValue;
    if (t->bitmap != NULL)
        pen_kernel<<<(unsigned)t->n, TK_THREADS, 0, st>>>(*t);
    slice_kernel<<<dim3((unsigned)t->slices, (unsigned)t->n), TK_THREADS, 0, st>>>(*t);
    merge_kernel<<<(unsigned)t->n, TK_THREADS, 0, st>>>(*t);
    return (int)cudaGetLastError();
}

// ---- HOST_IDS ------------------------------------------------------------------
// One warp.  Lane 0 polls the slot's gen with a system-scope acquire (the
// host's release store of gen orders its ids before it), sleeping a
// little between reads (each is a trip over the bus); the warp then copies
// the ids.  Not a programmatic-launch kernel: it starts after everything
// before it, and the kernels after it wait for it.
__global__ void host_ids_kernel(const cu_post_slot *ring, unsigned *ctr, int32_t *dst, int64_t stride, int n)
{
    unsigned want = 0;
    int ok = 1;
    if (threadIdx.x == 0) {
        want = *ctr + 1;
        const unsigned *gen = &ring[want % CU_POST_RING].gen;
        uint64_t t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        for (;;) {
            unsigned g;
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(g) : "l"(gen) : "memory");
            if (g == want)
                break;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (t - t0 > CU_POST_GIVE_UP_NS) {
                ok = 0;
                break;
            }
            __nanosleep(256);
        }
        *ctr = want;
    }
    __syncwarp();   // (orders the other lanes' reads after lane 0's acquire)
    want = __shfl_sync(0xffffffffu, want, 0);
    ok = __shfl_sync(0xffffffffu, ok, 0);
    const volatile int32_t *ids = ring[want % CU_POST_RING].ids;
    for (int i = threadIdx.x; i < n; i += 32)
        dst[(int64_t)i * stride] = ok ? ids[i] : -1;
}

extern "C" int si_cu_host_ids(const cu_post_slot *ring, unsigned *ctr, int32_t *dst, int64_t stride, int n,
                              void *stream)
{
    if (n < 1 || n > 32)
        return (int)cudaErrorInvalidValue;
    host_ids_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(ring, ctr, dst, stride, n);
    return (int)cudaGetLastError();
}
