#!/usr/bin/env bash
# bench/pcapng.sh [PACKETS] [RUNS]: writing pcapng against writing classic pcap with `linerate
# count`, interleaved (pcap, pcapng, pcap, pcapng, ...) so that both see the same moments of a
# noisy machine (ABBA: each format runs first half of the time).
#
#   bash bench/pcapng.sh            # 2,000,000 packets, 5 runs of each
#   bash bench/pcapng.sh 5000000 7
#   SIZE=64 bash bench/pcapng.sh   # 64 B frames: the per-packet cost
#
# The capture is made by `linerate gen` (SIZE: 64 to 1518 B frames by default, `SIZE=64` for the
# per-packet cost alone; many flows) in a private temporary folder under /dev/shm (memory: the
# disk is not measured), read once so it is in the page cache;
# each run is `linerate count -i BIG.pcap -q -w OUT.pcap` or `-w OUT.pcapng` into the same folder,
# then the same two to /dev/null (`--format pcap|pcapng`: the writer's CPU alone). Prints wall
# seconds per run, best and median, Mpps and pcapng/pcap (goal: pcapng ≥ 0.9× pcap's rate).
# Needs no root. Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
PKTS=${1:-2000000}
RUNS=${2:-5}
SIZE=${SIZE:-64-1518}
cargo build --release -q -p linerate-cli
LR=$PWD/target/release/linerate
D=$(mktemp -d /dev/shm/linerate-pcapng-bench.XXXXXX)
trap 'rm -rf -- "$D"' EXIT
F=$D/big.pcap
"$LR" gen -o "$F" -c "$PKTS" --size "$SIZE" --flows 1000 -q >/dev/null
cat "$F" >/dev/null
echo "## pcapng vs pcap writing ($(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "Input: $PKTS packets, $(du -h "$F" | cut -f1) (\`linerate gen --size $SIZE --flows 1000\`), in /dev/shm; $RUNS runs each, interleaved."
echo

secs() { # command... -> wall seconds
  local s e
  s=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  e=$(date +%s.%N)
  python3 -c "print(f'{$e-$s:.3f}')"
}
stats() { sort -g | awk '{a[NR]=$1} END {printf "%s %s", a[1], a[int((NR+1)/2)]}'; }

row() { # label out_pcap out_pcapng extra_args...
  local label=$1 o1=$2 o2=$3; shift 3
  local a=() b=() k
  # ABBA order, each output removed right after its run: this VM returns freed memory to its
  # host (virtio-balloon free page reporting), and a run that has to fault it back in is up to 4x
  # slower, so a fixed order (pcap always right after the removal) biased the result.
  for ((k = 0; k < RUNS; k++)); do
    if ((k % 2 == 0)); then
      a+=("$(secs "$LR" count -i "$F" -q -w "$o1" "$@" --format pcap)")
      rm -f -- "$D/out.pcap"
      b+=("$(secs "$LR" count -i "$F" -q -w "$o2" "$@" --format pcapng)")
      rm -f -- "$D/out.pcapng"
    else
      b+=("$(secs "$LR" count -i "$F" -q -w "$o2" "$@" --format pcapng)")
      rm -f -- "$D/out.pcapng"
      a+=("$(secs "$LR" count -i "$F" -q -w "$o1" "$@" --format pcap)")
      rm -f -- "$D/out.pcap"
    fi
  done
  read -r ab am <<<"$(printf '%s\n' "${a[@]}" | stats)"
  read -r bb bm <<<"$(printf '%s\n' "${b[@]}" | stats)"
  python3 - "$label" "$PKTS" "$ab" "$am" "$bb" "$bm" "${a[*]}" "${b[*]}" <<'PY'
import sys
label, n, ab, am, bb, bm, ra, rb = sys.argv[1:]
n, ab, am, bb, bm = int(n), float(ab), float(am), float(bb), float(bm)
print(f"| {label} | pcap | {ab:.3f} | {am:.3f} | {n/ab/1e6:.2f} | {ra} |")
print(f"| {label} | pcapng | {bb:.3f} | {bm:.3f} | {n/bb/1e6:.2f} | {rb} |")
print(f"| {label} | pcapng/pcap rate | {ab/bb:.2f}× | {am/bm:.2f}× | | |")
PY
  . bench/lib.sh
  goal "pcapng write, $SIZE B, $label (best)" "$(python3 -c "print($PKTS/$bb)")" "linerate pcap write" "$(python3 -c "print($PKTS/$ab)")" 0.9 pps
}

echo "| output | format | best s | median s | Mpps (best) | runs (s) |"
echo "|---|---|---|---|---|---|"
row "file in /dev/shm" "$D/out.pcap" "$D/out.pcapng"
row "/dev/null" /dev/null /dev/null
