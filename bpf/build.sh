#!/bin/sh
# Rebuilds linerate's BPF objects from the C sources beside this script: `bpf/build.sh` builds
# every bpf/NAME.c into bpf/NAME.o; `bpf/build.sh NAME OUT` builds bpf/NAME.c into OUT.
# Deterministic for a given clang: it compiles from bpf/ with a relative source path so that no
# directory name ends up in the object. CLANG=clang-14 picks a compiler; the committed objects
# were built with clang-14. crates/linerate/tests/xdp_object.rs checks them against the sources.
set -eu
OUTARG=${2:-}
case "$OUTARG" in /*|"") ;; *) OUTARG="$PWD/$OUTARG" ;; esac
cd "$(dirname "$0")"
CLANG=${CLANG:-clang}
build() {
	"$CLANG" -O2 -target bpf -I/usr/include/$(uname -m)-linux-gnu -c "$1.c" -o "$2"
}
if [ $# -ge 1 ]; then
	build "$1" "${OUTARG:-$1.o}"
else
	for c in *.c; do build "${c%.c}" "${c%.c}.o"; done
fi
