#!/bin/sh
# Rebuilds bpf/xdp_redirect.o from bpf/xdp_redirect.c. Deterministic for a given clang: run from
# bpf/ with a relative source path so that no directory name ends up in the object.
# CLANG=clang-14 bpf/build.sh to pick a compiler; the committed object was built with clang-14.
set -eu
cd "$(dirname "$0")"
CLANG=${CLANG:-clang}
OUT=${1:-xdp_redirect.o}
"$CLANG" -O2 -target bpf -I/usr/include/$(uname -m)-linux-gnu -c xdp_redirect.c -o "$OUT"
