#!/usr/bin/env bash
# bench/cluster-mode.sh: does the cluster's threads 1→1 row follow the time a cache line takes
# between the two cores? PAIRS times, GAP seconds apart: the core 0 ↔ core 1 round trip of one
# cache line (bench/pingpong.c, ns), the row (bench/cluster.sh's `threads 1 ip`, master Mpps),
# dpdk-testpmd io on net_null (one core, Mpps), and the round trip again; one line each, with the
# load average beside it; and the most a bare descriptor ring carries from core 0 to core 1
# (bench/pingpong.c's STREAM mode, the queue's protocol with no packet work, at SLOTS slots,
# default 4096: what the hand-off alone costs in that placement). The host may place the
# machine's two vCPUs close (one L3) or far apart, and moves them within seconds.
#
#   PAIRS=10 GAP=120 DUR=3 bash bench/cluster-mode.sh
#   BIN=/tmp/linerate-old bash bench/cluster-mode.sh     # another build, no cargo
#   LOCK=/tmp/my.lock bash bench/cluster-mode.sh   # each pair holds flock LOCK (other runs wait)
#   BRACKET=40 PRIO='chrt -f 1' bash bench/cluster-mode.sh
#     # the round trip changes within seconds here: instead, 40 short runs (the row for 1 s,
#     # testpmd for 3 s, taking turns), each between two short round trip measures, one line per
#     # run: what ran, round trip before, Mpps, round trip after (keep the runs whose two
#     # measures agree: the placement did not change under them)
#   PRIO='chrt -f 1' bash bench/cluster-mode.sh   # every program at real-time priority (a machine
#     that others load: without it, their work takes turns with ours on the cores and the round
#     trip is the scheduler's, in microseconds)
#
# Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-10}
GAP=${GAP:-120}
export DUR=${DUR:-3}
PP=$(mktemp /tmp/linerate-pingpong.XXXXXX)
trap 'rm -f "$PP"' EXIT
cc -O2 -pthread -o "$PP" bench/pingpong.c
CLUSTER_FNS_ONLY=1 source bench/cluster.sh
if [ -n "${BRACKET:-}" ]; then
  rt() { ${PRIO[@]+"${PRIO[@]}"} taskset -c 0,1 "$PP" 0 1 20000 3; }
  echo "| time | load | run | round trip ns before | Mpps | round trip ns after |"
  echo "|---|---|---|---|---|---|"
  for ((p = 0; p < BRACKET; p++)); do
    if [ -n "${LOCK:-}" ]; then exec 9>"$LOCK"; flock 9; fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    a=$(rt)
    if ((p % 2 == 0)); then
      what="threads 1→1 ip"; v=$(DUR=1 threads 1 ip | cut -f1)
    else
      what="testpmd"; v=$(testpmd)
    fi
    b=$(rt)
    if [ -n "${LOCK:-}" ]; then exec 9>&-; fi
    printf '| %s | %s | %s | %s | %.2f | %s |\n' "$(date -u +%H:%M:%S)" "$load" "$what" "$a" "$v" "$b"
    sleep "${BRACKET_GAP:-2}"
  done
  exit 0
fi
SLOTS=${SLOTS:-4096}
echo "| time | load | round trip ns (before) | threads 1→1 ip Mpps | testpmd Mpps | ratio | round trip ns (after) | queue drops | bare ring Mpps ($SLOTS slots) |"
echo "|---|---|---|---|---|---|---|---|---|"
for ((p = 0; p < PAIRS; p++)); do
  if [ "$p" -gt 0 ]; then sleep "$GAP"; fi
  if [ -n "${LOCK:-}" ]; then exec 9>"$LOCK"; flock 9; fi
  load=$(cut -d' ' -f1 /proc/loadavg)
  rt0=$(${PRIO[@]+"${PRIO[@]}"} taskset -c 0,1 "$PP" 0 1)
  r=$(threads 1 ip)
  tp=$(testpmd)
  rt1=$(${PRIO[@]+"${PRIO[@]}"} taskset -c 0,1 "$PP" 0 1)
  st=$(STREAM=$SLOTS ${PRIO[@]+"${PRIO[@]}"} taskset -c 0,1 "$PP" 0 1)
  printf '| %s | %s | %s | %.2f | %s | %.3f | %s | %.1f %% | %s |\n' "$(date -u +%H:%M:%S)" "$load" "$rt0" \
    "$(cut -f1 <<<"$r")" "$tp" "$(awk -v a="$(cut -f1 <<<"$r")" -v b="$tp" 'BEGIN {print a / b}')" "$rt1" "$(cut -f3 <<<"$r")" "$st"
  if [ -n "${LOCK:-}" ]; then exec 9>&-; fi
done
