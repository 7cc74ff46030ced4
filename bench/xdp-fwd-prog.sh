#!/usr/bin/env bash
# bench/xdp-fwd-prog.sh [COMMIT...]: the cost of fwd's kernel-engine XDP program itself, per
# frame, for bpf/xdp_fwd.c of each COMMIT (and of the working tree), next to an empty XDP_DROP
# program: each is built with BTF, loaded with bpftool, configured (l2fwd MAC rewrite, output
# port 1) and run with BPF_PROG_RUN on a 64 B frame 20 M times, three rounds interleaved.
# The DEVMAP stays empty (the test run does not redirect), so every variant takes its drop path
# after the same lookups, rewrite and counters. Needs root, clang-14 and bpftool; mounts a bpffs
# on /sys/fs/bpf for the run if none is there (and unmounts it). By hand, not in CI.
#
#   sudo bash bench/xdp-fwd-prog.sh 217e01b
set -euo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d /tmp/linerate-xdpprog.XXXXXX)
FS=/sys/fs/bpf
MOUNTED=
cleanup() {
  rm -rf "$FS"/lrprog$$* 2>/dev/null || true
  [ -n "$MOUNTED" ] && umount "$FS"
  rm -rf -- "$W"
}
trap cleanup EXIT
mkdir -p "$FS"
if ! mountpoint -q "$FS"; then mount -t bpf bpf "$FS"; MOUNTED=1; fi
build() { # source object
  clang-14 -O2 -g -target bpf -I"/usr/include/$(uname -m)-linux-gnu" -c "$1" -o "$2"
}
names=(xdp_drop)
build bpf/xdp_drop.c "$W/xdp_drop.o"
for c in "$@"; do
  git show "$c:bpf/xdp_fwd.c" >"$W/fwd-$c.c"
  build "$W/fwd-$c.c" "$W/fwd-$c.o"
  names+=("fwd-$c")
done
build bpf/xdp_fwd.c "$W/fwd-worktree.o"
names+=(fwd-worktree)
# lr_fwd_cfg value: port 0, out 1, flags 1 (rewrite), dst, src. Key: 1 (lo's ifindex, the
# ingress of a test run) for the older hash-keyed map, 0 for the one-entry array.
V="00 00 00 00 01 00 00 00 01 00 00 00 02 00 00 00 00 01 02 00 00 00 00 02"
for n in "${names[@]}"; do
  bpftool prog load "$W/$n.o" "$FS/lrprog$$-$n" type xdp pinmaps "$FS/lrprog$$-maps-$n"
  m="$FS/lrprog$$-maps-$n/lr_fwd_cfg"
  if [ -e "$m" ]; then
    key="00 00 00 00"
    bpftool map show pinned "$m" | grep -q ": hash " && key="01 00 00 00"
    bpftool map update pinned "$m" key hex $key value hex $V any
  fi
done
python3 -c "open('$W/pkt.bin','wb').write(bytes.fromhex('020000000001' '0200000000ff' '86dd') + bytes(50))"
echo "## fwd's kernel-engine XDP program, ns per frame (BPF_PROG_RUN, 20 M runs each; $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1 /proc/loadavg))"
echo
echo "| program | round 1 | round 2 | round 3 |"
echo "|---|---|---|---|"
declare -A R
for r in 1 2 3; do
  for n in "${names[@]}"; do
    R[$n]+=" $(bpftool prog run pinned "$FS/lrprog$$-$n" data_in "$W/pkt.bin" repeat 20000000 |
      sed -n 's/.*duration (average): \([0-9]*\)ns.*/\1/p') |"
  done
done
for n in "${names[@]}"; do echo "| $n |${R[$n]}"; done
