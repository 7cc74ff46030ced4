#!/usr/bin/env bash
# bench/pcap-lib.sh: tcpdump through liblinerate_pcap.so against linerate count on the same
# cluster queue: `tcpdump -i cluster:ID@0 -w /dev/null` (LD_PRELOAD) vs `linerate count -i
# cluster:ID@0 -w /dev/null`, each behind its own `linerate balance -i source -n 1
# --wait-consumers -t SECONDS` master (64 B frames, unpaced: faster than either consumer, so the
# queue is never empty and the consumer runs flat out), interleaved, RUNS rounds, medians.
#
#   sudo bash bench/pcap-lib.sh [SECONDS] [RUNS]     # default 5 s, 5 rounds
#   LR=/path/linerate LIB=/path/liblinerate_pcap.so bash bench/pcap-lib.sh ...   # no build
#
# A consumer's rate is what it captured over its wall time (start to exit, its start-up
# included, a few ms); what it could not keep up with counts as ring_full on the queue
# (tcpdump's "dropped by kernel", count's drops), shown per run. By hand, never in CI.
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
RUNS=${2:-5}
if [ -z "${LR:-}" ] || [ -z "${LIB:-}" ]; then
  cargo build --release -q -p linerate-cli -p linerate-pcap || exit 1
  LR=$PWD/target/release/linerate
  LIB=$PWD/target/release/liblinerate_pcap.so
fi
B=$LR
command -v tcpdump >/dev/null || { echo "bench/pcap-lib.sh: tcpdump is not installed" >&2; exit 2; }
ID=$((420000 + $$ % 10000))
TMP=$(mktemp -d /tmp/linerate-pcap-bench.XXXXXX)
trap 'rm -rf -- "$TMP"' EXIT

one() { # tool: writes "pps captured dropped" to $TMP/res
  local tool=$1 m t0 t1 got drop
  "$B" balance -i source -c "$ID" -n 1 --wait-consumers -t "$SECS" >"$TMP/master.out" 2>&1 &
  m=$!
  for _ in $(seq 1000); do
    [ -e "/dev/shm/linerate-cluster-$ID" ] && break
    sleep 0.01
  done
  t0=$(date +%s%N)
  if [ "$tool" = tcpdump ]; then
    LD_PRELOAD=$LIB tcpdump -i "cluster:$ID@0" -w /dev/null 2>"$TMP/err" >/dev/null
    t1=$(date +%s%N)
    got=$(sed -n 's/^\([0-9]*\) packets captured.*/\1/p' "$TMP/err")
    drop=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$TMP/err")
  else
    "$B" count -i "cluster:$ID@0" -w /dev/null -q --json >"$TMP/out" 2>"$TMP/err"
    t1=$(date +%s%N)
    read -r got drop < <(python3 -c 'import json, sys
s = [j for j in map(json.loads, sys.stdin) if j.get("type") == "summary"][-1]
print(s["pkts"], s["drops"])' <"$TMP/out")
  fi
  wait "$m"
  echo "$((${got:-0} * 1000000000 / (t1 - t0))) ${got:-0} ${drop:-0}" >"$TMP/res"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "## bench/pcap-lib.sh $SECS $RUNS, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo '`LD_PRELOAD=target/release/liblinerate_pcap.so tcpdump -i cluster:ID@0 -w /dev/null` vs'
echo '`linerate count -i cluster:ID@0 -w /dev/null`, each behind `linerate balance -i source -n 1 --wait-consumers -t '"$SECS"'`'
echo
echo "| run | tcpdump pps | captured | dropped | count pps | captured | dropped |"
echo "|---|---|---|---|---|---|---|"
: >"$TMP/t"
: >"$TMP/c"
for r in $(seq "$RUNS"); do
  one tcpdump
  read -r tp tg td <"$TMP/res"
  one count
  read -r cp cg cd <"$TMP/res"
  echo "$tp" >>"$TMP/t"
  echo "$cp" >>"$TMP/c"
  echo "| $r | $tp | $tg | $td | $cp | $cg | $cd |"
done
T=$(median <"$TMP/t")
C=$(median <"$TMP/c")
echo
echo "median: tcpdump $T pps, count $C pps, ratio $(awk -v t="$T" -v c="$C" 'BEGIN {printf "%.2f", (c > 0 ? t / c : 0)}') (goal >= 0.9); load after $(cut -d' ' -f1-3 /proc/loadavg)"
