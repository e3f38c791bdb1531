#!/bin/sh
# tests/cli/decode_ahead.sh — `sparkinfer run` on tiny generated models of
# both families gives byte-identical text with [runtime] decode_ahead =
# true (each step queued before the previous pick is read: the model
# plugin's topk_submit / topk_collect, greedy fed on the backend, sampled
# posted by the host: topk_post) and false (one step at a time), for
# several lengths (1, 2, 3 and 40 tokens: the queue's first, second and
# steady states) and at the end of the context, in run and in chat; the
# -v log says which path each run took: ahead only without penalties,
# with device sampling on and a top-K the op can give; and `bench`'s JSON
# says decode_ahead at bs 1 for true, up to 32 sequences for batch;
# `batch` gives every prompt the same text with decode_ahead = batch.
SI_CLI_TAG=da
. "$(dirname "$0")/lib.sh"

# same MODEL AHEAD(yes|no) ARGS...: identical stdout with decode_ahead on
# and off; AHEAD says whether the run with it on must take that path
# (every step of it, for chat's turns).  CMD: run (default) or chat, whose
# turns are the lines of $TMP/turns.
CMD=run
same() {
    model=$1; want=$2; shift 2
    for da in true false; do
        if [ "$CMD" = chat ]; then
            "$BIN" chat -m "$TMP/$model.gguf" -t 2 -v --set runtime.decode_ahead=$da "$@" \
                <"$TMP/turns" >"$TMP/out.$da" 2>"$TMP/err.$da"
        else
            "$BIN" run -m "$TMP/$model.gguf" -p "The quick brown fox" -t 2 -v \
                --set runtime.decode_ahead=$da "$@" >"$TMP/out.$da" 2>"$TMP/err.$da"
        fi
        if [ $? -ne 0 ]; then
            fail "$model $* (decode_ahead=$da) exited non-zero:"; sed 's/^/    /' "$TMP/err.$da"
            return
        fi
    done
    if cmp -s "$TMP/out.true" "$TMP/out.false"; then ok "$model $*: same text"; else
        fail "$model $*: the text differs with decode ahead"
        od -c "$TMP/out.true" | head -4; od -c "$TMP/out.false" | head -4
    fi
    turns=$(grep -c "generated [0-9]* tokens" "$TMP/err.true")
    if [ "$(grep -c "decode: ahead" "$TMP/err.true")" = "$turns" ]; then got=yes; else got=no; fi
    if [ "$got" = "$want" ]; then ok "$model $*: ahead $want"; else
        fail "$model $*: ahead $got, expected $want"; grep decode "$TMP/err.true" | sed 's/^/    /'
    fi
    if grep -q "decode: ahead" "$TMP/err.false"; then fail "$model $*: ahead although decode_ahead = false"; fi
    [ -s "$TMP/out.true" ] || fail "$model $*: no output"
}

"$BIN" mkmodel --preset tiny --seed 3 -o "$TMP/dense.gguf" >/dev/null 2>&1 || fail "mkmodel dense"
"$BIN" mkmodel --preset tiny --arch qwen35moe --quant q8_0 --seed 5 -o "$TMP/moe.gguf" >/dev/null 2>&1 ||
    fail "mkmodel moe"

for m in dense moe; do
    for n in 1 2 3 40; do
        same $m yes --temp 0 -n $n
    done
    same $m yes --temp 0 -n 100 -c 32          # stops at the end of the context
    same $m no --temp 0 -n 24 --repeat-penalty 1.3 --repeat-last-n 16
    same $m yes --temp 1 --top-k 20 -n 24 --seed 3          # sampled: each token posted
    same $m yes --temp 0.8 --top-k 40 --top-p 0.9 --min-p 0.05 -n 40 --seed 11
    same $m yes --temp 1.5 --top-k 5 -n 100 -c 40 --seed 2   # posted up to the end of the context
    same $m no --temp 1 --top-k 0 --top-p 0.9 -n 8 --seed 3  # (more than the top 256: full rows)
    same $m no --temp 0 -n 24 --set runtime.device_sampling=false
done

# chat: the turn's end is fed either way ([gen] feed_stop), so the next
# turn goes on from the same context: the dense model ends each of its
# turns on an end of generation (greedy), the moe model's are cut at -n;
printf 'hi\nhow are you\ntell me more\n' >"$TMP/turns"
CMD=chat
same dense yes --temp 0 -n 64
if [ "$(grep -c "stopped at end of generation" "$TMP/err.true")" -ge 2 ]; then ok "dense chat: turns ended by the model"
else fail "dense chat: fewer than two turns ended on an end of generation (the test lost its point)"; fi
same moe yes --temp 0 -n 64
for m in dense moe; do
    same $m yes --temp 0 -n 12
done
same dense yes --temp 0 -n 64 --system "You are terse."
same moe yes --temp 0.7 --seed 4 -n 16
same dense yes --seed 4 -n 64     # the config's sampling (temp 1, top-k 20, top-p 0.95)
printf 'hi\nhow are you\n' >"$TMP/turns"
same dense yes --temp 0 -n 64 -c 56   # the second answer stops at the end of the context
CMD=run

# batch: pure decode steps queued ahead of the host's draws (decode_ahead
# = batch, the default, for any number of sequences up to 32; true for
# one) give every prompt the same text as step by step (false); the
# prompts end at different steps (end of generation, -n, the context),
# so runs of queued steps end and the slots go on to the next prompts.
# WANT: yes when the -v count of rows decoded ahead must be non-zero.
same_batch() { # same_batch MODEL WANT ARGS...
    model=$1; want=$2; shift 2
    for da in batch false; do
        if ! "$BIN" batch -m "$TMP/$model.gguf" -f "$TMP/prompts" -t 2 -v --set runtime.decode_ahead=$da "$@"                 >"$TMP/bout.$da" 2>"$TMP/berr.$da"; then
            fail "batch $model $* (decode_ahead=$da) exited non-zero:"; sed 's/^/    /' "$TMP/berr.$da"
            return
        fi
    done
    if cmp -s "$TMP/bout.batch" "$TMP/bout.false"; then ok "batch $model $*: same text"; else
        fail "batch $model $*: the text differs with decode ahead"; diff "$TMP/bout.batch" "$TMP/bout.false" | head -6
    fi
    rows=$(sed -n 's/.*decode ahead: \([0-9]*\) of .*/\1/p' "$TMP/berr.batch")
    if [ -n "$rows" ] && [ "$rows" -gt 0 ]; then got=yes; else got=no; fi
    if [ "$got" = "$want" ]; then ok "batch $model $*: ahead $want ($rows rows)"; else
        fail "batch $model $*: ahead $got, expected $want"; grep "ahead" "$TMP/berr.batch" | sed 's/^/    /'
    fi
    if ! grep -q "decode ahead: 0 of" "$TMP/berr.false"; then fail "batch $model $*: ahead although false"; fi
}
printf 'The quick brown fox\nhello\nOnce upon a time there was\na b c\nwhy\n' >"$TMP/prompts"
for m in dense moe; do
    same_batch $m yes --temp 0 -n 24 -np 3
    same_batch $m yes --temp 1 --top-k 20 -n 30 -np 4 --seed 5
    same_batch $m yes --temp 0.8 --top-k 40 --top-p 0.9 -n -1 -c 48 -np 2 --seed 9   # to the context's end
    same_batch $m no --temp 0 -n 16 -np 3 --repeat-penalty 1.3
done
same_batch dense yes -n 40 -np 5 --seed 2 --chat     # the config's sampling, chat prompts
same_batch moe no --temp 0 -n 16 -np 3 --prefill-apart --set runtime.device_sampling=false

# bench: decode_ahead = true queues bs 1 only, batch up to 32 sequences
bench_ahead() { # bench_ahead VALUE WANT_BS1 WANT_BS2 WANT_BS33
    if "$BIN" bench -m "$TMP/dense.gguf" --no-pp --ctx 16 --bs 1,2,33 --tg 4 --reps 1 -t 2 \
            --set runtime.decode_ahead=$1 >"$TMP/b.json" 2>"$TMP/b.err"; then
        if grep -q "\"bs\":1,[^}]*\"decode_ahead\":$2" "$TMP/b.json" &&
            grep -q "\"bs\":2,[^}]*\"decode_ahead\":$3" "$TMP/b.json" &&
            grep -q "\"bs\":33,[^}]*\"decode_ahead\":$4" "$TMP/b.json"
        then ok "bench decode_ahead=$1: bs 1 $2, 2 $3, 33 $4"
        else fail "bench decode_ahead=$1: JSON not as expected"; cat "$TMP/b.json"
        fi
    else
        fail "bench decode_ahead=$1 exited non-zero"; sed 's/^/    /' "$TMP/b.err"
    fi
}
bench_ahead true true false false
bench_ahead batch true true false
bench_ahead false false false false
if "$BIN" bench -m "$TMP/dense.gguf" --no-pp --ctx 16 --bs 1 --tg 4 --reps 1 -t 2 \
        --set runtime.decode_ahead=maybe >/dev/null 2>"$TMP/b.err"; then
    fail "decode_ahead = maybe was accepted"
elif grep -q "decode_ahead" "$TMP/b.err"; then ok "decode_ahead = maybe refused, naming the key"
else fail "decode_ahead = maybe: the error does not name the key"; cat "$TMP/b.err"
fi

finish
