// tests/cuda/emu/moe/moe_emu.cc — the moe_grouped_i8 kernel plugin, glue
// included (moe_grouped_i8.c as built, on a fake si_cuda_ext), under the
// host CUDA emulation, against a C reference of the cpu backend's SI_OP_MOE
// with its int8 matmul (cpu_moe.c / cpu_quant_dot.c, recomputed in double
// from the core's reference dequantisation).  exec_builtin (router and the
// shared expert's gate_inp, F32 weights here) is a plain f32 dot, the same
// function the reference uses, so both pick the same experts.
// Device memory is host memory ending at a PROT_NONE page (reads past a
// buffer's end fault), 256-aligned like cudaMalloc, filled with NaN bytes.
// Knob weights from EMU_WEIGHTS (unset: the default, i8): the w8 path is
// checked within 3e-2 of the largest |ref| where it runs (H, F and the
// shared F multiples of 128; else the gguf path runs, within 2e-3); a value
// other than i8/gguf must make init fail naming the knob.  EMU_WGMMA: knob
// wgmma (unset: true): the fake device is an sm_90, so the i8 GEMMs must
// run on wgmma (moe_i8_wg.cu; the plugin's DEBUG line says so) in every
// exec, or with false in none; a value other than true/false refused, as
// EMU_KTILE's other than 128/64.  EMU_MEM_FREE:
// the device's free bytes (default 100 GB; 1 GiB: no int8 copy may be
// kept, each call requantises into its workspace, and the plugin must say
// so in its log); EMU_FS_ADD: the shared FFN is F + this wide.
// Usage: moe_emu TYPE E K H F N fused shared [down_type] [declines]   (TYPE q8_0|q4_K|q5_K|q6_K)
#include "moe_emu_ext.h"
#include "ptx_emu.h"

#include <cstdarg>
#include <map>
#include <set>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

extern "C" {
#include <sparkinfer/cuda_ext.h>
#include <sparkinfer/plugin.h>
#include "quant.h"
}

extern "C" const si_plugin *si_plugin_entry(const si_host *h);

struct si_buf {   // cuda_sm120's layout (cuda_backend.h)
    void    *dev;
    uint64_t nbytes;
    bool     borrowed;
};

// ---- device memory -----------------------------------------------------------
static std::map<void *, std::pair<void *, size_t>> g_maps;
static size_t g_dev_bytes;   // what the plugin holds from cudaMalloc (for cudaMemGetInfo)
static std::map<void *, size_t> g_dev_sizes;
static int g_optin;
void emu_smem_optin(int bytes) { g_optin = std::max(g_optin, bytes); }
static int g_syncs, g_frees_unsynced;
static bool g_pending;   // work "enqueued" since the last sync (for the free check)

static void *galloc(size_t n)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), body = (n + 255) & ~(size_t)255;
    const size_t len = ((body + pg - 1) / pg + 1) * pg;
    uint8_t *m = (uint8_t *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) abort();
    mprotect(m + len - pg, pg, PROT_NONE);
    uint8_t *p = m + len - pg - body;
    memset(p, 0xff, body);   // NaN floats, -1 ints
    g_maps[p] = { m, len };
    return p;
}

static void gfree(void *p)
{
    auto it = g_maps.find(p);
    if (it == g_maps.end()) { fprintf(stderr, "emu: cudaFree of %p, not allocated\n", p); abort(); }
    munmap(it->second.first, it->second.second);
    g_maps.erase(it);
}

static char g_stream_obj;
#define STREAM ((void *)&g_stream_obj)

extern "C" {
cudaError_t cudaMalloc(void **p, size_t n) { *p = galloc(n); g_dev_sizes[*p] = n; g_dev_bytes += n; return cudaSuccess; }
cudaError_t cudaFree(void *p)
{
    if (p == NULL) return cudaSuccess;
    g_dev_bytes -= g_dev_sizes[p];
    g_dev_sizes.erase(p);
    if (g_pending) g_frees_unsynced++;   // the stream may still use it on a GPU
    gfree(p);
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (s != STREAM) { fprintf(stderr, "emu: sync of a stream that is not the backend's\n"); abort(); }
    g_syncs++;
    g_pending = false;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    if (s != STREAM) { fprintf(stderr, "emu: cudaMemsetAsync on a stream that is not the backend's\n"); abort(); }
    memset(p, v, n);
    g_pending = true;
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t s)
{
    if (s != STREAM) { fprintf(stderr, "emu: cudaMemcpyAsync on a stream that is not the backend's\n"); abort(); }
    memcpy(dst, src, n);
    g_pending = true;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    const char *f = getenv("EMU_MEM_FREE");
    const size_t fr = f ? (size_t)strtoull(f, NULL, 10) : (size_t)100e9;
    *total_bytes = (size_t)141e9;
    *free_bytes = fr > g_dev_bytes ? fr - g_dev_bytes : 0;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e == 0 ? "no error" : "emulated error"; }
}

void emu_launch_cfg(dim3 grid, dim3 block, size_t smem, cudaStream_t st, const std::function<void()> &body)
{
    if (st != STREAM) { fprintf(stderr, "emu: launch on a stream that is not the backend's\n"); abort(); }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || block.x > 1024) {
        fprintf(stderr, "emu: bad launch grid (%u,%u,%u) block %u\n", grid.x, grid.y, grid.z, block.x);
        abort();
    }
    // static shared memory of these kernels is <= 12 KiB (schedule) or 256 B
    // (GEMMs); above 48 KiB only with the opt-in (the w8 GEMMs), <= 227 KiB
    if ((smem + 256 > 48 * 1024 && smem > (size_t)g_optin) || smem + 256 > 227 * 1024) {
        fprintf(stderr, "emu: %zu bytes of dynamic shared memory + static: over 48 KiB without the opt-in (%d) or over 227 KiB\n", smem, g_optin);
        abort();
    }
    g_pending = true;
    emu_ptx::smem_bytes = smem;
    emu_launch(grid, block, smem, body);
    emu_ptx::check_drained();
    emu_ptx::wg_check_drained();
}

// ---- mma.sync m16n8k32 s8 (see moe_emu_ext.h for the table) -------------------
void emu_mma_s8(int c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    struct lane_in { uint32_t a[4], b[2]; int c[4]; };
    static lane_in buf[32][32];
    const int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    buf[w][lane] = { { a0, a1, a2, a3 }, { b0, b1 }, { c[0], c[1], c[2], c[3] } };
    emu::sync_warp();   // aborts when a lane of the warp has exited: mma.sync needs all 32
    int A[16][32], B[32][8];
    for (int L = 0; L < 32; L++) {
        const int g = L >> 2, t = L & 3;
        for (int i = 0; i < 16; i++) {
            const int row = (i < 4 || (i >= 8 && i < 12)) ? g : g + 8;
            const int col = i < 8 ? 4 * t + (i & 3) : 4 * t + (i & 3) + 16;
            A[row][col] = (int8_t)(buf[w][L].a[i / 4] >> (8 * (i % 4)));
        }
        for (int i = 0; i < 8; i++) {
            const int k = i < 4 ? 4 * t + (i & 3) : 4 * t + (i & 3) + 16;
            B[k][g] = (int8_t)(buf[w][L].b[i / 4] >> (8 * (i % 4)));
        }
    }
    const int g = lane >> 2, t = lane & 3;
    int out[4];
    for (int i = 0; i < 4; i++) {
        const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
        int64_t s = buf[w][lane].c[i];
        for (int k = 0; k < 32; k++) s += (int64_t)A[row][k] * B[k][col];
        out[i] = (int)(int32_t)s;
    }
    emu::sync_warp();   // nobody overwrites buf before every lane has read it
    for (int i = 0; i < 4; i++) c[i] = out[i];
}

// ---- fake backend ----------------------------------------------------------------
static std::set<si_buf *> g_live;   // wrapped buffers not unwrapped yet
static si_backend *const FAKE_B = (si_backend *)&g_stream_obj;
static int g_builtin_calls;

static void *x_stream(si_backend *b) { if (b != FAKE_B) abort(); return STREAM; }
static void *x_dev_ptr(si_backend *, const si_tensor *t)
{
    return t == NULL || t->buf == NULL ? NULL : (uint8_t *)t->buf->dev + t->offset;
}

static void check_buf(const si_tensor *t, const char *what)
{
    if (t->buf->borrowed && !g_live.count(t->buf)) {
        fprintf(stderr, "emu: exec_builtin: %s in a wrapped buffer that was unwrapped\n", what);
        abort();
    }
    uint64_t end = t->offset + 4 * (uint64_t)t->ne[0];
    for (int i = 1; i < 4; i++) end += (uint64_t)(t->ne[i] - 1) * t->nb[i];
    if (end > t->buf->nbytes) {
        fprintf(stderr, "emu: exec_builtin: %s ends at %llu, past its buffer (%llu)\n", what,
                (unsigned long long)end, (unsigned long long)t->buf->nbytes);
        abort();
    }
}

// The f32 dot both sides use for F32 weights (router, shared gate_inp).
static float dot_f32(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static int x_exec_builtin(si_backend *b, const si_op *op, si_err *err)
{
    (void)err;
    if (b != FAKE_B || op->kind != SI_OP_MATMUL || op->src[0]->type != SI_TYPE_F32) {
        fprintf(stderr, "emu: exec_builtin: only F32 MATMUL is emulated\n");
        abort();
    }
    g_builtin_calls++;
    const si_tensor *w = op->src[0], *x = op->src[1], *d = &op->dst;
    check_buf(w, "weight"), check_buf(x, "input"), check_buf(d, "dst");
    const int64_t in = w->ne[0], rows = w->ndim > 1 ? w->ne[1] : 1, n = x->ndim > 1 ? x->ne[1] : 1;
    if (d->ne[0] != rows || (d->ndim > 1 ? d->ne[1] : 1) != n || x->ne[0] != in) {
        fprintf(stderr, "emu: exec_builtin: MATMUL shapes disagree\n");
        abort();
    }
    for (int64_t j = 0; j < n; j++)
        for (int64_t r = 0; r < rows; r++) {
            const float *wr = (const float *)((uint8_t *)x_dev_ptr(b, w) + r * w->nb[1]);
            const float *xr = (const float *)((uint8_t *)x_dev_ptr(b, x) + j * x->nb[1]);
            *(float *)((uint8_t *)x_dev_ptr(b, d) + j * d->nb[1] + 4 * r) = dot_f32(wr, xr, in);
        }
    g_pending = true;
    return SI_OK;
}

static int x_buf_wrap(si_backend *, void *dev, uint64_t nbytes, si_buf **out, si_err *)
{
    si_buf *bf = new si_buf{ dev, nbytes, true };
    g_live.insert(bf);
    *out = bf;
    return SI_OK;
}
static void x_buf_unwrap(si_backend *, si_buf *bf)
{
    if (!g_live.erase(bf)) { fprintf(stderr, "emu: buf_unwrap of a buffer not wrapped\n"); abort(); }
    delete bf;
}

static bool g_said_per_call;   // the plugin logged that copies do not fit
static int g_wg_execs;         // execs whose i8 GEMMs ran on wgmma (its DEBUG line says so)
static void h_log(const si_host *, int, const char *, const char *fmt, ...)
{
    if (strstr(fmt, "requantised per call") != NULL) g_said_per_call = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g_wg_execs += strncmp(msg, "grouped int8 MOE:", 17) == 0 && strstr(msg, "[i8] on wgmma") != NULL;
}
static const char *h_cfg(const si_host *, const char *, const char *key)
{
    return strcmp(key, "weights") == 0 ? getenv("EMU_WEIGHTS") : strcmp(key, "ktile") == 0 ? getenv("EMU_KTILE")
           : strcmp(key, "wgmma") == 0 ? getenv("EMU_WGMMA") : NULL;
}

// ---- inputs --------------------------------------------------------------------------
static uint32_t rs = 12345;
static uint32_t ru() { rs ^= rs << 13; rs ^= rs >> 17; rs ^= rs << 5; return rs; }
static float fr() { return (float)(ru() >> 8) / 8388608.0f - 1.0f; }   // [-1, 1)

struct qtype { uint32_t id; int blk, bytes; };
static qtype qt_of(const std::string &s)
{
    if (s == "q8_0") return { SI_TYPE_Q8_0, 32, 34 };
    if (s == "q4_K") return { SI_TYPE_Q4_K, 256, 144 };
    if (s == "q5_K") return { SI_TYPE_Q5_K, 256, 176 };
    if (s == "q6_K") return { SI_TYPE_Q6_K, 256, 210 };
    fprintf(stderr, "unknown type %s\n", s.c_str());
    exit(2);
}

static void put16(uint8_t *p, float v) { uint16_t h = si_f32_to_fp16(v); p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }

// Random blocks (every bit of the quants random) with scales that keep a
// dot of `in` terms O(1).
static void fill_blocks(const qtype &q, uint8_t *p, int64_t nblocks, int64_t in)
{
    const float amp = 1.0f / std::sqrt((float)in);
    for (int64_t b = 0; b < nblocks; b++, p += q.bytes) {
        for (int i = 0; i < q.bytes; i++) p[i] = (uint8_t)ru();
        const float r = 0.5f + 0.5f * (fr() + 1.0f);
        switch (q.id) {
        case SI_TYPE_Q8_0: put16(p, amp * r / 64.0f); break;
        case SI_TYPE_Q4_K:
        case SI_TYPE_Q5_K: put16(p, amp * r / (32.0f * (q.id == SI_TYPE_Q4_K ? 8 : 16))); put16(p + 2, amp * r / 64.0f); break;
        case SI_TYPE_Q6_K: put16(p + 208, amp * r / (64.0f * 16)); break;
        }
    }
}

struct wt {   // a weight [in, rows, ne2] and its reference decode
    si_tensor t;
    si_buf    buf;
    qtype     q;
    int64_t   in, rows, ne2;
    std::vector<float> deq;   // [ne2][rows][in]
    std::vector<float> m32;   // per 32 values: the min (K-quants with a min), else 0
};

static void decode_weight(wt &w);
static void make_weight(wt &w, const qtype &q, int64_t in, int64_t rows, int64_t ne2)
{
    w.q = q, w.in = in, w.rows = rows, w.ne2 = ne2;
    const uint64_t rb = (uint64_t)(in / q.blk) * q.bytes, nbytes = rb * rows * ne2;
    uint8_t *p = (uint8_t *)galloc(nbytes);
    fill_blocks(q, p, (int64_t)(nbytes / q.bytes), in);
    w.buf = { p, nbytes, false };
    decode_weight(w);
}

// new random bytes in place (other weights loaded at the same address)
static void refill_weight(wt &w)
{
    fill_blocks(w.q, (uint8_t *)w.buf.dev, (int64_t)(w.buf.nbytes / w.q.bytes), w.in);
    decode_weight(w);
}

static void decode_weight(wt &w)
{
    const qtype q = w.q;
    const int64_t in = w.in, rows = w.rows, ne2 = w.ne2;
    const uint64_t rb = (uint64_t)(in / q.blk) * q.bytes;
    uint8_t *p = (uint8_t *)w.buf.dev;
    w.t = si_tensor{};
    w.t.buf = &w.buf;
    w.t.type = q.id;
    w.t.ndim = ne2 > 1 ? 3 : 2;
    w.t.ne[0] = in, w.t.ne[1] = rows, w.t.ne[2] = ne2, w.t.ne[3] = 1;
    w.t.nb[0] = (uint64_t)q.bytes, w.t.nb[1] = rb, w.t.nb[2] = rb * rows, w.t.nb[3] = rb * rows * ne2;
    w.deq.resize((size_t)(in * rows * ne2));
    w.m32.assign((size_t)(in / 32 * rows * ne2), 0.0f);
    si_err err;
    for (int64_t r = 0; r < rows * ne2; r++) {
        const uint8_t *row = p + r * rb;
        if (si_dequant(q.id, row, &w.deq[(size_t)(r * in)], in, &err) != SI_OK) abort();
        if (q.id == SI_TYPE_Q4_K || q.id == SI_TYPE_Q5_K)
            for (int64_t kb = 0; kb < in / 32; kb++) {   // dmin * m_j, the 6-bit packing of quant_k.c's header
                const uint8_t *B = row + (kb / 8) * q.bytes, *sc = B + 4;
                const int j = (int)(kb % 8);
                const int m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
                const float dmin = si_fp16_to_f32((uint16_t)(B[2] | (B[3] << 8)));
                w.m32[(size_t)(r * (in / 32) + kb)] = dmin * (float)m;
            }
    }
}

static void make_f32(wt &w, int64_t in, int64_t rows, float amp)
{
    w.in = in, w.rows = rows, w.ne2 = 1;
    float *p = (float *)galloc((size_t)(in * rows) * 4);
    for (int64_t i = 0; i < in * rows; i++) p[i] = amp * fr();
    w.buf = { p, (uint64_t)(in * rows) * 4, false };
    w.t = si_tensor{};
    w.t.buf = &w.buf;
    w.t.type = SI_TYPE_F32;
    w.t.ndim = rows > 1 ? 2 : 1;
    w.t.ne[0] = in, w.t.ne[1] = rows, w.t.ne[2] = w.t.ne[3] = 1;
    w.t.nb[0] = 4, w.t.nb[1] = 4 * (uint64_t)in, w.t.nb[2] = w.t.nb[3] = 4 * (uint64_t)(in * rows);
}

// ---- reference: cpu_moe.c with the int8 matmul, in double ---------------------------------
struct q8rows { std::vector<int8_t> q; std::vector<float> d, s; int64_t in; };

static void quant_row(const float *x, int64_t in, q8rows &o, int64_t r)   // cpu_quantize_row_q8
{
    for (int64_t b = 0; b < in / 32; b++) {
        float amax = 0.0f, sum = 0.0f;
        for (int l = 0; l < 32; l++) { amax = std::max(amax, std::fabs(x[32 * b + l])); sum += x[32 * b + l]; }
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int l = 0; l < 32; l++) o.q[(size_t)(r * in + 32 * b + l)] = (int8_t)std::nearbyint(x[32 * b + l] * id);
        o.d[(size_t)(r * (in / 32) + b)] = d + (sum - sum);
        o.s[(size_t)(r * (in / 32) + b)] = sum;
    }
}
static q8rows q8_alloc(int64_t in, int64_t rows)
{
    q8rows o;
    o.in = in;
    o.q.resize((size_t)(in * rows));
    o.d.resize((size_t)(in / 32 * rows));
    o.s.resize((size_t)(in / 32 * rows));
    return o;
}

// row `row` of expert e of w . activation row r: sum_b dx (sum_l (w + m) qx) - m sx
static double ref_dot(const wt &w, int64_t e, int64_t row, const q8rows &a, int64_t r)
{
    const int64_t in = w.in, R = e * w.rows + row;
    const float *wr = &w.deq[(size_t)(R * in)];
    double acc = 0.0;
    for (int64_t b = 0; b < in / 32; b++) {
        const double m = w.m32[(size_t)(R * (in / 32) + b)];
        double s = 0.0;
        for (int l = 0; l < 32; l++) s += ((double)wr[32 * b + l] + m) * a.q[(size_t)(r * in + 32 * b + l)];
        acc += a.d[(size_t)(r * (in / 32) + b)] * s - m * a.s[(size_t)(r * (in / 32) + b)];
    }
    return acc;
}

static float silu(float x) { return x / (1.0f + std::exp(-x)); }

int main(int argc, char **argv)
{
    // last argument "declines": the shape must be declined by supports()
    const bool want_decline = argc > 1 && strcmp(argv[argc - 1], "declines") == 0;
    argc -= want_decline;
    if (argc < 9) { fprintf(stderr, "usage: moe_emu TYPE E K H F N fused shared [down_type]\n"); return 2; }
    const qtype q = qt_of(argv[1]), qd = argc > 9 ? qt_of(argv[9]) : q;
    const int64_t E = atoll(argv[2]), K = atoll(argv[3]), H = atoll(argv[4]), F = atoll(argv[5]), n = atoll(argv[6]);
    const bool fused = atoi(argv[7]) != 0, shared = atoi(argv[8]) != 0;
    const int64_t fs_add = getenv("EMU_FS_ADD") ? atoll(getenv("EMU_FS_ADD")) : 32 * (q.blk == 32 ? 1 : 8);
    const int64_t Fs = F + (shared ? fs_add : 0);   // a different width for the shared FFN
    const char *wk = getenv("EMU_WEIGHTS");
    const char *kk = getenv("EMU_KTILE");   // knob ktile (unset: 128)
    const char *wgk = getenv("EMU_WGMMA");  // knob wgmma (unset: true)
    const bool bad_kt = kk != NULL && strcmp(kk, "128") != 0 && strcmp(kk, "64") != 0;
    const bool bad_wg = wgk != NULL && strcmp(wgk, "true") != 0 && strcmp(wgk, "false") != 0;
    const bool bad_knob = bad_kt || bad_wg || (wk != NULL && strcmp(wk, "i8") != 0 && strcmp(wk, "gguf") != 0);
    const bool w8 = !bad_knob && (wk == NULL || strcmp(wk, "i8") == 0) && H % 128 == 0 && F % 128 == 0 && (!shared || Fs % 128 == 0);
    const bool mem_tight = getenv("EMU_MEM_FREE") != NULL && strtoull(getenv("EMU_MEM_FREE"), NULL, 10) <= (1ull << 30);
    rs = (uint32_t)(E * 7919 + K * 104729 + H * 13 + F * 17 + n * 31 + fused * 3 + shared * 5) | 1u;

    // inputs: h and dst with row strides > H (the gaps must stay untouched)
    const int64_t hs = H + 64, ds = H + 32;
    float *h = (float *)galloc((size_t)(n * hs) * 4), *dst = (float *)galloc((size_t)(n * ds) * 4);
    for (int64_t i = 0; i < n * hs; i++) h[i] = fr();
    si_buf hb = { h, (uint64_t)(n * hs) * 4, false }, db = { dst, (uint64_t)(n * ds) * 4, false };
    wt router, gate, up, down, sgi, sg, su, sd;
    make_f32(router, H, E, 1.0f);   // logits O(10): a peaked router, like the real ones
    if (fused) make_weight(gate, q, H, 2 * F, E);
    else make_weight(gate, q, H, F, E), make_weight(up, q, H, F, E);
    make_weight(down, qd, F, H, E);
    if (shared) {
        make_f32(sgi, H, 1, 0.1f);
        make_weight(sg, q, H, Fs, 1), make_weight(su, q, H, Fs, 1), make_weight(sd, qd, Fs, H, 1);
    }
    si_op op = {};
    op.kind = SI_OP_MOE;
    op.p.moe.n_expert = (uint32_t)E, op.p.moe.n_used = (uint32_t)K;
    si_tensor ht = {}, dt = {};
    ht.buf = &hb, ht.type = SI_TYPE_F32, ht.ndim = 2, ht.ne[0] = H, ht.ne[1] = n, ht.ne[2] = ht.ne[3] = 1;
    ht.nb[0] = 4, ht.nb[1] = 4 * (uint64_t)hs, ht.nb[2] = ht.nb[3] = ht.nb[1] * n;
    dt = ht, dt.buf = &db, dt.nb[1] = 4 * (uint64_t)ds, dt.nb[2] = dt.nb[3] = dt.nb[1] * n;
    op.dst = dt;
    op.src[0] = &ht, op.src[1] = &router.t, op.src[2] = &gate.t, op.src[3] = fused ? NULL : &up.t, op.src[4] = &down.t;
    if (shared) op.src[5] = &sgi.t, op.src[6] = &sg.t, op.src[7] = &su.t, op.src[8] = &sd.t;

    // the plugin on the fake backend
    si_host host = {};
    host.abi_major = SI_ABI_MAJOR, host.abi_minor = SI_ABI_MINOR, host.size = sizeof host;
    host.log = h_log, host.cfg_get = h_cfg;
    si_cuda_ext ext = {};
    ext.size = sizeof ext, ext.major = SI_CUDA_EXT_MAJOR, ext.b = FAKE_B, ext.device = 0, ext.cc_major = 9;
    ext.n_sm = 132, ext.stream = x_stream, ext.dev_ptr = x_dev_ptr, ext.exec_builtin = x_exec_builtin;
    ext.buf_wrap = x_buf_wrap, ext.buf_unwrap = x_buf_unwrap;
    const si_plugin *pl = si_plugin_entry(&host);
    const si_kernel_ops *ko = (const si_kernel_ops *)pl->ops;
    void *state = NULL;
    si_err err = {};
    if (bad_knob) {
        const bool refused = ko->init(&host, "kernel.moe_grouped_i8", &ext, &state, &err) != SI_OK;
        const char *key = bad_kt ? "ktile" : bad_wg ? "wgmma" : "weights", *val = bad_kt ? kk : bad_wg ? wgk : wk;
        const bool named = refused && strstr(err.msg, key) && strstr(err.msg, val);
        printf("%s %s = '%s': init %s (%s)\n", named ? "ok  " : "FAIL", key, val, refused ? "refused" : "accepted it", refused ? err.msg : "");
        return named ? 0 : 1;
    }
    if (ko->init(&host, "kernel.moe_grouped_i8", &ext, &state, &err) != SI_OK) { fprintf(stderr, "init: %s\n", err.msg); return 1; }
    if (ko->supports(state, &op) != !want_decline) {
        printf("FAIL %s E %s H %s F %s: supports() %s\n", argv[1], argv[2], argv[4], argv[5], want_decline ? "took a shape it cannot launch" : "declined the shape");
        return 1;
    }
    if (want_decline) {
        printf("ok   %s E %s H %s F %s: declined, as it must be\n", argv[1], argv[2], argv[4], argv[5]);
        ko->fini(state);
        return 0;
    }
    // twice: the first grows the workspace (and keeps the int8 copies), the
    // second reuses it (regrowth between shapes is not exercised: one shape
    // per process).  EMU_REWRITE=1: then other weights at the same
    // addresses, and a third run (the kept copies must not be used stale)
    int rc = SI_OK;
    const int reps = getenv("EMU_REWRITE") ? 3 : 2;
    for (int rep = 0; rep < reps && rc == SI_OK; rep++) {
        if (rep == 2) {
            refill_weight(gate), refill_weight(down);
            if (!fused) refill_weight(up);
            if (shared) refill_weight(sg), refill_weight(su), refill_weight(sd);
        }
        for (int64_t i = 0; i < n * ds; i++) dst[i] = NAN;
        rc = ko->exec(state, &op, &err);
    }
    if (rc != SI_OK) { fprintf(stderr, "FAIL: exec: %s\n", err.msg); return 1; }

    // reference
    std::vector<float> logits((size_t)(n * E)), wts((size_t)(n * K));
    std::vector<int32_t> sel((size_t)(n * K));
    for (int64_t t = 0; t < n; t++)
        for (int64_t e = 0; e < E; e++) logits[(size_t)(t * E + e)] = dot_f32(&((float *)router.buf.dev)[e * H], h + t * hs, H);
    for (int64_t t = 0; t < n; t++) {   // cpu_moe.c route_task
        float *l = &logits[(size_t)(t * E)], mx = -INFINITY, sum = 0.0f, tot = 0.0f;
        for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) { l[e] = std::exp(l[e] - mx); sum += l[e]; }
        for (int64_t e = 0; e < E; e++) l[e] /= sum;
        for (int64_t k = 0; k < K; k++) {
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t j = 0; j < k; j++) taken |= sel[(size_t)(t * K + j)] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            sel[(size_t)(t * K + k)] = (int32_t)best;
            wts[(size_t)(t * K + k)] = l[best];
            tot += l[best];
        }
        if (!(tot >= 6.103515625e-5f)) tot = 6.103515625e-5f;
        for (int64_t k = 0; k < K; k++) wts[(size_t)(t * K + k)] /= tot;
    }
    q8rows hq = q8_alloc(H, n);
    for (int64_t t = 0; t < n; t++) quant_row(h + t * hs, H, hq, t);
    std::vector<float> y((size_t)(n * K * H)), ys((size_t)(n * H), 0.0f), gm((size_t)n, 0.0f), act((size_t)std::max(F, Fs));
    q8rows aq = q8_alloc(std::max(F, Fs), 1);
    std::vector<int64_t> per_e((size_t)E, 0);
    for (int64_t a = 0; a < n * K; a++) {
        const int64_t t = a / K, e = sel[(size_t)a];
        per_e[(size_t)e]++;
        for (int64_t f = 0; f < F; f++) {
            const float g = (float)ref_dot(gate, e, f, hq, t), u = (float)(fused ? ref_dot(gate, e, F + f, hq, t) : ref_dot(up, e, f, hq, t));
            act[(size_t)f] = silu(g) * u;
        }
        aq.in = F;
        quant_row(act.data(), F, aq, 0);
        for (int64_t o = 0; o < H; o++) y[(size_t)(a * H + o)] = (float)ref_dot(down, e, o, aq, 0);
    }
    if (shared)
        for (int64_t t = 0; t < n; t++) {
            gm[(size_t)t] = dot_f32((float *)sgi.buf.dev, h + t * hs, H);
            for (int64_t f = 0; f < Fs; f++) act[(size_t)f] = silu((float)ref_dot(sg, 0, f, hq, t)) * (float)ref_dot(su, 0, f, hq, t);
            aq.in = Fs;
            quant_row(act.data(), Fs, aq, 0);
            for (int64_t o = 0; o < H; o++) ys[(size_t)(t * H + o)] = (float)ref_dot(sd, 0, o, aq, 0);
        }
    double maxref = 0.0, maxerr = 0.0;
    int64_t bad_gap = 0, nan = 0, worst = -1;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t o = 0; o < H; o++) {
            float r = 0.0f;
            for (int64_t k = 0; k < K; k++) r += wts[(size_t)(t * K + k)] * y[(size_t)((t * K + k) * H + o)];
            if (shared) r += 1.0f / (1.0f + std::exp(-gm[(size_t)t])) * ys[(size_t)(t * H + o)];
            const float v = dst[t * ds + o];
            if (!(v == v)) { nan++; continue; }
            maxref = std::max(maxref, (double)std::fabs(r));
            if (std::fabs((double)v - r) > maxerr) maxerr = std::fabs((double)v - r), worst = t * H + o;
        }
        for (int64_t o = H; o < ds; o++) {
            float v = dst[t * ds + o];
            bad_gap += v == v;   // the poison is NaN: anything else was written
        }
    }
    int64_t used = 0;
    for (int64_t e = 0; e < E; e++) used += per_e[(size_t)e] > 0;
    const double rel = maxref > 0 ? maxerr / maxref : 1.0;
    const double tol = w8 ? 3e-2 : 2e-3;
    // the i8 copies: kept (nothing said) or, without room, per call (said)
    const bool policy_ok = !w8 || g_said_per_call == mem_tight;
    // the i8 GEMMs on wgmma in every exec (the fake device is an sm_90 and
    // the emulator has wgmma) unless knob wgmma = false, then in none
    const bool want_wg = w8 && (wgk == NULL || strcmp(wgk, "true") == 0), path_ok = g_wg_execs == (want_wg ? reps : 0);
    const bool ok = nan == 0 && bad_gap == 0 && rel < tol && g_frees_unsynced == 0 && g_builtin_calls == reps * (shared ? 2 : 1) && policy_ok && path_ok;
    printf("%s [%s%s%s%s] %s%s E %lld K %lld H %lld F %lld (Fs %lld) n %lld %s%s: experts used %lld, max|ref| %.4g, max err %.3g (rel %.3g at t %lld o %lld), NaN %lld, gap writes %lld, builtin calls %d\n",
           ok ? "ok  " : "FAIL", w8 ? "i8" : "gguf", w8 ? (g_wg_execs ? " wgmma" : " mma.sync") : "", w8 && mem_tight ? ", per call" : "",
           policy_ok ? path_ok ? "" : ", GEMM PATH WRONG" : ", COPY POLICY WRONG", argv[1], argc > 9 ? (std::string("/") + argv[9]).c_str() : "", (long long)E, (long long)K,
           (long long)H, (long long)F, (long long)Fs, (long long)n, fused ? "fused" : "separate", shared ? " +shared" : "",
           (long long)used, maxref, maxerr, rel, (long long)(worst / H), (long long)(worst % H), (long long)nan,
           (long long)bad_gap, g_builtin_calls);
    ko->fini(state);
    if (!g_live.empty()) { printf("FAIL: %zu wrapped buffers left after fini\n", g_live.size()); return 1; }
    if (g_dev_bytes != 0) { printf("FAIL: %zu bytes of device memory left after fini\n", g_dev_bytes); return 1; }
    return ok ? 0 : 1;
}
