#!/bin/sh
# tests/fuzz/run-fuzz.sh — builds the GGUF fuzz target with clang/libFuzzer
# (plus ASan and UBSan) into DIR and runs it.
#
#   tests/fuzz/run-fuzz.sh DIR [RUNS] [libFuzzer options...]
#
# RUNS defaults to 1200000 executions (0 = build and seed only).  The corpus
# grows in DIR/corpus; it is seeded from DIR/seeds, which holds the
# committed corpus (tests/fuzz/corpus), the generated seeds (gen_seeds.c),
# the repository's real files (tests/data/gguf) and, when present, every
# GGUF under $SI_SHARED_DATA/gguf.  Crashes land in DIR/artifacts.
#   CC_FUZZ   compiler (default clang)
#   MAX_LEN   libFuzzer -max_len (default 4096)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [RUNS] [libFuzzer options...]" >&2; exit 2; }
out=$1
shift
runs=${1:-1200000}
[ $# -ge 1 ] && shift
cc=${CC_FUZZ:-clang}
shared=${SI_SHARED_DATA:-$top/../shared/data}

mkdir -p "$out/corpus" "$out/seeds" "$out/artifacts"
flags="-std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I$top/core/include -I$top/core"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"

echo "run-fuzz: building $out/fuzz_gguf with $cc"
$cc $flags $san -fsanitize=fuzzer -o "$out/fuzz_gguf" \
    "$top/tests/fuzz/fuzz_gguf.c" "$top/core/gguf.c" "$top/core/types.c" -lm
$cc $flags $san -o "$out/gen_seeds" "$top/tests/fuzz/gen_seeds.c" \
    "$top/tests/gguf/gguf_bytes.c" "$top/core/gguf_write.c" "$top/core/gguf.c" \
    "$top/core/types.c" -lm

"$out/gen_seeds" "$out/seeds"
cp "$top"/tests/fuzz/corpus/* "$out/seeds/"
cp "$top"/tests/data/gguf/*.gguf "$out/seeds/"
if [ -d "$shared/gguf" ]; then
    find "$shared/gguf" -name '*.gguf' -exec cp {} "$out/seeds/" \;
fi
echo "run-fuzz: $(ls "$out/seeds" | wc -l) seed files"

[ "$runs" = 0 ] && exit 0
start=$(date +%s)
"$out/fuzz_gguf" -runs="$runs" -max_len="${MAX_LEN:-4096}" -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/" "$@" "$out/corpus" "$out/seeds"
echo "run-fuzz: $runs runs in $(( $(date +%s) - start )) s, no finding"
