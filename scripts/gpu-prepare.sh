#!/bin/sh
# Run HERE (the build machine) before a GPU-machine call: builds sparkinfer
# in build-gpu/ (with CUDA, sm_90+sm_120), copies the few shared libraries
# the binaries need that the GPU machine lacks into .gpu/lib and the
# runnable part of the build into .gpu/build.  .gpu is git-ignored; name it
# (only it) in the device call's `carry`.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
# (a build-gpu configured for other SM targets is configured afresh)
grep -q -- '--with-cuda-arch=90a,120' "$top/build-gpu/config.status" 2>/dev/null || rm -f "$top/build-gpu/Makefile"
BUILD_DIR="$top/build-gpu" CONFIGURE_ARGS="--with-cuda --with-cuda-arch=90a,120" "$top/scripts/build.sh"
make -s -C "$top/build-gpu" -j"$(nproc)" check TESTS= >/dev/null   # build test programs only
mkdir -p "$top/.gpu/lib"
for so in libinih.so.1 libsubunit.so.0 libutf8proc.so.2 libcjson.so.1; do
    p=$(ldconfig -p | awk -v s="$so" '$1 == s { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" "$top/.gpu/lib/$so"
done
# What the GPU machine runs, without objects and archives (the device
# tool carries at most 64 MiB with the tracked tree): .gpu/build, used by
# gpu-env.sh.  Of the tests only tests/cuda's (a second pass), and not its
# statically linked microbenchmarks (bench_gemv alone is ~18 MB;
# SI_GPU_BENCH=1 keeps them, then leave something else out).
rm -rf "$top/.gpu/build"
mkdir -p "$top/.gpu/build"
ex_bench="--exclude=./tests/cuda/bench_gemm --exclude=./tests/cuda/bench_gemv"
[ "${SI_GPU_BENCH:-0}" = 1 ] && ex_bench=
for part in "--exclude=./tests ." "$ex_bench ./tests/cuda"; do
    # shellcheck disable=SC2086 (part: options, then the path)
    (cd "$top/build-gpu" && tar cf - --exclude='*.o' --exclude='*.a' --exclude='.deps' --exclude='config.log' \
        --exclude='*.trs' --exclude='*.log' --exclude='autom4te.cache' --exclude=Makefile --exclude=libtool \
        --exclude=config.status $part) | (cd "$top/.gpu/build" && tar xf -)
done
# (symbols stripped from the copies: ~2 MB of the carry limit)
find "$top/.gpu/build" -type f \( -name '*.so' -o -perm -u+x \) -exec sh -c \
    'for f; do head -c 4 "$f" | grep -q ELF && strip --strip-unneeded "$f"; done' sh {} +
# The shared libraries xz-compressed (cuda_sm120.so: ~47 MB of sm_90a and
# sm_120 code -> ~5 MB); gpu-env.sh unpacks them on the GPU machine.
find "$top/.gpu/build" -type f -name '*.so' -size +1M -exec xz -T0 -6 -f {} +
du -sh "$top/build-gpu" "$top/.gpu"
# The device tool carries at most 64 MiB (by its own count: a carry of 63.7
# MiB by this one was refused, 61 passed): the tracked tree, untracked files
# git does not ignore, and .gpu; say so before a call is refused.
tree=$(cd "$top" && { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 -r du -cb 2>/dev/null | awk '$2 == "total" { s += $1 } END { print s + 0 }')
gpu=$(du -sb "$top/.gpu" | awk '{ print $1 }')
if [ $((tree + gpu)) -gt $((62 * 1024 * 1024)) ]; then
    echo "gpu-prepare: the tree ($tree bytes) and .gpu ($gpu) are near or over the device tool's 64 MiB carry;" >&2
    echo "  leave out of .gpu/build what the call does not run (tests/cuda programs, plugins' .so)" >&2
fi
