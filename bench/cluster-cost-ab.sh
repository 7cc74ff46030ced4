#!/usr/bin/env bash
# bench/cluster-cost-ab.sh EXAMPLE_BIN...: the cluster's single-core CPU cost per packet
# (crates/linerate/examples/cluster_cost.rs: the built-in source into lent frames, the ip hash,
# `distribute` to one queue, its consumer reading and releasing, all in one thread on core 0,
# CPU time from schedstat) for several builds of the example, rotated call by call so that
# every build sees the same moments of a loaded machine. Each call is 3 rounds of PACKETS
# packets with the frames' stagger off and on; prints the build index and that call's two
# medians (ns/packet, not staggered and staggered), then each build's median of the calls.
#
#   cargo build --release -p linerate --example cluster_cost   # in each tree, then copy it
#   ROUNDS=6 bash bench/cluster-cost-ab.sh /tmp/old/cluster_cost /tmp/new/cluster_cost
#
# No core-to-core traffic (the real rows' consumer is on another core): this splits the
# master's own work, bench/cluster-ab.sh and bench/cluster-cpu.sh measure the rows. Never run
# in CI.
set -uo pipefail
ROUNDS=${ROUNDS:-6}; PACKETS=${PACKETS:-2000000}
B=("$@")
[ ${#B[@]} -gt 0 ] || { echo "usage: bench/cluster-cost-ab.sh EXAMPLE_BIN..." >&2; exit 2; }
nb=${#B[@]}
out=$(mktemp)
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%MZ)"
echo "# build not_staggered staggered (ns/packet, CPU time)"
for ((r = 0; r < ROUNDS; r++)); do
  for ((j = 0; j < nb; j++)); do
    k=$(((r + j) % nb))
    m=$(taskset -c 0 "${B[$k]}" 3 "$PACKETS" | tail -1 |
      sed -E 's/.*not staggered ([0-9.]+), staggered ([0-9.]+).*/\1 \2/')
    echo "$k $m" | tee -a "$out"
  done
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%MZ)"
sort -n "$out" | awk '
  function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
  { if ($1 != k && NR > 1) { printf "build %d: median %.2f not staggered, %.2f staggered\n", k, med(x, n), med(y, n); n = 0 }
    k = $1; n++; x[n] = $2; y[n] = $3 }
  END { printf "build %d: median %.2f not staggered, %.2f staggered\n", k, med(x, n), med(y, n) }'
rm -f "$out"
