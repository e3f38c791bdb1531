#!/bin/sh
# tests/cli/cli_errors.sh — error paths of `sparkinfer info` and `sparkinfer
# mkmodel`: each must exit non-zero with a one-line message naming the
# problem on stderr, and write nothing on stdout.
set -u
BIN="${SI_TOP_BUILDDIR:-.}/sparkinfer"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/si-cli-err.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
fails=0

# expect STATUS PATTERN -- ARGS...: exit status STATUS (or "nonzero"), and
# stderr matching the grep pattern PATTERN.
expect() {
    want=$1; pat=$2; shift 3
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
    st=$?
    ok=1
    if [ "$want" = nonzero ]; then [ "$st" -ne 0 ] || ok=0; else [ "$st" -eq "$want" ] || ok=0; fi
    grep -q -e "$pat" "$TMP/err" || ok=0
    if [ "$ok" -ne 1 ]; then
        echo "FAIL: sparkinfer $* -> status $st (want $want), stderr:"; sed 's/^/    /' "$TMP/err"
        fails=$((fails + 1))
    else
        echo "ok: sparkinfer $* -> $st: $(head -n 1 "$TMP/err")"
    fi
}

expect 1 "$TMP/absent.gguf" -- info "$TMP/absent.gguf"
printf 'GGUF\003\000\000\000' >"$TMP/short.gguf"
expect 1 "short.gguf" -- info "$TMP/short.gguf"
printf 'this is not a gguf file at all, it is text' >"$TMP/text.gguf"
expect 1 "text.gguf" -- info --json "$TMP/text.gguf"
expect 2 "no file" -- info
expect 2 "unknown option '--bogus'" -- info --bogus x.gguf

expect 2 "unknown architecture 'llama'" -- mkmodel --arch llama --preset tiny -o "$TMP/x.gguf"
expect 2 "unknown preset '70b'" -- mkmodel --preset 70b -o "$TMP/x.gguf"
expect 2 "unknown type mix 'q4_0'" -- mkmodel --preset tiny --quant q4_0 -o "$TMP/x.gguf"
expect 2 "-o OUT.gguf is required" -- mkmodel --preset tiny --seed 1
expect 2 "preset is required" -- mkmodel -o "$TMP/x.gguf"
expect 2 "preset '9b' is a qwen35 model" -- mkmodel --preset 9b --arch qwen35moe -o "$TMP/x.gguf"
expect 2 "layers" -- mkmodel --preset tiny --layers 0 -o "$TMP/x.gguf"
expect 2 "layers" -- mkmodel --preset tiny --layers many -o "$TMP/x.gguf"
expect 2 "seed" -- mkmodel --preset tiny --seed -3 -o "$TMP/x.gguf"
expect 2 "fewer than" -- mkmodel --preset tiny --vocab-size 100 -o "$TMP/x.gguf"
expect 2 "needs a value" -- mkmodel --preset tiny -o
expect 2 "unknown option '--frobnicate'" -- mkmodel --preset tiny --frobnicate -o "$TMP/x.gguf"
expect 1 "nothere.json" -- mkmodel --preset tiny --vocab "$TMP/nothere.json" -o "$TMP/x.gguf"
expect 1 "$TMP/no/such/dir/x.gguf" -- mkmodel --preset tiny -o "$TMP/no/such/dir/x.gguf"
[ ! -e "$TMP/x.gguf" ] || { echo "FAIL: a failed mkmodel left $TMP/x.gguf"; fails=$((fails + 1)); }

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all error paths ok"
exit 0
