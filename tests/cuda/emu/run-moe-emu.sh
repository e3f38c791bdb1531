#!/bin/sh
# tests/cuda/emu/run-moe-emu.sh — runs the moe_grouped_i8 kernel plugin
# (route, schedule, quantise, grouped gate/up and down on emulated
# mma.sync m16n8k32 s8, combine, and the plugin glue moe_grouped_i8.c on a
# fake si_cuda_ext) under the host emulation against a C reference of the
# cpu backend's int8 MOE.  No GPU needed; g++/gcc (x86-64).  A few minutes
# on 2 cores.  Usage: run-moe-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/plugins/moe_grouped_i8
out=${1:-${TMPDIR:-/tmp}}/moe-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# The kernels as host C++: every <<<grid, block, smem, stream>>> launch
# becomes emu_launch_cfg(grid, block, smem, stream, body), the mma.sync asm
# a call of the emulated instruction, dynamic shared memory the emulator's.
for f in moe_i8_route moe_i8_gemm; do
    { echo '#include "moe_emu_ext.h"'; cat "$src/$f.cu"; } |
    perl -0pe 's/(\w+(?:<\w+>)?)<<<(.*?)>>>\((.*?)\);/emu_launch_cfg($2, [&] { $1($3); });/gs;
               s/asm\("mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32.*?\);/emu_mma_s8(c, a0, a1, a2, a3, b0, b1);/gs;
               s/extern __shared__ float smem\[\];/float *smem = emu::dyn_smem();/g' > "$out/$f.cc"
    if grep -q '<<<\|asm(\|extern __shared__' "$out/$f.cc"; then
        echo "run-moe-emu: $f.cu changed shape (launch, asm or smem); update the perl lines" >&2; exit 1
    fi
done
I="-I$here/moe -I$here -I$src -I$top/core/include -I$top/core -I$top/backends/cuda_sm120/include"
F="-std=c++17 -O2 -g $I -Wno-unused-function -DEMU_OWN_RUNTIME_API"
for f in moe_i8_route moe_i8_gemm; do g++ $F -c "$out/$f.cc" -o "$out/$f.o"; done
gcc -std=c11 -O2 -g $I -c "$src/moe_grouped_i8.c" -o "$out/glue.o"
for c in quant quant_k quant_iq fp16 types; do gcc -std=c11 -O2 -I$top/core/include -I$top/core -c "$top/core/$c.c" -o "$out/core_$c.o"; done
g++ $F "$here/moe/moe_emu.cc" "$here/emu.cc" "$out"/*.o -o "$out/moe_emu"
rc=0
# TYPE E K H F n fused shared [down type] [declines]; H 5888 = MI8_MAX_KIN (smem
# at the 48 KiB limit), H 6144 must be declined (it cannot launch)
while read -r c; do
    [ -z "$c" ] && continue
    "$out/moe_emu" $c || rc=1
done <<'CASES'
q8_0 16 4 256 128 40 0 0
q8_0 16 4 256 128 40 1 1
q8_0 16 4 256 256 300 0 1
q4_K 16 4 256 256 40 1 0
q4_K 16 4 256 256 300 0 1
q4_K 16 4 256 256 300 1 1 q6_K
q6_K 16 4 256 256 40 0 1
q5_K 16 4 256 256 40 1 1 q8_0
q8_0 16 4 96 160 33 0 1
q8_0 16 1 288 96 40 1 1
q8_0 4 2 5888 32 33 0 0
q8_0 4 2 6144 32 33 0 0 q8_0 declines
CASES
exit $rc
