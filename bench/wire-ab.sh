#!/usr/bin/env bash
# bench/wire-ab.sh [RUNS] [PACKETS]: a writer thread feeding a cluster through a mem: wire
# (examples/cluster_wire.rs), the wire over the segment's frames ("share": no copy) against the
# wire opened before the master ("copy": the master copies each packet into the segment, as
# every mem: wire input did before), interleaved share, copy, share, copy, ... Prints every run
# and, per way, the best and median of the delivered rate. Never run in CI.
#
#   RUNS=7 bash bench/wire-ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-7}
PKTS=${2:-5000000}
nice cargo build --release -q -p linerate --example cluster_wire
EX=target/release/examples/cluster_wire
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "## mem: wire into a cluster, share vs copy ($(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), $PKTS packets, $RUNS runs each, interleaved)"
echo
echo '```'
for ((k = 0; k < RUNS; k++)); do
  for m in share copy; do
    timeout 120 "$EX" "$PKTS" "$m" 2>/dev/null | tee -a "$out"
  done
done
echo '```'
echo
for m in share copy; do
  grep "^$m " "$out" | awk -v m="$m" '{for (i = 1; i < NF; i++) if ($i == "delivered_mpps") print $(i + 1)}' \
    | sort -g | awk -v m="$m" '{a[NR] = $1} END {printf "%s: delivered Mpps best %.2f, median %.2f\n", m, a[NR], a[int((NR + 1) / 2)]}'
done
