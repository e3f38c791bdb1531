#!/bin/sh
# tests/cuda/emu/run-elem-emu.sh — cuda_elem.cu's RMSNORM (its register
# and memory paths, and the fused forms of cuda_ops.c's fuse_norm: the
# residual ADD before it, the int8 copy of its output) and SWIGLU with the
# int8 copy, under the host emulation (elem_emu.cc), against the plain
# kernels run one after the other (binary_kernel, rmsnorm_kernel,
# cuda_mmq.cu's quant_x_kernel): bit for bit.  No GPU; g++ (x86-64).
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/elem-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the kernels only (each from its first line to the closing brace at
# column 0), not the launchers (<<<>>>); cuda_rms.cuh as it is
{
    echo '#include "cuda_internal.h"'
    echo '#include "cuda_quant.cuh"'
    echo '#include "cuda_rms.cuh"'
    awk '/^__device__ void norm_quant_row|^__global__ void (rmsnorm_kernel|rms2_kernel|swiglu_q_kernel)\(/ { on = 1 }
         /^__device__ __forceinline__ float binary_op\(|^template <int V>$/ { on = 1 }
         /^#define RMS_REG/ { print; next }
         on { print } on && /^}/ { on = 0 }' "$src/cuda_elem.cu"
    awk '/^__global__ void quant_x_kernel\(/ { on = 1 } on { print } on && /^}/ { on = 0 }' "$src/cuda_mmq.cu"
    # (the forms elem_emu.cc runs)
    echo 'template void binary_kernel<1>(int, cu_rows, cu_rows, cu_rows, int64_t, int64_t);'
    echo 'template void binary_kernel<4>(int, cu_rows, cu_rows, cu_rows, int64_t, int64_t);'
} > "$out/elem.cc"
for k in norm_quant_row rmsnorm_kernel rms2_kernel binary_op binary_kernel swiglu_q_kernel quant_x_kernel RMS_REG; do
    grep -q "$k" "$out/elem.cc" || { echo "run-elem-emu: $k not found; update the awk lines" >&2; exit 1; }
done
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$out/elem.cc" -o "$out/elem.o"
g++ $F "$here/elem_emu.cc" "$here/emu.cc" "$out/elem.o" -o "$out/elem_emu"
"$out/elem_emu"
