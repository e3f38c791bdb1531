#!/bin/sh
# tests/cuda/emu/run-attn-emu.sh — runs SI_OP_ATTN of cuda_sm120 (si_cu_attn:
# rope, append, split/simple attention over the dense f16/f32 cache or the
# paged int8 cache, combine) under the host emulation, no GPU needed, against
# a double-precision reference of the cpu backend's formulas; plus the page
# table host logic of cuda_kv.c (kv_pages_emu.c, on a fake CUDA runtime).
# Needs g++ >= 12 and gcc (x86-64).  Usage: run-attn-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/attn-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# The .cu files as host C++: dynamic shared memory from the emulator, every
# k<<<g, b, sm, s>>>(args); launch through emu_launch_s, so si_cu_attn's own
# dispatch (plan_split, the kernel choice, the combine) is what runs.
for f in cuda_attn cuda_attn_i8; do
    sed -e 's/extern __shared__ float sm\[\];/float *sm = emu::dyn_smem();/' \
        -e 's/\([A-Za-z_][A-Za-z_0-9]*\(<[^<>]*>\)\{0,1\}\)<<<\(.*\)>>>(\(.*\));/emu_launch_s(\3, [\&] { \1(\4); });/' \
        "$src/$f.cu" > "$out/$f.cc"
    if grep -q '<<<' "$out/$f.cc" || grep -q 'extern __shared__' "$out/$f.cc"; then
        echo "run-attn-emu: $f.cu: a launch or shared declaration the sed lines miss" >&2; exit 1
    fi
done
F="-std=c++17 -O2 -fno-strict-aliasing -I$here -I$src -I$top/core/include -Wno-unused-function"
for f in cuda_attn cuda_attn_i8; do g++ $F -c "$out/$f.cc" -o "$out/$f.o"; done
# the flash-attention core si_cu_attn dispatches to (not taken here: fa = 0)
# and the attn_gqa = shared split kernel (cp.async: ptx_emu.h)
sh "$here/run-fa-emu.sh" "$out" objs
g++ $F "$here/attn_emu.cc" "$here/emu.cc" "$out/cuda_attn.o" "$out/cuda_attn_i8.o" "$out/cuda_attn_fa.o" "$out/cuda_attn_fa3.o" "$out/cuda_attn_gqa.o" "$out/cuda_attn_mma.o" "$out/cuda_attn_ring.o" -o "$out/attn_emu"
rc=0
cuda=${CUDA_HOME:-/usr/local/cuda}
gcc -std=c11 -O1 -Wall -I"$cuda/include" -I$src -I$src/include -I$top/core/include -I$top/backends \
    "$here/kv_pages_emu.c" "$src/cuda_kv.c" -o "$out/kv_pages_emu"
"$out/kv_pages_emu" || rc=1
# KV SPLIT HD NH NKV NROT NSM PF | prefill lengths per sequence (one op), then one decoding token each
# (SPLIT 2: attn_gqa = shared, also compared with the per-head split kernel;
# SPLIT 3: that with attn_mma, the f16 tensor-core core, f16 caches only;
# SPLIT 4 / 5: that with attn_ring = true / small (head_dim 64: mma's),
# and with i8 the ring core over the paged int8 cache (against
# split_i8_kernel too; head_dim 64: split_i8_kernel's); every ring run
# again with attn_ring_chains = 2 and, over the int8 pages,
# attn_ring_pages = ahead (bit for bit; the last two cases: one split on
# one multiprocessor, 66 groups a warp, so it reads its pages ahead
# across 32-group chunks);
# GQA ratios 1, 2, 3, 4, 8, 16, head_dim 16..256, f16 and f32 caches, the
# 1000/700-position decodes beside a short sequence: its later splits empty)
while read -r c; do
    [ -n "$c" ] && { "$out/attn_emu" $c || rc=1; }
done <<'CASES'
i8 1 128 4 1 64 64 1 1 15 16 17
i8 1 256 8 1 64 200 1 100 17
i8 1 128 8 8 32 8 1 1 16
i8 1 128 2 2 128 100 1 33 1 70
i8 0 256 4 4 64 1 1 17 100
i8 1 64 16 2 64 300 1 15 40 129
i8 1 128 1 1 64 64 1 1000
i8 1 256 8 1 64 64 0 1000 15
i8 1 128 12 3 64 64 0 1000 100 16
f16 1 128 4 1 64 64 1 1 15 16 17
i8 1 16 6 2 16 64 1 17 5
i8 1 32 12 2 32 300 1 40 3 70
i8 0 128 3 1 64 1 1 65 2
f16 1 16 3 1 16 64 1 20 66
f32 1 256 2 2 64 200 1 100 17
f16 0 128 4 2 64 1 1 17 33
f32 1 128 1 1 64 64 0 1000 17
f16 2 256 8 1 64 64 1 100 17 70
f32 2 256 4 1 64 200 1 130 3
f16 2 128 2 1 64 8 1 1 65 200
f32 2 64 4 4 64 64 1 33 129
f16 2 64 16 2 32 100 1 40 5
f16 2 256 16 1 64 64 0 1000 15
f16 2 128 16 4 64 64 0 700 3
f32 2 128 8 1 64 1 1 65 2
f16 2 16 6 2 16 64 1 20 66
f16 3 256 8 1 64 64 1 100 17 70
f16 3 256 16 2 64 64 0 1000 15
f16 3 256 16 4 64 64 0 700 3
f16 3 128 4 2 64 8 1 1 65 200
f16 3 64 4 4 64 64 1 33 129
f16 3 128 16 1 64 64 1 40 5
f16 3 256 2 1 64 300 1 7 64 65
f16 3 256 8 1 64 2 1 300 17 70
f16 4 256 8 1 64 64 1 100 17 70
f16 4 256 16 2 64 64 0 1000 15
f16 4 256 16 4 64 64 0 700 3
f16 4 128 4 2 64 8 1 1 65 200
f16 4 128 16 1 64 64 1 40 5
f16 4 256 2 1 64 300 1 7 64 65
f16 4 64 4 4 64 64 1 33 129
f16 5 256 8 1 64 64 1 100 17 70
f16 5 128 16 4 64 8 0 1000 3
f16 5 256 16 2 64 2 1 300 31
i8 4 256 8 1 64 64 1 100 17 70
i8 4 256 16 2 64 64 0 1000 15
i8 4 128 8 2 64 8 1 1 15 16 17 65
i8 4 128 12 3 64 64 0 1000 100 16
i8 4 64 16 2 64 300 1 15 40 129
i8 5 256 16 4 64 8 0 700 3
i8 5 128 2 2 128 100 1 33 1 70
i8 4 256 8 1 64 1 0 4200
i8 5 128 4 2 64 1 0 2100
CASES
# attn_gqa = shared with warps drifting apart between block barriers
# (emu.cc EMU_DRIFT): a cp.async wait or barrier too few shows here
EMU_DRIFT=7 "$out/attn_emu" f16 2 256 8 1 64 64 1 100 17 70 || rc=1
EMU_DRIFT=3 "$out/attn_emu" f32 2 128 4 2 64 64 1 90 130 || rc=1
EMU_DRIFT=5 "$out/attn_emu" f16 3 256 8 1 64 64 1 100 17 70 || rc=1
EMU_DRIFT=9 "$out/attn_emu" f16 4 256 8 1 64 64 1 100 17 70 || rc=1
EMU_DRIFT=4 "$out/attn_emu" f16 5 128 16 4 64 8 0 1000 3 || rc=1
# knob attn_split_len = bucket (the cases above run context, the
# default): splits of the planned max_len, the dense, int8 and ring cores
for c in "i8 1 256 8 1 64 200 1 100 17" "i8 4 256 16 2 64 64 0 1000 15" "f16 2 256 8 1 64 64 1 100 17 70" \
         "f16 4 256 16 4 64 64 0 700 3" "f32 1 128 1 1 64 64 0 1000 17"; do
    EMU_SPLIT_BUCKET=1 "$out/attn_emu" $c || rc=1
done
# attn_ring = true on sm_120's shared memory (99 KB a block): small's shape
EMU_SMEM_OPTIN=101376 "$out/attn_emu" f16 4 256 16 2 64 64 1 300 31 || rc=1
EMU_SMEM_OPTIN=101376 "$out/attn_emu" i8 4 256 16 4 64 64 1 300 31 || rc=1
# Planted bugs in split_mma_kernel (attn_mma), each of which the checks
# above must see (PLANT=no skips them): the online softmax's rescale of
# one head column, V rows past the context left unzeroed, the P V
# product's k-step, the scores' second row half.  Then in
# split_ring_kernel (attn_ring): the same rescale, the zeroed V rows, the
# mask of the scores past the context, the ring's wait one group short,
# the merge's factor of the warps, the per-lane l never summed; over the
# int8 pages: the K scale dropped, the V scale unmasked past the context,
# q in the f16 element order instead of K's int8 fragment order, the int8
# to f16 conversion's bias, and attn_ring_i8's (below).  And combine_kernel's int8 copy made of the
# output before its gate (knob fuse_attn_q).
# aplant SED NAME [FILE [SPLIT [KV [CASE]]]]: FILE's object rebuilt with
# the edit, run on CASE (HD NH NKV NROT NSM PF LEN...)
aplant() {
    f=${3:-cuda_attn_mma} sp=${4:-3} kv=${5:-f16} cs=${6:-256 8 1 64 64 1 100 17 70}
    sed -e "$1" "$out/$f.cc" > "$out/bug.cc"
    if cmp -s "$out/bug.cc" "$out/$f.cc"; then echo "plant $2: the edit did not apply (kernel changed?)"; rc=1; return; fi
    g++ $F -O1 -c "$out/bug.cc" -o "$out/bug.o"
    objs=""
    for o in cuda_attn cuda_attn_mma cuda_attn_ring; do [ $o = "$f" ] || objs="$objs $out/$o.o"; done
    g++ $F "$here/attn_emu.cc" "$here/emu.cc" "$out/cuda_attn_i8.o" "$out/cuda_attn_fa.o" "$out/cuda_attn_fa3.o" \
        "$out/cuda_attn_gqa.o" $objs "$out/bug.o" -o "$out/attn_bug"
    if "$out/attn_bug" $kv $sp $cs > "$out/bug.log" 2>&1; then
        echo "plant $2: NOT detected"; rc=1
    else
        echo "plant $2: detected ($(grep -c FAIL "$out/bug.log") FAIL lines)"
    fi
}
if [ "$PLANT" != no ]; then
    # (2 multiprocessors: splits of several 64-position tiles, so a rescale
    # runs inside a split; attn_split_len = context cuts the default case's
    # contexts into single tiles)
    aplant 's/acc\[i\]\[1\] \*= f1;/;/' mma-rescale cuda_attn_mma 3 f16 "256 8 1 64 2 1 300 17 70"
    aplant 's/vt\[(i \/ hd) \* rs + i % hd\] = __float2half_rn(0.0f);/;/' mma-vzero
    aplant 's/ldsm_x4_t(af, vb + kk \* 16 \* rs \* 2);/ldsm_x4_t(af, vb);/' mma-vstep
    aplant 's/pp = 16 \* warp + gr + (j >> 1) \* 8;/pp = 16 * warp + gr;/' mma-srow
    aplant 's/acc\[i\]\[3\] \*= f1;/;/' ring-rescale cuda_attn_ring 4
    aplant 's/if (cnt < RG_G)   \/\/ V rows/if (false)   \/\/ V rows/' ring-vzero cuda_attn_ring 4
    aplant 's/s2 = gr + 8 < cnt ? sc\[2\]/s2 = gr < cnt ? sc[2]/' ring-mask cuda_attn_ring 4
    aplant 's/cp_async_wait_group<NS - 1>();/cp_async_wait_group<NS>();/' ring-wait cuda_attn_ring 4
    aplant 's/o = fmaf(fw_s\[w\]\[r\], /o = fmaf(1.0f, /' ring-merge cuda_attn_ring 4
    aplant 's/l0 += __shfl_xor_sync(0xffffffffu, l0, o);/;/' ring-lsum cuda_attn_ring 5
    aplant 's/sc\[2\] \*= k8;/;/' ring8-kscale cuda_attn_ring 4 i8
    aplant 's/v8 = gr + 8 < cnt ? vsc\[gr + 8\] : 0.0f;/v8 = vsc[gr + 8];/' ring8-vmask cuda_attn_ring 4 i8
    aplant 's/16 \* k + 4 \* qd + 2);/16 * k + 2 * qd + 8);/' ring8-qorder cuda_attn_ring 5 i8
    aplant 's/__ushort_as_half(0x6480), __ushort_as_half(0x6480)/__ushort_as_half(0x6400), __ushort_as_half(0x6480)/' ring8-conv cuda_attn_ring 4 i8
    # attn_ring_pages = ahead: the chunk's next pages never read, the lane
    # of a group's page; attn_ring_chains = 2: the second chain never added
    # (int8: rg_scores_i8; f16: dm_scores, the edit on cuda_attn_mma.cuh)
    aplant 's/pg_nx = page_of(k + 32);/pg_nx = page_of(k);/' ring8-ahead cuda_attn_ring 4 i8 "256 8 1 64 1 0 4200"
    aplant 's/pg_at, k % 32)/pg_at, (k + 1) % 32)/' ring8-lane cuda_attn_ring 4 i8
    aplant 's/sc\[j\] += s2\[j\];/;/' ring8-chains cuda_attn_ring 4 i8
    sed -e 's/sc\[j\] += s2\[j\];/;/' "$src/cuda_attn_mma.cuh" > "$out/cuda_attn_mma.cuh"   # (bug.cc's quoted include finds it first)
    aplant 's|^// backends/cuda_sm120/cuda_attn_ring.cu|// (planted: dm_scores of the edited header)|' ring-chains cuda_attn_ring 4 f16
    rm -f "$out/cuda_attn_mma.cuh"
    # combine_kernel's int8 copy (fuse_attn_q) of the ungated output
    aplant 's/cu_q8_block32(o, lane, a.q8/cu_q8_block32(acc * inv, lane, a.q8/' attnq-value cuda_attn 1 f32
fi
exit $rc
