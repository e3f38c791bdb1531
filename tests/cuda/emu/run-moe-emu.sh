#!/bin/sh
# tests/cuda/emu/run-moe-emu.sh — runs the moe_grouped_i8 kernel plugin
# under the host emulation.  No GPU needed; g++/gcc (x86-64).
#   moe_emu (moe/moe_emu.cc): the whole plugin (route, schedule, quantise,
#     grouped gate/up and down, combine, and the glue moe_grouped_i8.c on a
#     fake si_cuda_ext) against a C reference of the cpu backend's int8
#     MOE; both GEMM paths (knob weights: i8, the default, within 3e-2 of
#     the largest |ref|; gguf within 2e-3), the i8 copies kept or, on a
#     device without room (EMU_MEM_FREE), requantised per call; kept
#     copies not used stale when other weights are loaded at the same
#     addresses (EMU_REWRITE); a bad knob value refused.
#   mw_emu (moe/mw_emu.cc): the w8 GEMMs (moe_i8_w8.cu) stage by stage,
#     bit for bit against the scheme's exact integer reference, and against
#     an f64 product on the dequantised GGUF weights; group sizes 1, 64 (a
#     tile), 65, 0, 130 (padded last tile), the dense schedule.  EMU_WG=1:
#     also the wgmma GEMMs (moe_i8_wg.cu, knob wgmma) on the same inputs,
#     bit for bit the mma.sync kernels' output buffers; k-loops past the
#     ring of stages, threads in a random order each round (EMU_FIBER_ORDER).
#   moe_emu runs the i8 GEMMs on wgmma (the fake device is an sm_90) unless
#     EMU_WGMMA=false, and checks which ran.
# Planted bugs: one-line edits of moe_i8_w8.cu (or of cuda_w8.cuh as it
# pastes in), or of moe_i8_wg.cu, that must FAIL a given mw_emu case
# (plants() below); PLANT=no skips them.
# Modes: full (default), quick (what tests/cuda/emu.test runs: fewer cases
# and plants).  Usage: run-moe-emu.sh [builddir] [quick|full]
set -e
mode=${2:-full}
case $mode in full|quick) ;; *) echo "usage: run-moe-emu.sh [builddir] [quick|full]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/plugins/moe_grouped_i8
out=${1:-${TMPDIR:-/tmp}}/moe-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# The kernels as host C++: every <<<grid, block, smem, stream>>> launch
# becomes emu_launch_cfg(grid, block, smem, stream, body), the GGUF GEMMs'
# mma.sync asm a call of the emulated instruction, the w8 GEMMs' PTX
# wrappers (cuda_ptx.cuh) ../ptx_emu.h's, dynamic shared memory the
# emulator's.  (kernel_src prints one; the planted-bug runs edit it.)
kernel_src() {
    { echo '#include "moe_emu_ext.h"'; cat "$src/$1.cu"; } |
    perl -0pe 's/(\w+(?:<[\w, ]+>)?)<<<(.*?)>>>\((.*?)\);/emu_launch_cfg($2, [&] { $1($3); });/gs;
               s/asm\("mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32.*?\);/emu_mma_s8(c, a0, a1, a2, a3, b0, b1);/gs;
               s/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/m;
               s/extern __shared__ __align__\(16\) uint8_t (\w+)\[\];/uint8_t *$1 = (uint8_t *)emu::dyn_smem();/g;
               s/extern __shared__ float smem\[\];/float *smem = emu::dyn_smem();/g'
}
for f in moe_i8_route moe_i8_gemm moe_i8_w8 moe_i8_wg; do
    kernel_src $f > "$out/$f.cc"
    if grep -q '<<<\|asm(\|extern __shared__\|"cuda_ptx.cuh"' "$out/$f.cc"; then
        echo "run-moe-emu: $f.cu changed shape (launch, asm or smem); update the perl lines" >&2; exit 1
    fi
done
I="-I$here/moe -I$here -I$src -I$top/core/include -I$top/core -I$top/backends/cuda_sm120/include -I$top/backends/cuda_sm120"
F="-std=c++17 -O2 -g $I -Wno-unused-function -DEMU_OWN_RUNTIME_API"
for f in moe_i8_route moe_i8_gemm moe_i8_w8 moe_i8_wg; do g++ $F -c "$out/$f.cc" -o "$out/$f.o" & done
gcc -std=c11 -O2 -g $I -c "$src/moe_grouped_i8.c" -o "$out/glue.o"
core=""
for c in quant quant_k quant_iq fp16 types; do
    gcc -std=c11 -O2 -I$top/core/include -I$top/core -c "$top/core/$c.c" -o "$out/core_$c.o"; core="$core $out/core_$c.o"
done
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -c "$here/moe/mw_emu.cc" -o "$out/mw_main.o"
wait
g++ $F "$here/moe/moe_emu.cc" "$out/emu.o" "$out/glue.o" "$out/moe_i8_route.o" "$out/moe_i8_gemm.o" "$out/moe_i8_w8.o" "$out/moe_i8_wg.o" $core -o "$out/moe_emu"
g++ $F "$out/mw_main.o" "$out/emu.o" "$out/moe_i8_route.o" "$out/moe_i8_w8.o" "$out/moe_i8_wg.o" $core -o "$out/mw_emu"
rc=0
npass=0; nfail=0; nplant=0; ncaught=0
# a case line: [VAR=value ...] ARGS...
run() {
    envs=""
    while [ $# -gt 0 ]; do case $1 in *=*) envs="$envs $1"; shift ;; *) break ;; esac; done
    if env $envs "$@"; then npass=$((npass + 1)); else echo "  ^ FAILED: $envs $*"; nfail=$((nfail + 1)); rc=1; fi
}
# moe_emu: [EMU_WEIGHTS=i8|gguf] [EMU_KTILE=128|64] [EMU_WGMMA=true|false] [EMU_MEM_FREE=bytes] [EMU_FS_ADD=n] [EMU_REWRITE=1] TYPE E K H F n fused shared [down type] [declines]
# (H 5888 = MI8_MAX_KIN: smem of the gguf path at the 48 KiB limit; H 6144
# must be declined; H, F or Fs not multiples of 128 take the gguf path
# under weights = i8 too)
moe_cases() {
    while read -r c; do
        [ -z "$c" ] && continue
        case $c in quick\ *) c=${c#quick } ;; *) [ $mode = quick ] && continue ;; esac
        run $(echo "$c" | sed "s|moe_emu|$out/moe_emu|")
    done <<'CASES'
quick EMU_WEIGHTS=gguf moe_emu q8_0 16 4 256 128 40 0 0
quick EMU_WEIGHTS=gguf moe_emu q8_0 16 4 256 128 40 1 1
EMU_WEIGHTS=gguf moe_emu q8_0 16 4 256 256 300 0 1
EMU_WEIGHTS=gguf moe_emu q4_K 16 4 256 256 40 1 0
quick EMU_WEIGHTS=gguf moe_emu q4_K 16 4 256 256 300 0 1
EMU_WEIGHTS=gguf moe_emu q4_K 16 4 256 256 300 1 1 q6_K
quick EMU_WEIGHTS=gguf moe_emu q6_K 16 4 256 256 40 0 1
EMU_WEIGHTS=gguf moe_emu q5_K 16 4 256 256 40 1 1 q8_0
quick EMU_WEIGHTS=gguf moe_emu q8_0 16 4 96 160 33 0 1
EMU_WEIGHTS=gguf moe_emu q8_0 16 1 288 96 40 1 1
EMU_WEIGHTS=gguf moe_emu q8_0 4 2 5888 32 33 0 0
quick EMU_WEIGHTS=gguf moe_emu q8_0 4 2 6144 32 33 0 0 q8_0 declines
quick moe_emu q8_0 16 4 256 128 40 1 0
quick EMU_FS_ADD=128 moe_emu q8_0 16 4 256 128 300 0 1
quick EMU_REWRITE=1 moe_emu q4_K 16 4 256 256 300 1 1 q6_K
quick EMU_MEM_FREE=1073741824 moe_emu q5_K 16 4 256 256 40 1 1 q8_0
EMU_REWRITE=1 moe_emu q6_K 16 4 512 256 40 0 1
EMU_MEM_FREE=1073741824 moe_emu q4_K 16 4 256 256 300 0 1
quick moe_emu q8_0 16 4 96 160 33 0 1
moe_emu q8_0 4 2 5888 128 33 0 0
quick EMU_WEIGHTS=bogus moe_emu q8_0 16 4 256 128 40 0 0
EMU_KTILE=64 moe_emu q4_K 16 4 256 256 300 1 1 q6_K
quick EMU_KTILE=96 moe_emu q8_0 16 4 256 128 40 0 0
quick EMU_WGMMA=false moe_emu q4_K 16 4 256 256 300 1 1 q6_K
EMU_WGMMA=false EMU_KTILE=64 EMU_MEM_FREE=1073741824 moe_emu q8_0 16 4 256 128 40 0 1
quick EMU_WGMMA=yes moe_emu q8_0 16 4 256 128 40 0 0
CASES
}
# mw_emu: [EMU_WG=1 [EMU_NSM=n]] [EMU_KT=64] [EMU_FIBER_ORDER=seed] [EMU_DRIFT=seed] TYPE H F FUSED [dense]
mw_cases() {
    run "$out/mw_emu" q8_0 256 384 0; run "$out/mw_emu" q8_0 512 128 1 dense
    run "$out/mw_emu" q6_k 256 256 1
    # ktile = 64 (the A/B), and 128 where a block holds only 99 KiB (sm_120: 64)
    EMU_KT=64 run "$out/mw_emu" q4_k 256 256 1; EMU_SMEM_OPTIN=101376 run "$out/mw_emu" q8_0 256 256 0
    # the wgmma GEMMs (moe_i8_wg.cu) against the mma.sync ones, bit for bit:
    # the groups, the dense schedule, 8 k-tiles (the 4-stage ring twice
    # round) in random thread orders
    EMU_WG=1 run "$out/mw_emu" q8_0 256 384 0; EMU_WG=1 run "$out/mw_emu" q8_0 512 128 1 dense
    EMU_WG=1 EMU_FIBER_ORDER=1 run "$out/mw_emu" q6_k 1024 256 1
    # (EMU_NSM: the grid's floor of blocks on an H200, one feature block a
    # block here; unset, as many as the k-tiles allow)
    EMU_WG=1 EMU_NSM=132 run "$out/mw_emu" q5_k 256 256 1
    [ $mode = quick ] && return 0
    run "$out/mw_emu" q5_k 1024 256 0; run "$out/mw_emu" q8_0 256 256 0; run "$out/mw_emu" q4_k 256 256 1 dense
    run "$out/mw_emu" q8_0 512 384 0 dense; run "$out/mw_emu" q5_k 256 256 1
    # (down with 5 k-tiles, feature blocks 6 + 2 a block; gate/up with 12
    # k-tiles; a mma.sync reference at ktile 64)
    EMU_WG=1 EMU_FIBER_ORDER=2 run "$out/mw_emu" q8_0 1024 640 0; EMU_WG=1 EMU_DRIFT=3 run "$out/mw_emu" q4_k 1536 256 1
    EMU_WG=1 EMU_FIBER_ORDER=3 run "$out/mw_emu" q5_k 256 256 1 dense; EMU_WG=1 EMU_KT=64 run "$out/mw_emu" q6_k 512 256 0
    EMU_WG=1 EMU_FIBER_ORDER=4 run "$out/mw_emu" q8_0 512 384 0 dense
}
# Planted bugs: moe_i8_w8.cu (plant) or moe_i8_wg.cu (wplant) with one
# edit must FAIL the given mw_emu case.
#   plant NAME PERL-EXPR [ENV=value ...] ARGS...
plant() { plant_in moe_i8_w8 moe_i8_wg "$@"; }
wplant() { plant_in moe_i8_wg moe_i8_w8 "$@"; }
# plant_in KERNEL OTHER NAME PERL-EXPR ...: KERNEL edited, OTHER as built
plant_in() {
    kern=$1; other=$2; name=$3; expr=$4; shift 4; nplant=$((nplant + 1))
    envs=""
    while [ $# -gt 0 ]; do case $1 in *=*) envs="$envs $1"; shift ;; *) break ;; esac; done
    kernel_src $kern | perl -0pe "$expr" > "$out/bug.cc"
    if cmp -s "$out/bug.cc" "$out/$kern.cc"; then echo "plant $name: the edit did not apply (kernel changed?)"; rc=1; return; fi
    g++ $F -O1 -c "$out/bug.cc" -o "$out/bug.o"
    g++ $F "$out/mw_main.o" "$out/emu.o" "$out/moe_i8_route.o" "$out/bug.o" "$out/$other.o" $core -o "$out/mw_bug"
    if env $envs "$out/mw_bug" "$@" > "$out/bug.log" 2>&1; then
        echo "plant $name: NOT detected by $envs $*"; rc=1
    else
        echo "plant $name: detected ($({ grep -m1 '^emu:\|^  [a-z]' "$out/bug.log" || tail -1 "$out/bug.log"; } | cut -c1-110))"
        ncaught=$((ncaught + 1))
    fi
}
plants() {
    # gate and up rows of the A tile swapped: silu(u) * g
    plant gu-swap 's/j < 32 \? wa : wb/j < 32 ? wb : wa/' q8_0 256 384 0
    # the B rows of gate/up not gathered through row_tok (the tile's rows as tokens)
    plant no-gather 's/GU \? mw_token\(sc, r0 \+ idx \/ CH\) : r0/GU ? r0 + idx \/ CH : r0/' q6_k 256 256 1
    # a 128 block's int32 chain restarted at its second k-tile
    plant chain-start 's/if \(h == 0 && kk == 0\)/if (kk == 0)/' EMU_KT=64 q8_0 512 128 1 dense
    # ktile 128: an A chunk's row at 64-byte k-tiles' chunks a row
    plant kt128-rows 's/mw_arow<GU>\(wa, wb, e, f0, idx \/ CH, out, q, s\)/mw_arow<GU>(wa, wb, e, f0, idx \/ 4, out, q, s)/' q6_k 256 256 1
    # moe_i8_wg.cu: gate and up rows of a thread's fragment not of one
    # feature (mma.sync's 32-row interleave); B rows not gathered through
    # row_tok; down storing padding rows (slot -1: before y); chunks stored
    # unswizzled; a consumer not waiting for its stage to fill (the parity
    # of the phase before); the producer refilling stages never released
    wplant wg-interleave 's/up = GU && \(\(i >> 3\) & 1\);/up = GU \&\& ((i >> 5) \& 1);/' EMU_WG=1 q8_0 256 384 0
    wplant wg-gather 's/GU \? mwg_token\(sc, r0 \+ rl \+ 16 \* i\) : r0/GU ? r0 + rl + 16 * i : r0/' EMU_WG=1 q6_k 256 256 1
    wplant wg-pad-store 's/if \(slot < 0\)\n\s*continue;//' EMU_WG=1 q5_k 256 256 1
    wplant wg-swizzle 's/\(\(ch \^ \(rl & 7\)\) << 4\)/(ch << 4)/' EMU_WG=1 q4_k 256 256 0
    wplant wg-full-parity 's/mbar_wait\(full \+ 8 \* s, ph\);/mbar_wait(full + 8 * s, ph ^ 1);/' EMU_WG=1 q8_0 512 128 1 dense
    wplant wg-no-empty 's/if \(q >= MWG_STAGES\)\n\s*mbar_wait\(empty \+ 8 \* s, ph \^ 1\);//' EMU_WG=1 q6_k 1024 256 1
    # (a block's later feature blocks multiplying its first one's weight rows)
    wplant wg-fb-rows 's/e, \(int64_t\)fb \* MWG_FW\(GU\), t\)/e, (int64_t)fb0 * MWG_FW(GU), t)/' EMU_WG=1 q8_0 256 384 0
    [ $mode = quick ] && return 0
    # the B scales read at the tile row, not its token
    plant b-scale 's/tid < MW_BN \? \(GU \? mw_token\(sc, r0 \+ tid\) : r0 \+ tid\)/tid < MW_BN ? r0 + tid/' q4_k 256 256 0
    # down stores the padding rows too (slot -1: before y)
    plant pad-store 's/if \(slot < 0\)\n\s*continue;//' q5_k 256 256 1
    # the SwiGLU rows quantised past the schedule's tiles
    plant quant-rows 's/rows = r < rows \? r : rows;/;/' q8_0 256 384 0
    # the block barrier of the k loop dropped: warps drifting apart read a refilled stage
    plant no-sync 's/\/\/ whose stage is refilled next\n\s*__syncthreads\(\);/;/' EMU_DRIFT=1 q6_k 256 256 1
    # a kept copy's fingerprint ignoring the bytes: other weights at the same address not requantised
    plant fp-ignored 's/fp\[2\] = !\(fp\[1\] == 1u && fp\[0\] == h\);/fp[2] = !(fp[1] == 1u);/' q8_0 256 256 0
    # an expert's weight rows at expert_rows of the wrong weight (fused: up's stride of the gate)
    plant expert-stride 's/return e \* w\.expert_rows \+ f0/return e * wa.expert_rows \/ (GU ? 2 : 1) + f0/' q5_k 256 256 1
    # moe_i8_wg.cu: the B scales not gathered; a down row's slot taken for
    # both its columns; up of the pair's first token for both; warpgroup 1
    # multiplying warpgroup 0's A rows; the k32 steps' descriptors not
    # advanced by 32 bytes; the fold before the wgmma completed; the
    # producer waiting on the phase it is in (the ring round twice); a
    # release before every lane's reads are done (threads in a random
    # order); the dense schedule's padding rows reading past the tokens
    wplant wg-scale-gather 's/\(GU \? mwg_token\(sc, r0 \+ t\) : r0 \+ t\)/r0 + t/' EMU_WG=1 q4_k 256 256 0
    wplant wg-slot-col 's/mwg_slot\(sc, r0 \+ 8 \* j \+ col0 \+ c\)/mwg_slot(sc, r0 + 8 * j + col0)/' EMU_WG=1 q8_0 256 384 0
    wplant wg-up-col 's/acc\[4 \* j \+ 2 \+ c\]/acc[4 * j + 2]/' EMU_WG=1 q6_k 256 256 1
    wplant wg-a-half 's/st \+ MWG_A \+ 64 \* 128 \* wg/st + MWG_A/' EMU_WG=1 q5_k 256 256 0
    wplant wg-kstep 's/da \+ 2 \* kk, db \+ 2 \* kk/da + kk, db + kk/' EMU_WG=1 q8_0 256 256 1
    wplant wg-wait 's/wg_wait<0>\(\);/wg_wait<1>();/' EMU_WG=1 q4_k 256 256 1
    wplant wg-empty-parity 's/mbar_wait\(empty \+ 8 \* s, ph \^ 1\);/mbar_wait(empty + 8 * s, ph);/' EMU_WG=1 q8_0 1024 128 0
    wplant wg-release 's/__syncwarp\(\);   \/\/ every lane.s reads of the stage are done/;/' EMU_WG=1 EMU_FIBER_ORDER=1 q6_k 1024 256 1
    wplant wg-dense-pad 's/\(r < s\.n_rows \? r : s\.n_rows - 1\)/r/' EMU_WG=1 q8_0 512 128 1 dense
    # (and a thread's gate/up rows taken 16 features apart, down's 8)
    wplant wg-a-step 's/p\.a_step = GU \? 8 : 16;/p.a_step = GU ? 16 : 8;/' EMU_WG=1 q4_k 512 256 1
}
moe_cases
mw_cases
if [ "$PLANT" != no ]; then plants; fi
echo "run-moe-emu ($mode): $npass cases passed, $nfail failed; $ncaught of $nplant planted bugs caught: $([ $rc = 0 ] && echo OK || echo FAIL)"
exit $rc
