#!/bin/sh
# tests/cuda/emu/run-normtail-emu.sh — knob norm_tail: cuda_gemvq.cu's
# products with their norm tail (gq_norm_tail: the residual ADD, the
# RMSNORM and the int8 copy by the launch's last block) against the plain
# product then rms2_kernel (cuda_elem.cu) under the host emulation
# (normtail_emu.cc), bit for bit, blocks in order and shuffled; then
# planted bugs that must be caught.  No GPU; g++ (x86-64); about a minute.
# Usage: run-normtail-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/normtail-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# cuda_gemvq.cu whole (cu_launch is the emulator's; x's copy in the
# emulator's dynamic shared memory), rms2_kernel (cuda_elem.cu) from its
# first line to the closing brace at column 0
{
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint4 gq_xsm\[\];/uint4 *gq_xsm = (uint4 *)emu::dyn_smem();/' \
        "$src/cuda_gemvq.cu"
    awk '/^__global__ void (rms2_kernel|xr_resolve_kernel)\(/ { on = 1 } on { print } on && /^}/ { on = 0 }' \
        "$src/cuda_elem.cu"
} > "$out/k.cc"
for k in gq_norm_tail rms2_kernel si_cu_gemvq_norm_ok gq_norm_defer xr_resolve_kernel; do
    grep -q "$k" "$out/k.cc" || { echo "run-normtail-emu: $k not found; update the sed/awk lines" >&2; exit 1; }
done
if grep -q '<<<\|extern __shared__' "$out/k.cc"; then
    echo "run-normtail-emu: a launch or shared array the sed lines miss" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DNORMTAIL_KERNELS="\"$out/k.cc\"" "$here/normtail_emu.cc" "$out/emu.o" -o "$out/normtail_emu"
"$out/normtail_emu"
# plant NAME PERL-EDIT: the kernels edited so, the run must fail
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" NORMTAIL_KERNELS "$here/normtail_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# the count not put back: the next launch's tail never runs
plant no-reset 's/\*nt\.ctr = 0;/;/'
# the tail by the last block index, not by the count
plant last-by-index 's/if \(ticket != gridDim\.x \* gridDim\.y - 1\)/if (blockIdx.x != gridDim.x - 1)/'
# the product's rows read through the L1 are fine here; read from the
# residual's place instead of the sum's in the output pass
plant sum-reread 's/rms2_ld\(r \+ ch \* RMS2_E, xv\);/rms2_ld(b + ch * RMS2_E, xv);/'
# a thread's second chunk left out (blockDim < chunks)
plant one-chunk 's/for \(int ch = t; ch < nch; ch \+= nthr\) \{\n            float xv\[RMS2_E\];\n            rms2_in<true>/for (int ch = t; ch < nch \&\& ch < nthr; ch += nthr) {\n            float xv[RMS2_E];\n            rms2_in<true>/'
# columns after the first: the product's first column again
plant col-stride 's/const float \*a = mm\.y \+ c \* mm\.y_stride;/const float *a = mm.y;/'
# a chunk a thread: every warp's sum in the first slot
plant fast-red 's/red\[par\]\[t >> 5\] = sw;/red[par][0] = sw;/'
# norm_tail = defer: every block's sum of squares in the first place
plant defer-part 's/nt\.part\[y0 \/ 32\] = ss;/nt.part[0] = ss;/'
# the sum not stored for the next residual
plant defer-no-sum 's/\(\(float \*\)nt\.f\.r\.p\)\[row\] = x;/;/'
# the copy's block at the scales' index
plant defer-q-offset 's/cu_q8_block32\(t, lane, nt\.f\.q \+ y0,/cu_q8_block32(t, lane, nt.f.q + y0 \/ 32,/'
# a reader that takes the scale and never applies it
plant xr-unscaled 's/s = __fmul_rn\(s, xr\);/;/'
# the parts never staged: the scale from garbage
plant xr-unstaged 's/if \(XR\)\n        cu_xr_stage\(mm\.xr, xr_sp\);\n    if \(XS\) \{/if (XS) {/'
# resolve leaves the block sums unscaled
plant resolve-qs 's/qs\[g\] = __fmul_rn\(qs\[g\], r\);/;/'
