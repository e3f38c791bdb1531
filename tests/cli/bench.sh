#!/bin/sh
# tests/cli/bench.sh — `sparkinfer bench` on tiny generated models: the
# table has one row per measurement, the last line is JSON with the
# documented keys and positive timings, rows that do not fit the context
# are skipped with a reason, and bad usage exits 2 naming the option.
# Structure only: a test never asserts a time.
SI_CLI_TAG=bench
. "$(dirname "$0")/lib.sh"
PY=$(command -v python3 || true)

# has FILE PATTERN: FILE has a line matching the extended regex PATTERN
has() {
    if grep -E -q -e "$2" "$1"; then ok "$(basename "$1") has /$2/"; else fail "$(basename "$1") lacks /$2/"; fi
}

# count FILE PATTERN N: exactly N lines match
count() {
    c=$(grep -E -c -e "$2" "$1")
    if [ "$c" -eq "$3" ]; then ok "$(basename "$1"): $3 lines /$2/"; else fail "$(basename "$1"): $c lines /$2/, want $3"; fi
}

# json FILE PYEXPR: the last line of FILE is JSON and PYEXPR (over j) holds.
# Without python3 only the keys are grepped.
json() {
    tail -n 1 "$1" >"$TMP/last.json"
    if [ -n "$PY" ]; then
        if "$PY" -c 'import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$TMP/last.json" "$2"; then
            ok "$(basename "$1") JSON: $2"
        else
            fail "$(basename "$1") JSON fails: $2"; sed 's/^/    /' "$TMP/last.json"
        fi
    else
        for k in '"bench":"sparkinfer"' '"results":\[' '"n_vocab":' '"backend":' '"hostname":' '"nproc":'; do
            has "$TMP/last.json" "$k"
        done
    fi
}

# run OUT ARGS...: sparkinfer bench must exit 0
run() {
    out=$1; shift
    if "$BIN" bench "$@" >"$out" 2>"$TMP/err"; then ok "bench $*"; else
        fail "sparkinfer bench $* exited $?:"; sed 's/^/    /' "$TMP/err"
    fi
}

# usage ERRPATTERN ARGS...: must exit 2 with a message matching ERRPATTERN
usage() {
    pat=$1; shift
    "$BIN" bench "$@" >/dev/null 2>"$TMP/err"
    rc=$?
    if [ "$rc" -eq 2 ] && grep -E -q -e "$pat" "$TMP/err"; then ok "bench $* -> 2 /$pat/"; else
        fail "bench $*: exit $rc (want 2), stderr:"; sed 's/^/    /' "$TMP/err"
    fi
}

"$BIN" mkmodel --arch qwen35 --preset tiny -o "$TMP/dense.gguf" >/dev/null || { echo "mkmodel failed"; exit 99; }
"$BIN" mkmodel --arch qwen35moe --preset tiny -o "$TMP/moe.gguf" >/dev/null || { echo "mkmodel failed"; exit 99; }

ROW='[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9.]+-[0-9.]+( +floor [0-9.]+ MB/step.*)?$'   # median s, tok/s, min-max[, floor]
SMALL='--ctx 16,64 --pp 32 --tg 4 --bs 1,2 --reps 2'
POSITIVE='all(r["median_s"] > 0 and r["tok_s"] > 0 and r["min_s"] <= r["median_s"] <= r["max_s"] and r["reps"] == 2 for r in j["results"])'

for m in dense moe; do
    # shellcheck disable=SC2086
    run "$TMP/$m.out" -m "$TMP/$m.gguf" $SMALL
    has "$TMP/$m.out" '^kind +ctx/len +bs +median s +tok/s +min-max tok/s$'
    has "$TMP/$m.out" "^pp +32 +1 +$ROW"
    has "$TMP/$m.out" "^tg +16 +1 +$ROW"
    has "$TMP/$m.out" "^tg +16 +2 +$ROW"
    has "$TMP/$m.out" "^tg +64 +1 +$ROW"
    has "$TMP/$m.out" "^tg +64 +2 +$ROW"
    count "$TMP/$m.out" '^(pp|tg) ' 5
    count "$TMP/$m.out" '^\{' 1
    json "$TMP/$m.out" 'j["bench"] == "sparkinfer" and j["n_vocab"] > 0 and j["backend"] and j["nproc"] >= 1 and j["hostname"] and len(j["results"]) == 5'
    json "$TMP/$m.out" '[(r["kind"], r.get("len", r.get("ctx")), r["bs"]) for r in j["results"]] == [("pp", 32, 1), ("tg", 16, 1), ("tg", 16, 2), ("tg", 64, 1), ("tg", 64, 2)]'
    json "$TMP/$m.out" "$POSITIVE"
    # the sweep provisions what it needs: 2 sequences, 64 + 4 x (1 + 2) tokens
    json "$TMP/$m.out" 'j["n_seq"] == 2 and j["n_ctx"] >= 76 and j["config_overrides"] == []'
done
has "$TMP/dense.out" '"arch":"qwen35"'
has "$TMP/moe.out" '"arch":"qwen35moe"'

# The memory floor (--bw): bytes per step grow with the depth (KV) and the
# batch; MoE experts are shared by the batch, so 2 sequences cost less than
# twice one; floor tok/s = bs * bw / bytes and the fraction is tok/s over it.
for m in dense moe; do
    run "$TMP/$m.bw" -m "$TMP/$m.gguf" --ctx 16,64 --no-pp --tg 2 --bs 1,2 --reps 2 --bw 100 --json-only
    json "$TMP/$m.bw" 'j["bw_gbps"] == 100 and all(r["floor_bytes"] > 0 and abs(r["floor_tok_s"] - r["bs"] * 100e9 / r["floor_bytes"]) < 1e-6 * r["floor_tok_s"] and abs(r["floor_frac"] - r["tok_s"] / r["floor_tok_s"]) < 1e-9 for r in j["results"])'
    json "$TMP/$m.bw" '(lambda f: f[(64, 1)] > f[(16, 1)] and f[(16, 2)] > f[(16, 1)] and f[(16, 2)] < 2 * f[(16, 1)])({(r["ctx"], r["bs"]): r["floor_bytes"] for r in j["results"]})'
done

# -v shows the plugins' INFO lines although the config says log_level = warn
"$BIN" bench -m "$TMP/dense.gguf" -v --no-pp --ctx 8 --bs 1 --tg 2 --reps 1 >/dev/null 2>"$TMP/verbose" ||
    fail "bench -v exited non-zero"
has "$TMP/verbose" '^sparkinfer\[[a-z0-9_]+\]: info: '

# A/B through --set, --refill, --json-only: the override is echoed
run "$TMP/ab.out" -m "$TMP/moe.gguf" --ctx 8 --pp 16 --tg 2 --bs 2 --reps 2 --warmup 0 --refill \
    --json-only --set backend.cpu.moe=per_token
count "$TMP/ab.out" '' 1
json "$TMP/ab.out" 'j["config_overrides"] == ["backend.cpu.moe=per_token"] and j["refill"] is True and j["warmup"] == 0 and len(j["results"]) == 2'
json "$TMP/ab.out" "$POSITIVE"

# What does not fit the context is skipped with the reason; the rest runs
run "$TMP/fit.out" -m "$TMP/dense.gguf" -c 40 --ctx 8,64 --pp 16,100 --tg 2 --bs 1 --reps 2
has "$TMP/fit.out" "^pp +16 +1 +$ROW"
has "$TMP/fit.out" '^pp +100 +1 +skipped: 100 tokens exceed the context of 40'
has "$TMP/fit.out" "^tg +8 +1 +$ROW"
has "$TMP/fit.out" '^tg +64 +1 +skipped: .*beyond the context of 40'
json "$TMP/fit.out" 'j["n_ctx"] == 40 and ["skipped" in r for r in j["results"]] == [False, True, False, True]'
json "$TMP/fit.out" 'all(r["tok_s"] > 0 for r in j["results"] if "skipped" not in r)'
"$BIN" bench -m "$TMP/dense.gguf" -c 8 --pp 16 --no-tg --reps 1 >/dev/null 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q 'every measurement was skipped' "$TMP/err"; then ok "all skipped -> 1"; else
    fail "all skipped: exit $rc"; fi

# Bad usage: exit 2, the message names the option
usage '--ctx .12,,x.'  -m "$TMP/dense.gguf" --ctx 12,,x
usage '--ctx .12,x.: item .x.' -m "$TMP/dense.gguf" --ctx 12,x
usage '--pp .,4.'      -m "$TMP/dense.gguf" --pp ,4
usage '--bs .0.'       -m "$TMP/dense.gguf" --bs 0
usage '--reps .0.'     -m "$TMP/dense.gguf" --reps 0
usage '--tg .0.'       -m "$TMP/dense.gguf" --tg 0
usage '--warmup .-1.'  -m "$TMP/dense.gguf" --warmup -1
usage '--pp needs a value' -m "$TMP/dense.gguf" --pp
usage 'nothing to measure' -m "$TMP/dense.gguf" --no-pp --no-tg
usage 'no model given' --ctx 16
usage "unknown option '--frobnicate'" -m "$TMP/dense.gguf" --frobnicate
"$BIN" bench --help >"$TMP/help" 2>&1 || fail "bench --help exited non-zero"
has "$TMP/help" '^usage: sparkinfer bench -m MODEL\.gguf'

finish
