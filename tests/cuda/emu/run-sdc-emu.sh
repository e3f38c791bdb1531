#!/bin/sh
# tests/cuda/emu/run-sdc-emu.sh — knob moe_sdc: cuda_mmq.cu's sdc_kernel
# (one token's MOE combine with the shared expert's down product in its
# launch) against mmq_kernel then the combine's arithmetic under the host
# emulation (sdc_emu.cc), bit for bit; then planted bugs that must be
# caught.  No GPU; g++ (x86-64); seconds.
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/sdc-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the whole file, launchers too (cu_launch: the emulator's cuda_runtime.h)
cp "$src/cuda_mmq.cu" "$out/k.cc"
if grep -q '<<<' "$out/k.cc"; then
    echo "run-sdc-emu: cuda_mmq.cu: a <<<>>> launch the emulator does not take" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DSDC_MMQ="\"$out/k.cc\"" "$here/sdc_emu.cc" "$out/emu.o" -o "$out/sdc_emu"
"$out/sdc_emu"
# plant NAME PERL-EDIT: sdc_kernel edited so, the run must fail
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" SDC_MMQ "$here/sdc_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# the shared value not added (the combine's routed part only)
plant no-shared 's/dst\[r\] = cb_sum\(wv, yv, K, true,/dst[r] = cb_sum(wv, yv, K, false,/'
# the row's reduction one step short (each lane keeps half its lanes' sum)
plant short-sum 's/for \(int o = L \/ 2; o > 0; o >>= 1\)\n        s \+= __shfl_xor_sync\(0xffffffffu, s, o\);\n    cu_pdl_enter/for (int o = L \/ 2; o > 1; o >>= 1)\n        s += __shfl_xor_sync(0xffffffffu, s, o);\n    cu_pdl_enter/'
# a row past the end stored (its lanes computed on row 0)
plant past-end 's/if \(sl != 0 \|\| !live\)/if (sl != 0)/'
# the routed values read from the wrong pick's row
plant y-row 's/yv\[k\] = k < K \? y\[k \* sd.rows \+ r\] : 0.0f;/yv[k] = k < K ? y[(K - 1 - k) * sd.rows + r] : 0.0f;/'
