#!/bin/sh
# tests/cuda/emu/run-fa-emu.sh — runs the flash-attention prefill core of
# cuda_sm120 (cuda_attn_fa.cu: f16 mma.sync, ldmatrix, cp.async; splits
# merged by cuda_attn.cu's combine_kernel) through si_cu_attn under the host
# emulation with the PTX of ptx_emu.h, against a double-precision reference
# (fa_emu.cc says what is compared).  No GPU; g++ >= 12 (x86-64).
# Knob attn_fa_tile = v2 (fa2_kernel) runs every op of more than 64
# tokens, and each such case also runs v1 on the same op (the same bits
# where both plans split alike); ops of <= 64 tokens take v1 by design, so
# each of those cases has a v2 twin of more tokens.  attn_fa_tile = v3
# (cuda_attn_fa3.cu: wgmma, mbarriers; ptx_emu.h's f16 wgmma decodes its
# descriptors from the ISA) runs after v2 on every hd 128 / 256 case (the
# same bits as v2 here: fa_emu.cc says why), and on cases of its own;
# every op that runs v3 runs it again with attn_fa3_overlap (the softmax
# overlapping the tile before's P V: v3's bits expected).  Then planted
# bugs in v2, v3 and the overlap that a case must catch.
# quick: the cases of emu.test; objs: only compile cuda_attn_fa.cu,
# cuda_attn_fa3.cu, cuda_attn_gqa.cu, cuda_attn_mma.cu and
# cuda_attn_ring.cu (the split decode cores: cp.async too) as host C++
# into builddir/<name>.o (run-attn-emu.sh links them: si_cu_attn's
# dispatch calls them).  Usage:
# run-fa-emu.sh [builddir] [quick|objs]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
F="-std=c++17 -O2 -fno-strict-aliasing -I$here -I$src -I$top/core/include -Wno-unused-function"
launch='s/\([A-Za-z_][A-Za-z_0-9]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(\(.*\));/emu_launch_s(\3, [\&] { \1(\4); });/'
# cuda_attn_fa.cu, cuda_attn_gqa.cu, cuda_attn_mma.cu and cuda_attn_ring.cu ($2): cuda_ptx.cuh (and
# any PTX wrappers of their own) cut
# (ptx_emu.h stands in), the device queries and the shared-memory opt-in
# answered as an sm_90 would
# (cuda_attn_fa.cuh, the pieces v1, v2 and v3 share, pasted in place of
# its #include, so the plants reach it; cuda_attn_fa3.cu's device probe
# cut: the emulator has no device to probe)
fa_obj() {
    f=${2:-cuda_attn_fa} from=${3:-$src}
    {
        cat <<'EOT'
#include "cuda_runtime.h"
#include "ptx_emu.h"
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, int, int v) { return v <= 232448 ? cudaSuccess : cudaErrorInvalidValue; }
static inline int __any_sync(unsigned m, int p) { for (int o = 16; o > 0; o >>= 1) p |= __shfl_xor_sync(m, p, o); return p != 0; }
EOT
        sed -e "/^#include \"cuda_attn_fa.cuh\"/{r $from/cuda_attn_fa.cuh" -e 'd;}' "$from/$f.cu" |
        sed -e '/^\/\/ ---- PTX wrappers/,/^\/\/ ---- end of PTX wrappers/d' -e '/^#include "cuda_ptx.cuh"/d' \
            -e '/^\/\/ ---- device probe/,/^\/\/ ---- end of device probe/d' \
            -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' \
            -e 's/extern __shared__ __align__(16) uint8_t fa3_sm_raw\[\];/uint8_t *fa3_sm_raw = (uint8_t *)emu::dyn_smem();/' \
            -e "$launch"
    } > "$1/$f.cc"
    if grep -q '<<<\|extern __shared__\|asm' "$1/$f.cc"; then
        echo "run-fa-emu: $f.cu: a launch, shared declaration or asm the sed lines miss" >&2; exit 1
    fi
    g++ $F -c "$1/$f.cc" -o "$1/$f.o"
}
if [ "$2" = objs ]; then
    fa_obj "${1:?builddir}"
    fa_obj "$1" cuda_attn_fa3
    fa_obj "$1" cuda_attn_gqa
    fa_obj "$1" cuda_attn_mma
    fa_obj "$1" cuda_attn_ring
    exit 0
fi
out=${1:-${TMPDIR:-/tmp}}/fa-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# cuda_attn.cu / cuda_attn_i8.cu as run-attn-emu.sh makes them
for f in cuda_attn cuda_attn_i8; do
    sed -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' -e "$launch" "$src/$f.cu" > "$out/$f.cc"
done
{ fa_obj "$out" && fa_obj "$out" cuda_attn_gqa && fa_obj "$out" cuda_attn_mma && fa_obj "$out" cuda_attn_ring; } &
fa_pid2=$!
fa_obj "$out" cuda_attn_fa3 &
fa_pid=$!
for f in cuda_attn cuda_attn_i8; do
    if grep -q '<<<\|extern __shared__' "$out/$f.cc"; then
        echo "run-fa-emu: $f.cu: a launch or shared declaration the sed lines miss" >&2; exit 1
    fi
    g++ $F -c "$out/$f.cc" -o "$out/$f.o"
done
wait $fa_pid
wait $fa_pid2
g++ $F "$here/fa_emu.cc" "$here/emu.cc" "$out/cuda_attn.o" "$out/cuda_attn_i8.o" "$out/cuda_attn_fa.o" "$out/cuda_attn_fa3.o" "$out/cuda_attn_gqa.o" "$out/cuda_attn_mma.o" "$out/cuda_attn_ring.o" -o "$out/fa_emu"
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
# v3's own (EMU_FA_TILE=v3, EMU_FA_EXPECT=v3: v3 first, then v2 on the
# same op; every hd 128 / 256 case above runs v3 after v2 anyway): three
# sequences round robin in each tile with splits (hd 256), a prefix long
# enough for several splits, the ring's stages and parities carried over
# passes and tiles with warps drifting apart and threads in random order;
# full adds a 2000-position context; the knob v3 at hd 64 runs v2
v3='256 4 2 64 32 9 300:70 40:60 5:50
128 2 1 64 16 3 300:72 0:66'
[ "$2" = quick ] || v3="$v3
256 2 1 64 4 0 2000:100
128 4 1 64 132 0 0:300"
echo "$v3" | while read -r c; do
    EMU_FA_TILE=v3 EMU_FA_EXPECT=v3 "$out/fa_emu" $c || exit 1
done || rc=1
EMU_DRIFT=5 EMU_FA_TILE=v3 EMU_FA_EXPECT=v3 "$out/fa_emu" 256 2 1 64 4 9 0:70 40:60 5:50 || rc=1
EMU_FIBER_ORDER=3 EMU_FA_TILE=v3 EMU_FA_EXPECT=v3 "$out/fa_emu" 128 4 2 32 8 5 0:100 17:90 || rc=1
EMU_FA_TILE=v3 EMU_FA_EXPECT=v2 "$out/fa_emu" 64 4 2 32 8 9 0:70 40:60 5:50 || rc=1
[ $rc = 0 ] || exit 1

# plant NAME FILE PERL-EDIT CASE...: FILE (cuda_attn_fa.cu, its
# cuda_attn_fa.cuh or cuda_attn_fa3.cu) edited (perl -0pe) must make one
# of the cases fail (fa_emu with $penv); an edit that no longer applies is
# an error (plant.sh's rule), so no plant goes stale
plant() {
    name=$1 file=$2 edit=$3
    shift 3
    mkdir -p "$out/bug"
    for f in cuda_attn_fa.cu cuda_attn_fa.cuh cuda_attn_fa3.cu; do cp "$src/$f" "$out/bug/$f"; done
    perl -0pe "$edit" "$src/$file" > "$out/bug/$file"
    cmp -s "$src/$file" "$out/bug/$file" && { echo "plant $name: the edit did not apply (kernel changed?)"; exit 1; }
    # (only the objects the edit reaches are rebuilt)
    o1=$out/cuda_attn_fa.o o3=$out/cuda_attn_fa3.o
    [ "$file" = cuda_attn_fa3.cu ] || { fa_obj "$out/bug" cuda_attn_fa "$out/bug"; o1=$out/bug/cuda_attn_fa.o; }
    [ "$file" = cuda_attn_fa.cu ] || { fa_obj "$out/bug" cuda_attn_fa3 "$out/bug"; o3=$out/bug/cuda_attn_fa3.o; }
    g++ $F "$here/fa_emu.cc" "$here/emu.cc" "$out/cuda_attn.o" "$out/cuda_attn_i8.o" "$o1" "$o3" "$out/cuda_attn_gqa.o" "$out/cuda_attn_mma.o" "$out/cuda_attn_ring.o" -o "$out/bug/fa_emu"
    for c in "$@"; do
        if ! env $penv "$out/bug/fa_emu" $c > "$out/bug/log" 2>&1; then
            echo "plant $name: detected ($c:$(grep -m1 'FAIL\|emu:' "$out/bug/log" | rev | cut -c1-72 | rev))"
            return 0
        fi
    done
    echo "plant $name: NOT detected"
    exit 1
}
FA=cuda_attn_fa.cu FH=cuda_attn_fa.cuh F3=cuda_attn_fa3.cu
penv=EMU_FA_EXPECT=v2
multi='64 4 2 32 8 9 0:70 40:60 5:50'
# the next tile's K and V into the stage being read
plant next-stage $FA 's/fa2_load_stage<D>\(kv, st \^ 1, ps, step, j0 \+ FA_BN\)/fa2_load_stage<D>(kv, st, ps, step, j0 + FA_BN)/' "$multi"
# P V from stage 0's V whatever the stage
plant pv-stage $FA 's/fa_pv<D>\(o, s, L, L.va0 \+ so\)/fa_pv<D>(o, s, L, L.va0)/' "$multi"
# the stage parity reset at each pass: its first tile may land where a
# warp still reads the pass before's last tile (a race)
plant pass-stage $FA 's/(fa_next_pass<FA2_BM, D>\(a, done, seq_s, pos_s, c1, g, rl, ps\);\n        fa2_load_stage<D>\(kv, )st/${1}st = 0/' "$multi"
# the tiles 64 tokens apart (v1's), not 128 (three tiles: tokens left out)
plant tile-stride $FA 's/\(gridDim.y - 1 - blockIdx.y\) \* FA2_BM/(gridDim.y - 1 - blockIdx.y) * FA_BM/' '64 4 2 64 8 0 700:300'
# rows 64..127 taken as done from the start (v1's one-word row set)
plant rows-hi $FH 's/fa_rows d = \{ 0ull, BM > 64 \? 0ull : ~0ull \};/fa_rows d = { 0ull, ~0ull };/' "$multi"
# O rescaled only where both of the lane's row maxima moved
plant rescale $FA 's/if \(f\[0\] != 1.0f \|\| f\[1\] != 1.0f\)/if (f[0] != 1.0f \&\& f[1] != 1.0f)/' "$multi"
# the tile's block barrier gone (caught as warps drift apart)
penv="EMU_FA_EXPECT=v2 EMU_DRIFT=7"
plant no-sync $FA 's/__syncthreads\(\);(   \/\/ the tile landed in stage st)/;$1/' "$multi" '128 2 1 64 2 3 40:50 0:30'
# v3 (cuda_attn_fa3.cu, run first: EMU_FA_TILE=v3), against the reference
# and v2's bits.  V read K-major (the transpose bit off); V's descriptor
# with the slab stride (LBO) and the 8-row stride (SBO) swapped; Q's k16
# steps 16 bytes apart; P's fragment with its +8 rows and +8 columns
# swapped; O's rescale dropped; the zero-fill one row late (reads the
# unwritten NaN row past a sequence's end); the warpgroup's tile skip off
# by one; a consumer waiting for the phase before (reads a stage before it
# lands); the producer not waiting for a stage's release; P V not waited
# for before the stage's release
penv="EMU_FA_TILE=v3 EMU_FA_EXPECT=v3"
m3='256 4 2 64 8 9 0:70 40:60 5:50'
m3b='128 2 1 64 16 3 300:72 0:66'
plant v3-trans $F3 's/wg_mma_f16_n256_rs<1>/wg_mma_f16_n256_rs<0>/' "$m3"
plant v3-lbo-sbo $F3 's/\(\(uint64_t\)\(\(FA_BN \* 128\) >> 4\) << 16\) \|\n(\s*)\(\(uint64_t\)\(1024 >> 4\) << 32\)/((uint64_t)(1024 >> 4) << 16) |\n$1((uint64_t)((FA_BN * 128) >> 4) << 32)/' "$m3"
plant v3-kstep $F3 's/dq \+ \(\(\(kk >> 2\) \* G::SLAB_Q \+ \(kk & 3\) \* 32\) >> 4\)/dq + (((kk >> 2) * G::SLAB_Q + (kk \& 3) * 16) >> 4)/' "$m3b"
plant v3-p-order $F3 's/pa\[kv\]\[1\] = pack_h2\(s\[2 \* kv\]\[2\], s\[2 \* kv\]\[3\]\);\n(\s*)pa\[kv\]\[2\] = pack_h2\(s\[2 \* kv \+ 1\]\[0\], s\[2 \* kv \+ 1\]\[1\]\);/pa[kv][2] = pack_h2(s[2 * kv][2], s[2 * kv][3]);\n${1}pa[kv][1] = pack_h2(s[2 * kv + 1][0], s[2 * kv + 1][1]);/' "$m3"
plant v3-rescale $F3 's/(if \(f\[0\] != 1.0f \|\| f\[1\] != 1.0f\)   \/\/ a row maximum moved \(O \* 1 is O\)\n\s*)fa_rescale<D>\(o, f\);/${1};/' "$m3"
plant v3-zfill $F3 's/const bool in = j0 \+ r < k_hi;/const bool in = j0 + r <= k_hi;/' "$m3"
# (prior 1: warpgroup 0's last row of the first tile sits at 64, the
# first key of the second tile)
plant v3-skip $F3 's/if \(j0 <= last\) \{/if (j0 < last) {/' '128 2 1 64 16 0 1:130'
plant v3-full-parity $F3 's/mbar_wait\(full \+ 8 \* st, ph\);/mbar_wait(full + 8 * st, ph ^ 1);/' "$m3b"
penv="EMU_FA_TILE=v3 EMU_FA_EXPECT=v3 EMU_DRIFT=5"
plant v3-no-empty $F3 's/mbar_wait\(empty \+ 8 \* st, ph \^ 1\);/;/' "$m3b"
plant v3-pv-wait $F3 's/(wg_commit\(\);\n\s*)wg_wait<0>\(\);(\n\s*wg_fence_acc\(o\);)/${1};${2}/' "$m3b"
# attn_fa3_overlap (fa3_kernel<D, true>: run after v3 and v2 on each
# case, against the reference and v3's bits).  S read before its wait
# (wait_group 1 gone); P V committed before S (wait_group 1 then waits for
# the P V, not S); P V reading V from K's stage (the tile's, not the tile
# before's); V(n - 1) waited for with tile n's parity (a deadlock or an
# early read); O rescaled before the tile before's P V completed; the
# pending P V dropped before the tiles a warpgroup skips (prior 1: tile
# 128 is warpgroup 0's first skipped one, after two of its own); K
# released before S completed and the producer not waiting for V's
# release (races: caught as warps drift; K released early at a pass's
# first tile: later, K(n + 2) waits behind V(n + 1), whose stage is
# released only after S(n) completes, so that release cannot race; the
# threads in random order: else the spinning consumers run first)
penv="EMU_FA_TILE=v3 EMU_FA_EXPECT=v3"
plant ov-s-wait $F3 's/wg_wait<1>\(\);  \/\/ S\(n\) done, P V may run on/;/' "$m3b"
plant ov-order $F3 's/fa3_s_issue<D>\(s, dq, dk\);(\n\s*wg_commit\(\);   \/\/ group: S\(n\)\n\s*)fa3_pv_issue<D>\(o, pa, dv\);/fa3_pv_issue<D>(o, pa, dv);${1}fa3_s_issue<D>(s, dq, dk);/' "$m3b"
plant ov-v-stage $F3 's/fa3_desc_mn\(kv0 \+ \(sk \^ 1\) \* G::STAGE \+ G::V\)/fa3_desc_mn(kv0 + sk * G::STAGE + G::V)/' "$m3b"
plant ov-v-parity $F3 's/mbar_wait\(full_v \+ 8 \* \(sk \^ 1\), \(uint32_t\)\(\(n - 1\) >> 1\) & 1\);/mbar_wait(full_v + 8 * (sk ^ 1), (uint32_t)(n >> 1) & 1);/' "$m3b"
plant ov-o-wait $F3 's/(fa_softmax\(s, m, l, f, j0, ps, tig, sl2\);\n\s*)wg_wait<0>\(\);/${1};/' "$m3b"
plant ov-no-flush $F3 's/if \(pend\)\n\s*fa3_pv_flush<D>\(o, pa, kv0 \+ G::V, full_v, empty_v, n - 1\);\n\s*pend = false;/pend = false;/' '128 2 1 64 16 0 1:130'
penv="EMU_FA_TILE=v3 EMU_FA_EXPECT=v3 EMU_DRIFT=5 EMU_FIBER_ORDER=3"
plant ov-k-early $F3 's/wg_wait<0>\(\);\n(\s*)wg_fence_acc\(s\);\n\s*fa3_release\(empty_k \+ 8 \* sk\);/fa3_release(empty_k + 8 * sk);\n${1}wg_wait<0>();\n${1}wg_fence_acc(s);/' "$m3b" "$m3"
plant ov-no-empty-v $F3 's/mbar_wait\(empty \+ 16 \+ 8 \* s2, par \^ 1\);/;/' "$m3b"
exit 0
