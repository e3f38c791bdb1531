# tests/cli/lib.sh — sourced (`. "$(dirname "$0")/lib.sh"`) by the CLI
# test scripts that run the built binary with this build's plugins: BIN,
# SPARKINFER_CONFIG (the uninstalled config, whatever the environment
# names), TMP (a fresh directory, removed on exit; SI_CLI_TAG names it),
# ok / fail (fail counts into $fails) and finish (the summary and the
# script's exit status).
set -u
BIN="${SI_TOP_BUILDDIR:-.}/sparkinfer"
SPARKINFER_CONFIG="${SI_TOP_BUILDDIR:-.}/sparkinfer-uninstalled.ini"
export SPARKINFER_CONFIG
TMP=$(mktemp -d "${TMPDIR:-/tmp}/si-cli-${SI_CLI_TAG:-t}.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
fails=0

ok()   { echo "ok: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

finish() {
    echo "$fails failure(s)"
    [ "$fails" -eq 0 ] && exit 0
    exit 1
}
