#!/bin/sh
# tests/cli/info_text.sh — the text reports of `sparkinfer mkmodel --plan` and
# `sparkinfer info` on generated models and on llama-2-tiny-random.gguf.
set -u
BIN="${SI_TOP_BUILDDIR:-.}/sparkinfer"
SRC="${SI_TOP_SRCDIR:-.}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/si-cli-info.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
fails=0

# has FILE PATTERN: FILE has a line matching the extended regex PATTERN
has() {
    if grep -E -q -e "$2" "$1"; then
        echo "ok: $(basename "$1") has /$2/"
    else
        echo "FAIL: $(basename "$1") lacks /$2/"
        fails=$((fails + 1))
    fi
}

run() { # run OUTFILE ARGS...: must exit 0
    out=$1; shift
    if ! "$BIN" "$@" >"$out" 2>"$TMP/err"; then
        echo "FAIL: sparkinfer $* failed:"; sed 's/^/    /' "$TMP/err"
        fails=$((fails + 1))
    fi
}

# --plan of the real presets
run "$TMP/plan9b" mkmodel --preset 9b --plan
has "$TMP/plan9b" '^token_embd\.weight +q4_K +\[4096, 248320\] +572129280$'
has "$TMP/plan9b" '^blk\.3\.attn_v\.weight +q6_K +\[4096, 1024\]'
has "$TMP/plan9b" '^blk\.7\.attn_v\.weight +q4_K +\[4096, 1024\]'
has "$TMP/plan9b" '^blk\.9\.attn_qkv\.weight +q6_K +\[4096, 8192\]'
has "$TMP/plan9b" '^blk\.10\.attn_qkv\.weight +q4_K +\[4096, 8192\]'
has "$TMP/plan9b" '^blk\.27\.ffn_down\.weight +q6_K +\[12288, 4096\]'
has "$TMP/plan9b" '^blk\.0\.ssm_a +f32 +\[32\]'
has "$TMP/plan9b" '^output\.weight +q6_K +\[4096, 248320\]'
has "$TMP/plan9b" '^# total: 427 tensors, 5[0-9]{9} bytes'
run "$TMP/plan35" mkmodel --preset 35b-a3b --plan
has "$TMP/plan35" '^blk\.0\.ffn_down_exps\.weight +q5_K +\[512, 2048, 256\]'
has "$TMP/plan35" '^blk\.39\.attn_q\.weight +q8_0 +\[2048, 8192\]'
has "$TMP/plan35" '^# f32 +301 tensors'
has "$TMP/plan35" '^# total: 733 tensors'
[ ! -e "$TMP/plan.gguf" ] || { echo "FAIL: --plan wrote a file"; fails=$((fails + 1)); }

# info on a generated model
run "$TMP/mk" mkmodel --preset tiny --seed 3 -o "$TMP/tiny.gguf"
has "$TMP/mk" '^wrote .*tiny\.gguf: tiny qwen35 f32, 109 tensors'
run "$TMP/info" info "$TMP/tiny.gguf"
has "$TMP/info" '^architecture: qwen35$'
has "$TMP/info" '^format: +GGUF v3, alignment 32'
has "$TMP/info" 'embedding length \(H\) +64$'
has "$TMP/info" 'layers \(block_count - nextn\) +8$'
has "$TMP/info" 'full-attention layers +2: 3 7$'
has "$TMP/info" 'GDN value heads \(Hv\) +4$'
has "$TMP/info" 'rope sections +\[i32 x 4\] 3, 3, 2, 0$'
has "$TMP/info" 'RMS norm eps +1e-06$'
has "$TMP/info" '^  qwen35\.ssm\.state_size +u32 +16$'
has "$TMP/info" '^  tokenizer\.ggml\.tokens +array +\[string x [0-9]+\] "!", "\\"", "#", \.\.\.$'
has "$TMP/info" '^  tokenizer\.ggml\.pre +string +"qwen35"$'
has "$TMP/info" '^tensors: 109$'
has "$TMP/info" ' blk\.3\.attn_q\.weight +f32 +\[64, 256\] +65536 '
has "$TMP/info" '^  f32 +109 tensors'
has "$TMP/info" '^total: 109 tensors'

run "$TMP/mk2" mkmodel --preset 9b --layers 2 --vocab-size 4096 -o "$TMP/9b.gguf"
run "$TMP/info2" info "$TMP/9b.gguf"
has "$TMP/info2" 'full-attention layers +0:$'
has "$TMP/info2" 'vocab rows +4096$'
has "$TMP/info2" ' blk\.1\.attn_qkv\.weight +q6_K +\[4096, 8192\] +27525120 '
has "$TMP/info2" '^  q4_K +15 tensors'

# a real third-party file
LLAMA="$SRC/tests/data/gguf/llama-2-tiny-random.gguf"
[ -r "$LLAMA" ] || LLAMA="${SI_SHARED_DATA:-/nonexistent}/gguf/ollama/llama-2-tiny-random.gguf"
if [ -r "$LLAMA" ]; then
    run "$TMP/llama" info "$LLAMA"
    has "$TMP/llama" '^architecture: llama$'
    has "$TMP/llama" '^metadata: 18 keys$'
    has "$TMP/llama" '^tensors: 12$'
    has "$TMP/llama" '^  embedding_length +8$'
    has "$TMP/llama" '^  tokenizer\.ggml\.scores +array +\[f32 x 32000\]'
    has "$TMP/llama" '^  f16 +9 tensors'
    has "$TMP/llama" '^  f32 +3 tensors'
else
    echo "skip: llama-2-tiny-random.gguf not found"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "all info/plan checks ok"
exit 0
