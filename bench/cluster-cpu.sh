#!/usr/bin/env bash
# bench/cluster-cpu.sh BIN...: the cluster master's CPU time per packet it received, for
# several builds rotated round by round, on the threads 1->N row of bench/cluster.sh (built-in
# source, master on core 0, consumers on core 1). The master is the process's main thread: its
# time on a CPU is read from /proc/PID/task/PID/schedstat every 10 ms while it runs (the last
# 10 ms and the exit are missed, the start-up is counted). On a machine shared with other work
# this moves less than Mpps (which is mostly the master's share of its core), though a starved
# consumer still shifts the mix (drops cost the master less than deliveries): read the drop
# column too. Prints one line per run: build index, CPU ns/packet, wall Mpps, master CPU ms,
# drop %.
#
#   ROUNDS=7 DUR=2 bash bench/cluster-cpu.sh /tmp/lr-main/linerate target/release/linerate
#   MODE=fanout N=2 bash bench/cluster-cpu.sh OLD NEW
#
# Never run in CI.
set -uo pipefail
DUR=${DUR:-2}; ROUNDS=${ROUNDS:-7}; MODE=${MODE:-ip}; N=${N:-1}
B=("$@")
[ ${#B[@]} -gt 0 ] || { echo "usage: bench/cluster-cpu.sh BIN..." >&2; exit 2; }
command -v jq >/dev/null || { echo "needs jq" >&2; exit 2; }
nb=${#B[@]}
cores="0:"; for ((i=0;i<N;i++)); do cores+="1,"; done; cores=${cores%,}
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%MZ) mode $MODE n $N"
echo "# build cpu_ns/pkt wall_Mpps master_cpu_ms drop%"
for ((r=0;r<ROUNDS;r++)); do
  for ((j=0;j<nb;j++)); do
    k=$(( (r+j)%nb ))
    out=$(mktemp)
    "${B[$k]}" balance --threads -i source -n "$N" -m "$MODE" -t "$DUR" -g "$cores" --json --quiet >"$out" &
    p=$!; last=0
    while kill -0 $p 2>/dev/null; do
      v=$(cut -d' ' -f1 /proc/$p/task/$p/schedstat 2>/dev/null) && [ -n "$v" ] && last=$v
      sleep 0.01
    done
    wait $p
    read -r rx el del <<<"$(jq -r 'select(.type=="summary")|"\(.rx) \(.elapsed_ms) \(.delivered)"' "$out")"
    awk -v k=$k -v c=$last -v rx=$rx -v el=$el -v d=$del 'BEGIN{printf "%d %.2f %.2f %.2f %.1f\n", k, c/rx, rx/el/1000, c/1e6, 100*(rx-d)/rx}'
    rm -f "$out"
  done
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%MZ)"
