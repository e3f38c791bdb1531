#!/bin/sh
# tests/cuda/emu/run-attnmma-emu.sh — runs the attention kernels of the
# attn_mma_i8 plugin (plugins/attn_mma_i8/ami8_attn.cu: v1 and v2; int8 q,
# scores on mma.sync m16n8k32 s8, online softmax, P.V in f32 (v1) or on
# mma u8 x s8 (v2), gate) under the host emulation against a
# double-precision reference over the same paged int8 cache
# (attnmma_emu.cc says what is compared and the tolerances), every case on
# both kernels, then plants in v2 that must be caught.  No GPU needed; g++
# (x86-64).  Usage: run-attnmma-emu.sh [builddir]
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/plugins/attn_mma_i8
out=${1:-${TMPDIR:-/tmp}}/attnmma-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# The kernel as host C++: every k<<<g, b, sm, s>>>(args); becomes
# emu_launch_s(g, b, sm, s, body); v1's mma.sync asm the emulated
# instruction of ptx_emu.h (it computes D = A.B; the kernel's asm
# accumulates into c, so the sum is added, wrapping as the int32 adder);
# v2's PTX wrappers (cp.async, the u8 mma, lds32) are cut for ptx_emu.h's
# and the few below; its dynamic shared memory is the emulator's.
{
    echo '#include "cuda_runtime.h"'
    echo '#include "ptx_emu.h"'
    cat <<'EOT'
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, int, int v) { return v <= 232448 ? cudaSuccess : cudaErrorInvalidValue; }
static inline int __any_sync(unsigned m, int p) { for (int o = 16; o > 0; o >>= 1) p |= __shfl_xor_sync(m, p, o); return p != 0; }
// (__byte_perm: cuda_runtime.h's)
// ld.shared.u32 (inside the dynamic shared memory, 4-aligned)
static inline uint32_t lds32(const void *p)
{
    const char *s0 = (const char *)emu::dyn_smem();
    if ((uintptr_t)p % 4 || (const char *)p < s0 || (const char *)p + 4 > s0 + emu_ptx::smem_bytes) { fprintf(stderr, "emu: lds32: %p outside the shared memory\n", p); abort(); }
    uint32_t v; memcpy(&v, p, 4); return v;
}
EOT
    sed -e '/^\/\/ ---- PTX wrappers/,/^\/\/ ---- end of PTX wrappers/d' \
        -e 's/extern __shared__ __align__(16) uint8_t ami8_sm\[\];/uint8_t *ami8_sm = (uint8_t *)emu::dyn_smem();/' \
        "$src/ami8_attn.cu"
} |
perl -0pe 's/(\w+(?:<\w+>)?)<<<(.*?)>>>\((.*?)\);/emu_launch_s($2, [&] { $1($3); });/gs;
           s/asm\("mma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32.*?\);/{ int d_[4]; mma_k32(d_, a, b0, b1); for (int i_ = 0; i_ < 4; i_++) c[i_] = (int)((uint32_t)c[i_] + (uint32_t)d_[i_]); }/gs' \
    > "$out/k.cc"
if grep -q '<<<\|asm\|extern __shared__' "$out/k.cc"; then
    echo "run-attnmma-emu: ami8_attn.cu changed shape (launch, asm or shared declaration); update the sed/perl lines" >&2; exit 1
fi
F="-std=c++17 -O2 -g -I$here -I$src -Wno-unused-function"
g++ $F -c "$out/k.cc" -o "$out/ami8_attn.o"
g++ $F -c "$here/attnmma_emu.cc" -o "$out/attnmma_emu.o"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F "$out/attnmma_emu.o" "$out/emu.o" "$out/ami8_attn.o" -o "$out/attnmma_emu"
# HD NH NKV MIX PRIOR:NEW per sequence (n = sum of NEW); every case on v1
# and v2 (v2: hd 128/256; its hd 64 cases run v1 by design)
CASES='128 4 4 0 0:64
128 8 1 0 5:70 40:30 0:100
256 8 1 0 0:300
256 4 4 1 17:40 100:33 3:60
256 16 2 0 200:64
256 16 4 0 0:200
128 16 4 1 30:90 0:70 200:20
64 4 1 0 1:65
128 2 2 1 0:100 33:50 15:1
256 2 1 1 31:17 0:47 64:16
128 4 1 0 2100:150
256 4 2 0 1900:130 2050:40
128 2 1 1 2200:70 40:60'
rc=0
for tile in v1 v2; do
    echo "$CASES" | while read -r c; do
        [ -n "$c" ] && "$out/attnmma_emu" $tile $c || exit 1
    done || rc=1
done
[ $rc = 0 ] || { echo "run-attnmma-emu: FAILED"; exit 1; }
# Plants in v2: each edit of the kernel must make the harness FAIL on one
# of the cases given (a long multi-sequence context and a GQA one).
plant() {
    name=$1 edit=$2
    shift 2
    perl -0pe "$edit" "$out/k.cc" > "$out/bug.cc"
    cmp -s "$out/k.cc" "$out/bug.cc" && { echo "plant $name: the edit did not apply (kernel changed?)"; exit 1; }
    g++ $F -c "$out/bug.cc" -o "$out/bug.o"
    g++ $F "$out/attnmma_emu.o" "$out/emu.o" "$out/bug.o" -o "$out/bug"
    hit=0
    for c in "$@"; do
        "$out/bug" v2 $c > "$out/bug.log" 2>&1 || { hit=1; break; }
    done
    [ $hit = 1 ] || { echo "plant $name: NOT detected"; exit 1; }
    echo "plant $name: detected ($(grep -m1 'FAIL\|emu:' "$out/bug.log" | cut -c1-100))"
}
long='128 4 2 1 300:150 0:90'
gqa='256 16 4 0 150:140'
edge='128 4 2 0 0:15 0:50'   # seq 1's first token (pos 0) alone in warp 0
plant stage-index 's/load\(st \^ 1, dseq_s\[d2\]/load(st, dseq_s[d2]/' "$long" "$gqa" "$edge"
plant mask-off-by-one 's/\(seq0 == seq && p <= pos0\)/(seq0 == seq \&\& p < pos0)/' "$long" "$gqa" "$edge"
plant v-scale-fold 's/const float p = e == 0.0f \? 0.0f : e \* vsc\[col\];/const float p = e;/' "$long" "$gqa" "$edge"
plant v-transpose 's/ami8_t4x4\(w, bl\);/bl[0] = w[0]; bl[1] = w[1]; bl[2] = w[2]; bl[3] = w[3];/' "$long" "$gqa" "$edge"
plant v-gather-rows 's/2 \* tig \+ \(i & 1\) \+ 8 \* \(i >> 1\)/2 * tig + 8 * (i \& 1) + (i >> 1)/' "$long" "$gqa" "$edge"
plant rescale 's/fmaf\(o\[4 \* cb \+ j\]\[0\], f0,/fmaf(o[4 * cb + j][0], 1.0f,/' "$long" "$gqa" "$edge"
plant l-rescale 's/l0 = l0 \* f0 \+ e0;/l0 = l0 + e0;/' "$long" "$gqa" "$edge"
plant v-swizzle 's/cp_async16\(vs \+ ami8_sw_v<HD>\(r, b\)/cp_async16(vs + ami8_sw_qk<HD>(r, b)/' "$long" "$gqa" "$edge"
plant out-column 's/const int col = 32 \* cb \+ 4 \* \(2 \* tig \+ e\) \+ j;/const int col = 32 * cb + 8 * j + 2 * tig + e;/' "$long" "$gqa" "$edge"
plant seq-len 's/if \(sq\[j\] == s && ps\[j\] \+ 1 > len\)/if (j == tid \&\& ps[j] + 1 > len)/' "$long" "$gqa" "$edge"
plant warp-skip 's/pos0 >= c0\) \|\| \(seq1 == seq && pos1 >= c0\)/pos0 > c0) || (seq1 == seq \&\& pos1 > c0)/' "$long" "$gqa" "$edge"
plant cp-wait 's/cp_async_wait_group<1>\(\);/cp_async_wait_group<2>();/' "$long" "$gqa" "$edge"
plant no-refill-sync 's/__syncthreads\(\);(   \/\/ stage st is read)/;$1/' "$long" "$gqa" "$edge"
echo "run-attnmma-emu: all cases and plants passed"
