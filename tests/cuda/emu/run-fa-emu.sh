#!/bin/sh
# tests/cuda/emu/run-fa-emu.sh — runs the flash-attention prefill core of
# cuda_sm120 (cuda_attn_fa.cu: f16 mma.sync, ldmatrix, cp.async; splits
# merged by cuda_attn.cu's combine_kernel) through si_cu_attn under the host
# emulation with the PTX of ptx_emu.h, against a double-precision reference
# (fa_emu.cc says what is compared).  No GPU; g++ >= 12 (x86-64).
# Knob attn_fa_tile = v2 (fa2_kernel) runs every op of more than 64
# tokens, and each such case also runs v1 on the same op (the same bits
# where both plans split alike); ops of <= 64 tokens take v1 by design, so
# each of those cases has a v2 twin of more tokens; then planted bugs in
# v2 that a case must catch.
# quick: the cases of emu.test (~1.5 min on 2 cores); objs: only compile
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
    f=${2:-cuda_attn_fa} from=${3:-$src}
    {
        cat <<'EOT'
#include "cuda_runtime.h"
#include "ptx_emu.h"
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, int, int v) { return v <= 232448 ? cudaSuccess : cudaErrorInvalidValue; }
EOT
        sed -e '/^\/\/ ---- PTX wrappers/,/^\/\/ ---- end of PTX wrappers/d' -e '/^#include "cuda_ptx.cuh"/d' \
            -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' -e "$launch" "$from/$f.cu"
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
# warps drift apart between block barriers).  Cases of <= 64 tokens run v1
# (the plan's rule); the line after each is its v2 twin.
quick='256 4 1 64 128 0 0:70 3:61
256 2 1 64 2 0 130:80
128 4 2 32 128 5 0:40 17:30 64:9
64 8 2 64 1 0 200:65
128 2 1 64 1 0 700:40
128 2 1 64 16 0 700:72
64 2 1 64 1 7 600:30 5:20
64 2 1 64 8 7 600:50 5:40'
full='256 8 2 64 128 0 0:130
256 16 4 64 132 0 1000:64
256 16 4 64 132 0 1000:100
128 2 2 128 3 0 63:65 1:1 250:20
64 2 1 32 128 1 5:20 0:33 9:11
64 2 1 32 128 1 5:40 0:33 9:21'
# v2's own (EMU_FA_EXPECT=v2: the plan must take it): three sequences round
# robin in each 128-row tile (three passes a tile, the stage parity carried
# between them), hd 256 and 64; v2 splitting less than v1 (2 splits, v1 4:
# the other rounding path of the v1 comparison)
v2='256 4 2 64 128 9 0:70 40:60 5:50
64 4 2 32 8 9 0:70 40:60 5:50
64 4 2 64 8 0 700:300'
cases=$quick
[ "$2" = quick ] || cases="$quick
$full"
echo "$cases" | while read -r c; do
    [ -n "$c" ] || continue
    "$out/fa_emu" $c || exit 1
done || rc=1
echo "$v2" | while read -r c; do
    EMU_FA_EXPECT=v2 "$out/fa_emu" $c || exit 1
done || rc=1
EMU_DRIFT=7 "$out/fa_emu" 128 2 1 64 2 3 40:50 0:30 || rc=1
EMU_DRIFT=11 EMU_FA_EXPECT=v2 "$out/fa_emu" 64 4 2 32 8 9 0:70 40:60 5:50 || rc=1
# the knob's v1 alone; sm_120's 99 KiB a block: v1 at hd 256, v2 at 128
EMU_FA_TILE=v1 EMU_FA_EXPECT=v1 "$out/fa_emu" 128 4 2 32 128 5 0:40 17:30 64:9 || rc=1
EMU_SMEM_OPTIN=101376 EMU_FA_EXPECT=v1 "$out/fa_emu" 256 2 1 64 2 0 130:80 || rc=1
EMU_SMEM_OPTIN=101376 EMU_FA_EXPECT=v2 "$out/fa_emu" 128 2 1 64 2 3 40:50 0:30 || rc=1
[ $rc = 0 ] || exit 1

# plant NAME PERL-EDIT CASE...: fa2_kernel's source edited so (perl -0pe)
# must make one of the cases fail (fa_emu with $penv); an edit that no
# longer applies is an error (plant.sh's rule), so no plant goes stale
plant() {
    name=$1 edit=$2
    shift 2
    mkdir -p "$out/bug"
    perl -0pe "$edit" "$src/cuda_attn_fa.cu" > "$out/bug/cuda_attn_fa.cu"
    cmp -s "$src/cuda_attn_fa.cu" "$out/bug/cuda_attn_fa.cu" && { echo "plant $name: the edit did not apply (kernel changed?)"; exit 1; }
    fa_obj "$out/bug" cuda_attn_fa "$out/bug"
    g++ $F "$here/fa_emu.cc" "$here/emu.cc" "$out/cuda_attn.o" "$out/cuda_attn_i8.o" "$out/bug/cuda_attn_fa.o" "$out/cuda_attn_gqa.o" "$out/cuda_attn_mma.o" -o "$out/bug/fa_emu"
    for c in "$@"; do
        if ! env $penv "$out/bug/fa_emu" $c > "$out/bug/log" 2>&1; then
            echo "plant $name: detected ($c:$(grep -m1 'FAIL\|emu:' "$out/bug/log" | rev | cut -c1-72 | rev))"
            return 0
        fi
    done
    echo "plant $name: NOT detected"
    exit 1
}
penv=EMU_FA_EXPECT=v2
multi='64 4 2 32 8 9 0:70 40:60 5:50'
# the next tile's K and V into the stage being read
plant next-stage 's/fa2_load_stage<D>\(kv, st \^ 1, ps, step, j0 \+ FA_BN\)/fa2_load_stage<D>(kv, st, ps, step, j0 + FA_BN)/' "$multi"
# P V from stage 0's V whatever the stage
plant pv-stage 's/fa_pv<D>\(o, s, L, L.va0 \+ so\)/fa_pv<D>(o, s, L, L.va0)/' "$multi"
# the stage parity reset at each pass: its first tile may land where a
# warp still reads the pass before's last tile (a race)
plant pass-stage 's/(fa_next_pass<FA2_BM, D>\(a, done, seq_s, pos_s, c1, g, rl, ps\);\n        fa2_load_stage<D>\(kv, )st/${1}st = 0/' "$multi"
# the tiles 64 tokens apart (v1's), not 128 (three tiles: tokens left out)
plant tile-stride 's/\(gridDim.y - 1 - blockIdx.y\) \* FA2_BM/(gridDim.y - 1 - blockIdx.y) * FA_BM/' '64 4 2 64 8 0 700:300'
# rows 64..127 taken as done from the start (v1's one-word row set)
plant rows-hi 's/fa_rows d = \{ 0ull, BM > 64 \? 0ull : ~0ull \};/fa_rows d = { 0ull, ~0ull };/' "$multi"
# O rescaled only where both of the lane's row maxima moved
plant rescale 's/if \(f\[0\] != 1.0f \|\| f\[1\] != 1.0f\)/if (f[0] != 1.0f \&\& f[1] != 1.0f)/' "$multi"
# the tile's block barrier gone (caught as warps drift apart)
penv="EMU_FA_EXPECT=v2 EMU_DRIFT=7"
plant no-sync 's/__syncthreads\(\);(   \/\/ the tile landed in stage st)/;$1/' "$multi" '128 2 1 64 2 3 40:50 0:30'
exit 0
