// tests/cuda/emu/topk_emu.cc — cuda_topk.cu's SI_OP_TOPK kernels under the
// host emulation against a brute-force reference (NaN as -inf, the
// penalties, a full sort by value then lower id): values bit for bit, ids
// equal.  Ties, -0/+0, NaN, -inf, rows with fewer finite entries than k,
// ascending rows (the buffer fills every round), penalties; the launch
// sequence of si_cu_topk is replayed here (the launcher uses <<<>>>).
// Usage: topk_emu [quick]
#include "cuda_runtime.h"
#include "cuda_internal.h"
#include <algorithm>
#include <string>

__global__ void pen_kernel(cu_topk t);
__global__ void slice_kernel(cu_topk t);
__global__ void merge_kernel(cu_topk t);

static uint32_t rs = 99;
static float fr() { rs = rs * 1664525u + 1013904223u; return (float)((rs >> 8) & 0xffffff) / 8388608.0f - 1.0f; }

static void fill(std::vector<float> &x, int64_t V, int style)
{
    for (int64_t i = 0; i < V; i++) {
        float u = 0.5f * (fr() + 1.0f), v = 8.0f * fr();
        switch (style) {
        case 1: v = floorf(v); break;                                      // many ties
        case 2: if (u < 0.95f) v = u < 0.5f ? -INFINITY : NAN; break;      // few finite
        case 3: v = (float)i * 1e-3f; break;                               // ascending
        case 4: v = u < 0.3f ? 0.0f : u < 0.6f ? -0.0f : -1.0f; break;     // signed zeros
        }
        if (style != 3 && style != 4 && u > 0.99f) v = NAN;
        x.push_back(v);
    }
}

struct ent { float v; int32_t id; };

static int one(int64_t V, int64_t n, int k, int style, bool pen)
{
    std::vector<float> x;
    for (int64_t r = 0; r < n; r++) fill(x, V, style);
    std::vector<int32_t> off(n + 1, 0), pid, pcnt;
    for (int64_t r = 0; r < n && pen; r++) {
        off[r] = (int32_t)pid.size();
        int m = (int)std::min<int64_t>(V, 30);
        for (int i = 0; i < m; i++) {
            int32_t id = (int32_t)(((int64_t)i * 7919 + r * 13) % V);
            if (std::find(pid.begin() + off[r], pid.end(), id) != pid.end()) continue;
            pid.push_back(id);
            pcnt.push_back(1 + i % 4);
        }
    }
    off[n] = (int32_t)pid.size();
    const float rep = 1.3f, fq = 0.3f, pr = 0.7f;
    cu_topk t = {};
    t.x = x.data(); t.x_stride = V; t.V = V; t.n = n; t.k = k; t.slices = si_cu_topk_slices(V, k);
    std::vector<float> dst(2 * k * n, NAN);
    t.dst = dst.data(); t.dst_stride = 2 * k;
    std::vector<uint64_t> cand(n * t.slices * k), pkey(pid.size() + 1);
    std::vector<uint32_t> bitmap(n * ((V + 31) / 32) + 1, 0xdeadbeefu);
    t.cand = cand.data();
    t.repeat = rep; t.freq = fq; t.presence = pr;
    if (pen) {
        t.pen_off = off.data(); t.pen_id = pid.data(); t.pen_cnt = pcnt.data();
        t.pen_key = pkey.data(); t.bitmap = bitmap.data();
        emu_launch(dim3((unsigned)n), dim3(256), 0, [&] { pen_kernel(t); });
    }
    emu_launch(dim3((unsigned)t.slices, (unsigned)n), dim3(256), 0, [&] { slice_kernel(t); });
    emu_launch(dim3((unsigned)n), dim3(256), 0, [&] { merge_kernel(t); });
    int bad = 0;
    for (int64_t r = 0; r < n; r++) {
        std::vector<ent> e(V);
        for (int64_t i = 0; i < V; i++) { float v = x[r * V + i]; e[i] = { v != v ? -INFINITY : v, (int32_t)i }; }
        for (int32_t j = pen ? off[r] : 0; pen && j < off[r + 1]; j++) {
            float l = e[pid[j]].v;
            if (l == -INFINITY) continue;
            l = l <= 0.0f ? l * rep : l / rep;
            float sub = (float)pcnt[j] * fq;
            sub = sub + pr;
            l = l - sub;
            e[pid[j]].v = l != l ? -INFINITY : l;
        }
        std::sort(e.begin(), e.end(), [](const ent &a, const ent &b) { return a.v > b.v || (a.v == b.v && a.id < b.id); });
        for (int i = 0; i < k; i++) {
            float gv = dst[r * 2 * k + i];
            int32_t gid;
            memcpy(&gid, &dst[r * 2 * k + k + i], 4);
            if (memcmp(&gv, &e[i].v, 4) != 0 || gid != e[i].id) {
                if (bad++ < 3)
                    printf("    row %lld entry %d: got (%g, %d), want (%g, %d)\n", (long long)r, i, gv, gid, e[i].v, e[i].id);
            }
        }
    }
    printf("  V %lld n %lld k %d style %d pen %d slices %d: %s\n", (long long)V, (long long)n, k, style, pen, t.slices,
           bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && std::string(argv[1]) == "quick";
    int rc = 0;
    const int64_t vs[] = { 1, 5, 700, 3000 };
    const int ks[] = { 1, 2, 21, 256 };
    for (int64_t V : vs)
        for (int k : ks) {
            if (k > V) continue;
            for (int style = 0; style < 5; style++)
                for (int pen = 0; pen < 2; pen++)
                    rc |= one(V, 2, k, style, pen);
        }
    rc |= one(248320, 1, 1, 0, true);
    rc |= one(248320, 1, 21, 0, true);
    if (!quick) {
        rc |= one(248320, 2, 256, 0, true);
        rc |= one(248320, 1, 256, 3, false);
        rc |= one(60000, 3, 64, 1, true);
    }
    printf("%s\n", rc ? "FAIL" : "OK");
    return rc;
}
