#!/usr/bin/env bash
# bench/count-write-ab.sh OLD NEW [ROUNDS] [PACKETS]: bench/count.sh's pcap-read rows, an older
# build of linerate against a newer one and tcpdump, interleaved round by round: in each round
# `tcpdump -r F -w /dev/null`, then each build's `count -i F -q -w /dev/null` and `count -i F -q`.
# F is bench/count.sh's file (PACKETS packets of 64 B, bench/mkpcap.py, read from the page
# cache). Per run: wall ms, task-clock ms (CPU) and page faults (perf stat); then the medians,
# and each build's ratio to tcpdump (tcpdump's median wall over the build's).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 ROUNDS=${3:-7} PKTS=${4:-3000000}
F=bench/out/read-$PKTS.pcap
mkdir -p bench/out
[ -f "$F" ] || python3 bench/mkpcap.py "$F" "$PKTS"
cat "$F" >/dev/null
declare -A WALL CPU PF
one() { # key, command...
  local key=$1; shift
  local s e out
  s=$(date +%s%N)
  out=$(perf stat -x, -e task-clock,page-faults "$@" 2>&1 >/dev/null | tail -n 2)
  e=$(date +%s%N)
  local w c p
  w=$(( (e - s) / 1000000 ))
  c=$(awk -F, '/task-clock/ { printf "%.1f", $1 }' <<<"$out")
  p=$(awk -F, '/page-faults/ { print $1 }' <<<"$out")
  echo "round $r $key: wall $w ms, cpu $c ms, page faults $p"
  WALL[$key]+=" $w"; CPU[$key]+=" $c"; PF[$key]+=" $p"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  one tcpdump tcpdump -r "$F" -w /dev/null
  one old-w "$OLD" count -i "$F" -q -w /dev/null
  one new-w "$NEW" count -i "$F" -q -w /dev/null
  one old "$OLD" count -i "$F" -q
  one new "$NEW" count -i "$F" -q
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
span() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { printf "%s-%s", a[1], a[NR] }'; }
td=$(med "${WALL[tcpdump]}")
tc=$(med "${CPU[tcpdump]}")
echo "| run | wall ms, median (min-max) | cpu ms, median (min-max) | page faults | vs tcpdump (wall) | vs tcpdump (cpu) |"
echo "|---|---|---|---|---|---|"
for k in tcpdump old-w new-w old new; do
  w=$(med "${WALL[$k]}"); c=$(med "${CPU[$k]}")
  echo "| $k | $w ($(span "${WALL[$k]}")) | $c ($(span "${CPU[$k]}")) | $(med "${PF[$k]}") | $(awk -v a="$td" -v b="$w" 'BEGIN { printf "%.2fx", a / b }') | $(awk -v a="$tc" -v b="$c" 'BEGIN { printf "%.2fx", a / b }') |"
done
