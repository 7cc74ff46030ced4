#!/usr/bin/env bash
# bench/cluster-xdp-ab.sh OLD_BIN NEW_BIN [RUNS] [SECS]: a cluster master reading an xdp: input,
# two builds interleaved (old, new, old, new, ...). A veth pair with two receive queues a side
# between two namespaces; `linerate gen --engine live` (the NEW build) floods vA from CPU 0 with
# frames of SIZE bytes (default 64) and 256 flows; `linerate balance -i xdp:vB --threads -n 1
# -g CORES` runs in the other namespace (default 1:1: master and consumer thread on CPU 1;
# CORES=0:1 puts the master on the generator's CPU, where the kernel also copies each frame into
# the UMEM, and the consumer on CPU 1). Each run prints the master's receive rate (median of its
# per-second figures while the generator sends), the consumer's, the frames the master copied and
# the input's kernel drops. Root; never run in CI.
#
#   git worktree add /tmp/lr-old be96072 && (cd /tmp/lr-old && cargo build --release -p linerate-cli)
#   CORES=0:1 bash bench/cluster-xdp-ab.sh /tmp/lr-old/target/release/linerate target/release/linerate 5
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/cluster-xdp-ab.sh OLD_BIN NEW_BIN [RUNS] [SECS]}
NEW=${2:?usage: bench/cluster-xdp-ab.sh OLD_BIN NEW_BIN [RUNS] [SECS]}
RUNS=${3:-5}
SECS=${4:-4}
SIZE=${SIZE:-64}
CORES=${CORES:-1:1} # balance -g: the master's core, then the consumer thread's
OUT=$(mktemp -d /dev/shm/lr-cxab.XXXXXX)
A=lr-cxa-$$; B=lr-cxb-$$
cleanup() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
ip netns add "$A"; ip netns add "$B"
ip link add vA netns "$A" numtxqueues 2 numrxqueues 2 type veth peer name vB netns "$B" \
  numtxqueues 2 numrxqueues 2
for n in "$A" "$B"; do
  ip -n "$n" link set lo up
  ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
done
ip -n "$A" link set vA up; ip -n "$B" link set vB up
ip netns exec "$A" ethtool -K vA sg off >/dev/null 2>&1 || true
MACA=$(ip -n "$A" -o link show vA | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)
MACB=$(ip -n "$B" -o link show vB | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)

one() { # BIN -> "master_mpps<TAB>consumer_mpps<TAB>copied<TAB>kernel_drops"
  local bin=$1
  ip netns exec "$B" "$bin" balance -i xdp:vB --threads -n 1 -g "$CORES" \
    -t $((SECS + 2)) --json >"$OUT/m.json" 2>"$OUT/m.err" &
  local mp=$!
  sleep 1
  ip netns exec "$A" taskset -c 0 "$NEW" gen -o xdp:vA --engine live --dst-mac "$MACB" \
    --src-mac "$MACA" --src-ip 198.18.0.1 --dst-ip 198.18.0.2 --flows 256 --size "$SIZE" \
    --no-probe -t "$SECS" -q >"$OUT/g.out" 2>&1 || true
  wait "$mp" || { cat "$OUT/m.err" >&2; return 1; }
  python3 - "$OUT/m.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ticks = [l for l in lines if l["type"] == "stats"]
summ = [l for l in lines if l["type"] == "summary"][-1]
# Per-second rates from successive ticks; keep the seconds with traffic (above 10 % of the best).
rates, cons = [], []
for a, b in zip(ticks, ticks[1:]):
    dt = (b["elapsed_ms"] - a["elapsed_ms"]) / 1e3
    rates.append((b["rx"] - a["rx"]) / dt)
    cons.append((b["delivered"] - a["delivered"]) / dt)
best = max(rates) if rates else 0
busy = sorted(r for r in rates if r > 0.1 * best)
busyc = sorted(c for r, c in zip(rates, cons) if r > 0.1 * best)
med = lambda v: v[len(v) // 2] if v else 0
print("%.3f\t%.3f\t%d\t%d" % (med(busy) / 1e6, med(busyc) / 1e6, summ["copied"], summ["input_drops"]))
PY
}

stats() { sort -g | awk '{a[NR]=$1} END {printf "%.3f / %.3f", a[NR], a[int((NR+1)/2)]}'; }
echo "## Cluster with an xdp: input, ${SIZE} B frames, A/B ($(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS}s x $RUNS interleaved, balance -g $CORES)"
echo
echo "| round | build | master Mpps | consumer Mpps | copied | input kernel drops |"
echo "|---|---|---|---|---|---|"
om=(); nm=(); oc=(); nc=()
for ((k = 1; k <= RUNS; k++)); do
  for side in old new; do
    if [ $side = old ]; then bin=$OLD; else bin=$NEW; fi
    r=$(one "$bin")
    IFS=$'\t' read -r m c cp dr <<<"$r"
    echo "| $k | $side | $m | $c | $cp | $dr |"
    if [ $side = old ]; then om+=("$m"); oc+=("$c"); else nm+=("$m"); nc+=("$c"); fi
  done
done
echo
echo "master Mpps best / median: old $(printf '%s\n' "${om[@]}" | stats), new $(printf '%s\n' "${nm[@]}" | stats)"
echo "consumer Mpps best / median: old $(printf '%s\n' "${oc[@]}" | stats), new $(printf '%s\n' "${nc[@]}" | stats)"
