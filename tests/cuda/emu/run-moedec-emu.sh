#!/bin/sh
# tests/cuda/emu/run-moedec-emu.sh — knob moe_dec_fuse: cuda_gemvq.cu's
# gqe_tail_kernel (the MOE decode's routed gate/up with the SwiGLU and its
# int8 copy as its tail, the routed down with the combine) and
# gqe_gs_kernel (knob moe_dec_fuse_gu: the shared expert's Q8_0 gate/up in
# the routed one's launch) against the launches they replace (gs_kernel,
# gqe_kernel, swiglu_q_kernel, gqe_kernel, combine_kernel) under the host
# emulation (moedec_emu.cc), bit for bit, blocks in order and shuffled;
# then planted bugs that must be caught.
# No GPU; g++ (x86-64).  Modes: full (default; ~5 minutes), quick (what
# tests/cuda/emu.test runs: the 35b-a3b's shapes at 1 and 8 tokens, three
# plants).  Usage: run-moedec-emu.sh [builddir] [quick|full]
set -e
mode=${2:-full}
case $mode in full|quick) ;; *) echo "usage: run-moedec-emu.sh [builddir] [quick|full]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/moedec-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# cuda_gemvq.cu whole (cu_launch is the emulator's; x's copy in the
# emulator's dynamic shared memory), swiglu_q_kernel (cuda_elem.cu) and
# combine_kernel (cuda_moe.cu, with cuda_combine.cuh), each from its first
# line to the closing brace at column 0
{
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint4 gq_xsm\[\];/uint4 *gq_xsm = (uint4 *)emu::dyn_smem();/' \
        "$src/cuda_gemvq.cu"
    awk '/^__global__ void swiglu_q_kernel\(/ { on = 1 }
         on { print } on && /^}/ { on = 0 }' "$src/cuda_elem.cu"
    echo '#include "cuda_combine.cuh"'   # (combine_kernel's arithmetic)
    awk '/^__global__ void combine_kernel\(/ { on = 1 }
         on { print } on && /^}/ { on = 0 }' "$src/cuda_moe.cu"
} > "$out/k.cc"
for k in gqe_tail_kernel gqe_kernel swiglu_q_kernel CB_K combine_kernel si_cu_gemvq_tail; do
    grep -q "$k" "$out/k.cc" || { echo "run-moedec-emu: $k not found; update the sed/awk lines" >&2; exit 1; }
done
if grep -q '<<<\|extern __shared__' "$out/k.cc"; then
    echo "run-moedec-emu: a launch or shared array the sed lines miss" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DMOEDEC_KERNELS="\"$out/k.cc\"" "$here/moedec_emu.cc" "$out/emu.o" -o "$out/moedec_emu"
export MOEDEC_MODE=$mode   # (quick: moedec_emu runs its first cases only)
"$out/moedec_emu"
# plant NAME PERL-EDIT: the kernels edited so, the run must fail
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" MOEDEC_KERNELS "$here/moedec_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# quick: four plants (a count left over, the last block by index, a
# combine that waits for one pick less, gqe_gs_kernel's shared blocks
# stopping at the gate rows)
# a group's counter not put back: the next launch's tails never run
plant no-reset 's/tl\.ctr\[grp\] = 0;/;/'
# the tail by the group's last block index, not by the count
plant last-by-index 's/if \(ticket != need - 1\)/if (blockIdx.x != gridDim.x - 1)/'
# the combine waits for one pick's block less
plant combine-k-1 's/: \(unsigned\)tl\.K;/: (unsigned)tl.K - 1;/'
# gqe_gs_kernel: the shared rows' blocks stop at the gate rows
plant gs-half 's/if \(\(int64_t\)bx \* RBS >= 2 \* tl\.F\)/if ((int64_t)bx * RBS >= tl.F)/'
[ $mode = quick ] && exit 0
# gqe_gs_kernel: the shared group's counter not put back
plant gs-no-reset 's/(tl\.qs \+ r \* nbk \+ b\);\n    \}\n    if \(threadIdx\.x == 0\)\n)        tl\.ctr\[grp\] = 0;/$1        ;/'
# gqe_gs_kernel: the shared group's index without the up half folded
plant gs-group 's/b = \(\(int64_t\)bx \* RBS % tl\.F\) \/ 32/b = ((int64_t)bx * RBS) \/ 32/'
# gqe_gs_kernel: the shared SwiGLU of the first GQ_WARPS tokens only
plant gs-tokens 's/t < tl\.n_sh; t \+= GQ_WARPS\)/t < tl.n_sh \&\& t < GQ_WARPS; t += GQ_WARPS)/'
# the SwiGLU tail's up rows taken from the gate half
plant up-half 's/gqe_swiglu32\(gt, gt \+ tl\.F,/gqe_swiglu32(gt, gt,/'
# the shared expert's rows left out of the SwiGLU
plant no-shared 's/if \(SH && swiglu && tl\.sh != NULL\)/if (false)/'
# the picks summed in the other order (same terms, other f32 rounding)
plant k-order 's/for \(int k = 0; k < 8; k\+\+\)\n(\s+)if \(k < tl\.K\)/for (int k = 7; k >= 0; k--)\n$1if (k < tl.K)/'
# the sigmoid gate of the shared row not applied in the tail
plant no-gate 's/o = __fadd_rn\(o, __fmul_rn\(gm, sv\)\);\n            \}\n            tl\.dst/o = __fadd_rn(o, sv);\n            }\n            tl.dst/'
# the SwiGLU's group index from the block's rows without the up half
# folded (counters past the end: the run crashes)
plant group-index 's/\(\(int64_t\)bx \* RB % tl\.F\) \/ 32/((int64_t)bx * RB) \/ 32/'
# (not caught here: a group that waits for half its blocks; blocks run one
# at a time, and the group's second half then makes the tail again, whole,
# where on a GPU the first tail races the second half's stores)
