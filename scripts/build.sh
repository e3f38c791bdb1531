#!/bin/sh
# Configures (once) and builds sparkinfer out of tree in ${BUILD_DIR:-build}.
# Extra configure arguments: CONFIGURE_ARGS="...".
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/deps.sh"
if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
    (cd "$top" && autoreconf -fi >/dev/null)
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ]; then
    # CONFIGURE_ARGS may hold quoted words (CFLAGS='-O1 -g'): eval keeps them.
    eval "\"\$top/configure\" -q $CONFIGURE_ARGS"
fi
make -j"$(nproc)"
