#!/bin/sh
# tests/cuda/emu/run-topk-emu.sh — cuda_topk.cu's TOPK kernels under the host
# emulation (topk_emu.cc) against a brute-force reference.  No GPU; g++
# (x86-64).  Usage: run-topk-emu.sh [builddir] [quick]  (quick: ~1 min on 2 cores)
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
base=${TMPDIR:-/tmp}
if [ -n "$1" ] && [ -d "$1" ]; then base=$1; shift; fi   # as the other run-*-emu.sh
out=$base/topk-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the kernels and si_cu_topk_slices; the launcher (<<<>>>) is cut
sed -e '/^extern "C" int si_cu_topk(const/,$d' "$src/cuda_topk.cu" > "$out/topk.cc"
grep -q 'si_cu_topk_slices' "$out/topk.cc" || { echo "run-topk-emu: cuda_topk.cu changed; update the sed" >&2; exit 1; }
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$out/topk.cc" -o "$out/topk.o"
g++ $F "$here/topk_emu.cc" "$here/emu.cc" "$out/topk.o" -o "$out/topk_emu"
"$out/topk_emu" "$@"
