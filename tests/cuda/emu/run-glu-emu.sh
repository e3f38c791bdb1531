#!/bin/sh
# tests/cuda/emu/run-glu-emu.sh — knob gemv_glu: cuda_gemvq.cu's gu_kernel
# (gate and up products, their SwiGLU and its int8 copy in one launch)
# against the products then swiglu_q_kernel (cuda_elem.cu) under the host
# emulation (glu_emu.cc), bit for bit, blocks in order and shuffled; then
# planted bugs that must be caught.  No GPU; g++ (x86-64); under a minute.
# Usage: run-glu-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/glu-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# cuda_gemvq.cu whole (x's copy in the emulator's dynamic shared memory),
# swiglu_q_kernel (cuda_elem.cu) from its first line to the closing brace
# at column 0
{
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint4 gq_xsm\[\];/uint4 *gq_xsm = (uint4 *)emu::dyn_smem();/' \
        "$src/cuda_gemvq.cu"
    awk '/^__global__ void swiglu_q_kernel\(/ { on = 1 } on { print } on && /^}/ { on = 0 }' "$src/cuda_elem.cu"
} > "$out/k.cc"
for k in gu_kernel swiglu_q_kernel si_cu_gemvq_glu_ok; do
    grep -q "$k" "$out/k.cc" || { echo "run-glu-emu: $k not found; update the sed/awk lines" >&2; exit 1; }
done
if grep -q '<<<\|extern __shared__' "$out/k.cc"; then
    echo "run-glu-emu: a launch or shared array the sed lines miss" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DGLU_KERNELS="\"$out/k.cc\"" "$here/glu_emu.cc" "$out/emu.o" -o "$out/glu_emu"
"$out/glu_emu"
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" GLU_KERNELS "$here/glu_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# the next unit's row: the step advanced but not the row
plant row-stride 's/gq_load<T>\(wg \+ \(size_t\)i1 \* mm\.row_bytes/gq_load<T>(wg + (size_t)0 * mm.row_bytes/'
# the up rows read from the gate's matrix
plant up-from-gate 's/const uint8_t \*wu = mm\.more\[0\]\.w/const uint8_t *wu = mm.w/'
# a row's sum not cleared for the next index
plant no-clear 's/ag = au = 0\.0f;/au = 0.0f;/'
# no barrier before warp 0 reads the block's sums
plant no-barrier 's/__syncthreads\(\);   \/\/ the block.s 32 gate and up sums in sg \/ su/;/'
# silu of the up, times the gate
plant swapped 's/cu_silu\(g\), u\)/cu_silu(u), g)/'
# the block's scale written at block 0's place (the routed rows')
plant scale-place 's/gl\.qd \+ j \* nbf \+ b, gl\.qs \+ j \* nbf \+ b\);\n    \}\n\}/gl.qd + j * nbf, gl.qs + j * nbf + b);\n    }\n}/'
# every column on the first token's x
plant x-column 's/const int64_t c = j \/ mm\.x_div,/const int64_t c = 0,/'
# the picks ignored: every column on expert 0
plant no-expert 's/\? \(size_t\)mm\.expert\[j\] \* mm\.expert_bytes : 0;/? 0 : 0;/'
# the shared rows' SwiGLU not stored in place
plant shared-inplace 's/gs\[lane\] = v;/;/'
