#!/bin/sh
# tests/cuda/emu/run-fa-emu.sh — runs the flash-attention prefill core of
# cuda_sm120 (cuda_attn_fa.cu: f16 mma.sync, ldmatrix, cp.async; splits
# merged by cuda_attn.cu's combine_kernel) through si_cu_attn under the host
# emulation with the PTX of ptx_emu.h, against a double-precision reference
# (fa_emu.cc says what is compared).  No GPU; g++ >= 12 (x86-64).
# quick: the cases of emu.test (~30 s on 2 cores); objs: only compile
# cuda_attn_fa.cu and cuda_attn_gqa.cu (the attn_gqa = shared split kernel:
# cp.async too) as host C++ into builddir/cuda_attn_fa.o, cuda_attn_gqa.o
# (run-attn-emu.sh links them: si_cu_attn's dispatch calls them).  Usage:
# run-fa-emu.sh [builddir] [quick|objs]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
F="-std=c++17 -O2 -fno-strict-aliasing -I$here -I$src -I$top/core/include -Wno-unused-function"
launch='s/\([A-Za-z_][A-Za-z_0-9]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(\(.*\));/emu_launch_s(\3, [\&] { \1(\4); });/'
# cuda_attn_fa.cu, cuda_attn_gqa.cu and cuda_attn_mma.cu ($2): cuda_ptx.cuh (and
# any PTX wrappers of their own) cut
# (ptx_emu.h stands in), the device queries and the shared-memory opt-in
# answered as an sm_90 would
fa_obj() {
    f=${2:-cuda_attn_fa}
    {
        cat <<'EOT'
#include "cuda_runtime.h"
#include "ptx_emu.h"
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, int, int v) { return v <= 232448 ? cudaSuccess : cudaErrorInvalidValue; }
EOT
        sed -e '/^\/\/ ---- PTX wrappers/,/^\/\/ ---- end of PTX wrappers/d' -e '/^#include "cuda_ptx.cuh"/d' \
            -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' -e "$launch" "$src/$f.cu"
    } > "$1/$f.cc"
    if grep -q '<<<\|extern __shared__\|asm' "$1/$f.cc"; then
        echo "run-fa-emu: $f.cu: a launch, shared declaration or asm the sed lines miss" >&2; exit 1
    fi
    g++ $F -c "$1/$f.cc" -o "$1/$f.o"
}
if [ "$2" = objs ]; then
    fa_obj "${1:?builddir}"
    fa_obj "$1" cuda_attn_gqa
    fa_obj "$1" cuda_attn_mma
    exit 0
fi
out=${1:-${TMPDIR:-/tmp}}/fa-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# cuda_attn.cu / cuda_attn_i8.cu as run-attn-emu.sh makes them
for f in cuda_attn cuda_attn_i8; do
    sed -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' -e "$launch" "$src/$f.cu" > "$out/$f.cc"
done
{ fa_obj "$out" && fa_obj "$out" cuda_attn_gqa && fa_obj "$out" cuda_attn_mma; } &
fa_pid=$!
for f in cuda_attn cuda_attn_i8; do
    if grep -q '<<<\|extern __shared__' "$out/$f.cc"; then
        echo "run-fa-emu: $f.cu: a launch or shared declaration the sed lines miss" >&2; exit 1
    fi
    g++ $F -c "$out/$f.cc" -o "$out/$f.o"
done
wait $fa_pid
g++ $F "$here/fa_emu.cc" "$here/emu.cc" "$out/cuda_attn.o" "$out/cuda_attn_i8.o" "$out/cuda_attn_fa.o" "$out/cuda_attn_gqa.o" "$out/cuda_attn_mma.o" -o "$out/fa_emu"
rc=0
# HD NH NKV NROT NSM ORDER PRIOR:NEW...   (quick set first; EMU_DRIFT lets
# warps drift apart between block barriers)
quick='256 4 1 64 128 0 0:70 3:61
256 2 1 64 2 0 130:80
128 4 2 32 128 5 0:40 17:30 64:9
64 8 2 64 1 0 200:65
128 2 1 64 1 0 700:40
64 2 1 64 1 7 600:30 5:20'
full='256 8 2 64 128 0 0:130
256 16 4 64 132 0 1000:64
128 2 2 128 3 0 63:65 1:1 250:20
64 2 1 32 128 1 5:20 0:33 9:11'
cases=$quick
[ "$2" = quick ] || cases="$quick
$full"
echo "$cases" | while read -r c; do
    [ -n "$c" ] || continue
    "$out/fa_emu" $c || exit 1
done || rc=1
EMU_DRIFT=7 "$out/fa_emu" 128 2 1 64 2 3 40:50 0:30 || rc=1
exit $rc
