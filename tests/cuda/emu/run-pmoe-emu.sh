#!/bin/sh
# tests/cuda/emu/run-pmoe-emu.sh — knob moe_persist: cuda_pmoe.cuh's
# one-launch MOE, its three phases run as three emulated launches
# (pmoe_emu.cc), against the in-line path's kernels and host replicas of
# their orders, bit for bit, blocks in order and shuffled; then planted
# bugs that must be caught.  No GPU; g++ (x86-64); a few minutes.
# Usage: run-pmoe-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/pmoe-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# cuda_gemvq.cu whole with cuda_pmoe.cuh pasted in where it is included
# (so the plants below edit its text), x's copy in the emulator's dynamic
# shared memory
sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
    -e 's/extern __shared__ __align__(16) uint4 gq_xsm\[\];/uint4 *gq_xsm = (uint4 *)emu::dyn_smem();/' \
    -e "/^#include \"cuda_pmoe.cuh\"/{
r $src/cuda_pmoe.cuh
d
}" "$src/cuda_gemvq.cu" > "$out/k.cc"
for k in pm_router pm_gate_up pm_down si_cu_moe_persist_ok gu_kernel; do
    grep -q "$k" "$out/k.cc" || { echo "run-pmoe-emu: $k not found; update the sed lines" >&2; exit 1; }
done
if grep -q '<<<\|extern __shared__' "$out/k.cc"; then
    echo "run-pmoe-emu: a launch or shared array the sed lines miss" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DPMOE_KERNELS="\"$out/k.cc\"" "$here/pmoe_emu.cc" "$out/emu.o" -o "$out/pmoe_emu"
"$out/pmoe_emu"
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" PMOE_KERNELS "$here/pmoe_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# the router's quarter sums added from the block's first quarter
plant router-part 's/t \+= part\[4 \* q \+ k\];/t += part[k];/'
# the router rows of a pass only for the first block's slots
plant router-slot 's/const int r = r0 \+ \(int\)blockIdx\.x \* rpb \+ q;/const int r = r0 + q;/'
# a routed pair's expert from the first pick
plant gu-expert 's/const size_t o = \(size_t\)s_sel\[kk\] \* p\.gu_eb/const size_t o = (size_t)s_sel[0] * p.gu_eb/'
# the up rows read from the gate's matrix
plant up-from-gate 's/gq_load<T>\(p\.wu \+ o,/gq_load<T>(p.wg + o,/'
# the shared pairs one index off
plant shared-index 's/for \(int idx = s0 \+ warp; idx < s1;/for (int idx = s0 + warp + 1; idx < s1;/'
# the shared pairs' last block's share dropped
plant pair-share 's/pm_share\(F, \(int\)blockIdx\.x, \(int\)gridDim\.x, s0, s1\);/pm_share(F, (int)blockIdx.x, (int)gridDim.x + 1, s0, s1);/'
# five router rows a block where it has four quarters (each fifth row
# dropped; at grid 5)
plant router-rpb 's/return q < 4 \? q : 4;/return q < 4 ? q : 5;/'
# the SwiGLU's up value taken from the gate
plant swiglu-up 's/float pm_swiglu\(float g, float u\) \{ return __fmul_rn\(cu_silu\(g\), u\);/float pm_swiglu(float g, float u) { return __fmul_rn(cu_silu(g), g);/'
# the SwiGLU copy's chunks for the first slot's rows only
plant swiglu-slot 's/if \(\(int\)threadIdx\.x < S \* \(F \/ RMS2_E\)\) \{/if ((int)threadIdx.x < F \/ RMS2_E) {/'
# the combine's weights all slot 0's
plant wts-slot 's/wv\[k\] = k < K \? s_wts\[k\] : 0\.0f;/wv[k] = k < K ? s_wts[0] : 0.0f;/'
# the SwiGLU copy not swizzled
plant no-swizzle 's/xsm \+ k \* upk \+ gq_swz\(c - k \* upk\)/xsm + c/'
# a down row's second pass on the first slots
plant down-slot 's/const int k = 4 \* ps \+ sub;\n            if \(k < K\)\n                gq_load/const int k = sub;\n            if (k < K)\n                gq_load/'
# the shared value not gated
plant no-gate 's/p\.dst\[h\] = cb_sum\(wv, yv, K, true, gm, sacc\);/p.dst[h] = cb_sum(wv, yv, K, true, 1.0f, sacc);/'
# a block's rows one warp short
plant row-share 's/for \(int h = h0 \+ warp; h < h1; h \+= PM_WARPS\)/for (int h = h0 + warp; h < h1 - 1; h += PM_WARPS)/'
