#!/bin/sh
# tests/cuda/emu/run-mm-emu.sh — cuda_matmul.cu's tiled f32 GEMM
# (mm_tiled_kernel) and the GEMV-style mm_kernel under the host emulation
# (mm_emu.cc), then one planted bug (the barrier before the next k-tile's
# stores removed) that must be caught.  No GPU; g++ (x86-64); seconds.
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/mm-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the kernels only: everything from the launcher on is cut
sed -e '/^template <int T> static cudaError_t mm_launch/,$d' "$src/cuda_matmul.cu" > "$out/k.cc"
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -DMM_KERNELS="\"$out/k.cc\"" "$here/mm_emu.cc" "$here/emu.cc" -o "$out/mm_emu"
"$out/mm_emu"
# plant NAME PERL-EDIT: the kernels edited so, the run must fail
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" MM_KERNELS "$here/mm_emu.cc" "$here/emu.cc"; }
# a second product's rows read from the first's (cu_mm.more)
plant more-w 's/mm.w = mm.more\[k\].w;/;/'
# the first barrier of the k loop (the previous tile still read)
plant no-sync 's/__syncthreads\(\);   \/\/ every thread is done with the previous tile/;/'
# mm_body's 16-byte x loads a group in the wrong order
plant x4-order 's/const float4 a = \(\(const float4 \*\)p\)\[0\], c = \(\(const float4 \*\)p\)\[1\];/const float4 a = ((const float4 *)p)[1], c = ((const float4 *)p)[0];/'
# knob mm_block_cols: the warps' sums added for column 0 only
plant part-col 's/s \+= part\[k\]\[lane\];/s += part[k][0];/'
