#!/bin/sh
# tests/cuda/emu/run-w8-emu.sh — runs the prefill GEMM v3 of cuda_sm120
# (cuda_w8.cu: the weight and activation requantisers and the int8 GEMM)
# under the host emulation with the PTX of ptx_emu.h, against the
# references of w8_emu.cc (which says what is compared).  No GPU; g++ >= 12
# (x86-64).
# Also cuda_w8wg.cu's wgmma kernel (EMU_WG=1 cases: the same y as the
# mma.sync kernel, bit for bit; ptx_emu.h's wgmma from the ISA's
# descriptor and fragment definitions).
# Cases: every type, scale blocks of 128 and of 32 (EMU_G, knob
# w8_block); rows and columns not multiples of the 128 tile (and exactly
# one tile); in 256 (one warp's 256 values), 512, 1024, 2048 (several
# stages round the ring); x_div 2, 3; x_stride > in; y_stride > rows; a
# NaN in x; warps drifting apart between block barriers (EMU_DRIFT); threads
# run in a random order each round (EMU_FIBER_ORDER).
# Planted bugs: each a one-line edit of the kernel that must FAIL a given
# case, so the checks are shown to see such bugs (the list at plants()
# below); PLANT=no skips them.
# Modes: full (default: 74 cases, 31 plants), quick (11 cases, 12 plants;
# what tests/cuda/emu.test runs).  KEEP=1 keeps the build directory.
# Usage: run-w8-emu.sh [builddir] [quick|full]
set -e
mode=${2:-full}
case $mode in full|quick) ;; *) echo "usage: run-w8-emu.sh [builddir] [quick|full]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
src=$top/backends/cuda_sm120
out=${1:-${TMPDIR:-/tmp}}/w8-emu.$$
mkdir -p "$out"
[ -n "$KEEP" ] || trap 'rm -rf "$out"' EXIT
# The kernels as host C++: cuda_ptx.cuh's wrappers replaced by ptx_emu.h,
# the launchers cut (<<<>>>), dynamic shared memory from the emulator;
# __any_sync (not in cuda_runtime.h) as an OR over the shuffles' butterfly,
# so every lane must reach it as on the device.  (w8_src prints it; the
# planted-bug runs edit its output.)
w8_src() {
    cat <<'EOT'
#include "cuda_runtime.h"
static inline int __any_sync(unsigned m, int p)
{ for (int o = 16; o > 0; o >>= 1) p |= __shfl_xor_sync(m, p, o); return p != 0; }
EOT
    # (cuda_w8.cuh, the requantiser and epilogue it shares with the MOE
    # plugin, pasted in place of its #include, so the plants reach it)
    sed -e 's/^#include "cuda_ptx.cuh"/#include "ptx_emu.h"/' \
        -e 's/extern __shared__ __align__(16) uint8_t sm\[\];/uint8_t *sm = (uint8_t *)emu::dyn_smem();/' \
        -e '/^\/\/ ---- launchers/,$d' \
        -e "/^#include \"cuda_w8.cuh\"/{r $src/cuda_w8.cuh" -e 'd;}' \
        "$src/cuda_w8.cu"
    # (cuda_w8wg.cu's kernel: its headers are in already, but for
    # cuda_wg.cuh, pasted in as cuda_w8.cuh is, so the plants reach it)
    sed -e "/^#include \"cuda_wg.cuh\"/{r $src/cuda_wg.cuh" -e 'd;}' \
        -e '/^#include/d' \
        -e 's/extern __shared__ __align__(16) uint8_t wg_sm_raw\[\];/uint8_t *wg_sm_raw = (uint8_t *)emu::dyn_smem();/' \
        -e '/^\/\/ ---- launchers/,$d' \
        "$src/cuda_w8wg.cu"
    cat <<'EOT'
size_t emu_wg_smem() { return WG_SMEM; }
void emu_w8wg(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
    const unsigned gx = (unsigned)((mm->ncols + WG_BN - 1) / WG_BN), gy = (unsigned)((mm->rows + W8_BM - 1) / W8_BM);
    if (mm->w8_wg_pp) emu_launch(dim3(gx, gy), dim3(WG_THREADS), WG_SMEM, [&] { wg_kernel<true>(*mm, wq, ws, xq, xd); });
    else emu_launch(dim3(gx, gy), dim3(WG_THREADS), WG_SMEM, [&] { wg_kernel<false>(*mm, wq, ws, xq, xd); });
}
size_t emu_w8_smem(int g, int kt)
{ return kt == 128 && g == 128 ? w8_geom<128, 128>::SMEM : g == 32 ? w8_geom<64, 32>::SMEM : w8_geom<64, 128>::SMEM; }
template <int T> static void emu_w8_weights_t(int g, const uint8_t *w, uint64_t row_bytes, int64_t rows, int64_t in, int8_t *wq, float *ws, unsigned blocks)
{
    const w8_gguf<T> src = { w, row_bytes };
    if (g == 32) emu_launch(dim3(blocks), dim3(256), 0, [&] { w8_rows_kernel<32>(src, rows, in, wq, ws); });
    else emu_launch(dim3(blocks), dim3(256), 0, [&] { w8_rows_kernel<128>(src, rows, in, wq, ws); });
}
void emu_w8_weights(uint32_t type, int g, const uint8_t *w, uint64_t row_bytes, int64_t rows, int64_t in, int8_t *wq, float *ws, unsigned blocks)
{
    switch (type) {
    case SI_TYPE_Q8_0: emu_w8_weights_t<SI_TYPE_Q8_0>(g, w, row_bytes, rows, in, wq, ws, blocks); break;
    case SI_TYPE_Q4_K: emu_w8_weights_t<SI_TYPE_Q4_K>(g, w, row_bytes, rows, in, wq, ws, blocks); break;
    case SI_TYPE_Q5_K: emu_w8_weights_t<SI_TYPE_Q5_K>(g, w, row_bytes, rows, in, wq, ws, blocks); break;
    case SI_TYPE_Q6_K: emu_w8_weights_t<SI_TYPE_Q6_K>(g, w, row_bytes, rows, in, wq, ws, blocks); break;
    default: abort();
    }
}
void emu_w8_quant_x(const float *x, int64_t x_stride, int64_t in, int64_t ncx, int8_t *q, float *d, unsigned blocks)
{ const w8_f32 src = { x, x_stride }; emu_launch(dim3(blocks), dim3(256), 0, [&] { w8_rows_kernel<128>(src, ncx, in, q, d); }); }
template <int G, int KT> static void emu_w8_t(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
    const unsigned gx = (unsigned)((mm->ncols + W8_BN - 1) / W8_BN), gy = (unsigned)((mm->rows + W8_BM - 1) / W8_BM);
    emu_launch(dim3(gx, gy), dim3(W8_THREADS), w8_geom<KT, G>::SMEM, [&] { w8_kernel<G, KT>(*mm, wq, ws, xq, xd); });
}
template <int G> static void emu_w8_g(const cu_mm *mm, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
    if (G == 128 && mm->w8_ktile == 128) emu_w8_t<128, 128>(mm, wq, ws, xq, xd);
    else emu_w8_t<G, 64>(mm, wq, ws, xq, xd);
}
// w8_pick's choice and w8_go's grid
void emu_w8(const cu_mm *mm, int g, const int8_t *wq, const float *ws, const int8_t *xq, const float *xd)
{
    if (g == 32) emu_w8_g<32>(mm, wq, ws, xq, xd); else emu_w8_g<128>(mm, wq, ws, xq, xd);
}
EOT
}
w8_src > "$out/k_w8.cc"
grep -q 'uint8_t \*wg_sm_raw = (uint8_t \*)emu::dyn_smem()' "$out/k_w8.cc" && grep -q 'emu::dyn_smem' "$out/k_w8.cc" && grep -q '"ptx_emu.h"' "$out/k_w8.cc" && ! grep -q 'asm\|<<<' "$out/k_w8.cc" || {
    echo "run-w8-emu: cuda_w8.cu changed shape; update the sed lines" >&2; exit 1; }
F="-std=c++17 -O2 -g -I$here -I$src -I$top/core/include -I$top/core -Wno-unused-function -fsanitize=alignment -fno-sanitize-recover=alignment"
C="-std=c11 -O2 -g -I$top/core/include -I$top/core"
g++ $F -c "$out/k_w8.cc" -o "$out/k_w8.o" &
kpid=$!
# the reference: core's dequantisation (and its f16 conversion)
objs=""
for c in "$top/core/quant.c" "$top/core/quant_k.c" "$top/core/quant_iq.c" "$top/core/fp16.c" "$top/core/types.c"; do
    o="$out/$(basename "$c" .c).o"; gcc $C -c "$c" -o "$o"; objs="$objs $o"
done
g++ $F -c "$here/w8_emu.cc" -o "$out/main.o"
g++ $F -c "$here/emu.cc" -o "$out/emu.o"
wait $kpid
g++ $F "$out/main.o" "$out/emu.o" "$out/k_w8.o" $objs -o "$out/w8_emu"
rc=0
npass=0; nfail=0; nplant=0; ncaught=0
run() { if "$out/w8_emu" "$@"; then npass=$((npass + 1)); else nfail=$((nfail + 1)); rc=1; fi; }
# Planted bugs: the kernel with one edit must FAIL the given case.
#   plant NAME SED-EXPR "ENV" ARGS...
plant() {
    name=$1; expr=$2; envs=$3; shift 3; nplant=$((nplant + 1))
    w8_src | sed -e "$expr" > "$out/k_bug.cc"
    if cmp -s "$out/k_bug.cc" "$out/k_w8.cc"; then echo "plant $name: the edit did not apply (kernel changed?)"; rc=1; return; fi
    g++ $F -O1 -c "$out/k_bug.cc" -o "$out/k_bug.o"
    g++ $F "$out/main.o" "$out/emu.o" "$out/k_bug.o" $objs -o "$out/w8_bug"
    if env $envs "$out/w8_bug" "$@" > "$out/bug.log" 2>&1; then
        echo "plant $name: NOT detected by $envs $*"; rc=1
    else
        # (a FAIL, or the emulator stopping on a misuse it checks)
        echo "plant $name: detected ($(grep -c 'FAIL\|mismatch' "$out/bug.log") FAIL lines; $({ grep -m1 '^emu:\|mismatches\|^  y\[' "$out/bug.log" || grep -m1 'max |gpu' "$out/bug.log" || tail -1 "$out/bug.log"; } | cut -c1-100))"
        ncaught=$((ncaught + 1))
    fi
}
plants() {
    # the GEMM's one barrier: drifting warps refill a stage another still reads
    plant no-sync 's/^            __syncthreads();$/;/' "EMU_DRIFT=1" q4_k 200 1024 130
    # waiting for one cp.async group too few: a k-tile read before it lands
    plant wait-short 's/cp_async_wait_group<W8_STAGES - 2>()/cp_async_wait_group<W8_STAGES - 1>()/' "" q8_0 200 512 130
    # the epilogue's row halves' scales swapped
    plant epi-rows 's/e < 2 ? w0 : w1, e < 2 ? n0 : n1/e < 2 ? w1 : w0, e < 2 ? n0 : n1/' "" q6_k 128 256 128
    # G = 128: a k-tile's scales of 128-block kt instead of kt / 2
    plant scale-kt 's/src.s + kt \* KT \/ 128/src.s + kt/' "" q5_k 200 512 130
    # the scale truncated to 16 bits instead of rounded
    plant scale-round 's/(__float_as_uint(s) + 0x80u)/(__float_as_uint(s) + 0x0u)/' "" q4_k 128 256 128
    # G = 32: the second 32-block of a k-tile scaled by the first's scales
    plant g32-epi-set 's/st + M::SC + 1024 \* kk)/st + M::SC)/' "EMU_G=32" q6_k 200 512 130
    # cuda_w8wg.cu (EMU_WG=1: against the mma.sync kernel's y): a chunk
    # stored unswizzled; the k32 steps' descriptors not advanced by 32
    # bytes; the fold before the wgmma completed; the producer refilling a
    # stage the consumers have not released; a consumer not waiting for
    # its stage to fill (the parity of the phase before)
    plant wg-swizzle 's/((ch ^ (rl \& 7)) << 4)/(ch << 4)/' "EMU_WG=1 EMU_KT=128" q4_k 200 512 130
    plant wg-kstep 's/da + 2 \* kk, db + 2 \* kk/da + kk, db + kk/' "EMU_WG=1 EMU_KT=128" q8_0 128 256 128
    plant wg-wait 's/wg_wait<0>();/wg_wait<1>();/' "EMU_WG=1 EMU_KT=128" q6_k 128 512 128
    plant wg-no-empty 's/mbar_wait(empty + 8 \* s, ph ^ 1);/;/' "EMU_WG=1 EMU_KT=128" q5_k 200 2048 130
    plant wg-full-parity 's/mbar_wait(full + 8 \* s, ph);/mbar_wait(full + 8 * s, ph ^ 1);/' "EMU_WG=1 EMU_KT=128" q4_k 128 1024 128
    # w8_wg_pingpong: the first turn never given (warpgroup 0 waits for
    # ever; the turns change no sums, so only their counts can be wrong)
    plant wg-pp-first 's/named_arrive(1, 256);   \/\/ warpgroup 0 goes first/;/' "EMU_WG=1 EMU_WG_PP=1 EMU_KT=128" q4_k 128 512 128
    [ "$1" = all ] || return 0
    plant wg-cols 's/(e \& 1) ? dx.y : dx.x/dx.x/' "EMU_WG=1 EMU_KT=128" q4_k 128 256 128
    # the clamped producer path: a row past the end not clamped (a read past wq)
    plant wg-clamp 's/min(p.r0 + rl + 16 \* i, p.rows - 1)/(p.r0 + rl + 16 * i)/' "EMU_WG=1 EMU_KT=128" q8_0 200 256 130
    # the release before every lane's reads of the stage are done
    plant wg-release 's/^            __syncwarp();   \/\/ every lane/            ;   \/\/ every lane/' "EMU_WG=1 EMU_KT=128 EMU_FIBER_ORDER=1" q6_k 128 2048 128
    # G = 128: the chain restarted at the second k-tile of a block
    plant chain-start 's/(h == 0 \&\& kk == 0)/(kk == 0)/' "" q8_0 128 256 128
    # G = 32: the chain not restarted per 32-block
    plant g32-chain 's/if (G == 32 || (h == 0/if ((h == 0/' "EMU_G=32" q4_k 128 256 128
    # G = 32: the second 32-block's scales of a k-tile loaded as the first's
    plant g32-issue 's/src.s + (KT \/ 32) \* kt + j)/src.s + (KT \/ 32) * kt)/' "EMU_G=32" q5_k 200 512 130
    # G = 32: one weight scale per 128 written (the rest left unwritten)
    plant g32-ws-lane 's/lane % (G \/ 8) == 0/lane % 16 == 0/' "EMU_G=32" q8_0 128 256 128
    # the epilogue's columns: both of a lane's pair scaled by the first's sx
    plant epi-cols 's/dx\[nt\]\[e \& 1\], acc/dx[nt][0], acc/' "" q4_k 128 256 128
    # w8_ktile = 128: the barrier, a stage's scales, the chain start
    plant kt128-no-sync 's/^            __syncthreads();$/;/' "EMU_KT=128 EMU_DRIFT=1" q4_k 200 1024 130
    plant kt128-scale 's/src.s + kt \* KT \/ 128/src.s + 2 * kt * KT \/ 128/' "EMU_KT=128" q8_0 200 512 130
    plant kt128-chunks 's/row = idx \/ (KT \/ 16), ch = idx % (KT \/ 16);/row = idx \/ 4, ch = idx % 4;/' "EMU_KT=128" q6_k 128 512 128
    # KT = 64: the epilogue after the first k-tile of a 128-block
    plant epi-tile 's/if (G == 128 \&\& h == TPB - 1)/if (G == 128 \&\& h == 0)/' "" q4_k 200 512 130
    # the refill into the stage being read (kt's, not kn's)
    plant refill-stage 's/sm + (kn % W8_STAGES) \* M::STAGE/sm + (kt % W8_STAGES) * M::STAGE/' "EMU_DRIFT=2" q6_k 200 1024 130
    # the activation tile's columns not divided by x_div
    plant no-x-div 's/c = (c < mm.ncols ? c : mm.ncols - 1) \/ mm.x_div;$/c = (c < mm.ncols ? c : mm.ncols - 1);/' "" q8_0 300 256 257 2
    # rows past the end not clamped (a read past wq)
    plant row-clamp 's/^        r = r < mm.rows ? r : mm.rows - 1;$/;/' "" q4_k 200 256 130
    # x read at a stride of in, not x_stride
    plant x-stride 's/x\[r \* stride + i0 + j\]/x[r * 256 + i0 + j]/' "" q8_0 128 256 128 1 48
    # a block's amax over twice its lanes (G = 128: the whole warp)
    plant amax-lanes 's/o = G \/ 16; o > 0/o = G \/ 8; o > 0/' "" q6_k 128 256 128
    # a NaN in the activations not voted: q = 0 hides it
    plant nan-vote 's/return __any_sync(0xffffffffu, bad) ?/return false ?/' "EMU_NAN=1" q5_k 128 512 128
    # the weights' scales: one block's of each warp only
    plant ws-index 's/s\[i0 \/ G\] = sc;/s[i0 \/ 256] = sc;/' "" q8_0 128 512 128
}
# Cases: [EMU_G=32] [EMU_DRIFT=seed] [EMU_NAN=1] TYPE ROWS IN NCOLS [X_DIV [X_PAD [Y_PAD]]]
cases() {
    run q4_k 200 256 130 1 0 7; run q8_0 128 512 128 1 48
    EMU_DRIFT=1 run q6_k 300 1024 257 2; EMU_NAN=1 run q5_k 200 512 130
    EMU_G=32 EMU_DRIFT=2 run q4_k 200 512 130 1 16 3
    # w8_ktile = 128 (the default at G = 128: EMU_KT=128)
    EMU_KT=128 EMU_DRIFT=2 run q6_k 200 1024 130; EMU_KT=128 run q5_k 128 512 128
    # the wgmma kernel (cuda_w8wg.cu) against the mma.sync one, bit for bit
    EMU_WG=1 EMU_KT=128 EMU_FIBER_ORDER=2 run q4_k 200 1024 130; EMU_WG=1 EMU_KT=128 EMU_DRIFT=3 run q8_0 300 2048 257 1 16 5
    # (knob w8_wg_pingpong: the consumer warpgroups taking turns)
    EMU_WG=1 EMU_WG_PP=1 EMU_KT=128 EMU_FIBER_ORDER=3 run q6_k 200 1024 130; EMU_WG=1 EMU_WG_PP=1 EMU_KT=128 run q5_k 1 256 3
    [ "$1" = quick ] && return 0
    for t in q4_k q5_k q6_k q8_0; do
        EMU_WG=1 EMU_KT=128 run $t 129 256 129 1 0 3; EMU_WG=1 EMU_KT=128 EMU_NAN=1 run $t 130 512 300
    done
    EMU_WG=1 EMU_KT=128 EMU_DRIFT=9 run q6_k 77 4096 70 1 256 1; EMU_WG=1 EMU_KT=128 run q8_0 1 256 3
    for t in q4_k q5_k q6_k q8_0; do
        EMU_KT=128 run $t 300 1024 257 2 16 5; EMU_KT=128 EMU_DRIFT=3 run $t 200 256 130
        EMU_KT=128 EMU_DRIFT=5 run $t 77 2048 70; EMU_KT=128 EMU_NAN=1 run $t 130 256 300 3
    done
    for t in q4_k q5_k q6_k q8_0; do
        run $t 200 256 130; run $t 128 512 128; run $t 300 1024 257 2 16 5
        EMU_DRIFT=7 run $t 200 1024 130 1 0 3; EMU_NAN=1 run $t 130 256 300 3
        EMU_G=32 run $t 128 256 128; EMU_G=32 run $t 300 1024 257 2 16 5; EMU_G=32 EMU_NAN=1 run $t 200 512 130
    done
    run q8_0 1 256 3; run q6_k 7 512 1; run q4_k 129 512 129 1 256 1; EMU_DRIFT=3 run q5_k 77 2048 70
    EMU_G=32 EMU_DRIFT=4 run q6_k 77 2048 70
}
cases $mode
if [ "$PLANT" != no ]; then if [ $mode = full ]; then plants all; else plants; fi; fi
echo "run-w8-emu ($mode): $npass cases passed, $nfail failed; $ncaught of $nplant planted bugs caught: $([ $rc = 0 ] && echo OK || echo FAIL)"
exit $rc
