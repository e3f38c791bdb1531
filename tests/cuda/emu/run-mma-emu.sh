#!/bin/sh
# tests/cuda/emu/run-mma-emu.sh — runs the cuda_sm120 int8 matmuls (below)
# and the activation quantiser (cuda_mmq.cu quant_x_kernel) under the
# host emulation with the PTX of ptx_emu.h, against the cpu
# backend's int8 matmul and core's dequantisation (mma_emu.cc).  No GPU.
# Needs gcc/g++ (x86-64).
# Kernels: the GEMM v1 (cuda_mma.cu) and v2 (cuda_mma2.cu, knob
# mma_tile = v2: 128- and 64-row tiles), the decode GEMVs v1 (cuda_mmq.cu)
# and v2 (cuda_gemv.cu, every type, ncols 1..8, experts, stacked matrices).
# The EMU_DRIFT runs let warps drift apart between block barriers.
# Planted bugs: each kernel edited by one line must FAIL a given case,
# so the checks are shown to see such bugs: the GEMM barriers (v1: either
# __syncthreads of mma_kernel's loop; v2: the one per k-tile, and its
# cp.async.wait_group waiting for one group too few), the quantiser's
# rounding, GEMV v1's Q6_K offset and experts, a dozen of GEMV v2's
# indexing; PLANT=no skips them.
# Modes: full (default, ~5 min on 2 cores, every case and plant),
# quick (~1 min: a few cases of each kernel, a few plants of each; what
# tests/cuda/emu.test runs), v2 (only the GEMM v2: its cases and plants,
# ~1.5 min), v2quick (a few of those, ~30 s).
# dp4a (the GEMV v1 and the quantiser alone, all their cases and bugs),
# quad (only cuda_gemvq.cu's cases and bugs).
# Usage: run-mma-emu.sh [builddir] [quick|v2|v2quick|dp4a]
set -e
mode=${2:-full}
case $mode in full|quick|v2|v2quick|dp4a|quad) ;; *) echo "usage: run-mma-emu.sh [builddir] [quick|v2|v2quick|dp4a|quad]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/mma-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# The kernel as host C++: its PTX wrappers cut (ptx_emu.h stands in), the
# launchers cut (<<<>>>), dynamic shared memory from the emulator.
# (The *_src functions print the host C++ of a kernel; the planted-bug
# runs below edit it.)
mma_src() {
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint8_t sm\[\];/uint8_t *sm = (uint8_t *)emu::dyn_smem();/' \
        -e '/^template <int T> static cudaError_t mma_launch/,/^}/d' \
        -e '/^extern "C" int si_cu_matmul_mma/,$d' \
        "$src/cuda_mma.cu"
    cat <<'EOT'
size_t emu_mma_smem() { return SM_TOTAL; }
template <int T> static void emu_mma_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy)
{
    const unsigned gx = (unsigned)((mm->rows + MMA_BM - 1) / MMA_BM);
    emu_launch(dim3(gx, gy), dim3(MMA_THREADS), SM_TOTAL, [&] { mma_kernel<T>(*mm, xq, xd, xs); });
}
void emu_mma(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy)
{
    switch (mm->type) {
    case SI_TYPE_Q8_0: emu_mma_t<SI_TYPE_Q8_0>(mm, xq, xd, xs, gy); break;
    case SI_TYPE_Q4_K: emu_mma_t<SI_TYPE_Q4_K>(mm, xq, xd, xs, gy); break;
    case SI_TYPE_Q5_K: emu_mma_t<SI_TYPE_Q5_K>(mm, xq, xd, xs, gy); break;
    case SI_TYPE_Q6_K: emu_mma_t<SI_TYPE_Q6_K>(mm, xq, xd, xs, gy); break;
    default: abort();
    }
}
EOT
}
# v2 (cuda_mma2.cu, EMU_KERNEL=mma2, EMU_BM=64|128): the same cuts
mma2_src() {
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint8_t sm\[\];/uint8_t *sm = (uint8_t *)emu::dyn_smem();/' \
        -e '/^\/\/ ---- launchers/,$d' \
        "$src/cuda_mma2.cu"
    cat <<'EOT'
size_t emu_mma2_smem(int bm) { return bm == 64 ? m2_smem<64>::TOTAL : m2_smem<128>::TOTAL; }
template <int T, int BM> static void emu_mma2_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    const unsigned gx = (unsigned)((mm->ncols + M2_BN - 1) / M2_BN), gy = (unsigned)((mm->rows + BM - 1) / BM);
    emu_launch(dim3(gx, gy), dim3(M2_THREADS), m2_smem<BM>::TOTAL, [&] { mma2_kernel<T, BM>(*mm, xq, xd, xs); });
}
template <int BM> static void emu_mma2_b(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    switch (mm->type) {
    case SI_TYPE_Q8_0: emu_mma2_t<SI_TYPE_Q8_0, BM>(mm, xq, xd, xs); break;
    case SI_TYPE_Q4_K: emu_mma2_t<SI_TYPE_Q4_K, BM>(mm, xq, xd, xs); break;
    case SI_TYPE_Q5_K: emu_mma2_t<SI_TYPE_Q5_K, BM>(mm, xq, xd, xs); break;
    case SI_TYPE_Q6_K: emu_mma2_t<SI_TYPE_Q6_K, BM>(mm, xq, xd, xs); break;
    default: abort();
    }
}
void emu_mma2(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, int bm)
{
    if (bm == 64) emu_mma2_b<64>(mm, xq, xd, xs);
    else emu_mma2_b<128>(mm, xq, xd, xs);
}
EOT
}
mma_src > "$out/k_mma.cc"
mma2_src > "$out/k_mma2.cc"
# the quantiser and the dp4a GEMV: cuda_mmq.cu without its launchers
# (from mmq_go on), si_cu_mmq_ok kept
quant_src() {
    awk '/^template </ { if (held != "" && !skip) print held; held = $0; next }
         /^static cudaError_t mmq_go/ { skip = 1 } /^extern "C" bool si_cu_mmq_ok/ { skip = 0 }
         /^extern "C" int si_cu_quantize_x/ { skip = 1 }
         { if (held != "" && !skip) print held; held = ""; if (!skip) print }' "$src/cuda_mmq.cu"
    # the one-column GEMV v1 hands to cuda_gemvq.cu (knob gemv_quad), its
    # launchers cut
    # (x's copy and the Q8_0 rings in dynamic shared memory from the
    # emulator; cp.async from ptx_emu.h)
    sed -e '/^\/\/ ---- launchers/,$d' \
        -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint4 gq_xsm\[\];/uint4 *gq_xsm = (uint4 *)emu::dyn_smem();/' \
        "$src/cuda_gemvq.cu"
    cat <<'EOT'
// expert columns (gqe_go): BS blocks a step, R sets of rows a lane group
template <int T, int BS, int R> static void emu_gqe_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    const int64_t rb = (int64_t)GQ_WARPS * (32 / (4 * BS)) * R;
    int64_t gx = (mm->rows + rb - 1) / rb;
    for (int k = 0; k < mm->n_more; k++) gx += (mm->more[k].rows + rb - 1) / rb;
    emu_launch(dim3((unsigned)gx, (unsigned)mm->ncols), dim3(32 * GQ_WARPS), (size_t)mm->in,
               [&] { gqe_kernel<T, BS, R>(*mm, xq, xd, xs); });
}
template <int T, int BS> static void emu_gqe_r(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    if (gqe_rows(mm) == 1) emu_gqe_t<T, BS, 1>(mm, xq, xd, xs);
    else emu_gqe_t<T, BS, 2>(mm, xq, xd, xs);
}
template <int T> static void emu_gqe(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    printf("  (gemvq experts, %d blocks a step)\n", gqe_bs(mm->in));
    switch (gqe_bs(mm->in)) {
    case 8: emu_gqe_r<T, 8>(mm, xq, xd, xs); break;
    case 4: emu_gqe_r<T, 4>(mm, xq, xd, xs); break;
    default: emu_gqe_r<T, 2>(mm, xq, xd, xs); break;
    }
}
// several columns (gq_cols): one row a warp, NT columns compiled
template <int T, int NT> static void emu_gq_n(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    printf("  (gemvq %d columns, NT %d%s)\n", (int)mm->ncols, NT, gq_xs(mm) ? ", x in shared memory" : "");
    const int W = gq_warps(mm);
    int64_t gx = (mm->rows + W - 1) / W;
    for (int k = 0; k < mm->n_more; k++) gx += (mm->more[k].rows + W - 1) / W;
    if (gq_xs(mm))
        emu_launch(dim3((unsigned)gx), dim3(32 * W), (size_t)(mm->in * mm->ncols), [&] { gq_kernel<T, 1, true, NT>(*mm, xq, xd, xs); });
    else
        emu_launch(dim3((unsigned)gx), dim3(32 * W), 0, [&] { gq_kernel<T, 1, false, NT>(*mm, xq, xd, xs); });
}
template <int T, int R> static void emu_gq_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    const int W = T == SI_TYPE_Q8_0 ? GQ_WARPS : gq_warps(mm);   // (as gs_go and gq_go)
    const int64_t rb = (int64_t)W * R;
    int64_t gx = (mm->rows + rb - 1) / rb;
    for (int k = 0; k < mm->n_more; k++) gx += (mm->more[k].rows + rb - 1) / rb;
    if constexpr (T == SI_TYPE_Q6_K || T == SI_TYPE_Q8_0) {   // (knobs gemv_q6r / gemv_q8r, as rg_launch)
        if (getenv(T == SI_TYPE_Q6_K ? "EMU_Q6R" : "EMU_Q8R") != NULL) {
            constexpr int TR = T == SI_TYPE_Q6_K ? CU_TYPE_Q6R : CU_TYPE_Q8R;
            printf("  (gemvq regrouped)\n");
            const uint64_t row = T == SI_TYPE_Q6_K ? (uint64_t)mm->in / 256 * 210 : (uint64_t)mm->in / 32 * 34;
            const uint64_t bytes = (uint64_t)(mm->rows - 1) * mm->row_bytes + row;
            uint8_t *rg = (uint8_t *)aligned_alloc(16, (size_t)((bytes + 15) & ~(uint64_t)15));
            const std::vector<emu::grange> gr0 = emu::granges;   // (the copy is read where the checks look)
            if (!emu::granges.empty()) emu::granges.push_back({ rg, rg + bytes, "regrouped copy" });
            emu_launch(dim3(3), dim3(256), 0, [&] { rg_kernel<T>(mm->w, rg, bytes / (T == SI_TYPE_Q6_K ? 1680 : 2176)); });
            cu_mm m = *mm;
            m.w = rg;
            m.type = TR;
            if (m.ncols > 1) {   // (knob gemv_regroup_cols, as rg_launch: gq_cols)
                switch (gq_nt(&m)) {
                case 2: emu_gq_n<TR, 2>(&m, xq, xd, xs); break;
                case 4: emu_gq_n<TR, 4>(&m, xq, xd, xs); break;
                default: emu_gq_n<TR, 8>(&m, xq, xd, xs); break;
                }
                emu::granges = gr0;
                free(rg);
                return;
            }
            const int rr = gq_rows(&m), Wr = gq_warps(&m);
            const int64_t g = (m.rows + (int64_t)Wr * rr - 1) / ((int64_t)Wr * rr);
            const size_t xsr = gq_xs(&m) ? (size_t)m.in : 0;
            if (rr == 2 && xsr) emu_launch(dim3((unsigned)g), dim3(32 * Wr), xsr, [&] { gq_kernel<TR, 2, true, 1>(m, xq, xd, xs); });
            else if (rr == 2) emu_launch(dim3((unsigned)g), dim3(32 * Wr), 0, [&] { gq_kernel<TR, 2, false, 1>(m, xq, xd, xs); });
            else if (xsr) emu_launch(dim3((unsigned)g), dim3(32 * Wr), xsr, [&] { gq_kernel<TR, 1, true, 1>(m, xq, xd, xs); });
            else emu_launch(dim3((unsigned)g), dim3(32 * Wr), 0, [&] { gq_kernel<TR, 1, false, 1>(m, xq, xd, xs); });
            emu::granges = gr0;
            free(rg);
            return;
        }
    }
    if constexpr (T == SI_TYPE_Q8_0) {   // (R: gs_rows; NT: gq_nt, as gs_cols)
        const size_t sm = GS_SMEM(mm->in, R, mm->ncols);
        emu_ptx::smem_bytes = sm;
        if (mm->ncols > 1) printf("  (gemvq %d columns, NT %d)\n", (int)mm->ncols, gq_nt(mm));
        switch (gq_nt(mm)) {
        case 2: emu_launch(dim3((unsigned)gx), dim3(32 * GQ_WARPS), sm, [&] { gs_kernel<R, 2>(*mm, xq, xd); }); break;
        case 4: emu_launch(dim3((unsigned)gx), dim3(32 * GQ_WARPS), sm, [&] { gs_kernel<R, 4>(*mm, xq, xd); }); break;
        case 8: emu_launch(dim3((unsigned)gx), dim3(32 * GQ_WARPS), sm, [&] { gs_kernel<R, 8>(*mm, xq, xd); }); break;
        default: emu_launch(dim3((unsigned)gx), dim3(32 * GQ_WARPS), sm, [&] { gs_kernel<R, 1>(*mm, xq, xd); }); break;
        }
        emu_ptx::check_drained();
    } else if (T == SI_TYPE_Q6_K && g6_ok(mm)) {   // (as gq_launch: staged Q6_K, GQ_WARPS)
        const int64_t rb6 = (int64_t)GQ_WARPS * R;
        int64_t gx6 = (mm->rows + rb6 - 1) / rb6;
        for (int k = 0; k < mm->n_more; k++) gx6 += (mm->more[k].rows + rb6 - 1) / rb6;
        const size_t sm = G6_SMEM(mm->in, R);
        emu_ptx::smem_bytes = sm;
        printf("  (gemvq q6 staged)\n");
        emu_launch(dim3((unsigned)gx6), dim3(32 * GQ_WARPS), sm, [&] { g6_kernel<R>(*mm, xq, xd); });
        emu_ptx::check_drained();
    } else if (gq_xs(mm)) {
        emu_launch(dim3((unsigned)gx), dim3(32 * W), (size_t)mm->in, [&] { gq_kernel<T, R, true, 1>(*mm, xq, xd, xs); });
    } else {
        emu_launch(dim3((unsigned)gx), dim3(32 * W), 0, [&] { gq_kernel<T, R, false, 1>(*mm, xq, xd, xs); });
    }
}
void emu_quant_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d, float *s, unsigned blocks)
{
    emu_launch(dim3(blocks), dim3(256), 0, [&] { quant_x_kernel(x, x_stride, in, ncx, q, d, s); });
}
// the grid of mmq_go: MMQ_WARPS rows per block of every product of the
// launch, ceil(ncols / NT) columns; U units a lane at once (mmq_launch:
// gemv_unroll at one column, else MMQ_UNROLL; 2 at more columns)
template <int T, int NT, int U, int L = 32, bool O = false> static void emu_mmq_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    const int64_t rb = MMQ_WARPS * (32 / L);
    int64_t gx = (mm->rows + rb - 1) / rb;
    for (int k = 0; k < mm->n_more; k++) gx += (mm->more[k].rows + rb - 1) / rb;
    const unsigned gy = (unsigned)((mm->ncols + NT - 1) / NT);
    emu_launch(dim3((unsigned)gx, gy), dim3(32 * MMQ_WARPS), 0, [&] { mmq_kernel<T, NT, U, false, L, O>(*mm, xq, xd, xs); });
}
template <int T> static void emu_mmq_n(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    if (mm->gemv_quad && si_cu_gemvq_ok(mm)) {   // (as si_cu_matmul_q8_v1 and si_cu_gemvq)
        printf("  (gemvq)\n");
        if constexpr (T != SI_TYPE_Q8_0) {
            if (mm->expert != NULL) {
                emu_gqe<T>(mm, xq, xd, xs);
                return;
            }
            if (mm->ncols > 1 && !(T == SI_TYPE_Q6_K && getenv("EMU_Q6R") != NULL)) {   // (as gq_launch)
                switch (gq_nt(mm)) {
                case 2: emu_gq_n<T, 2>(mm, xq, xd, xs); return;
                case 4: emu_gq_n<T, 4>(mm, xq, xd, xs); return;
                default: emu_gq_n<T, 8>(mm, xq, xd, xs); return;
                }
            }
        }
        const int r = T == SI_TYPE_Q8_0 ? gs_rows(mm) : gq_rows(mm);
        if (r == 4) emu_gq_t<T, 4>(mm, xq, xd, xs);
        else if (r == 2) emu_gq_t<T, 2>(mm, xq, xd, xs);
        else emu_gq_t<T, 1>(mm, xq, xd, xs);
        return;
    }
    if (T == SI_TYPE_Q4_K && mm->gemv_wide && mm->ncols == 1) {   // 32-byte units, U = 2
        int64_t gx = (mm->rows + MMQ_WARPS - 1) / MMQ_WARPS;
        for (int k = 0; k < mm->n_more; k++) gx += (mm->more[k].rows + MMQ_WARPS - 1) / MMQ_WARPS;
        emu_launch(dim3((unsigned)gx, 1), dim3(32 * MMQ_WARPS), 0,
                   [&] { mmq_kernel<SI_TYPE_Q4_K, 1, 2, true>(*mm, xq, xd, xs); });
        return;
    }
    const int u = mm->gemv_unroll > 0 ? mm->gemv_unroll : MMQ_UNROLL;
    if constexpr (T == SI_TYPE_Q4_K || T == SI_TYPE_Q5_K)
        if (mm->gemv_order && mm->ncols == 1 && mm->expert == NULL) {   // lanes share the sub-block
            emu_mmq_t<T, 1, MMQ_UNROLL, 32, true>(mm, xq, xd, xs);
            return;
        }
    if ((mm->expert != NULL || mm->ncols == 1) && mm->gemv_unroll <= 0 &&
        mmq_row_lanes(mm->in / mmq_traits<T>::units_per_elem_div) < 32) {   // narrow rows share a warp
        switch (mmq_row_lanes(mm->in / mmq_traits<T>::units_per_elem_div)) {
        case 4: emu_mmq_t<T, 1, MMQ_UNROLL, 4>(mm, xq, xd, xs); break;
        case 8: emu_mmq_t<T, 1, MMQ_UNROLL, 8>(mm, xq, xd, xs); break;
        default: emu_mmq_t<T, 1, MMQ_UNROLL, 16>(mm, xq, xd, xs); break;
        }
    }
    else if (mm->expert != NULL || mm->ncols == 1) {
        if (u >= 8) emu_mmq_t<T, 1, 8>(mm, xq, xd, xs);
        else if (u >= 4) emu_mmq_t<T, 1, 4>(mm, xq, xd, xs);
        else emu_mmq_t<T, 1, 2>(mm, xq, xd, xs);
    }
    else if (mm->ncols == 2) emu_mmq_t<T, 2, 2>(mm, xq, xd, xs);
    else if (mm->ncols <= 4) emu_mmq_t<T, 4, 2>(mm, xq, xd, xs);
    else emu_mmq_t<T, 8, 2>(mm, xq, xd, xs);
}
void emu_mmq(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    switch (mm->type) {
    case SI_TYPE_Q8_0: emu_mmq_n<SI_TYPE_Q8_0>(mm, xq, xd, xs); break;
    case SI_TYPE_Q4_K: emu_mmq_n<SI_TYPE_Q4_K>(mm, xq, xd, xs); break;
    case SI_TYPE_Q5_K: emu_mmq_n<SI_TYPE_Q5_K>(mm, xq, xd, xs); break;
    case SI_TYPE_Q6_K: emu_mmq_n<SI_TYPE_Q6_K>(mm, xq, xd, xs); break;
    default: abort();
    }
}
EOT
}
quant_src > "$out/k_quant.cc"
# the decode GEMV v2: cuda_gemv.cu without its launchers (from the
# "---- launchers" line on, si_cu_gemv_ok kept); emu_gemv repeats gemv_go's
# grid.
gemv_src() {
    sed -e '/^\/\/ ---- launchers/,/^extern "C" bool si_cu_gemv_ok/{/^extern "C" bool si_cu_gemv_ok/!d;}' \
        -e '/^extern "C" int si_cu_matmul_q8/,$d' "$src/cuda_gemv.cu"
    cat <<'EOT'
template <int T, int NT, int R> static void emu_gemv_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy)
{
    const int lg = gv_lanes_log2(mm);
    int64_t gx, gy0;
    gv_grid(mm, NT, R, lg, &gx, &gy0);
    if (gy == 0) gy = (unsigned)gy0;
    if (getenv("EMU_SAY")) printf("  (R %d, lanes %d%s)\n", R, 1 << lg, gv_staged_ok(mm) ? ", staged" : "");
    if (gv_staged_ok(mm))
        emu_launch(dim3((unsigned)gx, gy), dim3(32 * GEMV_WARPS), 0, [&] { gemv_kernel<T, NT, R, true>(*mm, xq, xd, xs, lg); });
    else
        emu_launch(dim3((unsigned)gx, gy), dim3(32 * GEMV_WARPS), 0, [&] { gemv_kernel<T, NT, R, false>(*mm, xq, xd, xs, lg); });
}
template <int T> static void emu_gemv_n(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy)
{
    if (mm->expert != NULL || mm->ncols == 1) {
        if (gv_rows1(mm, gv_lanes_log2(mm)) == 1) emu_gemv_t<T, 1, 1>(mm, xq, xd, xs, gy);
        else emu_gemv_t<T, 1, gv_rows<1>::R>(mm, xq, xd, xs, gy);
    }
    else if (mm->ncols == 2) emu_gemv_t<T, 2, gv_rows<2>::R>(mm, xq, xd, xs, gy);
    else if (mm->ncols <= 4) emu_gemv_t<T, 4, gv_rows<4>::R>(mm, xq, xd, xs, gy);
    else emu_gemv_t<T, 8, gv_rows<8>::R>(mm, xq, xd, xs, gy);
}
void emu_gemv(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs, unsigned gy)
{
    switch (mm->type) {
    case SI_TYPE_Q8_0: emu_gemv_n<SI_TYPE_Q8_0>(mm, xq, xd, xs, gy); break;
    case SI_TYPE_Q4_K: emu_gemv_n<SI_TYPE_Q4_K>(mm, xq, xd, xs, gy); break;
    case SI_TYPE_Q5_K: emu_gemv_n<SI_TYPE_Q5_K>(mm, xq, xd, xs, gy); break;
    case SI_TYPE_Q6_K: emu_gemv_n<SI_TYPE_Q6_K>(mm, xq, xd, xs, gy); break;
    default: abort();
    }
}
EOT
}
gemv_src > "$out/k_gemv.cc"
grep -q 'gemv_kernel' "$out/k_gemv.cc" && ! grep -q '<<<' "$out/k_gemv.cc" && grep -q 'si_cu_gemv_ok' "$out/k_gemv.cc" || {
    echo "run-mma-emu: cuda_gemv.cu changed shape; update gemv_src" >&2; exit 1; }
grep -q 'emu::dyn_smem' "$out/k_mma.cc" && ! grep -q 'asm' "$out/k_mma.cc" && grep -q 'quant_x_kernel' "$out/k_quant.cc" &&
    grep -q 'emu::dyn_smem' "$out/k_mma2.cc" && ! grep -q 'asm\|<<<' "$out/k_mma2.cc" || {
    echo "run-mma-emu: cuda_mma.cu / cuda_mma2.cu / cuda_mmq.cu changed shape; update the sed lines" >&2; exit 1; }
F="-std=c++17 -O2 -g -I$here -I$src -I$top/core/include -I$top/core -I$top/backends/cpu -Wno-unused-function -fsanitize=alignment -fno-sanitize-recover=alignment"
C="-std=c11 -O2 -g -I$top/core/include -I$top/core -I$top/backends/cpu"
kobjs="k_mma k_mma2 k_quant k_gemv"
for f in $kobjs; do g++ $F -c "$out/$f.cc" -o "$out/$f.o"; done
# the references: the cpu backend's int8 path (AVX2 kernels stubbed: simd
# off) and core's dequantisation
cat > "$out/stubs.c" <<'EOT'
#include <stdlib.h>
#include "cpu_internal.h"
float cpu_dot_row8_avx2(const cpu_row8 *w, const cpu_q8 *a, int64_t row, int64_t in) { (void)w; (void)a; (void)row; (void)in; abort(); }
void cpu_dot_row8_x4_avx2(const cpu_row8 *w, const cpu_q8 *a, const int64_t rows[4], int64_t in, float out[4]) { (void)w; (void)a; (void)rows; (void)in; (void)out; abort(); }
float cpu_dot_f32_avx2(const float *a, const float *b, int64_t n) { (void)a; (void)b; (void)n; abort(); }
void cpu_f16_to_f32_avx2(const uint8_t *src, float *dst, int64_t n) { (void)src; (void)dst; (void)n; abort(); }
void cpu_unpack_q45k_avx2(const uint8_t *qs, const uint8_t *qh, int8_t *q) { (void)qs; (void)qh; (void)q; abort(); }
void cpu_unpack_q6k_avx2(const uint8_t *ql, const uint8_t *qh, int8_t *q) { (void)ql; (void)qh; (void)q; abort(); }
float cpu_dot_packed_avx2(uint32_t type, const uint8_t *x, const cpu_q8 *a, int64_t row, int64_t in) { (void)type; (void)x; (void)a; (void)row; (void)in; abort(); }
EOT
objs=""
for c in "$top/backends/cpu/cpu_quant_dot.c" "$top/core/quant.c" "$top/core/quant_k.c" "$top/core/quant_iq.c" "$top/core/fp16.c" "$top/core/types.c" "$out/stubs.c"; do
    o="$out/$(basename "$c" .c).o"; gcc $C -c "$c" -o "$o"; objs="$objs $o"
done
g++ $F -c "$here/mma_emu.cc" -o "$out/main.o"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
link() {   # link OUTPUT: the kernels' objects, k_bug.o for $bug
    ko=""; for f in $kobjs; do if [ "$f" = "$bug" ]; then ko="$ko $out/k_bug.o"; else ko="$ko $out/$f.o"; fi; done
    g++ $F "$out/main.o" "$out/emu.o" $ko $objs -o "$1"
}
bug=none; link "$out/mma_emu"
rc=0
run() { "$out/mma_emu" "$@" || rc=1; }
# Planted bugs: KERNEL (an EMU_KERNEL: mma, mma2, gemv, or dp4a, whose
# source also holds the quantiser) with one edit must FAIL the given case
# (the checks below would see that bug).
#   plant KERNEL NAME SED-EXPR "ENV" ARGS...
plant() {
    bug=k_$1; [ "$1" = dp4a ] && bug=k_quant; name=$1/$2; expr=$3; envs=$4; shift 4
    ${bug#k_}_src | sed -e "$expr" > "$out/k_bug.cc"
    if cmp -s "$out/k_bug.cc" "$out/$bug.cc"; then echo "plant $name: the edit did not apply (kernel changed?)"; rc=1; return; fi
    g++ $F -O1 -c "$out/k_bug.cc" -o "$out/k_bug.o"
    link "$out/mma_bug"
    if env EMU_KERNEL=${name%%/*} $envs "$out/mma_bug" "$@" > "$out/bug.log" 2>&1; then
        echo "plant $name: NOT detected by $envs $*"; rc=1
    else
        # (a FAIL, or the emulator stopping on a misuse it checks)
        echo "plant $name: detected ($(grep -c FAIL "$out/bug.log") FAIL lines; $({ grep -m1 '^emu:' "$out/bug.log" || tail -1 "$out/bug.log"; } | cut -c1-90))"
    fi
}
# the GEMMs' barriers: warps drifting apart see each missing one
mma_plants() {
    plant mma no-sync-landed 's/__syncthreads();   \/\/ W(kt) stored and X(kt) landed, for every thread/;/' "EMU_DRIFT=1" q5_k 77 2048 70 1 1
    [ "$1" = all ] || return 0
    plant mma no-sync-read 's/__syncthreads();   \/\/ every warp is done reading W(kt)/;/' "EMU_DRIFT=1" q5_k 77 2048 70 1 1
}
mma2_plants() {
    plant mma2 no-sync 's/^        __syncthreads();$/;/' "EMU_DRIFT=1" q4_k 130 1024 70
    plant mma2 wait-short 's/cp_async_wait_group<M2_XS - 2>()/cp_async_wait_group<M2_XS - 1>()/' "" q4_k 130 1024 70
    [ "$1" = all ] || return 0
    plant mma2 no-sync-bm64 's/^        __syncthreads();$/;/' "EMU_DRIFT=3 EMU_BM=64" q6_k 70 512 140
}
# cuda_gemvq.cu's (knob gemv_quad)
quad_plants() {
    plant dp4a quad-q5-qh 's/lo |= ((w.e\[k\] >> (2 \* p))/lo |= ((w.e[k] >> (2 * p + 1))/' "EMU_QUAD=1" q5_k 9 4096 1
    [ "$1" = all ] || return 0
    plant dp4a quad-next 's/(st + 1) \* 8 \* gq_traits/st * 8 * gq_traits/' "EMU_QUAD=1" q4_k 9 4096 1
    plant dp4a quad-q6-scale 's/(w.e\[1\] >> (o + 16))/(w.e[1] >> o)/' "EMU_QUAD=1 EMU_NOST6=1" q6_k 9 2048 1
    plant dp4a quad-scale-pick 's/const unsigned s = 16u \* (unsigned)(g \& 1);/const unsigned s = 0;/' "EMU_QUAD=1" q5_k 9 2048 1
    plant dp4a quad-min 's/acc -= (dmin/acc += (dmin/' "EMU_QUAD=1" q4_k 9 2048 1
    plant dp4a quad-store 's/if (lane == 0 \&\& r0 + i < rows)/if (lane == 0)/' "EMU_QUAD=1 EMU_ROWS=2 EMU_NOST6=1" q6_k 37 2048 1
    plant dp4a quad-q6-odd 's/gq_load<T>(B, p, bl \& 1, w);/gq_load<T>(B, p, 0, w);/' "EMU_QUAD=1 EMU_NOST6=1" q6_k 9 2048 1
    # knob gemv_q6r: a lane's qh run, a block's d, the copy's scale bytes
    plant dp4a q6r-qh 's/cu_ld16(q + 128 + 32 \* h + 16 \* k, w.h);/cu_ld16(q + 128 + 16 * k, w.h);/' "EMU_QUAD=1 EMU_Q6R=1" q6_k 9 4096 1
    plant dp4a q6r-d 's/(G + 1664 + 2 \* bl)/(G + 1664)/' "EMU_QUAD=1 EMU_Q6R=1" q6_k 9 2048 1
    plant dp4a q6r-copy 's/192 + (o - 1536) % 16/192 + (o - 1536) % 8/' "EMU_QUAD=1 EMU_Q6R=1" q6_k 9 4096 1
    # knob gemv_q8r: block 2l + 1's qs, its d, the copy's qs offset
    plant dp4a q8r-second 's/cu_ld16(G + 64 \* l + 32, w.e);/cu_ld16(G + 64 * l, w.e);/' "EMU_QUAD=1 EMU_Q8R=1" q8_0 9 4096 1
    plant dp4a q8r-d 's/w.h\[0\], w.h\[0\] >> 16,/w.h[0], w.h[0],/' "EMU_QUAD=1 EMU_Q8R=1" q8_0 9 2048 1
    plant dp4a q8r-copy 's/34 \* (o \/ 32) + 2 + o % 32/34 * (o \/ 32) + o % 32/' "EMU_QUAD=1 EMU_Q8R=1" q8_0 9 4096 1
    # gqe_kernel: the column's expert, its x column, the row sets' stride,
    # the part's output stride, the lane group's reduction
    # gq_kernel's columns: column c's x copy, its scales, its output row
    # g6_kernel (staged Q6_K): the ring's unit, a block's parity, the store
    plant dp4a q6s-ring 's/ring + (k % nb) \* G6_UNIT + bl/ring + bl/' "EMU_QUAD=1" q6_k 9 4096 1
    plant dp4a q6s-odd 's/gq_load<SI_TYPE_Q6_K, true>(\(.*\), p, bl \& 1, w);/gq_load<SI_TYPE_Q6_K, true>(\1, p, 0, w);/' "EMU_QUAD=1" q6_k 9 2048 1
    plant dp4a q6s-store 's/if (lane == 0 \&\& r0 + i < g.rows)$/if (lane == 0)/' "EMU_QUAD=1 EMU_ROWS=2" q6_k 37 4096 1
    plant dp4a quadn-xcol 's/gq_xsm + (size_t)c \* (mm.in >> 4)/gq_xsm/' "EMU_QUAD=1" q4_k 13 4096 5
    plant dp4a quadn-xd 's/xd + (size_t)c \* nb,/xd,/' "EMU_QUAD=1" q6_k 13 2048 3
    plant dp4a quadn-fill 's/xsm\[c \* nu + gq_swz(u)\]/xsm[gq_swz(u)]/' "EMU_QUAD=1" q5_k 13 2048 4
    plant dp4a quadn-store 's/y\[(size_t)c \* g.ys + r0 + i\]/y[r0 + i]/' "EMU_QUAD=1" q4_k 13 2048 2
    plant dp4a stagen-xcol 's/gq_xsm + (size_t)c \* (mm.in >> 4), xd + (size_t)c \* nxb/gq_xsm, xd + (size_t)c * nxb/' "EMU_QUAD=1" q8_0 13 2048 4
    plant dp4a stagen-ring 's/(uint8_t \*)gq_xsm + (size_t)nt \* mm.in/(uint8_t *)gq_xsm + mm.in/' "EMU_QUAD=1" q8_0 13 2048 4
    plant dp4a quade-expert 's/g.w + (size_t)mm.expert\[j\] \* mm.expert_bytes/g.w/' "EMU_QUAD=1 EMU_EXPERTS=5" q5_k 33 512 8
    plant dp4a quade-xcol 's/c = j \/ mm.x_div;/c = 0;/' "EMU_QUAD=1 EMU_EXPERTS=5" q5_k 33 512 8
    plant dp4a quade-rowset 's/const int r = rw + RPW \* i;$/const int r = rw + i;/' "EMU_QUAD=1 EMU_EXPERTS=5" q4_k 37 512 4
    plant dp4a quade-ys 's/g.y\[j \* g.ys + r\] = s;/g.y[r] = s;/' "EMU_QUAD=1 EMU_EXPERTS=5 EMU_PARTS=2" q4_k 37 2048 8 8
    plant dp4a quade-reduce 's/for (int o = LPR \/ 2; o > 0/for (int o = LPR \/ 4; o > 0/' "EMU_QUAD=1 EMU_EXPERTS=5" q5_k 33 1024 3
    # x's copy in shared memory: stored unswizzled, read before it is whole
    plant dp4a quad-xs-swizzle 's/xsm\[gq_swz(u)\] = /xsm[u] = /' "EMU_QUAD=1" q4_k 9 4096 1
    plant dp4a quad-xs-sync 's/__syncthreads();   \/\/ x.s copy whole.*/;/' "EMU_QUAD=1 EMU_NOST6=1" q6_k 9 4096 1
    # the staged Q8_0 kernel: a unit read before it landed, a buffer
    # refilled before every lane is done with it, block 2l's qs, 2l+1's d
    plant dp4a stage-wait 's/case 2: cp_async_wait_group<1>()/case 2: cp_async_wait_group<2>()/' "EMU_QUAD=1" q8_0 9 2048 1
    plant dp4a stage-wait4 's/default: cp_async_wait_group<GS_NB - 1>()/default: cp_async_wait_group<GS_NB>()/' "EMU_QUAD=1 EMU_ROWS=4" q8_0 9 4096 1
    plant dp4a stage-syncwarp 's/__syncwarp();   \/\/ every lane is done.*/;/' "EMU_QUAD=1 EMU_ROWS=4" q8_0 9 4096 1
    plant dp4a stage-landed 's/__syncwarp();   \/\/ everyone.s copies.*/;/' "EMU_QUAD=1" q8_0 9 4096 1
    plant dp4a stage-qs 's/__funnelshift_r(w\[k\], w\[k + 1\], 16)/w[k]/' "EMU_QUAD=1" q8_0 9 2048 1
    plant dp4a stage-d1 's/w\[0\], w\[8\] >> 16,/w[0], w[8],/' "EMU_QUAD=1 EMU_ROWS=4" q8_0 13 2048 1
}
# the GEMV v1 and the quantiser (checked bit for bit in every run)
dp4a_plants() {
    quad_plants "$1"
    plant dp4a quant-sum 's/sum + c \* nb + i \/ 32)/sum + c * nb)/' "" q4_k 9 256 1
    plant dp4a part-blocks 's/^        bx -= nbk;/;/' "EMU_PARTS=4" q8_0 41 512 2
    [ "$1" = all ] || return 0
    plant dp4a q6-offset 's/(float)(sa - 32 \* sxa)/(float)(sa - 31 * sxa)/' "" q6_k 33 256 3
    plant dp4a no-expert 's/w += (uint64_t)mm.expert\[j0\] \* mm.expert_bytes;/;/' "EMU_EXPERTS=5" q8_0 9 512 4
    plant dp4a part-rows 's/rows = mm.more\[k\].rows;/;/' "EMU_PARTS=3" q4_k 37 512 1
    plant dp4a order-half 's/+ (vv \& 1);/+ 0;/' "EMU_ORDER=1" q4_k 33 4096 1
    plant dp4a row-lanes 's/for (int o = L \/ 2; o > 0/for (int o = L \/ 4; o > 0/' "" q5_k 77 512 1
    plant dp4a wide-half 's/cu_ld16(B + 32 + 32 \* g, v + 4);/cu_ld16(B + 16 + 32 * g, v + 4);/' "EMU_WIDE=1" q4_k 9 512 1
    plant dp4a q45-scale 's/cu_scale_min_k4w(hd\[1\], hd\[2\], hd\[3\], 2 \* g + 1, sc1, m1)/cu_scale_min_k4w(hd[1], hd[2], hd[3], 2 * g, sc1, m1)/' "" q5_k 19 512 3
}
gemv_plants() {
    plant gemv no-min 's/if (h == 0) {/if (h == 2) {/' "" q5_k 37 512 1
    plant gemv staged-no-syncwarp 's/__syncwarp();   \/\/ every lane is done with the previous stage/;/' "" q8_0 37 2048 1
    [ "$1" = all ] || return 0
    plant gemv prefetch-same 's/gv_load<T>(w\[q\], u + G, i, nxt\[q\])/gv_load<T>(w[q], u, i, nxt[q])/' "EMU_DIRECT=1" q4_k 37 4096 1
    plant gemv q6-offset 's/- 32 \* gv_xsum(x1)/- 31 * gv_xsum(x1)/' "" q6_k 37 512 2
    plant gemv store-guard 's/t < nt \&\& r < mm.rows)/t < nt)/' "EMU_ROWS=4" q4_k 37 512 1
    plant gemv row-slots 's/w\[q\] = gv_row(mm, r < mm.rows ? r : mm.rows - 1, e);/w[q] = gv_row(mm, r0 < mm.rows ? r0 : mm.rows - 1, e);/' "EMU_ROWS=4" q6_k 37 4096 1
    plant gemv no-expert 's/mm.expert\[j0\] : 0/0 : 0/' "EMU_EXPERTS=5" q4_k 33 512 8
    plant gemv no-stack 's/r >= mm.rows_split/r > mm.rows/' "EMU_STACK=1" q8_0 41 512 1
    plant gemv scale-hi 's/cu_scale_min_k4w(w.h\[1\], w.h\[2\], w.h\[3\], 2 \* g + 1, sc1, m1)/cu_scale_min_k4w(w.h[1], w.h[2], w.h[3], 2 * g, sc1, m1)/' "" q4_k 19 512 1
    plant gemv staged-next 's/(st + 1) \* S::BYTES/st * S::BYTES/' "" q6_k 21 4096 1
    plant gemv staged-q5-qh 's/B + 16 + 16 \* h);$/B + 16);/' "" q5_k 21 2048 1
    plant gemv staged-q6-scale 's/scs\[k + 2 \* (s + 2)\] << 24/scs[k + 2 * s] << 24/' "" q6_k 21 2048 1
}
# the dp4a decode GEMV v1 (EMU_KERNEL=dp4a: <= 8 columns) against the same
# references
dp4a() { EMU_KERNEL=dp4a "$out/mma_emu" "$@" || rc=1; }
# v1's one-column products through cuda_gemvq.cu (knob gemv_quad): every
# type it takes, rows of 1..6 steps, 1 and 2 rows a warp, rows cut into
# products (cu_mm.more), row counts that leave a block part empty; the run
# must say it went there
quad() {
    EMU_QUAD=1 EMU_KERNEL=dp4a "$out/mma_emu" "$@" > "$out/quad.log" 2>&1 || { rc=1; cat "$out/quad.log"; return; }
    grep -q '(gemvq)' "$out/quad.log" || { echo "quad $*: did not run cuda_gemvq.cu"; rc=1; }
    grep -E 'max |OK|FAIL' "$out/quad.log" | tail -2
}
# expert columns (gemv_quad_experts, gqe_kernel): the 35b's shapes (gate
# and up of 2048 as two products, 8 picks of one token; the 512-wide
# down, a column its own x), 4 blocks a step, rows that leave blocks part
# empty, 1 and 2 row sets, bs 8 (64 columns); the run must say it went there
quade() {
    EMU_QUAD=1 EMU_KERNEL=dp4a "$out/mma_emu" "$@" > "$out/quad.log" 2>&1 || { rc=1; cat "$out/quad.log"; return; }
    grep -q '(gemvq experts' "$out/quad.log" || { echo "quade $*: did not run gqe_kernel"; rc=1; }
    grep -E 'max |OK|FAIL' "$out/quad.log" | tail -2
}
quade_cases() {
    EMU_PARTS=2 EMU_EXPERTS=6 quade q4_k 37 2048 8 8; EMU_EXPERTS=6 EMU_EARLY=1 quade q5_k 45 512 8
    [ "$1" = quick ] && return 0
    for t in q4_k q5_k; do
        EMU_EXPERTS=5 quade $t 13 1024 3; EMU_EXPERTS=5 EMU_ROWS=1 quade $t 33 512 5
        EMU_EXPERTS=4 EMU_PARTS=3 quade $t 21 4096 4 2; EMU_EXPERTS=7 quade $t 9 512 64
    done
    EMU_EXPERTS=5 quade q6_k 21 2048 3; EMU_EXPERTS=5 EMU_ROWS=1 quade q6_k 7 4096 2
    EMU_EXPERTS=9 quade q4_k 5 2048 64 8; EMU_EXPERTS=5 EMU_EARLY=1 EMU_PARTS=2 quade q4_k 33 2048 8 8
    # the knob off, and Q6_K rows that are not 16-byte aligned: v1
    EMU_QUAD=1 EMU_NOQE=1 EMU_EXPERTS=5 dp4a q5_k 33 512 8; EMU_QUAD=1 EMU_EXPERTS=5 dp4a q6_k 9 512 3
}
# several columns (gemv_quad_cols, gq_kernel's NT): 2..8 columns of 1..6
# steps, x in shared memory and (past 48 KB of x, or gemv_xsmem = false)
# from global, products of one launch, 8 warps a block; Q8_0 stays on v1
quadn() {
    EMU_QUAD=1 EMU_KERNEL=dp4a "$out/mma_emu" "$@" > "$out/quad.log" 2>&1 || { rc=1; cat "$out/quad.log"; return; }
    grep -q '(gemvq [0-9]* columns' "$out/quad.log" || { echo "quadn $*: did not run gq_kernel's columns"; rc=1; }
    grep -E 'max |OK|FAIL' "$out/quad.log" | tail -2
}
quadn_cases() {
    quadn q4_k 37 4096 8; quadn q6_k 21 2048 3
    [ "$1" = quick ] && return 0
    for t in q4_k q5_k q6_k; do
        quadn $t 37 2048 2; quadn $t 13 4096 5; quadn $t 9 12288 4; quadn $t 3 6144 8
        EMU_PARTS=3 quadn $t 21 2048 7; EMU_NOXS=1 quadn $t 9 4096 6; EMU_WARPS=8 quadn $t 45 2048 8
    done
    # Q8_0 (gs_kernel's columns): 1..4 steps, 1/2/4 rows a warp
    quadn q8_0 37 2048 8; quadn q8_0 13 4096 3; EMU_ROWS=4 quadn q8_0 21 2048 5; EMU_ROWS=1 quadn q8_0 9 4096 2
    EMU_PARTS=3 quadn q8_0 21 2048 6
    # knob off, and Q8_0 whose x and rings pass 48 KB: v1
    EMU_QUAD=1 EMU_NOQN=1 dp4a q4_k 9 4096 8; EMU_QUAD=1 dp4a q8_0 9 4096 8
}
# one-column Q6_K staged (gemv_staged_q6, g6_kernel): 1..10 steps a row,
# 1 and 2 rows a warp, products of one launch; past 20480 and with the
# knob off gq_kernel
quad6() {
    quad "$@"
    grep -q '(gemvq q6 staged)' "$out/quad.log" || { echo "quad6 $*: did not run g6_kernel"; rc=1; }
}
quad6_cases() {
    quad6 q6_k 37 2048 1; quad6 q6_k 9 4096 1
    [ "$1" = quick ] && return 0
    quad6 q6_k 3 12288 1; quad6 q6_k 2 20480 1; EMU_ROWS=1 quad6 q6_k 13 4096 1
    EMU_PARTS=3 quad6 q6_k 21 2048 1; EMU_PARTS=4 EMU_ROWS=1 quad6 q6_k 19 4096 1
    quad q6_k 2 22528 1; EMU_NOST6=1 quad q6_k 9 4096 1
    if grep -q '(gemvq q6 staged)' "$out/quad.log"; then echo "quad q6_k: EMU_NOST6 still staged"; rc=1; fi
}
# knob gemv_q6r: the regrouped copy (q6r_kernel) on gq_kernel<CU_TYPE_Q6R>:
# 1..6 steps a row, 1 and 2 rows a lane group (2048: two), rows that leave
# blocks part empty, x from global memory too; the run must say it went there
quad6r() {
    EMU_Q6R=1 quad "$@"
    grep -q '(gemvq regrouped)' "$out/quad.log" || { echo "quad6r $*: did not run the regrouped copy"; rc=1; }
}
quad6r_cases() {
    quad6r q6_k 37 2048 1; quad6r q6_k 9 4096 1; EMU_Q8R=1 quad6r q8_0 37 2048 1; EMU_Q8R=1 quad6r q8_0 9 4096 1
    quad6r q6_k 37 4096 2; EMU_Q8R=1 quad6r q8_0 9 4096 3
    [ "$1" = quick ] && return 0
    quad6r q6_k 3 12288 1; quad6r q6_k 2 6144 1; EMU_ROWS=2 quad6r q6_k 13 4096 1; EMU_NOXS=1 quad6r q6_k 5 12288 1
    EMU_WARPS=8 quad6r q6_k 37 4096 1
    EMU_Q8R=1 quad6r q8_0 3 12288 1; EMU_Q8R=1 EMU_NOXS=1 quad6r q8_0 5 6144 1; EMU_Q8R=1 EMU_WARPS=8 quad6r q8_0 13 4096 1
    # knob gemv_regroup_cols: the copies at 2..8 columns (gq_cols)
    quad6r q6_k 37 4096 2; quad6r q6_k 9 12288 3; EMU_NOXS=1 quad6r q6_k 13 4096 5
    EMU_Q8R=1 quad6r q8_0 37 2048 2; EMU_Q8R=1 quad6r q8_0 9 2048 8
}
quad_cases() {
    if [ "$1" = quick ]; then
        quadn_cases quick
        quad6_cases quick
        quad6r_cases quick
        quad q4_k 37 2048 1; quad q6_k 9 4096 1; EMU_PARTS=3 quad q5_k 21 2048 1; quad q8_0 9 4096 1
        quade_cases quick
        return 0
    fi
    quadn_cases
    quade_cases
    quad6_cases
    quad6r_cases
    for t in q4_k q5_k q6_k; do
        quad $t 37 2048 1; quad $t 9 4096 1; quad $t 3 12288 1; quad $t 1 6144 1
        EMU_ROWS=2 quad $t 37 4096 1; EMU_ROWS=1 quad $t 13 2048 1
        EMU_PARTS=3 quad $t 21 2048 1; EMU_PARTS=4 quad $t 19 4096 1
        # x from global memory (gemv_xsmem = false); past the 16 KB of x
        # that shared memory takes
        EMU_NOXS=1 quad $t 9 4096 1; EMU_NOXS=1 EMU_ROWS=2 quad $t 5 12288 1; quad $t 3 18432 1
        # 8 warps a block (gemv_warps = 8): rows that leave blocks part
        # empty, products of one launch, x from global memory
        EMU_WARPS=8 quad $t 37 4096 1; EMU_WARPS=8 EMU_ROWS=2 EMU_PARTS=3 quad $t 45 2048 1
        EMU_WARPS=8 EMU_NOXS=1 quad $t 9 12288 1
    done
    # Q8_0 through shared memory (gemv_staged): 1..6 steps a row, 1, 2
    # and 4 rows a warp (more units than ring buffers), products of one
    # launch; past 12288 and with the knob off it stays on v1
    quad q8_0 37 2048 1; quad q8_0 9 4096 1; quad q8_0 3 12288 1; quad q8_0 1 6144 1
    EMU_ROWS=1 quad q8_0 13 2048 1; EMU_ROWS=4 quad q8_0 37 4096 1; EMU_ROWS=4 quad q8_0 5 12288 1
    EMU_PARTS=3 quad q8_0 21 2048 1; EMU_PARTS=4 EMU_ROWS=4 quad q8_0 19 4096 1
    EMU_QUAD=1 dp4a q8_0 3 14336 1; EMU_QUAD=1 EMU_NOST=1 dp4a q8_0 9 2048 1
}
dp4a_cases() {
    if [ "$1" = quick ]; then
        dp4a q4_k 77 512 1; dp4a q6_k 33 256 3; dp4a q8_0 9 2048 8; dp4a q4_k 20 256 6 3
        EMU_PARTS=4 dp4a q4_k 77 512 1; EMU_PARTS=3 EMU_UNROLL=8 dp4a q6_k 45 2048 1; EMU_UNROLL=2 dp4a q8_0 21 1024 1
        EMU_PARTS=2 EMU_EXPERTS=5 dp4a q5_k 33 512 8
        quad_cases quick
        return 0
    fi
    quad_cases
    for t in q4_k q5_k q6_k q8_0; do dp4a $t 77 512 1; dp4a $t 33 256 3; dp4a $t 9 2048 8; done
    dp4a q4_k 20 256 6 3
    # one launch of several products (cu_mm.more: rows cut into 2-4 parts of
    # odd sizes), at one and several columns; units a lane in flight 2/4/8
    for t in q4_k q5_k q6_k q8_0; do
        EMU_PARTS=2 dp4a $t 77 512 1; EMU_PARTS=4 dp4a $t 37 2048 3; EMU_PARTS=3 dp4a $t 9 512 8
        EMU_PARTS=2 EMU_EXPERTS=5 dp4a $t 33 512 8; EMU_PARTS=3 EMU_EXPERTS=3 dp4a $t 17 2048 4
        for u in 2 8; do EMU_UNROLL=$u dp4a $t 33 4096 1; EMU_UNROLL=$u dp4a $t 7 256 1; done
    done
    # Q4_K's 32-byte units (gemv_wide, bench A/B): rows of 1..16 units a
    # lane, several products, experts
    EMU_WIDE=1 dp4a q4_k 77 512 1; EMU_WIDE=1 dp4a q4_k 33 4096 1; EMU_WIDE=1 dp4a q4_k 9 256 1
    EMU_ORDER=1 dp4a q4_k 77 512 1; EMU_ORDER=1 dp4a q5_k 33 4096 1; EMU_ORDER=1 dp4a q4_k 9 12288 1
    EMU_ORDER=1 dp4a q5_k 17 6144 1
    EMU_WIDE=1 EMU_PARTS=3 dp4a q4_k 37 2048 1; EMU_WIDE=1 EMU_EXPERTS=5 dp4a q4_k 17 512 1
}
# v2 (EMU_KERNEL=gemv): every type, ncols 1..8, odd rows, rows of 8/16/32+
# lanes (in 256, 512, 2048+; Q8_0 in 32..), per-column experts, stacked
# matrices, the column loop (GY 1); the staged path (in % 2048; Q8_0
# in % 512: several stages, experts, stacking) and the direct path at the
# same widths (EMU_DIRECT).  Quick: a few of each kind.
gemv() { EMU_KERNEL=gemv "$out/mma_emu" "$@" || rc=1; }
gemv_cases() {
    # (one column: 1 row a lane group at these sizes, EMU_ROWS=4 the 4 of
    # large products)
    for t in q4_k q5_k q6_k q8_0; do
        gemv $t 37 512 1; EMU_ROWS=4 gemv $t 37 512 1; gemv $t 37 512 5; EMU_ROWS=4 EMU_EXPERTS=3 gemv $t 17 256 3 3
        EMU_ROWS=4 EMU_EXPERTS=6 gemv $t 17 2048 8; EMU_ROWS=4 EMU_STACK=1 gemv $t 26 4096 1
        EMU_DIRECT=1 gemv $t 23 4096 2; EMU_DIRECT=1 EMU_ROWS=4 gemv $t 23 4096 1
    done
    gemv q8_0 5 32 1; gemv q8_0 9 352 5; EMU_SAY=1 gemv q6_k 21 4096 2; EMU_SAY=1 gemv q6_k 21 4096 1
    [ "$1" = quick ] && return 0
    for t in q4_k q5_k q6_k q8_0; do
        for n in 2 3 4 8; do gemv $t 37 512 $n; done
        gemv $t 7 256 1; EMU_ROWS=4 gemv $t 7 256 1; gemv $t 45 2560 6; gemv $t 19 2048 7 2 1
        EMU_EXPERTS=5 gemv $t 33 512 8; EMU_ROWS=4 EMU_EXPERTS=5 gemv $t 33 512 8
        EMU_STACK=1 gemv $t 41 512 1; EMU_STACK=1 EMU_EXPERTS=4 gemv $t 30 1024 8 8
        EMU_ROWS=4 gemv $t 21 2048 1; gemv $t 21 2048 1; EMU_EXPERTS=6 gemv $t 17 2048 8
    done
    gemv q8_0 67 96 2
    for n in 1 2 5; do gemv q6_k 21 4096 $n; gemv q8_0 21 1536 $n; gemv q4_k 21 4096 $n; done
    EMU_ROWS=4 gemv q8_0 21 1536 1; EMU_ROWS=4 gemv q6_k 21 4096 1
    EMU_EXPERTS=6 gemv q8_0 17 1024 8 4; EMU_STACK=1 EMU_EXPERTS=3 gemv q8_0 26 1024 3 3
}
# the GEMM v1 (no EMU_KERNEL)
mma_cases() {
    if [ "$1" = quick ]; then
        run q4_k 77 256 9; run q6_k 77 256 9; run q8_0 77 352 9
        EMU_DRIFT=1 run q5_k 77 2048 70 1 1
        return 0
    fi
    for t in q4_k q5_k q6_k q8_0; do
        for r in 1 77 272; do
            for i in 256 2048; do
                for n in 9 64 129; do run $t $r $i $n; done
            done
        done
    done
    for r in 1 77 272; do for n in 9 64 129; do run q8_0 $r 352 $n; done; done
    # several columns per quantised column; the kernel's loop over column tiles
    for t in q4_k q5_k q6_k q8_0; do run $t 130 512 129 3; run $t 77 256 200 1 1; done
    run q8_0 77 352 129 2 2
    # warps drifting apart between block barriers (emu.cc EMU_DRIFT)
    for t in q4_k q5_k q6_k q8_0; do EMU_DRIFT=7 run $t 130 2048 70 1 1; done
}
# the GEMM v2 (EMU_KERNEL=mma2): EMU_BM 128 and 64 row tiles; v2quick's
# cases, then (full) every type at 1 / 77 / 272 rows, K of one and of
# several k-tiles, one and two column tiles, x_div, drifting warps
run2() { EMU_KERNEL=mma2 EMU_BM=128 "$out/mma_emu" "$@" || rc=1; }
run2s() { EMU_KERNEL=mma2 EMU_BM=64 "$out/mma_emu" "$@" || rc=1; }
mma2_cases() {
    run2 q4_k 77 256 9; run2s q6_k 77 512 9; run2 q8_0 77 352 9; run2s q5_k 70 256 131 2
    EMU_DRIFT=1 run2 q4_k 130 1024 70
    [ "$1" = quick ] && return 0
    for t in q4_k q5_k q6_k q8_0; do
        for r in 1 77 272; do
            for i in 256 2048; do
                for n in 9 129; do run2 $t $r $i $n; done
            done
        done
        run2s $t 77 512 200; run2 $t 130 512 129 3; run2s $t 130 768 70 2
        EMU_DRIFT=7 run2 $t 130 1024 70; EMU_DRIFT=3 run2s $t 70 512 140
    done
    for r in 1 77 272; do for n in 9 129; do run2 q8_0 $r 352 $n; run2s q8_0 $r 352 $n; done; done
}
plants() { [ "$PLANT" = no ] || "$@"; }
case $mode in
v2quick) mma2_cases quick; plants mma2_plants ;;
dp4a)    dp4a_cases full; plants dp4a_plants all ;;
quad)    quad_cases full; plants quad_plants all ;;
v2)      mma2_cases full; plants mma2_plants all ;;
quick)   dp4a_cases quick; gemv_cases quick; mma_cases quick; mma2_cases quick
         plants dp4a_plants; plants gemv_plants; plants mma_plants; plants mma2_plants ;;
full)    dp4a_cases full; gemv_cases full; mma_cases full; mma2_cases full
         plants dp4a_plants all; plants gemv_plants all; plants mma_plants all; plants mma2_plants all ;;
esac
exit $rc
