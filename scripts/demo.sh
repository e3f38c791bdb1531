#!/bin/sh
# The main job: build, make a small model with the embedded default layout,
# and run it through the CLI (CPU backend when no GPU is present).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/build.sh"
cd "$build"
export SPARKINFER_CONFIG="$build/sparkinfer-uninstalled.ini"
./sparkinfer plugins
./sparkinfer mkmodel --arch qwen35 --preset tiny --seed 1 -o demo-tiny.gguf
./sparkinfer info demo-tiny.gguf
