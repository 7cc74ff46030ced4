#!/usr/bin/env bash
# bench/flows-ab.sh OLD NEW [ROUNDS] [PACKETS] [FLOWS]: `linerate flows` on a capture file, an
# older build against a newer one, with --threads 1 and 2, interleaved round by round (OLD 1,
# OLD 2, NEW 1, NEW 2 in each round). The capture is bench/flows.sh's (made once by
# bench/mkflows.py in bench/out/, read from the page cache). Per run: wall seconds and the CPU
# seconds of the whole process (user + system, every thread); then each build's medians with
# the spread (min-max), and 2 threads' speed over one thread's (median wall over median wall).
# On a machine others are using, run it in a session of its own with a higher autogroup share:
#   setsid bash -c 'echo -15 > /proc/$$/autogroup; bash bench/flows-ab.sh OLD NEW 7'
# (nice does not help: the kernel shares the CPU between sessions first).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 ROUNDS=${3:-5} PKTS=${4:-5000000} FLOWS=${5:-100000}
CAP=bench/out/flows-$PKTS-$FLOWS.pcap
mkdir -p bench/out
[ -f "$CAP" ] || { python3 bench/mkflows.py "$CAP.tmp" "$PKTS" "$FLOWS" && mv "$CAP.tmp" "$CAP"; }
cat "$CAP" >/dev/null
declare -A WALL CPU
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    for th in 1 2; do
      read -r w u s < <(/usr/bin/time -f "%e %U %S" "$bin" flows -i "$CAP" --threads $th \
        -w /dev/null -q 2>&1 >/dev/null | tail -n 1)
      c=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
      echo "round $r $b --threads $th: wall $w s, cpu $c s"
      WALL[$b$th]+=" $w"; CPU[$b$th]+=" $c"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
stats() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { printf "%s (%s-%s)", a[int((NR + 1) / 2)], a[1], a[NR] }'; }
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "| build | threads | wall s, median (min-max) | cpu s, median (min-max) | 2 / 1 (median wall) |"
echo "|---|---|---|---|---|"
for b in old new; do
  for th in 1 2; do
    ratio=""
    [ $th = 2 ] && ratio=$(awk -v a="$(med "${WALL[${b}1]}")" -v b="$(med "${WALL[${b}2]}")" 'BEGIN { printf "%.2fx", a / b }')
    echo "| $b | $th | $(stats "${WALL[$b$th]}") | $(stats "${CPU[$b$th]}") | $ratio |"
  done
done
