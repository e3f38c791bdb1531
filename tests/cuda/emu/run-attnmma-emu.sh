#!/bin/sh
# tests/cuda/emu/run-attnmma-emu.sh — runs the attention kernel of the
# attn_mma_i8 plugin (plugins/attn_mma_i8/ami8_attn.cu: int8 q, scores on
# mma.sync m16n8k32 s8, online softmax, P.V, gate) under the host
# emulation against a double-precision reference over the same paged int8
# cache (attnmma_emu.cc says what is compared and the tolerances).  No GPU
# needed; g++ (x86-64).  Usage: run-attnmma-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/plugins/attn_mma_i8
out=${1:-${TMPDIR:-/tmp}}/attnmma-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# The kernel as host C++: every k<<<g, b, sm, s>>>(args); becomes
# emu_launch_s(g, b, sm, s, body), the mma.sync asm the emulated
# instruction of ptx_emu.h (it computes D = A.B; the kernel's asm
# accumulates into c, so the sum is added, wrapping as the int32 adder).
{ echo '#include "cuda_runtime.h"'; echo '#include "ptx_emu.h"'; cat "$src/ami8_attn.cu"; } |
perl -0pe 's/(\w+(?:<\w+>)?)<<<(.*?)>>>\((.*?)\);/emu_launch_s($2, [&] { $1($3); });/gs;
           s/asm\("mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32.*?\);/{ int d_[4]; mma_k32(d_, a, b0, b1); for (int i_ = 0; i_ < 4; i_++) c[i_] = (int)((uint32_t)c[i_] + (uint32_t)d_[i_]); }/gs' \
    > "$out/ami8_attn.cc"
if grep -q '<<<\|asm(' "$out/ami8_attn.cc"; then
    echo "run-attnmma-emu: ami8_attn.cu changed shape (launch or asm); update the perl lines" >&2; exit 1
fi
F="-std=c++17 -O2 -g -I$here -I$src -Wno-unused-function"
g++ $F -c "$out/ami8_attn.cc" -o "$out/ami8_attn.o"
g++ $F "$here/attnmma_emu.cc" "$here/emu.cc" "$out/ami8_attn.o" -o "$out/attnmma_emu"
rc=0
# HD NH NKV MIX PRIOR:NEW per sequence (n = sum of NEW: 64..300 tokens per op)
while read -r c; do
    [ -n "$c" ] && { "$out/attnmma_emu" $c || rc=1; }
done <<'CASES'
128 4 4 0 0:64
128 8 1 0 5:70 40:30 0:100
256 8 1 0 0:300
256 4 4 1 17:40 100:33 3:60
256 16 2 0 200:64
64 4 1 0 1:65
128 2 2 1 0:100 33:50 15:1
256 2 1 1 31:17 0:47 64:16
CASES
exit $rc
