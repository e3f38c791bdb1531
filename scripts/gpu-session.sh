#!/bin/sh
# Run ON the GPU machine from the repo root (build carried in build-gpu/ and
# .gpu/, made here by scripts/gpu-prepare.sh): the whole GPU session in one
# call — GPU tests, whole-model checks, then benchmarks — in order of
# importance, each step under a timeout and all of them under a deadline
# (SI_DEADLINE seconds, default 170) so a slow step cannot eat the lease.
# Logs go to $OUT/<step>.log; the key lines are echoed as each step ends.
. scripts/gpu-env.sh
O=${OUT:-/tmp/si-gpu-out}
mkdir -p "$O"
SI="$SI_TOP_BUILDDIR/sparkinfer"
T="$SI_TOP_BUILDDIR/tests/cuda"
deadline=$(( $(date +%s) + ${SI_DEADLINE:-170} ))
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv,noheader

# step NAME SECONDS GREP-PATTERN CMD...: runs CMD (stdout+stderr to the log)
# unless fewer than SECONDS remain before the deadline.
step() {
    name=$1 t=$2 pat=$3
    shift 3
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt "$t" ]; then echo "== $name: SKIPPED (${left}s left, needs $t)"; return; fi
    s=$(date +%s)
    timeout "$t" "$@" > "$O/$name.log" 2>&1
    rc=$?
    echo "== $name: rc=$rc $(( $(date +%s) - s ))s"
    grep -E "$pat" "$O/$name.log" | cut -c1-220 | tail -n 40
}

CHK='^[0-9]+%: Checks|:[EF]:|top-1|max err|SKIP'
step tests 100 '^(PASS|FAIL|SKIP|MISSING)|Checks|:[EF]:|top-1' sh scripts/gpu-cuda-tests.sh
step model_dp4a_vs_cpu_fast 40 "$CHK" env SI_CUDA_TEST_MATMUL=dp4a SI_CUDA_TEST_CPU_MATMUL=fast "$T/check_cuda_model"
step model_kv_i8 40 "$CHK" env SI_CUDA_TEST_KV=i8 "$T/check_cuda_model"

step mk9b 20 'wrote|rror' "$SI" mkmodel --preset 9b -o /tmp/9b.gguf
step mk35b 30 'wrote|rror' "$SI" mkmodel --preset 35b-a3b -o /tmp/35b.gguf
ROWS='^(pp|tg) |rror|profile:'
for m in 9b 35b; do
    D="--set backend.cuda_sm120.matmul=dp4a"
    step "tg_$m" 50 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1 --tg 32 --reps 5 $D
    step "tg_bs8_$m" 25 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128 --bs 8 --tg 32 --reps 5 $D
    step "pp_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 3
    step "prof_dec_$m" 20 'profile:' "$SI" bench -m /tmp/$m.gguf -v --no-pp --ctx 512 --bs 1 --tg 16 --reps 2 $D \
        --set backend.cuda_sm120.profile=true
    step "prof_pre_$m" 20 'profile:|^pp ' "$SI" bench -m /tmp/$m.gguf -v --no-tg --pp 4096 --reps 1 --warmup 0 \
        --set backend.cuda_sm120.profile=true
done
step ab_moe_plugin_off 30 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 512,4096 --reps 3 \
    --set kernel.moe_grouped_i8.enabled=false
step ab_kv_i8_9b 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 4096 --bs 1 --tg 32 --reps 5 \
    --set backend.cuda_sm120.matmul=dp4a --set backend.cuda_sm120.kv_type=i8
step bench_9b_32k 60 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 32768 --bs 1 --tg 16 --reps 3 \
    --set backend.cuda_sm120.matmul=dp4a
echo "== gpu-session done ($(( deadline - $(date +%s) ))s before the deadline)"
