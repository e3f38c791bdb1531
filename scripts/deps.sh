#!/bin/sh
# Installs the Debian 12 packages sparkinfer needs to build and test, when
# any is missing.  Needs root (or sudo) only when something is missing.
set -e
PKGS="build-essential autoconf automake libtool pkg-config check libinih-dev \
libutf8proc-dev libcjson-dev clang libclang-rt-14-dev python3"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "sparkinfer: installing Debian packages:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
