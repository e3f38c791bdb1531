#!/bin/sh
# tests/cuda/emu/run-route-emu.sh — cuda_moe.cu's two MOE routers under the
# host emulation (route_emu.cc).  No GPU; g++ (x86-64); a few seconds.
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/route-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the kernels only: everything from the first launcher on is cut
sed -e '/^static unsigned blocks_for/,$d' "$src/cuda_moe.cu" > "$out/moe.cc"
# (the launcher's instantiations of the register widths went with it)
for j in 8 32; do
    echo "template __global__ void route_warp_kernel<$j>(const float *, int64_t, int, int, int32_t *, float *);"
done >> "$out/moe.cc"
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$out/moe.cc" -o "$out/moe.o"
g++ $F "$here/route_emu.cc" "$here/emu.cc" "$out/moe.o" -o "$out/route_emu"
"$out/route_emu"
