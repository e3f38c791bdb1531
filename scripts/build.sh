#!/bin/sh
# Configures (once) and builds sparkinfer out of tree in ${BUILD_DIR:-build}.
# Extra configure arguments: CONFIGURE_ARGS="...".
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build}
"$top/scripts/deps.sh"
if [ ! -x "$top/configure" ] || [ -n "$(find "$top/configure.ac" "$top/m4" -name '*.m4' -newer "$top/configure" -o \
        -name configure.ac -newer "$top/configure" 2>/dev/null)" ]; then
    (cd "$top" && autoreconf -fi >/dev/null)
fi
mkdir -p "$build"
cd "$build"
if [ ! -f Makefile ]; then
    # CONFIGURE_ARGS may hold quoted words (CFLAGS='-O1 -g'): eval keeps them.
    eval "\"\$top/configure\" -q $CONFIGURE_ARGS"
fi
make -j"$(nproc)"
