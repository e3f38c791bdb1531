#!/bin/sh
# tests/cuda/emu/run-gmm-emu.sh — knobs gemv_mma / gemv_mma_wide: cuda_gemvm.cu and
# cuda_gemvx.cu (gm_kernel, gx_kernel: dense decode products of 2..32 columns on mma.sync int8) against the
# dp4a GEMV v1 (cuda_mmq.cu) under the host emulation (gmm_emu.cc), then
# planted bugs that must be caught.  No GPU; g++ (x86-64); ~1 minute.
set -e
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/gmm-emu.$$
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
# the files whole, launchers too (cu_launch: the emulator's
# cuda_runtime.h); the PTX from ptx_emu.h
{
    # (gx_kernel's DB launch opts in past 48 KiB: an sm_90's bound)
    cat <<'EOT'
#include "cuda_runtime.h"
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F> static inline cudaError_t cudaFuncSetAttribute(F, int, int v) { return v <= 232448 ? cudaSuccess : cudaErrorInvalidValue; }
EOT
    cat "$src/cuda_mmq.cu"
    # (gx_kernel's cluster primitives: cluster_emu.h's, a cluster run as
    # one emulated block; its launches through cu_launch_cluster there)
    # (cuda_gemvm.cuh pasted in once, ahead of both files)
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/^#include "cuda_cluster.cuh"/#include "cluster_emu.h"/' \
        -e '/^#include "cuda_gemvm.cuh"/d' \
        "$src/cuda_gemvm.cuh" "$src/cuda_gemvm.cu" "$src/cuda_gemvx.cu"
} > "$out/k.cc"
if grep -q '<<<\|cuda_ptx.cuh\|extern __shared__\|__cvta_generic_to_shared' "$out/k.cc" || ! grep -q '^#include "cluster_emu.h"' "$out/k.cc"; then
    echo "run-gmm-emu: a <<<>>> launch, cuda_ptx.cuh, a shared declaration or the cluster primitives left; update the sed lines" >&2; exit 1
fi
F="-std=c++17 -O2 -I$here -I$src -I$top/core/include -Wno-unused-function"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
g++ $F -DGMM_KERNELS="\"$out/k.cc\"" "$here/gmm_emu.cc" "$out/emu.o" -o "$out/gmm_emu"
"$out/gmm_emu"
# plant NAME PERL-EDIT: the kernels (k.cc) edited so, the run must fail
. "$here/plant.sh"
plant() { emu_plant "$1" "$2" GMM_KERNELS "$here/gmm_emu.cc" "$out/emu.o"; }
[ "$PLANT" = no ] && exit 0
# Q4_K's min term dropped
plant no-min 's/acc\[0\] \+= \(x.dx\[n\].x \* w0\) \* c\[0\] - m0 \* x.xs\[n\].x;/acc[0] += (x.dx[n].x * w0) * c[0];/'
# Q5_K's fifth bit from the wrong sub-block
plant q5-bit 's/a\[0\] \|= \(\(w.qh0\[i\].x >> j\) & 0x01010101u\) << 4;/a[0] |= ((w.qh0[i].x >> (j ^ 1)) \& 0x01010101u) << 4;/'
# Q6_K's second 16 with the first one's scale
plant q6-scale 's/s0b = gm_sc6\(w.sc0\[i\]\[hf\], 2 \* G \+ 1\)/s0b = gm_sc6(w.sc0[i][hf], 2 * G)/'
# Q8_0's unaligned quants read from the aligned word (bytes shifted)
plant q8-align 's/if \(\(\(uintptr_t\)p & 3\) == 0\)\n        return make_uint2/if (((uintptr_t)p \& 1) == 0)\n        return make_uint2/'
# a warp's steps skipped (stride one too many)
plant steps 's/st \+= GM_WARPS\)/st += GM_WARPS + 1)/'
# the next step's weights never taken (the first step multiplied again)
plant stale 's/        cur = nxt;\n//'
# a warp's later steps multiplied with its first step's weights (no DB)
plant reload 's/if \(st != warp\) \{/if (false) {/'
# the rows past the end stored
plant past-end 's/if \(r < p.rows && c < nc\)/if (c < nc)/'
# the partial sums of the last warp not added
plant red 's/for \(int w = 0; w < GM_WARPS; w\+\+\)/for (int w = 0; w < GM_WARPS - 1; w++)/'
# tile i's sums stored by the wrong warp's rows
plant tile-rows 's/gm_store\(p, r_lo \+ 16 \* i, 8 \* n/gm_store(p, r_lo, 8 * n/'
# column 2t + 1's scales from column 2t
plant dx-col 's/o.d1\[n\] = c1 \* nb;/o.d1[n] = c0 * nb;/'
# columns past ncols read past x instead of the last column (the read check)
plant col-clamp 's/const int cg = min\(8 \* n \+ g, nc - 1\)/const int cg = 8 * n + g/'
# gx_kernel: every column tile's sums stored as tile 0's
plant gx-tile 's/const int i = q \/ NT, n = q % NT;/const int i = q \/ NT, n = 0;/'
# gx_kernel (DB): the next round staged into the buffer being multiplied
plant db-buf 's/gx_stage<NT, KS, SUMS>\(u.S\[\(it \+ 1\) & 1\]/gx_stage<NT, KS, SUMS>(u.S[it \& 1]/'
# gx_kernel (DB): the round multiplied before its copies land (waits for the older groups only).
# (The barrier that keeps the next round's copies off a buffer still being read is
# not planted: the emulator lands copies at the latest wait, never early.)
plant db-wait 's/cp_async_wait_group<1>\(\);/cp_async_wait_group<2>();/'
# gx_kernel: columns past ncols staged from past x (the read check)
plant gx-clamp 's/cc = min\(c, nc - 1\);\n        cp_async16\(&S.q/cc = c;\n        cp_async16(\&S.q/'
# gx_kernel: a warp's next weights one step on instead of KS
plant gx-next 's/rw\[0\].B0 \+= \(uint64_t\)KS \* WB;/rw[0].B0 += (uint64_t)WB;/'
# gx_kernel: column 2t + 1's scale staged as column 2t's
plant gx-dx 's/S->d\[kg\]\[c0 \+ 1\]\[j\]/S->d[kg][c0][j]/'
# gx_kernel: the k-groups' sums of the last one not added
plant gx-red 's/for \(int k2 = 0; k2 < KS; k2\+\+\)/for (int k2 = 0; k2 < KS - 1; k2++)/'
# gemv_wide_split: the last block of a cluster's sums not added
plant split-sum 's/for \(int r = 0; r < CL; r\+\+\)/for (int r = 0; r < CL - 1; r++)/'
# gemv_wide_split: the others' sums read before the cluster barrier (the skewed cases)
plant split-barrier 's/        cl_cluster_sync\(\);   \/\/ every block.s part written\n//'
# gemv_wide_split: the steps left over by an uneven split dropped
plant split-range 's/const int steps = \(rank \+ 1\) \* all \/ CL - s0/const int steps = all \/ CL/'
# gemv_wide_split: every rank's weights from the rows' first step (x from its own)
plant split-w 's/\(uint64_t\)\(s0 \+ kg\) \* WB;\n(.*)\(uint64_t\)\(s0 \+ kg\) \* WB;/(uint64_t)kg * WB;\n$1(uint64_t)kg * WB;/'
# x the kernels cannot load not refused
plant x-align 's/const uintptr_t aq = mm->ncols > 8 \? 16 : 8, as = mm->ncols > 8 \? 16 : 4;/const uintptr_t aq = 1, as = 1;/'
# the MMA's magic offset taken off one ulp wrong (off by 1 in every sum)
plant magic 's/- CU_I2F_MAGICF;/- (CU_I2F_MAGICF - 1.0f);/'
# gemv_wide_ring: the next round's weights copied into the buffer being read
plant ring-buf 's/gw_stage_w<T, KS>\(u.st.w\[\(it \+ 1\) & 1\]/gw_stage_w<T, KS>(u.st.w[it \& 1]/'
# gemv_wide_ring: a warp reads its step from the other buffer
plant ring-read 's/&u.st.w\[it & 1\]\[16 \* rt \+ g\]/\&u.st.w[(it + 1) \& 1][16 * rt + g]/'
# gemv_wide_ring: waiting for all but the last two groups (this round's weights may still fly)
plant ring-wait 's/(gw_stage_w<T, KS>\(u.st.w\[\(it \+ 1\) & 1\], p, r_lo, it \+ 1, steps, tid\);\n\s*)cp_async_wait_group<1>\(\);/$1cp_async_wait_group<2>();/'
# gemv_wide_ring: a short last round copied as a whole one (past the rows' end)
plant ring-short 's/n = \(min\(KS, steps - st\) \* WB \+ CP - 1\) \/ CP;/n = KS * WB \/ CP;/'
# gemv_wide_ring: a last round's bytes that are not whole pieces cut short (Q6_K's scale left out)
plant ring-cut 's/n = \(min\(KS, steps - st\) \* WB \+ CP - 1\) \/ CP;/n = min(KS, steps - st) * WB \/ CP;/'
# gemv_wide_ring at KS 8: the k-groups' sums added as gx_kernel's 4 (the other 4 dropped)
plant ring-ks8 's/for \(int k2 = 0; k2 < KS; k2\+\+\)/for (int k2 = 0; k2 < GX_WARPS \/ RT; k2++)/'
