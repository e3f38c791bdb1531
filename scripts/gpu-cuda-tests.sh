#!/bin/sh
# Run ON the GPU machine from the repo root, after `. scripts/gpu-env.sh`
# (build carried in build-gpu/, made by scripts/gpu-prepare.sh): runs the
# cuda_sm120 tests straight from build-gpu (the GPU machine has no libtool
# or make), prints one line per test and a summary.  Logs go to $OUT when
# it is set, else to build-gpu/cuda-test-logs.  Exit status: 0 when every
# test passed, 1 otherwise (a SKIP, exit 77, counts as a failure here: on
# the GPU machine the probe must accept the device).
top=$(pwd)
b="${SI_TOP_BUILDDIR:-$top/build-gpu}"
logs="${OUT:-$b/cuda-test-logs}"
mkdir -p "$logs"
if [ -z "$SI_TOP_BUILDDIR" ]; then
    echo "gpu-cuda-tests: run '. scripts/gpu-env.sh' first" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,compute_cap,memory.used,memory.total --format=csv > "$logs/nvidia-smi.txt" 2>&1
fail=0
# Every GPU test program the build made (check_cuda_*), the backend's own
# first: a new test needs no edit here.
progs=check_cuda_backend
for f in "$b"/tests/cuda/check_cuda_*; do
    n=$(basename "$f")
    case $n in *.*|*-*|check_cuda_backend) continue ;; esac
    [ -x "$f" ] && progs="$progs $n"
done
[ -n "$SI_TESTS" ] && progs=$SI_TESTS   # a chosen few (names as above)
# check_cuda_ops runs once per Check test case (its whole run is longer
# than one time limit): check_cuda_ops:attn and so on, also in SI_TESTS.
progs=$(for t in $progs; do
    [ "$t" = check_cuda_ops ] && t="check_cuda_ops:matmul check_cuda_ops:attn check_cuda_ops:gdn check_cuda_ops:moe check_cuda_ops:attn_fa3 check_cuda_ops:gdn_dec check_cuda_ops:gdn_early check_cuda_ops:moe_dec_fuse check_cuda_ops:norm check_cuda_ops:moe_overlap check_cuda_ops:norm_tail check_cuda_ops:gemv_glu check_cuda_ops:gemv_glu_moe check_cuda_ops:moe_sdc check_cuda_ops:gemv_mma check_cuda_ops:gemv_regroup check_cuda_ops:attn_ring check_cuda_ops:attn_i8_ring check_cuda_ops:attn_ring_knobs check_cuda_ops:kv_yield check_cuda_ops:attn_q check_cuda_ops:moe_persist check_cuda_ops:moe_persist_prof"
    [ "$t" = check_cuda_attn_plugin ] && t="check_cuda_attn_plugin:vs_cpu check_cuda_attn_plugin:v2"
    echo "$t"
done)
for tc in $progs; do
    t=${tc%%:*} case=
    [ "$t" != "$tc" ] && case=${tc#*:}
    bin="$b/tests/cuda/$t"
    # libtool may have left a wrapper script; the real binary is in .libs
    [ -x "$b/tests/cuda/.libs/$t" ] && bin="$b/tests/cuda/.libs/$t"
    if [ ! -x "$bin" ]; then
        echo "MISSING $t ($bin)"
        fail=1
        continue
    fi
    start=$(date +%s)
    # a kernel that hangs must not take the whole call with it
    log="$logs/$t${case:+-$case}.log"
    # (an empty CK_RUN_CASE would select no case at all)
    if [ -n "$case" ]; then
        CK_RUN_CASE=$case timeout "${SI_TEST_TIMEOUT:-240}" "$bin" > "$log" 2>&1
    else
        timeout "${SI_TEST_TIMEOUT:-240}" "$bin" > "$log" 2>&1
    fi
    rc=$?
    t=$tc
    secs=$(( $(date +%s) - start ))
    case $rc in
        0)  echo "PASS    $t (${secs}s)" ;;
        77) echo "SKIP    $t (${secs}s): $(grep -m1 SKIP "$log")"; fail=1 ;;
        *)  echo "FAIL    $t (exit $rc, ${secs}s)"; fail=1 ;;
    esac
    # Check's summary line and any failure messages
    grep -E '^[0-9]+%: Checks|:[EF]:|positions, top-1|^MOE |FAILS|worst relative|attach' "$log" | sed 's/^/        /'
done
if [ $fail -eq 0 ]; then
    echo "gpu-cuda-tests: all passed (logs in $logs)"
else
    echo "gpu-cuda-tests: FAILURES (logs in $logs)"
fi
exit $fail
