#!/bin/sh
# Builds sparkinfer and runs every test (`make check`); GPU tests SKIP
# without a GPU.  Prints each Check suite's summary line, and the logs of
# failing tests.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/build.sh"
cd "$build"
rc=0
make -j"$(nproc)" check || rc=$?
echo "==== Check summaries"
find tests -name '*.log' | sort | while read -r f; do
    s=$(grep -h '^[0-9]*%: Checks:' "$f" | tail -1)
    [ -n "$s" ] && echo "${f%.log}: $s"
done
if [ "$rc" -ne 0 ]; then
    find tests -name '*.trs' | while read -r t; do
        if grep -q '^:test-result: \(FAIL\|ERROR\)' "$t"; then
            echo "==== ${t%.trs}.log"
            tail -60 "${t%.trs}.log"
        fi
    done
    exit "$rc"
fi
