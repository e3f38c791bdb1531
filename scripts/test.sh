#!/bin/sh
# Builds sparkinfer and runs every test (`make check`); GPU tests SKIP
# without a GPU.  Prints the test logs of failures.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/build.sh"
cd "$build"
if ! make -j"$(nproc)" check; then
    for f in $(find . -name '*.log' ! -name config.log ! -name test-suite.log); do
        grep -q '^:test-result: FAIL\|^:test-result: ERROR' "${f%.log}.trs" 2>/dev/null && { echo "==== $f"; tail -50 "$f"; }
    done
    exit 1
fi
