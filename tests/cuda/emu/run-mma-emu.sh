#!/bin/sh
# tests/cuda/emu/run-mma-emu.sh — runs the cuda_sm120 prefill int8 GEMM
# (cuda_mma.cu) and the activation quantiser (cuda_mmq.cu quant_x_kernel)
# under the host emulation with the PTX of ptx_emu.h, against the cpu
# backend's int8 matmul and core's dequantisation (mma_emu.cc).  No GPU.
# Needs gcc/g++ (x86-64).  ~5 min on 2 cores (quick: ~45 s).
# The EMU_DRIFT runs let warps drift apart between block barriers: with
# either __syncthreads of mma_kernel's loop removed they FAIL (checked);
# so do v2's (mma2_kernel's one barrier per k-tile removed, or its
# cp.async.wait_group waiting for one group too few: checked).
# v2 (cuda_mma2.cu, knob mma_tile = v2) runs in every mode (quick: 4
# cases); "v2" runs only its cases (~3 min), "v2quick" 5 of them (~40 s).
# Usage: run-mma-emu.sh [builddir] [quick|v2|v2quick]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/mma-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# The kernel as host C++: its PTX wrappers cut (ptx_emu.h stands in), the
# launchers cut (<<<>>>), dynamic shared memory from the emulator.
sed -e '/^\/\/ ---- PTX wrappers/,/^\/\/ int32 -> f32/{/^\/\/ int32 -> f32/!d;}' \
    -e 's/^#include "cuda_quant.cuh"/#include "cuda_quant.cuh"\n#include "ptx_emu.h"/' \
    -e 's/extern __shared__ __align__(16) uint8_t sm\[\];/uint8_t *sm = (uint8_t *)emu::dyn_smem();/' \
    -e '/^template <int T> static cudaError_t mma_launch/,/^}/d' \
    -e '/^extern "C" int si_cu_matmul_mma/,$d' \
    "$src/cuda_mma.cu" > "$out/k_mma.cc"
cat >> "$out/k_mma.cc" <<'EOT'
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
# v2 (cuda_mma2.cu, EMU_KERNEL=mma2, EMU_BM=64|128): the same cuts
sed -e '/^\/\/ ---- PTX wrappers/,/^\/\/ ---- end of PTX wrappers/d' \
    -e 's/^#include "cuda_quant.cuh"/#include "cuda_quant.cuh"\n#include "ptx_emu.h"/' \
    -e 's/extern __shared__ __align__(16) uint8_t sm\[\];/uint8_t *sm = (uint8_t *)emu::dyn_smem();/' \
    -e '/^\/\/ ---- launchers/,$d' \
    "$src/cuda_mma2.cu" > "$out/k_mma2.cc"
cat >> "$out/k_mma2.cc" <<'EOT'
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
# the quantiser and the dp4a GEMV: cuda_mmq.cu without its launchers
# (from mmq_go on), si_cu_mmq_ok kept
awk '/^template </ { if (held != "" && !skip) print held; held = $0; next }
     /^static cudaError_t mmq_go/ { skip = 1 } /^extern "C" bool si_cu_mmq_ok/ { skip = 0 }
     /^extern "C" int si_cu_quantize_x/ { skip = 1 }
     { if (held != "" && !skip) print held; held = ""; if (!skip) print }' "$src/cuda_mmq.cu" > "$out/k_quant.cc"
cat >> "$out/k_quant.cc" <<'EOT'
void emu_quant_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d, float *s, unsigned blocks)
{
    emu_launch(dim3(blocks), dim3(256), 0, [&] { quant_x_kernel(x, x_stride, in, ncx, q, d, s); });
}
// the grid of mmq_go: MMQ_WARPS rows per block, ceil(ncols / NT) columns
template <int T, int NT> static void emu_mmq_t(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    const unsigned gx = (unsigned)((mm->rows + MMQ_WARPS - 1) / MMQ_WARPS), gy = (unsigned)((mm->ncols + NT - 1) / NT);
    emu_launch(dim3(gx, gy), dim3(32 * MMQ_WARPS), 0, [&] { mmq_kernel<T, NT>(*mm, xq, xd, xs); });
}
template <int T> static void emu_mmq_n(const cu_mm *mm, const int8_t *xq, const float *xd, const float *xs)
{
    if (mm->expert != NULL || mm->ncols == 1) emu_mmq_t<T, 1>(mm, xq, xd, xs);
    else if (mm->ncols == 2) emu_mmq_t<T, 2>(mm, xq, xd, xs);
    else if (mm->ncols <= 4) emu_mmq_t<T, 4>(mm, xq, xd, xs);
    else emu_mmq_t<T, 8>(mm, xq, xd, xs);
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
grep -q 'emu::dyn_smem' "$out/k_mma.cc" && ! grep -q 'asm' "$out/k_mma.cc" && grep -q 'quant_x_kernel' "$out/k_quant.cc" &&
    grep -q 'emu::dyn_smem' "$out/k_mma2.cc" && ! grep -q 'asm\|<<<' "$out/k_mma2.cc" || {
    echo "run-mma-emu: cuda_mma.cu / cuda_mma2.cu / cuda_mmq.cu changed shape; update the sed lines" >&2; exit 1; }
F="-std=c++17 -O2 -g -I$here -I$src -I$top/core/include -I$top/core -I$top/backends/cpu -Wno-unused-function -fsanitize=alignment -fno-sanitize-recover=alignment"
C="-std=c11 -O2 -g -I$top/core/include -I$top/core -I$top/backends/cpu"
for f in k_mma k_mma2 k_quant; do g++ $F -c "$out/$f.cc" -o "$out/$f.o"; done
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
EOT
objs=""
for c in "$top/backends/cpu/cpu_quant_dot.c" "$top/core/quant.c" "$top/core/quant_k.c" "$top/core/quant_iq.c" "$top/core/fp16.c" "$top/core/types.c" "$out/stubs.c"; do
    o="$out/$(basename "$c" .c).o"; gcc $C -c "$c" -o "$o"; objs="$objs $o"
done
g++ $F "$here/mma_emu.cc" "$here/emu.cc" "$out/k_mma.o" "$out/k_mma2.o" "$out/k_quant.o" $objs -o "$out/mma_emu"
rc=0
run() { "$out/mma_emu" "$@" || rc=1; }
# v2 (cuda_mma2.cu): EMU_BM 128 and 64 row tiles
run2() { EMU_KERNEL=mma2 EMU_BM=128 "$out/mma_emu" "$@" || rc=1; }
run2s() { EMU_KERNEL=mma2 EMU_BM=64 "$out/mma_emu" "$@" || rc=1; }
v2full() {
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
if [ "$2" = v2quick ] || [ "$2" = v2 ]; then
    run2 q4_k 77 256 9; run2s q6_k 77 512 9; run2 q8_0 77 352 9; run2s q5_k 70 256 131 2
    EMU_DRIFT=1 run2 q4_k 130 1024 70
    [ "$2" = v2 ] && v2full
    exit $rc
fi
# the dp4a decode GEMV (EMU_KERNEL=dp4a: <= 8 columns) against the same
# references
dp4a() { EMU_KERNEL=dp4a "$out/mma_emu" "$@" || rc=1; }
for t in q4_k q5_k q6_k q8_0; do dp4a $t 77 512 1; dp4a $t 33 256 3; dp4a $t 9 2048 8; done
dp4a q4_k 20 256 6 3
if [ "$2" = quick ]; then
    run q4_k 77 256 9; run q6_k 77 256 9; run q8_0 77 352 9
    EMU_DRIFT=1 run q5_k 77 2048 70 1 1
    run2 q4_k 77 256 9; run2s q6_k 77 512 9; run2 q8_0 77 352 9; EMU_DRIFT=1 run2 q5_k 130 1024 70
    exit $rc
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
v2full
exit $rc
