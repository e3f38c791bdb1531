#!/bin/sh
# The main job: build, make the embedded default model (mkmodel's `tiny`
# qwen35 preset with the built-in byte-level vocabulary, seeded random
# weights), and generate text from it with the CLI.  The best loaded backend
# runs it: cuda_sm120 when a GPU is usable, otherwise cpu.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/build.sh"
cd "$build"
export SPARKINFER_CONFIG="$build/sparkinfer-uninstalled.ini"
./sparkinfer plugins
[ -f demo-tiny.gguf ] || ./sparkinfer mkmodel --arch qwen35 --preset tiny --seed 1 -o demo-tiny.gguf
./sparkinfer run -m demo-tiny.gguf --chat -p "Write one sentence about the sea." -n 48 --seed 7 -v
