#!/bin/sh
# Run ON the GPU machine from the repo root (after gpu-prepare.sh here):
# one kernel of a decode step under ncu with the sections that say where
# its time goes (speed of light, stall reasons, occupancy, the hottest
# source lines), caches kept as in a real step.
# Usage: gpu-ncu-kernel.sh MODEL.gguf CTX KERNEL-REGEX [SKIP] [OUT-NAME]
# (SI_NCU_ARGS: more bench arguments, e.g. a knob: --set backend.cuda_sm120.attn_ring=true)
. scripts/gpu-env.sh
m=$1 ctx=$2 k=$3 skip=${4:-2} name=${5:-ncu_kernel}
O=${OUT:-/tmp}
timeout 240 ncu --clock-control none --cache-control none -k "regex:$k" -s "$skip" -c 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
    "$SI_TOP_BUILDDIR/sparkinfer" bench -m "$m" --no-pp --ctx "$ctx" --bs 1 --tg 2 --reps 1 --warmup 0 \
    --set backend.cuda_sm120.graph=false $SI_NCU_ARGS > "$O/$name.txt" 2>&1
grep -E 'Duration|Throughput|Registers|Achieved Occupancy|Warp Cycles Per Issued|Eligible|Issued Warp|Stall|stall|Block Size|Grid Size|Waves|Theoretical Occ|L1/TEX Hit|L2 Hit|Mem Busy' "$O/$name.txt" | head -60
