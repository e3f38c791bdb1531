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
# SI_ONLY (an extended regex) runs only the steps whose names match it.
step() {
    name=$1 t=$2 pat=$3
    shift 3
    if [ -n "$SI_ONLY" ] && ! echo "$name" | grep -Eq "$SI_ONLY"; then last_rc=0; return; fi
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

CHK='^[0-9]+%: Checks|:[EF]:|top-1|max err|SKIP'
ROWS='^(pp|tg) |rror|profile:'
D="--set backend.cuda_sm120.matmul=dp4a"
P="--set backend.cuda_sm120.profile=true"
G0="--set backend.cuda_sm120.graph=false"
B="$SI_TOP_BUILDDIR/tests/cuda"
# 1. the presets of the issue, generated here
step mk9b 20 'wrote|rror' "$SI" mkmodel --preset 9b -o /tmp/9b.gguf
step mk35b 30 'wrote|rror' "$SI" mkmodel --preset 35b-a3b -o /tmp/35b.gguf
# 1b. per-kernel decode time and DRAM traffic under ncu (a few steps, no
#     graph; scripts/ncu-summary.py groups the kernels of the decode steps)
NCU_M=gpu__time_duration.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
for m in 9b 35b; do
    # (SI_NCU_CACHE=none: caches kept between kernels, as in a real step;
    # ncu's default flushes them, which inflates latency-bound kernels)
    step "ncu_dec_$m" 150 'PROF.*rror' ncu --clock-control none --cache-control ${SI_NCU_CACHE:-all} --csv --page raw --metrics $NCU_M --log-file "$L/ncu_$m.csv" \
        "$SI" bench -m /tmp/$m.gguf --no-pp --ctx 16 --bs 1 --tg 2 --reps 1 --warmup 0 $G0
    step "ncu_sum_$m" 20 '.' python3 scripts/ncu-summary.py "$L/ncu_$m.csv"
done
cp "$L"/ncu_*.csv "$O"/ 2>/dev/null
# 2. decode and prefill at the defaults; a bench that fails (a new kernel
#    faulting) is run again with the previous session's paths (SAFE)
SAFE="--set backend.cuda_sm120.prefill_mm=gemv --set backend.cuda_sm120.gdn_prefill=seq $G0
 --set backend.cuda_sm120.gdn_rows=false --set kernel.moe_grouped_i8.enabled=false"
for m in 9b 35b; do
    step "tg_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1,8 --tg 64 --reps 5
    [ "$last_rc" -ne 0 ] && step "tg_${m}_safe" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128 \
        --bs 1 --tg 32 --reps 5 $SAFE
    step "tg_${m}_pdl_off" 30 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1 --tg 64 --reps 5 \
        --set backend.cuda_sm120.pdl=false
    # each decode knob's A/B against the defaults: step name suffix, key=value
    for ab in xs_off:gemv_xsmem=false warps4:gemv_warps=4 gdnq_on:fuse_gdn_q=true qe_off:gemv_quad_experts=false \
        early_off:expert_early=false rr_off:route_fused=false amma_off:attn_mma=false qn_off:gemv_quad_cols=false st_off:gemv_staged=false \
        quad_off:gemv_quad=false prefetch_off:gemv_prefetch=false; do
        step "tg_${m}_${ab%%:*}" 30 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1,8 --tg 64 \
            --reps 5 --set "backend.cuda_sm120.${ab#*:}"
    done
    # gdn_dec = split: each GDN layer's decode step as four launches against the
    # default fused one (a cluster launch: conv, delta rule, gated norm, int8 copy)
    step "tg_${m}_gdn_split" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1,8 --tg 64 \
        --reps 5 --set backend.cuda_sm120.gdn_dec=split
    # (the default again after the A/Bs: this machine's bs-1 drift within one call)
    step "tg_${m}_re" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 128,4096 --bs 1,8 --tg 64 --reps 5
    step "tg_${m}_graph_off" 30 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 4096 --bs 1 --tg 64 --reps 5 $G0
    step "pp_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5
    [ "$last_rc" -ne 0 ] && step "pp_${m}_safe" 30 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512 --reps 2 $SAFE
    # the i8 GEMM on mma.sync (cuda_w8.cu) against the default wgmma one
    step "pp_${m}_wg_off" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.w8_wgmma=false
    # the chunked GDN's f32 kernel against the default tf32 tensor cores (gdn_tc)
    step "pp_${m}_tc_off" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.gdn_tc=false
    # the MoE plugin's expert GEMMs on mma.sync against the default wgmma
    [ "$m" = 35b ] && step "pp_${m}_moe_mma" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set kernel.moe_grouped_i8.wgmma=false
    # the prefill flash attention's 64-token tiles (v1) and v2 (mma.sync)
    # against the default v3 (wgmma)
    step "pp_${m}_fa_v1" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.attn_fa_tile=v1
    step "pp_${m}_fa_v2" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.attn_fa_tile=v2
    # v3 with each warpgroup's softmax overlapping the tile before's P V
    # (attn_fa3_overlap) against the default v3
    step "pp_${m}_fa3_overlap" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.attn_fa3_overlap=true
    # the wgmma kernel's warpgroups multiplying together (the default takes turns)
    step "pp_${m}_pp_off" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.w8_wg_pingpong=false
done
# the i8 GEMM alone: mma.sync (w8) against wgmma (w8wg), Q4_K at the 9b shapes
step gemm_wg 90 '.' "$B/bench_gemm" --only q4_k --cols 512,4096 --reps 5
# 2b. the i8 prefill GEMM's 64-byte k-tiles (w8_ktile = 64) against the
#     default 128
for m in 9b 35b; do
    step "ab_w8_kt64_pp_$m" 30 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 \
        --set backend.cuda_sm120.w8_ktile=64
done
step ab_moe_kt64_pp_35b 30 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 512,4096 --reps 5 \
    --set kernel.moe_grouped_i8.ktile=64
# 3. kernel microbenchmarks (each prints its own table)
for k in bench_gemv bench_gemm bench_attn; do
    [ -x "$B/$k" ] && step "$k" 60 '.' "$B/$k"
done
# 3b. one kernel's stall reasons and pipe use under ncu: the Q4_K prefill
#     GEMM (mma2) at 4096 columns and the one-column Q4_K GEMV (mmq)
NCU_S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy
 --section LaunchStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis"
NCU_ST="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio"
step ncu_gemm 120 'Duration|Throughput|Stall|Issue|Occupancy|Registers|Eligible|stall|Pipe' ncu --clock-control none \
    $NCU_S $NCU_ST -k regex:mma2_kernel -c 1 "$B/bench_gemm" --only q4_k --reps 1 --cols 4096
step ncu_w8 120 'Duration|Throughput|Stall|Issue|Occupancy|Registers|Eligible|stall|Pipe' ncu --clock-control none \
    $NCU_S $NCU_ST -k regex:w8_kernel -c 1 "$B/bench_gemm" --only q4_k --reps 1 --cols 4096
step ncu_wg 120 'Duration|Throughput|Stall|Issue|Occupancy|Registers|Eligible|stall|Pipe' ncu --clock-control none \
    $NCU_S $NCU_ST -k regex:wg_kernel -c 1 "$B/bench_gemm" --only q4_k --reps 1 --cols 4096
step ncu_gemv 120 'Duration|Throughput|Stall|Issue|Occupancy|Registers|Eligible|stall|Pipe' ncu --clock-control none \
    $NCU_S $NCU_ST -k regex:mmq_kernel -s 3 -c 1 "$B/bench_gemv" 1
# 3c. a prefill kernel by kernel under ncu (slow: the 9b's 2048 tokens,
#     ~900 kernels, took ~200 s on the H200; the first products include
#     the w8 requantisation)
NCU_P=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
step ncu_pre_9b 240 '.' sh -c "ncu --clock-control none --csv --page raw --metrics $NCU_P --log-file $L/ncu_pre_9b.csv \
    $SI bench -m /tmp/9b.gguf --no-tg --pp 2048 --reps 1 --warmup 0 $G0 && python3 scripts/ncu-kernels.py $L/ncu_pre_9b.csv 30"
# 3d. the GDN prefill's kernels of one layer (2048 tokens of the 9b) under ncu
step ncu_gdn_9b 120 'chunk|conv|norm|delta|Duration|duration' ncu --clock-control none --cache-control none \
    --metrics gpu__time_duration.sum -k regex:'chunk|conv_tok|conv_state|qk_norm|gnorm|delta_kernel' -c 7 \
    "$SI" bench -m /tmp/9b.gguf --no-tg --pp 2048 --reps 1 --warmup 0 $G0
# 4. where the time goes (profile = true runs without the graph)
for m in 9b 35b; do
    step "prof_dec_$m" 25 'profile:' "$SI" bench -m /tmp/$m.gguf -v --no-pp --ctx 512 --bs 1 --tg 16 --reps 2 $P
    step "prof_pre_$m" 25 'profile:|^pp ' "$SI" bench -m /tmp/$m.gguf -v --no-tg --pp 4096 --reps 1 --warmup 0 $P
    step "prof_pre32_$m" 40 'profile:|^pp ' "$SI" bench -m /tmp/$m.gguf -v --no-tg --pp 32768 --reps 1 --warmup 0 $P
done
# 5. correctness: every GPU test program
# (all of them: about 8 minutes on the H200, check_cuda_ops's four cases ~6)
step tests ${SI_TESTS_STEP:-540} '^(PASS|FAIL|SKIP|MISSING)|Checks|:[EF]:|top-1' env OUT="$L/tests" SI_TEST_TIMEOUT=${SI_TEST_TIMEOUT:-200} sh scripts/gpu-cuda-tests.sh
for f in "$L"/tests/*.log; do [ -f "$f" ] && { echo "==== $f"; cat "$f"; } >> "$O/session.log"; done
step model_int8_vs_cpu_fast 40 "$CHK" env SI_CUDA_TEST_MATMUL=dp4a SI_CUDA_TEST_CPU_MATMUL=fast \
    SI_CUDA_TEST_PREFILL_MM=mma SI_CUDA_TEST_KV=f32 "$T/check_cuda_model"
step model_int8_vs_cpu_ref 40 "$CHK" env SI_CUDA_TEST_MATMUL=dp4a SI_CUDA_TEST_CPU_MATMUL=ref \
    SI_CUDA_TEST_PREFILL_MM=mma SI_CUDA_TEST_KV=f32 "$T/check_cuda_model"
step model_kv_i8 40 "$CHK" env SI_CUDA_TEST_KV=i8 "$T/check_cuda_model"
# 6. batched prefill against token by token on the presets (prefix fed
#    batched on both sides, 128 compared positions), and where the
#    difference comes from: int8 products on one side only
CK="--prefix 512 --batched-prefix --cont 128"
F32="--set backend.cuda_sm120.matmul=f32"
step check_9b 30 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK
step check_9b_f32 40 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK $F32 --set backend.cuda_sm120.prefill_mm=gemv
step check_9b_mma_vs_f32 40 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK $F32
step check_9b_f32_vs_dp4a 40 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK --set backend.cuda_sm120.prefill_mm=gemv
step check_35b 40 'top-1|rror' "$SI" check -m /tmp/35b.gguf $CK
# the prefill GEMM on the exact GGUF blocks (mma_weights = gguf) against
# the default requantised int8 weights (i8): checks and prefill speed
GG="--set backend.cuda_sm120.mma_weights=gguf"
step check_9b_gguf 30 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK $GG
step check_35b_gguf 40 'top-1|rror' "$SI" check -m /tmp/35b.gguf $CK $GG
step ab_w8_cache_pp_9b 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 5 \
    --set backend.cuda_sm120.w8_cache=false
W32="--set backend.cuda_sm120.w8_block=32"
step check_9b_w8_32 30 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK $W32
step check_35b_w8_32 40 'top-1|rror' "$SI" check -m /tmp/35b.gguf $CK $W32
for m in 9b 35b; do
    step "ab_w8_pp_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 $GG
    step "ab_w8_32_pp_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 512,4096 --reps 5 $W32
done
# the tiled f32 GEMM of float-stored weights (the MOE router over a
# prefill batch; f32_gemm = tiled, default) against the GEMV-style kernel
FT="--set backend.cuda_sm120.f32_gemm=gemv"
step ab_f32_gemm_pp_35b 40 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 512,4096 --reps 3 $FT
step check_35b_f32_gemm 40 'top-1|rror' "$SI" check -m /tmp/35b.gguf $CK $FT
step check_35b_f32 60 'top-1|rror' "$SI" check -m /tmp/35b.gguf $CK $F32 --set backend.cuda_sm120.prefill_mm=gemv \
    --set kernel.moe_grouped_i8.enabled=false
# the depths: prefix 4k and 32k, defaults (int8 products, the plugins)
for d in 4096 32768; do
    for m in 9b 35b; do
        step "check_${m}_prefix$d" 45 'top-1|rror' "$SI" check -m /tmp/$m.gguf -c $((d + 256)) --prefix $d \
            --batched-prefix --cont 128
    done
done
# gdn_dec = split end to end: token-by-token decode (the split GDN step) against batched prefill
for m in 9b 35b; do
    step "check_${m}_gdn_split" 40 'top-1|rror' "$SI" check -m /tmp/$m.gguf $CK --set backend.cuda_sm120.gdn_dec=split
done
step check_35b_plugin_off 40 'top-1|rror' "$SI" check -m /tmp/35b.gguf $CK --set kernel.moe_grouped_i8.enabled=false
step ab_moe_w8_pp_35b 40 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 512,4096 --reps 3 \
    --set kernel.moe_grouped_i8.weights=gguf
# 7. long prompts and long contexts
step pp_32k_9b 60 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 32768 --reps 2 --warmup 0
step pp_32k_35b 60 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 32768 --reps 2 --warmup 0
for m in 9b 35b; do
    step "pp_32k_${m}_fa_v1" 60 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 32768 --reps 2 --warmup 0 \
        --set backend.cuda_sm120.attn_fa_tile=v1
    step "pp_32k_${m}_fa_v2" 60 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 32768 --reps 2 --warmup 0 \
        --set backend.cuda_sm120.attn_fa_tile=v2
    # v3's softmax overlapping P V (attn_fa3_overlap) at a 32k prompt; 3 reps
    # after a warmup (pp_32k_$m: 2, none), the gap sought being ~1%
    step "pp_32k_${m}_fa3_overlap" 90 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 32768 --reps 3 --warmup 1 \
        --set backend.cuda_sm120.attn_fa3_overlap=true
    step "pp_64k_$m" 60 "$ROWS" "$SI" bench -m /tmp/$m.gguf --no-tg --pp 65536 --reps 1 --warmup 0
done
step tg_32k_9b 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 32768 --bs 1 --tg 32 --reps 5
step tg_32k_35b 40 "$ROWS" "$SI" bench -m /tmp/35b.gguf --bw 4300 --no-pp --ctx 32768 --bs 1 --tg 32 --reps 5
for m in 9b 35b; do
    step "tg_32k_${m}_amma_off" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 32768 --bs 1 --tg 32 --reps 5 \
        --set backend.cuda_sm120.attn_mma=false
done
step tg_bs_9b 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 128 --bs 8,32 --tg 32 --reps 5
step tg_bs_35b 50 "$ROWS" "$SI" bench -m /tmp/35b.gguf --bw 4300 --no-pp --ctx 128 --bs 8,32 --tg 32 --reps 5
# 8. A/B: the kernel plugins, the int8 KV cache
I8="--set backend.cuda_sm120.kv_type=i8"
step ab_moe_plugin_off 30 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 512,4096 --reps 3 \
    --set kernel.moe_grouped_i8.enabled=false
step pp_i8_9b 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 3 $I8
step pp_i8_9b_attn_off 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 3 $I8 \
    --set kernel.attn_mma_i8.enabled=false
# attn_mma_i8's v2 kernel (128-token tiles, K/V staged in shared memory,
# P.V on int8 tensor cores) against v1 (the default) at 4k and a 32k prompt
step pp_i8_9b_ami8_v2 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 3 $I8 \
    --set kernel.attn_mma_i8.tile=v2
step pp_i8_32k_9b_ami8_v1 90 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 32768 --reps 1 --warmup 1 $I8 \
    --set kernel.attn_mma_i8.tile=v1
step pp_i8_32k_9b_ami8_v2 90 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 32768 --reps 1 --warmup 1 $I8 \
    --set kernel.attn_mma_i8.tile=v2
step check_9b_i8_ami8_v2 30 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK $I8 --set kernel.attn_mma_i8.tile=v2
step tg_i8_9b 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 4096 --bs 1 --tg 32 --reps 5 $I8
step check_9b_i8 30 'top-1|rror' "$SI" check -m /tmp/9b.gguf $CK $I8
# the prefill chunk (n_batch, 512 by default): the MoE plugin's expert groups
# hold n_batch * 8 / 256 tokens on average, so the 35b wants larger chunks
for nb in 2048 4096; do
    step "pp_nb${nb}_35b" 40 "$ROWS" "$SI" bench -m /tmp/35b.gguf --no-tg --pp 4096,32768 --reps 1 --warmup 0 \
        --set runtime.n_batch=$nb
    step "pp_nb${nb}_9b" 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 4096,32768 --reps 1 --warmup 0 \
        --set runtime.n_batch=$nb
done
step tg_i8_32k_9b 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 4096,32768 --bs 1 --tg 32 --reps 5 $I8
step tg_i8_32k_35b 40 "$ROWS" "$SI" bench -m /tmp/35b.gguf --bw 4300 --no-pp --ctx 4096,32768 --bs 1 --tg 32 --reps 5 $I8
step ab_gemv_v2 40 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 4096 --bs 1,8 --tg 32 --reps 5 \
    --set backend.cuda_sm120.gemv=v2
step ab_gemv_v2_35b 40 "$ROWS" "$SI" bench -m /tmp/35b.gguf --bw 4300 --no-pp --ctx 4096 --bs 1,8 --tg 32 --reps 5 \
    --set backend.cuda_sm120.gemv=v2
# decode attention over the dense cache: the per-head core against the
# default (K/V tiles staged for the whole GQA group), at 4k and 32k
for m in 9b 35b; do
    step "ab_attn_gqa_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 4096,32768 --bs 1 --tg 32 \
        --reps 5 --set backend.cuda_sm120.attn_gqa=per_head
done
# residual ADD + RMSNORM + int8 copy, SWIGLU + int8 copy fused (fuse_norm,
# default) vs separate kernels
for m in 9b 35b; do
    step "ab_fuse_norm_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 4096 --bs 1,8 --tg 32 \
        --reps 5 --set backend.cuda_sm120.fuse_norm=false
done
# decode products of one input in one launch (gemv_fuse, default) vs one each
for m in 9b 35b; do
    step "ab_gemv_fuse_$m" 40 "$ROWS" "$SI" bench -m /tmp/$m.gguf --bw 4300 --no-pp --ctx 4096 --bs 1,8 --tg 32 \
        --reps 5 --set backend.cuda_sm120.gemv_fuse=false
done
step pp_128k_9b 90 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 131072 --reps 1 --warmup 0
# decode picks on the device (TOPK, the default) vs whole logits rows to the host
step ab_full_logits_9b 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --bw 4300 --no-pp --ctx 128 --bs 1,8 --tg 32 --reps 5 \
    --full-logits
step ab_mma_v1_9b 30 "$ROWS" "$SI" bench -m /tmp/9b.gguf --no-tg --pp 512,4096 --reps 2 --set backend.cuda_sm120.mma_tile=v1
echo "== gpu-session done ($(( deadline - $(date +%s) ))s before the deadline)"
