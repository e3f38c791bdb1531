#!/bin/sh
# tests/cli/device_sampling.sh — `sparkinfer run` on tiny generated models
# gives byte-identical output with decode-step sampling on the backend
# (SI_OP_TOPK, [runtime] device_sampling = true) and with every logits row
# downloaded (false), for greedy, top-k with and without top-p / min-p,
# penalties, and settings the top-K path cannot serve (which must fall back
# to the full rows).  The -v log says which path each run took.
SI_CLI_TAG=ds
. "$(dirname "$0")/lib.sh"

mk() { # mk NAME ARGS...
    name=$1; shift
    "$BIN" mkmodel --preset tiny "$@" -o "$TMP/$name.gguf" >/dev/null 2>"$TMP/err" ||
        { fail "mkmodel $*"; sed 's/^/    /' "$TMP/err"; }
}

# same MODEL PATH SAMPLING...: identical stdout with the path on and off;
# PATH (topk|full) is the one the device_sampling = true run must take.
same() {
    model=$1; want=$2; shift 2
    for ds in true false; do
        if ! "$BIN" run -m "$TMP/$model.gguf" -p "The quick brown fox" -n 24 -t 2 -v \
                --set runtime.device_sampling=$ds "$@" >"$TMP/out.$ds" 2>"$TMP/err.$ds"; then
            fail "$model $* (device_sampling=$ds) exited non-zero:"; sed 's/^/    /' "$TMP/err.$ds"
            return
        fi
    done
    if cmp -s "$TMP/out.true" "$TMP/out.false"; then ok "$model $*: same text"; else
        fail "$model $*: the text differs with device sampling"
        od -c "$TMP/out.true" | head -4; od -c "$TMP/out.false" | head -4
    fi
    case $want in
        topk) pat="sampling from the backend's top" ;;
        *)    pat="decode: full logits rows" ;;
    esac
    if grep -q "$pat" "$TMP/err.true"; then ok "$model $*: $want path"; else
        fail "$model $*: not the $want path"; grep decode "$TMP/err.true" | sed 's/^/    /'
    fi
    [ -s "$TMP/out.true" ] || fail "$model $*: no output"
}

mk dense --seed 3
mk moe --arch qwen35moe --quant q8_0 --seed 5

same moe topk --temp 0
same moe topk --temp 1 --top-k 20 --top-p 0.9 --seed 3
same moe topk --temp 0.9 --top-k 12 --repeat-penalty 1.3 --frequency-penalty 0.2 \
    --presence-penalty 0.4 --repeat-last-n 24 --seed 5
for m in dense; do
    same $m topk --temp 0
    same $m topk --temp 0 --repeat-penalty 1.5 --repeat-last-n 16
    same $m topk --temp 0.8 --top-k 5 --top-p 1 --seed 7
    same $m topk --temp 1 --top-k 20 --top-p 0.9 --seed 3
    same $m topk --temp 1.3 --top-k 40 --top-p 0.95 --min-p 0.05 --seed 11
    same $m topk --temp 0.9 --top-k 12 --repeat-penalty 1.3 --frequency-penalty 0.2 \
        --presence-penalty 0.4 --repeat-last-n 24 --seed 5
    same $m topk --temp 1 --top-k 1 --seed 2
    same $m topk --temp 1 --top-k 255 --top-p 0.8 --seed 4
    same $m full --temp 1 --top-k 0 --top-p 0.9 --seed 9
    same $m full --temp 1 --top-k 256 --seed 9
done

finish
