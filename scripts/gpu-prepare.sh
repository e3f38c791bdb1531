#!/bin/sh
# Run HERE (the build machine) before a GPU-machine call: builds sparkinfer
# in build-gpu/ (with CUDA, sm_90+sm_120) and copies the few shared
# libraries the binaries need that the GPU machine lacks into .gpu/lib.
# Both folders are git-ignored; name them in the device call's `carry`.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR="$top/build-gpu" CONFIGURE_ARGS="--with-cuda --with-cuda-arch=90,120" "$top/scripts/build.sh"
make -s -C "$top/build-gpu" -j"$(nproc)" check TESTS= >/dev/null   # build test programs only
mkdir -p "$top/.gpu/lib"
for so in libinih.so.1 libsubunit.so.0 libutf8proc.so.2 libcjson.so.1; do
    p=$(ldconfig -p | awk -v s="$so" '$1 == s { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" "$top/.gpu/lib/$so"
done
du -sh "$top/build-gpu" "$top/.gpu"
