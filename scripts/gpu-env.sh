#!/bin/sh
# Sourced ON the GPU machine from the repo root: points the test
# environment at the carried build (.gpu/build, else build-gpu/) and
# libraries (.gpu/lib),
# and re-creates the uninstalled plugin folder for this path.
top=$(pwd)
b="$top/build-gpu"
[ -d "$top/.gpu/build" ] && b="$top/.gpu/build"   # the slim copy gpu-prepare.sh makes
export LD_LIBRARY_PATH="$top/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SI_TOP_SRCDIR="$top" SI_TOP_BUILDDIR="$b" SI_SHARED_DATA="$top/../shared/data"
export CK_DEFAULT_TIMEOUT=600
# (gpu-prepare.sh carries the large shared libraries xz-compressed)
find "$b" -name '*.so.xz' -exec xz -d -f {} +
rm -rf "$b/lib" && mkdir -p "$b/lib"
for so in $(find "$b" -path '*/.libs/*.so' ! -path '*/tests/*'); do
    ln -sf "$so" "$b/lib/$(basename "$so")"
done
sed "s|^plugin_dir *=.*|plugin_dir = $b/lib|" "$b/sparkinfer-uninstalled.ini" > "$b/gpu.ini"
export SPARKINFER_CONFIG="$b/gpu.ini"
