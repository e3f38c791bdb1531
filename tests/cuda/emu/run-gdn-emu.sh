#!/bin/sh
# tests/cuda/emu/run-gdn-emu.sh — runs the cuda_sm120 GDN kernels (chunked
# prefill against token by token; the fused decode step, gdn_dec = fused,
# against the split one, its thread-block clusters emulated by
# cluster_emu.h) under the host emulation, no GPU needed, with planted bugs
# that must be caught.  Needs g++ (x86-64).  Takes ~1.5 min on 2 cores.
# Usage: run-gdn-emu.sh [builddir]
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
# (the fused decode kernel's cluster primitives: cluster_emu.h's, a
# cluster run as one emulated block)
sed -e '/^\/\/ dst gets pre-norm values/,$d' \
    -e 's/^#include "cuda_cluster.cuh"/#include "cluster_emu.h"/' "$src/cuda_gdn_rows.cu" > "$out/rows.cc"
grep -q '^#include "cluster_emu.h"' "$out/rows.cc" && ! grep -q '__cvta_generic_to_shared' "$out/rows.cc" || {
    echo "run-gdn-emu: cuda_cluster.cuh's include line changed; update the sed lines" >&2; exit 1; }
cat >> "$out/rows.cc" <<'EOF'
size_t emu_gf_smem_floats(int dk, int C, int K) { return gf_smem_floats(dk, C, K); }
int emu_gf_threads() { return GF_THREADS; }
int emu_gf_rows() { return GF_ROWS; }
void emu_gf_run(cu_gdn g) { if (gf_width(g.dk) == 4) { if (g.early) fused_kernel<4, true>(g); else fused_kernel<4, false>(g); } else if (g.early) fused_kernel<GR_MAX_EL, true>(g); else fused_kernel<GR_MAX_EL, false>(g); }
EOF
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
# gdn_dec = fused (decode steps, one cluster launch) against the split path
# bit for bit and the reference: the 9b/35b head shape (2 v-heads a k-head,
# clusters of 8), 1 v-head a k-head (clusters of 4), 8 v-heads of dv 32 on
# one k-head, 2 v-heads of dk = dv = 96 (clusters of 6); the fibers and the
# clusters in shuffled orders once
for c in "2 4 128 128 3 3" "4 4 128 128 2 3" "1 8 32 32 2 3" "3 6 96 96 5 3"; do
    "$out/gdn_emu" dec $c || rc=1
done
EMU_FIBER_ORDER=3 EMU_BLOCK_ORDER=5 "$out/gdn_emu" dec 2 4 128 128 3 3 | tail -1 | grep -q OK || {
    echo "fused decode in shuffled orders: FAIL"; rc=1; }
# planted in fused_kernel: each must fail the 9b-shaped decode case
fused_plant() {
    perl -0pe "$2" "$out/rows.cc" > "$out/rows_bug.cc"
    if cmp -s "$out/rows.cc" "$out/rows_bug.cc"; then echo "plant $1: the edit did not apply"; rc=1; return; fi
    g++ $F -c "$out/rows_bug.cc" -o "$out/rows_bug.o"
    g++ $F "$here/gdn_emu.cc" "$here/emu.cc" "$out/chunk.o" "$out/seq.o" "$out/rows_bug.o" "$out/tc.o" -o "$out/gdn_bug"
    if "$out/gdn_bug" dec 2 4 128 128 3 3 > "$out/bug.log" 2>&1; then echo "plant $1: NOT detected"; rc=1
    else echo "plant $1: detected ($(grep -m1 'FAIL\|emu:' "$out/bug.log" | cut -c1-90))"; fi
}
# the q/k conv-state shift right after the conv, before the cluster barrier
# (a slower block of the cluster convolves with the shifted state)
fused_plant qk-shift-early 's/nst\[\(i - p0\) \* H \+ e\] = (e \+ 1 < H)/st[e] = $1/; s/cs\[c \* H \+ e % H\] = nst\[e\];/(void)c;/'
# the q/k channels' shares of the shift: two blocks on one share, one never shifted
fused_plant shift-share 's/p0 = rank \* part;/p0 = rank \/ 2 * part;/'
# v-heads grouped (j / R) instead of tiled (j % Hk) onto the k-heads
fused_plant kh-map 's/const int j = kh \+ jl \* g.n_k_head;/const int j = kh * (g.n_v_head \/ g.n_k_head) + jl;/'
# the gated norm's sum without the head's first block's rows
fused_plant norm-part 's/for \(int b = 0; b < per; b\+\+\)/for (int b = 1; b < per; b++)/'
# the int8 copy's scale of every block of 32 to the head's first
fused_plant q-scale 's/g.qd \+ qi \/ 32, g.qs/g.qd + (qi - m0) \/ 32, g.qs/'
# the first cluster barrier only a block barrier (the other blocks'
# outputs read before they are written)
fused_plant barrier 's/cl_cluster_sync\(\);   \/\/ every block/cl_sync();   \/\/ every block/'
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
