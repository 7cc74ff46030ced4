#!/usr/bin/env bash
# bench/kafka-ab.sh OLD NEW [ROUNDS]: flows with and without --kafka, an older build against a
# newer one, interleaved round by round against one broker (bench/kafka.sh's capture, broker on
# core ${BROKER_CPU:-0}, tools on core ${TOOL_CPU:-1}). Per round: OLD and NEW with the whole
# process pinned (taskset -c), then NEW with only the packet thread pinned (flows -g) if it has
# -g. Prints the packet path's rate (the summary's pps) per run and the medians' ratios, and the
# CPU time of the whole process (perf stat task-clock, ms: every thread, librdkafka's too).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1 NEW=$2 ROUNDS=${3:-5}
TOOL_CPU=${TOOL_CPU:-1}
BROKER_CPU=${BROKER_CPU:-0}
trap 'echo "bench/kafka-ab.sh: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR
CAP=$PWD/bench/out/flows-3000000-100000.pcap
[ -f "$CAP" ] || python3 bench/mkflows.py "$CAP" 3000000 100000
cat "$CAP" >/dev/null
W=$(mktemp -d "${TMPDIR:-/tmp}/linerate-kafka-ab.XXXXXXXX")
KAFKA_DIR=""
cleanup() { [ -n "$KAFKA_DIR" ] && bash scripts/kafka.sh stop "$KAFKA_DIR" || true; rm -rf "$W"; }
trap cleanup EXIT
env_out=$(KAFKA_CPUS=$BROKER_CPU bash scripts/kafka.sh start --owner $$)
eval "$env_out"
pps() { python3 -c 'import json,sys; d=json.loads([l for l in open(sys.argv[1]) if "\"summary\"" in l][-1]); print(round(d["pps"]), d.get("kafka",{}).get("acked","-"))' "$1"; }
run() { # label, command...
  local l=$1; shift
  perf stat -x, -e task-clock -o "$W/cpu" "$@" -i "$CAP" -w /dev/null --json 2>"$W/o.json" >/dev/null ||
    { echo "$l failed: $(tail -n 2 "$W/o.json")" >&2; return 1; }
  read -r p acked < <(pps "$W/o.json")
  cpu=$(awk -F, '/task-clock/ { printf "%.0f", $1 }' "$W/cpu")
  echo "$l $p $cpu" | tee -a "$W/all" >&2
}
echo "kafka A/B $(date -u +%Y-%m-%dT%H:%MZ), load $(cut -d' ' -f1-3 /proc/loadavg), broker $KAFKA_BROKER on core $BROKER_CPU"
for r in $(seq 1 "$ROUNDS"); do
  run old-base taskset -c "$TOOL_CPU" "$OLD" flows
  run old-kafka taskset -c "$TOOL_CPU" "$OLD" flows --kafka "$KAFKA_BROKER/o$r" --probe-id ab
  run new-base taskset -c "$TOOL_CPU" "$NEW" flows
  run new-kafka taskset -c "$TOOL_CPU" "$NEW" flows --kafka "$KAFKA_BROKER/n$r" --probe-id ab
  if "$NEW" flows --help | grep -q -- "-g, --core"; then
    run new-g-base "$NEW" flows -g "$TOOL_CPU"
    run new-g-kafka "$NEW" flows -g "$TOOL_CPU" --kafka "$KAFKA_BROKER/g$r" --probe-id ab
  fi
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W/all" <<'PY'
import sys, statistics as st
runs, cpu = {}, {}
for l in open(sys.argv[1]):
    k, p, c = l.split()
    runs.setdefault(k, []).append(int(p))
    cpu.setdefault(k, []).append(int(c))
print("| run | packets/s (median) | Mpps per round | CPU ms (median) | CPU ms per round |")
print("|---|---|---|---|---|")
for k, v in runs.items():
    print(f"| {k} | {st.median(v):,.0f} | {' '.join(f'{x/1e6:.2f}' for x in v)} | {st.median(cpu[k]):.0f} | {' '.join(map(str, cpu[k]))} |")
m = {k: st.median(v) for k, v in runs.items()}
for pre in ("old", "new", "new-g"):
    if f"{pre}-base" in m:
        print(f"{pre}: kafka/base = {m[pre+'-kafka']/m[pre+'-base']:.2f}x")
PY
