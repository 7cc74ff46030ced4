#!/usr/bin/env bash
# Flow-monitor benchmark: `linerate flows` (1 and 2 threads) against `argus -r` and
# `tshark -q -z conv,ip` on the same capture, in one run.
#
#   bash bench/flows.sh [PACKETS] [FLOWS]
#
# The capture (made once by bench/mkflows.py, kept in bench/out/) has PACKETS packets (default
# 5 M) in FLOWS bidirectional TCP/UDP/ICMP conversations (default 100 000), 5000 open at a time.
# Each tool reads it from the page cache (one warm-up read first); wall time is measured around
# the tool alone. tshark is ~100x slower than the others: it reads the first TSHARK_PKTS packets
# (default 500 000) and its rate is reported on those. Flows: linerate's flows created; argus:
# the flows `racluster` merges its records into; tshark: IP conversations listed.
# Prints a Markdown table for BENCHMARKS.md. Needs python3, argus (argus-server, argus-client)
# and tshark; a missing peer is reported and skipped (PEERS=0 skips both).
#
# Then the thread scaling: ROUNDS (default 5) rounds of `flows --threads 1` and `--threads 2`
# interleaved, each run's seconds, best and median, and 2 threads' rate over one thread's; with
# BEFORE=/path/to/an/older/linerate its --threads 1 (and 2) runs are interleaved too, as an A/B.
# The load average before and after is printed with the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
PKTS=${1:-5000000}
FLOWS=${2:-100000}
TSHARK_PKTS=${TSHARK_PKTS:-500000}
OUT=bench/out
mkdir -p "$OUT"
cargo build --release -q -p linerate-cli
LR=$PWD/target/release/linerate
CAP=$OUT/flows-$PKTS-$FLOWS.pcap
if [ ! -f "$CAP" ]; then
  echo "making $CAP ..." >&2
  python3 bench/mkflows.py "$CAP.tmp" "$PKTS" "$FLOWS" && mv "$CAP.tmp" "$CAP"
fi
cat "$CAP" >/dev/null

now() { date +%s.%N; }
rows=()
ARGUS_PPS=""
row() { # tool, packets, seconds, flows
  local pps fps ratio
  pps=$(awk -v p="$2" -v s="$3" 'BEGIN { printf "%.0f", p / s }')
  fps=$(awk -v f="$4" -v s="$3" 'BEGIN { printf "%.0f", f / s }')
  ratio="-"
  if [ -n "$ARGUS_PPS" ]; then ratio=$(awk -v a="$pps" -v b="$ARGUS_PPS" 'BEGIN { printf "%.1fx", a / b }'); fi
  rows+=("| $1 | $2 | $(printf %.2f "$3") | $pps | $4 | $fps | $ratio |")
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
# argus first, so the others can be given as a ratio to it.
if [ "${PEERS:-1}" != 0 ] && command -v argus >/dev/null && command -v racluster >/dev/null; then
  rm -f "$OUT/flows.argus"
  t0=$(now); argus -r "$CAP" -w "$OUT/flows.argus"; t1=$(now)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  nf=$(racluster -r "$OUT/flows.argus" -n -s proto saddr sport daddr dport - 'tcp or udp or icmp' | tail -n +2 | wc -l)
  ARGUS_PPS=$(awk -v p="$PKTS" -v s="$secs" 'BEGIN { printf "%.0f", p / s }')
  row "argus -r (3.0.8)" "$PKTS" "$secs" "$nf"
  rm -f "$OUT/flows.argus"
else
  echo "argus or racluster missing: skipped (apt-get install argus-server argus-client)" >&2
fi

for th in 1 2; do
  t0=$(now)
  "$LR" flows -i "$CAP" --threads "$th" -w /dev/null --json 2>"$OUT/flows-lr$th.json"
  t1=$(now)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  nf=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["flows"])' "$OUT/flows-lr$th.json")
  row "linerate flows --threads $th" "$PKTS" "$secs" "$nf"
  [ "$th" = 1 ] && LR1_PPS=$(awk -v p="$PKTS" -v s="$secs" 'BEGIN { printf "%.0f", p / s }')
done
. bench/lib.sh
goal "flows, 1 thread, pcap file" "$LR1_PPS" "argus -r" "$ARGUS_PPS" - pps

if [ "${PEERS:-1}" != 0 ] && command -v tshark >/dev/null; then
  n=$((TSHARK_PKTS < PKTS ? TSHARK_PKTS : PKTS))
  t0=$(now)
  tshark -n -q -z conv,ip -c "$n" -r "$CAP" >"$OUT/flows-tshark.txt" 2>/dev/null
  t1=$(now)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
  nf=$(grep -c '<->' "$OUT/flows-tshark.txt" || true)
  row "tshark -q -z conv,ip (first $n packets)" "$n" "$secs" "$nf"
else
  echo "tshark missing: skipped" >&2
fi

echo
echo "Flow monitoring, pcap file of $PKTS packets in $FLOWS flows ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg) at the end)"
echo
echo "| tool | packets | seconds | packets/s | flows | flows/s | vs argus |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"

# Thread scaling: interleaved runs (A/B with BEFORE).
ROUNDS=${ROUNDS:-5}
bins=("$LR")
[ -n "${BEFORE:-}" ] && bins+=("$BEFORE")
declare -A runs
for ((r = 1; r <= ROUNDS; r++)); do
  for b in "${bins[@]}"; do
    for th in 1 2; do
      t0=$(now)
      "$b" flows -i "$CAP" --threads "$th" -w /dev/null -q
      t1=$(now)
      runs["$b $th"]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') "
    done
  done
done
stat() { # seconds list -> "best median"
  tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.3f", v[1], m }'
}
echo
echo "Thread scaling, $ROUNDS interleaved rounds ($(nproc) cores; load before $LOAD0, after $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| binary | threads | best s | median s | Mpps (best) | 2 threads / 1 (best, median) | runs (s) |"
echo "|---|---|---|---|---|---|---|"
for b in "${bins[@]}"; do
  read -r b1 m1 <<<"$(stat "${runs["$b 1"]}")"
  read -r b2 m2 <<<"$(stat "${runs["$b 2"]}")"
  name=$b; [ "$b" = "$LR" ] && name="this build"
  for th in 1 2; do
    read -r best med <<<"$(stat "${runs["$b $th"]}")"
    ratio=""
    [ "$th" = 2 ] && ratio=$(awk -v a="$b1" -v b="$b2" -v c="$m1" -v d="$m2" 'BEGIN { printf "%.2fx, %.2fx", a / b, c / d }')
    mpps=$(awk -v p="$PKTS" -v s="$best" 'BEGIN { printf "%.2f", p / s / 1e6 }')
    echo "| $name | $th | $best | $med | $mpps | $ratio | ${runs["$b $th"]}|"
  done
done
# The goals table: 2 threads against 1, medians of the interleaved rounds (this build).
read -r _ m1 <<<"$(stat "${runs["$LR 1"]}")"
read -r _ m2 <<<"$(stat "${runs["$LR 2"]}")"
goal "flows --threads 2, pcap file (median of $ROUNDS)" "$(awk -v p="$PKTS" -v s="$m2" 'BEGIN { printf "%.0f", p / s }')" \
  "linerate flows --threads 1" "$(awk -v p="$PKTS" -v s="$m1" 'BEGIN { printf "%.0f", p / s }')" 1.6 pps
