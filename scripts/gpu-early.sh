#!/bin/sh
# Run ON the GPU machine from the repo root (build carried in build-gpu/ and
# .gpu/, made here by scripts/gpu-prepare.sh): the whole GPU session in one
# call — GPU tests, whole-model checks, then benchmarks — in order of
# importance, each step under a timeout and all of them under a deadline
# (SI_DEADLINE seconds, default 540) so a slow step cannot eat the lease.
# Every log is appended to $OUT/session.log (the device tool brings back
# only a few files, so one file holds everything); the key lines are
# echoed as each step ends.
. scripts/gpu-env.sh
O=${OUT:-/tmp/si-gpu-out}
L=/tmp/si-gpu-steps
mkdir -p "$O" "$L"
SI="$SI_TOP_BUILDDIR/sparkinfer"
T="$SI_TOP_BUILDDIR/tests/cuda"
deadline=$(( $(date +%s) + ${SI_DEADLINE:-540} ))
# (a step that is cut short by its timeout still leaves its log)
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv,noheader

# step NAME SECONDS GREP-PATTERN CMD...: runs CMD (stdout+stderr to the log)
# unless fewer than SECONDS remain before the deadline.
step() {
    name=$1 t=$2 pat=$3
    shift 3
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt "$t" ]; then echo "== $name: SKIPPED (${left}s left, needs $t)"; last_rc=0; return; fi
    s=$(date +%s)
    timeout "$t" "$@" > "$L/$name.log" 2>&1
    rc=$?
    last_rc=$rc
    echo "== $name: rc=$rc $(( $(date +%s) - s ))s"
    grep -E "$pat" "$L/$name.log" | cut -c1-220 | tail -n 40
    { echo "==== $name (rc $rc): $*"; cat "$L/$name.log"; } >> "$O/session.log"
}

ROWS='^(pp|tg) |rror|profile:|graphs:'
T2="$SI_TOP_BUILDDIR/tests/cuda"
for t in check_cuda_graph check_cuda_ops check_cuda_model; do
  bin="$T2/$t"; [ -x "$T2/.libs/$t" ] && bin="$T2/.libs/$t"
  step "$t" 170 '^[0-9]+%: Checks|:[EF]:|top-1|bit-identical|graphs|TOPK|replays|SKIP' "$bin"
done
step mk9b 20 'wrote|rror' "$SI" mkmodel --preset 9b -o /tmp/9b.gguf
step tg_9b 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf -v --bw 4300 --no-pp --ctx 128,4096 --bs 1 --tg 64 --reps 5
step tg_9b_g0 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1 --tg 64 --reps 5 --set backend.cuda_sm120.graph=false
step tg_9b_full 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 128 --bs 1 --tg 64 --reps 5 --full-logits
step pp_9b 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 3
step pp_9b_split 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 3 --set backend.cuda_sm120.attn_prefill=split
[ -x "$T2/bench_attn" ] && step bench_attn 40 '.' "$T2/bench_attn"
step mk35b 30 'wrote|rror' "$SI" mkmodel --preset 35b-a3b -o /tmp/35b.gguf
step tg_35b 30 "$ROWS" "$SI" bench -m /tmp/35b.gguf -v --bw 4300 --no-pp --ctx 128,4096 --bs 1 --tg 64 --reps 5
step tg_35b_g0 30 "$ROWS" "$SI" bench -m /tmp/35b.gguf --bw 4300 --no-pp --ctx 128 --bs 1 --tg 64 --reps 5 --set backend.cuda_sm120.graph=false
step pp_32k_9b 60 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 32768 --reps 1 --warmup 0
echo "== early done ($(( deadline - $(date +%s) ))s before the deadline)"
