#!/bin/sh
# Run ON the GPU machine from the repo root (build carried in .gpu/, made by
# scripts/gpu-prepare.sh): a short A/B of cuda_sm120 knobs on the mkmodel
# presets, each arm against the defaults, alternated twice (A B A B), one
# bench line per arm; GPU tests first when SI_TESTS names them (as
# gpu-cuda-tests.sh takes them).  Keep a call short: a device call can be
# taken back mid-run and then returns nothing.
#   sh scripts/gpu-ab.sh "9b 35b-a3b" "--ctx 4096 --bs 16,32" gemv_wide_regs=capped gemv_wide_split=true
. scripts/gpu-env.sh
presets=$1 shape=$2
shift 2
SI="$SI_TOP_BUILDDIR/sparkinfer"
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader
if [ -n "$SI_TESTS" ]; then
    OUT=/tmp/si-ab-tests sh scripts/gpu-cuda-tests.sh
fi
bench() {   # preset, label, extra arguments...
    m=$1 label=$2
    shift 2
    # shellcheck disable=SC2086 (shape is a list of arguments)
    timeout 90 "$SI" bench --bw 4300 -m "/tmp/$m.gguf" --no-pp $shape --tg 64 --reps 5 "$@" > /tmp/si-ab.log 2>&1
    echo "== $m $label rc=$? ($(( $(date +%s) - t0 ))s)"
    grep -E '^tg |rror' /tmp/si-ab.log | cut -c1-110
}
for m in $presets; do
    [ -f "/tmp/$m.gguf" ] || "$SI" mkmodel --preset "$m" -o "/tmp/$m.gguf" > /dev/null
    for rep in 1 2; do
        bench "$m" default
        for kv in "$@"; do
            bench "$m" "$kv" --set "backend.cuda_sm120.$kv"
        done
    done
done
