#!/usr/bin/env bash
# Flow records into Apache Kafka: `linerate flows --kafka` against `linerate flows` without Kafka
# and against pmacct (Debian's pmacctd reading the same capture with its Kafka plugin), with the
# same broker, in one run.
#
#   bash bench/kafka.sh [PACKETS] [FLOWS]
#   LR=/tmp/linerate-old PIN=process PMACCT=0 bash bench/kafka.sh   # an older build, no pmacct
#
# The capture (bench/mkflows.py, kept in bench/out/, shared with bench/flows.sh) has PACKETS
# packets (default 3 M) in FLOWS bidirectional conversations (default 100 000). A single-node
# Kafka 3.9 broker comes from scripts/kafka.sh (topics made on first use, 4 partitions) and is
# pinned to core ${BROKER_CPU:-0} from its start; the tools run on core ${TOOL_CPU:-1}. PIN says
# what is pinned there, the same for linerate with and without Kafka:
#   PIN=thread (default): linerate's packet thread (`flows -g TOOL_CPU`); its export threads
#     (Kafka's producer thread, librdkafka's) are left to the scheduler, as a probe is deployed:
#     the packet thread on its own core, the export beside it. Without Kafka there are no other
#     threads, so both runs give the packet thread the same core.
#   PIN=process: the whole process (`taskset -c TOOL_CPU`): the packet thread, the producer
#     thread and librdkafka's threads share one core.
# pmacct is pinned whole (`taskset -c TOOL_CPU`) in both: its core process and plugin share it.
# RUNS (default 3) rounds of: flows without Kafka, flows with Kafka, pmacct; medians are printed.
#
# Figures: packets/s of the packet path (linerate: the summary's pps, the loop alone; pmacct:
# PACKETS over the time its core process took to read the file, from its start less the 1 s
# pcap_savefile_delay to its "finished reading" log line); seconds from the tool's start to the
# last record's timestamp in the topic (when everything had reached Kafka); and, read back from
# the first round's topics with Kafka's console consumer: records, the packets they count and
# the bidirectional flows (distinct canonical 5-tuples) they cover, next to the capture's own
# (linerate's count without Kafka). pmacct's records are unidirectional (aggregate: src_host,
# dst_host, src_port, dst_port, proto), about two per conversation.
#
# pmacct's settings (1.7.7), found by trying on smaller captures of the same kind: the ZeroMQ
# queue between its core process and the plugin with the "large" buffering profile
# (plugin_pipe_zmq: true, plugin_pipe_zmq_profile: large) and a plugin cache larger than the
# distinct aggregates of one purge interval (kafka_cache_entries: 400009, ~1.6 GB). With the
# default home-grown queue, another profile, or the default cache (16 411 entries), it read every
# packet of a savefile but its records counted 1 to 30% of them, with no warning in its log;
# with these, 90 to 100%. pcap_savefile_wait keeps it up after the file so its plugin can purge
# (every second, kafka_refresh_time) until the topic stops growing; then SIGINT ends it. A
# print plugin's output file is rewritten at every purge unless print_output_file_append is
# set: counting from it undercounts too. Needs python3, Java 17 and Maven (scripts/setup.sh --tests) and
# pmacct (apt-get install pmacct; skipped with a note if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
PKTS=${1:-3000000}
FLOWS=${2:-100000}
RUNS=${RUNS:-3}
TOOL_CPU=${TOOL_CPU:-1}
BROKER_CPU=${BROKER_CPU:-0}
PIN=${PIN:-thread}
# A step that fails says which (a bare `exit 1` from set -e says nothing).
trap 'echo "bench/kafka.sh: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR
case "$PIN" in
  thread) pin_lr() { "$LR" "$1" -g "$TOOL_CPU" "${@:2}"; } ;;
  process) pin_lr() { taskset -c "$TOOL_CPU" "$LR" "$@"; } ;;
  *) echo "PIN=$PIN: thread or process" >&2; exit 2 ;;
esac
OUT=bench/out
mkdir -p "$OUT"
# LR=BINARY: another linerate (an A/B against an older build); else this tree's, built now.
if [ -z "${LR:-}" ]; then
  cargo build --release -q -p linerate-cli
  LR=$PWD/target/release/linerate
fi
CAP=$PWD/$OUT/flows-$PKTS-$FLOWS.pcap
if [ ! -f "$CAP" ]; then
  echo "making $CAP ..." >&2
  python3 bench/mkflows.py "$CAP.tmp" "$PKTS" "$FLOWS" && mv "$CAP.tmp" "$CAP"
fi
cat "$CAP" >/dev/null
WORK=$(mktemp -d "${TMPDIR:-/tmp}/linerate-bench-kafka.XXXXXXXX")
KAFKA_DIR=""
pm=""
cleanup() {
  # A pmacctd still running (the run ended early) would keep the broker's topic and, under
  # `flock bench.lock`, the lock (it inherits the descriptor).
  if [ -n "$pm" ]; then
    kill -KILL -- -"$pm" 2>/dev/null || true
  fi
  [ -n "$KAFKA_DIR" ] && bash scripts/kafka.sh stop "$KAFKA_DIR" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# Pinned from its start (KAFKA_CPUS): `taskset -a -p` on the running JVM raced with the threads
# it starts and ends, and failed now and then right after the start.
env_out=$(KAFKA_CPUS=$BROKER_CPU bash scripts/kafka.sh start --owner $$)
eval "$env_out"
BROKER=$KAFKA_BROKER
LIBS=$(bash scripts/kafka.sh fetch)
echo "broker $BROKER (pid $KAFKA_PID, core $BROKER_CPU), tools on core $TOOL_CPU (PIN=$PIN), $RUNS rounds" >&2

now() { date +%s.%N; }
jq_get() { python3 -c 'import json,sys; d=json.loads([l for l in open(sys.argv[1]) if "\"summary\"" in l][-1]); v=d
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"; }
# Messages in a topic (sum of the partitions' end offsets); 0 while it does not exist yet
# (GetOffsetShell then exits 1, which under pipefail and set -e ended the whole run).
topic_count() {
  { java -cp "$LIBS/*" -Dlog4j.configuration="file:$KAFKA_DIR/tools-log4j.properties" \
    org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$BROKER" --topic "$1" --time -1 \
    2>/dev/null || true; } | awk -F: '{ s += $3 } END { print s + 0 }'
}
# Reads a whole topic: one line per message, "CreateTime:MS<TAB>KEY<TAB>VALUE".
dump_topic() {
  local n
  n=$(topic_count "$1")
  [ "$n" -gt 0 ] || { : >"$2"; return; }
  java -cp "$LIBS/*" -Dlog4j.configuration="file:$KAFKA_DIR/tools-log4j.properties" \
    org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BROKER" --topic "$1" \
    --from-beginning --max-messages "$n" --timeout-ms 60000 \
    --property print.timestamp=true --property print.key=true >"$2" 2>/dev/null
}
# records, packets, flows, last timestamp (s) of a dumped topic; $2: lr or pm.
summarize() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
recs = pkts = 0
flows = set()
last = 0
for line in open(sys.argv[1]):
    ts, key, val = line.rstrip("\n").split("\t", 2)
    last = max(last, int(ts.split(":")[1]))
    d = json.loads(val)
    recs += 1
    if sys.argv[2] == "lr":
        pkts += d["spkts"] + d["dpkts"]
        flows.add(key)
    else:
        pkts += d["packets"]
        a = (d.get("ip_src"), d.get("port_src", 0))
        b = (d.get("ip_dst"), d.get("port_dst", 0))
        flows.add((min(a, b), max(a, b), d.get("ip_proto")))
print(recs, pkts, len(flows), last / 1000)
EOF
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

HAVE_PM=${PMACCT:-1}
command -v pmacctd >/dev/null || { HAVE_PM=0; echo "pmacctd missing: skipped (apt-get install pmacct)" >&2; }
: >"$WORK/base.pps"; : >"$WORK/lr.pps"; : >"$WORK/lr.wall"; : >"$WORK/pm.pps"; : >"$WORK/pm.wall"
for r in $(seq 1 "$RUNS"); do
  pin_lr flows -i "$CAP" -w /dev/null --json 2>"$WORK/base$r.json" ||
    { echo "round $r: linerate flows exited $?: $(tail -n 3 "$WORK/base$r.json")" >&2; exit 1; }
  jq_get "$WORK/base$r.json" pps >>"$WORK/base.pps"

  t0=$(now)
  set +e
  pin_lr flows -i "$CAP" -w /dev/null --json --kafka "$BROKER/lr-$r" \
    --probe-id bench 2>"$WORK/lr$r.json"
  rc=$?
  set -e
  t1=$(now)
  [ $rc = 0 ] || echo "round $r: linerate flows --kafka exited $rc: $(tail -n 1 "$WORK/lr$r.json")" >&2
  jq_get "$WORK/lr$r.json" pps >>"$WORK/lr.pps"
  echo "$t0" >"$WORK/lr$r.t0"
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }' >>"$WORK/lr.wall"

  if [ $HAVE_PM = 1 ]; then
    cat >"$WORK/pm$r.conf" <<EOF
daemonize: false
pcap_savefile: $CAP
pcap_savefile_wait: true
pcap_savefile_delay: 1
logfile: $WORK/pm$r.log
plugins: kafka[k]
kafka_broker_host[k]: ${BROKER%:*}
kafka_broker_port[k]: ${BROKER#*:}
kafka_topic[k]: pm-$r
kafka_output[k]: json
kafka_refresh_time[k]: 1
aggregate[k]: src_host, dst_host, src_port, dst_port, proto
plugin_pipe_zmq[k]: true
plugin_pipe_zmq_profile[k]: large
kafka_cache_entries[k]: 400009
EOF
    t0=$(now)
    setsid taskset -c "$TOOL_CPU" pmacctd -f "$WORK/pm$r.conf" >/dev/null 2>&1 &
    pm=$!
    until grep -q "finished reading PCAP capture file" "$WORK/pm$r.log" 2>/dev/null; do
      kill -0 $pm 2>/dev/null || { echo "round $r: pmacctd ended early (log: $WORK/pm$r.log)" >&2; break; }
      sleep 0.02
    done
    t1=$(now)
    awk -v p="$PKTS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", p / (b - a - 1) }' >>"$WORK/pm.pps"
    echo "$t0" >"$WORK/pm$r.t0"
    # The plugin purges every second: wait until the topic stops growing, then stop pmacct.
    prev=-1; cur=$(topic_count "pm-$r")
    while [ "$cur" != "$prev" ]; do sleep 3; prev=$cur; cur=$(topic_count "pm-$r"); done
    kill -INT -- -$pm 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 $pm 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- -$pm 2>/dev/null || true
    wait $pm 2>/dev/null || true
    pm=""
  fi
done

# What arrived (first round's topics).
dump_topic lr-1 "$WORK/lr.dump"
read -r lr_recs lr_pkts lr_flows lr_last < <(summarize "$WORK/lr.dump" lr)
# Seconds from the start to the last record; "none arrived" for an empty topic (no timestamp).
e2e() { awk -v a="$1" -v r="$2" -v b="$3" 'BEGIN { if (r + 0 == 0) print "none arrived"; else printf "%.2f", b - a }'; }
lr_e2e=$(e2e "$(cat "$WORK/lr1.t0")" "$lr_recs" "$lr_last")
base_flows=$(jq_get "$WORK/base1.json" flows)
base_pkts=$(jq_get "$WORK/base1.json" flow_packets)
lr_acked=$(jq_get "$WORK/lr1.json" kafka.acked)
lr_failed=$(jq_get "$WORK/lr1.json" kafka.failed)
base_pps=$(median <"$WORK/base.pps")
lr_pps=$(median <"$WORK/lr.pps")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
n() { printf "%'.0f" "$1"; }

echo
echo "Flow records into Kafka: $PKTS packets in $FLOWS flows, broker on core $BROKER_CPU, tools on core $TOOL_CPU (PIN=$PIN), medians of $RUNS ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg) at the end)"
echo
echo "| tool | packets/s | vs flows without Kafka | s to the last record in Kafka | records in Kafka | packets in them | flows in them |"
echo "|---|---|---|---|---|---|---|"
echo "| linerate flows -w /dev/null (no Kafka) | $(n "$base_pps") | 1.00x | - | - | $(n "$base_pkts") (in flows) | $(n "$base_flows") |"
echo "| linerate flows --kafka | $(n "$lr_pps") | $(ratio "$lr_pps" "$base_pps") | $lr_e2e | $(n "$lr_recs") ($(n "$lr_acked") acked, $(n "$lr_failed") failed) | $(n "$lr_pkts") | $(n "$lr_flows") |"
if [ $HAVE_PM = 1 ]; then
  dump_topic pm-1 "$WORK/pm.dump"
  read -r pm_recs pm_pkts pm_flows pm_last < <(summarize "$WORK/pm.dump" pm)
  pm_e2e=$(e2e "$(cat "$WORK/pm1.t0")" "$pm_recs" "$pm_last")
  pm_pps=$(median <"$WORK/pm.pps")
  echo "| pmacctd 1.7.7, Kafka plugin (ZeroMQ queue, large) | $(n "$pm_pps") | $(ratio "$pm_pps" "$base_pps") | $pm_e2e | $(n "$pm_recs") (unidirectional) | $(n "$pm_pkts") | $(n "$pm_flows") |"
fi
. bench/lib.sh
goal "flows --kafka vs flows without" "$lr_pps" "linerate flows -w /dev/null" "$base_pps" 0.9 pps
echo
echo "per round, packets/s: flows $(tr '\n' ' ' <"$WORK/base.pps"); flows --kafka $(tr '\n' ' ' <"$WORK/lr.pps"); pmacctd $(tr '\n' ' ' <"$WORK/pm.pps")"
