#!/bin/sh
# tests/cuda/emu/run-rrf-emu.sh — knob route_fused: cuda_matmul.cu's
# rr_kernel (the MOE decode router's product and top-K in one launch)
# against si_cu_matmul then route_warp_kernel under the host emulation
# (rrf_emu.cc), bit for bit; then planted bugs that must be caught.  No
# GPU; g++ (x86-64); seconds.
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/rrf-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the whole file, launchers too: each k<<<g, b, sm, s>>>(args); becomes
# emu_launch_s(g, b, sm, s, [&] { k(args); }); (cu_launch: cuda_runtime.h)
sed -e 's/\([A-Za-z_][A-Za-z_0-9]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(\(.*\));/emu_launch_s(\3, [\&] { \1(\4); });/' \
    "$src/cuda_matmul.cu" > "$out/k.cc"
if grep -q '<<<' "$out/k.cc"; then
    echo "run-rrf-emu: cuda_matmul.cu: a launch the sed line misses" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DRRF_MATMUL="\"$out/k.cc\"" "$here/rrf_emu.cc" "$out/emu.o" -o "$out/rrf_emu"
"$out/rrf_emu"
# plant NAME PERL-EDIT: rr_kernel edited so, the run must fail
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" RRF_MATMUL "$here/rrf_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# the count not put back: the next launch never finds its last block
plant no-reset 's/\*done = 0;/;/'
# the last block taken by its index, not by the count (shuffled order)
plant last-by-index 's/if \(ticket != gridDim.x \* gridDim.y - 1\)/if (blockIdx.x != gridDim.x - 1)/'
# the gate row's blocks of the 2..8-column kernel counted a row a block
# (mm_kernel's one-column unit), not MM_WARPS rows
plant more-blocks 's/mm_part<MM_WARPS>\(mm, bx\)/mm_part<1>(mm, bx)/'
# the last block routes only its first MM_WARPS tokens
plant token-stride 's/t < n; t \+= MM_WARPS\)/t < n \&\& t < MM_WARPS; t += MM_WARPS)/'
