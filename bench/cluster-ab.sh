#!/usr/bin/env bash
# bench/cluster-ab.sh OLD_BIN [NEW_BIN]: the cluster rows of bench/cluster.sh for two builds,
# interleaved (old, new, old, new, ...) so that both see the same moments of a noisy machine;
# prints each row's best and median for both, their median queue drops (a build that drops
# more does less per packet received), and testpmd's reference from the same session.
#
#   git worktree add /tmp/lr-old 38722a4 && (cd /tmp/lr-old && cargo build --release -p linerate-cli)
#   DUR=2 RUNS=3 bash bench/cluster-ab.sh /tmp/lr-old/target/release/linerate
#
# NEW_BIN defaults to target/release/linerate (built first). Every row of bench/cluster.sh;
# ONLY_ROWS (a grep -E pattern on the labels) and PRIO (a command prefix such as `chrt -f 1`)
# work as there. Never run in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/cluster-ab.sh OLD_BIN [NEW_BIN]}
NEW=${2:-}
if [ -z "$NEW" ]; then
  cargo build --release -q -p linerate-cli
  NEW=target/release/linerate
fi
DUR=${DUR:-2}
RUNS=${RUNS:-3}
BIN=$NEW
CLUSTER_FNS_ONLY=1 source bench/cluster.sh

stats() { sort -g | awk '{a[NR]=$1} END {printf "%.2f / %.2f", a[NR], a[int((NR+1)/2)]}'; }

ab() { # label cmd...
  local label=$1; shift
  local om=() oc=() od=() nm=() nc=() nd=() r k
  if [ -n "$ONLY_ROWS" ] && ! grep -Eq -- "$ONLY_ROWS" <<<"$label"; then return 0; fi
  for ((k = 0; k < RUNS; k++)); do
    BIN=$OLD; r=$("$@"); om+=("$(cut -f1 <<<"$r")"); oc+=("$(cut -f2 <<<"$r")"); od+=("$(cut -f3 <<<"$r")")
    BIN=$NEW; r=$("$@"); nm+=("$(cut -f1 <<<"$r")"); nc+=("$(cut -f2 <<<"$r")"); nd+=("$(cut -f3 <<<"$r")")
  done
  printf '| %s | %s | %s | %s | %s | %.1f %% | %.1f %% |\n' "$label" \
    "$(printf '%s\n' "${om[@]}" | stats)" "$(printf '%s\n' "${nm[@]}" | stats)" \
    "$(printf '%s\n' "${oc[@]}" | stats)" "$(printf '%s\n' "${nc[@]}" | stats)" \
    "$(printf '%s\n' "${od[@]}" | median)" "$(printf '%s\n' "${nd[@]}" | median)"
}

echo "## Cluster A/B ($(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), ${DUR}s x $RUNS interleaved, best / median${PRIO[*]:+, under ${PRIO[*]}})"
echo
echo "| run | master Mpps, old | master Mpps, new | per consumer (min), old | per consumer (min), new | queue drops, old | new (medians) |"
echo "|---|---|---|---|---|---|---|"
ab "threads 1→1 (ip hash)" threads 1 ip
ab "threads 1→1 (round-robin)" threads 1 round-robin
ab "threads 1→2 balanced (ip hash)" threads 2 ip
ab "threads 1→2 fan-out" threads 2 fanout
ab "processes 1→1 (ip hash)" procs 1 ip
ab "processes 1→2 balanced (ip hash)" procs 2 ip
ab "processes 1→2 fan-out" procs 2 fanout
ab "processes 1→2 fan-out, consumer of queue 0 alone on core 1" procs 2 fanout 1
ab "threads 1→2 balanced (5tuple)" threads 2 5tuple
tp=()
for ((k = 0; k < RUNS; k++)); do tp+=("$(testpmd)"); done
echo
echo "dpdk-testpmd io, net_null0 ↔ net_null1, 1 core (best / median of $RUNS): $(printf '%s\n' "${tp[@]}" | stats) Mpps (runs: ${tp[*]})"
