#!/bin/sh
# tests/cuda/emu/run-gdn-emu.sh — runs the cuda_sm120 GDN kernels (chunked
# prefill against token by token) under the host emulation, no GPU needed.
# Needs g++ (x86-64).  Takes ~1 min on 2 cores.  Usage: run-gdn-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/gdn-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# The kernels as host C++: launchers cut (they use <<<>>>), dynamic shared
# memory from the emulator.
sed -e '/^\/\/ ---- launchers/,$d' \
    -e 's/extern __shared__ __align__(16) float sm\[\];/float *sm = emu::dyn_smem();/' \
    "$src/cuda_gdn_chunk.cu" > "$out/chunk.cc"
echo 'size_t emu_chunk_smem(int dk) { return chunk_smem_bytes(dk); }' >> "$out/chunk.cc"
echo 'size_t emu_chunk_pre_smem(int dk) { return chunk_pre_smem_bytes(dk); }' >> "$out/chunk.cc"
echo 'template void conv_tok_kernel<true>(cu_gdn); template void conv_tok_kernel<false>(cu_gdn);' >> "$out/chunk.cc"
# (cuda_ptx.cuh's wrappers: ptx_emu.h's)
sed -e '/^\/\/ ---- launcher/,$d' -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
    -e 's/extern __shared__ __align__(16) float sm\[\];/float *sm = emu::dyn_smem();/' \
    "$src/cuda_gdn_tc.cu" > "$out/tc.cc"
echo 'size_t emu_tc_smem(int dk) { return tc_smem_bytes(dk); }' >> "$out/tc.cc"
sed -e '/^extern "C" int si_cu_gdn/,$d' \
    -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' \
    "$src/cuda_gdn.cu" > "$out/seq.cc"
grep -q 'emu::dyn_smem' "$out/chunk.cc" && grep -q 'emu::dyn_smem' "$out/seq.cc" && grep -q 'emu::dyn_smem' "$out/tc.cc" || {
    echo "run-gdn-emu: the shared-memory declarations changed; update the sed lines" >&2; exit 1; }
sed -e '/^\/\/ dst gets pre-norm values/,$d' "$src/cuda_gdn_rows.cu" > "$out/rows.cc"
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
for f in chunk seq rows tc; do g++ $F -c "$out/$f.cc" -o "$out/$f.o"; done
g++ $F "$here/gdn_emu.cc" "$here/emu.cc" "$out/chunk.o" "$out/seq.o" "$out/rows.o" "$out/tc.o" -o "$out/gdn_emu"
rc=0
# real head dims; dk padding + partial value slice + 3 v-heads per k-head;
# one long run beside a short one; exactly one chunk; below the threshold
# one long run beside a short one; exactly one chunk; below the threshold;
# gdn_tc at dk 64 with a partial value slice, and over 5 chunks; dv past
# gnorm_warp_kernel's 256
for c in "2 4 128 128 1 1 3" "1 2 64 48 1 2" "2 4 128 128 1 70 129" "2 6 30 40 1 70 31 65" "2 4 16 72 300 5" \
    "1 2 128 32 1 129 64" "1 2 64 48 1 200 33" "1 2 128 96 300 64" "1 2 32 264 40"; do
    "$out/gdn_emu" $c || rc=1
done
# planted: the int8 copy's scales of a head's blocks all to its first
sed -e 's|g.qd + qi / 32 + e|g.qd + qi / 32|' "$out/rows.cc" > "$out/rows_bug.cc"
if cmp -s "$out/rows.cc" "$out/rows_bug.cc"; then echo "plant q-scale: the edit did not apply"; rc=1
else
    g++ $F -c "$out/rows_bug.cc" -o "$out/rows_bug.o"
    g++ $F "$here/gdn_emu.cc" "$here/emu.cc" "$out/chunk.o" "$out/seq.o" "$out/rows_bug.o" "$out/tc.o" -o "$out/gdn_bug"
    if "$out/gdn_bug" 2 4 128 128 1 1 3 > "$out/bug.log" 2>&1; then echo "plant q-scale: NOT detected"; rc=1
    else echo "plant q-scale: detected ($(grep -m1 'int8 copy' "$out/bug.log" | cut -c1-80))"; fi
fi
# planted in chunk_tc_kernel (gdn_tc) or, with PF=chunk, in cuda_gdn_chunk.cu's
# kernels: each must fail the long-run case
tc_plant() {
    f=${PF:-tc}
    perl -0pe "$2" "$out/$f.cc" > "$out/${f}_bug.cc"
    if cmp -s "$out/$f.cc" "$out/${f}_bug.cc"; then echo "plant $1: the edit did not apply"; rc=1; return; fi
    g++ $F -c "$out/${f}_bug.cc" -o "$out/${f}_bug.o"
    if [ "$f" = tc ]; then objs="$out/chunk.o $out/tc_bug.o"; else objs="$out/chunk_bug.o $out/tc.o"; fi
    g++ $F "$here/gdn_emu.cc" "$here/emu.cc" $objs "$out/seq.o" "$out/rows.o" -o "$out/gdn_bug"
    if "$out/gdn_bug" 2 4 128 128 1 70 129 > "$out/bug.log" 2>&1; then echo "plant $1: NOT detected"; rc=1
    else echo "plant $1: detected ($(grep -A2 'tensor cores' "$out/bug.log" | grep -m1 'output\|state\|emu' | cut -c1-70))"; fi
}
# T' and P: the diagonal k-tile left out
tc_plant tri-diag 's/k0 < r0 \+ 16; k0 \+= 8/k0 < r0 + 8; k0 += 8/'
# T' read before its copy landed (one group too few waited for)
tc_plant wait-t 's|cp_async_wait_group<2>\(\);   // T.\(c\)|cp_async_wait_group<3>();|'
# K of the previous chunk: one buffer for both parities in the loop
tc_plant k-parity 's/\*K = sm \+ \(\(c & 1\) \? TC_K1 : TC_K0\)/*K = sm + TC_K0/'
# the state weights exp(G_last - G_s) left out of the update
tc_plant state-w 's/tf\(w0 \* D\[/tf(D[/'
# the old state not decayed
tc_plant state-decay 's/= eL \* S\[/= S[/'
# the conv's window not reloaded at a run start (runs of 1, 70 and 129
# tokens share the walking blocks)
PF=chunk tc_plant conv-run-start 's/run = g.runs\[\+\+r\], fresh = true;/run = g.runs[++r];/'
# the q heads' 1/sqrt(dk) left out of the conv's fused norm
PF=chunk tc_plant conv-norm-q 's|1.0f / sqrtf\(\(float\)g.dk\) : 1.0f;\n    const float \*w|1.0f : 1.0f;\n    const float *w|'
exit $rc
